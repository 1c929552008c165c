//! pktgen as a measurement instrument: template options beyond the basic ones (VLAN, TCP,
//! payload, ranges), latency stamps and histograms, per-flow counts, capture and rate accuracy
//! (the streamed stats it reports on are monitor.rs'). cli.rs flattens [`MeasureArgs`] into its
//! options; main.rs calls the hooks.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use clap::{Args as ClapArgs, ValueEnum};
use rawq::{Packet, Port};
use rawq_gen::{
    monotonic_ns, realtime_ns, CaptureLimits, FieldRange, FlowTracker, FrameSource, L4Kind,
    LatencyHistogram, Marked, Payload, PcapWriter, Shape, Stamp, StampInfo, Stamper, TrialMark,
    Vlan,
};

mod extras;
pub use extras::Extras;

/// What latency timestamps are and what they miss; shown in --help and the report.
pub const SOFTWARE_TS: &str = "software: CLOCK_MONOTONIC read once per transmit burst (every \
stamped frame of a burst carries that time, so a frame at position k of the burst actually \
leaves after the k frames before it) and once per receive burst (frames waiting in the ring are \
timed when the burst is read); both add up to a burst's worth of frame times plus the polling \
interval";

/// What hardware timestamps on an AF_XDP port are (`--hw-timestamps`, an interface with a PHC).
pub const XDP_HARDWARE_TS: &str = "hardware (AF_XDP): the receive time is the driver's \
hardware receive timestamp, read by rawq's XDP steering program with the kfunc \
bpf_xdp_metadata_rx_timestamp, in ns of the interface's PTP hardware clock; the send time is \
that clock read with clock_gettime(/dev/ptpN) once per transmit burst (a frame at position k \
of a burst leaves after the k before it, and the kernel's AF_XDP transmit path adds to it), so \
receive batching and polling add nothing";

/// What kernel receive timestamps are (AF_XDP ports, on by default there); shown in the report.
pub const KERNEL_TS: &str = "kernel XDP-hook receive timestamps, CLOCK_MONOTONIC: the receive \
time is bpf_ktime_get_ns() taken by rawq's XDP steering program when the frame reached the \
receiving interface's XDP hook (carried to pktgen in the frame's XDP metadata), so receive \
polling and batching add nothing; still included are the time the frame waited in the \
driver's ring before its NAPI poll ran (veth: until the softirq of the receiving side ran) \
and, on the send side, CLOCK_MONOTONIC read once per transmit burst (a frame at position k of \
a burst leaves after the k before it) and the kernel's AF_XDP transmit path up to the wire";

/// Kernel receive times on some samples, software receive times on the others.
pub const MIXED_KERNEL_TS: &str = "mixed: kernel XDP-hook receive timestamps (CLOCK_MONOTONIC) \
on the frames the steering program stamped, a CLOCK_MONOTONIC read per receive burst on the \
others (frames the kernel gave no metadata room)";

/// What hardware latency timestamps are (`--hw-timestamps`); shown in --help and the report.
pub const HARDWARE_TS: &str = "hardware: the send time is the device clock read in software \
once per transmit burst, just before the burst is written (MoonGen-style: per-packet transmit \
completion timestamps are out of reach; a frame at position k of a burst leaves after the k \
before it); the receive time is the device's completion timestamp (mlx5 CQE `timestamp`, the \
device clock when the frame was written to its buffer), so receive batching and polling add \
nothing. Both are the same device clock, converted to ns with its frequency";

/// What --hw-timestamps measures on a device that writes no completion timestamps.
pub const DEVICE_CLOCK_SW_TS: &str = "software reads of the device clock: once per transmit \
burst and once per receive burst for frames without a completion timestamp (the device wrote \
none: on the emulated NIC, RAWQ_EMU_CQE_TIMESTAMPS=1 turns them on); batching adds as with \
CLOCK_MONOTONIC";

/// The model's device clock when `--hw-timestamps` turns it on (kHz: 1 tick = 1 ns).
#[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
pub const MODEL_CLOCK_KHZ: u64 = 1_000_000;

/// A device clock (mlx5: what CQE timestamps count).
#[cfg(feature = "mlx5")]
type DevClock = rawq::dv::cq::DeviceClock;

/// No backend built without mlx5 has a device clock.
#[cfg(not(feature = "mlx5"))]
#[derive(Clone)]
enum DevClock {}

