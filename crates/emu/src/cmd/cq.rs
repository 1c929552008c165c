//! CREATE_COMP_CHANNEL, CREATE_CQ (legacy and extended), DESTROY_CQ, REQ_NOTIFY_CQ.
//!
//! Kernel: `uverbs_cmd.c: ib_uverbs_create_comp_channel`, `create_cq`, `ib_uverbs_destroy_cq`;
//! `mlx5/cq.c: mlx5_ib_create_cq`, `create_cq_user`. libmlx5 builds the request in
//! `verbs.c: create_cq` (`cmd.cqe = ncqe - 1`, `buf_addr`, `db_addr`, `cqe_size`,
//! `cqe_comp_en`, `cqe_comp_res_format`). Arming is done by libmlx5 through the CQ doorbell
//! record and UAR (`mlx5_arm_cq`), which the model watches (the arm takes both:
//! `Hw::set_cq_uar`); REQ_NOTIFY_CQ is never sent by it.

use libc::{EBADF, EINVAL, EOPNOTSUPP};

use rawq_model::hw::CqDesc;
use rawq_model::MiniCqeFormat;

use std::sync::Arc;

use super::{Attrs, CmdResult, Ctx};
use crate::caps;
use crate::objects::{Cq, Obj};
use crate::pin::Pinned;
use crate::rings::hw_errno;
use crate::uapi::*;
use crate::umem::Access;
use crate::{offsetofend, sys, umem};

pub(super) fn create_comp_channel(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let _req: ib_uverbs_create_comp_channel = a.request()?;
    let (app, ours) = sys::event_pair(true)?;
    let r = ib_uverbs_create_comp_channel_resp { fd: app as u32 };
    if let Err(e) = a.response(&r) {
        sys::close(app);
        sys::close(ours);
        return Err(e);
    }
    c.dev.events.add_channel(app, ours);
    Ok(())
}

/// The core fields both CREATE_CQ forms carry.
struct CoreCq {
    user_handle: u64,
    cqe: u32,
    comp_vector: u32,
    comp_channel: i32,
    flags: u32,
}

/// `IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION | IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN`.
const CQ_FLAGS_SUPPORTED: u32 = 1 | CQ_FLAG_IGNORE_OVERRUN;
/// `IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN`.
const CQ_FLAG_IGNORE_OVERRUN: u32 = 2;

fn create(c: &mut Ctx<'_>, a: &Attrs, core: CoreCq) -> Result<(u32, u32, u32), i32> {
    // create_cq(): one completion vector; a channel must be one of ours (EBADF).
    if core.comp_vector >= 1 {
        return Err(EINVAL);
    }
    let channel = if core.comp_channel >= 0 {
        let tx = c.dev.events.channel(core.comp_channel).ok_or(EBADF)?;
        Some((core.comp_channel, tx))
    } else {
        None
    };
    // mlx5_ib_create_cq: check_cq_create_flags, then the size.
    if core.flags & !CQ_FLAGS_SUPPORTED != 0 {
        return Err(EOPNOTSUPP);
    }
    let entries = (core.cqe as u64 + 1).next_power_of_two();
    if core.cqe as i32 <= -1 || entries > u64::from(caps::MAX_CQE) + 1 {
        return Err(EINVAL);
    }
    let entries = entries as u32;
    // create_cq_user(): at least up to `flags` of the driver request.
    if a.drv_in.len() < std::mem::offset_of!(mlx5_ib_create_cq, flags) {
        return Err(EINVAL);
    }
    let d: mlx5_ib_create_cq = a.udata();
    let known = MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD | MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX;
    if u32::from(d.flags) & !known != 0 {
        return Err(EINVAL);
    }
    if (d.cqe_size != 64 && d.cqe_size != 128) || d.reserved0 != 0 || d.reserved1 != 0 {
        return Err(EINVAL);
    }
    let compression = match (d.cqe_comp_en, d.cqe_comp_res_format as u32) {
        (0, _) => None,
        (1, MLX5_IB_CQE_RES_FORMAT_HASH) => Some(MiniCqeFormat::Hash),
        (1, MLX5_IB_CQE_RES_FORMAT_CSUM_STRIDX) => Some(MiniCqeFormat::CsumStrideIdx),
        _ => return Err(EOPNOTSUPP),
    };
    // create_cq_user(): ib_umem_get() of the buffer with IB_ACCESS_LOCAL_WRITE (the device
    // writes CQEs), mlx5_ib_db_map_user() of the doorbell record (read).
    let mut pins = Pinned::default();
    let cq_bytes = u64::from(entries) * u64::from(d.cqe_size);
    pins.add(d.buf_addr, cq_bytes, Access::Write)?;
    pins.add_dbrec(d.db_addr, 8)?;
    // The arm word starts as an arm no mlx5_arm_cq can write (rawq's model: ARM_SENTINEL), so
    // the first arm, even an all-zero one, is seen. libmlx5 never reads that word; a record
    // the application made read-only keeps its zero (libmlx5 could not arm it either).
    let _ = umem::copy_to_user(d.db_addr.wrapping_add(4), &u32::MAX.to_be_bytes());
    let (cqn, on_hw) = match c.dev.hw() {
        Some(hw) => {
            let desc = CqDesc {
                buf: d.buf_addr as usize,
                cqe_cnt: entries,
                cqe_size: d.cqe_size,
                dbrec: d.db_addr as usize,
                compression,
            };
            let cqn = crate::rings::adopt_cq(hw, desc)?;
            // The CQ doorbell the device takes arms through: MLX5_CQ_DOORBELL (0x20) of the
            // UAR page in the CQ context, the context's first page (Linux mlx5 cq.c
            // `create_cq_user`: `bfregi.sys_pages[0]` unless UAR_PAGE_INDEX names a dynamic
            // UAR, which this emulator does not hand out); libmlx5's `mlx5_arm_cq` writes
            // there through `cq_uar_reg`, the first UAR it mapped.
            let uar = c.file.ctx.as_ref().and_then(|x| x.uars.as_ref());
            if let Some(u) = uar {
                if let Err(e) = crate::rings::set_cq_uar(hw, cqn, u.page_of_bfreg(0) + 0x20) {
                    let _ = hw.destroy_cq(cqn);
                    return Err(e);
                }
            }
            // mlx5_ib_create_cq: IGNORE_OVERRUN sets the CQ context's `oi` bit.
            if core.flags & CQ_FLAG_IGNORE_OVERRUN != 0 {
                if let Err(e) = hw.set_cq_ignore_overrun(cqn, true) {
                    let _ = hw.destroy_cq(cqn);
                    return Err(hw_errno(&e));
                }
            }
            (cqn, true)
        }
        None => (c.dev.next_num(), false),
    };
    let async_fds = c
        .file
        .ctx
        .as_ref()
        .map_or((-1, -1), |x| (x.async_app, x.async_tx));
    let cq = Cq {
        cqn,
        entries,
        cqe_size: d.cqe_size,
        user_handle: core.user_handle,
        channel: channel.map(|(app, _)| app),
        on_hw,
        pins: Arc::new(pins),
    };
    let h = c.file.objs.insert(Obj::Cq(cq))?;
    c.dev
        .events
        .add_cq(cqn, channel, core.user_handle, async_fds);
    Ok((h, cqn, entries))
}

