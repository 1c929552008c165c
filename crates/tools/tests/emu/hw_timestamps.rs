//! Issue 14's acceptance "latency through the emulated NIC on the DV backend reports hardware
//! timestamps": `pktgen -b dv --txrx --latency --hw-timestamps` on the emulated ConnectX
//! (`scripts/emu.sh`, CQE timestamps on), every sample hardware-timed.
//!
//! The DV port's clock is the device's (`DeviceClock::of_verbs`: `hca_core_clock` and
//! `ibv_query_rt_values_ex`, which libmlx5 answers from the core clock page the emulator keeps
//! ticking from the device model's clock); the CQE timestamps are that clock's.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::process::Command;

#[test]
fn pktgen_dv_on_the_emulated_nic_reports_hardware_timestamps() {
    let root = support::repo_root();
    let out = Command::new("bash")
        .arg(root.join("scripts/emu.sh"))
        .arg("--")
        .arg(support::example("pktgen"))
        .args([
            "-b",
            "dv",
            "-d",
            "mlx5_0",
            "--txrx",
            "--latency",
            "--hw-timestamps",
        ])
        .args([
            "-s", "66", "-n", "2000", "-r", "20kpps", "--json", "--quiet",
        ])
        .current_dir(root)
        .env("RAWQ_EMU_CQE_TIMESTAMPS", "1")
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .output()
        .expect("run scripts/emu.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pktgen -b dv on the emulated NIC failed:\n{stdout}\n{stderr}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let l = &v["latency"];
    assert_eq!(l["timestamps"], "hardware", "{l}");
    assert_eq!(l["samples"].as_u64(), Some(2000), "{l}");
    assert_eq!(l["not_positive"].as_u64(), Some(0), "{l}");
}

/// `DeviceClock::of_verbs` on the emulated ConnectX: the frequency from
/// `ibv_query_device_ex` (`hca_core_clock`) and readings through `ibv_query_rt_values_ex`
/// (libmlx5 reads the core clock page the emulator keeps ticking), reached through the provider's
/// extended context. The test runs itself again under `scripts/emu.sh`.
#[test]
fn the_emulated_nics_clock_reads_through_verbs() {
    if std::env::var("RAWQ_HWTS_INNER").is_ok_and(|v| v == "1") {
        let ctx = rawq::ibverbs::device::open("mlx5_0").expect("open mlx5_0");
        let c = rawq::dv::cq::DeviceClock::of_verbs(&ctx).expect("device clock");
        // The emulator keeps the clock page current from a thread (every 100 µs); on a loaded
        // machine that thread can run late, so after the sleep wait (bounded) for the page to
        // show 45 ms more, and report the wall time that took: the clock must neither stall
        // nor run ahead of the host's.
        // `a` is taken the moment the page changes, and `t0` just before the last reading that
        // had not changed yet: the page's value `a` was written after `t0`, so the device time
        // from `a` to `b` cannot exceed the wall time from `t0` to after reading `b`.
        let mut t0 = std::time::Instant::now();
        let first = c.now_ticks();
        let mut a = first;
        while a == first && t0.elapsed() < std::time::Duration::from_secs(5) {
            t0 = std::time::Instant::now();
            a = c.now_ticks();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mark = a + 45 * c.khz();
        let mut b = c.now_ticks();
        while b < mark && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::yield_now();
            b = c.now_ticks();
        }
        let wall_us = t0.elapsed().as_micros();
        println!("RESULT khz {} a {a} b {b} wall_us {wall_us}", c.khz());
        return;
    }
    let root = support::repo_root();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("bash")
        .arg(root.join("scripts/emu.sh"))
        .arg("--")
        .arg(&exe)
        .args([
            "--exact",
            support::test_name(
                module_path!(),
                "the_emulated_nics_clock_reads_through_verbs",
            )
            .as_str(),
            "--nocapture",
        ])
        .current_dir(root)
        .env("RAWQ_HWTS_INNER", "1")
        .env("RAWQ_EMU_CQE_TIMESTAMPS", "1")
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .output()
        .expect("run scripts/emu.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line:\n{stdout}\n{stderr}"));
    let f: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (khz, a, b, wall_us) = (f[0], f[1], f[2], f[3]);
    assert_eq!(khz, 156_250, "the emulated ConnectX-5's core clock: {line}");
    // 50 ms of a 156.25 MHz clock: 7.8 M ticks. The clock reached the 45 ms mark (within the
    // inner half's 5 s bound), and did not run ahead of the host's clock over the same span
    // (1 ms of slack for the two readings' order).
    let ms = (b - a) as f64 / khz as f64;
    assert!(
        ms >= 45.0,
        "the device clock stalled: {ms} ms in {wall_us} µs: {line}"
    );
    assert!(
        ms <= wall_us as f64 / 1000.0 + 1.0,
        "the device clock ran ahead of the host's: {ms} ms in {wall_us} µs: {line}"
    );
}
