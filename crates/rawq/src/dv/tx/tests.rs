use crate::dv::model::{ModelOptions, ModelPort, ModelWire};
use crate::dv::wire::cqe;
use crate::{Mempool, Packet};

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
    let pool = crate::mempool::test_pool(2048);
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
        // Taken out of the burst: what the device got (`n`), and the runts, dropped.
        let consumed = before - burst.len();
        let want_runts = (0..consumed)
            .filter(|&i| shapes[(round + i) % shapes.len()] == [8])
            .count();
        assert_eq!(
            consumed - n,
            want_runts,
            "only the runts are dropped up front"
        );
        runts += want_runts as u64;
        taken += n as u64;
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
    // The failed WQE's packets are failed (one error completion: one packet, or an eMPW
    // session's), the ones behind it dropped: each packet taken in one bucket. They were
    // counted in both (the fault campaign's seed 28 on the emulated NIC).
    assert!(s.tx_errors >= 1, "{s:?}");
    assert!(s.tx_drops >= runts, "{s:?}");
    assert_eq!(
        s.tx_packets + s.tx_drops + s.tx_errors,
        taken + runts,
        "{s:?}"
    );
    let l = s.tx_ledger();
    assert_eq!(l.double_counted, 0, "{l:?}");
    assert_eq!(l.in_flight, 0, "{l:?}");
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

/// Every WQE that does not ask for a completion asks for "only the first error" (DPDK
/// drivers/net/mlx5/mlx5_tx.h, `MLX5_COMP_ONLY_FIRST_ERR` in `mlx5_tx_cseg_init`): after a send
/// error the device then writes one error CQE, not one per flushed WQE, so the TX CQ cannot
/// overrun whatever the SQ holds. Checked on the ring bytes, for plain SENDs, chained SENDs,
/// inline headers and eMPW sessions.
#[test]
fn unsignaled_wqes_use_only_first_error_completion() {
    use crate::dv::tx::Tx;
    use crate::dv::wire::ctrl;
    use crate::stats::StatsWriter;
    for (min_inline, empw) in [(0, false), (18, false), (0, true)] {
        let pool = crate::mempool::test_pool(1024);
        let port = ModelPort::new(ModelOptions {
            sq_wqebbs: 256,
            min_inline,
            empw,
            wire: ModelWire::Sink,
            ..Default::default()
        })
        .unwrap();
        let (rings, keep) = port.rings(0, &pool).unwrap();
        let mut tx = Tx::new(&rings.sq, &rings.tx_cq, rings.lkey, &rings.caps, &pool).unwrap();
        let (stats, mut cache) = (StatsWriter::default(), pool.cache());
        let mut taken = 0;
        let shapes: [&[usize]; 4] = [&[60], &[10, 100], &[200], &[30, 40, 50]];
        for round in 0..6 {
            let mut burst: Vec<Packet> = (0..9)
                .map(|i| chained(&pool, shapes[(round + i) % shapes.len()]))
                .collect();
            taken += tx.burst(&mut burst, &stats, &mut cache);
        }
        assert!(taken > 40);
        // Walk the WQEs written, by their DS counts.
        let sq = rings.sq.buf.as_ptr();
        let (mut at, mut wqes, mut signaled) = (0usize, 0, 0);
        let len = rings.sq.wqe_cnt as usize * 64;
        // SAFETY: the SQ ring is `wqe_cnt` WQEBBs of live memory owned by `keep`; the model
        // was never run, so nothing else touches it while this slice lives.
        let ring = unsafe { std::slice::from_raw_parts(sq, len) };
        while at < tx.pi as usize {
            let c = ctrl::CtrlSeg::new_unchecked(&ring[at * 64..at * 64 + 16]);
            let ce = c.fm_ce_se() & ctrl::CE_MASK;
            assert!(
                ce == ctrl::CE_ONLY_FIRST_ERR || ce == ctrl::CE_ALWAYS,
                "inline {min_inline} empw {empw}: WQE at {at} has completion mode {ce:#x}"
            );
            signaled += (ce == ctrl::CE_ALWAYS) as u32;
            wqes += 1;
            at += ((c.ds() & 0x3f) as usize).div_ceil(4);
        }
        assert!(wqes > signaled && signaled > 0, "{wqes} {signaled}");
        tx.release_all(&mut cache);
        cache.flush();
        drop(keep);
        pool.flush_local_cache();
        assert_eq!(pool.available(), pool.capacity());
    }
}

