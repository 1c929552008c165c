//! Mapping the pool's region: huge pages when asked and available, plain anonymous memory
//! otherwise, never more than the machine has.

use memmap2::{MmapMut, MmapOptions};

use super::config::{HugePages, MemoryKind};
use super::HUGE_PAGE_SIZE;
use crate::error::{Error, Result};

/// `MemAvailable` from /proc/meminfo, in bytes.
pub(super) fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

pub(super) fn map_region(len: usize, policy: HugePages) -> Result<(MmapMut, MemoryKind)> {
    if policy != HugePages::Never {
        let huge_len = len.div_ceil(HUGE_PAGE_SIZE) * HUGE_PAGE_SIZE;
        match MmapOptions::new()
            .len(huge_len)
            .huge(Some(21))
            .populate()
            .map_anon()
        {
            Ok(m) => return Ok((m, MemoryKind::HugePages2M)),
            Err(e) if policy == HugePages::Require => {
                return Err(Error::Unsupported(format!(
                    "2 MiB huge pages required for a {huge_len}-byte pool but mmap(MAP_HUGETLB) \
                     failed ({e}); reserve some with `echo 512 > /proc/sys/vm/nr_hugepages`"
                )))
            }
            Err(_) => {}
        }
    }
    let m = MmapOptions::new()
        .len(len)
        .populate()
        .map_anon()
        .map_err(|e| Error::os("mmap(packet pool)", e))?;
    Ok((m, MemoryKind::Anonymous))
}
