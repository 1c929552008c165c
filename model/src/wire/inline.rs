// The model's own copy of rawq's src/dv/wire/inline.rs, so that the model imports nothing from rawq;
// to be re-derived from the vendor sources cited below and checked by C oracles (issue 18).

//! Inline data segment (`struct mlx5_wqe_inl_data_seg`): a BE32 `byte_count | 0x8000_0000`
//! followed by the data, padded to a multiple of 16 bytes.

use super::{be32, check_len, Truncated};

/// Field offsets.
pub mod field {

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
    /// Data length.
    #[inline]
    pub fn len(&self) -> usize {
        (be32(self.buf.as_ref(), 0) & !INLINE_BIT) as usize
    }
}
