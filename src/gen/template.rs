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
/// magic (4) + stream (2) + flow (2) + flows - 1 (2) + seq (6); a latency stamp adds the
/// send time (8).
const STAMP: usize = 16;
/// [`STAMP`] where the const generic `STAMP` shadows it.
const STAMP_LEN: usize = STAMP;

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
#[inline]
pub fn csum_fold(mut sum: u32) -> u16 {
    // Two folds always suffice for 32 bits: the first leaves at most 0x1fffe, the second at
    // most 0xffff.
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
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
    /// The simple IMIX with its 60-byte frames raised to this size: what `Imix` becomes when
    /// the headers do not fit 60 bytes. Over IPv6 that is at least 74 bytes (78 with FCS, the
    /// IPv6 minimum of RFC 5180 §5.1), more with a sequence stamp, VLAN tags or TCP.
    ImixSmall(u16),
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
            SizeSpec::ImixSmall(n) => match Self::IMIX[(i % 12) as usize] {
                60 => n,
                s => s,
            },
        }
    }

    /// Smallest and largest size.
    pub fn bounds(&self) -> (u16, u16) {
        match *self {
            SizeSpec::Fixed(n) => (n, n),
            SizeSpec::Range(a, b) => (a, b),
            SizeSpec::Imix => (60, 1514),
            SizeSpec::ImixSmall(n) => (n.min(590), 1514),
        }
    }

    /// Mean frame size.
    pub fn mean(&self) -> f64 {
        match *self {
            SizeSpec::Fixed(n) => n as f64,
            SizeSpec::Range(a, b) => (a as f64 + b as f64) / 2.0,
            SizeSpec::Imix => Self::IMIX.iter().map(|&s| s as f64).sum::<f64>() / 12.0,
            SizeSpec::ImixSmall(n) => (7.0 * n as f64 + 4.0 * 590.0 + 1514.0) / 12.0,
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

/// What varies between flows (without a [`FieldRange`] for the field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlowVary {
    /// The source port: `src_port + flow`.
    #[default]
    SrcPort,
    /// The last 16 bits of the source address: `src_ip + flow`, skipping the destination
    /// address should it fall in that range (a frame from the destination to itself is not
    /// traffic any stack accepts).
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
    /// Source port (of flow 0).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Number of flows (1..=65536).
    pub flows: u32,
    /// What varies between flows.
    pub vary: FlowVary,
    /// Frame sizes.
    pub sizes: SizeSpec,
    /// Write a sequence stamp at the start of the payload.
    pub stamp: bool,
}

/// An 802.1Q tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vlan {
    /// VLAN id, 0..=4095.
    pub id: u16,
    /// Priority code point, 0..=7.
    pub pcp: u8,
}

/// The transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum L4Kind {
    /// UDP.
    #[default]
    Udp,
    /// TCP with only SYN set (sequence number 1).
    TcpSyn,
    /// TCP with only ACK set (sequence 1, acknowledgment 1).
    TcpAck,
}

/// The payload past the headers (and stamp).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Payload {
    /// An incrementing byte pattern (0, 1, 2, …).
    #[default]
    Pattern,
    /// Pseudo-random bytes from this seed, drawn once into the template: every frame carries the
    /// same random bytes (drawing new ones per frame would cost a pass over every payload).
    Random(u64),
}

/// A header field a [`FieldRange`] varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeField {
    /// Source port.
    SrcPort,
    /// Destination port.
    DstPort,
    /// Source address: the whole IPv4 address, the last 32 bits of an IPv6 one.
    SrcIp,
    /// Destination address (as `SrcIp`).
    DstIp,
}

/// How a [`FieldRange`] walks its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RangeMode {
    /// Incrementing with the flow index. Several incrementing ranges count like an odometer
    /// (the first one fastest), so `flows` = the product of their sizes gives every
    /// combination once.
    #[default]
    Inc,
    /// A pseudo-random value of the range for each flow index (fixed per flow, so per-flow
    /// counting still sees one 5-tuple per flow).
    Rand,
}

