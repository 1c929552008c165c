//! The final report: the summary of a run (text, or JSON with --json), from the queues'
//! outcomes and the port's counters.

use rawq::Port;

use crate::cli::Args;
use crate::{measure, window, Outcome};

/// The final report (`--json`).
#[derive(serde::Serialize)]
struct Summary {
    backend: &'static str,
    device: String,
    mode: String,
    direction: &'static str,
    queues: u16,
    /// The active window: first to last packet (sent, or received with --rx).
    duration_s: f64,
    /// The whole run, start-up and linger included.
    elapsed_s: f64,
    packets: u64,
    bytes: u64,
    /// Over the active window; null when it has no rate (fewer than two packets, or all
    /// within a burst: see `window.rs`).
    pps: Option<f64>,
    bps_l1: Option<f64>,
    errors: u64,
    drops: u64,
    rx_packets: u64,
    seq_stamped: u64,
    seq_gaps: u64,
    seq_out_of_order: u64,
    /// With --txrx --seq: stamped frames sent that never came back (head, middle and tail).
    seq_lost: u64,
    /// Frames the device dropped or found no rule for, beyond the queue counters: the software
    /// device's own counters, or the port's device counters (see `device_drops()`).
    device_drops: u64,
    /// Of those, frames dropped for want of a receive buffer (mlx5 `out_of_buffer`, the
    /// software device's `rx_no_buffer`); null where the device does not count them.
    device_rx_no_buffer: Option<u64>,
    /// Frames the interface under an xdp port dropped on transmit during the run (e.g. above
    /// its MTU), from its `tx_dropped` counter.
    link_tx_dropped: u64,
    /// `tx_burst` calls of the send loops, and how many of them found the ring full (took
    /// fewer packets than offered): their ratio says whether the device or the sender limits.
    tx_bursts: u64,
    tx_ring_full_bursts: u64,
    /// Time the send loops spent with packets left over from a full ring (ns, summed over the
    /// queues), from the first full burst of a stretch to the next burst the device took whole,
    /// and how many such stretches there were. A sender that spins on a full ring makes many
    /// cheap bursts, so this says more than the burst count: its share of the active window is
    /// how long the device held the sender back.
    tx_ring_full_ns: u64,
    tx_ring_full_stretches: u64,
    /// Times a send loop found the pool without a burst's worth of free buffers (the pool is
    /// too small for what the rings hold).
    tx_pool_empty: u64,
    /// The software device's thread (-b model; 0 otherwise): its polls, those that found
    /// nothing to do, and the time it spent in polls that found work (ns). Idle polls and
    /// little work time say the device kept up with the sender.
    model_polls: u64,
    model_idle_polls: u64,
    model_work_ns: u64,
}

/// Frames the device dropped or could not deliver, which its queues' counters do not show: on
/// the software device its own counters (its wire, its receive queues, no matching rule); on
/// the other backends the port's device counters (`Port::device_counters`: mlx5's
/// `out_of_buffer` and `rx_discards_phy`, an interface's `rx_dropped` and `rx_missed_errors`),
/// since the port was opened.
fn device_drops(port: &Port) -> (u64, String) {
    let parts = loss_parts(port);
    let total = parts.iter().map(|p| p.1).sum();
    let text = parts
        .iter()
        .filter(|p| p.1 > 0)
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ");
    (total, text)
}

#[cfg(feature = "mlx5")]
fn loss_parts(port: &Port) -> Vec<(&'static str, u64)> {
    match port.model_counters() {
        Some(c) => vec![
            ("wire full", c.wire_drops),
            ("no rx buffer", c.rx_no_buffer),
            ("runt", c.rx_runt),
            ("oversize", c.rx_oversize),
            ("no rule matched", c.rx_to_kernel),
            ("drop rule", c.rx_rule_drop),
            ("rq in error", c.rx_in_error),
        ],
        None => counter_parts(&port.device_counters()),
    }
}
#[cfg(not(feature = "mlx5"))]
fn loss_parts(port: &Port) -> Vec<(&'static str, u64)> {
    counter_parts(&port.device_counters())
}

