//! mlx5 Direct Verbs backend: rawq writes send WQEs, rings doorbells, polls CQEs and refills the
//! receive queue itself (feature `mlx5`; without it only [`options`], the receive options a
//! port configuration carries, is built).
//!
//! * [`options`]: the mlx5 receive vocabulary of the DV backend and the model alike (RQ type,
//!   CQE compression, striding geometry, mini-CQE format).
//!
//! * `wire`: typed views of every ring format (checked byte for byte against `mlx5dv.h` by
//!   `tests/dv/oracle.rs`).
//! * `rings`: the ring memory of one queue pair: the contract with the control path.
//! * `queue::DvQueue` (crate-internal): the data path over one `rings::QueueRings`: `tx` (SEND and enhanced
//!   multi-packet WQEs, completions every N WQEs, one doorbell per burst), `rx` (cyclic and
//!   striding RQs, compressed CQEs), [`cq`] (ownership test, consumer index). Error completions go
//!   through a `queue::Recover` hook, so the data path depends on neither the verbs control
//!   path nor the model.
//! * [`model`]: a software mlx5 NIC that plays the device's side of the rings (strict WQE checks,
//!   error CQEs, RX metadata, compression, a wire that can be bridged to a veth), for tests and
//!   for [`Backend::Model`](crate::Backend).
//!
//! Cost, measured with `scripts/callgrind-dv.sh` (model completing inline, one core): about 49
//! instructions per packet on send (56 with the 18-byte inline header; completions included)
//! and, on receive, about 59 over plain CQEs and 57 over compressed sessions (`rx` and `rxzip`
//! lines; refill included, every packet carrying its metadata raw: see
//! [`RxMeta`](crate::RxMeta)). `benches/dv.rs` prints the time ratio against a bare loop
//! storing 64 bytes per packet; docs/performance.md has the figures of one run.
//!
//! Vendor sources: every behaviour that differs between drivers follows the one cited beside the
//! code (rdma-core's libmlx5 for sizing and doorbells, DPDK's mlx5 PMD for error handling and
//! completion modes, VPP's rdma plugin for the striding RQ layout, the kernel's mlx5e for
//! decompression). What the device model cannot show (real syndromes, the minimum inline
//! requirement, write-combining) is listed in docs/backends.md.

// Built in every feature set: the receive options a `PortConfig` carries.
pub mod options {
    //! The mlx5 receive options (defined below the configuration, in `crate::options`, so
    //! that [`PortConfig`](crate::PortConfig) carries them without importing a backend).
    pub use crate::options::dv::*;
}
pub use options::{CqeComp, DvRxOptions, MiniCqeFormat, RqType, Striding};

internal_mod!(
    #[cfg(feature = "mlx5")]
    control
);
#[cfg(feature = "mlx5")]
pub mod cq;
#[cfg(feature = "mlx5")]
mod mmio;
#[cfg(feature = "mlx5")]
pub mod model;
#[cfg(feature = "mlx5")]
pub(crate) mod notify;
#[cfg(feature = "mlx5")]
pub(crate) mod queue;
internal_mod!(
    #[cfg(feature = "mlx5")]
    rings
);
#[cfg(feature = "mlx5")]
pub(crate) mod rx;
#[cfg(feature = "mlx5")]
pub(crate) mod sys;
#[cfg(feature = "mlx5")]
pub(crate) mod tx;
internal_mod!(
    #[cfg(feature = "mlx5")]
    wire
);

#[cfg(feature = "mlx5")]
use crate::config::{PortConfig, PortInfo};
#[cfg(feature = "mlx5")]
use crate::error::Result;
#[cfg(feature = "mlx5")]
use crate::mempool::Mempool;

