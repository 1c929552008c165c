//! Rates and pacing.

use std::time::{Duration, Instant};

use rawq::error::{Error, Result};

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

/// How packets are spread in time at a rate (the inter-arrival pattern, as MoonGen and TRex
/// offer them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pattern {
    /// One every 1/rate seconds.
    Constant,
    /// Gaps drawn from the exponential distribution of mean 1/rate (a Poisson process), from a
    /// generator seeded with `seed` (the same seed, the same schedule). Unpaced, as unlimited.
    Poisson {
        /// The generator's seed.
        seed: u64,
    },
    /// Bursts of `n` packets, each followed by `gap` of silence: within a burst packets go at
    /// the rate (back to back when unlimited), so packet *k* is due at
    /// ⌊k / n⌋ × gap + k / rate.
    BurstGap {
        /// Packets in a burst (at least 1).
        n: u32,
        /// Silence after each burst.
        gap: Duration,
    },
}

impl std::str::FromStr for Pattern {
    type Err = Error;
    /// `constant`, `poisson` (seed 1) or `poisson:SEED`.
    fn from_str(s: &str) -> Result<Pattern> {
        let t = s.trim().to_ascii_lowercase();
        if t == "constant" {
            return Ok(Pattern::Constant);
        }
        if t == "poisson" {
            return Ok(Pattern::Poisson { seed: 1 });
        }
        if let Some(seed) = t.strip_prefix("poisson:") {
            if let Ok(seed) = seed.trim().parse() {
                return Ok(Pattern::Poisson { seed });
            }
        }
        Err(Error::Config(format!(
            "pattern {s:?}: expected constant, poisson or poisson:SEED (bursts: --burst-gap)"
        )))
    }
}

impl Pattern {
    /// `N,GAP`: bursts of N packets, each followed by GAP (a time: 10ms, 1s, 100us).
    ///
    /// # Errors
    /// A message naming the value and what is expected.
    pub fn burst_gap(s: &str) -> std::result::Result<Pattern, String> {
        let bad = || format!("{s:?}: expected N,GAP: bursts of N packets, GAP apart (e.g. 32,1ms)");
        let (n, gap) = s.split_once(',').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(bad());
        }
        let g = gap.trim();
        let gap = match g.strip_suffix("us") {
            Some(us) => us
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .map(|v| Duration::from_secs_f64(v * 1e-6))
                .ok_or_else(bad)?,
            None => parse_duration(g)?,
        };
        Ok(Pattern::BurstGap { n, gap })
    }
}

impl Pattern {
    /// The long-run rate of a pacer at `pps` with this pattern (None: unlimited, or bursts
    /// back to back whose rate within is the port's).
    pub fn mean_pps(&self, pps: Option<f64>) -> Option<f64> {
        let pps = pps.filter(|p| *p > 0.0)?;
        Some(match *self {
            Pattern::Constant | Pattern::Poisson { .. } => pps,
            Pattern::BurstGap { n, gap } => n as f64 / (gap.as_secs_f64() + n as f64 / pps),
        })
    }
}

/// The nice value [`raise_sender_priority`] gives a paced send thread.
pub const SENDER_NICE: i32 = -10;

/// Raises the calling thread's scheduling priority to nice [`SENDER_NICE`] (unless it is higher
/// already), so that a paced sender sleeping between its frames is run when they are due even
/// on a machine whose CPUs are busy: on a shared CPU the scheduler otherwise keeps it waiting
/// for whole time slices (tens of ms under load), and its frames go late.
///
/// # Errors
/// What failed, when the thread may not raise its priority (EPERM: not root and no
/// CAP_SYS_NICE); the thread then runs at the priority it had.
#[allow(unsafe_code)]
pub fn raise_sender_priority() -> std::result::Result<(), String> {
    // SAFETY: gettid takes no arguments, touches no memory and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: getpriority reads only its integer arguments (a -1 that is an error is taken as
    // nice -1: the priority is then set, which is harmless).
    let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    if now <= SENDER_NICE {
        return Ok(());
    }
    // SAFETY: setpriority reads only its integer arguments; on Linux PRIO_PROCESS with a thread
    // id sets that thread's nice value alone.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, SENDER_NICE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "could not raise the send thread's priority to nice {SENDER_NICE} ({}): run as \
             root or with CAP_SYS_NICE for a schedule kept on a busy machine",
            std::io::Error::last_os_error()
        ))
    }
}

