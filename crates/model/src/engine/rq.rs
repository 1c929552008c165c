//! The device's receive queues: fill cyclic (scatter list per WQE) or striding RQ buffers and
//! queue the receive CQEs (which the CQ writes, compressed when configured).
//!
//! Receive WQEs are read as libmlx5 writes them: rdma-core providers/mlx5/qp.c
//! `mlx5_post_wq_recv` / `mlx5_post_recv` put one data segment per non-empty SGE and, when the
//! list is shorter than the WQE holds, a terminator entry (byte count 0, lkey
//! `MLX5_INVALID_LKEY` 0x100); the doorbell record holds the 16-bit producer counter. A striding
//! WQE starts with a 16-byte next segment (DPDK drivers/net/mlx5/mlx5_rxq.c / mlx5_prm.h
//! `struct mlx5_wqe_mprq`).

use super::steer::Deliver;
use super::*;
use crate::net;
use crate::wire::{cqe, Cqe, DataSeg};

/// The device side of one RQ.
pub(crate) struct Rq {
    pub(crate) d: RqDesc,
    pub(crate) state: QueueState,
    ci: u16,
    stride_pos: u32,
    /// A striding WQE is open (its buffer in `segs`).
    cur: bool,
    /// Scatter list of the WQE being filled: (lkey, address, length).
    segs: Vec<(u32, u64, u32)>,
    /// Strip one 802.1Q tag on receive (`IBV_WQ_FLAGS_CVLAN_STRIPPING`).
    pub(crate) vlan_strip: bool,
    /// Protection domain: the receive buffers' keys must be of it.
    pub(crate) pd: u32,
    pub(crate) ctr: ModelCounters,
}

impl Rq {
    pub(crate) fn new(d: RqDesc) -> Rq {
        Rq {
            d,
            state: QueueState::Reset,
            ci: 0,
            stride_pos: 0,
            cur: false,
            segs: Vec::with_capacity((d.stride / 16) as usize),
            vlan_strip: false,
            pd: 0,
            ctr: ModelCounters::default(),
        }
    }

    /// `ibv_modify_wq` as the RQ sees it (PRM RQ states RST → RDY → ERR → RST; Linux
    /// drivers/infiniband/hw/mlx5/qp.c `mlx5_ib_modify_wq`). Reset forgets the ring position
    /// and this queue's counters.
    pub(crate) fn set_state(&mut self, st: QueueState) -> Result<()> {
        if self.state == QueueState::Error && st == QueueState::Ready {
            return Err(Error::Config(
                "model: an RQ in error must be reset before it is ready again (ERR -> RST -> RDY)"
                    .into(),
            ));
        }
        if st == QueueState::Reset {
            self.ci = 0;
            self.stride_pos = 0;
            self.cur = false;
            self.ctr = ModelCounters::default();
        }
        self.state = st;
        Ok(())
    }

    /// WQEs posted and not yet consumed.
    fn posted(&self) -> u32 {
        let db = load_be32(self.d.dbrec) as u16;
        let n = db.wrapping_sub(self.ci) as u32;
        if n > self.d.wqe_cnt {
            0
        } else {
            n
        }
    }

    fn wqe(&self, ci: u16) -> usize {
        self.d.buf + ((ci as u32 & (self.d.wqe_cnt - 1)) as usize) * self.d.stride as usize
    }

    /// Reads the scatter list of WQE `ci` from entry `first` into `segs`, up to a terminator
    /// or `limit` bytes.
    fn read_segs(&mut self, ci: u16, first: usize, limit: u64) {
        self.segs.clear();
        let at = self.wqe(ci);
        let mut total = 0u64;
        for k in first..(self.d.stride / 16) as usize {
            let mut b = [0u8; 16];
            read_at(at + 16 * k, &mut b);
            let d = DataSeg::new_unchecked(&b);
            if d.is_terminator() || total >= limit {
                break;
            }
            total += d.byte_count() as u64;
            self.segs.push((d.lkey(), d.addr(), d.byte_count()));
        }
    }
}

