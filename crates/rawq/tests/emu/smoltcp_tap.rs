//! examples/smoltcp_echo over `-b dv` on the emulated ConnectX, its kernel netdev a TAP
//! (`scripts/emu.sh --netdev TAP`, the wire looped back): smoltcp's frames go out on the wire,
//! come back in, and the device hands those to smoltcp's MAC (and a copy of the broadcasts) to
//! the queue and the rest to the TAP, whose kernel is the far end of the TCP connection. Both
//! ways round (smoltcp serving a kernel client; a smoltcp client of a kernel server), every
//! byte checked in both directions. On this device the transmit checksums are the device's:
//! smoltcp leaves them to it (`TxOffload`), and the kernel checks them.
#![cfg(all(feature = "mlx5", feature = "smoltcp"))]

use rawq_testkit as support;

use std::net::SocketAddr;
use std::process::Command;

use support::emu::{serial, tempdir};
use support::tcp_peer::{example, Exchange};
use support::NetnsPair;

const BYTES: usize = 300_000;
/// smoltcp's address, and the TAP's.
const SMOLTCP_IP: &str = "10.77.0.2";
const TAP_IP: &str = "10.77.0.1";

/// `ip netns exec NS timeout 300 bash scripts/emu.sh --netdev TAP -- smoltcp_echo -b dv ...`.
fn smoltcp_on_emu(p: &NetnsPair, tap: &str, tag: &str, args: &[&str]) -> Command {
    let root = support::repo_root();
    let stats = tempdir(tag).join("model.stats");
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &p.a, "timeout", "300", "bash"])
        .arg(root.join("scripts/emu.sh"))
        .args(["--netdev", tap, "--"])
        .arg(example())
        .args([
            "-b",
            "dv",
            "-d",
            "mlx5_0",
            "--ip",
            &format!("{SMOLTCP_IP}/24"),
        ])
        .args(["--timeout", "60"])
        .args(args)
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .env_remove("RAWQ_EMU_TX_ERROR")
        .env("RAWQ_EMU_STATS", stats);
    c
}

/// The TAP (made by emu.sh, which has opened the port once the example says `ready`) gets
/// its address and goes up.
fn tap_up(p: &NetnsPair, tap: &str) {
    p.ip_in(&p.a, &["addr", "add", &format!("{TAP_IP}/24"), "dev", tap])
        .expect("address the TAP");
    p.ip_in(&p.a, &["link", "set", tap, "up"]).expect("TAP up");
}

/// A run against the TAP's kernel (host a). The device computes the transmit checksums
/// (smoltcp leaves them out, the kernel checks them).
fn exchange(p: &NetnsPair) -> Exchange<'_> {
    Exchange {
        pair: p,
        ns: p.a.clone(),
        bytes: BYTES,
        ready_says: "max frame 1514, tx checksums by the device",
    }
}

#[test]
fn a_smoltcp_server_on_dv_echoes_the_taps_kernel() {
    let _one = serial();
    let Some(p) = NetnsPair::new("smdvs") else {
        return;
    };
    let tap = format!("rqsms{}", std::process::id() % 100_000);
    let example = smoltcp_on_emu(&p, &tap, "smdvs", &["--listen", "7000"]);
    let to: SocketAddr = format!("{SMOLTCP_IP}:7000").parse().unwrap();
    exchange(&p).smoltcp_serves(example, || tap_up(&p, &tap), to);
}

#[test]
fn a_smoltcp_client_on_dv_gets_its_stream_back_from_the_taps_kernel() {
    let _one = serial();
    let Some(p) = NetnsPair::new("smdvc") else {
        return;
    };
    let tap = format!("rqsmc{}", std::process::id() % 100_000);
    let to = format!("{TAP_IP}:7001");
    let bytes = BYTES.to_string();
    let example = smoltcp_on_emu(&p, &tap, "smdvc", &["--connect", &to, "--bytes", &bytes]);
    exchange(&p).smoltcp_connects(7001, example, || tap_up(&p, &tap));
}
