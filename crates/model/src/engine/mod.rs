//! The device engine: object tables (MR, CQ, SQ, RQ, TIR, flow) and what the device does on
//! each `process` step. The objects are independent, as on the hardware: an SQ or RQ names its
//! CQ (several queues may share one), a TIR names its RQs, a flow names its TIR.
//!
//! Ring memory is anybody's: the model only holds addresses handed to the create calls (whose
//! safety contract, in [`super::hw::Hw`], keeps them valid).

mod cq;
mod rq;
mod sq;
mod sq_wqe;
mod steer;
mod tso;

use std::collections::VecDeque;
use std::sync::Arc;

use super::link::{AfPacket, Inbox, Tap};
use super::ModelWire;
use crate::desc::{CqDesc, HwEvent, HwOptions, QueueState, RqDesc, SqDesc};
use crate::error::{Error, Result};
use crate::mmio;

#[cfg(test)]
pub(crate) use sq::doorbell_qpn;
pub(crate) use steer::{Flow, Tir};

/// What a modelled device (or one of its queues) has seen and done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelCounters {
    /// Send WQEs processed (good ones).
    pub tx_wqes: u64,
    /// Frames put on the wire.
    pub tx_frames: u64,
    /// Bytes put on the wire.
    pub tx_bytes: u64,
    /// Send completions written (requested ones).
    pub tx_cqes: u64,
    /// Send error CQEs written (not counting flushes).
    pub tx_error_cqes: u64,
    /// Send WQEs flushed after an error.
    pub tx_flushed: u64,
    /// Send WQEs refused for a data segment of byte count 0 (also in `tx_error_cqes`).
    pub tx_zero_length_segs: u64,
    /// Frames the wire could not take (no flow control, peer full; or the bridge refused).
    pub wire_drops: u64,
    /// Frames the outside wire's socket (`Link::Bridge`: an `AF_PACKET` socket on a Linux
    /// interface) dropped before the device read them, its receive queue full (the kernel's
    /// `PACKET_STATISTICS`): frames that reached the port and found no room in it.
    pub wire_rx_drops: u64,
    /// Frames delivered into an RQ.
    pub rx_frames: u64,
    /// Bytes delivered into an RQ.
    pub rx_bytes: u64,
    /// Frames dropped because the RQ had no posted WQE (or was not ready).
    pub rx_no_buffer: u64,
    /// Runt frames dropped.
    pub rx_runt: u64,
    /// Oversize frames dropped.
    pub rx_oversize: u64,
    /// Frames no flow took ("to the kernel": written to the netdev when there is one).
    pub rx_to_kernel: u64,
    /// Frames a `Drop` rule took.
    pub rx_rule_drop: u64,
    /// Receive error CQEs written (not counting flushes).
    pub rx_error_cqes: u64,
    /// Frames dropped because their RQ was in the error state.
    pub rx_in_error: u64,
    /// Receive WQEs flushed (WR_FLUSH_ERR) because their RQ was in the error state.
    pub rx_flushed: u64,
    /// Striding RQ filler CQEs.
    pub fillers: u64,
    /// Compressed CQE sessions written.
    pub compressed_sessions: u64,
    /// Completions carried by mini-CQEs.
    pub mini_cqes: u64,
    /// Doorbells whose UAR write did not match the last WQE's first 8 bytes.
    pub doorbell_mismatch: u64,
    /// CQ overruns (a CQE was due on a full CQ: the CQ and its queues went to error).
    pub cq_overruns: u64,
    /// Frames the kernel netdev sent (read from the TAP and put on the wire).
    pub netdev_tx: u64,
    /// Rounds of device work ([`Hw::process`](super::hw::Hw::process) calls, the device's
    /// thread's polls). Device-wide only (0 in a queue's counters).
    pub polls: u64,
    /// Rounds that found nothing to do: the device was waiting for the driver. A device thread
    /// that keeps up with its driver finds a real share of its polls idle; one that is the
    /// bottleneck finds work at every poll.
    pub idle_polls: u64,
    /// Time the device's own thread ([`Hw::spawn`](super::hw::Hw::spawn)) spent in rounds that
    /// found work, in nanoseconds (its busy time, leaving out the idle polls and the waiting
    /// between them); 0 when rounds are run by [`Hw::process`](super::hw::Hw::process) calls.
    pub work_ns: u64,
}

