//! Transmit: packets → tx ring (one producer update per burst), completions → the queue's cache.

use super::ring::XdpDesc;
use super::XdpQueue;
use crate::packet::{fill_checksums, insert_vlan, Packet};
use crate::stats::Counter;

/// Frames the kernel's copy-mode transmit handles per `sendto` (`TX_BATCH_SIZE`).
const COPY_MODE_TX_BATCH: u32 = 32;

impl XdpQueue {
    /// Moves packets from the front of `pkts` into the tx ring; returns how many the ring took.
    ///
    /// A packet from another pool (e.g. received on another port) is copied into a buffer of
    /// this queue's UMEM and counted in `tx_copies`; a packet the kernel can never send from one
    /// chunk (chained, or longer than a chunk) is dropped and counted in `tx_drops`, and is not
    /// in the returned count. When no buffer is free for a copy, the packet stays in `pkts`.
    ///
    /// Offloads: checksum requests are carried out in software before the frame enters the
    /// ring (AF_XDP has no transmit checksum offload); a TSO request is refused (dropped,
    /// counted in `tx_drops`, said by `take_error`): AF_XDP does not segment.
    pub(super) fn tx(&mut self, pkts: &mut Vec<Packet>) -> usize {
        self.reclaim_completions();
        let room = self.xsk.tx.free(pkts.len().min(u32::MAX as usize) as u32) as usize;
        let headroom = self.pool.headroom();
        let copy_room = self.umem.chunk as usize - headroom as usize;
        let (mut k, mut used, mut dropped, mut copies) = (0u32, 0, 0u64, 0u64);
        while (k as usize) < room && used < pkts.len() {
            let p = &mut pkts[used];
            if p.offload.tso_mss.is_some() {
                self.error.get_or_insert(crate::Error::TxRefused {
                    queue: self.ifname.clone(),
                    reason: crate::error::TxRefusal::TsoNotSegmented {
                        by: "AF_XDP (the dv and verbs backends do)",
                    },
                });
                dropped += 1;
                used += 1;
                continue;
            }
            if let Err(why) = insert_vlan(p) {
                // In software (AF_XDP inserts no tag); a frame that cannot take one is refused.
                self.error.get_or_insert(crate::Error::TxRefused {
                    queue: self.ifname.clone(),
                    reason: why,
                });
                dropped += 1;
                used += 1;
                continue;
            }
            let (l3, l4) = (p.offload.l3_csum, p.offload.l4_csum);
            let (addr, idx) = if let Some(addr) = self.in_place(p) {
                if l3 | l4 {
                    fill_checksums(p.data_mut(), l3, l4);
                }
                (addr, p.buffer_index())
            } else if p.segment_count() != 1 || p.len() > copy_room {
                // No chunk can hold it: the kernel can never send it.
                dropped += 1;
                used += 1;
                continue;
            } else {
                // From another pool: copy it into one of ours.
                let Some(idx) = self.home.cache.get() else {
                    break; // no buffer free now: it stays for the caller
                };
                let mut c = Packet::from_raw_parts(self.shared, idx, headroom, 0);
                if c.copy_from_slice(p.data()).is_err() {
                    // Cannot happen (the length was checked); never send a wrong frame.
                    dropped += 1;
                    used += 1;
                    continue;
                }
                if l3 | l4 {
                    fill_checksums(c.data_mut(), l3, l4);
                }
                copies += 1;
                let idx = c.into_raw();
                (self.umem.chunk_addr(idx) + headroom as u64, idx)
            };
            let len = p.len() as u32;
            self.xsk.tx.write(
                k,
                XdpDesc {
                    addr,
                    len,
                    options: 0,
                },
            );
            self.home.hold(idx);
            // `len` fits a chunk (at most 4096 bytes).
            self.tx_len[idx as usize] = len as u16;
            k += 1;
            used += 1;
        }
        // Sent in place: the buffer now belongs to the kernel. Copied or dropped: freed here.
        for p in pkts.drain(..used) {
            // (A refused packet still has its request: it was not sent, and is freed here.)
            let refused = p.offload.tso_mss.is_some() || p.offload.vlan_insert.is_some();
            if self.in_place(&p).is_some() && !refused {
                p.into_raw();
            }
        }
        if k > 0 {
            self.xsk.tx.submit(k);
        }
        if dropped > 0 {
            self.stats.add(Counter::TxDrops, dropped);
        }
        if copies > 0 {
            self.stats.add(Counter::TxCopies, copies);
        }
        self.kick_tx();
        k as usize
    }

