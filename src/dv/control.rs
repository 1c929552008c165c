//! The mlx5 Direct Verbs control path: queries what the device allows (`mlx5dv_query_device`),
//! creates one queue pair's objects — CQs with `mlx5dv_create_cq` (compressed when asked and
//! supported), a RAW_PACKET QP for sending, a receive WQ with `mlx5dv_create_wq` (striding when
//! asked) — and exposes their ring memory with `mlx5dv_init_obj` as a [`QueueRings`], the
//! contract with the data path.
//!
//! Sizing follows what libmlx5 does with the attributes (rdma-core providers/mlx5/verbs.c):
//! send WQEs sized for the inline header only, so the SQ has `tx_ring` WQEBBs
//! ([`check_tx_ring`]); a striding RQ asked with one data segment per stride and the receive CQ
//! holding a completion per stride ([`rq_sizing`], [`check_rx_cq`]). The minimum inline header
//! is a guess from the PCI id unless [`MIN_INLINE_ENV`] sets it ([`min_inline_for`]).
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
///
/// **This is a guess.** libmlx5 learns the mode from the kernel (`eth_min_inline` in the
/// context response, rdma-core providers/mlx5/mlx5.c) and keeps it in its private context;
/// mlx5dv does not expose it. When the guess is wrong, set [`MIN_INLINE_ENV`]; a device that
/// wants the header and does not get it fails the first sends, which the data path reports as
/// such (`DvQueue`'s send error message names the variable).
const L2_INLINE_PARTS: [u32; 4] = [4115, 4116, 4117, 4118];
/// Bytes of L2 header the Ethernet segment carries inline on those parts.
const L2_INLINE: u16 = 18;

/// Environment variable overriding the minimum inline header (`0` or `18` bytes) that rawq
/// otherwise guesses from the PCI id (see `L2_INLINE_PARTS`).
pub const MIN_INLINE_ENV: &str = "RAWQ_DV_MIN_INLINE";

/// The minimum inline header for a device with PCI part id `part`: `over` (the value of
/// [`MIN_INLINE_ENV`], if set) wins over the guess. Returns the bytes and where they come from.
///
/// # Errors
/// [`Error::Config`] for an override other than 0 or 18.
pub fn min_inline_for(part: u32, over: Option<&str>) -> Result<(u16, &'static str)> {
    match over.map(str::trim) {
        None | Some("") => Ok(if L2_INLINE_PARTS.contains(&part) {
            (L2_INLINE, "guessed from the PCI id")
        } else {
            (0, "guessed from the PCI id")
        }),
        Some("0") => Ok((0, "set by RAWQ_DV_MIN_INLINE")),
        Some("18") => Ok((L2_INLINE, "set by RAWQ_DV_MIN_INLINE")),
        Some(v) => Err(Error::Config(format!(
            "{MIN_INLINE_ENV}={v}: must be 0 (no inline header) or 18 (the L2 header inline, \
             as ConnectX-4 and some VF / e-switch modes require)"
        ))),
    }
}

/// Largest send ring the DV data path drives: its WQEBB counter is 16 bits, and a ring of
/// 65536 WQEBBs could not tell full from empty.
const MAX_SQ_WQEBBS: u32 = 32768;

/// Most strides a striding RQ WQE can have in rawq, where every stride is a pool buffer of its
/// own (one data segment per stride, after the 16-byte next-segment header, as VPP does:
/// src/plugins/rdma/device.c). libmlx5 sizes the WQE as `16 × max_sge + 16` bytes and refuses
/// more than the device's largest RQ descriptor (`max_rq_desc_sz`, 512 bytes on ConnectX
/// parts; rdma-core providers/mlx5/verbs.c, `mlx5_calc_rwq_size`): 16 strides take 272 bytes,
/// 32 would take 528.
pub const MAX_STRIDES: u32 = 16;

