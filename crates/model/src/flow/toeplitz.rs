// The model's own copy of rawq's src/flow/toeplitz.rs (the hash and its lookup tables, which
// the TIRs use), so that the model imports nothing from rawq; to be re-derived from the vendor
// sources (PRM "Toeplitz" hash of the TIR, DPDK lib/hash/rte_thash.h) as issue 18 asks.

//! The Toeplitz RSS hash, as NICs compute it to spread flows over queues.
//!
//! The hash input is the big-endian concatenation of source address, destination address and,
//! when L4 hashing applies, source port and destination port (IPv4: 8 or 12 bytes, IPv6: 32 or
//! 36 bytes). For each input bit that is set (most significant bit of the first byte first), the
//! 32 key bits starting at that bit position are XORed into the result. The hash then picks an
//! entry of the indirection table by its low bits.
//!
//! With the key of Microsoft's RSS specification (`net::RSS_KEY`, which DPDK and the mlx5
//! drivers also use by default) the results equal the published verification tables; see the
//! tests.

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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::RSS_KEY as DEFAULT_KEY;
    use std::net::Ipv6Addr;

    // Verification tables of Microsoft's "Verifying the RSS Hash Calculation" (Windows driver
    // docs, network/verifying-the-rss-hash-calculation.md in MicrosoftDocs/windows-driver-docs,
    // https://learn.microsoft.com/windows-hardware/drivers/network/verifying-the-rss-hash-calculation).
    // Columns: destination, destination port, source, source port, hash of the addresses, hash
    // with the TCP ports. The input order is source, destination, source port, destination port.
    const V6: [(&str, u16, &str, u16, u32, u32); 3] = [
        (
            "3ffe:2501:200:3::1",
            1766,
            "3ffe:2501:200:1fff::7",
            2794,
            0x2cc18cd5,
            0x40207d3d,
        ),
        (
            "ff02::1",
            4739,
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            0x0f0c461c,
            0xdde51bbf,
        ),
        (
            "fe80::200:f8ff:fe21:67cf",
            38024,
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            0x4b61e985,
            0x02d1feef,
        ),
    ];

    fn ip6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    // The IPv4 table of the same page: destination, destination port, source, source port,
    // hash of the addresses, hash with the TCP ports.
    const V4: [(&str, u16, &str, u16, u32, u32); 5] = [
        (
            "161.142.100.80",
            1766,
            "66.9.149.187",
            2794,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            "65.69.140.83",
            4739,
            "199.92.111.2",
            14230,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            "12.22.207.184",
            38024,
            "24.19.198.95",
            12898,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            "209.142.163.6",
            2217,
            "38.27.205.30",
            48228,
            0x82989176,
            0xafc7327f,
        ),
        (
            "202.188.127.2",
            1303,
            "153.39.163.191",
            44251,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];

    /// Every vector of both tables, addresses alone and with ports, by the bitwise hash and by
    /// the lookup tables the TIRs use.
    #[test]
    fn microsoft_vectors() {
        let t = ToeplitzTable::new(&DEFAULT_KEY);
        let mut cases: Vec<(Vec<u8>, u32, u32)> = Vec::new();
        for (dst, dp, src, sp, ip_only, with_tcp) in V4 {
            let (s, d): (std::net::Ipv4Addr, std::net::Ipv4Addr) =
                (src.parse().unwrap(), dst.parse().unwrap());
            let mut i = [s.octets(), d.octets()].concat();
            i.extend_from_slice(&sp.to_be_bytes());
            i.extend_from_slice(&dp.to_be_bytes());
            cases.push((i, ip_only, with_tcp));
        }
        for (dst, dp, src, sp, ip_only, with_tcp) in V6 {
            let mut i = [ip6(src).octets(), ip6(dst).octets()].concat();
            i.extend_from_slice(&sp.to_be_bytes());
            i.extend_from_slice(&dp.to_be_bytes());
            cases.push((i, ip_only, with_tcp));
        }
        for (i, ip_only, with_tcp) in cases {
            let addrs = &i[..i.len() - 4];
            assert_eq!(hash(&DEFAULT_KEY, addrs), ip_only, "{i:?}");
            assert_eq!(t.hash(addrs), ip_only, "{i:?}");
            assert_eq!(hash(&DEFAULT_KEY, &i), with_tcp, "{i:?}");
            assert_eq!(t.hash(&i), with_tcp, "{i:?}");
        }
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
}
