//! The uverbs write() command decoder: header checks, then one entry point per command.
//!
//! Mirrors `drivers/infiniband/core/uverbs_main.c: ib_uverbs_write` and `verify_hdr`, and the
//! request/response helpers of `uverbs_cmd.c` (`uverbs_request`, `uverbs_response`):
//!
//! * legacy: `[ib_uverbs_cmd_hdr][core request (first u64 = response pointer)][driver udata]`,
//!   `in_words`/`out_words` in 4-byte words, `in_words` counting the header;
//! * extended (`IB_USER_VERBS_CMD_FLAG_EXTENDED`): `[hdr][ib_uverbs_ex_cmd_hdr][core][driver]`,
//!   sizes in 8-byte words, the response pointer in the extended header.
//!
//! A request shorter than the struct reads as zero-filled; longer with non-zero extra bytes is
//! refused with EOPNOTSUPP; a response is cut to the space given and the rest cleared.

mod context;
pub mod counters;
mod cq;
pub mod flow;
mod pd;
mod qp;
mod wq;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::device::{lock_file, Device, UFile};
use crate::sys;
pub(crate) use crate::uapi::u64_at;
use crate::uapi::{self, Pod};
use crate::umem;
use crate::Errno;

use libc::{EFAULT, EINVAL, ENOSPC, EOPNOTSUPP};

/// The command fd's entry points on the device (the interposer's write(), ioctl() and close()
/// of a command fd), here with the decoder they call rather than in [`crate::device`], which
/// the decoder is built on.
impl Device {
    /// write() on a command fd.
    ///
    /// A command that panics (a bug of the emulator or the model) answers EIO, and only that
    /// command: the panic is caught inside the file's lock, so the lock is not poisoned, and
    /// every object the file holds stays in its table, to be used or destroyed at close as
    /// usual.
    ///
    /// # Errors
    /// The command's errno.
    pub fn write(&self, fd: i32, buf: u64, count: usize) -> Result<usize, Errno> {
        let f = self.file(fd)?;
        // A device that failed fatally answers nothing more (crate::link::PortLink::fatal).
        if self.link.is_fatal() {
            return Err(libc::EIO);
        }
        let mut f = lock_file(&f);
        catch_unwind(AssertUnwindSafe(|| write(self, &mut f, buf, count))).unwrap_or_else(|_| {
            log::error!("a command on fd {fd} panicked (an emulator bug); it failed with EIO");
            Err(libc::EIO)
        })
    }

    /// ioctl() on a command fd ([`counters::ioctl`]), under the file's lock and caught as
    /// [`Device::write`] is.
    ///
    /// # Errors
    /// The errno the kernel would return.
    pub fn ioctl(&self, fd: i32, req: u64, arg: u64) -> Result<(), Errno> {
        let f = self.file(fd)?;
        if self.link.is_fatal() {
            return Err(libc::EIO);
        }
        let mut f = lock_file(&f);
        catch_unwind(AssertUnwindSafe(|| {
            counters::ioctl(
                &mut Ctx {
                    dev: self,
                    file: &mut f,
                },
                req,
                arg,
            )
        }))
        .unwrap_or_else(|_| {
            log::error!("an ioctl on fd {fd} panicked (an emulator bug); it failed with EIO");
            Err(libc::EIO)
        })
    }

    /// close() of a command fd: every object of the file is destroyed (`ib_uverbs_close` →
    /// `uverbs_destroy_ufile_hw`).
    pub fn release(&self, fd: i32) {
        let f = {
            let mut files = self.files();
            match files.remove(&fd) {
                // Another fd (a dup) still refers to the file: it stays open.
                Some(f) if files.values().any(|g| Arc::ptr_eq(g, &f)) => {
                    self.log(format_args!("close fd {fd} (the file stays open on a dup)"));
                    return;
                }
                f => f,
            }
        };
        let Some(f) = f else { return };
        let mut f = lock_file(&f);
        let objects = f.objs.len();
        // A destroy that panics must not keep the others from running.
        while !f.objs.is_empty() {
            let before = f.objs.len();
            let r = catch_unwind(AssertUnwindSafe(|| destroy_all(self, &mut f)));
            if r.is_err() {
                log::error!("destroying an object of fd {fd} panicked (an emulator bug)");
            }
            if f.objs.len() >= before {
                break;
            }
        }
        if let Some(ctx) = f.ctx.take() {
            self.link.remove_context(ctx.async_tx);
            sys::close(ctx.async_tx);
        }
        self.log(format_args!(
            "release fd {fd}: {objects} objects destroyed, {} left",
            f.objs.len()
        ));
        self.write_stats();
    }
}

