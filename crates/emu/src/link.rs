//! The emulated port's link: its state follows the wire's interface, and each change is an
//! async event on every open context.
//!
//! What the kernel does (Linux drivers/infiniband/hw/mlx5/main.c): for a RoCE port,
//! `mlx5_query_port_roce` reports `IB_PORT_ACTIVE` (physical state 5, LinkUp) when the port's
//! netdev is running with carrier (`netif_running && netif_carrier_ok`), otherwise
//! `IB_PORT_DOWN` (physical state 3, Disabled); `mlx5_netdev_event`, on `NETDEV_UP`,
//! `NETDEV_DOWN` and `NETDEV_CHANGE` of that netdev, queries the port state again and, when it
//! differs from the last one it dispatched (`roce->last_port_state`), dispatches
//! `IB_EVENT_PORT_ACTIVE` or `IB_EVENT_PORT_ERR` with `element.port_num` set.
//! `ib_dispatch_event` reaches every uverbs file's handler (drivers/infiniband/core/
//! uverbs_main.c `ib_uverbs_event_handler` → `ib_uverbs_async_handler`), which queues an
//! `ib_uverbs_async_event_desc{element = port_num, event_type}` on that file's async fd.
//!
//! Here the "netdev" is the wire's interface (`--wire`): the kernel's notifier is imitated by
//! looking at the interface's `operstate` and `flags` in sysfs every [`POLL`]; the same
//! condition (administratively up, operationally up) decides the state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sys;
use crate::uapi::{self, ib_uverbs_async_event_desc};

/// `IB_EVENT_DEVICE_FATAL` (`enum ib_event_type`, = `IBV_EVENT_DEVICE_FATAL` in verbs.h).
pub const IB_EVENT_DEVICE_FATAL: u32 = 8;
/// `IB_EVENT_PORT_ACTIVE`, `IB_EVENT_PORT_ERR` (`enum ib_event_type`).
pub const IB_EVENT_PORT_ACTIVE: u32 = 9;
/// See [`IB_EVENT_PORT_ACTIVE`].
pub const IB_EVENT_PORT_ERR: u32 = 10;
/// `IB_PORT_DOWN` (`enum ib_port_state`).
pub const STATE_DOWN: u8 = 1;
/// Physical state "Disabled", what `mlx5_query_port_roce` reports for a port that is down.
pub const PHYS_DISABLED: u8 = 3;

/// How often the wire's state is looked at.
pub const POLL: Duration = Duration::from_millis(20);

/// The port's link state and the contexts its events go to.
#[derive(Debug)]
pub struct PortLink {
    up: AtomicBool,
    /// The device hit a fatal error ([`PortLink::fatal`]); for good.
    fatal: AtomicBool,
    /// Our ends of the async event fds of the open contexts.
    contexts: Mutex<Vec<i32>>,
}

impl Default for PortLink {
    fn default() -> Self {
        PortLink {
            up: AtomicBool::new(true),
            fatal: AtomicBool::new(false),
            contexts: Mutex::new(Vec::new()),
        }
    }
}

impl PortLink {
    /// The port is `IB_PORT_ACTIVE`.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// A context was made: its async fd (our end) receives the port's events.
    pub fn add_context(&self, async_tx: i32) {
        self.contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(async_tx);
    }

    /// A context is going away: no event is sent on `async_tx` any more (call before closing
    /// it, so that an event never goes to a reused descriptor).
    pub fn remove_context(&self, async_tx: i32) {
        self.contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&fd| fd != async_tx);
    }

    /// The device failed ([`PortLink::fatal`]): commands answer EIO.
    pub fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }

    /// The device hits a fatal internal error. What the kernel does (Linux
    /// drivers/infiniband/hw/mlx5/main.c `mlx5_ib_handle_event`, in newer kernels
    /// `mlx5_ib_handle_sys_error_event`, on `MLX5_DEV_EVENT_SYS_ERROR`):
    /// `mlx5_ib_handle_internal_error` completes what the QPs had outstanding, the device stops
    /// being active (`ib_active = false`) and `IB_EVENT_DEVICE_FATAL` is dispatched with
    /// `element.port_num` the event's parameter (1, as mlx5 core's error state raises it), which reaches every context's async fd as a port event does
    /// (uverbs_main.c `ib_uverbs_event_handler`); no port event follows. mlx5 core's health
    /// code (drivers/net/ethernet/mellanox/mlx5/core/health.c `mlx5_enter_error_state`) then
    /// takes the device away: uverbs disassociates every open file and answers each later
    /// command EIO (uverbs_main.c `ib_uverbs_write`: no `ib_dev` any more). Here the port
    /// reports down from then on, whatever its wire does, and every command answers EIO
    /// (`Device::write`). Returns whether this call made the change.
    pub fn fatal(&self) -> bool {
        let ctxs = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        if self.fatal.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.up.store(false, Ordering::Release);
        let d = ib_uverbs_async_event_desc {
            element: 1,
            event_type: IB_EVENT_DEVICE_FATAL,
            reserved: 0,
        };
        for &fd in ctxs.iter() {
            sys::send_event(fd, uapi::bytes_of(&d));
        }
        true
    }

    /// The state is now `up`: if that is a change, every context gets `IB_EVENT_PORT_ACTIVE`
    /// or `IB_EVENT_PORT_ERR` for port 1. Returns whether it was a change.
    pub fn set(&self, up: bool) -> bool {
        let ctxs = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        // A failed device's port stays down and says nothing more.
        if self.is_fatal() || self.up.swap(up, Ordering::AcqRel) == up {
            return false;
        }
        let d = ib_uverbs_async_event_desc {
            element: 1,
            event_type: if up {
                IB_EVENT_PORT_ACTIVE
            } else {
                IB_EVENT_PORT_ERR
            },
            reserved: 0,
        };
        for &fd in ctxs.iter() {
            sys::send_event(fd, uapi::bytes_of(&d));
        }
        true
    }
}

