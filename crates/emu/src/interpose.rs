//! The Rust half of the interposer: the `rawq_emu_*` entry points `interpose.c` calls. Each
//! catches panics (a panic must never unwind into C) and answers an errno instead.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::caps;
use crate::device::{device_of_fd, device_of_path};

/// "Not ours: use the real call" (`RAWQ_EMU_PASS` in interpose.c).
const PASS: i32 = i32::MIN;

fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    // The emulator's messages reach stderr through its own logger (crate::logger).
    crate::logger::install();
    // Faults in pinned memory while here are the device's (crate::pin).
    let _device = crate::pin::DeviceScope::enter();
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The device behind `path`, if it is one of ours.
///
/// # Safety
/// `path` is null or NUL-terminated.
unsafe fn dev_of(path: *const libc::c_char) -> Option<&'static crate::device::Device> {
    if path.is_null() {
        return None;
    }
    // SAFETY: interpose.c passes the caller's NUL-terminated path, non-null (checked above).
    let p = unsafe { CStr::from_ptr(path) };
    device_of_path(p.to_bytes())
}

/// open() of a `/dev/infiniband/uverbs*` path: the new fd, `-errno`, or `i32::MIN` (not ours:
/// the real open).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rawq_emu_open_dev(path: *const libc::c_char, flags: i32) -> i32 {
    guarded(-libc::EIO, || {
        // SAFETY: as this function's contract.
        let Some(dev) = (unsafe { dev_of(path) }) else {
            return PASS;
        };
        match dev.open(flags & libc::O_CLOEXEC != 0) {
            Ok(fd) => fd,
            Err(e) => -e,
        }
    })
}

/// The tree's root, `$SYSFS_PATH` as the process started with it.
fn sysfs_root() -> Option<&'static str> {
    static ROOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| std::env::var("SYSFS_PATH").ok().filter(|s| !s.is_empty()))
        .as_deref()
}

/// open() of a path with `/hw_counters/` in it: if it names one of an emulated port's counters
/// under `$SYSFS_PATH` ([`crate::discovery::counters`]) and is opened for reading, a new fd
/// holding the counter's value now (as the kernel's sysfs reads the device at each open);
/// `-errno`; or `i32::MIN` (not ours: the real open).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rawq_emu_open_counter(path: *const libc::c_char, flags: i32) -> i32 {
    guarded(PASS, || {
        if path.is_null() || flags & libc::O_ACCMODE != libc::O_RDONLY {
            return PASS;
        }
        // SAFETY: interpose.c passes the caller's NUL-terminated path (checked non-null).
        let Ok(p) = (unsafe { CStr::from_ptr(path) }).to_str() else {
            return PASS;
        };
        let Some(root) = sysfs_root() else {
            return PASS;
        };
        let Some((dev, port, name)) = crate::discovery::counters::parse_path(root, p) else {
            return PASS;
        };
        let Some(d) = crate::device::devices().get(dev as usize) else {
            return PASS;
        };
        if port != 1 {
            return PASS;
        }
        let Some(v) = crate::discovery::counters::value(name, d.no_buffer_drops()) else {
            return PASS;
        };
        match crate::sys::text_file(
            name,
            format!("{v}\n").as_bytes(),
            flags & libc::O_CLOEXEC != 0,
        ) {
            Ok(fd) => fd,
            Err(e) => -e,
        }
    })
}

/// stat() of a device path: 1 with `major`/`minor` filled if it is ours, else 0.
///
/// # Safety
/// `path` is null or a NUL-terminated string; `major`/`minor` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn rawq_emu_stat_dev(
    path: *const libc::c_char,
    major: *mut u32,
    minor: *mut u32,
) -> i32 {
    guarded(0, || {
        // SAFETY: as this function's contract.
        let Some(dev) = (unsafe { dev_of(path) }) else {
            return 0;
        };
        if major.is_null() || minor.is_null() {
            return 0;
        }
        // SAFETY: interpose.c passes pointers to two local unsigned ints (checked non-null).
        unsafe {
            *major = caps::UVERBS_MAJOR;
            *minor = dev.ident.minor();
        }
        1
    })
}

/// fstat() of a command fd: 1 with `major`/`minor` of its device filled, else 0.
///
/// # Safety
/// `major`/`minor` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn rawq_emu_fstat_dev(fd: i32, major: *mut u32, minor: *mut u32) -> i32 {
    guarded(0, || {
        let Some(dev) = device_of_fd(fd) else {
            return 0;
        };
        if major.is_null() || minor.is_null() {
            return 0;
        }
        // SAFETY: interpose.c passes pointers to two local unsigned ints (checked non-null).
        unsafe {
            *major = caps::UVERBS_MAJOR;
            *minor = dev.ident.minor();
        }
        1
    })
}