impl HwState {
    /// Queues a receive error CQE for WQE `wqe` of `rqn`. Only LOCAL_QP_OP_ERR,
    /// LOCAL_PROT_ERR (and flushes) put the RQ in error: a LOCAL_LENGTH_ERR (frame larger than
    /// the posted buffer) consumes that WQE and the queue keeps running (DPDK
    /// drivers/net/mlx5/mlx5_rx.c `mlx5_rx_err_handle` resets the RQ only for
    /// LOCAL_QP_OP_ERR, LOCAL_PROT_ERR and WR_FLUSH_ERR and skips the buffer otherwise).
    fn rx_error_cqe(&mut self, rqn: u32, wqe: u16, synd: u8) {
        let Some(r) = self.rqs.get_mut(rqn) else {
            return;
        };
        let mut b = [0u8; 64];
        let mut c = Cqe::new_unchecked(&mut b[..]);
        c.set_wqe_counter(wqe);
        c.set_syndrome(0, synd);
        c.set_sop_drop_qpn(rqn & 0xff_ffff);
        c.set_srqn_uidx(r.d.user_index & 0xff_ffff);
        c.set_op_own(cqe::OP_RESP_ERR << 4);
        if synd != cqe::SYND_LOCAL_LENGTH_ERR {
            r.state = QueueState::Error;
        }
        count!(self.counters, r.ctr, rx_error_cqes, 1);
        let cqn = r.d.cqn;
        self.push_rx_cqe(cqn, b);
    }

    /// An RQ in error completes its posted WQEs with WR_FLUSH_ERR (PRM; DPDK mlx5_rx.c
    /// `mlx5_rx_err_handle` expects them), as far as its CQ has room.
    pub(super) fn flush_rq(&mut self, rqn: u32) -> usize {
        let mut n = 0;
        loop {
            let Some(r) = self.rqs.get(rqn) else {
                return n;
            };
            if r.state != QueueState::Error || r.posted() == 0 {
                return n;
            }
            let cqn = r.d.cqn;
            if !self.cqs.get(cqn).is_some_and(|c| !c.err && c.space() > 0) {
                return n;
            }
            let Some(r) = self.rqs.get_mut(rqn) else {
                return n;
            };
            let mut b = [0u8; 64];
            let mut c = Cqe::new_unchecked(&mut b[..]);
            c.set_wqe_counter(r.ci);
            c.set_syndrome(0, cqe::SYND_WR_FLUSH_ERR);
            c.set_sop_drop_qpn(rqn & 0xff_ffff);
            c.set_srqn_uidx(r.d.user_index & 0xff_ffff);
            c.set_op_own(cqe::OP_RESP_ERR << 4);
            r.ci = r.ci.wrapping_add(1);
            r.cur = false;
            r.stride_pos = 0;
            count!(self.counters, r.ctr, rx_flushed, 1);
            self.post_cqe(cqn, &mut b);
            n += 1;
        }
    }

