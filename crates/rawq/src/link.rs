//! Link state and link events of a port: [`Link`] (what [`Port::link`](crate::Port::link)
//! returns) and [`LinkEvents`] (what [`Port::link_events`](crate::Port::link_events) returns).
//!
//! Where each backend learns them:
//! * **xdp**: the interface itself. State from sysfs (`/sys/class/net/IF/{operstate, carrier,
//!   speed, mtu, address, flags}`); events from an rtnetlink socket subscribed to the link
//!   group (`RTNLGRP_LINK`): an `RTM_NEWLINK` whose operational state changed is
//!   [`LinkEvent::LinkDown`] / [`LinkEvent::LinkUp`], an `RTM_DELLINK` (deleted, or moved to
//!   another network namespace) [`LinkEvent::InterfaceGone`].
//! * **dv, verbs**: the RDMA port. State from `ibv_query_port` (state, active speed and width)
//!   plus the netdev the port is bound to (`gid_attrs/ndevs/0`: MTU, speed); events from the
//!   device's asynchronous event queue (`ibv_get_async_event`): `IBV_EVENT_PORT_ERR`,
//!   `IBV_EVENT_PORT_ACTIVE`, `IBV_EVENT_DEVICE_FATAL`. The kernel hands port events to every
//!   open context of the device (`ib_uverbs_event_handler` in drivers/infiniband/core/
//!   uverbs_main.c is registered per file), so the events are read on a context of their own.
//! * **model**: its wire: a bridged interface is watched as on xdp; a loopback or sink wire is
//!   always up and never changes.
//! * **loopback**: always up, never changes.
//!
//! "Up" is the kernel's `netif_oper_up()` (include/linux/netdevice.h): operational state
//! `up`, or `unknown` for drivers that do not report one (TAP, loopback), with the interface
//! administratively up.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sys::notify::EventFd;
use crate::sys::rtnetlink::{self, LinkMsg, IF_OPER_UNKNOWN};
use crate::sys::{ifindex, netlink};

/// The state of a port's link, read when asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Link {
    /// The network interface the state was read from (the xdp interface, the netdev under an
    /// RDMA port, a model's bridged wire); `None` when there is none.
    pub ifname: Option<String>,
    /// The link carries frames: operationally up (for dv and verbs: the port is
    /// `IBV_PORT_ACTIVE`).
    pub carrier: bool,
    /// The kernel's operational state word (`up`, `down`, `lowerlayerdown`, `unknown`, ...;
    /// for an RDMA port without netdev `active` / `down` / ...), as read.
    pub oper_state: String,
    /// Administratively up (`IFF_UP`), where there is an interface.
    pub admin_up: Option<bool>,
    /// Link speed in Mb/s, where known (sysfs `speed`; for RDMA ports the active speed times
    /// the active width).
    pub speed_mbps: Option<u32>,
    /// MTU (the largest frame is this plus the 14-byte Ethernet header).
    pub mtu: Option<u32>,
    /// MAC address.
    pub mac: Option<[u8; 6]>,
}

/// Something that happened to a port's link or device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkEvent {
    /// The link went down (carrier lost, interface set down; `IBV_EVENT_PORT_ERR`).
    LinkDown,
    /// The link came (back) up (`IBV_EVENT_PORT_ACTIVE`).
    LinkUp,
    /// The device failed (`IBV_EVENT_DEVICE_FATAL`): its queues are dead until it is reset
    /// and the port opened again.
    DeviceFatal,
    /// The interface was deleted or moved to another network namespace (`RTM_DELLINK`).
    InterfaceGone,
}

impl LinkEvent {
    /// After this event the port can never work again (the stream ends with it).
    pub fn is_fatal(self) -> bool {
        matches!(self, LinkEvent::DeviceFatal | LinkEvent::InterfaceGone)
    }
}

impl std::fmt::Display for LinkEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LinkEvent::LinkDown => "link down",
            LinkEvent::LinkUp => "link up",
            LinkEvent::DeviceFatal => "device fatal error",
            LinkEvent::InterfaceGone => "interface gone",
        })
    }
}

