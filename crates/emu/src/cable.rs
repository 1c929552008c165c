//! A cable between the emulated devices of two processes (`RAWQ_EMU_CABLE=PATH`,
//! `scripts/emu.sh --cable PATH`): what `--pair` does inside one process, across two. Frames go
//! from one device's send queue to the other device's receive side with no kernel netdev in
//! between; a frame the receiving device has no buffer for is its no-buffer drop, as on a pair.
//!
//! The cable is a unix `SOCK_SEQPACKET` connection at PATH: each message is one frame (the
//! kernel keeps the boundaries), the kernel says when the other end is gone (end of file,
//! `POLLHUP`), and the device model reads and writes it as it does the veth bridge's
//! `AF_PACKET` socket (a frame the socket refuses, full or unplugged, is a `wire_drops`). The
//! first process to come binds PATH and waits; the second connects. Who binds or connects is
//! decided under an exclusive `flock` of `PATH.lock`, so two starting together cannot both
//! bind, and a socket file left by a process that is gone is taken over.
//!
//! Link state follows the cable as it follows the veth wire ([`crate::link`]: the kernel's
//! `mlx5_netdev_event` → `IB_EVENT_PORT_ACTIVE` / `IB_EVENT_PORT_ERR`): the port is active
//! while the other end is connected, down before it comes and once it is gone. The side that
//! bound PATH keeps listening, so a new process on the other end plugs the cable in again; the
//! side that connected, once the binder is gone, binds PATH itself and waits.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use rawq_model::hw::Hw;

use crate::link::PortLink;
use crate::Errno;

/// Socket buffers asked for (best effort): seconds of a test's frames in flight on the cable
/// while a device thread is descheduled, as the model sizes its `AF_PACKET` socket.
const BUF_BYTES: libc::c_int = 16 << 20;

fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A new `AF_UNIX` / `SOCK_SEQPACKET` socket with big buffers.
fn socket() -> Result<OwnedFd, Errno> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    size_buffers(&fd);
    Ok(fd)
}

/// Send and receive buffers of [`BUF_BYTES`] (`SO_*BUFFORCE` needs CAP_NET_ADMIN; else capped
/// at `net.core.[rw]mem_max`).
fn size_buffers(fd: &OwnedFd) {
    for opts in [
        [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF],
        [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF],
    ] {
        for opt in opts {
            // SAFETY: setsockopt on our socket with a pointer to an int of the size passed.
            let rc = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&BUF_BYTES as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as u32,
                )
            };
            if rc == 0 {
                break;
            }
        }
    }
}

/// PATH as a `sockaddr_un` (ENAMETOOLONG past 107 bytes, EINVAL with a NUL).
fn addr(path: &str) -> Result<(libc::sockaddr_un, u32), Errno> {
    // SAFETY: sockaddr_un is plain data; zero is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let b = path.as_bytes();
    if b.is_empty() || b.contains(&0) {
        return Err(libc::EINVAL);
    }
    if b.len() >= a.sun_path.len() {
        return Err(libc::ENAMETOOLONG);
    }
    for (d, s) in a.sun_path.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + b.len() + 1;
    Ok((a, len as u32))
}

/// One end of the cable: connected to the other process, or bound and waiting for it.
enum End {
    Connected(OwnedFd),
    Listening(OwnedFd),
}

/// Connects to PATH, or (nobody there, or a socket file whose process is gone) binds it and
/// listens; decided under the exclusive lock of `PATH.lock`.
fn establish(path: &str) -> Result<End, Errno> {
    let (a, len) = addr(path)?;
    let lock_path = std::ffi::CString::new(format!("{path}.lock")).map_err(|_| libc::EINVAL)?;
    // SAFETY: a NUL-terminated path; the descriptor is owned below.
    let lock = unsafe {
        libc::open(
            lock_path.as_ptr(),
            libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if lock < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor we own; closing it releases the lock.
    let lock = unsafe { OwnedFd::from_raw_fd(lock) };
    // SAFETY: flock on our descriptor.
    while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        if errno() != libc::EINTR {
            return Err(errno());
        }
    }
    let fd = socket()?;
    let sa = (&a as *const libc::sockaddr_un).cast::<libc::sockaddr>();
    // SAFETY: `sa` points at a sockaddr_un of `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), sa, len) } == 0 {
        return Ok(End::Connected(fd));
    }
    match errno() {
        libc::ENOENT | libc::ECONNREFUSED => {}
        e => return Err(e),
    }
    // Nobody listens: a socket file left behind is removed (under the lock, nobody else
    // is binding it now).
    // SAFETY: a NUL-terminated path (checked by `addr`).
    unsafe { libc::unlink(a.sun_path.as_ptr()) };
    // SAFETY: as for connect; listen on the socket just bound.
    if unsafe { libc::bind(fd.as_raw_fd(), sa, len) } != 0
        || unsafe { libc::listen(fd.as_raw_fd(), 1) } != 0
    {
        return Err(errno());
    }
    Ok(End::Listening(fd))
}

