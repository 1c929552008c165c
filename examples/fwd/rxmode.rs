//! fwd's `--rx-mode`: how a forwarding thread waits for frames, with VPP's names (`set
//! interface rx-mode ... polling|interrupt|adaptive`).
//!
//! * `poll`: the thread never sleeps (a core at 100% however idle the link).
//! * `interrupt`: after one round that received nothing, the thread sleeps until one of its
//!   queues has work (`rawq::queue::rx_wait_any`: arm, re-check, sleep on the queues' fds).
//! * `adaptive`: polls while frames come, and sleeps as `interrupt` does after
//!   [`ADAPTIVE_EMPTY_ROUNDS`] rounds in a row received nothing, so that a busy link costs no
//!   system call per burst and an idle one no CPU.

use std::time::Duration;

/// `--rx-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RxMode {
    /// Busy-poll the receive queues.
    Poll,
    /// Sleep on the queues' notification fds whenever a round received nothing.
    Interrupt,
    /// Poll while busy; sleep after a run of empty rounds.
    Adaptive,
}

/// Empty rounds in a row after which `adaptive` sleeps (about 50-100 µs of polling on an idle
/// link; a frame arriving within them costs no wake-up).
pub const ADAPTIVE_EMPTY_ROUNDS: u32 = 512;

/// The longest one sleep lasts, so that the thread sees the end of the run (Ctrl-C, -t) in time.
pub const MAX_SLEEP: Duration = Duration::from_millis(100);

impl RxMode {
    /// Whether a thread whose last `idle` rounds received nothing sleeps now.
    pub fn sleeps_after(self, idle: u32) -> bool {
        match self {
            RxMode::Poll => false,
            RxMode::Interrupt => idle >= 1,
            RxMode::Adaptive => idle >= ADAPTIVE_EMPTY_ROUNDS,
        }
    }
}
