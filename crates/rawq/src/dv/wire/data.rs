//! Data pointer segment (`struct mlx5_wqe_data_seg`, 16 bytes), used in send WQEs and as the
//! scatter entries of receive WQEs.
//!
//! | byte | field |
//! |---|---|
//! | 0..4 | byte count (bit 31 must be 0: set means an inline segment) |
//! | 4..8 | lkey |
//! | 8..16 | virtual address |
//!
//! A receive scatter list ends early with the terminator `{0, INVALID_LKEY, 0}`.

use super::{be32, be64, check_len, put32, put64, Truncated};

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// Byte count.
    pub const BYTE_COUNT: Range<usize> = 0..4;
    /// Local key.
    pub const LKEY: Range<usize> = 4..8;
    /// Address.
    pub const ADDR: Range<usize> = 8..16;
}

/// Size of the segment.
pub const SIZE: usize = 16;
/// The lkey of a receive scatter-list terminator (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;

/// A view of a data pointer segment.
#[derive(Debug, Clone, Copy)]
pub struct DataSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Wraps `buf` without a length check.
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        DataSeg { buf }
    }
    /// Wraps `buf` after checking it holds 16 bytes.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        check_len(buf.as_ref().len(), SIZE)?;
        Ok(DataSeg { buf })
    }
    /// Byte count (whole word, bit 31 included).
    #[inline]
    pub fn byte_count(&self) -> u32 {
        be32(self.buf.as_ref(), field::BYTE_COUNT.start)
    }
    /// Local key.
    #[inline]
    pub fn lkey(&self) -> u32 {
        be32(self.buf.as_ref(), field::LKEY.start)
    }
    /// Address.
    #[inline]
    pub fn addr(&self) -> u64 {
        be64(self.buf.as_ref(), field::ADDR.start)
    }
    /// True for a receive scatter-list terminator.
    #[inline]
    pub fn is_terminator(&self) -> bool {
        self.byte_count() == 0 && self.lkey() == INVALID_LKEY
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataSeg<T> {
    /// Sets the byte count.
    #[inline]
    pub fn set_byte_count(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::BYTE_COUNT.start, v);
    }
    /// Sets the lkey.
    #[inline]
    pub fn set_lkey(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::LKEY.start, v);
    }
    /// Sets the address.
    #[inline]
    pub fn set_addr(&mut self, v: u64) {
        put64(self.buf.as_mut(), field::ADDR.start, v);
    }
    /// Writes all three fields.
    #[inline]
    pub fn fill(&mut self, len: u32, lkey: u32, addr: u64) {
        self.set_byte_count(len);
        self.set_lkey(lkey);
        self.set_addr(addr);
    }
    /// Writes a receive scatter-list terminator.
    #[inline]
    pub fn fill_terminator(&mut self) {
        self.fill(0, INVALID_LKEY, 0);
    }
}
