//! The four AF_XDP rings as typed producer / consumer views over the kernel's mmapped memory.
//!
//! Each ring is `[producer u32][consumer u32][flags u32][descriptors ...]` at the offsets the
//! kernel reports through `getsockopt(XDP_MMAP_OFFSETS)`. Indices are free-running `u32`s; the
//! slot is `index & (size - 1)`.
//!
//! Memory ordering (the kernel's side is in `net/xdp/xsk_queue.h`):
//! * a **producer** writes descriptors, then publishes them with a *release* store of the
//!   producer index; it learns about free slots with an *acquire* load of the consumer index;
//! * a **consumer** reads the producer index with an *acquire* load, then reads descriptors, and
//!   returns the slots with a *release* store of the consumer index.
//!
//! Both sides keep a cached copy of the other side's index and touch the shared one only when the
//! cache says there is not enough, so a burst costs one shared load and one shared store.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MmapOffsets {
    pub rx: RingOffset,
    pub tx: RingOffset,
    pub fr: RingOffset,
    pub cr: RingOffset,
}

/// `XDP_RING_NEED_WAKEUP`: the kernel side sleeps until it is kicked (sendto / recvfrom / poll).
const RING_NEED_WAKEUP: u32 = 1;

/// `struct xdp_desc`: one rx or tx descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    /// Offset of the frame's first byte in the UMEM.
    pub addr: u64,
    /// Frame length.
    pub len: u32,
    /// Flags (`XDP_PKT_CONTD` for multi-buffer; 0 here).
    pub options: u32,
}

const _: () = assert!(std::mem::size_of::<XdpDesc>() == 16);

/// An mmapped ring.
pub(crate) struct RingMap {
    base: *mut u8,
    len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    size: u32,
    /// False for a second view of another map's memory (tests only): not unmapped on drop.
    owned: bool,
}

// SAFETY: the mapping is owned by this value and only reached through it; the kernel is the only
// other party, and it synchronizes through the atomics.
unsafe impl Send for RingMap {}

impl RingMap {
    /// Maps `size` entries of `T` of the ring at page offset `pgoff` of socket `fd`.
    pub(crate) fn map<T>(
        fd: i32,
        off: &RingOffset,
        size: u32,
        pgoff: libc::off_t,
        what: &'static str,
    ) -> Result<RingMap> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: a fresh shared mapping of the socket's ring; the kernel validates the offset and
        // length, and we check the result.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os(what));
        }
        let base = p as *mut u8;
        // The offsets come from the kernel and lie inside the mapping (checked by its mmap).
        Ok(RingMap {
            base,
            len,
            producer: base.wrapping_add(off.producer as usize) as *const AtomicU32,
            consumer: base.wrapping_add(off.consumer as usize) as *const AtomicU32,
            flags: base.wrapping_add(off.flags as usize) as *const AtomicU32,
            desc: base.wrapping_add(off.desc as usize),
            size,
            owned: true,
        })
    }

    /// An anonymous ring of `size` entries of `T` whose indices start at `start`, and a second,
    /// non-owning view of it: one side plays the kernel in unit tests.
    #[cfg(test)]
    pub(crate) fn test_pair<T>(size: u32, start: u32) -> (RingMap, RingMap) {
        let off = RingOffset {
            producer: 0,
            consumer: 64,
            flags: 128,
            desc: 192,
        };
        // SAFETY: a fresh anonymous mapping, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                192 + size as usize * std::mem::size_of::<T>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as *mut u8;
        let len = 192 + size as usize * std::mem::size_of::<T>();
        let mk = |owned| RingMap {
            base,
            len,
            producer: base.wrapping_add(off.producer as usize) as *const AtomicU32,
            consumer: base.wrapping_add(off.consumer as usize) as *const AtomicU32,
            flags: base.wrapping_add(off.flags as usize) as *const AtomicU32,
            desc: base.wrapping_add(off.desc as usize),
            size,
            owned,
        };
        let a = mk(true);
        a.producer().store(start, Ordering::Relaxed);
        a.consumer().store(start, Ordering::Relaxed);
        (a, mk(false))
    }

    #[inline]
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping at a 4-byte aligned offset the kernel gave us;
        // shared with the kernel only through atomic accesses.
        unsafe { &*self.producer }
    }

    #[inline]
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { &*self.consumer }
    }

    #[inline]
    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { &*self.flags }
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: unmaps exactly the mapping made in `map`; no reference into it outlives `self`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Entry types a ring can carry.
pub(crate) trait Entry: Copy {}
impl Entry for u64 {}
impl Entry for XdpDesc {}

/// The user-space producer side of a ring (fill, tx).
pub(crate) struct Producer<T: Entry> {
    map: RingMap,
    mask: u32,
    cached_prod: u32,
    cached_cons: u32,
    _t: PhantomData<T>,
}

