//! Property tests of the flow rule model: the reference matcher against frames built from chosen
//! fields, the text form's round trip, and robustness of every parser against arbitrary input.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use rawq::flow::order::{dont_trap, rank, steer};
use rawq::flow::toeplitz::{hash_frame, HashFields, DEFAULT_KEY};
use rawq::flow::verbs::compile;
use rawq::flow::{
    classify, matches, Action, IpMatch, Ipv4Net, Ipv6Net, L4Match, L4Proto, MacMatch, Pattern, Rule,
};

/// The L3 part of a generated frame.
#[derive(Clone, Debug)]
enum L3 {
    /// A non-IP ethertype with some payload.
    Other(u16),
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: u8,
        /// IPv4 options, in 32-bit words (IHL = 5 + options).
        options: u8,
        /// Fragment offset (0 = first or only fragment).
        frag_off: u16,
        ports: (u16, u16),
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        next: u8,
        ports: (u16, u16),
    },
}

#[derive(Clone, Debug)]
struct FrameSpec {
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<u16>,
    l3: L3,
}

impl FrameSpec {
    fn l3_off(&self) -> usize {
        if self.vlan.is_some() {
            18
        } else {
            14
        }
    }

    fn build(&self) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&self.dst);
        f.extend_from_slice(&self.src);
        if let Some(v) = self.vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            // Priority bits set too: they must not disturb the VLAN id.
            f.extend_from_slice(&(0xa000 | v).to_be_bytes());
        }
        match &self.l3 {
            L3::Other(et) => {
                f.extend_from_slice(&et.to_be_bytes());
                f.extend_from_slice(&[0x5a; 46]);
            }
            L3::V4 {
                src,
                dst,
                proto,
                options,
                frag_off,
                ports,
            } => {
                f.extend_from_slice(&[0x08, 0x00]);
                let ihl = 5 + *options as usize;
                let mut ip = vec![0u8; ihl * 4];
                ip[0] = 0x40 | ihl as u8;
                ip[6..8].copy_from_slice(&(0x4000 | frag_off).to_be_bytes()); // DF set
                ip[8] = 64;
                ip[9] = *proto;
                ip[12..16].copy_from_slice(&src.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                f.extend_from_slice(&ip);
                f.extend_from_slice(&ports.0.to_be_bytes());
                f.extend_from_slice(&ports.1.to_be_bytes());
                f.extend_from_slice(&[0; 16]);
            }
            L3::V6 {
                src,
                dst,
                next,
                ports,
            } => {
                f.extend_from_slice(&[0x86, 0xdd]);
                let mut ip = [0u8; 40];
                ip[0] = 0x60;
                ip[6] = *next;
                ip[7] = 64;
                ip[8..24].copy_from_slice(&src.octets());
                ip[24..40].copy_from_slice(&dst.octets());
                f.extend_from_slice(&ip);
                f.extend_from_slice(&ports.0.to_be_bytes());
                f.extend_from_slice(&ports.1.to_be_bytes());
                f.extend_from_slice(&[0; 16]);
            }
        }
        f
    }

    /// Offset of the L4 header if the frame carries one the matcher reads.
    fn l4_off(&self) -> Option<usize> {
        match &self.l3 {
            L3::V4 {
                options, frag_off, ..
            } if *frag_off == 0 => Some(self.l3_off() + 20 + 4 * *options as usize),
            L3::V6 { .. } => Some(self.l3_off() + 40),
            _ => None,
        }
    }

    fn ip_proto(&self) -> Option<u8> {
        match &self.l3 {
            L3::V4 { proto, .. } => Some(*proto),
            L3::V6 { next, .. } => Some(*next),
            L3::Other(_) => None,
        }
    }

    fn ethertype(&self) -> u16 {
        match &self.l3 {
            L3::Other(et) => *et,
            L3::V4 { .. } => 0x0800,
            L3::V6 { .. } => 0x86dd,
        }
    }

    fn ports(&self) -> Option<(u16, u16)> {
        match &self.l3 {
            L3::V4 { ports, .. } | L3::V6 { ports, .. } => Some(*ports),
            L3::Other(_) => None,
        }
    }
}