/// The link error a fatal event stands for (what waiting on a dead port returns).
pub fn fatal_error(name: &str, ev: LinkEvent) -> Error {
    let detail = match ev {
        LinkEvent::DeviceFatal => {
            "the device reported a fatal error (IBV_EVENT_DEVICE_FATAL): its queues no longer \
             work; close the port and open it again once the driver has reset the device"
        }
        LinkEvent::InterfaceGone => {
            "the interface is gone (deleted, or moved to another network namespace); open the \
             port again on an interface that exists"
        }
        LinkEvent::LinkDown => {
            "the link is down; bring it up (`ip link set dev IF up`, check the cable or the peer)"
        }
        LinkEvent::LinkUp => "the link is up",
    };
    Error::Link {
        ifname: name.to_owned(),
        detail: detail.to_owned(),
    }
}

/// Where a port's link is read and watched.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// No link: always up (loopback, a model's loopback or sink wire).
    Always {
        /// The largest frame's MTU, if the port has one.
        mtu: Option<u32>,
    },
    /// A Linux interface.
    #[cfg_attr(not(any(feature = "xdp", feature = "mlx5")), allow(dead_code))]
    Netdev { ifname: String },
    /// A link the backend reads and watches itself (an RDMA device's port: the verbs backend's
    /// `ibverbs::link`).
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    Port(std::sync::Arc<dyn PortLink>),
}

/// A port's link as its backend reads and watches it (an RDMA device's port), for the links
/// that are not an interface: the backend implements it below the port, so that this module
/// names no backend.
pub(crate) trait PortLink: Send + Sync + std::fmt::Debug {
    /// The link's state now.
    fn link(&self) -> Result<Link>;
    /// Its events, on a source of their own.
    fn events(&self) -> Result<LinkEvents>;
}

/// A source of link events a backend owns (an RDMA device's asynchronous event queue).
pub(crate) trait PortEvents: Send {
    /// The descriptor that becomes readable when an event may be waiting.
    fn fd(&self) -> RawFd;
    /// Reads what the source has (it was readable); this port's link events go to `out`.
    fn read(&mut self, out: &mut VecDeque<LinkEvent>) -> Result<()>;
}

impl Source {
    pub(crate) fn link(&self) -> Result<Link> {
        match self {
            Source::Always { mtu } => Ok(Link {
                carrier: true,
                oper_state: "up".into(),
                mtu: *mtu,
                ..Default::default()
            }),
            Source::Netdev { ifname } => netdev(ifname),
            Source::Port(p) => p.link(),
        }
    }

    pub(crate) fn events(&self) -> Result<LinkEvents> {
        match self {
            Source::Always { .. } => LinkEvents::never(),
            Source::Netdev { ifname } => LinkEvents::netdev(ifname),
            Source::Port(p) => p.events(),
        }
    }
}

fn sysfs_net(ifname: &str, f: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/{f}"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The state of network interface `ifname` in the calling thread's network namespace: from
/// rtnetlink (`RTM_GETLINK`: flags, `IFLA_OPERSTATE`, `IFLA_MTU`, `IFLA_ADDRESS`), which
/// answers in the caller's namespace, and the speed from sysfs when sysfs shows the same
/// interface (a thread that entered another namespace still sees the sysfs of the one it was
/// mounted in).
///
/// # Errors
/// [`Error::Link`] when there is no such interface.
pub fn netdev(ifname: &str) -> Result<Link> {
    if ifname.is_empty() || ifname.contains('/') || ifname.starts_with('.') {
        return Err(Error::Config(format!(
            "{ifname:?} is not an interface name"
        )));
    }
    let gone = || Error::Link {
        ifname: ifname.to_owned(),
        detail: "no such interface in this network namespace (`ip link` lists them)".into(),
    };
    let index = ifindex(ifname).ok_or_else(gone)?;
    let same_in_sysfs =
        sysfs_net(ifname, "ifindex").and_then(|s| s.parse::<u32>().ok()) == Some(index);
    // `speed` is -1 or unreadable (EINVAL) while the link is down or unknown.
    let speed_mbps = same_in_sysfs
        .then(|| sysfs_net(ifname, "speed"))
        .flatten()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|&s| s > 0)
        .and_then(|s| u32::try_from(s).ok());
    let i = rtnetlink::link_info(index).map_err(|e| match e {
        Error::Os { .. } => gone(),
        e => e,
    })?;
    let oper = oper_name(i.oper_state.unwrap_or(IF_OPER_UNKNOWN));
    Ok(Link {
        ifname: Some(ifname.to_owned()),
        carrier: oper_up(oper, i.up.unwrap_or(true)),
        oper_state: oper.to_owned(),
        admin_up: i.up,
        speed_mbps,
        mtu: i.mtu,
        mac: i.mac,
    })
}

