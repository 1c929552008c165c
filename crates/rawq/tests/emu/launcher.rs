//! `scripts/emu.sh` itself (issue 20 defects 2 and 7, issue 23): however it is stopped (SIGINT,
//! SIGTERM twice, `timeout`, SIGKILL) it leaves nothing behind – no temporary sysfs tree, no
//! TAP it made, no workload still running; its arguments are checked with plain messages; it
//! runs the release emulator unless asked for the debug one, and says what it builds.

use rawq_testkit as support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::emu::serial;

fn root() -> &'static Path {
    support::repo_root()
}

/// Waits until `cond` holds, up to `limit`; returns whether it did.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` still runs (a zombie does not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill() with a pid this test started (or its launcher's workload).
    unsafe { libc::kill(pid, sig) };
}

/// How the launcher is stopped.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGINT to the launcher (Ctrl-C).
    Int,
    /// SIGTERM, and a second one while it cleans up.
    TermTwice,
    /// `timeout` ends it: SIGTERM to the launcher, then to the whole process group.
    Timeout,
    /// SIGKILL to the launcher: it can do nothing, yet nothing may be left.
    Kill,
}

/// One launcher in a namespace of its own, with a TAP it makes and a workload that takes a
/// moment to stop (so that a second signal lands during the cleanup).
struct Run {
    ns: support::NetnsPair,
    tap: String,
    tmp: PathBuf,
    pidfile: PathBuf,
}

impl Run {
    fn new(tag: &str) -> Option<Run> {
        let ns = support::NetnsPair::new(tag)?;
        let tap = format!("rql{}{}", tag, std::process::id() % 10_000);
        let tmp = support::emu::tempdir(&format!("launcher-{tag}"));
        let pidfile = tmp.join("workload.pid");
        Some(Run {
            ns,
            tap,
            tmp,
            pidfile,
        })
    }

