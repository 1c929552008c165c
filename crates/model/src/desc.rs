//! What the driver and the device exchange when objects are made: the descriptors of the
//! rings and objects ([`CqDesc`], [`SqDesc`], [`RqDesc`], [`TirDesc`], [`FlowDesc`]), the
//! device's options, queue states and asynchronous events. Below both the engine and
//! [`crate::hw`] (which re-exports them as the public `hw::*` names), so that neither has to
//! import the other for its vocabulary.

use crate::config::{MiniCqeFormat, ModelWire, NetdevPath, Striding};

/// Device-wide options (one emulated port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HwOptions {
    /// Minimum inline header the device demands on send: 0 (ConnectX-5 and later,
    /// `MLX5_USER_INLINE_MODE_NONE`) or 18 (the L2 header: ConnectX-4 Lx, `..._L2`).
    pub min_inline: u16,
    /// Largest frame accepted on send and receive (bytes, no FCS).
    pub max_frame: u32,
    /// Pause senders rather than drop when the peer has no room (lossless tests).
    pub flow_control: bool,
    /// Frames the wire holds in front of the port.
    pub wire_capacity: u32,
    /// The port's wire.
    pub wire: ModelWire,
    /// The kernel netdev of the port: frames no flow takes go there (and what the kernel sends
    /// on it goes out on the wire), as on a bifurcated mlx5 port. `None`: such frames are
    /// counted (`rx_to_kernel`) and dropped.
    pub netdev: Option<NetdevPath>,
    /// Free-running device clock in kHz (CQE timestamps, the clock page). 0: no timestamps.
    pub clock_khz: u64,
}

/// A completion queue over memory the caller owns.
#[derive(Clone, Copy, Debug)]
pub struct CqDesc {
    /// First CQE slot.
    pub buf: usize,
    /// Number of CQE slots (power of two).
    pub cqe_cnt: u32,
    /// 64 or 128 bytes per slot.
    pub cqe_size: u32,
    /// The CQ doorbell record: word 0 = consumer index (`MLX5_CQ_SET_CI`), word 1 = arm
    /// (`MLX5_CQ_ARM_DB`), big-endian.
    pub dbrec: usize,
    /// CQE compression with this mini-CQE format.
    pub compression: Option<MiniCqeFormat>,
}

/// A send queue over memory the caller owns.
#[derive(Clone, Copy, Debug)]
pub struct SqDesc {
    /// First 64-byte WQEBB.
    pub buf: usize,
    /// Number of WQEBBs (power of two).
    pub wqe_cnt: u32,
    /// The SQ doorbell record word (`dbrec[MLX5_SND_DBR]`), big-endian.
    pub dbrec: usize,
    /// The SQ's doorbell (BlueFlame) register, `mlx5dv_qp.bf.reg`: two halves of
    /// [`mem::BF_SIZE`](crate::mem::BF_SIZE) bytes, the driver writing each doorbell (the first
    /// 8 bytes of its last WQE) to one of them. A write naming the SQ is what starts it
    /// sending, up to the doorbell record then read. Required (8-byte aligned).
    pub uar: usize,
    /// Completion queue for this SQ's CQEs.
    pub cqn: u32,
    /// User index written into this SQ's CQEs (`cqe_version = 1`).
    pub user_index: u32,
}

/// A receive queue over memory the caller owns.
#[derive(Clone, Copy, Debug)]
pub struct RqDesc {
    /// First receive WQE.
    pub buf: usize,
    /// Number of WQEs (power of two).
    pub wqe_cnt: u32,
    /// Bytes per WQE (power of two, ≥ 16).
    pub stride: u32,
    /// The RQ doorbell record word (`dbrec[MLX5_RCV_DBR]`), big-endian.
    pub dbrec: usize,
    /// Completion queue for this RQ's CQEs.
    pub cqn: u32,
    /// `Some` for a striding (multi-packet) RQ.
    pub striding: Option<Striding>,
    /// User index written into this RQ's CQEs (`cqe_version = 1`).
    pub user_index: u32,
}

