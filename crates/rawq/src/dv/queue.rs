//! [`DvQueue`]: the mlx5 DV data path of one queue pair, implementing [`QueueOps`].
//!
//! It drives a [`QueueRings`] (from the control path, or from the [device model](super::model))
//! with a private [`PoolCache`]. A receive error completion that only fails its WQE (a length
//! error: see [`rx::fatal_syndrome`](super::rx::fatal_syndrome)) is counted in `rx_errors` and
//! the queue keeps running. The other error completions put a side of the queue in the error
//! state; the queue then returns every outstanding buffer to the pool, asks its [`Recover`]
//! hook to bring the device side back (verbs state transitions on hardware, a reset in the
//! model), restarts its counters, and reports what happened through [`QueueOps::take_error`] as
//! [`Error::Queue`]. Nothing is lost silently: every packet `tx_burst` takes out of the caller's
//! `Vec` is counted once, in `tx_packets` as soon as the burst hands it to the device (counted at
//! post, so the counters never lag behind what was sent for want of a `reclaim`), or in
//! `tx_drops` (dropped up front: runts, over-long chains, packets of another pool; or flushed by
//! a queue error, when it moves from `tx_packets` to `tx_drops`). `tx_burst` returns only the
//! packets handed to the device. A queue dropped with sends outstanding waits for its device,
//! stops its send queue and reads the CQ a last time; what is left moves from `tx_packets` to
//! `tx_unsent_at_close` (the device said how far it got: the model) or `tx_fate_unknown` (it
//! cannot: a NIC). See its `Drop`.

use std::any::Any;

use super::rings::QueueRings;
use super::rx::{Rx, RxErr};
use super::tx::{Tx, TxErr};
use super::wire::cqe;
use crate::error::{Error, Result};
use crate::mempool::{Mempool, PoolCache};
use crate::packet::Packet;
use crate::queue::{Queue, QueueOps};
use crate::stats::{Counter, StatsWriter};

/// How the data path gets a failed queue back: implemented by the control path (verbs state
/// transitions RESET → INIT → RTR → RTS) and by the device model (a reset), so that the data path
/// depends on neither.
///
/// Before calling a `recover_*` method the data path has written 0 to that queue's doorbell
/// record; after it returns `Ok`, the device's counters for that queue are 0 and it writes no
/// further CQEs for work posted before the call.
pub trait Recover: Send {
    /// Brings the send queue back to ready-to-send.
    ///
    /// # Errors
    /// Whatever the transition reports; the queue then stays out of service.
    fn recover_sq(&mut self) -> Result<()>;
    /// Brings the receive queue back to ready-to-receive.
    ///
    /// # Errors
    /// As [`Recover::recover_sq`].
    fn recover_rq(&mut self) -> Result<()>;
    /// Stops the device from touching the rings (before the queue's buffers go back to the pool
    /// on drop). Default: nothing.
    fn quiesce(&mut self) {}
    /// Stops the send queue for good, on drop, where the device can say how far it got: a
    /// command the device answers after it has stopped processing the queue (a ConnectX's
    /// modify-to-RESET), returning the WQE counter it reached (every WQE before it was carried
    /// out, none from it on ever will be). `None` (the default) where the device cannot say:
    /// what the queue still holds then has an unknown fate (`QueueStats::tx_fate_unknown`).
    fn stop_sq(&mut self) -> Option<u16> {
        None
    }
}

/// A recovery hook that cannot recover (the queue stays in error after an error completion).
#[cfg(test)]
#[derive(Debug, Default)]
pub struct NoRecover;

#[cfg(test)]
impl Recover for NoRecover {
    fn recover_sq(&mut self) -> Result<()> {
        Err(Error::Unsupported("no recovery hook for this queue".into()))
    }
    fn recover_rq(&mut self) -> Result<()> {
        Err(Error::Unsupported("no recovery hook for this queue".into()))
    }
}

