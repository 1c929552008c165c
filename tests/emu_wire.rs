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

/// One test of this file at a time: each runs two busy-polling programs and device models, and
/// the machine may have two cores; rates are chosen for one test running.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

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
        .env_remove("RAWQ_EMU_LIB")
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

/// Compiles `emu/tests/NAME.c` against libibverbs (+ libmlx5).
fn compile_c(name: &str) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let src = root.join("emu/tests").join(format!("{name}.c"));
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

/// A third namespace, removed on drop.
struct ExtraNs(String);

impl Drop for ExtraNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip_ok(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("ip");
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_flow_goes_to_the_application_while_ping_and_tcp_reach_the_tap_netdev() {
    let _one = serial();
    use std::io::{BufRead, Read, Write};
    use std::net::{TcpListener, TcpStream};

    let Some(ns) = NetnsPair::new("emubif") else {
        return;
    };
    // The port's kernel netdev (a TAP) lives in a namespace of its own, so that the wire's
    // namespace has no address and every frame goes through the emulated port.
    let tap_ns = ExtraNs(format!("{}-tap", ns.a));
    ip_ok(&["netns", "add", &tap_ns.0]);
    ip_ok(&["-n", &ns.a, "addr", "flush", "dev", &ns.veth_a]);
    // veth hands frames over with checksums left to "the NIC" (CHECKSUM_PARTIAL); the
    // AF_PACKET wire would carry them unfinished, and the TAP's kernel would drop TCP. A real
    // wire carries finished checksums: have host B's kernel compute them.
    let eth = ns.exec(&ns.b, &["ethtool", "-K", &ns.veth_b, "tx", "off"]);
    assert!(eth.status.success(), "ethtool -K tx off (install ethtool)");
    let tap = format!("rqbif{}", std::process::id() % 100_000);
    let ip_tap = format!("{}.3", ns.ip_b.rsplit_once('.').unwrap().0);
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
    ip_ok(&["-n", &ns.a, "link", "set", &tap, "netns", &tap_ns.0]);
    ip_ok(&[
        "-n",
        &tap_ns.0,
        "addr",
        "add",
        &format!("{ip_tap}/24"),
        "dev",
        &tap,
    ]);
    ip_ok(&["-n", &tap_ns.0, "link", "set", &tap, "up"]);

    // ping and ARP: no rule takes them, so the TAP's kernel answers across the wire.
    let ping = ns.exec(&ns.b, &["ping", "-c", "5", "-i", "0.2", "-W", "2", &ip_tap]);
    let ping_out = String::from_utf8_lossy(&ping.stdout).into_owned();
    assert!(ping_out.contains(" 0% packet loss"), "{ping_out}");

    // TCP to the TAP's address: byte-exact.
    let addr: Ipv4Addr = ip_tap.parse().unwrap();
    let listener = ns
        .run_in(&tap_ns.0, move || TcpListener::bind((addr, 5001)))
        .expect("listen in the TAP's namespace");
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept()?;
        let mut v = Vec::new();
        s.read_to_end(&mut v)?;
        Ok::<_, std::io::Error>(v)
    });
    let data: Vec<u8> = (0..512 * 1024u32)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    let sent = data.clone();
    ns.run_in(&ns.b, move || -> std::io::Result<()> {
        let mut s = TcpStream::connect_timeout(&(addr, 5001).into(), Duration::from_secs(5))?;
        s.write_all(&sent)?;
        s.shutdown(std::net::Shutdown::Write)
    })
    .expect("TCP client");
    let got = server.join().unwrap().expect("TCP server");
    assert!(
        got == data,
        "TCP stream differs ({} of {} bytes)",
        got.len(),
        data.len()
    );

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
