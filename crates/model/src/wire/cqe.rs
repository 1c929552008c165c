//! The 64-byte completion queue entry the device writes, laid out as Linux
//! include/linux/mlx5/device.h `struct mlx5_cqe64` (the PRM's CQE; DPDK's
//! drivers/common/mlx5/mlx5_prm.h `struct mlx5_cqe` is the same 64 bytes), with its error form
//! `struct mlx5_err_cqe` and the striding-RQ `byte_cnt` encoding. Field offsets carry the
//! kernel's names; each cites where its meaning comes from.
//!
//! Checked three ways: rdma-core's `mlx5dv.h` (the C oracle, `oracle.rs`: every field that
//! header declares), DPDK's mlx5 PMD decoding the model's CQEs (tests/emu/dpdk_decode.rs: the
//! RSS hash, the checksum-ok bits, the L3/L4 header types, the fragment bit and the stripped
//! VLAN, which `mlx5dv.h` leaves out), and the model's own tests.
//!
//! | byte | kernel field | meaning |
//! |---|---|---|
//! | 2..4 | `wqe_id` | striding RQ: the WQE of the frame |
//! | 12..16 | `rss_hash_result` | Toeplitz hash of the TIR |
//! | 16 | `rss_hash_type` | bits 3:2 `CQE_RSS_HTYPE_IP` (1 IPv4, 2 IPv6), bits 7:6 `CQE_RSS_HTYPE_L4` (1 TCP, 2 UDP) |
//! | 20..22 | `check_sum` | raw L4 checksum |
//! | 28 | `hds_ip_ext` | bit 0 L2 ok, bit 1 L3 ok, bit 2 L4 ok |
//! | 29 | `l4_l3_hdr_type` | bit 0 VLAN stripped, bits 3:2 L3 type, bits 6:4 L4 type, bit 7 IP fragment |
//! | 30..32 | `vlan_info` | the stripped TCI |
//! | 32..36 | `srqn` (mlx5dv.h `srqn_uidx`) | user index of the queue (24 bits) |
//! | 44..48 | `byte_cnt` | length; a compressed title: its mini-CQE count |
//! | 48..56 | `timestamp_h`, `timestamp_l` | completion timestamp |
//! | 54, 55 | (`mlx5_err_cqe`) `vendor_err_synd`, `syndrome` | error syndromes |
//! | 56..60 | `sop_drop_qpn` | requester: WQE opcode (31:24) + QPN; responder: flow tag (23:0) |
//! | 60..62 | `wqe_counter` | WQE counter (striding RQ: first stride) |
//! | 62 | `signature` | |
//! | 63 | `op_own` | opcode (7:4), format (3:2), SE (1), owner (0) |

use super::{be16, be32, put16, put32, put64};

/// Field offsets, named as in Linux include/linux/mlx5/device.h `struct mlx5_cqe64`.
pub mod field {
    use std::ops::Range;
    /// `wqe_id`: striding RQ WQE index (DPDK mlx5_rx.c `mlx5_rx_burst_mprq` checks it against
    /// its consumer index).
    pub const WQE_ID: Range<usize> = 2..4;
    /// `rss_hash_result` (the kernel's `mlx5e_skb_set_hash`, DPDK's `rx_hash_res`).
    pub const RSS_HASH_RESULT: Range<usize> = 12..16;
    /// `rss_hash_type` (device.h `CQE_RSS_HTYPE_IP` / `CQE_RSS_HTYPE_L4`).
    pub const RSS_HASH_TYPE: usize = 16;
    /// `check_sum`: the raw L4 checksum (DPDK's `csum`).
    pub const CHECK_SUM: Range<usize> = 20..22;
    /// `hds_ip_ext`: the ok bits (mlx5dv.h `MLX5_CQE_L2_OK` ...).
    pub const HDS_IP_EXT: usize = 28;
    /// `l4_l3_hdr_type` (mlx5dv.h `l4_hdr_type_etc`; DPDK reads bytes 28..30 as
    /// `hdr_type_etc`).
    pub const L4_L3_HDR_TYPE: usize = 29;
    /// `vlan_info`: the stripped TCI.
    pub const VLAN_INFO: Range<usize> = 30..32;
    /// `srqn` (mlx5dv.h `srqn_uidx`: libmlx5 reads the user index there).
    pub const SRQN_UIDX: Range<usize> = 32..36;
    /// `byte_cnt`.
    pub const BYTE_CNT: Range<usize> = 44..48;
    /// `timestamp_h`, `timestamp_l` (mlx5dv.h: one `__be64 timestamp`).
    pub const TIMESTAMP: Range<usize> = 48..56;
    /// `struct mlx5_err_cqe` `vendor_err_synd`.
    pub const VENDOR_ERR_SYND: usize = 54;
    /// `struct mlx5_err_cqe` `syndrome`.
    pub const SYNDROME: usize = 55;
    /// `sop_drop_qpn`.
    pub const SOP_DROP_QPN: Range<usize> = 56..60;
    /// `wqe_counter`.
    pub const WQE_COUNTER: Range<usize> = 60..62;
    /// `op_own`.
    pub const OP_OWN: usize = 63;
}

