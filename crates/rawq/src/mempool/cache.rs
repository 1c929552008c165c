//! The stacks in front of the shared one: a queue's own [`PoolCache`], and the calling thread's
//! caches that a dropped [`Packet`] returns its buffer to.

use std::cell::RefCell;
use std::mem::{ManuallyDrop, MaybeUninit};

use super::pool::Mempool;
use super::Shared;
use crate::error::{Error, Result};
use crate::packet::{layout, Packet};

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
    // A fresh packet's 64 bytes (`fresh_template`), which `alloc_bulk` copies.
    tmpl: Template,
}

impl PoolCache {
    pub(super) fn new(pool: Mempool) -> PoolCache {
        let mut c = PoolCache::local(pool.shared());
        c._pool = Some(pool);
        c
    }

    /// A cache holding no pool handle (the thread-local one: see `LocalCaches`).
    pub(super) fn local(shared: &'static Shared) -> PoolCache {
        let size = shared.cache_size as usize;
        PoolCache {
            shared,
            stack: Vec::with_capacity(2 * size + 64),
            size,
            _pool: None,
            tmpl: fresh_template(shared),
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
    #[inline]
    pub fn alloc_bulk(&mut self, out: &mut Vec<Packet>, n: usize) -> Result<()> {
        // The common case, a cache holding a burst, passes one comparison; `ensure`'s refill
        // (and the error) stays out of line.
        if self.stack.len() < n {
            self.refill_for(n)?;
        }
        let from = self.stack.len() - n;
        push_fresh(out, &self.stack[from..], &self.tmpl);
        self.stack.truncate(from);
        Ok(())
    }

    /// `alloc_bulk`'s slow path: the cache holds fewer than `n`.
    #[cold]
    #[inline(never)]
    fn refill_for(&mut self, n: usize) -> Result<()> {
        if self.ensure(n) {
            Ok(())
        } else {
            Err(Error::PoolExhausted {
                capacity: self.shared.count,
            })
        }
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

// `push_fresh` copies a template packet as 64 bytes and then writes the buffer index.
const _: () = assert!(std::mem::size_of::<Packet>() == 64 && layout::IDX + 4 <= 64);

/// The bytes of a packet handle (`MaybeUninit`: they may hold padding).
type Template = MaybeUninit<[u64; 8]>;

/// The 64 bytes of a fresh packet of pool `s` (its headroom, no data, one segment, no offload
/// request, no metadata) with a placeholder buffer index, for `push_fresh`. Kept in the cache,
/// not rebuilt a burst: a copy from memory the compiler cannot see through is stored as four
/// 16-byte words, where the handle's narrow fields (and `TxOffload`'s `None`s, which leave
/// gaps no store may cover) took ten stores a packet.
#[allow(unsafe_code)]
fn fresh_template(s: &'static Shared) -> Template {
    // Never dropped: its buffer index is a placeholder.
    let tmpl = ManuallyDrop::new(Packet::from_raw_parts(s, 0, s.headroom(), 0));
    // SAFETY: `tmpl` is a live `Packet`: 64 readable bytes, read as `MaybeUninit`.
    unsafe { std::ptr::read(&*tmpl as *const Packet as *const Template) }
}

/// Appends a fresh packet for each of `idx`, last first, to `out`: a copy of `tmpl` (from
/// `fresh_template` of the pool the indices belong to) with the buffer index written.
#[allow(unsafe_code)]
#[inline(always)]
fn push_fresh(out: &mut Vec<Packet>, idx: &[u32], tmpl: &Template) {
    out.reserve(idx.len());
    let len = out.len();
    // The template in four 16-byte registers, loaded once: a plain copy of `*tmpl` is read
    // again from memory for every packet (the stores into `out` might, for all the compiler
    // knows, change it).
    #[cfg(target_arch = "x86_64")]
    let t = {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128};
        let p = tmpl.as_ptr() as *const __m128i;
        // SAFETY: `tmpl` is 64 readable bytes; SSE2 is part of x86_64.
        unsafe {
            [
                _mm_loadu_si128(p),
                _mm_loadu_si128(p.add(1)),
                _mm_loadu_si128(p.add(2)),
                _mm_loadu_si128(p.add(3)),
            ]
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let t = *tmpl;
    // SAFETY: `reserve` made room for `idx.len()` packets after `len`: `dst..end` are spare
    // slots of `out` (in or one past its allocation), and `src` walks `idx` from its end.
    unsafe {
        let mut dst = out.as_mut_ptr().add(len) as *mut u8;
        let end = dst.add(idx.len() * std::mem::size_of::<Packet>());
        let mut src = idx.as_ptr().add(idx.len());
        while dst != end {
            src = src.sub(1);
            // The template's bytes (a valid `Packet` of the indices' pool) go in whole, then
            // buffer `*src` over its placeholder at the `repr(C)` handle's index field
            // (`layout::IDX`, a `u32`): the packet owns that buffer, which the caller took off
            // its free stack and hands over here.
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::x86_64::{__m128i, _mm_storeu_si128};
                let d = dst as *mut __m128i;
                _mm_storeu_si128(d, t[0]);
                _mm_storeu_si128(d.add(1), t[1]);
                _mm_storeu_si128(d.add(2), t[2]);
                _mm_storeu_si128(d.add(3), t[3]);
            }
            #[cfg(not(target_arch = "x86_64"))]
            std::ptr::write_unaligned(dst as *mut Template, t);
            std::ptr::write_unaligned(dst.add(layout::IDX) as *mut u32, *src);
            dst = dst.add(std::mem::size_of::<Packet>());
        }
        // The first `idx.len()` spare slots now hold valid packets.
        out.set_len(len + idx.len());
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
                self.caches.push(PoolCache::local(s));
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
