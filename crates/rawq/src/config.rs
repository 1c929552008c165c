//! What a port is opened with and what it reports: the backend and its device
//! ([`Backend`]), the port's configuration ([`PortConfig`]) and its description ([`PortInfo`]).
//!
//! These sit below the backends: a backend's `open` takes a [`PortConfig`] and returns a
//! [`PortInfo`], and [`crate::port`] (which drives the backends) re-exports them, so that no
//! backend imports the module that imports it.

use crate::error::{Error, Result};
use crate::flow::Rule;

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
    Model(ModelOptions),
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
    /// Receive side of the mlx5 DV backend (ignored by the others).
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

/// Bytes a frame carries beyond its MTU: the Ethernet header and one 802.1Q tag (no FCS), as
/// the Linux kernel forwards it (net/core/dev.c `is_skb_forwardable`: `dev->mtu +
/// dev->hard_header_len + VLAN_HLEN`) and as mlx5e sizes the port's hardware MTU
/// (drivers/net/ethernet/mellanox/mlx5/core/en.h `MLX5E_SW2HW_MTU`, which adds the FCS too).
pub const MTU_L2_OVERHEAD: u32 = 18;

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

/// Receive-side scaling: how an `rss` rule's frames are spread over its queues on the verbs, dv
/// and model backends ([`PortConfig::rss`], set with
/// [`PortBuilder::rss`](crate::PortBuilder::rss)).
///
/// mlx5 hashes with the Toeplitz function over the fields a hashing QP (TIR) selects. The
/// kernel lets one RSS QP hash one IP version and one transport (Linux
/// drivers/infiniband/hw/mlx5/qp.c `create_rss_raw_qp_tir`: IPv4 and IPv6 fields together,
/// or TCP and UDP ports together, are EINVAL), so verbs and dv give a rule one hashing QP per IP
/// version (and, with [`RssFields::IpPort`] on a rule naming no transport, per TCP / UDP /
/// other), each behind a flow rule narrowed to its traffic, as VPP's rdma plugin does with its
/// rss4 / rss6 QPs (VPP-1939). A frame of a version not spread, or not IP at all, goes to the
/// rule's first queue.
///
/// On AF_XDP there is nothing to configure here: the NIC's own RSS (set with `ethtool -X`, out
/// of rawq's reach) picks the netdev queue, and an `rss` rule keeps a frame that arrives on one
/// of its queues (see `crate::xdp`). This configuration is ignored there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RssConfig {
    /// The 40-byte Toeplitz key (mlx5 takes exactly 40). Default:
    /// [`DEFAULT_KEY`](crate::flow::toeplitz::DEFAULT_KEY), Microsoft's.
    pub key: [u8; 40],
    /// Addresses only, or addresses and TCP/UDP ports.
    pub fields: RssFields,
    /// Which IP versions are spread (default both).
    pub versions: IpVersions,
}

/// The header fields an RSS hash covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RssFields {
    /// Source and destination address.
    Ip,
    /// Addresses, and the source and destination ports of TCP and UDP (the default).
    #[default]
    IpPort,
}

/// The IP versions an RSS rule spreads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IpVersions {
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
    /// Both (the default).
    #[default]
    Both,
}

impl IpVersions {
    /// True if IPv6 (`v6`) or IPv4 (`!v6`) is spread.
    pub fn spreads(self, v6: bool) -> bool {
        matches!(
            (self, v6),
            (IpVersions::Both, _) | (IpVersions::V4, false) | (IpVersions::V6, true)
        )
    }
}

impl Default for RssConfig {
    fn default() -> Self {
        RssConfig {
            key: crate::flow::toeplitz::DEFAULT_KEY,
            fields: RssFields::default(),
            versions: IpVersions::default(),
        }
    }
}

impl RssConfig {
    /// The configuration with the symmetric key
    /// ([`SYMMETRIC_KEY`](crate::flow::toeplitz::SYMMETRIC_KEY)): both directions of a flow
    /// land on one queue.
    pub fn symmetric(mut self) -> Self {
        self.key = crate::flow::toeplitz::SYMMETRIC_KEY;
        self
    }

    /// A key from 80 hex digits (colons, spaces or a `0x` prefix allowed), as `--rss-key` takes
    /// it.
    ///
    /// # Errors
    /// [`Error::Config`] for anything but 40 bytes of hex.
    pub fn parse_key(s: &str) -> Result<[u8; 40]> {
        let t = s.trim();
        let t = t.strip_prefix("0x").unwrap_or(t);
        let digits: Vec<u8> = t
            .bytes()
            .filter(|c| !matches!(c, b':' | b' ' | b'-'))
            .collect();
        let bad = || {
            Error::Config(format!(
                "RSS key {s:?}: give 40 bytes as 80 hex digits (mlx5 takes a 40-byte Toeplitz key)"
            ))
        };
        if digits.len() != 80 {
            return Err(bad());
        }
        let mut key = [0u8; 40];
        for (i, pair) in digits.chunks(2).enumerate() {
            let hex = std::str::from_utf8(pair).map_err(|_| bad())?;
            key[i] = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
        }
        Ok(key)
    }

