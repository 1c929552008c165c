//! How libibverbs, and DPDK's PCI bus and mlx5 PMD, find the device: a sysfs tree under
//! `$SYSFS_PATH` ([`sysfs`] for the verbs device, [`pci`] for its PCI function and netdev,
//! [`counters`] for the port's hardware counters, served live by the interposer), the port
//! netdev's ethtool statistics ([`ethtool`], answered by the interposer) and the device node
//! (answered by the interposer).

pub mod counters;
pub mod ethtool;
mod fs;
pub mod pci;
pub mod sysfs;
