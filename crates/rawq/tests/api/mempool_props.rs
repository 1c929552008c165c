//! Pool invariants under random sequences of bursts: every buffer comes back, caches never hold
//! a buffer twice, and exhaustion is an error.

use proptest::prelude::*;
use rawq::{Backend, HugePages, Mempool, MempoolConfig, Packet, Port};
use std::collections::HashSet;

fn pool(buffers: u32, cache_size: u32) -> Mempool {
    Mempool::new(&MempoolConfig {
        buffers,
        cache_size,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .expect("pool")
}

/// One step of a random workload on a loopback port.
#[derive(Clone, Debug)]
enum Op {
    Alloc(usize),
    Send(usize),
    Recv(usize),
    DropHeld(usize),
    FreeToCache(usize),
    Chain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..64).prop_map(Op::Alloc),
        (0usize..64).prop_map(Op::Send),
        (0usize..64).prop_map(Op::Recv),
        (0usize..64).prop_map(Op::DropHeld),
        (0usize..64).prop_map(Op::FreeToCache),
        Just(Op::Chain),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// After any sequence of bursts, dropping everything returns every buffer to the pool.
    #[test]
    fn every_buffer_comes_back(ops in proptest::collection::vec(op(), 1..200), cache in 1u32..40) {
        let p = pool(256, cache);
        let mut port = Port::builder(Backend::Loopback).rx_ring(64).pool(p.clone()).open().unwrap();
        let q = port.queue(0).unwrap();
        let mut held: Vec<Packet> = Vec::new();
        let mut cache_q = p.cache();
        for op in ops {
            match op {
                Op::Alloc(n) => {
                    let before = held.len();
                    match q.alloc_burst(&mut held, n) {
                        Ok(()) => prop_assert_eq!(held.len(), before + n),
                        Err(rawq::Error::PoolExhausted { .. }) => prop_assert_eq!(held.len(), before),
                        Err(e) => return Err(TestCaseError::fail(e.to_string())),
                    }
                }
                Op::Send(n) => {
                    let mut burst: Vec<Packet> = held.drain(..n.min(held.len())).collect();
                    let len = burst.len();
                    let sent = q.tx_burst(&mut burst);
                    prop_assert_eq!(sent + burst.len(), len, "unsent packets stay with the caller");
                    held.append(&mut burst);
                }
                Op::Recv(n) => {
                    let before = held.len();
                    let got = q.rx_burst(&mut held, n);
                    prop_assert!(got <= n);
                    prop_assert_eq!(held.len(), before + got);
                }
                Op::DropHeld(n) => {
                    held.truncate(held.len().saturating_sub(n));
                }
                Op::FreeToCache(n) => {
                    for _ in 0..n.min(held.len()) {
                        let pk = held.pop().unwrap();
                        cache_q.free(pk);
                    }
                }
                Op::Chain => {
                    if held.len() >= 2 {
                        let seg = held.pop().unwrap();
                        if seg.segment_count() == 1 {
                            held.last_mut().unwrap().chain(seg).unwrap();
                        } else {
                            held.push(seg);
                        }
                    }
                }
            }
            // No buffer is ever owned twice.
            let mut seen = HashSet::new();
            for pk in &held {
                for s in pk.segments() {
                    prop_assert!(seen.insert(s.index), "buffer {} owned twice", s.index);
                }
            }
        }
        drop(held);
        drop(cache_q);
        drop(port);
        p.flush_local_cache();
        prop_assert_eq!(p.available(), p.capacity());
    }

    /// A private cache under random get/put never hands out a buffer twice, never exceeds its
    /// bound, and together with the shared stack always accounts for every free buffer.
    #[test]
    fn cache_behaves_under_random_sequences(
        steps in proptest::collection::vec((any::<bool>(), 1usize..50), 1..300),
        cache_size in 1u32..64,
    ) {
        let p = pool(512, cache_size);
        let mut c = p.cache();
        let mut out: Vec<u32> = Vec::new();
        let mut out_set = HashSet::new();
        for (get, n) in steps {
            for _ in 0..n {
                if get {
                    match c.get() {
                        Some(i) => {
                            prop_assert!(i < 512);
                            prop_assert!(out_set.insert(i), "index {} handed out twice", i);
                            out.push(i);
                        }
                        None => prop_assert_eq!(out.len(), 512, "None only when all are out"),
                    }
                } else if let Some(i) = out.pop() {
                    out_set.remove(&i);
                    c.put(i);
                }
            }
            prop_assert!(c.len() <= 2 * cache_size as usize);
            prop_assert_eq!(p.available() as usize + c.len() + out.len(), 512);
        }
        for i in out.drain(..) {
            c.put(i);
        }
        drop(c);
        prop_assert_eq!(p.available(), 512);
    }
}

#[test]
fn packets_cross_threads_and_come_home() {
    let p = pool(64, 8);
    let mut v = Vec::new();
    p.alloc_bulk(&mut v, 64).unwrap();
    let t = std::thread::spawn(move || drop(v));
    t.join().unwrap();
    // The other thread's cache was flushed when it exited.
    p.flush_local_cache();
    assert_eq!(p.available(), 64);
}

#[test]
fn huge_pages_are_used_or_the_fallback_is_reported() {
    let free_huge: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let cfg = MempoolConfig {
        buffers: 1024,
        huge_pages: HugePages::Try,
        ..Default::default()
    };
    let p = Mempool::new(&cfg).expect("Try never fails for lack of huge pages");
    if free_huge >= 1 {
        assert_eq!(p.memory_kind(), rawq::MemoryKind::HugePages2M);
    } else {
        assert_eq!(p.memory_kind(), rawq::MemoryKind::Anonymous);
        let req = Mempool::new(&MempoolConfig {
            huge_pages: HugePages::Require,
            ..cfg
        });
        match req {
            Err(rawq::Error::Unsupported(msg)) => assert!(msg.contains("nr_hugepages"), "{msg}"),
            other => panic!("Require without huge pages must fail, got {other:?}"),
        }
    }
    // Either way the region is usable and page aligned.
    let (base, len) = p.region();
    assert_eq!(base as usize % 4096, 0);
    assert_eq!(len, 1024 * 2048);
}
