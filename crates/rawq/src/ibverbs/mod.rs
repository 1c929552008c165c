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
//! Every owner has `as_raw()` for calls rawq does not wrap. A queue keeps its QP/WQ, CQs and MR
//! alive the same way, so queues and the port's control objects may be dropped in any order.
//!
//! # Queues
//! Each queue is a RAW_PACKET QP with its own send and receive CQ. Without RSS rules the QP's own
//! RQ receives; when a rule asks for RSS every queue receives on a WQ instead, and rules target
//! hashing QPs over indirection tables of those WQs (a one-entry table for a one-queue rule).
//!
//! # Error completions
//! An error completion (anything but success or a flush) is counted (`rx_errors` /
//! `tx_errors`), reported once through `Queue::take_error`, and starts a recovery: the QP (and
//! WQ) go to the error state, every posted buffer comes back flushed and is returned to the
//! pool, then the QP is reset and brought back to RTS and the RQ refilled. No buffer is lost:
//! each is either with the device, in a queue's rings, or back in the pool.

pub(crate) mod channel;
pub mod context;
mod counters;
internal_mod!(cq);
pub mod device;
internal_mod!(ffi);
internal_mod!(flow);
mod link;
internal_mod!(mr);
pub(crate) mod pd;
internal_mod!(qp);
internal_mod!(rss);
pub(crate) mod wq;

mod queue;
mod rx;
#[cfg(test)]
pub(crate) mod tests;
mod tx;

use std::sync::Arc;

use crate::config::{Backend, PortConfig, PortInfo};
use crate::error::{Error, Result};
use crate::flow::{Action, Rule};
use crate::mempool::Mempool;
use crate::queue::Queue;

pub use context::Context;
pub use device::DeviceList;
// The DV backend's ports are RDMA ports too.
#[cfg_attr(not(feature = "mlx5"), allow(unused_imports))]
pub(crate) use link::source as link_source;

use crate::config::RssConfig;
use crate::flow::toeplitz::DEFAULT_KEY as DEFAULT_TOEPLITZ_KEY;
use crate::flow::verbs::FlowTarget;
use cq::Cq;
use mr::Mr;
use pd::Pd;
use qp::{QpCaps, QueuePair, RawQp};
use queue::{VerbsControl, VerbsQueue};
use rss::{HashFields, IndTable, RssQp};
use rx::{RecvTarget, Rx};
use tx::Tx;
use wq::Wq;

/// Inline data asked for per send WR; frames up to what the provider grants go inline.
const INLINE_REQUEST: u32 = 128;
/// Compiles rule number `id` to the `ibv_create_flow` buffer, tagged `id + 1` (what its
/// frames' CQEs report as flow tag; wrapped to the tag's 24 bits), and where its frames go.
fn compile_rule(rule: &Rule, id: u64, port: u8) -> Result<(Vec<u8>, FlowTarget)> {
    let tag = (id % crate::flow::verbs::MAX_FLOW_TAG as u64) as u32 + 1;
    let c = crate::flow::verbs::compile_tagged(rule, port, Some(tag))?;
    Ok((c.bytes, c.target))
}

/// The control-path objects of a verbs port, kept by the port (and by a DV port's
/// `ControlPort`): the installed rules by number, and what they need. Drops the flows first,
/// then the hashing QPs, tables, and (through their `Arc`s) QPs, WQs, CQs, PD, context.
///
/// Rules at run time: [`Rules::add`] is one more `ibv_create_flow`, [`Rules::remove`] one
/// `ibv_destroy_flow`; the kernel inserts and deletes a steering entry atomically (mlx5:
/// `mlx5_ib_create_flow` → `mlx5_add_flow_rules`, an FTE written by one firmware command), so a
/// frame meets either the old set or the new one.
///
/// Per-rule hit counters: each rule gets an `ibv_counters` object counting frames
/// ([`counters::Counters`]), named by an `IBV_FLOW_SPEC_ACTION_COUNT` spec in each of its
/// flows, read by [`Rules::hits`] and destroyed after the rule's flows. A device without flow
/// counters (`ibv_create_counters` fails with EOPNOTSUPP, ENOSYS or EPROTONOSUPPORT) installs
/// its rules without, and `Port::rule_hits` is `None` there.
pub(crate) struct Rules {
    /// The flows of each rule by number (an RSS rule may have several: [`rss::rss_parts`]).
    flows: Vec<(u64, flow::Flow)>,
    /// Each rule's counters object (dropped after `flows`, which use them).
    counters: Vec<(u64, counters::Counters)>,
    /// The device has no flow counters (`ibv_create_counters` said so once).
    no_counters: bool,
    single: Vec<Option<Arc<RssQp>>>,
    qps: Vec<Arc<RawQp>>,
    wqs: Vec<Arc<Wq>>,
    pd: Pd,
    /// The device port the rules match on.
    port: u8,
    /// Key and fields of the hashing QPs of RSS rules.
    rss: RssConfig,
}

