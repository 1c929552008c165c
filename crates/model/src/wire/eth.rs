//! The Ethernet segment of a send WQE, as the device reads it: Linux include/linux/mlx5/qp.h
//! `struct mlx5_wqe_eth_seg` (16 bytes, one DS unit), then the rest of the inline header.
//! rdma-core's `mlx5dv.h` declares the same bytes as a 32-byte struct (bytes 0..4 `rsvd0`,
//! then 16 inline bytes `inline_hdr` after the kernel's 16). Field offsets carry the kernel's
//! names; each field and constant cites where its meaning comes from.
//!
//! Checked by the C oracle (`oracle.rs`): the offsets and checksum flags `mlx5dv.h` defines,
//! and every field read back from segments `mlx5dv_set_eth_seg` wrote. The software-parser
//! offsets and the VLAN-insertion form (`insert`) are only in the kernel's header (and DPDK's
//! mlx5_prm.h); hw_tests/tso.rs writes a VLAN insertion as DPDK's mlx5_tx.h does and checks
//! the tagged frame on the wire.
//!
//! | byte | kernel field | meaning |
//! |---|---|---|
//! | 0..4 | `swp_{outer,inner}_{l4,l3}_offset` | software-parser offsets (the model supports none: 0) |
//! | 4 | `cs_flags` | `MLX5_ETH_WQE_L3_CSUM` (bit 6), `MLX5_ETH_WQE_L4_CSUM` (bit 7) |
//! | 6..8 | `mss` | segment size of a TSO WQE (0 otherwise) |
//! | 12..14 | `inline_hdr.sz` | frame bytes inlined from byte 14 on |
//! | 14..16 | `inline_hdr.start` | the first two of them |
//! | 12..14 | `insert.type` | instead: `MLX5_ETH_WQE_INSERT_VLAN` (no inline header) |
//! | 14..16 | `insert.vlan_tci` | the TCI of the tag to insert |
//!
//! With `inline_hdr.sz` bytes inlined the segment takes one DS unit plus as many more as the
//! bytes past `inline_hdr.start` fill (Linux en_tx.c `mlx5e_sq_xmit` counts the inline
//! header's DS units from the bytes beyond `INL_HDR_START_SZ`; rdma-core qp.c
//! `set_tso_eth_seg` likewise): [`size_for_inline`].

use super::{be16, check_len, Truncated};

/// Field offsets, named as in Linux include/linux/mlx5/qp.h `struct mlx5_wqe_eth_seg`.
pub mod field {
    use std::ops::Range;
    /// `swp_outer_l4_offset`, `swp_outer_l3_offset`, `swp_inner_l4_offset`,
    /// `swp_inner_l3_offset` (mlx5dv.h: `rsvd0`).
    pub const SWP_OFFSETS: Range<usize> = 0..4;
    /// `cs_flags`.
    pub const CS_FLAGS: usize = 4;
    /// `mss` (rdma-core qp.c `set_tso_eth_seg` writes the WR's MSS there).
    pub const MSS: Range<usize> = 6..8;
    /// `inline_hdr.sz` (mlx5dv.h `inline_hdr_sz`); the same bytes are `insert.type`.
    pub const INLINE_HDR_SZ: Range<usize> = 12..14;
    /// `inline_hdr.start` (mlx5dv.h `inline_hdr_start`): the first inline byte; the inline
    /// header runs on past the 16-byte segment. The same two bytes are `insert.vlan_tci`.
    pub const INLINE_HDR_START: usize = 14;
    /// `insert.vlan_tci`.
    pub const INSERT_VLAN_TCI: Range<usize> = 14..16;
}

/// `cs_flags`: compute the (outer) IPv4 header checksum (mlx5dv.h and Linux qp.h
/// `MLX5_ETH_WQE_L3_CSUM`).
pub const L3_CSUM: u8 = 1 << 6;
/// `cs_flags`: compute the (outer) TCP/UDP checksum (mlx5dv.h and Linux qp.h
/// `MLX5_ETH_WQE_L4_CSUM`).
pub const L4_CSUM: u8 = 1 << 7;
/// `insert.type`: insert an 802.1Q tag with `insert.vlan_tci` after the MAC addresses (Linux
/// qp.h `MLX5_ETH_WQE_INSERT_VLAN`, set by en_tx.c `mlx5e_txwqe_build_eseg`; DPDK mlx5_prm.h
/// `MLX5_ETH_WQE_VLAN_INSERT`, bit 31 of bytes 12..16 as one BE32, set by mlx5_tx.h
/// `mlx5_tx_eseg_none`). Only with no inline header: with one, the driver writes the tag into
/// the inline bytes itself.
pub const INSERT_VLAN: u16 = 1 << 15;

/// Bytes of `inline_hdr.start` (Linux mlx5 en/txrx.h `INL_HDR_START_SZ`): the inline header
/// bytes that fit inside the 16-byte segment.
pub const INLINE_HDR_START_SZ: usize = 2;

/// Bytes the segment occupies with `inline` header bytes: 16, and the bytes past
/// `inline_hdr.start` rounded up to DS units.
#[inline]
pub const fn size_for_inline(inline: usize) -> usize {
    16 + inline.saturating_sub(INLINE_HDR_START_SZ).div_ceil(16) * 16
}

/// A view of an Ethernet segment.
#[derive(Debug, Clone, Copy)]
pub struct EthSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthSeg<T> {
    /// Wraps `buf` without a length check (accessors panic if it is shorter than 16 bytes).
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        EthSeg { buf }
    }

    /// Wraps `buf` after checking it holds the 16-byte segment plus whatever inline header
    /// `inline_hdr.sz` announces.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        let b = buf.as_ref();
        check_len(b.len(), 16)?;
        let n = be16(b, field::INLINE_HDR_SZ.start) as usize;
        check_len(b.len(), (field::INLINE_HDR_START + n).max(16))?;
        Ok(EthSeg { buf })
    }

    /// The four software-parser offsets (`swp_outer_l4_offset`, `swp_outer_l3_offset`,
    /// `swp_inner_l4_offset`, `swp_inner_l3_offset`, in that order).
    #[inline]
    pub fn swp_offsets(&self) -> [u8; 4] {
        let mut o = [0u8; 4];
        o.copy_from_slice(&self.buf.as_ref()[field::SWP_OFFSETS]);
        o
    }
    /// `cs_flags`.
    #[inline]
    pub fn cs_flags(&self) -> u8 {
        self.buf.as_ref()[field::CS_FLAGS]
    }
    /// `mss`.
    #[inline]
    pub fn mss(&self) -> u16 {
        be16(self.buf.as_ref(), field::MSS.start)
    }
    /// `inline_hdr.sz`.
    #[inline]
    pub fn inline_hdr_sz(&self) -> u16 {
        be16(self.buf.as_ref(), field::INLINE_HDR_SZ.start)
    }
    /// `insert.type` (the bytes of `inline_hdr.sz`, read as the VLAN-insertion form).
    #[inline]
    pub fn insert_type(&self) -> u16 {
        be16(self.buf.as_ref(), field::INLINE_HDR_SZ.start)
    }
    /// `insert.vlan_tci`.
    #[inline]
    pub fn insert_vlan_tci(&self) -> u16 {
        be16(self.buf.as_ref(), field::INSERT_VLAN_TCI.start)
    }
}
