//! The model's device logic: what happens on each `process` step.

use std::collections::VecDeque;
use std::sync::Arc;

use super::link::{AfPacket, Inbox};
use super::mem::{self, CqW, Geometry, QueueMem};
use super::{net, ModelOptions, ModelWire, RxKind};
use crate::dv::rings::{MiniCqeFormat, QueueRings};
use crate::dv::wire::{
    cqe, ctrl, data, eth, inline, mini_cqe, Cqe, CtrlSeg, DataSeg, EthSeg, InlineSeg, MiniCqe,
};
use crate::error::{Error, Result};
use crate::flow::{self, Action};
use crate::mempool::Mempool;

/// What a modelled port has seen and done.
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
    /// Frames the wire could not take (no flow control, peer full; or the bridge refused).
    pub wire_drops: u64,
    /// Frames delivered into an RQ.
    pub rx_frames: u64,
    /// Bytes delivered into an RQ.
    pub rx_bytes: u64,
    /// Frames dropped because the RQ had no posted WQE (or its CQ no room).
    pub rx_no_buffer: u64,
    /// Runt frames dropped.
    pub rx_runt: u64,
    /// Oversize frames dropped.
    pub rx_oversize: u64,
    /// Frames no rule matched ("to the kernel").
    pub rx_to_kernel: u64,
    /// Frames a `Drop` rule took.
    pub rx_rule_drop: u64,
    /// Receive error CQEs written.
    pub rx_error_cqes: u64,
    /// Frames dropped because their RQ was in the error state.
    pub rx_in_error: u64,
    /// Striding RQ filler CQEs.
    pub fillers: u64,
    /// Compressed CQE sessions written.
    pub compressed_sessions: u64,
    /// Completions carried by mini-CQEs.
    pub mini_cqes: u64,
    /// Doorbells whose UAR write did not match the last WQE's first 8 bytes.
    pub doorbell_mismatch: u64,
}

enum Link {
    Sink,
    Peer(Arc<Inbox>),
    Bridge(AfPacket),
}

struct QState {
    mem: Arc<QueueMem>,
    sqn: u32,
    open: bool,
    sq_ci: u16,
    sq_err: bool,
    txcq: CqW,
    rxcq: CqW,
    rq_ci: u16,
    rq_err: bool,
    stride_pos: u32,
    /// Logical buffer of the current striding WQE: (address, length) per data segment.
    cur: Option<Vec<(u64, u32)>>,
    pending_rx: VecDeque<[u8; 64]>,
    delayed_tx: VecDeque<(u64, [u8; 64])>,
    tx_delay: u64,
    tx_faults: VecDeque<(u64, u8)>,
    tx_seq: u64,
}

pub(crate) struct PortState {
    pub(crate) opts: ModelOptions,
    pub(crate) counters: ModelCounters,
    pub(crate) inbox: Arc<Inbox>,
    link: Link,
    qs: Vec<QState>,
    /// Registered regions: (lkey, start, len).
    mrs: Vec<(u32, u64, u64)>,
    step: u64,
    scratch: Vec<u8>,
}

/// Why a WQE failed: syndrome and how many WQEBBs it occupied.
struct Fail(u8);

struct Parsed {
    bbs: u32,
    opcode: u8,
    ce: u8,
    frames: Vec<Vec<u8>>,
}

impl PortState {
    pub(crate) fn new(opts: ModelOptions) -> Result<PortState> {
        let inbox = Inbox::new(opts.wire_capacity as usize);
        let link = match &opts.wire {
            ModelWire::Loopback => Link::Peer(inbox.clone()),
            ModelWire::Sink => Link::Sink,
            ModelWire::Bridge { ifname } => Link::Bridge(AfPacket::open(ifname)?),
        };
        let (rq_stride, per_wqe_cqes) = match opts.rx {
            RxKind::Cyclic { sges } => ((16 * sges).next_power_of_two(), 1),
            RxKind::Striding(s) => (
                (16 * (1 + (1u32 << s.log_num_strides))).next_power_of_two(),
                (1u32 << s.log_num_strides) + 1,
            ),
        };
        let rxcq_cnt = (opts.rq_wqes * per_wqe_cqes)
            .next_power_of_two()
            .clamp(64, 1 << 16);
        let g = Geometry {
            sq_cnt: opts.sq_wqebbs,
            txcq_cnt: opts.sq_wqebbs.max(64),
            rq_cnt: opts.rq_wqes,
            rq_stride,
            rxcq_cnt,
        };
        let mut qs = Vec::new();
        for i in 0..opts.queues as u32 {
            let m = Arc::new(QueueMem::new(g)?);
            qs.push(QState {
                txcq: CqW::new(m.txcq, g.txcq_cnt, mem::DB_TXCQ),
                rxcq: CqW::new(m.rxcq, g.rxcq_cnt, mem::DB_RXCQ),
                mem: m,
                sqn: 0x1000 + i,
                open: false,
                sq_ci: 0,
                sq_err: false,
                rq_ci: 0,
                rq_err: false,
                stride_pos: 0,
                cur: None,
                pending_rx: VecDeque::new(),
                delayed_tx: VecDeque::new(),
                tx_delay: 0,
                tx_faults: VecDeque::new(),
                tx_seq: 0,
            });
        }
        Ok(PortState {
            opts,
            counters: ModelCounters::default(),
            inbox,
            link,
            qs,
            mrs: Vec::new(),
            step: 0,
            scratch: Vec::new(),
        })
    }

