//! `Queue::alloc_burst` meets the send completions in one cache: buffers a DV queue (here on the
//! device model) completed are the ones its next `alloc_burst` hands out, without a trip through
//! the pool's shared stack or the thread-local cache.
#![cfg(feature = "mlx5")]

use std::time::{Duration, Instant};

use rawq::dv::model::{ModelOptions, ModelWire};
use rawq::{Backend, Port};

#[test]
fn completed_buffers_come_back_through_alloc_burst() {
    let opts = ModelOptions {
        wire: ModelWire::Sink,
        ..ModelOptions::default()
    };
    let mut port = Port::builder(Backend::Model(opts))
        .queues(1)
        .rx_ring(64)
        .tx_ring(64)
        .open()
        .expect("model port");
    let mut q = port.take_queues().pop().expect("one queue");
    let frame = [0x5au8; 60];
    let send = |q: &mut rawq::Queue, n: usize| -> Vec<u32> {
        let mut pkts = Vec::new();
        q.alloc_burst(&mut pkts, n).expect("alloc_burst");
        let idx: Vec<u32> = pkts.iter().map(|p| p.buffer_index()).collect();
        for p in &mut pkts {
            p.copy_from_slice(&frame).unwrap();
        }
        assert_eq!(q.tx_burst(&mut pkts), n, "the ring has room for {n}");
        idx
    };
    // Waits (bounded) until the device completed `sent` and the queue took the completions
    // (`reclaim` returns how many it took; `tx_packets` counts at post, so it cannot tell).
    let mut reclaimed = 0u64;
    let mut completed = |q: &mut rawq::Queue, sent: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while reclaimed < sent && Instant::now() < deadline {
            reclaimed += q.reclaim() as u64;
            std::thread::yield_now();
        }
        assert_eq!(reclaimed, sent, "the device completed every send");
        assert_eq!(q.stats().tx_packets, sent);
    };
    let mut sent = 0;
    for round in 0..4 {
        let first = send(&mut q, 8);
        sent += 8;
        completed(&mut q, sent);
        let mut again = Vec::new();
        q.alloc_burst(&mut again, 8).expect("alloc_burst");
        let mut got: Vec<u32> = again.iter().map(|p| p.buffer_index()).collect();
        let mut want = first.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(
            got, want,
            "round {round}: alloc_burst handed out other buffers than the 8 just completed"
        );
    }
}
