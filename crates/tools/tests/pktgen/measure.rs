//! pktgen as a measurement instrument, end to end: latency through a reflector (fwd) on a veth
//! pair over AF_XDP and on the model's loopback, a known added delay, capture checked by tshark,
//! and --json-lines read by python3's json module.

use rawq_testkit as support;

use std::process::{Command, Output, Stdio};

use support::NetnsPair;

fn in_ns(ns: &str, bin: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(support::example(bin));
    c
}

/// As `in_ns`, at real-time priority 1 (SCHED_FIFO) where `chrt` exists: on a shared machine
/// full of compile jobs, a normal process waits milliseconds for a core after each sleep, which
/// is what a latency test would then measure. Both programs here mostly sleep (a paced sender,
/// a forwarder that naps when idle), so they cannot monopolise a core.
fn in_ns_rt(ns: &str, bin: &str) -> Command {
    if Command::new("chrt").arg("--version").output().is_err() {
        return in_ns(ns, bin);
    }
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "chrt", "-f", "1"])
        .arg(support::example(bin));
    c
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
}

/// The last line of stdout as JSON (the --json summary).
fn summary(o: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.lines().last().expect("a JSON line")).expect("JSON summary")
}

/// Checks the latency report (`kind` of timestamps) and returns p50 in ns.
fn check_latency(v: &serde_json::Value, samples: u64, path: &str, kind: &str) -> u64 {
    let l = &v["latency"];
    assert_eq!(l["path"], path, "{l}");
    assert_eq!(l["timestamps"], kind, "{l}");
    assert_eq!(l["samples"].as_u64(), Some(samples), "{l}");
    assert_eq!(l["not_positive"].as_u64(), Some(0), "{l}");
    let g = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {l}"));
    let (min, p50, p90, p99, p999, max) = (
        g("min_ns"),
        g("p50_ns"),
        g("p90_ns"),
        g("p99_ns"),
        g("p99.9_ns"),
        g("max_ns"),
    );
    assert!(min > 0, "{l}");
    assert!(
        min <= p50 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max,
        "{l}"
    );
    let hist: u64 = l["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(hist, samples, "histogram counts every sample");
    p50
}

#[test]
fn latency_on_the_model_loopback_needs_no_network() {
    let out = Command::new(support::example("pktgen"))
        .args([
            "-b",
            "model",
            "--txrx",
            "--latency",
            "-s",
            "66",
            "-n",
            "5000",
        ])
        .args(["-r", "50kpps", "-f", "8", "--json", "--quiet"])
        .output()
        .unwrap();
    ok(&out, "pktgen -b model --txrx --latency");
    let v = summary(&out);
    check_latency(&v, 5000, "round-trip", "software");
    assert_eq!(v["flows"]["count"].as_u64(), Some(8), "{v}");
    assert_eq!(v["flows"]["lost"].as_u64(), Some(0), "{v}");
    assert_eq!(v["rx"]["packets"].as_u64(), Some(5000), "{v}");
    // The text summary carries the same figures.
    let out = Command::new(support::example("pktgen"))
        .args([
            "-b",
            "model",
            "--txrx",
            "--latency",
            "4",
            "-s",
            "66",
            "-n",
            "4000",
        ])
        .args(["--quiet"])
        .output()
        .unwrap();
    ok(&out, "pktgen text summary");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("latency (round-trip, software timestamps): 1000 samples, min"),
        "{text}"
    );
    for k in [
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "CLOCK_MONOTONIC",
        "flows: 1 flows",
    ] {
        assert!(text.contains(k), "{k} missing from:\n{text}");
    }
}