/// Device properties beyond [`HwOptions`] (what a ConnectX-5 has unless told otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwTuning {
    /// Enhanced multi-packet send WQEs accepted (only without a minimum inline header).
    pub empw: bool,
    /// TX checksum offload.
    pub tx_csum: bool,
    /// Smallest frame accepted on receive; shorter ones are runts.
    pub min_frame: u32,
    /// TSO (LSO) send WQEs accepted and segmented (engine/tso.rs), payloads up to
    /// [`MAX_TSO`] bytes.
    pub tso: bool,
}

/// The largest TSO payload the model segments: what the emulated NIC reports as
/// `tso_caps.max_tso` (256 KiB, a ConnectX's `max_lso_cap` of 18).
pub const MAX_TSO: u32 = tso::MAX_TSO;

impl Default for HwTuning {
    fn default() -> Self {
        HwTuning {
            empw: true,
            tx_csum: true,
            min_frame: 14,
            tso: true,
        }
    }
}

pub(crate) enum Link {
    Sink,
    Peer(Arc<Inbox>),
    Bridge(AfPacket),
}

/// Objects addressed by number: `base + index`; freed slots are reused.
pub(crate) struct Table<T> {
    v: Vec<Option<T>>,
    base: u32,
}

/// Most objects of one kind a device holds.
const MAX_OBJECTS: usize = 1 << 16;

impl<T> Table<T> {
    fn new(base: u32) -> Self {
        Table {
            v: Vec::new(),
            base,
        }
    }

    fn insert(&mut self, what: &str, t: T) -> Result<u32> {
        let i = match self.v.iter().position(Option::is_none) {
            Some(i) => {
                self.v[i] = Some(t);
                i
            }
            None if self.v.len() < MAX_OBJECTS => {
                self.v.push(Some(t));
                self.v.len() - 1
            }
            None => {
                return Err(Error::Config(format!(
                    "model: no room for another {what} ({MAX_OBJECTS} exist); destroy some first"
                )))
            }
        };
        Ok(self.base + i as u32)
    }

    fn idx(&self, n: u32) -> Option<usize> {
        n.checked_sub(self.base).map(|i| i as usize)
    }

    pub(crate) fn get(&self, n: u32) -> Option<&T> {
        self.v.get(self.idx(n)?)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, n: u32) -> Option<&mut T> {
        let i = self.idx(n)?;
        self.v.get_mut(i)?.as_mut()
    }

    fn remove(&mut self, n: u32) -> Option<T> {
        let i = self.idx(n)?;
        self.v.get_mut(i)?.take()
    }

    /// Numbers of the live objects, in a fixed-size walk (no allocation): `0..len` mapped.
    fn slots(&self) -> std::ops::Range<u32> {
        self.base..self.base + self.v.len() as u32
    }

    /// How many objects are live.
    pub(crate) fn live(&self) -> usize {
        self.v.iter().filter(|t| t.is_some()).count()
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.v
            .iter()
            .enumerate()
            .filter_map(move |(i, t)| t.as_ref().map(|t| (self.base + i as u32, t)))
    }
}

/// A memory registration (an mkey: Linux drivers/infiniband/hw/mlx5/mr.c
/// `set_mkc_access_pd_addr_fields`, `assign_mkey_variant`).
pub(crate) struct Mr {
    start: u64,
    len: u64,
    /// The whole key: table number << 8 | the registration's variant byte.
    key: u32,
    pd: u32,
    /// The device may write it (`lw`: IBV_ACCESS_LOCAL_WRITE).
    local_write: bool,
}

/// A piece of a frame being sent: bytes inline in the WQE (offset into the WQE copy) or in
/// registered memory.
#[derive(Clone, Copy)]
pub(crate) enum Piece {
    Wqe {
        at: usize,
        len: usize,
    },
    Mem {
        addr: u64,
        len: u32,
    },
    /// An 802.1Q tag the device inserts (`eth::INSERT_VLAN`): 0x8100 and this TCI.
    Tag {
        tci: u16,
    },
}

