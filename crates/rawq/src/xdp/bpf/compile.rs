//! Compiles a port's flow rules into an XDP steering program.
//!
//! The program implements exactly [`flow::classify`](crate::flow::classify):
//!
//! 1. **Parse once** (as [`flow::parse`](crate::flow::parse)): a frame shorter than 14 bytes
//!    matches nothing. One 802.1Q tag is parsed through (a tagged frame shorter than 18 bytes
//!    matches nothing). For IPv4 with a full 20-byte header the protocol is known, and the L4
//!    offset is `l3 + IHL*4` unless IHL < 5 or the fragment offset is non-zero; for IPv6 with a
//!    full 40-byte header the next header is the protocol and L4 starts at `l3 + 40`. The ports
//!    are known when the L4 offset is and four bytes are there. The results live in stack slots
//!    (with "absent" sentinels that no real value equals) and in R9 (the L3 offset).
//! 2. **Rules in the order of the mlx5 flow tables** ([`flow::order`](crate::flow::order): by
//!    priority, a multicast non-drop rule before the others of its priority, a multicast drop
//!    rule after all; the given order among equals), the first match decides: each
//!    rule is a straight run of compare-and-skip-to-the-next-rule tests; every packet read is
//!    preceded by its own bounds check against `data_end`, as the verifier demands. A rule with
//!    an empty pattern (e.g. `promiscuous`) matches everything, so the rules after it are not
//!    emitted: no frame could reach them, and the verifier rejects unreachable instructions.
//! 3. **Actions**:
//!    * `Drop` → `XDP_DROP`.
//!    * `Queue(q)` → `bpf_redirect_map(&xskmap, rx_queue_index, XDP_PASS)` **if** the frame is
//!      being processed on netdev rx queue `q`, else `XDP_PASS`. An AF_XDP socket bound to queue
//!      `q` only receives frames that arrived on netdev queue `q`, so rawq queue *i* is bound to
//!      netdev queue *i* and sits at XSKMAP key *i*; a matching frame that the NIC put on another
//!      queue cannot reach rawq queue `q` and is left to the kernel. On a single-queue device
//!      (a veth) that means: use queue 0. On a multi-queue NIC, steer the flow to queue `q` with
//!      `ethtool -N` (ntuple) as well.
//!    * `Rss(qs)` → the NIC's own RSS already spread the frames over its queues; a frame is
//!      redirected to the rawq queue of the netdev queue it arrived on when that queue is in `qs`,
//!      and passed to the kernel otherwise.
//!    * No rule matches → `XDP_PASS`.
//!
//!    A multicast rule that does not drop has DONT_TRAP on the verbs and DV backends: the device
//!    delivers a copy and the frame goes on to later rules and the kernel. XDP cannot do that
//!    (a frame is either redirected to a socket or passed to the kernel, never both), so here
//!    such a rule **takes** the frame like any other: later rules and the kernel do not see it.
//!    Everything else agrees with [`flow::order::steer`](crate::flow::order::steer): the program
//!    acts on its [`first`](crate::flow::order::Steering::first) rule.
//!
//! **Receive timestamps** ([`compile_stamped`] with a [`Stamp`] other than `None`): before a
//! frame is redirected to the XSKMAP, the program takes `bpf_ktime_get_ns()` (CLOCK_MONOTONIC)
//! and, with [`Stamp::Hardware`], calls the kfunc `bpf_xdp_metadata_rx_timestamp`; it then grows
//! the frame's metadata area by [`meta::LEN`] bytes (`bpf_xdp_adjust_meta`) and writes the
//! record described in [`meta`] there. The metadata sits immediately before the frame's data,
//! and copy-mode AF_XDP copies it into the UMEM chunk along with the frame (net/xdp/xsk.c
//! `xsk_copy_xdp`: it copies from `data_meta` to `data - metalen`); zero-copy drivers receive
//! into the chunk directly. If the driver has no metadata support or no room, `adjust_meta`
//! fails and the frame is redirected without a record. The verifier only lets the program
//! write `data_meta + N` after a check `data_meta + N <= data` (packet pointers are reloaded
//! from the context after `adjust_meta`, which invalidates the old ones).
//!
//! **The driver's VLAN tag** ([`compile_meta`] with the BTF id of
//! `bpf_xdp_metadata_rx_vlan_tag`): before the redirect the program calls that kfunc with two
//! stack outputs (TCI, then the protocol, in one zeroed slot) and writes its return value and
//! outputs into the same record ([`meta::VLAN_STATUS_AT`]); the program must be loaded
//! device-bound. The parse asks it too for a frame without a tag in its data, so that a rule's
//! `vlan` matches the tag the driver took off (as mlx5's flow tables match the tag before the
//! RQ strips it).
//!
//! [`Variant::Verdict`] replaces every action by `return VERDICT_BASE + i` (`i` = the rule's
//! index in the slice given) and "no match" by [`VERDICT_NONE`], so a test run can tell *which*
//! rule matched.

