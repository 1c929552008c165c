//! End to end through the mlx5 device model: the DV data path on one port sends, the model
//! carries the frames over a looped wire, the DV data path on the other port receives.
//!
//! Every variant checks that every packet arrives once, in order, bytes intact, with the receive
//! metadata the model computed, across many ring wrap-arounds; and that every buffer is back in
//! the pool at the end. Each of the 8 variants runs 10^6 packets (about 20 s in all with the
//! test profile's opt-level 1); RAWQ_DV_PACKETS overrides the per-variant count.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use support::Rng;

use rawq::dv::model::{ModelCounters, ModelOptions, ModelPort, ModelWire, RxKind};
use rawq::dv::rings::{MiniCqeFormat, Striding};
use rawq::{HugePages, Mempool, MempoolConfig, Packet, Queue};

const ROOM: usize = 2048 - 128;

/// Counts heap allocations made by threads that asked for it (the model's `process` calls),
/// to check that the model allocates nothing per frame once warm (issue 13).
mod alloc_count {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};

    pub struct Counting;

    static ALLOCS: AtomicU64 = AtomicU64::new(0);

    thread_local! {
        static ON: Cell<bool> = const { Cell::new(false) };
    }

    fn note() {
        if ON.try_with(|c| c.get()).unwrap_or(false) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
    }

    // SAFETY: every call is forwarded unchanged to the system allocator; counting touches only
    // an atomic and a const-initialised thread-local (no allocation, no re-entry).
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            note();
            // SAFETY: the caller's contract, forwarded.
            unsafe { System.alloc(l) }
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            note();
            // SAFETY: the caller's contract, forwarded.
            unsafe { System.alloc_zeroed(l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
            note();
            // SAFETY: the caller's contract, forwarded.
            unsafe { System.realloc(p, l, n) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: the caller's contract, forwarded.
            unsafe { System.dealloc(p, l) }
        }
    }

    /// Runs `f` and returns how many allocations the calling thread made in it.
    pub fn during(f: impl FnOnce()) -> u64 {
        ON.with(|c| c.set(true));
        let before = ALLOCS.load(Ordering::Relaxed);
        f();
        ON.with(|c| c.set(false));
        // Other counting threads may add meanwhile: tests using this run the model in the
        // calling thread only, and a stray count can only make the check stricter.
        ALLOCS.load(Ordering::Relaxed) - before
    }
}

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

