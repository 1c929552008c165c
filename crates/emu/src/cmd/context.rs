//! GET_CONTEXT, QUERY_DEVICE (legacy and extended), QUERY_PORT.
//!
//! Kernel: `uverbs_cmd.c: ib_uverbs_get_context`, `ib_uverbs_query_device`,
//! `ib_uverbs_ex_query_device`, `ib_uverbs_query_port`; `mlx5/main.c:
//! mlx5_ib_alloc_ucontext`, `mlx5_ib_query_device`. libmlx5 reads the answers in
//! `mlx5.c: mlx5_set_context` and `verbs.c: mlx5_query_device_ex`.

use libc::{EINVAL, EOPNOTSUPP};

use super::{Attrs, CmdResult, Ctx};
use crate::caps::{self, port, striding, ucontext as uc};
use crate::config::MinInline;
use crate::device::Ucontext;
use crate::mmap::Uars;
use crate::offsetofend;
use crate::sys;
use crate::uapi::*;

/// `MLX5_MAX_BFREGS` (`MLX5_MAX_UARS * MLX5_NON_FP_BFREGS_PER_UAR`).
const MAX_BFREGS: u32 = 256 * 2;

pub(super) fn get_context(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    // One context per file.
    if c.file.ctx.is_some() {
        return Err(EINVAL);
    }
    let _req: ib_uverbs_get_context = a.request()?;
    // mlx5_ib_alloc_ucontext: v0 request or at least up to max_cqe_version of v2.
    let min_v2 = offsetofend!(mlx5_ib_alloc_ucontext_req_v2, max_cqe_version);
    if a.drv_in.len() != 8 && a.drv_in.len() < min_v2 {
        return Err(EINVAL);
    }
    let req: mlx5_ib_alloc_ucontext_req_v2 = a.udata();
    c.dev.log(format_args!(
        "GET_CONTEXT req: {} bytes, bfregs {} low-lat {} flags {:#x} comp_mask {:#x} \
         max_cqe_version {} lib_caps {:#x}",
        a.drv_in.len(),
        req.total_num_bfregs,
        req.num_low_latency_bfregs,
        req.flags,
        req.comp_mask,
        req.max_cqe_version,
        req.lib_caps
    ));
    if req.flags & !MLX5_IB_ALLOC_UCTX_DEVX != 0 {
        return Err(EOPNOTSUPP);
    }
    // DEVX needs the ioctl interface, which is not emulated.
    if req.flags & MLX5_IB_ALLOC_UCTX_DEVX != 0 {
        return Err(EOPNOTSUPP);
    }
    if req.comp_mask != 0 || req.reserved0 != 0 || req.reserved1 != 0 || req.reserved2 != 0 {
        return Err(EOPNOTSUPP);
    }
    // calc_total_bfregs(): none is EINVAL, more than MLX5_MAX_BFREGS (256 UARs of 2 non-fast-path
    // bfregs, include/linux/mlx5/driver.h) ENOMEM, before the count is rounded up.
    if req.total_num_bfregs == 0 {
        return Err(EINVAL);
    }
    if req.total_num_bfregs > MAX_BFREGS {
        return Err(libc::ENOMEM);
    }
    let tot_bfregs = req.total_num_bfregs.next_multiple_of(uc::BFREGS_PER_UAR);
    if tot_bfregs == 0 || req.num_low_latency_bfregs > tot_bfregs - 1 {
        return Err(EINVAL);
    }
    let hw = c.dev.hw();
    let uars = if hw.is_some() {
        Some(Uars::map(
            c.file.fd,
            tot_bfregs,
            req.num_low_latency_bfregs,
        )?)
    } else {
        None
    };
    let cloexec = true;
    let (async_app, async_tx) = sys::event_pair(cloexec)?;

    let resp = ib_uverbs_get_context_resp {
        async_fd: async_app as u32,
        num_comp_vectors: 1,
        ..Default::default()
    };
    let mut d = mlx5_ib_alloc_ucontext_resp {
        qp_tab_size: uc::QP_TAB_SIZE,
        bf_reg_size: uc::BF_REG_SIZE,
        tot_bfregs,
        cache_line_size: uc::CACHE_LINE,
        max_sq_desc_sz: uc::MAX_SQ_DESC,
        max_rq_desc_sz: uc::MAX_RQ_DESC,
        max_send_wqebb: caps::MAX_QP_WR,
        max_recv_wr: caps::MAX_QP_WR,
        max_srq_recv_wr: caps::MAX_QP_WR - 1,
        num_ports: 1,
        // CQEs carry the user index (srqn_uidx) when libmlx5 asks for version 1.
        cqe_version: req.max_cqe_version.min(1),
        cmds_supp_uhw: (MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE | MLX5_USER_CMDS_SUPP_UHW_CREATE_AH)
            as u8,
        // The kernel reports the device's inline mode + 1 (mlx5_query_min_inline()).
        eth_min_inline: match c.dev.cfg.min_inline {
            MinInline::None => MLX5_USER_INLINE_MODE_NONE,
            MinInline::L2 => MLX5_USER_INLINE_MODE_L2,
        } as u8,
        log_uar_size: uc::LOG_UAR_SIZE,
        num_uars_per_page: uc::UARS_PER_PAGE,
        ..Default::default()
    };
    if hw.is_some() {
        // The free-running clock: its 64-bit big-endian value sits at this offset of the
        // MLX5_IB_MMAP_CORE_CLOCK page (libmlx5: mlx5_map_internal_clock, mlx5_read_clock).
        d.comp_mask |= MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET;
        d.hca_core_clock_offset = 0;
    }
    d.response_length = std::mem::size_of::<mlx5_ib_alloc_ucontext_resp>() as u32;
    if let Err(e) = a.response(&resp).and_then(|()| a.udata_response(&d)) {
        sys::close(async_app);
        sys::close(async_tx);
        return Err(e);
    }
    c.file.ctx = Some(Ucontext {
        tot_bfregs,
        uars,
        async_tx,
        async_app,
        clock: None,
        has_clock: hw.is_some(),
    });
    c.dev.link.add_context(async_tx);
    c.dev.log(format_args!(
        "GET_CONTEXT bfregs {tot_bfregs} cqe_version {} min_inline {:?}",
        d.cqe_version, c.dev.cfg.min_inline
    ));
    Ok(())
}

