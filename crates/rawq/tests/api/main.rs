//! The library's API on the loopback backend and the software device: pools under random
//! bursts, jumbo frames and the port MTU, event-driven receive, the namespace helper itself,
//! the traffic generator's frame templates (checked by pnet_packet and by tshark), and the
//! stats, info and counter types as JSON (feature `serde`).

mod gen_template;
mod gen_tshark;
mod jumbo;
mod mempool_props;
mod netns_support;
mod rx_wait;
mod serde;
