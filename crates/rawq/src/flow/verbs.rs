//! Compiling a [`Rule`] into the bytes `ibv_create_flow` takes.
//!
//! `ibv_create_flow(qp, attr)` reads a `struct ibv_flow_attr` followed by `num_of_specs` flow
//! specs laid end to end, each starting with its type and its size. [`compile`] builds exactly
//! that buffer, with the layout of rdma-core's `<infiniband/verbs.h>`: host byte order for the
//! attribute and spec headers, network byte order for addresses, ports, the ethertype and the
//! VLAN tag inside the value and mask filters, zeroed padding. No `unsafe` here: the verbs
//! backend copies [`CompiledFlow::bytes`] into an aligned buffer and hands its pointer to
//! `ibv_create_flow`. The `flow_verbs_oracle` test compares the bytes with what a C program
//! builds from rdma-core's own structs.
//!
//! # How a rule maps to specs
//! * An Ethernet spec always comes first (mlx4 insists on an L2 spec first; an all-zero mask
//!   matches every frame, which is how `promiscuous` compiles). It carries the MACs with their
//!   masks, the VLAN id in `vlan_tag` with mask `0x0fff`, and the ethertype with mask `0xffff`:
//!   the rule's own, or the one its IP version implies.
//! * IPv4 compiles to `ibv_flow_spec_ipv4`, or to `ibv_flow_spec_ipv4_ext` when the rule matches
//!   an IP protocol that no UDP/TCP spec expresses. IPv6 compiles to `ibv_flow_spec_ipv6`, whose
//!   `next_hdr` carries such a protocol. Prefixes become masks.
//! * UDP / TCP compile to `ibv_flow_spec_tcp_udp` (type UDP or TCP) with exact port masks. Its
//!   type alone matches the protocol, so `proto 6` / `proto 17` without an IP version compiles to
//!   a port-less TCP / UDP spec; any other protocol needs `ipv4` or `ipv6` (or the ethertype of
//!   one).
//! * Values are ANDed with their masks (mlx5 rejects value bits outside the mask).
//! * [`Action::Drop`] appends `ibv_flow_spec_action_drop`. Queue and RSS actions add no spec:
//!   the QP the flow is attached to is the destination ([`CompiledFlow::target`]).
//! * [`compile_tagged`] appends `ibv_flow_spec_action_tag` to a rule that does not drop: the
//!   device then reports that tag in every CQE of a frame the rule steered (the mlx5 CQE's
//!   `sop_drop_qpn` / flow tag, 24 bits; the kernel refuses larger tags). The ports tag each
//!   rule with its index + 1, so 0 means "no rule". A drop rule gets none: its frames make no
//!   CQE.
//! * A rule whose destination MAC is multicast (the group bit set in address and mask) gets
//!   `IBV_FLOW_ATTR_FLAGS_DONT_TRAP`, so the kernel still receives its copy — except a drop rule,
//!   which is meant to keep the frames from everyone. The flag also decides the rule's place
//!   among the others (the kernel's flow tables: [`super::order`]).
//! * The attribute's `priority` is the rule's (lower first, as in verbs); its `size` is the
//!   length of the whole buffer.

use std::ops::Range;

use super::{Action, IpMatch, Rule, RuleError};

/// `IBV_FLOW_ATTR_NORMAL`: a rule that steers by its specs.
pub const IBV_FLOW_ATTR_NORMAL: u32 = 0;
/// `IBV_FLOW_ATTR_FLAGS_DONT_TRAP`: matching frames also continue to lower-priority rules and
/// the kernel.
pub const IBV_FLOW_ATTR_FLAGS_DONT_TRAP: u32 = 1 << 1;
/// `IBV_FLOW_SPEC_ETH`.
pub const IBV_FLOW_SPEC_ETH: u32 = 0x20;
/// `IBV_FLOW_SPEC_IPV4`.
pub const IBV_FLOW_SPEC_IPV4: u32 = 0x30;
/// `IBV_FLOW_SPEC_IPV6`.
pub const IBV_FLOW_SPEC_IPV6: u32 = 0x31;
/// `IBV_FLOW_SPEC_IPV4_EXT`.
pub const IBV_FLOW_SPEC_IPV4_EXT: u32 = 0x32;
/// `IBV_FLOW_SPEC_TCP`.
pub const IBV_FLOW_SPEC_TCP: u32 = 0x40;
/// `IBV_FLOW_SPEC_UDP`.
pub const IBV_FLOW_SPEC_UDP: u32 = 0x41;
/// `IBV_FLOW_SPEC_ACTION_TAG`.
pub const IBV_FLOW_SPEC_ACTION_TAG: u32 = 0x1000;
/// `IBV_FLOW_SPEC_ACTION_DROP`.
pub const IBV_FLOW_SPEC_ACTION_DROP: u32 = 0x1001;
/// Largest flow tag the device carries (24 bits).
pub const MAX_FLOW_TAG: u32 = 0x00ff_ffff;

