//! rawq's mlx5 Direct Verbs backend (`-b dv`) end to end on the emulated ConnectX: unmodified
//! libibverbs + libmlx5 create the objects and hand rawq its rings through `mlx5dv_init_obj`,
//! rawq writes the WQEs and polls the CQEs, and rawq's device model (inside the emulator) plays
//! the hardware.
//!
//! The `inner_*` tests (ignored in a plain run) drive a DV port through the library
//! (`tests/support/emu_dv.rs`); the outer tests run this very test binary under
//! `scripts/emu.sh` with `--exact inner_...`, so the inner test is the emulated NIC's
//! application, and read the emulator's log and counters. Here: loopback in every receive
//! configuration, RSS, striding RQ sizing. Error recovery is in `tests/emu/dv_errors.rs`,
//! pktgen / fwd on the wire in `tests/emu/dv_wire.rs`.
//!
//! Loopback runs set `RAWQ_EMU_PAUSE=1` (link-level flow control), so that the counts are exact
//! on a loaded host: a port with no free receive buffer pauses its sender instead of dropping.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::time::{Duration, Instant};

use rawq::{Backend, Port};
use support::emu::{last_counter, serial, text};
use support::emu_dv::{
    assert_in_order, inner_only, rig, run_inner, rx_from_env, seq_of, udp_frame, N, RX_ENV,
};

#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_loopback_every_frame_once() {
    inner_only();
    let mut r = rig(rx_from_env(), 1024);
    let taken = r.stream(0..N);
    assert_eq!(taken, N as u64, "the SQ took every frame");
    r.until(N as usize, Duration::from_secs(30));
    assert_in_order(&r.got, 0..N);
    let s = r.finish();
    assert_eq!((s.tx_packets, s.rx_packets), (N as u64, N as u64), "{s:?}");
    assert_eq!((s.tx_errors, s.rx_errors, s.tx_drops), (0, 0, 0), "{s:?}");
}

/// RSS over 4 queues: 16 flows (UDP source ports) sent from queue 0 come back spread by the
/// device's Toeplitz hash; every frame arrives exactly once, each flow on one queue.
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_rss_4_queues_16_flows() {
    inner_only();
    let mut port = Port::builder(Backend::Dv {
        device: "mlx5_0".into(),
        port: 1,
    })
    .queues(4)
    .rx_ring(512)
    .tx_ring(512)
    .rule(
        "udp dst-port 9000 ipv4 -> rss 0,1,2,3"
            .parse()
            .expect("rule"),
    )
    .open()
    .expect("open a 4-queue DV port");
    let mut qs = port.take_queues();
    let pool = port.pool().clone();
    const PER_FLOW: u32 = 1000;
    let total = 16 * PER_FLOW;
    // (flow, seq) -> queue it arrived on.
    let mut seen = vec![u8::MAX; total as usize];
    let mut flow_queue = [u8::MAX; 16];
    let mut dups = 0;
    let mut got = 0u32;
    let mut next = 0u32;
    let mut burst = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while got < total && Instant::now() < end {
        if next < total {
            let mut v = Vec::new();
            for s in next..(next + 32).min(total) {
                let Ok(mut p) = pool.alloc() else { break };
                let mut f = udp_frame(s, 60);
                // Flow s % 16: its UDP source port.
                f[34..36].copy_from_slice(&(1024 + (s % 16) as u16).to_be_bytes());
                p.copy_from_slice(&f).unwrap();
                v.push(p);
            }
            next += qs[0].tx_burst(&mut v) as u32;
        }
        for (i, q) in qs.iter_mut().enumerate() {
            burst.clear();
            q.rx_burst(&mut burst, 64);
            for p in burst.drain(..) {
                let Some(s) = seq_of(&p) else { continue };
                let flow = (s % 16) as usize;
                if seen[s as usize] != u8::MAX {
                    dups += 1;
                }
                seen[s as usize] = i as u8;
                got += 1;
                if flow_queue[flow] == u8::MAX {
                    flow_queue[flow] = i as u8;
                }
                assert_eq!(
                    flow_queue[flow], i as u8,
                    "flow {flow} moved between queues"
                );
            }
            q.reclaim();
        }
    }
    assert_eq!(dups, 0);
    assert_eq!(got, total, "every frame once");
    let used: std::collections::BTreeSet<u8> = flow_queue.iter().copied().collect();
    eprintln!("RESULT flows per queue {flow_queue:?}");
    assert_eq!(used.len(), 4, "16 flows over 4 queues: {flow_queue:?}");
    drop(qs);
    drop(port);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity(), "buffers leaked");
}

