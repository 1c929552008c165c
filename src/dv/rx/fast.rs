//! The receive fast path: plain (uncompressed, non-striding) CQEs walked in runs up to the ring
//! end, packets written straight into the caller's spare capacity, optionally reposting each
//! WQE's buffer as it goes.

use super::*;

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
                if *slot == EMPTY {
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
                // SAFETY: as above: the 64-byte CQE at `c` is software's.
                let meta = unsafe { meta_at(c) };
                o.write(Packet::from_device_in(
                    self.shared,
                    idx,
                    self.headroom,
                    len,
                    meta,
                ));
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
