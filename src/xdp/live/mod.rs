//! The live-frames send engine: the kernel's own traffic generator, driven by a program rawq
//! writes.
//!
//! `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` (kernel ≥ 5.18; what `xdp-trafficgen`
//! uses) runs an XDP program `repeat` times on copies of one frame and carries out each verdict
//! for real. The program built here ([`live_program`]) writes the fields that vary (flow, sequence
//! stamp, checksums) and redirects the frame out of the interface with `bpf_redirect(ifindex)`.
//! No socket, ring or copy through user space is involved: per frame the cost is the program,
//! the page-pool recycle and the driver's `ndo_xdp_xmit`. On a veth that is several times what
//! an AF_XDP socket in copy mode reaches.
//!
//! # How it runs
//! * One thread per entry of [`LiveConfig::cores`], pinned there; each calls `BPF_PROG_TEST_RUN`
//!   with `batch` frames per batch (64 by default, the NAPI budget) and up to `repeat` runs per
//!   call (2^20 by default): unpaced, each call is sized to take about [`CALL_TARGET`] (0.2 s)
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
//!   send it. With [`FlowVary::SrcIp`] the source address's last 16 bits are the source's plus
//!   the flow index, stepping over the destination's (as the [`Stamper`] does: nothing is sent
//!   from the address it is sent to).
//! * Sequence stamps ([`FrameSpec::stamp`]) are the [`Stamper`]'s (src/gen/template.rs, all
//!   big-endian at the start of the UDP payload): magic (4, from the template), the CPU number
//!   as the stream (2), the flow index `n % flows` (2), flows − 1 (2, from the template) and
//!   the low 48 bits of the CPU's frame counter `n` as the sequence number (6) — with one
//!   thread per core, one stream per thread. The receive side ([`crate::gen::FlowTracker`])
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
//! the kernel's headroom; IPv4 or IPv6 UDP frames of a [`FrameSpec`].
//!
//! # A veth needs a receiver
//! A veth takes redirected frames only if its peer runs NAPI: the peer must have an XDP program
//! attached or GRO enabled (`ethtool -K PEER gro on`). Otherwise the veth does not offer
//! `ndo_xdp_xmit` (`drivers/net/veth.c`: `NETDEV_XDP_ACT_NDO_XMIT` is set only then, and
//! `veth_xdp_xmit` refuses with `-ENXIO` without the peer's NAPI) and every frame is dropped,
//! silently but for a tracepoint. The engine sends one probe batch first and fails with the fix
//! if the interface took none of it.

#![deny(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::bpf::insn::{AluOp, Asm, Insn, JmpOp, Reg};
use super::bpf::sys::{
    action, PerCpuCounters, Program, HELPER_GET_SMP_PROCESSOR_ID, HELPER_MAP_LOOKUP_ELEM,
    HELPER_REDIRECT, LIVE_MAX_BATCH,
};
use crate::error::{Error, Result};
use crate::gen::{checksum, csum_fold, FlowVary, FrameSpec, SizeSpec, Stamper};

#[allow(unsafe_code)] // FFI: the ethtool ioctl
mod ethtool;

const ETH: usize = 14;
const IP4: usize = 20;
const IP6: usize = 40;
const UDP: usize = 8;
/// Default runs per `BPF_PROG_TEST_RUN` call.
pub const DEFAULT_REPEAT: u32 = 1 << 20;
/// Unpaced, a call is sized to take about this long at the measured rate (at most `repeat` runs),
/// so that the stop flag and the deadline are seen promptly.
pub const CALL_TARGET: Duration = Duration::from_millis(200);
/// Runs of the first unpaced call, which measures the rate.
const CALIBRATION_RUNS: u64 = 4096;
/// Default batch: the NAPI budget, as the kernel's own default.
pub const DEFAULT_BATCH: u32 = 64;

/// What the engine sends, where, and for how long.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// Interface to send on (in the calling thread's network namespace).
    pub ifname: String,
    /// The frames: one fixed size ([`SizeSpec::Fixed`]).
    pub spec: FrameSpec,
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
    pub fn new(ifname: &str, spec: FrameSpec) -> LiveConfig {
        LiveConfig {
            ifname: ifname.to_string(),
            spec,
            cores: vec![0],
            count: 0,
            duration: None,
            pps: None,
            batch: DEFAULT_BATCH,
            repeat: DEFAULT_REPEAT,
        }
    }
}

/// The outcome of [`LiveEngine::run`].
#[derive(Clone, Debug, Default, PartialEq)]
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