#[cfg(not(feature = "mlx5"))]
impl DevClock {
    fn khz(&self) -> u64 {
        match *self {}
    }
    fn now_ns(&self) -> u64 {
        match *self {}
    }
}

/// The clock --hw-timestamps reads send times from, and the receive timestamps count.
#[derive(Clone)]
enum Clock {
    /// An mlx5 device's clock (CQE timestamps).
    // Never built without mlx5 (DevClock is then uninhabited).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    Device(DevClock),
    /// An AF_XDP interface's PTP hardware clock (the driver's XDP receive timestamps).
    #[cfg(feature = "xdp")]
    Phc(Arc<rawq::xdp::phc::Phc>),
}

impl Clock {
    fn khz(&self) -> u64 {
        match self {
            Clock::Device(c) => c.khz(),
            // The kfunc's timestamps are ns.
            #[cfg(feature = "xdp")]
            Clock::Phc(_) => 1_000_000,
        }
    }

    fn now_ns(&self) -> u64 {
        match self {
            Clock::Device(c) => c.now_ns(),
            #[cfg(feature = "xdp")]
            Clock::Phc(p) => p.now_ns(),
        }
    }
}

/// The device clock of `port`, if its backend has one.
fn device_clock(port: &Port) -> Option<DevClock> {
    #[cfg(feature = "mlx5")]
    return port.device_clock();
    #[cfg(not(feature = "mlx5"))]
    {
        let _ = port;
        None
    }
}

/// Transport header of the template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum L4Arg {
    /// UDP.
    Udp,
    /// TCP with SYN set (sequence number 1, valid checksum).
    TcpSyn,
    /// TCP with ACK set (sequence and acknowledgment number 1, valid checksum).
    TcpAck,
}

/// Payload of the template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PayloadArg {
    /// Incrementing bytes 0, 1, 2, …
    Pattern,
    /// Pseudo-random bytes, drawn once into the template (every frame carries the same ones).
    Random,
}

pub(crate) fn parse_vlan(s: &str) -> Result<Vlan, String> {
    let (id, pcp) = s.split_once(',').unwrap_or((s, "0"));
    let id: u16 = id
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected ID[,PCP], e.g. 100 or 100,5"))?;
    let pcp: u8 = pcp
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: the priority must be 0..=7"))?;
    if id > 4095 || pcp > 7 {
        return Err(format!(
            "{s:?}: the id must be 0..=4095, the priority 0..=7"
        ));
    }
    Ok(Vlan { id, pcp })
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let v: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected bytes, e.g. 1000000, 500k, 10M, 1G"))?;
    v.checked_mul(mult)
        .filter(|&b| b > 24)
        .ok_or_else(|| format!("{s:?}: must be more than the 24-byte file header"))
}

fn parse_every(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?}: expected N >= 1 (stamp 1 frame in N)")),
    }
}

