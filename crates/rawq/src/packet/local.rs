//! The calling thread's caches, one per pool (the DPDK per-lcore cache): a dropped packet
//! returns its buffer to its pool's cache here ([`put_local`]), so `drop` is as cheap as a push,
//! and `Mempool::alloc` / `alloc_bulk` and [`Packet::alloc_segment`] take from it.

use std::cell::RefCell;

use super::fresh::fresh_template;
use super::Packet;
use crate::buf::{BufCache, Shared};
use crate::error::{Error, Result};

/// The calling thread's caches, one per pool it has freed into.
pub(crate) struct LocalCaches {
    pub(crate) caches: Vec<BufCache>,
}

impl LocalCaches {
    #[inline]
    pub(crate) fn cache_for(&mut self, s: &'static Shared) -> &mut BufCache {
        let pos = match self.caches.iter().position(|c| std::ptr::eq(c.shared, s)) {
            Some(p) => p,
            None => {
                self.caches.push(BufCache::new(s, fresh_template(s)));
                self.caches.len() - 1
            }
        };
        &mut self.caches[pos]
    }
}

// The thread-local caches hold no `Mempool` handle (that would keep every pool alive until the
// thread exits). That is sound because a pool is only freed when all its buffers are in the shared
// stack, i.e. none is parked here, and `Shared` itself is only freed then; a stale, empty entry is
// removed before a new pool could reuse its address (see `Drop for Owner` in `mempool::pool`).
thread_local! {
    pub(crate) static LOCAL: RefCell<LocalCaches> = const { RefCell::new(LocalCaches { caches: Vec::new() }) };
}

/// Returns `idx` to the calling thread's cache for the pool behind `s`.
#[inline]
pub(crate) fn put_local(s: &'static Shared, idx: u32) {
    let done = LOCAL.try_with(|l| {
        let mut l = l.borrow_mut();
        l.cache_for(s).put(idx);
    });
    if done.is_err() {
        // Thread-local storage is being torn down: go straight to the shared stack.
        s.lock_free().push(idx);
    }
}

/// One packet from the calling thread's cache of the pool behind `s` (for building a chain
/// onto a packet of that pool, e.g. rawq-gen's `FrameSource::fill` of a jumbo frame).
pub(crate) fn alloc_in(s: &'static Shared) -> Result<Packet> {
    let idx = LOCAL.with(|l| l.borrow_mut().cache_for(s).get());
    match idx {
        Some(idx) => Ok(Packet::from_free_index(s, idx)),
        None => Err(Error::PoolExhausted { capacity: s.count }),
    }
}
