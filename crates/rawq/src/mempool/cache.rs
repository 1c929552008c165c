//! The stacks in front of the shared one: a queue's own [`PoolCache`], and the calling thread's
//! caches that a dropped [`Packet`] returns its buffer to.

use std::cell::RefCell;

use super::pool::Mempool;
use super::Shared;
use crate::error::{Error, Result};
use crate::packet::Packet;

/// A private stack of free buffer indices in front of a pool's shared stack.
///
/// Holds at most `2 * cache_size` indices; refills and flushes move `cache_size` indices under
/// one lock of the shared stack. Dropping the cache returns everything it holds.
pub struct PoolCache {
    pub(super) shared: &'static Shared,
    pub(super) stack: Vec<u32>,
    size: usize,
    // Keeps the pool alive while the cache holds indices; `None` only inside the thread-local
    // cache, which must not keep pools alive (see `LocalCaches`).
    _pool: Option<Mempool>,
}

impl PoolCache {
    pub(super) fn new(pool: Mempool) -> PoolCache {
        let shared = pool.shared();
        let size = shared.cache_size as usize;
        PoolCache {
            shared,
            stack: Vec::with_capacity(2 * size + 64),
            size,
            _pool: Some(pool),
        }
    }

    /// Takes one free buffer index, refilling from the shared stack when empty.
    #[inline]
    pub fn get(&mut self) -> Option<u32> {
        if let Some(i) = self.stack.pop() {
            return Some(i);
        }
        self.shared.take_bulk(&mut self.stack, self.size);
        self.stack.pop()
    }

    /// Lends the cache's top indices to `take`, which uses some of them **from the end** of the
    /// slice it is given and returns how many; those leave the cache. The slice holds at least
    /// `min(n, cache_size)` indices unless the pool runs dry (one refill from the shared stack,
    /// no allocation). A driver's refill batch: one length check instead of one per buffer.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline]
    pub(crate) fn get_bulk(&mut self, n: usize, take: impl FnOnce(&[u32]) -> usize) {
        let n = n.min(self.size);
        if self.stack.len() < n {
            // Fill up to the cache's limit: half as many trips to the shared stack as `get`.
            let want = 2 * self.size - self.stack.len();
            self.shared.take_bulk(&mut self.stack, want);
        }
        let used = take(&self.stack);
        let keep = self.stack.len() - used.min(self.stack.len());
        self.stack.truncate(keep);
    }

    /// Makes sure at least `n` indices are cached (taking more from the shared stack if needed).
    /// Returns false if the pool does not have that many free.
    pub fn ensure(&mut self, n: usize) -> bool {
        if self.stack.len() >= n {
            return true;
        }
        let want = (n - self.stack.len()).max(self.size);
        self.shared.take_bulk(&mut self.stack, want);
        self.stack.len() >= n
    }

    /// Returns one index; flushes `cache_size` indices to the shared stack when full.
    #[inline]
    pub fn put(&mut self, idx: u32) {
        debug_assert!(idx < self.shared.count);
        if self.stack.len() >= 2 * self.size {
            let keep = self.stack.len() - self.size;
            self.shared.give_bulk(&mut self.stack, keep);
        }
        self.stack.push(idx);
    }

    /// Returns several indices at once (a driver's completion batch): one copy instead of a
    /// push per index. When they do not all fit (the cache holds at most `2 * cache_size`), the
    /// cache keeps `cache_size` and the rest goes to the shared stack under one lock.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline]
    pub(crate) fn put_slice(&mut self, idx: &[u32]) {
        if self.stack.len() + idx.len() <= 2 * self.size {
            self.stack.extend_from_slice(idx);
            return;
        }
        let fill = self.size.saturating_sub(self.stack.len()).min(idx.len());
        self.stack.extend_from_slice(&idx[..fill]);
        let keep = self.stack.len().min(self.size);
        self.shared
            .give_bulk_and(&mut self.stack, keep, &idx[fill..]);
    }

    /// Allocates a packet.
    #[inline]
    pub fn alloc(&mut self) -> Option<Packet> {
        self.get().map(|i| Packet::from_free_index(self.shared, i))
    }

