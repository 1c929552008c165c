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

/// What the device does with pinned memory: `ib_umem_get` pins with `FOLL_WRITE` when the
/// access is writable (`ib_access_writable`), read-only otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The device only reads (SQ/RQ rings, doorbell records, MRs without write access).
    Read,
    /// The device writes (CQ buffers, MRs with `IBV_ACCESS_LOCAL_WRITE`...).
    Write,
}

const PAGE: u64 = 4096;

/// Checks `[addr, addr + len)` as pinning it would (`drivers/infiniband/core/umem.c:
/// ib_umem_get`): a wrapping range, or one whose page count is 0 or above `UINT_MAX`, is EINVAL;
/// a page that is not mapped, or mapped without the access the device needs (`mm/gup.c:
/// check_vma_flags`: `VM_READ` for a read pin, `VM_WRITE` for a write pin, no `FOLL_FORCE`), is
/// EFAULT. The mappings are read from `/proc/self/maps`, so nothing is allocated per page.
///
/// # Errors
/// EINVAL, EFAULT as above.
pub fn check_pinnable(addr: u64, len: u64, access: Access) -> Result<(), Errno> {
    let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
    // PAGE_ALIGN(addr + size) must not wrap either.
    let end_page = end.checked_add(PAGE - 1).ok_or(libc::EINVAL)? & !(PAGE - 1);
    let start_page = addr & !(PAGE - 1);
    let npages = (end_page - start_page) / PAGE;
    if npages == 0 || npages > u64::from(u32::MAX) {
        return Err(libc::EINVAL);
    }
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|_| libc::EFAULT)?;
    covered(&maps, start_page, end_page, access)
}

/// Whether the mappings listed in `maps` (the `/proc/PID/maps` format, ascending) cover
/// `[start, end)` without a hole, each with the access needed.
fn covered(maps: &str, start: u64, end: u64, access: Access) -> Result<(), Errno> {
    let mut at = start;
    for line in maps.lines() {
        if at >= end {
            break;
        }
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        if hi <= at {
            continue;
        }
        if lo > at {
            // A hole before the next mapping.
            return Err(libc::EFAULT);
        }
        let p = perms.as_bytes();
        let ok = match access {
            Access::Read => p.first() == Some(&b'r'),
            Access::Write => p.get(1) == Some(&b'w'),
        };
        if !ok {
            return Err(libc::EFAULT);
        }
        at = hi;
    }
    if at >= end {
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

    #[test]
    fn pinning_needs_every_page_with_the_access() {
        let maps = "1000-3000 rw-p 00000000 00:00 0\n\
                    3000-4000 r--p 00000000 00:00 0\n\
                    4000-5000 ---p 00000000 00:00 0\n\
                    6000-7000 rw-s 00000000 00:05 7 /memfd:x (deleted)\n";
        assert_eq!(covered(maps, 0x1000, 0x3000, Access::Write), Ok(()));
        assert_eq!(covered(maps, 0x1000, 0x4000, Access::Read), Ok(()));
        assert_eq!(
            covered(maps, 0x1000, 0x4000, Access::Write),
            Err(libc::EFAULT)
        );
        assert_eq!(
            covered(maps, 0x3000, 0x5000, Access::Read),
            Err(libc::EFAULT)
        );
        // A hole between two mappings, and past the last one.
        assert_eq!(
            covered(maps, 0x4000, 0x7000, Access::Read),
            Err(libc::EFAULT)
        );
        assert_eq!(
            covered(maps, 0x6000, 0x8000, Access::Read),
            Err(libc::EFAULT)
        );
        assert_eq!(covered(maps, 0x6000, 0x7000, Access::Write), Ok(()));
        assert_eq!(covered(maps, 0x0, 0x1000, Access::Read), Err(libc::EFAULT));
    }

    #[test]
    fn page_counts_and_wrapping_ranges_are_einval() {
        let a = [0u8; 64];
        let p = a.as_ptr() as u64;
        // ib_umem_num_pages: no page for an empty range at a page boundary, one otherwise.
        assert_eq!(check_pinnable(0x10000, 0, Access::Read), Err(libc::EINVAL));
        assert_eq!(check_pinnable(p | 1, 0, Access::Read), Ok(()));
        assert_eq!(
            check_pinnable(u64::MAX - 8, 16, Access::Read),
            Err(libc::EINVAL)
        );
        assert_eq!(
            check_pinnable(u64::MAX - 0x800, 16, Access::Read),
            Err(libc::EINVAL)
        );
        // 2^52 bytes: more than UINT_MAX pages, refused before anything is looked at.
        assert_eq!(check_pinnable(p, 1 << 52, Access::Read), Err(libc::EINVAL));
        assert_eq!(check_pinnable(p, 1 << 40, Access::Read), Err(libc::EFAULT));
        assert_eq!(check_pinnable(p, 64, Access::Write), Ok(()));
    }
}
