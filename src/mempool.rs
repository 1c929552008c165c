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
//! * Dropping a [`Packet`] returns its buffer to a thread-local `PoolCache` of the
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

use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use memmap2::{MmapMut, MmapOptions};

use crate::error::{Error, Result};
use crate::packet::Packet;

/// Size of a huge page used for the region, when huge pages are used.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Bytes at the start of every buffer reserved for rawq's own per-buffer header (segment chaining).
pub const BUF_HEADER: usize = 8;

/// Whether to put the region on huge pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Use 2 MiB huge pages when the system has enough reserved, plain pages otherwise (default).
    #[default]
    Try,
    /// Fail unless 2 MiB huge pages can be had.
    Require,
    /// Use plain anonymous pages.
    Never,
}

/// What the region ended up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// 2 MiB huge pages (`MAP_HUGETLB`).
    HugePages2M,
    /// Plain anonymous 4 KiB pages.
    Anonymous,
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemoryKind::HugePages2M => "2 MiB huge pages",
            MemoryKind::Anonymous => "anonymous 4 KiB pages (no huge pages reserved)",
        })
    }
}

/// How to build a [`Mempool`].
#[derive(Clone, Debug)]
pub struct MempoolConfig {
    /// Number of buffers.
    pub buffers: u32,
    /// Size of each buffer in bytes, including headroom. A power of two from 512 to 65536
    /// (AF_XDP needs 2048 or 4096). Default 2048.
    pub buf_size: u32,
    /// Bytes reserved in front of the packet data (for prepending headers). Includes the
    /// [`BUF_HEADER`] bytes rawq keeps for itself. Default 128.
    pub headroom: u16,
    /// Huge-page policy. Default [`HugePages::Try`].
    pub huge_pages: HugePages,
    /// Indices moved between a cache and the shared stack at once. Default 64.
    pub cache_size: u32,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig {
            buffers: 4096,
            buf_size: 2048,
            headroom: 128,
            huge_pages: HugePages::Try,
            cache_size: 64,
        }
    }
}

impl MempoolConfig {
    /// A default configuration with `buffers` buffers.
    pub fn with_buffers(buffers: u32) -> Self {
        MempoolConfig {
            buffers,
            ..Default::default()
        }
    }

    fn validate(&self) -> Result<()> {
        if self.buffers == 0 || self.buffers > (1 << 24) {
            return Err(Error::Config(format!(
                "MempoolConfig::buffers = {}: must be 1..=16777216",
                self.buffers
            )));
        }
        if !self.buf_size.is_power_of_two() || !(512..=65536).contains(&self.buf_size) {
            return Err(Error::Config(format!(
                "MempoolConfig::buf_size = {}: must be a power of two from 512 to 65536",
                self.buf_size
            )));
        }
        if (self.headroom as usize) < BUF_HEADER || self.headroom as u32 + 64 > self.buf_size {
            return Err(Error::Config(format!(
                "MempoolConfig::headroom = {}: must be at least {BUF_HEADER} and leave 64 bytes of \
                 a {}-byte buffer",
                self.headroom, self.buf_size
            )));
        }
        if self.cache_size == 0 || self.cache_size > 4096 {
            return Err(Error::Config(format!(
                "MempoolConfig::cache_size = {}: must be 1..=4096",
                self.cache_size
            )));
        }
        Ok(())
    }
}

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

/// Owner of the `Shared` block: frees it when the last `Mempool` handle goes, unless buffers are
/// still out.
struct Owner {
    shared: &'static Shared,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // Buffers parked in this thread's cache are home too.
        let me = self.shared;
        let _ = LOCAL.try_with(|l| {
            if let Ok(mut l) = l.try_borrow_mut() {
                if let Some(c) = l.caches.iter_mut().find(|c| std::ptr::eq(c.shared, me)) {
                    me.give_bulk(&mut c.stack, 0);
                }
            }
        });
        let all_home = self.shared.lock_free().len() == self.shared.count as usize;
        if all_home {
            #[allow(unsafe_code)]
            // SAFETY: `shared` came from `Box::leak` in `Mempool::new`; every buffer is back in
            // the free stack and every cache holds a `Mempool` handle (so none exists any more),
            // hence no packet or cache can still reach it.
            unsafe {
                drop(Box::from_raw(self.shared as *const Shared as *mut Shared));
            }
        } else {
            // Packets are still out (e.g. held by a thread that outlives the pool). Unmapping
            // would leave them dangling, so the region is leaked instead.
            let out = self.shared.count as usize - self.shared.lock_free().len();
            eprintln!(
                "rawq: pool {} dropped with {out} buffer(s) still in use; its memory is leaked",
                self.shared.id
            );
        }
    }
}

