//! The compiled XDP steering program against the reference matcher (`flow::classify`: the first
//! rule a frame reaches in the mlx5 table order of `flow::order`), frame by frame, through
//! `BPF_PROG_TEST_RUN`.

use rawq_testkit as support;

use support::Rng;

use std::net::{Ipv4Addr, Ipv6Addr};

use rawq::flow::{
    self, Action, IpMatch, Ipv4Net, Ipv6Net, L4Match, L4Proto, MacMatch, Pattern, Rule,
};
use rawq::xdp::bpf::{self, action, Program, Variant, XskMap, VERDICT_BASE, VERDICT_NONE};

const MACS: [[u8; 6]; 5] = [
    [0x02, 0, 0, 0, 0, 1],
    [0x02, 0, 0, 0, 0, 2],
    [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
    // Multicast: the rules to these rank as the mlx5 driver's tables say (flow::order).
    [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01],
    [0x33, 0x33, 0x00, 0x00, 0x00, 0x01],
];
const V4: [[u8; 4]; 4] = [[10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 1, 7], [192, 0, 2, 9]];
const PORTS: [u16; 5] = [9000, 9001, 53, 1234, 65535];

fn v6(last: u8, net: u16) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0..2].copy_from_slice(&0x2001u16.to_be_bytes());
    a[2..4].copy_from_slice(&0x0db8u16.to_be_bytes());
    a[4..6].copy_from_slice(&net.to_be_bytes());
    a[15] = last;
    a
}

/// A random frame: Ethernet, maybe a VLAN tag, then IPv4 / IPv6 / ARP / junk, UDP / TCP / other,
/// sometimes a fragment, sometimes odd header lengths, sometimes truncated (never below 14
/// bytes: the kernel's test run refuses shorter input).
fn frame(r: &mut Rng) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&r.pick(&MACS));
    f.extend_from_slice(&r.pick(&MACS));
    if r.chance(30) {
        f.extend_from_slice(&[0x81, 0x00]);
        let tci = (r.below(8) as u16) << 13 | r.pick(&[1u16, 5, 100, 4095, 0]);
        f.extend_from_slice(&tci.to_be_bytes());
    }
    let et = r.pick(&[0x0800u16, 0x0800, 0x0800, 0x86dd, 0x86dd, 0x0806, 0x88cc]);
    f.extend_from_slice(&et.to_be_bytes());
    let l4proto = r.pick(&[17u8, 17, 6, 6, 1, 58, 132]);
    match et {
        0x0800 => {
            let ihl = r.pick(&[5u8, 5, 5, 5, 6, 15, 4, 0]);
            let mut ip = vec![0u8; 20.max(ihl as usize * 4)];
            ip[0] = 0x40 | ihl;
            ip[8] = 64;
            ip[9] = l4proto;
            if r.chance(15) {
                let off = r.pick(&[1u16, 185, 0x1fff]);
                ip[6..8].copy_from_slice(&off.to_be_bytes());
            } else if r.chance(10) {
                ip[6] = 0x20; // MF only: a first fragment, ports present
            }
            ip[12..16].copy_from_slice(&r.pick(&V4));
            ip[16..20].copy_from_slice(&r.pick(&V4));
            f.extend_from_slice(&ip);
        }
        0x86dd => {
            let mut ip = [0u8; 40];
            ip[0] = 0x60;
            ip[6] = l4proto;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&v6(r.pick(&[1u8, 2, 3]), r.pick(&[0u16, 1])));
            ip[24..40].copy_from_slice(&v6(r.pick(&[1u8, 2, 3]), r.pick(&[0u16, 1])));
            f.extend_from_slice(&ip);
        }
        _ => f.extend_from_slice(&[0u8; 28]),
    }
    f.extend_from_slice(&r.pick(&PORTS).to_be_bytes());
    f.extend_from_slice(&r.pick(&PORTS).to_be_bytes());
    f.extend_from_slice(&[0, 20, 0, 0]);
    f.extend((0..r.below(40)).map(|i| i as u8));
    if r.chance(20) {
        let keep = 14 + r.below(f.len() as u64 - 13) as usize;
        f.truncate(keep);
    }
    f
}

