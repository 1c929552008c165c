//! The 64-byte completion queue entry (`struct mlx5_cqe64`), including the error CQE view
//! (`struct mlx5_err_cqe`), the striding-RQ `byte_cnt` encoding and `op_own`.
//!
//! | byte | field |
//! |---|---|
//! | 2..4 | `wqe_id`: striding RQ WQE index |
//! | 12..16 | RSS hash result |
//! | 16 | RSS hash type: bits 3:2 IP (1 IPv4, 2 IPv6), bits 7:6 L4 (1 TCP, 2 UDP) |
//! | 20..22 | raw L4 checksum |
//! | 28 | `hds_ip_ext`: bit 0 L2 ok, bit 1 L3 ok, bit 2 L4 ok |
//! | 29 | `l4_hdr_type_etc`: bit 0 VLAN stripped, bits 3:2 L3 type, bits 6:4 L4 type, bit 7 fragment |
//! | 30..32 | stripped VLAN TCI |
//! | 44..48 | `byte_cnt` (a compressed title: number of mini-CQEs) |
//! | 48..56 | timestamp |
//! | 54 | (error CQE) vendor syndrome |
//! | 55 | (error CQE) syndrome |
//! | 56..60 | requester: WQE opcode (31:24) + QPN; responder: flow tag (23:0) |
//! | 60..62 | `wqe_counter` (striding RQ: stride index) |
//! | 62 | signature / validity iteration count |
//! | 63 | `op_own`: opcode (7:4), format (3:2), SE (1), owner (0) |

use super::{be16, be32, be64, check_len, put16, put32, put64, Truncated};

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// Packet info (tunnel bits).
    pub const PKT_INFO: usize = 0;
    /// Striding RQ WQE index.
    pub const WQE_ID: Range<usize> = 2..4;
    /// RSS hash result.
    pub const RX_HASH: Range<usize> = 12..16;
    /// RSS hash type.
    pub const RX_HASH_TYPE: usize = 16;
    /// Raw L4 checksum.
    pub const CHECKSUM: Range<usize> = 20..22;
    /// L2/L3/L4 ok bits.
    pub const HDS_IP_EXT: usize = 28;
    /// Header types and the VLAN-stripped bit.
    pub const L4_HDR_TYPE_ETC: usize = 29;
    /// Stripped VLAN TCI.
    pub const VLAN_INFO: Range<usize> = 30..32;
    /// SRQ number / user index.
    pub const SRQN_UIDX: Range<usize> = 32..36;
    /// Flow table metadata / immediate.
    pub const IMM: Range<usize> = 36..40;
    /// Byte count.
    pub const BYTE_CNT: Range<usize> = 44..48;
    /// Timestamp.
    pub const TIMESTAMP: Range<usize> = 48..56;
    /// Error CQE: vendor syndrome.
    pub const VENDOR_ERR_SYND: usize = 54;
    /// Error CQE: syndrome.
    pub const SYNDROME: usize = 55;
    /// Requester: WQE opcode + QPN; responder: flow tag.
    pub const SOP_DROP_QPN: Range<usize> = 56..60;
    /// WQE counter / stride index.
    pub const WQE_COUNTER: Range<usize> = 60..62;
    /// Signature / validity iteration count.
    pub const SIGNATURE: usize = 62;
    /// Opcode, format, SE, owner.
    pub const OP_OWN: usize = 63;
}

/// Size of a CQE.
pub const SIZE: usize = 64;

/// CQE opcode: requester (send) completion.
pub const OP_REQ: u8 = 0;
/// CQE opcode: responder send (an Ethernet RX packet).
pub const OP_RESP_SEND: u8 = 2;
/// CQE opcode: requester error.
pub const OP_REQ_ERR: u8 = 13;
/// CQE opcode: responder error.
pub const OP_RESP_ERR: u8 = 14;
/// CQE opcode: invalid (hardware has not written this entry).
pub const OP_INVALID: u8 = 15;
/// `op_own` of a freshly initialized (or scrubbed) CQE.
pub const OP_OWN_INVALID: u8 = 0xf0;
/// `op_own` bit 1: solicited event.
pub const OP_OWN_SE: u8 = 1 << 1;

