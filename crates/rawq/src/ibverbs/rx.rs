//! The receive half of a verbs queue: buffers from the queue's `PoolCache` pre-posted to the RQ
//! (the QP's own, or a WQ under RSS), refilled in batches with one `ibv_post_recv`, completions
//! polled in batches with `ibv_poll_cq`.
//!
//! `wr_id` is the (first) buffer index. The RQ completes in posting order, so the posted buffers
//! are also kept in a ring: it says which buffers the device still owns when a queue is torn
//! down or recovered, and checks every completion against the order.
//!
//! **Scatter** ([`Rx::with_scatter`], a port MTU larger than one buffer): each WR has `sges`
//! entries, each a pool buffer (`ibv_wq_init_attr.max_sge` / `ibv_qp_cap.max_recv_sge`); the
//! device writes a frame across them in order and reports its whole length in `byte_len`
//! (libmlx5 posts one data segment per SGE, rdma-core providers/mlx5/qp.c `mlx5_post_wq_recv`).
//! The buffers the frame filled become one chained [`Packet`]; the rest go back to the cache.
//! One buffer per WR (the default) keeps the single-buffer path as it was.
//!
//! **VLAN stripping** ([`Rx::with_vlan_strip`]): the RQ strips one 802.1Q tag and the CQ is an
//! extended one ([`Cq::with_cvlan`]), polled in batches with `ibv_start_poll` /
//! `ibv_next_poll` / `ibv_end_poll`; each completion's CVLAN field (`ibv_wc_read_cvlan`) goes
//! to [`RxMeta::vlan_tci`]. Verbs says no more than that field: libmlx5 returns the CQE's
//! `vlan_info` (providers/mlx5/cq.c `mlx5_cq_read_wc_cvlan`) and sets no completion flag for
//! "a tag was stripped" (`mlx5_cq_read_wc_flags`: checksum, immediate, GRH, tag matching only),
//! so a TCI of 0 (a priority tag of priority 0, VLAN 0) is not told apart from an untagged
//! frame: both get no tag. Without stripping the CQ is the ordinary one, polled with
//! `ibv_poll_cq` as before.

use std::sync::Arc;

use super::ffi::*;

use super::cq::{empty_wc, wc_status_str, Cq};
use super::qp::RawQp;
use super::tx::InFlight;
use super::wq::Wq;
use crate::error::Error;
use crate::mempool::{Mempool, PoolCache};
use crate::packet::{Packet, RxMeta};
use crate::stats::{Counter, StatsWriter};

/// Most completions handled by one `rx_burst`.
pub(crate) const RX_BURST: usize = 64;
/// Most WRs posted by one `ibv_post_recv`.
const REFILL_BATCH: usize = 64;

/// Where receive buffers are posted.
pub(crate) enum RecvTarget {
    /// The RAW_PACKET QP's own receive queue.
    Qp(Arc<RawQp>),
    /// A receive WQ behind an RSS indirection table.
    Wq(Arc<Wq>),
}

impl RecvTarget {
    /// # Safety
    /// As for [`RawQp::post_recv`].
    unsafe fn post(&self, wr: *mut ibv_recv_wr) -> Result<(), (i32, *mut ibv_recv_wr)> {
        match self {
            // SAFETY: forwarded contract.
            RecvTarget::Qp(q) => unsafe { q.post_recv(wr) },
            // SAFETY: forwarded contract.
            RecvTarget::Wq(w) => unsafe { w.post_recv(wr) },
        }
    }
}

/// What a completion pass found.
#[derive(Debug, Default)]
pub(crate) struct RxDone {
    /// Packets appended.
    pub got: usize,
    /// An error completion other than a flush (the queue needs recovery), or a post failure.
    pub error: Option<Error>,
}

pub(crate) struct Rx {
    queue: u16,
    target: RecvTarget,
    cq: Arc<Cq>,
    lkey: u32,
    /// WRs the RQ holds.
    ring: u32,
    /// Buffers (scatter entries) per WR.
    sges: u32,
    refill_at: u32,
    headroom: u16,
    room: u32,
    posted: InFlight,
    wrs: Box<[ibv_recv_wr]>,
    sg: Box<[ibv_sge]>,
    /// The buffer of each entry of `sg` (scatter WRs only).
    sg_idx: Box<[u32]>,
    wc: Box<[ibv_wc]>,
    /// The CVLAN field of each entry of `wc` (VLAN stripping only; empty otherwise).
    cvlan: Box<[u16]>,
}

// SAFETY: the WR array's internal pointers point into boxes owned by this struct; the verbs
// objects are `Send`. The struct is driven from one thread at a time (`&mut`).
unsafe impl Send for Rx {}

