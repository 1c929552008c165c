//! The send side's completions: requester CQEs, freeing the buffers of completed WQEs in bulk,
//! and what an error or a reset leaves behind.

use super::*;

impl Tx {
    /// The record of a CQE for WQE `wqe`, if it completes more than `done` (the last record
    /// applied or about to be; `None`: the current state): a stale or foreign counter would
    /// free buffers we do not hold.
    #[inline(always)]
    fn completion(&self, wqe: u16, done: Option<WqeRec>) -> Option<WqeRec> {
        let r = self.recs[(wqe as u32 & self.mask) as usize];
        let (ci, buf_ci, pkts_done) = match done {
            Some(d) => (d.end, d.buf_end, d.pkt_end),
            None => (self.ci, self.buf_ci, self.pkts_done),
        };
        let in_flight = self.pi.wrapping_sub(ci);
        let bufs_out = self.buf_pi.wrapping_sub(buf_ci);
        let pkts_out = self.pkts_posted.wrapping_sub(pkts_done);
        let bad = r.end.wrapping_sub(ci) > in_flight
            || r.end == ci
            || r.buf_end.wrapping_sub(buf_ci) > bufs_out
            || r.pkt_end.wrapping_sub(pkts_done) > pkts_out;
        (!bad).then_some(r)
    }

    /// Completes every WQE up to the record `r` (from [`Tx::completion`]): one bulk return of
    /// the buffers (their packets were counted in `tx_packets` when posted).
    fn complete(&mut self, r: WqeRec, cache: &mut PoolCache) {
        self.free_bufs_to(r.buf_end, cache);
        self.completed_any |= r.pkt_end != self.pkts_done;
        self.pkts_done = r.pkt_end;
        self.bytes_done = r.byte_end;
        self.ci = r.end;
    }

    /// Returns the buffers of the ring from `buf_ci` up to `end` to `cache`, in at most two
    /// slices (the ring may wrap).
    #[inline(always)]
    fn free_bufs_to(&mut self, end: u32, cache: &mut PoolCache) {
        let n = end.wrapping_sub(self.buf_ci) as usize;
        let from = (self.buf_ci & self.buf_mask) as usize;
        let first = n.min(self.bufs.len() - from);
        cache.put_slice(&self.bufs[from..from + first]);
        if first < n {
            cache.put_slice(&self.bufs[..n - first]);
        }
        self.buf_ci = end;
    }

    /// Takes completions off the send CQ; stops at an error CQE and returns it. The CQEs of one
    /// call are applied together (the records are cumulative: the last good one covers the
    /// others), so a batch of them frees its buffers in one bulk return.
    ///
    /// An empty CQ (three bursts of four with a completion every 128 packets) costs one
    /// inlined ownership test; the poll itself is out of line. Nothing is left to publish
    /// then: every poll publishes the consumer index it moved.
    #[inline(always)]
    pub(crate) fn poll(&mut self, stats: &StatsWriter, cache: &mut PoolCache) -> Option<TxErr> {
        if !self.cq.ready() {
            return None;
        }
        self.poll_cqes(stats, cache)
    }

    /// [`Tx::poll`] once a CQE is there.
    #[inline(never)]
    fn poll_cqes(&mut self, stats: &StatsWriter, cache: &mut PoolCache) -> Option<TxErr> {
        let mut err = None;
        let mut done = None;
        while let Some(c) = self.cq.peek() {
            let q = Cqe::new_unchecked(c);
            match q.opcode() {
                cqe::OP_REQ => {
                    // A CQE naming no WQE still outstanding (the device completing WQEs a
                    // reset already dropped) is no packet: counting it in `tx_errors` closed
                    // the send ledger one over what was taken (campaign seed 28).
                    match self.completion(q.wqe_counter(), done) {
                        Some(r) => done = Some(r),
                        None => log::debug!(
                            "send CQE for WQE {} ignored: no such WQE outstanding",
                            q.wqe_counter()
                        ),
                    }
                    self.pending_reqs = self.pending_reqs.saturating_sub(1);
                }
                cqe::OP_REQ_ERR => {
                    err = Some(TxErr {
                        wqe: q.wqe_counter(),
                        syndrome: q.syndrome(),
                        vendor: q.vendor_err_synd(),
                        opcode: q.s_wqe_opcode(),
                    });
                    self.cq.ci = self.cq.ci.wrapping_add(1);
                    break;
                }
                _ => stats.add(Counter::TxErrors, 1),
            }
            self.cq.ci = self.cq.ci.wrapping_add(1);
        }
        if let Some(r) = done {
            self.complete(r, cache);
        }
        self.cq.publish();
        err
    }

    /// Reads back the WQE this driver wrote at `start`: (WQEBBs, packets, bytes, pool buffers
    /// it holds). The device never writes SQ memory.
    fn summary(&self, start: u16) -> (u16, u32, u64, u32) {
        let bb = self.wqebb(start);
        let c = ctrl::CtrlSeg::new_unchecked(&bb[0..16]);
        let ds = (c.ds() & 0x3f) as u32;
        let (first, pkts, mut bytes) = match c.opcode() {
            ctrl::OPCODE_SEND => {
                let e = eth::EthSeg::new_unchecked(&bb[16..32]);
                let inl = e.inline_hdr_sz() as usize;
                (1 + (eth::size_for_inline(inl) / 16) as u32, 1, inl as u64)
            }
            ctrl::OPCODE_ENHANCED_MPSW => (2, ds.saturating_sub(2), 0),
            _ => (ds, 0, 0),
        };
        for k in first..ds {
            bytes += data::DataSeg::new_unchecked(&self.ds(start, k)[..]).byte_count() as u64;
        }
        (ds.div_ceil(4).max(1) as u16, pkts, bytes, c.imm())
    }

