//! pktgen and fwd when a link goes down or away (`--on-link-down exit|wait`): on AF_XDP over a
//! veth, and on the emulated NIC (dv, verbs) whose wire is a veth end. The examples are built
//! by `cargo test` before the tests run.

use rawq_testkit as support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::emu::{serial, tempdir};
use support::run::{in_ns, Run};
use support::NetnsPair;

fn text(o: &Output) -> String {
    support::emu::text(o)
}

/// pktgen's `--json` summary (its last stdout line).
fn summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary:\n{}", text(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn num(v: &serde_json::Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("no {path} in {v}"))
}

/// What sends: pktgen on `backend` from namespace A's end of `p` (on the emulated NIC for dv
/// and verbs, its wire being that end), to B's end.
fn pktgen(p: &NetnsPair, backend: &str, extra: &[&str], stats: &Path) -> Command {
    let mac_b = p.mac_text(&p.b, &p.veth_b);
    let mut args: Vec<String> = vec!["-b".into(), backend.into(), "-d".into()];
    args.push(if backend == "xdp" {
        p.veth_a.clone()
    } else {
        "mlx5_0".into()
    });
    for a in [
        "--dst-mac",
        &mac_b,
        "--src-ip",
        &p.ip_a,
        "--dst-ip",
        &p.ip_b,
        "--quiet",
    ] {
        args.push(a.into());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    if backend == "xdp" {
        let mut c = in_ns(&p.a, "pktgen");
        c.args(&args);
        c
    } else {
        let exe = support::example("pktgen");
        let mut cmd = vec![exe.to_str().unwrap().to_owned()];
        cmd.extend(args);
        let cmd: Vec<&str> = cmd.iter().map(|s| s.as_str()).collect();
        support::emu::emu_sh(Some((&p.a, &p.veth_a)), Some(120), &[], &cmd, stats)
    }
}

/// The default (exit): the link (the far end of the veth) goes down while pktgen sends: the
/// run ends, non-zero, naming the link.
fn pktgen_exits_when_the_link_goes_down(backend: &str) {
    let _one = serial();
    let Some(p) = NetnsPair::new("lrx") else {
        return;
    };
    let dir = tempdir(&format!("lrx-{backend}"));
    let mut child = Run::spawn(&mut pktgen(
        &p,
        backend,
        &["-r", "20kpps", "-t", "60"],
        &dir.join("stats"),
    ));
    let sending = child.wait_until(Duration::from_secs(60), |_| {
        p.rx_packets(&p.b, &p.veth_b) > 100
    });
    if sending {
        p.ip_in(&p.b, &["link", "set", &p.veth_b, "down"]).unwrap();
    }
    let t = Instant::now();
    let out = child.finish(Duration::from_secs(30));
    let all = text(&out);
    assert!(sending, "pktgen never sent:\n{all}");
    assert!(t.elapsed() < Duration::from_secs(25), "{all}");
    assert!(!out.status.success(), "{all}");
    let dev = if backend == "xdp" {
        p.veth_a.as_str()
    } else {
        "mlx5_0"
    };
    assert!(
        all.contains(&format!("pktgen: {dev}")) && all.contains("link went down"),
        "the cause, naming the link: {all}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--on-link-down wait`: the link goes down, pktgen pauses; it comes back, pktgen resumes and
/// ends normally; what was sent and what could not be sent add up to --count.
fn pktgen_waits_for_the_link(backend: &str) {
    let _one = serial();
    let Some(p) = NetnsPair::new("lrw") else {
        return;
    };
    let dir = tempdir(&format!("lrw-{backend}"));
    const N: u64 = 200_000;
    let n = N.to_string();
    let mut child = Run::spawn(&mut pktgen(
        &p,
        backend,
        &["-r", "20kpps", "-n", &n, "--on-link-down", "wait", "--json"],
        &dir.join("stats"),
    ));
    let sending = child.wait_until(Duration::from_secs(60), |_| {
        p.rx_packets(&p.b, &p.veth_b) > 100
    });
    let mut paused = false;
    if sending {
        p.ip_in(&p.b, &["link", "set", &p.veth_b, "down"]).unwrap();
        paused = child.wait_for_stderr("paused", Duration::from_secs(20));
        p.ip_in(&p.b, &["link", "set", &p.veth_b, "up"]).unwrap();
    }
    let out = child.finish(Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let all = text(&out);
    assert!(
        sending && paused,
        "pktgen never sent or never paused:\n{all}"
    );
    assert!(out.status.success(), "{all}");
    assert!(stderr.contains("sending resumes"), "{all}");
    let v = summary(&out);
    let sent = num(&v, "packets");
    let not_sent = num(&v, "link_down.not_sent");
    assert_eq!(num(&v, "link_down.downs"), 1, "{v}");
    assert!(not_sent > 0, "frames were due while the link was down: {v}");
    // Frames the device took and a queue error then flushed (the link went down under them)
    // are the ledger's `tx_refused`, beside those sent and those not sent (issue 32).
    let refused = num(&v, "ledger.buckets.tx_refused");
    assert_eq!(
        sent + refused + not_sent,
        N,
        "sent + flushed + not sent = --count: {v}"
    );
    assert_eq!(num(&v, "ledger.offered"), N, "{v}");
    assert_eq!(num(&v, "ledger.buckets.unattributed"), 0, "{v}");
    assert!(all.contains("frames not sent meanwhile") || v["link_down"].is_object());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The interface deleted under pktgen (its veth peer deleted: both ends go): the run ends
/// with that cause.
#[test]
fn xdp_pktgen_ends_with_the_cause_when_its_interface_is_deleted() {
    let _one = serial();
    let Some(p) = NetnsPair::new("lrd") else {
        return;
    };
    let dir = tempdir("lrd");
    let mut child = Run::spawn(&mut pktgen(
        &p,
        "xdp",
        &["-r", "20kpps", "-t", "60", "--on-link-down", "wait"],
        &dir.join("stats"),
    ));
    let sending = child.wait_until(Duration::from_secs(60), |_| {
        p.rx_packets(&p.b, &p.veth_b) > 100
    });
    if sending {
        p.ip_in(&p.b, &["link", "del", &p.veth_b]).unwrap();
    }
    let out = child.finish(Duration::from_secs(30));
    let all = text(&out);
    assert!(sending, "{all}");
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains(&p.veth_a) && all.contains("gone"),
        "the cause, naming the interface: {all}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn xdp_pktgen_exits_naming_the_link_when_it_goes_down() {
    pktgen_exits_when_the_link_goes_down("xdp");
}

#[test]
fn xdp_pktgen_on_link_down_wait_resumes_and_counts_add_up() {
    pktgen_waits_for_the_link("xdp");
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_dv_pktgen_exits_naming_the_link_when_the_wire_goes_down() {
    pktgen_exits_when_the_link_goes_down("dv");
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_verbs_pktgen_exits_naming_the_link_when_the_wire_goes_down() {
    pktgen_exits_when_the_link_goes_down("verbs");
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_dv_pktgen_on_link_down_wait_resumes_and_counts_add_up() {
    pktgen_waits_for_the_link("dv");
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_verbs_pktgen_on_link_down_wait_resumes_and_counts_add_up() {
    pktgen_waits_for_the_link("verbs");
}

/// fwd on the emulated NIC (`backend`), its wire the A end of a veth: the far end goes down,
/// fwd (default: exit) ends, non-zero, naming the link.
#[cfg(feature = "mlx5")]
fn fwd_exits_when_the_wire_goes_down(backend: &str) {
    let _one = serial();
    let Some(p) = NetnsPair::new("lfe") else {
        return;
    };
    let dir = tempdir(&format!("lfe-{backend}"));
    let exe = support::example("fwd");
    let mut child = Run::spawn(&mut support::emu::emu_sh(
        Some((&p.a, &p.veth_a)),
        Some(120),
        &[],
        &[
            exe.to_str().unwrap(),
            "-b",
            backend,
            "-d",
            "mlx5_0",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "-t",
            "60",
            "--quiet",
        ],
        &dir.join("stats"),
    ));
    let started = child.wait_for_stderr("fwd: mlx5_0 (", Duration::from_secs(60));
    if started {
        p.ip_in(&p.b, &["link", "set", &p.veth_b, "down"]).unwrap();
    }
    let t = Instant::now();
    let out = child.finish(Duration::from_secs(30));
    let all = text(&out);
    assert!(started, "fwd never started:\n{all}");
    assert!(t.elapsed() < Duration::from_secs(25), "{all}");
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("mlx5_0") && all.contains("link went down"),
        "the cause, naming the link: {all}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_dv_fwd_exits_naming_the_link_when_the_wire_goes_down() {
    fwd_exits_when_the_wire_goes_down("dv");
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_verbs_fwd_exits_naming_the_link_when_the_wire_goes_down() {
    fwd_exits_when_the_wire_goes_down("verbs");
}

/// fwd bridging two AF_XDP ports with `--on-link-down wait`; the output link goes down while
/// frames flow, then comes back: fwd goes on, counts what it could not send meanwhile, and
/// every frame received is accounted for; frames get through again after the link is back.
///
/// x.a (pktgen) --veth--> [x.b: fwd -d x.veth_b -d y.veth_b] --veth--> y.a
#[test]
fn xdp_fwd_on_link_down_wait_resumes_and_counts_add_up() {
    let _one = serial();
    let (Some(x), Some(y)) = (NetnsPair::new("lfwx"), NetnsPair::new("lfwy")) else {
        return;
    };
    y.move_b_into(&x.b).expect("move y's B end next to x's");
    let dir = tempdir("lfw");
    let rule = "udp dst-port 9000 -> queue 0";
    let mut fwd = Run::spawn(
        in_ns(&x.b, "fwd")
            .args(["-d", &x.veth_b, "-d", &y.veth_b, "--mode", "io", "-t", "12"])
            .args(["--ring", "4096"])
            .args([
                "--on-link-down",
                "wait",
                "--json",
                "--quiet",
                "--rule",
                rule,
            ]),
    );
    let started = fwd.wait_for_stderr(&format!("fwd: {} (", y.veth_b), Duration::from_secs(30));
    assert!(started, "fwd did not start");
    const N: u64 = 60_000;
    let tx = Run::spawn(
        in_ns(&x.a, "pktgen")
            .args(["-b", "xdp", "-d", &x.veth_a, "-n", &N.to_string()])
            .args(["-r", "20kpps", "--quiet"]),
    );
    let through = fwd.wait_until(Duration::from_secs(30), |_| {
        y.rx_packets(&y.a, &y.veth_a) > 100
    });
    let mut paused = false;
    let mut before_up = 0;
    if through {
        y.ip_in(&y.a, &["link", "set", &y.veth_a, "down"]).unwrap();
        paused = fwd.wait_for_stderr("paused", Duration::from_secs(20));
        before_up = y.rx_packets(&y.a, &y.veth_a);
        y.ip_in(&y.a, &["link", "set", &y.veth_a, "up"]).unwrap();
    }
    let tx = tx.finish(Duration::from_secs(60));
    let after = y.rx_packets(&y.a, &y.veth_a);
    // The sender is done: fwd ends once it has said it resumes (SIGTERM; its `-t` bounds a
    // failed test), not at its `-t` 9 s later.
    fwd.wait_for_stderr("sending resumes", Duration::from_secs(20));
    fwd.signal(libc::SIGTERM).expect("SIGTERM to fwd");
    let out = fwd.finish(Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let all = text(&out);
    assert!(tx.status.success(), "pktgen: {}", text(&tx));
    assert!(
        through && paused,
        "no frames through, or fwd never paused:\n{all}"
    );
    assert!(out.status.success(), "{all}");
    assert!(stderr.contains("sending resumes"), "{all}");
    assert!(
        after > before_up,
        "nothing got through after the link came back: {all}"
    );
    let v = summary(&out);
    let not_sent = num(&v, "link_down.not_sent");
    assert_eq!(num(&v, "link_down.downs"), 1, "{v}");
    assert!(not_sent > 0, "{v}");
    let p0 = &v["ports"][0];
    let p1 = &v["ports"][1];
    // What port 0 received or dropped (fill ring empty on a loaded machine) is what was sent.
    let rx0 = num(p0, "rx.packets");
    assert_eq!(rx0 + num(&p0["drops"], "rx_ring_or_fill"), N, "{v}");
    let d = &p1["drops"];
    let taken_or_counted = num(p1, "tx.forwarded")
        + not_sent
        + num(d, "tx_ring_full")
        + num(d, "tx_drops")
        + num(d, "tx_errors")
        + num(d, "tx_not_sent")
        + num(d, "tx_fate_unknown");
    assert_eq!(
        taken_or_counted, rx0,
        "every frame received is accounted for: {v}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// fwd `--on-link-down wait` on the emulated NIC (`backend`), reflecting (macswap) what pktgen
/// sends from the far end of its wire; the wire is set down, then up: fwd pauses and resumes,
/// exits 0, and every frame it received is forwarded or counted; pktgen (waiting too) sent +
/// not sent = --count, and frames come back after the link returns.
#[cfg(feature = "mlx5")]
fn fwd_waits_for_the_wire(backend: &str) {
    let _one = serial();
    let Some(p) = NetnsPair::new("lfm") else {
        return;
    };
    let dir = tempdir(&format!("lfm-{backend}"));
    let exe = support::example("fwd");
    let mut fwd = Run::spawn(&mut support::emu::emu_sh(
        Some((&p.a, &p.veth_a)),
        Some(120),
        &[],
        &[
            exe.to_str().unwrap(),
            "-b",
            backend,
            "-d",
            "mlx5_0",
            "--mode",
            "macswap",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "--on-link-down",
            "wait",
            "-t",
            "20",
            "--json",
            "--quiet",
        ],
        &dir.join("stats"),
    ));
    let started = fwd.wait_for_stderr("fwd: mlx5_0 (", Duration::from_secs(60));
    assert!(started, "fwd did not start");
    const N: u64 = 60_000;
    let mac_a = p.mac_text(&p.a, &p.veth_a);
    let tx = Run::spawn(
        in_ns(&p.b, "pktgen")
            .args(["-b", "xdp", "-d", &p.veth_b, "-n", &N.to_string()])
            .args([
                "--dst-mac",
                &mac_a,
                "-r",
                "20kpps",
                "--on-link-down",
                "wait",
            ])
            .args(["--json", "--quiet"]),
    );
    let back = fwd.wait_until(Duration::from_secs(30), |_| {
        p.rx_packets(&p.b, &p.veth_b) > 100
    });
    let mut paused = false;
    let mut before_up = 0;
    if back {
        p.ip_in(&p.a, &["link", "set", &p.veth_a, "down"]).unwrap();
        paused = fwd.wait_for_stderr("paused", Duration::from_secs(20));
        before_up = p.rx_packets(&p.b, &p.veth_b);
        p.ip_in(&p.a, &["link", "set", &p.veth_a, "up"]).unwrap();
    }
    let tx = tx.finish(Duration::from_secs(60));
    let after = p.rx_packets(&p.b, &p.veth_b);
    // The sender is done: fwd ends once it has said it resumes (SIGTERM to fwd itself, below
    // emu.sh; its `-t` bounds a failed test), not at its `-t` some 15 s later.
    fwd.wait_for_stderr("sending resumes", Duration::from_secs(20));
    support::emu::term_command(fwd.id(), "rawq-fwd");
    let out = fwd.finish(Duration::from_secs(40));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let all = text(&out);
    assert!(
        back && paused,
        "nothing came back, or fwd never paused:\n{all}"
    );
    assert!(out.status.success(), "{all}");
    assert!(stderr.contains("sending resumes"), "{all}");
    assert!(tx.status.success(), "pktgen: {}", text(&tx));
    let t = summary(&tx);
    assert_eq!(
        num(&t, "packets") + num(&t, "link_down.not_sent"),
        N,
        "pktgen: {t}"
    );
    assert!(
        after > before_up,
        "nothing came back after the link returned: {all}"
    );
    let v = summary(&out);
    assert_eq!(num(&v, "link_down.downs"), 1, "{v}");
    let p0 = &v["ports"][0];
    let d = &p0["drops"];
    let accounted = num(p0, "tx.forwarded")
        + num(&v, "link_down.not_sent")
        + num(d, "tx_ring_full")
        + num(d, "tx_drops")
        + num(d, "tx_errors")
        + num(d, "tx_not_sent")
        + num(d, "tx_fate_unknown");
    assert_eq!(
        accounted,
        num(p0, "rx.packets"),
        "every frame received is accounted for: {v}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_dv_fwd_on_link_down_wait_resumes_and_counts_add_up() {
    fwd_waits_for_the_wire("dv");
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_verbs_fwd_on_link_down_wait_resumes_and_counts_add_up() {
    fwd_waits_for_the_wire("verbs");
}