    /// What the hash covers, in the terms of [`crate::flow::toeplitz::hash_frame`] (to compute
    /// the queue a frame should land on).
    pub fn hash_fields(&self) -> crate::flow::toeplitz::HashFields {
        let ports = self.fields == RssFields::IpPort;
        crate::flow::toeplitz::HashFields {
            ipv4: self.versions.spreads(false),
            ipv6: self.versions.spreads(true),
            tcp: ports,
            udp: ports,
        }
    }
}

impl std::str::FromStr for RssFields {
    type Err = Error;
    /// `ip` or `ip-port`.
    fn from_str(s: &str) -> Result<RssFields> {
        match s.trim() {
            "ip" => Ok(RssFields::Ip),
            "ip-port" => Ok(RssFields::IpPort),
            _ => Err(Error::Config(format!(
                "RSS fields {s:?}: use ip (addresses) or ip-port (addresses and TCP/UDP ports)"
            ))),
        }
    }
}

#[cfg(test)]
mod rss_tests {
    use super::*;

    #[test]
    fn rss_config_parses_keys_and_fields() {
        let hex =
            "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";
        assert_eq!(
            RssConfig::parse_key(hex).unwrap(),
            crate::flow::toeplitz::DEFAULT_KEY
        );
        let colons: String = hex
            .as_bytes()
            .chunks(2)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(
            RssConfig::parse_key(&format!("0x{colons}")).unwrap(),
            crate::flow::toeplitz::DEFAULT_KEY
        );
        for bad in [
            "",
            "6d5a",
            &hex[..78],
            &format!("{hex}00"),
            &hex.replace('6', "g"),
        ] {
            let e = RssConfig::parse_key(bad).unwrap_err().to_string();
            assert!(e.contains("80 hex digits"), "{bad}: {e}");
        }
        assert_eq!("ip".parse::<RssFields>().unwrap(), RssFields::Ip);
        assert_eq!("ip-port".parse::<RssFields>().unwrap(), RssFields::IpPort);
        assert!("ports".parse::<RssFields>().is_err());
        let d = RssConfig::default();
        assert_eq!(d.hash_fields(), crate::flow::toeplitz::HashFields::ALL);
        let s = d.symmetric();
        assert_eq!(s.key, crate::flow::toeplitz::SYMMETRIC_KEY);
        assert!(IpVersions::V6.spreads(true) && !IpVersions::V6.spreads(false));
    }
}

/// What a port is and how it was opened, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// Receive queue type of the mlx5 backends (`dv`, `model`), as DPDK's mlx5 `mprq_en` devarg
/// chooses it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RqType {
    /// One WQE per packet buffer (a cyclic RQ).
    #[default]
    Cyclic,
    /// A striding (multi-packet) RQ with 2^`log_num_strides` strides per WQE, each stride a
    /// pool buffer.
    Striding {
        /// log2 of the strides per WQE (3 or 4: 8 or 16 strides).
        log_num_strides: u8,
    },
}

impl std::str::FromStr for RqType {
    type Err = Error;
    /// `cyclic`, `striding` (8 strides per WQE) or `striding:N` (N = 8 or 16).
    fn from_str(s: &str) -> Result<RqType> {
        let bad = || {
            Error::Config(format!(
                "RQ type {s:?}: use cyclic, striding, striding:8 or striding:16"
            ))
        };
        match s.trim() {
            "cyclic" => Ok(RqType::Cyclic),
            "striding" => Ok(RqType::Striding { log_num_strides: 3 }),
            t => {
                let n: u32 = t
                    .strip_prefix("striding:")
                    .ok_or_else(bad)?
                    .parse()
                    .map_err(|_| bad())?;
                match n {
                    8 => Ok(RqType::Striding { log_num_strides: 3 }),
                    16 => Ok(RqType::Striding { log_num_strides: 4 }),
                    _ => Err(bad()),
                }
            }
        }
    }
}

/// Receive CQE compression of the mlx5 backends, as DPDK's mlx5 `rxq_cqe_comp_en` devarg
/// chooses it: off, or on with one mini-CQE format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeComp {
    /// Every packet gets a full 64-byte CQE.
    Off,
    /// Mini-CQEs carry the RSS hash (cyclic RQ only: they have no stride index).
    Hash,
    /// Mini-CQEs carry the checksum and the stride index.
    Csum,
}

