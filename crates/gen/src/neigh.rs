//! Neighbour resolution for a generator: ARP (RFC 826) for IPv4 and Neighbor Discovery
//! (RFC 4861) for IPv6, on the Linux interface under a port.
//!
//! [`resolve`] finds the MAC address of an on-link destination: the kernel's ARP table first
//! (`/proc/net/arp`, when the interface has already resolved it), else a request sent and its
//! reply received on an `AF_PACKET` socket bound to the interface. [`Responder`] answers ARP
//! requests and neighbour solicitations for the generator's own address while it runs (a
//! router under test resolves it before forwarding back). Both only see what the kernel sees
//! of the interface: on a bifurcated port (AF_XDP, or an mlx5 port whose flow rules steer only
//! the test traffic to its queues) ARP and ICMPv6 reach the kernel.
//!
//! The frames are built and read here ([`arp_request`], [`neighbor_solicitation`], …), without
//! I/O, so that they can be checked on their own.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rawq::error::{Error, Result};

/// An Ethernet MAC address.
pub type Mac = [u8; 6];

const ETH_ARP: u16 = 0x0806;
const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const ICMPV6: u8 = 58;
const NS: u8 = 135;
const NA: u8 = 136;
/// Ethernet + IPv6 headers: where ICMPv6 starts in an untagged frame.
const ICMP6_AT: usize = 14 + 40;
/// An NS or NA with one link-layer address option: type, code, checksum, flags/reserved (8),
/// target (16), option (8).
const ND_LEN: usize = 32;

fn eth(out: &mut Vec<u8>, dst: Mac, src: Mac, ethertype: u16) {
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    out.extend_from_slice(&ethertype.to_be_bytes());
}

fn be16(f: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*f.get(o)?, *f.get(o + 1)?]))
}

fn mac_at(f: &[u8], o: usize) -> Option<Mac> {
    f.get(o..o + 6)?.try_into().ok()
}

/// An ARP packet (RFC 826, Ethernet and IPv4), padded to the 60-byte minimum frame.
fn arp(oper: u16, eth_dst: Mac, sha: Mac, spa: Ipv4Addr, tha: Mac, tpa: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    eth(&mut f, eth_dst, sha, ETH_ARP);
    f.extend_from_slice(&1u16.to_be_bytes()); // hardware: Ethernet
    f.extend_from_slice(&ETH_IPV4.to_be_bytes());
    f.extend_from_slice(&[6, 4]);
    f.extend_from_slice(&oper.to_be_bytes());
    f.extend_from_slice(&sha);
    f.extend_from_slice(&spa.octets());
    f.extend_from_slice(&tha);
    f.extend_from_slice(&tpa.octets());
    f.resize(60, 0);
    f
}

/// A broadcast ARP request from (`mac`, `ip`) for `target`.
pub fn arp_request(mac: Mac, ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    arp(1, [0xff; 6], mac, ip, [0; 6], target)
}

/// The ARP fields of `f`: (operation, sender MAC, sender IP, target IP), for Ethernet/IPv4 ARP.
fn arp_fields(f: &[u8]) -> Option<(u16, Mac, Ipv4Addr, Ipv4Addr)> {
    if be16(f, 12)? != ETH_ARP || be16(f, 14)? != 1 || be16(f, 16)? != ETH_IPV4 {
        return None;
    }
    let ip = |o: usize| -> Option<Ipv4Addr> {
        let b: [u8; 4] = f.get(o..o + 4)?.try_into().ok()?;
        Some(Ipv4Addr::from(b))
    };
    Some((be16(f, 20)?, mac_at(f, 22)?, ip(28)?, ip(38)?))
}

/// The sender's MAC of an ARP reply (or request: RFC 826's receivers learn from both) from
/// `ip`.
pub fn arp_answer_from(f: &[u8], ip: Ipv4Addr) -> Option<Mac> {
    let (_, sha, spa, _) = arp_fields(f)?;
    (spa == ip).then_some(sha)
}

