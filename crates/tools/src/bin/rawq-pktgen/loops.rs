//! The queue threads' loops: sending (with --txrx also receiving) and receiving.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use rawq::Queue;
use rawq_gen::{FrameSource, Pacer, Pattern, SeqTracker};

use crate::{measure, Outcome, Until};

/// Bursts between two clock reads of an unpaced send loop (the deadline and the end of the
/// active window are checked then; the stop flag every burst). At 32 packets a burst that is
/// about 2000 packets: well under a millisecond at the rates a queue reaches.
const CLOCK_EVERY: u32 = 64;

/// A paced send loop sleeps until its next frame when that is more than this away (and spins
/// otherwise).
const NAP: Duration = Duration::from_micros(20);

/// A send loop whose device has taken nothing for this long (its ring full, no completion:
/// a device thread starved of CPU, or stopped) naps [`NAP`] between tries instead of spinning.
/// Spinning there held a CPU (at nice -10 when paced) that the device needed: the load of a
/// busy machine moved to the device's CPU, and seed 9800 of the campaign (`-b model --txrx -r
/// 200kpps -n 100000`, 2.5 s when the machine is quiet) took 7 to 16 s beside two busy loops
/// and once more than its 18 s bound. A device that keeps up never leaves the ring full this
/// long, so a run at full speed is not slowed.
pub(crate) const STALL_NAP_AFTER: Duration = Duration::from_millis(1);

/// The least lateness a paced send loop makes up (see [`rawq_gen::Pacer::with_catch_up`]): at
/// least one burst's time at the rate, and at least this.
const CATCH_UP: Duration = Duration::from_millis(5);

