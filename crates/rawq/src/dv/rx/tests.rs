use super::*;

use std::cell::RefCell;

use crate::mempool::test_pool;

thread_local! {
    /// Device work a test runs right after each RQ doorbell record store (a device may run at
    /// any instant; this is the instant that shows the ordering of the two doorbell records).
    static AFTER_RQ_DB: RefCell<Option<Box<dyn FnMut()>>> = const { RefCell::new(None) };
}

/// Called by `Rx::ring_rq` after the RQ doorbell record store (tests only).
pub(super) fn after_rq_doorbell() {
    AFTER_RQ_DB.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f();
        }
    });
}

/// A model port of 64 cyclic RQ WQEs on a wire that takes nothing back, its CQEs compressed
/// with `comp`.
fn sink_port(comp: Option<MiniCqeFormat>) -> crate::dv::model::ModelPort {
    use crate::dv::model::{ModelOptions, ModelPort, ModelWire};
    ModelPort::new(ModelOptions {
        rq_wqes: 64,
        wire: ModelWire::Sink,
        cqe_compression: comp,
        ..Default::default()
    })
    .unwrap()
}

/// Queue 0 of `port` driven directly: its rings, the box that keeps their memory alive, its
/// recovery hook, and an `Rx` on them, its RQ posted full from `cache`.
fn rx_on(
    port: &crate::dv::model::ModelPort,
    pool: &crate::Mempool,
    cache: &mut PoolCache,
) -> (
    crate::dv::rings::QueueRings,
    Box<dyn std::any::Any + Send>,
    Box<dyn crate::dv::queue::Recover>,
    Rx,
) {
    let (rings, keep) = port.rings(0, pool).unwrap();
    let hook = port.recover_hook(0);
    let mut rx = Rx::new(
        &rings.rq,
        &rings.rx_cq,
        rings.lkey,
        rings.caps.cqe_compression,
        pool,
    )
    .unwrap();
    rx.refill(cache);
    (rings, keep, hook, rx)
}

