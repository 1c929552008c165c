//! rawq-pktgen end to end: its options and the errors it gives, captures judged by tshark,
//! rates, latency, RFC 2544, streams, plots, ARP / neighbour discovery, and its summaries.

mod cli;
mod errors;
mod generate;
mod measure;
mod model;
mod neigh;
mod plot;
mod rfc2544;
mod streams;
mod summary;
