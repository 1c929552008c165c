//! The mlx5 Direct Verbs control path: queries what the device allows (`mlx5dv_query_device`),
//! creates one queue pair's objects — CQs with `mlx5dv_create_cq` (compressed when asked and
//! supported), a RAW_PACKET QP for sending, a receive WQ with `mlx5dv_create_wq` (striding when
//! asked) — and exposes their ring memory with `mlx5dv_init_obj` as a [`QueueRings`], the
//! contract with the data path.
//!
//! The verbs objects are the [`crate::ibverbs`] owners, so their drop order is the same: a
//! [`KeepAlive`] holds the QP, WQ, both CQs and the memory region of one queue.
//!
//! # When the data path may ring the doorbells
//! libmlx5 itself never writes the RQ doorbell record of a RAW_PACKET QP before the QP reaches
//! RTR (the device could otherwise receive into a queue that is not set up). rawq receives on a
//! WQ, whose equivalent point is the RDY transition. `create_queue_rings` returns only after the
//! WQ is RDY and the send QP is in RTS, so **from its return on** the data path may post receive
//! WQEs and write `rq.dbrec`, and post send WQEs and write `sq.dbrec` / ring `sq.bf_reg`. No
//! traffic reaches the WQ until flow rules are installed on it (`crate::ibverbs::install_rules`),
//! so refilling the RQ before installing rules is the right order.

use std::fmt::Write as _;
use std::mem;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use super::rings::{CqRing, DvCaps, MiniCqeFormat, QueueRings, RqRing, SqRing, Striding};
use super::sys::*;
use crate::error::{Error, Result};
use crate::ibverbs::context::Context;
use crate::ibverbs::cq::Cq;
use crate::ibverbs::mr::Mr;
use crate::ibverbs::pd::Pd;
use crate::ibverbs::qp::{QpCaps, RawQp};
use crate::ibverbs::wq::Wq;

/// PCI part ids of ConnectX-4 and ConnectX-4 Lx (PF and VF). ConnectX-4 needs the first 18 bytes
/// of every frame (the L2 header) inline in the send WQE's Ethernet segment, ConnectX-4 Lx in
/// some modes; rawq inlines them on both (inlining more than needed is always allowed). Later
/// parts need none unless the NIC's `wqe_inline_mode` (readable only through DevX, which rawq
/// does not use) says otherwise, e.g. for some VF / e-switch setups.
const L2_INLINE_PARTS: [u32; 4] = [4115, 4116, 4117, 4118];
/// Bytes of L2 header the Ethernet segment carries inline on those parts.
const L2_INLINE: u16 = 18;

/// What `mlx5dv_query_device` reports that rawq uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DvDevice {
    /// `MLX5DV_CONTEXT_FLAGS_*`.
    pub flags: u64,
    /// Most CQEs one compressed session may cover (0: no CQE compression).
    pub cqe_comp_max_num: u32,
    /// `MLX5DV_CQE_RES_FORMAT_*` mini-CQE formats the device supports.
    pub cqe_comp_formats: u32,
    /// Striding RQ limits (all zero when unsupported): log2 stride bytes min/max.
    pub stride_log_bytes: (u32, u32),
    /// Striding RQ limits: log2 strides per WQE min/max.
    pub stride_log_num: (u32, u32),
    /// Bytes of each frame the send WQE must inline (18 on ConnectX-4 / 4 Lx, else 0).
    pub min_inline: u16,
    /// The device checksums raw packets on send.
    pub tx_csum: bool,
}

impl DvDevice {
    /// Enhanced multi-packet send WQEs are allowed.
    pub fn empw(&self) -> bool {
        self.flags & MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW as u64 != 0
    }

    /// Legacy multi-packet send WQEs are allowed.
    pub fn mpw(&self) -> bool {
        self.flags & MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED as u64 != 0
    }

    /// The device can compress CQEs into mini-CQEs of `fmt`.
    pub fn supports_compression(&self, fmt: MiniCqeFormat) -> bool {
        self.cqe_comp_max_num > 0 && self.cqe_comp_formats & res_format(fmt) != 0
    }

