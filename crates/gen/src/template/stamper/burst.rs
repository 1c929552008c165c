//! Writing a burst of frames of one length (`SizeSpec::Fixed`): each frame is a copy of the
//! stamper's complete frame 0 of that length (its template then: lengths and both checksums in
//! place), held in registers for the burst when it is 32 to 64 bytes, with only the words that
//! vary between frames stored after it; their checksum sums are settled once a burst and step
//! with the frame (RFC 1624: one's-complement sums only need to agree modulo 0xffff), and the
//! flow index is counted up instead of divided. A template whose frames are all alike (one
//! flow, no stamps) is a copy a frame and nothing else.

use super::write::Fast;
use super::Stamper;
use crate::template::{csum_fold, words32, words64};
use crate::template::{IP4, IP6, SEQ_MAGIC, STAMP_LEN, UDP};
use rawq::error::Result;
use rawq::Packet;

/// A frame of `frame`'s bytes written into packets: two overlapping 32-byte stores from
/// registers for frames of 32 to 64 bytes (the smallest, where a call to `memcpy` costs as
/// much as the rest of the frame and makes the caller keep its values on the stack), a slice
/// copy otherwise.
struct FrameCopy<'a> {
    frame: &'a [u8],
    head: [u8; 32],
    tail: [u8; 32],
    small: bool,
}

