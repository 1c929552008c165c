//! The device model's own cost per frame (what `pktgen -b model` asks of the model's thread).
//!
//! A DV queue on a [`ModelPort`] sends a burst of 32 single-buffer 60-byte frames (as
//! `pktgen -b model -s 60` does: enhanced multi-packet WQEs, a completion requested every 32
//! packets); then the device runs its rounds ([`rawq::dv::model::hw::Hw::process`], of the
//! crate `rawq-model`, what the model's thread calls) until one finds nothing to do, inside an `#[inline(never)]`
//! function, so that callgrind counts the device's work (the empty round included, as the
//! model's thread polls while it keeps up) and nothing of the driver's.
//!
//! * `sink`: tx only, the wire discards (pktgen's tx-only run).
//! * `sink-send`: as `sink` with one SEND WQE per frame (no eMPW).
//! * `loop`: the port's wire loops back (pktgen's `--txrx`): every frame also goes through the
//!   port's receive side (steering, RSS hash, checksum checks, RQ fill, receive CQE); the
//!   driver drains the RQ outside the counted function.
//!
//! * `idle`: a round that finds nothing to do (per round, not per frame).
//!
//! Figures (`scripts/callgrind-model.sh --base 72af6de`, one run; a 2-vCPU AMD EPYC VM),
//! instructions per frame (idle: per round):
//!
//! | | sink | sink-send | loop | idle round |
//! |---|---|---|---|---|
//! | before (72af6de) | 224.5 | 590.2 | 2152.0 | 426.0 |
//! | after (branch `modelspeed`) | 89.2 | 380.0 | 1442.9 | 303.0 |
//!
//! `RAWQ_MODEL_CALLGRIND=N` runs N rounds of 16 bursts each (`scripts/callgrind-model.sh`);
//! without it, a short timed run prints ns per frame of each (noisy; read the instruction
//! counts).

use std::hint::black_box;
use std::time::{Duration, Instant};

use rawq::dv::model::{ModelOptions, ModelPort, ModelWire};
use rawq::{HugePages, Mempool, MempoolConfig, Packet, Queue};

const BURST: usize = 32;
const BATCH: usize = 16; // bursts per round of the bench (512 frames)
const LEN: usize = 60;

struct Rig {
    pool: Mempool,
    port: ModelPort,
    q: Queue,
    bursts: Vec<Vec<Packet>>,
    rx: Vec<Packet>,
}

fn rig(wire: ModelWire, empw: bool) -> Rig {
    let pool = Mempool::new(&MempoolConfig {
        buffers: 16384,
        huge_pages: HugePages::Try,
        ..Default::default()
    })
    .expect("pool");
    let port = ModelPort::new(ModelOptions {
        sq_wqebbs: 2048,
        rq_wqes: 1024,
        wire_capacity: 1024,
        empw,
        wire,
        ..Default::default()
    })
    .expect("model");
    let q = port.queue(0, &pool).expect("queue").into_queue();
    Rig {
        pool,
        port,
        q,
        bursts: (0..BATCH).map(|_| Vec::with_capacity(BURST)).collect(),
        rx: Vec::with_capacity(BURST * BATCH),
    }
}

