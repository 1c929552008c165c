//! The transmit side of a port MTU ([`PortBuilder::mtu`](crate::PortBuilder::mtu)): a frame
//! longer than the port's largest frame is refused before it reaches the backend, as a Linux
//! netdev refuses it (net/core/dev.c `is_skb_forwardable`, counted in the sender's drops) and as
//! an mlx5 port would drop it on the wire side. Here it is dropped (its buffers go home), counted
//! in `tx_errors`, said by [`Queue::take_error`](crate::Queue::take_error), and never counted as
//! sent. Only ports opened with an MTU get this wrapper: the others keep their direct path.

use crate::error::Error;
use crate::mempool::Mempool;
use crate::packet::Packet;
use crate::queue::{Queue, QueueOps};
use crate::stats::{Counter, StatsWriter};

/// Wraps each queue in an MTU check when `max_frame` is set.
pub(crate) fn guard(queues: Vec<Queue>, max_frame: Option<u32>) -> Vec<Queue> {
    let Some(max) = max_frame else {
        return queues;
    };
    queues
        .into_iter()
        .map(|q| {
            let (index, inner) = q.into_ops();
            Queue::new(
                index,
                Box::new(MtuGuard {
                    inner,
                    max: max as usize,
                    held: Vec::new(),
                    error: None,
                }),
            )
        })
        .collect()
}

struct MtuGuard {
    inner: Box<dyn QueueOps>,
    max: usize,
    /// The packets behind a refused one while the ones in front of it are sent (kept for its
    /// capacity: no allocation after the first refusal).
    held: Vec<Packet>,
    error: Option<Error>,
}

impl MtuGuard {
    fn refuse(&mut self, p: Packet) {
        self.inner.stats().add(Counter::TxErrors, 1);
        self.error = Some(Error::Config(format!(
            "transmit: a frame of {} bytes is above the port's largest frame of {} bytes \
             (MTU {} + 18 bytes of Ethernet header and VLAN tag); it was dropped, not sent. \
             Send smaller frames or open the port with a larger PortBuilder::mtu",
            p.len(),
            self.max,
            self.max - crate::config::MTU_L2_OVERHEAD as usize
        )));
        drop(p);
    }
}

impl QueueOps for MtuGuard {
    fn rx_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        self.inner.rx_burst(out, max)
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        let mut sent = 0;
        loop {
            let Some(bad) = pkts.iter().position(|p| too_long(p, self.max)) else {
                return sent + self.inner.tx_burst(pkts);
            };
            if bad > 0 {
                // Send what is in front of the refused frame; stop if the device took less.
                self.held.extend(pkts.drain(bad..));
                let n = self.inner.tx_burst(pkts);
                sent += n;
                let all = pkts.is_empty();
                pkts.append(&mut self.held);
                if !all {
                    return sent;
                }
            }
            let p = pkts.remove(0);
            self.refuse(p);
        }
    }

    fn reclaim(&mut self) -> usize {
        self.inner.reclaim()
    }

    fn stats(&self) -> &StatsWriter {
        self.inner.stats()
    }

    fn pool(&self) -> &Mempool {
        self.inner.pool()
    }

    fn alloc_burst(&mut self, out: &mut Vec<Packet>, n: usize) -> crate::Result<()> {
        self.inner.alloc_burst(out, n)
    }

    fn take_error(&mut self) -> Option<Error> {
        self.inner.take_error().or_else(|| self.error.take())
    }

    // Event-driven receive is the wrapped queue's.
    fn rx_arm(&mut self) -> crate::Result<()> {
        self.inner.rx_arm()
    }

    fn rx_ready(&mut self) -> bool {
        self.inner.rx_ready()
    }

    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.rx_fd()
    }

    fn rx_ack(&mut self) -> crate::Result<()> {
        self.inner.rx_ack()
    }
}

/// Whether `p` would put a frame longer than `max` bytes on the wire. A TSO super-frame is
/// cut into segments of its header plus at most `mss` payload bytes: those must fit, not the
/// super-frame (a request the backend cannot parse is left to the backend to refuse, with its
/// reason).
fn too_long(p: &Packet, max: usize) -> bool {
    match p.offload.tso_mss {
        Some(mss) => crate::packet::tso_header_len(p, mss, u32::MAX)
            .is_ok_and(|hdr| hdr + mss as usize > max),
        None => p.len() > max,
    }
}