/// The driver of network interface `ifname` in the calling thread's network namespace, as
/// `ethtool -i` names it ("veth", "mlx5_core", "ice", ...): from the `SIOCETHTOOL` ioctl
/// (`ETHTOOL_GDRVINFO`), whatever the backends built.
///
/// # Errors
/// [`Error::Link`] when there is no such interface; [`Error::Os`] (or [`Error::Permission`])
/// when the interface does not answer the ioctl (a device without ethtool support).
pub fn driver(ifname: &str) -> Result<String> {
    if ifindex(ifname).is_none() {
        return Err(Error::Link {
            ifname: ifname.to_owned(),
            detail: "no such interface in this network namespace (`ip link` lists them)".into(),
        });
    }
    crate::sys::ethtool::driver(ifname).map_err(|e| {
        Error::os(
            "the SIOCETHTOOL ioctl (ETHTOOL_GDRVINFO: the driver's name)",
            e,
        )
    })
}

/// The sysfs spelling of an `IF_OPER_*` value (net/core/net-sysfs.c `operstates`).
fn oper_name(v: u8) -> &'static str {
    match v {
        1 => "notpresent",
        2 => "down",
        3 => "lowerlayerdown",
        4 => "testing",
        5 => "dormant",
        6 => "up",
        _ => "unknown",
    }
}

/// `netif_oper_up()`: `up`, or `unknown` (a driver that reports none), and administratively
/// up.
fn oper_up(oper: &str, admin_up: bool) -> bool {
    admin_up && matches!(oper, "up" | "unknown")
}

/// Data rate per lane in Mb/s of an `IBV_SPEED_*` code, and lanes of an `IBV_WIDTH_*` code, as
/// the kernel's `rate_show` (drivers/infiniband/core/sysfs.c) turns `active_speed` /
/// `active_width` into the port's `rate`.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) fn ib_rate_mbps(speed: u8, width: u8) -> Option<u32> {
    let lane = match speed {
        1 => 2_500,
        2 => 5_000,
        4 | 8 => 10_000,
        16 => 14_000,
        32 => 25_000,
        64 => 50_000,
        128 => 100_000,
        _ => return None,
    };
    let lanes = match width {
        1 => 1,
        16 => 2,
        2 => 4,
        4 => 8,
        8 => 12,
        _ => return None,
    };
    Some(lane * lanes)
}

/// A port's link events, read one at a time with [`LinkEvents::next_event`]; its file
/// descriptor ([`AsRawFd`]) becomes readable when an event may be waiting, for use in an
/// event loop (`poll`, `epoll`, tokio's `AsyncFd`). Each `LinkEvents` sees every event that
/// happens after it was made; a port can hand out several.
///
/// After a fatal event ([`LinkEvent::is_fatal`]) has been returned, every further call
/// returns the link error it stands for (waiting on a dead port never hangs).
pub struct LinkEvents {
    name: String,
    src: EventSource,
    pending: VecDeque<LinkEvent>,
    dead: Option<LinkEvent>,
}

impl std::fmt::Debug for LinkEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkEvents")
            .field("name", &self.name)
            .field("fd", &self.as_raw_fd())
            .field("dead", &self.dead)
            .finish()
    }
}

enum EventSource {
    /// Never readable (an eventfd nobody writes).
    Never(EventFd),
    Netlink(Netlink),
    /// A source the backend owns ([`PortEvents`]).
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    Port(Box<dyn PortEvents>),
}

impl AsRawFd for LinkEvents {
    fn as_raw_fd(&self) -> RawFd {
        match &self.src {
            EventSource::Never(fd) => fd.raw(),
            EventSource::Netlink(n) => n.fd.as_raw_fd(),
            EventSource::Port(p) => p.fd(),
        }
    }
}

