//! Recovery and teardown of a whole queue against the fake device.

use std::sync::Arc;

use crate::ibverbs::ffi::*;

use super::{deliver, nic, rig, Cqe};
use crate::ibverbs::queue::{QueueControl, Side, VerbsQueue, FLUSH_TIMEOUT};
use crate::mempool::Mempool;
use crate::packet::Packet;
use crate::queue::QueueOps;
use crate::Error;
/// The fake device's side of the QP state machine.
struct FakeControl;

fn flushed(wr_id: u64) -> Cqe {
    Cqe {
        wr_id,
        status: ibv_wc_status::IBV_WC_WR_FLUSH_ERR,
        byte_len: 0,
        wc_flags: 0,
    }
}

impl QueueControl for FakeControl {
    fn to_error(&self, _: Side) -> crate::Result<()> {
        nic(|n| {
            n.to_error_calls += 1;
            if n.flush_on_error {
                n.held.clear();
                let tx: Vec<u64> = n.pending.drain(..).collect();
                n.tx_cqes.extend(tx.into_iter().map(flushed));
                let rx: Vec<u64> = n.rx_posted.drain(..).map(|(id, _, _)| id).collect();
                n.rx_cqes.extend(rx.into_iter().map(flushed));
            }
        });
        Ok(())
    }

    fn reset(&self, _: Side) -> crate::Result<()> {
        nic(|n| {
            if n.fail_resets > 0 {
                n.fail_resets -= 1;
                return Err(Error::os(
                    "ibv_modify_qp(RESET)",
                    std::io::Error::from_raw_os_error(libc::EIO),
                ));
            }
            // A reset forgets everything posted, and libmlx5 cleans the QP's CQEs out of its CQs.
            n.resets += 1;
            n.pending.clear();
            n.held.clear();
            n.rx_posted.clear();
            n.tx_cqes.clear();
            n.rx_cqes.clear();
            Ok(())
        })
    }
}

fn verbs_queue(ring: u32) -> (VerbsQueue, Mempool) {
    let r = rig(ring, 0);
    let pool = r.pool.clone();
    let q = VerbsQueue::new(r.rx, r.tx, Box::new(FakeControl), &pool, Arc::new(())).expect("queue");
    (q, pool)
}

