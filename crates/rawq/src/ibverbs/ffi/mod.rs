//! rdma-core's C interface as rawq uses it, with nothing linked and nothing generated at build
//! time.
//!
//! * `verbs.rs` and `mlx5dv.rs` are bindings generated once from rdma-core's `verbs.h` and
//!   `mlx5dv.h` by `scripts/gen-bindings.sh` (allowlisted to what rawq uses) and committed, so
//!   building rawq needs neither libclang nor the rdma-core headers. Their layouts are checked
//!   against the C compiler where the headers exist (`tests/layout.rs`, `dv/sys.rs`).
//! * libibverbs.so.1 and libmlx5.so.1 are opened at run time, the first time a verbs or dv port
//!   (or a device listing) needs them, and resolved into one table of function pointers per
//!   library ([`verbs_library`], [`mlx5_library`]). Without them those calls fail with
//!   [`Error::RdmaLibrary`], which says what to install; AF_XDP and the model backend never
//!   load them.
//! * The functions `verbs.h` defines `static inline` (never exported by the library) are
//!   written here in Rust and do what the header does: the context's ops table for the data
//!   path calls, the extended context (`verbs_get_ctx_op`) for the newer verbs, and the
//!   extended CQ's function pointers for polling it.
//!
//! Call sites use the C names: `ibv_alloc_pd(..)` here forwards to the loaded table.

// The generated files follow C's names and carry no docs; these allowances cover them only.
#[cfg(feature = "mlx5")]
#[path = "mlx5dv.rs"]
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    unused_imports,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]
pub mod mlx5dv;
#[path = "verbs.rs"]
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    unused_imports,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]
mod verbs;

pub use verbs::*;

use std::mem::{offset_of, size_of};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::ptr::{addr_of, null_mut};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The soname rawq opens for the verbs calls.
pub const LIBIBVERBS: &str = "libibverbs.so.1";
/// The soname rawq opens for the mlx5 Direct Verbs calls.
pub const LIBMLX5: &str = "libmlx5.so.1";

static VERBS: OnceLock<std::result::Result<Verbs, String>> = OnceLock::new();
#[cfg(feature = "mlx5")]
static MLX5: OnceLock<std::result::Result<mlx5dv::Mlx5dv, String>> = OnceLock::new();

/// libibverbs' function table, opening the library on first use.
///
/// # Errors
/// [`Error::RdmaLibrary`] when libibverbs.so.1 cannot be opened or lacks a function rawq calls.
pub fn verbs_library() -> Result<&'static Verbs> {
    let r = VERBS.get_or_init(|| {
        // SAFETY: opening libibverbs runs its constructors, which only initialise the library;
        // every symbol is resolved with the type its header declares (generated bindings).
        unsafe { Verbs::new(LIBIBVERBS) }.map_err(|e| e.to_string())
    });
    r.as_ref().map_err(|detail| Error::RdmaLibrary {
        library: LIBIBVERBS,
        detail: detail.clone(),
    })
}

/// libmlx5's function table (after libibverbs', which it needs), opening it on first use.
///
/// # Errors
/// [`Error::RdmaLibrary`] when either library cannot be opened or lacks a function rawq calls.
#[cfg(feature = "mlx5")]
pub fn mlx5_library() -> Result<&'static mlx5dv::Mlx5dv> {
    verbs_library()?;
    let r = MLX5.get_or_init(|| {
        // SAFETY: as for libibverbs; symbols are resolved with their header's types.
        unsafe { mlx5dv::Mlx5dv::new(LIBMLX5) }.map_err(|e| e.to_string())
    });
    r.as_ref().map_err(|detail| Error::RdmaLibrary {
        library: LIBMLX5,
        detail: detail.clone(),
    })
}

/// Sets `errno` (what a failed verbs call that returns NULL leaves for its caller).
fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// NULL with `errno` ENOSYS: what a pointer-returning call gives before its library was loaded
/// (never in practice: every verbs object comes from a call that loaded it).
fn not_loaded<T>() -> *mut T {
    set_errno(libc::ENOSYS);
    null_mut()
}

