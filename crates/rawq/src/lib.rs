//! # rawq — kernel-bypass raw packet I/O
//!
//! rawq moves Ethernet frames between your code and a NIC's rings with no kernel network stack in
//! between, in the style of VPP's native RDMA driver. Three backends sit behind one burst queue API:
//!
//! * **`dv`** — mlx5 Direct Verbs: rawq writes send WQEs into the SQ ring, rings the doorbell,
//!   polls CQEs and refills the RQ itself (feature `mlx5`).
//! * **`verbs`** — ibverbs RAW_PACKET QPs through `ibv_post_send` / `ibv_post_recv` /
//!   `ibv_poll_cq`, for NICs without DV (feature `verbs`).
//! * **`xdp`** — AF_XDP sockets on any Linux netdev, veth included (feature `xdp`).
//!
//! Flow rules ([`flow`]) steer chosen traffic to rawq's queues; everything else stays with the
//! kernel, so ssh, ping and ARP keep working.
//!
//! ## Quick start
//! ```
//! use rawq::{Backend, Port};
//! # fn main() -> rawq::Result<()> {
//! let mut port = Port::builder(Backend::Loopback).queues(1).open()?;
//! let q = port.queue(0).unwrap();
//! let mut burst = Vec::with_capacity(32);
//! q.alloc_burst(&mut burst, 32)?;
//! for p in burst.iter_mut() {
//!     p.copy_from_slice(&[0u8; 60])?;
//! }
//! let sent = q.tx_burst(&mut burst);          // moves the packets to the device
//! let got = q.rx_burst(&mut burst, 32);       // loopback: they come straight back
//! assert_eq!((sent, got), (32, 32));
//! # Ok(()) }
//! ```
//!
//! ## Thread safety
//! A [`Queue`] is `Send`: move each to the thread (core) that drives it. Its counters can be read
//! from any thread through a [`StatsReader`]. A [`Packet`] is `Send` and returns its buffer to its
//! pool when dropped, wherever that happens.
//!
//! ## Resource cleanup
//! Dropping a [`Port`] removes its flow rules (and XDP program); drop the queues first. A pool's
//! memory is unmapped when its last handle goes and every buffer is home.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

/// Declares a module of the backends' internals (ring and wire formats, the BPF assembler,
/// the verbs objects and rdma-core's C interface, the flow-rule compilers, the AF_XDP
/// interface lookups): crate-private, and public only with the
/// feature `internals`, which rawq's own integration tests and the tools' tests turn on (a
/// dev-dependency) to check those formats against oracles. It is not part of the API: not
/// documented, not covered by semver; an embedder does not turn it on.
macro_rules! internal_mod {
    ($(#[$a:meta])* $name:ident) => {
        $(#[$a])*
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        $(#[$a])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports, unreachable_pub)]
        pub(crate) mod $name;
    };
}

pub mod adapters;
mod backend;
mod buf;
/// The C-oracle helpers the integration tests use too (rawq-testkit, a dev-dependency: the unit
/// tests link it with its own copy of rawq, which `cc` does not touch).
#[cfg(test)]
pub(crate) use rawq_testkit::cc as cc_oracle;
pub mod config;
pub mod counters;
pub mod error;
mod eth;
pub mod flow;
pub mod link;
mod loopback;
pub mod mempool;
mod mtu;
mod options;
pub mod packet;
pub mod port;
pub mod queue;
pub mod stats;
#[allow(unsafe_code)]
pub(crate) mod sys;

// Always built: its `options` (the mlx5 receive options of `PortConfig`) in every feature
// set, the backend itself with feature `mlx5`.
#[allow(unsafe_code)]
pub mod dv;
#[cfg(feature = "verbs")]
#[allow(unsafe_code)]
pub mod ibverbs;
#[cfg(feature = "xdp")]
#[allow(unsafe_code)]
pub mod xdp;

/// README.md's Rust examples, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// docs/backends.md's Rust examples, likewise.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/backends.md")]
struct BackendsDoctests;

/// A report of every RDMA device, its ports and the capabilities rawq uses, DV's included with
/// feature `mlx5` (what `rawq-devinfo` prints).
///
/// # Errors
/// [`Error::NoDevice`] (with the cause) when there is no device; a device that cannot be opened
/// or queried is reported inline rather than failing the whole listing.
#[cfg(feature = "verbs")]
pub fn describe_devices() -> Result<String> {
    ibverbs::device::describe_all(&|_ctx, _out| {
        #[cfg(feature = "mlx5")]
        dv::control::describe_dv(_ctx, _out);
    })
}

pub use config::{IpVersions, RssConfig, RssFields};
pub use config::{Offload, Offloads};
pub use error::{Error, Result, TxRefusal, CAPS};
pub use link::{Link, LinkEvent, LinkEvents};
pub use mempool::{HugePages, MemoryKind, Mempool, MempoolConfig, PoolCache};
pub use packet::{Packet, RxMeta, TxOffload};
pub use port::{
    Backend, CqeComp, DvRxOptions, Port, PortBuilder, PortConfig, PortInfo, RqType, RuleHandle,
    RxTimestamps,
};
pub use queue::{Queue, QueueOps};
pub use stats::{QueueStats, Rates, StatsReader, StatsWriter, TxLedger};
/// Pins the calling thread to one CPU core (`sched_setaffinity(2)`).
pub use sys::affinity::pin_to_core;