#[test]
fn measurement_options_are_checked() {
    for (args, says) in [
        (&["--latency", "-s", "60"][..], "-s 66"),
        (&["--write", "/tmp/rawq-never.pcap"][..], "--rx or --txrx"),
        (&["--latency", "0"][..], "N >= 1"),
        (&["--vlan", "4096"][..], "0..=4095"),
        (&["--range", "src-port=9-1"][..], "above the last"),
    ] {
        let out = Command::new(support::example("pktgen"))
            .args(["-b", "model", "-n", "10", "--quiet"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn json_lines_is_one_object_per_second() {
    let out = Command::new(support::example("pktgen"))
        .args(["-b", "model", "--txrx", "-r", "10kpps", "-t", "3.5"])
        // A short drain: the run then ends near 3.55 s, not at 3.8 s (the default 300 ms),
        // where a loaded machine's late second once reached 4 s and printed a fourth line.
        .args(["--drain", "50ms", "--json-lines", "--quiet"])
        .output()
        .unwrap();
    ok(&out, "pktgen --json-lines");
    let py = r#"
import json, sys
ts = []
for line in sys.stdin:
    o = json.loads(line)
    assert set(o) >= {"tx", "rx"}, o
    assert o["tx"]["packets"] >= 0 and "pps" in o["rx"]
    assert "queues" in o or "duration_s" in o, o
    ts.append(o.get("t_s", o.get("duration_s")))
print(len(ts), " ".join("%.2f" % t for t in ts))
"#;
    let mut child = Command::new("python3")
        .args(["-c", py])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let py = child.wait_with_output().unwrap();
    ok(&py, "python3 json");
    let text = String::from_utf8_lossy(&py.stdout);
    let mut it = text.split_whitespace();
    // Three whole seconds: three lines, then the summary (its t_s is the run time).
    assert_eq!(
        it.next(),
        Some("4"),
        "three per-second lines and the summary: {text}"
    );
    // Each line is due at a whole second of the run and says when it was taken (`t_s`, the
    // time its rates are over): never early, and late only by how long a loaded machine kept
    // the thread waiting (0.26 s beside two busy loops); a late line does not delay the next
    // (they are on the run's clock, not one second after each other).
    for (k, t) in it.take(3).enumerate() {
        let t: f64 = t.parse().unwrap();
        let due = (k + 1) as f64;
        assert!(
            (due - 0.05..due + 0.5).contains(&t),
            "line {k} at {t} s: {text}"
        );
    }
}

/// fwd reflecting on B with `delay`; pktgen on A (with `extra` options) measuring round-trip
/// latency of `n` frames. Returns pktgen's JSON summary.
fn reflected(p: &NetnsPair, delay: Option<&str>, n: u64, extra: &[&str]) -> serde_json::Value {
    let mut fwd = in_ns_rt(&p.b, "fwd");
    // Until pktgen is done (SIGTERM below; `-t` bounds a failed test).
    fwd.args(["-d", &p.veth_b, "--mode", "macswap", "-t", "120", "--quiet"])
        .args(["--rule", "udp dst-port 9000 -> queue 0"]);
    if let Some(d) = delay {
        fwd.args(["--delay", d]);
    }
    let fwd = fwd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    support::xdp::wait_attached(p, &p.b, &p.veth_b);
    let mac_b = p.mac_text(&p.b, &p.veth_b);
    let tx = in_ns_rt(&p.a, "pktgen")
        .args(["-b", "xdp", "-d", &p.veth_a, "--dst-mac", &mac_b])
        .args(["--src-ip", &p.ip_a, "--dst-ip", &p.ip_b, "-s", "80"])
        .args(["-n", &n.to_string(), "-r", "2kpps", "--latency", "--txrx"])
        .args([
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "--json",
            "--quiet",
        ])
        .args(extra)
        .output()
        .unwrap();
    // SAFETY: kill(2) on our own child's pid (`ip netns exec` execs fwd in place), not yet
    // reaped; fwd ends on SIGTERM with its summary.
    unsafe { libc::kill(fwd.id() as i32, libc::SIGTERM) };
    let fwd = fwd.wait_with_output().unwrap();
    ok(&tx, "pktgen --txrx --latency");
    ok(&fwd, "fwd");
    let v = summary(&tx);
    assert_eq!(v["rx"]["packets"].as_u64(), Some(n), "all reflected: {v}");
    // AF_XDP: every receive time is the kernel's, taken at pktgen's interface's XDP hook.
    assert_eq!(v["latency"]["kernel_timestamped"].as_u64(), Some(n), "{v}");
    assert!(
        v["latency"]["timestamp_source"]
            .as_str()
            .is_some_and(|s| s.starts_with("kernel XDP-hook receive timestamps, CLOCK_MONOTONIC")),
        "{v}"
    );
    v
}

/// As `reflected`, checked; returns p50 (ns).
fn reflected_p50(p: &NetnsPair, delay: Option<&str>, n: u64) -> u64 {
    let v = reflected(p, delay, n, &[]);
    assert!(v["latency"].get("hw_timestamps_fallback").is_none(), "{v}");
    check_latency(&v, n, "round-trip", "kernel")
}

/// --hw-timestamps on a veth: it has no PTP hardware clock, so hardware receive timestamps
/// could not be compared with send times; pktgen uses kernel timestamps and says why.
#[test]
fn hw_timestamps_on_a_veth_fall_back_to_kernel_timestamps() {
    let Some(p) = NetnsPair::new("hwfb") else {
        return;
    };
    let v = reflected(&p, None, 500, &["--hw-timestamps"]);
    check_latency(&v, 500, "round-trip", "kernel");
    let why = v["latency"]["hw_timestamps_fallback"]
        .as_str()
        .unwrap_or_else(|| panic!("no fallback note: {v}"));
    assert!(why.contains("no PTP hardware clock"), "{why}");
    assert!(why.contains("kernel XDP-hook receive timestamps"), "{why}");
}

#[test]
fn latency_through_fwd_macswap_and_a_known_delay() {
    let Some(p) = NetnsPair::new("lat") else {
        return;
    };
    let base = reflected_p50(&p, None, 4_000);
    let delayed = reflected_p50(&p, Some("5ms"), 4_000);
    eprintln!("p50 without delay {base} ns, with --delay 5ms {delayed} ns");
    let shift = delayed as f64 - base as f64;
    assert!(
        (4.0e6..=6.0e6).contains(&shift),
        "--delay 5ms moved p50 from {base} ns to {delayed} ns ({shift} ns)"
    );
}

#[test]
fn capture_matches_what_was_sent() {
    let Some(p) = NetnsPair::new("cap") else {
        return;
    };
    if Command::new("tshark").arg("-v").output().is_err() {
        support::skip_or_fail::<()>("tshark is not installed");
        return;
    }
    let file = std::env::temp_dir().join(format!("rawq-cap-{}.pcap", std::process::id()));
    let rx = in_ns(&p.b, "pktgen")
        .args([
            "-b", "xdp", "-d", &p.veth_b, "--rx", "-t", "120", "--quiet", "--json",
        ])
        // Until the frames sent have reached its veth (SIGTERM below; `-t` bounds a failure).
        .args(["--rule", "udp dst-port 9000 -> queue 0", "--write"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    support::xdp::wait_attached(&p, &p.b, &p.veth_b);
    let mac_b = p.mac_text(&p.b, &p.veth_b);
    let tx = in_ns(&p.a, "pktgen")
        .args(["-b", "xdp", "-d", &p.veth_a, "--dst-mac", &mac_b])
        .args(["--src-ip", &p.ip_a, "--dst-ip", &p.ip_b, "-s", "62-1000"])
        .args(["-n", "3000", "-r", "20kpps", "--seq", "--vlan", "7,3"])
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    ok(&tx, "sender");
    p.wait_rx_packets(&p.b, &p.veth_b, 3000, std::time::Duration::from_secs(30));
    // SAFETY: kill(2) on our own child's pid (`ip netns exec` execs pktgen in place), not yet
    // reaped; pktgen --rx ends on SIGTERM after counting what its rings hold.
    unsafe { libc::kill(rx.id() as i32, libc::SIGTERM) };
    let rx = rx.wait_with_output().unwrap();
    ok(&rx, "receiver --write");
    let sent = summary(&tx);
    let got = summary(&rx);
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-T", "fields", "-e", "frame.len", "-e", "vlan.id"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    ok(&out, "tshark");
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut frames, mut bytes) = (0u64, 0u64);
    for l in text.lines() {
        let mut f = l.split('\t');
        bytes += f.next().unwrap().parse::<u64>().unwrap();
        assert_eq!(f.next(), Some("7"), "VLAN id: {l}");
        frames += 1;
    }
    assert_eq!(frames, sent["packets"].as_u64().unwrap(), "frames: {sent}");
    assert_eq!(frames, 3000);
    assert_eq!(bytes, sent["bytes"].as_u64().unwrap(), "bytes: {sent}");
    assert_eq!(got["capture"]["frames"].as_u64(), Some(3000), "{got}");
}

#[test]
fn rate_runs_report_the_achieved_rate_and_the_worst_second() {
    let out = Command::new(support::example("pktgen"))
        .args(["-b", "model", "--txrx", "-r", "20kpps", "-t", "3.5"])
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    ok(&out, "pktgen -r 20kpps");
    let v = summary(&out);
    let r = &v["rate"];
    assert_eq!(r["target_pps"].as_f64(), Some(20_000.0), "{r}");
    let achieved = r["achieved_pps"].as_f64().unwrap();
    let window = r["active_window_s"].as_f64().unwrap();
    assert!((3.0..3.6).contains(&window), "{r}");
    // The cumulative schedule holds the rate over the active window (not the idle linger),
    // but for the frames a stall made due before the catch-up window: those are not sent as
    // a burst but counted (`tx_late_skipped`; beside two busy loops, 9 % of them), and the
    // ledger says the rate fell short.
    let skipped = v["tx_late_skipped"].as_u64().expect("tx_late_skipped") as f64;
    let scheduled = achieved + skipped / window;
    assert!(
        (scheduled - 20_000.0).abs() < 200.0,
        "{r} skipped {skipped}"
    );
    if skipped > 0.0 {
        let short = v["ledger"]["shortfalls"].as_array().map_or(0, Vec::len);
        assert!(short > 0, "frames skipped and no shortfall said: {v}");
    }
    // At least two whole seconds lie inside the window; their worst deviation is reported.
    let dev = r["worst_second_deviation"].as_f64().expect("a full second");
    assert!(dev.abs() < 0.5, "{r}");
    assert_eq!(
        r["worst_second_pps"]
            .as_f64()
            .map(|p| ((p - 20_000.0) / 20_000.0 - dev).abs() < 1e-9),
        Some(true),
        "{r}"
    );
}

#[test]
fn imix_over_ipv6_sends() {
    // 10 rounds of the IPv6 IMIX: 7 × 74 + 4 × 590 + 1 × 1514 bytes.
    let out = Command::new(support::example("pktgen"))
        .args(["-b", "model", "-s", "imix", "-n", "120"])
        .args([
            "--src-ip",
            "2001:db8::1",
            "--dst-ip",
            "2001:db8::2",
            "--json",
            "--quiet",
        ])
        .output()
        .unwrap();
    ok(&out, "pktgen -s imix over IPv6");
    let v = summary(&out);
    assert_eq!(v["packets"].as_u64(), Some(120), "{v}");
    assert_eq!(
        v["bytes"].as_u64(),
        Some(10 * (7 * 74 + 4 * 590 + 1514)),
        "{v}"
    );
}

#[test]
fn tcp_and_vlan_templates_are_steered_back_and_timed() {
    // The default receive rule follows --l4, and a rule without `vlan` matches tagged frames.
    let out = Command::new(support::example("pktgen"))
        .args(["-b", "model", "--txrx", "--l4", "tcp-ack", "--vlan", "7,2"])
        .args(["--latency", "-s", "84", "-n", "1000", "--json", "--quiet"])
        .output()
        .unwrap();
    ok(&out, "pktgen --l4 tcp-ack --vlan 7,2 --latency");
    let v = summary(&out);
    assert_eq!(v["rx"]["packets"].as_u64(), Some(1000), "{v}");
    check_latency(&v, 1000, "round-trip", "software");
}

#[test]
fn qinq_frames_come_back_through_a_promiscuous_rule() {
    let out = Command::new(support::example("pktgen"))
        .args([
            "-b", "model", "--txrx", "--vlan", "1", "--vlan", "2,7", "--seq",
        ])
        .args([
            "-s",
            "80",
            "-n",
            "500",
            "-f",
            "5",
            "--rule",
            "promiscuous -> queue 0",
        ])
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    ok(&out, "pktgen QinQ");
    let v = summary(&out);
    assert_eq!(v["rx"]["packets"].as_u64(), Some(500), "{v}");
    assert_eq!(v["flows"]["count"].as_u64(), Some(5), "{v}");
    assert_eq!(v["flows"]["lost"].as_u64(), Some(0), "{v}");
    assert_eq!(
        v["seq_stamped"].as_u64(),
        Some(500),
        "stamps read through two tags: {v}"
    );
}
