//! [`ModelPort`]: a modelled NIC port with its own ring memory, built from [`Hw`] objects the
//! way a driver's control path builds them (per queue: TX CQ, RX CQ, SQ, RQ, a TIR; flows from
//! the rules, or one catch-all flow spreading over every queue by RSS).

use std::sync::{Arc, Mutex, MutexGuard};

use rawq_model::hw::{
    CqDesc, FlowDesc, FlowSpec, Hw, HwOptions, Masked, QueueState, RqDesc, RssHash, SqDesc, TirDesc,
};
use rawq_model::mem::{self, Geometry, QueueMem};
use rawq_model::HwTuning;

use super::{
    mini_cqe_of, netdev_of, ring_ptr, striding_of, wire_of, CqRing, DvCaps, ModelCounters,
    ModelOptions, ModelThread, ModelWire, QueueRings, RqRing, RxKind, SqRing,
};
use crate::dv::cq::{CqArm, MLX5_CQ_DOORBELL};
use crate::dv::notify::{CqEvents, RxNotify};
use crate::dv::queue::{DvQueue, Recover};
use crate::error::{Error, Result};
use crate::flow::{Action, IpMatch, L4Proto, Pattern, Rule};
use crate::mempool::Mempool;
use crate::sys::notify::EventFd;
use rawq_model::hw::HwEvent;

/// The device objects of one queue pair.
struct PortQ {
    mem: Arc<QueueMem>,
    sqn: u32,
    rqn: u32,
    txcqn: u32,
    rxcqn: u32,
    open: bool,
}

struct PortInner {
    opts: ModelOptions,
    qs: Vec<PortQ>,
    /// The device flow and TIR of each installed rule, by rule number, in installation order.
    rule_flows: Vec<(u64, u32, u32)>,
    /// The flow and TIR that spread every frame by RSS while the port has no rules.
    catch_all: Option<(u32, u32)>,
}

/// One modelled NIC port. Cheap to clone (a handle); `Send + Sync`.
#[derive(Clone)]
pub struct ModelPort {
    hw: Hw,
    inner: Arc<Mutex<PortInner>>,
    /// The eventfd of each open queue's receive CQ, by cqn, which the device's completion
    /// events signal (event-driven receive).
    notify: Notify,
}

/// The eventfd of each open queue's receive CQ, by cqn.
type Notify = Arc<Mutex<Vec<(u32, Arc<EventFd>)>>>;

/// Completion events of the model: the device's [`HwEvent::Completion`] for a receive CQ
/// signals that queue's eventfd (what wakes a sleeper when the device writes a CQE to an armed
/// CQ, as the interrupt behind a completion channel does on hardware).
#[derive(Debug)]
struct ModelEvents(Arc<EventFd>);

impl CqEvents for ModelEvents {
    fn fd(&self) -> std::os::fd::RawFd {
        self.0.raw()
    }

    fn take(&mut self) -> Result<u32> {
        Ok(self.0.take().min(u64::from(u32::MAX)) as u32)
    }
}

impl std::fmt::Debug for ModelPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelPort")
            .field("counters", &self.counters())
            .finish()
    }
}

/// The TIR hash of `rss`: its key, and the `IBV_RX_HASH_*` fields (rdma-core libibverbs/verbs.h
/// `enum ibv_rx_hash_fields`) of the versions it spreads (addresses: IPv4 0x3, IPv6 0xc) and,
/// for addresses and ports, TCP (0x30) and UDP (0xc0) ports. One TIR hashes them all here, as a
/// driver's per-traffic-type TIRs with one key would; a frame of a version not spread hashes
/// to 0, the table's first entry, as on verbs and dv.
fn rss_hash_of(rss: &crate::config::RssConfig) -> Option<RssHash> {
    let mut fields = 0u64;
    if rss.versions.spreads(false) {
        fields |= 0x3;
    }
    if rss.versions.spreads(true) {
        fields |= 0xc;
    }
    if rss.fields == crate::config::RssFields::IpPort {
        fields |= 0xf0;
    }
    Some(RssHash {
        key: rss.key.to_vec(),
        fields,
    })
}

