//! The live-frames send engine: the kernel's own traffic generator, driven by a program rawq
//! writes.
//!
//! `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` (kernel ≥ 5.18; what `xdp-trafficgen`
//! uses) runs an XDP program `repeat` times on copies of one frame and carries out each verdict
//! for real. The program built here (`program.rs`) writes the fields that vary (flow, sequence
//! stamp, checksums) and redirects the frame out of the interface with `bpf_redirect(ifindex)`.
//! No socket, ring or copy through user space is involved: per frame the cost is the program,
//! the page-pool recycle and the driver's `ndo_xdp_xmit`. On a veth that is several times what
//! an AF_XDP socket in copy mode reaches.
//!
//! # How it runs
//! * One thread per entry of [`LiveConfig::cores`], pinned there; each calls `BPF_PROG_TEST_RUN`
//!   with `batch` frames per batch (64 by default, the NAPI budget) and up to `repeat` runs per
//!   call (2^20 by default): unpaced, each call is sized to take about 0.2 s (`CALL_TARGET`)
//!   at the rate measured so far, which is 2^20 runs from about 5 Mpps up, fewer on a slower
//!   or busier machine. The stop flag, the count and the deadline are checked between calls;
//!   near the deadline a call is shortened to the frames the measured rate fits in the time
//!   left, so a duration ends on time. A signal ends a call at once (EINTR).
//! * The kernel recycles its pages **without restoring the bytes a program wrote**
//!   (Documentation/bpf/bpf_prog_run.rst, "live frame mode"), so the program writes every
//!   varying field as an absolute value each run: the flow's source port or address, the
//!   sequence stamp, and both checksums computed from precomputed sums of the constant bytes.
//! * What counts as sent: the program adds 1 to a per-CPU counter for every frame it redirects
//!   (an atomic fetch-add, whose old value is also the frame's sequence number on that CPU).
//!   `sent` is that count less what the interface reports it could not take over the run: its
//!   `tx_dropped` and its driver's `*xdp_xmit_err*` counters (`ethtool -S`; a veth counts there
//!   the frames its peer's full ring refused). These are interface counters: other traffic's
//!   drops on the interface during the run are subtracted too. Limit: a veth updates its XDP
//!   transmit counters without atomics from every sending CPU, so with several sender threads
//!   on one veth a concurrent update can be lost and a drop go uncounted.
//! * Flows: frame `n` of a CPU (its counter) is flow `n % flows`, as pktgen's other engines
//!   send it. With [`LivePlan::src_ip`] the source address's last 16 bits are the source's
//!   plus the flow index, stepping over the destination's (as rawq-gen's `Stamper` does:
//!   nothing is sent from the address it is sent to).
//! * Sequence stamps ([`LivePlan::stamp`]) are rawq-gen's `Stamper`'s
//!   (crates/gen/src/template/stamp.rs, all big-endian at the start of the UDP payload): magic (4, from the template), the CPU number
//!   as the stream (2), the flow index `n % flows` (2), flows − 1 (2, from the template) and
//!   the low 48 bits of the CPU's frame counter `n` as the sequence number (6) — with one
//!   thread per core, one stream per thread. The receive side (rawq-gen's `FlowTracker`)
//!   numbers a flow's frames `seq / flows`. A counter past 2^48 wraps the sequence number to
//!   0 and leaves the other fields intact (as the Stamper masks it); at 100 Mpps that takes
//!   about 33 days.
//!
//! # Rate control is coarse
//! With a rate, each call sends a slice of frames at full speed (a hundredth of a second's
//! worth, at least one batch) and the thread then sleeps until the schedule catches up: the
//! average rate holds, but frames leave in bursts of up to `rate / 100` at line speed.
//!
//! # Limits
//! One frame size per run (no ranges or IMIX: the kernel copies one frame), at most a page less
//! the kernel's headroom; IPv4 or IPv6 UDP frames of a rawq-gen `FrameSpec`.
//!
//! # A veth needs a receiver
//! A veth takes redirected frames only if its peer runs NAPI: the peer must have an XDP program
//! attached or GRO enabled (`ethtool -K PEER gro on`). Otherwise the veth does not offer
//! `ndo_xdp_xmit` (`drivers/net/veth.c`: `NETDEV_XDP_ACT_NDO_XMIT` is set only then, and
//! `veth_xdp_xmit` refuses with `-ENXIO` without the peer's NAPI) and every frame is dropped,
//! silently but for a tracepoint. The engine sends one probe batch first and fails with the fix
//! if the interface took none of it.
//!
//! The engine is the AF_XDP backend's transmit mode: it is made of that backend's BPF loader
//! and assembler (crate-internal), so it stays here; the generator (`rawq-gen`'s
//! `live_plan`/`live_config`) turns a frame spec into the frame and the [`LivePlan`] it takes.
//!
//! # The public surface
//! [`LiveEngine`] (load, [`run`](LiveEngine::run), stop, live count), what it takes
//! ([`LiveConfig`], [`LivePlan`], with [`MAX_FRAME`], [`DEFAULT_BATCH`], [`DEFAULT_REPEAT`]) and
//! what it reports ([`LiveReport`]): what pktgen's `--engine live` and rawq-gen's `live_config`
//! use. The program's assembly and the interface counters are the engine's own.
//!
//! The files: `plan` (where the varying fields sit), `program` (the XDP program
//! that writes them; internal, for the tests that check it against the frames it must make),
//! `engine` (loading, the sending threads, pacing, what went wrong), `counters` (what the
//! interface says it took or dropped; the `SIOCETHTOOL` ioctl behind them is in
//! `crate::sys::ethtool`).

