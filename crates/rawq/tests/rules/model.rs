//! Rules at run time on the mlx5 device model (`Backend::Model`, a looped wire): a rule added
//! while a sequenced flow runs takes every frame after the switch and none before it; removing
//! it gives the flow back; add/remove cycles leak no device flow or TIR; bad handles are errors.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::time::{Duration, Instant};

use rawq::dv::model::ModelOptions;
use rawq::flow::Rule;
use rawq::{Backend, Error, Packet, Port, Queue};

use support::emu_dv::{seq_of, udp_frame};

fn rule(text: &str) -> Rule {
    text.parse().expect("rule")
}

fn model_port(rules: &[&str]) -> Port {
    Port::builder(Backend::Model(ModelOptions::default()))
        .queues(2)
        .rx_ring(256)
        .tx_ring(256)
        .rules(rules.iter().map(|r| rule(r)))
        .open()
        .expect("model port")
}

/// Held by every test of this file (the binary's lock, held by every test in it): the leak test
/// counts the process's fds, which a port another test opens or closes meanwhile would change
/// (it failed about one run in three).
use crate::serial;

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("fds").count()
}

/// Receives what queue `q` has, appending sequence numbers (frames without one: `u32::MAX`).
fn drain(q: &mut Queue, got: &mut Vec<u32>, burst: &mut Vec<Packet>) -> usize {
    burst.clear();
    let n = q.rx_burst(burst, 64);
    for p in burst.drain(..) {
        got.push(seq_of(&p).unwrap_or(u32::MAX));
    }
    q.reclaim();
    n
}

/// Sends frames `0..n` from queue 0, keeping at most 128 in flight, while receiving on both
/// queues; calls `at(k, port)` when frame `k` is about to be sent (`k` in `marks`). Returns
/// the sequence numbers each queue received, in order, and, for each mark, how many frames had
/// been received when it fired.
fn run_flow(
    port: &mut Port,
    qs: &mut [Queue],
    n: u32,
    marks: &[u32],
    mut at: impl FnMut(u32, &mut Port),
) -> (Vec<u32>, Vec<u32>, Vec<usize>) {
    let pool = port.pool().clone();
    let (mut g0, mut g1) = (Vec::new(), Vec::new());
    let mut burst = Vec::with_capacity(64);
    let mut before = Vec::new();
    let mut next = 0u32;
    let end = Instant::now() + Duration::from_secs(60);
    while (g0.len() + g1.len()) < n as usize && Instant::now() < end {
        let inflight = next as usize - (g0.len() + g1.len());
        if next < n && inflight < 128 {
            let mut hi = (next + 16).min(n);
            if let Some(&m) = marks.iter().find(|&&m| m > next && m < hi) {
                hi = m;
            }
            if marks.contains(&next) && before.len() < marks.iter().filter(|&&m| m <= next).count()
            {
                before.push(g0.len() + g1.len());
                at(next, port);
            }
            let mut v = Vec::new();
            for s in next..hi {
                let mut p = pool.alloc().expect("buffer");
                p.copy_from_slice(&udp_frame(s, 64)).expect("fits");
                v.push(p);
            }
            let sent = qs[0].tx_burst(&mut v);
            next += sent as u32;
        }
        let (a, b) = qs.split_at_mut(1);
        drain(&mut a[0], &mut g0, &mut burst);
        drain(&mut b[0], &mut g1, &mut burst);
        a[0].reclaim();
    }
    (g0, g1, before)
}

#[test]
fn a_rule_added_and_removed_while_a_flow_runs_switches_it_cleanly() {
    let _serial = serial();
    // The base rule plays the rest of the world (the flow's frames reach queue 0); the rule
    // added at run time wins by priority and takes them to queue 1.
    let mut port = model_port(&["udp dst-port 9000 prio 10 -> queue 0"]);
    let mut qs = port.take_queues();
    const N: u32 = 6000;
    const ADD: u32 = 2000;
    const REMOVE: u32 = 4000;
    let mut handle = None;
    let (g0, g1, before) = run_flow(&mut port, &mut qs, N, &[ADD, REMOVE], |k, port| {
        if k == ADD {
            handle = Some(
                port.add_rule(rule("udp src-port 1024 dst-port 9000 -> queue 1"))
                    .expect("add"),
            );
        } else {
            port.remove_rule(handle.expect("added")).expect("remove");
        }
    });
    assert_eq!(g0.len() + g1.len(), N as usize, "every frame arrives once");
    // Queue 1 has one unbroken run [a, b); queue 0 everything else, in order.
    let a = *g1.first().expect("the added rule took frames");
    let b = a + g1.len() as u32;
    assert_eq!(g1, (a..b).collect::<Vec<_>>(), "queue 1: one run, in order");
    let want0: Vec<u32> = (0..a).chain(b..N).collect();
    assert_eq!(
        g0, want0,
        "queue 0: the frames before the switch and after the removal"
    );
    // The switches happened where the rule calls were: no frame sent after the add reached
    // queue 0 before the removal, no frame received before it reached queue 1.
    assert!(
        a as usize >= before[0] && a <= ADD,
        "switch at {a}, add at {ADD}, {} received before",
        before[0]
    );
    assert!(
        b as usize >= before[1] && b <= REMOVE,
        "switch back at {b}, removal at {REMOVE}, {} received before",
        before[1]
    );
    let c = port.model_counters().expect("model");
    assert_eq!(c.rx_to_kernel, 0, "{c:?}");
}

