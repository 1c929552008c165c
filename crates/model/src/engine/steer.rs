//! Receive steering: flow rules (match specs with masks, priorities, DONT_TRAP, drop, tag) pick
//! a TIR; the TIR's RSS hash (Toeplitz with its key over the fields it selects) picks an RQ of
//! its indirection table. Frames no rule takes go to the kernel netdev.

use super::*;
use crate::desc::{FlowDesc, FlowSpec, Masked, TirDesc};
use crate::flow;
use crate::wire::cqe;

/// `enum ibv_rx_hash_fields` (rdma-core libibverbs/verbs.h).
pub(crate) mod hash_fields {
    pub const SRC_IPV4: u64 = 1 << 0;
    pub const DST_IPV4: u64 = 1 << 1;
    pub const SRC_IPV6: u64 = 1 << 2;
    pub const DST_IPV6: u64 = 1 << 3;
    pub const SRC_PORT_TCP: u64 = 1 << 4;
    pub const DST_PORT_TCP: u64 = 1 << 5;
    pub const SRC_PORT_UDP: u64 = 1 << 6;
    pub const DST_PORT_UDP: u64 = 1 << 7;
    /// Every field the model hashes.
    pub const ALL: u64 = 0xff;
}

/// A TIR: indirection table and hashing.
pub(crate) struct Tir {
    pub(crate) rqns: Vec<u32>,
    /// The key (as lookup tables: the same hash, a lookup per input byte) and the fields.
    hash: Option<(flow::toeplitz::ToeplitzTable, u64)>,
}

/// A flow rule.
pub(crate) struct Flow {
    pub(crate) d: FlowDesc,
    tag: u32,
    drop: bool,
    /// The kernel's flow table it lands in ([`flow_table`]).
    table: u32,
    /// Its match as the flow table entry holds it.
    key: MatchKey,
    /// Frames this flow took (delivered to its TIR or dropped by it): the flow counter the
    /// kernel binds to a flow created with `IBV_FLOW_SPEC_ACTION_COUNT` (Linux
    /// drivers/infiniband/hw/mlx5/fs.c `_create_flow_rule` adds the COUNT action with the
    /// counter as a destination of the entry; counters.c `read_flow_counters` reads its packets
    /// through `mlx5_fc_query`). It lives and dies with the flow.
    hits: u64,
}

/// `MLX5_IB_FLOW_MCAST_PRIO` (Linux drivers/infiniband/hw/mlx5/mlx5_ib.h): the table after the
/// 16 regular and 16 DONT_TRAP priorities (include/linux/mlx5/device.h
/// `MLX5_BY_PASS_NUM_REGULAR_PRIOS`, `MLX5_BY_PASS_NUM_DONT_TRAP_PRIOS`).
const MCAST_TABLE: u32 = 32;

/// The kernel's flow table of a flow (Linux drivers/infiniband/hw/mlx5/fs.c `get_flow_table`):
/// `2p` with DONT_TRAP and `2p + 1` without (`ib_prio_to_core_prio`), [`MCAST_TABLE`] for a
/// multicast-only flow without DONT_TRAP (`flow_is_multicast_only`: the first spec is Ethernet
/// with the group bit in the destination MAC's mask and value, or IPv4 to a multicast address).
fn flow_table(d: &FlowDesc) -> u32 {
    let mc = match d.specs.first() {
        Some(FlowSpec::Eth { dst, .. }) => dst.mask[0] & dst.value[0] & 1 == 1,
        Some(FlowSpec::Ipv4 { dst, .. }) => dst.value[0] & 0xf0 == 0xe0,
        _ => false,
    };
    if mc && !d.dont_trap {
        MCAST_TABLE
    } else {
        2 * u32::from(d.priority) + u32::from(!d.dont_trap)
    }
}