    pub(crate) fn connect(&mut self, peer: Arc<Inbox>) {
        self.link = Link::Peer(peer);
    }

    pub(crate) fn open_queue(
        &mut self,
        i: u16,
        pool: &Mempool,
    ) -> Result<(QueueRings, Arc<QueueMem>)> {
        let (start, len) = pool.region();
        let (start, len) = (start as u64, len as u64);
        let lkey = match self.mrs.iter().find(|m| m.1 == start && m.2 == len) {
            Some(m) => m.0,
            None => {
                let k = 0x5000 + self.mrs.len() as u32;
                self.mrs.push((k, start, len));
                k
            }
        };
        let opts = self.opts.clone();
        let Some(q) = self.qs.get_mut(i as usize) else {
            return Err(Error::Config(format!("model queue {i} does not exist")));
        };
        if q.open {
            return Err(Error::Config(format!("model queue {i} is already open")));
        }
        q.open = true;
        let rings = super::rings_of(&q.mem, q.sqn, lkey, &opts)?;
        Ok((rings, q.mem.clone()))
    }

    pub(crate) fn close_queue(&mut self, i: usize) {
        if let Some(q) = self.qs.get_mut(i) {
            q.open = false;
            reset_sq_state(q);
            reset_rq_state(q);
        }
    }

    pub(crate) fn reset_sq(&mut self, i: usize) {
        if let Some(q) = self.qs.get_mut(i) {
            reset_sq_state(q);
        }
    }

    pub(crate) fn reset_rq(&mut self, i: usize) {
        if let Some(q) = self.qs.get_mut(i) {
            reset_rq_state(q);
        }
    }

    pub(crate) fn inject_tx_error(&mut self, i: usize, nth: u64, syndrome: u8) {
        if let Some(q) = self.qs.get_mut(i) {
            let at = q.tx_seq + nth;
            q.tx_faults.push_back((at, syndrome));
        }
    }

    pub(crate) fn delay_tx(&mut self, i: usize, steps: u64) {
        if let Some(q) = self.qs.get_mut(i) {
            q.tx_delay = steps;
        }
    }

    /// One round of device work.
    pub(crate) fn process(&mut self, check_uar: bool) -> usize {
        self.step += 1;
        let mut work = 0;
        for i in 0..self.qs.len() {
            if !self.qs[i].open {
                continue;
            }
            work += self.release_delayed(i);
            work += self.process_sq(i, check_uar);
        }
        work += self.pull_bridge();
        work += self.receive();
        for i in 0..self.qs.len() {
            work += self.flush_rx(i);
        }
        work
    }

    fn mr_ok(&self, lkey: u32, addr: u64, len: u32) -> bool {
        self.mrs.iter().any(|&(k, s, l)| {
            k == lkey && addr >= s && addr.checked_add(len as u64).is_some_and(|e| e <= s + l)
        })
    }

    fn release_delayed(&mut self, i: usize) -> usize {
        let step = self.step;
        let q = &mut self.qs[i];
        let mut n = 0;
        while let Some(&(due, c)) = q.delayed_tx.front() {
            if due > step || q.txcq.space(&q.mem) == 0 {
                break;
            }
            q.delayed_tx.pop_front();
            q.txcq.write(&q.mem, &c, c[63] >> 4, 0, 1);
            n += 1;
        }
        n
    }

    fn wire_room(&self) -> usize {
        match &self.link {
            Link::Peer(ib) => ib.cap.saturating_sub(ib.lock().len()),
            _ => usize::MAX,
        }
    }

