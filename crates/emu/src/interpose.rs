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
