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
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The state of a port's link, read when asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// An RDMA device's port.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    Rdma { device: String, port: u8 },
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
            #[cfg(feature = "verbs")]
            Source::Rdma { device, port } => rdma_link(device, *port),
            #[cfg(not(feature = "verbs"))]
            Source::Rdma { .. } => Err(Error::BackendUnavailable {
                backend: "verbs",
                feature: "verbs",
            }),
        }
    }

    pub(crate) fn events(&self) -> Result<LinkEvents> {
        match self {
            Source::Always { .. } => LinkEvents::never(),
            Source::Netdev { ifname } => LinkEvents::netdev(ifname),
            #[cfg(feature = "verbs")]
            Source::Rdma { device, port } => LinkEvents::rdma(device, *port),
            #[cfg(not(feature = "verbs"))]
            Source::Rdma { .. } => Err(Error::BackendUnavailable {
                backend: "verbs",
                feature: "verbs",
            }),
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
    #[cfg(feature = "xdp")]
    {
        let i = crate::xdp::link_info(index).map_err(|e| match e {
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
    #[cfg(not(feature = "xdp"))]
    {
        let oper = sysfs_net(ifname, "operstate").ok_or_else(gone)?;
        let flags = sysfs_net(ifname, "flags")
            .and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok());
        let admin_up = flags.map(|f| f & libc::IFF_UP as u32 != 0);
        Ok(Link {
            ifname: Some(ifname.to_owned()),
            carrier: oper_up(&oper, admin_up.unwrap_or(true)),
            admin_up,
            speed_mbps,
            mtu: sysfs_net(ifname, "mtu").and_then(|s| s.parse().ok()),
            mac: sysfs_net(ifname, "address").and_then(|s| parse_mac(&s)),
            oper_state: oper,
        })
    }
}

/// The sysfs spelling of an `IF_OPER_*` value (net/core/net-sysfs.c `operstates`).
#[cfg_attr(not(feature = "xdp"), allow(dead_code))]
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

#[cfg_attr(feature = "xdp", allow(dead_code))]
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in mac.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
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

#[cfg(feature = "verbs")]
fn rdma_link(device: &str, port: u8) -> Result<Link> {
    let ctx = crate::ibverbs::device::open(device)?;
    let a = ctx.query_port(port)?;
    let nd = crate::ibverbs::context::port_netdev(device, port);
    let net = nd.as_deref().and_then(|n| netdev(n).ok());
    Ok(Link {
        ifname: nd,
        carrier: a.is_active(),
        oper_state: a.state_name().to_owned(),
        admin_up: net.as_ref().and_then(|n| n.admin_up),
        speed_mbps: ib_rate_mbps(a.active_speed, a.active_width)
            .or_else(|| net.as_ref().and_then(|n| n.speed_mbps)),
        mtu: net
            .as_ref()
            .and_then(|n| n.mtu)
            .or_else(|| Some(a.active_mtu_bytes()).filter(|&m| m > 0)),
        mac: ctx.port_mac(port),
    })
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
    Never(OwnedFd),
    Netlink(Netlink),
    #[cfg(feature = "verbs")]
    Rdma {
        ctx: crate::ibverbs::Context,
        port: u8,
    },
}

impl AsRawFd for LinkEvents {
    fn as_raw_fd(&self) -> RawFd {
        match &self.src {
            EventSource::Never(fd) => fd.as_raw_fd(),
            EventSource::Netlink(n) => n.fd.as_raw_fd(),
            #[cfg(feature = "verbs")]
            EventSource::Rdma { ctx, .. } => ctx.async_fd(),
        }
    }
}

impl AsFd for LinkEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by `self` (or by its context) and stays open while
        // the borrow lives.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
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

    fn never() -> Result<LinkEvents> {
        // SAFETY: plain eventfd(2) call.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::last_os("eventfd"));
        }
        // SAFETY: a fresh descriptor, owned from here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
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

    /// Watches port `port` of RDMA device `device` (on a context of its own).
    ///
    /// # Errors
    /// What opening the device reports.
    #[cfg(feature = "verbs")]
    pub fn rdma(device: &str, port: u8) -> Result<LinkEvents> {
        let ctx = crate::ibverbs::device::open(device)?;
        Ok(LinkEvents::with(
            &format!("{device} port {port}"),
            EventSource::Rdma { ctx, port },
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
            if !wait_readable(self.as_raw_fd(), left)? {
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
            #[cfg(feature = "verbs")]
            EventSource::Rdma { ctx, port } => {
                let e = ctx.get_async_event()?;
                use rdma_sys::ibv_event_type as t;
                let mine = e.port.is_none_or(|p| p == *port);
                let ev = match e.event_type {
                    x if x == t::IBV_EVENT_PORT_ERR as u32 && mine => Some(LinkEvent::LinkDown),
                    x if x == t::IBV_EVENT_PORT_ACTIVE as u32 && mine => Some(LinkEvent::LinkUp),
                    x if x == t::IBV_EVENT_DEVICE_FATAL as u32 => Some(LinkEvent::DeviceFatal),
                    _ => None,
                };
                self.pending.extend(ev);
                Ok(())
            }
        }
    }
}

/// Waits until `fd` is readable or `timeout` passes; true if readable. EINTR is a spurious
/// wake-up (false when the time is up, else waits again).
fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> Result<bool> {
    let end = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match end {
            None => -1,
            Some(e) => {
                let left = e.saturating_duration_since(Instant::now());
                // Round up: a wait of 0.4 ms must not become a busy poll of 0.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc > 0 {
            return Ok(true);
        }
        if rc == 0 {
            return Ok(false);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(Error::os("poll(link events)", e));
        }
        if end.is_some_and(|e| Instant::now() >= e) {
            return Ok(false);
        }
    }
}

fn ifindex(ifname: &str) -> Option<u32> {
    let c = std::ffi::CString::new(ifname).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

// rtnetlink (linux/netlink.h, linux/rtnetlink.h, linux/if_link.h).
const NETLINK_ROUTE: libc::c_int = 0;
const RTMGRP_LINK: u32 = 1;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const NLMSG_HDR_LEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const IFLA_OPERSTATE: u16 = 16;
/// `IF_OPER_UNKNOWN`, `IF_OPER_UP` (`enum` in linux/if.h).
const IF_OPER_UNKNOWN: u8 = 0;
const IF_OPER_UP: u8 = 6;
/// Attribute type bits (the top two are the nested / byte-order flags).
const NLA_TYPE_MASK: u16 = 0x3fff;

/// Iterates the netlink attributes in `b`: (type, payload). A truncated or malformed attribute
/// ends the walk.
pub(crate) fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = b.get((len + 3) & !3usize..).unwrap_or(&[]);
        Some((ty, payload))
    })
}

/// A `u32` attribute payload.
#[cfg_attr(not(feature = "xdp"), allow(dead_code))]
pub(crate) fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

/// An rtnetlink socket in the link multicast group, watching one interface.
struct Netlink {
    fd: OwnedFd,
    ifindex: u32,
    /// The interface was operationally up at the last look.
    up: bool,
    buf: Vec<u8>,
}

/// What one link message says about interface `ifindex`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LinkMsg {
    /// Operationally up (or not).
    State(bool),
    Gone,
}

/// Parses the messages of one netlink datagram; the ones about `ifindex`, in order.
fn parse_link_msgs(mut b: &[u8], ifindex: u32) -> Vec<LinkMsg> {
    let mut out = Vec::new();
    while b.len() >= NLMSG_HDR_LEN {
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len < NLMSG_HDR_LEN || len > b.len() {
            break;
        }
        let ty = u16::from_ne_bytes([b[4], b[5]]);
        let m = &b[..len];
        if (ty == RTM_NEWLINK || ty == RTM_DELLINK) && m.len() >= NLMSG_HDR_LEN + IFINFOMSG_LEN {
            // ifinfomsg: family u8, pad u8, type u16, index i32, flags u32, change u32.
            let i = NLMSG_HDR_LEN;
            let index = i32::from_ne_bytes([m[i + 4], m[i + 5], m[i + 6], m[i + 7]]);
            let flags = u32::from_ne_bytes([m[i + 8], m[i + 9], m[i + 10], m[i + 11]]);
            if index >= 0 && index as u32 == ifindex {
                if ty == RTM_DELLINK {
                    out.push(LinkMsg::Gone);
                } else {
                    let oper = attrs(&m[NLMSG_HDR_LEN + IFINFOMSG_LEN..])
                        .find(|(t, _)| *t == IFLA_OPERSTATE)
                        .and_then(|(_, p)| p.first().copied())
                        .unwrap_or(IF_OPER_UNKNOWN);
                    let admin = flags & libc::IFF_UP as u32 != 0;
                    out.push(LinkMsg::State(
                        admin && (oper == IF_OPER_UP || oper == IF_OPER_UNKNOWN),
                    ));
                }
            }
        }
        b = b.get((len + 3) & !3usize..).unwrap_or(&[]);
    }
    out
}

impl Netlink {
    fn subscribe() -> Result<Netlink> {
        // SAFETY: plain socket(2) call.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(Error::last_os("socket(AF_NETLINK)"));
        }
        // SAFETY: a fresh descriptor, owned from here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain data; zeroed is valid.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = RTMGRP_LINK;
        // SAFETY: binds the socket to a valid sockaddr_nl of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(Error::last_os("bind(AF_NETLINK, RTMGRP_LINK)"));
        }
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
            // SAFETY: receives into `buf`, at most its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
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
                }
            }
            for m in parse_link_msgs(&self.buf[..n as usize], self.ifindex) {
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

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn msg(ty: u16, index: i32, flags: u32, oper: Option<u8>) -> Vec<u8> {
        let mut body = vec![0u8; IFINFOMSG_LEN];
        body[4..8].copy_from_slice(&index.to_ne_bytes());
        body[8..12].copy_from_slice(&flags.to_ne_bytes());
        if let Some(o) = oper {
            body.extend(attr(IFLA_OPERSTATE, &[o]));
        }
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDR_LEN + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&[0u8; 10]);
        m.extend(body);
        m
    }

    #[test]
    fn link_messages_of_the_interface_are_read_in_order() {
        let up = libc::IFF_UP as u32;
        let mut d = msg(RTM_NEWLINK, 7, up, Some(IF_OPER_UP));
        d.extend(msg(RTM_NEWLINK, 8, 0, Some(2))); // another interface
        d.extend(msg(RTM_NEWLINK, 7, up, Some(2))); // IF_OPER_DOWN
        d.extend(msg(RTM_NEWLINK, 7, 0, Some(IF_OPER_UNKNOWN))); // admin down
        d.extend(msg(RTM_NEWLINK, 7, up, None)); // no operstate: unknown = up
        d.extend(msg(RTM_DELLINK, 7, 0, None));
        assert_eq!(
            parse_link_msgs(&d, 7),
            vec![
                LinkMsg::State(true),
                LinkMsg::State(false),
                LinkMsg::State(false),
                LinkMsg::State(true),
                LinkMsg::Gone
            ]
        );
        // Truncated input ends the walk instead of panicking.
        assert_eq!(parse_link_msgs(&d[..20], 7), vec![]);
        for cut in 0..d.len() {
            let _ = parse_link_msgs(&d[..cut], 7);
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
