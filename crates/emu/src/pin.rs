//! Pinned memory: what the kernel guarantees the device about the rings and MRs it pinned
//! (`drivers/infiniband/core/umem.c: ib_umem_get` takes a long-term pin, `FOLL_LONGTERM`), and
//! how the emulator keeps that promise without a kernel.
//!
//! On a real kernel a pinned page stays the device's until the object is destroyed: the
//! application may unmap it (`munmap`, `free`), or take its own access away (`mprotect`), and
//! the device's DMA still reaches the page, which user page protections do not govern. Here
//! the device is the model, running in the application's address space, so such a page would
//! crash it. Two measures keep the device alive:
//!
//! * every pinned range is recorded ([`pin`], released by dropping the [`Pinned`] its object
//!   holds), in a fixed table a signal handler can read without locks or allocation;
//! * `munmap` of pinned pages (interposed; this module's `munmap`) unmaps the rest of the range
//!   but keeps the pinned pages mapped, for the device only, until the last pin over them goes
//!   (so the address is not handed out again while the device may write there); a `MAP_FIXED`
//!   mapping the application puts over kept pages takes them back;
//! * a `SIGSEGV`/`SIGBUS` handler ([`install`]) serves a fault of the *device* (the model's
//!   thread, or an emulator entry point such as write(), which may flush CQEs) inside a pinned
//!   range: a page the application took read or write access from gets both back; a page it
//!   unmapped is replaced by a fresh zeroed page (the device's writes land there, unseen by the
//!   application, like DMA into a pinned page it no longer maps), unmapped again when the last
//!   pin over it goes. Any other fault goes to the handler that was installed before ours, or
//!   gets the default action (the process dies as it would without the emulator).
//!
//! Limits, said here because they differ from the kernel: a page the device touched is left
//! readable and writable for the application too; a replaced page reads as zeros to the
//! device (the kernel's pin would keep the old contents); an application that installs its own
//! `SIGSEGV` handler after the first pin replaces ours.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::umem::{check_pinnable, Access};
use crate::Errno;

const PAGE: u64 = 4096;
/// Pinned ranges the fault handler can see at once (every MR and ring of every context).
const SLOTS: usize = 1 << 14;
/// Pages the handler put in place of unmapped ones, not yet unmapped again.
const RESCUED: usize = 1 << 12;

