//! The model's wire: inboxes of frames between ports (fixed, recycled buffers: no allocation per
//! frame once warm), an AF_PACKET socket bridging a port to a real Linux interface (veth), and
//! a TAP device as the port's kernel netdev.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Frames waiting to enter a port (what the port's MAC has received), bounded. Buffers are
/// recycled through a free list, so a warm inbox never allocates.
#[derive(Debug)]
pub(crate) struct Inbox {
    q: Mutex<InboxQ>,
    /// Frames waiting, as last set under the lock: the receiver's empty check and the sender's
    /// room check read it without taking the lock.
    len: AtomicUsize,
    pub(crate) cap: usize,
    frame_cap: usize,
}

#[derive(Debug)]
pub(crate) struct InboxQ {
    full: VecDeque<Vec<u8>>,
    free: Vec<Vec<u8>>,
}

impl Inbox {
    pub(crate) fn new(cap: usize, frame_cap: usize) -> Arc<Inbox> {
        Arc::new(Inbox {
            q: Mutex::new(InboxQ {
                full: VecDeque::with_capacity(cap),
                free: Vec::with_capacity(cap + 8),
            }),
            len: AtomicUsize::new(0),
            cap,
            frame_cap,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, InboxQ> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copies `frame` in; false if the inbox is full.
    pub(crate) fn push(&self, frame: &[u8]) -> bool {
        self.lock()
            .push_with(self, frame.len(), |b| b.copy_from_slice(frame))
    }

    /// Takes the oldest frame (give the buffer back with [`Inbox::recycle`]).
    pub(crate) fn pop(&self) -> Option<Vec<u8>> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.lock();
        let f = q.full.pop_front();
        self.len.store(q.full.len(), Ordering::Release);
        f
    }

    /// Nothing waiting (a frame being pushed meanwhile is seen at the next look).
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Returns a buffer to the free list.
    pub(crate) fn recycle(&self, b: Vec<u8>) {
        let mut q = self.lock();
        if q.free.len() < q.free.capacity() {
            q.free.push(b);
        }
    }

    /// Free room.
    pub(crate) fn room(&self) -> usize {
        self.cap.saturating_sub(self.len.load(Ordering::Acquire))
    }
}
impl InboxQ {
    /// Appends a frame of `len` bytes that `fill` writes (under the lock the caller holds, so
    /// that a sender hands over a WQE's frames in one trip); false if `inbox` is full.
    pub(crate) fn push_with(
        &mut self,
        inbox: &Inbox,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        if self.full.len() >= inbox.cap {
            return false;
        }
        let mut b = self
            .free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(inbox.frame_cap.max(len)));
        b.clear();
        b.resize(len, 0);
        fill(&mut b);
        self.full.push_back(b);
        inbox.len.store(self.full.len(), Ordering::Release);
        true
    }
}

/// A bound, non-blocking `AF_PACKET` / `SOCK_RAW` socket on one interface.
#[derive(Debug)]
pub(crate) struct AfPacket {
    fd: OwnedFd,
    /// An `AF_PACKET` socket (its own sent frames come back and are skipped); false: a
    /// connected socket of another family whose every message is one frame (a cable).
    packet: bool,
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
        // A wire does not drop while the device thread is descheduled: give the socket room for
        // some seconds of a test's traffic (the default, net.core.rmem_default, holds a few
        // hundred small frames, tens of milliseconds on a loaded machine). Best effort:
        // SO_RCVBUFFORCE needs CAP_NET_ADMIN, SO_RCVBUF is capped at net.core.rmem_max.
        let bytes: libc::c_int = 16 << 20;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: setsockopt on our socket with a pointer to an int of the size passed.
            let rc = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&bytes as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as u32,
                )
            };
            if rc == 0 {
                break;
            }
        }
        // The kernel takes an 802.1Q tag out of every frame it receives before a packet socket
        // sees it (net/core/dev.c `__netif_receive_skb_core`: `skb_vlan_untag`) and hands it
        // over beside the frame, in PACKET_AUXDATA (net/packet/af_packet.c `packet_recvmsg`:
        // `tp_vlan_tci`, `tp_vlan_tpid`, `TP_STATUS_VLAN_VALID`); `recv` puts it back, as
        // libpcap does (pcap-linux.c), so that the device sees the frame as it was on the wire.
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on our socket with a pointer to an int of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_AUXDATA,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        if rc != 0 {
            return Err(Error::last_os("setsockopt(PACKET_AUXDATA)"));
        }
        Ok(AfPacket { fd, packet: true })
    }

    /// A connected message socket (`SOCK_SEQPACKET`, each message one frame) as the wire: what
    /// one side sends the other receives (the emulator's cable between two processes).
    pub(crate) fn connected(fd: OwnedFd) -> AfPacket {
        AfPacket { fd, packet: false }
    }

    /// Sends one frame; false if the socket refused it (counted by the caller).
    pub(crate) fn send(&self, frame: &[u8]) -> bool {
        // SAFETY: `frame` is a valid buffer of the given length.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                // A cable whose other end is gone answers EPIPE, not SIGPIPE.
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        n == frame.len() as isize
    }

    /// Frames the kernel dropped at this socket since the last call because its receive
    /// queue was full (the device did not read them in time): `PACKET_STATISTICS`'
    /// `tp_drops`, which the kernel clears on each read (net/packet/af_packet.c
    /// `packet_getsockopt`). 0 for a cable, and when the kernel does not answer.
    pub(crate) fn take_drops(&self) -> u64 {
        if !self.packet {
            return 0;
        }
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` is a writable tpacket_stats and `len` its size, both live for the call.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r == 0 {
            u64::from(st.tp_drops)
        } else {
            0
        }
    }

    /// Receives one frame the interface received (frames it sent are skipped), with the
    /// 802.1Q tag the kernel took out put back after the MAC addresses; `None` when nothing
    /// is waiting.
    pub(crate) fn recv(&self, buf: &mut Vec<u8>) -> Option<()> {
        loop {
            buf.resize(65536, 0);
            // SAFETY: plain data; zero is a valid starting value for each.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            // Room for one control message: the auxdata (u64 words keep it aligned).
            let mut ctl = [0u64; 8];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: as above.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&mut sll as *mut libc::sockaddr_ll).cast();
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = ctl.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&ctl);
            // SAFETY: `msg` describes `buf` (65536 writable bytes), `sll` and `ctl`, all live
            // for the call.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
            // 0: a cable's other end is gone (end of file), not an empty frame.
            if n <= 0 {
                buf.clear();
                return None;
            }
            if self.packet && sll.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            buf.truncate(n as usize);
            let mut tag = None;
            // SAFETY: the CMSG macros walk the control buffer the kernel filled, within
            // `msg_controllen`; the auxdata is read unaligned.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA
                    {
                        let a: libc::tpacket_auxdata =
                            std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                        if a.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                            let tpid = if a.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                                a.tp_vlan_tpid
                            } else {
                                0x8100
                            };
                            tag = Some((tpid, a.tp_vlan_tci));
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            if let Some((tpid, tci)) = tag {
                if buf.len() >= 12 {
                    let t = [tpid.to_be_bytes(), tci.to_be_bytes()];
                    buf.splice(12..12, t.into_iter().flatten());
                }
            }
            return Some(());
        }
    }
}

/// `TUNSETIFF` (`_IOW('T', 202, int)`, linux/if_tun.h).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `IFF_TAP` (linux/if_tun.h).
const IFF_TAP: libc::c_short = 0x0002;
/// `IFF_NO_PI` (linux/if_tun.h): frames without the 4-byte packet-information header.
const IFF_NO_PI: libc::c_short = 0x1000;

/// An existing TAP interface opened as the port's kernel netdev (non-blocking).
#[derive(Debug)]
pub(crate) struct Tap {
    fd: OwnedFd,
}

impl Tap {
    /// Attaches to the TAP interface `ifname`, which must exist (`ip tuntap add NAME mode tap`).
    pub(crate) fn open(ifname: &str) -> Result<Tap> {
        let cname = std::ffi::CString::new(ifname)
            .map_err(|_| Error::Config(format!("interface name {ifname:?} contains a NUL")))?;
        if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
            return Err(Error::Config(format!(
                "TAP name {ifname:?}: must be 1..{} bytes",
                libc::IFNAMSIZ
            )));
        }
        // SAFETY: `cname` is a valid NUL-terminated string.
        if unsafe { libc::if_nametoindex(cname.as_ptr()) } == 0 {
            return Err(Error::NotFound {
                kind: "TAP interface",
                name: ifname.into(),
                available: "create it first: ip tuntap add NAME mode tap".into(),
            });
        }
        // SAFETY: plain open(2) of a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Error::last_os("open(/dev/net/tun)"));
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ifreq is plain data; zero is a valid starting value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
            *d = s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags = IFF_TAP | IFF_NO_PI;
        // SAFETY: TUNSETIFF reads a `struct ifreq`, which `ifr` is.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut ifr) };
        if rc != 0 {
            return Err(Error::last_os("ioctl(TUNSETIFF) on the TAP netdev"));
        }
        Ok(Tap { fd })
    }

    /// Writes one frame to the kernel; false if it refused it.
    pub(crate) fn send(&self, frame: &[u8]) -> bool {
        // SAFETY: `frame` is a valid buffer of the given length.
        let n = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
            )
        };
        n == frame.len() as isize
    }

    /// Reads one frame the kernel sent on the netdev into `buf` (whose capacity is kept);
    /// `None` when nothing is waiting.
    pub(crate) fn recv(&self, buf: &mut Vec<u8>) -> Option<()> {
        buf.resize(buf.capacity().max(65536), 0);
        // SAFETY: `buf` has `buf.len()` writable bytes.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n <= 0 {
            buf.clear();
            return None;
        }
        buf.truncate(n as usize);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected `SOCK_SEQPACKET` pair, each end owned.
    fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for two descriptors.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "socketpair: {}", std::io::Error::last_os_error());
        // SAFETY: two fresh descriptors we own.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// A cable carries each frame whole; once its other end is gone nothing comes in (no empty
    /// frame at end of file) and a send is refused (EPIPE, not a SIGPIPE that ends the process).
    #[test]
    fn a_cable_carries_frames_and_its_other_end_going_is_no_frame() {
        let (a, b) = seqpacket_pair();
        let (a, b) = (AfPacket::connected(a), AfPacket::connected(b));
        assert!(a.send(&[1; 60]) && a.send(&[2; 1514]));
        let mut buf = Vec::new();
        assert!(b.recv(&mut buf).is_some());
        assert_eq!(buf, vec![1; 60]);
        assert!(b.recv(&mut buf).is_some());
        assert_eq!(buf, vec![2; 1514]);
        assert!(b.recv(&mut buf).is_none(), "nothing waiting");
        drop(a);
        assert!(b.recv(&mut buf).is_none(), "end of file is no frame");
        assert!(!b.send(&[3; 60]), "the other end is gone");
    }
}
