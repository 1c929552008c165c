//! The processes and threads a test's launcher started, found in `/proc`; one thread of them
//! held still with ptrace (the rest of its process runs on); and what a run that did not end was
//! doing when it was given up on ([`hang_report`]): every thread's name, state, `wchan` and
//! kernel stack, and, where gdb is installed, every thread's user-space backtrace.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
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

/// `root` and every process below it (its children, theirs, ...), `root` first.
pub fn below(root: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        if out.contains(&p) {
            continue;
        }
        out.push(p);
        todo.extend(children(p));
    }
    out
}

/// How long [`hang_report`] gives gdb, all processes at once.
pub const GDB_LIMIT: Duration = Duration::from_secs(40);

/// What a run that did not end was doing, for a failure message or a campaign report: for each
/// process of `pids` and every process below each (a launcher's shell, `timeout`, the tool, a
/// reaper), its command line, and for each of its threads the name, state, kernel function it
/// waits in (`wchan`) and kernel stack (`/proc/PID/task/TID/{comm,stat,wchan,stack}`; the stack
/// needs root); then, where `gdb` is installed, each process's user-space backtraces (`gdb -p
/// PID -batch -ex "thread apply all bt"`, all at once, [`GDB_LIMIT`] at most). Call it before
/// killing the run: it changes nothing (gdb detaches; a process already traced is skipped by
/// gdb with its reason).
pub fn hang_report(pids: &[u32]) -> String {
    let mut all: Vec<u32> = Vec::new();
    for &p in pids {
        for q in below(p) {
            if !all.contains(&q) {
                all.push(q);
            }
        }
    }
    let mut out = String::new();
    for &p in &all {
        out += &threads_state(p);
    }
    out += &uninterruptible(&all);
    if all.is_empty() {
        out += "(no process left to look at)\n";
    } else {
        out += &backtraces(&all, GDB_LIMIT);
    }
    out
}

/// Every other thread of the machine in an uninterruptible wait (state `D`: a kernel lock, I/O),
/// with its kernel stack, as `echo w > /proc/sysrq-trigger` lists them: a run blocked in the
/// kernel waits for one of these (a namespace being torn down holding `rtnl_lock`, say).
/// `except`: processes already described.
pub fn uninterruptible(except: &[u32]) -> String {
    let mut out = String::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    let mut n = 0;
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if except.contains(&pid) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let td = t.path();
            if state(&td.to_string_lossy()) != "D" {
                continue;
            }
            n += 1;
            let wchan = std::fs::read_to_string(td.join("wchan")).unwrap_or_default();
            let _ = writeln!(
                out,
                "  process {pid} ({}) thread {} {:?} wchan {}",
                comm(&format!("/proc/{pid}")),
                t.file_name().to_string_lossy(),
                comm(&td.to_string_lossy()),
                wchan.trim()
            );
            for l in std::fs::read_to_string(td.join("stack"))
                .unwrap_or_default()
                .lines()
            {
                let _ = writeln!(out, "    {}", l.trim());
            }
        }
    }
    if n == 0 {
        "no other thread of the machine in an uninterruptible wait (D)\n".into()
    } else {
        format!("other threads of the machine in an uninterruptible wait (D):\n{out}")
    }
}