fn udp(dst: Option<u16>, src: Option<u16>) -> Option<L4Match> {
    Some(L4Match {
        proto: L4Proto::Udp,
        src_port: src,
        dst_port: dst,
    })
}

fn rule(pattern: Pattern, priority: u16, action: Action) -> Rule {
    Rule {
        pattern,
        priority,
        action,
    }
}

fn rule_sets() -> Vec<Vec<Rule>> {
    let v4net = |a: [u8; 4], p| Ipv4Net {
        addr: Ipv4Addr::from(a),
        prefix: p,
    };
    let v6net = |a: [u8; 16], p| Ipv6Net {
        addr: Ipv6Addr::from(a),
        prefix: p,
    };
    let d = Pattern::default;
    let set1 = vec![
        rule(
            Pattern {
                l4: udp(Some(9000), None),
                ..d()
            },
            0,
            Action::Queue(0),
        ),
        rule(
            Pattern {
                l4: Some(L4Match {
                    proto: L4Proto::Tcp,
                    src_port: Some(1234),
                    dst_port: None,
                }),
                ..d()
            },
            3,
            Action::Drop,
        ),
        rule(
            Pattern {
                vlan: Some(100),
                ..d()
            },
            2,
            Action::Queue(1),
        ),
        rule(
            Pattern {
                ip: Some(IpMatch::V4 {
                    src: Some(v4net([10, 0, 0, 0], 24)),
                    dst: Some(v4net([10, 0, 1, 6], 31)),
                }),
                ..d()
            },
            1,
            Action::Rss(vec![0, 1]),
        ),
        rule(
            Pattern {
                ip: Some(IpMatch::V6 {
                    src: None,
                    dst: Some(v6net(v6(0, 1), 48)),
                }),
                l4: udp(None, Some(53)),
                ..d()
            },
            1,
            Action::Queue(0),
        ),
        rule(
            Pattern {
                dst_mac: Some(MacMatch {
                    addr: [0x02, 0x11, 0x22, 0x00, 0x00, 0x55],
                    mask: [0xff, 0xff, 0xff, 0, 0, 0xff],
                }),
                ethertype: Some(0x0806),
                ..d()
            },
            0,
            Action::Queue(0),
        ),
        rule(
            Pattern {
                ip_proto: Some(1),
                ..d()
            },
            5,
            Action::Drop,
        ),
        rule(
            Pattern {
                src_mac: Some(MacMatch::exact(MACS[1])),
                ip: Some(IpMatch::V6 {
                    src: Some(v6net(v6(2, 0), 128)),
                    dst: None,
                }),
                ..d()
            },
            4,
            Action::Queue(0),
        ),
        rule(
            Pattern {
                l4: udp(Some(9001), Some(9001)),
                ..d()
            },
            0,
            Action::Drop,
        ),
        rule(
            Pattern {
                vlan: Some(0),
                ethertype: Some(0x86dd),
                ..d()
            },
            0,
            Action::Queue(0),
        ),
        rule(
            Pattern {
                ip: Some(IpMatch::V4 {
                    src: None,
                    dst: None,
                }),
                ip_proto: Some(132),
                ..d()
            },
            7,
            Action::Queue(0),
        ),
    ];
    // Equal priorities everywhere (order decides), and a promiscuous catch-all at the end.
    let mut set2: Vec<Rule> = set1
        .iter()
        .cloned()
        .map(|mut r| {
            r.priority = 10;
            r
        })
        .collect();
    set2.reverse();
    set2.push(rule(
        Pattern {
            promiscuous: true,
            ..d()
        },
        10,
        Action::Drop,
    ));
    // One rule alone.
    let set3 = vec![rule(
        Pattern {
            l4: udp(Some(9000), None),
            ..d()
        },
        0,
        Action::Queue(0),
    )];
    vec![set1, set2, set3, Vec::new()]
}

fn needs_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        support::skip_or_fail::<()>("loading BPF programs needs root");
        return false;
    }
    true
}