    /// The device supports striding RQs.
    pub fn striding(&self) -> bool {
        self.stride_log_num.1 > 0
    }

    /// Checks `s` against the striding RQ limits.
    ///
    /// # Errors
    /// [`Error::Unsupported`] saying which limit `s` breaks.
    pub fn check_striding(&self, s: &Striding) -> Result<()> {
        if !self.striding() {
            return Err(Error::Unsupported(
                "this device has no striding (multi-packet) RQ".into(),
            ));
        }
        let (b, n) = (s.log_stride_size as u32, s.log_num_strides as u32);
        let (bl, bh) = self.stride_log_bytes;
        let (nl, nh) = self.stride_log_num;
        if !(bl..=bh).contains(&b) || !(nl..=nh).contains(&n) {
            return Err(Error::Unsupported(format!(
                "striding RQ of 2^{n} strides of 2^{b} bytes: the device allows 2^{nl}..2^{nh} \
                 strides of 2^{bl}..2^{bh} bytes"
            )));
        }
        Ok(())
    }
}

fn res_format(fmt: MiniCqeFormat) -> u32 {
    match fmt {
        MiniCqeFormat::Hash => MLX5DV_CQE_RES_FORMAT_HASH,
        MiniCqeFormat::CsumStrideIdx => MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX,
    }
}

/// Whether `ctx`'s device is driven by libmlx5 (`mlx5dv_is_supported`).
pub fn is_mlx5(ctx: &Context) -> bool {
    // SAFETY: the context is open; `device` is set by libibverbs at open and outlives it.
    let dev = unsafe { (*ctx.as_raw()).device };
    // SAFETY: `dev` is the live device of an open context.
    !dev.is_null() && unsafe { mlx5dv_is_supported(dev) }
}

/// Queries the mlx5-specific attributes of `ctx`'s device.
///
/// # Errors
/// [`Error::Unsupported`] when the device is not an mlx5 device; [`Error::Os`] with the errno of
/// `mlx5dv_query_device` or `ibv_query_device_ex`.
pub fn query(ctx: &Context) -> Result<DvDevice> {
    if !is_mlx5(ctx) {
        return Err(Error::Unsupported(format!(
            "{} is not an mlx5 device; use the verbs backend (Backend::Verbs)",
            ctx.name()
        )));
    }
    let attr = ctx.query_device()?;
    let mut c = mlx5dv_context {
        comp_mask: (MLX5DV_CONTEXT_MASK_CQE_COMPRESION | MLX5DV_CONTEXT_MASK_STRIDING_RQ) as u64,
        ..Default::default()
    };
    // SAFETY: the context is open and `c` a valid output with `comp_mask` saying what to fill.
    let rc = unsafe { mlx5dv_query_device(ctx.as_raw(), &mut c) };
    if rc != 0 {
        return Err(Error::os(
            "mlx5dv_query_device",
            std::io::Error::from_raw_os_error(rc.abs()),
        ));
    }
    let mut d = DvDevice {
        flags: c.flags,
        min_inline: if L2_INLINE_PARTS.contains(&attr.vendor_part_id) {
            L2_INLINE
        } else {
            0
        },
        tx_csum: attr.raw_ip_csum(),
        ..Default::default()
    };
    // The provider clears the comp_mask bits of what it did not fill.
    if c.comp_mask & MLX5DV_CONTEXT_MASK_CQE_COMPRESION as u64 != 0 {
        d.cqe_comp_max_num = c.cqe_comp_caps.max_num;
        d.cqe_comp_formats = c.cqe_comp_caps.supported_format;
    }
    if c.comp_mask & MLX5DV_CONTEXT_MASK_STRIDING_RQ as u64 != 0 {
        let s = &c.striding_rq_caps;
        d.stride_log_bytes = (
            s.min_single_stride_log_num_of_bytes,
            s.max_single_stride_log_num_of_bytes,
        );
        d.stride_log_num = (
            s.min_single_wqe_log_num_of_strides,
            s.max_single_wqe_log_num_of_strides,
        );
    }
    Ok(d)
}

