//! `check(scenario, outcome)`: the invariants every run must keep, whatever its fault.

use std::os::unix::process::ExitStatusExt;

use serde_json::Value;

use crate::exec::Outcome;
use crate::scenario::{Fault, Scenario, Tool};

/// One broken invariant of one run.
#[derive(Clone, Debug)]
pub struct Violation {
    pub seed: u64,
    pub what: String,
}

/// The run's JSON summary: the last stdout line that parses as a JSON object.
pub fn json_summary(out: &Outcome) -> Option<Value> {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(out.stdout.trim()) {
        return Some(v);
    }
    out.stdout
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(Value::is_object)
        })
}

fn has_summary(sc: &Scenario, out: &Outcome) -> bool {
    if sc.json {
        json_summary(out).is_some()
    } else {
        !out.stdout.trim().is_empty()
    }
}

fn u(v: &Value, path: &[&str]) -> Option<u64> {
    let mut v = v;
    for k in path {
        v = v.get(k)?;
    }
    v.as_u64()
}

/// A ledger: frames offered, and each bucket's name and frames.
pub type Ledger = (u64, Vec<(String, u64)>);

/// The ledger's figures, or why they are not there or do not parse.
pub fn ledger(v: &Value) -> Result<Option<Ledger>, String> {
    let Some(l) = v.get("ledger") else {
        return Ok(None);
    };
    let offered = l
        .get("offered")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("ledger.offered is not a count: {l}"))?;
    let buckets = l
        .get("buckets")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("ledger.buckets is not an object: {l}"))?;
    let mut b = Vec::new();
    for (k, x) in buckets {
        let n = x
            .as_u64()
            .ok_or_else(|| format!("ledger bucket {k} is not a count (negative?): {x}"))?;
        b.push((k.clone(), n));
    }
    Ok(Some((offered, b)))
}

/// Checks that were skipped for this run (said in the report, never counted as passed).
pub fn skipped(sc: &Scenario, out: &Outcome) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(j) = json_summary(out) {
        if j.get("ledger").is_none() && j.get("test").is_none() {
            v.push("no ledger: the ledger law was not checked (today's counters were)".into());
        }
    } else if sc.json && out.status.is_some_and(|s| s.success()) {
        v.push("no JSON summary to check".into());
    }
    if matches!(sc.fault, Fault::ClosedStderr { .. }) {
        v.push("stderr closed: the error message was not checked".into());
    }
    v
}

