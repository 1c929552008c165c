//! The option types the command line ([`crate::cli`]) shares with the parts that run them:
//! the send engine (`live`), RFC 2544's options (`rfc2544`), the streams (`streams`) and the
//! frame-size parser. Below all of them, so that the command line and the runners, which take
//! the whole command line, import each other in one direction only.

use std::path::PathBuf;

use clap::{Args as ClapArgs, ValueEnum};
use rawq_gen::{Rate, SizeSpec};
use serde::Serialize;

/// The send engine of `-b xdp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// An AF_XDP socket per queue (sends and receives).
    Afxdp,
    /// The kernel's live-frames generator (send only; kernel ≥ 5.18).
    Live,
}

/// Which RFC 2544 test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Test {
    /// The highest rate with no loss (section 26.1), by binary search; with the NDR and PDR.
    Throughput,
    /// The throughput search, then one trial at the NDR with every frame stamped (section
    /// 26.2): its latency percentiles.
    Latency,
    /// The frame-loss-rate curve (section 26.3): trials from --rate-hi down in steps of 10% of
    /// it, until two in a row lose nothing.
    Loss,
    /// The longest burst at the port's full rate that comes back whole (section 26.4), by
    /// binary search on the burst length up to --trial's worth of frames.
    BackToBack,
}

/// A search resolution: a share of the upper rate or a rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Resolution {
    /// A fraction (0 to 1) of --rate-hi.
    Share(f64),
    /// A rate.
    Rate(Rate),
}

fn parse_resolution(s: &str) -> Result<Resolution, String> {
    if let Some(p) = s.trim().strip_suffix('%') {
        return match p.trim().parse::<f64>() {
            Ok(v) if v > 0.0 && v < 100.0 => Ok(Resolution::Share(v / 100.0)),
            _ => Err(format!("{s:?}: a share is above 0% and below 100%")),
        };
    }
    match s.parse::<Rate>().map_err(|e| e.to_string())? {
        Rate::Unlimited => Err(format!(
            "{s:?}: a resolution is a rate (1kpps, 10Mbps) or a share of --rate-hi (1%)"
        )),
        r => Ok(Resolution::Rate(r)),
    }
}

fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    match t.strip_suffix('%').unwrap_or(t).trim().parse::<f64>() {
        Ok(v) if (0.0..100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?}: a loss tolerance in percent, from 0 to below 100"
        )),
    }
}

fn parse_trial(s: &str) -> Result<f64, String> {
    rawq_gen::parse_duration(s).map(|d| d.as_secs_f64())
}

fn parse_frame_size(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(n) if n >= 64 => Ok(n),
        _ => Err(format!(
            "{s:?}: an RFC 2544 frame size counts the FCS: 64 (the Ethernet minimum) to 65535"
        )),
    }
}

