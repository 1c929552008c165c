//! `pktgen --rfc2544 throughput`: RFC 2544's throughput test (section 26.1) through a device
//! under test that sends the frames back (--txrx: a reflector, a forwarder such as `fwd
//! --mode macswap`, or the model's loopback).
//!
//! For each frame size a binary search ([`rawq_gen::RateSearch`]) runs trials of `--trial`
//! seconds, each a whole pktgen run (port opened, frames sent at the trial's rate, what came back
//! counted, port closed), and keeps two answers as FD.io CSIT reports them: the NDR (loss at
//! most `--loss-tolerance`, 0 by default, RFC 2544's throughput) and the PDR (at most
//! `--pdr-tolerance`). Every trial is kept: rate, sent, received, lost, and the latency
//! percentiles of the frames that carried a stamp (sizes with room for one). Ctrl-C ends the
//! search and prints what was measured.
//!
//! RFC 2544's frame sizes count the 4-byte FCS (64 is the Ethernet minimum): a size of 64 is sent
//! as pktgen's `-s 60`. Rates in bit/s are layer 1: frame, FCS, preamble and gap.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rawq_gen::{Rate, RateSearch, SizeSpec, TrialCount, TrialMark};
use serde::Serialize;
use serde_json::Value;

use crate::cli::Args;
use crate::opts::{Resolution, Test};

mod print;
use print::print;

/// The FCS, counted in RFC 2544's frame sizes and not in pktgen's `-s`.
const FCS: u16 = 4;
/// Preamble, start delimiter and inter-frame gap: with the FCS-counted frame, a frame's place
/// on the wire.
const L1_GAP: f64 = 20.0;

/// The share of a paced trial's frames its sender may drop from the schedule for being late
/// (see `tx_late_skipped`) and the trial still count: 1%, as the achieved rate may be 1%
/// under the rate asked for. A trial that passes so offered at least 99% of its rate (late
/// frames made up within the pacer's catch-up window only): the NDR it gives is at most 1% above
/// the one a sender that never fell behind would find.
const SCHEDULE_TOLERANCE: f64 = 0.01;
/// How many times a search trial whose sender did not offer its rate is run at that rate
/// before the search gives up saying so.
const ATTEMPTS: u32 = 5;

/// Latency percentiles of a trial's stamped frames (round trip, ns).
#[derive(Clone, Debug, Serialize)]
struct Latency {
    samples: u64,
    min_ns: Option<u64>,
    mean_ns: Option<f64>,
    p50_ns: Option<u64>,
    p90_ns: Option<u64>,
    p99_ns: Option<u64>,
    #[serde(rename = "p99.9_ns")]
    p999_ns: Option<u64>,
    max_ns: Option<u64>,
}

impl Latency {
    /// The average of trials' latencies (RFC 2544 section 26.2 reports the average of its 20
    /// trials): each value the mean of the trials that have it, rounded; samples summed.
    fn average(ls: &[Latency]) -> Option<Latency> {
        if ls.is_empty() {
            return None;
        }
        let mean = |f: fn(&Latency) -> Option<f64>| {
            let v: Vec<f64> = ls.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let int = |f: fn(&Latency) -> Option<u64>| {
            let v: Vec<u64> = ls.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| (v.iter().sum::<u64>() as f64 / v.len() as f64).round() as u64)
        };
        Some(Latency {
            samples: ls.iter().map(|l| l.samples).sum(),
            min_ns: int(|l| l.min_ns),
            mean_ns: mean(|l| l.mean_ns),
            p50_ns: int(|l| l.p50_ns),
            p90_ns: int(|l| l.p90_ns),
            p99_ns: int(|l| l.p99_ns),
            p999_ns: int(|l| l.p999_ns),
            max_ns: int(|l| l.max_ns),
        })
    }

