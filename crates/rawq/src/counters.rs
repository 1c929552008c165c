//! Device counters: frames the device (not a queue) dropped, read at call time from where the
//! backend keeps them, as the vendor exposes them. Control path only: each read is a few sysfs
//! reads and ioctls, or a lock-free load.
//!
//! On an mlx5 port (`-b dv`, `-b verbs`) the counters live in two places, read as DPDK's mlx5
//! PMD reads its xstats (drivers/net/mlx5/linux/mlx5_ethdev_os.c: `mlx5_os_get_stats_n`,
//! `mlx5_os_stats_init`, `mlx5_os_read_dev_counters`):
//! - `out_of_buffer` is an RDMA queue counter, in the verbs device's
//!   `ports/N/hw_counters/` (the counter set the raw packet queues of a verbs user count into);
//! - everything else is an ethtool statistic of the port's netdev (the mlx5e driver's
//!   `ethtool -S`, read with `SIOCETHTOOL`): the physical port's and the vport's counters
//!   (`rx_discards_phy`, `rx_packets_phy`, `rx_vport_unicast_packets`, ...) and the netdev's own
//!   queue counter `rx_out_of_buffer`. The netdev is the one the port's GID table names
//!   (`ports/N/gid_attrs/ndevs/0`).

use std::path::PathBuf;

/// Frames the device dropped outside the queues' own counters, since the port was opened.
/// `None` where the backend has no such counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct DeviceCounters {
    /// Frames dropped because the receive queue had no posted buffer (WQE): mlx5's
    /// `out_of_buffer` hw counter (DPDK's `imissed`), the software device's `rx_no_buffer`.
    pub rx_no_buffer: Option<u64>,
    /// Frames the physical port received and discarded for want of room in its own receive
    /// buffer, before any queue saw them (mlx5e's `rx_discards_phy` ethtool counter: the adapter
    /// was congested and could not absorb the traffic).
    pub rx_discards_phy: Option<u64>,
    /// Frames the physical port discarded on transmit although they had no error (mlx5e's
    /// `tx_discards_phy`: the link down, head-of-line drops, pause from the network).
    pub tx_discards_phy: Option<u64>,
    /// Frames the port's kernel netdev dropped because one of *its own* receive queues had no
    /// buffer (mlx5e's `rx_out_of_buffer`, the netdev's queue counter). Not rawq's queues: those
    /// count into `rx_no_buffer`; so this is not among [`DeviceCounters::total`].
    pub rx_out_of_buffer: Option<u64>,
    /// Frames the interface under an AF_XDP port dropped on receive (its netdev `rx_dropped`;
    /// the socket's own `XDP_STATISTICS` drops are in the queues' `rx_drops` already).
    pub rx_dropped: Option<u64>,
    /// Frames the interface under an AF_XDP port missed (its netdev `rx_missed_errors`).
    pub rx_missed: Option<u64>,
    /// The port's traffic and error counters (mlx5e's vport and physical port counters), where
    /// the backend has them.
    pub port: PortCounters,
}

/// Declares [`PortCounters`]: one `Option<u64>` field per mlx5e ethtool counter, named as
/// the driver names it.
macro_rules! port_counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// The traffic and error counters of an mlx5 port's netdev that DPDK's mlx5 PMD reports
        /// as xstats, under the names the mlx5e driver gives them in `ethtool -S` (Linux
        /// drivers/net/ethernet/mellanox/mlx5/core/en_stats.c). `None` where the netdev has no
        /// such counter. The `vport` counters count what this function's vport sent and
        /// received (the traffic of the host, every queue's), the `phy` counters what crossed
        /// the physical port.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[non_exhaustive]
        pub struct PortCounters {
            $($(#[$doc])* pub $name: Option<u64>,)*
        }

        impl PortCounters {
            /// The counters' names, as mlx5e names them.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// (name, value) of every counter, in [`PortCounters::NAMES`] order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, Option<u64>)> {
                [$((stringify!($name), self.$name)),*].into_iter()
            }

            fn set(&mut self, name: &str, v: u64) {
                match name {
                    $(stringify!($name) => self.$name = Some(v),)*
                    _ => {}
                }
            }

            fn since(&self, base: &PortCounters) -> PortCounters {
                PortCounters {
                    $($name: since(self.$name, base.$name),)*
                }
            }
        }
    };
}

port_counters! {
    /// Unicast frames the vport received (`rx_vport_unicast_packets`).
    rx_vport_unicast_packets,
    /// Their bytes.
    rx_vport_unicast_bytes,
    /// Multicast frames the vport received.
    rx_vport_multicast_packets,
    /// Their bytes.
    rx_vport_multicast_bytes,
    /// Broadcast frames the vport received.
    rx_vport_broadcast_packets,
    /// Their bytes.
    rx_vport_broadcast_bytes,
    /// Unicast frames the vport sent.
    tx_vport_unicast_packets,
    /// Their bytes.
    tx_vport_unicast_bytes,
    /// Multicast frames the vport sent.
    tx_vport_multicast_packets,
    /// Their bytes.
    tx_vport_multicast_bytes,
    /// Broadcast frames the vport sent.
    tx_vport_broadcast_packets,
    /// Their bytes.
    tx_vport_broadcast_bytes,
    /// Frames the physical port received (good ones; its discards included).
    rx_packets_phy,
    /// Their bytes.
    rx_bytes_phy,
    /// Frames the physical port sent.
    tx_packets_phy,
    /// Their bytes.
    tx_bytes_phy,
    /// Frames received with a bad frame check sequence.
    rx_crc_errors_phy,
    /// Frames received whose length field did not match their length.
    rx_in_range_len_errors_phy,
    /// Symbol errors on the physical port.
    rx_symbol_err_phy,
    /// Frames the physical port failed to send.
    tx_errors_phy,
    /// Frames the netdev's receive queues saw with a bad WQE.
    rx_wqe_err,
}

