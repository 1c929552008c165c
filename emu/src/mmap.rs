//! mmap of the command fd (`mlx5_ib_mmap` in the kernel; `providers/mlx5/mlx5.c: mlx5_mmap`,
//! `get_uar_mmap_offset` in libmlx5): `offset = ((cmd << 8) | (idx & 0xff) | (idx >> 8) << 16)
//! * page_size` (`mlx5.h: set_command`, `set_index`, `set_extended_index`).
//!
//! The application's maps of the memfd are ordinary shared memory; the emulator maps the same
//! UAR pages itself so that the model can watch the doorbells written there.

use crate::caps::ucontext::{BFREGS_PER_UAR, LOG_UAR_SIZE};
use crate::device::Ucontext;
use crate::{sys, Errno};

/// `enum mlx5_ib_mmap_cmd`.
pub mod cmd {
    /// Write-combining UAR page (`MLX5_IB_MMAP_REGULAR_PAGE`).
    pub const REGULAR_PAGE: u64 = 0;
    /// `MLX5_IB_MMAP_GET_CONTIGUOUS_PAGES`.
    pub const CONTIGUOUS: u64 = 1;
    /// `MLX5_IB_MMAP_WC_PAGE`.
    pub const WC_PAGE: u64 = 2;
    /// `MLX5_IB_MMAP_NC_PAGE` (used with `MLX5_SHUT_UP_BF`).
    pub const NC_PAGE: u64 = 3;
    /// `MLX5_IB_MMAP_CORE_CLOCK`.
    pub const CORE_CLOCK: u64 = 5;
}

const PAGE: u64 = 1 << LOG_UAR_SIZE;

/// Number of UAR pages a context with `tot_bfregs` has.
pub fn uar_pages(tot_bfregs: u32) -> u32 {
    tot_bfregs.div_ceil(BFREGS_PER_UAR)
}

/// Checks an mmap request against the context.
///
/// # Errors
/// EINVAL for an offset that names nothing (no context, unknown command, UAR index out of
/// range, a clock page not advertised), as `mlx5_ib_mmap` / `uar_mmap`.
pub fn check(ctx: Option<&Ucontext>, len: usize, off: i64) -> Result<(), Errno> {
    let ctx = ctx.ok_or(libc::EINVAL)?;
    if off < 0 || off as u64 % PAGE != 0 || len == 0 {
        return Err(libc::EINVAL);
    }
    let pg = off as u64 / PAGE;
    let command = (pg >> 8) & 0xff;
    let idx = (pg & 0xff) | ((pg >> 16) << 8);
    match command {
        cmd::REGULAR_PAGE | cmd::WC_PAGE | cmd::NC_PAGE => {
            // uar_mmap(): one page, an index below the context's UAR count.
            if len as u64 != PAGE || idx >= u64::from(uar_pages(ctx.tot_bfregs)) {
                return Err(libc::EINVAL);
            }
            Ok(())
        }
        // No clock page is advertised (comp_mask has no CORE_CLOCK_OFFSET).
        _ => Err(libc::EINVAL),
    }
}

/// The emulator's own map of a context's UAR pages (regular-page offsets).
#[derive(Debug)]
pub struct Uars {
    base: usize,
    pages: u32,
}

impl Uars {
    /// Maps the `tot_bfregs` UAR pages of the memfd `fd`.
    ///
    /// # Errors
    /// mmap errno.
    pub fn map(fd: i32, tot_bfregs: u32) -> Result<Uars, Errno> {
        let pages = uar_pages(tot_bfregs).max(1);
        let base = sys::map_shared(fd, pages as usize * PAGE as usize, 0)?;
        Ok(Uars { base, pages })
    }

    /// Address of the UAR page holding bfreg `n`, in our map.
    pub fn page_of_bfreg(&self, n: u32) -> usize {
        let page = (n / BFREGS_PER_UAR).min(self.pages - 1);
        self.base + page as usize * PAGE as usize
    }
}

impl Drop for Uars {
    fn drop(&mut self) {
        sys::unmap(self.base, self.pages as usize * PAGE as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_as_libmlx5_computes_them() {
        let ctx = Ucontext {
            tot_bfregs: 16,
            uars: None,
            async_tx: -1,
        };
        let off = |cmd: u64, idx: u64| (((cmd << 8) | idx) * PAGE) as i64;
        assert_eq!(check(Some(&ctx), 4096, off(0, 0)), Ok(()));
        assert_eq!(check(Some(&ctx), 4096, off(0, 7)), Ok(()));
        assert_eq!(check(Some(&ctx), 4096, off(0, 8)), Err(libc::EINVAL));
        assert_eq!(check(Some(&ctx), 4096, off(3, 1)), Ok(()));
        assert_eq!(check(Some(&ctx), 4096, off(5, 0)), Err(libc::EINVAL));
        assert_eq!(check(Some(&ctx), 8192, off(0, 0)), Err(libc::EINVAL));
        assert_eq!(check(None, 4096, 0), Err(libc::EINVAL));
    }
}
