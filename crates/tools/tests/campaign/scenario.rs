//! `draw(seed)`: one seed, one valid configuration of pktgen or fwd crossed with one fault.
//! Everything random is drawn here, from the seed alone, so that the seed reproduces the run.

use std::fmt;

use rawq_testkit::Rng;

/// Where the tool runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The software device (`-b model`), no network.
    Model,
    /// AF_XDP on a veth pair in namespaces the run creates.
    Xdp,
    /// mlx5 Direct Verbs on the emulated NIC (scripts/emu.sh, looped-back port).
    Dv,
    /// ibverbs RAW_PACKET on the emulated NIC.
    Verbs,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Model => "model",
            Backend::Xdp => "xdp",
            Backend::Dv => "dv",
            Backend::Verbs => "verbs",
        }
    }

    pub fn emulated(self) -> bool {
        matches!(self, Backend::Dv | Backend::Verbs)
    }
}

/// Which tool is under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    Pktgen,
    Fwd,
    /// The library itself, driven by the campaign (`churn.rs`): what neither tool does, such
    /// as changing rules while traffic runs, or an error completion on the model.
    Lib,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Pktgen => "pktgen",
            Tool::Fwd => "fwd",
            Tool::Lib => "lib",
        }
    }
}

/// The one fault of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Nothing: the run ends by its own count or duration.
    None,
    /// `kill(pid, sig)` to the outermost process `ms` after the start (start-up included).
    Signal { sig: i32, ms: u64 },
    /// `kill(-pgid, sig)`: every process of the run's group, as `timeout` and a terminal do.
    GroupSignal { sig: i32, ms: u64 },
    /// The command is run as `timeout SECS ...`.
    Timeout { secs: u64 },
    /// The tool's stdout is a pipe whose reader goes away after `lines` lines (as `| head -N`
    /// leaves it; 0: before the tool writes).
    ClosedStdout { lines: u64 },
    /// The tool's stderr is a pipe whose reader goes away after `lines` lines (`2>&1 | head`).
    ClosedStderr { lines: u64 },
    /// The veth under an xdp run goes down `ms` after the start and up `down_ms` later.
    LinkFlap { ms: u64, down_ms: u64 },
    /// The veth under an xdp run is deleted `ms` after the start.
    LinkDelete { ms: u64 },
    /// An error completion: on the emulated NIC its `nth` send WQE of every send queue fails
    /// (`RAWQ_EMU_TX_ERROR`); on the model (a library run) queue 0's.
    TxError { nth: u64 },
    /// The emulated NIC hits a fatal error `ms` after the start (`RAWQ_EMU_FATAL_FILE`):
    /// `IBV_EVENT_DEVICE_FATAL`, the port down, every later command EIO.
    DeviceFatal { ms: u64 },
    /// Receive-queue starvation: rings of `ring` descriptors under a blast (the options say it).
    RxStarvation { ring: u32 },
    /// Queue thread `q` of the tool panics (`panic`) or fails with an error once running
    /// (`RAWQ_PKTGEN_FAULT` / `RAWQ_FWD_FAULT`, the tools' test hook).
    QueueThread { q: u64, panic: bool },
    /// Flow rules added and removed every `every` frames on a live model port while a
    /// sequenced flow runs (a library run).
    RuleChurn { every: u64 },
    /// A frame longer than the receive buffer (`len` bytes, on a port that takes jumbo
    /// frames into 2 KiB buffers) arrives every `every` frames of a library run's flow: the
    /// device consumes a receive buffer with a local length error completion.
    RxLengthError { every: u64, len: u64 },
}

/// The kinds of fault, in the order the fixed seeds cover them.
pub const FAULT_KINDS: [&str; 16] = [
    "none",
    "SIGINT",
    "SIGTERM",
    "group-signal",
    "timeout",
    "closed-stdout",
    "closed-stderr",
    "link-flap",
    "link-delete",
    "tx-error",
    "device-fatal",
    "rx-starvation",
    "queue-thread-panic",
    "queue-thread-error",
    "rule-churn",
    "rx-length-error",
];