/// A flow's match as its flow table entry holds it, `[mask, value & mask]` per field of
/// `fte_match_set_lyr_2_4` as Linux fs.c `parse_flow_attr` fills it (an IPv4/IPv6 spec sets the
/// ethertype, a TCP/UDP spec the IP protocol; IPv4 addresses sit in the last 4 bytes of the
/// address fields). Two flows with equal keys in one table are one entry (mlx5 core fs_core.c
/// `add_rule_fg`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MatchKey {
    dmac: [[u8; 6]; 2],
    smac: [[u8; 6]; 2],
    ethertype: [u16; 2],
    vlan: [u16; 2],
    src: [[u8; 16]; 2],
    dst: [[u8; 16]; 2],
    proto: [u8; 2],
    tos: [u8; 2],
    flow_label: [u32; 2],
    tcp: [u16; 4],
    udp: [u16; 4],
}

fn mv<const N: usize>(m: &Masked<[u8; N]>) -> [[u8; N]; 2] {
    [m.mask, std::array::from_fn(|i| m.value[i] & m.mask[i])]
}

fn ip16<const N: usize>(m: &Masked<[u8; N]>) -> [[u8; 16]; 2] {
    let [mask, value] = mv(m);
    let mut out = [[0u8; 16]; 2];
    out[0][16 - N..].copy_from_slice(&mask);
    out[1][16 - N..].copy_from_slice(&value);
    out
}

impl MatchKey {
    fn of(specs: &[FlowSpec]) -> MatchKey {
        let mut k = MatchKey::default();
        let m16 = |m: &Masked<u16>| [m.mask, m.value & m.mask];
        let proto = |k: &mut MatchKey, m: u8, v: u8| {
            if m != 0 && k.proto[0] == 0 {
                k.proto = [m, v & m];
            }
        };
        for s in specs {
            match s {
                FlowSpec::Eth {
                    dst,
                    src,
                    ether_type,
                    vlan_tag,
                } => {
                    (k.dmac, k.smac) = (mv(dst), mv(src));
                    k.ethertype = m16(ether_type);
                    k.vlan = m16(vlan_tag);
                }
                FlowSpec::Ipv4 {
                    src,
                    dst,
                    proto: p,
                    tos,
                } => {
                    k.ethertype = [0xffff, 0x0800];
                    (k.src, k.dst) = (ip16(src), ip16(dst));
                    k.tos = [tos.mask, tos.value & tos.mask];
                    proto(&mut k, p.mask, p.value);
                }
                FlowSpec::Ipv6 {
                    src,
                    dst,
                    next_hdr,
                    flow_label: l,
                    traffic_class: tc,
                } => {
                    k.ethertype = [0xffff, 0x86dd];
                    (k.src, k.dst) = (ip16(src), ip16(dst));
                    k.tos = [tc.mask, tc.value & tc.mask];
                    // The entry's field is 20 bits wide (fs.c `set_flow_label`).
                    k.flow_label = [l.mask & 0xf_ffff, l.value & l.mask & 0xf_ffff];
                    proto(&mut k, next_hdr.mask, next_hdr.value);
                }
                FlowSpec::Tcp { src, dst } => {
                    proto(&mut k, 0xff, 6);
                    k.tcp = [
                        src.mask,
                        src.value & src.mask,
                        dst.mask,
                        dst.value & dst.mask,
                    ];
                }
                FlowSpec::Udp { src, dst } => {
                    proto(&mut k, 0xff, 17);
                    k.udp = [
                        src.mask,
                        src.value & src.mask,
                        dst.mask,
                        dst.value & dst.mask,
                    ];
                }
                FlowSpec::Tag(_) | FlowSpec::Drop => {}
            }
        }
        k
    }
}

pub(crate) enum Deliver {
    Done,
    Wait,
}