/// How the control path asks libmlx5 for one queue's receive side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqSizing {
    /// `ibv_wq_init_attr.max_wr`: WQEs.
    pub max_wr: u32,
    /// `ibv_wq_init_attr.max_sge`: data segments per WQE (one per stride when striding).
    pub max_sge: u32,
    /// CQEs the receive CQ must hold: one per stride of every WQE, since every stride can end
    /// a packet (DPDK drivers/net/mlx5/mlx5_rxq.c, `mlx5_rxq_cqe_num`: WQEs × strides).
    pub cqe: u32,
}

/// The receive sizing for `rx_ring` buffers: a cyclic RQ of `rx_ring` one-segment WQEs, or a
/// striding RQ of `rx_ring / strides` WQEs of one segment per stride (`max_sge = strides`,
/// `max_wr` divided by it, as VPP's `rdma_rxq_init` does in src/plugins/rdma/device.c).
///
/// # Errors
/// [`Error::Unsupported`] for more than [`MAX_STRIDES`] strides, with the reason.
pub fn rq_sizing(rx_ring: u32, striding: Option<Striding>) -> Result<RqSizing> {
    let Some(s) = striding else {
        return Ok(RqSizing {
            max_wr: rx_ring,
            max_sge: 1,
            cqe: rx_ring,
        });
    };
    let n = 1u32 << s.log_num_strides;
    if n > MAX_STRIDES {
        return Err(Error::Unsupported(format!(
            "striding RQ of {n} strides per WQE: rawq's strides are pool buffers, one data \
             segment each after the next-segment header, and libmlx5 creates RQ WQEs of at most \
             512 bytes (mlx5_calc_rwq_size against max_rq_desc_sz), which hold at most \
             {MAX_STRIDES} strides; use log_num_strides <= 4"
        )));
    }
    let max_wr = (rx_ring / n).max(1);
    Ok(RqSizing {
        max_wr,
        max_sge: n,
        cqe: max_wr * n,
    })
}

