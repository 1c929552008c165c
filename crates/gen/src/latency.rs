//! Latency histograms: log-linear buckets (HDR-histogram style), fixed memory, no allocation per
//! sample, percentiles within 1/64 (1.6 %) of the exact value.
//!
//! Values below 64 ns get a bucket each; above, every power of two [2^e, 2^(e+1)) is split into
//! 64 equal buckets. A percentile is reported as the highest value of the bucket that holds it
//! (clamped to the exact maximum), so it is never below the exact order statistic and at most
//! 1/64 of it above.

/// Sub-buckets per power of two, as a power of two.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets: 64 linear, then 64 per power of two from 2^6 to 2^63.
const BUCKETS: usize = ((64 - SUB_BITS + 1) as usize) * SUB as usize;

/// The percentiles every report gives.
pub const PERCENTILES: [(&str, f64); 4] =
    [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

/// A latency histogram in nanoseconds.
#[derive(Clone)]
pub struct LatencyHistogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count)
            .field("min", &self.min())
            .field("max", &self.max())
            .finish()
    }
}

/// The bucket of `v`.
#[inline]
pub fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = e - SUB_BITS;
    ((e - SUB_BITS + 1) as usize) * SUB as usize + ((v >> shift) - SUB) as usize
}

/// The lowest and highest value of bucket `b`.
pub fn bucket_bounds(b: usize) -> (u64, u64) {
    let sub = SUB as usize;
    if b < sub {
        return (b as u64, b as u64);
    }
    let shift = (b / sub - 1) as u32;
    let lo = (SUB + (b % sub) as u64) << shift;
    (lo, lo + ((1u64 << shift) - 1))
}

impl LatencyHistogram {
    /// An empty histogram (allocates its ~30 KiB of buckets once, here).
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Records one latency.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket_of(ns)] += 1;
        self.count += 1;
        self.sum += ns as u128;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, o: &LatencyHistogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact minimum (None when empty).
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Exact maximum (None when empty).
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Exact mean (None when empty).
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The `q`-quantile (0 < q ≤ 1) by nearest rank: the smallest recorded value with at least
    /// `ceil(q · count)` samples at or below it, rounded up to its bucket's top (≤ 1/64 above)
    /// and clamped to the maximum. None when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_bounds(b).1.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// The non-empty buckets: (lowest value, highest value, count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(b, &c)| {
                let (lo, hi) = bucket_bounds(b);
                (lo, hi, c)
            })
    }

    /// A text histogram: one row per power of two between min and max, with a bar of `width`
    /// characters at most.
    pub fn text(&self, width: usize) -> String {
        let (Some(min), Some(max)) = (self.min(), self.max()) else {
            return String::new();
        };
        let row = |v: u64| 63 - v.max(1).leading_zeros();
        let (r0, r1) = (row(min), row(max));
        let mut rows = vec![0u64; (r1 - r0 + 1) as usize];
        for (lo, _, c) in self.buckets() {
            rows[(row(lo).clamp(r0, r1) - r0) as usize] += c;
        }
        let top = rows.iter().copied().max().unwrap_or(1).max(1);
        let mut s = String::new();
        for (i, &c) in rows.iter().enumerate() {
            let lo = 1u64 << (r0 + i as u32);
            let bar = "#".repeat(((c as f64 / top as f64) * width as f64).ceil() as usize);
            s.push_str(&format!(
                "  [{:>9}, {:>9})  {:>10}  {bar}\n",
                fmt_ns(if i == 0 { 0 } else { lo }),
                fmt_ns(lo * 2),
                c
            ));
        }
        s
    }
}

/// `ns` in the unit that suits it: "850 ns", "12.3 us", "5.01 ms", "1.20 s".
pub fn fmt_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.3} us", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.3} ms", v / 1e6)
    } else {
        format!("{:.3} s", v / 1e9)
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the software timestamp of latency stamps. One clock for
/// every process of the host (network namespaces share it), so one-way latency between two
/// processes on one host is meaningful.
#[allow(unsafe_code)]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nearest-rank quantile of a sorted array: the oracle.
    fn oracle(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    #[test]
    fn buckets_tile_the_range() {
        for b in 0..BUCKETS - 1 {
            let (lo, hi) = bucket_bounds(b);
            assert!(lo <= hi);
            assert_eq!(bucket_bounds(b + 1).0, hi + 1, "bucket {b}");
            assert_eq!(bucket_of(lo), b);
            assert_eq!(bucket_of(hi), b);
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_bounds(BUCKETS - 1).1, u64::MAX);
    }

    #[test]
    fn percentiles_match_a_sorted_array() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for case in 0..6 {
            let mut h = LatencyHistogram::new();
            let mut v = Vec::new();
            let n = [1usize, 2, 10, 999, 10_000, 100_000][case];
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Log-spread values from 1 ns to ~1 s, with ties.
                let s = (x >> 1) % (1 << (x % 30));
                h.record(s);
                v.push(s);
            }
            v.sort_unstable();
            assert_eq!(h.count(), n as u64);
            assert_eq!(h.min(), Some(v[0]));
            assert_eq!(h.max(), Some(v[n - 1]));
            for q in [0.0001, 0.5, 0.9, 0.99, 0.999, 1.0] {
                let want = oracle(&v, q);
                let got = h.quantile(q).unwrap();
                assert!(got >= want, "n {n} q {q}: {got} < exact {want}");
                assert!(
                    got - want <= want / 64,
                    "n {n} q {q}: {got} too far above exact {want}"
                );
                assert_eq!(bucket_of(got), bucket_of(want), "n {n} q {q}");
            }
        }
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (
            LatencyHistogram::new(),
            LatencyHistogram::new(),
            LatencyHistogram::new(),
        );
        for v in 0..5000u64 {
            let s = v * v % 100_003;
            if v % 3 == 0 { &mut a } else { &mut b }.record(s);
            all.record(s);
        }
        a.merge(&b);
        assert_eq!(
            a.buckets().collect::<Vec<_>>(),
            all.buckets().collect::<Vec<_>>()
        );
        assert_eq!(
            (a.min(), a.max(), a.count()),
            (all.min(), all.max(), all.count())
        );
        assert_eq!(a.mean(), all.mean());
        assert!(LatencyHistogram::new().quantile(0.5).is_none());
    }

    #[test]
    fn text_rows_count_every_sample() {
        let mut h = LatencyHistogram::new();
        for v in [100u64, 150, 300, 5000, 5001] {
            h.record(v);
        }
        let t = h.text(20);
        let total: u64 = t
            .lines()
            .map(|l| {
                l.split(')')
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
            })
            .map(|c| c.parse::<u64>().unwrap())
            .sum();
        assert_eq!(total, 5, "{t}");
        assert_eq!(
            t.lines().count(),
            7,
            "64 ns .. 8192 ns in powers of two:\n{t}"
        );
    }

    #[test]
    fn monotonic_clock_advances() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
    }
}