/// A frame of the WQE being sent: `pieces` pieces from `first`, `len` bytes, the checksums to
/// fill (`cs_flags` L3/L4 bits).
pub(crate) struct TxFrame {
    first: u32,
    pieces: u32,
    len: u32,
    cs: u8,
    /// A segment of a TSO WQE: the header's layout, the segment's index, where its payload
    /// starts in the WQE's payload, whether it is the last (see `tso::fixup`).
    tso: Option<(tso::TsoHdr, u32, u32, bool)>,
}

/// The send-side scratch: the WQE being parsed (copied out of the ring), its frames as pieces,
/// and a frame's bytes for a wire that needs them in one buffer. Sized once (a WQE has at most
/// 63 DS, so at most 63 pieces and frames): no allocation per frame. `Default` allocates
/// nothing (a placeholder while the real one is taken out).
#[derive(Default)]
pub(crate) struct TxScratch {
    wqe: Vec<u8>,
    /// Frames and bytes of the WQE (counted whether or not its pieces are recorded).
    nframes: u32,
    nbytes: u64,
    pieces: Vec<Piece>,
    frames: Vec<TxFrame>,
    bytes: Vec<u8>,
}

pub(crate) struct HwState {
    pub(crate) opts: HwOptions,
    pub(crate) tune: HwTuning,
    pub(crate) counters: ModelCounters,
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) link: Link,
    tap: Option<Tap>,
    mrs: Table<Mr>,
    /// The last mkey variant byte given (mr.c `assign_mkey_variant`, `dev->mkey_var`).
    mkey_var: u8,
    pub(crate) cqs: Table<cq::Cq>,
    pub(crate) sqs: Table<sq::Sq>,
    pub(crate) rqs: Table<rq::Rq>,
    pub(crate) tirs: Table<Tir>,
    pub(crate) flows: Table<Flow>,
    /// Flow numbers in matching order (priority, then creation).
    order: Vec<u32>,
    step: u64,
    tx: TxScratch,
    /// Receive scratch: the frame as delivered (VLAN tag stripped).
    rxf: Vec<u8>,
    /// Bridge / TAP read buffer.
    netbuf: Vec<u8>,
    /// Calls of `pull_bridge`, for how often it reads its socket's drops.
    bridge_rounds: u32,
    /// A frame taken from the wire that waits for an RQ buffer (flow control).
    held: Option<Vec<u8>>,
    pub(crate) events: Vec<HwEvent>,
    pub(crate) epoch: std::time::Instant,
}

/// Largest frame the wire buffers are sized for up front.
fn frame_cap(max_frame: u32) -> usize {
    (max_frame as usize + 64).max(2048)
}

pub(crate) use crate::mem::ARM_SENTINEL;

impl HwState {
    pub(crate) fn new(opts: HwOptions, tune: HwTuning) -> Result<HwState> {
        if opts.min_inline != 0 && opts.min_inline != 18 {
            return Err(Error::Config(format!(
                "model min_inline = {}: must be 0 (MLX5_USER_INLINE_MODE_NONE) or 18 (L2)",
                opts.min_inline
            )));
        }
        if !(64..=65535).contains(&opts.max_frame) {
            return Err(Error::Config(format!(
                "model max_frame = {}: must be 64..=65535",
                opts.max_frame
            )));
        }
        if opts.wire_capacity == 0 || opts.wire_capacity > 1 << 20 {
            return Err(Error::Config(
                "model wire_capacity must be 1..=1048576 frames".into(),
            ));
        }
        if tune.min_frame > opts.max_frame {
            return Err(Error::Config("model min_frame exceeds max_frame".into()));
        }
        let inbox = Inbox::new(opts.wire_capacity as usize, frame_cap(opts.max_frame));
        let link = match &opts.wire {
            ModelWire::Loopback => Link::Peer(inbox.clone()),
            ModelWire::Sink => Link::Sink,
            ModelWire::Bridge { ifname } => Link::Bridge(AfPacket::open(ifname)?),
        };
        let tap = match &opts.netdev {
            Some(crate::config::NetdevPath::Tap { ifname }) => Some(Tap::open(ifname)?),
            None => None,
        };
        let tx = TxScratch {
            wqe: vec![0; 64 * 16],
            nframes: 0,
            nbytes: 0,
            pieces: Vec::with_capacity(64),
            frames: Vec::with_capacity(64),
            bytes: Vec::with_capacity(frame_cap(opts.max_frame)),
        };
        Ok(HwState {
            opts,
            tune,
            counters: ModelCounters::default(),
            inbox,
            link,
            tap,
            mrs: Table::new(0x5000),
            mkey_var: 0,
            cqs: Table::new(0x400),
            sqs: Table::new(0x1000),
            rqs: Table::new(0x2000),
            tirs: Table::new(0x3000),
            flows: Table::new(1),
            order: Vec::new(),
            step: 0,
            tx,
            rxf: Vec::with_capacity(65536),
            netbuf: Vec::with_capacity(65536),
            bridge_rounds: 0,
            held: None,
            events: Vec::with_capacity(256),
            epoch: std::time::Instant::now(),
        })
    }

