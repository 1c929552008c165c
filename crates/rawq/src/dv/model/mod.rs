//! A software mlx5 NIC that plays the device's side of the DV rings, for tests (yours too).
//!
//! A [`ModelPort`] is one NIC port with `queues` queue pairs. It owns ring memory laid out as
//! libmlx5 hands it out (SQ of 64-byte WQEBBs, CQs initialized to `op_own = 0xF0`, a cyclic or
//! striding RQ, doorbell records, a fake UAR page) and gives out `DvQueue`s over it. Then, on
//! each [`ModelPort::process`] (or in a thread, [`ModelPort::spawn`]), it does what the hardware
//! does:
//!
//! * **Send**: reads the SQ doorbell record, parses every new WQE and checks it strictly (opcode,
//!   DS count, WQE index, QPN, minimum inline header, lkey, every address+length inside the
//!   registered region, frame length limits). A good WQE puts its frame(s) on the wire (checksum
//!   offload applied) and writes a send CQE if the WQE asked for one. A bad WQE produces the
//!   error CQE the hardware would (LOCAL_PROT_ERR for a bad key or address, LOCAL_LENGTH_ERR for
//!   a bad length, LOCAL_QP_OP_ERR for a bad opcode / DS / index); every later WQE is flushed
//!   (WR_FLUSH_ERR) until the queue is reset through the
//!   `dv::queue::Recover` hook.
//!   In stepped mode it also checks that the UAR register holds the last WQE's first 8 bytes.
//! * **Receive**: takes frames from the wire, drops runts and oversize frames (counted), steers
//!   them by the flow rules (each rule becomes a device flow with its priority and a Tag spec
//!   carrying the rule's index + 1, as the verbs backend's rules would; frames no rule takes go
//!   "to the kernel": to the TAP in [`ModelOptions::netdev`], else counted and dropped; without
//!   rules every frame is spread by RSS), strips a VLAN tag if asked, computes checksums-ok bits,
//!   header types and the Toeplitz RSS hash, fills the RQ (cyclic, or striding with filler
//!   CQEs), and writes receive CQEs, compressed (title + mini-CQE arrays) when configured and
//!   the shared fields of a run agree. A frame larger than its WQE is a LOCAL_LENGTH_ERR for
//!   that WQE and the RQ keeps running; a CQE due on a full CQ overruns it.
//! * **Wire**: [`ModelWire::Loopback`] (a port's frames come back to it), [`ModelWire::Sink`],
//!   [`ModelWire::Bridge`] (an `AF_PACKET` socket on a Linux interface), or two ports joined by
//!   [`ModelPort::pair`].
//! * **Faults**: [`ModelPort::inject_tx_error`], [`ModelPort::delay_tx_completions`],
//!   [`ModelPort::inject_frame`] (runts, oversize), and no flow control
//!   ([`ModelOptions::flow_control`] = false: an empty RQ drops and counts).
//!
//! Nothing a driver writes makes the model panic; malformed work becomes error CQEs and counters
//! ([`ModelCounters`]).
//!
//! Underneath, the port is built from [`hw::Hw`], the model as hardware: independent CQ, SQ,
//! RQ, TIR and flow objects over rings anywhere in memory (the port's own here, an
//! application's under the emulated NIC). One engine serves both. It is the crate
//! `rawq-model` (model/ in rawq's workspace), which imports nothing from rawq; this module is
//! rawq's glue over it: [`ModelPort`] hands out rawq's `DvQueue`s
//! over the device, converting rawq's options into the device's and its errors into
//! [`Error`].

pub(crate) mod options;
mod port;

use crate::dv::rings::{CqRing, DvCaps, MiniCqeFormat, QueueRings, RqRing, SqRing};
use crate::error::{Error, Result};
use crate::mempool::Mempool;

pub use crate::options::model::{ModelOptions, ModelWire, NetdevPath, RxKind};
use options::{mini_cqe_of, netdev_of, striding_of, wire_of};
pub use port::ModelPort;
pub use rawq_model::{hw, net, HwTuning, ModelCounters, ModelThread};