/// The driver's side of one round: BATCH bursts of fresh frames (not counted).
fn post(r: &mut Rig) {
    for b in r.bursts.iter_mut() {
        r.pool.alloc_bulk(b, BURST).expect("buffers");
        for (i, p) in b.iter_mut().enumerate() {
            p.set_len(LEN).expect("len");
            // An IPv4/UDP-looking frame (what pktgen sends), distinct per packet.
            let d = p.data_mut();
            d[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
            d[12..14].copy_from_slice(&[0x08, 0x00]);
            d[14] = 0x45;
            d[16..18].copy_from_slice(&((LEN - 14) as u16).to_be_bytes());
            d[22] = 64;
            d[23] = 17;
            d[26..30].copy_from_slice(&[10, 0, 0, 1]);
            d[30..34].copy_from_slice(&[10, 0, 0, 2]);
            d[34..36].copy_from_slice(&(1024 + i as u16).to_be_bytes());
            d[36..38].copy_from_slice(&9u16.to_be_bytes());
            d[38..40].copy_from_slice(&((LEN - 34) as u16).to_be_bytes());
        }
    }
}

/// After the device's round: the driver takes what came back (loopback) and its completions.
fn drain(r: &mut Rig) -> usize {
    let mut n = 0;
    loop {
        let k = r.q.rx_burst(&mut r.rx, BURST * BATCH);
        if k == 0 {
            break;
        }
        n += k;
        r.rx.clear();
    }
    n
}

/// The device's rounds until one finds nothing to do.
#[inline(never)]
fn callgrind_sink(port: &ModelPort) -> usize {
    let mut n = 0;
    while port.hw().process() > 0 {
        n += 1;
    }
    n
}

#[inline(never)]
fn callgrind_sink_send(port: &ModelPort) -> usize {
    // (Not the same machine code as `callgrind_sink`, so the linker cannot fold the two.)
    let p = black_box(port);
    let mut n = 0;
    while p.hw().process() > 0 {
        n += 1;
    }
    n
}

#[inline(never)]
fn callgrind_loop(port: &ModelPort) -> usize {
    let p = black_box(port);
    let mut n = 0;
    while black_box(p.hw().process()) > 0 {
        n += 1;
    }
    n
}

#[inline(never)]
fn callgrind_idle(port: &ModelPort) -> usize {
    black_box(port).hw().process()
}

/// Each burst is followed by the device's rounds, as when the device's thread keeps up.
fn run(r: &mut Rig, rounds: u64, dev: fn(&ModelPort) -> usize) -> (u64, Duration) {
    let mut t = Duration::ZERO;
    for _ in 0..rounds {
        post(r);
        for b in 0..BATCH {
            r.q.tx_burst(&mut r.bursts[b]);
            assert!(r.bursts[b].is_empty(), "SQ full: the device fell behind");
            let t0 = Instant::now();
            dev(&r.port);
            t += t0.elapsed();
        }
        drain(r);
    }
    (r.port.counters().tx_frames, t)
}

fn main() {
    let rounds = std::env::var("RAWQ_MODEL_CALLGRIND")
        .ok()
        .and_then(|s| s.parse().ok());
    let timed = rounds.is_none();
    let rounds = rounds.unwrap_or(2000);
    let mut out = Vec::new();
    for (name, wire, empw, f) in [
        (
            "sink",
            ModelWire::Sink,
            true,
            callgrind_sink as fn(&ModelPort) -> usize,
        ),
        ("sink-send", ModelWire::Sink, false, callgrind_sink_send),
        ("loop", ModelWire::Loopback, true, callgrind_loop),
    ] {
        let mut r = rig(wire, empw);
        let (frames, t) = run(&mut r, rounds, f);
        let c = r.port.counters();
        assert_eq!(
            frames,
            rounds * (BURST * BATCH) as u64,
            "{name}: frames lost"
        );
        if std::env::var_os("RAWQ_MODEL_DEBUG").is_some() {
            eprintln!("{name}: {c:?}");
        }
        if name == "loop" {
            assert_eq!(c.rx_frames, frames, "loop: frames not received");
        }
        out.push(format!(
            "{name}: {frames} frames{}",
            if timed {
                format!(", {:.2} ns/frame", t.as_nanos() as f64 / frames as f64)
            } else {
                String::new()
            }
        ));
    }
    // An idle round: what each poll costs the device's thread while it waits for the driver.
    let r = rig(ModelWire::Sink, true);
    let t0 = Instant::now();
    let mut n = 0;
    for _ in 0..rounds * BATCH as u64 {
        n += callgrind_idle(&r.port);
    }
    assert_eq!(n, 0, "idle rounds found work");
    let t = t0.elapsed();
    if timed {
        out.push(format!(
            "idle round {:.2} ns",
            t.as_nanos() as f64 / (rounds * BATCH as u64) as f64
        ));
    }
    println!("model: {}", out.join("; "));
}
