//! DPDK's own mlx5 PMD (Debian's unmodified `dpdk-testpmd`, DPDK 22.11) on the emulated
//! ConnectX, through `scripts/testpmd-emu.sh`: a second, independent production driver as the
//! oracle of the device model. testpmd's counts must equal the model's. This file: testpmd
//! alone on one process's NIC(s); tests/emu/dpdk_peers.rs: testpmd and a peer (the kernel,
//! rawq's pktgen) on another process's across a veth or a cable.
//!
//! The matrix covers each mode the PMD's devargs select at least once rather than their full
//! product (each testpmd start costs seconds on a loaded 2-core machine):
//!
//! | test | port | forward | devargs / options |
//! |---|---|---|---|
//! | txonly_… | looped back | txonly | default (eMPW, vector rx, CQE compression); `txq_mpw_en=0` (plain SEND); `txq_inline_mpw=128` (eMPW, frames inline); ConnectX-4 Lx (`--min-inline l2`: plain SEND, inline L2 header) |
//! | rxonly_… | `--pair` | rxonly | vector rx + compression + RSS over 4 queues; scalar rx without compression; scalar rx with compression; rx timestamps; scatter/jumbo; striding RQ (vector + compression; scalar, 8 strides; with compression and RSS over 4 queues) |
//! | io_and_macswap_… | `--pair` | io, macswap | plain SEND + scalar rx; ConnectX-4 Lx (`--min-inline l2`, inline L2 header) |
//!
//! Every test needs root (namespaces, TAPs) and `dpdk-testpmd` with the mlx5 PMD
//! (scripts/setup.sh); it says `skipped:` without root unless `RAWQ_REQUIRE_NETNS=1`.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::time::Duration;

use support::dpdk::{kernel_send, last, netns, settled, taps, udp_frame, Pmd};
use support::emu::{serial, tempdir};

/// txonly on the looped-back port until the transmit CQ has taken more than 2^16 completions
/// (DPDK's 16-bit consumer index wraps: the model must not call that an overrun), then every
/// count equal: testpmd's TX-packets the model's frames on the wire, RX-missed its no-buffer
/// drops (the receive ring fills, as txonly never polls it).
#[test]
fn txonly_on_the_looped_back_port_runs_past_65536_completions() {
    let _one = serial();
    let Some(ns) = netns("dpdktx") else { return };
    let dir = tempdir("dpdk-txonly");
    // eMPW: 32 frames a WQE, a completion a WQE; plain SEND: a completion every 32 or so;
    // eMPW with the frames inline in the WQE; a ConnectX-4 Lx (the L2 header inline in every
    // WQE; no multi-packet send advertised, so plain SENDs).
    let cx4lx: &[&str] = &["--min-inline", "l2"];
    for (k, (devargs, emu, frames)) in [
        ("", &[][..], 2_300_000u64),
        ("txq_mpw_en=0", &[][..], 2_600_000),
        ("txq_inline_mpw=128", &[][..], 2_300_000),
        ("", cx4lx, 2_600_000),
    ]
    .into_iter()
    .enumerate()
    {
        let stats = dir.join(format!("stats{k}"));
        let (tap, _) = taps("tx");
        let mut opts = vec!["--netdev", &tap];
        opts.extend(emu);
        if !devargs.is_empty() {
            opts.extend(["--devargs", devargs]);
        }
        let mut p = Pmd::start(&ns.a, &opts, &["--forward-mode=txonly"], &stats);
        p.cmd("start");
        p.stats_until(0, Duration::from_secs(180), |s, _| s.tx >= frames);
        p.cmd("stop");
        let s = settled(&mut p, 0);
        assert!(
            s.missed > 0,
            "{devargs} {emu:?}: the unpolled ring filled and dropped: {s:?}"
        );
        let out = p.quit();
        let cqes = last(&stats, "tx_cqes");
        assert!(
            cqes > 1 << 16,
            "{devargs} {emu:?}: only {cqes} completions\n{out}"
        );
        assert_eq!(last(&stats, "cq_overruns"), 0, "{devargs} {emu:?}\n{out}");
        assert_eq!(last(&stats, "tx_frames"), s.tx, "{devargs} {emu:?}\n{out}");
        assert_eq!(last(&stats, "tx_error_cqes"), 0, "{devargs} {emu:?}\n{out}");
    }
}

/// One receive configuration of [`rxonly_takes_every_kernel_frame_in_each_receive_mode`].
struct RxCase {
    name: &'static str,
    devargs: &'static str,
    args: &'static [&'static str],
    queues: u16,
    frame: usize,
}

