//! rawq-pktgen on the software mlx5 device (`-b model`, eMPW sends): the send loop's
//! counters in `--json` and the default pool against what the rings hold.
//!
//! `cargo test` builds the examples before it runs tests; these tests use that binary.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::process::Command;

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(out)))
}

fn field(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer {key} in {v}"))
}

/// A 2048-slot send ring in eMPW mode holds up to four packets per WQEBB (about 7300 of 60
/// bytes) and the receive ring 2048 more: the default pool must hold them all, so the sender
/// never finds it empty, and every packet asked for goes out. (The old default of 4096 buffers
/// ran dry: the model completes slower than the driver posts, so the ring fills up.)
#[test]
fn default_pool_feeds_a_2048_empw_ring_and_json_has_the_burst_counters() {
    const COUNT: u64 = 400_000;
    let out = Command::new(support::example("pktgen"))
        .args(["-b", "model", "-s", "60", "--ring", "2048", "--cores", "0"])
        .args(["-n", &COUNT.to_string(), "-t", "30", "--json", "--quiet"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pktgen failed: {err}");
    assert!(!err.contains("exhausted"), "{err}");
    let v = json(&out.stdout);
    assert_eq!(field(&v, "packets"), COUNT, "{v}\n{err}");
    assert_eq!(field(&v, "tx_pool_empty"), 0, "{v}");
    let (bursts, full) = (field(&v, "tx_bursts"), field(&v, "tx_ring_full_bursts"));
    // Each burst offers at most 32 packets (the default --burst).
    assert!(bursts >= COUNT / 32, "{v}");
    assert!(full <= bursts, "{v}");
    // Full bursts come in stretches (at most one per full burst, at least one if any), each
    // timed from its first full burst to the next whole one, within the run's duration.
    let (stretches, full_ns) = (
        field(&v, "tx_ring_full_stretches"),
        field(&v, "tx_ring_full_ns"),
    );
    assert!(stretches <= full, "{v}");
    assert_eq!(stretches > 0, full > 0, "{v}");
    assert_eq!(full_ns > 0, full > 0, "{v}");
    let secs = v["duration_s"].as_f64().unwrap();
    assert!((full_ns as f64) <= (secs + 0.1) * 1e9, "{v}");
}

/// A small run with a small ring: every burst is counted (at least packets / burst calls), a
/// ring-full burst is one of them, and the default pool is never found empty.
#[test]
fn json_counts_bursts_of_a_small_run() {
    let out = Command::new(support::example("pktgen"))
        .args(["-b", "model", "-s", "64", "--ring", "256", "--burst", "16"])
        .args(["-n", "1000", "-t", "20", "--json", "--quiet"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pktgen failed: {err}");
    let v = json(&out.stdout);
    assert_eq!(field(&v, "packets"), 1000, "{v}");
    // 1000 packets in bursts of at most 16: at least 63 calls.
    assert!(field(&v, "tx_bursts") >= 63, "{v}");
    assert!(field(&v, "tx_ring_full_bursts") <= field(&v, "tx_bursts"));
    assert_eq!(field(&v, "tx_pool_empty"), 0, "{v}");
}
