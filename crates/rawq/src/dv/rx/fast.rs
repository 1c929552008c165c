//! The receive fast path: plain (uncompressed, non-striding) CQEs walked in runs up to the ring
//! end, packets written straight into the caller's spare capacity, optionally reposting each
//! WQE's buffer as it goes.

use super::*;
use crate::packet::layout;

// `run_zip` copies a template packet as 64 bytes: a `Packet` must be exactly that.
const _: () = assert!(std::mem::size_of::<Packet>() == 64);
// `run` copies only bytes 0..24 of its template: the fields it writes per packet (`seg_len`
// from 22, buffer, length, the metadata) must be the rest.
const _: () = assert!(
    layout::SEG_LEN == 22
        && layout::IDX == 24
        && layout::PKT_LEN == 28
        && layout::META == 32
        && std::mem::size_of::<RxMeta>() == 32
);

/// 64 bytes (a template packet's) in four 16-byte registers on x86_64, loaded once and stored
/// whole into each packet: a copy of a `MaybeUninit<[u64; 8]>` was read again from memory for
/// every packet (4 loads more a packet), the stores into `out` being, for all the compiler
/// knows, able to change it.
#[derive(Clone, Copy)]
pub(super) struct Bytes64 {
    #[cfg(target_arch = "x86_64")]
    v: [std::arch::x86_64::__m128i; 4],
    #[cfg(not(target_arch = "x86_64"))]
    v: MaybeUninit<[u64; 8]>,
}

impl Bytes64 {
    /// Reads 64 bytes at `p`.
    ///
    /// # Safety
    /// `p` must be valid for reading 64 bytes (any alignment; padding bytes are fine).
    #[inline(always)]
    pub(super) unsafe fn load(p: *const u8) -> Bytes64 {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128};
            let p = p as *const __m128i;
            // SAFETY: the caller's 64 readable bytes; SSE2 is part of x86_64.
            unsafe {
                Bytes64 {
                    v: [
                        _mm_loadu_si128(p),
                        _mm_loadu_si128(p.add(1)),
                        _mm_loadu_si128(p.add(2)),
                        _mm_loadu_si128(p.add(3)),
                    ],
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: the caller's 64 readable bytes, read as `MaybeUninit`.
        unsafe {
            Bytes64 {
                v: std::ptr::read_unaligned(p as *const MaybeUninit<[u64; 8]>),
            }
        }
    }

    /// Writes the 64 bytes at `d`.
    ///
    /// # Safety
    /// `d` must be valid for writing 64 bytes (any alignment).
    #[inline(always)]
    pub(super) unsafe fn store(self, d: *mut u8) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__m128i, _mm_storeu_si128};
            let d = d as *mut __m128i;
            // SAFETY: the caller's 64 writable bytes; SSE2 is part of x86_64.
            unsafe {
                _mm_storeu_si128(d, self.v[0]);
                _mm_storeu_si128(d.add(1), self.v[1]);
                _mm_storeu_si128(d.add(2), self.v[2]);
                _mm_storeu_si128(d.add(3), self.v[3]);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: the caller's 64 writable bytes.
        unsafe {
            std::ptr::write_unaligned(d as *mut MaybeUninit<[u64; 8]>, self.v)
        }
    }
}

/// The packet metadata of CQE `b`, raw (decoded on access: see [`RxMeta`]), with RSS hash
/// `hash` (host order; a mini-CQE's, or the CQE's own). A compressed session's packets take
/// their title's timestamp, as the kernel's decompression does (mlx5e en_rx.c
/// `mlx5e_decompress_cqe`: the title is copied whole and only the byte count, checksum or hash
/// and WQE counter are replaced per mini-CQE).
#[inline(always)]
pub(super) fn meta_of(b: &[u8; 64], hash: u32) -> RxMeta {
    let mut tail = [0u8; 16];
    tail.copy_from_slice(&b[cqe::field::TIMESTAMP.start..]);
    RxMeta::from_raw(word(b, cqe::field::HDS_IP_EXT), hash.to_be(), tail)
}

