//! Memory registrations as the mkeys the kernel creates (Linux drivers/infiniband/hw/mlx5/mr.c
//! `set_mkc_access_pd_addr_fields`: `lw` from IBV_ACCESS_LOCAL_WRITE, the PD's pdn;
//! `assign_mkey_variant`: a new 8-bit variant per registration): a receive into a region the
//! device may not write, a key of another PD and a key kept past its deregistration are each a
//! LOCAL_PROT_ERR completion (syndrome 0x04, rdma-core providers/mlx5/mlx5dv.h
//! `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`).

use super::*;

/// One send of 60 bytes from `DATA` under `lkey` (ctrl, eth segment without inline header,
/// one data segment), rung.
fn send_with(r: &Rig, sqn: u32, idx: u16, lkey: u32) {
    let w = SQ + 64 * (idx as usize % 64);
    r.ctrl(w, idx, sqn, 3);
    r.bytes(w + 16, 16).fill(0);
    r.data_seg(w + 32, 60, lkey, r.at(DATA) as u64);
    r.ring(u32::from(idx) + 1, u32::from(idx));
}

#[test]
fn a_receive_into_a_region_without_local_write_is_a_protection_error() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let rq = r.rq(0, cq, 16, 5);
    catch_all(&r.hw, rq);
    let ro =
        r.hw.reg_mr_in(r.at(DATA + 0x10000) as u64, 4096, 0, false)
            .unwrap();
    let sge = |k: &Rig, idx: u16, lkey: u32, off: usize| {
        let w = RQ + (idx as usize % 16) * 16;
        k.data_seg(w, 2048, lkey, k.at(off) as u64);
        k.be32(DB + 0x900, u32::from(idx) + 1);
    };
    sge(&r, 0, ro, DATA + 0x10000);
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 80));
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    assert_eq!((op(&c), c[55]), (0xe, 0x04), "RESP_ERR, LOCAL_PROT_ERR");
    assert!(
        r.bytes(DATA + 0x10000, 80).iter().all(|&b| b == 0),
        "the device wrote a region it may not write"
    );
    // The error put the RQ in error; reset, the same place through a writable registration
    // takes the frame.
    r.hw.set_rq_state(rq, QueueState::Reset).unwrap();
    r.hw.set_rq_state(rq, QueueState::Ready).unwrap();
    sge(&r, 0, r.lkey, DATA + 0x10000);
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 80));
    r.hw.process();
    let c = r.cqe(0, 64, 1);
    assert_eq!((op(&c), byte_cnt(&c)), (2, 80));
}

#[test]
fn a_key_of_another_pd_is_a_protection_error_for_send_and_receive() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let sqn = r.sq(cq, 0);
    r.hw.set_sq_pd(sqn, 7).unwrap();
    // r.lkey is of PD 0: refused by an SQ of PD 7.
    send_with(&r, sqn, 0, r.lkey);
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    assert_eq!((op(&c), c[55]), (0xd, 0x04), "REQ_ERR, LOCAL_PROT_ERR");
    // A key of PD 7 over the same bytes is taken (after the reset the error asks for).
    let k7 = r.hw.reg_mr_in(r.at(DATA) as u64, 4096, 7, false).unwrap();
    r.hw.set_sq_state(sqn, QueueState::Reset).unwrap();
    r.hw.set_sq_state(sqn, QueueState::Ready).unwrap();
    send_with(&r, sqn, 0, k7);
    r.hw.process();
    assert_eq!(op(&r.cqe(0, 64, 1)), 0, "REQ");
    // Receive side: an RQ of PD 7 and a writable key of PD 0.
    let rcq = r.cq(1, 16, 64, None);
    let rq = r.rq(0, rcq, 16, 1);
    r.hw.set_rq_pd(rq, 7).unwrap();
    catch_all(&r.hw, rq);
    r.post_recv(0, 16, 0, &[(2048, DATA + 0x8000)]);
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 80));
    r.hw.process();
    let c = r.cqe(1, 64, 0);
    assert_eq!((op(&c), c[55]), (0xe, 0x04), "RESP_ERR, LOCAL_PROT_ERR");
}

#[test]
fn a_key_kept_past_its_deregistration_names_nothing() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let sqn = r.sq(cq, 0);
    let (addr, len) = (r.at(DATA) as u64, 4096);
    let old = r.hw.reg_mr(addr, len).unwrap();
    r.hw.dereg_mr(old).unwrap();
    // The same range registered again (the same table slot): a different key.
    let new = r.hw.reg_mr(addr, len).unwrap();
    assert_ne!(old, new, "a re-registration reuses the stale key");
    assert!(
        r.hw.dereg_mr(old).is_err(),
        "the stale key deregisters the new region"
    );
    send_with(&r, sqn, 0, old);
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    assert_eq!((op(&c), c[55]), (0xd, 0x04), "REQ_ERR, LOCAL_PROT_ERR");
    r.hw.set_sq_state(sqn, QueueState::Reset).unwrap();
    r.hw.set_sq_state(sqn, QueueState::Ready).unwrap();
    send_with(&r, sqn, 0, new);
    r.hw.process();
    assert_eq!(op(&r.cqe(0, 64, 1)), 0, "REQ");
}
