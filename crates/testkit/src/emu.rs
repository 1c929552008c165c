//! Helpers shared by the tests that run programs on the emulated NIC (`scripts/emu.sh`):
//! output text, scratch directories, extra namespaces, waiting for children, and the
//! TAP/ping/TCP/UDP checks of the bifurcated port.

use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::NetnsPair;

/// One test at a time: each runs busy-polling programs and device models, and the machine may
/// have two cores; rates are chosen for one test running. (Each test binary has its own copy of
/// this lock, shared by all the modules of that binary.)
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `[ip netns exec NS] [timeout SECS] bash scripts/emu.sh [--wire IF] OPTS -- CMD...` from the
/// crate root, without the caller's `LD_PRELOAD`, `RAWQ_EMU_LIB` or `RAWQ_EMU_TX_ERROR`, the
/// device model's counters kept in `stats`. `ns` is (namespace, wire interface); with
/// `timeout_secs`, `timeout` sends SIGTERM past it, on which emu.sh stops the command and
/// cleans up.
pub fn emu_sh(
    ns: Option<(&str, &str)>,
    timeout_secs: Option<u32>,
    opts: &[&str],
    cmd: &[&str],
    stats: &Path,
) -> Command {
    let root = crate::repo_root();
    let mut argv: Vec<String> = Vec::new();
    if let Some((ns, _)) = ns {
        argv.extend(["ip", "netns", "exec", ns].map(String::from));
    }
    if let Some(secs) = timeout_secs {
        argv.extend(["timeout".to_owned(), secs.to_string()]);
    }
    argv.push("bash".to_owned());
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]).arg(root.join("scripts/emu.sh"));
    if let Some((_, wire)) = ns {
        c.args(["--wire", wire]);
    }
    c.args(opts)
        .arg("--")
        .args(cmd)
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .env_remove("RAWQ_EMU_TX_ERROR")
        .env("RAWQ_EMU_STATS", stats);
    c
}

/// Sends SIGTERM to the program named `name` (its `comm`: `rawq-pktgen`, `rawq-fwd`) that
/// runs below `root` (a launcher: `ip netns exec`, `timeout`, emu.sh), so that it ends as on a
/// signal from a terminal, with its summary and its own exit status, which emu.sh then exits
/// with (a signal to emu.sh itself, or to `timeout`, which passes it on, makes that 143).
/// Whether the program was found (a program that has ended already is not).
pub fn term_command(root: u32, name: &str) -> bool {
    let Some(pid) = crate::procs::descendant(root, name) else {
        return false;
    };
    // SAFETY: kill(2) on a process below a child of ours that has not been reaped.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) == 0 }
}

/// A counter of the device model (`RAWQ_EMU_STATS` file): its first report.
pub fn counter(stats: &Path, field: &str) -> Option<u64> {
    counter_in(stats, field, false)
}

/// The emulator's frame source (`RAWQ_EMU_RXGEN`) in the stats file: its last
/// `rawq-emu rxgen: { generated: N, count: M, done: B }` line as (N, B).
pub fn rxgen(stats: &Path) -> Option<(u64, bool)> {
    let t = std::fs::read_to_string(stats).ok()?;
    let line = t.lines().rev().find(|l| l.starts_with("rawq-emu rxgen:"))?;
    let field = |k: &str| {
        let at = line.find(&format!(" {k}: "))? + k.len() + 3;
        line[at..].split([',', ' ', '}']).next().map(str::to_owned)
    };
    Some((field("generated")?.parse().ok()?, field("done")? == "true"))
}

/// A counter of the device model (`RAWQ_EMU_STATS` file): its last report.
pub fn last_counter(stats: &Path, field: &str) -> Option<u64> {
    counter_in(stats, field, true)
}

