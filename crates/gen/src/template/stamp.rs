//! Sequence and latency stamps: their magic numbers, reading them back from a frame, and
//! counting them on the receive side.

use super::stamper::Stamper;
use super::{
    IP4, IP6, LAT_MAGIC, LAT_STAMP, MARKED_SEQ_BITS, MARK_SHIFT, SEQ_MAGIC, STAMP, TCP, UDP,
};

/// A sequence stamp read back from a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Which sender stream (e.g. the sending queue).
    pub stream: u16,
    /// Sequence number within the stream.
    pub seq: u64,
}

/// Everything a stamp carries (see [`Stamper::read_stamp_full`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StampInfo {
    /// Which sender stream (e.g. the sending queue).
    pub stream: u16,
    /// The template's flow index of the frame (`seq % flows` as pktgen sends).
    pub flow: u16,
    /// The sender's flow count (1..=65536).
    pub flows: u32,
    /// Sequence number within the stream (48 bits).
    pub seq: u64,
    /// Send time (ns of the sender's clock) in a latency stamp.
    pub tx_ns: Option<u64>,
}

impl Stamper {
    /// Reads the sequence stamp of a frame written by a stamper with `stamp` on.
    pub fn read_stamp(frame: &[u8]) -> Option<Stamp> {
        Self::read_stamp_full(frame).map(|s| Stamp {
            stream: s.stream,
            seq: s.seq,
        })
    }

    /// Reads a sequence or latency stamp: through up to two VLAN tags, IPv4 or IPv6, UDP or TCP.
    pub fn read_stamp_full(frame: &[u8]) -> Option<StampInfo> {
        let be16 = |o: usize| Some(u16::from_be_bytes([*frame.get(o)?, *frame.get(o + 1)?]));
        let mut et = be16(12)?;
        let mut l3 = 14;
        for _ in 0..2 {
            if matches!(et, 0x8100 | 0x88a8) {
                et = be16(l3 + 2)?;
                l3 += 4;
            }
        }
        let (proto, l4) = match et {
            0x0800 => {
                let ihl = (*frame.get(l3)? & 0x0f) as usize * 4;
                if ihl < IP4 || be16(l3 + 6)? & 0x1fff != 0 {
                    return None;
                }
                (*frame.get(l3 + 9)?, l3 + ihl)
            }
            0x86dd => (*frame.get(l3 + 6)?, l3 + IP6),
            _ => return None,
        };
        let p = match proto {
            17 => l4 + UDP,
            6 => l4 + ((*frame.get(l4 + 12)? >> 4) as usize * 4).max(TCP),
            _ => return None,
        };
        let s = frame.get(p..p + STAMP)?;
        let magic = u32::from_be_bytes([s[0], s[1], s[2], s[3]]);
        let tx_ns = match magic {
            SEQ_MAGIC => None,
            LAT_MAGIC => {
                let t = frame.get(p + STAMP..p + LAT_STAMP)?;
                Some(u64::from_be_bytes(t.try_into().ok()?))
            }
            _ => return None,
        };
        let mut seq = [0u8; 8];
        seq[2..].copy_from_slice(&s[10..16]);
        Some(StampInfo {
            stream: u16::from_be_bytes([s[4], s[5]]),
            flow: u16::from_be_bytes([s[6], s[7]]),
            flows: u16::from_be_bytes([s[8], s[9]]) as u32 + 1,
            seq: u64::from_be_bytes(seq),
            tx_ns,
        })
    }
}

/// A trial's mark, as its receiver checks it (RFC 2544 section 23: each trial's frames are
/// counted for that trial only). The trial's sender writes it into its stamps
/// ([`Shape::mark`](super::Shape::mark)); a stamp carrying another mark was sent by another
/// trial (an earlier one: a frame late past its own trial's end), and is not this trial's to
/// count. A stamp without a mark (a sender that is not a trial) and a frame without a stamp are
/// neither: they are left as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrialMark(std::num::NonZeroU8);

/// What a trial's receiver makes of a stamp (see [`TrialMark::check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marked {
    /// This trial's frame: the stamp with the mark taken off its sequence number.
    Own(StampInfo),
    /// A frame another trial sent (it carries that trial's mark): late, not this trial's.
    Other(u8),
    /// A stamp without a mark, left as it is (not a trial's).
    Unmarked(StampInfo),
}

impl TrialMark {
    /// Mark `m` (1..=255; 0 is no mark).
    pub fn new(m: u8) -> Option<TrialMark> {
        std::num::NonZeroU8::new(m).map(TrialMark)
    }

    /// The mark of the `n`th trial of a run (from 0): 1, 2, … 255, then 1 again, so that two
    /// trials in a row never share one (a frame 255 trials late would pass for its own).
    pub fn nth(n: u64) -> TrialMark {
        TrialMark(std::num::NonZeroU8::MIN.saturating_add((n % 255) as u8))
    }

