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
use crate::stats::StatsWriter;

/// How long teardown and recovery wait for flushed completions before resetting anyway.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_millis(200);

/// The state transitions recovery and teardown need. A trait so that tests can put a fake
/// device behind it.
pub(crate) trait QueueControl: Send {
    /// Moves the QP (and the receive WQ) to the error state: the device stops and completes
    /// everything posted with a flush.
    fn to_error(&self) -> Result<()>;
    /// Resets the QP (and WQ) — the device lets go of every posted buffer — and brings them back
    /// to RTS (RDY).
    fn reset(&self) -> Result<()>;
}

/// [`QueueControl`] over real verbs objects.
pub(crate) struct VerbsControl {
    pub(crate) qp: Arc<RawQp>,
    pub(crate) wq: Option<Arc<Wq>>,
    pub(crate) port: u8,
}

impl QueueControl for VerbsControl {
    fn to_error(&self) -> Result<()> {
        let r = self.qp.to_error();
        match &self.wq {
            Some(w) => r.and(w.to_error()),
            None => r,
        }
    }

    fn reset(&self) -> Result<()> {
        self.qp.reset(self.port)?;
        match &self.wq {
            Some(w) => w.reset(),
            None => Ok(()),
        }
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
    /// Set while a recovery waits for flushed completions.
    recovering: Option<Instant>,
    /// The memory registration the rings' lkey belongs to.
    _mr: Arc<dyn Any + Send + Sync>,
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
        };
        match q.rx.refill(&mut q.cache, true) {
            Some(e) => Err(e),
            None => Ok(q),
        }
    }

    fn note(&mut self, e: Option<Error>) {
        if let Some(e) = e {
            if matches!(e, Error::Queue { .. }) && self.recovering.is_none() {
                // An error completion: the QP (or WQ) is in the error state; make sure all of it
                // is, so that everything posted comes back flushed.
                let _ = self.ctl.to_error();
                self.recovering = Some(Instant::now());
            }
            self.error.get_or_insert(e);
        }
    }

    /// One step of a recovery; true when the queue is usable again.
    fn recover(&mut self) -> bool {
        let Some(since) = self.recovering else {
            return true;
        };
        let _ = self.tx.complete(&mut self.cache, &self.stats);
        self.rx.drain(&mut self.cache);
        let drained = self.tx.buffers_in_flight() == 0 && self.rx.posted() == 0;
        if !drained && since.elapsed() < FLUSH_TIMEOUT {
            return false;
        }
        match self.ctl.reset() {
            Ok(()) => {
                // The device owns none of the posted buffers any more.
                self.tx.forget_in_flight(&mut self.cache);
                self.rx.forget_posted(&mut self.cache);
                self.recovering = None;
                let e = self.rx.refill(&mut self.cache, true);
                self.note(e);
                true
            }
            Err(e) => {
                // Still in the error state: keep the buffers where they are, report, and try
                // again on a later burst.
                self.error.get_or_insert(e);
                self.recovering = Some(Instant::now());
                false
            }
        }
    }

    /// Buffers the device holds (for tests).
    #[cfg(test)]
    pub(crate) fn buffers_with_device(&self) -> u32 {
        self.tx.buffers_in_flight() + self.rx.posted()
    }
}

impl QueueOps for VerbsQueue {
    fn rx_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        if !self.recover() {
            return 0;
        }
        let done = self
            .rx
            .burst(out, max, &mut self.cache, &self.pool, &self.stats);
        self.note(done.error);
        done.got
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        if !self.recover() {
            return 0;
        }
        let (n, e) = self
            .tx
            .burst(pkts, &mut self.cache, &self.pool, &self.stats);
        self.note(e);
        n
    }

    fn reclaim(&mut self) -> usize {
        let done = self.tx.complete(&mut self.cache, &self.stats);
        self.note(done.error);
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
}

impl Drop for VerbsQueue {
    fn drop(&mut self) {
        // Flush everything the device holds so the buffers go home before the QP goes.
        let _ = self.ctl.to_error();
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
        // ours. If even the reset fails they stay marked in use, and the pool leaks its region
        // rather than unmapping memory a device might still write.
        if self.ctl.reset().is_ok() {
            self.tx.forget_in_flight(&mut self.cache);
            self.rx.forget_posted(&mut self.cache);
        }
    }
}
