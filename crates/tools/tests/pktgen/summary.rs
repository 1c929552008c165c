//! pktgen's pacing, rates and summaries (issue 20 defects 4 to 7): the first frame goes at the
//! start of the schedule; every rate is over the one active window, in the text and the JSON
//! alike; tiny windows make no contradictory claims; snaplen-limited captures are sent as
//! captured; the default frame size fits the template. Runs on the software device
//! (`-b model`): no root needed. Every run is bounded.

use rawq_testkit as support;

use std::process::{Command, Output};

/// Runs pktgen with `args`, killing it after `secs` (a hang fails the test).
fn pktgen(args: &[&str], secs: u64) -> Output {
    support::run_example("pktgen", args, secs)
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(args: &[&str], secs: u64) -> serde_json::Value {
    let mut a = args.to_vec();
    a.extend(["--json", "--quiet"]);
    let out = pktgen(&a, secs);
    assert!(out.status.success(), "pktgen {a:?}:\n{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", text(&out)))
}

/// Text output of a successful run.
fn run_text(args: &[&str], secs: u64) -> String {
    let out = pktgen(args, secs);
    let t = text(&out);
    assert!(out.status.success(), "pktgen {args:?}:\n{t}");
    assert!(!t.contains("panicked"), "{t}");
    t
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

/// Defect 5: the first frame goes at once. `-r 1pps -t 2` sent 1 frame (the first went one
/// interval late), `-r 10pps -t 1` 9.
#[test]
fn the_first_frame_goes_at_the_start() {
    let v = json(&["-b", "model", "-r", "1pps", "-t", "2"], 20);
    assert_eq!(v["packets"].as_u64(), Some(2), "{v}");
    let v = json(&["-b", "model", "-r", "10pps", "-t", "1"], 20);
    assert_eq!(v["packets"].as_u64(), Some(10), "{v}");
}

/// Defect 5: a target below 1 pps is shown as it is, not as "0 pps".
#[test]
fn a_rate_below_one_pps_is_shown() {
    let t = run_text(&["-b", "model", "-r", "0.5", "-n", "2", "--quiet"], 20);
    assert!(t.contains("target 0.5 pps"), "{t}");
    assert!(!t.contains("target 0 pps"), "{t}");
}

/// Defects 5 and 6: one definition of a rate – packets over the active window – everywhere in
/// the JSON: the top level, the tx and rx sides and the rate block agree.
#[test]
fn json_rates_agree() {
    let v = json(
        &["-b", "model", "--txrx", "-r", "20kpps", "-n", "10000"],
        20,
    );
    let secs = v["duration_s"].as_f64().unwrap();
    let pps = v["pps"].as_f64().unwrap();
    let tx = v["tx"]["pps"].as_f64().unwrap();
    let rx = v["rx"]["pps"].as_f64().unwrap();
    let achieved = v["rate"]["achieved_pps"].as_f64().unwrap();
    assert!(close(pps, tx, 1e-9), "top-level pps vs tx.pps: {v}");
    assert!(close(pps, achieved, 1e-9), "pps vs rate.achieved_pps: {v}");
    assert!(
        close(v["rate"]["active_window_s"].as_f64().unwrap(), secs, 1e-9),
        "{v}"
    );
    // rx over the same window: every frame came back.
    assert_eq!(v["rx"]["packets"].as_u64(), Some(10_000), "{v}");
    assert!(close(rx, tx, 1e-9), "rx.pps vs tx.pps over one window: {v}");
    // The schedule held: the frames sent and those the sender skipped because it was off its
    // CPU when they were due (`tx_late_skipped`: a loaded machine kept it off for 300 ms once,
    // and the bounded catch-up sends no burst to make them up) are the rate over the window.
    let skipped = v["tx_late_skipped"].as_f64().expect("tx_late_skipped");
    assert!(close((10_000.0 + skipped) / secs, 20_000.0, 0.05), "{v}");
}

/// Defect 5: a run too short to have a rate says so instead of contradicting itself (a rate
/// in "0.00 s", then "achieved 0 pps (-100 %)").
#[test]
fn tiny_windows_make_no_contradictory_claims() {
    for args in [
        &["-b", "model", "-r", "1000", "-n", "1", "--quiet"][..],
        &["-b", "model", "-n", "32", "--quiet"][..],
    ] {
        let t = run_text(args, 20);
        assert!(!t.contains("-100.000 %"), "{args:?}: {t}");
        assert!(!t.contains("achieved 0 pps"), "{args:?}: {t}");
        assert!(!t.contains("in 0.00 s"), "{args:?}: {t}");
        assert!(t.contains("no rate"), "{args:?}: {t}");
    }
    let v = json(&["-b", "model", "-n", "1"], 20);
    assert!(v["pps"].is_null(), "one packet has no rate: {v}");
    assert_eq!(v["packets"].as_u64(), Some(1), "{v}");
}

/// Defect 5: a 2-second paced run has full seconds inside its window, and the worst one is
/// reported.
#[test]
fn a_two_second_window_has_its_seconds() {
    let t = run_text(&["-b", "model", "-r", "2000", "-t", "2", "--quiet"], 20);
    assert!(!t.contains("no full second"), "{t}");
    assert!(t.contains("worst one-second deviation"), "{t}");
}

/// Defect 4: a capture cut by its snap length (`tcpdump -s 64`) is sent as captured, as
/// tcpreplay does, and pktgen says so.
#[test]
fn snaplen_limited_captures_are_sent_as_captured() {
    let path = std::env::temp_dir().join(format!("rawq-snap-{}.pcap", std::process::id()));
    // A classic pcap, snap length 64: three frames of 100 bytes, 64 of each kept.
    let mut f = Vec::new();
    f.extend(0xa1b2_c3d4u32.to_le_bytes());
    f.extend(2u16.to_le_bytes());
    f.extend(4u16.to_le_bytes());
    f.extend([0u8; 8]);
    f.extend(64u32.to_le_bytes());
    f.extend(1u32.to_le_bytes()); // Ethernet
    for i in 0..3u32 {
        f.extend(i.to_le_bytes());
        f.extend(0u32.to_le_bytes());
        f.extend(64u32.to_le_bytes());
        f.extend(100u32.to_le_bytes());
        let mut frame = vec![0u8; 64];
        frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        f.extend(frame);
    }
    std::fs::write(&path, f).unwrap();
    let p = path.to_str().unwrap();
    let out = pktgen(
        &["-b", "model", "--pcap", p, "-n", "3", "--json", "--quiet"],
        20,
    );
    let _ = std::fs::remove_file(&path);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["packets"].as_u64(), Some(3), "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(3 * 64), "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("snap length") && err.contains("as captured"),
        "{err}"
    );
}

