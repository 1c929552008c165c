//! mlx5 DV data-path cost with the device model completing inline (no NIC needed).
//!
//! * `tx_burst32`: `tx_burst` of 32 single-buffer 64-byte packets, completions included (the
//!   buffers of earlier bursts are freed inside the call); the model runs between timed batches.
//! * `floor_store64`: a bare loop storing 64 bytes per packet into a ring: the cost of writing one
//!   WQEBB per packet and nothing else. The ratio tx / floor is printed.
//! * `rx_refill32`: `rx_burst` of 32 packets the model has already written, refill included.
//!
//! `RAWQ_DV_CALLGRIND=N` runs N rounds of 16 bursts each way (send with min inline 0 and 18,
//! receive with all packet metadata) through `#[inline(never)]` functions instead of
//! criterion, for `scripts/callgrind-dv.sh`.
//!
//! Figures (2-core shared VM; instruction counts are stable, times are noisy):
//!
//! | | before (8353396) | after (branch `dvperf`) |
//! |---|---|---|
//! | callgrind tx, min inline 0 | 77.8 instr/pkt | 50.1 |
//! | callgrind tx, min inline 18 | 97.8 | 56.0 |
//! | callgrind rx + refill | 150.7 | 95.1 |
//! | ratio line of `cargo bench --bench dv`: tx / floor, inline 0 / 18 | 1.52x / 2.58x | 1.26x / 1.84x |
//! | same line: ns/pkt tx0 / tx18 / rx | 5.14 / 8.68 / 21.6 | 4.17 / 6.07 / 14.8 |
//! | median of 15 interleaved standalone runs of that line: ratios, rx ns/pkt | 1.27x / 2.14x, 21.6 | 1.03x / 1.53x, 15.4 |
//! | criterion `tx_burst32_x16` / `floor_store64_x512` / `rx_refill32_x16` | 2.71 / 1.98 / 10.6 µs | 2.24 / 1.97 / 7.73 µs |
//!
//! The receive pass (branch `dvrx`: refill fused into the polling loop, no in-buffer header for a
//! single-buffer packet, `repr(C)` packet layout, the loop in its own function; the switch
//! `DvQueue::set_rx_metadata(false)` measured separately):
//!
//! | | before (5484475) | after (branch `dvrx`) |
//! |---|---|---|
//! | callgrind rx + refill (tx / tx18 unchanged: 51.2 / 57.2) | 95.1 instr/pkt | 75.7 |
//! | the same without packet metadata | — | 54.8 |
//! | ratio line: rx+refill ns/pkt (without metadata) | 14.13 | 5.60 (5.14) |
//! | criterion `rx_refill32_x16` | 7.32 µs | 2.90 µs |
//!
//! Most of the time saved is the in-buffer header store: it touched a cache line of every
//! buffer that nothing else on the receive path touches.
//!
//! Issues 11 and 13 (branch `dv`; a 2-vCPU AMD EPYC VM; f6a3c70 and `dv` built side by side and
//! run back to back; raw receive metadata decoded on access, the metadata switch removed; send
//! checks each packet's pool, asks for only-first-error completions and flushes the doorbell):
//!
//! | | before (f6a3c70) | after (branch `dv`) |
//! |---|---|---|
//! | callgrind tx, min inline 0 / 18 | 51.2 / 57.2 instr/pkt | 49.5 / 56.5 |
//! | callgrind rx + refill, all metadata | 75.7 (54.8 without) | 57.7 |
//! | ratio line: tx / floor, inline 0 / 18 | 2.16x / 3.10x | 2.20x / 2.82x |
//! | ratio line: rx + refill ns/pkt | 3.65 (2.68 without metadata) | 2.96 |
//!
//! Issue 21 (branch `s5-h6`): `txdev` and `txempw` let the model work after every burst, as a
//! device running beside the sender does (one completion a burst), the second with eMPW WQEs
//! (what the emulated ConnectX-5 and DPDK's PMD use):
//!
//! | | before (9001781) | after (`s5-h6`) |
//! |---|---|---|
//! | callgrind txdev (SEND) / txempw (eMPW) | 53.9 / 113.4 instr/pkt | 54.0 / 50.6 |
//! | callgrind tx / rx | 49.6 / 58.7 | 49.7 / 59.3 (an empty poll returns early) |
//!
//! After the TSO / VLAN-insertion merge (43f76e0) and s7-ia; branch `s7-ie`: one test for "one
//! buffer, no checksum", one for TSO or VLAN insertion, eMPW sessions keyed on one word, the
//! plain receive run copying a template's first 24 bytes:
//!
//! | | before (735e100) | after (`s7-ie`) |
//! |---|---|---|
//! | callgrind tx / tx18 / txdev / txempw | 54.2 / 61.2 / 58.4 / 54.2 instr/pkt | 49.2 / 55.3 / 53.4 / 49.2 |
//! | callgrind rx / rxzip | 63.9 / 56.9 | 59.4 / 56.9 |

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use rawq::dv::model::{ModelOptions, ModelPort, ModelWire};
use rawq::{HugePages, Mempool, MempoolConfig, Packet, Queue};

