//! Per-rule hit counters on the mlx5 device model (`Backend::Model`, a looped wire):
//! `Port::rule_hits` reads each rule's device flow counter; each equals what the rule's queue
//! received, or what a drop rule dropped. (Its own file: `rules_runtime_model.rs` counts the
//! process's fds, which another test's port would disturb.)
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::time::{Duration, Instant};

use rawq::dv::model::ModelOptions;
use rawq::flow::Rule;
use rawq::{Backend, Error, Port};

use support::emu_dv::udp_frame;

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

/// A UDP frame of sequence `seq` to `port` (the flow's frames with another destination port).
fn udp_to(seq: u32, port: u16) -> Vec<u8> {
    let mut f = udp_frame(seq, 64);
    f[36..38].copy_from_slice(&port.to_be_bytes());
    f
}

#[test]
fn per_rule_hits_equal_what_each_rule_took_a_drop_rule_included() {
    // Two rules given at open, a queue rule and a drop rule added at run time; frames to a
    // port no rule names go to the kernel and count for no rule.
    let mut port = model_port(&[
        "udp dst-port 9001 -> queue 0",
        "udp dst-port 9002 -> queue 1",
    ]);
    let mut qs = port.take_queues();
    let open = port.rules();
    let (r1, r2) = (open[0].0, open[1].0);
    let r3 = port
        .add_rule(rule("udp dst-port 9003 -> queue 1"))
        .expect("add");
    let r4 = port
        .add_rule(rule("udp dst-port 9004 -> drop"))
        .expect("add");
    let r5 = port
        .add_rule(rule("udp dst-port 9005 -> queue 0"))
        .expect("add");
    let model = port.model_port().expect("model").clone();
    let c0 = model.counters();
    // Per destination port, how many frames: 9001..=9004 and 9006 (no rule).
    let plan: [(u16, u32); 5] = [
        (9001, 300),
        (9002, 200),
        (9003, 150),
        (9004, 120),
        (9006, 70),
    ];
    // Interleaved, round by round: one frame to each port whose share is not used up.
    let mut frames = Vec::new();
    for round in 0..300 {
        for &(p, n) in &plan {
            if round < n {
                frames.push(udp_to(frames.len() as u32, p));
            }
        }
    }
    let pool = port.pool().clone();
    let (mut rx0, mut rx1) = (
        std::collections::HashMap::<u16, u64>::new(),
        std::collections::HashMap::<u16, u64>::new(),
    );
    let mut burst = Vec::with_capacity(64);
    let mut next = 0usize;
    let received = |a: &std::collections::HashMap<u16, u64>,
                    b: &std::collections::HashMap<u16, u64>| {
        a.values().sum::<u64>() + b.values().sum::<u64>()
    };
    let to_rules = (300 + 200 + 150) as u64;
    let end = Instant::now() + Duration::from_secs(60);
    let done = |rx0: &_, rx1: &_| {
        let c = model.counters();
        received(rx0, rx1) >= to_rules
            && c.rx_rule_drop - c0.rx_rule_drop >= 120
            && c.rx_to_kernel - c0.rx_to_kernel >= 70
    };
    while !done(&rx0, &rx1) && Instant::now() < end {
        let c = model.counters();
        let settled = received(&rx0, &rx1)
            + (c.rx_rule_drop - c0.rx_rule_drop)
            + (c.rx_to_kernel - c0.rx_to_kernel);
        // At most 128 in flight: the 256-entry receive rings never run out.
        if next < frames.len() && next as u64 - settled < 128 {
            let mut v = Vec::new();
            for f in &frames[next..(next + 16).min(frames.len())] {
                let mut p = pool.alloc().expect("buffer");
                p.copy_from_slice(f).expect("fits");
                v.push(p);
            }
            next += qs[0].tx_burst(&mut v);
        }
        for (q, rx) in qs.iter_mut().zip([&mut rx0, &mut rx1]) {
            burst.clear();
            q.rx_burst(&mut burst, 64);
            for p in burst.drain(..) {
                let d = p.to_vec();
                *rx.entry(u16::from_be_bytes([d[36], d[37]])).or_default() += 1;
            }
            q.reclaim();
        }
    }
    assert!(
        done(&rx0, &rx1),
        "every frame arrived or was dropped by 60 s"
    );
    let c = model.counters();
    assert_eq!(
        c.rx_no_buffer, c0.rx_no_buffer,
        "no frame lost for lack of buffers"
    );
    let got = |rx: &std::collections::HashMap<u16, u64>, p: u16| rx.get(&p).copied().unwrap_or(0);
    assert_eq!(
        (got(&rx0, 9001), got(&rx1, 9002), got(&rx1, 9003)),
        (300, 200, 150)
    );
    let hits = |port: &Port, h| port.rule_hits(h).expect("hits").expect("the model counts");
    assert_eq!(
        hits(&port, r1),
        got(&rx0, 9001),
        "rule 1: what queue 0 received"
    );
    assert_eq!(
        hits(&port, r2),
        got(&rx1, 9002),
        "rule 2: what queue 1 received of it"
    );
    assert_eq!(
        hits(&port, r3),
        got(&rx1, 9003),
        "rule 3: added at run time"
    );
    assert_eq!(
        hits(&port, r4),
        c.rx_rule_drop - c0.rx_rule_drop,
        "the drop rule: what it dropped"
    );
    assert_eq!(hits(&port, r4), 120);
    assert_eq!(hits(&port, r5), 0, "no frame to 9005");
    // A rule removed and added again counts from zero.
    port.remove_rule(r3).expect("remove");
    let r3b = port
        .add_rule(rule("udp dst-port 9003 -> queue 1"))
        .expect("add");
    assert_eq!(hits(&port, r3b), 0, "a new rule counts from zero");
    assert!(matches!(port.rule_hits(r3), Err(Error::RuleHandle(_))));
}