/// rxonly on mlx5_0 of a `--pair`; the kernel sends frames out of mlx5_1's netdev (its TAP),
/// which mlx5_1 puts on the wire to mlx5_0. Every frame mlx5_1 took from its netdev is either
/// received by testpmd (RX-packets = the model's frames delivered) or missed (RX-missed = the
/// model's no-buffer drops), in each receive mode.
#[test]
fn rxonly_takes_every_kernel_frame_in_each_receive_mode() {
    let _one = serial();
    let Some(ns) = netns("dpdkrx") else { return };
    let dir = tempdir("dpdk-rxonly");
    let cases = [
        RxCase {
            name: "vector rx, CQE compression, RSS over 4 queues",
            devargs: "rx_vec_en=1,rxq_cqe_comp_en=1",
            args: &["--rxq=4", "--txq=4", "--rss-udp"],
            queues: 4,
            frame: 64,
        },
        RxCase {
            name: "scalar rx without compression",
            devargs: "rx_vec_en=0,rxq_cqe_comp_en=0",
            args: &[],
            queues: 1,
            frame: 64,
        },
        RxCase {
            name: "striding RQ with compression (vector)",
            devargs: "mprq_en=1,rxqs_min_mprq=1,rxq_cqe_comp_en=1",
            args: &[],
            queues: 1,
            frame: 200,
        },
        RxCase {
            name: "striding RQ, scalar, 8 strides a WQE",
            devargs: "mprq_en=1,rxqs_min_mprq=1,rx_vec_en=0,mprq_log_stride_num=3",
            args: &[],
            queues: 1,
            frame: 200,
        },
        // Of the product of the devargs: striding RQs under RSS, and compression on the
        // scalar path.
        RxCase {
            name: "striding RQ with compression, RSS over 4 queues",
            devargs: "mprq_en=1,rxqs_min_mprq=1,rxq_cqe_comp_en=1",
            args: &["--rxq=4", "--txq=4", "--rss-udp"],
            queues: 4,
            frame: 200,
        },
        RxCase {
            name: "scalar rx with CQE compression",
            devargs: "rx_vec_en=0,rxq_cqe_comp_en=1",
            args: &[],
            queues: 1,
            frame: 64,
        },
        RxCase {
            name: "rx timestamps",
            devargs: "",
            args: &["--enable-rx-timestamp"],
            queues: 1,
            frame: 64,
        },
        RxCase {
            name: "scatter into 2 KiB mbufs, 6000-byte frames",
            devargs: "",
            args: &["--mbuf-size=2048", "--max-pkt-len=9000", "--enable-scatter"],
            queues: 1,
            frame: 6000,
        },
    ];
    for (k, c) in cases.iter().enumerate() {
        let stats = dir.join(format!("stats{k}"));
        let (t0, t1) = taps("rx");
        let both = format!("{t0},{t1}");
        let mut opts = vec!["--pair", "--netdev", &both];
        if !c.devargs.is_empty() {
            opts.extend(["--devargs", c.devargs]);
        }
        let mut args = vec!["--forward-mode=rxonly"];
        args.extend(c.args);
        let mut p = Pmd::start(&ns.a, &opts, &args, &stats);
        p.cmd("start");
        // The TAP takes every frame (a long queue) and jumbo ones.
        for cmd in [
            vec!["link", "set", t1.as_str(), "txqueuelen", "100000"],
            vec!["link", "set", t1.as_str(), "mtu", "9000"],
        ] {
            ns.ip_in(&ns.a, &cmd).unwrap();
        }
        let n = 20_000usize;
        let frames: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                udp_frame(
                    [0x02, 0xfc, 0, 0, 0, 1],
                    [0x02, 0xfc, 0, 0, 0, 2],
                    1000 + (i % 512) as u16,
                    c.frame,
                )
            })
            .collect();
        let tap = t1.clone();
        let sent = ns.run_in(&ns.a, move || kernel_send(&tap, &frames));
        assert_eq!(sent, n, "{}", c.name);
        // Every frame mlx5_1 took from its netdev reaches mlx5_0: received or missed.
        let s = p.stats_until(0, Duration::from_secs(60), |s, p| {
            let taken = p.model(1, "netdev_tx");
            // (The model's report is rewritten twice a second: wait for one after the last
            // frame.)
            taken >= n as u64 * 9 / 10 && s.rx + s.missed == taken && p.rx_as_the_model_counts(s)
        });
        // Received in volume, not a stray frame. The bound is low on purpose: on a loaded
        // 2-core machine testpmd's lcore gets a small share of the CPU and misses most of the
        // burst (960 of 20000 received was seen); the accounting above is the exact check.
        assert!(s.rx >= 256, "{}: only {s:?} received", c.name);
        if c.queues > 1 {
            // Every queue's share adds up to the port's; RSS leaves none idle.
            let per = p.stop_rx_per_queue(0, c.queues);
            assert_eq!(per.iter().sum::<u64>(), s.rx, "{}: {per:?}", c.name);
            assert!(
                per.iter().all(|&q| q > 0),
                "{}: RSS left a queue idle: {per:?}",
                c.name
            );
        } else {
            p.cmd("stop");
        }
        let out = p.quit();
        assert_eq!(last(&stats, "cq_overruns"), 0, "{}\n{out}", c.name);
        assert_eq!(last(&stats, "rx_error_cqes"), 0, "{}\n{out}", c.name);
    }
}

