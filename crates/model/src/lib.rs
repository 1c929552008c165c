//! A software mlx5 NIC: the hardware half of rawq's `Backend::Model` and of the emulated
//! ConnectX (`rawq-emu`).
//!
//! [`hw::Hw`] is the model as hardware: independent CQ, SQ, RQ, TIR, flow and MR objects over
//! rings anywhere in memory (a port's own, laid out by [`mem`] as libmlx5 lays them out, or an
//! application's under the emulated NIC). One engine serves both. On each [`hw::Hw::process`]
//! (or in a thread, [`hw::Hw::spawn`]) it does what the hardware does:
//!
//! * **Send**: on a UAR doorbell write naming the SQ, reads the doorbell record and parses
//!   every new WQE up to it, checking each strictly (opcode, DS count, WQE index, QPN, minimum
//!   inline header, lkey, every address+length inside the registered region of the SQ's PD,
//!   frame length limits). A good WQE puts its frame(s) on the wire (checksum offload applied) and writes a send CQE if the WQE asked for one. A bad WQE produces the
//!   error CQE the hardware would (LOCAL_PROT_ERR for a bad key or address, LOCAL_LENGTH_ERR for
//!   a bad length, LOCAL_QP_OP_ERR for a bad opcode / DS / index); every later WQE is flushed
//!   (WR_FLUSH_ERR) until the queue is reset.
//! * **Receive**: takes frames from the wire, drops runts and oversize frames (counted), steers
//!   them by the flows (frames no flow takes go "to the kernel": to the TAP in
//!   [`hw::HwOptions::netdev`], else counted and dropped), strips a VLAN tag if asked, computes
//!   checksums-ok bits, header types and the TIR's Toeplitz RSS hash, fills the RQ (cyclic, or
//!   striding with filler CQEs), and writes receive CQEs, compressed (title + mini-CQE arrays)
//!   when configured and the shared fields of a run agree.
//! * **Wire**: [`ModelWire::Loopback`], [`ModelWire::Sink`], [`ModelWire::Bridge`] (an
//!   `AF_PACKET` socket on a Linux interface), or two devices joined by [`hw::Hw::connect`].
//!
//! Nothing a driver writes makes the model panic; malformed work becomes error CQEs and counters
//! ([`ModelCounters`]).
//!
//! This crate imports nothing from rawq: the ring layouts (`wire`), the frame parser and the
//! Toeplitz hash (`flow`) are its own, so that a misreading shared by rawq's driver and the
//! model can be caught (issue 18).

#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod clock;
mod config;
mod desc;
mod engine;
mod error;
mod flow;
pub mod hw;
mod link;
pub mod mem;
mod mmio;
pub mod net;
mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use config::{MiniCqeFormat, ModelWire, NetdevPath, Striding};
pub use engine::{HwTuning, ModelCounters, MAX_TSO};
pub use error::{Error, Result};

/// A port or device running in its own thread; stops (and joins) when dropped.
#[derive(Debug)]
pub struct ModelThread {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) handle: Option<std::thread::JoinHandle<()>>,
}

impl ModelThread {
    /// A handle of no thread (what a port hands out when its thread could not be started).
    pub fn stopped() -> ModelThread {
        ModelThread {
            stop: Arc::new(AtomicBool::new(true)),
            handle: None,
        }
    }
}

impl Drop for ModelThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod hw_tests;
