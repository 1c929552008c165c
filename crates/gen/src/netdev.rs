//! Interface facts a generator needs.

use rawq::flow::Mac;

/// The MAC address of a network interface (in the caller's network namespace; see
/// [`rawq::link::netdev`]).
pub fn netdev_mac(ifname: &str) -> Option<Mac> {
    rawq::link::netdev(ifname).ok()?.mac
}

/// Facts about a network interface a generator watches (in the caller's network namespace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetdevState {
    /// The MTU: the largest frame is this plus the 14-byte Ethernet header.
    pub mtu: Option<u32>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Frames the interface dropped on transmit (`tx_dropped`), e.g. frames above its MTU.
    pub tx_dropped: Option<u64>,
}

/// The state of interface `ifname`, or `None` when there is no such interface (any more): the
/// link's MTU and administrative state as [`rawq::link::netdev`] reads them, and the
/// interface's `tx_dropped` counter (sysfs).
pub fn netdev_state(ifname: &str) -> Option<NetdevState> {
    let l = rawq::link::netdev(ifname).ok()?;
    Some(NetdevState {
        mtu: l.mtu,
        up: l.admin_up.unwrap_or(true),
        tx_dropped: std::fs::read_to_string(format!(
            "/sys/class/net/{ifname}/statistics/tx_dropped"
        ))
        .ok()
        .and_then(|s| s.trim().parse().ok()),
    })
}
