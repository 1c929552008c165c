//! Rules at run time on the emulated ConnectX, for `-b dv` and `-b verbs`: `Port::add_rule` /
//! `remove_rule` are `ibv_create_flow` / `ibv_destroy_flow` on the running port, served by the
//! emulator (emu/src/cmd/flow.rs) into the device model's flows. A rule added while a
//! sequenced flow runs (sent from queue 0 over the looped-back wire) takes every frame after
//! the switch to queue 1 and none before it; removing it gives the flow back; 1000 add/remove
//! cycles succeed with every flow destroyed and no descriptor left; bad handles are errors.
//!
//! The `inner_*` tests are the emulated NIC's application (run by the outer tests under
//! `scripts/emu.sh`, as in `tests/emu/dv.rs`).
#![cfg(all(feature = "mlx5", feature = "verbs"))]

use rawq_testkit as support;

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
    assert_eq!(
        emulated_counters_objects(1),
        1,
        "counters objects alive on the emulated NIC: the open rule's alone"
    );
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
        Some(0),
        "a new rule's flow counter, nothing sent"
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

/// The emulator's count of live `ibv_counters` objects (`counters_objects` in the stats line
/// it rewrites twice a second at `$RAWQ_EMU_STATS`), once it reads `want` or after 10 s.
fn emulated_counters_objects(want: u64) -> u64 {
    let path = std::env::var("RAWQ_EMU_STATS").expect("RAWQ_EMU_STATS set by scripts/emu.sh");
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let now = support::emu::last_counter(std::path::Path::new(&path), "counters_objects");
        if now == Some(want) || Instant::now() > end {
            return now.unwrap_or(u64::MAX);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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

/// A UDP frame of sequence `seq` to `port`.
fn udp_to(seq: u32, port: u16) -> Vec<u8> {
    let mut f = udp_frame(seq, 64);
    f[36..38].copy_from_slice(&port.to_be_bytes());
    f
}

/// Per-rule hit counters (`ibv_counters` bound by `IBV_FLOW_SPEC_ACTION_COUNT`, read with
/// `ibv_read_counters`): two rules given at open, a queue rule and a drop rule added at run
/// time; each rule's hits equal what its queue received (or, for the drop rule, what was sent
/// to it); frames to a port no rule names count for none; a rule removed and added again
/// counts from zero.
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_rule_hits_equal_what_each_rule_took() {
    inner_only();
    let mut port = open(&[
        "udp dst-port 9001 -> queue 0",
        "udp dst-port 9002 -> queue 1",
    ]);
    let mut qs = port.take_queues();
    let given = port.rules();
    let (r1, r2) = (given[0].0, given[1].0);
    let r3 = port
        .add_rule(rule("udp dst-port 9003 -> queue 1"))
        .expect("add");
    let r4 = port
        .add_rule(rule("udp dst-port 9004 -> drop"))
        .expect("add");
    for r in [r1, r2, r3, r4] {
        assert_eq!(
            port.rule_hits(r).expect("hits"),
            Some(0),
            "nothing sent yet"
        );
    }
    // Per destination port, how many frames (9006: no rule, to the kernel).
    let plan: [(u16, u32); 5] = [(9001, 60), (9002, 40), (9003, 30), (9004, 25), (9006, 15)];
    let mut frames = Vec::new();
    for round in 0..60 {
        for &(p, n) in &plan {
            if round < n {
                frames.push(udp_to(frames.len() as u32, p));
            }
        }
    }
    let by_seq: Vec<u16> = frames
        .iter()
        .map(|f| u16::from_be_bytes([f[36], f[37]]))
        .collect();
    let (q0, q1) = send_counted(&port, &mut qs, &frames, 130);
    let port_of = |s: &u32| by_seq.get(*s as usize).copied().unwrap_or(0);
    assert!(q0.iter().all(|s| port_of(s) == 9001), "queue 0: {q0:?}");
    assert!(
        q1.iter().all(|s| matches!(port_of(s), 9002 | 9003)),
        "queue 1: {q1:?}"
    );
    let on = |q: &[u32], p: u16| q.iter().filter(|s| port_of(s) == p).count() as u64;
    let hits: Vec<Option<u64>> = [r1, r2, r3, r4]
        .iter()
        .map(|&r| port.rule_hits(r).expect("hits"))
        .collect();
    eprintln!("RESULT hits {hits:?}, received {} + {}", q0.len(), q1.len());
    assert_eq!(hits[0], Some(on(&q0, 9001)), "rule 1 = queue 0's frames");
    assert_eq!(
        hits[1],
        Some(on(&q1, 9002)),
        "rule 2 = queue 1's frames to 9002"
    );
    assert_eq!(
        hits[2],
        Some(on(&q1, 9003)),
        "rule 3 = queue 1's frames to 9003"
    );
    assert_eq!(
        (hits[0], hits[1], hits[2]),
        (Some(60), Some(40), Some(30)),
        "every frame arrived"
    );
    assert_eq!(hits[3], Some(25), "the drop rule counts what it dropped");
    // Removed and added again: a new flow, a new counter, from zero.
    port.remove_rule(r3).expect("remove");
    let r3b = port
        .add_rule(rule("udp dst-port 9003 -> queue 1"))
        .expect("add again");
    assert_eq!(port.rule_hits(r3b).expect("hits"), Some(0));
    let again: Vec<Vec<u8>> = (0..7).map(|i| udp_to(1000 + i, 9003)).collect();
    let (a0, a1) = send_counted(&port, &mut qs, &again, 7);
    assert_eq!((a0.len(), a1.len()), (0, 7));
    assert_eq!(port.rule_hits(r3b).expect("hits"), Some(7));
    assert_eq!(port.rule_hits(r1).expect("hits"), Some(60), "unchanged");
}

/// An RSS rule that leaves the IP version open is several flows (one per version spread and
/// one for the rest, `rss_parts`), all counting into the rule's one counters object: its hits
/// are every frame the rule took, on whichever queue.
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_rss_rule_hits_count_all_its_flows() {
    inner_only();
    let mut port = open(&["udp dst-port 9001 -> rss 0,1"]);
    let mut qs = port.take_queues();
    let r = port.rules()[0].0;
    let frames: Vec<Vec<u8>> = (0..40)
        .map(|i| {
            let mut f = udp_to(i, 9001);
            // Source ports that spread over both queues.
            f[34..36].copy_from_slice(&(1024 + i as u16).to_be_bytes());
            f
        })
        .collect();
    let (a0, a1) = send_counted(&port, &mut qs, &frames, 40);
    eprintln!("RESULT rss: {} + {} received", a0.len(), a1.len());
    assert_eq!(a0.len() + a1.len(), 40);
    assert_eq!(port.rule_hits(r).expect("hits"), Some(40));
}

/// A device without flow counters (the emulator run with `RAWQ_EMU_FLOW_COUNTERS=off`:
/// `ibv_create_counters` fails with EPROTONOSUPPORT): rules are installed without, steer as
/// before, and `rule_hits` is `None`, never a made-up number.
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_no_flow_counters_means_no_hits() {
    inner_only();
    let mut port = open(&["udp dst-port 9001 -> queue 0"]);
    let mut qs = port.take_queues();
    let r1 = port.rules()[0].0;
    let r2 = port
        .add_rule(rule("udp dst-port 9003 -> queue 1"))
        .expect("add without counters");
    let frames: Vec<Vec<u8>> = (0..10).map(|i| udp_to(i, 9003)).collect();
    let (a0, a1) = send_counted(&port, &mut qs, &frames, 10);
    assert_eq!((a0.len(), a1.len()), (0, 10), "the added rule steers");
    assert_eq!(port.rule_hits(r1).expect("hits"), None);
    assert_eq!(port.rule_hits(r2).expect("hits"), None);
    port.remove_rule(r2).expect("remove");
}

/// Sends `frames` from queue 0 and receives on both queues until `want` frames came back or a
/// quiet second passed; the seqs each queue received.
fn send_counted(
    port: &Port,
    qs: &mut [Queue],
    frames: &[Vec<u8>],
    want: usize,
) -> (Vec<u32>, Vec<u32>) {
    let pool = port.pool().clone();
    let mut v: Vec<Packet> = frames
        .iter()
        .map(|f| {
            let mut p = pool.alloc().expect("buffer");
            p.copy_from_slice(f).expect("fits");
            p
        })
        .collect();
    let (mut g0, mut g1, mut burst): (_, _, Vec<Packet>) =
        (Vec::new(), Vec::new(), Vec::with_capacity(64));
    let end = Instant::now() + Duration::from_secs(20);
    let mut quiet = Instant::now();
    while Instant::now() < end
        && (g0.len() + g1.len() < want || quiet.elapsed() < Duration::from_secs(1))
    {
        if !v.is_empty() {
            qs[0].tx_burst(&mut v);
        }
        let n = g0.len() + g1.len();
        for (q, got) in qs.iter_mut().zip([&mut g0, &mut g1]) {
            burst.clear();
            q.rx_burst(&mut burst, 64);
            for p in burst.drain(..) {
                // The sequence number after the UDP header, whatever the destination port.
                let d = p.to_vec();
                got.push(
                    d.get(42..46)
                        .map_or(u32::MAX, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                );
            }
            q.reclaim();
        }
        if g0.len() + g1.len() != n || !v.is_empty() {
            quiet = Instant::now();
        }
    }
    (g0, g1)
}

fn outer(inner: &str, backend: &str) -> std::path::PathBuf {
    outer_env(inner, backend, &[])
}

fn outer_env(inner: &str, backend: &str, env: &[(&str, &str)]) -> std::path::PathBuf {
    let _one = serial();
    let mut env = env.to_vec();
    env.push((BACKEND_ENV, backend));
    let (out, stats) = run_inner(&support::test_name(module_path!(), inner), &[], &env);
    let all = support::emu::text(&out);
    if let Some(l) = all.lines().find(|l| l.starts_with("RESULT")) {
        eprintln!("{backend}: {l}");
    }
    // The dv and verbs runs of one inner test share its stats path: keep this one's counters
    // apart before the next run (which may start once the lock is released) clears it.
    let own = stats.with_extension(format!("stats.{backend}"));
    std::fs::copy(&stats, &own).expect("copy the emulator's stats");
    own
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

/// 1000 add/remove cycles, each rule with its counters object: rawq destroyed every object it
/// made (the emulator counts those the close of the file had to destroy).
#[test]
fn dv_thousand_rule_cycles_and_bad_handles() {
    let stats = outer("inner_cycles_and_bad_handles", "dv");
    assert_eq!(
        support::emu::last_counter(&stats, "counters_left_at_close"),
        Some(0)
    );
}

#[test]
fn verbs_thousand_rule_cycles_and_bad_handles() {
    let stats = outer("inner_cycles_and_bad_handles", "verbs");
    assert_eq!(
        support::emu::last_counter(&stats, "counters_left_at_close"),
        Some(0)
    );
}

#[test]
fn dv_per_rule_hits_equal_what_each_rule_took() {
    outer("inner_rule_hits_equal_what_each_rule_took", "dv");
}

#[test]
fn verbs_per_rule_hits_equal_what_each_rule_took() {
    outer("inner_rule_hits_equal_what_each_rule_took", "verbs");
}

#[test]
fn dv_without_flow_counters_rule_hits_is_none() {
    outer_env(
        "inner_no_flow_counters_means_no_hits",
        "dv",
        &[("RAWQ_EMU_FLOW_COUNTERS", "off")],
    );
}

#[test]
fn verbs_without_flow_counters_rule_hits_is_none() {
    outer_env(
        "inner_no_flow_counters_means_no_hits",
        "verbs",
        &[("RAWQ_EMU_FLOW_COUNTERS", "off")],
    );
}

#[test]
fn dv_rss_rule_hits_count_all_its_flows() {
    outer("inner_rss_rule_hits_count_all_its_flows", "dv");
}

#[test]
fn verbs_rss_rule_hits_count_all_its_flows() {
    outer("inner_rss_rule_hits_count_all_its_flows", "verbs");
}