/// The 4 bytes of `b` at `at`, as they lie in memory.
#[inline(always)]
fn word(b: &[u8; 64], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The packet metadata of the CQE at `c`, copied raw: three loads (the last one 16 bytes:
/// timestamp, flow tag and the rest of the CQE's tail), no decoding.
///
/// # Safety
/// `c` must point at a 64-byte CQE software owns.
#[inline(always)]
pub(super) unsafe fn meta_at(c: *const u8) -> RxMeta {
    // SAFETY: the caller guarantees 64 readable bytes at `c`; the reads are unaligned-safe.
    unsafe {
        RxMeta::from_raw(
            std::ptr::read_unaligned(c.add(cqe::field::HDS_IP_EXT) as *const u32),
            std::ptr::read_unaligned(c.add(cqe::field::RX_HASH.start) as *const u32),
            std::ptr::read_unaligned(c.add(cqe::field::TIMESTAMP.start) as *const [u8; 16]),
        )
    }
}

/// The loop-invariant state of [`Rx::poll_cyclic_fast`].
pub(super) struct FastRx {
    pub(super) shared: &'static Shared,
    pub(super) geo: BufGeometry,
    pub(super) headroom: u16,
    pub(super) mask: u32,
    pub(super) shift: u32,
    pub(super) seg_room: u32,
    /// The RQ ring (its WQEs are 16 bytes apart when the loop reposts them).
    pub(super) ring: *mut u8,
    /// Where buffer 0's data goes (`buf_ptr(0) + headroom`).
    pub(super) data0: u64,
}

impl FastRx {
    /// Turns the plain CQEs from `cq.ci` on into packets in `out`, with `STEP`-byte CQE slots
    /// and (`ONE`) one buffer per WQE or (`!ONE`) `1 << shift`. Moves `cq.ci`; returns
    /// (packets, bytes).
    ///
    /// `REPOST` (only with `ONE`, on a full ring of 16-byte WQEs): each completed WQE is posted
    /// again at once with a fresh buffer from the end of `fresh` (packet `i` takes
    /// `fresh[fresh.len() - 1 - i]`), so at most `fresh.len()` packets are taken; the caller
    /// moves the RQ producer index and writes the doorbell record. Otherwise `fresh` is unused.
    #[inline(never)]
    pub(super) fn run<const STEP: usize, const ONE: bool, const REPOST: bool>(
        &self,
        cq: &mut Cq,
        out: &mut [MaybeUninit<Packet>],
        bufs: &mut [u32],
        fresh: &[u32],
    ) -> (usize, u64) {
        let out = if REPOST {
            let m = out.len().min(fresh.len());
            &mut out[..m]
        } else {
            out
        };
        let size = self.geo.buf_size() as u64;
        let (mut n, mut bytes) = (0usize, 0u64);
        let mut cq_ci = cq.ci;
        // Every packet starts as a copy of this one's first bytes (pool, headroom, one segment,
        // no transmit request), as in `run_zip`; then its buffer, lengths and metadata are
        // written. Never dropped: its buffer index is a placeholder.
        let tmpl = std::mem::ManuallyDrop::new(Packet::from_device_in(
            self.shared,
            EMPTY,
            self.headroom,
            0,
            RxMeta::default(),
        ));
        // Only the bytes no packet writes itself are copied: the first 22 (pool, headroom, one
        // segment, no transmit request; 24 copied, `seg_len` written after). `black_box`: the
        // compiler would otherwise see the template's fields through the copy and store them
        // one by one again.
        let tp = &*tmpl as *const Packet as *const u8;
        // SAFETY: `tmpl` is a live `Packet`: 64 readable bytes (`MaybeUninit`: they may hold
        // padding); both ranges lie inside it.
        let (t0, t1) = unsafe {
            (
                std::ptr::read_unaligned(tp as *const MaybeUninit<[u8; 16]>),
                std::ptr::read_unaligned(tp.add(16) as *const MaybeUninit<u64>),
            )
        };
        let (t0, t1) = std::hint::black_box((t0, t1));
        while n < out.len() {
            // Walk the CQ slots up to the ring end (one owner bit, no index masking).
            let (first, to_end, _, owner) = cq.run_from(cq_ci);
            let run = (out.len() - n).min(to_end as usize);
            // RESP_SEND, format 0, the expected owner (the SE bit masked out).
            let want = cqe::OP_RESP_SEND << 4 | owner;
            let mut k = 0usize;
            for o in out[n..n + run].iter_mut() {
                let c = first.wrapping_add(k * STEP);
                // SAFETY: `k < run <= to_end`: slot `cq_ci + k` lies inside the CQ ring.
                let op = unsafe { mmio::op_own_load(c.add(cqe::field::OP_OWN)) };
                if op & !cqe::OP_OWN_SE != want {
                    break;
                }
                // SAFETY: software owns this CQE (checked above with an acquire load); it is 64
                // bytes inside the ring and the device leaves it alone until the consumer index
                // is published past it.
                let q = Cqe::new_unchecked(unsafe { &*(c as *const [u8; 64]) });
                let len = q.byte_cnt();
                if len > self.seg_room {
                    break;
                }
                let w = q.wqe_counter() as u32 & self.mask;
                let w = if ONE { w } else { w << self.shift } as usize;
                // SAFETY: `w < wqe_cnt * per_wqe == bufs.len()` (`per_wqe == 1 << shift`).
                let slot = unsafe { bufs.get_unchecked_mut(w) };
                // REPOST runs on a full ring, where every WQE is posted and so every slot holds
                // a buffer (as in `run_zip`): no test.
                if !REPOST && *slot == EMPTY {
                    break; // not a buffer we posted: the general loop counts the error
                }
                let idx = if REPOST {
                    // SAFETY: `n + k < out.len() <= fresh.len()` (`out` was cut to `fresh`).
                    let new = unsafe { *fresh.get_unchecked(fresh.len() - 1 - (n + k)) };
                    let d = self.ring.wrapping_add(w * 16);
                    // SAFETY: `w <= mask`: `d` is the data segment of WQE `w` (16-byte WQEs),
                    // inside the RQ ring. The device completed that WQE, so software owns it
                    // until the doorbell record written after this loop publishes it again.
                    let seg = unsafe { &mut *(d as *mut [u8; 16]) };
                    DataSeg::new_unchecked(seg).set_addr(self.data0 + new as u64 * size);
                    std::mem::replace(slot, new)
                } else {
                    std::mem::replace(slot, EMPTY)
                };
                // SAFETY: `o` is 64 writable bytes of `out`. The template's first 24 bytes (of a
                // valid `Packet`) go in, then this packet's buffer, lengths and metadata (the
                // 64-byte CQE at `c` is software's, as above) at their offsets in the `repr(C)`
                // handle (`layout`), with the types of those fields, covering the rest; the
                // packet owns buffer `idx`, which the device just gave back.
                unsafe {
                    let d = o.as_mut_ptr() as *mut u8;
                    std::ptr::write_unaligned(d as *mut MaybeUninit<[u8; 16]>, t0);
                    std::ptr::write_unaligned(d.add(16) as *mut MaybeUninit<u64>, t1);
                    std::ptr::write_unaligned(d.add(layout::SEG_LEN) as *mut u16, len as u16);
                    std::ptr::write_unaligned(d.add(layout::IDX) as *mut u32, idx);
                    std::ptr::write_unaligned(d.add(layout::PKT_LEN) as *mut u32, len);
                    std::ptr::write_unaligned(d.add(layout::META) as *mut RxMeta, meta_at(c));
                }
                bytes += len as u64;
                k += 1;
            }
            n += k;
            cq_ci = cq_ci.wrapping_add(k as u32);
            if k < run {
                break;
            }
        }
        cq.ci = cq_ci;
        (n, bytes)
    }
}

impl FastRx {
    /// Turns entries `i..n` of the compressed session of `title` (its mini-CQE arrays in the
    /// slots after `cq.ci`) into packets in `out`, for a cyclic RQ of one buffer per WQE, reading
    /// the arrays in place, one array (8 entries) at a time. Per packet: the WQE is the title's
    /// counter plus the entry's position (kernel mlx5e en_rx.c `mlx5e_decompress_cqe`), the
    /// metadata is the title's with the entry's RSS hash (`HASH`: the hash format; the checksum
    /// format carries none), and the packet is a copy of `tmpl` (the title's words, the queue's
    /// pool and headroom) with its buffer, length and hash written over it.
    ///
    /// `REPOST` (on a full ring of 16-byte WQEs): each completed WQE is given a fresh buffer
    /// from the end of `fresh` at once (packet `k` takes `fresh[fresh.len() - 1 - k]`, so at
    /// most `fresh.len()` packets are taken), instead of the refill after the poll walking the
    /// ring again; the caller moves the producer index and writes the RQ doorbell record where
    /// the refill wrote it (after the CQ's). Otherwise the buffer is taken off the ring and
    /// `fresh` is unused.
    ///
    /// Stops at a frame longer than a buffer or a WQE without a posted buffer (the general loop
    /// counts them). Returns (packets, bytes).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_zip<const HASH: bool, const REPOST: bool>(
        &self,
        cq: &Cq,
        title: &[u8; 64],
        tmpl: &Packet,
        i: u32,
        n: u32,
        out: &mut [MaybeUninit<Packet>],
        bufs: &mut [u32],
        fresh: &[u32],
    ) -> (usize, u64) {
        let mut want = out.len().min(n.saturating_sub(i) as usize);
        if REPOST {
            want = want.min(fresh.len());
        }
        let size = self.geo.buf_size() as u64;
        let (mask, seg_room, ring, data0) = (self.mask, self.seg_room, self.ring, self.data0);
        let ctr0 = Cqe::new_unchecked(title).wqe_counter() as u32;
        // The template's 64 bytes, copied as they are (a `Packet` may hold padding) into each
        // packet, from registers loaded once (`Bytes64`).
        // SAFETY: `tmpl` is a live `Packet`, 64 readable bytes.
        let t = unsafe { Bytes64::load(tmpl as *const Packet as *const u8) };
        let base = out.as_mut_ptr();
        let end = base.wrapping_add(want);
        let (mut dst, mut bytes, mut e) = (base, 0u64, i);
        // REPOST: packet `k` takes `fresh[fresh.len() - 1 - k]`; this walks down from the end.
        let mut top = fresh.as_ptr().wrapping_add(fresh.len());
        // Chunks of entries that share a mini-CQE array and lie before the RQ's end, so that the
        // buffer slots and WQEs are walked with pointers (no masking per packet).
        let wqes = bufs.len();
        let slots = bufs.as_mut_ptr();
        while dst != end {
            // Entries 0..7 are in the slot after the title, entry e >= 8 in slot 8 * (e / 8).
            let s = if e < 8 { 1 } else { e & !7 };
            let first = (e % 8) as usize;
            // SAFETY: `base <= dst < end`, both in (or one past) `out`.
            let left = unsafe { end.offset_from(dst) } as usize;
            let wi0 = (ctr0.wrapping_add(e) & mask) as usize;
            // `wi0 <= mask < wqes == bufs.len()` (one buffer per WQE): `cnt >= 1`.
            let cnt = (mini_cqe::PER_SLOT - first).min(left).min(wqes - wi0);
            let arr = cq.slot(cq.ci.wrapping_add(s));
            // The chunk's first entry, buffer slot and WQE, each one pointer (`black_box`: the
            // compiler otherwise keeps each as a base and an index, two registers, and spills
            // three values a packet for want of registers).
            let (m, b, mut d) = std::hint::black_box((
                arr.wrapping_add(first * mini_cqe::SIZE),
                slots.wrapping_add(wi0),
                ring.wrapping_add(wi0 * 16),
            ));
            // This chunk's bytes: at most 8 frames of under 64 KiB (`seg_room`).
            let (mut k, mut sum) = (0usize, 0u32);
            while k != cnt {
                // SAFETY: `m + k` is entry `first + k < first + cnt <= 8` of the array slot,
                // inside the CQ ring (`slot` masks the index); it belongs to the session whose
                // title software owns, and the device leaves it alone until the consumer index
                // is published past the session.
                let mc = MiniCqe::new_unchecked(unsafe {
                    std::slice::from_raw_parts(
                        m.add(k * mini_cqe::SIZE) as *const u8,
                        mini_cqe::SIZE,
                    )
                });
                let len = mc.byte_cnt();
                if len > seg_room {
                    break;
                }
                // SAFETY: `b + k` is slot `wi0 + k < wi0 + cnt <= wqes == bufs.len()`.
                let slot = unsafe { &mut *b.add(k) };
                let idx = *slot;
                if REPOST {
                    // A full ring (the caller's test): every WQE is posted, so every slot holds
                    // a buffer (`refill_wqes` moves the producer index past a WQE only once it
                    // has one, and this loop replaces each one it takes): no `EMPTY` test.
                    // SAFETY: at most `want <= fresh.len()` packets are taken, one `fresh`
                    // entry each, from the end down: `top - 1` is still inside `fresh`.
                    let new = unsafe {
                        top = top.sub(1);
                        *top
                    };
                    *slot = new;
                    // SAFETY: `d` is the data segment of WQE `wi0 + k < wqes` (16-byte WQEs),
                    // inside the RQ ring. The device completed that WQE, so software owns it
                    // until the caller's doorbell record write publishes it again.
                    let seg = unsafe { &mut *(d as *mut [u8; 16]) };
                    DataSeg::new_unchecked(seg).set_addr(data0 + new as u64 * size);
                    d = d.wrapping_add(16);
                } else {
                    if idx == EMPTY {
                        break;
                    }
                    *slot = EMPTY;
                }
                // SAFETY: `base <= dst < end <= base + out.len()`: 64 writable bytes. The
                // template's bytes (a valid `Packet`) go in whole, then this packet's buffer,
                // lengths and hash at their offsets in the `repr(C)` handle (`layout`), with
                // the types of those fields; the packet owns buffer `idx`, which the device
                // just gave back.
                unsafe {
                    let d = dst as *mut u8;
                    t.store(d);
                    std::ptr::write_unaligned(d.add(layout::SEG_LEN) as *mut u16, len as u16);
                    std::ptr::write_unaligned(d.add(layout::IDX) as *mut u32, idx);
                    std::ptr::write_unaligned(d.add(layout::PKT_LEN) as *mut u32, len);
                    if HASH {
                        let h = mc.rx_hash().to_be();
                        std::ptr::write_unaligned(d.add(layout::HASH) as *mut u32, h);
                    }
                }
                sum += len;
                dst = dst.wrapping_add(1);
                k += 1;
            }
            bytes += sum as u64;
            if k != cnt {
                break; // a frame longer than a buffer, or a WQE without one
            }
            e += cnt as u32;
        }
        // SAFETY: `dst` moved from `base` one element at a time, inside `out`.
        let k = unsafe { dst.offset_from(base) } as usize;
        (k, bytes)
    }
}

impl Rx {
    /// The compressed session in progress, for a cyclic RQ of one buffer per WQE: as many of
    /// its packets as fit in `max` and `out`'s spare capacity ([`FastRx::run_zip`]); moves the
    /// session's position and the RQ consumer index. Any other RQ: nothing.
    pub(super) fn poll_zip_fast(
        &mut self,
        out: &mut Vec<Packet>,
        max: usize,
        cache: &mut PoolCache,
    ) -> (usize, u64) {
        let (Kind::Cyclic { .. }, 1, Some(z)) = (self.kind, self.per_wqe, self.zip.as_ref()) else {
            return (0, 0);
        };
        let (zn, zi) = (z.n, z.i);
        let len0 = out.len();
        let spare = out.spare_capacity_mut();
        let max = max.min(spare.len());
        let hash = self.mini != Some(MiniCqeFormat::CsumStrideIdx);
        // A full ring of 16-byte WQEs: each completed WQE is posted again as its packet is
        // built (the doorbell record is written by `poll` after the CQ's).
        let repost = self.stride == 16 && self.pi == self.ci.wrapping_add(self.wqe_cnt);
        let (f, cq, spare, bufs) = (&self.fast, &self.cq, &mut spare[..max], &mut self.bufs[..]);
        let (title, tmpl) = (&z.title, &*z.tmpl);
        let (n, bytes) = if repost {
            let mut got = (0, 0);
            cache.get_bulk(max.min(zn.saturating_sub(zi) as usize), |fresh| {
                got = if hash {
                    f.run_zip::<true, true>(cq, title, tmpl, zi, zn, spare, bufs, fresh)
                } else {
                    f.run_zip::<false, true>(cq, title, tmpl, zi, zn, spare, bufs, fresh)
                };
                got.0
            });
            got
        } else if hash {
            f.run_zip::<true, false>(cq, title, tmpl, zi, zn, spare, bufs, &[])
        } else {
            f.run_zip::<false, false>(cq, title, tmpl, zi, zn, spare, bufs, &[])
        };
        // SAFETY: `spare[..n]` were initialized by `run_zip`, right after the first `len0`.
        unsafe { out.set_len(len0 + n) };
        self.ci = self.ci.wrapping_add(n as u32);
        if let Some(z) = self.zip.as_mut() {
            z.i += n as u32;
        }
        if repost {
            self.pi = self.pi.wrapping_add(n as u32);
        }
        (n, bytes)
    }
}
