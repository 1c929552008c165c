//! The tools on the emulated ConnectX (`scripts/emu.sh`): dv and verbs on loopback and on the
//! wire, DPDK peers, counters, jumbo frames, device fatal, link changes, receive draining,
//! hardware timestamps, RSS and the model's fidelity to the vendor sources.
//!
//! The outer tests share one lock for the whole binary (`support::emu::serial`): one emulated
//! NIC at a time. An `inner_*` test is re-run under `scripts/emu.sh` with
//! `--exact MODULE::inner_...` (the name from `support::test_name`).

mod control;
mod counters;
mod device_fatal;
mod dpdk_peers;
mod dv_wire;
mod fwd_rx_mode;
mod hw_timestamps;
mod jumbo;
mod link_runs;
mod model_fidelity;
mod pktgen_rx_drain;
mod port_netdev;
mod rss;
mod rxgen;
mod verbs;
mod wire;