use std::os::fd::RawFd;

use super::insn::{AluOp, Asm, AsmError, Insn, JmpOp, Label, Reg};
use super::sys::{
    action, HELPER_KTIME_GET_NS, HELPER_MAP_LOOKUP_ELEM, HELPER_REDIRECT_MAP,
    HELPER_XDP_ADJUST_META,
};
use crate::error::{Error, Result};
use crate::flow::{Action, IpMatch, MacMatch, Rule};

/// Return value of a [`Variant::Verdict`] program for "rule `i` matched": `VERDICT_BASE + i`.
pub const VERDICT_BASE: u32 = 1000;
/// Return value of a [`Variant::Verdict`] program when no rule matched.
pub const VERDICT_NONE: u32 = 999;

/// What the compiled program does with a match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The real thing: redirect to the XSKMAP with this fd, drop, or pass.
    Steer {
        /// File descriptor of the XSKMAP.
        xskmap_fd: RawFd,
    },
    /// For tests: return [`VERDICT_BASE`] + the index of the matching rule, or
    /// [`VERDICT_NONE`].
    Verdict,
}

/// What the steering program writes into the XDP metadata of each frame it redirects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Stamp {
    /// Nothing (no metadata).
    #[default]
    None,
    /// The kernel receive time (`bpf_ktime_get_ns`).
    Kernel,
    /// The kernel receive time and the driver's hardware receive timestamp: a call of the
    /// kfunc `bpf_xdp_metadata_rx_timestamp` (whose vmlinux BTF id this is). The program must
    /// then be loaded device-bound ([`super::Program::load_for_device`]).
    Hardware {
        /// BTF type id of `bpf_xdp_metadata_rx_timestamp` in vmlinux.
        rx_timestamp_kfunc: u32,
    },
}

/// The metadata record a stamping or VLAN-reading program writes in front of each redirected
/// frame (host byte order but for the VLAN protocol; `LEN` bytes ending where the frame's data
/// starts).
pub mod meta {
    /// Bytes of the record (a multiple of 4 and at most 32, the limit of
    /// net/core/filter.c `xdp_metalen_invalid` before Linux 6.x raised it).
    pub const LEN: usize = 32;
    /// Offset of the magic word.
    pub const MAGIC_AT: usize = 0;
    /// Marks a record this program wrote ("rqTS"); the reader clears it, so a stale record
    /// left in a reused buffer is never read twice.
    pub const MAGIC: u32 = 0x7271_5453;
    /// Offset of the kfunc's return value as an i32 (0: the hardware time is valid; a negative
    /// errno otherwise: EOPNOTSUPP for a driver without the op, ENODATA for an unstamped
    /// frame). [`NOT_ASKED`] in a `Kernel` record.
    pub const HW_STATUS_AT: usize = 4;
    /// The status of a `Kernel` record: -EOPNOTSUPP (no hardware time was asked for).
    pub const NOT_ASKED: i32 = -95;
    /// Offset of the kernel receive time, CLOCK_MONOTONIC ns (u64).
    pub const KERNEL_NS_AT: usize = 8;
    /// Offset of the hardware receive time, ns (u64; 0: none).
    pub const HW_NS_AT: usize = 16;
    /// Offset of the VLAN kfunc's return value as an i32 (0: the driver gave the tag it
    /// took off the frame; a negative errno otherwise: ENODATA for a frame that came with
    /// no tag outside its data, EOPNOTSUPP for a driver without the op). [`NOT_ASKED`] when
    /// the program does not call it.
    pub const VLAN_STATUS_AT: usize = 24;
    /// Offset of the TCI the kfunc wrote (u16, host order: PCP, DEI and VID).
    pub const VLAN_TCI_AT: usize = 28;
    /// Offset of the tag protocol the kfunc wrote (u16, network order as the kfunc gives it:
    /// 0x8100 or 0x88a8).
    pub const VLAN_PROTO_AT: usize = 30;
}