    fn from_summary(v: &Value) -> Option<Latency> {
        let l = v.get("latency")?;
        let n = |k: &str| l.get(k).and_then(Value::as_u64);
        Some(Latency {
            samples: n("samples")?,
            min_ns: n("min_ns"),
            mean_ns: l.get("mean_ns").and_then(Value::as_f64),
            p50_ns: n("p50_ns"),
            p90_ns: n("p90_ns"),
            p99_ns: n("p99_ns"),
            p999_ns: n("p99.9_ns"),
            max_ns: n("max_ns"),
        })
    }
}

/// One trial.
#[derive(Clone, Debug, Serialize)]
struct Trial {
    /// What the trial was for: search (throughput), latency, loss (a step of the curve) or
    /// back-to-back.
    kind: &'static str,
    /// Loss curve: the trial's rate in percent of --rate-hi.
    percent_of_hi: Option<f64>,
    /// Back-to-back: the burst length sent.
    burst: Option<u64>,
    /// The rate asked for (null: unpaced, the trial that finds --rate-hi).
    rate_pps: Option<f64>,
    /// The rate the frames went at, over the active window.
    achieved_pps: Option<f64>,
    sent: u64,
    /// This trial's frames that came back (frames of an earlier trial not among them).
    received: u64,
    lost: u64,
    loss_ratio: f64,
    /// The mark this trial's stamps carry (RFC 2544 section 23: each trial's frames counted
    /// for that trial only); null when its frames have no room for a stamp (their late
    /// frames cannot be told from the next trial's).
    mark: Option<u8>,
    /// Frames an earlier trial sent that arrived during this one (after that trial's drain):
    /// not in `received` here, and lost to the trial that sent them.
    late_from_earlier_trial: u64,
    /// Within the NDR and the PDR tolerance.
    ndr_pass: bool,
    pdr_pass: bool,
    latency: Option<Latency>,
    /// Cut short by Ctrl-C: not used by the search.
    interrupted: bool,
    /// The sender did not offer the rate asked for: its rate over its active window was under
    /// 99% of it, or it dropped more than 1% of the trial's frames from its schedule for
    /// being late (its core was too slow or shared). The trial proves nothing about the device
    /// under test at that rate: the throughput search does not count it (`counted` false) and
    /// runs it again (the last of ATTEMPTS counts as failed, and the size's `shortfall` says
    /// so); the loss curve counts it as failed, the frames the rate asks for over
    /// the trial and the sender did not offer as lost.
    short_of_rate: bool,
    /// The frames the rate asks for over the trial (paced trials).
    expected: Option<u64>,
    /// Paced trials: the frames the sender dropped from its schedule because they were due
    /// longer ago than it makes up (instead of sending them late in a burst), and how late its
    /// latest frame was (ns).
    late_skipped: u64,
    max_lag_ns: u64,
    /// The search went by this trial's result (false: interrupted, or the sender short of
    /// its rate in a trial that was run again).
    counted: bool,
}

impl Trial {
    /// The counts the search goes by: a trial short of its rate failed (the frames it did not
    /// offer count as lost).
    fn count(&self, rate_pps: f64) -> TrialCount {
        TrialCount {
            rate_pps,
            sent: if self.short_of_rate {
                self.expected.unwrap_or(self.sent).max(self.sent)
            } else {
                self.sent
            },
            received: self.received,
        }
    }
}

/// The results of one frame size.
#[derive(Debug, Serialize)]
struct SizeResult {
    frame_size: u16,
    rate_lo_pps: Option<f64>,
    rate_hi_pps: Option<f64>,
    resolution_pps: Option<f64>,
    /// Null when even --rate-lo lost more than the tolerance (or the search was cut short
    /// before any trial passed).
    ndr_pps: Option<f64>,
    ndr_bps_l1: Option<f64>,
    pdr_pps: Option<f64>,
    pdr_bps_l1: Option<f64>,
    /// The latency of the passing trial at the NDR (when its frames had room for a stamp); with
    /// --rfc2544 latency the average of its latency trials.
    latency_at_ndr: Option<Latency>,
    /// --rfc2544 latency: the trials `latency_at_ndr` averages.
    latency_trials: Option<u32>,
    /// Back-to-back: the longest burst that came back whole (null: not even one frame).
    back_to_back_frames: Option<u64>,
    /// The test ran to its end.
    complete: bool,
    /// When the sender, not the device, was the limit: a rate its trials never offered, so the
    /// NDR is a lower bound of the device's (null: none).
    shortfall: Option<String>,
    trials: Vec<Trial>,
}

