//! Flow rules: one model for steering traffic to rawq's queues, compiled by each backend.
//!
//! A [`Rule`] is a [`Pattern`] (what to match), a priority, and an [`Action`] (where matched
//! frames go). Frames no rule matches stay with the kernel's netdev, so ssh, ping and ARP keep
//! working while a flow goes to userspace.
//!
//! [`matches`](fn@matches) is the **reference semantics**: the verbs flow specs, the XDP program and the mlx5
//! device model are all tested against it.
//!
//! # Matching rules, precisely
//! * One 802.1Q tag (TPID 0x8100) is parsed through. `vlan` requires a tag with that VLAN id;
//!   without `vlan`, tagged and untagged frames both match. `ethertype` is the type after the tag.
//! * `ip` (v4 or v6) requires that ethertype; prefixes compare the leading `prefix` bits.
//!   `ip_proto` is the IPv4 protocol or the IPv6 next header (no extension-header walk).
//! * `l4` (UDP or TCP) requires that protocol over IPv4 (a header of at least 20 bytes, and not a
//!   non-first fragment) or IPv6; its ports are read from the L4 header. Without `ip`, both IP
//!   versions match.
//! * A field that would lie past the end of the frame does not match.
//! * Priorities are 0 to [`MAX_PRIORITY`] (15), lower first. Linux's mlx5 driver refuses a rule
//!   above 15 (`MLX5_IB_FLOW_LAST_PRIO`; older kernels, with 8 bypass priorities, allow only
//!   0-7), so rawq refuses it for every backend.
//! * Rules are met in the order of the mlx5 kernel driver's flow tables ([`order`]): at one
//!   priority a rule to a multicast destination MAC (group bit in address and mask) that does not
//!   drop comes first (it has DONT_TRAP); a multicast *drop* rule comes after the rules of every
//!   priority; otherwise lower priority first, and the given order among equals.
//! * A multicast non-drop rule delivers a copy and lets the frame go on to later rules and the
//!   kernel ([`order::steer`]); on AF_XDP, which cannot copy a frame to a socket and the kernel,
//!   such a rule takes the frame. [`classify`] gives the first rule a frame reaches.
//! * Two rules with the same match at the same rank are one flow table entry to the device and
//!   the kernel refuses the second (EEXIST): [`validate_rules`] refuses them.
//!
//! # Text form
//! Rules parse from and print to a one-line text form,
//! `"udp dst-port 9000 ipv4 dst 10.0.0.0/24 -> queue 1".parse::<Rule>()`; the grammar is in
//! [`text`].

use std::net::{Ipv4Addr, Ipv6Addr};

pub mod order;
pub mod rss;
pub mod text;
pub mod toeplitz;
internal_mod!(verbs);

/// The highest rule priority: Linux drivers/infiniband/hw/mlx5/fs.c `mlx5_ib_create_flow`
/// refuses `priority > MLX5_IB_FLOW_LAST_PRIO` (mlx5_ib.h: `MLX5_BY_PASS_NUM_REGULAR_PRIOS - 1`,
/// 16 - 1 in include/linux/mlx5/device.h) with ENOMEM. Kernels with 8 regular bypass priorities
/// allow only 0-7.
pub const MAX_PRIORITY: u16 = 15;

/// A MAC address.
pub type Mac = [u8; 6];

/// A MAC address with a mask: a frame matches if `frame & mask == addr & mask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MacMatch {
    /// The address.
    pub addr: Mac,
    /// Which bits count (`ff:ff:ff:ff:ff:ff` for an exact match).
    pub mask: Mac,
}

impl MacMatch {
    /// An exact match on `addr`.
    pub fn exact(addr: Mac) -> MacMatch {
        MacMatch {
            addr,
            mask: [0xff; 6],
        }
    }

    fn matches(&self, m: &[u8]) -> bool {
        (0..6).all(|i| m[i] & self.mask[i] == self.addr[i] & self.mask[i])
    }
}

/// An IPv4 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Net {
    /// Address (bits past `prefix` are ignored).
    pub addr: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub prefix: u8,
}

impl Ipv4Net {
    /// The netmask as a u32.
    pub fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix.min(32) as u32)
        }
    }

    /// True if `a` is inside the prefix.
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        (u32::from(a) ^ u32::from(self.addr)) & self.mask() == 0
    }
}

/// An IPv6 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Net {
    /// Address (bits past `prefix` are ignored).
    pub addr: Ipv6Addr,
    /// Prefix length, 0..=128.
    pub prefix: u8,
}