/// `a - b` for a counter that only grows (`None` stays `None`; a reset reads as 0).
fn since(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.map(|a| a.saturating_sub(b.unwrap_or(0)))
}

impl DeviceCounters {
    /// All frames these counters say were lost (not `rx_out_of_buffer`, which counts the
    /// kernel netdev's queues, nor the error counters of [`PortCounters`]).
    pub fn total(&self) -> u64 {
        [
            self.rx_no_buffer,
            self.rx_discards_phy,
            self.tx_discards_phy,
            self.rx_dropped,
            self.rx_missed,
        ]
        .iter()
        .flatten()
        .sum()
    }

    /// `self - base`, counter by counter (counters only grow; a reset reads as 0).
    pub(crate) fn since(&self, base: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            rx_no_buffer: since(self.rx_no_buffer, base.rx_no_buffer),
            rx_discards_phy: since(self.rx_discards_phy, base.rx_discards_phy),
            tx_discards_phy: since(self.tx_discards_phy, base.tx_discards_phy),
            rx_out_of_buffer: since(self.rx_out_of_buffer, base.rx_out_of_buffer),
            rx_dropped: since(self.rx_dropped, base.rx_dropped),
            rx_missed: since(self.rx_missed, base.rx_missed),
            port: self.port.since(&base.port),
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

fn read_line(p: PathBuf) -> Option<String> {
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

impl DeviceCounters {
    /// Takes the mlx5e counters from the ethtool statistics of netdev `ifname` (left `None`
    /// where it has none, or no such netdev).
    fn read_ethtool(&mut self, ifname: &str) {
        match crate::sys::ethtool::stats(ifname) {
            Ok(all) => self.take_ethtool(&all),
            Err(e) => log::debug!("no ethtool statistics for {ifname}: {e}"),
        }
    }

    /// Takes the mlx5e counters out of (name, value) pairs.
    fn take_ethtool(&mut self, all: &[(String, u64)]) {
        for (name, v) in all {
            match name.as_str() {
                "rx_discards_phy" => self.rx_discards_phy = Some(*v),
                "tx_discards_phy" => self.tx_discards_phy = Some(*v),
                "rx_out_of_buffer" => self.rx_out_of_buffer = Some(*v),
                n => self.port.set(n, *v),
            }
        }
    }
}

impl Source {
    /// The counters as they read now (absolute values).
    pub(crate) fn read(&self) -> DeviceCounters {
        match self {
            // As DPDK's mlx5 PMD reads them: drivers/net/mlx5/linux/mlx5_os.c,
            // `mlx5_os_read_dev_stat` reads `<ibdev_path>/ports/<port>/hw_counters/<name>` (or,
            // for `out_of_buffer`, a DevX queue counter when it made one), and `out_of_buffer`
            // is what it reports as `imissed` (mlx5_stats.c, `mlx5_stats_get`); the rest are
            // the port netdev's ethtool statistics (mlx5_ethdev_os.c,
            // `mlx5_os_read_dev_counters`).
            Source::Rdma { device, port } => {
                let port_dir = sysfs()
                    .join("class/infiniband")
                    .join(device)
                    .join(format!("ports/{port}"));
                let mut c = DeviceCounters {
                    rx_no_buffer: read_u64(port_dir.join("hw_counters/out_of_buffer")),
                    ..Default::default()
                };
                if let Some(nd) = read_line(port_dir.join("gid_attrs/ndevs/0")) {
                    c.read_ethtool(&nd);
                }
                c
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

    #[test]
    fn ethtool_names_land_in_their_fields() {
        let mut c = DeviceCounters::default();
        let pairs: Vec<(String, u64)> = [
            ("rx_packets", 1),
            ("rx_discards_phy", 7),
            ("tx_discards_phy", 2),
            ("rx_out_of_buffer", 5),
            ("rx_packets_phy", 40),
            ("tx_vport_unicast_packets", 30),
        ]
        .iter()
        .map(|&(n, v)| (n.to_owned(), v))
        .collect();
        c.take_ethtool(&pairs);
        assert_eq!(c.rx_discards_phy, Some(7));
        assert_eq!(c.tx_discards_phy, Some(2));
        assert_eq!(c.rx_out_of_buffer, Some(5));
        assert_eq!(c.port.rx_packets_phy, Some(40));
        assert_eq!(c.port.tx_vport_unicast_packets, Some(30));
        assert_eq!(c.port.rx_crc_errors_phy, None);
        // The netdev's own queues' drops are not rawq's: not in the total.
        assert_eq!(c.total(), 9);
        let base = c;
        c.take_ethtool(&[("rx_packets_phy".to_owned(), 45)]);
        let d = c.since(&base);
        assert_eq!(d.port.rx_packets_phy, Some(5));
        assert_eq!(d.rx_discards_phy, Some(0));
        assert!(PortCounters::NAMES.contains(&"rx_crc_errors_phy"));
        for n in ["rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer"] {
            assert!(
                !PortCounters::NAMES.contains(&n),
                "{n} is a field of its own"
            );
        }
    }
}