impl HwState {
    /// Creates a TIR. `kernel_rules`: refuse what the kernel refuses for an RSS QP (Linux
    /// drivers/infiniband/hw/mlx5/qp.c `create_rss_raw_qp_tir`: IPv4 and IPv6 fields together,
    /// two L4 protocols, no fields over a table of more than one entry: EINVAL). Without them
    /// (the model's own port) one TIR may hash IPv4 and IPv6, TCP and UDP, as a driver's
    /// per-traffic-type TIRs with one key would (Linux mlx5e `mlx5e_rss` / TTC tables).
    pub(crate) fn create_tir(&mut self, d: TirDesc, kernel_rules: bool) -> Result<u32> {
        let bad = |m: String| Err(Error::Config(format!("model create_tir: {m}")));
        if d.rqns.is_empty() || d.rqns.len() > 1 << 16 {
            return bad(format!(
                "indirection table of {} entries: need 1..=65536",
                d.rqns.len()
            ));
        }
        if let Some(&r) = d.rqns.iter().find(|&&r| self.rqs.get(r).is_none()) {
            return bad(format!("unknown RQ {r:#x} in the indirection table"));
        }
        let hash = match &d.hash {
            None => None,
            Some(h) => {
                // mlx5 hashes with a 40-byte Toeplitz key (Linux drivers/infiniband/hw/mlx5/
                // qp.c `create_rss_raw_qp_tir` rejects any other length).
                let Ok(key) = <[u8; 40]>::try_from(h.key.as_slice()) else {
                    return bad(format!("RSS key of {} bytes: mlx5 needs 40", h.key.len()));
                };
                if h.fields & !hash_fields::ALL != 0 {
                    return Err(Error::Unsupported(format!(
                        "model create_tir: RSS fields {:#x}: only the IPv4/IPv6 address and \
                         TCP/UDP port bits (0xff) are modelled",
                        h.fields
                    )));
                }
                use hash_fields::*;
                let v4 = h.fields & (SRC_IPV4 | DST_IPV4) != 0;
                let v6 = h.fields & (SRC_IPV6 | DST_IPV6) != 0;
                let tcp = h.fields & (SRC_PORT_TCP | DST_PORT_TCP) != 0;
                let udp = h.fields & (SRC_PORT_UDP | DST_PORT_UDP) != 0;
                if kernel_rules && (v4 && v6 || tcp && udp) {
                    return bad(format!(
                        "RSS fields {:#x}: one L3 and one L4 protocol per RSS QP (the kernel \
                         answers EINVAL); make one QP per traffic type",
                        h.fields
                    ));
                }
                if kernel_rules && h.fields == 0 && d.rqns.len() > 1 {
                    return bad("no hash fields over a table of several RQs".into());
                }
                Some((flow::toeplitz::ToeplitzTable::new(&key), h.fields))
            }
        };
        if hash.is_none() && d.rqns.len() > 1 {
            return bad("a table of several RQs needs a hash".into());
        }
        self.tirs.insert("TIR", Tir { rqns: d.rqns, hash })
    }

    pub(crate) fn destroy_tir(&mut self, tirn: u32) -> Result<()> {
        if self.tirs.get(tirn).is_none() {
            return Err(Error::Config(format!(
                "model destroy_tir: unknown TIR {tirn:#x}"
            )));
        }
        if self.flows.iter().any(|(_, f)| f.d.tirn == tirn) {
            return Err(Error::Config(format!(
                "model destroy_tir: TIR {tirn:#x} has flows; destroy them first"
            )));
        }
        self.tirs.remove(tirn);
        Ok(())
    }