// Stack slots (offsets from R10) of the parse results. Each holds a small value or a sentinel.
const SLOT_VLAN: i16 = -8; // VLAN id, or NONE16
const SLOT_ETYPE: i16 = -16; // ethertype after the tag
const SLOT_PROTO: i16 = -24; // IP protocol, or NONE8
const SLOT_SPORT: i16 = -32; // L4 source port, or NONE16
const SLOT_DPORT: i16 = -40; // L4 destination port, or NONE16
const SLOT_CTX: i16 = -48; // the context pointer (stamping programs)
const SLOT_HWTS: i16 = -56; // the kfunc's output (Stamp::Hardware)
const SLOT_COUNT_KEY: i16 = -64; // the per-rule counter's key (Counting)
const SLOT_VLAN_OUT: i16 = -72; // the VLAN kfunc's outputs: TCI (2 bytes), then proto (2)
const NONE8: i32 = 0x100;
const NONE16: i32 = 0x1_0000;

// Register roles.
const QIDX: Reg = Reg::R6; // ctx->rx_queue_index
const DATA: Reg = Reg::R7; // ctx->data (packet pointer)
const END: Reg = Reg::R8; // ctx->data_end
const L3: Reg = Reg::R9; // offset of the L3 header (14 or 18)

// struct xdp_md field offsets.
const MD_DATA: i16 = 0;
const MD_DATA_END: i16 = 4;
const MD_DATA_META: i16 = 8;
const MD_RX_QUEUE_INDEX: i16 = 16;

/// Compiles `rules` into an XDP program.
///
/// # Errors
/// [`Error::Config`] if the program would be too large for 16-bit jumps (tens of thousands of
/// rules).
pub fn compile(rules: &[Rule], variant: Variant) -> Result<Vec<Insn>> {
    compile_stamped(rules, variant, Stamp::None)
}

/// As [`compile`], and a [`Variant::Steer`] program writes `stamp`'s metadata record (see the
/// module docs) into every frame it redirects.
///
/// # Errors
/// As [`compile`].
pub fn compile_stamped(rules: &[Rule], variant: Variant, stamp: Stamp) -> Result<Vec<Insn>> {
    compile_counted(rules, variant, stamp, None)
}

/// Per-rule hit counters of a steering program: a `BPF_MAP_TYPE_PERCPU_ARRAY` of `u64`
/// ([`super::sys::PerCpuCounters`]) and, for each rule (in the order of the slice compiled), the
/// key of its counter.
#[derive(Clone, Copy, Debug)]
pub struct Counting<'a> {
    /// File descriptor of the per-CPU array.
    pub map_fd: RawFd,
    /// `slots[i]`: the counter key of rule `i`.
    pub slots: &'a [u32],
}

/// As [`compile_stamped`]; with `count`, a [`Variant::Steer`] program adds 1 to rule `i`'s
/// counter (this CPU's copy of key `count.slots[i]`) whenever rule `i` takes a frame (is the
/// rule [`flow::classify`](crate::flow::classify) picks), before its action: a frame a rule
/// drops or leaves to the kernel (a `Queue(q)` rule on another netdev queue) is counted too.
///
/// # Errors
/// As [`compile`]; [`Error::Config`] when `count.slots` is shorter than `rules`.
pub fn compile_counted(
    rules: &[Rule],
    variant: Variant,
    stamp: Stamp,
    count: Option<Counting<'_>>,
) -> Result<Vec<Insn>> {
    compile_meta(rules, variant, stamp, None, count)
}