impl ModelPort {
    /// Creates a port and its rings.
    ///
    /// # Errors
    /// [`Error::Config`] for bad options; [`Error::Os`] if the ring memory or the bridge socket
    /// cannot be had.
    pub fn new(opts: ModelOptions) -> Result<ModelPort> {
        opts.validate()?;
        let hw = Hw::with_tuning(
            HwOptions {
                min_inline: opts.min_inline,
                max_frame: opts.max_frame,
                flow_control: opts.flow_control,
                wire_capacity: opts.wire_capacity,
                wire: wire_of(&opts.wire),
                netdev: opts.netdev.as_ref().map(netdev_of),
                clock_khz: opts.clock_khz,
            },
            HwTuning {
                empw: opts.empw,
                tx_csum: opts.tx_csum,
                min_frame: opts.min_frame,
                tso: true,
            },
        )?;
        let (rq_stride, rxcq_want) = match opts.rx {
            RxKind::Cyclic { sges } => ((16 * sges).next_power_of_two(), opts.rq_wqes),
            // DPDK drivers/net/mlx5/mlx5_rxq.c `mlx5_rxq_cqe_num`: a striding RQ's CQ holds a
            // CQE per stride of every WQE (a filler takes the place of the strides it closes).
            // What rawq's control path asks libmlx5 for (`control::rq_sizing`: WQEs x strides,
            // not DPDK's one less), so that this port's CQ is the one libmlx5 gives rawq.
            RxKind::Striding(s) => (
                (16 * (1 + (1u32 << s.log_num_strides))).next_power_of_two(),
                opts.rq_wqes << s.log_num_strides,
            ),
        };
        // CQ sizes as libmlx5 gives them for what a driver asks: `align_queue_size(cqe + 1)`
        // (rdma-core providers/mlx5/verbs.c `create_cq`), for one CQE per SQ WQEBB and per RQ
        // WQE (stride).
        let cq_slots = |want: u32| (want + 1).next_power_of_two().clamp(64, 1 << 22);
        let g = Geometry {
            sq_cnt: opts.sq_wqebbs,
            txcq_cnt: cq_slots(opts.sq_wqebbs),
            rq_cnt: opts.rq_wqes,
            rq_stride,
            rxcq_cnt: match opts.rxcq_entries {
                0 => cq_slots(rxcq_want),
                n => n,
            },
        };
        let striding = match opts.rx {
            RxKind::Striding(s) => Some(striding_of(s)),
            RxKind::Cyclic { .. } => None,
        };
        let mut qs = Vec::new();
        for i in 0..opts.queues as u32 {
            let m = Arc::new(QueueMem::new(g)?);
            let a = |off: usize| m.ptr(off) as usize;
            // SAFETY: every ring below lies in `m`, which the port keeps (in `qs`) as long as
            // the device objects exist: they are destroyed only with the device.
            let q = unsafe {
                let txcqn = hw.create_cq(CqDesc {
                    buf: a(m.txcq),
                    cqe_cnt: g.txcq_cnt,
                    cqe_size: 64,
                    dbrec: a(m.db + mem::DB_TXCQ),
                    compression: None,
                })?;
                let rxcqn = hw.create_cq(CqDesc {
                    buf: a(m.rxcq),
                    cqe_cnt: g.rxcq_cnt,
                    cqe_size: 64,
                    dbrec: a(m.db + mem::DB_RXCQ),
                    compression: opts.cqe_compression.map(mini_cqe_of),
                })?;
                // The CQ doorbell rawq's arm rings (crate::dv::cq::CqArm) on the fake UAR page.
                hw.set_cq_uar(rxcqn, a(m.uar) + MLX5_CQ_DOORBELL)?;
                let sqn = hw.create_sq(SqDesc {
                    buf: a(m.sq),
                    wqe_cnt: g.sq_cnt,
                    dbrec: a(m.db + mem::DB_SQ),
                    uar: a(m.uar + mem::BF_OFFSET),
                    cqn: txcqn,
                    user_index: 2 * i,
                })?;
                let rqn = hw.create_rq(RqDesc {
                    buf: a(m.rq),
                    wqe_cnt: g.rq_cnt,
                    stride: g.rq_stride,
                    dbrec: a(m.db + mem::DB_RQ),
                    cqn: rxcqn,
                    striding,
                    user_index: 2 * i + 1,
                })?;
                PortQ {
                    mem: m.clone(),
                    sqn,
                    rqn,
                    txcqn,
                    rxcqn,
                    open: false,
                }
            };
            hw.set_rq_vlan_strip(q.rqn, opts.vlan_strip)?;
            qs.push(q);
        }
        let rqns: Vec<u32> = qs.iter().map(|q| q.rqn).collect();
        let catch_all = if opts.rules.is_empty() {
            Some(create_catch_all(&hw, &rqns, &opts.rss)?)
        } else {
            None
        };
        let mut rule_flows = Vec::new();
        for (k, r) in opts.rules.iter().enumerate() {
            let (flow, tir) = create_rule_flow(&hw, &rqns, r, k as u64, &opts.rss)?;
            rule_flows.push((k as u64, flow, tir));
        }
        let notify: Notify = Arc::default();
        let n2 = notify.clone();
        hw.set_event_sink(Box::new(move |ev| {
            if let HwEvent::Completion { cqn } = ev {
                let n = n2.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((_, fd)) = n.iter().find(|(c, _)| *c == cqn) {
                    fd.signal();
                }
            }
        }));
        Ok(ModelPort {
            hw,
            notify,
            inner: Arc::new(Mutex::new(PortInner {
                opts,
                qs,
                rule_flows,
                catch_all,
            })),
        })
    }

