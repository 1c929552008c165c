//! One rtnetlink query: `RTM_GETLINK` for an interface, to learn which XDP program is attached
//! (`IFLA_XDP`) and how many rx queues it has (`IFLA_NUM_RX_QUEUES`).
//!
//! Message layout (`linux/netlink.h`, `linux/rtnetlink.h`): a 16-byte `nlmsghdr`, a 16-byte
//! `ifinfomsg`, then attributes `[len u16][type u16][payload]`, each padded to 4 bytes; `IFLA_XDP`
//! nests further attributes the same way.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::{Error, Result};
use crate::link::{attrs, u32_of};

const NETLINK_ROUTE: libc::c_int = 0;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;

const NLMSG_HDR_LEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;

const IFLA_ADDRESS: u16 = 1;
const IFLA_MTU: u16 = 4;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;

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

/// A netlink socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_GENERIC`, ...), close-on-exec.
pub(super) fn socket(protocol: libc::c_int, what: &'static str) -> Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if fd < 0 {
        return Err(Error::last_os(what));
    }
    // SAFETY: fresh descriptor, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends the request `req` to the kernel on `fd` and receives one reply into `reply`; the
/// reply's length. `what` names the send and the receive in errors.
pub(super) fn roundtrip(
    fd: &OwnedFd,
    req: &[u8],
    reply: &mut [u8],
    what: [&'static str; 2],
) -> Result<usize> {
    // SAFETY: sends `req`, a live buffer of the given length, to the kernel (pid 0 is implied
    // by an unconnected netlink socket's default destination).
    let rc = unsafe {
        let mut sa: libc::sockaddr_nl = std::mem::zeroed();
        sa.nl_family = libc::AF_NETLINK as u16;
        libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr() as *const libc::c_void,
            req.len(),
            0,
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(Error::last_os(what[0]));
    }
    // SAFETY: receives into `reply`, at most its length.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            reply.as_mut_ptr() as *mut libc::c_void,
            reply.len(),
            0,
        )
    };
    if n < 0 {
        return Err(Error::last_os(what[1]));
    }
    Ok(n as usize)
}

/// Asks rtnetlink about interface `ifindex` (in the calling thread's network namespace).
///
/// # Errors
/// [`Error::Os`] when the socket or the request fails (ENODEV for an unknown index).
pub fn link_info(ifindex: u32) -> Result<LinkInfo> {
    let fd = socket(NETLINK_ROUTE, "socket(AF_NETLINK)")?;

    let mut req = [0u8; NLMSG_HDR_LEN + IFINFOMSG_LEN];
    let total = req.len() as u32;
    req[0..4].copy_from_slice(&total.to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    // The sequence number, then ifinfomsg: family AF_UNSPEC, type 0, index, flags 0, change 0.
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[NLMSG_HDR_LEN + 4..NLMSG_HDR_LEN + 8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    let mut buf = vec![0u8; 64 * 1024];
    let n = roundtrip(
        &fd,
        &req,
        &mut buf,
        ["sendto(RTM_GETLINK)", "recv(RTM_GETLINK)"],
    )?;
    let msg = &buf[..n];
    if msg.len() < NLMSG_HDR_LEN {
        return Err(Error::Unsupported("short rtnetlink reply".into()));
    }
    let len = (u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]) as usize).min(msg.len());
    let ty = u16::from_ne_bytes([msg[4], msg[5]]);
    match ty {
        NLMSG_ERROR => {
            let errno = msg
                .get(16..20)
                .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .unwrap_or(0);
            Err(Error::os(
                "rtnetlink RTM_GETLINK",
                std::io::Error::from_raw_os_error(-errno),
            ))
        }
        RTM_NEWLINK if len >= NLMSG_HDR_LEN + IFINFOMSG_LEN => {
            let mut info = parse_link(&msg[NLMSG_HDR_LEN + IFINFOMSG_LEN..len]);
            // ifinfomsg: family u8, pad u8, type u16, index i32, flags u32, change u32.
            let f = NLMSG_HDR_LEN + 8;
            let flags = u32::from_ne_bytes([msg[f], msg[f + 1], msg[f + 2], msg[f + 3]]);
            info.up = Some(flags & libc::IFF_UP as u32 != 0);
            Ok(info)
        }
        _ => Err(Error::Unsupported(format!(
            "unexpected rtnetlink reply type {ty}"
        ))),
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

    #[test]
    fn xdp_attribute_is_found_in_a_link_message() {
        let mut xdp = attr(IFLA_XDP_ATTACHED, &[1]);
        xdp.extend(attr(IFLA_XDP_PROG_ID, &77u32.to_ne_bytes()));
        let mut msg = attr(3, b"veth0\0"); // IFLA_IFNAME, odd length, padded
        msg.extend(attr(IFLA_NUM_RX_QUEUES, &4u32.to_ne_bytes()));
        msg.extend(attr(IFLA_MTU, &1500u32.to_ne_bytes()));
        msg.extend(attr(IFLA_XDP | 0x8000, &xdp)); // NLA_F_NESTED set
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
}