#[test]
fn program_agrees_with_the_reference_matcher() {
    if !needs_root() {
        return;
    }
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let frames: Vec<Vec<u8>> = (0..2500).map(|_| frame(&mut r)).collect();
    let map = XskMap::create(2).expect("xskmap");
    let mut matched = 0usize;
    for (si, rules) in rule_sets().iter().enumerate() {
        for rl in rules {
            rl.validate(2).expect("test rules are valid");
        }
        let verdict = bpf::compile(rules, Variant::Verdict).unwrap();
        let vprog = Program::load(&verdict, "rawq_verdict").unwrap_or_else(|e| panic!("{e}"));
        let steer = bpf::compile(
            rules,
            Variant::Steer {
                xskmap_fd: map.as_raw_fd(),
            },
        )
        .unwrap();
        let sprog = Program::load(&steer, "rawq_steer").unwrap_or_else(|e| panic!("{e}"));
        let mut hits = vec![0usize; rules.len()];
        for (fi, f) in frames.iter().enumerate() {
            let want = flow::classify(rules, f)
                .map(|w| rules.iter().position(|x| std::ptr::eq(x, w)).unwrap());
            let got = vprog.test_run(f).unwrap();
            let want_code = want.map_or(VERDICT_NONE, |i| VERDICT_BASE + i as u32);
            assert_eq!(
                got,
                want_code,
                "set {si} frame {fi} ({} bytes) {:02x?}: program says {got}, reference {want:?}",
                f.len(),
                f
            );
            if let Some(i) = want {
                hits[i] += 1;
                matched += 1;
            }
            // The real program: drop for Drop rules; everything else passes here, since test
            // runs are on rx queue 0 with an empty XSKMAP (redirect_map falls back to XDP_PASS).
            let want_steer = match want.map(|i| &rules[i].action) {
                Some(Action::Drop) => action::DROP,
                _ => action::PASS,
            };
            assert_eq!(
                sprog.test_run(f).unwrap(),
                want_steer,
                "set {si} frame {fi}"
            );
        }
        eprintln!("rule set {si}: hits per rule {hits:?}");
        if si == 0 {
            assert!(
                hits.iter().all(|&h| h > 0),
                "the frame generator must exercise every rule of set 0: {hits:?}"
            );
        }
    }
    assert!(
        matched > 1000,
        "too few matches to mean anything: {matched}"
    );
}

#[test]
fn verifier_rejection_carries_the_log() {
    if !needs_root() {
        return;
    }
    use rawq::xdp::bpf::Insn;
    // Reads R2 before writing it: the verifier refuses and says why.
    let bad = [Insn::mov64_reg(bpf::Reg::R0, bpf::Reg::R2), Insn::exit()];
    match Program::load(&bad, "rawq_bad") {
        Err(rawq::Error::Verifier { log, .. }) => {
            assert!(log.contains("R2 !read_ok"), "log: {log}")
        }
        other => panic!("expected a verifier error, got {other:?}"),
    }
}

#[test]
fn hundreds_of_rules_load_and_pick_the_right_one() {
    if !needs_root() {
        return;
    }
    // 500 rules on distinct UDP ports, in mixed priority order, plus a VLAN rule for each
    // tenth: the verifier must accept the program and the lookups stay exact.
    let mut rules = Vec::new();
    for i in 0..500u16 {
        rules.push(rule(
            Pattern {
                l4: udp(Some(10_000 + i), None),
                vlan: if i % 10 == 0 { Some(i % 4096) } else { None },
                ..Pattern::default()
            },
            (500 - i) % 16,
            Action::Queue(0),
        ));
    }
    let insns = bpf::compile(&rules, Variant::Verdict).unwrap();
    let t = std::time::Instant::now();
    let prog = Program::load(&insns, "rawq_many").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{} instructions, loaded in {:?}", insns.len(), t.elapsed());
    let mut r = Rng(7);
    let mut hits = 0;
    for _ in 0..300 {
        let mut f = frame(&mut r);
        // Point the frame at one of the ports (when it has a UDP header where we look).
        if let Some(h) = flow::parse(&f) {
            if let Some(l4) = h.l4 {
                if f.len() >= l4 + 4 {
                    let port = 10_000 + r.below(520) as u16;
                    f[l4 + 2..l4 + 4].copy_from_slice(&port.to_be_bytes());
                }
            }
        }
        let want = flow::classify(&rules, &f)
            .map(|w| rules.iter().position(|x| std::ptr::eq(x, w)).unwrap());
        let want_code = want.map_or(VERDICT_NONE, |i| VERDICT_BASE + i as u32);
        assert_eq!(prog.test_run(&f).unwrap(), want_code, "{f:02x?}");
        hits += want.is_some() as usize;
    }
    assert!(hits > 20, "only {hits} frames matched a rule");
}

