//! fwd: rawq as the packet I/O layer of a forwarder (testpmd's io / macswap modes), on any
//! backend (`-b xdp|verbs|dv|model`).
//!
//! ```text
//! fwd -d veth1 --mode macswap --rule 'udp dst-port 9000 -> queue 0'      # reflect on one port
//! fwd -d veth1 -d veth2 --mode io --rule 'promiscuous -> queue 0'        # bridge two ports
//! ```
//! One port: frames received on queue *q* go back out of queue *q*. Two ports: each port's
//! frames go out of the other. Burst rx → (swap MACs) → tx; what the ring does not take is
//! freed at once (better to drop than to accumulate latency). Live stats once a second.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use rawq::flow::Rule;
use rawq::{Backend, MempoolConfig, Packet, Port, Queue};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Forward frames unchanged.
    Io,
    /// Swap source and destination MAC addresses.
    Macswap,
}

/// fwd: forwards frames between rawq queues or ports, like testpmd's io and macswap modes.
///
/// One --dev: frames steered to queue 0 go back out of it (a reflector). Two --dev: each port's
/// frames go out of the other (a bridge; on xdp both ports share one packet pool, so forwarding
/// copies nothing). Prints what was forwarded and every frame lost on the way.
#[derive(Debug, Parser)]
#[command(name = "fwd", version)]
struct Args {
    /// Backend: xdp, verbs, dv or model.
    #[arg(short, long, default_value = "xdp")]
    backend: String,
    /// Interface(s) (xdp) or RDMA device(s) (verbs, dv); give one or two.
    #[arg(short, long = "dev", required = true, num_args = 1)]
    devs: Vec<String>,
    /// RDMA port number (verbs, dv).
    #[arg(long, default_value_t = 1)]
    port: u8,
    /// Forwarding mode.
    #[arg(short, long, value_enum, default_value = "io")]
    mode: Mode,
    /// Receive queue of -b dv / -b model: cyclic, striding (8 strides per WQE) or striding:N
    /// (N = 8 or 16), as DPDK's mlx5 `mprq_en` devarg.
    #[arg(long, default_value = "cyclic", value_parser = parse_rq)]
    rq: rawq::RqType,
    /// Receive CQE compression of -b dv / -b model: off, hash (cyclic RQ only) or csum, as DPDK's
    /// mlx5 `rxq_cqe_comp_en` devarg (default: dv compresses where the device can, the model
    /// does not).
    #[arg(long, value_parser = parse_cqe_comp)]
    cqe_comp: Option<rawq::CqeComp>,
    /// Flow rules steering the frames to forward (on every port). Repeatable.
    #[arg(long = "rule", required = true)]
    rules: Vec<String>,
    /// Run time: 5, 5s, 500ms, 2m, 1h (default: until Ctrl-C or SIGTERM).
    #[arg(short = 't', long, value_parser = rawq::gen::parse_duration, allow_hyphen_values = true)]
    duration: Option<Duration>,
    /// Ring size (rx and tx descriptors per queue), a power of two from 8 to 32768: a larger
    /// ring rides out longer stalls of the forwarding thread without rx drops.
    #[arg(long, default_value_t = 1024)]
    ring: u32,
    /// Burst size (1 to 4096).
    #[arg(long, default_value_t = 32, value_parser = parse_burst)]
    burst: usize,
    /// No live stats.
    #[arg(long)]
    quiet: bool,
    /// Hold each frame this long before sending it on (e.g. 5ms, 250us, 1s): a delay line for
    /// test rigs where netem is missing. Frames wait in a time-ordered queue; the loop never
    /// blocks. Held frames occupy pool buffers, so rate × delay must stay below the pool size
    /// or the receive side runs out of buffers (counted as rx drops).
    #[arg(long, value_parser = parse_delay)]
    delay: Option<Duration>,
}

fn parse_delay(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = [("us", 1e-6), ("ms", 1e-3), ("s", 1.0)]
        .iter()
        .find_map(|&(u, m)| t.strip_suffix(u).map(|v| (v, m)))
        .unwrap_or((t, 1.0));
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * unit <= 3600.0 => {
            Ok(Duration::from_secs_f64(v * unit))
        }
        _ => Err(format!(
            "{s:?}: expected a duration up to an hour, e.g. 5ms, 250us, 1s"
        )),
    }
}

