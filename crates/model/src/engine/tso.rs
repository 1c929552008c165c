//! TCP segmentation of a TSO (LSO) send WQE, as the device does it.
//!
//! The WQE (opcode `MLX5_OPCODE_TSO`): the Ethernet segment carries the MSS and the whole
//! L2..L4 header inline (`inline_hdr_sz` bytes from `inline_hdr_start`), the data segments
//! carry the TCP payload only. rdma-core providers/mlx5/qp.c `set_tso_eth_seg` writes it so
//! (header from `wr->tso.hdr`, at least `MLX5_ETH_L2_MIN_HEADER_SIZE` and at most the QP's
//! `max_tso_header` bytes; the payload from the SG list, its sum at most the device's
//! `max_tso`); DPDK drivers/net/mlx5/mlx5_tx.h `mlx5_tx_eseg_mdat` / `mlx5_tx_packet_multi_tso`
//! and Linux drivers/net/ethernet/mellanox/mlx5/core/en_tx.c `mlx5e_sq_xmit_wqe` (with
//! `mlx5e_tx_get_gso_ihs`: the inline header is up to the end of the TCP header, options
//! included) do the same.
//!
//! The PRM, which says what the hardware does with it, is not public. The segments are
//! therefore made as Linux's software GSO makes them, which is what the mlx5e driver hands the
//! hardware in its place (the same `skb` either way) and what a receiver must accept:
//! * net/ipv4/tcp_offload.c `tcp_gso_segment`: every segment carries the header; the sequence
//!   number advances by the payload before it; FIN and PSH only on the last segment, CWR only
//!   on the first; each segment's TCP checksum is its own;
//! * net/ipv4/af_inet.c `inet_gso_segment`: the IPv4 total length is the segment's, the IP id
//!   is incremented per segment (not with `SKB_GSO_TCP_FIXEDID`, which the WQE cannot ask for),
//!   the header checksum recomputed;
//! * net/ipv6/ip6_offload.c `ipv6_gso_segment`: the IPv6 payload length is the segment's.
//!
//! Checksums are filled on every segment whatever `cs_flags` says: mlx5e sets both L3 and L4
//! checksum flags for every GSO skb (en_tx.c `mlx5e_txwqe_build_eseg_csum`, a GSO skb being
//! CHECKSUM_PARTIAL), and a segment with the super-frame's checksum would be wrong anyway.

/// Where the headers of a TSO WQE's inline header are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TsoHdr {
    /// Offset of the IP header.
    pub(crate) l3: usize,
    /// IPv4 (else IPv6).
    pub(crate) v4: bool,
    /// Offset of the TCP header.
    pub(crate) l4: usize,
    /// The whole header (L2..TCP options).
    pub(crate) len: usize,
}

/// The largest payload of one TSO WQE: 256 KiB (the kernel reports `max_tso` as
/// `1 << MLX5_CAP_ETH(mdev, max_lso_cap)`, drivers/infiniband/hw/mlx5/main.c
/// `mlx5_ib_query_device`; 18 here).
pub(crate) const MAX_TSO: u32 = 1 << 18;

/// IP protocol number of TCP.
const IPPROTO_TCP: u8 = 6;
/// TCP flag bits (byte 13 of the TCP header).
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Parses the inline header `h` of a TSO WQE: Ethernet (one 802.1Q tag at most), IPv4 without
/// fragmentation or IPv6 without extension headers, then TCP, ending exactly at the end of
/// the TCP header. `None` for anything else (the device cannot segment it: the WQE fails).
pub(crate) fn parse(h: &[u8]) -> Option<TsoHdr> {
    let p = crate::flow::parse(h)?;
    let l3 = p.l3;
    let (v4, l4) = match p.ethertype {
        0x0800 => {
            let ihl = (*h.get(l3)? & 0x0f) as usize * 4;
            let frag = u16::from_be_bytes([*h.get(l3 + 6)?, *h.get(l3 + 7)?]);
            // A fragment (offset or more-fragments bit) cannot be segmented.
            if h[l3] >> 4 != 4 || ihl < 20 || frag & 0x3fff != 0 {
                return None;
            }
            (true, l3 + ihl)
        }
        0x86dd => (false, l3 + 40),
        _ => return None,
    };
    if p.ip_proto != Some(IPPROTO_TCP) {
        return None;
    }
    let doff = (*h.get(l4 + 12)? >> 4) as usize * 4;
    if doff < 20 || l4 + doff != h.len() {
        return None;
    }
    Some(TsoHdr {
        l3,
        v4,
        l4,
        len: h.len(),
    })
}

