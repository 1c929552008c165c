//! The destination MAC: resolved by ARP or IPv6 neighbour discovery when `--dst-mac` is left
//! out and `--dst-ip` names a host on the link, and pktgen's own `--src-ip` answered while it
//! runs (see `rawq_gen::neigh`). Both go through the Linux interface under the port: the
//! AF_XDP interface, or the netdev of an mlx5 RDMA device (a bifurcated port: ARP and ICMPv6
//! reach the kernel, the test traffic the queues).

use std::net::IpAddr;
use std::time::Duration;

use rawq_gen::neigh::{self, Resolved, Responder};

use crate::cli::{Args, BackendKind, DEFAULT_DST_MAC};

/// Requests sent before giving up, and how long each waits for its answer.
const TRIES: u32 = 3;
const WAIT: Duration = Duration::from_millis(500);

/// The Linux interface under the port, when it has one in this network namespace: the AF_XDP
/// interface, or the netdev of the RDMA device (`/sys/class/infiniband/DEV/device/net/`, as
/// rdma-core's `ibdev2netdev` finds it).
fn interface(a: &Args) -> Option<String> {
    let name = match a.backend {
        BackendKind::Xdp => a.dev.clone(),
        BackendKind::Dv | BackendKind::Verbs => {
            let dir = format!("/sys/class/infiniband/{}/device/net", a.dev);
            std::fs::read_dir(dir)
                .ok()?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .min()?
        }
        BackendKind::Model => return None,
    };
    rawq_gen::netdev_state(&name).map(|_| name)
}

fn mac_text(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

/// Fills in `a.dst_mac` when it was left out and `--dst-ip` was given (`dst_ip_given`), warns
/// when frames are to go out with the default destination MAC, and starts answering ARP/ND
/// for `--src-ip` (the responder runs until dropped).
///
/// # Errors
/// An unanswered resolution, naming the address.
pub fn prepare(a: &mut Args, dst_ip_given: bool) -> rawq::Result<Option<Responder>> {
    // Receiving only, or sending a capture as it is: no destination to resolve.
    if a.rx || a.pcap.is_some() {
        return Ok(None);
    }
    let Some(ifname) = interface(a) else {
        return Ok(None);
    };
    let src_mac = a.src_mac_or_default();
    if a.dst_mac.is_none() && dst_ip_given {
        let (mac, how) = neigh::resolve(&ifname, src_mac, a.src_ip, a.dst_ip, TRIES, WAIT)?;
        let how = match how {
            Resolved::KernelTable => "the kernel's neighbour table",
            Resolved::Arp => "ARP",
            Resolved::Nd => "neighbour discovery",
        };
        say!(
            "pktgen: {} is at {} ({how} on {ifname})",
            a.dst_ip,
            mac_text(mac)
        );
        a.dst_mac = Some(mac);
    }
    if a.dst_mac.unwrap_or(DEFAULT_DST_MAC) == DEFAULT_DST_MAC {
        say!(
            "pktgen: warning: the destination MAC is the default {}: a veth's peer takes such \
             frames, a real NIC or switch port drops them. Give --dst-mac, or leave it out and \
             give --dst-ip of a host on the link to have pktgen resolve it",
            mac_text(DEFAULT_DST_MAC)
        );
    }
    match Responder::start(&ifname, src_mac, a.src_ip) {
        Ok(r) => Ok(Some(r)),
        Err(e) => {
            let what = match a.src_ip {
                IpAddr::V4(_) => "ARP requests",
                IpAddr::V6(_) => "neighbour solicitations",
            };
            say!(
                "pktgen: warning: {what} for {} are not answered on {ifname}: {e}",
                a.src_ip
            );
            Ok(None)
        }
    }
}
