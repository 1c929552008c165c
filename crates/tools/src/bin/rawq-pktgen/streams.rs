//! Several streams in one run (`--stream`, `--profile`): each its own template (size or IMIX,
//! L4, VLAN tags, ranges, ports, flows), rate and count, as TRex's and MoonGen's profiles have.
//!
//! A stream is sent by a queue of its own (stream i on queue i, one thread each): its frames
//! carry the stream id next to their sequence number (the stamp's `stream` field, see
//! `rawq_gen::Stamp`), so that whatever queue a frame comes back on, it is counted under its
//! stream. The report gives each stream's counts, loss (with --txrx: sent less received) and
//! latency; every stream's frames are stamped (--seq is implied).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use clap::ValueEnum;
use rawq::Error;
use rawq_gen::{fmt_ns, FieldRange, FrameSource, LatencyHistogram, SeqTracker, PERCENTILES};
use serde_json::{json, Value};

use crate::cli::Args;
use crate::opts::{StreamDef, KEYS};
use crate::window::{fmt_pps, Window};

/// The streams of a TOML profile.
fn read_profile(path: &Path) -> Result<Vec<StreamDef>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    if let Some(k) = table.keys().find(|k| *k != "stream") {
        return Err(format!(
            "unknown top-level key {k:?}: a profile holds [[stream]] tables only"
        ));
    }
    let streams = table
        .get("stream")
        .and_then(|s| s.as_array())
        .ok_or("no [[stream]] table")?;
    let scalar = |k: &str, v: &toml::Value| match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        _ => Err(format!("{k:?}: expected a string or a number, found {v}")),
    };
    let mut out = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        let t = s
            .as_table()
            .ok_or_else(|| format!("stream {i}: expected a table"))?;
        let mut d = Vec::new();
        for (k, v) in t {
            match v {
                toml::Value::Array(items) => {
                    for item in items {
                        d.push((
                            k.clone(),
                            scalar(k, item).map_err(|e| format!("stream {i}: {e}"))?,
                        ));
                    }
                }
                v => d.push((
                    k.clone(),
                    scalar(k, v).map_err(|e| format!("stream {i}: {e}"))?,
                )),
            }
        }
        out.push(StreamDef(d));
    }
    Ok(out)
}

/// A stream ready to send.
pub struct Stream {
    pub name: String,
    pub src: Arc<FrameSource>,
    /// Its rate (None: as fast as its queue goes).
    pub pps: Option<f64>,
    /// Frames to send (0: until the run ends).
    pub count: u64,
}

/// The streams the options give (none without --stream / --profile), and the options the run
/// goes on with: one queue per stream, stamps on, a receive rule for each stream's transport
/// and destination port.
pub fn resolve(a: &Args) -> rawq::Result<(Vec<Stream>, Option<Args>)> {
    let defs = match &a.streams.profile {
        Some(p) => {
            read_profile(p).map_err(|e| Error::Config(format!("--profile {}: {e}", p.display())))?
        }
        None => a.streams.streams.clone(),
    };
    if defs.is_empty() {
        return Ok((Vec::new(), None));
    }
    if a.engine == crate::opts::Engine::Live {
        return Err(Error::Config(
            "--stream / --profile: the live engine sends one template; use --engine afxdp".into(),
        ));
    }
    if a.queues != 1 {
        return Err(Error::Config(format!(
            "-q {} with streams: each stream is sent by a queue of its own, so the queues are \
             the {} streams; drop -q",
            a.queues,
            defs.len()
        )));
    }
    let n = u16::try_from(defs.len())
        .ok()
        .filter(|&n| n <= 1024)
        .ok_or_else(|| Error::Config(format!("{} streams: at most 1024", defs.len())))?;
    let mut streams = Vec::new();
    let mut rules = Vec::new();
    for (i, d) in defs.iter().enumerate() {
        let s = stream_args(a, i, d)?;
        let src = s.source().map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("stream {i}: {m}")),
            e => e,
        })?;
        let pps = s.rate.pps(src.mean_len());
        let name =
            d.0.iter()
                .rev()
                .find(|(k, _)| k == "name")
                .map_or_else(|| i.to_string(), |(_, v)| v.clone());
        // Each stream's frames come back to the queues by its transport and port.
        let proto = match s.measure.l4 {
            crate::measure::L4Arg::Udp => "udp",
            _ => "tcp",
        };
        let ip = match s.dst_ip {
            std::net::IpAddr::V4(_) => "ipv4",
            std::net::IpAddr::V6(_) => "ipv6",
        };
        let qs: Vec<String> = (0..n).map(|q| q.to_string()).collect();
        let rule = format!(
            "{proto} dst-port {} {ip} -> rss {}",
            s.dst_port,
            qs.join(",")
        );
        if !rules.contains(&rule) {
            rules.push(rule);
        }
        streams.push(Stream {
            name,
            src: Arc::new(src),
            pps,
            count: s.count,
        });
    }
    let mut run = a.clone();
    run.queues = n;
    run.seq = true;
    run.count = 0;
    if run.rules.is_empty() {
        run.rules = rules;
    }
    Ok((streams, Some(run)))
}

