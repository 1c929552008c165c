//! The fake sysfs tree libibverbs reads when `$SYSFS_PATH` points at it
//! (`libibverbs/sysfs.c: ibv_get_sysfs_path`; `init.c: find_sysfs_devs`, `setup_sysfs_dev`;
//! `cmd_device.c: query_sysfs_gid*` for GIDs once the ioctl path is off), with the PCI
//! function behind each device ([`super::pci`]) and its port's counters ([`super::counters`]).

use std::io;
use std::path::Path;

use crate::caps;
use crate::config::Config;

use super::fs::put;

/// Writes the tree for the configured devices (`mlx5_0` behind `uverbs0`, and `mlx5_1` behind
/// `uverbs1` for a cabled pair) under `root`.
///
/// # Errors
/// Any file that cannot be written.
pub fn write_tree(root: &Path, cfg: &Config) -> io::Result<()> {
    for i in 0..cfg.devices() {
        write_device(root, cfg, caps::Ident(i))?;
    }
    Ok(())
}

fn write_device(root: &Path, cfg: &Config, id: caps::Ident) -> io::Result<()> {
    let verbs = "class/infiniband_verbs";
    let uv = format!("{verbs}/{}", id.uverbs());
    let dev = format!("class/infiniband/{}", id.ibdev());
    // init.c: the ABI of the uverbs class (3..=6 accepted) and of the driver
    // (MLX5_UVERBS_MIN/MAX_ABI_VERSION = 1).
    put(
        root,
        &format!("{verbs}/abi_version"),
        &caps::UVERBS_ABI.to_string(),
    )?;
    put(root, &format!("{uv}/ibdev"), &id.ibdev())?;
    put(
        root,
        &format!("{uv}/dev"),
        &format!("{}:{}", caps::UVERBS_MAJOR, id.minor()),
    )?;
    put(
        root,
        &format!("{uv}/abi_version"),
        &caps::MLX5_ABI.to_string(),
    )?;
    // Node type 1 = CA; GUIDs as the kernel's sysfs prints them.
    put(root, &format!("{dev}/node_type"), "1: CA")?;
    put(
        root,
        &format!("{dev}/node_guid"),
        &caps::guid_text(id.node_guid()),
    )?;
    put(
        root,
        &format!("{dev}/sys_image_guid"),
        &caps::guid_text(id.node_guid()),
    )?;
    put(root, &format!("{dev}/board_id"), caps::BOARD_ID)?;
    let (a, b, c) = caps::FW;
    put(root, &format!("{dev}/fw_ver"), &format!("{a}.{b}.{c}"))?;
    // `device` links to the PCI function, which has the modalias match_device() chooses the
    // provider by (against mlx5_hca_table), the PCI slot and the netdev.
    super::pci::write_function(root, cfg, id)?;
    // GIDs 0 (RoCE v1) and 1 (RoCE v2): the link-local GID of the port's MAC; the rest empty.
    let gid = caps::link_local_gid(id.port_mac(cfg.netdev.as_deref(), cfg.wire.as_deref()));
    let ports = format!("{dev}/ports/1");
    for i in 0..caps::port::GID_TBL_LEN {
        let (g, ty) = match i {
            0 => (gid.as_str(), Some("IB/RoCE v1")),
            1 => (gid.as_str(), Some("RoCE v2")),
            _ => ("0000:0000:0000:0000:0000:0000:0000:0000", None),
        };
        put(root, &format!("{ports}/gids/{i}"), g)?;
        if let Some(ty) = ty {
            put(root, &format!("{ports}/gid_attrs/types/{i}"), ty)?;
            put(
                root,
                &format!("{ports}/gid_attrs/ndevs/{i}"),
                cfg.gid_ndev(id),
            )?;
        }
    }
    put(root, &format!("{ports}/link_layer"), "Ethernet")?;
    put(root, &format!("{ports}/state"), "4: ACTIVE")?;
    // Served live by the interposer; 0 here for a reader without it.
    for name in super::counters::NAMES {
        put(root, &super::counters::rel_path(&id.ibdev(), 1, name), "0")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn tree_has_what_libibverbs_reads() {
        let dir = std::env::temp_dir().join(format!("rawq-emu-sysfs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        write_tree(&dir, &Config::default()).unwrap();
        let rd = |p: &str| fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(rd("class/infiniband_verbs/uverbs0/ibdev"), "mlx5_0\n");
        assert_eq!(rd("class/infiniband_verbs/uverbs0/dev"), "231:192\n");
        assert!(rd("class/infiniband/mlx5_0/device/modalias").starts_with("pci:v000015B3d00001017"));
        assert_eq!(
            rd("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0"),
            "lo\n"
        );
        assert!(!dir.join("class/infiniband/mlx5_1").exists());
        let pair = Config {
            pair: true,
            ..Config::default()
        };
        write_tree(&dir, &pair).unwrap();
        assert_eq!(rd("class/infiniband_verbs/uverbs1/dev"), "231:193\n");
        assert_eq!(
            rd("class/infiniband/mlx5_1/node_guid"),
            "0c42:a103:00fc:0002\n"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// What DPDK's PCI bus and mlx5 PMD read (see [`super::super::pci`]), for both devices of
    /// a pair, each with its own netdev.
    #[test]
    fn tree_has_what_dpdk_reads() {
        let dir = std::env::temp_dir().join(format!("rawq-emu-sysfs-dpdk-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let cfg = Config {
            pair: true,
            netdev: Some("tapa".into()),
            netdev1: Some("tapb".into()),
            ..Config::default()
        };
        write_tree(&dir, &cfg).unwrap();
        // Written twice (links replaced, not refused).
        write_tree(&dir, &cfg).unwrap();
        let rd = |p: &str| fs::read_to_string(dir.join(p)).unwrap();
        // pci.c pci_scan_one, through $SYSFS_PCI_DEVICES.
        let pci = "bus/pci/devices/0000:00:05.0";
        assert_eq!(rd(&format!("{pci}/vendor")), "0x15b3\n");
        assert_eq!(rd(&format!("{pci}/device")), "0x1017\n");
        assert_eq!(rd(&format!("{pci}/subsystem_vendor")), "0x15b3\n");
        assert_eq!(rd(&format!("{pci}/class")), "0x020000\n");
        let res = rd(&format!("{pci}/resource"));
        assert!(
            res.starts_with("0x00000000e0000000 0x00000000e1ffffff 0x"),
            "{res}"
        );
        assert_eq!(res.lines().count(), 13);
        let drv = fs::read_link(dir.join(format!("{pci}/driver"))).unwrap();
        assert_eq!(drv.file_name().unwrap(), "mlx5_core");
        assert!(dir.join(format!("{pci}/driver")).is_dir());
        // The verbs device's `device` is that PCI function (mlx5_common_os.c mlx5_get_pci_addr).
        let ue = rd("class/infiniband/mlx5_0/device/uevent");
        assert!(
            ue.lines().any(|l| l == "PCI_SLOT_NAME=0000:00:05.0"),
            "{ue}"
        );
        assert!(rd("class/infiniband/mlx5_0/device/modalias").starts_with("pci:v000015B3d00001017"));
        let ue1 = rd("class/infiniband/mlx5_1/device/uevent");
        assert!(
            ue1.lines().any(|l| l == "PCI_SLOT_NAME=0000:00:06.0"),
            "{ue1}"
        );
        // mlx5_get_ifname_sysfs: each device's own netdev, dev_port 0 for port 1.
        assert_eq!(
            rd("class/infiniband/mlx5_0/device/net/tapa/dev_port"),
            "0\n"
        );
        assert_eq!(
            rd("class/infiniband/mlx5_1/device/net/tapb/dev_port"),
            "0\n"
        );
        assert!(!dir.join("class/infiniband/mlx5_1/device/net/tapa").exists());
        assert_eq!(
            rd("class/infiniband/mlx5_1/device/net/tapb/address"),
            "02:fc:00:00:00:02\n"
        );
        assert_eq!(
            rd("class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/0"),
            "tapb\n"
        );
        // mlx5_os_read_dev_stat: the counter files exist (their values are served live).
        assert_eq!(
            rd("class/infiniband/mlx5_1/ports/1/hw_counters/out_of_buffer"),
            "0\n"
        );
        fs::remove_dir_all(&dir).unwrap();

        // ConnectX-4 Lx with the L2 inline minimum: the PCI device id follows the part.
        let lx = Config {
            min_inline: crate::config::MinInline::L2,
            ..Config::default()
        };
        write_tree(&dir, &lx).unwrap();
        assert_eq!(rd("bus/pci/devices/0000:00:05.0/device"), "0x1015\n");
        // No netdev configured: no net/ entry (the PMD then says it found none).
        assert!(!dir.join("class/infiniband/mlx5_0/device/net").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
