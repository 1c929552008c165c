//! The receive fast path: plain (uncompressed, non-striding) CQEs walked in runs up to the ring
//! end, packets written straight into the caller's spare capacity, optionally reposting each
//! WQE's buffer as it goes.

use super::*;

/// Index into [`CSUM_OK`] of a CQE's checksum bits: byte 29 bits 6:2 (L4 and L3 types) and
/// byte 28 bits 2:1 (L4 / L3 ok), as bits 6:2 and 1:0.
#[inline(always)]
pub(super) fn csum_index(hds_ip_ext: u8, l4_hdr_type_etc: u8) -> usize {
    (l4_hdr_type_etc & 0x7c | (hds_ip_ext >> 1) & 3) as usize
}

/// (l3_csum_ok, l4_csum_ok) of a CQE by [`csum_index`]: the IPv4 header checksum was verified
/// (or the packet is IPv6, which has none); a TCP/UDP checksum was verified.
static CSUM_OK: [(bool, bool); 128] = {
    let mut t = [(false, false); 128];
    let mut i = 0;
    while i < 128 {
        let (ok, types) = ((i as u8 & 3) << 1, i as u8 & 0x7c);
        let (l3, l4) = ((types >> 2) & 3, (types >> 4) & 7);
        t[i] = (
            (l3 == cqe::L3_IPV4 && ok & cqe::L3_OK != 0) || l3 == cqe::L3_IPV6,
            l4 != cqe::L4_NONE && ok & cqe::L4_OK != 0,
        );
        i += 1;
    }
    t
};

#[inline(always)]
pub(super) fn meta_of(c: &Cqe<&[u8; 64]>, hash: u32) -> RxMeta {
    // Bytes 28 and 29 hold every flag used here.
    let t = c.l4_hdr_type_etc();
    let (l3_csum_ok, l4_csum_ok) = CSUM_OK[csum_index(c.hds_ip_ext(), t) & 127];
    RxMeta {
        l3_csum_ok,
        l4_csum_ok,
        vlan_tci: (t & cqe::CV != 0).then_some(c.vlan_info()),
        rss_hash: hash,
        flow_tag: c.flow_tag(),
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
    /// `META`: fill the packets' [`RxMeta`] from the CQEs (else leave it at its default).
    ///
    /// `REPOST` (only with `ONE`, on a full ring of 16-byte WQEs): each completed WQE is posted
    /// again at once with a fresh buffer from the end of `fresh` (packet `i` takes
    /// `fresh[fresh.len() - 1 - i]`), so at most `fresh.len()` packets are taken; the caller
    /// moves the RQ producer index and writes the doorbell record. Otherwise `fresh` is unused.
    #[inline(never)]
    pub(super) fn run<const STEP: usize, const ONE: bool, const REPOST: bool, const META: bool>(
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
                o.write(Packet::from_device_in(
                    self.shared,
                    idx,
                    self.headroom,
                    len,
                    if META {
                        meta_of(&q, q.rx_hash())
                    } else {
                        RxMeta::default()
                    },
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
