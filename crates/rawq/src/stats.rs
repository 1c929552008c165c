//! Per-queue counters.
//!
//! Each queue has one writer (the thread that drives it) and any number of readers (a stats
//! printer once a second). Counters are relaxed atomics on the queue's own cache lines; the writer
//! does plain load + store (no read-modify-write), so counting costs what a plain add costs.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

/// Bytes a frame costs on the wire beyond its length: FCS 4 + preamble 8 + inter-frame gap 12
/// (what turns a frame rate into the layer-1 bit rate of [`Rates::bps_l1`]).
pub const WIRE_OVERHEAD: u64 = 24;

/// A snapshot of one queue's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct QueueStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received (frame bytes, no FCS).
    pub rx_bytes: u64,
    /// Packets the device or driver dropped on receive (no buffer, ring full, filtered).
    pub rx_drops: u64,
    /// Receive errors (error completions, runts, bad length).
    pub rx_errors: u64,
    /// Packets handed to the device: counted when posted on DV / the model / ibverbs (a packet
    /// that then fails or is flushed moves to `tx_errors` / `tx_drops`), when completed on
    /// AF_XDP.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets dropped on transmit (e.g. flushed by a queue error).
    pub tx_drops: u64,
    /// Transmit errors: packets an error completion failed (on DV every packet of the failed
    /// WQE, several for an eMPW session; the WQEs behind it are flushed into `tx_drops`).
    pub tx_errors: u64,
    /// Times the device found no buffer to receive into (AF_XDP: the fill ring was empty); the
    /// frames lost then are in `rx_drops`.
    pub rx_no_buffer: u64,
    /// Packets copied on transmit because the device could not send them from their own buffer
    /// (e.g. a packet from another port's pool on AF_XDP); they are also in `tx_packets`.
    pub tx_copies: u64,
    /// Packets `tx_burst` took from the caller's `Vec`: those it reported taken and those it
    /// dropped at once (in `tx_drops`). From then on each is in exactly one of sent
    /// (`tx_packets`), dropped (`tx_drops`), failed (`tx_errors`), not sent at the close
    /// (`tx_unsent_at_close`), fate unknown at the close (`tx_fate_unknown`) or in flight: see
    /// [`QueueStats::tx_ledger`].
    pub tx_taken: u64,
    /// Packets posted to the device and not sent: the queue closed (was dropped) before the
    /// device sent them, and the device said so (the software device: its send queue's stop
    /// reports how far it got). Not in `tx_packets` nor `tx_drops`.
    pub tx_unsent_at_close: u64,
    /// Packets posted to the device whose fate is unknown: the queue closed (was dropped)
    /// while they were outstanding, without their completion, on a device that cannot say
    /// whether they reached the wire (dv and verbs: a WQE the NIC fetched may or may not have
    /// been sent when its queue is reset or destroyed). Not in `tx_packets` nor `tx_drops`.
    pub tx_fate_unknown: u64,
}

/// Where the packets a queue's `tx_burst` took are (see [`QueueStats::tx_ledger`]): each in
/// exactly one of `sent`, `dropped`, `failed`, `unsent_at_close`, `fate_unknown` or
/// `in_flight`. The two `_at_close` kinds appear only once the queue was dropped: what its
/// device had not completed then, said exactly where the device can tell (the software
/// device), as unknown where it cannot (dv and verbs on a NIC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct TxLedger {
    /// Packets `tx_burst` took from the caller ([`QueueStats::tx_taken`]).
    pub taken: u64,
    /// Sent: completed by the device on AF_XDP; handed to the device (posted, doorbell rung)
    /// on DV, ibverbs and the software device, which count at post as DPDK's mlx5 PMD does
    /// (a packet a queue error then flushes moves from here to `dropped`); written to the
    /// other end on the loopback backend.
    pub sent: u64,
    /// Dropped, not sent: refused by the send path (a request the device cannot do, a frame
    /// that cannot leave from one buffer) or flushed by a queue error ([`QueueStats::tx_drops`]).
    pub dropped: u64,
    /// Failed with an error completion ([`QueueStats::tx_errors`]).
    pub failed: u64,
    /// Not sent: the queue closed before the device sent them, as the device said
    /// ([`QueueStats::tx_unsent_at_close`]; the software device).
    pub unsent_at_close: u64,
    /// Posted, fate unknown at the close: outstanding without a completion when the queue
    /// closed, on a device that cannot tell whether they reached the wire
    /// ([`QueueStats::tx_fate_unknown`]; dv and verbs).
    pub fate_unknown: u64,
    /// Taken and none of the above yet: on AF_XDP, in the kernel's tx ring waiting for its
    /// completion. Not a loss: `Queue::reclaim` moves them on.
    pub in_flight: u64,
    /// Packets the other buckets hold beyond `taken` (always 0 unless a backend counted a
    /// packet twice: a defect, shown rather than hidden).
    pub double_counted: u64,
}

