//! What a port is opened with and what it reports: the backend and its device
//! ([`Backend`]), the port's configuration ([`PortConfig`]) and its description ([`PortInfo`]).
//!
//! These sit below the backends: a backend's `open` takes a [`PortConfig`] and returns a
//! [`PortInfo`], and [`crate::port`] (which drives the backends) re-exports them, so that no
//! backend imports the module that imports it. A backend's own options live with the backend
//! (the mlx5 receive options in [`crate::dv::options`], the software device's in
//! `crate::dv::model`): [`Backend`] and [`PortConfig`] only carry them.

use crate::error::{Error, Result};
pub use crate::flow::rss::{IpVersions, RssConfig, RssFields};
use crate::flow::Rule;
use crate::options::dv::DvRxOptions;

/// Which backend drives a port.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// Software loopback: what queue *i* sends, queue *i* receives. Needs nothing.
    Loopback,
    /// AF_XDP sockets on a Linux network interface (any netdev, veth included).
    ///
    /// Flow rules: a frame goes to the first rule it reaches ([`crate::flow::classify`]). A
    /// multicast rule that does not drop, which on verbs and DV leaves the kernel (and later
    /// rules) a copy, here *takes* the frame: AF_XDP cannot give one frame to a socket and to
    /// the kernel ([`crate::flow::order`]).
    Xdp {
        /// Interface name.
        ifname: String,
    },
    /// ibverbs RAW_PACKET queues (`ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq`).
    Verbs {
        /// RDMA device name, e.g. `mlx5_0`.
        device: String,
        /// Port number on the device (usually 1).
        port: u8,
    },
    /// mlx5 Direct Verbs: rawq writes WQEs and polls CQEs itself.
    Dv {
        /// RDMA device name, e.g. `mlx5_0`.
        device: String,
        /// Port number on the device (usually 1).
        port: u8,
    },
    /// The software mlx5 device ([`crate::dv::model`], crate `rawq-model`) driven by the DV data path, running in a
    /// thread of its own; needs nothing.
    #[cfg(feature = "mlx5")]
    Model(crate::options::model::ModelOptions),
}

impl Backend {
    /// The backend called `kind` (`xdp`, `verbs`, `dv`, `model`, `loopback`) on `device` (an
    /// interface for xdp, an RDMA device for verbs and dv, ignored otherwise) and RDMA `port`.
    /// For command lines.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown name or a missing device; [`Error::BackendUnavailable`]
    /// for a backend this build lacks.
    pub fn named(kind: &str, device: &str, port: u8) -> Result<Backend> {
        let dev = || {
            if device.is_empty() {
                Err(Error::Config(format!("the {kind} backend needs a device")))
            } else {
                Ok(device.to_string())
            }
        };
        Ok(match kind {
            "xdp" => Backend::Xdp { ifname: dev()? },
            "verbs" => Backend::Verbs {
                device: dev()?,
                port,
            },
            "dv" => Backend::Dv {
                device: dev()?,
                port,
            },
            "loopback" => Backend::Loopback,
            #[cfg(feature = "mlx5")]
            "model" => Backend::Model(Default::default()),
            #[cfg(not(feature = "mlx5"))]
            "model" => {
                return Err(Error::BackendUnavailable {
                    backend: "model",
                    feature: "mlx5",
                })
            }
            other => {
                return Err(Error::Config(format!(
                    "unknown backend {other:?}: use xdp, verbs, dv, model or loopback"
                )))
            }
        })
    }

    /// The error for opening this backend in a build without its cargo feature.
    pub(crate) fn unavailable(&self) -> Error {
        let feature = match self {
            Backend::Xdp { .. } => "xdp",
            Backend::Verbs { .. } => "verbs",
            _ => "mlx5",
        };
        Error::BackendUnavailable {
            backend: self.name(),
            feature,
        }
    }

    /// Short name: `loopback`, `xdp`, `verbs`, `dv`, `model`.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Loopback => "loopback",
            Backend::Xdp { .. } => "xdp",
            Backend::Verbs { .. } => "verbs",
            Backend::Dv { .. } => "dv",
            #[cfg(feature = "mlx5")]
            Backend::Model(_) => "model",
        }
    }
}

