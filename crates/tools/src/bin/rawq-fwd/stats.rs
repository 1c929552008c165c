//! What fwd counts beside the queues' own counters, the live lines and the summary.
//!
//! The queues count what they received and what the device took (`rawq::QueueStats`); fwd
//! adds what only it knows, per port: frames the port's tx ring did not take (freed at once),
//! frames its tx ring took (to find those that never left), the `--tx-first` frames, and the
//! frames `--mode rxonly` dropped. Each forwarding thread writes its own cells (one writer per
//! cell: a load and a store, as rawq's own counters); the main thread reads them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;
use rawq::{Port, QueueStats};
use rawq_tools::ledger::{interface_rx_drops, key, Ledger};
use serde_json::{json, Value};

/// One thread's counters for one port.
#[derive(Default)]
pub struct Cells {
    /// Frames this port's tx ring did not take (freed: better to drop than to queue).
    pub tx_ring_full: AtomicU64,
    /// Frames this port's tx ring took (`tx_burst`'s returns), tx-first included.
    pub tx_taken: AtomicU64,
    /// `--tx-first` frames this port's tx ring took.
    pub tx_first: AtomicU64,
    /// Frames received on this port and dropped by `--mode rxonly`.
    pub rxonly: AtomicU64,
    /// Frames received on this port still held by `--delay` when the thread ended.
    pub held: AtomicU64,
}

impl Cells {
    /// Adds `v` to `c` (this thread is the only writer).
    #[inline]
    pub fn add(c: &AtomicU64, v: u64) {
        if v != 0 {
            c.store(c.load(Relaxed) + v, Relaxed);
        }
    }
}

/// Every thread's cells: `cells[thread][port]`.
pub struct Shared {
    pub cells: Vec<Vec<CachePadded<Cells>>>,
}

impl Shared {
    pub fn new(threads: usize, ports: usize) -> Shared {
        Shared {
            cells: (0..threads)
                .map(|_| (0..ports).map(|_| CachePadded::default()).collect())
                .collect(),
        }
    }

    /// Port `p`'s counters summed over the threads.
    pub fn port(&self, p: usize) -> FwdCounts {
        let mut f = FwdCounts::default();
        for t in &self.cells {
            let c = &t[p];
            f.tx_ring_full += c.tx_ring_full.load(Relaxed);
            f.tx_taken += c.tx_taken.load(Relaxed);
            f.tx_first += c.tx_first.load(Relaxed);
            f.rxonly += c.rxonly.load(Relaxed);
            f.held += c.held.load(Relaxed);
        }
        f
    }
}

/// fwd's own counts for one port.
#[derive(Clone, Copy, Debug, Default)]
pub struct FwdCounts {
    pub tx_ring_full: u64,
    pub tx_taken: u64,
    pub tx_first: u64,
    pub rxonly: u64,
    pub held: u64,
}

