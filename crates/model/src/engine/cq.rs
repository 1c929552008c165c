//! Completion queues: writing CQEs (64- or 128-byte slots), CQE compression into title +
//! mini-CQE sessions, overrun, and the arm / completion event.

use super::*;
use crate::wire::{cqe, mini_cqe, Cqe, MiniCqe};
use crate::MiniCqeFormat;

/// The device side of one CQ.
pub(crate) struct Cq {
    pub(crate) d: CqDesc,
    log: u32,
    /// Producer index (slots written).
    pub(crate) pi: u32,
    /// Receive CQEs waiting to be written (so that runs can be compressed).
    pub(crate) pending: VecDeque<[u8; 64]>,
    /// The arm word last seen in `dbrec[1]`.
    arm_word: u32,
    /// Armed: (consumer index at arm time, solicited only).
    armed: Option<(u32, bool)>,
    /// An arm word seen in the record whose UAR doorbell has not been seen yet.
    arm_pending: Option<u32>,
    /// Address of the CQ doorbell register (`MLX5_CQ_DOORBELL` of the CQ's UAR page), 0: not
    /// known yet ([`crate::hw::Hw::set_cq_uar`]).
    pub(crate) uar_db: usize,
    /// An error CQE was written since the arm.
    saw_error: bool,
    /// Overrun: the CQ is in error and takes no more CQEs.
    pub(crate) err: bool,
    /// The CQ context's `oi` (overrun ignore) bit: [`crate::hw::Hw::set_cq_ignore_overrun`].
    pub(crate) ignore_overrun: bool,
    /// SQs and RQs reporting here.
    pub(crate) users: u32,
}

/// `MLX5_CQ_DB_REQ_NOT_SOL` (rdma-core providers/mlx5/mlx5.h): arm for solicited / error CQEs.
const ARM_SOLICITED: u32 = 1 << 24;

impl Cq {
    pub(crate) fn new(d: CqDesc) -> Cq {
        // The device does not write the doorbell record (a real one only reads it; the record
        // may be mapped read-only): the creator leaves ARM_SENTINEL in the arm word, and what
        // is there now is the arm last seen.
        let arm_word = load_be32(d.dbrec.wrapping_add(4));
        Cq {
            d,
            log: d.cqe_cnt.trailing_zeros(),
            pi: 0,
            pending: cqe_deque(d.cqe_cnt as usize),
            arm_word,
            armed: None,
            arm_pending: None,
            uar_db: 0,
            saw_error: false,
            err: false,
            ignore_overrun: false,
            users: 0,
        }
    }

    /// The consumer index the driver published (`dbrec[MLX5_CQ_SET_CI]`, 24 bits: rdma-core
    /// providers/mlx5/cq.c `update_cons_index`).
    fn ci(&self) -> u32 {
        load_be32(self.d.dbrec) & 0xff_ffff
    }

    /// Free slots. The device compares producer and consumer counters only in the bits a CQ
    /// of this size needs, log2(cqe_cnt) + 1 (0..=cqe_cnt entries outstanding), not in all 24
    /// bits of the doorbell-record field: DPDK's mlx5 PMD keeps its transmit CQ's consumer
    /// index in 16 bits (drivers/net/mlx5/mlx5_tx.h `struct mlx5_txq_data`: `uint16_t cq_ci`)
    /// and writes it as is to the record (mlx5_tx.c `mlx5_tx_handle_completion`), on a CQ
    /// created without IGNORE_OVERRUN (linux/mlx5_verbs.c `mlx5_txq_ibv_obj_new`), and runs
    /// past 2^16 completions on every ConnectX.
    pub(crate) fn space(&self) -> u32 {
        // Overrun ignored: every CQE due is written (over unread ones on a full CQ).
        if self.ignore_overrun {
            return self.d.cqe_cnt;
        }
        let used = self.pi.wrapping_sub(self.ci()) & self.counter_mask();
        self.d.cqe_cnt.saturating_sub(used)
    }

    /// The counter bits the device compares (see [`Cq::space`]).
    fn counter_mask(&self) -> u32 {
        (self.d.cqe_cnt << 1).wrapping_sub(1) & 0xff_ffff
    }

    /// Slots from the producer index to the end of the ring.
    fn to_ring_end(&self) -> u32 {
        self.d.cqe_cnt - (self.pi & (self.d.cqe_cnt - 1))
    }

    /// Address of the 64-byte CQE of slot `i`: with 128-byte CQEs it is the second half of the
    /// slot (rdma-core providers/mlx5/cq.c `get_sw_cqe`: `cqe64 = (cqe_sz == 64) ? cqe : cqe + 64`).
    fn cqe64(&self, i: u32) -> usize {
        let sz = self.d.cqe_size as usize;
        self.d.buf + ((i & (self.d.cqe_cnt - 1)) as usize) * sz + (sz - 64)
    }