    /// The mark as the stamps carry it.
    pub fn get(self) -> u8 {
        self.0.get()
    }

    /// The mark a stamp carries (0: none). (A stamp of a sender without marks past 2^40 frames
    /// of a stream carries its sequence number's upper bits here: only a trial's receiver,
    /// whose sender marks, reads it as a mark.)
    pub fn of(s: &StampInfo) -> u8 {
        (s.seq >> MARK_SHIFT) as u8
    }

    /// Whether stamp `s` is this trial's, another trial's, or unmarked.
    #[inline]
    pub fn check(self, mut s: StampInfo) -> Marked {
        match TrialMark::of(&s) {
            0 => Marked::Unmarked(s),
            m if m == self.get() => {
                s.seq &= MARKED_SEQ_BITS;
                Marked::Own(s)
            }
            m => Marked::Other(m),
        }
    }
}

/// Receive-side accounting of sequence-stamped streams: received, lost (gaps), out of order,
/// duplicates.
#[derive(Clone, Debug, Default)]
pub struct SeqTracker {
    next: Vec<Option<u64>>,
    /// Frames with a stamp.
    pub stamped: u64,
    /// Frames whose sequence number was below the next expected one (late or duplicate).
    pub out_of_order: u64,
    /// Sequence numbers skipped over (frames not seen, possibly arriving late later).
    pub gaps: u64,
    /// Stamped frames and their bytes by stream id (see [`SeqTracker::record_frame`]).
    per_stream: Vec<(u64, u64)>,
}

impl SeqTracker {
    /// Adds the counts of another tracker (e.g. another queue's) into this one.
    pub fn merge(&mut self, other: &SeqTracker) {
        self.stamped += other.stamped;
        self.out_of_order += other.out_of_order;
        self.gaps += other.gaps;
        if self.per_stream.len() < other.per_stream.len() {
            self.per_stream.resize(other.per_stream.len(), (0, 0));
        }
        for (a, b) in self.per_stream.iter_mut().zip(&other.per_stream) {
            a.0 += b.0;
            a.1 += b.1;
        }
    }

    /// Accounts for one received stamp of a frame `len` bytes long, counting it (and its bytes)
    /// under its stream too (see [`SeqTracker::stream`]).
    #[inline]
    pub fn record_frame(&mut self, s: Stamp, len: usize) {
        let i = s.stream as usize;
        if i >= self.per_stream.len() {
            self.per_stream.resize(i + 1, (0, 0));
        }
        self.per_stream[i].0 += 1;
        self.per_stream[i].1 += len as u64;
        self.record(s);
    }

    /// Frames and bytes received of stream `stream` (those given to
    /// [`SeqTracker::record_frame`]).
    pub fn stream(&self, stream: u16) -> (u64, u64) {
        self.per_stream
            .get(stream as usize)
            .copied()
            .unwrap_or((0, 0))
    }

    /// Accounts for one received stamp.
    #[inline]
    pub fn record(&mut self, s: Stamp) {
        let i = s.stream as usize;
        if i >= self.next.len() {
            self.next.resize(i + 1, None);
        }
        self.stamped += 1;
        match self.next[i] {
            None => self.next[i] = Some(s.seq + 1),
            Some(n) if s.seq == n => self.next[i] = Some(n + 1),
            Some(n) if s.seq > n => {
                self.gaps += s.seq - n;
                self.next[i] = Some(s.seq + 1);
            }
            Some(_) => self.out_of_order += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_tracker_counts_gaps_and_reordering() {
        let mut t = SeqTracker::default();
        for seq in [0, 1, 2, 5, 3, 6] {
            t.record(Stamp { stream: 0, seq });
        }
        t.record(Stamp { stream: 3, seq: 10 });
        assert_eq!((t.stamped, t.gaps, t.out_of_order), (7, 2, 1));
        let mut sum = SeqTracker::default();
        sum.merge(&t);
        sum.merge(&t);
        assert_eq!((sum.stamped, sum.gaps, sum.out_of_order), (14, 4, 2));
    }

    #[test]
    fn seq_tracker_counts_frames_and_bytes_per_stream() {
        let (mut a, mut b) = (SeqTracker::default(), SeqTracker::default());
        a.record_frame(Stamp { stream: 0, seq: 0 }, 64);
        a.record_frame(Stamp { stream: 2, seq: 0 }, 700);
        b.record_frame(Stamp { stream: 0, seq: 1 }, 64);
        b.record(Stamp { stream: 1, seq: 0 });
        a.merge(&b);
        assert_eq!(a.stream(0), (2, 128));
        assert_eq!(a.stream(1), (0, 0), "record counts no stream");
        assert_eq!(a.stream(2), (1, 700));
        assert_eq!(a.stream(9), (0, 0));
        assert_eq!(a.stamped, 4);
    }
}
