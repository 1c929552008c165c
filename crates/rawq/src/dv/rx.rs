//! The receive side: RQ posting and refill, CQE processing (plain and compressed), cyclic and
//! striding RQs.
//!
//! **Cyclic RQ.** Each WQE is a scatter list of `stride / 16` data segments, each pointing at a
//! pool buffer after its headroom. A packet fills as many of them as its length needs; only those
//! buffers are replaced on refill, the rest stay posted. The RQ doorbell record (16-bit WQE
//! counter) is written once per refill batch. The plain-CQE fast path walks CQ slots up to the
//! ring's end (one owner bit per run), reads only `op_own`, `byte_cnt`, `wqe_counter` and the
//! three metadata words, which each packet keeps as they are ([`RxMeta`] decodes them when
//! read), and writes the packets straight into the caller's spare capacity (handles only: a
//! single-buffer packet needs no in-buffer header); refill takes buffers from the queue's cache
//! in bulk and rewrites only the WQE addresses (lengths and lkeys stay from the first fill).
//! With one buffer per WQE and a full ring, that refill is fused into the polling loop: each
//! completed WQE gets its fresh buffer as its packet is built, and the RQ doorbell record is
//! written once per burst.
//!
//! **Striding RQ.** The strides *are* pool buffers: a WQE is the next-segment header followed by
//! one data segment per stride, each covering the last `stride_size` bytes of a buffer (so the
//! device's logical WQE buffer is the concatenation of those tails). A packet starting at stride
//! *s* and covering *c* strides becomes a packet chained over those *c* buffers, zero copy. Filler
//! CQEs give their strides' buffers back to the cache. A WQE is retired, and refilled with fresh
//! buffers, when the consumed strides of all its CQEs (packets and fillers) add up to the stride
//! count. The price: a stride holds at most `buf_size - 8` bytes rounded down to a power of two
//! (1 KiB strides with 2 KiB buffers).
//!
//! **Compressed CQEs.** A title (format 3) at CI announces N completions carried by mini-CQEs in
//! arrays at CI+1, CI+8, CI+16, …; the session occupies N slots. The driver builds each packet from
//! the title's shared fields plus its mini-CQE, scrubs slots CI+1 … CI+N-1 (`op_own = 0xF0`) and
//! moves CI by N. A session larger than the caller's burst is resumed on the next call. On a
//! cyclic RQ of one buffer per WQE the session is read in place (`FastRx::run_zip`): each packet
//! is a copy of one template built from the title with its own buffer, length and hash written
//! over it, and on a full ring each completed WQE gets its fresh buffer in the same loop, the RQ
//! doorbell record written at the end of the poll, after the CQ's.
//!
//! **Error completions.** A LOCAL_LENGTH_ERR (or any syndrome but the three of
//! [`fatal_syndrome`]) fails one WQE only: it is counted in `rx_errors`, the WQE is retired with
//! its buffers still in place and posted again by the next refill, and receiving goes on. The
//! fatal ones stop the poll and go to the queue's recovery, whose reset drains the CQ
//! session by session.

mod fast;
use fast::{meta_of, FastRx};

use std::ptr::NonNull;

use super::cq::Cq;
use super::mmio;
use super::rings::{CqRing, MiniCqeFormat, RqRing};
use super::wire::{cqe, mini_cqe, Cqe, DataSeg, MiniCqe, SrqNextSeg};
use std::mem::MaybeUninit;

use crate::mempool::{BufGeometry, PoolCache, Shared, BUF_HEADER};
use crate::packet::{Packet, RxMeta};
use crate::stats::{Counter, StatsWriter};

const EMPTY: u32 = u32::MAX;

/// An error completion taken off the receive CQ.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RxErr {
    pub wqe: u16,
    pub syndrome: u8,
    pub vendor: u8,
}

