//! One queue's verbs objects: CQs (`mlx5dv_create_cq`), the send QP, the receive WQ
//! (`mlx5dv_create_wq`), and their ring memory (`mlx5dv_init_obj`) as a [`QueueRings`].

use std::mem;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::ibverbs::ffi::*;

use super::device::{res_format, DvDevice};
use super::sizing::{check_rx_cq, check_tx_ring, rq_sizing, RqSizing};
use crate::dv::rings::{CqRing, DvCaps, MiniCqeFormat, QueueRings, RqRing, SqRing, Striding};
use crate::dv::sys::*;
use crate::error::{Error, Result};
use crate::ibverbs::channel::CompChannel;
use crate::ibverbs::context::Context;
use crate::ibverbs::cq::Cq;
use crate::ibverbs::mr::Mr;
use crate::ibverbs::pd::Pd;
use crate::ibverbs::qp::{QpCaps, RawQp};
use crate::ibverbs::wq::Wq;

/// What to create for one queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    /// Port the send QP is bound to.
    pub port: u8,
    /// Receive buffers (a power of two): WQEs of a cyclic RQ; a striding RQ gets
    /// `rx_ring / strides` WQEs (see [`rq_sizing`]).
    pub rx_ring: u32,
    /// Send WQEBBs (a power of two; see [`check_tx_ring`]).
    pub tx_ring: u32,
    /// Compress receive CQEs (when the device supports the needed mini-CQE format).
    pub cqe_compression: bool,
    /// Use a striding RQ with this geometry.
    pub striding: Option<Striding>,
    /// Pool buffers a cyclic RQ WQE scatters a frame over (1: one buffer per frame; see
    /// [`super::rq_sizing_scatter`]); ignored with `striding`.
    pub scatter: u32,
    /// Strip received VLAN tags (`IBV_WQ_FLAGS_CVLAN_STRIPPING` on the WQ).
    pub vlan_strip: bool,
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
    /// What the queue needs to sleep until its receive CQ has work: rawq's arm of that CQ
    /// (its doorbell record, cqn and `mlx5dv_cq.cq_uar`, the UAR page libmlx5 arms it
    /// through) and its completion channel. `None` when the CQ has no channel.
    ///
    /// # Errors
    /// [`Error::Os`] from `mlx5dv_init_obj`; [`Error::Unsupported`] when it gives no UAR.
    pub(crate) fn rx_notify(&self) -> Result<Option<crate::dv::notify::RxNotify>> {
        let Some(ch) = self._rx_cq.channel() else {
            return Ok(None);
        };
        let mut out = mlx5dv_cq::default();
        let mut obj = mlx5dv_obj::default();
        obj.cq.in_ = self._rx_cq.as_raw();
        obj.cq.out = &mut out;
        // SAFETY: `obj` names a live CQ and a valid output block.
        let rc = unsafe { mlx5dv_init_obj(&mut obj, MLX5DV_OBJ_CQ as u64) };
        if rc != 0 {
            return Err(Error::os(
                "mlx5dv_init_obj(CQ)",
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        let dbrec = nn(out.dbrec.cast(), "CQ doorbell record")?;
        let uar = nn(out.cq_uar.cast(), "CQ UAR page")?;
        // SAFETY: record and UAR page of the live CQ this value keeps (the queue holds it as
        // long as it arms).
        let arm = unsafe { crate::dv::cq::CqArm::new(dbrec, uar, out.cqn) };
        Ok(Some(crate::dv::notify::RxNotify::new(
            arm,
            Box::new(crate::dv::notify::ChannelEvents(ch.clone())),
        )))
    }

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

fn create_cq(
    ctx: &Context,
    cqe: u32,
    compress: Option<MiniCqeFormat>,
    channel: Option<Arc<CompChannel>>,
) -> Result<Cq> {
    // SAFETY: plain old data; all-zero is a valid start (no channel, no parent domain).
    let mut a: ibv_cq_init_attr_ex = unsafe { mem::zeroed() };
    a.cqe = cqe;
    if let Some(ch) = &channel {
        a.channel = ch.as_raw();
    }
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
    let mut cq = unsafe { Cq::from_raw(ctx, cq) };
    if let Some(ch) = channel {
        // Destroyed after the CQ that reports to it.
        cq.keep_channel(ch);
    }
    Ok(cq)
}

fn create_wq(
    pd: &Pd,
    cq: Arc<Cq>,
    size: RqSizing,
    striding: Option<Striding>,
    vlan_strip: bool,
) -> Result<Wq> {
    // SAFETY: plain old data; all-zero is a valid start.
    let mut a: ibv_wq_init_attr = unsafe { mem::zeroed() };
    if vlan_strip {
        // The kernel clears the RQ context's `vsd` (VLAN strip disable) bit for this flag
        // (drivers/infiniband/hw/mlx5/qp.c `create_rq`); the CQE then carries the tag.
        a.comp_mask = ibv_wq_init_attr_mask::IBV_WQ_INIT_ATTR_FLAGS.0;
        a.create_flags = ibv_wq_flags::IBV_WQ_FLAGS_CVLAN_STRIPPING.0;
    }
    a.wq_type = ibv_wq_type::IBV_WQT_RQ;
    a.max_wr = size.max_wr;
    a.max_sge = size.max_sge;
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
    let want = if spec.striding.is_some() {
        MiniCqeFormat::CsumStrideIdx
    } else {
        MiniCqeFormat::Hash
    };
    let compress = (spec.cqe_compression && dev.supports_compression(want)).then_some(want);
    create_queue_rings_with(pd, mr, dev, spec, compress)
}

/// As [`create_queue_rings`], with the receive CQ compressed in exactly the format `compress`
/// names (or not at all), as the configuration asked.
pub(super) fn create_queue_rings_with(
    pd: &Pd,
    mr: &Arc<Mr>,
    dev: &DvDevice,
    spec: &QueueSpec,
    compress: Option<MiniCqeFormat>,
) -> Result<(QueueRings, KeepAlive)> {
    if let Some(s) = &spec.striding {
        dev.check_striding(s)?;
    }
    let rq_size = match spec.striding {
        None if spec.scatter > 1 => super::rq_sizing_scatter(spec.rx_ring, spec.scatter)?,
        _ => rq_sizing(spec.rx_ring, spec.striding)?,
    };
    check_tx_ring(spec.tx_ring, dev.max_qp_wr)?;
    let ctx = pd.context();
    let tx_cq = Arc::new(create_cq(ctx, spec.tx_ring, None, None)?);
    // The receive CQ reports to a completion channel of its own (event-driven receive: rawq
    // arms it, see `crate::dv::cq::CqArm`); without one the queue polls only.
    let channel = CompChannel::new(ctx).ok().map(Arc::new);
    let rx_cq = Arc::new(create_cq(ctx, rq_size.cqe, compress, channel)?);
    // Inline data: only the minimum header the data path writes. libmlx5 sizes every send WQE
    // for `max_inline_data` (mlx5_calc_send_wqe: control + Ethernet segment + the inline
    // segment, rounded to 64 bytes): 18 bytes or none keep that at one WQEBB, so the SQ has
    // `tx_ring` WQEBBs as in the device model; 64 bytes would make it two per WQE and double
    // the ring (the data path writes its own WQE sizes either way).
    let caps = QpCaps {
        max_send_wr: spec.tx_ring,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_inline_data: dev.min_inline as u32,
        // The DV data path writes its own TSO WQEs (dv/tx/tso.rs): libmlx5 need not size for
        // them.
        max_tso_header: 0,
    };
    // Send only: receives go to the WQ, so the QP's receive CQ is its send CQ.
    let qp = Arc::new(crate::ibverbs::create_qp(
        pd,
        tx_cq.clone(),
        tx_cq.clone(),
        caps,
    )?);
    qp.ready(spec.port)?;
    if spec.vlan_strip && !dev.cvlan_strip {
        return Err(Error::Unsupported(
            "VLAN stripping: this device's receive WQs cannot strip tags \
             (no IBV_RAW_PACKET_CAP_CVLAN_STRIPPING); open the port without vlan_strip"
                .into(),
        ));
    }
    let wq = Arc::new(create_wq(
        pd,
        rx_cq.clone(),
        rq_size,
        spec.striding,
        spec.vlan_strip,
    )?);

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
    let rx_cq_ring = cq_ring(&rx_cq)?;
    check_rx_cq(&rq, &rx_cq_ring)?;
    let rings = QueueRings {
        sq,
        tx_cq: cq_ring(&tx_cq)?,
        rq,
        rx_cq: rx_cq_ring,
        lkey: mr.lkey(),
        caps: DvCaps {
            min_inline: dev.min_inline,
            empw: dev.empw(),
            cqe_compression: compress,
            tx_csum: dev.tx_csum,
            max_tso: dev.max_tso,
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