const BURST: usize = 32;
const BATCH: usize = 16; // bursts per timed batch (512 packets, half the SQ)

fn pool() -> Mempool {
    Mempool::new(&MempoolConfig {
        buffers: 16384,
        huge_pages: HugePages::Try,
        ..Default::default()
    })
    .expect("pool")
}

fn tx_rig(min_inline: u16) -> (Mempool, ModelPort, Queue) {
    tx_rig_with(min_inline, false)
}

fn tx_rig_with(min_inline: u16, empw: bool) -> (Mempool, ModelPort, Queue) {
    let pool = pool();
    let port = ModelPort::new(ModelOptions {
        sq_wqebbs: 1024,
        min_inline,
        empw,
        wire: ModelWire::Sink,
        ..Default::default()
    })
    .expect("model");
    let q = port.queue(0, &pool).expect("queue").into_queue();
    (pool, port, q)
}

fn fill(pool: &Mempool, bursts: &mut [Vec<Packet>]) {
    for b in bursts.iter_mut() {
        pool.alloc_bulk(b, BURST).expect("buffers");
        for p in b.iter_mut() {
            p.set_len(64).expect("len");
        }
    }
}

/// Time of `batches` batches of BATCH tx bursts.
fn time_tx(pool: &Mempool, port: &ModelPort, q: &mut Queue, batches: u64) -> Duration {
    let mut bursts: Vec<Vec<Packet>> = (0..BATCH).map(|_| Vec::with_capacity(BURST)).collect();
    let mut total = Duration::ZERO;
    for _ in 0..batches {
        fill(pool, &mut bursts);
        let t = Instant::now();
        for b in bursts.iter_mut() {
            q.tx_burst(b);
        }
        total += t.elapsed();
        for b in bursts.iter_mut() {
            assert!(b.is_empty(), "SQ full: the model fell behind");
        }
        port.process();
    }
    total
}

/// Time of `batches` batches of BATCH × 32 stores of 64 bytes into a 1024-slot ring.
fn time_floor(ring: &mut [[u64; 8]], batches: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut pos = 0usize;
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..BATCH {
            for i in 0..BURST {
                let v = black_box(i as u64);
                ring[pos & 1023] = [v, v + 1, v + 2, v + 3, v + 4, v + 5, v + 6, v + 7];
                pos += 1;
            }
        }
        black_box(&ring[pos & 1023]);
        total += t.elapsed();
    }
    total
}

fn rx_rig() -> (Mempool, ModelPort, Queue) {
    let pool = pool();
    let port = ModelPort::new(ModelOptions {
        rq_wqes: 1024,
        wire: ModelWire::Sink,
        wire_capacity: 4096,
        ..Default::default()
    })
    .expect("model");
    let q = port.queue(0, &pool).expect("queue").into_queue();
    (pool, port, q)
}

/// As [`rx_rig`] with CQE compression (hash-format mini-CQEs, rawq's port default and what the
/// emulated ConnectX-5 does): frames of one flow arrive as compressed sessions of up to 64.
fn rx_rig_zip() -> (Mempool, ModelPort, Queue) {
    let pool = pool();
    let port = ModelPort::new(ModelOptions {
        rq_wqes: 1024,
        wire: ModelWire::Sink,
        wire_capacity: 4096,
        cqe_compression: Some(rawq::dv::rings::MiniCqeFormat::Hash),
        ..Default::default()
    })
    .expect("model");
    let q = port.queue(0, &pool).expect("queue").into_queue();
    (pool, port, q)
}

fn time_rx(port: &ModelPort, q: &mut Queue, batches: u64) -> Duration {
    let frame = [0u8; 64];
    let mut out: Vec<Packet> = Vec::with_capacity(BURST * BATCH);
    let mut total = Duration::ZERO;
    for _ in 0..batches {
        for _ in 0..BURST * BATCH {
            port.inject_frame(&frame);
        }
        port.process();
        let t = Instant::now();
        for _ in 0..BATCH {
            q.rx_burst(&mut out, BURST);
        }
        total += t.elapsed();
        assert_eq!(out.len(), BURST * BATCH);
        out.clear();
    }
    total
}

fn per_pkt(d: Duration, batches: u64) -> f64 {
    d.as_nanos() as f64 / (batches * (BATCH * BURST) as u64) as f64
}

