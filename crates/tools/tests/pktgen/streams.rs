//! `pktgen --stream` / `--profile` (issue 24 item 2): several streams in one run, each with its
//! own template, rate and count, counted exactly per stream by the stream id its frames carry
//! next to their sequence number. On the software device (`-b model --txrx`, its loopback as the
//! device under test): no root needed. Every run is bounded.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::process::Output;

fn pktgen(args: &[&str]) -> Output {
    support::run_example("pktgen", args, 60)
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "pktgen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Each stream sent its count, every frame came back to be counted under its own stream (the
/// bytes say which template it was), and the totals are the sum of the streams.
fn check_streams(v: &serde_json::Value, want: &[(&str, u64, Option<u64>, f64)]) {
    let streams = v["streams"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(streams.len(), want.len(), "{v}");
    let (mut sent, mut back) = (0, 0);
    for (s, &(name, count, size, rate)) in streams.iter().zip(want) {
        assert_eq!(s["name"], name, "{s}");
        assert_eq!(s["sent"], count, "{s}");
        assert_eq!(s["received"], count, "{s}");
        assert_eq!(s["lost"], 0, "{s}");
        assert_eq!(s["target_pps"].as_f64(), Some(rate), "{s}");
        if let Some(size) = size {
            assert_eq!(s["rx_bytes"], count * size, "{s}");
        }
        assert!(s["latency"]["count"].as_u64().unwrap() > 0, "{s}");
        sent += count;
        back += s["received"].as_u64().unwrap();
    }
    assert_eq!(v["packets"], sent, "{v}");
    assert_eq!(v["seq_stamped"], back, "{v}");
    assert_eq!(v["seq_lost"], 0, "{v}");
}

#[test]
fn two_streams_of_different_sizes_and_rates_are_counted_exactly() {
    let out = pktgen(&[
        "-b",
        "model",
        "--txrx",
        "--latency",
        // Time for the last frames to come back through a loaded machine's device thread.
        "--drain",
        "3s",
        "--stream",
        "name=small size=80 rate=20kpps count=4000",
        "--stream",
        "name=large size=700 rate=5000 count=1000 dst-port=9001",
        "--json",
        "--quiet",
    ]);
    let v = json(&out);
    check_streams(
        &v,
        &[
            ("small", 4000, Some(80), 20_000.0),
            ("large", 1000, Some(700), 5_000.0),
        ],
    );
    assert_eq!(v["queues"], 2, "one queue per stream: {v}");
}

#[test]
fn a_toml_profile_gives_each_stream_its_template() {
    let dir = std::env::temp_dir().join(format!("rawq-streams-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("two.toml");
    std::fs::write(
        &profile,
        r#"
# An IMIX stream over UDP and a TCP SYN stream of fixed size with a port range.
[[stream]]
name = "imix"
size = "imix"
rate = "10kpps"
count = 1200

[[stream]]
name = "syn"
size = 128
l4 = "tcp-syn"
dst-port = 8080
range = ["src-port=1000-1009"]
rate = 4000
count = 500
"#,
    )
    .unwrap();
    let out = pktgen(&[
        "-b",
        "model",
        "--txrx",
        "--latency",
        "--drain",
        "3s",
        "--profile",
        profile.to_str().unwrap(),
        "--json",
        "--quiet",
    ]);
    let v = json(&out);
    check_streams(
        &v,
        &[
            ("imix", 1200, None, 10_000.0),
            ("syn", 500, Some(128), 4_000.0),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_stream_is_refused_naming_the_key() {
    let out = pktgen(&["-b", "model", "--stream", "size=64 colour=blue", "-n", "10"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("colour"), "{err}");
    // RFC 2544 trials send one template of their own sizes.
    let out = pktgen(&[
        "-b",
        "model",
        "--txrx",
        "--rfc2544",
        "throughput",
        "--stream",
        "size=64",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be used with"), "{err}");
}

/// Sending only (the model's sink wire): each stream's count and rate, nothing said received.
#[test]
fn send_only_streams_count_what_they_sent() {
    let out = pktgen(&[
        "-b",
        "model",
        "--stream",
        "size=60 rate=10kpps count=700",
        "--stream",
        "size=1000 rate=2kpps count=150",
        "--json",
        "--quiet",
    ]);
    let v = json(&out);
    let s = v["streams"].as_array().unwrap();
    for (s, (name, n)) in s.iter().zip([("0", 700), ("1", 150)]) {
        assert_eq!(s["name"], name, "{s}");
        assert_eq!(s["sent"], n, "{s}");
        assert!(s["received"].is_null() && s["lost"].is_null(), "{s}");
    }
    // The port's count of what the device took: sent, or counted dropped or failed (a loaded
    // machine's device thread may not have completed the last ones when the queue closed).
    let taken = ["packets", "drops", "errors"].map(|k| v[k].as_u64().unwrap());
    assert_eq!(taken.iter().sum::<u64>(), 850, "{v}");
}

/// With --txrx a queue that has sent all it had keeps receiving until every queue has sent:
/// here every frame is steered to queue 1, whose stream is over in 2 ms, while queue 0's runs
/// for 2.5 s. pktgen once closed queue 1 after its own --drain, and the device dropped the rest
/// of stream "long" for want of receive buffers (counted, but lost). The drain (1 s) is shorter
/// than the long stream, so that bug would show, and long enough for the last frames to come
/// back through a loaded machine's device thread (50 ms lost some beside a benchmark).
#[test]
fn a_queue_done_sending_receives_until_every_queue_is_done() {
    let out = pktgen(&[
        "-b",
        "model",
        "--txrx",
        "--latency",
        "--drain",
        "1s",
        "--rule",
        "udp -> queue 1",
        "--stream",
        "name=long size=80 rate=10kpps count=25000",
        "--stream",
        "name=short size=80 rate=10kpps count=20",
        "--json",
        "--quiet",
    ]);
    let v = json(&out);
    check_streams(
        &v,
        &[
            ("long", 25_000, Some(80), 10_000.0),
            ("short", 20, Some(80), 10_000.0),
        ],
    );
    assert_eq!(v["device_rx_no_buffer"], 0, "{v}");
}

/// Issue 32 item 3: two streams' flow 0 are two rows, not one: each stream's per-flow loss is
/// its own (it used to merge them into one row, a stream's loss hidden behind the other's
/// frames), and every loss figure agrees with the streams table and the ledger.
#[test]
fn each_stream_has_its_own_flow_rows() {
    let out = pktgen(&[
        "-b",
        "model",
        "--txrx",
        "--seq",
        "--drain",
        "3s",
        "--stream",
        "name=a size=64 count=1000",
        "--stream",
        "name=b size=128 count=700 flows=2",
        "--json",
        "--quiet",
    ]);
    let v = json(&out);
    let rows = v["flows"]["all"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"));
    let key = |r: &serde_json::Value| (r["stream"].as_u64(), r["flow"].as_u64());
    let keys: Vec<_> = rows.iter().map(key).collect();
    assert_eq!(
        keys,
        [(Some(0), Some(0)), (Some(1), Some(0)), (Some(1), Some(1))],
        "{v}"
    );
    for (i, s) in v["streams"].as_array().unwrap().iter().enumerate() {
        let lost: u64 = rows
            .iter()
            .filter(|r| r["stream"] == i)
            .map(|r| r["lost"].as_u64().unwrap())
            .sum();
        assert_eq!(Some(lost), s["lost"].as_u64(), "stream {i}: {v}");
    }
    assert_eq!(v["flows"]["lost"], v["ledger"]["lost"], "{v}");
    assert_eq!(v["seq_lost"], v["ledger"]["lost"], "{v}");
}
