//! [`Hw`] under bad input and faults: refused creates, receive length errors, CQ overrun,
//! compression across hashes, random rings.

use super::*;

#[test]
fn every_create_with_bad_arguments_is_an_error() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 8, 64, None);
    let good = CqDesc {
        buf: r.at(CQ0 + 0x8000),
        cqe_cnt: 8,
        cqe_size: 64,
        dbrec: r.at(DB + 64),
        compression: None,
    };
    for d in [
        CqDesc { cqe_cnt: 3, ..good },
        CqDesc { cqe_cnt: 0, ..good },
        CqDesc {
            cqe_size: 96,
            ..good
        },
        CqDesc { buf: 0, ..good },
        CqDesc {
            buf: good.buf + 8,
            ..good
        },
        CqDesc { dbrec: 0, ..good },
        CqDesc {
            dbrec: good.dbrec + 2,
            ..good
        },
    ] {
        // SAFETY: refused before any access.
        assert!(unsafe { r.hw.create_cq(d) }.is_err(), "{d:?}");
    }
    let sq = SqDesc {
        buf: r.at(SQ),
        wqe_cnt: 64,
        dbrec: r.at(DB + 0x800),
        uar: r.at(UAR + 0x800),
        cqn: cq,
        user_index: 0,
    };
    for d in [
        SqDesc { cqn: 0x999, ..sq },
        SqDesc { wqe_cnt: 0, ..sq },
        SqDesc { wqe_cnt: 48, ..sq },
        SqDesc { buf: 0, ..sq },
        SqDesc { dbrec: 3, ..sq },
        SqDesc { uar: 4, ..sq },
        SqDesc { uar: 0, ..sq },
        SqDesc {
            user_index: 1 << 24,
            ..sq
        },
    ] {
        // SAFETY: refused before any access.
        assert!(unsafe { r.hw.create_sq(d) }.is_err(), "{d:?}");
    }
    let rq = RqDesc {
        buf: r.at(RQ),
        wqe_cnt: 16,
        stride: 16,
        dbrec: r.at(DB + 0x900),
        cqn: cq,
        striding: None,
        user_index: 0,
    };
    for d in [
        RqDesc { cqn: 1, ..rq },
        RqDesc { stride: 24, ..rq },
        RqDesc { stride: 8, ..rq },
        RqDesc { wqe_cnt: 3, ..rq },
        RqDesc { buf: 0, ..rq },
        RqDesc { dbrec: 0, ..rq },
    ] {
        // SAFETY: refused before any access.
        assert!(unsafe { r.hw.create_rq(d) }.is_err(), "{d:?}");
    }
    // SAFETY: inside the rig's mapping.
    let rqn = unsafe { r.hw.create_rq(rq) }.unwrap();
    for d in [
        TirDesc {
            rqns: vec![],
            hash: None,
        },
        TirDesc {
            rqns: vec![0x7777],
            hash: None,
        },
        TirDesc {
            rqns: vec![rqn, rqn],
            hash: None,
        },
        TirDesc {
            rqns: vec![rqn],
            hash: Some(RssHash {
                key: vec![0; 39],
                fields: 3,
            }),
        },
        TirDesc {
            rqns: vec![rqn],
            hash: Some(RssHash {
                key: vec![0; 40],
                fields: 1 << 31,
            }),
        },
        // IPv4 with IPv6, TCP with UDP: the kernel's EINVAL.
        TirDesc {
            rqns: vec![rqn],
            hash: Some(RssHash {
                key: vec![0; 40],
                fields: 0x1 | 0x4,
            }),
        },
        TirDesc {
            rqns: vec![rqn],
            hash: Some(RssHash {
                key: vec![0; 40],
                fields: 0x3 | 0x10 | 0x80,
            }),
        },
    ] {
        assert!(r.hw.create_tir(d.clone()).is_err(), "{d:?}");
    }
    let tirn =
        r.hw.create_tir(TirDesc {
            rqns: vec![rqn],
            hash: None,
        })
        .unwrap();
    let eth = FlowSpec::Eth {
        dst: Masked::default(),
        src: Masked::default(),
        ether_type: Masked::default(),
        vlan_tag: Masked::default(),
    };
    let flow = |tirn, specs| FlowDesc {
        tirn,
        priority: 0,
        dont_trap: false,
        specs,
    };
    for d in [
        flow(0x1234, vec![]),
        flow(tirn, vec![eth.clone(), eth.clone()]),
        flow(tirn, vec![FlowSpec::Tag(1 << 24)]),
        flow(tirn, vec![FlowSpec::Tag(1), FlowSpec::Tag(2)]),
    ] {
        assert!(r.hw.create_flow(d.clone()).is_err(), "{d:?}");
    }
    let id = r.hw.create_flow(flow(tirn, vec![eth])).unwrap();
    assert!(r.hw.destroy_cq(cq).is_err(), "busy CQ");
    assert!(r.hw.destroy_rq(rqn).is_err(), "RQ in a TIR");
    assert!(r.hw.destroy_tir(tirn).is_err(), "TIR with a flow");
    for bad in [0u32, 0x7777, u32::MAX] {
        assert!(r.hw.destroy_cq(bad).is_err());
        assert!(r.hw.destroy_sq(bad).is_err());
        assert!(r.hw.destroy_rq(bad).is_err());
        assert!(r.hw.destroy_tir(bad).is_err());
        assert!(r.hw.destroy_flow(bad).is_err());
        assert!(r.hw.set_sq_state(bad, QueueState::Ready).is_err());
        assert!(r.hw.set_rq_state(bad, QueueState::Ready).is_err());
        assert!(r.hw.dereg_mr(bad).is_err());
    }
    assert!(r.hw.reg_mr(0x1000, 0).is_err());
    assert!(r.hw.reg_mr(u64::MAX - 10, 100).is_err());
    r.hw.destroy_flow(id).unwrap();
    r.hw.destroy_tir(tirn).unwrap();
    r.hw.destroy_rq(rqn).unwrap();
    r.hw.destroy_cq(cq).unwrap();
    assert!(Hw::new(HwOptions {
        min_inline: 5,
        ..opts(0)
    })
    .is_err());
    assert!(Hw::new(HwOptions {
        wire_capacity: 0,
        ..opts(0)
    })
    .is_err());
}