    /// The UMEM address `p` can be sent from as it is: one segment of this UMEM, within its
    /// chunk.
    #[inline]
    fn in_place(&self, p: &Packet) -> Option<u64> {
        let chunk = self.umem.chunk as u64;
        self.umem
            .addr_of(p.data_addr())
            .filter(|a| p.segment_count() == 1 && (a & (chunk - 1)) + p.len() as u64 <= chunk)
    }

    /// Kicks the kernel if the tx ring asks for it and holds frames. In copy mode the kernel
    /// sends at most 32 frames per kick, so it is kicked once per 32 outstanding frames
    /// (reclaiming completions in between, so that the completion ring never blocks it).
    pub(super) fn kick_tx(&mut self) {
        if !self.xsk.tx.needs_wakeup() {
            return;
        }
        let outstanding = self.xsk.tx.outstanding();
        if outstanding == 0 {
            return;
        }
        let kicks = match self.xsk.mode {
            super::Mode::ZeroCopy => 1,
            super::Mode::Copy => outstanding.div_ceil(COPY_MODE_TX_BATCH),
        };
        for _ in 0..kicks {
            let r = self.xsk.kick_tx();
            self.reclaim_completions();
            match r {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                    ) => {}
                // ENETDOWN, ENXIO...: the frames stay in the ring (and are not counted as sent);
                // the error is kept for `take_error`.
                Err(e) => {
                    if self.error.is_none() {
                        self.error = Some(self.link_error(e));
                    }
                    break;
                }
            }
            if self.xsk.tx.outstanding() == 0 {
                break;
            }
        }
    }

    /// Returns completed transmit buffers to the cache and counts their frames as sent; returns
    /// how many.
    pub(super) fn reclaim_completions(&mut self) -> usize {
        let n = self.xsk.comp.peek(u32::MAX);
        let (mut done, mut bytes) = (0u64, 0u64);
        for i in 0..n {
            let addr = self.xsk.comp.read(i);
            match self.umem.split(addr) {
                Some((idx, _)) if self.home.release(idx) => {
                    // A multi-buffer frame (super::sg) ends at its last buffer's completion.
                    let len = self.tx_len[idx as usize];
                    done += u64::from(len & super::sg::TX_CONTD == 0);
                    bytes += (len & !super::sg::TX_CONTD) as u64;
                    self.home.cache.put(idx)
                }
                _ => self.stats.add(Counter::TxErrors, 1),
            }
        }
        if n > 0 {
            self.xsk.comp.release(n);
            self.stats.tx(done, bytes);
        }
        n as usize
    }

    /// A failed tx kick, said plainly.
    fn link_error(&self, e: std::io::Error) -> crate::Error {
        let ifname = self.ifname.clone();
        match e.raw_os_error() {
            Some(libc::ENETDOWN) => crate::Error::Link {
                detail: format!(
                    "the interface is down (ENETDOWN): frames in the tx ring are not sent; \
                     bring it up with `ip link set dev {ifname} up`"
                ),
                ifname,
            },
            Some(libc::ENXIO) | Some(libc::ENODEV) => crate::Error::Link {
                detail: "the interface is gone (ENXIO): it was deleted or moved to another \
                         namespace while the queue was open; nothing more can be sent or \
                         received on this port"
                    .into(),
                ifname,
            },
            _ => crate::Error::os("sendto(AF_XDP tx kick)", e),
        }
    }
}
