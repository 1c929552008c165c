//! Flow rules in the kernel's mlx5 flow tables: where the model ranks a flow, and what it answers
//! for a second flow with the same match in the same table.
//!
//! Linux drivers/infiniband/hw/mlx5/fs.c `get_flow_table` / `ib_prio_to_core_prio`: priority p
//! with DONT_TRAP is table 2p, without it 2p+1; a multicast-only flow without DONT_TRAP
//! (`flow_is_multicast_only`: first spec Ethernet with the group bit in dst_mac mask and value,
//! or IPv4 with a multicast destination) is `MLX5_IB_FLOW_MCAST_PRIO`, after all. One entry per
//! table applies; DONT_TRAP forwards to the next table too (`_create_flow_rule`:
//! `MLX5_FLOW_CONTEXT_ACTION_FWD_NEXT_PRIO`). mlx5 core fs_core.c `add_rule_fg` /
//! `check_conflicting_ftes`: a flow with the match of an existing entry of its table joins it,
//! or fails with EEXIST when their drop actions or flow tags differ.

use super::*;

const MC: [u8; 6] = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01];

fn eth_dst(mac: [u8; 6]) -> FlowSpec {
    FlowSpec::Eth {
        dst: Masked {
            value: mac,
            mask: [0xff; 6],
        },
        src: Masked::default(),
        ether_type: Masked::default(),
        vlan_tag: Masked::default(),
    }
}

fn udp_dst(p: u16) -> FlowSpec {
    FlowSpec::Udp {
        src: Masked::default(),
        dst: Masked {
            value: p,
            mask: 0xffff,
        },
    }
}

/// A multicast UDP frame to 224.0.0.1:`dport`.
fn mc_udp(dport: u16) -> Vec<u8> {
    let mut f = udp([224, 0, 0, 1], 1, dport, 64);
    f[..6].copy_from_slice(&MC);
    f
}

/// Three RQs with 16 posted buffers each, a one-RQ TIR on each.
fn three_tirs(r: &Rig) -> ([u32; 3], [u32; 3]) {
    let mut rqs = [0; 3];
    let mut tirs = [0; 3];
    for k in 0..3 {
        let cq = r.cq(k, 64, 64, None);
        rqs[k] = r.rq(k, cq, 16, k as u32);
        for i in 0..16u16 {
            r.post_recv(k, 16, i, &[(2048, DATA + 0x8000 * k + 2048 * i as usize)]);
        }
        tirs[k] =
            r.hw.create_tir(TirDesc {
                rqns: vec![rqs[k]],
                hash: None,
            })
            .unwrap();
    }
    (rqs, tirs)
}

fn flow(tirn: u32, priority: u16, dont_trap: bool, specs: Vec<FlowSpec>) -> FlowDesc {
    FlowDesc {
        tirn,
        priority,
        dont_trap,
        specs,
    }
}

fn frames(r: &Rig, rqs: &[u32; 3]) -> [u64; 3] {
    rqs.map(|q| r.hw.rq_counters(q).unwrap().rx_frames)
}

#[test]
fn dont_trap_flows_rank_before_their_priority_and_one_entry_per_table_applies() {
    let r = Rig::new(opts(0));
    let (rqs, t) = three_tirs(&r);
    // Created first: UDP 9000 -> RQ 0, priority 1 (table 3).
    r.hw.create_flow(flow(t[0], 1, false, vec![udp_dst(9000), FlowSpec::Tag(1)]))
        .unwrap();
    // Then two DONT_TRAP multicast flows at priority 1 (table 2): only the first applies.
    r.hw.create_flow(flow(t[1], 1, true, vec![eth_dst(MC), FlowSpec::Tag(2)]))
        .unwrap();
    r.hw.create_flow(flow(
        t[2],
        1,
        true,
        vec![eth_dst(MC), udp_dst(9000), FlowSpec::Tag(3)],
    ))
    .unwrap();
    r.hw.inject_frame(&mc_udp(9000));
    r.hw.process();
    // Table 2: RQ 1's copy, on to table 3: RQ 0 takes it. Nothing to the kernel.
    assert_eq!(frames(&r, &rqs), [1, 1, 0]);
    assert_eq!(r.hw.counters().rx_to_kernel, 0);
    r.hw.inject_frame(&mc_udp(9001));
    r.hw.process();
    assert_eq!(frames(&r, &rqs), [1, 2, 0]);
    assert_eq!(r.hw.counters().rx_to_kernel, 1);
}

