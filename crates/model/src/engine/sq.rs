//! The device's send side: consume WQEs up to the doorbell record, check them as the hardware
//! would, put frames on the wire, and write (requested or error) send CQEs.
//!
//! The WQE parsing itself is in `sq_wqe.rs`.

use super::sq_wqe::{Fail, ZERO_LENGTH};
use super::*;
use crate::net;
use crate::wire::{cqe, ctrl, eth, Cqe, CtrlSeg};

/// The device side of one SQ.
pub(crate) struct Sq {
    pub(crate) d: SqDesc,
    pub(crate) state: QueueState,
    /// Protection domain: the data segments' keys must be of it.
    pub(crate) pd: u32,
    ci: u16,
    /// The producer counter the last doorbell gave (the record read when the UAR write was
    /// seen): WQEs up to it are the device's to process.
    db_pi: u16,
    /// The two halves of the doorbell register as last seen.
    bf_seen: [u64; 2],
    faults: VecDeque<(u64, u8)>,
    seq: u64,
    delay: u64,
    delayed: VecDeque<(u64, [u8; 64])>,
    /// The WQE counter after the last WQE the device carried out (its frames went to the
    /// wire): every WQE before it was sent, none from it on (a failed or flushed WQE does not
    /// move it). What a stop reports (`Hw::stop_sq`).
    sent_to: u16,
    /// At most this many WQEs per round (0: no limit): a slow device, for tests.
    per_round: u32,
    pub(crate) ctr: ModelCounters,
}

impl Sq {
    pub(crate) fn new(d: SqDesc) -> Sq {
        Sq {
            d,
            state: QueueState::Reset,
            pd: 0,
            ci: 0,
            db_pi: 0,
            bf_seen: [0; 2],
            faults: VecDeque::new(),
            seq: 0,
            delay: 0,
            delayed: VecDeque::with_capacity((d.wqe_cnt as usize).clamp(16, 4096)),
            sent_to: 0,
            per_round: 0,
            ctr: ModelCounters::default(),
        }
    }

    /// `ibv_modify_qp` as the SQ sees it (PRM SQ states RST → RDY → ERR → RST; Linux
    /// drivers/infiniband/hw/mlx5/qp.c `modify_raw_packet_qp_sq`). Reset forgets the ring
    /// position and this queue's counters.
    pub(crate) fn set_state(&mut self, st: QueueState) -> Result<()> {
        if self.state == QueueState::Error && st == QueueState::Ready {
            return Err(Error::Config(
                "model: an SQ in error must be reset before it is ready again (ERR -> RST -> RDY)"
                    .into(),
            ));
        }
        if st == QueueState::Reset {
            self.ci = 0;
            self.db_pi = 0;
            self.sent_to = 0;
            self.delayed.clear();
            self.delay = 0;
            self.ctr = ModelCounters::default();
        }
        self.state = st;
        Ok(())
    }

    pub(crate) fn inject_fault(&mut self, nth: u64, syndrome: u8) {
        self.faults.push_back((self.seq + nth, syndrome));
    }

    pub(crate) fn set_delay(&mut self, steps: u64) {
        self.delay = steps;
    }

    pub(crate) fn set_per_round(&mut self, wqes: u32) {
        self.per_round = wqes;
    }

    /// The WQE counter after the last WQE carried out (the field `sent_to`).
    pub(crate) fn sent_to(&self) -> u16 {
        self.sent_to
    }

    pub(super) fn delayed_is_empty(&self) -> bool {
        self.delayed.is_empty()
    }

    /// Reads the doorbell register's two halves (the address the driver writes alternates
    /// between them: rdma-core qp.c `post_send_db`, `bf->offset ^= bf->buf_size`; DPDK and rawq
    /// write one of them), remembering what it saw.
    fn read_register(&mut self) -> [u64; 2] {
        let h = BF_HALF;
        let now = [
            std::ptr::NonNull::new(self.d.uar as *mut u64).map_or(0, mmio::uar_load),
            std::ptr::NonNull::new((self.d.uar + h) as *mut u64).map_or(0, mmio::uar_load),
        ];
        std::mem::replace(&mut self.bf_seen, now)
    }

    /// Takes note of the register's current contents without acting on them (at creation,
    /// and while the SQ is in reset, where the hardware does not process doorbells).
    pub(crate) fn absorb_doorbells(&mut self) {
        self.read_register();
    }

