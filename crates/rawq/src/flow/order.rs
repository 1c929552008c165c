//! Which rules get a frame, in which order: the flow tables of Linux's mlx5 driver.
//!
//! On a ConnectX port every `ibv_create_flow` rule lands in one flow table of the NIC's bypass
//! namespace (Linux drivers/infiniband/hw/mlx5/fs.c `get_flow_table`):
//! * a rule of priority `p` with `IBV_FLOW_ATTR_FLAGS_DONT_TRAP` in table `2p`, any other in
//!   table `2p + 1` (`ib_prio_to_core_prio`);
//! * a *multicast-only* rule without DONT_TRAP in `MLX5_IB_FLOW_MCAST_PRIO`, after every regular
//!   priority ([`MCAST_TABLE`]). Multicast-only (`flow_is_multicast_only`) means: the first spec
//!   is an Ethernet spec whose destination MAC has the group bit set in both mask and value (or
//!   an IPv4 spec with a multicast destination, which rawq never writes first).
//!
//! rawq's rules always compile with the Ethernet spec first, and get DONT_TRAP exactly when their
//! destination MAC is multicast and they do not drop ([`dont_trap`], src/flow/verbs.rs). So at one
//! priority a multicast rule comes before the others, and a multicast *drop* rule comes after all
//! rules of every priority.
//!
//! A frame walks the tables in order ([`rank`]); in each table at most one rule applies, the
//! first created (given) that matches. A DONT_TRAP rule delivers a copy and the frame goes on to
//! the next table (`_create_flow_rule` adds `MLX5_FLOW_CONTEXT_ACTION_FWD_NEXT_PRIO`), and after
//! the last one to the kernel's netdev; any other rule takes the frame (to its queues, or drops
//! it) and ends the walk. [`steer`] says all of that for one frame; [`classify`](super::classify)
//! gives the first rule the frame reaches.
//!
//! Two rules with the same match in the same table are one flow table entry for the device
//! (drivers/net/ethernet/mellanox/mlx5/core/fs_core.c `add_rule_fg` finds the entry by its match
//! value); `check_conflicting_ftes` refuses the second with EEXIST when the actions conflict
//! (drop and forward) or the flow tags differ, and rawq tags each rule with its own number. So
//! [`check_collisions`] refuses such a pair before any backend sees it (two drop rules, which the
//! kernel merges, pass).

use super::{Action, IpMatch, Pattern, Rule, RuleError, MAX_PRIORITY};

/// The table of a multicast-only rule without DONT_TRAP (`MLX5_IB_FLOW_MCAST_PRIO`): after the
/// two tables of each of the 16 priorities (include/linux/mlx5/device.h
/// `MLX5_BY_PASS_NUM_REGULAR_PRIOS` + `MLX5_BY_PASS_NUM_DONT_TRAP_PRIOS`).
pub const MCAST_TABLE: u32 = 2 * (MAX_PRIORITY as u32 + 1);

/// True if the rule matches only frames to a multicast (group) MAC address: the group bit is set
/// in the address and in the mask of `dst_mac` (Linux fs.c `flow_is_multicast_only` on rawq's
/// Ethernet spec, which always comes first).
pub fn multicast_only(p: &Pattern) -> bool {
    p.dst_mac.is_some_and(|m| m.addr[0] & m.mask[0] & 1 == 1)
}

/// True if rawq gives the rule `IBV_FLOW_ATTR_FLAGS_DONT_TRAP` (verbs, DV, the model): a
/// multicast-only rule that does not drop, so the kernel keeps its copy of multicast traffic
/// (ARP, IPv6 neighbour discovery) that a rule steers to userspace.
pub fn dont_trap(rule: &Rule) -> bool {
    multicast_only(&rule.pattern) && rule.action != Action::Drop
}

/// The index of the kernel's flow table the rule lands in; a frame visits tables in increasing
/// order (module docs). `2 * priority` for a DONT_TRAP rule, [`MCAST_TABLE`] for a multicast drop
/// rule, `2 * priority + 1` for any other.
pub fn rank(rule: &Rule) -> u32 {
    let dt = dont_trap(rule);
    if multicast_only(&rule.pattern) && !dt {
        MCAST_TABLE
    } else {
        2 * u32::from(rule.priority) + u32::from(!dt)
    }
}

/// The indices of `rules` in the order a frame meets them: by [`rank`], then as given.
pub fn order(rules: &[Rule]) -> Vec<usize> {
    let mut o: Vec<usize> = (0..rules.len()).collect();
    // Stable: the given order among equal ranks.
    o.sort_by_key(|&i| rank(&rules[i]));
    o
}

/// What the device does with one frame (indices into the rule slice).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Steering {
    /// DONT_TRAP rules that deliver a copy and let the frame go on, in the order met.
    pub copies: Vec<usize>,
    /// The rule that takes the frame and ends the walk (its action applies: a drop rule drops
    /// it). `None`: the kernel's netdev receives the frame.
    pub taken_by: Option<usize>,
}

