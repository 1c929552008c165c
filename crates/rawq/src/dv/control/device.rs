//! What the device allows: `mlx5dv_query_device`, the minimum inline header, the `devinfo`
//! report.

use std::fmt::Write as _;

use crate::dv::rings::{MiniCqeFormat, Striding};
use crate::dv::sys::*;
use crate::error::{Error, Result};
use crate::ibverbs::context::Context;

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
    /// Largest TSO payload on a RAW_PACKET QP (0: no TSO).
    pub max_tso: u32,
    /// Receive WQs can strip VLAN tags.
    pub cvlan_strip: bool,
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

    /// Checks `s` against the striding RQ limits the device advertises. The fewest strides
    /// per WQE depend on the device: the kernel advertises (and accepts) 2^3 only with the
    /// `ext_stride_num_range` capability, 2^9 otherwise (Linux drivers/infiniband/hw/mlx5/
    /// main.c, `mlx5_ib_query_device`; qp.c, `prepare_user_rq`). rawq's striding WQEs hold at
    /// most [`MAX_STRIDES`](super::MAX_STRIDES) strides (one pool buffer each), so on a device
    /// without that capability only the cyclic RQ is possible.
    ///
    /// # Errors
    /// [`Error::Unsupported`] saying which limit `s` breaks and what to use instead.
    pub fn check_striding(&self, s: &Striding) -> Result<()> {
        if !self.striding() {
            return Err(Error::Unsupported(
                "this device has no striding (multi-packet) RQ: use --rq cyclic (RqType::Cyclic)"
                    .into(),
            ));
        }
        let (b, n) = (s.log_stride_size as u32, s.log_num_strides as u32);
        let (bl, bh) = self.stride_log_bytes;
        let (nl, nh) = self.stride_log_num;
        let rawq_max = super::MAX_STRIDES.trailing_zeros();
        if n < nl && nl > rawq_max {
            return Err(Error::Unsupported(format!(
                "striding RQ of 2^{n} strides: this device takes at least 2^{nl} strides per WQE \
                 (it lacks the ext_stride_num_range capability, which allows 2^3), and rawq's \
                 striding RQ has one pool buffer per stride, at most {} per WQE; use --rq cyclic \
                 (RqType::Cyclic)",
                super::MAX_STRIDES
            )));
        }
        if n < nl && nl <= rawq_max {
            return Err(Error::Unsupported(format!(
                "striding RQ of 2^{n} strides: this device takes at least 2^{nl} strides per WQE; \
                 use --rq striding:{} (RqType::Striding {{ log_num_strides: {nl} }})",
                1u32 << nl
            )));
        }
        if !(bl..=bh).contains(&b) || !(nl..=nh).contains(&n) {
            return Err(Error::Unsupported(format!(
                "striding RQ of 2^{n} strides of 2^{b} bytes: the device allows 2^{nl}..2^{nh} \
                 strides of 2^{bl}..2^{bh} bytes"
            )));
        }
        Ok(())
    }
}

pub(super) fn res_format(fmt: MiniCqeFormat) -> u32 {
    match fmt {
        MiniCqeFormat::Hash => MLX5DV_CQE_RES_FORMAT_HASH,
        MiniCqeFormat::CsumStrideIdx => MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX,
    }
}

/// Whether `ctx`'s device is driven by libmlx5 (`mlx5dv_is_supported`; false when libmlx5
/// cannot be loaded).
pub fn is_mlx5(ctx: &Context) -> bool {
    // SAFETY: the context is open; `device` is set by libibverbs at open and outlives it.
    let dev = unsafe { (*ctx.as_raw()).device };
    // SAFETY: `dev` is the live device of an open context.
    !dev.is_null()
        && crate::ibverbs::ffi::mlx5_library().is_ok()
        && unsafe { mlx5dv_is_supported(dev) }
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
        max_tso: attr.raw_packet_max_tso(),
        cvlan_strip: attr.raw_cvlan_stripping(),
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
        // A device without ext_stride_num_range (at least 2^9 strides) cannot hold rawq's
        // striding WQEs (at most 16 strides): the cyclic RQ is the answer.
        assert!(
            e.contains("2^9") && e.contains("ext_stride_num_range") && e.contains("--rq cyclic"),
            "{e}"
        );
        let min16 = DvDevice {
            stride_log_num: (4, 16),
            ..d
        };
        let e = min16.check_striding(&too_few).unwrap_err().to_string();
        assert!(e.contains("striding:16"), "{e}");
        let big = Striding {
            log_stride_size: 14,
            ..too_few
        };
        let ext = DvDevice {
            stride_log_num: (3, 16),
            ..d
        };
        assert!(ext.check_striding(&too_few).is_ok());
        let e = ext.check_striding(&big).unwrap_err().to_string();
        assert!(e.contains("2^6..2^13 bytes"), "{e}");
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
}
