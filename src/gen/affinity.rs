//! Thread placement and interface facts a generator needs.

use crate::error::{Error, Result};
use crate::flow::Mac;

/// Pins the calling thread to one CPU core.
///
/// # Errors
/// [`Error::Config`] if the core does not exist; [`Error::Os`] if the kernel refuses.
#[allow(unsafe_code)]
pub fn pin_to_core(core: usize) -> Result<()> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if core >= libc::CPU_SETSIZE as usize {
        return Err(Error::Config(format!(
            "core {core} does not exist ({n} online)"
        )));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `core` < CPU_SETSIZE, checked above.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: pid 0 = the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(Error::last_os("sched_setaffinity"));
    }
    Ok(())
}

/// The MAC address of a network interface, from sysfs (in the caller's network namespace).
pub fn netdev_mac(ifname: &str) -> Option<Mac> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address")).ok()?;
    let mut m = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in m.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    Some(m)
}

/// Facts about a network interface a generator watches (in the caller's network namespace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetdevState {
    /// The MTU: the largest frame is this plus the 14-byte Ethernet header.
    pub mtu: Option<u32>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Frames the interface dropped on transmit (`tx_dropped`), e.g. frames above its MTU.
    pub tx_dropped: Option<u64>,
}

/// The state of interface `ifname`, or `None` when there is no such interface (any more).
#[allow(unsafe_code)]
pub fn netdev_state(ifname: &str) -> Option<NetdevState> {
    let c = std::ffi::CString::new(ifname).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string.
    if unsafe { libc::if_nametoindex(c.as_ptr()) } == 0 {
        return None;
    }
    let read = |f: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{ifname}/{f}"))
            .ok()
            .map(|s| s.trim().to_string())
    };
    let flags =
        read("flags").and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    Some(NetdevState {
        mtu: read("mtu").and_then(|s| s.parse().ok()),
        up: flags.is_none_or(|f| f & libc::IFF_UP as u32 != 0),
        tx_dropped: read("statistics/tx_dropped").and_then(|s| s.parse().ok()),
    })
}