    /// The device's side of the send doorbell: a UAR write naming this SQ starts processing.
    /// The doorbell is the first 8 bytes of the last WQE's control segment (rdma-core qp.c
    /// `post_send_db`, DPDK mlx5_tx.h `mlx5_tx_dbrec_cond_wmb`): `opmod_idx_opcode` then
    /// `qpn_ds`, whose upper 24 bits name the QP; the producer counter is the doorbell
    /// record's (`qp->db[MLX5_SND_DBR] = htobe32(cur_post & 0xffff)`, written before the UAR),
    /// read when the write is seen. A record advanced without a UAR write starts nothing.
    /// Returns whether this SQ was rung, and the QPN of a new value naming another QP.
    ///
    /// The register is memory the model polls, so a doorbell that writes the bytes already
    /// there is no change: after a reset the WQE indices start again at 0 (libmlx5
    /// `mlx5_init_qp_indices`), and the same WQEs give the same first 8 bytes. A value naming
    /// this SQ whose WQE index is one of the WQEs the record says were posted since the last
    /// one processed is therefore a doorbell too (a stale value names a WQE already done).
    ///
    /// Limit: the register is memory the model polls, not a trapped MMIO write: two doorbells
    /// of different QPs sharing one register between two polls leave only the second (the
    /// emulator gives each QP its own register while the context has free ones, as the
    /// kernel's `alloc_bfreg` does).
    pub(crate) fn poll_doorbell(&mut self, sqn: u32) -> (bool, Option<u32>) {
        let before = self.read_register();
        let mut rung = false;
        let mut other = None;
        for (old, new) in before.into_iter().zip(self.bf_seen) {
            if old == new {
                continue;
            }
            let q = doorbell_qpn(new);
            if q == sqn {
                rung = true;
            } else {
                other = Some(q);
            }
        }
        let pi = load_be32(self.d.dbrec) as u16;
        if !rung && pi != self.db_pi {
            let posted = pi.wrapping_sub(self.ci);
            rung = self
                .bf_seen
                .iter()
                .any(|&v| doorbell_qpn(v) == sqn && doorbell_wqe(v).wrapping_sub(self.ci) < posted);
        }
        if rung {
            self.db_pi = pi;
        }
        (rung, other)
    }

    pub(super) fn bb(&self, i: u32) -> usize {
        self.d.buf + ((i & (self.d.wqe_cnt - 1)) as usize) * 64
    }
}

/// Bytes from one half of a doorbell register to the other (`bf_reg_size / 2`: rdma-core
/// providers/mlx5/mlx5.c `mlx5_init_context`, `bfs[i].buf_size = bf_reg_size / 2`, with the
/// kernel's `bf_reg_size` of 512, Linux drivers/infiniband/hw/mlx5/main.c
/// `mlx5_ib_alloc_ucontext`: `1 << MLX5_CAP_GEN(log_bf_reg_size)`).
pub(crate) const BF_HALF: usize = crate::mem::BF_SIZE as usize;

/// The QPN a doorbell names: the upper 24 bits of `qpn_ds`, the second big-endian word of the
/// control segment's first 8 bytes (mlx5dv.h `struct mlx5_wqe_ctrl_seg`).
pub(crate) fn doorbell_qpn(raw: u64) -> u32 {
    let b = raw.to_ne_bytes();
    u32::from_be_bytes([b[4], b[5], b[6], b[7]]) >> 8
}

/// The WQE index a doorbell names: bits 8..23 of `opmod_idx_opcode`, the first big-endian word
/// of the control segment (mlx5dv.h `struct mlx5_wqe_ctrl_seg`, `mlx5dv_set_ctrl_seg`).
fn doorbell_wqe(raw: u64) -> u16 {
    let b = raw.to_ne_bytes();
    (u32::from_be_bytes([b[0], b[1], b[2], b[3]]) >> 8) as u16
}

impl HwState {
    pub(super) fn release_delayed(&mut self, sqn: u32) -> usize {
        let step = self.step;
        let mut n = 0;
        loop {
            let Some(s) = self.sqs.get_mut(sqn) else {
                return n;
            };
            let Some(&(due, mut c)) = s.delayed.front() else {
                break;
            };
            if due > step {
                break;
            }
            s.delayed.pop_front();
            let cqn = s.d.cqn;
            self.post_cqe(cqn, &mut c);
            n += 1;
        }
        n
    }

