//! The send side: WQEs into the SQ, one doorbell per burst, completions every N WQEs.
//!
//! * One WQE per packet (`SEND`): control segment, Ethernet segment inlining the device's minimum
//!   header (18 or 0 bytes, [`DvCaps::min_inline`](super::rings::DvCaps::min_inline)), then one data
//!   pointer segment per buffer. A WQE that reaches the end of the ring continues at WQEBB 0.
//!   Single-buffer packets (the fast path) take one WQEBB each, written from a
//!   [`SendTemplate`] (a few 8-byte stores of precomputed big-endian words) in runs that stop
//!   at the ring's end, so the loop has no index wrap and no bounds check.
//! * The control segment's immediate (free for software on an Ethernet SEND) holds the number
//!   of pool buffers the WQE holds, which error recovery reads back.
//! * With [`DvCaps::empw`](super::rings::DvCaps::empw) and no minimum inline, single-buffer packets
//!   with the same checksum flags share **enhanced multi-packet WQEs** (opcode 0x29): title WQEBB =
//!   control + Ethernet segment without inline + the first data segments, then one data segment
//!   per packet, at most 32 packets / 60 DS per WQE.
//! * Completions: the last WQE of a burst asks for a CQE (CE = ALWAYS) once 128 packets (four
//!   full bursts: one CQE polled, its buffers put back in bulk, every fourth burst; the
//!   128 fill a queue cache of the default size that the bursts emptied) or `wqe_cnt / 8`
//!   WQEBBs have gone out since the last request. A CQE for WQE *k* completes every
//!   WQE up to *k* (the SQ completes in order): the buffers are found in a ring of buffer indices,
//!   cut per WQE by cumulative counters, so freeing is a walk with no allocation. The CQEs
//!   found by one poll are applied together: one bulk return of buffers to the cache. Every
//!   other WQE asks for "only the first error" (CE = 1, DPDK's `MLX5_COMP_ONLY_FIRST_ERR` in
//!   drivers/net/mlx5/mlx5_tx.h): after a send error the device writes one error CQE, not one
//!   per flushed WQE, so the TX CQ holds at most the requested CQEs plus that one whatever the
//!   SQ size (the request threshold keeps requests below the CQ size).
//! * `Tx::doorbell` holds all the barriers, in libmlx5's order (`post_send_db`): to-device
//!   barrier, doorbell record (BE32 of the 16-bit WQEBB producer counter), write-combining
//!   barrier, 8-byte write of the last WQE's first 8 bytes to the UAR register (alternating
//!   BlueFlame halves when the register has two), write-combining flush. The barriers per
//!   architecture are in `mmio` (rdma-core's util/udma_barrier.h).

mod completion;
mod empw;
mod tso;

use std::ptr::NonNull;

use super::cq::Cq;
use super::mmio;
use super::rings::{DvCaps, SqRing};
use super::wire::{cqe, ctrl, data, eth, Cqe, SendTemplate, WQEBB};
use crate::mempool::{PoolCache, Shared};
use crate::packet::{check_untagged, Packet};
use crate::stats::{Counter, StatsWriter};

/// Packets per completion request.
pub const COMP_THRESH_PKTS: u32 = 128;
/// Maximum packets in one eMPW WQE.
pub const EMPW_MAX_PKTS: u32 = 32;
/// Maximum DS of a WQE this driver writes.
pub const MAX_DS: u32 = 60;
/// Smallest frame the driver hands to the device (an Ethernet header).
pub const MIN_FRAME: usize = 14;

/// Bookkeeping of one WQE, stored at the slot of its first WQEBB.
#[derive(Clone, Copy, Default)]
struct WqeRec {
    /// WQEBB producer counter just after this WQE.
    end: u16,
    /// Buffer-ring producer counter just after this WQE.
    buf_end: u32,
    /// Packets posted, cumulative, after this WQE.
    pkt_end: u32,
    /// Bytes posted, cumulative, after this WQE.
    byte_end: u64,
}

/// An error completion taken off the send CQ.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TxErr {
    pub wqe: u16,
    pub syndrome: u8,
    pub vendor: u8,
    pub opcode: u8,
}

/// How a burst is written; chosen once per burst, so the per-packet loop is monomorphic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// SEND with 18 inline bytes.
    Inline18,
    /// SEND with no inline header.
    NoInline,
    /// eMPW for single-buffer packets, SEND without inline for the rest.
    Empw,
}

