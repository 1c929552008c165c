//! Traffic-generation helpers shared by `examples/pktgen` and users' own generators.
//!
//! * [`FrameSpec`] → a template Ethernet/IPv4-or-IPv6/UDP frame with correct checksums.
//! * [`Stamper`] writes a frame for flow *f* and sequence number *s* into a buffer by copying the
//!   template and patching the varying fields; the IPv4 and UDP checksums are updated
//!   incrementally (RFC 1624), never recomputed over the whole frame.
//! * [`SizeSpec`] (fixed, range, IMIX), [`Rate`] and [`Pacer`] (a cumulative schedule that holds
//!   a rate without drifting), and [`SeqTracker`] for the receive side.
//!
//! Sizes are frame lengths as handed to the NIC, **without** the 4-byte FCS (what tcpdump shows).
//! Bit rates are layer-1 rates: frame + FCS + preamble + inter-frame gap = frame + 24 bytes.

mod affinity;
mod pace;
mod source;
mod template;

pub use affinity::{netdev_mac, netdev_state, pin_to_core, NetdevState};

pub use pace::{parse_duration, Pacer, Rate, MAX_DURATION_S};
pub use source::FrameSource;
pub use template::{
    checksum, csum_fold, csum_update16, FlowVary, FrameSpec, SeqTracker, SizeSpec, Stamp, Stamper,
    SEQ_MAGIC, WIRE_OVERHEAD,
};