impl<T: Entry> Producer<T> {
    pub(crate) fn new(map: RingMap) -> Producer<T> {
        let mask = map.size - 1;
        let prod = map.producer().load(Ordering::Relaxed);
        let cons = map.consumer().load(Ordering::Acquire);
        Producer {
            mask,
            cached_prod: prod,
            // A producer may run `size` ahead of the consumer.
            cached_cons: cons.wrapping_add(map.size),
            map,
            _t: PhantomData,
        }
    }

    /// Free slots, refreshing the consumer index (acquire) only if fewer than `want` are known.
    #[inline]
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = self
            .map
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.map.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Writes entry `i` of the batch being produced (`i < free()`); published by `submit`.
    #[inline]
    pub(crate) fn write(&mut self, i: u32, v: T) {
        let slot = (self.cached_prod.wrapping_add(i) & self.mask) as usize;
        // SAFETY: `slot < size`, so the entry lies inside the descriptor area of the mapping; the
        // slot is free (between the consumer and producer + free), so the kernel does not read it
        // until we publish it.
        unsafe {
            (self.map.desc as *mut T).add(slot).write(v);
        }
    }

    /// Publishes `n` written entries (release store of the producer index).
    #[inline]
    pub(crate) fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.map
            .producer()
            .store(self.cached_prod, Ordering::Release);
    }

    /// Entries published but not yet consumed by the kernel.
    #[inline]
    pub(crate) fn outstanding(&self) -> u32 {
        self.cached_prod
            .wrapping_sub(self.map.consumer().load(Ordering::Acquire))
    }

    /// True if the kernel asks to be kicked.
    #[inline]
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.map.flags().load(Ordering::Relaxed) & RING_NEED_WAKEUP != 0
    }
}

/// The user-space consumer side of a ring (rx, completion).
pub(crate) struct Consumer<T: Entry> {
    map: RingMap,
    mask: u32,
    cached_prod: u32,
    cached_cons: u32,
    _t: PhantomData<T>,
}

impl<T: Entry> Consumer<T> {
    pub(crate) fn new(map: RingMap) -> Consumer<T> {
        let mask = map.size - 1;
        let cons = map.consumer().load(Ordering::Relaxed);
        Consumer {
            mask,
            cached_prod: cons,
            cached_cons: cons,
            map,
            _t: PhantomData,
        }
    }

    /// Entries ready, refreshing the producer index (acquire) only if fewer than `want` are
    /// known. Returns at most `want`.
    #[inline]
    pub(crate) fn peek(&mut self, want: u32) -> u32 {
        let mut avail = self.cached_prod.wrapping_sub(self.cached_cons);
        if avail < want {
            self.cached_prod = self.map.producer().load(Ordering::Acquire);
            avail = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        avail.min(want)
    }

    /// Reads entry `i` of the peeked batch (`i < peek()`).
    #[inline]
    pub(crate) fn read(&self, i: u32) -> T {
        let slot = (self.cached_cons.wrapping_add(i) & self.mask) as usize;
        // SAFETY: `slot < size`, inside the mapping; the kernel published this entry (acquire
        // load of the producer) and does not touch it until we release it.
        unsafe { (self.map.desc as *const T).add(slot).read() }
    }

    /// Returns `n` entries to the kernel (release store of the consumer index).
    #[inline]
    pub(crate) fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.map
            .consumer()
            .store(self.cached_cons, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_and_consumer_agree_across_index_wraparound() {
        let (a, b) = RingMap::test_pair::<XdpDesc>(8, u32::MAX - 5);
        let mut prod = Producer::<XdpDesc>::new(a);
        let mut cons = Consumer::<XdpDesc>::new(b);
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..50u32 {
            let want = round % 7 + 1;
            let free = prod.free(want);
            let k = free.min(want);
            for i in 0..k {
                prod.write(
                    i,
                    XdpDesc {
                        addr: next_in,
                        len: next_in as u32,
                        options: 0,
                    },
                );
                next_in += 1;
            }
            prod.submit(k);
            assert_eq!(prod.outstanding(), (next_in - next_out) as u32);
            let take = round % 5 + 1;
            let n = cons.peek(take);
            assert!(n <= take);
            for i in 0..n {
                let d = cons.read(i);
                assert_eq!(d.addr, next_out, "in order, none lost or repeated");
                assert_eq!(d.len, next_out as u32);
                next_out += 1;
            }
            cons.release(n);
            assert!(
                next_in - next_out <= 8,
                "never more than the ring size in flight"
            );
        }
        assert!(next_out > 100, "indices wrapped past u32::MAX: {next_out}");
        // Full ring: the producer sees no room until the consumer releases.
        let free = prod.free(8);
        for i in 0..free {
            prod.write(i, XdpDesc::default());
        }
        prod.submit(free);
        assert_eq!(prod.free(1), 0);
        let n = cons.peek(8);
        assert_eq!(n, 8, "a full ring holds exactly its size");
        cons.release(n);
        assert_eq!(prod.free(1), 8);
        assert!(!prod.needs_wakeup());
    }
}
