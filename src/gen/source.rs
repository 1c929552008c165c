//! Where a generator's frames come from: a template, or a list of captured frames.

use crate::error::Result;
use crate::packet::Packet;

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
    /// [`Error::Config`](crate::Error::Config) if the frame does not fit the packet's buffer.
    #[inline]
    pub fn fill(&self, p: &mut Packet, i: u64, stream: u16) -> Result<()> {
        match self {
            FrameSource::Template(st) => {
                let len = st.spec().sizes.size(i) as usize;
                p.set_len(len)?;
                st.write(p.data_mut(), len, i as u32, stream, i);
                Ok(())
            }
            FrameSource::Frames(f) if !f.is_empty() => {
                p.copy_from_slice(&f[(i % f.len() as u64) as usize])
            }
            FrameSource::Frames(_) => p.set_len(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{FlowVary, FrameSpec, SizeSpec};
    use crate::{HugePages, Mempool, MempoolConfig};

    #[test]
    fn fills_templates_and_cycles_frames() {
        let pool = Mempool::new(&MempoolConfig {
            buffers: 8,
            huge_pages: HugePages::Never,
            ..Default::default()
        })
        .unwrap();
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
        let big = FrameSource::Frames(vec![vec![0; 4000]]);
        assert!(
            big.fill(&mut p, 0, 0).is_err(),
            "too long for a 2 KiB buffer"
        );
    }
}