/// The send half of a DV queue.
pub struct Tx {
    base: *mut u8,
    mask: u32,
    wqe_cnt: u32,
    sqn: u32,
    lkey: u32,
    /// The pool `lkey` registers: only its packets can be sent.
    shared: &'static Shared,
    dbrec: NonNull<u32>,
    bf_reg: *mut u8,
    bf_size: u32,
    bf_off: u32,
    /// WQEBB producer counter (next free WQEBB).
    pi: u16,
    /// WQEBB consumer counter (first WQEBB not known to be complete).
    ci: u16,
    recs: Box<[WqeRec]>,
    bufs: Box<[u32]>,
    buf_mask: u32,
    buf_pi: u32,
    buf_ci: u32,
    pkts_posted: u32,
    pkts_done: u32,
    bytes_posted: u64,
    bytes_done: u64,
    unreq_pkts: u32,
    unreq_bbs: u32,
    req_thresh_bbs: u32,
    pending_reqs: u32,
    /// Whether any send has completed successfully since the queue was created.
    completed_any: bool,
    mode: Mode,
    tx_csum: bool,
    /// Largest TSO payload the device segments (0: no TSO).
    max_tso: u32,
    /// The port's largest frame, which TSO segments must fit (`None`: no port MTU).
    max_frame: Option<u32>,
    /// Why the first packet refused since the last [`Tx::take_refused`] was (an offload
    /// request this queue cannot carry out), for the queue's error.
    refused: Option<crate::error::TxRefusal>,
    /// The single-buffer SEND WQE's constant words, computed once (VPP style).
    tmpl: SendTemplate,
    pub(crate) cq: Cq,
}

// SAFETY: the SQ/CQ memory and the UAR register belong to the queue's control objects, kept alive
// with the queue; the queue is driven from one thread at a time.
unsafe impl Send for Tx {}

#[inline(always)]
fn cs_flags(p: &Packet, enabled: bool) -> u8 {
    // CS_L3 is bit 6 and CS_L4 bit 7 of the eth segment's `cs_flags`.
    let f = (p.offload.l3_csum as u8) << 6 | (p.offload.l4_csum as u8) << 7;
    f & 0u8.wrapping_sub(enabled as u8)
}

/// Checksum requests done in software, for a device without checksum offload (so that none is
/// ignored); the requests are cleared, so a packet left for a retry is not done twice.
#[cold]
fn software_csum(pkts: &mut [Packet]) {
    for p in pkts {
        let (l3, l4) = (p.offload.l3_csum, p.offload.l4_csum);
        if l3 | l4 {
            crate::packet::fill_packet_checksums(p, l3, l4);
            p.offload.l3_csum = false;
            p.offload.l4_csum = false;
        }
    }
}

/// Writes one single-buffer SEND WQE per packet of `src` into `wqes`, recording each buffer
/// in `bufs`, until a packet needs the general path (chained, or not longer than `min_len - 1`
/// bytes). `pi` is the WQEBB counter of the first slot. Returns the packets written and adds
/// their bytes to `bytes`.
///
/// The three slices have the same length, so the loop runs without index checks or wraps.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fast_run<const INLINE: bool>(
    tmpl: &SendTemplate,
    wqes: &mut [[u8; WQEBB]],
    bufs: &mut [u32],
    src: &[Packet],
    pi: u16,
    min_len: usize,
    shared: &Shared,
    bytes: &mut u64,
) -> usize {
    // The run never crosses the ring end nor a multiple of 256 WQEs (see `burst_send`): the
    // WQE index's low byte does not wrap inside it, so the memory-order control word just steps.
    let mut cw = tmpl.ctrl_raw(pi);
    // Buffer addresses from the pool's geometry, kept in registers: every packet sent here is
    // checked to be of this pool, so its own pool pointer need not be followed.
    let geo = shared.geometry();
    let mut k = 0;
    let mut b = 0u64;
    for ((w, slot), p) in wqes.iter_mut().zip(bufs.iter_mut()).zip(src) {
        let (off, len) = p.first_seg();
        let len = len as usize;
        // One buffer and no checksum request: one test; a checksum request picks the
        // Ethernet word, a chain stops the run.
        let o = &p.offload;
        let eth = if p.single_no_csum() {
            0
        } else if p.segment_count() == 1 {
            tmpl.eth_word(o.l3_csum, o.l4_csum)
        } else {
            break;
        };
        // TSO and VLAN insertion (`special`: one test of both) take the general path.
        if len < min_len || !p.is_from(shared) || o.special() {
            break;
        }
        let idx = p.buffer_index();
        let addr = geo.buf_ptr(idx) as u64 + off as u64;
        if INLINE {
            // SAFETY: `len` bytes at `addr` are the packet's data, in its buffer of this pool
            // (checked above), which the packet owns while this slice lives.
            let frame = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            tmpl.write_inline18(w, cw, eth, frame, addr);
        } else {
            tmpl.write(w, cw, eth, len as u32, addr);
        }
        *slot = idx;
        b += len as u64;
        cw = cw.wrapping_add(SendTemplate::IDX_STEP_RAW);
        k += 1;
    }
    *bytes = bytes.wrapping_add(b);
    k
}

