//! The data pointer segment, as the device reads it: Linux include/linux/mlx5/qp.h
//! `struct mlx5_wqe_data_seg` (rdma-core's `mlx5dv.h` declares the same 16 bytes). It points a
//! send WQE at frame bytes in registered memory, and is the scatter entry of a receive WQE.
//! Field offsets carry the kernel's names.
//!
//! Checked by the C oracle (`oracle.rs`): the size, the offsets, `MLX5_INVALID_LKEY`, and every
//! field read back from segments `mlx5dv_set_data_seg` wrote.
//!
//! | byte | kernel field | meaning |
//! |---|---|---|
//! | 0..4 | `byte_count` | length; bit 31 set makes it an inline segment instead (`inline.rs`) |
//! | 4..8 | `lkey` | memory key of the buffer |
//! | 8..16 | `addr` | virtual address of the buffer |
//!
//! A receive scatter list shorter than the WQE ends with `lkey == MLX5_INVALID_LKEY` and a
//! zero byte count (rdma-core providers/mlx5/qp.c `mlx5_post_recv` and `mlx5_post_wq_recv`
//! write that terminator after the last SGE).

use super::{be32, be64};

/// Field offsets, named as in Linux include/linux/mlx5/qp.h `struct mlx5_wqe_data_seg`.
pub mod field {
    use std::ops::Range;
    /// `byte_count`.
    pub const BYTE_COUNT: Range<usize> = 0..4;
    /// `lkey`.
    pub const LKEY: Range<usize> = 4..8;
    /// `addr`.
    pub const ADDR: Range<usize> = 8..16;
}

/// Bytes of the segment (`sizeof(struct mlx5_wqe_data_seg)`, one DS unit: qp.h
/// `MLX5_SEND_WQE_DS`).
pub const SIZE: usize = 16;
/// The lkey that ends a receive scatter list (mlx5dv.h and Linux qp.h `MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;

/// A view of a data pointer segment.
#[derive(Debug, Clone, Copy)]
pub struct DataSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Wraps `buf` without a length check (accessors panic if it is shorter than 16 bytes).
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        DataSeg { buf }
    }
    /// `byte_count`, the whole word: bit 31 (`inline::INLINE_SEG`) included.
    #[inline]
    pub fn byte_count(&self) -> u32 {
        be32(self.buf.as_ref(), field::BYTE_COUNT.start)
    }
    /// `lkey`.
    #[inline]
    pub fn lkey(&self) -> u32 {
        be32(self.buf.as_ref(), field::LKEY.start)
    }
    /// `addr`.
    #[inline]
    pub fn addr(&self) -> u64 {
        be64(self.buf.as_ref(), field::ADDR.start)
    }
    /// True for a receive scatter-list terminator (no bytes, [`INVALID_LKEY`]).
    #[inline]
    pub fn is_terminator(&self) -> bool {
        self.byte_count() == 0 && self.lkey() == INVALID_LKEY
    }
}