#[test]
fn a_receive_length_error_completes_that_wqe_and_the_rq_keeps_running() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 16, 64, None);
    let rq = r.rq(0, cq, 16, 5);
    catch_all(&r.hw, rq);
    r.post_recv(0, 16, 0, &[(64, DATA)]);
    r.post_recv(0, 16, 1, &[(2048, DATA + 4096)]);
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 100));
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 80));
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    assert_eq!((op(&c), c[55]), (0xe, 0x01), "RESP_ERR, LOCAL_LENGTH_ERR");
    assert_eq!((uidx(&c), u16::from_be_bytes([c[60], c[61]])), (5, 0));
    let c = r.cqe(0, 64, 1);
    assert_eq!((op(&c), byte_cnt(&c)), (2, 80), "the next frame arrives");
    assert_eq!(u16::from_be_bytes([c[60], c[61]]), 1, "in the next WQE");
    assert_eq!(r.hw.rq_state(rq).unwrap(), QueueState::Ready);
    let k = r.hw.counters();
    assert_eq!((k.rx_error_cqes, k.rx_frames, k.rx_in_error), (1, 1, 0));
}

#[test]
fn a_cqe_due_on_a_full_cq_overruns_it_and_its_queues() {
    let r = Rig::new(opts(0));
    let ev = Arc::new(Mutex::new(Vec::new()));
    let e2 = ev.clone();
    r.hw.set_event_sink(Box::new(move |e| e2.lock().unwrap().push(e)));
    // Send side: a 2-slot CQ, three signaled NOPs, nothing consumed.
    let txcq = r.cq(0, 2, 64, None);
    let sqn = r.sq(txcq, 0);
    for i in 0..3u16 {
        let w = SQ + 64 * i as usize;
        r.be32(w, (i as u32) << 8);
        r.be32(w + 4, sqn << 8 | 1);
        r.bytes(w + 8, 8).copy_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0]);
    }
    r.ring(3, 2);
    r.hw.process();
    assert_eq!(*ev.lock().unwrap(), vec![HwEvent::CqError { cqn: txcq }]);
    assert_eq!(r.hw.sq_state(sqn).unwrap(), QueueState::Error);
    // Receive side: a 2-slot CQ, four posted WQEs, three frames.
    let rxcq = r.cq(1, 2, 64, None);
    let rq = r.rq(0, rxcq, 16, 1);
    catch_all(&r.hw, rq);
    for i in 0..4 {
        r.post_recv(0, 16, i, &[(2048, DATA + 2048 * i as usize)]);
    }
    for _ in 0..3 {
        r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    }
    r.hw.process();
    assert_eq!(ev.lock().unwrap()[1], HwEvent::CqError { cqn: rxcq });
    assert_eq!(r.hw.rq_state(rq).unwrap(), QueueState::Error);
    let k = r.hw.counters();
    assert_eq!((k.cq_overruns, k.rx_frames, k.tx_cqes), (2, 2, 2));
}