/// The reply to `f` when it is an ARP request for `ip` (answered as `mac`).
pub fn arp_reply_to(f: &[u8], mac: Mac, ip: Ipv4Addr) -> Option<Vec<u8>> {
    let (oper, sha, spa, tpa) = arp_fields(f)?;
    (oper == 1 && tpa == ip).then(|| arp(2, sha, mac, ip, sha, spa))
}

/// The ICMPv6 checksum of `msg` from `src` to `dst` (RFC 4443 section 2.3, the pseudo-header
/// of RFC 8200 section 8.1).
fn icmp6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut sum = 0u64;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, ICMPV6]);
    add(msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An NS or NA frame: IPv6 hop limit 255 (RFC 4861 section 7.1.1 and 7.1.2 require it), one
/// link-layer address option (`opt`: 1 source, 2 target) carrying `mac`.
#[allow(clippy::too_many_arguments)]
fn nd(
    eth_dst: Mac,
    mac: Mac,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    kind: u8,
    flags: u8,
    target: Ipv6Addr,
    opt: u8,
) -> Vec<u8> {
    let mut msg = Vec::with_capacity(ND_LEN);
    msg.extend_from_slice(&[kind, 0, 0, 0, flags, 0, 0, 0]);
    msg.extend_from_slice(&target.octets());
    msg.extend_from_slice(&[opt, 1]);
    msg.extend_from_slice(&mac);
    let c = icmp6_checksum(src, dst, &msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = Vec::with_capacity(ICMP6_AT + ND_LEN);
    eth(&mut f, eth_dst, mac, ETH_IPV6);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(ND_LEN as u16).to_be_bytes());
    f.extend_from_slice(&[ICMPV6, 255]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&msg);
    f
}

/// The solicited-node multicast address of `a` (RFC 4291 section 2.7.1) and its Ethernet group
/// address (RFC 2464 section 7).
fn solicited_node(a: Ipv6Addr) -> (Ipv6Addr, Mac) {
    let o = a.octets();
    let ip = Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    );
    (ip, [0x33, 0x33, 0xff, o[13], o[14], o[15]])
}

/// A neighbour solicitation from (`mac`, `ip`) for `target`, to its solicited-node group.
pub fn neighbor_solicitation(mac: Mac, ip: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let (dst, eth_dst) = solicited_node(target);
    nd(eth_dst, mac, ip, dst, NS, 0, target, 1)
}

/// The ND fields of `f`: (type, IPv6 source, target, the link-layer address option's MAC,
/// Ethernet source), for an untagged NS or NA with hop limit 255 and a valid checksum.
fn nd_fields(f: &[u8]) -> Option<(u8, Ipv6Addr, Ipv6Addr, Option<Mac>, Mac)> {
    if be16(f, 12)? != ETH_IPV6 || *f.get(20)? != ICMPV6 || *f.get(21)? != 255 {
        return None;
    }
    let ip = |o: usize| -> Option<Ipv6Addr> {
        let b: [u8; 16] = f.get(o..o + 16)?.try_into().ok()?;
        Some(Ipv6Addr::from(b))
    };
    let (src, dst) = (ip(22)?, ip(38)?);
    let len = be16(f, 18)? as usize;
    let msg = f.get(ICMP6_AT..ICMP6_AT + len)?;
    let kind = *msg.first()?;
    if !matches!(kind, NS | NA) || msg.len() < 24 || icmp6_checksum(src, dst, msg) != 0 {
        return None;
    }
    let target = ip(ICMP6_AT + 8)?;
    // Options: type, length in units of 8 bytes.
    let (mut o, mut lla) = (24, None);
    while o + 8 <= msg.len() {
        let n = msg[o + 1] as usize * 8;
        if n == 0 {
            return None;
        }
        if matches!(msg[o], 1 | 2) {
            lla = mac_at(msg, o + 2);
        }
        o += n;
    }
    Some((kind, src, target, lla, mac_at(f, 6)?))
}