impl Steering {
    /// The first rule the frame reaches: what [`classify`](super::classify) returns, and the rule
    /// an AF_XDP port gives the frame to (it cannot copy a frame to a socket and the kernel).
    pub fn first(&self) -> Option<usize> {
        self.copies.first().copied().or(self.taken_by)
    }

    /// True if the kernel's netdev receives the frame (no rule took it).
    pub fn to_kernel(&self) -> bool {
        self.taken_by.is_none()
    }
}

/// Which rules get `frame` on an mlx5 port, and whether the kernel does (module docs).
pub fn steer(rules: &[Rule], frame: &[u8]) -> Steering {
    let mut s = Steering::default();
    let mut table_done = None;
    for i in order(rules) {
        let r = &rules[i];
        let t = rank(r);
        if table_done == Some(t) || !super::matches(r, frame) {
            continue;
        }
        table_done = Some(t);
        if dont_trap(r) {
            s.copies.push(i);
        } else {
            s.taken_by = Some(i);
            break;
        }
    }
    s
}

/// An IP prefix as the device's match sees it: (mask, masked address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IpKey {
    Any,
    V4(u32, u32),
    V6(u128, u128),
}

/// A rule's match as the device holds it (mask and value of each field of
/// `fte_match_set_lyr_2_4`, from the specs src/flow/verbs.rs writes and Linux fs.c
/// `parse_flow_attr` reads): equal keys are the same flow table entry.
#[derive(Debug, PartialEq, Eq)]
struct MatchKey {
    dmac: ([u8; 6], [u8; 6]),
    smac: ([u8; 6], [u8; 6]),
    vlan: Option<u16>,
    ethertype: Option<u16>,
    src: IpKey,
    dst: IpKey,
    proto: Option<u8>,
    sport: Option<u16>,
    dport: Option<u16>,
}

fn match_key(p: &Pattern) -> MatchKey {
    let mac = |m: Option<super::MacMatch>| {
        m.map_or(([0; 6], [0; 6]), |m| {
            (m.mask, std::array::from_fn(|i| m.addr[i] & m.mask[i]))
        })
    };
    let v4 = |n: Option<super::Ipv4Net>| match n {
        Some(n) if n.prefix > 0 => IpKey::V4(n.mask(), u32::from(n.addr) & n.mask()),
        _ => IpKey::Any,
    };
    let v6 = |n: Option<super::Ipv6Net>| match n {
        Some(n) if n.prefix > 0 => IpKey::V6(n.mask(), u128::from(n.addr) & n.mask()),
        _ => IpKey::Any,
    };
    let (ethertype, src, dst) = match p.ip {
        Some(IpMatch::V4 { src, dst }) => (Some(0x0800), v4(src), v4(dst)),
        Some(IpMatch::V6 { src, dst }) => (Some(0x86dd), v6(src), v6(dst)),
        None => (p.ethertype, IpKey::Any, IpKey::Any),
    };
    MatchKey {
        dmac: mac(p.dst_mac),
        smac: mac(p.src_mac),
        vlan: p.vlan,
        ethertype,
        src,
        dst,
        proto: p.ip_proto.or(p.l4.map(|l| l.proto.ip_proto())),
        sport: p.l4.and_then(|l| l.src_port),
        dport: p.l4.and_then(|l| l.dst_port),
    }
}

/// Refuses two rules that would be one flow table entry on an mlx5 port: the same [`rank`] and
/// the same match (after masking: `ipv4 dst 10.0.0.1/24` and `ipv4 dst 10.0.0.9/24` are one
/// match, and so are `udp` and `proto 17`). The kernel answers the second `ibv_create_flow`
/// with EEXIST (module docs), so no backend may accept them. Two drop rules pass (the kernel
/// merges them into one entry).
///
/// # Errors
/// [`RuleError::Collision`] naming both rules (their indices and text).
pub fn check_collisions(rules: &[Rule]) -> Result<(), RuleError> {
    let keys: Vec<(u32, MatchKey)> = rules
        .iter()
        .map(|r| (rank(r), match_key(&r.pattern)))
        .collect();
    for (j, b) in rules.iter().enumerate() {
        for (i, a) in rules[..j].iter().enumerate() {
            if keys[i] != keys[j] || (a.action == Action::Drop && b.action == Action::Drop) {
                continue;
            }
            return Err(RuleError::Collision {
                first: i,
                second: j,
                reason: format!(
                    "`{a}` and `{b}` match the same frames in the same mlx5 flow table (table \
                     {}), where the kernel refuses the second with EEXIST (mlx5 core \
                     fs_core.c `check_conflicting_ftes`: one entry, two flow tags or actions); \
                     make them one rule or give them different priorities",
                    keys[i].0
                ),
            });
        }
    }
    Ok(())
}
