//! fwd's command line, checked up front so that every error names the option the user typed.

use std::time::Duration;

use clap::Parser;
use rawq::flow::{Action, Mac, Rule};

use crate::modes::Mode;

/// fwd: forwards frames between rawq queues or ports, like testpmd's forwarding engines.
///
/// One --dev: frames received on queue i go back out of queue i (a reflector). Two --dev:
/// queue i of each port forwards to queue i of the other (a bridge; on xdp both ports share one
/// packet pool, so forwarding copies nothing). --queues N gives each port N queue pairs, RSS
/// spreading the flows over them, and one thread per queue pair (pinned with --cores). Prints a
/// live line per port, and at the end what was forwarded and every frame lost, by place; a
/// link that goes down or away ends the run with its cause and a non-zero status.
#[derive(Debug, Parser)]
#[command(name = "fwd", version)]
pub struct Args {
    /// Backend: xdp, verbs, dv or model.
    #[arg(short, long, default_value = "xdp")]
    pub backend: String,
    /// Interface(s) (xdp) or RDMA device(s) (verbs, dv); give one or two.
    #[arg(short, long = "dev", required = true, num_args = 1)]
    pub devs: Vec<String>,
    /// RDMA port number (verbs, dv).
    #[arg(long, default_value_t = 1)]
    pub port: u8,
    /// Forwarding mode, as testpmd's --forward-mode.
    #[arg(short, long, value_enum, default_value = "io")]
    pub mode: Mode,
    /// Destination MAC of --mode mac (and of the --tx-first frames): MAC for every port, or
    /// PORT,MAC for port PORT (0 or 1, in --dev order), as testpmd's --eth-peer. Default:
    /// 02:00:00:00:00:PORT (testpmd's default peer). Repeatable.
    #[arg(long = "eth-peer", value_parser = parse_eth_peer)]
    pub eth_peers: Vec<(Option<usize>, Mac)>,
    /// Queue pairs per port (1 to 64); one forwarding thread per queue pair. Rules sending
    /// frames to `queue 0` spread them over all N by RSS (`rss 0,..,N-1`); other rules are
    /// kept as given.
    #[arg(short, long, default_value_t = 1)]
    pub queues: u16,
    /// Cores to pin the forwarding threads to, one per queue pair: thread i on the i-th core
    /// listed (e.g. 0,1). Default: not pinned.
    #[arg(long, value_delimiter = ',', value_parser = parse_core)]
    pub cores: Option<Vec<usize>>,
    /// Send N frames from each port at start (testpmd's `start tx_first`), so that a
    /// looped-back or cabled port forwards without an outside sender: 60-byte UDP/IPv4,
    /// 198.18.0.1 -> 198.18.0.2, destination port 9000, source ports 1024.. (256 flows).
    #[arg(long, default_value_t = 0)]
    pub tx_first: u32,
    /// How the forwarding threads wait for frames, as VPP's rx-mode: poll (busy-poll, a core
    /// each however idle), interrupt (sleep on the queues' notification fds whenever a round
    /// received nothing) or adaptive (poll while frames come, sleep after 512 empty rounds).
    #[arg(long, default_value = "poll", value_parser = crate::rxmode::parse)]
    pub rx_mode: crate::rxmode::RxMode,
    /// Receive queue of -b dv / -b model: cyclic, striding (8 strides per WQE) or striding:N
    /// (N = 8 or 16), as DPDK's mlx5 `mprq_en` devarg.
    #[arg(long, default_value = "cyclic", value_parser = parse_rq)]
    pub rq: rawq::RqType,
    /// Port MTU (68..9198; `PortBuilder::mtu`): frames of up to MTU + 18 bytes arrive as chains
    /// of 4 KiB buffers (AF_XDP multi-buffer needs Linux 6.6) and are forwarded as they are,
    /// instead of every buffer being sized for the interfaces' MTU.
    #[arg(long)]
    pub mtu: Option<u32>,
    /// Receive CQE compression of -b dv / -b model: off, hash (cyclic RQ only) or csum, as DPDK's
    /// mlx5 `rxq_cqe_comp_en` devarg (default: dv compresses where the device can, the model
    /// does not).
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
    /// Flow rules steering the frames to forward (on every port). Repeatable.
    #[arg(long = "rule", required = true)]
    pub rules: Vec<String>,
    /// Run time: 5, 5s, 500ms, 2m, 1h (default: until Ctrl-C or SIGTERM).
    #[arg(short = 't', long, value_parser = rawq_gen::parse_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Ring size (rx and tx descriptors per queue), a power of two from 8 to 32768: a larger
    /// ring rides out longer stalls of the forwarding thread without rx drops.
    #[arg(long, default_value_t = 1024)]
    pub ring: u32,
    /// Burst size (1 to 4096; default 32, or the ring size when --ring is smaller).
    #[arg(long, value_parser = parse_burst)]
    pub burst: Option<usize>,
    /// No live lines.
    #[arg(long)]
    pub quiet: bool,
    /// Seconds between live lines (and --json-lines records): 1, 0.5, 2s, 500ms.
    #[arg(long, default_value = "1", value_parser = parse_period)]
    pub stats_period: Duration,
    /// Print the summary as one JSON object on stdout (per port and direction).
    #[arg(long)]
    pub json: bool,
    /// Print one JSON object per stats period on stdout (per port and direction), and the
    /// summary as the last line.
    #[arg(long)]
    pub json_lines: bool,
    /// Hold each frame this long before sending it on (e.g. 5ms, 250us, 1s): a delay line for
    /// test rigs where netem is missing. Frames wait in a time-ordered queue; the loop never
    /// blocks. Held frames occupy pool buffers, so rate × delay must stay below the pool size
    /// or the receive side runs out of buffers (counted as rx drops).
    #[arg(long, value_parser = parse_delay)]
    pub delay: Option<Duration>,
    /// What a link that goes down does to the run: exit (end it with the cause, non-zero
    /// status) or wait (frames that would go out of that port are dropped and counted as not
    /// sent until the link is back). A device failure or an interface that goes away always
    /// ends the run.
    #[arg(long, value_enum, default_value = "exit")]
    pub on_link_down: crate::linkwatch::OnLinkDown,
}

