//! pktgen without `--dst-mac` (issue 24 item 5): the destination's MAC is resolved by ARP
//! (IPv4) or neighbour discovery (IPv6) through the port's interface, from a kernel peer across
//! a veth; its frames then reach the peer's UDP socket (the kernel drops frames for another
//! MAC), or taken from the kernel's ARP table when it has the entry; an unanswered resolution
//! ends with an error naming the address; and pktgen answers
//! ARP for its own --src-ip while it runs. Needs root and network namespaces (skipped without,
//! fails with RAWQ_REQUIRE_NETNS=1); every run is bounded.
#![cfg(feature = "xdp")]

use rawq_testkit as support;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::NetnsPair;

/// Frames sent in a resolution test.
const FRAMES: u64 = 20;

/// Runs pktgen in namespace a with `args`, bounded.
fn pktgen_in_a(ns: &NetnsPair, args: &[&str]) -> Output {
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.a])
        .arg(support::example("pktgen"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pktgen");
    support::emu::wait_for(child, Duration::from_secs(30))
}

/// A UDP socket on (`ip`, 9000) in namespace b, reads waiting 100 ms.
fn socket_in_b(ns: &NetnsPair, ip: IpAddr) -> UdpSocket {
    let s = ns
        .run_in(&ns.b, move || UdpSocket::bind(SocketAddr::new(ip, 9000)))
        .expect("bind in b");
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    s
}

/// Datagrams waiting on `s` (stops at the first quiet read: pktgen has ended).
fn count(s: &UdpSocket) -> u64 {
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while s.recv(&mut buf).is_ok() {
        n += 1;
    }
    n
}

/// Sends `FRAMES` from a to b's address `dst` with no --dst-mac; checks what pktgen says it
/// resolved (`how`) against b's MAC and that every frame reached b's socket.
fn resolves(ns: &NetnsPair, src: &str, dst: &str, how: &str) {
    let sock = socket_in_b(ns, dst.parse().unwrap());
    let n = FRAMES.to_string();
    let out = pktgen_in_a(
        ns,
        &[
            "-b", "xdp", "-d", &ns.veth_a, "--src-ip", src, "--dst-ip", dst, "-n", &n, "-r",
            "1000", "--quiet",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let mac_b = ns.mac_text(&ns.b, &ns.veth_b);
    let want = format!("{dst} is at {mac_b} ({how} on {})", ns.veth_a);
    assert!(err.contains(&want), "wanted {want:?} in:\n{err}");
    assert!(!err.contains("destination MAC is the default"), "{err}");
    assert_eq!(count(&sock), FRAMES, "{err}");
}

#[test]
fn resolves_a_kernel_peer_by_arp() {
    let Some(ns) = NetnsPair::new("nbarp") else {
        return;
    };
    resolves(&ns, &ns.ip_a, &ns.ip_b, "ARP");
}

#[test]
fn takes_what_the_kernel_already_resolved() {
    let Some(ns) = NetnsPair::new("nbtbl") else {
        return;
    };
    // a's kernel resolves b (one ping), then pktgen finds b in a's ARP table.
    let o = ns.exec(&ns.a, &["ping", "-c", "1", "-W", "5", &ns.ip_b]);
    assert!(
        o.status.success(),
        "ping: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    resolves(&ns, &ns.ip_a, &ns.ip_b, "the kernel's neighbour table");
}

#[test]
fn resolves_a_kernel_peer_by_neighbour_discovery() {
    let Some(ns) = NetnsPair::new("nbnd") else {
        return;
    };
    // Addresses of this pair's own (its IPv4 subnet's third byte), usable at once (nodad).
    let net = ns.ip_b.split('.').nth(2).unwrap();
    let (a6, b6) = (format!("fd00:203:{net}::1"), format!("fd00:203:{net}::2"));
    for (host, dev, ip) in [(&ns.a, &ns.veth_a, &a6), (&ns.b, &ns.veth_b, &b6)] {
        ns.ip_in(
            host,
            &["addr", "add", &format!("{ip}/64"), "dev", dev, "nodad"],
        )
        .unwrap();
    }
    resolves(&ns, &a6, &b6, "neighbour discovery");
}

#[test]
fn an_unanswered_resolution_names_the_address() {
    let Some(ns) = NetnsPair::new("nbnone") else {
        return;
    };
    // On b's subnet, but nobody's.
    let nobody = format!("{}.77", ns.ip_b.rsplit_once('.').unwrap().0);
    let t = Instant::now();
    let out = pktgen_in_a(
        &ns,
        &[
            "-b", "xdp", "-d", &ns.veth_a, "--src-ip", &ns.ip_a, "--dst-ip", &nobody, "-n", "1",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("no ARP reply from {nobody}")) && err.contains("--dst-mac"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{err}");
}

#[test]
fn answers_arp_for_its_own_address_while_running() {
    let Some(ns) = NetnsPair::new("nbans") else {
        return;
    };
    // a's kernel no longer has the address: only pktgen can answer for it.
    ns.ip_in(&ns.a, &["addr", "flush", "dev", &ns.veth_a])
        .unwrap();
    let mac_b = ns.mac_text(&ns.b, &ns.veth_b);
    let mac_a = ns.mac_text(&ns.a, &ns.veth_a);
    let (ns_a, dev, ip_a, ip_b) = (
        ns.a.clone(),
        ns.veth_a.clone(),
        ns.ip_a.clone(),
        ns.ip_b.clone(),
    );
    // pktgen runs until b has learned a's address from it (then SIGTERM; `-t` bounds a
    // failed test), not for its whole `-t`.
    let child = Command::new("ip")
        .args(["netns", "exec", &ns_a])
        .arg(support::example("pktgen"))
        .args([
            "-b",
            "xdp",
            "-d",
            &dev,
            "--dst-mac",
            &mac_b,
            "--src-ip",
            &ip_a,
        ])
        .args(["--dst-ip", &ip_b, "-r", "100", "-t", "6", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pktgen");
    // b's kernel resolves a's address to send to it: each datagram asks again until answered.
    let sock = ns
        .run_in(&ns.b, || UdpSocket::bind("0.0.0.0:0"))
        .expect("socket in b");
    let to: SocketAddr = format!("{}:9", ns.ip_a).parse().unwrap();
    let t = Instant::now();
    let mut learned = String::new();
    while t.elapsed() < Duration::from_secs(5) {
        let _ = sock.send_to(b"who", to);
        let o = ns.exec(&ns.b, &["ip", "neigh", "show", &ns.ip_a, "dev", &ns.veth_b]);
        learned = String::from_utf8_lossy(&o.stdout).to_string();
        if learned.contains(&mac_a) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // SAFETY: kill(2) on the pid of a child we started and have not reaped (`ip netns exec`
    // execs pktgen in place).
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = support::emu::wait_for(child, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        learned.contains(&format!("lladdr {mac_a}")),
        "b's neighbour entry for {}: {learned:?}\npktgen: {err}",
        ns.ip_a
    );
}
