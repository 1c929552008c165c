//! The DV data path through the device model bridged to a veth in a test namespace: the kernel
//! is the judge of what the DV path sends, and a frame the kernel sends arrives through the RQ.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use rawq::dv::model::{ModelOptions, ModelPort, ModelWire};
use rawq::{HugePages, Mempool, MempoolConfig, Packet, Queue};
use support::NetnsPair;

/// A UDP/IPv4 frame with zero checksums (the device fills them when asked to).
fn udp_frame(
    dst: [u8; 6],
    src: [u8; 6],
    sip: Ipv4Addr,
    dip: Ipv4Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&sip.octets());
    f.extend_from_slice(&dip.octets());
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

fn pump(port: &ModelPort, q: &mut Queue, got: &mut Vec<Packet>) {
    port.process();
    q.reclaim();
    q.rx_burst(got, 64);
}

#[test]
fn dv_frames_reach_the_kernel_and_kernel_frames_reach_the_rq() {
    let Some(ns) = NetnsPair::new("dv") else {
        return;
    };
    let mac_a = ns.mac(&ns.a, &ns.veth_a);
    let mac_b = ns.mac(&ns.b, &ns.veth_b);
    let ip_a: Ipv4Addr = ns.ip_a.parse().unwrap();
    let ip_b: Ipv4Addr = ns.ip_b.parse().unwrap();

    // The model port's wire is an AF_PACKET socket on veth_a, opened inside namespace a.
    let ifname = ns.veth_a.clone();
    let port = ns
        .run_in(&ns.a, move || {
            ModelPort::new(ModelOptions {
                wire: ModelWire::Bridge { ifname },
                ..Default::default()
            })
        })
        .expect("bridged model port");
    let pool = Mempool::new(&MempoolConfig {
        buffers: 2048,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .unwrap();
    let mut q = port.queue(0, &pool).expect("queue").into_queue();

    // A kernel UDP socket in namespace b.
    let sock = ns
        .run_in(&ns.b, move || UdpSocket::bind((ip_b, 5555)))
        .expect("bind in b");
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();

    // DV → kernel: checksums left to the device (offload), and one frame with a wrong UDP
    // checksum and no offload, which the kernel must drop.
    let mut burst = Vec::new();
    for i in 0..20u32 {
        let payload = format!("rawq-dv-{i}");
        let mut p = pool.alloc().unwrap();
        p.copy_from_slice(&udp_frame(
            mac_b,
            mac_a,
            ip_a,
            ip_b,
            4444,
            5555,
            payload.as_bytes(),
        ))
        .unwrap();
        p.offload.l3_csum = true;
        p.offload.l4_csum = true;
        burst.push(p);
    }
    let mut bad = pool.alloc().unwrap();
    let mut f = udp_frame(mac_b, mac_a, ip_a, ip_b, 4444, 5555, b"rawq-dv-bad");
    f[24..26].copy_from_slice(&[0x12, 0x34]); // wrong IPv4 header checksum
    f[40..42].copy_from_slice(&[0x12, 0x34]); // wrong UDP checksum
    bad.copy_from_slice(&f).unwrap();
    burst.push(bad);
    let mut sent = 0;
    let mut got_pkts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sent < 21 && Instant::now() < deadline {
        sent += q.tx_burst(&mut burst);
        pump(&port, &mut q, &mut got_pkts);
    }
    assert_eq!(sent, 21);
    let mut received = Vec::new();
    let mut buf = [0u8; 2048];
    while received.len() < 20 && Instant::now() < deadline {
        pump(&port, &mut q, &mut got_pkts);
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            assert_eq!(from.ip(), std::net::IpAddr::V4(ip_a));
            assert_eq!(from.port(), 4444);
            received.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    // Give a wrongly checksummed frame time to (not) arrive.
    let until = Instant::now() + Duration::from_millis(200);
    while Instant::now() < until {
        pump(&port, &mut q, &mut got_pkts);
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            received.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    let want: Vec<String> = (0..20).map(|i| format!("rawq-dv-{i}")).collect();
    assert_eq!(
        received, want,
        "the kernel took exactly the frames with device-filled checksums"
    );
    assert_eq!(port.counters().tx_frames, 21);

    // Kernel → RQ: the kernel in b sends to A's address (a static neighbour entry avoids ARP).
    let out = ns.exec(
        &ns.b,
        &[
            "ip",
            "neigh",
            "replace",
            &ns.ip_a,
            "lladdr",
            &fmt_mac(mac_a),
            "dev",
            &ns.veth_b,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sock.send_to(b"from-the-kernel", (ip_a, 6666))
        .expect("send");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut found = None;
    while found.is_none() && Instant::now() < deadline {
        got_pkts.clear();
        pump(&port, &mut q, &mut got_pkts);
        for p in got_pkts.drain(..) {
            let d = p.to_vec();
            if d.len() >= 42
                && d[12..14] == [0x08, 0x00]
                && d[23] == 17
                && d[36..38] == 6666u16.to_be_bytes()
            {
                found = Some((d, p.meta));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (d, meta) = found.expect("the kernel's frame arrived through the RQ");
    assert_eq!(&d[0..6], &mac_a);
    assert_eq!(&d[6..12], &mac_b);
    assert_eq!(&d[42..], b"from-the-kernel");
    assert!(
        meta.l3_csum_ok(),
        "the kernel fills the IPv4 header checksum"
    );
    assert_ne!(meta.rss_hash(), 0);
    drop(q);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

fn fmt_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// An ARP request for `tip` from `sha`/`sip`.
fn arp_request(sha: [u8; 6], sip: Ipv4Addr, tip: Ipv4Addr) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&sha);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&sha);
    f.extend_from_slice(&sip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tip.octets());
    f.resize(60, 0);
    f
}

/// The bifurcated port: the model port's kernel netdev is a TAP in a test namespace. Frames no
/// rule takes reach the kernel through it (an ARP request gets the kernel's ARP reply, which
/// the kernel sends on the TAP and the model puts on the wire, where a second model port
/// receives it), while a frame the rule matches goes to the RQ and not to the kernel.
#[test]
fn unmatched_frames_reach_the_tap_netdev_and_its_replies_go_out_on_the_wire() {
    use rawq::dv::model::{hw::Hw, NetdevPath};
    use rawq::flow::Rule;
    let Some(ns) = NetnsPair::new("tap") else {
        return;
    };
    let tap = format!("{}t", ns.veth_a);
    let tap_ip: Ipv4Addr = ns.ip_a.replace("10.203.", "10.204.").parse().unwrap();
    for cmd in [
        vec!["ip", "tuntap", "add", "dev", &tap, "mode", "tap"],
        vec!["ip", "addr", "add", &format!("{tap_ip}/24"), "dev", &tap],
        vec!["ip", "link", "set", &tap, "up"],
    ] {
        let out = ns.exec(&ns.a, &cmd);
        assert!(out.status.success(), "{cmd:?}: {out:?}");
    }
    let rule: Rule = "udp dst-port 9000 -> queue 0".parse().expect("rule");
    let t2 = tap.clone();
    let a = ns
        .run_in(&ns.a, move || {
            ModelPort::new(ModelOptions {
                wire: ModelWire::Sink,
                netdev: Some(NetdevPath::Tap { ifname: t2 }),
                rules: vec![rule],
                ..Default::default()
            })
        })
        .expect("model port on the TAP");
    let b = ModelPort::new(ModelOptions {
        wire: ModelWire::Sink,
        ..Default::default()
    })
    .unwrap();
    Hw::connect(a.hw(), b.hw());
    let pool = Mempool::new(&MempoolConfig {
        buffers: 1024,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .unwrap();
    let mut qa = a.queue(0, &pool).unwrap().into_queue();
    let mut qb = b.queue(0, &pool).unwrap().into_queue();
    let me = [2, 0, 0, 0, 0, 0x42];
    let my_ip = Ipv4Addr::new(
        tap_ip.octets()[0],
        tap_ip.octets()[1],
        tap_ip.octets()[2],
        99,
    );
    a.inject_frame(&arp_request(me, my_ip, tap_ip));
    a.inject_frame(&udp_frame(me, me, my_ip, tap_ip, 1, 9000, b"steered"));
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let mut reply = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut rounds = 0u32;
    while reply.is_none() && Instant::now() < deadline {
        // Re-ask now and then, as ARP does: the TAP may drop what arrives while it comes up.
        rounds += 1;
        if rounds.is_multiple_of(50) {
            a.inject_frame(&arp_request(me, my_ip, tap_ip));
        }
        a.process();
        b.process();
        qa.rx_burst(&mut got_a, 64);
        qb.rx_burst(&mut got_b, 64);
        for p in got_b.drain(..) {
            let d = p.data();
            // ARP reply (opcode 2) from the TAP's address to us.
            if d.len() >= 42 && d[12..14] == [0x08, 0x06] && d[20..22] == [0, 2] {
                reply = Some((d[28..32].to_vec(), d[0..6].to_vec()));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        reply,
        Some((tap_ip.octets().to_vec(), me.to_vec())),
        "the kernel's ARP reply on the wire; counters a {:?} b {:?}",
        a.counters(),
        b.counters()
    );
    assert_eq!(got_a.len(), 1, "the UDP frame went to the rule's queue");
    assert_eq!(&got_a[0].data()[42..49], b"steered");
    let c = a.counters();
    assert!(c.rx_to_kernel >= 1 && c.netdev_tx >= 1, "{c:?}");
    assert_eq!(
        c.rx_to_kernel as usize,
        rounds as usize / 50 + 1,
        "every ARP request"
    );
    assert_eq!(c.rx_frames, 1, "only the steered frame in the RQ");
}
