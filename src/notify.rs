//! The system calls behind event-driven receive ([`crate::queue`]): `poll(2)` on one
//! descriptor, and the eventfd the device model signals.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Polls `fd` for POLLIN for up to `ms` milliseconds (-1: no limit). `Ok(0)` on timeout, else
/// the returned events; EINTR is returned as an error of kind `Interrupted`.
pub(crate) fn poll_in(fd: RawFd, ms: i32) -> io::Result<i16> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, owned by this frame.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if rc == 0 { 0 } else { p.revents })
}

/// Borrows a descriptor the caller keeps open for the borrow's lifetime `'a`.
pub(crate) fn borrow<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: every caller passes a descriptor owned by an object that outlives `'a` (a queue
    // lends its notification fd for as long as it is borrowed).
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// A non-blocking eventfd: a counter that makes its descriptor readable while non-zero.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

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