    pub(crate) fn create_flow(&mut self, d: FlowDesc) -> Result<u32> {
        let bad = |m: String| Err(Error::Config(format!("model create_flow: {m}")));
        // A drop flow has no destination (Linux drivers/infiniband/hw/mlx5/fs.c
        // `mlx5_ib_create_flow` takes the QP's RQ TIR, 0 for a QP without an RQ, and
        // `_create_flow_rule` gives a DROP action no destination): its TIR is not looked up.
        if !d.specs.contains(&FlowSpec::Drop) && self.tirs.get(d.tirn).is_none() {
            return bad(format!("unknown TIR {:#x}", d.tirn));
        }
        let (mut l2, mut l3, mut l4, mut tag, mut drop) = (0, 0, 0, None, false);
        // Linux drivers/infiniband/hw/mlx5/fs.c `set_proto`: the first spec that sets the IP
        // protocol (mask, value) fixes it; a later one must give the same, else EINVAL.
        let mut ip_proto: Option<(u8, u8)> = None;
        let mut set_proto = |mask: u8, value: u8| match ip_proto {
            _ if mask == 0 => true,
            None => {
                ip_proto = Some((mask, value));
                true
            }
            Some(p) => p == (mask, value),
        };
        let mut eth_type = None;
        for s in &d.specs {
            match s {
                FlowSpec::Eth { ether_type, .. } => {
                    l2 += 1;
                    if ether_type.mask == 0xffff {
                        eth_type = Some(ether_type.value);
                    }
                }
                FlowSpec::Ipv4 { proto, .. } => {
                    l3 += 1;
                    if !set_proto(proto.mask, proto.value) {
                        return bad("a second, different IP protocol (fs.c set_proto)".into());
                    }
                    if eth_type.is_some_and(|t| t != 0x0800) {
                        return bad("an IPv4 spec under a non-IPv4 ethertype".into());
                    }
                }
                FlowSpec::Ipv6 { next_hdr, .. } => {
                    l3 += 1;
                    if !set_proto(next_hdr.mask, next_hdr.value) {
                        return bad("a second, different IP protocol (fs.c set_proto)".into());
                    }
                    if eth_type.is_some_and(|t| t != 0x86dd) {
                        return bad("an IPv6 spec under a non-IPv6 ethertype".into());
                    }
                }
                FlowSpec::Tcp { .. } | FlowSpec::Udp { .. } => {
                    l4 += 1;
                    let want = if matches!(s, FlowSpec::Tcp { .. }) {
                        6
                    } else {
                        17
                    };
                    if !set_proto(0xff, want) {
                        return bad("a TCP/UDP spec under an IP spec of another protocol".into());
                    }
                }
                // Linux drivers/infiniband/hw/mlx5/fs.c `parse_flow_attr`: the tag must fit the
                // CQE's 24-bit flow tag field.
                FlowSpec::Tag(t) if *t > 0xff_ffff => {
                    return bad(format!("flow tag {t:#x}: over 24 bits"))
                }
                FlowSpec::Tag(t) => {
                    if tag.replace(*t).is_some() {
                        return bad("two tag specs".into());
                    }
                }
                FlowSpec::Drop => drop = true,
            }
        }
        if l2 > 1 || l3 > 1 || l4 > 1 {
            return bad("more than one spec of the same layer".into());
        }
        // The device's bypass namespace has 16 priorities (the kernel refuses more before
        // asking it: fs.c `mlx5_ib_create_flow`, MLX5_IB_FLOW_LAST_PRIO).
        if d.priority > 15 {
            return bad(format!("priority {}: the device has 0-15", d.priority));
        }
        let (table, key) = (flow_table(&d), MatchKey::of(&d.specs));
        // mlx5 core fs_core.c `add_rule_fg`: a flow with the match of an entry of its table
        // joins that entry (one more destination, the entry's flow tag), unless
        // `check_conflicting_ftes` finds a different drop action or flow tag: EEXIST.
        if let Some((_, e)) = self
            .flows
            .iter()
            .find(|(_, f)| f.table == table && f.key == key)
        {
            if e.drop != drop || tag.is_some_and(|t| t != e.tag) {
                return Err(Error::Os {
                    op: "model create_flow (a flow with the same match in its table, another \
                         flow tag or drop action: fs_core.c check_conflicting_ftes)",
                    source: std::io::Error::from_raw_os_error(libc::EEXIST),
                });
            }
            tag = Some(e.tag);
        }
        let id = self.flows.insert(
            "flow",
            Flow {
                d,
                tag: tag.unwrap_or(0),
                drop,
                table,
                key,
                hits: 0,
            },
        )?;
        // Stable: `order` is by table, then creation; the new flow goes last in its table.
        self.order.push(id);
        let flows = &self.flows;
        self.order
            .sort_by_key(|&n| flows.get(n).map_or(u32::MAX, |f| f.table));
        Ok(id)
    }

    /// Frames flow `id` has taken since it was created ([`Flow::hits`]).
    pub(crate) fn flow_hits(&self, id: u32) -> Result<u64> {
        self.flows
            .get(id)
            .map(|f| f.hits)
            .ok_or_else(|| Error::Config(format!("model flow_hits: unknown flow {id}")))
    }