/// The whole report (`--json`).
#[derive(Debug, Serialize)]
struct Report {
    test: Test,
    backend: &'static str,
    device: String,
    trial_s: f64,
    ndr_loss_tolerance_pct: f64,
    pdr_loss_tolerance_pct: f64,
    /// Ctrl-C ended the test: what is here is what was measured before.
    interrupted: bool,
    sizes: Vec<SizeResult>,
}

/// pktgen's frame length (no FCS) of an RFC 2544 frame size.
fn len_of(size: u16) -> f64 {
    (size - FCS) as f64
}

fn bps_l1(pps: f64, size: u16) -> f64 {
    pps * (size as f64 + L1_GAP) * 8.0
}

/// Runs the test and prints its report; an error (a trial that failed) after the report of what
/// was measured.
pub fn run(a: &Args, test: Test) -> rawq::Result<()> {
    let b = &a.bench;
    // Ctrl-C from here on ends the search with a report.
    crate::signalled()?;
    let (stamped_min, bare_min) = (min_size(a, true)?, min_size(a, false)?);
    if let Some(s) = b.sizes.iter().find(|&&s| s < bare_min) {
        return Err(rawq::Error::Config(format!(
            "--sizes: {s} bytes (FCS included) is below the {bare_min} the template needs"
        )));
    }
    for &s in &b.sizes {
        let pps = |r: Option<Rate>| r.and_then(|r| r.pps(len_of(s)));
        if let (Some(lo), Some(hi)) = (pps(b.rate_lo), pps(b.rate_hi)) {
            if lo > hi {
                return Err(rawq::Error::Config(format!(
                    "--rate-lo is above --rate-hi for {s}-byte frames ({lo:.0} > {hi:.0} pps)"
                )));
            }
        }
    }
    if let Some(s) = b
        .sizes
        .iter()
        .find(|&&s| s < stamped_min && test == Test::Latency)
    {
        return Err(no_stamp(*s, stamped_min));
    }
    let mut report = Report {
        test,
        backend: a.backend.name(),
        device: a.dev.clone(),
        trial_s: b.trial,
        ndr_loss_tolerance_pct: b.loss_tolerance,
        pdr_loss_tolerance_pct: b.pdr_tolerance,
        interrupted: false,
        sizes: Vec::new(),
    };
    let mut failure = None;
    for &size in &b.sizes {
        let mut r = SizeResult {
            frame_size: size,
            rate_lo_pps: None,
            rate_hi_pps: None,
            resolution_pps: None,
            ndr_pps: None,
            ndr_bps_l1: None,
            pdr_pps: None,
            pdr_bps_l1: None,
            latency_at_ndr: None,
            latency_trials: None,
            back_to_back_frames: None,
            complete: false,
            shortfall: None,
            trials: Vec::new(),
        };
        let stamped = size >= stamped_min;
        let res = match test {
            Test::Throughput => throughput(a, size, stamped, &mut r),
            Test::Latency => throughput(a, size, stamped, &mut r)
                .and_then(|()| latency(a, size, stamped, &mut r)),
            Test::Loss => loss_curve(a, size, stamped, &mut r),
            Test::BackToBack => back_to_back(a, size, &mut r),
        };
        report.interrupted = crate::signalled().is_ok_and(|s| s.load(Relaxed));
        report.sizes.push(r);
        if let Err(e) = res {
            failure = Some(e);
            break;
        }
        if report.interrupted {
            break;
        }
    }
    print(a, &report);
    if let Some(path) = &a.plot {
        let v = serde_json::to_value(&report).unwrap_or_default();
        if crate::plot::rfc2544(path, &v)? == 0 {
            say!(
                "pktgen: --plot {}: nothing to draw (no trial had a rate)",
                path.display()
            );
        }
    }
    failure.map_or(Ok(()), Err)
}