/// write() on a command fd: `count` or `-errno`.
#[no_mangle]
pub extern "C" fn rawq_emu_write(fd: i32, buf: *const u8, count: usize) -> isize {
    guarded(-(libc::EIO as isize), || {
        let Some(dev) = device_of_fd(fd) else {
            return -(libc::EBADF as isize);
        };
        match dev.write(fd, buf as u64, count) {
            Ok(n) => n as isize,
            Err(e) => -(e as isize),
        }
    })
}

/// mmap() of a command fd: 0 if the offset names a page, else `-errno`.
#[no_mangle]
pub extern "C" fn rawq_emu_mmap_check(fd: i32, len: usize, prot: i32, off: i64) -> i32 {
    guarded(-libc::EIO, || {
        let Some(dev) = device_of_fd(fd) else {
            return -libc::EBADF;
        };
        match dev.mmap_check(fd, len, prot, off) {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// The memfd offset to map for a validated mmap of `off` on a command fd (a UAR page's one
/// page whichever caching command named it: [`crate::mmap::canonical_offset`]).
#[no_mangle]
pub extern "C" fn rawq_emu_mmap_offset(off: i64) -> i64 {
    guarded(off, || crate::mmap::canonical_offset(off))
}

/// `new` became a duplicate of the command fd `old`: 1 if `old` is ours (then `new` is too).
#[no_mangle]
pub extern "C" fn rawq_emu_dup(old: i32, new: i32) -> i32 {
    guarded(0, || match device_of_fd(old) {
        Some(dev) => i32::from(dev.dup(old, new)),
        None => 0,
    })
}

/// close() of a command fd.
#[no_mangle]
pub extern "C" fn rawq_emu_release(fd: i32) {
    guarded((), || {
        if let Some(dev) = device_of_fd(fd) {
            dev.release(fd);
        }
    });
}

/// close() of an fd that is not a command fd, in a process with an emulated device open: it
/// may be a completion channel's.
#[no_mangle]
pub extern "C" fn rawq_emu_close_other(fd: i32) {
    guarded((), || {
        for dev in crate::device::devices() {
            dev.events.app_closed(fd);
        }
    });
}

/// ioctl() on a command fd: 0 or `-errno` ([`crate::device::Device::ioctl`]: the counters
/// methods are served, every other uverbs method is EPROTONOSUPPORT so that libibverbs falls
/// back to write() for that method alone).
#[no_mangle]
pub extern "C" fn rawq_emu_ioctl(fd: i32, req: u64, arg: *mut u8) -> i32 {
    guarded(-libc::EIO, || {
        let Some(dev) = device_of_fd(fd) else {
            return -libc::EBADF;
        };
        match dev.ioctl(fd, req, arg as u64) {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// `ETHTOOL_GDRVINFO`, `ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`, `ETHTOOL_GSTATS`
/// (`linux/ethtool.h`) and the `ETH_SS_STATS` string set.
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETH_SS_STATS: u32 = 1;

/// Writes `bytes` at `base + off`.
///
/// # Safety
/// `base + off .. + bytes.len()` is writable.
unsafe fn put(base: *mut u8, off: usize, bytes: &[u8]) {
    // SAFETY: as this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(off), bytes.len()) }
}

/// A `u32` at `base + off`.
///
/// # Safety
/// `base + off .. + 4` is readable.
unsafe fn get_u32(base: *const u8, off: usize) -> u32 {
    // SAFETY: as this function's contract.
    unsafe { (base.add(off) as *const u32).read_unaligned() }
}

/// A NUL-padded fixed-size string field.
fn field(s: &str) -> [u8; 32] {
    let mut f = [0u8; 32];
    let n = s.len().min(31);
    f[..n].copy_from_slice(&s.as_bytes()[..n]);
    f
}

/// ioctl(SIOCETHTOOL) on a socket: the ethtool statistics of the interface an emulated port
/// names as its netdev ([`crate::discovery::ethtool`]), as the mlx5e driver answers them; 0,
/// `-errno`, or `i32::MIN` (another interface, or another request: the kernel's answer).
///
/// # Safety
/// `ifr` is null or the caller's `struct ifreq`, whose `ifr_data` points at a command buffer
/// sized for its command, as the kernel requires of ioctl(2)'s caller (`ETHTOOL_GSTRINGS` and
/// `ETHTOOL_GSTATS` sized by the count `ETHTOOL_GDRVINFO` / `ETHTOOL_GSSET_INFO` gave).
#[no_mangle]
pub unsafe extern "C" fn rawq_emu_ethtool(ifr: *mut libc::ifreq) -> i32 {
    guarded(PASS, || {
        if ifr.is_null() {
            return PASS;
        }
        // SAFETY: the caller's ifreq (non-null), as ioctl(2) was given it.
        let (name, data) = unsafe {
            let r = &*ifr;
            let name: Vec<u8> = r
                .ifr_name
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            (name, r.ifr_ifru.ifru_data as *mut u8)
        };
        let Some(dev) = crate::device::device_of_netdev(&name) else {
            return PASS;
        };
        if data.is_null() {
            return -libc::EFAULT;
        }
        let n = crate::discovery::ethtool::count();
        // SAFETY: every command buffer starts with its u32 command.
        let cmd = unsafe { get_u32(data, 0) };
        match cmd {
            ETHTOOL_GDRVINFO => {
                // struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32],
                // bus_info[32], erom_version[32], reserved2[12], then five u32: n_priv_flags,
                // n_stats, testinfo_len, eedump_len, regdump_len (196 bytes).
                let (a, b, c) = caps::FW;
                let mut info = [0u8; 196];
                info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
                info[4..36].copy_from_slice(&field("mlx5_core"));
                info[36..68].copy_from_slice(&field("rawq-emu"));
                info[68..100].copy_from_slice(&field(&format!("{a}.{b}.{c}")));
                info[100..132].copy_from_slice(&field(&crate::discovery::pci::slot(dev.ident)));
                info[180..184].copy_from_slice(&(n as u32).to_ne_bytes());
                // SAFETY: an ETHTOOL_GDRVINFO buffer is a struct ethtool_drvinfo.
                unsafe { put(data, 0, &info) };
                0
            }
            ETHTOOL_GSSET_INFO => {
                // struct ethtool_sset_info { u32 cmd, reserved; u64 sset_mask; u32 data[] }:
                // one length per set asked for and supported.
                // SAFETY: the header of a struct ethtool_sset_info.
                let mask = unsafe { (data.add(8) as *const u64).read_unaligned() };
                if mask & (1 << ETH_SS_STATS) == 0 {
                    return PASS;
                }
                // SAFETY: a mask with one bit set has room for one length.
                unsafe {
                    put(data, 8, &(1u64 << ETH_SS_STATS).to_ne_bytes());
                    put(data, 16, &(n as u32).to_ne_bytes());
                }
                0
            }
            ETHTOOL_GSTRINGS => {
                // struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[] }
                // SAFETY: the header of a struct ethtool_gstrings.
                if unsafe { get_u32(data, 4) } != ETH_SS_STATS {
                    return PASS;
                }
                let s = crate::discovery::ethtool::strings();
                // SAFETY: the caller sized the buffer for the count it was given.
                unsafe {
                    put(data, 8, &(n as u32).to_ne_bytes());
                    put(data, 12, &s);
                }
                0
            }
            ETHTOOL_GSTATS => {
                // struct ethtool_stats { u32 cmd, n_stats; u64 data[] }
                let v: Vec<u8> = dev
                    .ethtool_stats()
                    .iter()
                    .flat_map(|(_, v)| v.to_ne_bytes())
                    .collect();
                // SAFETY: the caller sized the buffer for the count it was given.
                unsafe {
                    put(data, 4, &(n as u32).to_ne_bytes());
                    put(data, 8, &v);
                }
                0
            }
            _ => PASS,
        }
    })
}

/// munmap() while something is pinned: `i32::MIN` (the real call), 0, or `-errno`
/// (`crate::pin::munmap`).
#[no_mangle]
pub extern "C" fn rawq_emu_munmap(addr: *mut libc::c_void, len: usize) -> i32 {
    guarded(PASS, || crate::pin::munmap(addr as u64, len as u64))
}

/// A `MAP_FIXED` mmap() of the application over `[addr, addr + len)`.
#[no_mangle]
pub extern "C" fn rawq_emu_mapped_fixed(addr: *mut libc::c_void, len: usize) {
    guarded((), || crate::pin::mapped_fixed(addr as u64, len as u64));
}

/// 1 if anything is pinned for the device (munmap and `MAP_FIXED` mmap must ask), else 0.
#[no_mangle]
pub extern "C" fn rawq_emu_pins_any() -> i32 {
    i32::from(crate::pin::any())
}