impl Rules {
    fn wq(&self, q: u16) -> Result<Arc<Wq>> {
        self.wqs
            .get(q as usize)
            .cloned()
            .ok_or_else(|| Error::Config(format!("rule names queue {q}, which does not exist")))
    }

    /// Compiles and attaches rule number `id` after the installed ones.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for an RSS rule on queues that receive on their QPs (no receive
    /// WQs to spread over: the port was opened without an RSS rule); rule compilation errors;
    /// what [`flow::Flow::create`] reports.
    pub(crate) fn add(&mut self, id: u64, rule: &Rule) -> Result<()> {
        if self.wqs.is_empty() && matches!(rule.action, Action::Rss(_)) {
            return Err(Error::Unsupported(
                "an RSS rule on a verbs port opened without one: its queues receive on their \
                 QPs, which an RSS table cannot spread over; open the port with an RSS rule (its \
                 queues then receive on WQs) to add RSS rules later"
                    .into(),
            ));
        }
        for f in self.install_rule(id, rule)? {
            self.flows.push((id, f));
        }
        Ok(())
    }

    /// The flows of rule number `id`: one, or for an RSS rule one per hashing QP
    /// ([`rss::rss_parts`]), created in order. On an error the ones made are destroyed (dropped).
    fn install_rule(&mut self, id: u64, rule: &Rule) -> Result<Vec<flow::Flow>> {
        let counters = if self.no_counters {
            None
        } else {
            let c = counters::Counters::create(&self.pd)?;
            self.no_counters = c.is_none();
            c
        };
        let made = self.install_rule_counted(id, rule, counters.as_ref())?;
        if let Some(c) = counters {
            self.counters.push((id, c));
        }
        Ok(made)
    }

    /// [`Rules::install_rule`], each flow counting into `counters` when given.
    fn install_rule_counted(
        &mut self,
        id: u64,
        rule: &Rule,
        counters: Option<&counters::Counters>,
    ) -> Result<Vec<flow::Flow>> {
        if !matches!(rule.action, Action::Rss(_)) {
            let (mut bytes, target) = compile_rule(rule, id, self.port)?;
            if let Some(c) = counters {
                c.add_spec(&mut bytes);
            }
            return Ok(vec![self.install(&mut bytes, target, HashFields::NONE)?]);
        }
        let mut made = Vec::new();
        for part in rss::rss_parts(rule, &self.rss) {
            let (mut bytes, target) = compile_rule(&part.rule, id, self.port)?;
            if let Some(c) = counters {
                c.add_spec(&mut bytes);
            }
            let target = match target {
                // Nothing to hash: the first queue alone (as the hardware puts a frame whose
                // fields are absent, hash 0, on the table's first entry).
                FlowTarget::Rss(qs) if part.fields == HashFields::NONE => {
                    FlowTarget::Queue(qs.first().copied().unwrap_or(0))
                }
                t => t,
            };
            made.push(self.install(&mut bytes, target, part.fields)?);
        }
        Ok(made)
    }

    /// Detaches rule number `id`.
    ///
    /// # Errors
    /// [`Error::RuleHandle`] for a number not installed; [`Error::Os`] from
    /// `ibv_destroy_flow` (the rule is then forgotten all the same: libibverbs frees the
    /// handle).
    pub(crate) fn remove(&mut self, id: u64) -> Result<()> {
        if !self.flows.iter().any(|(r, _)| *r == id) {
            return Err(Error::RuleHandle(format!("no rule {id} is installed")));
        }
        let mut first_err = Ok(());
        let mut i = 0;
        while i < self.flows.len() {
            if self.flows[i].0 == id {
                let r = self.flows.remove(i).1.destroy();
                if first_err.is_ok() {
                    first_err = r;
                }
            } else {
                i += 1;
            }
        }
        // Its counters go once no flow uses them.
        self.counters.retain(|(r, _)| *r != id);
        first_err
    }