/// Where the frames of a compiled flow go.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FlowTarget {
    /// Attach the flow to this queue's QP.
    Queue(u16),
    /// Attach the flow to an RSS QP spreading over these queues.
    Rss(Vec<u16>),
    /// The flow carries a drop action; attach it to any QP of the port.
    Drop,
}

/// A rule compiled for `ibv_create_flow`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompiledFlow {
    /// `struct ibv_flow_attr` followed by its specs, ready to pass to `ibv_create_flow`
    /// (copy into a buffer aligned to 8 bytes first).
    pub bytes: Vec<u8>,
    /// The QP the flow belongs to.
    pub target: FlowTarget,
}

/// Offsets in `struct ibv_flow_attr` (20 bytes; 2 bytes of padding before `flags`).
mod attr {
    use std::ops::Range;
    pub const COMP_MASK: Range<usize> = 0..4;
    pub const TYPE: Range<usize> = 4..8;
    pub const SIZE: Range<usize> = 8..10;
    pub const PRIORITY: Range<usize> = 10..12;
    pub const NUM_OF_SPECS: usize = 12;
    pub const PORT: usize = 13;
    pub const FLAGS: Range<usize> = 16..20;
    pub const LEN: usize = 20;
}

/// Offsets of the header every spec starts with (`enum ibv_flow_spec_type type; uint16_t size`).
mod hdr {
    use std::ops::Range;
    pub const TYPE: Range<usize> = 0..4;
    pub const SIZE: Range<usize> = 4..6;
}

/// Where a spec's value filter and mask filter start, and its whole size (`sizeof`, padding
/// included).
struct Layout {
    ty: u32,
    len: usize,
    val: usize,
    mask: usize,
}

/// `struct ibv_flow_spec_eth`: the 16-byte `ibv_flow_eth_filter` is 2-byte aligned, so the value
/// follows the header directly; 38 bytes padded to 40.
mod eth {
    use std::ops::Range;
    pub const LAYOUT: super::Layout = super::Layout {
        ty: super::IBV_FLOW_SPEC_ETH,
        len: 40,
        val: 6,
        mask: 22,
    };
    pub const DST_MAC: Range<usize> = 0..6;
    pub const SRC_MAC: Range<usize> = 6..12;
    pub const ETHER_TYPE: Range<usize> = 12..14;
    pub const VLAN_TAG: Range<usize> = 14..16;
}

/// `struct ibv_flow_spec_ipv4`: 4-byte aligned filters after 2 bytes of padding.
mod ipv4 {
    use std::ops::Range;
    pub const LAYOUT: super::Layout = super::Layout {
        ty: super::IBV_FLOW_SPEC_IPV4,
        len: 24,
        val: 8,
        mask: 16,
    };
    pub const SRC_IP: Range<usize> = 0..4;
    pub const DST_IP: Range<usize> = 4..8;
}

/// `struct ibv_flow_spec_ipv4_ext`: the IPv4 filter plus proto, tos, ttl, flags.
mod ipv4_ext {
    use std::ops::Range;
    pub const LAYOUT: super::Layout = super::Layout {
        ty: super::IBV_FLOW_SPEC_IPV4_EXT,
        len: 32,
        val: 8,
        mask: 20,
    };
    pub const SRC_IP: Range<usize> = 0..4;
    pub const DST_IP: Range<usize> = 4..8;
    pub const PROTO: Range<usize> = 8..9;
}

/// `struct ibv_flow_spec_ipv6`: the 39-byte filter (with a 4-byte flow label) pads to 40.
mod ipv6 {
    use std::ops::Range;
    pub const LAYOUT: super::Layout = super::Layout {
        ty: super::IBV_FLOW_SPEC_IPV6,
        len: 88,
        val: 8,
        mask: 48,
    };
    pub const SRC_IP: Range<usize> = 0..16;
    pub const DST_IP: Range<usize> = 16..32;
    pub const NEXT_HDR: Range<usize> = 36..37;
}