    /// Writes the raw 64 bytes of slot `pi + k` (mini-CQE arrays carry no ownership byte).
    fn write_raw(&self, k: u32, bytes: &[u8; 64]) {
        write_at(self.cqe64(self.pi.wrapping_add(k)), bytes);
    }

    /// Writes a CQE at the producer index: bytes 0..63 first, then `op_own` with the owner bit
    /// of this pass (PRM: owner = bit log2(cqe_cnt) of the index; rdma-core cq.c
    /// `get_sw_cqe` checks it against `cons_index & cqe_cnt`) with release ordering; advances
    /// by `slots` (a compressed session's title covers all its slots).
    fn write(&mut self, c: &[u8; 64], opcode: u8, format: u8, slots: u32) {
        let at = self.cqe64(self.pi);
        write_at(at, &c[..63]);
        let owner = ((self.pi >> self.log) & 1) as u8;
        // SAFETY: the `op_own` byte of a slot inside the ring (create_cq contract).
        unsafe { mmio::op_own_store((at + 63) as *mut u8, cqe::op_own(opcode, format, owner)) };
        self.pi = self.pi.wrapping_add(slots);
    }
}

/// Puts the device clock `ticks` into CQE `b` if it is a successful completion: mlx5dv.h
/// `struct mlx5_cqe64` has `timestamp` at bytes 48..56, but an error CQE (`struct
/// mlx5_err_cqe`, opcodes REQ_ERR / RESP_ERR) has `vendor_err_synd` and `syndrome` at bytes 54
/// and 55, which libmlx5 reads (rdma-core providers/mlx5/cq.c `mlx5_handle_error_cqe`): they
/// carry no timestamp.
fn stamp(b: &mut [u8; 64], ticks: u64) {
    let op = b[cqe::field::OP_OWN] >> 4;
    if op != cqe::OP_REQ_ERR && op != cqe::OP_RESP_ERR {
        Cqe::new_unchecked(&mut b[..]).set_timestamp(ticks);
    }
}

impl HwState {
    /// Writes one CQE now (send completions, errors, flushes). On a full CQ the CQ overruns.
    pub(super) fn post_cqe(&mut self, cqn: u32, b: &mut [u8; 64]) -> bool {
        let ts = self.opts.clock_khz > 0;
        let ticks = if ts { self.clock_ticks() } else { 0 };
        let Some(c) = self.cqs.get_mut(cqn) else {
            return false;
        };
        if c.err {
            return false;
        }
        if c.space() == 0 {
            self.overrun(cqn);
            return false;
        }
        if ts {
            stamp(b, ticks);
        }
        let op = b[63] >> 4;
        if op == cqe::OP_REQ_ERR || op == cqe::OP_RESP_ERR {
            c.saw_error = true;
        }
        c.write(b, op, 0, 1);
        true
    }

    /// Queues a receive CQE (written, maybe compressed, by `flush_cq`).
    pub(super) fn push_rx_cqe(&mut self, cqn: u32, mut b: [u8; 64]) {
        if self.opts.clock_khz > 0 {
            let t = self.clock_ticks();
            stamp(&mut b, t);
        }
        if let Some(c) = self.cqs.get_mut(cqn) {
            c.pending.push_back(b);
        }
    }

    /// Free slots of `cqn` beyond its pending CQEs (pending ones are flushed first if needed).
    pub(super) fn rx_cq_room(&mut self, cqn: u32, need: usize) -> bool {
        let ok = |c: &Cq| !c.err && c.space() as usize >= c.pending.len() + need;
        match self.cqs.get(cqn) {
            Some(c) if ok(c) => return true,
            None => return false,
            _ => {}
        }
        self.flush_cq(cqn);
        self.cqs.get(cqn).is_some_and(ok)
    }

    /// CQ overrun: a CQE was due and the CQ was full. The hardware raises a CQ error event
    /// with syndrome 1 (overrun) and the CQ takes no more CQEs (Linux
    /// drivers/net/ethernet/mellanox/mlx5/core/eq.c `cq_err_event_notifier` handles
    /// MLX5_EVENT_TYPE_CQ_ERROR, "CQ error on CQN ..., syndrome 0x1" in overrun reports; mlx5_ib
    /// turns it into IB_EVENT_CQ_ERR, drivers/infiniband/hw/mlx5/cq.c `mlx5_ib_cq_event`). The
    /// queues that report to it can no longer complete: the model moves them to error (issue
    /// 11: "CQ error, queue dead"), so a driver that oversubscribes a CQ fails loudly.
    pub(super) fn overrun(&mut self, cqn: u32) {
        let Some(c) = self.cqs.get_mut(cqn) else {
            return;
        };
        if c.err {
            return;
        }
        c.err = true;
        c.pending.clear();
        self.counters.cq_overruns += 1;
        self.events.push(HwEvent::CqError { cqn });
        for n in self.sqs.slots() {
            if let Some(s) = self.sqs.get_mut(n) {
                if s.d.cqn == cqn {
                    s.state = QueueState::Error;
                }
            }
        }
        for n in self.rqs.slots() {
            if let Some(r) = self.rqs.get_mut(n) {
                if r.d.cqn == cqn {
                    r.state = QueueState::Error;
                }
            }
        }
    }

