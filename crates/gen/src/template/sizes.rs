//! Frame sizes: fixed, a range, or the simple IMIX.

use rawq::error::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
