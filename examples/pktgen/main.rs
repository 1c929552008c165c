//! pktgen: an rdma-pktgen-style traffic generator and counter on rawq.
//!
//! ```text
//! pktgen -b xdp -d veth0 --dst-mac 02:..:02 --src-ip 10.0.0.1 --dst-ip 10.0.0.2 -s 60 -r 1Mpps -t 5
//! pktgen -b xdp -d veth1 --rx --rule 'udp dst-port 9000 -> queue 0' -t 6 --json
//! ```
//! One thread per queue, pinned to a core; live stats once a second on stderr; a final summary
//! (or `--json`) on Ctrl-C, at `--count` or after `--duration`.

mod cli;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rawq::flow::Rule;
use rawq::gen::{FrameSpec, Pacer, SeqTracker, Stamper, WIRE_OVERHEAD};
use rawq::{Backend, MempoolConfig, Port, Queue, QueueStats};

use cli::{Args, BackendKind};

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
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pktgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn backend(a: &Args) -> rawq::Result<Backend> {
    let dev = || {
        if a.dev.is_empty() {
            Err(rawq::Error::Config("this backend needs --dev".into()))
        } else {
            Ok(a.dev.clone())
        }
    };
    Ok(match a.backend {
        BackendKind::Xdp => Backend::Xdp { ifname: dev()? },
        BackendKind::Verbs => Backend::Verbs {
            device: dev()?,
            port: a.port,
        },
        BackendKind::Dv => Backend::Dv {
            device: dev()?,
            port: a.port,
        },
        BackendKind::Model => model_backend(a)?,
    })
}

/// The software mlx5 device: a sink for sending (what is measured is the driver's cost), a
/// loopback for --txrx / --rx.
#[cfg(feature = "mlx5")]
fn model_backend(a: &Args) -> rawq::Result<Backend> {
    use rawq::dv::model::{ModelOptions, ModelWire};
    Ok(Backend::Model(ModelOptions {
        wire: if a.txrx || a.rx {
            ModelWire::Loopback
        } else {
            ModelWire::Sink
        },
        empw: true,
        ..Default::default()
    }))
}
#[cfg(not(feature = "mlx5"))]
fn model_backend(_: &Args) -> rawq::Result<Backend> {
    Err(rawq::Error::BackendUnavailable {
        backend: "model",
        feature: "mlx5",
    })
}

/// Frames to send: a template stamper or the frames of a pcap file.
enum Source {
    Template(Stamper),
    Pcap(Vec<Vec<u8>>),
}

fn source(a: &Args) -> rawq::Result<Source> {
    if let Some(path) = &a.pcap {
        let frames = read_pcap(path)
            .map_err(|e| rawq::Error::Config(format!("--pcap {}: {e}", path.display())))?;
        return Ok(Source::Pcap(frames));
    }
    let src_mac = a
        .src_mac
        .or_else(|| rawq::gen::netdev_mac(&a.dev))
        .unwrap_or([2, 0, 0, 0, 0, 1]);
    Ok(Source::Template(Stamper::new(FrameSpec {
        dst_mac: a.dst_mac,
        src_mac,
        src_ip: a.src_ip,
        dst_ip: a.dst_ip,
        src_port: a.src_port,
        dst_port: a.dst_port,
        flows: a.flows,
        vary: a.vary.into(),
        sizes: a.size.clone(),
        stamp: a.seq,
    })?))
}

fn read_pcap(path: &std::path::Path) -> Result<Vec<Vec<u8>>, String> {
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut r = pcap_file::pcap::PcapReader::new(f).map_err(|e| e.to_string())?;
    let mut frames = Vec::new();
    while let Some(p) = r.next_packet() {
        frames.push(p.map_err(|e| e.to_string())?.data.into_owned());
    }
    if frames.is_empty() {
        return Err("no packets in the file".into());
    }
    Ok(frames)
}

