//! Receive-side scaling settings of `rss` rules ([`RssConfig`]): the Toeplitz key, the hashed
//! fields and the IP versions spread. Plain configuration, below the port configuration
//! ([`crate::config`] re-exports it) and the backends that carry it out.

use crate::error::{Error, Result};

/// Receive-side scaling: how an `rss` rule's frames are spread over its queues on the verbs, dv
/// and model backends ([`PortConfig::rss`](crate::config::PortConfig::rss), set with
/// [`PortBuilder::rss`](crate::PortBuilder::rss)).
///
/// mlx5 hashes with the Toeplitz function over the fields a hashing QP (TIR) selects. The
/// kernel lets one RSS QP hash one IP version and one transport (Linux
/// drivers/infiniband/hw/mlx5/qp.c `create_rss_raw_qp_tir`: IPv4 and IPv6 fields together,
/// or TCP and UDP ports together, are EINVAL), so verbs and dv give a rule one hashing QP per IP
/// version (and, with [`RssFields::IpPort`] on a rule naming no transport, per TCP / UDP /
/// other), each behind a flow rule narrowed to its traffic, as VPP's rdma plugin does with its
/// rss4 / rss6 QPs (VPP-1939). A frame of a version not spread, or not IP at all, goes to the
/// rule's first queue.
///
/// On AF_XDP there is nothing to configure here: the NIC's own RSS (set with `ethtool -X`, out
/// of rawq's reach) picks the netdev queue, and an `rss` rule keeps a frame that arrives on one
/// of its queues (see `crate::xdp`). This configuration is ignored there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RssConfig {
    /// The 40-byte Toeplitz key (mlx5 takes exactly 40). Default:
    /// [`DEFAULT_KEY`](crate::flow::toeplitz::DEFAULT_KEY), Microsoft's.
    pub key: [u8; 40],
    /// Addresses only, or addresses and TCP/UDP ports.
    pub fields: RssFields,
    /// Which IP versions are spread (default both).
    pub versions: IpVersions,
}

/// The header fields an RSS hash covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RssFields {
    /// Source and destination address.
    Ip,
    /// Addresses, and the source and destination ports of TCP and UDP (the default).
    #[default]
    IpPort,
}

/// The IP versions an RSS rule spreads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IpVersions {
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
    /// Both (the default).
    #[default]
    Both,
}

impl IpVersions {
    /// True if IPv6 (`v6`) or IPv4 (`!v6`) is spread.
    pub fn spreads(self, v6: bool) -> bool {
        matches!(
            (self, v6),
            (IpVersions::Both, _) | (IpVersions::V4, false) | (IpVersions::V6, true)
        )
    }
}

impl Default for RssConfig {
    fn default() -> Self {
        RssConfig {
            key: crate::flow::toeplitz::DEFAULT_KEY,
            fields: RssFields::default(),
            versions: IpVersions::default(),
        }
    }
}

impl RssConfig {
    /// The configuration with the symmetric key
    /// ([`SYMMETRIC_KEY`](crate::flow::toeplitz::SYMMETRIC_KEY)): both directions of a flow
    /// land on one queue.
    pub fn symmetric(mut self) -> Self {
        self.key = crate::flow::toeplitz::SYMMETRIC_KEY;
        self
    }

    /// A key from 80 hex digits (colons, spaces or a `0x` prefix allowed), as `--rss-key` takes
    /// it.
    ///
    /// # Errors
    /// [`Error::Config`] for anything but 40 bytes of hex.
    pub fn parse_key(s: &str) -> Result<[u8; 40]> {
        let t = s.trim();
        let t = t.strip_prefix("0x").unwrap_or(t);
        let digits: Vec<u8> = t
            .bytes()
            .filter(|c| !matches!(c, b':' | b' ' | b'-'))
            .collect();
        let bad = || {
            Error::Config(format!(
                "RSS key {s:?}: give 40 bytes as 80 hex digits (mlx5 takes a 40-byte Toeplitz key)"
            ))
        };
        if digits.len() != 80 {
            return Err(bad());
        }
        let mut key = [0u8; 40];
        for (i, pair) in digits.chunks(2).enumerate() {
            let hex = std::str::from_utf8(pair).map_err(|_| bad())?;
            key[i] = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
        }
        Ok(key)
    }

    /// What the hash covers, in the terms of [`crate::flow::toeplitz::hash_frame`] (to compute
    /// the queue a frame should land on).
    pub fn hash_fields(&self) -> crate::flow::toeplitz::HashFields {
        let ports = self.fields == RssFields::IpPort;
        crate::flow::toeplitz::HashFields {
            ipv4: self.versions.spreads(false),
            ipv6: self.versions.spreads(true),
            tcp: ports,
            udp: ports,
        }
    }
}

impl std::str::FromStr for RssFields {
    type Err = Error;
    /// `ip` or `ip-port`.
    fn from_str(s: &str) -> Result<RssFields> {
        match s.trim() {
            "ip" => Ok(RssFields::Ip),
            "ip-port" => Ok(RssFields::IpPort),
            _ => Err(Error::Config(format!(
                "RSS fields {s:?}: use ip (addresses) or ip-port (addresses and TCP/UDP ports)"
            ))),
        }
    }
}

#[cfg(test)]
mod rss_tests {
    use super::*;

    #[test]
    fn rss_config_parses_keys_and_fields() {
        let hex =
            "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";
        assert_eq!(
            RssConfig::parse_key(hex).unwrap(),
            crate::flow::toeplitz::DEFAULT_KEY
        );
        let colons: String = hex
            .as_bytes()
            .chunks(2)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(
            RssConfig::parse_key(&format!("0x{colons}")).unwrap(),
            crate::flow::toeplitz::DEFAULT_KEY
        );
        for bad in [
            "",
            "6d5a",
            &hex[..78],
            &format!("{hex}00"),
            &hex.replace('6', "g"),
        ] {
            let e = RssConfig::parse_key(bad).unwrap_err().to_string();
            assert!(e.contains("80 hex digits"), "{bad}: {e}");
        }
        assert_eq!("ip".parse::<RssFields>().unwrap(), RssFields::Ip);
        assert_eq!("ip-port".parse::<RssFields>().unwrap(), RssFields::IpPort);
        assert!("ports".parse::<RssFields>().is_err());
        let d = RssConfig::default();
        assert_eq!(d.hash_fields(), crate::flow::toeplitz::HashFields::ALL);
        let s = d.symmetric();
        assert_eq!(s.key, crate::flow::toeplitz::SYMMETRIC_KEY);
        assert!(IpVersions::V6.spreads(true) && !IpVersions::V6.spreads(false));
    }
}
