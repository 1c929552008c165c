//! The model's wire: inboxes of frames between ports, and an AF_PACKET socket bridging a port to
//! a real Linux interface (veth, TAP).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Frames waiting to enter a port (what the port's MAC has received), bounded.
#[derive(Debug)]
pub(crate) struct Inbox {
    q: Mutex<VecDeque<Vec<u8>>>,
    pub(crate) cap: usize,
}

impl Inbox {
    pub(crate) fn new(cap: usize) -> Arc<Inbox> {
        Arc::new(Inbox {
            q: Mutex::new(VecDeque::with_capacity(cap)),
            cap,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, VecDeque<Vec<u8>>> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A bound, non-blocking `AF_PACKET` / `SOCK_RAW` socket on one interface.
#[derive(Debug)]
pub(crate) struct AfPacket {
    fd: OwnedFd,
}

impl AfPacket {
    /// Opens the socket on `ifname` in the calling thread's network namespace.
    pub(crate) fn open(ifname: &str) -> Result<AfPacket> {
        let cname = std::ffi::CString::new(ifname)
            .map_err(|_| Error::Config(format!("interface name {ifname:?} contains a NUL")))?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(Error::NotFound {
                kind: "interface",
                name: ifname.into(),
                available: "see `ip link`".into(),
            });
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2) call.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto as i32,
            )
        };
        if fd < 0 {
            return Err(Error::last_os("socket(AF_PACKET)"));
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; zero is a valid starting value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            return Err(Error::last_os("bind(AF_PACKET)"));
        }
        Ok(AfPacket { fd })
    }

    /// Sends one frame; false if the socket refused it (counted by the caller).
    pub(crate) fn send(&self, frame: &[u8]) -> bool {
        // SAFETY: `frame` is a valid buffer of the given length.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        n == frame.len() as isize
    }

    /// Receives one frame the interface received (frames it sent are skipped); `None` when
    /// nothing is waiting.
    pub(crate) fn recv(&self, buf: &mut Vec<u8>) -> Option<()> {
        loop {
            buf.resize(65536, 0);
            // SAFETY: as above; `sll` is written by the kernel up to `len`.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: `buf` has 65536 writable bytes; `sll`/`len` describe a valid address buffer.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n < 0 {
                buf.clear();
                return None;
            }
            if sll.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            buf.truncate(n as usize);
            return Some(());
        }
    }
}
