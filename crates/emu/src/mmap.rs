//! mmap of the command fd (`mlx5_ib_mmap` in the kernel; `providers/mlx5/mlx5.c: mlx5_mmap`,
//! `get_uar_mmap_offset` in libmlx5): `offset = ((cmd << 8) | (idx & 0xff) | (idx >> 8) << 16)
//! * page_size` (`mlx5.h: set_command`, `set_index`, `set_extended_index`).
//!
//! The application's maps of the memfd are ordinary shared memory; the emulator maps the same
//! UAR pages itself so that the model can watch the doorbells written there.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rawq_model::hw::Hw;

use crate::caps::ucontext::{BFREGS_PER_UAR, LOG_UAR_SIZE};
use crate::{sys, Errno};

/// A context (`ib_ucontext`), made by GET_CONTEXT.
pub struct Ucontext {
    /// bfregs granted (`tot_bfregs`).
    pub tot_bfregs: u32,
    /// Our own map of the UAR pages (the model polls them).
    pub uars: Option<Uars>,
    /// Our end of the async event fd.
    pub async_tx: i32,
    /// The application's end of it (`async_fd`).
    pub async_app: i32,
    /// The device clock page, once mapped (`MLX5_IB_MMAP_CORE_CLOCK`).
    pub clock: Option<ClockPage>,
    /// The clock page is advertised (the model runs).
    pub has_clock: bool,
}

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

/// What an accepted mmap offset names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    /// A UAR page.
    Uar,
    /// The device clock page.
    Clock,
}

/// The memfd offset a validated mmap of `off` maps. Every UAR command (regular, write-combining,
/// non-cached) names the same UAR page: the kernel maps one physical page whatever the caching
/// (Linux drivers/infiniband/hw/mlx5/main.c `uar_mmap`: only `vm_page_prot` differs by
/// command), so all of them map the page the emulator watches (`Uars`, mapped at `idx *
/// PAGE`). DPDK's mlx5 PMD asks for non-cached pages (`MLX5_SHUT_UP_BF`, drivers/common/mlx5/
/// linux/mlx5_common_os.c `mlx5_config_doorbell_mapping_env`). Other offsets map as asked.
pub fn canonical_offset(off: i64) -> i64 {
    if off < 0 || !(off as u64).is_multiple_of(PAGE) {
        return off;
    }
    let pg = off as u64 / PAGE;
    let command = (pg >> 8) & 0xff;
    let idx = (pg & 0xff) | ((pg >> 16) << 8);
    match command {
        cmd::REGULAR_PAGE | cmd::WC_PAGE | cmd::NC_PAGE => (idx * PAGE) as i64,
        _ => off,
    }
}

/// Checks an mmap request against the context.
///
/// # Errors
/// EINVAL for an offset that names nothing (no context, unknown command, UAR index out of
/// range, a clock page not advertised), EPERM for a writable clock page, as `mlx5_ib_mmap` /
/// `uar_mmap`.
pub fn check(ctx: Option<&Ucontext>, len: usize, prot: i32, off: i64) -> Result<Page, Errno> {
    let ctx = ctx.ok_or(libc::EINVAL)?;
    if off < 0 || !(off as u64).is_multiple_of(PAGE) || len == 0 {
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
            Ok(Page::Uar)
        }
        cmd::CORE_CLOCK if ctx.has_clock => {
            // mlx5_ib_mmap: one page, never writable.
            if len as u64 != PAGE {
                return Err(libc::EINVAL);
            }
            if prot & libc::PROT_WRITE != 0 {
                return Err(libc::EPERM);
            }
            Ok(Page::Clock)
        }
        _ => Err(libc::EINVAL),
    }
}

