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
/// Compiles rule number `index` to the `ibv_create_flow` buffer, tagged `index + 1` (what its
/// frames' CQEs report as flow tag), and where its frames go.
fn compile_rule(rule: &Rule, index: usize, port: u8) -> Result<(Vec<u8>, FlowTarget)> {
    let c = crate::flow::verbs::compile_tagged(rule, port, Some(index as u32 + 1))?;
    Ok((c.bytes, c.target))
}

/// The control-path objects of a verbs port, kept in the port's control box. Drops the flows
/// first, then the hashing QPs, tables, and (through their `Arc`s) QPs, WQs, CQs, PD, context.
struct Control {
    flows: Vec<flow::Flow>,
    single: Vec<Option<Arc<RssQp>>>,
    qps: Vec<Arc<RawQp>>,
    wqs: Vec<Arc<Wq>>,
    pd: Pd,
}

impl Control {
    fn wq(&self, q: u16) -> Result<Arc<Wq>> {
        self.wqs
            .get(q as usize)
            .cloned()
            .ok_or_else(|| Error::Config(format!("rule names queue {q}, which does not exist")))
    }

    /// Attaches one compiled rule.
    fn install(&mut self, bytes: &mut [u8], target: FlowTarget, rule: &Rule) -> Result<()> {
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
        self.flows.push(flow::Flow::create(qp, bytes)?);
        Ok(())
    }
}

/// Compiles and attaches `rules` for a port whose queues send on `qps` and, when `wqs` is not
/// empty, receive on `wqs` (otherwise on the QPs' own RQs). The returned box owns the flows and
/// every object they need; dropping it removes the rules. Used by the verbs and DV backends.
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
) -> Result<Box<dyn Any + Send>> {
    let mut control = Control {
        flows: Vec::new(),
        single: Vec::new(),
        qps,
        wqs,
        pd: pd.clone(),
    };
    for (i, rule) in rules.iter().enumerate() {
        let (mut bytes, target) = compile_rule(rule, i, port)?;
        control.install(&mut bytes, target, rule)?;
    }
    Ok(Box::new(control))
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
pub(crate) fn open(
    cfg: &PortConfig,
    pool: &Mempool,
) -> Result<(Vec<Queue>, PortInfo, Box<dyn Any + Send>)> {
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
            Tx::new(i, qp.clone(), tx_cq, mr.lkey(), dev.raw_ip_csum()),
            Box::new(ctl),
            pool,
            mr.clone(),
        )?;
        qps.push(qp);
        queues.push(Queue::new(i, Box::new(q)));
    }
    let control = install_rules(&pd, qps, wqs, &cfg.rules, port)?;
    let info = PortInfo {
        backend: "verbs",
        device: format!("{device} port {port}"),
        mode: if rss {
            "RAW_PACKET QPs, RSS over receive WQs".into()
        } else {
            "RAW_PACKET QPs".into()
        },
        queues: cfg.queues,
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