/// What the checks of [`Args::check`] settle.
#[derive(Debug)]
pub struct Settings {
    /// The burst size.
    pub burst: usize,
    /// The rules, `queue 0` spread over the queues.
    pub rules: Vec<Rule>,
    /// The --eth-peer of each port.
    pub peers: Vec<Mac>,
}

fn config(msg: String) -> rawq::Error {
    rawq::Error::Config(msg)
}

impl Args {
    /// Checks the options against each other, naming the options in every error.
    pub fn check(&self) -> rawq::Result<Settings> {
        if self.devs.len() > 2 {
            return Err(config("give one or two --dev".into()));
        }
        if self.devs.len() == 2 && self.devs[0] == self.devs[1] {
            return Err(config(format!(
                "--dev {} given twice: give one --dev to reflect on a port, or two different \
                 ones to bridge them",
                self.devs[0]
            )));
        }
        if !self.ring.is_power_of_two() || !(8..=32768).contains(&self.ring) {
            return Err(config(format!(
                "--ring {}: must be a power of two from 8 to 32768",
                self.ring
            )));
        }
        let burst = self.burst.unwrap_or(32.min(self.ring as usize));
        if burst > self.ring as usize {
            return Err(config(format!(
                "--burst {burst} is above --ring {}: a burst must fit the ring",
                self.ring
            )));
        }
        if !(1..=64).contains(&self.queues) {
            return Err(config(format!(
                "--queues {}: give 1 to 64 queue pairs per port",
                self.queues
            )));
        }
        if let Some(c) = &self.cores {
            // Every CPU must exist before anything is opened (all the missing ones named).
            rawq_tools::cpus::check("--cores", c).map_err(config)?;
            if c.len() < self.queues as usize {
                return Err(config(format!(
                    "--cores lists {} core(s) for --queues {}: fwd runs one pinned thread per \
                     queue pair, so list one core per queue pair",
                    c.len(),
                    self.queues
                )));
            }
        }
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.queues as usize > online {
            say!(
                "fwd: note: --queues {} runs {} busy-polling threads on {online} online CPU(s): \
                 they take turns, and rates per queue fall accordingly",
                self.queues,
                self.queues
            );
        }
        let mut peers: Vec<Mac> = (0..self.devs.len())
            .map(|i| [0x02, 0, 0, 0, 0, i as u8])
            .collect();
        for &(port, mac) in &self.eth_peers {
            match port {
                None => peers.iter_mut().for_each(|p| *p = mac),
                Some(i) if i < peers.len() => peers[i] = mac,
                Some(i) => {
                    return Err(config(format!(
                        "--eth-peer {i},...: there is no port {i} (ports are numbered 0.. in \
                         --dev order)"
                    )))
                }
            }
        }
        let mut rules = Vec::with_capacity(self.rules.len());
        for r in &self.rules {
            let mut rule: Rule = r.parse()?;
            if self.queues > 1 && rule.action == Action::Queue(0) {
                rule.action = Action::Rss((0..self.queues).collect());
            }
            rule.validate(self.queues).map_err(|e| {
                config(format!(
                    "--rule {r:?} with --queues {}: {e} (rules to queue 0 spread over all \
                     queues by themselves)",
                    self.queues
                ))
            })?;
            rules.push(rule);
        }
        Ok(Settings {
            burst,
            rules,
            peers,
        })
    }
}

