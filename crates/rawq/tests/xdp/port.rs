//! AF_XDP ports on a veth pair between two throwaway namespaces: bifurcation (rawq takes one
//! UDP flow, the kernel keeps ping, TCP and the rest), transmit, two queues sharing the UMEM,
//! and a long sequence-numbered loop through the rings. Attaching and detaching the program,
//! and refused configurations, are in `tests/xdp/port_attach.rs`.

use rawq_testkit as support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use rawq::flow::Action;
use rawq::{Backend, Mempool, Packet, Port};
use support::xdp::{open_in, udp_dst};
use support::NetnsPair;

fn ipv4_of(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

fn csum_fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn csum_add(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
        .sum()
}

/// An Ethernet/IPv4/UDP frame with correct checksums.
fn udp_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let tot = (20 + 8 + payload.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&tot.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let c = csum_fold(csum_add(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let ulen = (8 + payload.len()) as u16;
    let mut udp = Vec::with_capacity(8 + payload.len());
    udp.extend_from_slice(&sport.to_be_bytes());
    udp.extend_from_slice(&dport.to_be_bytes());
    udp.extend_from_slice(&ulen.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&ulen.to_be_bytes());
    let mut c = csum_fold(csum_add(&pseudo) + csum_add(&udp));
    if c == 0 {
        c = 0xffff;
    }
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&udp);
    f
}

/// (destination port, payload) of an untagged IPv4/UDP frame.
fn udp_of(f: &[u8]) -> Option<(u16, &[u8])> {
    if f.len() < 42 || f[12..14] != [0x08, 0x00] || f[23] != 17 {
        return None;
    }
    let ihl = (f[14] & 0x0f) as usize * 4;
    let l4 = 14 + ihl;
    let dport = u16::from_be_bytes([*f.get(l4 + 2)?, *f.get(l4 + 3)?]);
    Some((dport, f.get(l4 + 8..)?))
}

fn all_buffers_home(pool: &Mempool) {
    pool.flush_local_cache();
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "every UMEM buffer must be back in the pool"
    );
}

#[test]
fn bifurcation_rawq_takes_udp_9000_kernel_keeps_the_rest() {
    let Some(p) = NetnsPair::new("xbif") else {
        return;
    };
    let mut port = open_in(&p, &p.b, &p.veth_b, vec![udp_dst(9000)], 1024).expect("open port");
    eprintln!("port: {:?}", port.info());
    assert_eq!(port.info().backend, "xdp");
    assert!(["copy", "zero-copy"].contains(&port.info().mode.as_str()));
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);

    // Kernel sockets in B.
    let ip_b = p.ip_b.clone();
    let (udp_b, tcp_b) = p.run_in(&p.b, move || {
        let u = UdpSocket::bind((ip_b.as_str(), 9001)).unwrap();
        u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t = TcpListener::bind((ip_b.as_str(), 5001)).unwrap();
        (u, t)
    });

    // rawq's receiver.
    const N: usize = 300;
    let rx = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut burst = Vec::with_capacity(64);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut quiet_since: Option<Instant> = None;
        while Instant::now() < deadline {
            burst.clear();
            let n = q.rx_burst(&mut burst, 64);
            for pkt in burst.drain(..) {
                got.push(pkt.to_vec());
            }
            if got.len() >= N {
                // Keep listening a little: nothing else may arrive.
                let t = *quiet_since.get_or_insert_with(Instant::now);
                if t.elapsed() > Duration::from_millis(500) {
                    break;
                }
            }
            if n == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        (got, q)
    });

    // TCP: a few MB from A to B, verified byte for byte.
    const TCP_BYTES: usize = 4 << 20;
    let pattern = |i: usize| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1];
    let tcp_rx = std::thread::spawn(move || {
        let (mut s, _) = tcp_b.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        let mut bad = 0usize;
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            for (k, &b) in buf[..n].iter().enumerate() {
                if b != pattern(total + k) {
                    bad += 1;
                }
            }
            total += n;
        }
        (total, bad)
    });
    let ns_a = format!("/var/run/netns/{}", p.a);
    let ip_b = p.ip_b.clone();
    let tcp_tx = std::thread::spawn(move || {
        support::enter_netns(&ns_a);
        let mut s = TcpStream::connect((ip_b.as_str(), 5001)).unwrap();
        let data: Vec<u8> = (0..TCP_BYTES).map(pattern).collect();
        s.write_all(&data).unwrap();
    });

    // Ping at the same time.
    let ping_ns = p.a.clone();
    let ping_dst = p.ip_b.clone();
    let ping = std::thread::spawn(move || {
        std::process::Command::new("ip")
            .args([
                "netns", "exec", &ping_ns, "ping", "-c", "10", "-i", "0.1", "-W", "2", &ping_dst,
            ])
            .output()
            .unwrap()
    });

    // The kernel's receiver on 9001, draining while the sender runs.
    let kern_rx = std::thread::spawn(move || {
        let mut kern = vec![false; N];
        let mut buf = [0u8; 2048];
        for _ in 0..N {
            let Ok((n, _)) = udp_b.recv_from(&mut buf) else {
                break;
            };
            let s = std::str::from_utf8(&buf[..n]).unwrap();
            let i: usize = s.strip_prefix("kern ").unwrap().parse().unwrap();
            assert!(!kern[i], "duplicate {s}");
            kern[i] = true;
        }
        kern
    });

    // UDP from A: N datagrams to 9000 (rawq) and N to 9001 (kernel), interleaved.
    let ip_b = p.ip_b.clone();
    let ip_a = p.ip_a.clone();
    p.run_in(&p.a, move || {
        let s = UdpSocket::bind((ip_a.as_str(), 0)).unwrap();
        for i in 0..N {
            s.send_to(format!("rawq {i}").as_bytes(), (ip_b.as_str(), 9000))
                .unwrap();
            s.send_to(format!("kern {i}").as_bytes(), (ip_b.as_str(), 9001))
                .unwrap();
            if i % 16 == 15 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });

    let kern = kern_rx.join().unwrap();
    assert_eq!(
        kern.iter().filter(|&&k| k).count(),
        N,
        "the kernel socket on 9001 gets all its datagrams"
    );

    let ping = ping.join().unwrap();
    let ping_out = String::from_utf8_lossy(&ping.stdout);
    assert!(
        ping.status.success() && ping_out.contains(" 0% packet loss"),
        "ping through the XDP program: {ping_out}"
    );
    tcp_tx.join().unwrap();
    let (total, bad) = tcp_rx.join().unwrap();
    assert_eq!(
        (total, bad),
        (TCP_BYTES, 0),
        "TCP stream arrives byte-exact"
    );

    let (got, q) = rx.join().unwrap();
    let mut seen = vec![false; N];
    for f in &got {
        let (dport, payload) =
            udp_of(f).unwrap_or_else(|| panic!("rawq got a non-UDP frame {f:02x?}"));
        assert_eq!(dport, 9000, "rawq got a frame for port {dport}");
        let s = std::str::from_utf8(payload).unwrap();
        let i: usize = s.strip_prefix("rawq ").unwrap().parse().unwrap();
        assert!(!seen[i], "duplicate {s}");
        seen[i] = true;
    }
    assert_eq!(
        got.len(),
        N,
        "rawq receives exactly the UDP frames sent to 9000"
    );
    let st = q.stats();
    assert_eq!(st.rx_packets, N as u64);
    drop(got);
    drop(q);
    drop(port);
    all_buffers_home(&pool);
}

