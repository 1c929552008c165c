//! Issue 20 defect 3: a queue's transmit counters are current as soon as `tx_burst` returns,
//! with no `reclaim()` (a request/response application used to see tx < rx for ever on the
//! model, whose completions were counted only when polled).
#![cfg(feature = "mlx5")]

use std::time::{Duration, Instant};

use rawq::dv::model::ModelOptions;
use rawq::{Backend, Port};

fn udp(sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&9000u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

/// tx_burst 32 on a looped-back model port, 32 come back on rx: the stats say 32 sent (and
/// their bytes) without a reclaim, on the queue and on the port.
#[test]
fn tx_counters_are_current_without_reclaim() {
    let mut port = Port::builder(Backend::Model(ModelOptions::default()))
        .queues(1)
        .rx_ring(256)
        .tx_ring(256)
        .open()
        .expect("model port");
    let pool = port.pool().clone();
    let q = port.queue(0).unwrap();
    let mut burst = Vec::new();
    for s in 0..32u16 {
        let mut p = pool.alloc().unwrap();
        p.copy_from_slice(&udp(s)).unwrap();
        burst.push(p);
    }
    assert_eq!(q.tx_burst(&mut burst), 32);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 32 && Instant::now() < deadline {
        if q.rx_burst(&mut got, 64) == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(got.len(), 32, "the looped-back frames");
    let s = q.stats();
    assert_eq!((s.rx_packets, s.tx_packets), (32, 32), "{s:?}");
    assert_eq!(s.tx_bytes, 32 * 60, "{s:?}");
    drop(got);
    let p = port.stats();
    assert_eq!((p.rx_packets, p.tx_packets), (32, 32), "{p:?}");
}

/// Counting at post must not count as sent what the device never sent: packets posted to a
/// queue that is dropped before the device took them off the ring (here the model never runs)
/// end up in `tx_unsent_at_close` (the model's stop says it sent none of them), not in
/// `tx_packets`.
#[test]
fn a_queue_dropped_before_the_device_sent_counts_those_as_dropped() {
    use rawq::dv::model::{ModelPort, ModelWire};
    use rawq::{HugePages, Mempool, MempoolConfig};
    let pool = Mempool::new(&MempoolConfig {
        buffers: 4096,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .unwrap();
    let port = ModelPort::new(ModelOptions {
        wire: ModelWire::Sink,
        ..Default::default()
    })
    .unwrap();
    let mut q = port.queue(0, &pool).unwrap().into_queue();
    let reader = q.stats_reader();
    let mut burst = Vec::new();
    for s in 0..20u16 {
        let mut p = pool.alloc().unwrap();
        p.copy_from_slice(&udp(s)).unwrap();
        burst.push(p);
    }
    assert_eq!(q.tx_burst(&mut burst), 20);
    assert_eq!(reader.snapshot().tx_packets, 20, "counted at post");
    drop(q); // the model never ran: nothing left the ring
    let s = reader.snapshot();
    assert_eq!(
        (s.tx_packets, s.tx_bytes, s.tx_drops, s.tx_unsent_at_close),
        (0, 0, 0, 20),
        "{s:?}"
    );
    assert_eq!(port.counters().tx_frames, 0);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

/// Sends `rounds` bursts of 32 on queue 0 of `port`, every 5th packet asking for TSO on a
/// frame too small to segment (refused: dropped at once), without receiving, so that the ring
/// fills; after each burst the queue's ledger closes: what left the Vec is `taken`, and each
/// taken packet is in exactly one of sent, dropped, failed or in flight.
fn ledger_closes_after_every_burst(mut port: Port, rounds: usize) -> rawq::TxLedger {
    let pool = port.pool().clone();
    let q = port.queue(0).unwrap();
    let (mut burst, mut left) = (Vec::new(), 0u64);
    let mut gone = 0u64;
    for r in 0..rounds {
        while burst.len() < 32 {
            let mut p = pool.alloc().unwrap();
            p.copy_from_slice(&udp(burst.len() as u16)).unwrap();
            if (r * 32 + burst.len()) % 5 == 0 {
                p.offload.tso_mss = Some(1000);
            }
            burst.push(p);
        }
        let before = burst.len();
        q.tx_burst(&mut burst);
        gone += (before - burst.len()) as u64;
        if r % 3 == 0 {
            q.reclaim();
        }
        let l = q.stats().tx_ledger();
        assert_eq!(
            l.taken, gone,
            "round {r}: taken is what left the Vec: {l:?}"
        );
        assert!(l.closes(), "round {r}: {l:?}");
        assert_eq!(
            l.sent + l.dropped + l.failed + l.in_flight,
            l.taken,
            "{l:?}"
        );
        left = burst.len() as u64;
    }
    let _ = q.take_error();
    let l = q.stats().tx_ledger();
    assert!(
        l.dropped > 0,
        "the TSO requests were refused and counted: {l:?}"
    );
    assert!(left > 0 || l.sent > 0, "{l:?}");
    l
}

/// Issue 32 item 1 (the library's half): on the software device and the loopback backend, a
/// packet `tx_burst` took is, from then on, in exactly one of sent, dropped (with why) or in
/// flight, at every point, the port's totals too.
#[test]
fn every_packet_taken_is_sent_dropped_or_in_flight() {
    let model = Port::builder(Backend::Model(ModelOptions::default()))
        .queues(1)
        .rx_ring(64)
        .tx_ring(64)
        .open()
        .expect("model port");
    let l = ledger_closes_after_every_burst(model, 40);
    assert!(l.sent > 0, "{l:?}");

    // The loopback's ring (64) fills: the rest stays with the caller, not taken.
    let lo = Port::builder(Backend::Loopback)
        .rx_ring(64)
        .tx_ring(64)
        .open()
        .expect("loopback port");
    let stats = lo.stats_readers().to_vec();
    let l = ledger_closes_after_every_burst(lo, 10);
    assert_eq!(l.in_flight, 0, "the loopback sends as it takes: {l:?}");
    let mut total = rawq::QueueStats::default();
    stats.iter().for_each(|r| total.accumulate(&r.snapshot()));
    assert_eq!(
        total.tx_ledger(),
        l,
        "the port's totals keep the same ledger"
    );
}