/// Everything a backend needs to open a port (built by [`PortBuilder`](crate::PortBuilder)).
#[derive(Clone, Debug)]
pub struct PortConfig {
    /// The backend and its device.
    pub backend: Backend,
    /// Number of queue pairs.
    pub queues: u16,
    /// Receive ring size (descriptors per queue), a power of two.
    pub rx_ring: u32,
    /// Transmit ring size (descriptors per queue), a power of two.
    pub tx_ring: u32,
    /// Flow rules to install.
    pub rules: Vec<Rule>,
    /// Receive side of the mlx5 backends, dv and model (see [`crate::dv::options`]; ignored by
    /// the others).
    pub dv_rx: DvRxOptions,
    /// Per-packet receive timestamps of the AF_XDP backend (ignored by the others).
    pub rx_timestamps: RxTimestamps,
    /// Receive-side scaling of `Action::Rss` rules on verbs, dv and the model (AF_XDP: the NIC's
    /// own RSS decides, see [`RssConfig`]).
    pub rss: RssConfig,
    /// The port MTU ([`PortBuilder::mtu`](crate::PortBuilder::mtu)); `None`: the backend's
    /// default (single-buffer receive, no transmit check).
    pub mtu: Option<u32>,
    /// Strip one 802.1Q tag from received frames, the tag in
    /// [`RxMeta::vlan_tci`](crate::RxMeta::vlan_tci) (dv, verbs and model: the device does it;
    /// verbs reads the tag from an extended CQ, where a TCI of 0 cannot be told from no tag;
    /// AF_XDP: the driver's tag through the XDP metadata kfunc where the driver has one, else
    /// the frame keeps its tag, as [`PortInfo::offloads`] says; loopback refuses it when the port
    /// opens).
    pub vlan_strip: bool,
}

/// Largest MTU a port takes: jumbo frames of up to 9216 bytes on the wire (9198 plus an
/// Ethernet header and one VLAN tag).
pub const MAX_MTU: u32 = 9216 - MTU_L2_OVERHEAD;

pub use crate::eth::MTU_L2_OVERHEAD;

/// Pool buffers a frame of `max_frame` bytes needs when each holds `room` bytes of data.
pub fn scatter_segments(max_frame: u32, room: u32) -> u32 {
    max_frame.div_ceil(room.max(1)).max(1)
}

impl PortConfig {
    /// The largest frame (bytes, Ethernet header included, no FCS) the port sends and receives,
    /// when an MTU was set: `mtu + 18`.
    pub fn max_frame(&self) -> Option<u32> {
        self.mtu.map(|m| m + MTU_L2_OVERHEAD)
    }
}

/// Receive timestamps an AF_XDP port's steering program writes into each steered frame's XDP
/// metadata (see [`crate::xdp`], "Receive timestamps"), read by
/// [`RxMeta::kernel_rx_ns`](crate::RxMeta::kernel_rx_ns) and
/// [`RxMeta::hw_timestamp`](crate::RxMeta::hw_timestamp).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum RxTimestamps {
    /// None (the default).
    #[default]
    Off,
    /// CLOCK_MONOTONIC when the XDP hook ran (`bpf_ktime_get_ns`), on every driver.
    Kernel,
    /// As `Kernel`, plus the driver's hardware receive timestamp
    /// (`bpf_xdp_metadata_rx_timestamp`, kernel 6.3 or later, a device-bound program).
    Hardware,
}

/// What a port is and how it was opened, for reports (it will grow: built by the backends).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct PortInfo {
    /// Backend name.
    pub backend: &'static str,
    /// Device or interface.
    pub device: String,
    /// Backend-specific mode (e.g. "copy" / "zero-copy" for AF_XDP).
    pub mode: String,
    /// Number of queues.
    pub queues: u16,
    /// Where each offload is carried out on this port.
    pub offloads: Offloads,
}

