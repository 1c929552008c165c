//! EX_CREATE_WQ, EX_MODIFY_WQ, EX_DESTROY_WQ, EX_CREATE_RWQ_IND_TBL, EX_DESTROY_RWQ_IND_TBL.
//!
//! Kernel: `uverbs_cmd.c: ib_uverbs_ex_create_wq`, `ib_uverbs_ex_modify_wq`,
//! `ib_uverbs_ex_create_rwq_ind_table`; `mlx5/qp.c: mlx5_ib_create_wq`, `prepare_user_rq`,
//! `set_user_rq_size`, `mlx5_ib_modify_wq`, `mlx5_ib_create_rwq_ind_table`. libmlx5 builds the
//! request in `verbs.c: create_wq` (`mlx5dv_create_wq` adds the striding RQ fields).

use std::sync::Arc;

use libc::{EINVAL, EOPNOTSUPP};

use rawq_model::hw::{QueueState, RqDesc};
use rawq_model::Striding;

use super::{Attrs, CmdResult, Ctx};
use crate::caps::{self, striding};
use crate::objects::{IndTbl, Obj, Wq};
use crate::offsetofend;
use crate::pin::Pinned;
use crate::rings::hw_errno;
use crate::uapi::*;
use crate::umem::Access;

/// `enum ib_wq_state`.
const WQS_RESET: u32 = 0;
const WQS_RDY: u32 = 1;
const WQS_ERR: u32 = 2;
/// `enum ib_wq_attr_mask`.
const WQ_STATE: u32 = 1;
const WQ_CUR_STATE: u32 = 2;
const WQ_FLAGS: u32 = 4;
/// `IB_WQT_RQ`.
const WQT_RQ: u32 = 0;

