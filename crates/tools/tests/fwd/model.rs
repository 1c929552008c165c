//! rawq-fwd on the software mlx5 device (`-b model`, a looped-back port): `--tx-first`
//! starts the traffic with no outside sender, `--queues 2` spreads it over two queue pairs,
//! and every count adds up exactly. Also the option errors (issue 20 item 7).
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::process::{Command, Output};

use serde_json::Value;

/// The model runs a device thread beside fwd's: on a two-core machine these runs must not
/// overlap (the binary's lock, [`crate::serial`]).
fn fwd(args: &[&str]) -> Output {
    let _serial = crate::serial();
    Command::new(support::example("fwd"))
        .args([
            "-b",
            "model",
            "-d",
            "m",
            "--rule",
            "udp dst-port 9000 -> queue 0",
        ])
        .args(args)
        .output()
        .expect("run fwd")
}

fn json(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "fwd: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// `--tx-first 256 --queues 2` on a looped-back port: the 256 frames go round through both
/// queue pairs (RSS over their 256 flows) until the end; every frame received was forwarded,
/// nothing was lost on the way, and what was sent but not received is at most the 256 in flight.
/// At the end some of the 256 may still sit in a send queue the device has not served (a
/// loaded machine starves the model's thread): closing the queue counts those as not sent at
/// the close (`tx_unsent_at_close`: the model's stop says it never sent them), so every frame
/// received was either sent on or not sent at close, never both, never neither.
#[test]
fn tx_first_goes_round_two_queues_and_every_count_adds_up() {
    let o = fwd(&[
        "--queues",
        "2",
        "--tx-first",
        "256",
        "-t",
        "2",
        "--quiet",
        "--json",
    ]);
    let v = json(&o);
    let p = &v["ports"][0];
    let (rx, tx) = (u(&p["rx"]["packets"]), u(&p["tx"]["packets"]));
    assert_eq!(u(&p["tx"]["tx_first"]), 256, "{v}");
    let fwd = u(&p["tx"]["forwarded"]);
    assert!(fwd > 256, "the frames went round more than once: {v}");
    let closed = u(&p["drops"]["tx_drops"]) + u(&p["drops"]["tx_unsent_at_close"]);
    assert!(
        closed <= 256,
        "only frames in flight can be dropped at close: {v}"
    );
    assert_eq!(
        rx,
        fwd + closed,
        "io: every frame received is forwarded (sent, or dropped at close): {v}"
    );
    assert_eq!(tx, fwd + 256, "{v}");
    assert!(tx - rx <= 256, "at most the 256 frames in flight: {v}");
    for q in p["rx"]["per_queue"].as_array().unwrap() {
        assert!(u(q) > 0, "each queue pair received: {v}");
    }
    for q in p["tx"]["per_queue"].as_array().unwrap() {
        assert!(u(q) > 0, "each queue pair sent: {v}");
    }
    let d = &p["drops"];
    for k in [
        "rx_ring_or_fill",
        "rx_errors",
        "tx_ring_full",
        "tx_errors",
        "tx_not_sent",
    ] {
        assert_eq!(u(&d[k]), 0, "{k}: {v}");
    }
    for k in ["wire_drops", "rx_no_buffer", "rx_unmatched"] {
        assert_eq!(u(&d["device"][k]), 0, "{k}: {v}");
    }
    assert_eq!(u(&v["forwarded"]), fwd, "{v}");
}

/// `--mode rxonly` counts and drops: the 64 `--tx-first` frames come back once and go no
/// further.
#[test]
fn rxonly_counts_and_drops() {
    let o = fwd(&[
        "--mode",
        "rxonly",
        "--tx-first",
        "64",
        "-t",
        "1",
        "--quiet",
        "--json",
    ]);
    let v = json(&o);
    let p = &v["ports"][0];
    assert_eq!(u(&p["tx"]["packets"]), 64, "{v}");
    assert_eq!(u(&p["rx"]["packets"]), 64, "{v}");
    assert_eq!(u(&p["drops"]["rxonly"]), 64, "{v}");
    assert_eq!(u(&p["tx"]["forwarded"]), 0, "{v}");
}

/// Issue 20 item 7: `--ring 8` (the documented minimum) works with the default burst, which
/// used to stay 32 and fail ("--burst 32 is above --ring 8").
#[test]
fn ring_8_works_with_the_default_burst() {
    let o = fwd(&[
        "--ring",
        "8",
        "--tx-first",
        "8",
        "-t",
        "1",
        "--quiet",
        "--json",
    ]);
    let v = json(&o);
    assert!(u(&v["forwarded"]) > 0, "{v}");
}

/// Issue 20 item 7: errors name the option the user typed, not the library's fields
/// (`rx_ring = 65536`) or types (`Backend::Xdp`, in the error of a machine without RDMA).
#[test]
fn errors_name_the_options_typed() {
    for (args, want, not) in [
        (&["--ring", "65536"][..], "--ring 65536", "rx_ring"),
        (&["--queues", "2", "--cores", "0"][..], "--cores", "cores ="),
        (&["--queues", "0"][..], "--queues 0", "queues ="),
    ] {
        let o = fwd(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {err}");
        assert!(err.contains(want) && !err.contains(not), "{args:?}: {err}");
    }
}

/// `--json-lines`: one object per `--stats-period` with each port's rx/tx rates and drops, then
/// the summary as the last line; the live text lines go to stderr.
#[test]
fn json_lines_stream_per_period_then_the_summary() {
    let o = fwd(&[
        "--tx-first",
        "64",
        "-t",
        "2",
        "--stats-period",
        "0.5",
        "--json-lines",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 3, "periodic lines and the summary: {text}");
    let (last, periodic) = lines.split_last().unwrap();
    assert!(last["forwarded"].as_u64().is_some(), "{last}");
    for l in periodic {
        let p = &l["ports"][0];
        assert!(p["rx"]["pps"].as_f64().is_some(), "{l}");
        assert!(p["tx"]["gbps"].as_f64().is_some(), "{l}");
        assert!(p["drops"]["tx_ring_full"].as_u64().is_some(), "{l}");
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("fwd: port 0 m: rx "), "the live line: {err}");
}

/// Issue 20 item 7: on a machine without the RDMA device, `-b dv` fails naming `-b xdp`, not
/// the library's `Backend::Xdp`.
#[test]
fn no_rdma_device_names_the_backend_option() {
    let _serial = crate::serial();
    let o = Command::new(support::example("fwd"))
        .args(["-b", "dv", "-d", "rawq-no-such-dev", "-t", "1"])
        .args(["--rule", "udp dst-port 9000 -> queue 0"])
        .output()
        .expect("run fwd");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(!err.contains("Backend::"), "{err}");
}

/// Issue 32 (the campaign's seed 9787 ran on 15 s past its end): fwd waited for its forwarding
/// threads with no bound, and took no second signal, so a thread that never ended kept fwd
/// running for ever whatever it was sent. A forwarding thread that never ends
/// (`RAWQ_FWD_FAULT=queue-thread-stall:0`, a test hook): one SIGTERM ends fwd within its stop
/// bound (15 s), status 1, the thread named.
#[test]
fn one_signal_ends_a_run_whose_forwarding_thread_is_stuck() {
    let _serial = crate::serial();
    let mut c = Command::new(support::example("fwd"));
    c.args([
        "-b",
        "model",
        "-d",
        "m",
        "--rule",
        "udp dst-port 9000 -> queue 0",
    ])
    .args(["--queues", "2", "--quiet"])
    .env("RAWQ_FWD_FAULT", "queue-thread-stall:0");
    let mut run = support::run::Run::spawn(&mut c);
    assert!(
        run.wait_for_stderr("queue pair(s))", std::time::Duration::from_secs(30)),
        "fwd did not open its port: {}",
        run.stderr()
    );
    run.signal(libc::SIGTERM).expect("SIGTERM to fwd");
    let t = std::time::Instant::now();
    let o = run
        .try_finish(std::time::Duration::from_secs(40))
        .unwrap_or_else(|o| {
            panic!(
                "fwd still running 40 s after SIGTERM: {}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("forwarding thread(s) [0] did not end within 15 s of the stop"),
        "{err}"
    );
    assert!(t.elapsed() >= std::time::Duration::from_secs(14), "{err}");
}