    fn transmit(&mut self, frames: Vec<Vec<u8>>) {
        for f in frames {
            self.counters.tx_frames += 1;
            self.counters.tx_bytes += f.len() as u64;
            match &self.link {
                Link::Sink => {}
                Link::Peer(ib) => {
                    let mut q = ib.lock();
                    if q.len() < ib.cap {
                        q.push_back(f);
                    } else {
                        self.counters.wire_drops += 1;
                    }
                }
                Link::Bridge(s) => {
                    if !s.send(&f) {
                        self.counters.wire_drops += 1;
                    }
                }
            }
        }
    }

    fn process_sq(&mut self, i: usize, check_uar: bool) -> usize {
        let mut work = 0;
        let mut last_start = None;
        let mut db;
        loop {
            let q = &self.qs[i];
            db = q.mem.db_load(mem::DB_SQ) as u16;
            let avail = db.wrapping_sub(q.sq_ci) as u32;
            if avail == 0 || avail > q.mem.g.sq_cnt {
                break;
            }
            // Room for a completion (and any held back) before taking the WQE.
            if q.txcq.space(&q.mem) as usize <= q.delayed_tx.len() {
                break;
            }
            let ci = q.sq_ci;
            let mut c = [0u8; 16];
            q.mem.read(
                q.mem.sq + ((ci as u32 & (q.mem.g.sq_cnt - 1)) as usize) * 64,
                &mut c,
            );
            let cs = CtrlSeg::new_unchecked(&c);
            if q.sq_err {
                let bbs = ((cs.ds() & 0x3f) as u32).div_ceil(4).clamp(1, avail);
                let sqn = q.sqn;
                self.write_tx_cqe(
                    i,
                    cqe::OP_REQ_ERR,
                    ci,
                    cs.opcode(),
                    sqn,
                    cqe::SYND_WR_FLUSH_ERR,
                    false,
                );
                let q = &mut self.qs[i];
                q.sq_ci = ci.wrapping_add(bbs as u16);
                self.counters.tx_flushed += 1;
                work += 1;
                continue;
            }
            let res = self.parse_wqe(i, ci, avail);
            let q = &mut self.qs[i];
            let fault = match q.tx_faults.front() {
                Some(&(at, s)) if at == q.tx_seq => {
                    q.tx_faults.pop_front();
                    Some(s)
                }
                _ => None,
            };
            match (res, fault) {
                (Ok(p), None) => {
                    if self.opts.flow_control && p.frames.len() > self.wire_room() {
                        // Pause: the WQE stays until the peer has room.
                        break;
                    }
                    let q = &mut self.qs[i];
                    q.sq_ci = ci.wrapping_add(p.bbs as u16);
                    q.tx_seq += 1;
                    let sqn = q.sqn;
                    self.counters.tx_wqes += 1;
                    last_start = Some(ci);
                    self.transmit(p.frames);
                    if p.ce == ctrl::CE_ALWAYS || p.ce == ctrl::CE_CQE_AND_EQE {
                        self.write_tx_cqe(i, cqe::OP_REQ, ci, p.opcode, sqn, 0, true);
                        self.counters.tx_cqes += 1;
                    }
                }
                (res, fault) => {
                    let (synd, bbs) = match (res, fault) {
                        (Ok(p), Some(s)) => (s, p.bbs),
                        (Err((Fail(s), bbs)), _) => (s, bbs),
                        (Ok(p), None) => (0, p.bbs),
                    };
                    let q = &mut self.qs[i];
                    q.sq_ci = ci.wrapping_add(bbs as u16);
                    q.tx_seq += 1;
                    q.sq_err = true;
                    let sqn = q.sqn;
                    self.write_tx_cqe(i, cqe::OP_REQ_ERR, ci, cs.opcode(), sqn, synd, false);
                    self.counters.tx_error_cqes += 1;
                    last_start = None;
                }
            }
            work += 1;
        }
        if check_uar {
            if let Some(start) = last_start {
                let q = &self.qs[i];
                if q.sq_ci == db {
                    let mut w = [0u8; 8];
                    q.mem.read(
                        q.mem.sq + ((start as u32 & (q.mem.g.sq_cnt - 1)) as usize) * 64,
                        &mut w,
                    );
                    let a = q.mem.uar_read(mem::BF_OFFSET);
                    let b = q.mem.uar_read(mem::BF_OFFSET + mem::BF_SIZE as usize);
                    if a != w && b != w {
                        self.counters.doorbell_mismatch += 1;
                    }
                }
            }
        }
        work
    }