/// The MAC a neighbour advertisement in `f` gives for `target` (its target link-layer address
/// option, else its Ethernet source).
pub fn na_answer_for(f: &[u8], target: Ipv6Addr) -> Option<Mac> {
    let (kind, _, t, lla, eth_src) = nd_fields(f)?;
    (kind == NA && t == target).then(|| lla.unwrap_or(eth_src))
}

/// The advertisement answering `f` when it is a neighbour solicitation for `ip` (answered as
/// `mac`): solicited and override flags set, sent to the solicitor (RFC 4861 section 7.2.4).
pub fn na_reply_to(f: &[u8], mac: Mac, ip: Ipv6Addr) -> Option<Vec<u8>> {
    let (kind, src, target, lla, eth_src) = nd_fields(f)?;
    if kind != NS || target != ip {
        return None;
    }
    // From the unspecified address (duplicate address detection): to all nodes, unsolicited.
    if src.is_unspecified() {
        let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
        return Some(nd([0x33, 0x33, 0, 0, 0, 1], mac, ip, all, NA, 0x20, ip, 2));
    }
    Some(nd(lla.unwrap_or(eth_src), mac, ip, src, NA, 0x60, ip, 2))
}

/// `ip`'s entry in the kernel's ARP table for `ifname` (`/proc/net/arp`, complete entries
/// only: flags ATF_COM, 0x2).
pub fn kernel_arp_entry(ifname: &str, ip: Ipv4Addr) -> Option<Mac> {
    let t = std::fs::read_to_string("/proc/net/arp").ok()?;
    t.lines().skip(1).find_map(|l| {
        let c: Vec<&str> = l.split_whitespace().collect();
        let flags = u32::from_str_radix(c.get(2)?.trim_start_matches("0x"), 16).ok()?;
        if c.len() < 6 || c[5] != ifname || c[0].parse::<Ipv4Addr>().ok()? != ip || flags & 2 == 0 {
            return None;
        }
        let mut m = [0u8; 6];
        let mut parts = c[3].split(':');
        for b in m.iter_mut() {
            *b = u8::from_str_radix(parts.next()?, 16).ok()?;
        }
        (m != [0; 6]).then_some(m)
    })
}

/// An `AF_PACKET` socket on one interface, for one Ethernet protocol (ARP, or IPv6 for ND).
pub struct NeighSocket {
    fd: OwnedFd,
}

/// `sll_pkttype` of a frame this host sent (Linux `PACKET_OUTGOING`).
const PACKET_OUTGOING: u8 = 4;

impl NeighSocket {
    /// Opens the socket on `ifname` for `ip`'s protocol; reads wait at most `timeout`.
    #[allow(unsafe_code)]
    pub fn open(ifname: &str, ip: IpAddr, timeout: Duration) -> Result<NeighSocket> {
        let proto = match ip {
            IpAddr::V4(_) => ETH_ARP,
            IpAddr::V6(_) => ETH_IPV6,
        }
        .to_be();
        let name = std::ffi::CString::new(ifname)
            .map_err(|_| Error::Config(format!("{ifname:?} is not an interface name")))?;
        // SAFETY: `name` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(Error::Link {
                ifname: ifname.into(),
                detail: "no such interface (in this network namespace)".into(),
            });
        }
        let os = |op| move |source| Error::Os { op, source };
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
        if raw < 0 {
            return Err(os("socket(AF_PACKET) for ARP/ND (needs CAP_NET_RAW)")(
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll of the size given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            return Err(os("bind(AF_PACKET)")(std::io::Error::last_os_error()));
        }
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros().max(1) as libc::suseconds_t,
        };
        // SAFETY: SO_RCVTIMEO takes a timeval of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        if rc != 0 {
            return Err(os("setsockopt(SO_RCVTIMEO)")(
                std::io::Error::last_os_error(),
            ));
        }
        Ok(NeighSocket { fd })
    }

    /// Sends one whole Ethernet frame.
    #[allow(unsafe_code)]
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        // SAFETY: `frame` is valid for its length; the socket is bound to its interface.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(Error::Os {
                op: "send(AF_PACKET)",
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Receives one frame that arrived on the interface (frames this host sent are skipped)
    /// into `buf`; `None` when the timeout passed first.
    #[allow(unsafe_code)]
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>> {
        loop {
            // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: `buf` and `sll` are valid for the lengths given.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut sll as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                return match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Ok(None),
                    std::io::ErrorKind::Interrupted => continue,
                    _ => Err(Error::Os {
                        op: "recvfrom(AF_PACKET)",
                        source: e,
                    }),
                };
            }
            if sll.sll_pkttype != PACKET_OUTGOING {
                return Ok(Some(n as usize));
            }
        }
    }
}

