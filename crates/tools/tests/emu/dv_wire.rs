//! rawq's DV backend on the emulated ConnectX on the wire: the `pktgen` / `fwd` examples
//! (`cargo build --all-features -p rawq-tools` first) run under `emu.sh --wire` in a network
//! namespace, with the kernel on the far end of a veth as the judge.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::emu::{
    emu_sh, last_counter, mac_text, pktgen_to_kernel_socket, serial, tempdir, text, ExtraNs,
};
use support::NetnsPair;

fn emu_in(ns: &str, wire: &str, opts: &[&str], cmd: &[&str], stats: &Path) -> Command {
    emu_sh(Some((ns, wire)), Some(120), opts, cmd, stats)
}

#[test]
fn pktgen_dv_sends_1e5_frames_through_the_wire_to_a_kernel_socket() {
    let _one = serial();
    let Some(ns) = NetnsPair::new("emudvtx") else {
        return;
    };
    let dir = tempdir("emudvtx");
    let stats = dir.join("tx.stats");
    const COUNT: u64 = 100_000;
    pktgen_to_kernel_socket(
        &ns,
        "dv",
        COUNT,
        |args| emu_in(&ns.a, &ns.veth_a, &[], args, &stats),
        |out| assert!(text(out).contains("pktgen: dv on mlx5_0"), "{}", text(out)),
    );
    assert_eq!(last_counter(&stats, "tx_frames"), Some(COUNT));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits (bounded) until `file` contains `what`, or `child` ended.
fn wait_text(file: &Path, what: &str, child: &mut std::process::Child, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if std::fs::read_to_string(file).is_ok_and(|t| t.contains(what)) {
            return true;
        }
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Waits for `child` up to `limit`; past that it is sent SIGTERM (emu.sh then stops its
/// command and cleans up).
fn finish(mut child: std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(s) = child.try_wait().ok().flatten() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill(2) on the pid of a child we started and have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().expect("wait")
}

/// Receives one TCP connection on `listener` and reads it to the end; gives up at `limit`
/// (so that a client which never connects fails the test instead of hanging it).
fn tcp_read_all(listener: std::net::TcpListener, limit: Duration) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let end = Instant::now() + limit;
    listener.set_nonblocking(true)?;
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e),
        }
    };
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(
        end.saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ))?;
    let mut v = Vec::new();
    s.read_to_end(&mut v)?;
    Ok(v)
}

