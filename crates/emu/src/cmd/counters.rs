//! The uverbs ioctl() uAPI (`RDMA_VERBS_IOCTL`), served for one object: `UVERBS_OBJECT_COUNTERS`
//! (`ibv_create_counters`, `ibv_destroy_counters`, `ibv_read_counters`), which libibverbs issues
//! through ioctl only (rdma-core libibverbs/cmd_counters.c: `ibv_cmd_create_counters`,
//! `ibv_cmd_destroy_counters`, `ibv_cmd_read_counters` call `execute_ioctl` with no write()
//! fallback).
//!
//! Every other method is answered EPROTONOSUPPORT, the kernel's answer for a method its uAPI
//! tree lacks (Linux drivers/infiniband/core/uverbs_ioctl.c `ib_uverbs_cmd_verbs`:
//! `uapi_get_method` finds none). libibverbs takes that per method: rdma-core
//! libibverbs/cmd_fallback.c `_execute_ioctl_fallback` marks only that method unsupported and
//! uses write() for it (ENOTTY, the old answer, means "no ioctl framework at all" and turns the
//! ioctl path off for every method).
//!
//! The counters object itself follows the kernel: core
//! drivers/infiniband/core/uverbs_std_types_counters.c (CREATE, READ, DESTROY handlers, the use
//! count that makes a destroy of a bound object fail) and mlx5
//! drivers/infiniband/hw/mlx5/counters.c (`mlx5_ib_flow_counters_set_data`,
//! `counters_set_description`, `mlx5_ib_read_counters`, `mlx5_ib_counters_clear_description`).
//! The flow side (the `IBV_FLOW_SPEC_ACTION_COUNT` spec and the descriptions in the
//! create_flow udata) is in [`super::flow`].

use libc::{EFAULT, EINVAL, ENOENT, ENOTTY, EOPNOTSUPP, EPROTONOSUPPORT};

use super::Ctx;
use crate::objects::{Counters, Obj};
use crate::umem;
use crate::Errno;

/// `RDMA_VERBS_IOCTL`: `_IOWR(RDMA_IOCTL_MAGIC 0x1b, 1, struct ib_uverbs_ioctl_hdr)` (24 bytes),
/// rdma/rdma_user_ioctl_cmds.h.
pub const RDMA_VERBS_IOCTL: u64 = (3 << 30) | (24 << 16) | (0x1b << 8) | 1;
/// `UVERBS_OBJECT_COUNTERS` (rdma/ib_user_ioctl_cmds.h `enum uverbs_default_objects`).
const OBJECT_COUNTERS: u16 = 15;
/// `enum uverbs_methods_actions_counters_ops`.
const METHOD_CREATE: u16 = 0;
const METHOD_DESTROY: u16 = 1;
const METHOD_READ: u16 = 2;
/// Attribute ids: CREATE/DESTROY's handle is 0; READ's handle 0, buffer 1, flags 2.
const ATTR_HANDLE: u16 = 0;
const ATTR_READ_BUFF: u16 = 1;
const ATTR_READ_FLAGS: u16 = 2;
/// `UVERBS_ATTR_F_MANDATORY`, `UVERBS_ATTR_F_VALID_OUTPUT`.
const F_MANDATORY: u16 = 1;
const F_VALID_OUTPUT: u16 = 2;
/// `IB_UVERBS_READ_COUNTERS_PREFER_CACHED` (rdma/ib_user_ioctl_verbs.h), the one flag READ takes.
const READ_PREFER_CACHED: u64 = 1;
/// `IB_COUNTER_PACKETS` (what a description may name: frames).
pub const COUNTER_PACKETS: u32 = 0;
/// `IB_COUNTER_BYTES` (bytes).
pub const COUNTER_BYTES: u32 = 1;
/// `MAX_COUNTERS_NUM` of mlx5 counters.c: `USHRT_MAX / (sizeof(u32) * 2)`.
pub const MAX_DESCRIPTIONS: u32 = 0xffff / 8;

const HDR_SIZE: usize = 24;
const ATTR_SIZE: usize = 16;
const PAGE_SIZE: usize = 4096;

/// One `struct ib_uverbs_attr` as the application passed it, and where it lies.
#[derive(Clone, Copy, Debug)]
struct Attr {
    id: u16,
    len: u16,
    flags: u16,
    reserved: u16,
    data: u64,
    /// User address of this attribute in the header's array.
    at: u64,
}

