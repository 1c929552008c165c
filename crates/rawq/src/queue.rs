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
//!
//! # Sleeping until packets arrive
//!
//! A queue need not spin a core. [`Queue::rx_wait`] sleeps until the receive side has work or a
//! timeout passes; [`Queue::rx_fd`] gives a descriptor to put in `poll(2)`, epoll or tokio's
//! `AsyncFd` instead. Both follow one order, which loses no wake-up:
//!
//! 1. **drain**: call [`Queue::rx_burst`] until it returns 0;
//! 2. **arm**: [`Queue::rx_arm`] asks the device to notify the next receive completion (on mlx5
//!    the arm carries the consumer index, so a completion already past it notifies at once);
//! 3. **re-poll**: call [`Queue::rx_burst`] once more: a packet that arrived between 1 and 2 is
//!    taken here (if there is one, go back to 1; the arm may later wake you once for nothing);
//! 4. **sleep** on the fd (or let [`Queue::rx_wait`] do 2-4), then [`Queue::rx_ack`] to take the
//!    notification that woke you, and go back to 1.
//!
//! A wake-up may be spurious (a notification for packets already taken in step 3): after it
//! `rx_burst` may return 0. A backend that cannot notify (loopback) refuses the arm with
//! [`Error::Unsupported`]: nothing ever waits on a queue that could never wake it.
//!
//! | backend | what notifies | arm |
//! |---|---|---|
//! | `xdp` | the AF_XDP socket's fd (`poll` POLLIN: the rx ring is not empty) | tops up the fill ring and kicks the driver when it asks (`need_wakeup`) |
//! | `verbs` | a completion channel per queue, on its receive CQ | `ibv_req_notify_cq` |
//! | `dv` | a completion channel made through verbs | rawq's own `mlx5_arm_cq`: arm word in the CQ doorbell record, then the CQ doorbell on the UAR |
//! | `model` | an eventfd the device signals when an armed CQ gets a CQE | as `dv` |
//! | `loopback` | — | [`Error::Unsupported`] |

use std::os::fd::{BorrowedFd, RawFd};
use std::time::{Duration, Instant};

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
    /// See [`Queue::rx_arm`]. The default: this backend cannot notify.
    fn rx_arm(&mut self) -> crate::Result<()> {
        Err(Error::Unsupported(
            "this backend cannot notify a waiting receiver (no completion channel or fd); \
             poll rx_burst instead"
                .into(),
        ))
    }
    /// Whether a received packet (or error completion) is waiting, without taking it.
    fn rx_ready(&mut self) -> bool {
        false
    }
    /// The descriptor that becomes readable once an armed queue has work; `None` if the
    /// backend cannot notify.
    fn rx_fd(&self) -> Option<RawFd> {
        None
    }
    /// Takes the notifications that made [`QueueOps::rx_fd`] readable, without blocking.
    fn rx_ack(&mut self) -> crate::Result<()> {
        Ok(())
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
        let before = pkts.len();
        let n = self.ops.tx_burst(pkts);
        // What left the Vec: taken, or dropped at once (see `QueueStats::tx_ledger`).
        let gone = before.saturating_sub(pkts.len()) as u64;
        if gone > 0 {
            self.ops.stats().add(crate::stats::Counter::TxTaken, gone);
        }
        n
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

    /// Arms the receive side: the next receive completion makes [`Queue::rx_fd`] readable (see
    /// the [module docs](self) for the order that loses no wake-up). Arming twice is harmless.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend cannot notify (loopback); [`Error::Os`] when the
    /// arm call fails.
    pub fn rx_arm(&mut self) -> crate::Result<()> {
        self.ops.rx_arm().map_err(|e| self.named(e))
    }

    /// The descriptor that becomes readable when the armed queue has work (for `poll(2)`,
    /// epoll, tokio's `AsyncFd`). It lives as long as the queue. After it was readable, call
    /// [`Queue::rx_ack`] before arming again.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend cannot notify.
    pub fn rx_fd(&self) -> crate::Result<BorrowedFd<'_>> {
        match self.ops.rx_fd() {
            // The backend owns the descriptor for as long as the queue lives, and the borrow
            // cannot outlive the queue.
            Some(fd) => Ok(crate::sys::notify::borrow(fd)),
            None => Err(self.named(Error::Unsupported(
                "this backend has no receive notification fd; poll rx_burst instead".into(),
            ))),
        }
    }

    /// Takes the notifications that made [`Queue::rx_fd`] readable (completion events are read
    /// and acknowledged), without blocking; harmless when there are none.
    ///
    /// # Errors
    /// [`Error::Os`] when reading the notification fails.
    pub fn rx_ack(&mut self) -> crate::Result<()> {
        self.ops.rx_ack().map_err(|e| self.named(e))
    }

    /// Sleeps until the receive side has work or `timeout` passes (`None`: no limit). Returns
    /// `Ok(true)` when woken (call [`Queue::rx_burst`]: it may find nothing, see the module
    /// docs), `Ok(false)` on timeout. It arms, checks once more for work already there, then
    /// sleeps in `poll(2)` on [`Queue::rx_fd`] and takes the notification.
    ///
    /// # Errors
    /// [`Error::Unsupported`] at once when the backend cannot notify (never a hang);
    /// [`Error::Queue`] when the descriptor reports an error (the device or interface went
    /// away); [`Error::Os`] from the arm or the poll.
    pub fn rx_wait(&mut self, timeout: Option<Duration>) -> crate::Result<bool> {
        rx_wait_any(std::slice::from_mut(self), timeout)
    }

    /// Names this queue in an `Unsupported` error.
    fn named(&self, e: Error) -> Error {
        match e {
            Error::Unsupported(m) => Error::Unsupported(format!("queue {}: {m}", self.index)),
            e => e,
        }
    }
}

