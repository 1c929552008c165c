// The model's own copy of rawq's src/dv/mmio.rs (the doorbell-record and `op_own` accesses the
// device side makes, and the test driver's), so that the model imports nothing from rawq; to be
// re-derived from rdma-core util/udma_barrier.h as issue 18 asks.

//! The only accesses to device-shared words: doorbell records, the UAR register, `op_own` bytes,
//! and the barriers between them. Everything here is `#[inline(always)]`.

use std::ptr::NonNull;
#[allow(unused_imports)] // which fences are used depends on the architecture
use std::sync::atomic::{compiler_fence, fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Loads a big-endian doorbell-record word (acquire): the device side of the driver's release
/// store of it (libmlx5 writes its doorbell records after a to-device barrier: rdma-core
/// providers/mlx5/qp.c `post_send_db`, `mlx5_post_wq_recv`).
#[inline(always)]
pub(crate) fn dbrec_load(rec: NonNull<u32>) -> u32 {
    // SAFETY: `rec` points at a live, 4-byte aligned doorbell-record word owned by the queue's
    // verbs objects (or the model) for the queue's lifetime; every access goes through atomics.
    let a = unsafe { AtomicU32::from_ptr(rec.as_ptr()) };
    u32::from_be(a.load(Ordering::Acquire))
}

/// Loads the 8 bytes at a doorbell (BlueFlame) register, as they lie in memory. The driver
/// writes the first 8 bytes of its last WQE's control segment there after the doorbell record
/// (rdma-core providers/mlx5/qp.c `post_send_db`: `mmio_write64_be(bf->reg + bf->offset, ...)`
/// after `udma_to_device_barrier` and the record; DPDK drivers/common/mlx5/mlx5_common.h
/// `mlx5_doorbell_ring`: the record, `rte_wmb`, then the 64-bit UAR store), so a load that sees
/// the register's new value (acquire) also sees the record.
#[inline(always)]
pub(crate) fn uar_load(reg: NonNull<u64>) -> u64 {
    // SAFETY: `reg` points at a live, 8-byte aligned word of a UAR page the queue's creator
    // keeps mapped for the queue's lifetime; every access the model makes goes through atomics
    // (the driver's stores are 8-byte or wider aligned stores).
    let a = unsafe { AtomicU64::from_ptr(reg.as_ptr()) };
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

// The barriers, per architecture, as rdma-core defines them (util/udma_barrier.h) and DPDK
// uses them around its doorbells (drivers/common/mlx5/mlx5_common.h, `mlx5_doorbell_ring`;
// lib/eal/*/include/rte_atomic*.h). On x86-64, ring memory is write-back and the CPU keeps
// stores in order and loads in order, so the to-device and from-device barriers only have to
// stop the compiler (DPDK's `rte_io_wmb` / `rte_io_rmb` are compiler barriers there); only
// write-combined UAR stores need `sfence`. On aarch64 the barriers must reach the outer
// shareable domain the device is in: `dmb oshst`, `dmb oshld`, and `dsb st` around
// write-combining. Elsewhere a full fence stands in for each.