/// The options of `--rfc2544`.
#[derive(Clone, Debug, ClapArgs)]
pub struct BenchArgs {
    /// Run an RFC 2544 test through the device under test (needs --txrx).
    #[arg(long, value_enum, requires = "txrx", conflicts_with_all = [
        "rx", "size", "rate", "count", "duration", "pcap", "json_lines",
    ])]
    pub rfc2544: Option<Test>,
    /// RFC 2544 frame sizes, FCS included (64 is sent as -s 60); the default is RFC 2544's
    /// list for Ethernet (section 9.1).
    #[arg(long, value_delimiter = ',', value_parser = parse_frame_size,
          default_value = "64,128,256,512,1024,1280,1518", requires = "rfc2544")]
    pub sizes: Vec<u16>,
    /// Length of each trial (RFC 2544 asks for at least 60 s).
    #[arg(long, default_value = "60s", value_parser = parse_trial, requires = "rfc2544")]
    pub trial: f64,
    /// Lowest rate the search tries (default: 1% of --rate-hi).
    #[arg(long, requires = "rfc2544")]
    pub rate_lo: Option<Rate>,
    /// Highest rate the search tries (default: what the port sends unpaced, measured by a first
    /// trial at each size).
    #[arg(long, requires = "rfc2544")]
    pub rate_hi: Option<Rate>,
    /// The search ends when the highest passing and lowest failing rates are this close: a
    /// share of --rate-hi (1%) or a rate (10kpps, 100Mbps).
    #[arg(long, default_value = "1%", value_parser = parse_resolution, requires = "rfc2544")]
    pub resolution: Resolution,
    /// Loss allowed at the NDR (RFC 2544's throughput), in percent of the frames sent.
    #[arg(long, default_value = "0", value_parser = parse_percent, requires = "rfc2544")]
    pub loss_tolerance: f64,
    /// Loss allowed at the PDR (FD.io CSIT's partial-drop rate), in percent.
    #[arg(long, default_value = "0.5", value_parser = parse_percent, requires = "rfc2544")]
    pub pdr_tolerance: f64,
    /// --rfc2544 latency: trials at the NDR; the latency reported is their average (RFC 2544
    /// section 26.2 asks for at least 20).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000), requires = "rfc2544")]
    pub latency_trials: u32,
}

/// The options (flattened into pktgen's command line).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct StreamArgs {
    /// A stream of its own: KEY=VALUE pairs separated by spaces, e.g. 'name=voice size=64
    /// rate=10kpps count=1000 vlan=100'. Keys: name, size, rate, count, l4, vlan (repeatable),
    /// range (repeatable), src-port, dst-port, flows, payload; what a stream leaves out comes
    /// from the other options (-n is then each such stream's count). Repeatable: each stream
    /// is sent by a queue of its own (-q is then the number of streams), and the report counts
    /// each one (--seq is implied).
    #[arg(long = "stream", value_name = "KEY=VALUE ...", value_parser = parse_stream, conflicts_with_all = ["profile", "rx", "pcap", "rfc2544"])]
    pub streams: Vec<StreamDef>,
    /// Streams from a TOML file: one [[stream]] table per stream with the keys of --stream
    /// (vlan and range are arrays of strings; numbers may be numbers or strings).
    #[arg(long, value_name = "FILE.toml", conflicts_with_all = ["rx", "pcap", "rfc2544"])]
    pub profile: Option<PathBuf>,
}

/// One stream as given: its keys and values, in order.
#[derive(Clone, Debug, Default)]
pub struct StreamDef(pub Vec<(String, String)>);

/// The keys a stream takes.
pub const KEYS: [&str; 11] = [
    "name", "size", "rate", "count", "l4", "vlan", "range", "src-port", "dst-port", "flows",
    "payload",
];

fn parse_stream(s: &str) -> Result<StreamDef, String> {
    let mut d = Vec::new();
    for tok in s.split_whitespace() {
        let (k, v) = tok.split_once('=').ok_or_else(|| {
            format!(
                "{tok:?} in --stream {s:?}: expected KEY=VALUE (keys: {})",
                KEYS.join(", ")
            )
        })?;
        d.push((k.to_string(), v.to_string()));
    }
    if d.is_empty() {
        return Err(
            "an empty --stream: give its KEY=VALUE pairs, e.g. 'size=64 rate=1kpps'".into(),
        );
    }
    Ok(StreamDef(d))
}

/// Frame sizes, with the limit named when a number is out of range (the template's own message
/// only says what shape is expected).
pub(crate) fn parse_size(s: &str) -> Result<SizeSpec, String> {
    for part in s.split('-') {
        if let Ok(n) = part.trim().parse::<u64>() {
            if n > u16::MAX as u64 {
                return Err(format!(
                    "{s:?}: {n} bytes is above the largest frame size, 65535 (and above what \
                     any link's MTU allows)"
                ));
            }
        }
    }
    s.parse::<SizeSpec>().map_err(|e| e.to_string())
}
