//! The send doorbell: the UAR write starts the SQ, the record gives how far (rdma-core
//! providers/mlx5/qp.c `post_send_db`; DPDK drivers/common/mlx5/mlx5_common.h
//! `mlx5_doorbell_ring`: the record, a barrier, then the first 8 bytes of the last WQE to the
//! doorbell register).

use super::*;

/// Writes signaled NOPs into WQEBBs `from..to` (their control segments as `_mlx5_post_send`
/// writes them: index, opcode 0, QPN, DS 1, CE).
fn nops(r: &Rig, sqn: u32, from: u32, to: u32) {
    for i in from..to {
        let w = SQ + 64 * (i as usize % 64);
        r.be32(w, (i & 0xffff) << 8);
        r.be32(w + 4, sqn << 8 | 1);
        r.bytes(w + 8, 8).copy_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0]);
    }
}

#[test]
fn a_record_without_a_uar_write_starts_nothing() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let sqn = r.sq(cq, 0);
    nops(&r, sqn, 0, 2);
    // The record moves, the register is not written: the hardware has not been told.
    r.be32(DB + 0x800, 2);
    r.hw.process();
    r.hw.process();
    assert_eq!(r.hw.counters().tx_wqes, 0, "processed without a doorbell");
    // The UAR write: both WQEs (the record's count), not only the one the doorbell names.
    let mut w = [0u8; 8];
    w.copy_from_slice(r.bytes(SQ + 64, 8));
    r.bytes(UAR + 0x800, 8).copy_from_slice(&w);
    r.hw.process();
    let k = r.hw.counters();
    assert_eq!((k.tx_wqes, k.tx_cqes), (2, 2));
    // Two more WQEs rung on the other half, as libmlx5 alternates.
    nops(&r, sqn, 2, 4);
    r.be32(DB + 0x800, 4);
    w.copy_from_slice(r.bytes(SQ + 3 * 64, 8));
    r.bytes(UAR + 0x900, 8).copy_from_slice(&w);
    r.hw.process();
    assert_eq!(r.hw.counters().tx_wqes, 4);
}

#[test]
fn a_doorbell_naming_another_qp_does_not_start_this_sq() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let sqn = r.sq(cq, 0);
    nops(&r, sqn, 0, 1);
    r.be32(DB + 0x800, 1);
    // The first 8 bytes of a control segment of QPN sqn + 1 (a QP sharing the register).
    let mut w = [0u8; 8];
    w[4..8].copy_from_slice(&((sqn + 1) << 8 | 1).to_be_bytes());
    r.bytes(UAR + 0x800, 8).copy_from_slice(&w);
    r.hw.process_stepped();
    let k = r.hw.counters();
    assert_eq!(k.tx_wqes, 0);
    assert_eq!(
        k.doorbell_mismatch, 1,
        "no SQ of that number shares the register"
    );
    r.ring(1, 0);
    r.hw.process();
    assert_eq!(r.hw.counters().tx_wqes, 1);
}

/// After a reset the WQE indices start again at 0 (libmlx5 `mlx5_init_qp_indices`), so the
/// same WQEs rung the same way write the same bytes into the register as before the reset:
/// still a doorbell (rdma-core's verbs recovery, RESET -> INIT -> RTR -> RTS, then the same
/// sends).
#[test]
fn the_same_doorbell_bytes_after_a_reset_still_start_the_sq() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let sqn = r.sq(cq, 0);
    nops(&r, sqn, 0, 1);
    r.ring(1, 0);
    r.hw.process();
    assert_eq!(r.hw.counters().tx_wqes, 1);
    r.hw.set_sq_state(sqn, QueueState::Reset).unwrap();
    r.hw.set_sq_state(sqn, QueueState::Ready).unwrap();
    // The driver's counters restart: the record goes to 0, then the same WQE 0 is posted and
    // rung on the same half, byte for byte what the register already holds.
    r.be32(DB + 0x800, 0);
    r.hw.process();
    nops(&r, sqn, 0, 1);
    r.bf_half.set(0);
    r.ring(1, 0);
    r.hw.process();
    assert_eq!(
        r.hw.counters().tx_wqes,
        2,
        "the doorbell after the reset was missed"
    );
    // Nothing more is sent for the stale value once that WQE is done.
    r.hw.process();
    assert_eq!(r.hw.counters().tx_wqes, 2);
}

/// A send data segment of byte count 0: the PRM gives 0 the meaning 2^31 bytes; no vendor
/// source found says what the device does with one (libmlx5's `_mlx5_post_send` and DPDK's
/// mlx5 PMD never write one; rawq's driver neither), so the model refuses it as a frame longer
/// than any the port takes (LOCAL_LENGTH_ERR), counted apart.
#[test]
fn a_zero_length_send_data_segment_is_refused_and_counted() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let sqn = r.sq(cq, 0);
    r.ctrl(SQ, 0, sqn, 4);
    r.bytes(SQ + 16, 16).fill(0);
    r.data_seg(SQ + 32, 60, r.lkey, r.at(DATA) as u64);
    r.data_seg(SQ + 48, 0, r.lkey, r.at(DATA + 64) as u64);
    r.ring(1, 0);
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    assert_eq!((op(&c), c[55]), (0xd, 0x01), "REQ_ERR, LOCAL_LENGTH_ERR");
    let k = r.hw.counters();
    assert_eq!((k.tx_frames, k.tx_zero_length_segs), (0, 1));
}

/// A stop (modify-to-RESET) says how far the device got, and after it the device processes
/// nothing more of that SQ, however much is rung (issue 32, seeds 9855 and 9936).
#[test]
fn a_stopped_sq_says_how_far_it_got_and_is_never_processed_again() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let sqn = r.sq(cq, 0);
    // A slow device: one WQE a round.
    r.hw.limit_tx_per_round(sqn, 1);
    nops(&r, sqn, 0, 4);
    r.ring(4, 3);
    r.hw.process();
    r.hw.process();
    assert_eq!(r.hw.counters().tx_wqes, 2);
    assert_eq!(r.hw.stop_sq(sqn).unwrap(), 2, "two WQEs carried out");
    for _ in 0..4 {
        r.hw.process();
    }
    nops(&r, sqn, 4, 6);
    r.ring(6, 5);
    for _ in 0..4 {
        r.hw.process();
    }
    assert_eq!(r.hw.counters().tx_wqes, 2, "processed after the stop");
    assert_eq!(r.hw.sq_state(sqn).unwrap(), QueueState::Reset);
}

/// A held round keeps the device's lock: a state command waits for it (and is seen waiting),
/// and runs once the round is released.
#[test]
fn a_command_waits_for_a_held_round() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let sqn = r.sq(cq, 0);
    nops(&r, sqn, 0, 3);
    r.ring(3, 2);
    let hold = r.hw.hold_rounds();
    let hw = r.hw.clone();
    let t = std::thread::spawn(move || hw.process());
    assert!(hold.wait_held(std::time::Duration::from_secs(60)));
    let hw = r.hw.clone();
    let stop = std::thread::spawn(move || hw.stop_sq(sqn).unwrap());
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while r.hw.commands_waiting() == 0 {
        assert!(std::time::Instant::now() < end, "the stop never waited");
        std::thread::yield_now();
    }
    hold.release();
    assert_eq!(t.join().unwrap(), 3, "the held round ran in full");
    assert_eq!(stop.join().unwrap(), 3, "the stop came after the round");
}
