//! Hand-written expectations for the reference matcher.

use super::*;

/// Builds an Ethernet frame: optional VLAN, then an IPv4/UDP or TCP header with the given fields.
fn v4_frame(vlan: Option<u16>, proto: u8, src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(28u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&[0, 8, 0, 0]);
    f
}

fn udp_to(port: u16) -> Pattern {
    Pattern {
        l4: Some(L4Match {
            proto: L4Proto::Udp,
            src_port: None,
            dst_port: Some(port),
        }),
        ..Default::default()
    }
}

#[test]
fn udp_port_rule_matches_only_its_port_and_protocol() {
    let p = udp_to(9000);
    assert!(pattern_matches(
        &p,
        &v4_frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 9000)
    ));
    assert!(pattern_matches(
        &p,
        &v4_frame(Some(5), 17, [10, 0, 0, 1], [10, 0, 0, 2], 1, 9000)
    ));
    assert!(!pattern_matches(
        &p,
        &v4_frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 9001)
    ));
    assert!(!pattern_matches(
        &p,
        &v4_frame(None, 6, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 9000)
    ));
    let mut short = v4_frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 9000);
    short.truncate(14 + 20 + 3);
    assert!(
        !pattern_matches(&p, &short),
        "ports past the end do not match"
    );
    let mut frag = v4_frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 9000);
    frag[14 + 6..14 + 8].copy_from_slice(&0x0010u16.to_be_bytes());
    assert!(
        !pattern_matches(&p, &frag),
        "non-first fragments carry no ports"
    );
}

#[test]
fn prefixes_vlan_and_macs() {
    let f = v4_frame(Some(100), 17, [192, 0, 2, 7], [198, 51, 100, 9], 5, 6);
    let mut p = Pattern {
        vlan: Some(100),
        ip: Some(IpMatch::V4 {
            src: Some(Ipv4Net {
                addr: Ipv4Addr::new(192, 0, 2, 0),
                prefix: 24,
            }),
            dst: None,
        }),
        ..Default::default()
    };
    assert!(pattern_matches(&p, &f));
    p.vlan = Some(101);
    assert!(!pattern_matches(&p, &f));
    p.vlan = None;
    p.dst_mac = Some(MacMatch {
        addr: [0x02, 0, 0, 0, 0, 0x99],
        mask: [0xff, 0xff, 0xff, 0xff, 0xff, 0],
    });
    assert!(pattern_matches(&p, &f), "masked-out byte is ignored");
    p.dst_mac = Some(MacMatch::exact([0x02, 0, 0, 0, 0, 0x99]));
    assert!(!pattern_matches(&p, &f));
}

#[test]
fn classify_takes_lowest_priority_number_then_first() {
    let f = v4_frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 9000);
    let rules = vec![
        Rule {
            pattern: udp_to(9000),
            priority: 5,
            action: Action::Queue(0),
        },
        Rule {
            pattern: udp_to(9000),
            priority: 1,
            action: Action::Queue(1),
        },
        Rule {
            pattern: udp_to(9000),
            priority: 1,
            action: Action::Queue(2),
        },
    ];
    assert_eq!(classify(&rules, &f).unwrap().action, Action::Queue(1));
    let other = v4_frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 22);
    assert!(classify(&rules, &other).is_none());
}

#[test]
fn validation_names_the_field() {
    let err = |r: Rule, q| match r.validate(q) {
        Err(RuleError::Invalid { field, .. }) => field,
        other => panic!("expected an error, got {other:?}"),
    };
    assert_eq!(err(Rule::to_queue(Pattern::default(), 0), 1), "pattern");
    assert_eq!(err(Rule::to_queue(udp_to(1), 4), 2), "action");
    let mut p = udp_to(1);
    p.ip_proto = Some(6);
    assert_eq!(err(Rule::to_queue(p, 0), 1), "ip_proto");
    let mut p = udp_to(1);
    p.ethertype = Some(0x0806);
    assert_eq!(err(Rule::to_queue(p, 0), 1), "ethertype");
    let mut p = udp_to(1);
    p.ethertype = Some(0x8100);
    assert_eq!(err(Rule::to_queue(p.clone(), 0), 1), "ethertype");
    p.vlan = Some(5);
    assert_eq!(err(Rule::to_queue(p, 0), 1), "ethertype");
    let mut p = udp_to(1);
    p.vlan = Some(4096);
    assert_eq!(err(Rule::to_queue(p, 0), 1), "vlan");
    let rss = |qs: Vec<u16>| Rule {
        pattern: udp_to(1),
        priority: 0,
        action: Action::Rss(qs),
    };
    assert_eq!(err(rss(vec![0, 1, 0]), 2), "action");
    assert_eq!(err(rss(vec![]), 2), "action");
    assert_eq!(err(rss(vec![0, 2]), 2), "action");
    assert!(rss(vec![1, 0]).validate(2).is_ok());
    let v6 = |prefix| Pattern {
        ip: Some(IpMatch::V6 {
            src: Some(Ipv6Net {
                addr: Ipv6Addr::UNSPECIFIED,
                prefix,
            }),
            dst: None,
        }),
        ..Default::default()
    };
    assert_eq!(err(Rule::to_queue(v6(129), 0), 1), "ipv6");
    assert!(Rule::to_queue(v6(128), 0).validate(1).is_ok());
    let mut p = v6(64);
    p.ethertype = Some(0x0800);
    assert_eq!(err(Rule::to_queue(p, 0), 1), "ethertype");
    let p = Pattern {
        ip_proto: Some(1),
        ethertype: Some(0x0806),
        ..Default::default()
    };
    assert_eq!(err(Rule::to_queue(p, 0), 1), "ip_proto");
    let p = Pattern {
        promiscuous: true,
        ..Default::default()
    };
    assert!(Rule::to_queue(p, 0).validate(1).is_ok());
}