/// RSS hashing of a TIR (`mlx5_ib_create_qp_rss` / `ibv_rx_hash_conf`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RssHash {
    /// Toeplitz key (40 bytes on mlx5).
    pub key: Vec<u8>,
    /// `IBV_RX_HASH_*` bits: which fields enter the hash.
    pub fields: u64,
}

/// A TIR: where steered frames go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TirDesc {
    /// The indirection table (RQ numbers); one entry for a plain QP's RQ.
    pub rqns: Vec<u32>,
    /// Hashing over the table; `None` with one entry.
    pub hash: Option<RssHash>,
}

/// One field of a flow match: `value` compared under `mask`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Masked<T> {
    /// Value to match (already masked by the caller or not: the device masks it).
    pub value: T,
    /// Mask; all-zero matches anything.
    pub mask: T,
}

/// One `ib_uverbs_flow_spec_*` (values host order, addresses as bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowSpec {
    /// `IB_FLOW_SPEC_ETH`.
    Eth {
        /// Destination MAC.
        dst: Masked<[u8; 6]>,
        /// Source MAC.
        src: Masked<[u8; 6]>,
        /// Ethertype (of the payload after any VLAN tag).
        ether_type: Masked<u16>,
        /// VLAN TCI.
        vlan_tag: Masked<u16>,
    },
    /// `IB_FLOW_SPEC_IPV4`.
    Ipv4 {
        /// Source address.
        src: Masked<[u8; 4]>,
        /// Destination address.
        dst: Masked<[u8; 4]>,
        /// IP protocol.
        proto: Masked<u8>,
        /// TOS byte.
        tos: Masked<u8>,
    },
    /// `IB_FLOW_SPEC_IPV6`.
    Ipv6 {
        /// Source address.
        src: Masked<[u8; 16]>,
        /// Destination address.
        dst: Masked<[u8; 16]>,
        /// Next header.
        next_hdr: Masked<u8>,
        /// Flow label (20 bits; Linux fs.c `set_flow_label`).
        flow_label: Masked<u32>,
        /// Traffic class (DSCP and ECN; fs.c `set_tos`).
        traffic_class: Masked<u8>,
    },
    /// `IB_FLOW_SPEC_TCP`.
    Tcp {
        /// Source port.
        src: Masked<u16>,
        /// Destination port.
        dst: Masked<u16>,
    },
    /// `IB_FLOW_SPEC_UDP`.
    Udp {
        /// Source port.
        src: Masked<u16>,
        /// Destination port.
        dst: Masked<u16>,
    },
    /// `IB_FLOW_SPEC_ACTION_TAG`: the flow tag reported in the CQE.
    Tag(u32),
    /// `IB_FLOW_SPEC_ACTION_DROP`.
    Drop,
}

/// A flow rule (`ibv_flow_attr` + specs) attached to a TIR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowDesc {
    /// Where matching frames go.
    pub tirn: u32,
    /// Lower first (`ibv_flow_attr.priority`).
    pub priority: u16,
    /// `IBV_FLOW_ATTR_FLAGS_DONT_TRAP`: the frame also goes to the kernel.
    pub dont_trap: bool,
    /// Match and action specs.
    pub specs: Vec<FlowSpec>,
}

/// State of an SQ or RQ (`ibv_modify_qp` / `ibv_modify_wq` as the device sees them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueState {
    /// Reset: counters back to 0, nothing processed.
    Reset,
    /// Ready: processing.
    Ready,
    /// Error: everything flushed.
    Error,
}

/// What the device reports asynchronously (the emulator turns these into completion-channel
/// and async events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwEvent {
    /// A CQE was written to an armed CQ (`mlx5_arm_cq` armed it); the arm is consumed.
    Completion {
        /// The CQ.
        cqn: u32,
    },
    /// A CQ overran (`IBV_EVENT_CQ_ERR`).
    CqError {
        /// The CQ.
        cqn: u32,
    },
}