    #[allow(clippy::too_many_arguments)]
    fn write_tx_cqe(
        &mut self,
        i: usize,
        op: u8,
        wqe: u16,
        wqe_opcode: u8,
        sqn: u32,
        synd: u8,
        may_delay: bool,
    ) {
        let step = self.step;
        let q = &mut self.qs[i];
        let mut b = [0u8; 64];
        {
            let mut c = Cqe::new_unchecked(&mut b);
            c.set_wqe_counter(wqe);
            c.set_sop_drop_qpn((wqe_opcode as u32) << 24 | (sqn & 0xff_ffff));
            if op == cqe::OP_REQ_ERR {
                c.set_syndrome(0, synd);
            }
            c.set_op_own(op << 4);
        }
        if may_delay && (q.tx_delay > 0 || !q.delayed_tx.is_empty()) {
            q.delayed_tx.push_back((step + q.tx_delay, b));
            return;
        }
        q.txcq.write(&q.mem, &b, op, 0, 1);
    }

    /// Reads and checks the WQE at `ci`; on failure gives the syndrome and its size in WQEBBs.
    fn parse_wqe(
        &mut self,
        i: usize,
        ci: u16,
        avail: u32,
    ) -> std::result::Result<Parsed, (Fail, u32)> {
        let q = &self.qs[i];
        let m = &q.mem;
        let cnt = m.g.sq_cnt;
        let mut w = [0u8; 64 * 16];
        m.read(m.sq + ((ci as u32 & (cnt - 1)) as usize) * 64, &mut w[..64]);
        let mut cb = [0u8; 16];
        cb.copy_from_slice(&w[..16]);
        let c = CtrlSeg::new_unchecked(&cb);
        let ds = c.ds() as u32;
        let qp_op = |bbs: u32| Err((Fail(cqe::SYND_LOCAL_QP_OP_ERR), bbs.clamp(1, avail)));
        if ds == 0 || ds > 63 {
            return qp_op(1);
        }
        let bbs = ds.div_ceil(4);
        if bbs > avail || c.wqe_index() != ci || c.qpn() != q.sqn {
            return qp_op(bbs);
        }
        for k in 1..bbs {
            let slot = (ci as u32 + k) & (cnt - 1);
            m.read(
                m.sq + slot as usize * 64,
                &mut w[k as usize * 64..k as usize * 64 + 64],
            );
        }
        let w = &w[..ds as usize * 16];
        let opcode = c.opcode();
        let ce = c.ce();
        let p = |frames| {
            Ok(Parsed {
                bbs,
                opcode,
                ce,
                frames,
            })
        };
        if c.opmod() != 0 {
            return qp_op(bbs);
        }
        match opcode {
            ctrl::OPCODE_NOP => p(Vec::new()),
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
                let mut f = e.inline_hdr().to_vec();
                while at < w.len() {
                    let d = DataSeg::new_unchecked(&w[at..at + 16]);
                    if d.byte_count() & inline::INLINE_BIT != 0 {
                        let Ok(s) = InlineSeg::new_checked(&w[at..]) else {
                            return qp_op(bbs);
                        };
                        f.extend_from_slice(s.data());
                        at += 16 * inline::ds_for(s.len());
                        continue;
                    }
                    let len = d.byte_count();
                    if len > 0 {
                        if !self.mr_ok(d.lkey(), d.addr(), len) {
                            return Err((Fail(cqe::SYND_LOCAL_PROT_ERR), bbs));
                        }
                        if f.len() + len as usize > self.opts.max_frame as usize {
                            return Err((Fail(cqe::SYND_LOCAL_LENGTH_ERR), bbs));
                        }
                        read_mem(d.addr(), len as usize, &mut f);
                    }
                    at += data::SIZE;
                }
                if inl < (self.opts.min_inline as usize).min(f.len()) {
                    return qp_op(bbs);
                }
                if f.len() < 14 || f.len() > self.opts.max_frame as usize {
                    return Err((Fail(cqe::SYND_LOCAL_LENGTH_ERR), bbs));
                }
                if cs & (eth::CS_L3 | eth::CS_L4) != 0 {
                    if !self.opts.tx_csum {
                        return qp_op(bbs);
                    }
                    net::fill_checksums(&mut f, cs & eth::CS_L3 != 0, cs & eth::CS_L4 != 0);
                }
                p(vec![f])
            }
            ctrl::OPCODE_ENHANCED_MPSW => {
                if !self.opts.empw || self.opts.min_inline != 0 || ds < 3 {
                    return qp_op(bbs);
                }
                let e = EthSeg::new_unchecked(&w[16..32]);
                if e.inline_hdr_sz() != 0 || e.mss() != 0 {
                    return qp_op(bbs);
                }
                let cs = e.cs_flags();
                if cs != 0 && !self.opts.tx_csum {
                    return qp_op(bbs);
                }
                let mut frames = Vec::new();
                let mut at = 32;
                while at < w.len() {
                    let d = DataSeg::new_unchecked(&w[at..at + 16]);
                    let mut f = Vec::new();
                    if d.byte_count() & inline::INLINE_BIT != 0 {
                        let Ok(s) = InlineSeg::new_checked(&w[at..]) else {
                            return qp_op(bbs);
                        };
                        f.extend_from_slice(s.data());
                        at += 16 * inline::ds_for(s.len());
                    } else {
                        let len = d.byte_count();
                        if !self.mr_ok(d.lkey(), d.addr(), len) {
                            return Err((Fail(cqe::SYND_LOCAL_PROT_ERR), bbs));
                        }
                        if len < 14 || len > self.opts.max_frame {
                            return Err((Fail(cqe::SYND_LOCAL_LENGTH_ERR), bbs));
                        }
                        read_mem(d.addr(), len as usize, &mut f);
                        at += data::SIZE;
                    }
                    if cs != 0 {
                        net::fill_checksums(&mut f, cs & eth::CS_L3 != 0, cs & eth::CS_L4 != 0);
                    }
                    frames.push(f);
                }
                p(frames)
            }
            _ => qp_op(bbs),
        }
    }

    fn pull_bridge(&mut self) -> usize {
        let Link::Bridge(s) = &self.link else {
            return 0;
        };
        let mut n = 0;
        let mut q = self.inbox.lock();
        while q.len() < self.inbox.cap {
            let mut buf = Vec::new();
            if s.recv(&mut buf).is_none() {
                break;
            }
            q.push_back(buf);
            n += 1;
        }
        n
    }

    /// Moves frames from the inbox into the RQs.
    fn receive(&mut self) -> usize {
        let mut n = 0;
        loop {
            let Some(frame) = self.inbox.lock().pop_front() else {
                break;
            };
            n += 1;
            match self.rx_frame(&frame) {
                Deliver::Done => {}
                Deliver::Wait => {
                    self.inbox.lock().push_front(frame);
                    n -= 1;
                    break;
                }
            }
        }
        n
    }

    fn rx_frame(&mut self, frame: &[u8]) -> Deliver {
        if frame.len() < self.opts.min_frame as usize {
            self.counters.rx_runt += 1;
            return Deliver::Done;
        }
        if frame.len() > self.opts.max_frame as usize {
            self.counters.rx_oversize += 1;
            return Deliver::Done;
        }
        // Steering.
        let mut tag = 0u32;
        let mut rss_set: Option<Vec<u16>> = None;
        let mut queue = 0usize;
        if !self.opts.rules.is_empty() {
            match flow::classify(&self.opts.rules, frame) {
                None => {
                    self.counters.rx_to_kernel += 1;
                    return Deliver::Done;
                }
                Some(r) => {
                    tag = self
                        .opts
                        .rules
                        .iter()
                        .position(|x| std::ptr::eq(x, r))
                        .unwrap_or(0) as u32
                        + 1;
                    match &r.action {
                        Action::Drop => {
                            self.counters.rx_rule_drop += 1;
                            return Deliver::Done;
                        }
                        Action::Queue(qi) => queue = *qi as usize,
                        Action::Rss(qs) => rss_set = Some(qs.clone()),
                    }
                }
            }
        } else if self.qs.len() > 1 {
            rss_set = Some((0..self.qs.len() as u16).collect());
        }
        // VLAN strip.
        let mut f = std::mem::take(&mut self.scratch);
        f.clear();
        let mut vlan = None;
        if self.opts.vlan_strip && frame.len() >= 18 && frame[12] == 0x81 && frame[13] == 0x00 {
            vlan = Some(u16::from_be_bytes([frame[14], frame[15]]));
            f.extend_from_slice(&frame[..12]);
            f.extend_from_slice(&frame[16..]);
        } else {
            f.extend_from_slice(frame);
        }
        let info = net::analyze(&f);
        if let Some(set) = rss_set {
            if !set.is_empty() {
                queue = set[(info.hash as usize) % set.len()] as usize;
            }
        }
        let r = if queue < self.qs.len() && self.qs[queue].open {
            self.deliver(queue, &f, &info, vlan, tag)
        } else {
            self.counters.rx_no_buffer += 1;
            Deliver::Done
        };
        self.scratch = f;
        r
    }

    fn base_rx_cqe(info: &net::RxInfo, vlan: Option<u16>, tag: u32) -> [u8; 64] {
        let mut b = [0u8; 64];
        let mut c = Cqe::new_unchecked(&mut b);
        c.set_rx_hash(info.hash);
        c.set_rx_hash_type(info.hash_type);
        c.set_hds_ip_ext(info.hds_ip_ext);
        let mut t = info.hdr_type;
        if let Some(v) = vlan {
            t |= cqe::CV;
            c.set_vlan_info(v);
        }
        c.set_l4_hdr_type_etc(t);
        c.set_sop_drop_qpn(tag & 0xff_ffff);
        c.set_op_own(cqe::OP_RESP_SEND << 4);
        b
    }

    fn rx_error_cqe(&mut self, i: usize, wqe: u16, synd: u8) {
        let q = &mut self.qs[i];
        let mut b = [0u8; 64];
        let mut c = Cqe::new_unchecked(&mut b);
        c.set_wqe_counter(wqe);
        c.set_syndrome(0, synd);
        c.set_sop_drop_qpn(q.sqn);
        c.set_op_own(cqe::OP_RESP_ERR << 4);
        q.pending_rx.push_back(b);
        q.rq_err = true;
        self.counters.rx_error_cqes += 1;
    }

    fn deliver(
        &mut self,
        i: usize,
        f: &[u8],
        info: &net::RxInfo,
        vlan: Option<u16>,
        tag: u32,
    ) -> Deliver {
        let fc = self.opts.flow_control;
        let no_buf = |s: &mut Self| {
            if fc {
                Deliver::Wait
            } else {
                s.counters.rx_no_buffer += 1;
                Deliver::Done
            }
        };
        let q = &self.qs[i];
        if q.rq_err {
            self.counters.rx_in_error += 1;
            return Deliver::Done;
        }
        // Room in the CQ for this frame's CQE(s) (a filler, the packet) beyond what is pending.
        if (q.rxcq.space(&q.mem) as usize) < q.pending_rx.len() + 2 {
            return no_buf(self);
        }
        let posted = q.mem.db_load(mem::DB_RQ) as u16;
        let avail = posted.wrapping_sub(q.rq_ci) as u32;
        let has_wqe = avail > 0 && avail <= q.mem.g.rq_cnt;
        let stride = q.mem.g.rq_stride as usize;
        let rq_cnt = q.mem.g.rq_cnt;
        let wqe_off = |ci: u16| q.mem.rq + ((ci as u32 & (rq_cnt - 1)) as usize) * stride;
        match self.opts.rx {
            RxKind::Cyclic { .. } => {
                if !has_wqe {
                    return no_buf(self);
                }
                let ci = q.rq_ci;
                let mut w = vec![0u8; stride];
                q.mem.read(wqe_off(ci), &mut w);
                let mut segs = Vec::new();
                for k in 0..stride / 16 {
                    let d = DataSeg::new_unchecked(&w[16 * k..16 * k + 16]);
                    if d.is_terminator() {
                        break;
                    }
                    segs.push((d.lkey(), d.addr(), d.byte_count()));
                }
                if segs.iter().any(|&(k, a, l)| !self.mr_ok(k, a, l)) {
                    self.qs[i].rq_ci = ci.wrapping_add(1);
                    self.rx_error_cqe(i, ci, cqe::SYND_LOCAL_PROT_ERR);
                    return Deliver::Done;
                }
                let room: u64 = segs.iter().map(|s| s.2 as u64).sum();
                if (f.len() as u64) > room {
                    self.qs[i].rq_ci = ci.wrapping_add(1);
                    self.rx_error_cqe(i, ci, cqe::SYND_LOCAL_LENGTH_ERR);
                    return Deliver::Done;
                }
                let mut off = 0;
                for &(_, a, l) in &segs {
                    if off == f.len() {
                        break;
                    }
                    let k = (l as usize).min(f.len() - off);
                    write_mem(a, &f[off..off + k]);
                    off += k;
                }
                let mut b = Self::base_rx_cqe(info, vlan, tag);
                let mut c = Cqe::new_unchecked(&mut b);
                c.set_byte_cnt(f.len() as u32);
                c.set_wqe_counter(ci);
                let q = &mut self.qs[i];
                q.rq_ci = ci.wrapping_add(1);
                q.pending_rx.push_back(b);
            }
            RxKind::Striding(s) => {
                let num = 1u32 << s.log_num_strides;
                let ssz = 1u32 << s.log_stride_size;
                let shift = if s.two_byte_shift { 2 } else { 0 };
                let need = (f.len() as u32 + shift).div_ceil(ssz);
                if need > num {
                    self.counters.rx_oversize += 1;
                    return Deliver::Done;
                }
                if self.qs[i].cur.is_some() && self.qs[i].stride_pos + need > num {
                    // Close the WQE with a filler.
                    let q = &mut self.qs[i];
                    let left = num - q.stride_pos;
                    let mut b = [0u8; 64];
                    let mut c = Cqe::new_unchecked(&mut b);
                    c.set_wqe_id(q.rq_ci);
                    c.set_wqe_counter(q.stride_pos as u16);
                    c.set_byte_cnt(cqe::mprq_byte_cnt(0, left as u16, true));
                    c.set_op_own(cqe::OP_RESP_SEND << 4);
                    q.pending_rx.push_back(b);
                    q.rq_ci = q.rq_ci.wrapping_add(1);
                    q.stride_pos = 0;
                    q.cur = None;
                    self.counters.fillers += 1;
                    return self.deliver(i, f, info, vlan, tag);
                }
                if self.qs[i].cur.is_none() {
                    let q = &self.qs[i];
                    let posted = q.mem.db_load(mem::DB_RQ) as u16;
                    let avail = posted.wrapping_sub(q.rq_ci) as u32;
                    if avail == 0 || avail > rq_cnt {
                        return no_buf(self);
                    }
                    let ci = q.rq_ci;
                    let mut w = vec![0u8; stride];
                    q.mem.read(
                        q.mem.rq + ((ci as u32 & (rq_cnt - 1)) as usize) * stride,
                        &mut w,
                    );
                    let mut segs = Vec::new();
                    let mut total = 0u64;
                    let mut bad = false;
                    for k in 1..stride / 16 {
                        let d = DataSeg::new_unchecked(&w[16 * k..16 * k + 16]);
                        if d.is_terminator() || total >= (num * ssz) as u64 {
                            break;
                        }
                        if !self.mr_ok(d.lkey(), d.addr(), d.byte_count()) {
                            bad = true;
                        }
                        total += d.byte_count() as u64;
                        segs.push((d.addr(), d.byte_count()));
                    }
                    if bad {
                        self.qs[i].rq_ci = ci.wrapping_add(1);
                        self.rx_error_cqe(i, ci, cqe::SYND_LOCAL_PROT_ERR);
                        return Deliver::Done;
                    }
                    if total < (num * ssz) as u64 {
                        self.qs[i].rq_ci = ci.wrapping_add(1);
                        self.rx_error_cqe(i, ci, cqe::SYND_LOCAL_LENGTH_ERR);
                        return Deliver::Done;
                    }
                    let q = &mut self.qs[i];
                    q.cur = Some(segs);
                    q.stride_pos = 0;
                }
                let q = &mut self.qs[i];
                let Some(segs) = q.cur.as_ref() else {
                    return Deliver::Done;
                };
                // Scatter into the logical buffer at stride_pos * ssz (+ 2 zero pad bytes).
                let start = (q.stride_pos * ssz) as u64;
                let pad = [0u8; 2];
                let mut bytes: Vec<&[u8]> = Vec::with_capacity(2);
                if shift > 0 {
                    bytes.push(&pad[..]);
                }
                bytes.push(f);
                scatter(segs, start, &bytes);
                let mut b = Self::base_rx_cqe(info, vlan, tag);
                let mut c = Cqe::new_unchecked(&mut b);
                c.set_wqe_id(q.rq_ci);
                c.set_wqe_counter(q.stride_pos as u16);
                c.set_byte_cnt(cqe::mprq_byte_cnt(f.len() as u16, need as u16, false));
                q.pending_rx.push_back(b);
                q.stride_pos += need;
                if q.stride_pos == num {
                    q.stride_pos = 0;
                    q.cur = None;
                    q.rq_ci = q.rq_ci.wrapping_add(1);
                }
            }
        }
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += f.len() as u64;
        Deliver::Done
    }

    /// Writes the pending receive CQEs, compressing runs when configured.
    fn flush_rx(&mut self, i: usize) -> usize {
        let fmt = self.opts.cqe_compression;
        let q = &mut self.qs[i];
        let mut n = 0;
        while let Some(first) = q.pending_rx.front().copied() {
            let space = q.rxcq.space(&q.mem) as usize;
            if let Some(fmt) = fmt {
                let mut run = 1;
                while run < q.pending_rx.len()
                    && run < 64
                    && run < space
                    && compressible(fmt, &first, &q.pending_rx[run], run)
                {
                    run += 1;
                }
                if run >= 2 {
                    let items: Vec<[u8; 64]> = q.pending_rx.drain(..run).collect();
                    write_session(&mut q.rxcq, &q.mem, fmt, &items);
                    self.counters.compressed_sessions += 1;
                    self.counters.mini_cqes += run as u64;
                    n += run;
                    continue;
                }
            }
            if space == 0 {
                break;
            }
            q.pending_rx.pop_front();
            let op = first[63] >> 4;
            q.rxcq.write(&q.mem, &first, op, 0, 1);
            n += 1;
        }
        n
    }
}

