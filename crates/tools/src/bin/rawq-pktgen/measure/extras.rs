//! The final report's measurements: what the queues measured, collected into text and JSON.

use rawq::QueueStats;
use rawq_gen::{fmt_ns, FlowCount, FlowTracker, LatencyHistogram, PERCENTILES};
use serde_json::{json, Value};

use super::{
    Clock, Measure, DEVICE_CLOCK_SW_TS, HARDWARE_TS, KERNEL_TS, MIXED_KERNEL_TS, SOFTWARE_TS,
    XDP_HARDWARE_TS,
};
use crate::monitor::Monitor;
use crate::window::{fmt_pps, fmt_secs, Window};

/// Everything measured, for the final report.
pub struct Extras {
    json: Value,
    text: String,
    /// The stamped frames over all flows, for the run's ledger: (expected, received once).
    /// Expected: what the senders sent (--txrx) or, at a receiver, the highest sequence
    /// number received + 1 per stream; received once: duplicates not counted.
    pub flow_totals: Option<(u64, u64)>,
    /// The rate asked for and the one achieved over the active window (pps), when the sender
    /// fell more than 1 % short of it (the ledger says so beside every figure).
    pub rate_short: Option<(f64, f64)>,
    /// In an RFC 2544 trial (a trial mark): the frames another trial sent that arrived in
    /// this one, late (their stamps carry that trial's mark), counted nowhere else; None
    /// outside a trial.
    pub late: Option<u64>,
}