impl Tx {
    /// The send half over `sq` and its CQ.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for a ring geometry the driver cannot use.
    pub(crate) fn new(
        sq: &SqRing,
        cq: &super::rings::CqRing,
        lkey: u32,
        caps: &DvCaps,
        pool: &crate::Mempool,
    ) -> crate::Result<Tx> {
        if !sq.wqe_cnt.is_power_of_two() || !(4..=32768).contains(&sq.wqe_cnt) {
            return Err(crate::Error::Config(format!(
                "SQ with {} WQEBBs: must be a power of two from 4 to 32768",
                sq.wqe_cnt
            )));
        }
        if !(sq.buf.as_ptr() as usize).is_multiple_of(WQEBB) {
            // (The eMPW loop writes data segments as 8-byte words.)
            return Err(crate::Error::Config(format!(
                "SQ buffer at {:p}: must be {WQEBB}-byte aligned (a WQEBB)",
                sq.buf.as_ptr()
            )));
        }
        if caps.min_inline != 0 && caps.min_inline as usize != eth::L2_INLINE {
            return Err(crate::Error::Unsupported(format!(
                "minimum inline header of {} bytes (only 0 and 18 are supported)",
                caps.min_inline
            )));
        }
        let mode = if caps.min_inline != 0 {
            Mode::Inline18
        } else if caps.empw {
            Mode::Empw
        } else {
            Mode::NoInline
        };
        let nbufs = (sq.wqe_cnt * 4) as usize;
        let tmpl = SendTemplate::new(sq.sqn, lkey, mode == Mode::Inline18, caps.tx_csum);
        Ok(Tx {
            tmpl,
            base: sq.buf.as_ptr(),
            mask: sq.wqe_cnt - 1,
            wqe_cnt: sq.wqe_cnt,
            sqn: sq.sqn,
            lkey,
            shared: pool.shared(),
            dbrec: sq.dbrec,
            bf_reg: sq.bf_reg.as_ptr(),
            bf_size: sq.bf_size,
            bf_off: 0,
            pi: 0,
            ci: 0,
            recs: vec![WqeRec::default(); sq.wqe_cnt as usize].into_boxed_slice(),
            bufs: vec![0u32; nbufs].into_boxed_slice(),
            buf_mask: nbufs as u32 - 1,
            buf_pi: 0,
            buf_ci: 0,
            pkts_posted: 0,
            pkts_done: 0,
            bytes_posted: 0,
            bytes_done: 0,
            unreq_pkts: 0,
            unreq_bbs: 0,
            req_thresh_bbs: (sq.wqe_cnt / 8).max(1),
            pending_reqs: 0,
            completed_any: false,
            mode,
            tx_csum: caps.tx_csum,
            max_tso: caps.max_tso,
            max_frame: None,
            refused: None,
            cq: Cq::new(cq)?,
        })
    }

    /// WQEBBs free for new WQEs.
    #[inline(always)]
    fn free_bbs(&self) -> u32 {
        self.wqe_cnt - self.pi.wrapping_sub(self.ci) as u32
    }

    /// Bounds the segments of TSO super-frames by the port's largest frame (its MTU + 18).
    pub(crate) fn set_max_frame(&mut self, max_frame: Option<u32>) {
        self.max_frame = max_frame;
    }

    /// Why a packet was refused since the last call (see `refused`).
    pub(crate) fn take_refused(&mut self) -> Option<crate::error::TxRefusal> {
        self.refused.take()
    }

