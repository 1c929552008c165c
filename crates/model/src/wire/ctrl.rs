//! The control segment that opens every send WQE, as the device reads it: Linux
//! include/linux/mlx5/qp.h `struct mlx5_wqe_ctrl_seg` (rdma-core's `mlx5dv.h` declares the same
//! 16 bytes, naming bytes 9..11 `dci_stream_channel_id`). Field offsets carry the kernel's
//! names; each field and constant cites where its meaning comes from.
//!
//! Checked by the C oracle (`oracle.rs`): the offsets, the opcodes and `fm_ce_se` bits that
//! `mlx5dv.h` defines, and every field read back from segments `mlx5dv_set_ctrl_seg` wrote.
//! `MLX5_OPCODE_ENHANCED_MPSW` and `MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE` are only in the kernel's
//! headers (and DPDK's mlx5_prm.h), so the oracle cannot judge them.
//!
//! | byte | kernel field | meaning |
//! |---|---|---|
//! | 0..4 | `opmod_idx_opcode` | opmod (31:24), WQE index (23:8), opcode (7:0) |
//! | 4..8 | `qpn_ds` | SQ number (31:8), DS: 16-byte units of the whole WQE (5:0) |
//! | 8 | `signature` | (not read: the model checks no WQE signature) |
//! | 11 | `fm_ce_se` | fence mode (7:5), completion mode (3:2), solicited event (1) |
//! | 12..16 | `imm` / `general_id` / `tisn` | (not read on an Ethernet SEND) |

use super::{be16, be32};

/// Field offsets, named as in Linux include/linux/mlx5/qp.h `struct mlx5_wqe_ctrl_seg`.
pub mod field {
    use std::ops::Range;
    /// `opmod_idx_opcode`: the kernel's en_tx.c and rdma-core's `mlx5dv_set_ctrl_seg` write
    /// `opmod << 24 | pi << 8 | opcode` (qp.h `MLX5_WQE_CTRL_WQE_INDEX_SHIFT`,
    /// `MLX5_WQE_CTRL_OPCODE_MASK`).
    pub const OPMOD_IDX_OPCODE: Range<usize> = 0..4;
    /// `qpn_ds`: `qpn << 8 | ds` (qp.h `MLX5_WQE_CTRL_QPN_SHIFT`, `MLX5_WQE_CTRL_DS_MASK`).
    pub const QPN_DS: Range<usize> = 4..8;
    /// `fm_ce_se`.
    pub const FM_CE_SE: usize = 11;
}

/// Bits of the DS count the device uses (qp.h `MLX5_WQE_CTRL_DS_MASK`): a WQE is at most 63
/// 16-byte units.
pub const DS_MASK: u8 = 0x3f;

/// Opcode `MLX5_OPCODE_NOP` (mlx5dv.h; Linux device.h): completes, sends nothing.
pub const OPCODE_NOP: u8 = 0x00;
/// Opcode `MLX5_OPCODE_SEND` (mlx5dv.h; Linux device.h): on a RAW_PACKET QP / Ethernet SQ,
/// one frame (rdma-core qp.c `_mlx5_post_send` for `IBV_WR_SEND`).
pub const OPCODE_SEND: u8 = 0x0a;
/// Opcode `MLX5_OPCODE_TSO` (mlx5dv.h; Linux device.h calls it `MLX5_OPCODE_LSO`): a
/// segmentation offload, what libmlx5 writes for `IBV_WR_TSO`.
pub const OPCODE_TSO: u8 = 0x0e;
/// Opcode `MLX5_OPCODE_ENHANCED_MPSW` (Linux device.h; DPDK mlx5_prm.h): several frames in one
/// WQE (the kernel's en/txrx.h `mlx5e_tx_mpwqe_session_complete`, DPDK mlx5_tx.h
/// `mlx5_tx_burst_empw_*`). Not in `mlx5dv.h`.
pub const OPCODE_ENHANCED_MPSW: u8 = 0x29;

/// `fm_ce_se` completion mode "CQE always" (mlx5dv.h and Linux qp.h
/// `MLX5_WQE_CTRL_CQ_UPDATE`; rdma-core qp.c sets it for a signaled WR).
pub const CQ_UPDATE: u8 = 2 << 2;
/// `fm_ce_se` completion mode "CQE and EQE" (Linux qp.h `MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE`).
pub const CQ_UPDATE_AND_EQE: u8 = 3 << 2;
/// The completion-mode bits of `fm_ce_se` (bits 3:2, the span of the two values above).
pub const CE_MASK: u8 = 3 << 2;

/// A view of a control segment.
#[derive(Debug, Clone, Copy)]
pub struct CtrlSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// Wraps `buf` without a length check (accessors panic if it is shorter than 16 bytes).
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        CtrlSeg { buf }
    }

    /// opmod (`opmod_idx_opcode` bits 31:24; 0 for SEND, NOP, TSO and enhanced MPSW).
    #[inline]
    pub fn opmod(&self) -> u8 {
        self.buf.as_ref()[field::OPMOD_IDX_OPCODE.start]
    }
    /// WQE index (`opmod_idx_opcode` bits 23:8): the 16-bit producer counter of the WQE's
    /// first WQEBB.
    #[inline]
    pub fn wqe_index(&self) -> u16 {
        be16(self.buf.as_ref(), field::OPMOD_IDX_OPCODE.start + 1)
    }
    /// Opcode (`opmod_idx_opcode` bits 7:0).
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buf.as_ref()[field::OPMOD_IDX_OPCODE.end - 1]
    }
    /// SQ number (`qpn_ds` bits 31:8).
    #[inline]
    pub fn qpn(&self) -> u32 {
        be32(self.buf.as_ref(), field::QPN_DS.start) >> 8
    }
    /// The DS byte (`qpn_ds` bits 7:0) whole: bits above [`DS_MASK`] are the caller's to refuse.
    #[inline]
    pub fn ds(&self) -> u8 {
        self.buf.as_ref()[field::QPN_DS.end - 1]
    }
    /// `fm_ce_se`.
    #[inline]
    pub fn fm_ce_se(&self) -> u8 {
        self.buf.as_ref()[field::FM_CE_SE]
    }
    /// Completion mode (`fm_ce_se & CE_MASK`): compare with [`CQ_UPDATE`],
    /// [`CQ_UPDATE_AND_EQE`].
    #[inline]
    pub fn ce(&self) -> u8 {
        self.fm_ce_se() & CE_MASK
    }
}