/// Measurement options (flattened into pktgen's command line).
#[derive(Clone, Debug, ClapArgs)]
pub struct MeasureArgs {
    /// VLAN tag: ID[,PCP]. Give it twice for QinQ: the first is the outer (802.1ad, TPID 0x88a8)
    /// tag, the second the inner (802.1Q, 0x8100). Flow rules see one 802.1Q tag only, so
    /// QinQ frames coming back to --txrx / --rx need `--rule 'promiscuous -> queue 0'`.
    #[arg(long = "vlan", value_parser = parse_vlan, value_name = "ID[,PCP]")]
    pub vlans: Vec<Vlan>,
    /// Transport header: udp, tcp-syn or tcp-ack (checksums valid over IPv4 and IPv6).
    #[arg(long, value_enum, default_value = "udp")]
    pub l4: L4Arg,
    /// Payload: pattern (0, 1, 2, …) or random (drawn once into the template: every frame
    /// carries the same random bytes).
    #[arg(long, value_enum, default_value = "pattern")]
    pub payload: PayloadArg,
    /// TSO: hand each TCP frame (--l4 tcp-ack or tcp-syn, -s above MSS + headers) to the port
    /// as a super-frame it cuts into segments of at most MSS payload bytes (rawq's
    /// `TxOffload::tso_mss`: the device does it on -b dv / verbs / model; -b xdp refuses it).
    /// Counters count super-frames sent.
    #[arg(long, value_name = "MSS")]
    pub tso: Option<u16>,
    /// Vary a field over a range, pktgen-dpdk's range mode: FIELD=LO-HI[:inc|:rand], FIELD one
    /// of src-port, dst-port, src-ip, dst-ip (IPv6: the last 32 bits). Repeatable; values follow
    /// the flow index (incrementing ranges count like an odometer, the first fastest; rand gives
    /// each flow a random value). Without -f, the flow count is the number of combinations (at
    /// most 65536). A source range never produces the destination address.
    #[arg(long = "range", value_name = "FIELD=LO-HI[:inc|:rand]")]
    pub ranges: Vec<FieldRange>,
    /// Latency: stamp 1 frame in N (default: every frame) with its send time and sequence
    /// number; the receiver (--rx on another port: one-way; --txrx through a reflector:
    /// round-trip) prints min/p50/p90/p99/p99.9/max and a histogram. Frames need 24 bytes of
    /// stamp after the headers (IPv4 + UDP: -s 66 or more). Timestamps are software:
    /// CLOCK_MONOTONIC read once per transmit burst (a frame at position k of a burst leaves
    /// after the k before it) and once per receive burst (frames waiting in the ring are timed
    /// when the burst is read); batching thus adds up to a burst of frame times and a polling
    /// interval. On an AF_XDP port (-b xdp) the receive time is instead the kernel's: rawq's
    /// XDP steering program stamps each frame with CLOCK_MONOTONIC at the XDP hook, so receive
    /// polling and batching add nothing (the wait in the driver's ring before its NAPI poll
    /// still does, and the send side's burst stamp as above); the report says "kernel".
    /// --hw-timestamps uses the device's clock instead.
    #[arg(long, num_args = 0..=1, default_missing_value = "1", value_name = "N", value_parser = parse_every)]
    pub latency: Option<u32>,
    /// With --latency --txrx: hardware timestamps. The receive time is the device's completion
    /// timestamp (mlx5 CQE timestamp); the send time is the same device clock read in software
    /// once per transmit burst, just before the burst is written (transmit completion
    /// timestamps are not taken per packet). Receive batching and polling then add nothing;
    /// the transmit side's burst batching still does. The model (-b model) turns its clock on
    /// (1 GHz). On AF_XDP (-b xdp) the receive time is the driver's hardware receive
    /// timestamp (the kfunc bpf_xdp_metadata_rx_timestamp, Linux 6.3+, a driver with native
    /// XDP) and the send time the interface's PTP hardware clock (/dev/ptpN); an interface
    /// without a PHC (a veth) falls back to kernel XDP-hook timestamps, and the report says
    /// so. Other backends without a device clock are an error. The report says "hardware" when
    /// every sample had a receive timestamp ("mixed" otherwise).
    #[arg(long, requires = "latency")]
    pub hw_timestamps: bool,
    /// Write what is received (--rx, --txrx) to this pcap file (nanosecond timestamps taken
    /// once per receive burst), up to --write-count frames and --write-bytes bytes.
    #[arg(long, value_name = "FILE.pcap")]
    pub write: Option<PathBuf>,
    /// Frames to write at most.
    #[arg(long, default_value_t = 1_000_000, requires = "write")]
    pub write_count: u64,
    /// File size at most: bytes, or with k, M, G.
    #[arg(long, value_parser = parse_bytes, default_value = "1G", requires = "write")]
    pub write_bytes: u64,
    /// Print one JSON object per second on stdout (tx and rx totals and rates, per queue).
    #[arg(long)]
    pub json_lines: bool,
    /// Rows in the worst-flows table (with stamped frames; every flow is in --json).
    #[arg(long, default_value_t = 10)]
    pub worst: usize,
    /// The RFC 2544 trial this run is (set by the search, not an option): its stamps carry
    /// the trial's mark, and its receiver counts only the frames with that mark; another
    /// trial's (late past that trial's drain) are counted apart (`late`).
    #[arg(skip)]
    pub trial_mark: Option<TrialMark>,
}

impl MeasureArgs {
    /// The template shape the options describe.
    pub fn shape(&self) -> Shape {
        Shape {
            vlans: self.vlans.clone(),
            l4: match self.l4 {
                L4Arg::Udp => L4Kind::Udp,
                L4Arg::TcpSyn => L4Kind::TcpSyn,
                L4Arg::TcpAck => L4Kind::TcpAck,
            },
            payload: match self.payload {
                PayloadArg::Pattern => Payload::Pattern,
                PayloadArg::Random => Payload::Random(0x7261_7771),
            },
            ranges: self.ranges.clone(),
            latency: self.latency.is_some(),
            mark: self.trial_mark.map_or(0, TrialMark::get),
        }
    }

