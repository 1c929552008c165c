//! AF_XDP multi-buffer jumbo frames (issue 22 item 3): a port opened with `mtu(9000)` on an
//! MTU-9000 veth binds `XDP_USE_SG` with a frags-aware steering program; 9000-byte frames sent
//! as chained packets (2 KiB buffers) reach a kernel socket intact, and 9000-byte datagrams from
//! the kernel arrive once each as chained packets, byte-exact. Needs Linux 6.6 or later: older
//! kernels are refused at open with the version named (checked here too).

use rawq_testkit as support;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rawq::{Backend, Packet, Port, Queue};
use support::run::{in_ns, Run};
use support::NetnsPair;

const PAYLOAD: usize = 9000 - 42;

fn kernel_at_least_6_6() -> Option<bool> {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut it = r.trim().split(|c: char| !c.is_ascii_digit());
    let v: (u32, u32) = (it.next()?.parse().ok()?, it.next()?.parse().ok()?);
    Some(v >= (6, 6))
}

fn jumbo_pair(tag: &str) -> Option<NetnsPair> {
    let p = NetnsPair::new(tag)?;
    for (n, dev) in [(&p.a, &p.veth_a), (&p.b, &p.veth_b)] {
        p.ip_in(n, &["link", "set", "dev", dev, "mtu", "9000"])
            .expect("set the veth MTU");
    }
    Some(p)
}

fn open_jumbo(p: &NetnsPair, rule: bool) -> rawq::Result<Port> {
    let dev = p.veth_a.clone();
    p.run_in(&p.a, move || {
        let mut b = Port::builder(Backend::Xdp { ifname: dev })
            .rx_ring(512)
            .tx_ring(512)
            .mtu(9000);
        if rule {
            b = b.rule("udp dst-port 9000 -> queue 0".parse().unwrap());
        }
        b.open()
    })
}

fn csum(b: &[u8], mut s: u32) -> u16 {
    for c in b.chunks(2) {
        s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Ethernet/IPv4/UDP with correct checksums.
fn udp_frame(dst: [u8; 6], src: [u8; 6], sip: [u8; 4], dip: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&sip);
    ip[16..20].copy_from_slice(&dip);
    let c = csum(&ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let ulen = (8 + payload.len()) as u16;
    let mut udp = Vec::new();
    udp.extend_from_slice(&7001u16.to_be_bytes());
    udp.extend_from_slice(&9000u16.to_be_bytes());
    udp.extend_from_slice(&ulen.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&sip);
    pseudo.extend_from_slice(&dip);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&ulen.to_be_bytes());
    let mut sum = 0u32;
    for c in pseudo.chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    let mut c = csum(&udp, sum);
    if c == 0 {
        c = 0xffff;
    }
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&udp);
    f
}

fn payload(i: usize) -> Vec<u8> {
    (0..PAYLOAD).map(|k| (k * 7 + i * 13) as u8).collect()
}

fn chained(q: &mut Queue, bytes: &[u8]) -> Packet {
    let room = (q.pool().buf_size() - q.pool().headroom() as u32) as usize;
    let mut chunks = bytes.chunks(room);
    let mut head = q.pool().alloc().expect("buffer");
    head.copy_from_slice(chunks.next().unwrap()).unwrap();
    for c in chunks {
        let mut s = q.pool().alloc().expect("buffer");
        s.copy_from_slice(c).unwrap();
        head.chain(s).unwrap();
    }
    head
}

