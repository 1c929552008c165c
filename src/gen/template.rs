//! Frame templates, flow variation with incremental checksums, and sequence stamps.

use std::net::IpAddr;

use crate::error::{Error, Result};
use crate::flow::Mac;

/// Bytes a frame costs on the wire beyond its length: FCS 4 + preamble 8 + inter-frame gap 12.
pub const WIRE_OVERHEAD: u64 = 24;

/// Marks a sequence stamp at the start of the UDP payload: "RQSQ".
pub const SEQ_MAGIC: u32 = 0x5251_5351;

const ETH: usize = 14;
const IP4: usize = 20;
const IP6: usize = 40;
const UDP: usize = 8;
/// magic (4) + stream (2) + reserved (2) + seq (8)
const STAMP: usize = 16;

/// One's-complement sum of `data` (big-endian 16-bit words) added to `sum`, not folded or
/// inverted. Carries accumulate in the upper bits ([`csum_fold`] folds them); a `u32` holds the
/// sum of 65535 words, far more than a jumbo frame.
pub fn checksum(data: &[u8], mut sum: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [b] = chunks.remainder() {
        sum += (*b as u32) << 8;
    }
    sum
}

/// Folds a sum to 16 bits and inverts it: the checksum field value.
pub fn csum_fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// RFC 1624 eqn. 3: the checksum field after one 16-bit word changes from `old` to `new`.
#[inline]
pub fn csum_update16(csum: u16, old: u16, new: u16) -> u16 {
    let mut sum = (!csum as u32) + (!old as u32) + new as u32;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// Frame sizes to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeSpec {
    /// Every frame this long.
    Fixed(u16),
    /// Sizes cycling through `min..=max` in steps of 1.
    Range(u16, u16),
    /// Simple IMIX: 7 × 60, 4 × 590, 1 × 1514 bytes (64/594/1518 with FCS).
    Imix,
}

impl SizeSpec {
    const IMIX: [u16; 12] = [60, 60, 590, 60, 60, 590, 60, 1514, 60, 590, 60, 590];

    /// The size of frame number `i`.
    #[inline]
    pub fn size(&self, i: u64) -> u16 {
        match *self {
            SizeSpec::Fixed(n) => n,
            SizeSpec::Range(a, b) => a + (i % (b as u64 - a as u64 + 1)) as u16,
            SizeSpec::Imix => Self::IMIX[(i % 12) as usize],
        }
    }

    /// Smallest and largest size.
    pub fn bounds(&self) -> (u16, u16) {
        match *self {
            SizeSpec::Fixed(n) => (n, n),
            SizeSpec::Range(a, b) => (a, b),
            SizeSpec::Imix => (60, 1514),
        }
    }

    /// Mean frame size.
    pub fn mean(&self) -> f64 {
        match *self {
            SizeSpec::Fixed(n) => n as f64,
            SizeSpec::Range(a, b) => (a as f64 + b as f64) / 2.0,
            SizeSpec::Imix => Self::IMIX.iter().map(|&s| s as f64).sum::<f64>() / 12.0,
        }
    }
}

impl std::str::FromStr for SizeSpec {
    type Err = Error;
    /// `60`, `64-1500`, or `imix`.
    fn from_str(s: &str) -> Result<SizeSpec> {
        let bad = || Error::Config(format!("size {s:?}: expected N, MIN-MAX or imix"));
        if s.eq_ignore_ascii_case("imix") {
            return Ok(SizeSpec::Imix);
        }
        if let Some((a, b)) = s.split_once('-') {
            let a: u16 = a.trim().parse().map_err(|_| bad())?;
            let b: u16 = b.trim().parse().map_err(|_| bad())?;
            if a > b {
                return Err(bad());
            }
            return Ok(SizeSpec::Range(a, b));
        }
        Ok(SizeSpec::Fixed(s.trim().parse().map_err(|_| bad())?))
    }
}