    pub(super) fn process_sq(&mut self, sqn: u32, check_uar: bool) -> usize {
        // Nothing posted (the common poll while the device keeps up): done before touching
        // the scratch. (Nothing done leaves nothing for the UAR check either.)
        let (other, idle) = match self.sqs.get_mut(sqn) {
            None => return 0,
            Some(s) if s.state == QueueState::Reset => {
                s.absorb_doorbells();
                return 0;
            }
            Some(s) => {
                let (_, other) = s.poll_doorbell(sqn);
                (other, s.db_pi == s.ci)
            }
        };
        if check_uar {
            self.check_stray_doorbell(sqn, other);
        }
        if idle {
            return 0;
        }
        // The scratch comes out once per call (the placeholder left behind allocates nothing)
        // and goes back on every exit.
        let mut tx = std::mem::take(&mut self.tx);
        let work = self.process_sq_with(sqn, check_uar, &mut tx);
        self.tx = tx;
        work
    }

    fn process_sq_with(&mut self, sqn: u32, check_uar: bool, tx: &mut TxScratch) -> usize {
        let mut work = 0;
        let mut last_start = None;
        let mut last_db;
        loop {
            let Some(s) = self.sqs.get_mut(sqn) else {
                return work;
            };
            if s.state == QueueState::Reset {
                return work;
            }
            if s.per_round > 0 && work >= s.per_round as usize {
                // A slow device (`Hw::limit_tx_per_round`): the rest waits for later rounds
                // (the UAR check waits for the round that reaches the doorbell's WQE).
                last_db = s.db_pi;
                break;
            }
            let ci = s.ci;
            // Every WQE up to the last doorbell done: look at the register again (a doorbell
            // that came meanwhile moves the limit; the record is read only then, so that the
            // line the driver writes is not pulled over for each WQE).
            if s.db_pi == ci {
                let (rung, other) = s.poll_doorbell(sqn);
                if check_uar {
                    self.check_stray_doorbell(sqn, other);
                }
                if !rung {
                    last_db = ci;
                    break;
                }
            }
            let Some(s) = self.sqs.get(sqn) else {
                return work;
            };
            let pi = s.db_pi;
            last_db = pi;
            let avail = pi.wrapping_sub(ci) as u32;
            if avail == 0 || avail > s.d.wqe_cnt {
                break;
            }
            let mut c = [0u8; 16];
            read_at(s.bb(ci as u32), &mut c);
            let cs = CtrlSeg::new_unchecked(&c);
            if s.state == QueueState::Error {
                // An SQ in error completes every posted WQE with WR_FLUSH_ERR (PRM; DPDK
                // drivers/net/mlx5/mlx5_tx.c `mlx5_tx_error_cqe_handle` expects them).
                let bbs = ((cs.ds() & ctrl::DS_MASK) as u32)
                    .div_ceil(4)
                    .clamp(1, avail);
                if !self.tx_cqe(
                    sqn,
                    cqe::OP_REQ_ERR,
                    ci,
                    cs.opcode(),
                    cqe::SYND_WR_FLUSH_ERR,
                    false,
                ) {
                    break;
                }
                let Some(s) = self.sqs.get_mut(sqn) else {
                    return work;
                };
                s.ci = ci.wrapping_add(bbs as u16);
                count!(self.counters, s.ctr, tx_flushed, 1);
                work += 1;
                continue;
            }
            let res = self.parse_wqe(sqn, ci, avail, tx);
            let Some(s) = self.sqs.get_mut(sqn) else {
                return work;
            };
            let fault = match s.faults.front() {
                Some(&(at, syn)) if at == s.seq => {
                    s.faults.pop_front();
                    Some(syn)
                }
                _ => None,
            };
            match (res, fault) {
                (Ok(p), None) => {
                    if self.opts.flow_control && tx.nframes as usize > self.wire_room() {
                        // Lossless link: the port is paused, the WQE waits for room.
                        break;
                    }
                    let Some(s) = self.sqs.get_mut(sqn) else {
                        return work;
                    };
                    s.ci = ci.wrapping_add(p.bbs as u16);
                    s.sent_to = s.ci;
                    s.seq += 1;
                    count!(self.counters, s.ctr, tx_wqes, 1);
                    last_start = Some(ci);
                    self.transmit(sqn, tx);
                    // CQ update requested (fm_ce_se CE bits: rdma-core qp.c sets
                    // MLX5_WQE_CTRL_CQ_UPDATE for signaled WRs).
                    let want = p.ce == ctrl::CQ_UPDATE || p.ce == ctrl::CQ_UPDATE_AND_EQE;
                    if want && self.tx_cqe(sqn, cqe::OP_REQ, ci, p.opcode, 0, true) {
                        if let Some(s) = self.sqs.get_mut(sqn) {
                            count!(self.counters, s.ctr, tx_cqes, 1);
                        }
                    }
                }
                (res, fault) => {
                    let (synd, bbs) = match (res, fault) {
                        (Ok(p), Some(syn)) => (syn, p.bbs),
                        (Err((Fail(syn), bbs)), _) => (syn, bbs),
                        (Ok(p), None) => (0, p.bbs),
                    };
                    let Some(s) = self.sqs.get_mut(sqn) else {
                        return work;
                    };
                    // The flag marks a refused zero-length data segment (counted apart).
                    let synd = if synd & ZERO_LENGTH != 0 {
                        count!(self.counters, s.ctr, tx_zero_length_segs, 1);
                        synd & !ZERO_LENGTH
                    } else {
                        synd
                    };
                    s.ci = ci.wrapping_add(bbs as u16);
                    s.seq += 1;
                    // A send error moves the SQ to error (PRM; DPDK mlx5_tx.c
                    // `mlx5_tx_error_cqe_handle` then resets it through RST -> RDY).
                    s.state = QueueState::Error;
                    count!(self.counters, s.ctr, tx_error_cqes, 1);
                    self.tx_cqe(sqn, cqe::OP_REQ_ERR, ci, cs.opcode(), synd, false);
                    last_start = None;
                }
            }
            work += 1;
        }
        if check_uar {
            self.check_uar(sqn, last_start, last_db);
        }
        work
    }