#[test]
fn tx_frames_reach_a_kernel_socket_intact() {
    let Some(p) = NetnsPair::new("xtx") else {
        return;
    };
    let mac_a = p.mac(&p.a, &p.veth_a);
    let mac_b = p.mac(&p.b, &p.veth_b);
    let (ia, ib) = (ipv4_of(&p.ip_a), ipv4_of(&p.ip_b));
    let ip_a = p.ip_a.clone();
    let sock = p.run_in(&p.a, move || {
        let u = UdpSocket::bind((ip_a.as_str(), 7000)).unwrap();
        u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        u
    });
    // No rules: no program; transmit works without one.
    let mut port = open_in(&p, &p.b, &p.veth_b, Vec::new(), 256).expect("open port");
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);

    const N: usize = 500;
    let mut sent = 0usize;
    let mut burst: Vec<Packet> = Vec::with_capacity(32);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = vec![false; N];
    let mut received = 0usize;
    let mut buf = [0u8; 2048];
    sock.set_nonblocking(true).unwrap();
    while (sent < N || received < N) && Instant::now() < deadline {
        if sent < N && burst.is_empty() {
            let k = 32.min(N - sent);
            q.alloc_burst(&mut burst, k).unwrap();
            for (j, pkt) in burst.iter_mut().enumerate() {
                let i = sent + j;
                let payload = format!("tx {i} {}", "x".repeat(i % 200));
                pkt.copy_from_slice(&udp_frame(
                    mac_a,
                    mac_b,
                    ib,
                    ia,
                    7001,
                    7000,
                    payload.as_bytes(),
                ))
                .unwrap();
            }
        }
        let before = burst.len();
        q.tx_burst(&mut burst);
        sent += before - burst.len();
        q.reclaim();
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            assert_eq!(from.port(), 7001);
            let s = std::str::from_utf8(&buf[..n]).unwrap();
            let mut it = s.split(' ');
            assert_eq!(it.next(), Some("tx"));
            let i: usize = it.next().unwrap().parse().unwrap();
            assert_eq!(it.next().unwrap(), "x".repeat(i % 200), "payload of {i}");
            assert!(!got[i], "duplicate {i}");
            got[i] = true;
            received += 1;
        }
        if sent == N {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(sent, N);
    assert_eq!(
        received, N,
        "every transmitted frame reaches the kernel socket in A"
    );
    let st = q.stats();
    assert_eq!(st.tx_packets, N as u64);
    // All completions come back.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        q.reclaim();
    }
    drop(burst);
    drop(q);
    drop(port);
    all_buffers_home(&pool);
}

