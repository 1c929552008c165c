//! rtnetlink (`linux/rtnetlink.h`, `linux/if_link.h`): one `RTM_GETLINK` query for an
//! interface (flags, `IFLA_MTU`, `IFLA_ADDRESS`, `IFLA_OPERSTATE`, which XDP program is
//! attached (`IFLA_XDP`), how many rx queues it has (`IFLA_NUM_RX_QUEUES`)), and the link
//! multicast group (`RTNLGRP_LINK`) whose `RTM_NEWLINK` / `RTM_DELLINK` messages are a port's
//! link events.
//!
//! A link message is a `nlmsghdr`, a 16-byte `ifinfomsg`, then attributes; `IFLA_XDP` nests
//! further attributes (the format: [`super::netlink`]).

use std::os::fd::OwnedFd;

use super::netlink::{self, attrs, u32_of, NLMSG_ERROR, NLMSG_HDR_LEN};
use crate::error::{Error, Result};

const NETLINK_ROUTE: libc::c_int = 0;
/// `RTMGRP_LINK`: the link multicast group, as a bind mask.
const RTMGRP_LINK: u32 = 1;
pub(crate) const RTM_NEWLINK: u16 = 16;
pub(crate) const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;

pub(crate) const IFINFOMSG_LEN: usize = 16;

const IFLA_ADDRESS: u16 = 1;
const IFLA_MTU: u16 = 4;
pub(crate) const IFLA_OPERSTATE: u16 = 16;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;

/// `IF_OPER_UNKNOWN`, `IF_OPER_UP` (`enum` in linux/if.h).
pub(crate) const IF_OPER_UNKNOWN: u8 = 0;
pub(crate) const IF_OPER_UP: u8 = 6;

/// What rtnetlink says about an interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkInfo {
    /// Id of the XDP program attached (any mode), if one is.
    pub xdp_prog_id: Option<u32>,
    /// Number of rx queues.
    pub rx_queues: Option<u32>,
    /// The MTU (`IFLA_MTU`): the largest frame is this plus the Ethernet header.
    pub mtu: Option<u32>,
    /// Whether the interface is administratively up (`IFF_UP` in `ifinfomsg.ifi_flags`).
    pub up: Option<bool>,
    /// RFC 2863 operational state (`IFLA_OPERSTATE`: `IF_OPER_*` of linux/if.h, 6 = up).
    pub oper_state: Option<u8>,
    /// The hardware address (`IFLA_ADDRESS`) when it is a MAC.
    pub mac: Option<[u8; 6]>,
}

/// Parses the attributes of an `RTM_NEWLINK` message (after the `ifinfomsg`).
pub(crate) fn parse_link(attr_bytes: &[u8]) -> LinkInfo {
    let mut info = LinkInfo::default();
    for (ty, p) in attrs(attr_bytes) {
        match ty {
            IFLA_NUM_RX_QUEUES => info.rx_queues = u32_of(p),
            IFLA_MTU => info.mtu = u32_of(p),
            IFLA_OPERSTATE => info.oper_state = p.first().copied(),
            IFLA_ADDRESS => info.mac = p.try_into().ok(),
            IFLA_XDP => {
                let mut attached = 0u8;
                let mut ids = [None; 4];
                for (t, q) in attrs(p) {
                    match t {
                        IFLA_XDP_ATTACHED => attached = q.first().copied().unwrap_or(0),
                        IFLA_XDP_PROG_ID => ids[0] = u32_of(q),
                        IFLA_XDP_DRV_PROG_ID => ids[1] = u32_of(q),
                        IFLA_XDP_SKB_PROG_ID => ids[2] = u32_of(q),
                        IFLA_XDP_HW_PROG_ID => ids[3] = u32_of(q),
                        _ => {}
                    }
                }
                if attached != 0 {
                    info.xdp_prog_id = ids.into_iter().flatten().find(|&id| id != 0);
                }
            }
            _ => {}
        }
    }
    info
}

/// The `ifinfomsg` of link message `m` (header included): (index, flags); `None` when `m` is
/// too short to have one.
fn ifinfo(m: &[u8]) -> Option<(i32, u32)> {
    // ifinfomsg: family u8, pad u8, type u16, index i32, flags u32, change u32.
    let i = m.get(NLMSG_HDR_LEN..NLMSG_HDR_LEN + IFINFOMSG_LEN)?;
    Some((
        i32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
        u32::from_ne_bytes([i[8], i[9], i[10], i[11]]),
    ))
}

