//! Device counters: frames the device (not a queue) dropped, read at call time from where the
//! backend keeps them. Control path only: each read is a few sysfs reads or a lock-free load.

use std::path::PathBuf;

/// Frames the device dropped outside the queues' own counters, since the port was opened.
/// `None` where the backend has no such counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DeviceCounters {
    /// Frames dropped because the receive queue had no posted buffer (WQE): mlx5's
    /// `out_of_buffer` hw counter (DPDK's `imissed`), the software device's `rx_no_buffer`.
    pub rx_no_buffer: Option<u64>,
    /// Frames the physical port discarded (mlx5's `rx_discards_phy`, where the device has it).
    pub rx_discards_phy: Option<u64>,
    /// Frames the interface under an AF_XDP port dropped on receive (its netdev `rx_dropped`;
    /// the socket's own `XDP_STATISTICS` drops are in the queues' `rx_drops` already).
    pub rx_dropped: Option<u64>,
    /// Frames the interface under an AF_XDP port missed (its netdev `rx_missed_errors`).
    pub rx_missed: Option<u64>,
}

impl DeviceCounters {
    /// All frames these counters say were lost.
    pub fn total(&self) -> u64 {
        [
            self.rx_no_buffer,
            self.rx_discards_phy,
            self.rx_dropped,
            self.rx_missed,
        ]
        .iter()
        .flatten()
        .sum()
    }

    /// `self - base`, counter by counter (counters only grow; a reset reads as 0).
    pub(crate) fn since(&self, base: &DeviceCounters) -> DeviceCounters {
        let d = |a: Option<u64>, b: Option<u64>| a.map(|a| a.saturating_sub(b.unwrap_or(0)));
        DeviceCounters {
            rx_no_buffer: d(self.rx_no_buffer, base.rx_no_buffer),
            rx_discards_phy: d(self.rx_discards_phy, base.rx_discards_phy),
            rx_dropped: d(self.rx_dropped, base.rx_dropped),
            rx_missed: d(self.rx_missed, base.rx_missed),
        }
    }
}

/// Where a backend's device counters are read from (the backends that keep them in sysfs).
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// An RDMA device's port: `SYSFS/class/infiniband/DEV/ports/N/hw_counters/`.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    Rdma { device: String, port: u8 },
    /// A network interface: `SYSFS/class/net/IF/statistics/`.
    #[cfg_attr(not(feature = "xdp"), allow(dead_code))]
    Netdev { ifname: String },
}

/// The sysfs root libibverbs reads devices from: `$SYSFS_PATH` (trailing slashes dropped) when
/// set and not empty, else `/sys` (rdma-core libibverbs/sysfs.c, `ibv_get_sysfs_path`).
pub(crate) fn sysfs() -> PathBuf {
    std::env::var("SYSFS_PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .map_or_else(
            || PathBuf::from("/sys"),
            |p| PathBuf::from(p.trim_end_matches('/')),
        )
}

fn read_u64(p: PathBuf) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

impl Source {
    /// The counters as they read now (absolute values).
    pub(crate) fn read(&self) -> DeviceCounters {
        match self {
            // As DPDK's mlx5 PMD reads them: drivers/net/mlx5/linux/mlx5_os.c,
            // `mlx5_os_read_dev_stat` reads `<ibdev_path>/ports/<port>/hw_counters/<name>` (or,
            // for `out_of_buffer`, a DevX queue counter when it made one), and `out_of_buffer`
            // is what it reports as `imissed` (mlx5_stats.c, `mlx5_stats_get`).
            Source::Rdma { device, port } => {
                let dir = sysfs()
                    .join("class/infiniband")
                    .join(device)
                    .join(format!("ports/{port}/hw_counters"));
                DeviceCounters {
                    rx_no_buffer: read_u64(dir.join("out_of_buffer")),
                    rx_discards_phy: read_u64(dir.join("rx_discards_phy")),
                    ..Default::default()
                }
            }
            Source::Netdev { ifname } => {
                let dir = sysfs().join("class/net").join(ifname).join("statistics");
                DeviceCounters {
                    rx_dropped: read_u64(dir.join("rx_dropped")),
                    rx_missed: read_u64(dir.join("rx_missed_errors")),
                    ..Default::default()
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_subtracts_and_keeps_absent_counters_absent() {
        let a = DeviceCounters {
            rx_no_buffer: Some(10),
            rx_dropped: Some(3),
            ..Default::default()
        };
        let b = DeviceCounters {
            rx_no_buffer: Some(4),
            ..Default::default()
        };
        let d = a.since(&b);
        assert_eq!(d.rx_no_buffer, Some(6));
        assert_eq!(d.rx_dropped, Some(3));
        assert_eq!(d.rx_missed, None);
        assert_eq!(d.total(), 9);
    }
}