/// Forwards the C name to the loaded table; `or` is what the call returns when the table was
/// never loaded (every object these calls take was made through the table, so that cannot
/// happen for a valid argument; it is still an error value, never a crash).
macro_rules! forward {
    ($table:ident; $( fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)?, or $fail:expr; )*) => {
        $(
            #[doc = concat!("`", stringify!($name), "` from the loaded library.")]
            ///
            /// # Safety
            /// As the C function's.
            #[inline]
            pub unsafe fn $name($($a: $t),*) $(-> $r)? {
                match $table() {
                    // SAFETY: the caller keeps the C function's contract.
                    Some(l) => unsafe { (l.$name)($($a),*) },
                    None => $fail,
                }
            }
        )*
    };
}

fn loaded_verbs() -> Option<&'static Verbs> {
    VERBS.get().and_then(|r| r.as_ref().ok())
}

forward! { loaded_verbs;
    fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device, or not_loaded();
    fn ibv_free_device_list(list: *mut *mut ibv_device), or ();
    fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char, or not_loaded();
    fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context, or not_loaded();
    fn ibv_close_device(ctx: *mut ibv_context) -> c_int, or -1;
    fn ibv_query_gid(ctx: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int,
        or -1;
    fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd, or not_loaded();
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int, or libc::ENOSYS;
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int, or libc::ENOSYS;
    fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel, or not_loaded();
    fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int, or libc::ENOSYS;
    fn ibv_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq, or not_loaded();
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int, or libc::ENOSYS;
    fn ibv_get_cq_event(
        ch: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int, or -1;
    fn ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint), or ();
    fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp,
        or not_loaded();
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int,
        or libc::ENOSYS;
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int, or libc::ENOSYS;
    fn ibv_get_async_event(ctx: *mut ibv_context, ev: *mut ibv_async_event) -> c_int, or -1;
    fn ibv_ack_async_event(ev: *mut ibv_async_event), or ();
}

/// The table, loading the library if no call has yet (for the calls that take no object).
fn verbs_on_demand() -> Option<&'static Verbs> {
    verbs_library().ok()
}

forward! { verbs_on_demand;
    fn ibv_wc_status_str(status: ibv_wc_status::Type) -> *const c_char, or null_mut();
    fn ibv_port_state_str(state: ibv_port_state::Type) -> *const c_char, or null_mut();
}

/// `ibv_reg_mr` as verbs.h's macro resolves it: the library's `ibv_reg_mr` unless the access
/// flags ask for `IBV_ACCESS_OPTIONAL_RANGE`, then `ibv_reg_mr_iova2` with the address as IOVA.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    let Some(l) = loaded_verbs() else {
        return not_loaded();
    };
    let optional = ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE.0 as c_int;
    // SAFETY: the caller keeps the C function's contract.
    unsafe {
        if access & optional == 0 {
            (l.ibv_reg_mr)(pd, addr, len, access)
        } else {
            (l.ibv_reg_mr_iova2)(pd, addr, len, addr as u64, access as c_uint)
        }
    }
}

/// The extended context around `ctx` if its provider's `verbs_context` reaches the member at
/// `op_offset` (verbs.h `verbs_get_ctx` and `verbs_get_ctx_op`): `ctx->abi_compat` marks an
/// extended context with an all-ones pointer, the `verbs_context` ends with `ctx`, and its
/// `sz` tells how far it reaches back (new ops are added at the front, so offsets from the
/// end are stable across rdma-core versions).
///
/// # Safety
/// `ctx` must be an open context.
unsafe fn verbs_ctx(ctx: *mut ibv_context, op_offset: usize) -> Option<*mut verbs_context> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: `ctx` is an open context (caller); `abi_compat` is a plain member.
    if unsafe { (*ctx).abi_compat } as usize != usize::MAX {
        return None;
    }
    let v = ctx
        .cast::<u8>()
        .wrapping_sub(offset_of!(verbs_context, context))
        .cast::<verbs_context>();
    // SAFETY: an extended context lies at the end of its `verbs_context`, whose `sz` member
    // sits just before `context`.
    let sz = unsafe { addr_of!((*v).sz).read() };
    (sz >= size_of::<verbs_context>() - op_offset).then_some(v)
}

