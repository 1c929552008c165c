//! How to build a pool: sizes, huge-page policy, cache size, and their checks.

use super::BUF_HEADER;
use crate::error::{Error, Result};

/// Whether to put the region on huge pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Use 2 MiB huge pages when the system has enough reserved, plain pages otherwise (default).
    #[default]
    Try,
    /// Fail unless 2 MiB huge pages can be had.
    Require,
    /// Use plain anonymous pages.
    Never,
}

/// What the region ended up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// 2 MiB huge pages (`MAP_HUGETLB`).
    HugePages2M,
    /// Plain anonymous 4 KiB pages.
    Anonymous,
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemoryKind::HugePages2M => "2 MiB huge pages",
            MemoryKind::Anonymous => "anonymous 4 KiB pages (no huge pages reserved)",
        })
    }
}

/// How to build a [`Mempool`](super::Mempool).
#[derive(Clone, Debug)]
pub struct MempoolConfig {
    /// Number of buffers.
    pub buffers: u32,
    /// Size of each buffer in bytes, including headroom. A power of two from 512 to 65536
    /// (AF_XDP needs 2048 or 4096). Default 2048.
    pub buf_size: u32,
    /// Bytes reserved in front of the packet data (for prepending headers). Includes the
    /// [`BUF_HEADER`] bytes rawq keeps for itself. Default 128.
    pub headroom: u16,
    /// Huge-page policy. Default [`HugePages::Try`].
    pub huge_pages: HugePages,
    /// Indices moved between a cache and the shared stack at once. Default 64.
    pub cache_size: u32,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig {
            buffers: 4096,
            buf_size: 2048,
            headroom: 128,
            huge_pages: HugePages::Try,
            cache_size: 64,
        }
    }
}

impl MempoolConfig {
    /// A default configuration with `buffers` buffers.
    pub fn with_buffers(buffers: u32) -> Self {
        MempoolConfig {
            buffers,
            ..Default::default()
        }
    }

    pub(super) fn validate(&self) -> Result<()> {
        if self.buffers == 0 || self.buffers > (1 << 24) {
            return Err(Error::Config(format!(
                "MempoolConfig::buffers = {}: must be 1..=16777216",
                self.buffers
            )));
        }
        if !self.buf_size.is_power_of_two() || !(512..=65536).contains(&self.buf_size) {
            return Err(Error::Config(format!(
                "MempoolConfig::buf_size = {}: must be a power of two from 512 to 65536",
                self.buf_size
            )));
        }
        if (self.headroom as usize) < BUF_HEADER || self.headroom as u32 + 64 > self.buf_size {
            return Err(Error::Config(format!(
                "MempoolConfig::headroom = {}: must be at least {BUF_HEADER} and leave 64 bytes of \
                 a {}-byte buffer",
                self.headroom, self.buf_size
            )));
        }
        if self.cache_size == 0 || self.cache_size > 4096 {
            return Err(Error::Config(format!(
                "MempoolConfig::cache_size = {}: must be 1..=4096",
                self.cache_size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mempool::Mempool;

    #[test]
    fn config_is_validated() {
        for cfg in [
            MempoolConfig::with_buffers(0),
            MempoolConfig {
                buf_size: 3000,
                ..Default::default()
            },
            MempoolConfig {
                headroom: 2040,
                ..Default::default()
            },
            MempoolConfig {
                headroom: 4,
                ..Default::default()
            },
        ] {
            assert!(
                matches!(Mempool::new(&cfg), Err(Error::Config(_))),
                "{cfg:?}"
            );
        }
    }
}
