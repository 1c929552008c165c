//! An open device context (`ibv_context`) and what it can tell about the device and its ports.

use std::ffi::CStr;
use std::io;
use std::mem;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::*;

use super::ffi::ibv_query_device_ex;

use crate::error::{Error, Result};

/// `IBV_LINK_LAYER_ETHERNET` (an anonymous enum in verbs.h that rdma-sys does not export).
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_LINK_LAYER_INFINIBAND`.
pub const LINK_LAYER_INFINIBAND: u8 = 1;

pub(crate) struct ContextInner {
    ctx: NonNull<ibv_context>,
    name: String,
}

// SAFETY: an `ibv_context` may be used from any thread (libibverbs serialises what needs it); the
// pointer is only closed in `Drop`, when no other owner is left.
unsafe impl Send for ContextInner {}
// SAFETY: see `Send`; the methods that use it through `&self` are thread-safe verbs calls.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: the context was opened by `ibv_open_device` and every object created on it holds
        // an `Arc` to this struct, so none is left when it is closed.
        let rc = unsafe { ibv_close_device(self.ctx.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_close_device({}) failed: {}",
                self.name,
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

/// An open RDMA device. Cheap to clone (a reference-counted handle); the device is closed when
/// the last handle and the last object created on it are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.inner.name)
            .finish()
    }
}

/// The device attributes rawq cares about (from `ibv_query_device_ex`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Firmware version text.
    pub fw_ver: String,
    /// PCI vendor id (0x15b3 for Mellanox / NVIDIA).
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Largest work queue (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Most scatter/gather entries per work request.
    pub max_sge: u32,
    /// Largest completion queue.
    pub max_cqe: u32,
    /// `IBV_DEVICE_*` capability flags (`device_cap_flags_ex`).
    pub device_cap_flags: u64,
    /// `IBV_RAW_PACKET_CAP_*` flags.
    pub raw_packet_caps: u32,
    /// QP types that support RSS (`rss_caps.supported_qpts`, a bit per `IBV_QPT_*`).
    pub rss_supported_qpts: u32,
    /// Largest RWQ indirection table.
    pub max_rwq_indirection_table_size: u32,
    /// `IBV_RX_HASH_*` fields the device can hash on.
    pub rx_hash_fields_mask: u64,
    /// Most receive work queues (`max_wq_type_rq`).
    pub max_wq_type_rq: u32,
    /// Largest TSO payload (0 = no TSO).
    pub max_tso: u32,
    /// QP types TSO works on (`tso_caps.supported_qpts`, a bit per `IBV_QPT_*`).
    pub tso_supported_qpts: u32,
}

impl DeviceAttr {
    /// The device supports flow steering rules (`IBV_DEVICE_MANAGED_FLOW_STEERING`).
    pub fn flow_steering(&self) -> bool {
        self.device_cap_flags & ibv_device_cap_flags::IBV_DEVICE_MANAGED_FLOW_STEERING.0 as u64 != 0
    }

    /// The device checksums IP/TCP/UDP on send and verifies them on receive for raw packets.
    pub fn raw_ip_csum(&self) -> bool {
        self.raw_packet_caps & ibv_raw_packet_caps::IBV_RAW_PACKET_CAP_IP_CSUM.0 != 0
            || self.device_cap_flags & ibv_device_cap_flags::IBV_DEVICE_RAW_IP_CSUM.0 as u64 != 0
    }

    /// Largest TSO payload on a RAW_PACKET QP: `max_tso` when `tso_caps.supported_qpts` has
    /// RAW_PACKET (libmlx5 fills both from the kernel's mlx5 answer: providers/mlx5/verbs.c
    /// `mlx5_query_device_ex`), else 0.
    pub fn raw_packet_max_tso(&self) -> u32 {
        if self.tso_supported_qpts & (1 << ibv_qp_type::IBV_QPT_RAW_PACKET) != 0 {
            self.max_tso
        } else {
            0
        }
    }

    /// The device strips a received frame's 802.1Q tag when a WQ asks for it
    /// (`IBV_RAW_PACKET_CAP_CVLAN_STRIPPING`).
    pub fn raw_cvlan_stripping(&self) -> bool {
        self.raw_packet_caps & ibv_raw_packet_caps::IBV_RAW_PACKET_CAP_CVLAN_STRIPPING.0 != 0
    }

    /// RSS (indirection table + hashing QP) is supported on RAW_PACKET QPs.
    pub fn rss_raw_packet(&self) -> bool {
        self.max_rwq_indirection_table_size > 0
            && self.rss_supported_qpts & (1 << ibv_qp_type::IBV_QPT_RAW_PACKET) != 0
    }
}

/// The port attributes rawq cares about (from `ibv_query_port`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttr {
    /// `IBV_PORT_*` state (4 = active).
    pub state: u32,
    /// Link layer: [`LINK_LAYER_ETHERNET`] or [`LINK_LAYER_INFINIBAND`] (0 = unspecified).
    pub link_layer: u8,
    /// Active MTU as an `IBV_MTU_*` code (1 = 256 … 5 = 4096).
    pub active_mtu: u32,
    /// Entries in the GID table.
    pub gid_tbl_len: i32,
    /// Active speed per lane as an `IBV_SPEED_*` code (see [`crate::link`]).
    pub active_speed: u8,
    /// Active width as an `IBV_WIDTH_*` code.
    pub active_width: u8,
}

impl PortAttr {
    /// The port is up (`IBV_PORT_ACTIVE`).
    pub fn is_active(&self) -> bool {
        self.state == ibv_port_state::IBV_PORT_ACTIVE
    }

    /// The state as a word (`ibv_port_state_str` spelling, lower case): `down`, `init`,
    /// `armed`, `active`, `active_defer`, or `nop`.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            1 => "down",
            2 => "init",
            3 => "armed",
            4 => "active",
            5 => "active_defer",
            _ => "nop",
        }
    }

    /// `"Ethernet"`, `"InfiniBand"` or `"unspecified"`.
    pub fn link_layer_name(&self) -> &'static str {
        match self.link_layer {
            LINK_LAYER_ETHERNET => "Ethernet",
            LINK_LAYER_INFINIBAND => "InfiniBand",
            _ => "unspecified",
        }
    }

    /// Active MTU in bytes.
    pub fn active_mtu_bytes(&self) -> u32 {
        if (1..=5).contains(&self.active_mtu) {
            128 << self.active_mtu
        } else {
            0
        }
    }
}

impl Context {
    /// Opens `dev` (an entry of a device list that is still alive).
    ///
    /// # Errors
    /// [`Error::Permission`] when `/dev/infiniband/uverbs*` may not be opened (EACCES/EPERM),
    /// [`Error::Os`] otherwise (ENODEV: the device went away).
    pub(crate) fn open_raw(dev: NonNull<ibv_device>, name: &str) -> Result<Context> {
        // SAFETY: `dev` is an entry of a live device list (the caller holds it).
        let ctx = unsafe { ibv_open_device(dev.as_ptr()) };
        let ctx = NonNull::new(ctx).ok_or_else(|| Error::last_os("ibv_open_device"))?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                ctx,
                name: name.to_owned(),
            }),
        })
    }

    /// A context over a fake `ibv_context` for data-path tests; never closed (the fake is
    /// leaked by the test).
    #[cfg(test)]
    pub(crate) fn fake(ctx: NonNull<ibv_context>) -> Context {
        let c = Context {
            inner: Arc::new(ContextInner {
                ctx,
                name: "fake".into(),
            }),
        };
        std::mem::forget(c.clone());
        c
    }

    /// The device name (`mlx5_0`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The raw `ibv_context`, valid while this handle lives. rawq's bindings of rdma-core's C
    /// interface are internal: cast the pointer to your own bindings' `struct ibv_context`
    /// (verbs.h) for calls rawq does not make.
    pub fn as_raw(&self) -> *mut ibv_context {
        self.inner.ctx.as_ptr()
    }

    /// Queries the device attributes.
    ///
    /// # Errors
    /// [`Error::Os`] with the errno `ibv_query_device_ex` returned (e.g. EIO on a dead device).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: `ibv_device_attr_ex` is plain old data; all-zero is a valid value.
        let mut a: ibv_device_attr_ex = unsafe { mem::zeroed() };
        // SAFETY: the context is open; `a` is a valid output buffer of the size rdma-sys passes.
        let rc = unsafe { ibv_query_device_ex(self.as_raw(), std::ptr::null(), &mut a) };
        if rc != 0 {
            return Err(Error::os(
                "ibv_query_device_ex",
                io::Error::from_raw_os_error(rc),
            ));
        }
        let o = &a.orig_attr;
        // SAFETY: fw_ver is a NUL-padded 64-byte array written by the provider; `to_bytes` below
        // stops at the first NUL, and the array is zero-initialised so one exists.
        let fw = unsafe { CStr::from_ptr(o.fw_ver.as_ptr()) };
        Ok(DeviceAttr {
            fw_ver: fw.to_string_lossy().into_owned(),
            vendor_id: o.vendor_id,
            vendor_part_id: o.vendor_part_id,
            phys_port_cnt: o.phys_port_cnt,
            max_qp_wr: o.max_qp_wr.max(0) as u32,
            max_sge: o.max_sge.max(0) as u32,
            max_cqe: o.max_cqe.max(0) as u32,
            device_cap_flags: a.device_cap_flags_ex | o.device_cap_flags as u64,
            raw_packet_caps: a.raw_packet_caps,
            rss_supported_qpts: a.rss_caps.supported_qpts,
            max_rwq_indirection_table_size: a.rss_caps.max_rwq_indirection_table_size,
            rx_hash_fields_mask: a.rss_caps.rx_hash_fields_mask,
            max_wq_type_rq: a.max_wq_type_rq,
            max_tso: a.tso_caps.max_tso,
            tso_supported_qpts: a.tso_caps.supported_qpts,
        })
    }

    /// Queries port `port` (1-based).
    ///
    /// # Errors
    /// [`Error::Os`]: EINVAL when the port does not exist.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: `ibv_port_attr` is plain old data; all-zero is a valid value.
        let mut a: ibv_port_attr = unsafe { mem::zeroed() };
        // SAFETY: the context is open and `a` is a valid output buffer.
        let rc = unsafe { ibv_query_port(self.as_raw(), port, &mut a) };
        if rc != 0 {
            return Err(Error::os(
                "ibv_query_port",
                io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(PortAttr {
            state: a.state,
            link_layer: a.link_layer,
            active_mtu: a.active_mtu,
            gid_tbl_len: a.gid_tbl_len,
            active_speed: a.active_speed,
            active_width: a.active_width,
        })
    }

    /// The context's asynchronous event fd (`ibv_context::async_fd`): readable when an event
    /// waits for [`Context::get_async_event`].
    pub fn async_fd(&self) -> std::os::fd::RawFd {
        // SAFETY: the context is open; `async_fd` is set by ibv_open_device and never changes.
        unsafe { (*self.as_raw()).async_fd }
    }

    /// Reads one asynchronous event (`ibv_get_async_event`, blocking until one comes: wait for
    /// [`Context::async_fd`] first) and acknowledges it at once (`ibv_ack_async_event`: rawq
    /// keeps no pointer the event names, so nothing waits on the acknowledgement).
    ///
    /// # Errors
    /// [`Error::Os`] when the read fails (EAGAIN if the fd was made non-blocking and nothing
    /// waits).
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        let mut e = mem::MaybeUninit::<ibv_async_event>::zeroed();
        // SAFETY: the context is open and `e` is a valid output buffer.
        let rc = unsafe { ibv_get_async_event(self.as_raw(), e.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::last_os("ibv_get_async_event"));
        }
        let p = e.as_mut_ptr();
        // SAFETY: ibv_get_async_event filled the event. `event_type` is read as the u32 it is
        // in C (rdma-sys types it as a Rust enum, which a value it does not know would make
        // invalid); `element` as its port number, meaningful for port events only.
        let (ty, port) = unsafe {
            (
                std::ptr::addr_of!((*p).event_type).cast::<u32>().read(),
                std::ptr::addr_of!((*p).element).cast::<i32>().read(),
            )
        };
        // SAFETY: the event came from ibv_get_async_event on this context and is acknowledged
        // once.
        unsafe { ibv_ack_async_event(p) };
        let port_event = [
            ibv_event_type::IBV_EVENT_PORT_ACTIVE as u32,
            ibv_event_type::IBV_EVENT_PORT_ERR as u32,
            ibv_event_type::IBV_EVENT_LID_CHANGE as u32,
            ibv_event_type::IBV_EVENT_PKEY_CHANGE as u32,
            ibv_event_type::IBV_EVENT_SM_CHANGE as u32,
            ibv_event_type::IBV_EVENT_CLIENT_REREGISTER as u32,
            ibv_event_type::IBV_EVENT_GID_CHANGE as u32,
        ]
        .contains(&ty);
        Ok(AsyncEvent {
            event_type: ty,
            port: port_event.then(|| u8::try_from(port).ok()).flatten(),
        })
    }

    /// GID `index` of port `port`.
    ///
    /// # Errors
    /// [`Error::Os`]: EINVAL for an index past the table.
    pub fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16]> {
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: the context is open and `gid` is a valid output buffer.
        let rc = unsafe { ibv_query_gid(self.as_raw(), port, index, &mut gid) };
        if rc != 0 {
            return Err(Error::last_os("ibv_query_gid"));
        }
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        Ok(unsafe { gid.raw })
    }

    /// The MAC address of port `port` of an Ethernet (RoCE) device: read from the netdev the
    /// port is bound to in sysfs, or derived from the port's link-local GID (EUI-64) when sysfs
    /// does not say.
    pub fn port_mac(&self, port: u8) -> Option<[u8; 6]> {
        // The device's own view first: GID 0 of a RoCE port is the link-local GID of its
        // netdev's MAC (Linux drivers/infiniband/core/roce_gid_mgmt.c, the default GID), and a
        // port whose netdev sysfs names poorly (an emulated one) still has it.
        if let Some(mac) = self.query_gid(port, 0).ok().and_then(|g| mac_from_gid(&g)) {
            return Some(mac);
        }
        sysfs_mac(self.name(), port)
    }
}

/// One asynchronous event (`struct ibv_async_event`), already acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// `IBV_EVENT_*` (`enum ibv_event_type` in verbs.h).
    pub event_type: u32,
    /// The port a port event is about (`element.port_num`); `None` for other events.
    pub port: Option<u8>,
}

/// The netdev bound to `dev`'s `port`, from `<sysfs>/class/infiniband/<dev>/ports/<port>/
/// gid_attrs/ndevs/0` (`<sysfs>` as libibverbs finds it: `$SYSFS_PATH` or `/sys`).
pub fn port_netdev(dev: &str, port: u8) -> Option<String> {
    let p = format!(
        "{}/class/infiniband/{dev}/ports/{port}/gid_attrs/ndevs/0",
        crate::counters::sysfs().display()
    );
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// A netdev's MTU (`/sys/class/net/<nd>/mtu`): the Ethernet MTU of a RoCE / raw Ethernet port.
pub fn netdev_mtu(nd: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{nd}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn sysfs_mac(dev: &str, port: u8) -> Option<[u8; 6]> {
    let nd = port_netdev(dev, port)?;
    let s = std::fs::read_to_string(format!("/sys/class/net/{nd}/address")).ok()?;
    parse_mac(s.trim())
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in mac.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The MAC inside a link-local (`fe80::/64`) EUI-64 GID, if it is one: bytes 8..16 are
/// `mac[0]^2, mac[1], mac[2], ff, fe, mac[3], mac[4], mac[5]`.
pub fn mac_from_gid(gid: &[u8; 16]) -> Option<[u8; 6]> {
    let link_local = gid[0] == 0xfe && gid[1] == 0x80 && gid[2..8].iter().all(|&b| b == 0);
    if !link_local || gid[11] != 0xff || gid[12] != 0xfe {
        return None;
    }
    Some([gid[8] ^ 0x02, gid[9], gid[10], gid[13], gid[14], gid[15]])
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trips_through_a_link_local_gid() {
        let gid = [
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            0x02 ^ 0x0c,
            0x42,
            0xa1,
            0xff,
            0xfe,
            0x12,
            0x34,
            0x56,
        ];
        let mac = mac_from_gid(&gid).expect("link-local EUI-64 GID");
        assert_eq!(format_mac(&mac), "0c:42:a1:12:34:56");
        assert_eq!(parse_mac("0c:42:a1:12:34:56"), Some(mac));
        let mut not_ll = gid;
        not_ll[0] = 0x20;
        assert_eq!(mac_from_gid(&not_ll), None);
        assert_eq!(parse_mac("0c:42:a1:12:34"), None);
        assert_eq!(parse_mac("0c:42:a1:12:34:56:78"), None);
        assert_eq!(parse_mac("zz:42:a1:12:34:56"), None);
    }

    #[test]
    fn port_attr_names() {
        let p = PortAttr {
            state: ibv_port_state::IBV_PORT_ACTIVE,
            link_layer: LINK_LAYER_ETHERNET,
            active_mtu: ibv_mtu::IBV_MTU_1024,
            gid_tbl_len: 8,
            ..Default::default()
        };
        assert!(p.is_active());
        assert_eq!(p.link_layer_name(), "Ethernet");
        assert_eq!(p.active_mtu_bytes(), 1024);
    }
}