#[test]
fn multicast_only_flows_without_dont_trap_come_after_every_priority() {
    let r = Rig::new(opts(0));
    let (rqs, t) = three_tirs(&r);
    // Priority 0, multicast Ethernet, drop: MLX5_IB_FLOW_MCAST_PRIO.
    r.hw.create_flow(flow(t[0], 0, false, vec![eth_dst(MC), FlowSpec::Drop]))
        .unwrap();
    // Priority 0, first spec IPv4 to 224.0.0.1, UDP 9001: multicast-only too.
    let v4_mc = FlowSpec::Ipv4 {
        src: Masked::default(),
        dst: Masked {
            value: [224, 0, 0, 1],
            mask: [0xff; 4],
        },
        proto: Masked::default(),
        tos: Masked::default(),
    };
    r.hw.create_flow(flow(t[0], 0, false, vec![v4_mc, udp_dst(9001)]))
        .unwrap();
    // Priority 7 (table 15): UDP 9001; priority 15 (table 31): UDP 9000.
    r.hw.create_flow(flow(t[1], 7, false, vec![udp_dst(9001)]))
        .unwrap();
    r.hw.create_flow(flow(t[2], 15, false, vec![udp_dst(9000)]))
        .unwrap();
    // To 224.0.0.1:9001 from a unicast MAC: the priority-7 flow, not the IPv4 multicast one.
    let mut uc = mc_udp(9001);
    uc[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    for f in [mc_udp(9000), uc, mc_udp(9002)] {
        r.hw.inject_frame(&f);
    }
    r.hw.process();
    // 9000: priority 15 before the priority-0 multicast drop; 9002: only the drop.
    assert_eq!(frames(&r, &rqs), [0, 1, 1]);
    assert_eq!(r.hw.counters().rx_rule_drop, 1);
}

#[test]
fn a_second_flow_with_the_same_match_in_its_table_joins_or_is_eexist() {
    let r = Rig::new(opts(0));
    let (rqs, t) = three_tirs(&r);
    let eexist = |d: FlowDesc| match r.hw.create_flow(d) {
        Err(crate::Error::Os { source, .. }) => source.raw_os_error() == Some(libc::EEXIST),
        other => panic!("expected EEXIST, got {other:?}"),
    };
    r.hw.create_flow(flow(t[0], 2, false, vec![udp_dst(9000), FlowSpec::Tag(1)]))
        .unwrap();
    // Another tag, or a drop: EEXIST.
    assert!(eexist(flow(
        t[1],
        2,
        false,
        vec![udp_dst(9000), FlowSpec::Tag(2)]
    )));
    assert!(eexist(flow(
        t[1],
        2,
        false,
        vec![udp_dst(9000), FlowSpec::Drop]
    )));
    // The same tag, or no tag: it joins the entry.
    r.hw.create_flow(flow(t[1], 2, false, vec![udp_dst(9000), FlowSpec::Tag(1)]))
        .unwrap();
    r.hw.create_flow(flow(t[2], 2, false, vec![udp_dst(9000)]))
        .unwrap();
    // Another table (priority, DONT_TRAP) or another match: no conflict.
    r.hw.create_flow(flow(t[1], 3, false, vec![udp_dst(9000), FlowSpec::Tag(2)]))
        .unwrap();
    r.hw.create_flow(flow(t[1], 2, true, vec![udp_dst(9000), FlowSpec::Tag(2)]))
        .unwrap();
    r.hw.create_flow(flow(t[1], 2, false, vec![udp_dst(9001), FlowSpec::Tag(2)]))
        .unwrap();
    // UDP 9000: table 4 (the DONT_TRAP flow) copies to RQ 1 with tag 2; table 5's entry has
    // three destinations (fs_core.c `add_rule_fte`), each frame with the entry's tag 1.
    r.hw.inject_frame(&udp([10, 0, 0, 1], 1, 9000, 64));
    r.hw.process();
    assert_eq!(frames(&r, &rqs), [1, 2, 1]);
    assert_eq!(r.hw.counters().rx_to_kernel, 0);
    let tags = [
        r.cqe(0, 64, 0),
        r.cqe(1, 64, 0),
        r.cqe(1, 64, 1),
        r.cqe(2, 64, 0),
    ]
    .map(|c| flow_tag(&c));
    assert_eq!(tags, [1, 2, 1, 1]);
}

/// Linux drivers/infiniband/hw/mlx5/fs.c `set_proto`: a spec that sets the IP protocol after
/// another one did must give the same mask and value (IPv4 `proto`, IPv6 `next_hdr`, a TCP or
/// UDP spec's implied 0xff/6 or 0xff/17), else `parse_flow_attr` fails with EINVAL.
#[test]
fn a_second_different_ip_protocol_is_refused() {
    let r = Rig::new(opts(0));
    let (_, t) = three_tirs(&r);
    let v4 = |mask, value| FlowSpec::Ipv4 {
        src: Masked::default(),
        dst: Masked::default(),
        proto: Masked { value, mask },
        tos: Masked::default(),
    };
    let v6 = |mask, value| FlowSpec::Ipv6 {
        src: Masked::default(),
        dst: Masked::default(),
        next_hdr: Masked { value, mask },
        flow_label: Masked::default(),
        traffic_class: Masked::default(),
    };
    let tcp = FlowSpec::Tcp {
        src: Masked::default(),
        dst: Masked::default(),
    };
    for specs in [
        vec![v4(0xff, 17), tcp.clone()],
        vec![v4(0x0f, 6), tcp.clone()],
        vec![v6(0xff, 17), tcp.clone()],
        vec![v6(0xff, 6), udp_dst(1)],
    ] {
        assert!(
            r.hw.create_flow(flow(t[0], 0, false, specs.clone()))
                .is_err(),
            "{specs:?}"
        );
    }
    for specs in [vec![v4(0xff, 6), tcp.clone()], vec![v6(0, 0), tcp.clone()]] {
        r.hw.create_flow(flow(t[0], 0, false, specs)).unwrap();
    }
}

/// Linux fs.c `parse_flow_attr` for an IPv6 spec: the traffic class goes to the entry's DSCP and
/// ECN (`set_tos`), the flow label to `outer_ipv6_flow_label` (`set_flow_label`, 20 bits): the
/// device matches both.
#[test]
fn ipv6_traffic_class_and_flow_label_are_matched() {
    let r = Rig::new(opts(0));
    let (rqs, t) = three_tirs(&r);
    let v6 = |tc: Masked<u8>, label: Masked<u32>| FlowSpec::Ipv6 {
        src: Masked::default(),
        dst: Masked::default(),
        next_hdr: Masked::default(),
        flow_label: label,
        traffic_class: tc,
    };
    r.hw.create_flow(flow(
        t[0],
        0,
        false,
        vec![v6(
            Masked::default(),
            Masked {
                value: 0x12345,
                mask: 0xfffff,
            },
        )],
    ))
    .unwrap();
    r.hw.create_flow(flow(
        t[1],
        0,
        false,
        vec![v6(
            Masked {
                value: 0xb8,
                mask: 0xfc,
            },
            Masked::default(),
        )],
    ))
    .unwrap();
    // IPv6/UDP with traffic class `tc` and flow label `label`.
    let frame = |tc: u8, label: u32| {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let word = 6 << 28 | u32::from(tc) << 20 | label;
        f.extend_from_slice(&word.to_be_bytes());
        f.extend_from_slice(&[0, 8, 17, 64]);
        f.extend_from_slice(&[0x20; 32]);
        f.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
        f
    };
    for f in [
        frame(0, 0x12345),    // label: RQ 0
        frame(0xbb, 0x12346), // DSCP 46 (ECN ignored): RQ 1
        frame(0xb4, 0x12346), // kernel
        frame(0, 0x02345),    // kernel
    ] {
        r.hw.inject_frame(&f);
    }
    r.hw.process();
    assert_eq!(frames(&r, &rqs), [1, 1, 0]);
    assert_eq!(r.hw.counters().rx_to_kernel, 2);
}
