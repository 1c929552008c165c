//! A software port: what is sent on queue *i* is received on queue *i*.
//!
//! The smallest backend, in the spirit of smoltcp's `Loopback`: it exercises the queue API,
//! packet ownership and counters with no device at all. Packets move through a bounded ring
//! without copies; a full ring refuses further packets exactly as a device ring would.

use std::collections::VecDeque;

use crate::backend::{Control, Opened};
use crate::config::{Offloads, PortConfig, PortInfo};
use crate::error::{Error, Result};
use crate::flow::Rule;
use crate::mempool::Mempool;
use crate::packet::Packet;
use crate::queue::{Queue, QueueOps};
use crate::stats::StatsWriter;

struct LoopbackQueue {
    ring: VecDeque<Packet>,
    cap: usize,
    pool: Mempool,
    stats: StatsWriter,
    /// Why a packet was refused (a TSO request: this port does not segment), for `take_error`.
    error: Option<crate::Error>,
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
        let (mut bytes, mut refused) = (0u64, 0);
        for mut p in pkts.drain(..n) {
            if p.offload.tso_mss.is_some() {
                // No segmentation here: refused, counted, said; the buffer goes home.
                refused += 1;
                self.error.get_or_insert(crate::Error::TxRefused {
                    queue: "loopback".into(),
                    reason: crate::error::TxRefusal::TsoNotSegmented {
                        by: "the loopback backend",
                    },
                });
                continue;
            }
            if let Err(why) = crate::packet::insert_vlan(&mut p) {
                refused += 1;
                self.error.get_or_insert(crate::Error::TxRefused {
                    queue: "loopback".into(),
                    reason: why,
                });
                continue;
            }
            let (l3, l4) = (p.offload.l3_csum, p.offload.l4_csum);
            if l3 | l4 {
                // Checksum requests done in software, as a device would fill them.
                crate::packet::fill_packet_checksums(&mut p, l3, l4);
            }
            bytes += p.len() as u64;
            self.ring.push_back(p);
        }
        if refused > 0 {
            self.stats
                .add(crate::stats::Counter::TxDrops, refused as u64);
        }
        self.stats.tx((n - refused) as u64, bytes);
        n - refused
    }

    fn take_error(&mut self) -> Option<crate::Error> {
        self.error.take()
    }

    fn stats(&self) -> &StatsWriter {
        &self.stats
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }
}

/// Opens a loopback port (see [`crate::Port::builder`]).
pub(crate) fn open(cfg: &PortConfig, pool: &Mempool) -> Result<Opened> {
    // VLAN stripping only where the tag can reach `RxMeta`: a device must take it off.
    if cfg.vlan_strip {
        return Err(Error::Unsupported(
            "VLAN stripping is done by the dv, verbs and model backends and AF_XDP only \
             (loopback has no device to do it): open without vlan_strip and read the tag \
             from the frame"
                .into(),
        ));
    }
    if !cfg.rules.is_empty() {
        return Err(Error::Unsupported(
            "the loopback backend has no flow steering; open it without rules".into(),
        ));
    }
    let queues = (0..cfg.queues)
        .map(|i| {
            let cap = cfg.rx_ring as usize;
            Queue::new(
                i,
                Box::new(LoopbackQueue {
                    ring: VecDeque::with_capacity(cap),
                    cap,
                    pool: pool.clone(),
                    stats: StatsWriter::default(),
                    error: None,
                }),
            )
        })
        .collect();
    let info = PortInfo {
        backend: "loopback",
        device: "loopback".into(),
        mode: "software".into(),
        queues: cfg.queues,
        offloads: Offloads::LOOPBACK,
    };
    Ok((queues, info, Box::new(NoSteering)))
}

/// The control objects of a backend without flow steering (loopback).
struct NoSteering;

impl Control for NoSteering {
    fn add_rule(&mut self, _: u64, _: &Rule) -> Result<()> {
        Err(Error::Unsupported(
            "the loopback backend has no flow steering: every frame sent on a queue comes back \
             on it, so there is nothing for a rule to steer"
                .into(),
        ))
    }

    fn remove_rule(&mut self, id: u64) -> Result<()> {
        Err(Error::RuleHandle(format!(
            "the loopback backend has no rules (rule {id})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use crate::error::{Error, TxRefusal};
    use crate::{Backend, Port};

    /// What the loopback backend cannot do is refused with a typed reason an embedder can
    /// match, and a message that says the fix.
    #[test]
    fn refusals_are_typed() {
        let mut port = Port::builder(Backend::Loopback).queues(1).open().unwrap();
        let q = port.queue(0).unwrap();
        let mut v = Vec::new();
        q.alloc_burst(&mut v, 1).unwrap();
        v[0].copy_from_slice(&[0u8; 60]).unwrap();
        v[0].offload.tso_mss = Some(1000);
        assert_eq!(q.tx_burst(&mut v), 0);
        let e = q.take_error().expect("the refusal is said");
        assert!(
            matches!(
                &e,
                Error::TxRefused {
                    reason: TxRefusal::TsoNotSegmented { .. },
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("send MSS-sized frames"), "{e}");

        // A tag to insert into a frame that has one already.
        let mut v = Vec::new();
        q.alloc_burst(&mut v, 1).unwrap();
        let mut f = [0u8; 60];
        f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        v[0].copy_from_slice(&f).unwrap();
        v[0].offload.vlan_insert = Some(7);
        assert_eq!(q.tx_burst(&mut v), 0);
        let e = q.take_error().expect("the refusal is said");
        assert!(
            matches!(
                &e,
                Error::TxRefused {
                    reason: TxRefusal::VlanAlreadyTagged { ethertype: 0x8100 },
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
