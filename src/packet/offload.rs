//! Checks of a packet's transmit offload requests that every backend makes the same way.

use super::Packet;

/// The longest TSO header (Ethernet + VLAN + IP + TCP with options) rawq hands a device:
/// 192 bytes, more than the longest such header (18 + 60 + 60 over IPv4, 18 + 40 + 60 over
/// IPv6 without extension headers), and what fits the Ethernet segment of a WQE with room for
/// the payload's data segments.
pub(crate) const MAX_TSO_HEADER: usize = 192;

/// The header length (Ethernet through the end of the TCP header, options included) of a
/// packet asking for TSO with `mss`, after checking the request can be carried out: MSS not
/// 0, Ethernet (at most one 802.1Q tag) + IPv4 without fragmentation or IPv6 without extension
/// headers + TCP, the header inside the first buffer and at most [`MAX_TSO_HEADER`] bytes,
/// the payload at most `max_payload` bytes. The error says which check failed.
pub(crate) fn tso_header_len(p: &Packet, mss: u16, max_payload: u32) -> Result<usize, String> {
    if mss == 0 {
        return Err("TSO with an MSS of 0 (give the largest TCP payload per segment)".into());
    }
    let d = p.data();
    let be16 = |o: usize| d.get(o..o + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let short = || {
        format!(
            "TSO: the Ethernet, IP and TCP headers must lie in the packet's first buffer ({} \
             bytes)",
            d.len()
        )
    };
    let mut l3 = 14;
    let mut et = be16(12).ok_or_else(short)?;
    if et == 0x8100 {
        et = be16(16).ok_or_else(short)?;
        l3 = 18;
    }
    let (proto, l4) = match et {
        0x0800 => {
            let b = d.get(l3..l3 + 20).ok_or_else(short)?;
            let ihl = (b[0] & 0x0f) as usize * 4;
            if b[0] >> 4 != 4 || ihl < 20 {
                return Err("TSO: malformed IPv4 header".into());
            }
            if u16::from_be_bytes([b[6], b[7]]) & 0x3fff != 0 {
                return Err("TSO of an IPv4 fragment".into());
            }
            (b[9], l3 + ihl)
        }
        0x86dd => (*d.get(l3 + 6).ok_or_else(short)?, l3 + 40),
        _ => {
            return Err(format!(
                "TSO of a frame with ethertype 0x{et:04x}: only IPv4 and IPv6 are segmented"
            ))
        }
    };
    if proto != 6 {
        return Err(format!(
            "TSO of IP protocol {proto}: only TCP is segmented (no IPv6 extension headers)"
        ));
    }
    let doff = (*d.get(l4 + 12).ok_or_else(short)? >> 4) as usize * 4;
    let len = l4 + doff;
    if doff < 20 {
        return Err("TSO: malformed TCP header (data offset below 5)".into());
    }
    if len > d.len() {
        return Err(short());
    }
    if len > MAX_TSO_HEADER {
        return Err(format!(
            "TSO header of {len} bytes: at most {MAX_TSO_HEADER}"
        ));
    }
    let payload = p.len() - len;
    if payload > max_payload as usize {
        return Err(format!(
            "TSO payload of {payload} bytes: this port segments at most {max_payload}"
        ));
    }
    Ok(len)
}
