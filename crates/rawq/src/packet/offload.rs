//! Checks of a packet's transmit offload requests that every backend makes the same way.

use super::Packet;
use crate::error::TxRefusal;

/// The longest TSO header (Ethernet + VLAN + IP + TCP with options) rawq hands a device:
/// 192 bytes, more than the longest such header (18 + 60 + 60 over IPv4, 18 + 40 + 60 over
/// IPv6 without extension headers), and what fits the Ethernet segment of a WQE with room for
/// the payload's data segments.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) const MAX_TSO_HEADER: usize = 192;

/// The header length (Ethernet through the end of the TCP header, options included) of a
/// packet asking for TSO with `mss`, after checking the request can be carried out: MSS not
/// 0, Ethernet (at most one 802.1Q tag) + IPv4 without fragmentation or IPv6 without extension
/// headers + TCP, the header inside the first buffer and at most [`MAX_TSO_HEADER`] bytes,
/// the payload at most `max_payload` bytes. The error says which check failed.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) fn tso_header_len(p: &Packet, mss: u16, max_payload: u32) -> Result<usize, TxRefusal> {
    if mss == 0 {
        return Err(TxRefusal::TsoMssZero);
    }
    let d = p.data();
    let be16 = |o: usize| d.get(o..o + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let short = || TxRefusal::TsoHeaderSplit { first: d.len() };
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
                return Err(TxRefusal::TsoBadIpv4);
            }
            if u16::from_be_bytes([b[6], b[7]]) & 0x3fff != 0 {
                return Err(TxRefusal::TsoFragment);
            }
            (b[9], l3 + ihl)
        }
        0x86dd => (*d.get(l3 + 6).ok_or_else(short)?, l3 + 40),
        _ => return Err(TxRefusal::TsoNotIp { ethertype: et }),
    };
    if proto != 6 {
        return Err(TxRefusal::TsoNotTcp { protocol: proto });
    }
    let doff = (*d.get(l4 + 12).ok_or_else(short)? >> 4) as usize * 4;
    let len = l4 + doff;
    if doff < 20 {
        return Err(TxRefusal::TsoBadTcp);
    }
    if len > d.len() {
        return Err(short());
    }
    if len > MAX_TSO_HEADER {
        return Err(TxRefusal::TsoHeaderTooLong {
            len,
            max: MAX_TSO_HEADER,
        });
    }
    let payload = p.len() - len;
    if payload > max_payload as usize {
        return Err(TxRefusal::TsoPayloadTooLong {
            payload,
            max: max_payload,
        });
    }
    Ok(len)
}

/// Where the checksums of a frame are: the IP header at `l3` (`ihl` bytes, IPv4 if `v4`), the
/// L4 datagram `l4..end` with its checksum field at `at` (`None`: no L4 checksum to fill: not
/// TCP / UDP, an IPv4 fragment), the pseudo-header sum `pseudo`.
struct CsumLayout {
    l3: usize,
    ihl: usize,
    v4: bool,
    proto: u8,
    l4: usize,
    end: usize,
    at: Option<usize>,
    pseudo: u32,
}

