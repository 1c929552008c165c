//! Command-line options of pktgen, and their translation into rawq configuration.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use rawq::flow::Rule;
use rawq::{Backend, Error};
use rawq_gen::{FlowVary, FrameSource, FrameSpec, Rate, SizeSpec, Stamper};

/// The destination MAC when --dst-mac is left out and not resolved.
pub const DEFAULT_DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// Which backend to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// AF_XDP on a Linux interface (--dev IFNAME).
    Xdp,
    /// ibverbs RAW_PACKET (--dev mlx5_0).
    Verbs,
    /// mlx5 Direct Verbs (--dev mlx5_0).
    Dv,
    /// The software mlx5 device model driven through the DV data path: measures the driver's
    /// own CPU cost.
    Model,
}

impl BackendKind {
    /// The name `rawq::Backend::named` takes.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Xdp => "xdp",
            BackendKind::Verbs => "verbs",
            BackendKind::Dv => "dv",
            BackendKind::Model => "model",
        }
    }
}

/// What flows vary in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Vary {
    /// UDP source port.
    SrcPort,
    /// Source address (last 16 bits).
    SrcIp,
}

impl From<Vary> for FlowVary {
    fn from(v: Vary) -> FlowVary {
        match v {
            Vary::SrcPort => FlowVary::SrcPort,
            Vary::SrcIp => FlowVary::SrcIp,
        }
    }
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("{s:?} is not a MAC address like 02:00:00:00:00:01"));
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?}: bad hex byte {p:?}"))?;
    }
    Ok(m)
}

fn parse_duration(s: &str) -> Result<f64, String> {
    rawq_gen::parse_duration(s).map(|d| d.as_secs_f64())
}

/// The largest burst: more than any ring takes in one go, and small enough to preallocate.
const MAX_BURST: usize = 4096;

fn parse_burst(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_BURST).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: a burst is 1 to {MAX_BURST} packets")),
    }
}

/// Ring sizes a port takes (`PortBuilder::rx_ring` / `tx_ring`), said in the option's words.
fn parse_ring(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if n.is_power_of_two() && (8..=32768).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?}: a ring is a power of two from 8 to 32768 descriptors"
        )),
    }
}

/// How long --txrx listens after its last send.
fn parse_rx_mode(s: &str) -> Result<rawq::queue::RxMode, String> {
    s.parse().map_err(|e: rawq::Error| e.to_string())
}

fn parse_drain(s: &str) -> Result<std::time::Duration, String> {
    rawq_gen::parse_duration(s)
}

fn parse_pattern(s: &str) -> Result<rawq_gen::Pattern, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

fn parse_rq(s: &str) -> Result<rawq::RqType, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

fn parse_cqe_comp(s: &str) -> Result<rawq::CqeComp, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

fn parse_core(c: &str) -> Result<usize, String> {
    c.trim()
        .parse()
        .map_err(|_| format!("{c:?} is not a core number"))
}

/// pktgen: a traffic generator and counter on rawq queues (AF_XDP, ibverbs, mlx5 DV or the
/// software mlx5 device).
///
/// Sends template UDP frames (or a pcap) at a set rate, or receives and counts them (--rx), or
/// both through a reflector (--txrx); prints live rates and a final summary (--json).
#[derive(Clone, Debug, Parser)]
#[command(name = "pktgen", version)]
pub struct Args {
    /// Backend.
    #[arg(short, long, value_enum, default_value = "xdp")]
    pub backend: BackendKind,
    /// Interface (xdp) or RDMA device (verbs, dv).
    #[arg(short, long, default_value = "")]
    pub dev: String,
    /// RDMA port number (verbs, dv).
    #[arg(long, default_value_t = 1)]
    pub port: u8,
    /// Send engine of -b xdp: afxdp (a socket per queue) or live (the kernel's live-frames
    /// generator: send only, one fixed size, coarse --rate).
    #[arg(long, value_enum, default_value = "afxdp")]
    pub engine: crate::opts::Engine,
    /// Receive and count instead of sending. On Ctrl-C or SIGTERM the receiver first counts
    /// what its queues already hold and what the device is still delivering (until a queue
    /// gives nothing for 100 ms, 2 s at most), then prints the summary; a second signal ends
    /// pktgen at once (status 130, no summary).
    #[arg(long, conflicts_with = "txrx")]
    pub rx: bool,
    /// With --rx: how the receive threads wait for frames, as VPP's rx-mode: poll (busy-poll
    /// while frames come, short naps after a long quiet spell), interrupt (sleep on the queue's
    /// notification fd whenever a poll finds nothing) or adaptive (sleep after 512 empty
    /// polls). --txrx threads pace their sends and never sleep on receive.
    #[arg(long, default_value = "poll", value_parser = parse_rx_mode, requires = "rx")]
    pub rx_mode: rawq::queue::RxMode,
    /// Send, and count what comes back on the same queues (a reflector or DUT in between).
    #[arg(long)]
    pub txrx: bool,
    /// With --txrx: how long to keep receiving after the last send (frames that come back
    /// later count as lost). Raise it above the round trip of what is in between (e.g. fwd
    /// --delay).
    #[arg(long, default_value = "300ms", value_parser = parse_drain, requires = "txrx")]
    pub drain: std::time::Duration,
    /// Flow rule for --rx / --txrx (see rawq::flow::text); default: UDP (TCP with --l4 tcp-*) to
    /// --dst-port spread over the queues. Repeatable.
    #[arg(long = "rule")]
    pub rules: Vec<String>,