struct Slot {
    start: AtomicU64,
    /// 0: free.
    end: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicU64::new(0),
    end: AtomicU64::new(0),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
/// One past the highest slot ever used (the handler scans up to it).
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Serialises slot allocation and the release of rescued pages (never taken by the handler).
static ALLOC: Mutex<()> = Mutex::new(());

#[allow(clippy::declare_interior_mutable_const)]
const NO_PAGE: AtomicU64 = AtomicU64::new(0);
static RESCUED_PAGES: [AtomicU64; RESCUED] = [NO_PAGE; RESCUED];
/// Live pins plus kept ranges and rescued pages: zero means the interposed munmap and mmap
/// pass straight through.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Ranges the application unmapped while pinned, kept mapped for the device.
static KEPT: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// Pinned ranges of one object; dropping it unpins them (after the object left the device).
#[derive(Debug, Default)]
pub struct Pinned(Vec<usize>);

impl Pinned {
    /// Pins `[addr, addr + len)` as `ib_umem_get` would (see [`check_pinnable`]) and adds it.
    ///
    /// # Errors
    /// EINVAL / EFAULT from [`check_pinnable`].
    pub fn add(&mut self, addr: u64, len: u64, access: Access) -> Result<(), Errno> {
        check_pinnable(addr, len, access)?;
        install();
        if let Some(slot) = record(addr, addr + len) {
            self.0.push(slot);
        }
        Ok(())
    }
}

impl Pinned {
    /// Pins a doorbell record of `len` bytes as `mlx5/doorbell.c: mlx5_ib_db_map_user` does:
    /// its whole page, for reading (`ib_umem_get(.., virt & PAGE_MASK, PAGE_SIZE, 0)`: the
    /// device only reads doorbell records). A record running into the next page needs that
    /// page too, since the device reads all of it.
    ///
    /// # Errors
    /// As [`Pinned::add`].
    pub fn add_dbrec(&mut self, addr: u64, len: u64) -> Result<(), Errno> {
        let start = addr & !(PAGE - 1);
        let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
        let page_end = start.checked_add(PAGE).ok_or(libc::EINVAL)?;
        self.add(start, end.max(page_end) - start, Access::Read)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _g = ALLOC.lock().unwrap_or_else(|e| e.into_inner());
        for &i in &self.0 {
            let s = &TABLE[i];
            let (start, end) = (
                s.start.load(Ordering::Relaxed),
                s.end.load(Ordering::Relaxed),
            );
            s.end.store(0, Ordering::Release);
            LIVE.fetch_sub(1, Ordering::Relaxed);
            release_rescued(start, end);
            release_kept(start, end);
        }
    }
}

/// The parts of `[start, end)` no live pin covers, in order.
fn uncovered(start: u64, end: u64) -> Vec<(u64, u64)> {
    let n = HIGH.load(Ordering::Acquire);
    let mut cover: Vec<(u64, u64)> = TABLE[..n]
        .iter()
        .filter_map(|s| {
            let e = s.end.load(Ordering::Acquire);
            let b = s.start.load(Ordering::Relaxed) & !(PAGE - 1);
            (e != 0 && b < end && e > start).then_some((b, e))
        })
        .collect();
    cover.sort_unstable();
    let mut out = Vec::new();
    let mut at = start;
    for (b, e) in cover {
        if b > at {
            out.push((at, b.min(end)));
        }
        at = at.max(e.saturating_add(PAGE - 1) & !(PAGE - 1));
        if at >= end {
            break;
        }
    }
    if at < end {
        out.push((at, end));
    }
    out
}

/// Replaces the kept ranges with `still` (keeping [`LIVE`] in step).
fn set_kept(kept: &mut Vec<(u64, u64)>, still: Vec<(u64, u64)>) {
    LIVE.fetch_sub(kept.len(), Ordering::Relaxed);
    LIVE.fetch_add(still.len(), Ordering::Relaxed);
    *kept = still;
}

/// Unmaps the kept ranges inside `[start, end)` that no pin covers any more (the caller holds
/// `ALLOC` and has already freed the slot).
fn release_kept(start: u64, end: u64) {
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let mut still = Vec::new();
    for &(b, e) in kept.iter() {
        if e <= start || b >= end {
            still.push((b, e));
            continue;
        }
        let mut at = b;
        for (ub, ue) in uncovered(b, e) {
            if ub > at {
                still.push((at, ub));
            }
            // SAFETY: pages the application unmapped and we kept for pins that are all gone.
            unsafe { libc::syscall(libc::SYS_munmap, ub, ue - ub) };
            at = ue;
        }
        if at < e {
            still.push((at, e));
        }
    }
    set_kept(&mut kept, still);
}

/// `munmap(addr, len)` with pinned pages inside: the pages no pin covers are unmapped, the
/// pinned ones kept (see the module docs). Returns `i32::MIN` (the real call) when nothing in
/// the range is pinned or the arguments are the kernel's to refuse, else 0 or `-errno`.
pub(crate) fn munmap(addr: u64, len: u64) -> i32 {
    const PASS: i32 = i32::MIN;
    if !addr.is_multiple_of(PAGE) || len == 0 {
        return PASS;
    }
    let Some(end) = len
        .checked_add(PAGE - 1)
        .and_then(|l| addr.checked_add(l & !(PAGE - 1)))
    else {
        return PASS;
    };
    let free = uncovered(addr, end);
    if free == [(addr, end)] {
        return PASS;
    }
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let mut at = addr;
    for (b, e) in free {
        if b > at {
            kept.push((at, b));
            LIVE.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the application's own munmap of pages no pin covers.
        if unsafe { libc::syscall(libc::SYS_munmap, b, e - b) } != 0 {
            return -std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
        }
        at = e;
    }
    if at < end {
        kept.push((at, end));
        LIVE.fetch_add(1, Ordering::Relaxed);
    }
    0
}

/// The application maps `[addr, addr + len)` with `MAP_FIXED`: pages kept or rescued there are
/// its own again (its new mapping replaces them), never to be unmapped by us.
pub(crate) fn mapped_fixed(addr: u64, len: u64) {
    let end = addr.saturating_add(len);
    let _g = ALLOC.lock().unwrap_or_else(|e| e.into_inner());
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let mut still = Vec::new();
    for &(b, e) in kept.iter() {
        if e <= addr || b >= end {
            still.push((b, e));
            continue;
        }
        if b < addr {
            still.push((b, addr));
        }
        if e > end {
            still.push((end, e));
        }
    }
    set_kept(&mut kept, still);
    for r in &RESCUED_PAGES {
        let p = r.load(Ordering::Acquire);
        if p != 0
            && p < end
            && p + PAGE > addr
            && r.compare_exchange(p, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Whether anything is pinned, kept or rescued (the interposer's fast check).
pub(crate) fn any() -> bool {
    LIVE.load(Ordering::Relaxed) != 0
}

/// Records a range in a free slot; `None` when the table is full (the range is then pinned
/// but a device fault in it is not served).
fn record(start: u64, end: u64) -> Option<usize> {
    let _g = ALLOC.lock().unwrap_or_else(|e| e.into_inner());
    let i = TABLE
        .iter()
        .position(|s| s.end.load(Ordering::Relaxed) == 0)?;
    TABLE[i].start.store(start, Ordering::Relaxed);
    TABLE[i].end.store(end, Ordering::Release);
    LIVE.fetch_add(1, Ordering::Relaxed);
    HIGH.fetch_max(i + 1, Ordering::Release);
    Some(i)
}

fn pinned(addr: u64) -> bool {
    let n = HIGH.load(Ordering::Acquire);
    TABLE[..n].iter().any(|s| {
        let end = s.end.load(Ordering::Acquire);
        end != 0 && addr >= s.start.load(Ordering::Relaxed) && addr < end
    })
}

/// Unmaps the pages the handler put in `[start, end)` that no other pin covers (the caller
/// holds `ALLOC` and has already freed the slot).
fn release_rescued(start: u64, end: u64) {
    for r in &RESCUED_PAGES {
        let p = r.load(Ordering::Acquire);
        if p == 0 || p + PAGE <= start || p >= end || pinned(p) {
            continue;
        }
        if r.compare_exchange(p, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: a page the fault handler mapped itself, which no pin covers any more.
            unsafe { libc::syscall(libc::SYS_munmap, p, PAGE) };
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// Depth of emulator entry points on this thread (see [`DeviceScope`]).
    static IN_DEVICE: Cell<u32> = const { Cell::new(0) };
    /// The page the handler served last on this thread, and how often in a row.
    static LAST: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

/// While alive, faults of this thread in pinned memory are the device's (an emulator entry
/// point: write() may make the model flush CQEs into the application's CQ).
pub struct DeviceScope(());

impl DeviceScope {
    /// Enters the device's side on this thread.
    pub fn enter() -> DeviceScope {
        IN_DEVICE.with(|d| d.set(d.get() + 1));
        DeviceScope(())
    }
}

impl Drop for DeviceScope {
    fn drop(&mut self) {
        IN_DEVICE.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// The model's thread (`Hw::spawn` names it) or an emulator entry point.
fn on_device() -> bool {
    if IN_DEVICE.with(Cell::get) > 0 {
        return true;
    }
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into `name`.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    name.starts_with(b"rawq-mlx5-model")
}

static OLD: OnceLock<[libc::sigaction; 2]> = OnceLock::new();

/// Installs the fault handler once (at the first pin).
pub fn install() {
    OLD.get_or_init(|| {
        // SAFETY: zeroed sigaction structs are valid (no handler, empty mask).
        let mut old: [libc::sigaction; 2] = unsafe { std::mem::zeroed() };
        for (i, sig) in [libc::SIGSEGV, libc::SIGBUS].into_iter().enumerate() {
            // SAFETY: as above.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = on_fault as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            // SAFETY: a valid handler; `old[i]` receives the previous action.
            unsafe {
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, &mut old[i]);
            }
        }
        old
    });
}

/// Makes the page at `page` reachable by the device again: read-write if it is mapped, a
/// fresh page if the application unmapped it. False if neither worked.
fn serve(page: u64) -> bool {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: raw system calls on one page of a pinned range (no libc wrapper, so nothing
    // the interposer or a lock could be in the middle of).
    unsafe {
        if libc::syscall(libc::SYS_mprotect, page, PAGE, rw) == 0 {
            return true;
        }
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
        let p = libc::syscall(libc::SYS_mmap, page, PAGE, rw, flags, -1, 0);
        if p as u64 == page {
            for r in &RESCUED_PAGES {
                if r.compare_exchange(0, page, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    LIVE.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
            return true;
        }
        // Mapped, but its protection cannot be raised (a read-only shared file): the device's
        // writes go to a private copy instead.
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED;
        libc::syscall(libc::SYS_mmap, page, PAGE, rw, flags, -1, 0) as u64 == page
    }
}

extern "C" fn on_fault(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as u64;
    let page = addr & !(PAGE - 1);
    if on_device() && pinned(addr) {
        let again = LAST.with(|l| {
            let (p, n) = l.get();
            let n = if p == page { n + 1 } else { 1 };
            l.set((page, n));
            n
        });
        // A fault that serving the page does not cure (four in a row) is not ours.
        if again <= 4 && serve(page) {
            return;
        }
    }
    chain(sig, info, ctx);
}

/// Hands a fault that is not the device's to the previous handler, or to the default action.
fn chain(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let i = usize::from(sig == libc::SIGBUS);
    let old = OLD.get().map(|o| o[i].sa_sigaction);
    match old {
        Some(h) if h != libc::SIG_DFL && h != libc::SIG_IGN => {
            let siginfo = OLD
                .get()
                .is_some_and(|o| o[i].sa_flags & libc::SA_SIGINFO != 0);
            // SAFETY: the handler the application (or its runtime) installed, called as it
            // was registered.
            unsafe {
                if siginfo {
                    let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(h);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(i32) = std::mem::transmute(h);
                    f(sig);
                }
            }
        }
        _ => {
            // The default action: reset it and return; the faulting access repeats and the
            // kernel ends the process as it would have without us.
            // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    }
}

/// Pins one range (see [`Pinned::add`]).
///
/// # Errors
/// As [`Pinned::add`].
pub fn pin(addr: u64, len: u64, access: Access) -> Result<Pinned, Errno> {
    let mut p = Pinned::default();
    p.add(addr, len, access)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pages: u64) -> u64 {
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                (pages * PAGE) as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }

    fn mapped(addr: u64) -> bool {
        check_pinnable(addr, PAGE, Access::Read).is_ok()
    }

    #[test]
    fn munmap_keeps_pinned_pages_until_the_pin_goes() {
        let a = map(4);
        let pin = pin(a + PAGE, 2 * PAGE, Access::Write).unwrap();
        assert_eq!(munmap(a, 4 * PAGE), 0);
        assert!(
            !mapped(a) && !mapped(a + 3 * PAGE),
            "the unpinned pages are gone"
        );
        assert!(
            mapped(a + PAGE) && mapped(a + 2 * PAGE),
            "the pinned ones are kept"
        );
        drop(pin);
        assert!(
            !mapped(a + PAGE) && !mapped(a + 2 * PAGE),
            "and go with the pin"
        );
        // Nothing pinned there any more: the real call.
        assert_eq!(munmap(a, 4 * PAGE), i32::MIN);
    }

    #[test]
    fn device_faults_in_pinned_pages_are_served() {
        let a = map(2);
        let pin = pin(a, 2 * PAGE, Access::Write).unwrap();
        // The application takes its write access away from one page and unmaps the other
        // behind the interposer's back (as glibc's free() does).
        // SAFETY: pages of the mapping made above.
        unsafe {
            libc::mprotect(a as *mut libc::c_void, PAGE as usize, libc::PROT_READ);
            libc::syscall(libc::SYS_munmap, a + PAGE, PAGE);
        }
        let _device = DeviceScope::enter();
        // SAFETY: both pages are pinned; the handler makes them reachable (a crash otherwise).
        unsafe {
            std::ptr::write_volatile(a as *mut u64, 7);
            std::ptr::write_volatile((a + PAGE) as *mut u64, 9);
            assert_eq!(std::ptr::read_volatile(a as *const u64), 7);
            assert_eq!(std::ptr::read_volatile((a + PAGE) as *const u64), 9);
        }
        drop(pin);
        assert!(
            !mapped(a + PAGE),
            "the page put in place of the unmapped one goes too"
        );
        // SAFETY: the first page is still the test's own mapping.
        unsafe { libc::munmap(a as *mut libc::c_void, PAGE as usize) };
    }
}