/// A field varied over `lo..=hi` across flows (pktgen-dpdk's range mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRange {
    /// The field.
    pub field: RangeField,
    /// First value: a port, or an address (IPv6: the last 32 bits vary, the first 96 are
    /// taken from `lo` and must equal `hi`'s).
    pub lo: RangeValue,
    /// Last value.
    pub hi: RangeValue,
    /// Incrementing or random.
    pub mode: RangeMode,
}

/// One end of a [`FieldRange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeValue {
    /// A port.
    Port(u16),
    /// An address.
    Ip(IpAddr),
}

impl std::str::FromStr for FieldRange {
    type Err = Error;
    /// `FIELD=LO-HI[:inc|:rand]`, FIELD one of `src-port`, `dst-port`, `src-ip`, `dst-ip`;
    /// e.g. `src-port=1000-1999:rand`, `dst-ip=10.0.0.1-10.0.0.200`,
    /// `src-ip=2001:db8::1-2001:db8::ff`.
    fn from_str(s: &str) -> Result<FieldRange> {
        let bad = |why: &str| {
            Error::Config(format!(
                "range {s:?}: {why} (expected FIELD=LO-HI[:inc|:rand], FIELD one of src-port, \
                 dst-port, src-ip, dst-ip)"
            ))
        };
        let (field, rest) = s.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let field = match field.trim() {
            "src-port" => RangeField::SrcPort,
            "dst-port" => RangeField::DstPort,
            "src-ip" => RangeField::SrcIp,
            "dst-ip" => RangeField::DstIp,
            _ => return Err(bad("unknown field")),
        };
        // The mode suffix; IPv6 addresses contain ':' too, so only a known word counts.
        let (range, mode) = match rest.rsplit_once(':') {
            Some((r, "inc")) => (r, RangeMode::Inc),
            Some((r, "rand")) | Some((r, "random")) => (r, RangeMode::Rand),
            _ => (rest, RangeMode::Inc),
        };
        let (lo, hi) = range.split_once('-').ok_or_else(|| bad("no `-`"))?;
        let value = |t: &str| -> Result<RangeValue> {
            let t = t.trim();
            match field {
                RangeField::SrcPort | RangeField::DstPort => t
                    .parse()
                    .map(RangeValue::Port)
                    .map_err(|_| bad("not a port")),
                RangeField::SrcIp | RangeField::DstIp => t
                    .parse()
                    .map(RangeValue::Ip)
                    .map_err(|_| bad("not an address")),
            }
        };
        let r = FieldRange {
            field,
            lo: value(lo)?,
            hi: value(hi)?,
            mode,
        };
        r.len().map(|_| r)
    }
}

impl FieldRange {
    /// The low 32 bits of a value and, for IPv6, the upper 96.
    fn parts(v: RangeValue) -> (u32, Option<[u8; 12]>) {
        match v {
            RangeValue::Port(p) => (p as u32, None),
            RangeValue::Ip(IpAddr::V4(a)) => (u32::from(a), None),
            RangeValue::Ip(IpAddr::V6(a)) => {
                let o = a.octets();
                let mut hi = [0u8; 12];
                hi.copy_from_slice(&o[..12]);
                (u32::from_be_bytes([o[12], o[13], o[14], o[15]]), Some(hi))
            }
        }
    }

    /// Number of values, checking the range.
    fn len(&self) -> Result<u64> {
        let bad = |why: &str| Error::Config(format!("range {:?}: {why}", self));
        let ((lo, lo_hi), (hi, hi_hi)) = (Self::parts(self.lo), Self::parts(self.hi));
        match (self.lo, self.hi) {
            (RangeValue::Port(_), RangeValue::Port(_)) => {}
            (RangeValue::Ip(a), RangeValue::Ip(b)) if a.is_ipv4() == b.is_ipv4() => {
                if lo_hi != hi_hi {
                    return Err(bad("an IPv6 range may vary only the last 32 bits"));
                }
            }
            _ => return Err(bad("both ends must be the same kind of value")),
        }
        if lo > hi {
            return Err(bad("the first value is above the last"));
        }
        Ok(hi as u64 - lo as u64 + 1)
    }
}