    pub(crate) fn destroy_flow(&mut self, id: u32) -> Result<()> {
        self.flows
            .remove(id)
            .ok_or_else(|| Error::Config(format!("model destroy_flow: unknown flow {id}")))?;
        self.order.retain(|&n| n != id);
        Ok(())
    }

    /// Moves frames from the wire into the RQs. A frame that must wait (flow control: no RQ
    /// buffer) is held by the port, not put back on the wire: putting it back would refill a
    /// slot the peer has just been told is free, and the peer's next frame would be dropped.
    pub(super) fn receive(&mut self) -> usize {
        let mut n = 0;
        loop {
            let frame = match self.held.take() {
                Some(f) => f,
                None => match self.inbox.pop() {
                    Some(f) => f,
                    None => break,
                },
            };
            match self.rx_frame(&frame) {
                Deliver::Done => {
                    self.inbox.recycle(frame);
                    n += 1;
                }
                Deliver::Wait => {
                    self.held = Some(frame);
                    break;
                }
            }
        }
        n
    }

    /// Steers one frame. Flows are tried by the kernel's flow table ([`flow_table`]), the
    /// earliest created in each; one entry per table applies (a flow that joined it adds its
    /// TIR). A matching flow with DONT_TRAP delivers and lets the frame continue to the next
    /// table and the kernel (verbs.h IBV_FLOW_ATTR_FLAGS_DONT_TRAP; mlx5_ib adds a
    /// forward-to-next-priority destination, drivers/infiniband/hw/mlx5/fs.c
    /// `_create_flow_rule`); a Drop spec drops; no flow (or only DONT_TRAP ones): the kernel
    /// netdev gets it, as on a bifurcated mlx5 port.
    fn rx_frame(&mut self, frame: &[u8]) -> Deliver {
        // The MAC drops runts and frames over the port MTU before steering (Linux mlx5e
        // en_stats.c physical counters `rx_undersize_pkts_phy` / `rx_oversize_pkts_phy`).
        if frame.len() < self.tune.min_frame as usize {
            self.counters.rx_runt += 1;
            return Deliver::Done;
        }
        if frame.len() > self.opts.max_frame as usize {
            self.counters.rx_oversize += 1;
            return Deliver::Done;
        }
        let parsed = flow::parse(frame);
        let mut took = false;
        // The table whose entry matched and the flow that made it; `ends`: that entry has no
        // DONT_TRAP, so the frame goes no further than its table.
        let mut entry: Option<(u32, u32)> = None;
        let mut ends = false;
        for k in 0..self.order.len() {
            let id = self.order[k];
            let Some(fl) = self.flows.get(id) else {
                continue;
            };
            let joined = match entry {
                Some((t, first)) if t == fl.table => match self.flows.get(first) {
                    Some(e) if e.key == fl.key && e.d.tirn != fl.d.tirn && !e.drop => true,
                    _ => continue,
                },
                _ if ends => return Deliver::Done,
                _ => false,
            };
            if !joined
                && !fl
                    .d
                    .specs
                    .iter()
                    .all(|s| spec_matches(s, frame, parsed.as_ref()))
            {
                continue;
            }
            if fl.drop {
                self.counters.rx_rule_drop += 1;
                if let Some(f) = self.flows.get_mut(id) {
                    f.hits += 1;
                }
                return Deliver::Done;
            }
            let (tirn, tag, dont_trap) = (fl.d.tirn, fl.tag, fl.d.dont_trap);
            if !joined {
                entry = Some((fl.table, id));
                ends = !dont_trap;
            }
            if let Deliver::Wait = self.deliver_tir(tirn, frame, parsed.as_ref(), tag, !took) {
                // Held for flow control: counted when it is delivered.
                return Deliver::Wait;
            }
            // Counted as the entry's counter counts: the frame hit the flow, whether or not
            // its RQ then had a buffer (that loss is the RQ's `out_of_buffer`).
            if let Some(f) = self.flows.get_mut(id) {
                f.hits += 1;
            }
            took = true;
        }
        if ends {
            return Deliver::Done;
        }
        self.kernel_gets(frame);
        Deliver::Done
    }

