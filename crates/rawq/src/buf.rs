//! A pool's buffers as packets and queues see them: where they are ([`Shared`], which every
//! packet points at), the shared stack of free buffer indices, and the private stacks in front
//! of it ([`BufCache`]).
//!
//! Below both `packet` (a packet returns its buffer here) and `mempool` (which maps the region
//! and makes the `Shared` block): neither needs the other for this. A [`BufCache`] deals in
//! buffer indices; `packet::fresh` adds the half that hands out packets, and
//! [`PoolCache`](crate::PoolCache) is one with a pool handle.

use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use memmap2::MmapMut;

/// Bytes at the start of every buffer reserved for rawq's own per-buffer header (segment chaining).
pub const BUF_HEADER: usize = 8;

/// The part of a pool that packets point at. Never moves once created.
pub(crate) struct Shared {
    pub(crate) base: NonNull<u8>,
    pub(crate) len: usize,
    pub(crate) buf_size: u32,
    pub(crate) buf_shift: u32,
    pub(crate) count: u32,
    pub(crate) headroom: u16,
    pub(crate) cache_size: u32,
    pub(crate) id: u64,
    pub(crate) free: Mutex<Vec<u32>>,
    pub(crate) map: Mutex<Option<MmapMut>>,
}

// SAFETY: `Shared` owns the mapping; `base` is only dereferenced through buffers whose ownership
// is tracked by the free lists (one owner per buffer), and the free list is behind a mutex.
#[allow(unsafe_code)]
unsafe impl Send for Shared {}
// SAFETY: see above; all shared mutable state is behind mutexes.
#[allow(unsafe_code)]
unsafe impl Sync for Shared {}

impl Shared {
    pub(crate) fn lock_free(&self) -> MutexGuard<'_, Vec<u32>> {
        // A panic while holding this lock cannot leave the Vec inconsistent (push/pop only).
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves up to `n` indices from the shared stack into `out`. Returns how many.
    fn take_bulk(&self, out: &mut Vec<u32>, n: usize) -> usize {
        let mut free = self.lock_free();
        let k = n.min(free.len());
        let from = free.len() - k;
        append_idx(out, &free[from..]);
        free.truncate(from);
        k
    }

    /// Moves `from[keep..]` into the shared stack.
    pub(crate) fn give_bulk(&self, from: &mut Vec<u32>, keep: usize) {
        if from.len() <= keep {
            // Nothing to move. Returning here matters: a stale, empty thread-local entry may
            // name a pool that no longer exists, and must not touch it.
            return;
        }
        let mut free = self.lock_free();
        append_idx(&mut free, &from[keep..]);
        from.truncate(keep);
        debug_assert!(free.len() <= self.count as usize);
    }

    /// Moves `from[keep..]` and all of `more` into the shared stack, under one lock.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    fn give_bulk_and(&self, from: &mut Vec<u32>, keep: usize, more: &[u32]) {
        if from.len() <= keep && more.is_empty() {
            return;
        }
        let keep = keep.min(from.len());
        let mut free = self.lock_free();
        append_idx(&mut free, &from[keep..]);
        from.truncate(keep);
        append_idx(&mut free, more);
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
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Unmaps the region (its owner, `mempool::pool`'s `Owner`, frees this block only with
        // every buffer home, after removing this thread's cache entry for it).
        if let Ok(mut m) = self.map.lock() {
            m.take();
        }
    }
}

/// Indices [`copy_idx`] moves per step of its main loop: two 16-byte moves.
const IDX_CHUNK: usize = 8;

/// From how many indices [`append_idx`] copies with [`copy_idx`] instead of the C library's
/// `memcpy`: 2112 bytes, glibc's `rep movsb` threshold on a CPU with fast short `rep movsb`
/// (this project's VM, glibc 2.36; 4096 bytes without it). Below it `memcpy` is a loop of 32-byte
/// vector moves, cheaper than [`copy_idx`]'s 16-byte ones; from it up, `rep movsb`.
const IDX_LOOP_FROM: usize = 2112 / 4;

/// Appends `src` to `dst` (the bulk moves between a cache and the shared stack, which may be
/// thousands of indices when a device completes a whole ring at once): a short slice with
/// `extend_from_slice`, a long one with [`copy_idx`].
#[inline]
fn append_idx(dst: &mut Vec<u32>, src: &[u32]) {
    if src.len() < IDX_LOOP_FROM {
        dst.extend_from_slice(src);
    } else {
        append_idx_long(dst, src);
    }
}

/// [`append_idx`] of a long slice (out of line: the rare case, each call thousands of indices).
#[inline(never)]
fn append_idx_long(dst: &mut Vec<u32>, src: &[u32]) {
    let len = dst.len();
    dst.reserve(src.len());
    let Some(spare) = dst.spare_capacity_mut().get_mut(..src.len()) else {
        return; // unreachable: `reserve` made room for `src.len()` more
    };
    copy_idx(spare, src);
    // SAFETY: `copy_idx` initialised all `src.len()` slots of `spare`, the first `src.len()`
    // of the spare capacity, which `reserve` guaranteed; so the first `len + src.len()`
    // elements are initialised and within the capacity.
    #[allow(unsafe_code)]
    unsafe {
        dst.set_len(len + src.len())
    };
}