/// Appends the DV capabilities of `ctx` to a `devinfo` report.
pub(crate) fn describe_dv(ctx: &Context, out: &mut String) {
    if !is_mlx5(ctx) {
        let _ = writeln!(out, "  mlx5 DV: no (not an mlx5 device)");
        return;
    }
    match query(ctx) {
        Ok(d) => {
            let _ = writeln!(
                out,
                "  mlx5 DV: yes  min inline {}  eMPW {}  MPW {}  CQE compression {} (formats \
                 0x{:x})  striding RQ {}",
                d.min_inline,
                if d.empw() { "yes" } else { "no" },
                if d.mpw() { "yes" } else { "no" },
                if d.cqe_comp_max_num > 0 {
                    format!("up to {}", d.cqe_comp_max_num)
                } else {
                    "no".into()
                },
                d.cqe_comp_formats,
                if d.striding() {
                    format!(
                        "2^{}..2^{} strides of 2^{}..2^{} bytes",
                        d.stride_log_num.0,
                        d.stride_log_num.1,
                        d.stride_log_bytes.0,
                        d.stride_log_bytes.1
                    )
                } else {
                    "no".into()
                }
            );
        }
        Err(e) => {
            let _ = writeln!(out, "  mlx5 DV: cannot query: {e}");
        }
    }
}

/// What to create for one queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    /// Port the send QP is bound to.
    pub port: u8,
    /// Receive WQEs (a power of two).
    pub rx_ring: u32,
    /// Send WQEs (a power of two).
    pub tx_ring: u32,
    /// Compress receive CQEs (when the device supports the needed mini-CQE format).
    pub cqe_compression: bool,
    /// Use a striding RQ with this geometry.
    pub striding: Option<Striding>,
}

/// The verbs objects behind one queue's rings. Keep it as long as the data path touches them;
/// drop it after the data path stopped (it destroys QP, WQ, CQs and releases the MR).
pub struct KeepAlive {
    port: u8,
    qp: Arc<RawQp>,
    wq: Arc<Wq>,
    _tx_cq: Arc<Cq>,
    _rx_cq: Arc<Cq>,
    _mr: Arc<Mr>,
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAlive")
            .field("qp", &self.qp)
            .field("wq", &self.wq)
            .finish()
    }
}

impl KeepAlive {
    /// The send QP (flow rules for `Drop` attach here).
    pub fn qp(&self) -> &Arc<RawQp> {
        &self.qp
    }

    /// The receive WQ (flow rules reach it through indirection tables).
    pub fn wq(&self) -> &Arc<Wq> {
        &self.wq
    }

    /// Brings the send queue back after an error completion: RESET (the device forgets the SQ,
    /// its WQE counter restarts at 0 and no CQE for earlier work follows), then INIT, RTR, RTS.
    /// The data path's `Recover::recover_sq`.
    ///
    /// # Errors
    /// [`Error::Os`] from `ibv_modify_qp`; the SQ then stays out of service.
    pub fn recover_sq(&self) -> Result<()> {
        self.qp.reset(self.port)
    }

    /// Brings the receive queue back after an error completion: RESET (the device forgets the
    /// RQ, its WQE counter restarts at 0), then RDY. The data path's `Recover::recover_rq`.
    ///
    /// # Errors
    /// [`Error::Os`] from `ibv_modify_wq`; the RQ then stays out of service.
    pub fn recover_rq(&self) -> Result<()> {
        self.wq.reset()
    }

    /// Moves the QP and WQ to the error state: the device stops using the rings and flushes
    /// what is posted with error CQEs, so the data path can take its buffers back before drop.
    ///
    /// # Errors
    /// [`Error::Os`] from the state changes.
    pub fn quiesce(&self) -> Result<()> {
        self.qp.to_error()?;
        self.wq.to_error()
    }
}

