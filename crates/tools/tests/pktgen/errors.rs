//! pktgen and fwd refuse what they cannot do, plainly and without panicking; every run is
//! bounded (a hang is a failure). Runs on the software device (`-b model`): no root needed.

use rawq_testkit as support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs example `bin` with `args`, killing it after `secs` (a hang fails the test).
fn run(bin: &str, args: &[&str], secs: u64) -> Output {
    support::run_example(bin, args, secs)
}

/// `bin args` fails within 5 s with a message containing each of `needles`, and no panic.
fn refused(bin: &str, args: &[&str], needles: &[&str]) {
    let out = run(bin, args, 5);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{bin} {args:?} should fail: {err}");
    assert!(!err.contains("panicked"), "{bin} {args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{bin} {args:?}: no {n:?} in: {err}");
    }
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

const FWD_RULE: &[&str] = &["--rule", "promiscuous -> queue 0"];

/// Issue 12 item 5: `--burst 0` hung pktgen and made fwd forward nothing, silently.
#[test]
fn burst_zero_is_refused() {
    refused(
        "pktgen",
        &["-b", "model", "-n", "5", "--burst", "0"],
        &["--burst"],
    );
    let mut a = vec!["-b", "model", "-d", "x", "--burst", "0", "-t", "1"];
    a.extend_from_slice(FWD_RULE);
    refused("fwd", &a, &["--burst"]);
    // A burst the ring can never take at once used to send nothing, silently.
    refused(
        "pktgen",
        &[
            "-b", "model", "-t", "1", "--burst", "4096", "--ring", "2048",
        ],
        &["--burst 4096 is above --ring 2048"],
    );
}

/// Issue 12 item 10: no -t input panics or is taken when it makes no sense.
#[test]
fn no_duration_input_panics_or_passes_unchecked() {
    for t in [
        "1e30",
        "nan",
        "0",
        "-1",
        "inf",
        "1e308s",
        "-0.5",
        "99999999999m",
    ] {
        refused(
            "pktgen",
            &["-b", "model", "-n", "5", "-t", t],
            &["--duration"],
        );
        let mut a = vec!["-b", "model", "-d", "x", "-t", t];
        a.extend_from_slice(FWD_RULE);
        refused("fwd", &a, &["--duration"]);
    }
    for r in ["1e30", "nan", "-5", "1e400kpps"] {
        let out = run("pktgen", &["-b", "model", "-n", "5", "-r", r, "--quiet"], 5);
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("panicked"),
            "-r {r}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Issue 12 item 17: rules are parsed in every mode; `-r 0pps` means unlimited like `-r 0`.
#[test]
fn rules_always_parsed_and_zero_rate_is_unlimited() {
    refused(
        "pktgen",
        &["-b", "model", "-n", "1", "--rule", "garbage"],
        &["garbage"],
    );
    for r in ["0", "0pps", "0kpps", "0Mpps"] {
        let v = json(&run(
            "pktgen",
            &["-b", "model", "-n", "100", "-r", r, "--json", "--quiet"],
            10,
        ));
        assert_eq!(v["packets"].as_u64(), Some(100), "-r {r}: {v}");
    }
    let help = run("pktgen", &["--help"], 5);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("0 = unlimited"), "{text}");
}

/// Issue 12 item 11: `--count` is exact over several queues.
#[test]
fn count_is_exact_over_several_queues() {
    for (q, n) in [(2, 5), (3, 7), (4, 2), (2, 1)] {
        let (qs, ns) = (q.to_string(), n.to_string());
        let v = json(&run(
            "pktgen",
            &["-b", "model", "-q", &qs, "-n", &ns, "--json", "--quiet"],
            10,
        ));
        assert_eq!(v["packets"].as_u64(), Some(n), "-q {q} -n {n}: {v}");
    }
}

/// `--help` opens with what the tool does, not the crate's description.
#[test]
fn help_says_what_the_tool_does() {
    for (bin, words) in [("pktgen", "traffic generator"), ("fwd", "forward")] {
        let out = run(bin, &["--help"], 5);
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap_or_default();
        assert!(first.contains(words), "{bin}: {first}");
        assert!(!text.contains("Kernel-bypass raw packet I/O"), "{text}");
    }
}

/// Issue 12 item 15: messages that point at the real problem.
#[test]
fn messages_name_the_real_problem() {
    // -q 0 is a queue count problem, not a rule syntax error.
    refused(
        "pktgen",
        &["--rx", "-b", "model", "-q", "0", "-t", "1"],
        &["--queues"],
    );
    // A frame size above the largest frame says so.
    refused(
        "pktgen",
        &["-b", "model", "-s", "65536", "-n", "1"],
        &["65535"],
    );
    // The same device twice: not a complaint about fwd's own XDP program.
    refused(
        "fwd",
        &[
            "-b",
            "xdp",
            "-d",
            "lo",
            "-d",
            "lo",
            "--rule",
            "promiscuous -> queue 0",
        ],
        &["twice"],
    );
}

/// Starts `bin args`, sends SIGTERM after `after`, and returns its output.
fn terminated(bin: &str, args: &[&str], after: Duration) -> Output {
    let child = Command::new(support::example(bin))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    // SAFETY: kill on the pid of a child this test started and has not reaped.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let t = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{bin} took long to stop"
    );
    out
}