    /// Puts `frame` (steered to `rqn`, with its RSS hash and flow tag) into the RQ.
    pub(super) fn deliver(
        &mut self,
        rqn: u32,
        frame: &[u8],
        hash: u32,
        hash_type: u8,
        tag: u32,
        may_wait: bool,
    ) -> Deliver {
        let fc = self.opts.flow_control && may_wait;
        let Some(r) = self.rqs.get(rqn) else {
            return Deliver::Done;
        };
        match r.state {
            QueueState::Reset => {
                self.counters.rx_no_buffer += 1;
                return Deliver::Done;
            }
            QueueState::Error => {
                if let Some(r) = self.rqs.get_mut(rqn) {
                    count!(self.counters, r.ctr, rx_in_error, 1);
                }
                return Deliver::Done;
            }
            QueueState::Ready => {}
        }
        let cqn = r.d.cqn;
        let striding = r.d.striding;
        // An RQ without a posted WQE drops (counted, `rx_out_of_buffer` in mlx5 ethtool
        // stats); with flow control the port pauses instead (the frame waits).
        let no_buf = |s: &mut Self| {
            if fc {
                Deliver::Wait
            } else {
                if let Some(r) = s.rqs.get_mut(rqn) {
                    count!(s.counters, r.ctr, rx_no_buffer, 1);
                }
                Deliver::Done
            }
        };
        if !(striding.is_some() && r.cur) && r.posted() == 0 {
            return no_buf(self);
        }
        // Room for this frame's CQEs: a CQE due on a full CQ overruns it (see `overrun`),
        // whatever flow control says: pause frames hold the wire, not the CQ. A striding RQ
        // writes a filler first only when the frame does not fit in what is left of the open
        // WQE: DPDK's mlx5 PMD sizes the CQ at one CQE per stride (drivers/net/mlx5/mlx5_rxq.c
        // `mlx5_rxq_cqe_num`), which is never too small since a filler closes strides too.
        // (The frame's length before any VLAN strip: never fewer strides than it will take.)
        let slots = match striding {
            Some(s) if r.cur => {
                let shift = if s.two_byte_shift { 2 } else { 0 };
                let need = (frame.len() as u32 + shift).div_ceil(1 << s.log_stride_size);
                1 + u32::from(r.stride_pos + need > 1 << s.log_num_strides) as usize
            }
            _ => 1,
        };
        if !self.rx_cq_room(cqn, slots) {
            self.overrun(cqn);
            if let Some(r) = self.rqs.get_mut(rqn) {
                count!(self.counters, r.ctr, rx_in_error, 1);
            }
            return Deliver::Done;
        }
        // VLAN strip (`IBV_WQ_FLAGS_CVLAN_STRIPPING`; the TCI goes to the CQE's `vlan_info`
        // with the CV bit, mlx5dv.h `MLX5_CQE_VLAN_STRIPPED` / rdma-core cq.c). Only a
        // stripped frame is copied (into the port's scratch, taken out meanwhile).
        let mut stripped = std::mem::take(&mut self.rxf);
        let mut vlan = None;
        let strip = self.rqs.get(rqn).is_some_and(|r| r.vlan_strip);
        let f: &[u8] = if strip && frame.len() >= 18 && frame[12] == 0x81 && frame[13] == 0x00 {
            vlan = Some(u16::from_be_bytes([frame[14], frame[15]]));
            stripped.clear();
            stripped.extend_from_slice(&frame[..12]);
            stripped.extend_from_slice(&frame[16..]);
            &stripped
        } else {
            frame
        };
        let mut base = [0u8; 64];
        {
            let info = net::analyze(f);
            let mut c = Cqe::new_unchecked(&mut base[..]);
            c.set_rss_hash_result(hash);
            c.set_rss_hash_type(hash_type);
            c.set_hds_ip_ext(info.hds_ip_ext);
            let mut t = info.hdr_type;
            if let Some(v) = vlan {
                t |= cqe::CV;
                c.set_vlan_info(v);
            }
            c.set_l4_l3_hdr_type(t);
            // The flow tag sits in the low 24 bits of `sop_drop_qpn` (mlx5dv.h / rdma-core
            // cq.c `mlx5_cq_read_flow_tag`: `sop_drop_qpn & MLX5_FLOW_TAG_MASK`; DPDK
            // mlx5_rx.c reads the mark there), 0 without a Tag spec.
            c.set_sop_drop_qpn(tag & 0xff_ffff);
            c.set_srqn_uidx(self.rqs.get(rqn).map_or(0, |r| r.d.user_index & 0xff_ffff));
            c.set_op_own(cqe::OP_RESP_SEND << 4);
        }
        let r = match striding {
            None => self.fill_cyclic(rqn, f, base),
            Some(s) => self.fill_striding(rqn, f, base, s),
        };
        let len = f.len() as u64;
        self.rxf = stripped;
        match r {
            Some(true) => {
                if let Some(r) = self.rqs.get_mut(rqn) {
                    count!(self.counters, r.ctr, rx_frames, 1);
                    count!(self.counters, r.ctr, rx_bytes, len);
                }
                Deliver::Done
            }
            Some(false) => Deliver::Done,
            None => no_buf(self),
        }
    }

    /// One cyclic WQE per frame, scattered over its list; a frame longer than the list is a
    /// LOCAL_LENGTH_ERR for that WQE. Some(true): delivered; Some(false): consumed by an error;
    /// None: no WQE.
    fn fill_cyclic(&mut self, rqn: u32, f: &[u8], mut b: [u8; 64]) -> Option<bool> {
        let r = self.rqs.get_mut(rqn)?;
        if r.posted() == 0 {
            return None;
        }
        let ci = r.ci;
        r.read_segs(ci, 0, u64::MAX);
        r.ci = ci.wrapping_add(1);
        // Taken out and put back (no allocation) so that the MR table can be read meanwhile.
        let pd = r.pd;
        let segs = std::mem::take(&mut r.segs);
        let bad = segs.iter().any(|&(k, a, l)| !self.mr_ok(k, pd, a, l));
        let room: u64 = segs.iter().map(|s| s.2 as u64).sum();
        if !bad && (f.len() as u64) <= room {
            let mut off = 0;
            for &(_, a, l) in &segs {
                if off == f.len() {
                    break;
                }
                let k = (l as usize).min(f.len() - off);
                write_at(a as usize, &f[off..off + k]);
                off += k;
            }
        }
        self.rqs.get_mut(rqn)?.segs = segs;
        if bad {
            self.rx_error_cqe(rqn, ci, cqe::SYND_LOCAL_PROT_ERR);
            return Some(false);
        }
        if (f.len() as u64) > room {
            self.rx_error_cqe(rqn, ci, cqe::SYND_LOCAL_LENGTH_ERR);
            return Some(false);
        }
        let mut c = Cqe::new_unchecked(&mut b[..]);
        c.set_byte_cnt(f.len() as u32);
        c.set_wqe_counter(ci);
        let cqn = self.rqs.get(rqn)?.d.cqn;
        self.push_rx_cqe(cqn, b);
        Some(true)
    }