fn create_cq(ctx: &Context, cqe: u32, compress: Option<MiniCqeFormat>) -> Result<Cq> {
    // SAFETY: plain old data; all-zero is a valid start (no channel, no parent domain).
    let mut a: ibv_cq_init_attr_ex = unsafe { mem::zeroed() };
    a.cqe = cqe;
    let mut dv = mlx5dv_cq_init_attr {
        comp_mask: MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE as u64,
        cqe_size: 64,
        ..Default::default()
    };
    if let Some(fmt) = compress {
        dv.comp_mask |= MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE as u64;
        dv.cqe_comp_res_format = res_format(fmt) as u8;
    }
    // SAFETY: the context is open; both attribute blocks are valid for the call.
    let cq = unsafe { mlx5dv_create_cq(ctx.as_raw(), &mut a, &mut dv) };
    let cq = NonNull::new(cq).ok_or_else(|| Error::last_os("mlx5dv_create_cq"))?;
    // SAFETY: `cq` is a live extended CQ; its plain CQ is embedded in it.
    let cq = unsafe { ibv_cq_ex_to_cq(cq.as_ptr()) };
    let cq = NonNull::new(cq).ok_or_else(|| Error::Config("mlx5dv_create_cq: no CQ".into()))?;
    // SAFETY: just created on `ctx`, owned by nobody else.
    Ok(unsafe { Cq::from_raw(ctx, cq) })
}

fn create_wq(pd: &Pd, cq: Arc<Cq>, max_wr: u32, striding: Option<Striding>) -> Result<Wq> {
    // SAFETY: plain old data; all-zero is a valid start.
    let mut a: ibv_wq_init_attr = unsafe { mem::zeroed() };
    a.wq_type = ibv_wq_type::IBV_WQT_RQ;
    a.max_wr = max_wr;
    a.max_sge = 1;
    a.pd = pd.as_raw();
    a.cq = cq.as_raw();
    let mut dv = mlx5dv_wq_init_attr::default();
    if let Some(s) = striding {
        dv.comp_mask = MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ as u64;
        dv.striding_rq_attrs = mlx5dv_striding_rq_init_attr {
            single_stride_log_num_of_bytes: s.log_stride_size as u32,
            single_wqe_log_num_of_strides: s.log_num_strides as u32,
            two_byte_shift_en: s.two_byte_shift as u8,
        };
    }
    // SAFETY: context, PD and CQ are alive; attribute blocks are valid for the call.
    let wq = unsafe { mlx5dv_create_wq(pd.context().as_raw(), &mut a, &mut dv) };
    let wq = NonNull::new(wq).ok_or_else(|| Error::last_os("mlx5dv_create_wq"))?;
    // SAFETY: created just now in `pd` on its context, completing into `cq`, owned by nobody.
    unsafe { Wq::from_raw(wq, pd, cq, a.max_wr) }
}

fn nn<T>(p: *mut T, what: &str) -> Result<NonNull<T>> {
    NonNull::new(p).ok_or_else(|| Error::Unsupported(format!("mlx5dv_init_obj gave no {what}")))
}

fn cq_ring(cq: &Cq) -> Result<CqRing> {
    let mut out = mlx5dv_cq::default();
    let mut obj = mlx5dv_obj::default();
    obj.cq.in_ = cq.as_raw();
    obj.cq.out = &mut out;
    // SAFETY: `obj` names a live CQ and a valid output block.
    let rc = unsafe { mlx5dv_init_obj(&mut obj, MLX5DV_OBJ_CQ as u64) };
    if rc != 0 {
        return Err(Error::os(
            "mlx5dv_init_obj(CQ)",
            std::io::Error::from_raw_os_error(rc.abs()),
        ));
    }
    Ok(CqRing {
        buf: nn(out.buf.cast(), "CQ buffer")?,
        cqe_cnt: out.cqe_cnt,
        cqe_size: out.cqe_size,
        dbrec: nn(out.dbrec.cast(), "CQ doorbell record")?,
        cqn: out.cqn,
    })
}