/// The checksum layout of a frame of `total` bytes whose headers are in `f` (the frame, or its
/// first buffer). `None` when there is nothing to fill: not IP, truncated headers, lengths past
/// the frame.
fn csum_layout(f: &[u8], total: usize) -> Option<CsumLayout> {
    use super::checksum::checksum;
    let be16 = |o: usize| Some(u16::from_be_bytes([*f.get(o)?, *f.get(o + 1)?]));
    let (mut et, mut s) = (be16(12)?, 14);
    if et == 0x8100 {
        et = be16(16)?;
        s = 18;
    }
    let (v4, ihl, proto, end, pseudo, frag) = match et {
        0x0800 => {
            let b = f.get(s..s + 20)?;
            let ihl = (b[0] & 0x0f) as usize * 4;
            let end = s + u16::from_be_bytes([b[2], b[3]]) as usize;
            if b[0] >> 4 != 4 || ihl < 20 || f.len() < s + ihl || end > total || end < s + ihl {
                return None;
            }
            let frag = u16::from_be_bytes([b[6], b[7]]) & 0x3fff != 0;
            (true, ihl, b[9], end, checksum(&b[12..20], 0), frag)
        }
        0x86dd => {
            let b = f.get(s..s + 40)?;
            let end = s + 40 + u16::from_be_bytes([b[4], b[5]]) as usize;
            if end > total {
                return None;
            }
            (false, 40, b[6], end, checksum(&b[8..40], 0), false)
        }
        _ => return None,
    };
    let l4 = s + ihl;
    let at = match proto {
        _ if frag => None,
        6 if end >= l4 + 20 => Some(l4 + 16),
        17 if end >= l4 + 8 => Some(l4 + 6),
        _ => None,
    };
    // The checksum field must lie in the first buffer (it is written there).
    let at = at.filter(|&a| a + 2 <= f.len());
    Some(CsumLayout {
        l3: s,
        ihl,
        v4,
        proto,
        l4,
        end,
        at,
        pseudo,
    })
}

/// The L4 checksum from the sum of the datagram's bytes `sum` (checksum field zero).
fn l4_csum(lo: &CsumLayout, sum: u32) -> u16 {
    let len = (lo.end - lo.l4) as u32;
    let mut c = super::checksum::csum_fold(
        sum + lo.pseudo + lo.proto as u32 + (len & 0xffff) + (len >> 16),
    );
    if lo.proto == 17 && c == 0 {
        c = 0xffff;
    }
    c
}

