//! Issue 19 item 2 and issue 32 item 2, device counters, on the emulated ConnectX: a looped-back
//! `pktgen --txrx --seq` at a rate its receive queue (32 WQEs) cannot absorb, on `-b dv` and
//! `-b verbs`. Every stamped frame that did not come back is among the losses pktgen reports
//! (text and JSON), each in one named bucket of the ledger with nothing unattributed: the
//! `out_of_buffer` rawq read from the emulated port's `hw_counters` is the device model's count
//! of frames it dropped for want of a receive WQE, and the `rx_discards_phy` it read from the
//! port netdev's ethtool statistics (`SIOCETHTOOL`, answered by the emulator) is the count of
//! frames the emulated wire could not hand to the port (the model's `wire_drops`).
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use support::emu::{counter, emu_sh, serial, tempdir, text, wait_for};

/// pktgen's `--json` summary (its last stdout line).
fn summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary:\n{}", text(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn num(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// `pktgen -b BACKEND --txrx --seq` on the looped-back emulated port: 20000 frames as fast as
/// the sender can post them into a 32-entry receive ring (a paced rate was absorbed whole on a
/// quiet machine and overran it on a loaded one), the wire in front of the port holding 64
/// frames (`RAWQ_EMU_WIRE_FRAMES`: a send burst overruns it, so that the port discards some
/// however quiet the machine), bounded to 60 s.
fn lossy_run(backend: &str) -> (Output, PathBuf) {
    let dir = tempdir(&format!("counters-{backend}"));
    let stats = dir.join("model.stats");
    let _ = std::fs::remove_file(&stats);
    let pktgen = support::example("pktgen");
    let args = [
        pktgen.to_str().unwrap(),
        "-b",
        backend,
        "-d",
        "mlx5_0",
        "--txrx",
        "--seq",
        "-n",
        "20000",
        "-r",
        "0",
        "--ring",
        "32",
        "--json",
    ];
    let child = emu_sh(None, None, &[], &args, &stats)
        .env("RAWQ_EMU_WIRE_FRAMES", "64")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/emu.sh");
    (wait_for(child, Duration::from_secs(60)), stats)
}

/// Attempts at a run in which both the wire and the receive queue overflow (which of the two
/// overflows first depends on how the device thread and the receiver are scheduled).
const ATTEMPTS: usize = 5;

fn losses_add_up(backend: &str) {
    let _one = serial();
    let mut attempt = 0;
    let (o, wire, no_buffer) = loop {
        attempt += 1;
        let (o, stats) = lossy_run(backend);
        assert!(o.status.success(), "{}", text(&o));
        let model = |k: &str| counter(&stats, k).unwrap_or_else(|| panic!("{k} not in {stats:?}"));
        // The model's wire (its loopback inbox, full when the sender outruns the device
        // thread) is the port's receive buffer: what it could not take in is the port's
        // rx_discards_phy.
        let (wire, no_buffer) = (model("wire_drops"), model("rx_no_buffer"));
        if (wire > 0 && no_buffer > 0) || attempt == ATTEMPTS {
            break (o, wire, no_buffer);
        }
    };
    let v = summary(&o);
    assert!(
        wire > 0,
        "the wire took every frame in {ATTEMPTS} runs: {}",
        text(&o)
    );
    assert!(
        no_buffer > 0,
        "the receive queue absorbed the whole run in {ATTEMPTS} runs: {}",
        text(&o)
    );
    // The out_of_buffer rawq read (through $SYSFS_PATH/class/infiniband/mlx5_0/ports/1/
    // hw_counters) is the model's count.
    assert_eq!(num(&v, "device_rx_no_buffer"), no_buffer, "{v}");
    // ... and the rx_discards_phy rawq read (through SIOCETHTOOL on the port's netdev) is the
    // model's count of frames its wire dropped, in the ledger's bucket of port discards.
    assert_eq!(
        num(&v["ledger"]["buckets"], "port_discards"),
        wire,
        "{v}\n(the emulated wire dropped {wire})"
    );
    // Every lost frame is among the reported losses: the queues' drops and errors (both
    // directions) and the device's.
    let reported = num(&v, "device_drops")
        + num(&v["rx"], "drops")
        + num(&v["rx"], "errors")
        + num(&v["tx"], "drops")
        + num(&v["tx"], "errors");
    assert_eq!(
        num(&v, "seq_lost"),
        reported,
        "{v}\n(the emulated wire dropped {wire})"
    );
    // The text says it too.
    let err = String::from_utf8_lossy(&o.stderr);
    let line = format!("the device lost {} frames", num(&v, "device_drops"));
    assert!(err.contains(&line), "no '{line}' in:\n{err}");
    assert!(
        err.contains(&format!(
            "{no_buffer} dropped for want of a receive buffer (out_of_buffer)"
        )),
        "{err}"
    );
    if wire > 0 {
        assert!(
            err.contains(&format!("{wire} discarded by the port (rx_discards_phy)")),
            "{err}"
        );
    }
    // Issue 32: the ledger closes: lost = the sum of the named loss buckets, nothing
    // unattributed, nothing counted twice.
    let l = &v["ledger"];
    assert_eq!(num(l, "offered"), num(&v["tx"], "packets"), "{v}");
    assert_eq!(num(&l["buckets"], "unattributed"), 0, "{v}");
    assert_eq!(num(l, "double_counted"), 0, "{v}");
    assert_eq!(num(l, "lost"), num(&v, "seq_lost"), "{v}");
    let named_losses: u64 = l["losses"]
        .as_array()
        .unwrap_or_else(|| panic!("no losses in {l}"))
        .iter()
        .map(|k| num(&l["buckets"], k.as_str().unwrap()))
        .sum();
    assert_eq!(num(l, "lost"), named_losses, "{v}");
}

#[test]
fn dv_losses_add_up_to_seq_lost() {
    losses_add_up("dv");
}

#[test]
fn verbs_losses_add_up_to_seq_lost() {
    losses_add_up("verbs");
}
