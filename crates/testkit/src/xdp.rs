//! Opening AF_XDP ports inside a [`NetnsPair`] and looking at what is attached:
//! shared by `tests/xdp/port.rs` and `tests/xdp/port_attach.rs`.

use rawq::flow::Rule;
use rawq::{Backend, Port};

use super::NetnsPair;

/// The rule `udp dst-port <port> -> queue 0`.
pub fn udp_dst(port: u16) -> Rule {
    format!("udp dst-port {port} -> queue 0")
        .parse()
        .expect("a valid rule")
}

/// Opens an XDP port on `dev` from a thread inside `ns`.
pub fn open_in(
    ns: &NetnsPair,
    which: &str,
    dev: &str,
    rules: Vec<Rule>,
    ring: u32,
) -> rawq::Result<Port> {
    let dev = dev.to_string();
    ns.run_in(which, move || {
        Port::builder(Backend::Xdp { ifname: dev })
            .rules(rules)
            .rx_ring(ring)
            .tx_ring(ring)
            .open()
    })
}

/// `ip -d link show` of `dev` in `ns`.
pub fn link_show(_p: &NetnsPair, ns: &str, dev: &str) -> String {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", dev])
        .output()
        .expect("ip link show");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (bounded, 20 s) until interface `dev` in namespace `ns` has an XDP program: a rawq
/// port (pktgen, fwd) attaches its steering program after binding its sockets, so the port is
/// then receiving.
pub fn wait_attached(p: &NetnsPair, ns: &str, dev: &str) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = p.exec(ns, &["ip", "link", "show", dev]);
        if String::from_utf8_lossy(&out.stdout).contains("xdp") {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "no XDP program on {dev} after 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