impl Rx {
    pub(crate) fn new(
        queue: u16,
        target: RecvTarget,
        cq: Arc<Cq>,
        lkey: u32,
        ring: u32,
        pool: &Mempool,
    ) -> Rx {
        let ring = ring.max(1);
        let headroom = pool.headroom();
        Rx {
            queue,
            target,
            cq,
            lkey,
            ring,
            sges: 1,
            refill_at: (ring / 2).clamp(1, 32),
            headroom,
            room: pool.buf_size() - headroom as u32,
            posted: InFlight::new(ring as usize),
            wrs: (0..REFILL_BATCH)
                .map(|_| ibv_recv_wr {
                    wr_id: 0,
                    next: std::ptr::null_mut(),
                    sg_list: std::ptr::null_mut(),
                    num_sge: 1,
                })
                .collect(),
            sg: vec![
                ibv_sge {
                    addr: 0,
                    length: 0,
                    lkey
                };
                REFILL_BATCH
            ]
            .into_boxed_slice(),
            sg_idx: Box::new([]),
            wc: (0..RX_BURST).map(|_| empty_wc()).collect(),
            cvlan: Box::new([]),
        }
    }

    /// Reads the tag the device stripped from each completion into [`RxMeta::vlan_tci`]: the
    /// RQ strips (`IBV_QP_CREATE_CVLAN_STRIPPING` / `IBV_WQ_FLAGS_CVLAN_STRIPPING`) and the CQ
    /// was made by [`Cq::with_cvlan`].
    pub(crate) fn with_vlan_strip(mut self) -> Rx {
        self.cvlan = vec![0; RX_BURST].into_boxed_slice();
        self
    }

    /// The tag of completion `i` of the last poll, if the device stripped one.
    #[inline]
    fn vlan(&self, i: usize) -> Option<u16> {
        self.cvlan.get(i).copied().filter(|&t| t != 0)
    }

    /// Makes each receive WR scatter over `sges` buffers (the RQ was created for that many
    /// entries per WR, and `ring` counts WRs).
    pub(crate) fn with_scatter(mut self, sges: u32) -> Rx {
        let sges = sges.max(1);
        if sges > 1 {
            self.sges = sges;
            self.posted = InFlight::new((self.ring * sges) as usize);
            self.sg = vec![
                ibv_sge {
                    addr: 0,
                    length: 0,
                    lkey: self.lkey
                };
                REFILL_BATCH * sges as usize
            ]
            .into_boxed_slice();
            self.sg_idx = vec![0; REFILL_BATCH * sges as usize].into_boxed_slice();
        }
        self
    }

    /// Buffers the device owns.
    pub(crate) fn posted(&self) -> u32 {
        self.posted.len()
    }