/// Fills the IPv4 header checksum (`l3`) and the TCP / UDP checksum (`l4`, over IPv4 or IPv6)
/// of the Ethernet frame `f` in software, as a device asked for them would (what a backend
/// without the offload does with the request instead of ignoring it). Frames that are not
/// IP, IPv4 fragments (L4), IPv6 with extension headers (L4) and truncated headers are left as
/// they are (a device computes nothing there either); a UDP checksum of 0 goes out as 0xffff
/// (RFC 768).
pub(crate) fn fill_checksums(f: &mut [u8], l3: bool, l4: bool) {
    let Some(lo) = csum_layout(f, f.len()) else {
        return;
    };
    fill_l3(f, &lo, l3);
    if let (true, Some(at)) = (l4, lo.at) {
        f[at..at + 2].fill(0);
        let c = l4_csum(&lo, super::checksum::checksum(&f[lo.l4..lo.end], 0));
        f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

fn fill_l3(f: &mut [u8], lo: &CsumLayout, l3: bool) {
    if l3 && lo.v4 {
        let s = lo.l3;
        f[s + 10..s + 12].fill(0);
        let c = super::checksum::csum_fold(super::checksum::checksum(&f[s..s + lo.ihl], 0));
        f[s + 10..s + 12].copy_from_slice(&c.to_be_bytes());
    }
}

/// [`fill_checksums`] for a packet that may be chained: the headers (and the L4 checksum field)
/// must lie in its first buffer; the L4 sum runs over every buffer.
pub(crate) fn fill_packet_checksums(p: &mut Packet, l3: bool, l4: bool) {
    if p.segment_count() == 1 {
        fill_checksums(p.data_mut(), l3, l4);
        return;
    }
    let Some(lo) = csum_layout(p.data(), p.len()) else {
        return;
    };
    fill_l3(p.data_mut(), &lo, l3);
    let (true, Some(at)) = (l4, lo.at) else {
        return;
    };
    p.data_mut()[at..at + 2].fill(0);
    // Byte by byte over the buffers (a cold path): even offsets from `l4` are high bytes.
    let (mut sum, mut pos) = (0u32, 0usize);
    for s in p.segments() {
        for &b in s.data {
            if (lo.l4..lo.end).contains(&pos) {
                sum += if (pos - lo.l4) % 2 == 0 {
                    (b as u32) << 8
                } else {
                    b as u32
                };
                // Fold now and then so that no sum overflows.
                if sum > 0x7fff_ffff {
                    sum = (sum & 0xffff) + (sum >> 16);
                }
            }
            pos += 1;
        }
    }
    let c = l4_csum(&lo, sum);
    p.data_mut()[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Checks that the frame `p` can take an inserted 802.1Q tag: at least an Ethernet header and
/// no tag already (ethertype 0x8100, 0x88a8 or 0x9100: the tag would go inside the outer one,
/// which is QinQ, not what was asked).
pub(crate) fn check_untagged(p: &Packet) -> Result<(), TxRefusal> {
    let d = p.data();
    if d.len() < 14 {
        return Err(TxRefusal::VlanShortFrame { len: d.len() });
    }
    let et = u16::from_be_bytes([d[12], d[13]]);
    if matches!(et, 0x8100 | 0x88a8 | 0x9100) {
        return Err(TxRefusal::VlanAlreadyTagged { ethertype: et });
    }
    Ok(())
}

/// Inserts the tag `p.offload.vlan_insert` asks for in software: 4 bytes of headroom taken,
/// the MAC addresses moved to the front, `0x8100` and the TCI after them; the request is then
/// cleared (so that a retried packet is not tagged twice).
pub(crate) fn insert_vlan(p: &mut Packet) -> Result<(), TxRefusal> {
    let Some(tci) = p.offload.vlan_insert else {
        return Ok(());
    };
    check_untagged(p)?;
    if p.headroom() < 4 {
        return Err(TxRefusal::VlanNoHeadroom);
    }
    p.prepend(4).map_err(|_| TxRefusal::VlanNoHeadroom)?;
    let d = p.data_mut();
    d.copy_within(4..16, 0);
    d[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
    d[14..16].copy_from_slice(&tci.to_be_bytes());
    p.offload.vlan_insert = None;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fill_checksums;

    /// Ones' complement sum folded (0xffff over a range that includes a correct checksum).
    fn folded(b: &[u8], mut s: u32) -> u16 {
        for c in b.chunks(2) {
            s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn software_checksums_verify_for_tcp_and_udp_over_ipv4_and_ipv6() {
        for (v6, proto, vlan) in [
            (false, 6u8, false),
            (false, 17, true),
            (true, 6, false),
            (true, 17, true),
        ] {
            let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
            if vlan {
                f.extend_from_slice(&[0x81, 0, 0, 5]);
            }
            let l3 = f.len() + 2;
            let l4len = if proto == 6 { 20 } else { 8 } + 101;
            if v6 {
                f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
                f.extend_from_slice(&(l4len as u16).to_be_bytes());
                f.extend_from_slice(&[proto, 64]);
                f.extend((0..32).map(|i| i as u8 * 3));
            } else {
                f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
                f.extend_from_slice(&((20 + l4len) as u16).to_be_bytes());
                f.extend_from_slice(&[
                    0, 7, 0x40, 0, 64, proto, 0xde, 0xad, 10, 0, 0, 1, 10, 0, 0, 2,
                ]);
            }
            let l4 = f.len();
            f.extend((0..l4len).map(|i| (i * 31 + 7) as u8));
            if proto == 6 {
                f[l4 + 12] = 5 << 4;
            } else {
                f[l4 + 4..l4 + 6].copy_from_slice(&(l4len as u16).to_be_bytes());
            }
            fill_checksums(&mut f, true, true);
            if !v6 {
                assert_eq!(folded(&f[l3..l3 + 20], 0), 0xffff, "IPv4 header");
            }
            let ps = if v6 {
                folded(&f[l3 + 8..l3 + 40], 0) as u32
            } else {
                folded(&f[l3 + 12..l3 + 20], 0) as u32
            };
            let s = ps + proto as u32 + l4len as u32;
            assert_eq!(folded(&f[l4..], s), 0xffff, "v6 {v6} proto {proto}");
        }
    }

    #[test]
    fn non_ip_and_short_frames_are_left_alone() {
        let mut arp = vec![0xffu8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp.clone();
        fill_checksums(&mut arp, true, true);
        assert_eq!(arp, before);
        let mut short = vec![0u8; 20];
        short[12] = 0x08;
        fill_checksums(&mut short, true, true);
        fill_checksums(&mut [0u8; 3], true, true);
    }
}
