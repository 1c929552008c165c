//! Generated frames checked by an independent parser (pnet_packet): lengths, addresses, ports,
//! flow spread, stamps, and IPv4 / UDP checksums for every size, flow and address family.

use pnet_packet::ethernet::{EtherTypes, EthernetPacket};
use pnet_packet::ip::IpNextHeaderProtocols;
use pnet_packet::ipv4::{self, Ipv4Packet};
use pnet_packet::ipv6::Ipv6Packet;
use pnet_packet::udp::{self, UdpPacket};
use pnet_packet::Packet as _;
use rawq_gen::{
    FieldRange, FlowVary, FrameSpec, L4Kind, Marked, Shape, SizeSpec, StampInfo, Stamper,
    TrialMark, MARK_SHIFT,
};
use std::collections::HashSet;
use std::net::IpAddr;

fn spec(
    src: &str,
    dst: &str,
    sizes: SizeSpec,
    flows: u32,
    vary: FlowVary,
    stamp: bool,
) -> FrameSpec {
    FrameSpec {
        dst_mac: [0x02, 0, 0, 0, 0, 2],
        src_mac: [0x02, 0, 0, 0, 0, 1],
        src_ip: src.parse().unwrap(),
        dst_ip: dst.parse().unwrap(),
        src_port: 1000,
        dst_port: 9000,
        flows,
        vary,
        sizes,
        stamp,
    }
}

