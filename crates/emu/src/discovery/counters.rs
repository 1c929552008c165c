//! The port's hardware counters, `class/infiniband/mlx5_N/ports/1/hw_counters/NAME`.
//!
//! The kernel's mlx5_ib exposes its queue counters there (Linux
//! drivers/infiniband/hw/mlx5/counters.c: `basic_q_cnts` and, with the `out_of_seq_cnt`
//! capability, `out_of_sequence`), each file read at open time from the device. DPDK's mlx5
//! PMD reports `out_of_buffer` (frames the port dropped because the receive queue had no WQE)
//! as the port's `imissed`, "RX-missed" in testpmd (DPDK drivers/net/mlx5/linux/mlx5_os.c
//! `mlx5_os_read_dev_stat`, called by mlx5_stats.c `mlx5_stats_get`, opens the file and reads
//! it once).
//!
//! The tree holds the files (so that they list and read without the interposer); the
//! interposer answers an open of one of them with a file holding the model's value at that
//! moment ([`crate::interpose::rawq_emu_open_counter`]). The model runs no RDMA transport, so
//! every counter but `out_of_buffer` is truly 0.

/// The counters of the port, as mlx5_ib names them.
pub const NAMES: [&str; 5] = [
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "out_of_buffer",
    "out_of_sequence",
];

/// The value of counter `name` given the model's count of frames dropped for lack of a receive
/// WQE; `None` if the port has no such counter.
pub fn value(name: &str, no_buffer_drops: u64) -> Option<u64> {
    match name {
        "out_of_buffer" => Some(no_buffer_drops),
        n if NAMES.contains(&n) => Some(0),
        _ => None,
    }
}

/// The sysfs path of a counter, relative to the tree's root.
pub fn rel_path(ibdev: &str, port: u8, name: &str) -> String {
    format!("class/infiniband/{ibdev}/ports/{port}/hw_counters/{name}")
}

/// Which counter `path` names, if it is one under the tree at `root` (`$SYSFS_PATH`):
/// (device index, port, counter name). Repeated slashes are tolerated, as the kernel's path
/// walk does (libibverbs joins `$SYSFS_PATH` with "/class/infiniband/...").
pub fn parse_path<'a>(root: &str, path: &'a str) -> Option<(u32, u8, &'a str)> {
    let root = root.trim_end_matches('/');
    if root.is_empty() {
        return None;
    }
    let rest = path.strip_prefix(root)?;
    if !rest.starts_with('/') {
        return None;
    }
    let mut parts = rest.split('/').filter(|p| !p.is_empty());
    let want = |p: Option<&str>, w: &str| p == Some(w);
    if !want(parts.next(), "class") || !want(parts.next(), "infiniband") {
        return None;
    }
    let dev: u32 = parse_index(parts.next()?.strip_prefix("mlx5_")?)?;
    if !want(parts.next(), "ports") {
        return None;
    }
    let port: u8 = parse_index(parts.next()?)?.try_into().ok()?;
    if !want(parts.next(), "hw_counters") {
        return None;
    }
    let name = parts.next()?;
    if parts.next().is_some() || value(name, 0).is_none() {
        return None;
    }
    Some((dev, port, name))
}

/// A decimal index without a sign or leading zeros.
fn parse_index(s: &str) -> Option<u32> {
    if s.is_empty() || (s.len() > 1 && s.starts_with('0')) || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_buffer_is_the_no_buffer_drops() {
        assert_eq!(value("out_of_buffer", 17), Some(17));
        assert_eq!(value("rx_read_requests", 17), Some(0));
        assert_eq!(value("rx_vport_unicast_packets", 17), None);
    }

    #[test]
    fn counter_paths() {
        let root = "/tmp/rawq-emu.X/sys";
        assert_eq!(
            parse_path(
                root,
                "/tmp/rawq-emu.X/sys/class/infiniband/mlx5_1/ports/1/hw_counters/out_of_buffer"
            ),
            Some((1, 1, "out_of_buffer"))
        );
        // libibverbs' ibdev_path joins with a slash after a root that may end in one.
        assert_eq!(
            parse_path(
                "/s/",
                "/s//class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer"
            ),
            Some((0, 1, "out_of_buffer"))
        );
        for p in [
            "/tmp/rawq-emu.X/sysx/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer",
            "/tmp/other/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer",
            "/tmp/rawq-emu.X/sys/class/infiniband/mlx5_00/ports/1/hw_counters/out_of_buffer",
            "/tmp/rawq-emu.X/sys/class/infiniband/mlx5_0/ports/1/hw_counters/nope",
            "/tmp/rawq-emu.X/sys/class/infiniband/mlx5_0/ports/1/hw_counters",
            "/tmp/rawq-emu.X/sys/class/infiniband/mlx5_0/ports/1/counters/out_of_buffer",
            "/tmp/rawq-emu.X/sys/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer/x",
            "/tmp/rawq-emu.X/sys/class/infiniband/ib_0/ports/1/hw_counters/out_of_buffer",
        ] {
            assert_eq!(parse_path(root, p), None, "{p}");
        }
        assert_eq!(
            parse_path(
                "",
                "/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer"
            ),
            None
        );
    }
}