    /// After an error CQE for WQE `wqe`: completes the WQEs before it (reading them back from
    /// the ring), so that only the failed WQE and those after it are outstanding.
    /// Their packets were counted in `tx_packets` when posted.
    pub(crate) fn complete_before(&mut self, wqe: u16, cache: &mut PoolCache) {
        // `buf_ci` is the buffer-ring position of WQE `ci` (the two move together).
        let (mut s, mut pkts, mut bytes, mut bufs, mut guard) = (self.ci, 0u32, 0u64, 0u32, 0);
        while s != wqe && s != self.pi && guard < self.wqe_cnt {
            let (bbs, p, b, nb) = self.summary(s);
            pkts += p;
            bytes += b;
            bufs = bufs.wrapping_add(nb);
            s = s.wrapping_add(bbs);
            guard += 1;
        }
        if s != wqe || s == self.pi {
            return; // not a WQE start we know: leave everything outstanding
        }
        if bufs > self.buf_pi.wrapping_sub(self.buf_ci) {
            return;
        }
        let buf_pos = self.buf_ci.wrapping_add(bufs);
        self.free_bufs_to(buf_pos, cache);
        self.completed_any |= pkts > 0;
        self.pkts_done = self.pkts_done.wrapping_add(pkts);
        self.bytes_done = self.bytes_done.wrapping_add(bytes);
        self.ci = wqe;
    }

    /// The packets of the WQE at the consumer counter (after `complete_before`, the one
    /// an error CQE named); 0 when nothing is outstanding.
    pub(crate) fn packets_at_head(&self) -> u32 {
        if self.outstanding() == 0 {
            return 0;
        }
        self.summary(self.ci).1
    }

    /// Resets the SQ after the device side was recovered: drains the CQ, returns every
    /// outstanding buffer to `cache` moving its packets from `tx_packets` / `tx_bytes` (where
    /// they were counted when posted) to `tx_drops`, and restarts the counters at 0 (as the
    /// device does after RESET → RTS). Returns the packets dropped.
    pub(crate) fn reset(&mut self, stats: &StatsWriter, cache: &mut PoolCache) -> u32 {
        while self.cq.peek().is_some() {
            self.cq.ci = self.cq.ci.wrapping_add(1);
        }
        self.cq.publish();
        let dropped = self.uncount_outstanding(stats, Counter::TxDrops);
        self.free_bufs_to(self.buf_pi, cache);
        self.pkts_done = self.pkts_posted;
        self.bytes_done = self.bytes_posted;
        self.pi = 0;
        self.ci = 0;
        self.unreq_bbs = 0;
        self.unreq_pkts = 0;
        self.pending_reqs = 0;
        dropped
    }

    /// Moves the packets posted and not completed from `tx_packets` / `tx_bytes` (where they
    /// were counted when posted) to `into` (`tx_drops`; at the close, `tx_unsent_at_close` or
    /// `tx_fate_unknown`); returns how many. The counters wrap: adding the two's complement
    /// subtracts.
    pub(crate) fn uncount_outstanding(&self, stats: &StatsWriter, into: Counter) -> u32 {
        let dropped = self.outstanding();
        let bytes = self.bytes_posted.wrapping_sub(self.bytes_done);
        if dropped > 0 {
            stats.add(Counter::TxPackets, (dropped as u64).wrapping_neg());
            stats.add(Counter::TxBytes, bytes.wrapping_neg());
            stats.add(into, dropped as u64);
        }
        dropped
    }

    /// At the close, after the device stopped the SQ at WQE counter `to` (`Recover::stop_sq`):
    /// completes every WQE before `to` (the device carried them out, with or without a
    /// completion), so that only those it never started stay outstanding. A `to` that is no
    /// WQE start between the consumer and the producer counters completes nothing.
    pub(crate) fn complete_to(&mut self, to: u16, cache: &mut PoolCache) {
        if to == self.pi && self.outstanding() > 0 {
            self.free_bufs_to(self.buf_pi, cache);
            self.completed_any = true;
            self.pkts_done = self.pkts_posted;
            self.bytes_done = self.bytes_posted;
            self.ci = self.pi;
        } else {
            self.complete_before(to, cache);
        }
    }

    /// Writes 0 to the SQ doorbell record (before a reset of the device side).
    pub(crate) fn zero_dbrec(&mut self) {
        mmio::dbrec_store(self.dbrec, 0);
    }

    /// Returns every outstanding buffer (queue teardown; the device must be stopped).
    pub(crate) fn release_all(&mut self, cache: &mut PoolCache) {
        self.free_bufs_to(self.buf_pi, cache);
        self.pkts_done = self.pkts_posted;
        self.bytes_done = self.bytes_posted;
    }
}
