//! The device's send side: consume WQEs up to the doorbell record, check them as the hardware
//! would, put frames on the wire, and write (requested or error) send CQEs.
//!
//! WQEs are parsed as both rawq and libmlx5 write them: rdma-core providers/mlx5/qp.c
//! `_mlx5_post_send` for IBV_QPT_RAW_PACKET lays out the control segment, the Ethernet segment
//! (`copy_eth_inline_headers`: `inline_hdr_sz` = the device's `eth_min_inline_size`, 0 or 18,
//! the header bytes from `inline_hdr_start`, the segment then `(16 + inl_hdr_size) & ~15`
//! bytes long), then either one inline segment (`set_data_inl_seg`: byte count |
//! `MLX5_INLINE_SEG` 0x80000000, data following, wrapping at the end of the ring) or data
//! segments (`set_data_ptr_seg`, zero-length entries skipped, the first one past the bytes
//! already inlined), with the DS count in `qpn_ds`.

use super::*;
use crate::dv::model::net;
use crate::dv::wire::{cqe, ctrl, data, eth, inline, Cqe, CtrlSeg, DataSeg, EthSeg, InlineSeg};

/// The device side of one SQ.
pub(crate) struct Sq {
    pub(crate) d: SqDesc,
    pub(crate) state: QueueState,
    ci: u16,
    faults: VecDeque<(u64, u8)>,
    seq: u64,
    delay: u64,
    delayed: VecDeque<(u64, [u8; 64])>,
    pub(crate) ctr: ModelCounters,
}