/// A device that wants the L2 header inline (here the model with `min_inline: 18`) while rawq
/// was told it needs none: the first sends fail with a local QP operation error, and the
/// queue says what to do (set RAWQ_DV_MIN_INLINE=18) and stays down instead of recovering into
/// the same error forever. Every packet taken is counted as dropped; every buffer comes home.
#[test]
fn missing_inline_header_fails_clearly() {
    use crate::dv::queue::DvQueue;
    let pool = crate::mempool::test_pool(1024);
    let port = ModelPort::new(ModelOptions {
        sq_wqebbs: 64,
        min_inline: 18,
        wire: ModelWire::Sink,
        ..Default::default()
    })
    .unwrap();
    let (mut rings, keep) = port.rings(0, &pool).unwrap();
    // The wrong guess.
    rings.caps.min_inline = 0;
    // SAFETY: `rings` point into `keep`, which the queue owns until it is dropped, and
    // `rings.lkey` registers `pool` with this model port.
    let dq = unsafe { DvQueue::new(0, rings, &pool, port.recover_hook(0), Box::new(keep)) };
    let mut q = dq.unwrap().into_queue();
    let mut taken = 0;
    let mut err = None;
    for _ in 0..10 {
        let mut burst: Vec<Packet> = (0..8).map(|_| chained(&pool, &[60])).collect();
        taken += q.tx_burst(&mut burst) as u64;
        drop(burst);
        q.reclaim();
        port.process();
        if let Some(e) = q.take_error() {
            err.get_or_insert(e);
        }
    }
    let e = err.expect("the send error was reported").to_string();
    assert!(
        e.contains("RAWQ_DV_MIN_INLINE=18") && e.contains("stays down"),
        "{e}"
    );
    let s = q.stats();
    assert_eq!(s.tx_packets, 0, "{s:?}");
    // The first WQE failed (its packet in tx_errors), the rest were dropped with the queue.
    assert_eq!(s.tx_drops + s.tx_errors, taken, "{s:?}");
    assert_eq!(s.tx_ledger().double_counted, 0, "{s:?}");
    let mut more: Vec<Packet> = (0..4).map(|_| chained(&pool, &[60])).collect();
    assert_eq!(
        q.tx_burst(&mut more),
        0,
        "a queue that is down takes nothing"
    );
    drop(more);
    assert_eq!(port.counters().tx_error_cqes, 1);
    drop(q);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

/// `tx_burst` returns only what it handed to the device: packets it cannot send (runts, and
/// packets of another pool, whose buffers this queue's memory key does not cover and whose
/// indices mean nothing to its pool) leave the `Vec`, are counted in `tx_drops` and freed to
/// their own pool, and are not in the count returned. Every mode; every buffer of both pools
/// comes home.
#[test]
fn tx_burst_counts_only_what_the_device_took() {
    for (min_inline, empw) in [(0, false), (18, false), (0, true)] {
        let pool = crate::mempool::test_pool(1024);
        let other = crate::mempool::test_pool(64);
        let port = ModelPort::new(ModelOptions {
            sq_wqebbs: 256,
            min_inline,
            empw,
            wire: ModelWire::Sink,
            ..Default::default()
        })
        .unwrap();
        let mut q = port.queue(0, &pool).unwrap().into_queue();
        let (mut returned, mut consumed) = (0u64, 0u64);
        for round in 0..8 {
            let mut burst = Vec::new();
            for i in 0..12 {
                burst.push(match (round + i) % 4 {
                    0 => chained(&other, &[60]), // another pool
                    1 => chained(&pool, &[8]),   // a runt
                    2 => chained(&pool, &[10, 100]),
                    _ => chained(&pool, &[200]),
                });
            }
            let before = burst.len();
            returned += q.tx_burst(&mut burst) as u64;
            consumed += (before - burst.len()) as u64;
            drop(burst);
            port.process();
            q.reclaim();
            port.process();
        }
        for _ in 0..5 {
            q.reclaim();
            port.process();
        }
        let s = q.stats();
        let c = port.counters();
        assert_eq!(consumed, 96, "inline {min_inline} empw {empw}");
        assert_eq!(s.tx_drops, 48, "{s:?}");
        assert_eq!(returned, 48, "inline {min_inline} empw {empw}: {s:?}");
        assert_eq!(s.tx_packets, returned, "{s:?}");
        assert_eq!(c.tx_frames, returned, "{c:?}");
        assert_eq!(c.tx_error_cqes, 0, "{c:?}");
        drop(q);
        pool.flush_local_cache();
        other.flush_local_cache();
        assert_eq!(pool.available(), pool.capacity());
        assert_eq!(other.available(), other.capacity());
    }
}

/// A TCP/IPv4 frame with `payload` bytes after a 20-byte TCP header; the payload bytes carry
/// `id`, which tells the frames apart on the wire.
fn tcp_frame(payload: usize, id: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0];
    f.extend_from_slice(&((40 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[0x30, 0x39, 0x23, 0x28, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10]);
    f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    f.extend(std::iter::repeat_n(id, payload));
    f
}

/// A VLAN insertion and a TSO super-frame mixed into a burst of plain packets (which the send
/// loops write without looking at each request) still get their offload, so does a checksum
/// request among them, and a packet whose insertion was asked then cleared goes out plain, in
/// each WQE format.
fn mixed_offloads(min_inline: u16, empw: bool) {
    const TCI: u16 = 0x2005;
    const MSS: u16 = 100;
    let pool = crate::mempool::test_pool(1024);
    let port = ModelPort::new(ModelOptions {
        min_inline,
        empw,
        wire: ModelWire::Loopback,
        ..Default::default()
    })
    .unwrap();
    let mut q = port.queue(0, &pool).unwrap().into_queue();
    let (vlan_at, tso_at, cleared_at, csum_at) = (3u8, 6u8, 9u8, 11u8);
    let mut want: Vec<Vec<u8>> = Vec::new();
    let mut burst = Vec::new();
    for id in 1..=12u8 {
        let tso = id == tso_at;
        let f = tcp_frame(if tso { 350 } else { 40 }, id);
        let mut p = pool.alloc().unwrap();
        p.copy_from_slice(&f).unwrap();
        if id == vlan_at {
            p.offload.vlan_insert = Some(TCI);
            let mut t = f[..12].to_vec();
            t.extend_from_slice(&[0x81, 0x00]);
            t.extend_from_slice(&TCI.to_be_bytes());
            t.extend_from_slice(&f[12..]);
            want.push(t);
        } else if tso {
            p.offload.tso_mss = Some(MSS);
        } else if id == csum_at {
            // Asked of the device, checked against rawq's software fill.
            p.offload.l3_csum = true;
            let mut f = f;
            crate::packet::fill_checksums(&mut f, true, false);
            want.push(f);
        } else {
            if id == cleared_at {
                p.offload.vlan_insert = Some(TCI);
                p.offload.vlan_insert = None;
            }
            want.push(f);
        }
        burst.push(p);
    }
    assert_eq!(q.tx_burst(&mut burst), 12, "all taken");
    if let Some(e) = q.take_error() {
        panic!("{e}");
    }
    let mut got: Vec<Vec<u8>> = Vec::new();
    for _ in 0..20 {
        port.process();
        q.reclaim();
        let mut v = Vec::new();
        q.rx_burst(&mut v, 64);
        got.extend(v.iter().map(|p| p.data().to_vec()));
    }
    let (segs, rest): (Vec<_>, Vec<_>) = got.into_iter().partition(|f| f.last() == Some(&tso_at));
    assert_eq!(segs.len(), 4, "350 bytes in segments of {MSS}");
    for s in &segs {
        assert!(s.len() <= 54 + MSS as usize, "segment of {} bytes", s.len());
    }
    assert_eq!(rest, want, "inline {min_inline}, eMPW {empw}");
}

#[test]
fn mixed_offloads_no_inline() {
    mixed_offloads(0, false);
}

#[test]
fn mixed_offloads_inline18() {
    mixed_offloads(18, false);
}

#[test]
fn mixed_offloads_empw() {
    mixed_offloads(0, true);
}

/// A requester CQE naming no WQE still outstanding (here: the device completes WQEs the driver
/// already dropped with a reset, as a device still working through the old ring can) is not a
/// packet: it must not be counted in `tx_errors`, or the send ledger closes one over what was
/// taken (the fault campaign's seed 28, `-b dv -q 2 --txrx` with an error completion, on some
/// runs).
#[test]
fn stale_completion_is_not_a_failed_packet() {
    use crate::dv::tx::Tx;
    use crate::stats::StatsWriter;
    let pool = crate::mempool::test_pool(256);
    let port = ModelPort::new(ModelOptions {
        sq_wqebbs: 64,
        wire: ModelWire::Sink,
        ..Default::default()
    })
    .unwrap();
    let (rings, keep) = port.rings(0, &pool).unwrap();
    let mut tx = Tx::new(&rings.sq, &rings.tx_cq, rings.lkey, &rings.caps, &pool).unwrap();
    let (stats, mut cache) = (StatsWriter::default(), pool.cache());
    let mut burst: Vec<Packet> = (0..40).map(|_| chained(&pool, &[60])).collect();
    let taken = tx.burst(&mut burst, &stats, &mut cache) as u64;
    assert!(taken > 0);
    // The driver drops everything outstanding (as after an error it recovers from) ...
    tx.reset(&stats, &mut cache);
    // ... while the device still completes the WQEs it was given: their CQEs name WQEs the
    // driver no longer has.
    port.process();
    tx.poll(&stats, &mut cache);
    let s = stats.snapshot();
    assert_eq!(
        s.tx_packets + s.tx_drops + s.tx_errors,
        taken,
        "a stale completion counted as a packet: {s:?}"
    );
    tx.release_all(&mut cache);
    cache.flush();
    drop(keep);
    pool.flush_local_cache();
}
