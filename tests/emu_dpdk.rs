//! DPDK's own mlx5 PMD (Debian's unmodified `dpdk-testpmd`, DPDK 22.11) on the emulated
//! ConnectX, through `scripts/testpmd-emu.sh`: a second, independent production driver as the
//! oracle of the device model. testpmd's counts must equal the model's.
//!
//! The matrix covers each mode the PMD's devargs select at least once rather than their full
//! product (each testpmd start costs seconds on a loaded 2-core machine):
//!
//! | test | port | forward | devargs / options |
//! |---|---|---|---|
//! | txonly_… | looped back | txonly | default (eMPW, vector rx, CQE compression); `txq_mpw_en=0` (plain SEND); `txq_inline_mpw=128` (eMPW, frames inline); ConnectX-4 Lx (`--min-inline l2`: plain SEND, inline L2 header) |
//! | rxonly_… | `--pair` | rxonly | vector rx + compression + RSS over 4 queues; scalar rx without compression; scalar rx with compression; rx timestamps; scatter/jumbo; striding RQ (vector + compression; scalar, 8 strides; with compression and RSS over 4 queues) |
//! | io_and_macswap_… | `--pair` | io, macswap | plain SEND + scalar rx; ConnectX-4 Lx (`--min-inline l2`, inline L2 header) |
//! | testpmd_and_the_kernel_… | veth to the kernel | rxonly then txonly | default |
//! | rawq_pktgen_and_testpmd_… | veth between two emulated NICs | rxonly, then io after `tx_first` | default; pktgen `-b dv` |
//! | rawq_pktgen_and_testpmd_across_a_cable | `--cable` between two processes' NICs | rxonly, then txonly | default; pktgen `-b dv` and `-b verbs` |
//! | a_cable_is_up_… | `--cable` | rxonly | the port's state at the other end (devinfo) |
//! | a_running_rawq_follows_… | `--cable` | rxonly, two testpmds in turn | pktgen `--on-link-down wait` sees link down, then up |
//!
//! Every test needs root (namespaces, TAPs) and `dpdk-testpmd` with the mlx5 PMD
//! (scripts/setup.sh); it says `skipped:` without root unless `RAWQ_REQUIRE_NETNS=1`.
#![cfg(feature = "mlx5")]

#[path = "emu_dpdk/pmd.rs"]
mod pmd;
mod support;

use std::time::Duration;

use pmd::{kernel_send, netns, udp_frame, Pmd};
use support::emu::{emu_sh, serial, tempdir, text};
use support::NetnsPair;

/// TAP names for this test (short enough for IFNAMSIZ).
fn taps(tag: &str) -> (String, String) {
    let id = std::process::id() % 10_000;
    (format!("{tag}{id}a"), format!("{tag}{id}b"))
}

/// Waits, after `stop`, until the model has done every WQE testpmd posted on `port`
/// (device `port`) and testpmd reads the model's no-buffer drops as RX-missed; returns the
/// port's final numbers.
fn settled(p: &mut Pmd, port: u16) -> pmd::PortStats {
    p.stats_until(port, Duration::from_secs(30), |s, p| {
        s.tx == p.model(port.into(), "tx_frames")
            && s.missed == p.model(port.into(), "rx_no_buffer")
    })
}

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

fn last(stats: &std::path::Path, field: &str) -> u64 {
    support::emu::last_counter(stats, field)
        .unwrap_or_else(|| panic!("no {field} in {}", stats.display()))
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
            taken >= n as u64 * 9 / 10
                && s.rx + s.missed == taken
                && s.rx == p.model(0, "rx_frames")
                && s.missed == p.model(0, "rx_no_buffer")
        });
        assert!(s.rx > 1000, "{}: only {s:?} received", c.name);
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

/// `/sys/class/net/IF/statistics/NAME` of an interface in namespace `ns`.
fn if_stat(ns: &NetnsPair, in_ns: &str, ifname: &str, name: &str) -> u64 {
    let path = format!("/sys/class/net/{ifname}/statistics/{name}");
    let o = ns.exec(in_ns, &["cat", &path]);
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{path} in {in_ns}: {o:?}"))
}