/// RFC 768: a computed checksum of 0 is transmitted as all ones (0 means "none").
fn rfc768(c: u16) -> u16 {
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// Parses `f` with pnet and returns (src ip, src port, udp payload) after checking checksums.
fn check(f: &[u8], len: usize) -> (IpAddr, u16, Vec<u8>) {
    assert_eq!(f.len(), len);
    let eth = EthernetPacket::new(f).expect("ethernet");
    match eth.get_ethertype() {
        EtherTypes::Ipv4 => {
            let ip = Ipv4Packet::new(eth.payload()).expect("ipv4");
            assert_eq!(ip.get_total_length() as usize, len - 14);
            assert_eq!(
                ip.get_checksum(),
                ipv4::checksum(&ip),
                "IPv4 header checksum"
            );
            assert_eq!(ip.get_next_level_protocol(), IpNextHeaderProtocols::Udp);
            let u = UdpPacket::new(ip.payload()).expect("udp");
            assert_eq!(u.get_length() as usize, len - 34);
            let want = rfc768(udp::ipv4_checksum(
                &u,
                &ip.get_source(),
                &ip.get_destination(),
            ));
            assert_eq!(u.get_checksum(), want, "UDP/IPv4 checksum, len {len}");
            assert_eq!(u.get_destination(), 9000);
            (
                IpAddr::V4(ip.get_source()),
                u.get_source(),
                u.payload().to_vec(),
            )
        }
        EtherTypes::Ipv6 => {
            let ip = Ipv6Packet::new(eth.payload()).expect("ipv6");
            assert_eq!(ip.get_payload_length() as usize, len - 54);
            let u = UdpPacket::new(ip.payload()).expect("udp");
            let want = rfc768(udp::ipv6_checksum(
                &u,
                &ip.get_source(),
                &ip.get_destination(),
            ));
            assert_eq!(u.get_checksum(), want, "UDP/IPv6 checksum, len {len}");
            (
                IpAddr::V6(ip.get_source()),
                u.get_source(),
                u.payload().to_vec(),
            )
        }
        other => panic!("unexpected ethertype {other}"),
    }
}

#[test]
fn every_size_flow_and_family_has_valid_checksums() {
    let cases = [
        spec(
            "10.0.0.1",
            "10.0.0.2",
            SizeSpec::Range(60, 300),
            7,
            FlowVary::SrcPort,
            true,
        ),
        spec(
            "10.0.0.1",
            "10.0.0.2",
            SizeSpec::Imix,
            300,
            FlowVary::SrcIp,
            false,
        ),
        spec(
            "2001:db8::1",
            "2001:db8::2",
            SizeSpec::Range(78, 200),
            5,
            FlowVary::SrcPort,
            true,
        ),
        spec(
            "2001:db8::1",
            "2001:db8::2",
            SizeSpec::Fixed(1514),
            3,
            FlowVary::SrcIp,
            false,
        ),
        spec(
            "10.9.8.7",
            "10.0.0.2",
            SizeSpec::Range(42, 60),
            65536,
            FlowVary::SrcPort,
            false,
        ),
    ];
    let mut buf = vec![0u8; 2048];
    for s in cases {
        let st = Stamper::new(s.clone()).unwrap();
        let mut srcs = HashSet::new();
        for i in 0..2000u64 {
            let len = s.sizes.size(i) as usize;
            let flow = (i * 7919) as u32;
            st.write(&mut buf, len, flow, 3, i);
            let (ip, port, payload) = check(&buf[..len], len);
            srcs.insert((ip, port));
            if s.stamp {
                let stamp = Stamper::read_stamp(&buf[..len]).expect("stamp");
                assert_eq!((stamp.stream, stamp.seq), (3, i));
            } else {
                assert!(Stamper::read_stamp(&buf[..len]).is_none());
                // The payload is the template's incrementing pattern.
                assert!(payload.iter().enumerate().all(|(k, &b)| b == k as u8));
            }
        }
        let want = (s.flows as usize).min(2000);
        assert_eq!(
            srcs.len(),
            want,
            "flows spread over {want} distinct sources"
        );
    }
}

#[test]
fn invalid_specs_are_rejected() {
    let mut s = spec(
        "10.0.0.1",
        "2001:db8::2",
        SizeSpec::Fixed(100),
        1,
        FlowVary::SrcPort,
        false,
    );
    assert!(Stamper::new(s.clone()).is_err(), "mixed families");
    s.dst_ip = "10.0.0.2".parse().unwrap();
    s.sizes = SizeSpec::Fixed(41);
    assert!(Stamper::new(s.clone()).is_err(), "below the headers");
    s.sizes = SizeSpec::Fixed(60);
    s.flows = 0;
    assert!(Stamper::new(s).is_err(), "no flows");
}

#[test]
fn vary_src_ip_never_sends_from_the_destination_address() {
    let mut buf = vec![0u8; 2048];
    for (src, dst, flows) in [
        ("10.0.0.1", "10.0.0.2", 300u32),
        ("10.0.0.2", "10.0.0.2", 5),
        ("10.0.255.250", "10.0.0.3", 65535),
        ("2001:db8::1", "2001:db8::5", 40),
    ] {
        let s = spec(
            src,
            dst,
            SizeSpec::Fixed(100),
            flows,
            FlowVary::SrcIp,
            false,
        );
        let st = Stamper::new(s.clone()).unwrap();
        let mut srcs = HashSet::new();
        for f in 0..flows {
            st.write(&mut buf, 100, f, 0, f as u64);
            let (ip, _, _) = check(&buf[..100], 100);
            assert_ne!(
                ip, s.dst_ip,
                "flow {f} of {src} -> {dst} sent from the destination"
            );
            srcs.insert(ip);
        }
        assert_eq!(
            srcs.len(),
            flows as usize,
            "{src} -> {dst}: distinct sources"
        );
    }
    // Every last-16-bit value but the destination's is 65535 sources: 65536 cannot avoid it.
    let s = spec(
        "10.0.0.1",
        "10.0.0.2",
        SizeSpec::Fixed(100),
        65536,
        FlowVary::SrcIp,
        false,
    );
    assert!(Stamper::new(s).is_err());
    // A source range holding the destination steps over it.
    let s = spec(
        "10.0.0.1",
        "10.0.0.3",
        SizeSpec::Fixed(100),
        4,
        FlowVary::SrcPort,
        false,
    );
    let shape = Shape {
        ranges: vec!["src-ip=10.0.0.2-10.0.0.5".parse().unwrap()],
        ..Default::default()
    };
    let st = Stamper::with_shape(s, shape).unwrap();
    let got: Vec<IpAddr> = (0..4)
        .map(|f| {
            st.write(&mut buf, 100, f, 0, 0);
            check(&buf[..100], 100).0
        })
        .collect();
    let want: Vec<IpAddr> = ["10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.2"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn incrementing_ranges_visit_every_combination_once() {
    let shape = Shape {
        ranges: vec![
            "src-port=1000-1002".parse().unwrap(),
            "dst-ip=10.1.0.254-10.1.1.1:inc".parse().unwrap(),
        ],
        ..Default::default()
    };
    assert_eq!(shape.combinations(), 12);
    let s = spec(
        "10.0.0.1",
        "10.0.0.2",
        SizeSpec::Fixed(80),
        12,
        FlowVary::SrcPort,
        true,
    );
    let st = Stamper::with_shape(s, shape).unwrap();
    let mut buf = vec![0u8; 128];
    let mut seen = HashSet::new();
    for i in 0..12u64 {
        st.write(&mut buf, 80, i as u32, 0, i);
        check(&buf[..80], 80);
        let f = &buf[..80];
        let sport = u16::from_be_bytes([f[34], f[35]]);
        let dst = std::net::Ipv4Addr::new(f[30], f[31], f[32], f[33]);
        assert!((1000..=1002).contains(&sport));
        assert!(
            (u32::from(dst) >= 0x0a01_00fe) && (u32::from(dst) <= 0x0a01_0101),
            "{dst}"
        );
        assert!(seen.insert((sport, dst)), "combination repeated at {i}");
        // The odometer: the first range counts fastest.
        assert_eq!(sport, 1000 + (i % 3) as u16);
    }
    // Random mode stays in range and differs between flows.
    let shape = Shape {
        ranges: vec!["src-port=2000-2999:rand".parse().unwrap()],
        ..Default::default()
    };
    let s = spec(
        "10.0.0.1",
        "10.0.0.2",
        SizeSpec::Fixed(80),
        100,
        FlowVary::SrcPort,
        false,
    );
    let st = Stamper::with_shape(s, shape).unwrap();
    let ports: HashSet<u16> = (0..100)
        .map(|f| {
            st.write(&mut buf, 80, f, 0, 0);
            let (_, p, _) = check(&buf[..80], 80);
            assert!((2000..=2999).contains(&p));
            p
        })
        .collect();
    assert!(
        ports.len() > 80,
        "random ports: {} distinct of 100",
        ports.len()
    );
    for bad in [
        "src-port=5-1",
        "src-port=1-70000",
        "dst-ip=10.0.0.1",
        "ttl=1-2",
        "src-ip=2001:db8::1-2001:db9::1",
        "dst-port=1-2:sometimes",
    ] {
        assert!(bad.parse::<FieldRange>().is_err(), "{bad}");
    }
    assert!("src-ip=2001:db8::1-2001:db8::ff:rand"
        .parse::<FieldRange>()
        .is_ok());
}

#[test]
fn imix_over_ipv6_raises_the_small_frames() {
    let mut buf = vec![0u8; 2048];
    for (stamp, small) in [(false, 74u16), (true, 78)] {
        let s = spec(
            "2001:db8::1",
            "2001:db8::2",
            SizeSpec::Imix,
            3,
            FlowVary::SrcPort,
            stamp,
        );
        assert!(
            s.validate().is_err(),
            "60-byte frames cannot hold IPv6 + UDP"
        );
        let st = Stamper::new(s).unwrap();
        assert_eq!(st.spec().sizes, SizeSpec::ImixSmall(small));
        for i in 0..12 {
            let len = st.spec().sizes.size(i) as usize;
            assert!([small as usize, 590, 1514].contains(&len));
            st.write(&mut buf, len, i as u32, 0, i);
            check(&buf[..len], len);
        }
    }
    // IPv4 keeps the classic 60-byte IMIX.
    let s = spec(
        "10.0.0.1",
        "10.0.0.2",
        SizeSpec::Imix,
        1,
        FlowVary::SrcPort,
        true,
    );
    assert_eq!(Stamper::new(s).unwrap().spec().sizes, SizeSpec::Imix);
}

#[test]
fn latency_stamps_carry_flow_and_send_time() {
    let s = spec(
        "10.0.0.1",
        "10.0.0.2",
        SizeSpec::Range(66, 90),
        7,
        FlowVary::SrcPort,
        false,
    );
    let st = Stamper::with_shape(
        s.clone(),
        Shape {
            latency: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut buf = vec![0u8; 128];
    for i in 0..50u64 {
        let len = s.sizes.size(i) as usize;
        let ts = (i % 2 == 0).then_some(0x0123_4567_89ab_cdef + i);
        st.write_at(&mut buf, len, i as u32, 4, i, ts);
        check(&buf[..len], len);
        assert_eq!(
            Stamper::read_stamp_full(&buf[..len]),
            Some(StampInfo {
                stream: 4,
                flow: (i % 7) as u16,
                flows: 7,
                seq: i,
                tx_ns: ts
            })
        );
    }
    // 66 bytes is the least that holds IPv4 + UDP + a latency stamp.
    let mut small = s;
    small.sizes = SizeSpec::Fixed(65);
    let e = Stamper::with_shape(
        small,
        Shape {
            latency: true,
            ..Default::default()
        },
    )
    .err()
    .expect("65 bytes is too small");
    assert!(e.to_string().contains("-s 66"), "{e}");
    // TCP stamps read back too.
    let s = spec(
        "10.0.0.1",
        "10.0.0.2",
        SizeSpec::Fixed(90),
        1,
        FlowVary::SrcPort,
        true,
    );
    let st = Stamper::with_shape(
        s,
        Shape {
            l4: L4Kind::TcpAck,
            ..Default::default()
        },
    )
    .unwrap();
    st.write(&mut buf, 90, 0, 2, 77);
    assert_eq!(
        Stamper::read_stamp(&buf[..90]).map(|s| (s.stream, s.seq)),
        Some((2, 77))
    );
}

/// A trial's mark (RFC 2544, issue 32): the stamp carries it in its sequence number's top 8
/// bits, with valid checksums, on the fast writers (v4 and v6, port or address varying) and
/// the general one (a latency stamp); the trial's receiver takes its own frames (the mark off
/// their numbers, which wrap at 40 bits), names another trial's and leaves unmarked ones be.
#[test]
fn trial_marks_ride_in_the_sequence_number() {
    let mut buf = vec![0u8; 128];
    let mine = TrialMark::new(7).unwrap();
    for (src, dst, len) in [("10.0.0.1", "10.0.0.2", 80), ("fd00::1", "fd00::2", 90)] {
        for vary in [FlowVary::SrcPort, FlowVary::SrcIp] {
            for latency in [false, true] {
                let s = spec(src, dst, SizeSpec::Fixed(len), 5, vary, true);
                let marked = |mark| {
                    Stamper::with_shape(
                        s.clone(),
                        Shape {
                            latency,
                            mark,
                            ..Default::default()
                        },
                    )
                    .unwrap()
                };
                let (own, earlier, plain) = (marked(7), marked(6), marked(0));
                for i in [0u64, 1, 9, (1 << 40) - 1, 1 << 40, (1 << 40) + 3] {
                    let ts = latency.then_some(12345 + i);
                    let n = len as usize;
                    own.write_at(&mut buf, n, i as u32, 3, i, ts);
                    check(&buf[..n], n);
                    let got = Stamper::read_stamp_full(&buf[..n]).unwrap();
                    assert_eq!(got.seq, 7 << MARK_SHIFT | (i & ((1 << MARK_SHIFT) - 1)));
                    assert_eq!(TrialMark::of(&got), 7);
                    let want = StampInfo {
                        stream: 3,
                        flow: (i as u32 % 5) as u16,
                        flows: 5,
                        seq: i % (1 << MARK_SHIFT),
                        tx_ns: ts,
                    };
                    assert_eq!(mine.check(got), Marked::Own(want), "{src} {vary:?} {i}");
                    earlier.write_at(&mut buf, n, i as u32, 3, i, ts);
                    check(&buf[..n], n);
                    let got = Stamper::read_stamp_full(&buf[..n]).unwrap();
                    assert_eq!(mine.check(got), Marked::Other(6));
                    plain.write_at(&mut buf, n, i as u32, 3, i, ts);
                    let got = Stamper::read_stamp_full(&buf[..n]).unwrap();
                    assert_eq!(got.seq, i, "no mark: the 48-bit number as before");
                    if i < 1 << MARK_SHIFT {
                        // (Past 2^40 frames an unmarked number's upper bits read as a mark:
                        // only a trial's receiver reads marks, and its sender marks.)
                        assert_eq!(mine.check(got), Marked::Unmarked(got));
                    }
                }
            }
        }
    }
    // Without a stamp there is nothing to mark.
    let s = spec(
        "10.0.0.1",
        "10.0.0.2",
        SizeSpec::Fixed(64),
        1,
        FlowVary::SrcPort,
        false,
    );
    let st = Stamper::with_shape(
        s,
        Shape {
            mark: 3,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(st.mark(), 0);
    st.write(&mut buf, 64, 0, 0, 0);
    assert!(Stamper::read_stamp_full(&buf[..64]).is_none());
    // Two trials in a row never share a mark; 0 is never one.
    let marks: Vec<u8> = (0..600).map(|n| TrialMark::nth(n).get()).collect();
    assert!(marks.windows(2).all(|w| w[0] != w[1] && w[0] != 0));
    assert_eq!((marks[0], marks[254], marks[255]), (1, 255, 1));
}
