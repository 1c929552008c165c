//! # rawq-gen — traffic generation over rawq
//!
//! Traffic-generation helpers shared by `rawq-pktgen` and users' own generators, built on
//! rawq's public API (packets, errors, link state, checksums).
//!
//! * [`FrameSpec`] → a template Ethernet/IPv4-or-IPv6/UDP frame with correct checksums.
//! * [`Stamper`] writes a frame for flow *f* and sequence number *s* into a buffer by copying the
//!   template and patching the varying fields; the IPv4 and UDP checksums are updated
//!   incrementally (RFC 1624), never recomputed over the whole frame.
//! * [`Shape`] adds VLAN tags (QinQ), TCP SYN/ACK, random payload, field ranges and room for
//!   latency stamps to a template.
//! * [`LatencyHistogram`] (log-linear, percentiles), [`FlowTracker`] (per-flow loss,
//!   duplicates, reordering) and [`PcapWriter`] (bounded nanosecond pcap) for the receive side.
//! * [`SizeSpec`] (fixed, range, IMIX), [`Rate`] and [`Pacer`] (a cumulative schedule that holds
//!   a rate without drifting), and [`SeqTracker`] for the receive side.
//!
//! * [`RateSearch`]: RFC 2544's binary search for the throughput, with FD.io CSIT's NDR and PDR.
//! * [`neigh`]: ARP and IPv6 neighbour discovery on the interface under a port (resolving
//!   `--dst-mac`, answering for the generator's own address).
//! * [`live_plan`] / [`live_config`] (feature `xdp`): a template as the input of the kernel's
//!   live-frames engine, `rawq::xdp::live` (the AF_XDP backend's transmit mode).
//!
//! Sizes are frame lengths as handed to the NIC, **without** the 4-byte FCS (what tcpdump shows).
//! Bit rates are layer-1 rates: frame + FCS + preamble + inter-frame gap = frame + 24 bytes.

#![deny(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod capture;
mod flowstats;
mod latency;
#[cfg(feature = "xdp")]
mod live;
pub mod neigh;
mod netdev;
mod pace;
mod search;
mod source;
mod template;

#[cfg(feature = "xdp")]
pub use live::{live_config, live_plan};
pub use netdev::{netdev_mac, netdev_state, NetdevState};
pub use rawq::pin_to_core;

pub use capture::{realtime_ns, CaptureLimits, PcapWriter};
pub use flowstats::{FlowCount, FlowTracker};
pub use latency::{bucket_bounds, bucket_of, fmt_ns, monotonic_ns, LatencyHistogram, PERCENTILES};
pub use pace::{
    parse_duration, raise_sender_priority, Pacer, Pattern, Rate, MAX_DURATION_S, SENDER_NICE,
};
pub use search::{RateSearch, TrialCount};
pub use source::FrameSource;
pub use template::{
    checksum, csum_fold, csum_update16, FieldRange, FlowVary, FrameSpec, L4Kind, Marked, Payload,
    RangeField, RangeMode, RangeValue, SeqTracker, Shape, SizeSpec, Stamp, StampInfo, Stamper,
    TrialMark, Vlan, LAT_MAGIC, MARK_SHIFT, SEQ_MAGIC, WIRE_OVERHEAD,
};

/// A pool of `buffers` buffers of the default size in ordinary pages, for unit tests.
#[cfg(test)]
fn test_pool(buffers: u32) -> rawq::Mempool {
    rawq::Mempool::new(&rawq::MempoolConfig {
        buffers,
        huge_pages: rawq::HugePages::Never,
        ..Default::default()
    })
    .unwrap()
}
