//! Runs one scenario: its namespaces (xdp), its peer, the tool in a process group of its own
//! (under scripts/emu.sh for dv/verbs), the fault at its moment, a bound on the end, and a look
//! for what the run left behind.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rawq_testkit as support;
use support::run::Run;
use support::NetnsPair;

use crate::churn::LibOutcome;
use crate::scenario::{Backend, Fault, Scenario, Tool};

/// How long a run may take to end after one signal (or its fault's moment) before it counts as
/// hung and is killed.
pub const END_BOUND: Duration = Duration::from_secs(15);
/// How long leftovers (a reaper, temp trees, processes) get to go away after the run.
const LEFTOVER_WAIT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

/// What a run did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// None when it hung and was killed.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// Whether the tool had said it started (its `TOOL: ` banner) when the fault's signal went.
    pub started_at_signal: Option<bool>,
    /// The bound it overran, when it hung.
    pub hung: Option<String>,
    /// What a hung run was doing when it was given up on (every thread of every process of
    /// it: name, state, wchan, kernel stack, gdb's backtraces; `procs::hang_report`), and how
    /// it died.
    pub hang_report: Option<String>,
    /// What the run left behind.
    pub leftovers: Vec<String>,
    /// Why the scenario did not run (no namespaces and RAWQ_REQUIRE_NETNS unset).
    pub skipped: Option<String>,
    /// What went wrong around the tool (a peer, the fault's own command).
    pub harness: Vec<String>,
    /// When the fault's moment came (its signal went, the device failed), after the start.
    pub fault_at: Option<Duration>,
    /// A library run's (`Tool::Lib`) summary and broken laws.
    pub lib: Option<LibOutcome>,
}

impl Outcome {
    pub fn short(&self) -> String {
        if let Some(s) = &self.skipped {
            return format!("skipped: {s}");
        }
        if let Some(l) = &self.lib {
            return format!(
                "library run of {:.1} s: {}",
                l.elapsed.as_secs_f64(),
                l.summary
            );
        }
        let status = match (&self.hung, self.status) {
            (Some(h), _) => format!("HUNG ({h})"),
            (None, Some(s)) => match (s.code(), s.signal()) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => "?".into(),
            },
            (None, None) => "?".into(),
        };
        let last = self
            .stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        format!(
            "{status} after {:.1} s, stdout {} bytes, stderr's last line: {last:?}",
            self.elapsed.as_secs_f64(),
            self.stdout.len()
        )
    }
}

/// The scratch directory of one run (its stderr, emu.sh's TMPDIR).
fn run_dir(seed: u64, n: u32) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rawq-campaign-{}-{seed}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("tmp")).expect("campaign scratch dir");
    d
}

/// The process ids in process group `pgid` (`/proc/PID/stat`'s fifth field).
fn group_members(pgid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name in parentheses: state ppid pgrp.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) && f.first() != Some(&"Z") {
            v.push(pid);
        }
    }
    v
}

/// Processes whose command line mentions `needle` (emu.sh's reaper names its temp tree).
fn mentioning(needle: &str) -> Vec<(u32, String)> {
    let mut v = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(c) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                v.push((pid, c));
            }
        }
    }
    v
}

