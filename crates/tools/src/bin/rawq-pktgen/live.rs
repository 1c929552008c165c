//! `pktgen -b xdp --engine live`: the kernel's live-frames generator (`rawq::xdp::live`) instead
//! of an AF_XDP socket per queue.
//!
//! One pinned thread per queue (`--queues`, `--cores`), 64 frames per batch, up to 2^20 runs per
//! kernel call; `--count`, `--duration` and Ctrl-C stop it. `--rate` is coarse: frames leave in
//! bursts of a hundredth of a second's worth at full speed, then the thread sleeps. One fixed
//! `--size`; no `--pcap`. The sent count is what the interface took (see the engine's docs);
//! sequence stamps carry the sending CPU as their stream.

use crate::cli::Args;

/// Runs the live engine as the options say.
#[cfg(feature = "xdp")]
pub fn run(a: &Args) -> rawq::Result<()> {
    use std::time::{Duration, Instant};

    use rawq::xdp::live::{LiveConfig, LiveEngine};
    use rawq::Error;
    use rawq_gen::live_config;
    use rawq_gen::FrameSource;

    if a.backend != crate::cli::BackendKind::Xdp {
        return Err(Error::Config(
            "--engine live works with -b xdp (a Linux interface)".into(),
        ));
    }
    if a.rx || a.txrx {
        return Err(Error::Config(
            "--engine live only sends; use the AF_XDP engine for --rx/--txrx".into(),
        ));
    }
    let src = a.source()?;
    let mean_len = src.mean_len();
    let FrameSource::Template(st) = src else {
        return Err(Error::Config(
            "--engine live sends a template frame; --pcap needs the AF_XDP engine".into(),
        ));
    };
    let ncores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores = (0..a.queues as usize)
        .map(|i| a.cores.as_ref().map_or(i % ncores, |c| c[i % c.len()]))
        .collect();
    let cfg = LiveConfig {
        cores,
        count: a.count,
        duration: a.duration.map(Duration::from_secs_f64),
        pps: a.rate.pps(mean_len),
        ..live_config(&a.dev, st.spec())?
    };
    let engine = LiveEngine::new(cfg)?;
    say!(
        "pktgen: live frames on {} ({} bytes), {} thread(s)",
        a.dev,
        engine.frame().len(),
        a.queues
    );
    let stop = engine.stop_flag();
    ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::Relaxed))
        .map_err(|e| Error::Config(format!("cannot install the Ctrl-C handler: {e}")))?;

    let rep = std::thread::scope(|s| {
        let job = s.spawn(|| engine.run());
        let (mut t, mut n) = (Instant::now(), engine.redirected().unwrap_or(0));
        while !job.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            if !a.quiet && t.elapsed() >= Duration::from_secs(1) {
                let now = engine.redirected().unwrap_or(n);
                let secs = t.elapsed().as_secs_f64();
                say!(
                    "total: tx {:>10.0} pps (redirected by the program)  total {now}",
                    (now - n) as f64 / secs
                );
                (t, n) = (Instant::now(), now);
            }
        }
        job.join()
            .unwrap_or_else(|_| Err(Error::Config("the live engine panicked".into())))
    })?;

    // The kernel's run is the window (it times the whole batch, not each frame); rates as
    // everywhere in pktgen (window.rs): (n - 1) / window, none for a burst or one frame.
    let len = rep.frame_len as u64;
    let start = std::time::Instant::now();
    let w = crate::window::Window {
        first: Some(start),
        last: start.checked_add(rep.elapsed),
    };
    let secs = w.secs();
    let r = w.rate(rep.sent, rep.sent * len);
    if a.json {
        let j = serde_json::json!({
            "backend": "xdp",
            "device": a.dev,
            "mode": "live",
            "direction": "tx",
            "queues": a.queues,
            "duration_s": secs,
            "packets": rep.sent,
            "bytes": rep.sent * len,
            "pps": r.map(|r| r.0),
            "bps_l1": r.map(|r| r.1),
            "errors": 0,
            "drops": rep.dropped,
            "rx_packets": 0,
            "seq_stamped": 0,
            "seq_gaps": 0,
            "seq_out_of_order": 0,
        });
        outln!("{j}");
    } else {
        let rate = match r {
            Some((pps, bps)) => format!(
                "in {}: {:.3} Mpps, {:.3} Gbit/s (L1)",
                crate::window::fmt_secs(secs),
                pps / 1e6,
                bps / 1e9
            ),
            None => w.no_rate(rep.sent),
        };
        outln!(
            "pktgen tx (live): {} packets, {} bytes {rate}, {} redirected, {} refused by the \
             interface",
            rep.sent,
            rep.sent * len,
            rep.redirected,
            rep.dropped
        );
    }
    Ok(())
}

/// Without the AF_XDP backend compiled in there is no live engine either.
#[cfg(not(feature = "xdp"))]
pub fn run(_a: &Args) -> rawq::Result<()> {
    Err(rawq::Error::BackendUnavailable {
        backend: "xdp",
        feature: "xdp",
    })
}