impl std::str::FromStr for CqeComp {
    type Err = Error;
    fn from_str(s: &str) -> Result<CqeComp> {
        match s.trim() {
            "off" => Ok(CqeComp::Off),
            "hash" => Ok(CqeComp::Hash),
            "csum" => Ok(CqeComp::Csum),
            _ => Err(Error::Config(format!(
                "CQE compression {s:?}: use off, hash or csum"
            ))),
        }
    }
}

/// How the mlx5 DV backend sets up its receive side ([`PortConfig::dv_rx`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DvRxOptions {
    /// Cyclic or striding RQ.
    pub rq: RqType,
    /// CQE compression; `None`: the device's choice for the RQ type (hash for a cyclic RQ,
    /// csum for a striding one), off when the device has neither.
    pub cqe_comp: Option<CqeComp>,
}

impl DvRxOptions {
    /// Checks the combination: hash mini-CQEs have no stride index, so a striding RQ cannot use
    /// them.
    ///
    /// # Errors
    /// [`Error::Config`] for a striding RQ with hash compression, saying what to use.
    pub fn check(&self) -> Result<()> {
        if matches!(self.rq, RqType::Striding { .. }) && self.cqe_comp == Some(CqeComp::Hash) {
            return Err(Error::Config(
                "a striding RQ cannot use hash CQE compression (hash mini-CQEs carry no stride \
                 index): use --cqe-comp csum or off"
                    .into(),
            ));
        }
        Ok(())
    }

    /// log2 of the stride size for pool buffers of `buf_size` bytes: the largest power of two
    /// that fits a buffer behind rawq's buffer header (half the buffer), within the mlx5
    /// limits of 2^6..2^13 bytes.
    pub fn log_stride_size(buf_size: u32) -> u8 {
        let half = (buf_size / 2).max(64);
        (31 - half.leading_zeros()).clamp(6, 13) as u8
    }
}

#[cfg(test)]
mod dv_rx_tests {
    use super::*;

    #[test]
    fn rq_and_cqe_comp_parse_and_combine() {
        assert_eq!("cyclic".parse::<RqType>().unwrap(), RqType::Cyclic);
        assert_eq!(
            "striding:16".parse::<RqType>().unwrap(),
            RqType::Striding { log_num_strides: 4 }
        );
        assert!("striding:4".parse::<RqType>().is_err());
        assert_eq!("csum".parse::<CqeComp>().unwrap(), CqeComp::Csum);
        assert!("zip".parse::<CqeComp>().is_err());
        let bad = DvRxOptions {
            rq: RqType::Striding { log_num_strides: 3 },
            cqe_comp: Some(CqeComp::Hash),
        };
        assert!(bad
            .check()
            .unwrap_err()
            .to_string()
            .contains("stride index"));
        assert_eq!(DvRxOptions::log_stride_size(2048), 10);
        assert_eq!(DvRxOptions::log_stride_size(512), 8);
    }
}

// ---- The software mlx5 device's options (plain configuration: rawq's glue over the model,
// `crate::dv::model`, re-exports them and converts them into the device crate's own types
// (`rawq-model`) when it opens a port, so that this file imports nothing of the model; ring
// types of the DV backend, `crate::dv::rings` re-exports).

/// Striding (multi-packet) RQ geometry, as passed to `mlx5dv_create_wq`.
#[cfg(feature = "mlx5")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Striding {
    /// log2 of the number of strides per WQE.
    pub log_num_strides: u8,
    /// log2 of the stride size in bytes.
    pub log_stride_size: u8,
    /// The device writes 2 bytes of zero padding before each packet.
    pub two_byte_shift: bool,
}

/// Mini-CQE format of a compressed CQ.
#[cfg(feature = "mlx5")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiniCqeFormat {
    /// RSS hash + byte count (cyclic RQs).
    Hash,
    /// Checksum + stride index + byte count (striding RQs).
    CsumStrideIdx,
}

/// Receive queue type of a modelled port.
#[cfg(feature = "mlx5")]
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
#[cfg(feature = "mlx5")]
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
#[cfg(feature = "mlx5")]
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

#[cfg(feature = "mlx5")]
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
#[cfg(feature = "mlx5")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetdevPath {
    /// A TAP interface (created beforehand, e.g. `ip tuntap add NAME mode tap`), attached with
    /// `TUNSETIFF` (`IFF_TAP | IFF_NO_PI`).
    Tap {
        /// Interface name.
        ifname: String,
    },
}
