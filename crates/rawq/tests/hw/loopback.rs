//! The verbs and mlx5 DV backends on real hardware: a burst sent on queue 0 of a port comes back
//! on queue 1 through a steering rule (the NIC loops locally addressed frames back), and frames no
//! rule matches reach no rawq queue (they stay with the kernel).
//!
//! Runs only when `RAWQ_TEST_DEVICE` names a device with an Ethernet port (port from
//! `RAWQ_TEST_PORT`, default 1). Frames use a locally administered destination MAC and the
//! IEEE "local experimental" ethertype, so nothing outside the host acts on them.
#![cfg(feature = "verbs")]

use rawq_testkit as support;

use std::time::{Duration, Instant};

use rawq::flow::{MacMatch, Pattern, Rule};
use rawq::{Backend, Packet, Port};

const DST: [u8; 6] = [0x02, 0x72, 0x61, 0x77, 0x71, 0x01];
const SRC: [u8; 6] = [0x02, 0x72, 0x61, 0x77, 0x71, 0x02];
const ETHERTYPE_MATCHED: u16 = 0x88b5;
const ETHERTYPE_UNMATCHED: u16 = 0x88b6;
const BURST: usize = 32;

fn frame(seq: u16, ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&DST);
    f.extend_from_slice(&SRC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(64, 0xa5);
    f
}

/// Receives on `q` until `want` packets or `limit` elapsed.
fn collect(port: &mut Port, q: u16, want: usize, limit: Duration) -> Vec<Packet> {
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < want && start.elapsed() < limit {
        let queue = port.queue(q).expect("queue");
        if queue.rx_burst(&mut got, BURST) == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    got
}

fn send(port: &mut Port, ethertype: u16) {
    let q0 = port.queue(0).expect("queue 0");
    let mut burst = Vec::with_capacity(BURST);
    q0.alloc_burst(&mut burst, BURST).expect("alloc");
    for (i, p) in burst.iter_mut().enumerate() {
        p.copy_from_slice(&frame(i as u16, ethertype))
            .expect("fill");
    }
    let start = Instant::now();
    while !burst.is_empty() && start.elapsed() < Duration::from_secs(2) {
        q0.tx_burst(&mut burst);
        q0.reclaim();
    }
    assert!(burst.is_empty(), "{} packets not sent", burst.len());
    assert!(q0.take_error().is_none());
}

#[test]
fn verbs_steered_burst_loops_back_to_the_other_queue_and_the_rest_stays_with_the_kernel() {
    let Some((device, port)) = support::test_device() else {
        return;
    };
    loop_back_through_a_rule(Backend::Verbs { device, port });
}

#[cfg(feature = "mlx5")]
#[test]
fn dv_steered_burst_loops_back_to_the_other_queue_and_the_rest_stays_with_the_kernel() {
    let Some((device, port)) = support::test_device() else {
        return;
    };
    loop_back_through_a_rule(Backend::Dv { device, port });
}

fn loop_back_through_a_rule(backend: Backend) {
    let rule = Rule::to_queue(
        Pattern {
            dst_mac: Some(MacMatch::exact(DST)),
            ethertype: Some(ETHERTYPE_MATCHED),
            ..Pattern::default()
        },
        1,
    );
    let mut port = Port::builder(backend.clone())
        .queues(2)
        .rx_ring(256)
        .tx_ring(256)
        .rule(rule)
        .open()
        .unwrap_or_else(|e| panic!("open a {} port: {e}", backend.name()));

    send(&mut port, ETHERTYPE_MATCHED);
    let got = collect(&mut port, 1, BURST, Duration::from_secs(2));
    assert_eq!(got.len(), BURST, "steered frames received on queue 1");
    let mut seqs: Vec<u16> = got
        .iter()
        .map(|p| {
            let d = p.data();
            assert_eq!(&d[0..6], &DST);
            assert_eq!(u16::from_be_bytes([d[12], d[13]]), ETHERTYPE_MATCHED);
            u16::from_be_bytes([d[14], d[15]])
        })
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..BURST as u16).collect::<Vec<_>>());
    drop(got);

    // Unmatched frames: no rule takes them, so neither queue sees them.
    send(&mut port, ETHERTYPE_UNMATCHED);
    for q in 0..2 {
        let stray = collect(&mut port, q, 1, Duration::from_millis(300));
        assert!(stray.is_empty(), "queue {q} received an unmatched frame");
    }
    let s = port.stats();
    assert_eq!(s.tx_packets, 2 * BURST as u64);
    assert_eq!(s.rx_packets, BURST as u64);
    assert_eq!(s.rx_errors + s.tx_errors, 0, "{s:?}");
}