/// Whether a receive error completion with syndrome `s` leaves the RQ in the error state (the
/// queue must be reset), as DPDK decides (drivers/net/mlx5/mlx5_rx.c, `mlx5_rx_err_handle`):
/// LOCAL_QP_OP_ERR, LOCAL_PROT_ERR and WR_FLUSH_ERR do. Any other syndrome, notably
/// LOCAL_LENGTH_ERR (a frame longer than the WQE's buffers, routine when the port MTU exceeds
/// them), only fails that WQE: DPDK counts it, skips the WQE and keeps polling.
pub fn fatal_syndrome(s: u8) -> bool {
    matches!(
        s,
        cqe::SYND_LOCAL_QP_OP_ERR | cqe::SYND_LOCAL_PROT_ERR | cqe::SYND_WR_FLUSH_ERR
    )
}

#[derive(Clone, Copy)]
enum Kind {
    Cyclic {
        /// Data bytes per buffer (`buf_size - headroom`).
        seg_room: u32,
    },
    Striding {
        num_strides: u32,
        stride_size: u32,
        shift: u32,
        /// Offset of the stride inside its buffer.
        buf_off: u32,
    },
}

struct Zip {
    title: [u8; 64],
    n: u32,
    i: u32,
    /// The packet every entry of the session starts from ([`FastRx::run_zip`]): the title's
    /// metadata words, the pool and the headroom. Never dropped: its buffer index is a
    /// placeholder, written over in every copy.
    tmpl: std::mem::ManuallyDrop<Packet>,
}

/// The receive half of a DV queue.
pub struct Rx {
    base: *mut u8,
    wqe_cnt: u32,
    mask: u32,
    stride: u32,
    dbrec: NonNull<u32>,
    kind: Kind,
    per_wqe: u32,
    bufs: Box<[u32]>,
    /// WQEs posted (free-running).
    pi: u32,
    /// WQEs consumed / retired (free-running).
    ci: u32,
    /// Strides consumed in WQE `ci` (striding RQ).
    consumed: u32,
    lkey: u32,
    shared: &'static Shared,
    headroom: u32,
    mini: Option<MiniCqeFormat>,
    zip: Option<Zip>,
    /// The fast paths' loop-invariant state (fixed at creation).
    fast: FastRx,
    pub(crate) cq: Cq,
}

// SAFETY: the RQ/CQ memory belongs to the queue's control objects, kept alive with the queue;
// the queue is driven from one thread at a time.
unsafe impl Send for Rx {}

