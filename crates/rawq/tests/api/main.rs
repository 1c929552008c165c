//! The library's API on the loopback backend and the software device: pools under random
//! bursts, jumbo frames and the port MTU, event-driven receive, the namespace helper itself,
//! and the stats, info and counter types as JSON (feature `serde`); the traffic generator's
//! frame templates are rawq-gen's (crates/gen/tests/template).

mod jumbo;
mod mempool_props;
mod netns_support;
mod rx_wait;
mod serde;
