//! The only accesses to device-shared words: doorbell records, the UAR register, `op_own` bytes,
//! and the barriers between them. Everything here is `#[inline(always)]`.

use std::ptr::NonNull;
#[allow(unused_imports)] // which fences are used depends on the architecture
use std::sync::atomic::{compiler_fence, fence, AtomicU32, AtomicU8, Ordering};

/// Stores a big-endian doorbell-record word, after [`to_device_barrier`]: every ring write
/// before it (WQEs, scrubbed CQEs) reaches the device before the new counter (libmlx5 writes
/// its doorbell records the same way: rdma-core providers/mlx5/qp.c, `post_send_db`, and
/// `mlx5_post_wq_recv`). The store itself is a release store, which is what the device model's
/// thread (an acquire load) relies on; for the device, the barrier is what counts.
#[inline(always)]
pub(crate) fn dbrec_store(rec: NonNull<u32>, host: u32) {
    to_device_barrier();
    // SAFETY: `rec` points at a live, 4-byte aligned doorbell-record word owned by the queue's
    // verbs objects (or the model) for the queue's lifetime; the device side only reads it, and
    // every CPU-side access goes through atomics.
    let a = unsafe { AtomicU32::from_ptr(rec.as_ptr()) };
    a.store(host.to_be(), Ordering::Release);
}

/// Loads a CQE's `op_own` byte with acquire ordering, then [`from_device_barrier`]: reading
/// it is the ownership check, and nothing of the CQE may be read before it
/// (`udma_from_device_barrier` after the owner check in libmlx5's CQ polling).
///
/// # Safety
/// `p` must point at the `op_own` byte of a CQE in live CQ memory.
#[inline(always)]
pub(crate) unsafe fn op_own_load(p: *const u8) -> u8 {
    // SAFETY: the caller guarantees `p` is a live byte; byte atomics need no alignment.
    let a = unsafe { AtomicU8::from_ptr(p as *mut u8) };
    let v = a.load(Ordering::Acquire);
    from_device_barrier();
    v
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

// The barriers, per architecture, as rdma-core defines them (util/udma_barrier.h) and DPDK
// uses them around its doorbells (drivers/common/mlx5/mlx5_common.h, `mlx5_doorbell_ring`;
// lib/eal/*/include/rte_atomic*.h). On x86-64, ring memory is write-back and the CPU keeps
// stores in order and loads in order, so the to-device and from-device barriers only have to
// stop the compiler (DPDK's `rte_io_wmb` / `rte_io_rmb` are compiler barriers there); only
// write-combined UAR stores need `sfence`. On aarch64 the barriers must reach the outer
// shareable domain the device is in: `dmb oshst`, `dmb oshld`, and `dsb st` around
// write-combining. Elsewhere a full fence stands in for each.

/// `udma_to_device_barrier`: ring writes before it reach the device before writes after it
/// (the doorbell record).
#[inline(always)]
pub(crate) fn to_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::Release);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction: no memory access, no preconditions.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// `udma_from_device_barrier`: nothing of a CQE is read before its owner byte.
#[inline(always)]
pub(crate) fn from_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::Acquire);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction: no memory access, no preconditions.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// `mmio_flush_writes` (and `mmio_wc_start`, the same barrier): every store before it,
/// including write-combined UAR stores, leaves the CPU before any store after it. Used between
/// the doorbell record and the UAR write, and after the UAR write so that the doorbell does not
/// sit in a write-combining buffer (libmlx5 `post_send_db` flushes after it; DPDK
/// `mlx5_doorbell_ring` ends with `rte_wmb`, its comment warning of a long doorbell latency
/// otherwise).
#[inline(always)]
pub(crate) fn wc_flush() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions; SSE is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction: no memory access, no preconditions.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
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
