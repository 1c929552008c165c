//! VLAN stripping's receive path against a fake extended CQ: completions polled in batches
//! through `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` (the protocol of rdma-core's
//! libibverbs/man/ibv_create_cq_ex.3: ENOENT from `start_poll` on an empty CQ, and then no
//! `end_poll`; one `end_poll` after every successful `start_poll`), each one's CVLAN field in
//! `RxMeta::vlan_tci`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::ibverbs::ffi::*;

use super::{fake_post_recv, leak, nic, rig, zeroed, LKEY};
use crate::ibverbs::context::Context;
use crate::ibverbs::cq::Cq;
use crate::ibverbs::pd::Pd;
use crate::ibverbs::qp::{QpCaps, RawQp};
use crate::ibverbs::rx::{RecvTarget, Rx};

/// One completion: wr_id, status, byte_len, wc_flags, CVLAN.
type Wce = (u64, u32, u32, u32, u16);

#[derive(Default)]
struct ExCq {
    ready: VecDeque<Wce>,
    current: Option<Wce>,
    /// Inside a start_poll .. end_poll pass.
    polling: bool,
    starts: usize,
    ends: usize,
    /// Calls out of protocol (a panic cannot cross the C frames, so they are noted).
    broken: Vec<&'static str>,
}

thread_local! {
    static EX: RefCell<ExCq> = RefCell::new(ExCq::default());
}

fn ex<R>(f: impl FnOnce(&mut ExCq) -> R) -> R {
    EX.with(|e| f(&mut e.borrow_mut()))
}

/// Makes the next ready completion the current one (its wr_id and status in the CQ, as
/// libibverbs has them); ENOENT when there is none.
fn advance(cq: *mut ibv_cq_ex, e: &mut ExCq) -> libc::c_int {
    let Some(c) = e.ready.pop_front() else {
        e.current = None;
        return libc::ENOENT;
    };
    e.current = Some(c);
    // SAFETY: the fake CQ the test leaked.
    unsafe {
        (*cq).wr_id = c.0;
        (*cq).status = c.1;
    }
    0
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> libc::c_int {
    ex(|e| {
        if e.polling {
            e.broken.push("start_poll inside a pass");
        }
        let rc = advance(cq, e);
        if rc == 0 {
            e.polling = true;
            e.starts += 1;
        }
        rc
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> libc::c_int {
    ex(|e| {
        if !e.polling {
            e.broken.push("next_poll outside a pass");
        }
        advance(cq, e)
    })
}

unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {
    ex(|e| {
        if !e.polling {
            e.broken.push("end_poll outside a pass");
        }
        e.polling = false;
        e.ends += 1;
    })
}

fn current(e: &mut ExCq) -> Wce {
    if !e.polling {
        e.broken.push("read outside a pass");
    }
    e.current.unwrap_or_default()
}

unsafe extern "C" fn read_byte_len(_cq: *mut ibv_cq_ex) -> u32 {
    ex(|e| current(e).2)
}

unsafe extern "C" fn read_wc_flags(_cq: *mut ibv_cq_ex) -> libc::c_uint {
    ex(|e| current(e).3)
}

unsafe extern "C" fn read_cvlan(_cq: *mut ibv_cq_ex) -> u16 {
    ex(|e| current(e).4)
}

unsafe extern "C" fn read_vendor_err(_cq: *mut ibv_cq_ex) -> u32 {
    ex(|e| {
        current(e);
        0x32
    })
}

/// A receive side over a fake extended CQ, 16 single-buffer WRs posted.
fn strip_rx(r: &mut super::Rig) -> Rx {
    let mut c: ibv_context = zeroed();
    c.ops.post_recv = Some(fake_post_recv);
    let c = leak(c);
    let ctx = Context::fake(c);
    let mut p: ibv_pd = zeroed();
    p.context = c.as_ptr();
    let pd = Pd::fake(&ctx, leak(p));
    let mut q: ibv_cq_ex = zeroed();
    q.context = c.as_ptr();
    q.cqe = 16;
    q.start_poll = Some(start_poll);
    q.next_poll = Some(next_poll);
    q.end_poll = Some(end_poll);
    q.read_byte_len = Some(read_byte_len);
    q.read_wc_flags = Some(read_wc_flags);
    q.read_cvlan = Some(read_cvlan);
    q.read_vendor_err = Some(read_vendor_err);
    // SAFETY: a fake CQ; the extra reference below keeps it from ever being destroyed.
    let cq = Arc::new(unsafe { Cq::from_raw_ex(&ctx, leak(q)) });
    std::mem::forget(cq.clone());
    assert!(cq.has_cvlan());
    let mut qp: ibv_qp = zeroed();
    qp.context = c.as_ptr();
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_inline_data: 0,
        max_tso_header: 0,
    };
    let qp = RawQp::fake(leak(qp), caps, &pd, cq.clone(), cq.clone());
    ex(|e| *e = ExCq::default());
    let mut rx = Rx::new(3, RecvTarget::Qp(qp), cq, LKEY, 16, &r.pool).with_vlan_strip();
    assert!(rx.refill(&mut r.cache, true).is_none());
    rx
}

/// The device fills the next posted buffer with `frame` and completes it with `cvlan`.
fn deliver(frame: &[u8], status: u32, cvlan: u16) {
    let (id, addr, _) = nic(|n| n.rx_posted.pop_front()).expect("a posted buffer");
    // SAFETY: the buffer was posted to the fake device, which now owns it.
    unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), addr as *mut u8, frame.len()) };
    let flags = ibv_wc_flags::IBV_WC_IP_CSUM_OK.0;
    ex(|e| {
        e.ready
            .push_back((id, status, frame.len() as u32, flags, cvlan))
    });
}

