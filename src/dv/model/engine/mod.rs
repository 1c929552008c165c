//! The model's device logic: what happens on each `process` step.

mod rq;
mod sq;

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
