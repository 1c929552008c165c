//! Netlink sockets and the wire format every netlink user in rawq shares
//! (`linux/netlink.h`): a message is a 16-byte `nlmsghdr` (length u32, type u16, flags u16,
//! sequence u32, port id u32) and a body; attributes are `[len u16][type u16][payload]`, each
//! padded to 4 bytes, and nest the same way. One reader ([`attrs`], [`messages`], [`reply`])
//! and one writer ([`put_attr`], [`request`]) serve rtnetlink and generic netlink alike.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::{Error, Result};

/// `sizeof(struct nlmsghdr)`.
pub(crate) const NLMSG_HDR_LEN: usize = 16;
/// `NLMSG_ERROR`: the reply carries an errno (negative, after the header).
pub(crate) const NLMSG_ERROR: u16 = 2;
/// `NLM_F_REQUEST`.
pub(crate) const NLM_F_REQUEST: u16 = 1;
/// Attribute type bits (the top two are the nested / byte-order flags).
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `NLA_F_NESTED`: the attribute's payload is attributes.
#[cfg(test)]
pub(crate) const NLA_F_NESTED: u16 = 0x8000;

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
        b = b.get(align4(len)..).unwrap_or(&[]);
        Some((ty, payload))
    })
}

/// `n` rounded up to the 4-byte alignment of netlink messages and attributes.
fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3usize
}

/// A `u16` attribute payload.
pub(crate) fn u16_of(p: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(p.get(..2)?.try_into().ok()?))
}

/// A `u32` attribute payload.
pub(crate) fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

/// A `u64` attribute payload.
pub(crate) fn u64_of(p: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(p.get(..8)?.try_into().ok()?))
}

/// Appends attribute `ty` with `payload` to `m`, padded to 4 bytes.
pub(crate) fn put_attr(m: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    m.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(payload);
    m.resize(align4(m.len()), 0);
}

/// A request message of type `ty` (`NLM_F_REQUEST`, sequence 1) whose body is `body`.
pub(crate) fn request(ty: u16, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(NLMSG_HDR_LEN + body.len());
    m.extend_from_slice(&((NLMSG_HDR_LEN + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

/// Iterates the messages of one datagram: (type, the whole message, header included). A
/// truncated or malformed message ends the walk.
pub(crate) fn messages(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < NLMSG_HDR_LEN {
            return None;
        }
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len < NLMSG_HDR_LEN || len > b.len() {
            return None;
        }
        let ty = u16::from_ne_bytes([b[4], b[5]]);
        let m = &b[..len];
        b = b.get(align4(len)..).unwrap_or(&[]);
        Some((ty, m))
    })
}

/// The one reply of a request: (type, the message cut to the length its header gives, header
/// included); `None` when it is shorter than a header.
pub(crate) fn reply(b: &[u8]) -> Option<(u16, &[u8])> {
    if b.len() < NLMSG_HDR_LEN {
        return None;
    }
    let len = (u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize).min(b.len());
    Some((u16::from_ne_bytes([b[4], b[5]]), &b[..len]))
}

/// The error an `NLMSG_ERROR` message `m` (header included) carries, as an OS error of `what`.
pub(crate) fn error_of(m: &[u8], what: &'static str) -> Error {
    let errno = m
        .get(NLMSG_HDR_LEN..NLMSG_HDR_LEN + 4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0);
    Error::os(what, io::Error::from_raw_os_error(errno.saturating_neg()))
}

/// A netlink socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_GENERIC`, ...), close-on-exec;
/// `flags` adds socket type flags (`SOCK_NONBLOCK`). `what` names it in errors.
pub(crate) fn socket(
    protocol: libc::c_int,
    flags: libc::c_int,
    what: &'static str,
) -> Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
            protocol,
        )
    };
    if fd < 0 {
        return Err(Error::last_os(what));
    }
    // SAFETY: fresh descriptor, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Joins the multicast groups `groups` (a bit mask, `RTMGRP_*`) on `fd`.
pub(crate) fn bind_groups(fd: &OwnedFd, groups: u32, what: &'static str) -> Result<()> {
    // SAFETY: sockaddr_nl is plain data; zeroed is valid.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    sa.nl_groups = groups;
    // SAFETY: binds the socket to a valid sockaddr_nl of the size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(Error::last_os(what));
    }
    Ok(())
}

/// Receives one datagram on `fd` into `buf` (at most its length); its length.
pub(crate) fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: receives into `buf`, at most its length.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Sends the request `req` to the kernel on `fd` and receives one reply into `reply`; the
/// reply's length. `what` names the send and the receive in errors.
pub(crate) fn roundtrip(
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
    recv(fd, reply).map_err(|e| Error::os(what[1], e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_written_are_read_back() {
        let mut m = Vec::new();
        put_attr(&mut m, 3, b"veth0\0"); // odd length, padded
        put_attr(&mut m, 4, &1500u32.to_ne_bytes());
        let mut nested = Vec::new();
        put_attr(&mut nested, 1, &7u64.to_ne_bytes());
        put_attr(&mut m, 9 | NLA_F_NESTED, &nested);
        assert_eq!(m.len() % 4, 0);
        let got: Vec<(u16, &[u8])> = attrs(&m).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (3, &b"veth0\0"[..]));
        assert_eq!(u32_of(got[1].1), Some(1500));
        assert_eq!(got[2].0, 9, "the nested flag is not part of the type");
        assert_eq!(attrs(got[2].1).next().and_then(|(_, p)| u64_of(p)), Some(7));
        assert_eq!(u16_of(&[1]), None);
        // Truncated input ends the walk instead of panicking.
        for cut in 0..m.len() {
            let _ = attrs(&m[..cut]).count();
        }
    }

    #[test]
    fn messages_and_replies() {
        let mut d = request(16, &[0u8; 4]);
        d.extend(request(17, &[]));
        let got: Vec<(u16, usize)> = messages(&d).map(|(t, m)| (t, m.len())).collect();
        assert_eq!(got, vec![(16, 20), (17, 16)]);
        assert_eq!(reply(&d).map(|(t, m)| (t, m.len())), Some((16, 20)));
        assert_eq!(reply(&d[..15]), None);
        let mut e = request(NLMSG_ERROR, &(-libc::ENODEV).to_ne_bytes());
        assert_eq!(error_of(&e, "t").raw_os_error(), Some(libc::ENODEV));
        e.truncate(NLMSG_HDR_LEN);
        let _ = error_of(&e, "t");
        let i = request(NLMSG_ERROR, &i32::MIN.to_ne_bytes());
        let _ = error_of(&i, "t"); // never panics
        for cut in 0..d.len() {
            let _ = messages(&d[..cut]).count();
        }
    }
}
