//! pktgen: an rdma-pktgen-style traffic generator and counter on rawq.
//!
//! ```text
//! pktgen -b xdp -d veth0 --dst-mac 02:..:02 --src-ip 10.0.0.1 --dst-ip 10.0.0.2 -s 60 -r 1Mpps -t 5
//! pktgen -b xdp -d veth1 --rx --rule 'udp dst-port 9000 -> queue 0' -t 6 --json
//! ```
//! One thread per queue, pinned to a core; live stats once a second on stderr; a final summary
//! (or `--json`) on Ctrl-C, at `--count` or after `--duration`.

mod cli;
mod measure;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rawq::gen::{FrameSource, Pacer, SeqTracker, Stamper};
use rawq::{MempoolConfig, Port, Queue, QueueStats};

use cli::Args;

/// The final report (`--json`).
#[derive(serde::Serialize)]
struct Summary {
    backend: &'static str,
    device: String,
    mode: String,
    direction: &'static str,
    queues: u16,
    duration_s: f64,
    packets: u64,
    bytes: u64,
    pps: f64,
    bps_l1: f64,
    errors: u64,
    drops: u64,
    rx_packets: u64,
    seq_stamped: u64,
    seq_gaps: u64,
    seq_out_of_order: u64,
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pktgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> rawq::Result<()> {
    let src = Arc::new(a.source()?);
    let m = measure::Measure::new(&a.measure, &src, a.rx, a.txrx, a.rate.pps(1.0).is_some())?;
    let buf_size = (src.max_len() + 256).next_power_of_two().max(2048) as u32;
    let mut b = Port::builder(a.backend()?)
        .queues(a.queues)
        .rx_ring(a.ring)
        .tx_ring(a.ring)
        .pool_config(MempoolConfig {
            buf_size,
            ..Default::default()
        });
    if a.rx || a.txrx {
        b = b.rules(a.rules()?);
    }
    let mut port = b.open()?;
    let info = port.info().clone();
    eprintln!(
        "pktgen: {} on {} ({}), {} queue(s), pool on {}",
        info.backend,
        info.device,
        info.mode,
        info.queues,
        port.pool().memory_kind()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Relaxed))
        .map_err(|e| rawq::Error::Config(format!("cannot install the Ctrl-C handler: {e}")))?;

    let ncores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let count = a.count.div_ceil(a.queues as u64);
    let pps = a.rate.pps(src.mean_len()).map(|p| p / a.queues as f64);
    let workers: Vec<_> = port
        .take_queues()
        .into_iter()
        .map(|q| {
            let i = q.index() as usize;
            let core = a.cores.as_ref().map_or(i % ncores, |c| c[i % c.len()]);
            let (stop, src, burst, rx, txrx) = (stop.clone(), src.clone(), a.burst, a.rx, a.txrx);
            let m = m.clone();
            std::thread::spawn(move || {
                if let Err(e) = rawq::gen::pin_to_core(core) {
                    eprintln!("pktgen: queue {i}: not pinned: {e}");
                }
                let mut qm = m.queue(q.index());
                let seq = if rx {
                    rx_loop(q, &stop, burst, &mut qm)
                } else {
                    tx_loop(q, &src, &stop, burst, count, pps, txrx, &mut qm)
                };
                m.deposit(qm);
                seq
            })
        })
        .collect();

    // Live stats and the stop conditions.
    let t0 = Instant::now();
    let deadline = a.duration.map(|d| t0 + Duration::from_secs_f64(d));
    let mut mon = measure::Monitor::new(&a.measure, a.queues as usize, a.quiet, a.verbose);
    while !workers.iter().all(|w| w.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            stop.store(true, Relaxed);
        }
        mon.poll(|| port.stats_readers().iter().map(|r| r.snapshot()).collect());
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let mut seq = SeqTracker::default();
    for w in workers {
        seq.merge(
            &w.join()
                .map_err(|_| rawq::Error::Config("a queue thread panicked".into()))?,
        );
    }
    let extras =
        measure::Extras::collect(&m, &mon, &port.stats(), elapsed, a.rate.pps(src.mean_len()));
    report(a, &port, &info, elapsed, &seq, &extras);
    Ok(())
}

