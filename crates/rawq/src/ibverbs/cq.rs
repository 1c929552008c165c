//! Completion queues (`ibv_cq`).

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::*;

use super::channel::CompChannel;
use super::context::Context;
use crate::error::{Error, Result};

/// A completion queue, polled, with a completion channel when made by [`Cq::with_channel`].
/// Shared through `Arc` by the queue that polls it and the QP or WQ that completes into it, so
/// it is destroyed after them.
pub struct Cq {
    cq: NonNull<ibv_cq>,
    /// Created by `ibv_create_cq_ex` (then `cq` is its `ibv_cq_ex_to_cq`, the same pointer):
    /// polled with `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll`, never `ibv_poll_cq`.
    ex: Option<NonNull<ibv_cq_ex>>,
    cqe: u32,
    /// Destroyed after the CQ (fields drop after `Drop::drop`).
    channel: Option<Arc<CompChannel>>,
    _ctx: Context,
}

// SAFETY: a CQ handle may be used from any thread; polling happens only from the one queue that
// owns the polling side (`&mut` on that queue).
unsafe impl Send for Cq {}
// SAFETY: see `Send`.
unsafe impl Sync for Cq {}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq").field("cqe", &self.cqe).finish()
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: every QP/WQ using this CQ holds an `Arc<Cq>`, so none is left (otherwise the
        // call would fail with EBUSY).
        let rc = unsafe { ibv_destroy_cq(self.cq.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_cq failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

impl Cq {
    /// Creates a CQ with room for at least `cqe` completions.
    ///
    /// # Errors
    /// [`Error::Os`]: EINVAL when `cqe` exceeds the device's `max_cqe`, ENOMEM.
    pub fn new(ctx: &Context, cqe: u32) -> Result<Cq> {
        let n = libc::c_int::try_from(cqe)
            .map_err(|_| Error::Config(format!("CQ size {cqe} is too large")))?;
        // SAFETY: the context is open; no channel and no user context are passed.
        let cq = unsafe {
            ibv_create_cq(
                ctx.as_raw(),
                n,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let cq = NonNull::new(cq).ok_or_else(|| Error::last_os("ibv_create_cq"))?;
        // SAFETY: just created.
        let actual = unsafe { (*cq.as_ptr()).cqe }.max(0) as u32;
        Ok(Cq {
            cq,
            ex: None,
            cqe: actual,
            channel: None,
            _ctx: ctx.clone(),
        })
    }

    /// As [`Cq::new`], with its completion events going to `channel`.
    ///
    /// # Errors
    /// As [`Cq::new`].
    pub fn with_channel(ctx: &Context, cqe: u32, channel: Arc<CompChannel>) -> Result<Cq> {
        let n = libc::c_int::try_from(cqe)
            .map_err(|_| Error::Config(format!("CQ size {cqe} is too large")))?;
        // SAFETY: the context and the channel are alive; the channel outlives the CQ (held in
        // it, dropped after it).
        let cq =
            unsafe { ibv_create_cq(ctx.as_raw(), n, std::ptr::null_mut(), channel.as_raw(), 0) };
        let cq = NonNull::new(cq).ok_or_else(|| Error::last_os("ibv_create_cq"))?;
        // SAFETY: just created.
        let actual = unsafe { (*cq.as_ptr()).cqe }.max(0) as u32;
        Ok(Cq {
            cq,
            ex: None,
            cqe: actual,
            channel: Some(channel),
            _ctx: ctx.clone(),
        })
    }

    /// An extended CQ (`ibv_create_cq_ex`) whose completions carry the VLAN tag the device
    /// stripped: `wc_flags` `IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_CVLAN` (rdma-core
    /// libibverbs/man/ibv_create_cq_ex.3; libmlx5 providers/mlx5/verbs.c `create_cq` takes
    /// both, `CREATE_CQ_SUPPORTED_WC_FLAGS`, and cq.c `mlx5_cq_fill_pfns` installs
    /// `mlx5_cq_read_wc_cvlan`, which returns the CQE's `vlan_info`). Polled with
    /// [`Cq::poll_cvlan`]; events go to `channel` when given.
    ///
    /// # Errors
    /// [`Error::Os`]: EOPNOTSUPP/ENOTSUP when the provider has no extended CQ or cannot report
    /// the tag, EINVAL when `cqe` exceeds the device's `max_cqe`, ENOMEM.
    pub fn with_cvlan(ctx: &Context, cqe: u32, channel: Option<Arc<CompChannel>>) -> Result<Cq> {
        // SAFETY: plain old data; all-zero is a valid start (no comp_mask: no flags, no PD).
        let mut a: ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        a.cqe = cqe;
        a.channel = channel
            .as_ref()
            .map_or(std::ptr::null_mut(), |c| c.as_raw());
        a.wc_flags = u64::from(
            ibv_create_cq_wc_flags::IBV_WC_EX_WITH_BYTE_LEN.0
                | ibv_create_cq_wc_flags::IBV_WC_EX_WITH_CVLAN.0,
        );
        // SAFETY: the context is open; the channel (if any) outlives the CQ (held in it,
        // dropped after it).
        let ex = unsafe { super::ffi::ibv_create_cq_ex(ctx.as_raw(), &mut a) };
        let ex = NonNull::new(ex).ok_or_else(|| Error::last_os("ibv_create_cq_ex(CVLAN)"))?;
        // `ibv_cq_ex_to_cq` (verbs.h) is this cast: an `ibv_cq_ex` begins as an `ibv_cq`.
        let cq = ex.cast::<ibv_cq>();
        // SAFETY: just created.
        let actual = unsafe { (*cq.as_ptr()).cqe }.max(0) as u32;
        Ok(Cq {
            cq,
            ex: Some(ex),
            cqe: actual,
            channel,
            _ctx: ctx.clone(),
        })
    }

    /// Whether completions carry the stripped VLAN tag ([`Cq::with_cvlan`]).
    pub fn has_cvlan(&self) -> bool {
        self.ex.is_some()
    }

    /// The completion channel this CQ reports to, if any.
    pub fn channel(&self) -> Option<&Arc<CompChannel>> {
        self.channel.as_ref()
    }

    /// Keeps `channel` (the one this CQ was created with elsewhere, e.g. by
    /// `mlx5dv_create_cq`) alive until after the CQ is destroyed.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) fn keep_channel(&mut self, channel: Arc<CompChannel>) {
        self.channel = Some(channel);
    }

    /// `ibv_req_notify_cq(cq, 0)`: the next completion raises an event on the channel.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without a channel; [`Error::Os`] when the provider refuses.
    pub fn req_notify(&self) -> Result<()> {
        if self.channel.is_none() {
            return Err(Error::Unsupported(
                "this CQ has no completion channel".into(),
            ));
        }
        // SAFETY: the CQ is alive and has a channel.
        let rc = unsafe { ibv_req_notify_cq(self.cq.as_ptr(), 0) };
        if rc != 0 {
            return Err(Error::os(
                "ibv_req_notify_cq",
                io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        Ok(())
    }

    /// Takes ownership of a CQ created elsewhere (e.g. by `mlx5dv_create_cq`).
    ///
    /// # Safety
    /// `cq` must be a live CQ created on `ctx`, owned by nothing else (the returned value
    /// destroys it with `ibv_destroy_cq`).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) unsafe fn from_raw(ctx: &Context, cq: NonNull<ibv_cq>) -> Cq {
        // SAFETY: the caller guarantees `cq` is live.
        let cqe = unsafe { (*cq.as_ptr()).cqe }.max(0) as u32;
        Cq {
            cq,
            ex: None,
            cqe,
            channel: None,
            _ctx: ctx.clone(),
        }
    }

    /// An extended CQ over a fake `ibv_cq_ex` for data-path tests.
    ///
    /// # Safety
    /// As [`Cq::from_raw`].
    #[cfg(test)]
    pub(crate) unsafe fn from_raw_ex(ctx: &Context, ex: NonNull<ibv_cq_ex>) -> Cq {
        // SAFETY: forwarded contract; an `ibv_cq_ex` begins as an `ibv_cq`.
        let mut cq = unsafe { Cq::from_raw(ctx, ex.cast()) };
        cq.ex = Some(ex);
        cq
    }

    /// Room in the CQ (what the provider actually allocated, at least what was asked).
    pub fn capacity(&self) -> u32 {
        self.cqe
    }

    /// Polls up to `wc.len()` completions into `wc`; returns how many.
    ///
    /// # Errors
    /// [`Error::Os`] when the provider reports a CQ error (a negative return).
    #[inline]
    pub fn poll(&self, wc: &mut [ibv_wc]) -> Result<usize> {
        let n = wc.len().min(i32::MAX as usize) as i32;
        if let Some(ex) = self.ex {
            // SAFETY: the CQ is alive; `wc` has room for `n` entries; no tags asked (NULL);
            // only this queue polls it.
            let rc = unsafe {
                super::ffi::rawq_poll_cq_ex(ex.as_ptr(), n, wc.as_mut_ptr(), std::ptr::null_mut())
            };
            return poll_result(rc);
        }
        // SAFETY: the CQ is alive; `wc` has room for `n` entries; only this queue polls it.
        let rc = unsafe { ibv_poll_cq(self.cq.as_ptr(), n, wc.as_mut_ptr()) };
        if rc < 0 {
            return Err(Error::os("ibv_poll_cq", io::Error::from_raw_os_error(-rc)));
        }
        Ok(rc as usize)
    }

    /// As [`Cq::poll`], with each completion's CVLAN field (the TCI of the tag the device
    /// stripped; 0 for a frame that had none, or an error completion) in `cvlan` at the same
    /// index. Only on a CQ made by [`Cq::with_cvlan`]; on another it polls as [`Cq::poll`] and
    /// leaves `cvlan` as it was.
    ///
    /// # Errors
    /// As [`Cq::poll`].
    #[inline]
    pub fn poll_cvlan(&self, wc: &mut [ibv_wc], cvlan: &mut [u16]) -> Result<usize> {
        let Some(ex) = self.ex else {
            return self.poll(wc);
        };
        let n = wc.len().min(cvlan.len()).min(i32::MAX as usize) as i32;
        // SAFETY: the CQ is alive; `wc` and `cvlan` have room for `n` entries; only this queue
        // polls it.
        let rc = unsafe {
            super::ffi::rawq_poll_cq_ex(ex.as_ptr(), n, wc.as_mut_ptr(), cvlan.as_mut_ptr())
        };
        poll_result(rc)
    }

    /// The raw `ibv_cq`, valid while `self` lives.
    pub fn as_raw(&self) -> *mut ibv_cq {
        self.cq.as_ptr()
    }
}

/// A batch poll's return: how many, or the provider's error (a negative errno).
#[inline]
fn poll_result(rc: i32) -> Result<usize> {
    if rc < 0 {
        return Err(Error::os(
            "ibv_start_poll",
            io::Error::from_raw_os_error(-rc),
        ));
    }
    Ok(rc as usize)
}

/// A zeroed work completion, for preallocating poll arrays.
pub fn empty_wc() -> ibv_wc {
    // SAFETY: `ibv_wc` is plain old data (integers and a union of integers); all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// The text of a work completion status (`ibv_wc_status_str`).
pub fn wc_status_str(status: u32) -> String {
    // SAFETY: returns a pointer to a static string for any value ("unknown" when out of range).
    let p = unsafe { ibv_wc_status_str(status) };
    if p.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-null, static, NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}
