//! An async receive adapter on tokio: [`AsyncQueue::rx_burst`] awaits frames, the task sleeping
//! in the runtime's epoll on the queue's notification fd ([`Queue::rx_fd`]) until they come, so
//! that an idle queue costs no CPU.
//!
//! It follows the order of the [`queue`](crate::queue) module that loses no wake-up: drain
//! ([`Queue::rx_burst`]), arm ([`Queue::rx_arm`]), poll once more, sleep on the fd (tokio's
//! `AsyncFd`, on a duplicate of the queue's descriptor), take the notification
//! ([`Queue::rx_ack`]), and again. The call returns once it has at least one packet.
//!
//! | backend | supported | the fd |
//! |---|---|---|
//! | `xdp` | yes | the AF_XDP socket |
//! | `dv` (real or emulated ConnectX), `verbs` | yes | the queue's completion channel |
//! | `model` | yes | the software device's eventfd |
//! | `loopback` | no: [`AsyncQueue::new`] returns [`Error::Unsupported`] | — |
//!
//! Sending needs no waiting ([`Queue::tx_burst`] never blocks): reach the queue through
//! [`AsyncQueue::queue_mut`]. The adapter needs a runtime with I/O enabled
//! (`Builder::enable_io`); a timeout is tokio's (`tokio::time::timeout` around the call).
//!
//! ```no_run
//! # async fn f() -> rawq::Result<()> {
//! use rawq::adapters::tokio::AsyncQueue;
//! use rawq::{Backend, Port};
//! let mut port = Port::builder(Backend::Xdp { ifname: "veth1".into() })
//!     .rule("udp dst-port 9000 -> queue 0".parse()?)
//!     .open()?;
//! let mut q = AsyncQueue::new(port.take_queues().remove(0))?;
//! let mut burst = Vec::with_capacity(64);
//! loop {
//!     let n = q.rx_burst(&mut burst, 64).await?; // sleeps until frames come
//!     // ... use burst[..n] ...
//!     burst.clear();
//! }
//! # }
//! ```

use std::os::fd::OwnedFd;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;

use crate::error::Error;
use crate::packet::Packet;
use crate::queue::Queue;

/// A [`Queue`] whose receive bursts are awaited (see the [module docs](self)).
#[derive(Debug)]
pub struct AsyncQueue {
    q: Queue,
    fd: AsyncFd<OwnedFd>,
    wakeups: u64,
}

impl AsyncQueue {
    /// Wraps `queue`; call it inside a tokio runtime with I/O enabled (a runtime built without
    /// `enable_io` makes tokio's `AsyncFd` panic: that is tokio's contract).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend cannot notify (loopback); [`Error::Config`]
    /// outside a tokio runtime; [`Error::Os`] when the fd cannot be duplicated or registered.
    pub fn new(queue: Queue) -> crate::Result<AsyncQueue> {
        if ::tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Config(
                "AsyncQueue::new outside a tokio runtime: call it from a task (or inside \
                 Runtime::enter) of a runtime built with enable_io()"
                    .into(),
            ));
        }
        // tokio owns a duplicate of the queue's fd (the same socket or channel) and closes that
        // one; the queue keeps and closes its own.
        let owned = queue
            .rx_fd()?
            .try_clone_to_owned()
            .map_err(|e| Error::os("dup(the queue's notification fd)", e))?;
        // SAFETY: `owned` is an open descriptor the AsyncFd owns from here on: nothing else
        // closes or replaces it while it is registered, and `as_raw_fd` on an `OwnedFd` always
        // returns that descriptor.
        let fd =
            unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }.map_err(|e| {
                Error::os(
                    "registering the queue's notification fd with tokio (epoll)",
                    e.into(),
                )
            })?;
        Ok(AsyncQueue {
            q: queue,
            fd,
            wakeups: 0,
        })
    }

    /// Appends up to `max` received packets to `out` and returns how many (at least 1 when
    /// `max` > 0), sleeping until a packet comes when none is there. Cancel-safe: a packet is
    /// only ever taken into `out` by a call that returns it.
    ///
    /// # Errors
    /// What [`Queue::rx_arm`] and [`Queue::rx_ack`] report; [`Error::Os`] when the runtime
    /// reports an error on the fd (the device or interface went away).
    pub async fn rx_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> crate::Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        loop {
            // 1. Drain.
            let n = self.q.rx_burst(out, max);
            if n > 0 {
                return Ok(n);
            }
            // 2. Arm; 3. poll again: a packet that came in between is taken here.
            self.q.rx_arm()?;
            let n = self.q.rx_burst(out, max);
            if n > 0 {
                return Ok(n);
            }
            // 4. Sleep in the runtime until the fd is readable, then take the notification.
            let mut guard = self
                .fd
                .readable()
                .await
                .map_err(|e| Error::os("waiting on the queue's notification fd", e))?;
            guard.clear_ready();
            self.wakeups += 1;
            self.q.rx_ack()?;
        }
    }

    /// Times the task was woken by the fd (a wake-up may find nothing: see the
    /// [`queue`](crate::queue) module).
    pub fn wakeups(&self) -> u64 {
        self.wakeups
    }

    /// The queue (stats, the pool).
    pub fn queue(&self) -> &Queue {
        &self.q
    }

    /// The queue, mutably: `tx_burst`, `alloc_burst` and `reclaim` never block.
    pub fn queue_mut(&mut self) -> &mut Queue {
        &mut self.q
    }

    /// The queue back (the runtime's registration of the fd ends).
    pub fn into_inner(self) -> Queue {
        self.q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backend, Port};

    #[test]
    fn loopback_cannot_notify_and_says_so() {
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let mut port = Port::builder(Backend::Loopback).open().unwrap();
        let q = port.take_queues().remove(0);
        let e = rt.block_on(async { AsyncQueue::new(q) }).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
    }

    #[test]
    fn outside_a_runtime_is_an_error_not_a_panic() {
        let mut port = Port::builder(Backend::Loopback).open().unwrap();
        let q = port.take_queues().remove(0);
        let e = AsyncQueue::new(q).unwrap_err();
        assert!(e.to_string().contains("outside a tokio runtime"), "{e}");
    }
}