impl Extras {
    /// Collects the queues' results. `target_pps`: the --rate in packets per second (None for
    /// max); `stats` the port's totals.
    pub fn collect(
        m: &Measure,
        mon: &Monitor,
        stats: &QueueStats,
        window: Window,
        target_pps: Option<f64>,
    ) -> Extras {
        let qs = m
            .results
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        let mut text = String::new();
        let side = |packets, bytes, errors, drops| {
            let r = window.rate(packets, bytes);
            json!({"packets": packets, "bytes": bytes, "errors": errors, "drops": drops,
                   "pps": r.map(|r| r.0), "bps_l1": r.map(|r| r.1)})
        };
        let tx = side(
            stats.tx_packets,
            stats.tx_bytes,
            stats.tx_errors,
            stats.tx_drops,
        );
        let rx = side(
            stats.rx_packets,
            stats.rx_bytes,
            stats.rx_errors,
            stats.rx_drops,
        );
        text.push_str(&format!(
            "tx: {} packets, {} bytes, {} errors, {} drops | rx: {} packets, {} bytes, {} errors, \
             {} missed/drops\n",
            stats.tx_packets,
            stats.tx_bytes,
            stats.tx_errors,
            stats.tx_drops,
            stats.rx_packets,
            stats.rx_bytes,
            stats.rx_errors,
            stats.rx_drops
        ));
        let mut j = serde_json::Map::new();
        j.insert("tx".into(), tx);
        j.insert("rx".into(), rx);

        // Latency.
        let mut lat = LatencyHistogram::new();
        let (mut negative, mut hw, mut kernel) = (0, 0, 0);
        for q in &qs {
            lat.merge(&q.lat);
            negative += q.negative;
            hw += q.hw_samples;
            kernel += q.kernel_samples;
        }
        // Samples that were timed (counted or not positive).
        let timed = lat.count() + negative;
        let path = if m.round_trip {
            "round-trip"
        } else {
            "one-way"
        };
        let kind = if hw > 0 && hw == timed {
            "hardware"
        } else if kernel > 0 && kernel == timed {
            "kernel"
        } else if hw > 0 || kernel > 0 {
            "mixed"
        } else {
            "software"
        };
        if lat.count() > 0 || negative > 0 || m.every > 0 {
            let mut l = serde_json::Map::new();
            l.insert("path".into(), json!(path));
            l.insert("timestamps".into(), json!(kind));
            // With --hw-timestamps but no completion timestamps, both ends read the device
            // clock in software.
            #[cfg(feature = "xdp")]
            let phc = matches!(m.clock.get(), Some(Clock::Phc(_)));
            #[cfg(not(feature = "xdp"))]
            let phc = false;
            let src = match (kind, m.clock.get().is_some()) {
                ("hardware", _) if phc => XDP_HARDWARE_TS,
                ("hardware", _) => HARDWARE_TS,
                ("kernel", _) => KERNEL_TS,
                ("mixed", false) => MIXED_KERNEL_TS,
                (_, true) => DEVICE_CLOCK_SW_TS,
                _ => SOFTWARE_TS,
            };
            l.insert("timestamp_source".into(), json!(src));
            if let Some(why) = m.hw_fallback.get() {
                l.insert("hw_timestamps_fallback".into(), json!(why));
            }
            l.insert("samples".into(), json!(lat.count()));
            l.insert("kernel_timestamped".into(), json!(kernel));
            l.insert("not_positive".into(), json!(negative));
            l.insert("min_ns".into(), json!(lat.min()));
            for (name, q) in PERCENTILES {
                l.insert(format!("{name}_ns"), json!(lat.quantile(q)));
            }
            l.insert("max_ns".into(), json!(lat.max()));
            l.insert("mean_ns".into(), json!(lat.mean()));
            let buckets: Vec<Value> = lat
                .buckets()
                .map(|(lo, hi, c)| json!({"lo_ns": lo, "hi_ns": hi, "count": c}))
                .collect();
            l.insert("histogram".into(), json!(buckets));
            j.insert("latency".into(), Value::Object(l));
            let f = |v: Option<u64>| v.map_or("-".into(), fmt_ns);
            text.push_str(&format!(
                "latency ({path}, {kind} timestamps): {} samples, min {}",
                lat.count(),
                f(lat.min())
            ));
            for (name, q) in PERCENTILES {
                text.push_str(&format!(", {name} {}", f(lat.quantile(q))));
            }
            text.push_str(&format!(", max {}", f(lat.max())));
            if let Some(mean) = lat.mean() {
                text.push_str(&format!(", mean {}", fmt_ns(mean as u64)));
            }
            if negative > 0 {
                text.push_str(&format!(", {negative} not positive (not counted)"));
            }
            text.push('\n');
            text.push_str(&format!("  timestamps are {src}\n"));
            if let Some(why) = m.hw_fallback.get() {
                text.push_str(&format!("  {why}\n"));
            }
            text.push_str(&lat.text(50));
        }

        // An RFC 2544 trial: its mark, and the frames of another trial it saw.
        let late = m.args.trial_mark.map(|mark| {
            let n: u64 = qs.iter().map(|q| q.late).sum();
            j.insert(
                "trial".into(),
                json!({"mark": mark.get(), "late_from_earlier_trial": n}),
            );
            if n > 0 {
                text.push_str(&format!(
                    "trial (mark {}): {n} frames an earlier trial sent arrived late in this one: \
                     not counted as received (their own trial counted them lost)\n",
                    mark.get()
                ));
            }
            n
        });

        // Per-flow counts.
        let mut flows = FlowTracker::default();
        let mut sent: Vec<u64> = Vec::new();
        for q in &qs {
            flows.merge(&q.flows);
            let s = q.stream as usize;
            if sent.len() <= s {
                sent.resize(s + 1, 0);
            }
            sent[s] += q.tx_packets;
        }
        // The sender's counts are known when this process sent (--txrx).
        let sent = m.round_trip.then_some(&sent[..]);
        let mut flow_totals = None;
        let mut rate_short = None;
        if flows.received() > 0 {
            // With --stream / --profile, each stream's flows apart: flow 0 of one stream's
            // template is not flow 0 of another's (merged, a stream's loss hid behind another's
            // frames). Without, the queues send one template: flow k of every queue is the same
            // flow on the wire, one row.
            let several = m.streams.get().copied().unwrap_or(0) > 1;
            let all: Vec<(Option<u16>, FlowCount)> = if several {
                flows
                    .stream_counts(sent)
                    .into_iter()
                    .map(|(s, c)| (Some(s), c))
                    .collect()
            } else {
                flows.counts(sent).into_iter().map(|c| (None, c)).collect()
            };
            let mut worst: Vec<(Option<u16>, FlowCount)> =
                all.iter().copied().filter(|c| c.1.badness() > 0).collect();
            worst.sort_by(|a, b| {
                b.1.badness()
                    .cmp(&a.1.badness())
                    .then((a.0, a.1.flow).cmp(&(b.0, b.1.flow)))
            });
            worst.truncate(m.args.worst);
            let row = |(s, c): &(Option<u16>, FlowCount)| {
                json!({"stream": s, "flow": c.flow, "received": c.received, "lost": c.lost,
                       "duplicates": c.duplicates, "reordered": c.reordered})
            };
            let sum = |f: fn(&FlowCount) -> u64| all.iter().map(|c| f(&c.1)).sum::<u64>();
            let once = sum(|c| c.received - c.duplicates);
            flow_totals = Some((once + sum(|c| c.lost), once));
            j.insert(
                "flows".into(),
                json!({
                    "count": all.len(),
                    "streams": several.then(|| flows.streams()),
                    "loss_counted_from": if sent.is_some() { "packets sent" } else { "highest sequence received" },
                    "lost": sum(|c| c.lost),
                    "duplicates": sum(|c| c.duplicates),
                    "reordered": sum(|c| c.reordered),
                    "worst": worst.iter().map(row).collect::<Vec<_>>(),
                    "all": all.iter().map(row).collect::<Vec<_>>(),
                }),
            );
            text.push_str(&format!(
                "flows: {} flows{}, {} lost, {} duplicates, {} reordered (loss counted from the {})\n",
                all.len(),
                if several {
                    format!(" of {} streams", flows.streams())
                } else {
                    String::new()
                },
                sum(|c| c.lost),
                sum(|c| c.duplicates),
                sum(|c| c.reordered),
                if sent.is_some() {
                    "packets sent"
                } else {
                    "highest sequence received"
                }
            ));
            // A few flows: all of them, as in the JSON; many: the worst.
            if worst.is_empty() {
                text.push_str("  every flow complete and in order\n");
            }
            let (title, rows) = if all.len() <= 32 {
                ("all flows:  ", &all)
            } else {
                ("worst flows:", &worst)
            };
            if !rows.is_empty() {
                let stream = if several { " stream" } else { "" };
                text.push_str(&format!(
                    "  {title}{stream}   flow   received       lost       dups  reordered\n"
                ));
                for (st, c) in rows {
                    let st = st.map_or(String::new(), |s| format!(" {s:>6}"));
                    text.push_str(&format!(
                        "             {st} {:>6} {:>10} {:>10} {:>10} {:>10}\n",
                        c.flow, c.received, c.lost, c.duplicates, c.reordered
                    ));
                }
            }
        }

        // Capture.
        if let (Some(path), Some(c)) = (&m.args.write, &m.capture) {
            if let Ok(w) = c.lock() {
                j.insert(
                    "capture".into(),
                    json!({"file": path.display().to_string(), "frames": w.frames(),
                           "bytes": w.bytes(), "limit_reached": w.is_full()}),
                );
                text.push_str(&format!(
                    "capture: {}: {} frames, {} bytes{}\n",
                    path.display(),
                    w.frames(),
                    w.bytes(),
                    if w.is_full() {
                        " (limit reached: later frames not written)"
                    } else {
                        ""
                    }
                ));
            }
        }

        // Rate accuracy over the active window (the summary's: first to last frame sent).
        let sent: u64 = qs.iter().map(|q| q.tx_packets).sum();
        if let (Some(target), Some(f), Some(l), true) =
            (target_pps, window.first, window.last, sent > 0)
        {
            let secs = window.secs();
            let achieved = window.rate(stats.tx_packets, stats.tx_bytes).map(|r| r.0);
            rate_short = achieved.filter(|&a| a < 0.99 * target).map(|a| (target, a));
            // One-second samples that lie (nearly) whole inside the window; the rate of each
            // over its part inside the window. At a target below 100 pps a second holds too
            // few packets to judge.
            let mut worst: Option<(f64, f64, f64)> = None; // (deviation, pps, at second)
            if target >= 100.0 {
                for &(a, b, n) in &mon.samples {
                    let inside = b.min(l).saturating_duration_since(a.max(f)).as_secs_f64();
                    if inside >= 0.9 * (b - a).as_secs_f64() && inside > 0.0 {
                        let pps = n as f64 / inside;
                        let dev = (pps - target) / target;
                        if worst.is_none_or(|w| dev.abs() > w.0.abs()) {
                            worst = Some((dev, pps, (b - mon.t0).as_secs_f64()));
                        }
                    }
                }
            }
            j.insert(
                "rate".into(),
                json!({"target_pps": target, "achieved_pps": achieved,
                       "active_window_s": secs,
                       "achieved_error": achieved.map(|a| (a - target) / target),
                       "worst_second_deviation": worst.map(|w| w.0),
                       "worst_second_pps": worst.map(|w| w.1),
                       "worst_second_at_s": worst.map(|w| w.2)}),
            );
            text.push_str(&format!("rate: target {} pps", fmt_pps(target)));
            match achieved {
                Some(a) => text.push_str(&format!(
                    ", achieved {} pps ({:+.3} %) over the active window of {}",
                    fmt_pps(a),
                    100.0 * (a - target) / target,
                    fmt_secs(secs)
                )),
                None => text.push_str(&format!("; {}", window.no_rate(stats.tx_packets))),
            }
            match worst {
                Some((d, p, t)) => text.push_str(&format!(
                    "; worst one-second deviation {:+.3} % ({} pps, second ending at {t:.1} s)\n",
                    100.0 * d,
                    fmt_pps(p)
                )),
                None if target < 100.0 => text
                    .push_str("; below 100 pps a second holds too few packets to judge seconds\n"),
                None => text.push_str("; no full second inside the window\n"),
            }
        }
        // The packets sent in each second of the run (for --plot), at the second's end.
        if mon.samples.iter().any(|s| s.2 > 0) {
            let rows: Vec<Value> = mon
                .samples
                .iter()
                .map(|&(a, b, n)| {
                    let secs = (b - a).as_secs_f64().max(1e-9);
                    json!({"t_s": (b - mon.t0).as_secs_f64(), "tx_pps": n as f64 / secs})
                })
                .collect();
            j.insert("per_second".into(), Value::Array(rows));
        }
        Extras {
            json: Value::Object(j),
            text,
            flow_totals,
            rate_short,
            late,
        }
    }

    /// Adds the measurements to the summary object.
    pub fn extend(&self, summary: &mut Value) {
        if let (Value::Object(s), Value::Object(e)) = (summary, &self.json) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
    }

    /// Adds a part of the report: `value` under `key` in the JSON, `text` after the rest.
    pub fn add(&mut self, key: &str, value: Value, text: &str) {
        if let Value::Object(j) = &mut self.json {
            j.insert(key.into(), value);
        }
        self.text.push_str(text);
    }

    /// The measurements as text, after the summary line.
    pub fn print(&self) {
        out!("{}", self.text);
    }
}
