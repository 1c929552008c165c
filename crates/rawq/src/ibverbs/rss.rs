//! Receive-side scaling: an indirection table of receive WQs (`ibv_rwq_ind_table`) and a hashing
//! RAW_PACKET QP that spreads matching frames over it by a Toeplitz hash.

use std::mem;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::*;

use super::ffi::{ibv_create_qp_ex, ibv_create_rwq_ind_table, ibv_destroy_rwq_ind_table};

use super::context::Context;
use super::pd::Pd;
use super::qp::QueuePair;
use super::wq::Wq;
use crate::config::{RssConfig, RssFields};
use crate::error::{Error, Result};
use crate::flow::{IpMatch, L4Match, L4Proto, Rule};

/// Which header fields feed the hash (`IBV_RX_HASH_*` bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashFields(pub u64);

impl HashFields {
    /// No hashing: every frame goes to the first table entry (a one-queue "RSS").
    pub const NONE: HashFields = HashFields(0);

    /// Addresses (and ports, when `l4` is TCP or UDP) of IPv4 or IPv6 frames.
    pub fn for_ip(ipv6: bool, l4: Option<L4Proto>) -> HashFields {
        use ibv_rx_hash_fields as f;
        let mut m = if ipv6 {
            f::IBV_RX_HASH_SRC_IPV6.0 | f::IBV_RX_HASH_DST_IPV6.0
        } else {
            f::IBV_RX_HASH_SRC_IPV4.0 | f::IBV_RX_HASH_DST_IPV4.0
        };
        match l4 {
            Some(L4Proto::Udp) => {
                m |= f::IBV_RX_HASH_SRC_PORT_UDP.0 | f::IBV_RX_HASH_DST_PORT_UDP.0
            }
            Some(L4Proto::Tcp) => {
                m |= f::IBV_RX_HASH_SRC_PORT_TCP.0 | f::IBV_RX_HASH_DST_PORT_TCP.0
            }
            _ => {}
        }
        HashFields(m as u64)
    }
}

/// One hashing QP of an RSS rule: the rule narrowed to the traffic this QP takes, and what it
/// hashes ([`HashFields::NONE`]: nothing to spread, the rule's first queue alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RssPart {
    /// The rule, narrowed (an IP version, a transport) where the rule left it open.
    pub rule: Rule,
    /// Fields hashed.
    pub fields: HashFields,
}