fn mac() -> impl Strategy<Value = [u8; 6]> {
    any::<[u8; 6]>()
}

fn proto() -> impl Strategy<Value = u8> {
    prop_oneof![Just(6u8), Just(17u8), any::<u8>()]
}

fn frame_spec() -> impl Strategy<Value = FrameSpec> {
    let other = prop_oneof![
        Just(0x0806u16),
        Just(0x88f7u16),
        Just(0x88ccu16),
        0x0600u16..0x0800
    ]
    .prop_map(L3::Other);
    let v4 = (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        proto(),
        prop_oneof![3 => Just(0u8), 1 => 1u8..=10],
        prop_oneof![3 => Just(0u16), 1 => 1u16..0x2000],
        any::<(u16, u16)>(),
    )
        .prop_map(|(s, d, proto, options, frag_off, ports)| L3::V4 {
            src: s.into(),
            dst: d.into(),
            proto,
            options,
            frag_off,
            ports,
        });
    let v6 = (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        proto(),
        any::<(u16, u16)>(),
    )
        .prop_map(|(s, d, next, ports)| L3::V6 {
            src: s.into(),
            dst: d.into(),
            next,
            ports,
        });
    (
        mac(),
        mac(),
        proptest::option::of(0u16..4096),
        prop_oneof![other, v4, v6],
    )
        .prop_map(|(dst, src, vlan, l3)| FrameSpec { dst, src, vlan, l3 })
}

/// A subset of the frame's fields, chosen by `pick` bits, as a rule; prefixes of random length.
fn rule_from(f: &FrameSpec, pick: u16, v4len: (u8, u8), v6len: (u8, u8)) -> Rule {
    let on = |bit: u16| pick & (1 << bit) != 0;
    let mut p = Pattern {
        promiscuous: true,
        ..Default::default()
    };
    if on(0) {
        p.dst_mac = Some(MacMatch::exact(f.dst));
    }
    if on(1) {
        p.src_mac = Some(MacMatch::exact(f.src));
    }
    if on(2) {
        p.vlan = f.vlan;
    }
    if on(3) {
        p.ethertype = Some(f.ethertype());
    }
    match &f.l3 {
        L3::V4 { src, dst, .. } if on(4) => {
            p.ip = Some(IpMatch::V4 {
                src: on(5).then_some(Ipv4Net {
                    addr: *src,
                    prefix: v4len.0,
                }),
                dst: on(6).then_some(Ipv4Net {
                    addr: *dst,
                    prefix: v4len.1,
                }),
            })
        }
        L3::V6 { src, dst, .. } if on(4) => {
            p.ip = Some(IpMatch::V6 {
                src: on(5).then_some(Ipv6Net {
                    addr: *src,
                    prefix: v6len.0,
                }),
                dst: on(6).then_some(Ipv6Net {
                    addr: *dst,
                    prefix: v6len.1,
                }),
            })
        }
        _ => {}
    }
    if on(7) {
        p.ip_proto = f.ip_proto();
    }
    let l4proto = match f.ip_proto() {
        Some(6) => Some(L4Proto::Tcp),
        Some(17) => Some(L4Proto::Udp),
        _ => None,
    };
    if let (Some(proto), Some((sp, dp)), true, true) =
        (l4proto, f.ports(), f.l4_off().is_some(), on(8))
    {
        p.l4 = Some(L4Match {
            proto,
            src_port: on(9).then_some(sp),
            dst_port: on(10).then_some(dp),
        });
    }
    Rule::to_queue(p, 0)
}

/// The frame length the rule needs for all its fields to be readable.
fn needed_len(f: &FrameSpec, r: &Rule) -> usize {
    let p = &r.pattern;
    let l3 = f.l3_off();
    let mut need = l3; // the Ethernet header (and tag) is always parsed
    let ip_len = match f.l3 {
        L3::V4 { .. } => 20,
        L3::V6 { .. } => 40,
        L3::Other(_) => 0,
    };
    if p.ip.is_some() || p.ip_proto.is_some() || p.l4.is_some() {
        need = l3 + ip_len;
    }
    if p.l4.is_some() {
        // The ports, read from the L4 header.
        need = f.l4_off().map_or(usize::MAX, |o| o + 4);
    }
    need
}

