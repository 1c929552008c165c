//! The generator's per-frame work allocates nothing: writing a frame (ranges, VLAN, TCP,
//! latency stamps), reading its stamp back, per-flow accounting and the latency histogram.
//! Counted with a global allocator, on the test's own thread only (the harness's threads may
//! allocate meanwhile).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rawq_gen::{
    FlowTracker, FlowVary, FrameSpec, L4Kind, LatencyHistogram, Payload, Shape, SizeSpec, Stamper,
    Vlan,
};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the thread whose allocations count (const-initialised: no allocation to read it).
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count() {
    if COUNTING.with(|c| c.get()) {
        ALLOCS.fetch_add(1, Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn per_frame_work_allocates_nothing() {
    let flows = 64u32;
    let st = Stamper::with_shape(
        FrameSpec {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
            src_ip: "2001:db8::1".parse().unwrap(),
            dst_ip: "2001:db8::2".parse().unwrap(),
            src_port: 1000,
            dst_port: 9000,
            flows,
            vary: FlowVary::SrcIp,
            sizes: SizeSpec::Imix,
            stamp: true,
        },
        Shape {
            vlans: vec![Vlan { id: 5, pcp: 1 }, Vlan { id: 6, pcp: 2 }],
            l4: L4Kind::TcpAck,
            payload: Payload::Random(3),
            ranges: vec!["dst-port=1-100:rand".parse().unwrap()],
            latency: true,
            mark: 0,
        },
    )
    .unwrap();
    let mut buf = vec![0u8; 2048];
    let mut hist = LatencyHistogram::new();
    let mut ft = FlowTracker::with_capacity(flows as usize);
    let mut run = |from: u64, to: u64| {
        for i in from..to {
            let len = st.spec().sizes.size(i) as usize;
            st.write_at(&mut buf, len, (i % flows as u64) as u32, 0, i, Some(i));
            let s = Stamper::read_stamp_full(&buf[..len]).expect("stamp");
            ft.record(&s);
            hist.record(1000 + s.tx_ns.unwrap() % 1_000_000);
        }
    };
    run(0, flows as u64); // every flow seen once
    COUNTING.with(|c| c.set(true));
    run(flows as u64, 200_000);
    COUNTING.with(|c| c.set(false));
    assert_eq!(ALLOCS.load(Relaxed), 0, "allocations per frame");
    assert_eq!(hist.count(), 200_000);
    assert_eq!(ft.received(), 200_000);
}

/// Writing a burst (`FrameSource::fill_burst`, pktgen's send loop) allocates nothing either,
/// on the one-size path and the frame-by-frame one.
#[test]
fn burst_fill_allocates_nothing() {
    use rawq::{HugePages, Mempool, MempoolConfig};
    use rawq_gen::FrameSource;
    let pool = Mempool::new(&MempoolConfig {
        buffers: 64,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .unwrap();
    let mut pkts: Vec<_> = (0..32).map(|_| pool.alloc().unwrap()).collect();
    for sizes in [SizeSpec::Fixed(60), SizeSpec::Imix] {
        let src = FrameSource::Template(
            Stamper::new(FrameSpec {
                dst_mac: [2, 0, 0, 0, 0, 2],
                src_mac: [2, 0, 0, 0, 0, 1],
                src_ip: "10.0.0.1".parse().unwrap(),
                dst_ip: "10.0.0.2".parse().unwrap(),
                src_port: 1000,
                dst_port: 9000,
                flows: 100,
                vary: FlowVary::SrcPort,
                sizes,
                stamp: false,
            })
            .unwrap(),
        );
        COUNTING.with(|c| c.set(true));
        for b in 0..1000u64 {
            src.fill_burst(&mut pkts, b * 32, 0).unwrap();
        }
        COUNTING.with(|c| c.set(false));
        assert_eq!(
            ALLOCS.load(Relaxed),
            0,
            "allocations per burst ({:?})",
            src.max_len()
        );
        assert!(pkts.iter().all(|p| !p.is_empty()));
    }
}
