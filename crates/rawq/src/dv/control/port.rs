//! A port's DV control objects: device, PD, pool registration, queues and flow rules.

use std::sync::Arc;

use super::device::{query, DvDevice};
use super::queue::{create_queue_rings, create_queue_rings_with, KeepAlive, QueueSpec};
use crate::dv::rings::{MiniCqeFormat, QueueRings};
use crate::error::{Error, Result};
use crate::ibverbs::mr::Mr;
use crate::ibverbs::pd::Pd;
use crate::ibverbs::qp::RawQp;
use crate::ibverbs::wq::Wq;

/// A port's DV control objects: device, PD, the pool's registration, and per queue its rings
/// and the objects behind them, plus the installed flow rules. The DV backend's `open` builds
/// its data-path queues over [`ControlPort::rings`]; tests use it to check the control path on
/// real hardware.
pub struct ControlPort {
    // Dropped first: flows reference the QPs and WQs below.
    rules: Option<crate::ibverbs::Rules>,
    qps: Vec<Arc<RawQp>>,
    wqs: Vec<Arc<Wq>>,
    queues: Vec<(QueueRings, KeepAlive)>,
    dev: DvDevice,
    port: u8,
    pd: Pd,
    _mr: Arc<Mr>,
    /// Key and fields of RSS rules' hashing QPs.
    rss: crate::config::RssConfig,
}

impl std::fmt::Debug for ControlPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPort")
            .field("device", &self.pd.context().name())
            .field("port", &self.port)
            .field("queues", &self.queues.len())
            .field("dev", &self.dev)
            .finish()
    }
}

impl ControlPort {
    /// Opens `device`, checks it is an mlx5 Ethernet port, registers `pool`, and creates
    /// `queues` queues shaped by `spec` (its `port` selects the port).
    ///
    /// # Errors
    /// [`Error::NoDevice`] / [`Error::NotFound`] from the device list; [`Error::Unsupported`]
    /// for a non-mlx5 device or a non-Ethernet port; [`Error::MemLock`] when the pool cannot be
    /// pinned; whatever `create_queue_rings` reports.
    pub fn open(
        device: &str,
        pool: &crate::Mempool,
        spec: &QueueSpec,
        queues: u16,
    ) -> Result<ControlPort> {
        ControlPort::open_with(device, pool, spec, queues, None)
    }

    /// As [`ControlPort::open`]; `format`, when given, is the compression asked for
    /// explicitly (`Some(None)`: off), which the device must support.
    fn open_with(
        device: &str,
        pool: &crate::Mempool,
        spec: &QueueSpec,
        queues: u16,
        format: Option<Option<MiniCqeFormat>>,
    ) -> Result<ControlPort> {
        // libibverbs and libmlx5 are opened here, the first time a dv port needs them.
        crate::ibverbs::ffi::mlx5_library()?;
        let ctx = crate::ibverbs::device::open(device)?;
        let dev = query(&ctx)?;
        // A port the device lacks, named as the verbs backend names it (ibv_query_port alone
        // says only EINVAL).
        let ports = ctx.query_device()?.phys_port_cnt;
        if spec.port == 0 || spec.port > ports {
            return Err(Error::Config(format!(
                "{device} has ports 1..={ports}; port {} does not exist",
                spec.port
            )));
        }
        let pa = ctx.query_port(spec.port)?;
        if pa.link_layer != crate::ibverbs::context::LINK_LAYER_ETHERNET {
            return Err(Error::Unsupported(format!(
                "{device} port {} has link layer {}; DV queues need an Ethernet port",
                spec.port,
                pa.link_layer_name()
            )));
        }
        let pd = Pd::new(&ctx)?;
        let mr = Arc::new(Mr::register_pool(&pd, pool)?);
        let mut qs = Vec::with_capacity(queues as usize);
        if let Some(Some(fmt)) = format {
            if !dev.supports_compression(fmt) {
                return Err(Error::Unsupported(format!(
                    "{device} cannot compress receive CQEs in the {fmt:?} mini-CQE format \
                     (formats 0x{:x}, up to {} per session): use --cqe-comp off",
                    dev.cqe_comp_formats, dev.cqe_comp_max_num
                )));
            }
        }
        for _ in 0..queues {
            qs.push(match format {
                Some(f) => create_queue_rings_with(&pd, &mr, &dev, spec, f)?,
                None => create_queue_rings(&pd, &mr, &dev, spec)?,
            });
        }
        Ok(ControlPort {
            rules: None,
            qps: qs.iter().map(|(_, k)| k.qp().clone()).collect(),
            wqs: qs.iter().map(|(_, k)| k.wq().clone()).collect(),
            queues: qs,
            dev,
            port: spec.port,
            pd,
            _mr: mr,
            rss: Default::default(),
        })
    }

