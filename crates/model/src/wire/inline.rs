//! The inline data segment, as the device reads it: Linux include/linux/mlx5/qp.h
//! `struct mlx5_wqe_inline_seg` (a BE32 `byte_count`, then the data); rdma-core's `mlx5dv.h`
//! declares only its header, `struct mlx5_wqe_inl_data_seg`, and the flag `MLX5_INLINE_SEG`.
//! It stands where a data segment would (`data.rs`); bit 31 of the first word tells them apart.
//!
//! | byte | kernel field | meaning |
//! |---|---|---|
//! | 0..4 | `byte_count` | `MLX5_INLINE_SEG` (bit 31) ored with the data length |
//! | 4.. | `data` | the frame bytes, padded to a multiple of 16 bytes with the header |
//!
//! Checked by the C oracle (`oracle.rs`): `MLX5_INLINE_SEG` and the header's size. Its data
//! layout and padding, which `mlx5dv.h` leaves out, come from rdma-core providers/mlx5/qp.c
//! `set_data_inl_seg` (the segment takes `align(4 + len, 16) / 16` DS units) and from the
//! model's tests of inline sends.

use super::{be32, check_len, Truncated};

/// Field offsets, named as in Linux include/linux/mlx5/qp.h `struct mlx5_wqe_inline_seg`.
pub mod field {
    use std::ops::Range;
    /// `byte_count`.
    pub const BYTE_COUNT: Range<usize> = 0..4;
    /// `data`: the first data byte (`sizeof(struct mlx5_wqe_inl_data_seg)` in `mlx5dv.h`).
    pub const DATA: usize = 4;
}

/// The inline flag of `byte_count` (mlx5dv.h `MLX5_INLINE_SEG`; rdma-core qp.c
/// `set_data_inl_seg`, the kernel's wr.c `set_data_inl_seg` set it).
pub const INLINE_SEG: u32 = 0x8000_0000;

/// DS units (16 bytes) an inline segment of `len` data bytes occupies (rdma-core qp.c
/// `set_data_inl_seg`: the header and the data, rounded up to 16 bytes).
#[inline]
pub const fn ds_for(len: usize) -> usize {
    (field::DATA + len).div_ceil(16)
}

/// A view of an inline data segment.
#[derive(Debug, Clone, Copy)]
pub struct InlineSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> InlineSeg<T> {
    /// Wraps `buf` after checking it holds the header and the data it announces.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        let b = buf.as_ref();
        check_len(b.len(), field::DATA)?;
        let n = (be32(b, field::BYTE_COUNT.start) & !INLINE_SEG) as usize;
        check_len(b.len(), field::DATA + n)?;
        Ok(InlineSeg { buf })
    }
    /// Data length (`byte_count` without [`INLINE_SEG`]).
    #[inline]
    pub fn len(&self) -> usize {
        (be32(self.buf.as_ref(), field::BYTE_COUNT.start) & !INLINE_SEG) as usize
    }
}
