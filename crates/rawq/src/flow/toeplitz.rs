//! The Toeplitz RSS hash, as NICs compute it to spread flows over queues.
//!
//! The hash input is the big-endian concatenation of source address, destination address and,
//! when L4 hashing applies, source port and destination port (IPv4: 8 or 12 bytes, IPv6: 32 or
//! 36 bytes). For each input bit that is set (most significant bit of the first byte first), the
//! 32 key bits starting at that bit position are XORed into the result. The hash then picks an
//! entry of the indirection table ([`reta_queue`]) by its low bits.
//!
//! With [`DEFAULT_KEY`] (the key of Microsoft's RSS specification, which DPDK and the mlx5
//! drivers also use by default) the results equal the published verification tables; see the
//! tests.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::parse;

/// The 40-byte RSS key of Microsoft's RSS specification, the usual default of NIC drivers.
pub const DEFAULT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// A symmetric key: `0x6d5a` repeated over the 40 bytes (Woo and Park, "Scalable TCP Session
/// Monitoring with Symmetric Receive-side Scaling", KAIST technical report, 2012, which
/// proposes this key for exactly this purpose).
///
/// Why it is symmetric: input bit `k` contributes key bits `[k, k + 32)`. A key that repeats
/// every 16 bits gives bit `k` and bit `k + 16n` the same 32-bit window. Swapping source and
/// destination moves every address bit by 32 (IPv4) or 128 (IPv6) positions and every port bit
/// by 16, all multiples of 16, so the XOR of the windows, the hash, does not change: both
/// directions of a flow hash alike and land on one queue. The price is a weaker spread (the key
/// has 16 bits of entropy), which is why it is an option and not the default.
pub const SYMMETRIC_KEY: [u8; 40] = {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// The Toeplitz hash of `input` under `key`.
///
/// The key needs `input.len() + 4` bytes to cover every input bit; key bits past its end count
/// as zero (a 40-byte key covers the 36 bytes of an IPv6 4-tuple).
pub fn hash(key: &[u8], input: &[u8]) -> u32 {
    let key_byte = |i: usize| key.get(i).copied().unwrap_or(0) as u64;
    let mut result = 0u32;
    for (i, &byte) in input.iter().enumerate() {
        // Key bits [8i, 8i + 40): the 32-bit windows for the 8 bits of this input byte.
        let window = (0..5).fold(0u64, |w, k| (w << 8) | key_byte(i + k));
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= (window >> (8 - bit)) as u32;
            }
        }
    }
    result
}

/// Longest input a [`ToeplitzTable`] covers: an IPv6 address pair and two ports.
pub const MAX_INPUT: usize = 36;

/// The Toeplitz hash with the key folded into per-position lookup tables: one table lookup and
/// XOR per input byte instead of eight conditional XORs. Equal to [`hash`] for inputs of up to
/// [`MAX_INPUT`] bytes (longer inputs are hashed on their first `MAX_INPUT` bytes).
#[derive(Clone)]
pub struct ToeplitzTable {
    table: Box<[[u32; 256]; MAX_INPUT]>,
}

impl ToeplitzTable {
    /// Builds the tables for `key` (36 KiB; do it once, not per packet).
    pub fn new(key: &[u8]) -> ToeplitzTable {
        let mut table = Box::new([[0u32; 256]; MAX_INPUT]);
        let mut one = [0u8; MAX_INPUT];
        for (i, row) in table.iter_mut().enumerate() {
            // The hash is linear in the input: the entry of a byte value is the XOR of the
            // entries of its set bits, each the hash of that single bit at position i.
            let mut bit_hash = [0u32; 8];
            for (b, h) in bit_hash.iter_mut().enumerate() {
                one[i] = 0x80 >> b;
                *h = hash(key, &one[..=i]);
            }
            one[i] = 0;
            for (v, entry) in row.iter_mut().enumerate() {
                *entry = (0..8)
                    .filter(|b| v & (0x80 >> b) != 0)
                    .fold(0, |acc, b| acc ^ bit_hash[b]);
            }
        }
        ToeplitzTable { table }
    }

    /// The hash of `input` (at most [`MAX_INPUT`] bytes are used).
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |acc, (&byte, row)| acc ^ row[byte as usize])
    }
}

impl std::fmt::Debug for ToeplitzTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToeplitzTable").finish_non_exhaustive()
    }
}

