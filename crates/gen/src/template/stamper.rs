//! The template a [`FrameSpec`] and [`Shape`] describe, built once with the constant parts of
//! both checksums; the per-frame writers are in `write`.

use std::net::IpAddr;

use super::range::{FieldRange, RangeField, RangeMode, RangeValue};
use super::sizes::SizeSpec;
use super::spec::{FlowVary, FrameSpec, L4Kind, Payload, Shape};
use super::{checksum, csum_fold, words32};
use super::{stamp_len, ETH, IP4, IP6, MARKED_SEQ_BITS, MARK_SHIFT, SEQ_BITS, TCP, UDP};
use rawq::error::{Error, Result};

mod burst;
mod write;

use write::{Fast, WriteFn};

/// Per-flow values of the varying fields.
#[derive(Clone, Copy)]
struct FlowVals {
    src_port: u16,
    dst_port: u16,
    src_lo: u32,
    dst_lo: u32,
}

/// A range as the writer walks it.
#[derive(Clone, Copy, Debug)]
struct Walk {
    field: RangeField,
    lo: u32,
    /// Values to choose from (the destination address excluded from a source range).
    n: u64,
    /// Flow-index divisor (odometer position).
    div: u64,
    mode: RangeMode,
    /// A value to step over (the destination address in a source range).
    skip: Option<u32>,
}

impl Walk {
    #[inline]
    fn value(&self, flow: u32, salt: u64) -> u32 {
        let k = match self.mode {
            RangeMode::Inc => (flow as u64 / self.div) % self.n,
            RangeMode::Rand => mix64(flow as u64 ^ (salt << 32)) % self.n,
        };
        let v = self.lo as u64 + k;
        match self.skip {
            Some(s) if v >= s as u64 => (v + 1) as u32,
            _ => v as u32,
        }
    }
}

/// splitmix64's finaliser: a cheap, well-mixed hash.
#[inline]
fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Writes frames of a [`FrameSpec`] quickly: copy the template prefix, patch, update checksums.
pub struct Stamper {
    /// Boxed: the spec and shape are read when building and reporting, not per frame.
    spec: Box<FrameSpec>,
    shape: Box<Shape>,
    /// What the writer reads of the spec per frame.
    flows: std::num::NonZeroU32,
    vary: FlowVary,
    src_port: u16,
    dst_port: u16,
    /// Template of the largest frame; lengths, checksums, ports, the low 32 bits of both
    /// addresses and the stamp are written per frame.
    tmpl: Vec<u8>,
    v4: bool,
    l3: usize,
    l4: usize,
    tcp: bool,
    /// Bytes of stamp area (0, 16 or 24).
    stamp_len: usize,
    /// What a stamp keeps of a sequence number (48 bits; 40 with a trial mark) and the mark
    /// above them (`Shape::mark` shifted to `MARK_SHIFT`; 0 without one).
    seq_mask: u64,
    seq_base: u64,
    /// Offset of the payload past the stamp.
    pay: usize,
    /// Sum of the payload bytes for each possible length, so the transport checksum of any
    /// size is known without touching the payload: `payload_sum[n]` covers
    /// `tmpl[pay .. pay + n]`.
    payload_sum: Vec<u32>,
    /// Offsets of the low 32 bits of the source and destination addresses.
    src_off: usize,
    dst_off: usize,
    /// Whether any address word varies (else both are in the template and the constant sums).
    addr_varies: bool,
    /// Their template values.
    src_lo: u32,
    dst_lo: u32,
    /// `FlowVary::SrcIp`: step over this last-16-bit offset from the base (the destination).
    src_skip16: Option<u16>,
    walks: Vec<Walk>,
    /// IPv4 header sum of the constant words (lengths, checksum and addresses' varying words
    /// excluded).
    ip_base: u32,
    /// Transport checksum sum of the constant words: pseudo-header address words that never
    /// vary, protocol, the TCP header's constant words, the stamp's flow count.
    l4_base: u32,
    /// The writer chosen once at construction; `Fast::General` handles every shape.
    /// The shape decision (read by the tests; `writer` is what the hot path uses).
    fast: Fast,
    /// `fast`'s writer: one indirect call per frame instead of a branch tree.
    writer: WriteFn,
    /// For the fast writers, per frame length: the constant part of the UDP checksum sum
    /// (`l4_base`, both length words, the payload's sum, the fixed destination address word)
    /// and of the IPv4 header sum (`ip_base`, total length, destination word; when flows vary
    /// the port, the folded IPv4 checksum itself). Empty for `Fast::General`.
    len_sums: Vec<[u32; 2]>,
    /// `FlowVary::SrcIp` in a fast writer: the flow offset from which one is added to step
    /// over the destination (0x1_0000, never reached, when there is nothing to skip).
    skip_from: u32,
    /// With one frame size (`SizeSpec::Fixed`) and a fast writer, `tmpl` is frame 0 of stream
    /// 0 written whole (flow 0, both checksums, every length; the writers overwrite all of
    /// these), so that a burst copies it and stores only what varies between frames (see
    /// `burst`).
    complete: bool,
}