/// How [`resolve`] found a MAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The kernel's neighbour table had it.
    KernelTable,
    /// An ARP reply.
    Arp,
    /// A neighbour advertisement.
    Nd,
}

/// The MAC of `target` on `ifname`, as (`mac`, `ip`) asks: the kernel's ARP table, else up to
/// `tries` requests (ARP, or neighbour solicitations for IPv6) `wait` apart.
///
/// # Errors
/// [`Error::Link`] naming `target` when nothing answered; [`Error::Config`] when `ip` and
/// `target` are of different IP versions; [`Error::Os`] when the socket cannot be opened.
pub fn resolve(
    ifname: &str,
    mac: Mac,
    ip: IpAddr,
    target: IpAddr,
    tries: u32,
    wait: Duration,
) -> Result<(Mac, Resolved)> {
    if let IpAddr::V4(t) = target {
        if let Some(m) = kernel_arp_entry(ifname, t) {
            return Ok((m, Resolved::KernelTable));
        }
    }
    let (request, how): (Vec<u8>, _) = match (ip, target) {
        (IpAddr::V4(s), IpAddr::V4(t)) => (arp_request(mac, s, t), Resolved::Arp),
        (IpAddr::V6(s), IpAddr::V6(t)) => (neighbor_solicitation(mac, s, t), Resolved::Nd),
        _ => {
            return Err(Error::Config(format!(
                "cannot resolve {target} from {ip}: the source and destination addresses are of \
                 different IP versions"
            )))
        }
    };
    let sock = NeighSocket::open(ifname, target, Duration::from_millis(20))?;
    let mut buf = [0u8; 2048];
    for _ in 0..tries {
        sock.send(&request)?;
        let until = Instant::now() + wait;
        while Instant::now() < until {
            let Some(n) = sock.recv(&mut buf)? else {
                continue;
            };
            let f = &buf[..n];
            let got = match target {
                IpAddr::V4(t) => arp_answer_from(f, t),
                IpAddr::V6(t) => na_answer_for(f, t),
            };
            if let Some(m) = got {
                return Ok((m, how));
            }
        }
    }
    let what = match how {
        Resolved::Nd => "neighbour advertisement",
        _ => "ARP reply",
    };
    Err(Error::Link {
        ifname: ifname.into(),
        detail: format!(
            "no {what} from {target} to {tries} requests in {:.1} s: is {target} on this link, \
             and up? Give its MAC with --dst-mac (for an address beyond a router, the router's)",
            (wait * tries).as_secs_f64()
        ),
    })
}

/// A thread answering ARP requests or neighbour solicitations for one address on one
/// interface, until dropped.
pub struct Responder {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Responder {
    /// Starts answering for (`mac`, `ip`) on `ifname`.
    ///
    /// # Errors
    /// [`Error::Os`] or [`Error::Link`] when the socket cannot be opened.
    pub fn start(ifname: &str, mac: Mac, ip: IpAddr) -> Result<Responder> {
        let sock = NeighSocket::open(ifname, ip, Duration::from_millis(50))?;
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let (s, a) = (stop.clone(), answered.clone());
        let thread = std::thread::Builder::new()
            .name("neigh-responder".into())
            .spawn(move || {
                let mut buf = [0u8; 2048];
                while !s.load(Relaxed) {
                    let Ok(Some(n)) = sock.recv(&mut buf) else {
                        continue;
                    };
                    let reply = match ip {
                        IpAddr::V4(ip) => arp_reply_to(&buf[..n], mac, ip),
                        IpAddr::V6(ip) => na_reply_to(&buf[..n], mac, ip),
                    };
                    if let Some(r) = reply {
                        if sock.send(&r).is_ok() {
                            a.fetch_add(1, Relaxed);
                        }
                    }
                }
            })
            .map_err(|e| Error::Os {
                op: "spawning the ARP/ND responder thread",
                source: e,
            })?;
        Ok(Responder {
            stop,
            answered,
            thread: Some(thread),
        })
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Relaxed)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pnet_packet::arp::{ArpOperations, ArpPacket};
    use pnet_packet::ethernet::EthernetPacket;
    use pnet_packet::icmpv6::{checksum as icmp6_sum, Icmpv6Packet, Icmpv6Types};
    use pnet_packet::ipv6::Ipv6Packet;
    use pnet_packet::Packet as _;

