//! The send half of a verbs queue: one `ibv_post_send` per burst with a chain of preallocated
//! work requests, small frames inline, a completion requested every few WRs, and buffers freed
//! in batches when their completions arrive.
//!
//! # Work request ids
//! Every WR's `wr_id` packs two wrapping 32-bit sequence numbers: the number of WRs posted up to
//! and including it (high half), and the number of buffers recorded in the in-flight ring up to
//! and including its own (low half). A completion — signaled or an error/flush — therefore says
//! "everything up to here is done" without a lookup, which is what makes unsignaled WRs, inline
//! sends (whose buffers are freed at post time and never recorded) and chained packets (several
//! buffers per WR) work with one rule.

use std::sync::Arc;

use super::ffi::*;

use super::cq::{empty_wc, wc_status_str, Cq};
use super::qp::RawQp;
use crate::error::{Error, TxRefusal};
use crate::mempool::{Mempool, PoolCache};
use crate::packet::{insert_vlan, tso_header_len, Packet};
use crate::stats::{Counter, StatsWriter};

/// Most WRs posted by one `tx_burst` (one `ibv_post_send`).
pub(crate) const TX_BURST: usize = 64;
/// Most buffers (scatter/gather entries) per packet.
pub(crate) const MAX_SGE: usize = 4;
/// Completions polled at once.
const TX_POLL: usize = 32;

/// Buffer indices handed to the device, in posting order; freed from the front.
#[derive(Debug)]
pub(crate) struct InFlight {
    bufs: Box<[u32]>,
    mask: u32,
    /// Sequence number of the oldest buffer still in flight.
    head: u32,
    /// Sequence number the next recorded buffer gets.
    tail: u32,
}

impl InFlight {
    /// A ring for at least `n` buffers.
    pub(crate) fn new(n: usize) -> InFlight {
        let cap = n.max(1).next_power_of_two();
        InFlight {
            bufs: vec![0; cap].into_boxed_slice(),
            mask: cap as u32 - 1,
            head: 0,
            tail: 0,
        }
    }

    pub(crate) fn len(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }

    pub(crate) fn room(&self) -> u32 {
        self.bufs.len() as u32 - self.len()
    }

    /// Sequence number after `n` more buffers.
    pub(crate) fn seq_after(&self, n: u32) -> u32 {
        self.tail.wrapping_add(n)
    }

    /// Records a buffer (the caller checked `room`).
    pub(crate) fn push(&mut self, idx: u32) {
        debug_assert!(self.room() > 0);
        self.bufs[(self.tail & self.mask) as usize] = idx;
        self.tail = self.tail.wrapping_add(1);
    }

    /// Frees every buffer with a sequence number below `upto` (ignoring a stale `upto` at or
    /// behind the head, or one past the tail). Returns how many were freed.
    pub(crate) fn free_until(&mut self, upto: u32, mut put: impl FnMut(u32)) -> u32 {
        let n = upto.wrapping_sub(self.head);
        if n == 0 || n > self.len() {
            return 0;
        }
        for _ in 0..n {
            put(self.bufs[(self.head & self.mask) as usize]);
            self.head = self.head.wrapping_add(1);
        }
        n
    }

    /// Takes the oldest buffer.
    pub(crate) fn pop(&mut self) -> Option<u32> {
        if self.len() == 0 {
            return None;
        }
        let b = self.bufs[(self.head & self.mask) as usize];
        self.head = self.head.wrapping_add(1);
        Some(b)
    }

    /// Frees everything (only once the device can no longer touch the buffers).
    pub(crate) fn free_all(&mut self, put: impl FnMut(u32)) -> u32 {
        self.free_until(self.tail, put)
    }
}

/// Packs a WR's two sequence numbers (see the module docs).
#[inline]
pub(crate) fn wr_id(wr_seq: u32, buf_seq: u32) -> u64 {
    (wr_seq as u64) << 32 | buf_seq as u64
}

/// Unpacks [`wr_id`].
#[inline]
pub(crate) fn wr_seqs(id: u64) -> (u32, u32) {
    ((id >> 32) as u32, id as u32)
}