/// CQE opcode (device.h `MLX5_CQE_REQ`): requester (send) completion.
pub const OP_REQ: u8 = 0;
/// CQE opcode (`MLX5_CQE_RESP_SEND`): responder send (an Ethernet RX packet).
pub const OP_RESP_SEND: u8 = 2;
/// CQE opcode (`MLX5_CQE_REQ_ERR`): requester error.
pub const OP_REQ_ERR: u8 = 13;
/// CQE opcode (`MLX5_CQE_RESP_ERR`): responder error.
pub const OP_RESP_ERR: u8 = 14;
/// `op_own` of a freshly initialized (or scrubbed) CQE: opcode `MLX5_CQE_INVALID` (0xf).
pub const OP_OWN_INVALID: u8 = 0xf0;

/// CQE format (`op_own` bits 3:2; device.h `MLX5_COMPRESSED`): compressed session title.
pub const FORMAT_COMPRESSED: u8 = 3;

/// Syndrome: local length error.
pub const SYND_LOCAL_LENGTH_ERR: u8 = 0x01;
/// Syndrome: local QP operation error.
pub const SYND_LOCAL_QP_OP_ERR: u8 = 0x02;
/// Syndrome: local protection error.
pub const SYND_LOCAL_PROT_ERR: u8 = 0x04;
/// Syndrome: work request flushed.
pub const SYND_WR_FLUSH_ERR: u8 = 0x05;

/// `hds_ip_ext` bit: L2 ok (mlx5dv.h `MLX5_CQE_L2_OK`).
pub const L2_OK: u8 = 1 << 0;
/// `hds_ip_ext` bit: L3 ok (`MLX5_CQE_L3_OK`; DPDK `MLX5_CQE_RX_L3_HDR_VALID` gives
/// `RTE_MBUF_F_RX_IP_CKSUM_GOOD`): a good IPv4 header checksum (the model sets it for an IPv6
/// header too, which has none).
pub const L3_OK: u8 = 1 << 1;
/// `hds_ip_ext` bit: L4 checksum ok (`MLX5_CQE_L4_OK`; DPDK's `RTE_MBUF_F_RX_L4_CKSUM_GOOD`).
pub const L4_OK: u8 = 1 << 2;

/// `l4_l3_hdr_type` bit 0: a VLAN tag was stripped, its TCI in `vlan_info` (device.h
/// `cqe_has_vlan`; DPDK mlx5_prm.h `MLX5_CQE_VLAN_STRIPPED`).
pub const CV: u8 = 1 << 0;
/// `l4_l3_hdr_type` bits 3:2 (device.h `get_cqe_l3_hdr_type`): IPv6
/// (mlx5dv.h `MLX5_CQE_L3_HDR_TYPE_IPV6`).
pub const L3_IPV6: u8 = 1;
/// L3 type: IPv4 (`MLX5_CQE_L3_HDR_TYPE_IPV4`).
pub const L3_IPV4: u8 = 2;
/// `l4_l3_hdr_type` bits 6:4 (device.h `get_cqe_l4_hdr_type`, `CQE_L4_HDR_TYPE_*`): TCP
/// without ACK.
pub const L4_TCP: u8 = 1;
/// L4 type: UDP.
pub const L4_UDP: u8 = 2;
/// L4 type: TCP, ACK, no data.
pub const L4_TCP_ACK_NO_DATA: u8 = 3;
/// L4 type: TCP, ACK and data.
pub const L4_TCP_ACK_DATA: u8 = 4;
/// `l4_l3_hdr_type` bit 7: an IP fragment (DPDK mlx5_rx.c `rxq_cq_to_pkt_type`: bit 5 of its
/// ptype index, `RTE_PTYPE_L4_FRAG`).
pub const IP_FRAG: u8 = 1 << 7;