impl Ipv6Net {
    /// The netmask as a u128.
    pub fn mask(&self) -> u128 {
        if self.prefix == 0 {
            0
        } else {
            u128::MAX << (128 - self.prefix.min(128) as u32)
        }
    }

    /// True if `a` is inside the prefix.
    pub fn contains(&self, a: Ipv6Addr) -> bool {
        (u128::from(a) ^ u128::from(self.addr)) & self.mask() == 0
    }
}

/// Layer-3 match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpMatch {
    /// IPv4, with optional source / destination prefixes.
    V4 {
        /// Source prefix.
        src: Option<Ipv4Net>,
        /// Destination prefix.
        dst: Option<Ipv4Net>,
    },
    /// IPv6, with optional source / destination prefixes.
    V6 {
        /// Source prefix.
        src: Option<Ipv6Net>,
        /// Destination prefix.
        dst: Option<Ipv6Net>,
    },
}

/// Transport protocol of an [`L4Match`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4Proto {
    /// UDP (IP protocol 17).
    Udp,
    /// TCP (IP protocol 6).
    Tcp,
}

impl L4Proto {
    /// The IP protocol number.
    pub fn ip_proto(self) -> u8 {
        match self {
            L4Proto::Udp => 17,
            L4Proto::Tcp => 6,
        }
    }
}

/// Layer-4 match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct L4Match {
    /// UDP or TCP.
    pub proto: L4Proto,
    /// Source port.
    pub src_port: Option<u16>,
    /// Destination port.
    pub dst_port: Option<u16>,
}

/// What a rule matches. All present fields must match; absent fields match anything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pattern {
    /// Destination MAC.
    pub dst_mac: Option<MacMatch>,
    /// Source MAC.
    pub src_mac: Option<MacMatch>,
    /// VLAN id (12 bits) of an 802.1Q tag.
    pub vlan: Option<u16>,
    /// Ethertype (after a VLAN tag, if any).
    pub ethertype: Option<u16>,
    /// IPv4 / IPv6 match.
    pub ip: Option<IpMatch>,
    /// IP protocol / IPv6 next header.
    pub ip_proto: Option<u8>,
    /// UDP / TCP match.
    pub l4: Option<L4Match>,
    /// Explicit opt-in for a pattern that takes all traffic (promiscuous / sniffer). Without it a
    /// pattern with no field is rejected, since it would take ssh, ARP and ping from the kernel.
    pub promiscuous: bool,
}

impl Pattern {
    /// True if no field is set (the pattern matches every frame).
    pub fn is_catch_all(&self) -> bool {
        self.dst_mac.is_none()
            && self.src_mac.is_none()
            && self.vlan.is_none()
            && self.ethertype.is_none()
            && self.ip.is_none()
            && self.ip_proto.is_none()
            && self.l4.is_none()
    }
}

/// Where matched frames go.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// To one queue.
    Queue(u16),
    /// Spread over these queues by RSS (Toeplitz hash of addresses and ports).
    Rss(Vec<u16>),
    /// Dropped.
    Drop,
}

/// A flow rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// What to match.
    pub pattern: Pattern,
    /// 0 to [`MAX_PRIORITY`]; lower numbers are tried first (see [`order`] for multicast
    /// rules). Default 0.
    pub priority: u16,
    /// Where matched frames go.
    pub action: Action,
}

/// Defined with the other error types (the error module sits below the rules).
pub use crate::error::RuleError;

impl Rule {
    /// A rule with `pattern` sending to one queue at priority 0.
    pub fn to_queue(pattern: Pattern, queue: u16) -> Rule {
        Rule {
            pattern,
            priority: 0,
            action: Action::Queue(queue),
        }
    }