/// As [`compile_counted`]; with `vlan_kfunc` (the vmlinux BTF id of
/// `bpf_xdp_metadata_rx_vlan_tag`), a [`Variant::Steer`] program asks the driver for the VLAN
/// tag it took off each frame it redirects and writes the answer into the metadata record
/// ([`meta::VLAN_STATUS_AT`]). Such a program must be loaded device-bound, like
/// [`Stamp::Hardware`]'s.
///
/// # Errors
/// As [`compile_counted`].
pub fn compile_meta(
    rules: &[Rule],
    variant: Variant,
    stamp: Stamp,
    vlan_kfunc: Option<u32>,
    count: Option<Counting<'_>>,
) -> Result<Vec<Insn>> {
    if count.is_some_and(|c| c.slots.len() < rules.len()) {
        return Err(Error::Config(
            "compile_counted: fewer counter slots than rules".into(),
        ));
    }
    let mut a = Asm::new();
    let (stamp, vlan_kfunc) = match variant {
        Variant::Steer { .. } => (stamp, vlan_kfunc),
        Variant::Verdict => (Stamp::None, None),
    };
    if stamp != Stamp::None || vlan_kfunc.is_some() {
        a.emit(Insn::stx_dw(Reg::R10, SLOT_CTX, Reg::R1));
    }
    let no_match = a.label();
    let pass = a.label();
    let redirect = a.label();
    let rules_start = a.label();

    emit_parse(&mut a, no_match, rules_start, vlan_kfunc);
    a.bind(rules_start);

    // The mlx5 kernel driver's table order (flow::order), the given order among equals.
    let mut redirects = false;
    for i in crate::flow::order::order(rules) {
        let next = a.label();
        let before = a.len();
        emit_pattern(&mut a, &rules[i], next);
        // Every test a pattern emits is a jump to `next`: a pattern that emitted nothing
        // matches every frame.
        let catch_all = a.len() == before;
        match variant {
            Variant::Verdict => {
                a.emit(Insn::mov64_imm(Reg::R0, (VERDICT_BASE + i as u32) as i32));
                a.emit(Insn::exit());
            }
            Variant::Steer { .. } => {
                if let Some(c) = count {
                    emit_count(&mut a, c.map_fd, c.slots[i]);
                }
                emit_action(&mut a, &rules[i].action, pass, redirect)
            }
        }
        redirects |= matches!(rules[i].action, Action::Queue(_) | Action::Rss(_));
        a.bind(next);
        if catch_all {
            // No frame gets past a catch-all (as in flow::classify), and the verifier refuses
            // the unreachable code the rules behind it would be.
            break;
        }
    }

    a.bind(no_match);
    a.bind(pass);
    let none = match variant {
        Variant::Verdict => VERDICT_NONE,
        Variant::Steer { .. } => action::PASS,
    };
    a.emit(Insn::mov64_imm(Reg::R0, none as i32));
    a.emit(Insn::exit());

    // The shared redirect tail, only where some emitted rule jumps to it (the verifier refuses
    // unreachable code).
    if let (Variant::Steer { xskmap_fd }, true) = (variant, redirects) {
        a.bind(redirect);
        emit_stamp(&mut a, stamp, vlan_kfunc);
        a.emit_all(&Insn::ld_map_fd(Reg::R1, xskmap_fd));
        a.emit(Insn::mov64_reg(Reg::R2, QIDX));
        a.emit(Insn::mov64_imm(Reg::R3, action::PASS as i32));
        a.emit(Insn::call(HELPER_REDIRECT_MAP));
        a.emit(Insn::exit());
    }
    a.finish().map_err(|e: AsmError| {
        Error::Config(format!(
            "{} flow rules are too many for one XDP program: {e}",
            rules.len()
        ))
    })
}