fn counter_in(stats: &Path, field: &str, last: bool) -> Option<u64> {
    let text = std::fs::read_to_string(stats).ok()?;
    let key = format!(" {field}: ");
    let at = if last {
        text.rfind(&key)?
    } else {
        text.find(&key)?
    } + field.len()
        + 3;
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A child's stdout and stderr, for messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `$TMPDIR/rawq-TAG-PID`, created.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rawq-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

pub use super::mac_text;

/// Runs `ip ARGS` and fails the test when it fails.
pub fn ip_ok(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("ip");
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A third namespace, removed on drop.
pub struct ExtraNs(pub String);

impl Drop for ExtraNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Waits for `child` up to `limit`; kills it (by its pid) past that, what it was doing then
/// ([`procs::hang_report`](super::procs::hang_report)) added after its stderr.
pub fn wait_for(mut child: Child, limit: Duration) -> Output {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if child.try_wait().ok().flatten().is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // What it (and every process below it) was doing, said after its stderr.
    let report = super::procs::hang_report(&[child.id()]);
    let _ = child.kill();
    let mut o = child.wait_with_output().expect("output");
    o.stderr.extend_from_slice(
        format!(
            "\n--- rawq-testkit: still running after {} s; killed. What it was doing then:\n{report}",
            limit.as_secs()
        )
        .as_bytes(),
    );
    o
}

/// Sets `SO_RCVBUFFORCE` on `s` (we are root in these tests).
pub fn set_rcvbuf(s: &UdpSocket, bytes: i32) {
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

/// The arguments of the example pktgen (`-b BACKEND`) for `count` 60-byte frames at 50000/s
/// from a to b's UDP port 9000 (b's MAC as the destination).
fn pktgen_to_b(ns: &NetnsPair, backend: &str, count: u64) -> Vec<String> {
    let pktgen = super::example("pktgen");
    let mac_b = mac_text(ns.mac(&ns.b, &ns.veth_b));
    [
        pktgen.to_str().unwrap(),
        "-b",
        backend,
        "-d",
        "mlx5_0",
        "-n",
        &count.to_string(),
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
    ]
    .map(String::from)
    .to_vec()
}

/// A kernel UDP socket on `ns.ip_b:9000` in namespace b (8 MiB receive buffer) and a thread
/// counting the 18-byte datagrams it receives until it has `count`, or until `sent` is set (the
/// sender has ended) and then 500 ms pass without one. (It used to stop at the first 500 ms
/// without a datagram, counted from its own start: under load emu.sh's start-up and pktgen's
/// took longer than that, and it counted 0 of 100000.)
fn udp_counter_in_b(
    ns: &NetnsPair,
    count: u64,
    sent: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let ip_b: Ipv4Addr = ns.ip_b.parse().unwrap();
    let sock = ns
        .run_in(&ns.b, move || {
            let s = UdpSocket::bind((ip_b, 9000))?;
            set_rcvbuf(&s, 8 << 20);
            Ok::<_, std::io::Error>(s)
        })
        .expect("bind in b");
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut n = 0u64;
        let mut quiet_since: Option<Instant> = None;
        while n < count {
            match sock.recv(&mut buf) {
                Ok(len) => {
                    n += u64::from(len == 18);
                    quiet_since = None;
                }
                Err(_) if sent.load(Ordering::Acquire) => {
                    let q = *quiet_since.get_or_insert_with(Instant::now);
                    if q.elapsed() >= Duration::from_millis(500) {
                        break;
                    }
                }
                Err(_) => {}
            }
        }
        n
    })
}

/// Runs the example pktgen (`-b BACKEND`, `count` frames to b's UDP port 9000, see
/// `pktgen_to_b`) through `run` (emu.sh in namespace a), a kernel UDP socket in b counting
/// what arrives; `check` looks at pktgen's output once it succeeded. The kernel judges every
/// frame (IPv4 and UDP checksums included) and must deliver all. Returns pktgen's output.
pub fn pktgen_to_kernel_socket(
    ns: &NetnsPair,
    backend: &str,
    count: u64,
    run: impl FnOnce(&[&str]) -> Command,
    check: impl FnOnce(&Output),
) -> Output {
    let sent = Arc::new(AtomicBool::new(false));
    let counter_thread = udp_counter_in_b(ns, count, sent.clone());
    let args = pktgen_to_b(ns, backend, count);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args).output();
    sent.store(true, Ordering::Release);
    let out = out.expect("run pktgen");
    assert!(out.status.success(), "pktgen:\n{}", text(&out));
    check(&out);
    let got = counter_thread.join().unwrap();
    assert_eq!(got, count, "pktgen:\n{}", text(&out));
    out
}