impl Stamper {
    /// Builds the template (UDP, no tags, pattern payload).
    ///
    /// # Errors
    /// As [`FrameSpec::validate`].
    pub fn new(spec: FrameSpec) -> Result<Stamper> {
        Stamper::with_shape(spec, Shape::default())
    }

    /// Builds the template with tags, TCP, payload, ranges and latency room from `shape`.
    ///
    /// `SizeSpec::Imix` whose 60-byte frames cannot hold the headers (always over IPv6) becomes
    /// [`SizeSpec::ImixSmall`]: the small frames raised to 74 bytes over IPv6 (78 with FCS, RFC
    /// 5180's IPv6 minimum) or to the headers' length when that is more; [`Stamper::spec`]
    /// shows the sizes used.
    ///
    /// # Errors
    /// As [`FrameSpec::validate_with`]; also a source range or `FlowVary::SrcIp` that cannot
    /// avoid the destination address.
    pub fn with_shape(mut spec: FrameSpec, shape: Shape) -> Result<Stamper> {
        // A range on an address fixes the address's upper bits from its first value.
        for r in &shape.ranges {
            if let RangeValue::Ip(a) = r.lo {
                match r.field {
                    RangeField::SrcIp => spec.src_ip = a,
                    RangeField::DstIp => spec.dst_ip = a,
                    _ => {}
                }
            }
        }
        if spec.sizes == SizeSpec::Imix {
            let floor = if spec.src_ip.is_ipv4() { 60 } else { 74 };
            let small = (spec.min_len_with(&shape) as u16).max(floor);
            if small > 60 {
                spec.sizes = SizeSpec::ImixSmall(small);
            }
        }
        if let SizeSpec::ImixSmall(n) = spec.sizes {
            if n > 590 {
                return Err(Error::Config(format!(
                    "IMIX small frames of {n} bytes: at most 590"
                )));
            }
        }
        spec.validate_with(&shape)?;
        let max = spec.sizes.bounds().1 as usize;
        let v4 = spec.src_ip.is_ipv4();
        let tcp = shape.l4 != L4Kind::Udp;
        let l3 = ETH + 4 * shape.vlans.len();
        let l4 = l3 + if v4 { IP4 } else { IP6 };
        let stamp_len = stamp_len(spec.stamp, shape.latency);
        let pay = l4 + if tcp { TCP } else { UDP } + stamp_len;
        let mut t = vec![0u8; max];
        t[0..6].copy_from_slice(&spec.dst_mac);
        t[6..12].copy_from_slice(&spec.src_mac);
        let mut o = 12;
        for (i, v) in shape.vlans.iter().enumerate() {
            // 802.1ad: the outer tag of two carries TPID 0x88a8, the inner (or only) 0x8100.
            let tpid: u16 = if i + 1 < shape.vlans.len() {
                0x88a8
            } else {
                0x8100
            };
            let tci = (v.pcp as u16) << 13 | v.id;
            t[o..o + 2].copy_from_slice(&tpid.to_be_bytes());
            t[o + 2..o + 4].copy_from_slice(&tci.to_be_bytes());
            o += 4;
        }
        t[o..o + 2].copy_from_slice(&(if v4 { 0x0800u16 } else { 0x86dd }).to_be_bytes());
        let proto: u8 = if tcp { 6 } else { 17 };
        let (src_off, dst_off, src_lo, dst_lo);
        match (spec.src_ip, spec.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let ip = &mut t[l3..l3 + IP4];
                ip[0] = 0x45;
                ip[6] = 0x40; // don't fragment
                ip[8] = 64;
                ip[9] = proto;
                (src_off, dst_off) = (l3 + 12, l3 + 16);
                (src_lo, dst_lo) = (u32::from(s), u32::from(d));
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let ip = &mut t[l3..l3 + IP6];
                ip[0] = 0x60;
                ip[6] = proto;
                ip[7] = 64;
                // The first 96 bits of each address live in the template; the last 32 are
                // written per frame.
                ip[8..20].copy_from_slice(&s.octets()[..12]);
                ip[24..36].copy_from_slice(&d.octets()[..12]);
                (src_off, dst_off) = (l3 + 20, l3 + 36);
                let lo = |a: std::net::Ipv6Addr| {
                    let o = a.octets();
                    u32::from_be_bytes([o[12], o[13], o[14], o[15]])
                };
                (src_lo, dst_lo) = (lo(s), lo(d));
            }
            _ => unreachable!("validated"),
        }
        if tcp {
            let h = &mut t[l4..l4 + TCP];
            h[4..8].copy_from_slice(&1u32.to_be_bytes()); // sequence number
            if shape.l4 == L4Kind::TcpAck {
                h[8..12].copy_from_slice(&1u32.to_be_bytes()); // acknowledgment number
            }
            h[12] = 5 << 4; // data offset: 5 words, no options
            h[13] = if shape.l4 == L4Kind::TcpSyn {
                0x02
            } else {
                0x10
            };
            h[14..16].copy_from_slice(&0xffffu16.to_be_bytes()); // window
        }
        match shape.payload {
            Payload::Pattern => {
                for (i, b) in t[pay..].iter_mut().enumerate() {
                    *b = i as u8;
                }
            }
            Payload::Random(seed) => {
                for (i, c) in t[pay..].chunks_mut(8).enumerate() {
                    let r = mix64(seed ^ mix64(i as u64)).to_le_bytes();
                    c.copy_from_slice(&r[..c.len()]);
                }
            }
        }
        let mut payload_sum = Vec::with_capacity(max - pay + 1);
        payload_sum.push(0);
        for n in 1..=max - pay {
            // Sum of the first n payload bytes as 16-bit words aligned to the payload start
            // (an even offset from the transport header, as the checksum requires).
            let prev = payload_sum[n - 1];
            let b = t[pay + n - 1] as u32;
            let add = if (n - 1) % 2 == 0 { b << 8 } else { b };
            payload_sum.push(prev + add);
        }
        // FlowVary::SrcIp steps over the destination when both share all but the last 16 bits.
        let src_skip16 = if spec.vary == FlowVary::SrcIp
            && !shape.ranges.iter().any(|r| r.field == RangeField::SrcIp)
            && same_but_last(spec.src_ip, spec.dst_ip, 16)
        {
            if spec.flows == 65536 {
                return Err(Error::Config(
                    "--vary src-ip with 65536 flows would use the destination address as a \
                     source: use at most 65535 flows, or a source outside the destination's /16 \
                     (/112)"
                        .into(),
                ));
            }
            Some((dst_lo as u16).wrapping_sub(src_lo as u16))
        } else {
            None
        };
        let mut walks = Vec::new();
        let mut div = 1u64;
        for r in &shape.ranges {
            let n = r.len()?;
            let (lo, _) = FieldRange::parts(r.lo);
            let (hi, _) = FieldRange::parts(r.hi);
            let skip = (r.field == RangeField::SrcIp
                && same_but_last(spec.src_ip, spec.dst_ip, 32)
                && (lo..=hi).contains(&dst_lo))
            .then_some(dst_lo);
            if skip.is_some() && n == 1 {
                return Err(Error::Config(format!(
                    "source range {r:?} holds only the destination address"
                )));
            }
            walks.push(Walk {
                field: r.field,
                lo,
                n: n - skip.is_some() as u64,
                div,
                mode: r.mode,
                skip,
            });
            div = div.saturating_mul(n);
        }
        // Addresses that never vary live in the template (and so in the constant sums below);
        // otherwise their last 32 bits are written per frame.
        let addr_varies = src_skip16.is_some()
            || spec.vary == FlowVary::SrcIp
            || walks
                .iter()
                .any(|w| matches!(w.field, RangeField::SrcIp | RangeField::DstIp));
        if !addr_varies {
            t[src_off..src_off + 4].copy_from_slice(&src_lo.to_be_bytes());
            t[dst_off..dst_off + 4].copy_from_slice(&dst_lo.to_be_bytes());
        }
        // Constant sums: the template has 0 in every length, checksum, port, varying address
        // word and stamp field.
        let ip_base = if v4 { checksum(&t[l3..l3 + IP4], 0) } else { 0 };
        let (a0, alen) = if v4 { (l3 + 12, 8) } else { (l3 + 8, 32) };
        let mut l4_base = checksum(&t[a0..a0 + alen], proto as u32);
        if tcp {
            l4_base = checksum(&t[l4..l4 + TCP], l4_base);
        }
        if stamp_len > 0 {
            l4_base += spec.flows - 1;
        }
        // The shape decision for the hot path.
        let plain = !tcp && walks.is_empty() && !shape.latency;
        let vary_ip = spec.vary == FlowVary::SrcIp;
        let fast = match (plain, v4) {
            (false, _) => Fast::General,
            (true, true) => Fast::Udp4 {
                ip: vary_ip,
                stamp: stamp_len > 0,
            },
            (true, false) => Fast::Udp6 {
                ip: vary_ip,
                stamp: stamp_len > 0,
            },
        };
        let mut len_sums = Vec::new();
        if fast != Fast::General {
            // Only the source word varies: the destination word goes into the template (after
            // the sums above, which exclude it; the general writer would store the same value)
            // and into the fast writers' constant sums.
            let dst_words = if vary_ip {
                t[dst_off..dst_off + 4].copy_from_slice(&dst_lo.to_be_bytes());
                words32(dst_lo)
            } else {
                0
            };
            len_sums = (0..=max)
                .map(|len| {
                    if len < pay {
                        return [0, 0];
                    }
                    let l4_len = (len - l4) as u32;
                    let l4c = l4_base + 2 * l4_len + payload_sum[len - pay] + dst_words;
                    let ipc = ip_base + (len - l3) as u32 + dst_words;
                    // With no address varying the IPv4 checksum depends on the length alone.
                    [l4c, if vary_ip { ipc } else { csum_fold(ipc) as u32 }]
                })
                .collect();
        }
        let skip_from = src_skip16.map_or(0x1_0000, |d| d as u32);
        // (A frame without a stamp carries no mark.)
        let (seq_mask, seq_base) = match shape.mark {
            m if m > 0 && stamp_len > 0 => (MARKED_SEQ_BITS, (m as u64) << MARK_SHIFT),
            _ => (SEQ_BITS, 0),
        };
        let mut st = Stamper {
            fast,
            writer: fast.writer(),
            len_sums,
            skip_from,
            flows: std::num::NonZeroU32::new(spec.flows)
                .ok_or_else(|| Error::Config("flows = 0: must be 1..=65536".into()))?,
            vary: spec.vary,
            src_port: spec.src_port,
            dst_port: spec.dst_port,
            spec: Box::new(spec),
            shape: Box::new(shape),
            tmpl: t,
            v4,
            l3,
            l4,
            tcp,
            stamp_len,
            seq_mask,
            seq_base,
            pay,
            payload_sum,
            src_off,
            dst_off,
            addr_varies,
            src_lo,
            dst_lo,
            src_skip16,
            walks,
            ip_base,
            l4_base,
            complete: false,
        };
        if let (&SizeSpec::Fixed(len), false) = (&st.spec.sizes, fast == Fast::General) {
            let mut f = vec![0u8; len as usize];
            st.write(&mut f, len as usize, 0, 0, 0);
            st.tmpl = f;
            st.complete = true;
        }
        Ok(st)
    }

    /// The spec this stamper writes (with `Imix` resolved as [`Stamper::with_shape`] says).
    pub fn spec(&self) -> &FrameSpec {
        &self.spec
    }

    /// The shape this stamper writes.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The sequence number a stamp carries for sequence number `seq`: its low 48 bits, or with
    /// a trial mark the mark and the low 40 (both writers stamp through it).
    #[inline(always)]
    fn stamped_seq(&self, seq: u64) -> u64 {
        (seq & self.seq_mask) | self.seq_base
    }

    /// The trial mark its stamps carry (`Shape::mark`; 0: none, or no stamps).
    pub fn mark(&self) -> u8 {
        (self.seq_base >> MARK_SHIFT) as u8
    }

    #[inline]
    fn flow_vals(&self, flow: u32) -> FlowVals {
        let mut v = FlowVals {
            src_port: self.src_port,
            dst_port: self.dst_port,
            src_lo: self.src_lo,
            dst_lo: self.dst_lo,
        };
        match self.vary {
            FlowVary::SrcPort => v.src_port = self.src_port.wrapping_add(flow as u16),
            FlowVary::SrcIp => {
                let mut k = flow as u16;
                if let Some(d) = self.src_skip16 {
                    k += (k >= d) as u16;
                }
                v.src_lo =
                    (self.src_lo & 0xffff_0000) | (self.src_lo as u16).wrapping_add(k) as u32;
            }
        }
        for (i, w) in self.walks.iter().enumerate() {
            let x = w.value(flow, i as u64 + 1);
            match w.field {
                RangeField::SrcPort => v.src_port = x as u16,
                RangeField::DstPort => v.dst_port = x as u16,
                RangeField::SrcIp => v.src_lo = x,
                RangeField::DstIp => v.dst_lo = x,
            }
        }
        v
    }

    /// Writes frame `len` bytes long for `flow` with stamp (`stream`, `seq`) into `out[..len]`.
    /// `out` must be at least `len` bytes and `len` within the spec's sizes.
    #[inline]
    pub fn write(&self, out: &mut [u8], len: usize, flow: u32, stream: u16, seq: u64) {
        self.write_at(out, len, flow, stream, seq, None)
    }

    /// As [`Stamper::write`]; with `tx_ns` (and a shape with `latency`) the stamp is a latency
    /// stamp carrying that send time.
    #[inline]
    pub fn write_at(
        &self,
        out: &mut [u8],
        len: usize,
        flow: u32,
        stream: u16,
        seq: u64,
        tx_ns: Option<u64>,
    ) {
        (self.writer)(self, out, len, flow, stream, seq, tx_ns)
    }
}

/// True when `a` and `b` agree in all but their last `bits` bits (both the same family).
fn same_but_last(a: IpAddr, b: IpAddr, bits: u32) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            bits >= 32 || (u32::from(a) >> bits) == (u32::from(b) >> bits)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a) >> bits) == (u128::from(b) >> bits),
        _ => false,
    }
}
