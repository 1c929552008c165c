//! The device model's steering against the reference (`flow::order::steer`): random rule sets
//! with multicast rules (DONT_TRAP copies, multicast drops after every priority) at mixed
//! priorities, installed on a model port as the verbs backend would give them to the kernel;
//! every frame reaches exactly the rules the reference names (by the flow tag each rule's
//! frames carry), the kernel exactly when the reference says, and is dropped exactly when a
//! drop rule takes it.
//!
//! The model ranks flows from its own decoded specs (Linux drivers/infiniband/hw/mlx5/fs.c
//! `get_flow_table`), the reference from rawq's rules: two readings of the kernel, compared.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use support::Rng;

use rawq::dv::model::{ModelOptions, ModelPort, ModelWire};
use rawq::flow::{self, Action, Rule};
use rawq::{HugePages, Mempool, MempoolConfig, Queue};

const MACS: [[u8; 6]; 4] = [
    [0x02, 0, 0, 0, 0, 2],
    [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01],
    [0x33, 0x33, 0x00, 0x00, 0x00, 0x01],
    [0xff; 6],
];

/// An Ethernet frame to `dst`, IPv4 or IPv6, UDP (17) or TCP (6), to port `dport`.
fn frame(dst: [u8; 6], v6: bool, proto: u8, dport: u16) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 20, proto, 64]);
        f.extend_from_slice(&[0x20; 32]);
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0, 0, 64, proto, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 224, 0, 0, 1]);
    }
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0u8; 16]);
    f
}

/// A random rule in text form: a destination MAC (exact, or the group bit alone) and/or a
/// transport match, priority 0-3, to one of four queues or dropped.
fn random_rule(r: &mut Rng) -> Rule {
    let eth = r.pick(&[
        "",
        "",
        "eth dst 01:00:5e:00:00:01 ",
        "eth dst 33:33:00:00:00:01 ",
        "eth dst 01:00:00:00:00:00/01:00:00:00:00:00 ",
        "eth dst 02:00:00:00:00:02 ",
    ]);
    let l34 = r.pick(&[
        "",
        "udp ",
        "udp dst-port 9000 ",
        "tcp dst-port 9000 ",
        "ipv4 ",
        "ipv6 udp dst-port 9001 ",
    ]);
    let pattern = if eth.is_empty() && l34.is_empty() {
        "promiscuous ".to_string()
    } else {
        format!("{eth}{l34}")
    };
    let action = match r.below(5) {
        4 => "drop".to_string(),
        q => format!("queue {q}"),
    };
    format!("prio {} {pattern}-> {action}", r.below(4))
        .parse()
        .unwrap()
}

#[test]
fn the_model_steers_as_the_reference_says() {
    let pool = Mempool::new(&MempoolConfig {
        buffers: 4096,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .expect("pool");
    let frames: Vec<Vec<u8>> = MACS
        .iter()
        .flat_map(|&m| {
            [
                (false, 17, 9000),
                (true, 17, 9001),
                (false, 6, 9000),
                (true, 6, 1),
            ]
            .map(|(v6, p, d)| frame(m, v6, p, d))
        })
        .collect();
    let mut r = Rng(0x00f1_0e5e_ed00_0001);
    let (mut sets, mut copies, mut reordered) = (0, 0, 0);
    while sets < 60 {
        let rules: Vec<Rule> = (0..1 + r.below(6)).map(|_| random_rule(&mut r)).collect();
        if flow::validate_rules(&rules, 4).is_err() {
            continue;
        }
        sets += 1;
        let mut by_prio: Vec<usize> = (0..rules.len()).collect();
        by_prio.sort_by_key(|&i| rules[i].priority);
        reordered += usize::from(by_prio != flow::order::order(&rules));
        let port = ModelPort::new(ModelOptions {
            queues: 4,
            rules: rules.clone(),
            wire: ModelWire::Sink,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{rules:?}: {e}"));
        let mut qs: Vec<Queue> = (0..4)
            .map(|i| port.queue(i, &pool).unwrap().into_queue())
            .collect();
        for f in &frames {
            let before = port.counters();
            port.inject_frame(f);
            port.process();
            let mut tags = Vec::new();
            for q in qs.iter_mut() {
                let mut v = Vec::new();
                q.rx_burst(&mut v, 64);
                tags.extend(v.iter().map(|p| p.meta.flow_tag() as usize - 1));
            }
            tags.sort_unstable();
            let after = port.counters();
            let want = flow::order::steer(&rules, f);
            copies += want.copies.len();
            let dropped = want
                .taken_by
                .is_some_and(|t| rules[t].action == Action::Drop);
            let mut want_tags: Vec<usize> = want.copies.clone();
            want_tags.extend(want.taken_by.filter(|_| !dropped));
            want_tags.sort_unstable();
            let texts: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
            assert_eq!(tags, want_tags, "{texts:#?}\nframe {f:02x?}\n{want:?}");
            assert_eq!(
                after.rx_to_kernel - before.rx_to_kernel,
                u64::from(want.to_kernel()),
                "{texts:#?}\nframe {f:02x?}\n{want:?}"
            );
            assert_eq!(
                after.rx_rule_drop - before.rx_rule_drop,
                u64::from(dropped),
                "{texts:#?}\nframe {f:02x?}"
            );
        }
    }
    assert!(
        copies > 50,
        "too few DONT_TRAP copies to mean anything: {copies}"
    );
    assert!(
        reordered > 10,
        "too few sets where the order matters: {reordered}"
    );
}
