//! The emulated ConnectX on a real wire: each namespace of a veth pair runs a program under
//! `scripts/emu.sh --wire <its veth end>`, so unmodified libibverbs + libmlx5 drive rawq's device
//! model, whose port is that veth end. Peer tools and the kernel are the judges.
#![cfg(feature = "mlx5")]

mod support;

use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::NetnsPair;

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `ip netns exec NS bash scripts/emu.sh --wire IF [opts] -- cmd...`.
fn emu_in(ns: &str, wire: &str, opts: &[&str], cmd: &[&str], stats: &Path) -> Command {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "bash"])
        .arg(root.join("scripts/emu.sh"))
        .args(["--wire", wire])
        .args(opts)
        .arg("--")
        .args(cmd)
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .env("RAWQ_EMU_STATS", stats);
    c
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

/// Waits for `child` up to `limit`; kills it (by its pid) past that.
fn wait_for(mut child: Child, limit: Duration) -> Output {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if child.try_wait().ok().flatten().is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    child.wait_with_output().expect("output")
}

fn counter(stats: &Path, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(stats).ok()?;
    let at = text.find(&format!(" {field}: "))? + field.len() + 3;
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn perftest_raw_ethernet_bw_across_a_veth_between_two_emulated_nics() {
    need("raw_ethernet_bw");
    let Some(ns) = NetnsPair::new("emubw") else {
        return;
    };
    let dir = tempdir("emubw");
    let (srv_stats, cli_stats) = (dir.join("server.stats"), dir.join("client.stats"));
    let (mac_s, mac_c) = ("02:00:00:00:00:0b", "02:00:00:00:00:0a");
    const N: &str = "10000";
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
            "--rate_limit=5000",
            "--rate_units=p",
            "--rate_limit_type=SW",
        ],
        &cli_stats,
    )
    .output()
    .expect("run the client");
    let server = wait_for(server, Duration::from_secs(30));
    assert!(client.status.success(), "client:\n{}", text(&client));
    assert!(server.status.success(), "server:\n{}", text(&server));
    // perftest's own report: 10000 iterations of 64 bytes on both sides.
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
    assert_eq!(counter(&cli_stats, "tx_frames"), Some(10000));
    assert_eq!(counter(&cli_stats, "tx_error_cqes"), Some(0));
    assert_eq!(counter(&srv_stats, "rx_frames"), Some(10000));
    assert_eq!(counter(&srv_stats, "rx_no_buffer"), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pktgen_verbs_sends_through_libmlx5_to_a_kernel_socket() {
    let Some(ns) = NetnsPair::new("emupg") else {
        return;
    };
    let dir = tempdir("emupg");
    let stats = dir.join("tx.stats");
    let ip_b: Ipv4Addr = ns.ip_b.parse().unwrap();
    let sock = ns
        .run_in(&ns.b, move || {
            let s = UdpSocket::bind((ip_b, 9000))?;
            set_rcvbuf(&s, 8 << 20);
            Ok::<_, std::io::Error>(s)
        })
        .expect("bind in b");
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    const N: u64 = 100_000;
    let counter_thread = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut n = 0u64;
        while let Ok(len) = sock.recv(&mut buf) {
            if len == 18 {
                n += 1;
            }
        }
        n
    });
    let pktgen = support::example("pktgen");
    let mac_b = mac_text(ns.mac(&ns.b, &ns.veth_b));
    let out = emu_in(
        &ns.a,
        &ns.veth_a,
        &[],
        &[
            pktgen.to_str().unwrap(),
            "-b",
            "verbs",
            "-d",
            "mlx5_0",
            "-n",
            &N.to_string(),
            "-r",
            "50000",
            "-s",
            "60",
            "--dst-mac",
            &mac_b,
            "--src-ip",
            &ns.ip_a,
            "--dst-ip",
            &ns.ip_b,
            "--dst-port",
            "9000",
        ],
        &stats,
    )
    .output()
    .expect("run pktgen");
    assert!(out.status.success(), "pktgen:\n{}", text(&out));
    let got = counter_thread.join().unwrap();
    // The kernel judged every frame (IPv4 and UDP checksums included) and delivered all.
    assert_eq!(got, N, "pktgen:\n{}", text(&out));
    assert_eq!(counter(&stats, "tx_frames"), Some(N));
    let _ = std::fs::remove_dir_all(&dir);
}

fn set_rcvbuf(s: &UdpSocket, bytes: i32) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt on a valid socket with a pointer to an int of the right size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        );
    }
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rawq-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
