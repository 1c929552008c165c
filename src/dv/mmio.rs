//! The only accesses to device-shared words: doorbell records, the UAR register, `op_own` bytes,
//! and the barriers between them. Everything here is `#[inline(always)]`.

use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};

/// Stores a big-endian doorbell-record word with release ordering: every ring write before it
/// (WQEs, scrubbed CQEs) is visible to the device before the new counter.
#[inline(always)]
pub(crate) fn dbrec_store(rec: NonNull<u32>, host: u32) {
    // SAFETY: `rec` points at a live, 4-byte aligned doorbell-record word owned by the queue's
    // verbs objects (or the model) for the queue's lifetime; the device side only reads it, and
    // every CPU-side access goes through atomics.
    let a = unsafe { AtomicU32::from_ptr(rec.as_ptr()) };
    a.store(host.to_be(), Ordering::Release);
}

/// Loads a big-endian doorbell-record word (acquire): the device side of [`dbrec_store`].
#[inline(always)]
pub(crate) fn dbrec_load(rec: NonNull<u32>) -> u32 {
    // SAFETY: as in `dbrec_store`.
    let a = unsafe { AtomicU32::from_ptr(rec.as_ptr()) };
    u32::from_be(a.load(Ordering::Acquire))
}

/// Loads a CQE's `op_own` byte with acquire ordering: reading it is the ownership check, and the
/// acquire is the read barrier that keeps the rest of the CQE from being read before it
/// (`udma_from_device_barrier` in libmlx5).
///
/// # Safety
/// `p` must point at the `op_own` byte of a CQE in live CQ memory.
#[inline(always)]
pub(crate) unsafe fn op_own_load(p: *const u8) -> u8 {
    // SAFETY: the caller guarantees `p` is a live byte; byte atomics need no alignment.
    let a = unsafe { AtomicU8::from_ptr(p as *mut u8) };
    a.load(Ordering::Acquire)
}

/// Stores a CQE's `op_own` byte with release ordering (the device writes it last; the driver
/// scrubs consumed slots with it).
///
/// # Safety
/// `p` must point at the `op_own` byte of a CQE in live CQ memory.
#[inline(always)]
pub(crate) unsafe fn op_own_store(p: *mut u8, v: u8) {
    // SAFETY: the caller guarantees `p` is a live byte.
    let a = unsafe { AtomicU8::from_ptr(p) };
    a.store(v, Ordering::Release);
}

/// Store fence between the doorbell record and the UAR write (`mmio_wc_start` / `rte_wmb`):
/// `sfence` on x86-64, a full fence elsewhere.
#[inline(always)]
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions; SSE is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
}

/// Release fence (the `udma_to_device_barrier` before a doorbell record).
#[inline(always)]
pub(crate) fn release_fence() {
    fence(Ordering::Release);
}

/// The 8-byte doorbell: writes `bytes` (the first 8 bytes of the last WQE's control segment, in
/// memory order) to the UAR register with one volatile 64-bit store.
///
/// # Safety
/// `reg` must be the 8-byte aligned BlueFlame/doorbell register of this queue's UAR mapping.
#[inline(always)]
pub(crate) unsafe fn uar_write64(reg: *mut u8, bytes: [u8; 8]) {
    // SAFETY: the caller guarantees `reg` is a live, aligned, writable 8-byte register.
    unsafe { std::ptr::write_volatile(reg as *mut u64, u64::from_ne_bytes(bytes)) };
}
