//! AF_XDP counts only what the kernel really got (issue 12): `tx_burst` returns what went into
//! the tx ring, packets from another pool are copied (and counted as copies), packets the kernel
//! can never send are counted as drops, and the kernel's own verdicts are surfaced.

mod support;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rawq::gen::{FlowVary, FrameSpec, SizeSpec, Stamper};
use rawq::{Backend, Mempool, MempoolConfig, Packet, Port};
use support::NetnsPair;

/// UDP frames from B to a kernel socket on A's port 7000.
fn stamper(p: &NetnsPair) -> Stamper {
    Stamper::new(FrameSpec {
        dst_mac: p.mac(&p.a, &p.veth_a),
        src_mac: p.mac(&p.b, &p.veth_b),
        src_ip: p.ip_b.parse().unwrap(),
        dst_ip: p.ip_a.parse().unwrap(),
        src_port: 7001,
        dst_port: 7000,
        flows: 1,
        vary: FlowVary::SrcPort,
        sizes: SizeSpec::Fixed(100),
        stamp: false,
    })
    .unwrap()
}

fn open_in(p: &NetnsPair, ns: &str, dev: &str) -> rawq::Result<Port> {
    let dev = dev.to_string();
    p.run_in(ns, move || {
        Port::builder(Backend::Xdp { ifname: dev })
            .rx_ring(256)
            .tx_ring(256)
            .open()
    })
}

/// Issue 12 item 1: a packet of another pool (another port's, as in fwd's two-port mode) is
/// copied into this port's UMEM and really sent; a chained packet is dropped, counted, and not
/// reported as taken.
#[test]
fn packets_of_another_pool_are_copied_and_sent() {
    let Some(p) = NetnsPair::new("xcp") else {
        return;
    };
    let ip_a = p.ip_a.clone();
    let sock = p.run_in(&p.a, move || {
        let u = UdpSocket::bind((ip_a.as_str(), 7000)).unwrap();
        u.set_nonblocking(true).unwrap();
        u
    });
    let st = stamper(&p);
    let mut port = open_in(&p, &p.b, &p.veth_b).expect("open port");
    let mut q = port.take_queues().remove(0);
    let other = Mempool::new(&MempoolConfig {
        buffers: 1024,
        ..Default::default()
    })
    .unwrap();

    const N: usize = 300;
    let (mut taken, mut received) = (0usize, 0usize);
    let mut burst: Vec<Packet> = Vec::with_capacity(32);
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(10);
    while (taken < N || received < N) && Instant::now() < deadline {
        if taken < N && burst.is_empty() {
            other.alloc_bulk(&mut burst, 32.min(N - taken)).unwrap();
            for (j, pkt) in burst.iter_mut().enumerate() {
                pkt.set_len(100).unwrap();
                st.write(pkt.data_mut(), 100, 0, 0, (taken + j) as u64);
            }
        }
        let before = burst.len();
        let n = q.tx_burst(&mut burst);
        assert_eq!(
            before - burst.len(),
            n,
            "what left the Vec is what was taken"
        );
        taken += n;
        q.reclaim();
        while sock.recv_from(&mut buf).is_ok() {
            received += 1;
        }
    }
    let s = q.stats();
    assert_eq!(
        (taken, received),
        (N, N),
        "taken = received by the kernel in A"
    );
    assert_eq!(s.tx_packets, N as u64);
    assert_eq!(s.tx_copies, N as u64, "{s:?}");
    assert_eq!(s.tx_drops, 0, "{s:?}");

    // A chained packet cannot leave from one chunk: dropped, counted, not reported as taken.
    let mut head = other.alloc().unwrap();
    head.set_len(60).unwrap();
    let mut tail = other.alloc().unwrap();
    tail.set_len(60).unwrap();
    head.chain(tail).unwrap();
    let mut v = vec![head];
    assert_eq!(q.tx_burst(&mut v), 0);
    assert!(v.is_empty());
    assert_eq!(q.stats().tx_drops, 1);
    assert_eq!(q.stats().tx_packets, N as u64);
    drop(q);
    drop(port);
    other.flush_local_cache();
    assert_eq!(
        other.available(),
        other.capacity(),
        "the other pool got every buffer back"
    );
}
