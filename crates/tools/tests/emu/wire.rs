//! The emulated ConnectX on a real wire: each namespace of a veth pair runs a program under
//! `scripts/emu.sh --wire <its veth end>`, so unmodified libibverbs + libmlx5 drive rawq's device
//! model, whose port is that veth end. Peer tools and the kernel are the judges.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::emu::{
    counter, emu_sh, pktgen_to_kernel_socket, serial, tap_answers_ping_and_tcp, tap_rig, tempdir,
    text, wait_for,
};
use support::NetnsPair;

/// `ip netns exec NS bash scripts/emu.sh --wire IF [opts] -- cmd...`.
fn emu_in(ns: &str, wire: &str, opts: &[&str], cmd: &[&str], stats: &Path) -> Command {
    emu_sh(Some((ns, wire)), None, opts, cmd, stats)
}

fn need(tool: &str) {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{tool} is missing: install Debian's perftest / ibverbs-utils (scripts/setup.sh)"
    );
}

#[test]
fn perftest_raw_ethernet_bw_across_a_veth_between_two_emulated_nics() {
    let _one = serial();
    need("raw_ethernet_bw");
    let Some(ns) = NetnsPair::new("emubw") else {
        return;
    };
    let dir = tempdir("emubw");
    let (srv_stats, cli_stats) = (dir.join("server.stats"), dir.join("client.stats"));
    let (mac_s, mac_c) = ("02:00:00:00:00:0b", "02:00:00:00:00:0a");
    const N: &str = "5000";
    let server = emu_in(
        &ns.b,
        &ns.veth_b,
        &[],
        &[
            "raw_ethernet_bw",
            "-d",
            "mlx5_0",
            "-i",
            "1",
            "--server",
            "-B",
            mac_s,
            "-E",
            mac_c,
            "-s",
            "64",
            "-n",
            N,
        ],
        &srv_stats,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start the server");
    // The server's flow rule is in place once its model counts (its stats file appears).
    let end = Instant::now() + Duration::from_secs(60);
    while !srv_stats.exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    // A software rate the bridge sustains on a shared 2-core machine.
    let client = emu_in(
        &ns.a,
        &ns.veth_a,
        &[],
        &[
            "raw_ethernet_bw",
            "-d",
            "mlx5_0",
            "-i",
            "1",
            "--client",
            "-B",
            mac_c,
            "-E",
            mac_s,
            "-s",
            "64",
            "-n",
            N,
            "--rate_limit=2000",
            "--rate_units=p",
            "--rate_limit_type=SW",
        ],
        &cli_stats,
    )
    .output()
    .expect("run the client");
    let server = wait_for(server, Duration::from_secs(60));
    let counters = || {
        format!(
            "server {}\nclient {}",
            std::fs::read_to_string(&srv_stats).unwrap_or_default(),
            std::fs::read_to_string(&cli_stats).unwrap_or_default()
        )
    };
    assert!(
        client.status.success(),
        "client:\n{}\n{}",
        text(&client),
        counters()
    );
    assert!(
        server.status.success(),
        "server:\n{}\n{}",
        text(&server),
        counters()
    );
    // perftest's own report: N iterations of 64 bytes on both sides.
    for (who, o) in [("client", &client), ("server", &server)] {
        let out = String::from_utf8_lossy(&o.stdout);
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with("64 "))
            .unwrap_or_else(|| panic!("{who}: no result row:\n{out}"));
        assert_eq!(
            row.split_whitespace().nth(1),
            Some(N),
            "{who} iterations: {row}"
        );
    }
    // The models agree: every frame the client's port sent reached the server's RQ.
    assert_eq!(
        counter(&cli_stats, "tx_frames"),
        Some(5000),
        "{}",
        counters()
    );
    assert_eq!(
        counter(&cli_stats, "tx_error_cqes"),
        Some(0),
        "{}",
        counters()
    );
    assert_eq!(
        counter(&srv_stats, "rx_frames"),
        Some(5000),
        "{}",
        counters()
    );
    assert_eq!(
        counter(&srv_stats, "rx_no_buffer"),
        Some(0),
        "{}",
        counters()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pktgen_verbs_sends_through_libmlx5_to_a_kernel_socket() {
    let _one = serial();
    let Some(ns) = NetnsPair::new("emupg") else {
        return;
    };
    let dir = tempdir("emupg");
    let stats = dir.join("tx.stats");
    const N: u64 = 100_000;
    pktgen_to_kernel_socket(
        &ns,
        "verbs",
        N,
        |args| emu_in(&ns.a, &ns.veth_a, &[], args, &stats),
        |_| {},
    );
    assert_eq!(counter(&stats, "tx_frames"), Some(N));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Compiles `crates/emu/tests/NAME.c` against libibverbs (+ libmlx5).
fn compile_c(name: &str) -> std::path::PathBuf {
    let root = support::repo_root();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let src = root.join("crates/emu/tests").join(format!("{name}.c"));
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .args(["-libverbs", "-lmlx5"])
        .output()
        .expect("run cc (install build-essential)");
    assert!(
        o.status.success(),
        "cc {} (install libibverbs-dev):\n{}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn a_flow_goes_to_the_application_while_ping_and_tcp_reach_the_tap_netdev() {
    let _one = serial();
    use std::io::BufRead;

    let Some(ns) = NetnsPair::new("emubif") else {
        return;
    };
    // The port's kernel netdev (a TAP) in a namespace of its own.
    let (tap_ns, tap, ip_tap) = tap_rig(&ns, "rqbif");
    let dir = tempdir("emubif");
    let stats = dir.join("rx.stats");
    let exe = compile_c("flow_rx");
    let mut app = emu_in(
        &ns.a,
        &ns.veth_a,
        &["--netdev", &tap],
        &[exe.to_str().unwrap(), "6"],
        &stats,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start flow_rx");
    let mut lines = std::io::BufReader::new(app.stdout.take().unwrap()).lines();
    assert_eq!(
        lines.next().and_then(|l| l.ok()).as_deref(),
        Some("ready"),
        "flow_rx did not start"
    );
    // ping and TCP to the TAP's address reach its kernel.
    let data: Vec<u8> = (0..512 * 1024u32)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    let addr = tap_answers_ping_and_tcp(&ns, &tap, &tap_ns.0, &ip_tap, data);

    // UDP to port 9000: the flow rule takes it to the application.
    const N: usize = 1000;
    ns.run_in(&ns.b, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        for i in 0..N {
            s.send_to(&(i as u32).to_be_bytes(), (addr, 9000)).unwrap();
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let out = wait_for(app, Duration::from_secs(30));
    let received = lines
        .map_while(Result::ok)
        .chain(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(String::from),
        )
        .find_map(|l| {
            l.strip_prefix("received ")
                .and_then(|n| n.parse::<usize>().ok())
        });
    assert_eq!(received, Some(N), "flow_rx:\n{}", text(&out));
    assert!(
        counter(&stats, "rx_to_kernel").unwrap_or(0) >= 5,
        "ping went to the TAP"
    );
    assert!(
        counter(&stats, "netdev_tx").unwrap_or(0) >= 5,
        "replies from the TAP"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