/// Template options beyond [`FrameSpec`]: tags, TCP, payload, ranges, latency stamps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// VLAN tags, outermost first: none, one (802.1Q, TPID 0x8100) or two (QinQ: an 802.1ad
    /// outer tag, TPID 0x88a8, then 0x8100).
    pub vlans: Vec<Vlan>,
    /// UDP or TCP.
    pub l4: L4Kind,
    /// Payload bytes.
    pub payload: Payload,
    /// Fields varied over ranges; a range on the field [`FrameSpec::vary`] names replaces it.
    pub ranges: Vec<FieldRange>,
    /// Reserve room for latency stamps (24 bytes: the sequence stamp plus an 8-byte send time);
    /// frames then carry a stamp even without [`FrameSpec::stamp`].
    pub latency: bool,
}

impl Shape {
    /// The product of the ranges' sizes (at most 65536): the flow count that visits every
    /// combination of incrementing ranges once. 1 without ranges.
    pub fn combinations(&self) -> u32 {
        let mut n = 1u64;
        for r in &self.ranges {
            n = n.saturating_mul(r.len().unwrap_or(1));
        }
        n.min(65536) as u32
    }
}

impl FrameSpec {
    /// Smallest frame this spec can produce: headers (+ stamp).
    pub fn min_len(&self) -> usize {
        self.min_len_with(&Shape::default())
    }

    /// Smallest frame this spec can produce with `shape`.
    pub fn min_len_with(&self, shape: &Shape) -> usize {
        let l3 = if self.src_ip.is_ipv4() { IP4 } else { IP6 };
        let l4 = if shape.l4 == L4Kind::Udp { UDP } else { TCP };
        ETH + 4 * shape.vlans.len() + l3 + l4 + stamp_len(self.stamp, shape.latency)
    }

    /// Checks sizes and addresses.
    ///
    /// # Errors
    /// [`Error::Config`] naming what is wrong.
    pub fn validate(&self) -> Result<()> {
        self.validate_with(&Shape::default())
    }

