//! Data-path tests against a fake verbs provider.
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are inline in verbs.h: they call through
//! the context's `ops` table. The fake NIC below fills that table with functions that record
//! what is posted, copy sent frames out of the pool through the SGEs, complete signaled WRs, and
//! deliver frames into posted receive buffers — enough to check the send chain, inline sends,
//! signaling, buffer reclamation, partial posts, error completions and receive refills without
//! a device. The fake objects are leaked, never passed to a real libibverbs function.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::ibverbs::ffi::*;

use super::context::Context;
use super::cq::Cq;
use super::pd::Pd;
use super::qp::{QpCaps, RawQp};
use super::rx::{RecvTarget, Rx};
use super::tx::Tx;
use crate::mempool::{HugePages, Mempool, MempoolConfig, PoolCache};
use crate::packet::Packet;
use crate::stats::StatsWriter;
use crate::Error;

mod cvlan;
pub(crate) mod layout;
mod recovery;

const LKEY: u32 = 0x1234;

struct Sent {
    wr_id: u64,
    flags: u32,
    nsge: usize,
    data: Vec<u8>,
}

struct Cqe {
    wr_id: u64,
    status: u32,
    byte_len: u32,
    wc_flags: u32,
}

#[derive(Default)]
struct Nic {
    tx_cq: usize,
    post_send_calls: usize,
    post_recv_calls: usize,
    sent: Vec<Sent>,
    tx_cqes: VecDeque<Cqe>,
    /// Completions withheld (the device is "busy") until `release`.
    hold: bool,
    held: VecDeque<Cqe>,
    /// Reject the WR at this position of the next chain with ENOMEM.
    fail_send_at: Option<usize>,
    /// Status of the next send completion (generated even for an unsignaled WR).
    next_status: Option<u32>,
    rx_posted: VecDeque<(u64, u64, u32)>,
    rx_cqes: VecDeque<Cqe>,
    /// Send WRs posted and not yet completed, in order.
    pending: VecDeque<u64>,
    /// `to_error` flushes everything posted (a healthy device); off: the device hangs.
    flush_on_error: bool,
    to_error_calls: usize,
    resets: usize,
    /// Fail this many resets.
    fail_resets: usize,
}

thread_local! {
    static NIC: RefCell<Nic> = RefCell::new(Nic::default());
}

fn nic<R>(f: impl FnOnce(&mut Nic) -> R) -> R {
    NIC.with(|n| f(&mut n.borrow_mut()))
}

unsafe extern "C" fn fake_post_send(
    _qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> libc::c_int {
    nic(|n| {
        n.post_send_calls += 1;
        let mut w = wr;
        let mut i = 0;
        while !w.is_null() {
            if n.fail_send_at == Some(i) {
                n.fail_send_at = None;
                // SAFETY: `bad` is the caller's output location.
                unsafe { *bad = w };
                return libc::ENOMEM;
            }
            // SAFETY: the caller passes a valid chain.
            let r = unsafe { &*w };
            let mut data = Vec::new();
            for j in 0..r.num_sge as usize {
                // SAFETY: the SGE array has `num_sge` entries naming readable pool bytes.
                let s = unsafe { &*r.sg_list.add(j) };
                assert_eq!(s.lkey, LKEY);
                // SAFETY: as above.
                data.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(s.addr as *const u8, s.length as usize)
                });
            }
            n.sent.push(Sent {
                wr_id: r.wr_id,
                flags: r.send_flags,
                nsge: r.num_sge as usize,
                data,
            });
            n.pending.push_back(r.wr_id);
            let status = n.next_status.take();
            let signaled = r.send_flags & ibv_send_flags::IBV_SEND_SIGNALED.0 != 0;
            if signaled || status.is_some() {
                let c = Cqe {
                    wr_id: r.wr_id,
                    status: status.unwrap_or(ibv_wc_status::IBV_WC_SUCCESS),
                    byte_len: 0,
                    wc_flags: 0,
                };
                if !n.hold || status.is_some() {
                    // Completed: this WR and all before it.
                    while let Some(id) = n.pending.pop_front() {
                        if id == r.wr_id {
                            break;
                        }
                    }
                }
                if n.hold && status.is_none() {
                    n.held.push_back(c);
                } else {
                    n.tx_cqes.push_back(c);
                }
            }
            w = r.next;
            i += 1;
        }
        0
    })
}