/// Where the varying fields sit in the frame and the sums of everything constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LivePlan {
    /// Frame length.
    pub len: usize,
    /// Offset of the UDP header.
    pub l4: usize,
    /// IPv4 (else IPv6).
    pub v4: bool,
    /// Number of flows.
    pub flows: u32,
    /// What varies between flows.
    pub vary: FlowVary,
    /// Value of the varying 16-bit word for flow 0 (source port, or last word of the source
    /// address).
    pub flow_base: u16,
    /// Offset of that word.
    pub flow_off: usize,
    /// [`FlowVary::SrcIp`] with the destination in the source's /16 (/112): the flow index
    /// from which the word steps over the destination's (`index + 1` from there on), as the
    /// Stamper does, so that no frame is sent from the destination address.
    pub flow_skip: Option<u16>,
    /// Sequence stamps on.
    pub stamp: bool,
    /// UDP checksum sum (pseudo-header included) of every constant word, folded to 16 bits, not
    /// inverted.
    pub udp_sum: u16,
    /// IPv4 header sum without the checksum and the varying source word (only used when the
    /// source address varies), folded, not inverted.
    pub ip_sum: u16,
}

impl LivePlan {
    /// The frame the kernel copies (flow 0, stamp 0/0) and the plan for varying it.
    ///
    /// # Errors
    /// [`Error::Config`] for a size range, a frame the spec rejects, or one larger than a page
    /// less the kernel's headroom.
    pub fn new(spec: &FrameSpec) -> Result<(Vec<u8>, LivePlan)> {
        let SizeSpec::Fixed(len) = spec.sizes else {
            return Err(Error::Config(
                "the live engine sends one frame size (the kernel copies one frame); use a \
                 fixed --size, or the AF_XDP engine for ranges and IMIX"
                    .into(),
            ));
        };
        let len = len as usize;
        // PAGE_SIZE - XDP_PACKET_HEADROOM (256) - skb_shared_info (320 on x86-64) - the live
        // mode's page head: stay well inside.
        if len > 3072 {
            return Err(Error::Config(format!(
                "frame size {len}: the live engine sends frames of at most 3072 bytes (one page \
                 with the kernel's headroom)"
            )));
        }
        let st = Stamper::new(spec.clone())?;
        let mut frame = vec![0u8; len];
        st.write(&mut frame, len, 0, 0, 0);
        let v4 = spec.src_ip.is_ipv4();
        let l4 = ETH + if v4 { IP4 } else { IP6 };
        let pay = l4 + UDP;
        let (flow_off, flow_base, flow_skip) = match spec.vary {
            FlowVary::SrcPort => (l4, spec.src_port, None),
            FlowVary::SrcIp => {
                let o = if v4 { ETH + 14 } else { ETH + 22 };
                // Flow k sends from the source's last 16 bits + k, stepping over the
                // destination's when both share all other bits (src/gen/template.rs).
                let s16 = match spec.src_ip {
                    std::net::IpAddr::V4(a) => u32::from(a) as u16,
                    std::net::IpAddr::V6(a) => u128::from(a) as u16,
                };
                let skip = ip_pair(spec.src_ip, spec.dst_ip)
                    .filter(|(s, d)| s >> 16 == d >> 16)
                    .map(|(s, d)| (d as u16).wrapping_sub(s as u16));
                (o, s16, skip)
            }
        };
        // The constant part: the frame with every field the program writes set to zero.
        let mut z = frame.clone();
        z[l4 + 6..l4 + 8].fill(0);
        if spec.flows > 1 {
            z[flow_off..flow_off + 2].fill(0);
        }
        if spec.stamp {
            // The stamp (src/gen/template.rs): magic 4, stream 2, flow index 2, flows - 1 2,
            // 48-bit sequence number 6. Magic and flows - 1 stay as the template has them.
            z[pay + 4..pay + 6].fill(0); // stream
            if spec.flows > 1 {
                z[pay + 6..pay + 8].fill(0); // flow index
            }
            z[pay + 10..pay + 16].fill(0); // sequence number
        }
        let udp_len = (len - l4) as u32;
        let addrs = if v4 {
            &z[ETH + 12..ETH + 20]
        } else {
            &z[ETH + 8..ETH + 40]
        };
        let sum = checksum(&z[l4..len], checksum(addrs, 17 + udp_len));
        let udp_sum = !csum_fold(sum);
        let ip_sum = if v4 {
            let mut h = z[ETH..ETH + IP4].to_vec();
            h[10..12].fill(0);
            !csum_fold(checksum(&h, 0))
        } else {
            0
        };
        Ok((
            frame,
            LivePlan {
                len,
                l4,
                v4,
                flows: spec.flows,
                vary: spec.vary,
                flow_base,
                flow_off,
                flow_skip,
                stamp: spec.stamp,
                udp_sum,
                ip_sum,
            },
        ))
    }

