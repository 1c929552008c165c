use crate::dv::model::{ModelOptions, ModelPort, ModelWire};
use crate::dv::wire::cqe;
use crate::{HugePages, Mempool, MempoolConfig, Packet};

/// A packet of `lens.len()` buffers holding `lens[i]` bytes each.
fn chained(pool: &Mempool, lens: &[usize]) -> Packet {
    let mut head = pool.alloc().unwrap();
    head.copy_from_slice(&vec![0x11; lens[0]]).unwrap();
    for &l in &lens[1..] {
        let mut s = pool.alloc().unwrap();
        s.copy_from_slice(&vec![0x22; l]).unwrap();
        head.chain(s).unwrap();
    }
    head
}

/// Bursts mixing one-WQEBB packets, chains (one whose first buffer the 18-byte inline
/// header swallows whole) and runts, with a send error in the middle: after recovery every
/// packet taken is counted once, as sent or dropped, and every buffer comes home.
fn error_with_chains(min_inline: u16, empw: bool) {
    let pool = Mempool::new(&MempoolConfig {
        buffers: 2048,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .unwrap();
    let port = ModelPort::new(ModelOptions {
        sq_wqebbs: 64,
        min_inline,
        empw,
        wire: ModelWire::Sink,
        ..Default::default()
    })
    .unwrap();
    let mut q = port.queue(0, &pool).unwrap().into_queue();
    port.inject_tx_error(0, 25, cqe::SYND_LOCAL_PROT_ERR);
    let shapes: [&[usize]; 6] = [&[60], &[10, 100], &[200], &[30, 40, 50], &[8], &[1000]];
    let (mut taken, mut runts) = (0u64, 0u64);
    let mut saw_error = false;
    for round in 0..40 {
        let mut burst: Vec<Packet> = (0..7)
            .map(|i| chained(&pool, shapes[(round + i) % shapes.len()]))
            .collect();
        let before = burst.len();
        let n = q.tx_burst(&mut burst);
        runts += (0..n)
            .filter(|&i| shapes[(round + i) % shapes.len()] == [8])
            .count() as u64;
        taken += n as u64;
        assert_eq!(burst.len(), before - n, "the rest stay, in order");
        drop(burst);
        port.process();
        saw_error |= q.take_error().is_some();
    }
    for _ in 0..10 {
        q.reclaim();
        port.process();
        saw_error |= q.take_error().is_some();
    }
    assert!(saw_error, "the injected error was reported");
    let s = q.stats();
    assert_eq!(s.tx_errors, 1, "{s:?}");
    assert!(s.tx_drops >= runts, "{s:?}");
    assert_eq!(s.tx_packets + s.tx_drops, taken, "{s:?}");
    drop(q);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity(), "buffers leaked");
}

#[test]
fn send_error_with_chains_no_inline() {
    error_with_chains(0, false);
}

#[test]
fn send_error_with_chains_inline18() {
    error_with_chains(18, false);
}

#[test]
fn send_error_with_chains_empw() {
    error_with_chains(0, true);
}