unsafe extern "C" fn fake_post_recv(
    _qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    _bad: *mut *mut ibv_recv_wr,
) -> libc::c_int {
    nic(|n| {
        n.post_recv_calls += 1;
        let mut w = wr;
        while !w.is_null() {
            // SAFETY: valid chain with one SGE each.
            let r = unsafe { &*w };
            assert_eq!(r.num_sge, 1);
            // SAFETY: as above.
            let s = unsafe { &*r.sg_list };
            assert_eq!(s.lkey, LKEY);
            n.rx_posted.push_back((r.wr_id, s.addr, s.length));
            w = r.next;
        }
        0
    })
}

unsafe extern "C" fn fake_poll_cq(
    cq: *mut ibv_cq,
    max: libc::c_int,
    wc: *mut ibv_wc,
) -> libc::c_int {
    nic(|n| {
        let q = if cq as usize == n.tx_cq {
            &mut n.tx_cqes
        } else {
            &mut n.rx_cqes
        };
        let k = (max as usize).min(q.len());
        for i in 0..k {
            let c = q.pop_front().expect("counted");
            // SAFETY: the caller's array has room for `max` entries.
            let w = unsafe { &mut *wc.add(i) };
            w.wr_id = c.wr_id;
            w.status = c.status;
            w.byte_len = c.byte_len;
            w.wc_flags = c.wc_flags;
            w.vendor_err = 0;
        }
        k as libc::c_int
    })
}

fn leak<T>(v: T) -> NonNull<T> {
    NonNull::from(Box::leak(Box::new(v)))
}