    /// Frames rule number `id` took (its counters object, read from the device); `None` where
    /// the device has no flow counters.
    ///
    /// # Errors
    /// [`Error::RuleHandle`] for a number not installed; [`Error::Os`] from
    /// `ibv_read_counters`.
    pub(crate) fn hits(&self, id: u64) -> Result<Option<u64>> {
        if !self.flows.iter().any(|(r, _)| *r == id) {
            return Err(Error::RuleHandle(format!("no rule {id} is installed")));
        }
        self.counters
            .iter()
            .find(|(r, _)| *r == id)
            .map(|(_, c)| c.packets())
            .transpose()
    }

    /// Attaches one compiled rule.
    fn install(
        &mut self,
        bytes: &mut [u8],
        target: FlowTarget,
        fields: HashFields,
    ) -> Result<flow::Flow> {
        let qp: Arc<dyn QueuePair> = match target {
            FlowTarget::Queue(q) if self.wqs.is_empty() => {
                self.qps.get(q as usize).cloned().ok_or_else(|| {
                    Error::Config(format!("rule names queue {q}, which does not exist"))
                })?
            }
            FlowTarget::Queue(q) => {
                // Receives go to WQs: reach one through a one-entry table (no hashing).
                if let Some(Some(h)) = self.single.get(q as usize) {
                    h.clone()
                } else {
                    let wq = self.wq(q)?;
                    let t = Arc::new(IndTable::new(self.pd.context(), &[wq])?);
                    let h = Arc::new(RssQp::create(
                        &self.pd,
                        t,
                        &DEFAULT_TOEPLITZ_KEY,
                        HashFields::NONE,
                    )?);
                    self.single.resize(self.wqs.len(), None);
                    self.single[q as usize] = Some(h.clone());
                    h
                }
            }
            FlowTarget::Rss(qs) => {
                let wqs = qs.iter().map(|&q| self.wq(q)).collect::<Result<Vec<_>>>()?;
                let t = Arc::new(IndTable::new(self.pd.context(), &wqs)?);
                Arc::new(RssQp::create(&self.pd, t, &self.rss.key, fields)?)
            }
            FlowTarget::Drop => self
                .qps
                .first()
                .cloned()
                .ok_or_else(|| Error::Config("a port needs a queue".into()))?,
        };
        flow::Flow::create(qp, bytes)
    }
}

impl crate::backend::Control for Rules {
    fn link_source(&self) -> crate::link::Source {
        link::source(self.pd.context().name(), self.port)
    }

    fn device_counters(&self) -> crate::counters::DeviceCounters {
        crate::counters::Source::Rdma {
            device: self.pd.context().name().to_owned(),
            port: self.port,
        }
        .read()
    }

    fn add_rule(&mut self, id: u64, rule: &Rule) -> Result<()> {
        self.add(id, rule)
    }

    fn remove_rule(&mut self, id: u64) -> Result<()> {
        self.remove(id)
    }

    fn rule_hits(&self, id: u64) -> Result<Option<u64>> {
        self.hits(id)
    }
}

/// Compiles and attaches `rules` (numbered 0, 1, ...) for a port whose queues send on `qps`
/// and, when `wqs` is not empty, receive on `wqs` (otherwise on the QPs' own RQs). The result
/// owns the flows and every object they need; dropping it removes the rules. Used by the verbs
/// and DV backends.
///
/// # Errors
/// Rule compilation errors, and what [`flow::Flow::create`], [`IndTable::new`] and
/// [`RssQp::create`] report.
pub(crate) fn install_rules(
    pd: &Pd,
    qps: Vec<Arc<RawQp>>,
    wqs: Vec<Arc<Wq>>,
    rules: &[Rule],
    port: u8,
    rss: &RssConfig,
) -> Result<Rules> {
    let mut control = Rules {
        flows: Vec::new(),
        counters: Vec::new(),
        no_counters: false,
        single: Vec::new(),
        qps,
        wqs,
        pd: pd.clone(),
        port,
        rss: *rss,
    };
    for (i, rule) in rules.iter().enumerate() {
        for f in control.install_rule(i as u64, rule)? {
            control.flows.push((i as u64, f));
        }
    }
    Ok(control)
}

#[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
pub(crate) fn create_qp(pd: &Pd, tx_cq: Arc<Cq>, rx_cq: Arc<Cq>, caps: QpCaps) -> Result<RawQp> {
    create_qp_sg(pd, tx_cq, rx_cq, caps, 1, false)
}