    /// Appends `n` fresh packets to `out`, all or none (refilling from the shared stack only
    /// when the cache holds fewer than `n`).
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when fewer than `n` buffers are free; nothing is appended then.
    pub fn alloc_bulk(&mut self, out: &mut Vec<Packet>, n: usize) -> Result<()> {
        if !self.ensure(n) {
            return Err(Error::PoolExhausted {
                capacity: self.shared.count,
            });
        }
        let from = self.stack.len() - n;
        let s = self.shared;
        // A slice iterator (exact length: one reserve, no per-element capacity check) and a
        // truncate, rather than a `Drain` (whose drop moves the tail back).
        out.extend(
            self.stack[from..]
                .iter()
                .rev()
                .map(|&idx| Packet::from_free_index(s, idx)),
        );
        self.stack.truncate(from);
        Ok(())
    }

    /// Frees a packet into this cache (rather than the thread-local cache a plain drop uses).
    #[inline]
    pub fn free(&mut self, pkt: Packet) {
        if pkt.is_single() {
            self.put(pkt.into_raw());
        } else {
            for idx in pkt.into_buffer_indices() {
                self.put(idx);
            }
        }
    }

    /// Number of indices held.
    pub fn len(&self) -> usize {
        self.stack.len()
    }

    /// True if the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.stack.is_empty()
    }

    /// Returns everything to the shared stack.
    pub fn flush(&mut self) {
        self.shared.give_bulk(&mut self.stack, 0);
    }

    /// Start address of buffer `idx` (for backends posting it to a device).
    #[inline]
    pub fn buf_ptr(&self, idx: u32) -> *mut u8 {
        self.shared.buf_ptr(idx)
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The calling thread's caches, one per pool it has freed into.
pub(super) struct LocalCaches {
    pub(super) caches: Vec<PoolCache>,
}

impl LocalCaches {
    #[inline]
    pub(super) fn cache_for(&mut self, s: &'static Shared) -> &mut PoolCache {
        let pos = match self.caches.iter().position(|c| std::ptr::eq(c.shared, s)) {
            Some(p) => p,
            None => {
                let size = s.cache_size as usize;
                self.caches.push(PoolCache {
                    shared: s,
                    stack: Vec::with_capacity(2 * size + 64),
                    size,
                    _pool: None,
                });
                self.caches.len() - 1
            }
        };
        &mut self.caches[pos]
    }
}

// The thread-local caches hold no `Mempool` handle (that would keep every pool alive until the
// thread exits). That is sound because a pool is only freed when all its buffers are in the shared
// stack, i.e. none is parked here, and `Shared` itself is only freed then; a stale, empty entry is
// removed before a new pool could reuse its address (see `Drop for Owner` → `forget_pool`).
thread_local! {
    pub(super) static LOCAL: RefCell<LocalCaches> = const { RefCell::new(LocalCaches { caches: Vec::new() }) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mempool::{HugePages, MempoolConfig};

    fn small(n: u32) -> Mempool {
        Mempool::new(&MempoolConfig {
            buffers: n,
            huge_pages: HugePages::Never,
            cache_size: 8,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn cache_refills_and_flushes_in_bulk() {
        let pool = small(64);
        let mut c = pool.cache();
        let first = c.get().unwrap();
        assert_eq!(first, 0, "allocation starts at buffer 0");
        assert_eq!(
            c.len(),
            7,
            "one refill of cache_size (8), minus the one taken"
        );
        assert_eq!(pool.available(), 56);
        let mut taken = vec![first];
        taken.extend((0..23).map(|_| c.get().unwrap()));
        assert_eq!(pool.available(), 40, "three refills in all");
        for &i in &taken {
            c.put(i);
        }
        assert!(
            c.len() <= 16,
            "a cache never holds more than 2 * cache_size"
        );
        assert_eq!(pool.available() as usize + c.len(), 64);
        drop(c);
        assert_eq!(pool.available(), 64);
    }

    #[test]
    fn bulk_put_and_get_keep_every_index() {
        let pool = small(256);
        let mut c = pool.cache();
        let mut taken = Vec::new();
        for _ in 0..25 {
            c.get_bulk(5, |idx| {
                assert!(idx.len() >= 5);
                taken.extend_from_slice(&idx[idx.len() - 5..]);
                5
            });
            assert!(c.len() <= 16, "at most 2 * cache_size cached");
        }
        let before = c.len();
        c.get_bulk(5, |_| 0);
        assert_eq!(c.len(), before, "nothing used, nothing taken");
        let mut seen = taken.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 125, "no index handed out twice");
        assert_eq!(c.len() + pool.available() as usize, 256 - 125);
        c.put_slice(&taken);
        assert!(c.len() <= 16, "{}", c.len());
        assert_eq!(c.len() + pool.available() as usize, 256);
        drop(c);
        assert_eq!(pool.available(), 256);
    }
}
