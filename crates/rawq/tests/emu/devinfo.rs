//! The emulated ConnectX as the vendor's own tools see it: `ibv_devices` and `ibv_devinfo -v`
//! (ibverbs-utils, unmodified, through Debian's libibverbs + libmlx5) run under
//! `scripts/emu.sh` and must list mlx5_0 with an active Ethernet port and the capabilities the
//! device model has.

use rawq_testkit as support;

use std::path::Path;
use std::process::Command;

/// Runs `scripts/emu.sh [opts] -- cmd...` and returns (status ok, stdout, stderr).
fn emu(opts: &[&str], cmd: &[&str]) -> (bool, String, String) {
    let root = support::repo_root();
    let out = Command::new("bash")
        .arg(root.join("scripts/emu.sh"))
        .args(opts)
        .arg("--")
        .args(cmd)
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/emu.sh: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn need(tool: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{tool} is missing: install Debian's ibverbs-utils (scripts/setup.sh does)"
    );
}

/// The value after `key:` on the line that has it (tabs and spaces trimmed).
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.trim().strip_prefix(':'))
        .map(str::trim)
}

#[test]
fn ibv_devices_lists_mlx5_0() {
    need("ibv_devices");
    let (ok, out, err) = emu(&[], &["ibv_devices"]);
    assert!(ok, "ibv_devices failed:\n{out}\n{err}");
    let line = out
        .lines()
        .find(|l| l.contains("mlx5_0"))
        .unwrap_or_else(|| panic!("no mlx5_0 in:\n{out}\n{err}"));
    assert!(line.contains("0c42a10300fc0001"), "{line}");
}

#[test]
fn ibv_devinfo_shows_an_active_ethernet_connectx5_with_the_model_caps() {
    need("ibv_devinfo");
    let (ok, out, err) = emu(&[], &["ibv_devinfo", "-v"]);
    assert!(ok, "ibv_devinfo failed:\n{out}\n{err}");
    assert_eq!(field(&out, "hca_id"), Some("mlx5_0"), "{out}");
    assert_eq!(field(&out, "state"), Some("PORT_ACTIVE (4)"), "{out}");
    assert_eq!(field(&out, "link_layer"), Some("Ethernet"), "{out}");
    assert_eq!(field(&out, "vendor_part_id"), Some("4119"), "{out}");
    assert_eq!(field(&out, "fw_ver"), Some("16.35.1012"), "{out}");
    assert_eq!(field(&out, "phys_port_cnt"), Some("1"), "{out}");
    // RSS (EX_QUERY_DEVICE rss_caps), TSO and IP checksum offload, as the model implements.
    assert_eq!(
        field(&out, "max_rwq_indirection_table_size"),
        Some("2048"),
        "{out}"
    );
    assert_eq!(field(&out, "rx_hash_fields_mask"), Some("0xFF"), "{out}");
    assert!(out.contains("IP csum offload"), "{out}");
    assert!(out.contains("RAW_IP_CSUM"), "{out}");
    // The device clock (the CORE_CLOCK page libmlx5 maps).
    assert_eq!(field(&out, "hca_core_clock"), Some("156250kHZ"), "{out}");
    // GIDs from the generated sysfs tree.
    assert!(
        out.contains("fe80:0000:0000:0000:00fc:00ff:fe00:0001, RoCE v1"),
        "{out}"
    );
}

#[test]
fn min_inline_l2_still_opens_and_bad_options_are_refused() {
    need("ibv_devinfo");
    let (ok, out, err) = emu(&["--min-inline", "l2"], &["ibv_devinfo"]);
    assert!(ok && out.contains("PORT_ACTIVE"), "{out}\n{err}");
    assert_eq!(
        field(&out, "vendor_part_id"),
        Some("4117"),
        "ConnectX-4 Lx: {out}"
    );
    let (ok, _, err) = emu(&["--min-inline", "l3"], &["true"]);
    assert!(!ok && err.contains("none or l2"), "{err}");
    let (ok, _, err) = emu(&["--wire", "rawq-no-such-if0"], &["true"]);
    assert!(!ok && err.contains("no such interface"), "{err}");
}

#[test]
fn the_command_status_and_the_temporary_tree_are_handled() {
    // The command's exit status comes back; the sysfs tree exists while it runs and is gone
    // after.
    let (ok, out, err) = emu(
        &[],
        &[
            "sh",
            "-c",
            "test -f \"$SYSFS_PATH/class/infiniband_verbs/uverbs0/ibdev\" && echo \"$SYSFS_PATH\"; exit 3",
        ],
    );
    assert!(!ok, "status 3 must fail the launcher");
    let dir = out.trim();
    assert!(
        !dir.is_empty(),
        "no sysfs tree while the command ran: {err}"
    );
    assert!(!Path::new(dir).exists(), "{dir} left behind");
}

/// Starts the launcher in a fresh namespace with a TAP netdev and a long command, then sends it
/// `sig`: it must exit with 128 + sig, and leave neither its temporary tree nor the TAP.
fn launcher_cleans_up_on(sig: i32) {
    let Some(ns) = support::NetnsPair::new("emusig") else {
        return;
    };
    let tap = format!("rqtap{}", std::process::id() % 100_000);
    let root = support::repo_root();
    let mut child = Command::new("ip");
    child
        .args(["netns", "exec", &ns.a, "bash"])
        .arg(root.join("scripts/emu.sh"))
        .args([
            "--netdev",
            &tap,
            "--",
            "sh",
            "-c",
            "echo \"$SYSFS_PATH\"; exec sleep 60",
        ])
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .stdout(std::process::Stdio::piped());
    let mut child = support::procs::default_signals(&mut child)
        .spawn()
        .expect("start the launcher");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let dir = line.trim().to_string();
    assert!(Path::new(&dir).exists(), "sysfs tree {dir:?} while running");
    let tap_exists = || {
        ns.exec(&ns.a, &["ip", "link", "show", &tap])
            .status
            .success()
    };
    assert!(tap_exists(), "the launcher made no TAP {tap}");
    // SAFETY: kill() on the launcher's own pid (ip netns exec execs bash in place).
    unsafe { libc::kill(child.id() as i32, sig) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + sig), "exit status");
    assert!(!Path::new(&dir).exists(), "{dir} left behind");
    assert!(!tap_exists(), "TAP {tap} left behind");
}

#[test]
fn launcher_cleans_up_on_sigterm() {
    launcher_cleans_up_on(libc::SIGTERM);
}

#[test]
fn launcher_cleans_up_on_ctrl_c() {
    launcher_cleans_up_on(libc::SIGINT);
}
