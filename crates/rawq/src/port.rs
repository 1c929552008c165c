//! Ports: a device or interface opened with a backend, its queues, and its flow rules.
//!
//! ```no_run
//! use rawq::{Backend, Port};
//! # fn main() -> rawq::Result<()> {
//! let mut port = Port::builder(Backend::Xdp { ifname: "veth0".into() })
//!     .queues(1)
//!     .open()?;
//! let mut q = port.take_queues().remove(0);
//! let mut pkts = Vec::with_capacity(32);
//! let n = q.rx_burst(&mut pkts, 32);
//! println!("received {n} packets");
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{Control, Opened};
pub use crate::config::{Backend, PortConfig, PortInfo, RxTimestamps};
pub use crate::dv::options::{CqeComp, DvRxOptions, RqType};
use crate::error::{Error, Result};
use crate::flow::Rule;
use crate::mempool::{Mempool, MempoolConfig};
use crate::queue::Queue;
use crate::stats::{QueueStats, StatsReader};

/// Builds a [`Port`].
#[derive(Debug)]
pub struct PortBuilder {
    cfg: PortConfig,
    pool: Option<Mempool>,
    pool_cfg: MempoolConfig,
}

impl PortBuilder {
    /// Number of queue pairs (default 1).
    pub fn queues(mut self, n: u16) -> Self {
        self.cfg.queues = n;
        self
    }

    /// Receive ring size per queue (default 1024).
    pub fn rx_ring(mut self, n: u32) -> Self {
        self.cfg.rx_ring = n;
        self
    }

    /// Transmit ring size per queue (default 1024).
    pub fn tx_ring(mut self, n: u32) -> Self {
        self.cfg.tx_ring = n;
        self
    }

    /// Adds a flow rule (installed when the port opens, removed when it closes).
    pub fn rule(mut self, rule: Rule) -> Self {
        self.cfg.rules.push(rule);
        self
    }

    /// Receive side of the mlx5 backends (dv and model): RQ type and CQE compression (see
    /// [`crate::dv::options`]).
    pub fn dv_rx(mut self, o: DvRxOptions) -> Self {
        self.cfg.dv_rx = o;
        self
    }

    /// Per-packet receive timestamps of an AF_XDP port (default off; ignored by the other
    /// backends).
    pub fn rx_timestamps(mut self, t: RxTimestamps) -> Self {
        self.cfg.rx_timestamps = t;
        self
    }

    /// Receive-side scaling of `rss` rules: key, hashed fields, IP versions (default:
    /// Microsoft's key, addresses and ports, IPv4 and IPv6; see [`crate::config::RssConfig`]).
    pub fn rss(mut self, rss: crate::config::RssConfig) -> Self {
        self.cfg.rss = rss;
        self
    }

