//! Transmit: packets → tx ring (one producer update per burst), completions → the queue's cache.

use super::ring::XdpDesc;
use super::XdpQueue;
use crate::packet::Packet;
use crate::stats::Counter;

/// Frames the kernel's copy-mode transmit handles per `sendto` (`TX_BATCH_SIZE`).
const COPY_MODE_TX_BATCH: u32 = 32;

impl XdpQueue {
    /// Moves packets from the front of `pkts` into the tx ring; returns how many were taken.
    pub(super) fn tx(&mut self, pkts: &mut Vec<Packet>) -> usize {
        self.reclaim_completions();
        let want = pkts.len().min(u32::MAX as usize) as u32;
        let n = self.xsk.tx.free(want).min(want);
        let mut k = 0u32;
        let mut bytes = 0u64;
        let mut dropped = 0u64;
        for p in pkts.drain(..n as usize) {
            let addr = self.umem.addr_of(p.data_addr());
            let fits = addr.is_some_and(|a| {
                let off = a & (self.umem.chunk as u64 - 1);
                off + p.len() as u64 <= self.umem.chunk as u64
            });
            let Some(addr) = addr.filter(|_| fits && p.segment_count() == 1) else {
                // Chained, or from another pool: the kernel cannot send it from this UMEM.
                dropped += 1;
                drop(p);
                continue;
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
            let idx = p.into_raw();
            self.home.hold(idx);
            k += 1;
            bytes += len as u64;
        }
        if k > 0 {
            self.xsk.tx.submit(k);
            self.stats.tx(k as u64, bytes);
        }
        if dropped > 0 {
            self.stats.add(Counter::TxDrops, dropped);
        }
        self.kick_tx();
        n as usize
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
                // ENETDOWN, ENXIO...: the frames stay in the ring until the link comes back.
                Err(_) => break,
            }
            if self.xsk.tx.outstanding() == 0 {
                break;
            }
        }
    }

    /// Returns completed transmit buffers to the cache; returns how many.
    pub(super) fn reclaim_completions(&mut self) -> usize {
        let n = self.xsk.comp.peek(u32::MAX);
        for i in 0..n {
            let addr = self.xsk.comp.read(i);
            match self.umem.split(addr) {
                Some((idx, _)) if self.home.release(idx) => self.home.cache.put(idx),
                _ => self.stats.add(Counter::TxErrors, 1),
            }
        }
        if n > 0 {
            self.xsk.comp.release(n);
        }
        n as usize
    }
}
