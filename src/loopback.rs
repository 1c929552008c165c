//! A software port: what is sent on queue *i* is received on queue *i*.
//!
//! The smallest backend, in the spirit of smoltcp's `Loopback`: it exercises the queue API,
//! packet ownership and counters with no device at all. Packets move through a bounded ring
//! without copies; a full ring refuses further packets exactly as a device ring would.

use std::collections::VecDeque;

use crate::config::PortConfig;
use crate::mempool::Mempool;
use crate::packet::Packet;
use crate::queue::{Queue, QueueOps};
use crate::stats::StatsWriter;
use crate::Result;

struct LoopbackQueue {
    ring: VecDeque<Packet>,
    cap: usize,
    pool: Mempool,
    stats: StatsWriter,
}

impl QueueOps for LoopbackQueue {
    fn rx_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        let n = max.min(self.ring.len());
        let mut bytes = 0u64;
        for p in self.ring.drain(..n) {
            bytes += p.len() as u64;
            out.push(p);
        }
        self.stats.rx(n as u64, bytes);
        n
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        let n = pkts.len().min(self.cap - self.ring.len());
        let mut bytes = 0u64;
        for p in pkts.drain(..n) {
            bytes += p.len() as u64;
            self.ring.push_back(p);
        }
        self.stats.tx(n as u64, bytes);
        n
    }

    fn stats(&self) -> &StatsWriter {
        &self.stats
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }
}

pub(crate) fn open(cfg: &PortConfig, pool: &Mempool) -> Result<Vec<Queue>> {
    Ok((0..cfg.queues)
        .map(|i| {
            let cap = cfg.rx_ring as usize;
            Queue::new(
                i,
                Box::new(LoopbackQueue {
                    ring: VecDeque::with_capacity(cap),
                    cap,
                    pool: pool.clone(),
                    stats: StatsWriter::default(),
                }),
            )
        })
        .collect())
}