    /// The port MTU (68 to [`MAX_MTU`](crate::config::MAX_MTU), 9198): frames of up to
    /// `mtu + 18` bytes (Ethernet header and one VLAN tag, no FCS) are received whole, over
    /// several pool buffers when one is too small (a chained [`Packet`](crate::Packet):
    /// scatter receive on dv, model and verbs), and a frame above that is refused on
    /// transmit: dropped, counted in `tx_errors` and said by `Queue::take_error`, never
    /// counted as sent. Default: the backend's (one buffer per received frame, no transmit
    /// check).
    ///
    /// A TSO super-frame is held to its segments (header + MSS) by the backend, which refuses
    /// segments above the largest frame as it refuses any TSO request it cannot carry out
    /// (counted in `tx_drops`).
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.cfg.mtu = Some(mtu);
        self
    }

    /// Strip one 802.1Q tag from received frames, the tag in
    /// [`RxMeta::vlan_tci`](crate::RxMeta::vlan_tci) (default off; dv, verbs and model only, the
    /// others refuse it: see [`PortConfig::vlan_strip`]).
    pub fn vlan_strip(mut self, on: bool) -> Self {
        self.cfg.vlan_strip = on;
        self
    }

    /// Adds several flow rules.
    pub fn rules(mut self, rules: impl IntoIterator<Item = Rule>) -> Self {
        self.cfg.rules.extend(rules);
        self
    }

    /// Uses an existing pool (otherwise one is made, sized for the rings).
    pub fn pool(mut self, pool: Mempool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Configuration for the pool the builder makes when none is given.
    pub fn pool_config(mut self, cfg: MempoolConfig) -> Self {
        self.pool_cfg = cfg;
        self
    }

    /// The configuration so far.
    pub fn config(&self) -> &PortConfig {
        &self.cfg
    }

    fn validate(&self) -> Result<()> {
        let c = &self.cfg;
        if c.queues == 0 || c.queues > 1024 {
            return Err(Error::Config(format!(
                "queues = {}: must be 1..=1024",
                c.queues
            )));
        }
        for (name, v) in [("rx_ring", c.rx_ring), ("tx_ring", c.tx_ring)] {
            if !v.is_power_of_two() || !(8..=32768).contains(&v) {
                return Err(Error::Config(format!(
                    "{name} = {v}: must be a power of two from 8 to 32768"
                )));
            }
        }
        crate::flow::validate_rules(&c.rules, c.queues)?;
        if let Some(m) = c.mtu {
            if !(68..=crate::config::MAX_MTU).contains(&m) {
                return Err(Error::Config(format!(
                    "mtu = {m}: must be 68..={} (frames of up to 9216 bytes)",
                    crate::config::MAX_MTU
                )));
            }
        }
        Ok(())
    }

    /// Opens the port: creates the pool if needed, the queues, and installs the rules.
    ///
    /// # Errors
    /// Configuration and rule errors, and whatever the backend reports (see [`Error`]).
    pub fn open(self) -> Result<Port> {
        self.validate()?;
        let pool = match self.pool {
            Some(p) => p,
            None => {
                let c = &self.cfg;
                // Each queue can hold a full rx and tx ring plus a burst in flight each way.
                let per_q = c.rx_ring + c.tx_ring + 2 * 64 + 2 * self.pool_cfg.cache_size;
                let mut pc = self.pool_cfg.clone();
                pc.buffers = pc.buffers.max(per_q * c.queues as u32);
                Mempool::new(&pc)?
            }
        };
        let cfg = self.cfg;
        // The one registration point: the port names a backend here only, to open it. What a
        // backend cannot do it refuses in its `open`; everything else the port asks of the
        // control objects it returns (`crate::backend::Control`).
        // The mlx5 backends fill in what only they have (a device clock, the model's device).
        #[cfg(feature = "mlx5")]
        let mut mlx5 = crate::dv::Mlx5Extras::default();
        #[allow(unreachable_patterns)]
        let (queues, info, control): Opened = match &cfg.backend {
            Backend::Loopback => crate::loopback::open(&cfg, &pool)?,
            #[cfg(feature = "xdp")]
            Backend::Xdp { .. } => crate::xdp::open(&cfg, &pool)?,
            #[cfg(feature = "verbs")]
            Backend::Verbs { .. } => crate::ibverbs::open(&cfg, &pool)?,
            #[cfg(feature = "mlx5")]
            Backend::Dv { .. } => crate::dv::open(&cfg, &pool, &mut mlx5)?,
            #[cfg(feature = "mlx5")]
            Backend::Model(opts) => crate::dv::model::open(&cfg, opts, &pool, &mut mlx5)?,
            other => return Err(other.unavailable()),
        };
        let queues = crate::mtu::guard(queues, cfg.max_frame());
        let readers = queues.iter().map(|q| q.stats_reader()).collect();
        let n = cfg.rules.len() as u64;
        let counters_base = control.device_counters();
        let link = control.link_source();
        Ok(Port {
            queues,
            readers,
            pool,
            info,
            id: NEXT_PORT.fetch_add(1, Ordering::Relaxed),
            queue_count: cfg.queues,
            rules: cfg
                .rules
                .into_iter()
                .enumerate()
                .map(|(i, r)| (i as u64, r))
                .collect(),
            next_rule: n,
            counters_base,
            link,
            control,
            #[cfg(feature = "mlx5")]
            mlx5,
        })
    }
}