/// Sends until stopped, `limit` packets (None = unlimited) have gone, at `pps` (None = max). With
/// `txrx`, also counts what arrives on the queue (and keeps receiving for `drain` after the
/// last send, for stragglers).
///
/// Unpaced, the loop reads the clock every [`CLOCK_EVERY`] bursts only, so the active window's
/// end is known to within that many bursts; paced, every burst (the pacer needs it).
#[inline(never)]
#[allow(clippy::too_many_arguments)] // the loop's knobs, plus the measurement half
pub(crate) fn tx_loop(
    mut q: Queue,
    src: &FrameSource,
    end: &Until,
    burst: usize,
    limit: Option<u64>,
    pps: Option<f64>,
    pattern: Pattern,
    txrx: bool,
    drain: Duration,
    qm: &mut measure::QueueMeasure,
) -> Outcome {
    // The window opens where the schedule starts and closes at the last packet taken.
    let begin = Instant::now();
    // A stall (the sender off its CPU) is made up within one burst's time or CATCH_UP, not
    // as a line-rate burst: the frames due before that are dropped from the schedule and
    // counted (`tx_late_skipped`), with the largest lateness (`tx_max_lag_ns`).
    let window = pps
        .filter(|p| *p > 0.0)
        .and_then(|p| Duration::try_from_secs_f64(burst as f64 / p).ok())
        .map_or(CATCH_UP, |b| b.max(CATCH_UP));
    let mut pacer = Pacer::starting_at(pps, begin)
        .with_pattern(pattern)
        .with_catch_up(window);
    if pacer.is_paced() {
        // Not fatal: the run goes on at the priority it had, its lateness measured.
        if let Err(e) = rawq_gen::raise_sender_priority() {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| say!("pktgen: {e}"));
        }
    }
    let (mut pkts, mut back) = (Vec::with_capacity(burst), Vec::with_capacity(burst));
    let mut out = Outcome {
        first: Some(begin),
        ..Outcome::default()
    };
    let mut seq = SeqTracker::default();
    let tso = qm.tso();
    let latency = qm.latency();
    // Start of the current stretch of full-ring bursts; of the bursts the device took nothing of.
    let mut full_since: Option<Instant> = None;
    let mut stalled_since: Option<Instant> = None;
    let mut receive = |q: &mut Queue, qm: &mut measure::QueueMeasure| {
        // Drain what is there (a few bursts at most per pass), so that returning frames do not
        // queue in the ring while this loop paces or sleeps: that wait would be measured as
        // latency.
        for _ in 0..16 {
            if !txrx || q.rx_burst(&mut back, burst) == 0 {
                break;
            }
            qm.on_rx(&back);
            let full = back.len() == burst;
            for p in back.drain(..) {
                if let Some(s) = qm.own_stamp(p.data()) {
                    seq.record_frame(s, p.len());
                }
            }
            if !full {
                break;
            }
        }
    };
    let stamps = src.stamps();
    let (stream, mut i, mut sent) = (q.index(), 0u64, 0u64);
    let mut not_sent = 0u64;
    let paced = pacer.is_paced();
    // Bursts since the last clock read; whether packets went since then (the window's end).
    let (mut tick, mut unmarked) = (0u32, false);
    let mut now = begin;
    loop {
        tick += 1;
        if paced || tick >= CLOCK_EVERY {
            tick = 0;
            now = Instant::now();
            if unmarked {
                out.active(now);
                unmarked = false;
            }
            if end.reached(now) || out.check(&mut q, end) {
                break;
            }
        } else if end.stop.load(Relaxed) {
            break;
        }
        if limit.is_some_and(|l| sent + not_sent >= l) {
            break;
        }
        receive(&mut q, qm);
        let room = limit.map_or(burst as u64, |l| (l - sent - not_sent).min(burst as u64));
        if paced {
            out.tx_late_skipped += pacer.skip_late(now);
        }
        let want = pacer.allowance(now, room as usize);
        // --on-link-down wait, the link down: a paced run keeps its schedule and counts the
        // frames due as not sent (they count against --count); an unpaced one naps.
        if want > 0 && crate::linkwatch::paused(0) {
            if paced {
                pacer.sent(want);
                not_sent += want as u64;
                crate::linkwatch::not_sent(want as u64);
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
            continue;
        }
        if want == 0 {
            q.reclaim();
            if out.check(&mut q, end) {
                break;
            }
            // Sleep rather than spin when the next frame is more than NAP away: a sender that
            // sleeps between its frames is woken when they are due even beside busy threads,
            // where one that spins is preempted for whole time slices and its frames go late
            // (the timer's slack makes some go a few tens of µs late, well within the
            // pacer's catch-up window).
            let wait = pacer.wait_hint(Instant::now());
            if wait > NAP {
                std::thread::sleep(wait.min(Duration::from_micros(100)));
            }
            continue;
        }
        // Packets left over from a full ring go first; top up with fresh ones from the queue's
        // own cache (the one its completions refill).
        let start = pkts.len();
        if want > start && q.alloc_burst(&mut pkts, want - start).is_err() {
            out.tx_pool_empty += 1;
            q.reclaim();
            if out.check(&mut q, end) {
                break;
            }
            continue;
        }
        // Without latency stamps the burst is written in one call (what varies per frame is
        // settled once a burst there); with them, frame by frame (1 in N carries the time).
        let fresh = &mut pkts[start..];
        let filled = if latency {
            let burst_ns = qm.burst_clock();
            fresh
                .iter_mut()
                .zip(i..)
                .try_for_each(|(p, k)| measure::fill(src, p, k, stream, qm.stamp(k, burst_ns)))
        } else {
            src.fill_burst(fresh, i, stream)
        };
        if let Err(e) = filled {
            say!("pktgen: queue {stream}: {e}");
            end.stop.store(true, Relaxed);
            pkts.clear();
            out.seq = seq;
            out.sent = sent;
            return out;
        }
        if tso.is_some() {
            // (Fresh packets carry no offload request: only --tso sets one.)
            fresh.iter_mut().for_each(|p| p.offload.tso_mss = tso);
        }
        i += fresh.len() as u64;
        let n = q.tx_burst(&mut pkts);
        qm.on_tx(n);
        pacer.sent(n);
        sent += n as u64;
        unmarked |= n > 0;
        out.tx_bursts += 1;
        // A full ring (or a failing queue): look at the queue's error now, not bursts later.
        // The clock is read only where a full stretch starts and ends.
        if !pkts.is_empty() {
            out.tx_ring_full_bursts += 1;
            if full_since.is_none() {
                full_since = Some(Instant::now());
                out.tx_ring_full_stretches += 1;
            }
            if out.check(&mut q, end) {
                break;
            }
            if n == 0 {
                let now = Instant::now();
                if now - *stalled_since.get_or_insert(now) >= STALL_NAP_AFTER {
                    std::thread::sleep(NAP);
                }
            } else {
                stalled_since = None;
            }
        } else {
            stalled_since = None;
            if let Some(t) = full_since.take() {
                out.tx_ring_full_ns += t.elapsed().as_nanos() as u64;
            }
        }
    }
    if let Some(t) = full_since.take() {
        out.tx_ring_full_ns += t.elapsed().as_nanos() as u64;
    }
    if unmarked {
        out.active(Instant::now());
    }
    // The queue's last word: the loop looks at errors only every CLOCK_EVERY bursts and at a
    // full ring, so one raised by the last bursts (a failed kick on a down link) is taken here.
    if out.failure.is_none() {
        out.check(&mut q, end);
    }
    // Frames not taken by the device are not sent: their stamps are reused by nobody.
    pkts.clear();
    let linger = if txrx {
        drain
    } else {
        Duration::from_millis(20)
    };
    end.sending.fetch_sub(1, Relaxed);
    settle(&mut q, sent, linger, end, qm, &mut receive);
    // Errors completed while settling (a send refused by the device is only seen when its
    // error CQE is polled, often after the loop) are said too.
    if out.failure.is_none() {
        out.check(&mut q, end);
    }
    if stamps {
        out.stamped_sent = sent;
    }
    out.tx_max_lag_ns = pacer.max_lag().as_nanos().min(u64::MAX as u128) as u64;
    out.sent = sent;
    out.seq = seq;
    out
}

