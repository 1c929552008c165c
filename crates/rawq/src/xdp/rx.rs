//! Receive: rx ring → packets, then one fill-ring refill per burst.

use super::bpf::meta;
use super::XdpQueue;
use crate::mempool::BUF_HEADER;
use crate::packet::{Packet, RxMeta};
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
            let m = if self.stamps {
                self.take_meta(idx, off)
            } else {
                RxMeta::default()
            };
            let p = Packet::from_device_in(self.shared, idx, off as u16, d.len, m);
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

    /// The timestamps and VLAN tag the steering program wrote in front of the frame at `off` in
    /// buffer `idx` (the record of [`meta`], see `bpf::compile`), clearing its magic so that a
    /// later frame in this buffer that gets no record (no metadata room) is not given this
    /// one's. The tag is the one the driver took off the frame (the kfunc answered 0): a tag
    /// still in the frame's data stays there and is not reported here.
    #[inline]
    pub(super) fn take_meta(&self, idx: u32, off: u32) -> RxMeta {
        if (off as usize) < meta::LEN + BUF_HEADER {
            return RxMeta::default();
        }
        let mut rec = [0u8; meta::LEN];
        // SAFETY: the kernel has just handed buffer `idx` back (`home.release` succeeded), so
        // this queue owns it and nothing else writes it; `off - LEN >= BUF_HEADER` and
        // `off <= chunk`, so the LEN bytes read and the 4 written lie inside the buffer, past
        // rawq's buffer header.
        let magic = unsafe {
            let p = self.shared.buf_ptr(idx).add(off as usize - meta::LEN);
            std::ptr::copy_nonoverlapping(p, rec.as_mut_ptr(), meta::LEN);
            let magic = u32::from_ne_bytes(word(&rec, meta::MAGIC_AT));
            if magic == meta::MAGIC {
                std::ptr::write_bytes(p.add(meta::MAGIC_AT), 0, 4);
            }
            magic
        };
        if magic != meta::MAGIC {
            return RxMeta::default();
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&rec[at..at + 8]);
            u64::from_ne_bytes(b)
        };
        let hw_ok = i32::from_ne_bytes(word(&rec, meta::HW_STATUS_AT)) == 0;
        let vlan = (i32::from_ne_bytes(word(&rec, meta::VLAN_STATUS_AT)) == 0)
            .then(|| u16::from_ne_bytes([rec[meta::VLAN_TCI_AT], rec[meta::VLAN_TCI_AT + 1]]));
        let base = match vlan {
            Some(tci) => RxMeta::new(0, 0, Some(tci), false, false),
            None => RxMeta::default(),
        };
        base.with_kernel_rx_ns(u64_at(meta::KERNEL_NS_AT))
            .with_hw_timestamp(if hw_ok { u64_at(meta::HW_NS_AT) } else { 0 })
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

fn word(b: &[u8; meta::LEN], at: usize) -> [u8; 4] {
    [b[at], b[at + 1], b[at + 2], b[at + 3]]
}

/// Event-driven receive ([`crate::queue`]): the socket's own fd. The kernel's `xsk_poll`
/// (net/xdp/xsk.c) reports POLLIN while the rx ring is not empty, and with need_wakeup it
/// wakes the driver itself on a zero-copy socket; libxdp's samples (xdpsock `rx_drop` with
/// `opt_poll`) poll the same way.
impl XdpQueue {
    /// Arming: the fill ring topped up and the driver kicked if it asks (`need_wakeup` on the
    /// fill ring), so that frames can land while the caller sleeps.
    pub(super) fn rx_arm(&mut self) {
        self.refill();
    }

    /// Whether the rx ring holds a frame (peeked, not taken).
    pub(super) fn rx_ready(&mut self) -> bool {
        self.xsk.rx.peek(1) > 0
    }

    /// The socket's descriptor.
    pub(super) fn rx_fd(&self) -> std::os::fd::RawFd {
        self.xsk.as_raw_fd()
    }
}
