//! Completion queues (`ibv_cq`).

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use super::channel::CompChannel;
use super::context::Context;
use crate::error::{Error, Result};

/// A completion queue, polled, with a completion channel when made by [`Cq::with_channel`].
/// Shared through `Arc` by the queue that polls it and the QP or WQ that completes into it, so
/// it is destroyed after them.
pub struct Cq {
    cq: NonNull<ibv_cq>,
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
            eprintln!(
                "rawq: ibv_destroy_cq failed: {}",
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
            cqe: actual,
            channel: Some(channel),
            _ctx: ctx.clone(),
        })
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
            cqe,
            channel: None,
            _ctx: ctx.clone(),
        }
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
        // SAFETY: the CQ is alive; `wc` has room for `n` entries; only this queue polls it.
        let rc = unsafe { ibv_poll_cq(self.cq.as_ptr(), n, wc.as_mut_ptr()) };
        if rc < 0 {
            return Err(Error::os("ibv_poll_cq", io::Error::from_raw_os_error(-rc)));
        }
        Ok(rc as usize)
    }

    /// The raw `ibv_cq`, valid while `self` lives.
    pub fn as_raw(&self) -> *mut ibv_cq {
        self.cq.as_ptr()
    }
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