impl Sq {
    pub(crate) fn new(d: SqDesc) -> Sq {
        Sq {
            d,
            state: QueueState::Reset,
            ci: 0,
            faults: VecDeque::new(),
            seq: 0,
            delay: 0,
            delayed: VecDeque::with_capacity((d.wqe_cnt as usize).clamp(16, 4096)),
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

    fn bb(&self, i: u32) -> usize {
        self.d.buf + ((i & (self.d.wqe_cnt - 1)) as usize) * 64
    }
}

/// Why a WQE failed: syndrome.
struct Fail(u8);

/// A parsed good WQE.
struct Parsed {
    bbs: u32,
    opcode: u8,
    ce: u8,
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
        let mut work = 0;
        let mut last_start = None;
        let mut db;
        loop {
            let Some(s) = self.sqs.get(sqn) else {
                return work;
            };
            if s.state == QueueState::Reset {
                return work;
            }
            // The SQ doorbell record holds the producer counter (rdma-core qp.c
            // `post_send_db`: `qp->db[MLX5_SND_DBR] = htobe32(qp->sq.cur_post & 0xffff)`).
            db = load_be32(s.d.dbrec) as u16;
            let avail = db.wrapping_sub(s.ci) as u32;
            if avail == 0 || avail > s.d.wqe_cnt {
                break;
            }
            let ci = s.ci;
            let mut c = [0u8; 16];
            read_at(s.bb(ci as u32), &mut c);
            let cs = CtrlSeg::new_unchecked(&c);
            if s.state == QueueState::Error {
                // An SQ in error completes every posted WQE with WR_FLUSH_ERR (PRM; DPDK
                // drivers/net/mlx5/mlx5_tx.c `mlx5_tx_error_cqe_handle` expects them).
                let bbs = ((cs.ds() & 0x3f) as u32).div_ceil(4).clamp(1, avail);
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
            let mut tx = std::mem::take(&mut self.tx);
            let res = self.parse_wqe(sqn, ci, avail, &mut tx);
            let Some(s) = self.sqs.get_mut(sqn) else {
                self.tx = tx;
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
                    if self.opts.flow_control && tx.spans.len() > self.wire_room() {
                        // Lossless link: the port is paused, the WQE waits for room.
                        self.tx = tx;
                        break;
                    }
                    let Some(s) = self.sqs.get_mut(sqn) else {
                        self.tx = tx;
                        return work;
                    };
                    s.ci = ci.wrapping_add(p.bbs as u16);
                    s.seq += 1;
                    count!(self.counters, s.ctr, tx_wqes, 1);
                    last_start = Some(ci);
                    for k in 0..tx.spans.len() {
                        let (a, l) = tx.spans[k];
                        self.transmit(sqn, &tx.bytes[a..a + l]);
                    }
                    // CQ update requested (fm_ce_se CE bits: rdma-core qp.c sets
                    // MLX5_WQE_CTRL_CQ_UPDATE for signaled WRs).
                    let want = p.ce == ctrl::CE_ALWAYS || p.ce == ctrl::CE_CQE_AND_EQE;
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
                        self.tx = tx;
                        return work;
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
            self.tx = tx;
            work += 1;
        }
        if check_uar {
            self.check_uar(sqn, last_start, db);
        }
        work
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
        read_at(s.d.uar + super::super::mem::BF_OFFSET, &mut a);
        read_at(
            s.d.uar + super::super::mem::BF_OFFSET + super::super::mem::BF_SIZE as usize,
            &mut b,
        );
        if a != w && b != w {
            self.counters.doorbell_mismatch += 1;
        }
    }

    fn transmit(&mut self, sqn: u32, f: &[u8]) {
        if let Some(s) = self.sqs.get_mut(sqn) {
            count!(self.counters, s.ctr, tx_frames, 1);
            count!(self.counters, s.ctr, tx_bytes, f.len() as u64);
        }
        self.wire_send(f);
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

    /// Reads and checks the WQE at `ci` into `tx`; on failure gives the syndrome and its size
    /// in WQEBBs. Syndromes as the hardware reports them (PRM; rdma-core cq.c
    /// `mlx5_handle_error_cqe`): LOCAL_QP_OP_ERR for a malformed WQE (opcode, DS, index, QPN,
    /// missing minimum inline header), LOCAL_PROT_ERR for a bad lkey or address,
    /// LOCAL_LENGTH_ERR for a bad frame length.
    fn parse_wqe(
        &mut self,
        sqn: u32,
        ci: u16,
        avail: u32,
        tx: &mut TxScratch,
    ) -> std::result::Result<Parsed, (Fail, u32)> {
        tx.bytes.clear();
        tx.spans.clear();
        let Some(s) = self.sqs.get(sqn) else {
            return Err((Fail(cqe::SYND_LOCAL_QP_OP_ERR), 1));
        };
        let mut w = [0u8; 64 * 16];
        read_at(s.bb(ci as u32), &mut w[..64]);
        let mut cb = [0u8; 16];
        cb.copy_from_slice(&w[..16]);
        let c = CtrlSeg::new_unchecked(&cb);
        let ds = c.ds() as u32;
        let qp_op = |bbs: u32| Err((Fail(cqe::SYND_LOCAL_QP_OP_ERR), bbs.clamp(1, avail)));
        let prot = |bbs: u32| Err((Fail(cqe::SYND_LOCAL_PROT_ERR), bbs));
        let length = |bbs: u32| Err((Fail(cqe::SYND_LOCAL_LENGTH_ERR), bbs));
        if ds == 0 || ds > 63 {
            return qp_op(1);
        }
        let bbs = ds.div_ceil(4);
        // The control segment carries the WQE index and the QPN (rdma-core qp.c
        // `_mlx5_post_send`: `opmod_idx_opcode`, `qpn_ds`).
        if bbs > avail || c.wqe_index() != ci || c.qpn() != sqn {
            return qp_op(bbs);
        }
        for k in 1..bbs {
            read_at(
                s.bb(ci as u32 + k),
                &mut w[k as usize * 64..k as usize * 64 + 64],
            );
        }
        let w = &w[..ds as usize * 16];
        let opcode = c.opcode();
        let ok = Ok(Parsed {
            bbs,
            opcode,
            ce: c.ce(),
        });
        if c.opmod() != 0 {
            return qp_op(bbs);
        }
        let max = self.opts.max_frame as usize;
        match opcode {
            ctrl::OPCODE_NOP => ok,
            ctrl::OPCODE_SEND => {
                if ds < 2 {
                    return qp_op(bbs);
                }
                let e = match EthSeg::new_checked(&w[16..]) {
                    Ok(e) => e,
                    Err(_) => return qp_op(bbs),
                };
                let inl = e.inline_hdr_sz() as usize;
                let mut at = 16 + eth::size_for_inline(inl);
                if at > w.len() || e.mss() != 0 || e.swp_offs() != 0 {
                    return qp_op(bbs);
                }
                let cs = e.cs_flags();
                tx.bytes.extend_from_slice(e.inline_hdr());
                while at < w.len() {
                    let d = DataSeg::new_unchecked(&w[at..at + 16]);
                    if d.byte_count() & inline::INLINE_BIT != 0 {
                        let Ok(seg) = InlineSeg::new_checked(&w[at..]) else {
                            return qp_op(bbs);
                        };
                        if tx.bytes.len() + seg.data().len() > max {
                            return length(bbs);
                        }
                        tx.bytes.extend_from_slice(seg.data());
                        at += 16 * inline::ds_for(seg.len());
                        continue;
                    }
                    let len = d.byte_count();
                    if len > 0 {
                        if !self.mr_ok(d.lkey(), d.addr(), len) {
                            return prot(bbs);
                        }
                        if tx.bytes.len() + len as usize > max {
                            return length(bbs);
                        }
                        let at0 = tx.bytes.len();
                        tx.bytes.resize(at0 + len as usize, 0);
                        read_at(d.addr() as usize, &mut tx.bytes[at0..]);
                    }
                    at += data::SIZE;
                }
                // The device demands `eth_min_inline` header bytes inline (mlx5-abi.h
                // `eth_min_inline`; libmlx5 copies them, qp.c `copy_eth_inline_headers`).
                if inl < (self.opts.min_inline as usize).min(tx.bytes.len()) {
                    return qp_op(bbs);
                }
                if tx.bytes.len() < 14 || tx.bytes.len() > max {
                    return length(bbs);
                }
                if cs & (eth::CS_L3 | eth::CS_L4) != 0 {
                    if !self.tune.tx_csum {
                        return qp_op(bbs);
                    }
                    net::fill_checksums(&mut tx.bytes, cs & eth::CS_L3 != 0, cs & eth::CS_L4 != 0);
                }
                tx.spans.push((0, tx.bytes.len()));
                ok
            }
            ctrl::OPCODE_ENHANCED_MPSW => {
                // Enhanced MPW (DPDK drivers/net/mlx5/mlx5_tx.h `mlx5_tx_burst_empw_*`): one
                // Ethernet segment without inline header, then one data or inline segment per
                // frame; refused when the device needs an inline header.
                if !self.tune.empw || self.opts.min_inline != 0 || ds < 3 {
                    return qp_op(bbs);
                }
                let e = EthSeg::new_unchecked(&w[16..32]);
                if e.inline_hdr_sz() != 0 || e.mss() != 0 {
                    return qp_op(bbs);
                }
                let cs = e.cs_flags();
                if cs != 0 && !self.tune.tx_csum {
                    return qp_op(bbs);
                }
                let mut at = 32;
                while at < w.len() {
                    let d = DataSeg::new_unchecked(&w[at..at + 16]);
                    let at0 = tx.bytes.len();
                    if d.byte_count() & inline::INLINE_BIT != 0 {
                        let Ok(seg) = InlineSeg::new_checked(&w[at..]) else {
                            return qp_op(bbs);
                        };
                        tx.bytes.extend_from_slice(seg.data());
                        at += 16 * inline::ds_for(seg.len());
                    } else {
                        let len = d.byte_count();
                        if !self.mr_ok(d.lkey(), d.addr(), len) {
                            return prot(bbs);
                        }
                        if len < 14 || len as usize > max {
                            return length(bbs);
                        }
                        tx.bytes.resize(at0 + len as usize, 0);
                        read_at(d.addr() as usize, &mut tx.bytes[at0..]);
                        at += data::SIZE;
                    }
                    if cs != 0 {
                        net::fill_checksums(
                            &mut tx.bytes[at0..],
                            cs & eth::CS_L3 != 0,
                            cs & eth::CS_L4 != 0,
                        );
                    }
                    tx.spans.push((at0, tx.bytes.len() - at0));
                }
                ok
            }
            _ => qp_op(bbs),
        }
    }
}
