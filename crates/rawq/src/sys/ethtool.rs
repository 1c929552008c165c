//! The `SIOCETHTOOL` ioctl (`linux/ethtool.h`), in the calling thread's network namespace: a
//! driver's name and its `ethtool -S` counters (the live-frames engine, and the device
//! counters of an mlx5 port's netdev: [`crate::counters`]), and the index of an interface's PTP
//! hardware clock (`ETHTOOL_GET_TS_INFO`, what `ethtool -T` shows).
//!
//! The statistics are read as `ethtool -S` and DPDK's mlx5 PMD read them: how many there are
//! (`ETHTOOL_GSSET_INFO` for `ETH_SS_STATS`, else `n_stats` of `ETHTOOL_GDRVINFO`), their names
//! (`ETHTOOL_GSTRINGS`, 32 bytes each) and their values (`ETHTOOL_GSTATS`, one `u64` each, in
//! the names' order). Control path only: each read allocates its buffers.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
/// `ETHTOOL_GSSET_INFO`: the sizes of string sets.
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// `ETHTOOL_GET_TS_INFO`.
const ETHTOOL_GET_TS_INFO: u32 = 0x41;

/// `struct ethtool_ts_info`.
#[repr(C)]
#[derive(Default)]
struct TsInfo {
    cmd: u32,
    so_timestamping: u32,
    phc_index: i32,
    tx_types: u32,
    tx_reserved: [u32; 3],
    rx_filters: u32,
    rx_reserved: [u32; 3],
}

/// `struct ethtool_drvinfo` (`linux/ethtool.h`).
#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

fn ioctl(ifname: &str, data: *mut libc::c_void) -> io::Result<()> {
    // SAFETY: plain socket(2); the result is checked and owned.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    if ifname.len() >= ifr.ifr_name.len() {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = data as *mut libc::c_char;
    // SAFETY: `ifr` names the interface and points at a command buffer the caller sized for
    // its command; the kernel writes only inside it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL, &mut ifr) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn drvinfo(ifname: &str) -> io::Result<DrvInfo> {
    // SAFETY: all-zero is a valid DrvInfo.
    let mut d: DrvInfo = unsafe { std::mem::zeroed() };
    d.cmd = ETHTOOL_GDRVINFO;
    ioctl(ifname, &mut d as *mut DrvInfo as *mut libc::c_void)?;
    Ok(d)
}

/// The driver's name ("veth", "mlx5_core", ...).
pub fn driver(ifname: &str) -> io::Result<String> {
    let d = drvinfo(ifname)?;
    let end = d.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Ok(String::from_utf8_lossy(&d.driver[..end]).into_owned())
}

/// The index N of `ifname`'s PTP hardware clock (`/dev/ptpN`); negative when it has none.
pub(crate) fn phc_index(ifname: &str) -> io::Result<i32> {
    let mut info = TsInfo {
        cmd: ETHTOOL_GET_TS_INFO,
        ..Default::default()
    };
    ioctl(ifname, &mut info as *mut TsInfo as *mut libc::c_void)?;
    Ok(info.phc_index)
}

/// Two `u32` fields in memory order, as one `u64` word of a command buffer.
fn two_u32(a: u32, b: u32) -> u64 {
    let mut w = [0u8; 8];
    w[..4].copy_from_slice(&a.to_ne_bytes());
    w[4..].copy_from_slice(&b.to_ne_bytes());
    u64::from_ne_bytes(w)
}

/// The two `u32` fields of a command buffer's `u64` word, in memory order.
fn halves(w: u64) -> (u32, u32) {
    let b = w.to_ne_bytes();
    (
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
    )
}

/// How many `ETH_SS_STATS` statistics `ifname` has: `ETHTOOL_GSSET_INFO` (what ethtool asks
/// first), else `n_stats` of `ETHTOOL_GDRVINFO` (older drivers; what DPDK's mlx5 PMD asks).
fn stats_count(ifname: &str) -> io::Result<usize> {
    // struct ethtool_sset_info { u32 cmd, reserved; u64 sset_mask; u32 data[] }: one set asked
    // for, so one length back. As u64 words: [cmd | reserved << 32, sset_mask, data[0]].
    let mut info = [two_u32(ETHTOOL_GSSET_INFO, 0), 1 << ETH_SS_STATS, 0];
    match ioctl(ifname, info.as_mut_ptr() as *mut libc::c_void) {
        Ok(()) if info[1] & (1 << ETH_SS_STATS) != 0 => Ok(halves(info[2]).0 as usize),
        Ok(()) => Ok(0),
        Err(_) => Ok(drvinfo(ifname)?.n_stats as usize),
    }
}

/// `ethtool -S`: (name, value) pairs.
pub(crate) fn stats(ifname: &str) -> io::Result<Vec<(String, u64)>> {
    let n = stats_count(ifname)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    // struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[] }
    let mut names = vec![0u32; 3 + n * ETH_GSTRING_LEN / 4];
    names[0] = ETHTOOL_GSTRINGS;
    names[1] = ETH_SS_STATS;
    names[2] = n as u32;
    ioctl(ifname, names.as_mut_ptr() as *mut libc::c_void)?;
    // struct ethtool_stats { u32 cmd, n_stats; u64 data[] }
    let mut vals = vec![0u64; 1 + n];
    vals[0] = two_u32(ETHTOOL_GSTATS, n as u32);
    ioctl(ifname, vals.as_mut_ptr() as *mut libc::c_void)?;
    // The counts as the kernel filled them in.
    let named = (names[2] as usize).min(n);
    let got = (halves(vals[0]).1 as usize).min(n);
    let bytes: Vec<u8> = names[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(bytes
        .chunks(ETH_GSTRING_LEN)
        .zip(&vals[1..])
        .take(got.min(named))
        .map(|(name, &v)| {
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            (String::from_utf8_lossy(&name[..end]).into_owned(), v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_words_keep_their_fields_in_memory_order() {
        let w = two_u32(ETHTOOL_GSTATS, 7);
        assert_eq!(halves(w), (ETHTOOL_GSTATS, 7));
        let b = w.to_ne_bytes();
        assert_eq!(&b[..4], &ETHTOOL_GSTATS.to_ne_bytes());
    }

    #[test]
    fn an_interface_without_statistics_has_none_and_a_missing_one_is_an_error() {
        // lo has no ethtool statistics (ETHTOOL_GSSET_INFO clears the ETH_SS_STATS bit).
        assert_eq!(stats("lo").unwrap(), Vec::new());
        assert!(stats("rawq-no-such0").is_err());
    }
}