/// The provider's op `$op` of the extended context around `$ctx`, if it has one.
macro_rules! ctx_op {
    ($ctx:expr, $op:ident) => {{
        let ctx = $ctx;
        // SAFETY: `ctx` is open (the wrapper's caller).
        let v = unsafe { verbs_ctx(ctx, offset_of!(verbs_context, $op)) };
        match v {
            // SAFETY: `sz` showed the provider's context covers the member.
            Some(v) => unsafe { addr_of!((*v).$op).read() },
            None => None,
        }
    }};
}

/// verbs.h `ibv_query_device_ex`: the provider's op, or the legacy `ibv_query_device` into
/// `orig_attr` (rest zeroed) when it has none or it answers EOPNOTSUPP/ENOSYS.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: `input` is NULL or valid (caller).
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    if let Some(op) = ctx_op!(ctx, query_device_ex) {
        // SAFETY: the provider's op with an output buffer of the size passed.
        let rc = unsafe { op(ctx, input, attr, size_of::<ibv_device_attr_ex>()) };
        if rc != libc::EOPNOTSUPP && rc != libc::ENOSYS {
            return rc;
        }
    }
    let Some(l) = loaded_verbs() else {
        return libc::ENOSYS;
    };
    // SAFETY: `attr` is valid for writes (caller); all-zero is a valid value.
    unsafe {
        attr.write_bytes(0, 1);
        (l.ibv_query_device)(ctx, addr_of!((*attr).orig_attr).cast_mut())
    }
}

/// verbs.h `ibv_query_port` (the `___ibv_query_port` its macro names): the provider's op with
/// the full `ibv_port_attr`, or the exported function (which fills the older, shorter
/// layout) after zeroing it.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int {
    if let Some(op) = ctx_op!(ctx, query_port) {
        // SAFETY: the provider's op with an output buffer of the size passed.
        return unsafe { op(ctx, port, attr, size_of::<ibv_port_attr>()) };
    }
    let Some(l) = loaded_verbs() else {
        return libc::ENOSYS;
    };
    // SAFETY: `attr` is valid for writes (caller), and larger than the compat layout.
    unsafe {
        attr.write_bytes(0, 1);
        (l.ibv_query_port)(ctx, port, attr.cast())
    }
}

/// verbs.h `ibv_create_flow`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_create_flow(qp: *mut ibv_qp, flow: *mut ibv_flow_attr) -> *mut ibv_flow {
    // SAFETY: `qp` is a live QP (caller).
    match ctx_op!(unsafe { (*qp).context }, ibv_create_flow) {
        // SAFETY: the provider's op, with the caller's arguments.
        Some(op) => unsafe { op(qp, flow) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    }
}