/// A snapshot of one port: its queues' counters and fwd's.
#[derive(Clone, Debug, Default)]
pub struct PortSnap {
    pub total: QueueStats,
    pub queues: Vec<QueueStats>,
    pub fwd: FwdCounts,
    /// The device's own loss counters since the start, by name: the interface's `tx_dropped`
    /// (xdp), the model's wire drops, frames it found no receive buffer for, and frames no rule
    /// took (model); on other backends the port's device counters, the interface's
    /// `rx_dropped` less what the sockets counted already (`netdev_rx_dropped`: each drop
    /// once, see `rawq_tools::ledger::interface_rx_drops`).
    pub device: Vec<(&'static str, u64)>,
}

/// The facts of one port that do not change.
pub struct PortFacts {
    pub name: String,
    pub backend: &'static str,
    /// Where each offload is done on this port.
    pub offloads: rawq::Offloads,
    /// The interface's `tx_dropped` at the start (xdp).
    pub tx_dropped0: Option<u64>,
}

impl PortSnap {
    pub fn take(port: &Port, p: usize, shared: &Shared, facts: &PortFacts) -> PortSnap {
        let queues: Vec<QueueStats> = port.stats_readers().iter().map(|r| r.snapshot()).collect();
        let mut total = QueueStats::default();
        queues.iter().for_each(|q| total.accumulate(q));
        let mut device = Vec::new();
        if let Some(d0) = facts.tx_dropped0 {
            if let Some(d) = rawq_gen::netdev_state(&facts.name).and_then(|s| s.tx_dropped) {
                device.push(("netdev_tx_dropped", d.saturating_sub(d0)));
            }
        }
        #[cfg(feature = "mlx5")]
        if let Some(c) = port.model_counters() {
            device.push(("wire_drops", c.wire_drops));
            device.push(("wire_rx_drops", c.wire_rx_drops));
            device.push(("rx_no_buffer", c.rx_no_buffer));
            device.push(("rx_unmatched", c.rx_to_kernel));
        }
        // Other backends: the port's device counters (mlx5 hw_counters, the interface's
        // receive drops), since the port was opened; a sysfs read or two per snapshot.
        if port.info().backend != "model" {
            let c = port.device_counters();
            // The interface's rx_dropped less what its sockets counted already (on veth
            // every socket drop is in rx_dropped too): each drop once.
            let socket_drops = total.rx_drops;
            let named = [
                ("out_of_buffer", c.rx_no_buffer),
                ("rx_discards_phy", c.rx_discards_phy),
                ("tx_discards_phy", c.tx_discards_phy),
                (
                    "netdev_rx_dropped",
                    c.rx_dropped
                        .map(|d| interface_rx_drops(&facts.name, d, socket_drops)),
                ),
                ("netdev_rx_missed", c.rx_missed),
            ];
            device.extend(named.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
        }
        PortSnap {
            total,
            queues,
            fwd: shared.port(p),
            device,
        }
    }

    /// Frames sent out of this port that fwd forwarded (the device took them), the
    /// `--tx-first` frames not included.
    pub fn forwarded(&self) -> u64 {
        self.total.tx_packets.saturating_sub(self.fwd.tx_first)
    }

    /// Frames the tx ring took that the device has not (yet) sent, nor dropped: at the end of a
    /// run, frames stuck in the ring of a link that went down.
    pub fn not_sent(&self) -> u64 {
        let t = &self.total;
        self.fwd.tx_taken.saturating_sub(
            t.tx_packets + t.tx_drops + t.tx_errors + t.tx_unsent_at_close + t.tx_fate_unknown,
        )
    }

    /// The device's loss counters as `, device: name n, name n` (empty when none).
    fn device_text(&self) -> String {
        if self.device.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = self
            .device
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        format!(", device: {}", parts.join(", "))
    }

    fn drops_json(&self) -> Drops<'_> {
        Drops {
            rx_ring_or_fill: self.total.rx_drops,
            rx_no_buffer_events: self.total.rx_no_buffer,
            rx_errors: self.total.rx_errors,
            tx_ring_full: self.fwd.tx_ring_full,
            tx_drops: self.total.tx_drops,
            tx_errors: self.total.tx_errors,
            tx_not_sent: self.not_sent(),
            tx_unsent_at_close: self.total.tx_unsent_at_close,
            tx_fate_unknown: self.total.tx_fate_unknown,
            device: self.device.iter().map(|&(k, v)| (k, v)).collect(),
            rxonly: self.fwd.rxonly,
            held_by_delay: self.fwd.held,
        }
    }
}

/// A port's `drops` object, in the live records and the summary.
#[derive(serde::Serialize)]
struct Drops<'a> {
    rx_ring_or_fill: u64,
    rx_no_buffer_events: u64,
    rx_errors: u64,
    tx_ring_full: u64,
    tx_drops: u64,
    tx_errors: u64,
    tx_not_sent: u64,
    /// Posted, not sent: the queue closed before the device sent them (the device said so).
    tx_unsent_at_close: u64,
    /// Posted, fate unknown at the close (dv, verbs).
    tx_fate_unknown: u64,
    /// The device's loss counters by name.
    device: std::collections::BTreeMap<&'a str, u64>,
    rxonly: u64,
    held_by_delay: u64,
}

