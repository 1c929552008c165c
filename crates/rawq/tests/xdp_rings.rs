//! A million sequence-numbered frames through the rings: rawq transmits on one end of a veth
//! pair, rawq receives on the other through the steering program, and every frame must arrive
//! exactly once. The loop is flow controlled (at most `WINDOW` frames in flight), because in copy
//! mode neither the veth nor the socket pushes back on a sender that outruns the receiver; a lost
//! frame therefore stalls the window and fails the test instead of being papered over.
//!
//! A binary of its own: its stall check (no progress for 5 s) tripped once while the other
//! AF_XDP tests ran beside it in one binary.

use rawq_testkit as support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rawq::flow::Rule;
use rawq::{Backend, Packet, Port};
use support::NetnsPair;

const FRAMES: u64 = 1_000_000;
const WINDOW: u64 = 192;
const TIME_LIMIT: Duration = Duration::from_secs(60);
const SEQ_OFF: usize = 42; // payload of an untagged IPv4/UDP frame
const PORT: u16 = 9000;

fn template(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 203, 0, 1]);
    f[30..34].copy_from_slice(&[10, 203, 0, 2]);
    f[34..36].copy_from_slice(&4000u16.to_be_bytes());
    f[36..38].copy_from_slice(&PORT.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

/// The rule `udp dst-port PORT -> <action>`.
fn udp_to_port(action: &str) -> Rule {
    format!("udp dst-port {PORT} -> {action}")
        .parse()
        .expect("a valid rule")
}

#[test]
fn a_million_frames_none_lost_none_duplicated() {
    let Some(p) = NetnsPair::new("xring") else {
        return;
    };
    let mac_b = p.mac(&p.b, &p.veth_b);
    let mac_a = p.mac(&p.a, &p.veth_a);
    let dev_b = p.veth_b.clone();
    let mut port_b = p
        .run_in(&p.b, move || {
            Port::builder(Backend::Xdp { ifname: dev_b })
                .rule(udp_to_port("queue 0"))
                .open()
        })
        .expect("receiving port");
    let dev_a = p.veth_a.clone();
    let mut port_a = p
        .run_in(&p.a, move || {
            Port::builder(Backend::Xdp { ifname: dev_a }).open()
        })
        .expect("sending port");
    eprintln!("modes: tx {} rx {}", port_a.info().mode, port_b.info().mode);
    let (pool_a, pool_b) = (port_a.pool().clone(), port_b.pool().clone());
    let mut qa = port_a.take_queues().remove(0);
    let mut qb = port_b.take_queues().remove(0);

    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();

    let (r2, s2, rx_pool) = (received.clone(), stop.clone(), pool_b.clone());
    let rx = std::thread::spawn(move || {
        let mut seen = vec![0u64; (FRAMES as usize).div_ceil(64)];
        let mut dups = 0u64;
        let mut bad = 0u64;
        let mut count = 0u64;
        let mut burst: Vec<Packet> = Vec::with_capacity(64);
        while count < FRAMES && !s2.load(Ordering::Relaxed) {
            let n = qb.rx_burst(&mut burst, 64);
            for pkt in burst.drain(..) {
                let d = pkt.data();
                let seq = d
                    .get(SEQ_OFF..SEQ_OFF + 8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
                match seq {
                    Some(s) if s < FRAMES => {
                        let (w, b) = ((s / 64) as usize, s % 64);
                        if seen[w] & (1 << b) != 0 {
                            dups += 1;
                        }
                        seen[w] |= 1 << b;
                    }
                    _ => bad += 1,
                }
                count += 1;
            }
            if n > 0 {
                r2.store(count, Ordering::Release);
            } else {
                std::thread::yield_now();
            }
        }
        let missing = FRAMES - seen.iter().map(|w| w.count_ones() as u64).sum::<u64>();
        // Dropping the queue folds the socket's kernel counters (drops) into its stats.
        drop(qb);
        // Packets dropped on this thread went to its cache of the rx pool.
        rx_pool.flush_local_cache();
        (count, dups, bad, missing)
    });

    let tpl = template(mac_b, mac_a);
    let mut sent = 0u64;
    let mut burst: Vec<Packet> = Vec::with_capacity(64);
    let mut stalled = false;
    let mut last_progress = (0u64, Instant::now());
    while sent < FRAMES {
        if start.elapsed() > TIME_LIMIT {
            stalled = true;
            break;
        }
        let got = received.load(Ordering::Acquire);
        if got != last_progress.0 {
            last_progress = (got, Instant::now());
        } else if last_progress.1.elapsed() > Duration::from_secs(5) {
            stalled = true;
            break;
        }
        let room = (got + WINDOW).saturating_sub(sent + burst.len() as u64);
        let k = room.min(32).min(FRAMES - sent - burst.len() as u64) as usize;
        if k > 0 && qa.alloc_burst(&mut burst, k).is_ok() {
            let from = burst.len() - k;
            let first = sent + from as u64;
            for (j, pkt) in burst[from..].iter_mut().enumerate() {
                pkt.copy_from_slice(&tpl).unwrap();
                pkt.data_mut()[SEQ_OFF..SEQ_OFF + 8]
                    .copy_from_slice(&(first + j as u64).to_le_bytes());
            }
        }
        // An empty burst still reclaims completions and kicks the kernel.
        sent += qa.tx_burst(&mut burst) as u64;
        if k == 0 {
            std::thread::yield_now();
        }
    }
    let tx_secs = start.elapsed().as_secs_f64();
    // Wait for the tail, bounded.
    let t = Instant::now();
    while received.load(Ordering::Acquire) < sent && t.elapsed() < Duration::from_secs(5) {
        qa.reclaim();
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let (count, dups, bad, missing) = rx.join().unwrap();
    let st_b = port_b.stats();
    let secs = start.elapsed().as_secs_f64();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(500) {
        qa.reclaim();
    }
    let st_a = qa.stats();
    eprintln!(
        "{count} frames in {secs:.2} s ({:.0} frames/s, tx loop {tx_secs:.2} s); tx {st_a:?}; rx {st_b:?}",
        count as f64 / secs
    );
    assert!(!stalled, "the loop stalled at {sent} sent / {count} received (a frame was lost); tx {st_a:?} rx {st_b:?}");
    assert_eq!(sent, FRAMES);
    assert_eq!(
        (count, dups, bad, missing),
        (FRAMES, 0, 0, 0),
        "received, duplicates, bad, missing"
    );
    assert_eq!(st_b.rx_drops, 0, "kernel drops on the rx socket");

    drop(burst);
    drop(qa);
    drop(port_a);
    drop(port_b);
    for (name, pool) in [("tx", &pool_a), ("rx", &pool_b)] {
        pool.flush_local_cache();
        assert_eq!(
            pool.available(),
            pool.capacity(),
            "{name} pool: every UMEM buffer is home"
        );
    }
}

/// Not a test but a measurement (no speed assertions in tests): transmit rate of 60-byte frames
/// in copy mode on a veth, the peer dropping them in its XDP program. Run with
/// `cargo test -p rawq --release --no-default-features --features xdp --test xdp_rings --
/// --ignored --nocapture tx_rate`.
#[test]
#[ignore]
fn tx_rate_copy_mode_60_byte_frames() {
    let Some(p) = NetnsPair::new("xrate") else {
        return;
    };
    let mac_b = p.mac(&p.b, &p.veth_b);
    let mac_a = p.mac(&p.a, &p.veth_a);
    let dev_b = p.veth_b.clone();
    let port_b = p
        .run_in(&p.b, move || {
            Port::builder(Backend::Xdp { ifname: dev_b })
                .rule(udp_to_port("drop"))
                .open()
        })
        .expect("dropping port");
    let dev_a = p.veth_a.clone();
    let mut port_a = p
        .run_in(&p.a, move || {
            Port::builder(Backend::Xdp { ifname: dev_a })
                .tx_ring(2048)
                .open()
        })
        .expect("sending port");
    let mut q = port_a.take_queues().remove(0);
    let tpl = template(mac_b, mac_a);
    let mut burst: Vec<Packet> = Vec::with_capacity(64);
    let dur = Duration::from_secs(3);
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < dur {
        if burst.is_empty() && q.alloc_burst(&mut burst, 64).is_ok() {
            for pkt in burst.iter_mut() {
                pkt.copy_from_slice(&tpl).unwrap();
            }
        }
        sent += q.tx_burst(&mut burst) as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(burst);
    drop(q);
    let st = port_a.stats();
    eprintln!(
        "copy mode, 60-byte frames, veth: {:.0} frames/s submitted ({sent} in {secs:.2} s); {st:?}",
        sent as f64 / secs
    );
    drop(port_b);
}