/// A SplitMix64 step: a small, well-mixed generator for the Poisson schedule (Steele, Lea and
/// Flood, "Fast splittable pseudorandom number generators", 2014).
#[inline]
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An exponential draw of mean 1 (inverse transform of a uniform in (0, 1]).
#[inline]
fn exp1(state: &mut u64) -> f64 {
    let u = ((splitmix64(state) >> 11) + 1) as f64 / (1u64 << 53) as f64;
    -u.ln()
}

/// `secs` rounded to whole nanoseconds (Duration::MAX when out of range).
fn whole_ns(secs: f64) -> Duration {
    let ns = (secs * 1e9).round();
    if ns < u64::MAX as f64 {
        Duration::from_nanos(ns as u64)
    } else {
        Duration::MAX
    }
}

/// Holds a packet rate with a cumulative schedule: the first packet is due at the start, and by
/// time *t* after it at most `1 + ⌊rate × t⌋` packets may have gone (as pktgen-dpdk and
/// testpmd's txonly send: a run of *d* seconds at *r* packets per second sends `r × d`, the
/// last one interval before the end). Falling behind is made up at once (bounded by the burst
/// size per call), so the long-run rate does not drift with scheduling noise; with
/// [`Pacer::with_catch_up`] only within a window: a sender kept off its CPU for longer does not
/// turn the stall into a line-rate burst (which a device under test would see as a rate the
/// sender claims not to be offering), it drops the packets due before the window from the
/// schedule and counts them ([`Pacer::skipped`]), with the largest lateness seen
/// ([`Pacer::max_lag`]).
///
/// Other [`Pattern`]s keep the same rule (at most the packets due by time *t*), with their own
/// due times.
#[derive(Clone, Debug)]
pub struct Pacer {
    pps: Option<f64>,
    start: Instant,
    sent: u64,
    pattern: Pattern,
    /// Poisson: the generator's state, and when packet `sent` is due (seconds after `start`).
    rng: u64,
    next_due: f64,
    /// The catch-up window (seconds; None: unbounded), the packets dropped from the schedule
    /// for being due before it, and the largest lateness seen (seconds).
    catch_up: Option<f64>,
    skipped: u64,
    max_lag: f64,
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
            pattern: Pattern::Constant,
            rng: 0,
            next_due: 0.0,
            catch_up: None,
            skipped: 0,
            max_lag: 0.0,
        }
    }

    /// The same pacer making up at most `window` of lateness: packets due longer than `window`
    /// ago are dropped from the schedule by [`Pacer::skip_late`] instead of sent late in a
    /// burst.
    pub fn with_catch_up(mut self, window: Duration) -> Pacer {
        self.catch_up = Some(window.as_secs_f64());
        self
    }

    /// When the next packet is due (seconds after the start).
    fn next_due_s(&self) -> f64 {
        match self.pattern {
            Pattern::Poisson { .. } => self.next_due,
            _ => self.due_at(self.sent),
        }
    }

    /// Records how late the next packet is at `now` and, with a catch-up window, drops from
    /// the schedule the packets due before the window (they count in [`Pacer::skipped`]).
    /// Returns how many it dropped. Call it before [`Pacer::allowance`].
    pub fn skip_late(&mut self, now: Instant) -> u64 {
        if !self.is_paced() {
            return 0;
        }
        let t = now.saturating_duration_since(self.start).as_secs_f64();
        let lag = t - self.next_due_s();
        if lag > self.max_lag {
            self.max_lag = lag;
        }
        let Some(window) = self.catch_up else {
            return 0;
        };
        if lag <= window {
            return 0;
        }
        let cutoff = t - window;
        let skip = match (self.pattern, self.pps) {
            // Packets k < cutoff × rate are due before the window.
            (Pattern::Constant, Some(pps)) => {
                // (Rounded to a millionth of a packet first: the product is not exact.)
                let before = ((cutoff * pps * 1e6).round() / 1e6).ceil();
                if before.is_finite() && before > 0.0 {
                    (before.min(u64::MAX as f64) as u64).saturating_sub(self.sent)
                } else {
                    0
                }
            }
            _ => {
                // Walk the schedule (as many steps as packets dropped: fewer than sending them).
                let mut n = 0;
                while self.next_due_s() < cutoff {
                    self.sent(1);
                    n += 1;
                }
                self.skipped += n;
                return n;
            }
        };
        self.sent = self.sent.saturating_add(skip);
        self.skipped += skip;
        skip
    }

    /// The packets [`Pacer::skip_late`] dropped from the schedule.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The largest lateness [`Pacer::skip_late`] saw: how long after its due time the next
    /// packet still waited.
    pub fn max_lag(&self) -> Duration {
        Duration::try_from_secs_f64(self.max_lag.max(0.0)).unwrap_or(Duration::MAX)
    }

    /// The same pacer with `pattern`'s due times.
    pub fn with_pattern(mut self, pattern: Pattern) -> Pacer {
        self.pattern = pattern;
        if let Pattern::Poisson { seed } = pattern {
            self.rng = seed;
        }
        self
    }

    /// Whether packets wait for a schedule (false: each goes as soon as the port takes it).
    pub fn is_paced(&self) -> bool {
        match self.pattern {
            Pattern::Constant | Pattern::Poisson { .. } => self.pps.is_some(),
            Pattern::BurstGap { .. } => true,
        }
    }

    /// When packet `k` is due (seconds after the start), for the closed-form patterns.
    #[inline]
    fn due_at(&self, k: u64) -> f64 {
        let at_rate = self.pps.map_or(0.0, |p| k as f64 / p);
        match self.pattern {
            Pattern::BurstGap { n, gap } => (k / n as u64) as f64 * gap.as_secs_f64() + at_rate,
            _ => at_rate,
        }
    }

    /// How many packets from `sent` on are due by `t` ns (at most `burst`), walking the
    /// schedule; `next(k)` gives the due time (s) of the packet k after `first`. Due times are
    /// compared in whole nanoseconds, as [`Pacer::wait_hint`] gives them.
    #[inline]
    fn count_due(t: u128, burst: usize, first: f64, mut next: impl FnMut(u64) -> f64) -> usize {
        let due = |s: f64| (s * 1e9).round() <= t as f64;
        if !due(first) {
            return 0;
        }
        let mut k = 1;
        while k < burst && due(next(k as u64)) {
            k += 1;
        }
        k
    }

    /// How many packets (at most `burst`) may go at time `now`.
    #[inline]
    pub fn allowance(&self, now: Instant, burst: usize) -> usize {
        let t = || now.saturating_duration_since(self.start).as_nanos();
        match (self.pattern, self.pps) {
            (Pattern::Poisson { .. }, Some(pps)) => {
                let (mut rng, mut due) = (self.rng, self.next_due);
                Pacer::count_due(t(), burst, due, |_| {
                    due += exp1(&mut rng) / pps;
                    due
                })
            }
            (Pattern::BurstGap { .. }, _) => {
                let s = self.sent;
                Pacer::count_due(t(), burst, self.due_at(s), |k| self.due_at(s + k))
            }
            (_, None) => burst,
            (_, Some(pps)) => {
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
        if let (Pattern::Poisson { .. }, Some(pps)) = (self.pattern, self.pps) {
            for _ in 0..n {
                self.next_due += exp1(&mut self.rng) / pps;
            }
        }
    }

    /// How long until at least one more packet is due (zero if one is due now).
    pub fn wait_hint(&self, now: Instant) -> Duration {
        if !self.is_paced() {
            return Duration::ZERO;
        }
        let next = match self.pattern {
            // A rate so low that the next packet is centuries away waits "forever".
            Pattern::Constant => {
                Duration::try_from_secs_f64(self.due_at(self.sent)).unwrap_or(Duration::MAX)
            }
            // In whole nanoseconds, as the allowance compares them.
            Pattern::Poisson { .. } => whole_ns(self.next_due),
            Pattern::BurstGap { .. } => whole_ns(self.due_at(self.sent)),
        };
        self.start
            .checked_add(next)
            .map_or(Duration::MAX, |t| t.saturating_duration_since(now))
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

    /// Issue 32: a stall is not made up as a burst beyond the catch-up window; the packets due
    /// before it are dropped from the schedule and counted, with the lateness seen.
    #[test]
    fn catch_up_is_bounded_and_the_stall_measured() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pacer::starting_at(Some(1000.0), t0).with_catch_up(ms(5));
        assert_eq!(p.skip_late(t0), 0);
        p.sent(p.allowance(t0, 32));
        // 100 ms late: packets 1..=100 are due; those before 95 ms (1..=94) are dropped, the
        // six of the last 5 ms go.
        let late = t0 + ms(100);
        assert_eq!(p.skip_late(late), 94);
        assert_eq!(p.allowance(late, 32), 6);
        assert_eq!(p.skipped(), 94);
        assert_eq!(p.max_lag(), ms(99));
        p.sent(6);
        // On time from there: nothing more dropped, the lag seen stays the largest.
        assert_eq!(p.skip_late(late + ms(1)), 0);
        assert_eq!(p.allowance(late + ms(1), 32), 1);
        assert_eq!(p.max_lag(), ms(99));
        // Without a window, everything due is made up (a burst at a time), as before.
        let mut q = Pacer::starting_at(Some(1000.0), t0);
        assert_eq!(q.skip_late(late), 0);
        assert_eq!(q.allowance(late, 1000), 101);
        assert_eq!(q.max_lag(), ms(100));
        // The other patterns walk their schedule.
        let mut b = Pacer::starting_at(None, t0)
            .with_pattern(Pattern::BurstGap { n: 4, gap: ms(10) })
            .with_catch_up(ms(5));
        // Bursts at 0, 10, ..., 100 ms: the ten before 95 ms are dropped, the one at 100 goes.
        assert_eq!(b.skip_late(late), 40);
        assert_eq!(b.allowance(late, 32), 4);
        let mut r = Pacer::starting_at(Some(1000.0), t0)
            .with_pattern(Pattern::Poisson { seed: 3 })
            .with_catch_up(ms(5));
        let n = r.skip_late(t0 + Duration::from_secs(1));
        assert!((900..1100).contains(&n), "{n}");
        assert!(r.allowance(t0 + Duration::from_secs(1), 1000) < 20);
        // Unpaced: nothing is ever late.
        let mut u = Pacer::starting_at(None, t0).with_catch_up(ms(5));
        assert_eq!(u.skip_late(late), 0);
    }

    /// The due times of the first `n` packets of `p` (offsets from `t0`, seconds), read from
    /// the pacer itself: the wait hint at the start is when the next packet is due, and the
    /// allowance agrees (nothing just before, one at that time; `exact`: the constant
    /// pattern's closed form can be a nanosecond late on the hint, so it is not held to it).
    fn schedule(mut p: Pacer, t0: Instant, n: usize) -> Vec<f64> {
        let exact = p.pattern != Pattern::Constant;
        let mut due = Vec::with_capacity(n);
        for _ in 0..n {
            let d = p.wait_hint(t0);
            if !exact {
                due.push(d.as_secs_f64());
                p.sent(1);
                continue;
            }
            if d > Duration::from_micros(1) {
                assert_eq!(p.allowance(t0 + d - Duration::from_micros(1), 1), 0);
            }
            assert_eq!(p.allowance(t0 + d, 1), 1, "due at {d:?}");
            due.push(d.as_secs_f64());
            p.sent(1);
        }
        due
    }

    /// Kolmogorov–Smirnov statistic of `x` against the exponential distribution of `rate`.
    fn ks_exponential(mut x: Vec<f64>, rate: f64) -> f64 {
        x.sort_by(f64::total_cmp);
        let n = x.len() as f64;
        x.iter()
            .enumerate()
            .map(|(i, &v)| {
                let f = 1.0 - (-rate * v).exp();
                (f - i as f64 / n).abs().max((f - (i + 1) as f64 / n).abs())
            })
            .fold(0.0, f64::max)
    }

    /// Issue 24: Poisson gaps pass a Kolmogorov–Smirnov test against the exponential at the 1%
    /// level over 10^5 gaps; constant gaps do not.
    #[test]
    fn poisson_gaps_are_exponential() {
        const N: usize = 100_000;
        let rate = 10_000.0;
        // The critical value of the one-sample KS test at the 1% level, large n.
        let critical = 1.6276 / (N as f64).sqrt();
        let t0 = Instant::now();
        let gaps = |p: Pacer| -> Vec<f64> {
            schedule(p, t0, N + 1)
                .windows(2)
                .map(|w| w[1] - w[0])
                .collect()
        };
        for seed in [1, 42, 0xdead_beef] {
            let p = Pacer::starting_at(Some(rate), t0).with_pattern(Pattern::Poisson { seed });
            let g = gaps(p);
            let mean = g.iter().sum::<f64>() / N as f64;
            assert!((mean * rate - 1.0).abs() < 0.02, "mean gap {mean}");
            let d = ks_exponential(g, rate);
            assert!(d < critical, "seed {seed}: D = {d}, critical {critical}");
        }
        let d = ks_exponential(gaps(Pacer::starting_at(Some(rate), t0)), rate);
        assert!(d > critical, "constant gaps pass as exponential: D = {d}");
        // The same seed, the same schedule.
        let a = Pacer::starting_at(Some(rate), t0).with_pattern(Pattern::Poisson { seed: 7 });
        assert_eq!(schedule(a.clone(), t0, 100), schedule(a, t0, 100));
    }

    #[test]
    fn poisson_allowance_makes_up_and_caps_at_the_burst() {
        let t0 = Instant::now();
        let mut p = Pacer::starting_at(Some(1000.0), t0).with_pattern(Pattern::Poisson { seed: 3 });
        // One second late: about a thousand due, a burst at a time.
        let late = t0 + Duration::from_secs(1);
        assert_eq!(p.allowance(late, 32), 32);
        let mut total = 0;
        loop {
            let n = p.allowance(late, 32);
            if n == 0 {
                break;
            }
            p.sent(n);
            total += n;
        }
        assert!((900..1100).contains(&total), "{total}");
        // Unpaced Poisson is unlimited.
        let un = Pacer::starting_at(None, t0).with_pattern(Pattern::Poisson { seed: 3 });
        assert!(!un.is_paced());
        assert_eq!(un.allowance(t0, 9), 9);
    }

    #[test]
    fn bursts_with_gaps() {
        let t0 = Instant::now();
        let gap = Duration::from_millis(10);
        // Bursts of 4 back to back (unlimited), 10 ms apart.
        let p = Pacer::starting_at(None, t0).with_pattern(Pattern::BurstGap { n: 4, gap });
        assert!(p.is_paced());
        let due = schedule(p.clone(), t0, 12);
        assert_eq!(
            due,
            [0.0, 0.0, 0.0, 0.0, 0.01, 0.01, 0.01, 0.01, 0.02, 0.02, 0.02, 0.02]
        );
        // All four of a burst at once, then nothing until the gap is over.
        let mut q = p;
        assert_eq!(q.allowance(t0, 32), 4);
        q.sent(4);
        assert_eq!(q.allowance(t0 + Duration::from_millis(9), 32), 0);
        assert_eq!(q.allowance(t0 + gap, 32), 4);
        // At 1000 pps within the burst: packet k at ⌊k/2⌋ × 10 ms + k ms.
        let pattern = Pattern::BurstGap { n: 2, gap };
        // 2 frames every 12 ms.
        let mean = pattern.mean_pps(Some(1000.0)).unwrap();
        assert!((mean - 2.0 / 0.012).abs() < 1e-9, "{mean}");
        assert_eq!(pattern.mean_pps(None), None);
        let r = Pacer::starting_at(Some(1000.0), t0).with_pattern(pattern);
        let due = schedule(r, t0, 4);
        for (d, want) in due.iter().zip([0.0, 0.001, 0.012, 0.013]) {
            assert!((d - want).abs() < 1e-6, "{due:?}");
        }
    }

    #[test]
    fn patterns_parse() {
        assert_eq!("constant".parse::<Pattern>().unwrap(), Pattern::Constant);
        assert_eq!(
            "poisson".parse::<Pattern>().unwrap(),
            Pattern::Poisson { seed: 1 }
        );
        assert_eq!(
            "Poisson:9".parse::<Pattern>().unwrap(),
            Pattern::Poisson { seed: 9 }
        );
        for bad in ["", "burst", "poisson:x"] {
            assert!(bad.parse::<Pattern>().is_err(), "{bad}");
        }
        assert_eq!(
            Pattern::burst_gap("32,1ms").unwrap(),
            Pattern::BurstGap {
                n: 32,
                gap: Duration::from_millis(1)
            }
        );
        assert_eq!(
            Pattern::burst_gap("8, 50us").unwrap(),
            Pattern::BurstGap {
                n: 8,
                gap: Duration::from_micros(50)
            }
        );
        for bad in ["", "32", "0,1ms", "x,1ms", "4,0", "4,-1ms", "4,nanus"] {
            assert!(Pattern::burst_gap(bad).is_err(), "{bad}");
        }
    }
}
