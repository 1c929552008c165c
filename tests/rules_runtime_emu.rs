//! Rules at run time on the emulated ConnectX, for `-b dv` and `-b verbs`: `Port::add_rule` /
//! `remove_rule` are `ibv_create_flow` / `ibv_destroy_flow` on the running port, served by the
//! emulator (emu/src/cmd/flow.rs) into the device model's flows. A rule added while a
//! sequenced flow runs (sent from queue 0 over the looped-back wire) takes every frame after
//! the switch to queue 1 and none before it; removing it gives the flow back; 1000 add/remove
//! cycles succeed with every flow destroyed and no descriptor left; bad handles are errors.
//!
//! The `inner_*` tests are the emulated NIC's application (run by the outer tests under
//! `scripts/emu.sh`, as in `tests/emu_dv.rs`).
#![cfg(all(feature = "mlx5", feature = "verbs"))]

mod support;

use std::time::{Duration, Instant};

use rawq::flow::Rule;
use rawq::{Backend, Error, Packet, Port, Queue};
use support::emu::serial;
use support::emu_dv::{inner_only, run_inner, seq_of, udp_frame};

const BACKEND_ENV: &str = "RAWQ_RULES_BACKEND";

fn rule(text: &str) -> Rule {
    text.parse().expect("rule")
}

fn open(rules: &[&str]) -> Port {
    let backend = match std::env::var(BACKEND_ENV).as_deref() {
        Ok("verbs") => Backend::Verbs {
            device: "mlx5_0".into(),
            port: 1,
        },
        _ => Backend::Dv {
            device: "mlx5_0".into(),
            port: 1,
        },
    };
    Port::builder(backend)
        .queues(2)
        .rx_ring(512)
        .tx_ring(512)
        .rules(rules.iter().map(|r| rule(r)))
        .open()
        .expect("open the port on the emulated mlx5_0")
}

/// Descriptors of devices, sockets, pipes and kernel objects (not of plain files: the
/// emulator's counters writer opens one now and then).
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .flatten()
        .filter(|e| {
            let t = std::fs::read_link(e.path()).unwrap_or_default();
            let t = t.to_string_lossy();
            !t.starts_with('/') || t.starts_with("/dev/")
        })
        .count()
}

fn drain(q: &mut Queue, got: &mut Vec<u32>, burst: &mut Vec<Packet>) {
    burst.clear();
    q.rx_burst(burst, 64);
    for p in burst.drain(..) {
        got.push(seq_of(&p).unwrap_or(u32::MAX));
    }
    q.reclaim();
}

#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_switch_while_the_flow_runs() {
    inner_only();
    let mut port = open(&["udp dst-port 9000 prio 10 -> queue 0"]);
    let mut qs = port.take_queues();
    let pool = port.pool().clone();
    const N: u32 = 6000;
    const ADD: u32 = 2000;
    const REMOVE: u32 = 4000;
    let (mut g0, mut g1, mut burst) = (Vec::new(), Vec::new(), Vec::with_capacity(64));
    let (mut next, mut handle, mut before) = (0u32, None, Vec::new());
    let end = Instant::now() + Duration::from_secs(60);
    while g0.len() + g1.len() < N as usize && Instant::now() < end {
        if next < N && (next as usize - g0.len() - g1.len()) < 128 {
            if next == ADD && handle.is_none() {
                before.push(g0.len() + g1.len());
                handle = Some(
                    port.add_rule(rule("udp src-port 1024 dst-port 9000 -> queue 1"))
                        .expect("add"),
                );
            }
            if next == REMOVE && before.len() == 1 {
                before.push(g0.len() + g1.len());
                port.remove_rule(handle.expect("added")).expect("remove");
            }
            let mut hi = (next + 16).min(N);
            for m in [ADD, REMOVE] {
                if next < m && hi > m {
                    hi = m;
                }
            }
            let mut v = Vec::new();
            for s in next..hi {
                let mut p = pool.alloc().expect("buffer");
                p.copy_from_slice(&udp_frame(s, 64)).expect("fits");
                v.push(p);
            }
            next += qs[0].tx_burst(&mut v) as u32;
        }
        let (a, b) = qs.split_at_mut(1);
        drain(&mut a[0], &mut g0, &mut burst);
        drain(&mut b[0], &mut g1, &mut burst);
    }
    assert_eq!(g0.len() + g1.len(), N as usize, "every frame arrives once");
    let a = *g1.first().expect("the added rule took frames");
    let b = a + g1.len() as u32;
    assert_eq!(g1, (a..b).collect::<Vec<_>>(), "queue 1: one run, in order");
    assert_eq!(
        g0,
        (0..a).chain(b..N).collect::<Vec<_>>(),
        "queue 0: the rest"
    );
    eprintln!("RESULT switch at {a} (add at {ADD}, {} received before), back at {b} (remove at {REMOVE}, {} received before)", before[0], before[1]);
    assert!(a as usize >= before[0] && a <= ADD, "switch at {a}");
    assert!(b as usize >= before[1] && b <= REMOVE, "switch back at {b}");
}

