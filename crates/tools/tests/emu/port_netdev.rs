//! Issue 32 items 2 and 4 on the emulated ConnectX: the port reports a netdev of its own (not
//! `lo`), with the port's MTU and the mlx5e-named ethtool statistics, so that a frame larger
//! than the port takes is refused before anything is posted, naming the option and the limit,
//! and `ethtool -S` (an oracle nobody here wrote) reads the port's counters.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::process::{Output, Stdio};
use std::time::Duration;

use support::emu::{counter, emu_sh, serial, tempdir, text, wait_for};

/// `scripts/emu.sh [OPTS] -- CMD...`, its output, and the device model's `tx_frames` (0 when
/// the model never wrote its counters).
fn emu(tag: &str, opts: &[&str], cmd: &[&str]) -> (Output, u64) {
    let dir = tempdir(tag);
    let stats = dir.join("model.stats");
    let _ = std::fs::remove_file(&stats);
    let child = emu_sh(None, Some(120), opts, cmd, &stats)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/emu.sh");
    let o = wait_for(child, Duration::from_secs(150));
    let sent = counter(&stats, "tx_frames").unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
    (o, sent)
}

/// `pktgen -b BACKEND -s SIZE -n 10` on the emulated port of MTU 1500.
fn send(backend: &str, size: &str) -> (Output, u64) {
    let pktgen = support::example("pktgen");
    emu(
        &format!("mtu-{backend}-{size}"),
        &["--mtu", "1500"],
        &[
            pktgen.to_str().unwrap(),
            "-b",
            backend,
            "-d",
            "mlx5_0",
            "-s",
            size,
            "-n",
            "10",
            "-r",
            "1000",
        ],
    )
}

fn refuses_a_frame_above_the_port_mtu(backend: &str) {
    let _one = serial();
    let (o, sent) = send(backend, "2000");
    let err = String::from_utf8_lossy(&o.stderr);
    // Before: the port named lo (MTU 65536) as its netdev, so 2000-byte frames were posted,
    // completed in error (local length) and the run exited 0.
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        err.contains("-s / --pcap: frames of up to 2000 bytes")
            && err.contains("(MTU 1500 + 18), 1518 bytes")
            && err.contains("-s 1518"),
        "{err}"
    );
    assert_eq!(sent, 0, "nothing is posted: {}", text(&o));
    // The limit is the port's own: a frame of 1518 bytes goes.
    let (o, sent) = send(backend, "1518");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(sent, 10, "{}", text(&o));
}

#[test]
fn dv_refuses_a_frame_above_the_port_mtu() {
    refuses_a_frame_above_the_port_mtu("dv");
}

#[test]
fn verbs_refuses_a_frame_above_the_port_mtu() {
    refuses_a_frame_above_the_port_mtu("verbs");
}

/// `ethtool -S` run under the interposer on the interface the port names as its netdev (its
/// GID table's `ndevs/0`, as rawq and DPDK find it) reads the mlx5e counters; other ethtool
/// requests on it are the kernel's. ethtool 6.1 reads `-S` with `SIOCETHTOOL`
/// (`ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`, `ETHTOOL_GSTATS`).
#[test]
fn ethtool_reads_the_port_netdevs_counters() {
    let _one = serial();
    if std::process::Command::new("ethtool")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no ethtool on PATH");
        return;
    }
    let script = "nd=$(cat \"$SYSFS_PATH/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0\") \
                  && echo \"netdev=$nd\" && ip -o link show dev \"$nd\" && ethtool -i \"$nd\" \
                  && ethtool -S \"$nd\"";
    let (o, _) = emu("ethtool", &["--mtu", "1500"], &["sh", "-c", script]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    let nd = out
        .lines()
        .find_map(|l| l.strip_prefix("netdev="))
        .unwrap_or_else(|| panic!("{}", text(&o)));
    assert_ne!(nd, "lo", "the port names a netdev of its own: {}", text(&o));
    assert!(out.contains(" mtu 1500 "), "the port's MTU: {out}");
    assert!(out.contains("driver: mlx5_core"), "{out}");
    for name in [
        "rx_discards_phy",
        "tx_discards_phy",
        "rx_out_of_buffer",
        "tx_packets_phy",
    ] {
        assert!(out.contains(&format!("     {name}: 0")), "{name}: {out}");
    }
    // The interface is gone with the run.
    let left = std::process::Command::new("ip")
        .args(["link", "show", "dev", nd])
        .output()
        .expect("ip");
    assert!(!left.status.success(), "{nd} left behind");
}
