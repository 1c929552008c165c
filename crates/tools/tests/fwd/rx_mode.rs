//! fwd `--rx-mode interrupt|adaptive` (issue 19 item 1): idle for 5 s, the forwarding process
//! uses under 2% of a core (its CPU time from /proc), then reflects every frame of a 4×10^4-frame
//! burst sent at 20 kpps (beside two busy loops fwd kept up with 100 kpps on a third of a core
//! no more: 24% went to its ring's drops). On `-b xdp` over a veth pair here; the emulated NIC's runs are in
//! `tests/emu/fwd_rx_mode.rs`.

use rawq_testkit as support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::NetnsPair;

use crate::serial;

fn ns_cmd(ns: &str, bin: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(support::example(bin));
    c
}

/// CPU time (user + system) of process `pid`, all threads, in clock ticks
/// (`/proc/PID/stat` fields 14 and 15).
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

/// The share of one core `pid` used over the next `secs` seconds.
fn idle_cpu_share(pid: u32, secs: u64) -> f64 {
    let t0 = cpu_ticks(pid);
    let w0 = Instant::now();
    // A measurement window, not a wait for a condition: the process is idle by design.
    std::thread::sleep(Duration::from_secs(secs));
    let used = (cpu_ticks(pid) - t0) as f64 / clk_tck() as f64;
    used / w0.elapsed().as_secs_f64()
}

fn kill(child: &mut Child) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

