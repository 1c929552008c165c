//! The final report: the summary of a run (text, or JSON with --json), from the queues'
//! outcomes and the port's counters.

use rawq::{Port, QueueStats};
use rawq_tools::ledger::{interface_rx_drops, key, Ledger};

use crate::cli::Args;
use crate::{measure, window, Outcome};

/// The final report (`--json`).
#[derive(serde::Serialize)]
struct Summary<'a> {
    /// `backend`, `device`, `mode`, `queues` and `offloads` (where each offload is done):
    /// rawq's own `PortInfo`, serialized by its serde derive.
    #[serde(flatten)]
    port: &'a rawq::PortInfo,
    direction: &'static str,
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
    /// Stamped frames lost: the ledger's `lost` with stamps (--seq), 0 without. With --txrx
    /// those sent that never came back (head, middle and tail); with --rx those missing up to
    /// the highest sequence number received.
    seq_lost: u64,
    /// Frames the device dropped or found no rule for, beyond the queue counters, each counted
    /// once: the ledger's device buckets (see `device_buckets()`).
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
    /// Paced runs: frames the schedule asked for that the send loops did not send because
    /// they were due longer ago than the pacer makes up (the sender was off its CPU), and the
    /// largest lateness of a due frame (ns). Nonzero: the rate offered was not the constant
    /// one asked for.
    tx_late_skipped: u64,
    tx_max_lag_ns: u64,
    /// The software device's thread (-b model; 0 otherwise): its polls, those that found
    /// nothing to do, and the time it spent in polls that found work (ns). Idle polls and
    /// little work time say the device kept up with the sender.
    model_polls: u64,
    model_idle_polls: u64,
    model_work_ns: u64,
}

/// Where each offload is done, as the JSON's `offloads` says it: `ipv4_csum software, ...`.
fn offloads_text(o: &rawq::Offloads) -> String {
    match serde_json::to_value(o) {
        Ok(serde_json::Value::Object(m)) => m
            .iter()
            .map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or("?")))
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    }
}

/// A device-side bucket of the ledger: (key, words, frames, whether they are lost).
type DeviceBucket = (&'static str, &'static str, u64, bool);

/// Frames the device dropped or could not deliver, which its queues' counters do not show,
/// each counted once: on the software device its own counters (its wire, its receive queues,
/// no matching rule, error completions, frames left unread in a receive ring:
/// `rawq_tools::ledger::model_buckets`); on the other backends the port's device counters
/// (`Port::device_counters`: mlx5's `out_of_buffer`, `rx_discards_phy` and `tx_discards_phy`
/// (`rawq_tools::ledger::port_buckets`), an interface's
/// `rx_dropped` and `rx_missed_errors`, less what the queues counted already: see
/// `rawq_tools::ledger::interface_rx_drops`), since the port was opened.
fn device_buckets(port: &Port, s: &QueueStats) -> Vec<DeviceBucket> {
    #[cfg(feature = "mlx5")]
    if let Some(c) = port.model_counters() {
        return rawq_tools::ledger::model_buckets(&c, s.rx_packets);
    }
    let c = port.device_counters();
    let info = port.info();
    let mut v: Vec<DeviceBucket> = rawq_tools::ledger::port_buckets(&c)
        .into_iter()
        .map(|(k, t, n)| (k, t, n, true))
        .collect();
    if let Some(n) = c.rx_dropped {
        let n = interface_rx_drops(&info.device, n, s.rx_drops);
        v.push((
            key::INTERFACE_RX_DROPS,
            "dropped by the interface beyond the socket's drops (rx_dropped)",
            n,
            true,
        ));
    }
    if let Some(n) = c.rx_missed {
        v.push((
            "interface_rx_missed",
            "missed by the interface (rx_missed_errors)",
            n,
            true,
        ));
    }
    v
}