/// io and macswap forwarding on a `--pair` (the frames testpmd sends first circulate between
/// the two ports): plain SEND with scalar receive, and a ConnectX-4 Lx (the L2 header inline in
/// every send, no eMPW). Forwarding must keep going; once stopped and the frames left on the
/// cable and in the receive queues polled (rxonly), each port's RX-packets, RX-missed and
/// TX-packets equal the model's delivered, no-buffer and sent frames, and every frame one port
/// put on the wire reached the other.
#[test]
fn io_and_macswap_forward_on_the_pair() {
    let _one = serial();
    let Some(ns) = netns("dpdkio") else { return };
    let dir = tempdir("dpdk-io");
    let cases: [(&str, &[&str], &str); 2] = [
        ("io", &["--devargs", "txq_mpw_en=0,rx_vec_en=0"], "io"),
        ("macswap", &["--min-inline", "l2"], "macswap"),
    ];
    for (k, (name, extra, mode)) in cases.iter().enumerate() {
        let stats = dir.join(format!("stats{k}"));
        let (t0, t1) = taps("io");
        let both = format!("{t0},{t1}");
        let mut opts = vec!["--pair", "--netdev", &both];
        opts.extend(*extra);
        let fwd = format!("--forward-mode={mode}");
        let mut p = Pmd::start(&ns.a, &opts, &[&fwd, "--txonly-multi-flow"], &stats);
        if *name == "macswap" {
            // The PMD probed a ConnectX-4 Lx (its inline-L2 send path).
            assert!(p.text().contains("(15b3:1015)"), "{}", p.text());
        }
        p.cmd("start tx_first");
        for port in [0u16, 1] {
            p.stats_until(port, Duration::from_secs(120), |s, _| s.rx >= 300_000);
        }
        p.cmd("stop");
        for port in [0u16, 1] {
            settled(&mut p, port);
        }
        // `stop` only ends the forwarding loops (testpmd.c stop_packet_forwarding): the frames
        // the device has already written to a receive queue, and those still on the cable,
        // which the receive queue's free buffers then take, are delivered but never polled.
        // rxonly polls them (and sends nothing): once the model is quiescent (each port's
        // frames on the wire all arrived, delivered or dropped for want of a buffer), testpmd
        // has counted each delivered frame once.
        p.cmd("set fwd rxonly");
        p.cmd("start");
        for port in [0u16, 1] {
            let other = u32::from(1 - port);
            p.stats_until(port, Duration::from_secs(30), |s, p| {
                let dev = u32::from(port);
                let on_wire = p.model(other, "tx_frames") + p.model(other, "netdev_tx")
                    - p.model(other, "wire_drops");
                s.rx == p.model(dev, "rx_frames")
                    && s.missed == p.model(dev, "rx_no_buffer")
                    && on_wire
                        == p.model(dev, "rx_frames")
                            + p.model(dev, "rx_no_buffer")
                            + p.model(dev, "rx_to_kernel")
            });
        }
        p.cmd("stop");
        for port in [0u16, 1] {
            let s = p.port_stats(port);
            let dev = u32::from(port);
            assert_eq!(
                (s.rx, s.missed, s.tx),
                (
                    p.model(dev, "rx_frames"),
                    p.model(dev, "rx_no_buffer"),
                    p.model(dev, "tx_frames")
                ),
                "{name}: port {port}: testpmd's RX-packets, RX-missed and TX-packets, the \
                 model's delivered, no-buffer and sent frames"
            );
        }
        let out = p.quit();
        for dev in [0, 1] {
            let f = if dev == 0 {
                stats.clone()
            } else {
                std::path::PathBuf::from(format!("{}.mlx5_1", stats.display()))
            };
            assert_eq!(last(&f, "cq_overruns"), 0, "{name}\n{out}");
            assert_eq!(last(&f, "tx_error_cqes"), 0, "{name}\n{out}");
        }
    }
}
