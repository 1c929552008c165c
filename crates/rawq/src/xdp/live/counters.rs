//! What the interface says it took or could not take: `ethtool -S` and `tx_dropped`.

use crate::sys::ethtool;

/// Frames redirected to `ifname` that its driver says it took, where the driver counts them in
/// `ethtool -S` (`*xdp_xmit*` counters other than errors; a veth counts there the frames its
/// peer's ring accepted): `None` for a driver without such counters.
pub(super) fn tx_taken(ifname: &str) -> Option<u64> {
    let stats = ethtool::stats(ifname).ok()?;
    let mut it = stats
        .iter()
        .filter(|(k, _)| k.contains("xdp_xmit") && !k.contains("err"))
        .peekable();
    it.peek()?;
    Some(it.map(|(_, v)| v).sum())
}

/// Frames `ifname` could not transmit so far: its `tx_dropped` (`/proc/thread-self/net/dev`,
/// the calling thread's namespace) plus its driver's `*xdp_xmit_err*` counters (`ethtool -S`;
/// a veth counts there the frames its peer's full ring refused). 0 where unreadable.
pub(super) fn tx_failures(ifname: &str) -> u64 {
    let dropped = std::fs::read_to_string("/proc/thread-self/net/dev")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let (name, rest) = l.split_once(':')?;
                if name.trim() != ifname {
                    return None;
                }
                // rx: bytes packets errs drop fifo frame compressed multicast, tx: bytes packets
                // errs drop ...
                rest.split_whitespace().nth(11)?.parse::<u64>().ok()
            })
        })
        .unwrap_or(0);
    let xmit_err: u64 = ethtool::stats(ifname)
        .unwrap_or_default()
        .iter()
        .filter(|(k, _)| k.contains("xdp_xmit_err"))
        .map(|(_, v)| v)
        .sum();
    dropped + xmit_err
}