/// The emulated port's wire is a veth end (`--wire`); the kernel holds the other end. The
/// kernel's frames reach testpmd (rxonly: each received or missed, as the model counts), and
/// testpmd's reach the kernel (txonly: every frame the model put on the wire arrives at the
/// peer veth, or the veth says it dropped it).
#[test]
fn testpmd_and_the_kernel_across_a_veth() {
    let _one = serial();
    let Some(ns) = netns("dpdkvk") else { return };
    let dir = tempdir("dpdk-veth");
    let stats = dir.join("stats");
    let (tap, _) = taps("vk");
    let mut p = Pmd::start(
        &ns.a,
        &["--wire", &ns.veth_a, "--netdev", &tap],
        &["--forward-mode=rxonly"],
        &stats,
    );
    p.cmd("start");
    // Kernel -> testpmd.
    let n = 5000usize;
    let mac_b = ns.mac(&ns.b, &ns.veth_b);
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| udp_frame([0x02, 0xfc, 0, 0, 0, 1], mac_b, 2000 + (i % 64) as u16, 128))
        .collect();
    let veth_b = ns.veth_b.clone();
    let sent = ns.run_in(&ns.b, move || kernel_send(&veth_b, &frames));
    assert_eq!(sent, n);
    let s = p.stats_until(0, Duration::from_secs(60), |s, p| {
        s.rx + s.missed == n as u64
            && s.rx == p.model(0, "rx_frames")
            && s.missed == p.model(0, "rx_no_buffer")
    });
    // On a loaded host testpmd misses many; each is counted.
    assert!(s.rx >= 256, "only {s:?} received");
    p.cmd("stop");
    // testpmd -> kernel: txonly to the peer veth's MAC.
    let before_rx = if_stat(&ns, &ns.b, &ns.veth_b, "rx_packets");
    let before_drop = if_stat(&ns, &ns.a, &ns.veth_a, "tx_dropped");
    let mac = support::mac_text(mac_b);
    p.cmd(&format!("set eth-peer 0 {mac}"));
    p.cmd("set fwd txonly");
    p.cmd("start");
    p.stats_until(0, Duration::from_secs(60), |s, _| s.tx >= 200_000);
    p.cmd("stop");
    let s = settled(&mut p, 0);
    let on_wire = p.model(0, "tx_frames") - p.model(0, "wire_drops");
    assert_eq!(s.tx, p.model(0, "tx_frames"));
    let got = if_stat(&ns, &ns.b, &ns.veth_b, "rx_packets") - before_rx;
    let dropped = if_stat(&ns, &ns.a, &ns.veth_a, "tx_dropped") - before_drop;
    assert_eq!(
        got + dropped,
        on_wire,
        "the kernel got {got} (veth dropped {dropped}) of {on_wire} put on the wire"
    );
    assert!(got > 0);
    p.quit();
}