/// The metadata record of `stamp` and `vlan_kfunc` (nothing when neither asks for one), falling
/// through to the redirect whether or not the kernel gave room for it. R7, R8 and R9 are free
/// by now (the parse is over).
fn emit_stamp(a: &mut Asm, stamp: Stamp, vlan_kfunc: Option<u32>) {
    use Reg::*;
    if stamp == Stamp::None && vlan_kfunc.is_none() {
        return;
    }
    let done = a.label();
    if stamp != Stamp::None {
        a.emit(Insn::call(HELPER_KTIME_GET_NS));
        a.emit(Insn::mov64_reg(R7, R0));
    }
    if let Stamp::Hardware { rx_timestamp_kfunc } = stamp {
        // int bpf_xdp_metadata_rx_timestamp(const struct xdp_md *ctx, u64 *timestamp)
        a.emit(Insn::st_dw(R10, SLOT_HWTS, 0));
        a.emit(Insn::ldx_dw(R1, R10, SLOT_CTX));
        a.emit(Insn::mov64_reg(R2, R10));
        a.emit(Insn::alu64_imm(AluOp::Add, R2, SLOT_HWTS as i32));
        a.emit(Insn::call_kfunc(rx_timestamp_kfunc as i32));
        a.emit(Insn::mov64_reg(R8, R0));
    }
    if let Some(kfunc) = vlan_kfunc {
        // int bpf_xdp_metadata_rx_vlan_tag(const struct xdp_md *ctx, __be16 *vlan_proto,
        //                                  u16 *vlan_tci) (net/core/xdp.c): both outputs in one
        // zeroed stack slot, which the verifier wants initialised before a kfunc reads it.
        a.emit(Insn::st_dw(R10, SLOT_VLAN_OUT, 0));
        a.emit(Insn::ldx_dw(R1, R10, SLOT_CTX));
        a.emit(Insn::mov64_reg(R2, R10));
        a.emit(Insn::alu64_imm(AluOp::Add, R2, SLOT_VLAN_OUT as i32 + 2));
        a.emit(Insn::mov64_reg(R3, R10));
        a.emit(Insn::alu64_imm(AluOp::Add, R3, SLOT_VLAN_OUT as i32));
        a.emit(Insn::call_kfunc(kfunc as i32));
        a.emit(Insn::mov64_reg(R9, R0));
    }
    // bpf_xdp_adjust_meta(ctx, -LEN); 0 on success.
    a.emit(Insn::ldx_dw(R1, R10, SLOT_CTX));
    a.emit(Insn::mov64_imm(R2, -(meta::LEN as i32)));
    a.emit(Insn::call(HELPER_XDP_ADJUST_META));
    a.jmp_imm(JmpOp::Jne, R0, 0, done);
    // Fresh packet pointers: data_meta + LEN <= data, or no record.
    a.emit(Insn::ldx_dw(R1, R10, SLOT_CTX));
    a.emit(Insn::ldx_w(R2, R1, MD_DATA_META));
    a.emit(Insn::ldx_w(R3, R1, MD_DATA));
    a.emit(Insn::mov64_reg(R4, R2));
    a.emit(Insn::alu64_imm(AluOp::Add, R4, meta::LEN as i32));
    a.jmp_reg(JmpOp::Jgt, R4, R3, done);
    a.emit(Insn::st_w(R2, meta::MAGIC_AT as i16, meta::MAGIC as i32));
    if stamp == Stamp::None {
        a.emit(Insn::st_dw(R2, meta::KERNEL_NS_AT as i16, 0));
    } else {
        a.emit(Insn::stx_dw(R2, meta::KERNEL_NS_AT as i16, R7));
    }
    match stamp {
        Stamp::Hardware { .. } => {
            a.emit(Insn::stx_w(R2, meta::HW_STATUS_AT as i16, R8));
            a.emit(Insn::ldx_dw(R4, R10, SLOT_HWTS));
            a.emit(Insn::stx_dw(R2, meta::HW_NS_AT as i16, R4));
        }
        _ => {
            a.emit(Insn::st_w(R2, meta::HW_STATUS_AT as i16, meta::NOT_ASKED));
            a.emit(Insn::st_dw(R2, meta::HW_NS_AT as i16, 0));
        }
    }
    if vlan_kfunc.is_some() {
        a.emit(Insn::stx_w(R2, meta::VLAN_STATUS_AT as i16, R9));
        // TCI then protocol, as the record has them.
        a.emit(Insn::ldx_w(R4, R10, SLOT_VLAN_OUT));
        a.emit(Insn::stx_w(R2, meta::VLAN_TCI_AT as i16, R4));
    } else {
        a.emit(Insn::st_w(R2, meta::VLAN_STATUS_AT as i16, meta::NOT_ASKED));
        a.emit(Insn::st_w(R2, meta::VLAN_TCI_AT as i16, 0));
    }
    a.bind(done);
}

/// `(*bpf_map_lookup_elem(map, &slot))++` when the lookup finds the slot. Clobbers R0-R5 (the
/// helper call); the parse results (stack, R6-R9) survive. A per-CPU value needs no atomic add:
/// XDP runs with migration disabled, and only this CPU writes its copy.
fn emit_count(a: &mut Asm, map_fd: RawFd, slot: u32) {
    use Reg::*;
    let done = a.label();
    a.emit(Insn::st_w(R10, SLOT_COUNT_KEY, slot as i32));
    a.emit_all(&Insn::ld_map_fd(R1, map_fd));
    a.emit(Insn::mov64_reg(R2, R10));
    a.emit(Insn::alu64_imm(AluOp::Add, R2, SLOT_COUNT_KEY as i32));
    a.emit(Insn::call(HELPER_MAP_LOOKUP_ELEM));
    a.jmp_imm(JmpOp::Jeq, R0, 0, done);
    a.emit(Insn::ldx_dw(R1, R0, 0));
    a.emit(Insn::alu64_imm(AluOp::Add, R1, 1));
    a.emit(Insn::stx_dw(R0, 0, R1));
    a.bind(done);
}