#[test]
fn csum_format_compresses_across_different_hashes() {
    for (fmt, sessions) in [(MiniCqeFormat::CsumStrideIdx, 1), (MiniCqeFormat::Hash, 1)] {
        let r = Rig::new(opts(0));
        let cq = r.cq(0, 64, 64, Some(fmt));
        let rq = r.rq(0, cq, 16, 1);
        let tirn =
            r.hw.create_tir(TirDesc {
                rqns: vec![rq],
                hash: Some(RssHash {
                    key: crate::net::RSS_KEY.to_vec(),
                    fields: 0x3 | 0x40 | 0x80,
                }),
            })
            .unwrap();
        r.hw.create_flow(FlowDesc {
            tirn,
            priority: 0,
            dont_trap: false,
            specs: vec![],
        })
        .unwrap();
        for i in 0..4u16 {
            r.post_recv(0, 16, i, &[(2048, DATA + 2048 * i as usize)]);
            r.hw.inject_frame(&udp([1, 2, 3, 4], 1000 + i, 2, 64));
        }
        r.hw.process();
        let k = r.hw.counters();
        assert_eq!(
            (k.compressed_sessions, k.mini_cqes),
            (sessions, 4),
            "{fmt:?}"
        );
        assert_eq!((r.cqe(0, 64, 0)[63] >> 2) & 3, 3, "compressed title");
    }
}