/// The hash of an IPv4 source/destination pair, plus `(src_port, dst_port)` if given.
pub fn hash_ipv4(key: &[u8], src: Ipv4Addr, dst: Ipv4Addr, ports: Option<(u16, u16)>) -> u32 {
    let mut input = [0u8; 12];
    input[0..4].copy_from_slice(&src.octets());
    input[4..8].copy_from_slice(&dst.octets());
    match ports {
        Some((sp, dp)) => {
            input[8..10].copy_from_slice(&sp.to_be_bytes());
            input[10..12].copy_from_slice(&dp.to_be_bytes());
            hash(key, &input)
        }
        None => hash(key, &input[..8]),
    }
}

/// The hash of an IPv6 source/destination pair, plus `(src_port, dst_port)` if given.
pub fn hash_ipv6(key: &[u8], src: Ipv6Addr, dst: Ipv6Addr, ports: Option<(u16, u16)>) -> u32 {
    let mut input = [0u8; 36];
    input[0..16].copy_from_slice(&src.octets());
    input[16..32].copy_from_slice(&dst.octets());
    match ports {
        Some((sp, dp)) => {
            input[32..34].copy_from_slice(&sp.to_be_bytes());
            input[34..36].copy_from_slice(&dp.to_be_bytes());
            hash(key, &input)
        }
        None => hash(key, &input[..32]),
    }
}

/// Which headers feed the hash (the RSS "hash types" of a NIC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HashFields {
    /// Hash IPv4 source and destination addresses.
    pub ipv4: bool,
    /// Hash IPv6 source and destination addresses.
    pub ipv6: bool,
    /// Add the ports of TCP segments (when the frame's IP version is hashed).
    pub tcp: bool,
    /// Add the ports of UDP datagrams (when the frame's IP version is hashed).
    pub udp: bool,
}

impl HashFields {
    /// Addresses and ports of both IP versions, TCP and UDP: what rawq asks the NIC for.
    pub const ALL: HashFields = HashFields {
        ipv4: true,
        ipv6: true,
        tcp: true,
        udp: true,
    };
    /// Addresses only.
    pub const IP: HashFields = HashFields {
        ipv4: true,
        ipv6: true,
        tcp: false,
        udp: false,
    };
}

/// The RSS hash a NIC computes for `frame`, or `None` if it hashes nothing of it (not IP, an IP
/// version not in `fields`, or truncated before the addresses).
///
/// Headers are parsed as [`parse`] does (one VLAN tag). Ports are added for TCP or
/// UDP when `fields` asks for that protocol and the frame carries them: a non-first IPv4
/// fragment, or a frame cut before the ports, is hashed on its addresses alone.
pub fn hash_frame(key: &[u8], fields: HashFields, frame: &[u8]) -> Option<u32> {
    let h = parse(frame)?;
    let proto = h.ip_proto?;
    let be16 = |o: usize| Some(u16::from_be_bytes([*frame.get(o)?, *frame.get(o + 1)?]));
    let ports = match (proto, fields.tcp, fields.udp) {
        (6, true, _) | (17, _, true) => h.l4.and_then(|o| Some((be16(o)?, be16(o + 2)?))),
        _ => None,
    };
    let l3 = h.l3;
    let bytes = |o: usize, n: usize| frame.get(o..o + n);
    match h.ethertype {
        0x0800 if fields.ipv4 => {
            let a =
                |o| -> Option<Ipv4Addr> { Some(<[u8; 4]>::try_from(bytes(o, 4)?).ok()?.into()) };
            Some(hash_ipv4(key, a(l3 + 12)?, a(l3 + 16)?, ports))
        }
        0x86dd if fields.ipv6 => {
            let a =
                |o| -> Option<Ipv6Addr> { Some(<[u8; 16]>::try_from(bytes(o, 16)?).ok()?.into()) };
            Some(hash_ipv6(key, a(l3 + 8)?, a(l3 + 24)?, ports))
        }
        _ => None,
    }
}

/// The queue the indirection table `reta` gives for `hash`: entry `hash mod reta.len()`, which
/// for the usual power-of-two table is the entry named by the hash's low bits. An empty table
/// gives queue 0.
pub fn reta_queue(hash: u32, reta: &[u16]) -> u16 {
    if reta.is_empty() {
        return 0;
    }
    reta[hash as usize % reta.len()]
}

