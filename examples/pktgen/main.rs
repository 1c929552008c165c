//! pktgen: an rdma-pktgen-style traffic generator and counter on rawq.
//!
//! ```text
//! pktgen -b xdp -d veth0 --dst-mac 02:..:02 --src-ip 10.0.0.1 --dst-ip 10.0.0.2 -s 60 -r 1Mpps -t 5
//! pktgen -b xdp -d veth1 --rx --rule 'udp dst-port 9000 -> queue 0' -t 6 --json
//! ```
//! One thread per queue, pinned to a core; live stats once a second on stderr; a final summary
//! (or `--json`) on Ctrl-C, at `--count` or after `--duration`.

mod cli;
mod live;

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
    if a.engine == live::Engine::Live {
        return live::run(a);
    }
    let src = Arc::new(a.source()?);
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
            std::thread::spawn(move || {
                if let Err(e) = rawq::gen::pin_to_core(core) {
                    eprintln!("pktgen: queue {i}: not pinned: {e}");
                }
                if rx {
                    rx_loop(q, &stop, burst)
                } else {
                    tx_loop(q, &src, &stop, burst, count, pps, txrx)
                }
            })
        })
        .collect();

    // Live stats and the stop conditions.
    let t0 = Instant::now();
    let deadline = a.duration.map(|d| t0 + Duration::from_secs_f64(d));
    let mut last = (t0, vec![QueueStats::default(); a.queues as usize]);
    while !workers.iter().all(|w| w.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            stop.store(true, Relaxed);
        }
        if now - last.0 >= Duration::from_secs(1) && !a.quiet {
            let cur: Vec<QueueStats> = port.stats_readers().iter().map(|r| r.snapshot()).collect();
            print_rates(a, &cur, &last.1, (now - last.0).as_secs_f64());
            last = (now, cur);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let mut seq = SeqTracker::default();
    for w in workers {
        seq.merge(
            &w.join()
                .map_err(|_| rawq::Error::Config("a queue thread panicked".into()))?,
        );
    }
    report(a, &port, &info, elapsed, &seq);
    Ok(())
}

/// Sends until stopped, `count` packets (0 = unlimited) have gone, at `pps` (None = max). With
/// `txrx`, also counts what arrives on the queue (and waits a moment at the end for stragglers).
fn tx_loop(
    mut q: Queue,
    src: &FrameSource,
    stop: &AtomicBool,
    burst: usize,
    count: u64,
    pps: Option<f64>,
    txrx: bool,
) -> SeqTracker {
    let mut pacer = Pacer::new(pps);
    let (mut pkts, mut back) = (Vec::with_capacity(burst), Vec::with_capacity(burst));
    let mut seq = SeqTracker::default();
    let mut receive = |q: &mut Queue| {
        if txrx && q.rx_burst(&mut back, burst) > 0 {
            back.drain(..)
                .filter_map(|p| Stamper::read_stamp(p.data()))
                .for_each(|s| seq.record(s));
        }
    };
    let (stream, mut i, mut sent) = (q.index(), 0u64, 0u64);
    while !stop.load(Relaxed) && (count == 0 || sent < count) {
        receive(&mut q);
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
        for p in &mut pkts[start..] {
            if let Err(e) = src.fill(p, i, stream) {
                eprintln!("pktgen: queue {stream}: {e}");
                stop.store(true, Relaxed);
                return seq;
            }
            i += 1;
        }
        let n = q.tx_burst(&mut pkts);
        pacer.sent(n);
        sent += n as u64;
    }
    pkts.clear();
    // Let the device finish what it has (and, with txrx, the last frames come back).
    let t = Instant::now();
    let linger = Duration::from_millis(if txrx { 300 } else { 20 });
    while (q.reclaim() > 0 || t.elapsed() < linger) && t.elapsed() < Duration::from_millis(500) {
        receive(&mut q);
    }
    seq
}

/// Receives and counts until stopped; tracks sequence stamps.
fn rx_loop(mut q: Queue, stop: &AtomicBool, burst: usize) -> SeqTracker {
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
        pkts.drain(..)
            .filter_map(|p| Stamper::read_stamp(p.data()))
            .for_each(|s| seq.record(s));
    }
    seq
}

fn print_rates(a: &Args, cur: &[QueueStats], prev: &[QueueStats], secs: f64) {
    let line = |label: &str, c: &QueueStats, p: &QueueStats| {
        let (r, total, errors) = if a.rx {
            (c.rx_rates(p, secs), c.rx_packets, c.rx_errors + c.rx_drops)
        } else {
            (c.tx_rates(p, secs), c.tx_packets, c.tx_errors + c.tx_drops)
        };
        let dir = if a.rx { "rx" } else { "tx" };
        eprintln!(
            "{label}: {dir} {:>10.0} pps {:>8.3} Gbit/s (L1)  total {total}  errors {errors}",
            r.pps,
            r.bps_l1 / 1e9
        );
    };
    let sum = |s: &[QueueStats]| {
        s.iter().fold(QueueStats::default(), |mut acc, q| {
            acc.accumulate(q);
            acc
        })
    };
    line("total", &sum(cur), &sum(prev));
    if a.verbose {
        for (i, (c, p)) in cur.iter().zip(prev).enumerate() {
            line(&format!("  q{i}"), c, p);
        }
    }
}

fn report(a: &Args, port: &Port, info: &rawq::PortInfo, secs: f64, seq: &SeqTracker) {
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
    if a.json {
        println!("{}", serde_json::to_string(&sum).unwrap_or_default());
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
}