/// What varies between flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlowVary {
    /// The UDP source port: `src_port + flow`.
    #[default]
    SrcPort,
    /// The last 16 bits of the source address: `src_ip + flow`.
    SrcIp,
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct FrameSpec {
    /// Destination MAC.
    pub dst_mac: Mac,
    /// Source MAC.
    pub src_mac: Mac,
    /// Source address (v4 or v6; both addresses must be the same version).
    pub src_ip: IpAddr,
    /// Destination address.
    pub dst_ip: IpAddr,
    /// UDP source port (of flow 0).
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Number of flows (1..=65536).
    pub flows: u32,
    /// What varies between flows.
    pub vary: FlowVary,
    /// Frame sizes.
    pub sizes: SizeSpec,
    /// Write a sequence stamp at the start of the UDP payload.
    pub stamp: bool,
}

impl FrameSpec {
    /// Smallest frame this spec can produce: headers (+ stamp).
    pub fn min_len(&self) -> usize {
        let l3 = if self.src_ip.is_ipv4() { IP4 } else { IP6 };
        ETH + l3 + UDP + if self.stamp { STAMP } else { 0 }
    }

    /// Checks sizes and addresses.
    ///
    /// # Errors
    /// [`Error::Config`] naming what is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.src_ip.is_ipv4() != self.dst_ip.is_ipv4() {
            return Err(Error::Config(
                "source and destination addresses must both be IPv4 or both IPv6".into(),
            ));
        }
        let (lo, hi) = self.sizes.bounds();
        if (lo as usize) < self.min_len() {
            return Err(Error::Config(format!(
                "frame size {lo} is below the {} bytes of headers{}",
                self.min_len(),
                if self.stamp {
                    " and sequence stamp"
                } else {
                    ""
                }
            )));
        }
        if hi > 9600 {
            return Err(Error::Config(format!("frame size {hi} is above 9600")));
        }
        if self.flows == 0 || self.flows > 65536 {
            return Err(Error::Config(format!(
                "flows = {}: must be 1..=65536",
                self.flows
            )));
        }
        Ok(())
    }
}

/// A sequence stamp read back from a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Which sender stream (e.g. the sending queue).
    pub stream: u16,
    /// Sequence number within the stream.
    pub seq: u64,
}

/// Writes frames of a [`FrameSpec`] quickly: copy the template prefix, patch, update checksums.
pub struct Stamper {
    spec: FrameSpec,
    /// Template of the largest frame, checksums valid for flow 0, size `max`, stamp 0/0.
    tmpl: Vec<u8>,
    v4: bool,
    l4: usize,
    /// Sum of the UDP payload bytes past the stamp, for each possible length, so the UDP
    /// checksum of any size is known without touching the payload: `payload_sum[n]` covers
    /// `tmpl[l4 + 8 + stamp .. l4 + 8 + stamp + n]`.
    payload_sum: Vec<u32>,
    /// Offset of the last 16 bits of the source address (the word `FlowVary::SrcIp` changes).
    src_last: usize,
    /// Its value in the template.
    src_last_base: u16,
    /// IPv4 header sum without the total length, the checksum and (with `SrcIp`) the varying
    /// source word.
    ip_base: u32,
    /// UDP checksum sum of everything constant: pseudo-header addresses (less the varying source
    /// word with `SrcIp`), protocol, destination port, the source port (with `SrcIp`), and the
    /// stamp's magic.
    udp_base: u32,
}