fn run(a: &Args) -> rawq::Result<()> {
    let src = Arc::new(source(a)?);
    let max_len = match &*src {
        Source::Template(s) => s.spec().sizes.bounds().1 as usize,
        Source::Pcap(f) => f.iter().map(Vec::len).max().unwrap_or(60),
    };
    let buf_size = (max_len + 256).next_power_of_two().max(2048) as u32;
    let mut b = Port::builder(backend(a)?)
        .queues(a.queues)
        .rx_ring(a.ring)
        .tx_ring(a.ring)
        .pool_config(MempoolConfig {
            buf_size,
            ..Default::default()
        });
    if a.rx || a.txrx {
        let rules: Vec<Rule> = if a.rules.is_empty() {
            let qs: Vec<String> = (0..a.queues).map(|q| q.to_string()).collect();
            vec![format!("udp dst-port {} -> rss {}", a.dst_port, qs.join(",")).parse()?]
        } else {
            a.rules
                .iter()
                .map(|r| r.parse())
                .collect::<Result<_, _>>()?
        };
        b = b.rules(rules);
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
    let per_q_count = a.count.div_ceil(a.queues as u64);
    let mean = match &*src {
        Source::Template(s) => s.spec().sizes.mean(),
        Source::Pcap(f) => f.iter().map(Vec::len).sum::<usize>() as f64 / f.len() as f64,
    };
    let per_q_pps = a.rate.pps(mean).map(|p| p / a.queues as f64);
    let workers: Vec<_> = port
        .take_queues()
        .into_iter()
        .map(|q| {
            let core = a.cores.as_ref().map_or(q.index() as usize % ncores, |c| {
                c[q.index() as usize % c.len()]
            });
            let (stop, src, burst, rx, txrx) = (stop.clone(), src.clone(), a.burst, a.rx, a.txrx);
            std::thread::spawn(move || {
                if let Err(e) = rawq::gen::pin_to_core(core) {
                    eprintln!("pktgen: queue {}: not pinned: {e}", q.index());
                }
                if rx {
                    rx_loop(q, &stop, burst)
                } else {
                    tx_loop(q, &src, &stop, burst, per_q_count, per_q_pps, txrx)
                }
            })
        })
        .collect();

    // Live stats and stop conditions.
    let t0 = Instant::now();
    let deadline = a.duration.map(|d| t0 + Duration::from_secs_f64(d));
    let mut last = (
        t0,
        QueueStats::default(),
        vec![QueueStats::default(); a.queues as usize],
    );
    while !workers.iter().all(|w| w.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            stop.store(true, Relaxed);
        }
        if now - last.0 >= Duration::from_secs(1) && !a.quiet {
            let per_q: Vec<QueueStats> =
                port.stats_readers().iter().map(|r| r.snapshot()).collect();
            let dt = (now - last.0).as_secs_f64();
            let tot = port.stats();
            eprintln!("{}", rate_line("total", a.rx, &tot, &last.1, dt));
            if a.verbose {
                for (i, (s, p)) in per_q.iter().zip(&last.2).enumerate() {
                    eprintln!("{}", rate_line(&format!("  q{i}"), a.rx, s, p, dt));
                }
            }
            last = (now, tot, per_q);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let mut seq = SeqTracker::default();
    for w in workers {
        let t = w
            .join()
            .map_err(|_| rawq::Error::Config("a queue thread panicked".into()))?;
        seq.stamped += t.stamped;
        seq.gaps += t.gaps;
        seq.out_of_order += t.out_of_order;
    }
    report(a, &port, &info, elapsed, &seq);
    Ok(())
}

fn rate_line(label: &str, rx: bool, s: &QueueStats, prev: &QueueStats, dt: f64) -> String {
    let (p, b, e, p0, b0) = if rx {
        (
            s.rx_packets,
            s.rx_bytes,
            s.rx_errors + s.rx_drops,
            prev.rx_packets,
            prev.rx_bytes,
        )
    } else {
        (
            s.tx_packets,
            s.tx_bytes,
            s.tx_errors + s.tx_drops,
            prev.tx_packets,
            prev.tx_bytes,
        )
    };
    let pps = (p - p0) as f64 / dt;
    let bps = ((b - b0) + (p - p0) * WIRE_OVERHEAD) as f64 * 8.0 / dt;
    format!(
        "{label}: {} {:>10.0} pps {:>8.3} Gbit/s (L1)  total {p}  errors {e}",
        if rx { "rx" } else { "tx" },
        pps,
        bps / 1e9
    )
}

/// Sends until stopped, `count` packets (0 = unlimited) have gone, at `pps` (None = max). With
/// `txrx`, also counts what arrives on the queue (and waits a moment at the end for stragglers).
fn tx_loop(
    mut q: Queue,
    src: &Source,
    stop: &AtomicBool,
    burst: usize,
    count: u64,
    pps: Option<f64>,
    txrx: bool,
) -> SeqTracker {
    let mut pacer = Pacer::new(pps);
    let mut pkts = Vec::with_capacity(burst);
    let mut back = Vec::with_capacity(burst);
    let mut seq = SeqTracker::default();
    let mut receive = |q: &mut Queue| {
        if txrx && q.rx_burst(&mut back, burst) > 0 {
            for p in back.drain(..) {
                if let Some(s) = Stamper::read_stamp(p.data()) {
                    seq.record(s);
                }
            }
        }
    };
    let (stream, mut i) = (q.index(), 0u64);
    let mut sent = 0u64;
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
        let fresh = want.saturating_sub(pkts.len());
        let start = pkts.len();
        if q.alloc_burst(&mut pkts, fresh).is_err() {
            q.reclaim();
            continue;
        }
        for p in &mut pkts[start..] {
            let ok = match src {
                Source::Template(st) => {
                    let len = st.spec().sizes.size(i) as usize;
                    p.set_len(len)
                        .map(|_| st.write(p.data_mut(), len, i as u32, stream, i))
                }
                Source::Pcap(frames) => {
                    p.copy_from_slice(&frames[(i % frames.len() as u64) as usize])
                }
            };
            if let Err(e) = ok {
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
    while q.reclaim() > 0 || t.elapsed() < linger {
        receive(&mut q);
        if t.elapsed() > Duration::from_millis(500) {
            break;
        }
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
        for p in pkts.drain(..) {
            if let Some(s) = Stamper::read_stamp(p.data()) {
                seq.record(s);
            }
        }
    }
    seq
}

fn report(a: &Args, port: &Port, info: &rawq::PortInfo, secs: f64, seq: &SeqTracker) {
    let s = port.stats();
    let (packets, bytes, errors, drops) = if a.rx {
        (s.rx_packets, s.rx_bytes, s.rx_errors, s.rx_drops)
    } else {
        (s.tx_packets, s.tx_bytes, s.tx_errors, s.tx_drops)
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
        pps: packets as f64 / secs,
        bps_l1: (bytes + packets * WIRE_OVERHEAD) as f64 * 8.0 / secs,
        errors,
        drops,
        rx_packets: s.rx_packets,
        seq_stamped: seq.stamped,
        seq_gaps: seq.gaps,
        seq_out_of_order: seq.out_of_order,
    };
    if a.json {
        println!("{}", serde_json::to_string(&sum).unwrap_or_default());
    } else {
        println!(
            "pktgen {}: {} packets, {} bytes in {:.2} s: {:.3} Mpps, {:.3} Gbit/s (L1), {} errors, {} drops{}",
            sum.direction,
            sum.packets,
            sum.bytes,
            sum.duration_s,
            sum.pps / 1e6,
            sum.bps_l1 / 1e9,
            sum.errors,
            sum.drops,
            if seq.stamped > 0 {
                format!(", seq: {} stamped, {} missing, {} out of order", seq.stamped, seq.gaps, seq.out_of_order)
            } else {
                String::new()
            }
        );
    }
}
