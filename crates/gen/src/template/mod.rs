//! Frame templates, flow variation with incremental checksums, and sequence stamps.
//!
//! * [`spec`]: what a frame is ([`FrameSpec`], [`Shape`] and their parts), checked.
//! * [`sizes`]: frame sizes ([`SizeSpec`]: fixed, range, IMIX).
//! * [`range`]: header fields varied over ranges ([`FieldRange`]), parsed and checked.
//! * [`stamper`]: the template built from a spec ([`Stamper`]); its `write` module holds the
//!   per-frame writers that stamp the varying bytes.
//! * [`stamp`]: sequence and latency stamps read back ([`Stamp`], [`StampInfo`]) and counted
//!   ([`SeqTracker`]); their magic numbers are here, below the stamper that writes them and
//!   the reader.
//! * the one's-complement sums (RFC 1071, RFC 1624) are rawq's ([`rawq::packet::checksum`]).

mod range;
mod sizes;
mod spec;
mod stamp;
mod stamper;

pub use range::{FieldRange, RangeField, RangeMode, RangeValue};
pub use rawq::packet::checksum::{checksum, csum_fold, csum_update16};
pub use sizes::SizeSpec;
pub use spec::{FlowVary, FrameSpec, L4Kind, Payload, Shape, Vlan};
pub use stamp::{Marked, SeqTracker, Stamp, StampInfo, TrialMark};
pub use stamper::Stamper;

pub use rawq::stats::WIRE_OVERHEAD;

/// Marks a sequence stamp at the start of the UDP payload: "RQSQ".
pub const SEQ_MAGIC: u32 = 0x5251_5351;

/// Marks a latency stamp (a sequence stamp followed by the 8-byte send time): "RQLT".
pub const LAT_MAGIC: u32 = 0x5251_4c54;

/// Where a trial's mark sits in a stamp's 48-bit sequence number (see [`Shape::mark`]): its
/// top 8 bits are the mark, the low 40 the frame's number within the trial.
pub const MARK_SHIFT: u32 = 40;

/// The low 48 bits of a sequence number: what a stamp carries.
const SEQ_BITS: u64 = 0xffff_ffff_ffff;

/// What a marked stamp keeps of a sequence number: its low [`MARK_SHIFT`] bits.
const MARKED_SEQ_BITS: u64 = (1 << MARK_SHIFT) - 1;

/// The sum of a 32-bit value's two 16-bit words, not folded.
#[inline]
fn words32(v: u32) -> u32 {
    (v >> 16) + (v & 0xffff)
}

/// The sum of a 64-bit value's four 16-bit words, not folded.
#[inline]
fn words64(v: u64) -> u32 {
    words32((v >> 32) as u32) + words32(v as u32)
}

// Header and stamp lengths, shared by the spec checks, the stamper and the stamp reader.
const ETH: usize = 14;
const IP4: usize = 20;
const IP6: usize = 40;
const UDP: usize = 8;
/// magic (4) + stream (2) + flow (2) + flows - 1 (2) + seq (6); a latency stamp adds the
/// send time (8).
const STAMP: usize = 16;
/// [`STAMP`] where the const generic `STAMP` shadows it.
const STAMP_LEN: usize = STAMP;
const TCP: usize = 20;
const LAT_STAMP: usize = 24;

/// Bytes of stamp area: 0, [`STAMP`] or [`LAT_STAMP`].
fn stamp_len(stamp: bool, latency: bool) -> usize {
    if latency {
        LAT_STAMP
    } else if stamp {
        STAMP
    } else {
        0
    }
}