    /// Tops the RQ up when it is at least `refill_at` short (or `force`), one `ibv_post_recv`
    /// per [`REFILL_BATCH`] buffers.
    pub(crate) fn refill(&mut self, cache: &mut PoolCache, force: bool) -> Option<Error> {
        if self.sges > 1 {
            return self.refill_scatter(cache, force);
        }
        let mut short = self.ring - self.posted.len();
        if short == 0 || (!force && short < self.refill_at) {
            return None;
        }
        let sge_base = self.sg.as_mut_ptr();
        let wr_base = self.wrs.as_mut_ptr();
        while short > 0 {
            let mut k = 0;
            while k < REFILL_BATCH && (k as u32) < short {
                let Some(idx) = cache.get() else { break };
                let addr = cache.buf_ptr(idx) as u64 + self.headroom as u64;
                self.sg[k] = ibv_sge {
                    addr,
                    length: self.room,
                    lkey: self.lkey,
                };
                let wr = &mut self.wrs[k];
                wr.wr_id = idx as u64;
                // SAFETY: `k < REFILL_BATCH`, inside `sg`.
                wr.sg_list = unsafe { sge_base.add(k) };
                wr.num_sge = 1;
                wr.next = std::ptr::null_mut();
                if k > 0 {
                    // SAFETY: `k < REFILL_BATCH`, inside `wrs`.
                    self.wrs[k - 1].next = unsafe { wr_base.add(k) };
                }
                k += 1;
            }
            if k == 0 {
                // Pool exhausted: the RQ runs short until packets come back.
                return None;
            }
            // SAFETY: `wrs[..k]` is a terminated chain; each SGE names the data area of a free
            // buffer we own (taken from the cache), inside the registered pool.
            let res = unsafe { self.target.post(wr_base) };
            let posted = match res {
                Ok(()) => k,
                Err((_, bad)) => {
                    (bad as usize).wrapping_sub(wr_base as usize)
                        / std::mem::size_of::<ibv_recv_wr>()
                }
            }
            .min(k);
            for wr in &self.wrs[..posted] {
                self.posted.push(wr.wr_id as u32);
            }
            if let Err((rc, _)) = res {
                for wr in &self.wrs[posted..k] {
                    cache.put(wr.wr_id as u32);
                }
                return Some(Error::os(
                    "ibv_post_recv",
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
            short -= k as u32;
        }
        None
    }

    /// [`Rx::refill`] with `sges` buffers per WR: a WR is posted only whole (a short cache
    /// leaves the RQ short until packets come back).
    fn refill_scatter(&mut self, cache: &mut PoolCache, force: bool) -> Option<Error> {
        let n = self.sges as usize;
        let mut short = self.ring - self.posted.len() / self.sges;
        if short == 0 || (!force && short < self.refill_at) {
            return None;
        }
        let sge_base = self.sg.as_mut_ptr();
        let wr_base = self.wrs.as_mut_ptr();
        while short > 0 {
            let mut k = 0;
            'wrs: while k < REFILL_BATCH && (k as u32) < short {
                for j in 0..n {
                    let Some(idx) = cache.get() else {
                        for &b in &self.sg_idx[k * n..k * n + j] {
                            cache.put(b);
                        }
                        break 'wrs;
                    };
                    self.sg_idx[k * n + j] = idx;
                    self.sg[k * n + j] = ibv_sge {
                        addr: cache.buf_ptr(idx) as u64 + self.headroom as u64,
                        length: self.room,
                        lkey: self.lkey,
                    };
                }
                let wr = &mut self.wrs[k];
                wr.wr_id = self.sg_idx[k * n] as u64;
                // SAFETY: `(k + 1) * n <= REFILL_BATCH * n`, inside `sg`.
                wr.sg_list = unsafe { sge_base.add(k * n) };
                wr.num_sge = n as i32;
                wr.next = std::ptr::null_mut();
                if k > 0 {
                    // SAFETY: `k < REFILL_BATCH`, inside `wrs`.
                    self.wrs[k - 1].next = unsafe { wr_base.add(k) };
                }
                k += 1;
            }
            if k == 0 {
                return None;
            }
            // SAFETY: `wrs[..k]` is a terminated chain; each SGE names the data area of a free
            // buffer we own (taken from the cache), inside the registered pool.
            let res = unsafe { self.target.post(wr_base) };
            let posted = match res {
                Ok(()) => k,
                Err((_, bad)) => {
                    (bad as usize).wrapping_sub(wr_base as usize)
                        / std::mem::size_of::<ibv_recv_wr>()
                }
            }
            .min(k);
            for &b in &self.sg_idx[..posted * n] {
                self.posted.push(b);
            }
            if let Err((rc, _)) = res {
                for &b in &self.sg_idx[posted * n..k * n] {
                    cache.put(b);
                }
                return Some(Error::os(
                    "ibv_post_recv",
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
            short -= k as u32;
        }
        None
    }

    /// Polls up to `max` receive completions into `out` and refills.
    pub(crate) fn burst(
        &mut self,
        out: &mut Vec<Packet>,
        max: usize,
        cache: &mut PoolCache,
        pool: &Mempool,
        stats: &StatsWriter,
    ) -> RxDone {
        let mut done = RxDone::default();
        let n = max.min(RX_BURST);
        if n > 0 {
            let polled = if self.cvlan.is_empty() {
                self.cq.poll(&mut self.wc[..n])
            } else {
                self.cq.poll_cvlan(&mut self.wc[..n], &mut self.cvlan[..n])
            };
            match polled {
                Ok(got) => self.deliver(got, out, cache, pool, stats, &mut done),
                Err(e) => done.error = Some(e),
            }
        }
        if let Some(e) = self.refill(cache, false) {
            done.error.get_or_insert(e);
        }
        done
    }

    fn deliver(
        &mut self,
        got: usize,
        out: &mut Vec<Packet>,
        cache: &mut PoolCache,
        pool: &Mempool,
        stats: &StatsWriter,
        done: &mut RxDone,
    ) {
        if self.sges > 1 {
            return self.deliver_scatter(got, out, cache, pool, stats, done);
        }
        let shared = pool.shared();
        let mut bytes = 0u64;
        for i in 0..got {
            let wc = &self.wc[i];
            // The ring says which buffer completes next; `wr_id` must agree.
            let mut idx = wc.wr_id as u32;
            if let Some(b) = self.posted.pop() {
                if b != idx {
                    done.error.get_or_insert(Error::Queue {
                        queue: self.queue,
                        detail: format!("receive completion for buffer {idx}, expected {b}"),
                    });
                    idx = b;
                }
            }
            if wc.status == ibv_wc_status::IBV_WC_SUCCESS && wc.byte_len <= self.room {
                let len = wc.byte_len as u16;
                let mut p = Packet::from_raw_parts(shared, idx, self.headroom, len);
                let csum = wc.wc_flags & ibv_wc_flags::IBV_WC_IP_CSUM_OK.0 != 0;
                p.meta = RxMeta::new(0, 0, self.vlan(i), csum, csum);
                bytes += len as u64;
                out.push(p);
                done.got += 1;
            } else {
                cache.put(idx);
                if wc.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                    continue;
                }
                stats.add(Counter::RxErrors, 1);
                let detail = if wc.status == ibv_wc_status::IBV_WC_SUCCESS {
                    format!(
                        "received {} bytes into a {}-byte buffer",
                        wc.byte_len, self.room
                    )
                } else {
                    format!(
                        "receive completion error: {} (status {}, vendor error 0x{:x})",
                        wc_status_str(wc.status),
                        wc.status,
                        wc.vendor_err
                    )
                };
                done.error.get_or_insert(Error::Queue {
                    queue: self.queue,
                    detail,
                });
            }
        }
        stats.rx(done.got as u64, bytes);
    }

    /// [`Rx::deliver`] for WRs of `sges` buffers: the buffers a frame filled become one
    /// chained packet, the others go back to `cache`.
    fn deliver_scatter(
        &mut self,
        got: usize,
        out: &mut Vec<Packet>,
        cache: &mut PoolCache,
        pool: &Mempool,
        stats: &StatsWriter,
        done: &mut RxDone,
    ) {
        let shared = pool.shared();
        let n = self.sges;
        let mut bytes = 0u64;
        for i in 0..got {
            let wc = &self.wc[i];
            let (status, byte_len, wr_id) = (wc.status, wc.byte_len, wc.wr_id as u32);
            let (vendor, flags) = (wc.vendor_err, wc.wc_flags);
            let first = self.posted.pop();
            if first.is_some_and(|b| b != wr_id) {
                done.error.get_or_insert(Error::Queue {
                    queue: self.queue,
                    detail: format!(
                        "receive completion for buffer {wr_id}, expected {}",
                        first.unwrap_or(0)
                    ),
                });
            }
            let ok = status == ibv_wc_status::IBV_WC_SUCCESS && byte_len <= self.room * n;
            let mut left = if ok { byte_len } else { 0 };
            let mut head: Option<Packet> = None;
            for j in 0..n {
                let b = if j == 0 { first } else { self.posted.pop() };
                let Some(b) = b else { break };
                if left == 0 {
                    cache.put(b);
                    continue;
                }
                let k = left.min(self.room);
                left -= k;
                let p = Packet::from_raw_parts(shared, b, self.headroom, k as u16);
                match head.as_mut() {
                    None => head = Some(p),
                    // Same pool, single buffer: `chain` cannot refuse it.
                    Some(h) => drop(h.chain(p)),
                }
            }
            if let Some(mut p) = head.filter(|_| ok) {
                let csum = flags & ibv_wc_flags::IBV_WC_IP_CSUM_OK.0 != 0;
                p.meta = RxMeta::new(0, 0, self.vlan(i), csum, csum);
                bytes += byte_len as u64;
                out.push(p);
                done.got += 1;
                continue;
            }
            if status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                continue;
            }
            stats.add(Counter::RxErrors, 1);
            let detail = if status == ibv_wc_status::IBV_WC_SUCCESS {
                format!(
                    "received {byte_len} bytes into {n} buffers of {} bytes",
                    self.room
                )
            } else {
                format!(
                    "receive completion error: {} (status {status}, vendor error 0x{vendor:x})",
                    wc_status_str(status),
                )
            };
            done.error.get_or_insert(Error::Queue {
                queue: self.queue,
                detail,
            });
        }
        stats.rx(done.got as u64, bytes);
    }

    /// Drains pending completions after the RQ was moved to the error state (every posted
    /// buffer completes with a flush); returns them to `cache`.
    pub(crate) fn drain(&mut self, cache: &mut PoolCache) {
        while let Ok(n) = self.cq.poll(&mut self.wc) {
            for _ in 0..n as u32 * self.sges {
                if let Some(b) = self.posted.pop() {
                    cache.put(b);
                }
            }
            if n < self.wc.len() {
                break;
            }
        }
    }

    /// Returns every posted buffer to `cache`. Only once the device can no longer write them
    /// (QP/WQ reset or destroyed).
    pub(crate) fn forget_posted(&mut self, cache: &mut PoolCache) -> u32 {
        self.posted.free_all(|b| cache.put(b))
    }
}