/// An indirection table of `size` entries that deals `queues` out in turn (entry `i` is
/// `queues[i % queues.len()]`), as drivers fill it by default. Empty if `queues` is.
pub fn build_reta(queues: &[u16], size: usize) -> Vec<u16> {
    if queues.is_empty() {
        return Vec::new();
    }
    (0..size).map(|i| queues[i % queues.len()]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    include!("../../tests/data/microsoft_rss_vectors.rs");

    fn ip4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
    fn ip6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn microsoft_ipv4_vectors() {
        for (dst, dp, src, sp, ip_only, with_tcp) in V4 {
            let (s, d) = (ip4(src), ip4(dst));
            assert_eq!(
                hash_ipv4(&DEFAULT_KEY, s, d, None),
                ip_only,
                "{src} -> {dst}"
            );
            assert_eq!(
                hash_ipv4(&DEFAULT_KEY, s, d, Some((sp, dp))),
                with_tcp,
                "{src}:{sp} -> {dst}:{dp}"
            );
        }
    }

    #[test]
    fn microsoft_ipv6_vectors() {
        for (dst, dp, src, sp, ip_only, with_tcp) in V6 {
            let (s, d) = (ip6(src), ip6(dst));
            assert_eq!(
                hash_ipv6(&DEFAULT_KEY, s, d, None),
                ip_only,
                "{src} -> {dst}"
            );
            assert_eq!(
                hash_ipv6(&DEFAULT_KEY, s, d, Some((sp, dp))),
                with_tcp,
                "[{src}]:{sp} -> [{dst}]:{dp}"
            );
        }
    }

    fn eth(vlan: Option<u16>, ethertype: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        if let Some(v) = vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&v.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    fn v4_frame(
        vlan: Option<u16>,
        proto: u8,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        sp: u16,
        dp: u16,
    ) -> Vec<u8> {
        let mut f = eth(vlan, 0x0800);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        f.extend_from_slice(&[0; 16]);
        f
    }

    fn v6_frame(proto: u8, src: Ipv6Addr, dst: Ipv6Addr, sp: u16, dp: u16) -> Vec<u8> {
        let mut f = eth(None, 0x86dd);
        let mut ip = [0u8; 40];
        ip[0] = 0x60;
        ip[6] = proto;
        ip[8..24].copy_from_slice(&src.octets());
        ip[24..40].copy_from_slice(&dst.octets());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        f.extend_from_slice(&[0; 16]);
        f
    }

    #[test]
    fn frames_hash_like_the_vectors() {
        for (dst, dp, src, sp, ip_only, with_ports) in V4 {
            let (s, d) = (ip4(src), ip4(dst));
            for vlan in [None, Some(7)] {
                let tcp = v4_frame(vlan, 6, s, d, sp, dp);
                let udp = v4_frame(vlan, 17, s, d, sp, dp);
                assert_eq!(
                    hash_frame(&DEFAULT_KEY, HashFields::ALL, &tcp),
                    Some(with_ports)
                );
                assert_eq!(
                    hash_frame(&DEFAULT_KEY, HashFields::ALL, &udp),
                    Some(with_ports)
                );
                assert_eq!(
                    hash_frame(&DEFAULT_KEY, HashFields::IP, &tcp),
                    Some(ip_only)
                );
                let tcp_only = HashFields {
                    udp: false,
                    ..HashFields::ALL
                };
                assert_eq!(hash_frame(&DEFAULT_KEY, tcp_only, &udp), Some(ip_only));
                let icmp = v4_frame(vlan, 1, s, d, sp, dp);
                assert_eq!(
                    hash_frame(&DEFAULT_KEY, HashFields::ALL, &icmp),
                    Some(ip_only)
                );
                let mut frag = tcp.clone();
                let l3 = frag.len() - 40;
                frag[l3 + 7] = 1; // fragment offset 8: no ports in this fragment
                assert_eq!(
                    hash_frame(&DEFAULT_KEY, HashFields::ALL, &frag),
                    Some(ip_only)
                );
                let no_v4 = HashFields {
                    ipv4: false,
                    ..HashFields::ALL
                };
                assert_eq!(hash_frame(&DEFAULT_KEY, no_v4, &tcp), None);
                // Cut inside the ports: addresses only; cut inside the addresses: nothing.
                let cut = &tcp[..tcp.len() - 16 - 2];
                assert_eq!(
                    hash_frame(&DEFAULT_KEY, HashFields::ALL, cut),
                    Some(ip_only)
                );
                let cut = &tcp[..l3 + 18];
                assert_eq!(hash_frame(&DEFAULT_KEY, HashFields::ALL, cut), None);
            }
        }
        for (dst, dp, src, sp, ip_only, with_ports) in V6 {
            let (s, d) = (ip6(src), ip6(dst));
            let tcp = v6_frame(6, s, d, sp, dp);
            assert_eq!(
                hash_frame(&DEFAULT_KEY, HashFields::ALL, &tcp),
                Some(with_ports)
            );
            assert_eq!(
                hash_frame(&DEFAULT_KEY, HashFields::IP, &tcp),
                Some(ip_only)
            );
            let udp = v6_frame(17, s, d, sp, dp);
            assert_eq!(
                hash_frame(&DEFAULT_KEY, HashFields::ALL, &udp),
                Some(with_ports)
            );
        }
        let arp = eth(None, 0x0806);
        assert_eq!(hash_frame(&DEFAULT_KEY, HashFields::ALL, &arp), None);
        assert_eq!(hash_frame(&DEFAULT_KEY, HashFields::ALL, &[]), None);
    }

    #[test]
    fn short_key_counts_as_zero_bits() {
        let input = [0xffu8; 12];
        let mut key = DEFAULT_KEY[..10].to_vec();
        let short = hash(&key, &input);
        key.resize(40, 0);
        assert_eq!(short, hash(&key, &input));
        assert_eq!(hash(&[], &input), 0);
        assert_eq!(hash(&DEFAULT_KEY, &[]), 0);
    }

    #[test]
    fn one_bit_input_selects_the_key_window() {
        // Input bit k set alone gives key bits [k, k + 32).
        let key_bits = u64::from_be_bytes(DEFAULT_KEY[..8].try_into().unwrap());
        for k in 0..32 {
            let mut input = [0u8; 4];
            input[k / 8] = 0x80 >> (k % 8);
            assert_eq!(
                hash(&DEFAULT_KEY, &input),
                (key_bits >> (32 - k)) as u32,
                "bit {k}"
            );
        }
    }

    #[test]
    fn table_equals_bit_loop() {
        let t = ToeplitzTable::new(&DEFAULT_KEY);
        let mut input = [0u8; MAX_INPUT];
        // A deterministic walk over many inputs and lengths (an LCG, no dependency needed).
        let mut x = 0x2545_f491_u32;
        for round in 0..2000 {
            for b in input.iter_mut() {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                *b = (x >> 24) as u8;
            }
            let n = round % (MAX_INPUT + 1);
            assert_eq!(
                t.hash(&input[..n]),
                hash(&DEFAULT_KEY, &input[..n]),
                "round {round}"
            );
        }
        for (dst, dp, src, sp, _, with_tcp) in V6 {
            let mut input = [0u8; 36];
            input[..16].copy_from_slice(&ip6(src).octets());
            input[16..32].copy_from_slice(&ip6(dst).octets());
            input[32..34].copy_from_slice(&sp.to_be_bytes());
            input[34..].copy_from_slice(&dp.to_be_bytes());
            assert_eq!(t.hash(&input), with_tcp);
        }
        // Another key gives other tables.
        let other = ToeplitzTable::new(&[0x6d, 0x5a].repeat(20));
        assert_ne!(other.hash(&input), t.hash(&input));
        assert_eq!(other.hash(&input), hash(&[0x6d, 0x5a].repeat(20), &input));
    }

    #[test]
    fn reta_indirection() {
        let reta = build_reta(&[4, 5, 6], 8);
        assert_eq!(reta, [4, 5, 6, 4, 5, 6, 4, 5]);
        assert_eq!(reta_queue(0, &reta), 4);
        assert_eq!(reta_queue(0x1234_5677, &reta), reta[7]);
        assert_eq!(reta_queue(0xffff_fff9, &reta), reta[1]);
        assert_eq!(reta_queue(9, &[]), 0);
        assert!(build_reta(&[], 8).is_empty());
        // Low bits only: hashes that differ above the table's bits pick the same entry.
        let big = build_reta(&[0, 1, 2, 3], 128);
        for h in [0u32, 77, 0xdead_beef] {
            assert_eq!(reta_queue(h, &big), reta_queue(h & 127, &big));
            assert_eq!(reta_queue(h, &big), (h % 4) as u16);
        }
    }
}
