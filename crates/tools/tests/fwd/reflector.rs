//! rawq-fwd as a macswap reflector: every steered frame comes back to the sender, in order,
//! while ping through the kernel on the same link keeps working.

use rawq_testkit as support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::NetnsPair;

/// Each test runs a busy sender, forwarder and receiver: on a two-core machine they must not
/// overlap, or they would starve each other's receive rings (the binary's lock).
use crate::serial;

#[test]
fn macswap_reflects_every_frame() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("fwd") else {
        return;
    };
    let ns_cmd = |ns: &str, bin: &str| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(support::example(bin));
        c
    };
    // B reflects UDP to 9000; A sends and counts what comes back on the same queue. fwd runs
    // until the sender is done (SIGTERM below; `-t` bounds a failed test): with `-t 8` a
    // sender slowed by a loaded machine was still sending when fwd stopped.
    let mut fwd = support::run::Run::spawn(
        ns_cmd(&p.b, "fwd")
            .args(["-d", &p.veth_b, "--mode", "macswap", "-t", "120", "--quiet"])
            .args(["--ring", "8192"])
            .args(["--rule", "udp dst-port 9000 -> queue 0"]),
    );
    // Its banner: the port is open, its rule in place.
    assert!(
        fwd.wait_for_stderr("fwd:", Duration::from_secs(30)),
        "fwd did not start: {}",
        fwd.stderr()
    );
    // Kernel traffic on the same link for the whole run.
    let ping = Command::new("ip")
        .args([
            "netns", "exec", &p.a, "ping", "-q", "-c", "10", "-i", "0.2", "-W", "1", &p.ip_b,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mac_b = p.mac_text(&p.b, &p.veth_b);
    let n = 20_000;
    let tx = ns_cmd(&p.a, "pktgen")
        .args([
            "-b",
            "xdp",
            "-d",
            &p.veth_a,
            "--dst-mac",
            &mac_b,
            "--src-ip",
            &p.ip_a,
        ])
        .args([
            "--dst-ip",
            &p.ip_b,
            "-n",
            &n.to_string(),
            // 20 kpps: fwd's ring of 8192 then holds 0.4 s of frames while a loaded machine
            // keeps fwd off its CPU (at 50 kpps, 1459 of them overflowed beside a campaign),
            // and a second of drain takes what fwd reflects late.
            "-r",
            "20kpps",
            "--seq",
            "--drain",
            "1s",
        ])
        .args([
            "--txrx",
            "--ring",
            "8192",
            "--rule",
            "udp dst-port 9000 -> queue 0",
        ])
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    assert!(
        tx.status.success(),
        "sender: {}",
        String::from_utf8_lossy(&tx.stderr)
    );
    let ping = ping.wait_with_output().unwrap();
    fwd.signal(libc::SIGTERM).expect("SIGTERM to fwd");
    let fwd = fwd.finish(Duration::from_secs(60));
    assert!(
        fwd.status.success(),
        "fwd: {}",
        String::from_utf8_lossy(&fwd.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&tx.stdout).unwrap();
    let fwd_out = String::from_utf8_lossy(&fwd.stdout);
    assert_eq!(v["packets"].as_u64(), Some(n), "sent: {v}");
    assert_eq!(
        v["rx_packets"].as_u64(),
        Some(n),
        "reflected frames: {v}; {fwd_out}"
    );
    assert_eq!(v["seq_gaps"].as_u64(), Some(0), "{v}");
    assert_eq!(v["seq_out_of_order"].as_u64(), Some(0), "{v}");
    let out = String::from_utf8_lossy(&fwd.stdout);
    assert!(out.contains(&format!("forwarded {n} frames")), "{out}");
    assert!(
        String::from_utf8_lossy(&ping.stdout).contains(" 0% packet loss"),
        "ping: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
}

fn ns_cmd(ns: &str, bin: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(support::example(bin));
    c
}

/// Issue 12 item 1: fwd bridging two AF_XDP ports (io mode) delivers every frame to the far
/// side, and says so; it used to forward nothing and report "forwarded N, dropped 0".
///
/// x.a --veth--> [x.b: fwd -d x.veth_b -d y.veth_b] --veth--> y.a (pktgen --rx)
#[test]
fn two_port_io_forwards_across_ports() {
    let _serial = serial();
    let (Some(x), Some(y)) = (NetnsPair::new("fw2x"), NetnsPair::new("fw2y")) else {
        return;
    };
    y.move_b_into(&x.b).expect("move y's B end next to x's");
    let rule = "udp dst-port 9000 -> queue 0";
    // fwd and the receiver run until the sender is done and every frame has had the time to
    // arrive (SIGTERM below; `-t` bounds a failed test), not for a guessed 5 s.
    let mut fwd = support::run::Run::spawn(
        ns_cmd(&x.b, "fwd")
            .args([
                "-d", &x.veth_b, "-d", &y.veth_b, "--mode", "io", "-t", "120",
            ])
            .args(["--ring", "4096"])
            .args(["--quiet", "--rule", rule]),
    );
    let mut rx = support::run::Run::spawn(
        ns_cmd(&y.a, "pktgen")
            .args([
                "-b", "xdp", "-d", &y.veth_a, "--rx", "-t", "120", "--json", "--quiet",
            ])
            .args(["--rule", rule]),
    );
    // Their banners: both ports open, their rules in place.
    assert!(
        fwd.wait_for_stderr("fwd:", Duration::from_secs(30)),
        "fwd did not start: {}",
        fwd.stderr()
    );
    assert!(
        rx.wait_for_stderr("pktgen:", Duration::from_secs(30)),
        "the receiver did not start: {}",
        rx.stderr()
    );
    let n = 5000;
    let tx = ns_cmd(&x.a, "pktgen")
        .args([
            "-b",
            "xdp",
            "-d",
            &x.veth_a,
            "-n",
            &n.to_string(),
            "-r",
            "20kpps",
        ])
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    assert!(
        tx.status.success(),
        "{}",
        String::from_utf8_lossy(&tx.stderr)
    );
    // Every frame sent has reached the receiver's veth (what fwd dropped would not: the
    // assertions below say how many), or the bound passed.
    y.wait_rx_packets(&y.a, &y.veth_a, n, Duration::from_secs(30));
    fwd.signal(libc::SIGTERM).expect("SIGTERM to fwd");
    let fwd = fwd.finish(Duration::from_secs(60));
    rx.signal(libc::SIGTERM).expect("SIGTERM to the receiver");
    let rx = rx.finish(Duration::from_secs(60));
    let fwd_out = String::from_utf8_lossy(&fwd.stdout);
    assert!(
        fwd.status.success(),
        "fwd: {}",
        String::from_utf8_lossy(&fwd.stderr)
    );
    assert!(
        rx.status.success(),
        "{}",
        String::from_utf8_lossy(&rx.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&rx.stdout).unwrap();
    assert_eq!(
        v["packets"].as_u64(),
        Some(n),
        "received beyond fwd: {v}; fwd: {fwd_out}"
    );
    assert!(
        fwd_out.contains(&format!("forwarded {n} frames")),
        "{fwd_out}"
    );
    assert!(fwd_out.contains("tx drops 0"), "{fwd_out}");
    assert!(
        fwd_out.contains("rx drops") && fwd_out.contains("fill ring empty"),
        "{fwd_out}"
    );
}

/// Issue 12 item 6: frames the forwarder's socket could not take (an 8-slot ring against a
/// sender at full speed) are counted as rx drops, and the counts never add up to more than was
/// sent.
#[test]
fn rx_drops_are_counted() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("fwdrop") else {
        return;
    };
    let rule = "udp dst-port 9000 -> queue 0";
    // fwd runs until the blast has reached its veth (then SIGTERM; `-t` bounds a failed test),
    // its banner awaited before anything is sent.
    let mut fwd = support::run::Run::spawn(
        ns_cmd(&p.b, "fwd")
            .args(["-d", &p.veth_b, "--mode", "io", "-t", "120", "--quiet"])
            .args(["--ring", "8", "--burst", "8", "--rule", rule]),
    );
    assert!(
        fwd.wait_for_stderr("fwd:", Duration::from_secs(30)),
        "fwd did not start: {}",
        fwd.stderr()
    );
    let n: u64 = 50_000;
    let tx = ns_cmd(&p.a, "pktgen")
        .args([
            "-b",
            "xdp",
            "-d",
            &p.veth_a,
            "-n",
            &n.to_string(),
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(
        tx.status.success(),
        "{}",
        String::from_utf8_lossy(&tx.stderr)
    );
    p.wait_rx_packets(&p.b, &p.veth_b, n, Duration::from_secs(30));
    fwd.signal(libc::SIGTERM).expect("SIGTERM to fwd");
    let fwd = fwd.finish(Duration::from_secs(60));
    let out = String::from_utf8_lossy(&fwd.stdout).into_owned();
    assert!(
        fwd.status.success(),
        "{}",
        String::from_utf8_lossy(&fwd.stderr)
    );
    let num = |key: &str| -> u64 {
        let at = out
            .find(key)
            .unwrap_or_else(|| panic!("no {key:?} in {out}"))
            + key.len();
        out[at..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("no number after {key:?} in {out}"))
    };
    let (forwarded, refused, rx_drops) = (num("forwarded"), num("dropped"), num("rx drops"));
    assert!(rx_drops > 0, "{out}");
    assert!(forwarded + refused + rx_drops <= n, "{out}");
}

/// Issue 32 items 1 and 2: fwd's ledger. A forwarder with an 8-slot ring on a veth under a
/// blast: the socket's drops are in the veth's `rx_dropped` too, and used to be reported twice
/// (`rx ring/fill N` and `netdev_rx_dropped N`); now each drop is counted once, the ledger's
/// buckets add up to what arrived, which is what the sender's ledger says left its port, with
/// nothing unattributed and nothing counted twice.
#[test]
fn the_ledger_counts_each_drop_once() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("fwdldg") else {
        return;
    };
    let rule = "udp dst-port 9000 -> queue 0";
    let mut fwd = ns_cmd(&p.b, "fwd")
        // Until the blast has reached its veth (SIGTERM below; `-t` bounds a failed test).
        .args(["-d", &p.veth_b, "--mode", "io", "-t", "120", "--json"])
        .args(["--ring", "8", "--burst", "8", "--rule", rule])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // fwd says its ports are open before it forwards.
    let mut err = std::io::BufReader::new(fwd.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("queue pair(s)") {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap() == 0 {
            panic!("fwd ended before opening its port: {said}");
        }
        said += &line;
    }
    let tx = ns_cmd(&p.a, "pktgen")
        .args([
            "-b", "xdp", "-d", &p.veth_a, "-n", "50000", "--json", "--quiet",
        ])
        .output()
        .unwrap();
    assert!(
        tx.status.success(),
        "{}",
        String::from_utf8_lossy(&tx.stderr)
    );
    let sent: serde_json::Value = serde_json::from_slice(&tx.stdout).unwrap();
    let n_sent = sent["packets"].as_u64().expect("the sender's packets");
    p.wait_rx_packets(&p.b, &p.veth_b, n_sent, Duration::from_secs(30));
    // SAFETY: kill(2) on our own child's pid (`ip netns exec` execs fwd in place), not yet
    // reaped; fwd ends on SIGTERM with its summary.
    unsafe { libc::kill(fwd.id() as i32, libc::SIGTERM) };
    let out = fwd.wait_with_output().unwrap();
    assert!(out.status.success(), "{said}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let l = &v["ledger"];
    let b = l["buckets"].as_object().unwrap();
    let sum: u64 = b.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(Some(sum), l["offered"].as_u64(), "{l}");
    assert_eq!(b["unattributed"], 0, "{l}");
    assert_eq!(l["double_counted"], 0, "{l}");
    assert!(
        b["rx_queue_drops"].as_u64().unwrap() > 0,
        "an 8-slot ring drops: {l}"
    );
    assert_eq!(
        v["ports"][0]["drops"]["device"]["netdev_rx_dropped"], 0,
        "the socket's drops are not counted again: {v}"
    );
    assert_eq!(
        l["offered"], sent["ledger"]["buckets"]["sent"],
        "what arrived is what left the sender: {l} {}",
        sent["ledger"]
    );
}

/// The number after `key` in `text`.
fn number_after(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {text}"))
        + key.len();
    text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {text}"))
}

/// Issue 20 defect 1: the output port of a two-port bridge goes down (or is deleted) mid-run.
/// fwd used to keep running, count the frames that never left as forwarded, and exit 0; now
/// the run ends with the summary, then the cause naming the interface, and a non-zero status,
/// and "forwarded" counts only what the device sent.
fn output_link_failure_ends_the_run(delete: bool) {
    let _serial = serial();
    let (Some(x), Some(y)) = (NetnsPair::new("fwlx"), NetnsPair::new("fwly")) else {
        return;
    };
    y.move_b_into(&x.b).expect("move y's B end next to x's");
    let rule = "udp dst-port 9000 -> queue 0";
    let fwd = ns_cmd(&x.b, "fwd")
        .args(["-d", &x.veth_b, "-d", &y.veth_b, "--mode", "io", "-t", "15"])
        .args(["--quiet", "--rule", rule])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    support::xdp::wait_attached(&x, &x.b, &y.veth_b);
    let send = |n: u64| {
        let tx = ns_cmd(&x.a, "pktgen")
            .args(["-b", "xdp", "-d", &x.veth_a, "-n", &n.to_string()])
            .args(["-r", "20kpps", "--quiet"])
            .output()
            .unwrap();
        assert!(
            tx.status.success(),
            "{}",
            String::from_utf8_lossy(&tx.stderr)
        );
    };
    send(2000);
    if delete {
        x.ip_in(&x.b, &["link", "del", &y.veth_b]).unwrap();
    } else {
        x.ip_in(&x.b, &["link", "set", &y.veth_b, "down"]).unwrap();
    }
    send(2000);
    let out = support::emu::wait_for(fwd, Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "fwd must fail when a port goes {}: {stdout}\n{stderr}",
        if delete { "away" } else { "down" }
    );
    let cause = if delete { "gone" } else { "down" };
    assert!(
        stderr.contains(&y.veth_b) && stderr.contains(cause),
        "the cause, naming the interface: {stderr}"
    );
    // The summary came first, and counts only what left: at most the first 2000.
    let forwarded = number_after(&stdout, "forwarded");
    assert!(forwarded <= 2000, "{stdout}");
}

#[test]
fn output_link_down_ends_the_run_with_its_cause() {
    output_link_failure_ends_the_run(false);
}

#[test]
fn output_link_deleted_ends_the_run_with_its_cause() {
    output_link_failure_ends_the_run(true);
}

/// fwd `--queues 2` on a veth with two queues: pktgen sends from both of its queues (AF_XDP
/// copy mode marks each frame with its socket's queue, and the veth delivers it on the peer's
/// receive queue of that number), fwd reflects each queue's frames out of the same queue pair,
/// one thread each; every frame is received and forwarded once, on both queue pairs.
#[test]
fn two_queue_pairs_on_a_two_queue_veth() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("fwq2") else {
        return;
    };
    // A second veth pair between the same hosts, with two queues a side.
    let (qa, qb) = (format!("{}q", p.veth_a), format!("{}q", p.veth_b));
    p.ip_in(
        &p.a,
        &[
            "link",
            "add",
            &qa,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            &qb,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "netns",
            &p.b,
        ],
    )
    .expect("a two-queue veth");
    p.ip_in(&p.a, &["link", "set", &qa, "up"]).unwrap();
    p.ip_in(&p.b, &["link", "set", &qb, "up"]).unwrap();
    let rule = "udp dst-port 9000 -> queue 0";
    // fwd runs until every frame sent has reached its veth (then SIGTERM; `-t` bounds a failed
    // test), not for a guessed 6 s that a loaded machine's slowed sender may outlast.
    let fwd = ns_cmd(&p.b, "fwd")
        .args(["-d", &qb, "--queues", "2", "--mode", "macswap", "-t", "120"])
        .args(["--ring", "4096", "--quiet", "--json", "--rule", rule])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    support::xdp::wait_attached(&p, &p.b, &qb);
    let n: u64 = 20_000;
    let tx = ns_cmd(&p.a, "pktgen")
        .args(["-b", "xdp", "-d", &qa, "-q", "2", "-n", &n.to_string()])
        .args(["-r", "20kpps", "--flows", "64", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(
        tx.status.success(),
        "{}",
        String::from_utf8_lossy(&tx.stderr)
    );
    p.wait_rx_packets(&p.b, &qb, n, Duration::from_secs(30));
    // SAFETY: kill(2) on the pid of a child we started and have not reaped (`ip netns exec`
    // execs fwd in place).
    unsafe { libc::kill(fwd.id() as i32, libc::SIGTERM) };
    let out = support::emu::wait_for(fwd, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "fwd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let port = &v["ports"][0];
    let rx = port["rx"]["packets"].as_u64().unwrap();
    assert_eq!(rx, n, "every frame received once: {v}");
    assert_eq!(v["forwarded"].as_u64(), Some(n), "{v}");
    for dir in ["rx", "tx"] {
        for q in port[dir]["per_queue"].as_array().unwrap() {
            assert!(q.as_u64().unwrap() > 0, "{dir} on each queue pair: {v}");
        }
    }
    assert_eq!(port["drops"]["tx_ring_full"].as_u64(), Some(0), "{v}");
    assert_eq!(port["drops"]["rx_ring_or_fill"].as_u64(), Some(0), "{v}");
}