/// Creates one queue's CQs, send QP and receive WQ and describes their rings.
///
/// `dev` is what [`query`] reported. The QP is in RTS and the WQ RDY on return: see the module
/// docs for when the data path may write the doorbells.
///
/// # Errors
/// [`Error::Unsupported`] when `spec` asks for a striding RQ the device cannot do; whatever the
/// verbs calls report ([`Error::Permission`] without CAP_NET_RAW, [`Error::Os`] otherwise).
pub(crate) fn create_queue_rings(
    pd: &Pd,
    mr: &Arc<Mr>,
    dev: &DvDevice,
    spec: &QueueSpec,
) -> Result<(QueueRings, KeepAlive)> {
    if let Some(s) = &spec.striding {
        dev.check_striding(s)?;
    }
    let ctx = pd.context();
    let want = if spec.striding.is_some() {
        MiniCqeFormat::CsumStrideIdx
    } else {
        MiniCqeFormat::Hash
    };
    let compress = (spec.cqe_compression && dev.supports_compression(want)).then_some(want);
    let tx_cq = Arc::new(create_cq(ctx, spec.tx_ring, None)?);
    let rx_cq = Arc::new(create_cq(ctx, spec.rx_ring, compress)?);
    let caps = QpCaps {
        max_send_wr: spec.tx_ring,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_inline_data: (dev.min_inline as u32).max(64),
    };
    // Send only: receives go to the WQ, so the QP's receive CQ is its send CQ.
    let qp = Arc::new(crate::ibverbs::create_qp(
        pd,
        tx_cq.clone(),
        tx_cq.clone(),
        caps,
    )?);
    qp.ready(spec.port)?;
    let wq = Arc::new(create_wq(pd, rx_cq.clone(), spec.rx_ring, spec.striding)?);

    let mut dqp = mlx5dv_qp {
        comp_mask: MLX5DV_QP_MASK_RAW_QP_HANDLES as u64,
        ..Default::default()
    };
    let mut drwq = mlx5dv_rwq::default();
    let mut obj = mlx5dv_obj::default();
    obj.qp.in_ = crate::ibverbs::qp::QueuePair::as_raw(&*qp);
    obj.qp.out = &mut dqp;
    obj.rwq.in_ = wq.as_raw();
    obj.rwq.out = &mut drwq;
    // SAFETY: `obj` names a live QP and WQ and valid output blocks.
    let rc = unsafe { mlx5dv_init_obj(&mut obj, (MLX5DV_OBJ_QP | MLX5DV_OBJ_RWQ) as u64) };
    if rc != 0 {
        return Err(Error::os(
            "mlx5dv_init_obj(QP, RWQ)",
            std::io::Error::from_raw_os_error(rc.abs()),
        ));
    }
    let qp_dbrec = nn(dqp.dbrec, "QP doorbell record")?;
    // For a RAW_PACKET QP the QP number is its SQ number; prefer the explicit one when given.
    let sqn = if dqp.comp_mask & MLX5DV_QP_MASK_RAW_QP_HANDLES as u64 != 0 && dqp.sqn != 0 {
        dqp.sqn
    } else {
        qp.qp_num()
    };
    let sq = SqRing {
        buf: nn(dqp.sq.buf.cast(), "SQ buffer")?,
        wqe_cnt: dqp.sq.wqe_cnt,
        // SAFETY: the QP doorbell record is two big-endian words, [RCV, SND].
        dbrec: unsafe { qp_dbrec.add(MLX5_SND_DBR as usize) },
        bf_reg: nn(dqp.bf.reg.cast(), "BlueFlame register")?,
        bf_size: dqp.bf.size,
        sqn,
    };
    let rq = RqRing {
        buf: nn(drwq.buf.cast(), "RQ buffer")?,
        wqe_cnt: drwq.wqe_cnt,
        stride: drwq.stride,
        // libmlx5 already points the RWQ's `dbrec` at its receive word.
        dbrec: nn(drwq.dbrec, "RQ doorbell record")?,
        striding: spec.striding,
    };
    let rings = QueueRings {
        sq,
        tx_cq: cq_ring(&tx_cq)?,
        rq,
        rx_cq: cq_ring(&rx_cq)?,
        lkey: mr.lkey(),
        caps: DvCaps {
            min_inline: dev.min_inline,
            empw: dev.empw(),
            cqe_compression: compress,
            tx_csum: dev.tx_csum,
        },
    };
    Ok((
        rings,
        KeepAlive {
            port: spec.port,
            qp,
            wq,
            _tx_cq: tx_cq,
            _rx_cq: rx_cq,
            _mr: mr.clone(),
        },
    ))
}