/// What a completion pass found.
#[derive(Debug, Default)]
pub(crate) struct TxDone {
    /// Buffers returned to the cache.
    pub freed: usize,
    /// An error completion other than a flush (the QP is now in the error state).
    pub error: Option<Error>,
}

pub(crate) struct Tx {
    queue: u16,
    qp: Arc<RawQp>,
    cq: Arc<Cq>,
    lkey: u32,
    /// WRs the SQ holds.
    ring: u32,
    max_sge: usize,
    max_inline: usize,
    csum: bool,
    /// Largest TSO payload the device segments (0: no TSO; see [`Tx::set_max_tso`]).
    max_tso: u32,
    /// The port's largest frame, which TSO segments must fit (`None`: no port MTU).
    max_frame: Option<u32>,
    signal_every: u32,
    unsignaled: u32,
    wrs_posted: u32,
    wrs_done: u32,
    /// Frame length of each outstanding WR, at its WR sequence number (masked): what a failed
    /// or flushed WR takes back out of `tx_bytes`.
    lens: Box<[u32]>,
    inflight: InFlight,
    wrs: Box<[ibv_send_wr]>,
    sges: Box<[ibv_sge]>,
    wc: Box<[ibv_wc]>,
}

// SAFETY: the WR array's internal pointers point into `sges`/`wrs`, boxes owned by this struct;
// the verbs objects are `Send`. The struct is driven from one thread at a time (`&mut`).
unsafe impl Send for Tx {}

fn empty_send_wr() -> ibv_send_wr {
    // SAFETY: `ibv_send_wr` is plain old data (integers, raw pointers, unions of those);
    // all-zero is valid (null pointers, zero counts).
    unsafe { std::mem::zeroed() }
}

impl Tx {
    pub(crate) fn new(queue: u16, qp: Arc<RawQp>, cq: Arc<Cq>, lkey: u32, csum: bool) -> Tx {
        let caps = qp.caps();
        let ring = caps.max_send_wr.max(1);
        let max_sge = (caps.max_send_sge as usize).clamp(1, MAX_SGE);
        Tx {
            queue,
            lkey,
            ring,
            max_sge,
            max_inline: caps.max_inline_data as usize,
            csum,
            max_tso: 0,
            max_frame: None,
            // One completion per quarter ring at most, and at least one per burst (see below).
            signal_every: (ring / 4).clamp(1, TX_BURST as u32),
            unsignaled: 0,
            wrs_posted: 0,
            wrs_done: 0,
            lens: vec![0; ring.next_power_of_two() as usize].into_boxed_slice(),
            inflight: InFlight::new(ring as usize * max_sge),
            wrs: (0..TX_BURST).map(|_| empty_send_wr()).collect(),
            sges: vec![
                ibv_sge {
                    addr: 0,
                    length: 0,
                    lkey
                };
                TX_BURST * MAX_SGE
            ]
            .into_boxed_slice(),
            wc: (0..TX_POLL).map(|_| empty_wc()).collect(),
            qp,
            cq,
        }
    }

    /// Lets this queue send TSO super-frames (`IBV_WR_TSO`) of up to `max_tso` payload bytes:
    /// the device's `tso_caps.max_tso`, on a QP created with a `max_tso_header`.
    pub(crate) fn set_max_tso(&mut self, max_tso: u32) {
        self.max_tso = max_tso;
    }

    /// Bounds the segments of TSO super-frames by the port's largest frame (its MTU + 18).
    pub(crate) fn set_max_frame(&mut self, max_frame: Option<u32>) {
        self.max_frame = max_frame;
    }

    /// The TSO request of `p`, if any, as (MSS, header length), after checking this queue can
    /// carry it out.
    fn tso_of(&self, p: &Packet) -> Result<Option<(u16, usize)>, TxRefusal> {
        let Some(mss) = p.offload.tso_mss else {
            return Ok(None);
        };
        if self.max_tso == 0 {
            return Err(TxRefusal::TsoNotSegmented {
                by: "this device on RAW_PACKET QPs (max_tso 0)",
            });
        }
        let hdr = tso_header_len(p, mss, self.max_tso)?;
        crate::mtu::check_tso_segments(hdr, mss, self.max_frame)?;
        Ok(Some((mss, hdr)))
    }