impl<'a> FrameCopy<'a> {
    #[inline(always)]
    fn new(frame: &'a [u8]) -> FrameCopy<'a> {
        let n = frame.len();
        let small = (32..=64).contains(&n);
        let (mut head, mut tail) = ([0u8; 32], [0u8; 32]);
        if small {
            head.copy_from_slice(&frame[..32]);
            tail.copy_from_slice(&frame[n - 32..]);
        }
        FrameCopy {
            frame,
            head,
            tail,
            small,
        }
    }

    /// Writes the frame into `out`, exactly as long as the frame; `SMALL`: the frame is 32 to
    /// 64 bytes long (`small`).
    #[inline(always)]
    fn put<const SMALL: bool>(&self, out: &mut [u8]) {
        let n = out.len();
        if SMALL && n >= 32 {
            out[..32].copy_from_slice(&self.head);
            out[n - 32..].copy_from_slice(&self.tail);
        } else {
            out.copy_from_slice(self.frame);
        }
    }
}

/// What writes a run of frames, one after the other.
trait Frames {
    /// Whether the frames are 32 to 64 bytes long (see [`FrameCopy`]).
    fn small(&self) -> bool;
    /// Writes the next frame into `out` (exactly the frame's length); `SMALL`: `small()`.
    fn write<const SMALL: bool>(&mut self, out: &mut [u8]);
    /// Steps over the next frame (written by the slow path).
    fn skip(&mut self);
}

/// Writes the frames of `w` into `pkts` in turn: into a packet's first `len` bytes (set as
/// its length) when the frame fits it as one buffer, else by handing it to `slow` with its
/// frame number (`first` + its place).
#[inline(always)]
fn each_frame(
    pkts: &mut [Packet],
    len: usize,
    first: u64,
    slow: &mut impl FnMut(&mut Packet, u64) -> Result<()>,
    w: &mut impl Frames,
) -> Result<()> {
    // (Settled here, a frame's length is known to fit the handle's 16-bit length.)
    if len > u16::MAX as usize {
        for (k, p) in pkts.iter_mut().enumerate() {
            slow(p, first + k as u64)?;
        }
        return Ok(());
    }
    // One loop for small frames and one for the others: the copy's choice is made once.
    if w.small() {
        frames_loop::<true>(pkts, len, first, slow, w)
    } else {
        frames_loop::<false>(pkts, len, first, slow, w)
    }
}

/// [`each_frame`]'s loop.
#[inline(always)]
fn frames_loop<const SMALL: bool>(
    pkts: &mut [Packet],
    len: usize,
    first: u64,
    slow: &mut impl FnMut(&mut Packet, u64) -> Result<()>,
    w: &mut impl Frames,
) -> Result<()> {
    let n = pkts.len();
    let mut it = pkts.iter_mut();
    while let Some(p) = it.next() {
        // `data().len() + tailroom()` is `set_len`'s own bound for one buffer (so its check
        // folds into this one), without `len() + tailroom()`'s two lengths.
        if p.segment_count() == 1 && len <= p.data().len() + p.tailroom() {
            p.set_len(len)?;
            w.write::<SMALL>(&mut p.data_mut()[..len]);
        } else {
            slow(p, first + (n - it.len() - 1) as u64)?;
            w.skip();
        }
    }
    Ok(())
}

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
        if !self.complete {
            return None;
        }
        Some(match self.fast {
            Fast::General => return None,
            Fast::Udp4 { ip, stamp } => match (ip, stamp) {
                (false, false) => self.burst_udp::<false, false, false>(pkts, first, stream, slow),
                (false, true) => self.burst_udp::<false, false, true>(pkts, first, stream, slow),
                (true, false) => self.burst_udp::<false, true, false>(pkts, first, stream, slow),
                (true, true) => self.burst_udp::<false, true, true>(pkts, first, stream, slow),
            },
            Fast::Udp6 { ip, stamp } => match (ip, stamp) {
                (false, false) => self.burst_udp::<true, false, false>(pkts, first, stream, slow),
                (false, true) => self.burst_udp::<true, false, true>(pkts, first, stream, slow),
                (true, false) => self.burst_udp::<true, true, false>(pkts, first, stream, slow),
                (true, true) => self.burst_udp::<true, true, true>(pkts, first, stream, slow),
            },
        })
    }

    /// [`Stamper::fill_fixed`] for one plain shape.
    fn burst_udp<const V6: bool, const IP: bool, const STAMP: bool>(
        &self,
        pkts: &mut [Packet],
        first: u64,
        stream: u16,
        mut slow: impl FnMut(&mut Packet, u64) -> Result<()>,
    ) -> Result<()> {
        let flows = self.flows.get();
        if !STAMP && flows == 1 {
            return copy_run(pkts, &self.tmpl, first, &mut slow);
        }
        let n = pkts.len() as u64;
        if STAMP && (first & self.seq_mask) + n > self.seq_mask {
            // The stamps' sequence numbers wrap inside this burst (after 2^48 frames, 2^40
            // with a trial mark): frame by frame.
            for (k, p) in pkts.iter_mut().enumerate() {
                slow(p, first.wrapping_add(k as u64))?;
            }
            return Ok(());
        }
        // The per-frame writer's flow is `(i as u32) % flows`: it restarts at 0 where `i as
        // u32` wraps, which splits the burst there.
        let to_wrap = (1u64 << 32) - (first & 0xffff_ffff);
        let (a, b) = pkts.split_at_mut(to_wrap.min(n) as usize);
        self.udp_run::<V6, IP, STAMP>(a, first, (first as u32) % flows, stream, &mut slow)?;
        if !b.is_empty() {
            self.udp_run::<V6, IP, STAMP>(b, first + to_wrap, 0, stream, &mut slow)?;
        }
        Ok(())
    }

    /// Frames `first`, `first + 1`, … into `pkts`, the first one of flow `flow` (the flows
    /// following on without wrapping `first as u32`, the sequence numbers without wrapping
    /// their 48 bits, or 40 with a trial mark).
    #[inline(always)]
    fn udp_run<const V6: bool, const IP: bool, const STAMP: bool>(
        &self,
        pkts: &mut [Packet],
        first: u64,
        flow: u32,
        stream: u16,
        slow: &mut impl FnMut(&mut Packet, u64) -> Result<()>,
    ) -> Result<()> {
        let frame = &self.tmpl[..];
        let len = frame.len();
        let flows = self.flows.get();
        let l4_len = (len - self.l4) as u16;
        let [l4c, ipc] = self.len_sums[len];
        let src_hi = self.src_lo & 0xffff_0000;
        // The transport sum of everything but the varying words (`l4c`: the constant words,
        // both lengths, the payload), plus the ports that do not vary, the stamp's constant
        // words and its first sequence number; the sum of frame `k` of the run adds `k`
        // (the sequence number's words sum to it modulo 0xffff) and the varying words.
        let mut sum = l4c + self.dst_port as u32;
        let mut ip_sum = ipc;
        if IP {
            sum += self.src_port as u32 + (src_hi >> 16);
            ip_sum += src_hi >> 16;
        }
        if STAMP {
            sum += words32(SEQ_MAGIC) + stream as u32 + words64(self.stamped_seq(first));
        }
        let mut w = UdpFrames::<V6, IP, STAMP> {
            copy: FrameCopy::new(frame),
            l3: self.l3,
            flow,
            flows,
            sum,
            ip_sum,
            src_hi,
            src_lo16: self.src_lo as u16,
            skip_from: self.skip_from,
            src_port: self.src_port,
            udp_word: (self.dst_port as u64) << 32 | (l4_len as u64) << 16,
            stamp_hi: (SEQ_MAGIC as u64) << 32 | (stream as u64) << 16,
            stamp_lo: ((flows - 1) as u64) << 48 | self.stamped_seq(first),
        };
        each_frame(pkts, len, first, slow, &mut w)
    }
}

