//! The frame parser the device's steering and hashing use.
//!
//! The model's own copy of `parse` from rawq's src/flow/mod.rs (one 802.1Q tag, IPv4 / IPv6, the
//! L4 header of a first fragment), so that the model imports nothing from rawq; to be re-derived
//! from the vendor sources (the PRM's flow table match fields, rdma-core's
//! `ibv_flow_spec_*`) as issue 18 asks.

pub mod toeplitz;

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