/// As [`create_qp`], with receive WRs of up to `recv_sge` scatter entries, and the RQ
/// stripping VLAN tags when `strip` ([`RawQp::create_cvlan_stripping`]).
fn create_qp_sg(
    pd: &Pd,
    tx_cq: Arc<Cq>,
    rx_cq: Arc<Cq>,
    caps: QpCaps,
    recv_sge: u32,
    strip: bool,
) -> Result<RawQp> {
    if caps.max_tso_header > 0 {
        // Room for TSO headers asked first; a device that refuses it still gets a QP, without
        // TSO (the queue then refuses TSO requests: `Tx::set_max_tso` is not called).
        let r = create_qp_inline_or_not(pd, tx_cq.clone(), rx_cq.clone(), caps, recv_sge, strip);
        if let Ok(qp) = r {
            return Ok(qp);
        }
        let caps = QpCaps {
            max_tso_header: 0,
            ..caps
        };
        return create_qp_inline_or_not(pd, tx_cq, rx_cq, caps, recv_sge, strip);
    }
    create_qp_inline_or_not(pd, tx_cq, rx_cq, caps, recv_sge, strip)
}

fn create_qp_inline_or_not(
    pd: &Pd,
    tx_cq: Arc<Cq>,
    rx_cq: Arc<Cq>,
    caps: QpCaps,
    recv_sge: u32,
    strip: bool,
) -> Result<RawQp> {
    let create = if strip {
        RawQp::create_cvlan_stripping
    } else {
        RawQp::create_sg
    };
    match create(pd, tx_cq.clone(), rx_cq.clone(), caps, recv_sge) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && caps.max_inline_data > 0 => {
            // Some devices refuse inline data on RAW_PACKET QPs: go without.
            let caps = QpCaps {
                max_inline_data: 0,
                ..caps
            };
            create(pd, tx_cq, rx_cq, caps, recv_sge)
        }
        r => r,
    }
}