/// Checks that the send ring for `tx_ring` WQEs fits the data path and the device: the control
/// path asks libmlx5 for WQEs sized for the inline header only (one 64-byte WQEBB per WQE, see
/// `create_queue_rings`), so the SQ has `tx_ring` WQEBBs; libmlx5 refuses more than the
/// device's `max_qp_wr` (rdma-core providers/mlx5/verbs.c, `mlx5_calc_sq_size` against
/// `max_send_wqebb`).
///
/// # Errors
/// [`Error::Config`] naming the limit `tx_ring` exceeds.
pub fn check_tx_ring(tx_ring: u32, max_qp_wr: u32) -> Result<()> {
    let limit = MAX_SQ_WQEBBS.min(max_qp_wr.max(1));
    if tx_ring > limit {
        return Err(Error::Config(format!(
            "tx_ring = {tx_ring}: the send queue would need {tx_ring} 64-byte WQEBBs, but {} \
             (use tx_ring <= {limit})",
            if max_qp_wr < MAX_SQ_WQEBBS {
                format!("this device allows at most {max_qp_wr} (max_qp_wr)")
            } else {
                format!("the DV data path drives at most {MAX_SQ_WQEBBS} (16-bit WQEBB counter)")
            }
        )));
    }
    Ok(())
}

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
    /// Bytes of each frame the send WQE must inline (18 on ConnectX-4 / 4 Lx, else 0; see
    /// [`min_inline_for`]).
    pub min_inline: u16,
    /// Where `min_inline` comes from (the PCI-id guess or [`MIN_INLINE_ENV`]).
    pub min_inline_source: &'static str,
    /// Largest work queue (`max_qp_wr`).
    pub max_qp_wr: u32,
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
    let over = std::env::var(MIN_INLINE_ENV).ok();
    let (min_inline, min_inline_source) = min_inline_for(attr.vendor_part_id, over.as_deref())?;
    let mut d = DvDevice {
        flags: c.flags,
        min_inline,
        min_inline_source,
        max_qp_wr: attr.max_qp_wr,
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
                "  mlx5 DV: yes  min inline {} ({})  eMPW {}  MPW {}  CQE compression {} \
                 (formats 0x{:x})  striding RQ {}",
                d.min_inline,
                d.min_inline_source,
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
    /// Receive buffers (a power of two): WQEs of a cyclic RQ; a striding RQ gets
    /// `rx_ring / strides` WQEs (see [`rq_sizing`]).
    pub rx_ring: u32,
    /// Send WQEBBs (a power of two; see [`check_tx_ring`]).
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

fn create_wq(pd: &Pd, cq: Arc<Cq>, size: RqSizing, striding: Option<Striding>) -> Result<Wq> {
    // SAFETY: plain old data; all-zero is a valid start.
    let mut a: ibv_wq_init_attr = unsafe { mem::zeroed() };
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

/// Checks that the receive CQ can hold a completion for every stride of every posted WQE (a
/// cyclic WQE counts as one stride), so that the device never finds it full.
///
/// # Errors
/// [`Error::Config`] naming both sizes.
pub fn check_rx_cq(rq: &RqRing, cq: &CqRing) -> Result<()> {
    let per_wqe = rq.striding.map_or(1, |s| 1u32 << s.log_num_strides);
    let need = rq.wqe_cnt.saturating_mul(per_wqe);
    if cq.cqe_cnt < need {
        return Err(Error::Config(format!(
            "receive CQ of {} entries for {} WQEs of {per_wqe} stride(s): it must hold {need} \
             (one completion per stride)",
            cq.cqe_cnt, rq.wqe_cnt
        )));
    }
    Ok(())
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
fn create_queue_rings_with(
    pd: &Pd,
    mr: &Arc<Mr>,
    dev: &DvDevice,
    spec: &QueueSpec,
    compress: Option<MiniCqeFormat>,
) -> Result<(QueueRings, KeepAlive)> {
    if let Some(s) = &spec.striding {
        dev.check_striding(s)?;
    }
    let rq_size = rq_sizing(spec.rx_ring, spec.striding)?;
    check_tx_ring(spec.tx_ring, dev.max_qp_wr)?;
    let ctx = pd.context();
    let tx_cq = Arc::new(create_cq(ctx, spec.tx_ring, None)?);
    let rx_cq = Arc::new(create_cq(ctx, rq_size.cqe, compress)?);
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
    };
    // Send only: receives go to the WQ, so the QP's receive CQ is its send CQ.
    let qp = Arc::new(crate::ibverbs::create_qp(
        pd,
        tx_cq.clone(),
        tx_cq.clone(),
        caps,
    )?);
    qp.ready(spec.port)?;
    let wq = Arc::new(create_wq(pd, rx_cq.clone(), rq_size, spec.striding)?);

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
            qps: qs.iter().map(|(_, k)| k.qp.clone()).collect(),
            wqs: qs.iter().map(|(_, k)| k.wq.clone()).collect(),
            queues: qs,
            dev,
            port: spec.port,
            pd,
            _mr: mr,
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
        let striding = match o.rq {
            crate::config::RqType::Cyclic => None,
            crate::config::RqType::Striding { log_num_strides } => Some(Striding {
                log_num_strides,
                log_stride_size: crate::config::DvRxOptions::log_stride_size(pool.buf_size()),
                two_byte_shift: false,
            }),
        };
        let spec = QueueSpec {
            port: *port,
            rx_ring: cfg.rx_ring,
            tx_ring: cfg.tx_ring,
            cqe_compression: true,
            striding,
        };
        // An explicit choice must be honoured (or refused); none: the device's best.
        let format = o.cqe_comp.map(|c| match c {
            crate::config::CqeComp::Off => None,
            crate::config::CqeComp::Hash => Some(MiniCqeFormat::Hash),
            crate::config::CqeComp::Csum => Some(MiniCqeFormat::CsumStrideIdx),
        });
        ControlPort::open_with(device, pool, &spec, cfg.queues, format)
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

    #[test]
    fn min_inline_guess_and_override() {
        assert_eq!(min_inline_for(4115, None).unwrap().0, 18);
        assert_eq!(min_inline_for(4119, None).unwrap().0, 0);
        assert_eq!(
            min_inline_for(4119, Some("18")).unwrap(),
            (18, "set by RAWQ_DV_MIN_INLINE")
        );
        assert_eq!(min_inline_for(4115, Some(" 0 ")).unwrap().0, 0);
        assert_eq!(min_inline_for(4115, Some("")).unwrap().0, 18);
        let e = min_inline_for(4119, Some("16")).unwrap_err().to_string();
        assert!(
            e.contains("RAWQ_DV_MIN_INLINE=16") && e.contains("0") && e.contains("18"),
            "{e}"
        );
    }

    /// Striding RQs are asked of libmlx5 the way VPP asks (one segment per stride, `max_wr`
    /// divided by the strides), with a CQ of one entry per stride (DPDK `mlx5_rxq_cqe_num`);
    /// more strides than a 512-byte RQ WQE holds are refused with the reason.
    #[test]
    fn rq_sizing_follows_the_libmlx5_wqe_limits() {
        let cyc = rq_sizing(1024, None).unwrap();
        assert_eq!((cyc.max_wr, cyc.max_sge, cyc.cqe), (1024, 1, 1024));
        for log in 1..=4u8 {
            let s = Striding {
                log_num_strides: log,
                log_stride_size: 10,
                two_byte_shift: false,
            };
            let z = rq_sizing(1024, Some(s)).unwrap();
            let n = 1u32 << log;
            assert_eq!((z.max_wr, z.max_sge, z.cqe), (1024 / n, n, 1024), "{log}");
            // libmlx5's WQE for it (a next segment plus `max_sge` data segments, 16 bytes
            // each) fits the 512-byte maximum RQ descriptor.
            assert!(16 * (z.max_sge + 1) <= 512);
        }
        let big = Striding {
            log_num_strides: 5,
            log_stride_size: 10,
            two_byte_shift: false,
        };
        let e = rq_sizing(1024, Some(big)).unwrap_err().to_string();
        assert!(e.contains("32 strides") && e.contains("512 bytes"), "{e}");
        // A ring smaller than one WQE's strides still gets one WQE.
        let s = Striding {
            log_num_strides: 4,
            ..big
        };
        assert_eq!(rq_sizing(8, Some(s)).unwrap().max_wr, 1);
    }

    #[test]
    fn tx_ring_limits_are_stated() {
        assert!(check_tx_ring(16384, 32768).is_ok());
        assert!(check_tx_ring(32768, 32768).is_ok());
        let e = check_tx_ring(32768, 16384).unwrap_err().to_string();
        assert!(
            e.contains("max_qp_wr") && e.contains("tx_ring <= 16384"),
            "{e}"
        );
        let e = check_tx_ring(65536, 1 << 20).unwrap_err().to_string();
        assert!(
            e.contains("16-bit") && e.contains("tx_ring <= 32768"),
            "{e}"
        );
    }

    #[test]
    fn rx_cq_must_hold_a_completion_per_stride() {
        let mut ring = [0u8; 64];
        let mut word = 0u32;
        let p = NonNull::new(ring.as_mut_ptr()).unwrap();
        let d = NonNull::new(&mut word as *mut u32).unwrap();
        let rq = RqRing {
            buf: p,
            wqe_cnt: 64,
            stride: 512,
            dbrec: d,
            striding: Some(Striding {
                log_num_strides: 4,
                log_stride_size: 10,
                two_byte_shift: false,
            }),
        };
        let cq = |cqe_cnt| CqRing {
            buf: p,
            cqe_cnt,
            cqe_size: 64,
            dbrec: d,
            cqn: 1,
        };
        assert!(check_rx_cq(&rq, &cq(1024)).is_ok());
        let e = check_rx_cq(&rq, &cq(128)).unwrap_err().to_string();
        assert!(e.contains("1024"), "{e}");
        let cyclic = RqRing {
            striding: None,
            ..rq
        };
        assert!(check_rx_cq(&cyclic, &cq(64)).is_ok());
    }
}