    /// Destination MAC. Left out with --dst-ip given, pktgen resolves it on the link (the
    /// kernel's ARP table, else ARP or IPv6 neighbour discovery through the port's interface);
    /// otherwise 02:00:00:00:00:02.
    #[arg(long, value_parser = parse_mac)]
    pub dst_mac: Option<[u8; 6]>,
    /// Source MAC (default: the interface's, where known).
    #[arg(long, value_parser = parse_mac)]
    pub src_mac: Option<[u8; 6]>,
    /// Source address (IPv4 or IPv6).
    #[arg(long, default_value = "198.18.0.1")]
    pub src_ip: IpAddr,
    /// Destination address.
    #[arg(long, default_value = "198.18.0.2")]
    pub dst_ip: IpAddr,
    /// UDP source port (of the first flow).
    #[arg(long, default_value_t = 1024)]
    pub src_port: u16,
    /// UDP destination port.
    #[arg(long, default_value_t = 9000)]
    pub dst_port: u16,
    /// Frame size without FCS: N, MIN-MAX, or imix (7 × 60, 4 × 590, 1 × 1514; over IPv6 the 60s
    /// are raised to 74 bytes, 78 with FCS as RFC 5180 asks, or more to fit the headers and
    /// stamp). Default: the smallest frame that fits the template, 60 bytes at least (60 for
    /// IPv4 and UDP; 62 over IPv6; more with --latency, --seq, VLAN tags or TCP).
    #[arg(short, long, value_parser = crate::opts::parse_size)]
    pub size: Option<SizeSpec>,
    /// Number of flows.
    #[arg(short, long, default_value_t = 1)]
    pub flows: u32,
    /// What varies between flows (src-ip never produces --dst-ip; for ranges of ports and
    /// addresses see --range).
    #[arg(long, value_enum, default_value = "src-port")]
    pub vary: Vary,
    /// Stamp sequence numbers into the payload (the receiver counts loss and reordering).
    #[arg(long)]
    pub seq: bool,
    /// Frames to send from this pcap or pcapng file instead of a template (cycled, sent as
    /// they are: the template options do not apply).
    #[arg(long, conflicts_with_all = [
        "dst_mac", "src_mac", "src_ip", "dst_ip", "src_port", "dst_port", "size", "flows",
        "vary", "seq",
    ])]
    pub pcap: Option<PathBuf>,

    /// Rate over all queues: 1000, 2.5Mpps, 10Gbps (L1), max; 0 = unlimited (like max).
    #[arg(short, long, default_value = "max")]
    pub rate: Rate,
    /// Inter-arrival pattern at --rate: constant, poisson (exponential gaps, a Poisson process;
    /// poisson:SEED for another schedule; each queue draws its own) or, with --burst-gap,
    /// bursts.
    #[arg(long, default_value = "constant", value_parser = parse_pattern, conflicts_with = "burst_gap")]
    pub pattern: rawq_gen::Pattern,
    /// Bursts of N frames, each followed by GAP of silence (e.g. 32,1ms; 8,50us), per queue:
    /// within a burst frames go at --rate (back to back with max).
    #[arg(long, value_name = "N,GAP", value_parser = rawq_gen::Pattern::burst_gap)]
    pub burst_gap: Option<rawq_gen::Pattern>,
    /// Packets to send (over all queues); 0 = no limit.
    #[arg(short = 'n', long, default_value_t = 0)]
    pub count: u64,
    /// Run time: 5, 5s, 500ms, 2m, 1h. Default: until --count, Ctrl-C or SIGTERM.
    #[arg(short = 't', long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub duration: Option<f64>,
    /// Number of queues (one thread each).
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub queues: u16,
    /// Cores to pin the queue threads to, e.g. 0,1 (default: queue i on core i mod ncores).
    #[arg(long, value_parser = parse_core, value_delimiter = ',')]
    pub cores: Option<Vec<usize>>,
    /// Burst size (1 to 4096).
    #[arg(long, default_value_t = 32, value_parser = parse_burst)]
    pub burst: usize,
    /// Ring size (rx and tx descriptors per queue): a power of two from 8 to 32768.
    #[arg(long, default_value_t = 2048, value_parser = parse_ring)]
    pub ring: u32,
    /// Receive queue of -b dv / -b model: cyclic, striding (8 strides per WQE) or striding:N
    /// (N = 8 or 16), as DPDK's mlx5 `mprq_en` devarg.
    #[arg(long, default_value = "cyclic", value_parser = parse_rq)]
    pub rq: rawq::RqType,
    /// Receive CQE compression of -b dv / -b model: off, hash (cyclic RQ only) or csum, as DPDK's
    /// mlx5 `rxq_cqe_comp_en` devarg (default: dv compresses where the device can, hash on a
    /// cyclic RQ and csum on a striding one; model does not compress).
    #[arg(long, value_parser = parse_cqe_comp)]
    pub cqe_comp: Option<rawq::CqeComp>,
    /// RSS key of `rss` rules on verbs, dv and model: 40 bytes as 80 hex digits (default:
    /// Microsoft's key, 6d5a56da...).
    #[arg(long, value_parser = parse_rss_key, conflicts_with = "rss_symmetric")]
    pub rss_key: Option<[u8; 40]>,
    /// What RSS hashes: ip (addresses) or ip-port (addresses and TCP/UDP ports; the default).
    #[arg(long, default_value = "ip-port", value_parser = parse_rss_fields)]
    pub rss_fields: rawq::RssFields,
    /// RSS with the symmetric key (0x6d5a repeated): both directions of a flow on one queue.
    #[arg(long)]
    pub rss_symmetric: bool,

    /// Port MTU (68..9198; `PortBuilder::mtu`): received frames of up to MTU + 18 bytes are
    /// scattered over several pool buffers (chained packets on -b dv / verbs / model) instead of
    /// sizing every buffer for the largest, and a frame above it is refused on transmit.
    #[arg(long)]
    pub mtu: Option<u32>,

    /// Per-queue figures in the live stats.
    #[arg(short, long)]
    pub verbose: bool,
    /// Print the final summary as JSON on stdout (live stats go to stderr).
    #[arg(long)]
    pub json: bool,
    /// No live stats.
    #[arg(long)]
    pub quiet: bool,

    /// Measurement options: latency, capture, streamed stats, richer templates.
    #[command(flatten)]
    pub measure: crate::measure::MeasureArgs,

    /// RFC 2544 benchmark options.
    #[command(flatten)]
    pub bench: crate::opts::BenchArgs,

    /// Several streams in one run (--stream, --profile).
    #[command(flatten)]
    pub streams: crate::opts::StreamArgs,

    /// Draw the results into this SVG file: a run's latency histogram (with --latency) and
    /// packets sent per second; an RFC 2544 test's frame loss and latency over the rate.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Set for the trials of an RFC 2544 search: the run prints nothing, its caller reports.
    #[arg(skip)]
    pub silent: bool,
    /// What a link that goes down does to the run: exit (end it with the cause, non-zero
    /// status) or wait (pause sending until it is back; frames due meanwhile are counted as
    /// not sent). A device failure or an interface that goes away always ends the run.
    #[arg(long, value_enum, default_value = "exit")]
    pub on_link_down: crate::linkwatch::OnLinkDown,
}