    pub(crate) fn clock_ticks(&self) -> u64 {
        let ns = self.epoch.elapsed().as_nanos();
        (ns * self.opts.clock_khz as u128 / 1_000_000) as u64
    }

    // ---- MRs ----

    pub(crate) fn reg_mr_in(
        &mut self,
        addr: u64,
        len: u64,
        pd: u32,
        local_write: bool,
    ) -> Result<u32> {
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(Error::Config(format!(
                "model reg_mr({addr:#x}, {len}): empty or wrapping range"
            )));
        }
        let n = self.mrs.insert(
            "MR",
            Mr {
                start: addr,
                len,
                key: 0,
                pd,
                local_write,
            },
        )?;
        // mr.c `assign_mkey_variant`: the low byte of every new mkey is the next value of a
        // device-wide 8-bit counter; the index (`mlx5_idx_to_mkey`) is above it.
        self.mkey_var = self.mkey_var.wrapping_add(1);
        let key = n << 8 | u32::from(self.mkey_var);
        if let Some(m) = self.mrs.get_mut(n) {
            m.key = key;
        }
        Ok(key)
    }

    /// The registration `lkey` names: its index and its variant byte both.
    fn mr(&self, lkey: u32) -> Option<&Mr> {
        self.mrs.get(lkey >> 8).filter(|m| m.key == lkey)
    }

    pub(crate) fn dereg_mr(&mut self, lkey: u32) -> Result<()> {
        if self.mr(lkey).is_none() {
            return Err(Error::Config(format!(
                "model dereg_mr: unknown lkey {lkey:#x}"
            )));
        }
        self.mrs.remove(lkey >> 8);
        Ok(())
    }

    /// The lkey of a registration of exactly this range, if any.
    pub(crate) fn find_mr(&self, addr: u64, len: u64) -> Option<u32> {
        self.mrs
            .iter()
            .find(|(_, m)| m.start == addr && m.len == len)
            .map(|(_, m)| m.key)
    }

    /// The device's check of a receive scatter entry: `addr..addr+len` inside the region
    /// registered under `lkey`, of the RQ's PD, writable (a bad key, PD, access or range
    /// gives LOCAL_PROT_ERR, PRM "Completion Queue Entry" syndromes; rdma-core
    /// providers/mlx5/cq.c `mlx5_handle_error_cqe` maps it to IBV_WC_LOC_PROT_ERR).
    pub(crate) fn mr_ok(&self, lkey: u32, pd: u32, addr: u64, len: u32) -> bool {
        self.mr_range(lkey, pd, true)
            .is_some_and(|r| in_range(r, addr, len))
    }

    /// The region registered under `lkey` for a queue of protection domain `pd` (`write`: to
    /// be written by the device): (start, end).
    pub(crate) fn mr_range(&self, lkey: u32, pd: u32, write: bool) -> Option<(u64, u64)> {
        // `reg_mr` refused ranges that wrap: `start + len` does not overflow.
        self.mr(lkey)
            .filter(|m| m.pd == pd && (m.local_write || !write))
            .map(|m| (m.start, m.start + m.len))
    }

    // ---- object creation (validated) ----

    pub(crate) fn create_cq(&mut self, d: CqDesc) -> Result<u32> {
        let bad = |m: String| Err(Error::Config(format!("model create_cq: {m}")));
        if !d.cqe_cnt.is_power_of_two() || !(2..=1 << 22).contains(&d.cqe_cnt) {
            return bad(format!(
                "cqe_cnt = {}: must be a power of two from 2 to 2^22",
                d.cqe_cnt
            ));
        }
        if d.cqe_size != 64 && d.cqe_size != 128 {
            return bad(format!("cqe_size = {}: must be 64 or 128", d.cqe_size));
        }
        if d.buf == 0 || !d.buf.is_multiple_of(64) {
            return bad(format!("buf {:#x}: null or not 64-byte aligned", d.buf));
        }
        if d.dbrec == 0 || !d.dbrec.is_multiple_of(8) {
            return bad(format!("dbrec {:#x}: null or not 8-byte aligned", d.dbrec));
        }
        if d.buf
            .checked_add(d.cqe_cnt as usize * d.cqe_size as usize)
            .is_none()
        {
            return bad("ring wraps the address space".into());
        }
        let c = cq::Cq::new(d);
        self.cqs.insert("CQ", c)
    }

    pub(crate) fn create_sq(&mut self, d: SqDesc) -> Result<u32> {
        let bad = |m: String| Err(Error::Config(format!("model create_sq: {m}")));
        if !d.wqe_cnt.is_power_of_two() || !(1..=32768).contains(&d.wqe_cnt) {
            return bad(format!(
                "wqe_cnt = {}: must be a power of two up to 32768",
                d.wqe_cnt
            ));
        }
        if d.buf == 0 || !d.buf.is_multiple_of(64) {
            return bad(format!("buf {:#x}: null or not 64-byte aligned", d.buf));
        }
        if d.dbrec == 0 || !d.dbrec.is_multiple_of(4) {
            return bad(format!("dbrec {:#x}: null or not 4-byte aligned", d.dbrec));
        }
        // The doorbell register is what starts the SQ (`sq::Sq::poll_doorbell`): there is no
        // SQ without one.
        if d.uar == 0 || !d.uar.is_multiple_of(8) {
            return bad(format!(
                "uar {:#x}: the SQ's doorbell register must be a non-null, 8-byte aligned address",
                d.uar
            ));
        }
        if d.uar.checked_add(2 * sq::BF_HALF).is_none() {
            return bad("doorbell register wraps the address space".into());
        }
        if d.user_index > 0xff_ffff {
            return bad(format!("user_index {:#x}: over 24 bits", d.user_index));
        }
        if d.buf.checked_add(d.wqe_cnt as usize * 64).is_none() {
            return bad("ring wraps the address space".into());
        }
        let Some(c) = self.cqs.get_mut(d.cqn) else {
            return bad(format!("unknown CQ {:#x}", d.cqn));
        };
        c.users += 1;
        let mut q = sq::Sq::new(d);
        // What the register holds now (another QP's last doorbell, or nothing) is no doorbell
        // of this SQ.
        q.absorb_doorbells();
        self.sqs.insert("SQ", q)
    }

    pub(crate) fn create_rq(&mut self, d: RqDesc) -> Result<u32> {
        let bad = |m: String| Err(Error::Config(format!("model create_rq: {m}")));
        if !d.wqe_cnt.is_power_of_two() || !(1..=32768).contains(&d.wqe_cnt) {
            return bad(format!(
                "wqe_cnt = {}: must be a power of two up to 32768",
                d.wqe_cnt
            ));
        }
        if !d.stride.is_power_of_two() || !(16..=1 << 17).contains(&d.stride) {
            return bad(format!(
                "stride = {}: must be a power of two from 16 to 2^17",
                d.stride
            ));
        }
        if d.buf == 0 || !d.buf.is_multiple_of(16) {
            return bad(format!("buf {:#x}: null or not 16-byte aligned", d.buf));
        }
        if d.dbrec == 0 || !d.dbrec.is_multiple_of(4) {
            return bad(format!("dbrec {:#x}: null or not 4-byte aligned", d.dbrec));
        }
        if d.user_index > 0xff_ffff {
            return bad(format!("user_index {:#x}: over 24 bits", d.user_index));
        }
        if let Some(s) = d.striding {
            if !(1..=16).contains(&s.log_num_strides) || !(6..=13).contains(&s.log_stride_size) {
                return bad(format!(
                    "striding 2^{} strides of 2^{} bytes: need 1..=16 and 6..=13",
                    s.log_num_strides, s.log_stride_size
                ));
            }
            if d.stride < 32 {
                return bad("a striding RQ WQE needs room for its next segment and data".into());
            }
        }
        if d.buf
            .checked_add(d.wqe_cnt as usize * d.stride as usize)
            .is_none()
        {
            return bad("ring wraps the address space".into());
        }
        let Some(c) = self.cqs.get_mut(d.cqn) else {
            return bad(format!("unknown CQ {:#x}", d.cqn));
        };
        c.users += 1;
        self.rqs.insert("RQ", rq::Rq::new(d))
    }

    pub(crate) fn destroy_cq(&mut self, cqn: u32) -> Result<()> {
        match self.cqs.get(cqn) {
            None => Err(Error::Config(format!(
                "model destroy_cq: unknown CQ {cqn:#x}"
            ))),
            Some(c) if c.users > 0 => Err(Error::Config(format!(
                "model destroy_cq: CQ {cqn:#x} is used by {} queue(s); destroy them first",
                c.users
            ))),
            Some(_) => {
                self.cqs.remove(cqn);
                Ok(())
            }
        }
    }

    pub(crate) fn destroy_sq(&mut self, sqn: u32) -> Result<()> {
        let s = self
            .sqs
            .remove(sqn)
            .ok_or_else(|| Error::Config(format!("model destroy_sq: unknown SQ {sqn:#x}")))?;
        if let Some(c) = self.cqs.get_mut(s.d.cqn) {
            c.users -= 1;
        }
        Ok(())
    }

    pub(crate) fn destroy_rq(&mut self, rqn: u32) -> Result<()> {
        if self.rqs.get(rqn).is_none() {
            return Err(Error::Config(format!(
                "model destroy_rq: unknown RQ {rqn:#x}"
            )));
        }
        if self.tirs.iter().any(|(_, t)| t.rqns.contains(&rqn)) {
            return Err(Error::Config(format!(
                "model destroy_rq: RQ {rqn:#x} is in a TIR's table; destroy the TIR first"
            )));
        }
        if let Some(r) = self.rqs.remove(rqn) {
            if let Some(c) = self.cqs.get_mut(r.d.cqn) {
                c.users -= 1;
            }
        }
        Ok(())
    }

    pub(crate) fn set_sq_state(&mut self, sqn: u32, st: QueueState) -> Result<()> {
        let s = self
            .sqs
            .get_mut(sqn)
            .ok_or_else(|| Error::Config(format!("model set_sq_state: unknown SQ {sqn:#x}")))?;
        s.set_state(st)
    }

    pub(crate) fn set_rq_state(&mut self, rqn: u32, st: QueueState) -> Result<()> {
        let r = self
            .rqs
            .get_mut(rqn)
            .ok_or_else(|| Error::Config(format!("model set_rq_state: unknown RQ {rqn:#x}")))?;
        r.set_state(st)
    }

    pub(crate) fn sq_mut(&mut self, sqn: u32) -> Result<&mut sq::Sq> {
        self.sqs
            .get_mut(sqn)
            .ok_or_else(|| Error::Config(format!("model: unknown SQ {sqn:#x}")))
    }

    pub(crate) fn cq_mut(&mut self, cqn: u32) -> Result<&mut cq::Cq> {
        self.cqs
            .get_mut(cqn)
            .ok_or_else(|| Error::Config(format!("model: unknown CQ {cqn:#x}")))
    }

    pub(crate) fn rq_mut(&mut self, rqn: u32) -> Result<&mut rq::Rq> {
        self.rqs
            .get_mut(rqn)
            .ok_or_else(|| Error::Config(format!("model: unknown RQ {rqn:#x}")))
    }

    // ---- the device's work ----

    /// One round of device work; `check_uar`: also check each doorbell's UAR write (stepped
    /// mode, where the driver is not racing the check).
    pub(crate) fn process(&mut self, check_uar: bool) -> usize {
        self.step += 1;
        let mut work = 0;
        for sqn in self.sqs.slots() {
            if let Some(s) = self.sqs.get(sqn) {
                if !s.delayed_is_empty() {
                    work += self.release_delayed(sqn);
                }
                work += self.process_sq(sqn, check_uar);
            }
        }
        work += self.pull_bridge();
        work += self.pull_tap();
        work += self.receive();
        for rqn in self.rqs.slots() {
            work += self.flush_rq(rqn);
        }
        for cqn in self.cqs.slots() {
            if let Some(c) = self.cqs.get(cqn) {
                if !c.pending.is_empty() {
                    work += self.flush_cq(cqn);
                }
                self.check_arm(cqn);
            }
        }
        work
    }

    fn wire_room(&self) -> usize {
        match &self.link {
            Link::Peer(ib) => ib.room(),
            _ => usize::MAX,
        }
    }

    /// Whether the wire's frames are read at all: a sink discards them unseen.
    fn wire_reads(&self) -> bool {
        !matches!(self.link, Link::Sink)
    }

    /// Puts one frame on the wire; false if the wire refused it (counted).
    fn wire_send(&mut self, f: &[u8]) -> bool {
        let ok = match &self.link {
            Link::Sink => true,
            Link::Peer(ib) => ib.push(f),
            Link::Bridge(s) => s.send(f),
        };
        if !ok {
            self.counters.wire_drops += 1;
        }
        ok
    }

    fn pull_bridge(&mut self) -> usize {
        let Link::Bridge(s) = &self.link else {
            return 0;
        };
        let mut n = 0;
        while self.inbox.room() > 0 && s.recv(&mut self.netbuf).is_some() {
            self.inbox.push(&self.netbuf);
            n += 1;
        }
        // The socket's own drops, read when it is empty (so the count is current whenever the
        // device is idle, as at the end of a run) and every 256 busy rounds.
        self.bridge_rounds = self.bridge_rounds.wrapping_add(1);
        if n == 0 || self.bridge_rounds.is_multiple_of(256) {
            self.counters.wire_rx_drops += s.take_drops();
        }
        n
    }

    /// What the kernel sent on the netdev goes out on the wire (bounded per round).
    fn pull_tap(&mut self) -> usize {
        let mut n = 0;
        while n < 64 {
            let Some(tap) = &self.tap else {
                return 0;
            };
            let mut b = std::mem::take(&mut self.netbuf);
            if tap.recv(&mut b).is_none() {
                self.netbuf = b;
                break;
            }
            self.counters.netdev_tx += 1;
            self.wire_send(&b);
            self.netbuf = b;
            n += 1;
        }
        n
    }

    /// A frame no flow took (or a DONT_TRAP copy): to the kernel netdev if there is one.
    fn kernel_gets(&mut self, f: &[u8]) {
        self.counters.rx_to_kernel += 1;
        if let Some(t) = &self.tap {
            t.send(f);
        }
    }
}

