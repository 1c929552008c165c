//! Jumbo frames on the emulated ConnectX (issue 22 item 3): 9000-byte frames across MTU-9000
//! veths with `-b dv` and `-b verbs` (`emu.sh --mtu`): pktgen's reach a kernel socket intact (the
//! kernel checks the UDP checksum), `pktgen --rx --mtu 9000` (2 KiB buffers: every frame
//! scattered over five of them) counts each once with its length, and a port of a smaller MTU
//! drops them, counted. `cargo build --all-features -p rawq-tools` first.
#![cfg(all(feature = "mlx5", feature = "verbs"))]

use rawq_testkit as support;

use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::emu::{emu_sh, last_counter, serial, set_rcvbuf, tempdir, term_command, text};
use support::NetnsPair;

/// UDP payload of a 9000-byte frame (Ethernet 14, IPv4 20, UDP 8).
const PAYLOAD: usize = 9000 - 42;

/// A pair whose veths carry 9000-byte MTUs.
fn jumbo_pair(tag: &str) -> Option<NetnsPair> {
    let ns = NetnsPair::new(tag)?;
    for (n, dev) in [(&ns.a, &ns.veth_a), (&ns.b, &ns.veth_b)] {
        ns.ip_in(n, &["link", "set", "dev", dev, "mtu", "9000"])
            .expect("set the veth MTU");
    }
    for n in [&ns.a, &ns.b] {
        let _ = ns.exec(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
    }
    Some(ns)
}

fn pktgen_tx_jumbo_to_a_kernel_socket(backend: &str, tag: &str) {
    let _one = serial();
    let Some(ns) = jumbo_pair(tag) else {
        return;
    };
    let dir = tempdir(tag);
    let stats = dir.join("tx.stats");
    const COUNT: u64 = 200;
    let ip_b: Ipv4Addr = ns.ip_b.parse().unwrap();
    let sock = ns
        .run_in(&ns.b, move || {
            let s = UdpSocket::bind((ip_b, 9000))?;
            set_rcvbuf(&s, 8 << 20);
            Ok::<_, std::io::Error>(s)
        })
        .expect("bind in b");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let pktgen = support::example("pktgen");
    let mac_b = ns.mac_text(&ns.b, &ns.veth_b);
    let out = emu_sh(
        Some((&ns.a, &ns.veth_a)),
        Some(120),
        &["--mtu", "9000"],
        &[
            pktgen.to_str().unwrap(),
            "-b",
            backend,
            "-d",
            "mlx5_0",
            "-n",
            &COUNT.to_string(),
            "-r",
            "2000",
            "-s",
            "9000",
            "--dst-mac",
            &mac_b,
            "--src-ip",
            &ns.ip_a,
            "--dst-ip",
            &ns.ip_b,
            "--dst-port",
            "9000",
            "--mtu",
            "9000",
        ],
        &stats,
    )
    .output()
    .expect("run pktgen");
    assert!(out.status.success(), "pktgen:\n{}", text(&out));
    let mut buf = vec![0u8; 65536];
    let (mut n, mut other) = (0u64, 0u64);
    let end = Instant::now() + Duration::from_secs(10);
    while n < COUNT && Instant::now() < end {
        match sock.recv(&mut buf) {
            Ok(len) if len == PAYLOAD => n += 1,
            Ok(_) => other += 1,
            Err(_) => {}
        }
    }
    assert_eq!(
        (n, other),
        (COUNT, 0),
        "9000-byte frames whole at the kernel socket\n{}",
        text(&out)
    );
    assert_eq!(last_counter(&stats, "tx_frames"), Some(COUNT));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pktgen_dv_sends_9000_byte_frames_to_a_kernel_socket() {
    pktgen_tx_jumbo_to_a_kernel_socket("dv", "emujtd");
}

#[test]
fn pktgen_verbs_sends_9000_byte_frames_to_a_kernel_socket() {
    pktgen_tx_jumbo_to_a_kernel_socket("verbs", "emujtv");
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

/// A JSON number field of pktgen's summary.
fn field(json: &str, name: &str) -> Option<u64> {
    json.split(&format!("\"{name}\":"))
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// `pktgen -b BACKEND --rx [--mtu PORT_MTU]` under `emu.sh --mtu EMU_MTU` in a; b's kernel sends
/// `jumbo` 9000-byte frames and `small` 100-byte ones to a's UDP port 9000. Returns pktgen's
/// JSON summary and the model's counters file.
fn rx_run(
    backend: &str,
    tag: &str,
    emu_mtu: &str,
    port_mtu: Option<&str>,
    jumbo: u64,
    small: u64,
) -> (String, String, std::path::PathBuf) {
    let Some(ns) = jumbo_pair(tag) else {
        return (String::new(), "skipped".into(), Default::default());
    };
    let dir = tempdir(tag);
    let (stats, err, out) = (
        dir.join("rx.stats"),
        dir.join("rx.err"),
        dir.join("rx.json"),
    );
    let pktgen = support::example("pktgen");
    let mut args = vec![
        pktgen.to_str().unwrap(),
        "-b",
        backend,
        "-d",
        "mlx5_0",
        "--rx",
        "--rule",
        "udp dst-port 9000 -> queue 0",
        "--ring",
        "2048",
        "-t",
        "10",
        "--quiet",
        "--json",
    ];
    if let Some(m) = port_mtu {
        args.extend(["--mtu", m]);
    }
    let pcap = dir.join("rx.pcap");
    let pcap_s = pcap.to_str().unwrap().to_owned();
    args.extend(["--write", &pcap_s]);
    let mut rx = emu_sh(
        Some((&ns.a, &ns.veth_a)),
        Some(120),
        &["--mtu", emu_mtu],
        &args,
        &stats,
    )
    .stdout(std::fs::File::create(&out).unwrap())
    .stderr(std::fs::File::create(&err).unwrap())
    .stdin(Stdio::null())
    .spawn()
    .expect("start pktgen --rx");
    let ready = wait_text(
        &err,
        &format!("pktgen: {backend} on"),
        &mut rx,
        Duration::from_secs(90),
    );
    assert!(
        ready,
        "pktgen did not open the port:\n{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    let a: Ipv4Addr = ns.ip_a.parse().unwrap();
    ns.run_in(&ns.b, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        let big = jumbo_payload();
        for i in 0..jumbo.max(small) {
            if i < jumbo {
                s.send_to(&big, (a, 9000)).unwrap();
            }
            if i < small {
                s.send_to(&[i as u8; 58], (a, 9000)).unwrap();
            }
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    });
    // pktgen ends once the port has taken every frame sent, delivered to the queue or dropped
    // as oversize (the model's counters, rewritten twice a second): SIGTERM to pktgen itself
    // (below emu.sh), on which it counts what its queue still holds; not at its `-t`, which
    // bounds a failed test.
    let taken = || {
        last_counter(&stats, "rx_frames").unwrap_or(0)
            + last_counter(&stats, "rx_oversize").unwrap_or(0)
    };
    let end = Instant::now() + Duration::from_secs(20);
    while taken() < jumbo + small && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    term_command(rx.id(), "rawq-pktgen");
    let end = Instant::now() + Duration::from_secs(60);
    while rx.try_wait().ok().flatten().is_none() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    if rx.try_wait().ok().flatten().is_none() {
        let _ = rx.kill();
    }
    let status = rx.wait().expect("wait pktgen");
    let o = std::fs::read_to_string(&out).unwrap_or_default();
    let e = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(status.success(), "pktgen:\n{o}\n{e}");
    (o, e, stats)
}

/// The UDP payload of every jumbo datagram B sends.
fn jumbo_payload() -> Vec<u8> {
    (0..PAYLOAD).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// The frames of a pcap file written by pktgen --write (native-endian records).
fn pcap_frames(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let word = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]) as usize;
        let (caplen, len) = (word(at + 8), word(at + 12));
        at += 16;
        if at + caplen > b.len() {
            break;
        }
        assert_eq!(caplen, len, "a frame captured whole");
        out.push(b[at..at + caplen].to_vec());
        at += caplen;
    }
    out
}

fn pktgen_rx_counts_each_jumbo_once(backend: &str, tag: &str) {
    let _one = serial();
    const JUMBO: u64 = 300;
    let (o, e, stats) = rx_run(backend, tag, "9000", Some("9000"), JUMBO, 0);
    if e == "skipped" {
        return;
    }
    let model = std::fs::read_to_string(&stats).unwrap_or_default();
    assert_eq!(field(&o, "packets"), Some(JUMBO), "{o}\n{e}\n{model}");
    assert_eq!(field(&o, "bytes"), Some(JUMBO * 9000), "{o}\n{e}");
    assert_eq!(field(&o, "errors"), Some(0), "{o}\n{e}");
    // Each frame, received over 2 KiB buffers as a chain, captured whole: its payload intact.
    let frames = pcap_frames(&stats.with_file_name("rx.pcap"));
    assert_eq!(frames.len() as u64, JUMBO);
    let want = jumbo_payload();
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f.len(), 9000, "frame {i}");
        assert!(f[42..] == want[..], "frame {i}: payload altered");
    }
}

#[test]
fn pktgen_dv_rx_mtu_9000_counts_each_jumbo_frame_once() {
    pktgen_rx_counts_each_jumbo_once("dv", "emujrd");
}

#[test]
fn pktgen_verbs_rx_mtu_9000_counts_each_jumbo_frame_once() {
    pktgen_rx_counts_each_jumbo_once("verbs", "emujrv");
}

/// The emulated port at MTU 1500 behind a 9000-MTU veth: the jumbo frames are dropped by the
/// port and counted (`rx_oversize`), the small ones arrive.
#[test]
fn an_emulated_port_of_mtu_1500_drops_jumbo_frames_counted() {
    let _one = serial();
    const JUMBO: u64 = 50;
    const SMALL: u64 = 50;
    let (o, e, stats) = rx_run("dv", "emujo", "1500", None, JUMBO, SMALL);
    if e == "skipped" {
        return;
    }
    let model = std::fs::read_to_string(&stats).unwrap_or_default();
    assert_eq!(field(&o, "packets"), Some(SMALL), "{o}\n{e}\n{model}");
    assert_eq!(last_counter(&stats, "rx_oversize"), Some(JUMBO), "{model}");
}

/// `fwd -b BACKEND --mtu 9000 --mode 5tswap` on the emulated port (MTU 9000) reflects 9000-byte
/// datagrams from B's kernel: received as chains of 4 KiB buffers (scatter), sent back as one
/// frame each (a gather list), and B's socket gets every payload back byte-exact.
fn fwd_reflects_jumbo(backend: &str, tag: &str) {
    let _one = serial();
    let Some(ns) = jumbo_pair(tag) else {
        return;
    };
    // B's veth leaves the UDP checksum to "the NIC" (CHECKSUM_PARTIAL); reflected as it is,
    // B's kernel would drop it: have B's kernel finish it.
    let eth = ns.exec(&ns.b, &["ethtool", "-K", &ns.veth_b, "tx", "off"]);
    assert!(eth.status.success(), "ethtool -K tx off (install ethtool)");
    let dir = tempdir(tag);
    let (stats, err) = (dir.join("fwd.stats"), dir.join("fwd.err"));
    let fwd = support::example("fwd");
    let mut child = emu_sh(
        Some((&ns.a, &ns.veth_a)),
        Some(120),
        &["--mtu", "9000"],
        &[
            fwd.to_str().unwrap(),
            "-b",
            backend,
            "-d",
            "mlx5_0",
            "--mode",
            "5tswap",
            "--mtu",
            "9000",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "-t",
            "12",
            "--quiet",
        ],
        &stats,
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&err).unwrap())
    .stdin(Stdio::null())
    .spawn()
    .expect("start fwd");
    let ready = wait_text(&err, "fwd: mlx5_0 (", &mut child, Duration::from_secs(90));
    assert!(
        ready,
        "fwd did not open the port:\n{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    const N: usize = 30;
    let (a, b): (Ipv4Addr, Ipv4Addr) = (ns.ip_a.parse().unwrap(), ns.ip_b.parse().unwrap());
    let got = ns.run_in(&ns.b, move || {
        let s = UdpSocket::bind((b, 7001)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = vec![0u8; 65536];
        let mut ok = 0;
        for i in 0..N {
            let p: Vec<u8> = (0..PAYLOAD).map(|k| (k * 7 + i * 13) as u8).collect();
            s.send_to(&p, (a, 9000)).unwrap();
            let end = Instant::now() + Duration::from_secs(3);
            while Instant::now() < end {
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    if from.port() == 9000 && buf[..n] == p[..] {
                        ok += 1;
                        break;
                    }
                }
            }
        }
        ok
    });
    // Every datagram is back (or given up on): fwd ends on SIGTERM (to fwd itself, below
    // emu.sh), not at its `-t`, which bounds a failed test.
    term_command(child.id(), "rawq-fwd");
    let status = child.wait().expect("wait fwd");
    let e = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(status.success(), "fwd:\n{e}");
    assert_eq!(
        got,
        N,
        "every jumbo datagram reflected byte-exact\nfwd:\n{e}\n{}",
        std::fs::read_to_string(&stats).unwrap_or_default()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fwd_dv_mtu_9000_forwards_jumbo_chains() {
    fwd_reflects_jumbo("dv", "emujfd");
}

#[test]
fn fwd_verbs_mtu_9000_forwards_jumbo_chains() {
    fwd_reflects_jumbo("verbs", "emujfv");
}