/// A random rule: each field present with some probability (values from the frame generator's
/// pools, so that frames match them), sometimes none at all (promiscuous), random priority and
/// action over two queues.
fn random_rule(r: &mut Rng) -> Rule {
    let mac = |r: &mut Rng| MacMatch {
        addr: r.pick(&MACS),
        mask: r.pick(&[
            [0xff; 6],
            [0xff, 0xff, 0xff, 0, 0, 0],
            [0; 6],
            [0x01, 0, 0, 0, 0, 0],
        ]),
    };
    let mut p = Pattern::default();
    if r.chance(30) {
        p.dst_mac = Some(mac(r));
    }
    if r.chance(10) {
        p.src_mac = Some(mac(r));
    }
    if r.chance(10) {
        p.vlan = Some(r.below(4) as u16);
    }
    if r.chance(10) {
        p.ethertype = Some(r.pick(&[0x0800, 0x86dd, 0x0806]));
    }
    if r.chance(30) {
        p.ip = Some(if r.chance(50) {
            let net = |r: &mut Rng| {
                r.chance(60).then(|| Ipv4Net {
                    addr: Ipv4Addr::from(r.pick(&V4)),
                    prefix: r.pick(&[0, 8, 24, 31, 32]),
                })
            };
            IpMatch::V4 {
                src: net(r),
                dst: net(r),
            }
        } else {
            let net = |r: &mut Rng| {
                r.chance(60).then(|| Ipv6Net {
                    addr: Ipv6Addr::from(v6(r.below(3) as u8, r.below(2) as u16)),
                    prefix: r.pick(&[0, 32, 48, 64, 127, 128]),
                })
            };
            IpMatch::V6 {
                src: net(r),
                dst: net(r),
            }
        });
    }
    if r.chance(10) {
        p.ip_proto = Some(r.pick(&[6, 17, 1]));
    }
    if r.chance(40) {
        p.l4 = Some(L4Match {
            proto: r.pick(&[L4Proto::Udp, L4Proto::Tcp]),
            src_port: r.chance(30).then(|| r.pick(&PORTS)),
            dst_port: r.chance(60).then(|| r.pick(&PORTS)),
        });
    }
    p.promiscuous = r.chance(25);
    let action = match r.below(4) {
        0 => Action::Drop,
        1 => Action::Queue(r.below(2) as u16),
        2 => Action::Rss(vec![0, 1]),
        _ => Action::Queue(0),
    };
    rule(p, r.below(4) as u16, action)
}

