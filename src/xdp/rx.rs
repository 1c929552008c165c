//! Receive: rx ring → packets, then one fill-ring refill per burst.

use super::XdpQueue;
use crate::packet::Packet;
use crate::stats::Counter;

/// Empty polls between two reads of the kernel's drop counters.
const IDLE_POLLS_PER_STATS: u32 = 4096;

impl XdpQueue {
    /// Appends up to `max` received frames to `out`. The descriptors' buffers become the packets'
    /// buffers (no copy); the fill ring gets as many fresh buffers back in the same burst.
    pub(super) fn rx(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        let want = max.min(u32::MAX as usize) as u32;
        let n = self.xsk.rx.peek(want);
        let mut got = 0u64;
        let mut bytes = 0u64;
        for i in 0..n {
            let d = self.xsk.rx.read(i);
            let Some((idx, off)) = self.umem.split(d.addr) else {
                self.stats.add(Counter::RxErrors, 1);
                continue;
            };
            if off as u64 + d.len as u64 > self.umem.chunk as u64 || !self.home.release(idx) {
                // Not a buffer this queue gave the kernel, or past its end: never trust it.
                self.stats.add(Counter::RxErrors, 1);
                continue;
            }
            // `off` < chunk <= 4096 and `len` fits behind it, so both fit in u16.
            let p = Packet::from_raw_parts(self.shared, idx, off as u16, d.len as u16);
            out.push(p);
            got += 1;
            bytes += d.len as u64;
        }
        if n > 0 {
            self.xsk.rx.release(n);
        }
        self.refill();
        if got > 0 {
            self.stats.rx(got, bytes);
        } else {
            self.idle_polls += 1;
            if self.idle_polls >= IDLE_POLLS_PER_STATS {
                self.idle_polls = 0;
                self.sync_kernel_stats();
            }
        }
        got as usize
    }

    /// Tops the fill ring up from the queue's cache: one producer update, and a wakeup only if
    /// the kernel asks for one.
    pub(super) fn refill(&mut self) {
        let free = self.xsk.fill.free(self.fill_size);
        let mut k = 0;
        while k < free {
            let Some(idx) = self.home.cache.get() else {
                break;
            };
            self.xsk.fill.write(k, self.umem.chunk_addr(idx));
            self.home.hold(idx);
            k += 1;
        }
        if k > 0 {
            self.xsk.fill.submit(k);
        }
        if self.xsk.fill.needs_wakeup() {
            self.xsk.kick_rx();
        }
    }
}