fn all_home(pool: &Mempool) {
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

fn alloc(pool: &Mempool, n: usize) -> Vec<Packet> {
    let mut v = Vec::new();
    pool.alloc_bulk(&mut v, n).expect("buffers");
    for p in v.iter_mut() {
        p.copy_from_slice(&[0x5a; 100]).expect("fits");
    }
    v
}

#[test]
fn a_send_error_completion_recovers_the_queue_and_loses_no_buffer() {
    let (mut q, pool) = verbs_queue(64);
    assert_eq!(
        q.buffers_with_device(),
        64,
        "receive ring filled at creation"
    );
    nic(|n| {
        n.flush_on_error = true;
        n.hold = true; // the good WRs stay outstanding
        n.next_status = Some(ibv_wc_status::IBV_WC_LOC_PROT_ERR);
    });
    let mut pkts = alloc(&pool, 10);
    assert_eq!(q.tx_burst(&mut pkts), 10);
    q.reclaim();
    let e = q.take_error().expect("error completion reported");
    assert!(e.to_string().contains("protection"), "{e}");
    assert!(q.take_error().is_none(), "reported once");
    assert_eq!(nic(|n| n.to_error_calls), 1);
    // The next burst finishes the recovery (flushes drained, reset, ring refilled) and sends.
    nic(|n| n.hold = false);
    let mut more = alloc(&pool, 4);
    assert_eq!(q.tx_burst(&mut more), 4);
    assert_eq!(nic(|n| n.resets), 1);
    assert_eq!(q.buffers_with_device(), 64 + 4);
    let s = q.stats().snapshot();
    assert_eq!((s.tx_errors, s.tx_drops), (1, 9), "{s:?}");
    assert_eq!(s.rx_errors, 0, "receive flushes are not errors");
    drop(q);
    all_home(&pool);
}

#[test]
fn a_receive_error_recovers_the_queue() {
    let (mut q, pool) = verbs_queue(16);
    nic(|n| n.flush_on_error = true);
    deliver(&vec![1; 5000], 0);
    let mut out = Vec::new();
    assert_eq!(q.rx_burst(&mut out, 8), 0);
    assert!(q.take_error().is_some());
    assert_eq!(q.rx_burst(&mut out, 8), 0);
    assert_eq!(nic(|n| n.resets), 1);
    assert_eq!(q.buffers_with_device(), 16, "ring refilled after the reset");
    deliver(&[2; 60], 0);
    assert_eq!(q.rx_burst(&mut out, 8), 1);
    assert_eq!(out[0].data(), &[2; 60][..]);
    drop(out);
    drop(q);
    all_home(&pool);
}

#[test]
fn a_hung_device_is_reset_after_the_flush_timeout() {
    let (mut q, pool) = verbs_queue(16);
    nic(|n| n.next_status = Some(ibv_wc_status::IBV_WC_GENERAL_ERR));
    let mut pkts = alloc(&pool, 3);
    q.tx_burst(&mut pkts);
    q.reclaim();
    assert!(q.take_error().is_some());
    // No flush comes: the queue stays out of service until the timeout, then resets anyway.
    let mut more = alloc(&pool, 1);
    assert_eq!(q.tx_burst(&mut more), 0);
    assert_eq!(nic(|n| n.resets), 0);
    std::thread::sleep(FLUSH_TIMEOUT + std::time::Duration::from_millis(20));
    assert_eq!(q.tx_burst(&mut more), 1);
    assert_eq!(nic(|n| n.resets), 1);
    drop(q);
    all_home(&pool);
}

#[test]
fn buffers_stay_with_a_queue_whose_reset_fails() {
    let (mut q, pool) = verbs_queue(16);
    nic(|n| {
        n.next_status = Some(ibv_wc_status::IBV_WC_GENERAL_ERR);
        n.hold = true;
        n.fail_resets = 1;
    });
    let mut pkts = alloc(&pool, 3);
    q.tx_burst(&mut pkts);
    q.reclaim();
    let _ = q.take_error();
    std::thread::sleep(FLUSH_TIMEOUT + std::time::Duration::from_millis(20));
    let mut out = Vec::new();
    assert_eq!(q.rx_burst(&mut out, 8), 0);
    let e = q.take_error().expect("failed reset reported");
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // The device may still own them: nothing was returned to the pool.
    assert_eq!(q.buffers_with_device(), 16 + 2);
    std::thread::sleep(FLUSH_TIMEOUT + std::time::Duration::from_millis(20));
    assert_eq!(q.rx_burst(&mut out, 8), 0);
    assert_eq!(nic(|n| n.resets), 1);
    assert_eq!(q.buffers_with_device(), 16);
    drop(q);
    all_home(&pool);
}

#[test]
fn dropping_a_queue_flushes_and_returns_every_buffer() {
    let (mut q, pool) = verbs_queue(32);
    nic(|n| {
        n.flush_on_error = true;
        n.hold = true;
    });
    let mut pkts = alloc(&pool, 20);
    assert_eq!(q.tx_burst(&mut pkts), 20);
    assert_eq!(q.buffers_with_device(), 32 + 20);
    drop(q);
    assert_eq!(nic(|n| (n.to_error_calls, n.resets)), (1, 0));
    all_home(&pool);
}

/// The state changes a [`SplitControl`] was asked for.
type Calls = Arc<std::sync::Mutex<Vec<(&'static str, Side)>>>;

/// A fake whose send and receive halves fail and recover apart (a QP beside a receive WQ).
struct SplitControl(Calls);

impl QueueControl for SplitControl {
    fn to_error(&self, side: Side) -> crate::Result<()> {
        self.0.lock().unwrap().push(("error", side));
        nic(|n| {
            n.to_error_calls += 1;
            if n.flush_on_error {
                if side != Side::Recv {
                    n.held.clear();
                    let tx: Vec<u64> = n.pending.drain(..).collect();
                    n.tx_cqes.extend(tx.into_iter().map(flushed));
                }
                if side != Side::Send {
                    let rx: Vec<u64> = n.rx_posted.drain(..).map(|(id, _, _)| id).collect();
                    n.rx_cqes.extend(rx.into_iter().map(flushed));
                }
            }
        });
        Ok(())
    }

    fn reset(&self, side: Side) -> crate::Result<()> {
        self.0.lock().unwrap().push(("reset", side));
        nic(|n| {
            n.resets += 1;
            if side != Side::Recv {
                n.pending.clear();
                n.held.clear();
                n.tx_cqes.clear();
            }
            if side != Side::Send {
                n.rx_posted.clear();
                n.rx_cqes.clear();
            }
        });
        Ok(())
    }

    fn separate_sides(&self) -> bool {
        true
    }
}

#[test]
fn a_send_error_leaves_a_separate_receive_queue_alone() {
    let r = rig(64, 0);
    let pool = r.pool.clone();
    let calls = Calls::default();
    let mut q = VerbsQueue::new(
        r.rx,
        r.tx,
        Box::new(SplitControl(calls.clone())),
        &pool,
        Arc::new(()),
    )
    .expect("queue");
    nic(|n| {
        n.flush_on_error = true;
        n.hold = true;
        n.next_status = Some(ibv_wc_status::IBV_WC_LOC_PROT_ERR);
    });
    let mut pkts = alloc(&pool, 10);
    assert_eq!(q.tx_burst(&mut pkts), 10);
    q.reclaim();
    assert!(q.take_error().is_some());
    // While the send side recovers, frames keep arriving on the receive ring.
    deliver(&[3; 60], 0);
    let mut out = Vec::new();
    assert_eq!(q.rx_burst(&mut out, 8), 1);
    assert_eq!(out[0].data(), &[3; 60][..]);
    out.clear();
    nic(|n| n.hold = false);
    let mut more = alloc(&pool, 4);
    assert_eq!(q.tx_burst(&mut more), 4);
    assert_eq!(
        *calls.lock().unwrap(),
        [("error", Side::Send), ("reset", Side::Send)]
    );
    let s = q.stats().snapshot();
    assert_eq!((s.tx_errors, s.tx_drops), (1, 9), "{s:?}");
    assert_eq!((s.rx_packets, s.rx_errors, s.rx_drops), (1, 0, 0), "{s:?}");
    drop(q);
    all_home(&pool);
}
