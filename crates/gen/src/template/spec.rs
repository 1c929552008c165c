//! What a frame is: addresses, ports, flows, sizes ([`FrameSpec`]) and the template options
//! beyond them ([`Shape`]), with the checks a spec must pass.

use std::net::IpAddr;

use super::range::FieldRange;
use super::range::RangeValue;
use super::sizes::SizeSpec;
use super::{stamp_len, ETH, IP4, IP6, LAT_STAMP, STAMP, TCP, UDP};
use rawq::error::{Error, Result};
use rawq::flow::Mac;

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
    /// The stamps' trial mark, 0 for none (RFC 2544 gives each trial its own, 1..=255: see
    /// [`TrialMark`](super::TrialMark)). With a mark, a stamp's 48-bit sequence number carries
    /// the mark in its top 8 bits and the frame's sequence number in the low 40
    /// ([`MARK_SHIFT`](super::MARK_SHIFT); it wraps there), so that a trial's receiver tells
    /// its own frames from late ones of an earlier trial. Frames without a stamp carry no mark.
    pub mark: u8,
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
