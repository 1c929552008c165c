//! The active window (first to last packet) and the rates over it: one definition for the
//! summary line, the JSON's top level, its tx and rx sides and the rate block.
//!
//! n packets span n − 1 intervals, so a rate is (n − 1) / window: a paced run's first frame
//! goes at the start of the window and its last one at its end. A window shorter than
//! [`MIN_WINDOW_S`] (or fewer than two packets) has no rate: it measures a burst, not a rate.

use std::time::Instant;

use rawq_gen::WIRE_OVERHEAD;

/// The shortest window a rate is given for.
pub const MIN_WINDOW_S: f64 = 1e-3;

/// First and last packet of a run (sent, or received with --rx).
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

impl Window {
    /// Its length in seconds (0 without two distinct instants).
    pub fn secs(&self) -> f64 {
        match (self.first, self.last) {
            (Some(f), Some(l)) if l > f => (l - f).as_secs_f64(),
            _ => 0.0,
        }
    }

    /// (packets per second, L1 bits per second) of `packets` frames of `bytes` in all over the
    /// window; `None` when there is no rate to speak of (see the module docs).
    pub fn rate(&self, packets: u64, bytes: u64) -> Option<(f64, f64)> {
        let secs = self.secs();
        if packets < 2 || secs < MIN_WINDOW_S {
            return None;
        }
        let share = (packets - 1) as f64 / packets as f64;
        let l1 = (bytes + packets * WIRE_OVERHEAD) as f64 * 8.0;
        Some(((packets - 1) as f64 / secs, share * l1 / secs))
    }

    /// Why [`Window::rate`] gave none, for text.
    pub fn no_rate(&self, packets: u64) -> String {
        match packets {
            0 => "no rate (no packets)".into(),
            1 => "no rate (one packet)".into(),
            _ => format!(
                "no rate (the packets went within {}: a burst, not a rate; a rate needs a \
                 window of {} or more)",
                fmt_secs(self.secs()),
                fmt_secs(MIN_WINDOW_S)
            ),
        }
    }
}

/// A duration in seconds for text: "2.000 s", "1.250 ms", "73 µs".
pub fn fmt_secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// A packet rate for text: whole packets from 100 pps up, three significant decimals below
/// (a target of 0.5 pps is "0.5", not "0").
pub fn fmt_pps(p: f64) -> String {
    if p >= 100.0 {
        format!("{p:.0}")
    } else {
        let t = format!("{p:.3}");
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rates_and_text() {
        let t = Instant::now();
        let w = Window {
            first: Some(t),
            last: Some(t + Duration::from_secs(2)),
        };
        // 1 pps for 2 s: frames at 0, 1 and 2 s.
        assert_eq!(w.rate(3, 180).map(|r| r.0), Some(1.0));
        assert_eq!(w.rate(1, 60), None);
        let tiny = Window {
            first: Some(t),
            last: Some(t + Duration::from_micros(73)),
        };
        assert_eq!(tiny.rate(1000, 60_000), None);
        assert!(tiny.no_rate(1000).contains("73 µs"));
        assert_eq!(fmt_pps(0.5), "0.5");
        assert_eq!(fmt_pps(2000.4), "2000");
        assert_eq!(fmt_secs(2.0), "2.000 s");
    }
}
