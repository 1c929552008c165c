//! The system calls behind event-driven receive ([`crate::queue`]) and link events
//! ([`crate::link`]): `poll(2)` on descriptors, and the eventfd (what the device model signals;
//! a link that never changes hands out one nobody writes).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Polls every descriptor of `fds` for POLLIN for up to `ms` milliseconds (-1: no limit),
/// writing each one's returned events into `revents`; returns how many have events (0: timeout).
/// EINTR is returned as an error of kind `Interrupted`.
pub(crate) fn poll_many(fds: &[RawFd], revents: &mut [i16], ms: i32) -> io::Result<usize> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 64];
    let n = fds.len().min(p.len()).min(revents.len());
    for (slot, &fd) in p.iter_mut().zip(&fds[..n]) {
        slot.fd = fd;
        slot.events = libc::POLLIN;
    }
    // SAFETY: `n` valid pollfds in a live array of this frame.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), n as libc::nfds_t, ms) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    for (r, slot) in revents.iter_mut().zip(&p[..n]) {
        *r = slot.revents;
    }
    Ok(rc as usize)
}

/// Borrows a descriptor the caller keeps open for the borrow's lifetime `'a`.
pub(crate) fn borrow<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: every caller passes a descriptor owned by an object that outlives `'a` (a queue
    // lends its notification fd for as long as it is borrowed).
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Waits until `fd` is readable or `timeout` passes; true if readable. EINTR is a spurious
/// wake-up (false when the time is up, else waits again). `what` names the wait in errors.
pub(crate) fn wait_readable(
    fd: RawFd,
    timeout: Option<Duration>,
    what: &'static str,
) -> Result<bool> {
    let end = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match end {
            None => -1,
            Some(e) => {
                let left = e.saturating_duration_since(Instant::now());
                // Round up: a wait of 0.4 ms must not become a busy poll of 0.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc > 0 {
            return Ok(true);
        }
        if rc == 0 {
            return Ok(false);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(Error::os(what, e));
        }
        if end.is_some_and(|e| Instant::now() >= e) {
            return Ok(false);
        }
    }
}

/// A non-blocking eventfd: a counter that makes its descriptor readable while non-zero.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

#[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
impl EventFd {
    /// A new eventfd, counter 0.
    pub(crate) fn new() -> Result<EventFd> {
        // SAFETY: plain eventfd(2) call.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("eventfd"));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds 1 to the counter (the descriptor becomes readable).
    pub(crate) fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our own descriptor. A full counter
        // (EAGAIN) is already readable, which is all a signal has to achieve.
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Reads and clears the counter; returns it (0 when it was 0).
    pub(crate) fn take(&self) -> u64 {
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live 8-byte buffer from our own descriptor.
        let n = unsafe { libc::read(self.0.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
        if n == 8 {
            u64::from_ne_bytes(b)
        } else {
            0
        }
    }

    /// The descriptor.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