/// CQE format: no inline data.
pub const FORMAT_NONE: u8 = 0;
/// CQE format: compressed session title.
pub const FORMAT_COMPRESSED: u8 = 3;

/// Syndrome: local length error.
pub const SYND_LOCAL_LENGTH_ERR: u8 = 0x01;
/// Syndrome: local QP operation error.
pub const SYND_LOCAL_QP_OP_ERR: u8 = 0x02;
/// Syndrome: local protection error.
pub const SYND_LOCAL_PROT_ERR: u8 = 0x04;
/// Syndrome: work request flushed.
pub const SYND_WR_FLUSH_ERR: u8 = 0x05;

/// `hds_ip_ext` bit: L2 ok.
pub const L2_OK: u8 = 1 << 0;
/// `hds_ip_ext` bit: L3 (IPv4 header checksum) ok.
pub const L3_OK: u8 = 1 << 1;
/// `hds_ip_ext` bit: L4 checksum ok.
pub const L4_OK: u8 = 1 << 2;

/// `l4_hdr_type_etc` bit: a VLAN tag was stripped (TCI in `vlan_info`).
pub const CV: u8 = 1 << 0;
/// L3 type value (bits 3:2): none.
pub const L3_NONE: u8 = 0;
/// L3 type value: IPv6.
pub const L3_IPV6: u8 = 1;
/// L3 type value: IPv4.
pub const L3_IPV4: u8 = 2;
/// L4 type value (bits 6:4): none.
pub const L4_NONE: u8 = 0;
/// L4 type value: TCP (no ACK).
pub const L4_TCP: u8 = 1;
/// L4 type value: UDP.
pub const L4_UDP: u8 = 2;
/// L4 type value: TCP, ACK, no data.
pub const L4_TCP_ACK_NO_DATA: u8 = 3;
/// L4 type value: TCP, ACK and data.
pub const L4_TCP_ACK_DATA: u8 = 4;
/// `l4_hdr_type_etc` bit: IP fragment.
pub const IP_FRAG: u8 = 1 << 7;

/// Striding RQ `byte_cnt`: filler bit.
pub const MPRQ_FILLER: u32 = 1 << 31;
/// Striding RQ `byte_cnt`: consumed strides (bits 29:16).
pub const MPRQ_STRIDES_MASK: u32 = 0x3fff_0000;
/// Striding RQ `byte_cnt`: packet length (bits 15:0).
pub const MPRQ_LEN_MASK: u32 = 0xffff;

/// Encodes a striding RQ `byte_cnt`.
#[inline]
pub const fn mprq_byte_cnt(len: u16, strides: u16, filler: bool) -> u32 {
    (if filler { MPRQ_FILLER } else { 0 })
        | ((strides as u32) << 16) & MPRQ_STRIDES_MASK
        | len as u32
}

/// Decodes a striding RQ `byte_cnt` into (length, consumed strides, filler).
#[inline]
pub const fn mprq_decode(byte_cnt: u32) -> (u16, u16, bool) {
    (
        (byte_cnt & MPRQ_LEN_MASK) as u16,
        ((byte_cnt & MPRQ_STRIDES_MASK) >> 16) as u16,
        byte_cnt & MPRQ_FILLER != 0,
    )
}

/// Builds an `op_own` byte.
#[inline]
pub const fn op_own(opcode: u8, format: u8, owner: u8) -> u8 {
    opcode << 4 | (format & 3) << 2 | (owner & 1)
}