/// The clock page: the emulator keeps the device clock (big-endian, at offset 0) current in
/// the memfd page the application maps read-only.
#[derive(Debug)]
pub struct ClockPage {
    addr: usize,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ClockPage {
    /// Maps the clock page of `fd` and starts updating it every 100 µs: from the model's clock
    /// when CQEs carry its timestamps, else from the monotonic clock at
    /// [`caps::CLOCK_KHZ`](crate::caps::CLOCK_KHZ).
    ///
    /// # Errors
    /// mmap errno.
    pub fn start(fd: i32, hw: Hw, from_model: bool) -> Result<ClockPage, Errno> {
        let t0 = std::time::Instant::now();
        let ticks = move || {
            if from_model {
                hw.clock_ticks()
            } else {
                (t0.elapsed().as_nanos() * u128::from(crate::caps::CLOCK_KHZ) / 1_000_000) as u64
            }
        };
        let off = (cmd::CORE_CLOCK << 8) * PAGE;
        let addr = sys::map_shared(fd, PAGE as usize, off as i64)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("rawq-emu-clock".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    store_clock(addr, ticks());
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            })
            .map_err(|_| libc::EAGAIN)?;
        Ok(ClockPage {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

/// One aligned 8-byte store of the big-endian clock, so that a reader (libmlx5 reads the high
/// word, the low word, then the high word again) never sees a torn value.
#[allow(unsafe_code)]
fn store_clock(addr: usize, ticks: u64) {
    // SAFETY: `addr` is the start of a page we mapped read-write (ClockPage::start) and keep
    // mapped until the thread calling this has been joined (ClockPage::drop); page-aligned, so
    // aligned for AtomicU64.
    let word = unsafe { &*(addr as *const AtomicU64) };
    word.store(u64::from_ne_bytes(ticks.to_be_bytes()), Ordering::Release);
}

impl Drop for ClockPage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        sys::unmap(self.addr, PAGE as usize);
    }
}

/// The emulator's own map of a context's UAR pages (regular-page offsets), and which QPs use
/// each bfreg (the doorbell registers: the model watches the one of each SQ).
#[derive(Debug)]
pub struct Uars {
    base: usize,
    pages: u32,
    /// QPs using each bfreg (`bfregi->count`).
    users: Vec<u32>,
    /// `num_low_latency_bfregs` of the GET_CONTEXT request.
    low_latency: u32,
    /// (QPN, bfreg) of every QP given one.
    given: Vec<(u32, u32)>,
}

impl Uars {
    /// Maps the `tot_bfregs` UAR pages of the memfd `fd`; `low_latency` of them are the
    /// high class (one QP each).
    ///
    /// # Errors
    /// mmap errno.
    pub fn map(fd: i32, tot_bfregs: u32, low_latency: u32) -> Result<Uars, Errno> {
        let pages = uar_pages(tot_bfregs).max(1);
        let base = sys::map_shared(fd, pages as usize * PAGE as usize, 0)?;
        Ok(Uars {
            base,
            pages,
            users: vec![0; (pages * BFREGS_PER_UAR) as usize],
            low_latency,
            given: Vec::new(),
        })
    }

    /// The bfreg the next QP gets, as the kernel picks it (Linux drivers/infiniband/hw/mlx5/
    /// qp.c `alloc_bfreg`): a free high-class (low-latency) one, the last `low_latency`
    /// bfregs; else the least used medium-class one (1 up to the high class,
    /// `alloc_med_class_bfreg`); else bfreg 0, the shared one without BlueFlame.
    pub fn next_bfreg(&self) -> u32 {
        let max = self.users.len() as u32;
        // num_med_bfreg(): every bfreg but the low-latency ones and bfreg 0.
        let med = max.saturating_sub(self.low_latency + 1);
        let first_hi = med + 1;
        if let Some(i) = (first_hi..max).find(|&i| self.users[i as usize] == 0) {
            return i;
        }
        if med == 0 {
            return 0;
        }
        let mut min = 1;
        for i in 1..first_hi {
            if self.users[i as usize] < self.users[min as usize] {
                min = i;
            }
            if self.users[min as usize] == 0 {
                break;
            }
        }
        min
    }

    /// Records that QP `qpn` uses bfreg `n` (from [`Uars::next_bfreg`]).
    pub fn take(&mut self, n: u32, qpn: u32) {
        if let Some(u) = self.users.get_mut(n as usize) {
            *u += 1;
            self.given.push((qpn, n));
        }
    }

    /// QP `qpn` is gone: its bfreg has one user fewer (`mlx5_ib_free_bfreg`).
    pub fn release(&mut self, qpn: u32) {
        if let Some(i) = self.given.iter().position(|&(q, _)| q == qpn) {
            let (_, n) = self.given.swap_remove(i);
            if let Some(u) = self.users.get_mut(n as usize) {
                *u = u.saturating_sub(1);
            }
        }
    }

    /// The bfreg index the create-QP response carries for the kernel's bfreg `n`
    /// (qp.c `adjust_bfregn`: libmlx5 counts 4 bfregs per UAR page, the kernel 2).
    pub fn lib_index(n: u32) -> u32 {
        n / BFREGS_PER_UAR * 4 + n % BFREGS_PER_UAR
    }

    /// Address of the UAR page holding bfreg `n`, in our map (the CQ doorbell is at its
    /// `MLX5_CQ_DOORBELL`, 0x20).
    pub fn page_of_bfreg(&self, n: u32) -> usize {
        let page = (n / BFREGS_PER_UAR).min(self.pages - 1);
        self.base + page as usize * PAGE as usize
    }

    /// Address, in our map, of bfreg `n`'s doorbell register: its UAR page plus
    /// `MLX5_BF_OFFSET` (0x800) plus `bf_reg_size` per bfreg before it in the page, as
    /// libmlx5 finds it (rdma-core providers/mlx5/mlx5.c `mlx5_init_context`:
    /// `bfs[bfi].reg = uar[i].reg + MLX5_BF_OFFSET + k * bf_reg_size`).
    pub fn register_of_bfreg(&self, n: u32) -> usize {
        let page = (n / BFREGS_PER_UAR).min(self.pages - 1);
        self.base
            + page as usize * PAGE as usize
            + 0x800
            + (n % BFREGS_PER_UAR) as usize * crate::caps::ucontext::BF_REG_SIZE as usize
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
        let mut ctx = Ucontext {
            tot_bfregs: 16,
            uars: None,
            async_tx: -1,
            async_app: -1,
            clock: None,
            has_clock: false,
        };
        let off = |cmd: u64, idx: u64| (((cmd << 8) | idx) * PAGE) as i64;
        let r = libc::PROT_READ;
        let rw = r | libc::PROT_WRITE;
        assert_eq!(check(Some(&ctx), 4096, rw, off(0, 0)), Ok(Page::Uar));
        assert_eq!(check(Some(&ctx), 4096, rw, off(0, 7)), Ok(Page::Uar));
        assert_eq!(check(Some(&ctx), 4096, rw, off(0, 8)), Err(libc::EINVAL));
        assert_eq!(check(Some(&ctx), 4096, rw, off(3, 1)), Ok(Page::Uar));
        assert_eq!(check(Some(&ctx), 4096, r, off(5, 0)), Err(libc::EINVAL));
        ctx.has_clock = true;
        assert_eq!(check(Some(&ctx), 4096, r, off(5, 0)), Ok(Page::Clock));
        assert_eq!(check(Some(&ctx), 4096, rw, off(5, 0)), Err(libc::EPERM));
        assert_eq!(check(Some(&ctx), 8192, rw, off(0, 0)), Err(libc::EINVAL));
        assert_eq!(check(None, 4096, rw, 0), Err(libc::EINVAL));
    }

    #[test]
    fn every_uar_command_maps_the_page_the_emulator_watches() {
        let off = |cmd: u64, idx: u64| (((cmd << 8) | idx) * PAGE) as i64;
        for c in [cmd::REGULAR_PAGE, cmd::WC_PAGE, cmd::NC_PAGE] {
            assert_eq!(canonical_offset(off(c, 3)), off(0, 3));
        }
        assert_eq!(canonical_offset(off(cmd::CORE_CLOCK, 0)), off(5, 0));
    }
}