#[test]
fn random_rings_never_panic_or_touch_unregistered_memory() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut total = crate::ModelCounters::default();
    for round in 0..300 {
        let r = Rig::new(opts(if round % 2 == 0 { 0 } else { 18 }));
        let txcq = r.cq(0, 64, if round % 3 == 0 { 128 } else { 64 }, None);
        let comp = [
            None,
            Some(MiniCqeFormat::Hash),
            Some(MiniCqeFormat::CsumStrideIdx),
        ];
        let rxcq = r.cq(1, 64, 64, comp[round % 3]);
        let sqn = r.sq(txcq, 1);
        let rqn = r.rq(0, rxcq, 64, 2);
        catch_all(&r.hw, rqn);
        // Random SQ WQEBBs, half with a plausible control segment, a zeroed Ethernet segment
        // and a data segment in or out of the registered region, under the right or a wrong
        // lkey.
        for bb in 0..64usize {
            let at = SQ + 64 * bb;
            for b in r.bytes(at, 64).iter_mut() {
                *b = rnd() as u8;
            }
            if rnd() % 2 == 0 {
                let ds = if rnd() % 4 == 0 {
                    (rnd() % 64) as u32
                } else {
                    3
                };
                r.ctrl(at, bb as u16, sqn, ds);
                r.bytes(at + 16, 16).fill(0);
                let lkey = if rnd() % 4 == 0 { rnd() as u32 } else { r.lkey };
                let addr = r.at(DATA) as u64 + rnd() % (2 * (LEN - DATA) as u64);
                r.data_seg(at + 32, (rnd() % 2000) as u32, lkey, addr);
            }
        }
        for i in 0..16usize {
            let w = RQ + 64 * i;
            for b in r.bytes(w, 64).iter_mut() {
                *b = rnd() as u8;
            }
            let lkey = if rnd() % 4 == 0 { rnd() as u32 } else { r.lkey };
            let addr = r.at(DATA) as u64 + rnd() % (2 * (LEN - DATA) as u64);
            r.data_seg(w, (rnd() % 3000) as u32, lkey, addr);
            if rnd() % 2 == 0 {
                r.data_seg(w + 16, 0, 0x100, 0);
            }
        }
        let pi = (rnd() % 70) as u32;
        r.ring(pi, pi.wrapping_sub(1));
        r.be32(DB + 0x900, (rnd() % 20) as u32);
        r.be32(DB + 4, rnd() as u32);
        for _ in 0..1 + rnd() % 4 {
            let len = (rnd() % 1600) as usize;
            let mut f = udp([10, 0, 0, 1], rnd() as u16, 2, len.max(60));
            f.truncate(len);
            r.hw.inject_frame(&f);
        }
        r.hw.process();
        r.hw.process();
        let c = r.hw.counters();
        total.tx_wqes += c.tx_wqes;
        total.tx_error_cqes += c.tx_error_cqes;
        total.rx_frames += c.rx_frames;
        total.rx_error_cqes += c.rx_error_cqes;
    }
    // The random rings reached every outcome.
    assert!(
        total.tx_wqes > 0 && total.tx_error_cqes > 0 && total.rx_frames > 0,
        "{total:?}"
    );
    assert!(total.rx_error_cqes > 0, "{total:?}");
}

/// With the device clock on, error CQEs still carry their syndrome: mlx5dv.h `struct
/// mlx5_err_cqe` puts `vendor_err_synd` and `syndrome` at bytes 54 and 55, where `struct
/// mlx5_cqe64` has the last bytes of `timestamp` (48..56); libmlx5 (rdma-core
/// providers/mlx5/cq.c `mlx5_handle_error_cqe`) reads the syndrome from there, so a timestamp
/// written over it turns every error into IBV_WC_GENERAL_ERR. Successful CQEs keep theirs.
#[test]
fn error_cqes_keep_their_syndrome_when_the_clock_runs() {
    let r = Rig::new(HwOptions {
        clock_khz: 1_000_000,
        ..opts(0)
    });
    // Send side: a bad lkey (LOCAL_PROT_ERR), then the flush (WR_FLUSH_ERR).
    let cq = r.cq(0, 8, 64, None);
    let sqn = r.sq(cq, 7);
    for (i, lkey) in [(0u16, 0xdead), (1, r.lkey)] {
        let w = SQ + 64 * i as usize;
        r.ctrl(w, i, sqn, 3);
        r.bytes(w + 16, 16).fill(0);
        r.data_seg(w + 32, 60, lkey, r.at(DATA) as u64);
    }
    // Let the clock move off 0 so that a timestamp written over the syndrome would show.
    std::thread::sleep(std::time::Duration::from_millis(2));
    r.ring(2, 1);
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    assert_eq!(
        (op(&c), c[54], c[55]),
        (0xd, 0, 0x04),
        "REQ_ERR, LOCAL_PROT_ERR"
    );
    let c = r.cqe(0, 64, 1);
    assert_eq!((op(&c), c[54], c[55]), (0xd, 0, 0x05), "WR_FLUSH_ERR");
    // Receive side: a length error, then a good frame with its timestamp.
    let cq = r.cq(1, 16, 64, None);
    let rq = r.rq(0, cq, 16, 5);
    catch_all(&r.hw, rq);
    r.post_recv(0, 16, 0, &[(64, DATA)]);
    r.post_recv(0, 16, 1, &[(2048, DATA + 4096)]);
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 100));
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 80));
    r.hw.process();
    let c = r.cqe(1, 64, 0);
    assert_eq!(
        (op(&c), c[54], c[55]),
        (0xe, 0, 0x01),
        "RESP_ERR, LOCAL_LENGTH_ERR"
    );
    let c = r.cqe(1, 64, 1);
    assert_eq!(op(&c), 2);
    let ts = u64::from_be_bytes(c[48..56].try_into().unwrap());
    assert!(
        ts > 0 && ts <= r.hw.clock_ticks(),
        "good CQE timestamp {ts}"
    );
}