fn pool(buffers: u32) -> Mempool {
    Mempool::new(&MempoolConfig {
        buffers,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .expect("pool")
}

/// Frame size of packet `seq`: mostly small, some up to a buffer, some jumbo.
fn size_of(seed: u64, seq: u64, max: usize) -> usize {
    let mut r = Rng(seed ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let x = r.below(100);
    let s = if x < 70 {
        60 + r.below(241) as usize
    } else if x < 90 {
        300 + r.below(1701) as usize
    } else {
        2000 + r.below(7001) as usize
    };
    s.min(max)
}

fn pattern() -> Vec<u8> {
    let mut r = Rng(42);
    (0..20000).map(|_| r.next() as u8).collect()
}

/// A UDP/IPv4 frame of `size` bytes carrying `seq`.
fn frame(pat: &[u8], seq: u64, size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let ip_len = (size - 14) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let mut sum = 0u32;
    for w in ip.chunks(2) {
        sum += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    out.extend_from_slice(&ip);
    let udp_len = ip_len - 20;
    out.extend_from_slice(&1000u16.to_be_bytes());
    out.extend_from_slice(&2000u16.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]); // no UDP checksum
    out.extend_from_slice(&seq.to_be_bytes());
    let rest = size - out.len();
    let off = (seq as usize * 7) % (pat.len() - 10000);
    out.extend_from_slice(&pat[off..off + rest]);
}

/// Copies `bytes` into a packet chained over as many buffers as needed.
fn packet(pool: &Mempool, bytes: &[u8]) -> Option<Packet> {
    let mut chunks = bytes.chunks(ROOM);
    let mut head = pool.alloc().ok()?;
    head.copy_from_slice(chunks.next()?).ok()?;
    for c in chunks {
        let mut s = pool.alloc().ok()?;
        s.copy_from_slice(c).ok()?;
        head.chain(s).ok()?;
    }
    Some(head)
}

#[derive(Clone, Copy, Debug)]
struct Variant {
    name: &'static str,
    striding: Option<Striding>,
    min_inline: u16,
    empw: bool,
    comp: bool,
}

fn opts(v: &Variant) -> ModelOptions {
    ModelOptions {
        sq_wqebbs: 256,
        rq_wqes: if v.striding.is_some() { 64 } else { 256 },
        rx: match v.striding {
            Some(s) => RxKind::Striding(s),
            None => RxKind::Cyclic { sges: 5 },
        },
        min_inline: v.min_inline,
        empw: v.empw,
        cqe_compression: v.comp.then_some(if v.striding.is_some() {
            MiniCqeFormat::CsumStrideIdx
        } else {
            MiniCqeFormat::Hash
        }),
        max_frame: 9216,
        wire_capacity: 256,
        wire: ModelWire::Sink,
        ..Default::default()
    }
}

fn packets_per_variant() -> u64 {
    if let Some(n) = std::env::var("RAWQ_DV_PACKETS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return n;
    }
    1_000_000
}

/// What the model did, and its heap allocations while warming up (first fifth of the packets)
/// and after.
struct Ran {
    ca: ModelCounters,
    cb: ModelCounters,
    warm_allocs: u64,
    steady_allocs: u64,
}

fn run(v: Variant, n: u64, seed: u64) -> Ran {
    let pool = pool(16384);
    let (a, b) = ModelPort::pair(opts(&v), opts(&v)).expect("ports");
    let mut tx: Queue = a.queue(0, &pool).expect("tx queue").into_queue();
    let mut rx: Queue = b.queue(0, &pool).expect("rx queue").into_queue();
    let pat = pattern();
    let mut rng = Rng(seed);
    let mut burst: Vec<Packet> = Vec::with_capacity(64);
    let mut got: Vec<Packet> = Vec::with_capacity(64);
    let mut buf = Vec::new();
    let mut want = Vec::new();
    let (mut next_send, mut next_expect) = (0u64, 0u64);
    let mut hash = None;
    let mut rounds = 0u64;
    let (mut warm_allocs, mut steady_allocs) = (0, 0);
    while next_expect < n {
        rounds += 1;
        assert!(
            rounds < 50 * n + 10_000,
            "{}: stuck at {next_expect}/{n} (sent {next_send}); tx {:?} {:?} rx {:?} {:?}",
            v.name,
            tx.stats(),
            a.counters(),
            rx.stats(),
            b.counters()
        );
        if burst.is_empty() && next_send < n {
            let k = (1 + rng.below(64)).min(n - next_send);
            for _ in 0..k {
                frame(&pat, next_send, size_of(seed, next_send, 9000), &mut buf);
                let Some(mut p) = packet(&pool, &buf) else {
                    break;
                };
                p.offload.l3_csum = next_send % 4 == 0;
                burst.push(p);
                next_send += 1;
            }
        }
        tx.tx_burst(&mut burst);
        if let Some(e) = tx.take_error() {
            panic!("{}: {e}", v.name);
        }
        if next_send == n {
            tx.reclaim();
        }
        let allocs = alloc_count::during(|| {
            a.process();
            b.process();
        });
        if next_expect < n / 5 {
            warm_allocs += allocs;
        } else {
            steady_allocs += allocs;
        }
        loop {
            got.clear();
            let k = rx.rx_burst(&mut got, 1 + rng.below(64) as usize);
            for p in got.drain(..) {
                p.copy_to_vec(&mut buf);
                assert!(buf.len() >= 50, "{}: runt {}", v.name, buf.len());
                let seq = u64::from_be_bytes(buf[42..50].try_into().unwrap());
                assert_eq!(seq, next_expect, "{}: out of order or lost", v.name);
                frame(&pat, seq, size_of(seed, seq, 9000), &mut want);
                assert!(
                    buf == want,
                    "{}: packet {seq} corrupted (len {} vs {})",
                    v.name,
                    buf.len(),
                    want.len()
                );
                assert!(
                    p.meta.l3_csum_ok() && p.meta.l4_csum_ok(),
                    "{}: {:?}",
                    v.name,
                    p.meta
                );
                // Checksum-format mini-CQEs (striding RQ with compression) carry no hash: the
                // packet reports none (kernel mlx5e, mlx5e_decompress_cqe_no_hash).
                if !(v.comp && v.striding.is_some()) || p.meta.rss_hash() != 0 {
                    assert_ne!(p.meta.rss_hash(), 0);
                    assert_eq!(
                        *hash.get_or_insert(p.meta.rss_hash()),
                        p.meta.rss_hash(),
                        "one flow, one hash"
                    );
                }
                next_expect += 1;
            }
            if k == 0 {
                break;
            }
        }
    }
    // Everything sent completes.
    for _ in 0..1000 {
        if tx.stats().tx_packets == n {
            break;
        }
        tx.reclaim();
        a.process();
    }
    let (ts, rs) = (tx.stats(), rx.stats());
    assert_eq!(ts.tx_packets, n, "{}: {ts:?}", v.name);
    assert_eq!((ts.tx_drops, ts.tx_errors), (0, 0), "{}", v.name);
    assert_eq!((rs.rx_packets, rs.rx_errors), (n, 0), "{}", v.name);
    assert!(tx.take_error().is_none() && rx.take_error().is_none());
    let (ca, cb) = (a.counters(), b.counters());
    drop(tx);
    drop(rx);
    pool.flush_local_cache();
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "{}: buffers leaked",
        v.name
    );
    assert_eq!(ca.doorbell_mismatch, 0);
    assert_eq!(ca.tx_frames, n);
    assert_eq!(cb.rx_frames, n);
    if n >= 10_000 {
        assert!(
            ca.tx_wqes > 20 * 256,
            "{}: the SQ wrapped many times",
            v.name
        );
    }
    Ran {
        ca,
        cb,
        warm_allocs,
        steady_allocs,
    }
}

fn striding(shift: bool) -> Option<Striding> {
    Some(Striding {
        log_num_strides: 4,
        log_stride_size: 10,
        two_byte_shift: shift,
    })
}

const VARIANTS: [Variant; 8] = [
    Variant {
        name: "cyclic/inline18",
        striding: None,
        min_inline: 18,
        empw: false,
        comp: false,
    },
    Variant {
        name: "cyclic/send/comp",
        striding: None,
        min_inline: 0,
        empw: false,
        comp: true,
    },
    Variant {
        name: "cyclic/empw",
        striding: None,
        min_inline: 0,
        empw: true,
        comp: false,
    },
    Variant {
        name: "cyclic/empw/comp",
        striding: None,
        min_inline: 0,
        empw: true,
        comp: true,
    },
    Variant {
        name: "striding/inline18",
        striding: Some(Striding {
            log_num_strides: 4,
            log_stride_size: 10,
            two_byte_shift: false,
        }),
        min_inline: 18,
        empw: false,
        comp: false,
    },
    Variant {
        name: "striding/empw/comp",
        striding: Some(Striding {
            log_num_strides: 4,
            log_stride_size: 10,
            two_byte_shift: false,
        }),
        min_inline: 0,
        empw: true,
        comp: true,
    },
    Variant {
        name: "striding/shift/send/comp",
        striding: Some(Striding {
            log_num_strides: 4,
            log_stride_size: 10,
            two_byte_shift: true,
        }),
        min_inline: 0,
        empw: false,
        comp: true,
    },
    Variant {
        name: "striding/shift/empw",
        striding: Some(Striding {
            log_num_strides: 4,
            log_stride_size: 10,
            two_byte_shift: true,
        }),
        min_inline: 0,
        empw: true,
        comp: false,
    },
];

#[test]
fn every_packet_arrives_once_in_order_intact() {
    let _ = striding(false);
    let n = packets_per_variant();
    for (i, v) in VARIANTS.iter().enumerate() {
        let t = std::time::Instant::now();
        let Ran {
            ca,
            cb,
            warm_allocs,
            steady_allocs,
        } = run(*v, n, 1000 + i as u64);
        eprintln!(
            "{}: {n} packets in {:?}; model allocations {warm_allocs} warming up, \
             {steady_allocs} after; tx {ca:?}\n  rx {cb:?}",
            v.name,
            t.elapsed()
        );
        // The counter sees the model's allocations (its wire buffers are made on first use)...
        assert!(warm_allocs > 0, "{}: allocation counter blind", v.name);
        // ...and once warm the model allocates nothing per frame (issue 13).
        if n >= 10_000 {
            assert_eq!(steady_allocs, 0, "{}: model allocates per frame", v.name);
        }
        if v.comp {
            assert!(
                cb.compressed_sessions > 0 && cb.mini_cqes > 0,
                "{}: no compressed sessions",
                v.name
            );
        }
        if v.striding.is_some() {
            assert!(cb.fillers > 0, "{}: no filler CQEs", v.name);
        }
    }
}

fn udp(dport: u16, sport: u16, vlan: Option<u16>) -> Vec<u8> {
    let pat = pattern();
    let mut f = Vec::new();
    frame(&pat, sport as u64, 120, &mut f);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    if let Some(v) = vlan {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00]);
        t.extend_from_slice(&v.to_be_bytes());
        t.extend_from_slice(&f[12..]);
        f = t;
    }
    f
}

