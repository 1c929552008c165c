//! fwd: rawq as the packet I/O layer of a forwarder (testpmd's io, macswap, mac, 5tswap and
//! rxonly forwarding modes), on any backend (`-b xdp|verbs|dv|model`).
//!
//! ```text
//! fwd -d veth1 --mode macswap --rule 'udp dst-port 9000 -> queue 0'      # reflect on one port
//! fwd -d veth1 -d veth2 --mode io --rule 'promiscuous -> queue 0'        # bridge two ports
//! fwd -b model -d m --queues 2 --cores 0,1 --tx-first 512 --rule 'udp dst-port 9000 -> queue 0'
//! ```
//! One port: frames received on queue *q* go back out of queue *q*. Two ports: queue *q* of each
//! port forwards to queue *q* of the other. One thread per queue pair (`--queues`, pinned with
//! `--cores`), each a burst loop rx → (rewrite) → tx; what a tx ring does not take is freed at
//! once and counted (better to drop than to accumulate latency). `--tx-first N` starts the
//! traffic on looped-back or cabled ports. A link that goes down or away ends the run: the
//! summary first, then the cause, and a non-zero status.
//!
//! Files: `cli.rs` (options and their checks), `modes.rs` (what each mode does to a frame, the
//! `--tx-first` frames), `stats.rs` (fwd's counters, live lines, summaries).

#[macro_use]
extern crate rawq_tools;

mod cli;
use rawq_tools::fault::{self, QueueFault, QUEUE_FAULT_AFTER};
use rawq_tools::linkwatch;
mod modes;
mod rxmode;
mod stats;

use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use rawq::{Backend, MempoolConfig, Packet, Port, Queue};

use cli::{Args, Failure, Settings};
use modes::{MacRewrite, Mode};
use stats::{Cells, PortFacts, PortSnap, Shared};