impl From<rawq_model::Error> for Error {
    fn from(e: rawq_model::Error) -> Error {
        match e {
            rawq_model::Error::Config(m) => Error::Config(m),
            rawq_model::Error::Unsupported(m) => Error::Unsupported(m),
            rawq_model::Error::NotFound {
                kind,
                name,
                available,
            } => Error::NotFound {
                kind,
                name,
                available,
            },
            rawq_model::Error::Os { op, source } => Error::os(op, source),
            other => Error::Config(other.to_string()),
        }
    }
}

impl ModelOptions {
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.queues == 0 || self.queues > 256 {
            return bad(format!("model queues = {}: must be 1..=256", self.queues));
        }
        for (n, v) in [("sq_wqebbs", self.sq_wqebbs), ("rq_wqes", self.rq_wqes)] {
            if !v.is_power_of_two() || !(4..=32768).contains(&v) {
                return bad(format!(
                    "model {n} = {v}: must be a power of two from 4 to 32768"
                ));
            }
        }
        if self.min_inline != 0 && self.min_inline != 18 {
            return bad(format!(
                "model min_inline = {}: must be 0 or 18",
                self.min_inline
            ));
        }
        match self.rx {
            RxKind::Cyclic { sges } => {
                if !(1..=64).contains(&sges) {
                    return bad(format!("model sges = {sges}: must be 1..=64"));
                }
            }
            RxKind::Striding(s) => {
                if !(1..=12).contains(&s.log_num_strides) || !(6..=13).contains(&s.log_stride_size)
                {
                    return bad(format!(
                        "model striding RQ 2^{} strides of 2^{} bytes: need 1..=12 and 6..=13",
                        s.log_num_strides, s.log_stride_size
                    ));
                }
                if self.cqe_compression == Some(MiniCqeFormat::Hash) {
                    return bad("a striding RQ needs the CsumStrideIdx mini-CQE format".into());
                }
            }
        }
        if self.rxcq_entries != 0
            && (!self.rxcq_entries.is_power_of_two() || !(2..=1 << 22).contains(&self.rxcq_entries))
        {
            return bad(format!(
                "model rxcq_entries = {}: must be 0 (automatic) or a power of two from 2 to 2^22",
                self.rxcq_entries
            ));
        }
        if self.wire_capacity == 0 {
            return bad("model wire_capacity must be at least 1".into());
        }
        crate::flow::validate_rules(&self.rules, self.queues)?;
        Ok(())
    }

    /// The capabilities a driver sees on this port.
    pub fn caps(&self) -> DvCaps {
        DvCaps {
            min_inline: self.min_inline,
            empw: self.empw,
            cqe_compression: self.cqe_compression,
            tx_csum: self.tx_csum,
            // The model segments TSO WQEs (rawq-model engine/tso.rs).
            max_tso: rawq_model::MAX_TSO,
        }
    }
}