#[test]
fn rules_steer_tag_and_leave_the_rest_to_the_kernel() {
    use rawq::flow::{Action, L4Match, L4Proto, Pattern, Rule};
    let rule = |dport, action| Rule {
        pattern: Pattern {
            l4: Some(L4Match {
                proto: L4Proto::Udp,
                src_port: None,
                dst_port: Some(dport),
            }),
            ..Default::default()
        },
        priority: 0,
        action,
    };
    let o = ModelOptions {
        queues: 3,
        vlan_strip: true,
        rules: vec![
            rule(2000, Action::Queue(1)),
            rule(3000, Action::Rss(vec![0, 2])),
            rule(4000, Action::Drop),
        ],
        wire: ModelWire::Sink,
        ..Default::default()
    };
    let pool = pool(4096);
    let port = ModelPort::new(o).unwrap();
    let mut qs: Vec<Queue> = (0..3)
        .map(|i| port.queue(i, &pool).unwrap().into_queue())
        .collect();
    port.inject_frame(&udp(2000, 1, Some(7)));
    for sp in 0..64 {
        port.inject_frame(&udp(3000, sp, None));
    }
    port.inject_frame(&udp(4000, 1, None));
    port.inject_frame(&udp(5000, 1, None));
    port.process();
    let mut got: Vec<Vec<Packet>> = Vec::new();
    for q in qs.iter_mut() {
        let mut v = Vec::new();
        q.rx_burst(&mut v, 128);
        got.push(v);
    }
    assert_eq!(got[1].len(), 1);
    let p = &got[1][0];
    assert_eq!(p.meta.flow_tag(), 1, "first rule's tag");
    assert_eq!(p.meta.vlan_tci(), Some(7), "VLAN stripped");
    assert_eq!(p.len(), 120, "tag removed from the frame");
    assert_eq!(got[0].len() + got[2].len(), 64);
    assert!(
        !got[0].is_empty() && !got[2].is_empty(),
        "RSS spreads over both queues"
    );
    for p in got[0].iter().chain(got[2].iter()) {
        assert_eq!(p.meta.flow_tag(), 2);
        assert!(p.meta.l3_csum_ok());
    }
    let c = port.counters();
    assert_eq!((c.rx_rule_drop, c.rx_to_kernel), (1, 1));
    drop(got);
    drop(qs);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn port_backend_runs_the_model_in_a_thread() {
    use rawq::{Backend, Port};
    let mut port = Port::builder(Backend::Model(ModelOptions::default()))
        .queues(1)
        .rx_ring(256)
        .tx_ring(256)
        .open()
        .expect("model port");
    assert_eq!(port.info().backend, "model");
    let pool = port.pool().clone();
    let q = port.queue(0).unwrap();
    let mut burst = Vec::new();
    let mut got = Vec::new();
    let mut sent = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while got.len() < 1000 && std::time::Instant::now() < deadline {
        if sent < 1000 && burst.is_empty() {
            for s in sent..(sent + 32).min(1000) {
                let mut p = pool.alloc().unwrap();
                p.copy_from_slice(&udp(2000, s as u16, None)).unwrap();
                burst.push(p);
            }
            sent = (sent + 32).min(1000);
        }
        q.tx_burst(&mut burst);
        q.reclaim();
        let mut v = Vec::new();
        q.rx_burst(&mut v, 64);
        got.extend(
            v.iter()
                .map(|p| u16::from_be_bytes([p.data()[34], p.data()[35]])),
        );
        if v.is_empty() {
            std::thread::yield_now();
        }
    }
    assert_eq!(got, (0..1000u16).collect::<Vec<_>>());
    drop(port);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

/// The same traffic with both model ports running in threads of their own beside the driver:
/// the ring protocol (doorbell records, ownership bytes, barriers) under real concurrency.
#[test]
fn threaded_model_pair_keeps_order_and_bytes() {
    for v in [VARIANTS[3], VARIANTS[6]] {
        let n = if cfg!(debug_assertions) {
            30_000
        } else {
            200_000
        };
        let pool = pool(16384);
        let (a, b) = ModelPort::pair(opts(&v), opts(&v)).expect("ports");
        let mut tx: Queue = a.queue(0, &pool).expect("tx queue").into_queue();
        let mut rx: Queue = b.queue(0, &pool).expect("rx queue").into_queue();
        let (ta, tb) = (a.spawn(), b.spawn());
        let pat = pattern();
        let mut rng = Rng(99);
        let (mut burst, mut got, mut buf, mut want) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut next_send, mut next_expect) = (0u64, 0u64);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while next_expect < n {
            assert!(
                std::time::Instant::now() < deadline,
                "{}: stuck at {next_expect}; tx {:?} rx {:?}",
                v.name,
                a.counters(),
                b.counters()
            );
            if burst.is_empty() && next_send < n {
                for _ in 0..(1 + rng.below(64)).min(n - next_send) {
                    frame(&pat, next_send, size_of(7, next_send, 9000), &mut buf);
                    let Some(p) = packet(&pool, &buf) else { break };
                    burst.push(p);
                    next_send += 1;
                }
            }
            tx.tx_burst(&mut burst);
            tx.reclaim();
            got.clear();
            rx.rx_burst(&mut got, 64);
            for p in got.drain(..) {
                p.copy_to_vec(&mut buf);
                let seq = u64::from_be_bytes(buf[42..50].try_into().unwrap());
                assert_eq!(
                    seq,
                    next_expect,
                    "{}: tx {:?} rx {:?} rx stats {:?}",
                    v.name,
                    a.counters(),
                    b.counters(),
                    rx.stats()
                );
                frame(&pat, seq, size_of(7, seq, 9000), &mut want);
                assert!(buf == want, "{}: packet {seq} corrupted", v.name);
                next_expect += 1;
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while tx.stats().tx_packets < n && std::time::Instant::now() < deadline {
            tx.reclaim();
            std::thread::yield_now();
        }
        assert_eq!(tx.stats().tx_packets, n);
        drop((ta, tb));
        drop((tx, rx));
        pool.flush_local_cache();
        assert_eq!(
            pool.available(),
            pool.capacity(),
            "{}: buffers leaked",
            v.name
        );
    }
}
