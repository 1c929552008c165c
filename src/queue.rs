//! The burst queue API every backend implements.
//!
//! A [`Queue`] is one receive/transmit queue pair of a [`Port`](crate::Port). Both calls are
//! batch calls in the ixy / DPDK spirit: they never block, and they say how many packets they
//! handled:
//!
//! * [`Queue::rx_burst`] appends up to `max` received packets to a caller-owned `Vec`.
//! * [`Queue::tx_burst`] takes packets from the **front** of a caller-owned `Vec` and hands them to
//!   the device, and counts only what the device got; what did not fit stays in the `Vec`, in
//!   order, for the caller to retry or drop ("better to drop than to accumulate latency").
//!
//! Reuse the same `Vec`s across bursts (`Vec::with_capacity(burst)` once): a steady-state burst
//! loop then allocates nothing.

use crate::error::Error;
use crate::mempool::Mempool;
use crate::packet::Packet;
use crate::stats::{QueueStats, StatsReader, StatsWriter};

/// What a backend implements for one queue pair. Users call it through [`Queue`].
pub trait QueueOps: Send {
    /// See [`Queue::rx_burst`].
    fn rx_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> usize;
    /// See [`Queue::tx_burst`].
    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize;
    /// Reclaims completed transmit buffers without sending; returns how many were reclaimed.
    fn reclaim(&mut self) -> usize {
        0
    }
    /// The queue's counters.
    fn stats(&self) -> &StatsWriter;
    /// The pool this queue receives into.
    fn pool(&self) -> &Mempool;
    /// See [`Queue::alloc_burst`]. Backends whose completions return buffers to a cache of the
    /// queue's own allocate from that cache, so that a sender's buffers go round without the
    /// pool's shared stack; the default takes from the calling thread's cache of the pool.
    fn alloc_burst(&mut self, out: &mut Vec<Packet>, n: usize) -> crate::Result<()> {
        self.pool().alloc_bulk(out, n)
    }
    /// The last data-path error (an error completion and what was done about it), cleared by
    /// reading.
    fn take_error(&mut self) -> Option<Error> {
        None
    }
}

/// One receive/transmit queue pair of a port. `Send`: move it to the thread that drives it.
pub struct Queue {
    index: u16,
    ops: Box<dyn QueueOps>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("index", &self.index)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Queue {
    /// Wraps a backend queue (for backends and test doubles).
    pub fn new(index: u16, ops: Box<dyn QueueOps>) -> Queue {
        Queue { index, ops }
    }

    /// The backend queue behind this one, for wrapping it (see [`crate::mtu`]).
    pub(crate) fn into_ops(self) -> (u16, Box<dyn QueueOps>) {
        (self.index, self.ops)
    }

    /// Index of this queue on its port.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Appends up to `max` received packets to `out`; returns how many. Never blocks.
    #[inline]
    pub fn rx_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        self.ops.rx_burst(out, max)
    }

    /// Sends packets from the front of `pkts`; returns how many were handed to the device (no
    /// more: a packet counted here is one the device got). Packets not taken (the ring was full)
    /// stay in `pkts` in their order. A packet the backend can never send (e.g. a chained packet
    /// on AF_XDP) is removed from `pkts`, dropped and counted (`tx_drops` or `tx_errors`), and
    /// not included in the returned count. Never blocks.
    ///
    /// The transmit counters ([`Queue::stats`]) are current when this returns, with no
    /// [`Queue::reclaim`] needed: DV and the model count a packet in `tx_packets` when the burst
    /// hands it to the device (counted at post, as DPDK's mlx5 PMD does; a packet a queue error
    /// then flushes moves from `tx_packets` to `tx_drops`), ibverbs counts what `ibv_post_send`
    /// accepted (a work request that then fails or is flushed moves to `tx_errors` / `tx_drops`), and AF_XDP counts what the kernel completed, taking completions at the start of
    /// each burst and after each kick (in copy mode the kernel completes during the kick).
    #[inline]
    pub fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        self.ops.tx_burst(pkts)
    }

    /// Reclaims completed transmit buffers; returns how many.
    #[inline]
    pub fn reclaim(&mut self) -> usize {
        self.ops.reclaim()
    }

    /// Appends `n` fresh packets from this queue's pool to `out`, all or none. Where the backend
    /// returns completed transmit buffers to a cache of the queue's own (DV, AF_XDP), they come
    /// from that cache: a send loop's buffers then go round without the pool's locked shared
    /// stack. Call it from the thread that drives the queue.
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when the pool has fewer than `n` free buffers.
    #[inline]
    pub fn alloc_burst(&mut self, out: &mut Vec<Packet>, n: usize) -> crate::Result<()> {
        self.ops.alloc_burst(out, n)
    }

    /// A snapshot of the counters. Transmit counters do not wait for a [`Queue::reclaim`]: see
    /// [`Queue::tx_burst`] for when each backend counts a packet as sent.
    pub fn stats(&self) -> QueueStats {
        self.ops.stats().snapshot()
    }

    /// A handle another thread can read the counters through.
    pub fn stats_reader(&self) -> StatsReader {
        self.ops.stats().reader()
    }

    /// The pool this queue receives into.
    pub fn pool(&self) -> &Mempool {
        self.ops.pool()
    }

    /// The last data-path error, if any (cleared by reading).
    pub fn take_error(&mut self) -> Option<Error> {
        self.ops.take_error()
    }
}