fn idle_then_reflect(mode: &str) {
    let _serial = serial();
    let Some(p) = NetnsPair::new("fwdrxm") else {
        return;
    };
    let mut fwd = ns_cmd(&p.b, "fwd")
        .args([
            "-d", &p.veth_b, "--mode", "macswap", "-t", "60", "--quiet", "--json",
        ])
        .args(["--ring", "8192", "--rx-mode", mode])
        .args(["--rule", "udp dst-port 9000 -> queue 0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    support::xdp::wait_attached(&p, &p.b, &p.veth_b);
    // `ip netns exec` execs fwd in place: the child is fwd itself.
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", fwd.id())).unwrap();
    assert_eq!(comm.trim(), "rawq-fwd");
    let share = idle_cpu_share(fwd.id(), 5);
    let mac_b = p.mac_text(&p.b, &p.veth_b);
    let n = 40_000u64;
    let tx = ns_cmd(&p.a, "pktgen")
        .args(["-b", "xdp", "-d", &p.veth_a, "--dst-mac", &mac_b])
        .args(["--src-ip", &p.ip_a, "--dst-ip", &p.ip_b])
        .args(["-n", &n.to_string(), "-r", "20kpps", "--seq", "--txrx"])
        .args(["--ring", "8192", "--rule", "udp dst-port 9000 -> queue 0"])
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    kill(&mut fwd);
    let fwd = fwd.wait_with_output().unwrap();
    let fwd_out = String::from_utf8_lossy(&fwd.stdout);
    let fwd_err = String::from_utf8_lossy(&fwd.stderr);
    assert!(
        tx.status.success(),
        "sender: {}",
        String::from_utf8_lossy(&tx.stderr)
    );
    assert!(fwd.status.success(), "fwd: {fwd_out} {fwd_err}");
    assert!(
        share < 0.02,
        "fwd --rx-mode {mode} used {:.1}% of a core while idle",
        share * 100.0
    );
    let v: serde_json::Value = serde_json::from_slice(&tx.stdout).unwrap();
    assert_eq!(v["packets"].as_u64(), Some(n), "sent: {v}");
    // fwd lost nothing it was given: every frame that reached its queue went back out.
    let f: serde_json::Value = serde_json::from_str(&fwd_out)
        .unwrap_or_else(|e| panic!("fwd's JSON summary ({e}): {fwd_out} {fwd_err}"));
    let fb = &f["ledger"]["buckets"];
    for k in [
        "rx_queue_drops",
        "tx_refused",
        "tx_ring_full",
        "unattributed",
    ] {
        assert_eq!(fb[k].as_u64(), Some(0), "fwd's {k}: {f}");
    }
    // Every frame came back but those a veth dropped before any socket saw them (its NAPI
    // ring full while a loaded machine kept the softirq waiting: the interfaces' tx_dropped,
    // in each tool's ledger as wire_drops; a sleeping fwd cannot cause those, its own
    // socket's drops are rx_queue_drops above). Quiet machine: none.
    let veth =
        v["ledger"]["buckets"]["wire_drops"].as_u64().unwrap() + fb["wire_drops"].as_u64().unwrap();
    assert_eq!(
        v["rx_packets"].as_u64().unwrap() + veth,
        n,
        "reflected, plus the veths' drops: {v}; {f}"
    );
    assert_eq!(v["seq_lost"].as_u64(), Some(veth), "{v}");
    // What fwd's veth dropped on the way back, pktgen has no counter for.
    assert_eq!(
        v["ledger"]["buckets"]["unattributed"].as_u64(),
        fb["wire_drops"].as_u64(),
        "{v}"
    );
    eprintln!("fwd --rx-mode {mode}: idle {:.2}% of a core", share * 100.0);
}

#[test]
fn xdp_interrupt_idles_then_reflects_every_frame() {
    idle_then_reflect("interrupt");
}

#[test]
fn xdp_adaptive_idles_then_reflects_every_frame() {
    idle_then_reflect("adaptive");
}

/// The mode the busy-poll default keeps: a core spent while idle (the measurement above can
/// tell the modes apart).
#[test]
fn xdp_poll_spins_while_idle() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("fwdrxp") else {
        return;
    };
    let mut fwd = ns_cmd(&p.b, "fwd")
        .args(["-d", &p.veth_b, "--mode", "macswap", "-t", "30", "--quiet"])
        .args([
            "--rx-mode",
            "poll",
            "--rule",
            "udp dst-port 9000 -> queue 0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    support::xdp::wait_attached(&p, &p.b, &p.veth_b);
    let share = idle_cpu_share(fwd.id(), 2);
    kill(&mut fwd);
    let _ = fwd.wait();
    // Well above the 2% the sleeping modes must stay under, even with a loaded machine's share
    // of a core.
    assert!(share > 0.05, "poll mode used only {:.1}%", share * 100.0);
}

/// pktgen `--rx --rx-mode interrupt`: the receiver idles under 2% of a core, then counts every
/// frame of a burst.
#[test]
fn pktgen_rx_interrupt_idles_then_counts_every_frame() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("pgrxm") else {
        return;
    };
    let mut rx = ns_cmd(&p.b, "pktgen")
        .args([
            "-b",
            "xdp",
            "-d",
            &p.veth_b,
            "--rx",
            "--rx-mode",
            "interrupt",
        ])
        .args(["--ring", "8192", "--rule", "udp dst-port 9000 -> queue 0"])
        .args(["-t", "12", "--json", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    support::xdp::wait_attached(&p, &p.b, &p.veth_b);
    let share = idle_cpu_share(rx.id(), 3);
    let mac_b = p.mac_text(&p.b, &p.veth_b);
    let n = 20_000u64;
    let tx = ns_cmd(&p.a, "pktgen")
        .args(["-b", "xdp", "-d", &p.veth_a, "--dst-mac", &mac_b])
        .args(["--src-ip", &p.ip_a, "--dst-ip", &p.ip_b])
        .args(["-n", &n.to_string(), "-r", "50kpps", "--seq", "--quiet"])
        .output()
        .unwrap();
    assert!(
        tx.status.success(),
        "{}",
        String::from_utf8_lossy(&tx.stderr)
    );
    // The receiver ends once every frame sent has reached its veth (or the bound passed):
    // SIGTERM, on which it counts what its queue still holds; not at its `-t`, which bounds a
    // failed test.
    p.wait_rx_packets(&p.b, &p.veth_b, n, Duration::from_secs(30));
    kill(&mut rx);
    let rx = rx.wait_with_output().unwrap();
    assert!(
        rx.status.success(),
        "{}",
        String::from_utf8_lossy(&rx.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&rx.stdout).unwrap();
    assert_eq!(v["rx_packets"].as_u64(), Some(n), "{v}");
    assert!(
        share < 0.02,
        "pktgen --rx --rx-mode interrupt used {:.1}% of a core while idle",
        share * 100.0
    );
}