/// DPDK's mlx5 PMD writes its transmit CQ's consumer index as a 16-bit counter
/// (drivers/net/mlx5/mlx5_tx.h `uint16_t cq_ci`, written whole by mlx5_tx.c
/// `mlx5_tx_handle_completion`): past 2^16 completions the record reads 0 again, and the
/// device must still see a CQ with room (it compares log2(size) + 1 bits), not overrun it.
#[test]
fn a_16_bit_consumer_index_runs_past_65536_completions() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 8, 64, None);
    let sqn = r.sq(cq, 0);
    let total: u32 = (1 << 16) + 64;
    let mut i = 0u32;
    while i < total {
        // Four signaled NOPs, then the driver consumes their CQEs and publishes its 16-bit
        // consumer index.
        for _ in 0..4 {
            let w = SQ + 64 * (i as usize % 64);
            r.be32(w, (i & 0xffff) << 8);
            r.be32(w + 4, sqn << 8 | 1);
            r.bytes(w + 8, 8).copy_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0]);
            i += 1;
        }
        r.ring(i & 0xffff, i.wrapping_sub(1));
        r.hw.process();
        r.be32(DB, i & 0xffff);
    }
    let k = r.hw.counters();
    assert_eq!((k.cq_overruns, k.tx_cqes), (0, u64::from(total)));
    assert_eq!(r.hw.sq_state(sqn).unwrap(), QueueState::Ready);
}

/// A compressed session ends at the end of the CQ ring at the latest: DPDK's vectorized
/// receive (drivers/net/mlx5/mlx5_rxtx_vec_sse.h `rxq_cq_decompress_v`) reads a session's
/// slots from its title without wrapping the index, and crashes on one that wraps.
#[test]
fn a_compressed_session_never_crosses_the_ring_end() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 8, 64, Some(MiniCqeFormat::Hash));
    let rq = r.rq(0, cq, 16, 1);
    catch_all(&r.hw, rq);
    for i in 0..16 {
        r.post_recv(0, 16, i, &[(2048, DATA + 2048 * i as usize)]);
    }
    // Five frames one at a time: five plain CQEs, consumed; the producer is at slot 5.
    for i in 0..5u32 {
        r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
        r.hw.process();
        r.be32(DB, i + 1);
    }
    assert_eq!(r.hw.counters().compressed_sessions, 0);
    // Six alike frames at once: slots 5..7 before the end, then the ring wraps.
    for _ in 0..6 {
        r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    }
    r.hw.process();
    let title = r.cqe(0, 64, 5);
    assert_eq!((title[63] >> 2) & 3, 3, "a compressed title at slot 5");
    assert!(
        byte_cnt(&title) <= 3,
        "a session of {} CQEs from slot 5 crosses the end of an 8-slot ring",
        byte_cnt(&title)
    );
    let k = r.hw.counters();
    assert_eq!((k.rx_frames, k.cq_overruns), (11, 0));
    // The rest (the ring's slots 0..2 on the next pass) are written too, once consumed up to 8.
    r.be32(DB, 8);
    r.hw.process();
    let first = r.cqe(0, 64, 0);
    assert_eq!(first[63] & 1, 1, "slot 0 written on the second pass");
}

