//! The per-frame writers: copy the template prefix, store the varying words, finish both
//! checksums from the constant sums.

use super::Stamper;
use crate::template::{csum_fold, words32, words64};
use crate::template::{IP4, IP6, LAT_MAGIC, LAT_STAMP, SEQ_MAGIC, STAMP_LEN, UDP};

/// Which writer [`Stamper::write_at`] runs, decided once per [`Stamper`]: the plain shapes
/// (UDP, no ranges, no latency room; any VLAN tags) each get a writer that stores only the
/// varying words with a few wide stores and sums only them; everything else runs the general
/// writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fast {
    General,
    /// UDP over IPv4 / IPv6; `ip`: flows vary the source address (else the source port);
    /// `stamp`: a 16-byte sequence stamp follows the UDP header.
    Udp4 {
        ip: bool,
        stamp: bool,
    },
    Udp6 {
        ip: bool,
        stamp: bool,
    },
}

/// A [`Stamper`] writer: `write_at`'s arguments.
pub(super) type WriteFn = fn(&Stamper, &mut [u8], usize, u32, u16, u64, Option<u64>);

impl Fast {
    pub(super) fn writer(self) -> WriteFn {
        match self {
            Fast::General => Stamper::write_general,
            Fast::Udp4 { ip, stamp } => match (ip, stamp) {
                (false, false) => Stamper::write_udp::<false, false, false>,
                (false, true) => Stamper::write_udp::<false, false, true>,
                (true, false) => Stamper::write_udp::<false, true, false>,
                (true, true) => Stamper::write_udp::<false, true, true>,
            },
            Fast::Udp6 { ip, stamp } => match (ip, stamp) {
                (false, false) => Stamper::write_udp::<true, false, false>,
                (false, true) => Stamper::write_udp::<true, false, true>,
                (true, false) => Stamper::write_udp::<true, true, false>,
                (true, true) => Stamper::write_udp::<true, true, true>,
            },
        }
    }
}

/// `dst.copy_from_slice(src)`. Frames of 32 to 64 bytes (the smallest, where a call to
/// `memcpy` costs as much as writing the rest of the frame and makes the caller keep its
/// values on the stack) are two overlapping 32-byte copies, inline.
#[inline(always)]
fn copy_frame(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n == dst.len() && (32..=64).contains(&n) {
        dst[..32].copy_from_slice(&src[..32]);
        dst[n - 32..].copy_from_slice(&src[n - 32..]);
    } else {
        dst.copy_from_slice(src);
    }
}

impl Stamper {
    /// A stamp's first 16 bytes, big-endian, for one store: magic, stream, flow, flows - 1 and
    /// the low 48 bits of `seq` (with a trial mark: the mark, then the low 40 bits); and what
    /// they add to the transport checksum sum (flows - 1 is in the constant sum already). Both
    /// writers stamp through it.
    #[inline(always)]
    fn stamp_word(&self, magic: u32, stream: u16, flow: u32, seq: u64) -> ([u8; STAMP_LEN], u32) {
        let seq = self.stamped_seq(seq);
        let hi = (magic as u64) << 32 | (stream as u64) << 16 | flow as u64;
        let lo = ((self.flows.get() - 1) as u64) << 48 | seq;
        let word = (hi as u128) << 64 | lo as u128;
        let sum = words32(magic) + stream as u32 + flow + words64(seq);
        (word.to_be_bytes(), sum)
    }

    /// The plain writers: UDP over IPv4 (`V6` false) or IPv6, flows varying the source address
    /// (`IP`) or port, with or without a sequence stamp (`STAMP`).
    fn write_udp<const V6: bool, const IP: bool, const STAMP: bool>(
        &self,
        out: &mut [u8],
        len: usize,
        flow: u32,
        stream: u16,
        seq: u64,
        _tx_ns: Option<u64>,
    ) {
        let sums = self.len_sums[len];
        let flow = flow % self.flows;
        self.udp_frame::<V6, IP, STAMP>(
            &mut out[..len],
            &self.tmpl[..len],
            sums,
            flow,
            stream,
            seq,
        );
    }

