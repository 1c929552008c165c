//! rawq-pktgen end to end: option errors, a capture judged by tshark, rate accuracy measured
//! by a receiving pktgen, and the README's demo script.
//!
//! `cargo test` builds the examples before it runs tests; these tests use that binary.

use rawq_testkit as support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::NetnsPair;

/// The traffic tests each run a busy sender and receiver; on a two-core machine they must not
/// overlap, or they would measure each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn pktgen() -> PathBuf {
    support::example("pktgen")
}

fn json_field(out: &[u8], key: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_slice(out)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(out)));
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

#[test]
fn bad_options_are_reported_not_panicked() {
    for args in [
        &["--rate", "fast"][..],
        &["--size", "300-60"],
        &[
            "--src-ip",
            "10.0.0.1",
            "--dst-ip",
            "2001:db8::1",
            "-b",
            "xdp",
            "-d",
            "lo",
        ],
        &["-b", "xdp"],
        &[
            "--rx",
            "-b",
            "xdp",
            "-d",
            "lo",
            "--rule",
            "udp dst-port 99999 -> queue 0",
        ],
    ] {
        let out = Command::new(pktgen()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.trim().is_empty(), "{args:?}: no message");
    }
    let out = Command::new(pktgen())
        .args([
            "--rx",
            "-b",
            "xdp",
            "-d",
            "lo",
            "--rule",
            "udp dst-port 99999 -> queue 0",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("99999"));
}

/// Runs pktgen in `ns` with `args`; returns stdout (the JSON summary).
fn run_in(p: &NetnsPair, ns: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(pktgen())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pktgen {args:?} in {ns} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = p;
    out.stdout
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// tshark decodes every captured frame as Ethernet/IP/UDP with good checksums, with exactly the
/// requested sizes and flow spread.
#[test]
fn tshark_validates_a_capture() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("tsh") else {
        return;
    };
    for (src, dst) in [
        (p.ip_a.as_str(), p.ip_b.as_str()),
        ("fd00:203::1", "fd00:203::2"),
    ] {
        let v6 = src.contains(':');
        let dir = tempdir();
        let cap = dir.join("cap.pcap");
        let n = 1000;
        let mut dump = Command::new("ip")
            .args([
                "netns",
                "exec",
                &p.b,
                "tcpdump",
                "-U",
                "-n",
                "-i",
                &p.veth_b,
                "-c",
                &n.to_string(),
            ])
            .args([
                "-w",
                cap.to_str().unwrap(),
                "udp",
                "and",
                "dst",
                "port",
                "9000",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump");
        support::wait_capturing(&mut dump);
        let (min, max) = if v6 { (78, 300) } else { (60, 300) };
        let size = format!("{min}-{max}");
        let dst_mac = mac_str(p.mac(&p.b, &p.veth_b));
        run_in(
            &p,
            &p.a,
            &[
                "-b",
                "xdp",
                "-d",
                &p.veth_a,
                "--dst-mac",
                &dst_mac,
                "--src-ip",
                src,
                "--dst-ip",
                dst,
                "-s",
                &size,
                "-f",
                "16",
                "--seq",
                "-n",
                &n.to_string(),
                "-r",
                "20kpps",
                "--json",
                "--quiet",
            ],
        );
        let t = Instant::now();
        while dump.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "tcpdump did not see {n} frames"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = Command::new("tshark")
            .args([
                "-n",
                "-r",
                cap.to_str().unwrap(),
                "-o",
                "udp.check_checksum:TRUE",
            ])
            .args([
                "-o",
                "ip.check_checksum:TRUE",
                "-T",
                "fields",
                "-E",
                "separator=,",
            ])
            .args([
                "-e",
                "frame.len",
                "-e",
                "udp.srcport",
                "-e",
                "udp.checksum.status",
            ])
            .args([
                "-e",
                if v6 {
                    "ipv6.plen"
                } else {
                    "ip.checksum.status"
                },
            ])
            .args(["-e", "_ws.malformed", "-e", "_ws.expert.severity"])
            .output()
            .expect("tshark");
        assert!(
            out.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut sizes = std::collections::BTreeSet::new();
        let mut ports = std::collections::BTreeSet::new();
        let mut frames = 0;
        for line in text.lines() {
            let f: Vec<&str> = line.split(',').collect();
            let len: usize = f[0].parse().unwrap();
            assert!((min..=max).contains(&len), "size {len}: {line}");
            assert_eq!(f[2], "1", "UDP checksum not good: {line}");
            if !v6 {
                assert_eq!(f[3], "1", "IPv4 checksum not good: {line}");
            }
            assert!(f.get(4).is_none_or(|m| m.is_empty()), "malformed: {line}");
            sizes.insert(len);
            ports.insert(f[1].to_string());
            frames += 1;
        }
        assert_eq!(frames, n, "captured frames");
        assert_eq!(
            sizes.len(),
            max - min + 1,
            "every size of the range appears"
        );
        assert_eq!(ports.len(), 16, "16 flows by source port");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `--rate` holds within 2% over 5 s, measured by the receiver's count: the frames the
/// receiver counted, plus those the sender says it skipped because it was off its CPU when they
/// were due (`tx_late_skipped`: the bounded catch-up sends no burst to make them up; beside two
/// busy loops a sender is late now and then), are within 2% of 5 s at the rate.
#[test]
fn rate_holds_within_two_percent() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("rate") else {
        return;
    };
    let mut rx = support::run::Run::spawn(
        support::run::in_ns(&p.b, "pktgen")
            .args([
                "-b", "xdp", "-d", &p.veth_b, "--rx", "--ring", "8192", "-t", "7.5", "--json",
                "--quiet",
            ])
            .args(["--rule", "udp dst-port 9000 -> queue 0"]),
    );
    // Its banner: the port is open, its rule in place.
    assert!(
        rx.wait_for_stderr("pktgen:", Duration::from_secs(30)),
        "the receiver did not start: {}",
        rx.stderr()
    );
    let dst_mac = mac_str(p.mac(&p.b, &p.veth_b));
    let rate = 20_000.0;
    let tx = run_in(
        &p,
        &p.a,
        &[
            "-b",
            "xdp",
            "-d",
            &p.veth_a,
            "--dst-mac",
            &dst_mac,
            "--src-ip",
            &p.ip_a,
            "--dst-ip",
            &p.ip_b,
            "-r",
            "20kpps",
            "-t",
            "5",
            "--json",
            "--quiet",
        ],
    );
    let rx = rx.finish(Duration::from_secs(60));
    assert!(
        rx.status.success(),
        "receiver: {}",
        String::from_utf8_lossy(&rx.stderr)
    );
    let got = json_field(&rx.stdout, "packets");
    let sent = json_field(&tx, "packets");
    let skipped = json_field(&tx, "tx_late_skipped");
    let measured = (got + skipped) / 5.0;
    assert!(
        (measured - rate).abs() / rate <= 0.02,
        "receiver counted {got} in 5 s, the sender skipped {skipped} late ones: {measured} pps \
         (sender says {sent})"
    );
}

/// README command 1: the demo shows sent = received on the steered flow and ping 0% loss.
#[test]
fn demo_script_succeeds() {
    run_demo("demo", &[]);
}

/// The demo with the receiving port on the emulated ConnectX (rawq's DV backend through
/// libmlx5's objects, B's address on the port's TAP netdev): the same RESULT line.
#[test]
fn demo_script_succeeds_on_the_emulated_dv_backend() {
    if let Some(text) = run_demo("demodv", &["--backend", "dv"]) {
        assert!(text.contains("receiver: dv on mlx5_0"), "{text}");
    }
}

/// Runs `scripts/demo.sh --seconds 2 ARGS` and checks its RESULT line; returns its output, or
/// `None` when skipped (fails instead with RAWQ_REQUIRE_NETNS=1) for lack of root.
fn run_demo(tag: &str, args: &[&str]) -> Option<String> {
    let _serial = serial();
    NetnsPair::new(tag)?;
    let root = support::repo_root().to_path_buf();
    let out = Command::new("bash")
        .arg(root.join("scripts/demo.sh"))
        .args(args)
        .args(["--seconds", "2"])
        .env("PKTGEN", pktgen())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains("RESULT: ok"),
        "demo {args:?} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(text)
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rawq-test-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    let d = PathBuf::from(d.to_string_lossy().replace([' ', '{', '}', ':', ','], "_"));
    std::fs::create_dir_all(&d).unwrap();
    d
}