    /// True if the program must write anything into the frame.
    pub fn writes(&self) -> bool {
        self.flows > 1 || self.stamp
    }
}

/// The addresses as numbers (an IPv4 address in the low 32 bits), if of the same family.
fn ip_pair(a: std::net::IpAddr, b: std::net::IpAddr) -> Option<(u128, u128)> {
    use std::net::IpAddr::{V4, V6};
    match (a, b) {
        (V4(a), V4(b)) => Some((u32::from(a) as u128, u32::from(b) as u128)),
        (V6(a), V6(b)) => Some((u128::from(a), u128::from(b))),
        _ => None,
    }
}

/// Emits `r = fold(r)` then `r = ~r & 0xffff`, using `tmp`.
fn fold_invert(a: &mut Asm, r: Reg, tmp: Reg) {
    for _ in 0..3 {
        a.emit(Insn::mov64_reg(tmp, r));
        a.emit(Insn::alu64_imm(AluOp::Rsh, tmp, 16));
        a.emit(Insn::alu64_imm(AluOp::And, r, 0xffff));
        a.emit(Insn::alu64_reg(AluOp::Add, r, tmp));
    }
    a.emit(Insn::alu64_imm(AluOp::Xor, r, 0xffff));
}

/// The live-frames program for `plan`: count the frame in `counters` (key 0, per CPU), write the
/// varying fields, `bpf_redirect(ifindex)`.
///
/// Registers: R6 context, R7 this CPU's frame number, R8 packet start, R9 CPU number, R0 the
/// flow index (once the counter is taken), R5 UDP checksum sum, R4 IPv4 header sum.
///
/// # Errors
/// [`Error::Config`] if the program cannot be assembled.
pub fn live_program(plan: &LivePlan, counters_fd: i32, ifindex: u32) -> Result<Vec<Insn>> {
    let mut a = Asm::new();
    let drop = a.label();
    a.emit(Insn::mov64_reg(Reg::R6, Reg::R1));
    if plan.stamp {
        a.emit(Insn::call(HELPER_GET_SMP_PROCESSOR_ID));
        a.emit(Insn::mov64_reg(Reg::R9, Reg::R0));
    }
    // r0 = &counters[0] (this CPU's copy)
    a.emit(Insn::st_dw(Reg::R10, -8, 0));
    a.emit_all(&Insn::ld_map_fd(Reg::R1, counters_fd));
    a.emit(Insn::mov64_reg(Reg::R2, Reg::R10));
    a.emit(Insn::alu64_imm(AluOp::Add, Reg::R2, -8));
    a.emit(Insn::call(HELPER_MAP_LOOKUP_ELEM));
    a.jmp_imm(JmpOp::Jeq, Reg::R0, 0, drop);
    // r7 = counter++ (atomic: two threads on one core share the CPU's copy)
    a.emit(Insn::mov64_imm(Reg::R7, 1));
    a.emit(Insn::atomic_fetch_add_dw(Reg::R0, 0, Reg::R7));
    if plan.writes() {
        a.emit(Insn::ldx_w(Reg::R8, Reg::R6, 0)); // ctx->data
        a.emit(Insn::ldx_w(Reg::R2, Reg::R6, 4)); // ctx->data_end
        a.emit(Insn::mov64_reg(Reg::R3, Reg::R8));
        a.emit(Insn::alu64_imm(AluOp::Add, Reg::R3, plan.len as i32));
        a.jmp_reg(JmpOp::Jgt, Reg::R3, Reg::R2, drop);
        a.emit(Insn::mov64_imm(Reg::R5, plan.udp_sum as i32));
        if plan.flows > 1 {
            // r0 = counter % flows, the flow index (the map value pointer is no longer needed)
            a.emit(Insn::mov64_reg(Reg::R0, Reg::R7));
            if plan.flows.is_power_of_two() {
                a.emit(Insn::alu64_imm(AluOp::And, Reg::R0, plan.flows as i32 - 1));
            } else {
                a.emit(Insn::mod64_imm(Reg::R0, plan.flows as i32));
            }
            // r1 = base + flow index (+ 1 from the destination's index on), the flow's word
            a.emit(Insn::mov64_reg(Reg::R1, Reg::R0));
            if let Some(d) = plan.flow_skip.filter(|&d| (d as u32) < plan.flows) {
                let below = a.label();
                a.jmp_imm(JmpOp::Jlt, Reg::R1, d as i32, below);
                a.emit(Insn::alu64_imm(AluOp::Add, Reg::R1, 1));
                a.bind(below);
            }
            a.emit(Insn::alu64_imm(AluOp::Add, Reg::R1, plan.flow_base as i32));
            a.emit(Insn::alu64_imm(AluOp::And, Reg::R1, 0xffff));
            a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R1));
            if plan.vary == FlowVary::SrcIp && plan.v4 {
                a.emit(Insn::mov64_imm(Reg::R4, plan.ip_sum as i32));
                a.emit(Insn::alu64_reg(AluOp::Add, Reg::R4, Reg::R1));
                fold_invert(&mut a, Reg::R4, Reg::R3);
                a.emit(Insn::to_be(Reg::R4, 16));
                a.emit(Insn::stx_h(Reg::R8, (ETH + 10) as i16, Reg::R4));
            }
            a.emit(Insn::to_be(Reg::R1, 16));
            a.emit(Insn::stx_h(Reg::R8, plan.flow_off as i16, Reg::R1));
        }
        if plan.stamp {
            let pay = (plan.l4 + UDP) as i16;
            a.emit(Insn::alu64_imm(AluOp::And, Reg::R9, 0xffff));
            a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R9));
            a.emit(Insn::to_be(Reg::R9, 16));
            a.emit(Insn::stx_h(Reg::R8, pay + 4, Reg::R9));
            if plan.flows > 1 {
                // The flow index (r0, below 65536): at pay + 6 and in the sum. With one flow it
                // is 0, as in the template.
                a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R0));
                a.emit(Insn::to_be(Reg::R0, 16));
                a.emit(Insn::stx_h(Reg::R8, pay + 6, Reg::R0));
            }
            // The sequence number's low 48 bits, as the Stamper masks it: bits 47..32 at
            // pay + 10, bits 31..0 at pay + 12 (flows - 1 at pay + 8 stays the template's).
            a.emit(Insn::mov64_reg(Reg::R1, Reg::R7));
            a.emit(Insn::alu64_imm(AluOp::Rsh, Reg::R1, 32));
            a.emit(Insn::alu64_imm(AluOp::And, Reg::R1, 0xffff));
            a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R1));
            a.emit(Insn::to_be(Reg::R1, 16));
            a.emit(Insn::stx_h(Reg::R8, pay + 10, Reg::R1));
            a.emit(Insn::mov64_reg(Reg::R1, Reg::R7));
            a.emit(Insn::to_be(Reg::R1, 32));
            a.emit(Insn::stx_w(Reg::R8, pay + 12, Reg::R1));
            for shift in [16, 0] {
                a.emit(Insn::mov64_reg(Reg::R1, Reg::R7));
                if shift > 0 {
                    a.emit(Insn::alu64_imm(AluOp::Rsh, Reg::R1, shift));
                }
                a.emit(Insn::alu64_imm(AluOp::And, Reg::R1, 0xffff));
                a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R1));
            }
        }
        fold_invert(&mut a, Reg::R5, Reg::R3);
        // 0 means "no checksum" over IPv4 and is invalid over IPv6: its one's-complement twin.
        let nonzero = a.label();
        a.jmp_imm(JmpOp::Jne, Reg::R5, 0, nonzero);
        a.emit(Insn::mov64_imm(Reg::R5, 0xffff));
        a.bind(nonzero);
        a.emit(Insn::to_be(Reg::R5, 16));
        a.emit(Insn::stx_h(Reg::R8, (plan.l4 + 6) as i16, Reg::R5));
    }
    a.emit(Insn::mov64_imm(Reg::R1, ifindex as i32));
    a.emit(Insn::mov64_imm(Reg::R2, 0));
    a.emit(Insn::call(HELPER_REDIRECT));
    a.emit(Insn::exit());
    a.bind(drop);
    a.emit(Insn::mov64_imm(Reg::R0, action::DROP as i32));
    a.emit(Insn::exit());
    a.finish()
        .map_err(|e| Error::Config(format!("live program: {e}")))
}

