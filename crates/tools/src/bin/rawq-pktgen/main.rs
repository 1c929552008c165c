//! pktgen: an rdma-pktgen-style traffic generator and counter on rawq.
//!
//! ```text
//! pktgen -b xdp -d veth0 --dst-mac 02:..:02 --src-ip 10.0.0.1 --dst-ip 10.0.0.2 -s 60 -r 1Mpps -t 5
//! pktgen -b xdp -d veth1 --rx --rule 'udp dst-port 9000 -> queue 0' -t 6 --json
//! ```
//! One thread per queue, pinned to a core; live stats once a second on stderr; a final summary
//! (or `--json`) on Ctrl-C or SIGTERM, at `--count` or after `--duration`.
//!
//! Rates are over the active window: from the first packet sent (received) to the last one, not
//! over the start-up, polling and linger around them; every rate of the summary, text or JSON,
//! is over that one window (see `window.rs`).

// The options' doc comments are clap's --help text, where brackets are literal (`ID[,PCP]`,
// `[[stream]]`), not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

#[macro_use]
extern crate rawq_tools;

mod cli;
use rawq_tools::fault::{self, QueueFault, QUEUE_FAULT_AFTER};
use rawq_tools::linkwatch;
mod live;
mod loops;
mod measure;
mod monitor;
mod neigh;
mod opts;
mod plot;
mod rfc2544;
mod streams;
mod summary;
mod window;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches};
use rawq::{MempoolConfig, Port, Queue};
use rawq_gen::{FrameSource, Pattern, SeqTracker};

use cli::Args;
use loops::{rx_loop, tx_loop};
use summary::report;

/// What a queue thread hands back.
#[derive(Default)]
struct Outcome {
    seq: SeqTracker,
    /// Frames sent with a stamp (tx).
    stamped_sent: u64,
    /// Frames the device took (`tx_burst`'s returns), stamped or not (tx).
    sent: u64,
    /// First and last packet of the active window.
    first: Option<Instant>,
    last: Option<Instant>,
    /// A failure that ended the run (the link went down or away).
    failure: Option<rawq::Error>,
    /// `tx_burst` calls, and those that left packets over (the ring was full).
    tx_bursts: u64,
    tx_ring_full_bursts: u64,
    /// Time spent with a full ring (ns) and the stretches of it (see `Summary`).
    tx_ring_full_ns: u64,
    tx_ring_full_stretches: u64,
    tx_pool_empty: u64,
    /// Paced: frames dropped from the schedule for being due before the pacer's catch-up
    /// window (the sender was kept from sending them in time), and the largest lateness (ns).
    tx_late_skipped: u64,
    tx_max_lag_ns: u64,
}

