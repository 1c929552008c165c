//! The device's receive side: take frames from the wire, apply the flow rules, fill cyclic or
//! striding RQ buffers, and write receive CQEs (compressed into title + mini-CQE sessions when
//! configured).

use super::*;

impl PortState {
    pub(super) fn pull_bridge(&mut self) -> usize {
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
    pub(super) fn receive(&mut self) -> usize {
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
        // Only the syndromes DPDK treats as fatal put the RQ in error (DPDK
        // drivers/net/mlx5/mlx5_rx.c, mlx5_rx_err_handle: LOCAL_QP_OP_ERR, LOCAL_PROT_ERR,
        // WR_FLUSH_ERR reset the WQ; any other syndrome, such as LOCAL_LENGTH_ERR, is skipped
        // and the queue keeps receiving).
        q.rq_err |= synd != cqe::SYND_LOCAL_LENGTH_ERR;
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
    pub(super) fn flush_rx(&mut self, i: usize) -> usize {
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