fn ratio_report() {
    let (pool, port, mut q) = tx_rig(0);
    let (pool18, port18, mut q18) = tx_rig(18);
    let mut ring = vec![[0u64; 8]; 1024];
    let (rxpool, rxport, mut rxq) = rx_rig();
    // Warm up, then interleave rounds and keep the best of each.
    let _ = (
        time_tx(&pool, &port, &mut q, 200),
        time_floor(&mut ring, 200),
    );
    let (mut tx, mut tx18, mut fl, mut rx) = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..20 {
        tx = tx.min(per_pkt(time_tx(&pool, &port, &mut q, 200), 200));
        tx18 = tx18.min(per_pkt(time_tx(&pool18, &port18, &mut q18, 200), 200));
        fl = fl.min(per_pkt(time_floor(&mut ring, 200), 200));
        rx = rx.min(per_pkt(time_rx(&rxport, &mut rxq, 50), 50));
    }
    println!(
        "dv: tx burst-32 {tx:.2} ns/pkt (min inline 0), {tx18:.2} ns/pkt (min inline 18); \
         bare 64-byte store {fl:.2} ns/pkt; ratio {:.2}x / {:.2}x; rx+refill {rx:.2} ns/pkt \
         (all metadata)",
        tx / fl,
        tx18 / fl
    );
    drop((q, q18, rxq));
    let _ = (pool, pool18, rxpool);
}

fn bench(c: &mut Criterion) {
    ratio_report();
    let mut g = c.benchmark_group("dv");
    g.throughput(Throughput::Elements((BURST * BATCH) as u64));
    let (pool, port, mut q) = tx_rig(0);
    g.bench_function("tx_burst32_x16", |b| {
        b.iter_custom(|n| time_tx(&pool, &port, &mut q, n))
    });
    let mut ring = vec![[0u64; 8]; 1024];
    g.bench_function("floor_store64_x512", |b| {
        b.iter_custom(|n| time_floor(&mut ring, n))
    });
    let (_rxpool, rxport, mut rxq) = rx_rig();
    g.bench_function("rx_refill32_x16", |b| {
        b.iter_custom(|n| time_rx(&rxport, &mut rxq, n))
    });
    g.finish();
}

#[inline(never)]
fn callgrind_tx(q: &mut Queue, bursts: &mut [Vec<Packet>]) -> usize {
    let mut n = 0;
    for b in bursts.iter_mut() {
        n += q.tx_burst(b);
    }
    n
}

#[inline(never)]
fn callgrind_tx18(q: &mut Queue, bursts: &mut [Vec<Packet>]) -> usize {
    // (Not the same machine code as `callgrind_tx`, so the linker cannot fold the two.)
    let q = black_box(q);
    let mut n = 0;
    for b in bursts.iter_mut() {
        n += q.tx_burst(b);
    }
    n
}

/// One burst, the device's work done after each (outside the counted function): every burst
/// finds the completion of the one before, as from a device running beside the sender,
/// instead of a batch of them at once.
#[inline(never)]
fn callgrind_txdev(q: &mut Queue, b: &mut Vec<Packet>) -> usize {
    q.tx_burst(b)
}

/// As `callgrind_txdev`, on a queue writing eMPW WQEs (what the emulated ConnectX-5 and DPDK's
/// PMD use by default).
#[inline(never)]
fn callgrind_txempw(q: &mut Queue, b: &mut Vec<Packet>) -> usize {
    black_box(&mut *q).tx_burst(b)
}

/// `Queue::alloc_burst` of one burst from the queue's own cache (the one its send completions
/// refill), as pktgen's send loop takes its buffers.
#[inline(never)]
fn callgrind_alloc(q: &mut Queue, b: &mut Vec<Packet>) -> usize {
    q.alloc_burst(b, BURST).map_or(0, |()| b.len())
}

/// The send of `alloc_rounds`: an eMPW burst of buffers taken from the queue's own cache, the
/// model working after each, as in pktgen's send loop (the completions return the buffers to
/// the cache they came from, so its bulk put never overflows to the pool as `txempw`'s, whose
/// buffers come from the pool, does a third of the time).
#[inline(never)]
fn callgrind_txcache(q: &mut Queue, b: &mut Vec<Packet>) -> usize {
    black_box(&mut *q).tx_burst(black_box(b))
}

/// `rounds` rounds of BATCH bursts allocated with `callgrind_alloc` and sent (eMPW,
/// `callgrind_txcache`), the model working after each burst: the buffers go round through the
/// queue's cache as in pktgen.
fn alloc_rounds(rounds: u64) -> usize {
    let (_pool, port, mut q) = tx_rig_with(0, true);
    let mut b = Vec::with_capacity(BURST);
    let mut got = 0;
    for _ in 0..rounds * BATCH as u64 {
        got += callgrind_alloc(&mut q, &mut b);
        for p in b.iter_mut() {
            p.set_len(64).expect("len");
        }
        callgrind_txcache(&mut q, &mut b);
        assert!(b.is_empty(), "SQ full: the model fell behind");
        port.process();
    }
    got
}