/// The invariants after a run; empty when it kept them all.
pub fn check(sc: &Scenario, out: &Outcome) -> Vec<Violation> {
    let mut v = Vec::new();
    let mut bad = |what: String| {
        v.push(Violation {
            seed: sc.seed,
            what,
        })
    };
    if out.skipped.is_some() {
        return Vec::new();
    }
    if let Some(l) = &out.lib {
        for w in &l.violations {
            bad(w.clone());
        }
        return v;
    }
    let tool = sc.tool.name();
    for h in &out.harness {
        bad(format!("harness: {h}"));
    }
    // It ends within its bound.
    if let Some(h) = &out.hung {
        let what = out.hang_report.as_deref().unwrap_or("");
        bad(format!(
            "hang: {h}; what it was doing then:\n```\n{}\n```",
            what.trim_end()
        ));
    }
    // Never a Rust panic, but the one the test hook injects (its message names the hook).
    let injected = |l: &str| l.contains("RAWQ_PKTGEN_FAULT=") || l.contains("RAWQ_FWD_FAULT=");
    let panic_at = |l: &str| l.contains("panicked at");
    let lines: Vec<&str> = out.stderr.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        // The panic's message is on the line after "thread '...' panicked at FILE:LINE:".
        if panic_at(l) && !lines.get(i + 1).is_some_and(|m| injected(m)) && !injected(l) {
            bad(format!(
                "Rust panic: {l} {}",
                lines.get(i + 1).unwrap_or(&"")
            ));
        }
    }
    if !lines.iter().any(|l| panic_at(l)) && out.stderr.contains("RUST_BACKTRACE") {
        bad("Rust panic (a backtrace note without its line)".into());
    }
    for l in &out.leftovers {
        bad(format!("left behind: {l}"));
    }
    let Some(status) = out.status else {
        return v;
    };
    if status.code() == Some(101) {
        bad("exit status 101 (a Rust panic's)".into());
    }
    let summary = has_summary(sc, out);
    fault_laws(sc, out, status, summary, &mut bad);
    let sig = sc.fault.signal();
    let started = out.started_at_signal.unwrap_or(true);
    let stderr_said = out
        .stderr
        .lines()
        .any(|l| !l.starts_with("emu: building") && !l.trim().is_empty());
    match (status.code(), status.signal()) {
        (Some(0), _) => {
            if matches!(sc.fault, Fault::ClosedStdout { .. }) {
                // The summary may have come before the reader went away.
                if !summary
                    && !out.stderr.to_lowercase().contains("stdout")
                    && !out.stderr.to_lowercase().contains("pipe")
                {
                    bad(
                        "exit 0 with its stdout closed: the summary was lost and nothing said so"
                            .into(),
                    );
                }
            } else if !summary {
                bad(format!(
                    "exit 0 without a summary on stdout (json: {})",
                    sc.json
                ));
            }
        }
        (Some(124), _) if matches!(sc.fault, Fault::Timeout { .. }) && !summary && started => {
            bad("`timeout` ended the run (status 124) and no summary was printed".into());
        }
        (Some(124), _) if matches!(sc.fault, Fault::Timeout { .. }) => {}
        // 128 + SIGPIPE: what a shell reports for a command a closed pipe ended (`yes | head`);
        // the tools exit so when their stdout went away before the summary was written
        // (rawq_tools::out::CLOSED_STATUS): the status itself says which (seed 6195).
        (Some(141), _) if matches!(sc.fault, Fault::ClosedStdout { .. }) => {}
        (Some(c @ (130 | 143)), _) => {
            let expected = if c == 130 {
                libc::SIGINT
            } else {
                libc::SIGTERM
            };
            if sig.is_none() {
                bad(format!("exit {c} (a signal's) but no signal was sent"));
            } else if sig != Some(expected) && !matches!(sc.fault, Fault::Timeout { .. }) {
                bad(format!("exit {c} after a different signal ({sig:?})"));
            }
            if sig.is_some()
                && started
                && !summary
                && !matches!(sc.fault, Fault::ClosedStdout { .. })
            {
                bad(format!(
                    "exit {c} after one signal, once started, with no summary (one signal must end the run with its summary)"
                ));
            }
        }
        (None, Some(s)) => {
            if sig != Some(s) {
                bad(format!("killed by signal {s}, which the run did not send"));
            } else if started && !summary {
                bad(format!(
                    "killed by signal {s} after it had started: no summary, no message"
                ));
            }
        }
        (Some(c), _) => {
            if !matches!(sc.fault, Fault::ClosedStderr { .. }) && !stderr_said {
                bad(format!("exit {c} with nothing said on stderr"));
            }
            if sc.fault == Fault::None && !stderr_said {
                bad(format!("exit {c} on a run with no fault"));
            }
        }
        _ => {}
    }
    // The counts.
    if let Some(j) = json_summary(out) {
        match ledger(&j) {
            Err(e) => bad(format!("ledger malformed: {e}")),
            Ok(Some((offered, buckets))) => {
                let sum: u64 = buckets.iter().map(|(_, n)| n).sum();
                if sum != offered {
                    bad(format!(
                        "ledger does not close: buckets sum to {sum}, offered {offered}: {buckets:?}"
                    ));
                }
                for (k, n) in &buckets {
                    if *n > offered {
                        bad(format!("ledger bucket {k} = {n} > offered {offered}"));
                    }
                }
                // `unattributed` always, and the bucket the run's frames end in when all goes
                // well: `received` for a pktgen that receives (--txrx, --rx), `sent` for a
                // sender alone, `forwarded` for fwd.
                let receives = sc.args.iter().any(|a| a == "--txrx" || a == "--rx");
                let end = match sc.tool {
                    Tool::Fwd => "forwarded",
                    Tool::Pktgen if receives => "received",
                    Tool::Pktgen | Tool::Lib => "sent",
                };
                for need in [end, "unattributed"] {
                    if !buckets.iter().any(|(k, _)| k == need) {
                        bad(format!("ledger has no `{need}` bucket"));
                    }
                }
            }
            Ok(None) => today(sc, &j, &mut bad),
        }
    }
    let _ = tool;
    v
}

