//! `pktgen --rx` on SIGTERM counts what is already in its receive queue before it ends: the
//! frames the device delivered and no poll has taken yet are part of the run (the device
//! counted them delivered), so the summary's count equals the device's.
//!
//! On the looped-back emulated ConnectX: the emulator's frame source (`RAWQ_EMU_RXGEN`, with
//! flow control so that none is dropped) puts 1000 frames into the receive queue while the
//! receiving thread is held still (ptrace), so that they are all waiting there when SIGTERM
//! comes; once pktgen says it is stopping, the thread goes on. A second signal ends pktgen at
//! once, its receive thread still held. Needs ptrace of a process of the same user (says
//! `skipped:` where that is refused, unless `RAWQ_REQUIRE_NETNS=1`).
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use support::emu::{emu_sh, last_counter, rxgen, serial, tempdir, text, wait_for};
use support::procs::{threads_named, wait_descendant, Held};

/// Frames made: many bursts, fewer than the receive ring holds.
const COUNT: u64 = 1000;

/// Waits until `file` contains `pat`, up to `limit`; false past it.
fn wait_text(file: &Path, pat: &str, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if std::fs::read_to_string(file).is_ok_and(|t| t.contains(pat)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// pktgen --rx under emu.sh with the emulator's frame source waiting for `go`, its receiving
/// thread held still by this test.
struct Rig {
    child: Child,
    /// pktgen's own process.
    pid: u32,
    held: Option<Held>,
    err: std::path::PathBuf,
    stats: std::path::PathBuf,
    go: std::path::PathBuf,
}

impl Rig {
    /// None (after saying `skipped:`) where ptrace is refused.
    fn start(tag: &str) -> Option<Rig> {
        let dir = tempdir(tag);
        let stats = dir.join("model.stats");
        let go = dir.join("go");
        let err = dir.join("pktgen.err");
        for f in [&stats, &go] {
            let _ = std::fs::remove_file(f);
        }
        let pktgen = support::example("pktgen");
        let args = [
            pktgen.to_str().unwrap(),
            "-b",
            "dv",
            "-d",
            "mlx5_0",
            "--rx",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "--ring",
            "4096",
            "-t",
            "100",
            "--json",
        ];
        let child = emu_sh(None, None, &[], &args, &stats)
            .env("RAWQ_EMU_RXGEN", COUNT.to_string())
            .env("RAWQ_EMU_RXGEN_START", &go)
            .env("RAWQ_EMU_PAUSE", "1")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("run scripts/emu.sh");
        let mut rig = Rig {
            pid: 0,
            child,
            held: None,
            err,
            stats,
            go,
        };
        // emu.sh may build the emulator first.
        if !wait_text(&rig.err, "pktgen: dv on", Duration::from_secs(600)) {
            let (o, e) = rig.finish(true);
            panic!("pktgen did not open its port:\n{e}\n{}", text(&o));
        }
        // Its first line of live stats: the main thread is in its loop, so the queue thread has
        // passed the barrier where both wait for each other (holding it before that would hold
        // the main thread too).
        if !wait_text(&rig.err, "total: ", Duration::from_secs(30)) {
            let (o, e) = rig.finish(true);
            panic!("pktgen printed no live stats:\n{e}\n{}", text(&o));
        }
        rig.pid = wait_descendant(rig.child.id(), "rawq-pktgen", Duration::from_secs(10))
            .expect("pktgen's process under emu.sh");
        // The receiving queue's thread: the one unnamed thread besides the main one.
        let rx = threads_named(rig.pid, "rawq-pktgen");
        assert_eq!(
            rx.len(),
            1,
            "one queue thread in pktgen {}: {rx:?}",
            rig.pid
        );
        match Held::stop(rx[0]) {
            Ok(h) => rig.held = Some(h),
            Err(e) => {
                let _ = rig.finish(true);
                let why = format!("ptrace of pktgen's receive thread refused here: {e}");
                assert!(!support::netns_required(), "{why}");
                println!("skipped: {why}");
                return None;
            }
        }
        Some(rig)
    }

    /// SIGTERM to pktgen itself.
    fn sigterm(&self) {
        // SAFETY: kill(2) on pktgen's pid, found under our own child, which has not been
        // reaped (pktgen's parent, emu.sh, waits for it).
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
    }

    /// Lets the held thread go (or collects it), waits for emu.sh (killed past a minute; its
    /// reaper then stops pktgen) and returns its output (pktgen's status is emu.sh's) and
    /// pktgen's stderr. With `stop`, first asks emu.sh to stop pktgen (a failed start).
    fn finish(mut self, stop: bool) -> (Output, String) {
        drop(self.held.take());
        if stop {
            // SAFETY: kill(2) on our own child's pid (emu.sh stops pktgen on SIGTERM).
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        }
        let o = wait_for(self.child, Duration::from_secs(60));
        (o, std::fs::read_to_string(&self.err).unwrap_or_default())
    }
}

#[test]
fn sigterm_counts_the_frames_already_in_the_receive_queue() {
    let _one = serial();
    let Some(rig) = Rig::start("pktgen-drain") else {
        return;
    };
    // The frames go into the receive queue; nobody polls it.
    std::fs::write(&rig.go, b"").unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    let delivered = loop {
        let d = last_counter(&rig.stats, "rx_frames").unwrap_or(0);
        if rxgen(&rig.stats) == Some((COUNT, true)) && d == COUNT {
            break true;
        }
        if Instant::now() > end {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    rig.sigterm();
    let said = wait_text(&rig.err, "pktgen: stopping", Duration::from_secs(30));
    let stats = rig.stats.clone();
    let (o, e) = rig.finish(false);
    let st = std::fs::read_to_string(&stats).unwrap_or_default();
    assert!(
        delivered,
        "the device did not deliver the {COUNT} frames in 60 s:\n{st}"
    );
    assert!(said, "pktgen did not say it was stopping:\n{e}");
    assert!(o.status.success(), "pktgen:\n{e}\n{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary:\n{e}\n{out}"));
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
    let model = |k| last_counter(&stats, k).unwrap_or_else(|| panic!("{k} not in:\n{st}"));
    assert_eq!(model("rx_no_buffer"), 0, "flow control drops nothing: {st}");
    assert_eq!(model("rx_frames"), COUNT, "{st}");
    assert_eq!(
        v["rx_packets"].as_u64(),
        Some(COUNT),
        "pktgen counts every frame its device delivered, those in the queue at SIGTERM \
         too:\n{v}\n{st}"
    );
}

/// A second signal (half a second or more after the first) ends pktgen at once (status 130,
/// no summary): here while its receive thread, held, could never finish the run.
#[test]
fn a_second_sigterm_ends_pktgen_at_once() {
    let _one = serial();
    let Some(rig) = Rig::start("pktgen-drain2") else {
        return;
    };
    let first = Instant::now();
    rig.sigterm();
    let said = wait_text(&rig.err, "pktgen: stopping", Duration::from_secs(30));
    // Within half a second of the first, a signal is the first one delivered twice (pktgen's
    // SAME_REQUEST, for `timeout` and group signals): the second comes after that.
    while first.elapsed() < Duration::from_millis(600) {
        std::thread::sleep(Duration::from_millis(20));
    }
    rig.sigterm();
    // pktgen's process ends (its main thread a zombie, or gone) with its receive thread held.
    let stat = format!("/proc/{}/stat", rig.pid);
    let end = Instant::now() + Duration::from_secs(30);
    let ended = loop {
        let state = std::fs::read_to_string(&stat).unwrap_or_default();
        let state = state.rsplit(") ").next().and_then(|t| t.chars().next());
        if matches!(state, None | Some('Z') | Some('X')) {
            break true;
        }
        if Instant::now() > end {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (o, e) = rig.finish(false);
    assert!(said, "pktgen did not say it was stopping:\n{e}");
    assert!(ended, "pktgen did not end on the second SIGTERM:\n{e}");
    assert_eq!(o.status.code(), Some(130), "{e}\n{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains('{'),
        "no summary after a second signal:\n{}",
        text(&o)
    );
}