    /// WRs posted and not yet known complete.
    pub(crate) fn outstanding(&self) -> u32 {
        self.wrs_posted.wrapping_sub(self.wrs_done)
    }

    /// Buffers still owned by the device.
    pub(crate) fn buffers_in_flight(&self) -> u32 {
        self.inflight.len()
    }

    /// Polls send completions, frees completed buffers into `cache`.
    pub(crate) fn complete(&mut self, cache: &mut PoolCache, stats: &StatsWriter) -> TxDone {
        let mut done = TxDone::default();
        loop {
            let n = match self.cq.poll(&mut self.wc) {
                Ok(n) => n,
                Err(e) => {
                    done.error = Some(e);
                    return done;
                }
            };
            for wc in &self.wc[..n] {
                let (wr_seq, buf_seq) = wr_seqs(wc.wr_id);
                done.freed += self.inflight.free_until(buf_seq, |i| cache.put(i)) as usize;
                // Completions arrive in order; only move forward.
                if wr_seq.wrapping_sub(self.wrs_done) <= self.outstanding() {
                    self.wrs_done = wr_seq;
                }
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    // Counted in `tx_packets` when posted; not sent after all.
                    self.uncount(wr_seq, stats);
                }
                if wc.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                    stats.add(Counter::TxDrops, 1);
                } else if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    stats.add(Counter::TxErrors, 1);
                    done.error.get_or_insert(Error::Queue {
                        queue: self.queue,
                        detail: format!(
                            "send completion error: {} (status {}, vendor error 0x{:x})",
                            wc_status_str(wc.status),
                            wc.status,
                            wc.vendor_err
                        ),
                    });
                }
            }
            if n < self.wc.len() {
                return done;
            }
        }
    }

    /// Takes WR `wr_seq` (counted in `tx_packets` / `tx_bytes` when posted) back out of those
    /// counters: it failed or was flushed. The counters wrap, so adding the two's complement
    /// subtracts.
    fn uncount(&self, wr_seq: u32, stats: &StatsWriter) {
        let len = self.lens[wr_seq as usize & (self.lens.len() - 1)];
        stats.add(Counter::TxPackets, 1u64.wrapping_neg());
        stats.add(Counter::TxBytes, (len as u64).wrapping_neg());
    }

    /// Counts every outstanding WR as dropped, out of `tx_packets` / `tx_bytes` (their flush
    /// completions never came; the QP is being reset). Returns how many.
    pub(crate) fn drop_outstanding(&self, stats: &StatsWriter) -> u32 {
        let n = self.outstanding();
        for i in 1..=n {
            self.uncount(self.wrs_done.wrapping_add(i), stats);
        }
        stats.add(Counter::TxDrops, n as u64);
        n
    }

    /// Frees every in-flight buffer. Only after the QP was reset or destroyed.
    pub(crate) fn forget_in_flight(&mut self, cache: &mut PoolCache) -> u32 {
        self.wrs_done = self.wrs_posted;
        self.unsignaled = 0;
        self.inflight.free_all(|i| cache.put(i))
    }

    /// Whether `p` can be described by this queue's WRs: all its buffers in `pool` (so the MR
    /// covers them), not too many segments, not empty.
    fn sendable(&self, p: &Packet, pool: &Mempool) -> Result<(), TxRefusal> {
        if p.is_empty() {
            return Err(TxRefusal::Empty);
        }
        if p.segment_count() > self.max_sge {
            return Err(TxRefusal::TooManySegments {
                segments: p.segment_count(),
                max: self.max_sge,
            });
        }
        if p.segments().any(|s| pool.buffer_index(s.addr).is_none()) {
            return Err(TxRefusal::ForeignPool);
        }
        Ok(())
    }

    /// Sends from the front of `pkts`; see `Queue::tx_burst`. Returns (taken, error).
    pub(crate) fn burst(
        &mut self,
        pkts: &mut Vec<Packet>,
        cache: &mut PoolCache,
        pool: &Mempool,
        stats: &StatsWriter,
    ) -> (usize, Option<Error>) {
        if pkts.is_empty() {
            return (0, None);
        }
        let mut err = None;
        if self.ring.saturating_sub(self.outstanding()) < pkts.len().min(TX_BURST) as u32 {
            err = self.complete(cache, stats).error;
        }
        let slots = self.ring.saturating_sub(self.outstanding()) as usize;
        let want = pkts.len().min(TX_BURST).min(slots);
        // Build the chain until the first packet that cannot be sent or the buffer ring is full.
        let mut k = 0;
        let mut bufs = 0u32;
        let mut bad = None;
        let sge_base = self.sges.as_mut_ptr();
        let wr_base = self.wrs.as_mut_ptr();
        while k < want {
            let p = &mut pkts[k];
            if !self.csum && (p.offload.l3_csum || p.offload.l4_csum) {
                // No checksum offload on this device: done here instead of ignored.
                let (l3, l4) = (p.offload.l3_csum, p.offload.l4_csum);
                crate::packet::fill_packet_checksums(p, l3, l4);
                p.offload.l3_csum = false;
                p.offload.l4_csum = false;
            }
            // VLAN insertion in software (verbs has no per-WR tag insertion): the packet is
            // changed in place and its request cleared, so a retry does not tag it twice.
            let tagged = insert_vlan(p);
            let tso = match tagged
                .and_then(|()| self.sendable(p, pool))
                .and_then(|()| self.tso_of(p))
            {
                Ok(t) => t,
                Err(why) => {
                    bad = Some(why);
                    break;
                }
            };
            let inline = tso.is_none() && p.segment_count() == 1 && p.len() <= self.max_inline;
            let nb = if inline { 0 } else { p.segment_count() as u32 };
            if self.inflight.room() < bufs + nb {
                break;
            }
            // With TSO the SG list is the payload only: libmlx5 takes the header from
            // `wr.tso.hdr` (providers/mlx5/qp.c `set_tso_eth_seg`, then the SG list).
            let mut skip = tso.map_or(0, |(_, h)| h);
            let mut nsge = 0;
            for s in p.segments() {
                let l = s.data.len();
                if l > skip {
                    self.sges[k * MAX_SGE + nsge] = ibv_sge {
                        addr: s.addr + skip as u64,
                        length: (l - skip) as u32,
                        lkey: self.lkey,
                    };
                    nsge += 1;
                }
                skip = skip.saturating_sub(l);
            }
            bufs += nb;
            let mut flags = 0;
            if inline {
                flags |= ibv_send_flags::IBV_SEND_INLINE.0;
            }
            if self.csum && (p.offload.l3_csum || p.offload.l4_csum || tso.is_some()) {
                flags |= ibv_send_flags::IBV_SEND_IP_CSUM.0;
            }
            let seq = self.wrs_posted.wrapping_add(k as u32 + 1);
            let mask = self.lens.len() - 1;
            self.lens[seq as usize & mask] = p.len() as u32;
            let wr = &mut self.wrs[k];
            wr.wr_id = wr_id(seq, self.inflight.seq_after(bufs));
            wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
            wr.num_sge = nsge as i32;
            if let Some((mss, h)) = tso {
                wr.opcode = ibv_wr_opcode::IBV_WR_TSO;
                // libmlx5 copies the header into the WQE during `ibv_post_send`; the packet
                // (its first buffer) is held until then.
                wr.__bindgen_anon_2.tso = ibv_send_wr__bindgen_ty_4__bindgen_ty_2 {
                    hdr: p.data().as_ptr() as *mut libc::c_void,
                    hdr_sz: h as u16,
                    mss,
                };
            }
            // SAFETY: `k * MAX_SGE` is inside `sges` (k < TX_BURST).
            wr.sg_list = unsafe { sge_base.add(k * MAX_SGE) };
            wr.send_flags = flags;
            wr.next = std::ptr::null_mut();
            if k > 0 {
                // SAFETY: `k` is inside `wrs`.
                self.wrs[k - 1].next = unsafe { wr_base.add(k) };
            }
            k += 1;
        }
        let mut posted = 0;
        if k > 0 {
            // Signal the last WR of the burst, and any WR that completes a signaling period, so
            // no buffer waits for a later burst to be reclaimed.
            let mut unsig = self.unsignaled;
            for (i, wr) in self.wrs[..k].iter_mut().enumerate() {
                unsig += 1;
                if unsig >= self.signal_every || i == k - 1 {
                    wr.send_flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
                    unsig = 0;
                }
            }
            // SAFETY: the chain `wrs[..k]` is linked and terminated; every SGE names bytes of a
            // buffer of `pool` (checked by `sendable`), registered under `lkey`, owned by a
            // packet we hold until it is recorded in flight below (or, inline, copied at post).
            posted = match unsafe { self.qp.post_send(wr_base) } {
                Ok(()) => k,
                Err((rc, bad_wr)) => {
                    let at = (bad_wr as usize).wrapping_sub(wr_base as usize)
                        / std::mem::size_of::<ibv_send_wr>();
                    err.get_or_insert(Error::os(
                        "ibv_post_send",
                        std::io::Error::from_raw_os_error(rc),
                    ));
                    at.min(k)
                }
            };
            self.wrs_posted = self.wrs_posted.wrapping_add(posted as u32);
            // Unsignaled WRs since the last signaled one that was actually posted.
            let signaled =
                |w: &ibv_send_wr| w.send_flags & ibv_send_flags::IBV_SEND_SIGNALED.0 != 0;
            let trailing = self.wrs[..posted]
                .iter()
                .rev()
                .take_while(|w| !signaled(w))
                .count() as u32;
            self.unsignaled = if trailing as usize == posted {
                self.unsignaled + trailing
            } else {
                trailing
            };
            let mut bytes = 0u64;
            for (p, wr) in pkts.drain(..posted).zip(self.wrs.iter()) {
                bytes += p.len() as u64;
                if wr.send_flags & ibv_send_flags::IBV_SEND_INLINE.0 != 0 {
                    cache.free(p);
                } else {
                    for idx in p.into_buffer_indices() {
                        self.inflight.push(idx);
                    }
                }
            }
            stats.tx(posted as u64, bytes);
        }
        if posted == k {
            if let Some(why) = bad {
                // A packet this queue can never send: remove it (so the caller is not stuck
                // retrying it), drop it, count it, and say why. It is not in the count of
                // packets taken: the device never got it. Not an `Error::Queue`: the queue
                // itself is fine (that variant sends it through error recovery).
                drop(pkts.remove(0));
                stats.add(Counter::TxErrors, 1);
                err.get_or_insert(Error::TxRefused {
                    queue: format!("queue {}", self.queue),
                    reason: why,
                });
            }
        }
        (posted, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_round_trip() {
        assert_eq!(wr_seqs(wr_id(7, 0xffff_fffe)), (7, 0xffff_fffe));
        assert_eq!(wr_seqs(wr_id(u32::MAX, 1)), (u32::MAX, 1));
    }

    #[test]
    fn in_flight_frees_in_order_up_to_a_sequence_number() {
        let mut f = InFlight::new(8);
        for i in [10, 11, 12, 13, 14] {
            f.push(i);
        }
        assert_eq!(f.len(), 5);
        let mut freed = vec![];
        assert_eq!(f.free_until(3, |i| freed.push(i)), 3);
        assert_eq!(freed, [10, 11, 12]);
        // Stale or future sequence numbers free nothing.
        assert_eq!(f.free_until(2, |i| freed.push(i)), 0);
        assert_eq!(f.free_until(9, |i| freed.push(i)), 0);
        assert_eq!(f.free_all(|i| freed.push(i)), 2);
        assert_eq!(freed, [10, 11, 12, 13, 14]);
        assert_eq!(f.room(), 8);
    }

    #[test]
    fn in_flight_sequence_numbers_wrap() {
        let mut f = InFlight::new(4);
        f.head = u32::MAX - 1;
        f.tail = u32::MAX - 1;
        for i in 0..4 {
            f.push(i);
        }
        assert_eq!(f.room(), 0);
        let upto = f.seq_after(0).wrapping_sub(1);
        let mut freed = vec![];
        assert_eq!(f.free_until(upto, |i| freed.push(i)), 3);
        assert_eq!(freed, [0, 1, 2]);
        assert_eq!(f.len(), 1);
    }
}