/// After the send loop: lets the device finish what it has (backends that count at completion
/// count then), and receives for `linger` (--drain with --txrx) so that the last frames come
/// back, and until every queue's sends are completed (another queue's last frames may come to
/// this one); bounded at `linger` + one second without a completion, and `linger` + 10 s in all (a
/// device still completing a full ring, slowly as under valgrind on a loaded machine, is
/// waited for: its frames were sent, not dropped). The linger starts when every queue has left
/// its send loop (until then this queue receives: RSS may steer other queues' frames to it,
/// and a queue that went away would turn them into the device's no-buffer drops), or at a stop.
/// (A function of its own: callgrind tells the loop's instructions from these.)
#[inline(never)]
fn settle(
    q: &mut Queue,
    sent: u64,
    linger: Duration,
    end: &Until,
    qm: &mut measure::QueueMeasure,
    receive: &mut impl FnMut(&mut Queue, &mut measure::QueueMeasure),
) {
    while end.sending.load(Relaxed) > 0 && !end.stop.load(Relaxed) {
        q.reclaim();
        receive(q, qm);
    }
    let t = Instant::now();
    let settled = |q: &Queue| {
        let s = q.stats();
        s.tx_packets + s.tx_errors + s.tx_drops >= sent
    };
    let mut quiet_since = t;
    // Once this queue's sends are all completed it says so, and receives on until every
    // queue's are (or one gave up): the others' last frames may come to it.
    let mut mine = false;
    while t.elapsed() < linger + Duration::from_secs(10) {
        let busy = q.reclaim() > 0;
        receive(q, qm);
        let now = Instant::now();
        if busy {
            quiet_since = now;
        } else if now - t >= linger {
            if !mine && settled(q) {
                mine = true;
                end.unsettled.fetch_sub(1, Relaxed);
            }
            let all = end.unsettled.load(Relaxed) == 0;
            if (mine && all) || (!mine && now - quiet_since >= Duration::from_secs(1)) {
                break;
            }
        }
    }
    if !mine {
        end.unsettled.fetch_sub(1, Relaxed);
    }
    // What came in since the last pass (the last completions were seen before it).
    receive(q, qm);
}