impl AsFd for LinkEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // The descriptor is owned by `self` (or by its context) and stays open while the
        // borrow lives.
        crate::sys::notify::borrow(self.as_raw_fd())
    }
}

impl LinkEvents {
    fn with(name: &str, src: EventSource) -> LinkEvents {
        LinkEvents {
            name: name.to_owned(),
            src,
            pending: VecDeque::new(),
            dead: None,
        }
    }

    /// Events a backend reads itself ([`PortEvents`]), named `name` in errors.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) fn from_port(name: &str, src: Box<dyn PortEvents>) -> LinkEvents {
        LinkEvents::with(name, EventSource::Port(src))
    }

    fn never() -> Result<LinkEvents> {
        let fd = EventFd::new()?;
        Ok(LinkEvents::with("link", EventSource::Never(fd)))
    }

    /// Watches interface `ifname` (in the calling thread's network namespace).
    ///
    /// # Errors
    /// [`Error::Link`] when the interface does not exist; [`Error::Os`] when the netlink
    /// socket cannot be made.
    pub fn netdev(ifname: &str) -> Result<LinkEvents> {
        // Subscribe first, then read the state: a change in between is seen as a message.
        let nl = Netlink::subscribe()?;
        let ifindex =
            ifindex(ifname).ok_or_else(|| fatal_error(ifname, LinkEvent::InterfaceGone))?;
        let up = netdev(ifname)?.carrier;
        Ok(LinkEvents::with(
            ifname,
            EventSource::Netlink(Netlink { ifindex, up, ..nl }),
        ))
    }

    /// The next event, waiting up to `timeout` (`None`: as long as it takes) for one.
    /// `Ok(None)`: none came in time.
    ///
    /// # Errors
    /// [`Error::Link`] once a fatal event was returned (see the type's docs); [`Error::Os`]
    /// when the event source fails.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Option<LinkEvent>> {
        if let Some(ev) = self.dead {
            return Err(fatal_error(&self.name, ev));
        }
        let end = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(ev) = self.pending.pop_front() {
                if ev.is_fatal() {
                    self.dead = Some(ev);
                    self.pending.clear();
                }
                return Ok(Some(ev));
            }
            let left = end.map(|e| e.saturating_duration_since(Instant::now()));
            if !crate::sys::notify::wait_readable(self.as_raw_fd(), left, "poll(link events)")? {
                return Ok(None);
            }
            self.read_ready()?;
            if self.pending.is_empty() && end.is_some_and(|e| Instant::now() >= e) {
                return Ok(None);
            }
        }
    }

    /// Reads what the source has (it was readable) into `pending`.
    fn read_ready(&mut self) -> Result<()> {
        match &mut self.src {
            EventSource::Never(_) => Ok(()),
            EventSource::Netlink(n) => n.read(&self.name, &mut self.pending),
            EventSource::Port(p) => p.read(&mut self.pending),
        }
    }
}

/// An rtnetlink socket in the link multicast group, watching one interface.
struct Netlink {
    fd: OwnedFd,
    ifindex: u32,
    /// The interface was operationally up at the last look.
    up: bool,
    buf: Vec<u8>,
}

impl Netlink {
    fn subscribe() -> Result<Netlink> {
        let fd = rtnetlink::subscribe_links()?;
        Ok(Netlink {
            fd,
            ifindex: 0,
            up: false,
            buf: vec![0u8; 32 * 1024],
        })
    }