    /// One plain frame (see [`Stamper::write_udp`]) as long as `out`: `tmpl` is the
    /// template's first `out.len()` bytes, `[l4c, ipc]` that length's `len_sums` entry, `flow`
    /// already below the flow count. The header block from the IP header to the stamp's end is
    /// one slice of constant length, so no store below is bounds-checked; the varying words go
    /// out in a few wide stores. (The burst writer, `burst`, copies a complete frame 0
    /// instead and stores only the words that vary between frames.)
    #[inline(always)]
    fn udp_frame<const V6: bool, const IP: bool, const STAMP: bool>(
        &self,
        out: &mut [u8],
        tmpl: &[u8],
        [l4c, ipc]: [u32; 2],
        flow: u32,
        stream: u16,
        seq: u64,
    ) {
        let len = out.len();
        copy_frame(out, tmpl);
        let l3 = self.l3;
        let ip_len = if V6 { IP6 } else { IP4 };
        let hdr = ip_len + UDP + if STAMP { STAMP_LEN } else { 0 };
        let h = &mut out[l3..l3 + hdr];
        let mut src_words = 0;
        let src_port = if IP {
            // The last 16 bits of the source: base + flow, stepping over the destination.
            let k = flow + (flow >= self.skip_from) as u32;
            let lo16 = (self.src_lo as u16).wrapping_add(k as u16);
            let src = (self.src_lo & 0xffff_0000) | lo16 as u32;
            let off = if V6 { 20 } else { 12 };
            h[off..off + 4].copy_from_slice(&src.to_be_bytes());
            src_words = words32(src);
            self.src_port
        } else {
            self.src_port.wrapping_add(flow as u16)
        };
        let ports = (src_port as u32) << 16 | self.dst_port as u32;
        let mut l4_sum = l4c + src_words + words32(ports);
        if STAMP {
            let (stamp, sum) = self.stamp_word(SEQ_MAGIC, stream, flow, seq);
            let p = ip_len + UDP;
            h[p..p + STAMP_LEN].copy_from_slice(&stamp);
            l4_sum += sum;
        }
        let mut c = csum_fold(l4_sum);
        if c == 0 {
            c = 0xffff; // 0 means "no checksum" for UDP over IPv4 and is invalid over IPv6
        }
        let l4_len = (len - self.l4) as u16;
        // Ports, UDP length, UDP checksum: one 8-byte store.
        let udp = (ports as u64) << 32 | (l4_len as u64) << 16 | c as u64;
        h[ip_len..ip_len + 8].copy_from_slice(&udp.to_be_bytes());
        if V6 {
            h[4..6].copy_from_slice(&l4_len.to_be_bytes());
        } else {
            let tot = (len - l3) as u16;
            let ipcs = if IP {
                csum_fold(ipc + src_words)
            } else {
                ipc as u16 // already the checksum
            };
            // Total length .. checksum: bytes 2..12 hold total length, id, flags, TTL,
            // protocol, checksum; only the lengths and the checksum vary.
            h[2..4].copy_from_slice(&tot.to_be_bytes());
            h[10..12].copy_from_slice(&ipcs.to_be_bytes());
        }
    }