/// `addr..addr+len` inside the region `(start, end)` (the check of [`HwState::mr_ok`]).
#[inline(always)]
fn in_range((start, end): (u64, u64), addr: u64, len: u32) -> bool {
    addr >= start && addr.checked_add(len as u64).is_some_and(|e| e <= end)
}

/// Bumps a counter on the device and on one queue.
macro_rules! count {
    ($dev:expr, $q:expr, $field:ident, $n:expr) => {{
        let n = $n;
        $dev.$field += n;
        $q.$field += n;
    }};
}
pub(crate) use count;

/// Copies `out.len()` bytes from device-visible memory at `addr`.
fn read_at(addr: usize, out: &mut [u8]) {
    // SAFETY: `addr..addr+len` lies in a ring or registered region the creator of the object
    // promised valid (the `Hw::create_*` contract) or that `mr_ok` checked; the driver
    // published these bytes with a release store of a doorbell record the model loaded with
    // acquire.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
}

/// Writes `bytes` to device-visible memory at `addr`.
fn write_at(addr: usize, bytes: &[u8]) {
    // SAFETY: as `read_at`; the range belongs to the device until it hands it back with a CQE.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
}

/// Loads a big-endian doorbell word (acquire), host order.
fn load_be32(addr: usize) -> u32 {
    std::ptr::NonNull::new(addr as *mut u32)
        .map(mmio::dbrec_load)
        .unwrap_or(0)
}

/// A deque of CQEs preallocated so a warm queue never grows it.
fn cqe_deque(n: usize) -> VecDeque<[u8; 64]> {
    VecDeque::with_capacity(n.clamp(16, 4096))
}