/// Segments of `payload` bytes at most `mss` each: how many (at least one, for a header-only
/// WQE).
pub(crate) fn segments(payload: u64, mss: u16) -> u64 {
    payload.div_ceil(mss.max(1) as u64).max(1)
}

/// Turns `f` (a copy of the super-frame's header followed by the payload of segment `index`,
/// which starts `payload_off` bytes into the payload) into that segment: lengths, IP id,
/// sequence number, flags and checksums (see the module docs for each).
pub(crate) fn fixup(f: &mut [u8], h: &TsoHdr, index: u32, payload_off: u32, last: bool) {
    let l3 = h.l3;
    if h.v4 {
        let tot = (f.len() - l3) as u16;
        f[l3 + 2..l3 + 4].copy_from_slice(&tot.to_be_bytes());
        let id = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]).wrapping_add(index as u16);
        f[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
    } else {
        let pl = (f.len() - l3 - 40) as u16;
        f[l3 + 4..l3 + 6].copy_from_slice(&pl.to_be_bytes());
    }
    let t = h.l4;
    let seq =
        u32::from_be_bytes([f[t + 4], f[t + 5], f[t + 6], f[t + 7]]).wrapping_add(payload_off);
    f[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
    let mut flags = f[t + 13];
    if !last {
        flags &= !(TCP_FIN | TCP_PSH);
    }
    if index > 0 {
        flags &= !TCP_CWR;
    }
    f[t + 13] = flags;
    crate::net::fill_checksums(f, h.v4, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 (or IPv6) + TCP header with `opts` bytes of TCP options, flags
    /// `flags`, sequence number `seq`, IP id `id`.
    fn header(v4: bool, vlan: bool, opts: usize, flags: u8, seq: u32, id: u16) -> Vec<u8> {
        let mut h = vec![0u8; 12];
        h[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        h[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        if vlan {
            h.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        if v4 {
            h.extend_from_slice(&[0x08, 0x00]);
            h.extend_from_slice(&[0x45, 0, 0, 0]);
            h.extend_from_slice(&id.to_be_bytes());
            h.extend_from_slice(&[0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        } else {
            h.extend_from_slice(&[0x86, 0xdd]);
            h.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, 6, 64]);
            h.extend((0..32).map(|i| i as u8));
        }
        h.extend_from_slice(&[0x30, 0x39, 0x00, 0x50]);
        h.extend_from_slice(&seq.to_be_bytes());
        h.extend_from_slice(&[0, 0, 0, 0]);
        h.push((((20 + opts) / 4) as u8) << 4);
        h.push(flags);
        h.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        h.extend(std::iter::repeat_n(1u8, opts)); // NOPs
        h
    }

    /// Ones' complement sum over `b` (for checking checksums independently of `net`).
    fn sum(b: &[u8]) -> u32 {
        b.chunks(2)
            .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
            .sum()
    }
    fn fold(mut s: u32) -> u16 {
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// Segments `payload` behind `hdr` with `mss` as the device does; returns the frames.
    fn segment(hdr: &[u8], payload: &[u8], mss: u16) -> Vec<Vec<u8>> {
        let h = parse(hdr).expect("a TSO header");
        let n = segments(payload.len() as u64, mss) as usize;
        (0..n)
            .map(|i| {
                let off = i * mss as usize;
                let end = (off + mss as usize).min(payload.len());
                let mut f = hdr.to_vec();
                f.extend_from_slice(&payload[off.min(end)..end]);
                fixup(&mut f, &h, i as u32, off as u32, i == n - 1);
                f
            })
            .collect()
    }

    #[test]
    fn a_64k_payload_segments_like_tcp_gso_segment() {
        for (v4, vlan, opts) in [(true, false, 12), (false, false, 0), (true, true, 0)] {
            let flags = 0x80 | 0x10 | 0x08 | 0x01; // CWR ACK PSH FIN
            let hdr = header(v4, vlan, opts, flags, 0xffff_f000, 0xfffe);
            let payload: Vec<u8> = (0..65536u32).map(|i| (i * 7 + i / 251) as u8).collect();
            let segs = segment(&hdr, &payload, 1448);
            assert_eq!(segs.len(), 65536usize.div_ceil(1448));
            let h = parse(&hdr).unwrap();
            let mut joined = Vec::new();
            for (i, f) in segs.iter().enumerate() {
                let last = i == segs.len() - 1;
                let pay = &f[h.len..];
                assert_eq!(pay.len(), if last { 65536 % 1448 } else { 1448 });
                joined.extend_from_slice(pay);
                let (l3, t) = (h.l3, h.l4);
                if v4 {
                    assert_eq!(
                        u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]) as usize,
                        f.len() - l3
                    );
                    let id = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]);
                    assert_eq!(id, 0xfffeu16.wrapping_add(i as u16), "IP id of segment {i}");
                    assert_eq!(fold(sum(&f[l3..t])), 0xffff, "IPv4 header checksum {i}");
                } else {
                    let pl = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) as usize;
                    assert_eq!(pl, f.len() - l3 - 40);
                }
                let seq = u32::from_be_bytes([f[t + 4], f[t + 5], f[t + 6], f[t + 7]]);
                assert_eq!(seq, 0xffff_f000u32.wrapping_add(i as u32 * 1448));
                let fl = f[t + 13];
                assert_eq!(fl & 0x10, 0x10, "ACK kept");
                assert_eq!(fl & 0x09 != 0, last, "FIN/PSH on the last only ({i})");
                assert_eq!(fl & 0x09, if last { 0x09 } else { 0 });
                assert_eq!(fl & 0x80 != 0, i == 0, "CWR on the first only ({i})");
                // TCP checksum over the pseudo header and the segment.
                let l4len = (f.len() - t) as u32;
                let ps = if v4 {
                    sum(&f[l3 + 12..l3 + 20])
                } else {
                    sum(&f[l3 + 8..l3 + 40])
                };
                let s = ps + 6 + (l4len & 0xffff) + (l4len >> 16) + sum(&f[t..]);
                assert_eq!(fold(s), 0xffff, "TCP checksum of segment {i}");
            }
            assert_eq!(joined, payload, "payload reassembles");
        }
    }

    #[test]
    fn short_payload_and_header_only_make_one_segment() {
        let hdr = header(true, false, 0, 0x18, 1, 1);
        let segs = segment(&hdr, &[5; 100], 1448);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0][segs[0].len() - 100..], [5; 100]);
        assert_eq!(segs[0][14 + 20 + 13], 0x18, "PSH kept on the only segment");
        assert_eq!(segment(&hdr, &[], 1448).len(), 1);
        assert_eq!(segments(1448, 1448), 1);
        assert_eq!(segments(1449, 1448), 2);
    }

    #[test]
    fn headers_the_device_cannot_segment_are_refused() {
        let good = header(true, false, 0, 0x10, 1, 1);
        assert!(parse(&good).is_some());
        // Header longer or shorter than L2..TCP.
        let mut long = good.clone();
        long.push(0);
        assert_eq!(parse(&long), None);
        assert_eq!(parse(&good[..good.len() - 1]), None);
        // UDP, not TCP.
        let mut udp = good.clone();
        udp[14 + 9] = 17;
        assert_eq!(parse(&udp), None);
        // A fragment.
        let mut frag = good.clone();
        frag[14 + 6] = 0x20;
        assert_eq!(parse(&frag), None);
        // Not IP.
        let mut arp = good.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(parse(&arp), None);
        assert_eq!(parse(&good[..10]), None);
    }
}
