//! Ring memory of one modelled queue pair, laid out as libmlx5 hands it out, and the model's
//! CQE writer.

use memmap2::MmapMut;

use crate::dv::mmio;
use crate::dv::wire::cqe;
use crate::error::{Error, Result};

const PAGE: usize = 4096;

/// Offsets of the doorbell words in the doorbell page.
pub(crate) const DB_RQ: usize = 0;
pub(crate) const DB_SQ: usize = 4;
pub(crate) const DB_TXCQ: usize = 64;
pub(crate) const DB_RXCQ: usize = 128;
/// BlueFlame register offset in the UAR page and the size of each of its two halves.
pub(crate) const BF_OFFSET: usize = 0x800;
pub(crate) const BF_SIZE: u32 = 256;

/// Geometry of one queue pair's rings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub sq_cnt: u32,
    pub txcq_cnt: u32,
    pub rq_cnt: u32,
    pub rq_stride: u32,
    pub rxcq_cnt: u32,
}

/// One anonymous mapping holding SQ, TX CQ, RQ, RX CQ, the doorbell page and a fake UAR page,
/// each page aligned.
pub(crate) struct QueueMem {
    _map: MmapMut,
    base: *mut u8,
    pub g: Geometry,
    pub sq: usize,
    pub txcq: usize,
    pub rq: usize,
    pub rxcq: usize,
    pub db: usize,
    pub uar: usize,
}

// SAFETY: the mapping is only accessed through raw pointers under the model's protocol (device
// side under the port lock, driver side by the one thread driving the queue); it never moves.
unsafe impl Send for QueueMem {}
// SAFETY: as above.
unsafe impl Sync for QueueMem {}

fn up(x: usize) -> usize {
    x.div_ceil(PAGE) * PAGE
}

impl QueueMem {
    pub(crate) fn new(g: Geometry) -> Result<QueueMem> {
        let sq = 0;
        let txcq = sq + up(g.sq_cnt as usize * 64);
        let rq = txcq + up(g.txcq_cnt as usize * 64);
        let rxcq = rq + up((g.rq_cnt * g.rq_stride) as usize);
        let db = rxcq + up(g.rxcq_cnt as usize * 64);
        let uar = db + PAGE;
        let len = uar + PAGE;
        let mut map = MmapMut::map_anon(len).map_err(|e| Error::os("mmap(model rings)", e))?;
        let base = map.as_mut_ptr();
        let m = QueueMem {
            _map: map,
            base,
            g,
            sq,
            txcq,
            rq,
            rxcq,
            db,
            uar,
        };
        for i in 0..g.txcq_cnt as usize {
            m.write_byte(txcq + i * 64 + 63, cqe::OP_OWN_INVALID);
        }
        for i in 0..g.rxcq_cnt as usize {
            m.write_byte(rxcq + i * 64 + 63, cqe::OP_OWN_INVALID);
        }
        Ok(m)
    }

    /// Pointer to byte `off` of the mapping.
    #[inline]
    pub(crate) fn ptr(&self, off: usize) -> *mut u8 {
        self.base.wrapping_add(off)
    }

    fn write_byte(&self, off: usize, v: u8) {
        // SAFETY: `off` is inside the mapping (callers compute it from the geometry).
        unsafe { *self.ptr(off) = v };
    }

    /// Copies `out.len()` bytes from offset `off`.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) {
        // SAFETY: callers stay inside the mapping; the driver has published these bytes with a
        // release store of a doorbell record that the model loaded with acquire.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(off), out.as_mut_ptr(), out.len()) };
    }

    /// Loads a doorbell word (acquire), host order.
    pub(crate) fn db_load(&self, at: usize) -> u32 {
        let p = std::ptr::NonNull::new(self.ptr(self.db + at) as *mut u32);
        p.map(mmio::dbrec_load).unwrap_or(0)
    }

    /// Reads the 8 bytes at byte `off` of the UAR page.
    pub(crate) fn uar_read(&self, off: usize) -> [u8; 8] {
        // SAFETY: inside the UAR page; a volatile read, as of a register.
        let v = unsafe { std::ptr::read_volatile(self.ptr(self.uar + off) as *const u64) };
        v.to_ne_bytes()
    }
}

/// The device side of one CQ: producer index and where the ring is.
#[derive(Debug)]
pub(crate) struct CqW {
    pub off: usize,
    pub cnt: u32,
    pub log: u32,
    pub pi: u32,
    pub db: usize,
}

impl CqW {
    pub(crate) fn new(off: usize, cnt: u32, db: usize) -> CqW {
        CqW {
            off,
            cnt,
            log: cnt.trailing_zeros(),
            pi: 0,
            db,
        }
    }

    /// Free slots: entries not yet released by the consumer index the driver published.
    pub(crate) fn space(&self, m: &QueueMem) -> u32 {
        let ci = m.db_load(self.db) & 0xff_ffff;
        let used = self.pi.wrapping_sub(ci) & 0xff_ffff;
        self.cnt.saturating_sub(used)
    }

    fn slot(&self, i: u32) -> usize {
        self.off + ((i & (self.cnt - 1)) as usize) * 64
    }

    /// Writes the 64 raw bytes of slot `pi + k` (mini-CQE arrays), no ownership byte semantics.
    pub(crate) fn write_raw(&self, m: &QueueMem, k: u32, bytes: &[u8; 64]) {
        let at = self.slot(self.pi.wrapping_add(k));
        // SAFETY: inside the CQ ring; the slot is free (checked with `space`).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), m.ptr(at), 64) };
    }

    /// Writes a CQE at the producer index: bytes 0..63 first, then `op_own` (with the owner bit
    /// of this pass) with release ordering; advances by `slots`.
    pub(crate) fn write(&mut self, m: &QueueMem, c: &[u8; 64], opcode: u8, format: u8, slots: u32) {
        let at = self.slot(self.pi);
        // SAFETY: inside the CQ ring; the slot is free (checked with `space`).
        unsafe { std::ptr::copy_nonoverlapping(c.as_ptr(), m.ptr(at), 63) };
        let owner = ((self.pi >> self.log) & 1) as u8;
        // SAFETY: the `op_own` byte of that slot.
        unsafe { mmio::op_own_store(m.ptr(at + 63), cqe::op_own(opcode, format, owner)) };
        self.pi = self.pi.wrapping_add(slots);
    }
}