    /// Reads every datagram waiting; the state changes of the interface go to `out`.
    fn read(&mut self, name: &str, out: &mut VecDeque<LinkEvent>) -> Result<()> {
        loop {
            let n = match netlink::recv(&self.fd, &mut self.buf) {
                Ok(n) => n,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => return Ok(()),
                    // The socket overran: messages were lost. Look at the interface itself.
                    Some(libc::ENOBUFS) => {
                        let now = ifindex(name) == Some(self.ifindex);
                        let m = if now {
                            LinkMsg::State(netdev(name).is_ok_and(|l| l.carrier))
                        } else {
                            LinkMsg::Gone
                        };
                        self.apply(m, out);
                        continue;
                    }
                    _ => return Err(Error::os("recv(rtnetlink link events)", e)),
                },
            };
            for m in rtnetlink::parse_link_msgs(&self.buf[..n], self.ifindex) {
                self.apply(m, out);
            }
        }
    }

    fn apply(&mut self, m: LinkMsg, out: &mut VecDeque<LinkEvent>) {
        match m {
            LinkMsg::Gone => out.push_back(LinkEvent::InterfaceGone),
            LinkMsg::State(up) if up != self.up => {
                self.up = up;
                out.push_back(if up {
                    LinkEvent::LinkUp
                } else {
                    LinkEvent::LinkDown
                });
            }
            LinkMsg::State(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_is_asked_of_an_interface_that_exists() {
        match driver("rawq-no-such-if") {
            Err(Error::Link { ifname, detail }) => {
                assert_eq!(ifname, "rawq-no-such-if");
                assert!(detail.contains("ip link"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // The loopback device exists everywhere; it has no ethtool driver info on most kernels
        // (EOPNOTSUPP), which is an OS error, not a missing interface.
        match driver("lo") {
            Ok(name) => assert!(!name.is_empty()),
            Err(e) => assert!(
                matches!(e, Error::Os { .. } | Error::Permission { .. }),
                "{e}"
            ),
        }
    }

    #[test]
    fn only_changes_become_events() {
        let mut n = Netlink::subscribe().expect("netlink socket");
        n.up = true;
        let mut out = VecDeque::new();
        for m in [
            LinkMsg::State(true),
            LinkMsg::State(false),
            LinkMsg::State(false),
            LinkMsg::State(true),
            LinkMsg::Gone,
        ] {
            n.apply(m, &mut out);
        }
        assert_eq!(
            Vec::from(out),
            vec![
                LinkEvent::LinkDown,
                LinkEvent::LinkUp,
                LinkEvent::InterfaceGone
            ]
        );
    }

    /// `lo` as rtnetlink reports it, whatever the features (no xdp needed): the kernel's
    /// operational state word, administratively up, its MTU as sysfs shows it, an all-zero MAC.
    #[test]
    fn loopback_state_from_rtnetlink() {
        let l = netdev("lo").expect("lo exists");
        assert_eq!(l.ifname.as_deref(), Some("lo"));
        assert_eq!(l.admin_up, Some(true), "{l:?}");
        assert!(l.carrier, "{l:?}");
        assert_eq!(l.mac, Some([0u8; 6]), "{l:?}");
        assert_eq!(
            l.mtu,
            sysfs_net("lo", "mtu").and_then(|m| m.parse().ok()),
            "{l:?}"
        );
        assert_eq!(l.oper_state, sysfs_net("lo", "operstate").unwrap(), "{l:?}");
    }

    #[test]
    fn rdma_rates() {
        assert_eq!(ib_rate_mbps(32, 2), Some(100_000)); // EDR 4X
        assert_eq!(ib_rate_mbps(4, 1), Some(10_000)); // QDR 1X
        assert_eq!(ib_rate_mbps(3, 2), None);
        assert_eq!(ib_rate_mbps(32, 3), None);
    }

    #[test]
    fn a_missing_interface_is_a_link_error() {
        assert!(matches!(
            netdev("rawq-no-such0"),
            Err(Error::Link { ref ifname, .. }) if ifname == "rawq-no-such0"
        ));
        assert!(matches!(netdev("../etc"), Err(Error::Config(_))));
        assert!(matches!(
            LinkEvents::netdev("rawq-no-such0"),
            Err(Error::Link { .. })
        ));
    }

    #[test]
    fn a_dead_stream_returns_its_error_at_once() {
        let mut ev = LinkEvents::never().expect("eventfd");
        assert_eq!(ev.next_event(Some(Duration::from_millis(1))).unwrap(), None);
        ev.pending.push_back(LinkEvent::InterfaceGone);
        ev.pending.push_back(LinkEvent::LinkUp);
        assert_eq!(ev.next_event(None).unwrap(), Some(LinkEvent::InterfaceGone));
        // No wait (`None` would block forever on a never-readable fd): the error comes first.
        assert!(matches!(ev.next_event(None), Err(Error::Link { .. })));
    }
}
