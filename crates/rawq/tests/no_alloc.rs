//! A steady-state burst loop allocates nothing: counted with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rawq::{Backend, HugePages, MempoolConfig, Port};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_burst_loop_allocates_nothing() {
    let mut port = Port::builder(Backend::Loopback)
        .rx_ring(256)
        .pool_config(MempoolConfig {
            huge_pages: HugePages::Never,
            ..Default::default()
        })
        .open()
        .unwrap();
    let q = port.queue(0).unwrap();
    let mut tx = Vec::with_capacity(32);
    let mut rx = Vec::with_capacity(32);
    let frame = [0xabu8; 64];
    let mut run = |iters: usize| {
        let mut moved = 0;
        for _ in 0..iters {
            q.alloc_burst(&mut tx, 32).unwrap();
            for p in tx.iter_mut() {
                p.copy_from_slice(&frame).unwrap();
            }
            moved += q.tx_burst(&mut tx);
            tx.clear();
            let n = q.rx_burst(&mut rx, 32);
            assert!(rx.iter().all(|p| p.data() == frame));
            rx.truncate(rx.len() - n); // drop: back to the thread-local cache
        }
        moved
    };
    run(100); // warm up: caches and rings reach their steady size
    let before = ALLOCS.load(Relaxed);
    let moved = run(10_000);
    let after = ALLOCS.load(Relaxed);
    assert_eq!(moved, 320_000);
    assert_eq!(
        after - before,
        0,
        "the burst loop allocated {} times",
        after - before
    );
}
