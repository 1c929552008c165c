//! The transmit side of a port MTU ([`PortBuilder::mtu`](crate::PortBuilder::mtu)): a frame
//! longer than the port's largest frame is refused before it reaches the backend, as a Linux
//! netdev refuses it (net/core/dev.c `is_skb_forwardable`, counted in the sender's drops) and as
//! an mlx5 port would drop it on the wire side. Here it is dropped (its buffers go home), counted
//! in `tx_errors`, said by [`Queue::take_error`](crate::Queue::take_error), and never counted as
//! sent. Only ports opened with an MTU get this wrapper: the others keep their direct path.
//!
//! A TSO super-frame is judged by its segments, and by the backend: it parses the header for
//! the device anyway, and checks the segments with [`check_tso_segments`], refusing the
//! request as it refuses any TSO request it cannot carry out (dropped, counted in
//! `tx_drops`, said). The header is parsed once.

use crate::error::{Error, TxRefusal};
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
        self.error = Some(Error::TxRefused {
            queue: "transmit".into(),
            reason: TxRefusal::FrameTooLong {
                len: p.len(),
                max_frame: self.max,
            },
        });
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
/// super-frame, and the backend checks them ([`check_tso_segments`]) when it parses the header
/// for the device, so that the header is parsed once.
fn too_long(p: &Packet, max: usize) -> bool {
    p.offload.tso_mss.is_none() && p.len() > max
}

/// Checks that the segments of a TSO super-frame with a `hdr`-byte header and MSS `mss` (each
/// its header plus at most `mss` payload bytes) fit the port's largest frame `max_frame`
/// (`None`: the port has no MTU). A backend calls it with the header length it parsed for the
/// device; the error says what to change.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) fn check_tso_segments(
    hdr: usize,
    mss: u16,
    max_frame: Option<u32>,
) -> Result<(), TxRefusal> {
    let Some(max) = max_frame else {
        return Ok(());
    };
    let seg = hdr + mss as usize;
    if seg <= max as usize {
        return Ok(());
    }
    Err(TxRefusal::TsoSegmentTooLong {
        segment: seg,
        header: hdr,
        mss,
        max_frame: max,
    })
}

#[cfg(test)]
mod tests {
    use super::check_tso_segments;

    #[test]
    fn tso_segments_may_fill_the_largest_frame_but_not_pass_it() {
        assert_eq!(check_tso_segments(66, 1452, None), Ok(()));
        assert_eq!(check_tso_segments(66, 1452, Some(1518)), Ok(()));
        let e = check_tso_segments(66, 1453, Some(1518))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1519 bytes") && e.contains("MTU 1500") && e.contains("at most 1452"),
            "{e}"
        );
    }
}