    /// Checks sizes, addresses and `shape`.
    ///
    /// # Errors
    /// [`Error::Config`] naming what is wrong.
    pub fn validate_with(&self, shape: &Shape) -> Result<()> {
        if self.src_ip.is_ipv4() != self.dst_ip.is_ipv4() {
            return Err(Error::Config(
                "source and destination addresses must both be IPv4 or both IPv6".into(),
            ));
        }
        let (lo, hi) = self.sizes.bounds();
        let min = self.min_len_with(shape);
        if (lo as usize) < min {
            let stamp = match stamp_len(self.stamp, shape.latency) {
                LAT_STAMP => " and the 24-byte latency stamp",
                STAMP => " and the 16-byte sequence stamp",
                _ => "",
            };
            return Err(Error::Config(format!(
                "frame size {lo} is below the {min} bytes of headers{stamp}: use -s {min} or more"
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
        if shape.vlans.len() > 2 {
            return Err(Error::Config(
                "at most two VLAN tags (QinQ): outer, inner".into(),
            ));
        }
        for v in &shape.vlans {
            if v.id > 4095 || v.pcp > 7 {
                return Err(Error::Config(format!(
                    "VLAN id {} / priority {}: the id must be 0..=4095, the priority 0..=7",
                    v.id, v.pcp
                )));
            }
        }
        for r in &shape.ranges {
            r.len()?;
            if let RangeValue::Ip(a) = r.lo {
                if a.is_ipv4() != self.src_ip.is_ipv4() {
                    return Err(Error::Config(format!(
                        "range {r:?}: not the address family of --src-ip/--dst-ip"
                    )));
                }
            }
            if shape.ranges.iter().filter(|o| o.field == r.field).count() > 1 {
                return Err(Error::Config(format!(
                    "two ranges for {:?}: give one per field",
                    r.field
                )));
            }
        }
        Ok(())
    }
}

fn stamp_len(stamp: bool, latency: bool) -> usize {
    if latency {
        LAT_STAMP
    } else if stamp {
        STAMP
    } else {
        0
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
    #[cfg_attr(not(test), allow(dead_code))]
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
}

/// Which writer [`Stamper::write_at`] runs, decided once per [`Stamper`]: the plain shapes
/// (UDP, no ranges, no latency room; any VLAN tags) each get a writer that stores only the
/// varying words with a few wide stores and sums only them; everything else runs the general
/// writer.
/// A [`Stamper`] writer: `write_at`'s arguments.
type WriteFn = fn(&Stamper, &mut [u8], usize, u32, u16, u64, Option<u64>);

impl Fast {
    fn writer(self) -> WriteFn {
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fast {
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

const TCP: usize = 20;
const LAT_STAMP: usize = 24;

/// Marks a latency stamp (a sequence stamp followed by the 8-byte send time): "RQLT".
pub const LAT_MAGIC: u32 = 0x5251_4c54;

#[inline]
fn words32(v: u32) -> u32 {
    (v >> 16) + (v & 0xffff)
}

#[inline]
fn words64(v: u64) -> u32 {
    words32((v >> 32) as u32) + words32(v as u32)
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
        Ok(Stamper {
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
        })
    }

    /// The spec this stamper writes (with `Imix` resolved as [`Stamper::with_shape`] says).
    pub fn spec(&self) -> &FrameSpec {
        &self.spec
    }

    /// The shape this stamper writes.
    pub fn shape(&self) -> &Shape {
        &self.shape
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

    /// The plain writers: UDP over IPv4 (`V6` false) or IPv6, flows varying the source address
    /// (`IP`) or port, with or without a sequence stamp (`STAMP`). The header block from the
    /// IP header to the stamp's end is one slice of constant length, so no store below is
    /// bounds-checked; the varying words go out in a few wide stores.
    fn write_udp<const V6: bool, const IP: bool, const STAMP: bool>(
        &self,
        out: &mut [u8],
        len: usize,
        flow: u32,
        stream: u16,
        seq: u64,
        _tx_ns: Option<u64>,
    ) {
        let [l4c, ipc] = self.len_sums[len];
        out[..len].copy_from_slice(&self.tmpl[..len]);
        let l3 = self.l3;
        let ip_len = if V6 { IP6 } else { IP4 };
        let hdr = ip_len + UDP + if STAMP { STAMP_LEN } else { 0 };
        let h = &mut out[l3..l3 + hdr];
        let flow = flow % self.flows;
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
            // magic, stream, flow, flows - 1 (in the constant sum), 48-bit seq: one store.
            let seq = seq & 0xffff_ffff_ffff;
            let hi = (SEQ_MAGIC as u64) << 32 | (stream as u64) << 16 | flow as u64;
            let lo = ((self.flows.get() - 1) as u64) << 48 | seq;
            let word = (hi as u128) << 64 | lo as u128;
            let p = ip_len + UDP;
            h[p..p + STAMP_LEN].copy_from_slice(&word.to_be_bytes());
            l4_sum += words32(SEQ_MAGIC) + stream as u32 + flow + words64(seq);
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
            // magic, stream, flow, flows - 1 (in the constant sum), 48-bit seq: one store.
            let seq = seq & 0xffff_ffff_ffff;
            let hi = (magic as u64) << 32 | (stream as u64) << 16 | flow as u64;
            let lo = ((self.flows.get() - 1) as u64) << 48 | seq;
            let word = (hi as u128) << 64 | lo as u128;
            s[0..16].copy_from_slice(&word.to_be_bytes());
            l4_sum += words32(magic) + stream as u32 + flow + words64(seq);
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
