//! Without a wire: offloads as `PortInfo::offloads` reports them, hardware receive timestamps
//! through the DV receive paths, the verbs backend without a device, and pktgen's / fwd's
//! `--rq` / `--cqe-comp` on the software device.

mod dv_options;
mod hw_timestamps;
mod offloads;
mod verbs_nodevice;
