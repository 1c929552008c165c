//! A queue dropped while the device still holds its sends (issue 32, campaign seeds 9855 and
//! 9936): every send it posted ends in exactly one of sent, not sent at the close, or (where the
//! device cannot say) fate unknown, never counted not sent and received too; and the drop waits
//! for a device that is slow but keeps completing.
//!
//! Deterministic: the device is stepped by the test, and the moment the campaign's scheduler
//! made (the device thread taken off its CPU in the middle of its round, long enough for the
//! drop's wait to give up) is made here with a hold on the device's round
//! (`Hw::hold_rounds`), released only once the drop waits for the device's stop
//! (`Hw::commands_waiting`).
#![cfg(feature = "mlx5")]

use std::time::{Duration, Instant};

use rawq::dv::model::{ModelOptions, ModelPort, ModelWire};
use rawq::{HugePages, Mempool, MempoolConfig, Packet, Queue};

const BOUND: Duration = Duration::from_secs(60);

fn pool() -> Mempool {
    Mempool::new(&MempoolConfig {
        buffers: 4096,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .expect("pool")
}

fn opts(sq: u32) -> ModelOptions {
    ModelOptions {
        sq_wqebbs: sq,
        rq_wqes: 1024,
        empw: false,
        wire: ModelWire::Sink,
        ..Default::default()
    }
}

fn frames(pool: &Mempool, n: u32) -> Vec<Packet> {
    (0..n)
        .map(|i| {
            let mut f = vec![0u8; 128];
            f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
            f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            f[14..18].copy_from_slice(&i.to_be_bytes());
            let mut p = pool.alloc().expect("buffer");
            p.copy_from_slice(&f).expect("fits");
            p
        })
        .collect()
}

/// Everything port `b` received, stepping both ports until nothing more comes.
fn receive_all(a: &ModelPort, b: &ModelPort, rx: &mut Queue) -> u64 {
    let (mut got, mut v) = (0u64, Vec::new());
    let mut idle = 0;
    while idle < 8 {
        a.process();
        b.process();
        v.clear();
        let n = rx.rx_burst(&mut v, 256);
        got += n as u64;
        idle = if n == 0 { idle + 1 } else { 0 };
    }
    got
}

/// Posts `n` sends on port `a` with the device's round held, drops the queue (its wait gives
/// up: the device completes nothing), releases the round once the drop waits for the device's
/// stop, and checks the queue's ledger against what the other port received.
fn close_while_the_device_is_held(per_round: u32, n: u32) -> rawq::TxLedger {
    let pool = pool();
    let (a, b) = ModelPort::pair(opts(256), opts(256)).expect("ports");
    let mut tx = a.queue(0, &pool).expect("tx").into_queue();
    let mut rx = b.queue(0, &pool).expect("rx").into_queue();
    let (sqn, ..) = a.queue_objects(0).expect("queue 0");
    a.hw().limit_tx_per_round(sqn, per_round);
    let stats = tx.stats_reader();

    // The device thread starts a round and is taken off its CPU inside it.
    let hold = a.hw().hold_rounds();
    let dev = {
        let a = a.clone();
        std::thread::spawn(move || a.process())
    };
    assert!(hold.wait_held(BOUND), "the device's round never started");
    let mut v = frames(&pool, n);
    assert_eq!(tx.tx_burst(&mut v), n as usize, "the ring takes them all");

    // The drop waits for completions that do not come, gives up, and stops the device's SQ:
    // a command the held device answers only after its round.
    let t0 = Instant::now();
    let closer = std::thread::spawn(move || drop(tx));
    while a.hw().commands_waiting() == 0 {
        assert!(
            t0.elapsed() < BOUND,
            "the drop never asked the device to stop"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The device gets its CPU back, finishes its round (sends what it fetched), then stops.
    hold.release();
    dev.join().expect("the device's round");
    closer.join().expect("the drop");

    let received = receive_all(&a, &b, &mut rx);
    let l = stats.snapshot().tx_ledger();
    let c = a.counters();
    assert!(l.closes(), "{l:?}");
    assert_eq!(l.double_counted, 0, "{l:?}");
    assert_eq!(l.taken, n as u64, "{l:?}");
    assert_eq!(
        l.sent, c.tx_frames,
        "the queue counts as sent what the device put on the wire: {l:?} {c:?}"
    );
    assert_eq!(
        received, l.sent,
        "received what the queue counts sent, no more: {l:?}"
    );
    assert_eq!(
        l.sent + l.unsent_at_close,
        n as u64,
        "a frame received is not also counted not sent: {l:?}"
    );
    assert_eq!(
        (l.dropped, l.failed, l.fate_unknown, l.in_flight),
        (0, 0, 0, 0),
        "the software device says exactly what it sent: {l:?}"
    );
    drop(rx);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity(), "buffers leaked");
    l
}

/// Seeds 9855 and 9936: the device sent (and completed) every send after the drop's wait gave
/// up on them. Before the fix the queue counted them dropped (pktgen's `tx_refused`) and the
/// receiver counted them received.
#[test]
fn sends_the_device_made_after_the_wait_gave_up_are_sent_not_dropped() {
    let l = close_while_the_device_is_held(0, 48);
    assert_eq!((l.sent, l.unsent_at_close), (48, 0), "{l:?}");
}

/// The device's round carried out only some of the sends before the stop: those are sent, the
/// rest "not sent: the queue closed before the device sent them", as the device says.
#[test]
fn sends_the_device_never_started_are_not_sent_at_the_close() {
    let l = close_while_the_device_is_held(10, 48);
    assert_eq!((l.sent, l.unsent_at_close), (10, 38), "{l:?}");
}

/// A device that completes slowly but steadily (one send a round, a round a millisecond: a
/// completion every 32 sends, some 35 ms apart, the 256 in well over `DRAIN_STALL`'s 250 ms) is
/// waited for: every send is sent, none given up on.
#[test]
fn the_drop_waits_for_a_slow_device_that_keeps_completing() {
    let pool = pool();
    let a = ModelPort::new(opts(256)).expect("port");
    let tx = a.queue(0, &pool).expect("tx");
    let mut tx = tx.into_queue();
    let (sqn, ..) = a.queue_objects(0).expect("queue 0");
    a.hw().limit_tx_per_round(sqn, 1);
    let stats = tx.stats_reader();
    // Bursts of 32: the queue asks for a completion on a burst's last WQE once 32 WQEBBs (an
    // eighth of the ring) went without one.
    for _ in 0..8 {
        let mut v = frames(&pool, 32);
        assert_eq!(tx.tx_burst(&mut v), 32);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dev = {
        let (a, stop) = (a.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                a.process();
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let t0 = Instant::now();
    drop(tx);
    let took = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    dev.join().expect("the device");
    let l = stats.snapshot().tx_ledger();
    assert!(l.closes(), "{l:?}");
    assert_eq!(
        (l.sent, l.unsent_at_close, l.dropped),
        (256, 0, 0),
        "the drop gave up on a device that kept completing (after {took:?}): {l:?}"
    );
    assert_eq!(a.counters().tx_frames, 256);
    assert!(
        took > Duration::from_millis(250),
        "256 rounds of at least 1 ms each took {took:?}: the device was not slow"
    );
}
