//! What the model's NIC computes from frame bytes: IPv4 / TCP / UDP checksums (checking on
//! receive, filling on transmit offload), header types, and the Toeplitz RSS hash.

use crate::wire::cqe;

/// The standard 40-byte Microsoft RSS key (the "RSS verification suite" key; DPDK
/// drivers/net/mlx5/mlx5_rxq.c `rss_hash_default_key` is the same bytes).
pub const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Toeplitz hash of `input` under `key` (inputs up to 32 bytes).
pub fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let mut win = u64::from_be_bytes([
        key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
    ]);
    let mut next = 8;
    let mut h = 0u32;
    for &b in input {
        for j in 0..8 {
            if b & (0x80 >> j) != 0 {
                h ^= (win >> 32) as u32;
            }
            win <<= 1;
        }
        if next < key.len() {
            win |= key[next] as u64;
            next += 1;
        }
    }
    h
}

/// One's-complement sum of `b` (as BE16 words) added to `acc`.
fn sum16(mut acc: u32, b: &[u8]) -> u32 {
    let mut ch = b.chunks_exact(2);
    for w in &mut ch {
        acc += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    if let [x] = ch.remainder() {
        acc += (*x as u32) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Where the L3/L4 headers of a frame are.
#[derive(Clone, Copy, Debug)]
struct Layout {
    l3: usize,
    v4: bool,
    /// IP header length.
    ihl: usize,
    /// End of the IP datagram in the frame.
    end: usize,
    proto: u8,
    frag: bool,
}

fn layout(f: &[u8]) -> Option<Layout> {
    let p = crate::flow::parse(f)?;
    let l3 = p.l3;
    match p.ethertype {
        0x0800 if f.len() >= l3 + 20 => {
            let ihl = (f[l3] & 0x0f) as usize * 4;
            let tot = u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]) as usize;
            if f[l3] >> 4 != 4 || ihl < 20 || tot < ihl || l3 + tot > f.len() {
                return None;
            }
            let fo = u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]);
            Some(Layout {
                l3,
                v4: true,
                ihl,
                end: l3 + tot,
                proto: f[l3 + 9],
                frag: fo & 0x3fff != 0,
            })
        }
        0x86dd if f.len() >= l3 + 40 => {
            let pl = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) as usize;
            if l3 + 40 + pl > f.len() {
                return None;
            }
            Some(Layout {
                l3,
                v4: false,
                ihl: 40,
                end: l3 + 40 + pl,
                proto: f[l3 + 6],
                frag: false,
            })
        }
        _ => None,
    }
}

fn pseudo(f: &[u8], lo: &Layout, l4len: usize) -> u32 {
    let l3 = lo.l3;
    let mut acc = if lo.v4 {
        sum16(0, &f[l3 + 12..l3 + 20])
    } else {
        sum16(0, &f[l3 + 8..l3 + 40])
    };
    acc += lo.proto as u32;
    acc += (l4len as u32) & 0xffff;
    acc += (l4len as u32) >> 16;
    acc
}

/// Receive-side findings for one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxInfo {
    /// CQE byte 28 (L2/L3/L4 ok bits).
    pub hds_ip_ext: u8,
    /// CQE byte 29 without the VLAN bit (L3 / L4 types, fragment).
    pub hdr_type: u8,
}

/// Checks the checksums and computes the header types of `f` (VLAN tag, if any, already
/// stripped or parsed through): the CQE's `hds_ip_ext` ok bits and `l4_hdr_type_etc` (mlx5dv.h
/// `MLX5_CQE_L2_OK`/`L3_OK`/`L4_OK`, `MLX5_CQE_L3_HDR_TYPE_*`, `MLX5_CQE_L4_HDR_TYPE_*`; Linux
/// include/linux/mlx5/device.h `get_cqe_l4_hdr_type`). The RSS hash is the TIR's
/// (`engine::steer::rss_hash`).
pub fn analyze(f: &[u8]) -> RxInfo {
    let mut r = RxInfo {
        hds_ip_ext: cqe::L2_OK,
        ..Default::default()
    };
    let Some(lo) = layout(f) else {
        return r;
    };
    let l3 = lo.l3;
    if lo.v4 {
        r.hdr_type |= cqe::L3_IPV4 << 2;
        if fold(sum16(0, &f[l3..l3 + lo.ihl])) == 0xffff {
            r.hds_ip_ext |= cqe::L3_OK;
        }
    } else {
        r.hdr_type |= cqe::L3_IPV6 << 2;
        r.hds_ip_ext |= cqe::L3_OK;
    }
    if lo.frag {
        r.hdr_type |= cqe::IP_FRAG;
    }
    let l4 = l3 + lo.ihl;
    let l4len = lo.end - l4;
    if !lo.frag && (lo.proto == 17 && l4len >= 8 || lo.proto == 6 && l4len >= 20) {
        let seg = &f[l4..lo.end];
        let ok = if lo.proto == 17 && lo.v4 && seg[6] == 0 && seg[7] == 0 {
            true
        } else {
            fold(sum16(pseudo(f, &lo, l4len), seg)) == 0xffff
        };
        if ok {
            r.hds_ip_ext |= cqe::L4_OK;
        }
        let t = if lo.proto == 17 {
            cqe::L4_UDP
        } else {
            let flags = seg[13];
            let doff = (seg[12] >> 4) as usize * 4;
            if flags & 0x10 == 0 {
                cqe::L4_TCP
            } else if l4len > doff {
                cqe::L4_TCP_ACK_DATA
            } else {
                cqe::L4_TCP_ACK_NO_DATA
            }
        };
        r.hdr_type |= t << 4;
    }
    r
}

