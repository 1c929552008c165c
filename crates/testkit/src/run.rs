//! Programs a test starts and waits on: an example (or `scripts/emu.sh` running one), maybe in a
//! namespace; a wait for a condition on what it has said so far or on the world it acts on,
//! bounded, giving up early when the program ends; then its end, bounded too, killed past the
//! limit; and its output.
//!
//! [`Run::spawn`] sends the program's stderr to a file of its own, read while it runs
//! ([`Run::stderr`]), and its stdout to a pipe that a thread drains, so that a program that
//! writes much never blocks. (Stdout stays a pipe, as these tests always had it: with stdout a
//! file, pktgen's `--on-link-down wait` runs in tests/emu/link_runs.rs ended with no frame counted
//! as not sent in 6 runs of 10, for a reason not found; with the pipe, in none of 13.)
//! [`Run::finish`] returns the usual [`Output`], both streams in it; a program killed at its
//! limit has, after its stderr, what it and every process below it were doing then
//! ([`procs::hang_report`](super::procs::hang_report)). A [`Run`] dropped while its program runs
//! (a failed assertion) kills it, and removes its file.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// How often the conditions and the program's end are looked at.
const POLL: Duration = Duration::from_millis(20);

/// `ip netns exec NS <example BIN>`: an example of this crate run in namespace `ns`.
pub fn in_ns(ns: &str, bin: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(super::example(bin));
    c
}

/// How long [`Run::try_finish`] waits for the end of a program's stdout once the program has
/// ended (a process it started may hold the pipe open).
const DRAIN: Duration = Duration::from_secs(5);

/// A started program, its stdout drained from a pipe, its stderr going to a file.
pub struct Run {
    child: Child,
    /// What the program has written to stdout so far, and the thread that reads it.
    out: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
    err: PathBuf,
}

impl Run {
    /// Starts `cmd`, its stdout to a pipe, its stderr to a new file of the temp directory.
    pub fn spawn(cmd: &mut Command) -> Run {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let err = std::env::temp_dir().join(format!("rawq-run-{}-{n}.err", std::process::id()));
        let file =
            std::fs::File::create(&err).unwrap_or_else(|e| panic!("create {}: {e}", err.display()));
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        let out = Arc::new(Mutex::new(Vec::new()));
        let mut pipe = child.stdout.take().expect("piped stdout");
        let sink = out.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&buf[..n]);
            }
        });
        Run {
            child,
            out,
            reader: Some(reader),
            err,
        }
    }

    /// What the program has written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// The program's process id (a launcher's, when it was started by one: see
    /// [`crate::emu::term_command`]).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends signal `sig` to the program (by its process id; it has not been reaped, so the id
    /// is still its own).
    pub fn signal(&self, sig: i32) -> std::io::Result<()> {
        // SAFETY: kill on the pid of a child this Run started and has not reaped.
        if unsafe { libc::kill(self.child.id() as libc::pid_t, sig) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    fn ended(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until `cond` (given the program's stderr so far) holds, up to `limit`; false when
    /// it did not hold by then or the program ended first.
    pub fn wait_until(&mut self, limit: Duration, mut cond: impl FnMut(&str) -> bool) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if cond(&self.stderr()) {
                return true;
            }
            if self.ended().is_some() {
                return false;
            }
            std::thread::sleep(POLL);
        }
        false
    }

    /// Waits until the program's stderr contains `text` (see [`Run::wait_until`]).
    pub fn wait_for_stderr(&mut self, text: &str, limit: Duration) -> bool {
        self.wait_until(limit, |err| err.contains(text))
    }

    /// Waits for the program to end, up to `limit`: `Ok` with its output, or `Err` with what it
    /// wrote before it was killed there.
    pub fn try_finish(mut self, limit: Duration) -> Result<Output, Output> {
        let end = Instant::now() + limit;
        let mut hung = None;
        let status = loop {
            if let Some(s) = self.ended() {
                break Ok(s);
            }
            if Instant::now() >= end {
                // What it (and every process below it) was doing, before it is killed: said
                // after its stderr, which the caller's failure message shows.
                hung = Some(super::procs::hang_report(&[self.child.id()]));
                let _ = self.child.kill();
                break Err(self.child.wait().expect("wait for a killed child"));
            }
            std::thread::sleep(POLL);
        };
        // The rest of stdout: the reader ends at the pipe's end, which comes with the program's
        // unless a process it started keeps the pipe open (then what came so far).
        let drained = Instant::now() + DRAIN;
        while self.reader.as_ref().is_some_and(|r| !r.is_finished()) && Instant::now() < drained {
            std::thread::sleep(POLL);
        }
        if self.reader.as_ref().is_some_and(|r| r.is_finished()) {
            let _ = self.reader.take().map(JoinHandle::join);
        }
        let stdout = std::mem::take(&mut *self.out.lock().unwrap_or_else(|e| e.into_inner()));
        let mut stderr = std::fs::read(&self.err).unwrap_or_default();
        if let Some(h) = hung {
            stderr.extend_from_slice(
                format!(
                    "\n--- rawq-testkit: still running {} s after it was started; killed. What \
                     it was doing then:\n{h}",
                    limit.as_secs()
                )
                .as_bytes(),
            );
        }
        let killed = status.is_err();
        let (Ok(status) | Err(status)) = status;
        let out = Output {
            status,
            stdout,
            stderr,
        };
        if killed {
            Err(out)
        } else {
            Ok(out)
        }
    }

    /// [`Run::try_finish`], a program killed at `limit` returning what it wrote (its status says
    /// it was killed).
    pub fn finish(self, limit: Duration) -> Output {
        self.try_finish(limit).unwrap_or_else(|o| o)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.ended().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.err);
    }
}
