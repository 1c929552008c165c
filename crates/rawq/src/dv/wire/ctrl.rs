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

use super::{be16, be32, check_len, put16, put32, Truncated};

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// opmod (31:24), WQE index (23:8), opcode (7:0).
    pub const OPMOD_IDX_OPCODE: Range<usize> = 0..4;
    /// QPN (31:8), DS (7:0).
    pub const QPN_DS: Range<usize> = 4..8;
    /// WQE signature.
    pub const SIGNATURE: usize = 8;
    /// DCI stream channel id.
    pub const DCI_STREAM: Range<usize> = 9..11;
    /// Fence / completion / solicited bits.
    pub const FM_CE_SE: usize = 11;
    /// Immediate.
    pub const IMM: Range<usize> = 12..16;
}

/// Size of the segment.
pub const SIZE: usize = 16;

/// Opcode: no operation.
pub const OPCODE_NOP: u8 = 0x00;
/// Opcode: send (an Ethernet frame on a RAW_PACKET QP).
pub const OPCODE_SEND: u8 = 0x0a;
/// Opcode: TSO (with opmod 1: legacy multi-packet WQE).
pub const OPCODE_TSO: u8 = 0x0e;
/// Opcode: enhanced multi-packet send WQE.
pub const OPCODE_ENHANCED_MPSW: u8 = 0x29;

/// Completion mode "only on error" (bits 3:2 of `fm_ce_se`).
pub const CE_ONLY_ERR: u8 = 0 << 2;
/// Completion mode "only the first error".
pub const CE_ONLY_FIRST_ERR: u8 = 1 << 2;
/// Completion mode "always" (`MLX5_WQE_CTRL_CQ_UPDATE`).
pub const CE_ALWAYS: u8 = 2 << 2;
/// Completion mode "CQE and EQE".
pub const CE_CQE_AND_EQE: u8 = 3 << 2;
/// Mask of the completion-mode bits.
pub const CE_MASK: u8 = 3 << 2;
/// Solicited-event bit.
pub const SOLICITED: u8 = 1 << 1;

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

    /// Wraps `buf` after checking it holds 16 bytes.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        check_len(buf.as_ref().len(), SIZE)?;
        Ok(CtrlSeg { buf })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
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
    /// Signature byte.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.buf.as_ref()[field::SIGNATURE]
    }
    /// DCI stream channel id.
    #[inline]
    pub fn dci_stream(&self) -> u16 {
        be16(self.buf.as_ref(), field::DCI_STREAM.start)
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
    /// Immediate, as the BE32 in memory.
    #[inline]
    pub fn imm(&self) -> u32 {
        be32(self.buf.as_ref(), field::IMM.start)
    }
    /// The first 8 bytes as the doorbell writes them (memory order).
    #[inline]
    pub fn doorbell_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buf.as_ref()[0..8]);
        b
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlSeg<T> {
    /// Sets opmod, WQE index and opcode at once.
    #[inline]
    pub fn set_opmod_idx_opcode(&mut self, opmod: u8, idx: u16, opcode: u8) {
        let v = (opmod as u32) << 24 | (idx as u32) << 8 | opcode as u32;
        put32(self.buf.as_mut(), field::OPMOD_IDX_OPCODE.start, v);
    }
    /// Sets QPN (24 bits) and DS at once.
    #[inline]
    pub fn set_qpn_ds(&mut self, qpn: u32, ds: u8) {
        put32(self.buf.as_mut(), field::QPN_DS.start, qpn << 8 | ds as u32);
    }
    /// Sets the signature byte.
    #[inline]
    pub fn set_signature(&mut self, v: u8) {
        self.buf.as_mut()[field::SIGNATURE] = v;
    }
    /// Sets the DCI stream channel id.
    #[inline]
    pub fn set_dci_stream(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::DCI_STREAM.start, v);
    }
    /// Sets the fence / completion / solicited byte.
    #[inline]
    pub fn set_fm_ce_se(&mut self, v: u8) {
        self.buf.as_mut()[field::FM_CE_SE] = v;
    }
    /// Sets the immediate (stored big-endian).
    #[inline]
    pub fn set_imm(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::IMM.start, v);
    }
    /// Writes the whole segment: opmod/index/opcode, QPN/DS, signature 0, DCI 0, `fm_ce_se`,
    /// immediate `imm`.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &mut self,
        opmod: u8,
        idx: u16,
        opcode: u8,
        qpn: u32,
        ds: u8,
        fm_ce_se: u8,
        imm: u32,
    ) {
        self.set_opmod_idx_opcode(opmod, idx, opcode);
        self.set_qpn_ds(qpn, ds);
        // Bytes 8..12: signature 0, DCI 0, fm_ce_se.
        put32(self.buf.as_mut(), field::SIGNATURE, fm_ce_se as u32);
        self.set_imm(imm);
    }
}