enum Deliver {
    Done,
    Wait,
}

fn reset_sq_state(q: &mut QState) {
    q.sq_ci = 0;
    q.sq_err = false;
    q.delayed_tx.clear();
    q.tx_delay = 0;
}

fn reset_rq_state(q: &mut QState) {
    q.rq_ci = 0;
    q.rq_err = false;
    q.stride_pos = 0;
    q.cur = None;
    q.pending_rx.clear();
}

/// Reads `len` bytes of registered memory at `addr` (checked with `mr_ok` by the caller).
fn read_mem(addr: u64, len: usize, out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + len, 0);
    // SAFETY: the range is inside a registered pool region (checked against the MR list); the
    // driver handed these bytes to the device with a release store of the doorbell record.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr().add(at), len) };
}

/// Writes `bytes` to registered memory at `addr` (checked by the caller).
fn write_mem(addr: u64, bytes: &[u8]) {
    // SAFETY: the range is inside a registered pool region and belongs to a posted receive
    // buffer, which the driver does not touch until it sees the CQE.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
}

/// Writes the concatenation of `parts` at logical offset `start` of the buffer made of `segs`.
fn scatter(segs: &[(u64, u32)], start: u64, parts: &[&[u8]]) {
    let mut seg = 0;
    let mut seg_start = 0u64;
    while seg < segs.len() && seg_start + segs[seg].1 as u64 <= start {
        seg_start += segs[seg].1 as u64;
        seg += 1;
    }
    let mut pos = start;
    for p in parts {
        let mut off = 0;
        while off < p.len() && seg < segs.len() {
            let (a, l) = segs[seg];
            let in_seg = pos - seg_start;
            let k = ((l as u64 - in_seg) as usize).min(p.len() - off);
            write_mem(a + in_seg, &p[off..off + k]);
            off += k;
            pos += k as u64;
            if pos - seg_start == l as u64 {
                seg_start += l as u64;
                seg += 1;
            }
        }
    }
}

