//! rawq's own control path on the emulated ConnectX: `rawq-devinfo` queries the device
//! through libibverbs and `mlx5dv_query_device`, whose answers libmlx5 builds from what the
//! emulated kernel returned (QUERY_DEVICE, EX_QUERY_DEVICE's mlx5 part, QUERY_PORT).
#![cfg(feature = "verbs")]

use rawq_testkit as support;

use std::process::Command;

fn devinfo(opts: &[&str]) -> String {
    devinfo_in(None, opts)
}

/// `[ip netns exec NS] bash scripts/emu.sh OPTS -- devinfo`: its stdout (it must succeed).
fn devinfo_in(ns: Option<&str>, opts: &[&str]) -> String {
    let root = support::repo_root();
    let exe = support::example("devinfo");
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "bash"]);
            c
        }
        None => Command::new("bash"),
    };
    let out = c
        .arg(root.join("scripts/emu.sh"))
        .args(opts)
        .arg("--")
        .arg(exe)
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .output()
        .expect("run scripts/emu.sh");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "devinfo failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn rawq_devinfo_sees_the_emulated_connectx5() {
    let out = devinfo(&[]);
    assert!(out.starts_with("mlx5_0\n"), "{out}");
    assert!(
        out.contains("firmware 16.35.1012  vendor 0x02c9 part 4119  ports 1"),
        "{out}"
    );
    // mlx5dv_query_device: the capabilities of the device model.
    assert!(
        out.contains("mlx5 DV: yes  min inline 0 (guessed from the PCI id)  eMPW yes  MPW yes  CQE compression up to 64"),
        "{out}"
    );
    assert!(
        out.contains("striding RQ 2^3..2^16 strides of 2^6..2^13 bytes"),
        "{out}"
    );
    assert!(
        out.contains("port 1: active  link layer Ethernet  MAC 02:fc:00:00:00:01"),
        "{out}"
    );
    assert!(out.contains("flow steering: yes"), "{out}");
    // ibv_query_device_ex through the verbs.h inline wrapper (rdma-sys's own version rejected
    // every 64-bit context, so these read 0 / "no").
    assert!(
        out.contains(
            "RSS on RAW_PACKET: yes (table up to 2048, hash fields 0xff)  TSO up to 262144"
        ),
        "{out}"
    );
}

#[test]
fn rawq_devinfo_sees_the_connectx4_lx_inline_mode() {
    // The L2 inline mode is a ConnectX-4 Lx (part 4117): rawq's DV backend, like DPDK's mlx5
    // PMD without DevX, then inlines the 18-byte L2 header.
    let out = devinfo(&["--min-inline", "l2"]);
    assert!(out.contains("part 4117"), "{out}");
    assert!(out.contains("min inline 18"), "{out}");
}

/// The port line of devinfo's output.
fn port_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.trim_start().starts_with("port 1:"))
        .unwrap_or_else(|| panic!("no port line in:\n{out}"))
}

/// Issue 20 defect 7: with `--netdev`, devinfo names the port's netdev and shows its MAC (the
/// emulated port's MAC is the TAP's, as a real port's is its netdev's) and its Ethernet MTU,
/// not the RoCE MTU 1024.
#[test]
fn devinfo_shows_the_netdev_its_mac_and_its_mtu() {
    let Some(ns) = support::NetnsPair::new("dinfo") else {
        return;
    };
    let tap = format!("rqdi{}", std::process::id() % 100_000);
    // Made beforehand with a known MAC and MTU (emu.sh uses a TAP that exists).
    let made = ns.exec(&ns.a, &["ip", "tuntap", "add", "dev", &tap, "mode", "tap"]);
    assert!(made.status.success(), "ip tuntap: {made:?}");
    for args in [
        &[
            "ip",
            "link",
            "set",
            "dev",
            &tap,
            "address",
            "02:11:22:33:44:55",
        ][..],
        &["ip", "link", "set", "dev", &tap, "mtu", "1400", "up"][..],
    ] {
        assert!(ns.exec(&ns.a, args).status.success(), "{args:?}");
    }
    let out = devinfo_in(Some(&ns.a), &["--netdev", &tap]);
    let line = port_line(&out);
    assert!(line.contains(&format!("netdev {tap}")), "{line}");
    assert!(line.contains("MAC 02:11:22:33:44:55"), "{line}");
    assert!(line.contains("MTU 1400"), "{line}");
    assert!(!line.contains("MTU 1024"), "{line}");
}

/// Issue 20 defect 7: two emulated NICs on the two ends of a veth have MACs of their own (they
/// all had 02:fc:00:00:00:01).
#[test]
fn emulated_nics_on_two_wires_have_different_macs() {
    let Some(ns) = support::NetnsPair::new("dmac") else {
        return;
    };
    let mac = |ns_name: &str, wire: &str| {
        let out = devinfo_in(Some(ns_name), &["--wire", wire]);
        let line = port_line(&out).to_owned();
        line.split("MAC ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no MAC in {line}"))
    };
    let (a, b) = (mac(&ns.a, &ns.veth_a), mac(&ns.b, &ns.veth_b));
    assert_ne!(a, b, "both ends' NICs have one MAC");
    // Locally administered, unicast.
    for m in [&a, &b] {
        let first = u8::from_str_radix(&m[..2], 16).unwrap();
        assert_eq!(first & 3, 2, "{m}");
    }
}

/// Issue 20 defect 7: `devinfo --help` says what it does (it was ignored).
#[test]
fn devinfo_help_is_help() {
    let out = Command::new(support::example("devinfo"))
        .arg("--help")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run devinfo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Usage") && text.contains("RDMA devices"),
        "{text}"
    );
    let out = Command::new(support::example("devinfo"))
        .arg("--bogus")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run devinfo");
    assert_eq!(out.status.code(), Some(2), "an unknown option is refused");
}

/// Issue 20 defect 7: a port the device does not have is named as such on -b dv, as on -b
/// verbs ("mlx5_0 has ports 1..=1"), not as `ibv_query_port failed: Invalid argument`.
#[cfg(feature = "mlx5")]
#[test]
fn a_missing_port_is_named_on_dv_as_on_verbs() {
    let root = support::repo_root();
    let pktgen = support::example("pktgen");
    for backend in ["dv", "verbs"] {
        let out = Command::new("bash")
            .arg(root.join("scripts/emu.sh"))
            .arg("--")
            .arg(&pktgen)
            .args(["-b", backend, "-d", "mlx5_0", "--port", "2", "-n", "1"])
            .current_dir(root)
            .env_remove("LD_PRELOAD")
            .env_remove("RAWQ_EMU_LIB")
            .output()
            .expect("run scripts/emu.sh");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "-b {backend} --port 2: {err}");
        assert!(
            err.contains("mlx5_0 has ports 1..=1; port 2 does not exist"),
            "-b {backend} --port 2: {err}"
        );
    }
}