/// Result of a command handler.
pub type CmdResult = Result<(), Errno>;

/// The decoded buffers of one command (the kernel's `uverbs_attr_bundle` ucore/driver_udata).
pub struct Attrs {
    /// Core request bytes (for legacy commands, starting with the response pointer).
    pub core_in: Vec<u8>,
    /// Core response: address and length.
    pub core_out: (u64, usize),
    /// Driver (mlx5) request bytes.
    pub drv_in: Vec<u8>,
    /// Driver response: address and length.
    pub drv_out: (u64, usize),
}

impl Attrs {
    /// The core request as `T` (`uverbs_request`).
    ///
    /// # Errors
    /// EOPNOTSUPP if bytes past `T` are not zero.
    pub fn request<T: Pod>(&self) -> Result<T, Errno> {
        let n = std::mem::size_of::<T>();
        if self.core_in.len() > n && self.core_in[n..].iter().any(|&b| b != 0) {
            return Err(EOPNOTSUPP);
        }
        Ok(uapi::from_prefix(&self.core_in))
    }

    /// Writes the core response (`uverbs_response`): cut to the space given, the rest cleared.
    ///
    /// # Errors
    /// EFAULT for a bad response pointer.
    pub fn response<T: Pod>(&self, t: &T) -> CmdResult {
        let (addr, len) = self.core_out;
        let b = uapi::bytes_of(t);
        let n = b.len().min(len);
        umem::copy_to_user(addr, &b[..n])?;
        if len > n {
            // The pointer is the application's: it may wrap (then EFAULT, as access_ok).
            umem::clear_user(addr.wrapping_add(n as u64), len - n)?;
        }
        Ok(())
    }

    /// The driver request as `T`, zero-filled (`ib_copy_from_udata` of `min(inlen, size)`).
    pub fn udata<T: Pod>(&self) -> T {
        uapi::from_prefix(&self.drv_in)
    }

    /// Writes the driver response, cut to `min(outlen, size)` (`ib_copy_to_udata`).
    ///
    /// # Errors
    /// EFAULT for a bad pointer.
    pub fn udata_response<T: Pod>(&self, t: &T) -> CmdResult {
        let (addr, len) = self.drv_out;
        let b = uapi::bytes_of(t);
        umem::copy_to_user(addr, &b[..b.len().min(len)])
    }
}

/// Who a handler works for.
pub struct Ctx<'a> {
    /// The device.
    pub dev: &'a Device,
    /// The open file (its context and objects).
    pub file: &'a mut UFile,
}

