//! Header fields varied over ranges across flows, and how the writer walks them.

use std::net::IpAddr;

use rawq::error::{Error, Result};

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

/// The command-line form, `FIELD=LO-HI[:rand]` (what `FieldRange`'s `FromStr` reads).
impl std::fmt::Display for FieldRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let field = match self.field {
            RangeField::SrcPort => "src-port",
            RangeField::DstPort => "dst-port",
            RangeField::SrcIp => "src-ip",
            RangeField::DstIp => "dst-ip",
        };
        let value = |v: RangeValue| match v {
            RangeValue::Port(p) => p.to_string(),
            RangeValue::Ip(a) => a.to_string(),
        };
        write!(f, "{field}={}-{}", value(self.lo), value(self.hi))?;
        if self.mode == RangeMode::Rand {
            f.write_str(":rand")?;
        }
        Ok(())
    }
}

impl FieldRange {
    /// The low 32 bits of a value and, for IPv6, the upper 96.
    pub(super) fn parts(v: RangeValue) -> (u32, Option<[u8; 12]>) {
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
    pub(super) fn len(&self) -> Result<u64> {
        let bad = |why: &str| Error::Config(format!("range {self}: {why}"));
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