/// Name of a CQE error syndrome.
pub fn syndrome_name(s: u8) -> &'static str {
    match s {
        cqe::SYND_LOCAL_LENGTH_ERR => "local length error",
        cqe::SYND_LOCAL_QP_OP_ERR => "local QP operation error",
        cqe::SYND_LOCAL_PROT_ERR => "local protection error",
        cqe::SYND_WR_FLUSH_ERR => "work request flushed",
        0x06 => "memory window bind error",
        0x10 => "bad response",
        0x11 => "local access error",
        0x12..=0x14 => "remote error",
        0x15 => "transport retry counter exceeded",
        0x16 => "RNR retry counter exceeded",
        0x22 => "remote aborted",
        _ => "unknown syndrome",
    }
}

/// The DV data path of one queue pair.
pub struct DvQueue {
    index: u16,
    tx: Tx,
    rx: Rx,
    cache: PoolCache,
    pool: Mempool,
    stats: StatsWriter,
    recover: Box<dyn Recover>,
    error: Option<Error>,
    tx_down: bool,
    rx_down: bool,
    /// Event-driven receive ([`DvQueue::with_rx_notify`]).
    notify: Option<super::notify::RxNotify>,
    // Declared last: dropped after the rings are no longer used.
    _keep: Box<dyn Any + Send>,
}

impl std::fmt::Debug for DvQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DvQueue")
            .field("index", &self.index)
            .field("tx_outstanding", &self.tx.outstanding())
            .field("stats", &self.stats.snapshot())
            .finish()
    }
}

impl DvQueue {
    /// Builds the data path over `rings`, receiving into `pool`, and posts the receive ring
    /// (writing its doorbell record): create it once the queue is ready to receive (RTR for a
    /// RAW_PACKET QP, RDY for a WQ), since libmlx5 never writes that record earlier.
    ///
    /// # Safety
    /// Every pointer in `rings` must name live ring memory of the geometry it describes (SQ,
    /// CQs, RQ, doorbell records, UAR register) that stays valid and is used by no other CPU-side
    /// code for as long as the returned queue exists (`keep` is dropped last and may own it), and
    /// `rings.lkey` must be a key registering the whole region of `pool` with the device.
    ///
    /// # Errors
    /// [`Error::Config`] / [`Error::Unsupported`] for a geometry the data path cannot use.
    pub unsafe fn new(
        index: u16,
        rings: QueueRings,
        pool: &Mempool,
        recover: Box<dyn Recover>,
        keep: Box<dyn Any + Send>,
    ) -> Result<DvQueue> {
        let tx = Tx::new(&rings.sq, &rings.tx_cq, rings.lkey, &rings.caps, pool)?;
        let rx = Rx::new(
            &rings.rq,
            &rings.rx_cq,
            rings.lkey,
            rings.caps.cqe_compression,
            pool,
        )?;
        let mut q = DvQueue {
            index,
            tx,
            rx,
            cache: pool.cache(),
            pool: pool.clone(),
            stats: StatsWriter::default(),
            recover,
            error: None,
            tx_down: false,
            rx_down: false,
            notify: None,
            _keep: keep,
        };
        q.rx.refill(&mut q.cache);
        Ok(q)
    }

    /// Wraps the queue as a [`Queue`].
    pub fn into_queue(self) -> Queue {
        let i = self.index;
        Queue::new(i, Box::new(self))
    }

    /// Lets the queue sleep until its receive CQ has work ([`Queue::rx_wait`]): `n` arms the
    /// receive CQ (rawq's own consumer index) and carries its completion events.
    pub fn with_rx_notify(mut self, n: super::notify::RxNotify) -> DvQueue {
        self.notify = Some(n);
        self
    }

    /// Bounds the segments of TSO super-frames by the port's largest frame (the port MTU, which
    /// the port checks for every other frame before the queue sees it).
    pub(crate) fn set_max_frame(&mut self, max_frame: Option<u32>) {
        self.tx.set_max_frame(max_frame);
    }

    /// Packets handed to the device and not yet completed.
    pub fn tx_outstanding(&self) -> u32 {
        self.tx.outstanding()
    }

