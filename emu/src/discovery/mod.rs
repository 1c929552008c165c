//! How libibverbs finds the device: a sysfs tree under `$SYSFS_PATH` and the device node
//! (answered by the interposer).

pub mod sysfs;
