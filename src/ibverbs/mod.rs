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

pub mod context;
pub mod cq;
pub mod device;
pub mod flow;
mod inline;
pub mod mr;
pub mod pd;
pub mod qp;
pub mod rss;
pub mod wq;

mod queue;
mod rx;
#[cfg(test)]
mod tests;
mod tx;

use std::any::Any;
use std::sync::Arc;

use crate::config::{Backend, PortConfig, PortInfo};
use crate::error::{Error, Result};
use crate::flow::{Action, IpMatch, Rule};
use crate::mempool::Mempool;
use crate::queue::Queue;

pub use context::Context;
pub use device::{describe_all, DeviceList};

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
/// Per-rule hit counters are not offered here. On mlx5 a flow counts only when created with an
/// `IBV_FLOW_SPEC_ACTION_COUNT` spec naming an `ibv_counters` object (`ibv_create_counters`,
/// then `ibv_attach_counters_point_flow` to describe packets/bytes, read back with
/// `ibv_read_counters`; rdma-core's libibverbs man pages of those calls). The object lives in
/// the ioctl uAPI (`UVERBS_OBJECT_COUNTERS`; the kernel binds it to the flow's steering
/// counter in drivers/infiniband/hw/mlx5/counters.c `mlx5_ib_flow_counters_set_data`), which
/// the emulated NIC does not serve. rawq creates no such object, so `Port::rule_hits` is `None`
/// on verbs and DV.
pub(crate) struct Rules {
    flows: Vec<(u64, flow::Flow)>,
    single: Vec<Option<Arc<RssQp>>>,
    qps: Vec<Arc<RawQp>>,
    wqs: Vec<Arc<Wq>>,
    pd: Pd,
    /// The device port the rules match on.
    port: u8,
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
        let (mut bytes, target) = compile_rule(rule, id, self.port)?;
        let f = self.install(&mut bytes, target, rule)?;
        self.flows.push((id, f));
        Ok(())
    }

    /// Detaches rule number `id`.
    ///
    /// # Errors
    /// [`Error::RuleHandle`] for a number not installed; [`Error::Os`] from
    /// `ibv_destroy_flow` (the rule is then forgotten all the same: libibverbs frees the
    /// handle).
    pub(crate) fn remove(&mut self, id: u64) -> Result<()> {
        let at = self
            .flows
            .iter()
            .position(|(r, _)| *r == id)
            .ok_or_else(|| Error::RuleHandle(format!("no rule {id} is installed")))?;
        self.flows.remove(at).1.destroy()
    }

    /// Attaches one compiled rule.
    fn install(&mut self, bytes: &mut [u8], target: FlowTarget, rule: &Rule) -> Result<flow::Flow> {
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
                Arc::new(RssQp::create(
                    &self.pd,
                    t,
                    &DEFAULT_TOEPLITZ_KEY,
                    hash_fields(rule),
                )?)
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

impl crate::port::Control for Rules {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn add_rule(&mut self, id: u64, rule: &Rule) -> Result<()> {
        self.add(id, rule)
    }

    fn remove_rule(&mut self, id: u64) -> Result<()> {
        self.remove(id)
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
) -> Result<Rules> {
    let mut control = Rules {
        flows: Vec::new(),
        single: Vec::new(),
        qps,
        wqs,
        pd: pd.clone(),
        port,
    };
    for (i, rule) in rules.iter().enumerate() {
        let (mut bytes, target) = compile_rule(rule, i as u64, port)?;
        let f = control.install(&mut bytes, target, rule)?;
        control.flows.push((i as u64, f));
    }
    Ok(control)
}

/// What an RSS rule hashes on: the addresses of its IP version and the ports of its transport.
/// A rule that names no IP version hashes IPv4: the kernel refuses an RSS QP without hash fields
/// over a table of more than one WQ, and one with IPv4 and IPv6 fields together (EINVAL, Linux
/// `drivers/infiniband/hw/mlx5/qp.c` `create_rss_raw_qp_tir`).
fn hash_fields(rule: &Rule) -> HashFields {
    let l4 = rule.pattern.l4.map(|l| l.proto);
    match rule.pattern.ip {
        Some(IpMatch::V4 { .. }) => HashFields::for_ip(false, l4),
        Some(IpMatch::V6 { .. }) => HashFields::for_ip(true, l4),
        None => HashFields::for_ip(rule.pattern.ethertype == Some(0x86dd), l4),
    }
}

pub(crate) fn create_qp(pd: &Pd, tx_cq: Arc<Cq>, rx_cq: Arc<Cq>, caps: QpCaps) -> Result<RawQp> {
    if caps.max_tso_header > 0 {
        // Room for TSO headers asked first; a device that refuses it still gets a QP, without
        // TSO (the queue then refuses TSO requests: `Tx::set_max_tso` is not called).
        if let Ok(qp) = create_qp_inline_or_not(pd, tx_cq.clone(), rx_cq.clone(), caps) {
            return Ok(qp);
        }
        let caps = QpCaps {
            max_tso_header: 0,
            ..caps
        };
        return create_qp_inline_or_not(pd, tx_cq, rx_cq, caps);
    }
    create_qp_inline_or_not(pd, tx_cq, rx_cq, caps)
}

fn create_qp_inline_or_not(pd: &Pd, tx_cq: Arc<Cq>, rx_cq: Arc<Cq>, caps: QpCaps) -> Result<RawQp> {
    match RawQp::create(pd, tx_cq.clone(), rx_cq.clone(), caps) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && caps.max_inline_data > 0 => {
            // Some devices refuse inline data on RAW_PACKET QPs: go without.
            RawQp::create(
                pd,
                tx_cq,
                rx_cq,
                QpCaps {
                    max_inline_data: 0,
                    ..caps
                },
            )
        }
        r => r,
    }
}

/// Opens a verbs port (see [`crate::Port::builder`]).
pub(crate) fn open(cfg: &PortConfig, pool: &Mempool) -> Result<crate::port::Opened> {
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
    let pd = Pd::new(&ctx)?;
    let mr = Arc::new(Mr::register_pool(&pd, pool)?);
    let caps = QpCaps {
        max_send_wr: cfg.tx_ring,
        max_recv_wr: if rss { 0 } else { cfg.rx_ring },
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
        let rx_cq = Arc::new(Cq::new(&ctx, cfg.rx_ring)?);
        let qp = Arc::new(create_qp(&pd, tx_cq.clone(), rx_cq.clone(), caps)?);
        qp.ready(port)?;
        let target = if rss {
            let wq = Arc::new(Wq::create(&pd, rx_cq.clone(), cfg.rx_ring)?);
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
        let q = VerbsQueue::new(
            Rx::new(i, target, rx_cq, mr.lkey(), cfg.rx_ring, pool),
            {
                let mut tx = Tx::new(i, qp.clone(), tx_cq, mr.lkey(), dev.raw_ip_csum());
                if qp.caps().max_tso_header > 0 {
                    tx.set_max_tso(dev.raw_packet_max_tso());
                }
                tx
            },
            Box::new(ctl),
            pool,
            mr.clone(),
        )?;
        qps.push(qp);
        queues.push(Queue::new(i, Box::new(q)));
    }
    let tso_max = if caps.max_tso_header > 0 {
        dev.raw_packet_max_tso()
    } else {
        0
    };
    let control = Box::new(install_rules(&pd, qps, wqs, &cfg.rules, port)?);
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
            ..crate::config::Offloads::mlx5(dev.raw_ip_csum(), tso_max)
        },
    };
    Ok((queues, info, control))
}

