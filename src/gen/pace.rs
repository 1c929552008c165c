//! Rates and pacing.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A transmit rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// As fast as possible.
    Unlimited,
    /// Packets per second.
    Pps(f64),
    /// Layer-1 bits per second (frame + 24 bytes of FCS, preamble and gap).
    Bps(f64),
}

impl Rate {
    /// Packets per second for frames of mean length `mean_len` (`None` when unlimited).
    pub fn pps(&self, mean_len: f64) -> Option<f64> {
        match *self {
            Rate::Unlimited => None,
            Rate::Pps(p) => Some(p),
            Rate::Bps(b) => Some(b / ((mean_len + super::WIRE_OVERHEAD as f64) * 8.0)),
        }
    }
}

impl std::str::FromStr for Rate {
    type Err = Error;
    /// `0` (with or without a unit, e.g. `0pps`) or `max` (unlimited), `1000` or `1000pps`,
    /// `2.5Mpps`, `100kpps`, `10Gbps`, `500Mbit`, `1e6`.
    fn from_str(s: &str) -> Result<Rate> {
        let t = s.trim();
        let bad = || {
            Error::Config(format!(
                "rate {s:?}: expected e.g. 1000, 2.5Mpps, 100kpps, 10Gbps, 500Mbit or max"
            ))
        };
        if t.eq_ignore_ascii_case("max") || t == "0" {
            return Ok(Rate::Unlimited);
        }
        let lower = t.to_ascii_lowercase();
        let (num, unit) = match lower.find(|c: char| c.is_ascii_alphabetic() && c != 'e') {
            Some(i) => lower.split_at(i),
            None => (lower.as_str(), ""),
        };
        let v: f64 = num.trim().parse().map_err(|_| bad())?;
        if v == 0.0 && !num.trim().starts_with('-') {
            // Zero in any unit is no limit, as a bare `0` is.
            return match unit {
                "" | "pps" | "kpps" | "mpps" | "gpps" | "bps" | "bit" | "kbps" | "kbit"
                | "mbps" | "mbit" | "gbps" | "gbit" => Ok(Rate::Unlimited),
                _ => Err(bad()),
            };
        }
        if !(v.is_finite() && v > 0.0) {
            return Err(bad());
        }
        let (mult, bits) = match unit {
            "" | "pps" => (1.0, false),
            "kpps" => (1e3, false),
            "mpps" => (1e6, false),
            "gpps" => (1e9, false),
            "bps" | "bit" => (1.0, true),
            "kbps" | "kbit" => (1e3, true),
            "mbps" | "mbit" => (1e6, true),
            "gbps" | "gbit" => (1e9, true),
            _ => return Err(bad()),
        };
        Ok(if bits {
            Rate::Bps(v * mult)
        } else {
            Rate::Pps(v * mult)
        })
    }
}

/// The longest run time [`parse_duration`] accepts: ten years.
pub const MAX_DURATION_S: f64 = 10.0 * 365.0 * 86400.0;

