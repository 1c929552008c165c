//! The system calls behind event-driven receive ([`crate::queue`]): `poll(2)` on the queues'
//! descriptors, and the eventfd the device model signals.

use std::io;
#[cfg(feature = "mlx5")]
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::fd::{BorrowedFd, RawFd};

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

/// A non-blocking eventfd: a counter that makes its descriptor readable while non-zero (what
/// the device model signals; only with the `mlx5` feature).
#[cfg(feature = "mlx5")]
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

#[cfg(feature = "mlx5")]
impl EventFd {
    /// A new eventfd, counter 0.
    pub(crate) fn new() -> crate::Result<EventFd> {
        // SAFETY: plain eventfd(2) call.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(crate::Error::last_os("eventfd"));
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