    /// The receive timestamps an AF_XDP port on `dev` asks for in this run: kernel ones on a
    /// port that receives stamped frames (--rx, or --txrx with --latency); with
    /// --hw-timestamps hardware ones too, when `dev` has a PTP hardware clock the sender can
    /// read (without one they could not be compared with send times: see `Measure::attach`).
    pub fn xdp_rx_timestamps(&self, dev: &str, rx: bool, txrx: bool) -> rawq::config::RxTimestamps {
        use rawq::config::RxTimestamps;
        if !(rx || (txrx && self.latency.is_some())) {
            return RxTimestamps::Off;
        }
        #[cfg(feature = "xdp")]
        if self.hw_timestamps && matches!(rawq::xdp::phc::phc_index(dev), Ok(Some(_))) {
            return RxTimestamps::Hardware;
        }
        let _ = dev;
        RxTimestamps::Kernel
    }

    /// The flow count: `flows` as given, or with ranges and no -f the number of combinations.
    pub fn flows(&self, flows: u32) -> u32 {
        if flows == 1 && !self.ranges.is_empty() {
            self.shape().combinations()
        } else {
            flows
        }
    }
}

/// Hardware receive timestamp of `p` in ns of the device clock `clock`, when the device
/// stamped it (mlx5 CQE timestamps: the DV backend and the model).
#[inline]
fn hw_rx_ns(p: &Packet, clock: Option<&Clock>) -> Option<u64> {
    p.meta.hw_timestamp_ns(clock?.khz())
}

/// Writes frame `i` of `stream` into `p`, as `FrameSource::fill`, with a latency stamp holding
/// `ts` when given (templates only).
#[inline]
pub fn fill(
    src: &FrameSource,
    p: &mut Packet,
    i: u64,
    stream: u16,
    ts: Option<u64>,
) -> rawq::Result<()> {
    match (src, ts) {
        (FrameSource::Template(st), Some(_)) => {
            let len = st.spec().sizes.size(i) as usize;
            p.set_len(len)?;
            let flows = st.spec().flows as u64;
            st.write_at(p.data_mut(), len, (i % flows) as u32, stream, i, ts);
            Ok(())
        }
        _ => src.fill(p, i, stream),
    }
}

/// State shared by the queue threads.
pub struct Measure {
    /// The options.
    pub args: MeasureArgs,
    every: u64,
    round_trip: bool,
    capture: Option<Mutex<PcapWriter<std::fs::File>>>,
    capture_full: AtomicBool,
    results: Mutex<Vec<QueueMeasure>>,
    /// The device clock (--hw-timestamps), set once the port is open.
    clock: OnceLock<Clock>,
    /// Why --hw-timestamps fell back to kernel timestamps (an AF_XDP interface without a PHC).
    hw_fallback: OnceLock<String>,
    /// With streams (--stream, --profile): how many, and their latencies over all queues.
    streams: OnceLock<usize>,
    stream_lat: Mutex<Vec<LatencyHistogram>>,
}

impl Measure {
    /// Checks the options against the run and opens the capture file.
    pub fn new(
        args: &MeasureArgs,
        src: &FrameSource,
        rx: bool,
        txrx: bool,
    ) -> rawq::Result<Arc<Measure>> {
        let cfg = |m: &str| rawq::Error::Config(m.into());
        if args.tso.is_some() && args.l4 == L4Arg::Udp {
            return Err(cfg(
                "--tso segments TCP: give --l4 tcp-ack (or tcp-syn) and a frame size (-s) above \
                 MSS + headers",
            ));
        }
        if args.tso == Some(0) {
            return Err(cfg(
                "--tso 0: the MSS is the largest TCP payload per segment, above 0",
            ));
        }
        if args.latency.is_some() && rx {
            return Err(cfg(
                "--latency stamps frames on the sending side; the --rx side reports latency of \
                 whatever stamped frames it receives without it",
            ));
        }
        if args.latency.is_some() && !matches!(src, FrameSource::Template(_)) {
            return Err(cfg(
                "--latency cannot stamp frames from --pcap: use a template",
            ));
        }
        if args.hw_timestamps && !txrx {
            return Err(cfg(
                "--hw-timestamps needs --txrx: send and receive times must come from one \
                 port's clock (clocks of different devices are not synchronized)",
            ));
        }
        if args.write.is_some() && !(rx || txrx) {
            return Err(cfg(
                "--write captures received frames: use it with --rx or --txrx",
            ));
        }
        let capture = match &args.write {
            Some(path) => Some(Mutex::new(PcapWriter::create(
                path,
                CaptureLimits {
                    frames: args.write_count,
                    bytes: args.write_bytes,
                    ..Default::default()
                },
            )?)),
            None => None,
        };
        Ok(Arc::new(Measure {
            args: args.clone(),
            every: args.latency.unwrap_or(0) as u64,
            round_trip: txrx,
            capture,
            capture_full: AtomicBool::new(false),
            results: Mutex::new(Vec::new()),
            clock: OnceLock::new(),
            hw_fallback: OnceLock::new(),
            streams: OnceLock::new(),
            stream_lat: Mutex::new(Vec::new()),
        }))
    }

