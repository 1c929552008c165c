//! Enhanced multi-packet WQEs (eMPW, opcode 0x29), the send path of a queue whose device
//! needs no inline header: one session's title WQEBB (control + Ethernet segment, no inline)
//! then one data segment per packet, at most [`EMPW_MAX_PKTS`] packets / [`MAX_DS`] DS per
//! WQE. Packets that cannot share a session (chained, TSO, VLAN insertion) take the general
//! path of `tx.rs` between sessions. See the module docs of [`super`].

use super::*;

/// Writes one eMPW data segment per packet of `src` into `dsegs`, recording each buffer in
/// `bufs`, until a packet cannot join the session (chained, shorter than [`MIN_FRAME`], of
/// another pool, or asking for other offloads than the first packet, whose checksum flags the
/// session's title carries; the first packet is checked too: 0 when it cannot open a session).
/// Returns the packets written and their bytes. The three slices
/// have the same length: no index check or wrap in the loop.
// Not inlined: a loop of its own gets every register (inlined into the burst, four of its
// loop-invariant values were reloaded from the stack each packet).
#[inline(never)]
fn empw_run(
    dsegs: &mut [[u64; 2]],
    bufs: &mut [u32],
    src: &[Packet],
    lkey_be: [u8; 4],
    shared: &Shared,
) -> (usize, u64) {
    let geo = shared.geometry();
    let Some(first) = src.first() else {
        return (0, 0);
    };
    // The same request gives the same flags: one compare of the request instead of the flags
    // computed per packet. A packet joins, the first one too, with one buffer and the first
    // packet's checksum word (one 32-bit compare: the key's segment count is 1, whatever the
    // first packet's, so a chained first packet opens no session), at least an Ethernet
    // header, of this pool, and no TSO or VLAN request.
    let key = first.segs_csum_word() & 0xffff_0000 | 1;
    // A data segment's first 8 bytes (byte count, lkey, both big-endian) as one word: the
    // lkey's half is the same for every packet.
    let lkey_word =
        u64::from_ne_bytes([0, 0, 0, 0, lkey_be[0], lkey_be[1], lkey_be[2], lkey_be[3]]);
    let (mut k, mut b) = (0, 0u64);
    for ((d, slot), p) in dsegs.iter_mut().zip(bufs.iter_mut()).zip(src) {
        let (off, len) = p.first_seg();
        if p.segs_csum_word() != key
            || (len as usize) < MIN_FRAME
            || !p.is_from(shared)
            || p.offload.special()
        {
            break;
        }
        let idx = p.buffer_index();
        let addr = geo.buf_ptr(idx) as u64 + off as u64;
        // Data segment: byte count, lkey, address, all big-endian (`struct mlx5_wqe_data_seg`),
        // as two 8-byte words in memory order.
        let bc = (len as u32).to_be_bytes();
        let w0 = u64::from_ne_bytes([bc[0], bc[1], bc[2], bc[3], 0, 0, 0, 0]) | lkey_word;
        *d = [w0, u64::from_ne_bytes(addr.to_be_bytes())];
        *slot = idx;
        b += len as u64;
        k += 1;
    }
    (k, b)
}