/// `if (reg + n > data_end) goto fail`, with `tmp` as scratch.
fn bounds(a: &mut Asm, tmp: Reg, base: Reg, n: i32, fail: Label) {
    a.emit(Insn::mov64_reg(tmp, base));
    a.emit(Insn::alu64_imm(AluOp::Add, tmp, n));
    a.jmp_reg(JmpOp::Jgt, tmp, END, fail);
}

/// Loads a big-endian u16 at `base + off` into `dst`.
fn load_be16(a: &mut Asm, dst: Reg, base: Reg, off: i16) {
    a.emit(Insn::ldx_h(dst, base, off));
    a.emit(Insn::to_be(dst, 16));
}

/// The parse (module docs, step 1). With `vlan_kfunc`, an untagged frame's VLAN id is the one
/// the driver took off it, if it did (the kfunc answers 0), so that a rule's `vlan` matches it
/// as the mlx5 flow tables match a tag before the RQ strips it; the context pointer is then in
/// `SLOT_CTX` already.
fn emit_parse(a: &mut Asm, no_match: Label, done: Label, vlan_kfunc: Option<u32>) {
    use Reg::*;
    a.emit(Insn::ldx_w(QIDX, R1, MD_RX_QUEUE_INDEX));
    a.emit(Insn::ldx_w(DATA, R1, MD_DATA));
    a.emit(Insn::ldx_w(END, R1, MD_DATA_END));
    a.emit(Insn::st_dw(R10, SLOT_VLAN, NONE16));
    a.emit(Insn::st_dw(R10, SLOT_ETYPE, 0));
    a.emit(Insn::st_dw(R10, SLOT_PROTO, NONE8));
    a.emit(Insn::st_dw(R10, SLOT_SPORT, NONE16));
    a.emit(Insn::st_dw(R10, SLOT_DPORT, NONE16));

    // Ethernet header.
    bounds(a, R2, DATA, 14, no_match);
    load_be16(a, R3, DATA, 12);
    a.emit(Insn::mov64_imm(L3, 14));
    let untagged = a.label();
    a.jmp_imm(JmpOp::Jne, R3, 0x8100, untagged);
    bounds(a, R2, DATA, 18, no_match);
    load_be16(a, R4, DATA, 14);
    a.emit(Insn::alu64_imm(AluOp::And, R4, 0x0fff));
    a.emit(Insn::stx_dw(R10, SLOT_VLAN, R4));
    load_be16(a, R3, DATA, 16);
    a.emit(Insn::mov64_imm(L3, 18));
    if let Some(kfunc) = vlan_kfunc {
        let have_vlan = a.label();
        let no_tag = a.label();
        a.ja(have_vlan);
        a.bind(untagged);
        // R3 (the ethertype) does not survive the call: kept in its slot meanwhile.
        a.emit(Insn::stx_dw(R10, SLOT_ETYPE, R3));
        a.emit(Insn::st_dw(R10, SLOT_VLAN_OUT, 0));
        a.emit(Insn::ldx_dw(R1, R10, SLOT_CTX));
        a.emit(Insn::mov64_reg(R2, R10));
        a.emit(Insn::alu64_imm(AluOp::Add, R2, SLOT_VLAN_OUT as i32 + 2));
        a.emit(Insn::mov64_reg(R3, R10));
        a.emit(Insn::alu64_imm(AluOp::Add, R3, SLOT_VLAN_OUT as i32));
        a.emit(Insn::call_kfunc(kfunc as i32));
        a.jmp_imm(JmpOp::Jne, R0, 0, no_tag);
        a.emit(Insn::ldx_h(R4, R10, SLOT_VLAN_OUT));
        a.emit(Insn::alu64_imm(AluOp::And, R4, 0x0fff));
        a.emit(Insn::stx_dw(R10, SLOT_VLAN, R4));
        a.bind(no_tag);
        a.emit(Insn::ldx_dw(R3, R10, SLOT_ETYPE));
        a.bind(have_vlan);
    } else {
        a.bind(untagged);
    }
    a.emit(Insn::stx_dw(R10, SLOT_ETYPE, R3));

    let v4 = a.label();
    let v6 = a.label();
    let ports = a.label();
    a.jmp_imm(JmpOp::Jeq, R3, 0x0800, v4);
    a.jmp_imm(JmpOp::Jeq, R3, 0x86dd, v6);
    a.ja(done);

    // IPv4: protocol once the 20-byte header is there; L4 only for IHL >= 5, offset 0.
    a.bind(v4);
    a.emit(Insn::mov64_reg(R1, DATA));
    a.emit(Insn::alu64_reg(AluOp::Add, R1, L3));
    bounds(a, R2, R1, 20, done);
    a.emit(Insn::ldx_b(R4, R1, 9));
    a.emit(Insn::stx_dw(R10, SLOT_PROTO, R4));
    load_be16(a, R4, R1, 6);
    a.emit(Insn::alu64_imm(AluOp::And, R4, 0x1fff));
    a.jmp_imm(JmpOp::Jne, R4, 0, done);
    a.emit(Insn::ldx_b(R4, R1, 0));
    a.emit(Insn::alu64_imm(AluOp::And, R4, 0x0f));
    a.emit(Insn::alu64_imm(AluOp::Lsh, R4, 2));
    a.jmp_imm(JmpOp::Jlt, R4, 20, done);
    a.emit(Insn::alu64_reg(AluOp::Add, R4, L3));
    a.ja(ports);

    // IPv6: next header of the fixed header, no extension-header walk.
    a.bind(v6);
    a.emit(Insn::mov64_reg(R1, DATA));
    a.emit(Insn::alu64_reg(AluOp::Add, R1, L3));
    bounds(a, R2, R1, 40, done);
    a.emit(Insn::ldx_b(R4, R1, 6));
    a.emit(Insn::stx_dw(R10, SLOT_PROTO, R4));
    a.emit(Insn::mov64_reg(R4, L3));
    a.emit(Insn::alu64_imm(AluOp::Add, R4, 40));

    // R4 = L4 offset (at most 18 + 60): the ports, if four bytes are there.
    a.bind(ports);
    a.emit(Insn::mov64_reg(R1, DATA));
    a.emit(Insn::alu64_reg(AluOp::Add, R1, R4));
    bounds(a, R2, R1, 4, done);
    load_be16(a, R3, R1, 0);
    a.emit(Insn::stx_dw(R10, SLOT_SPORT, R3));
    load_be16(a, R3, R1, 2);
    a.emit(Insn::stx_dw(R10, SLOT_DPORT, R3));
    a.ja(done);
}

