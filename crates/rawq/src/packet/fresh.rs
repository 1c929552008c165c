//! Fresh packets in bulk: a pool's empty packet as a 64-byte template ([`fresh_template`],
//! which every [`BufCache`] keeps), copied once per packet with its buffer index written in
//! (`push_fresh`), and the caches' `alloc_bulk` that does it.

use std::mem::ManuallyDrop;

use super::{layout, Packet};
use crate::buf::{BufCache, Shared, Template};
use crate::error::{Error, Result};

impl BufCache {
    /// Appends `n` fresh packets to `out`, all or none (refilling from the shared stack only
    /// when the cache holds fewer than `n`).
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when fewer than `n` buffers are free; nothing is appended then.
    #[inline]
    pub(crate) fn alloc_bulk(&mut self, out: &mut Vec<Packet>, n: usize) -> Result<()> {
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
}

// `push_fresh` copies a template packet as 64 bytes and then writes the buffer index.
const _: () = assert!(std::mem::size_of::<Packet>() == 64 && layout::IDX + 4 <= 64);

/// The 64 bytes of a fresh packet of pool `s` (its headroom, no data, one segment, no offload
/// request, no metadata) with a placeholder buffer index, for `push_fresh`. Kept in the cache,
/// not rebuilt a burst: a copy from memory the compiler cannot see through is stored as four
/// 16-byte words, where the handle's narrow fields (and `TxOffload`'s `None`s, which leave
/// gaps no store may cover) took ten stores a packet.
#[allow(unsafe_code)]
pub(crate) fn fresh_template(s: &'static Shared) -> Template {
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