/// A change to one field of a pattern.
type Edit = Box<dyn FnOnce(&mut Pattern)>;

/// The rule with one of its set fields changed so that it no longer matches `f`.
fn mutate(f: &FrameSpec, r: &Rule, which: usize, flip: u8) -> Option<Rule> {
    let mut r = r.clone();
    let p = &mut r.pattern;
    let flip = flip | 1; // never zero
    let mut candidates: Vec<Edit> = Vec::new();
    if p.dst_mac.is_some() {
        candidates.push(Box::new(move |p| {
            if let Some(m) = p.dst_mac.as_mut() {
                m.addr[5] ^= flip;
            }
        }));
    }
    if p.src_mac.is_some() {
        candidates.push(Box::new(move |p| {
            if let Some(m) = p.src_mac.as_mut() {
                m.addr[0] ^= flip;
            }
        }));
    }
    if p.vlan.is_some() {
        candidates.push(Box::new(move |p| {
            p.vlan = p.vlan.map(|v| (v + 1 + flip as u16) % 4096);
        }));
    }
    if p.ethertype.is_some() {
        candidates.push(Box::new(move |p| {
            p.ethertype = p.ethertype.map(|e| e ^ (flip as u16) << 8);
        }));
    }
    match &p.ip {
        Some(IpMatch::V4 { src, dst }) => {
            if src.is_some_and(|n| n.prefix > 0) {
                candidates.push(Box::new(|p| {
                    if let Some(IpMatch::V4 { src: Some(n), .. }) = p.ip.as_mut() {
                        n.addr = (u32::from(n.addr) ^ (1 << (32 - n.prefix as u32))).into();
                    }
                }));
            }
            if dst.is_some_and(|n| n.prefix > 0) {
                candidates.push(Box::new(|p| {
                    if let Some(IpMatch::V4 { dst: Some(n), .. }) = p.ip.as_mut() {
                        n.addr = (u32::from(n.addr) ^ (1 << (32 - n.prefix as u32))).into();
                    }
                }));
            }
            // The other IP version.
            candidates.push(Box::new(|p| {
                p.ip = Some(IpMatch::V6 {
                    src: None,
                    dst: None,
                });
                p.ethertype = None;
            }));
        }
        Some(IpMatch::V6 { src, dst }) => {
            if src.is_some_and(|n| n.prefix > 0) {
                candidates.push(Box::new(|p| {
                    if let Some(IpMatch::V6 { src: Some(n), .. }) = p.ip.as_mut() {
                        n.addr = (u128::from(n.addr) ^ (1 << (128 - n.prefix as u32))).into();
                    }
                }));
            }
            if dst.is_some_and(|n| n.prefix > 0) {
                candidates.push(Box::new(|p| {
                    if let Some(IpMatch::V6 { dst: Some(n), .. }) = p.ip.as_mut() {
                        n.addr = (u128::from(n.addr) ^ (1 << (128 - n.prefix as u32))).into();
                    }
                }));
            }
            candidates.push(Box::new(|p| {
                p.ip = Some(IpMatch::V4 {
                    src: None,
                    dst: None,
                });
                p.ethertype = None;
            }));
        }
        None => {}
    }
    if p.ip_proto.is_some() {
        candidates.push(Box::new(move |p| {
            p.ip_proto = p.ip_proto.map(|x| x ^ flip);
            p.l4 = None;
        }));
    }
    if let Some(l4) = p.l4 {
        if l4.src_port.is_some() {
            candidates.push(Box::new(move |p| {
                if let Some(l4) = p.l4.as_mut() {
                    l4.src_port = l4.src_port.map(|x| x ^ flip as u16);
                }
            }));
        }
        if l4.dst_port.is_some() {
            candidates.push(Box::new(move |p| {
                if let Some(l4) = p.l4.as_mut() {
                    l4.dst_port = l4.dst_port.map(|x| x ^ (flip as u16) << 8);
                }
            }));
        }
        candidates.push(Box::new(|p| {
            if let Some(l4) = p.l4.as_mut() {
                l4.proto = match l4.proto {
                    L4Proto::Udp => L4Proto::Tcp,
                    L4Proto::Tcp => L4Proto::Udp,
                };
            }
            p.ip_proto = None;
        }));
    }
    // A VLAN requirement on an untagged frame.
    if f.vlan.is_none() && p.vlan.is_none() {
        candidates.push(Box::new(move |p| p.vlan = Some(flip as u16)));
    }
    if candidates.is_empty() {
        return None;
    }
    let n = candidates.len();
    (candidates.swap_remove(which % n))(p);
    Some(r)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A rule built from a frame's own fields matches it, also when cut anywhere at or past the
    /// last byte the rule reads, and not when cut before that.
    #[test]
    fn own_fields_match(f in frame_spec(), pick in any::<u16>(), v4 in (0u8..=32, 0u8..=32),
                        v6 in (0u8..=128, 0u8..=128), cut in any::<prop::sample::Index>()) {
        let frame = f.build();
        let r = rule_from(&f, pick, v4, v6);
        prop_assert!(matches(&r, &frame), "{r} should match {f:?}");
        let need = needed_len(&f, &r);
        prop_assert!(need <= frame.len());
        let n = cut.index(frame.len() + 1);
        prop_assert_eq!(matches(&r, &frame[..n]), n >= need, "cut to {} (needs {}): {}", n, need, r);
    }

    /// Changing one field of a matching rule makes it miss.
    #[test]
    fn one_changed_field_misses(f in frame_spec(), pick in any::<u16>(), v4 in (0u8..=32, 0u8..=32),
                                v6 in (0u8..=128, 0u8..=128), which in any::<usize>(),
                                flip in any::<u8>()) {
        let frame = f.build();
        let r = rule_from(&f, pick, v4, v6);
        if let Some(m) = mutate(&f, &r, which, flip) {
            prop_assert!(!matches(&m, &frame), "{m} (from {r}) should not match {f:?}");
        }
    }

    /// A UDP/TCP rule never matches a non-first IPv4 fragment (it carries no ports), nor a frame
    /// of the other transport protocol, whatever the ports.
    #[test]
    fn l4_needs_ports_of_its_protocol(f in frame_spec(), ports in any::<(Option<u16>, Option<u16>)>(),
                                      udp in any::<bool>()) {
        let frame = f.build();
        let proto = if udp { L4Proto::Udp } else { L4Proto::Tcp };
        let r = Rule::to_queue(Pattern {
            l4: Some(L4Match { proto, src_port: ports.0, dst_port: ports.1 }),
            ..Default::default()
        }, 0);
        let carries = f.l4_off().is_some() && f.ip_proto() == Some(proto.ip_proto());
        let ports_ok = f.ports().is_some_and(|(sp, dp)| {
            ports.0.is_none_or(|p| p == sp) && ports.1.is_none_or(|p| p == dp)
        });
        prop_assert_eq!(matches(&r, &frame), carries && ports_ok, "{} on {:?}", r, f);
    }

    /// Bits past a prefix do not matter.
    #[test]
    fn host_bits_are_ignored(f in frame_spec(), len in 0u8..=32, len6 in 0u8..=128,
                             noise in any::<u128>()) {
        let frame = f.build();
        let p = match &f.l3 {
            L3::V4 { src, .. } => {
                let keep = if len == 0 { 0 } else { u32::MAX << (32 - len as u32) };
                let addr = (u32::from(*src) & keep) | (noise as u32 & !keep);
                IpMatch::V4 { src: Some(Ipv4Net { addr: addr.into(), prefix: len }), dst: None }
            }
            L3::V6 { dst, .. } => {
                let keep = if len6 == 0 { 0 } else { u128::MAX << (128 - len6 as u32) };
                let addr = (u128::from(*dst) & keep) | (noise & !keep);
                IpMatch::V6 { src: None, dst: Some(Ipv6Net { addr: addr.into(), prefix: len6 }) }
            }
            L3::Other(_) => return Ok(()),
        };
        let r = Rule::to_queue(Pattern { ip: Some(p), ..Default::default() }, 0);
        prop_assert!(matches(&r, &frame), "{}", r);
    }

    /// The matcher, the hash and the header parser never panic on arbitrary bytes.
    #[test]
    fn arbitrary_bytes_do_not_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128),
                                    r in rule()) {
        let _ = matches(&r, &bytes);
        let _ = hash_frame(&DEFAULT_KEY, HashFields::ALL, &bytes);
        let _ = rawq::flow::parse(&bytes);
    }
}