/// `if (*(u64 *)(fp + slot) != v) goto next`.
fn slot_ne(a: &mut Asm, slot: i16, v: i32, next: Label) {
    a.emit(Insn::ldx_dw(Reg::R1, Reg::R10, slot));
    a.jmp_imm(JmpOp::Jne, Reg::R1, v, next);
}

/// `if (*(u64 *)(fp + slot) == v) goto next`.
fn slot_eq(a: &mut Asm, slot: i16, v: i32, next: Label) {
    a.emit(Insn::ldx_dw(Reg::R1, Reg::R10, slot));
    a.jmp_imm(JmpOp::Jeq, Reg::R1, v, next);
}

/// Compares `bytes.len()` (2 or 4) packet bytes at `base + off` under `mask` with `want`.
/// Loads are in host order, so the constants are taken from the bytes in host order too.
/// A prefix to compare: offset in the IP header, address bytes, mask bytes (`None`: absent).
type Prefix = (i16, Option<(Vec<u8>, Vec<u8>)>);

/// An IP-version match: the ethertype, a parsed IP header, and each present prefix (address
/// and mask bytes at header offset `o`) compared 4 bytes at a time.
fn ip_prefixes(a: &mut Asm, ethertype: i32, hdr_len: i32, nets: &[Prefix], next: Label) {
    use Reg::*;
    slot_ne(a, SLOT_ETYPE, ethertype, next);
    slot_eq(a, SLOT_PROTO, NONE8, next);
    if nets.iter().all(|(_, n)| n.is_none()) {
        return;
    }
    a.emit(Insn::mov64_reg(R2, DATA));
    a.emit(Insn::alu64_reg(AluOp::Add, R2, L3));
    bounds(a, R4, R2, hdr_len, next);
    for (o, n) in nets {
        let Some((want, mask)) = n else { continue };
        for r in (0..want.len()).step_by(4) {
            masked_bytes_ne(a, R2, o + r as i16, &want[r..r + 4], &mask[r..r + 4], next);
        }
    }
}