/// Ports opened so far in this process (each [`RuleHandle`] names its port by this number).
static NEXT_PORT: AtomicU64 = AtomicU64::new(1);

/// A rule installed on a port, as [`Port::add_rule`] returns it (and [`Port::rules`] lists the
/// rules given at open). It names its port: another port refuses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuleHandle {
    port: u64,
    id: u64,
}

impl RuleHandle {
    /// The rule's number on its port: the rules given at open are 0, 1, ... in their order,
    /// and each rule added later gets the next number (never reused).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl std::fmt::Display for RuleHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rule {} of port #{}", self.id, self.port)
    }
}

/// An open port: its queues, pool, and the control-path objects (flows, programs) that live as
/// long as it does.
pub struct Port {
    queues: Vec<Queue>,
    readers: Vec<StatsReader>,
    pool: Mempool,
    info: PortInfo,
    /// This port's number in [`RuleHandle`]s.
    id: u64,
    queue_count: u16,
    /// The installed rules by number, in the order they were installed.
    rules: Vec<(u64, Rule)>,
    next_rule: u64,
    /// What [`Port::device_counters`] read at open.
    counters_base: crate::counters::DeviceCounters,
    /// Where [`Port::link`] and [`Port::link_events`] look.
    link: crate::link::Source,
    // Dropped last: flow rules, XDP program link, verbs objects. Every question the port
    // asks of its backend goes through it.
    control: Box<dyn Control>,
    /// What an mlx5 backend filled in at open (its clock, the model's device); dropped after
    /// the control objects (the model's thread stops first; the clock's verbs context, shared
    /// with them, closes with its last handle).
    #[cfg(feature = "mlx5")]
    mlx5: crate::dv::Mlx5Extras,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("info", &self.info)
            .field("pool", &self.pool)
            .finish()
    }
}

impl Port {
    /// Starts building a port on `backend`.
    pub fn builder(backend: Backend) -> PortBuilder {
        PortBuilder {
            cfg: PortConfig {
                backend,
                queues: 1,
                rx_ring: 1024,
                tx_ring: 1024,
                rules: Vec::new(),
                dv_rx: Default::default(),
                rx_timestamps: Default::default(),
                rss: Default::default(),
                mtu: None,
                vlan_strip: false,
            },
            pool: None,
            pool_cfg: MempoolConfig::default(),
        }
    }

    /// What the port is.
    pub fn info(&self) -> &PortInfo {
        &self.info
    }

    /// The pool the port's queues receive into.
    pub fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// Queue `i`, if it has not been taken.
    pub fn queue(&mut self, i: u16) -> Option<&mut Queue> {
        self.queues.iter_mut().find(|q| q.index() == i)
    }

    /// Takes the queues out (to move each to its own thread). The port keeps the control-path
    /// objects; drop it after the queues.
    pub fn take_queues(&mut self) -> Vec<Queue> {
        std::mem::take(&mut self.queues)
    }

    /// Counter readers of all queues, in queue order (valid after `take_queues`).
    pub fn stats_readers(&self) -> &[StatsReader] {
        &self.readers
    }

    /// Frames the device dropped outside the queues' counters since the port was opened, read
    /// now (control path: sysfs reads; never call it from a send or receive loop). `dv` and
    /// `verbs` read the RDMA port's `hw_counters` (`out_of_buffer`, `rx_discards_phy`), `xdp`
    /// the interface's `rx_dropped` and `rx_missed_errors`, `model` the software device's
    /// `rx_no_buffer`; a counter the backend does not have is `None`.
    pub fn device_counters(&self) -> crate::counters::DeviceCounters {
        self.control.device_counters().since(&self.counters_base)
    }