#[test]
fn dv_rss_4_queues_16_flows_every_frame_once_each_queue_used() {
    let _one = serial();
    run_inner(
        &support::test_name(module_path!(), "inner_rss_4_queues_16_flows"),
        &[],
        &[],
    );
}

// ---------------------------------------------------------------------------------------------
// The outer side: loopback configurations.

/// Every RX configuration the DV backend offers (hash mini-CQEs only on a cyclic RQ).
const RX_CONFIGS: [&str; 7] = [
    "cyclic/off",
    "cyclic/hash",
    "cyclic/csum",
    "striding/off",
    "striding/csum",
    "striding:16/off",
    "striding:16/csum",
];

fn loopback(cfg: &str, emu_opts: &[&str]) {
    let (out, stats) = run_inner(
        &support::test_name(module_path!(), "inner_loopback_every_frame_once"),
        emu_opts,
        &[(RX_ENV, cfg)],
    );
    let log = text(&out);
    let c = |f| last_counter(&stats, f).unwrap_or(u64::MAX);
    assert_eq!(
        (c("tx_frames"), c("rx_frames"), c("rx_no_buffer")),
        (N as u64, N as u64, 0),
        "{cfg}: model counters\n{log}"
    );
    // The configuration asked for is the one libmlx5 created.
    let (rq, comp) = cfg.split_once('/').unwrap();
    let want_rq = match rq {
        "cyclic" => "cyclic RQ".to_string(),
        "striding" => "striding RQ (8 strides".into(),
        _ => "striding RQ (16 strides".into(),
    };
    assert!(log.contains(&want_rq), "{cfg}: {log}");
    let want_comp = match comp {
        "off" => "CQE compression off",
        "hash" => "CQE compression Hash",
        _ => "CQE compression CsumStrideIdx",
    };
    assert!(log.contains(want_comp), "{cfg}: {log}");
    if comp != "off" {
        assert!(
            c("mini_cqes") > 0,
            "{cfg}: compressed sessions were written"
        );
    } else {
        assert_eq!(c("mini_cqes"), 0, "{cfg}");
    }
}

#[test]
fn dv_loopback_every_rx_configuration_1e5_frames_no_loss() {
    let _one = serial();
    for cfg in RX_CONFIGS {
        loopback(cfg, &[]);
    }
}

/// The ConnectX-4 Lx send path: the L2 header inline in every WQE (eMPW included).
#[test]
fn dv_loopback_with_the_l2_inline_header() {
    let _one = serial();
    for cfg in ["cyclic/hash", "striding/csum"] {
        loopback(cfg, &["--min-inline", "l2"]);
    }
}

/// Striding RQs of each stride count rawq offers (8 and 16, the device's 2^3..2^16 within
/// rawq's one-segment-per-stride limit) are created through libmlx5's own sizing
/// (`mlx5_calc_rwq_size`), which gives each WQE room for its stride segments.
#[test]
fn striding_rq_created_through_libmlx5_sizing_for_each_stride_count() {
    let _one = serial();
    for cfg in ["striding:8/csum", "striding:16/off"] {
        let (out, _) = run_inner(
            &support::test_name(module_path!(), "inner_loopback_every_frame_once"),
            &[],
            &[(RX_ENV, cfg), ("RAWQ_EMU_DEBUG", "1")],
        );
        let log = text(&out);
        assert!(log.contains("EX_CREATE_WQ -> Ok(())"), "{cfg}\n{log}");
    }
}