    fn deliver_tir(
        &mut self,
        tirn: u32,
        frame: &[u8],
        parsed: Option<&flow::Parsed>,
        tag: u32,
        may_wait: bool,
    ) -> Deliver {
        let Some(t) = self.tirs.get(tirn) else {
            return Deliver::Done;
        };
        let (hash, htype) = match (&t.hash, parsed) {
            (Some((key, fields)), Some(p)) => rss_hash(key, *fields, frame, p),
            _ => (0, 0),
        };
        // The indirection table is indexed by the hash's low bits (a power-of-two table:
        // `log_ind_tbl_size`, verbs `ibv_create_rwq_ind_table`); the model takes the remainder,
        // the same for power-of-two tables.
        let rqn = t.rqns[hash as usize % t.rqns.len()];
        self.deliver(rqn, frame, hash, htype, tag, may_wait)
    }
}

fn masked_eq<const N: usize>(m: &Masked<[u8; N]>, got: &[u8]) -> bool {
    (0..N).all(|i| got[i] & m.mask[i] == m.value[i] & m.mask[i])
}

fn masked16(m: &Masked<u16>, got: u16) -> bool {
    got & m.mask == m.value & m.mask
}

fn masked8(m: &Masked<u8>, got: u8) -> bool {
    got & m.mask == m.value & m.mask
}

/// One spec against a frame (the kernel's mlx5 flow specs: an IPv4/IPv6 spec also matches the
/// IP version and a TCP/UDP spec the IP protocol, Linux drivers/infiniband/hw/mlx5/fs.c
/// `parse_flow_attr` sets `ip_version` / `ip_protocol`; the ethertype is the one after a VLAN
/// tag; a VLAN mask requires a tag).
fn spec_matches(s: &FlowSpec, f: &[u8], p: Option<&flow::Parsed>) -> bool {
    let Some(p) = p else {
        return matches!(s, FlowSpec::Tag(_) | FlowSpec::Drop);
    };
    let l3 = p.l3;
    match s {
        FlowSpec::Eth {
            dst,
            src,
            ether_type,
            vlan_tag,
        } => {
            let tci = if p.vlan.is_some() {
                u16::from_be_bytes([f[14], f[15]])
            } else if vlan_tag.mask != 0 {
                return false;
            } else {
                0
            };
            masked_eq(dst, &f[0..6])
                && masked_eq(src, &f[6..12])
                && masked16(ether_type, p.ethertype)
                && masked16(vlan_tag, tci)
        }
        FlowSpec::Ipv4 {
            src,
            dst,
            proto,
            tos,
        } => {
            p.ethertype == 0x0800
                && p.ip_proto.is_some()
                && masked_eq(src, &f[l3 + 12..l3 + 16])
                && masked_eq(dst, &f[l3 + 16..l3 + 20])
                && masked8(proto, f[l3 + 9])
                && masked8(tos, f[l3 + 1])
        }
        FlowSpec::Ipv6 {
            src,
            dst,
            next_hdr,
            flow_label,
            traffic_class,
        } => {
            // The first word: version 4 bits, traffic class 8, flow label 20 (RFC 8200); the
            // device keeps 20 bits of the label's mask and value (fs.c `set_flow_label`).
            let word = p.ip_proto.map_or(0, |_| {
                u32::from_be_bytes([f[l3], f[l3 + 1], f[l3 + 2], f[l3 + 3]])
            });
            let label_mask = flow_label.mask & 0xf_ffff;
            p.ethertype == 0x86dd
                && p.ip_proto.is_some()
                && masked_eq(src, &f[l3 + 8..l3 + 24])
                && masked_eq(dst, &f[l3 + 24..l3 + 40])
                && masked8(next_hdr, f[l3 + 6])
                && masked8(traffic_class, (word >> 20) as u8)
                && word & label_mask == flow_label.value & label_mask
        }
        FlowSpec::Tcp { src, dst } | FlowSpec::Udp { src, dst } => {
            let want = if matches!(s, FlowSpec::Tcp { .. }) {
                6
            } else {
                17
            };
            if p.ip_proto != Some(want) {
                return false;
            }
            if src.mask == 0 && dst.mask == 0 {
                return true;
            }
            let Some(o) = p.l4.filter(|&o| o + 4 <= f.len()) else {
                return false;
            };
            masked16(src, u16::from_be_bytes([f[o], f[o + 1]]))
                && masked16(dst, u16::from_be_bytes([f[o + 2], f[o + 3]]))
        }
        FlowSpec::Tag(_) | FlowSpec::Drop => true,
    }
}