    #[cold]
    #[inline(never)]
    fn tx_error(&mut self, e: TxErr) {
        // A queue that gave up after an error still sees the device flush the WQEs posted
        // behind it (WR_FLUSH_ERR, one per WQE: DPDK mlx5_tx.c `mlx5_tx_error_cqe_handle`
        // expects them); they were dropped with the queue, and the first error stays the one
        // reported.
        if self.tx_down && e.syndrome == cqe::SYND_WR_FLUSH_ERR {
            return;
        }
        // A device that wants the L2 header inline (ConnectX-4, some VF / e-switch modes; rawq
        // can only guess: see `control::min_inline_for`) refuses every send WQE without it as
        // a local QP operation error. When the very first sends fail that way and rawq gave no
        // inline header, say so and keep the send queue down instead of recovering into the
        // same error again.
        let no_inline = !self.tx.inlines_header() && e.syndrome == cqe::SYND_LOCAL_QP_OP_ERR;
        let never_sent = !self.tx.completed_any();
        self.tx.complete_before(e.wqe, &mut self.cache);
        // The packets of the WQE that failed: counted failed (`tx_errors`), not also dropped
        // with those flushed behind it, so that each packet taken is in one bucket
        // (`QueueStats::tx_ledger`; the fault campaign found it counted twice).
        let failed = self.tx.packets_at_head();
        self.tx.zero_dbrec();
        let give_up = no_inline && never_sent;
        let r = if give_up {
            Ok(())
        } else {
            self.recover.recover_sq()
        };
        let dropped = self.tx.reset(&self.stats, &mut self.cache);
        // tx_errors counts the packets that failed: none when the CQE named no WQE still
        // outstanding (counting the completion itself then counted a packet twice: the library
        // runs of seeds 5034, 5053, 5205, 5218, 5300 in the 30-minute campaign).
        let failed = failed.min(dropped);
        if failed > 0 {
            // The counters wrap: adding the two's complement subtracts.
            self.stats
                .add(Counter::TxDrops, (failed as u64).wrapping_neg());
            self.stats.add(Counter::TxErrors, failed as u64);
        }
        let dropped = dropped - failed;
        let outcome = match &r {
            Ok(()) if give_up => format!(
                "the device refused the first sends, which carry no inline L2 header: it \
                 probably requires one (rawq guesses that from the PCI id); set {}=18 and open \
                 the port again. The send queue stays down",
                super::control::MIN_INLINE_ENV
            ),
            Ok(()) if no_inline => format!(
                "the send queue was recovered (if this device requires the L2 header inline, \
                 set {}=18)",
                super::control::MIN_INLINE_ENV
            ),
            Ok(()) => "the send queue was recovered".to_string(),
            Err(err) => format!("recovering the send queue failed ({err}); it stays down"),
        };
        self.tx_down = give_up || r.is_err();
        self.error = Some(Error::Queue {
            queue: self.index,
            detail: format!(
                "send error completion: syndrome 0x{:02x} ({}), vendor syndrome 0x{:02x}, WQE \
                 {} (opcode 0x{:02x}); its packet(s) failed, {dropped} packet(s) behind it dropped; \
                 {outcome}",
                e.syndrome,
                syndrome_name(e.syndrome),
                e.vendor,
                e.wqe,
                e.opcode
            ),
        });
    }

    fn rx_error(&mut self, e: RxErr) {
        self.stats.add(Counter::RxErrors, 1);
        self.rx.zero_dbrec();
        let r = self.recover.recover_rq();
        self.rx.reset(&mut self.cache);
        let outcome = match &r {
            Ok(()) => {
                self.rx.refill(&mut self.cache);
                "the receive queue was recovered".to_string()
            }
            Err(err) => format!("recovering the receive queue failed ({err}); it stays down"),
        };
        self.rx_down = r.is_err();
        self.error = Some(Error::Queue {
            queue: self.index,
            detail: format!(
                "receive error completion: syndrome 0x{:02x} ({}), vendor syndrome 0x{:02x}, WQE \
                 {}; {outcome}",
                e.syndrome,
                syndrome_name(e.syndrome),
                e.vendor,
                e.wqe
            ),
        });
    }

    fn tx_poll(&mut self) {
        if let Some(e) = self.tx.poll(&self.stats, &mut self.cache) {
            self.tx_error(e);
        }
    }
}