/// The laws of the faults that are not signals or pipes.
fn fault_laws(
    sc: &Scenario,
    out: &Outcome,
    status: std::process::ExitStatus,
    summary: bool,
    bad: &mut impl FnMut(String),
) {
    let code = status.code();
    match sc.fault {
        Fault::QueueThread { q, panic } => {
            // The hook fires once the queue runs, and, for an error, 200 ms later: a short
            // run may end first (0 with its summary). Else a failure status, an error that
            // names the queue and, for an error, the summary of what every queue did.
            let named = match sc.tool {
                Tool::Fwd => format!("thread {q} (queue {q})"),
                _ => format!("queue {q}'s thread failed"),
            };
            if code == Some(0) {
                if panic {
                    bad(format!("queue thread {q} panicked and the run exited 0"));
                }
            } else if !out.stderr.contains(&named) {
                bad(format!(
                    "queue thread {q} failed and the error does not name it (`{named}`)"
                ));
            } else if !panic && !summary {
                bad(format!(
                    "queue thread {q} failed with an error and no summary was printed"
                ));
            }
        }
        Fault::DeviceFatal { .. } => {
            // A device that failed while the run had more than a second left must end it
            // non-zero, naming the fatal error.
            let late = out
                .fault_at
                .is_some_and(|at| out.elapsed > at + std::time::Duration::from_secs(1));
            if code == Some(0) && late {
                bad("the device failed (fatal event) and the run exited 0".into());
            }
            let said = out.stderr.to_lowercase();
            // (A device that failed before the port opened answers its first command EIO:
            // the verb that failed is named with "Input/output error", seed 5123.)
            let names_it = ["fatal", "eio", "input/output error"]
                .iter()
                .any(|w| said.contains(w));
            if code.is_some_and(|c| c != 0) && !names_it {
                bad("the run failed after a device-fatal event without saying so".into());
            }
        }
        _ => {}
    }
}