/// An IPv4/UDP frame from source port `sport` with a valid IPv4 header checksum.
fn udp_frame(sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let sum: u32 = (14..34)
        .step_by(2)
        .map(|i| u16::from_be_bytes([f[i], f[i + 1]]) as u32)
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&2000u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

/// Every packet carries the metadata the device reported (here: a verified IPv4 header
/// checksum and the flow's RSS hash) and its bytes, over several bursts, so that the reposting
/// loop and the ring wrap are both crossed.
#[test]
fn received_packets_carry_their_metadata() {
    let pool = test_pool(512);
    let port = sink_port(None);
    let mut q = port.queue(0, &pool).unwrap().into_queue();
    let mut got = Vec::new();
    let mut want = Vec::new();
    let mut out = Vec::with_capacity(32);
    for round in 0..10u16 {
        for k in 0..40u16 {
            let f = udp_frame(1000 + round * 40 + k);
            port.inject_frame(&f);
            want.push(f);
        }
        port.process();
        for _ in 0..4 {
            q.rx_burst(&mut out, 32);
            for p in out.drain(..) {
                got.push((p.to_vec(), p.meta));
            }
        }
    }
    assert_eq!(got.len(), 400);
    for (_, m) in &got {
        assert!(m.l3_csum_ok() && m.rss_hash() != 0, "{m:?}");
        assert_eq!(m.vlan_tci(), None);
        assert_eq!(m.flow_tag(), 0, "no rules, no tag");
    }
    assert_eq!(got.into_iter().map(|(b, _)| b).collect::<Vec<_>>(), want);
    drop(q);
    drop(port);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

/// The metadata a packet keeps raw decodes to what the CQE views (`wire::cqe`, checked
/// against mlx5dv.h by `tests/dv/oracle.rs`) say, for every value of the two flag bytes, with
/// a VLAN TCI, an RSS hash and a flow tag (whose top byte, not part of the tag, is set).
#[test]
fn raw_meta_decodes_like_the_cqe_views() {
    for b28 in 0..=255u8 {
        for b29 in 0..=255u8 {
            let mut c = [0u8; 64];
            c[cqe::field::HDS_IP_EXT] = b28;
            c[cqe::field::L4_HDR_TYPE_ETC] = b29;
            let k = b28 as u32 * 256 + b29 as u32;
            c[cqe::field::VLAN_INFO].copy_from_slice(&(k as u16 ^ 0x5a5a).to_be_bytes());
            c[cqe::field::RX_HASH].copy_from_slice(&k.wrapping_mul(0x9e37_79b9).to_be_bytes());
            c[cqe::field::SOP_DROP_QPN].copy_from_slice(&(0xab00_0000 | k).to_be_bytes());
            let ts = (k as u64) << 40 | 0x0001_0203_0405;
            c[cqe::field::TIMESTAMP].copy_from_slice(&ts.to_be_bytes());
            let q = Cqe::new_unchecked(&c);
            let l3 = q.l3_type();
            let want = (
                (l3 == cqe::L3_IPV4 && b28 & cqe::L3_OK != 0) || l3 == cqe::L3_IPV6,
                q.l4_type() != cqe::L4_NONE && b28 & cqe::L4_OK != 0,
            );
            let m = meta_of(&c, q.rx_hash());
            assert_eq!((m.l3_csum_ok(), m.l4_csum_ok()), want, "{b28:#x} {b29:#x}");
            let vlan = (b29 & cqe::CV != 0).then_some(q.vlan_info());
            assert_eq!(m.vlan_tci(), vlan, "{b28:#x} {b29:#x}");
            assert_eq!(m.rss_hash(), q.rx_hash());
            assert_eq!(m.flow_tag(), q.flow_tag());
            assert_eq!(m.hw_timestamp(), Some(q.timestamp()));
            // The fast path's raw copy is the same metadata.
            // SAFETY: `c` is 64 readable bytes.
            let raw = unsafe { fast::meta_at(c.as_ptr()) };
            assert_eq!(raw, m);
            assert_eq!(format!("{raw:?}"), format!("{m:?}"));
        }
    }
}

/// `Rx::reset` drains the CQ the way `poll` walks it: a compressed session (title, then
/// mini-CQE arrays in the slots after it, which carry no owner bit) is skipped whole, by the
/// title's count, as DPDK (mlx5_rx.c, the `zip` handling in `mlx5_rx_poll_len`) and VPP
/// (src/plugins/rdma/input.c, `cq_ci += n_mini_cqes` and `compressed_cqe_reset_owner`) consume
/// it. Stepping one slot at a time lands on mini-CQE arrays and leaves the consumer index
/// inside a session, after which no completion is ever seen again. Here the CQ holds sessions
/// (one of them half consumed) when the RQ is reset; every frame sent after the reset arrives,
/// over several laps of the CQ.
#[test]
fn reset_drains_compressed_sessions_whole() {
    // One flow (so that both mini-CQE formats compress), a sequence number in the payload.
    let tagged = |seq: u16| {
        let mut f = udp_frame(7);
        f[42..44].copy_from_slice(&seq.to_be_bytes());
        f
    };
    for fmt in [MiniCqeFormat::Hash, MiniCqeFormat::CsumStrideIdx] {
        let pool = test_pool(512);
        let port = sink_port(Some(fmt));
        let mut cache = pool.cache();
        let (_rings, keep, mut hook, mut rx) = rx_on(&port, &pool, &mut cache);
        let stats = StatsWriter::default();
        let mut out = Vec::with_capacity(64);
        let mut got = 0u32;
        for round in 0..12u16 {
            // Sessions of 20 completions (the same flow compresses), 3 mini-CQE arrays each.
            for k in 0..40u16 {
                port.inject_frame(&tagged(round * 100 + k));
            }
            port.process();
            // Take 5 completions (half a session), then reset with the rest still in the CQ.
            let (n, err) = rx.poll(&mut out, 5, &stats, &mut cache);
            assert!(err.is_none());
            assert_eq!(n, 5, "{fmt:?} round {round}: the CQ was left mid-session");
            out.clear();
            rx.zero_dbrec();
            hook.recover_rq().unwrap();
            rx.reset(&mut cache);
            rx.refill(&mut cache);
            // After the reset: every frame arrives.
            for k in 0..30u16 {
                port.inject_frame(&tagged(round * 100 + 50 + k));
            }
            port.process();
            let mut seen = Vec::new();
            for _ in 0..4 {
                let (n, err) = rx.poll(&mut out, 64, &stats, &mut cache);
                assert!(err.is_none());
                got += n as u32;
                seen.extend(out.drain(..).map(|p| {
                    let d = p.to_vec();
                    u16::from_be_bytes([d[42], d[43]])
                }));
                rx.refill(&mut cache);
            }
            let want: Vec<u16> = (0..30).map(|k| round * 100 + 50 + k).collect();
            assert_eq!(seen, want, "{fmt:?} round {round}");
        }
        assert_eq!(got, 12 * 30);
        hook.quiesce();
        rx.release_all(&mut cache);
        cache.flush();
        drop(keep);
        pool.flush_local_cache();
        assert_eq!(pool.available(), pool.capacity(), "{fmt:?}");
    }
}

/// Packets decompressed from checksum-format mini-CQEs carry no RSS hash of their own: they
/// report none (0), not the title's (kernel mlx5e, `mlx5e_decompress_cqe_no_hash`); packets
/// from plain CQEs keep the device's hash.
#[test]
fn checksum_format_mini_cqes_report_no_rss_hash() {
    let pool = test_pool(512);
    let port = sink_port(Some(MiniCqeFormat::CsumStrideIdx));
    let mut q = port.queue(0, &pool).unwrap().into_queue();
    let (mut hashed, mut unhashed) = (0u64, 0u64);
    let mut out = Vec::with_capacity(64);
    for round in 0..8u16 {
        // A lone frame (a plain CQE), then a run of one flow (a compressed session).
        port.inject_frame(&udp_frame(round));
        port.process();
        for _ in 0..20 {
            port.inject_frame(&udp_frame(9));
        }
        port.process();
        for _ in 0..3 {
            q.rx_burst(&mut out, 64);
            for p in out.drain(..) {
                if p.meta.rss_hash() == 0 {
                    unhashed += 1;
                } else {
                    hashed += 1;
                }
            }
        }
    }
    let c = port.counters();
    assert!(c.mini_cqes > 0, "{c:?}");
    assert_eq!(hashed + unhashed, 8 * 21);
    assert_eq!(unhashed, c.mini_cqes, "{c:?}");
    drop(q);
    drop(port);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

/// A striding RQ WQE the device completes with LOCAL_LENGTH_ERR (here: one whose strides do not
/// add up to the WQE size, which the model refuses that way) fails that WQE only, as DPDK
/// handles it (mlx5_rx.c, `mlx5_rx_err_handle`): the driver counts it, retires the WQE with its
/// buffers still posted, and receives every later frame; every buffer comes home.
#[test]
fn striding_length_error_skips_one_wqe() {
    striding_length_error_case(None);
    striding_length_error_case(Some(MiniCqeFormat::CsumStrideIdx));
}

fn striding_length_error_case(fmt: Option<crate::dv::rings::MiniCqeFormat>) {
    use crate::dv::model::{ModelOptions, ModelPort, ModelWire, RxKind};
    use crate::dv::rings::Striding;
    let pool = crate::mempool::test_pool(256);
    let port = ModelPort::new(ModelOptions {
        rq_wqes: 4,
        rx: RxKind::Striding(Striding {
            log_num_strides: 3,
            log_stride_size: 8,
            two_byte_shift: false,
        }),
        wire: ModelWire::Sink,
        cqe_compression: fmt,
        ..Default::default()
    })
    .unwrap();
    let (rings, keep) = port.rings(0, &pool).unwrap();
    let mut hook = port.recover_hook(0);
    let mut cache = pool.cache();
    let stats = StatsWriter::default();
    let mut rx = Rx::new(&rings.rq, &rings.rx_cq, rings.lkey, fmt, &pool).unwrap();
    rx.refill(&mut cache);
    // WQE 1's first stride claims half its size: the device cannot use the WQE.
    let set_first_stride = |rx: &Rx, len: u32| {
        DataSeg::new_unchecked(&mut rx.wqe(1)[16..32]).set_byte_count(len);
    };
    set_first_stride(&rx, 128);
    let mut out = Vec::with_capacity(64);
    let mut seen = Vec::new();
    let tagged = |seq: u16| {
        let mut f = udp_frame(7);
        f.resize(200, 0);
        f[42..44].copy_from_slice(&seq.to_be_bytes());
        f
    };
    let mut poll = |rx: &mut Rx, cache: &mut PoolCache, seen: &mut Vec<u16>| {
        for _ in 0..4 {
            let (_, err) = rx.poll(&mut out, 64, &stats, cache);
            assert!(err.is_none(), "a length error is not a queue failure");
            seen.extend(out.drain(..).map(|p| {
                let d = p.to_vec();
                u16::from_be_bytes([d[42], d[43]])
            }));
            rx.refill(cache);
        }
    };
    // 8 frames of 200 bytes fill WQE 0 (one stride each); the 9th meets WQE 1 and is lost.
    for seq in 0..9 {
        port.inject_frame(&tagged(seq));
    }
    port.process();
    poll(&mut rx, &mut cache, &mut seen);
    assert_eq!(seen, (0..8).collect::<Vec<_>>(), "{fmt:?}");
    assert_eq!(stats.snapshot().rx_errors, 1);
    assert_eq!(port.counters().rx_error_cqes, 1);
    // The driver put WQE 1 back as it was; repair it before the device comes round to it.
    set_first_stride(&rx, 256);
    // Later frames: every one arrives, over several laps of the 4 WQEs.
    seen.clear();
    for round in 0..10u16 {
        for k in 0..12 {
            port.inject_frame(&tagged(100 + round * 12 + k));
        }
        port.process();
        poll(&mut rx, &mut cache, &mut seen);
    }
    assert_eq!(seen, (100..220).collect::<Vec<_>>(), "{fmt:?}");
    assert_eq!(stats.snapshot().rx_errors, 1);
    let c = port.counters();
    assert_eq!(
        fmt.is_some(),
        c.mini_cqes > 0,
        "compressed exactly when asked: {c:?}"
    );
    hook.quiesce();
    rx.release_all(&mut cache);
    cache.flush();
    drop(keep);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

/// A receive CQ exactly as large as the RQ, under sustained traffic, with the device running
/// right after every RQ doorbell record: it never overruns. The driver must release the CQ slots
/// (publish the CQ consumer index) before it reposts the WQEs whose completions go there, as
/// DPDK does (drivers/net/mlx5/mlx5_rx.c `mlx5_rx_burst`: the CQ doorbell record, a barrier,
/// then the RQ's). The other way round, the device sees 64 fresh WQEs, frames waiting and a CQ
/// it thinks is full: overrun, CQ error, the queue dead.
#[test]
fn a_cq_as_large_as_the_rq_never_overruns() {
    use crate::dv::model::{ModelOptions, ModelPort, ModelWire};
    use std::rc::Rc;
    let pool = test_pool(1024);
    let port = Rc::new(
        ModelPort::new(ModelOptions {
            rq_wqes: 64,
            rxcq_entries: 64,
            wire: ModelWire::Sink,
            wire_capacity: 256,
            flow_control: true,
            ..Default::default()
        })
        .unwrap(),
    );
    let mut q = port.queue(0, &pool).unwrap().into_queue();
    let p2 = port.clone();
    AFTER_RQ_DB.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            p2.process();
        }))
    });
    let mut out = Vec::with_capacity(64);
    let mut got = 0usize;
    let mut sent = 0usize;
    for round in 0..40u16 {
        // Keep frames waiting on the wire (flow control holds them) beyond what the RQ takes.
        while sent < (round as usize + 2) * 64 {
            port.inject_frame(&udp_frame(sent as u16));
            sent += 1;
        }
        port.process();
        q.rx_burst(&mut out, 64);
        got += out.len();
        out.clear();
    }
    AFTER_RQ_DB.with(|h| *h.borrow_mut() = None);
    let k = port.counters();
    assert_eq!(k.cq_overruns, 0, "CQ overrun: {k:?}");
    assert_eq!(got, 40 * 64, "every burst a full ring");
    drop(q);
}