/// The bifurcated port's setup: its kernel netdev (a TAP named `TAG` + pid, to be made by
/// emu.sh in namespace a) gets a namespace of its own (returned, removed on drop), so that the
/// wire's namespace has no address and every frame goes through the emulated port. Returns
/// (that namespace, the TAP's name, its address on b's subnet).
pub fn tap_rig(ns: &NetnsPair, tag: &str) -> (ExtraNs, String, String) {
    let tap_ns = ExtraNs(format!("{}-tap", ns.a));
    ip_ok(&["netns", "add", &tap_ns.0]);
    ip_ok(&["-n", &ns.a, "addr", "flush", "dev", &ns.veth_a]);
    // veth hands frames over with checksums left to "the NIC" (CHECKSUM_PARTIAL); the
    // AF_PACKET wire would carry them unfinished, and the TAP's kernel would drop TCP. A real
    // wire carries finished checksums: have host B's kernel compute them.
    let eth = ns.exec(&ns.b, &["ethtool", "-K", &ns.veth_b, "tx", "off"]);
    assert!(eth.status.success(), "ethtool -K tx off (install ethtool)");
    let tap = format!("{tag}{}", std::process::id() % 100_000);
    let ip_tap = format!("{}.3", ns.ip_b.rsplit_once('.').unwrap().0);
    (tap_ns, tap, ip_tap)
}

/// The bifurcated port's kernel side: moves the emulator's TAP `tap` from namespace a into
/// `tap_ns` with `ip_tap/24`; ping and ARP from b (no rule takes them, so the TAP's kernel
/// answers across the wire) lose nothing, and `data` sent over TCP from b to the TAP's address
/// arrives byte-exact. Returns that address.
pub fn tap_answers_ping_and_tcp(
    ns: &NetnsPair,
    tap: &str,
    tap_ns: &str,
    ip_tap: &str,
    data: Vec<u8>,
) -> Ipv4Addr {
    tap_into(ns, tap, tap_ns, ip_tap);
    ping_from_b_loses_nothing(ns, ip_tap);
    let addr: Ipv4Addr = ip_tap.parse().unwrap();
    tcp_from_b_byte_exact(ns, tap_ns, addr, data);
    addr
}

fn tap_into(ns: &NetnsPair, tap: &str, tap_ns: &str, ip_tap: &str) {
    ip_ok(&["-n", &ns.a, "link", "set", tap, "netns", tap_ns]);
    ip_ok(&[
        "-n",
        tap_ns,
        "addr",
        "add",
        &format!("{ip_tap}/24"),
        "dev",
        tap,
    ]);
    ip_ok(&["-n", tap_ns, "link", "set", tap, "up"]);
}

/// Five pings from namespace b to `ip`: none may be lost.
fn ping_from_b_loses_nothing(ns: &NetnsPair, ip: &str) {
    let ping = ns.exec(&ns.b, &["ping", "-c", "5", "-i", "0.2", "-W", "2", ip]);
    let ping_out = String::from_utf8_lossy(&ping.stdout).into_owned();
    assert!(ping_out.contains(" 0% packet loss"), "{ping_out}");
}

/// Sends `data` over TCP from namespace b to `addr:5001`, listened on in `server_ns`; the
/// stream received must be byte-exact.
fn tcp_from_b_byte_exact(ns: &NetnsPair, server_ns: &str, addr: Ipv4Addr, data: Vec<u8>) {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let listener = ns
        .run_in(server_ns, move || TcpListener::bind((addr, 5001)))
        .expect("listen in the TAP's namespace");
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept()?;
        let mut v = Vec::new();
        s.read_to_end(&mut v)?;
        Ok::<_, std::io::Error>(v)
    });
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
}