/// Sends until stopped, `count` packets (0 = unlimited) have gone, at `pps` (None = max). With
/// `txrx`, also counts what arrives on the queue (and waits a moment at the end for stragglers).
#[allow(clippy::too_many_arguments)] // the loop's knobs, plus the measurement half
fn tx_loop(
    mut q: Queue,
    src: &FrameSource,
    stop: &AtomicBool,
    burst: usize,
    count: u64,
    pps: Option<f64>,
    txrx: bool,
    qm: &mut measure::QueueMeasure,
) -> SeqTracker {
    let mut pacer = Pacer::new(pps);
    let (mut pkts, mut back) = (Vec::with_capacity(burst), Vec::with_capacity(burst));
    let mut seq = SeqTracker::default();
    let mut receive = |q: &mut Queue, qm: &mut measure::QueueMeasure| {
        // Drain what is there (a few bursts at most per pass), so that returning frames do not
        // queue in the ring while this loop paces or sleeps: that wait would be measured as
        // latency.
        for _ in 0..16 {
            if !txrx || q.rx_burst(&mut back, burst) == 0 {
                break;
            }
            qm.on_rx(&back);
            let full = back.len() == burst;
            back.drain(..)
                .filter_map(|p| Stamper::read_stamp(p.data()))
                .for_each(|s| seq.record(s));
            if !full {
                break;
            }
        }
    };
    let (stream, mut i, mut sent) = (q.index(), 0u64, 0u64);
    while !stop.load(Relaxed) && (count == 0 || sent < count) {
        receive(&mut q, qm);
        let room = if count == 0 {
            burst as u64
        } else {
            (count - sent).min(burst as u64)
        };
        let want = pacer.allowance(Instant::now(), room as usize);
        if want == 0 {
            q.reclaim();
            if pacer.wait_hint(Instant::now()) > Duration::from_micros(200) {
                std::thread::sleep(Duration::from_micros(100));
            }
            continue;
        }
        // Packets left over from a full ring go first; top up with fresh ones.
        let start = pkts.len();
        if q.alloc_burst(&mut pkts, want.saturating_sub(start))
            .is_err()
        {
            q.reclaim();
            continue;
        }
        let burst_ns = qm.burst_clock();
        for p in &mut pkts[start..] {
            if let Err(e) = measure::fill(src, p, i, stream, qm.stamp(i, burst_ns)) {
                eprintln!("pktgen: queue {stream}: {e}");
                stop.store(true, Relaxed);
                return seq;
            }
            i += 1;
        }
        let n = q.tx_burst(&mut pkts);
        qm.on_tx(n);
        pacer.sent(n);
        sent += n as u64;
    }
    pkts.clear();
    // Let the device finish what it has (and, with txrx, the last frames come back).
    let t = Instant::now();
    let linger = Duration::from_millis(if txrx { 300 } else { 20 });
    while (q.reclaim() > 0 || t.elapsed() < linger) && t.elapsed() < Duration::from_millis(500) {
        receive(&mut q, qm);
    }
    seq
}

/// Receives and counts until stopped; tracks sequence stamps.
fn rx_loop(
    mut q: Queue,
    stop: &AtomicBool,
    burst: usize,
    qm: &mut measure::QueueMeasure,
) -> SeqTracker {
    let mut pkts = Vec::with_capacity(burst);
    let mut seq = SeqTracker::default();
    let mut idle = 0u32;
    while !stop.load(Relaxed) {
        if q.rx_burst(&mut pkts, burst) == 0 {
            // Busy-poll while traffic flows; after a quiet spell, nap so that an idle receiver
            // leaves its core to others (a ring of 8192 covers 100 µs up to 80 Mpps).
            idle += 1;
            if idle > 10_000 {
                std::thread::sleep(Duration::from_micros(100));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        idle = 0;
        qm.on_rx(&pkts);
        pkts.drain(..)
            .filter_map(|p| Stamper::read_stamp(p.data()))
            .for_each(|s| seq.record(s));
    }
    seq
}

fn report(
    a: &Args,
    port: &Port,
    info: &rawq::PortInfo,
    secs: f64,
    seq: &SeqTracker,
    extras: &measure::Extras,
) {
    let s = port.stats();
    let zero = QueueStats::default();
    let (packets, bytes, errors, drops, r) = if a.rx {
        (
            s.rx_packets,
            s.rx_bytes,
            s.rx_errors,
            s.rx_drops,
            s.rx_rates(&zero, secs),
        )
    } else {
        (
            s.tx_packets,
            s.tx_bytes,
            s.tx_errors,
            s.tx_drops,
            s.tx_rates(&zero, secs),
        )
    };
    let sum = Summary {
        backend: info.backend,
        device: info.device.clone(),
        mode: info.mode.clone(),
        direction: if a.rx { "rx" } else { "tx" },
        queues: info.queues,
        duration_s: secs,
        packets,
        bytes,
        pps: r.pps,
        bps_l1: r.bps_l1,
        errors,
        drops,
        rx_packets: s.rx_packets,
        seq_stamped: seq.stamped,
        seq_gaps: seq.gaps,
        seq_out_of_order: seq.out_of_order,
    };
    // With --json-lines the summary is the last JSON line, so stdout stays one object a line.
    if a.json || a.measure.json_lines {
        let mut v = serde_json::to_value(&sum).unwrap_or_default();
        extras.extend(&mut v);
        println!("{v}");
        return;
    }
    let seq_text = if seq.stamped > 0 {
        format!(
            ", seq: {} stamped, {} missing, {} out of order",
            seq.stamped, seq.gaps, seq.out_of_order
        )
    } else {
        String::new()
    };
    println!(
        "pktgen {}: {} packets, {} bytes in {:.2} s: {:.3} Mpps, {:.3} Gbit/s (L1), {} errors, {} drops{seq_text}",
        sum.direction, sum.packets, sum.bytes, sum.duration_s, sum.pps / 1e6, sum.bps_l1 / 1e9, sum.errors, sum.drops
    );
    extras.print();
}
