//! AF_XDP and transmit offloads (issue 22 item 5): checksum requests are carried out in
//! software (the kernel, judge on the far veth, drops a datagram whose IPv4 header or UDP
//! checksum is wrong), a TSO request is refused with a clear error, counted as a drop, never
//! as sent, its buffer home.

use rawq_testkit as support;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rawq::{Backend, Packet, Port};
use rawq_gen::{FlowVary, FrameSpec, SizeSpec, Stamper};
use support::NetnsPair;

#[test]
fn checksum_requests_are_done_in_software_and_tso_is_refused() {
    let Some(p) = NetnsPair::new("xoff") else {
        return;
    };
    let ip_a = p.ip_a.clone();
    let sock = p.run_in(&p.a, move || {
        let u = UdpSocket::bind((ip_a.as_str(), 7000)).unwrap();
        u.set_nonblocking(true).unwrap();
        u
    });
    let st = Stamper::new(FrameSpec {
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
    .unwrap();
    let dev = p.veth_b.clone();
    let mut port = p
        .run_in(&p.b, move || {
            Port::builder(Backend::Xdp { ifname: dev })
                .rx_ring(256)
                .tx_ring(256)
                .open()
        })
        .expect("open port");
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);

    // Frames with both checksums wrong, asking the port to fill them.
    const N: usize = 64;
    let (mut taken, mut received) = (0usize, 0usize);
    let mut burst: Vec<Packet> = Vec::with_capacity(32);
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(10);
    while (taken < N || received < N) && Instant::now() < deadline {
        if taken < N && burst.is_empty() {
            q.alloc_burst(&mut burst, 16.min(N - taken)).unwrap();
            for (j, pkt) in burst.iter_mut().enumerate() {
                pkt.set_len(100).unwrap();
                let d = pkt.data_mut();
                st.write(d, 100, 0, 0, (taken + j) as u64);
                d[24] ^= 0x5a; // IPv4 header checksum
                d[40] ^= 0xa5; // UDP checksum
                pkt.offload.l3_csum = true;
                pkt.offload.l4_csum = true;
            }
        }
        taken += q.tx_burst(&mut burst);
        q.reclaim();
        while sock.recv_from(&mut buf).is_ok() {
            received += 1;
        }
        if received < taken {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(
        (taken, received),
        (N, N),
        "every frame with checksums filled reaches the kernel socket"
    );
    assert!(q.take_error().is_none());

    // TSO: refused, said, counted as a drop, not as sent.
    let mut t = pool.alloc().unwrap();
    t.set_len(100).unwrap();
    st.write(t.data_mut(), 100, 0, 0, 0);
    t.offload.tso_mss = Some(1448);
    let mut v = vec![t];
    assert_eq!(q.tx_burst(&mut v), 0);
    assert!(v.is_empty(), "the refused packet was taken out (and freed)");
    let e = q.take_error().expect("the refusal is said").to_string();
    assert!(e.contains("TSO") && e.contains("does not segment"), "{e}");
    let s = q.stats();
    assert_eq!((s.tx_packets, s.tx_drops), (N as u64, 1), "{s:?}");
    let end = Instant::now() + Duration::from_secs(5);
    while q.reclaim() > 0 || Instant::now() < end {
        if q.stats().tx_packets == N as u64 {
            break;
        }
    }
    drop(q);
    drop(port);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity(), "every buffer home");
}
