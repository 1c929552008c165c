//! fwd's `--rx-mode` (`rawq::queue::RxMode`, VPP's names): `poll` never sleeps; `interrupt`
//! sleeps until one of the thread's queues has work (`rawq::queue::rx_wait_any`: arm, re-check,
//! sleep on the queues' fds) whenever a round received nothing; `adaptive` polls while frames
//! come and sleeps after `rawq::queue::ADAPTIVE_EMPTY_POLLS` empty rounds.

use std::time::Duration;

pub use rawq::queue::RxMode;

/// The longest one sleep lasts, so that the thread sees the end of the run (Ctrl-C, -t) in time.
pub const MAX_SLEEP: Duration = Duration::from_millis(100);

/// `--rx-mode`'s parser.
pub fn parse(s: &str) -> Result<RxMode, String> {
    s.parse().map_err(|e: rawq::Error| e.to_string())
}
