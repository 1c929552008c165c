//! Issue 19 item 3, device fatal, on the emulated ConnectX (looped back): the device hits a
//! fatal internal error while pktgen or fwd runs (`RAWQ_EMU_FATAL_FILE`: the emulator raises
//! `IB_EVENT_DEVICE_FATAL` on every context's async fd, as mlx5_ib does on
//! `MLX5_DEV_EVENT_SYS_ERROR`, and answers every later command EIO). rawq reads it as
//! `LinkEvent::DeviceFatal`: the run ends with a non-zero status, naming the device and the
//! cause, whatever `--on-link-down` says.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::emu::{emu_sh, last_counter, serial, tempdir, text};
use support::run::Run;

/// Runs `tool` (pktgen or fwd, with `args`) on the emulated NIC, makes the device fail once
/// it runs, and checks how the run ends.
fn ends_on_device_fatal(tool: &str, args: &[&str]) {
    let _one = serial();
    let dir = tempdir(&format!("fatal-{tool}-{}", args[1]));
    let (stats, fatal) = (dir.join("model.stats"), dir.join("fatal"));
    let _ = std::fs::remove_file(&fatal);
    let exe = support::example(tool);
    let mut cmd = vec![exe.to_str().unwrap()];
    cmd.extend(args);
    let mut child =
        Run::spawn(emu_sh(None, Some(120), &[], &cmd, &stats).env("RAWQ_EMU_FATAL_FILE", &fatal));
    // Running: pktgen has sent (the model's counters), fwd has said it forwards.
    let sending = child.wait_until(Duration::from_secs(60), |err| {
        last_counter(&stats, "tx_frames").is_some_and(|n| n > 100) || err.contains("fwd: mlx5_0 (")
    });
    if sending {
        std::fs::write(&fatal, b"").unwrap();
    }
    let t = Instant::now();
    let out = child.finish(Duration::from_secs(30));
    let all = text(&out);
    assert!(sending, "{tool} never sent:\n{all}");
    assert!(t.elapsed() < Duration::from_secs(25), "{all}");
    assert!(!out.status.success(), "non-zero status: {all}");
    assert!(
        all.contains("mlx5_0") && all.contains("IBV_EVENT_DEVICE_FATAL"),
        "the cause, naming the device: {all}"
    );
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

fn pktgen(backend: &str) {
    ends_on_device_fatal(
        "pktgen",
        &[
            "-b", backend, "-d", "mlx5_0", "-r", "20kpps", "-t", "60", "--quiet",
        ],
    );
}

fn fwd(backend: &str) {
    ends_on_device_fatal(
        "fwd",
        &[
            "-b",
            backend,
            "-d",
            "mlx5_0",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "-t",
            "60",
            "--on-link-down",
            "wait",
            "--quiet",
        ],
    );
}

#[test]
fn emu_dv_pktgen_ends_naming_the_device_fatal_error() {
    pktgen("dv");
}

#[test]
fn emu_verbs_pktgen_ends_naming_the_device_fatal_error() {
    pktgen("verbs");
}

#[test]
fn emu_dv_fwd_ends_naming_the_device_fatal_error_even_with_on_link_down_wait() {
    fwd("dv");
}

#[test]
fn emu_verbs_fwd_ends_naming_the_device_fatal_error_even_with_on_link_down_wait() {
    fwd("verbs");
}

/// A device that is failed when first used: the verbs command that starts it, and every one
/// after, fails with EIO (the kernel's answer once the device is gone), so the port does not
/// open and pktgen says so.
fn open_fails_with_eio(backend: &str) {
    let _one = serial();
    let dir = tempdir(&format!("fatal-open-{backend}"));
    let fatal = dir.join("fatal");
    std::fs::write(&fatal, b"").unwrap();
    let exe = support::example("pktgen");
    let child = Run::spawn(
        emu_sh(
            None,
            Some(120),
            &[],
            &[
                exe.to_str().unwrap(),
                "-b",
                backend,
                "-d",
                "mlx5_0",
                "-n",
                "100",
                "--quiet",
            ],
            &dir.join("model.stats"),
        )
        .env("RAWQ_EMU_FATAL_FILE", &fatal),
    );
    let out = child.finish(Duration::from_secs(60));
    let all = text(&out);
    assert!(!out.status.success(), "non-zero status: {all}");
    assert!(
        all.contains("pktgen: ibv_") && all.contains("Input/output error"),
        "a verbs call failed with EIO: {all}"
    );
    assert!(!all.contains("pktgen tx:"), "nothing was sent: {all}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn emu_verbs_port_on_a_failed_device_does_not_open_eio() {
    open_fails_with_eio("verbs");
}

#[test]
fn emu_dv_port_on_a_failed_device_does_not_open_eio() {
    open_fails_with_eio("dv");
}