/// Transmit checksum offload: fills the IPv4 header checksum (`l3`) and the TCP/UDP checksum
/// (`l4`) of `f` in place, as the Ethernet segment's `cs_flags` ask (mlx5dv.h
/// `MLX5_ETH_WQE_L3_CSUM` / `MLX5_ETH_WQE_L4_CSUM`; libmlx5 qp.c sets both for
/// IBV_SEND_IP_CSUM). Frames that are not IP (or too short) are left alone; a computed UDP
/// checksum of 0 is sent as 0xffff (RFC 768).
pub fn fill_checksums(f: &mut [u8], l3: bool, l4: bool) {
    let Some(lo) = layout(f) else {
        return;
    };
    let s = lo.l3;
    if l3 && lo.v4 {
        f[s + 10] = 0;
        f[s + 11] = 0;
        let c = !fold(sum16(0, &f[s..s + lo.ihl]));
        f[s + 10..s + 12].copy_from_slice(&c.to_be_bytes());
    }
    let l4o = s + lo.ihl;
    let l4len = lo.end - l4o;
    if l4 && !lo.frag {
        let at = match lo.proto {
            17 if l4len >= 8 => l4o + 6,
            6 if l4len >= 20 => l4o + 16,
            _ => return,
        };
        f[at] = 0;
        f[at + 1] = 0;
        let mut c = !fold(sum16(pseudo(f, &lo, l4len), &f[l4o..lo.end]));
        if lo.proto == 17 && c == 0 {
            c = 0xffff;
        }
        f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toeplitz_matches_the_microsoft_vectors() {
        // 66.9.149.187:2794 -> 161.142.100.80:1766 (the RSS verification suite).
        let mut i = Vec::new();
        i.extend_from_slice(&[66, 9, 149, 187, 161, 142, 100, 80]);
        assert_eq!(toeplitz(&RSS_KEY, &i), 0x323e_8fc2);
        i.extend_from_slice(&2794u16.to_be_bytes());
        i.extend_from_slice(&1766u16.to_be_bytes());
        assert_eq!(toeplitz(&RSS_KEY, &i), 0x51cc_c178);
    }

    /// The TIRs hash through `flow::toeplitz::ToeplitzTable` (a lookup per byte): the same
    /// values as this bitwise hash, for every input length the TIR feeds it and other keys.
    #[test]
    fn the_tirs_table_hash_equals_the_bitwise_one() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        let mut keys = vec![RSS_KEY];
        keys.push(std::array::from_fn(|_| next()));
        for key in keys {
            let t = crate::flow::toeplitz::ToeplitzTable::new(&key);
            for len in [4, 8, 12, 16, 32, 36] {
                for _ in 0..200 {
                    let input: Vec<u8> = (0..len).map(|_| next()).collect();
                    assert_eq!(t.hash(&input), toeplitz(&key, &input), "{input:?}");
                }
            }
        }
    }

    #[test]
    fn filled_checksums_verify() {
        let mut f = vec![0u8; 14 + 20 + 8 + 10];
        f[12] = 0x08;
        f[14] = 0x45;
        let tot = (20 + 8 + 10) as u16;
        f[16..18].copy_from_slice(&tot.to_be_bytes());
        f[14 + 8] = 64;
        f[14 + 9] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&1000u16.to_be_bytes());
        f[36..38].copy_from_slice(&2000u16.to_be_bytes());
        f[38..40].copy_from_slice(&18u16.to_be_bytes());
        f[42..].copy_from_slice(b"0123456789");
        let r = analyze(&f);
        assert_eq!(
            r.hds_ip_ext & cqe::L3_OK,
            0,
            "zero header checksum is wrong"
        );
        fill_checksums(&mut f, true, true);
        let r = analyze(&f);
        assert_eq!(r.hds_ip_ext, cqe::L2_OK | cqe::L3_OK | cqe::L4_OK);
        assert_eq!(r.hdr_type, cqe::L3_IPV4 << 2 | cqe::L4_UDP << 4);
        f[45] ^= 1;
        assert_eq!(analyze(&f).hds_ip_ext & cqe::L4_OK, 0);
    }
}