#[test]
fn stripped_tags_reach_rx_meta_through_batched_extended_polls() {
    let mut r = rig(16, 0);
    let mut rx = strip_rx(&mut r);
    deliver(&[1; 60], ibv_wc_status::IBV_WC_SUCCESS, 0x2064);
    deliver(&[2; 60], ibv_wc_status::IBV_WC_SUCCESS, 0); // untagged
    deliver(&[3; 60], ibv_wc_status::IBV_WC_SUCCESS, 0x0005);
    deliver(&[4; 60], ibv_wc_status::IBV_WC_LOC_LEN_ERR, 0x0777);
    let mut out = Vec::new();
    // Two at most: one pass of two completions, the rest left on the CQ.
    let done = rx.burst(&mut out, 2, &mut r.cache, &r.pool, &r.stats);
    assert_eq!((done.got, done.error.is_none()), (2, true));
    ex(|e| assert_eq!((e.starts, e.ends, e.ready.len()), (1, 1, 2)));
    let done = rx.burst(&mut out, 16, &mut r.cache, &r.pool, &r.stats);
    assert_eq!(done.got, 1);
    let e = done.error.expect("the error completion is reported");
    assert!(e.to_string().contains("vendor error 0x32"), "{e}");
    // An empty CQ: start_poll says ENOENT, and no end_poll follows.
    let done = rx.burst(&mut out, 16, &mut r.cache, &r.pool, &r.stats);
    assert_eq!((done.got, done.error.is_none()), (0, true));
    ex(|e| {
        assert_eq!((e.starts, e.ends), (2, 2));
        assert!(e.broken.is_empty(), "{:?}", e.broken);
    });
    let tags: Vec<_> = out.iter().map(|p| p.meta.vlan_tci()).collect();
    assert_eq!(tags, [Some(0x2064), None, Some(0x0005)]);
    assert!(out.iter().all(|p| p.meta.l3_csum_ok()));
    assert_eq!(out[1].data(), &[2; 60][..]);
    assert_eq!(r.stats.snapshot().rx_errors, 1);
    // Recovery's drain polls the same CQ (no tags asked): two flushed WRs come home.
    let posted = rx.posted();
    deliver(&[5; 60], ibv_wc_status::IBV_WC_WR_FLUSH_ERR, 0);
    deliver(&[6; 60], ibv_wc_status::IBV_WC_WR_FLUSH_ERR, 0);
    rx.drain(&mut r.cache);
    assert_eq!(rx.posted(), posted - 2);
    ex(|e| {
        assert_eq!((e.starts, e.ends, e.ready.len()), (3, 3, 0));
        assert!(e.broken.is_empty(), "{:?}", e.broken);
    });
    drop(out);
    rx.forget_posted(&mut r.cache);
    r.assert_all_home();
}