/// Turns an error of the live-frames call into one that says what to do.
fn live_error(e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EINVAL) => Error::Unsupported(format!(
            "BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES was refused ({e}): the live \
             engine needs Linux ≥ 5.18 (this kernel: {}); use the AF_XDP engine instead",
            kernel_release()
        )),
        Some(libc::EPERM) | Some(libc::EACCES) => Error::Permission {
            op: "bpf(BPF_PROG_TEST_RUN, live frames) needs CAP_BPF + CAP_NET_ADMIN + \
                 CAP_PERFMON (or root)",
            source: e,
        },
        _ => Error::os("bpf(BPF_PROG_TEST_RUN, BPF_F_TEST_XDP_LIVE_FRAMES)", e),
    }
}

fn load_error(e: Error) -> Error {
    match e {
        Error::Permission { source, .. } => Error::Permission {
            op: "bpf() for the live-frames program and its counters needs CAP_BPF + \
                 CAP_NET_ADMIN + CAP_PERFMON (or root)",
            source,
        },
        e => e,
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The live-frames engine: the program and its counters, loaded for one interface.
pub struct LiveEngine {
    cfg: LiveConfig,
    ifindex: u32,
    frame: Vec<u8>,
    plan: LivePlan,
    prog: Program,
    counters: PerCpuCounters,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for LiveEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveEngine")
            .field("ifname", &self.cfg.ifname)
            .field("ifindex", &self.ifindex)
            .field("plan", &self.plan)
            .finish()
    }
}

impl LiveEngine {
    /// Builds the frame and the program and loads it, then checks that the kernel has live
    /// frames (a one-frame run of a program that drops it: nothing is sent).
    ///
    /// # Errors
    /// [`Error::Config`] for a bad configuration, [`Error::NotFound`] for an unknown interface,
    /// [`Error::Unsupported`] on a kernel before 5.18, [`Error::Permission`] without CAP_BPF,
    /// CAP_NET_ADMIN and CAP_PERFMON.
    pub fn new(cfg: LiveConfig) -> Result<LiveEngine> {
        if cfg.cores.is_empty() {
            return Err(Error::Config(
                "the live engine needs at least one core".into(),
            ));
        }
        if cfg.batch == 0 || cfg.batch > LIVE_MAX_BATCH {
            return Err(Error::Config(format!(
                "batch {}: the kernel takes 1..={LIVE_MAX_BATCH} frames per live batch",
                cfg.batch
            )));
        }
        if cfg.repeat < cfg.batch {
            return Err(Error::Config(format!(
                "repeat {} is below the batch ({})",
                cfg.repeat, cfg.batch
            )));
        }
        if let Some(p) = cfg.pps {
            if !(p.is_finite() && p > 0.0) {
                return Err(Error::Config(format!("rate {p} pps: must be positive")));
            }
        }
        let ifindex = super::ifindex(&cfg.ifname)?;
        let (frame, plan) = LivePlan::new(&cfg.spec)?;
        let counters = PerCpuCounters::create(1, "rawq_live_cnt").map_err(load_error)?;
        // Does the kernel have live frames? A program that drops its frame, run once.
        let probe = Program::load(
            &[Insn::mov64_imm(Reg::R0, action::DROP as i32), Insn::exit()],
            "rawq_live_probe",
        )
        .map_err(load_error)?;
        probe.run_live(&frame, ifindex, 1, 1).map_err(live_error)?;
        let insns = live_program(&plan, counters.as_raw_fd(), ifindex)?;
        let prog = Program::load(&insns, "rawq_live").map_err(load_error)?;
        Ok(LiveEngine {
            cfg,
            ifindex,
            frame,
            plan,
            prog,
            counters,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The flag that stops [`LiveEngine::run`] (checked between calls). It stays set: a later
    /// `run` returns after its probe batch.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// The frame the kernel copies (flow 0, stamp 0).
    pub fn frame(&self) -> &[u8] {
        &self.frame
    }

    /// The plan the program follows.
    pub fn plan(&self) -> &LivePlan {
        &self.plan
    }

    /// Frames the program has redirected so far (all CPUs), for live statistics.
    ///
    /// # Errors
    /// [`Error::Os`] if the map cannot be read.
    pub fn redirected(&self) -> Result<u64> {
        self.counters.sum(0)
    }

    /// Sends until the count, the duration or the stop flag, on one pinned thread per core.
    /// Call it on a thread in the interface's network namespace (the sending threads inherit it).
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the interface dropped the whole probe batch (for a veth: the
    /// peer has neither an XDP program nor GRO), and the errors of the live-frames call.
    pub fn run(&self) -> Result<LiveReport> {
        let t0 = Instant::now();
        let deadline = self.cfg.duration.map(|d| t0 + d);
        let before = self.redirected()?;
        let fail0 = tx_failures(&self.cfg.ifname);
        let taken0 = tx_taken(&self.cfg.ifname);
        // The probe batch: does the interface take the frames?
        let probe_n = match self.cfg.count {
            0 => self.cfg.batch as u64,
            c => c.min(self.cfg.batch as u64),
        };
        // On the first sender's core, so that its CPU's frame counter (flows, sequence numbers)
        // runs on from the probe.
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = crate::gen::pin_to_core(self.cfg.cores[0]);
                self.prog
                    .run_live(&self.frame, self.ifindex, probe_n as u32, self.cfg.batch)
                    .map_err(live_error)
            })
            .join()
            .unwrap_or_else(|_| Err(Error::Config("the live probe thread panicked".into())))
        })?;
        let refused = match (taken0, tx_taken(&self.cfg.ifname)) {
            (Some(t0), Some(t1)) => t1 == t0,
            _ => tx_failures(&self.cfg.ifname).saturating_sub(fail0) >= probe_n,
        };
        if refused {
            return Err(self.all_dropped(probe_n));
        }
        let remaining = match self.cfg.count {
            0 => 0,
            c => c - probe_n,
        };
        let threads = self.cfg.cores.len() as u64;
        let result: Result<()> = std::thread::scope(|s| {
            let workers: Vec<_> = self
                .cfg
                .cores
                .iter()
                .enumerate()
                .map(|(i, &core)| {
                    let quota = if self.cfg.count == 0 {
                        None
                    } else {
                        // Spread the remainder over the first threads.
                        let q = remaining / threads + u64::from((i as u64) < remaining % threads);
                        Some(q)
                    };
                    s.spawn(move || self.worker(core, quota, deadline))
                })
                .collect();
            let mut first_err = Ok(());
            for w in workers {
                let r = w
                    .join()
                    .unwrap_or_else(|_| Err(Error::Config("a live sender thread panicked".into())));
                if let (Err(e), true) = (r, first_err.is_ok()) {
                    first_err = Err(e);
                }
            }
            first_err
        });
        let elapsed = t0.elapsed();
        // Let the last frames leave the devmap queues before reading the drop counters.
        std::thread::sleep(Duration::from_millis(20));
        let redirected = self.redirected()?.saturating_sub(before);
        // Not the driver's count of frames taken (`tx_taken`): a veth updates it without
        // atomics from every sending CPU, so with several threads it loses updates (seen: 16 in
        // 3001). The program's count is exact; drops are rare and counted the same way.
        let sent = redirected.saturating_sub(tx_failures(&self.cfg.ifname).saturating_sub(fail0));
        result?;
        Ok(LiveReport {
            sent,
            dropped: redirected - sent,
            redirected,
            frame_len: self.frame.len(),
            elapsed,
        })
    }

    /// One sending thread: calls until its quota, the deadline or the stop flag.
    fn worker(&self, core: usize, quota: Option<u64>, deadline: Option<Instant>) -> Result<()> {
        // Pinned: one stream of sequence numbers and flows per thread (the CPU's counter).
        if let Err(e) = crate::gen::pin_to_core(core) {
            self.stop.store(true, Relaxed);
            return Err(e);
        }
        let batch = self.cfg.batch as u64;
        let pps = self.cfg.pps.map(|p| p / self.cfg.cores.len() as f64);
        // Paced: slices of 10 ms worth of frames, at least one batch.
        let repeat = self.cfg.repeat as u64;
        // Paced: slices of 10 ms worth. Unpaced: a short first call measures the rate, then each
        // call takes about CALL_TARGET, at most `repeat` runs (2^20 ≈ 0.2 s at 5 Mpps).
        let mut slice = match pps {
            Some(p) => ((p / 100.0) as u64).clamp(batch, repeat),
            None => CALIBRATION_RUNS.clamp(batch, repeat),
        };
        let start = Instant::now();
        let (mut done, mut busy) = (0u64, Duration::ZERO);
        while !self.stop.load(Relaxed) {
            let mut n = slice;
            if let Some(q) = quota {
                if done >= q {
                    break;
                }
                n = n.min(q - done);
            }
            let now = Instant::now();
            if let Some(d) = deadline {
                if now >= d {
                    break;
                }
                // Near the end, only what the measured rate fits in the time left.
                if done > 0 && !busy.is_zero() {
                    let rate = done as f64 / busy.as_secs_f64();
                    let fit = (rate * (d - now).as_secs_f64()) as u64;
                    n = n.min(fit.max(batch.min(n)));
                }
            }
            match self
                .prog
                .run_live(&self.frame, self.ifindex, n as u32, self.cfg.batch)
            {
                Ok(()) => {}
                // A signal (Ctrl-C): the runs before it are done and counted by the program.
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => break,
                Err(e) => {
                    self.stop.store(true, Relaxed);
                    return Err(live_error(e));
                }
            }
            busy += now.elapsed();
            done += n;
            if pps.is_none() && !busy.is_zero() {
                let rate = done as f64 / busy.as_secs_f64();
                slice = ((rate * CALL_TARGET.as_secs_f64()) as u64).clamp(batch, repeat);
            }
            if let Some(p) = pps {
                // Coarse pacing: sleep until the schedule has caught up with what went out.
                let due = start + Duration::from_secs_f64(done as f64 / p);
                loop {
                    let now = Instant::now();
                    if now >= due || self.stop.load(Relaxed) || deadline.is_some_and(|d| now >= d) {
                        break;
                    }
                    std::thread::sleep((due - now).min(Duration::from_millis(20)));
                }
            }
        }
        Ok(())
    }

    fn all_dropped(&self, n: u64) -> Error {
        let ifname = &self.cfg.ifname;
        let stats = ethtool::stats(ifname).unwrap_or_default();
        let driver = ethtool::driver(ifname).unwrap_or_default();
        if driver == "veth" {
            let peer = stats
                .iter()
                .find(|(k, _)| k == "peer_ifindex")
                .map_or("its peer".to_string(), |(_, v)| {
                    format!("its peer (ifindex {v}, maybe in another namespace)")
                });
            Error::Unsupported(format!(
                "{ifname} dropped all {n} probe frames: a veth delivers frames redirected by XDP \
                 only when {peer} runs NAPI, i.e. has an XDP program attached or GRO enabled. \
                 Fix: `ethtool -K PEER gro on` (in the peer's namespace), or attach an XDP \
                 program on the peer (e.g. `pktgen -b xdp -d PEER --rx`)"
            ))
        } else {
            Error::Unsupported(format!(
                "{ifname} (driver {driver:?}) dropped all {n} probe frames redirected to it by \
                 XDP: the driver may lack ndo_xdp_xmit or need an XDP program attached on \
                 {ifname} itself before it transmits redirected frames (e.g. mlx5, ice, i40e, \
                 ixgbe: attach any XDP program, such as a pass-through one)"
            ))
        }
    }
}

/// Frames redirected to `ifname` that its driver says it took, where the driver counts them in
/// `ethtool -S` (`*xdp_xmit*` counters other than errors; a veth counts there the frames its
/// peer's ring accepted): `None` for a driver without such counters.
pub fn tx_taken(ifname: &str) -> Option<u64> {
    let stats = ethtool::stats(ifname).ok()?;
    let mut it = stats
        .iter()
        .filter(|(k, _)| k.contains("xdp_xmit") && !k.contains("err"))
        .peekable();
    it.peek()?;
    Some(it.map(|(_, v)| v).sum())
}

/// Frames `ifname` could not transmit so far: its `tx_dropped` (`/proc/thread-self/net/dev`,
/// the calling thread's namespace) plus its driver's `*xdp_xmit_err*` counters (`ethtool -S`;
/// a veth counts there the frames its peer's full ring refused). 0 where unreadable.
pub fn tx_failures(ifname: &str) -> u64 {
    let dropped = std::fs::read_to_string("/proc/thread-self/net/dev")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let (name, rest) = l.split_once(':')?;
                if name.trim() != ifname {
                    return None;
                }
                // rx: bytes packets errs drop fifo frame compressed multicast, tx: bytes packets
                // errs drop ...
                rest.split_whitespace().nth(11)?.parse::<u64>().ok()
            })
        })
        .unwrap_or(0);
    let xmit_err: u64 = ethtool::stats(ifname)
        .unwrap_or_default()
        .iter()
        .filter(|(k, _)| k.contains("xdp_xmit_err"))
        .map(|(_, v)| v)
        .sum();
    dropped + xmit_err
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn spec(v4: bool, flows: u32, vary: FlowVary, stamp: bool, len: u16) -> FrameSpec {
        let (s, d): (IpAddr, IpAddr) = if v4 {
            ("10.1.2.3".parse().unwrap(), "10.1.2.4".parse().unwrap())
        } else {
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap())
        };
        FrameSpec {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
            src_ip: s,
            dst_ip: d,
            src_port: 65530,
            dst_port: 9000,
            flows,
            vary,
            sizes: SizeSpec::Fixed(len),
            stamp,
        }
    }

    /// What the program computes, done in Rust on the plan's sums: must equal the Stamper's
    /// frame (which computes its checksums another way) for every flow and sequence number.
    fn emulate(frame: &[u8], p: &LivePlan, counter: u64, cpu: u16) -> Vec<u8> {
        let mut f = frame.to_vec();
        let fold = |mut s: u64| {
            while s >> 16 != 0 {
                s = (s & 0xffff) + (s >> 16);
            }
            !(s as u16)
        };
        let mut udp = p.udp_sum as u64;
        let idx = counter % p.flows as u64;
        if p.flows > 1 {
            let step = p.flow_skip.is_some_and(|d| idx >= d as u64) as u64;
            let w = (p.flow_base as u64 + idx + step) & 0xffff;
            udp += w;
            if p.vary == FlowVary::SrcIp && p.v4 {
                let c = fold(p.ip_sum as u64 + w);
                f[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
            }
            f[p.flow_off..p.flow_off + 2].copy_from_slice(&(w as u16).to_be_bytes());
        }
        if p.stamp {
            let pay = p.l4 + UDP;
            udp += cpu as u64;
            f[pay + 4..pay + 6].copy_from_slice(&cpu.to_be_bytes());
            if p.flows > 1 {
                udp += idx;
                f[pay + 6..pay + 8].copy_from_slice(&(idx as u16).to_be_bytes());
            }
            // The low 48 bits of the counter; flows - 1 at pay + 8 is the template's.
            let seq = counter & 0xffff_ffff_ffff;
            f[pay + 10..pay + 16].copy_from_slice(&seq.to_be_bytes()[2..]);
            for sh in [32, 16, 0] {
                udp += (seq >> sh) & 0xffff;
            }
        }
        if p.writes() {
            let mut c = fold(udp);
            if c == 0 {
                c = 0xffff;
            }
            f[p.l4 + 6..p.l4 + 8].copy_from_slice(&c.to_be_bytes());
        }
        f
    }

    #[test]
    fn plan_sums_reproduce_the_stampers_frames() {
        for v4 in [true, false] {
            for vary in [FlowVary::SrcPort, FlowVary::SrcIp] {
                for stamp in [false, true] {
                    for flows in [1, 7, 64] {
                        let sp = spec(v4, flows, vary, stamp, 128);
                        let (frame, plan) = LivePlan::new(&sp).unwrap();
                        let st = Stamper::new(sp).unwrap();
                        for counter in [0u64, 1, 6, 63, 1 << 20, 0x1234_5678_9abc_def0] {
                            let cpu = (counter % 3) as u16;
                            let mut want = vec![0u8; 128];
                            st.write(
                                &mut want,
                                128,
                                (counter % flows as u64) as u32,
                                cpu,
                                counter,
                            );
                            if !stamp {
                                // Without stamps the Stamper ignores the sequence number.
                                st.write(&mut want, 128, (counter % flows as u64) as u32, 0, 0);
                            }
                            let what =
                                format!("v4 {v4} {vary:?} stamp {stamp} flows {flows} n {counter}");
                            let got = emulate(&frame, &plan, counter, cpu);
                            assert_eq!(got, want, "{what}");
                            // The receive side reads what the engine sent: the stream, the
                            // flow index it tracks per flow, the flow count intact, the
                            // sequence number's low 48 bits (also past 2^48).
                            let s = Stamper::read_stamp_full(&got);
                            if stamp {
                                let s = s.unwrap_or_else(|| panic!("no stamp: {what}"));
                                assert_eq!(s.stream, cpu, "{what}");
                                assert_eq!(s.flow as u64, counter % flows as u64, "{what}");
                                assert_eq!(s.flows, flows, "{what}");
                                assert_eq!(s.seq, counter & 0xffff_ffff_ffff, "{what}");
                            } else {
                                assert!(s.is_none(), "{what}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ranges_and_jumbo_frames_are_refused_with_the_reason() {
        let mut sp = spec(true, 1, FlowVary::SrcPort, false, 60);
        sp.sizes = SizeSpec::Range(60, 100);
        let e = LivePlan::new(&sp).unwrap_err();
        assert!(e.to_string().contains("fixed --size"), "{e}");
        let sp = spec(true, 1, FlowVary::SrcPort, false, 4000);
        let e = LivePlan::new(&sp).unwrap_err();
        assert!(e.to_string().contains("3072"), "{e}");
    }

    #[test]
    fn errno_of_the_live_call_names_the_fix() {
        let e = live_error(io::Error::from_raw_os_error(libc::EINVAL));
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains("5.18"),
            "{e}"
        );
        let e = live_error(io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(e, Error::Permission { .. }), "{e}");
        for cap in ["CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON", "root"] {
            assert!(e.to_string().contains(cap), "{e}");
        }
    }
}
