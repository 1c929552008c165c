//! pktgen's streamed stats: once a second the live line (tx and rx side by side, per queue
//! with -v), a --json-lines object, and the one-second tx samples that rate accuracy is
//! judged on.

use std::time::{Duration, Instant};

use rawq::QueueStats;
use serde_json::{json, Value};

fn side(packets: u64, bytes: u64, errors: u64, drops: u64, pps: f64, bps: f64) -> Value {
    json!({"packets": packets, "bytes": bytes, "errors": errors, "drops": drops,
           "pps": pps, "bps_l1": bps})
}

pub fn sides(c: &QueueStats, p: &QueueStats, secs: f64) -> (Value, Value) {
    let (t, r) = (c.tx_rates(p, secs), c.rx_rates(p, secs));
    (
        side(
            c.tx_packets,
            c.tx_bytes,
            c.tx_errors,
            c.tx_drops,
            t.pps,
            t.bps_l1,
        ),
        side(
            c.rx_packets,
            c.rx_bytes,
            c.rx_errors,
            c.rx_drops,
            r.pps,
            r.bps_l1,
        ),
    )
}

fn total(s: &[QueueStats]) -> QueueStats {
    s.iter().fold(QueueStats::default(), |mut acc, q| {
        acc.accumulate(q);
        acc
    })
}

/// The main thread's once-a-second work: the live line, --json-lines, rate samples.
pub struct Monitor {
    pub t0: Instant,
    next: Instant,
    last: (Instant, Vec<QueueStats>),
    quiet: bool,
    verbose: bool,
    json_lines: bool,
    /// (start, end, tx packets) of every one-second interval.
    pub samples: Vec<(Instant, Instant, u64)>,
}

impl Monitor {
    /// Starts the clock; `json_lines` is `--json-lines`.
    pub fn new(json_lines: bool, queues: usize, quiet: bool, verbose: bool) -> Monitor {
        let t0 = Instant::now();
        Monitor {
            t0,
            next: t0 + Duration::from_secs(1),
            last: (t0, vec![QueueStats::default(); queues]),
            quiet,
            verbose,
            json_lines,
            samples: Vec::new(),
        }
    }

    /// Call often (every 100 ms); every second on the second it reads `stats` and prints.
    pub fn poll(&mut self, stats: impl FnOnce() -> Vec<QueueStats>) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        // Seconds are counted from the start, so the lines do not drift.
        while self.next <= now {
            self.next += Duration::from_secs(1);
        }
        let cur = stats();
        let secs = (now - self.last.0).as_secs_f64();
        let (c, p) = (total(&cur), total(&self.last.1));
        self.samples
            .push((self.last.0, now, c.tx_packets.saturating_sub(p.tx_packets)));
        if !self.quiet {
            say!("{}", live_line("total", &c, &p, secs));
            if self.verbose {
                for (i, (c, p)) in cur.iter().zip(&self.last.1).enumerate() {
                    say!("{}", live_line(&format!("   q{i}"), c, p, secs));
                }
            }
        }
        if self.json_lines {
            let (tx, rx) = sides(&c, &p, secs);
            let queues: Vec<Value> = cur
                .iter()
                .zip(&self.last.1)
                .enumerate()
                .map(|(i, (c, p))| {
                    let (tx, rx) = sides(c, p, secs);
                    json!({"queue": i, "tx": tx, "rx": rx})
                })
                .collect();
            let v = json!({"t_s": (now - self.t0).as_secs_f64(), "interval_s": secs,
                           "tx": tx, "rx": rx, "queues": queues});
            outln!("{v}");
        }
        self.last = (now, cur);
    }
}

/// tx and rx side by side: rates, totals, errors, drops (rx drops include frames the ring had
/// no room for: "missed").
fn live_line(label: &str, c: &QueueStats, p: &QueueStats, secs: f64) -> String {
    let (t, r) = (c.tx_rates(p, secs), c.rx_rates(p, secs));
    format!(
        "{label}: tx {:>10.0} pps {:>7.3} Gbit/s err {:>4} drop {:>4} | rx {:>10.0} pps {:>7.3} \
         Gbit/s err {:>4} missed/drop {:>4} | total tx {} rx {}",
        t.pps,
        t.bps_l1 / 1e9,
        c.tx_errors,
        c.tx_drops,
        r.pps,
        r.bps_l1 / 1e9,
        c.rx_errors,
        c.rx_drops,
        c.tx_packets,
        c.rx_packets
    )
}