    /// Writes the pending receive CQEs of `cqn`, compressing runs when configured.
    pub(super) fn flush_cq(&mut self, cqn: u32) -> usize {
        let mut n = 0;
        let mut overrun = false;
        let Some(c) = self.cqs.get_mut(cqn) else {
            return 0;
        };
        let fmt = c.d.compression;
        while let Some(first) = c.pending.front().copied() {
            let space = c.space() as usize;
            if let Some(fmt) = fmt {
                // A session never crosses the end of the ring: DPDK's vectorized receive (the
                // mlx5 PMD's default, drivers/net/mlx5/mlx5_rxtx_vec_sse.h
                // `rxq_cq_decompress_v`) walks the session's slots and mbufs from the title
                // without masking the index, where `rxq_burst_v` (mlx5_rxtx_vec.c) bounds
                // plain CQEs by the ring end ("Not to cross queue end").
                let room = space.min(c.to_ring_end() as usize);
                let mut run = 1;
                while run < c.pending.len()
                    && run < 64
                    && run < room
                    && compressible(fmt, &first, &c.pending[run], run)
                {
                    run += 1;
                }
                if run >= 2 {
                    write_session(c, fmt, run);
                    self.counters.compressed_sessions += 1;
                    self.counters.mini_cqes += run as u64;
                    n += run;
                    continue;
                }
            }
            if space == 0 {
                overrun = true;
                break;
            }
            c.pending.pop_front();
            let op = first[63] >> 4;
            if op == cqe::OP_RESP_ERR {
                c.saw_error = true;
            }
            c.write(&first, op, 0, 1);
            n += 1;
        }
        if overrun {
            self.overrun(cqn);
        }
        n
    }

    /// Arm and completion event. `mlx5_arm_cq` (rdma-core providers/mlx5/cq.c) writes
    /// `sn << 28 | cmd | ci` to `dbrec[MLX5_CQ_ARM_DB]`, then, after a write barrier, the same
    /// word with the cqn as one 64-bit big-endian write to the CQ doorbell of the UAR
    /// (`MLX5_CQ_DOORBELL`, 0x20: Linux include/linux/mlx5/doorbell.h; DPDK does the same in
    /// drivers/net/mlx5/mlx5_rxq.c `mlx5_arm_cq`, and the kernel's own mlx5 driver,
    /// include/linux/mlx5/cq.h `mlx5_cq_arm`, record first, then the UAR doorbell). The
    /// device acts on the doorbell, which it reads together with the record: the record alone
    /// arms nothing. `mlx5_cq_event` bumps `sn` once the event is read, so each new arm is a new
    /// word. The device raises one completion event once a CQE exists past the armed consumer
    /// index (PRM "CQ arming"), then the arm is spent. A solicited-only arm fires only for
    /// solicited or error CQEs (raw Ethernet CQEs are never solicited).
    ///
    /// The UAR is memory here, not a register: it holds the last doorbell written to it. Two
    /// CQs of one UAR page armed within one device round leave only the later doorbell; the
    /// earlier CQ's arm is then taken when the register names another CQ (what a real device
    /// would have seen in between), so that no arm is lost.
    pub(super) fn check_arm(&mut self, cqn: u32) {
        let Some(c) = self.cqs.get_mut(cqn) else {
            return;
        };
        let w = load_be32(c.d.dbrec + 4);
        if w != c.arm_word {
            c.arm_word = w;
            c.arm_pending = Some(w);
        }
        if let (Some(w), true) = (c.arm_pending, c.uar_db != 0) {
            let mut b = [0u8; 8];
            read_at(c.uar_db, &mut b);
            let hi = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let lo = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) & 0xff_ffff;
            let mine = lo == cqn;
            if (mine && hi == w) || (!mine && self.uar_rung_by_other(cqn)) {
                let Some(c) = self.cqs.get_mut(cqn) else {
                    return;
                };
                c.arm_pending = None;
                c.armed = Some((w & 0xff_ffff, w & ARM_SOLICITED != 0));
                c.saw_error = false;
            }
        }
        let Some(c) = self.cqs.get_mut(cqn) else {
            return;
        };
        if let Some((ci, sol)) = c.armed {
            let past = c.pi.wrapping_sub(ci) & c.counter_mask() != 0;
            if past && (!sol || c.saw_error) {
                c.armed = None;
                self.events.push(HwEvent::Completion { cqn });
            }
        }
    }

    /// Whether the doorbell register of `cqn`'s UAR holds another CQ's arm of the same
    /// context written after `cqn`'s record (see [`HwState::check_arm`]): another CQ on the
    /// same register has an arm pending or just taken with exactly that word.
    fn uar_rung_by_other(&self, cqn: u32) -> bool {
        let Some(c) = self.cqs.get(cqn) else {
            return false;
        };
        let mut b = [0u8; 8];
        read_at(c.uar_db, &mut b);
        let hi = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let lo = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) & 0xff_ffff;
        self.cqs.get(lo).is_some_and(|o| {
            o.uar_db == c.uar_db && o.arm_word == hi && lo != cqn && o.arm_word != ARM_SENTINEL
        })
    }
}