fn ipv4net() -> impl Strategy<Value = Ipv4Net> {
    (any::<[u8; 4]>(), 0u8..=32).prop_map(|(a, prefix)| Ipv4Net {
        addr: a.into(),
        prefix,
    })
}

fn ipv6net() -> impl Strategy<Value = Ipv6Net> {
    (any::<[u8; 16]>(), 0u8..=128).prop_map(|(a, prefix)| Ipv6Net {
        addr: a.into(),
        prefix,
    })
}

fn mac_match() -> impl Strategy<Value = MacMatch> {
    prop_oneof![
        mac().prop_map(MacMatch::exact),
        (mac(), mac()).prop_map(|(addr, mask)| MacMatch { addr, mask }),
    ]
}

/// Any rule the text form can express (VLAN ids of 12 bits, prefixes within range, non-empty
/// RSS lists); not necessarily a valid one.
fn rule() -> impl Strategy<Value = Rule> {
    use proptest::option::of;
    let ip = of(prop_oneof![
        (of(ipv4net()), of(ipv4net())).prop_map(|(src, dst)| IpMatch::V4 { src, dst }),
        (of(ipv6net()), of(ipv6net())).prop_map(|(src, dst)| IpMatch::V6 { src, dst }),
    ]);
    let l4 = of((
        prop_oneof![Just(L4Proto::Udp), Just(L4Proto::Tcp)],
        of(any::<u16>()),
        of(any::<u16>()),
    )
        .prop_map(|(proto, src_port, dst_port)| L4Match {
            proto,
            src_port,
            dst_port,
        }));
    let pattern = (
        of(mac_match()),
        of(mac_match()),
        of(0u16..4096),
        of(any::<u16>()),
        ip,
        of(any::<u8>()),
        l4,
        any::<bool>(),
    )
        .prop_map(
            |(dst_mac, src_mac, vlan, ethertype, ip, ip_proto, l4, promiscuous)| Pattern {
                dst_mac,
                src_mac,
                vlan,
                ethertype,
                ip,
                ip_proto,
                l4,
                promiscuous,
            },
        );
    let action = prop_oneof![
        any::<u16>().prop_map(Action::Queue),
        proptest::collection::vec(any::<u16>(), 1..8).prop_map(Action::Rss),
        Just(Action::Drop),
    ];
    (pattern, 0u16..=15, action).prop_map(|(pattern, priority, action)| Rule {
        pattern,
        priority,
        action,
    })
}

