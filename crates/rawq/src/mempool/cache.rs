//! A queue's own cache in front of a pool's shared stack: [`PoolCache`], a buffer-index cache
//! (`buf::BufCache`) holding a handle that keeps the pool alive, and [`Mempool::cache`], which
//! makes one.

use super::pool::Mempool;
use crate::buf::BufCache;
use crate::error::Result;
use crate::packet::{fresh_template, Packet};

/// A private stack of free buffer indices in front of a pool's shared stack.
///
/// Holds at most `2 * cache_size` indices; refills and flushes move `cache_size` indices under
/// one lock of the shared stack. Dropping the cache returns everything it holds.
pub struct PoolCache {
    // Dropped first (fields drop in order): its indices go home while `_pool` still keeps the
    // pool alive.
    buf: BufCache,
    // Keeps the pool alive while the cache holds indices (the thread-local caches, plain
    // `BufCache`s, must not: see `packet::local`).
    _pool: Mempool,
}

impl Mempool {
    /// A new private cache in front of this pool, for one queue's hot path.
    pub fn cache(&self) -> PoolCache {
        let s = self.shared();
        PoolCache {
            buf: BufCache::new(s, fresh_template(s)),
            _pool: self.clone(),
        }
    }
}

impl PoolCache {
    /// Takes one free buffer index, refilling from the shared stack when empty.
    #[inline]
    pub fn get(&mut self) -> Option<u32> {
        self.buf.get()
    }

    /// Lends the cache's top indices to `take`, which uses some of them **from the end** of the
    /// slice it is given and returns how many; those leave the cache. The slice holds at least
    /// `min(n, cache_size)` indices unless the pool runs dry (one refill from the shared stack,
    /// no allocation). A driver's refill batch: one length check instead of one per buffer.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline]
    pub(crate) fn get_bulk(&mut self, n: usize, take: impl FnOnce(&[u32]) -> usize) {
        self.buf.get_bulk(n, take)
    }

    /// Makes sure at least `n` indices are cached (taking more from the shared stack if needed).
    /// Returns false if the pool does not have that many free.
    pub fn ensure(&mut self, n: usize) -> bool {
        self.buf.ensure(n)
    }

    /// Returns one index; flushes `cache_size` indices to the shared stack when full.
    #[inline]
    pub fn put(&mut self, idx: u32) {
        self.buf.put(idx)
    }

    /// Returns several indices at once (a driver's completion batch): one copy instead of a
    /// push per index. When they do not all fit (the cache holds at most `2 * cache_size`), the
    /// cache keeps `cache_size` and the rest goes to the shared stack under one lock.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline]
    pub(crate) fn put_slice(&mut self, idx: &[u32]) {
        self.buf.put_slice(idx)
    }

    /// Allocates a packet.
    #[inline]
    pub fn alloc(&mut self) -> Option<Packet> {
        self.buf
            .get()
            .map(|i| Packet::from_free_index(self.buf.shared, i))
    }

    /// Appends `n` fresh packets to `out`, all or none (refilling from the shared stack only
    /// when the cache holds fewer than `n`).
    ///
    /// # Errors
    /// [`Error::PoolExhausted`](crate::Error::PoolExhausted) when fewer than `n` buffers are
    /// free; nothing is appended then.
    #[inline]
    pub fn alloc_bulk(&mut self, out: &mut Vec<Packet>, n: usize) -> Result<()> {
        self.buf.alloc_bulk(out, n)
    }

    /// Frees a packet into this cache (rather than the thread-local cache a plain drop uses).
    #[inline]
    pub fn free(&mut self, pkt: Packet) {
        if pkt.is_single() {
            self.buf.put(pkt.into_raw());
        } else {
            for idx in pkt.into_buffer_indices() {
                self.buf.put(idx);
            }
        }
    }

    /// Number of indices held.
    pub fn len(&self) -> usize {
        self.buf.stack.len()
    }

    /// True if the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.buf.stack.is_empty()
    }

    /// Returns everything to the shared stack.
    pub fn flush(&mut self) {
        self.buf.flush();
    }

    /// Start address of buffer `idx` (for backends posting it to a device).
    #[inline]
    pub fn buf_ptr(&self, idx: u32) -> *mut u8 {
        self.buf.shared.buf_ptr(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
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
    fn alloc_bulk_hands_out_fresh_packets_of_the_cached_buffers() {
        let pool = small(64);
        let mut c = pool.cache();
        let mut out = vec![pool.alloc().unwrap()];
        out[0].set_len(20).unwrap();
        c.alloc_bulk(&mut out, 12).unwrap();
        assert_eq!(out.len(), 13, "appended after the packet already there");
        assert_eq!(out[0].len(), 20, "which is left as it was");
        // A packet allocated one at a time, field by field, to compare with.
        let fresh = pool.alloc().unwrap();
        let off = fresh.data_addr() - c.buf_ptr(fresh.buffer_index()) as u64;
        for (k, p) in out[1..].iter().enumerate() {
            // The thread-local cache's refill (for `out[0]`) took buffers 0..8; this cache's
            // took the next lowest, handed out in order.
            let i = 8 + k as u32;
            assert_eq!(p.buffer_index(), i);
            assert_eq!(p.len(), 0);
            assert_eq!(p.segment_count(), 1);
            assert_eq!(p.headroom(), fresh.headroom());
            assert_eq!(p.tailroom(), fresh.tailroom());
            assert_eq!(p.data_addr(), c.buf_ptr(i) as u64 + off);
            assert_eq!(p.offload, crate::packet::TxOffload::default());
            assert_eq!(p.meta.rss_hash(), 0);
            assert_eq!(p.meta.flow_tag(), 0);
            assert_eq!(p.meta.vlan_tci(), None);
            assert_eq!(p.meta.hw_timestamp(), None);
            assert_eq!(p.meta.kernel_rx_ns(), None);
        }
        drop(fresh);
        // Too many: nothing appended, an error that says so.
        let e = c.alloc_bulk(&mut out, 64).unwrap_err();
        assert!(matches!(e, Error::PoolExhausted { capacity: 64 }), "{e}");
        assert_eq!(out.len(), 13);
        // Every packet owns its buffer: dropped, they all come home.
        drop(out);
        pool.flush_local_cache();
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
