//! ibverbs RAW_PACKET backend: safe owners of the verbs objects, and a burst queue driven with
//! `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq`.
//!
//! # Ownership
//! One file per verbs object, each an owner that destroys its object on drop and holds an `Arc`
//! (or a cloned handle) to everything it depends on, so drops always run in dependency order:
//!
//! ```text
//! Flow ─► RawQp / RssQp ─► IndTable ─► Wq ─► Cq ─► Context
//!            │                          └──► Pd ─► Context
//!            └─► Cq (send + recv), Pd          Mr ─► Pd, Mempool
//! ```
//!
//! Every owner has `as_raw()` for calls rawq does not wrap. The data path ([`rx`], [`tx`]) keeps
//! its QP/WQ, CQs and MR alive the same way, so a queue may outlive the port's control objects.

pub mod context;
pub mod cq;
pub mod device;
pub mod flow;
pub mod mr;
pub mod pd;
pub mod qp;
pub mod rss;
pub mod wq;

use std::any::Any;

use crate::error::Result;
use crate::mempool::Mempool;
use crate::port::{Backend, PortConfig, PortInfo};
use crate::queue::Queue;

pub use context::Context;
pub use device::{describe_all, DeviceList};

/// Opens a verbs port (see [`crate::Port::builder`]).
pub(crate) fn open(
    cfg: &PortConfig,
    _pool: &Mempool,
) -> Result<(Vec<Queue>, PortInfo, Box<dyn Any + Send>)> {
    let Backend::Verbs { device, port: _ } = &cfg.backend else {
        return Err(crate::Error::Config("not a verbs backend".into()));
    };
    let _ctx = device::open(device)?;
    Err(crate::Error::Unsupported(
        "the verbs data path is not implemented yet".into(),
    ))
}
