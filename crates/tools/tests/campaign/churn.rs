//! A library run of the campaign: what neither tool does while it runs. Flow rules added and
//! removed on a live port (rule churn), an error completion on the model (the library's
//! `ModelPort::inject_tx_error`; the tools have no knob for it on `-b model`), and frames longer
//! than the receive buffer (`--long-every N --long-len L`: the port takes jumbo frames, its
//! receive buffers are 2 KiB, and every N frames sent one of L bytes arrives from the wire,
//! `ModelPort::inject_frame`: the device consumes a receive buffer with a local length error
//! completion).
//!
//! A `Backend::Model` port with two queues; queue 0 sends a sequenced UDP flow (dst-port 9000)
//! with at most 128 frames in flight while both queues receive. A base rule
//! (`udp dst-port 9000 prio 10 -> queue 0`) plays the rest of the world; every `--churn-every`
//! frames one change drawn from the seed: a rule taking the flow to queue 1 added or removed, a
//! drop rule added or removed (`--drop-rules`), the base rule removed (the flow goes to the
//! kernel) or put back. Then the law, as for the tools' ledgers:
//! - every frame `tx_burst` took is sent, dropped or failed, none in flight at the end and none
//!   counted twice (`QueueStats::tx_ledger`);
//! - the frames the device sent (the model's `tx_frames`) are the frames queue 0 counts sent;
//! - each of them, and each long frame, arrived on a queue or was counted by the device where
//!   it went instead (a drop rule, no rule matched: the kernel, no receive buffer, a receive
//!   queue in error, the wire, a receive error completion), once: the two add up to what was
//!   sent and injected, exactly;
//! - every receive error completion the device wrote is one the queues counted (`rx_errors`),
//!   and no long frame arrived as a good one;
//! - no sequence number arrived twice, none that was not sent.
//!
//! It ends within its bound or is reported as a hang (its thread is then left behind).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rawq::dv::model::ModelOptions;
use rawq::flow::Rule;
use rawq::{Backend, Packet, Port, Queue, RuleHandle};
use rawq_testkit as support;
use support::emu_dv::{seq_of, udp_frame};
use support::Rng;

use crate::scenario::{opt, Scenario};

/// How long a library run may take in all.
pub const BOUND: Duration = Duration::from_secs(60);
/// How long the frames sent get to arrive or be counted, once all are sent.
const SETTLE: Duration = Duration::from_secs(20);
/// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR` (what a bad lkey gives on hardware).
const SYND_LOCAL_PROT_ERR: u8 = 0x04;

/// What a library run found: a one-line summary, and the laws it broke.
#[derive(Debug)]
pub struct LibOutcome {
    pub summary: String,
    pub violations: Vec<String>,
    pub elapsed: Duration,
}

fn rule(text: &str) -> Rule {
    text.parse().expect("the campaign's rules parse")
}

/// The installed changes: which of the churned rules are there.
#[derive(Default)]
struct Churned {
    to_q1: Option<RuleHandle>,
    drop: Option<RuleHandle>,
    base: Option<RuleHandle>,
    changes: u64,
    refused: u64,
}

impl Churned {
    /// One change drawn from `r`.
    fn step(&mut self, r: &mut Rng, port: &mut Port, drops: bool, errs: &mut Vec<String>) {
        let which = r.below(if drops { 3 } else { 2 });
        let res = match which {
            0 => match self.to_q1.take() {
                Some(h) => port.remove_rule(h),
                None => port
                    .add_rule(rule("udp src-port 1024 dst-port 9000 -> queue 1"))
                    .map(|h| self.to_q1 = Some(h)),
            },
            1 => match self.base.take() {
                Some(h) => port.remove_rule(h),
                None => port
                    .add_rule(rule("udp dst-port 9000 prio 10 -> queue 0"))
                    .map(|h| self.base = Some(h)),
            },
            _ => match self.drop.take() {
                Some(h) => port.remove_rule(h),
                None => port
                    .add_rule(rule("udp src-port 1024 dst-port 9000 prio 5 -> drop"))
                    .map(|h| self.drop = Some(h)),
            },
        };
        match res {
            Ok(()) => self.changes += 1,
            // A rule refused for sharing an entry with an installed one is the library keeping
            // its law (validate_rules), not a failure: counted, said in the summary.
            Err(rawq::Error::Rule(_)) => self.refused += 1,
            Err(e) => errs.push(format!("rule change {which} failed: {e}")),
        }
    }
}

/// Receives what `q` has into `got`.
fn drain(q: &mut Queue, got: &mut Vec<u32>, burst: &mut Vec<Packet>) {
    burst.clear();
    q.rx_burst(burst, 64);
    for p in burst.drain(..) {
        got.push(seq_of(&p).unwrap_or(u32::MAX));
    }
}

