//! Writing a burst of frames of one length: the length's sums, the template slice and the
//! shape are settled once a burst, and the flow index is counted up instead of divided, so a
//! frame costs its copy and its few varying words.

use super::write::Fast;
use super::Stamper;
use crate::template::sizes::SizeSpec;
use rawq::error::Result;
use rawq::Packet;

impl Stamper {
    /// Writes frames `first`, `first + 1`, … of stream `stream` into `pkts`, byte for byte what
    /// [`Stamper::write`] writes for frame `i` (flow `i as u32`, sequence number `i`), when
    /// every frame has one length (`SizeSpec::Fixed`) and the shape has a fast writer; `None`
    /// otherwise (nothing written). A packet the frame does not fit as one buffer (a chain, a
    /// frame longer than the buffer) is handed to `slow` with its frame number.
    pub(crate) fn fill_fixed(
        &self,
        pkts: &mut [Packet],
        first: u64,
        stream: u16,
        slow: impl FnMut(&mut Packet, u64) -> Result<()>,
    ) -> Option<Result<()>> {
        let SizeSpec::Fixed(len) = self.spec.sizes else {
            return None;
        };
        let len = len as usize;
        Some(match self.fast {
            Fast::General => return None,
            Fast::Udp4 { ip, stamp } => match (ip, stamp) {
                (false, false) => {
                    self.burst_udp::<false, false, false>(pkts, len, first, stream, slow)
                }
                (false, true) => {
                    self.burst_udp::<false, false, true>(pkts, len, first, stream, slow)
                }
                (true, false) => {
                    self.burst_udp::<false, true, false>(pkts, len, first, stream, slow)
                }
                (true, true) => self.burst_udp::<false, true, true>(pkts, len, first, stream, slow),
            },
            Fast::Udp6 { ip, stamp } => match (ip, stamp) {
                (false, false) => {
                    self.burst_udp::<true, false, false>(pkts, len, first, stream, slow)
                }
                (false, true) => {
                    self.burst_udp::<true, false, true>(pkts, len, first, stream, slow)
                }
                (true, false) => {
                    self.burst_udp::<true, true, false>(pkts, len, first, stream, slow)
                }
                (true, true) => self.burst_udp::<true, true, true>(pkts, len, first, stream, slow),
            },
        })
    }

    /// [`Stamper::fill_fixed`] for one plain shape.
    fn burst_udp<const V6: bool, const IP: bool, const STAMP: bool>(
        &self,
        pkts: &mut [Packet],
        len: usize,
        first: u64,
        stream: u16,
        mut slow: impl FnMut(&mut Packet, u64) -> Result<()>,
    ) -> Result<()> {
        let (Some(&sums), Some(tmpl)) = (self.len_sums.get(len), self.tmpl.get(..len)) else {
            // Not reached: a fixed size is the template's length, with its sums.
            for (k, p) in pkts.iter_mut().enumerate() {
                slow(p, first.wrapping_add(k as u64))?;
            }
            return Ok(());
        };
        let flows = self.flows.get();
        // The per-frame writer's flow is `(i as u32) % flows`: `ctr` is `i as u32`.
        let (mut seq, mut ctr) = (first, first as u32);
        let mut flow = ctr % flows;
        for p in pkts {
            if p.segment_count() == 1 && len <= p.len() + p.tailroom() {
                p.set_len(len)?;
                self.udp_frame::<V6, IP, STAMP>(p.data_mut(), tmpl, sums, flow, stream, seq);
            } else {
                slow(p, seq)?;
            }
            seq = seq.wrapping_add(1);
            ctr = ctr.wrapping_add(1);
            flow += 1;
            if flow == flows || ctr == 0 {
                flow = 0;
            }
        }
        Ok(())
    }
}