fn zeroed<T>() -> T {
    // SAFETY: only used for plain-old-data verbs structs, for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

struct Rig {
    pool: Mempool,
    cache: PoolCache,
    stats: StatsWriter,
    tx: Tx,
    rx: Rx,
}

fn rig(ring: u32, max_inline: u32) -> Rig {
    let mut c: ibv_context = zeroed();
    c.ops.post_send = Some(fake_post_send);
    c.ops.post_recv = Some(fake_post_recv);
    c.ops.poll_cq = Some(fake_poll_cq);
    let c = leak(c);
    let ctx = Context::fake(c);
    let mut p: ibv_pd = zeroed();
    p.context = c.as_ptr();
    let pd = Pd::fake(&ctx, leak(p));
    let mk_cq = || {
        let mut q: ibv_cq = zeroed();
        q.context = c.as_ptr();
        q.cqe = ring as i32;
        // SAFETY: a fake CQ; the extra reference below keeps it from ever being destroyed.
        let cq = Arc::new(unsafe { Cq::from_raw(&ctx, leak(q)) });
        std::mem::forget(cq.clone());
        cq
    };
    let (tx_cq, rx_cq) = (mk_cq(), mk_cq());
    nic(|n| *n = Nic::default());
    nic(|n| n.tx_cq = tx_cq.as_raw() as usize);
    let mut q: ibv_qp = zeroed();
    q.context = c.as_ptr();
    let caps = QpCaps {
        max_send_wr: ring,
        max_recv_wr: ring,
        max_send_sge: 4,
        max_inline_data: max_inline,
        max_tso_header: 0,
    };
    let qp = RawQp::fake(leak(q), caps, &pd, tx_cq.clone(), rx_cq.clone());
    let pool = Mempool::new(&MempoolConfig {
        buffers: 1024,
        huge_pages: HugePages::Never,
        ..MempoolConfig::default()
    })
    .expect("pool");
    Rig {
        cache: pool.cache(),
        stats: StatsWriter::default(),
        tx: Tx::new(3, qp.clone(), tx_cq, LKEY, true),
        rx: Rx::new(3, RecvTarget::Qp(qp), rx_cq, LKEY, ring, &pool),
        pool,
    }
}

impl Rig {
    fn packets(&mut self, n: usize, len: usize) -> Vec<Packet> {
        (0..n)
            .map(|i| {
                let mut p = self.cache.alloc().expect("buffer");
                let bytes: Vec<u8> = (0..len).map(|b| (b + i) as u8).collect();
                p.copy_from_slice(&bytes).expect("fits");
                p
            })
            .collect()
    }

    fn send(&mut self, pkts: &mut Vec<Packet>) -> (usize, Option<Error>) {
        self.tx
            .burst(pkts, &mut self.cache, &self.pool, &self.stats)
    }

    /// Every buffer is back in the pool once the rings are emptied.
    fn assert_all_home(mut self) {
        self.tx.forget_in_flight(&mut self.cache);
        self.rx.forget_posted(&mut self.cache);
        self.cache.flush();
        self.pool.flush_local_cache();
        assert_eq!(self.pool.available(), self.pool.capacity());
    }
}

#[test]
fn one_post_per_burst_signaled_last_buffers_freed_on_completion() {
    let mut r = rig(64, 0);
    let mut pkts = r.packets(10, 100);
    let want: Vec<Vec<u8>> = pkts.iter().map(|p| p.to_vec()).collect();
    let (n, e) = r.send(&mut pkts);
    assert_eq!((n, e.is_none()), (10, true));
    assert!(pkts.is_empty());
    nic(|n| {
        assert_eq!(n.post_send_calls, 1);
        assert_eq!(n.sent.len(), 10);
        for (s, w) in n.sent.iter().zip(&want) {
            assert_eq!(&s.data, w);
            assert_eq!(s.flags & ibv_send_flags::IBV_SEND_INLINE.0, 0);
        }
        let signaled: Vec<bool> = n
            .sent
            .iter()
            .map(|s| s.flags & ibv_send_flags::IBV_SEND_SIGNALED.0 != 0)
            .collect();
        // Ring 64 signals every 16 WRs and always the last of a burst.
        assert_eq!(signaled.iter().filter(|s| **s).count(), 1);
        assert!(signaled[9]);
        let ids: std::collections::HashSet<u64> = n.sent.iter().map(|s| s.wr_id).collect();
        assert_eq!(ids.len(), 10, "wr_ids are distinct");
    });
    assert_eq!(r.tx.buffers_in_flight(), 10);
    assert_eq!(r.tx.outstanding(), 10);
    let done = r.tx.complete(&mut r.cache, &r.stats);
    assert_eq!(done.freed, 10);
    assert!(done.error.is_none());
    assert_eq!((r.tx.buffers_in_flight(), r.tx.outstanding()), (0, 0));
    let s = r.stats.snapshot();
    assert_eq!((s.tx_packets, s.tx_bytes), (10, 1000));
    r.assert_all_home();
}

#[test]
fn small_frames_go_inline_and_their_buffers_come_back_at_once() {
    let mut r = rig(64, 64);
    let mut pkts = r.packets(4, 60);
    pkts.extend(r.packets(2, 200));
    let (n, _) = r.send(&mut pkts);
    assert_eq!(n, 6);
    nic(|n| {
        let inline: Vec<bool> = n
            .sent
            .iter()
            .map(|s| s.flags & ibv_send_flags::IBV_SEND_INLINE.0 != 0)
            .collect();
        assert_eq!(inline, [true, true, true, true, false, false]);
    });
    // Only the two large frames wait for their completion.
    assert_eq!(r.tx.buffers_in_flight(), 2);
    assert_eq!(r.tx.complete(&mut r.cache, &r.stats).freed, 2);
    r.assert_all_home();
}

#[test]
fn checksum_offload_is_requested_per_packet() {
    let mut r = rig(64, 0);
    let mut pkts = r.packets(2, 80);
    pkts[1].offload.l4_csum = true;
    r.send(&mut pkts);
    nic(|n| {
        let csum = ibv_send_flags::IBV_SEND_IP_CSUM.0;
        assert_eq!(n.sent[0].flags & csum, 0);
        assert_eq!(n.sent[1].flags & csum, csum);
    });
    r.tx.complete(&mut r.cache, &r.stats);
    r.assert_all_home();
}

#[test]
fn a_partial_post_leaves_the_rest_in_order_and_reports_it() {
    let mut r = rig(64, 0);
    let mut pkts = r.packets(8, 90);
    let fourth = pkts[3].to_vec();
    nic(|n| n.fail_send_at = Some(3));
    let (n, e) = r.send(&mut pkts);
    assert_eq!(n, 3);
    assert_eq!(pkts.len(), 5);
    assert_eq!(pkts[0].to_vec(), fourth);
    assert_eq!(e.and_then(|e| e.raw_os_error()), Some(libc::ENOMEM));
    assert_eq!(r.tx.outstanding(), 3);
    // The signaled WR was not posted: the three stay in flight until a later completion.
    assert_eq!(r.tx.complete(&mut r.cache, &r.stats).freed, 0);
    let (n, e) = r.send(&mut pkts);
    assert_eq!((n, e.is_none()), (5, true));
    assert_eq!(r.tx.complete(&mut r.cache, &r.stats).freed, 8);
    r.assert_all_home();
}

#[test]
fn a_full_send_queue_takes_only_what_fits() {
    let mut r = rig(8, 0);
    nic(|n| n.hold = true);
    let mut pkts = r.packets(20, 64);
    let (n, _) = r.send(&mut pkts);
    assert_eq!(n, 8);
    assert_eq!(pkts.len(), 12);
    let (n, _) = r.send(&mut pkts);
    assert_eq!(n, 0, "no room until the device completes");
    nic(|n| {
        n.hold = false;
        let held = std::mem::take(&mut n.held);
        n.tx_cqes.extend(held);
    });
    let (n, _) = r.send(&mut pkts);
    assert_eq!(n, 8);
    let (n, _) = r.tx.burst(&mut pkts, &mut r.cache, &r.pool, &r.stats);
    assert_eq!(n, 4);
    r.tx.complete(&mut r.cache, &r.stats);
    assert_eq!(r.tx.buffers_in_flight(), 0);
    r.assert_all_home();
}

#[test]
fn an_error_completion_is_counted_reported_and_frees_the_buffers() {
    let mut r = rig(64, 0);
    let mut pkts = r.packets(5, 70);
    nic(|n| n.next_status = Some(ibv_wc_status::IBV_WC_LOC_PROT_ERR));
    r.send(&mut pkts);
    let done = r.tx.complete(&mut r.cache, &r.stats);
    let e = done.error.expect("error completion reported");
    assert!(matches!(e, Error::Queue { queue: 3, .. }), "{e:?}");
    assert!(e.to_string().contains("protection"), "{e}");
    assert_eq!(r.stats.snapshot().tx_errors, 1);
    // The last WR's (signaled) completion freed everything before it too.
    assert_eq!(done.freed, 5);
    r.assert_all_home();
}

/// Issue 20 defect 3: a packet is counted once. Packets are counted in `tx_packets` when posted;
/// one that then fails (error or flush completion) moves to `tx_errors` / `tx_drops` and out
/// of `tx_packets` and `tx_bytes`, instead of being counted as sent and as lost.
#[test]
fn a_failed_or_flushed_send_leaves_tx_packets() {
    for (status, drops, errors) in [
        (ibv_wc_status::IBV_WC_LOC_PROT_ERR, 0, 1),
        (ibv_wc_status::IBV_WC_WR_FLUSH_ERR, 1, 0),
    ] {
        let mut r = rig(64, 0);
        let mut pkts = r.packets(5, 70);
        assert_eq!(r.send(&mut pkts).0, 5);
        let s = r.stats.snapshot();
        assert_eq!((s.tx_packets, s.tx_bytes), (5, 350), "counted at post");
        let mut more = r.packets(3, 100);
        nic(|n| n.next_status = Some(status));
        assert_eq!(r.send(&mut more).0, 3);
        r.tx.complete(&mut r.cache, &r.stats);
        let s = r.stats.snapshot();
        assert_eq!((s.tx_drops, s.tx_errors), (drops, errors), "{s:?}");
        assert_eq!((s.tx_packets, s.tx_bytes), (7, 550), "{s:?}");
        r.assert_all_home();
    }
}

#[test]
fn chained_packets_use_one_wr_with_several_sges() {
    let mut r = rig(64, 256);
    let mut head = r.packets(1, 40).remove(0);
    let tail = r.packets(1, 30).remove(0);
    let mut want = head.to_vec();
    want.extend(tail.to_vec());
    head.chain(tail).expect("chain");
    let mut pkts = vec![head];
    assert_eq!(r.send(&mut pkts).0, 1);
    nic(|n| {
        assert_eq!(n.sent[0].nsge, 2);
        assert_eq!(n.sent[0].data, want);
        // Chains are never sent inline.
        assert_eq!(n.sent[0].flags & ibv_send_flags::IBV_SEND_INLINE.0, 0);
    });
    assert_eq!(r.tx.buffers_in_flight(), 2);
    assert_eq!(r.tx.complete(&mut r.cache, &r.stats).freed, 2);
    r.assert_all_home();
}

#[test]
fn unsendable_packets_are_dropped_reported_and_not_counted_as_taken() {
    let mut r = rig(64, 0);
    let other = Mempool::new(&MempoolConfig {
        buffers: 8,
        huge_pages: HugePages::Never,
        ..MempoolConfig::default()
    })
    .expect("pool");
    let mut foreign = other.alloc().expect("buffer");
    foreign.copy_from_slice(&[1; 60]).expect("fits");
    let mut pkts = r.packets(2, 60);
    pkts.insert(1, foreign);
    let (n, e) = r.send(&mut pkts);
    // The good one before it went out; the foreign one was removed and dropped, and is not in
    // the count of packets the device took (issue 12 item 1).
    assert_eq!(n, 1);
    assert_eq!(pkts.len(), 1);
    nic(|n| assert_eq!(n.sent.len(), 1));
    assert!(e.expect("reported").to_string().contains("another pool"));
    assert_eq!(r.stats.snapshot().tx_errors, 1);
    assert_eq!(r.send(&mut pkts).0, 1);
    r.tx.complete(&mut r.cache, &r.stats);
    r.assert_all_home();
}

fn deliver(frame: &[u8], wc_flags: u32) {
    nic(|n| {
        let (id, addr, len) = n.rx_posted.pop_front().expect("a posted buffer");
        if frame.len() as u32 > len {
            n.rx_cqes.push_back(Cqe {
                wr_id: id,
                status: ibv_wc_status::IBV_WC_LOC_LEN_ERR,
                byte_len: 0,
                wc_flags: 0,
            });
            return;
        }
        // SAFETY: the buffer was posted to the fake device, which now owns it.
        unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), addr as *mut u8, frame.len()) };
        n.rx_cqes.push_back(Cqe {
            wr_id: id,
            status: ibv_wc_status::IBV_WC_SUCCESS,
            byte_len: frame.len() as u32,
            wc_flags,
        });
    })
}