pub(super) fn create_wq(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_ex_create_wq = a.request()?;
    if req.comp_mask != 0 {
        return Err(EOPNOTSUPP);
    }
    let pdn = c.file.objs.pd(req.pd_handle)?.pdn;
    let cqn = c.file.objs.cq(req.cq_handle)?.cqn;
    if req.wq_type != WQT_RQ {
        return Err(EOPNOTSUPP);
    }
    // mlx5_ib_create_wq: flags the device cannot do are EOPNOTSUPP; it can strip VLAN tags.
    if req.create_flags & !IB_UVERBS_WQ_FLAGS_CVLAN_STRIPPING != 0 {
        return Err(EOPNOTSUPP);
    }
    let vlan_strip = req.create_flags & IB_UVERBS_WQ_FLAGS_CVLAN_STRIPPING != 0;
    // prepare_user_rq(): up to the striding fields, nothing unknown after the struct.
    let need = std::mem::offset_of!(mlx5_ib_create_wq, single_stride_log_num_of_bytes);
    if a.drv_in.len() < need {
        return Err(EINVAL);
    }
    let size = std::mem::size_of::<mlx5_ib_create_wq>();
    if a.drv_in.len() > size && a.drv_in[size..].iter().any(|&b| b != 0) {
        return Err(EOPNOTSUPP);
    }
    let d: mlx5_ib_create_wq = a.udata();
    if d.comp_mask & !MLX5_IB_CREATE_WQ_STRIDING_RQ != 0 {
        return Err(EOPNOTSUPP);
    }
    // prepare_user_rq(): stride size and count within the limits, the minimum count 2^3 only
    // with `ext_stride_num_range` (else 2^9); EINVAL otherwise.
    let stride = if d.comp_mask & MLX5_IB_CREATE_WQ_STRIDING_RQ != 0 {
        let b = d.single_stride_log_num_of_bytes;
        let n = d.single_wqe_log_num_of_strides;
        if !(striding::MIN_STRIDE_LOG..=striding::MAX_STRIDE_LOG).contains(&b)
            || !(striding::min_strides_log(c.dev.cfg.ext_stride_range)..=striding::MAX_STRIDES_LOG)
                .contains(&n)
        {
            return Err(EINVAL);
        }
        Some(Striding {
            log_num_strides: n as u8,
            log_stride_size: b as u8,
            two_byte_shift: d.two_byte_shift_en != 0,
        })
    } else {
        None
    };
    // set_user_rq_size().
    if d.rq_wqe_count == 0
        || !d.rq_wqe_count.is_power_of_two()
        || req.max_wr > caps::MAX_QP_WR
        || d.rq_wqe_count > caps::MAX_QP_WR
        || d.rq_wqe_shift > 31
        || req.max_sge > caps::MAX_SGE
    {
        return Err(EINVAL);
    }
    // get_qp_user_index().
    if d.user_index > 0x00ff_ffff {
        return Err(EINVAL);
    }
    // create_user_rq(): ib_umem_get() of the ring (access 0: the device reads receive WQEs),
    // mlx5_ib_db_map_user() of the doorbell record.
    let mut pins = Pinned::default();
    pins.add(
        d.buf_addr,
        u64::from(d.rq_wqe_count) << d.rq_wqe_shift,
        Access::Read,
    )?;
    pins.add_dbrec(d.db_addr, 4)?;
    let (wqn, on_hw) = match c.dev.hw() {
        Some(hw) => {
            let rd = RqDesc {
                buf: d.buf_addr as usize,
                wqe_cnt: d.rq_wqe_count,
                stride: 1 << d.rq_wqe_shift,
                dbrec: d.db_addr as usize,
                cqn,
                striding: stride,
                user_index: d.user_index,
            };
            let rqn = crate::rings::adopt_rq(hw, rd)?;
            // The RQ's context names its PD (the mkeys it may use must be of it).
            if let Err(e) = hw.set_rq_pd(rqn, pdn) {
                let _ = hw.destroy_rq(rqn);
                return Err(hw_errno(&e));
            }
            if vlan_strip {
                if let Err(e) = hw.set_rq_vlan_strip(rqn, true) {
                    let _ = hw.destroy_rq(rqn);
                    return Err(hw_errno(&e));
                }
            }
            (rqn, true)
        }
        None => (c.dev.next_num(), false),
    };
    let h = c.file.objs.insert(Obj::Wq(Wq {
        wqn,
        pd: req.pd_handle,
        cq: req.cq_handle,
        state: WQS_RESET,
        on_hw,
        pins: Arc::new(pins),
    }))?;
    let r = ib_uverbs_ex_create_wq_resp {
        comp_mask: 0,
        response_length: offsetofend!(ib_uverbs_ex_create_wq_resp, wqn) as u32,
        wq_handle: h,
        max_wr: d.rq_wqe_count,
        max_sge: req.max_sge,
        wqn,
    };
    let dr = mlx5_ib_create_wq_resp {
        response_length: offsetofend!(mlx5_ib_create_wq_resp, response_length) as u32,
        reserved: 0,
    };
    a.response(&r)
        .and_then(|()| a.udata_response(&dr))
        .inspect_err(|_| destroy(c, h))
}

pub(super) fn modify_wq(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_ex_modify_wq = a.request()?;
    if req.attr_mask == 0 || req.attr_mask > (WQ_STATE | WQ_CUR_STATE | WQ_FLAGS) {
        return Err(EINVAL);
    }
    let wq = c.file.objs.wq(req.wq_handle)?.clone();
    // mlx5_ib_modify_wq(): the driver request (comp_mask, reserved) must be there and zero.
    if a.drv_in.len() < offsetofend!(mlx5_ib_modify_wq, reserved) {
        return Err(EINVAL);
    }
    let d: mlx5_ib_modify_wq = a.udata();
    if d.comp_mask != 0 || d.reserved != 0 {
        return Err(EOPNOTSUPP);
    }
    let strip = if req.attr_mask & WQ_FLAGS != 0 {
        if req.flags_mask & !IB_UVERBS_WQ_FLAGS_CVLAN_STRIPPING != 0 {
            return Err(EOPNOTSUPP);
        }
        (req.flags_mask & IB_UVERBS_WQ_FLAGS_CVLAN_STRIPPING != 0)
            .then_some(req.flags & IB_UVERBS_WQ_FLAGS_CVLAN_STRIPPING != 0)
    } else {
        None
    };
    let cur = if req.attr_mask & WQ_CUR_STATE != 0 {
        req.curr_wq_state
    } else {
        wq.state
    };
    let next = if req.attr_mask & WQ_STATE != 0 {
        req.wq_state
    } else {
        cur
    };
    if cur > WQS_ERR || next > WQS_ERR {
        return Err(EINVAL);
    }
    let s = match next {
        WQS_RESET => QueueState::Reset,
        WQS_RDY => QueueState::Ready,
        _ => QueueState::Error,
    };
    if wq.on_hw {
        if let Some(hw) = c.dev.hw() {
            if let Some(on) = strip {
                hw.set_rq_vlan_strip(wq.wqn, on).map_err(|e| hw_errno(&e))?;
            }
            hw.set_rq_state(wq.wqn, s).map_err(|e| hw_errno(&e))?;
        }
    }
    c.file.objs.wq_mut(req.wq_handle)?.state = next;
    Ok(())
}