/// A pool of packet buffers in one contiguous region. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Mempool {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.shared();
        f.debug_struct("Mempool")
            .field("id", &s.id)
            .field("buffers", &s.count)
            .field("buf_size", &s.buf_size)
            .field("headroom", &s.headroom)
            .field("memory", &s.kind)
            .finish()
    }
}

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

impl Mempool {
    /// Maps the region and puts every buffer on the free list.
    ///
    /// # Errors
    /// [`Error::Config`] for bad sizes; [`Error::Unsupported`] when huge pages are required but
    /// none are reserved; [`Error::Os`] when the mapping fails.
    pub fn new(cfg: &MempoolConfig) -> Result<Mempool> {
        cfg.validate()?;
        let len = cfg.buffers as usize * cfg.buf_size as usize;
        // The region is prefaulted: asking for more than the machine has would not fail, it
        // would thrash the host.
        if let Some(avail) = mem_available() {
            if len as u64 > avail {
                return Err(Error::Config(format!(
                    "a pool of {} buffers of {} bytes ({} MiB) is more than the available memory \
                     ({} MiB): use fewer queues, smaller rings or fewer buffers",
                    cfg.buffers,
                    cfg.buf_size,
                    len >> 20,
                    avail >> 20
                )));
            }
        }
        let (map, kind) = map_region(len, cfg.huge_pages)?;
        let base = NonNull::new(map.as_ptr() as *mut u8)
            .ok_or_else(|| Error::Config("mapping returned a null pointer".into()))?;
        // Highest index on top of the stack so that allocation starts at buffer 0.
        let free: Vec<u32> = (0..cfg.buffers).rev().collect();
        let shared = Shared {
            base,
            len,
            buf_size: cfg.buf_size,
            buf_shift: cfg.buf_size.trailing_zeros(),
            count: cfg.buffers,
            headroom: cfg.headroom,
            cache_size: cfg.cache_size,
            kind,
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            free: Mutex::new(free),
            map: Mutex::new(Some(map)),
        };
        let shared: &'static Shared = Box::leak(Box::new(shared));
        Ok(Mempool {
            owner: Arc::new(Owner { shared }),
        })
    }

    #[inline]
    pub(crate) fn shared(&self) -> &'static Shared {
        self.owner.shared
    }

    /// Number of buffers in the pool.
    pub fn capacity(&self) -> u32 {
        self.shared().count
    }

    /// Buffers in the shared free stack (not counting those parked in caches).
    pub fn available(&self) -> u32 {
        self.shared().lock_free().len() as u32
    }

    /// Size of each buffer in bytes.
    pub fn buf_size(&self) -> u32 {
        self.shared().buf_size
    }

    /// Headroom in front of packet data in a fresh buffer.
    pub fn headroom(&self) -> u16 {
        self.shared().headroom
    }

    /// What the region is mapped on.
    pub fn memory_kind(&self) -> MemoryKind {
        self.shared().kind
    }

    /// A process-unique id of this pool.
    pub fn id(&self) -> u64 {
        self.shared().id
    }

    /// Start address and length of the region, for registering it with a device (one MR, one
    /// UMEM).
    pub fn region(&self) -> (*mut u8, usize) {
        let s = self.shared();
        (s.base.as_ptr(), s.len)
    }

    /// The index of the buffer that contains `addr`, if it is inside the region.
    pub fn buffer_index(&self, addr: u64) -> Option<u32> {
        let s = self.shared();
        let base = s.base.as_ptr() as u64;
        if addr < base || addr >= base + s.len as u64 {
            return None;
        }
        Some(((addr - base) >> s.buf_shift) as u32)
    }

    /// Allocates one packet from the calling thread's cache.
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when every buffer is in use.
    pub fn alloc(&self) -> Result<Packet> {
        let s = self.shared();
        let idx = LOCAL.with(|l| l.borrow_mut().cache_for(s).get());
        match idx {
            Some(idx) => Ok(Packet::from_free_index(s, idx)),
            None => Err(Error::PoolExhausted { capacity: s.count }),
        }
    }

    /// Appends `n` fresh packets to `out`, all or none.
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when fewer than `n` buffers are free; nothing is appended then.
    pub fn alloc_bulk(&self, out: &mut Vec<Packet>, n: usize) -> Result<()> {
        let s = self.shared();
        LOCAL.with(|l| {
            let mut l = l.borrow_mut();
            let cache = l.cache_for(s);
            if !cache.ensure(n) {
                return Err(Error::PoolExhausted { capacity: s.count });
            }
            out.reserve(n);
            for _ in 0..n {
                // `ensure` guaranteed n entries.
                if let Some(idx) = cache.stack.pop() {
                    out.push(Packet::from_free_index(s, idx));
                }
            }
            Ok(())
        })
    }

    /// Returns the calling thread's cached buffers of this pool to the shared stack.
    pub fn flush_local_cache(&self) {
        let s = self.shared();
        let _ = LOCAL.try_with(|l| {
            let mut l = l.borrow_mut();
            if let Some(pos) = l.caches.iter().position(|c| std::ptr::eq(c.shared, s)) {
                let c = &mut l.caches[pos];
                s.give_bulk(&mut c.stack, 0);
            }
        });
    }

    /// A new private cache in front of this pool, for one queue's hot path.
    pub fn cache(&self) -> PoolCache {
        PoolCache::new(self.clone())
    }
}