    /// Stepped mode: a new register value naming no SQ that shares the register is a doorbell
    /// the device cannot attribute (counted as a mismatch).
    fn check_stray_doorbell(&mut self, sqn: u32, other: Option<u32>) {
        let Some(q) = other else { return };
        let uar = self.sqs.get(sqn).map_or(0, |s| s.d.uar);
        if self.sqs.get(q).is_none_or(|o| o.d.uar != uar) {
            self.counters.doorbell_mismatch += 1;
        }
    }

    /// Stepped mode: the UAR's BlueFlame register must hold the last WQE's first 8 bytes
    /// (rdma-core qp.c `post_send_db` writes the control segment's first 8 bytes to
    /// `bf->reg + bf->offset`, alternating halves).
    fn check_uar(&mut self, sqn: u32, last_start: Option<u16>, db: u16) {
        let Some(s) = self.sqs.get(sqn) else {
            return;
        };
        let (Some(start), true) = (last_start, s.d.uar != 0 && s.ci == db) else {
            return;
        };
        let mut w = [0u8; 8];
        read_at(s.bb(start as u32), &mut w);
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        read_at(s.d.uar, &mut a);
        read_at(s.d.uar + BF_HALF, &mut b);
        if a != w && b != w {
            self.counters.doorbell_mismatch += 1;
        }
    }

    /// Puts the frames of the WQE just parsed on the wire. Their bytes are read from the
    /// registered memory (and their checksums filled) only when something downstream can see
    /// them: a sink wire discards them unread, which nothing can tell apart from reading them
    /// (the WQE was checked in full all the same: keys, addresses and lengths, in
    /// `parse_wqe`; frames and bytes are counted). A peer's inbox takes the WQE's frames under
    /// one lock.
    fn transmit(&mut self, sqn: u32, tx: &mut TxScratch) {
        let (frames, bytes) = (tx.nframes as u64, tx.nbytes);
        if let Some(s) = self.sqs.get_mut(sqn) {
            count!(self.counters, s.ctr, tx_frames, frames);
            count!(self.counters, s.ctr, tx_bytes, bytes);
        }
        let TxScratch {
            wqe,
            pieces,
            frames,
            bytes,
            ..
        } = tx;
        let mut drops = 0;
        match &self.link {
            Link::Sink => {}
            Link::Peer(ib) => {
                let mut q = ib.lock();
                for f in frames.iter() {
                    if !q.push_with(ib, on_wire(f.len), |out| write_frame(wqe, pieces, f, out)) {
                        drops += 1;
                    }
                }
            }
            Link::Bridge(sock) => {
                for f in frames.iter() {
                    bytes.clear();
                    bytes.resize(on_wire(f.len), 0);
                    write_frame(wqe, pieces, f, bytes);
                    if !sock.send(bytes) {
                        drops += 1;
                    }
                }
            }
        }
        self.counters.wire_drops += drops;
    }