impl TxLedger {
    /// Whether every packet taken is in exactly one bucket.
    pub fn closes(&self) -> bool {
        self.double_counted == 0
            && self.sent
                + self.dropped
                + self.failed
                + self.unsent_at_close
                + self.fate_unknown
                + self.in_flight
                == self.taken
    }
}

/// Packet and layer-1 bit rates over an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Rates {
    /// Packets per second.
    pub pps: f64,
    /// Bits per second on the wire: frame bytes plus 24 per frame (FCS, preamble, gap).
    pub bps_l1: f64,
}

impl Rates {
    fn of(packets: u64, bytes: u64, secs: f64) -> Rates {
        if secs <= 0.0 {
            return Rates::default();
        }
        Rates {
            pps: packets as f64 / secs,
            bps_l1: (bytes + packets * WIRE_OVERHEAD) as f64 * 8.0 / secs,
        }
    }
}

impl QueueStats {
    /// Receive rates since `prev` (an earlier snapshot), `secs` seconds ago.
    pub fn rx_rates(&self, prev: &QueueStats, secs: f64) -> Rates {
        Rates::of(
            self.rx_packets.saturating_sub(prev.rx_packets),
            self.rx_bytes.saturating_sub(prev.rx_bytes),
            secs,
        )
    }

    /// Transmit rates since `prev` (an earlier snapshot), `secs` seconds ago. `tx_packets` can go
    /// down between snapshots on dv and verbs (they count at post, and a queue error moves the
    /// packets it flushed to `tx_drops`): a decrease reads as no traffic, never a wrapped rate.
    pub fn tx_rates(&self, prev: &QueueStats, secs: f64) -> Rates {
        Rates::of(
            self.tx_packets.saturating_sub(prev.tx_packets),
            self.tx_bytes.saturating_sub(prev.tx_bytes),
            secs,
        )
    }

    /// The packets `tx_burst` took, each in exactly one of sent, dropped (with why) or in
    /// flight (see [`TxLedger`]). A snapshot is not atomic across counters: read it from the
    /// thread that drives the queue (its own counters, `Queue::stats`) for an exact ledger;
    /// another thread's snapshot may catch a packet between two counters (shown in
    /// `in_flight` or `double_counted` for that moment).
    pub fn tx_ledger(&self) -> TxLedger {
        let done = self.tx_packets
            + self.tx_drops
            + self.tx_errors
            + self.tx_unsent_at_close
            + self.tx_fate_unknown;
        TxLedger {
            taken: self.tx_taken,
            sent: self.tx_packets,
            dropped: self.tx_drops,
            failed: self.tx_errors,
            unsent_at_close: self.tx_unsent_at_close,
            fate_unknown: self.tx_fate_unknown,
            in_flight: self.tx_taken.saturating_sub(done),
            double_counted: done.saturating_sub(self.tx_taken),
        }
    }

    /// Adds `other` into `self` (for port totals).
    pub fn accumulate(&mut self, other: &QueueStats) {
        self.rx_packets += other.rx_packets;
        self.rx_bytes += other.rx_bytes;
        self.rx_drops += other.rx_drops;
        self.rx_errors += other.rx_errors;
        self.tx_packets += other.tx_packets;
        self.tx_bytes += other.tx_bytes;
        self.tx_drops += other.tx_drops;
        self.tx_errors += other.tx_errors;
        self.tx_copies += other.tx_copies;
        self.rx_no_buffer += other.rx_no_buffer;
        self.tx_taken += other.tx_taken;
        self.tx_unsent_at_close += other.tx_unsent_at_close;
        self.tx_fate_unknown += other.tx_fate_unknown;
    }
}

#[derive(Default)]
struct Cells {
    c: [AtomicU64; 13],
}

/// The writer side of a queue's counters, owned by the queue.
#[derive(Default)]
pub struct StatsWriter {
    cells: Arc<CachePadded<Cells>>,
}