impl Rx {
    /// The receive half over `rq` and its CQ, receiving into the pool of `cache`.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for a geometry the driver cannot use with this pool.
    pub(crate) fn new(
        rq: &RqRing,
        cq: &CqRing,
        lkey: u32,
        mini: Option<MiniCqeFormat>,
        pool: &crate::Mempool,
    ) -> crate::Result<Rx> {
        let bad = |m: String| Err(crate::Error::Config(m));
        if !rq.wqe_cnt.is_power_of_two() || rq.wqe_cnt > 1 << 15 {
            return bad(format!(
                "RQ with {} WQEs: must be a power of two up to 32768",
                rq.wqe_cnt
            ));
        }
        if !rq.stride.is_power_of_two() || rq.stride < 16 {
            return bad(format!(
                "RQ stride {}: must be a power of two of at least 16",
                rq.stride
            ));
        }
        let shared = pool.shared();
        let buf_size = pool.buf_size();
        let headroom = pool.headroom() as u32;
        let (kind, per_wqe) = match rq.striding {
            None => (
                Kind::Cyclic {
                    seg_room: buf_size - headroom,
                },
                rq.stride / 16,
            ),
            Some(s) => {
                let num_strides = 1u32 << s.log_num_strides;
                let stride_size = 1u32 << s.log_stride_size;
                if stride_size as usize > buf_size as usize - BUF_HEADER {
                    return bad(format!(
                        "stride size {stride_size} does not fit a {buf_size}-byte pool buffer \
                         (the strides are pool buffers; use strides of at most {} bytes)",
                        (buf_size / 2)
                    ));
                }
                if 16 * (1 + num_strides) > rq.stride {
                    return bad(format!(
                        "RQ stride {} cannot hold the next-segment header and {num_strides} data \
                         segments (one per stride)",
                        rq.stride
                    ));
                }
                (
                    Kind::Striding {
                        num_strides,
                        stride_size,
                        shift: if s.two_byte_shift { 2 } else { 0 },
                        buf_off: buf_size - stride_size,
                    },
                    num_strides,
                )
            }
        };
        if let Some(MiniCqeFormat::Hash) = mini {
            if rq.striding.is_some() {
                return bad("a striding RQ needs the CsumStrideIdx mini-CQE format".into());
            }
        }
        let geo = shared.geometry();
        let fast = FastRx {
            shared,
            geo,
            headroom: headroom as u16,
            mask: rq.wqe_cnt - 1,
            shift: per_wqe.trailing_zeros(),
            seg_room: match kind {
                Kind::Cyclic { seg_room } => seg_room,
                Kind::Striding { .. } => 0, // the fast paths are for cyclic RQs only
            },
            ring: rq.buf.as_ptr(),
            data0: geo.buf_ptr(0) as u64 + headroom as u64,
        };
        let mut rx = Rx {
            base: rq.buf.as_ptr(),
            wqe_cnt: rq.wqe_cnt,
            mask: rq.wqe_cnt - 1,
            stride: rq.stride,
            dbrec: rq.dbrec,
            kind,
            per_wqe,
            bufs: vec![EMPTY; (rq.wqe_cnt * per_wqe) as usize].into_boxed_slice(),
            pi: 0,
            ci: 0,
            consumed: 0,
            lkey,
            shared,
            headroom,
            mini,
            zip: None,
            fast,
            cq: Cq::new(cq)?,
        };
        rx.format_wqes();
        Ok(rx)
    }

    /// Writes the constant parts of every WQE (striding next segments, cyclic terminators).
    fn format_wqes(&mut self) {
        for w in 0..self.wqe_cnt {
            let wqe = self.wqe(w);
            match self.kind {
                Kind::Striding { stride_size, .. } => {
                    SrqNextSeg::new_unchecked(&mut wqe[..16]).fill(((w + 1) & self.mask) as u16);
                    for k in 1..wqe.len() / 16 {
                        let mut d = DataSeg::new_unchecked(&mut wqe[16 * k..16 * k + 16]);
                        if k <= self.per_wqe as usize {
                            d.fill(stride_size, self.lkey, 0);
                        } else {
                            d.fill_terminator();
                        }
                    }
                }
                Kind::Cyclic { seg_room } => {
                    for k in 0..wqe.len() / 16 {
                        DataSeg::new_unchecked(&mut wqe[16 * k..16 * k + 16])
                            .fill(seg_room, self.lkey, 0);
                    }
                }
            }
        }
    }