    /// `[timeout 600] bash scripts/emu.sh --netdev TAP -- bash -c WORKLOAD` in namespace a,
    /// temporary files under `self.tmp`.
    fn start(&self, with_timeout: bool) -> Child {
        let workload = format!(
            "trap 'kill $!; sleep 0.5; exit 0' TERM; echo $$ > {}; sleep 1000 & wait",
            self.pidfile.display()
        );
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns.a]);
        if with_timeout {
            c.args(["timeout", "600"]);
        }
        c.arg("bash")
            .arg(root().join("scripts/emu.sh"))
            .args(["--netdev", &self.tap, "--", "bash", "-c", &workload])
            .current_dir(root())
            .env_remove("LD_PRELOAD")
            .env_remove("RAWQ_EMU_LIB")
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // A file, not a pipe: a workload left running would hold a pipe open for ever.
            .stderr(std::fs::File::create(self.tmp.join("stderr")).expect("stderr file"));
        support::procs::default_signals(&mut c)
            .spawn()
            .expect("start emu.sh")
    }

    fn tap_exists(&self) -> bool {
        self.ns
            .exec(&self.ns.a, &["ip", "link", "show", &self.tap])
            .status
            .success()
    }

    /// The launcher's temporary trees still present.
    fn trees(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.tmp)
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.to_string_lossy().contains("rawq-emu."))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What is left: (trees, TAP, workload alive).
    fn left(&self, workload: i32) -> (Vec<PathBuf>, bool, bool) {
        (self.trees(), self.tap_exists(), alive(workload))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

fn stopped_by(stop: Stop, tag: &str) {
    let _g = serial();
    let Some(run) = Run::new(tag) else { return };
    let mut child = run.start(matches!(stop, Stop::Timeout));
    let started = wait_until(Duration::from_secs(300), || {
        std::fs::read_to_string(&run.pidfile).is_ok_and(|s| s.ends_with('\n'))
            || child.try_wait().ok().flatten().is_some()
    });
    assert!(started, "the workload never started");
    let workload: i32 = match std::fs::read_to_string(&run.pidfile) {
        Ok(s) => s.trim().parse().expect("workload pid"),
        Err(_) => {
            let _ = child.wait();
            panic!(
                "emu.sh ended before its workload started:\n{}",
                std::fs::read_to_string(run.tmp.join("stderr")).unwrap_or_default()
            );
        }
    };
    assert!(run.tap_exists(), "emu.sh made no TAP {}", run.tap);
    assert_eq!(run.trees().len(), 1, "one temporary tree while running");
    let pid = child.id() as i32;
    match stop {
        Stop::Int => kill(pid, libc::SIGINT),
        Stop::TermTwice => {
            kill(pid, libc::SIGTERM);
            // The workload takes 0.5 s to stop: this lands while emu.sh waits for it.
            std::thread::sleep(Duration::from_millis(150));
            kill(pid, libc::SIGTERM);
        }
        // `timeout` does on SIGTERM what it does when its time is up.
        Stop::Timeout => kill(pid, libc::SIGTERM),
        Stop::Kill => kill(pid, libc::SIGKILL),
    }
    let exited = wait_until(Duration::from_secs(30), || {
        child.try_wait().ok().flatten().is_some()
    });
    if !exited {
        let _ = child.kill();
    }
    let _ = child.wait();
    let stderr = std::fs::read_to_string(run.tmp.join("stderr")).unwrap_or_default();
    // After SIGKILL emu.sh cannot clean up itself: what it left must go on its own, soon.
    let limit = match stop {
        Stop::Kill => Duration::from_secs(10),
        _ => Duration::ZERO,
    };
    let clean = wait_until(limit, || run.left(workload) == (vec![], false, false));
    let left = run.left(workload);
    if left.2 {
        kill(workload, libc::SIGKILL);
    }
    assert!(
        clean,
        "{stop:?}: left behind (trees, TAP {}, workload {workload} running): {left:?}\n{stderr}",
        run.tap,
    );
    assert!(
        exited,
        "{stop:?}: emu.sh still running 30 s after the signal:\n{stderr}"
    );
}

#[test]
fn nothing_is_left_after_ctrl_c() {
    stopped_by(Stop::Int, "i");
}

#[test]
fn nothing_is_left_after_sigterm_twice() {
    stopped_by(Stop::TermTwice, "t");
}

#[test]
fn nothing_is_left_after_timeout() {
    stopped_by(Stop::Timeout, "o");
}

#[test]
fn nothing_is_left_after_sigkill() {
    stopped_by(Stop::Kill, "k");
}

/// `emu.sh OPTS -- true`: (status, stderr).
fn launcher(opts: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("bash")
        .arg(root().join("scripts/emu.sh"))
        .args(opts)
        .current_dir(root())
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .stdin(Stdio::null())
        .output()
        .expect("run emu.sh");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn options_without_their_value_are_refused_plainly() {
    for opt in ["--wire", "--netdev", "--min-inline"] {
        // The value is missing: `--` is not an interface name.
        let (code, err) = launcher(&[opt, "--", "true"]);
        assert_eq!(code, Some(2), "{opt} -- true: {err}");
        assert!(
            err.contains(&format!("{opt} needs")) && !err.contains(": line "),
            "{opt} -- true: {err}"
        );
        // Nothing at all after it.
        let (code, err) = launcher(&[opt]);
        assert_eq!(code, Some(2), "{opt}: {err}");
        assert!(
            err.contains(&format!("{opt} needs")) && !err.contains(": line "),
            "{opt}: {err}"
        );
    }
}

#[test]
fn release_by_default_debug_on_request_and_the_build_is_announced() {
    let _g = serial();
    let (code, err) = launcher(&["--", "sh", "-c", "echo \"$LD_PRELOAD\" >&2"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("release") && err.contains("/release/librawq_emu.so"),
        "the release emulator by default, and said: {err}"
    );
    let (code, err) = launcher(&["--release", "--", "sh", "-c", "echo \"$LD_PRELOAD\" >&2"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("/release/librawq_emu.so"), "{err}");
    let (code, err) = launcher(&["--debug", "--", "sh", "-c", "echo \"$LD_PRELOAD\" >&2"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("debug") && err.contains("/debug/librawq_emu.so"),
        "--debug: {err}"
    );
}

#[test]
fn cable_needs_a_path_and_is_the_only_wire() {
    for args in [&["--cable", "--", "true"][..], &["--cable"][..]] {
        let (code, err) = launcher(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--cable needs") && !err.contains(": line "),
            "{args:?}: {err}"
        );
    }
    for other in [&["--pair"][..], &["--wire", "lo"][..]] {
        let mut args = vec!["--cable", "/tmp/rawq-cable-refused"];
        args.extend(other);
        args.extend(["--", "true"]);
        let (code, err) = launcher(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--cable is the port's wire"),
            "{args:?}: {err}"
        );
    }
}

/// How a signal reaches `emu.sh` in [`signals_reach_the_command_once`].
#[derive(Clone, Copy, Debug)]
enum Sent {
    /// SIGTERM to `timeout`, which sends it to emu.sh and then to its whole process group (the
    /// command included), as when its time is up.
    Timeout,
    /// SIGTERM to emu.sh's process group (a terminal's Ctrl-C, a supervisor's group kill).
    Group,
    /// SIGTERM to emu.sh alone (`kill PID`): it must pass it on.
    Launcher,
}

/// Issue 32 defect 2: `timeout 6 emu.sh -- pktgen ...` printed no summary, because the command
/// got SIGTERM from its process group and again from emu.sh (pktgen takes a second signal as
/// "exit at once"); and killing `timeout` dumped emu.sh's reaper script on stderr. However the
/// signal is sent, the command gets it exactly once, and emu.sh says nothing of its own jobs.
#[test]
fn signals_reach_the_command_once() {
    let _g = serial();
    for sent in [Sent::Timeout, Sent::Group, Sent::Launcher] {
        let tmp = support::emu::tempdir("launcher-once");
        let (pidfile, got) = (tmp.join("pid"), tmp.join("got"));
        // Counts its SIGTERMs, ends on its own 6 s after it starts (or 1 s after its first).
        let workload = format!(
            "trap 'echo TERM >> {got}; end=10' TERM; echo $$ > {pid}; end=60; \
             for ((i = 0; i < end; i++)); do sleep 0.1; done",
            got = got.display(),
            pid = pidfile.display()
        );
        let mut c = Command::new("setsid");
        // A process group of its own (setsid --wait: this test is not in it).
        c.arg("--wait");
        if matches!(sent, Sent::Timeout) {
            c.args(["timeout", "600"]);
        }
        c.arg("bash")
            .arg(root().join("scripts/emu.sh"))
            .args(["--", "bash", "-c", &workload])
            .current_dir(root())
            .env_remove("LD_PRELOAD")
            .env_remove("RAWQ_EMU_LIB")
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(tmp.join("stderr")).expect("stderr file"));
        let mut child = c.spawn().expect("start emu.sh");
        let started = wait_until(Duration::from_secs(300), || {
            std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
                || child.try_wait().ok().flatten().is_some()
        });
        let stderr = || std::fs::read_to_string(tmp.join("stderr")).unwrap_or_default();
        assert!(
            started,
            "{sent:?}: the workload never started: {}",
            stderr()
        );
        let workload: i32 = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("{sent:?}: emu.sh ended first: {}", stderr()));
        // setsid --wait forks: the group (and session) leader is its child, timeout or bash.
        let leader = std::fs::read_to_string(format!("/proc/{workload}/stat"))
            .ok()
            .and_then(|s| {
                let f: Vec<&str> = s.rsplit_once(") ")?.1.split(' ').collect();
                f.get(2)?.parse::<i32>().ok()
            })
            .expect("the workload's process group");
        match sent {
            Sent::Timeout | Sent::Launcher => kill(leader, libc::SIGTERM),
            Sent::Group => kill(-leader, libc::SIGTERM),
        }
        let exited = wait_until(Duration::from_secs(30), || {
            child.try_wait().ok().flatten().is_some()
        });
        if !exited {
            kill(-leader, libc::SIGKILL);
        }
        let _ = child.wait();
        let err = stderr();
        let got = std::fs::read_to_string(&got).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&tmp);
        assert!(
            exited,
            "{sent:?}: emu.sh still running 30 s after the signal: {err}"
        );
        assert_eq!(
            got.lines().count(),
            1,
            "{sent:?}: SIGTERMs the command got: {got:?}"
        );
        assert!(
            !err.contains("reaper") && !err.contains("Killed") && !err.contains("tail --pid"),
            "{sent:?}: emu.sh's own jobs on stderr: {err}"
        );
    }
}