/// After a signal a receiver keeps polling until its queue has given nothing for this long:
/// the frames the device has already delivered (or is delivering) are counted, as the device
/// counted them delivered.
pub(crate) const DRAIN_QUIET: Duration = Duration::from_millis(100);
/// ... and for this long at most (a sender that never stops).
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Counts a burst of received packets and their sequence stamps.
fn take(pkts: &mut Vec<rawq::Packet>, out: &mut Outcome, qm: &mut measure::QueueMeasure) {
    out.active(Instant::now());
    qm.on_rx(pkts);
    for p in pkts.drain(..) {
        if let Some(s) = qm.own_stamp(p.data()) {
            out.seq.record_frame(s, p.len());
        }
    }
}

/// Receives and counts until stopped; tracks sequence stamps. Stopped by a signal (not by -t or
/// a failure), it then counts what the queue still holds ([`drain`]).
pub(crate) fn rx_loop(
    mut q: Queue,
    end: &Until,
    burst: usize,
    rx_mode: rawq::queue::RxMode,
    qm: &mut measure::QueueMeasure,
) -> Outcome {
    let mut pkts = Vec::with_capacity(burst);
    let mut out = Outcome::default();
    let mut idle = 0u32;
    loop {
        if idle.is_multiple_of(64) && (end.reached(Instant::now()) || out.check(&mut q, end)) {
            break;
        }
        if rx_mode != rawq::queue::RxMode::Poll && rx_mode.sleeps_after(idle) {
            // --rx-mode interrupt / adaptive: sleep until the queue has work, 100 ms at most
            // so that the end of the run is seen in time.
            if let Err(e) = q.rx_wait(Some(Duration::from_millis(100))) {
                // The run ends with the cause (a backend that cannot notify, a device gone).
                end.stop.store(true, std::sync::atomic::Ordering::Relaxed);
                out.failure = Some(e);
                break;
            }
            idle = 0;
            if end.reached(Instant::now()) || out.check(&mut q, end) {
                break;
            }
        }
        if q.rx_burst(&mut pkts, burst) == 0 {
            // Busy-poll while traffic flows; after a quiet spell, nap so that an idle receiver
            // leaves its core to others (a ring of 8192 covers 100 µs up to 80 Mpps).
            idle += 1;
            if idle > 10_000 {
                std::thread::sleep(Duration::from_micros(100));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        idle = 0;
        take(&mut pkts, &mut out, qm);
    }
    if out.failure.is_none() && crate::interrupted() {
        drain(&mut q, &mut pkts, burst, &mut out, qm);
        out.check(&mut q, end);
    }
    out
}

/// Polls `q` until it has given nothing for [`DRAIN_QUIET`], [`DRAIN_LIMIT`] at most, counting
/// what it gives. (Not a hot path: it runs once, at the end of a run.)
fn drain(
    q: &mut Queue,
    pkts: &mut Vec<rawq::Packet>,
    burst: usize,
    out: &mut Outcome,
    qm: &mut measure::QueueMeasure,
) {
    let start = Instant::now();
    let mut last = start;
    loop {
        let now = Instant::now();
        if now - start >= DRAIN_LIMIT {
            break;
        }
        if q.rx_burst(pkts, burst) > 0 {
            last = now;
            take(pkts, out, qm);
        } else if now - last >= DRAIN_QUIET {
            break;
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
