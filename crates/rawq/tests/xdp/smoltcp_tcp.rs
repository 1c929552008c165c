//! examples/smoltcp_echo over AF_XDP: smoltcp's TCP on a veth, its MAC's frames and the
//! broadcasts steered to the queue, talking to the kernel's TCP in the other namespace, both
//! ways round (smoltcp serving a kernel client; a smoltcp client of a kernel server), every
//! byte checked in both directions.
#![cfg(all(feature = "xdp", feature = "smoltcp"))]

use rawq_testkit as support;

use std::net::SocketAddr;
use std::process::Command;

use support::tcp_peer::{example, Exchange};
use support::NetnsPair;

/// Bytes each way: some hundred segments, past the 64 KiB socket buffers on both sides.
const BYTES: usize = 300_000;

/// The pair, with host a's kernel computing its own checksums (veth leaves them to "the NIC",
/// and smoltcp, which checks every checksum, would drop the segments), and smoltcp's address
/// on the pair's subnet (`.3`).
fn rig(tag: &str) -> Option<(NetnsPair, String)> {
    let p = NetnsPair::new(tag)?;
    let eth = p.exec(&p.a, &["ethtool", "-K", &p.veth_a, "tx", "off"]);
    assert!(eth.status.success(), "ethtool -K tx off (install ethtool)");
    let ip = format!("{}.3", p.ip_b.rsplit_once('.').unwrap().0);
    Some((p, ip))
}

fn smoltcp_on_b(p: &NetnsPair, ip: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &p.b])
        .arg(example())
        .args(["-b", "xdp", "-d", &p.veth_b, "--ip", &format!("{ip}/24")])
        .args(["--timeout", "30"])
        .args(args);
    c
}

/// A run against the kernel in host a. AF_XDP has no transmit checksum offload: smoltcp
/// computes them. veth's MTU is 1500.
fn exchange(p: &NetnsPair) -> Exchange<'_> {
    Exchange {
        pair: p,
        ns: p.a.clone(),
        bytes: BYTES,
        ready_says: "max frame 1514, tx checksums by smoltcp",
    }
}

#[test]
fn a_smoltcp_server_echoes_a_kernel_client() {
    let Some((p, ip)) = rig("smsrv") else {
        return;
    };
    let to: SocketAddr = format!("{ip}:7000").parse().unwrap();
    exchange(&p).smoltcp_serves(smoltcp_on_b(&p, &ip, &["--listen", "7000"]), || {}, to);
}

#[test]
fn a_smoltcp_client_gets_its_stream_back_from_a_kernel_server() {
    let Some((p, ip)) = rig("smcli") else {
        return;
    };
    let to = format!("{}:7001", p.ip_a);
    let bytes = BYTES.to_string();
    let example = smoltcp_on_b(&p, &ip, &["--connect", &to, "--bytes", &bytes]);
    exchange(&p).smoltcp_connects(7001, example, || {});
}
