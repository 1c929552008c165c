//! Receive WQEs.
//!
//! * **Cyclic RQ**: a WQE is an array of [`DataSeg`](super::DataSeg) scatter entries (16 bytes
//!   each, `stride / 16` of them); a list shorter than the WQE ends with a terminator
//!   ([`DataSeg::fill_terminator`](super::DataSeg::fill_terminator)).
//! * **Striding RQ**: a WQE starts with the 16-byte [`SrqNextSeg`] and continues with data
//!   segments that together form one logical buffer of `num_strides * stride_size` bytes.

use super::{be16, check_len, put16, Truncated};

/// Field offsets of the next-segment header.
pub mod field {
    use std::ops::Range;
    /// Next WQE index (linked-list SRQs; ignored by a cyclic striding RQ).
    pub const NEXT_WQE_INDEX: Range<usize> = 2..4;
    /// Signature.
    pub const SIGNATURE: usize = 4;
}

/// Size of the next-segment header.
pub const SIZE: usize = 16;

/// `struct mlx5_wqe_srq_next_seg`, the header of a striding RQ WQE.
#[derive(Debug, Clone, Copy)]
pub struct SrqNextSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> SrqNextSeg<T> {
    /// Wraps `buf` without a length check.
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        SrqNextSeg { buf }
    }
    /// Wraps `buf` after checking it holds 16 bytes.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        check_len(buf.as_ref().len(), SIZE)?;
        Ok(SrqNextSeg { buf })
    }
    /// Next WQE index.
    #[inline]
    pub fn next_wqe_index(&self) -> u16 {
        be16(self.buf.as_ref(), field::NEXT_WQE_INDEX.start)
    }
    /// Signature.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.buf.as_ref()[field::SIGNATURE]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SrqNextSeg<T> {
    /// Writes the header: zero everywhere but the next WQE index.
    #[inline]
    pub fn fill(&mut self, next: u16) {
        let b = self.buf.as_mut();
        b[..SIZE].fill(0);
        put16(b, field::NEXT_WQE_INDEX.start, next);
    }
}