    /// Installs `rule` as rule number `id` while the port runs: a TIR and a flow on the device,
    /// created after every flow there (among equal priorities the device tries flows in the
    /// order of their numbers, which it reuses: an added rule overlapping an installed one of
    /// the same priority may be tried before it). Its frames carry the flow tag `id + 1`
    /// (modulo the 24-bit tag). On a port without rules, whose frames the catch-all RSS flow
    /// takes, the first rule replaces that flow: from then on frames no rule takes go to the
    /// kernel, as if the port had been opened with the rule.
    ///
    /// # Errors
    /// [`Error::Config`] for a rule naming a queue the port lacks, or when the device refuses.
    pub fn add_rule(&self, id: u64, rule: &Rule) -> Result<()> {
        let mut inner = self.lock();
        rule.validate(inner.qs.len() as u16)?;
        let rqns: Vec<u32> = inner.qs.iter().map(|q| q.rqn).collect();
        let rss = inner.opts.rss;
        let (flow, tir) = create_rule_flow(&self.hw, &rqns, rule, id, &rss)?;
        inner.rule_flows.push((id, flow, tir));
        if let Some((flow, tir)) = inner.catch_all.take() {
            self.hw.destroy_flow(flow)?;
            self.hw.destroy_tir(tir)?;
        }
        Ok(())
    }

    /// Removes rule number `id` (its flow, then its TIR). Removing the last rule brings back
    /// the catch-all RSS flow of a port without rules.
    ///
    /// # Errors
    /// [`Error::RuleHandle`] for a number not installed; [`Error::Config`] when the device
    /// refuses.
    pub fn remove_rule(&self, id: u64) -> Result<()> {
        let mut inner = self.lock();
        let Some(at) = inner.rule_flows.iter().position(|(r, _, _)| *r == id) else {
            return Err(Error::RuleHandle(format!(
                "the model port has no rule {id}"
            )));
        };
        if inner.rule_flows.len() == 1 {
            let rqns: Vec<u32> = inner.qs.iter().map(|q| q.rqn).collect();
            let rss = inner.opts.rss;
            inner.catch_all = Some(create_catch_all(&self.hw, &rqns, &rss)?);
        }
        let (_, flow, tir) = inner.rule_flows.remove(at);
        self.hw.destroy_flow(flow)?;
        self.hw.destroy_tir(tir)?;
        Ok(())
    }

    /// Frames rule number `id` has taken since it was installed: its device flow's counter
    /// ([`Hw::flow_hits`]; a drop rule counts the frames it dropped).
    ///
    /// # Errors
    /// [`Error::RuleHandle`] for a number not installed.
    pub fn rule_hits(&self, id: u64) -> Result<u64> {
        let inner = self.lock();
        let Some(&(_, flow, _)) = inner.rule_flows.iter().find(|(r, _, _)| *r == id) else {
            return Err(Error::RuleHandle(format!(
                "the model port has no rule {id}"
            )));
        };
        Ok(self.hw.flow_hits(flow)?)
    }