// The process-wide tally of counters objects lives with the object tables (below the device,
// which writes it in the stats line).
pub use crate::objects::{counters_left_at_close as left_at_close, counters_live as live};
use crate::objects::{COUNTERS_LEFT_AT_CLOSE as LEFT_AT_CLOSE, COUNTERS_LIVE as LIVE};

/// `RAWQ_EMU_FLOW_COUNTERS=off`: the device has no flow counters, as a kernel whose driver lacks
/// the counters ops (uverbs_std_types_counters.c `UAPI_DEF_OBJ_NEEDS_FN(destroy_counters)`
/// leaves the object out of the uAPI tree, so its methods are EPROTONOSUPPORT), for testing
/// applications on such a device.
fn flow_counters_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RAWQ_EMU_FLOW_COUNTERS").map_or(true, |v| v != "off"))
}

/// One ioctl() on a command fd.
///
/// # Errors
/// The errno the kernel would return: ENOTTY for another request (`ib_uverbs_ioctl`:
/// -ENOIOCTLCMD), EINVAL for a malformed header, EPROTONOSUPPORT for a method not served.
pub fn ioctl(c: &mut Ctx<'_>, req: u64, arg: u64) -> Result<(), Errno> {
    if req != RDMA_VERBS_IOCTL {
        return Err(ENOTTY);
    }
    let h = umem::copy_from_user(arg, HDR_SIZE)?;
    let w16 = |i: usize| u16::from_ne_bytes([h[i], h[i + 1]]);
    let (length, object, method, num_attrs) = (w16(0), w16(2), w16(4), w16(6));
    let reserved1 = super::u64_at(&h, 8);
    let reserved2 = u32::from_ne_bytes([h[20], h[21], h[22], h[23]]);
    // uverbs_ioctl.c `ib_uverbs_ioctl`: the length must be exactly the header and its attrs;
    // reserved fields set are EPROTONOSUPPORT.
    if usize::from(length) > PAGE_SIZE
        || usize::from(length) != HDR_SIZE + ATTR_SIZE * usize::from(num_attrs)
    {
        return Err(EINVAL);
    }
    if reserved1 != 0 || reserved2 != 0 {
        return Err(EPROTONOSUPPORT);
    }
    let served = object == OBJECT_COUNTERS
        && flow_counters_on()
        && matches!(method, METHOD_CREATE | METHOD_DESTROY | METHOD_READ);
    if !served {
        c.dev.log(format_args!(
            "ioctl object {object:#x} method {method:#x} -> EPROTONOSUPPORT (write() fallback)"
        ));
        return Err(EPROTONOSUPPORT);
    }
    let body = umem::copy_from_user(arg + HDR_SIZE as u64, ATTR_SIZE * usize::from(num_attrs))?;
    let attrs: Vec<Attr> = body
        .chunks_exact(ATTR_SIZE)
        .enumerate()
        .map(|(i, a)| Attr {
            id: u16::from_ne_bytes([a[0], a[1]]),
            len: u16::from_ne_bytes([a[2], a[3]]),
            flags: u16::from_ne_bytes([a[4], a[5]]),
            reserved: u16::from_ne_bytes([a[6], a[7]]),
            data: super::u64_at(a, 8),
            at: arg + (HDR_SIZE + ATTR_SIZE * i) as u64,
        })
        .collect();
    // Every command needs the context (`ib_uverbs_get_ucontext`), as the write() ones.
    if c.file.ctx.is_none() {
        return Err(EINVAL);
    }
    let known: &[u16] = match method {
        METHOD_READ => &[ATTR_HANDLE, ATTR_READ_BUFF, ATTR_READ_FLAGS],
        _ => &[ATTR_HANDLE],
    };
    check_attrs(&attrs, known)?;
    let r = match method {
        METHOD_CREATE => create(c, &attrs),
        METHOD_DESTROY => destroy(c, &attrs),
        _ => read(c, &attrs),
    };
    c.dev
        .log(format_args!("ioctl COUNTERS method {method} -> {r:?}"));
    r
}