/// Opens a verbs port (see [`crate::Port::builder`]).
pub(crate) fn open(cfg: &PortConfig, pool: &Mempool) -> Result<crate::backend::Opened> {
    let Backend::Verbs { device, port } = &cfg.backend else {
        return Err(Error::Config("not a verbs backend".into()));
    };
    let port = *port;
    let ctx = device::open(device)?;
    let dev = ctx.query_device()?;
    if port == 0 || port > dev.phys_port_cnt {
        return Err(Error::Config(format!(
            "{device} has ports 1..={}; port {port} does not exist",
            dev.phys_port_cnt
        )));
    }
    let pa = ctx.query_port(port)?;
    if pa.link_layer != context::LINK_LAYER_ETHERNET {
        return Err(Error::Unsupported(format!(
            "{device} port {port} has link layer {}; RAW_PACKET queues need an Ethernet port",
            pa.link_layer_name()
        )));
    }
    if !cfg.rules.is_empty() && !dev.flow_steering() {
        return Err(Error::Unsupported(format!(
            "{device} has no flow steering (IBV_DEVICE_MANAGED_FLOW_STEERING); open it without \
             rules or enable steering in the driver"
        )));
    }
    let rss = cfg.rules.iter().any(|r| matches!(r.action, Action::Rss(_)));
    if rss && !dev.rss_raw_packet() {
        return Err(Error::Unsupported(format!(
            "{device} cannot do RSS on RAW_PACKET QPs (no receive WQ indirection tables)"
        )));
    }
    // VLAN stripping: the RQ (the QP's, or each WQ under RSS) strips, and the receive CQ is an
    // extended one, whose completions carry the tag (`Cq::with_cvlan`). Without stripping the
    // CQ stays the ordinary one polled with `ibv_poll_cq` (nothing to read beyond `ibv_wc`).
    let strip = cfg.vlan_strip;
    if strip && !dev.raw_cvlan_stripping() {
        return Err(Error::Unsupported(format!(
            "{device} cannot strip VLAN tags on RAW_PACKET queues (no \
             IBV_RAW_PACKET_CAP_CVLAN_STRIPPING); open the port without vlan_strip and read the \
             tag from the frame"
        )));
    }
    let pd = Pd::new(&ctx)?;
    let mr = Arc::new(Mr::register_pool(&pd, pool)?);
    // A port MTU: each receive WR scatters a frame over as many pool buffers as the largest
    // one needs (several SGEs, as DPDK's scattered Rx posts several segments per WQE), about
    // `rx_ring` buffers posted in all.
    let sges = cfg.max_frame().map_or(1, |f| {
        crate::config::scatter_segments(f, pool.buf_size() - pool.headroom() as u32)
    });
    if sges > dev.max_sge.max(1) {
        return Err(Error::Config(format!(
            "MTU {}: a frame needs {sges} pool buffers, and {device} takes at most {} scatter \
             entries per receive (max_sge): use larger pool buffers (MempoolConfig::buf_size)",
            cfg.mtu.unwrap_or(0),
            dev.max_sge
        )));
    }
    let rx_wrs = (cfg.rx_ring / sges).max(1);
    let caps = QpCaps {
        max_send_wr: cfg.tx_ring,
        max_recv_wr: if rss { 0 } else { rx_wrs },
        max_send_sge: (tx::MAX_SGE as u32).min(dev.max_sge.max(1)),
        max_inline_data: INLINE_REQUEST,
        // Room for a TSO header in every send WQE where the device segments (`IBV_WR_TSO`).
        max_tso_header: if dev.raw_packet_max_tso() > 0 {
            crate::packet::MAX_TSO_HEADER as u16
        } else {
            0
        },
    };
    let mut queues = Vec::with_capacity(cfg.queues as usize);
    let mut qps = Vec::new();
    let mut wqs = Vec::new();
    for i in 0..cfg.queues {
        let tx_cq = Arc::new(Cq::new(&ctx, cfg.tx_ring)?);
        // The receive CQ reports to a completion channel of its own (event-driven receive);
        // without one (ibv_create_comp_channel failed) the queue polls only.
        let rx_cq = Arc::new(match channel::CompChannel::new(&ctx) {
            Ok(ch) if strip => Cq::with_cvlan(&ctx, cfg.rx_ring, Some(Arc::new(ch)))?,
            Err(_) if strip => Cq::with_cvlan(&ctx, cfg.rx_ring, None)?,
            Ok(ch) => Cq::with_channel(&ctx, cfg.rx_ring, Arc::new(ch))?,
            Err(_) => Cq::new(&ctx, cfg.rx_ring)?,
        });
        let recv_sge = if rss { 1 } else { sges };
        let qp = Arc::new(create_qp_sg(
            &pd,
            tx_cq.clone(),
            rx_cq.clone(),
            caps,
            recv_sge,
            strip && !rss,
        )?);
        qp.ready(port)?;
        let target = if rss {
            let wq = Arc::new(if strip {
                Wq::create_cvlan_stripping(&pd, rx_cq.clone(), rx_wrs, sges)?
            } else {
                Wq::create_sg(&pd, rx_cq.clone(), rx_wrs, sges)?
            });
            wqs.push(wq.clone());
            RecvTarget::Wq(wq)
        } else {
            RecvTarget::Qp(qp.clone())
        };
        let ctl = VerbsControl {
            qp: qp.clone(),
            wq: match &target {
                RecvTarget::Wq(w) => Some(w.clone()),
                RecvTarget::Qp(_) => None,
            },
            port,
        };
        let notify_cq = rx_cq.clone();
        let mut rx = Rx::new(i, target, rx_cq, mr.lkey(), rx_wrs, pool).with_scatter(sges);
        if strip {
            rx = rx.with_vlan_strip();
        }
        let q = VerbsQueue::new(
            rx,
            {
                let mut tx = Tx::new(i, qp.clone(), tx_cq, mr.lkey(), dev.raw_ip_csum());
                tx.set_max_frame(cfg.max_frame());
                if qp.caps().max_tso_header > 0 {
                    tx.set_max_tso(dev.raw_packet_max_tso());
                }
                tx
            },
            Box::new(ctl),
            pool,
            mr.clone(),
        )?
        .with_notify_cq(notify_cq);
        qps.push(qp);
        queues.push(Queue::new(i, Box::new(q)));
    }
    let tso_max = if caps.max_tso_header > 0 {
        dev.raw_packet_max_tso()
    } else {
        0
    };
    let control = Box::new(install_rules(&pd, qps, wqs, &cfg.rules, port, &cfg.rss)?);
    let info = PortInfo {
        backend: "verbs",
        device: format!("{device} port {port}"),
        mode: if rss {
            "RAW_PACKET QPs, RSS over receive WQs".into()
        } else {
            "RAW_PACKET QPs".into()
        },
        queues: cfg.queues,
        offloads: crate::config::Offloads {
            // rawq's verbs receive path reads no completion timestamps.
            rx_timestamps: crate::config::Offload::Absent,
            // ibv_post_send has no tag insertion: rawq inserts it (ibverbs/tx.rs).
            vlan_insert: crate::config::Offload::Software,
            // The RQs strip when the device can (`IBV_RAW_PACKET_CAP_CVLAN_STRIPPING`), the tag
            // read from the extended CQ (see `vlan_strip` above).
            vlan_strip: if dev.raw_cvlan_stripping() {
                crate::config::Offload::Hardware
            } else {
                crate::config::Offload::Absent
            },
            ..crate::config::Offloads::mlx5(dev.raw_ip_csum(), tso_max)
        },
    };
    Ok((queues, info, control))
}