    /// Opens the device and queues a DV port configuration asks for (`Backend::Dv`), with the
    /// RQ type and CQE compression of [`PortConfig::dv_rx`](crate::PortConfig) (by default a
    /// cyclic RQ, compressed where the device can). Rules are not
    /// installed yet: refill the RQs, then call [`ControlPort::install_rules`].
    ///
    /// # Errors
    /// [`Error::Config`] for another backend; otherwise as [`ControlPort::open`].
    pub fn from_config(cfg: &crate::PortConfig, pool: &crate::Mempool) -> Result<ControlPort> {
        let crate::Backend::Dv { device, port } = &cfg.backend else {
            return Err(Error::Config("not a DV backend".into()));
        };
        let o = &cfg.dv_rx;
        o.check()?;
        let striding = o.striding(pool.buf_size());
        // A striding WQE holds a frame of at most its strides (rawq chains the strides a frame
        // covers, zero copy; DPDK's mprq copies one of up to mprq_max_memcpy_len bytes and
        // chains larger ones onto the stride buffer, drivers/net/mlx5/mlx5_rx.c
        // `mlx5_rx_burst_mprq`). A frame larger than the whole WQE could never arrive: DPDK
        // then falls back to a cyclic RQ (mlx5_rxq.c `mlx5_mprq_prepare`); rawq says so.
        if let (Some(s), Some(f)) = (striding, cfg.max_frame()) {
            let wqe = (1u32 << s.log_num_strides) << s.log_stride_size;
            if f > wqe {
                return Err(Error::Config(format!(
                    "MTU {}: frames of up to {f} bytes do not fit a striding RQ WQE of {}                      strides of {} bytes ({wqe} bytes): use --rq cyclic (scatter receive),                      striding:16, or larger pool buffers",
                    f - crate::config::MTU_L2_OVERHEAD,
                    1u32 << s.log_num_strides,
                    1u32 << s.log_stride_size
                )));
            }
        }
        let spec = QueueSpec {
            port: *port,
            rx_ring: cfg.rx_ring,
            tx_ring: cfg.tx_ring,
            cqe_compression: true,
            striding,
            scatter: cfg.max_frame().map_or(1, |f| {
                super::scatter_segments(f, pool.buf_size() - pool.headroom() as u32)
            }),
            vlan_strip: cfg.vlan_strip,
        };
        // An explicit choice must be honoured (or refused); none: the device's best.
        let format = o.cqe_comp.map(|c| c.format());
        let mut port = ControlPort::open_with(device, pool, &spec, cfg.queues, format)?;
        port.rss = cfg.rss;
        Ok(port)
    }

    /// Takes each queue's rings and objects out, in queue order, to hand them to the data path
    /// (the [`KeepAlive`] is its recovery hook). The port keeps what the flow rules need.
    pub fn take_queues(&mut self) -> Vec<(QueueRings, KeepAlive)> {
        std::mem::take(&mut self.queues)
    }

    /// The device's core clock, read through the port's own context; `None` where the device
    /// reports none.
    pub fn device_clock(&self) -> Option<crate::dv::cq::DeviceClock> {
        crate::dv::cq::DeviceClock::of_verbs(self.pd.context()).ok()
    }

    /// What the device allows.
    pub fn device(&self) -> &DvDevice {
        &self.dev
    }

    /// The ring descriptors, one per queue not yet taken.
    pub fn rings(&self) -> Vec<QueueRings> {
        self.queues.iter().map(|(r, _)| *r).collect()
    }

    /// The objects behind queue `i`'s rings.
    pub fn keep_alive(&self, i: usize) -> Option<&KeepAlive> {
        self.queues.get(i).map(|(_, k)| k)
    }

    /// Installs `rules` (replacing any installed before). Refill the RQs first: traffic starts
    /// arriving as soon as a rule is in.
    ///
    /// # Errors
    /// See `crate::ibverbs::install_rules`.
    pub fn install_rules(&mut self, rules: &[crate::flow::Rule]) -> Result<()> {
        self.rules = None;
        self.rules = Some(crate::ibverbs::install_rules(
            &self.pd,
            self.qps.clone(),
            self.wqs.clone(),
            rules,
            self.port,
            &self.rss,
        )?);
        Ok(())
    }
}

/// Rules at run time on a DV port: one `ibv_create_flow` / `ibv_destroy_flow` each, on the
/// port's receive WQs, each rule counting into its own `ibv_counters` object (see
/// `crate::ibverbs::Rules`).
impl crate::backend::Control for ControlPort {
    fn link_source(&self) -> crate::link::Source {
        crate::ibverbs::link_source(self.pd.context().name(), self.port)
    }

    fn device_counters(&self) -> crate::counters::DeviceCounters {
        crate::counters::Source::Rdma {
            device: self.pd.context().name().to_owned(),
            port: self.port,
        }
        .read()
    }

    fn add_rule(&mut self, id: u64, rule: &crate::flow::Rule) -> Result<()> {
        match &mut self.rules {
            Some(r) => r.add(id, rule),
            None => {
                let mut r = crate::ibverbs::install_rules(
                    &self.pd,
                    self.qps.clone(),
                    self.wqs.clone(),
                    &[],
                    self.port,
                    &self.rss,
                )?;
                r.add(id, rule)?;
                self.rules = Some(r);
                Ok(())
            }
        }
    }

    fn remove_rule(&mut self, id: u64) -> Result<()> {
        match &mut self.rules {
            Some(r) => r.remove(id),
            None => Err(Error::RuleHandle(format!("no rule {id} is installed"))),
        }
    }

    fn rule_hits(&self, id: u64) -> Result<Option<u64>> {
        match &self.rules {
            Some(r) => r.hits(id),
            None => Err(Error::RuleHandle(format!("no rule {id} is installed"))),
        }
    }
}