/// On hardware, a queue's verbs objects are its recovery hook: owned by the queue, so they
/// outlive its data path, and they know how to reset the SQ / RQ after an error completion.
#[cfg(feature = "mlx5")]
impl queue::Recover for control::KeepAlive {
    fn recover_sq(&mut self) -> Result<()> {
        control::KeepAlive::recover_sq(self)
    }
    fn recover_rq(&mut self) -> Result<()> {
        control::KeepAlive::recover_rq(self)
    }
    fn quiesce(&mut self) {
        if let Err(e) = control::KeepAlive::quiesce(self) {
            log::warn!("dv: stopping a queue before teardown failed: {e}");
        }
    }
}

/// What a port on an mlx5 backend (dv, model) has beyond the backend contract
/// ([`crate::backend::Control`]), filled in by the backend's `open`: the clock that stamps its
/// completions and, on the model, the software device. Other backends leave it empty.
#[cfg(feature = "mlx5")]
#[derive(Default)]
pub(crate) struct Mlx5Extras {
    /// The device clock (`Port::device_clock`).
    pub(crate) clock: Option<cq::DeviceClock>,
    /// The software device under a `Backend::Model` port (`Port::model_port`).
    pub(crate) model: Option<model::ModelPort>,
}

/// Opens a hardware DV port: verbs objects through the control path, rings through
/// `mlx5dv_init_obj`, the receive rings posted, and only then the flow rules. The device's core
/// clock, where it reports one, goes to `extras` (read through the port's own context).
#[cfg(feature = "mlx5")]
pub(crate) fn open(
    cfg: &PortConfig,
    pool: &Mempool,
    extras: &mut Mlx5Extras,
) -> Result<crate::backend::Opened> {
    let mut ctl = control::ControlPort::from_config(cfg, pool)?;
    extras.clock = ctl.device_clock();
    let caps = ctl.rings().first().map(|r| r.caps);
    let strip_cap = ctl.device().cvlan_strip;
    let rq = ctl
        .rings()
        .first()
        .map_or_else(String::new, |r| match r.rq.striding {
            None => "cyclic RQ".into(),
            Some(s) => format!(
                "striding RQ ({} strides of {} bytes)",
                1u32 << s.log_num_strides,
                1u32 << s.log_stride_size
            ),
        });
    let inline_source = ctl.device().min_inline_source;
    let mut queues = Vec::with_capacity(cfg.queues as usize);
    for (i, (rings, keep)) in ctl.take_queues().into_iter().enumerate() {
        let notify = keep.rx_notify()?;
        let (index, recover) = (i as u16, Box::new(keep));
        // The queue owns `keep` (its recovery hook) until it is dropped; nothing else drives
        // these rings, and the queues are in RTS / RDY, so posting the RQ now is allowed.
        // SAFETY: `rings` came from `mlx5dv_init_obj` on the objects `keep` owns, and
        // `ControlPort::from_config` registered exactly `pool`'s region under `rings.lkey`.
        let mut q = unsafe { queue::DvQueue::new(index, rings, pool, recover, Box::new(())) }?;
        q.set_max_frame(cfg.max_frame());
        if let Some(n) = notify {
            q = q.with_rx_notify(n);
        }
        queues.push(q.into_queue());
    }
    ctl.install_rules(&cfg.rules)?;
    let device = match &cfg.backend {
        crate::Backend::Dv { device, port } => format!("{device} port {port}"),
        _ => String::new(),
    };
    let mode = caps.map_or_else(String::new, |c| {
        format!(
            "min inline {} ({inline_source}), {}, {rq}, CQE compression {}",
            c.min_inline,
            if c.empw { "eMPW" } else { "one WQE per packet" },
            c.cqe_compression.map_or("off".into(), |f| format!("{f:?}"))
        )
    });
    let info = PortInfo {
        backend: "dv",
        device,
        mode,
        queues: cfg.queues,
        offloads: crate::config::Offloads {
            vlan_strip: if strip_cap {
                crate::config::Offload::Hardware
            } else {
                crate::config::Offload::Absent
            },
            ..caps.map_or(crate::config::Offloads::mlx5(false, 0), |c| {
                crate::config::Offloads::mlx5(c.tx_csum, c.max_tso)
            })
        },
    };
    Ok((queues, info, Box::new(ctl)))
}
