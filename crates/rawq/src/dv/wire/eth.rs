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

use super::{be16, be32, check_len, put16, put32, Truncated};

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// Software-parser offsets.
    pub const SWP_OFFS: Range<usize> = 0..4;
    /// Checksum offload flags.
    pub const CS_FLAGS: usize = 4;
    /// Software-parser flags.
    pub const SWP_FLAGS: usize = 5;
    /// TSO MSS.
    pub const MSS: Range<usize> = 6..8;
    /// Flow metadata.
    pub const METADATA: Range<usize> = 8..12;
    /// Inline header size.
    pub const INLINE_HDR_SZ: Range<usize> = 12..14;
    /// Inline header bytes (the first 18; longer inline headers continue past byte 32).
    pub const INLINE_HDR: Range<usize> = 14..32;
}

/// Size of the basic segment (with room for 18 inline bytes).
pub const SIZE: usize = 32;
/// The L2 header length libmlx5 inlines when the device requires it.
pub const L2_INLINE: usize = 18;
/// `cs_flags`: compute the IPv4 header checksum.
pub const CS_L3: u8 = 1 << 6;
/// `cs_flags`: compute the TCP/UDP checksum.
pub const CS_L4: u8 = 1 << 7;
/// `inline_hdr_sz` top bit with no inline header: insert an 802.1Q tag whose TCI is in bytes
/// 14..16 (DPDK drivers/net/mlx5/mlx5_prm.h `MLX5_ETH_WQE_VLAN_INSERT`, bit 31 of the BE32
/// at bytes 12..16, which mlx5_tx.h `mlx5_tx_eseg_none` sets with the TCI; Linux mlx5e en_tx.c
/// `mlx5e_txwqe_build_eseg` does the same with `MLX5_ETH_WQE_INSERT_VLAN` and
/// `insert.vlan_tci`).
pub const VLAN_INSERT: u16 = 0x8000;
/// `cs_flags`: inner (tunnelled) L3 checksum.
pub const CS_L3_INNER: u8 = 1 << 4;
/// `cs_flags`: inner (tunnelled) L4 checksum.
pub const CS_L4_INNER: u8 = 1 << 5;

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
    /// Software-parser flags.
    #[inline]
    pub fn swp_flags(&self) -> u8 {
        self.buf.as_ref()[field::SWP_FLAGS]
    }
    /// MSS.
    #[inline]
    pub fn mss(&self) -> u16 {
        be16(self.buf.as_ref(), field::MSS.start)
    }
    /// Flow metadata.
    #[inline]
    pub fn metadata(&self) -> u32 {
        be32(self.buf.as_ref(), field::METADATA.start)
    }
    /// Inline header size.
    #[inline]
    pub fn inline_hdr_sz(&self) -> u16 {
        be16(self.buf.as_ref(), field::INLINE_HDR_SZ.start)
    }
    /// The inline header bytes (as many as `inline_hdr_sz` says and the buffer holds).
    #[inline]
    pub fn inline_hdr(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = (field::INLINE_HDR.start + self.inline_hdr_sz() as usize).min(b.len());
        &b[field::INLINE_HDR.start.min(end)..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthSeg<T> {
    /// Sets the checksum flags.
    #[inline]
    pub fn set_cs_flags(&mut self, v: u8) {
        self.buf.as_mut()[field::CS_FLAGS] = v;
    }
    /// Sets the MSS.
    #[inline]
    pub fn set_mss(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::MSS.start, v);
    }
    /// Sets the flow metadata.
    #[inline]
    pub fn set_metadata(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::METADATA.start, v);
    }
    /// Sets the inline header size.
    #[inline]
    pub fn set_inline_hdr_sz(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::INLINE_HDR_SZ.start, v);
    }
    /// The inline header area from byte 14 to the end of the buffer, to copy header bytes into.
    #[inline]
    pub fn inline_hdr_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[field::INLINE_HDR.start..]
    }
    /// Writes the fixed 16 bytes: no software parser, `cs_flags`, MSS 0, metadata 0,
    /// `inline_hdr_sz`; the inline bytes are left to the caller.
    #[inline]
    pub fn fill(&mut self, cs_flags: u8, inline_hdr_sz: u16) {
        let b = self.buf.as_mut();
        put32(b, 0, 0);
        put32(b, 4, (cs_flags as u32) << 24);
        put32(b, 8, 0);
        put16(b, 12, inline_hdr_sz);
    }
}
