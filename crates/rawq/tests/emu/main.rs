//! End to end on the emulated ConnectX (`scripts/emu.sh`): rawq's DV and verbs backends,
//! offloads, rules and their hit counters, link events, the vendor's tools and DPDK's mlx5 PMD,
//! smoltcp's TCP against the kernel behind the port's TAP, the tokio adapter, and the launcher itself.
//!
//! The `inner_*` tests (ignored in a plain run) are the application half of an outer test,
//! which re-runs this executable under `scripts/emu.sh` with `--exact MODULE::inner_...` (the
//! name from `support::test_name`). The outer tests share one lock for the whole binary
//! (`support::emu::serial`): one emulated NIC at a time.

mod devinfo;
mod dpdk;
mod dpdk_decode;
mod dv;
mod dv_errors;
mod launcher;
mod link_events;
mod offloads;
mod rule_hits;
mod rules_runtime;
mod smoltcp_tap;
mod tokio_dv;
