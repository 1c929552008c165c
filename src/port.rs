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

use std::any::Any;

pub use crate::config::{
    Backend, CqeComp, DvRxOptions, PortConfig, PortInfo, RqType, RxTimestamps,
};
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

    /// Receive side of the mlx5 DV backend: RQ type and CQE compression.
    pub fn dv_rx(mut self, o: crate::config::DvRxOptions) -> Self {
        self.cfg.dv_rx = o;
        self
    }

    /// Per-packet receive timestamps of an AF_XDP port (default off; ignored by the other
    /// backends).
    pub fn rx_timestamps(mut self, t: RxTimestamps) -> Self {
        self.cfg.rx_timestamps = t;
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
        let (queues, info, control): (Vec<Queue>, PortInfo, Box<dyn Any + Send>) = match &cfg
            .backend
        {
            Backend::Loopback => {
                if !cfg.rules.is_empty() {
                    return Err(Error::Unsupported(
                        "the loopback backend has no flow steering; open it without rules".into(),
                    ));
                }
                let q = crate::loopback::open(&cfg, &pool)?;
                let info = PortInfo {
                    backend: "loopback",
                    device: "loopback".into(),
                    mode: "software".into(),
                    queues: cfg.queues,
                };
                (q, info, Box::new(()))
            }
            Backend::Xdp { .. } => open_xdp(&cfg, &pool)?,
            Backend::Verbs { .. } => open_verbs(&cfg, &pool)?,
            Backend::Dv { .. } => open_dv(&cfg, &pool)?,
            #[cfg(feature = "mlx5")]
            Backend::Model(opts) => crate::dv::model::open(&cfg, opts, &pool)?,
        };
        let readers = queues.iter().map(|q| q.stats_reader()).collect();
        Ok(Port {
            queues,
            readers,
            pool,
            info,
            _control: control,
        })
    }
}

type Opened = (Vec<Queue>, PortInfo, Box<dyn Any + Send>);

#[cfg(feature = "xdp")]
fn open_xdp(cfg: &PortConfig, pool: &Mempool) -> Result<Opened> {
    crate::xdp::open(cfg, pool)
}
#[cfg(not(feature = "xdp"))]
fn open_xdp(_: &PortConfig, _: &Mempool) -> Result<Opened> {
    Err(Error::BackendUnavailable {
        backend: "xdp",
        feature: "xdp",
    })
}

#[cfg(feature = "verbs")]
fn open_verbs(cfg: &PortConfig, pool: &Mempool) -> Result<Opened> {
    crate::ibverbs::open(cfg, pool)
}
#[cfg(not(feature = "verbs"))]
fn open_verbs(_: &PortConfig, _: &Mempool) -> Result<Opened> {
    Err(Error::BackendUnavailable {
        backend: "verbs",
        feature: "verbs",
    })
}

#[cfg(feature = "mlx5")]
fn open_dv(cfg: &PortConfig, pool: &Mempool) -> Result<Opened> {
    crate::dv::open(cfg, pool)
}
#[cfg(not(feature = "mlx5"))]
fn open_dv(_: &PortConfig, _: &Mempool) -> Result<Opened> {
    Err(Error::BackendUnavailable {
        backend: "dv",
        feature: "mlx5",
    })
}

/// An open port: its queues, pool, and the control-path objects (flows, programs) that live as
/// long as it does.
pub struct Port {
    queues: Vec<Queue>,
    readers: Vec<StatsReader>,
    pool: Mempool,
    info: PortInfo,
    // Dropped last: flow rules, XDP program link, verbs objects.
    _control: Box<dyn Any + Send>,
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

    /// The software device's own counters (frames its wire or receive queues dropped, frames no
    /// rule matched), for a [`Backend::Model`] port; `None` for other backends.
    #[cfg(feature = "mlx5")]
    pub fn model_counters(&self) -> Option<crate::dv::model::ModelCounters> {
        self._control
            .downcast_ref::<(crate::dv::model::ModelThread, crate::dv::model::ModelPort)>()
            .map(|(_, port)| port.counters())
    }

    /// The clock that stamps received packets ([`crate::RxMeta::hw_timestamp`]) when the
    /// backend has one: a [`Backend::Model`] port with a clock
    /// ([`crate::dv::model::ModelOptions::clock_khz`]), or a [`Backend::Dv`] port whose
    /// device reports its core clock (read through a context of its own on the same device:
    /// the clock is the device's); `None` otherwise.
    #[cfg(feature = "mlx5")]
    pub fn device_clock(&self) -> Option<crate::dv::cq::DeviceClock> {
        if let Some((_, port)) = self
            ._control
            .downcast_ref::<(crate::dv::model::ModelThread, crate::dv::model::ModelPort)>()
        {
            return port.device_clock();
        }
        if self
            ._control
            .downcast_ref::<crate::dv::control::ControlPort>()
            .is_some()
        {
            // `PortInfo::device` of a DV port: "<device> port <n>".
            let name = self.info.device.split(" port ").next()?;
            let ctx = crate::ibverbs::device::open(name).ok()?;
            return crate::dv::cq::DeviceClock::of_verbs(&ctx).ok();
        }
        None
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