    /// Checks the rule for contradictions and for queues a port with `queues` queues lacks.
    ///
    /// Rejected: a priority above [`MAX_PRIORITY`]; a pattern with no field unless `promiscuous`;
    /// a VLAN id over 4095; an ethertype
    /// of 0x8100 (the tag itself); prefixes longer than the address; an ethertype that
    /// contradicts the IP version, or is not IP under an IP protocol or UDP/TCP match; an IP
    /// protocol that contradicts the UDP/TCP match; a queue `>= queues`; an empty RSS list or
    /// one that names a queue twice.
    ///
    /// # Errors
    /// [`RuleError::Invalid`] naming the field at fault.
    pub fn validate(&self, queues: u16) -> Result<(), RuleError> {
        let p = &self.pattern;
        let bad = |field, reason: String| Err(RuleError::Invalid { field, reason });
        if self.priority > MAX_PRIORITY {
            return bad(
                "priority",
                format!(
                    "{} is above {MAX_PRIORITY}: use 0-15 (Linux's mlx5 driver refuses higher \
                     priorities with ENOMEM, fs.c `mlx5_ib_create_flow`; older kernels allow \
                     only 0-7)",
                    self.priority
                ),
            );
        }
        if p.is_catch_all() && !p.promiscuous {
            return bad(
                "pattern",
                "matches every frame (it would take ssh, ARP and ping from the kernel); set \
                 `promiscuous` to ask for that explicitly"
                    .into(),
            );
        }
        if let Some(v) = p.vlan {
            if v > 4095 {
                return bad("vlan", format!("{v} is not a 12-bit VLAN id"));
            }
        }
        if p.ethertype == Some(0x8100) {
            // The matcher reads the type after the (one) tag, so 0x8100 would only match a
            // second, inner tag: something no backend can express.
            return bad(
                "ethertype",
                "0x8100 is the VLAN tag itself; `ethertype` is the type after the tag (match the \
                 tag with `vlan`)"
                    .into(),
            );
        }
        let ip_type = match p.ip {
            Some(IpMatch::V4 { src, dst }) => {
                for n in [src, dst].into_iter().flatten() {
                    if n.prefix > 32 {
                        return bad("ipv4", format!("prefix /{} is longer than 32", n.prefix));
                    }
                }
                Some(0x0800)
            }
            Some(IpMatch::V6 { src, dst }) => {
                for n in [src, dst].into_iter().flatten() {
                    if n.prefix > 128 {
                        return bad("ipv6", format!("prefix /{} is longer than 128", n.prefix));
                    }
                }
                Some(0x86dd)
            }
            None => None,
        };
        if let (Some(et), Some(ip)) = (p.ethertype, ip_type) {
            if et != ip {
                return bad(
                    "ethertype",
                    format!("0x{et:04x} contradicts the IP version (needs 0x{ip:04x})"),
                );
            }
        }
        if let Some(l4) = p.l4 {
            if let Some(et) = p.ethertype {
                if et != 0x0800 && et != 0x86dd {
                    return bad(
                        "ethertype",
                        format!("0x{et:04x} is not IP, but the rule matches {:?}", l4.proto),
                    );
                }
            }
            if let Some(proto) = p.ip_proto {
                if proto != l4.proto.ip_proto() {
                    return bad(
                        "ip_proto",
                        format!(
                            "protocol {proto} contradicts the {:?} match (protocol {})",
                            l4.proto,
                            l4.proto.ip_proto()
                        ),
                    );
                }
            }
        }
        if p.ip_proto.is_some() && ip_type.is_none() {
            if let Some(et) = p.ethertype {
                if et != 0x0800 && et != 0x86dd {
                    return bad("ip_proto", format!("ethertype 0x{et:04x} is not IP"));
                }
            }
        }
        let check_q = |q: u16| {
            if q >= queues {
                Err(RuleError::Invalid {
                    field: "action",
                    reason: format!("queue {q} does not exist (the port has {queues} queues)"),
                })
            } else {
                Ok(())
            }
        };
        match &self.action {
            Action::Queue(q) => check_q(*q)?,
            Action::Rss(qs) => {
                if qs.is_empty() {
                    return bad("action", "rss needs at least one queue".into());
                }
                for (i, &q) in qs.iter().enumerate() {
                    check_q(q)?;
                    if qs[..i].contains(&q) {
                        return bad("action", format!("rss lists queue {q} twice"));
                    }
                }
            }
            Action::Drop => {}
        }
        Ok(())
    }
}

/// Offsets found while parsing a frame's headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// VLAN id of the one parsed 802.1Q tag.
    pub vlan: Option<u16>,
    /// Ethertype after the tag.
    pub ethertype: u16,
    /// Offset of the L3 header.
    pub l3: usize,
    /// IP protocol / next header, for IPv4 and IPv6.
    pub ip_proto: Option<u8>,
    /// Offset of the L4 header, when it is a first (or only) fragment.
    pub l4: Option<usize>,
}