/// Token soup from the rule vocabulary: far more likely than random text to reach deep parser
/// states.
fn token_soup() -> impl Strategy<Value = String> {
    let tok = prop_oneof![
        Just("prio".to_string()),
        Just("promiscuous".to_string()),
        Just("eth".to_string()),
        Just("src".to_string()),
        Just("dst".to_string()),
        Just("vlan".to_string()),
        Just("ethertype".to_string()),
        Just("ipv4".to_string()),
        Just("ipv6".to_string()),
        Just("proto".to_string()),
        Just("udp".to_string()),
        Just("tcp".to_string()),
        Just("src-port".to_string()),
        Just("dst-port".to_string()),
        Just("->".to_string()),
        Just("queue".to_string()),
        Just("rss".to_string()),
        Just("drop".to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<u16>().prop_map(|n| format!("0x{n:x}")),
        proptest::collection::vec(any::<u8>(), 1..5).prop_map(|v| v
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")),
        ipv4net().prop_map(|n| format!("{}/{}", n.addr, n.prefix)),
        ipv6net().prop_map(|n| format!("{}/{}", n.addr, n.prefix)),
        mac_match().prop_map(|m| {
            let h = |a: [u8; 6]| a.map(|b| format!("{b:02x}")).join(":");
            format!("{}/{}", h(m.addr), h(m.mask))
        }),
        "[ -~]{0,12}",
    ];
    proptest::collection::vec(tok, 0..16).prop_map(|v| v.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Display output parses back to the same rule.
    #[test]
    fn text_round_trip(r in rule()) {
        let text = r.to_string();
        let back: Rule = text.parse().map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(back, r, "{}", text);
    }

    /// Parsing arbitrary text never panics; what parses prints and parses back to itself, and
    /// compiles to verbs specs (or is refused) without panicking.
    #[test]
    fn parse_arbitrary_text(s in prop_oneof![any::<String>(), token_soup()]) {
        if let Ok(r) = s.parse::<Rule>() {
            let text = r.to_string();
            prop_assert_eq!(text.parse::<Rule>(), Ok(r.clone()), "{:?} -> {:?}", s, text);
            let _ = compile(&r, 1);
        }
    }

    /// A valid rule compiles, except an IP protocol other than TCP/UDP with no IP version; the
    /// buffer's header and spec sizes are consistent.
    #[test]
    fn valid_rules_compile(r in rule()) {
        if r.validate(u16::MAX).is_err() {
            prop_assert!(compile(&r, 1).is_err());
            return Ok(());
        }
        let p = &r.pattern;
        let proto_needs_ip = p.l4.is_none()
            && p.ip.is_none()
            && !matches!(p.ethertype, Some(0x0800) | Some(0x86dd))
            && p.ip_proto.is_some_and(|x| x != 6 && x != 17);
        match compile(&r, 1) {
            Ok(c) => {
                prop_assert!(!proto_needs_ip, "{}", r);
                let b = &c.bytes;
                prop_assert_eq!(u16::from_ne_bytes([b[8], b[9]]) as usize, b.len());
                let mut o = 20;
                for _ in 0..b[12] {
                    o += u16::from_ne_bytes([b[o + 4], b[o + 5]]) as usize;
                }
                prop_assert_eq!(o, b.len());
            }
            Err(e) => prop_assert!(proto_needs_ip, "{}: {}", r, e),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Rules built from a frame's own fields (so that several match), some to a multicast
    /// destination, at mixed priorities: `steer` walks the mlx5 tables in increasing rank, one
    /// rule per table, copies only at DONT_TRAP rules and stops at the first other one; every
    /// rule it passes over in a table it used, or in a table before the one that took the frame,
    /// either does not match or lost to an earlier rule of its table; `classify` is its first
    /// rule.
    #[test]
    fn steering_walks_the_kernel_tables(f in frame_spec(), mc in any::<bool>(),
            picks in proptest::collection::vec((any::<u16>(), 0u16..4, 0u8..3), 1..8)) {
        let mut f = f;
        if mc {
            f.dst[0] |= 1;
        }
        let frame = f.build();
        let rules: Vec<Rule> = picks
            .iter()
            .map(|&(pick, prio, act)| {
                let mut r = rule_from(&f, pick, (24, 32), (64, 128));
                r.priority = prio;
                r.action = [Action::Queue(0), Action::Queue(1), Action::Drop][act as usize].clone();
                r
            })
            .collect();
        let s = steer(&rules, &frame);
        let met: Vec<usize> = s.copies.iter().copied().chain(s.taken_by).collect();
        for w in met.windows(2) {
            prop_assert!(rank(&rules[w[0]]) < rank(&rules[w[1]]), "{rules:?} {s:?}");
        }
        for &c in &s.copies {
            prop_assert!(dont_trap(&rules[c]) && matches(&rules[c], &frame));
        }
        if let Some(t) = s.taken_by {
            prop_assert!(!dont_trap(&rules[t]) && matches(&rules[t], &frame));
        }
        // Every matching rule that got nothing is behind the taker, or behind an earlier rule of
        // its own table.
        let stop = s.taken_by.map(|t| (rank(&rules[t]), t));
        for (i, r) in rules.iter().enumerate() {
            if met.contains(&i) || !matches(r, &frame) {
                continue;
            }
            let k = (rank(r), i);
            let shadowed = met.iter().any(|&m| rank(&rules[m]) == k.0 && m < i);
            prop_assert!(shadowed || stop.is_some_and(|s| k > s), "rule {i} skipped: {rules:?} {s:?}");
        }
        prop_assert_eq!(
            classify(&rules, &frame).map(|r| r as *const Rule),
            s.first().map(|i| &rules[i] as *const Rule)
        );
    }
}
