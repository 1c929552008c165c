//! Templates checked by tshark, an oracle nobody here wrote: frames with VLAN tags (one and
//! QinQ), TCP SYN and ACK, UDP, over IPv4 and IPv6, with a random payload and field ranges, are
//! written with rawq's pcap writer and decoded by tshark with every checksum check on.

use rawq_testkit as support;

use std::net::IpAddr;
use std::process::Command;

use rawq_gen::{
    CaptureLimits, FlowVary, FrameSpec, L4Kind, Payload, PcapWriter, Shape, SizeSpec, Stamper, Vlan,
};

fn spec(src: &str, dst: &str, sizes: SizeSpec, flows: u32, stamp: bool) -> FrameSpec {
    FrameSpec {
        dst_mac: [0x02, 0, 0, 0, 0, 2],
        src_mac: [0x02, 0, 0, 0, 0, 1],
        src_ip: src.parse().unwrap(),
        dst_ip: dst.parse().unwrap(),
        src_port: 1000,
        dst_port: 9000,
        flows,
        vary: FlowVary::SrcPort,
        sizes,
        stamp,
    }
}

const FIELDS: &[&str] = &[
    "frame.len",
    "vlan.id",
    "vlan.priority",
    "ieee8021ad.id",
    "ieee8021ad.priority",
    "ip.src",
    "ipv6.src",
    "tcp.srcport",
    "udp.srcport",
    "tcp.dstport",
    "udp.dstport",
    "tcp.flags.syn",
    "tcp.flags.ack",
    "ip.checksum.status",
    "udp.checksum.status",
    "tcp.checksum.status",
    "ip.proto",
    "ipv6.nxt",
    "_ws.expert.severity",
];