/// Issue 12 item 2: every rule set the model accepts loads through the real verifier, in both
/// variants (a `promiscuous` rule followed by any other rule used to leave unreachable code), and
/// the program still agrees with `flow::classify`.
#[test]
fn random_rule_sets_all_load() {
    if !needs_root() {
        return;
    }
    let mut r = Rng(0x5eed_1234_abcd_0042);
    let frames: Vec<Vec<u8>> = (0..150).map(|_| frame(&mut r)).collect();
    let map = XskMap::create(2).expect("xskmap");
    // The reported case, in its text form.
    let reported: Vec<Rule> = ["promiscuous -> queue 0", "prio 5 udp dst-port 9000 -> drop"]
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    let mut sets = vec![reported];
    while sets.len() < 400 {
        let n = 1 + r.below(6) as usize;
        let set: Vec<Rule> = (0..n).map(|_| random_rule(&mut r)).collect();
        if flow::validate_rules(&set, 2).is_ok() {
            sets.push(set);
        }
    }
    // Sets where the mlx5 table order differs from plain priority order: a multicast rule that
    // outranks an earlier rule of its priority, or a multicast drop rule that falls behind.
    let reordered = sets
        .iter()
        .filter(|s| {
            let by_prio = {
                let mut o: Vec<usize> = (0..s.len()).collect();
                o.sort_by_key(|&i| s[i].priority);
                o
            };
            by_prio != flow::order::order(s)
        })
        .count();
    assert!(reordered > 40, "too few reordered sets: {reordered}");
    let with_catch_all = sets
        .iter()
        .filter(|s| s.iter().any(|x| x.pattern.is_catch_all()) && s.len() > 1)
        .count();
    assert!(
        with_catch_all > 20,
        "too few sets with a catch-all: {with_catch_all}"
    );
    for (si, rules) in sets.iter().enumerate() {
        let steer = bpf::compile(
            rules,
            Variant::Steer {
                xskmap_fd: map.as_raw_fd(),
            },
        )
        .unwrap();
        Program::load(&steer, "rawq_steer")
            .unwrap_or_else(|e| panic!("set {si} {rules:?} (steer): {e}"));
        let verdict = bpf::compile(rules, Variant::Verdict).unwrap();
        let vprog = Program::load(&verdict, "rawq_verdict")
            .unwrap_or_else(|e| panic!("set {si} {rules:?} (verdict): {e}"));
        for f in &frames {
            let want = flow::classify(rules, f)
                .map(|w| rules.iter().position(|x| std::ptr::eq(x, w)).unwrap());
            let want_code = want.map_or(VERDICT_NONE, |i| VERDICT_BASE + i as u32);
            assert_eq!(vprog.test_run(f).unwrap(), want_code, "set {si} {rules:?}");
        }
    }
}

/// A multicast rule that does not drop (DONT_TRAP on verbs and DV) outranks a rule of its
/// priority given before it (Linux drivers/infiniband/hw/mlx5/fs.c `ib_prio_to_core_prio`: table
/// 2p before 2p+1), and a multicast drop rule (`MLX5_IB_FLOW_MCAST_PRIO`) comes after every
/// priority. On XDP the DONT_TRAP rule takes the frame: the program acts on it alone.
#[test]
fn program_ranks_multicast_rules_as_the_mlx5_tables() {
    if !needs_root() {
        return;
    }
    let map = XskMap::create(2).expect("xskmap");
    // 01:00:5e:00:00:01 <- 02:00:00:00:00:01, IPv4 UDP 10.0.0.1:1234 -> 224.0.0.1:9000.
    let mut mc = MACS[3].to_vec();
    mc.extend_from_slice(&MACS[0]);
    mc.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 36, 0, 0, 0, 0, 64, 17, 0, 0]);
    mc.extend_from_slice(&[10, 0, 0, 1, 224, 0, 0, 1]);
    mc.extend_from_slice(&[0x04, 0xd2, 0x23, 0x28, 0, 16, 0, 0]);
    mc.extend_from_slice(&[0u8; 8]);
    let udp = |prio: u16, act: &str| -> Rule {
        format!("prio {prio} udp dst-port 9000 -> {act}")
            .parse()
            .unwrap()
    };
    let mcast = |prio: u16, act: &str| -> Rule {
        format!("prio {prio} eth dst 01:00:5e:00:00:01 -> {act}")
            .parse()
            .unwrap()
    };
    for (rules, want, steer_action) in [
        (vec![udp(1, "drop"), mcast(1, "queue 0")], 1, action::PASS),
        (vec![mcast(0, "drop"), udp(15, "queue 0")], 1, action::PASS),
        (vec![mcast(0, "drop"), udp(15, "drop")], 1, action::DROP),
        (vec![mcast(3, "queue 0"), udp(0, "drop")], 1, action::DROP),
    ] {
        flow::validate_rules(&rules, 2).unwrap();
        let first = flow::order::steer(&rules, &mc).first();
        assert_eq!(first, Some(want), "{rules:?}");
        let v = Program::load(
            &bpf::compile(&rules, Variant::Verdict).unwrap(),
            "rawq_verdict",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v.test_run(&mc).unwrap(),
            VERDICT_BASE + want as u32,
            "{rules:?}"
        );
        let steer = bpf::compile(
            &rules,
            Variant::Steer {
                xskmap_fd: map.as_raw_fd(),
            },
        )
        .unwrap();
        let s = Program::load(&steer, "rawq_steer").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.test_run(&mc).unwrap(), steer_action, "{rules:?}");
    }
}
