//! The 8-byte mini-CQE of a compressed CQE session, eight to a 64-byte CQ slot: Linux
//! include/linux/mlx5/device.h `struct mlx5_mini_cqe8` (DPDK drivers/common/mlx5/mlx5_prm.h
//! `struct mlx5_mini_cqe8`). Its first word depends on the format the CQ was created with
//! (`mlx5_ib_create_cq.cqe_comp_res_format`, include/uapi/rdma/mlx5-abi.h
//! `MLX5_IB_CQE_RES_FORMAT_*`); the model writes the two the Verbs path asks for and the
//! emulator refuses the others (emu/src/cmd/cq.rs):
//!
//! | format | bytes 0..4 | bytes 4..8 |
//! |---|---|---|
//! | HASH | `rx_hash_result` | `byte_cnt` |
//! | CSUM_STRIDX | `checksum` (0..2), `stridx` (2..4) | `byte_cnt` |
//!
//! For a striding RQ `byte_cnt` uses the striding encoding
//! ([`mprq_decode`](super::cqe::mprq_decode)). DPDK's mlx5 PMD decodes both formats of the
//! model in tests/emu/dpdk_decode.rs (hash, length, stride index; with CSUM_STRIDX its vector
//! receive reports no hash for the session's entries, `rxq_cq_decompress_v`).

use super::{put16, put32};

/// Field offsets, named as in `struct mlx5_mini_cqe8`.
pub mod field {
    use std::ops::Range;
    /// HASH format: `rx_hash_result`.
    pub const RX_HASH_RESULT: Range<usize> = 0..4;
    /// CSUM formats: `checksum`.
    pub const CHECKSUM: Range<usize> = 0..2;
    /// CSUM_STRIDX format: `stridx`, the frame's first stride (DPDK `mlx5_rx_burst_mprq`
    /// takes it as `strd_idx` of a compressed entry).
    pub const STRIDX: Range<usize> = 2..4;
    /// `byte_cnt`.
    pub const BYTE_CNT: Range<usize> = 4..8;
}

/// Mini-CQEs per 64-byte CQ slot (device.h `MLX5_MINI_CQE_ARRAY_SIZE`).
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
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MiniCqe<T> {
    /// HASH format: sets `rx_hash_result`.
    #[inline]
    pub fn set_rx_hash_result(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::RX_HASH_RESULT.start, v);
    }
    /// CSUM formats: sets `checksum`.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::CHECKSUM.start, v);
    }
    /// CSUM_STRIDX format: sets `stridx`.
    #[inline]
    pub fn set_stridx(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::STRIDX.start, v);
    }
    /// Sets `byte_cnt`.
    #[inline]
    pub fn set_byte_cnt(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::BYTE_CNT.start, v);
    }
}