/// rawq and DPDK on one wire: rawq's pktgen on one emulated NIC (DV backend), testpmd on
/// another, across a veth. pktgen's frames reach testpmd (each received or missed, as the
/// model counts); testpmd's first bursts (`start tx_first`) reach pktgen's receive queue,
/// every one.
#[test]
fn rawq_pktgen_and_testpmd_across_a_veth() {
    let _one = serial();
    let Some(ns) = netns("dpdkrq") else { return };
    let dir = tempdir("dpdk-rawq");
    let stats = dir.join("stats");
    let (tap, tap_b) = taps("rq");
    let pktgen = support::example("pktgen");
    let pktgen = pktgen.to_str().unwrap();
    let mut p = Pmd::start(
        &ns.a,
        &["--wire", &ns.veth_a, "--netdev", &tap],
        &["--forward-mode=rxonly"],
        &stats,
    );
    p.cmd("start");
    // rawq -> DPDK: 5000 frames at 20000/s.
    let n = 5000u64;
    let out = emu_sh(
        Some((&ns.b, &ns.veth_b)),
        Some(120),
        &["--netdev", &tap_b],
        &[
            pktgen,
            "-b",
            "dv",
            "-d",
            "mlx5_0",
            "-n",
            &n.to_string(),
            "-r",
            "20000",
            "-s",
            "60",
            "--dst-mac",
            "02:fc:00:00:00:01",
        ],
        &dir.join("stats-pktgen"),
    )
    .output()
    .expect("run pktgen");
    assert!(out.status.success(), "pktgen:\n{}", text(&out));
    let s = p.stats_until(0, Duration::from_secs(60), |s, p| {
        s.rx + s.missed == n
            && s.rx == p.model(0, "rx_frames")
            && s.missed == p.model(0, "rx_no_buffer")
    });
    assert!(s.rx >= 256, "only {s:?} received");
    p.cmd("stop");
    // DPDK -> rawq: pktgen receives (UDP port 9, testpmd's txonly frames) while testpmd sends
    // 20 bursts of 32 first, then forwards (io) what comes back: nothing.
    let rx_out = dir.join("pktgen-rx.out");
    let rx_err = dir.join("pktgen-rx.err");
    let mut rx = emu_sh(
        Some((&ns.b, &ns.veth_b)),
        None,
        &["--netdev", &tap_b],
        &[
            pktgen,
            "-b",
            "dv",
            "-d",
            "mlx5_0",
            "--rx",
            "--rule",
            "udp dst-port 9 -> queue 0",
            "--ring",
            "4096",
            "-t",
            "15",
            "--quiet",
            "--json",
        ],
        &dir.join("stats-pktgen-rx"),
    )
    .stdout(std::fs::File::create(&rx_out).unwrap())
    .stderr(std::fs::File::create(&rx_err).unwrap())
    .spawn()
    .expect("start pktgen --rx");
    let end = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&rx_err).is_ok_and(|t| t.contains("pktgen: dv on")) {
        assert!(
            std::time::Instant::now() < end && rx.try_wait().ok().flatten().is_none(),
            "pktgen --rx did not open its port:\n{}",
            std::fs::read_to_string(&rx_err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    p.cmd("set fwd io");
    // testpmd sends its tx_first bursts before `start` returns (testpmd.c
    // start_packet_forwarding: one txonly burst per round, then rte_eal_mp_wait_lcore). On a
    // loaded machine the PMD may take only part of a burst (its ring full of sends the device
    // has not completed yet): txonly frees the rest and counts it in the stream's
    // fwd_dropped, printed as TX-dropped at `stop`. Every frame is counted once either way.
    p.cmd("start tx_first 20");
    let s = p.stats_until(0, Duration::from_secs(30), |s, p| {
        s.tx > 0 && p.model(0, "tx_frames") == s.tx
    });
    let stop = p.cmd("stop");
    let dropped = stop
        .find("Forward statistics for port 0")
        .and_then(|at| stop[at..].find("TX-dropped:").map(|d| at + d + 11))
        .and_then(|at| stop[at..].split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no TX-dropped for port 0 in testpmd's stop:\n{stop}"));
    assert_eq!(
        s.tx + dropped,
        640,
        "testpmd's 20 bursts of 32: {s:?}\n{stop}"
    );
    assert!(s.tx >= 256, "the PMD took only {} of 640: {s:?}", s.tx);
    assert_eq!(p.model(0, "wire_drops"), 0, "{s:?}");
    let status = rx.wait().unwrap();
    let rx_text = std::fs::read_to_string(&rx_out).unwrap_or_default();
    assert!(
        status.success(),
        "pktgen --rx: {status}\n{rx_text}\n{}",
        std::fs::read_to_string(&rx_err).unwrap_or_default()
    );
    let at = rx_text
        .find("\"rx_packets\":")
        .expect("rx_packets in pktgen's JSON")
        + 13;
    let got: u64 = rx_text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        got, s.tx,
        "pktgen received {got} of the {} testpmd sent:\n{rx_text}",
        s.tx
    );
    p.quit();
}

/// `ip netns exec NS bash scripts/emu.sh --cable CABLE OPTS -- CMD`, the device's counters in
/// `stats`: one end of a cable between two processes' emulated devices.
fn on_cable(
    ns: &str,
    cable: &std::path::Path,
    opts: &[&str],
    cmd: &[&str],
    stats: &std::path::Path,
) -> std::process::Command {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", ns, "timeout", "120", "bash"])
        .arg(root.join("scripts/emu.sh"))
        .arg("--cable")
        .arg(cable)
        .args(opts)
        .arg("--")
        .args(cmd)
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .env_remove("RAWQ_EMU_TX_ERROR")
        .env("RAWQ_EMU_STATS", stats);
    c
}

/// The number after `"key":` in pktgen's JSON summary.
fn json_u64(text: &str, key: &str) -> u64 {
    let pat = format!("\"{key}\":");
    let at = text
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in pktgen's JSON:\n{text}"))
        + pat.len();
    text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("{key} is not a number in:\n{text}"))
}

/// The port state devinfo reports for mlx5_0 at one end of `cable` (`active` or `down`).
fn cable_port_state(ns: &str, cable: &std::path::Path, dir: &std::path::Path) -> String {
    let devinfo = support::example("devinfo");
    let out = on_cable(
        ns,
        cable,
        &[],
        &[devinfo.to_str().unwrap()],
        &dir.join("stats-devinfo"),
    )
    .output()
    .expect("run devinfo");
    let t = text(&out);
    assert!(out.status.success(), "devinfo:\n{t}");
    let at = t
        .find("port 1: ")
        .unwrap_or_else(|| panic!("no port 1 in:\n{t}"))
        + 8;
    t[at..].split_whitespace().next().unwrap_or("").to_owned()
}

/// The cable's link state follows its other end (as the veth wire's follows the veth): a
/// process alone on a cable has its port down; with testpmd on the other end it is active;
/// once testpmd is gone it is down again.
#[test]
fn a_cable_is_up_only_while_its_other_end_is_there() {
    let _one = serial();
    let Some(ns) = netns("dpdkcl") else { return };
    let dir = tempdir("dpdk-cable-link");
    let cable = dir.join("cable");
    assert_eq!(cable_port_state(&ns.a, &cable, &dir), "down", "alone");
    let (tap, _) = taps("cl");
    let p = Pmd::start(
        &ns.a,
        &["--cable", cable.to_str().unwrap(), "--netdev", &tap],
        &["--forward-mode=rxonly", "--disable-link-check"],
        &dir.join("stats"),
    );
    assert_eq!(
        cable_port_state(&ns.a, &cable, &dir),
        "active",
        "testpmd on the other end"
    );
    p.quit();
    assert_eq!(
        cable_port_state(&ns.a, &cable, &dir),
        "down",
        "testpmd gone"
    );
}

/// rawq and DPDK as peers on one cable between two processes (`--cable`: `--pair` across
/// processes, no kernel netdev in between), with rawq's pktgen on the DV and on the verbs
/// backend. rawq -> DPDK: pktgen sends 5000 frames, testpmd (rxonly) receives or misses each;
/// DPDK -> rawq: testpmd's txonly frames reach pktgen --rx. Both ways the counts are exact:
/// what the sending device's model put on the cable (sent less its wire drops) is what the
/// receiving device's model delivered plus its no-buffer drops, and each tool's own counts are
/// its device's.
#[test]
fn rawq_pktgen_and_testpmd_across_a_cable() {
    let _one = serial();
    let Some(ns) = netns("dpdkcb") else { return };
    let dir = tempdir("dpdk-cable");
    let pktgen = support::example("pktgen");
    let pktgen = pktgen.to_str().unwrap();
    for backend in ["dv", "verbs"] {
        let cable = dir.join(format!("cable-{backend}"));
        let stats = dir.join(format!("stats-{backend}"));
        let (tap, tap_b) = taps("cb");
        let mut p = Pmd::start(
            &ns.a,
            &["--cable", cable.to_str().unwrap(), "--netdev", &tap],
            &["--forward-mode=rxonly", "--disable-link-check"],
            &stats,
        );
        p.cmd("start");
        // rawq -> DPDK.
        let n = 5000u64;
        let tx_stats = dir.join(format!("stats-pktgen-{backend}"));
        let out = on_cable(
            &ns.a,
            &cable,
            &["--netdev", &tap_b],
            &[
                pktgen,
                "-b",
                backend,
                "-d",
                "mlx5_0",
                "-n",
                &n.to_string(),
                "-r",
                "20000",
                "-s",
                "60",
                "--dst-mac",
                "02:fc:00:00:00:01",
                "--json",
            ],
            &tx_stats,
        )
        .output()
        .expect("run pktgen");
        let t = text(&out);
        assert!(out.status.success(), "{backend}: pktgen:\n{t}");
        let sent = json_u64(&t, "packets");
        let model_tx = last(&tx_stats, "tx_frames");
        assert_eq!(sent, n, "{backend}: pktgen sent {sent} of {n}:\n{t}");
        assert_eq!(model_tx, sent, "{backend}: pktgen's device sent {model_tx}");
        let on_cable_n = model_tx - last(&tx_stats, "wire_drops");
        let s = p.stats_until(0, Duration::from_secs(60), |s, p| {
            s.rx + s.missed == on_cable_n
                && s.rx == p.model(0, "rx_frames")
                && s.missed == p.model(0, "rx_no_buffer")
        });
        assert!(s.rx >= 256, "{backend}: only {s:?} received");
        p.cmd("stop");

        // DPDK -> rawq.
        let rx_stats = dir.join(format!("stats-pktgen-rx-{backend}"));
        let rx_out = dir.join(format!("pktgen-rx-{backend}.out"));
        let rx_err = dir.join(format!("pktgen-rx-{backend}.err"));
        let mut rx = on_cable(
            &ns.a,
            &cable,
            &["--netdev", &tap_b],
            &[
                pktgen,
                "-b",
                backend,
                "-d",
                "mlx5_0",
                "--rx",
                "--rule",
                "udp dst-port 9 -> queue 0",
                "--ring",
                "4096",
                "-t",
                "15",
                "--quiet",
                "--json",
            ],
            &rx_stats,
        )
        .stdout(std::fs::File::create(&rx_out).unwrap())
        .stderr(std::fs::File::create(&rx_err).unwrap())
        .spawn()
        .expect("start pktgen --rx");
        let ready = format!("pktgen: {backend} on");
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&rx_err).is_ok_and(|t| t.contains(&ready)) {
            assert!(
                std::time::Instant::now() < end && rx.try_wait().ok().flatten().is_none(),
                "{backend}: pktgen --rx did not open its port:\n{}",
                std::fs::read_to_string(&rx_err).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p.cmd("set fwd txonly");
        p.cmd("start");
        p.stats_until(0, Duration::from_secs(30), |s, _| s.tx >= 20_000);
        p.cmd("stop");
        let s = settled(&mut p, 0);
        let on_cable_n = p.model(0, "tx_frames") - p.model(0, "wire_drops");
        let status = rx.wait().unwrap();
        let rx_text = std::fs::read_to_string(&rx_out).unwrap_or_default();
        assert!(
            status.success(),
            "{backend}: pktgen --rx: {status}\n{rx_text}\n{}",
            std::fs::read_to_string(&rx_err).unwrap_or_default()
        );
        let got = json_u64(&rx_text, "rx_packets");
        let delivered = last(&rx_stats, "rx_frames");
        let no_buffer = last(&rx_stats, "rx_no_buffer");
        assert_eq!(
            got, delivered,
            "{backend}: pktgen's count, its device's:\n{rx_text}"
        );
        assert_eq!(
            json_u64(&rx_text, "device_rx_no_buffer"),
            no_buffer,
            "{backend}:\n{rx_text}"
        );
        assert_eq!(
            delivered + no_buffer,
            on_cable_n,
            "{backend}: testpmd sent {s:?}, {on_cable_n} on the cable; pktgen's device \
             delivered {delivered} and had no buffer for {no_buffer}:\n{rx_text}"
        );
        assert!(got > 0, "{backend}: pktgen received nothing");
        p.quit();
    }
}

/// Waits until `file` contains `pat` (fails the test past `limit`, or when `child` exits first).
fn wait_in_file(
    file: &std::path::Path,
    pat: &str,
    child: &mut std::process::Child,
    limit: Duration,
) {
    let end = std::time::Instant::now() + limit;
    while !std::fs::read_to_string(file).is_ok_and(|t| t.contains(pat)) {
        assert!(
            std::time::Instant::now() < end && child.try_wait().ok().flatten().is_none(),
            "no {pat:?} in {}:\n{}",
            file.display(),
            std::fs::read_to_string(file).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running rawq sees the cable's link events: pktgen (`--on-link-down wait`) sending to
/// testpmd gets link down (`IBV_EVENT_PORT_ERR`) when testpmd quits, and link up when another
/// testpmd plugs into the same cable (pktgen's end, the one that had connected, now waits
/// for it); the new testpmd then receives pktgen's frames.
#[test]
fn a_running_rawq_follows_its_cable_down_and_up() {
    let _one = serial();
    let Some(ns) = netns("dpdkcu") else { return };
    let dir = tempdir("dpdk-cable-updown");
    let cable = dir.join("cable");
    let (tap, tap_b) = taps("cu");
    let pmd = |k: u32| {
        Pmd::start(
            &ns.a,
            &["--cable", cable.to_str().unwrap(), "--netdev", &tap],
            &["--forward-mode=rxonly", "--disable-link-check"],
            &dir.join(format!("stats{k}")),
        )
    };
    let first = pmd(1);
    let pktgen = support::example("pktgen");
    let err = dir.join("pktgen.err");
    let mut g = on_cable(
        &ns.a,
        &cable,
        &["--netdev", &tap_b],
        &[
            pktgen.to_str().unwrap(),
            "-b",
            "dv",
            "-d",
            "mlx5_0",
            "-r",
            "2000",
            "-t",
            "100",
            "--on-link-down",
            "wait",
            "--quiet",
        ],
        &dir.join("stats-pktgen"),
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&err).unwrap())
    .spawn()
    .expect("start pktgen");
    wait_in_file(&err, "pktgen: dv on", &mut g, Duration::from_secs(60));
    first.quit();
    wait_in_file(&err, "link down", &mut g, Duration::from_secs(30));
    let mut second = pmd(2);
    second.cmd("start");
    wait_in_file(&err, "link up after", &mut g, Duration::from_secs(60));
    let s = second.stats_until(0, Duration::from_secs(30), |s, _| s.rx + s.missed > 0);
    second.cmd("stop");
    // SAFETY: kill(2) of our own child's pid (timeout, which stops the launcher).
    unsafe { libc::kill(g.id() as i32, libc::SIGTERM) };
    let _ = g.wait();
    second.quit();
    assert!(s.rx + s.missed > 0, "{s:?}");
}