/// verbs.h `ibv_destroy_flow`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_destroy_flow(flow: *mut ibv_flow) -> c_int {
    // SAFETY: `flow` is live (caller).
    match ctx_op!(unsafe { (*flow).context }, ibv_destroy_flow) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(flow) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_create_wq`: the provider's op, then the fields the library keeps in the WQ
/// (its context pointer, event count, mutex and condition variable) initialised as the header
/// does.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_create_wq(ctx: *mut ibv_context, attr: *mut ibv_wq_init_attr) -> *mut ibv_wq {
    let Some(op) = ctx_op!(ctx, create_wq) else {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    };
    // SAFETY: the provider's op, with the caller's arguments.
    let wq = unsafe { op(ctx, attr) };
    if !wq.is_null() {
        // SAFETY: `wq` was just made and is not shared yet; the mutex and condition variable
        // members have the C layouts (layout-checked bindings).
        unsafe {
            (*wq).wq_context = (*attr).wq_context;
            (*wq).events_completed = 0;
            libc::pthread_mutex_init(
                addr_of!((*wq).mutex)
                    .cast_mut()
                    .cast::<libc::pthread_mutex_t>(),
                std::ptr::null(),
            );
            libc::pthread_cond_init(
                addr_of!((*wq).cond)
                    .cast_mut()
                    .cast::<libc::pthread_cond_t>(),
                std::ptr::null(),
            );
        }
    }
    wq
}

/// verbs.h `ibv_modify_wq`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> c_int {
    // SAFETY: `wq` is live (caller).
    match ctx_op!(unsafe { (*wq).context }, modify_wq) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(wq, attr) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_destroy_wq`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_destroy_wq(wq: *mut ibv_wq) -> c_int {
    // SAFETY: `wq` is live (caller).
    match ctx_op!(unsafe { (*wq).context }, destroy_wq) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(wq) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_create_rwq_ind_table`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_create_rwq_ind_table(
    ctx: *mut ibv_context,
    attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table {
    match ctx_op!(ctx, create_rwq_ind_table) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(ctx, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    }
}

/// verbs.h `ibv_destroy_rwq_ind_table`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_destroy_rwq_ind_table(t: *mut ibv_rwq_ind_table) -> c_int {
    // SAFETY: `t` is live (caller).
    match ctx_op!(unsafe { (*t).context }, destroy_rwq_ind_table) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(t) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_create_qp_ex`: a request naming only a PD is an `ibv_create_qp` (whose
/// attribute struct is the extended one's prefix); otherwise the provider's op.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: `attr` is valid (caller).
    let (mask, pd) = unsafe { ((*attr).comp_mask, (*attr).pd) };
    if mask == ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0 {
        // SAFETY: `ibv_qp_init_attr` is the leading part of `ibv_qp_init_attr_ex`.
        return unsafe { ibv_create_qp(pd, attr.cast()) };
    }
    match ctx_op!(ctx, create_qp_ex) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(ctx, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    }
}

/// verbs.h `ibv_create_cq_ex`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    match ctx_op!(ctx, create_cq_ex) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(ctx, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    }
}

/// verbs.h `ibv_cq_ex_to_cq`: the extended CQ starts with the plain one.
///
/// # Safety
/// None beyond using the result as the C function's.
pub unsafe fn ibv_cq_ex_to_cq(cq: *mut ibv_cq_ex) -> *mut ibv_cq {
    cq.cast()
}

/// A CQ-ex function pointer the provider must set for the CQ's creation flags.
macro_rules! cq_ex_fn {
    ($cq:expr, $f:ident) => {
        // SAFETY: `$cq` is a live extended CQ (the wrapper's caller).
        match unsafe { (*$cq).$f } {
            Some(f) => f,
            None => return Default::default(),
        }
    };
}

/// A completion-less default for `cq_ex_fn!` on a function returning `c_int`: ENOSYS.
/// (Every provider sets the poll functions; this only keeps a missing one from crashing.)
fn enosys() -> c_int {
    libc::ENOSYS
}

/// verbs.h `ibv_start_poll`: 0, ENOENT on an empty CQ, or an errno.
///
/// # Safety
/// `cq` must be a live extended CQ.
pub unsafe fn ibv_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: `cq` is live (caller).
    match unsafe { (*cq).start_poll } {
        // SAFETY: the provider's function for this CQ.
        Some(f) => unsafe { f(cq, attr) },
        None => enosys(),
    }
}

/// verbs.h `ibv_next_poll`: 0, ENOENT when no more completions are ready, or an errno.
///
/// # Safety
/// `cq` must be a live extended CQ inside a poll batch.
pub unsafe fn ibv_next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: `cq` is live (caller).
    match unsafe { (*cq).next_poll } {
        // SAFETY: the provider's function for this CQ.
        Some(f) => unsafe { f(cq) },
        None => enosys(),
    }
}

/// verbs.h `ibv_end_poll`.
///
/// # Safety
/// `cq` must be a live extended CQ inside a poll batch.
pub unsafe fn ibv_end_poll(cq: *mut ibv_cq_ex) {
    let f = cq_ex_fn!(cq, end_poll);
    // SAFETY: the provider's function for this CQ.
    unsafe { f(cq) }
}

/// verbs.h `ibv_wc_read_vendor_err`.
///
/// # Safety
/// `cq` must be a live extended CQ on a completion.
pub unsafe fn ibv_wc_read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    let f = cq_ex_fn!(cq, read_vendor_err);
    // SAFETY: the provider's function for this CQ.
    unsafe { f(cq) }
}