/// The most queues [`rx_wait_any`] sleeps on at once.
pub const MAX_WAIT_QUEUES: usize = 64;

/// As [`Queue::rx_wait`] on several queues at once (e.g. the two ports of a bridge one thread
/// drives): arms them all, returns at once if one already has work, else sleeps until one does
/// or `timeout` passes, then takes the notifications of every queue that had one. `Ok(true)`
/// when woken, `Ok(false)` on timeout.
///
/// # Errors
/// As [`Queue::rx_wait`]; [`Error::Config`] for more than [`MAX_WAIT_QUEUES`] queues.
pub fn rx_wait_any(queues: &mut [Queue], timeout: Option<Duration>) -> crate::Result<bool> {
    if queues.len() > MAX_WAIT_QUEUES {
        return Err(Error::Config(format!(
            "rx_wait_any on {} queues: at most {MAX_WAIT_QUEUES}",
            queues.len()
        )));
    }
    let mut fds = [-1 as RawFd; MAX_WAIT_QUEUES];
    for (q, fd) in queues.iter_mut().zip(fds.iter_mut()) {
        q.rx_arm()?;
        *fd = match q.ops.rx_fd() {
            Some(fd) => fd,
            None => {
                return Err(q.named(Error::Unsupported(
                    "this backend has no receive notification fd".into(),
                )))
            }
        };
    }
    if queues.iter_mut().any(|q| q.ops.rx_ready()) {
        return Ok(true);
    }
    let n = queues.len();
    let mut revents = [0i16; MAX_WAIT_QUEUES];
    let end = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match end {
            None => -1,
            Some(end) => {
                let left = end.saturating_duration_since(Instant::now());
                // Round up: a poll of 0 ms for 0.4 ms left would spin.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        let woken = match crate::sys::notify::poll_many(&fds[..n], &mut revents[..n], ms) {
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::os("poll(receive notification fds)", e)),
        };
        if woken == 0 {
            if end.is_some_and(|end| Instant::now() >= end) {
                return Ok(false);
            }
            continue;
        }
        for (q, &r) in queues.iter_mut().zip(&revents[..n]) {
            if r & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 && r & libc::POLLIN == 0 {
                return Err(Error::Queue {
                    queue: q.index,
                    detail: format!(
                        "the receive notification fd reported {} (the device or interface \
                         went away?); open the port again",
                        if r & libc::POLLNVAL != 0 {
                            "POLLNVAL"
                        } else if r & libc::POLLHUP != 0 {
                            "POLLHUP"
                        } else {
                            "POLLERR"
                        }
                    ),
                });
            }
            if r & libc::POLLIN != 0 {
                q.rx_ack()?;
            }
        }
        return Ok(true);
    }
}