#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_cycles_and_bad_handles() {
    inner_only();
    let mut a = open(&["udp dst-port 7777 -> queue 0"]);
    let files = fds();
    for i in 0..1000u32 {
        let h = a
            .add_rule(rule(&format!(
                "udp dst-port {} -> queue {}",
                9000 + i % 100,
                i % 2
            )))
            .expect("add");
        // The emulator answered ibv_destroy_flow with success: the flow is gone from its
        // object table and from the device model.
        a.remove_rule(h).expect("remove");
    }
    assert_eq!(fds(), files, "file descriptors over 1000 cycles");
    assert_eq!(a.rules().len(), 1);
    // No flow of the cycles is left on the device: the flow they matched (UDP to 9000) goes
    // to the kernel, no queue gets a frame of it.
    let mut qs = a.take_queues();
    assert_eq!(
        send_receive(&a, &mut qs, 0..50, 0),
        Vec::<u32>::new(),
        "a flow was left"
    );
    drop(qs);

    let mut b = open(&["udp dst-port 7778 -> queue 0"]);
    let h = a
        .add_rule(rule("udp dst-port 9000 -> queue 1"))
        .expect("add");
    assert_eq!(
        a.rule_hits(h).expect("hits"),
        None,
        "no per-flow counters on mlx5 verbs"
    );
    match b.remove_rule(h) {
        Err(Error::RuleHandle(m)) => assert!(m.contains("another port"), "{m}"),
        other => panic!("foreign handle: {other:?}"),
    }
    a.remove_rule(h).expect("remove");
    match a.remove_rule(h) {
        Err(Error::RuleHandle(m)) => assert!(m.contains("already removed"), "{m}"),
        other => panic!("second removal: {other:?}"),
    }
    let e = a
        .add_rule(rule("udp dst-port 9000 -> queue 2"))
        .expect_err("queue 2 of 2");
    assert!(matches!(e, Error::Rule(_)), "{e:?}");
}

/// Sends `seqs` from queue 0 and receives on both queues until `want` frames came back or
/// a quiet second passed; returns the seqs received.
fn send_receive(
    port: &Port,
    qs: &mut [Queue],
    seqs: std::ops::Range<u32>,
    want: usize,
) -> Vec<u32> {
    let pool = port.pool().clone();
    let mut v: Vec<Packet> = seqs
        .map(|s| {
            let mut p = pool.alloc().expect("buffer");
            p.copy_from_slice(&udp_frame(s, 64)).expect("fits");
            p
        })
        .collect();
    let (mut got, mut burst) = (Vec::new(), Vec::with_capacity(64));
    let end = Instant::now() + Duration::from_secs(20);
    let mut quiet = Instant::now();
    while Instant::now() < end && (got.len() < want || quiet.elapsed() < Duration::from_secs(1)) {
        if !v.is_empty() {
            qs[0].tx_burst(&mut v);
        }
        let n = got.len();
        for q in qs.iter_mut() {
            drain(q, &mut got, &mut burst);
        }
        if got.len() != n || !v.is_empty() {
            quiet = Instant::now();
        }
    }
    got
}

/// The device model counts what goes to the kernel (`rx_to_kernel`): 100 frames before the
/// rule, 100 after its removal; the 100 in between reach queue 1.
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_removal_returns_the_flow_to_the_kernel() {
    inner_only();
    let mut port = open(&["udp dst-port 7777 -> queue 0"]);
    let mut qs = port.take_queues();
    assert!(send_receive(&port, &mut qs, 0..100, 0).is_empty());
    let h = port
        .add_rule(rule("udp dst-port 9000 -> queue 1"))
        .expect("add");
    assert_eq!(
        send_receive(&port, &mut qs, 100..200, 100),
        (100..200).collect::<Vec<_>>()
    );
    port.remove_rule(h).expect("remove");
    assert!(send_receive(&port, &mut qs, 200..300, 0).is_empty());
}

fn outer(inner: &str, backend: &str) -> std::path::PathBuf {
    let _one = serial();
    let (out, stats) = run_inner(inner, &[], &[(BACKEND_ENV, backend)]);
    let all = support::emu::text(&out);
    if let Some(l) = all.lines().find(|l| l.starts_with("RESULT")) {
        eprintln!("{backend}: {l}");
    }
    stats
}

#[test]
fn dv_removing_a_rule_returns_its_flow_to_the_kernel() {
    let stats = outer("inner_removal_returns_the_flow_to_the_kernel", "dv");
    assert_eq!(
        support::emu::last_counter(&stats, "rx_to_kernel"),
        Some(200)
    );
}

#[test]
fn verbs_removing_a_rule_returns_its_flow_to_the_kernel() {
    let stats = outer("inner_removal_returns_the_flow_to_the_kernel", "verbs");
    assert_eq!(
        support::emu::last_counter(&stats, "rx_to_kernel"),
        Some(200)
    );
}

#[test]
fn dv_rule_added_while_a_flow_runs_takes_it_cleanly_and_gives_it_back() {
    outer("inner_switch_while_the_flow_runs", "dv");
}

#[test]
fn verbs_rule_added_while_a_flow_runs_takes_it_cleanly_and_gives_it_back() {
    outer("inner_switch_while_the_flow_runs", "verbs");
}

#[test]
fn dv_thousand_rule_cycles_and_bad_handles() {
    outer("inner_cycles_and_bad_handles", "dv");
}

#[test]
fn verbs_thousand_rule_cycles_and_bad_handles() {
    outer("inner_cycles_and_bad_handles", "verbs");
}