/// Compressed sessions on a cyclic RQ of one buffer per WQE (the in-place path, `run_zip`):
/// every packet is the one a port without compression receives for the same frames, with the
/// same bytes, RSS hash and checksum flags, in order, over sessions longer than the bursts
/// (resumed mid-session) and across the ring's wrap; every buffer comes home.
#[test]
fn compressed_sessions_give_what_plain_cqes_give() {
    let pool = test_pool(1024);
    let receive = |comp: Option<MiniCqeFormat>| {
        let port = sink_port(comp);
        let mut q = port.queue(0, &pool).unwrap().into_queue();
        let mut got = Vec::new();
        let mut out = Vec::with_capacity(64);
        for round in 0..12u16 {
            // Runs of 1 to 48 frames, several flows (each its own hash) and lengths.
            for k in 0..(1 + round * 4) {
                let mut f = udp_frame(100 + k % 5);
                f.resize(64 + (k as usize % 7) * 13, k as u8);
                port.inject_frame(&f);
            }
            port.process();
            for _ in 0..16 {
                q.rx_burst(&mut out, 7);
                for p in out.drain(..) {
                    let m = p.meta;
                    got.push((p.to_vec(), m.rss_hash(), m.l3_csum_ok(), m.l4_csum_ok()));
                }
            }
        }
        let c = port.counters();
        drop(q);
        drop(port);
        (got, c)
    };
    let (plain, _) = receive(None);
    let (zipped, c) = receive(Some(MiniCqeFormat::Hash));
    assert!(c.mini_cqes > 100, "the model compressed little: {c:?}");
    assert_eq!(plain.len(), (0..12).map(|r| 1 + r * 4).sum::<usize>());
    assert_eq!(zipped.len(), plain.len());
    for (i, (a, b)) in plain.iter().zip(&zipped).enumerate() {
        assert_eq!(a, b, "packet {i}");
    }
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

/// Compressed sessions on a full ring of one buffer per WQE: the poll itself posts each
/// completed WQE again (`run_zip` with `REPOST`) and publishes it, so that after every poll,
/// without a refill, every WQE is posted (producer = consumer + ring size, the doorbell
/// record saying so), each WQE's data segment points at the buffer the driver holds for it,
/// no buffer is held twice, and the frames arrive in order in those buffers over bursts that
/// stop mid-session and over many laps of the ring.
#[test]
fn compressed_polls_repost_every_wqe_across_the_wrap() {
    let tagged = |seq: u32| {
        let mut f = udp_frame(9);
        f[42..46].copy_from_slice(&seq.to_be_bytes());
        f
    };
    for fmt in [MiniCqeFormat::Hash, MiniCqeFormat::CsumStrideIdx] {
        let pool = test_pool(512);
        let port = sink_port(Some(fmt));
        let mut cache = pool.cache();
        let (rings, keep, mut hook, mut rx) = rx_on(&port, &pool, &mut cache);
        let stats = StatsWriter::default();
        let geo = pool.shared().geometry();
        let (mut sent, mut got) = (0u32, 0u32);
        let mut out = Vec::with_capacity(64);
        for round in 0..40u32 {
            // 1 to 64 frames a round (at most a ring's worth: nothing is dropped).
            for _ in 0..1 + (round * 13) % 64 {
                port.inject_frame(&tagged(sent));
                sent += 1;
            }
            port.process();
            loop {
                let (n, err) = rx.poll(&mut out, 7, &stats, &mut cache);
                assert!(err.is_none());
                for p in out.drain(..) {
                    let d = p.to_vec();
                    assert_eq!(u32::from_be_bytes([d[42], d[43], d[44], d[45]]), got);
                    got += 1;
                }
                // No refill here: the poll posted what it took.
                assert_eq!(
                    rx.pi,
                    rx.ci.wrapping_add(rx.wqe_cnt),
                    "{fmt:?} round {round}"
                );
                // SAFETY: the doorbell record of the RQ, alive with `keep`.
                let db = u32::from_be(unsafe { std::ptr::read_volatile(rings.rq.dbrec.as_ptr()) });
                assert_eq!(db, rx.pi & 0xffff, "{fmt:?} round {round}: doorbell record");
                let mut held: Vec<u32> = rx.bufs.to_vec();
                for w in 0..rx.wqe_cnt {
                    let b = held[w as usize];
                    assert_ne!(b, EMPTY, "{fmt:?} round {round}: WQE {w} has no buffer");
                    let seg = DataSeg::new_unchecked(&rx.wqe(w)[..16]);
                    let want = geo.buf_ptr(b) as u64 + rx.headroom as u64;
                    assert_eq!(seg.addr(), want, "{fmt:?} round {round}: WQE {w}");
                }
                held.sort_unstable();
                held.dedup();
                assert_eq!(held.len(), rx.wqe_cnt as usize, "a buffer posted twice");
                if n == 0 {
                    break;
                }
            }
        }
        assert_eq!(got, sent, "{fmt:?}");
        assert!(sent > 4 * 64, "the ring wrapped several times");
        let c = port.counters();
        assert!(
            c.mini_cqes > sent as u64 / 2,
            "{fmt:?}: the model compressed little: {c:?}"
        );
        hook.quiesce();
        rx.release_all(&mut cache);
        cache.flush();
        drop(keep);
        pool.flush_local_cache();
        assert_eq!(pool.available(), pool.capacity(), "{fmt:?}");
    }
}
