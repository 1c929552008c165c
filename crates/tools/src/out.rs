//! The tools' output, which never panics: `println!` and `eprintln!` panic when their stream is
//! closed (a pipe whose reader is gone: `pktgen ... | head -1`), and a queue thread that dies
//! that way took the run with it (issue 32). Here a failed write to stderr is dropped (it is
//! diagnostics: the run goes on), and a failed write to stdout marks stdout closed: the run
//! ends as if signalled ([`stdout_closed`]), nothing more is written there, and the tool exits
//! with [`CLOSED_STATUS`], the status a shell reports for a command a closed pipe ended
//! (`yes | head -1`), as coreutils do.
//!
//! [`outln!`](crate::outln) / [`out!`](macro@crate::out) write to stdout, [`say!`](crate::say) to
//! stderr; both take `format!`'s arguments.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// The exit status of a tool whose stdout was closed before it said everything: 128 + SIGPIPE,
/// what a shell reports for a process a closed pipe ended.
pub const CLOSED_STATUS: u8 = 128 + 13;

/// Whether a write to stdout has failed (its reader is gone): the output has ended.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Relaxed)
}

/// Writes to stdout (and flushes, so that a closed pipe is seen at the write that hit it);
/// false, and stdout marked closed, when that fails. Nothing is written once it is closed.
pub fn stdout(args: fmt::Arguments) -> bool {
    if stdout_closed() {
        return false;
    }
    let mut o = std::io::stdout().lock();
    let ok = o.write_fmt(args).and_then(|()| o.flush()).is_ok();
    if !ok {
        STDOUT_CLOSED.store(true, Relaxed);
    }
    ok
}

/// Writes to stderr; a failure (stderr closed) is dropped: diagnostics that cannot be shown
/// never end a run.
pub fn stderr(args: fmt::Arguments) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.flush());
}

/// The exit status for a run that ended without an error of its own: success, or
/// [`CLOSED_STATUS`] when stdout was closed before everything was written.
pub fn status() -> std::process::ExitCode {
    if stdout_closed() {
        std::process::ExitCode::from(CLOSED_STATUS)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// Shows a command-line error (or `--help`, `--version`) as clap would, without its panic on a
/// closed stream, and exits with clap's status ([`CLOSED_STATUS`] if stdout was closed).
pub fn clap_exit(e: clap::Error) -> ! {
    let code = e.exit_code();
    if e.print().is_err() && !e.use_stderr() {
        std::process::exit(CLOSED_STATUS.into());
    }
    std::process::exit(code)
}

/// `println!` that never panics: see [`stdout`](crate::out::stdout).
#[macro_export]
macro_rules! outln {
    () => { $crate::out::stdout(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::stdout(format_args!("{}\n", format_args!($($t)*))) };
}

/// `print!` that never panics: see [`stdout`](crate::out::stdout).
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::out::stdout(format_args!($($t)*)) };
}

/// `eprintln!` that never panics: see [`stderr`](crate::out::stderr).
#[macro_export]
macro_rules! say {
    () => { $crate::out::stderr(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::stderr(format_args!("{}\n", format_args!($($t)*))) };
}
