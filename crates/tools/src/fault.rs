//! The queue-thread fault hook of the seeded fault campaign (issue 32): a test hook, not an
//! option. `RAWQ_PKTGEN_FAULT` / `RAWQ_FWD_FAULT` = `queue-thread-panic:Q`,
//! `queue-thread-error:Q` or `queue-thread-stall:Q` makes queue (forwarding) thread `Q` fail or
//! never end; each thread reads it once at its start.

use std::time::Duration;

/// How long a thread given `queue-thread-error` runs before it fails.
pub const QUEUE_FAULT_AFTER: Duration = Duration::from_millis(200);

/// How a queue thread fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueFault {
    /// It panics before it sends or forwards: its counts are lost, and the run ends with an
    /// error naming the queue and no summary (a summary without them would lie).
    Panic,
    /// It runs for [`QUEUE_FAULT_AFTER`], then fails the run: the summary (every queue's
    /// counts), then the error naming the queue.
    Error,
    /// It never ends (it ignores the stop, as a thread blocked for good would): the run must
    /// still end within its stop bound after one signal, with an error naming the thread.
    Stall,
}

/// What a thread given [`QueueFault::Stall`] does: nothing, for ever.
pub fn stall() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The fault environment variable `var` injects into queue thread `i`, if any.
pub fn injected(var: &str, i: usize) -> Option<QueueFault> {
    let v = std::env::var(var).ok()?;
    let (what, q) = v.split_once(':')?;
    if q.parse::<usize>().ok()? != i {
        return None;
    }
    match what {
        "queue-thread-panic" => Some(QueueFault::Panic),
        "queue-thread-error" => Some(QueueFault::Error),
        "queue-thread-stall" => Some(QueueFault::Stall),
        _ => None,
    }
}
