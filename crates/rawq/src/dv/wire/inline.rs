//! Inline data segment (`struct mlx5_wqe_inl_data_seg`): a BE32 `byte_count | 0x8000_0000`
//! followed by the data, padded to a multiple of 16 bytes.

use super::{be32, check_len, put32, Truncated};

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// Byte count with the inline bit.
    pub const BYTE_COUNT: Range<usize> = 0..4;
    /// First data byte.
    pub const DATA: usize = 4;
}

/// The inline bit of `byte_count` (`MLX5_INLINE_SEG`).
pub const INLINE_BIT: u32 = 0x8000_0000;

/// 16-byte units an inline segment of `len` data bytes occupies.
#[inline]
pub const fn ds_for(len: usize) -> usize {
    (4 + len).div_ceil(16)
}

/// A view of an inline data segment.
#[derive(Debug, Clone, Copy)]
pub struct InlineSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> InlineSeg<T> {
    /// Wraps `buf` without a length check.
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        InlineSeg { buf }
    }
    /// Wraps `buf` after checking it holds the header and the announced data.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        let b = buf.as_ref();
        check_len(b.len(), 4)?;
        let n = (be32(b, 0) & !INLINE_BIT) as usize;
        check_len(b.len(), 4 + n)?;
        Ok(InlineSeg { buf })
    }
    /// True if the inline bit is set.
    #[inline]
    pub fn is_inline(&self) -> bool {
        be32(self.buf.as_ref(), 0) & INLINE_BIT != 0
    }
    /// Data length.
    #[inline]
    pub fn len(&self) -> usize {
        (be32(self.buf.as_ref(), 0) & !INLINE_BIT) as usize
    }
    /// True if the segment carries no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf.as_ref()[field::DATA..field::DATA + self.len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InlineSeg<T> {
    /// Writes the header and copies `data` after it.
    ///
    /// # Panics
    /// If the buffer is shorter than `4 + data.len()`.
    #[inline]
    pub fn fill(&mut self, data: &[u8]) {
        let b = self.buf.as_mut();
        put32(b, 0, data.len() as u32 | INLINE_BIT);
        b[field::DATA..field::DATA + data.len()].copy_from_slice(data);
    }
}