/// The TIR's Toeplitz hash over the fields it selects (`ibv_rx_hash_conf.rx_hash_fields_mask`,
/// input order source address, destination address, source port, destination port: the
/// Microsoft RSS specification the mlx5 TIR implements, PRM "TIR" `rx_hash_field_selector`),
/// and the CQE `rss_hash_type` of what entered (`cqe::RSS_HTYPE_*`: Linux
/// include/linux/mlx5/device.h CQE_RSS_HTYPE_*). Fields the frame lacks do not enter; a frame
/// with none of them hashes to 0.
/// `p` is `flow::parse(f)`; the key comes as its lookup tables (`flow::toeplitz`, equal to the
/// bitwise hash: tested there and against `net::toeplitz` in the model's tests).
pub(crate) fn rss_hash(
    key: &flow::toeplitz::ToeplitzTable,
    fields: u64,
    f: &[u8],
    p: &flow::Parsed,
) -> (u32, u8) {
    use hash_fields::*;
    let (l3, mut input, mut n, mut ht) = (p.l3, [0u8; 36], 0usize, 0u8);
    let mut put = |b: &[u8], n: &mut usize| {
        input[*n..*n + b.len()].copy_from_slice(b);
        *n += b.len();
    };
    // The TIR's field selector names one L3 protocol type, the one whose address fields it
    // hashes (Linux drivers/infiniband/hw/mlx5/qp.c `create_rss_raw_qp_tir` sets
    // `rx_hash_field_select.l3_prot_type` from the IPv4 or IPv6 address bits, and ignores it
    // when neither is set): a frame of the other IP version has none of the selected fields,
    // its ports included, and hashes to 0.
    let (v4, v6) = (SRC_IPV4 | DST_IPV4, SRC_IPV6 | DST_IPV6);
    let other_version = match p.ethertype {
        0x0800 => fields & v4 == 0 && fields & v6 != 0,
        0x86dd => fields & v6 == 0 && fields & v4 != 0,
        _ => false,
    };
    if other_version {
        return (0, 0);
    }
    match (p.ethertype, p.ip_proto) {
        (0x0800, Some(_)) => {
            if fields & SRC_IPV4 != 0 {
                put(&f[l3 + 12..l3 + 16], &mut n);
            }
            if fields & DST_IPV4 != 0 {
                put(&f[l3 + 16..l3 + 20], &mut n);
            }
            if fields & (SRC_IPV4 | DST_IPV4) != 0 {
                ht |= cqe::RSS_HTYPE_IPV4;
            }
        }
        (0x86dd, Some(_)) => {
            if fields & SRC_IPV6 != 0 {
                put(&f[l3 + 8..l3 + 24], &mut n);
            }
            if fields & DST_IPV6 != 0 {
                put(&f[l3 + 24..l3 + 40], &mut n);
            }
            if fields & (SRC_IPV6 | DST_IPV6) != 0 {
                ht |= cqe::RSS_HTYPE_IPV6;
            }
        }
        _ => return (0, 0),
    }
    let (sp, dp, t) = match p.ip_proto {
        Some(6) => (SRC_PORT_TCP, DST_PORT_TCP, cqe::RSS_HTYPE_TCP),
        Some(17) => (SRC_PORT_UDP, DST_PORT_UDP, cqe::RSS_HTYPE_UDP),
        _ => (0, 0, 0),
    };
    if let Some(o) =
        p.l4.filter(|&o| o + 4 <= f.len() && fields & (sp | dp) != 0)
    {
        if fields & sp != 0 {
            put(&f[o..o + 2], &mut n);
        }
        if fields & dp != 0 {
            put(&f[o + 2..o + 4], &mut n);
        }
        ht |= t;
    }
    if n == 0 {
        return (0, 0);
    }
    (key.hash(&input[..n]), ht)
}
