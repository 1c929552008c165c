//! Flow counters: each flow counts the frames it took, as the flow counter a verbs flow created
//! with `IBV_FLOW_SPEC_ACTION_COUNT` does (Linux drivers/infiniband/hw/mlx5/fs.c
//! `_create_flow_rule` adds the COUNT action to the flow's entry; counters.c
//! `read_flow_counters` reads it): delivered to its TIR whether or not the RQ then had a
//! buffer, dropped by a drop flow, a DONT_TRAP flow's frames as well as the next table's; a
//! frame held for flow control once.

use super::*;

fn udp_dst(p: u16) -> FlowSpec {
    FlowSpec::Udp {
        src: Masked::default(),
        dst: Masked {
            value: p,
            mask: 0xffff,
        },
    }
}

#[test]
fn each_flow_counts_the_frames_it_took_once() {
    let mut o = opts(0);
    o.flow_control = true;
    let r = Rig::new(o);
    let cqa = r.cq(0, 64, 64, None);
    let cqb = r.cq(1, 64, 64, None);
    let rqa = r.rq(0, cqa, 16, 10);
    let rqb = r.rq(1, cqb, 16, 11);
    // A: two receive WQEs for now; B: sixteen.
    for i in 0..2u16 {
        r.post_recv(0, 16, i, &[(2048, DATA + 0x10000 + 2048 * i as usize)]);
    }
    for i in 0..16u16 {
        r.post_recv(1, 16, i, &[(2048, DATA + 0x30000 + 2048 * i as usize)]);
    }
    let tir = |rq| {
        r.hw.create_tir(TirDesc {
            rqns: vec![rq],
            hash: None,
        })
        .unwrap()
    };
    let (ta, tb) = (tir(rqa), tir(rqb));
    let fa =
        r.hw.create_flow(FlowDesc {
            tirn: ta,
            priority: 5,
            dont_trap: false,
            specs: vec![udp_dst(9000)],
        })
        .unwrap();
    let fb =
        r.hw.create_flow(FlowDesc {
            tirn: tb,
            priority: 1,
            dont_trap: true,
            specs: vec![FlowSpec::Ipv4 {
                src: Masked::default(),
                dst: Masked {
                    value: [10, 0, 0, 0],
                    mask: [255, 0, 0, 0],
                },
                proto: Masked::default(),
                tos: Masked::default(),
            }],
        })
        .unwrap();
    let fd =
        r.hw.create_flow(FlowDesc {
            tirn: ta,
            priority: 0,
            dont_trap: false,
            specs: vec![udp_dst(53), FlowSpec::Drop],
        })
        .unwrap();
    let hits = |f| r.hw.flow_hits(f).unwrap();
    assert_eq!((hits(fa), hits(fb), hits(fd)), (0, 0, 0));

    // Flow control: four frames for A, two WQEs: two delivered, the third held (and the fourth
    // behind it), tried again at every step and counted only when delivered.
    for _ in 0..4 {
        r.hw.inject_frame(&udp([192, 168, 0, 1], 1, 9000, 64));
    }
    for _ in 0..3 {
        r.hw.process();
    }
    assert_eq!(r.hw.rq_counters(rqa).unwrap().rx_frames, 2);
    assert_eq!(hits(fa), 2, "held frames are not counted yet");
    for i in 2..4u16 {
        r.post_recv(0, 16, i, &[(2048, DATA + 0x10000 + 2048 * i as usize)]);
    }
    r.hw.process();
    assert_eq!(r.hw.rq_counters(rqa).unwrap().rx_frames, 4);
    assert_eq!(hits(fa), 4, "each held frame counted once");

    // Without flow control: drops, DONT_TRAP, a frame A has no buffer for.
    r.hw.set_flow_control(false);
    for f in [
        udp([10, 1, 2, 3], 1, 53, 64),    // dropped (priority 0)
        udp([192, 168, 0, 1], 1, 53, 64), // dropped
        udp([10, 0, 0, 1], 1, 1234, 64),  // B, then the kernel
        udp([10, 1, 2, 3], 1, 9000, 64),  // B, then A (no WQE left: dropped there)
        udp([192, 168, 0, 1], 1, 7, 64),  // the kernel: no flow
    ] {
        r.hw.inject_frame(&f);
    }
    r.hw.process();
    let c = r.hw.counters();
    assert_eq!(c.rx_rule_drop, 2);
    assert_eq!(hits(fd), 2, "the drop flow: what it dropped");
    assert_eq!(r.hw.rq_counters(rqb).unwrap().rx_frames, 2);
    assert_eq!(hits(fb), 2, "the DONT_TRAP flow: what B received");
    assert_eq!(
        hits(fa),
        5,
        "A took the frame its RQ had no buffer for (that loss is the RQ's)"
    );
    assert_eq!(r.hw.rq_counters(rqa).unwrap().rx_frames, 4);
    assert_eq!(c.rx_no_buffer, 1);

    // A destroyed flow has no counter; a new flow starts from zero.
    r.hw.destroy_flow(fa).unwrap();
    assert!(r.hw.flow_hits(fa).is_err());
    let fa2 =
        r.hw.create_flow(FlowDesc {
            tirn: ta,
            priority: 5,
            dont_trap: false,
            specs: vec![udp_dst(9000)],
        })
        .unwrap();
    assert_eq!(hits(fa2), 0);
}

/// A drop flow has no destination (Linux drivers/infiniband/hw/mlx5/fs.c `mlx5_ib_create_flow`
/// takes the QP's RQ TIR, 0 for a QP without an RQ; `_create_flow_rule` gives a DROP action no
/// destination): it is created whatever its TIR number, and counts what it drops; a flow that
/// delivers needs a TIR that exists.
#[test]
fn a_drop_flow_needs_no_tir() {
    let r = Rig::new(opts(0));
    let bad = r.hw.create_flow(FlowDesc {
        tirn: 0,
        priority: 0,
        dont_trap: false,
        specs: vec![udp_dst(9000)],
    });
    assert!(bad.is_err(), "a delivering flow to no TIR");
    let f =
        r.hw.create_flow(FlowDesc {
            tirn: 0,
            priority: 0,
            dont_trap: false,
            specs: vec![udp_dst(9000), FlowSpec::Drop],
        })
        .expect("a drop flow without a TIR");
    assert_eq!(r.hw.flow_hits(f).unwrap(), 0);
    r.hw.destroy_flow(f).expect("destroy");
}