/// `struct ibv_flow_spec_tcp_udp`: destination port first; 14 bytes padded to 16.
mod tcp_udp {
    use std::ops::Range;
    pub const fn layout(ty: u32) -> super::Layout {
        super::Layout {
            ty,
            len: 16,
            val: 6,
            mask: 10,
        }
    }
    pub const DST_PORT: Range<usize> = 0..2;
    pub const SRC_PORT: Range<usize> = 2..4;
}

/// `struct ibv_flow_spec_action_drop`: the header alone, padded to 8.
const DROP_LAYOUT: Layout = Layout {
    ty: IBV_FLOW_SPEC_ACTION_DROP,
    len: 8,
    val: 8,
    mask: 8,
};

/// `struct ibv_flow_spec_action_tag`: the header, 2 bytes of padding, the 32-bit tag.
mod tag {
    use std::ops::Range;
    pub const LAYOUT: super::Layout = super::Layout {
        ty: super::IBV_FLOW_SPEC_ACTION_TAG,
        len: 12,
        val: 8,
        mask: 12,
    };
    pub const TAG_ID: Range<usize> = 8..12;
}

/// A view of one spec inside the flow buffer.
struct SpecView<'a> {
    buf: &'a mut [u8],
    val: usize,
    mask: usize,
}

impl SpecView<'_> {
    /// Sets filter field `f` to `value & mask` in the value filter and to `mask` in the mask
    /// filter. `value` and `mask` are in wire (network) order and as long as the field.
    fn set(&mut self, f: Range<usize>, value: &[u8], mask: &[u8]) {
        let (v, m) = (self.val, self.mask);
        for (i, (&a, &b)) in f.clone().zip(value.iter().zip(mask)) {
            self.buf[v + i] = a & b;
            self.buf[m + i] = b;
        }
    }
}

/// Appends specs after a `struct ibv_flow_attr` and fixes up its count and size at the end.
struct FlowBuilder {
    bytes: Vec<u8>,
    specs: u8,
}

impl FlowBuilder {
    fn new(priority: u16, port: u8, flags: u32) -> FlowBuilder {
        let mut b = vec![0u8; attr::LEN];
        b[attr::COMP_MASK].copy_from_slice(&0u32.to_ne_bytes());
        b[attr::TYPE].copy_from_slice(&IBV_FLOW_ATTR_NORMAL.to_ne_bytes());
        b[attr::PRIORITY].copy_from_slice(&priority.to_ne_bytes());
        b[attr::PORT] = port;
        b[attr::FLAGS].copy_from_slice(&flags.to_ne_bytes());
        FlowBuilder { bytes: b, specs: 0 }
    }

    /// Appends a zeroed spec with its header filled in.
    fn spec(&mut self, l: &Layout) -> SpecView<'_> {
        let start = self.bytes.len();
        self.bytes.resize(start + l.len, 0);
        self.specs += 1;
        let buf = &mut self.bytes[start..];
        buf[hdr::TYPE].copy_from_slice(&l.ty.to_ne_bytes());
        // Spec sizes are at most 88 bytes.
        buf[hdr::SIZE].copy_from_slice(&(l.len as u16).to_ne_bytes());
        SpecView {
            buf,
            val: l.val,
            mask: l.mask,
        }
    }

    fn finish(mut self) -> Vec<u8> {
        // At most 5 specs of at most 88 bytes: the size fits in u16.
        let size = self.bytes.len() as u16;
        self.bytes[attr::SIZE].copy_from_slice(&size.to_ne_bytes());
        self.bytes[attr::NUM_OF_SPECS] = self.specs;
        self.bytes
    }
}

/// Compiles `rule` into an `ibv_flow_attr` and its specs for port `port` (1-based, as verbs
/// counts ports).
///
/// # Errors
/// [`RuleError::Invalid`] if the rule is contradictory (it is checked with
/// [`Rule::validate`]`(u16::MAX)`; check its queues against the port with `validate` too), or if
/// it matches an IP protocol other than TCP and UDP without saying which IP version (field
/// `ip_proto`): verbs carries the protocol only in an IPv4 or IPv6 spec.
pub fn compile(rule: &Rule, port: u8) -> Result<CompiledFlow, RuleError> {
    compile_tagged(rule, port, None)
}