    const A: Mac = [2, 0, 0, 0, 0, 0xa];
    const B: Mac = [2, 0, 0, 0, 0, 0xb];

    #[test]
    fn arp_request_and_reply_round_trip() {
        let (ia, ib): (Ipv4Addr, Ipv4Addr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let req = arp_request(A, ia, ib);
        assert_eq!(req.len(), 60);
        let e = EthernetPacket::new(&req).unwrap();
        let p = ArpPacket::new(e.payload()).unwrap();
        assert_eq!(p.get_operation(), ArpOperations::Request);
        assert_eq!(p.get_target_proto_addr(), ib);
        assert_eq!(p.get_sender_proto_addr(), ia);
        assert!(
            arp_reply_to(&req, B, ia).is_none(),
            "not a request for B's address"
        );
        let rep = arp_reply_to(&req, B, ib).unwrap();
        let p = ArpPacket::new(&rep[14..]).unwrap();
        assert_eq!(p.get_operation(), ArpOperations::Reply);
        assert_eq!(&rep[..6], &A, "to the asker");
        assert_eq!(arp_answer_from(&rep, ib), Some(B));
        assert_eq!(arp_answer_from(&rep, ia), None);
        assert_eq!(arp_answer_from(&rep[..30], ib), None, "cut short");
    }

    #[test]
    fn neighbour_solicitation_and_advertisement_round_trip() {
        let (ia, ib): (Ipv6Addr, Ipv6Addr) =
            ("fd00::1".parse().unwrap(), "fd00::12:3456".parse().unwrap());
        let ns = neighbor_solicitation(A, ia, ib);
        assert_eq!(&ns[..6], &[0x33, 0x33, 0xff, 0x12, 0x34, 0x56]);
        let ip = Ipv6Packet::new(&ns[14..]).unwrap();
        assert_eq!(
            ip.get_destination(),
            "ff02::1:ff12:3456".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(ip.get_hop_limit(), 255);
        let icmp = Icmpv6Packet::new(ip.payload()).unwrap();
        assert_eq!(icmp.get_icmpv6_type(), Icmpv6Types::NeighborSolicit);
        assert_eq!(
            icmp.get_checksum(),
            icmp6_sum(&icmp, &ia, &ip.get_destination())
        );
        assert!(na_reply_to(&ns, B, ia).is_none(), "not for B's address");
        let na = na_reply_to(&ns, B, ib).unwrap();
        assert_eq!(&na[..6], &A, "to the solicitor's link-layer address");
        let ip = Ipv6Packet::new(&na[14..]).unwrap();
        assert_eq!(ip.get_destination(), ia);
        let icmp = Icmpv6Packet::new(ip.payload()).unwrap();
        assert_eq!(icmp.get_icmpv6_type(), Icmpv6Types::NeighborAdvert);
        assert_eq!(icmp.get_checksum(), icmp6_sum(&icmp, &ib, &ia));
        assert_eq!(na_answer_for(&na, ib), Some(B));
        assert_eq!(na_answer_for(&na, ia), None);
        let mut bad = na.clone();
        bad[ICMP6_AT + 10] ^= 1;
        assert_eq!(na_answer_for(&bad, ib), None, "a wrong checksum is ignored");
    }
}