impl Tx {
    pub(super) fn burst_empw(
        &mut self,
        pkts: &mut Vec<Packet>,
        stats: &StatsWriter,
        cache: &mut PoolCache,
    ) -> usize {
        // A full ring takes nothing: the caller keeps its packets (a sender polling a full ring
        // spends a check here, not a burst's set-up).
        if self.free_bbs() == 0 {
            return 0;
        }
        let total = pkts.len();
        let base = pkts.as_mut_ptr();
        // As in `burst_send`: from here the Vec does not own its elements; each of the first `n`
        // is moved into the ring or read out and freed, the rest go back to the front.
        // SAFETY: shrinking the length to 0 only forgets elements; none is dropped.
        unsafe { pkts.set_len(0) };
        let (pkts0, bbs0, bytes0) = (self.pkts_posted, self.pi, self.bytes_posted);
        let mut last = None;
        let (mut n, mut dropped) = (0, 0);
        while n < total {
            // SAFETY: `n < total`: element `n` is initialized and not moved yet.
            let p = unsafe { &*base.add(n) };
            // One session: its title WQEBB and the WQEBBs its data segments fill, up to the
            // ring's end (so no DS index wraps inside it), the free WQEBBs and the end of the
            // buffer ring. `empw_run` checks every packet, the first one too: a packet that
            // cannot open a session (chained, short, of another pool, TSO or VLAN insertion)
            // gives none and takes the general path, as does any packet on a full ring (where
            // the general path finds no room and stops the burst).
            let free = self.free_bbs() as usize;
            if free > 0 {
                let slot = (self.pi as u32 & self.mask) as usize;
                let buf_slot = (self.buf_pi & self.buf_mask) as usize;
                let max = (EMPW_MAX_PKTS as usize)
                    .min(total - n)
                    .min(4 * free - 2)
                    .min(4 * (self.wqe_cnt as usize - slot) - 2)
                    .min(self.bufs.len() - buf_slot);
                // SAFETY: elements `n..n + max` are initialized and not moved (`n + max <=
                // total`); they stay in place while this slice lives.
                let src = unsafe { std::slice::from_raw_parts(base.add(n), max) };
                // SAFETY: DS units 2 .. 2 + max of the WQE at `slot` lie in WQEBBs `slot ..
                // slot + (2 + max) / 4`, inside the ring (`max <= 4 * (wqe_cnt - slot) - 2`)
                // and free (`max <= 4 * free - 2`): software owns them until the doorbell.
                // Each is 16 bytes at a multiple of 16 from the ring's start, which `Tx::new`
                // checked to be 64-byte aligned: an aligned `[u64; 2]`.
                let dsegs = unsafe {
                    std::slice::from_raw_parts_mut(
                        self.base.add(slot * WQEBB + 32) as *mut [u64; 2],
                        max,
                    )
                };
                let (k, bytes) = empw_run(
                    dsegs,
                    &mut self.bufs[buf_slot..buf_slot + max],
                    src,
                    self.lkey.to_be_bytes(),
                    self.shared,
                );
                if k > 0 {
                    self.buf_pi = self.buf_pi.wrapping_add(k as u32);
                    let start = self.pi;
                    // The session's checksum flags are its first packet's.
                    self.close_empw(start, k as u32, bytes, cs_flags(p, self.tx_csum));
                    last = Some(start);
                    n += k;
                    continue;
                }
            }
            let cs = cs_flags(p, self.tx_csum);
            let tso = p.offload.tso_mss;
            let written = match tso {
                Some(mss) => self.write_tso_or_refuse(p, mss),
                None => self.write_general(p, cs, 0),
            };
            match written {
                Some(Some(start)) => last = Some(start),
                Some(None) => {
                    stats.add(Counter::TxDrops, 1);
                    dropped += 1;
                    // SAFETY: element `n` is initialized and is moved out exactly once.
                    self.discard(unsafe { std::ptr::read(base.add(n)) }, cache);
                }
                None => break,
            }
            n += 1;
        }
        if n > 0 && n < total {
            // SAFETY: elements `n..total` are initialized and not moved; they go to the front.
            unsafe { std::ptr::copy(base.add(n), base, total - n) };
        }
        // SAFETY: the first `total - n` elements are initialized (moved there just above).
        unsafe { pkts.set_len(total - n) };
        self.posted(pkts0, bbs0, bytes0, stats);
        if let Some(last) = last {
            self.request_completion(last);
            self.doorbell(last);
        }
        n - dropped
    }

    /// Writes the title of an eMPW session of `k` packets at `start` and records it.
    #[inline(always)]
    fn close_empw(&mut self, start: u16, k: u32, bytes: u64, cs: u8) {
        let ds = 2 + k;
        let bb = self.wqebb(start);
        ctrl::CtrlSeg::new_unchecked(&mut bb[0..16]).fill(
            0,
            start,
            ctrl::OPCODE_ENHANCED_MPSW,
            self.sqn,
            ds as u8,
            ctrl::CE_ONLY_FIRST_ERR,
            k,
        );
        eth::EthSeg::new_unchecked(&mut bb[16..32]).fill(cs, 0);
        // `pi` has not moved during the session: close_wqe moves it past the whole WQE.
        self.close_wqe(start, ds.div_ceil(4), k, bytes);
    }
}
