//! The process's memory as the kernel sees it: `copy_from_user` / `copy_to_user` that answer
//! EFAULT for an unmapped address instead of crashing (the requests and response pointers
//! libibverbs hands to write() are untrusted). Done with `process_vm_readv`/`writev` on our own
//! pid, which the kernel checks page by page.

#![allow(unsafe_code)]

use crate::Errno;

/// Reads `len` bytes at `addr`.
///
/// # Errors
/// EFAULT if any byte is not readable.
pub fn copy_from_user(addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
    let mut v = vec![0u8; len];
    if len == 0 {
        return Ok(v);
    }
    if addr == 0 || addr.checked_add(len as u64).is_none() {
        return Err(libc::EFAULT);
    }
    let local = libc::iovec {
        iov_base: v.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes our own vector (len bytes, writable); `remote` is only read by
    // the kernel, which checks it and fails with EFAULT rather than fault.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == len as isize {
        Ok(v)
    } else {
        Err(libc::EFAULT)
    }
}

/// Writes `data` at `addr`.
///
/// # Errors
/// EFAULT if any byte is not writable.
pub fn copy_to_user(addr: u64, data: &[u8]) -> Result<(), Errno> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 || addr.checked_add(data.len() as u64).is_none() {
        return Err(libc::EFAULT);
    }
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: `local` is only read; `remote` is written by the kernel, which checks every page
    // and fails with EFAULT rather than fault.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == data.len() as isize {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}

/// Zeroes `len` bytes at `addr` (`clear_user`).
///
/// # Errors
/// EFAULT if any byte is not writable.
pub fn clear_user(addr: u64, len: usize) -> Result<(), Errno> {
    copy_to_user(addr, &vec![0u8; len])
}

/// Checks that every page of `[addr, addr + len)` is mapped (what pinning an MR needs).
///
/// # Errors
/// EFAULT if a page is not mapped.
pub fn check_mapped(addr: u64, len: u64) -> Result<(), Errno> {
    let start = addr & !0xfff;
    let end = (addr + len + 0xfff) & !0xfff;
    let pages = ((end - start) / 4096) as usize;
    let mut vec = vec![0u8; pages];
    // SAFETY: mincore only reads the page tables of the range and writes `pages` bytes into
    // `vec`; an unmapped page makes it fail with ENOMEM.
    let r = unsafe {
        libc::mincore(
            start as usize as *mut libc::c_void,
            (end - start) as usize,
            vec.as_mut_ptr(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_efault() {
        let mut buf = [0u8; 16];
        let a = buf.as_mut_ptr() as u64;
        copy_to_user(a + 4, &[1, 2, 3]).unwrap();
        assert_eq!(copy_from_user(a, 8).unwrap(), vec![0, 0, 0, 0, 1, 2, 3, 0]);
        assert_eq!(copy_from_user(8, 8), Err(libc::EFAULT));
        assert_eq!(copy_to_user(0, &[1]), Err(libc::EFAULT));
        assert_eq!(copy_to_user(16, &[1]), Err(libc::EFAULT));
        assert_eq!(buf[4], 1);
    }
}
