//! The 8-byte mini-CQE of a compressed CQE session (`struct mlx5_mini_cqe8`), eight to a 64-byte
//! CQ slot.
//!
//! | format | bytes 0..2 | bytes 2..4 | bytes 4..8 |
//! |---|---|---|---|
//! | HASH | RSS hash (BE32 over 0..4) | | byte count |
//! | CSUM_STRIDX | L4 checksum | stride index | byte count |
//!
//! For a striding RQ the byte count uses the striding encoding
//! ([`mprq_decode`](super::cqe::mprq_decode)).

use super::{be16, be32, check_len, put16, put32, Truncated};

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// HASH format: RSS hash.
    pub const RX_HASH: Range<usize> = 0..4;
    /// CSUM formats: checksum.
    pub const CHECKSUM: Range<usize> = 0..2;
    /// STRIDX formats: stride index.
    pub const STRIDE_IDX: Range<usize> = 2..4;
    /// Byte count.
    pub const BYTE_CNT: Range<usize> = 4..8;
}

/// Size of a mini-CQE.
pub const SIZE: usize = 8;
/// Mini-CQEs per 64-byte CQ slot.
pub const PER_SLOT: usize = 8;

/// A view of one mini-CQE.
#[derive(Debug, Clone, Copy)]
pub struct MiniCqe<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> MiniCqe<T> {
    /// Wraps `buf` without a length check.
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        MiniCqe { buf }
    }
    /// Wraps `buf` after checking it holds 8 bytes.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        check_len(buf.as_ref().len(), SIZE)?;
        Ok(MiniCqe { buf })
    }
    /// HASH format: RSS hash.
    #[inline]
    pub fn rx_hash(&self) -> u32 {
        be32(self.buf.as_ref(), field::RX_HASH.start)
    }
    /// CSUM formats: checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), field::CHECKSUM.start)
    }
    /// STRIDX formats: stride index.
    #[inline]
    pub fn stride_idx(&self) -> u16 {
        be16(self.buf.as_ref(), field::STRIDE_IDX.start)
    }
    /// Byte count.
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        be32(self.buf.as_ref(), field::BYTE_CNT.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MiniCqe<T> {
    /// HASH format: sets the RSS hash.
    #[inline]
    pub fn set_rx_hash(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::RX_HASH.start, v);
    }
    /// CSUM formats: sets the checksum.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::CHECKSUM.start, v);
    }
    /// STRIDX formats: sets the stride index.
    #[inline]
    pub fn set_stride_idx(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::STRIDE_IDX.start, v);
    }
    /// Sets the byte count.
    #[inline]
    pub fn set_byte_cnt(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::BYTE_CNT.start, v);
    }
}