    /// The bytes of WQE slot `w`.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    fn wqe(&self, w: u32) -> &mut [u8] {
        let o = ((w & self.mask) * self.stride) as usize;
        // SAFETY: the WQE lies inside the RQ ring; WQEs from `pi` to `ci + wqe_cnt` belong to
        // software until the doorbell record publishes them, and the driver writes one at a time.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(o), self.stride as usize) }
    }

    /// Posts every WQE that can be completely refilled; one doorbell record write. Only the
    /// addresses change: lengths and lkeys were written once by `format_wqes`.
    #[inline(always)]
    pub(crate) fn refill(&mut self, cache: &mut PoolCache) {
        if self.pi != self.ci.wrapping_add(self.wqe_cnt) {
            self.refill_wqes(cache);
        } // else every WQE is posted (the receive loop reposted them, or nothing came)
    }

    /// [`Rx::refill`] when some WQE is not posted.
    #[inline(never)]
    fn refill_wqes(&mut self, cache: &mut PoolCache) {
        let start = self.pi;
        let limit = self.ci.wrapping_add(self.wqe_cnt);
        let per_wqe = self.per_wqe as usize;
        let (off, dseg0) = match self.kind {
            Kind::Cyclic { .. } => (self.headroom as u64, 0),
            Kind::Striding { buf_off, .. } => (buf_off as u64, 1),
        };
        let mut pi = self.pi;
        let geo = self.shared.geometry();
        if per_wqe == 1 && dseg0 == 0 {
            // One buffer per WQE (the common cyclic RQ): WQEs up to the ring end at a time, the
            // buffers lent by the cache in bulk.
            let stride = self.stride as usize;
            while pi != limit {
                let w0 = (pi & self.mask) as usize;
                let run = (limit.wrapping_sub(pi) as usize).min(self.wqe_cnt as usize - w0);
                let (mut done, mut dry) = (run, false);
                let (bufs, ring) = (&mut self.bufs[w0..w0 + run], self.base);
                // The data segment of the WQE of `bufs[k]`, and where buffer 0's data goes.
                let mut d = ring.wrapping_add(w0 * stride);
                let data0 = geo.buf_ptr(0) as u64 + off;
                let size = geo.buf_size() as u64;
                cache.get_bulk(run, |idxs| {
                    let mut free = idxs.iter().rev();
                    let mut slots = bufs.iter_mut();
                    while let Some(b) = slots.next() {
                        if *b == EMPTY {
                            let Some(&idx) = free.next() else {
                                done = run - slots.len() - 1;
                                dry = true;
                                break;
                            };
                            *b = idx;
                            // SAFETY: `d` is the first data segment of WQE `w0 + k` (`k <
                            // run <= wqe_cnt - w0`), inside the RQ ring, owned by software
                            // until the doorbell record below publishes it.
                            let seg = unsafe { &mut *(d as *mut [u8; 16]) };
                            DataSeg::new_unchecked(seg).set_addr(data0 + idx as u64 * size);
                        }
                        d = d.wrapping_add(stride);
                    }
                    idxs.len() - free.len()
                });
                pi = pi.wrapping_add(done as u32);
                if dry && done == 0 {
                    break; // the pool is dry
                }
            }
        }
        'wqes: while pi != limit {
            let w = pi & self.mask;
            let first = w as usize * per_wqe;
            let wqe = self.base.wrapping_add((w * self.stride) as usize);
            for k in 0..per_wqe {
                // SAFETY: `w <= mask` and `k < per_wqe`, so the index is below `bufs.len()`.
                let b = unsafe { self.bufs.get_unchecked_mut(first + k) };
                if *b != EMPTY {
                    continue;
                }
                let Some(idx) = cache.get() else {
                    break 'wqes;
                };
                *b = idx;
                let addr = geo.buf_ptr(idx) as u64 + off;
                // SAFETY: data segment `k + dseg0` lies inside WQE `w` (the stride holds the
                // next-segment header and `per_wqe` segments), which belongs to software until
                // the doorbell record below publishes it.
                let d = unsafe { &mut *(wqe.add(16 * (k + dseg0)) as *mut [u8; 16]) };
                DataSeg::new_unchecked(d).set_addr(addr);
            }
            pi = pi.wrapping_add(1);
        }
        self.pi = pi;
        if pi != start {
            self.ring_rq();
        }
    }

    /// Publishes the RQ producer index in the doorbell record (16-bit WQE counter). From
    /// here on the device may fill every posted WQE and write its CQE, so the CQ consumer index
    /// must have been published first (see [`Rx::poll_cyclic_fast`]).
    #[inline(always)]
    fn ring_rq(&self) {
        mmio::dbrec_store(self.dbrec, self.pi & 0xffff);
        #[cfg(test)]
        tests::after_rq_doorbell();
    }

    /// Builds the packet of `len` bytes scattered over `bufs[first..]` starting at byte `off` of
    /// the first buffer, `room` bytes per buffer after that one's `off`; marks the buffers taken.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn take_packet(
        &mut self,
        first: usize,
        nsegs: usize,
        off0: u32,
        room0: u32,
        off: u32,
        room: u32,
        len: u32,
    ) -> Option<Packet> {
        // A CQE naming buffers the driver does not hold (a bogus or stale entry) is refused.
        if (0..nsegs).any(|k| self.bufs.get(first + k).is_none_or(|&b| b == EMPTY)) {
            return None;
        }
        let l0 = len.min(room0);
        let idx0 = self.bufs[first];
        self.bufs[first] = EMPTY;
        let mut p = Packet::from_raw_parts(self.shared, idx0, off0 as u16, l0 as u16);
        let mut rem = len - l0;
        for k in 1..nsegs {
            let l = rem.min(room);
            let idx = self.bufs[first + k];
            self.bufs[first + k] = EMPTY;
            let s = Packet::from_raw_parts(self.shared, idx, off as u16, l as u16);
            // Same pool, single buffer: cannot fail.
            let _ = p.chain(s);
            rem -= l;
        }
        Some(p)
    }

    /// One completion: `wqe_counter` (cyclic: WQE counter; striding: stride index), `wqe_id`
    /// (striding WQE index), `byte_cnt`. Returns the packet length, or `None` when no packet came of it (a filler, a bad CQE).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &mut self,
        wqe_counter: u16,
        wqe_id: u16,
        byte_cnt: u32,
        meta: RxMeta,
        out: &mut Vec<Packet>,
        stats: &StatsWriter,
        cache: &mut PoolCache,
    ) -> Option<u32> {
        match self.kind {
            Kind::Cyclic { seg_room } => {
                let w = wqe_counter as u32 & self.mask;
                let len = byte_cnt;
                let nsegs = (len.div_ceil(seg_room).max(1)) as usize;
                if nsegs > self.per_wqe as usize {
                    stats.add(Counter::RxErrors, 1);
                    self.ci = self.ci.wrapping_add(1);
                    return None;
                }
                let first = (w * self.per_wqe) as usize;
                let p = self.take_packet(
                    first,
                    nsegs,
                    self.headroom,
                    seg_room,
                    self.headroom,
                    seg_room,
                    len,
                );
                let Some(mut p) = p else {
                    stats.add(Counter::RxErrors, 1);
                    return None;
                };
                p.meta = meta;
                out.push(p);
                self.ci = self.ci.wrapping_add(1);
                Some(len)
            }
            Kind::Striding {
                num_strides,
                stride_size,
                shift,
                buf_off,
            } => {
                let (len, strides, filler) = cqe::mprq_decode(byte_cnt);
                let (len, strides) = (len as u32, strides as u32);
                let w = wqe_id as u32 & self.mask;
                let s = wqe_counter as u32;
                if s >= num_strides {
                    stats.add(Counter::RxErrors, 1);
                    return None;
                }
                let first = (w * num_strides + s) as usize;
                let end = (s + strides).min(num_strides);
                let need = if filler {
                    0
                } else {
                    (len + shift).div_ceil(stride_size).max(1)
                };
                let mut got = None;
                if !filler && s + need <= end {
                    let p = self.take_packet(
                        first,
                        need as usize,
                        buf_off + shift,
                        stride_size - shift,
                        buf_off,
                        stride_size,
                        len,
                    );
                    if let Some(mut p) = p {
                        p.meta = meta;
                        out.push(p);
                        got = Some(len);
                    } else {
                        stats.add(Counter::RxErrors, 1);
                    }
                } else if !filler {
                    stats.add(Counter::RxErrors, 1);
                }
                // Strides consumed but not part of a packet go back to the cache.
                for k in first..(w * num_strides + end) as usize {
                    let idx = std::mem::replace(&mut self.bufs[k], EMPTY);
                    if idx != EMPTY {
                        cache.put(idx);
                    }
                }
                self.consumed += strides;
                if self.consumed >= num_strides {
                    self.consumed = 0;
                    self.ci = self.ci.wrapping_add(1);
                }
                got
            }
        }
    }

    /// The common case of a cyclic RQ: plain (uncompressed) CQEs of single-buffer packets,
    /// written straight into `out`'s spare capacity (at most `max` packets, and no more than
    /// fit without growing it). Stops at the first CQE it does not handle (the general loop then
    /// takes over). Returns (packets, bytes).
    ///
    /// With one buffer per WQE and every WQE posted (the steady state), each completed WQE is
    /// posted again inside the loop with a buffer lent by `cache` (the refill fused into the
    /// receive loop), and the RQ doorbell record is written once at the end.
    #[inline(always)]
    fn poll_cyclic_fast(
        &mut self,
        out: &mut Vec<Packet>,
        max: usize,
        cache: &mut PoolCache,
    ) -> (usize, u64) {
        let len0 = out.len();
        let spare = out.spare_capacity_mut();
        let max = max.min(spare.len());
        let f = &self.fast;
        let spare = &mut spare[..max];
        let bufs = &mut self.bufs[..];
        let cq = &mut self.cq;
        let repost =
            f.shift == 0 && self.stride == 16 && self.pi == self.ci.wrapping_add(self.wqe_cnt);
        // One copy of the loop per CQE size and per "one buffer per WQE", so that neither the
        // slot step nor the WQE-to-buffer shift takes a register.
        let (n, bytes) = if repost {
            let mut got = (0, 0);
            cache.get_bulk(max, |fresh| {
                got = match cq.slot_size() {
                    64 => f.run::<64, true, true>(cq, spare, bufs, fresh),
                    _ => f.run::<128, true, true>(cq, spare, bufs, fresh),
                };
                got.0
            });
            got
        } else {
            match (cq.slot_size(), f.shift) {
                (64, 0) => f.run::<64, true, false>(cq, spare, bufs, &[]),
                (64, _) => f.run::<64, false, false>(cq, spare, bufs, &[]),
                (_, 0) => f.run::<128, true, false>(cq, spare, bufs, &[]),
                (_, _) => f.run::<128, false, false>(cq, spare, bufs, &[]),
            }
        };
        // SAFETY: `spare[..n]` were initialized by `run`, right after the first `len0` elements.
        unsafe { out.set_len(len0 + n) };
        self.ci = self.ci.wrapping_add(n as u32);
        if repost && n > 0 {
            // The CQ consumer index first, then the RQ doorbell record: the device must not see
            // a reposted WQE before the CQ slots its completion may go to are released (with a
            // CQ exactly as large as the RQ they are the same slots, and a device that ran in
            // between would overrun the CQ). DPDK orders them so (drivers/net/mlx5/mlx5_rx.c
            // `mlx5_rx_burst` and `mlx5_rx_burst_mprq`: `*rxq->cq_db = cq_ci`, `rte_io_wmb()`,
            // then `*rxq->rq_db = rq_ci`); `dbrec_store` puts the barrier before each store.
            self.cq.publish();
            self.pi = self.pi.wrapping_add(n as u32);
            self.ring_rq();
        }
        (n, bytes)
    }

    /// Receives up to `max` packets into `out`; stops at an error CQE and returns it.
    pub(crate) fn poll(
        &mut self,
        out: &mut Vec<Packet>,
        max: usize,
        stats: &StatsWriter,
        cache: &mut PoolCache,
    ) -> (usize, Option<RxErr>) {
        // An empty poll (no compressed session open, no CQE at the consumer index) returns
        // before the receive loop's set-up: a forwarder polls empty most of the time.
        if self.zip.is_none() && !self.cq.ready() {
            return (0, None);
        }
        let mut n = 0usize;
        let mut bytes = 0u64;
        let mut err = None;
        if let (Kind::Cyclic { .. }, None) = (self.kind, &self.zip) {
            // (A compressed session's title goes straight to the loop below.)
            if !self.cq.title_at_ci() {
                (n, bytes) = self.poll_cyclic_fast(out, max, cache);
            }
        }
        // WQEs the compressed path posts again (`poll_zip_fast`) are published below, after
        // the CQ consumer index, where the refill after the poll would have published them.
        let pi0 = self.pi;
        while n < max {
            if self.zip.is_some() {
                // The common case in place first (fast.rs); what it leaves, the loop below.
                let (k, b) = self.poll_zip_fast(out, max - n, cache);
                n += k;
                bytes += b;
            }
            if let Some((zn, zi)) = self.zip.as_ref().map(|z| (z.n, z.i)) {
                let mut i = zi;
                // The title, copied only when entries are left for this loop.
                let title = match self.zip.as_ref() {
                    Some(z) if i < zn && n < max => z.title,
                    _ => [0u8; 64],
                };
                let t = Cqe::new_unchecked(&title);
                while i < zn && n < max {
                    let slot = if i < 8 {
                        self.cq.ci.wrapping_add(1)
                    } else {
                        self.cq.ci.wrapping_add(8 * (i / 8))
                    };
                    let arr = self.cq.read_raw(slot);
                    let o = (i as usize % mini_cqe::PER_SLOT) * mini_cqe::SIZE;
                    let m = MiniCqe::new_unchecked(&arr[o..o + mini_cqe::SIZE]);
                    // The WQE: a cyclic RQ's completions are in order, the title's counter
                    // plus the entry's position; a striding RQ's mini-CQE names its stride
                    // (kernel mlx5e en_rx.c, `mlx5e_decompress_cqe`). The RSS hash: only the
                    // hash format carries one per packet; the checksum format has none, so
                    // the packet reports none rather than the title's (kernel,
                    // `mlx5e_decompress_cqe_no_hash`).
                    let ctr = match self.kind {
                        Kind::Striding { .. } => m.stride_idx(),
                        Kind::Cyclic { .. } => t.wqe_counter().wrapping_add(i as u16),
                    };
                    let hash = match self.mini {
                        Some(MiniCqeFormat::CsumStrideIdx) => 0,
                        _ => m.rx_hash(),
                    };
                    let meta = meta_of(&title, hash);
                    if let Some(l) =
                        self.complete(ctr, t.wqe_id(), m.byte_cnt(), meta, out, stats, cache)
                    {
                        n += 1;
                        bytes += l as u64;
                    }
                    i += 1;
                }
                if i < zn {
                    if let Some(z) = self.zip.as_mut() {
                        z.i = i;
                    }
                    break;
                }
                self.consume_session(zn);
                self.zip = None;
                continue;
            }
            let Some(c) = self.cq.peek() else { break };
            let q = Cqe::new_unchecked(c);
            match q.opcode() {
                cqe::OP_RESP_SEND if q.format() == cqe::FORMAT_COMPRESSED => {
                    let nn = q.byte_cnt();
                    if nn == 0 || nn > self.cq.len() {
                        stats.add(Counter::RxErrors, 1);
                        self.cq.ci = self.cq.ci.wrapping_add(1);
                        continue;
                    }
                    self.zip = Some(Zip {
                        title: *c,
                        n: nn,
                        i: 0,
                        tmpl: std::mem::ManuallyDrop::new(Packet::from_device_in(
                            self.shared,
                            EMPTY,
                            self.headroom as u16,
                            0,
                            meta_of(c, 0),
                        )),
                    });
                    continue;
                }
                cqe::OP_RESP_SEND => {
                    let meta = meta_of(c, q.rx_hash());
                    if let Some(l) = self.complete(
                        q.wqe_counter(),
                        q.wqe_id(),
                        q.byte_cnt(),
                        meta,
                        out,
                        stats,
                        cache,
                    ) {
                        n += 1;
                        bytes += l as u64;
                    }
                }
                cqe::OP_RESP_ERR if !fatal_syndrome(q.syndrome()) => {
                    // The device skipped this WQE and keeps receiving: count it, and leave its
                    // buffers posted for the refill to hand back to the device.
                    stats.add(Counter::RxErrors, 1);
                    self.skip_wqe();
                }
                cqe::OP_RESP_ERR => {
                    err = Some(RxErr {
                        wqe: q.wqe_counter(),
                        syndrome: q.syndrome(),
                        vendor: q.vendor_err_synd(),
                    });
                    self.cq.ci = self.cq.ci.wrapping_add(1);
                    break;
                }
                _ => stats.add(Counter::RxErrors, 1),
            }
            self.cq.ci = self.cq.ci.wrapping_add(1);
        }
        self.cq.publish();
        if self.pi != pi0 && err.is_none() {
            // As in `poll_cyclic_fast`: the CQ consumer index first, then the RQ doorbell
            // record. (With an error the queue is reset, which takes every buffer back.)
            self.ring_rq();
        }
        stats.rx(n as u64, bytes);
        (n, err)
    }

    /// Moves the consumer index past the `n` slots of the entry at it (a title and its
    /// mini-CQE arrays, or one plain CQE for `n == 1`), invalidating the slots after the title
    /// so that no stale array ever passes the ownership test on a later lap.
    fn consume_session(&mut self, n: u32) {
        self.cq
            .scrub_run(self.cq.ci.wrapping_add(1), n.saturating_sub(1));
        self.cq.ci = self.cq.ci.wrapping_add(n);
    }

    /// Retires the WQE the device completed in error without a packet (see
    /// [`fatal_syndrome`]): its buffers (the strides not consumed yet) stay where they are, and
    /// the next refill posts the WQE again with them.
    fn skip_wqe(&mut self) {
        self.consumed = 0;
        self.ci = self.ci.wrapping_add(1);
    }

    /// After the device side of the RQ was reset: drains the CQ, takes every posted buffer back
    /// into `cache` and restarts the counters at 0. The caller refills.
    ///
    /// The drain walks the CQ exactly as [`Rx::poll`] does: a compressed session (its title at
    /// the consumer index, mini-CQE arrays after it, which carry no owner bit) is consumed whole,
    /// by the title's count, its slots invalidated: DPDK (drivers/net/mlx5/mlx5_rx.c,
    /// `mlx5_rx_poll_len`, the `zip` handling) and VPP (src/plugins/rdma/input.c, `cq_ci +=
    /// n_mini_cqes` with `compressed_cqe_reset_owner`). One slot at a time would land on the
    /// arrays and leave the index inside a session, where no owned CQE ever appears again.
    pub(crate) fn reset(&mut self, cache: &mut PoolCache) {
        if let Some(z) = self.zip.take() {
            self.consume_session(z.n); // a session left half read: its title is at `ci`
        }
        while let Some(c) = self.cq.peek() {
            let q = Cqe::new_unchecked(c);
            let n = if q.opcode() == cqe::OP_RESP_SEND && q.format() == cqe::FORMAT_COMPRESSED {
                q.byte_cnt()
            } else {
                1
            };
            if n == 0 || n > self.cq.len() {
                // Not a session this CQ can hold (the same test as `poll`): one slot.
                self.cq.ci = self.cq.ci.wrapping_add(1);
            } else {
                self.consume_session(n);
            }
        }
        self.cq.publish();
        self.release_all(cache);
        self.pi = 0;
        self.ci = 0;
        self.consumed = 0;
        self.format_wqes();
    }

    /// Writes 0 to the RQ doorbell record (before a reset of the device side).
    pub(crate) fn zero_dbrec(&mut self) {
        mmio::dbrec_store(self.dbrec, 0);
    }

    /// Returns every posted buffer to `cache` (teardown; the device must be stopped).
    pub(crate) fn release_all(&mut self, cache: &mut PoolCache) {
        for b in self.bufs.iter_mut() {
            let idx = std::mem::replace(b, EMPTY);
            if idx != EMPTY {
                cache.put(idx);
            }
        }
    }
}

#[cfg(test)]
mod tests;