/// How a receive loop waits for packets, with VPP's names (`set interface rx-mode ...
/// polling|interrupt|adaptive`); what `fwd --rx-mode` and `pktgen --rx --rx-mode` take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxMode {
    /// Busy-poll: never sleep (a core at 100% however idle the link).
    #[default]
    Poll,
    /// Sleep ([`Queue::rx_wait`] / [`rx_wait_any`]) as soon as a poll finds nothing.
    Interrupt,
    /// Poll while packets come; sleep after [`ADAPTIVE_EMPTY_POLLS`] empty polls in a row,
    /// so that a busy link costs no system call per burst and an idle one no CPU.
    Adaptive,
}

/// Empty polls in a row after which [`RxMode::Adaptive`] sleeps (some tens of microseconds of
/// polling: a packet arriving within them costs no wake-up).
pub const ADAPTIVE_EMPTY_POLLS: u32 = 512;

impl RxMode {
    /// Whether a loop whose last `empty` polls found nothing sleeps now.
    pub fn sleeps_after(self, empty: u32) -> bool {
        match self {
            RxMode::Poll => false,
            RxMode::Interrupt => empty >= 1,
            RxMode::Adaptive => empty >= ADAPTIVE_EMPTY_POLLS,
        }
    }
}

impl std::str::FromStr for RxMode {
    type Err = Error;

    fn from_str(s: &str) -> crate::Result<RxMode> {
        match s {
            "poll" | "polling" => Ok(RxMode::Poll),
            "interrupt" => Ok(RxMode::Interrupt),
            "adaptive" => Ok(RxMode::Adaptive),
            _ => Err(Error::Config(format!(
                "rx mode {s:?}: give poll, interrupt or adaptive"
            ))),
        }
    }
}

#[cfg(any(feature = "mlx5", feature = "verbs"))]
/// How long a queue being dropped waits, in all, for its device to complete the sends it
/// posted before it stops the device's queue and counts the rest (`tx_unsent_at_close` where
/// the device says how far it got, as the software device does; `tx_fate_unknown` where it
/// cannot, dv and verbs on a NIC; a final read of the CQ after the stop counts as sent what the
/// device completed meanwhile): long enough for a device that a
/// loaded machine keeps off its CPU for a while (the emulated NIC's thread, beside five builds,
/// took over 50 ms), short enough that a dead device does not hold the drop for long.
pub(crate) const DRAIN_ON_DROP: Duration = Duration::from_secs(2);
#[cfg(any(feature = "mlx5", feature = "verbs"))]
/// How long without one send completing the drop waits before it gives up on the rest.
pub(crate) const DRAIN_STALL: Duration = Duration::from_millis(250);

#[cfg(any(feature = "mlx5", feature = "verbs"))]
/// Calls `poll` (it polls the send completions and returns how many sends are still
/// outstanding) until none is, until `stall` passes without one completing, or `limit` in
/// all; sleeps between polls (the device may need this CPU). Returns how many are left.
pub(crate) fn drain_sends(limit: Duration, stall: Duration, mut poll: impl FnMut() -> u32) -> u32 {
    let start = Instant::now();
    let mut progress = start;
    let mut left = poll();
    while left > 0 {
        let now = Instant::now();
        if now - start >= limit || now - progress >= stall {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
        let now_left = poll();
        if now_left < left {
            progress = Instant::now();
        }
        left = now_left;
    }
    left
}

#[cfg(all(test, any(feature = "mlx5", feature = "verbs")))]
mod drain_tests {
    use super::*;

    #[test]
    fn a_device_that_completes_slowly_is_waited_for() {
        // One send completes every third poll: far slower than polling, never stalled.
        let (mut left, mut polls) = (20u32, 0u32);
        let rest = drain_sends(Duration::from_secs(60), Duration::from_secs(60), || {
            polls += 1;
            if polls % 3 == 0 {
                left = left.saturating_sub(1);
            }
            left
        });
        assert_eq!((rest, left), (0, 0));
    }

    #[test]
    fn a_stalled_device_is_given_up_on_and_what_is_left_said() {
        let t = Instant::now();
        let rest = drain_sends(Duration::from_secs(60), Duration::from_millis(20), || 7);
        assert_eq!(rest, 7);
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    }

    #[test]
    fn nothing_outstanding_returns_at_once() {
        let mut polls = 0;
        let rest = drain_sends(Duration::from_secs(60), Duration::from_secs(60), || {
            polls += 1;
            0
        });
        assert_eq!((rest, polls), (0, 1));
    }
}
