//! The emulator's in-process frame source (`RAWQ_EMU_RXGEN`, issue 21): `pktgen -b dv --rx`
//! on the looped-back emulated ConnectX, fed 20000 generated frames into a 64-entry receive
//! ring. Every generated frame is accounted for: received by pktgen, or dropped by the port for
//! want of a receive WQE (counted, `rx_no_buffer`), and pktgen's count is the device's.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use support::emu::{emu_sh, last_counter, rxgen, serial, tempdir, text, wait_for};

const COUNT: u64 = 20_000;

#[test]
fn every_generated_frame_is_received_or_counted_as_a_no_buffer_drop() {
    let _one = serial();
    let dir = tempdir("rxgen");
    let stats = dir.join("model.stats");
    let _ = std::fs::remove_file(&stats);
    let pktgen = support::example("pktgen");
    let args = [
        pktgen.to_str().unwrap(),
        "-b",
        "dv",
        "-d",
        "mlx5_0",
        "--rx",
        "--ring",
        "64",
        "--json",
    ];
    let child = emu_sh(None, None, &[], &args, &stats)
        .env("RAWQ_EMU_RXGEN", COUNT.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/emu.sh");
    let pid = child.id() as i32;
    // The device up (emu.sh builds the emulator first, which may wait for cargo's lock), then
    // the generator done and every frame through the port (the counters file is rewritten
    // twice a second while the device lives).
    let up = Instant::now() + Duration::from_secs(600);
    while !stats.exists() && Instant::now() < up {
        std::thread::sleep(Duration::from_millis(100));
    }
    let end = Instant::now() + Duration::from_secs(60);
    let settled = loop {
        let c = |k| last_counter(&stats, k).unwrap_or(0);
        if let Some((made, true)) = rxgen(&stats) {
            if made == c("rx_frames") + c("rx_no_buffer") + c("rx_to_kernel") {
                break true;
            }
        }
        if Instant::now() > end {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: kill(2) on our own child's pid (emu.sh, which stops pktgen on SIGTERM).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let o = wait_for(child, Duration::from_secs(30));
    let st = std::fs::read_to_string(&stats).unwrap_or_default();
    assert!(
        settled,
        "the generator's frames did not all reach the port in 60 s:\n{st}\n{}",
        text(&o)
    );
    // emu.sh answers SIGTERM with status 143 once pktgen has stopped; pktgen's summary says
    // it ended normally.
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary:\n{}", text(&o)));
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
    let received = v["packets"].as_u64().expect("packets");
    let model = |k| last_counter(&stats, k).unwrap_or_else(|| panic!("{k} not in:\n{st}"));
    let (made, done) = rxgen(&stats).expect("the generator's line");
    assert!(done && made == COUNT, "{st}");
    assert_eq!(
        model("rx_to_kernel"),
        0,
        "every frame matched pktgen's rule: {st}"
    );
    assert_eq!(
        received,
        model("rx_frames"),
        "pktgen's count is the device's: {st}\n{v}"
    );
    assert_eq!(
        received + model("rx_no_buffer"),
        COUNT,
        "received + no-buffer drops = generated: {st}\n{v}"
    );
    // pktgen reads the port's out_of_buffer counter: the same drops.
    assert_eq!(
        v["device_rx_no_buffer"].as_u64(),
        Some(model("rx_no_buffer"))
    );
}