/// The interface is up as `mlx5_query_port_roce` counts it: administratively up and
/// operationally up (`unknown`, a driver that reports no state, counts as up, as
/// `netif_oper_up` does); `None` when the interface is gone.
pub fn wire_up(ifname: &str) -> Option<bool> {
    let read = |f: &str| std::fs::read_to_string(format!("/sys/class/net/{ifname}/{f}")).ok();
    let oper = read("operstate")?;
    let admin = read("flags")
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        .is_none_or(|f| f & libc::IFF_UP as u32 != 0);
    Some(admin && matches!(oper.trim(), "up" | "unknown"))
}

/// Follows `ifname`'s state into `link` for as long as the process runs (a thread of its
/// own). An interface that disappears is a port that is down.
pub fn watch(ifname: String, link: Arc<PortLink>) {
    link.set(wire_up(&ifname).unwrap_or(false));
    let _ = std::thread::Builder::new()
        .name("rawq-emu-link".into())
        .spawn(move || loop {
            std::thread::sleep(POLL);
            link.set(wire_up(&ifname).unwrap_or(false));
        });
}

/// Makes `link` fail fatally ([`PortLink::fatal`]) once `path` exists: at once if it does
/// already (the device is started failed, and so the command that started it is the first to
/// fail), else from a thread of its own, looking every [`POLL`], which ends then.
pub fn watch_fatal(path: String, link: Arc<PortLink>) {
    if std::path::Path::new(&path).exists() {
        link.fatal();
        return;
    }
    let _ = std::thread::Builder::new()
        .name("rawq-emu-fatal".into())
        .spawn(move || {
            while !std::path::Path::new(&path).exists() {
                std::thread::sleep(POLL);
            }
            link.fatal();
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_one_event_on_every_context() {
        let l = PortLink::default();
        let (a_app, a_tx) = sys::event_pair(true).unwrap();
        let (b_app, b_tx) = sys::event_pair(true).unwrap();
        l.add_context(a_tx);
        l.add_context(b_tx);
        assert!(!l.set(true), "already up: no event");
        assert!(l.set(false));
        assert!(!l.set(false));
        l.remove_context(b_tx);
        assert!(l.set(true));
        let mut buf = [0u8; 64];
        let mut got = |fd| {
            let mut v = Vec::new();
            while let Some(n) = sys::recv_nowait(fd, &mut buf) {
                assert_eq!(n, 16);
                v.push((
                    crate::uapi::u64_at(&buf, 0),
                    crate::uapi::u64_at(&buf, 8) as u32,
                ));
            }
            v
        };
        assert_eq!(
            got(a_app),
            vec![(1, IB_EVENT_PORT_ERR), (1, IB_EVENT_PORT_ACTIVE)]
        );
        assert_eq!(got(b_app), vec![(1, IB_EVENT_PORT_ERR)]);
        assert!(l.is_up());
        for fd in [a_app, a_tx, b_app, b_tx] {
            sys::close(fd);
        }
    }

    #[test]
    fn a_fatal_error_is_one_event_on_every_context_and_the_port_stays_down() {
        let l = PortLink::default();
        let (a_app, a_tx) = sys::event_pair(true).unwrap();
        let (b_app, b_tx) = sys::event_pair(true).unwrap();
        l.add_context(a_tx);
        l.add_context(b_tx);
        assert!(!l.is_fatal());
        assert!(l.fatal());
        assert!(!l.fatal(), "once");
        assert!(l.is_fatal() && !l.is_up());
        assert!(!l.set(true), "the wire coming up changes nothing");
        assert!(!l.is_up());
        let mut buf = [0u8; 64];
        for fd in [a_app, b_app] {
            let n = sys::recv_nowait(fd, &mut buf).expect("an event");
            assert_eq!(n, 16);
            assert_eq!(
                (
                    crate::uapi::u64_at(&buf, 0),
                    crate::uapi::u64_at(&buf, 8) as u32
                ),
                (1, IB_EVENT_DEVICE_FATAL)
            );
            assert!(sys::recv_nowait(fd, &mut buf).is_none(), "one event only");
        }
        for fd in [a_app, a_tx, b_app, b_tx] {
            sys::close(fd);
        }
    }

    #[test]
    fn lo_is_up_and_a_missing_interface_is_gone() {
        assert_eq!(wire_up("lo"), Some(true));
        assert_eq!(wire_up("rawq-none0"), None);
    }
}