/// Parses the headers of an Ethernet frame as the rule model sees them. `None` for a frame
/// shorter than an Ethernet header.
pub fn parse(frame: &[u8]) -> Option<Parsed> {
    let be16 = |o: usize| Some(u16::from_be_bytes([*frame.get(o)?, *frame.get(o + 1)?]));
    let mut et = be16(12)?;
    let mut l3 = 14;
    let mut vlan = None;
    if et == 0x8100 {
        vlan = Some(be16(14)? & 0x0fff);
        et = be16(16)?;
        l3 = 18;
    }
    let mut p = Parsed {
        vlan,
        ethertype: et,
        l3,
        ip_proto: None,
        l4: None,
    };
    match et {
        0x0800 if frame.len() >= l3 + 20 => {
            let ihl = (frame[l3] & 0x0f) as usize * 4;
            p.ip_proto = Some(frame[l3 + 9]);
            let frag_off = be16(l3 + 6)? & 0x1fff;
            if ihl >= 20 && frag_off == 0 {
                p.l4 = Some(l3 + ihl);
            }
        }
        0x86dd if frame.len() >= l3 + 40 => {
            p.ip_proto = Some(frame[l3 + 6]);
            p.l4 = Some(l3 + 40);
        }
        _ => {}
    }
    Some(p)
}

/// The reference matcher: does `pattern` match `frame`?
pub fn pattern_matches(pattern: &Pattern, frame: &[u8]) -> bool {
    let Some(h) = parse(frame) else {
        return false;
    };
    if let Some(m) = &pattern.dst_mac {
        if !m.matches(&frame[0..6]) {
            return false;
        }
    }
    if let Some(m) = &pattern.src_mac {
        if !m.matches(&frame[6..12]) {
            return false;
        }
    }
    if let Some(v) = pattern.vlan {
        if h.vlan != Some(v) {
            return false;
        }
    }
    if let Some(et) = pattern.ethertype {
        if h.ethertype != et {
            return false;
        }
    }
    let l3 = h.l3;
    match pattern.ip {
        Some(IpMatch::V4 { src, dst }) => {
            if h.ethertype != 0x0800 || h.ip_proto.is_none() {
                return false;
            }
            let a = |o: usize| Ipv4Addr::new(frame[o], frame[o + 1], frame[o + 2], frame[o + 3]);
            if src.is_some_and(|n| !n.contains(a(l3 + 12))) {
                return false;
            }
            if dst.is_some_and(|n| !n.contains(a(l3 + 16))) {
                return false;
            }
        }
        Some(IpMatch::V6 { src, dst }) => {
            if h.ethertype != 0x86dd || h.ip_proto.is_none() {
                return false;
            }
            let a = |o: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&frame[o..o + 16]);
                Ipv6Addr::from(b)
            };
            if src.is_some_and(|n| !n.contains(a(l3 + 8))) {
                return false;
            }
            if dst.is_some_and(|n| !n.contains(a(l3 + 24))) {
                return false;
            }
        }
        None => {}
    }
    if let Some(proto) = pattern.ip_proto {
        if h.ip_proto != Some(proto) {
            return false;
        }
    }
    if let Some(l4) = pattern.l4 {
        if h.ip_proto != Some(l4.proto.ip_proto()) {
            return false;
        }
        let Some(o) = h.l4 else {
            return false;
        };
        let port = |o: usize| Some(u16::from_be_bytes([*frame.get(o)?, *frame.get(o + 1)?]));
        // The L4 header must at least hold the ports.
        let (Some(sp), Some(dp)) = (port(o), port(o + 2)) else {
            return false;
        };
        if l4.src_port.is_some_and(|p| p != sp) || l4.dst_port.is_some_and(|p| p != dp) {
            return false;
        }
    }
    true
}

/// The reference matcher on a whole rule (its pattern).
pub fn matches(rule: &Rule, frame: &[u8]) -> bool {
    pattern_matches(&rule.pattern, frame)
}

/// The first rule `frame` reaches: the matching rule of lowest [`order::rank`] (the mlx5 flow
/// table), the earliest given among equals. A multicast non-drop rule (DONT_TRAP) may be followed
/// by others on an mlx5 port ([`order::steer`] says which); an AF_XDP port gives the frame to
/// this rule alone. `None`: the frame stays with the kernel.
pub fn classify<'r>(rules: &'r [Rule], frame: &[u8]) -> Option<&'r Rule> {
    let mut best: Option<(u32, &Rule)> = None;
    for r in rules {
        if !matches(r, frame) {
            continue;
        }
        let k = order::rank(r);
        if best.is_none_or(|(b, _)| k < b) {
            best = Some((k, r));
        }
    }
    best.map(|(_, r)| r)
}

/// Checks a port's rule set: each rule ([`Rule::validate`] with `queues`), then pairs that would
/// collide on an mlx5 port ([`order::check_collisions`]).
///
/// # Errors
/// The first rule's error, or [`RuleError::Collision`].
pub fn validate_rules(rules: &[Rule], queues: u16) -> Result<(), RuleError> {
    for r in rules {
        r.validate(queues)?;
    }
    order::check_collisions(rules)
}

#[cfg(test)]
mod tests;