impl Outcome {
    fn active(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// Takes the queue's last data-path error: a link failure ends the run (returns true),
    /// anything else (a recovered queue error) is reported and the run goes on.
    fn check(&mut self, q: &mut Queue, end: &Until) -> bool {
        match q.take_error() {
            None => false,
            // --on-link-down wait: the link's events decide (see linkwatch).
            Some(rawq::Error::Link { .. }) if linkwatch::waits() => false,
            Some(e @ rawq::Error::Link { .. }) => {
                end.stop.store(true, Relaxed);
                self.failure = Some(e);
                true
            }
            Some(e) => {
                say!("pktgen: queue {}: {e}", q.index());
                false
            }
        }
    }
}

fn main() -> ExitCode {
    let matches = match rawq_tools::generate::matches_of(Args::command()) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let mut a = Args::from_arg_matches(&matches).unwrap_or_else(|e| rawq_tools::out::clap_exit(e));
    // The destination MAC resolved when left out; ARP/ND answered for --src-ip while running.
    let dst_ip_given =
        matches.value_source("dst_ip") == Some(clap::parser::ValueSource::CommandLine);
    // The limits first, before anything is resolved, allocated or sent.
    if let Err(e) = limits(&a) {
        say!("pktgen: {e}");
        return ExitCode::FAILURE;
    }
    let _responder = match neigh::prepare(&mut a, dst_ip_given) {
        Ok(r) => r,
        Err(e) => {
            say!("pktgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = match a.bench.rfc2544 {
        Some(test) => rfc2544::run(&a, test),
        None => run(&a).map(|_| ()),
    };
    match r {
        Ok(()) => rawq_tools::out::status(),
        Err(e) => {
            say!("pktgen: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Set by SIGINT, SIGTERM and SIGHUP (see [`signalled`]).
static SIGNALLED: AtomicBool = AtomicBool::new(false);
/// Signals seen: the first ends the run, the second the process.
static SIGNALS: AtomicU32 = AtomicU32::new(0);

/// Whether a signal has ended the run: a receiver then counts what its queue still holds
/// (`loops::rx_loop`).
fn interrupted() -> bool {
    SIGNALLED.load(Relaxed)
}

/// How long after the first signal another one is the same request delivered twice, not a
/// second one: `timeout` signals its command and then the command's process group, a terminal's
/// Ctrl-C reaches every process of its group (a launcher may pass it on too).
const SAME_REQUEST: Duration = Duration::from_millis(500);

/// Set by SIGINT, SIGTERM and SIGHUP (ctrlc's "termination" feature): every run ends with a
/// summary, and an RFC 2544 search with what it measured; a second signal, [`SAME_REQUEST`] or
/// more after the first, ends pktgen at once (status 130, as a shell reports Ctrl-C; no
/// summary), for a run that is slow to stop. The handler is installed once, by the first run
/// that needs it (the live engine installs its own).
fn signalled() -> rawq::Result<&'static AtomicBool> {
    static INSTALLED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    static FIRST: OnceLock<Instant> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            ctrlc::set_handler(|| {
                if SIGNALS.fetch_add(1, Relaxed) > 0 {
                    if FIRST.get().is_some_and(|t| t.elapsed() < SAME_REQUEST) {
                        return;
                    }
                    std::process::exit(130);
                }
                FIRST.get_or_init(Instant::now);
                SIGNALLED.store(true, Relaxed);
            })
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| {
            rawq::Error::Config(format!("cannot install the SIGINT/SIGTERM handler: {e}"))
        })?;
    Ok(&SIGNALLED)
}

/// One run: sends (or receives) as the options say, prints the summary (unless `a.silent`) and
/// returns it as JSON.
fn run(a: &Args) -> rawq::Result<serde_json::Value> {
    // Streams (--stream, --profile): one queue each, and the options adjusted for them.
    let (streams, with_streams) = streams::resolve(a)?;
    let a = with_streams.as_ref().unwrap_or(a);
    // Rules are checked in every mode, so that a typo never passes unnoticed.
    let rules = a.rules()?;
    if a.engine == opts::Engine::Live {
        if a.burst_gap.is_some() || a.pattern != Pattern::Constant {
            return Err(rawq::Error::Config(
                "--pattern / --burst-gap: the live engine paces in the kernel, at a constant \
                 rate only; use --engine afxdp"
                    .into(),
            ));
        }
        return live::run(a).map(|()| serde_json::Value::Null);
    }
    if a.burst > a.ring as usize {
        return Err(rawq::Error::Config(format!(
            "--burst {} is above --ring {}: a burst must fit the ring",
            a.burst, a.ring
        )));
    }
    let src = match streams::largest(&streams) {
        Some(s) => s,
        None => Arc::new(a.source()?),
    };
    // The interface under an xdp port: its MTU against the frames, and watched while running.
    let link = (a.backend == cli::BackendKind::Xdp)
        .then(|| rawq_gen::netdev_state(&a.dev))
        .flatten();
    let buf_size = buffer_size(a, &src, link.and_then(|l| l.mtu))?;
    let ncores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let core_of = |i: usize| a.cores.as_ref().map_or(i % ncores, |c| c[i % c.len()]);
    // Each queue has a thread of its own (testpmd and pktgen-dpdk instead poll several queues
    // from one lcore): more queues than cores means threads taking turns on a core.
    let mut used: Vec<usize> = (0..a.queues as usize).map(core_of).collect();
    used.sort_unstable();
    used.dedup();
    if a.queues as usize > used.len() {
        say!(
            "pktgen: warning: {} queue threads on {} core{}: threads that share a core take \
             turns on it (each runs for a time slice, then the others), so a queue's rate is a \
             share of its core's and its latency includes the wait for its turn. Use at most one \
             queue per core (-q {}, or more cores in --cores)",
            a.queues,
            used.len(),
            if used.len() == 1 { "" } else { "s" },
            used.len()
        );
    }
    #[allow(unused_mut)]
    let mut backend = a.backend()?;
    // With --cores, the software device's thread goes to a CPU none of the queues is pinned
    // to, so that it never shares the sender's core (what is measured is the driver). Without,
    // it is left to the scheduler: on a shared machine an unpinned thread can move away from
    // other work, which keeps paced runs on schedule.
    #[cfg(feature = "mlx5")]
    if let (rawq::Backend::Model(o), Some(_)) = (&mut backend, &a.cores) {
        let used: Vec<usize> = (0..a.queues as usize).map(core_of).collect();
        o.model_cpu = o
            .model_cpu
            .or_else(|| (0..ncores).find(|c| !used.contains(c)));
        match o.model_cpu {
            Some(c) => say!("pktgen: the device model runs on CPU {c}"),
            None => say!(
                "pktgen: warning: the queues use all {ncores} CPUs: the device model's thread \
                 shares their cores (unpinned), so it competes with the sender; use fewer queues \
                 or --cores to leave one CPU free"
            ),
        }
    }
    let m = measure::Measure::new(&a.measure, &src, a.rx, a.txrx)?;
    m.set_streams(streams.len());
    let mut b = Port::builder(backend)
        .dv_rx(a.dv_rx()?)
        .rss(cli::rss_config(a.rss_key, a.rss_fields, a.rss_symmetric))
        .queues(a.queues)
        .rx_ring(a.ring)
        .tx_ring(a.ring)
        .pool_config(MempoolConfig {
            buf_size,
            buffers: pool_buffers(a)?,
            ..Default::default()
        });
    if a.rx || a.txrx {
        b = b.rules(rules);
    }
    if let Some(m) = a.mtu {
        b = b.mtu(m);
    }
    if a.backend == cli::BackendKind::Xdp {
        b = b.rx_timestamps(a.measure.xdp_rx_timestamps(&a.dev, a.rx, a.txrx));
    }
    // Signals are taken from before the port opens: one that comes while it opens stops the
    // run at its start.
    let signal = signalled()?;
    let mut port = b.open()?;
    m.attach(&port)?;
    let info = port.info().clone();
    largest_frame(a, &port, &src)?;
    if let Some(mtu) = link.and_then(|l| l.mtu) {
        let largest = mtu as usize + 14;
        if !a.rx && src.max_len() > largest {
            say!(
                "pktgen: warning: frames of up to {} bytes exceed {}'s MTU {mtu} (frames up to \
                 {largest} bytes): the kernel or the peer drops the larger ones. Raise the MTU \
                 (`ip link set dev {} mtu {}`) or send at most -s {largest}",
                src.max_len(),
                a.dev,
                a.dev,
                src.max_len() - 14
            );
        }
    }
    if !a.silent {
        say!(
            "pktgen: {} on {} ({}), {} queue(s), pool on {}",
            info.backend,
            info.device,
            info.mode,
            info.queues,
            port.pool().memory_kind()
        );
    }
    if link.is_some_and(|l| !l.up) {
        say!(
            "pktgen: warning: {} is down: nothing can be sent or received until `ip link set dev \
             {} up`",
            a.dev,
            a.dev
        );
    }

    let mut watch = linkwatch::LinkWatch::new(a.on_link_down, &[(a.dev.as_str(), &port)], "pktgen");

    // The run's own stop flag (the deadline sets it too), raised by a signal.
    let stop = Arc::new(AtomicBool::new(signal.load(Relaxed)));

    let nq = info.queues as u64;
    let pps = a.rate.pps(src.mean_len()).map(|p| p / nq as f64);
    // -t counts from when every queue thread is ready (spawned and pinned), not from before
    // they were spawned: on a loaded machine a thread can start later than a short run's end
    // (an RFC 2544 trial of 100 ms once sent nothing). parse_duration bounds -t, so the
    // deadlines cannot overflow.
    let duration = a.duration.map(Duration::from_secs_f64);
    let queues = port.take_queues();
    let nthreads = queues.len();
    let ready = Arc::new(StartLine::default());
    let sending = Arc::new(AtomicUsize::new(queues.len()));
    let unsettled = Arc::new(AtomicUsize::new(queues.len()));
    let workers: Vec<_> = queues
        .into_iter()
        .map(|q| {
            let i = q.index() as usize;
            let core = core_of(i);
            let (stop, src, burst, rx, txrx) = (stop.clone(), src.clone(), a.burst, a.rx, a.txrx);
            let drain = a.drain;
            let rx_mode = a.rx_mode;
            let pattern = a.pattern(q.index());
            // --count split exactly: the first `count % queues` queues send one more.
            let limit = (a.count > 0).then(|| a.count / nq + u64::from((i as u64) < a.count % nq));
            // With streams, queue i sends stream i.
            let (src, pps, limit) = match streams.get(i) {
                Some(s) => (s.src.clone(), s.pps, (s.count > 0).then_some(s.count)),
                None => (src, pps, limit),
            };
            let m = m.clone();
            let ready = ready.clone();
            let sending = sending.clone();
            let unsettled = unsettled.clone();
            std::thread::spawn(move || {
                if let Err(e) = rawq_gen::pin_to_core(core) {
                    say!("pktgen: queue {i}: not pinned: {e}");
                }
                if i == 0 {
                    injected_fault();
                }
                // -t from when the line opened, the same instant for every queue (not from when
                // this thread got back on a core: on a loaded machine that was tens of ms later
                // for one queue than another, and the run sent for longer than -t).
                let opened = ready.arrive();
                let mut deadline = duration.map(|d| opened + d);
                let fails = fault::injected("RAWQ_PKTGEN_FAULT", i);
                if let Some(QueueFault::Panic) = fails {
                    stop.store(true, Relaxed);
                    // It leaves the run: no queue waits for its sends.
                    sending.fetch_sub(1, Relaxed);
                    unsettled.fetch_sub(1, Relaxed);
                    panic!("RAWQ_PKTGEN_FAULT=queue-thread-panic:{i}: queue {i}'s thread fails");
                }
                if let Some(QueueFault::Stall) = fails {
                    fault::stall();
                }
                if let Some(QueueFault::Error) = fails {
                    // It runs a little first, so that it fails with frames sent.
                    let at = Instant::now() + QUEUE_FAULT_AFTER;
                    deadline = Some(deadline.map_or(at, |d| d.min(at)));
                }
                let end = Until {
                    stop: &stop,
                    deadline,
                    sending: &sending,
                    unsettled: &unsettled,
                };
                let mut qm = m.queue(q.index());
                let out = if rx {
                    rx_loop(q, &end, burst, rx_mode, &mut qm)
                } else {
                    tx_loop(
                        q, &src, &end, burst, limit, pps, pattern, txrx, drain, &mut qm,
                    )
                };
                m.deposit(qm);
                let mut out = out;
                if let Some(QueueFault::Error) = fails {
                    stop.store(true, Relaxed);
                    out.failure = out.failure.or(Some(rawq::Error::Config(format!(
                        "queue {i}'s thread failed: RAWQ_PKTGEN_FAULT=queue-thread-error:{i} \
                         (an injected test fault); the summary counts what every queue did \
                         until then"
                    ))));
                }
                out
            })
        })
        .collect();
    // Every thread at the start line, or none will come: a thread that ended before it (it
    // died) or a stop (a signal, stdout closed) opens the line with the run stopped, so that
    // no thread waits there for ever (issue 32).
    let all_ready = ready.wait_all(nthreads, || {
        signal.load(Relaxed)
            || rawq_tools::out::stdout_closed()
            || workers.iter().any(|w| w.is_finished())
    });
    if !all_ready {
        stop.store(true, Relaxed);
    }
    let t0 = Instant::now();
    let deadline = duration.map(|d| t0 + d);
    // Once stopped, the threads have this long to end (their settle and drain are bounded by
    // less); past it the run ends without those that did not.
    let stop_bound = a.drain + STOP_BOUND;
    let mut stopped_at: Option<Instant> = None;
    let mut stuck = Vec::new();

    // Live stats and the stop conditions.
    let mut gone = None;
    let mut mon =
        monitor::Monitor::new(a.measure.json_lines, a.queues as usize, a.quiet, a.verbose);
    while !workers.iter().all(|w| w.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        if signal.load(Relaxed) && !stop.load(Relaxed) && a.rx && !a.silent {
            stop.store(true, Relaxed);
            say!(
                "pktgen: stopping: counting what the receive queue(s) still hold (up to {} s; \
                 a second signal ends at once)",
                loops::DRAIN_LIMIT.as_secs()
            );
        }
        if signal.load(Relaxed)
            || deadline.is_some_and(|d| now >= d)
            || rawq_tools::out::stdout_closed()
        {
            stop.store(true, Relaxed);
        }
        if stop.load(Relaxed) {
            let since = *stopped_at.get_or_insert(now);
            if now - since >= stop_bound {
                stuck = (0..workers.len())
                    .filter(|&i| !workers[i].is_finished())
                    .collect();
                break;
            }
        }
        // A receiver sees no error when its interface vanishes: look for it.
        if link.is_some() && gone.is_none() && rawq_gen::netdev_state(&a.dev).is_none() {
            stop.store(true, Relaxed);
            gone = Some(gone_error(&a.dev));
        }
        if gone.is_none() {
            if let Some(e) = watch.poll("pktgen") {
                stop.store(true, Relaxed);
                gone = Some(e);
            }
        }
        mon.poll(|| port.stats_readers().iter().map(|r| r.snapshot()).collect());
    }
    watch.finish();
    if !stuck.is_empty() {
        // Not joined: they end with the process.
        return Err(rawq::Error::Config(format!(
            "queue thread(s) {stuck:?} did not end within {} s of the stop: the run ends \
             without their counts (a queue whose device no longer completes; see the warnings \
             above)",
            stop_bound.as_secs()
        )));
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let mut all = Outcome::default();
    let mut per_queue = Vec::new();
    for (i, w) in workers.into_iter().enumerate() {
        let o = w.join().map_err(|_| {
            rawq::Error::Config(format!(
                "queue {i}'s thread failed (panicked; its message is above): the run was \
                 stopped and its counts are lost"
            ))
        })?;
        per_queue.push(streams::Sent {
            sent: o.stamped_sent,
            first: o.first,
            last: o.last,
        });
        all.seq.merge(&o.seq);
        all.stamped_sent += o.stamped_sent;
        all.sent += o.sent;
        all.first = all.first.min(o.first).or(all.first).or(o.first);
        all.last = all.last.max(o.last);
        all.failure = all.failure.or(o.failure);
        all.tx_bursts += o.tx_bursts;
        all.tx_ring_full_bursts += o.tx_ring_full_bursts;
        all.tx_ring_full_ns += o.tx_ring_full_ns;
        all.tx_ring_full_stretches += o.tx_ring_full_stretches;
        all.tx_pool_empty += o.tx_pool_empty;
        all.tx_late_skipped += o.tx_late_skipped;
        all.tx_max_lag_ns = all.tx_max_lag_ns.max(o.tx_max_lag_ns);
    }
    if link.is_some() && gone.is_none() && rawq_gen::netdev_state(&a.dev).is_none() {
        gone = Some(gone_error(&a.dev));
    }
    let link_drops = match (
        link.and_then(|l| l.tx_dropped),
        rawq_gen::netdev_state(&a.dev),
    ) {
        (Some(before), Some(now)) => now.tx_dropped.map(|d| d.saturating_sub(before)),
        _ => None,
    };
    let window = window::Window {
        first: all.first,
        last: all.last,
    };
    let target = if streams.is_empty() {
        target_pps(a, &src, nq)
    } else {
        streams.iter().map(|s| s.pps).sum()
    };
    let mut extras = measure::Extras::collect(&m, &mon, &port.stats(), window, target);
    if !streams.is_empty() {
        let (j, text) = streams::report(a, &streams, &per_queue, &all.seq, &m.stream_latency());
        extras.add("streams", j, &text);
    }
    let v = report(a, &port, &info, elapsed, &all, link_drops, &extras);
    if let (Some(path), false) = (&a.plot, a.silent) {
        if plot::run(path, &v)? == 0 {
            say!(
                "pktgen: --plot {}: nothing to draw (no latency samples: --latency --txrx, and \
                 no full second of sending)",
                path.display()
            );
        }
    }
    // The summary first (what was done), then the failure that ended the run.
    match gone.or(all.failure) {
        Some(e) => Err(e),
        None => Ok(v),
    }
}

/// Queues -b model has at most (its `ModelOptions::queues`).
const MODEL_MAX_QUEUES: u16 = 256;

/// The limits checked before anything is opened, allocated or sent, in the options' terms:
/// `--cores` lists CPUs that exist (all those that do not are named), `-q` is within the
/// backend's queues.
fn limits(a: &Args) -> rawq::Result<()> {
    if let Some(c) = &a.cores {
        rawq_tools::cpus::check("--cores", c).map_err(rawq::Error::Config)?;
    }
    if a.backend == cli::BackendKind::Model && a.queues > MODEL_MAX_QUEUES {
        return Err(rawq::Error::Config(format!(
            "-q {}: -b model has at most {MODEL_MAX_QUEUES} queues: give -q {MODEL_MAX_QUEUES} \
             or fewer",
            a.queues
        )));
    }
    Ok(())
}

/// Refuses frames the port cannot send, before any is posted: on -b model above the device's
/// largest frame, on -b dv / verbs above the port's MTU + 18 bytes (Ethernet header and one
/// VLAN tag: what an mlx5 port takes), which the device would complete in error (local length
/// error). -b xdp is warned about instead (`run`: the kernel or the peer drops them). TSO
/// super-frames are cut by the device: their segments are checked by the library.
fn largest_frame(a: &Args, port: &Port, src: &FrameSource) -> rawq::Result<()> {
    if a.measure.tso.is_some() || a.rx {
        return Ok(());
    }
    let Some(mtu) = port.link().ok().and_then(|l| l.mtu) else {
        return Ok(());
    };
    let with_mtu = a.mtu.map(|m| m as usize + L2_OVERHEAD);
    let (max, what) = match a.backend {
        // The model's port reports its largest frame less the 14-byte Ethernet header; --mtu
        // makes the device's largest frame MTU + 18.
        cli::BackendKind::Model => (
            with_mtu.unwrap_or(mtu as usize + 14),
            "the device model's largest frame".to_string(),
        ),
        cli::BackendKind::Dv | cli::BackendKind::Verbs => (
            (mtu as usize + L2_OVERHEAD).min(with_mtu.unwrap_or(usize::MAX)),
            format!("the port's largest frame (MTU {mtu} + 18)"),
        ),
        _ => return Ok(()),
    };
    if src.max_len() > max {
        return Err(rawq::Error::Config(format!(
            "-s / --pcap: frames of up to {} bytes are above {what}, {max} bytes: the device \
             would refuse them; send frames of at most -s {max}",
            src.max_len(),
        )));
    }
    Ok(())
}

/// The mean rate the options ask for over all queues (None: unlimited): --rate, or with
/// --burst-gap what its bursts and gaps average to.
fn target_pps(a: &Args, src: &FrameSource, nq: u64) -> Option<f64> {
    let pps = a.rate.pps(src.mean_len())?;
    a.pattern(0)
        .mean_pps(Some(pps / nq as f64))
        .map(|p| p * nq as f64)
}

/// Buffers a DV send queue (the device model's too) can hold per WQEBB: an eMPW session packs
/// four 16-byte data segments into each 64-byte WQEBB after its first (`dv::tx`'s buffer ring
/// is 4 × the WQEBBs).
const DV_PKTS_PER_WQEBB: u64 = 4;

/// The pool's size: every buffer the rings of all queues can hold at once (send ring in flight,
/// eMPW packing included; receive ring posted), each queue's cache full (twice its size) and a
/// burst left over from a full ring, plus a margin; so that a full ring never starves the
/// sender.
fn pool_buffers(a: &Args) -> rawq::Result<u32> {
    let ring = a.ring as u64;
    let tx = match a.backend {
        cli::BackendKind::Dv | cli::BackendKind::Model => DV_PKTS_PER_WQEBB * ring,
        _ => ring,
    };
    let cache = 2 * MempoolConfig::default().cache_size as u64;
    let per_queue = tx + ring + cache + a.burst as u64;
    let n = a.queues as u64 * per_queue + 256;
    u32::try_from(n).map_err(|_| {
        rawq::Error::Config(format!(
            "{} queues of --ring {} need {n} buffers, more than a pool holds: use a smaller \
             --ring or fewer queues",
            a.queues, a.ring
        ))
    })
}

/// Pool headroom in front of transmitted frames (MempoolConfig's default).
const TX_HEADROOM: usize = 128;
/// Room the kernel keeps in front of received frames (XDP_PACKET_HEADROOM; the DV and verbs
/// paths need no more).
const RX_HEADROOM: usize = 256;
/// An Ethernet header with one VLAN tag: a frame that arrives is at most MTU + this.
const L2_OVERHEAD: usize = 18;

/// Buffer size for the pool: the largest frame to send plus its headroom, and on a receiving
/// port (--rx, --txrx) the largest frame the link's MTU lets arrive, so that no frame is
/// dropped for want of room. AF_XDP buffers are at most 4096 bytes, any buffer 64 KiB.
fn buffer_size(a: &Args, src: &FrameSource, mtu: Option<u32>) -> rawq::Result<u32> {
    let tx = src.max_len() + TX_HEADROOM;
    let arriving = mtu.map_or(0, |m| m as usize + L2_OVERHEAD);
    // With --mtu the port scatters a large frame over several buffers: size them for sending.
    let rx = if (a.rx || a.txrx) && a.mtu.is_none() {
        src.max_len().max(arriving) + RX_HEADROOM
    } else {
        0
    };
    let (limit, what) = if a.backend == cli::BackendKind::Xdp {
        (4096, "AF_XDP's largest buffers (4096 bytes)")
    } else {
        (65536, "the largest buffers (64 KiB)")
    };
    // With --mtu, a frame longer than the largest buffer is sent chained over several
    // (FrameSource::fill; AF_XDP multi-buffer needs Linux 6.6): the buffers stay at the limit.
    if tx > limit && a.mtu.is_some() {
        return Ok(limit as u32);
    }
    if tx > limit {
        return Err(rawq::Error::Config(format!(
            "frames of up to {} bytes (-s / --pcap) do not fit {what}: send frames of at most {} \
             bytes (-s, or drop the larger frames from the pcap){}",
            src.max_len(),
            limit - TX_HEADROOM,
            if limit == 4096 {
                ", or use -b verbs / -b dv, whose buffers go up to 64 KiB, or --mtu N \
                 (multi-buffer frames, Linux 6.6 or later)"
            } else {
                ""
            }
        )));
    }
    if rx > limit {
        say!(
            "pktgen: warning: {}'s MTU {} lets frames of up to {arriving} bytes arrive, more than \
             {what} hold with their headroom ({} bytes): larger frames are dropped. Lower the \
             MTU (`ip link set dev {} mtu {}`)",
            a.dev,
            mtu.unwrap_or(0),
            limit - RX_HEADROOM,
            a.dev,
            // AF_XDP: the driver's own limit for an XDP program is lower still (about 3500).
            if limit == 4096 {
                3000
            } else {
                limit - RX_HEADROOM - L2_OVERHEAD
            }
        );
    }
    Ok(tx.max(rx).min(limit).next_power_of_two().max(2048) as u32)
}

fn gone_error(dev: &str) -> rawq::Error {
    rawq::Error::Link {
        ifname: dev.to_string(),
        detail: "the interface is gone: it was deleted or moved to another namespace while pktgen \
                 ran"
        .into(),
    }
}

/// When a queue thread stops: the stop flag (signals, the main thread) or the deadline, which
/// each thread checks itself so that `-t` is kept to the burst.
struct Until<'a> {
    stop: &'a AtomicBool,
    deadline: Option<Instant>,
    /// Queue threads still in their send loop: with --txrx a queue keeps receiving until every
    /// queue has sent (RSS may bring it another queue's frames), then for --drain.
    sending: &'a AtomicUsize,
    /// Queue threads whose sends the device has not all completed yet: with --txrx a queue
    /// keeps receiving until every queue's have (RSS may bring it another queue's last
    /// frames, which would be lost, unattributed, in a queue that went away).
    unsettled: &'a AtomicUsize,
}

impl Until<'_> {
    fn reached(&self, now: Instant) -> bool {
        self.stop.load(Relaxed) || self.deadline.is_some_and(|d| now >= d)
    }
}

/// How long queue threads have to end once the run is stopped, beyond `--drain`: more than a
/// sender's settle (10 s past its linger) and a receiver's drain (`loops::DRAIN_LIMIT`) take.
const STOP_BOUND: Duration = Duration::from_secs(15);

/// The start line of the queue threads: each arrives (spawned and pinned) and waits; the main
/// thread opens the line when all have arrived, or earlier when one will not come. Unlike a
/// `Barrier`, a thread that dies before it cannot keep the others (and the main thread)
/// waiting for ever.
#[derive(Default)]
struct StartLine {
    /// (threads arrived, when it opened)
    state: Mutex<(usize, Option<Instant>)>,
    changed: Condvar,
}

impl StartLine {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, Option<Instant>)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A queue thread is ready: waits until the line opens; when it opened.
    fn arrive(&self) -> Instant {
        let mut g = self.lock();
        g.0 += 1;
        self.changed.notify_all();
        loop {
            if let Some(t) = g.1 {
                return t;
            }
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until `n` threads have arrived, or `give_up` (asked every 50 ms) says they will
    /// not; opens the line either way. True when all arrived.
    fn wait_all(&self, n: usize, mut give_up: impl FnMut() -> bool) -> bool {
        let mut g = self.lock();
        while g.0 < n {
            if give_up() {
                break;
            }
            g = self
                .changed
                .wait_timeout(g, Duration::from_millis(50))
                .map_or_else(|p| p.into_inner().0, |r| r.0);
        }
        g.1 = Some(Instant::now());
        self.changed.notify_all();
        g.0 >= n
    }
}

/// Faults a test can inject through `RAWQ_PKTGEN_FAULT` (the seeded campaigns of issue 32; not
/// an option): `queue-panic`, queue 0's thread panics before it starts; `queue-stall`, it never
/// starts nor ends; `queue-thread-panic:Q` / `queue-thread-error:Q`, queue Q's thread fails
/// once running ([`injected_queue_fault`]). Anything else is no fault.
fn injected_fault() {
    match std::env::var("RAWQ_PKTGEN_FAULT").as_deref() {
        Ok("queue-panic") => panic!("RAWQ_PKTGEN_FAULT=queue-panic: queue 0's thread fails"),
        Ok("queue-stall") => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
        _ => {}
    }
}