/// Writes `n` frames of `st` to a pcap and returns tshark's decoded fields, one map per frame.
fn decode(
    st: &Stamper,
    n: u64,
    name: &str,
) -> Option<Vec<std::collections::HashMap<String, String>>> {
    if Command::new("tshark").arg("-v").output().is_err() {
        return support::skip_or_fail("tshark is not installed");
    }
    let path = std::env::temp_dir().join(format!("rawq-{name}-{}.pcap", std::process::id()));
    let mut w = PcapWriter::create(&path, CaptureLimits::default()).unwrap();
    let mut buf = vec![0u8; 9600];
    for i in 0..n {
        let len = st.spec().sizes.size(i) as usize;
        st.write_at(
            &mut buf,
            len,
            i as u32,
            1,
            i,
            (i % 3 == 0).then_some(i * 1000),
        );
        assert!(w.write(i * 1000, &buf[..len]).unwrap());
    }
    w.finish().unwrap();
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(&path);
    for p in ["tcp", "udp", "ip"] {
        cmd.args(["-o", &format!("{p}.check_checksum:TRUE")]);
    }
    cmd.args([
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<_> = text
        .lines()
        .map(|l| {
            FIELDS
                .iter()
                .zip(l.split('|'))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect();
    assert_eq!(rows.len() as u64, n, "tshark frames");
    Some(rows)
}

/// Checksum status 1 is "Good" in Wireshark's proto_checksum_enum_e (0 is Bad).
fn all_good(r: &std::collections::HashMap<String, String>, fields: &[&str]) {
    for f in fields {
        assert_eq!(r[*f], "1", "{f} not verified good: {r:?}");
    }
}

#[test]
fn vlan_tcp_and_udp_decode_with_valid_checksums_v4_and_v6() {
    let cases: Vec<(&str, &str, SizeSpec, Shape)> = vec![
        (
            "10.0.0.1",
            "10.0.0.2",
            SizeSpec::Range(74, 200),
            Shape {
                vlans: vec![Vlan { id: 100, pcp: 5 }],
                l4: L4Kind::TcpSyn,
                payload: Payload::Random(7),
                ..Default::default()
            },
        ),
        (
            "2001:db8::1",
            "2001:db8::2",
            SizeSpec::Range(102, 300),
            Shape {
                vlans: vec![Vlan { id: 4094, pcp: 0 }],
                l4: L4Kind::TcpAck,
                latency: true,
                ..Default::default()
            },
        ),
        (
            "10.0.0.1",
            "10.0.0.2",
            SizeSpec::Fixed(128),
            Shape {
                vlans: vec![Vlan { id: 10, pcp: 1 }, Vlan { id: 20, pcp: 7 }],
                payload: Payload::Random(99),
                latency: true,
                ranges: vec![
                    "dst-port=5000-5003".parse().unwrap(),
                    "src-ip=10.0.0.1-10.0.0.9:rand".parse().unwrap(),
                ],
                ..Default::default()
            },
        ),
        (
            "2001:db8::1",
            "2001:db8::2",
            SizeSpec::Imix,
            Shape {
                l4: L4Kind::TcpSyn,
                ..Default::default()
            },
        ),
        (
            "2001:db8::1",
            "2001:db8::2",
            SizeSpec::Imix,
            Shape::default(),
        ),
    ];
    for (k, (src, dst, sizes, shape)) in cases.into_iter().enumerate() {
        let tcp = shape.l4 != L4Kind::Udp;
        let v4 = src.parse::<IpAddr>().unwrap().is_ipv4();
        let st = Stamper::with_shape(spec(src, dst, sizes, 16, true), shape.clone()).unwrap();
        let Some(rows) = decode(&st, 48, &format!("shape{k}")) else {
            return;
        };
        for (i, r) in rows.iter().enumerate() {
            let what = format!("case {k} frame {i}: {r:?}");
            assert_eq!(
                r["frame.len"],
                st.spec().sizes.size(i as u64).to_string(),
                "{what}"
            );
            // One tag: 802.1Q; two: an 802.1ad service tag, then the 802.1Q customer tag.
            let (outer, inner) = match shape.vlans[..] {
                [] => (None, None),
                [q] => (None, Some(q)),
                [s, q] => (Some(s), Some(q)),
                _ => unreachable!(),
            };
            let show =
                |v: Option<Vlan>, f: fn(Vlan) -> u16| v.map_or(String::new(), |v| f(v).to_string());
            assert_eq!(r["vlan.id"], show(inner, |v| v.id), "{what}");
            assert_eq!(r["vlan.priority"], show(inner, |v| v.pcp as u16), "{what}");
            assert_eq!(r["ieee8021ad.id"], show(outer, |v| v.id), "{what}");
            assert_eq!(
                r["ieee8021ad.priority"],
                show(outer, |v| v.pcp as u16),
                "{what}"
            );
            if v4 {
                all_good(r, &["ip.checksum.status"]);
            } else {
                assert!(r["ip.src"].is_empty(), "{what}");
            }
            if tcp {
                all_good(r, &["tcp.checksum.status"]);
                let syn = shape.l4 == L4Kind::TcpSyn;
                assert_eq!(r["tcp.flags.syn"], if syn { "1" } else { "0" }, "{what}");
                assert_eq!(r["tcp.flags.ack"], if syn { "0" } else { "1" }, "{what}");
                assert_eq!(r[if v4 { "ip.proto" } else { "ipv6.nxt" }], "6", "{what}");
            } else {
                all_good(r, &["udp.checksum.status"]);
                assert_eq!(r[if v4 { "ip.proto" } else { "ipv6.nxt" }], "17", "{what}");
            }
            // No expert error (a malformed or bad-checksum frame is an "Error", severity 0x800000).
            assert!(
                !r["_ws.expert.severity"].split(',').any(|s| s == "8388608"),
                "{what}"
            );
        }
        if k == 2 {
            // The ranges: destination ports 5000..=5003, sources in 10.0.0.1..=10.0.0.9 but
            // never the destination 10.0.0.2.
            for r in &rows {
                let dp: u16 = r["udp.dstport"].parse().unwrap();
                assert!((5000..=5003).contains(&dp), "{r:?}");
                let s: std::net::Ipv4Addr = r["ip.src"].parse().unwrap();
                assert!(
                    s.octets()[3] >= 1 && s.octets()[3] <= 9 && s.octets()[3] != 2,
                    "{r:?}"
                );
            }
            let ports: std::collections::HashSet<_> =
                rows.iter().map(|r| &r["udp.dstport"]).collect();
            assert_eq!(ports.len(), 4);
        }
        if k >= 3 {
            // IPv6 IMIX: the small frames raised to hold the headers and stamp.
            let small = rows
                .iter()
                .map(|r| r["frame.len"].parse::<u32>().unwrap())
                .min()
                .unwrap();
            assert_eq!(small, if tcp { 90 } else { 78 }, "case {k}");
        }
    }
}