fn masked_bytes_ne(a: &mut Asm, base: Reg, off: i16, want: &[u8], mask: &[u8], next: Label) {
    let (w, m) = match want.len() {
        2 => (
            u16::from_ne_bytes([want[0] & mask[0], want[1] & mask[1]]) as u32,
            u16::from_ne_bytes([mask[0], mask[1]]) as u32,
        ),
        _ => {
            let mut wb = [0u8; 4];
            let mut mb = [0u8; 4];
            for k in 0..4 {
                wb[k] = want[k] & mask[k];
                mb[k] = mask[k];
            }
            (u32::from_ne_bytes(wb), u32::from_ne_bytes(mb))
        }
    };
    if m == 0 {
        return;
    }
    if want.len() == 2 {
        a.emit(Insn::ldx_h(Reg::R3, base, off));
    } else {
        a.emit(Insn::ldx_w(Reg::R3, base, off));
    }
    if m != u32::MAX && !(want.len() == 2 && m == 0xffff) {
        a.emit(Insn::alu32_imm(AluOp::And, Reg::R3, m as i32));
    }
    a.jmp32_imm(JmpOp::Jne, Reg::R3, w as i32, next);
}

fn mac_ne(a: &mut Asm, off: i16, m: &MacMatch, next: Label) {
    masked_bytes_ne(a, DATA, off, &m.addr[0..4], &m.mask[0..4], next);
    masked_bytes_ne(a, DATA, off + 4, &m.addr[4..6], &m.mask[4..6], next);
}

fn emit_pattern(a: &mut Asm, rule: &Rule, next: Label) {
    let p = &rule.pattern;
    if let Some(m) = &p.dst_mac {
        mac_ne(a, 0, m, next);
    }
    if let Some(m) = &p.src_mac {
        mac_ne(a, 6, m, next);
    }
    if let Some(v) = p.vlan {
        slot_ne(a, SLOT_VLAN, v as i32, next);
    }
    if let Some(et) = p.ethertype {
        slot_ne(a, SLOT_ETYPE, et as i32, next);
    }
    match p.ip {
        Some(IpMatch::V4 { src, dst }) => {
            let net = |n: Option<crate::flow::Ipv4Net>| {
                n.filter(|n| n.prefix > 0)
                    .map(|n| (n.addr.octets().to_vec(), n.mask().to_be_bytes().to_vec()))
            };
            ip_prefixes(a, 0x0800, 20, &[(12, net(src)), (16, net(dst))], next);
        }
        Some(IpMatch::V6 { src, dst }) => {
            let net = |n: Option<crate::flow::Ipv6Net>| {
                n.filter(|n| n.prefix > 0)
                    .map(|n| (n.addr.octets().to_vec(), n.mask().to_be_bytes().to_vec()))
            };
            ip_prefixes(a, 0x86dd, 40, &[(8, net(src)), (24, net(dst))], next);
        }
        None => {}
    }
    if let Some(proto) = p.ip_proto {
        slot_ne(a, SLOT_PROTO, proto as i32, next);
    }
    if let Some(l4) = p.l4 {
        slot_ne(a, SLOT_PROTO, l4.proto.ip_proto() as i32, next);
        // The ports must be readable even when the rule does not look at them.
        slot_eq(a, SLOT_SPORT, NONE16, next);
        if let Some(sp) = l4.src_port {
            slot_ne(a, SLOT_SPORT, sp as i32, next);
        }
        if let Some(dp) = l4.dst_port {
            slot_ne(a, SLOT_DPORT, dp as i32, next);
        }
    }
}

fn emit_action(a: &mut Asm, act: &Action, pass: Label, redirect: Label) {
    match act {
        Action::Drop => {
            a.emit(Insn::mov64_imm(Reg::R0, action::DROP as i32));
            a.emit(Insn::exit());
        }
        Action::Queue(q) => {
            a.jmp_imm(JmpOp::Jeq, QIDX, *q as i32, redirect);
            a.ja(pass);
        }
        Action::Rss(qs) => {
            for q in qs {
                a.jmp_imm(JmpOp::Jeq, QIDX, *q as i32, redirect);
            }
            a.ja(pass);
        }
    }
}