type Handler = fn(&mut Ctx<'_>, &Attrs) -> CmdResult;

/// One entry of the command table (`uverbs_api_write_method`).
struct Method {
    name: &'static str,
    handler: Handler,
    /// Smallest core request (`req_size`).
    req_size: usize,
    /// Smallest core response (`resp_size`).
    resp_size: usize,
    /// The request starts with a response pointer (legacy only).
    has_resp: bool,
    /// Driver udata follows the core request.
    has_udata: bool,
}

macro_rules! size {
    ($t:ty) => {
        std::mem::size_of::<$t>()
    };
}

/// Legacy commands (`uverbs_cmd.c: uverbs_def_write_intf`, `DECLARE_UVERBS_OBJECT` write
/// methods). `None`: not implemented by the device (EOPNOTSUPP).
fn legacy(cmd: u32) -> Option<Method> {
    use uapi::*;
    let m = |name, handler: Handler, req_size, resp_size, has_resp, has_udata| Method {
        name,
        handler,
        req_size,
        resp_size,
        has_resp,
        has_udata,
    };
    Some(match cmd {
        IB_USER_VERBS_CMD_GET_CONTEXT => m(
            "GET_CONTEXT",
            context::get_context,
            size!(ib_uverbs_get_context),
            size!(ib_uverbs_get_context_resp),
            true,
            true,
        ),
        IB_USER_VERBS_CMD_QUERY_DEVICE => m(
            "QUERY_DEVICE",
            context::query_device,
            size!(ib_uverbs_query_device),
            size!(ib_uverbs_query_device_resp),
            true,
            false,
        ),
        IB_USER_VERBS_CMD_QUERY_PORT => m(
            "QUERY_PORT",
            context::query_port,
            size!(ib_uverbs_query_port),
            size!(ib_uverbs_query_port_resp),
            true,
            false,
        ),
        IB_USER_VERBS_CMD_ALLOC_PD => m(
            "ALLOC_PD",
            pd::alloc_pd,
            size!(ib_uverbs_alloc_pd),
            size!(ib_uverbs_alloc_pd_resp),
            true,
            true,
        ),
        IB_USER_VERBS_CMD_DEALLOC_PD => m(
            "DEALLOC_PD",
            pd::dealloc_pd,
            size!(ib_uverbs_dealloc_pd),
            0,
            false,
            false,
        ),
        IB_USER_VERBS_CMD_REG_MR => m(
            "REG_MR",
            pd::reg_mr,
            size!(ib_uverbs_reg_mr),
            size!(ib_uverbs_reg_mr_resp),
            true,
            true,
        ),
        IB_USER_VERBS_CMD_DEREG_MR => m(
            "DEREG_MR",
            pd::dereg_mr,
            size!(ib_uverbs_dereg_mr),
            0,
            false,
            false,
        ),
        IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL => m(
            "CREATE_COMP_CHANNEL",
            cq::create_comp_channel,
            size!(ib_uverbs_create_comp_channel),
            size!(ib_uverbs_create_comp_channel_resp),
            true,
            false,
        ),
        IB_USER_VERBS_CMD_CREATE_CQ => m(
            "CREATE_CQ",
            cq::create_cq,
            size!(ib_uverbs_create_cq),
            size!(ib_uverbs_create_cq_resp),
            true,
            true,
        ),
        IB_USER_VERBS_CMD_DESTROY_CQ => m(
            "DESTROY_CQ",
            cq::destroy_cq,
            size!(ib_uverbs_destroy_cq),
            size!(ib_uverbs_destroy_cq_resp),
            true,
            false,
        ),
        IB_USER_VERBS_CMD_REQ_NOTIFY_CQ => m(
            "REQ_NOTIFY_CQ",
            cq::req_notify_cq,
            size!(ib_uverbs_req_notify_cq),
            0,
            false,
            false,
        ),
        IB_USER_VERBS_CMD_CREATE_QP => m(
            "CREATE_QP",
            qp::create_qp,
            size!(ib_uverbs_create_qp),
            size!(ib_uverbs_create_qp_resp),
            true,
            true,
        ),
        IB_USER_VERBS_CMD_MODIFY_QP => m(
            "MODIFY_QP",
            qp::modify_qp,
            size!(ib_uverbs_modify_qp),
            0,
            false,
            true,
        ),
        IB_USER_VERBS_CMD_DESTROY_QP => m(
            "DESTROY_QP",
            qp::destroy_qp,
            size!(ib_uverbs_destroy_qp),
            size!(ib_uverbs_destroy_qp_resp),
            true,
            false,
        ),
        _ => return None,
    })
}

/// Extended commands; `req_size`/`resp_size` are the `offsetofend` minimums of
/// `UAPI_DEF_WRITE_IO_EX` in `uverbs_cmd.c`.
fn extended(cmd: u32) -> Option<Method> {
    use crate::offsetofend;
    use uapi::*;
    let m = |name, handler: Handler, req_size, resp_size| Method {
        name,
        handler,
        req_size,
        resp_size,
        has_resp: false,
        has_udata: true,
    };
    Some(match cmd {
        IB_USER_VERBS_EX_CMD_QUERY_DEVICE => m(
            "EX_QUERY_DEVICE",
            context::ex_query_device,
            offsetofend!(ib_uverbs_ex_query_device, reserved),
            offsetofend!(ib_uverbs_ex_query_device_resp, response_length),
        ),
        IB_USER_VERBS_EX_CMD_CREATE_CQ => m(
            "EX_CREATE_CQ",
            cq::ex_create_cq,
            offsetofend!(ib_uverbs_ex_create_cq, reserved),
            offsetofend!(ib_uverbs_ex_create_cq_resp, response_length),
        ),
        IB_USER_VERBS_EX_CMD_CREATE_QP => m(
            "EX_CREATE_QP",
            qp::ex_create_qp,
            offsetofend!(ib_uverbs_ex_create_qp, comp_mask),
            offsetofend!(ib_uverbs_ex_create_qp_resp, response_length),
        ),
        IB_USER_VERBS_EX_CMD_MODIFY_QP => m(
            "EX_MODIFY_QP",
            qp::ex_modify_qp,
            offsetofend!(ib_uverbs_ex_modify_qp, base),
            offsetofend!(ib_uverbs_ex_modify_qp_resp, response_length),
        ),
        IB_USER_VERBS_EX_CMD_CREATE_WQ => m(
            "EX_CREATE_WQ",
            wq::create_wq,
            offsetofend!(ib_uverbs_ex_create_wq, max_sge),
            offsetofend!(ib_uverbs_ex_create_wq_resp, wqn),
        ),
        IB_USER_VERBS_EX_CMD_MODIFY_WQ => m(
            "EX_MODIFY_WQ",
            wq::modify_wq,
            offsetofend!(ib_uverbs_ex_modify_wq, curr_wq_state),
            0,
        ),
        IB_USER_VERBS_EX_CMD_DESTROY_WQ => m(
            "EX_DESTROY_WQ",
            wq::destroy_wq,
            offsetofend!(ib_uverbs_ex_destroy_wq, wq_handle),
            offsetofend!(ib_uverbs_ex_destroy_wq_resp, reserved),
        ),
        IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL => m(
            "EX_CREATE_RWQ_IND_TBL",
            wq::create_rwq_ind_tbl,
            offsetofend!(ib_uverbs_ex_create_rwq_ind_table, log_ind_tbl_size),
            offsetofend!(ib_uverbs_ex_create_rwq_ind_table_resp, ind_tbl_num),
        ),
        IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL => m(
            "EX_DESTROY_RWQ_IND_TBL",
            wq::destroy_rwq_ind_tbl,
            size!(ib_uverbs_ex_destroy_rwq_ind_table),
            0,
        ),
        IB_USER_VERBS_EX_CMD_CREATE_FLOW => m(
            "EX_CREATE_FLOW",
            flow::create_flow,
            offsetofend!(ib_uverbs_create_flow, flow_attr),
            offsetofend!(ib_uverbs_create_flow_resp, flow_handle),
        ),
        IB_USER_VERBS_EX_CMD_DESTROY_FLOW => m(
            "EX_DESTROY_FLOW",
            flow::destroy_flow,
            size!(ib_uverbs_destroy_flow),
            0,
        ),
        _ => return None,
    })
}

/// Decodes and runs one write() on the command fd; returns `count` on success.
///
/// # Errors
/// The errno the kernel would return.
pub fn write(dev: &Device, file: &mut UFile, buf: u64, count: usize) -> Result<usize, Errno> {
    let hsize = size!(uapi::ib_uverbs_cmd_hdr);
    if count < hsize {
        return Err(EINVAL);
    }
    let hdr: uapi::ib_uverbs_cmd_hdr = uapi::from_prefix(&umem::copy_from_user(buf, hsize)?);
    // uapi_get_method(): unknown flag bits are EINVAL, unknown commands EOPNOTSUPP.
    let flags = hdr.command & !uapi::IB_USER_VERBS_CMD_COMMAND_MASK;
    if flags & !uapi::IB_USER_VERBS_CMD_FLAG_EXTENDED != 0 {
        return Err(EINVAL);
    }
    let cmd = hdr.command & uapi::IB_USER_VERBS_CMD_COMMAND_MASK;
    let is_ex = flags != 0;
    let method = if is_ex { extended(cmd) } else { legacy(cmd) };
    let Some(method) = method else {
        dev.log(format_args!("command {cmd} (ex {is_ex}) not implemented"));
        return Err(EOPNOTSUPP);
    };
    let attrs = if is_ex {
        decode_ex(&hdr, &method, buf, count)?
    } else {
        decode_legacy(&hdr, &method, buf, count)?
    };
    // Every command but GET_CONTEXT needs the context (ib_uverbs_get_ucontext: EINVAL).
    if method.name != "GET_CONTEXT" && file.ctx.is_none() {
        return Err(EINVAL);
    }
    let r = (method.handler)(&mut Ctx { dev, file }, &attrs);
    dev.log(format_args!("{} -> {r:?}", method.name));
    #[cfg(debug_assertions)]
    inject_panic(dev, method.name);
    r.map(|()| count)
}

/// `RAWQ_EMU_PANIC_IN` (debug builds): the first command of that name panics here, after its
/// handler made its objects.
#[cfg(debug_assertions)]
fn inject_panic(dev: &Device, name: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DONE: AtomicBool = AtomicBool::new(false);
    if dev.cfg.panic_in.as_deref() == Some(name) && !DONE.swap(true, Ordering::Relaxed) {
        panic!("RAWQ_EMU_PANIC_IN={name}: the injected panic");
    }
}

/// `verify_hdr` + the legacy half of `ib_uverbs_write`.
fn decode_legacy(
    hdr: &uapi::ib_uverbs_cmd_hdr,
    m: &Method,
    buf: u64,
    count: usize,
) -> Result<Attrs, Errno> {
    let hsize = size!(uapi::ib_uverbs_cmd_hdr);
    if hdr.in_words as usize * 4 != count {
        return Err(EINVAL);
    }
    if count < m.req_size + hsize || (hdr.out_words as usize * 4) < m.resp_size {
        return Err(ENOSPC);
    }
    let body = umem::copy_from_user(buf.wrapping_add(hsize as u64), count - hsize)?;
    let out_len = hdr.out_words as usize * 4;
    let (core_in, drv_in) = if m.has_udata {
        let (a, b) = body.split_at(m.req_size);
        (a.to_vec(), b.to_vec())
    } else {
        (body, Vec::new())
    };
    let response = if m.has_resp {
        u64::from_ne_bytes(core_in[..8].try_into().map_err(|_| EFAULT)?)
    } else {
        0
    };
    let (core_out, drv_out) = match (m.has_resp, m.has_udata) {
        (true, true) => (
            (response, m.resp_size),
            // A response pointer that wraps with its size is EFAULT when the response is
            // written (copy_to_user's access_ok), as in ib_uverbs_write's udata setup.
            (
                response.wrapping_add(m.resp_size as u64),
                out_len - m.resp_size,
            ),
        ),
        (true, false) => ((response, out_len), (0, 0)),
        _ => ((0, 0), (0, 0)),
    };
    Ok(Attrs {
        core_in,
        core_out,
        drv_in,
        drv_out,
    })
}

/// `verify_hdr` + the extended half of `ib_uverbs_write`.
fn decode_ex(
    hdr: &uapi::ib_uverbs_cmd_hdr,
    m: &Method,
    buf: u64,
    count: usize,
) -> Result<Attrs, Errno> {
    let hsize = size!(uapi::ib_uverbs_cmd_hdr);
    let esize = size!(uapi::ib_uverbs_ex_cmd_hdr);
    if count < hsize + esize {
        return Err(EINVAL);
    }
    let ex: uapi::ib_uverbs_ex_cmd_hdr = uapi::from_prefix(&umem::copy_from_user(
        buf.wrapping_add(hsize as u64),
        esize,
    )?);
    let core_in = hdr.in_words as usize * 8;
    let drv_in = ex.provider_in_words as usize * 8;
    if core_in + drv_in != count - hsize - esize {
        return Err(EINVAL);
    }
    if core_in < m.req_size {
        return Err(ENOSPC);
    }
    if ex.cmd_hdr_reserved != 0 {
        return Err(EINVAL);
    }
    let core_out = hdr.out_words as usize * 8;
    let drv_out = ex.provider_out_words as usize * 8;
    if ex.response != 0 {
        if core_out == 0 && drv_out == 0 {
            return Err(EINVAL);
        }
        if core_out < m.resp_size {
            return Err(ENOSPC);
        }
    } else if core_out != 0 || drv_out != 0 {
        return Err(EINVAL);
    }
    let body = umem::copy_from_user(buf.wrapping_add((hsize + esize) as u64), core_in + drv_in)?;
    let (a, b) = body.split_at(core_in);
    Ok(Attrs {
        core_in: a.to_vec(),
        core_out: (ex.response, core_out),
        drv_in: b.to_vec(),
        drv_out: (ex.response.wrapping_add(core_out as u64), drv_out),
    })
}

/// Destroys every object of a file, users first (`uverbs_destroy_ufile_hw`).
pub fn destroy_all(dev: &Device, file: &mut UFile) {
    use crate::objects::Obj;
    let mut c = Ctx { dev, file };
    // Flows, then counters, QPs, tables, WQs, CQs, MRs, PDs: each only uses objects of later
    // kinds.
    let order: [fn(&Obj) -> bool; 8] = [
        |o| matches!(o, Obj::Flow(_)),
        |o| matches!(o, Obj::Counters(_)),
        |o| matches!(o, Obj::Qp(_)),
        |o| matches!(o, Obj::IndTbl(_)),
        |o| matches!(o, Obj::Wq(_)),
        |o| matches!(o, Obj::Cq(_)),
        |o| matches!(o, Obj::Mr(_)),
        |o| matches!(o, Obj::Pd(_)),
    ];
    for kind in order {
        for h in c.file.objs.handles_rev() {
            let Some(o) = c.file.objs.get(h) else {
                continue;
            };
            if !kind(o) {
                continue;
            }
            match o {
                Obj::Flow(_) => flow::destroy(&mut c, h),
                Obj::Counters(_) => counters::remove_at_close(&mut c, h),
                Obj::Qp(_) => qp::destroy(&mut c, h),
                Obj::IndTbl(_) => {
                    c.file.objs.remove(h);
                }
                Obj::Wq(_) => wq::destroy(&mut c, h),
                Obj::Cq(_) => {
                    cq::destroy(&mut c, h);
                }
                Obj::Mr(_) => pd::destroy_mr(&mut c, h),
                Obj::Pd(_) => {
                    c.file.objs.remove(h);
                }
            }
        }
    }
}