/// Opens a port on the model for [`Backend::Model`](crate::Backend): queues over a model running
/// in its own thread, which stops when the port is dropped; the device and its clock go to
/// `extras`.
pub(crate) fn open(
    cfg: &crate::config::PortConfig,
    opts: &ModelOptions,
    pool: &Mempool,
    extras: &mut crate::dv::Mlx5Extras,
) -> Result<crate::backend::Opened> {
    let mut o = opts.clone();
    // The port's mlx5 receive options, as the DV backend takes them.
    cfg.dv_rx.check()?;
    o.apply_rx(&cfg.dv_rx, pool.buf_size());
    o.queues = cfg.queues;
    o.sq_wqebbs = cfg.tx_ring;
    // A port MTU: the model's port drops (and counts) larger frames, and a cyclic RQ scatters
    // a frame over as many pool buffers as the largest one needs (as the DV control path asks
    // libmlx5 for, `control::rq_sizing_scatter`).
    if let Some(f) = cfg.max_frame() {
        o.max_frame = f;
        match o.rx {
            RxKind::Cyclic { sges } => {
                let need = crate::dv::control::scatter_segments(
                    f,
                    pool.buf_size() - pool.headroom() as u32,
                );
                if need > crate::dv::control::MAX_SCATTER {
                    crate::dv::control::rq_sizing_scatter(cfg.rx_ring, need)?;
                }
                o.rx = RxKind::Cyclic {
                    sges: sges.max(need.next_power_of_two()),
                };
            }
            RxKind::Striding(s) => {
                let wqe = (1u32 << s.log_num_strides) << s.log_stride_size;
                if f > wqe {
                    return Err(crate::Error::Config(format!(
                        "MTU {}: frames of up to {f} bytes do not fit a striding RQ WQE of \
                         {wqe} bytes: use a cyclic RQ (scatter receive) or larger strides",
                        f - crate::config::MTU_L2_OVERHEAD
                    )));
                }
            }
        }
    }
    // About `rx_ring` buffers posted per queue, whatever the WQE shape.
    let per_wqe = match o.rx {
        RxKind::Cyclic { sges } => sges,
        RxKind::Striding(s) => 1 << s.log_num_strides,
    };
    o.rq_wqes = (cfg.rx_ring / per_wqe.max(1)).max(4).next_power_of_two();
    if !cfg.rules.is_empty() {
        o.rules = cfg.rules.clone();
    }
    if cfg.rss != crate::config::RssConfig::default() {
        o.rss = cfg.rss;
    }
    o.vlan_strip |= cfg.vlan_strip;
    let port = ModelPort::new(o)?;
    let mut queues = Vec::new();
    for i in 0..cfg.queues {
        let mut q = port.queue(i, pool)?;
        q.set_max_frame(cfg.max_frame());
        queues.push(q.into_queue());
    }
    let caps = port.caps();
    extras.clock = port.device_clock();
    extras.model = Some(port.clone());
    let thread = port.spawn();
    let info = crate::PortInfo {
        backend: "model",
        device: "mlx5-model".into(),
        mode: "software device".into(),
        queues: cfg.queues,
        // The model's stamps are on only with a clock (`clock_khz`); its caps say the rest.
        offloads: {
            let mut o = crate::config::Offloads::mlx5(caps.tx_csum, caps.max_tso);
            // The model strips tags when its RQs are told to (`HwState::set_rq_vlan_strip`).
            o.vlan_strip = crate::config::Offload::Hardware;
            if opts.clock_khz == 0 {
                o.rx_timestamps = crate::config::Offload::Absent;
            }
            o
        },
    };
    Ok((
        queues,
        info,
        Box::new(ModelControl {
            _thread: thread,
            port,
            wire: opts.wire.clone(),
            max_frame: opts.max_frame,
        }),
    ))
}

/// The control objects of a [`Backend::Model`](crate::Backend) port: the model's thread
/// (stopped first when the port is dropped) and the port.
pub(crate) struct ModelControl {
    // Dropped first: the thread stops before the port's objects go.
    _thread: ModelThread,
    port: ModelPort,
    /// The wire and largest frame the port was opened with (its link).
    wire: ModelWire,
    max_frame: u32,
}

impl crate::backend::Control for ModelControl {
    /// The bridged interface's link, or a link that is always up with the model's MTU.
    fn link_source(&self) -> crate::link::Source {
        match &self.wire {
            ModelWire::Bridge { ifname } => crate::link::Source::Netdev {
                ifname: ifname.clone(),
            },
            _ => crate::link::Source::Always {
                mtu: Some(self.max_frame.saturating_sub(14)),
            },
        }
    }

    /// The software device's `rx_no_buffer`.
    fn device_counters(&self) -> crate::counters::DeviceCounters {
        crate::counters::DeviceCounters {
            rx_no_buffer: Some(self.port.counters().rx_no_buffer),
            ..Default::default()
        }
    }

    fn add_rule(&mut self, id: u64, rule: &crate::flow::Rule) -> Result<()> {
        self.port.add_rule(id, rule)
    }

    fn remove_rule(&mut self, id: u64) -> Result<()> {
        self.port.remove_rule(id)
    }

    fn rule_hits(&self, id: u64) -> Result<Option<u64>> {
        self.port.rule_hits(id).map(Some)
    }
}

pub(crate) fn ring_ptr<T>(p: *mut u8) -> Result<std::ptr::NonNull<T>> {
    std::ptr::NonNull::new(p as *mut T).ok_or_else(|| Error::Config("null ring pointer".into()))
}

#[cfg(test)]
mod tests;
