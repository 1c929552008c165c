//! The device's frame parser: where the header fields sit that its flow tables match and its
//! TIRs hash.
//!
//! Written from the device's match-field definitions, not from rawq's parser: the PRM's
//! `fte_match_set_lyr_2_4` (Linux include/linux/mlx5/mlx5_ifc.h) names what the steering
//! sees of a frame: `cvlan_tag` and `first_vid` of its first 802.1Q tag, the `ethertype`
//! after that tag, `ip_protocol`, `frag`, the addresses and the TCP/UDP ports. The verbs flow
//! specs reach exactly these through the kernel's translation (drivers/infiniband/hw/mlx5/fs.c
//! `parse_flow_attr`: `IB_FLOW_SPEC_ETH` sets dmac, smac, ethertype and, with a VLAN mask,
//! `cvlan_tag` + `first_vid`/`first_prio`/`first_cfi`; `IB_FLOW_SPEC_IPV4`/`IPV6` the addresses
//! and `ip_protocol` from `proto`/`next_hdr`; `IB_FLOW_SPEC_TCP`/`UDP` the ports). The TIR's
//! hash takes its fields from the same parse (PRM "TIR" `rx_hash_field_selector`).
//!
//! What the parser does not model: a second (QinQ / `svlan_tag`) tag, IPv6 extension headers
//! and tunnels: a frame with them has no L4 header here.
//!
//! Toeplitz (`toeplitz`): the model's own copy, checked against Microsoft's published
//! verification vectors in its tests (and, through the RSS hash DPDK's mlx5 PMD reads from
//! the model's CQEs, against tests/emu/dpdk_decode.rs's independent Toeplitz).

pub mod toeplitz;

/// 802.1Q customer VLAN TPID: the tag `cvlan_tag` stands for.
const TPID_CVLAN: u16 = 0x8100;
/// Ethertype of IPv4 (`ip_version` 4 in the PRM's match set).
const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6 (`ip_version` 6).
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Ethernet header: destination, source, ethertype (IEEE 802.3).
const ETH_LEN: usize = 14;
/// An 802.1Q tag: TPID, TCI.
const VLAN_LEN: usize = 4;
/// IPv4 header without options (RFC 791), the least the device parses as IPv4.
const IPV4_MIN: usize = 20;
/// IPv6 fixed header (RFC 8200).
const IPV6_LEN: usize = 40;

/// The frame as the device's steering sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// `first_vid`: the VLAN id of the first tag, present when `cvlan_tag` is (an 802.1Q TPID
    /// after the source MAC).
    pub vlan: Option<u16>,
    /// `ethertype`: after the first tag, if any.
    pub ethertype: u16,
    /// Offset of the L3 header (after the first tag).
    pub l3: usize,
    /// `ip_protocol`: the IPv4 protocol or IPv6 next header.
    pub ip_proto: Option<u8>,
    /// Offset of the L4 header, whose ports the `tcp_*port`/`udp_*port` fields match: only in
    /// an unfragmented packet or a first fragment (a later one carries no L4 header; its
    /// `frag` bit is set and only its addresses hash).
    pub l4: Option<usize>,
}

fn be16_at(f: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]))
}

/// The Ethernet header and the first 802.1Q tag: (`first_vid`, ethertype, L3 offset).
fn layer2(f: &[u8]) -> Option<(Option<u16>, u16, usize)> {
    let et = be16_at(f, 12)?;
    if et != TPID_CVLAN {
        return Some((None, et, ETH_LEN));
    }
    let tci = be16_at(f, ETH_LEN)?;
    let inner = be16_at(f, ETH_LEN + 2)?;
    Some((Some(tci & 0x0fff), inner, ETH_LEN + VLAN_LEN))
}

/// IPv4 at `l3`: (protocol, L4 offset unless a non-first fragment or a bad IHL).
fn ipv4(f: &[u8], l3: usize) -> Option<(u8, Option<usize>)> {
    let h = f.get(l3..l3 + IPV4_MIN)?;
    let ihl = usize::from(h[0] & 0x0f) * 4;
    // Flags (3 bits) then the fragment offset (13 bits, in 8-byte units).
    let offset = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
    let l4 = (ihl >= IPV4_MIN && offset == 0).then_some(l3 + ihl);
    Some((h[9], l4))
}

/// IPv6 at `l3`: (next header, L4 offset right after the fixed header).
fn ipv6(f: &[u8], l3: usize) -> Option<(u8, Option<usize>)> {
    let h = f.get(l3..l3 + IPV6_LEN)?;
    Some((h[6], Some(l3 + IPV6_LEN)))
}

/// Parses the headers of an Ethernet frame (from the destination MAC, no FCS). `None` for a
/// frame shorter than an Ethernet header (or than its announced tag); a truncated IP header
/// leaves `ip_proto` and `l4` unset.
pub fn parse(frame: &[u8]) -> Option<Parsed> {
    let (vlan, ethertype, l3) = layer2(frame)?;
    let ip = match ethertype {
        ETHERTYPE_IPV4 => ipv4(frame, l3),
        ETHERTYPE_IPV6 => ipv6(frame, l3),
        _ => None,
    };
    Some(Parsed {
        vlan,
        ethertype,
        l3,
        ip_proto: ip.map(|(p, _)| p),
        l4: ip.and_then(|(_, l4)| l4),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: Option<u16>, ethertype: u16, l3: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if let Some(t) = tag {
            f.extend(TPID_CVLAN.to_be_bytes());
            f.extend(t.to_be_bytes());
        }
        f.extend(ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f
    }

    #[test]
    fn tags_protocols_and_fragments() {
        let mut v4 = [0u8; 28];
        v4[0] = 0x45;
        v4[9] = 17;
        let p = parse(&frame(Some(0xe064), ETHERTYPE_IPV4, &v4)).unwrap();
        assert_eq!((p.vlan, p.ethertype, p.l3), (Some(0x064), 0x0800, 18));
        assert_eq!((p.ip_proto, p.l4), (Some(17), Some(38)));
        // A first fragment (MF, offset 0) keeps its L4 header; a later one has none.
        v4[6] = 0x20;
        assert_eq!(
            parse(&frame(None, ETHERTYPE_IPV4, &v4)).unwrap().l4,
            Some(34)
        );
        v4[7] = 8;
        let p = parse(&frame(None, ETHERTYPE_IPV4, &v4)).unwrap();
        assert_eq!((p.ip_proto, p.l4), (Some(17), None));
        // IHL under 5 words: no L4 header.
        v4[6..8].fill(0);
        v4[0] = 0x44;
        assert_eq!(parse(&frame(None, ETHERTYPE_IPV4, &v4)).unwrap().l4, None);
        let mut v6 = [0u8; 48];
        v6[6] = 6;
        let p = parse(&frame(None, ETHERTYPE_IPV6, &v6)).unwrap();
        assert_eq!((p.ip_proto, p.l4), (Some(6), Some(54)));
    }

    #[test]
    fn short_frames_never_panic() {
        let f = frame(Some(5), ETHERTYPE_IPV6, &[0u8; 48]);
        for n in 0..f.len() {
            let p = parse(&f[..n]);
            assert_eq!(p.is_some(), n >= 18, "{n}");
            if let Some(p) = p {
                assert_eq!(p.ip_proto.is_some(), n >= 58, "{n}");
            }
        }
        assert_eq!(parse(&[0u8; 13]), None);
    }
}