    /// Takes the device clock of the open `port` for --hw-timestamps.
    ///
    /// # Errors
    /// [`rawq::Error::Config`] if --hw-timestamps is given and the port has no device clock.
    pub fn attach(&self, port: &Port) -> rawq::Result<()> {
        if !self.args.hw_timestamps {
            return Ok(());
        }
        #[cfg(feature = "xdp")]
        if port.info().backend == "xdp" {
            let dev = &port.info().device;
            match rawq::xdp::phc::Phc::of_interface(dev) {
                Ok(Some(p)) => {
                    let _ = self.clock.set(Clock::Phc(Arc::new(p)));
                }
                why => {
                    let why = match why {
                        Err(e) => format!("its PTP hardware clock cannot be read ({e})"),
                        _ => "it has no PTP hardware clock (`ethtool -T` says \"PTP Hardware \
                              Clock: none\"; a veth never has one)"
                            .into(),
                    };
                    let _ = self.hw_fallback.set(format!(
                        "--hw-timestamps: {dev}'s hardware receive timestamps cannot be compared \
                         with send times, because {why}: kernel XDP-hook receive timestamps \
                         (CLOCK_MONOTONIC) were used instead"
                    ));
                }
            }
            return Ok(());
        }
        match device_clock(port) {
            Some(c) => {
                let _ = self.clock.set(Clock::Device(c));
                Ok(())
            }
            None => Err(rawq::Error::Config(format!(
                "--hw-timestamps: the {} backend gives this port no device clock (the model \
                 (-b model) has one; drop --hw-timestamps for software timestamps)",
                port.info().backend
            ))),
        }
    }

    /// Keeps a latency histogram for each of `n` streams (stamps' stream ids 0..n), before the
    /// queues start.
    pub fn set_streams(&self, n: usize) {
        let _ = self.streams.set(n);
    }

    /// The latency of each stream over all queues (after the queues deposited their results).
    pub fn stream_latency(&self) -> Vec<LatencyHistogram> {
        self.stream_lat
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }

    /// The per-queue half, for queue (sender stream) `stream`.
    pub fn queue(self: &Arc<Self>, stream: u16) -> QueueMeasure {
        QueueMeasure {
            m: self.clone(),
            clock: self.clock.get().cloned(),
            stream,
            lat: LatencyHistogram::new(),
            // Allocated here, before the queue's loop: none in it.
            stream_lat: (0..self.streams.get().copied().unwrap_or(0))
                .map(|_| LatencyHistogram::new())
                .collect(),
            flows: FlowTracker::default(),
            late: 0,
            negative: 0,
            hw_samples: 0,
            kernel_samples: 0,
            tx_packets: 0,
        }
    }

    /// Hands a queue's results back at the end of its thread.
    pub fn deposit(&self, q: QueueMeasure) {
        if let Ok(mut l) = self.stream_lat.lock() {
            if l.len() < q.stream_lat.len() {
                l.resize_with(q.stream_lat.len(), LatencyHistogram::new);
            }
            for (a, b) in l.iter_mut().zip(&q.stream_lat) {
                a.merge(b);
            }
        }
        if let Ok(mut r) = self.results.lock() {
            r.push(q);
        }
    }
}

/// One queue thread's measurements.
pub struct QueueMeasure {
    m: Arc<Measure>,
    clock: Option<Clock>,
    stream: u16,
    lat: LatencyHistogram,
    /// By the stamps' stream id, with streams.
    stream_lat: Vec<LatencyHistogram>,
    flows: FlowTracker,
    /// Frames another trial sent (their stamps carry its mark): an RFC 2544 trial's receiver
    /// counts them here only.
    late: u64,
    negative: u64,
    hw_samples: u64,
    kernel_samples: u64,
    tx_packets: u64,
}