/// The hashing QPs an RSS rule needs under `cfg`, in the order their flows must be created.
///
/// The kernel refuses an RSS QP hashing IPv4 and IPv6 fields together, or TCP and UDP ports
/// together (EINVAL, Linux drivers/infiniband/hw/mlx5/qp.c `create_rss_raw_qp_tir`), so a rule
/// that leaves the IP version open gets one part per version spread (its pattern narrowed to
/// that version's ethertype), and with [`RssFields::IpPort`] a rule that leaves the transport
/// open one part per TCP, UDP and the rest of that version. When the rule was narrowed, a last
/// part takes what is left (other ethertypes, versions not spread) to the first queue. All
/// parts have the rule's priority and multicast-ness, so they share one kernel flow table, where
/// the first created rule that matches a frame takes it (`crate::flow::order`): the narrow parts
/// come first.
pub(crate) fn rss_parts(rule: &Rule, cfg: &RssConfig) -> Vec<RssPart> {
    let p = &rule.pattern;
    let named = match (p.ip, p.ethertype) {
        (Some(IpMatch::V4 { .. }), _) | (None, Some(0x0800)) => Some(false),
        (Some(IpMatch::V6 { .. }), _) | (None, Some(0x86dd)) => Some(true),
        // Not IP: nothing to hash.
        (None, Some(_)) => {
            return vec![RssPart {
                rule: rule.clone(),
                fields: HashFields::NONE,
            }]
        }
        (None, None) => None,
    };
    // The transport the rule names, if any (its ports can be hashed).
    let l4 = p.l4.map(|l| Some(l.proto)).or(match p.ip_proto {
        Some(6) => Some(Some(L4Proto::Tcp)),
        Some(17) => Some(Some(L4Proto::Udp)),
        Some(_) => Some(None),
        None => None,
    });
    let ports = cfg.fields == RssFields::IpPort;
    let mut parts = Vec::new();
    let versions: &[bool] = match named {
        Some(false) => &[false],
        Some(true) => &[true],
        None => &[false, true],
    };
    for &v6 in versions {
        if !cfg.versions.spreads(v6) {
            continue;
        }
        let mut r = rule.clone();
        if named.is_none() {
            r.pattern.ethertype = Some(if v6 { 0x86dd } else { 0x0800 });
        }
        match l4 {
            Some(proto) => parts.push(RssPart {
                fields: HashFields::for_ip(v6, proto.filter(|_| ports)),
                rule: r,
            }),
            None if ports => {
                for proto in [L4Proto::Tcp, L4Proto::Udp] {
                    let mut t = r.clone();
                    t.pattern.l4 = Some(L4Match {
                        proto,
                        src_port: None,
                        dst_port: None,
                    });
                    parts.push(RssPart {
                        rule: t,
                        fields: HashFields::for_ip(v6, Some(proto)),
                    });
                }
                parts.push(RssPart {
                    rule: r,
                    fields: HashFields::for_ip(v6, None),
                });
            }
            None => parts.push(RssPart {
                rule: r,
                fields: HashFields::for_ip(v6, None),
            }),
        }
    }
    // What no part took: the rule as it is, unhashed. Not needed when one unnarrowed part
    // already is the whole rule.
    if parts.last().is_none_or(|last| last.rule != *rule) {
        parts.push(RssPart {
            rule: rule.clone(),
            fields: HashFields::NONE,
        });
    }
    parts
}

/// The table size for `n` queues: the next power of two (entries repeat the queues in order).
pub fn table_size(n: usize) -> Option<usize> {
    if n == 0 {
        return None;
    }
    n.checked_next_power_of_two()
}

/// An indirection table over receive WQs. Keeps the WQs alive.
pub struct IndTable {
    tbl: NonNull<ibv_rwq_ind_table>,
    _wqs: Vec<Arc<Wq>>,
    _ctx: Context,
}

// SAFETY: table handles may be used from any thread; freed only in `Drop`.
unsafe impl Send for IndTable {}
// SAFETY: see `Send`.
unsafe impl Sync for IndTable {}

impl std::fmt::Debug for IndTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndTable")
            .field("wqs", &self._wqs.len())
            .finish()
    }
}