impl Fault {
    pub fn kind(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Signal { sig, .. } if sig == libc::SIGINT => "SIGINT",
            Fault::Signal { .. } => "SIGTERM",
            Fault::GroupSignal { .. } => "group-signal",
            Fault::Timeout { .. } => "timeout",
            Fault::ClosedStdout { .. } => "closed-stdout",
            Fault::ClosedStderr { .. } => "closed-stderr",
            Fault::LinkFlap { .. } => "link-flap",
            Fault::LinkDelete { .. } => "link-delete",
            Fault::TxError { .. } => "tx-error",
            Fault::DeviceFatal { .. } => "device-fatal",
            Fault::RxStarvation { .. } => "rx-starvation",
            Fault::QueueThread { panic: true, .. } => "queue-thread-panic",
            Fault::QueueThread { panic: false, .. } => "queue-thread-error",
            Fault::RuleChurn { .. } => "rule-churn",
            Fault::RxLengthError { .. } => "rx-length-error",
        }
    }

    /// The signal this fault sends to the tool, if any (`timeout` sends SIGTERM).
    pub fn signal(self) -> Option<i32> {
        match self {
            Fault::Signal { sig, .. } | Fault::GroupSignal { sig, .. } => Some(sig),
            Fault::Timeout { .. } => Some(libc::SIGTERM),
            _ => None,
        }
    }
}

fn sig_name(sig: i32) -> &'static str {
    if sig == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Fault::None => write!(f, "none"),
            Fault::Signal { sig, ms } => write!(f, "{} to the process at {ms} ms", sig_name(sig)),
            Fault::GroupSignal { sig, ms } => {
                write!(f, "{} to the process group at {ms} ms", sig_name(sig))
            }
            Fault::Timeout { secs } => write!(f, "wrapped in `timeout {secs}`"),
            Fault::ClosedStdout { lines } => {
                write!(f, "stdout a pipe closed after {lines} line(s)")
            }
            Fault::ClosedStderr { lines } => {
                write!(f, "stderr a pipe closed after {lines} line(s)")
            }
            Fault::LinkFlap { ms, down_ms } => {
                write!(f, "link down at {ms} ms, up {down_ms} ms later")
            }
            Fault::LinkDelete { ms } => write!(f, "link deleted at {ms} ms"),
            Fault::TxError { nth } => write!(f, "send WQE {nth} of each send queue fails"),
            Fault::DeviceFatal { ms } => write!(f, "device fatal error at {ms} ms"),
            Fault::RxStarvation { ring } => {
                write!(f, "receive starvation: rings of {ring} under a blast")
            }
            Fault::QueueThread { q, panic } => write!(
                f,
                "queue thread {q} {} once running",
                if panic {
                    "panics"
                } else {
                    "fails with an error"
                }
            ),
            Fault::RuleChurn { every } => {
                write!(f, "a flow rule added or removed every {every} frames")
            }
            Fault::RxLengthError { every, len } => write!(
                f,
                "a {len}-byte frame, longer than the receive buffer, every {every} frames \
                 (local length error)"
            ),
        }
    }
}

/// A run: the tool, its backend, its options (`@DEV`, `@DSTMAC`, `@SRCIP`, `@DSTIP` stand for
/// what the run's namespaces name) and the fault.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub tool: Tool,
    pub backend: Backend,
    pub args: Vec<String>,
    /// fwd (xdp) or pktgen (xdp) on the other veth end, for an xdp run that needs a peer.
    pub peer: Option<Vec<String>>,
    pub fault: Fault,
    /// How long the run lasts without a fault, at most (its own `-t`, or a count's worth).
    pub expect_secs: u64,
    /// Whether the summary is JSON (`--json`).
    pub json: bool,
    /// `-b model` with a count and no fault: the same seed must give the same counts.
    pub deterministic: bool,
}

