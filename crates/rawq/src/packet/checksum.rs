//! One's-complement checksums (RFC 1071): full sums, folding, RFC 1624 incremental updates.
//!
//! The checksum offloads' software fallback uses them, and so does the traffic generator
//! (`rawq-gen`) for its templates.

/// One's-complement sum of `data` (big-endian 16-bit words) added to `sum`, not folded or
/// inverted. Carries accumulate in the upper bits ([`csum_fold`] folds them); a `u32` holds the
/// sum of 65535 words, far more than a jumbo frame.
pub fn checksum(data: &[u8], mut sum: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [b] = chunks.remainder() {
        sum += (*b as u32) << 8;
    }
    sum
}

/// Folds a sum to 16 bits and inverts it: the checksum field value.
#[inline]
pub fn csum_fold(mut sum: u32) -> u16 {
    // Two folds always suffice for 32 bits: the first leaves at most 0x1fffe, the second at
    // most 0xffff.
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// RFC 1624 eqn. 3: the checksum field after one 16-bit word changes from `old` to `new`.
#[inline]
pub fn csum_update16(csum: u16, old: u16, new: u16) -> u16 {
    let mut sum = (!csum as u32) + (!old as u32) + new as u32;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_update_equals_recompute() {
        let mut data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
        let c0 = csum_fold(checksum(&data, 0));
        for (pos, new) in [(0usize, 0xffffu16), (10, 0), (62, 0x1234)] {
            let old = u16::from_be_bytes([data[pos], data[pos + 1]]);
            let upd = csum_update16(csum_fold(checksum(&data, 0)), old, new);
            data[pos..pos + 2].copy_from_slice(&new.to_be_bytes());
            assert_eq!(upd, csum_fold(checksum(&data, 0)), "pos {pos}");
        }
        assert_ne!(c0, csum_fold(checksum(&data, 0)));
    }
}