/// Copies `src` into `dst` (the same length), [`IDX_CHUNK`] indices a step as fixed-size moves,
/// the tail as pieces of 4, 2 and 1. Not `copy_from_slice`: that is a call to the C library's
/// `memcpy`, which for a few KiB uses `rep movsb`, which callgrind counts once a byte (4
/// instructions an index, against about 0.6 here: 8 16-byte loads, 8 stores and 3 loop
/// instructions for 32 indices). The chunks are 4-index halves so that no single store spans
/// the loop's stride, which LLVM's loop-idiom pass would turn back into one `memcpy` call.
#[inline]
fn copy_idx(dst: &mut [MaybeUninit<u32>], src: &[u32]) {
    let mut d = dst.chunks_exact_mut(IDX_CHUNK);
    let mut s = src.chunks_exact(IDX_CHUNK);
    for (dc, sc) in (&mut d).zip(&mut s) {
        let (dl, dh) = dc.split_at_mut(IDX_CHUNK / 2);
        let (sl, sh) = sc.split_at(IDX_CHUNK / 2);
        copy4(dl, sl);
        copy4(dh, sh);
    }
    let (dt, st) = (d.into_remainder(), s.remainder());
    let n = st.len().min(dt.len());
    let mut at = 0;
    if n & 4 != 0 {
        copy4(&mut dt[at..at + 4], &st[at..at + 4]);
        at += 4;
    }
    if n & 2 != 0 {
        dt[at].write(st[at]);
        dt[at + 1].write(st[at + 1]);
        at += 2;
    }
    if n & 1 != 0 {
        dt[at].write(st[at]);
    }
}

/// Four indices from `s` into `d` (both of length 4) as one 16-byte load and store.
#[inline(always)]
fn copy4(d: &mut [MaybeUninit<u32>], s: &[u32]) {
    if let (Ok(d), Ok(s)) = (
        <&mut [MaybeUninit<u32>; 4]>::try_from(d),
        <&[u32; 4]>::try_from(s),
    ) {
        *d = [
            MaybeUninit::new(s[0]),
            MaybeUninit::new(s[1]),
            MaybeUninit::new(s[2]),
            MaybeUninit::new(s[3]),
        ];
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

/// The bytes of a fresh packet handle of a cache's pool (`MaybeUninit`: they may hold padding),
/// which `packet::fresh` makes and copies.
pub(crate) type Template = MaybeUninit<[u64; 8]>;

/// A private stack of free buffer indices in front of a pool's shared stack: a queue's own (in
/// a [`PoolCache`](crate::PoolCache)) or one of the calling thread's (`packet::local`).
///
/// Holds at most `2 * cache_size` indices; refills and flushes move `cache_size` indices under
/// one lock of the shared stack. Dropping the cache returns everything it holds.
pub(crate) struct BufCache {
    pub(crate) shared: &'static Shared,
    pub(crate) stack: Vec<u32>,
    size: usize,
    /// A fresh packet's 64 bytes (`packet::fresh_template`), which `alloc_bulk` copies.
    pub(crate) tmpl: Template,
}

impl BufCache {
    /// An empty cache in front of `shared`, with its pool's fresh-packet template.
    pub(crate) fn new(shared: &'static Shared, tmpl: Template) -> BufCache {
        let size = shared.cache_size as usize;
        BufCache {
            shared,
            stack: Vec::with_capacity(2 * size + 64),
            size,
            tmpl,
        }
    }

    /// Takes one free buffer index, refilling from the shared stack when empty.
    #[inline]
    pub(crate) fn get(&mut self) -> Option<u32> {
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
    pub(crate) fn ensure(&mut self, n: usize) -> bool {
        if self.stack.len() >= n {
            return true;
        }
        let want = (n - self.stack.len()).max(self.size);
        self.shared.take_bulk(&mut self.stack, want);
        self.stack.len() >= n
    }

    /// Returns one index; flushes `cache_size` indices to the shared stack when full.
    #[inline]
    pub(crate) fn put(&mut self, idx: u32) {
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
        self.put_slice_over(idx);
    }

    /// [`BufCache::put_slice`] when the indices do not all fit (out of line: the copy into the
    /// cache above is the common case, inlined into a driver's completion path).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline(never)]
    fn put_slice_over(&mut self, idx: &[u32]) {
        let fill = self.size.saturating_sub(self.stack.len()).min(idx.len());
        append_idx(&mut self.stack, &idx[..fill]);
        let keep = self.stack.len().min(self.size);
        self.shared
            .give_bulk_and(&mut self.stack, keep, &idx[fill..]);
    }

    /// Returns everything to the shared stack.
    pub(crate) fn flush(&mut self) {
        self.shared.give_bulk(&mut self.stack, 0);
    }
}

impl Drop for BufCache {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `append_idx` appends every index in order at every length around its chunk, its tail
    /// pieces and its switch from `extend_from_slice` to `copy_idx`, onto empty and non-empty
    /// stacks, with and without spare capacity.
    #[test]
    fn append_idx_copies_every_length() {
        let src: Vec<u32> = (0..5000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let lens = (0..80)
            .chain(IDX_LOOP_FROM - 20..IDX_LOOP_FROM + 80)
            .chain([4096, 4099, 4999, 5000]);
        for n in lens {
            for pre in [0usize, 1, 3, 64] {
                for cap in [0usize, 8192] {
                    let mut dst: Vec<u32> = Vec::with_capacity(cap);
                    dst.extend((0..pre as u32).map(|i| !i));
                    append_idx(&mut dst, &src[5000 - n..]);
                    assert_eq!(dst.len(), pre + n, "n {n} pre {pre} cap {cap}");
                    assert!(dst[..pre]
                        .iter()
                        .enumerate()
                        .all(|(i, &v)| v == !(i as u32)));
                    assert_eq!(&dst[pre..], &src[5000 - n..], "n {n} pre {pre} cap {cap}");
                }
            }
        }
    }
}