/// Bytes that a session's mini-CQEs carry (or that are per-entry) and so need not agree.
fn masked(fmt: MiniCqeFormat, b: &[u8; 64]) -> [u8; 64] {
    let mut x = *b;
    let zero = |x: &mut [u8; 64], r: std::ops::Range<usize>| x[r].fill(0);
    match fmt {
        MiniCqeFormat::Hash => zero(&mut x, cqe::field::RX_HASH),
        MiniCqeFormat::CsumStrideIdx => zero(&mut x, cqe::field::CHECKSUM),
    }
    zero(&mut x, cqe::field::BYTE_CNT);
    zero(&mut x, cqe::field::WQE_COUNTER);
    x[63] = 0;
    x
}

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

/// Writes a compressed session: mini-CQE arrays at CI+1, CI+8, CI+16, … then the title at CI.
fn write_session(cq: &mut CqW, m: &QueueMem, fmt: MiniCqeFormat, items: &[[u8; 64]]) {
    let n = items.len();
    for (k, chunk) in items.chunks(mini_cqe::PER_SLOT).enumerate() {
        let mut arr = [0u8; 64];
        for (j, it) in chunk.iter().enumerate() {
            let c = Cqe::new_unchecked(it);
            let mut mc = MiniCqe::new_unchecked(&mut arr[j * 8..j * 8 + 8]);
            match fmt {
                MiniCqeFormat::Hash => mc.set_rx_hash(c.rx_hash()),
                MiniCqeFormat::CsumStrideIdx => {
                    mc.set_checksum(c.checksum());
                    mc.set_stride_idx(c.wqe_counter());
                }
            }
            mc.set_byte_cnt(c.byte_cnt());
        }
        let slot = if k == 0 { 1 } else { 8 * k as u32 };
        cq.write_raw(m, slot, &arr);
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    let mut title = items[0];
    Cqe::new_unchecked(&mut title).set_byte_cnt(n as u32);
    cq.write(
        m,
        &title,
        cqe::OP_RESP_SEND,
        cqe::FORMAT_COMPRESSED,
        n as u32,
    );
}