/// The base device attributes (`copy_query_dev_fields`).
fn device_attr(id: caps::Ident, cfg: &crate::config::Config) -> ib_uverbs_query_device_resp {
    let guid = id.node_guid().to_be();
    ib_uverbs_query_device_resp {
        fw_ver: caps::fw_ver(),
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: !0xfff,
        vendor_id: caps::VENDOR_ID,
        vendor_part_id: caps::part(cfg.part, cfg.min_inline).1,
        hw_ver: 0,
        max_qp: 1 << 18,
        max_qp_wr: caps::MAX_QP_WR,
        device_cap_flags: IB_UVERBS_DEVICE_RAW_IP_CSUM as u32
            | IB_UVERBS_DEVICE_PORT_ACTIVE_EVENT as u32
            | IB_UVERBS_DEVICE_MEM_MGT_EXTENSIONS as u32
            // Flow steering (ibv_create_flow) on RAW_PACKET QPs.
            | IB_UVERBS_DEVICE_MANAGED_FLOW_STEERING as u32,
        max_sge: caps::MAX_SGE,
        max_sge_rd: caps::MAX_SGE,
        max_cq: 1 << 24,
        max_cqe: caps::MAX_CQE,
        max_mr: 1 << 24,
        max_pd: 1 << 24,
        max_qp_rd_atom: 16,
        max_qp_init_rd_atom: 16,
        max_res_rd_atom: 16 << 18,
        atomic_cap: 0,
        max_srq: 1 << 23,
        max_srq_wr: caps::MAX_QP_WR - 1,
        max_srq_sge: 31,
        max_pkeys: 128,
        local_ca_ack_delay: 16,
        phys_port_cnt: 1,
        max_raw_ethy_qp: 1 << 18,
        ..Default::default()
    }
}

pub(super) fn query_device(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let _req: ib_uverbs_query_device = a.request()?;
    a.response(&device_attr(c.dev.ident, &c.dev.cfg))
}

/// `IB_UVERBS_RAW_PACKET_CAP_*`: CVLAN stripping and IP checksum offload (the model has no FCS
/// to scatter).
const RAW_PACKET_CAPS: u32 = IB_UVERBS_RAW_PACKET_CAP_CVLAN_STRIPPING | 4;

pub(super) fn ex_query_device(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_ex_query_device = a.request()?;
    if req.comp_mask != 0 || req.reserved != 0 {
        return Err(EINVAL);
    }
    // mlx5_ib_query_device(): driver input must be all zero, and an output shorter than
    // comp_mask + response_length is refused.
    if a.drv_in.iter().any(|&b| b != 0) {
        return Err(EINVAL);
    }
    if a.drv_out.1 != 0 && a.drv_out.1 < 8 {
        return Err(EINVAL);
    }
    let base = device_attr(c.dev.ident, &c.dev.cfg);
    let mut r = ib_uverbs_ex_query_device_resp {
        base,
        device_cap_flags_ex: u64::from(base.device_cap_flags),
        max_wq_type_rq: 1 << 24,
        raw_packet_caps: RAW_PACKET_CAPS,
        ..Default::default()
    };
    if c.file.ctx.as_ref().is_some_and(|x| x.has_clock) {
        // mlx5_ib_query_device: 63-bit timestamps at device_frequency_khz.
        if c.dev.cfg.cqe_timestamps {
            r.timestamp_mask = (1 << 63) - 1;
        }
        r.hca_core_clock = caps::CLOCK_KHZ;
    }
    r.rss_caps.supported_qpts = 1 << IB_UVERBS_QPT_RAW_PACKET;
    r.rss_caps.max_rwq_indirection_tables = 1 << 16;
    r.rss_caps.max_rwq_indirection_table_size = 1 << caps::LOG_MAX_RWQ_IND_TBL;
    r.response_length = std::mem::size_of_val(&r).min(a.core_out.1) as u32;
    a.response(&r)?;
    // The model takes eMPW WQEs only without a minimum inline header (and has no legacy MPW).
    let empw = c.dev.cfg.min_inline == MinInline::None;
    a.udata_response(&mlx5_query_device(c.dev.cfg.ext_stride_range, empw))
}