/// The smallest RFC 2544 frame size (FCS included) the template fits, with or without a
/// latency stamp.
fn min_size(a: &Args, stamped: bool) -> rawq::Result<u16> {
    let mut t = a.clone();
    t.size = None;
    if stamped {
        t.measure.latency.get_or_insert(1);
    }
    Ok(t.source()?.max_len() as u16 + FCS)
}

/// Trials run so far: the next one's mark ([`TrialMark::nth`]).
static TRIALS: AtomicU64 = AtomicU64::new(0);

/// One trial of --trial seconds at `rate`, or of `burst` frames (as fast as the port takes
/// them, within --trial).
///
/// Each trial is a pktgen run of its own, and a frame that comes back after its drain arrives
/// in a later trial: the trial's stamps carry its own mark (every frame with room for a
/// sequence stamp is stamped, `--seq`), and a trial counts as received only the frames with
/// its mark (and frames without a stamp, as before); another trial's are counted apart
/// (`late_from_earlier_trial`), lost to the trial that sent them.
fn trial(
    a: &Args,
    size: u16,
    rate: Rate,
    burst: Option<u64>,
    stamped: bool,
    tol: (f64, f64),
) -> rawq::Result<Trial> {
    let mut t = a.clone();
    t.bench.rfc2544 = None;
    t.silent = true;
    t.quiet = true;
    t.json = false;
    t.measure.json_lines = false;
    t.size = Some(SizeSpec::Fixed(size - FCS));
    t.rate = rate;
    // A burst's trial ends when the burst has gone (it is --trial's worth at most, at the
    // rate the port reached unpaced); the time limit only bounds a port that slows down.
    t.duration = Some(match burst {
        Some(_) => a.bench.trial * 4.0 + 1.0,
        None => a.bench.trial,
    });
    t.count = burst.unwrap_or(0);
    if stamped {
        t.measure.latency.get_or_insert(1);
    }
    let mark = TrialMark::nth(TRIALS.fetch_add(1, Relaxed));
    t.measure.trial_mark = Some(mark);
    // Every frame with room for a sequence stamp carries one, and so the mark.
    if !t.seq && t.pcap.is_none() {
        t.seq = true;
        t.seq = t.source().is_ok();
    }
    let marked = t.seq || stamped;
    if !a.quiet {
        let r = rate
            .pps(len_of(size))
            .map_or("unpaced".to_string(), |p| format!("{p:.0} pps"));
        let what = burst.map_or(format!("for {} s", a.bench.trial), |n| {
            format!("of {n} frames")
        });
        say!("rfc2544: {size} B: a trial at {r} {what}");
    }
    let v = crate::run(&t)?;
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    // The run's ledger names the frames of an earlier trial it received: not this trial's.
    let earlier = v
        .pointer(&format!(
            "/ledger/buckets/{}",
            rawq_tools::ledger::key::LATE_EARLIER_TRIAL
        ))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let c = TrialCount {
        rate_pps: 0.0,
        sent: n("packets"),
        received: n("rx_packets").saturating_sub(earlier),
    };
    let loss = c.loss_ratio();
    let interrupted = crate::signalled().is_ok_and(|s| s.load(Relaxed));
    let expected = match burst {
        Some(_) => None,
        None => rate.pps(len_of(size)).map(|p| (p * a.bench.trial) as u64),
    };
    // The rate the sender kept over its active window (start-up excluded): a trial with no
    // rate (too few frames) is short too.
    let achieved = v.get("pps").and_then(Value::as_f64);
    let asked = if burst.is_some() {
        None
    } else {
        rate.pps(len_of(size))
    };
    let late_skipped = n("tx_late_skipped");
    let max_lag_ns = n("tx_max_lag_ns");
    let late = late_skipped as f64 > SCHEDULE_TOLERANCE * expected.unwrap_or(0) as f64;
    let short =
        !interrupted && asked.is_some_and(|r| late || achieved.is_none_or(|p| p < 0.99 * r));
    if short && !a.quiet {
        say!(
            "rfc2544: {size} B: the sender kept {} pps of the {} asked for and dropped {} \
             late frames from its schedule (up to {:.1} ms late): not a measurement of the \
             device (free the sender's core, or lower --rate-hi)",
            achieved.map_or("no rate".into(), |p| format!("{p:.0}")),
            asked.unwrap_or(0.0),
            late_skipped,
            max_lag_ns as f64 / 1e6
        );
    }
    Ok(Trial {
        short_of_rate: short,
        expected,
        kind: "search",
        percent_of_hi: None,
        burst,
        rate_pps: rate.pps(len_of(size)),
        achieved_pps: achieved,
        sent: c.sent,
        received: c.received,
        lost: c.lost(),
        loss_ratio: loss,
        mark: marked.then_some(mark.get()),
        late_from_earlier_trial: earlier,
        ndr_pass: !short && loss <= tol.0,
        pdr_pass: !short && loss <= tol.1,
        latency: Latency::from_summary(&v),
        interrupted,
        late_skipped,
        max_lag_ns,
        counted: !interrupted,
    })
}