pub(super) fn create_cq(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_create_cq = a.request()?;
    let (h, cqn, entries) = create(
        c,
        a,
        CoreCq {
            user_handle: req.user_handle,
            cqe: req.cqe,
            comp_vector: req.comp_vector,
            comp_channel: req.comp_channel,
            flags: 0,
        },
    )?;
    let r = ib_uverbs_create_cq_resp {
        cq_handle: h,
        cqe: entries - 1,
        ..Default::default()
    };
    let d = mlx5_ib_create_cq_resp {
        cqn,
        ..Default::default()
    };
    a.response(&r)
        .and_then(|()| a.udata_response(&d))
        .inspect_err(|_| {
            destroy(c, h);
        })
}

pub(super) fn ex_create_cq(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_ex_create_cq = a.request()?;
    if req.comp_mask != 0 || req.reserved != 0 {
        return Err(EINVAL);
    }
    let (h, cqn, entries) = create(
        c,
        a,
        CoreCq {
            user_handle: req.user_handle,
            cqe: req.cqe,
            comp_vector: req.comp_vector,
            comp_channel: req.comp_channel,
            flags: req.flags,
        },
    )?;
    let mut r = ib_uverbs_ex_create_cq_resp::default();
    r.base.cq_handle = h;
    r.base.cqe = entries - 1;
    r.response_length = offsetofend!(ib_uverbs_ex_create_cq_resp, response_length) as u32;
    let d = mlx5_ib_create_cq_resp {
        cqn,
        ..Default::default()
    };
    a.response(&r)
        .and_then(|()| a.udata_response(&d))
        .inspect_err(|_| {
            destroy(c, h);
        })
}

pub(super) fn destroy_cq(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_destroy_cq = a.request()?;
    c.file
        .objs
        .check_destroy(req.cq_handle, |o| matches!(o, Obj::Cq(_)))?;
    let (comp, asy) = destroy(c, req.cq_handle);
    let r = ib_uverbs_destroy_cq_resp {
        comp_events_reported: comp,
        async_events_reported: asy,
    };
    a.response(&r)
}

/// Removes a CQ from the table, the model and event routing; returns events reported.
pub(super) fn destroy(c: &mut Ctx<'_>, h: u32) -> (u32, u32) {
    let Some(Obj::Cq(cq)) = c.file.objs.remove(h) else {
        return (0, 0);
    };
    if cq.on_hw {
        if let Some(hw) = c.dev.hw() {
            if let Err(e) = hw.destroy_cq(cq.cqn) {
                c.dev.log(format_args!("model destroy_cq {}: {e}", cq.cqn));
            }
        }
    }
    c.dev.events.remove_cq(cq.cqn)
}

pub(super) fn req_notify_cq(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_req_notify_cq = a.request()?;
    // The arm itself reaches the model through the doorbell record, as libmlx5 writes it.
    c.file.objs.cq(req.cq_handle).map(|_| ())
}