    fn lock(&self) -> MutexGuard<'_, PortInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device underneath.
    pub fn hw(&self) -> &Hw {
        &self.hw
    }

    /// Two ports whose wires are joined: what one sends, the other receives.
    ///
    /// # Errors
    /// As [`ModelPort::new`].
    pub fn pair(a: ModelOptions, b: ModelOptions) -> Result<(ModelPort, ModelPort)> {
        let pa = ModelPort::new(ModelOptions {
            wire: ModelWire::Sink,
            ..a
        })?;
        let pb = ModelPort::new(ModelOptions {
            wire: ModelWire::Sink,
            ..b
        })?;
        Hw::connect(&pa.hw, &pb.hw);
        Ok((pa, pb))
    }

    /// The capabilities a driver sees on this port.
    pub fn caps(&self) -> DvCaps {
        self.lock().opts.caps()
    }

    /// The receive queue type the port's RQs were made with (cyclic, or striding and its
    /// geometry).
    pub fn rx_kind(&self) -> RxKind {
        self.lock().opts.rx
    }

    /// Opens queue `i`: registers `pool`, makes its SQ and RQ ready, gives its rings.
    pub(crate) fn open_queue(&self, i: u16, pool: &Mempool) -> Result<(QueueRings, Arc<QueueMem>)> {
        let (start, len) = pool.region();
        let (start, len) = (start as u64, len as u64);
        let found = self.hw.find_mr(start, len);
        let lkey = match found {
            Some(k) => k,
            None => self.hw.reg_mr(start, len)?,
        };
        let mut inner = self.lock();
        let opts = inner.opts.clone();
        let Some(q) = inner.qs.get_mut(i as usize) else {
            return Err(Error::Config(format!("model queue {i} does not exist")));
        };
        if q.open {
            return Err(Error::Config(format!("model queue {i} is already open")));
        }
        self.hw.set_sq_state(q.sqn, QueueState::Reset)?;
        self.hw.set_rq_state(q.rqn, QueueState::Reset)?;
        self.hw.set_sq_state(q.sqn, QueueState::Ready)?;
        self.hw.set_rq_state(q.rqn, QueueState::Ready)?;
        q.open = true;
        let rings = rings_of(q, lkey, &opts)?;
        Ok((rings, q.mem.clone()))
    }

    fn close_queue(&self, i: usize) {
        let mut inner = self.lock();
        if let Some(q) = inner.qs.get_mut(i) {
            q.open = false;
            let _ = self.hw.set_sq_state(q.sqn, QueueState::Reset);
            let _ = self.hw.set_rq_state(q.rqn, QueueState::Reset);
        }
    }

    /// Resets queue `i`'s SQ (`true`) or RQ (`false`) through RST → RDY, as a driver's
    /// recovery does with `ibv_modify_qp` / `ibv_modify_wq`.
    fn reset(&self, i: usize, sq: bool) {
        let inner = self.lock();
        if let Some(q) = inner.qs.get(i) {
            type SetState = fn(&Hw, u32, QueueState) -> rawq_model::Result<()>;
            let (n, set): (u32, SetState) = if sq {
                (q.sqn, Hw::set_sq_state)
            } else {
                (q.rqn, Hw::set_rq_state)
            };
            let _ = set(&self.hw, n, QueueState::Reset);
            if q.open {
                let _ = set(&self.hw, n, QueueState::Ready);
            }
        }
    }

