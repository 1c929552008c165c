//! The ring memory of one DV queue, as `mlx5dv_init_obj` hands it out (or as the device model
//! lays it out). This is the contract between the control path, which creates the objects, and
//! the data path, which drives the rings.

use std::ptr::NonNull;

// The mlx5 receive vocabulary (`crate::dv::options`), as the rings carry it.
pub use crate::dv::options::{MiniCqeFormat, Striding};

/// A send queue ring (`struct mlx5dv_qp`'s `sq` part, plus doorbell pointers).
#[derive(Debug, Clone, Copy)]
pub struct SqRing {
    /// First WQEBB (64 bytes each).
    pub buf: NonNull<u8>,
    /// Number of 64-byte WQEBBs, a power of two.
    pub wqe_cnt: u32,
    /// The SQ doorbell record word (`dbrec[MLX5_SND_DBR]`), big-endian.
    pub dbrec: NonNull<u32>,
    /// The BlueFlame / doorbell register in the UAR page (8-byte writes).
    pub bf_reg: NonNull<u8>,
    /// BlueFlame buffer size in bytes; 0 means doorbell only.
    pub bf_size: u32,
    /// SQ number (the QP number for a RAW_PACKET QP), put in every control segment.
    pub sqn: u32,
}

/// A completion queue ring (`struct mlx5dv_cq`).
#[derive(Debug, Clone, Copy)]
pub struct CqRing {
    /// First CQE.
    pub buf: NonNull<u8>,
    /// Number of CQEs, a power of two.
    pub cqe_cnt: u32,
    /// 64 or 128; for 128 the 64-byte CQE is the second half of each slot.
    pub cqe_size: u32,
    /// The CQ doorbell record (`dbrec[MLX5_CQ_SET_CI]`), big-endian, 24-bit consumer index.
    pub dbrec: NonNull<u32>,
    /// CQ number.
    pub cqn: u32,
}

/// A receive queue ring (`struct mlx5dv_rwq`, or the `rq` part of `struct mlx5dv_qp`).
#[derive(Debug, Clone, Copy)]
pub struct RqRing {
    /// First receive WQE.
    pub buf: NonNull<u8>,
    /// Number of WQEs, a power of two.
    pub wqe_cnt: u32,
    /// Bytes per WQE (a power of two, at least 16).
    pub stride: u32,
    /// The RQ doorbell record word (`dbrec[MLX5_RCV_DBR]`), big-endian, 16-bit WQE counter.
    pub dbrec: NonNull<u32>,
    /// `Some` for a striding RQ.
    pub striding: Option<Striding>,
}

/// What the device allows, from `mlx5dv_query_device` (or the model's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DvCaps {
    /// Bytes of the frame the eth segment must inline: 18 or 0.
    pub min_inline: u16,
    /// Enhanced multi-packet send WQEs (opcode 0x29) are allowed.
    pub empw: bool,
    /// CQE compression in use on the RX CQ, with this mini-CQE format.
    pub cqe_compression: Option<MiniCqeFormat>,
    /// TX checksum offload is available.
    pub tx_csum: bool,
    /// Largest TSO payload the device segments (0: no TSO; `ibv_query_device_ex`
    /// `tso_caps.max_tso` when `supported_qpts` has RAW_PACKET).
    pub max_tso: u32,
}

/// Everything the data path needs to drive one queue pair.
#[derive(Debug, Clone, Copy)]
pub struct QueueRings {
    /// Send queue.
    pub sq: SqRing,
    /// Send completion queue.
    pub tx_cq: CqRing,
    /// Receive queue.
    pub rq: RqRing,
    /// Receive completion queue.
    pub rx_cq: CqRing,
    /// lkey of the memory region covering the packet pool.
    pub lkey: u32,
    /// Device capabilities in force for this queue.
    pub caps: DvCaps,
}

// SAFETY: the pointers name device-shared ring memory owned by the verbs objects (or the model)
// that the queue keeps alive; the data path is the only CPU-side user of a queue's rings, and a
// queue is driven from one thread at a time (`&mut`).
unsafe impl Send for QueueRings {}