#[test]
fn receive_ring_is_refilled_in_batches_and_frames_arrive_with_metadata() {
    let mut r = rig(128, 0);
    assert!(r.rx.refill(&mut r.cache, true).is_none());
    assert_eq!(r.rx.posted(), 128);
    nic(|n| {
        assert_eq!(n.post_recv_calls, 2, "64 WRs per ibv_post_recv");
        let (_, addr, len) = n.rx_posted[0];
        let headroom = r.pool.headroom() as u64;
        assert_eq!(len, r.pool.buf_size() - headroom as u32);
        assert_eq!((addr - headroom) % r.pool.buf_size() as u64, 0);
    });
    for i in 0..40u8 {
        let flags = if i % 2 == 0 {
            ibv_wc_flags::IBV_WC_IP_CSUM_OK.0
        } else {
            0
        };
        deliver(&[i; 64], flags);
    }
    let mut out = Vec::new();
    let done = r.rx.burst(&mut out, 32, &mut r.cache, &r.pool, &r.stats);
    assert_eq!((done.got, done.error.is_none()), (32, true));
    for (i, p) in out.iter().enumerate() {
        assert_eq!(p.data(), &[i as u8; 64][..]);
        assert_eq!(p.meta.l3_csum_ok(), i % 2 == 0);
        assert_eq!(p.meta.l4_csum_ok(), i % 2 == 0);
    }
    // 32 short of 128 reaches the refill threshold: topped up in the same call.
    assert_eq!(r.rx.posted(), 128);
    let done = r.rx.burst(&mut out, 32, &mut r.cache, &r.pool, &r.stats);
    assert_eq!(done.got, 8);
    assert_eq!(r.rx.posted(), 120, "8 short is below the threshold");
    let s = r.stats.snapshot();
    assert_eq!((s.rx_packets, s.rx_bytes), (40, 40 * 64));
    drop(out);
    r.assert_all_home();
}

#[test]
fn receive_errors_return_the_buffer_and_flushes_are_silent() {
    let mut r = rig(16, 0);
    r.rx.refill(&mut r.cache, true);
    deliver(&vec![7; 5000], 0); // longer than any buffer
    deliver(&[1; 60], 0);
    nic(|n| {
        let (id, _, _) = n.rx_posted.pop_front().expect("posted");
        n.rx_cqes.push_back(Cqe {
            wr_id: id,
            status: ibv_wc_status::IBV_WC_WR_FLUSH_ERR,
            byte_len: 0,
            wc_flags: 0,
        });
    });
    let mut out = Vec::new();
    let done = r.rx.burst(&mut out, 16, &mut r.cache, &r.pool, &r.stats);
    assert_eq!(done.got, 1);
    let e = done.error.expect("length error reported");
    assert!(e.to_string().contains("length"), "{e}");
    assert_eq!(r.stats.snapshot().rx_errors, 1, "the flush is not an error");
    assert_eq!(r.rx.posted(), 13);
    drop(out);
    r.assert_all_home();
}