/// The mlx5 part of EX_QUERY_DEVICE: what rawq's model implements (the striding minimum per
/// `ext_stride_range`, [`striding::min_strides_log`]; multi-packet send where it takes it:
/// `mlx5_ib_query_device` reports ALLOW_MPW and SUPPORT_EMPW from the device's capabilities,
/// and DPDK's PMD sends eMPW only when both are set, drivers/net/mlx5/linux/mlx5_os.c).
fn mlx5_query_device(ext_stride_range: bool, empw: bool) -> mlx5_ib_query_device_resp {
    let mut d = mlx5_ib_query_device_resp {
        comp_mask: 0,
        response_length: std::mem::size_of::<mlx5_ib_query_device_resp>() as u32,
        mlx5_ib_support_multi_pkt_send_wqes: if empw {
            MLX5_IB_ALLOW_MPW | MLX5_IB_SUPPORT_EMPW
        } else {
            0
        },
        flags: MLX5_IB_QUERY_DEV_RESP_FLAGS_CQE_128B_COMP
            | MLX5_IB_QUERY_DEV_RESP_FLAGS_CQE_128B_PAD,
        ..Default::default()
    };
    // TSO as far as the model segments it (rawq-model engine/tso.rs): libmlx5 copies these
    // into `ibv_query_device_ex`'s `tso_caps` (providers/mlx5/verbs.c `mlx5_query_device_ex`)
    // and refuses an IBV_WR_TSO payload above `max_tso`.
    d.tso_caps.max_tso = rawq_model::MAX_TSO;
    d.tso_caps.supported_qpts = 1 << IB_UVERBS_QPT_RAW_PACKET;
    d.rss_caps.rx_hash_function = MLX5_RX_HASH_FUNC_TOEPLITZ as u8;
    d.rss_caps.rx_hash_fields_mask = u64::from(
        MLX5_RX_HASH_SRC_IPV4
            | MLX5_RX_HASH_DST_IPV4
            | MLX5_RX_HASH_SRC_IPV6
            | MLX5_RX_HASH_DST_IPV6
            | MLX5_RX_HASH_SRC_PORT_TCP
            | MLX5_RX_HASH_DST_PORT_TCP
            | MLX5_RX_HASH_SRC_PORT_UDP
            | MLX5_RX_HASH_DST_PORT_UDP,
    );
    d.cqe_comp_caps.max_num = caps::CQE_COMP_MAX_NUM;
    d.cqe_comp_caps.supported_format =
        MLX5_IB_CQE_RES_FORMAT_HASH | MLX5_IB_CQE_RES_FORMAT_CSUM_STRIDX;
    // Packet pacing: off (packet_pacing_caps all zero).
    d.striding_rq_caps.min_single_stride_log_num_of_bytes = striding::MIN_STRIDE_LOG;
    d.striding_rq_caps.max_single_stride_log_num_of_bytes = striding::MAX_STRIDE_LOG;
    d.striding_rq_caps.min_single_wqe_log_num_of_strides =
        striding::min_strides_log(ext_stride_range);
    d.striding_rq_caps.max_single_wqe_log_num_of_strides = striding::MAX_STRIDES_LOG;
    d.striding_rq_caps.supported_qpts = 1 << IB_UVERBS_QPT_RAW_PACKET;
    d
}

pub(super) fn query_port(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_query_port = a.request()?;
    // rdma_is_port_valid().
    if req.port_num != 1 {
        return Err(EINVAL);
    }
    let r = ib_uverbs_query_port_resp {
        // IB_PORT_CM_SUP | IB_PORT_IP_BASED_GIDS.
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: 1 << 30,
        gid_tbl_len: port::GID_TBL_LEN,
        pkey_tbl_len: 1,
        state: port::STATE_ACTIVE,
        max_mtu: port::MAX_MTU,
        active_mtu: port::ACTIVE_MTU,
        max_vl_num: 4,
        active_width: port::WIDTH_4X,
        active_speed: port::SPEED_EDR,
        phys_state: port::PHYS_LINK_UP,
        link_layer: port::LINK_LAYER_ETHERNET,
        ..Default::default()
    };
    // Down while the wire is (mlx5_query_port_roce: IB_PORT_DOWN, physical state 3).
    let r = if c.dev.link.is_up() {
        r
    } else {
        ib_uverbs_query_port_resp {
            state: crate::link::STATE_DOWN,
            phys_state: crate::link::PHYS_DISABLED,
            ..r
        }
    };
    a.response(&r)
}