/// Issue 12 item 7: SIGTERM (what scripts, systemd and containers send) ends the run with the
/// summary and the JSON, exactly as Ctrl-C does.
#[test]
fn sigterm_gives_the_summary() {
    let out = terminated(
        "pktgen",
        &["-b", "model", "-r", "10kpps", "--json", "--quiet"],
        Duration::from_millis(1500),
    );
    let v = json(&out);
    assert!(v["packets"].as_u64().unwrap() > 1000, "{v}");
    let mut a = vec!["-b", "model", "-d", "x", "--quiet"];
    a.extend_from_slice(FWD_RULE);
    let out = terminated("fwd", &a, Duration::from_millis(1000));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("fwd: forwarded 0 frames"), "{text}");
}

/// Issue 32: one stop request delivered twice (`timeout` signals its command and then the
/// command's process group; a terminal's Ctrl-C reaches every process of its group) is one
/// request: the run still ends with its summary, not as a second signal's exit at once.
#[test]
fn a_signal_delivered_twice_at_once_still_gives_the_summary() {
    let args = ["-b", "model", "-r", "10kpps", "--json", "--quiet"];
    let child = Command::new(support::example("pktgen"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // Two deliveries, 100 ms apart (two kills at once would merge into one pending signal in
    // the kernel), both well within pktgen's half second.
    for i in 0..2 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: kill on the pid of a child this test started and has not reaped.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
    }
    let out = child.wait_with_output().unwrap();
    let v = json(&out);
    assert!(v["packets"].as_u64().unwrap() > 1000, "{v}");
    // The same through `timeout` itself (coreutils), which a user wraps a run in.
    let out = Command::new("timeout")
        .args(["-s", "TERM", "1.5"])
        .arg(support::example("pktgen"))
        .args(args)
        .output()
        .expect("run timeout (coreutils)");
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("no JSON summary under `timeout` ({e}): {text:?}"));
    assert!(v["packets"].as_u64().unwrap() > 1000, "{v}");
}

/// Issue 12 item 16: rates are over the active window, and `-t` is kept.
#[test]
fn rates_over_the_active_window_and_duration_kept() {
    let v = json(&run(
        "pktgen",
        &[
            "-b", "model", "-r", "50kpps", "-n", "20000", "--json", "--quiet",
        ],
        10,
    ));
    let pps = v["pps"].as_f64().unwrap();
    let active = v["duration_s"].as_f64().unwrap();
    let elapsed = v["elapsed_s"].as_f64().unwrap();
    // The rate is the packets over the active window (first to last packet), not over the
    // whole run (linger and polling included: that once read 40 000 of 50 000), and the pacer
    // never runs ahead of the asked rate. How close a loaded machine comes to 50 kpps is a
    // bench's question (scripts/bench-*.sh), not a test's.
    assert!(active < elapsed, "{v}");
    let packets = v["packets"].as_f64().unwrap();
    // pps counts the intervals between the first and the last packet: (packets - 1) / active.
    // (Compared with `packets` and a bound of exactly 1.0, float rounding failed it in CI.)
    assert!(
        (pps * active - (packets - 1.0)).abs() <= 1e-6 * packets,
        "{v}"
    );
    assert!(pps <= 50_000.0 * 1.02, "{v}");
    // -t kept: paced, a run that sent past its second would have sent more than the rate's
    // worth of it (plus one burst a queue). That holds on a loaded machine too, where the
    // active window's end (read with the clock every so many bursts, and late when the thread
    // was kept off its core in between: 1.04 to 2.19 s beside two busy loops) and the wall
    // time (1.2 to 2.4 s) do not: they are bounded by the window's start and the settle's own
    // bound (1 s without a completion) instead.
    let v = json(&run(
        "pktgen",
        &[
            "-b", "model", "-q", "2", "-r", "100kpps", "-t", "1", "--json", "--quiet",
        ],
        10,
    ));
    let active = v["duration_s"].as_f64().unwrap();
    let elapsed = v["elapsed_s"].as_f64().unwrap();
    let packets = v["packets"].as_u64().unwrap();
    assert!(
        packets <= 100_000 + 2 * 32,
        "-t 1 at 100 kpps sent {packets}: {v}"
    );
    assert!(active > 0.5 && active <= elapsed, "{v}");
    // The wall time is bounded by the send loop's -t and the settle's own bound (loops.rs:
    // a device still completing what it took is waited for, 10 s in all; beside two busy
    // loops the model once took 1.9 s to complete a second's frames at half the rate), plus
    // start-up and teardown.
    assert!(elapsed <= 1.0 + 10.0 + 1.0, "-t 1 ran {elapsed} s: {v}");
}

