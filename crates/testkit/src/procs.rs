//! The processes and threads a test's launcher started, found in `/proc`, and one thread of
//! them held still with ptrace (the rest of its process runs on).

use std::time::{Duration, Instant};

/// The process ids of `pid`'s children (`/proc/PID/task/*/children`).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// `root` and every process below it, one a line: pid, name, state and the kernel function it
/// waits in (`wchan`), for a test's message when a launcher did not end.
pub fn tree_state(root: u32) -> String {
    let mut out = String::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        let dir = format!("/proc/{p}");
        let stat = std::fs::read_to_string(format!("{dir}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?");
        let wchan = std::fs::read_to_string(format!("{dir}/wchan")).unwrap_or_default();
        out += &format!("{p} {} {state} {wchan}\n", comm(&dir));
        todo.extend(children(p));
    }
    out
}

/// A thread's or process's name (`comm`).
fn comm(path: &str) -> String {
    std::fs::read_to_string(format!("{path}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The first process below `root` (its children, theirs, ...) named `name`.
pub fn descendant(root: u32, name: &str) -> Option<u32> {
    let mut todo = children(root);
    while let Some(p) = todo.pop() {
        if comm(&format!("/proc/{p}")) == name {
            return Some(p);
        }
        todo.extend(children(p));
    }
    None
}

/// [`descendant`], waiting for it up to `limit` (a launcher starts its command late).
pub fn wait_descendant(root: u32, name: &str, limit: Duration) -> Option<u32> {
    let end = Instant::now() + limit;
    loop {
        if let Some(p) = descendant(root, name) {
            return Some(p);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The threads of process `pid` named `name`, other than its main thread.
pub fn threads_named(pid: u32, name: &str) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&t| t != pid && comm(&format!("/proc/{pid}/task/{t}")) == name)
        .collect()
}

/// One thread stopped by ptrace (`PTRACE_SEIZE` + `PTRACE_INTERRUPT`) while the other threads
/// of its process run; it goes on where it was when dropped (`PTRACE_DETACH`), or when the test
/// ends. Made and dropped on the same thread of the test (ptrace answers its tracer thread only).
pub struct Held(i32);

impl Held {
    /// Stops thread `tid`; the error when ptrace is not allowed here.
    pub fn stop(tid: u32) -> std::io::Result<Held> {
        let tid = tid as libc::pid_t;
        // SAFETY: ptrace requests on a thread id, with no pointers passed.
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let held = Held(tid);
            if libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Its stop (PTRACE_EVENT_STOP) is reported to the tracer.
            let mut status = 0;
            if libc::waitpid(tid, &mut status, libc::__WALL) != tid {
                return Err(std::io::Error::last_os_error());
            }
            Ok(held)
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: ptrace and waitpid on the thread this tracer seized, with no pointers passed
        // but a local status word.
        unsafe {
            if libc::ptrace(libc::PTRACE_DETACH, self.0, 0, 0) == 0 {
                return;
            }
            // Its process has ended (it cannot be detached): a traced thread's exit is
            // reported to its tracer, who must collect it before the process can be reaped.
            let end = Instant::now() + Duration::from_secs(10);
            let mut status = 0;
            while libc::waitpid(self.0, &mut status, libc::__WALL | libc::WNOHANG) == 0
                && Instant::now() < end
            {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Makes `cmd`'s process start with the stop signals (INT, QUIT, TERM, HUP) at their default
/// action and unblocked, whatever the test process inherited. A test that signals a shell
/// script needs it: a suite started in the background of a non-interactive shell (`nohup
/// scripts/test.sh &`) runs with SIGINT and SIGQUIT ignored, and a shell started with a signal
/// ignored can neither trap nor reset it, so `emu.sh` would never see the test's SIGINT.
pub fn default_signals(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (signal, sigemptyset, sigaddset, sigprocmask) on local data.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
                if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
                libc::sigaddset(&mut set, sig);
            }
            if libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}
