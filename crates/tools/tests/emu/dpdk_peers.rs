//! DPDK's mlx5 PMD (`dpdk-testpmd` on the emulated ConnectX, as in tests/emu/dpdk.rs) and a
//! peer on the other end of its port's wire: the kernel across a veth, or rawq's pktgen on a
//! second process's emulated NIC across a veth or a cable between the two processes. Counts
//! are exact both ways. pktgen's receive windows end on events, not after a fixed time: once
//! the sender is done and pktgen's device has seen every frame sent, pktgen gets SIGTERM,
//! counts what its queue still holds, and reports (tests/support/dpdk.rs `PktgenRx`).
//!
//! | test | port | forward | devargs / options |
//! |---|---|---|---|
//! | testpmd_and_the_kernel_… | veth to the kernel | rxonly then txonly | default |
//! | rawq_pktgen_and_testpmd_… | veth between two emulated NICs | rxonly, then io after `tx_first` | default; pktgen `-b dv` |
//! | rawq_pktgen_and_testpmd_across_a_cable | `--cable` between two processes' NICs | rxonly, then txonly | default; pktgen `-b dv` and `-b verbs` |
//! | a_cable_is_up_… | `--cable` | rxonly | the port's state at the other end (devinfo) |
//! | a_running_rawq_follows_… | `--cable` | rxonly, two testpmds in turn | pktgen `--on-link-down wait` sees link down, then up |
//!
//! Every test needs root (namespaces, TAPs) and `dpdk-testpmd` with the mlx5 PMD
//! (scripts/setup.sh); it says `skipped:` without root unless `RAWQ_REQUIRE_NETNS=1`.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::path::Path;
use std::time::Duration;

use support::dpdk::{
    if_stat, json_u64, kernel_send, last, netns, pktgen_sends, settled, taps, udp_frame, PktgenRx,
    Pmd, Wire,
};
use support::emu::{serial, tempdir, text};

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
        s.rx + s.missed == n as u64 && p.rx_as_the_model_counts(s)
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
    let mut p = Pmd::start(
        &ns.a,
        &["--wire", &ns.veth_a, "--netdev", &tap],
        &["--forward-mode=rxonly"],
        &stats,
    );
    p.cmd("start");
    let wire = Wire::Veth {
        ns: &ns.b,
        veth: &ns.veth_b,
    };
    // rawq -> DPDK: 5000 frames at 20000/s.
    let n = 5000u64;
    pktgen_sends(&wire, &tap_b, "dv", n, false, &dir.join("stats-pktgen"));
    let s = p.stats_until(0, Duration::from_secs(60), |s, p| {
        s.rx + s.missed == n && p.rx_as_the_model_counts(s)
    });
    assert!(s.rx >= 256, "only {s:?} received");
    p.cmd("stop");
    // DPDK -> rawq: pktgen receives (UDP port 9, testpmd's txonly frames) while testpmd sends
    // 20 bursts of 32 first, then forwards (io) what comes back: nothing.
    let rx = PktgenRx::start(&wire, &tap_b, "dv", &dir, "");
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
    // pktgen's window ends once its device has seen every frame testpmd sent.
    let r = rx.stop_when(s.tx, Duration::from_secs(60));
    let got = json_u64(&r.json, "rx_packets");
    assert_eq!(
        got, s.tx,
        "pktgen received {got} of the {} testpmd sent:\n{}",
        s.tx, r.json
    );
    p.quit();
}

/// The port state devinfo reports for mlx5_0 at one end of `cable` (`active` or `down`).
fn cable_port_state(ns: &str, cable: &Path, dir: &Path) -> String {
    let devinfo = support::example("devinfo");
    let out = Wire::Cable { ns, cable }
        .emu_sh(
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
        let wire = Wire::Cable {
            ns: &ns.a,
            cable: &cable,
        };
        // rawq -> DPDK.
        let n = 5000u64;
        let tx_stats = dir.join(format!("stats-pktgen-{backend}"));
        let t = pktgen_sends(&wire, &tap_b, backend, n, true, &tx_stats);
        let sent = json_u64(&t, "packets");
        let model_tx = last(&tx_stats, "tx_frames");
        assert_eq!(sent, n, "{backend}: pktgen sent {sent} of {n}:\n{t}");
        assert_eq!(model_tx, sent, "{backend}: pktgen's device sent {model_tx}");
        let on_cable_n = model_tx - last(&tx_stats, "wire_drops");
        let s = p.stats_until(0, Duration::from_secs(60), |s, p| {
            s.rx + s.missed == on_cable_n && p.rx_as_the_model_counts(s)
        });
        assert!(s.rx >= 256, "{backend}: only {s:?} received");
        p.cmd("stop");

        // DPDK -> rawq.
        let rx = PktgenRx::start(&wire, &tap_b, backend, &dir, &format!("-{backend}"));
        p.cmd("set fwd txonly");
        p.cmd("start");
        p.stats_until(0, Duration::from_secs(30), |s, _| s.tx >= 20_000);
        p.cmd("stop");
        let s = settled(&mut p, 0);
        let on_cable_n = p.model(0, "tx_frames") - p.model(0, "wire_drops");
        // pktgen's window ends once its device has delivered or dropped all of them.
        let r = rx.stop_when(on_cable_n, Duration::from_secs(60));
        let rx_text = &r.json;
        let got = json_u64(rx_text, "rx_packets");
        let (delivered, no_buffer) = (r.delivered, r.no_buffer);
        assert_eq!(
            got, delivered,
            "{backend}: pktgen's count, its device's:\n{rx_text}"
        );
        assert_eq!(
            json_u64(rx_text, "device_rx_no_buffer"),
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
    let mut g = Wire::Cable {
        ns: &ns.a,
        cable: &cable,
    }
    .emu_sh(
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