/// Bytes that a session's mini-CQEs carry (or that are per-entry) and so need not agree. With
/// the checksum/stride-index format the mini-CQE has no hash, and the hardware compresses across
/// different hashes (Linux drivers/net/ethernet/mellanox/mlx5/core/en_rx.c
/// `mlx5e_decompress_cqe_no_hash` reports the hash of such CQEs as unknown).
fn masked(fmt: MiniCqeFormat, b: &[u8; 64]) -> [u8; 64] {
    let mut x = *b;
    let zero = |x: &mut [u8; 64], r: std::ops::Range<usize>| x[r].fill(0);
    match fmt {
        MiniCqeFormat::Hash => zero(&mut x, cqe::field::RSS_HASH_RESULT),
        MiniCqeFormat::CsumStrideIdx => {
            zero(&mut x, cqe::field::CHECK_SUM);
            zero(&mut x, cqe::field::RSS_HASH_RESULT);
        }
    }
    zero(&mut x, cqe::field::BYTE_CNT);
    zero(&mut x, cqe::field::WQE_COUNTER);
    zero(&mut x, cqe::field::TIMESTAMP);
    x[63] = 0;
    x
}

/// May `c` join the session that `first` opens, as entry `k`? (DPDK drivers/net/mlx5/mlx5_rx.c
/// `rxq_cq_decompress_v` / `mlx5_rx_poll_len`: the title's fields hold for every entry but those
/// the mini-CQE carries; cyclic entries complete consecutive WQEs.)
fn compressible(fmt: MiniCqeFormat, first: &[u8; 64], c: &[u8; 64], k: usize) -> bool {
    let (a, b) = (Cqe::new_unchecked(first), Cqe::new_unchecked(c));
    if a.opcode() != cqe::OP_RESP_SEND || b.opcode() != cqe::OP_RESP_SEND {
        return false;
    }
    let striding = fmt == MiniCqeFormat::CsumStrideIdx;
    if striding && (cqe::mprq_decode(a.byte_cnt()).2 || cqe::mprq_decode(b.byte_cnt()).2) {
        return false;
    }
    if !striding && b.wqe_counter() != a.wqe_counter().wrapping_add(k as u16) {
        return false;
    }
    masked(fmt, first) == masked(fmt, c)
}

/// Writes a compressed session of the first `n` pending CQEs: mini-CQE arrays at CI+1, CI+8,
/// CI+16, … then the title at CI (DPDK mlx5_rx.c `mlx5_rx_poll_len` zip handling; VPP
/// src/plugins/rdma/input.c `rdma_device_mlx5dv_...` walk: array k at `cq_ci + 8k`, the first
/// one right after the title).
fn write_session(c: &mut Cq, fmt: MiniCqeFormat, n: usize) {
    let mut k = 0;
    while k * mini_cqe::PER_SLOT < n {
        let mut arr = [0u8; 64];
        let lo = k * mini_cqe::PER_SLOT;
        let hi = (lo + mini_cqe::PER_SLOT).min(n);
        for (j, it) in c.pending.range(lo..hi).enumerate() {
            let e = Cqe::new_unchecked(it);
            let mut mc = MiniCqe::new_unchecked(&mut arr[j * 8..j * 8 + 8]);
            match fmt {
                MiniCqeFormat::Hash => mc.set_rx_hash_result(e.rss_hash_result()),
                MiniCqeFormat::CsumStrideIdx => {
                    mc.set_checksum(e.check_sum());
                    mc.set_stridx(e.wqe_counter());
                }
            }
            mc.set_byte_cnt(e.byte_cnt());
        }
        let slot = if k == 0 { 1 } else { 8 * k as u32 };
        c.write_raw(slot, &arr);
        k += 1;
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    let mut title = c.pending[0];
    c.pending.drain(..n);
    Cqe::new_unchecked(&mut title).set_byte_cnt(n as u32);
    c.write(&title, cqe::OP_RESP_SEND, cqe::FORMAT_COMPRESSED, n as u32);
}