/// A fixed delay: frames leave in arrival order once they have been held `delay`. With one
/// delay for every frame, arrival order is deadline order, so a FIFO is the time-ordered queue.
struct DelayLine {
    delay: Duration,
    held: std::collections::VecDeque<(Instant, Packet)>,
}

impl DelayLine {
    fn new(delay: Duration) -> DelayLine {
        DelayLine {
            delay,
            held: std::collections::VecDeque::with_capacity(1 << 16),
        }
    }

    /// Takes the frames of `burst` (received at `now`), then puts back into `burst` up to `max`
    /// frames whose time has come.
    fn pass(&mut self, now: Instant, burst: &mut Vec<Packet>, max: usize) {
        let until = now + self.delay;
        self.held.extend(burst.drain(..).map(|p| (until, p)));
        while burst.len() < max && self.held.front().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, p)) = self.held.pop_front() {
                burst.push(p);
            }
        }
    }
}

fn parse_burst(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: a burst is 1 to 4096 packets")),
    }
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fwd: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> rawq::Result<()> {
    if a.burst > a.ring as usize {
        return Err(rawq::Error::Config(format!(
            "--burst {} is above --ring {}: a burst must fit the ring",
            a.burst, a.ring
        )));
    }
    if a.devs.len() > 2 {
        return Err(rawq::Error::Config("give one or two --dev".into()));
    }
    if a.devs.len() == 2 && a.devs[0] == a.devs[1] {
        return Err(rawq::Error::Config(format!(
            "--dev {} given twice: give one --dev to reflect on a port, or two different ones to \
             bridge them",
            a.devs[0]
        )));
    }
    let rules: Vec<Rule> = a
        .rules
        .iter()
        .map(|r| r.parse())
        .collect::<Result<_, _>>()?;
    let rx = rawq::DvRxOptions {
        rq: a.rq,
        cqe_comp: a.cqe_comp,
    };
    rx.check()?;
    let mut ports: Vec<Port> = Vec::new();
    for d in &a.devs {
        let mut b = Port::builder(backend(a, d, &rx)?)
            .dv_rx(rx)
            .rules(rules.clone())
            .rx_ring(a.ring)
            .tx_ring(a.ring);
        // One pool for both ports, sized for both: a frame received on one can go out of the
        // other as it is.
        b = match ports.first() {
            Some(first) => b.pool(first.pool().clone()),
            None => b.pool_config(MempoolConfig {
                buffers: a.devs.len() as u32 * (2 * a.ring + 1024),
                buf_size: buf_size(a),
                ..Default::default()
            }),
        };
        let port = b.open()?;
        eprintln!("fwd: {} ({}, {})", d, port.info().backend, port.info().mode);
        ports.push(port);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // SIGINT, SIGTERM and SIGHUP all end the run with the summary.
    ctrlc::set_handler(move || s.store(true, Relaxed)).map_err(|e| {
        rawq::Error::Config(format!("cannot install the SIGINT/SIGTERM handler: {e}"))
    })?;

    let mut qs: Vec<Queue> = ports
        .iter_mut()
        .map(|p| p.take_queues().remove(0))
        .collect();
    let t0 = Instant::now();
    let mut last = t0;
    // `refused`: taken off the wire but not taken by the other side's tx ring (freed at once).
    let (mut fwd, mut refused) = (0u64, 0u64);
    let mut burst: Vec<Packet> = Vec::with_capacity(a.burst);
    // With --delay, one delay line per input queue.
    let mut lines: Vec<DelayLine> = a
        .delay
        .map(|d| qs.iter().map(|_| DelayLine::new(d)).collect())
        .unwrap_or_default();
    let mut idle = 0u32;
    while !stop.load(Relaxed) && a.duration.is_none_or(|d| t0.elapsed() < d) {
        // With --delay, nap 50 µs while nothing arrives and the next held frame is due more
        // than 200 µs ahead: a forwarder that never sleeps is preempted on a shared machine for
        // whole time slices, and held frames would leave milliseconds late. Without --delay,
        // busy-poll as before.
        idle += 1;
        if !lines.is_empty() && idle > 100 {
            let next_due = lines
                .iter()
                .filter_map(|l| l.held.front().map(|h| h.0))
                .min();
            if next_due.is_none_or(|t| t > Instant::now() + Duration::from_micros(200)) {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        for i in 0..qs.len() {
            let out = (i + 1) % qs.len();
            let got = qs[i].rx_burst(&mut burst, a.burst);
            if let Some(line) = lines.get_mut(i) {
                line.pass(Instant::now(), &mut burst, a.burst);
            }
            if got == 0 && burst.is_empty() {
                qs[out].reclaim();
                continue;
            }
            idle = 0;
            if a.mode == Mode::Macswap {
                burst.iter_mut().for_each(macswap);
            }
            fwd += qs[out].tx_burst(&mut burst) as u64;
            refused += burst.len() as u64;
            burst.clear(); // frees what the ring did not take
        }
        if !a.quiet && last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            eprintln!("fwd: forwarded {fwd}, {}", losses(&ports, refused));
        }
    }
    for q in &mut qs {
        q.reclaim();
    }
    let held: usize = lines.iter().map(|l| l.held.len()).sum();
    if held > 0 {
        eprintln!("fwd: {held} frames still held by --delay at exit (not sent)");
    }
    drop(qs); // the queues' last kernel counters go into the stats
    println!(
        "fwd: forwarded {fwd} frames in {:.2} s; {}",
        t0.elapsed().as_secs_f64(),
        losses(&ports, refused)
    );
    Ok(())
}

/// Buffers big enough for the largest frame the interfaces' MTUs let arrive (an Ethernet header
/// with a VLAN tag on top of the MTU, and 256 bytes of receive headroom); AF_XDP buffers are at
/// most 4096 bytes.
fn parse_rq(s: &str) -> Result<rawq::RqType, String> {
    s.parse().map_err(|e: rawq::Error| e.to_string())
}

fn parse_cqe_comp(s: &str) -> Result<rawq::CqeComp, String> {
    s.parse().map_err(|e: rawq::Error| e.to_string())
}

/// The backend of `--backend` on `dev`, with `--rq` / `--cqe-comp` applied to the software
/// device (the DV backend takes them from the port's configuration).
fn backend(a: &Args, dev: &str, rx: &rawq::DvRxOptions) -> rawq::Result<Backend> {
    let b = Backend::named(&a.backend, dev, a.port)?;
    #[cfg(feature = "mlx5")]
    if let Backend::Model(mut o) = b {
        use rawq::dv::model::RxKind;
        use rawq::dv::rings::{MiniCqeFormat, Striding};
        if let rawq::RqType::Striding { log_num_strides } = rx.rq {
            o.rx = RxKind::Striding(Striding {
                log_num_strides,
                log_stride_size: rawq::DvRxOptions::log_stride_size(buf_size(a)),
                two_byte_shift: false,
            });
        }
        if let Some(c) = rx.cqe_comp {
            o.cqe_compression = match c {
                rawq::CqeComp::Off => None,
                rawq::CqeComp::Hash => Some(MiniCqeFormat::Hash),
                rawq::CqeComp::Csum => Some(MiniCqeFormat::CsumStrideIdx),
            };
        }
        return Ok(Backend::Model(o));
    }
    if *rx != rawq::DvRxOptions::default() && !matches!(b, Backend::Dv { .. }) {
        return Err(rawq::Error::Config(format!(
            "--rq / --cqe-comp are options of -b dv and -b model, not of -b {}",
            a.backend
        )));
    }
    Ok(b)
}

fn buf_size(a: &Args) -> u32 {
    let mtu = a
        .devs
        .iter()
        .filter_map(|d| rawq::gen::netdev_state(d).and_then(|s| s.mtu))
        .max()
        .unwrap_or(1500) as usize;
    let limit = if a.backend == "xdp" { 4096 } else { 65536 };
    (mtu + 18 + 256).next_power_of_two().clamp(2048, limit) as u32
}

/// Every frame lost on the way, by where: tx ring full (refused), dropped at transmit (tx
/// drops/errors), and dropped before rawq saw it (rx drops: the socket's rx ring was full or
/// its fill ring empty, or the device dropped it).
fn losses(ports: &[Port], refused: u64) -> String {
    let mut s = rawq::QueueStats::default();
    for p in ports {
        s.accumulate(&p.stats());
    }
    format!(
        "dropped {refused} (tx ring full), tx drops {}, tx errors {}, rx drops {} (fill ring \
         empty {} times), rx errors {}",
        s.tx_drops, s.tx_errors, s.rx_drops, s.rx_no_buffer, s.rx_errors
    )
}

fn macswap(p: &mut Packet) {
    let d = p.data_mut();
    if d.len() >= 12 {
        let (dst, src) = d.split_at_mut(6);
        dst.swap_with_slice(&mut src[..6]);
    }
}