/// The next connection on a listening end (blocking).
fn accept(l: &OwnedFd) -> Result<OwnedFd, Errno> {
    loop {
        // SAFETY: accept4 on our listening socket, no address wanted.
        let fd = unsafe {
            libc::accept4(
                l.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh descriptor we own.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            size_buffers(&fd);
            return Ok(fd);
        }
        match errno() {
            libc::EINTR | libc::ECONNABORTED => continue,
            e => return Err(e),
        }
    }
}

/// Returns once the other end of `fd` is gone (`POLLHUP`: a `SOCK_SEQPACKET` peer that closes
/// shuts both directions down; no data is read here, the device model reads it).
fn wait_hangup(fd: &OwnedFd) {
    loop {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, -1) };
        if n < 0 && errno() != libc::EINTR {
            return;
        }
        if p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return;
        }
    }
}

/// Plugs the device into the cable at `path`: connects to a process waiting there, or becomes
/// the one waiting (the port is down until the other end comes). Frames sent while nothing is
/// plugged in are wire drops. A cable that cannot be made (a bad path) is said on stderr and
/// the port stays down.
pub fn start(path: String, hw: Hw, link: Arc<PortLink>) {
    // The port is down until a connection is plugged in.
    link.set(false);
    let fail = |e: Errno| {
        log::warn!(
            "cable {path:?}: {} (RAWQ_EMU_CABLE / --cable names a unix socket path of \
             at most 107 bytes in a writable directory); the port stays down",
            std::io::Error::from_raw_os_error(e)
        );
    };
    // Unplugged until connected: an unconnected socket refuses every frame (ENOTCONN).
    match socket() {
        Ok(s) => hw.plug_socket(s),
        Err(e) => return fail(e),
    }
    let end = match establish(&path) {
        Ok(end) => end,
        Err(e) => return fail(e),
    };
    // Connected now: the port is active from its first query; else down until the other end
    // comes.
    let end = match end {
        End::Connected(c) => match plug(&hw, &link, c) {
            Ok(watch) => End::Connected(watch),
            Err(e) => return fail(e),
        },
        listening => listening,
    };
    let spawned = std::thread::Builder::new()
        .name("rawq-emu-cable".into())
        .spawn({
            let (hw, link, path) = (hw.clone(), Arc::clone(&link), path.clone());
            move || run(path, hw, link, end)
        });
    if spawned.is_err() {
        log::warn!("cable {path:?}: no thread to follow it; its link state is not followed");
    }
}

/// Plugs connection `c` into the model and brings the port up; returns a descriptor of the
/// same socket to watch for the other end going.
fn plug(hw: &Hw, link: &PortLink, c: OwnedFd) -> Result<OwnedFd, Errno> {
    let watch = c
        .try_clone()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    hw.plug_socket(c);
    link.set(true);
    Ok(watch)
}

/// Follows the cable for as long as the process runs: plugs each connection into the model,
/// the port up while it lasts and down when the other end goes; then waits for the next
/// connection (the binder) or binds and waits itself (the side that had connected).
fn run(path: String, hw: Hw, link: Arc<PortLink>, end: End) {
    // `plugged`: a connection the model already has (the first one, plugged by `start`; this
    // is the descriptor to watch).
    let (mut listener, mut plugged) = match end {
        End::Connected(c) => (None, Some(c)),
        End::Listening(l) => (Some(l), None),
    };
    loop {
        let conn = match (plugged.take(), &listener) {
            (Some(c), _) => Ok(c),
            (None, Some(l)) => accept(l).and_then(|c| plug(&hw, &link, c)),
            (None, None) => match establish(&path) {
                Ok(End::Listening(l)) => {
                    listener = Some(l);
                    continue;
                }
                Ok(End::Connected(c)) => plug(&hw, &link, c),
                Err(e) => Err(e),
            },
        };
        match conn {
            Ok(watch) => {
                wait_hangup(&watch);
                link.set(false);
            }
            Err(e) => {
                log::warn!(
                    "cable {path:?}: {}; trying again in a second",
                    std::io::Error::from_raw_os_error(e)
                );
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> String {
        let d = std::env::temp_dir().join(format!("rawq-cable-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join("c").to_str().unwrap().to_owned()
    }

    #[test]
    fn the_first_binds_the_second_connects_and_a_dead_binder_is_taken_over() {
        let path = tmp("roles");
        let l = match establish(&path) {
            Ok(End::Listening(l)) => l,
            _ => panic!("the first end binds"),
        };
        let c = match establish(&path) {
            Ok(End::Connected(c)) => c,
            _ => panic!("the second end connects"),
        };
        let a = accept(&l).expect("the binder accepts");
        // The binder's connection sees the other end go.
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            wait_hangup(&a);
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "still there"
        );
        drop(c);
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("a hang-up once the other end is closed");
        waiter.join().unwrap();
        // The binder is gone; its socket file is left behind: the next end takes it over.
        drop(l);
        assert!(std::path::Path::new(&path).exists());
        assert!(matches!(establish(&path), Ok(End::Listening(_))));
    }

    #[test]
    fn a_path_a_socket_cannot_have_is_refused() {
        assert_eq!(addr(&"x".repeat(108)).err(), Some(libc::ENAMETOOLONG));
        assert_eq!(addr("").err(), Some(libc::EINVAL));
        assert!(addr(&"x".repeat(107)).is_ok());
        assert!(matches!(
            establish("/nonexistent-dir-rawq/c"),
            Err(libc::ENOENT)
        ));
    }
}
