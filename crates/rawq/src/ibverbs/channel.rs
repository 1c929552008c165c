//! Completion channels (`ibv_comp_channel`): the fd a sleeping receiver waits on.
//!
//! One channel per queue, on its receive CQ only. The order libibverbs documents
//! (`ibv_get_cq_event(3)`): arm with `ibv_req_notify_cq`, poll the CQ once more, then wait for
//! the channel's fd; each event read with `ibv_get_cq_event` is acknowledged with
//! `ibv_ack_cq_events` (here at once, one by one: `ibv_destroy_cq` waits until every event it
//! reported was acknowledged, so the counts are balanced whenever the CQ goes). The fd is
//! non-blocking, as rdma-core's `ibv_get_cq_event` example for poll/epoll users sets it, so that
//! taking events never sleeps. The channel outlives its CQ: [`Cq`](super::cq::Cq) holds it and
//! destroys it after the CQ (`ibv_destroy_comp_channel` fails with EBUSY while a CQ uses it).

use std::os::fd::RawFd;
use std::ptr::NonNull;

use super::ffi::*;

use super::context::Context;
use crate::error::{Error, Result};

/// A completion channel with a non-blocking fd.
pub struct CompChannel {
    ch: NonNull<ibv_comp_channel>,
    _ctx: Context,
}

// SAFETY: the channel is a descriptor plus libibverbs bookkeeping; reading events happens from
// the one queue that owns the receive side (`&mut` on that queue).
unsafe impl Send for CompChannel {}
// SAFETY: see `Send`; the shared uses (fd, destroy) are thread-safe in libibverbs.
unsafe impl Sync for CompChannel {}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl CompChannel {
    /// Creates a channel on `ctx` and makes its fd non-blocking.
    ///
    /// # Errors
    /// [`Error::Os`] from `ibv_create_comp_channel` or `fcntl`.
    pub fn new(ctx: &Context) -> Result<CompChannel> {
        // SAFETY: the context is open.
        let ch = unsafe { ibv_create_comp_channel(ctx.as_raw()) };
        let ch = NonNull::new(ch).ok_or_else(|| Error::last_os("ibv_create_comp_channel"))?;
        let c = CompChannel {
            ch,
            _ctx: ctx.clone(),
        };
        let fd = c.fd();
        // SAFETY: fcntl on the channel's own descriptor.
        let rc = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 {
                fl
            } else {
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK)
            }
        };
        if rc < 0 {
            return Err(Error::last_os("fcntl(completion channel, O_NONBLOCK)"));
        }
        Ok(c)
    }

    /// The channel's descriptor (readable while an event waits).
    pub fn fd(&self) -> RawFd {
        // SAFETY: the channel is alive.
        unsafe { (*self.ch.as_ptr()).fd }
    }

    /// The raw channel, valid while `self` lives.
    pub fn as_raw(&self) -> *mut ibv_comp_channel {
        self.ch.as_ptr()
    }

    /// Reads every event waiting on the channel, without blocking, and acknowledges each on
    /// its CQ; returns how many there were.
    ///
    /// # Errors
    /// [`Error::Os`] when `ibv_get_cq_event` fails with anything but EAGAIN.
    pub fn take_events(&self) -> Result<u32> {
        let mut n = 0;
        loop {
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut cq_ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: the channel is alive; both out-pointers are valid.
            let rc = unsafe { ibv_get_cq_event(self.ch.as_ptr(), &mut cq, &mut cq_ctx) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(n),
                    Some(libc::EINTR) => continue,
                    _ => Err(Error::os("ibv_get_cq_event", e)),
                };
            }
            if !cq.is_null() {
                // SAFETY: `cq` is the live CQ the event was for (a CQ is not destroyed before
                // its events are acknowledged; this acknowledges it).
                unsafe { ibv_ack_cq_events(cq, 1) };
            }
            n += 1;
        }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: no CQ uses the channel any more (each holds it and drops it after itself).
        let rc = unsafe { ibv_destroy_comp_channel(self.ch.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_comp_channel failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}
