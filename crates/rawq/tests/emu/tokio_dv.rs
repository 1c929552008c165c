//! The tokio adapter (`rawq::adapters::tokio::AsyncQueue`) on `-b dv` on the emulated
//! ConnectX: the queue's completion channel is its fd. The inner test sends frames on the
//! looped-back wire and awaits them through the adapter (N of N), then awaits a second in
//! which nothing is sent: the runtime's thread (the emulated device runs in threads of its own)
//! spends under 50 ms of CPU in it, where a polling loop would spend the whole second.
#![cfg(all(feature = "mlx5", feature = "tokio"))]

use rawq_testkit as support;

use std::time::{Duration, Instant};

use rawq::adapters::tokio::AsyncQueue;
use rawq::{Backend, Port};
use support::emu::serial;
use support::emu_dv::{inner_only, run_inner, udp_frame};

/// This thread's CPU time (ns): the scheduler's own account.
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

const N: u32 = 1024;

#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_tokio_adapter_on_dv() {
    inner_only();
    let mut port = Port::builder(Backend::Dv {
        device: "mlx5_0".into(),
        port: 1,
    })
    .rule("udp dst-port 9000 -> queue 0".parse().expect("rule"))
    .open()
    .expect("open the DV port on the emulated mlx5_0");
    let q = port.take_queues().remove(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut aq = AsyncQueue::new(q).expect("dv's queue has a notification fd");
        let (mut tx, mut burst) = (Vec::with_capacity(32), Vec::with_capacity(64));
        let (mut sent, mut got) = (0u32, 0u32);
        while sent < N {
            aq.queue_mut().alloc_burst(&mut tx, 32).expect("buffers");
            for p in tx.iter_mut() {
                p.copy_from_slice(&udp_frame(sent, 64)).unwrap();
                sent += 1;
            }
            let end = Instant::now() + Duration::from_secs(5);
            while !tx.is_empty() && Instant::now() < end {
                aq.queue_mut().tx_burst(&mut tx);
            }
            assert!(tx.is_empty(), "the send ring stayed full for 5 s");
            while got < sent {
                let n = tokio::time::timeout(Duration::from_secs(5), aq.rx_burst(&mut burst, 64))
                    .await
                    .unwrap_or_else(|_| panic!("{got} of {sent} frames after 5 s"))
                    .expect("rx_burst");
                got += n as u32;
                burst.clear();
            }
        }
        assert_eq!(got, N);
        let (t0, w0) = (thread_cpu_ns(), Instant::now());
        let r = tokio::time::timeout(Duration::from_secs(1), aq.rx_burst(&mut burst, 64)).await;
        let (idle, wall) = (thread_cpu_ns() - t0, w0.elapsed());
        assert!(r.is_err(), "a frame came while none was sent");
        assert!(
            idle < 50_000_000,
            "the adapter ran {} ms of CPU in {} ms of silence: it polls",
            idle / 1_000_000,
            wall.as_millis()
        );
        println!(
            "tokio on dv: {got} of {N} frames, {} wake-ups; {} us of CPU in {} ms of silence",
            aq.wakeups(),
            idle / 1000,
            wall.as_millis()
        );
    });
}

#[test]
fn the_tokio_adapter_awaits_dv_frames_without_polling() {
    let _one = serial();
    let (out, _) = run_inner(
        &support::test_name(module_path!(), "inner_tokio_adapter_on_dv"),
        &[],
        &[],
    );
    let text = support::emu::text(&out);
    assert!(text.contains(&format!("{N} of {N} frames")), "{text}");
    for l in text.lines().filter(|l| l.contains("tokio on dv")) {
        eprintln!("{l}");
    }
}
