//! Event-driven receive on a DV queue: rawq's own CQ arm ([`CqArm`]) plus where the completion
//! events arrive: a verbs completion channel on hardware and the emulated NIC
//! ([`ChannelEvents`]), an eventfd the device model signals ([`crate::dv::model`]).

use std::os::fd::RawFd;
use std::sync::Arc;

use super::cq::CqArm;
use crate::error::Result;
use crate::ibverbs::channel::CompChannel;

/// Where a receive CQ's completion events arrive.
pub trait CqEvents: Send {
    /// The descriptor that is readable while an event waits.
    fn fd(&self) -> RawFd;
    /// Takes (and acknowledges) every waiting event without blocking; returns how many.
    ///
    /// # Errors
    /// When reading the events fails.
    fn take(&mut self) -> Result<u32>;
}

/// Events through a verbs completion channel (`ibv_get_cq_event` + `ibv_ack_cq_events`).
#[derive(Debug)]
pub struct ChannelEvents(pub Arc<CompChannel>);

impl CqEvents for ChannelEvents {
    fn fd(&self) -> RawFd {
        self.0.fd()
    }

    fn take(&mut self) -> Result<u32> {
        self.0.take_events()
    }
}

/// What a DV queue needs to sleep until its receive CQ has work.
pub struct RxNotify {
    pub(crate) arm: CqArm,
    pub(crate) events: Box<dyn CqEvents>,
}

impl std::fmt::Debug for RxNotify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxNotify")
            .field("arm", &self.arm)
            .field("fd", &self.events.fd())
            .finish()
    }
}

impl RxNotify {
    /// Arms through `arm`; events arrive through `events`.
    pub fn new(arm: CqArm, events: Box<dyn CqEvents>) -> RxNotify {
        RxNotify { arm, events }
    }
}