    /// Registers `pool` (once per pool) and returns the data path of queue `i` over the model's
    /// rings. Each queue can be opened once.
    ///
    /// # Errors
    /// [`Error::Config`] if `i` does not exist or is already open, or the ring geometry does
    /// not suit the pool.
    pub fn queue(&self, i: u16, pool: &Mempool) -> Result<DvQueue> {
        let (rings, keep) = self.open_queue(i, pool)?;
        let hook = ModelRecover {
            port: self.clone(),
            q: i as usize,
        };
        let uar = keep.ptr(keep.uar);
        // SAFETY: `rings` points into `keep` (the queue's ring mapping), which the DvQueue owns
        // until it is dropped; the model touches it only as the device side; `rings.lkey`
        // registers the whole region of `pool` with this model port.
        let q = unsafe { DvQueue::new(i, rings, pool, Box::new(hook), Box::new(keep)) };
        let q = match q {
            Ok(q) => q,
            Err(e) => {
                self.close_queue(i as usize);
                return Err(e);
            }
        };
        let cqn = rings.rx_cq.cqn;
        let ev = Arc::new(EventFd::new()?);
        {
            let mut n = self.notify.lock().unwrap_or_else(|p| p.into_inner());
            n.retain(|(c, _)| *c != cqn);
            n.push((cqn, ev.clone()));
        }
        let Some(uar) = std::ptr::NonNull::new(uar) else {
            return Ok(q);
        };
        // SAFETY: the record and the fake UAR page are in the queue's ring mapping, which the
        // queue owns (`keep`) for as long as it arms.
        let arm = unsafe { CqArm::new(rings.rx_cq.dbrec, uar, cqn) };
        Ok(q.with_rx_notify(RxNotify::new(arm, Box::new(ModelEvents(ev)))))
    }

    /// The raw rings of queue `i` (for a data path of your own), registering `pool`. The box
    /// owns the ring memory: keep it alive as long as the rings are used. Each queue can be
    /// opened once. [`ModelPort::recover_hook`] gives the matching recovery hook.
    ///
    /// # Errors
    /// As [`ModelPort::queue`].
    pub fn rings(
        &self,
        i: u16,
        pool: &Mempool,
    ) -> Result<(QueueRings, Box<dyn std::any::Any + Send>)> {
        let (rings, keep) = self.open_queue(i, pool)?;
        Ok((rings, Box::new(keep)))
    }

    /// The recovery hook of queue `i` (resets the model's side of that queue).
    pub fn recover_hook(&self, i: u16) -> Box<dyn Recover> {
        Box::new(ModelRecover {
            port: self.clone(),
            q: i as usize,
        })
    }

    /// Does one round of device work in the calling thread: send WQEs, the wire, receive,
    /// completions. Also checks each doorbell's UAR write. Returns how many work items (WQEs,
    /// frames, CQEs) it handled.
    pub fn process(&self) -> usize {
        self.hw.process_stepped()
    }

    /// Runs the port in a thread of its own until the returned handle is dropped (pinned to
    /// [`ModelOptions::model_cpu`] if set).
    pub fn spawn(&self) -> ModelThread {
        let cpu = self.lock().opts.model_cpu;
        self.spawn_on(cpu)
    }

    /// Runs the port in a thread of its own, pinned to `cpu` if given.
    pub fn spawn_on(&self, cpu: Option<usize>) -> ModelThread {
        self.hw.spawn(cpu).unwrap_or_else(ModelThread::stopped)
    }

    /// The clock that stamps the port's completions ([`ModelOptions::clock_khz`]); `None`
    /// without one.
    pub fn device_clock(&self) -> Option<crate::dv::cq::DeviceClock> {
        self.hw
            .device_clock()
            .map(|c| crate::dv::cq::DeviceClock::since(c.epoch(), c.khz()))
    }

    /// The port's counters.
    pub fn counters(&self) -> ModelCounters {
        self.hw.counters()
    }

    fn sqn(&self, q: u16) -> Option<u32> {
        self.lock().qs.get(q as usize).map(|x| x.sqn)
    }

    /// Makes the `nth` send WQE from now on queue `q` (0 = the next one) fail with `syndrome`.
    pub fn inject_tx_error(&self, q: u16, nth: u64, syndrome: u8) {
        if let Some(n) = self.sqn(q) {
            self.hw.inject_tx_error(n, nth, syndrome);
        }
    }

    /// Holds back the send completions of queue `q` for `steps` calls of `process`.
    pub fn delay_tx_completions(&self, q: u16, steps: u64) {
        if let Some(n) = self.sqn(q) {
            self.hw.delay_tx_completions(n, steps);
        }
    }

    /// Puts `frame` on the wire in front of this port, as if it had been received.
    pub fn inject_frame(&self, frame: &[u8]) {
        self.hw.inject_frame(frame);
    }