/// A port's DV control objects: device, PD, the pool's registration, and per queue its rings
/// and the objects behind them, plus the installed flow rules. The DV backend's `open` builds
/// its data-path queues over [`ControlPort::rings`]; tests use it to check the control path on
/// real hardware.
pub struct ControlPort {
    // Dropped first: flows reference the QPs and WQs below.
    rules: Option<Box<dyn std::any::Any + Send>>,
    qps: Vec<Arc<RawQp>>,
    wqs: Vec<Arc<Wq>>,
    queues: Vec<(QueueRings, KeepAlive)>,
    dev: DvDevice,
    port: u8,
    pd: Pd,
    _mr: Arc<Mr>,
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
        let ctx = crate::ibverbs::device::open(device)?;
        let dev = query(&ctx)?;
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
        for _ in 0..queues {
            qs.push(create_queue_rings(&pd, &mr, &dev, spec)?);
        }
        Ok(ControlPort {
            rules: None,
            qps: qs.iter().map(|(_, k)| k.qp.clone()).collect(),
            wqs: qs.iter().map(|(_, k)| k.wq.clone()).collect(),
            queues: qs,
            dev,
            port: spec.port,
            pd,
            _mr: mr,
        })
    }

    /// Opens the device and queues a DV port configuration asks for (`Backend::Dv`), with CQE
    /// compression where the device has it and cyclic (not striding) RQs. Rules are not
    /// installed yet: refill the RQs, then call [`ControlPort::install_rules`].
    ///
    /// # Errors
    /// [`Error::Config`] for another backend; otherwise as [`ControlPort::open`].
    pub fn from_config(cfg: &crate::PortConfig, pool: &crate::Mempool) -> Result<ControlPort> {
        let crate::Backend::Dv { device, port } = &cfg.backend else {
            return Err(Error::Config("not a DV backend".into()));
        };
        let spec = QueueSpec {
            port: *port,
            rx_ring: cfg.rx_ring,
            tx_ring: cfg.tx_ring,
            cqe_compression: true,
            striding: None,
        };
        ControlPort::open(device, pool, &spec, cfg.queues)
    }

    /// Takes each queue's rings and objects out, in queue order, to hand them to the data path
    /// (the [`KeepAlive`] is its recovery hook). The port keeps what the flow rules need.
    pub fn take_queues(&mut self) -> Vec<(QueueRings, KeepAlive)> {
        std::mem::take(&mut self.queues)
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
        )?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_follow_the_flags() {
        let d = DvDevice {
            flags: (MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW | MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED) as u64,
            cqe_comp_max_num: 64,
            cqe_comp_formats: MLX5DV_CQE_RES_FORMAT_HASH,
            stride_log_bytes: (6, 13),
            stride_log_num: (9, 16),
            ..Default::default()
        };
        assert!(d.empw() && d.mpw());
        assert!(d.supports_compression(MiniCqeFormat::Hash));
        assert!(!d.supports_compression(MiniCqeFormat::CsumStrideIdx));
        let ok = Striding {
            log_num_strides: 9,
            log_stride_size: 6,
            two_byte_shift: false,
        };
        assert!(d.check_striding(&ok).is_ok());
        let too_few = Striding {
            log_num_strides: 3,
            ..ok
        };
        let e = d.check_striding(&too_few).unwrap_err().to_string();
        assert!(e.contains("2^9..2^16"), "{e}");
        let none = DvDevice::default();
        assert!(!none.empw());
        assert!(!none.supports_compression(MiniCqeFormat::Hash));
        assert!(none.check_striding(&ok).is_err());
    }
}
