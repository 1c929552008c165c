//! Per-flow sequence accounting on the receive side: loss, duplicates and reordering for each
//! flow index of the sender's template.
//!
//! A stamp carries the sender stream, the flow index, the sender's flow count and the stream's
//! sequence number `seq`; pktgen sends flow `seq % flows`, so within one flow the frames are
//! numbered `seq / flows` = 0, 1, 2, … Each (stream, flow) keeps the next expected number and a
//! 64-frame window of what arrived, which tells a duplicate from a late frame. Memory grows only
//! when a new stream or flow index first appears; recording is allocation-free after that.

use super::template::StampInfo;

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    received: u64,
    duplicates: u64,
    late: u64,
    /// Next expected per-flow number; valid once `seen`.
    next: u64,
    /// Bit k: number `next - 1 - k` arrived.
    window: u64,
    seen: bool,
}

#[derive(Clone, Debug, Default)]
struct Stream {
    flows: u32,
    /// Highest sequence number seen + 1.
    end: u64,
    entries: Vec<Entry>,
}

/// Per-flow counts (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct FlowTracker {
    streams: Vec<Stream>,
}

/// The counts of one flow, over all sender streams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCount {
    /// Flow index.
    pub flow: u32,
    /// Frames received (duplicates included).
    pub received: u64,
    /// Frames sent and never received.
    pub lost: u64,
    /// Frames received more than once (the extra copies).
    pub duplicates: u64,
    /// Frames that arrived after a later frame of the same flow.
    pub reordered: u64,
}

impl FlowCount {
    /// Loss + duplicates + reordering: how badly this flow fared.
    pub fn badness(&self) -> u64 {
        self.lost + self.duplicates + self.reordered
    }
}

impl FlowTracker {
    /// An empty tracker with room for `flows` flows of one stream.
    pub fn with_capacity(flows: usize) -> FlowTracker {
        FlowTracker {
            streams: vec![Stream {
                entries: Vec::with_capacity(flows),
                ..Default::default()
            }],
        }
    }

    /// Accounts for one received stamp.
    #[inline]
    pub fn record(&mut self, s: &StampInfo) {
        let si = s.stream as usize;
        if si >= self.streams.len() {
            self.streams.resize_with(si + 1, Stream::default);
        }
        let st = &mut self.streams[si];
        st.flows = s.flows;
        st.end = st.end.max(s.seq + 1);
        let f = s.flow as usize;
        if f >= st.entries.len() {
            st.entries.resize(f + 1, Entry::default());
        }
        let e = &mut st.entries[f];
        let n = s.seq / s.flows.max(1) as u64;
        e.received += 1;
        if !e.seen {
            *e = Entry {
                received: 1,
                next: n + 1,
                window: 1,
                seen: true,
                ..Default::default()
            };
        } else if n >= e.next {
            let shift = n + 1 - e.next;
            e.window = if shift >= 64 { 0 } else { e.window << shift } | 1;
            e.next = n + 1;
        } else {
            let back = e.next - 1 - n;
            if back < 64 {
                if e.window & (1 << back) != 0 {
                    e.duplicates += 1;
                } else {
                    e.window |= 1 << back;
                    e.late += 1;
                }
            } else {
                e.late += 1; // older than the window: cannot tell, counted late
            }
        }
    }

    /// Adds another tracker's counts (e.g. another receive queue's: RSS keeps a flow on one
    /// queue, so the windows never need combining).
    pub fn merge(&mut self, o: &FlowTracker) {
        if o.streams.len() > self.streams.len() {
            self.streams.resize_with(o.streams.len(), Stream::default);
        }
        for (a, b) in self.streams.iter_mut().zip(&o.streams) {
            a.flows = a.flows.max(b.flows);
            a.end = a.end.max(b.end);
            if b.entries.len() > a.entries.len() {
                a.entries.resize(b.entries.len(), Entry::default());
            }
            for (x, y) in a.entries.iter_mut().zip(&b.entries) {
                x.received += y.received;
                x.duplicates += y.duplicates;
                x.late += y.late;
                x.seen |= y.seen;
            }
        }
    }

    /// Frames with a stamp.
    pub fn received(&self) -> u64 {
        self.streams
            .iter()
            .flat_map(|s| &s.entries)
            .map(|e| e.received)
            .sum()
    }

    /// Per-flow counts, flows in order, each flow's counts summed over the sender streams.
    /// `sent[s]` is how many frames stream `s` sent (the sender knows: head and tail loss
    /// count); without it, the highest sequence number seen + 1 (frames lost after the last
    /// one received are then not seen). With several streams, [`FlowTracker::stream_counts`]
    /// keeps them apart (flow 0 of one stream is not flow 0 of another).
    pub fn counts(&self, sent: Option<&[u64]>) -> Vec<FlowCount> {
        let flows = self.streams.iter().map(|s| s.flows).max().unwrap_or(0) as usize;
        let mut out: Vec<FlowCount> = (0..flows)
            .map(|f| FlowCount {
                flow: f as u32,
                ..Default::default()
            })
            .collect();
        for (_, c) in self.stream_counts(sent) {
            let o = &mut out[c.flow as usize];
            o.received += c.received;
            o.duplicates += c.duplicates;
            o.reordered += c.reordered;
            o.lost += c.lost;
        }
        out
    }

