//! Hardware receive timestamps: the mlx5 CQE `timestamp` (mlx5dv.h `struct mlx5_cqe64`, the
//! device's free-running clock) reaches `RxMeta::hw_timestamp` through the DV receive paths
//! (plain CQEs on the fast path, compressed sessions), read against the device model's clock;
//! and `pktgen -b model --txrx --latency` reports hardware timestamps when the model has a
//! clock, software ones when it has none.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::process::Command;

use rawq::dv::model::{ModelOptions, ModelPort, ModelWire};
use rawq::dv::rings::MiniCqeFormat;
use rawq::{HugePages, Mempool, MempoolConfig, Packet};

const KHZ: u64 = 1_000_000;

fn pool() -> Mempool {
    Mempool::new(&MempoolConfig {
        buffers: 1024,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .unwrap()
}

/// A 64-byte IPv4/UDP frame from source port `sport`.
fn frame(sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&2000u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

/// Receives `rounds` batches of 48 frames on a model port with `opts`; returns, per packet,
/// its timestamp and the device clock (ticks) read before the batch was injected and after it
/// was received.
fn receive(opts: ModelOptions, rounds: usize) -> (Vec<(Option<u64>, u64, u64)>, u64) {
    let pool = pool();
    let port = ModelPort::new(ModelOptions {
        rq_wqes: 64,
        wire: ModelWire::Sink,
        ..opts
    })
    .unwrap();
    let clock = port.device_clock();
    let khz = clock.as_ref().map_or(0, |c| c.khz());
    let now = || clock.as_ref().map_or(0, |c| c.now_ticks());
    let mut q = port.queue(0, &pool).unwrap().into_queue();
    let mut out: Vec<Packet> = Vec::with_capacity(64);
    let mut got = Vec::new();
    for r in 0..rounds {
        let before = now();
        for k in 0..48u16 {
            port.inject_frame(&frame(if r % 2 == 0 { 7 } else { k }));
        }
        port.process();
        while q.rx_burst(&mut out, 16) > 0 {}
        let after = now();
        for p in out.drain(..) {
            got.push((p.meta.hw_timestamp(), before, after));
        }
    }
    (got, khz)
}

#[test]
fn plain_cqes_carry_the_device_clock() {
    let (got, khz) = receive(
        ModelOptions {
            clock_khz: KHZ,
            ..Default::default()
        },
        6,
    );
    assert_eq!(khz, KHZ);
    assert_eq!(got.len(), 6 * 48);
    let mut last = 0;
    for (i, &(ts, before, after)) in got.iter().enumerate() {
        let ts = ts.unwrap_or_else(|| panic!("packet {i}: no hardware timestamp"));
        assert!(
            before <= ts && ts <= after,
            "packet {i}: {before} <= {ts} <= {after}"
        );
        assert!(
            ts >= last,
            "packet {i}: timestamps go back: {last} then {ts}"
        );
        last = ts;
    }
}

#[test]
fn compressed_sessions_carry_their_titles_timestamp() {
    for fmt in [MiniCqeFormat::Hash, MiniCqeFormat::CsumStrideIdx] {
        let (got, _) = receive(
            ModelOptions {
                clock_khz: KHZ,
                cqe_compression: Some(fmt),
                ..Default::default()
            },
            6,
        );
        assert_eq!(got.len(), 6 * 48, "{fmt:?}");
        for (i, &(ts, before, after)) in got.iter().enumerate() {
            let ts = ts.unwrap_or_else(|| panic!("{fmt:?} packet {i}: no timestamp"));
            assert!(before <= ts && ts <= after, "{fmt:?} packet {i}");
        }
    }
}

#[test]
fn without_a_clock_there_is_no_hardware_timestamp() {
    let (got, khz) = receive(ModelOptions::default(), 2);
    assert_eq!(khz, 0);
    assert_eq!(got.len(), 2 * 48);
    assert!(got.iter().all(|&(ts, _, _)| ts.is_none()));
}

#[test]
fn ticks_convert_to_nanoseconds_with_the_clock_frequency() {
    let m = rawq::RxMeta::default().with_hw_timestamp(156_250);
    assert_eq!(m.hw_timestamp(), Some(156_250));
    assert_eq!(
        m.hw_timestamp_ns(156_250),
        Some(1_000_000),
        "156.25 MHz: 1 ms"
    );
    assert_eq!(
        m.hw_timestamp_ns(1_000_000),
        Some(156_250),
        "1 GHz: 1 tick = 1 ns"
    );
    assert_eq!(m.hw_timestamp_ns(0), None);
    assert_eq!(rawq::RxMeta::default().hw_timestamp_ns(KHZ), None);
}

/// Runs `pktgen -b model --txrx --latency` (the example cargo builds for the tests) with
/// `extra` and `--json`; returns the report.
fn pktgen_model(extra: &[&str]) -> serde_json::Value {
    let out = Command::new(support::example("pktgen"))
        .args([
            "-b",
            "model",
            "--txrx",
            "--latency",
            "-s",
            "66",
            "-n",
            "3000",
        ])
        .args(["-r", "50kpps", "--json", "--quiet"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pktgen {extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Every sample of a model loopback run with --hw-timestamps is hardware-timed; the figures are
/// sane (positive, ordered) and the report says what was measured.
#[test]
fn pktgen_on_the_model_reports_hardware_timestamps() {
    let v = pktgen_model(&["--hw-timestamps"]);
    let l = &v["latency"];
    assert_eq!(l["timestamps"], "hardware", "{l}");
    assert_eq!(l["samples"].as_u64(), Some(3000), "{l}");
    assert_eq!(l["not_positive"].as_u64(), Some(0), "{l}");
    let g = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k}: {l}"));
    assert!(g("min_ns") > 0 && g("min_ns") <= g("p50_ns") && g("p50_ns") <= g("max_ns"));
    assert!(
        l["timestamp_source"]
            .as_str()
            .unwrap()
            .starts_with("hardware"),
        "{l}"
    );
    // Without the option: software timestamps, as before.
    let v = pktgen_model(&[]);
    assert_eq!(v["latency"]["timestamps"], "software", "{v}");
}

/// --hw-timestamps without --txrx is refused (two ports' clocks are not one time base), and
/// without --latency clap refuses it.
#[test]
fn pktgen_hw_timestamps_needs_txrx_and_latency() {
    for args in [
        &[
            "-b",
            "model",
            "--latency",
            "--hw-timestamps",
            "-n",
            "10",
            "-s",
            "66",
        ][..],
        &["-b", "model", "--txrx", "--hw-timestamps", "-n", "10"][..],
    ] {
        let out = Command::new(support::example("pktgen"))
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--hw-timestamps") || err.contains("--latency"),
            "{err}"
        );
    }
}