/// What the summary says today without a ledger: its counts must not contradict each other.
fn today(sc: &Scenario, j: &Value, bad: &mut impl FnMut(String)) {
    match sc.tool {
        Tool::Pktgen => {
            if j.get("test").is_some() {
                return; // an RFC 2544 report: trials, not one run's counts
            }
            let tx = u(j, &["packets"]).or_else(|| u(j, &["tx", "packets"]));
            let rx = u(j, &["rx_packets"]).or_else(|| u(j, &["rx", "packets"]));
            let txrx = sc.args.iter().any(|a| a == "--txrx");
            if let (true, Some(tx), Some(rx)) = (txrx, tx, rx) {
                if rx > tx {
                    bad(format!("received {rx} > sent {tx} on a --txrx run"));
                }
            }
            // seq_stamped counts the stamped frames received; seq_lost the ones not seen.
            if let (Some(l), Some(tx)) = (u(j, &["seq_lost"]), tx) {
                if l > tx {
                    bad(format!("seq_lost {l} > sent {tx}"));
                }
            }
            if let (Some(st), Some(rx)) = (u(j, &["seq_stamped"]), rx) {
                if st > rx {
                    bad(format!("seq_stamped {st} > received {rx}"));
                }
            }
            if let (Some(fl), Some(tx), true) = (u(j, &["flows", "lost"]), tx, txrx) {
                if fl > tx {
                    bad(format!("flows.lost {fl} > sent {tx}"));
                }
                if let Some(sl) = u(j, &["seq_lost"]) {
                    if sc.args.iter().any(|a| a == "--seq") && sl != fl {
                        bad(format!(
                            "two loss figures disagree: flows.lost {fl}, seq_lost {sl}"
                        ));
                    }
                }
            }
            if let Some(i) = sc.args.iter().position(|a| a == "-n") {
                let n: u64 = sc.args[i + 1].parse().unwrap_or(u64::MAX);
                if let Some(tx) = tx {
                    if tx > n {
                        bad(format!("sent {tx} > the count asked, {n}"));
                    }
                }
            }
        }
        Tool::Lib => {}
        Tool::Fwd => {
            let Some(ports) = j.get("ports").and_then(Value::as_array) else {
                bad(format!("fwd's JSON has no ports: {j}"));
                return;
            };
            let rx: u64 = ports.iter().filter_map(|p| u(p, &["rx", "packets"])).sum();
            let fwd: u64 = ports
                .iter()
                .filter_map(|p| u(p, &["tx", "forwarded"]))
                .sum();
            if fwd > rx {
                bad(format!("forwarded {fwd} > received {rx}"));
            }
            if let Some(top) = u(j, &["forwarded"]) {
                if top != fwd {
                    bad(format!(
                        "forwarded {top} overall, {fwd} summed over the ports"
                    ));
                }
            }
        }
    }
}

/// Whether the scheduler, not the seed, decides which bucket a deterministic seed's frames
/// land in: in a `--txrx` run on the model, whether the receiving side keeps up (or is kept
/// off its CPU and finds its ring full: `rx_no_buffer`; or is still behind when the run stops:
/// `rx_unread`) depends on the load, at any rate. Seed 5414 (`--mtu 9000 -s 8000 -r max -n
/// 100000 --txrx`): 796 no-buffer drops in one run and none in the next, beside the same
/// builds; seed 9789 (the same frames at `-r 100kpps -n 1000`): 1000 received, then 517 and
/// 483 `rx_unread`, beside the final CI and two busy loops.
pub fn scheduler_decides(sc: &Scenario) -> bool {
    let has = |x: &str| sc.args.iter().any(|a| a == x);
    sc.tool == Tool::Pktgen && has("--txrx")
}

/// What must be equal between two runs of a deterministic seed: the ledger (where the
/// scheduler decides the buckets, see [`scheduler_decides`]: what was offered and that the
/// ledger closes, nothing unattributed and nothing counted twice), else the counts.
pub fn fingerprint(sc: &Scenario, out: &Outcome) -> Option<String> {
    let j = json_summary(out)?;
    if let Ok(Some((offered, b))) = ledger(&j) {
        if scheduler_decides(sc) {
            let named: u64 = b
                .iter()
                .filter(|(k, _)| k != "unattributed")
                .map(|x| x.1)
                .sum();
            let unattributed = b
                .iter()
                .find(|(k, _)| k == "unattributed")
                .map_or(0, |x| x.1);
            return Some(format!(
                "ledger offered {offered}, named {named}, unattributed {unattributed} (the \
                 buckets are the scheduler's: not compared)"
            ));
        }
        return Some(format!("ledger offered {offered} {b:?}"));
    }
    let f = |k: &str| j.get(k).map(|x| x.to_string()).unwrap_or_default();
    Some(format!(
        "no ledger; packets {} rx_packets {} drops {} seq_lost {}",
        f("packets"),
        f("rx_packets"),
        f("drops"),
        f("seq_lost")
    ))
}