/// The throughput search at one frame size, its trials kept in `r` as they are run.
fn throughput(a: &Args, size: u16, stamped: bool, r: &mut SizeResult) -> rawq::Result<()> {
    let b = &a.bench;
    let tol = (b.loss_tolerance / 100.0, b.pdr_tolerance / 100.0);
    let len = len_of(size);
    let mut first = None;
    let hi = match b.rate_hi.and_then(|r| r.pps(len)) {
        Some(hi) => hi,
        None => {
            // What the port sends unpaced: the top of the search, and its first trial.
            let t = trial(a, size, Rate::Unlimited, None, stamped, tol)?;
            progress(a, size, &t);
            let hi = t.achieved_pps;
            r.trials.push(t.clone());
            if t.interrupted {
                return Ok(());
            }
            first = Some(t);
            hi.ok_or_else(|| {
                rawq::Error::Config(format!(
                    "{size}-byte frames: the unpaced trial sent too few frames to have a rate; \
                     give --rate-hi or a longer --trial"
                ))
            })?
        }
    };
    let lo = b.rate_lo.and_then(|r| r.pps(len)).unwrap_or(hi / 100.0);
    let res = match b.resolution {
        Resolution::Share(s) => s * hi,
        Resolution::Rate(r) => r.pps(len).unwrap_or(hi),
    };
    r.rate_lo_pps = Some(lo);
    r.rate_hi_pps = Some(hi);
    r.resolution_pps = Some(res);
    let mut search = RateSearch::new(lo, hi, res, tol.0, tol.1).map_err(rawq::Error::Config)?;
    if let Some(t) = first {
        search.record(&t.count(hi));
    }
    // A trial whose sender did not offer its rate is not a pass or a fail at that rate: it is
    // run again, ATTEMPTS times at most. A rate never offered is the sender's limit, not the
    // device's: the search goes on below it (the last trial counts as failed) and says so.
    let mut never_offered: Option<f64> = None;
    'search: while let Some(rate) = search.next_rate() {
        for attempt in 1..=ATTEMPTS {
            let mut t = trial(a, size, Rate::Pps(rate), None, stamped, tol)?;
            progress(a, size, &t);
            t.counted &= !t.short_of_rate || attempt == ATTEMPTS;
            r.trials.push(t.clone());
            if t.interrupted {
                break 'search;
            }
            if t.counted {
                if t.short_of_rate {
                    never_offered = Some(never_offered.map_or(rate, |n| n.min(rate)));
                }
                search.record(&t.count(rate));
                continue 'search;
            }
        }
    }
    if let Some(rate) = never_offered {
        r.shortfall = Some(format!(
            "the sender did not offer {rate:.0} pps in {ATTEMPTS} trials (short of the rate, or \
             frames dropped from its schedule for being late: its core is shared or too slow): \
             the search counted it as failed, so the NDR is what the sender offered and the \
             device took, a lower bound of the device's; free the sender's core or lower \
             --rate-hi"
        ));
    }
    // Complete only when the answers are within the resolution: a search that ran out of
    // trials first reports the range it has, as incomplete.
    r.complete = search.resolved() && !r.trials.iter().any(|t| t.interrupted);
    r.ndr_pps = search.ndr();
    r.pdr_pps = search.pdr();
    r.ndr_bps_l1 = r.ndr_pps.map(|p| bps_l1(p, size));
    r.pdr_bps_l1 = r.pdr_pps.map(|p| bps_l1(p, size));
    // The passing trial at the NDR (the unpaced one when the top passed).
    r.latency_at_ndr = r
        .trials
        .iter()
        .filter(|t| t.ndr_pass && !t.interrupted)
        .find(|t| t.rate_pps.unwrap_or(hi) == r.ndr_pps.unwrap_or(f64::NAN))
        .and_then(|t| t.latency.clone());
    Ok(())
}