/// Waits up to `limit` for `f` to return nothing; what it still returns then.
fn wait_empty<T>(limit: Duration, mut f: impl FnMut() -> Vec<T>) -> Vec<T> {
    let end = Instant::now() + limit;
    loop {
        let v = f();
        if v.is_empty() || Instant::now() >= end {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill_group(pgid: u32, sig: i32) {
    // SAFETY: kill on a process group this harness created (its leader is our child).
    unsafe { libc::kill(-(pgid as libc::pid_t), sig) };
}

fn ip_quiet(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// The xdp programs attached to `dev` in `ns` (`ip -d link show`), as text, or None.
fn xdp_attached(ns: &str, dev: &str) -> Option<String> {
    let o = Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", "dev", dev])
        .output()
        .ok()?;
    let t = String::from_utf8_lossy(&o.stdout).into_owned();
    t.lines()
        .find(|l| l.contains("prog/xdp") || l.trim_start().starts_with("xdp"))
        .map(|l| l.trim().to_owned())
}

/// Substitutes the namespaces' names into drawn options.
fn fill(args: &[String], ns: Option<&NetnsPair>) -> Vec<String> {
    args.iter()
        .map(|a| match (a.as_str(), ns) {
            ("@DEV", Some(p)) => p.veth_a.clone(),
            ("@DEV", None) => "mlx5_0".to_owned(),
            ("@PEERDEV", Some(p)) => p.veth_b.clone(),
            ("@DSTMAC", Some(p)) => p.mac_text(&p.b, &p.veth_b),
            ("@PEERDSTMAC", Some(p)) => p.mac_text(&p.a, &p.veth_a),
            ("@SRCIP", Some(p)) => p.ip_a.clone(),
            ("@DSTIP", Some(p)) => p.ip_b.clone(),
            _ => a.clone(),
        })
        .collect()
}

static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Runs `sc` once.
pub fn execute(sc: &Scenario) -> Outcome {
    let mut out = Outcome::default();
    if sc.tool == Tool::Lib {
        out.lib = Some(crate::churn::run(sc));
        return out;
    }
    let ns = if sc.backend == Backend::Xdp {
        match NetnsPair::new("cmp") {
            Some(p) => Some(p),
            None => {
                out.skipped = Some("no network namespaces here (root and `ip` needed)".into());
                return out;
            }
        }
    } else {
        None
    };
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = run_dir(sc.seed, n);
    let names = ns.as_ref().map(|p| (p.a.clone(), p.b.clone()));
    run_in(sc, ns.as_ref(), &dir, &mut out);
    if let Some(p) = &ns {
        // After the run (and its peer) ended: no XDP program may be left on either end.
        if !matches!(sc.fault, Fault::LinkDelete { .. }) {
            if let Some(l) = xdp_attached(&p.a, &p.veth_a) {
                out.leftovers.push(format!(
                    "an XDP program still attached to {}: {l}",
                    p.veth_a
                ));
            }
        }
        if let Some(l) = xdp_attached(&p.b, &p.veth_b) {
            out.leftovers.push(format!(
                "an XDP program still attached to {} (peer's end): {l}",
                p.veth_b
            ));
        }
    }
    drop(ns);
    if let Some((a, b)) = names {
        let o = Command::new("ip").args(["netns", "list"]).output();
        let list = o
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for name in [a, b] {
            if list
                .lines()
                .any(|l| l.split_whitespace().next() == Some(&name))
            {
                out.leftovers.push(format!("namespace {name} still exists"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// The command the tool runs as: `[ip netns exec A] [timeout N] rawq-TOOL ARGS`, or
/// `[timeout N] bash scripts/emu.sh -- rawq-TOOL ARGS` on the emulated NIC.
fn command(sc: &Scenario, ns: Option<&NetnsPair>, dir: &Path) -> Command {
    let tool = support::example(sc.tool.name());
    let args = fill(&sc.args, ns);
    let timeout = match sc.fault {
        Fault::Timeout { secs } => Some(secs),
        _ => None,
    };
    let mut c = if sc.backend.emulated() {
        let mut cmd = vec![tool.to_string_lossy().into_owned()];
        cmd.extend(args);
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let mut c = support::emu::emu_sh(
            None,
            timeout.map(|s| s as u32),
            &[],
            &cmd,
            &dir.join("emu-stats"),
        );
        if let Some(lib) = emu_lib() {
            c.env("RAWQ_EMU_LIB", lib);
        }
        c
    } else {
        let mut argv: Vec<String> = Vec::new();
        if let Some(p) = ns {
            argv.extend(["ip", "netns", "exec", &p.a].map(String::from));
        }
        if let Some(s) = timeout {
            argv.extend(["timeout".to_owned(), s.to_string()]);
        }
        argv.push(tool.to_string_lossy().into_owned());
        argv.extend(args);
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    c.env("TMPDIR", dir.join("tmp"))
        .stdin(Stdio::null())
        .process_group(0);
    match sc.fault {
        Fault::TxError { nth } => {
            c.env("RAWQ_EMU_TX_ERROR", nth.to_string());
        }
        Fault::DeviceFatal { .. } => {
            c.env("RAWQ_EMU_FATAL_FILE", fatal_file(dir));
        }
        Fault::QueueThread { q, panic } => {
            let var = match sc.tool {
                Tool::Fwd => "RAWQ_FWD_FAULT",
                _ => "RAWQ_PKTGEN_FAULT",
            };
            let what = if panic { "panic" } else { "error" };
            c.env(var, format!("queue-thread-{what}:{q}"));
        }
        _ => {}
    }
    c
}

/// The file whose existence fails the emulated device (`RAWQ_EMU_FATAL_FILE`).
fn fatal_file(dir: &Path) -> PathBuf {
    dir.join("device-fatal")
}

/// The release emulator, built once per test process by a first `scripts/emu.sh -- true` (so
/// that a signal drawn for a run lands on the run, not on emu.sh's `cargo build`).
fn emu_lib() -> Option<PathBuf> {
    static LIB: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("rawq-campaign-{}-warm", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let ok = support::emu::emu_sh(None, None, &[], &["true"], &dir.join("stats"))
            .status()
            .is_ok_and(|s| s.success());
        let _ = std::fs::remove_dir_all(&dir);
        let exe = std::env::current_exe().ok()?;
        let target = exe.parent()?.parent()?.parent()?;
        let lib = target.join("release/librawq_emu.so");
        (ok && lib.exists()).then_some(lib)
    })
    .clone()
}

/// Starts the xdp peer in namespace b, in a process group of its own.
fn start_peer(sc: &Scenario, ns: &NetnsPair) -> Option<Run> {
    let peer = sc.peer.as_ref()?;
    let bin = if peer.contains(&"-m".to_owned()) {
        "fwd"
    } else {
        "pktgen"
    };
    let mut c = support::run::in_ns(&ns.b, bin);
    c.args(fill(peer, Some(ns))).process_group(0);
    Some(Run::spawn(&mut c))
}

/// A run past its bound: what each process below the run's first one (`timeout`, emu.sh and
/// its reaper, the tool) and of its group was doing, then SIGKILL to the group, and how long
/// that took (a process in an uninterruptible wait dies only when the wait ends: the seed 9787
/// run that hung was still there 13 s after it; then its kernel stacks are taken again).
fn hang_report(pgid: u32, child: &mut Child) -> String {
    let mut pids = vec![pgid];
    pids.extend(group_members(pgid));
    let started = Instant::now();
    let mut r = support::procs::hang_report(&pids);
    // A slow run (seed 9800's, its device starved) may end while it is being described: then
    // gdb finds a zombie, and the run was late, not stuck.
    if let Ok(Some(s)) = child.try_wait() {
        r += &format!(
            "it ended by itself ({s}) while being described, {:.1} s past its bound: a slow \
             run, not a stuck one\n",
            started.elapsed().as_secs_f64()
        );
    }
    let t = Instant::now();
    kill_group(pgid, libc::SIGKILL);
    let mut again = false;
    loop {
        if child.try_wait().ok().flatten().is_some() && group_members(pgid).is_empty() {
            break;
        }
        if !again && t.elapsed() >= Duration::from_secs(2) {
            again = true;
            r += "2 s after SIGKILL to its process group, still there:\n";
            for p in support::procs::below(pgid)
                .into_iter()
                .chain(group_members(pgid))
            {
                r += &support::procs::threads_state(p);
            }
        }
        if t.elapsed() >= Duration::from_secs(60) {
            r += "still there 60 s after SIGKILL: given up on\n";
            return r;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.wait();
    r += &format!(
        "its process group died {:.1} s after SIGKILL\n",
        t.elapsed().as_secs_f64()
    );
    r
}

/// Reads a pipe to its end, or (with `lines`) until that many lines came, then closes it
/// (0: at once), as `head -N` does; what it read.
fn head(mut r: std::io::PipeReader, lines: Option<u64>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if lines.is_some_and(|n| v.iter().filter(|&&b| b == b'\n').count() as u64 >= n) {
                return v; // the pipe closes here
            }
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return v,
                Ok(n) => v.extend_from_slice(&buf[..n]),
            }
        }
    })
}

fn run_in(sc: &Scenario, ns: Option<&NetnsPair>, dir: &Path, out: &mut Outcome) {
    // A forwarding peer must be up before the tool sends to it.
    let peer_first = sc
        .peer
        .as_ref()
        .is_some_and(|p| p.contains(&"-m".to_owned()));
    let mut peer = None;
    if let (true, Some(p)) = (peer_first, ns) {
        let mut r = start_peer(sc, p).expect("peer");
        if !r.wait_for_stderr("fwd: ", Duration::from_secs(10)) {
            out.harness
                .push(format!("the peer fwd did not start: {}", r.stderr()));
        }
        peer = Some(r);
    }

    let err_path = dir.join("stderr");
    let mut cmd = command(sc, ns, dir);
    let (out_r, out_w) = std::io::pipe().expect("pipe");
    cmd.stdout(Stdio::from(out_w));
    let mut err_pipe = None;
    match sc.fault {
        Fault::ClosedStderr { .. } => {
            let (r, w) = std::io::pipe().expect("pipe");
            cmd.stderr(Stdio::from(w));
            err_pipe = Some(r);
        }
        _ => {
            let f = std::fs::File::create(&err_path).expect("stderr file");
            cmd.stderr(Stdio::from(f));
        }
    }
    let start = Instant::now();
    let mut child: Child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            out.harness.push(format!("cannot start {cmd:?}: {e}"));
            return;
        }
    };
    drop(cmd); // our copies of the pipes' write ends
    let out_lines = match sc.fault {
        Fault::ClosedStdout { lines } => Some(lines),
        _ => None,
    };
    let reader = Some(head(out_r, out_lines));
    let err_reader = match (sc.fault, err_pipe) {
        (Fault::ClosedStderr { lines }, Some(r)) => Some(head(r, Some(lines))),
        _ => None,
    };
    let pgid = child.id();
    let stderr_now = || std::fs::read_to_string(&err_path).unwrap_or_default();
    let banner = format!("{}: ", sc.tool.name());

    if let (false, Some(p)) = (peer_first, ns) {
        if sc.peer.is_some() {
            // The tool receives: its queues are up once it has said so; then the peer sends.
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end
                && !stderr_now().contains(&banner)
                && child.try_wait().ok().flatten().is_none()
            {
                std::thread::sleep(POLL);
            }
            peer = start_peer(sc, p);
        }
    }

    let emu_allowance = if sc.backend.emulated() { 10 } else { 0 };
    let mut bound = start + Duration::from_secs(sc.expect_secs + emu_allowance) + END_BOUND;
    let mut bound_what = format!(
        "{} s (its own {} s, {} s of start-up, {} s to end)",
        (bound - start).as_secs(),
        sc.expect_secs,
        emu_allowance,
        END_BOUND.as_secs()
    );
    let (fault_at, up_at) = match sc.fault {
        Fault::Signal { ms, .. } | Fault::GroupSignal { ms, .. } => (Some(ms), None),
        Fault::Timeout { secs } => (Some(secs * 1000), None),
        Fault::LinkFlap { ms, down_ms } => (Some(ms), Some(ms + down_ms)),
        Fault::LinkDelete { ms } => (Some(ms), None),
        Fault::DeviceFatal { ms } => (Some(ms), None),
        _ => (None, None),
    };
    let mut fault_done = false;
    let mut up_done = false;
    let status = loop {
        if let Some(s) = child.try_wait().ok().flatten() {
            break Some(s);
        }
        let now = Instant::now();
        let el = now - start;
        if let (Some(at), false) = (fault_at, fault_done) {
            if el >= Duration::from_millis(at) {
                fault_done = true;
                out.fault_at = Some(el);
                out.started_at_signal = Some(stderr_now().contains(&banner));
                match sc.fault {
                    Fault::Signal { sig, .. } => {
                        // SAFETY: kill on our unreaped child's pid.
                        unsafe { libc::kill(pgid as libc::pid_t, sig) };
                    }
                    Fault::GroupSignal { sig, .. } => kill_group(pgid, sig),
                    Fault::DeviceFatal { .. } => {
                        if let Err(e) = std::fs::write(fatal_file(dir), b"") {
                            out.harness.push(format!("cannot fail the device: {e}"));
                        }
                    }
                    Fault::LinkFlap { .. } | Fault::LinkDelete { .. } => {
                        let p = ns.expect("link faults are drawn for xdp runs");
                        let r = if matches!(sc.fault, Fault::LinkDelete { .. }) {
                            ip_quiet(&["-n", &p.a, "link", "del", &p.veth_a])
                        } else {
                            ip_quiet(&["-n", &p.a, "link", "set", &p.veth_a, "down"])
                        };
                        if let Err(e) = r {
                            out.harness.push(e);
                        }
                    }
                    _ => {}
                }
                let b = now + END_BOUND;
                if b < bound
                    || matches!(
                        sc.fault,
                        Fault::Signal { .. } | Fault::GroupSignal { .. } | Fault::Timeout { .. }
                    )
                {
                    bound = b;
                    bound_what = format!("{} s after the fault", END_BOUND.as_secs());
                }
            }
        }
        if let (Some(at), false) = (up_at, up_done) {
            if el >= Duration::from_millis(at) {
                up_done = true;
                let p = ns.expect("link faults are drawn for xdp runs");
                if let Err(e) = ip_quiet(&["-n", &p.a, "link", "set", &p.veth_a, "up"]) {
                    out.harness.push(e);
                }
            }
        }
        if now >= bound {
            out.hung = Some(format!("still running after {bound_what}; killed"));
            out.hang_report = Some(hang_report(pgid, &mut child));
            break None;
        }
        std::thread::sleep(POLL);
    };
    out.elapsed = start.elapsed();
    out.status = status;
    if let Some(r) = reader {
        // The pipe ends with the last process holding it (wait for that, bounded).
        let end = Instant::now() + LEFTOVER_WAIT;
        while !r.is_finished() && Instant::now() < end {
            std::thread::sleep(POLL);
        }
        if r.is_finished() {
            out.stdout = String::from_utf8_lossy(&r.join().unwrap_or_default()).into_owned();
        } else {
            out.leftovers
                .push("a process of the run still holds its stdout open".into());
        }
    }
    out.stderr = match err_reader {
        // What the reader of the closed stderr took before it went away.
        Some(r) if r.is_finished() => {
            String::from_utf8_lossy(&r.join().unwrap_or_default()).into_owned()
        }
        Some(_) => String::new(),
        None => stderr_now(),
    };
    if let Some(p) = peer {
        let _ = p.signal(libc::SIGINT);
        if let Err(o) = p.try_finish(END_BOUND) {
            out.harness.push(format!(
                "the peer did not end within {} s of SIGINT: {}",
                END_BOUND.as_secs(),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
    }
    // Leftovers: the run's process group, emu.sh's reaper, its temp tree.
    let left = wait_empty(LEFTOVER_WAIT, || group_members(pgid));
    if !left.is_empty() {
        out.leftovers.push(format!(
            "processes of the run still alive after it ended: {left:?} (killed)"
        ));
        kill_group(pgid, libc::SIGKILL);
    }
    let needle = dir.join("tmp").to_string_lossy().into_owned();
    let left = wait_empty(LEFTOVER_WAIT, || mentioning(&needle));
    for (pid, cmdline) in left {
        out.leftovers
            .push(format!("process {pid} still alive: {}", cmdline.trim()));
        // SAFETY: kill on a process that names this run's own scratch directory.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    let tmp = dir.join("tmp");
    let left = wait_empty(LEFTOVER_WAIT, || {
        std::fs::read_dir(&tmp)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    });
    for f in left {
        out.leftovers
            .push(format!("temporary tree left behind: $TMPDIR/{f}"));
    }
}

/// A run held on purpose (`yes` blocked writing into a pipe that `sleep` never reads, in a
/// process group of its own, as the campaign starts a tool) is described before it is killed:
/// every process of it, the writer waiting in a pipe write, and its death after SIGKILL.
#[test]
fn a_hung_run_is_described_before_it_is_killed() {
    let mut child = Command::new("bash")
        .args(["-c", "yes | sleep 600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start bash");
    let pgid = child.id();
    let writer_blocked = || {
        group_members(pgid).into_iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "yes")
                && std::fs::read_to_string(format!("/proc/{p}/wchan"))
                    .is_ok_and(|w| w.contains("pipe_write"))
        })
    };
    let end = Instant::now() + Duration::from_secs(30);
    while !writer_blocked() && Instant::now() < end {
        std::thread::sleep(POLL);
    }
    let blocked = writer_blocked();
    let r = hang_report(pgid, &mut child);
    assert!(blocked, "yes never blocked in a pipe write:\n{r}");
    for what in ["(bash)", "(yes)", "(sleep)", "pipe_write", "died"] {
        assert!(r.contains(what), "no {what:?} in:\n{r}");
    }
    assert!(group_members(pgid).is_empty(), "{r}");
}
