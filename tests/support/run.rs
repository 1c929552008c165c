//! Programs a test starts and waits on: an example (or `scripts/emu.sh` running one), maybe in a
//! namespace; a wait for a condition on what it has said so far or on the world it acts on,
//! bounded, giving up early when the program ends; then its end, bounded too, killed past the
//! limit; and its output.
//!
//! [`Run::spawn`] sends the program's stdout and stderr to files of its own (not pipes), so a
//! program that writes much never blocks on a pipe nobody reads, and what it has written can be
//! read while it runs ([`Run::stderr`]). [`Run::finish`] returns the usual [`Output`], both
//! streams in it. A [`Run`] dropped while its program runs (a failed assertion) kills it, and
//! removes its files.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
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

/// A started program, its stdout and stderr going to files.
pub struct Run {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Run {
    /// Starts `cmd`, its stdout and stderr each to a new file of the temp directory.
    pub fn spawn(cmd: &mut Command) -> Run {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("rawq-run-{}-{n}", std::process::id()));
        let (out, err) = (base.with_extension("out"), base.with_extension("err"));
        let file = |p: &PathBuf| {
            std::fs::File::create(p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()))
        };
        let child = cmd
            .stdout(Stdio::from(file(&out)))
            .stderr(Stdio::from(file(&err)))
            .spawn()
            .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        Run { child, out, err }
    }

    /// What the program has written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
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
        let status = loop {
            if let Some(s) = self.ended() {
                break Ok(s);
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                break Err(self.child.wait().expect("wait for a killed child"));
            }
            std::thread::sleep(POLL);
        };
        let read = |p: &PathBuf| std::fs::read(p).unwrap_or_default();
        let output = |status| Output {
            status,
            stdout: read(&self.out),
            stderr: read(&self.err),
        };
        status.map(output).map_err(output)
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
        let _ = std::fs::remove_file(&self.out);
        let _ = std::fs::remove_file(&self.err);
    }
}