    /// The software device's own counters (frames its wire or receive queues dropped, frames no
    /// rule matched), for a [`Backend::Model`] port; `None` for other backends.
    #[cfg(feature = "mlx5")]
    pub fn model_counters(&self) -> Option<crate::dv::model::ModelCounters> {
        self.model_port().map(|p| p.counters())
    }

    /// The software device under a [`Backend::Model`] port (a handle to it: its counters, its
    /// device objects); `None` for other backends.
    #[cfg(feature = "mlx5")]
    pub fn model_port(&self) -> Option<&crate::dv::model::ModelPort> {
        self.mlx5.model.as_ref()
    }

    /// The clock that stamps received packets ([`crate::RxMeta::hw_timestamp`]) when the
    /// backend has one: a [`Backend::Model`] port with a clock
    /// ([`crate::dv::model::ModelOptions::clock_khz`]), or a [`Backend::Dv`] port whose
    /// device reports its core clock (read through the port's own verbs context, found when the
    /// port opened: the clock is the device's); `None` otherwise.
    #[cfg(feature = "mlx5")]
    pub fn device_clock(&self) -> Option<crate::dv::cq::DeviceClock> {
        self.mlx5.clock.clone()
    }

    /// Installs `rule` while the port runs, after the rules already there (among equal
    /// priorities it comes last, as in [`flow::classify`](crate::flow::classify)), and returns
    /// its handle. From the moment this returns every frame the port receives is steered by the
    /// new set of rules; until then by the old one, never by a mixture:
    /// * AF_XDP: the steering program is recompiled with the new set and swapped in one step
    ///   with `BPF_LINK_UPDATE` (see [`crate::xdp`]); the first rule of a port opened without
    ///   rules attaches the program (`BPF_LINK_CREATE`), as opening with it would have.
    /// * verbs, DV: one more `ibv_create_flow`; the device adds it to its steering tables
    ///   atomically.
    /// * model: one more device flow (and its TIR).
    /// * loopback: [`Error::Unsupported`] (it has no steering).
    ///
    /// # Errors
    /// [`Error::Rule`] for a rule that fails validation or would share a flow-table entry with
    /// an installed rule ([`flow::validate_rules`](crate::flow::validate_rules), as at open);
    /// what the backend reports
    /// when it cannot install the rule (then nothing changed): on verbs and DV an RSS rule on a
    /// port opened without one is [`Error::Unsupported`] (its queues receive on their QPs, not
    /// on WQs an RSS table can spread over; open the port with an RSS rule).
    pub fn add_rule(&mut self, rule: Rule) -> Result<RuleHandle> {
        let mut all: Vec<Rule> = self.rules.iter().map(|(_, r)| r.clone()).collect();
        all.push(rule.clone());
        crate::flow::validate_rules(&all, self.queue_count)?;
        let id = self.next_rule;
        self.control.add_rule(id, &rule)?;
        self.next_rule += 1;
        self.rules.push((id, rule));
        Ok(RuleHandle { port: self.id, id })
    }

    /// Removes a rule while the port runs (as [`Port::add_rule`]: atomically; frames it took
    /// then go where the remaining rules say, to the kernel if none matches).
    ///
    /// # Errors
    /// [`Error::RuleHandle`] for a handle of another port or of a rule already removed; what
    /// the backend reports when it cannot remove the rule (then it is still installed).
    pub fn remove_rule(&mut self, handle: RuleHandle) -> Result<()> {
        let at = self.rule_index(handle)?;
        self.control.remove_rule(handle.id)?;
        self.rules.remove(at);
        Ok(())
    }