#[cfg(test)]
mod rule_tests {
    use super::*;
    use crate::flow::{Ipv4Net, L4Match, L4Proto, Pattern};

    #[test]
    fn rss_hashes_on_what_the_rule_matches() {
        let mut p = Pattern {
            ip: Some(IpMatch::V4 {
                src: None,
                dst: Some(Ipv4Net {
                    addr: [10, 0, 0, 1].into(),
                    prefix: 32,
                }),
            }),
            l4: Some(L4Match {
                proto: L4Proto::Udp,
                src_port: None,
                dst_port: Some(4789),
            }),
            ..Pattern::default()
        };
        let r = |p: &Pattern| Rule {
            pattern: p.clone(),
            priority: 0,
            action: Action::Rss(vec![0, 1]),
        };
        assert_eq!(
            hash_fields(&r(&p)),
            HashFields::for_ip(false, Some(L4Proto::Udp))
        );
        p.l4 = None;
        assert_eq!(hash_fields(&r(&p)), HashFields::for_ip(false, None));
        p.ip = None;
        p.ethertype = Some(0x86dd);
        assert_eq!(hash_fields(&r(&p)), HashFields::for_ip(true, None));
        // No IP version in the rule (pktgen's default "udp dst-port N -> rss"): the kernel
        // refuses an RSS QP without hash fields over more than one WQ (EINVAL), and one with
        // IPv4 and IPv6 fields together; hash IPv4 with the rule's ports.
        p.ethertype = None;
        p.l4 = Some(L4Match {
            proto: L4Proto::Udp,
            src_port: None,
            dst_port: Some(9000),
        });
        assert_eq!(
            hash_fields(&r(&p)),
            HashFields::for_ip(false, Some(L4Proto::Udp))
        );
        p.l4 = None;
        p.ethertype = Some(0x0806);
        assert_eq!(hash_fields(&r(&p)), HashFields::for_ip(false, None));
    }
}
