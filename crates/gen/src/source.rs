//! Where a generator's frames come from: a template, or a list of captured frames.

use rawq::error::Result;
use rawq::Packet;

use super::template::Stamper;

/// The frames a generator sends.
pub enum FrameSource {
    /// Frames written from a template (sizes, flows and stamps from its spec).
    Template(Stamper),
    /// Captured frames, sent in order and cycled (e.g. read from a pcap file).
    Frames(Vec<Vec<u8>>),
}

impl FrameSource {
    /// Length of the longest frame.
    pub fn max_len(&self) -> usize {
        match self {
            FrameSource::Template(s) => s.spec().sizes.bounds().1 as usize,
            FrameSource::Frames(f) => f.iter().map(Vec::len).max().unwrap_or(0),
        }
    }

    /// Whether the frames carry sequence stamps (a template with `stamp` set).
    pub fn stamps(&self) -> bool {
        matches!(self, FrameSource::Template(s) if s.spec().stamp)
    }

    /// Mean frame length (for converting bit rates to packet rates).
    pub fn mean_len(&self) -> f64 {
        match self {
            FrameSource::Template(s) => s.spec().sizes.mean(),
            FrameSource::Frames(f) if !f.is_empty() => {
                f.iter().map(Vec::len).sum::<usize>() as f64 / f.len() as f64
            }
            FrameSource::Frames(_) => 0.0,
        }
    }

    /// Writes frame number `i` of stream `stream` into `p` (its flow is `i` modulo the flow
    /// count, its sequence number `i`).
    ///
    /// # Errors
    /// [`Error::Config`](rawq::Error::Config) if the frame does not fit the packet's buffer.
    #[inline]
    pub fn fill(&self, p: &mut Packet, i: u64, stream: u16) -> Result<()> {
        match self {
            FrameSource::Template(st) => {
                let len = st.spec().sizes.size(i) as usize;
                if len > p.len() + p.tailroom() {
                    return fill_chained(p, len, |b| st.write(b, len, i as u32, stream, i));
                }
                p.set_len(len)?;
                st.write(p.data_mut(), len, i as u32, stream, i);
                Ok(())
            }
            FrameSource::Frames(f) if !f.is_empty() => {
                let frame = &f[(i % f.len() as u64) as usize];
                if frame.len() > p.len() + p.tailroom() {
                    return fill_chained(p, frame.len(), |b| b.copy_from_slice(frame));
                }
                p.copy_from_slice(frame)
            }
            FrameSource::Frames(_) => p.set_len(0),
        }
    }

    /// Writes frames `first`, `first + 1`, … of stream `stream` into `pkts` (fresh packets, one
    /// frame each): exactly what [`FrameSource::fill`] writes into each in turn. A template
    /// with one frame size and a plain shape (UDP, no ranges, no latency room) writes the
    /// burst in one loop: each frame a copy of the complete first frame and a store of the
    /// few words that vary between frames (none with one flow and no stamps), their checksum
    /// sums settled once a burst (the per-frame path's size lookup, checks, writer call and
    /// sums cost more than twice as much).
    ///
    /// # Errors
    /// As [`FrameSource::fill`], for the first packet that fails (those before it are
    /// written).
    pub fn fill_burst(&self, pkts: &mut [Packet], first: u64, stream: u16) -> Result<()> {
        if let FrameSource::Template(st) = self {
            if let Some(r) = st.fill_fixed(pkts, first, stream, |p, i| self.fill(p, i, stream)) {
                return r;
            }
        }
        for (k, p) in pkts.iter_mut().enumerate() {
            self.fill(p, first.wrapping_add(k as u64), stream)?;
        }
        Ok(())
    }
}