/// Process `pid`'s command line and every thread's name, state, wchan and kernel stack.
pub fn threads_state(pid: u32) -> String {
    let dir = format!("/proc/{pid}");
    let cmdline = std::fs::read(format!("{dir}/cmdline"))
        .map(|c| {
            String::from_utf8_lossy(&c)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .unwrap_or_default();
    let mut out = format!("process {pid} ({}): {cmdline}\n", comm(&dir));
    let Ok(tasks) = std::fs::read_dir(format!("{dir}/task")) else {
        out += "  (gone)\n";
        return out;
    };
    let mut tids: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    for t in tids {
        let td = format!("{dir}/task/{t}");
        let state = state(&td);
        let wchan = std::fs::read_to_string(format!("{td}/wchan")).unwrap_or_default();
        let wchan = if wchan.is_empty() || wchan == "0" {
            "-"
        } else {
            wchan.trim()
        };
        let _ = writeln!(
            out,
            "  thread {t} {:?} state {state} wchan {wchan}",
            comm(&td)
        );
        match std::fs::read_to_string(format!("{td}/stack")) {
            Ok(st) => {
                for l in st.lines() {
                    let _ = writeln!(out, "    {}", l.trim());
                }
            }
            Err(e) => {
                let _ = writeln!(out, "    (kernel stack unreadable: {e})");
            }
        }
    }
    out
}

/// Whether `gdb` can be run here.
fn have_gdb() -> bool {
    Command::new("gdb")
        .args(["-nx", "-batch", "--version"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Every thread's user-space backtrace of each of `pids`, from one gdb per process run at
/// once (gdb attaches, prints and detaches), `limit` for all; or why there are none.
pub fn backtraces(pids: &[u32], limit: Duration) -> String {
    if !have_gdb() {
        return "(no user-space backtraces: gdb is not installed; `apt-get install gdb`)\n".into();
    }
    let dir = std::env::temp_dir();
    let mut running = Vec::new();
    for &p in pids {
        let file = dir.join(format!("rawq-gdb-{}-{p}.txt", std::process::id()));
        let Ok(f) = std::fs::File::create(&file) else {
            continue;
        };
        let Ok(f2) = f.try_clone() else { continue };
        let child = Command::new("gdb")
            .args(["-nx", "-batch", "-p", &p.to_string()])
            .args(["-iex", "set debuginfod enabled off"])
            .args(["-ex", "set pagination off"])
            .args(["-ex", "info threads"])
            .args(["-ex", "thread apply all bt"])
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .spawn();
        running.push((p, file, child));
    }
    let end = Instant::now() + limit;
    let mut out = String::new();
    for (p, file, child) in running {
        let _ = writeln!(out, "gdb -p {p} -batch -ex \"thread apply all bt\":");
        let note = match child {
            Err(e) => format!("(gdb did not start: {e})"),
            Ok(mut c) => loop {
                match c.try_wait() {
                    Ok(Some(_)) => break String::new(),
                    Ok(None) if Instant::now() < end => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break format!("(gdb did not finish within {} s: killed)", limit.as_secs());
                    }
                }
            },
        };
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let _ = std::fs::remove_file(&file);
        for l in text.lines() {
            let _ = writeln!(out, "  {l}");
        }
        if !note.is_empty() {
            let _ = writeln!(out, "  {note}");
        }
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

/// A thread's or process's state letter (`R`, `S`, `D`, `Z`, ...: the field after the name in
/// `stat`, which may itself hold spaces and parentheses); `?` when it cannot be read.
fn state(path: &str) -> String {
    std::fs::read_to_string(format!("{path}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(") ")?;
            Some(rest.split_whitespace().next()?.to_owned())
        })
        .unwrap_or_else(|| "?".into())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Set in the child that [`a_hang_report_shows_a_thread_blocked_on_a_pipe_write`] starts.
    const HOLD: &str = "RAWQ_TESTKIT_HOLD_A_WRITER";

    /// Writes to stdout until a write blocks (the pipe is full and nobody reads it).
    #[inline(never)]
    fn held_writer() {
        let buf = [b'x'; 4096];
        let mut o = std::io::stdout().lock();
        while o.write_all(&buf).is_ok() {}
    }

    /// The held process (run by the test below with `HOLD` set; without it, nothing): a thread
    /// named `held-writer` blocked in a write to a pipe nobody reads, its main thread waiting
    /// for it.
    #[test]
    fn hold_a_pipe_writer() {
        if std::env::var_os(HOLD).is_none() {
            return;
        }
        let t = std::thread::Builder::new()
            .name("held-writer".into())
            .spawn(held_writer)
            .expect("spawn the writer");
        let _ = t.join();
    }

    /// The thread named `held-writer` of `pid`, once it waits in a pipe write.
    fn blocked_writer(pid: u32) -> Option<u32> {
        threads_named(pid, "held-writer").into_iter().find(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/wchan"))
                .is_ok_and(|w| w.contains("pipe_write"))
        })
    }

    /// A process held on purpose (one thread blocked writing to a full pipe): the report names
    /// its threads, says where the writer waits (wchan, kernel stack) and, with gdb, shows the
    /// writer's function in its user-space backtrace.
    #[test]
    fn a_hang_report_shows_a_thread_blocked_on_a_pipe_write() {
        let exe = std::env::current_exe().expect("the test executable");
        let mut child = Command::new(exe)
            .args(["--exact", "procs::tests::hold_a_pipe_writer", "--nocapture"])
            .env(HOLD, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the held process");
        // Kept open and never read: the writer blocks once the pipe is full.
        let _pipe = child.stdout.take();
        let pid = child.id();
        let end = Instant::now() + Duration::from_secs(30);
        let writer = loop {
            if let Some(t) = blocked_writer(pid) {
                break Some(t);
            }
            if Instant::now() > end || child.try_wait().ok().flatten().is_some() {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let report = writer.map(|_| hang_report(&[pid]));
        let _ = child.kill();
        let _ = child.wait();
        let writer = writer.expect("the writer thread never blocked in a pipe write");
        let report = report.unwrap_or_default();
        let line = report
            .lines()
            .find(|l| l.contains(&format!("thread {writer} ")))
            .unwrap_or_else(|| panic!("no line for thread {writer}:\n{report}"));
        assert!(
            line.contains("\"held-writer\"") && line.contains("pipe_write"),
            "{line}\n{report}"
        );
        // The main thread too (every thread of the process is listed).
        assert!(report.contains(&format!("thread {pid} ")), "{report}");
        if std::fs::read_to_string(format!("/proc/self/task/{}/stack", std::process::id())).is_ok()
        {
            assert!(
                report
                    .lines()
                    .any(|l| l.trim_start().starts_with("[<") && l.contains("pipe_write")),
                "no kernel stack through pipe_write:\n{report}"
            );
        }
        if have_gdb() {
            assert!(
                report.contains("held_writer"),
                "gdb's backtraces do not show the writer's function:\n{report}"
            );
        } else {
            assert!(report.contains("gdb is not installed"), "{report}");
        }
    }
}
