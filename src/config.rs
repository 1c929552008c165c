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
    /// The software mlx5 device ([`crate::dv::model`]) driven by the DV data path, running in a
    /// thread of its own; needs nothing.
    #[cfg(feature = "mlx5")]
    Model(crate::dv::model::ModelOptions),
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
}