/// RFC 2544 latency: a trial at the NDR just found, every frame stamped.
fn latency(a: &Args, size: u16, stamped: bool, r: &mut SizeResult) -> rawq::Result<()> {
    if crate::signalled()?.load(Relaxed) {
        return Ok(());
    }
    let Some(ndr) = r.ndr_pps else {
        // No rate passed: no rate to measure the latency at.
        return Ok(());
    };
    if !stamped {
        return Err(no_stamp(size, size + 1));
    }
    let tol = (
        a.bench.loss_tolerance / 100.0,
        a.bench.pdr_tolerance / 100.0,
    );
    // RFC 2544 section 26.2: repeated (20 times at least), the average reported.
    let mut lats = Vec::new();
    for _ in 0..a.bench.latency_trials {
        let mut t = trial(a, size, Rate::Pps(ndr), None, true, tol)?;
        t.kind = "latency";
        progress(a, size, &t);
        let cut = t.interrupted;
        if let Some(l) = t.latency.clone().filter(|_| !cut) {
            lats.push(l);
        }
        r.complete &= !cut;
        r.trials.push(t);
        if cut || crate::signalled()?.load(Relaxed) {
            break;
        }
    }
    r.latency_trials = Some(lats.len() as u32);
    r.latency_at_ndr = Latency::average(&lats);
    Ok(())
}

fn no_stamp(size: u16, least: u16) -> rawq::Error {
    rawq::Error::Config(format!(
        "--rfc2544 latency: {size}-byte frames have no room for the latency stamp (the \
         template's headers, 24 bytes of stamp and the FCS): give --sizes of {least} or more"
    ))
}

/// The top rate of a curve: --rate-hi, or what an unpaced trial (kept in `r`) reaches.
fn top_rate(a: &Args, size: u16, stamped: bool, r: &mut SizeResult) -> rawq::Result<Option<f64>> {
    if let Some(hi) = a.bench.rate_hi.and_then(|x| x.pps(len_of(size))) {
        return Ok(Some(hi));
    }
    let tol = (
        a.bench.loss_tolerance / 100.0,
        a.bench.pdr_tolerance / 100.0,
    );
    let mut t = trial(a, size, Rate::Unlimited, None, stamped, tol)?;
    progress(a, size, &t);
    let hi = t.achieved_pps.filter(|_| !t.interrupted);
    t.kind = if a.bench.rfc2544 == Some(Test::Loss) {
        t.percent_of_hi = Some(100.0);
        "loss"
    } else {
        "search"
    };
    r.trials.push(t);
    Ok(hi)
}