fn ip4(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

#[test]
fn xdp_mtu_9000_sends_chained_jumbo_frames_to_a_kernel_socket() {
    let Some(p) = jumbo_pair("xjt") else {
        return;
    };
    match kernel_at_least_6_6() {
        Some(true) => {}
        _ => {
            let e = open_jumbo(&p, false).expect_err("refused before 6.6");
            assert!(e.to_string().contains("6.6"), "{e}");
            println!("skipped: AF_XDP multi-buffer needs Linux 6.6 (refused with: {e})");
            return;
        }
    }
    let ip_b = p.ip_b.clone();
    let sock = p.run_in(&p.b, move || {
        let u = UdpSocket::bind((ip_b.as_str(), 9000)).unwrap();
        u.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // Room for every datagram (each takes about 16 KiB of the buffer).
        let bytes: i32 = 8 << 20;
        use std::os::fd::AsRawFd;
        // SAFETY: setsockopt on a valid socket with a pointer to an int of the right size.
        unsafe {
            libc::setsockopt(
                u.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as u32,
            );
        }
        u
    });
    let mut port = open_jumbo(&p, false).expect("open");
    let pool = port.pool().clone();
    assert!(pool.buf_size() <= 4096);
    let mut q = port.take_queues().remove(0);
    let (mac_a, mac_b) = (p.mac(&p.a, &p.veth_a), p.mac(&p.b, &p.veth_b));
    const N: usize = 20;
    let mut pkts: Vec<Packet> = (0..N)
        .map(|i| {
            let f = udp_frame(mac_b, mac_a, ip4(&p.ip_a), ip4(&p.ip_b), &payload(i));
            assert_eq!(f.len(), 9000);
            chained(&mut q, &f)
        })
        .collect();
    assert!(pkts[0].segment_count() >= 3);
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pkts.is_empty() && Instant::now() < deadline {
        sent += q.tx_burst(&mut pkts);
        q.reclaim();
    }
    assert_eq!(sent, N, "{:?} {:?}", q.stats(), q.take_error());
    let mut buf = vec![0u8; 65536];
    let mut got = vec![false; N];
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.iter().any(|g| !g) && Instant::now() < deadline {
        q.reclaim();
        if let Ok(n) = sock.recv(&mut buf) {
            assert_eq!(n, PAYLOAD);
            let i = (0..N)
                .find(|&i| buf[..n] == payload(i)[..])
                .expect("a payload sent, byte-exact");
            assert!(!got[i], "frame {i} twice");
            got[i] = true;
        }
    }
    assert!(got.iter().all(|&g| g), "every jumbo frame arrives: {got:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while q.stats().tx_packets < N as u64 && Instant::now() < deadline {
        q.reclaim();
    }
    let st = q.stats();
    assert_eq!((st.tx_packets, st.tx_bytes), (N as u64, 9000 * N as u64));
    assert_eq!(st.tx_drops, 0);
}

#[test]
fn xdp_mtu_9000_receives_each_jumbo_frame_once_as_a_chain() {
    let Some(p) = jumbo_pair("xjr") else {
        return;
    };
    if kernel_at_least_6_6() != Some(true) {
        println!("skipped: AF_XDP multi-buffer needs Linux 6.6");
        return;
    }
    let mut port = open_jumbo(&p, true).expect("open with a frags-aware program");
    assert!(
        port.info().mode.ends_with("multi-buffer"),
        "{:?}",
        port.info()
    );
    let mut q = port.take_queues().remove(0);
    const N: usize = 20;
    let a = p.ip_a.clone();
    p.run_in(&p.b, move || {
        let s = UdpSocket::bind(("0.0.0.0", 0)).unwrap();
        for i in 0..N {
            s.send_to(&payload(i), (a.as_str(), 9000)).unwrap();
        }
    });
    let mut pkts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pkts.len() < N && Instant::now() < deadline {
        if q.rx_burst(&mut pkts, 64) == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(pkts.len(), N, "{:?}", q.stats());
    for (i, pk) in pkts.iter().enumerate() {
        assert_eq!(pk.len(), 9000);
        assert!(pk.segment_count() >= 3, "{} segments", pk.segment_count());
        assert!(pk.to_vec()[42..] == payload(i)[..], "frame {i} altered");
    }
    let st = q.stats();
    assert_eq!((st.rx_packets, st.rx_bytes), (N as u64, 9000 * N as u64));
}

/// `pktgen -b xdp -s 9000 --mtu 9000`: its template frames, too long for an AF_XDP buffer, go
/// out as chained packets (multi-buffer descriptors) and reach a kernel socket intact (the
/// kernel checks the UDP checksum, computed over the whole frame).
#[test]
fn pktgen_xdp_s_9000_reaches_a_kernel_socket() {
    let Some(p) = jumbo_pair("xjp") else {
        return;
    };
    if kernel_at_least_6_6() != Some(true) {
        println!("skipped: AF_XDP multi-buffer needs Linux 6.6");
        return;
    }
    let ip_b = p.ip_b.clone();
    let sock = p.run_in(&p.b, move || {
        let u = UdpSocket::bind((ip_b.as_str(), 9000)).unwrap();
        u.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let bytes: i32 = 16 << 20;
        use std::os::fd::AsRawFd;
        // SAFETY: setsockopt on a valid socket with a pointer to an int of the right size.
        unsafe {
            libc::setsockopt(
                u.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as u32,
            );
        }
        u
    });
    const COUNT: u64 = 200;
    let mac_b = p.mac_text(&p.b, &p.veth_b);
    let pktgen = support::example("pktgen");
    let out = p.exec(
        &p.a,
        &[
            pktgen.to_str().unwrap(),
            "-b",
            "xdp",
            "-d",
            &p.veth_a,
            "-n",
            &COUNT.to_string(),
            "-r",
            "2000",
            "-s",
            "9000",
            "--mtu",
            "9000",
            "--dst-mac",
            &mac_b,
            "--src-ip",
            &p.ip_a,
            "--dst-ip",
            &p.ip_b,
            "--dst-port",
            "9000",
            "--quiet",
        ],
    );
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pktgen:\n{text}");
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
    assert_eq!((n, other), (COUNT, 0), "pktgen:\n{text}");
}

/// `fwd -b xdp --mtu 9000 --mode 5tswap` on B reflects 9000-byte datagrams from A's
/// kernel: each arrives as a chain of 4 KiB buffers, goes back out as one (multi-buffer
/// transmit), and A's socket gets every payload back byte-exact.
#[test]
fn fwd_xdp_mtu_9000_forwards_jumbo_chains() {
    let Some(p) = jumbo_pair("xjf") else {
        return;
    };
    if kernel_at_least_6_6() != Some(true) {
        println!("skipped: AF_XDP multi-buffer needs Linux 6.6");
        return;
    }
    // veth hands A's frames over with the UDP checksum left to "the NIC" (CHECKSUM_PARTIAL):
    // reflected as they are, A's kernel would drop them. Have A's kernel finish it.
    let eth = p.exec(&p.a, &["ethtool", "-K", &p.veth_a, "tx", "off"]);
    assert!(eth.status.success(), "ethtool -K tx off (install ethtool)");
    let mut child = Run::spawn(
        in_ns(&p.b, "fwd")
            .args(["-b", "xdp", "-d", &p.veth_b, "--mode", "5tswap"])
            .args(["--mtu", "9000", "--rule", "udp dst-port 9000 -> queue 0"])
            .args(["-t", "8", "--quiet"]),
    );
    let ready = format!("fwd: {} (xdp", p.veth_b);
    assert!(
        child.wait_for_stderr(&ready, Duration::from_secs(30)),
        "fwd did not open its port:\n{}",
        child.stderr()
    );
    const N: usize = 50;
    let (a, b) = (p.ip_a.clone(), p.ip_b.clone());
    let got = p.run_in(&p.a, move || {
        let s = UdpSocket::bind((a.as_str(), 7001)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut seen = [false; N];
        let mut buf = vec![0u8; 65536];
        for (i, seen) in seen.iter_mut().enumerate() {
            s.send_to(&payload(i), (b.as_str(), 9000)).unwrap();
            // One in flight at a time: the socket's buffer never overflows.
            let end = Instant::now() + Duration::from_secs(2);
            while !*seen && Instant::now() < end {
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    assert_eq!(from.port(), 9000);
                    if n == PAYLOAD && buf[..n] == payload(i)[..] {
                        *seen = true;
                    }
                }
            }
        }
        seen.iter().filter(|&&x| x).count()
    });
    let fwd = child.finish(Duration::from_secs(60));
    let e = String::from_utf8_lossy(&fwd.stderr);
    assert!(fwd.status.success(), "fwd:\n{e}");
    assert_eq!(
        got, N,
        "every jumbo datagram reflected byte-exact\nfwd:\n{e}"
    );
}

/// `pktgen -b xdp --rx --mtu 9000 --write FILE`: each 9000-byte datagram from B's kernel is
/// counted once, and captured whole (a chain over 2 KiB buffers) with its payload intact.
#[test]
fn pktgen_xdp_rx_mtu_9000_counts_each_jumbo_frame_once() {
    let Some(p) = jumbo_pair("xjx") else {
        return;
    };
    if kernel_at_least_6_6() != Some(true) {
        println!("skipped: AF_XDP multi-buffer needs Linux 6.6");
        return;
    }
    let dir = support::emu::tempdir("xjx");
    let pcap = dir.join("rx.pcap");
    let mut child = Run::spawn(
        in_ns(&p.a, "pktgen")
            .args(["-b", "xdp", "-d", &p.veth_a, "--rx", "--mtu", "9000"])
            .args(["--rule", "udp dst-port 9000 -> queue 0", "-t", "6"])
            .args(["--json", "--quiet", "--write", pcap.to_str().unwrap()]),
    );
    assert!(
        child.wait_for_stderr("pktgen: xdp on", Duration::from_secs(30)),
        "pktgen did not open its port:\n{}",
        child.stderr()
    );
    const N: usize = 50;
    let a = p.ip_a.clone();
    p.run_in(&p.b, move || {
        let s = UdpSocket::bind(("0.0.0.0", 0)).unwrap();
        for i in 0..N {
            s.send_to(&payload(i), (a.as_str(), 9000)).unwrap();
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    });
    let rx = child.finish(Duration::from_secs(60));
    let (o, e) = (
        String::from_utf8_lossy(&rx.stdout),
        String::from_utf8_lossy(&rx.stderr),
    );
    assert!(rx.status.success(), "pktgen:\n{o}\n{e}");
    let num = |k: &str| {
        o.split(&format!("\"{k}\":"))
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    assert_eq!(num("packets"), Some(N as u64), "{o}\n{e}");
    assert_eq!(num("bytes"), Some(9000 * N as u64), "{o}\n{e}");
    let b = std::fs::read(&pcap).unwrap();
    let (mut at, mut i) = (24, 0);
    while at + 16 <= b.len() {
        let w = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]) as usize;
        let (caplen, len) = (w(at + 8), w(at + 12));
        at += 16;
        assert_eq!((caplen, len), (9000, 9000), "frame {i} captured whole");
        assert!(
            b[at + 42..at + caplen] == payload(i)[..],
            "frame {i} altered"
        );
        at += caplen;
        i += 1;
    }
    assert_eq!(i, N);
    let _ = std::fs::remove_dir_all(&dir);
}