    /// The writer for every shape.
    fn write_general(
        &self,
        out: &mut [u8],
        len: usize,
        flow: u32,
        stream: u16,
        seq: u64,
        tx_ns: Option<u64>,
    ) {
        let (l3, l4) = (self.l3, self.l4);
        let out = &mut out[..len];
        out.copy_from_slice(&self.tmpl[..len]);
        let flow = flow % self.flows;
        let v = self.flow_vals(flow);
        let l4_len = (len - l4) as u16;
        // Only these few words vary: both checksums are the precomputed sums of everything
        // else plus these words and the payload's precomputed sum.
        let mut ip_sum = self.ip_base;
        let mut l4_sum = self.l4_base + l4_len as u32; // pseudo-header length
        let ports = (v.src_port as u32) << 16 | v.dst_port as u32;
        out[l4..l4 + 4].copy_from_slice(&ports.to_be_bytes());
        l4_sum += words32(ports);
        let mut addr = 0;
        if self.addr_varies {
            out[self.src_off..self.src_off + 4].copy_from_slice(&v.src_lo.to_be_bytes());
            out[self.dst_off..self.dst_off + 4].copy_from_slice(&v.dst_lo.to_be_bytes());
            addr = words32(v.src_lo) + words32(v.dst_lo);
            l4_sum += addr;
        }
        if !self.tcp {
            out[l4 + 4..l4 + 6].copy_from_slice(&l4_len.to_be_bytes());
            l4_sum += l4_len as u32;
        }
        if self.v4 {
            let tot = (len - l3) as u16;
            out[l3 + 2..l3 + 4].copy_from_slice(&tot.to_be_bytes());
            ip_sum += addr + tot as u32;
            let c = csum_fold(ip_sum);
            out[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        } else {
            out[l3 + 4..l3 + 6].copy_from_slice(&l4_len.to_be_bytes());
        }
        if self.stamp_len > 0 {
            let p = self.pay - self.stamp_len;
            let s = &mut out[p..p + self.stamp_len];
            let lat = tx_ns.filter(|_| self.stamp_len == LAT_STAMP);
            let magic = if lat.is_some() { LAT_MAGIC } else { SEQ_MAGIC };
            let (stamp, sum) = self.stamp_word(magic, stream, flow, seq);
            s[0..16].copy_from_slice(&stamp);
            l4_sum += sum;
            if let Some(t) = lat {
                s[16..24].copy_from_slice(&t.to_be_bytes());
                l4_sum += words64(t);
            }
        }
        let mut c = csum_fold(l4_sum + self.payload_sum[len - self.pay]);
        if self.tcp {
            out[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        } else {
            if c == 0 {
                c = 0xffff; // 0 means "no checksum" for UDP over IPv4 and is invalid over IPv6
            }
            out[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{FlowVary, FrameSpec, Shape, SizeSpec, Vlan};

    /// Every plain shape's fast writer writes exactly the general writer's bytes: v4 and v6,
    /// source port or address varying (with the destination inside the source's /16, so the
    /// skip is exercised, and outside it), with and without stamps, with 0..=2 VLAN tags,
    /// over a size range, flow indices past `flows` and sequence numbers past 48 bits.
    #[test]
    fn fast_writers_match_general_writer() {
        let addrs = [
            ("10.0.0.1", "10.0.0.9"),
            ("10.1.0.1", "10.0.255.9"),
            ("2001:db8::1", "2001:db8::9"),
            ("2001:db8::1:1", "2001:db8::ffff"),
        ];
        let mut checked = 0;
        for (src, dst) in addrs {
            for vary in [FlowVary::SrcPort, FlowVary::SrcIp] {
                for stamp in [false, true] {
                    for nv in 0..=2 {
                        for flows in [1u32, 7, 65535] {
                            let spec = FrameSpec {
                                dst_mac: [2, 0, 0, 0, 0, 2],
                                src_mac: [2, 0, 0, 0, 0, 1],
                                src_ip: src.parse().unwrap(),
                                dst_ip: dst.parse().unwrap(),
                                src_port: 65530,
                                dst_port: 9000,
                                flows,
                                vary,
                                sizes: SizeSpec::Range(90, 140),
                                stamp,
                            };
                            let shape = Shape {
                                vlans: vec![Vlan { id: 7, pcp: 3 }; nv],
                                ..Shape::default()
                            };
                            let fast = Stamper::with_shape(spec.clone(), shape.clone()).unwrap();
                            assert_ne!(fast.fast, Fast::General, "{spec:?} {shape:?}");
                            let mut gen = Stamper::with_shape(spec, shape).unwrap();
                            gen.fast = Fast::General;
                            gen.writer = Fast::General.writer();
                            for i in [0u64, 1, 6, 8, 9, 100, 65534, 65535, 70000, 1 << 50] {
                                let len = 90 + (i % 51) as usize;
                                let (mut a, mut b) = ([0xeeu8; 160], [0x11u8; 160]);
                                fast.write(&mut a, len, i as u32, 5, i);
                                gen.write(&mut b, len, i as u32, 5, i);
                                assert_eq!(a[..len], b[..len], "{src} {vary:?} {stamp} {nv} {i}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 4 * 2 * 2 * 3 * 3 * 10);
    }

    /// With one frame size the template is the complete frame 0 (see `Stamper::complete`):
    /// the fast writers copying it still write the general writer's bytes from a template of
    /// zeros (a stamper of two sizes), for every plain shape, 64 and 130 bytes.
    #[test]
    fn a_complete_template_writes_what_a_zero_template_writes() {
        let mut checked = 0;
        for (src, dst) in [("10.0.0.1", "10.0.0.9"), ("2001:db8::1", "2001:db8::9")] {
            for vary in [FlowVary::SrcPort, FlowVary::SrcIp] {
                for stamp in [false, true] {
                    for len in [if src.contains(':') && stamp { 78 } else { 64 }, 130u16] {
                        let spec = |sizes| FrameSpec {
                            dst_mac: [2, 0, 0, 0, 0, 2],
                            src_mac: [2, 0, 0, 0, 0, 1],
                            src_ip: src.parse().unwrap(),
                            dst_ip: dst.parse().unwrap(),
                            src_port: 65530,
                            dst_port: 9000,
                            flows: 7,
                            vary,
                            sizes,
                            stamp,
                        };
                        let fixed = Stamper::new(spec(SizeSpec::Fixed(len))).unwrap();
                        assert!(fixed.complete && fixed.fast != Fast::General);
                        let mut gen = Stamper::new(spec(SizeSpec::Range(len, len + 1))).unwrap();
                        assert!(!gen.complete);
                        gen.fast = Fast::General;
                        gen.writer = Fast::General.writer();
                        let len = len as usize;
                        for i in [0u64, 1, 6, 7, 9, 1 << 40] {
                            let (mut a, mut b) = ([0xeeu8; 160], [0x11u8; 160]);
                            fixed.write(&mut a, len, i as u32, 5, i);
                            gen.write(&mut b, len, i as u32, 5, i);
                            assert_eq!(a[..len], b[..len], "{src} {vary:?} {stamp} {len} {i}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 2 * 2 * 2 * 2 * 6);
    }
}