/// A private stack of free buffer indices in front of a pool's shared stack.
///
/// Holds at most `2 * cache_size` indices; refills and flushes move `cache_size` indices under
/// one lock of the shared stack. Dropping the cache returns everything it holds.
pub struct PoolCache {
    shared: &'static Shared,
    stack: Vec<u32>,
    size: usize,
    // Keeps the pool alive while the cache holds indices; `None` only inside the thread-local
    // cache, which must not keep pools alive (see `LocalCaches`).
    _pool: Option<Mempool>,
}

impl PoolCache {
    fn new(pool: Mempool) -> PoolCache {
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
struct LocalCaches {
    caches: Vec<PoolCache>,
}

impl LocalCaches {
    #[inline]
    fn cache_for(&mut self, s: &'static Shared) -> &mut PoolCache {
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
    static LOCAL: RefCell<LocalCaches> = const { RefCell::new(LocalCaches { caches: Vec::new() }) };
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

/// `MemAvailable` from /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn map_region(len: usize, policy: HugePages) -> Result<(MmapMut, MemoryKind)> {
    if policy != HugePages::Never {
        let huge_len = len.div_ceil(HUGE_PAGE_SIZE) * HUGE_PAGE_SIZE;
        match MmapOptions::new()
            .len(huge_len)
            .huge(Some(21))
            .populate()
            .map_anon()
        {
            Ok(m) => return Ok((m, MemoryKind::HugePages2M)),
            Err(e) if policy == HugePages::Require => {
                return Err(Error::Unsupported(format!(
                    "2 MiB huge pages required for a {huge_len}-byte pool but mmap(MAP_HUGETLB) \
                     failed ({e}); reserve some with `echo 512 > /proc/sys/vm/nr_hugepages`"
                )))
            }
            Err(_) => {}
        }
    }
    let m = MmapOptions::new()
        .len(len)
        .populate()
        .map_anon()
        .map_err(|e| Error::os("mmap(packet pool)", e))?;
    Ok((m, MemoryKind::Anonymous))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_beyond_the_available_memory_is_refused() {
        // 1 TiB: refused at once with the numbers, not prefaulted (issue 12 item 10).
        let e = Mempool::new(&MempoolConfig {
            buffers: 1 << 24,
            buf_size: 65536,
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("available memory"), "{e}");
    }

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
    fn config_is_validated() {
        for cfg in [
            MempoolConfig::with_buffers(0),
            MempoolConfig {
                buf_size: 3000,
                ..Default::default()
            },
            MempoolConfig {
                headroom: 2040,
                ..Default::default()
            },
            MempoolConfig {
                headroom: 4,
                ..Default::default()
            },
        ] {
            assert!(
                matches!(Mempool::new(&cfg), Err(Error::Config(_))),
                "{cfg:?}"
            );
        }
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