fn counter_parts(c: &rawq::counters::DeviceCounters) -> Vec<(&'static str, u64)> {
    [
        ("no rx buffer (out_of_buffer)", c.rx_no_buffer),
        ("discarded by the port (rx_discards_phy)", c.rx_discards_phy),
        ("dropped by the interface (rx_dropped)", c.rx_dropped),
        ("missed by the interface (rx_missed_errors)", c.rx_missed),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect()
}

/// The software device thread's polls, idle polls and work time (ns); zeros on other backends.
#[cfg(feature = "mlx5")]
fn model_polls(port: &Port) -> (u64, u64, u64) {
    port.model_counters()
        .map_or((0, 0, 0), |c| (c.polls, c.idle_polls, c.work_ns))
}
#[cfg(not(feature = "mlx5"))]
fn model_polls(_: &Port) -> (u64, u64, u64) {
    (0, 0, 0)
}

pub(crate) fn report(
    a: &Args,
    port: &Port,
    info: &rawq::PortInfo,
    elapsed: f64,
    o: &Outcome,
    link_drops: Option<u64>,
    extras: &measure::Extras,
) -> serde_json::Value {
    let seq = &o.seq;
    let s = port.stats();
    let device = device_drops(port);
    let (model_polls, model_idle_polls, model_work_ns) = model_polls(port);
    // The active window; a run that moved one packet or none has no rate to speak of.
    let w = window::Window {
        first: o.first,
        last: o.last,
    };
    let secs = w.secs();
    let lost = if a.txrx {
        o.stamped_sent.saturating_sub(seq.stamped)
    } else {
        0
    };
    let (packets, bytes, errors, drops) = if a.rx {
        (s.rx_packets, s.rx_bytes, s.rx_errors, s.rx_drops)
    } else {
        (s.tx_packets, s.tx_bytes, s.tx_errors, s.tx_drops)
    };
    let r = w.rate(packets, bytes);
    let sum = Summary {
        backend: info.backend,
        device: info.device.clone(),
        mode: info.mode.clone(),
        direction: if a.rx { "rx" } else { "tx" },
        queues: info.queues,
        duration_s: secs,
        elapsed_s: elapsed,
        packets,
        bytes,
        pps: r.map(|r| r.0),
        bps_l1: r.map(|r| r.1),
        errors,
        drops,
        rx_packets: s.rx_packets,
        seq_stamped: seq.stamped,
        seq_gaps: seq.gaps,
        seq_out_of_order: seq.out_of_order,
        seq_lost: lost,
        device_drops: device.0,
        device_rx_no_buffer: port.device_counters().rx_no_buffer,
        link_tx_dropped: link_drops.unwrap_or(0),
        tx_bursts: o.tx_bursts,
        tx_ring_full_bursts: o.tx_ring_full_bursts,
        tx_ring_full_ns: o.tx_ring_full_ns,
        tx_ring_full_stretches: o.tx_ring_full_stretches,
        tx_pool_empty: o.tx_pool_empty,
        model_polls,
        model_idle_polls,
        model_work_ns,
    };
    // Losses outside the queues' counters go to stderr in any case (JSON has them as fields),
    // but for the trials of an RFC 2544 search, where loss is what is looked for.
    if device.0 > 0 && !a.silent {
        say!("pktgen: the device lost {} frames: {}", device.0, device.1);
    }
    if let Some(n) = link_drops.filter(|&n| n > 0) {
        say!(
            "pktgen: {} dropped {n} frames on transmit (its tx_dropped counter; e.g. frames \
             above its MTU)",
            a.dev
        );
    }
    // With --json-lines the summary is the last JSON line, so stdout stays one object a line.
    let mut v = serde_json::to_value(&sum).unwrap_or_default();
    extras.extend(&mut v);
    crate::linkwatch::extend(&mut v);
    if a.silent {
        return v;
    }
    if a.json || a.measure.json_lines {
        outln!("{v}");
        return v;
    }
    let seq_text = if a.txrx && o.stamped_sent > 0 {
        format!(
            ", seq: {} sent, {} back, {lost} lost, {} out of order",
            o.stamped_sent, seq.stamped, seq.out_of_order
        )
    } else if seq.stamped > 0 {
        format!(
            ", seq: {} stamped, {} missing between them, {} out of order",
            seq.stamped, seq.gaps, seq.out_of_order
        )
    } else {
        String::new()
    };
    let rate = match r {
        Some((pps, bps)) => format!(
            "in {}: {:.3} Mpps, {:.3} Gbit/s (L1)",
            window::fmt_secs(secs),
            pps / 1e6,
            bps / 1e9
        ),
        None => w.no_rate(packets),
    };
    outln!(
        "pktgen {}: {} packets, {} bytes {rate}, {} errors, {} drops{seq_text}",
        sum.direction,
        sum.packets,
        sum.bytes,
        sum.errors,
        sum.drops
    );
    extras.print();
    if let Some(t) = crate::linkwatch::text() {
        outln!("{t}");
    }
    // The rest of the JSON's fields, so that the text says everything the JSON has.
    outln!(
        "run: {} in all (start-up and drain included), active window {}; {} on {} ({}), {} \
         queue(s)",
        window::fmt_secs(sum.elapsed_s),
        window::fmt_secs(sum.duration_s),
        sum.backend,
        sum.device,
        sum.mode,
        sum.queues
    );
    if !a.rx {
        outln!(
            "sender: {} tx bursts, {} of them found the ring full ({} in {} stretches), pool \
             empty {} times",
            sum.tx_bursts,
            sum.tx_ring_full_bursts,
            window::fmt_secs(sum.tx_ring_full_ns as f64 / 1e9),
            sum.tx_ring_full_stretches,
            sum.tx_pool_empty
        );
    }
    outln!(
        "losses outside the queues: {} by the {}{}, {} by the interface on transmit; seq: {} \
         stamped received, {} gaps, {} out of order, {} lost",
        sum.device_drops,
        if sum.model_polls > 0 || info.backend == "model" {
            "software device"
        } else {
            "device"
        },
        sum.device_rx_no_buffer.map_or(String::new(), |n| format!(
            " ({n} for want of an rx buffer)"
        )),
        sum.link_tx_dropped,
        sum.seq_stamped,
        sum.seq_gaps,
        sum.seq_out_of_order,
        sum.seq_lost
    );
    if sum.model_polls > 0 {
        outln!(
            "software device: {} polls, {} idle, {} of work",
            sum.model_polls,
            sum.model_idle_polls,
            window::fmt_secs(sum.model_work_ns as f64 / 1e9)
        );
    }
    v
}
