//! Packet buffer pool: one contiguous region cut into fixed-size buffers.
//!
//! The region is mapped once (2 MiB huge pages when the system has them reserved, plain anonymous
//! memory otherwise) so that a backend registers it once: one memory region (MR) for verbs, one
//! UMEM for AF_XDP. Buffer `i` starts at `base + i * buf_size`.
//!
//! # Free lists
//! * The **shared stack** holds the indices of free buffers. It is protected by a mutex and is only
//!   touched in bulk, `cache_size` indices at a time.
//! * A [`PoolCache`] is a private stack in front of the shared one. Each queue owns one for its
//!   refill and completion paths, so allocating and freeing in a burst touches no shared cache line.
//! * Dropping a [`Packet`](crate::Packet) returns its buffer to a thread-local `PoolCache` of the
//!   same pool (the DPDK per-lcore cache), so `drop` is as cheap as a push.
//!
//! Cached buffers are free but not in the shared stack: [`Mempool::available`] counts the shared
//! stack only. Call [`Mempool::flush_local_cache`] (and drop the queues) before comparing it with
//! [`Mempool::capacity`].
//!
//! # Lifetime
//! Packets point into the pool without a reference count (an atomic increment per packet would
//! touch a shared cache line). When the last [`Mempool`] handle is dropped while buffers are still
//! out, the region is deliberately leaked rather than unmapped under them.
//!
//! The files: `config` (what to build), `region` (mapping the memory), `pool` (the [`Mempool`]
//! handle and its lifetime), `cache` (the private and thread-local stacks in front of the shared
//! one); the shared state the packets point at, `Shared`, is here.

mod cache;
mod config;
mod pool;
mod region;

use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use memmap2::MmapMut;

pub use cache::PoolCache;
use cache::LOCAL;
pub use config::{HugePages, MemoryKind, MempoolConfig};
pub use pool::Mempool;

/// A pool of `buffers` buffers of the default size in ordinary pages, for unit tests.
#[cfg(test)]
pub(crate) fn test_pool(buffers: u32) -> Mempool {
    Mempool::new(&MempoolConfig {
        buffers,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .unwrap()
}

/// Size of a huge page used for the region, when huge pages are used.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Bytes at the start of every buffer reserved for rawq's own per-buffer header (segment chaining).
pub const BUF_HEADER: usize = 8;

/// The part of a pool that packets point at. Never moves once created.
pub(crate) struct Shared {
    base: NonNull<u8>,
    len: usize,
    buf_size: u32,
    buf_shift: u32,
    count: u32,
    headroom: u16,
    cache_size: u32,
    kind: MemoryKind,
    id: u64,
    free: Mutex<Vec<u32>>,
    map: Mutex<Option<MmapMut>>,
}

// SAFETY: `Shared` owns the mapping; `base` is only dereferenced through buffers whose ownership
// is tracked by the free lists (one owner per buffer), and the free list is behind a mutex.
#[allow(unsafe_code)]
unsafe impl Send for Shared {}
// SAFETY: see above; all shared mutable state is behind mutexes.
#[allow(unsafe_code)]
unsafe impl Sync for Shared {}

impl Shared {
    fn lock_free(&self) -> MutexGuard<'_, Vec<u32>> {
        // A panic while holding this lock cannot leave the Vec inconsistent (push/pop only).
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves up to `n` indices from the shared stack into `out`. Returns how many.
    fn take_bulk(&self, out: &mut Vec<u32>, n: usize) -> usize {
        let mut free = self.lock_free();
        let k = n.min(free.len());
        let from = free.len() - k;
        out.extend(free.drain(from..));
        k
    }

    /// Moves `from[keep..]` into the shared stack.
    fn give_bulk(&self, from: &mut Vec<u32>, keep: usize) {
        if from.len() <= keep {
            // Nothing to move. Returning here matters: a stale, empty thread-local entry may
            // name a pool that no longer exists, and must not touch it.
            return;
        }
        let mut free = self.lock_free();
        free.extend(from.drain(keep..));
        debug_assert!(free.len() <= self.count as usize);
    }

    /// Moves `from[keep..]` and all of `more` into the shared stack, under one lock.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    fn give_bulk_and(&self, from: &mut Vec<u32>, keep: usize, more: &[u32]) {
        if from.len() <= keep && more.is_empty() {
            return;
        }
        let mut free = self.lock_free();
        free.extend(from.drain(keep.min(from.len())..));
        free.extend_from_slice(more);
        debug_assert!(free.len() <= self.count as usize);
    }

    #[inline]
    pub(crate) fn buf_ptr(&self, idx: u32) -> *mut u8 {
        debug_assert!(idx < self.count);
        // Inside the mapping: idx < count and count * buf_size == len.
        self.base
            .as_ptr()
            .wrapping_add((idx as usize) << self.buf_shift)
    }

    /// Where the buffers are, as a copyable value a hot loop can keep in registers (the pool's
    /// own fields would be reloaded after every store through a raw pointer).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline(always)]
    pub(crate) fn geometry(&self) -> BufGeometry {
        BufGeometry {
            base: self.base.as_ptr(),
            size: self.buf_size as usize,
        }
    }

    #[inline]
    pub(crate) fn buf_size(&self) -> u32 {
        self.buf_size
    }

    #[inline]
    pub(crate) fn headroom(&self) -> u16 {
        self.headroom
    }

    /// Returns `idx` to the calling thread's cache for this pool.
    #[inline]
    pub(crate) fn put_local(&'static self, idx: u32) {
        let done = LOCAL.try_with(|l| {
            let mut l = l.borrow_mut();
            l.cache_for(self).put(idx);
        });
        if done.is_err() {
            // Thread-local storage is being torn down: go straight to the shared stack.
            self.lock_free().push(idx);
        }
    }
}

/// Buffer addresses of one pool: buffer `idx` starts at `base + idx * size`. (A multiply,
/// not a shift: it needs no count register, which a hot loop is short of.)
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct BufGeometry {
    base: *mut u8,
    size: usize,
}

impl BufGeometry {
    /// Start address of buffer `idx` (as [`Shared::buf_ptr`]).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline(always)]
    pub(crate) fn buf_ptr(&self, idx: u32) -> *mut u8 {
        self.base.wrapping_add(idx as usize * self.size)
    }

    /// Bytes per buffer.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline(always)]
    pub(crate) fn buf_size(&self) -> usize {
        self.size
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Remove this thread's (empty) cache entry so that a later pool allocated at the same
        // address does not find it. Entries in other threads are empty as well (all buffers are
        // home), and only compared by address; a new pool at the same address would merely reuse
        // an empty cache with the same geometry check below.
        let me = self as *const Shared;
        let _ = LOCAL.try_with(|l| {
            if let Ok(mut l) = l.try_borrow_mut() {
                l.caches.retain(|c| !std::ptr::eq(c.shared, me));
            }
        });
        if let Ok(mut m) = self.map.lock() {
            m.take();
        }
    }
}
