//! The software device's options ([`ModelOptions`]: its queues, receive side, wire, netdev,
//! clock), which [`Backend::Model`](crate::Backend) carries; their one conversion into the
//! device crate's own types (`rawq-model`, which imports nothing from rawq) is the model
//! backend's (`dv::model`).
//!
//! A port's mlx5 receive options ([`PortConfig::dv_rx`](crate::config::PortConfig::dv_rx), the
//! vocabulary of [`crate::dv::options`]) reach the model as they reach the DV backend:
//! [`ModelOptions::apply_rx`].

use super::dv::{DvRxOptions, MiniCqeFormat, Striding};
use crate::flow::rss::RssConfig;
use crate::flow::Rule;

/// Receive queue type of a modelled port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxKind {
    /// Cyclic RQ with `sges` scatter entries (pool buffers) per WQE.
    Cyclic {
        /// Scatter entries per WQE (a frame may span this many buffers).
        sges: u32,
    },
    /// Striding RQ.
    Striding(Striding),
}

/// What a modelled port's wire is connected to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelWire {
    /// Frames sent come back to the same port.
    Loopback,
    /// Frames sent are counted and discarded; nothing is received.
    Sink,
    /// An `AF_PACKET` socket bound to a Linux interface (opened in the calling thread's network
    /// namespace): frames sent go out of that interface, frames it receives come in.
    Bridge {
        /// Interface name.
        ifname: String,
    },
}

/// Configuration of a modelled port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelOptions {
    /// Queue pairs.
    pub queues: u16,
    /// SQ size in 64-byte WQEBBs (power of two).
    pub sq_wqebbs: u32,
    /// RQ size in WQEs (power of two).
    pub rq_wqes: u32,
    /// Cyclic or striding RQ.
    pub rx: RxKind,
    /// Minimum inline header the device demands: 0 or 18.
    pub min_inline: u16,
    /// Enhanced multi-packet send WQEs allowed.
    pub empw: bool,
    /// CQE compression on the receive CQs.
    pub cqe_compression: Option<MiniCqeFormat>,
    /// TX checksum offload available.
    pub tx_csum: bool,
    /// Strip one 802.1Q tag on receive (TCI reported in the CQE).
    pub vlan_strip: bool,
    /// Pause the sender rather than drop when a receiver has no free RQ entry (lossless tests).
    /// With `false`, an empty RQ drops the frame and counts `rx_no_buffer`.
    pub flow_control: bool,
    /// Largest frame accepted on send and receive (bytes, no FCS).
    pub max_frame: u32,
    /// Smallest frame accepted on receive; shorter ones are runts.
    pub min_frame: u32,
    /// Frames the wire holds in front of a port.
    pub wire_capacity: u32,
    /// The wire.
    pub wire: ModelWire,
    /// Flow rules (empty: every frame is taken, spread by RSS).
    pub rules: Vec<Rule>,
    /// The port's kernel netdev (a TAP): frames no rule takes are written to it, and what the
    /// kernel sends on it goes out on the wire. `None`: such frames are counted and dropped.
    pub netdev: Option<NetdevPath>,
    /// The CPU the model's thread is pinned to when it runs in one (keep it off the queues'
    /// cores); `None`: not pinned.
    pub model_cpu: Option<usize>,
    /// Entries of each receive CQ; 0: as libmlx5 sizes it for the RQ (one more than the
    /// RQ's completions, rounded up to a power of two: at least twice a cyclic RQ). A power of
    /// two from 2 up to 2^22 otherwise (a CQ exactly as large as the RQ tests a driver's
    /// ordering of its two doorbell records).
    pub rxcq_entries: u32,
    /// The device clock in kHz that stamps each completion (mlx5dv.h `struct mlx5_cqe64`
    /// `timestamp`; read by [`RxMeta::hw_timestamp`](crate::RxMeta::hw_timestamp)); 0: no
    /// timestamps (the CQE field stays 0).
    pub clock_khz: u64,
    /// Key and fields of every TIR the port creates for its rules (one TIR may hash both IP
    /// versions and TCP and UDP here, as a driver's per-traffic-type TIRs with one key would).
    pub rss: RssConfig,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            queues: 1,
            sq_wqebbs: 1024,
            rq_wqes: 512,
            rx: RxKind::Cyclic { sges: 1 },
            min_inline: 0,
            empw: false,
            cqe_compression: None,
            tx_csum: true,
            vlan_strip: false,
            flow_control: true,
            max_frame: 1518,
            min_frame: 14,
            wire_capacity: 1024,
            wire: ModelWire::Loopback,
            rules: Vec::new(),
            netdev: None,
            model_cpu: None,
            rxcq_entries: 0,
            clock_khz: 0,
            rss: RssConfig::default(),
        }
    }
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

impl ModelOptions {
    /// These options with a port's mlx5 receive options applied, as the DV backend applies
    /// them (`dv::control::ControlPort::from_config`): a striding RQ of pool buffers of
    /// `buf_size` bytes when one is asked for, and the CQE compression when one is chosen
    /// (`None`, the device's choice, keeps [`ModelOptions::cqe_compression`]).
    pub fn apply_rx(&mut self, rx: &DvRxOptions, buf_size: u32) {
        if let Some(s) = rx.striding(buf_size) {
            self.rx = RxKind::Striding(s);
        }
        if let Some(c) = rx.cqe_comp {
            self.cqe_compression = c.format();
        }
    }
}