/// verbs.h `ibv_wc_read_byte_len`.
///
/// # Safety
/// `cq` must be a live extended CQ made with `IBV_WC_EX_WITH_BYTE_LEN`, on a completion.
pub unsafe fn ibv_wc_read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    let f = cq_ex_fn!(cq, read_byte_len);
    // SAFETY: the provider's function for this CQ.
    unsafe { f(cq) }
}

/// verbs.h `ibv_wc_read_wc_flags`.
///
/// # Safety
/// `cq` must be a live extended CQ on a completion.
pub unsafe fn ibv_wc_read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    let f = cq_ex_fn!(cq, read_wc_flags);
    // SAFETY: the provider's function for this CQ.
    unsafe { f(cq) }
}

/// verbs.h `ibv_wc_read_cvlan`.
///
/// # Safety
/// `cq` must be a live extended CQ made with `IBV_WC_EX_WITH_CVLAN`, on a completion.
pub unsafe fn ibv_wc_read_cvlan(cq: *mut ibv_cq_ex) -> u16 {
    let f = cq_ex_fn!(cq, read_cvlan);
    // SAFETY: the provider's function for this CQ.
    unsafe { f(cq) }
}

/// Polls up to `n` completions of an extended CQ (made with `IBV_WC_EX_WITH_BYTE_LEN`, and
/// `IBV_WC_EX_WITH_CVLAN` when `cvlan` is not NULL) into `wc` (wr_id, status, vendor_err;
/// byte_len and wc_flags of successful ones) and each one's CVLAN into `cvlan` (0 for an error
/// completion). Returns how many, or a negative errno when the first poll fails.
///
/// One batch: `ibv_start_poll` (ENOENT: the CQ is empty, and then no `ibv_end_poll`),
/// `ibv_next_poll` per further completion (ENOENT: no more ready; another error ends the batch
/// with what was gathered, and the next call's start meets it again), one `ibv_end_poll`
/// (libibverbs' ibv_create_cq_ex(3) describes the sequence).
///
/// # Safety
/// `cq` must be a live extended CQ; `wc` (and `cvlan` unless NULL) valid for `n` entries.
pub unsafe fn rawq_poll_cq_ex(cq: *mut ibv_cq_ex, n: i32, wc: *mut ibv_wc, cvlan: *mut u16) -> i32 {
    if n <= 0 {
        return 0;
    }
    let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
    // SAFETY: `cq` is live (caller).
    let rc = unsafe { ibv_start_poll(cq, &mut attr) };
    if rc == libc::ENOENT {
        return 0;
    }
    if rc != 0 {
        return -rc;
    }
    let mut i = 0;
    loop {
        // SAFETY: `i < n`, within `wc` and `cvlan` (caller); `cq` is on a completion.
        unsafe {
            let w = &mut *wc.add(i as usize);
            w.wr_id = (*cq).wr_id;
            w.status = (*cq).status;
            let ok = w.status == ibv_wc_status::IBV_WC_SUCCESS;
            if ok {
                w.vendor_err = 0;
                w.byte_len = ibv_wc_read_byte_len(cq);
                w.wc_flags = ibv_wc_read_wc_flags(cq);
            } else {
                w.vendor_err = ibv_wc_read_vendor_err(cq);
                w.byte_len = 0;
                w.wc_flags = 0;
            }
            if !cvlan.is_null() {
                *cvlan.add(i as usize) = if ok { ibv_wc_read_cvlan(cq) } else { 0 };
            }
        }
        i += 1;
        // SAFETY: inside the batch `ibv_start_poll` opened.
        if i == n || unsafe { ibv_next_poll(cq) } != 0 {
            break;
        }
    }
    // SAFETY: closes the batch opened above.
    unsafe { ibv_end_poll(cq) };
    i
}

/// verbs.h `ibv_post_wq_recv`: the WQ's own function.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_post_wq_recv(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: `wq` is live (caller).
    match unsafe { (*wq).post_recv } {
        // SAFETY: the provider's function for this WQ.
        Some(f) => unsafe { f(wq, wr, bad) },
        None => libc::ENOSYS,
    }
}