impl Stamper {
    /// Builds the template.
    ///
    /// # Errors
    /// As [`FrameSpec::validate`].
    pub fn new(spec: FrameSpec) -> Result<Stamper> {
        spec.validate()?;
        let max = spec.sizes.bounds().1 as usize;
        let v4 = spec.src_ip.is_ipv4();
        let l4 = ETH + if v4 { IP4 } else { IP6 };
        let mut t = vec![0u8; max];
        t[0..6].copy_from_slice(&spec.dst_mac);
        t[6..12].copy_from_slice(&spec.src_mac);
        t[12..14].copy_from_slice(&(if v4 { 0x0800u16 } else { 0x86dd }).to_be_bytes());
        match (spec.src_ip, spec.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let ip = &mut t[ETH..ETH + IP4];
                ip[0] = 0x45;
                ip[6] = 0x40; // don't fragment
                ip[8] = 64;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let ip = &mut t[ETH..ETH + IP6];
                ip[0] = 0x60;
                ip[6] = 17;
                ip[7] = 64;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
            }
            _ => unreachable!("validated"),
        }
        t[l4..l4 + 2].copy_from_slice(&spec.src_port.to_be_bytes());
        t[l4 + 2..l4 + 4].copy_from_slice(&spec.dst_port.to_be_bytes());
        let pay = l4 + UDP + if spec.stamp { STAMP } else { 0 };
        // A recognisable payload: an incrementing byte pattern.
        for (i, b) in t[pay..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let mut payload_sum = Vec::with_capacity(max - pay + 1);
        payload_sum.push(0);
        for n in 1..=max - pay {
            // Sum of the first n payload bytes, as 16-bit words aligned to the payload start
            // (which is at an even offset from the UDP header, as the checksum requires).
            let prev = payload_sum[n - 1];
            let b = t[pay + n - 1] as u32;
            let add = if (n - 1) % 2 == 0 { b << 8 } else { b };
            payload_sum.push(prev + add);
        }
        let src_last = if v4 { ETH + 14 } else { ETH + 22 };
        let src_last_base = u16::from_be_bytes([t[src_last], t[src_last + 1]]);
        let vary_ip = spec.vary == FlowVary::SrcIp;
        // Sums of the constant words; the template has 0 in every length and checksum field.
        let less_src = |sum: u32| {
            if vary_ip {
                sum + (!src_last_base) as u32 // one's-complement subtraction of the word
            } else {
                sum
            }
        };
        let ip_base = if v4 {
            less_src(checksum(&t[ETH..ETH + IP4], 0))
        } else {
            0
        };
        let (a0, alen) = if v4 { (ETH + 12, 8) } else { (ETH + 8, 32) };
        let mut udp_base = less_src(checksum(&t[a0..a0 + alen], 17));
        udp_base += spec.dst_port as u32;
        if vary_ip {
            udp_base += spec.src_port as u32;
        }
        if spec.stamp {
            udp_base += (SEQ_MAGIC >> 16) + (SEQ_MAGIC & 0xffff);
        }
        Ok(Stamper {
            spec,
            tmpl: t,
            v4,
            l4,
            payload_sum,
            src_last,
            src_last_base,
            ip_base,
            udp_base,
        })
    }

    /// The spec this stamper writes.
    pub fn spec(&self) -> &FrameSpec {
        &self.spec
    }

