//! The model's strictness, with WQEs written by hand (not by the data path).

use super::*;
use crate::dv::rings::Striding;
use crate::dv::wire::{cqe, ctrl, Cqe, CtrlSeg, DataSeg, EthSeg};
use rawq_model::mem;
use std::sync::Arc;

struct Raw {
    port: ModelPort,
    rings: QueueRings,
    pool: Mempool,
    _keep: Arc<mem::QueueMem>,
    pi: u16,
    cq_ci: u32,
}

fn raw(o: ModelOptions) -> Raw {
    let pool = crate::mempool::test_pool(64);
    let port = ModelPort::new(ModelOptions {
        wire: ModelWire::Sink,
        ..o
    })
    .unwrap();
    let (rings, keep) = port.open_queue(0, &pool).unwrap();
    Raw {
        port,
        rings,
        pool,
        _keep: keep,
        pi: 0,
        cq_ci: 0,
    }
}

impl Raw {
    #[allow(clippy::mut_from_ref)]
    fn wqebb(&self, bb: u16) -> &mut [u8; 64] {
        let o = (bb as u32 & (self.rings.sq.wqe_cnt - 1)) as usize * 64;
        // SAFETY: inside the SQ ring of a queue no data path drives.
        unsafe { &mut *(self.rings.sq.buf.as_ptr().add(o) as *mut [u8; 64]) }
    }

    /// Writes a one-WQEBB SEND: `f` lets the test spoil it.
    fn post(&mut self, len: u32, inline: u16, f: impl FnOnce(&mut [u8; 64])) {
        let (base, _) = self.pool.region();
        let addr = base as u64 + 4096;
        let (qpn, lkey, pi) = (self.rings.sq.sqn, self.rings.lkey, self.pi);
        let bb = self.wqebb(pi);
        bb.fill(0);
        let ds = if inline > 0 { 4 } else { 3 };
        CtrlSeg::new_unchecked(&mut bb[0..16]).fill(
            0,
            pi,
            ctrl::OPCODE_SEND,
            qpn,
            ds,
            ctrl::CE_ALWAYS,
            0,
        );
        let eth_len = if inline > 0 { 32 } else { 16 };
        EthSeg::new_unchecked(&mut bb[16..16 + eth_len]).fill(0, inline);
        let d = 16 + eth_len;
        DataSeg::new_unchecked(&mut bb[d..d + 16]).fill(len - inline as u32, lkey, addr);
        f(bb);
        self.pi = self.pi.wrapping_add(1);
        crate::dv::mmio::dbrec_store(self.rings.sq.dbrec, self.pi as u32);
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.wqebb(pi)[..8]);
        // SAFETY: the model's fake UAR register.
        unsafe { crate::dv::mmio::uar_write64(self.rings.sq.bf_reg.as_ptr(), first) };
    }

    /// The next send CQE: (opcode, syndrome, wqe_counter).
    fn cqe(&mut self) -> Option<(u8, u8, u16)> {
        let o = (self.cq_ci & (self.rings.tx_cq.cqe_cnt - 1)) as usize * 64;
        let mut b = [0u8; 64];
        // SAFETY: inside the CQ ring.
        unsafe {
            std::ptr::copy_nonoverlapping(self.rings.tx_cq.buf.as_ptr().add(o), b.as_mut_ptr(), 64)
        };
        let c = Cqe::new_unchecked(&b);
        let owner = ((self.cq_ci / self.rings.tx_cq.cqe_cnt) & 1) as u8;
        if c.opcode() == cqe::OP_INVALID || c.owner() != owner {
            return None;
        }
        self.cq_ci += 1;
        crate::dv::mmio::dbrec_store(self.rings.tx_cq.dbrec, self.cq_ci);
        Some((c.opcode(), c.syndrome(), c.wqe_counter()))
    }
}

fn expect_error(
    o: ModelOptions,
    len: u32,
    inline: u16,
    spoil: impl FnOnce(&mut [u8; 64]),
    synd: u8,
) {
    let o_inline = o.min_inline;
    let mut r = raw(o);
    r.post(len, inline, spoil);
    r.port.process();
    assert_eq!(r.cqe(), Some((cqe::OP_REQ_ERR, synd, 0)));
    // Everything after it is flushed until a reset.
    r.post(100, inline, |_| {});
    r.port.process();
    assert_eq!(r.cqe(), Some((cqe::OP_REQ_ERR, cqe::SYND_WR_FLUSH_ERR, 1)));
    r.port.recover_hook(0).recover_sq().unwrap();
    r.pi = 0;
    crate::dv::mmio::dbrec_store(r.rings.sq.dbrec, 0);
    r.post(100, o_inline, |_| {});
    r.port.process();
    assert_eq!(r.cqe(), Some((cqe::OP_REQ, 0, 0)));
    assert_eq!(r.port.counters().tx_frames, 1);
}

