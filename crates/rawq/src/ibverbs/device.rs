//! The RDMA device list: finding and opening a device by name, and describing what is there.

use std::ffi::CStr;
use std::fmt::Write as _;
use std::io;
use std::ptr::NonNull;

use super::ffi::*;

use super::context::{format_mac, netdev_mtu, port_netdev, Context, LINK_LAYER_ETHERNET};
use crate::error::{Error, Result};

/// A snapshot of the RDMA devices (`ibv_get_device_list`), freed on drop.
pub struct DeviceList {
    list: NonNull<*mut ibv_device>,
    len: usize,
}

impl std::fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from `ibv_get_device_list` and is freed once; contexts opened
        // from its entries stay valid after the list is freed (libibverbs refcounts devices).
        unsafe { ibv_free_device_list(self.list.as_ptr()) };
    }
}

impl DeviceList {
    /// Lists the devices.
    ///
    /// # Errors
    /// [`Error::NoDevice`] naming the cause when libibverbs returns no list (ENOSYS: the kernel
    /// has no RDMA support) or an empty one (no RDMA driver bound to any NIC);
    /// [`Error::Permission`] when the uverbs devices may not be read; [`Error::RdmaLibrary`]
    /// when libibverbs cannot be loaded.
    pub fn get() -> Result<DeviceList> {
        // libibverbs is opened here, the first time anything needs it.
        super::ffi::verbs_library()?;
        let mut n: libc::c_int = 0;
        // SAFETY: `n` is a valid output location.
        let list = unsafe { ibv_get_device_list(&mut n) };
        let Some(list) = NonNull::new(list) else {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::ENOSYS) => {
                    Error::os("ibv_get_device_list", e)
                }
                _ => Error::NoDevice {
                    reason: format!("ibv_get_device_list returned no list ({e})"),
                },
            });
        };
        let dl = DeviceList {
            list,
            len: n.max(0) as usize,
        };
        if dl.len == 0 {
            return Err(Error::NoDevice {
                reason: "the RDMA device list is empty (no RDMA driver such as mlx5_ib is bound \
                         to a NIC; /sys/class/infiniband is empty)"
                    .into(),
            });
        }
        Ok(dl)
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the list is empty (never, for a list [`DeviceList::get`] returned).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn entry(&self, i: usize) -> Option<NonNull<ibv_device>> {
        if i >= self.len {
            return None;
        }
        // SAFETY: the list has `len` valid entries followed by a NULL terminator.
        NonNull::new(unsafe { *self.list.as_ptr().add(i) })
    }

    /// The devices' names, in list order.
    pub fn names(&self) -> Vec<String> {
        (0..self.len)
            .filter_map(|i| self.entry(i))
            .map(|d| {
                // SAFETY: `d` is a live device; its name is a NUL-terminated string owned by it.
                let p = unsafe { ibv_get_device_name(d.as_ptr()) };
                if p.is_null() {
                    String::new()
                } else {
                    // SAFETY: non-null NUL-terminated string, valid while the list lives.
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            })
            .collect()
    }

    /// Opens the device called `name`.
    ///
    /// # Errors
    /// [`Error::NotFound`] listing the devices there are; whatever [`Context`] opening reports.
    pub fn open(&self, name: &str) -> Result<Context> {
        let names = self.names();
        match names.iter().position(|n| n == name) {
            Some(i) => {
                let d = self.entry(i).ok_or_else(|| Error::NoDevice {
                    reason: format!("device {name} vanished from the list"),
                })?;
                Context::open_raw(d, name)
            }
            None => Err(Error::NotFound {
                kind: "RDMA device",
                name: name.to_owned(),
                available: if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
            }),
        }
    }
}

/// Opens the device called `name`.
///
/// # Errors
/// See [`DeviceList::get`] and [`DeviceList::open`].
pub fn open(name: &str) -> Result<Context> {
    DeviceList::get()?.open(name)
}

/// A report of every device, its ports and the capabilities rawq uses: `extra` adds a
/// backend's own lines after each device's (`crate::describe_devices` passes the DV ones).
///
/// # Errors
/// [`Error::NoDevice`] (with the cause) when there is no device; a device that cannot be opened
/// or queried is reported inline rather than failing the whole listing.
pub(crate) fn describe_all(extra: &dyn Fn(&Context, &mut String)) -> Result<String> {
    let list = DeviceList::get()?;
    let mut out = String::new();
    for name in list.names() {
        let _ = writeln!(out, "{name}");
        match list.open(&name) {
            Ok(ctx) => describe(&ctx, &mut out, extra),
            Err(e) => {
                let _ = writeln!(out, "  cannot open: {e}");
            }
        }
    }
    Ok(out)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn describe(ctx: &Context, out: &mut String, extra: &dyn Fn(&Context, &mut String)) {
    let attr = match ctx.query_device() {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(out, "  cannot query: {e}");
            return;
        }
    };
    let _ = writeln!(
        out,
        "  firmware {}  vendor 0x{:04x} part {}  ports {}",
        attr.fw_ver, attr.vendor_id, attr.vendor_part_id, attr.phys_port_cnt
    );
    let _ = writeln!(
        out,
        "  max_qp_wr {}  max_sge {}  max_cqe {}  max_wq {}",
        attr.max_qp_wr, attr.max_sge, attr.max_cqe, attr.max_wq_type_rq
    );
    let _ = writeln!(
        out,
        "  flow steering: {}  raw IP checksum: {}  RSS on RAW_PACKET: {} (table up to {}, hash \
         fields 0x{:x})  TSO up to {}",
        yes(attr.flow_steering()),
        yes(attr.raw_ip_csum()),
        yes(attr.rss_raw_packet()),
        attr.max_rwq_indirection_table_size,
        attr.rx_hash_fields_mask,
        attr.max_tso
    );
    extra(ctx, out);
    for port in 1..=attr.phys_port_cnt {
        match ctx.query_port(port) {
            Ok(p) => {
                let mac = ctx
                    .port_mac(port)
                    .map(|m| format_mac(&m))
                    .unwrap_or_else(|| "unknown".into());
                let raw = p.link_layer == LINK_LAYER_ETHERNET;
                let netdev = port_netdev(ctx.name(), port);
                // An Ethernet port's MTU is its netdev's; `active_mtu` is the RoCE (InfiniBand)
                // MTU, 1024 for a 1500-byte netdev.
                let mtu = match (raw, netdev.as_deref().and_then(netdev_mtu)) {
                    (true, Some(m)) => m.to_string(),
                    (true, None) => {
                        format!("unknown (no netdev; RoCE MTU {})", p.active_mtu_bytes())
                    }
                    (false, _) => p.active_mtu_bytes().to_string(),
                };
                let _ = writeln!(
                    out,
                    "  port {port}: {}  link layer {}  MAC {mac}  MTU {mtu}  netdev {}  RAW_PACKET: {}",
                    if p.is_active() { "active" } else { "down" },
                    p.link_layer_name(),
                    netdev.as_deref().unwrap_or("-"),
                    yes(raw),
                );
            }
            Err(e) => {
                let _ = writeln!(out, "  port {port}: cannot query: {e}");
            }
        }
    }
}