impl Args {
    /// The inter-arrival pattern of queue `q` (each queue its own Poisson seed: the sum of
    /// independent Poisson processes is one).
    pub fn pattern(&self, q: u16) -> rawq_gen::Pattern {
        use rawq_gen::Pattern;
        match (self.burst_gap, self.pattern) {
            (Some(b), _) => b,
            (None, Pattern::Poisson { seed }) => Pattern::Poisson {
                seed: seed.wrapping_add(q as u64),
            },
            (None, p) => p,
        }
    }

    /// The backend the options name. On the software device a tx-only run uses a sink wire
    /// (what is measured is the driver's cost); --txrx / --rx use its loopback.
    ///
    /// `--rq` / `--cqe-comp` ([`Args::dv_rx`]) go to the port's configuration, which the DV
    /// backend and the model alike take.
    pub fn backend(&self) -> rawq::Result<Backend> {
        let b = Backend::named(self.backend.name(), &self.dev, self.port)?;
        let rx = self.dv_rx()?;
        #[cfg(feature = "mlx5")]
        if let Backend::Model(mut o) = b {
            if !(self.txrx || self.rx) {
                o.wire = rawq::dv::model::ModelWire::Sink;
            }
            o.empw = true;
            if self.measure.hw_timestamps {
                o.clock_khz = crate::measure::MODEL_CLOCK_KHZ;
            }
            return Ok(Backend::Model(o));
        }
        if rx != rawq::DvRxOptions::default() && !matches!(b, Backend::Dv { .. }) {
            return Err(Error::Config(format!(
                "--rq / --cqe-comp are options of -b dv and -b model, not of -b {}",
                self.backend.name()
            )));
        }
        Ok(b)
    }