/// Issue 12 items 4 and 6: what the software device drops is surfaced, and with --txrx --seq the
/// sender counts every frame that did not come back (here all of them: no rule matches), not
/// only gaps between frames that did.
#[test]
fn device_drops_and_tail_loss_are_counted() {
    let out = run(
        "pktgen",
        &[
            "-b", "model", "--txrx", "--seq", "-n", "100", "--json", "--quiet",
        ],
        10,
    );
    let out2 = run(
        "pktgen",
        &[
            "-b",
            "model",
            "--txrx",
            "--seq",
            "-n",
            "100",
            "--json",
            "--quiet",
            "--rule",
            "udp dst-port 1 -> queue 0",
        ],
        10,
    );
    let v = json(&out);
    assert_eq!(v["rx_packets"].as_u64(), Some(100), "{v}");
    assert_eq!(v["seq_lost"].as_u64(), Some(0), "{v}");
    let v = json(&out2);
    assert_eq!(v["rx_packets"].as_u64(), Some(0), "{v}");
    assert_eq!(v["seq_lost"].as_u64(), Some(100), "{v}");
    assert_eq!(v["device_drops"].as_u64(), Some(100), "{v}");
    let err = String::from_utf8_lossy(&out2.stderr);
    assert!(err.contains("100 no rule matched"), "{err}");
}

/// A scratch file path for this test process.
fn scratch(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rawq-pk12-{}-{name}", std::process::id()))
}

/// A 60-byte Ethernet/IPv4 frame (contents do not matter to pktgen, which sends them as they
/// are), or `len` bytes of it.
fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f.truncate(len);
    f
}

fn write_pcap(path: &std::path::Path, link: pcap_file::DataLink, frames: &[Vec<u8>]) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let f = std::fs::File::create(path).unwrap();
    let header = PcapHeader {
        datalink: link,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(f, header).unwrap();
    for fr in frames {
        w.write_packet(&PcapPacket::new(Duration::ZERO, fr.len() as u32, fr))
            .unwrap();
    }
}

/// Issue 12 item 13: --pcap reads pcapng, refuses what it cannot send as it is (non-Ethernet
/// link types, runts), refuses template options it would ignore, and the jumbo error names
/// command-line options.
#[test]
fn pcap_input_is_read_or_refused_plainly() {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::DataLink;

    // pcapng: read, every frame sent.
    let ng = scratch("frames.pcapng");
    {
        let mut w = PcapNgWriter::new(std::fs::File::create(&ng).unwrap()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![],
        })
        .unwrap();
        for _ in 0..3 {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::ZERO,
                original_len: 60,
                data: std::borrow::Cow::Owned(frame(60)),
                options: vec![],
            })
            .unwrap();
        }
    }
    let ngs = ng.to_str().unwrap();
    let v = json(&run(
        "pktgen",
        &["-b", "model", "--pcap", ngs, "-n", "6", "--json", "--quiet"],
        10,
    ));
    assert_eq!(
        (v["packets"].as_u64(), v["bytes"].as_u64()),
        (Some(6), Some(360)),
        "{v}"
    );

    // Linux cooked capture (`tcpdump -i any`): not Ethernet.
    let sll = scratch("sll.pcap");
    write_pcap(&sll, DataLink::LINUX_SLL, &[frame(60)]);
    refused(
        "pktgen",
        &["-b", "model", "--pcap", sll.to_str().unwrap(), "-n", "1"],
        &["link type", "Ethernet"],
    );
    // A 3-byte "frame".
    let runt = scratch("runt.pcap");
    write_pcap(&runt, DataLink::ETHERNET, &[frame(60), frame(3)]);
    refused(
        "pktgen",
        &["-b", "model", "--pcap", runt.to_str().unwrap(), "-n", "1"],
        &["packet 2 is 3 bytes"],
    );
    // Template options that --pcap would silently ignore.
    for opt in [
        &["--seq"][..],
        &["-s", "100"],
        &["-f", "4"],
        &["--src-ip", "10.0.0.9"],
    ] {
        let mut a = vec!["-b", "model", "--pcap", ngs, "-n", "1"];
        a.extend_from_slice(opt);
        refused("pktgen", &a, &["--pcap"]);
    }
    // Jumbo frames on AF_XDP: the error names what a command-line user can change.
    let out = run(
        "pktgen",
        &["-b", "xdp", "-d", "lo", "-s", "4000", "-n", "1"],
        5,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("-s") && err.contains("-b verbs"), "{err}");
    assert!(!err.contains("MempoolConfig"), "{err}");
    for f in [ng, sll, runt] {
        let _ = std::fs::remove_file(f);
    }
}

