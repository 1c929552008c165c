//! The fake sysfs tree libibverbs reads when `$SYSFS_PATH` points at it
//! (`libibverbs/sysfs.c: ibv_get_sysfs_path`; `init.c: find_sysfs_devs`, `setup_sysfs_dev`;
//! `cmd_device.c: query_sysfs_gid*` for GIDs once the ioctl path is off).

use std::fs;
use std::io;
use std::path::Path;

use crate::caps;
use crate::config::Config;

fn put(root: &Path, rel: &str, text: &str) -> io::Result<()> {
    let p = root.join(rel);
    if let Some(dir) = p.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&p, format!("{text}\n"))
}

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
    // match_device(): the provider is chosen by modalias against mlx5_hca_table.
    put(
        root,
        &format!("{dev}/device/modalias"),
        &format!(
            "pci:v{:08X}d{:08X}sv{:08X}sd00000008bc02sc00i00",
            caps::PCI_VENDOR,
            caps::part(cfg.min_inline).0,
            caps::PCI_VENDOR
        ),
    )?;
    put(root, &format!("{dev}/device/local_cpus"), "ffffffff")?;
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
                cfg.gid_ndev(),
            )?;
        }
    }
    put(root, &format!("{ports}/link_layer"), "Ethernet")?;
    put(root, &format!("{ports}/state"), "4: ACTIVE")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