/// A burst offered to an eMPW queue whose ring is full and whose CQ is empty (the device has
/// not caught up): what one empty call costs a sender (`bench-vs-dpdk.sh`'s `c`).
#[inline(never)]
fn callgrind_txfull(q: &mut Queue, b: &mut Vec<Packet>) -> usize {
    black_box(&mut *q).tx_burst(black_box(b))
}

/// `rounds * BATCH` calls of `callgrind_txfull` on a ring filled first, the device idle.
fn full_ring_calls(rounds: u64) -> usize {
    let (pool, _port, mut q) = tx_rig_with(0, true);
    let mut b = Vec::with_capacity(BURST);
    loop {
        fill(&pool, std::slice::from_mut(&mut b));
        if q.tx_burst(&mut b) == 0 {
            break;
        }
        b.clear();
    }
    let mut sent = 0;
    for _ in 0..rounds * BATCH as u64 {
        sent += callgrind_txfull(&mut q, &mut b);
    }
    assert_eq!(sent, 0, "the ring was full");
    b.len()
}

/// `rounds` rounds of BATCH bursts through `f`, `port` processing after each burst.
fn per_burst_device(
    rounds: u64,
    empw: bool,
    f: fn(&mut Queue, &mut Vec<Packet>) -> usize,
) -> usize {
    let (pool, port, mut q) = tx_rig_with(0, empw);
    let mut bursts: Vec<Vec<Packet>> = (0..BATCH).map(|_| Vec::with_capacity(BURST)).collect();
    let mut sent = 0;
    for _ in 0..rounds {
        fill(&pool, &mut bursts);
        for b in bursts.iter_mut() {
            sent += f(&mut q, b);
            assert!(b.is_empty(), "SQ full: the model fell behind");
            port.process();
        }
    }
    sent
}

#[inline(never)]
fn callgrind_rx(q: &mut Queue, out: &mut Vec<Packet>) -> usize {
    let mut n = 0;
    for _ in 0..BATCH {
        n += q.rx_burst(out, BURST);
    }
    n
}

/// `callgrind_rx` over compressed sessions (`black_box`: a body of its own, which the linker
/// does not fold into `callgrind_rx`'s, so that the two are counted apart).
#[inline(never)]
fn callgrind_rxzip(q: &mut Queue, out: &mut Vec<Packet>) -> usize {
    let mut n = 0;
    for _ in 0..BATCH {
        n += black_box(q.rx_burst(out, BURST));
    }
    n
}

fn callgrind(rounds: u64) {
    let (pool, port, mut q) = tx_rig(0);
    let mut bursts: Vec<Vec<Packet>> = (0..BATCH).map(|_| Vec::with_capacity(BURST)).collect();
    let mut sent = 0;
    for _ in 0..rounds {
        fill(&pool, &mut bursts);
        sent += callgrind_tx(&mut q, &mut bursts);
        port.process();
    }
    let (pool18, port18, mut q18) = tx_rig(18);
    let mut sent18 = 0;
    for _ in 0..rounds {
        fill(&pool18, &mut bursts);
        sent18 += callgrind_tx18(&mut q18, &mut bursts);
        port18.process();
    }
    let (_rxpool, rxport, mut rxq) = rx_rig();
    let mut out = Vec::with_capacity(BURST * BATCH);
    let mut got = 0;
    for _ in 0..rounds {
        for _ in 0..BURST * BATCH {
            rxport.inject_frame(&[0u8; 64]);
        }
        rxport.process();
        got += callgrind_rx(&mut rxq, &mut out);
        out.clear();
    }
    let (_zpool, zport, mut zq) = rx_rig_zip();
    let mut gotzip = 0;
    for _ in 0..rounds {
        for _ in 0..BURST * BATCH {
            zport.inject_frame(&[0u8; 64]);
        }
        zport.process();
        gotzip += callgrind_rxzip(&mut zq, &mut out);
        out.clear();
    }
    println!(
        "callgrind: rx_packets from compressed sessions {gotzip} ({} mini-CQEs)",
        zport.counters().mini_cqes
    );
    let dev = per_burst_device(rounds, false, callgrind_txdev);
    let empw = per_burst_device(rounds, true, callgrind_txempw);
    let allocated = alloc_rounds(rounds);
    let held = full_ring_calls(rounds);
    println!(
        "callgrind: tx_packets {sent} (min inline 18: {sent18}; device after each burst: \
         {dev}, eMPW: {empw}) rx_packets {got}; allocated from the queue's cache {allocated}; \
         on a full ring: {held} kept"
    );
}

criterion_group!(benches, bench);

fn main() {
    if let Some(n) = std::env::var("RAWQ_DV_CALLGRIND")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        callgrind(n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