/// A run of plain frames (see [`Stamper::udp_run`]): the settled values and the ones that
/// step with the frame.
struct UdpFrames<'a, const V6: bool, const IP: bool, const STAMP: bool> {
    copy: FrameCopy<'a>,
    l3: usize,
    /// This frame's flow, below `flows`.
    flow: u32,
    flows: u32,
    /// This frame's transport sum but for the source port or address word and the stamp's
    /// flow.
    sum: u32,
    /// The IPv4 header's sum but for the source address's last 16 bits.
    ip_sum: u32,
    /// The source address's last 32 bits: the upper 16, the lower 16 of flow 0.
    src_hi: u32,
    src_lo16: u16,
    skip_from: u32,
    src_port: u16,
    /// Destination port and UDP length in place in the UDP header's 8 bytes (as a
    /// big-endian number).
    udp_word: u64,
    /// The stamp's magic and stream, and its flows - 1 and this frame's sequence number, in
    /// place in its two 8-byte halves.
    stamp_hi: u64,
    stamp_lo: u64,
}

impl<const V6: bool, const IP: bool, const STAMP: bool> Frames for UdpFrames<'_, V6, IP, STAMP> {
    #[inline(always)]
    fn small(&self) -> bool {
        self.copy.small
    }

    #[inline(always)]
    fn write<const SMALL: bool>(&mut self, out: &mut [u8]) {
        let ip_len = if V6 { IP6 } else { IP4 };
        let hdr = ip_len + UDP + if STAMP { STAMP_LEN } else { 0 };
        self.copy.put::<SMALL>(out);
        let h = &mut out[self.l3..self.l3 + hdr];
        let flow = self.flow;
        let mut s = self.sum;
        let port = if IP {
            // The last 16 bits of the source: base + flow, stepping over the destination.
            let k = flow + (flow >= self.skip_from) as u32;
            let lo16 = self.src_lo16.wrapping_add(k as u16);
            let off = if V6 { 20 } else { 12 };
            h[off..off + 4].copy_from_slice(&(self.src_hi | lo16 as u32).to_be_bytes());
            s += lo16 as u32;
            if !V6 {
                h[10..12].copy_from_slice(&csum_fold(self.ip_sum + lo16 as u32).to_be_bytes());
            }
            0
        } else {
            let port = self.src_port.wrapping_add(flow as u16);
            s += port as u32;
            port
        };
        if STAMP {
            let st = ip_len + UDP;
            let hi = self.stamp_hi | flow as u64;
            h[st..st + 8].copy_from_slice(&hi.to_be_bytes());
            h[st + 8..st + 16].copy_from_slice(&self.stamp_lo.to_be_bytes());
            s += flow;
        }
        let mut c = csum_fold(s);
        if c == 0 {
            c = 0xffff; // 0 means "no checksum" for UDP over IPv4 and is invalid over IPv6
        }
        if IP {
            h[ip_len + 6..ip_len + 8].copy_from_slice(&c.to_be_bytes());
        } else {
            let udp = self.udp_word | (port as u64) << 48 | c as u64;
            h[ip_len..ip_len + 8].copy_from_slice(&udp.to_be_bytes());
        }
        self.skip();
    }

    /// The next frame's flow (counted up to `flows` and back to 0) and, with stamps, its
    /// sequence number (up by one, in the stamp and in the sum).
    #[inline(always)]
    fn skip(&mut self) {
        self.flow += 1;
        if self.flow == self.flows {
            self.flow = 0;
        }
        if STAMP {
            self.sum += 1;
            self.stamp_lo += 1;
        }
    }
}

impl Frames for FrameCopy<'_> {
    #[inline(always)]
    fn small(&self) -> bool {
        self.small
    }

    #[inline(always)]
    fn write<const SMALL: bool>(&mut self, out: &mut [u8]) {
        self.put::<SMALL>(out)
    }

    #[inline(always)]
    fn skip(&mut self) {}
}

/// A burst of identical frames (one flow, no stamps): each a copy of `frame`.
fn copy_run(
    pkts: &mut [Packet],
    frame: &[u8],
    first: u64,
    slow: &mut impl FnMut(&mut Packet, u64) -> Result<()>,
) -> Result<()> {
    each_frame(pkts, frame.len(), first, slow, &mut FrameCopy::new(frame))
}