/// Where a port carries out an offload (see [`Offloads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Offload {
    /// The device does it.
    Hardware,
    /// rawq does it on the CPU (same result, CPU time spent).
    Software,
    /// Not done: a request for it is refused with an error (transmit), or the frame arrives
    /// as it was on the wire (receive).
    Absent,
}

/// Each offload a port may have, and whether the device, rawq in software, or nobody does it.
/// A transmit request ([`TxOffload`](crate::TxOffload)) is never ignored silently: it is carried
/// out (hardware or software) or the packet is refused with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Offloads {
    /// IPv4 header checksum on send ([`TxOffload::l3_csum`](crate::TxOffload::l3_csum)).
    pub ipv4_csum: Offload,
    /// TCP / UDP checksum on send ([`TxOffload::l4_csum`](crate::TxOffload::l4_csum)).
    pub l4_csum: Offload,
    /// TCP segmentation ([`TxOffload::tso_mss`](crate::TxOffload::tso_mss)).
    pub tso: Offload,
    /// 802.1Q tag insertion on send.
    pub vlan_insert: Offload,
    /// 802.1Q tag stripping on receive (the tag in [`RxMeta`](crate::RxMeta)).
    pub vlan_strip: Offload,
    /// Receive-side scaling: the device spreads flows over queues by a hash.
    pub rss: Offload,
    /// Receive timestamps in [`RxMeta`](crate::RxMeta).
    pub rx_timestamps: Offload,
    /// Receiving a frame into several buffers (a chained packet).
    pub rx_scatter: Offload,
}

impl Offloads {
    /// An mlx5 port driven by rawq (dv, model) or libmlx5 (verbs): checksums by the device when
    /// it offers them (`tx_csum`; else rawq fills them), TSO when it segments (`max_tso` > 0),
    /// RSS, CQE timestamps and VLAN insertion (the Ethernet segment's) in hardware (verbs sets
    /// insertion to software); VLAN stripping as the backend sets it; no receive scatter yet.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) fn mlx5(tx_csum: bool, max_tso: u32) -> Offloads {
        let hw = |b: bool| {
            if b {
                Offload::Hardware
            } else {
                Offload::Absent
            }
        };
        let csum = if tx_csum {
            Offload::Hardware
        } else {
            Offload::Software
        };
        Offloads {
            ipv4_csum: csum,
            l4_csum: csum,
            tso: hw(max_tso > 0),
            vlan_insert: Offload::Hardware,
            vlan_strip: Offload::Absent,
            rss: Offload::Hardware,
            rx_timestamps: Offload::Hardware,
            rx_scatter: Offload::Absent,
        }
    }

    /// AF_XDP: checksums and VLAN insertion in software (the socket has no transmit offload),
    /// no TSO, no VLAN stripping (the port sets it to hardware where the driver answers the
    /// VLAN metadata kfunc, `xdp::open`), the NIC's own RSS (configured with ethtool, not by rawq), kernel
    /// timestamps in software or the driver's with [`RxTimestamps::Hardware`].
    #[cfg_attr(not(feature = "xdp"), allow(dead_code))]
    pub(crate) fn xdp(stamps: RxTimestamps) -> Offloads {
        Offloads {
            ipv4_csum: Offload::Software,
            l4_csum: Offload::Software,
            tso: Offload::Absent,
            vlan_insert: Offload::Software,
            vlan_strip: Offload::Absent,
            rss: Offload::Hardware,
            rx_timestamps: match stamps {
                RxTimestamps::Off => Offload::Absent,
                RxTimestamps::Kernel => Offload::Software,
                RxTimestamps::Hardware => Offload::Hardware,
            },
            rx_scatter: Offload::Absent,
        }
    }

    /// The loopback backend: checksums and VLAN insertion in software, nothing else.
    pub(crate) const LOOPBACK: Offloads = Offloads {
        ipv4_csum: Offload::Software,
        l4_csum: Offload::Software,
        tso: Offload::Absent,
        vlan_insert: Offload::Software,
        vlan_strip: Offload::Absent,
        rss: Offload::Absent,
        rx_timestamps: Offload::Absent,
        rx_scatter: Offload::Absent,
    };
}
