//! Ring memory of one port queue pair (rawq's `ModelPort`), laid out as libmlx5 hands it out
//! (rdma-core providers/mlx5/verbs.c: page-aligned SQ/RQ/CQ buffers, CQEs initialised to
//! `MLX5_CQE_INVALID << 4` by `mlx5_alloc_cq_buf`, a doorbell-record page, a UAR page with the
//! BlueFlame register at 0x800).

use memmap2::MmapMut;

use crate::error::{Error, Result};
use crate::wire::cqe;

const PAGE: usize = 4096;

/// Offsets of the doorbell words in the doorbell page: the RQ's,
pub const DB_RQ: usize = 0;
/// the SQ's,
pub const DB_SQ: usize = 4;
/// the TX CQ's,
pub const DB_TXCQ: usize = 64;
/// the RX CQ's.
pub const DB_RXCQ: usize = 128;
/// The value a CQ's creator leaves in its arm word (`dbrec[1]`) before [`crate::hw::Hw::create_cq`]
/// (libmlx5 zeroes it and never reads it back; the emulator, the model's port and tests write
/// this): no `mlx5_arm_cq` word can have bits 30..31 set (rdma-core providers/mlx5/cq.c
/// `mlx5_arm_cq`: sn is 2 bits at 28), so the first arm, even sn = 0, cmd = 0, ci = 0 (all
/// zero), is seen as a change.
pub(crate) const ARM_SENTINEL: u32 = 0xffff_ffff;

/// BlueFlame register offset in the UAR page
pub const BF_OFFSET: usize = 0x800;
/// and the size of each of its two halves.
pub const BF_SIZE: u32 = 256;

/// Geometry of one queue pair's rings.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// SQ WQEBBs.
    pub sq_cnt: u32,
    /// TX CQ slots.
    pub txcq_cnt: u32,
    /// RQ WQEs.
    pub rq_cnt: u32,
    /// Bytes per RQ WQE.
    pub rq_stride: u32,
    /// RX CQ slots.
    pub rxcq_cnt: u32,
}

/// One anonymous mapping holding SQ, TX CQ, RQ, RX CQ, the doorbell page and a fake UAR page,
/// each page aligned.
pub struct QueueMem {
    _map: MmapMut,
    base: *mut u8,
    /// The geometry it was made for.
    pub g: Geometry,
    /// Offset of the SQ.
    pub sq: usize,
    /// Offset of the TX CQ.
    pub txcq: usize,
    /// Offset of the RQ.
    pub rq: usize,
    /// Offset of the RX CQ.
    pub rxcq: usize,
    /// Offset of the doorbell page.
    pub db: usize,
    /// Offset of the UAR page.
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
    /// Maps and lays out the rings of `g`, every CQE invalid.
    ///
    /// # Errors
    /// [`Error::Os`] if the mapping cannot be had.
    pub fn new(g: Geometry) -> Result<QueueMem> {
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
        // Both CQs' arm words start as the impossible arm the device compares against
        // (ARM_SENTINEL; the device itself never writes a doorbell record).
        for w in [DB_TXCQ + 4, DB_RXCQ + 4] {
            for (k, b) in ARM_SENTINEL.to_be_bytes().into_iter().enumerate() {
                m.write_byte(db + w + k, b);
            }
        }
        Ok(m)
    }

    /// Pointer to byte `off` of the mapping.
    #[inline]
    pub fn ptr(&self, off: usize) -> *mut u8 {
        self.base.wrapping_add(off)
    }

    fn write_byte(&self, off: usize, v: u8) {
        // SAFETY: `off` is inside the mapping (callers compute it from the geometry).
        unsafe { *self.ptr(off) = v };
    }
}
