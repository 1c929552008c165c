//! ALLOC_PD, DEALLOC_PD, REG_MR, DEREG_MR (`uverbs_cmd.c: ib_uverbs_alloc_pd`,
//! `ib_uverbs_reg_mr`; `uverbs_std_types.c: uverbs_free_pd`; `mlx5/mr.c:
//! mlx5_ib_reg_user_mr`; `umem.c: ib_umem_get`).

use std::sync::Arc;

use libc::EINVAL;

use super::{Attrs, CmdResult, Ctx};
use crate::objects::{Mr, Obj, Pd};
use crate::pin;
use crate::rings::hw_errno;
use crate::uapi::*;
use crate::umem::Access;

pub(super) fn alloc_pd(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let _req: ib_uverbs_alloc_pd = a.request()?;
    let pdn = c.dev.next_num();
    let h = c.file.objs.insert(Obj::Pd(Pd { pdn }))?;
    let r = ib_uverbs_alloc_pd_resp {
        pd_handle: h,
        ..Default::default()
    };
    let d = mlx5_ib_alloc_pd_resp { pdn };
    if let Err(e) = a.response(&r).and_then(|()| a.udata_response(&d)) {
        c.file.objs.remove(h);
        return Err(e);
    }
    Ok(())
}

pub(super) fn dealloc_pd(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_dealloc_pd = a.request()?;
    c.file
        .objs
        .check_destroy(req.pd_handle, |o| matches!(o, Obj::Pd(_)))?;
    c.file.objs.remove(req.pd_handle);
    Ok(())
}

/// `IB_ACCESS_*` bits a user MR may ask for (`ib_check_mr_access`, `IB_ACCESS_SUPPORTED`).
const ACCESS_LOCAL_WRITE: u32 = 1;
const ACCESS_REMOTE_WRITE: u32 = 2;
const ACCESS_REMOTE_ATOMIC: u32 = 8;
const ACCESS_SUPPORTED: u32 = 0x0f_ffff;
/// `ib_access_writable` (`include/rdma/ib_umem.h`... `ib_verbs.h`): `IB_ACCESS_LOCAL_WRITE |
/// IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_ATOMIC | IB_ACCESS_MW_BIND`.
const ACCESS_WRITABLE: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC | 0x10;

pub(super) fn reg_mr(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_reg_mr = a.request()?;
    // ib_uverbs_reg_mr: start and iova must share their page offset.
    if (req.start ^ req.hca_va) & 0xfff != 0 {
        return Err(EINVAL);
    }
    // ib_check_mr_access: remote write/atomic need local write; no unknown bits.
    let acc = req.access_flags;
    if acc & !ACCESS_SUPPORTED != 0
        || (acc & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
            && acc & ACCESS_LOCAL_WRITE == 0)
    {
        return Err(EINVAL);
    }
    let pdn = c.file.objs.pd(req.pd_handle)?.pdn;
    // mlx5_ib_reg_user_mr -> ib_umem_get: no empty or wrapping range, at most UINT_MAX pages
    // (EINVAL); every page mapped with the access the device needs (EFAULT), writable when
    // the MR is (ib_access_writable: local/remote write, remote atomic, MW bind).
    let access = if acc & ACCESS_WRITABLE != 0 {
        Access::Write
    } else {
        Access::Read
    };
    let pins = pin::pin(req.start, req.length, access)?;
    let (lkey, on_hw) = match c.dev.hw() {
        Some(hw) => (
            // The mkey carries the PD and the local-write bit (mr.c
            // `set_mkc_access_pd_addr_fields`): the device checks both on every use.
            hw.reg_mr_in(req.start, req.length, pdn, acc & ACCESS_LOCAL_WRITE != 0)
                .map_err(|e| hw_errno(&e))?,
            true,
        ),
        None => ((c.dev.next_num() << 8) | 0x42, false),
    };
    let mr = Mr {
        pd: req.pd_handle,
        addr: req.start,
        len: req.length,
        lkey,
        on_hw,
        pins: Arc::new(pins),
    };
    let h = c.file.objs.insert(Obj::Mr(mr))?;
    let r = ib_uverbs_reg_mr_resp {
        mr_handle: h,
        lkey,
        rkey: lkey,
        ..Default::default()
    };
    if let Err(e) = a.response(&r) {
        destroy_mr(c, h);
        return Err(e);
    }
    Ok(())
}

pub(super) fn dereg_mr(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_dereg_mr = a.request()?;
    c.file
        .objs
        .check_destroy(req.mr_handle, |o| matches!(o, Obj::Mr(_)))?;
    destroy_mr(c, req.mr_handle);
    Ok(())
}

pub(super) fn destroy_mr(c: &mut Ctx<'_>, h: u32) {
    if let Some(Obj::Mr(m)) = c.file.objs.remove(h) {
        if m.on_hw {
            if let Some(hw) = c.dev.hw() {
                let _ = hw.dereg_mr(m.lkey);
            }
        }
    }
}