    /// The sender streams seen (with at least one stamped frame).
    pub fn streams(&self) -> usize {
        self.streams.iter().filter(|s| s.flows > 0).count()
    }

    /// Per-flow counts of each sender stream apart: (stream, counts), streams in order and
    /// flows in order within each. `sent` as in [`FlowTracker::counts`].
    pub fn stream_counts(&self, sent: Option<&[u64]>) -> Vec<(u16, FlowCount)> {
        let mut out = Vec::new();
        for (si, st) in self.streams.iter().enumerate() {
            if st.flows == 0 {
                continue;
            }
            let n = sent
                .and_then(|s| s.get(si).copied())
                .unwrap_or(st.end)
                .max(st.end);
            let fl = st.flows as u64;
            for f in 0..st.flows as usize {
                let expected = n / fl + ((f as u64) < n % fl) as u64;
                let e = st.entries.get(f).copied().unwrap_or_default();
                out.push((
                    si as u16,
                    FlowCount {
                        flow: f as u32,
                        received: e.received,
                        duplicates: e.duplicates,
                        reordered: e.late,
                        lost: expected.saturating_sub(e.received - e.duplicates),
                    },
                ));
            }
        }
        out
    }

    /// The `k` flows with the most loss + duplicates + reordering (none that had none).
    pub fn worst(&self, sent: Option<&[u64]>, k: usize) -> Vec<FlowCount> {
        let mut c: Vec<FlowCount> = self
            .counts(sent)
            .into_iter()
            .filter(|c| c.badness() > 0)
            .collect();
        c.sort_by(|a, b| b.badness().cmp(&a.badness()).then(a.flow.cmp(&b.flow)));
        c.truncate(k);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(stream: u16, flows: u32, seq: u64) -> StampInfo {
        StampInfo {
            stream,
            flow: (seq % flows as u64) as u16,
            flows,
            seq,
            tx_ns: None,
        }
    }

    #[test]
    fn loss_duplicates_and_reordering_per_flow() {
        // 3 flows, 30 frames: flow f gets seq f, f+3, f+6, …
        let mut t = FlowTracker::default();
        let mut order: Vec<u64> = (0..30).collect();
        order.retain(|&s| s != 4 && s != 29 && s != 0); // flow 1 loses one, flow 2 its tail, flow 0 its head
        order.push(10); // flow 1: duplicate
        order.swap(4, 7); // seq 6 and 9 (both flow 0) swap: 9 then 6 -> one late
        for s in order {
            t.record(&st(0, 3, s));
        }
        let c = t.counts(Some(&[30]));
        assert_eq!(
            c[0],
            FlowCount {
                flow: 0,
                received: 9,
                lost: 1,
                duplicates: 0,
                reordered: 1
            }
        );
        assert_eq!(
            c[1],
            FlowCount {
                flow: 1,
                received: 10,
                lost: 1,
                duplicates: 1,
                reordered: 0
            }
        );
        assert_eq!(
            c[2],
            FlowCount {
                flow: 2,
                received: 9,
                lost: 1,
                duplicates: 0,
                reordered: 0
            }
        );
        // Without the sender's count, flow 2's tail loss (seq 29) is invisible.
        assert_eq!(t.counts(None)[2].lost, 0);
        let w = t.worst(Some(&[30]), 2);
        assert_eq!(w.iter().map(|c| c.flow).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn streams_and_merged_queues_add_up() {
        let (mut a, mut b) = (FlowTracker::default(), FlowTracker::default());
        for s in 0..100u64 {
            // Flow 0 arrives on queue a, flow 1 on queue b; stream 1 sends the same.
            let t = if s % 2 == 0 { &mut a } else { &mut b };
            t.record(&st(0, 2, s));
            t.record(&st(1, 2, s));
        }
        a.merge(&b);
        let c = a.counts(Some(&[100, 102]));
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].received, c[0].lost), (100, 1)); // stream 1's seq 100 never came
        assert_eq!((c[1].received, c[1].lost), (100, 1)); // nor its 101
        assert_eq!(a.received(), 200);
        assert!(a.worst(None, 5).is_empty());
    }

    #[test]
    fn old_frames_beyond_the_window_count_as_late() {
        let mut t = FlowTracker::default();
        for s in [0u64, 100, 1] {
            t.record(&st(0, 1, s));
        }
        let c = t.counts(None)[0];
        assert_eq!(
            (c.received, c.reordered, c.duplicates, c.lost),
            (3, 1, 0, 98)
        );
    }
}