/// Why fwd failed: a library error as it is, or one said again in fwd's terms.
#[derive(Debug)]
pub enum Failure {
    /// As the library said it.
    Lib(rawq::Error),
    /// Said in the words of fwd's options.
    Said(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Lib(e) => e.fmt(f),
            Failure::Said(s) => f.write_str(s),
        }
    }
}

impl From<rawq::Error> for Failure {
    fn from(e: rawq::Error) -> Failure {
        Failure::Lib(e)
    }
}

/// An error of the library said in the words of fwd's options (the library names its own
/// configuration fields and types, which a user of fwd never typed).
pub fn in_cli_terms(e: rawq::Error) -> Failure {
    let text = e.to_string();
    let said = text
        .replace("`Backend::Xdp`", "`-b xdp`")
        .replace("rx_ring = ", "--ring ")
        .replace("tx_ring = ", "--ring ")
        .replace("use tx_ring <=", "use --ring <=")
        .replace("queues = ", "--queues ")
        .replace(
            "MempoolConfig::buffers",
            "a smaller --ring or fewer --queues",
        );
    if said == text {
        Failure::Lib(e)
    } else {
        Failure::Said(said)
    }
}

fn parse_core(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .map_err(|_| format!("{s:?}: a core is a CPU number, e.g. --cores 0,1"))
}

fn parse_eth_peer(s: &str) -> Result<(Option<usize>, Mac), String> {
    let (port, mac) = match s.split_once(',') {
        Some((p, m)) => (
            Some(
                p.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("{s:?}: expected PORT,MAC or MAC"))?,
            ),
            m,
        ),
        None => (None, s),
    };
    let mut m = [0u8; 6];
    let mut parts = mac.trim().split(':');
    for b in m.iter_mut() {
        *b = parts
            .next()
            .and_then(|x| u8::from_str_radix(x, 16).ok())
            .ok_or_else(|| format!("{s:?}: a MAC is six hex bytes, e.g. 02:00:00:00:00:01"))?;
    }
    if parts.next().is_some() {
        return Err(format!(
            "{s:?}: a MAC is six hex bytes, e.g. 02:00:00:00:00:01"
        ));
    }
    Ok((port, m))
}

fn parse_period(s: &str) -> Result<Duration, String> {
    match rawq_gen::parse_duration(s) {
        Ok(d) if d >= Duration::from_millis(100) => Ok(d),
        _ => Err(format!(
            "{s:?}: a stats period is at least 100ms, e.g. 1, 0.5, 2s, 500ms"
        )),
    }
}

fn parse_delay(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = [("us", 1e-6), ("ms", 1e-3), ("s", 1.0)]
        .iter()
        .find_map(|&(u, m)| t.strip_suffix(u).map(|v| (v, m)))
        .unwrap_or((t, 1.0));
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * unit <= 3600.0 => {
            Ok(Duration::from_secs_f64(v * unit))
        }
        _ => Err(format!(
            "{s:?}: expected a duration up to an hour, e.g. 5ms, 250us, 1s"
        )),
    }
}

fn parse_burst(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: a burst is 1 to 4096 packets")),
    }
}

fn parse_rq(s: &str) -> Result<rawq::RqType, String> {
    s.parse().map_err(|e: rawq::Error| e.to_string())
}

fn parse_cqe_comp(s: &str) -> Result<rawq::CqeComp, String> {
    s.parse().map_err(|e: rawq::Error| e.to_string())
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
    s.parse().map_err(|e: rawq::Error| e.to_string())
}
