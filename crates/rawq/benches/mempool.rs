//! Pool cost: allocate and free a burst of 32 buffers, reported per buffer.
//!
//! Three ways, side by side in one run: through a queue's private `PoolCache` (the driver path),
//! through `Mempool::alloc_bulk` + drop (the thread-local cache a plain `drop` uses), and a bare
//! `Vec<u32>` push/pop of 32 indices as the floor.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rawq::{HugePages, Mempool, MempoolConfig};
use std::hint::black_box;

const BURST: usize = 32;

fn pool() -> Mempool {
    Mempool::new(&MempoolConfig {
        buffers: 8192,
        huge_pages: HugePages::Try,
        ..Default::default()
    })
    .expect("pool")
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("mempool_burst32");
    g.throughput(Throughput::Elements(BURST as u64));

    let p = pool();
    let mut cache = p.cache();
    let mut idx = [0u32; BURST];
    g.bench_function("pool_cache_get_put", |b| {
        b.iter(|| {
            for i in idx.iter_mut() {
                *i = cache.get().expect("buffer");
            }
            for &i in black_box(&idx).iter() {
                cache.put(i);
            }
        })
    });

    let mut v = Vec::with_capacity(BURST);
    g.bench_function("alloc_bulk_then_drop", |b| {
        b.iter(|| {
            p.alloc_bulk(&mut v, BURST).expect("burst");
            black_box(&v);
            v.clear();
        })
    });

    let mut cache2 = p.cache();
    let mut pkts = Vec::with_capacity(BURST);
    g.bench_function("pool_cache_alloc_free_packets", |b| {
        b.iter(|| {
            for _ in 0..BURST {
                pkts.push(cache2.alloc().expect("buffer"));
            }
            for pk in pkts.drain(..) {
                cache2.free(black_box(pk));
            }
        })
    });

    g.bench_function("floor_vec_push_pop", |b| {
        b.iter_batched_ref(
            || (0..2 * BURST as u32).collect::<Vec<u32>>(),
            |s| {
                for i in idx.iter_mut() {
                    *i = s.pop().unwrap_or(0);
                }
                for &i in black_box(&idx).iter() {
                    s.push(i);
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