fn main() -> ExitCode {
    let matches = match rawq_tools::generate::matches_of(<Args as clap::CommandFactory>::command())
    {
        Ok(m) => m,
        Err(code) => return code,
    };
    let a = <Args as clap::FromArgMatches>::from_arg_matches(&matches)
        .unwrap_or_else(|e| rawq_tools::out::clap_exit(e));
    match run(&a) {
        Ok(()) => rawq_tools::out::status(),
        Err(e) => {
            say!("fwd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A fixed delay: frames leave in arrival order once they have been held `delay`. With one
/// delay for every frame, arrival order is deadline order, so a FIFO is the time-ordered queue.
struct DelayLine {
    delay: Duration,
    held: VecDeque<(Instant, Packet)>,
}

impl DelayLine {
    fn new(delay: Duration) -> DelayLine {
        DelayLine {
            delay,
            held: VecDeque::with_capacity(1 << 16),
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

/// How long forwarding threads have to end once the run is stopped (a signal, -t, a failure,
/// stdout closed): each looks at the stop every 64 rounds and sleeps 100 ms at most
/// (`--rx-mode`), and a closing queue waits for its device 2 s at most. Past it the run ends
/// with an error naming them, so that one signal always ends fwd (issue 32).
const STOP_BOUND: Duration = Duration::from_secs(15);

/// What every forwarding thread shares: the stop flag, the first link failure, fwd's counters.
struct Run {
    stop: AtomicBool,
    failure: Mutex<Option<rawq::Error>>,
    shared: Shared,
}

impl Run {
    /// Ends the run with `e` as its cause (the first one wins).
    fn fail(&self, e: rawq::Error) {
        if let Ok(mut f) = self.failure.lock() {
            f.get_or_insert(e);
        }
        self.stop.store(true, Relaxed);
    }
}

/// One forwarding thread's view: queue pair `index` of every port.
struct Worker {
    index: usize,
    qs: Vec<Queue>,
    macs: Vec<MacRewrite>,
    /// The --tx-first frames of this thread, per port.
    tx_first: Vec<Vec<Vec<u8>>>,
}

fn run(a: &Args) -> Result<(), Failure> {
    let set = a.check()?;
    let run = Arc::new(Run {
        stop: AtomicBool::new(false),
        failure: Mutex::new(None),
        shared: Shared::new(a.queues as usize, a.devs.len()),
    });
    let r = run.clone();
    // SIGINT, SIGTERM and SIGHUP all end the run with the summary.
    ctrlc::set_handler(move || r.stop.store(true, Relaxed)).map_err(|e| {
        rawq::Error::Config(format!("cannot install the SIGINT/SIGTERM handler: {e}"))
    })?;
    let mut ports = open_ports(a, &set).map_err(cli::in_cli_terms)?;
    let facts: Vec<PortFacts> = a
        .devs
        .iter()
        .zip(&ports)
        .map(|(d, p)| PortFacts {
            name: d.clone(),
            backend: p.info().backend,
            offloads: p.info().offloads,
            tx_dropped0: (p.info().backend == "xdp")
                .then(|| rawq_gen::netdev_state(d).and_then(|s| s.tx_dropped))
                .flatten(),
        })
        .collect();
    // An xdp port must be up to forward; then it is watched: down or gone ends the run.
    for f in facts.iter().filter(|f| f.backend == "xdp") {
        if let Some(e) = link_failure(&f.name) {
            return Err(e.into());
        }
    }
    let macs: Vec<MacRewrite> = (0..ports.len())
        .map(|p| MacRewrite {
            dst: set.peers[p],
            src: port_mac(a, p),
        })
        .collect();
    let names: Vec<(&str, &Port)> = a.devs.iter().map(|d| d.as_str()).zip(&ports).collect();
    let mut watch = linkwatch::LinkWatch::new(a.on_link_down, &names, "fwd");
    let workers = workers(a, &mut ports, &macs)?;
    let t0 = Instant::now();
    let deadline = a.duration.map(|d| t0 + d);
    let threads: Vec<_> = workers
        .into_iter()
        .map(|w| {
            let run = run.clone();
            let cfg = Loop {
                mode: a.mode,
                burst: set.burst,
                delay: a.delay,
                deadline,
                core: a.cores.as_ref().map(|c| c[w.index]),
                rx_mode: a.rx_mode,
            };
            std::thread::Builder::new()
                .name(format!("fwd-q{}", w.index))
                .spawn(move || forward(w, &cfg, &run))
                .map_err(|e| rawq::Error::Config(format!("cannot start a thread: {e}")))
        })
        .collect::<rawq::Result<_>>()?;

    // Live lines, the stop conditions, the links watched.
    let mut prev: Vec<PortSnap> = ports
        .iter()
        .enumerate()
        .map(|(p, port)| PortSnap::take(port, p, &run.shared, &facts[p]))
        .collect();
    let mut last = t0;
    // Once stopped, the threads have STOP_BOUND to end; past it the run ends without them.
    let mut stopped_at: Option<Instant> = None;
    let mut stuck = Vec::new();
    while !threads.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        let now = Instant::now();
        // stdout closed (its reader gone): nothing more can be said, the run ends.
        if deadline.is_some_and(|d| now >= d) || rawq_tools::out::stdout_closed() {
            run.stop.store(true, Relaxed);
        }
        if run.stop.load(Relaxed) {
            let since = *stopped_at.get_or_insert(now);
            if now - since >= STOP_BOUND {
                stuck = (0..threads.len())
                    .filter(|&i| !threads[i].is_finished())
                    .collect::<Vec<_>>();
                break;
            }
        }
        // A receive-only direction sees no error when its link goes: the links' events.
        if let Some(e) = watch.poll("fwd") {
            run.fail(e);
        }
        if now - last >= a.stats_period && (!a.quiet || a.json_lines) {
            let secs = (now - last).as_secs_f64();
            let snaps: Vec<PortSnap> = ports
                .iter()
                .enumerate()
                .map(|(p, port)| PortSnap::take(port, p, &run.shared, &facts[p]))
                .collect();
            if a.json_lines {
                let t = (now - t0).as_secs_f64();
                outln!("{}", stats::json_line(t, &facts, &prev, &snaps, secs));
            }
            if !a.quiet {
                for (p, f) in facts.iter().enumerate() {
                    say!("{}", stats::live_line(p, f, &prev[p], &snaps[p], secs));
                }
            }
            prev = snaps;
            last = now;
        }
    }
    watch.finish();
    if !stuck.is_empty() {
        // Not joined: they end with the process.
        return Err(rawq::Error::Config(format!(
            "forwarding thread(s) {stuck:?} did not end within {} s of the stop: the run ends \
             without a summary (their counts are not final; see the warnings above)",
            STOP_BOUND.as_secs()
        ))
        .into());
    }
    let elapsed = t0.elapsed().as_secs_f64();
    for (i, t) in threads.into_iter().enumerate() {
        t.join().map_err(|_| {
            rawq::Error::Config(format!(
                "forwarding thread {i} (queue {i}) panicked (its message is above): the run \
                 ends without a summary, its counts are lost"
            ))
        })?;
    }
    // The threads dropped their queues: the queues' last kernel counters are in the stats.
    let snaps: Vec<PortSnap> = ports
        .iter()
        .enumerate()
        .map(|(p, port)| PortSnap::take(port, p, &run.shared, &facts[p]))
        .collect();
    let held: u64 = snaps.iter().map(|s| s.fwd.held).sum();
    if held > 0 {
        say!("fwd: {held} frames still held by --delay at exit (not sent)");
    }
    let failure = run.failure.lock().ok().and_then(|mut f| f.take());
    let mode = Mode::to_possible_value(&a.mode).map_or("?".into(), |v| v.get_name().to_string());
    // With --json-lines the summary is the last line, as JSON (as pktgen's).
    if a.json || a.json_lines {
        let mut v = stats::summary_json(&facts, &snaps, elapsed, &mode, a.queues, failure.as_ref());
        linkwatch::extend(&mut v);
        outln!("{v}");
    } else {
        outln!("{}", stats::summary_text(&facts, &snaps, elapsed));
        if let Some(t) = linkwatch::text() {
            outln!("{t}");
        }
    }
    // The summary first (what was done), then the failure that ended the run.
    match failure {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Opens the ports: `--queues` queue pairs each, on one pool sized for all of them.
fn open_ports(a: &Args, set: &Settings) -> rawq::Result<Vec<Port>> {
    let rx = rawq::DvRxOptions {
        rq: a.rq,
        cqe_comp: a.cqe_comp,
    };
    rx.check()?;
    let nq = a.queues as u32;
    // Per queue pair: a full rx ring, a full tx ring, the queue's cache and a burst; plus the
    // --tx-first frames and a margin.
    let per_port = nq * (2 * a.ring + 1024) + a.tx_first;
    let mut ports: Vec<Port> = Vec::new();
    for d in &a.devs {
        let mut b = Port::builder(backend(a, d, &rx, ports.len())?)
            .dv_rx(rx)
            .rss(cli::rss_config(a.rss_key, a.rss_fields, a.rss_symmetric))
            .queues(a.queues)
            .rules(set.rules.clone())
            .rx_ring(a.ring)
            .tx_ring(a.ring);
        if let Some(m) = a.mtu {
            b = b.mtu(m);
        }
        // One pool for both ports, sized for both: a frame received on one can go out of the
        // other as it is.
        b = match ports.first() {
            Some(first) => b.pool(first.pool().clone()),
            None => b.pool_config(MempoolConfig {
                buffers: a.devs.len() as u32 * per_port,
                buf_size: buf_size(a),
                ..Default::default()
            }),
        };
        let port = b.open()?;
        say!(
            "fwd: {} ({}, {}, {} queue pair(s))",
            d,
            port.info().backend,
            port.info().mode,
            port.info().queues
        );
        ports.push(port);
    }
    Ok(ports)
}

/// Hands out the queues: worker i gets queue pair i of every port, and its share of the
/// --tx-first frames (frame j of a port goes out of queue j mod N).
fn workers(a: &Args, ports: &mut [Port], macs: &[MacRewrite]) -> rawq::Result<Vec<Worker>> {
    let nq = a.queues as usize;
    let mut per_port: Vec<std::vec::IntoIter<Queue>> = ports
        .iter_mut()
        .map(|p| p.take_queues().into_iter())
        .collect();
    let mut out = Vec::with_capacity(nq);
    for index in 0..nq {
        let qs: Vec<Queue> = per_port.iter_mut().filter_map(|it| it.next()).collect();
        if qs.len() != ports.len() {
            return Err(rawq::Error::Config(format!(
                "a port opened fewer than --queues {nq} queue pairs"
            )));
        }
        let mut tx_first = Vec::with_capacity(ports.len());
        for (p, m) in macs.iter().enumerate() {
            let mut frames = Vec::new();
            for j in (index as u32..a.tx_first).step_by(nq) {
                frames.push(modes::tx_first_frame(j, macs[p].src, m.dst)?);
            }
            tx_first.push(frames);
        }
        out.push(Worker {
            index,
            qs,
            macs: macs.to_vec(),
            tx_first,
        });
    }
    Ok(out)
}

/// What every forwarding loop is told.
struct Loop {
    mode: Mode,
    burst: usize,
    delay: Option<Duration>,
    deadline: Option<Instant>,
    core: Option<usize>,
    rx_mode: rxmode::RxMode,
}

/// Sends this thread's --tx-first frames (retrying while a ring is full), then forwards until
/// the run stops: for each port, rx burst → mode → tx burst on the other port (the same port
/// when there is one).
fn forward(mut w: Worker, cfg: &Loop, run: &Run) {
    if let Some(c) = cfg.core {
        if let Err(e) = rawq_gen::pin_to_core(c) {
            run.fail(rawq::Error::Config(format!("--cores {c}: {e}")));
            return;
        }
    }
    let fails = fault::injected("RAWQ_FWD_FAULT", w.index);
    if fails == Some(QueueFault::Panic) {
        run.stop.store(true, Relaxed);
        panic!(
            "RAWQ_FWD_FAULT=queue-thread-panic:{0}: forwarding thread {0} fails",
            w.index
        );
    }
    if fails == Some(QueueFault::Stall) {
        fault::stall();
    }
    let fail_at = (fails == Some(QueueFault::Error)).then(|| Instant::now() + QUEUE_FAULT_AFTER);
    let np = w.qs.len();
    let cells = &run.shared.cells[w.index];
    let mut burst: Vec<Packet> = Vec::with_capacity(cfg.burst.max(64));
    let first = std::mem::take(&mut w.tx_first);
    for ((q, frames), c) in w.qs.iter_mut().zip(&first).zip(cells.iter()) {
        send_first(q, frames, &mut burst, c, run);
    }
    let mut lines: Vec<DelayLine> = cfg
        .delay
        .map(|d| (0..np).map(|_| DelayLine::new(d)).collect())
        .unwrap_or_default();
    let mut idle = 0u32;
    let mut round = 0u32;
    // Rounds in a row that received nothing (--rx-mode).
    let mut empty = 0u32;
    loop {
        round = round.wrapping_add(1);
        if round.is_multiple_of(64) {
            if run.stop.load(Relaxed) || cfg.deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            if fail_at.is_some_and(|t| Instant::now() >= t) {
                run.fail(rawq::Error::Config(format!(
                    "forwarding thread {0} (queue {0}) failed: RAWQ_FWD_FAULT=\
                     queue-thread-error:{0} (an injected test fault); the summary counts what \
                     every thread did until then",
                    w.index
                )));
                break;
            }
            check_errors(&mut w.qs, run);
        }
        // With --delay, nap 50 µs while nothing arrives and the next held frame is due more
        // than 200 µs ahead: a forwarder that never sleeps is preempted on a shared machine for
        // whole time slices, and held frames would leave milliseconds late.
        idle = idle.saturating_add(1);
        if !lines.is_empty() && idle > 100 {
            let next_due = lines
                .iter()
                .filter_map(|l| l.held.front().map(|h| h.0))
                .min();
            if next_due.is_none_or(|t| t > Instant::now() + Duration::from_micros(200)) {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let mut round_got = 0;
        for i in 0..np {
            let out = (i + 1) % np;
            let got = w.qs[i].rx_burst(&mut burst, cfg.burst);
            round_got += got;
            if let Some(line) = lines.get_mut(i) {
                line.pass(Instant::now(), &mut burst, cfg.burst);
            }
            if got == 0 && burst.is_empty() {
                w.qs[out].reclaim();
                continue;
            }
            idle = 0;
            if cfg.mode == Mode::Rxonly {
                Cells::add(&cells[i].rxonly, burst.len() as u64);
                burst.clear();
                continue;
            }
            // --on-link-down wait: the out port's link is down: not sent, counted.
            if linkwatch::paused(out) {
                linkwatch::not_sent(burst.len() as u64);
                burst.clear();
                continue;
            }
            modes::apply(cfg.mode, &w.macs[out], &mut burst);
            let n = w.qs[out].tx_burst(&mut burst);
            Cells::add(&cells[out].tx_taken, n as u64);
            Cells::add(&cells[out].tx_ring_full, burst.len() as u64);
            burst.clear(); // frees what the ring did not take
        }
        empty = if round_got > 0 {
            0
        } else {
            empty.saturating_add(1)
        };
        if cfg.rx_mode.sleeps_after(empty) {
            if !rx_sleep(&mut w.qs, &lines, cfg, run) {
                break;
            }
            empty = 0;
        }
    }
    for q in &mut w.qs {
        q.reclaim();
    }
    check_errors(&mut w.qs, run);
    for (i, l) in lines.iter().enumerate() {
        Cells::add(&cells[i].held, l.held.len() as u64);
    }
}

/// --rx-mode interrupt / adaptive: sleeps until a queue of this thread has work, at most
/// until the next --delay frame is due, the deadline or `rxmode::MAX_SLEEP`. False when the
/// run is over (stopped, deadline passed, or the wait failed: said through `run`).
fn rx_sleep(qs: &mut [Queue], lines: &[DelayLine], cfg: &Loop, run: &Run) -> bool {
    let now = Instant::now();
    let mut until = now + rxmode::MAX_SLEEP;
    if let Some(d) = cfg.deadline {
        until = until.min(d);
    }
    if let Some(due) = lines
        .iter()
        .filter_map(|l| l.held.front().map(|h| h.0))
        .min()
    {
        until = until.min(due);
    }
    if until > now {
        if let Err(e) = rawq::queue::rx_wait_any(qs, Some(until - now)) {
            run.fail(e);
            return false;
        }
    }
    !(run.stop.load(Relaxed) || cfg.deadline.is_some_and(|d| Instant::now() >= d))
}

/// Sends `frames` out of `q`, retrying while its ring is full, until sent or the run stops.
fn send_first(q: &mut Queue, frames: &[Vec<u8>], burst: &mut Vec<Packet>, c: &Cells, run: &Run) {
    let mut next = 0;
    while next < frames.len() && !run.stop.load(Relaxed) {
        if burst.is_empty() {
            let n = (frames.len() - next).min(burst.capacity().max(1));
            if let Err(e) = q.alloc_burst(burst, n) {
                run.fail(e);
                return;
            }
            for (p, f) in burst.iter_mut().zip(&frames[next..next + n]) {
                if let Err(e) = p.copy_from_slice(f) {
                    run.fail(e);
                    burst.clear();
                    return;
                }
            }
            next += n;
        }
        let n = q.tx_burst(burst) as u64;
        Cells::add(&c.tx_taken, n);
        Cells::add(&c.tx_first, n);
        if !burst.is_empty() {
            q.reclaim();
            if let Some(e) = q.take_error() {
                run.fail(e);
            }
        }
    }
    burst.clear();
}

/// Takes each queue's last data-path error: a link failure ends the run, anything else (a
/// recovered queue error) is said and the run goes on.
fn check_errors(qs: &mut [Queue], run: &Run) {
    for q in qs {
        match q.take_error() {
            None => {}
            // --on-link-down wait: the link's events decide (see linkwatch).
            Some(rawq::Error::Link { .. }) if linkwatch::waits() => {}
            Some(e @ rawq::Error::Link { .. }) => run.fail(e),
            Some(e) => say!("fwd: queue {}: {e}", q.index()),
        }
    }
}

/// Why interface `dev` cannot forward any more, if it cannot: gone, or administratively down.
fn link_failure(dev: &str) -> Option<rawq::Error> {
    match rawq_gen::netdev_state(dev) {
        None => Some(rawq::Error::Link {
            ifname: dev.to_string(),
            detail: "the interface is gone: it was deleted or moved to another namespace while \
                     fwd ran"
                .into(),
        }),
        Some(s) if !s.up => Some(rawq::Error::Link {
            ifname: dev.to_string(),
            detail: format!(
                "the interface is down: nothing can be sent or received on it; bring it up \
                 with `ip link set dev {dev} up`"
            ),
        }),
        Some(_) => None,
    }
}

/// The MAC of port `p`: the interface's (xdp), the RDMA device's netdev's (verbs, dv), or a
/// locally administered 02:00:00:00:01:PORT for a port without one (the model).
fn port_mac(a: &Args, p: usize) -> rawq::flow::Mac {
    let dev = &a.devs[p];
    let netdev = match a.backend.as_str() {
        "xdp" => Some(dev.clone()),
        "verbs" | "dv" => std::fs::read_dir(format!("/sys/class/infiniband/{dev}/device/net"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned()),
        _ => None,
    };
    netdev
        .and_then(|n| rawq_gen::netdev_mac(&n))
        .unwrap_or([0x02, 0, 0, 0, 0x01, p as u8])
}

/// The backend of `--backend` on `dev` (`--rq` / `--cqe-comp` reach the DV backend and the
/// model alike through the port's configuration, `PortBuilder::dv_rx`).
fn backend(a: &Args, dev: &str, rx: &rawq::DvRxOptions, _index: usize) -> rawq::Result<Backend> {
    let b = Backend::named(&a.backend, dev, a.port)?;
    #[cfg(feature = "mlx5")]
    if let Backend::Model(mut o) = b {
        // With --cores, the model's device thread goes to a CPU no forwarding thread is
        // pinned to (when there is one), so that what is measured is the forwarder.
        if let Some(cores) = &a.cores {
            let used = &cores[..a.queues as usize];
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            o.model_cpu = o.model_cpu.or_else(|| (0..n).find(|c| !used.contains(c)));
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

/// Buffers big enough for the largest frame the interfaces' MTUs let arrive (an Ethernet header
/// with a VLAN tag on top of the MTU, and 256 bytes of receive headroom); AF_XDP buffers are at
/// most 4096 bytes.
fn buf_size(a: &Args) -> u32 {
    // With --mtu the ports receive a large frame as a chain: 4 KiB buffers (a 9216-byte frame
    // in three, within what a verbs send takes, tx::MAX_SGE = 4; and one page for AF_XDP).
    if a.mtu.is_some() {
        return 4096;
    }
    let mtu = a
        .devs
        .iter()
        .filter_map(|d| rawq_gen::netdev_state(d).and_then(|s| s.mtu))
        .max()
        .unwrap_or(1500) as usize;
    let limit = if a.backend == "xdp" { 4096 } else { 65536 };
    (mtu + 18 + 256).next_power_of_two().clamp(2048, limit) as u32
}