thread_local! {
    /// Where a frame larger than one buffer is written before it is split over a chain.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A jumbo frame (longer than `p`'s buffer): written whole by `write` into a scratch area (so
/// that a template's checksums cover all of it), then spread over `p` and as many further
/// buffers of its pool as it needs, chained (sent as one frame by the backends that send
/// chains: DV and the model as a gather list, verbs as SGEs, AF_XDP as a multi-buffer
/// descriptor run). The slow path of [`FrameSource::fill`]: one copy per frame.
#[cold]
fn fill_chained(p: &mut Packet, len: usize, write: impl FnOnce(&mut [u8])) -> Result<()> {
    if p.segment_count() != 1 {
        return Err(rawq::Error::Config(
            "a generator fills a fresh single-buffer packet, not a chain".into(),
        ));
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        s.clear();
        s.resize(len, 0);
        write(&mut s[..len]);
        let first = p.len() + p.tailroom();
        p.set_len(first)?;
        p.data_mut().copy_from_slice(&s[..first]);
        let mut at = first;
        while at < len {
            let mut seg = p.alloc_segment()?;
            let k = (seg.tailroom()).min(len - at);
            seg.copy_from_slice(&s[at..at + k])?;
            p.chain(seg)?;
            at += k;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FlowVary, FrameSpec, SizeSpec};
    use rawq::Packet;

    #[test]
    fn fills_templates_and_cycles_frames() {
        let pool = crate::test_pool(32);
        let mut p = pool.alloc().unwrap();
        let frames = FrameSource::Frames(vec![vec![1; 60], vec![2; 100]]);
        assert_eq!((frames.max_len(), frames.mean_len()), (100, 80.0));
        for i in 0..4u64 {
            frames.fill(&mut p, i, 0).unwrap();
            assert_eq!(p.len(), if i % 2 == 0 { 60 } else { 100 });
        }
        let t = FrameSource::Template(
            Stamper::new(FrameSpec {
                dst_mac: [2, 0, 0, 0, 0, 2],
                src_mac: [2, 0, 0, 0, 0, 1],
                src_ip: "10.0.0.1".parse().unwrap(),
                dst_ip: "10.0.0.2".parse().unwrap(),
                src_port: 1,
                dst_port: 2,
                flows: 1,
                vary: FlowVary::SrcPort,
                sizes: SizeSpec::Range(64, 65),
                stamp: true,
            })
            .unwrap(),
        );
        t.fill(&mut p, 1, 7).unwrap();
        assert_eq!(p.len(), 65);
        let s = Stamper::read_stamp(p.data()).unwrap();
        assert_eq!((s.stream, s.seq), (7, 1));
        // A jumbo frame spreads over a chain of the pool's buffers, byte-exact.
        let jumbo: Vec<u8> = (0..9000u32).map(|k| (k * 7) as u8).collect();
        let big = FrameSource::Frames(vec![jumbo.clone()]);
        let mut q = pool.alloc().unwrap();
        big.fill(&mut q, 0, 0).unwrap();
        assert!(q.segment_count() >= 5);
        assert_eq!(q.to_vec(), jumbo);
        drop(q);
        let t9 = FrameSource::Template(
            Stamper::new(FrameSpec {
                dst_mac: [2, 0, 0, 0, 0, 2],
                src_mac: [2, 0, 0, 0, 0, 1],
                src_ip: "10.0.0.1".parse().unwrap(),
                dst_ip: "10.0.0.2".parse().unwrap(),
                src_port: 1,
                dst_port: 2,
                flows: 1,
                vary: FlowVary::SrcPort,
                sizes: SizeSpec::Range(9000, 9001),
                stamp: true,
            })
            .unwrap(),
        );
        let mut r = pool.alloc().unwrap();
        t9.fill(&mut r, 0, 3).unwrap();
        assert_eq!(r.len(), 9000);
        let s = Stamper::read_stamp(&r.to_vec()).unwrap();
        assert_eq!((s.stream, s.seq), (3, 0));
    }

    /// A template of `flows` flows varying `vary`, sizes `sizes`, over IPv4 or IPv6.
    fn template(v6: bool, vary: FlowVary, flows: u32, sizes: SizeSpec, stamp: bool) -> FrameSource {
        let (src, dst) = if v6 {
            ("2001:db8::1", "2001:db8::9")
        } else {
            ("10.1.0.1", "10.1.0.9")
        };
        FrameSource::Template(
            Stamper::new(FrameSpec {
                dst_mac: [2, 0, 0, 0, 0, 2],
                src_mac: [2, 0, 0, 0, 0, 1],
                src_ip: src.parse().unwrap(),
                dst_ip: dst.parse().unwrap(),
                src_port: 65530,
                dst_port: 9000,
                flows,
                vary,
                sizes,
                stamp,
            })
            .unwrap(),
        )
    }

    /// `fill_burst` writes exactly the frames `fill` writes one by one (bytes, lengths, chains),
    /// for every fast shape and the general one, fixed sizes (of at most 64 bytes too) and
    /// varying sizes, captured frames, flow counters wrapping inside a burst and at 2^32
    /// frames, stamps' 48-bit sequence numbers wrapping inside a burst (40-bit ones with a
    /// trial mark), and frames too long for one buffer.
    #[test]
    fn fill_burst_writes_what_fill_writes() {
        let pool = crate::test_pool(512);
        let mut sources = vec![FrameSource::Frames(vec![
            vec![1; 60],
            vec![2; 100],
            vec![3; 3000],
        ])];
        for v6 in [false, true] {
            for vary in [FlowVary::SrcPort, FlowVary::SrcIp] {
                for stamp in [false, true] {
                    for flows in [1, 5, 32, 1000] {
                        // 64 bytes: the burst's copy from registers (32..=64 bytes).
                        let small = SizeSpec::Fixed(if v6 && stamp { 78 } else { 64 });
                        for sizes in [small, SizeSpec::Fixed(130), SizeSpec::Range(120, 140)] {
                            sources.push(template(v6, vary, flows, sizes, stamp));
                        }
                    }
                }
            }
        }
        // Longer than one buffer: chained, as by `fill`.
        sources.push(template(
            false,
            FlowVary::SrcPort,
            3,
            SizeSpec::Fixed(5000),
            true,
        ));
        // The general writer (a VLAN tag).
        sources.push(FrameSource::Template(
            Stamper::with_shape(
                FrameSpec {
                    flows: 7,
                    sizes: SizeSpec::Fixed(100),
                    ..match template(false, FlowVary::SrcPort, 7, SizeSpec::Fixed(100), true) {
                        FrameSource::Template(s) => s.spec().clone(),
                        FrameSource::Frames(_) => unreachable!(),
                    }
                },
                crate::Shape {
                    vlans: vec![crate::Vlan { id: 7, pcp: 1 }],
                    ..Default::default()
                },
            )
            .unwrap(),
        ));
        // Trial marks (RFC 2544): the fast shapes and the general one, with sequence numbers
        // wrapping at 40 bits inside a burst.
        for (v6, sizes) in [(false, SizeSpec::Fixed(64)), (true, SizeSpec::Fixed(130))] {
            for shape in [
                crate::Shape::default(),
                crate::Shape {
                    vlans: vec![crate::Vlan { id: 7, pcp: 1 }],
                    ..Default::default()
                },
            ] {
                let spec = match template(v6, FlowVary::SrcIp, 5, sizes.clone(), true) {
                    FrameSource::Template(s) => s.spec().clone(),
                    FrameSource::Frames(_) => unreachable!(),
                };
                let st = Stamper::with_shape(spec, crate::Shape { mark: 200, ..shape }).unwrap();
                assert_eq!(st.mark(), 200);
                sources.push(FrameSource::Template(st));
            }
        }
        let mut checked = 0;
        for src in &sources {
            let firsts = [
                0u64,
                3,
                997,
                (1 << 32) - 20,
                (1 << 32) + 5,
                (1 << 40) - 9,
                (1 << 48) - 9,
                1 << 50,
            ];
            for first in firsts {
                for n in [1usize, 7, 32] {
                    let mut burst: Vec<Packet> = (0..n).map(|_| pool.alloc().unwrap()).collect();
                    src.fill_burst(&mut burst, first, 9).unwrap();
                    for (k, b) in burst.iter().enumerate() {
                        let mut one = pool.alloc().unwrap();
                        src.fill(&mut one, first + k as u64, 9).unwrap();
                        assert_eq!(b.segment_count(), one.segment_count());
                        assert_eq!(b.to_vec(), one.to_vec(), "frame {} of {first}", k);
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, sources.len() * 8 * (1 + 7 + 32));
    }
}