/// The run's ledger (see `rawq_tools::ledger`): every frame offered in one named bucket.
///
/// What is offered: with `--rx`, the frames the peer stamped (`--seq`: the highest sequence
/// number received + 1, per stream; without stamps, what was received and counted dropped);
/// otherwise the frames the device took, and those due while the link was down. Received
/// frames are counted once (a duplicate is not a second frame offered).
fn build_ledger(
    a: &Args,
    port: &Port,
    o: &Outcome,
    s: &QueueStats,
    link_drops: Option<u64>,
    extras: &measure::Extras,
) -> Ledger {
    let device = device_buckets(port, s);
    // An RFC 2544 trial: frames an earlier trial sent that arrived in this one.
    let late = extras.late.unwrap_or(0);
    let mut l;
    if a.rx {
        let (offered, received, how) = match extras.flow_totals {
            Some((expected, once)) => (
                expected,
                once,
                "stamped by the peer (--seq): the highest sequence number received + 1, per \
                 stream (frames lost after the last one received without a count are not known)",
            ),
            None => (
                s.rx_packets + s.rx_drops + device.iter().map(|d| d.2).sum::<u64>(),
                s.rx_packets,
                "received or counted dropped (no sequence stamps: the sender's --seq lets the \
                 ledger see frames that vanished without a count)",
            ),
        };
        l = Ledger::new(offered, how);
        l.add(key::RECEIVED, "received", received, false);
    } else {
        let not_sent = rawq_tools::linkwatch::not_sent_total();
        let tx = s.tx_ledger();
        // Packets dropped at once by `tx_burst` are in `taken` but not in what it returned
        // (`o.sent`): they were never offered to the device.
        let at_once = tx.taken.saturating_sub(o.sent);
        let refused = (tx.dropped + tx.failed).saturating_sub(at_once);
        l = Ledger::new(
            o.sent + not_sent,
            if a.txrx {
                "sent: taken by the device, or due while the link was down"
            } else {
                "sent: taken by the device, or due while the link was down (nothing receives \
                 them in this run)"
            },
        );
        let wire = link_drops.unwrap_or(0);
        if a.txrx {
            let received = match extras.flow_totals {
                Some((_, once)) => once,
                None if o.stamped_sent > 0 => o.seq.stamped.saturating_sub(o.seq.out_of_order),
                None => s.rx_packets.saturating_sub(late),
            };
            l.add(key::RECEIVED, "received back", received, false);
            if extras.late.is_some() {
                // Seen here, not sent here: offered as seen, neither received nor lost.
                l.offered += late;
                if late > 0 {
                    l.offered_as +=
                        &format!(", and {late} frames an earlier trial sent that arrived here");
                }
                l.add(
                    key::LATE_EARLIER_TRIAL,
                    "late: sent by an earlier trial (not received, not a loss of this trial)",
                    late,
                    false,
                );
            }
        } else {
            let sent = tx.sent.saturating_sub(wire);
            l.add(key::SENT, "sent out of the port", sent, false);
        }
        l.add(
            key::TX_REFUSED,
            "refused by the send ring (dropped or failed)",
            refused,
            true,
        )
        .add(
            key::IN_FLIGHT,
            "in flight at the stop (not a loss)",
            tx.in_flight,
            false,
        )
        .add_close(tx.unsent_at_close, tx.fate_unknown)
        .add(
            key::LINK_DOWN,
            "not sent while the link was down",
            not_sent,
            false,
        )
        .add(
            key::WIRE_DROPS,
            "dropped on the wire (the interface's tx_dropped)",
            wire,
            true,
        );
        if a.count > 0 && o.sent + not_sent < a.count {
            l.shortfall(format!(
                "asked for {} frames (-n), offered {} (stopped early)",
                a.count,
                o.sent + not_sent
            ));
        }
    }
    if o.tx_late_skipped > 0 {
        l.shortfall(format!(
            "the sender fell behind its schedule (off its CPU up to {:.1} ms): {} frames due \
             then were not sent (not made up as a burst), so the rate offered was not constant",
            o.tx_max_lag_ns as f64 / 1e6,
            o.tx_late_skipped
        ));
    }
    if let Some((target, achieved)) = extras.rate_short {
        l.shortfall(format!(
            "asked for {} pps, achieved {} pps over the active window",
            window::fmt_pps(target),
            window::fmt_pps(achieved)
        ));
    }
    if a.rx || a.txrx {
        l.add(
            key::RX_QUEUE_DROPS,
            "dropped by the receive queue (AF_XDP: its fill ring empty or its ring full)",
            s.rx_drops,
            true,
        );
        for (k, t, n, loss) in device {
            l.add(k, t, n, loss);
        }
    }
    // A send of unknown fate that the receive side counted was sent: not also unknown.
    if a.txrx {
        l.reconcile(key::TX_FATE_UNKNOWN);
    }
    // A receiver knows the stamped frames up to the highest sequence number it received; the
    // drop counters also count frames lost after that one (the tail), whose numbers it never
    // saw: they were offered too. (The sender's count is what tells them from a double count:
    // see the tests, which know what was sent.)
    if a.rx && extras.flow_totals.is_some() && l.double_counted() > 0 {
        let tail = l.double_counted();
        l.offered += tail;
        l.offered_as +=
            &format!(", and {tail} more the counters counted dropped after the last one received");
    }
    l
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
    let ledger = build_ledger(a, port, o, &s, link_drops, extras);
    let device: Vec<DeviceBucket> = device_buckets(port, &s);
    // The device's losses (frames left unread in a ring at the stop are not among them).
    let device_total: u64 = device.iter().filter(|d| d.3).map(|d| d.2).sum();
    let (model_polls, model_idle_polls, model_work_ns) = model_polls(port);
    // The active window; a run that moved one packet or none has no rate to speak of.
    let w = window::Window {
        first: o.first,
        last: o.last,
    };
    let secs = w.secs();
    // Every loss figure is the ledger's, so that no two lines disagree.
    let stamped = extras.flow_totals.is_some() || o.stamped_sent > 0 || seq.stamped > 0;
    let lost = if stamped { ledger.lost() } else { 0 };
    let (packets, bytes, errors, drops) = if a.rx {
        (s.rx_packets, s.rx_bytes, s.rx_errors, s.rx_drops)
    } else {
        (s.tx_packets, s.tx_bytes, s.tx_errors, s.tx_drops)
    };
    let r = w.rate(packets, bytes);
    let sum = Summary {
        port: info,
        direction: if a.rx { "rx" } else { "tx" },
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
        device_drops: device_total,
        device_rx_no_buffer: port.device_counters().rx_no_buffer,
        link_tx_dropped: link_drops.unwrap_or(0),
        tx_bursts: o.tx_bursts,
        tx_ring_full_bursts: o.tx_ring_full_bursts,
        tx_ring_full_ns: o.tx_ring_full_ns,
        tx_ring_full_stretches: o.tx_ring_full_stretches,
        tx_pool_empty: o.tx_pool_empty,
        tx_late_skipped: o.tx_late_skipped,
        tx_max_lag_ns: o.tx_max_lag_ns,
        model_polls,
        model_idle_polls,
        model_work_ns,
    };
    // Losses outside the queues' counters go to stderr in any case (JSON has them as fields),
    // but for the trials of an RFC 2544 search, where loss is what is looked for.
    if device_total > 0 && !a.silent {
        let parts: Vec<String> = device
            .iter()
            .filter(|d| d.3 && d.2 > 0)
            .map(|d| format!("{} {}", d.2, d.1))
            .collect();
        say!(
            "pktgen: the device lost {device_total} frames: {}",
            parts.join(", ")
        );
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
    if let Some(o) = v.as_object_mut() {
        o.insert("ledger".into(), ledger.to_json());
    }
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
            ", seq: {} stamped, {lost} lost up to the highest sequence number received, {} out \
             of order",
            seq.stamped, seq.out_of_order
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
    outln!("{}", ledger.text());
    if let Some(t) = crate::linkwatch::text() {
        outln!("{t}");
    }
    // The rest of the JSON's fields, so that the text says everything the JSON has.
    outln!(
        "run: {} in all (start-up and drain included), active window {}; {} on {} ({}), {} \
         queue(s); offloads: {}",
        window::fmt_secs(sum.elapsed_s),
        window::fmt_secs(sum.duration_s),
        sum.port.backend,
        sum.port.device,
        sum.port.mode,
        sum.port.queues,
        offloads_text(&sum.port.offloads)
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