/// One direction of a port in the `--json` summary.
#[derive(serde::Serialize)]
struct Direction {
    packets: u64,
    bytes: u64,
    pps: f64,
    gbps: f64,
    /// tx only: frames forwarded (sent less the tx-first ones), tx-first frames, copies.
    #[serde(skip_serializing_if = "Option::is_none")]
    forwarded: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tx_first: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    copies: Option<u64>,
    per_queue: Vec<u64>,
}

/// One port in the `--json` summary.
#[derive(serde::Serialize)]
struct PortSummary<'a> {
    port: usize,
    dev: &'a str,
    backend: &'static str,
    /// Where each offload is done (rawq's `Offloads`, by its serde derive).
    offloads: rawq::Offloads,
    rx: Direction,
    tx: Direction,
    drops: Drops<'a>,
    /// The port's queue counters summed (rawq's `QueueStats`, by its serde derive).
    stats: QueueStats,
}

/// Device counters that count frames on their way out of a port (already in `tx_packets`).
const TX_SIDE: [&str; 3] = ["netdev_tx_dropped", "wire_drops", "tx_discards_phy"];

/// The run's ledger: every frame that arrived at the ports (received, or counted dropped on
/// receive by the queues or the device) and every `--tx-first` frame, each in one bucket: what
/// became of the received ones (forwarded, refused, dropped by rxonly, held, in flight) or
/// where the others were dropped. Text and JSON render this one ledger.
pub fn ledger(snaps: &[PortSnap]) -> Ledger {
    let sum = |f: &dyn Fn(&PortSnap) -> u64| snaps.iter().map(f).sum::<u64>();
    let received = sum(&|s| s.total.rx_packets);
    let rx_drops = sum(&|s| s.total.rx_drops);
    let device = |tx: bool| {
        let mut v: Vec<(&'static str, u64)> = Vec::new();
        for s in snaps {
            for &(k, n) in s.device.iter().filter(|d| TX_SIDE.contains(&d.0) == tx) {
                match v.iter_mut().find(|x| x.0 == k) {
                    Some(x) => x.1 += n,
                    None => v.push((k, n)),
                }
            }
        }
        v
    };
    let (rx_device, tx_device) = (device(false), device(true));
    let tx_first = sum(&|s| s.fwd.tx_first);
    let offered = received + rx_drops + rx_device.iter().map(|d| d.1).sum::<u64>() + tx_first;
    let mut l = Ledger::new(
        offered,
        "arrived at the ports (received, or counted dropped on receive), and the --tx-first \
         frames",
    );
    let wire: u64 = tx_device.iter().map(|d| d.1).sum();
    // Every frame a tx ring took, forwarded or `--tx-first`, ends in one of sent, refused
    // (dropped or failed) or in flight (the library's `TxLedger`); which of the two kinds a
    // refused frame was is not known, so the sent ones are one bucket: a `--tx-first` frame
    // that failed was counted both as sent by --tx-first and as refused (campaign seed 5777).
    let sent = sum(&|s| s.total.tx_packets);
    l.add(
        "forwarded",
        "sent out of a port (forwarded, and the --tx-first frames)",
        sent.saturating_sub(wire),
        false,
    )
    .add(
        key::WIRE_DROPS,
        "dropped on the way out (the interface's tx_dropped, the model's wire)",
        wire,
        true,
    )
    .add(
        "tx_ring_full",
        "dropped: the tx ring was full",
        sum(&|s| s.fwd.tx_ring_full),
        true,
    )
    .add(
        key::TX_REFUSED,
        "refused by the send ring (dropped or failed)",
        sum(&|s| s.total.tx_drops + s.total.tx_errors),
        true,
    )
    .add(
        key::IN_FLIGHT,
        "in a tx ring at the stop, not sent (not a loss)",
        sum(&|s| s.not_sent()),
        false,
    )
    .add_close(
        sum(&|s| s.total.tx_unsent_at_close),
        sum(&|s| s.total.tx_fate_unknown),
    )
    .add(
        "rxonly",
        "dropped by --mode rxonly (as asked)",
        sum(&|s| s.fwd.rxonly),
        false,
    )
    .add(
        "held_by_delay",
        "held by --delay at the stop (not sent)",
        sum(&|s| s.fwd.held),
        true,
    )
    .add(
        key::RX_QUEUE_DROPS,
        "dropped by the receive queue (AF_XDP: its fill ring empty or its ring full)",
        rx_drops,
        true,
    );
    for (k, n) in rx_device {
        l.add(k, k, n, true);
    }
    l
}

/// Packets per second and layer-1 Gbit/s (frame + 24 bytes of FCS, preamble and gap).
fn rate(packets: u64, bytes: u64, secs: f64) -> (f64, f64) {
    if secs <= 0.0 {
        return (0.0, 0.0);
    }
    let bits = (bytes + packets * rawq_gen::WIRE_OVERHEAD) as f64 * 8.0;
    (packets as f64 / secs, bits / secs / 1e9)
}

/// The live line of one port over an interval (`prev` → `now`, `secs` long).
pub fn live_line(p: usize, f: &PortFacts, prev: &PortSnap, now: &PortSnap, secs: f64) -> String {
    let (a, b) = (&prev.total, &now.total);
    let (rx_pps, rx_g) = rate(
        b.rx_packets.saturating_sub(a.rx_packets),
        b.rx_bytes.saturating_sub(a.rx_bytes),
        secs,
    );
    let (tx_pps, tx_g) = rate(
        b.tx_packets.saturating_sub(a.tx_packets),
        b.tx_bytes.saturating_sub(a.tx_bytes),
        secs,
    );
    let device = now.device_text();
    format!(
        "fwd: port {p} {}: rx {:.3} Mpps {:.3} Gbit/s | tx {:.3} Mpps {:.3} Gbit/s | drops: rx \
         ring/fill {}, tx ring full {}, tx {}, tx errors {}{device}",
        f.name,
        rx_pps / 1e6,
        rx_g,
        tx_pps / 1e6,
        tx_g,
        b.rx_drops,
        now.fwd.tx_ring_full,
        b.tx_drops,
        b.tx_errors,
    )
}

/// One `--json-lines` record: the interval's rates and the running totals, per port.
pub fn json_line(
    t: f64,
    facts: &[PortFacts],
    prev: &[PortSnap],
    now: &[PortSnap],
    secs: f64,
) -> Value {
    let ports: Vec<Value> = facts
        .iter()
        .enumerate()
        .map(|(p, f)| {
            let (a, b) = (&prev[p].total, &now[p].total);
            let (rx_pps, rx_g) = rate(
                b.rx_packets.saturating_sub(a.rx_packets),
                b.rx_bytes.saturating_sub(a.rx_bytes),
                secs,
            );
            let (tx_pps, tx_g) = rate(
                b.tx_packets.saturating_sub(a.tx_packets),
                b.tx_bytes.saturating_sub(a.tx_bytes),
                secs,
            );
            json!({
                "port": p,
                "dev": f.name,
                "rx": {"packets": b.rx_packets, "pps": rx_pps, "gbps": rx_g},
                "tx": {"packets": b.tx_packets, "pps": tx_pps, "gbps": tx_g},
                "drops": now[p].drops_json(),
            })
        })
        .collect();
    json!({"t": t, "interval_s": secs, "ports": ports})
}

/// The `--json` summary.
pub fn summary_json(
    facts: &[PortFacts],
    snaps: &[PortSnap],
    secs: f64,
    mode: &str,
    queues: u16,
    error: Option<&rawq::Error>,
) -> Value {
    let ports: Vec<Value> = facts
        .iter()
        .zip(snaps)
        .enumerate()
        .map(|(p, (f, s))| {
            let t = &s.total;
            let (rx_pps, rx_g) = rate(t.rx_packets, t.rx_bytes, secs);
            let (tx_pps, tx_g) = rate(t.tx_packets, t.tx_bytes, secs);
            serde_json::to_value(PortSummary {
                port: p,
                dev: &f.name,
                backend: f.backend,
                offloads: f.offloads,
                rx: Direction {
                    packets: t.rx_packets,
                    bytes: t.rx_bytes,
                    pps: rx_pps,
                    gbps: rx_g,
                    forwarded: None,
                    tx_first: None,
                    copies: None,
                    per_queue: s.queues.iter().map(|q| q.rx_packets).collect(),
                },
                tx: Direction {
                    packets: t.tx_packets,
                    bytes: t.tx_bytes,
                    pps: tx_pps,
                    gbps: tx_g,
                    forwarded: Some(s.forwarded()),
                    tx_first: Some(s.fwd.tx_first),
                    copies: Some(t.tx_copies),
                    per_queue: s.queues.iter().map(|q| q.tx_packets).collect(),
                },
                drops: s.drops_json(),
                stats: *t,
            })
            .unwrap_or_default()
        })
        .collect();
    json!({
        "mode": mode,
        "queues": queues,
        "elapsed_s": secs,
        "forwarded": snaps.iter().map(PortSnap::forwarded).sum::<u64>(),
        "ledger": ledger(snaps).to_json(),
        "ports": ports,
        "error": error.map(|e| e.to_string()),
    })
}

/// The text summary: the totals line (what fwd always printed), then one line per port.
pub fn summary_text(facts: &[PortFacts], snaps: &[PortSnap], secs: f64) -> String {
    let mut t = QueueStats::default();
    let mut f = FwdCounts::default();
    for s in snaps {
        t.accumulate(&s.total);
        f.tx_ring_full += s.fwd.tx_ring_full;
        f.rxonly += s.fwd.rxonly;
    }
    let forwarded: u64 = snaps.iter().map(PortSnap::forwarded).sum();
    let not_sent: u64 = snaps.iter().map(PortSnap::not_sent).sum();
    let mut out = format!(
        "fwd: forwarded {forwarded} frames in {secs:.2} s; dropped {} (tx ring full), tx drops \
         {}, tx errors {}, rx drops {} (fill ring empty {} times), rx errors {}",
        f.tx_ring_full, t.tx_drops, t.tx_errors, t.rx_drops, t.rx_no_buffer, t.rx_errors
    );
    if not_sent > 0 {
        out += &format!(", {not_sent} taken by a tx ring but never sent");
    }
    if f.rxonly > 0 {
        out += &format!(", {} dropped by rxonly", f.rxonly);
    }
    for (p, (fa, s)) in facts.iter().zip(snaps).enumerate() {
        let q = |v: &dyn Fn(&QueueStats) -> u64| {
            s.queues
                .iter()
                .map(|x| v(x).to_string())
                .collect::<Vec<_>>()
                .join("/")
        };
        out += &format!(
            "\nfwd: port {p} {}: rx {} ({} per queue), tx {} ({} per queue; {} forwarded, {} \
             tx-first); drops: rx ring/fill {}, tx ring full {}, tx {}, not sent {}{}",
            fa.name,
            s.total.rx_packets,
            q(&|x| x.rx_packets),
            s.total.tx_packets,
            q(&|x| x.tx_packets),
            s.forwarded(),
            s.fwd.tx_first,
            s.total.rx_drops,
            s.fwd.tx_ring_full,
            s.total.tx_drops,
            s.not_sent(),
            s.device_text(),
        );
    }
    out += &format!("\nfwd: {}", ledger(snaps).text());
    out
}
