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
//! * Dropping a [`Packet`](crate::Packet) returns its buffer to a thread-local cache of the
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
//! handle and its lifetime), `cache` (a queue's [`PoolCache`]). Below this module, so that
//! packets need nothing from it: the shared state the packets point at (`Shared`), its free
//! stack and the index caches in front of it are in `crate::buf`; the thread-local caches a
//! dropped packet returns its buffer to are in `packet::local`.

mod cache;
mod config;
mod pool;
mod region;

pub use crate::buf::BUF_HEADER;
// `BufGeometry` is the mlx5 backend's (as its methods say).
#[cfg_attr(not(feature = "mlx5"), allow(unused_imports))]
pub(crate) use crate::buf::{BufGeometry, Shared};
pub use cache::PoolCache;
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