#[test]
fn removing_a_rule_returns_its_flow_to_the_kernel() {
    let _serial = serial();
    let mut port = model_port(&["udp dst-port 7777 -> queue 0"]);
    let mut qs = port.take_queues();
    let kernel = |p: &Port| p.model_counters().expect("model").rx_to_kernel;
    let send_and_wait = |port: &Port, qs: &mut [Queue], seqs: std::ops::Range<u32>| {
        let pool = port.pool().clone();
        let (k0, mut got) = (kernel(port), Vec::new());
        let mut v: Vec<Packet> = seqs
            .clone()
            .map(|s| {
                let mut p = pool.alloc().expect("buffer");
                p.copy_from_slice(&udp_frame(s, 64)).expect("fits");
                p
            })
            .collect();
        let mut left = v.len();
        let end = Instant::now() + Duration::from_secs(20);
        while left > 0 && Instant::now() < end {
            left -= qs[0].tx_burst(&mut v);
            qs[0].reclaim();
        }
        let mut burst = Vec::new();
        while (got.len() as u64 + kernel(port) - k0) < seqs.len() as u64 && Instant::now() < end {
            for q in qs.iter_mut() {
                drain(q, &mut got, &mut burst);
            }
        }
        (kernel(port) - k0, got)
    };
    let (k, got) = send_and_wait(&port, &mut qs, 0..100);
    assert_eq!((k, got.len()), (100, 0), "no rule: the kernel");
    let h = port
        .add_rule(rule("udp dst-port 9000 -> queue 1"))
        .expect("add");
    let (k, got) = send_and_wait(&port, &mut qs, 100..200);
    assert_eq!(k, 0);
    assert_eq!(got, (100..200).collect::<Vec<_>>());
    port.remove_rule(h).expect("remove");
    let (k, got) = send_and_wait(&port, &mut qs, 200..300);
    assert_eq!((k, got.len()), (100, 0), "removed: the kernel again");
}

#[test]
fn a_thousand_add_remove_cycles_leak_no_device_object() {
    let _serial = serial();
    let mut port = model_port(&["udp dst-port 7777 -> queue 0"]);
    let hw = port.model_port().expect("model").hw().clone();
    let (objs, files) = (hw.flow_and_tir_count(), fds());
    for i in 0..1000u32 {
        let r = rule(&format!(
            "udp dst-port {} -> queue {}",
            9000 + (i % 100),
            i % 2
        ));
        let h = port.add_rule(r).expect("add");
        assert_eq!(hw.flow_and_tir_count(), (objs.0 + 1, objs.1 + 1));
        port.remove_rule(h).expect("remove");
    }
    assert_eq!(hw.flow_and_tir_count(), objs, "flows and TIRs");
    assert_eq!(fds(), files, "file descriptors");
    assert_eq!(port.rules().len(), 1, "the rule given at open stays");
}

#[test]
fn bad_handles_and_bad_rules_are_errors() {
    let _serial = serial();
    let mut a = model_port(&["udp dst-port 7777 -> queue 0"]);
    let mut b = model_port(&["udp dst-port 7777 -> queue 0"]);
    let h = a
        .add_rule(rule("udp dst-port 9000 -> queue 1"))
        .expect("add");
    match b.remove_rule(h) {
        Err(Error::RuleHandle(m)) => assert!(m.contains("another port"), "{m}"),
        other => panic!("foreign handle: {other:?}"),
    }
    assert_eq!(
        a.rule_hits(h).expect("hits"),
        Some(0),
        "the model counts per rule; nothing was sent"
    );
    a.remove_rule(h).expect("remove");
    match a.remove_rule(h) {
        Err(Error::RuleHandle(m)) => assert!(m.contains("already removed"), "{m}"),
        other => panic!("second removal: {other:?}"),
    }
    assert!(matches!(a.rule_hits(h), Err(Error::RuleHandle(_))));
    // As at open: a queue the port lacks.
    let e = a
        .add_rule(rule("udp dst-port 9000 -> queue 5"))
        .expect_err("queue 5 of 2");
    assert!(matches!(e, Error::Rule(_)), "{e:?}");
    // As at open: a rule that would share a flow-table entry with an installed one (the kernel
    // answers the second ibv_create_flow with EEXIST: rawq::flow::order::check_collisions).
    let e = a
        .add_rule(rule("udp dst-port 7777 -> queue 1"))
        .expect_err("the same match at the same priority as the rule given at open");
    assert!(matches!(e, Error::Rule(_)), "{e:?}");
    assert_eq!(a.rules().len(), 1, "the refused rule is not installed");
    let (open_handle, _) = a.rules()[0];
    a.remove_rule(open_handle)
        .expect("a rule given at open can go too");
    assert!(a.rules().is_empty());
}
