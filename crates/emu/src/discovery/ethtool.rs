//! The ethtool statistics of the port's netdev (`ethtool -S`, `SIOCETHTOOL`), as the mlx5e
//! driver names them (Linux drivers/net/ethernet/mellanox/mlx5/core/en_stats.c).
//!
//! On a ConnectX, everything but the RDMA queue counter `out_of_buffer` ([`super::counters`])
//! is read from the netdev: DPDK's mlx5 PMD takes its xstats from `ETHTOOL_GDRVINFO`
//! (`n_stats`), `ETHTOOL_GSTRINGS` and `ETHTOOL_GSTATS` on it (drivers/net/mlx5/linux/
//! mlx5_ethdev_os.c, `mlx5_os_get_stats_n` and `mlx5_os_read_dev_counters`), and rawq does
//! the same (`rawq::counters`). The interposer answers those three requests, and
//! `ETHTOOL_GSSET_INFO` (what `ethtool -S` asks first), for the interface the emulated port
//! names as its netdev (`gid_attrs/ndevs/0`: the TAP of `--netdev`, else the `--wire`
//! interface, else `lo`); every other request, and every other interface, goes to the kernel
//! ([`crate::interpose::rawq_emu_ethtool`]).
//!
//! Where the emulator's drops land, and why:
//! - A frame the port's receive side cannot take in at all (the wire in front of it, the
//!   device model's bounded inbox, is full: the device thread is behind) is
//!   **`rx_discards_phy`**: on a ConnectX, a frame the port received but had no room for in its
//!   own receive buffer, before any steering or queue saw it (the adapter congested). On the
//!   looped-back port that is the port's own `wire_drops`; on a `--pair`, the other device's
//!   (its frames are the ones this port could not take).
//! - A frame steered to a receive queue with no posted WQE is the RDMA queue counter
//!   `out_of_buffer` (`hw_counters`), not an ethtool counter; `rx_out_of_buffer` counts the
//!   kernel netdev's own queues, and the emulated netdev (a TAP write) drops none: it is 0.
//! - On an outside wire (`--wire`), a frame the kernel dropped at the port's `AF_PACKET`
//!   socket because the device had not read the ones before it (the socket's receive queue
//!   full; the kernel's `PACKET_STATISTICS`, the model's `wire_rx_drops`) is
//!   **`rx_discards_phy`** too: it reached the port and found no room.
//! - A frame the outside wire refuses on the way out (`--wire`: the `AF_PACKET` socket full;
//!   `--cable`: the other process's socket full or gone) is **`tx_discards_phy`**: a frame the
//!   port discarded on transmit with no error in it (the link down, congestion). The receiving
//!   side is another process or the kernel, which this port cannot count for.
//! - Runts and frames above the port's MTU are `rx_undersize_pkts_phy` and
//!   `rx_oversize_pkts_phy`, as the device model already names them.

use rawq_model::ModelCounters;

/// How a device's wire is laid, for what its counters mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wiring {
    /// Its frames come from an in-process wire whose drops are this port's receive discards
    /// (looped back, or a `--pair`'s other device).
    InProcess,
    /// Its frames go out to the kernel (`--wire`) or another process (`--cable`): a frame
    /// that wire refuses is this port's transmit discard.
    Outside,
}

/// The counters, by name, in the order `ethtool -S` lists them, for a port whose model counts
/// `own`, whose in-process feeding wire's model counts `feeder` (itself when looped back, the
/// other device of a pair), wired as `wiring`.
pub fn values(
    own: &ModelCounters,
    feeder: Option<&ModelCounters>,
    wiring: Wiring,
) -> Vec<(&'static str, u64)> {
    let (rx_discards, tx_discards) = match wiring {
        Wiring::InProcess => (feeder.map_or(0, |f| f.wire_drops), 0),
        // What the outside wire's socket dropped before the device read it: frames that
        // reached the port and found no room (`wire_rx_drops`, the kernel's count).
        Wiring::Outside => (own.wire_rx_drops, own.wire_drops),
    };
    vec![
        ("rx_out_of_buffer", 0),
        ("tx_packets_phy", own.tx_frames.saturating_sub(tx_discards)),
        ("rx_crc_errors_phy", 0),
        ("rx_in_range_len_errors_phy", 0),
        ("rx_undersize_pkts_phy", own.rx_runt),
        ("rx_oversize_pkts_phy", own.rx_oversize),
        ("tx_errors_phy", 0),
        ("rx_discards_phy", rx_discards),
        ("tx_discards_phy", tx_discards),
    ]
}

/// How many counters [`values`] gives (the `n_stats` of the netdev).
pub fn count() -> usize {
    values(&ModelCounters::default(), None, Wiring::InProcess).len()
}

/// `ETH_GSTRING_LEN`.
pub const GSTRING_LEN: usize = 32;

/// The names as `ETHTOOL_GSTRINGS` lays them out: 32 bytes each, NUL-padded.
pub fn strings() -> Vec<u8> {
    let mut out = Vec::new();
    for (name, _) in values(&ModelCounters::default(), None, Wiring::InProcess) {
        let mut s = [0u8; GSTRING_LEN];
        s[..name.len()].copy_from_slice(name.as_bytes());
        out.extend_from_slice(&s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(wire_drops: u64, tx_frames: u64) -> ModelCounters {
        ModelCounters {
            wire_drops,
            tx_frames,
            rx_no_buffer: 9,
            ..Default::default()
        }
    }

    fn get(v: &[(&str, u64)], k: &str) -> u64 {
        v.iter().find(|(n, _)| *n == k).unwrap().1
    }

    #[test]
    fn a_full_inbox_is_the_receiving_ports_discard() {
        let own = counters(5, 100);
        let v = values(&own, Some(&own), Wiring::InProcess);
        assert_eq!(get(&v, "rx_discards_phy"), 5);
        assert_eq!(get(&v, "tx_discards_phy"), 0);
        assert_eq!(get(&v, "tx_packets_phy"), 100, "they left the port");
        // A pair: the other device's wire drops are this port's.
        let other = counters(7, 0);
        let v = values(&own, Some(&other), Wiring::InProcess);
        assert_eq!(get(&v, "rx_discards_phy"), 7);
        // The no-buffer drops are hw_counters/out_of_buffer, never here too.
        assert_eq!(get(&v, "rx_out_of_buffer"), 0);
    }

    #[test]
    fn an_outside_wire_refusing_is_a_transmit_discard() {
        let own = counters(5, 100);
        let v = values(&own, None, Wiring::Outside);
        assert_eq!(get(&v, "rx_discards_phy"), 0);
        // What the kernel dropped at the wire's socket before the device read it.
        let late = ModelCounters {
            wire_rx_drops: 3,
            ..counters(5, 100)
        };
        let v = values(&late, None, Wiring::Outside);
        assert_eq!(get(&v, "rx_discards_phy"), 3);
        assert_eq!(get(&v, "tx_discards_phy"), 5);
        assert_eq!(get(&v, "tx_packets_phy"), 95);
    }

    #[test]
    fn strings_are_padded_names() {
        let s = strings();
        assert_eq!(s.len(), count() * GSTRING_LEN);
        assert!(s.starts_with(b"rx_out_of_buffer\0"));
        let names: Vec<&str> = s
            .chunks(GSTRING_LEN)
            .map(|c| std::str::from_utf8(&c[..c.iter().position(|&b| b == 0).unwrap()]).unwrap())
            .collect();
        assert!(names.contains(&"rx_discards_phy"));
        assert!(names.iter().all(|n| n.len() < GSTRING_LEN));
    }
}
