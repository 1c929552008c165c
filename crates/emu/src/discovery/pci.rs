//! The emulated device's PCI function in the sysfs tree, and its kernel netdev: what DPDK's PCI
//! bus and mlx5 PMD (DPDK 22.11) read before they open the verbs device.
//!
//! * `devices/pci0000:00/ADDR/{vendor,device,subsystem_vendor,subsystem_device,class,numa_node,
//!   resource}` and a `driver` link: DPDK drivers/bus/pci/linux/pci.c `pci_scan_one` (the
//!   directory it lists is `$SYSFS_PCI_DEVICES`, here `$SYSFS_PATH/bus/pci/devices`). The
//!   driver is `mlx5_core`, so the kernel-driver kind is "unknown" and, the mlx5 PMD asking for
//!   no mapping (`RTE_PCI_DRV_NEED_MAPPING` unset), no BAR is ever mapped.
//! * `uevent` with `PCI_SLOT_NAME`: drivers/common/mlx5/linux/mlx5_common_os.c
//!   `mlx5_get_pci_addr` reads `<ibdev_path>/device/uevent` to match a verbs device to the
//!   PCI address on the command line.
//! * `net/NETDEV/dev_port`: mlx5_common_os.c `mlx5_get_ifname_sysfs`, the port's netdev when
//!   NETLINK_RDMA is refused (as the interposer does); port 1's netdev has `dev_port` 0.
//!
//! As in the kernel's sysfs, `class/infiniband/mlx5_N/device` is a link to this directory, so
//! libibverbs' `device/modalias` (rdma-core libibverbs/init.c `match_device`) is read here too.

use std::io;
use std::path::Path;

use crate::caps;
use crate::config::Config;

use super::fs::{link, put};

/// The PCI address of emulated device `id` (`0000:00:05.0`, then `0000:00:06.0`).
pub fn slot(id: caps::Ident) -> String {
    format!("0000:00:{:02x}.0", 5 + id.0)
}

/// The PCI device id: ConnectX-5 (0x1017) or ConnectX-4 Lx (0x1015), as the verbs device's
/// modalias says ([`caps::part`]).
fn device_id(cfg: &Config) -> u16 {
    caps::part(cfg.part, cfg.min_inline).0
}

/// Subsystem device id (the board's; the verbs `modalias` carries the same).
const SUBSYS_DEVICE: u16 = 0x0008;

/// `PCI_CLASS_NETWORK_ETHERNET << 8`.
const CLASS: u32 = 0x02_0000;

/// Writes device `id`'s PCI function (and its netdev's entry) and links
/// `class/infiniband/<ibdev>/device` and `bus/pci/devices/<slot>` to it.
///
/// # Errors
/// Any file or link that cannot be written.
pub fn write_function(root: &Path, cfg: &Config, id: caps::Ident) -> io::Result<()> {
    let addr = slot(id);
    let node = format!("devices/pci0000:00/{addr}");
    let dev = device_id(cfg);
    let hex = |v: u32, w: usize| format!("{v:#0w$x}", w = w + 2);
    put(
        root,
        &format!("{node}/vendor"),
        &hex(caps::PCI_VENDOR.into(), 4),
    )?;
    put(root, &format!("{node}/device"), &hex(dev.into(), 4))?;
    put(
        root,
        &format!("{node}/subsystem_vendor"),
        &hex(caps::PCI_VENDOR.into(), 4),
    )?;
    put(
        root,
        &format!("{node}/subsystem_device"),
        &hex(SUBSYS_DEVICE.into(), 4),
    )?;
    put(root, &format!("{node}/class"), &hex(CLASS, 6))?;
    put(root, &format!("{node}/numa_node"), "0")?;
    put(root, &format!("{node}/local_cpus"), "ffffffff")?;
    // pci.c `pci_parse_sysfs_resource`: "start end flags" per BAR. One 32 MiB 64-bit
    // prefetchable BAR 0, as a ConnectX-5 has; the rest empty. Never mapped (see above).
    let mut res = String::new();
    let base = 0xe000_0000u64 + u64::from(id.0) * 0x0200_0000;
    res.push_str(&format!(
        "{base:#018x} {:#018x} 0x000000000014220c",
        base + 0x01ff_ffff
    ));
    for _ in 1..13 {
        res.push_str("\n0x0000000000000000 0x0000000000000000 0x0000000000000000");
    }
    put(root, &format!("{node}/resource"), &res)?;
    let modalias = format!(
        "pci:v{:08X}d{:08X}sv{:08X}sd{:08X}bc02sc00i00",
        caps::PCI_VENDOR,
        dev,
        caps::PCI_VENDOR,
        SUBSYS_DEVICE
    );
    put(root, &format!("{node}/modalias"), &modalias)?;
    put(
        root,
        &format!("{node}/uevent"),
        &format!(
            "DRIVER=mlx5_core\nPCI_CLASS={CLASS:X}\nPCI_ID={:04X}:{dev:04X}\n\
             PCI_SUBSYS_ID={:04X}:{SUBSYS_DEVICE:04X}\nPCI_SLOT_NAME={addr}\nMODALIAS={modalias}",
            caps::PCI_VENDOR,
            caps::PCI_VENDOR,
        ),
    )?;
    std::fs::create_dir_all(root.join("bus/pci/drivers/mlx5_core"))?;
    link(
        root,
        &format!("{node}/driver"),
        "../../../bus/pci/drivers/mlx5_core",
    )?;
    link(
        root,
        &format!("bus/pci/devices/{addr}"),
        &format!("../../../{node}"),
    )?;
    link(
        root,
        &format!("class/infiniband/{}/device", id.ibdev()),
        &format!("../../../{node}"),
    )?;
    if let Some(netdev) = cfg.netdev_of(id) {
        let net = format!("{node}/net/{netdev}");
        put(root, &format!("{net}/dev_port"), "0")?;
        put(root, &format!("{net}/dev_id"), "0x0")?;
        put(root, &format!("{net}/address"), &mac_text(id.mac()))?;
    }
    Ok(())
}

/// `02:fc:00:00:00:01`, as `/sys/class/net/*/address` prints a MAC.
pub fn mac_text(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}