impl Scenario {
    /// The reproduce line.
    pub fn reproduce(&self) -> String {
        format!(
            "reproduce with RAWQ_CAMPAIGN_SEED={} cargo test -p rawq-tools --test campaign -- --ignored --nocapture campaign",
            self.seed
        )
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: rawq-{} {}",
            self.seed,
            self.tool.name(),
            self.args.join(" ")
        )?;
        if let Some(p) = &self.peer {
            write!(f, " | peer: {}", p.join(" "))?;
        }
        write!(f, " | fault: {}", self.fault)?;
        if self.deterministic {
            write!(f, " | deterministic: run twice")?;
        }
        Ok(())
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

/// The CPUs of this machine.
fn ncpu() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// Draws one valid scenario from `seed` (any value; 0 is mapped to a non-zero state).
pub fn draw(seed: u64) -> Scenario {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for _ in 0..4 {
        r.next();
    }
    let backend = match r.below(10) {
        0..=4 => Backend::Model,
        5..=6 => Backend::Xdp,
        7..=8 => Backend::Dv,
        _ => Backend::Verbs,
    };
    let tool = if r.chance(30) {
        Tool::Fwd
    } else {
        Tool::Pktgen
    };
    let fault = draw_fault(&mut r, backend);
    // The later kinds come from a stream of their own, so that the seeds drawn before them
    // (and the defects they found) still draw what they drew, unless one of these replaces it.
    let fault = later_fault(seed, backend).unwrap_or(fault);
    let tool = match fault {
        Fault::RuleChurn { .. } | Fault::TxError { .. } | Fault::RxLengthError { .. }
            if backend == Backend::Model =>
        {
            Tool::Lib
        }
        _ => tool,
    };
    let json = r.chance(75);
    let mut sc = Scenario {
        seed,
        tool,
        backend,
        args: Vec::new(),
        peer: None,
        fault,
        expect_secs: 2,
        json,
        deterministic: false,
    };
    match tool {
        Tool::Pktgen => draw_pktgen(&mut r, &mut sc),
        Tool::Fwd => draw_fwd(&mut r, &mut sc),
        Tool::Lib => {
            draw_lib(&mut r, &mut sc);
            return sc;
        }
    }
    // A queue thread that fails is one the run has.
    if let Fault::QueueThread { q, panic } = sc.fault {
        sc.fault = Fault::QueueThread {
            q: q.min(queues_of(&sc.args).saturating_sub(1)),
            panic,
        };
    }
    if let Fault::RxStarvation { ring } = sc.fault {
        sc.args.extend(s(&["--ring", &ring.to_string()]));
        // pktgen's burst (32) must fit the ring; fwd's shrinks to it by itself.
        if tool == Tool::Pktgen && ring < 32 {
            sc.args.extend(s(&["--burst", &ring.to_string()]));
        }
    }
    if json {
        sc.args.push("--json".into());
    }
    if r.chance(60) {
        sc.args.push("--quiet".into());
    }
    sc
}

/// The queues a run's options give it (`-q`, or one per `--stream`).
pub fn queues_of(args: &[String]) -> u64 {
    let streams = args.iter().filter(|a| *a == "--stream").count() as u64;
    if streams > 0 {
        return streams;
    }
    args.iter()
        .position(|a| a == "-q")
        .and_then(|i| args.get(i + 1))
        .and_then(|q| q.parse().ok())
        .unwrap_or(1)
}

/// The kinds added after the first campaign (error completions, a device-fatal event,
/// receive starvation, a failing queue thread, rule churn), drawn for two seeds in five; and,
/// from a stream of its own again (so that the seeds before it keep their draws unless
/// replaced), a receive length error for one model seed in twelve.
fn later_fault(seed: u64, backend: Backend) -> Option<Fault> {
    let mut g = Rng((seed ^ 0x2f8e_55b1_94a7_0de0).wrapping_mul(0x9fb2_1c65_1e98_df25) | 1);
    for _ in 0..4 {
        g.next();
    }
    if backend == Backend::Model && g.below(12) == 0 {
        return Some(Fault::RxLengthError {
            every: 20 + g.below(480),
            len: g.pick(&[2100u64, 4000, 9000]),
        });
    }
    earlier_later_fault(seed, backend)
}

/// The later kinds of the first extension (see [`later_fault`]).
fn earlier_later_fault(seed: u64, backend: Backend) -> Option<Fault> {
    let mut f = Rng((seed ^ 0x5851_f42d_4c95_7f2d).wrapping_mul(0xd1b5_4a32_d192_ed03) | 1);
    for _ in 0..4 {
        f.next();
    }
    if !f.chance(40) {
        return None;
    }
    let ring = f.pick(&[8u32, 16, 64]);
    let thread = Fault::QueueThread {
        q: f.below(2),
        panic: f.chance(50),
    };
    Some(match backend {
        Backend::Model => match f.below(4) {
            0 => Fault::RxStarvation { ring },
            1 => thread,
            2 => Fault::RuleChurn {
                every: 50 + f.below(450),
            },
            _ => Fault::TxError {
                nth: 10 + f.below(2000),
            },
        },
        Backend::Xdp => {
            if f.chance(50) {
                // 64 descriptors: far fewer than a 100 kpps peer fills between two polls.
                Fault::RxStarvation { ring: 64 }
            } else {
                thread
            }
        }
        Backend::Dv | Backend::Verbs => match f.below(4) {
            0 => Fault::TxError {
                nth: 10 + f.below(2000),
            },
            1 => Fault::DeviceFatal {
                ms: 100 + f.below(2000),
            },
            2 => Fault::RxStarvation { ring },
            _ => thread,
        },
    })
}

fn draw_fault(r: &mut Rng, backend: Backend) -> Fault {
    let sig = if r.chance(50) {
        libc::SIGINT
    } else {
        libc::SIGTERM
    };
    // Start-up included: a third of the signals come in the first 200 ms.
    let ms = if r.chance(33) {
        r.below(200)
    } else {
        200 + r.below(2500)
    };
    // More quiet runs on the model: they are the ones run twice for determinism.
    if backend == Backend::Model && r.chance(15) {
        return Fault::None;
    }
    let kinds = if backend == Backend::Xdp { 9 } else { 7 };
    match r.below(kinds) {
        0 => Fault::None,
        1 | 2 => Fault::Signal { sig, ms },
        3 => Fault::GroupSignal { sig, ms },
        4 => Fault::Timeout {
            secs: 1 + r.below(3),
        },
        5 => Fault::ClosedStdout { lines: r.below(3) },
        6 => Fault::ClosedStderr { lines: r.below(4) },
        7 => Fault::LinkFlap {
            ms: 300 + r.below(1500),
            down_ms: 100 + r.below(900),
        },
        _ => Fault::LinkDelete {
            ms: 300 + r.below(1500),
        },
    }
}

/// Queue count and cores within the machine.
fn queues_cores(r: &mut Rng, backend: Backend, args: &mut Vec<String>) {
    // The veths the run makes have one queue each.
    let q = if backend == Backend::Xdp {
        1
    } else {
        1 + r.below(2)
    };
    args.extend(s(&["-q", &q.to_string()]));
    if r.chance(40) {
        let n = ncpu();
        let cores: Vec<String> = (0..q).map(|_| r.below(n).to_string()).collect();
        args.extend(s(&["--cores", &cores.join(",")]));
    }
}

fn draw_pktgen(r: &mut Rng, sc: &mut Scenario) {
    let b = sc.backend;
    let mut a = s(&["-b", b.name(), "-d", "@DEV"]);
    if b == Backend::Xdp {
        a.extend(s(&[
            "--dst-mac",
            "@DSTMAC",
            "--src-ip",
            "@SRCIP",
            "--dst-ip",
            "@DSTIP",
        ]));
    }
    // Modes: tx only, --txrx (looped back on model/emu; through fwd on xdp), --rx (xdp: from
    // a peer pktgen), a short RFC 2544 search, two streams.
    let mode = r.below(10);
    // Starvation: a receiver (--txrx looped back, or --rx fed by a peer on xdp) under a blast.
    let mode = match sc.fault {
        Fault::RxStarvation { .. } if b == Backend::Xdp => 7,
        Fault::RxStarvation { .. } => 5,
        _ => mode,
    };
    let rfc = mode == 9 && b != Backend::Xdp;
    let streams = mode == 8 && b == Backend::Model;
    let rx = mode == 7 && b == Backend::Xdp;
    let txrx = !rx && (rfc || (mode >= 4 && !streams));
    queues_cores(r, b, &mut a);
    if rfc {
        a.extend(s(&[
            "--txrx",
            "--rfc2544",
            "throughput",
            "--sizes",
            "64",
            "--trial",
            "200ms",
            "--rate-hi",
            "50kpps",
            "--rate-lo",
            "5kpps",
            "--resolution",
            "25%",
        ]));
        sc.expect_secs = 8;
        return finish_pktgen(sc, a);
    }
    if streams {
        // Each stream is sent by a queue of its own: no -q, no --cores.
        if let Some(i) = a.iter().position(|x| x == "-q") {
            a.truncate(i);
        }
        a.extend(s(&[
            "--txrx",
            "--stream",
            "name=small size=80 rate=20kpps count=2000",
            "--stream",
            "name=large size=700 rate=5000 count=500 dst-port=9001",
        ]));
        sc.expect_secs = 3;
        return finish_pktgen(sc, a);
    }
    if txrx {
        a.push("--txrx".into());
        if r.chance(50) {
            a.push("--seq".into());
        }
    }
    if rx {
        a.push("--rx".into());
        a.extend(s(&[
            "--rx-mode",
            r.pick(&["poll", "interrupt", "adaptive"]),
        ]));
        a.extend(s(&["-t", "3"]));
        sc.expect_secs = 3;
        sc.peer = Some(s(&[
            "-b",
            "xdp",
            "-d",
            "@PEERDEV",
            "--dst-mac",
            "@PEERDSTMAC",
            "--src-ip",
            "@DSTIP",
            "--dst-ip",
            "@SRCIP",
            "-r",
            "100kpps",
            "-t",
            "2",
            "--quiet",
        ]));
        return finish_pktgen(sc, a);
    }
    // Frame size: small, typical, or jumbo where the port takes it (an MTU of 9000 asked).
    let size = match r.below(6) {
        0 if b != Backend::Xdp => {
            a.extend(s(&["--mtu", "9000"]));
            "8000".to_owned()
        }
        1 => "imix".to_owned(),
        2 => "60-1514".to_owned(),
        _ => r.pick(&["60", "128", "512", "1514"]).to_owned(),
    };
    a.extend(s(&["-s", &size]));
    let rate = r.pick(&["20kpps", "100kpps", "200kpps", "max"]);
    let rate = if matches!(sc.fault, Fault::RxStarvation { .. }) {
        "max"
    } else {
        rate
    };
    a.extend(s(&["-r", rate]));
    // A count or a duration; a run that a signal or `timeout` must end is given a long one.
    let long = matches!(
        sc.fault,
        Fault::Signal { .. } | Fault::GroupSignal { .. } | Fault::Timeout { .. }
    ) || matches!(
        sc.fault,
        Fault::LinkFlap { .. } | Fault::LinkDelete { .. } | Fault::DeviceFatal { .. }
    );
    if long {
        let t = 4 + r.below(3);
        a.extend(s(&["-t", &t.to_string()]));
        sc.expect_secs = t;
        if r.chance(30) && b == Backend::Xdp {
            a.extend(s(&["--on-link-down", "wait"]));
        }
    } else if matches!(sc.fault, Fault::RxStarvation { .. }) {
        // A duration: what a starved ring lets through is not the rate asked, so a count's
        // worth at that rate is no bound (seed 5226: 20000 frames through rings of 8 took
        // 9.8 s, and more than the 18 s allowed on the loaded machine).
        a.extend(s(&["-t", "2"]));
        sc.expect_secs = 2;
    } else if r.chance(70) || (b == Backend::Model && sc.fault == Fault::None) {
        let n = r.pick(&[1000u64, 20_000, 100_000]);
        a.extend(s(&["-n", &n.to_string()]));
        // The count's worth at the rate, and 2 s more (the drain, start-up).
        let pps = match rate {
            "20kpps" => 20_000,
            "100kpps" => 100_000,
            "200kpps" => 200_000,
            _ => 1_000_000,
        };
        sc.expect_secs = n.div_ceil(pps) + 2;
        sc.deterministic = b == Backend::Model && sc.fault == Fault::None;
    } else {
        a.extend(s(&["-t", "2"]));
        sc.expect_secs = 2;
    }
    if txrx && b == Backend::Xdp {
        sc.peer = Some(s(&[
            "-b",
            "xdp",
            "-d",
            "@PEERDEV",
            "-m",
            "macswap",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "--quiet",
        ]));
    }
    finish_pktgen(sc, a);
}

fn finish_pktgen(sc: &mut Scenario, a: Vec<String>) {
    sc.args = a;
}

fn draw_fwd(r: &mut Rng, sc: &mut Scenario) {
    let b = sc.backend;
    let mut a = s(&[
        "-b",
        b.name(),
        "-d",
        "@DEV",
        "--rule",
        "udp dst-port 9000 -> queue 0",
    ]);
    queues_cores(r, b, &mut a);
    a.extend(s(&["-m", r.pick(&["io", "macswap", "5tswap", "rxonly"])]));
    a.extend(s(&[
        "--rx-mode",
        r.pick(&["poll", "interrupt", "adaptive"]),
    ]));
    let t = match sc.fault {
        Fault::None
        | Fault::ClosedStdout { .. }
        | Fault::ClosedStderr { .. }
        | Fault::TxError { .. }
        | Fault::RxStarvation { .. }
        | Fault::QueueThread { .. } => 2,
        _ => 4 + r.below(3),
    };
    a.extend(s(&["-t", &t.to_string()]));
    sc.expect_secs = t;
    if b == Backend::Xdp {
        // Frames come from a pktgen on the other end of the veth.
        sc.peer = Some(s(&[
            "-b",
            "xdp",
            "-d",
            "@PEERDEV",
            "--dst-mac",
            "@PEERDSTMAC",
            "--src-ip",
            "@DSTIP",
            "--dst-ip",
            "@SRCIP",
            "-r",
            "100kpps",
            "-t",
            "2",
            "--quiet",
        ]));
        if r.chance(30) {
            a.extend(s(&["--on-link-down", "wait"]));
        }
    } else {
        // A looped-back port forwards what it sent first.
        a.extend(s(&["--tx-first", r.pick(&["32", "256"])]));
    }
    sc.args = a;
}

/// A library run (`churn.rs`): frames of a sequenced flow, rule churn or not, a send error or
/// not, each from the seed.
fn draw_lib(r: &mut Rng, sc: &mut Scenario) {
    let frames = r.pick(&[5000u64, 20_000, 50_000]);
    let mut a = s(&["--frames", &frames.to_string()]);
    match sc.fault {
        Fault::RuleChurn { every } => {
            a.extend(s(&["--churn-every", &every.to_string()]));
            if r.chance(30) {
                a.extend(s(&["--tx-error", &r.below(frames).to_string()]));
            }
        }
        Fault::TxError { nth } => a.extend(s(&["--tx-error", &nth.to_string()])),
        Fault::RxLengthError { every, len } => a.extend(s(&[
            "--long-every",
            &every.to_string(),
            "--long-len",
            &len.to_string(),
        ])),
        _ => {}
    }
    if r.chance(50) {
        a.push("--drop-rules".into());
    }
    sc.args = a;
    sc.json = false;
    sc.expect_secs = 10;
}

/// The value of option `name` in `args`, parsed.
pub fn opt<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}
