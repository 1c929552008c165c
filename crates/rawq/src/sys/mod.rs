//! OS plumbing, one file per concern, used by link state and by the backends whatever the
//! features:
//!
//! * [`netlink`]: netlink sockets, and the message and attribute format every netlink user
//!   shares (one reader, one writer).
//! * [`rtnetlink`]: `RTM_GETLINK` (an interface's flags, MTU, MAC, operational state, XDP
//!   program, rx queues) and the link multicast group link events come from.
//! * [`genl`]: generic netlink, the kernel's `netdev` family (XDP receive metadata kfuncs).
//! * [`ethtool`]: the `SIOCETHTOOL` ioctl (driver name, `ethtool -S`, timestamping info).
//! * [`notify`]: `poll(2)` and the eventfd.
//! * [`affinity`]: CPU affinity.
//!
//! Crate-private: the public API offers what an embedder uses (`pin_to_core`,
//! `link::driver`, `link::netdev`).

pub(crate) mod affinity;
#[cfg_attr(not(feature = "xdp"), allow(dead_code))]
pub(crate) mod ethtool;
#[cfg_attr(not(feature = "xdp"), allow(dead_code))]
pub(crate) mod genl;
pub(crate) mod netlink;
pub(crate) mod notify;
pub(crate) mod rtnetlink;

/// The index of interface `ifname` in the calling thread's network namespace (`None`: there
/// is no such interface, or the name cannot be one).
pub(crate) fn ifindex(ifname: &str) -> Option<u32> {
    let c = std::ffi::CString::new(ifname).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}
