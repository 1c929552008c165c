//! The few system calls the emulator makes for itself: the memfd behind a command fd, the
//! socket pairs behind event fds, and its own maps of UAR pages. Its own mmap/close go to the
//! real libc functions (dlsym `RTLD_NEXT`), never through the interposer, which may be waiting
//! for a lock the caller holds.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::sync::OnceLock;

use crate::Errno;

fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

type MmapFn =
    unsafe extern "C" fn(*mut libc::c_void, usize, i32, i32, i32, i64) -> *mut libc::c_void;
type CloseFn = unsafe extern "C" fn(i32) -> i32;

fn real<T: Copy>(cell: &OnceLock<usize>, name: &str) -> Option<T> {
    let p = *cell.get_or_init(|| {
        let Ok(c) = CString::new(name) else { return 0 };
        // SAFETY: dlsym with a valid C string; RTLD_NEXT finds the next definition after this
        // object (libc's), which is what we want whether or not we are preloaded.
        unsafe { libc::dlsym(libc::RTLD_NEXT, c.as_ptr()) as usize }
    });
    if p == 0 {
        return None;
    }
    // SAFETY: T is the function-pointer type of `name` (callers pass MmapFn for "mmap",
    // CloseFn for "close"), same size as usize.
    Some(unsafe { std::mem::transmute_copy::<usize, T>(&p) })
}

/// A sparse memfd big enough for every mmap offset libmlx5 computes.
///
/// # Errors
/// memfd_create / ftruncate errno.
pub fn memfd(name: &str, cloexec: bool) -> Result<i32, Errno> {
    let c = CString::new(name).map_err(|_| libc::EINVAL)?;
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
    // SAFETY: valid C string and flags.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(errno());
    }
    // mmap offsets go up to (MLX5_IB_MMAP_DEVICE_MEM << 8 | 0xff) pages and, with ALLOC_WC,
    // higher index bits from bit 16: 4 GiB of sparse file covers all of them.
    // SAFETY: fd is ours.
    if unsafe { libc::ftruncate(fd, 1 << 32) } != 0 {
        let e = errno();
        close(fd);
        return Err(e);
    }
    Ok(fd)
}

/// Closes an fd of ours.
pub fn close(fd: i32) {
    static CLOSE: OnceLock<usize> = OnceLock::new();
    if let Some(f) = real::<CloseFn>(&CLOSE, "close") {
        // SAFETY: closing an fd the emulator owns.
        unsafe { f(fd) };
    }
}

/// A `SOCK_SEQPACKET` pair: (application end, our end). Each event is one packet, so one
/// read() of the application returns exactly one event descriptor, as from the kernel's fds.
///
/// # Errors
/// socketpair errno.
pub fn event_pair(cloexec: bool) -> Result<(i32, i32), Errno> {
    let mut fds = [0i32; 2];
    let ty = libc::SOCK_SEQPACKET | if cloexec { libc::SOCK_CLOEXEC } else { 0 };
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, fds.as_mut_ptr()) } != 0 {
        return Err(errno());
    }
    // Our end never blocks: a full queue drops the event rather than stall the device.
    // SAFETY: fcntl on our own fd.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    Ok((fds[0], fds[1]))
}

/// Sends one event packet on our end; false if it could not be queued.
pub fn send_event(fd: i32, bytes: &[u8]) -> bool {
    // SAFETY: bytes is a valid buffer; MSG_NOSIGNAL: a closed peer gives EPIPE, not SIGPIPE.
    let n = unsafe {
        libc::send(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    n == bytes.len() as isize
}

/// Maps `len` bytes of `fd` at `off`, shared, read-write.
///
/// # Errors
/// mmap errno.
pub fn map_shared(fd: i32, len: usize, off: i64) -> Result<usize, Errno> {
    static MMAP: OnceLock<usize> = OnceLock::new();
    let f = real::<MmapFn>(&MMAP, "mmap").ok_or(libc::ENOSYS)?;
    // SAFETY: a fresh shared mapping of our own memfd; nothing else is at the address the
    // kernel picks.
    let p = unsafe {
        f(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            off,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    Ok(p as usize)
}

/// Unmaps what [`map_shared`] mapped.
pub fn unmap(addr: usize, len: usize) {
    // SAFETY: (addr, len) came from map_shared and is not used after this.
    unsafe { libc::munmap(addr as *mut libc::c_void, len) };
}

/// The process may open raw packet queues (CAP_NET_RAW in its effective set), as
/// `uverbs_cmd.c: create_qp` and `ib_uverbs_ex_create_flow` demand.
pub fn has_net_raw() -> bool {
    const CAP_NET_RAW: u32 = 13;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_RAW) != 0)
}

/// Takes one queued packet from `fd` without waiting; `None` when there is none (or `fd` is
/// not a socket).
pub fn recv_nowait(fd: i32, buf: &mut [u8]) -> Option<usize> {
    if fd < 0 {
        return None;
    }
    // SAFETY: buf is a valid writable buffer of its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// A fresh memfd holding `bytes`, its offset at 0: a file a reader reads once (a sysfs counter
/// served at open time).
///
/// # Errors
/// memfd_create / pwrite errno.
pub fn text_file(name: &str, bytes: &[u8], cloexec: bool) -> Result<i32, Errno> {
    let c = CString::new(name).map_err(|_| libc::EINVAL)?;
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
    // SAFETY: valid C string and flags.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(errno());
    }
    // pwrite: the file offset stays at 0 for the reader (and pwrite is not interposed).
    // SAFETY: `bytes` is a valid buffer of its length; fd is ours.
    let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        let e = if n < 0 { errno() } else { libc::EIO };
        close(fd);
        return Err(e);
    }
    Ok(fd)
}