impl QueueMeasure {
    /// The send time for this burst's stamps (one clock read: the device clock with
    /// --hw-timestamps, else CLOCK_MONOTONIC), or 0 without --latency.
    #[inline]
    pub fn burst_clock(&self) -> u64 {
        if self.m.every > 0 {
            self.now_ns()
        } else {
            0
        }
    }

    /// The clock stamps are read from, now.
    #[inline]
    fn now_ns(&self) -> u64 {
        match &self.clock {
            Some(c) => c.now_ns(),
            None => monotonic_ns(),
        }
    }

    /// Whether frames carry latency stamps (--latency).
    pub fn latency(&self) -> bool {
        self.m.every > 0
    }

    /// The MSS of --tso, if given.
    pub fn tso(&self) -> Option<u16> {
        self.m.args.tso
    }

    /// The latency stamp of frame `i`: the burst's clock on 1 frame in N.
    #[inline]
    pub fn stamp(&self, i: u64, burst_ns: u64) -> Option<u64> {
        (self.m.every > 0 && i.is_multiple_of(self.m.every)).then_some(burst_ns)
    }

    /// Accounts for `n` frames the device took.
    #[inline]
    pub fn on_tx(&mut self, n: usize) {
        self.tx_packets += n as u64;
    }

    /// The stamp of a received frame as this run counts it: in an RFC 2544 trial (a trial
    /// mark) this trial's with the mark taken off its sequence number, and None for another
    /// trial's (counted late by [`QueueMeasure::on_rx`]); a stamp without a mark, and any
    /// stamp outside a trial, as it is.
    #[inline]
    fn own(&self, s: StampInfo) -> Option<StampInfo> {
        match self.m.args.trial_mark.map(|m| m.check(s)) {
            None => Some(s),
            Some(Marked::Own(s) | Marked::Unmarked(s)) => Some(s),
            Some(Marked::Other(_)) => None,
        }
    }

    /// The sequence stamp of a received frame for the run's `--seq` accounting (see
    /// [`QueueMeasure::own`]: another trial's frame has none).
    #[inline]
    pub fn own_stamp(&self, frame: &[u8]) -> Option<Stamp> {
        self.own(Stamper::read_stamp_full(frame)?).map(|s| Stamp {
            stream: s.stream,
            seq: s.seq,
        })
    }

    /// Latency, per-flow counts and capture of a received burst (before it is freed). In an
    /// RFC 2544 trial a frame another trial sent is counted late, and nothing else.
    #[inline]
    pub fn on_rx(&mut self, pkts: &[Packet]) {
        if pkts.is_empty() {
            return;
        }
        let mut now = None;
        for p in pkts {
            let Some(s) = Stamper::read_stamp_full(p.data()) else {
                continue;
            };
            let Some(s) = self.own(s) else {
                self.late += 1;
                continue;
            };
            self.flows.record(&s);
            if let Some(tx) = s.tx_ns {
                let rx = match (hw_rx_ns(p, self.clock.as_ref()), p.meta.kernel_rx_ns()) {
                    (Some(t), _) => {
                        self.hw_samples += 1;
                        t
                    }
                    // The kernel's time is CLOCK_MONOTONIC: comparable with software send
                    // stamps only (not with a device clock's).
                    (None, Some(t)) if self.clock.is_none() => {
                        self.kernel_samples += 1;
                        t
                    }
                    _ => *now.get_or_insert_with(|| self.now_ns()),
                };
                match rx.checked_sub(tx) {
                    Some(d) if d > 0 => {
                        self.lat.record(d);
                        if let Some(h) = self.stream_lat.get_mut(s.stream as usize) {
                            h.record(d);
                        }
                    }
                    _ => self.negative += 1,
                }
            }
        }
        if let Some(c) = &self.m.capture {
            if !self.m.capture_full.load(Relaxed) {
                if let Ok(mut w) = c.lock() {
                    let ts = realtime_ns();
                    for p in pkts {
                        if !matches!(w.write_packet(ts, p), Ok(true)) {
                            self.m.capture_full.store(true, Relaxed);
                            break;
                        }
                    }
                }
            }
        }
    }
}