/// As [`compile`], adding a flow tag action with `tag` (1 to [`MAX_FLOW_TAG`]) unless the
/// rule drops.
///
/// # Errors
/// As [`compile`]; [`RuleError::Invalid`] for a tag of more than 24 bits.
pub fn compile_tagged(rule: &Rule, port: u8, tag: Option<u32>) -> Result<CompiledFlow, RuleError> {
    if let Some(t) = tag.filter(|&t| t > MAX_FLOW_TAG) {
        return Err(RuleError::Invalid {
            field: "tag",
            reason: format!("flow tag {t}: the device carries at most 24 bits ({MAX_FLOW_TAG})"),
        });
    }
    rule.validate(u16::MAX)?;
    let p = &rule.pattern;
    let drop = rule.action == Action::Drop;
    let flags = if super::order::dont_trap(rule) {
        IBV_FLOW_ATTR_FLAGS_DONT_TRAP
    } else {
        0
    };
    let mut fb = FlowBuilder::new(rule.priority, port, flags);

    // L2.
    {
        let mut s = fb.spec(&eth::LAYOUT);
        if let Some(m) = &p.dst_mac {
            s.set(eth::DST_MAC, &m.addr, &m.mask);
        }
        if let Some(m) = &p.src_mac {
            s.set(eth::SRC_MAC, &m.addr, &m.mask);
        }
        let ethertype = p.ethertype.or(match p.ip {
            Some(IpMatch::V4 { .. }) => Some(0x0800),
            Some(IpMatch::V6 { .. }) => Some(0x86dd),
            None => None,
        });
        if let Some(et) = ethertype {
            s.set(eth::ETHER_TYPE, &et.to_be_bytes(), &[0xff, 0xff]);
        }
        if let Some(v) = p.vlan {
            s.set(eth::VLAN_TAG, &v.to_be_bytes(), &0x0fffu16.to_be_bytes());
        }
    }

    // L3. The protocol goes here only when no L4 spec expresses it.
    let lone_proto = if p.l4.is_none() { p.ip_proto } else { None };
    let mut proto_done = false;
    // `ethertype 0x0800 proto 1`: the ethertype says which IP spec carries the protocol.
    let ip = p.ip.or(match (lone_proto, p.ethertype) {
        (Some(_), Some(0x0800)) => Some(IpMatch::V4 {
            src: None,
            dst: None,
        }),
        (Some(_), Some(0x86dd)) => Some(IpMatch::V6 {
            src: None,
            dst: None,
        }),
        _ => None,
    });
    match ip {
        Some(IpMatch::V4 { src, dst }) => {
            let (mut s, src_f, dst_f) = match lone_proto {
                Some(proto) => {
                    let mut s = fb.spec(&ipv4_ext::LAYOUT);
                    s.set(ipv4_ext::PROTO, &[proto], &[0xff]);
                    proto_done = true;
                    (s, ipv4_ext::SRC_IP, ipv4_ext::DST_IP)
                }
                None => (fb.spec(&ipv4::LAYOUT), ipv4::SRC_IP, ipv4::DST_IP),
            };
            for (f, n) in [(src_f, src), (dst_f, dst)] {
                if let Some(n) = n {
                    s.set(f, &n.addr.octets(), &n.mask().to_be_bytes());
                }
            }
        }
        Some(IpMatch::V6 { src, dst }) => {
            let mut s = fb.spec(&ipv6::LAYOUT);
            for (f, n) in [(ipv6::SRC_IP, src), (ipv6::DST_IP, dst)] {
                if let Some(n) = n {
                    s.set(f, &n.addr.octets(), &n.mask().to_be_bytes());
                }
            }
            if let Some(proto) = lone_proto {
                s.set(ipv6::NEXT_HDR, &[proto], &[0xff]);
                proto_done = true;
            }
        }
        None => {}
    }

    // L4.
    if let Some(l4) = p.l4 {
        let ty = match l4.proto {
            super::L4Proto::Udp => IBV_FLOW_SPEC_UDP,
            super::L4Proto::Tcp => IBV_FLOW_SPEC_TCP,
        };
        let mut s = fb.spec(&tcp_udp::layout(ty));
        if let Some(sp) = l4.src_port {
            s.set(tcp_udp::SRC_PORT, &sp.to_be_bytes(), &[0xff, 0xff]);
        }
        if let Some(dp) = l4.dst_port {
            s.set(tcp_udp::DST_PORT, &dp.to_be_bytes(), &[0xff, 0xff]);
        }
    } else if let (Some(proto), false) = (lone_proto, proto_done) {
        let ty = match proto {
            6 => IBV_FLOW_SPEC_TCP,
            17 => IBV_FLOW_SPEC_UDP,
            _ => {
                return Err(RuleError::Invalid {
                    field: "ip_proto",
                    reason: format!(
                        "verbs flow specs carry IP protocol {proto} only inside an IPv4 or IPv6 \
                         match; add `ipv4` or `ipv6` (or use two rules)"
                    ),
                })
            }
        };
        fb.spec(&tcp_udp::layout(ty));
    }

    if drop {
        fb.spec(&DROP_LAYOUT);
    } else if let Some(t) = tag {
        // The spec has no mask: write the tag straight into its bytes.
        let s = fb.spec(&tag::LAYOUT);
        s.buf[tag::TAG_ID].copy_from_slice(&t.to_ne_bytes());
    }
    let target = match &rule.action {
        Action::Queue(q) => FlowTarget::Queue(*q),
        Action::Rss(qs) => FlowTarget::Rss(qs.clone()),
        Action::Drop => FlowTarget::Drop,
    };
    Ok(CompiledFlow {
        bytes: fb.finish(),
        target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(text: &str) -> CompiledFlow {
        let rule: Rule = text.parse().unwrap();
        compile(&rule, 1).unwrap()
    }

    fn u16_at(b: &[u8], r: Range<usize>) -> u16 {
        u16::from_ne_bytes(b[r].try_into().unwrap())
    }
    fn u32_at(b: &[u8], r: Range<usize>) -> u32 {
        u32::from_ne_bytes(b[r].try_into().unwrap())
    }

    /// The (type, bytes) of each spec after the attribute.
    fn specs(b: &[u8]) -> Vec<(u32, &[u8])> {
        let mut out = Vec::new();
        let mut o = attr::LEN;
        for _ in 0..b[attr::NUM_OF_SPECS] {
            let size = u16_at(&b[o..], hdr::SIZE) as usize;
            out.push((u32_at(&b[o..], hdr::TYPE), &b[o..o + size]));
            o += size;
        }
        assert_eq!(o, b.len(), "specs fill the buffer exactly");
        out
    }

    #[test]
    fn attr_header() {
        let c = compiled("prio 7 udp dst-port 9000 -> queue 3");
        let b = &c.bytes;
        assert_eq!(c.target, FlowTarget::Queue(3));
        assert_eq!(u32_at(b, attr::TYPE), IBV_FLOW_ATTR_NORMAL);
        assert_eq!(u16_at(b, attr::PRIORITY), 7);
        assert_eq!(b[attr::PORT], 1);
        assert_eq!(u32_at(b, attr::FLAGS), 0);
        assert_eq!(u16_at(b, attr::SIZE) as usize, b.len());
        assert_eq!(b.len(), 20 + 40 + 16);
        let s = specs(b);
        assert_eq!(s[0].0, IBV_FLOW_SPEC_ETH);
        assert_eq!(s[1].0, IBV_FLOW_SPEC_UDP);
        // dst port value and mask, network order.
        assert_eq!(&s[1].1[6..10], &[0x23, 0x28, 0, 0]);
        assert_eq!(&s[1].1[10..14], &[0xff, 0xff, 0, 0]);
        // The eth spec matches everything.
        assert!(s[0].1[6..].iter().all(|&x| x == 0));
    }

    #[test]
    fn eth_fields_and_masking() {
        let c = compiled(
            "eth dst 01:00:5e:7f:00:01/ff:ff:ff:80:00:00 src 02:00:00:00:00:09 vlan 0x123 \
             ethertype 0x88f7 -> queue 0",
        );
        let b = &c.bytes;
        assert_eq!(u32_at(b, attr::FLAGS), IBV_FLOW_ATTR_FLAGS_DONT_TRAP);
        let s = specs(b)[0].1;
        let val = &s[6..22];
        let mask = &s[22..38];
        assert_eq!(&val[0..6], &[1, 0, 0x5e, 0, 0, 0], "value ANDed with mask");
        assert_eq!(&mask[0..6], &[0xff, 0xff, 0xff, 0x80, 0, 0]);
        assert_eq!(&val[6..12], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&mask[6..12], &[0xff; 6]);
        assert_eq!(&val[12..16], &[0x88, 0xf7, 0x01, 0x23]);
        assert_eq!(&mask[12..16], &[0xff, 0xff, 0x0f, 0xff]);
        assert_eq!(&s[38..40], &[0, 0], "padding");
        // The same multicast rule dropping: no DONT_TRAP, a drop spec.
        let c = compiled("eth dst 01:00:5e:00:00:01 -> drop");
        assert_eq!(c.target, FlowTarget::Drop);
        assert_eq!(u32_at(&c.bytes, attr::FLAGS), 0);
        let s = specs(&c.bytes);
        assert_eq!(
            s.last().map(|s| (s.0, s.1.len())),
            Some((IBV_FLOW_SPEC_ACTION_DROP, 8))
        );
        // Unicast, or a mask that ignores the group bit: no DONT_TRAP.
        for t in [
            "eth dst 02:00:00:00:00:01 -> queue 0",
            "eth dst 01:00:00:00:00:00/fe:00:00:00:00:00 -> queue 0",
        ] {
            assert_eq!(u32_at(&compiled(t).bytes, attr::FLAGS), 0, "{t}");
        }
    }

    #[test]
    fn ip_specs() {
        let c = compiled("ipv4 src 10.1.2.3/16 dst 10.0.0.2 tcp src-port 1 -> rss 0,1");
        assert_eq!(c.target, FlowTarget::Rss(vec![0, 1]));
        let s = specs(&c.bytes);
        assert_eq!(
            s.iter().map(|s| s.0).collect::<Vec<_>>(),
            [IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_IPV4, IBV_FLOW_SPEC_TCP]
        );
        assert_eq!(&s[0].1[6 + 12..6 + 14], &[0x08, 0x00], "implied ethertype");
        assert_eq!(s[1].1.len(), 24);
        assert_eq!(&s[1].1[8..16], &[10, 1, 0, 0, 10, 0, 0, 2]);
        assert_eq!(&s[1].1[16..24], &[255, 255, 0, 0, 255, 255, 255, 255]);
        assert_eq!(&s[2].1[6..14], &[0, 0, 0, 1, 0, 0, 0xff, 0xff]);

        let c = compiled("ipv4 dst 192.0.2.1 proto 1 -> queue 0");
        let s = specs(&c.bytes);
        assert_eq!(s[1].0, IBV_FLOW_SPEC_IPV4_EXT);
        assert_eq!(s[1].1.len(), 32);
        assert_eq!((s[1].1[8 + 8], s[1].1[20 + 8]), (1, 0xff));
        assert_eq!(s.len(), 2);

        let c = compiled("ipv6 src 2001:db8::1/32 proto 58 -> queue 0");
        let s = specs(&c.bytes);
        assert_eq!(s[1].0, IBV_FLOW_SPEC_IPV6);
        assert_eq!(s[1].1.len(), 88);
        assert_eq!(&s[1].1[8..12], &[0x20, 0x01, 0x0d, 0xb8]);
        assert!(
            s[1].1[12..24].iter().all(|&x| x == 0),
            "host bits masked off"
        );
        assert_eq!(&s[1].1[48..52], &[0xff; 4]);
        assert_eq!((s[1].1[8 + 36], s[1].1[48 + 36]), (58, 0xff));
        assert_eq!(&s[0].1[6 + 12..6 + 14], &[0x86, 0xdd]);

        // A protocol alone: UDP/TCP by spec type; others need an IP version.
        let s = compiled("proto 17 -> queue 0");
        let s = specs(&s.bytes);
        assert_eq!(s[1].0, IBV_FLOW_SPEC_UDP);
        assert!(s[1].1[6..].iter().all(|&x| x == 0));
        let s = compiled("ethertype 0x86dd proto 47 -> queue 0");
        let s = specs(&s.bytes);
        assert_eq!((s[1].0, s[1].1[8 + 36]), (IBV_FLOW_SPEC_IPV6, 47));
        let r: Rule = "proto 47 -> queue 0".parse().unwrap();
        assert!(matches!(
            compile(&r, 1),
            Err(RuleError::Invalid {
                field: "ip_proto",
                ..
            })
        ));
    }

    #[test]
    fn invalid_rules_are_refused() {
        let r: Rule = "ethertype 0x0806 ipv4 -> queue 0".parse().unwrap();
        assert!(compile(&r, 1).is_err());
        let r: Rule = "-> queue 0".parse().unwrap();
        assert!(compile(&r, 1).is_err());
        let c = compiled("promiscuous -> queue 0");
        assert_eq!(c.bytes.len(), 60);
        assert!(c.bytes[26..].iter().all(|&x| x == 0));
    }
}
