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

/// Linux drivers/infiniband/hw/mlx5/fs.c `mlx5_ib_create_flow` refuses `flow_attr->priority >
/// MLX5_IB_FLOW_LAST_PRIO` (mlx5_ib.h: `MLX5_BY_PASS_NUM_REGULAR_PRIOS - 1`, 15) with ENOMEM:
/// rawq refuses such a rule before any backend sees it, in `validate` and in the text form.
#[test]
fn priority_above_15_is_refused_as_mlx5_refuses_it() {
    let mut r = Rule::to_queue(udp_to(1), 0);
    r.priority = 15;
    assert!(r.validate(1).is_ok());
    r.priority = 16;
    match r.validate(1) {
        Err(RuleError::Invalid { field, reason }) => {
            assert_eq!(field, "priority");
            assert!(reason.contains("0-15"), "{reason}");
        }
        other => panic!("expected a priority error, got {other:?}"),
    }
    assert_eq!(
        "prio 15 udp dst-port 1 -> queue 0"
            .parse::<Rule>()
            .map(|r| r.priority),
        Ok(15)
    );
    match "prio 16 udp dst-port 1 -> queue 0".parse::<Rule>() {
        Err(RuleError::Parse { index, reason, .. }) => {
            assert_eq!(index, 1);
            assert!(reason.contains("0-15"), "{reason}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

/// A UDP frame to port 9000 with destination MAC `dst`.
fn udp_9000_to(dst: Mac) -> Vec<u8> {
    let mut f = v4_frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 9000);
    f[0..6].copy_from_slice(&dst);
    f
}

fn rules(texts: &[&str]) -> Vec<Rule> {
    texts.iter().map(|t| t.parse().unwrap()).collect()
}

/// The order of the kernel's flow tables (Linux drivers/infiniband/hw/mlx5/fs.c `get_flow_table`,
/// `ib_prio_to_core_prio`): a DONT_TRAP rule (rawq: multicast destination, not drop) at
/// priority p sits in table 2p, before every other rule of priority p (table 2p+1), whatever the
/// order they were given in; a multicast-only rule without DONT_TRAP (rawq: a multicast drop)
/// sits in `MLX5_IB_FLOW_MCAST_PRIO`, after every regular priority.
#[test]
fn classify_follows_the_kernel_flow_tables() {
    let mc = udp_9000_to([0x01, 0x00, 0x5e, 0, 0, 1]);
    let r = rules(&[
        "udp dst-port 9000 -> queue 0",
        "eth dst 01:00:5e:00:00:01 -> queue 1",
    ]);
    assert_eq!(classify(&r, &mc), Some(&r[1]), "DONT_TRAP table 0 first");
    let r = rules(&[
        "eth dst 01:00:5e:00:00:01 -> drop",
        "prio 15 udp dst-port 9000 -> queue 0",
    ]);
    assert_eq!(classify(&r, &mc), Some(&r[1]), "multicast drop last");
    // A mask without the group bit, or a unicast address: an ordinary rule (table 2p+1).
    let r = rules(&[
        "prio 1 udp dst-port 9000 -> queue 0",
        "eth dst 01:00:5e:00:00:01/fe:ff:ff:ff:ff:ff -> drop",
    ]);
    assert_eq!(classify(&r, &mc), Some(&r[1]));
    let uc = udp_9000_to([0x02, 0, 0, 0, 0, 2]);
    let r = rules(&[
        "prio 1 udp dst-port 9000 -> queue 0",
        "eth dst 02:00:00:00:00:02 -> drop",
    ]);
    assert_eq!(classify(&r, &uc), Some(&r[1]));
}

/// fs.c `_create_flow_rule`: a DONT_TRAP rule forwards to its TIR and to the next priority, so
/// the frame goes on; a table applies one entry, so a second DONT_TRAP rule of the same table
/// gets nothing; the kernel gets what no rule took.
#[test]
fn steer_copies_dont_trap_matches_and_goes_on() {
    use order::{steer, Steering};
    let mc = udp_9000_to([0x01, 0x00, 0x5e, 0, 0, 1]);
    let r = rules(&[
        "prio 2 udp dst-port 9000 -> queue 0",
        "prio 1 eth dst 01:00:5e:00:00:01 -> queue 1",
        "prio 1 eth dst 01:00:5e:00:00:00/ff:ff:ff:00:00:00 -> queue 2",
        "prio 3 eth dst 01:00:00:00:00:00/01:00:00:00:00:00 -> queue 3",
    ]);
    let s = steer(&r, &mc);
    assert_eq!(
        s,
        Steering {
            copies: vec![1],
            taken_by: Some(0)
        }
    );
    assert!(!s.to_kernel());
    assert_eq!(s.first(), Some(1));
    // Port 9001: only the multicast rules; the frame ends with the kernel.
    let mut other = mc.clone();
    other[36..38].copy_from_slice(&9001u16.to_be_bytes());
    let s = steer(&r, &other);
    assert_eq!((s.copies, s.taken_by), (vec![1, 3], None));
    // A multicast drop rule drops only what no other rule took.
    let r = rules(&[
        "eth dst 01:00:5e:00:00:01 -> drop",
        "prio 9 udp dst-port 9000 -> queue 0",
    ]);
    assert_eq!(steer(&r, &mc).taken_by, Some(1));
    assert_eq!(steer(&r, &other).taken_by, Some(0));
    assert_eq!(order::rank(&r[0]), order::MCAST_TABLE);
    assert_eq!(order::rank(&r[1]), 19);
}

/// mlx5 core fs_core.c `add_rule_fg` / `check_conflicting_ftes`: a second rule with the same
/// match in the same table joins the first's entry, and is refused with EEXIST when its flow tag
/// or its drop action differs — always, for rawq's distinctly tagged rules.
#[test]
fn rules_that_would_share_a_flow_table_entry_are_refused() {
    let coll = |t: &[&str]| match validate_rules(&rules(t), 4) {
        Err(RuleError::Collision {
            first,
            second,
            reason,
        }) => {
            assert!(
                reason.contains(t[first]) || reason.contains("EEXIST"),
                "{reason}"
            );
            Some((first, second))
        }
        Ok(()) => None,
        Err(e) => panic!("{t:?}: {e}"),
    };
    assert_eq!(
        coll(&[
            "udp dst-port 9000 -> queue 0",
            "udp dst-port 9000 -> queue 1"
        ]),
        Some((0, 1))
    );
    // The same after masking, or written differently.
    assert_eq!(
        coll(&[
            "tcp -> queue 0",
            "ipv4 dst 10.0.0.1/24 -> queue 1",
            "ipv4 dst 10.0.0.9/24 -> drop",
        ]),
        Some((1, 2))
    );
    assert_eq!(
        coll(&["proto 17 -> queue 0", "udp -> queue 1"]),
        Some((0, 1))
    );
    assert_eq!(
        coll(&[
            "promiscuous -> queue 0",
            "prio 3 udp -> queue 1",
            "promiscuous -> queue 2"
        ]),
        Some((0, 2))
    );
    // Multicast drop rules share the multicast table whatever their priority.
    assert_eq!(
        coll(&[
            "prio 2 eth dst 01:00:5e:00:00:01 -> drop",
            "prio 7 eth dst 01:00:5e:00:00:01 -> queue 0",
            "prio 9 eth dst 01:00:5e:00:00:01 -> drop",
        ]),
        None,
        "two drops merge; the forwarding one is in table 14"
    );
    // Different priorities, different matches: no collision.
    assert_eq!(
        coll(&[
            "udp dst-port 9000 -> queue 0",
            "prio 1 udp dst-port 9000 -> queue 1"
        ]),
        None
    );
    assert_eq!(
        coll(&[
            "udp dst-port 9000 -> queue 0",
            "udp dst-port 9001 -> queue 0"
        ]),
        None
    );
    let e = validate_rules(
        &rules(&[
            "udp dst-port 9000 -> queue 0",
            "udp dst-port 9000 -> queue 1",
        ]),
        2,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("udp dst-port 9000 -> queue 0") && e.contains("udp dst-port 9000 -> queue 1"),
        "{e}"
    );
}