/// uverbs_ioctl.c `uverbs_process_attr` / `ib_uverbs_cmd_verbs`: an unknown attribute marked
/// mandatory is EPROTONOSUPPORT (an unknown optional one is ignored); a reserved field set is
/// EINVAL; an attribute twice is EINVAL.
fn check_attrs(attrs: &[Attr], known: &[u16]) -> Result<(), Errno> {
    for (i, a) in attrs.iter().enumerate() {
        if !known.contains(&a.id) {
            if a.flags & F_MANDATORY != 0 {
                return Err(EPROTONOSUPPORT);
            }
            continue;
        }
        if a.reserved != 0 || a.flags & !(F_MANDATORY | F_VALID_OUTPUT) != 0 {
            return Err(EINVAL);
        }
        if attrs[..i].iter().any(|b| b.id == a.id) {
            return Err(EINVAL);
        }
    }
    Ok(())
}

/// The attribute `id`, which the method declares mandatory (missing: EINVAL,
/// `uverbs_ioctl.c` checks the bundle's mandatory bits).
fn mandatory(attrs: &[Attr], id: u16) -> Result<Attr, Errno> {
    attrs.iter().find(|a| a.id == id).copied().ok_or(EINVAL)
}

/// An IDR attribute's handle: `len` must be 0 (`uverbs_process_attr`, UVERBS_ATTR_TYPE_IDR);
/// the handle is the low 32 bits of `data`.
fn idr(a: &Attr) -> Result<u32, Errno> {
    if a.len != 0 {
        return Err(EINVAL);
    }
    u32::try_from(a.data).map_err(|_| EINVAL)
}

/// The counters object at `h`: ENOENT when there is no object there, EINVAL when it is of
/// another type (rdma_core.c `lookup_get_idr_uobject`, `rdma_lookup_get_uobject`).
fn counters_at<'a>(c: &'a mut Ctx<'_>, h: u32) -> Result<&'a mut Counters, Errno> {
    match c.file.objs.get(h) {
        None => Err(ENOENT),
        Some(Obj::Counters(_)) => c.file.objs.counters_mut(h),
        Some(_) => Err(EINVAL),
    }
}

