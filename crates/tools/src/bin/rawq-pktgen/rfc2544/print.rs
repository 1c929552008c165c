//! The text and JSON of an RFC 2544 report: the table RFC 2544 asks for per test, then every
//! trial.

use super::{Report, SizeResult, Test};
use crate::cli::Args;

fn mpps(p: Option<f64>) -> String {
    p.map_or("-".into(), |p| format!("{:.4}", p / 1e6))
}

fn gbps(p: Option<f64>) -> String {
    p.map_or("-".into(), |p| format!("{:.4}", p / 1e9))
}

fn us(n: Option<u64>) -> String {
    n.map_or("-".into(), |n| format!("{:.1}", n as f64 / 1e3))
}

pub(super) fn print(a: &Args, r: &Report) {
    if a.json {
        outln!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    outln!(
        "RFC 2544 {} on {}{} (trials of {} s; NDR: loss at most {}%, PDR: at most {}%){}",
        test_name(r.test),
        r.backend,
        if r.device.is_empty() {
            String::new()
        } else {
            format!(" {}", r.device)
        },
        r.trial_s,
        r.ndr_loss_tolerance_pct,
        r.pdr_loss_tolerance_pct,
        if r.interrupted {
            "; interrupted: the last size is incomplete"
        } else {
            ""
        }
    );
    match r.test {
        Test::Throughput | Test::Latency => print_rates(r),
        Test::Loss => print_loss(r),
        Test::BackToBack => print_back_to_back(r),
    }
    outln!(
        "trials (frame size, kind, rate asked, sent, received, lost, loss, latency p50/p99 µs):"
    );
    for s in &r.sizes {
        for t in &s.trials {
            let l = t.latency.as_ref();
            let kind = match (t.percent_of_hi, t.burst) {
                (Some(p), _) => format!("loss {p:.0}%"),
                (_, Some(n)) => format!("burst {n}"),
                _ => t.kind.to_string(),
            };
            // Frames of an earlier trial that arrived in this one: said, not counted.
            let late = match t.late_from_earlier_trial {
                0 => String::new(),
                n => format!(" ({n} late frames of an earlier trial, not counted)"),
            };
            outln!(
                "  {:>5} {:>12} {:>12} {:>12} {:>12} {:>10} {:>9.4}% {:>8}/{:<8}{late}{}",
                s.frame_size,
                kind,
                t.rate_pps
                    .map_or("unpaced".into(), |p| format!("{p:.0} pps")),
                t.sent,
                t.received,
                t.lost,
                t.loss_ratio * 100.0,
                us(l.and_then(|l| l.p50_ns)),
                us(l.and_then(|l| l.p99_ns)),
                if t.interrupted {
                    " interrupted"
                } else if !t.counted {
                    " sender short of the rate: not counted"
                } else {
                    ""
                }
            );
        }
    }
}

fn test_name(t: Test) -> &'static str {
    match t {
        Test::Throughput => "throughput",
        Test::Latency => "latency",
        Test::Loss => "frame loss rate",
        Test::BackToBack => "back-to-back",
    }
}

fn incomplete(s: &SizeResult) -> &'static str {
    if s.complete {
        ""
    } else {
        "  (incomplete)"
    }
}

/// The loss curve: loss in percent at each step.
fn print_loss(r: &Report) {
    outln!(
        "{:>6} {:>9} {:>14} {:>10}",
        "frame",
        "% of max",
        "rate pps",
        "loss %"
    );
    for s in &r.sizes {
        for t in s.trials.iter().filter(|t| t.percent_of_hi.is_some()) {
            outln!(
                "{:>6} {:>9.0} {:>14.0} {:>10.4}{}",
                s.frame_size,
                t.percent_of_hi.unwrap_or(0.0),
                t.rate_pps.or(t.achieved_pps).unwrap_or(0.0),
                t.loss_ratio * 100.0,
                if t.interrupted { "  (interrupted)" } else { "" }
            );
        }
    }
}

fn print_back_to_back(r: &Report) {
    outln!(
        "{:>6} {:>14} {:>14} {:>7}",
        "frame",
        "longest burst",
        "at pps",
        "trials"
    );
    for s in &r.sizes {
        outln!(
            "{:>6} {:>14} {:>14} {:>7}{}",
            s.frame_size,
            s.back_to_back_frames.map_or("-".into(), |n| n.to_string()),
            s.rate_hi_pps.map_or("-".into(), |p| format!("{p:.0}")),
            s.trials.len(),
            incomplete(s)
        );
    }
}

/// Throughput (and latency): NDR and PDR per size, latency at the NDR.
fn print_rates(r: &Report) {
    outln!(
        "{:>6} {:>10} {:>11} {:>10} {:>11} {:>7} {:>9} {:>9} {:>9}",
        "frame",
        "NDR Mpps",
        "NDR Gbit/s",
        "PDR Mpps",
        "PDR Gbit/s",
        "trials",
        "p50 µs",
        "p99 µs",
        "max µs"
    );
    for s in &r.sizes {
        let l = s.latency_at_ndr.as_ref();
        outln!(
            "{:>6} {:>10} {:>11} {:>10} {:>11} {:>7} {:>9} {:>9} {:>9}{}",
            s.frame_size,
            mpps(s.ndr_pps),
            gbps(s.ndr_bps_l1),
            mpps(s.pdr_pps),
            gbps(s.pdr_bps_l1),
            s.trials.len(),
            us(l.and_then(|l| l.p50_ns)),
            us(l.and_then(|l| l.p99_ns)),
            us(l.and_then(|l| l.max_ns)),
            incomplete(s)
        );
        if let Some(why) = &s.shortfall {
            outln!("{:>6} {why}", s.frame_size);
        }
    }
    // --rfc2544 latency: the figures are an average (RFC 2544 section 26.2).
    if let Some(n) = r.sizes.iter().find_map(|s| s.latency_trials) {
        outln!("latency: the average of {n} trials at the NDR (each its own percentiles)");
    }
}