    /// The receive side `--rq` / `--cqe-comp` ask for (checked: a striding RQ has no hash
    /// compression).
    pub fn dv_rx(&self) -> rawq::Result<rawq::DvRxOptions> {
        let o = rawq::DvRxOptions {
            rq: self.rq,
            cqe_comp: self.cqe_comp,
        };
        o.check()?;
        Ok(o)
    }

    /// The source MAC: --src-mac, the interface's, or 02:00:00:00:00:01.
    pub fn src_mac_or_default(&self) -> [u8; 6] {
        self.src_mac
            .or_else(|| rawq_gen::netdev_mac(&self.dev))
            .unwrap_or([2, 0, 0, 0, 0, 1])
    }

    /// The frames to send: the template the options describe, or the frames of --pcap.
    pub fn source(&self) -> rawq::Result<FrameSource> {
        if let Some(path) = &self.pcap {
            let (frames, cut) = read_pcap(path)
                .map_err(|e| Error::Config(format!("--pcap {}: {e}", path.display())))?;
            if cut > 0 {
                say!(
                    "pktgen: --pcap {}: {cut} of {} packets were cut by the capture's snap \
                     length: they are sent as captured (the bytes the file has), as tcpreplay \
                     does",
                    path.display(),
                    frames.len()
                );
            }
            return Ok(FrameSource::Frames(frames));
        }
        let src_mac = self.src_mac_or_default();
        let mut spec = FrameSpec {
            dst_mac: self.dst_mac.unwrap_or(DEFAULT_DST_MAC),
            src_mac,
            src_ip: self.src_ip,
            dst_ip: self.dst_ip,
            src_port: self.src_port,
            dst_port: self.dst_port,
            flows: self.measure.flows(self.flows),
            vary: self.vary.into(),
            sizes: SizeSpec::Fixed(60),
            stamp: self.seq,
        };
        let shape = self.measure.shape();
        // No -s: the smallest frame that fits the template (the Ethernet minimum, 60 without
        // FCS, at least).
        spec.sizes = self
            .size
            .clone()
            .unwrap_or_else(|| SizeSpec::Fixed(spec.min_len_with(&shape).max(60) as u16));
        Ok(FrameSource::Template(Stamper::with_shape(spec, shape)?))
    }

