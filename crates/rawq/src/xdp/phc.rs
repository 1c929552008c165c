//! A network interface's PTP hardware clock (PHC): which one it has (ethtool's
//! `ETHTOOL_GET_TS_INFO`, what `ethtool -T IFNAME` prints as "PTP Hardware Clock"), and reading
//! it (`clock_gettime` on the dynamic POSIX clock of `/dev/ptpN`).
//!
//! A driver's hardware receive timestamps (`bpf_xdp_metadata_rx_timestamp`) count in this
//! clock's nanoseconds (mlx5e: `mlx5e_xdp_rx_timestamp` converts the CQE timestamp with the
//! PHC's own conversion), so a send time read from it is comparable with them; no other clock
//! is.

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::error::{Error, Result};

/// `CLOCKFD`: the low 3 bits of a clock id made from a file descriptor
/// (`FD_TO_CLOCKID(fd) = (~fd << 3) | CLOCKFD`, Documentation/driver-api/ptp.rst and
/// `include/linux/posix-timers.h`).
const CLOCKFD: libc::clockid_t = 3;

/// The index N of `ifname`'s PTP hardware clock (`/dev/ptpN`), `None` when it has none (a veth,
/// a driver with software timestamps only). Interface names are those of the calling thread's
/// network namespace.
///
/// # Errors
/// [`Error::Os`] when the socket or the ioctl fails (ENODEV: no such interface).
pub fn phc_index(ifname: &str) -> Result<Option<u32>> {
    if ifname.len() >= 16 {
        return Err(Error::Config(format!(
            "interface name {ifname:?} is longer than 15 bytes"
        )));
    }
    let index = crate::sys::ethtool::phc_index(ifname)
        .map_err(|e| Error::os("ioctl(SIOCETHTOOL, ETHTOOL_GET_TS_INFO)", e))?;
    Ok(u32::try_from(index).ok())
}

/// An open PTP hardware clock.
#[derive(Debug)]
pub struct Phc {
    _dev: File,
    clock: libc::clockid_t,
    index: u32,
}

impl Phc {
    /// Opens `/dev/ptp{index}` (read-only: reading the time needs no more).
    ///
    /// # Errors
    /// [`Error::Os`] when the device cannot be opened, or its clock cannot be read.
    pub fn open(index: u32) -> Result<Phc> {
        let path = format!("/dev/ptp{index}");
        let dev = File::open(&path).map_err(|e| Error::os("open /dev/ptpN", e))?;
        let fd = dev.as_raw_fd();
        let phc = Phc {
            clock: (!(fd as libc::clockid_t) << 3) | CLOCKFD,
            _dev: dev,
            index,
        };
        phc.try_now()
            .map_err(|e| Error::os("clock_gettime(/dev/ptpN)", e))?;
        Ok(phc)
    }

    /// The PHC of interface `ifname`, if it has one.
    ///
    /// # Errors
    /// As [`phc_index`] and [`Phc::open`].
    pub fn of_interface(ifname: &str) -> Result<Option<Phc>> {
        phc_index(ifname)?.map(Phc::open).transpose()
    }

    /// N of `/dev/ptpN`.
    pub fn index(&self) -> u32 {
        self.index
    }

    fn try_now(&self) -> std::io::Result<u64> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; `clock` names the open device, which
        // `self` keeps open.
        if unsafe { libc::clock_gettime(self.clock, &mut ts) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    /// The clock's time in ns (0 if it cannot be read: the device went away).
    pub fn now_ns(&self) -> u64 {
        self.try_now().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lo` has no PHC (`ethtool -T lo`: "PTP Hardware Clock: none"); an unknown interface is
    /// an error; a /dev/ptpN that does not exist cannot be opened.
    #[test]
    fn loopback_has_no_hardware_clock() {
        match phc_index("lo") {
            Ok(v) => assert_eq!(v, None),
            Err(e) => panic!("{e}"),
        }
        assert!(phc_index("rawq-no-such").is_err());
        assert!(phc_index("a-name-that-is-far-too-long").is_err());
        assert!(Phc::open(999).is_err());
    }
}