/// The write end of a pipe whose read end is already closed: every write to it fails with
/// EPIPE, as `tool | head -1` does once `head` has gone.
fn closed_pipe() -> Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe() fills the two descriptors of the array it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just made by pipe() and are owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

/// Runs `bin args` with stdout (and with `both`, stderr too: `2>&1 | head`) a closed pipe,
/// killed after `secs` (a hang fails); (status, stderr when it is not closed).
fn into_closed_pipe(bin: &str, args: &[&str], both: bool, secs: u64) -> (Option<i32>, String) {
    let mut c = Command::new(support::example(bin));
    c.args(args).stdout(closed_pipe());
    if both {
        c.stderr(closed_pipe());
    } else {
        c.stderr(Stdio::piped());
    }
    let child = c.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    let killer = std::thread::spawn(move || {
        let t = Instant::now();
        while !d.load(std::sync::atomic::Ordering::Relaxed) {
            if t.elapsed() > Duration::from_secs(secs) {
                // SAFETY: kill on the pid of a child this test started and has not reaped.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let killed = killer.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !killed,
        "{bin} {args:?} still running after {secs} s: {err}"
    );
    (out.status.code(), err)
}

/// 128 + SIGPIPE: what a shell reports for a command a closed pipe ended (`yes | head -1`).
const CLOSED: Option<i32> = Some(141);

/// Issue 32 defect 3: `pktgen ... | head -1` panicked ("failed printing to stdout: Broken
/// pipe"). Every print path of pktgen and fwd (summary, JSON, per-second JSON lines) takes a
/// closed stdout as the end of the output: no panic, the status of a closed pipe; also with
/// stderr closed as well (`2>&1 | head`).
#[test]
fn a_closed_stdout_ends_the_output_without_a_panic() {
    let pktgen: [&[&str]; 3] = [
        &["-b", "model", "-n", "1000", "--quiet"],
        &["-b", "model", "-n", "1000", "--quiet", "--json"],
        &["-b", "model", "-r", "10kpps", "--quiet", "--json-lines"],
    ];
    for args in pktgen {
        let (code, err) = into_closed_pipe("pktgen", args, false, 20);
        assert!(!err.contains("panicked"), "pktgen {args:?}: {err}");
        assert_eq!(code, CLOSED, "pktgen {args:?}: {err}");
        let (code, _) = into_closed_pipe("pktgen", args, true, 20);
        assert_eq!(code, CLOSED, "pktgen {args:?} 2>&1 into a closed pipe");
    }
    let fwd: [&[&str]; 3] = [
        &["-b", "model", "-d", "x", "--quiet", "-t", "1"],
        &["-b", "model", "-d", "x", "--quiet", "-t", "1", "--json"],
        &["-b", "model", "-d", "x", "--quiet", "--json-lines"],
    ];
    for args in fwd {
        let mut a = args.to_vec();
        a.extend_from_slice(FWD_RULE);
        let (code, err) = into_closed_pipe("fwd", &a, false, 20);
        assert!(!err.contains("panicked"), "fwd {a:?}: {err}");
        assert_eq!(code, CLOSED, "fwd {a:?}: {err}");
        let (code, _) = into_closed_pipe("fwd", &a, true, 20);
        assert_eq!(code, CLOSED, "fwd {a:?} 2>&1 into a closed pipe");
    }
    // --help into a closed pipe: clap's own print path.
    let (code, err) = into_closed_pipe("pktgen", &["--help"], false, 5);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(code, CLOSED, "{err}");
}

/// Issue 32 defect 1: a queue thread that died (it panicked writing a warning to a closed
/// pipe) left the others, and the main thread, waiting at a barrier for ever. A thread that
/// fails before the start (injected: `RAWQ_PKTGEN_FAULT=queue-panic`) now ends the run, said,
/// with a failure status; with stdout and stderr closed too.
#[test]
fn a_queue_thread_that_dies_ends_the_run() {
    let args = ["-b", "model", "-q", "2", "-n", "100", "--quiet"];
    let out = support::run::Run::spawn(
        Command::new(support::example("pktgen"))
            .args(args)
            .env("RAWQ_PKTGEN_FAULT", "queue-panic"),
    )
    .try_finish(Duration::from_secs(20))
    .unwrap_or_else(|out| {
        panic!(
            "pktgen still waiting 20 s after a queue thread died: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("queue 0's thread failed"), "{err}");
    let mut c = Command::new(support::example("pktgen"));
    c.args(args)
        .env("RAWQ_PKTGEN_FAULT", "queue-panic")
        .stdout(closed_pipe())
        .stderr(closed_pipe());
    let mut child = c.spawn().unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("pktgen 2>&1 into a closed pipe still waiting 20 s after a thread died");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 32 defect 1: SIGTERM did not end a run whose threads waited for one that never came.
/// A queue thread that never starts nor ends (`RAWQ_PKTGEN_FAULT=queue-stall`): one signal ends
/// the run within its stop bound (15 s past --drain), with an error naming the thread.
#[test]
fn one_signal_ends_a_run_whose_queue_thread_is_stuck() {
    use std::io::BufRead;
    let mut child = Command::new(support::example("pktgen"))
        .args(["-b", "model", "-q", "2", "--quiet"])
        .env("RAWQ_PKTGEN_FAULT", "queue-stall")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Signalled once the port is open (the handler is installed then).
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut text = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "pktgen ended: {text}"
        );
        text.push_str(&line);
        if line.contains("queue(s), pool on") {
            break;
        }
    }
    // SAFETY: kill on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let t = Instant::now();
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(25) {
            let _ = child.kill();
            panic!("pktgen still running 25 s after SIGTERM: {text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    text.push_str(&rest.join().unwrap());
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("did not end within"), "{text}");
}

/// CPUs this process may not run on (so `--cores` with them must be refused).
fn missing_cpus() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(status.contains("Cpus_allowed_list"));
    // Far above any CPU here (the list is at most CPU_SETSIZE = 1024 on a cpuset of this size).
    (n + 1000, n + 1002)
}

/// Issue 32 defect 4: limits are checked first, in the user's terms: `-q 300` on the model
/// grew to 5.7 GB before refusing; `-s 1600` on the model sent, got error completions and
/// exited 0; `--cores` with two CPUs that do not exist named one of them (fwd after the summary
/// of a run that never happened). Every missing CPU is named, by pktgen and by fwd, and no
/// summary is printed.
#[test]
fn limits_are_refused_first_in_the_options_terms() {
    let t = Instant::now();
    refused(
        "pktgen",
        &["-b", "model", "--txrx", "-q", "300", "-n", "100"],
        &["-q 300", "at most 256"],
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "-q 300 took {:?}",
        t.elapsed()
    );
    refused(
        "pktgen",
        &["-b", "model", "-s", "1600", "-n", "100"],
        &["-s", "1518"],
    );
    // --mtu raises the device's largest frame: MTU + 18.
    refused(
        "pktgen",
        &["-b", "model", "--mtu", "2000", "-s", "2100", "-n", "1"],
        &["-s", "2018"],
    );
    let out = run(
        "pktgen",
        &["-b", "model", "--mtu", "2000", "-s", "2000", "-n", "10"],
        10,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (a, b) = missing_cpus();
    let cores = format!("{a},{b}");
    let named = format!("CPUs {a},{b} are not");
    for (bin, args) in [
        (
            "pktgen",
            vec!["-b", "model", "-q", "2", "--cores", &cores, "-n", "100"],
        ),
        (
            "fwd",
            vec![
                "-b",
                "model",
                "-d",
                "x",
                "--queues",
                "2",
                "--cores",
                &cores,
                "-t",
                "1",
                "--rule",
                "promiscuous -> queue 0",
            ],
        ),
    ] {
        let out = run(bin, &args, 5);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bin}: {err}");
        assert!(
            err.contains("--cores") && err.contains(&named),
            "{bin}: {err}"
        );
        assert!(
            out.stdout.is_empty(),
            "{bin} printed a summary: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            !err.contains("model on") && !err.contains("queue pair(s))"),
            "{bin} opened a port first: {err}"
        );
    }
}