    /// Turns flow control on or off (see [`ModelOptions::flow_control`]).
    pub fn set_flow_control(&self, on: bool) {
        self.lock().opts.flow_control = on;
        self.hw.set_flow_control(on);
    }

    /// The device numbers of queue `q`: (sqn, rqn, TX cqn, RX cqn).
    pub fn queue_objects(&self, q: u16) -> Option<(u32, u32, u32, u32)> {
        self.lock()
            .qs
            .get(q as usize)
            .map(|x| (x.sqn, x.rqn, x.txcqn, x.rxcqn))
    }
}

struct ModelRecover {
    port: ModelPort,
    q: usize,
}

impl Recover for ModelRecover {
    fn recover_sq(&mut self) -> Result<()> {
        self.port.reset(self.q, true);
        Ok(())
    }
    fn recover_rq(&mut self) -> Result<()> {
        self.port.reset(self.q, false);
        Ok(())
    }
    fn quiesce(&mut self) {
        self.port.close_queue(self.q);
    }
    /// The device's stop of the SQ (`Hw::stop_sq`): answered between two rounds of the
    /// device's work, it says how far the device got.
    fn stop_sq(&mut self) -> Option<u16> {
        let sqn = self.port.sqn(self.q as u16)?;
        self.port.hw.stop_sq(sqn).ok()
    }
}

/// The flow that takes every frame, spread by RSS over all queues (a port without rules).
fn create_catch_all(hw: &Hw, rqns: &[u32], rss: &crate::config::RssConfig) -> Result<(u32, u32)> {
    let tirn = hw.create_tir_any(TirDesc {
        rqns: rqns.to_vec(),
        hash: rss_hash_of(rss),
    })?;
    let flow = hw.create_flow(FlowDesc {
        tirn,
        priority: 0,
        dont_trap: false,
        specs: Vec::new(),
    })?;
    Ok((flow, tirn))
}

/// The TIR and flow of rule number `id` (flow tag `id + 1`, wrapped to 24 bits).
fn create_rule_flow(
    hw: &Hw,
    rqns: &[u32],
    r: &Rule,
    id: u64,
    rss: &crate::config::RssConfig,
) -> Result<(u32, u32)> {
    let rq = |q: u16| {
        rqns.get(q as usize)
            .copied()
            .ok_or_else(|| Error::Config(format!("rule names queue {q}, which does not exist")))
    };
    let table: Vec<u32> = match &r.action {
        Action::Queue(q) => vec![rq(*q)?],
        Action::Rss(set) => set.iter().map(|&q| rq(q)).collect::<Result<_>>()?,
        Action::Drop => vec![rq(0)?],
    };
    let tirn = hw.create_tir_any(TirDesc {
        rqns: table,
        hash: rss_hash_of(rss),
    })?;
    let tag = (id % crate::flow::verbs::MAX_FLOW_TAG as u64) as u32 + 1;
    match hw.create_flow(rule_to_flow(r, tirn, tag)) {
        Ok(flow) => Ok((flow, tirn)),
        Err(e) => {
            let _ = hw.destroy_tir(tirn);
            Err(e.into())
        }
    }
}