impl QueueOps for DvQueue {
    fn rx_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        if self.rx_down {
            return 0;
        }
        let (n, err) = self.rx.poll(out, max, &self.stats, &mut self.cache);
        if let Some(e) = err {
            self.rx_error(e);
        } else {
            self.rx.refill(&mut self.cache);
        }
        n
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        self.tx_poll();
        if self.tx_down || pkts.is_empty() {
            return 0;
        }
        let n = self.tx.burst(pkts, &self.stats, &mut self.cache);
        if let Some(why) = self.tx.take_refused() {
            // A packet whose offload request this queue cannot carry out: dropped (counted in
            // tx_drops, its buffers home), not sent, and said.
            self.error.get_or_insert(Error::TxRefused {
                queue: format!("queue {}", self.index),
                reason: why,
            });
        }
        n
    }

    fn reclaim(&mut self) -> usize {
        let before = self.tx.done_count();
        self.tx_poll();
        if !self.tx_down {
            self.tx.flush_request();
        }
        self.tx.done_count().wrapping_sub(before) as usize
    }

    fn stats(&self) -> &StatsWriter {
        &self.stats
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// From the cache the send completions return buffers to (`Tx::poll`).
    fn alloc_burst(&mut self, out: &mut Vec<Packet>, n: usize) -> crate::Result<()> {
        self.cache.alloc_bulk(out, n)
    }

    fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// rawq's own `mlx5_arm_cq` ([`super::cq::CqArm`]) with the consumer index the data path
    /// reached, published first.
    fn rx_arm(&mut self) -> Result<()> {
        let Some(n) = &self.notify else {
            return Err(Error::Unsupported(
                "this DV queue has no completion channel for its receive CQ".into(),
            ));
        };
        self.rx.cq.publish();
        n.arm.arm(self.rx.cq.ci);
        Ok(())
    }

    fn rx_ready(&mut self) -> bool {
        self.error.is_some() || (!self.rx_down && self.rx.cq.peek().is_some())
    }

    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        self.notify.as_ref().map(|n| n.events.fd())
    }

    fn rx_ack(&mut self) -> Result<()> {
        if let Some(n) = &mut self.notify {
            let k = n.events.take()?;
            n.arm.events_taken(k);
        }
        Ok(())
    }
}

impl Drop for DvQueue {
    /// Sends were counted when posted: the queue first gives the device time to complete them
    /// (asking for a completion on the tail; up to `queue::DRAIN_ON_DROP`, or
    /// `queue::DRAIN_STALL` without progress). Then it stops the send queue (where the device
    /// can say how far it got, [`Recover::stop_sq`]), quiesces the device and reads the send CQ
    /// a last time: a device taken off its CPU in the middle of its work may have sent, and
    /// completed, after the wait gave up (campaign seeds 9855 and 9936 counted such frames
    /// both not sent and received). What is still outstanding then moves out of `tx_packets`:
    /// to `tx_unsent_at_close` where the device said it never sent it, else to
    /// `tx_fate_unknown`.
    fn drop(&mut self) {
        if !self.tx_down && self.tx.outstanding() > 0 {
            self.tx.flush_request();
            crate::queue::drain_sends(
                crate::queue::DRAIN_ON_DROP,
                crate::queue::DRAIN_STALL,
                || {
                    self.tx_poll();
                    if self.tx_down {
                        0
                    } else {
                        self.tx.outstanding()
                    }
                },
            );
        }
        let busy = !self.tx_down && self.tx.outstanding() > 0;
        let stopped = if busy { self.recover.stop_sq() } else { None };
        self.recover.quiesce();
        if busy {
            // The last read: completions the device wrote before it stopped. An error CQE
            // (a flush after the quiesce, on a NIC) ends it; what it names stays outstanding.
            let _ = self.tx.poll(&self.stats, &mut self.cache);
            if let Some(to) = stopped {
                self.tx.complete_to(to, &mut self.cache);
            }
        }
        let why = if stopped.is_some() {
            Counter::TxUnsentAtClose
        } else {
            Counter::TxFateUnknown
        };
        let left = self.tx.uncount_outstanding(&self.stats, why);
        if left > 0 {
            log::debug!(
                "queue {}: {left} send(s) outstanding at the close: {}",
                self.index,
                if stopped.is_some() {
                    "not sent (the device stopped before them)"
                } else {
                    "fate unknown (the device cannot say whether they were sent)"
                }
            );
        }
        self.tx.release_all(&mut self.cache);
        self.rx.release_all(&mut self.cache);
        self.cache.flush();
    }
}