    /// Whether the send WQEs carry the 18-byte inline L2 header.
    pub(crate) fn inlines_header(&self) -> bool {
        self.mode == Mode::Inline18
    }

    /// Packets handed to the device and not completed yet.
    pub fn outstanding(&self) -> u32 {
        self.pkts_posted.wrapping_sub(self.pkts_done)
    }

    /// The 64-byte WQEBB at producer counter `bb`.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    fn wqebb(&self, bb: u16) -> &mut [u8; 64] {
        let o = ((bb as u32 & self.mask) as usize) * WQEBB;
        // SAFETY: the slot is inside the SQ ring; WQEBBs between `ci` and `pi + free` belong to
        // software until the doorbell publishes them, and no two live references to one slot
        // are made (each WQE is written once, front to back).
        unsafe { &mut *(self.base.add(o) as *mut [u8; 64]) }
    }

    /// DS unit `k` of the WQE starting at WQEBB `bb`, wrapping at the ring end.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    fn ds(&self, bb: u16, k: u32) -> &mut [u8; 16] {
        let slot = (bb as u32).wrapping_add(k >> 2) & self.mask;
        let o = (slot as usize) * WQEBB + ((k & 3) as usize) * 16;
        // SAFETY: as in `wqebb`; a DS unit lies inside one WQEBB.
        unsafe { &mut *(self.base.add(o) as *mut [u8; 16]) }
    }

    #[inline(always)]
    fn push_buf(&mut self, idx: u32) {
        let i = (self.buf_pi & self.buf_mask) as usize;
        // SAFETY: `bufs.len() == buf_mask + 1` (set in `new`), so the masked index is in bounds.
        unsafe { *self.bufs.get_unchecked_mut(i) = idx };
        self.buf_pi = self.buf_pi.wrapping_add(1);
    }

    /// Accounts a WQE of `bbs` WQEBBs at `start` carrying `pkts` packets / `bytes` bytes. (The
    /// per-WQE bookkeeping lives in the WQE itself: `imm` holds the number of pool buffers the
    /// WQE holds; only WQEs that ask for a completion get a [`WqeRec`].)
    #[inline(always)]
    fn close_wqe(&mut self, start: u16, bbs: u32, pkts: u32, bytes: u64) {
        self.pi = start.wrapping_add(bbs as u16);
        self.pkts_posted = self.pkts_posted.wrapping_add(pkts);
        self.bytes_posted = self.bytes_posted.wrapping_add(bytes);
    }

    /// Records the state after the WQE at `last` (the last one posted), which asks for a CQE.
    #[inline(always)]
    fn record(&mut self, last: u16) {
        let rec = WqeRec {
            end: self.pi,
            buf_end: self.buf_pi,
            pkt_end: self.pkts_posted,
            byte_end: self.bytes_posted,
        };
        // SAFETY: `recs.len() == mask + 1` (set in `new`), so the masked index is in bounds.
        unsafe {
            *self
                .recs
                .get_unchecked_mut((last as u32 & self.mask) as usize) = rec
        };
    }

    /// Sends packets from the front of `pkts`; returns how many were handed to the device.
    /// Packets that cannot be sent at all (shorter than 14 bytes, more buffers than a WQE can
    /// point at, or buffers of another pool) are taken out of `pkts` too, freed and counted as
    /// `tx_drops`, but not in the count returned.
    pub(crate) fn burst(
        &mut self,
        pkts: &mut Vec<Packet>,
        stats: &StatsWriter,
        cache: &mut PoolCache,
    ) -> usize {
        if !self.tx_csum {
            software_csum(pkts);
        }
        match self.mode {
            Mode::Inline18 => self.burst_send::<true>(pkts, stats, cache),
            Mode::NoInline => self.burst_send::<false>(pkts, stats, cache),
            Mode::Empw => self.burst_empw(pkts, stats, cache),
        }
    }

    fn burst_send<const INLINE: bool>(
        &mut self,
        pkts: &mut Vec<Packet>,
        stats: &StatsWriter,
        cache: &mut PoolCache,
    ) -> usize {
        // Frames the one-WQEBB fast path takes: longer than the inline header (so the data
        // segment is not empty) and at least an Ethernet header.
        let min_len = if INLINE {
            eth::L2_INLINE + 1
        } else {
            MIN_FRAME
        };
        let total = pkts.len();
        let base = pkts.as_mut_ptr();
        // From here the Vec does not own its elements: each of the first `n` is moved into the
        // ring (its buffers recorded in `bufs`) or read out and freed, and the rest are moved
        // back to the front before `set_len` below. A panic in between would leak, not double
        // free.
        // SAFETY: shrinking the length to 0 only forgets elements (see above); none is dropped.
        unsafe { pkts.set_len(0) };
        let (pkts0, bbs0, bytes0) = (self.pkts_posted, self.pi, self.bytes_posted);
        let mut last = None;
        let (mut n, mut dropped) = (0, 0);
        while n < total {
            // Fast run: consecutive single-buffer packets into consecutive WQEBBs, up to the end
            // of the SQ ring or of the buffer ring (so that neither index wraps inside the run).
            let sq_slot = (self.pi as u32 & self.mask) as usize;
            let buf_slot = (self.buf_pi & self.buf_mask) as usize;
            // Also up to a multiple of 256 WQEs: the control word steps in memory order
            // (`SendTemplate::IDX_STEP_RAW`), which holds while the index's low byte does not wrap.
            let run = (self.free_bbs() as usize)
                .min(total - n)
                .min(self.wqe_cnt as usize - sq_slot)
                .min(self.bufs.len() - buf_slot)
                .min(256 - (self.pi & 0xff) as usize);
            // SAFETY: elements `n..n + run` of the Vec are initialized and not moved yet
            // (`n + run <= total`); they stay in place while this shared slice lives.
            let src = unsafe { std::slice::from_raw_parts(base.add(n), run) };
            // SAFETY: WQEBBs `sq_slot..sq_slot + run` lie inside the ring (`run <= wqe_cnt -
            // sq_slot`) and are free (`run <= free_bbs`): software owns them until the doorbell,
            // and nothing else refers to them while this slice lives.
            let wqes = unsafe {
                std::slice::from_raw_parts_mut(
                    self.base.add(sq_slot * WQEBB) as *mut [u8; WQEBB],
                    run,
                )
            };
            let k = fast_run::<INLINE>(
                &self.tmpl,
                wqes,
                &mut self.bufs[buf_slot..buf_slot + run],
                src,
                self.pi,
                min_len,
                self.shared,
                &mut self.bytes_posted,
            );
            if k > 0 {
                self.pi = self.pi.wrapping_add(k as u16);
                self.buf_pi = self.buf_pi.wrapping_add(k as u32);
                self.pkts_posted = self.pkts_posted.wrapping_add(k as u32);
                last = Some(self.pi.wrapping_sub(1));
                n += k;
                if k == run {
                    continue; // maybe more after a ring wrap
                }
            }
            if n == total {
                break;
            }
            // SAFETY: as above, `n < total`.
            let p = unsafe { &*base.add(n) };
            let single = p.segment_count() == 1 && p.len() >= min_len && p.is_from(self.shared);
            if single && !p.offload.special() {
                break; // the fast run stopped because the ring is full
            }
            let inl = if INLINE { eth::L2_INLINE } else { 0 };
            let written = match p.offload.tso_mss {
                Some(mss) => self.write_tso_or_refuse(p, mss),
                None => self.write_general(p, cs_flags(p, self.tx_csum), inl),
            };
            match written {
                Some(Some(start)) => last = Some(start),
                Some(None) => {
                    stats.add(Counter::TxDrops, 1);
                    dropped += 1;
                    // SAFETY: element `n` is initialized and is moved out exactly once.
                    self.discard(unsafe { std::ptr::read(base.add(n)) }, cache);
                }
                None => break,
            }
            n += 1;
        }
        if n > 0 && n < total {
            // SAFETY: elements `n..total` are initialized and not moved; they go to the front.
            unsafe { std::ptr::copy(base.add(n), base, total - n) };
        }
        // SAFETY: the first `total - n` elements are initialized (moved there just above).
        unsafe { pkts.set_len(total - n) };
        self.posted(pkts0, bbs0, bytes0, stats);
        if let Some(last) = last {
            self.request_completion(last);
            self.doorbell(last);
        }
        n - dropped
    }

    /// Accounts what a burst posted since the counters were `pkts0` / `bbs0` / `bytes0`: towards
    /// the next completion request, and in `tx_packets` / `tx_bytes` at once (counted at post,
    /// as DPDK's mlx5 PMD does with its software counters: `mlx5_tx_burst_tmpl` in
    /// drivers/net/mlx5/mlx5_tx.h adds the packets sent to `txq->stats.opackets` before any
    /// completion). The doorbell of the same burst hands them to the device; those a queue
    /// error flushes move to `tx_drops` in [`Tx::reset`].
    #[inline(always)]
    fn posted(&mut self, pkts0: u32, bbs0: u16, bytes0: u64, stats: &StatsWriter) {
        let pkts = self.pkts_posted.wrapping_sub(pkts0);
        self.unreq_pkts += pkts;
        self.unreq_bbs += self.pi.wrapping_sub(bbs0) as u32;
        if pkts > 0 {
            stats.tx(pkts as u64, self.bytes_posted.wrapping_sub(bytes0));
        }
    }

    /// Packets completed or dropped since the queue was created (wrapping): what a reclaim
    /// returned is the difference of two readings.
    pub(crate) fn done_count(&self) -> u32 {
        self.pkts_done
    }

    /// Whether any send has completed successfully since the queue was created.
    pub(crate) fn completed_any(&self) -> bool {
        self.completed_any
    }

    /// Frees a packet the burst drops: into `cache` if it is of this queue's pool, else
    /// through its own pool (a `PoolCache` takes only its pool's buffers).
    #[inline(never)]
    fn discard(&self, p: Packet, cache: &mut PoolCache) {
        if p.is_from(self.shared) {
            cache.free(p);
        } else {
            drop(p);
        }
    }

    /// Whether `p` can go into a WQE at all, before any offload request is looked at: at least
    /// an Ethernet header, no more buffers than a WQE can point at, and buffers of this queue's
    /// pool (the only memory its key covers, and the only pool its buffer ring returns to).
    #[inline(always)]
    fn basic_ok(&self, p: &Packet) -> bool {
        p.len() >= MIN_FRAME && p.segment_count() as u32 <= MAX_DS - 3 && p.is_from(self.shared)
    }

    /// Any packet as one SEND WQE (chains, short packets, WQEs over several WQEBBs).
    /// `None`: no room (stop the burst); `Some(None)`: unsendable (drop it);
    /// `Some(Some(start))`: written at `start`.
    fn write_general(&mut self, p: &Packet, cs: u8, min_inline: usize) -> Option<Option<u16>> {
        let len = p.len();
        if !self.basic_ok(p) {
            return Some(None);
        }
        let vlan = p.offload.vlan_insert;
        if vlan.is_some() {
            if let Err(why) = check_untagged(p) {
                self.refused.get_or_insert(why);
                return Some(None);
            }
        }
        // A tag to insert goes into the inline header when there is one (DPDK mlx5_tx.h
        // `mlx5_tx_eseg_dmin`, Linux en_tx.c `mlx5e_insert_vlan`), else the device inserts it
        // (`eth::VLAN_INSERT`). `used`: frame bytes the inline header holds.
        let (inl, used) = match vlan {
            Some(_) if min_inline > 0 => (min_inline.min(len + 4), min_inline.min(len + 4) - 4),
            _ => (min_inline.min(len), min_inline.min(len)),
        };
        let eth_ds = (eth::size_for_inline(inl) / 16) as u32;
        // Data segments: one per buffer that still has bytes after the inlined prefix.
        let mut nd = 0u32;
        let mut skip = used;
        for s in p.segments() {
            let l = s.data.len();
            if l > skip {
                nd += 1;
            }
            skip = skip.saturating_sub(l);
        }
        let ds = 1 + eth_ds + nd;
        if ds > MAX_DS {
            return Some(None);
        }
        let bbs = ds.div_ceil(4);
        if bbs > self.free_bbs() {
            return None;
        }
        let pi = self.pi;
        {
            let c = self.ds(pi, 0);
            ctrl::CtrlSeg::new_unchecked(&mut c[..]).fill(
                0,
                pi,
                ctrl::OPCODE_SEND,
                self.sqn,
                ds as u8,
                ctrl::CE_ONLY_FIRST_ERR,
                // Buffers this WQE holds (see `close_wqe`): one per segment.
                p.segment_count() as u32,
            );
        }
        // The eth segment (1 or 2 DS) lies in the first WQEBB.
        let mut raw = [0u8; 18];
        let mut got = 0;
        for s in p.segments() {
            if got == used {
                break;
            }
            let k = (used - got).min(s.data.len());
            raw[got..got + k].copy_from_slice(&s.data[..k]);
            got += k;
        }
        let mut hdr = raw;
        if let (Some(tci), true) = (vlan, inl > 0) {
            // MACs, the tag, then the rest of the frame's inlined bytes.
            hdr[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
            hdr[14..16].copy_from_slice(&tci.to_be_bytes());
            hdr[16..inl].copy_from_slice(&raw[12..used]);
        }
        {
            let bb = self.wqebb(pi);
            let mut e = eth::EthSeg::new_unchecked(&mut bb[16..16 + 16 * eth_ds as usize]);
            e.fill(cs, inl as u16);
            if inl > 0 {
                e.inline_hdr_mut()[..inl].copy_from_slice(&hdr[..inl]);
            } else if let Some(tci) = vlan {
                e.set_inline_hdr_sz(eth::VLAN_INSERT);
                e.inline_hdr_mut()[..2].copy_from_slice(&tci.to_be_bytes());
            }
        }
        let mut k = 1 + eth_ds;
        let mut skip = used;
        let lkey = self.lkey;
        for s in p.segments() {
            let l = s.data.len();
            if l > skip {
                let d = self.ds(pi, k);
                data::DataSeg::new_unchecked(&mut d[..]).fill(
                    (l - skip) as u32,
                    lkey,
                    s.addr + skip as u64,
                );
                k += 1;
            }
            skip = skip.saturating_sub(l);
            self.push_buf(s.index);
        }
        self.close_wqe(pi, bbs, 1, len as u64);
        Some(Some(pi))
    }

    /// Whether one more completion may be requested: the CQ must keep room for every CQE
    /// requested and not yet polled, plus the one error CQE a failure adds (see the module docs
    /// on the completion modes).
    #[inline(always)]
    fn cq_room(&self) -> bool {
        self.pending_reqs + 1 < self.cq.len()
    }

    /// Asks for a completion on the WQE at `last` if enough has gone out since the last request.
    #[inline(always)]
    fn request_completion(&mut self, last: u16) {
        if (self.unreq_pkts >= COMP_THRESH_PKTS || self.unreq_bbs >= self.req_thresh_bbs)
            && self.cq_room()
        {
            self.wqebb(last)[ctrl::field::FM_CE_SE] = ctrl::CE_ALWAYS;
            self.record(last);
            self.unreq_pkts = 0;
            self.unreq_bbs = 0;
            self.pending_reqs += 1;
        }
    }

    /// Rings the doorbell for everything up to `pi`; `last` is the last WQE written.
    #[inline(always)]
    fn doorbell(&mut self, last: u16) {
        let mut first8 = [0u8; 8];
        first8.copy_from_slice(&self.wqebb(last)[0..8]);
        // The order of libmlx5's `post_send_db` (rdma-core providers/mlx5/qp.c): to-device
        // barrier and doorbell record (both in `dbrec_store`), `mmio_wc_start`, the 8-byte UAR
        // store, `mmio_flush_writes`.
        mmio::dbrec_store(self.dbrec, self.pi as u32);
        mmio::wc_flush();
        // SAFETY: `bf_reg + bf_off` is this queue's doorbell register (or one of its two
        // BlueFlame halves), 8-byte aligned, in the UAR page the control objects keep mapped.
        unsafe { mmio::uar_write64(self.bf_reg.add(self.bf_off as usize), first8) };
        mmio::wc_flush();
        self.bf_off ^= self.bf_size;
    }

    /// Posts a NOP asking for a completion when posted WQEs have none requested, so that their
    /// buffers come back even if no more traffic follows.
    pub(crate) fn flush_request(&mut self) {
        if self.unreq_bbs == 0 || self.free_bbs() == 0 || !self.cq_room() {
            return;
        }
        let pi = self.pi;
        let bb = self.wqebb(pi);
        ctrl::CtrlSeg::new_unchecked(&mut bb[0..16]).fill(
            0,
            pi,
            ctrl::OPCODE_NOP,
            self.sqn,
            1,
            ctrl::CE_ALWAYS,
            0,
        );
        self.close_wqe(pi, 1, 0, 0);
        self.record(pi);
        self.unreq_pkts = 0;
        self.unreq_bbs = 0;
        self.pending_reqs += 1;
        self.doorbell(pi);
    }
}

#[cfg(test)]
mod tests;
