//! rawq's DV backend on the emulated ConnectX recovering from errors: a receive length error in
//! the middle of a stream (no RQ reset) and a failed send WQE (the SQ reset through
//! `ibv_modify_qp`). The `inner_*` tests (ignored in a plain run) are the emulated NIC's
//! application; their outer tests run this test binary under `scripts/emu.sh`
//! (`tests/support/emu_dv.rs`) and read the emulator's log and counters.
//!
//! Loopback runs set `RAWQ_EMU_PAUSE=1` (link-level flow control), so that the counts are exact
//! on a loaded host: a port with no free receive buffer pauses its sender instead of dropping.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::time::{Duration, Instant};

use rawq::RqType;
use support::emu::{last_counter, serial, text};
use support::emu_dv::{assert_in_order, inner_only, rig, run_inner, rx_from_env, RX_ENV};

/// A frame bigger than a posted receive buffer (but within the port's MTU) in the middle of a
/// stream: counted, and every later frame arrives; no RQ reset (issue 11, item 1).
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_rx_length_error_mid_stream() {
    inner_only();
    let rx = rx_from_env();
    let big = match rx.rq {
        // Past a 2 KiB buffer's room.
        RqType::Cyclic => 3000,
        // Past a whole WQE of 8 or 16 strides of 1 KiB, within the 9216-byte MTU.
        RqType::Striding { log_num_strides } => {
            if log_num_strides == 3 {
                9000
            } else {
                panic!("16 strides of 1 KiB hold any frame the MTU allows")
            }
        }
    };
    let mut r = rig(rx, 512);
    let mut want = Vec::new();
    let mut seq = 0u32;
    for round in 0..3 {
        assert_eq!(r.stream(seq..seq + 100), 100);
        want.extend(seq..seq + 100);
        seq += 100;
        eprintln!("MARK length-error {round}");
        assert_eq!(r.send_chained(seq, big), 1, "the SQ took the big frame");
        seq += 1;
        assert_eq!(r.stream(seq..seq + 100), 100);
        want.extend(seq..seq + 100);
        seq += 100;
        r.until(want.len(), Duration::from_secs(10));
        assert!(
            r.q.take_error().is_none(),
            "a length error is not a queue failure"
        );
    }
    // Long after: the ring wraps many times.
    assert_eq!(r.stream(seq..seq + 5000), 5000);
    want.extend(seq..seq + 5000);
    r.until(want.len(), Duration::from_secs(20));
    assert_in_order(&r.got, want.iter().copied());
    let s = r.finish();
    eprintln!(
        "RESULT rx_errors {} rx_packets {}",
        s.rx_errors, s.rx_packets
    );
    assert_eq!(s.rx_packets, want.len() as u64, "{s:?}");
    assert_eq!(s.tx_packets, want.len() as u64 + 3, "{s:?}");
}

/// The 40th send WQE fails (`RAWQ_EMU_TX_ERROR=40`): the queue reports it, resets its SQ
/// through `ibv_modify_qp` and keeps sending; the counts add up.
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_tx_error_recovers() {
    inner_only();
    let mut r = rig(rx_from_env(), 256);
    eprintln!("MARK traffic");
    let mut taken = 0u64;
    let mut err = None;
    let mut seq = 0u32;
    // Send until the error shows (the 40th WQE fails), bounded in time.
    let end = Instant::now() + Duration::from_secs(20);
    while err.is_none() && Instant::now() < end {
        let n = r.send(seq..seq + 16, 100);
        seq += n as u32;
        taken += n as u64;
        r.poll();
        err = r.q.take_error();
    }
    let e = err.expect("the send error was reported");
    eprintln!("MARK error-seen: {e}");
    assert!(e.to_string().contains("syndrome 0x04"), "{e}");
    assert!(e.to_string().contains("recovered"), "{e}");
    // Traffic after the recovery: every frame arrives.
    let after = seq;
    taken += r.stream(seq..seq + 2000);
    seq += 2000;
    r.until(usize::MAX, Duration::from_millis(1));
    let end = Instant::now() + Duration::from_secs(10);
    while r.got.last() != Some(&(seq - 1)) && Instant::now() < end {
        r.poll();
    }
    assert!(r.q.take_error().is_none(), "one error only");
    let got = r.got.clone();
    let s = r.finish();
    eprintln!("RESULT taken {taken} {s:?}");
    // The failed WQE's packets (one, or an eMPW session's several).
    assert!(s.tx_errors >= 1, "{s:?}");
    assert!(
        s.tx_drops > 0,
        "the failed WQE's frames were dropped: {s:?}"
    );
    // Each packet taken in one bucket: the failed WQE's failed, those behind it dropped.
    assert_eq!(s.tx_packets + s.tx_drops + s.tx_errors, taken, "{s:?}");
    assert_eq!(got.len() as u64, s.tx_packets, "sent = received: {s:?}");
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicates"
    );
    assert_in_order(&got[got.len() - 2000..], after..seq);
}

#[test]
fn dv_rx_length_error_mid_stream_every_configuration() {
    let _one = serial();
    for cfg in [
        "cyclic/off",
        "cyclic/hash",
        "cyclic/csum",
        "striding/off",
        "striding/csum",
    ] {
        let (out, stats) = run_inner(
            &support::test_name(module_path!(), "inner_rx_length_error_mid_stream"),
            &[],
            &[(RX_ENV, cfg)],
        );
        let log = text(&out);
        let c = |f| last_counter(&stats, f).unwrap_or(u64::MAX);
        if cfg.starts_with("cyclic") {
            // Three LOCAL_LENGTH_ERR CQEs, each counted once by the queue.
            assert_eq!(c("rx_error_cqes"), 3, "{cfg}\n{log}");
            assert!(log.contains("RESULT rx_errors 3 "), "{cfg}\n{log}");
        } else {
            // Longer than a whole striding WQE: the device drops it before any WQE.
            assert_eq!(c("rx_oversize"), 3, "{cfg}\n{log}");
        }
        // The RQ kept running: no WQ reset between the errors and the end of traffic.
        let after = log.split("MARK length-error 0").nth(1).unwrap_or("");
        let before_teardown = after.split("pool:").next().unwrap_or("");
        assert!(
            !before_teardown.contains("EX_MODIFY_WQ"),
            "{cfg}: the RQ was reset\n{log}"
        );
    }
}

#[test]
fn dv_send_error_recovered_through_ibv_modify_qp() {
    let _one = serial();
    let (out, stats) = run_inner(
        &support::test_name(module_path!(), "inner_tx_error_recovers"),
        &[],
        &[
            (RX_ENV, "cyclic/hash"),
            ("RAWQ_EMU_TX_ERROR", "40"),
            ("RAWQ_EMU_DEBUG", "1"),
        ],
    );
    let log = text(&out);
    assert_eq!(last_counter(&stats, "tx_error_cqes"), Some(1), "{log}");
    // libmlx5's ibv_modify_qp reached the emulated kernel between traffic and the report.
    let window = log
        .split("MARK traffic")
        .nth(1)
        .and_then(|t| t.split("MARK error-seen").next())
        .unwrap_or("");
    assert!(
        window.matches("MODIFY_QP -> Ok(())").count() >= 3,
        "the SQ was not reset through ibv_modify_qp (RESET, INIT, RTR, RTS):\n{log}"
    );
}