/// pktgen `-b dv --rx` with a UDP rule counts exactly the steered frames, while ping to the
/// port's kernel netdev (a TAP holding the host's address) loses nothing, a TCP transfer to it
/// running alongside the steered flow arrives byte-exact, and other UDP goes to that kernel:
/// the bifurcated port.
#[test]
fn pktgen_dv_rx_counts_steered_frames_while_ping_reaches_the_tap() {
    let _one = serial();
    let Some(ns) = NetnsPair::new("emudvrx") else {
        return;
    };
    // The port's kernel netdev (a TAP) lives in a namespace of its own, so that the wire's
    // namespace has no address and host A's kernel cannot answer straight off the veth: every
    // reply, ping's and TCP's, crosses the emulated port.
    let tap_ns = ExtraNs(format!("{}-tap", ns.a));
    let add = Command::new("ip")
        .args(["netns", "add", &tap_ns.0])
        .status()
        .expect("ip");
    assert!(add.success(), "ip netns add {}", tap_ns.0);
    // veth hands frames over with checksums left to "the NIC" (CHECKSUM_PARTIAL); the
    // AF_PACKET wire would carry them unfinished and the TAP's kernel would drop TCP. A real
    // wire carries finished checksums: have host B's kernel compute them (as tests/emu/wire.rs).
    let eth = ns.exec(&ns.b, &["ethtool", "-K", &ns.veth_b, "tx", "off"]);
    assert!(eth.status.success(), "ethtool -K tx off (install ethtool)");
    let dir = tempdir("emudvrx");
    let (stats, err, out) = (
        dir.join("rx.stats"),
        dir.join("rx.err"),
        dir.join("rx.json"),
    );
    // Host A's address moves to the port's TAP: every frame crosses the emulated port.
    let flush = Command::new("ip")
        .args(["-n", &ns.a, "addr", "flush", "dev", &ns.veth_a])
        .status()
        .expect("ip");
    assert!(flush.success());
    let tap = format!("rqdvx{}", std::process::id() % 100_000);
    let pktgen = support::example("pktgen");
    let mut rx = emu_in(
        &ns.a,
        &ns.veth_a,
        &["--netdev", &tap],
        &[
            pktgen.to_str().unwrap(),
            "-b",
            "dv",
            "-d",
            "mlx5_0",
            "--rx",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            // More buffers than frames sent: a queue thread scheduled late on a loaded host
            // still finds every frame posted (the port drops on an empty RQ, as hardware does).
            "--ring",
            "8192",
            "-t",
            "12",
            "--quiet",
            "--json",
        ],
        &stats,
    )
    .stdout(std::fs::File::create(&out).unwrap())
    .stderr(std::fs::File::create(&err).unwrap())
    .spawn()
    .expect("start pktgen --rx");
    let ready = wait_text(&err, "pktgen: dv on", &mut rx, Duration::from_secs(60));
    assert!(
        ready,
        "pktgen did not open the port:\n{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    let ip_tap = ns.ip_a.clone();
    for args in [
        vec!["-n", &ns.a, "link", "set", &tap, "netns", &tap_ns.0],
        vec![
            "-n",
            &tap_ns.0,
            "addr",
            "add",
            &format!("{ip_tap}/24"),
            "dev",
            &tap,
        ],
        vec!["-n", &tap_ns.0, "link", "set", &tap, "up"],
    ] {
        let o = Command::new("ip").args(&args).output().expect("ip");
        assert!(o.status.success(), "ip {args:?}: {}", text(&o));
    }
    let ping = ns.exec(
        &ns.b,
        &["ping", "-c", "10", "-i", "0.2", "-W", "2", &ip_tap],
    );
    let ping_out = String::from_utf8_lossy(&ping.stdout).into_owned();
    // UDP to 9000 (steered to rawq) and to 9001 (no rule: the TAP's kernel).
    const STEERED: u64 = 3000;
    const OTHER: u64 = 200;
    let addr: Ipv4Addr = ip_tap.parse().unwrap();
    // TCP to the TAP's address, concurrently with the steered flow: byte-exact.
    let listener = ns
        .run_in(&tap_ns.0, move || std::net::TcpListener::bind((addr, 5001)))
        .expect("listen in the TAP's namespace");
    let server = std::thread::spawn(move || tcp_read_all(listener, Duration::from_secs(30)));
    let data: Vec<u8> = (0..256 * 1024u32)
        .map(|i| (i * 13 + i / 241) as u8)
        .collect();
    let sent = data.clone();
    let b_path = format!("/var/run/netns/{}", ns.b);
    let (connected_tx, connected) = std::sync::mpsc::channel();
    let client = std::thread::spawn(move || -> std::io::Result<()> {
        use std::io::Write;
        support::enter_netns(&b_path);
        let mut s =
            std::net::TcpStream::connect_timeout(&(addr, 5001).into(), Duration::from_secs(5))?;
        let _ = connected_tx.send(());
        s.set_write_timeout(Some(Duration::from_secs(30)))?;
        s.write_all(&sent)?;
        s.shutdown(std::net::Shutdown::Write)
    });
    // The steered flow starts once the connection is up, so that the stream overlaps it (a
    // failed connect shows in the client's result below).
    let _ = connected.recv_timeout(Duration::from_secs(10));
    ns.run_in(&ns.b, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        for i in 0..STEERED {
            s.send_to(&(i as u32).to_be_bytes(), (addr, 9000)).unwrap();
            if i < OTHER {
                s.send_to(&(i as u32).to_be_bytes(), (addr, 9001)).unwrap();
            }
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let tcp_client = client.join().unwrap();
    let got = server.join().unwrap();
    // pktgen ends once the port has delivered every steered frame to its queue (the model's
    // counters, rewritten twice a second): SIGTERM to pktgen itself (below emu.sh), on which
    // it counts what its queue still holds; not at its `-t`, which bounds a failed test.
    let end = Instant::now() + Duration::from_secs(20);
    while last_counter(&stats, "rx_frames").unwrap_or(0) < STEERED && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    support::emu::term_command(rx.id(), "rawq-pktgen");
    let status = finish(rx, Duration::from_secs(40));
    let o = std::fs::read_to_string(&out).unwrap_or_default();
    let e = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(status.success(), "pktgen:\n{o}\n{e}");
    assert!(ping_out.contains(" 0% packet loss"), "{ping_out}");
    tcp_client.expect("TCP client");
    let got = got.expect("TCP server");
    assert!(
        got == data,
        "TCP stream differs ({} of {} bytes)",
        got.len(),
        data.len()
    );
    let packets = o
        .split("\"packets\":")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(
        packets,
        Some(STEERED),
        "exactly the steered frames:\n{o}\n{e}\n{}",
        std::fs::read_to_string(&stats).unwrap_or_default()
    );
    // The rest (ping, ARP, TCP, UDP to 9001) went to the kernel netdev, and its replies out.
    assert!(
        last_counter(&stats, "rx_to_kernel").unwrap_or(0) >= 10 + OTHER,
        "{}",
        std::fs::read_to_string(&stats).unwrap_or_default()
    );
    assert!(
        last_counter(&stats, "netdev_tx").unwrap_or(0) >= 10,
        "replies from the TAP:\n{}",
        std::fs::read_to_string(&stats).unwrap_or_default()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fwd -b dv --mode macswap` on the emulated port reflects every frame back across the wire.
#[test]
fn fwd_dv_macswap_reflects_every_frame() {
    let _one = serial();
    let Some(ns) = NetnsPair::new("emudvfw") else {
        return;
    };
    let dir = tempdir("emudvfw");
    let (stats, err) = (dir.join("fwd.stats"), dir.join("fwd.err"));
    // A's kernel stays out of it (no address, no IPv6 chatter); B reaches A's MAC by a
    // static neighbour.
    for args in [
        vec!["-n", &ns.a, "addr", "flush", "dev", &ns.veth_a],
        vec!["-n", &ns.a, "link", "set", &ns.veth_a, "arp", "off"],
    ] {
        let o = Command::new("ip").args(&args).output().expect("ip");
        assert!(o.status.success(), "ip {args:?}: {}", text(&o));
    }
    for n in [&ns.a, &ns.b] {
        let _ = ns.exec(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
    }
    let mac_a = mac_text(ns.mac(&ns.a, &ns.veth_a));
    let o = Command::new("ip")
        .args([
            "-n", &ns.b, "neigh", "replace", &ns.ip_a, "lladdr", &mac_a, "dev", &ns.veth_b,
        ])
        .output()
        .expect("ip");
    assert!(o.status.success(), "{}", text(&o));
    let fwd = support::example("fwd");
    let mut child = emu_in(
        &ns.a,
        &ns.veth_a,
        &[],
        &[
            fwd.to_str().unwrap(),
            "-b",
            "dv",
            "-d",
            "mlx5_0",
            "--mode",
            "macswap",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "-t",
            "10",
        ],
        &stats,
    )
    .stdout(std::fs::File::create(dir.join("fwd.out")).unwrap())
    .stderr(std::fs::File::create(&err).unwrap())
    .spawn()
    .expect("start fwd");
    let ready = wait_text(&err, "fwd: mlx5_0 (dv", &mut child, Duration::from_secs(60));
    assert!(
        ready,
        "fwd did not open the port:\n{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    std::thread::sleep(Duration::from_millis(300));
    let rx_b = || -> u64 {
        let o = ns.exec(
            &ns.b,
            &[
                "cat",
                &format!("/sys/class/net/{}/statistics/rx_packets", ns.veth_b),
            ],
        );
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let before = rx_b();
    const COUNT: u64 = 3000;
    let addr: Ipv4Addr = ns.ip_a.parse().unwrap();
    ns.run_in(&ns.b, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        for i in 0..COUNT {
            s.send_to(&(i as u32).to_be_bytes(), (addr, 9000)).unwrap();
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    // Reflected frames come back to B's veth (B's kernel then drops them: not its address).
    let end = Instant::now() + Duration::from_secs(10);
    while rx_b() - before < COUNT && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let back = rx_b() - before;
    // Every frame is back (or the wait gave up): fwd ends on SIGTERM (to fwd itself, below
    // emu.sh), not at its `-t`, which bounds a failed test.
    support::emu::term_command(child.id(), "rawq-fwd");
    let status = finish(child, Duration::from_secs(30));
    let e = std::fs::read_to_string(&err).unwrap_or_default()
        + &std::fs::read_to_string(dir.join("fwd.out")).unwrap_or_default();
    assert!(status.success(), "fwd:\n{e}");
    assert_eq!(back, COUNT, "every frame reflected:\n{e}");
    assert!(e.contains(&format!("fwd: forwarded {COUNT}")), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