/// Asks rtnetlink about interface `ifindex` (in the calling thread's network namespace).
///
/// # Errors
/// [`Error::Os`] when the socket or the request fails (ENODEV for an unknown index).
pub fn link_info(ifindex: u32) -> Result<LinkInfo> {
    let fd = netlink::socket(NETLINK_ROUTE, 0, "socket(AF_NETLINK)")?;
    // ifinfomsg: family AF_UNSPEC, type 0, index, flags 0, change 0.
    let mut body = [0u8; IFINFOMSG_LEN];
    body[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    let req = netlink::request(RTM_GETLINK, &body);
    let mut buf = vec![0u8; 64 * 1024];
    let n = netlink::roundtrip(
        &fd,
        &req,
        &mut buf,
        ["sendto(RTM_GETLINK)", "recv(RTM_GETLINK)"],
    )?;
    let (ty, msg) = netlink::reply(&buf[..n])
        .ok_or_else(|| Error::Unsupported("short rtnetlink reply".into()))?;
    match (ty, ifinfo(msg)) {
        (NLMSG_ERROR, _) => Err(netlink::error_of(msg, "rtnetlink RTM_GETLINK")),
        (RTM_NEWLINK, Some((_, flags))) => {
            let mut info = parse_link(&msg[NLMSG_HDR_LEN + IFINFOMSG_LEN..]);
            info.up = Some(flags & libc::IFF_UP as u32 != 0);
            Ok(info)
        }
        _ => Err(Error::Unsupported(format!(
            "unexpected rtnetlink reply type {ty}"
        ))),
    }
}

/// A non-blocking rtnetlink socket in the link multicast group.
pub(crate) fn subscribe_links() -> Result<OwnedFd> {
    let fd = netlink::socket(NETLINK_ROUTE, libc::SOCK_NONBLOCK, "socket(AF_NETLINK)")?;
    netlink::bind_groups(&fd, RTMGRP_LINK, "bind(AF_NETLINK, RTMGRP_LINK)")?;
    Ok(fd)
}

/// What one link message says about interface `ifindex`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkMsg {
    /// Operationally up (or not).
    State(bool),
    Gone,
}

/// Parses the messages of one link-group datagram; the ones about `ifindex`, in order.
pub(crate) fn parse_link_msgs(b: &[u8], ifindex: u32) -> Vec<LinkMsg> {
    let mut out = Vec::new();
    for (ty, m) in netlink::messages(b) {
        if ty != RTM_NEWLINK && ty != RTM_DELLINK {
            continue;
        }
        let Some((index, flags)) = ifinfo(m) else {
            continue;
        };
        if index < 0 || index as u32 != ifindex {
            continue;
        }
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::netlink::{put_attr, NLA_F_NESTED};

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        put_attr(&mut v, ty, payload);
        v
    }

    #[test]
    fn xdp_attribute_is_found_in_a_link_message() {
        let mut xdp = attr(IFLA_XDP_ATTACHED, &[1]);
        xdp.extend(attr(IFLA_XDP_PROG_ID, &77u32.to_ne_bytes()));
        let mut msg = attr(3, b"veth0\0"); // IFLA_IFNAME, odd length, padded
        msg.extend(attr(IFLA_NUM_RX_QUEUES, &4u32.to_ne_bytes()));
        msg.extend(attr(IFLA_MTU, &1500u32.to_ne_bytes()));
        msg.extend(attr(IFLA_XDP | NLA_F_NESTED, &xdp));
        assert_eq!(
            parse_link(&msg),
            LinkInfo {
                xdp_prog_id: Some(77),
                rx_queues: Some(4),
                mtu: Some(1500),
                ..Default::default()
            }
        );
        let none = attr(IFLA_XDP, &attr(IFLA_XDP_ATTACHED, &[0]));
        assert_eq!(parse_link(&none).xdp_prog_id, None);
        // Truncated input ends the walk instead of panicking.
        assert_eq!(parse_link(&msg[..7]), LinkInfo::default());
    }

    fn msg(ty: u16, index: i32, flags: u32, oper: Option<u8>) -> Vec<u8> {
        let mut body = vec![0u8; IFINFOMSG_LEN];
        body[4..8].copy_from_slice(&index.to_ne_bytes());
        body[8..12].copy_from_slice(&flags.to_ne_bytes());
        if let Some(o) = oper {
            put_attr(&mut body, IFLA_OPERSTATE, &[o]);
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
}