/// The options of stream `i`: the run's, with the stream's keys applied.
fn stream_args(a: &Args, i: usize, d: &StreamDef) -> rawq::Result<Args> {
    // What the stream leaves out comes from the run's options, -n included.
    let mut s = a.clone();
    s.seq = true;
    // A stream's own ranges and tags replace the run's, when it gives any.
    let (mut vlans, mut ranges) = (Vec::new(), Vec::new());
    for (k, v) in &d.0 {
        let bad = |e: String| Error::Config(format!("stream {i}: {k}={v}: {e}"));
        let num = |v: &str| v.trim().parse::<u64>().map_err(|e| bad(e.to_string()));
        match k.as_str() {
            "name" => {}
            "size" => s.size = Some(crate::opts::parse_size(v).map_err(bad)?),
            "rate" => s.rate = v.parse().map_err(|e: Error| bad(e.to_string()))?,
            "count" => s.count = num(v)?,
            "l4" => s.measure.l4 = crate::measure::L4Arg::from_str(v, true).map_err(bad)?,
            "payload" => {
                s.measure.payload = crate::measure::PayloadArg::from_str(v, true).map_err(bad)?
            }
            "vlan" => vlans.push(crate::measure::parse_vlan(v).map_err(bad)?),
            "range" => ranges.push(
                v.parse::<FieldRange>()
                    .map_err(|e: Error| bad(e.to_string()))?,
            ),
            "src-port" => s.src_port = u16::try_from(num(v)?).map_err(|e| bad(e.to_string()))?,
            "dst-port" => s.dst_port = u16::try_from(num(v)?).map_err(|e| bad(e.to_string()))?,
            "flows" => {
                s.flows = u32::try_from(num(v)?)
                    .ok()
                    .filter(|&f| f >= 1)
                    .ok_or_else(|| bad("a flow count is 1 or more".into()))?
            }
            _ => {
                return Err(Error::Config(format!(
                    "stream {i}: unknown key {k:?} (keys: {})",
                    KEYS.join(", ")
                )))
            }
        }
    }
    if !vlans.is_empty() {
        s.measure.vlans = vlans;
    }
    if !ranges.is_empty() {
        s.measure.ranges = ranges;
    }
    Ok(s)
}

/// The largest frames of the streams (the pool's buffers must hold them).
pub fn largest(streams: &[Stream]) -> Option<Arc<FrameSource>> {
    streams
        .iter()
        .map(|s| s.src.clone())
        .max_by_key(|s| s.max_len())
}

/// What stream i's queue did: frames it sent, its active window.
#[derive(Clone, Copy, Default)]
pub struct Sent {
    pub sent: u64,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

/// Each stream's counts, rates and latency, as JSON (the summary's `streams`) and text.
pub fn report(
    a: &Args,
    streams: &[Stream],
    sent: &[Sent],
    seq: &SeqTracker,
    lat: &[LatencyHistogram],
) -> (Value, String) {
    let mut rows = Vec::new();
    let mut text = String::from("streams:\n");
    for (i, s) in streams.iter().enumerate() {
        let q = sent.get(i).copied().unwrap_or_default();
        // What came back: with --txrx only (a send-only run receives nothing).
        let (received, rx_bytes) = seq.stream(i as u16);
        let (received, rx_bytes) = (a.txrx.then_some(received), a.txrx.then_some(rx_bytes));
        let lost = received.map(|r| q.sent.saturating_sub(r));
        let w = Window {
            first: q.first,
            last: q.last,
        };
        let pps = w.rate(q.sent, 0).map(|r| r.0);
        let empty = LatencyHistogram::new();
        let h = lat.get(i).unwrap_or(&empty);
        let mut l = serde_json::Map::new();
        l.insert("count".into(), json!(h.count()));
        l.insert("min_ns".into(), json!(h.min()));
        for (name, p) in PERCENTILES {
            l.insert(format!("{name}_ns"), json!(h.quantile(p)));
        }
        l.insert("max_ns".into(), json!(h.max()));
        l.insert("mean_ns".into(), json!(h.mean()));
        rows.push(json!({
            "stream": i,
            "name": s.name,
            "target_pps": s.pps,
            "count": s.count,
            "sent": q.sent,
            "pps": pps,
            "received": received,
            "rx_bytes": rx_bytes,
            "lost": lost,
            "latency": Value::Object(l),
        }));
        let f = |v: Option<u64>| v.map_or("-".into(), fmt_ns);
        text.push_str(&format!(
            "  {i} {}: {} sent at {} pps (target {}){}",
            s.name,
            q.sent,
            pps.map_or("-".into(), fmt_pps),
            s.pps.map_or("max".into(), fmt_pps),
            received
                .zip(lost)
                .map_or(String::new(), |(r, l)| format!(", {r} received, {l} lost")),
        ));
        if h.count() > 0 {
            text.push_str(&format!(
                ", latency min {} p50 {} p99 {} max {}",
                f(h.min()),
                f(h.quantile(0.5)),
                f(h.quantile(0.99)),
                f(h.max())
            ));
        }
        text.push('\n');
    }
    (Value::Array(rows), text)
}