#[test]
fn a_good_wqe_completes() {
    let mut r = raw(ModelOptions::default());
    r.post(100, 0, |_| {});
    r.port.process();
    assert_eq!(r.cqe(), Some((cqe::OP_REQ, 0, 0)));
    assert_eq!(r.port.counters().doorbell_mismatch, 0);
}

#[test]
fn bad_lkey_and_address_are_protection_errors() {
    expect_error(
        ModelOptions::default(),
        100,
        0,
        |b| b[36] ^= 0x40,
        cqe::SYND_LOCAL_PROT_ERR,
    );
    expect_error(
        ModelOptions::default(),
        100,
        0,
        |b| b[40] ^= 0x80,
        cqe::SYND_LOCAL_PROT_ERR,
    );
    // A length that runs past the end of the region.
    expect_error(
        ModelOptions::default(),
        64 * 2048,
        0,
        |_| {},
        cqe::SYND_LOCAL_PROT_ERR,
    );
}

#[test]
fn bad_opcode_ds_index_and_inline_are_qp_op_errors() {
    let qp = cqe::SYND_LOCAL_QP_OP_ERR;
    expect_error(ModelOptions::default(), 100, 0, |b| b[3] = 0x0b, qp);
    expect_error(ModelOptions::default(), 100, 0, |b| b[7] = 0, qp);
    expect_error(ModelOptions::default(), 100, 0, |b| b[2] = 9, qp);
    expect_error(
        ModelOptions::default(),
        100,
        0,
        |b| b[3] = ctrl::OPCODE_ENHANCED_MPSW,
        qp,
    );
    let need18 = ModelOptions {
        min_inline: 18,
        ..Default::default()
    };
    expect_error(need18, 100, 0, |_| {}, qp);
}

#[test]
fn bad_lengths_are_length_errors() {
    expect_error(
        ModelOptions::default(),
        1600,
        0,
        |_| {},
        cqe::SYND_LOCAL_LENGTH_ERR,
    );
    expect_error(
        ModelOptions::default(),
        10,
        0,
        |_| {},
        cqe::SYND_LOCAL_LENGTH_ERR,
    );
}

#[test]
fn a_wrong_doorbell_is_noticed() {
    let mut r = raw(ModelOptions::default());
    r.post(100, 0, |_| {});
    // SAFETY: the model's fake UAR register (both halves).
    unsafe {
        crate::dv::mmio::uar_write64(r.rings.sq.bf_reg.as_ptr(), [9; 8]);
    }
    r.port.process();
    assert_eq!(r.port.counters().doorbell_mismatch, 1);
}

/// A device writing garbage CQEs (valid ownership, random contents) must not make the data path
/// panic, corrupt the pool or lose buffers.
#[test]
fn garbage_cqes_do_not_panic_or_leak() {
    use crate::dv::queue::{DvQueue, NoRecover};
    use crate::queue::QueueOps;
    for (seed, rx) in [
        (1u64, RxKind::Cyclic { sges: 2 }),
        (
            2,
            RxKind::Striding(Striding {
                log_num_strides: 3,
                log_stride_size: 9,
                two_byte_shift: true,
            }),
        ),
    ] {
        let opts = ModelOptions {
            rx,
            cqe_compression: Some(if matches!(rx, RxKind::Cyclic { .. }) {
                MiniCqeFormat::Hash
            } else {
                MiniCqeFormat::CsumStrideIdx
            }),
            ..Default::default()
        };
        let r = raw(opts);
        let rings = r.rings;
        // SAFETY: the rings point into `r._keep`, alive for this test; the model is not run.
        let mut q = unsafe {
            DvQueue::new(
                0,
                rings,
                &r.pool,
                Box::new(NoRecover),
                Box::new(r._keep.clone()),
            )
        }
        .unwrap();
        let mut x = seed;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::new();
        let mut pkts = Vec::new();
        for round in 0..200u32 {
            for (cq, n) in [(rings.rx_cq, 8u32), (rings.tx_cq, 2)] {
                for k in 0..n {
                    let ci = round * n + k;
                    let o = (ci & (cq.cqe_cnt - 1)) as usize * 64;
                    let mut b = [0u8; 64];
                    for v in b.iter_mut() {
                        *v = rnd() as u8;
                    }
                    let owner = ((ci / cq.cqe_cnt) & 1) as u8;
                    let op = [0u8, 2, 13, 14, 2, 2][(rnd() % 6) as usize];
                    b[63] = op << 4 | (b[63] & 0x0c) | owner;
                    // SAFETY: inside the CQ ring of this queue.
                    unsafe {
                        std::ptr::copy_nonoverlapping(b.as_ptr(), cq.buf.as_ptr().add(o), 64)
                    };
                }
            }
            q.rx_burst(&mut out, 64);
            out.clear();
            if let Ok(p) = r.pool.alloc() {
                pkts.push(p);
            }
            q.tx_burst(&mut pkts);
            pkts.clear();
            let _ = q.take_error();
        }
        drop(q);
        drop(r.port);
        r.pool.flush_local_cache();
        // Whatever the garbage said, every buffer is home exactly once.
        assert_eq!(r.pool.available(), r.pool.capacity());
    }
}