/// Which counter.
#[derive(Clone, Copy, Debug)]
#[repr(usize)]
pub enum Counter {
    /// [`QueueStats::rx_packets`]
    RxPackets = 0,
    /// [`QueueStats::rx_bytes`]
    RxBytes,
    /// [`QueueStats::rx_drops`]
    RxDrops,
    /// [`QueueStats::rx_errors`]
    RxErrors,
    /// [`QueueStats::tx_packets`]
    TxPackets,
    /// [`QueueStats::tx_bytes`]
    TxBytes,
    /// [`QueueStats::tx_drops`]
    TxDrops,
    /// [`QueueStats::tx_errors`]
    TxErrors,
    /// [`QueueStats::tx_copies`]
    TxCopies,
    /// [`QueueStats::rx_no_buffer`]
    RxNoBuffer,
    /// [`QueueStats::tx_taken`]
    TxTaken,
    /// [`QueueStats::tx_unsent_at_close`]
    TxUnsentAtClose,
    /// [`QueueStats::tx_fate_unknown`]
    TxFateUnknown,
}

impl StatsWriter {
    /// Adds `v` to counter `c`. Single writer: a load and a store, no atomic read-modify-write.
    #[inline]
    pub fn add(&self, c: Counter, v: u64) {
        let cell = &self.cells.c[c as usize];
        cell.store(cell.load(Relaxed).wrapping_add(v), Relaxed);
    }

    /// Counts `n` received packets of `bytes` bytes in all.
    #[inline]
    pub fn rx(&self, n: u64, bytes: u64) {
        self.add(Counter::RxPackets, n);
        self.add(Counter::RxBytes, bytes);
    }

    /// Counts `n` sent packets of `bytes` bytes in all.
    #[inline]
    pub fn tx(&self, n: u64, bytes: u64) {
        self.add(Counter::TxPackets, n);
        self.add(Counter::TxBytes, bytes);
    }

    /// A reader for other threads.
    pub fn reader(&self) -> StatsReader {
        StatsReader {
            cells: self.cells.clone(),
        }
    }

    /// The current values.
    pub fn snapshot(&self) -> QueueStats {
        self.reader().snapshot()
    }
}

/// A read-only handle on a queue's counters; cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct StatsReader {
    cells: Arc<CachePadded<Cells>>,
}

impl std::fmt::Debug for StatsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl StatsReader {
    /// The current values.
    pub fn snapshot(&self) -> QueueStats {
        let c = &self.cells.c;
        QueueStats {
            rx_packets: c[0].load(Relaxed),
            rx_bytes: c[1].load(Relaxed),
            rx_drops: c[2].load(Relaxed),
            rx_errors: c[3].load(Relaxed),
            tx_packets: c[4].load(Relaxed),
            tx_bytes: c[5].load(Relaxed),
            tx_drops: c[6].load(Relaxed),
            tx_errors: c[7].load(Relaxed),
            tx_copies: c[8].load(Relaxed),
            rx_no_buffer: c[9].load(Relaxed),
            tx_taken: c[10].load(Relaxed),
            tx_unsent_at_close: c[11].load(Relaxed),
            tx_fate_unknown: c[12].load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_and_reader_agree_across_threads() {
        let w = StatsWriter::default();
        let r = w.reader();
        let t = std::thread::spawn(move || {
            for _ in 0..1000 {
                w.rx(2, 128);
                w.tx(1, 64);
                w.add(Counter::TxErrors, 1);
            }
            w.snapshot()
        });
        let last = t.join().unwrap();
        assert_eq!(last, r.snapshot());
        assert_eq!(last.rx_packets, 2000);
        assert_eq!(last.rx_bytes, 128_000);
        assert_eq!(last.tx_packets, 1000);
        assert_eq!(last.tx_errors, 1000);
        let mut sum = last;
        sum.accumulate(&last);
        assert_eq!(sum.rx_bytes, 256_000);
        // 1000 frames of 64 bytes in 0.5 s: 2000 pps, (64 + 24) * 8 * 2000 bit/s on the wire.
        let r = last.tx_rates(&QueueStats::default(), 0.5);
        assert_eq!(r.pps, 2000.0);
        assert_eq!(r.bps_l1, 88.0 * 8.0 * 2000.0);
        assert_eq!(last.rx_rates(&last, 1.0), Rates::default());
    }

    #[test]
    fn a_counter_that_went_down_reads_as_no_traffic() {
        // dv and verbs move packets a queue error flushed from tx_packets to tx_drops.
        let before = QueueStats {
            tx_packets: 100,
            tx_bytes: 6400,
            ..QueueStats::default()
        };
        let after = QueueStats {
            tx_packets: 68,
            tx_bytes: 4352,
            tx_drops: 32,
            ..QueueStats::default()
        };
        assert_eq!(after.tx_rates(&before, 1.0), Rates::default());
    }
}