/// CREATE: a new object, its handle written back into the attribute's `data`
/// (uverbs_ioctl.c: `put_user` of the new id for an UVERBS_ACCESS_NEW attribute).
fn create(c: &mut Ctx<'_>, attrs: &[Attr]) -> Result<(), Errno> {
    let a = mandatory(attrs, ATTR_HANDLE)?;
    if a.len != 0 {
        return Err(EINVAL);
    }
    let h = c.file.objs.insert(Obj::Counters(Counters::default()))?;
    let at_data = a.at + 8;
    if let Err(e) = umem::copy_to_user(at_data, &u64::from(h).to_ne_bytes()) {
        c.file.objs.remove(h);
        return Err(e);
    }
    LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// DESTROY: EBUSY while a flow uses it (`uverbs_free_counters` → `ib_destroy_usecnt`).
fn destroy(c: &mut Ctx<'_>, attrs: &[Attr]) -> Result<(), Errno> {
    let h = idr(&mandatory(attrs, ATTR_HANDLE)?)?;
    c.file
        .objs
        .check_destroy(h, |o| matches!(o, Obj::Counters(_)))?;
    remove(c, h);
    Ok(())
}

/// Removes a counters object the application left, at the close of its file.
pub(super) fn remove_at_close(c: &mut Ctx<'_>, h: u32) {
    LEFT_AT_CLOSE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    remove(c, h);
}

/// Removes a counters object (after its flows are gone).
pub(super) fn remove(c: &mut Ctx<'_>, h: u32) {
    if let Some(Obj::Counters(_)) = c.file.objs.remove(h) {
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// READ (uverbs_std_types_counters.c `UVERBS_METHOD_COUNTERS_READ`, mlx5 counters.c
/// `mlx5_ib_read_counters`): EINVAL if no flow uses the object; the buffer holds
/// `len / 8` values, zeroed, and each description adds its hardware counter (packets or
/// bytes) at its index; a buffer shorter than the highest index + 1 is EINVAL. The buffer is
/// written back with the attribute's VALID_OUTPUT flag set (`uverbs_copy_to`).
fn read(c: &mut Ctx<'_>, attrs: &[Attr]) -> Result<(), Errno> {
    let h = idr(&mandatory(attrs, ATTR_HANDLE)?)?;
    let buff = mandatory(attrs, ATTR_READ_BUFF)?;
    if let Some(f) = attrs.iter().find(|a| a.id == ATTR_READ_FLAGS) {
        // `uverbs_get_flags32`: a 4- or 8-byte inline value, only known bits.
        if !matches!(f.len, 4 | 8) || f.data & !READ_PREFER_CACHED != 0 {
            return Err(EINVAL);
        }
    }
    let hw = c.dev.hw().cloned();
    let users = c.file.objs.users(h);
    let cn = counters_at(c, h)?;
    if users == 0 {
        return Err(EINVAL);
    }
    let n = usize::from(buff.len) / 8;
    if (cn.max_index as usize) > n {
        return Err(EINVAL);
    }
    let packets = cn.packets(hw.as_ref());
    let mut out = vec![0u64; n];
    for &(desc, index) in &cn.descriptions {
        // Bytes are refused when the flow binds the object (super::flow): the model counts
        // frames only.
        if desc == COUNTER_PACKETS {
            out[index as usize] += packets;
        }
    }
    let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_ne_bytes()).collect();
    umem::copy_to_user(buff.data, &bytes).map_err(|_| EFAULT)?;
    umem::copy_to_user(buff.at + 4, &(buff.flags | F_VALID_OUTPUT).to_ne_bytes())?;
    Ok(())
}

/// Binds counters object `h` to a new flow (mlx5 counters.c `mlx5_ib_flow_counters_set_data`):
/// with `descriptions` (the create_flow udata's), the object must not be bound yet (EINVAL)
/// and takes them (`counters_set_description`: a description beyond BYTES is EINVAL); without,
/// it must be bound already (EINVAL).
///
/// # Errors
/// EINVAL as above; EOPNOTSUPP for a BYTES description (the device model counts frames, not
/// bytes: the emulator refuses what it cannot count rather than answer a made-up number).
pub(super) fn check_bind(
    c: &mut Ctx<'_>,
    h: u32,
    descriptions: Option<&[(u32, u32)]>,
) -> Result<(), Errno> {
    let cn = counters_at(c, h).map_err(|_| EINVAL)?;
    match descriptions {
        Some(d) => {
            if cn.max_index != 0 {
                return Err(EINVAL);
            }
            if d.iter().any(|&(desc, _)| desc > COUNTER_BYTES) {
                return Err(EINVAL);
            }
            if d.iter().any(|&(desc, _)| desc == COUNTER_BYTES) {
                return Err(EOPNOTSUPP);
            }
        }
        None if cn.max_index == 0 => return Err(EINVAL),
        None => {}
    }
    Ok(())
}

/// Completes [`check_bind`] once the flow exists on the device as `flow` (if it does).
pub(super) fn bind(
    c: &mut Ctx<'_>,
    h: u32,
    descriptions: Option<Vec<(u32, u32)>>,
    flow: Option<u32>,
) {
    if let Ok(cn) = c.file.objs.counters_mut(h) {
        if let Some(d) = descriptions {
            cn.max_index = d
                .iter()
                .map(|&(_, i)| i.saturating_add(1))
                .max()
                .unwrap_or(0);
            cn.descriptions = d;
        }
        cn.flows.extend(flow);
    }
}

/// A flow that used counters object `h` is being destroyed (`flow` its device flow): its
/// frames stay in the object's hardware counter (mlx5 keeps the one `mlx5_fc` for the
/// object's life); the last flow to go clears the descriptions
/// (`mlx5_ib_counters_clear_description`, called by fs.c `mlx5_ib_destroy_flow` while the
/// flow still holds its use).
pub(super) fn unbind(c: &mut Ctx<'_>, h: u32, flow: Option<u32>) {
    let hw = c.dev.hw().cloned();
    let last = c.file.objs.users(h) == 1;
    if let Ok(cn) = c.file.objs.counters_mut(h) {
        if let Some(id) = flow {
            if let Some(hw) = &hw {
                cn.retired += hw.flow_hits(id).unwrap_or(0);
            }
            cn.flows.retain(|&f| f != id);
        }
        if last {
            cn.descriptions.clear();
            cn.max_index = 0;
        }
    }
}
