//! One verbs queue pair as a burst queue: the [`Rx`] and [`Tx`] halves, the queue's pool cache
//! and counters, and the recovery and teardown that move the QP (or WQ) through its states.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::qp::RawQp;
use super::rx::Rx;
use super::tx::Tx;
use super::wq::Wq;
use crate::error::{Error, Result};
use crate::mempool::{Mempool, PoolCache};
use crate::packet::Packet;
use crate::queue::QueueOps;
use crate::stats::{Counter, StatsWriter};

/// How long teardown and recovery wait for flushed completions before resetting anyway.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_millis(200);

/// Which half of a queue an error stopped, and a recovery moves through its states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The send queue (the QP).
    Send,
    /// The receive queue (the WQ).
    Recv,
    /// Both: a QP that receives on its own RQ shares one state between the halves.
    Both,
}

impl Side {
    fn send(self) -> bool {
        self != Side::Recv
    }

    fn recv(self) -> bool {
        self != Side::Send
    }

    fn and(self, other: Side) -> Side {
        if self == other {
            self
        } else {
            Side::Both
        }
    }
}

/// The state transitions recovery and teardown need. A trait so that tests can put a fake
/// device behind it.
pub(crate) trait QueueControl: Send {
    /// Moves `side` to the error state: the device stops it and completes everything posted
    /// to it with a flush.
    fn to_error(&self, side: Side) -> Result<()>;
    /// Resets `side` — the device lets go of every buffer posted to it — and brings it back to
    /// RTS (RDY).
    fn reset(&self, side: Side) -> Result<()>;
    /// Whether send and receive fail and recover apart (a receive WQ beside the QP), as on
    /// mlx5, where an error CQE moves only the SQ or only the RQ to the error state (Linux
    /// `drivers/net/ethernet/mellanox/mlx5/core/en/reporter_tx.c` recovers the SQ alone,
    /// `reporter_rx.c` the RQ alone). Otherwise every error is [`Side::Both`].
    fn separate_sides(&self) -> bool {
        false
    }
}

/// [`QueueControl`] over real verbs objects.
pub(crate) struct VerbsControl {
    pub(crate) qp: Arc<RawQp>,
    pub(crate) wq: Option<Arc<Wq>>,
    pub(crate) port: u8,
}

impl QueueControl for VerbsControl {
    fn to_error(&self, side: Side) -> Result<()> {
        let mut r = Ok(());
        if side.send() || self.wq.is_none() {
            r = self.qp.to_error();
        }
        match &self.wq {
            Some(w) if side.recv() => r.and(w.to_error()),
            _ => r,
        }
    }

    fn reset(&self, side: Side) -> Result<()> {
        if side.send() || self.wq.is_none() {
            self.qp.reset(self.port)?;
        }
        match &self.wq {
            Some(w) if side.recv() => w.reset(),
            _ => Ok(()),
        }
    }

    fn separate_sides(&self) -> bool {
        self.wq.is_some()
    }
}

pub(crate) struct VerbsQueue {
    rx: Rx,
    tx: Tx,
    ctl: Box<dyn QueueControl>,
    cache: PoolCache,
    pool: Mempool,
    stats: StatsWriter,
    error: Option<Error>,
    /// Set while a recovery waits for flushed completions: since when, and of which side.
    recovering: Option<(Instant, Side)>,
    /// The memory registration the rings' lkey belongs to.
    _mr: Arc<dyn Any + Send + Sync>,
    /// The receive CQ, when it has a completion channel (event-driven receive).
    notify_cq: Option<Arc<super::cq::Cq>>,
}

impl VerbsQueue {
    /// Assembles a queue and fills its receive ring.
    ///
    /// # Errors
    /// What the first `ibv_post_recv` reports.
    pub(crate) fn new(
        rx: Rx,
        tx: Tx,
        ctl: Box<dyn QueueControl>,
        pool: &Mempool,
        mr: Arc<dyn Any + Send + Sync>,
    ) -> Result<VerbsQueue> {
        let mut q = VerbsQueue {
            rx,
            tx,
            ctl,
            cache: pool.cache(),
            pool: pool.clone(),
            stats: StatsWriter::default(),
            error: None,
            recovering: None,
            _mr: mr,
            notify_cq: None,
        };
        match q.rx.refill(&mut q.cache, true) {
            Some(e) => Err(e),
            None => Ok(q),
        }
    }

    fn note(&mut self, e: Option<Error>, side: Side) {
        if let Some(e) = e {
            if matches!(e, Error::Queue { .. }) {
                // An error completion: that side is in the error state; make sure all of it is,
                // so that everything posted to it comes back flushed.
                let side = if self.ctl.separate_sides() {
                    side
                } else {
                    Side::Both
                };
                match self.recovering {
                    None => {
                        let _ = self.ctl.to_error(side);
                        self.recovering = Some((Instant::now(), side));
                    }
                    Some((since, s)) if s.and(side) != s => {
                        let _ = self.ctl.to_error(side);
                        self.recovering = Some((since, s.and(side)));
                    }
                    Some(_) => {}
                }
            }
            self.error.get_or_insert(e);
        }
    }