/// A rule as the flow specs the verbs backend would give the kernel (src/flow/verbs.rs), plus a
/// Tag spec carrying `tag` (the rule's index + 1) unless it drops.
fn rule_to_flow(r: &Rule, tirn: u32, tag: u32) -> FlowDesc {
    let p: &Pattern = &r.pattern;
    let mut specs = Vec::new();
    let mac = |m: Option<crate::flow::MacMatch>| {
        m.map_or(Masked::default(), |m| Masked {
            value: m.addr,
            mask: m.mask,
        })
    };
    let ether_type = p
        .ethertype
        .or(match p.ip {
            Some(IpMatch::V4 { .. }) => Some(0x0800),
            Some(IpMatch::V6 { .. }) => Some(0x86dd),
            None => None,
        })
        .map_or(Masked::default(), |t| Masked {
            value: t,
            mask: 0xffff,
        });
    specs.push(FlowSpec::Eth {
        dst: mac(p.dst_mac),
        src: mac(p.src_mac),
        ether_type,
        vlan_tag: p.vlan.map_or(Masked::default(), |v| Masked {
            value: v,
            mask: 0x0fff,
        }),
    });
    let proto = p.ip_proto.map_or(Masked::default(), |v| Masked {
        value: v,
        mask: 0xff,
    });
    let v4 = |n: Option<crate::flow::Ipv4Net>| {
        n.map_or(Masked::default(), |n| Masked {
            value: n.addr.octets(),
            mask: n.mask().to_be_bytes(),
        })
    };
    let v6 = |n: Option<crate::flow::Ipv6Net>| {
        n.map_or(Masked::default(), |n| Masked {
            value: n.addr.octets(),
            mask: n.mask().to_be_bytes(),
        })
    };
    match (p.ip, p.ethertype) {
        (Some(IpMatch::V4 { src, dst }), _) => specs.push(FlowSpec::Ipv4 {
            src: v4(src),
            dst: v4(dst),
            proto,
            tos: Masked::default(),
        }),
        (Some(IpMatch::V6 { src, dst }), _) => specs.push(FlowSpec::Ipv6 {
            src: v6(src),
            dst: v6(dst),
            next_hdr: proto,
            flow_label: Masked::default(),
            traffic_class: Masked::default(),
        }),
        (None, Some(0x0800)) if p.ip_proto.is_some() => specs.push(FlowSpec::Ipv4 {
            src: Masked::default(),
            dst: Masked::default(),
            proto,
            tos: Masked::default(),
        }),
        (None, Some(0x86dd)) if p.ip_proto.is_some() => specs.push(FlowSpec::Ipv6 {
            src: Masked::default(),
            dst: Masked::default(),
            next_hdr: proto,
            flow_label: Masked::default(),
            traffic_class: Masked::default(),
        }),
        _ => {}
    }
    if let Some(l4) = p.l4 {
        let port = |v: Option<u16>| {
            v.map_or(Masked::default(), |v| Masked {
                value: v,
                mask: 0xffff,
            })
        };
        let (src, dst) = (port(l4.src_port), port(l4.dst_port));
        specs.push(match l4.proto {
            L4Proto::Tcp => FlowSpec::Tcp { src, dst },
            L4Proto::Udp => FlowSpec::Udp { src, dst },
        });
    }
    if r.action == Action::Drop {
        specs.push(FlowSpec::Drop);
    } else {
        specs.push(FlowSpec::Tag(tag));
    }
    FlowDesc {
        tirn,
        priority: r.priority,
        // As the verbs backend asks (src/flow/verbs.rs): multicast non-drop rules leave the
        // kernel its copy, and rank as the kernel's tables say.
        dont_trap: crate::flow::order::dont_trap(r),
        specs,
    }
}

fn rings_of(q: &PortQ, lkey: u32, opts: &ModelOptions) -> Result<QueueRings> {
    let m = &q.mem;
    let g = m.g;
    Ok(QueueRings {
        sq: SqRing {
            buf: ring_ptr(m.ptr(m.sq))?,
            wqe_cnt: g.sq_cnt,
            dbrec: ring_ptr(m.ptr(m.db + mem::DB_SQ))?,
            bf_reg: ring_ptr(m.ptr(m.uar + mem::BF_OFFSET))?,
            bf_size: mem::BF_SIZE,
            sqn: q.sqn,
        },
        tx_cq: CqRing {
            buf: ring_ptr(m.ptr(m.txcq))?,
            cqe_cnt: g.txcq_cnt,
            cqe_size: 64,
            dbrec: ring_ptr(m.ptr(m.db + mem::DB_TXCQ))?,
            cqn: q.txcqn,
        },
        rq: RqRing {
            buf: ring_ptr(m.ptr(m.rq))?,
            wqe_cnt: g.rq_cnt,
            stride: g.rq_stride,
            dbrec: ring_ptr(m.ptr(m.db + mem::DB_RQ))?,
            striding: match opts.rx {
                RxKind::Striding(s) => Some(s),
                RxKind::Cyclic { .. } => None,
            },
        },
        rx_cq: CqRing {
            buf: ring_ptr(m.ptr(m.rxcq))?,
            cqe_cnt: g.rxcq_cnt,
            cqe_size: 64,
            dbrec: ring_ptr(m.ptr(m.db + mem::DB_RXCQ))?,
            cqn: q.rxcqn,
        },
        lkey,
        caps: opts.caps(),
    })
}