/// `rss_hash_type` bits 3:2 (device.h `CQE_RSS_HTYPE_IP`): the hash took IPv4 addresses
/// (`CQE_RSS_IPV4`).
pub const RSS_HTYPE_IPV4: u8 = 1 << 2;
/// ... IPv6 addresses (`CQE_RSS_IPV6`).
pub const RSS_HTYPE_IPV6: u8 = 2 << 2;
/// `rss_hash_type` bits 7:6 (`CQE_RSS_HTYPE_L4`): the hash took TCP ports (`CQE_RSS_L4_TCP`).
pub const RSS_HTYPE_TCP: u8 = 1 << 6;
/// ... UDP ports (`CQE_RSS_L4_UDP`).
pub const RSS_HTYPE_UDP: u8 = 2 << 6;

/// Striding RQ `byte_cnt`: filler bit (DPDK mlx5_prm.h `MLX5_MPRQ_FILLER_MASK`).
pub const MPRQ_FILLER: u32 = 1 << 31;
/// Striding RQ `byte_cnt`: consumed strides, bits 29:16 (`MLX5_MPRQ_STRIDE_NUM_MASK`).
pub const MPRQ_STRIDES_MASK: u32 = 0x3fff_0000;
/// Striding RQ `byte_cnt`: packet length, bits 15:0 (`MLX5_MPRQ_LEN_MASK`).
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
    #[inline(always)]
    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    /// `rss_hash_result`.
    #[inline]
    pub fn rss_hash_result(&self) -> u32 {
        be32(self.b(), field::RSS_HASH_RESULT.start)
    }
    /// `check_sum`.
    #[inline]
    pub fn check_sum(&self) -> u16 {
        be16(self.b(), field::CHECK_SUM.start)
    }
    /// Byte count (or mini-CQE count of a compressed title).
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        be32(self.b(), field::BYTE_CNT.start)
    }
    /// WQE counter (striding RQ: stride index).
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        be16(self.b(), field::WQE_COUNTER.start)
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
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe<T> {
    #[inline(always)]
    fn bm(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }
    /// Sets the striding RQ WQE index.
    #[inline]
    pub fn set_wqe_id(&mut self, v: u16) {
        put16(self.bm(), field::WQE_ID.start, v);
    }
    /// Sets `rss_hash_result`.
    #[inline]
    pub fn set_rss_hash_result(&mut self, v: u32) {
        put32(self.bm(), field::RSS_HASH_RESULT.start, v);
    }
    /// Sets `rss_hash_type` (`RSS_HTYPE_*`).
    #[inline]
    pub fn set_rss_hash_type(&mut self, v: u8) {
        self.bm()[field::RSS_HASH_TYPE] = v;
    }
    /// Sets the ok bits.
    #[inline]
    pub fn set_hds_ip_ext(&mut self, v: u8) {
        self.bm()[field::HDS_IP_EXT] = v;
    }
    /// Sets `l4_l3_hdr_type`.
    #[inline]
    pub fn set_l4_l3_hdr_type(&mut self, v: u8) {
        self.bm()[field::L4_L3_HDR_TYPE] = v;
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
    /// Sets the `op_own` byte (a device writes it last).
    #[inline]
    pub fn set_op_own(&mut self, v: u8) {
        self.bm()[field::OP_OWN] = v;
    }
}