#[test]
fn two_queues_share_the_umem_and_keep_their_netdev_queue() {
    let Some(p) = NetnsPair::new("xmq") else {
        return;
    };
    // A second veth pair in the same namespaces, with two queues each way.
    let (ma, mb) = (format!("{}m", p.veth_a), format!("{}m", p.veth_b));
    let out = std::process::Command::new("ip")
        .args([
            "link",
            "add",
            &ma,
            "netns",
            &p.a,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            &mb,
            "netns",
            &p.b,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (ns, dev) in [(&p.a, &ma), (&p.b, &mb)] {
        let out = std::process::Command::new("ip")
            .args(["-n", ns, "link", "set", dev, "up"])
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    let mac_b = p.mac(&p.b, &mb);
    let mac_a = p.mac(&p.a, &ma);
    let mut rule = udp_dst(9000);
    rule.action = Action::Rss(vec![0, 1]);
    let mb2 = mb.clone();
    let mut port_b = p
        .run_in(&p.b, move || {
            Port::builder(Backend::Xdp { ifname: mb2 })
                .queues(2)
                .rule(rule)
                .rx_ring(256)
                .tx_ring(256)
                .open()
        })
        .expect("2-queue receiving port");
    let ma2 = ma.clone();
    let mut port_a = p
        .run_in(&p.a, move || {
            Port::builder(Backend::Xdp { ifname: ma2 })
                .queues(2)
                .rx_ring(256)
                .tx_ring(256)
                .open()
        })
        .expect("2-queue sending port");
    assert_eq!(port_b.info().queues, 2);
    let mut qa = port_a.take_queues();
    let mut qb = port_b.take_queues();

    // Queue i of A sends frames tagged i; veth delivers tx queue i to the peer's rx queue i, and
    // the program hands rx queue i to rawq queue i of B.
    const N: usize = 100;
    let (ia, ib) = (ipv4_of(&p.ip_a), ipv4_of(&p.ip_b));
    for (i, q) in qa.iter_mut().enumerate() {
        let mut burst = Vec::new();
        q.alloc_burst(&mut burst, N).unwrap();
        for (k, pkt) in burst.iter_mut().enumerate() {
            let payload = format!("q{i} {k}");
            pkt.copy_from_slice(&udp_frame(
                mac_b,
                mac_a,
                ia,
                ib,
                4000,
                9000,
                payload.as_bytes(),
            ))
            .unwrap();
        }
        let t = Instant::now();
        while !burst.is_empty() && t.elapsed() < Duration::from_secs(5) {
            q.tx_burst(&mut burst);
        }
        assert!(burst.is_empty());
    }
    let mut got: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let t = Instant::now();
    let mut burst = Vec::new();
    while got.iter().map(Vec::len).sum::<usize>() < 2 * N && t.elapsed() < Duration::from_secs(10) {
        for q in qa.iter_mut() {
            q.reclaim();
        }
        for (i, q) in qb.iter_mut().enumerate() {
            q.rx_burst(&mut burst, 64);
            for pkt in burst.drain(..) {
                let (_, payload) = udp_of(pkt.data()).expect("udp");
                got[i].push(String::from_utf8_lossy(payload).into_owned());
            }
        }
    }
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.len(), N, "queue {i} got {g:?}");
        assert!(
            g.iter().all(|s| s.starts_with(&format!("q{i} "))),
            "queue {i}: {g:?}"
        );
    }
    let pools = [port_a.pool().clone(), port_b.pool().clone()];
    drop(burst);
    drop(qa);
    drop(qb);
    drop(port_a);
    drop(port_b);
    for pool in &pools {
        all_buffers_home(pool);
    }
}