/// One poll per round; a round that found nothing is idle; work time comes only from the
/// device's own thread.
#[test]
fn polls_that_find_work_are_told_from_idle_ones() {
    let mut r = raw(ModelOptions::default());
    let c = r.port.counters();
    assert_eq!((c.polls, c.idle_polls), (0, 0));
    assert_eq!(r.port.process(), 0);
    assert_eq!(r.port.process(), 0);
    let c = r.port.counters();
    assert_eq!((c.polls, c.idle_polls), (2, 2));
    r.post(100, 0, |_| {});
    assert!(r.port.process() > 0);
    let c = r.port.counters();
    assert_eq!((c.polls, c.idle_polls, c.work_ns), (3, 2, 0));
    assert_eq!(r.cqe(), Some((cqe::OP_REQ, 0, 0)));
}

/// The device's thread: idle polls while nothing is posted (and no work time), then work time
/// and a poll that found work once a WQE is posted.
#[test]
fn the_device_thread_counts_work_time_and_idle_polls() {
    let mut r = raw(ModelOptions::default());
    let port = r.port.clone();
    let t = port.spawn();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let wait = |what: &str, ok: &dyn Fn(&ModelCounters) -> bool| loop {
        let c = port.counters();
        if ok(&c) {
            return c;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {c:?}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    let c = wait("idle polls", &|c| c.idle_polls >= 100);
    assert_eq!(c.polls, c.idle_polls, "nothing was posted: {c:?}");
    assert_eq!(c.work_ns, 0, "nothing was posted: {c:?}");
    r.post(100, 0, |_| {});
    let c = wait("work time", &|c| c.work_ns > 0 && c.tx_frames == 1);
    assert_eq!(c.polls - c.idle_polls, 1, "one round found the WQE: {c:?}");
    assert_eq!(r.cqe(), Some((cqe::OP_REQ, 0, 0)));
    drop(t);
}

/// A port's mlx5 receive options (`PortBuilder::dv_rx`) reach the model as they reach the DV
/// backend: the RQ type and the CQE compression asked for are the ones the device runs, and
/// frames go round through them.
#[test]
fn a_model_port_takes_the_dv_rx_options_of_its_configuration() {
    use crate::dv::options::{CqeComp, DvRxOptions, MiniCqeFormat, RqType};
    use crate::{Backend, Port};
    let cases = [
        (
            DvRxOptions {
                rq: RqType::Striding { log_num_strides: 4 },
                cqe_comp: Some(CqeComp::Csum),
            },
            Some(MiniCqeFormat::CsumStrideIdx),
        ),
        (
            DvRxOptions {
                rq: RqType::Cyclic,
                cqe_comp: Some(CqeComp::Hash),
            },
            Some(MiniCqeFormat::Hash),
        ),
        (DvRxOptions::default(), None),
    ];
    for (rx, format) in cases {
        let mut port = Port::builder(Backend::Model(ModelOptions::default()))
            .dv_rx(rx)
            .rx_ring(256)
            .tx_ring(256)
            .open()
            .expect("model port");
        let buf = port.pool().buf_size();
        let m = port.model_port().expect("a model port has its device");
        let want = match rx.striding(buf) {
            Some(s) => RxKind::Striding(s),
            None => RxKind::Cyclic { sges: 1 },
        };
        assert_eq!(m.rx_kind(), want, "{rx:?}");
        assert_eq!(m.caps().cqe_compression, format, "{rx:?}");

        let q = port.queue(0).expect("queue 0");
        let mut frame = [0u8; 64];
        frame[..6].fill(0xff);
        frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        let mut burst = Vec::with_capacity(32);
        q.alloc_burst(&mut burst, 32).expect("buffers");
        for p in burst.iter_mut() {
            p.copy_from_slice(&frame).expect("frame fits");
        }
        assert_eq!(q.tx_burst(&mut burst), 32, "{rx:?}");
        let mut got = Vec::with_capacity(64);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < 32 && std::time::Instant::now() < deadline {
            let mut b = Vec::with_capacity(32);
            q.rx_burst(&mut b, 32);
            got.append(&mut b);
        }
        assert_eq!(
            got.len(),
            32,
            "{rx:?}: frames received back on the loopback wire"
        );
        assert!(got.iter().all(|p| p.data() == frame.as_slice()), "{rx:?}");
    }
}