/// verbs.h `ibv_post_send`: the context's ops table.
///
/// # Safety
/// As the C function's.
#[inline]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: `qp` and its context are live (caller).
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the provider's function.
        Some(f) => unsafe { f(qp, wr, bad) },
        None => libc::ENOSYS,
    }
}

/// verbs.h `ibv_post_recv`: the context's ops table.
///
/// # Safety
/// As the C function's.
#[inline]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: `qp` and its context are live (caller).
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the provider's function.
        Some(f) => unsafe { f(qp, wr, bad) },
        None => libc::ENOSYS,
    }
}

/// verbs.h `ibv_poll_cq`: the context's ops table; how many, or negative on error.
///
/// # Safety
/// As the C function's.
#[inline]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: `cq` and its context are live (caller).
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the provider's function.
        Some(f) => unsafe { f(cq, n, wc) },
        None => -libc::ENOSYS,
    }
}

/// verbs.h `ibv_req_notify_cq`: the context's ops table.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: `cq` and its context are live (caller).
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: the provider's function.
        Some(f) => unsafe { f(cq, solicited_only) },
        None => libc::ENOSYS,
    }
}

/// verbs.h `ibv_create_counters` with no attributes.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_create_counters(ctx: *mut ibv_context) -> *mut ibv_counters {
    let mut attr = ibv_counters_init_attr { comp_mask: 0 };
    match ctx_op!(ctx, create_counters) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(ctx, &mut attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    }
}

/// verbs.h `ibv_attach_counters_point_flow` describing counter `desc` at `index`, before any
/// flow (the flow argument NULL).
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_attach_counter(c: *mut ibv_counters, desc: i32, index: u32) -> c_int {
    // SAFETY: all-zero is a valid attribute struct.
    let mut attr: ibv_counter_attach_attr = unsafe { std::mem::zeroed() };
    attr.counter_desc = desc as ibv_counter_description::Type;
    attr.index = index;
    // SAFETY: `c` is live (caller).
    match ctx_op!(unsafe { (*c).context }, attach_counters_point_flow) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(c, &mut attr, null_mut()) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_read_counters`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_read_counters(
    c: *mut ibv_counters,
    values: *mut u64,
    n: u32,
    flags: u32,
) -> c_int {
    // SAFETY: `c` is live (caller).
    match ctx_op!(unsafe { (*c).context }, read_counters) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(c, values, n, flags) },
        None => libc::EOPNOTSUPP,
    }
}

/// verbs.h `ibv_destroy_counters`.
///
/// # Safety
/// As the C function's.
pub unsafe fn ibv_destroy_counters(c: *mut ibv_counters) -> c_int {
    // SAFETY: `c` is live (caller).
    match ctx_op!(unsafe { (*c).context }, destroy_counters) {
        // SAFETY: the provider's op.
        Some(op) => unsafe { op(c) },
        None => libc::EOPNOTSUPP,
    }
}

#[cfg(feature = "mlx5")]
fn loaded_mlx5() -> Option<&'static mlx5dv::Mlx5dv> {
    MLX5.get().and_then(|r| r.as_ref().ok())
}

#[cfg(feature = "mlx5")]
mod mlx5_calls {
    use super::mlx5dv::*;
    use super::*;
    forward! { loaded_mlx5;
        fn mlx5dv_is_supported(dev: *mut ibv_device) -> bool, or false;
        fn mlx5dv_query_device(ctx: *mut ibv_context, attrs: *mut mlx5dv_context) -> c_int,
            or libc::ENOSYS;
        fn mlx5dv_create_cq(
            ctx: *mut ibv_context,
            attr: *mut ibv_cq_init_attr_ex,
            dv: *mut mlx5dv_cq_init_attr,
        ) -> *mut ibv_cq_ex, or not_loaded();
        fn mlx5dv_create_wq(
            ctx: *mut ibv_context,
            attr: *mut ibv_wq_init_attr,
            dv: *mut mlx5dv_wq_init_attr,
        ) -> *mut ibv_wq, or not_loaded();
        fn mlx5dv_init_obj(obj: *mut mlx5dv_obj, types: u64) -> c_int, or libc::ENOSYS;
    }
}
#[cfg(feature = "mlx5")]
pub use mlx5_calls::*;