    /// The frames a rule has taken since it was installed (the frames the rule matched and
    /// acted on, whatever its action), where the backend can count per rule: AF_XDP (counters
    /// in the steering program), the model (each rule's device flow counter), verbs and DV
    /// (an `ibv_counters` object per rule, bound to its flows with
    /// `IBV_FLOW_SPEC_ACTION_COUNT`, read with `ibv_read_counters`). `None` where the device has
    /// no flow counters (`ibv_create_counters` fails with EOPNOTSUPP, ENOSYS or
    /// EPROTONOSUPPORT).
    ///
    /// # Errors
    /// [`Error::RuleHandle`] as for [`Port::remove_rule`]; [`Error::Os`] if the counters cannot
    /// be read.
    pub fn rule_hits(&self, handle: RuleHandle) -> Result<Option<u64>> {
        self.rule_index(handle)?;
        self.control.rule_hits(handle.id)
    }

    /// The installed rules with their handles, in the order they were installed.
    pub fn rules(&self) -> Vec<(RuleHandle, Rule)> {
        self.rules
            .iter()
            .map(|(id, r)| {
                (
                    RuleHandle {
                        port: self.id,
                        id: *id,
                    },
                    r.clone(),
                )
            })
            .collect()
    }

    fn rule_index(&self, h: RuleHandle) -> Result<usize> {
        if h.port != self.id {
            return Err(Error::RuleHandle(format!(
                "{h} belongs to another port (this is port #{}); remove a rule through the port \
                 that added it",
                self.id
            )));
        }
        self.rules
            .iter()
            .position(|(id, _)| *id == h.id)
            .ok_or_else(|| {
                Error::RuleHandle(if h.id < self.next_rule {
                    format!("{h} was already removed (a handle removes its rule once)")
                } else {
                    format!("{h} was never installed on this port")
                })
            })
    }

    /// The link's state now: carrier, speed, MTU, MAC (control path: sysfs reads, and on dv
    /// and verbs an `ibv_query_port` on a context of its own; never call it from a send or
    /// receive loop). See [`crate::link`] for where each backend reads it.
    ///
    /// # Errors
    /// [`Error::Link`] when the interface is gone; what the device reports when it cannot be
    /// queried.
    pub fn link(&self) -> Result<crate::Link> {
        self.link.link()
    }

    /// A stream of this port's link events ([`crate::LinkEvent`]): link down and up, device
    /// fatal, interface gone; read with [`LinkEvents::next_event`](crate::LinkEvents::next_event)
    /// or waited on through its fd. Each call makes a new stream that sees what happens from
    /// then on (it can be moved to another thread). On xdp (and a model bridged to an
    /// interface) make it in the network namespace the port was opened in.
    ///
    /// # Errors
    /// [`Error::Link`] when the interface is already gone; what the event source reports
    /// when it cannot be made.
    pub fn link_events(&self) -> Result<crate::LinkEvents> {
        self.link.events()
    }

    /// Counters summed over all queues.
    pub fn stats(&self) -> QueueStats {
        let mut s = QueueStats::default();
        for r in &self.readers {
            s.accumulate(&r.snapshot());
        }
        s
    }
}

#[cfg(test)]
mod backend_name_tests {
    use super::*;

    #[test]
    fn backends_by_name() {
        assert_eq!(
            Backend::named("xdp", "veth0", 1).unwrap(),
            Backend::Xdp {
                ifname: "veth0".into()
            }
        );
        assert_eq!(
            Backend::named("dv", "mlx5_0", 2).unwrap(),
            Backend::Dv {
                device: "mlx5_0".into(),
                port: 2
            }
        );
        assert_eq!(
            Backend::named("loopback", "", 1).unwrap(),
            Backend::Loopback
        );
        assert!(matches!(
            Backend::named("verbs", "", 1),
            Err(Error::Config(_))
        ));
        assert!(
            matches!(Backend::named("dpdk", "x", 1), Err(Error::Config(m)) if m.contains("dpdk"))
        );
        for kind in ["xdp", "verbs", "dv", "model", "loopback"] {
            if let Ok(b) = Backend::named(kind, "d", 1) {
                assert_eq!(b.name(), kind);
            }
        }
    }
}
