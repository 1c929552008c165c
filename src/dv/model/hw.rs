//! The model as hardware: device objects (CQ, SQ, RQ, TIR, flow, MR) created one by one over
//! rings that live anywhere: the model's own memory (what [`super::ModelPort`] does) or an
//! application's buffers handed over by the emulated kernel (the `rawq-emu` crate, which decodes
//! the uverbs commands libibverbs/libmlx5 write and calls these methods).
//!
//! This is the contract between the emulated kernel and the device engine. Names follow the
//! mlx5 PRM / rdma-core: a RAW_PACKET QP is an SQ (plus optionally an RQ and a TIR pointing at
//! it); an ibv_wq is an RQ; an RSS QP is a TIR over an indirection table of RQs; a flow steers
//! matching frames to a TIR (or drops them).
//!
//! Objects are addressed by the numbers the create calls return (cqn, sqn, rqn, tirn, flow id,
//! lkey). Every method validates its arguments and answers [`Error::Config`] /
//! [`Error::Unsupported`] rather than panic; the emulator maps those to the kernel's errno.
//!
//! STATUS: interface skeleton; the engine behind it is being built (see the DV issues).

use std::sync::Arc;

use crate::dv::rings::{MiniCqeFormat, Striding};
use crate::error::{Error, Result};

use super::{ModelCounters, ModelWire};

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

/// Where a port's kernel netdev is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetdevPath {
    /// A TAP interface (created beforehand, e.g. `ip tuntap add NAME mode tap`), attached with
    /// `TUNSETIFF` (`IFF_TAP | IFF_NO_PI`).
    Tap {
        /// Interface name.
        ifname: String,
    },
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
    /// The UAR page the doorbell / BlueFlame writes land in (0: none).
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

/// The device: a cheap handle (`Clone + Send + Sync`).
#[derive(Clone)]
pub struct Hw {
    _inner: Arc<()>,
}

impl std::fmt::Debug for Hw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hw").finish_non_exhaustive()
    }
}

fn todo<T>(what: &str) -> Result<T> {
    Err(Error::Unsupported(format!("model hw: {what} is not built yet")))
}

impl Hw {
    /// A device with its wire.
    ///
    /// # Errors
    /// [`Error::Config`] for bad options; [`Error::Os`] if the wire or netdev cannot be opened.
    pub fn new(_opts: HwOptions) -> Result<Hw> {
        todo("Hw::new")
    }

    /// Cables two devices to each other (replacing both wires).
    pub fn connect(_a: &Hw, _b: &Hw) {}

    /// Registers `len` bytes at `addr`; returns the lkey the device will check.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty or wrapping range.
    pub fn reg_mr(&self, _addr: u64, _len: u64) -> Result<u32> {
        todo("reg_mr")
    }

    /// Removes a registration.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown lkey.
    pub fn dereg_mr(&self, _lkey: u32) -> Result<()> {
        todo("dereg_mr")
    }

    /// Creates a CQ over the caller's memory; returns the cqn.
    ///
    /// # Safety
    /// `d.buf` (`cqe_cnt * cqe_size` bytes) and `d.dbrec` (8 bytes) stay valid, and are only
    /// accessed as the driver side of the mlx5 protocol, until [`Hw::destroy_cq`] returns.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad geometry or null pointers.
    pub unsafe fn create_cq(&self, _d: CqDesc) -> Result<u32> {
        todo("create_cq")
    }

    /// Creates an SQ (in [`QueueState::Reset`]); returns the sqn.
    ///
    /// # Safety
    /// As [`Hw::create_cq`], for the SQ ring, its doorbell word and the UAR page, until
    /// [`Hw::destroy_sq`] returns.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad geometry or an unknown CQ.
    pub unsafe fn create_sq(&self, _d: SqDesc) -> Result<u32> {
        todo("create_sq")
    }

    /// Creates an RQ (in [`QueueState::Reset`]); returns the rqn.
    ///
    /// # Safety
    /// As [`Hw::create_cq`], for the RQ ring and its doorbell word, until [`Hw::destroy_rq`].
    ///
    /// # Errors
    /// [`Error::Config`] for a bad geometry or an unknown CQ.
    pub unsafe fn create_rq(&self, _d: RqDesc) -> Result<u32> {
        todo("create_rq")
    }

    /// Creates a TIR over existing RQs; returns the tirn.
    ///
    /// # Errors
    /// [`Error::Config`] for unknown RQs, an empty table or a bad key.
    pub fn create_tir(&self, _d: TirDesc) -> Result<u32> {
        todo("create_tir")
    }

    /// Attaches a flow rule; returns its id.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown TIR or contradictory specs.
    pub fn create_flow(&self, _d: FlowDesc) -> Result<u32> {
        todo("create_flow")
    }

    /// Moves an SQ to `state`.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown SQ.
    pub fn set_sq_state(&self, _sqn: u32, _state: QueueState) -> Result<()> {
        todo("set_sq_state")
    }

    /// Moves an RQ to `state`.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown RQ.
    pub fn set_rq_state(&self, _rqn: u32, _state: QueueState) -> Result<()> {
        todo("set_rq_state")
    }

    /// Destroys a CQ (refused while an SQ or RQ uses it).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown or busy CQ.
    pub fn destroy_cq(&self, _cqn: u32) -> Result<()> {
        todo("destroy_cq")
    }

    /// Destroys an SQ.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown SQ.
    pub fn destroy_sq(&self, _sqn: u32) -> Result<()> {
        todo("destroy_sq")
    }

    /// Destroys an RQ (refused while a TIR uses it).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown or busy RQ.
    pub fn destroy_rq(&self, _rqn: u32) -> Result<()> {
        todo("destroy_rq")
    }

    /// Destroys a TIR (refused while a flow uses it).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown or busy TIR.
    pub fn destroy_tir(&self, _tirn: u32) -> Result<()> {
        todo("destroy_tir")
    }

    /// Detaches a flow rule.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown flow.
    pub fn destroy_flow(&self, _id: u32) -> Result<()> {
        todo("destroy_flow")
    }

    /// Registers the receiver of [`HwEvent`]s (called from the device's thread).
    pub fn set_event_sink(&self, _sink: Box<dyn FnMut(HwEvent) + Send>) {}

    /// The device clock now, in ticks of `clock_khz`.
    pub fn clock_ticks(&self) -> u64 {
        0
    }

    /// One round of device work in the calling thread; returns the work items handled.
    pub fn process(&self) -> usize {
        0
    }

    /// Runs the device in a thread of its own (pinned to `cpu` if given) until the handle is
    /// dropped.
    pub fn spawn(&self, _cpu: Option<usize>) -> Option<super::ModelThread> {
        None
    }

    /// The device's counters.
    pub fn counters(&self) -> ModelCounters {
        ModelCounters::default()
    }

    /// Makes the `nth` send WQE from now on `sqn` fail with `syndrome`.
    pub fn inject_tx_error(&self, _sqn: u32, _nth: u64, _syndrome: u8) {}

    /// Puts `frame` on the wire in front of the port, as if received.
    pub fn inject_frame(&self, _frame: &[u8]) {}
}
