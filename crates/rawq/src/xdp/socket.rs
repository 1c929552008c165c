//! One AF_XDP socket per queue: creation, UMEM registration or sharing, ring setup and bind.
//!
//! rawq queue *i* is bound to netdev rx queue *i*. The socket of queue 0 registers the UMEM (the
//! whole pool region); the sockets of the other queues bind with `XDP_SHARED_UMEM` naming it.
//! Every socket has its own fill and completion rings (allowed for a shared UMEM on a different
//! queue), so each queue refills and reclaims privately, from its own `PoolCache`.
//!
//! Zero-copy is tried first; if the driver cannot do it (veth: EOPNOTSUPP), the socket is thrown
//! away and a fresh one is bound in copy mode. A fresh socket rather than a second bind, because
//! a failed bind may already have taken over the fill and completion rings.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::ring::{Consumer, MmapOffsets, Producer, RingMap, XdpDesc};
use super::umem::Umem;
use crate::error::{Error, Result};

const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;

const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

// sxdp_flags.
const XDP_SHARED_UMEM: u16 = 1 << 0;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
/// Multi-buffer frames (kernel 6.6, include/uapi/linux/if_xdp.h): a frame spans several
/// descriptors, all but the last with `XDP_PKT_CONTD`. Only the socket that registers the UMEM
/// sets it; sockets sharing the UMEM inherit it (net/xdp/xsk.c `xsk_bind` refuses it on them).
const XDP_USE_SG: u16 = 1 << 4;

/// `struct sockaddr_xdp`.
#[repr(C)]
#[derive(Default)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// `struct xdp_statistics`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// How the socket moves frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The driver DMAs into the UMEM.
    ZeroCopy,
    /// The kernel copies between its buffers and the UMEM.
    Copy,
}

impl Mode {
    /// "zero-copy" / "copy", as in [`PortInfo::mode`](crate::PortInfo::mode).
    pub fn name(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero-copy",
            Mode::Copy => "copy",
        }
    }
}

/// Ring sizes of one socket (powers of two).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingSizes {
    pub rx: u32,
    pub tx: u32,
    pub fill: u32,
    pub comp: u32,
}

/// A bound AF_XDP socket and its four rings.
pub(crate) struct Xsk {
    // Rings first: unmapped before the socket is closed.
    pub fill: Producer<u64>,
    pub comp: Consumer<u64>,
    pub rx: Consumer<XdpDesc>,
    pub tx: Producer<XdpDesc>,
    pub mode: Mode,
    fd: OwnedFd,
}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T, what: &'static str) -> Result<()> {
    // SAFETY: `v` is a live value of the type the option expects, and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(Error::last_os(what))
    } else {
        Ok(())
    }
}

fn getsockopt<T: Default>(fd: RawFd, opt: libc::c_int, what: &'static str) -> Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, which is that large.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            SOL_XDP,
            opt,
            &mut v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        Err(Error::last_os(what))
    } else {
        Ok(v)
    }
}

impl Xsk {
    /// Creates a socket on `ifindex`/`queue`, registering `umem` (when `share` is `None`) or
    /// sharing the UMEM of socket `share`, and binds it in `mode` (ignored when sharing: a shared
    /// socket inherits the owner's mode).
    pub(crate) fn create(
        ifindex: u32,
        queue: u32,
        umem: &Umem,
        share: Option<RawFd>,
        mode: Mode,
        sizes: RingSizes,
    ) -> Result<Xsk> {
        Xsk::create_sg(ifindex, queue, umem, share, mode, sizes, false)
    }