/// DPDK's mlx5 PMD sizes a striding RQ's CQ to one CQE per stride posted (drivers/net/mlx5/
/// mlx5_rxq.c `mlx5_rxq_cqe_num`: `wqe_n * strd_n - 1`, rounded up by libmlx5): a frame that
/// fits in the open WQE writes one CQE, and only one that does not also writes a filler, which
/// itself closes at least one stride. So such a CQ can never overrun; the device must not ask
/// for room for a filler it will not write.
#[test]
fn a_striding_rq_fills_a_cq_of_one_slot_per_stride_without_overrun() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 8, 64, None);
    // SAFETY: ring and dbrec inside the rig's mapping, which outlives the device.
    let rq = unsafe {
        r.hw.create_rq(RqDesc {
            buf: r.at(RQ),
            wqe_cnt: 2,
            stride: 32,
            dbrec: r.at(DB + 0x900),
            cqn: cq,
            striding: Some(crate::Striding {
                log_num_strides: 3,
                log_stride_size: 8,
                two_byte_shift: false,
            }),
            user_index: 1,
        })
    }
    .unwrap();
    r.hw.set_rq_state(rq, QueueState::Ready).unwrap();
    catch_all(&r.hw, rq);
    // One WQE of 8 strides of 256 bytes (the next-segment first, then its data segment).
    r.data_seg(RQ + 16, 8 * 256, r.lkey, r.at(DATA) as u64);
    r.be32(DB + 0x900, 1);
    // Eight one-stride frames, nothing consumed: the eighth takes the last slot.
    for _ in 0..8 {
        r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
        r.hw.process();
    }
    let k = r.hw.counters();
    assert_eq!((k.rx_frames, k.cq_overruns, k.fillers), (8, 0, 0));
    assert_eq!(r.hw.rq_state(rq).unwrap(), QueueState::Ready);
}

/// A CQ created with IGNORE_OVERRUN (the kernel sets the CQ context's `oi` bit for
/// `IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN`: Linux drivers/infiniband/hw/mlx5/cq.c
/// `mlx5_ib_create_cq`) does not check for overrun: a CQE due on a full CQ is written over the
/// oldest unread one, no CQ error is raised and its queues keep working.
#[test]
fn a_cq_that_ignores_overrun_is_written_past_the_consumer() {
    let r = Rig::new(opts(0));
    let ev = Arc::new(Mutex::new(Vec::new()));
    let e2 = ev.clone();
    r.hw.set_event_sink(Box::new(move |e| e2.lock().unwrap().push(e)));
    let txcq = r.cq(0, 2, 64, None);
    r.hw.set_cq_ignore_overrun(txcq, true).unwrap();
    assert!(r.hw.set_cq_ignore_overrun(txcq + 100, true).is_err());
    let sqn = r.sq(txcq, 0);
    for i in 0..3u16 {
        let w = SQ + 64 * i as usize;
        r.be32(w, (i as u32) << 8);
        r.be32(w + 4, sqn << 8 | 1);
        r.bytes(w + 8, 8).copy_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0]);
    }
    r.ring(3, 2);
    r.hw.process();
    assert!(ev.lock().unwrap().is_empty(), "{:?}", ev.lock().unwrap());
    assert_eq!(r.hw.sq_state(sqn).unwrap(), QueueState::Ready);
    let k = r.hw.counters();
    assert_eq!((k.cq_overruns, k.tx_cqes), (0, 3));
    // The third CQE (WQE counter 2) went into slot 0, in the second pass (owner bit 1).
    let c = r.cqe(0, 64, 0);
    assert_eq!(u16::from_be_bytes([c[60], c[61]]), 2);
    assert_eq!(c[63] & 1, 1);
}
