//! Error injection through the mlx5 device model: error CQEs, recovery, flushes, delayed
//! completions, full rings, runts and oversize frames. Counts must always add up.
#![cfg(feature = "mlx5")]

use rawq::dv::model::{ModelOptions, ModelPort, ModelWire, RxKind};
use rawq::dv::wire::cqe;
use rawq::{Error, HugePages, Mempool, MempoolConfig, Packet, Queue};

fn pool(buffers: u32) -> Mempool {
    Mempool::new(&MempoolConfig {
        buffers,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .expect("pool")
}

fn udp_frame(seq: u32, size: usize) -> Vec<u8> {
    let mut f = vec![0u8; size];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((size - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&1000u16.to_be_bytes());
    f[36..38].copy_from_slice(&2000u16.to_be_bytes());
    f[38..40].copy_from_slice(&((size - 34) as u16).to_be_bytes());
    f[42..46].copy_from_slice(&seq.to_be_bytes());
    f
}

fn seq_of(p: &Packet) -> u32 {
    let d = p.to_vec();
    u32::from_be_bytes([d[42], d[43], d[44], d[45]])
}

fn opts() -> ModelOptions {
    ModelOptions {
        sq_wqebbs: 64,
        rq_wqes: 256,
        wire: ModelWire::Sink,
        ..Default::default()
    }
}

struct Rig {
    pool: Mempool,
    a: ModelPort,
    b: ModelPort,
    tx: Queue,
    rx: Queue,
}

fn rig(o: ModelOptions) -> Rig {
    let pool = pool(4096);
    let (a, b) = ModelPort::pair(o.clone(), o).expect("ports");
    let tx = a.queue(0, &pool).expect("tx").into_queue();
    let rx = b.queue(0, &pool).expect("rx").into_queue();
    Rig { pool, a, b, tx, rx }
}

impl Rig {
    fn send(&mut self, seqs: std::ops::Range<u32>, size: usize) -> usize {
        let mut burst = Vec::new();
        for s in seqs {
            let mut p = self.pool.alloc().expect("buffer");
            p.copy_from_slice(&udp_frame(s, size)).expect("fits");
            burst.push(p);
        }
        self.tx.tx_burst(&mut burst)
    }
    fn step(&mut self) {
        self.a.process();
        self.b.process();
    }
    fn recv_all(&mut self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut v = Vec::new();
        for _ in 0..100 {
            self.step();
            v.clear();
            self.rx.rx_burst(&mut v, 64);
            out.extend(v.iter().map(seq_of));
            if v.is_empty() {
                break;
            }
        }
        out
    }
    fn finish(self) {
        let Rig { pool, tx, rx, .. } = self;
        drop(tx);
        drop(rx);
        pool.flush_local_cache();
        assert_eq!(pool.available(), pool.capacity(), "buffers leaked");
    }
}

#[test]
fn tx_error_recovers_and_counts_add_up() {
    tx_error_case(opts());
}

#[test]
fn tx_error_recovers_with_empw() {
    tx_error_case(ModelOptions {
        empw: true,
        ..opts()
    });
}

#[test]
fn tx_error_recovers_with_inline_headers() {
    tx_error_case(ModelOptions {
        min_inline: 18,
        ..opts()
    });
}

fn tx_error_case(o: ModelOptions) {
    let mut r = rig(o);
    let mut taken = 0u64;
    let mut received = Vec::new();
    // The 40th WQE from now fails with a protection error.
    r.a.inject_tx_error(0, 40, cqe::SYND_LOCAL_PROT_ERR);
    let mut seq = 0;
    let mut saw_error = None;
    for _ in 0..50 {
        let n = r.send(seq..seq + 16, 100);
        taken += n as u64;
        seq += n as u32;
        r.step();
        received.extend(r.recv_all());
        if let Some(e) = r.tx.take_error() {
            saw_error = Some(e);
        }
    }
    for _ in 0..20 {
        r.tx.reclaim();
        r.step();
        received.extend(r.recv_all());
        if let Some(e) = r.tx.take_error() {
            saw_error = Some(e);
        }
    }
    let e = saw_error.expect("the error was reported");
    assert!(matches!(e, Error::Queue { queue: 0, .. }), "{e}");
    assert!(e.to_string().contains("syndrome 0x04"), "{e}");
    let s = r.tx.stats();
    // The failed WQE's packets (one, or an eMPW session's several).
    assert!(s.tx_errors >= 1, "{s:?}");
    assert!(
        s.tx_drops > 0,
        "the failed WQE and those after it were dropped"
    );
    // Each packet taken in one bucket: the failed WQE's failed, those behind it dropped.
    assert_eq!(s.tx_packets + s.tx_drops + s.tx_errors, taken, "{s:?}");
    assert_eq!(received.len() as u64, s.tx_packets, "sent = received");
    // Traffic resumed after the error: packets sent after it arrived.
    assert!(*received.last().unwrap() as u64 > 40 + s.tx_drops);
    let mut sorted = received.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), received.len(), "no duplicates");
    assert!(received.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_eq!(r.a.counters().tx_error_cqes, 1);
    r.finish();
}

/// A frame longer than the posted buffer in the middle of a stream: the device writes a
/// LOCAL_LENGTH_ERR completion for that WQE and keeps receiving (DPDK mlx5_rx.c,
/// mlx5_rx_err_handle resets the RQ only for LOCAL_QP_OP_ERR, LOCAL_PROT_ERR and WR_FLUSH_ERR).
/// The driver counts the error, reposts that WQE's buffer and loses nothing else: every later
/// frame arrives, with CQE compression off and in both mini-CQE formats, and every buffer
/// goes home.
fn rx_length_error_mid_stream(o: ModelOptions) {
    let o = ModelOptions {
        max_frame: 9000,
        ..o
    };
    let striding = matches!(o.rx, RxKind::Striding(_));
    let mut r = rig(o);
    for round in 0..3u32 {
        let base = round * 1000;
        assert_eq!(r.send(base..base + 8, 200), 8);
        // 2900 bytes: more than one posted buffer (or than a striding WQE's 8 x 256 bytes).
        let mut big = r.pool.alloc().unwrap();
        big.copy_from_slice(&udp_frame(base + 8, 1900)).unwrap();
        let mut chain = r.pool.alloc().unwrap();
        chain.copy_from_slice(&[0u8; 1000]).unwrap();
        big.chain(chain).unwrap();
        let mut v = vec![big];
        assert_eq!(r.tx.tx_burst(&mut v), 1);
        assert_eq!(r.send(base + 9..base + 20, 200), 11);
        let got = r.recv_all();
        let want: Vec<u32> = (base..base + 8).chain(base + 9..base + 20).collect();
        assert_eq!(got, want, "round {round}");
        assert!(
            r.rx.take_error().is_none(),
            "a length error is not a queue failure"
        );
    }
    let c = r.b.counters();
    if striding {
        // A frame longer than a whole striding WQE never reaches a WQE: the device drops it.
        assert_eq!(c.rx_oversize, 3, "{c:?}");
    } else {
        assert_eq!(c.rx_error_cqes, 3, "{c:?}");
        assert_eq!(
            r.rx.stats().rx_errors,
            3,
            "each length error is counted once"
        );
    }
    // Traffic keeps flowing long after (the ring wraps several times).
    for i in 0..20u32 {
        let base = 10_000 + i * 40;
        assert_eq!(r.send(base..base + 40, 64 + i as usize * 7), 40);
        assert_eq!(r.recv_all(), (base..base + 40).collect::<Vec<_>>());
    }
    let s = r.rx.stats();
    assert_eq!(s.rx_packets, 3 * 19 + 800, "{s:?}");
    r.finish();
}

#[test]
fn rx_length_error_keeps_the_cyclic_rq_running() {
    rx_length_error_mid_stream(opts());
}

#[test]
fn rx_length_error_keeps_the_rq_running_with_hash_compression() {
    rx_length_error_mid_stream(ModelOptions {
        cqe_compression: Some(rawq::dv::rings::MiniCqeFormat::Hash),
        ..opts()
    });
}

#[test]
fn rx_length_error_keeps_the_rq_running_with_checksum_compression() {
    rx_length_error_mid_stream(ModelOptions {
        cqe_compression: Some(rawq::dv::rings::MiniCqeFormat::CsumStrideIdx),
        ..opts()
    });
}

#[test]
fn rx_oversize_frame_keeps_the_striding_rq_running() {
    use rawq::dv::rings::{MiniCqeFormat, Striding};
    for fmt in [None, Some(MiniCqeFormat::CsumStrideIdx)] {
        rx_length_error_mid_stream(ModelOptions {
            rx: RxKind::Striding(Striding {
                log_num_strides: 3,
                log_stride_size: 8,
                two_byte_shift: false,
            }),
            cqe_compression: fmt,
            rq_wqes: 64,
            ..opts()
        });
    }
}

#[test]
fn delayed_completions_still_return_every_buffer() {
    let mut r = rig(opts());
    r.a.delay_tx_completions(0, 5);
    let mut taken = 0;
    for i in 0..40u32 {
        taken += r.send(i * 8..i * 8 + 8, 80);
        r.step();
        r.recv_all();
    }
    for _ in 0..20 {
        r.tx.reclaim();
        r.step();
    }
    assert_eq!(r.tx.stats().tx_packets, taken as u64);
    r.finish();
}

#[test]
fn empty_rq_drops_are_counted_runts_and_oversize_too() {
    let o = ModelOptions {
        rq_wqes: 16,
        flow_control: false,
        ..opts()
    };
    let mut r = rig(o);
    let mut taken = 0;
    for i in 0..4u32 {
        taken += r.send(i * 16..i * 16 + 16, 64);
        r.step();
    }
    let got = r.recv_all();
    let c = r.b.counters();
    assert!(c.rx_no_buffer > 0, "{c:?}");
    assert_eq!(got.len() as u64 + c.rx_no_buffer, taken as u64);
    r.b.inject_frame(&[1, 2, 3]);
    r.b.inject_frame(&vec![0u8; 2000]);
    r.step();
    let c = r.b.counters();
    assert_eq!((c.rx_runt, c.rx_oversize), (1, 1));
    r.finish();
}

#[test]
fn striding_rq_survives_an_rx_error_free_run_with_tiny_ring() {
    use rawq::dv::rings::Striding;
    let o = ModelOptions {
        rq_wqes: 4,
        rx: RxKind::Striding(Striding {
            log_num_strides: 3,
            log_stride_size: 8,
            two_byte_shift: false,
        }),
        ..opts()
    };
    let mut r = rig(o);
    let mut all = Vec::new();
    for i in 0..100u32 {
        assert_eq!(r.send(i * 4..i * 4 + 4, 60 + (i as usize * 13) % 900), 4);
        all.extend(r.recv_all());
    }
    assert_eq!(all, (0..400).collect::<Vec<_>>());
    r.finish();
}