pub(super) fn destroy_wq(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_ex_destroy_wq = a.request()?;
    if req.comp_mask != 0 {
        return Err(EINVAL);
    }
    c.file
        .objs
        .check_destroy(req.wq_handle, |o| matches!(o, Obj::Wq(_)))?;
    destroy(c, req.wq_handle);
    let r = ib_uverbs_ex_destroy_wq_resp {
        response_length: offsetofend!(ib_uverbs_ex_destroy_wq_resp, reserved) as u32,
        ..Default::default()
    };
    a.response(&r)
}

/// Removes a WQ from the table and the model.
pub(super) fn destroy(c: &mut Ctx<'_>, h: u32) {
    if let Some(Obj::Wq(wq)) = c.file.objs.remove(h) {
        if wq.on_hw {
            if let Some(hw) = c.dev.hw() {
                let _ = hw.destroy_rq(wq.wqn);
            }
        }
    }
}

pub(super) fn create_rwq_ind_tbl(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    // uverbs_request_start(): the handles follow the fixed part.
    let fixed = std::mem::size_of::<ib_uverbs_ex_create_rwq_ind_table>();
    let req: ib_uverbs_ex_create_rwq_ind_table = crate::uapi::from_prefix(&a.core_in);
    if req.comp_mask != 0 {
        return Err(EOPNOTSUPP);
    }
    if req.log_ind_tbl_size > IB_USER_VERBS_MAX_LOG_IND_TBL_SIZE
        || req.log_ind_tbl_size > caps::LOG_MAX_RWQ_IND_TBL
    {
        return Err(EINVAL);
    }
    let n = 1usize << req.log_ind_tbl_size;
    // One handle is padded to 8 bytes.
    let expected = n * 4 + if n == 1 { 4 } else { 0 };
    let rest = a.core_in.get(fixed..).unwrap_or(&[]);
    if rest.len() < expected {
        return Err(EINVAL);
    }
    if rest[expected..].iter().any(|&b| b != 0) {
        return Err(EOPNOTSUPP);
    }
    let mut wqs = Vec::with_capacity(n);
    for i in 0..n {
        let h = u32::from_ne_bytes([
            rest[4 * i],
            rest[4 * i + 1],
            rest[4 * i + 2],
            rest[4 * i + 3],
        ]);
        c.file.objs.wq(h)?;
        wqs.push(h);
    }
    // mlx5_ib_create_rwq_ind_table(): no driver input; room for response_length if any.
    if a.drv_in.iter().any(|&b| b != 0) {
        return Err(EOPNOTSUPP);
    }
    if a.drv_out.1 != 0 && a.drv_out.1 < 4 {
        return Err(EINVAL);
    }
    let num = c.dev.next_num();
    let h = c.file.objs.insert(Obj::IndTbl(IndTbl { num, wqs }))?;
    let r = ib_uverbs_ex_create_rwq_ind_table_resp {
        comp_mask: 0,
        response_length: offsetofend!(ib_uverbs_ex_create_rwq_ind_table_resp, ind_tbl_num) as u32,
        ind_tbl_handle: h,
        ind_tbl_num: num,
    };
    let dr = mlx5_ib_create_rwq_ind_tbl_resp {
        response_length: 4,
        reserved: 0,
    };
    a.response(&r)
        .and_then(|()| a.udata_response(&dr))
        .inspect_err(|_| {
            c.file.objs.remove(h);
        })
}

pub(super) fn destroy_rwq_ind_tbl(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_ex_destroy_rwq_ind_table = a.request()?;
    if req.comp_mask != 0 {
        return Err(EINVAL);
    }
    c.file
        .objs
        .check_destroy(req.ind_tbl_handle, |o| matches!(o, Obj::IndTbl(_)))?;
    c.file.objs.remove(req.ind_tbl_handle);
    Ok(())
}