    /// Writes (or holds back) a send CQE: `wqe_counter` = the WQE's index, `sop_drop_qpn` =
    /// opcode << 24 | sqn, `srqn_uidx` = the user index (rdma-core cq.c `mlx5_parse_cqe` finds
    /// the QP by it with cqe_version 1, `get_cur_rsc` -> `mlx5_find_uidx`). False if the
    /// CQ could not take it (overrun).
    fn tx_cqe(
        &mut self,
        sqn: u32,
        op: u8,
        wqe: u16,
        wqe_opcode: u8,
        synd: u8,
        may_delay: bool,
    ) -> bool {
        let step = self.step;
        let Some(s) = self.sqs.get_mut(sqn) else {
            return false;
        };
        let mut b = [0u8; 64];
        {
            let mut c = Cqe::new_unchecked(&mut b[..]);
            c.set_wqe_counter(wqe);
            c.set_sop_drop_qpn((wqe_opcode as u32) << 24 | (sqn & 0xff_ffff));
            c.set_srqn_uidx(s.d.user_index & 0xff_ffff);
            if op == cqe::OP_REQ_ERR {
                c.set_syndrome(0, synd);
            }
            c.set_op_own(op << 4);
        }
        if may_delay && (s.delay > 0 || !s.delayed.is_empty()) {
            s.delayed.push_back((step + s.delay, b));
            return true;
        }
        let cqn = s.d.cqn;
        self.post_cqe(cqn, &mut b)
    }
}

/// Writes frame `f` (its pieces, from the WQE copy `wqe` or registered memory) into `out`
/// (`f.len` bytes), then fills the checksums its WQE asked for.
/// The Ethernet minimum frame without FCS (ETH_ZLEN).
const ETH_ZLEN: usize = 60;

/// Bytes a frame of `len` takes on the wire: the MAC pads a shorter one with zeros to 60 bytes
/// (64 with the FCS). Linux mlx5e relies on it: drivers/net/ethernet/mellanox/mlx5/core/
/// en_rx.c `mlx5e_handle_csum` treats received frames of at most ETH_ZLEN + ETH_FCS_LEN bytes
/// as padded ones, whose checksum does not cover the pad.
fn on_wire(len: u32) -> usize {
    (len as usize).max(ETH_ZLEN)
}

/// Writes frame `f` into `out` (`on_wire(f.len)` bytes: the pad after the frame is zeros).
fn write_frame(wqe: &[u8], pieces: &[Piece], f: &TxFrame, out: &mut [u8]) {
    let mut o = 0;
    let first = f.first as usize;
    for p in &pieces[first..first + f.pieces as usize] {
        match *p {
            Piece::Wqe { at, len } => {
                out[o..o + len].copy_from_slice(&wqe[at..at + len]);
                o += len;
            }
            Piece::Tag { tci } => {
                out[o..o + 2].copy_from_slice(&0x8100u16.to_be_bytes());
                out[o + 2..o + 4].copy_from_slice(&tci.to_be_bytes());
                o += 4;
            }
            Piece::Mem { addr, len } => {
                // `parse_wqe` checked `addr..addr+len` against the registration (mr_ok).
                read_at(addr as usize, &mut out[o..o + len as usize]);
                o += len as usize;
            }
        }
    }
    out[o..].fill(0);
    if let Some((h, index, off, last)) = &f.tso {
        // Headers of the segment, checksums included (tso.rs).
        super::tso::fixup(&mut out[..o], h, *index, *off, *last);
    } else if f.cs != 0 {
        net::fill_checksums(
            &mut out[..o],
            f.cs & eth::L3_CSUM != 0,
            f.cs & eth::L4_CSUM != 0,
        );
    }
}
