//! The device's send side: consume WQEs up to the doorbell, check them as the hardware would,
//! put frames on the wire, and write (requested or error) send CQEs.

use super::*;

impl PortState {
    pub(super) fn process_sq(&mut self, i: usize, check_uar: bool) -> usize {
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
}