/// Defect 7: the default frame size is the smallest that fits the template (IPv6 headers or
/// a latency stamp do not fit in 60 bytes); an explicit -s that does not fit is still refused.
#[test]
fn the_default_frame_size_fits_the_template() {
    let v = json(
        &[
            "-b", "model", "-n", "4", "--src-ip", "fd00::1", "--dst-ip", "fd00::2",
        ],
        20,
    );
    assert_eq!(v["packets"].as_u64(), Some(4), "{v}");
    // Ethernet 14 + IPv6 40 + UDP 8.
    assert_eq!(v["bytes"].as_u64(), Some(4 * 62), "{v}");
    let v = json(&["-b", "model", "-n", "4", "--latency"], 20);
    assert_eq!(v["packets"].as_u64(), Some(4), "{v}");
    // IPv4 and UDP fit in 60 bytes, as before.
    let v = json(&["-b", "model", "-n", "4"], 20);
    assert_eq!(v["bytes"].as_u64(), Some(4 * 60), "{v}");
    let out = pktgen(&["-b", "model", "-n", "4", "--latency", "-s", "60"], 20);
    assert!(!out.status.success(), "{}", text(&out));
}

/// Defect 7: errors say what is wrong in the command line's words.
#[test]
fn errors_are_in_the_command_lines_words() {
    let out = pktgen(
        &["-b", "model", "-n", "1", "--range", "src-port=2000-1000"],
        20,
    );
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(!t.contains("FieldRange {"), "a Debug dump: {t}");
    assert!(t.contains("2000-1000"), "{t}");
    let out = pktgen(&["-b", "model", "-n", "1", "--ring", "65536"], 20);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        !t.contains("rx_ring") && t.contains("--ring"),
        "names the option, not the library's field: {t}"
    );
    // No RDMA device here (outside the emulator): the way out is named as an option.
    let out = Command::new(support::example("pktgen"))
        .args(["-b", "verbs", "-d", "mlx5_0", "-n", "1"])
        .env_remove("LD_PRELOAD")
        .env_remove("SYSFS_PATH")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("no RDMA device") && t.contains("-b xdp"), "{t}");
}

/// Defect 7: more queues than cores is said plainly (the queue threads take turns on a core).
#[test]
fn more_queues_than_cores_is_said() {
    let t = run_text(
        &[
            "-b", "model", "-q", "2", "--cores", "0", "-n", "64", "--quiet",
        ],
        20,
    );
    assert!(t.contains("2 queue threads on 1 core"), "{t}");
}

/// Defect 7: `--drain` sets how long --txrx listens after the last send (it was a fixed
/// 300 ms); frames that come back later count as lost.
#[test]
fn txrx_drain_is_an_option() {
    let v = json(
        &["-b", "model", "--txrx", "-n", "100", "--drain", "50ms"],
        20,
    );
    assert_eq!(v["rx_packets"].as_u64(), Some(100), "{v}");
    let out = pktgen(&["-b", "model", "--txrx", "-n", "1", "--drain", "soon"], 20);
    assert!(!out.status.success(), "{}", text(&out));
}

/// docs/pktgen.md: "the text summary prints everything the JSON has" – the fields beyond the summary
/// line (whole run, bursts and full-ring time, pool misses, losses outside the queues, the
/// software device's polls) are in the text too.
#[test]
fn the_text_summary_has_what_the_json_has() {
    let t = run_text(&["-b", "model", "-n", "1000", "--quiet"], 20);
    for label in [
        "in all",
        "active window",
        "tx bursts",
        "found the ring full",
        "stretches",
        "pool empty",
        "by the software device",
        "by the interface on transmit",
        "stamped received",
        "polls",
        "idle",
        "of work",
        "offloads: ",
    ] {
        assert!(t.contains(label), "no {label:?} in:\n{t}");
    }
}

/// The JSON's port fields are rawq's `PortInfo` through its serde derive: the keys pktgen
/// always printed (backend, device, mode, queues) and where each offload is done.
#[test]
fn the_json_has_the_port_info_and_its_offloads() {
    let v = json(&["-b", "model", "-n", "10"], 20);
    assert_eq!(v["backend"], "model", "{v}");
    assert_eq!(v["queues"], 1, "{v}");
    assert!(v["device"].is_string() && v["mode"].is_string(), "{v}");
    for k in ["ipv4_csum", "l4_csum", "tso", "rss"] {
        let w = v["offloads"][k].as_str().unwrap_or_default();
        assert!(
            ["hardware", "software", "absent"].contains(&w),
            "offloads.{k}: {v}"
        );
    }
    assert_eq!(
        v["offloads"]["rss"], "hardware",
        "the software device hashes: {v}"
    );
}
