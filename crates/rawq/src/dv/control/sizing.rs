//! Ring limits, checked before any verbs object is created: send ring size, receive sizing
//! (cyclic or striding), receive CQ capacity.

use crate::dv::rings::{CqRing, RqRing, Striding};
use crate::error::{Error, Result};

/// Largest send ring the DV data path drives: its WQEBB counter is 16 bits, and a ring of
/// 65536 WQEBBs could not tell full from empty.
const MAX_SQ_WQEBBS: u32 = 32768;

/// Most strides a striding RQ WQE can have in rawq, where every stride is a pool buffer of its
/// own (one data segment per stride, after the 16-byte next-segment header, as VPP does:
/// src/plugins/rdma/device.c). libmlx5 sizes the WQE as `16 × max_sge + 16` bytes and refuses
/// more than the device's largest RQ descriptor (`max_rq_desc_sz`, 512 bytes on ConnectX
/// parts; rdma-core providers/mlx5/verbs.c, `mlx5_calc_rwq_size`): 16 strides take 272 bytes,
/// 32 would take 528.
///
/// So rawq's striding WQEs span 8 or 16 pool buffers (8 or 16 KiB with 2 KiB buffers), which a
/// device takes only with the `ext_stride_num_range` capability (2^3 strides and up; 2^9
/// without it: [`DvDevice::check_striding`](super::DvDevice::check_striding) refuses with the
/// reason). DPDK's mlx5 PMD, whose striding WQE is one contiguous buffer, makes it at least
/// 16 KiB (drivers/common/mlx5/mlx5_prm.h `MLX5_MPRQ_LOG_MIN_STRIDE_WQE_SIZE`); that is its
/// own sizing choice, not a device limit.
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

/// Most data segments of a cyclic (scatter) RQ WQE: libmlx5 sizes it as `16 × max_sge` bytes,
/// rounded up to a power of two, and refuses more than the device's `max_rq_desc_sz` (512 bytes
/// on ConnectX parts; rdma-core providers/mlx5/verbs.c `mlx5_calc_rwq_size`), so 32 segments.
pub const MAX_SCATTER: u32 = 32;

/// The receive sizing of a cyclic RQ whose WQEs scatter a frame over `sges` pool buffers
/// (DPDK's scattered Rx: drivers/net/mlx5/mlx5_rxq.c `mlx5_rxq_new` sets `rxq->sges_n` to the
/// log2 of the segments a frame of the port's largest size needs, and one WQE spans them).
/// The WQE holds `sges` rounded up to a power of two segments (libmlx5's WQE size), every one a
/// pool buffer, so the RQ gets `rx_ring / that` WQEs: about `rx_ring` buffers posted, as
/// without scatter.
///
/// # Errors
/// [`Error::Config`] for more than [`MAX_SCATTER`] segments, with the fix.
pub fn rq_sizing_scatter(rx_ring: u32, sges: u32) -> Result<RqSizing> {
    if sges > MAX_SCATTER {
        return Err(Error::Config(format!(
            "a frame of this MTU needs {sges} pool buffers per receive WQE; libmlx5 creates RQ              WQEs of at most {MAX_SCATTER} data segments (512 bytes, mlx5_calc_rwq_size against              max_rq_desc_sz): use larger pool buffers (MempoolConfig::buf_size) or a smaller MTU"
        )));
    }
    let per_wqe = sges.max(1).next_power_of_two();
    let max_wr = (rx_ring / per_wqe).max(1);
    Ok(RqSizing {
        max_wr,
        max_sge: per_wqe,
        cqe: max_wr,
    })
}

pub use crate::config::scatter_segments;

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

#[cfg(test)]
mod tests {
    use std::ptr::NonNull;

    use super::*;

    /// Striding RQs are asked of libmlx5 the way VPP asks (one segment per stride, `max_wr`
    /// divided by the strides), with a CQ of one entry per stride (DPDK `mlx5_rxq_cqe_num`);
    /// more strides than a 512-byte RQ WQE holds are refused with the reason.
    #[test]
    fn scatter_sizing_keeps_the_buffers_posted_and_the_wqe_limit() {
        // 9216-byte frames in 2 KiB buffers with 128 bytes of headroom: 5 buffers, a WQE of 8.
        assert_eq!(scatter_segments(9216, 2048 - 128), 5);
        assert_eq!(scatter_segments(1518, 2048 - 128), 1);
        let s = rq_sizing_scatter(1024, 5).unwrap();
        assert_eq!((s.max_wr, s.max_sge, s.cqe), (128, 8, 128));
        assert!(16 * s.max_sge <= 512);
        let e = rq_sizing_scatter(1024, 33).unwrap_err().to_string();
        assert!(e.contains("buf_size"), "{e}");
    }

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