    /// The receive rules: --rule, or UDP to --dst-port spread over all queues.
    pub fn rules(&self) -> rawq::Result<Vec<Rule>> {
        if self.rules.is_empty() {
            let qs: Vec<String> = (0..self.queues).map(|q| q.to_string()).collect();
            // The template's transport (--l4), so TCP templates are steered too.
            let proto = match self.measure.l4 {
                crate::measure::L4Arg::Udp => "udp",
                _ => "tcp",
            };
            // Over several queues, the IP version of the template too: an RSS QP hashes the
            // addresses of one IP version, and the kernel refuses one with no hash fields over
            // several WQs (EINVAL; Linux drivers/infiniband/hw/mlx5/qp.c,
            // `create_rss_raw_qp_tir`).
            let ip = match (self.queues, self.dst_ip) {
                (1, _) => "",
                (_, std::net::IpAddr::V4(_)) => " ipv4",
                (_, std::net::IpAddr::V6(_)) => " ipv6",
            };
            return Ok(vec![format!(
                "{proto} dst-port {}{ip} -> rss {}",
                self.dst_port,
                qs.join(",")
            )
            .parse()?]);
        }
        Ok(self
            .rules
            .iter()
            .map(|r| r.parse())
            .collect::<Result<_, _>>()?)
    }
}

/// Reads the frames of a pcap or pcapng file: Ethernet link type only, each at least an
/// Ethernet header long. A frame cut by the capture's snap length (`tcpdump -s 64`) is kept as
/// captured; how many were cut is returned with the frames.
fn read_pcap(path: &std::path::Path) -> Result<(Vec<Vec<u8>>, usize), String> {
    use pcap_file::pcapng::Block;
    use pcap_file::DataLink;
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    // (frame, original length, link type)
    let mut raw: Vec<(Vec<u8>, u32, DataLink)> = Vec::new();
    if bytes.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
        let mut r =
            pcap_file::pcapng::PcapNgReader::new(&bytes[..]).map_err(|e| format!("pcapng: {e}"))?;
        // Link types of the interfaces of the current section, by interface id.
        let mut links: Vec<DataLink> = Vec::new();
        while let Some(b) = r.next_block() {
            match b.map_err(|e| format!("pcapng: {e}"))? {
                Block::SectionHeader(_) => links.clear(),
                Block::InterfaceDescription(i) => links.push(i.linktype),
                Block::EnhancedPacket(p) => {
                    let link = *links
                        .get(p.interface_id as usize)
                        .ok_or("pcapng: a packet names an interface that is not described")?;
                    raw.push((p.data.into_owned(), p.original_len, link));
                }
                Block::SimplePacket(p) => {
                    let link = *links
                        .first()
                        .ok_or("pcapng: a packet before any interface description")?;
                    raw.push((p.data.into_owned(), p.original_len, link));
                }
                _ => {}
            }
        }
    } else {
        let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).map_err(|e| {
            format!("{e}: not a pcap or pcapng file (convert with `editcap -F pcap IN OUT`)")
        })?;
        let link = r.header().datalink;
        // Raw packets: pcap-file 2.0's checked reader refuses orig_len > snaplen, which is
        // what every snaplen-limited capture has.
        while let Some(p) = r.next_raw_packet() {
            let p = p.map_err(|e| e.to_string())?;
            raw.push((p.data.into_owned(), p.orig_len, link));
        }
    }
    if raw.is_empty() {
        return Err("no packets in the file".into());
    }
    let mut frames = Vec::with_capacity(raw.len());
    let mut cut = 0;
    for (i, (f, orig, link)) in raw.into_iter().enumerate() {
        let n = i + 1;
        if link != DataLink::ETHERNET {
            return Err(format!(
                "packet {n} has link type {link:?}: pktgen sends Ethernet frames only (capture \
                 on an Ethernet interface, not `any` or a tunnel)"
            ));
        }
        cut += usize::from((f.len() as u32) < orig);
        if f.len() < 14 {
            return Err(format!(
                "packet {n} is {} bytes, shorter than an Ethernet header (14): not a frame a \
                 NIC can send",
                f.len()
            ));
        }
        frames.push(f);
    }
    Ok((frames, cut))
}

/// The RSS configuration of `--rss-key` / `--rss-fields` / `--rss-symmetric`.
pub fn rss_config(
    key: Option<[u8; 40]>,
    fields: rawq::RssFields,
    symmetric: bool,
) -> rawq::RssConfig {
    let mut c = rawq::RssConfig {
        fields,
        ..Default::default()
    };
    if let Some(k) = key {
        c.key = k;
    }
    if symmetric {
        c = c.symmetric();
    }
    c
}

fn parse_rss_key(s: &str) -> Result<[u8; 40], String> {
    rawq::RssConfig::parse_key(s).map_err(|e| e.to_string())
}

fn parse_rss_fields(s: &str) -> Result<rawq::RssFields, String> {
    s.parse().map_err(|e: Error| e.to_string())
}