/// RFC 2544's frame-loss-rate curve: from the top rate down in steps of 10%, until two
/// trials in a row lose nothing.
fn loss_curve(a: &Args, size: u16, stamped: bool, r: &mut SizeResult) -> rawq::Result<()> {
    let tol = (
        a.bench.loss_tolerance / 100.0,
        a.bench.pdr_tolerance / 100.0,
    );
    let measured_top = a.bench.rate_hi.is_none();
    let Some(hi) = top_rate(a, size, stamped, r)? else {
        return Ok(());
    };
    r.rate_hi_pps = Some(hi);
    let mut clean = u32::from(r.trials.last().is_some_and(|t| t.lost == 0));
    let first = if measured_top { 9 } else { 10 };
    for step in (1..=first).rev() {
        if clean >= 2 || crate::signalled()?.load(Relaxed) {
            break;
        }
        let pct = step as f64 * 10.0;
        // A step whose sender did not offer its rate is run again (ATTEMPTS times at most; the
        // last counts, short or not).
        let mut lost = 0;
        for attempt in 1..=ATTEMPTS {
            let mut t = trial(a, size, Rate::Pps(hi * pct / 100.0), None, stamped, tol)?;
            t.kind = "loss";
            t.percent_of_hi = Some(pct);
            t.counted &= !t.short_of_rate || attempt == ATTEMPTS;
            progress(a, size, &t);
            let (cut, counted) = (t.interrupted, t.counted);
            lost = t.count(0.0).lost();
            r.trials.push(t);
            if cut {
                return Ok(());
            }
            if counted {
                break;
            }
        }
        clean = if lost == 0 { clean + 1 } else { 0 };
    }
    r.complete = clean >= 2 || r.trials.iter().any(|t| t.percent_of_hi == Some(10.0));
    Ok(())
}

/// RFC 2544 back-to-back: a binary search on the burst length, between 1 frame and --trial's
/// worth at the top rate, for the longest burst sent at full speed that comes back whole.
fn back_to_back(a: &Args, size: u16, r: &mut SizeResult) -> rawq::Result<()> {
    let Some(hi) = top_rate(a, size, false, r)? else {
        return Ok(());
    };
    r.rate_hi_pps = Some(hi);
    let most = (hi * a.bench.trial).max(1.0).round();
    let res = match a.bench.resolution {
        Resolution::Share(s) => (s * most).max(1.0),
        Resolution::Rate(_) => (most / 100.0).max(1.0),
    };
    let tol = (
        a.bench.loss_tolerance / 100.0,
        a.bench.loss_tolerance / 100.0,
    );
    let mut search = RateSearch::new(1.0, most, res, tol.0, tol.1).map_err(rawq::Error::Config)?;
    while let Some(n) = search.next_rate() {
        let n = n.round().max(1.0);
        let mut t = trial(a, size, Rate::Unlimited, Some(n as u64), false, tol)?;
        t.kind = "back-to-back";
        progress(a, size, &t);
        let (cut, sent, received) = (t.interrupted, t.sent, t.received);
        r.trials.push(t);
        if cut {
            return Ok(());
        }
        // Frames of the burst the port did not take in time were not sent back to back: they
        // count against it.
        search.record(&TrialCount {
            rate_pps: n,
            sent: sent.max(n as u64),
            received,
        });
    }
    r.back_to_back_frames = search.ndr().map(|n| n as u64);
    r.complete = search.resolved();
    Ok(())
}

fn progress(a: &Args, size: u16, t: &Trial) {
    if a.quiet {
        return;
    }
    let rate = t
        .rate_pps
        .map_or("unpaced".to_string(), |p| format!("{:.4} Mpps", p / 1e6));
    say!(
        "rfc2544: {size} B at {rate}: {} sent, {} back, {} lost ({:.4}%){}{}",
        t.sent,
        t.received,
        t.lost,
        t.loss_ratio * 100.0,
        match t.late_from_earlier_trial {
            0 => String::new(),
            n => format!(", and {n} late frames of an earlier trial (not counted)"),
        },
        if t.interrupted { ", interrupted" } else { "" }
    );
}
