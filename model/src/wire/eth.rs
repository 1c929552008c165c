// The model's own copy of rawq's src/dv/wire/eth.rs, so that the model imports nothing from rawq;
// to be re-derived from the vendor sources cited below and checked by C oracles (issue 18).

//! Ethernet segment of a send WQE (`struct mlx5_wqe_eth_seg`, 32 bytes in its basic form).
//!
//! | byte | field |
//! |---|---|
//! | 0..4 | software-parser offsets (0) |
//! | 4 | `cs_flags`: bit 6 L3 checksum, bit 7 L4 checksum |
//! | 5 | software-parser flags (0) |
//! | 6..8 | MSS (0 unless TSO) |
//! | 8..12 | flow metadata (0) |
//! | 12..14 | `inline_hdr_sz`: frame bytes inlined from byte 14 on |
//! | 14..32 | the first 18 inlined bytes |
//!
//! The segment occupies `16 + align(max(inline_hdr_sz - 2, 0), 16)` bytes: one DS with no inline
//! header, two with the 18-byte L2 minimum ([`size_for_inline`]).

use super::{be16, be32, check_len, Truncated};

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// Software-parser offsets.
    pub const SWP_OFFS: Range<usize> = 0..4;
    /// Checksum offload flags.
    pub const CS_FLAGS: usize = 4;
    /// TSO MSS.
    pub const MSS: Range<usize> = 6..8;
    /// Inline header size.
    pub const INLINE_HDR_SZ: Range<usize> = 12..14;
    /// Inline header bytes (the first 18; longer inline headers continue past byte 32).
    pub const INLINE_HDR: Range<usize> = 14..32;
}

/// `cs_flags`: compute the IPv4 header checksum.
pub const CS_L3: u8 = 1 << 6;
/// `cs_flags`: compute the TCP/UDP checksum.
pub const CS_L4: u8 = 1 << 7;
/// `inline_hdr_sz` top bit with no inline header: insert an 802.1Q tag whose TCI is in bytes
/// 14..16 (DPDK drivers/net/mlx5/mlx5_prm.h `MLX5_ETH_WQE_VLAN_INSERT`, bit 31 of the BE32 at
/// bytes 12..16, set by mlx5_tx.h `mlx5_tx_eseg_none`; Linux mlx5e en_tx.c
/// `mlx5e_txwqe_build_eseg`: `MLX5_ETH_WQE_INSERT_VLAN` with `insert.vlan_tci`).
pub const VLAN_INSERT: u16 = 0x8000;

/// Bytes the segment occupies with `inline` header bytes.
#[inline]
pub const fn size_for_inline(inline: usize) -> usize {
    16 + inline.saturating_sub(2).div_ceil(16) * 16
}

/// A view of an Ethernet segment.
#[derive(Debug, Clone, Copy)]
pub struct EthSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthSeg<T> {
    /// Wraps `buf` without a length check.
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        EthSeg { buf }
    }

    /// Wraps `buf` after checking it holds the 16 fixed bytes plus whatever inline header
    /// `inline_hdr_sz` announces.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        let b = buf.as_ref();
        check_len(b.len(), 16)?;
        let n = be16(b, field::INLINE_HDR_SZ.start) as usize;
        check_len(b.len(), (field::INLINE_HDR.start + n).max(16))?;
        Ok(EthSeg { buf })
    }

    /// Software-parser offsets.
    #[inline]
    pub fn swp_offs(&self) -> u32 {
        be32(self.buf.as_ref(), field::SWP_OFFS.start)
    }
    /// Checksum flags.
    #[inline]
    pub fn cs_flags(&self) -> u8 {
        self.buf.as_ref()[field::CS_FLAGS]
    }
    /// MSS.
    #[inline]
    pub fn mss(&self) -> u16 {
        be16(self.buf.as_ref(), field::MSS.start)
    }
    /// Inline header size.
    #[inline]
    pub fn inline_hdr_sz(&self) -> u16 {
        be16(self.buf.as_ref(), field::INLINE_HDR_SZ.start)
    }
}