impl Drop for IndTable {
    fn drop(&mut self) {
        // SAFETY: hashing QPs over this table hold an `Arc<IndTable>`, so they are gone.
        let rc = unsafe { ibv_destroy_rwq_ind_table(self.tbl.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_rwq_ind_table failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

impl IndTable {
    /// Creates a table over `wqs`. Verbs tables have a power-of-two size: when `wqs.len()` is not
    /// one, the WQs are repeated in order to fill the next power of two (so the spread is uneven
    /// by at most one table slot per queue).
    ///
    /// # Errors
    /// [`Error::Config`] for an empty list; [`Error::Os`]: EINVAL when the size exceeds the
    /// device's `max_rwq_indirection_table_size`, EOPNOTSUPP without RSS support.
    pub fn new(ctx: &Context, wqs: &[Arc<Wq>]) -> Result<IndTable> {
        let size = table_size(wqs.len())
            .ok_or_else(|| Error::Config("an RSS table needs at least one queue".into()))?;
        let mut raw: Vec<*mut ibv_wq> = (0..size).map(|i| wqs[i % wqs.len()].as_raw()).collect();
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_rwq_ind_table_init_attr = unsafe { mem::zeroed() };
        a.log_ind_tbl_size = size.trailing_zeros();
        a.ind_tbl = raw.as_mut_ptr();
        // SAFETY: `raw` holds `size` live WQs and outlives the call; the context is alive.
        let t = unsafe { ibv_create_rwq_ind_table(ctx.as_raw(), &mut a) };
        let tbl = NonNull::new(t).ok_or_else(|| Error::last_os("ibv_create_rwq_ind_table"))?;
        Ok(IndTable {
            tbl,
            _wqs: wqs.to_vec(),
            _ctx: ctx.clone(),
        })
    }

    /// The raw table, valid while `self` lives.
    pub fn as_raw(&self) -> *mut ibv_rwq_ind_table {
        self.tbl.as_ptr()
    }
}

/// A hashing RAW_PACKET QP (receive only) spreading frames over an [`IndTable`]. Flow rules
/// attach to it like to any QP. Keeps the table and PD alive.
pub struct RssQp {
    qp: NonNull<ibv_qp>,
    fields: HashFields,
    _table: Arc<IndTable>,
    _pd: Pd,
}

// SAFETY: QP handles may be used from any thread; nothing is posted to a hashing QP.
unsafe impl Send for RssQp {}
// SAFETY: see `Send`.
unsafe impl Sync for RssQp {}

impl std::fmt::Debug for RssQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RssQp")
            .field("fields", &self.fields)
            .finish()
    }
}

impl Drop for RssQp {
    fn drop(&mut self) {
        // SAFETY: flows attached to this QP hold an `Arc`, so they are gone.
        let rc = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_qp(RSS) failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

impl QueuePair for RssQp {
    fn as_raw(&self) -> *mut ibv_qp {
        self.qp.as_ptr()
    }
}

impl RssQp {
    /// Creates a hashing QP over `table` with Toeplitz `key` on `fields`. It needs no state
    /// transitions: it is ready once created.
    ///
    /// # Errors
    /// [`Error::Permission`] without CAP_NET_RAW; [`Error::Os`]: EOPNOTSUPP when the device
    /// cannot hash on `fields`, EINVAL for a bad key length.
    pub fn create(pd: &Pd, table: Arc<IndTable>, key: &[u8], fields: HashFields) -> Result<RssQp> {
        let key_len = u8::try_from(key.len())
            .map_err(|_| Error::Config(format!("RSS key of {} bytes is too long", key.len())))?;
        let mut key = key.to_vec();
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_qp_init_attr_ex = unsafe { mem::zeroed() };
        a.qp_type = ibv_qp_type::IBV_QPT_RAW_PACKET;
        a.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0
            | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_IND_TABLE.0
            | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_RX_HASH.0;
        a.pd = pd.as_raw();
        a.rwq_ind_tbl = table.as_raw();
        a.rx_hash_conf = ibv_rx_hash_conf {
            rx_hash_function: ibv_rx_hash_function_flags::IBV_RX_HASH_FUNC_TOEPLITZ.0 as u8,
            rx_hash_key_len: key_len,
            rx_hash_key: key.as_mut_ptr(),
            rx_hash_fields_mask: fields.0,
        };
        // SAFETY: PD and table are alive and kept so; `key` outlives the call.
        let qp = unsafe { ibv_create_qp_ex(pd.context().as_raw(), &mut a) };
        let qp = NonNull::new(qp).ok_or_else(|| Error::last_os("ibv_create_qp_ex(RSS)"))?;
        Ok(RssQp {
            qp,
            fields,
            _table: table,
            _pd: pd.clone(),
        })
    }

    /// The fields this QP hashes on.
    pub fn fields(&self) -> HashFields {
        self.fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IpVersions;

    #[test]
    fn tables_round_up_to_powers_of_two() {
        assert_eq!(table_size(0), None);
        assert_eq!(table_size(1), Some(1));
        assert_eq!(table_size(3), Some(4));
        assert_eq!(table_size(4), Some(4));
        assert_eq!(table_size(5), Some(8));
    }

    fn parts(text: &str, cfg: &RssConfig) -> Vec<(String, u64)> {
        let rule: Rule = text.parse().unwrap();
        rss_parts(&rule, cfg)
            .into_iter()
            .map(|p| {
                assert!(p.rule.validate(4).is_ok(), "{}", p.rule);
                assert_eq!(
                    (p.rule.priority, &p.rule.action),
                    (rule.priority, &rule.action)
                );
                let text = p.rule.to_string();
                let pattern = text.split(" -> ").next().unwrap_or_default().trim();
                (pattern.to_string(), p.fields.0)
            })
            .collect()
    }

    #[test]
    fn rss_rules_get_one_qp_per_ip_version_and_transport() {
        let both = RssConfig::default();
        let ip_only = RssConfig {
            fields: RssFields::Ip,
            ..both
        };
        // No IP version named: IPv4 and IPv6 each get a QP (VPP-1939), then the rest.
        assert_eq!(
            parts("udp dst-port 9000 -> rss 0,1,2,3", &both),
            [
                ("ethertype 0x0800 udp dst-port 9000".to_string(), 0x3 | 0xc0),
                ("ethertype 0x86dd udp dst-port 9000".to_string(), 0xc | 0xc0),
                ("udp dst-port 9000".to_string(), 0),
            ]
        );
        assert_eq!(
            parts("udp dst-port 9000 -> rss 0,1", &ip_only),
            [
                ("ethertype 0x0800 udp dst-port 9000".to_string(), 0x3),
                ("ethertype 0x86dd udp dst-port 9000".to_string(), 0xc),
                ("udp dst-port 9000".to_string(), 0),
            ]
        );
        // No transport named, ports asked for: TCP, UDP and the rest of each version.
        let p = parts("promiscuous -> rss 0,1", &both);
        let fields: Vec<u64> = p.iter().map(|x| x.1).collect();
        assert_eq!(fields, [0x33, 0xc3, 0x3, 0x3c, 0xcc, 0xc, 0]);
        assert!(p[0].0.contains("0x0800") && p[0].0.contains("tcp"), "{p:?}");
        assert!(p[4].0.contains("0x86dd") && p[4].0.contains("udp"), "{p:?}");
        // A named version: one QP, the rule as it is.
        assert_eq!(
            parts("ipv6 dst ::1 tcp -> rss 0,1", &both),
            [("ipv6 dst ::1 tcp".to_string(), 0xc | 0x30)]
        );
        // IPv4 only spread: IPv6 (and everything else) to the first queue.
        let v4 = RssConfig {
            versions: IpVersions::V4,
            ..both
        };
        assert_eq!(
            parts("udp -> rss 0,1", &v4),
            [
                ("ethertype 0x0800 udp".to_string(), 0x3 | 0xc0),
                ("udp".to_string(), 0),
            ]
        );
        assert_eq!(
            parts("ipv6 udp -> rss 0,1", &v4),
            [("ipv6 udp".to_string(), 0)]
        );
        // Not IP: nothing to hash.
        assert_eq!(parts("ethertype 0x88f7 -> rss 0,1", &both).len(), 1);
        // No part ever hashes both versions or both transports (the kernel's EINVAL).
        for text in [
            "promiscuous -> rss 0,1",
            "udp -> rss 0,1",
            "proto 6 -> rss 0,1",
        ] {
            for (_, f) in parts(text, &both) {
                assert!(f & 0x3 == 0 || f & 0xc == 0, "{text}: {f:#x}");
                assert!(f & 0x30 == 0 || f & 0xc0 == 0, "{text}: {f:#x}");
            }
        }
    }

    #[test]
    fn hash_fields_follow_the_pattern() {
        assert_eq!(HashFields::for_ip(false, None).0, 0x3);
        assert_eq!(HashFields::for_ip(true, None).0, 0xc);
        assert_eq!(HashFields::for_ip(false, Some(L4Proto::Udp)).0, 0x3 | 0xc0);
        assert_eq!(HashFields::for_ip(true, Some(L4Proto::Tcp)).0, 0xc | 0x30);
    }
}