fn run_inner(sc: &Scenario) -> (String, Vec<String>) {
    let mut errs = Vec::new();
    let frames: u32 = opt(&sc.args, "--frames").unwrap_or(5000);
    let every: Option<u32> = opt(&sc.args, "--churn-every");
    let tx_error: Option<u64> = opt(&sc.args, "--tx-error");
    let drops = sc.args.iter().any(|a| a == "--drop-rules");
    let long_every: Option<u32> = opt(&sc.args, "--long-every");
    let long_len: usize = opt(&sc.args, "--long-len").unwrap_or(4000);
    let mut r = Rng(sc.seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    // Long frames need a port that takes them (a jumbo port limit) and receive buffers they
    // do not fit: one 2 KiB pool buffer per receive WQE (the default cyclic RQ).
    let opts = match long_every {
        Some(_) => ModelOptions {
            max_frame: 9018,
            rx: rawq::dv::model::RxKind::Cyclic { sges: 1 },
            ..ModelOptions::default()
        },
        None => ModelOptions::default(),
    };
    let mut port = match Port::builder(Backend::Model(opts))
        .queues(2)
        .rx_ring(256)
        .tx_ring(256)
        .open()
    {
        Ok(p) => p,
        Err(e) => {
            return (
                String::new(),
                vec![format!("the model port did not open: {e}")],
            )
        }
    };
    let mut ch = Churned::default();
    match port.add_rule(rule("udp dst-port 9000 prio 10 -> queue 0")) {
        Ok(h) => ch.base = Some(h),
        Err(e) => return (String::new(), vec![format!("the base rule: {e}")]),
    }
    let mut qs = port.take_queues();
    if let (Some(nth), Some(m)) = (tx_error, port.model_port()) {
        m.inject_tx_error(0, nth, SYND_LOCAL_PROT_ERR);
    }
    let pool = port.pool().clone();
    let (mut g0, mut g1) = (Vec::new(), Vec::new());
    let mut burst = Vec::with_capacity(64);
    let (mut next, mut taken) = (0u32, 0u64);
    let mut next_change = every.unwrap_or(u32::MAX);
    let device_done = |port: &Port| {
        port.model_counters().map_or(0, |c| {
            c.rx_rule_drop
                + c.rx_to_kernel
                + c.rx_no_buffer
                + c.rx_in_error
                + c.wire_drops
                + c.rx_error_cqes
        })
    };
    // Long frames put on the wire so far (each numbered from u32::MAX down: never sent).
    let mut injected = 0u64;
    let mut next_long = long_every.unwrap_or(u32::MAX);
    let end = Instant::now() + BOUND - Duration::from_secs(5);
    let mut settle_end: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if now >= end {
            errs.push(format!(
                "not done within {} s: {next} of {frames} frames sent",
                BOUND.as_secs() - 5
            ));
            break;
        }
        if next < frames {
            // In flight: taken, and neither arrived, counted by the device, nor dropped or
            // failed by the send queue.
            let s0 = qs[0].stats();
            let done = ((g0.len() + g1.len()) as u64 + device_done(&port)).saturating_sub(injected)
                + s0.tx_drops
                + s0.tx_errors;
            if let (Some(e), Some(m)) = (long_every, port.model_port()) {
                if next >= next_long {
                    m.inject_frame(&udp_frame(u32::MAX - injected as u32, long_len));
                    injected += 1;
                    next_long = next + e;
                }
            }
            if every.is_some() && next >= next_change {
                ch.step(&mut r, &mut port, drops, &mut errs);
                next_change = next + every.unwrap_or(u32::MAX);
            }
            if taken.saturating_sub(done) < 128 {
                let hi = (next + 16).min(frames).min(next_change.max(next + 1));
                let mut v: Vec<Packet> = Vec::new();
                for s in next..hi {
                    match pool.alloc() {
                        Ok(mut p) => {
                            p.copy_from_slice(&udp_frame(s, 64)).expect("fits");
                            v.push(p);
                        }
                        Err(_) => break,
                    }
                }
                let n = qs[0].tx_burst(&mut v);
                next += n as u32;
                taken += n as u64;
            }
        } else {
            // All taken: done once every frame sent is accounted for and none is in flight.
            let se = *settle_end.get_or_insert(now + SETTLE);
            let s0 = qs[0].stats();
            let l = s0.tx_ledger();
            let arrived =
                ((g0.len() + g1.len()) as u64 + device_done(&port)).saturating_sub(injected);
            if l.in_flight == 0 && arrived >= s0.tx_packets {
                break;
            }
            if now >= se {
                errs.push(format!(
                    "{} s after the last frame was taken, {arrived} of {} sent accounted for \
                     and {} in flight",
                    SETTLE.as_secs(),
                    s0.tx_packets,
                    l.in_flight
                ));
                break;
            }
        }
        let (a, b) = qs.split_at_mut(1);
        drain(&mut a[0], &mut g0, &mut burst);
        drain(&mut b[0], &mut g1, &mut burst);
        a[0].reclaim();
        // Errors of the queues: a send error is an error completion the ledger counts; it is
        // taken (so that the queue recovers) and said in the summary.
        for q in qs.iter_mut() {
            let _ = q.take_error();
        }
    }
    // The law.
    let s0 = qs[0].stats();
    let l = s0.tx_ledger();
    if l.taken != taken {
        errs.push(format!(
            "tx_ledger says {} taken, tx_burst took {taken}",
            l.taken
        ));
    }
    if l.double_counted != 0 {
        errs.push(format!(
            "tx_ledger counts {} twice: {l:?}",
            l.double_counted
        ));
    }
    if l.sent + l.dropped + l.failed + l.in_flight != l.taken {
        errs.push(format!("tx_ledger does not close: {l:?}"));
    }
    let c = port.model_counters().unwrap_or_default();
    if c.tx_frames != l.sent {
        errs.push(format!(
            "the device sent {} frames, queue 0 counts {} sent ({l:?})",
            c.tx_frames, l.sent
        ));
    }
    let got = (g0.len() + g1.len()) as u64;
    let dev = device_done(&port);
    if got + dev != c.tx_frames + injected {
        errs.push(format!(
            "{got} received + {dev} counted by the device (drop rule {}, kernel {}, no buffer \
             {}, rq in error {}, wire {}, receive error completions {}) != {} sent + \
             {injected} long frames injected",
            c.rx_rule_drop,
            c.rx_to_kernel,
            c.rx_no_buffer,
            c.rx_in_error,
            c.wire_drops,
            c.rx_error_cqes,
            c.tx_frames
        ));
    }
    let rx_errors: u64 = qs.iter().map(|q| q.stats().rx_errors).sum();
    if rx_errors != c.rx_error_cqes {
        errs.push(format!(
            "the device wrote {} receive error completions, the queues counted {rx_errors} \
             (rx_errors)",
            c.rx_error_cqes
        ));
    }
    if c.rx_error_cqes > injected {
        errs.push(format!(
            "{} receive error completions for {injected} long frames",
            c.rx_error_cqes
        ));
    }
    let mut all: Vec<u32> = g0.iter().chain(&g1).copied().collect();
    all.sort_unstable();
    if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
        errs.push(format!("frame {} arrived twice", w[0]));
    }
    if let Some(x) = all.iter().find(|&&x| x >= next) {
        errs.push(format!(
            "frame {x} arrived but was never sent (a long frame, longer than the receive \
             buffer, if at or above {})",
            u32::MAX - injected.min(u32::MAX as u64) as u32
        ));
    }
    let summary = format!(
        "{taken} taken: {} sent, {} dropped, {} failed; received {} + {} (queues 0 + 1), drop \
         rule {}, kernel {}, no buffer {}; {} rule changes ({} refused); {injected} long \
         frames injected, {} receive length errors",
        l.sent,
        l.dropped,
        l.failed,
        g0.len(),
        g1.len(),
        c.rx_rule_drop,
        c.rx_to_kernel,
        c.rx_no_buffer,
        ch.changes,
        ch.refused,
        c.rx_error_cqes
    );
    (summary, errs)
}

/// Runs a library scenario within [`BOUND`].
pub fn run(sc: &Scenario) -> LibOutcome {
    let t = Instant::now();
    let (tx, rx) = mpsc::channel();
    let sc2 = sc.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("campaign-lib-{}", sc.seed))
        .spawn(move || {
            let r = std::panic::catch_unwind(|| run_inner(&sc2));
            let _ = tx.send(r);
        });
    if let Err(e) = spawned {
        return LibOutcome {
            summary: String::new(),
            violations: vec![format!("harness: cannot start a thread: {e}")],
            elapsed: t.elapsed(),
        };
    }
    let (summary, violations) = match rx.recv_timeout(BOUND) {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => (
            String::new(),
            vec!["the library run panicked (its message is above)".into()],
        ),
        Err(_) => (
            String::new(),
            vec![format!(
                "hang: the library run did not end within {} s (its thread is left behind)",
                BOUND.as_secs()
            )],
        ),
    };
    LibOutcome {
        summary,
        violations,
        elapsed: t.elapsed(),
    }
}