    /// One step of a recovery; the side still stopped, `None` when the queue is whole again.
    fn recover(&mut self) -> Option<Side> {
        let (since, side) = self.recovering?;
        if side.send() {
            let _ = self.tx.complete(&mut self.cache, &self.stats);
        }
        if side.recv() {
            self.rx.drain(&mut self.cache);
        }
        let drained = (!side.send() || self.tx.buffers_in_flight() == 0)
            && (!side.recv() || self.rx.posted() == 0);
        if !drained && since.elapsed() < FLUSH_TIMEOUT {
            return Some(side);
        }
        match self.ctl.reset(side) {
            Ok(()) => {
                // The device owns none of the buffers posted to that side any more.
                self.recovering = None;
                if side.send() {
                    // WRs whose flush never came (the wait timed out) were not sent either:
                    // count them as dropped, never as sent.
                    self.tx.drop_outstanding(&self.stats);
                    self.tx.forget_in_flight(&mut self.cache);
                }
                if side.recv() {
                    self.rx.forget_posted(&mut self.cache);
                    let e = self.rx.refill(&mut self.cache, true);
                    self.note(e, Side::Recv);
                }
                self.recovering.map(|(_, s)| s)
            }
            Err(e) => {
                // Still in the error state: keep the buffers where they are, report, and try
                // again on a later burst.
                self.error.get_or_insert(e);
                self.recovering = Some((Instant::now(), side));
                Some(side)
            }
        }
    }

    /// Buffers the device holds (for tests).
    #[cfg(test)]
    pub(crate) fn buffers_with_device(&self) -> u32 {
        self.tx.buffers_in_flight() + self.rx.posted()
    }
}

impl VerbsQueue {
    /// Event-driven receive through `rx_cq`'s completion channel (the CQ the receive side
    /// polls; without a channel the queue cannot notify).
    pub(crate) fn with_notify_cq(mut self, rx_cq: Arc<super::cq::Cq>) -> VerbsQueue {
        if rx_cq.channel().is_some() {
            self.notify_cq = Some(rx_cq);
        }
        self
    }
}

impl QueueOps for VerbsQueue {
    fn rx_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        if self.recover().is_some_and(Side::recv) {
            return 0;
        }
        let done = self
            .rx
            .burst(out, max, &mut self.cache, &self.pool, &self.stats);
        self.note(done.error, Side::Recv);
        done.got
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        if self.recover().is_some_and(Side::send) {
            return 0;
        }
        let (n, e) = self
            .tx
            .burst(pkts, &mut self.cache, &self.pool, &self.stats);
        self.note(e, Side::Send);
        n
    }

    fn reclaim(&mut self) -> usize {
        let done = self.tx.complete(&mut self.cache, &self.stats);
        self.note(done.error, Side::Send);
        done.freed
    }

    fn stats(&self) -> &StatsWriter {
        &self.stats
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// `ibv_req_notify_cq` on the receive CQ. On mlx5 the arm carries the provider's
    /// consumer index, and completions already past it raise the event at once (PRM "CQ
    /// arming"; libmlx5 `mlx5_arm_cq`), so the re-poll of the documented order finds them.
    fn rx_arm(&mut self) -> Result<()> {
        match &self.notify_cq {
            Some(cq) => cq.req_notify(),
            None => Err(Error::Unsupported(
                "this verbs queue's receive CQ has no completion channel \
                 (ibv_create_comp_channel failed at open)"
                    .into(),
            )),
        }
    }

    /// Verbs cannot look at a completion without taking it: the re-poll is the caller's
    /// `rx_burst` (see `rx_arm` for why no completion is missed).
    fn rx_ready(&mut self) -> bool {
        self.error.is_some()
    }

    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        self.notify_cq.as_ref()?.channel().map(|c| c.fd())
    }

    fn rx_ack(&mut self) -> Result<()> {
        if let Some(ch) = self.notify_cq.as_ref().and_then(|cq| cq.channel()) {
            ch.take_events()?;
        }
        Ok(())
    }
}

impl Drop for VerbsQueue {
    fn drop(&mut self) {
        // Sends were counted when posted: the device is first given time to complete them
        // (every burst's last WR asks for a completion), as dv's queue does.
        crate::queue::drain_sends(
            crate::queue::DRAIN_ON_DROP,
            crate::queue::DRAIN_STALL,
            || match self.tx.complete(&mut self.cache, &self.stats).error {
                Some(_) => 0,
                None => self.tx.outstanding(),
            },
        );
        // What the device did not complete is flushed below (WR_FLUSH_ERR, counted in
        // tx_drops by `complete`); a WR flushed at the close may or may not have reached the
        // wire (the NIC may have fetched it), so those are moved to `tx_fate_unknown` at the
        // end, not counted dropped.
        let drops0 = self.stats.snapshot().tx_drops;
        self.flush_at_close();
        let flushed = self.stats.snapshot().tx_drops.wrapping_sub(drops0);
        if flushed > 0 {
            self.stats.add(Counter::TxDrops, flushed.wrapping_neg());
            self.stats.add(Counter::TxFateUnknown, flushed);
        }
    }
}

impl VerbsQueue {
    /// Flushes everything the device holds so the buffers go home before the QP goes.
    fn flush_at_close(&mut self) {
        let _ = self.ctl.to_error(Side::Both);
        let start = Instant::now();
        loop {
            let _ = self.tx.complete(&mut self.cache, &self.stats);
            self.rx.drain(&mut self.cache);
            if self.tx.buffers_in_flight() == 0 && self.rx.posted() == 0 {
                return;
            }
            if start.elapsed() > FLUSH_TIMEOUT {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Not all flushed: a reset QP/WQ no longer touches its buffers, after which they are
        // ours (the sends among them counted like the flushed ones). If even the reset fails
        // they stay marked in use, and the pool leaks its region rather than unmapping memory
        // a device might still write.
        if self.ctl.reset(Side::Both).is_ok() {
            self.tx.drop_outstanding(&self.stats);
            self.tx.forget_in_flight(&mut self.cache);
            self.rx.forget_posted(&mut self.cache);
        }
    }
}
