// The model's own copy of rawq's src/dv/wire/ctrl.rs, so that the model imports nothing from rawq;
// to be re-derived from the vendor sources cited below and checked by C oracles (issue 18).

//! Send WQE control segment (`struct mlx5_wqe_ctrl_seg`, 16 bytes).
//!
//! | byte | field |
//! |---|---|
//! | 0 | opmod |
//! | 1..3 | WQE index (BE16, producer counter of the WQE's first WQEBB, wraps at 0xffff) |
//! | 3 | opcode |
//! | 4..7 | QP / SQ number (24 bits) |
//! | 7 | DS: 16-byte units in the whole WQE (6 bits meaningful) |
//! | 8 | signature |
//! | 9..11 | DCI stream channel id (0 for Ethernet) |
//! | 11 | fm_ce_se: fence mode (7:5), completion mode (3:2), solicited (1) |
//! | 12..16 | immediate (free for software on an Ethernet SEND) |

use super::{be16, be32};

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// opmod (31:24), WQE index (23:8), opcode (7:0).
    pub const OPMOD_IDX_OPCODE: Range<usize> = 0..4;
    /// QPN (31:8), DS (7:0).
    pub const QPN_DS: Range<usize> = 4..8;
    /// Fence / completion / solicited bits.
    pub const FM_CE_SE: usize = 11;
}

/// Opcode: no operation.
pub const OPCODE_NOP: u8 = 0x00;
/// Opcode: send (an Ethernet frame on a RAW_PACKET QP).
pub const OPCODE_SEND: u8 = 0x0a;
/// Opcode: TSO / LSO (rdma-core mlx5dv.h `MLX5_OPCODE_TSO`, what libmlx5 writes for
/// `IBV_WR_TSO`).
pub const OPCODE_TSO: u8 = 0x0e;
/// Opcode: enhanced multi-packet send WQE.
pub const OPCODE_ENHANCED_MPSW: u8 = 0x29;

/// Completion mode "always" (`MLX5_WQE_CTRL_CQ_UPDATE`).
pub const CE_ALWAYS: u8 = 2 << 2;
/// Completion mode "CQE and EQE".
pub const CE_CQE_AND_EQE: u8 = 3 << 2;
/// Mask of the completion-mode bits.
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

    /// opmod.
    #[inline]
    pub fn opmod(&self) -> u8 {
        self.buf.as_ref()[field::OPMOD_IDX_OPCODE.start]
    }
    /// WQE index (16-bit WQEBB producer counter of this WQE).
    #[inline]
    pub fn wqe_index(&self) -> u16 {
        be16(self.buf.as_ref(), field::OPMOD_IDX_OPCODE.start + 1)
    }
    /// Opcode.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buf.as_ref()[field::OPMOD_IDX_OPCODE.start + 3]
    }
    /// QP / SQ number (24 bits).
    #[inline]
    pub fn qpn(&self) -> u32 {
        be32(self.buf.as_ref(), field::QPN_DS.start) >> 8
    }
    /// DS count (the whole byte; only bits 5:0 are meaningful to the device).
    #[inline]
    pub fn ds(&self) -> u8 {
        self.buf.as_ref()[field::QPN_DS.end - 1]
    }
    /// Fence / completion / solicited byte.
    #[inline]
    pub fn fm_ce_se(&self) -> u8 {
        self.buf.as_ref()[field::FM_CE_SE]
    }
    /// Completion mode bits (`fm_ce_se & CE_MASK`).
    #[inline]
    pub fn ce(&self) -> u8 {
        self.fm_ce_se() & CE_MASK
    }
}