#![deny(unsafe_code)]

use std::time::Duration;

mod counters;
mod engine;
mod plan;
internal_mod!(program);

pub use engine::LiveEngine;
pub use plan::LivePlan;

const ETH: usize = 14;
const UDP: usize = 8;
/// Default runs per `BPF_PROG_TEST_RUN` call.
pub const DEFAULT_REPEAT: u32 = 1 << 20;
/// Unpaced, a call is sized to take about this long at the measured rate (at most `repeat` runs),
/// so that the stop flag and the deadline are seen promptly.
const CALL_TARGET: Duration = Duration::from_millis(200);
/// Runs of the first unpaced call, which measures the rate.
const CALIBRATION_RUNS: u64 = 4096;
/// Default batch: the NAPI budget, as the kernel's own default.
pub const DEFAULT_BATCH: u32 = 64;
/// Largest frame: a page less the kernel's headroom (`XDP_PACKET_HEADROOM`, 256),
/// `skb_shared_info` (320 on x86-64) and the live mode's page head, with room to spare.
pub const MAX_FRAME: usize = 3072;

/// What the engine sends, where, and for how long.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// Interface to send on (in the calling thread's network namespace).
    pub ifname: String,
    /// The frame the kernel copies (flow 0, stamp 0): one fixed size.
    pub frame: Vec<u8>,
    /// Where the program writes the varying fields of `frame` (`rawq-gen`'s `live_plan` builds
    /// both from a frame spec).
    pub plan: LivePlan,
    /// One sending thread per entry, pinned to that core.
    pub cores: Vec<usize>,
    /// Frames to send over all threads; 0 = no limit.
    pub count: u64,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Frames per second over all threads (coarse, see the module docs); `None` = as fast as
    /// the kernel goes.
    pub pps: Option<f64>,
    /// Frames per batch (1..=256).
    pub batch: u32,
    /// Most runs per call (the stop flag is checked between calls).
    pub repeat: u32,
}

impl LiveConfig {
    /// One thread on core 0, unlimited, batch 64, 2^20 runs per call.
    pub fn new(ifname: &str, frame: Vec<u8>, plan: LivePlan) -> LiveConfig {
        LiveConfig {
            ifname: ifname.to_string(),
            frame,
            plan,
            cores: vec![0],
            count: 0,
            duration: None,
            pps: None,
            batch: DEFAULT_BATCH,
            repeat: DEFAULT_REPEAT,
        }
    }
}

/// The outcome of [`LiveEngine::run`] (it will grow: built by the engine).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct LiveReport {
    /// Frames the interface took: `redirected - dropped`.
    pub sent: u64,
    /// Frames the program redirected (its per-CPU counters).
    pub redirected: u64,
    /// Frames the interface reported it could not take during the run.
    pub dropped: u64,
    /// Bytes of each frame (without FCS).
    pub frame_len: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
}