    /// Writes frame `len` bytes long for `flow` with stamp (`stream`, `seq`) into `out[..len]`.
    /// `out` must be at least `len` bytes and `len` within the spec's sizes.
    #[inline]
    pub fn write(&self, out: &mut [u8], len: usize, flow: u32, stream: u16, seq: u64) {
        let l4 = self.l4;
        let out = &mut out[..len];
        out.copy_from_slice(&self.tmpl[..len]);
        let udp_len = (len - l4) as u16;
        let flow = flow % self.spec.flows;
        // Only lengths, the flow field and the stamp vary: both checksums are the precomputed
        // sums of everything else plus these few words (and the payload's precomputed sum).
        let mut ip_sum = self.ip_base;
        let mut udp_sum = self.udp_base + 2 * udp_len as u32; // pseudo-header + UDP header
        match self.spec.vary {
            FlowVary::SrcPort => {
                let port = self.spec.src_port.wrapping_add(flow as u16);
                out[l4..l4 + 2].copy_from_slice(&port.to_be_bytes());
                udp_sum += port as u32;
            }
            FlowVary::SrcIp => {
                let v = self.src_last_base.wrapping_add(flow as u16);
                out[self.src_last..self.src_last + 2].copy_from_slice(&v.to_be_bytes());
                udp_sum += v as u32;
                ip_sum += v as u32;
            }
        }
        out[l4 + 4..l4 + 6].copy_from_slice(&udp_len.to_be_bytes());
        if self.v4 {
            let tot = (len - ETH) as u16;
            out[ETH + 2..ETH + 4].copy_from_slice(&tot.to_be_bytes());
            let c = csum_fold(ip_sum + tot as u32);
            out[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
        } else {
            out[ETH + 4..ETH + 6].copy_from_slice(&udp_len.to_be_bytes());
        }
        let mut pay = l4 + UDP;
        if self.spec.stamp {
            let s = &mut out[pay..pay + STAMP];
            s[0..4].copy_from_slice(&SEQ_MAGIC.to_be_bytes());
            s[4..6].copy_from_slice(&stream.to_be_bytes());
            s[8..16].copy_from_slice(&seq.to_be_bytes());
            udp_sum += stream as u32
                + (seq >> 48) as u32
                + ((seq >> 32) & 0xffff) as u32
                + ((seq >> 16) & 0xffff) as u32
                + (seq & 0xffff) as u32;
            pay += STAMP;
        }
        let mut c = csum_fold(udp_sum + self.payload_sum[len - pay]);
        if c == 0 {
            c = 0xffff; // 0 means "no checksum" for UDP over IPv4 and is invalid over IPv6
        }
        out[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
    }

    /// Reads the sequence stamp of a frame written by a stamper with `stamp` on.
    pub fn read_stamp(frame: &[u8]) -> Option<Stamp> {
        let h = crate::flow::parse(frame)?;
        if h.ip_proto != Some(17) {
            return None;
        }
        let p = h.l4? + UDP;
        let s = frame.get(p..p + STAMP)?;
        if u32::from_be_bytes([s[0], s[1], s[2], s[3]]) != SEQ_MAGIC {
            return None;
        }
        Some(Stamp {
            stream: u16::from_be_bytes([s[4], s[5]]),
            seq: u64::from_be_bytes([s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15]]),
        })
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
}

impl SeqTracker {
    /// Adds the counts of another tracker (e.g. another queue's) into this one.
    pub fn merge(&mut self, other: &SeqTracker) {
        self.stamped += other.stamped;
        self.out_of_order += other.out_of_order;
        self.gaps += other.gaps;
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
    fn incremental_update_equals_recompute() {
        let mut data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
        let c0 = csum_fold(checksum(&data, 0));
        for (pos, new) in [(0usize, 0xffffu16), (10, 0), (62, 0x1234)] {
            let old = u16::from_be_bytes([data[pos], data[pos + 1]]);
            let upd = csum_update16(csum_fold(checksum(&data, 0)), old, new);
            data[pos..pos + 2].copy_from_slice(&new.to_be_bytes());
            assert_eq!(upd, csum_fold(checksum(&data, 0)), "pos {pos}");
        }
        assert_ne!(c0, csum_fold(checksum(&data, 0)));
    }

    #[test]
    fn sizes_parse_and_cycle() {
        assert_eq!("60".parse::<SizeSpec>().unwrap(), SizeSpec::Fixed(60));
        assert_eq!(
            "64-66".parse::<SizeSpec>().unwrap(),
            SizeSpec::Range(64, 66)
        );
        assert_eq!("IMIX".parse::<SizeSpec>().unwrap(), SizeSpec::Imix);
        assert!("66-64".parse::<SizeSpec>().is_err());
        assert!("big".parse::<SizeSpec>().is_err());
        let r = SizeSpec::Range(64, 66);
        assert_eq!(
            (0..6).map(|i| r.size(i)).collect::<Vec<_>>(),
            [64, 65, 66, 64, 65, 66]
        );
        let n = (0..12).filter(|&i| SizeSpec::Imix.size(i) == 60).count();
        assert_eq!(n, 7);
        assert!((SizeSpec::Imix.mean() - (7.0 * 60.0 + 4.0 * 590.0 + 1514.0) / 12.0).abs() < 1e-9);
    }

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
}