    /// Striding RQ (DPDK mlx5_rx.c `mlx5_rx_burst_mprq`): a frame takes consecutive strides
    /// of the open WQE (after 2 pad bytes with the two-byte shift); a frame that does not fit
    /// what is left closes the WQE with a filler CQE (`MLX5_MPRQ_FILLER_MASK`) and goes to the
    /// next one. CQE: `wqe_id` = WQE, `wqe_counter` = first stride, byte count with the stride
    /// count (mlx5_prm.h `MLX5_MPRQ_STRIDE_NUM_MASK`).
    fn fill_striding(
        &mut self,
        rqn: u32,
        f: &[u8],
        mut b: [u8; 64],
        s: crate::Striding,
    ) -> Option<bool> {
        let num = 1u32 << s.log_num_strides;
        let ssz = 1u32 << s.log_stride_size;
        let shift = if s.two_byte_shift { 2 } else { 0 };
        let need = (f.len() as u32 + shift).div_ceil(ssz);
        if need > num {
            self.counters.rx_oversize += 1;
            return Some(false);
        }
        let r = self.rqs.get_mut(rqn)?;
        let cqn = r.d.cqn;
        if r.cur && r.stride_pos + need > num {
            let left = num - r.stride_pos;
            let mut fb = [0u8; 64];
            let mut c = Cqe::new_unchecked(&mut fb[..]);
            c.set_wqe_id(r.ci);
            c.set_wqe_counter(r.stride_pos as u16);
            c.set_byte_cnt(cqe::mprq_byte_cnt(0, left as u16, true));
            c.set_srqn_uidx(r.d.user_index & 0xff_ffff);
            c.set_op_own(cqe::OP_RESP_SEND << 4);
            r.ci = r.ci.wrapping_add(1);
            r.stride_pos = 0;
            r.cur = false;
            count!(self.counters, r.ctr, fillers, 1);
            self.push_rx_cqe(cqn, fb);
        }
        let r = self.rqs.get_mut(rqn)?;
        if !r.cur {
            if r.posted() == 0 {
                return None;
            }
            let ci = r.ci;
            r.read_segs(ci, 1, (num * ssz) as u64);
            let pd = r.pd;
            let segs = std::mem::take(&mut r.segs);
            let bad = segs.iter().any(|&(k, a, l)| !self.mr_ok(k, pd, a, l));
            let total: u64 = segs.iter().map(|s| s.2 as u64).sum();
            self.rqs.get_mut(rqn)?.segs = segs;
            if bad || total < (num * ssz) as u64 {
                let r = self.rqs.get_mut(rqn)?;
                r.ci = ci.wrapping_add(1);
                let synd = if bad {
                    cqe::SYND_LOCAL_PROT_ERR
                } else {
                    cqe::SYND_LOCAL_LENGTH_ERR
                };
                self.rx_error_cqe(rqn, ci, synd);
                return Some(false);
            }
            let r = self.rqs.get_mut(rqn)?;
            r.cur = true;
            r.stride_pos = 0;
        }
        let r = self.rqs.get_mut(rqn)?;
        let start = (r.stride_pos * ssz) as u64;
        if shift > 0 {
            scatter(&r.segs, start, &[0u8; 2]);
        }
        scatter(&r.segs, start + shift as u64, f);
        let mut c = Cqe::new_unchecked(&mut b[..]);
        c.set_wqe_id(r.ci);
        c.set_wqe_counter(r.stride_pos as u16);
        c.set_byte_cnt(cqe::mprq_byte_cnt(f.len() as u16, need as u16, false));
        r.stride_pos += need;
        if r.stride_pos == num {
            r.stride_pos = 0;
            r.cur = false;
            r.ci = r.ci.wrapping_add(1);
        }
        self.push_rx_cqe(cqn, b);
        Some(true)
    }
}

/// Writes `p` at logical offset `start` of the buffer made of `segs`.
fn scatter(segs: &[(u32, u64, u32)], start: u64, p: &[u8]) {
    let mut seg = 0;
    let mut seg_start = 0u64;
    while seg < segs.len() && seg_start + segs[seg].2 as u64 <= start {
        seg_start += segs[seg].2 as u64;
        seg += 1;
    }
    let mut pos = start;
    let mut off = 0;
    while off < p.len() && seg < segs.len() {
        let (_, a, l) = segs[seg];
        let in_seg = pos - seg_start;
        let k = ((l as u64 - in_seg) as usize).min(p.len() - off);
        write_at((a + in_seg) as usize, &p[off..off + k]);
        off += k;
        pos += k as u64;
        if pos - seg_start == l as u64 {
            seg_start += l as u64;
            seg += 1;
        }
    }
}
