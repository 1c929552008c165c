//! Generated frames checked by an independent parser (pnet_packet): lengths, addresses, ports,
//! flow spread, stamps, and IPv4 / UDP checksums for every size, flow and address family.

use pnet_packet::ethernet::{EtherTypes, EthernetPacket};
use pnet_packet::ip::IpNextHeaderProtocols;
use pnet_packet::ipv4::{self, Ipv4Packet};
use pnet_packet::ipv6::Ipv6Packet;
use pnet_packet::udp::{self, UdpPacket};
use pnet_packet::Packet as _;
use rawq::gen::{FlowVary, FrameSpec, SizeSpec, Stamper};
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