/// Parses a run time for command lines: `5`, `5s`, `500ms`, `2m`, `1.5h`. It must be a positive
/// finite number of at most [`MAX_DURATION_S`] seconds (so that deadlines computed from it never
/// overflow).
///
/// # Errors
/// A message naming the value and what is expected.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim();
    let (num, mult) = if let Some(v) = t.strip_suffix("ms") {
        (v, 1e-3)
    } else if let Some(v) = t.strip_suffix('s') {
        (v, 1.0)
    } else if let Some(v) = t.strip_suffix('m') {
        (v, 60.0)
    } else if let Some(v) = t.strip_suffix('h') {
        (v, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected a time like 5, 5s, 500ms, 2m or 1h"))?;
    let secs = v * mult;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!(
            "{s:?}: the run time must be a positive number of seconds"
        ));
    }
    if secs > MAX_DURATION_S {
        return Err(format!(
            "{s:?}: at most ten years ({MAX_DURATION_S} s); leave the option out to run until \
             stopped"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Holds a packet rate with a cumulative schedule: the first packet is due at the start, and by
/// time *t* after it at most `1 + ⌊rate × t⌋` packets may have gone (as pktgen-dpdk and
/// testpmd's txonly send: a run of *d* seconds at *r* packets per second sends `r × d`, the
/// last one interval before the end). Falling behind is made up at once (bounded by the burst
/// size per call), so the long-run rate does not drift with scheduling noise.
#[derive(Clone, Debug)]
pub struct Pacer {
    pps: Option<f64>,
    start: Instant,
    sent: u64,
}

impl Pacer {
    /// A pacer for `pps` packets per second (`None`: unlimited), starting now.
    pub fn new(pps: Option<f64>) -> Pacer {
        Pacer::starting_at(pps, Instant::now())
    }

    /// A pacer whose schedule starts at `start` (for tests).
    pub fn starting_at(pps: Option<f64>, start: Instant) -> Pacer {
        Pacer {
            pps: pps.filter(|p| *p > 0.0),
            start,
            sent: 0,
        }
    }

    /// How many packets (at most `burst`) may go at time `now`.
    #[inline]
    pub fn allowance(&self, now: Instant, burst: usize) -> usize {
        match self.pps {
            None => burst,
            Some(pps) => {
                let due = ((now.saturating_duration_since(self.start).as_secs_f64() * pps) as u64)
                    .saturating_add(1);
                due.saturating_sub(self.sent).min(burst as u64) as usize
            }
        }
    }

    /// Records that `n` packets went.
    #[inline]
    pub fn sent(&mut self, n: usize) {
        self.sent += n as u64;
    }

    /// How long until at least one more packet is due (zero if one is due now).
    pub fn wait_hint(&self, now: Instant) -> Duration {
        match self.pps {
            None => Duration::ZERO,
            Some(pps) => {
                // A rate so low that the next packet is centuries away waits "forever".
                let next =
                    Duration::try_from_secs_f64(self.sent as f64 / pps).unwrap_or(Duration::MAX);
                self.start
                    .checked_add(next)
                    .map_or(Duration::MAX, |t| t.saturating_duration_since(now))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!("max".parse::<Rate>().unwrap(), Rate::Unlimited);
        assert_eq!("1000".parse::<Rate>().unwrap(), Rate::Pps(1000.0));
        assert_eq!("2.5Mpps".parse::<Rate>().unwrap(), Rate::Pps(2.5e6));
        assert_eq!("100kpps".parse::<Rate>().unwrap(), Rate::Pps(1e5));
        assert_eq!("10Gbps".parse::<Rate>().unwrap(), Rate::Bps(1e10));
        assert_eq!("500Mbit".parse::<Rate>().unwrap(), Rate::Bps(5e8));
        assert_eq!("1e6".parse::<Rate>().unwrap(), Rate::Pps(1e6));
        for zero in ["0", "0pps", "0kpps", "0Mpps", "0Gbps", "0.0"] {
            assert_eq!(zero.parse::<Rate>().unwrap(), Rate::Unlimited, "{zero}");
        }
        for bad in ["", "fast", "-5", "10Xbps", "nan", "0Xpps", "-0", "inf"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        // 10 Gbit/s of 60-byte frames is the classic 14.88 Mpps.
        let pps = Rate::Bps(1e10).pps(60.0).unwrap();
        assert!((pps - 14_880_952.38).abs() < 1.0, "{pps}");
    }

    #[test]
    fn durations_parse_or_say_why() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        for bad in [
            "",
            "x",
            "0",
            "-1",
            "nan",
            "inf",
            "1e30",
            "1e308s",
            "99999999999m",
            "-0",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pacer_schedule_is_cumulative() {
        let t0 = Instant::now();
        let mut p = Pacer::starting_at(Some(1000.0), t0);
        // The first packet is due at once, not one interval late.
        assert_eq!(p.wait_hint(t0), Duration::ZERO);
        assert_eq!(p.allowance(t0, 32), 1);
        p.sent(1);
        assert_eq!(p.allowance(t0, 32), 0);
        let t = t0 + Duration::from_millis(10);
        assert_eq!(p.allowance(t, 32), 10);
        p.sent(10);
        assert_eq!(p.allowance(t, 32), 0);
        assert_eq!(p.wait_hint(t), Duration::from_millis(1));
        // Far behind: capped at the burst, and the rest is made up on later calls.
        let late = t0 + Duration::from_secs(1);
        assert_eq!(p.allowance(late, 32), 32);
        let mut total = 11;
        while p.allowance(late, 32) > 0 {
            let n = p.allowance(late, 32);
            p.sent(n);
            total += n;
        }
        assert_eq!(total, 1001, "one at the start and rate × elapsed after it");
        // 1 pps for 2 s: at 0 and at 1 s (the one at 2 s is the end); 0.5 pps: every 2 s.
        let mut one = Pacer::starting_at(Some(1.0), t0);
        let mut sent = 0;
        for ms in (0..2000).step_by(10) {
            let n = one.allowance(t0 + Duration::from_millis(ms), 32);
            one.sent(n);
            sent += n;
        }
        assert_eq!(sent, 2);
        let half = Pacer::starting_at(Some(0.5), t0);
        assert_eq!(half.allowance(t0 + Duration::from_millis(1999), 32), 1);
        assert_eq!(half.allowance(t0 + Duration::from_secs(2), 32), 2);
        // Absurdly low rates give a long wait, not a panic.
        let mut slow = Pacer::starting_at(Some(1e-300), t0);
        assert_eq!(slow.allowance(t0, 32), 1);
        slow.sent(1);
        assert_eq!(slow.wait_hint(t0), Duration::MAX);
        // Absurdly high ones are a burst at a time, not an overflow.
        let fast = Pacer::starting_at(Some(1e30), t0);
        assert_eq!(fast.allowance(t0 + Duration::from_secs(1), 32), 32);
        let un = Pacer::new(None);
        assert_eq!(un.allowance(Instant::now(), 7), 7);
    }
}
