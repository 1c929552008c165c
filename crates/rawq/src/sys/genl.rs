//! One generic-netlink query of the kernel's `netdev` family (Linux 6.3+): which XDP receive
//! metadata kfuncs a driver implements (`NETDEV_A_DEV_XDP_RX_METADATA_FEATURES`, Linux 6.8).
//!
//! The family and its attributes are those of the kernel's
//! Documentation/netlink/specs/netdev.yaml (uapi `linux/netdev.h`): command `dev-get` (1) with
//! attribute `ifindex` (1, u32) answers with `xdp-rx-metadata-features` (5, u64), a mask of
//! `NETDEV_XDP_RX_METADATA_*`: 1 timestamp, 2 hash, 4 VLAN tag, one bit per `xmo_*` op of the
//! driver's `xdp_metadata_ops` (net/core/netdev-genl.c `netdev_nl_dev_fill`). The family's
//! number is found by name through the generic-netlink controller (`CTRL_CMD_GETFAMILY`,
//! `CTRL_ATTR_FAMILY_NAME` → `CTRL_ATTR_FAMILY_ID`, linux/genetlink.h).

use std::os::fd::OwnedFd;

use super::netlink::{self, attrs, put_attr, u16_of, u64_of, NLMSG_ERROR, NLMSG_HDR_LEN};
use crate::error::{Error, Result};

const NETLINK_GENERIC: libc::c_int = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_RX_METADATA_FEATURES: u16 = 5;
const HDR: usize = NLMSG_HDR_LEN + 4; // nlmsghdr + genlmsghdr

/// `NETDEV_XDP_RX_METADATA_TIMESTAMP`: the driver has `xmo_rx_timestamp`.
pub const RX_METADATA_TIMESTAMP: u64 = 1;
/// `NETDEV_XDP_RX_METADATA_HASH`: the driver has `xmo_rx_hash`.
pub const RX_METADATA_HASH: u64 = 2;
/// `NETDEV_XDP_RX_METADATA_VLAN_TAG`: the driver has `xmo_rx_vlan_tag`.
pub const RX_METADATA_VLAN_TAG: u64 = 4;

/// A generic-netlink request: headers (`genlmsghdr`: command, version 1), then attributes.
fn request(family: u16, cmd: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut body = vec![cmd, 1, 0, 0];
    for (ty, p) in attrs {
        put_attr(&mut body, *ty, p);
    }
    netlink::request(family, &body)
}

/// Sends `req` on `fd` and returns the attributes of the one reply (after the generic
/// header); an `NLMSG_ERROR` reply is the errno it carries.
fn exchange(fd: &OwnedFd, req: &[u8], what: &'static str) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; 16 * 1024];
    let n = netlink::roundtrip(fd, req, &mut buf, [what, what])?;
    parse_reply(&buf[..n], what)
}

fn parse_reply(msg: &[u8], what: &'static str) -> Result<Vec<u8>> {
    let short = || Error::Unsupported(format!("{what}: short generic-netlink reply"));
    let (ty, m) = netlink::reply(msg).ok_or_else(short)?;
    if ty == NLMSG_ERROR {
        return Err(netlink::error_of(m, what));
    }
    m.get(HDR..).map(<[u8]>::to_vec).ok_or_else(short)
}

/// The `NETDEV_XDP_RX_METADATA_*` mask of interface `ifindex` (in the calling thread's network
/// namespace): which metadata kfuncs its driver answers. 0 for a driver with none, and on a
/// kernel whose `netdev` family does not report them (before 6.8, when the VLAN kfunc did not
/// exist either).
///
/// # Errors
/// [`Error::Os`] when the socket fails, the kernel has no `netdev` family (before 6.3), or the
/// interface is unknown.
pub fn rx_metadata_features(ifindex: u32) -> Result<u64> {
    let fd = netlink::socket(NETLINK_GENERIC, 0, "socket(AF_NETLINK, NETLINK_GENERIC)")?;
    let ctrl = exchange(
        &fd,
        &request(
            GENL_ID_CTRL,
            CTRL_CMD_GETFAMILY,
            &[(CTRL_ATTR_FAMILY_NAME, b"netdev\0")],
        ),
        "generic netlink CTRL_CMD_GETFAMILY(netdev)",
    )?;
    let family = attrs(&ctrl)
        .find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID)
        .and_then(|(_, p)| u16_of(p))
        .ok_or_else(|| Error::Unsupported("the netdev family has no id".into()))?;
    let dev = exchange(
        &fd,
        &request(
            family,
            NETDEV_CMD_DEV_GET,
            &[(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes())],
        ),
        "generic netlink NETDEV_CMD_DEV_GET",
    )?;
    Ok(features_of(&dev))
}

/// The metadata mask in a `dev-get` reply's attributes (0 when absent).
fn features_of(attr_bytes: &[u8]) -> u64 {
    attrs(attr_bytes)
        .find(|(t, _)| *t == NETDEV_A_DEV_XDP_RX_METADATA_FEATURES)
        .and_then(|(_, p)| u64_of(p))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout_and_reply_parsing() {
        let r = request(0x1234, 1, &[(1, &7u32.to_ne_bytes()), (2, b"ab\0")]);
        assert_eq!(r.len(), 20 + 8 + 8);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 36);
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), 0x1234);
        assert_eq!((r[16], r[17]), (1, 1));
        // A reply carrying the mask (attribute 5, u64) after another attribute.
        let mut a = request(0, 0, &[(1, &9u32.to_ne_bytes()), (5, &7u64.to_ne_bytes())]);
        let attrs_only = parse_reply(&a, "t").unwrap();
        assert_eq!(features_of(&attrs_only), 7);
        assert_eq!(features_of(&attrs_only[..8]), 0, "no mask: none");
        // An error reply is the errno.
        a[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        a[16..20].copy_from_slice(&(-libc::ENODEV).to_ne_bytes());
        let e = parse_reply(&a, "t").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        // Truncated replies: errors, never panics.
        for n in 0..20 {
            let _ = parse_reply(&a[..n], "t");
        }
    }

    /// `lo` has no metadata ops: no bits. (A veth's, which has all three, is checked in
    /// tests/xdp/vlan.rs, inside a namespace.)
    #[test]
    fn loopback_answers_no_metadata_kfuncs() {
        let idx = crate::sys::ifindex("lo").unwrap();
        match rx_metadata_features(idx) {
            Ok(m) => assert_eq!(m, 0),
            Err(e) => eprintln!("skipped: no netdev generic-netlink family here ({e})"),
        }
    }
}