/// A view of a 64-byte CQE.
#[derive(Debug, Clone, Copy)]
pub struct Cqe<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Cqe<T> {
    /// Wraps `buf` without a length check.
    #[inline(always)]
    pub const fn new_unchecked(buf: T) -> Self {
        Cqe { buf }
    }
    /// Wraps `buf` after checking it holds 64 bytes.
    ///
    /// # Errors
    /// [`Truncated`] if it is shorter.
    pub fn new_checked(buf: T) -> Result<Self, Truncated> {
        check_len(buf.as_ref().len(), SIZE)?;
        Ok(Cqe { buf })
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }
    #[inline(always)]
    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    /// Packet info byte.
    #[inline]
    pub fn pkt_info(&self) -> u8 {
        self.b()[field::PKT_INFO]
    }
    /// Striding RQ WQE index.
    #[inline]
    pub fn wqe_id(&self) -> u16 {
        be16(self.b(), field::WQE_ID.start)
    }
    /// RSS hash.
    #[inline]
    pub fn rx_hash(&self) -> u32 {
        be32(self.b(), field::RX_HASH.start)
    }
    /// RSS hash type.
    #[inline]
    pub fn rx_hash_type(&self) -> u8 {
        self.b()[field::RX_HASH_TYPE]
    }
    /// Raw L4 checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM.start)
    }
    /// L2/L3/L4 ok bits.
    #[inline]
    pub fn hds_ip_ext(&self) -> u8 {
        self.b()[field::HDS_IP_EXT]
    }
    /// Header types byte.
    #[inline]
    pub fn l4_hdr_type_etc(&self) -> u8 {
        self.b()[field::L4_HDR_TYPE_ETC]
    }
    /// L3 type (bits 3:2 of byte 29).
    #[inline]
    pub fn l3_type(&self) -> u8 {
        (self.l4_hdr_type_etc() >> 2) & 3
    }
    /// L4 type (bits 6:4 of byte 29).
    #[inline]
    pub fn l4_type(&self) -> u8 {
        (self.l4_hdr_type_etc() >> 4) & 7
    }
    /// True if a VLAN tag was stripped.
    #[inline]
    pub fn vlan_stripped(&self) -> bool {
        self.l4_hdr_type_etc() & CV != 0
    }
    /// Stripped VLAN TCI.
    #[inline]
    pub fn vlan_info(&self) -> u16 {
        be16(self.b(), field::VLAN_INFO.start)
    }
    /// SRQN / user index word.
    #[inline]
    pub fn srqn_uidx(&self) -> u32 {
        be32(self.b(), field::SRQN_UIDX.start)
    }
    /// Byte count (or mini-CQE count of a compressed title).
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        be32(self.b(), field::BYTE_CNT.start)
    }
    /// Timestamp.
    #[inline]
    pub fn timestamp(&self) -> u64 {
        be64(self.b(), field::TIMESTAMP.start)
    }
    /// Error CQE: vendor syndrome.
    #[inline]
    pub fn vendor_err_synd(&self) -> u8 {
        self.b()[field::VENDOR_ERR_SYND]
    }
    /// Error CQE: syndrome.
    #[inline]
    pub fn syndrome(&self) -> u8 {
        self.b()[field::SYNDROME]
    }
    /// The whole `sop_drop_qpn` word.
    #[inline]
    pub fn sop_drop_qpn(&self) -> u32 {
        be32(self.b(), field::SOP_DROP_QPN.start)
    }
    /// Requester / error CQE: opcode of the WQE.
    #[inline]
    pub fn s_wqe_opcode(&self) -> u8 {
        self.b()[field::SOP_DROP_QPN.start]
    }
    /// Requester CQE: QPN (24 bits).
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn() & 0x00ff_ffff
    }
    /// Responder CQE: flow tag (24 bits).
    #[inline]
    pub fn flow_tag(&self) -> u32 {
        self.sop_drop_qpn() & 0x00ff_ffff
    }
    /// WQE counter (striding RQ: stride index).
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        be16(self.b(), field::WQE_COUNTER.start)
    }
    /// Signature / validity iteration count.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.b()[field::SIGNATURE]
    }
    /// The `op_own` byte.
    #[inline]
    pub fn op_own(&self) -> u8 {
        self.b()[field::OP_OWN]
    }
    /// Opcode (`op_own >> 4`, as `mlx5dv_get_cqe_opcode`).
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.op_own() >> 4
    }
    /// Format (`(op_own >> 2) & 3`, as `mlx5dv_get_cqe_format`).
    #[inline]
    pub fn format(&self) -> u8 {
        (self.op_own() >> 2) & 3
    }
    /// Solicited-event bit.
    #[inline]
    pub fn se(&self) -> u8 {
        (self.op_own() >> 1) & 1
    }
    /// Owner bit (`mlx5dv_get_cqe_owner`).
    #[inline]
    pub fn owner(&self) -> u8 {
        self.op_own() & 1
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe<T> {
    #[inline(always)]
    fn bm(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }
    /// Zeroes bytes 0..63 (everything but `op_own`).
    #[inline]
    pub fn clear_body(&mut self) {
        self.bm()[..field::OP_OWN].fill(0);
    }
    /// Sets the packet info byte.
    #[inline]
    pub fn set_pkt_info(&mut self, v: u8) {
        self.bm()[field::PKT_INFO] = v;
    }
    /// Sets the striding RQ WQE index.
    #[inline]
    pub fn set_wqe_id(&mut self, v: u16) {
        put16(self.bm(), field::WQE_ID.start, v);
    }
    /// Sets the RSS hash.
    #[inline]
    pub fn set_rx_hash(&mut self, v: u32) {
        put32(self.bm(), field::RX_HASH.start, v);
    }
    /// Sets the RSS hash type.
    #[inline]
    pub fn set_rx_hash_type(&mut self, v: u8) {
        self.bm()[field::RX_HASH_TYPE] = v;
    }
    /// Sets the raw L4 checksum.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.bm(), field::CHECKSUM.start, v);
    }
    /// Sets the ok bits.
    #[inline]
    pub fn set_hds_ip_ext(&mut self, v: u8) {
        self.bm()[field::HDS_IP_EXT] = v;
    }
    /// Sets the header types byte.
    #[inline]
    pub fn set_l4_hdr_type_etc(&mut self, v: u8) {
        self.bm()[field::L4_HDR_TYPE_ETC] = v;
    }
    /// Sets the stripped VLAN TCI.
    #[inline]
    pub fn set_vlan_info(&mut self, v: u16) {
        put16(self.bm(), field::VLAN_INFO.start, v);
    }
    /// Sets the SRQN / user index word.
    #[inline]
    pub fn set_srqn_uidx(&mut self, v: u32) {
        put32(self.bm(), field::SRQN_UIDX.start, v);
    }
    /// Sets the byte count.
    #[inline]
    pub fn set_byte_cnt(&mut self, v: u32) {
        put32(self.bm(), field::BYTE_CNT.start, v);
    }
    /// Sets the timestamp.
    #[inline]
    pub fn set_timestamp(&mut self, v: u64) {
        put64(self.bm(), field::TIMESTAMP.start, v);
    }
    /// Sets the error syndromes (bytes 54, 55).
    #[inline]
    pub fn set_syndrome(&mut self, vendor: u8, syndrome: u8) {
        self.bm()[field::VENDOR_ERR_SYND] = vendor;
        self.bm()[field::SYNDROME] = syndrome;
    }
    /// Sets the whole `sop_drop_qpn` word.
    #[inline]
    pub fn set_sop_drop_qpn(&mut self, v: u32) {
        put32(self.bm(), field::SOP_DROP_QPN.start, v);
    }
    /// Sets the WQE counter / stride index.
    #[inline]
    pub fn set_wqe_counter(&mut self, v: u16) {
        put16(self.bm(), field::WQE_COUNTER.start, v);
    }
    /// Sets the signature byte.
    #[inline]
    pub fn set_signature(&mut self, v: u8) {
        self.bm()[field::SIGNATURE] = v;
    }
    /// Sets the `op_own` byte (a device writes it last).
    #[inline]
    pub fn set_op_own(&mut self, v: u8) {
        self.bm()[field::OP_OWN] = v;
    }
}