    /// As [`Xsk::create`], bound for multi-buffer frames ([`XDP_USE_SG`]) when `sg`.
    pub(crate) fn create_sg(
        ifindex: u32,
        queue: u32,
        umem: &Umem,
        share: Option<RawFd>,
        mode: Mode,
        sizes: RingSizes,
        sg: bool,
    ) -> Result<Xsk> {
        // SAFETY: plain socket(2) call.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(Error::last_os("socket(AF_XDP)"));
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();

        if share.is_none() {
            let reg = umem.reg();
            // SAFETY: as in `setsockopt`; the region stays mapped for as long as the pool lives,
            // and every queue (hence every socket) holds a pool handle.
            let rc = unsafe {
                libc::setsockopt(
                    raw,
                    SOL_XDP,
                    XDP_UMEM_REG,
                    &reg as *const _ as *const libc::c_void,
                    std::mem::size_of_val(&reg) as libc::socklen_t,
                )
            };
            if rc < 0 {
                return Err(Error::registration(
                    "setsockopt(XDP_UMEM_REG)",
                    umem.len as usize,
                    io::Error::last_os_error(),
                ));
            }
        }
        setsockopt(
            raw,
            XDP_UMEM_FILL_RING,
            &sizes.fill,
            "setsockopt(XDP_UMEM_FILL_RING)",
        )?;
        setsockopt(
            raw,
            XDP_UMEM_COMPLETION_RING,
            &sizes.comp,
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        )?;
        setsockopt(raw, XDP_RX_RING, &sizes.rx, "setsockopt(XDP_RX_RING)")?;
        setsockopt(raw, XDP_TX_RING, &sizes.tx, "setsockopt(XDP_TX_RING)")?;

        let off: MmapOffsets = getsockopt(raw, XDP_MMAP_OFFSETS, "getsockopt(XDP_MMAP_OFFSETS)")?;
        let fill = RingMap::map::<u64>(
            raw,
            &off.fr,
            sizes.fill,
            XDP_UMEM_PGOFF_FILL_RING,
            "mmap(fill ring)",
        )?;
        let comp = RingMap::map::<u64>(
            raw,
            &off.cr,
            sizes.comp,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            "mmap(completion ring)",
        )?;
        let rx =
            RingMap::map::<XdpDesc>(raw, &off.rx, sizes.rx, XDP_PGOFF_RX_RING, "mmap(rx ring)")?;
        let tx =
            RingMap::map::<XdpDesc>(raw, &off.tx, sizes.tx, XDP_PGOFF_TX_RING, "mmap(tx ring)")?;

        let mut sa = SockaddrXdp {
            family: libc::AF_XDP as u16,
            ifindex,
            queue_id: queue,
            ..Default::default()
        };
        match share {
            Some(owner) => {
                sa.flags = XDP_SHARED_UMEM;
                sa.shared_umem_fd = owner as u32;
            }
            None => {
                sa.flags = XDP_USE_NEED_WAKEUP
                    | match mode {
                        Mode::ZeroCopy => XDP_ZEROCOPY,
                        Mode::Copy => XDP_COPY,
                    }
                    | if sg { XDP_USE_SG } else { 0 };
            }
        }
        // SAFETY: `sa` is a complete sockaddr_xdp and its size is passed.
        let rc = unsafe {
            libc::bind(
                raw,
                &sa as *const SockaddrXdp as *const libc::sockaddr,
                std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(Error::last_os("bind(AF_XDP)"));
        }
        Ok(Xsk {
            fill: Producer::new(fill),
            comp: Consumer::new(comp),
            rx: Consumer::new(rx),
            tx: Producer::new(tx),
            mode,
            fd,
        })
    }

    /// The socket's file descriptor (for the XSKMAP and for sharing the UMEM).
    pub(crate) fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Kicks transmission (`sendto` with no data). Transient refusals (EAGAIN: the kernel sent
    /// its batch and wants another kick; EBUSY, ENOBUFS) are returned for the caller to decide.
    #[inline]
    pub(crate) fn kick_tx(&self) -> io::Result<()> {
        // SAFETY: sendto with a null buffer of length 0 is the documented AF_XDP tx kick.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Wakes the driver's receive side (`recvfrom` with no buffer) when the fill ring asks.
    #[inline]
    pub(crate) fn kick_rx(&self) {
        // SAFETY: recvfrom with a null buffer of length 0 is the documented AF_XDP rx kick.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        }
    }

    /// The kernel's counters for this socket.
    pub(crate) fn statistics(&self) -> Result<XdpStatistics> {
        getsockopt(
            self.fd.as_raw_fd(),
            XDP_STATISTICS,
            "getsockopt(XDP_STATISTICS)",
        )
    }
}
