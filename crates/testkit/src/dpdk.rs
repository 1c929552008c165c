//! The steps the DPDK tests share (`tests/emu_dpdk*.rs`): `dpdk-testpmd` driven interactively
//! (commands on its stdin) on the emulated NIC through `scripts/testpmd-emu.sh`, its port
//! statistics, the emulated devices' own counters (`RAWQ_EMU_STATS`: `FILE` for mlx5_0,
//! `FILE.mlx5_1` for a pair's second device); frames from the kernel (an AF_PACKET socket); and
//! rawq's pktgen as testpmd's peer on a second process's emulated NIC, across a veth or a cable
//! ([`Wire`]), sending ([`pktgen_sends`]) or receiving ([`PktgenRx`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::emu::last_counter;
use super::NetnsPair;

/// testpmd under the launcher, in a network namespace.
pub struct Pmd {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<String>>,
    stats: PathBuf,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// One port's `show port stats` numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub rx: u64,
    pub missed: u64,
    pub tx: u64,
}

/// Copies what `r` yields into `out` as it comes (the prompt ends in no newline).
fn pump(mut r: impl Read + Send + 'static, out: Arc<Mutex<String>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
}

/// The number after `key` in `text`.
fn number_after(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)? + key.len();
    text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

impl Pmd {
    /// `ip netns exec NS bash scripts/testpmd-emu.sh OPTS -- -i ARGS`, the devices' counters
    /// in `stats`; returns once testpmd shows its prompt.
    pub fn start(ns: &str, opts: &[&str], args: &[&str], stats: &Path) -> Pmd {
        let root = crate::repo_root();
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, "bash"])
            .arg(root.join("scripts/testpmd-emu.sh"))
            .args(opts)
            .args(["--unbuffered", "--", "-i", "--total-num-mbufs=32768"])
            .args(args)
            .current_dir(root)
            .env_remove("LD_PRELOAD")
            .env_remove("RAWQ_EMU_LIB")
            .env_remove("RAWQ_EMU_TX_ERROR")
            .env("RAWQ_EMU_STATS", stats)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("run scripts/testpmd-emu.sh");
        let out = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            pump(child.stdout.take().unwrap(), out.clone()),
            pump(child.stderr.take().unwrap(), out.clone()),
        ];
        let stdin = child.stdin.take();
        let mut p = Pmd {
            child: Some(child),
            stdin,
            out,
            stats: stats.to_owned(),
            readers,
        };
        p.wait_text(0, "testpmd> ", Duration::from_secs(120));
        p
    }

    /// Everything testpmd printed so far.
    pub fn text(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn len(&self) -> usize {
        self.out.lock().unwrap().len()
    }

    /// Waits until the output from byte `from` on contains `pat`; fails the test (with the
    /// output) past `limit` or if testpmd exits first.
    pub fn wait_text(&mut self, from: usize, pat: &str, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            if self.out.lock().unwrap()[from..].contains(pat) {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            if exited || Instant::now() > end {
                // The readers finish once the pipes close; give them the last lines.
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "testpmd: no {pat:?} ({}):\n{}",
                    if exited { "it exited" } else { "timed out" },
                    self.text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends one command line and waits for the next prompt.
    pub fn cmd(&mut self, line: &str) -> String {
        let from = self.len();
        let stdin = self.stdin.as_mut().expect("testpmd's stdin");
        writeln!(stdin, "{line}").expect("write to testpmd");
        stdin.flush().unwrap();
        self.wait_text(from, "testpmd> ", Duration::from_secs(60));
        self.out.lock().unwrap()[from..].to_owned()
    }

    /// `show port stats PORT`.
    pub fn port_stats(&mut self, port: u16) -> PortStats {
        let t = self.cmd(&format!("show port stats {port}"));
        let at = t
            .find(&format!("NIC statistics for port {port}"))
            .unwrap_or_else(|| panic!("no statistics for port {port}:\n{t}"));
        let t = &t[at..];
        let get = |k: &str| number_after(t, k).unwrap_or_else(|| panic!("no {k} in:\n{t}"));
        PortStats {
            rx: get("RX-packets:"),
            missed: get("RX-missed:"),
            tx: get("TX-packets:"),
        }
    }

    /// `stop`, and the receive count of each of `port`'s first `queues` queues from the
    /// per-stream statistics testpmd prints then ("Forward Stats for RX Port= P/Queue= Q").
    pub fn stop_rx_per_queue(&mut self, port: u16, queues: u16) -> Vec<u64> {
        let t = self.cmd("stop");
        (0..queues)
            .map(|q| {
                let head = format!("RX Port={port:2}/Queue={q:2}");
                let at = t
                    .find(&head)
                    .unwrap_or_else(|| panic!("no {head:?} in:\n{t}"));
                number_after(&t[at..], "RX-packets:")
                    .unwrap_or_else(|| panic!("no RX-packets after {head:?} in:\n{t}"))
            })
            .collect()
    }

    /// The stats file of device `dev` (0: mlx5_0, 1: mlx5_1).
    pub fn stats_file(&self, dev: u32) -> PathBuf {
        match dev {
            0 => self.stats.clone(),
            n => PathBuf::from(format!("{}.mlx5_{n}", self.stats.display())),
        }
    }

    /// A counter of the device model of device `dev` (its latest report).
    pub fn model(&self, dev: u32, field: &str) -> u64 {
        last_counter(&self.stats_file(dev), field)
            .unwrap_or_else(|| panic!("no {field} in {}", self.stats_file(dev).display()))
    }

    /// Whether testpmd's port 0 counts `s` as the model counts mlx5_0: every frame received
    /// is one the model delivered, every frame missed one it dropped for want of a buffer.
    pub fn rx_as_the_model_counts(&self, s: &PortStats) -> bool {
        s.rx == self.model(0, "rx_frames") && s.missed == self.model(0, "rx_no_buffer")
    }

    /// Polls `show port stats PORT` until `done` holds for it (or fails past `limit`).
    pub fn stats_until(
        &mut self,
        port: u16,
        limit: Duration,
        mut done: impl FnMut(&PortStats, &Pmd) -> bool,
    ) -> PortStats {
        let end = Instant::now() + limit;
        loop {
            let s = self.port_stats(port);
            if done(&s, self) {
                return s;
            }
            assert!(
                Instant::now() < end,
                "port {port} never got there: last {s:?}\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `quit`, then waits for the launcher to exit (the devices' counters are written when
    /// testpmd closes them); returns the whole output. Fails if it does not exit cleanly.
    pub fn quit(mut self) -> String {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "quit");
        }
        let mut child = self.child.take().unwrap();
        let end = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > end {
                let report = super::procs::hang_report(&[child.id()]);
                let _ = child.kill();
                let st = child.wait().unwrap();
                panic!("testpmd still running 60 s after quit: killed ({st}); what it was doing:\n{report}\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let text = self.text();
        assert!(status.success(), "testpmd exited with {status}:\n{text}");
        assert!(text.contains("Bye..."), "testpmd did not finish:\n{text}");
        text
    }
}

impl Drop for Pmd {
    fn drop(&mut self) {
        // A failed test: one SIGTERM to the launcher (it stops testpmd and cleans up).
        if let Some(mut c) = self.child.take() {
            drop(self.stdin.take());
            // SAFETY: kill(2) of our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end && c.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends `frames` (each whole, from the destination MAC) out of interface `ifname` of the
/// calling thread's namespace with an AF_PACKET socket, each as the kernel transmits it, at
/// most 32 a millisecond (a rate a busy-polling receiver keeps up with; what it misses is
/// counted, not lost); returns how many the kernel took.
pub fn kernel_send(ifname: &str, frames: &[Vec<u8>]) -> usize {
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: plain libc calls with valid arguments; the fd is closed below.
    unsafe {
        let idx = libc::if_nametoindex(name.as_ptr());
        assert!(idx != 0, "no interface {ifname}");
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = idx as i32;
        sll.sll_halen = 6;
        let mut sent = 0;
        for (i, f) in frames.iter().enumerate() {
            if i % 32 == 31 {
                std::thread::sleep(Duration::from_millis(1));
            }
            loop {
                let n = libc::sendto(
                    fd,
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    (&sll as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                );
                if n == f.len() as isize {
                    sent += 1;
                    break;
                }
                // The device queue is full (ENOBUFS): let it drain.
                let e = std::io::Error::last_os_error();
                assert_eq!(
                    e.raw_os_error(),
                    Some(libc::ENOBUFS),
                    "sendto on {ifname}: {e}"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        libc::close(fd);
        sent
    }
}

/// An IPv4/UDP frame of `len` bytes (no FCS) to `dst` from `src`, UDP source port `sport`
/// (so that RSS spreads a run of them), valid IPv4 checksum, UDP checksum 0.
pub fn udp_frame(dst: [u8; 6], src: [u8; 6], sport: u16, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(60)];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (f.len() - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
    let mut sum = 0u32;
    for w in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let udp_len = ip_len - 20;
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    f
}

/// Two namespaces (testpmd runs in `a`), without IPv6, so that no kernel chatter (router
/// solicitations, MLD) rides the emulated wire and every frame counted is the test's.
pub fn netns(tag: &str) -> Option<NetnsPair> {
    let ok = std::process::Command::new("sh")
        .args(["-c", "command -v dpdk-testpmd"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "dpdk-testpmd is missing: install Debian's dpdk-dev and librte-net-mlx5-23 (scripts/setup.sh)"
    );
    let ns = NetnsPair::new(tag)?;
    for n in [&ns.a, &ns.b] {
        let o = ns.exec(
            n,
            &[
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        );
        assert!(o.status.success(), "sysctl in {n}: {o:?}");
    }
    Some(ns)
}

/// TAP names for a test (short enough for IFNAMSIZ).
pub fn taps(tag: &str) -> (String, String) {
    let id = std::process::id() % 10_000;
    (format!("{tag}{id}a"), format!("{tag}{id}b"))
}

/// Waits, after `stop`, until the model has done every WQE testpmd posted on `port`
/// (device `port`) and testpmd reads the model's no-buffer drops as RX-missed; returns the
/// port's final numbers.
pub fn settled(p: &mut Pmd, port: u16) -> PortStats {
    p.stats_until(port, Duration::from_secs(30), |s, p| {
        s.tx == p.model(port.into(), "tx_frames")
            && s.missed == p.model(port.into(), "rx_no_buffer")
    })
}

/// A device counter's last report in `stats` (fails the test when there is none).
pub fn last(stats: &Path, field: &str) -> u64 {
    last_counter(stats, field).unwrap_or_else(|| panic!("no {field} in {}", stats.display()))
}

/// The number after `"key":` in pktgen's JSON summary.
pub fn json_u64(text: &str, key: &str) -> u64 {
    let pat = format!("\"{key}\":");
    let at = text
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in pktgen's JSON:\n{text}"))
        + pat.len();
    text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("{key} is not a number in:\n{text}"))
}

/// The wire of a second process's emulated NIC, testpmd's peer: a veth end in a namespace
/// (`scripts/emu.sh --wire`; testpmd's NIC on the other end), or one end of a cable between the
/// two processes' NICs (`--cable`).
pub enum Wire<'a> {
    Veth { ns: &'a str, veth: &'a str },
    Cable { ns: &'a str, cable: &'a Path },
}

impl Wire<'_> {
    /// `ip netns exec NS timeout 120 bash scripts/emu.sh --wire IF|--cable PATH OPTS -- CMD`,
    /// the device's counters in `stats` (`timeout` bounds a test that fails half-way).
    pub fn emu_sh(&self, opts: &[&str], cmd: &[&str], stats: &Path) -> Command {
        match *self {
            Wire::Veth { ns, veth } => {
                super::emu::emu_sh(Some((ns, veth)), Some(120), opts, cmd, stats)
            }
            Wire::Cable { ns, cable } => {
                let root = crate::repo_root();
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "timeout", "120", "bash"])
                    .arg(root.join("scripts/emu.sh"))
                    .arg("--cable")
                    .arg(cable)
                    .args(opts)
                    .arg("--")
                    .args(cmd)
                    .current_dir(root)
                    .env_remove("LD_PRELOAD")
                    .env_remove("RAWQ_EMU_LIB")
                    .env_remove("RAWQ_EMU_TX_ERROR")
                    .env("RAWQ_EMU_STATS", stats);
                c
            }
        }
    }
}

/// rawq -> DPDK: `pktgen -b BACKEND` on `wire` (netdev `tap`) sends `n` 60-byte frames at
/// 20000/s to testpmd's port (02:fc:00:00:00:01), `--json` with `json`; its output, once it
/// ended (the test fails if it did not succeed). Its device's counters go to `stats`.
pub fn pktgen_sends(
    wire: &Wire,
    tap: &str,
    backend: &str,
    n: u64,
    json: bool,
    stats: &Path,
) -> String {
    let pktgen = super::example("pktgen");
    let n = n.to_string();
    let mut cmd = vec![
        pktgen.to_str().unwrap(),
        "-b",
        backend,
        "-d",
        "mlx5_0",
        "-n",
        &n,
        "-r",
        "20000",
        "-s",
        "60",
        "--dst-mac",
        "02:fc:00:00:00:01",
    ];
    if json {
        cmd.push("--json");
    }
    let out = wire
        .emu_sh(&["--netdev", tap], &cmd, stats)
        .output()
        .expect("run pktgen");
    let t = super::emu::text(&out);
    assert!(out.status.success(), "{backend}: pktgen:\n{t}");
    t
}

/// DPDK -> rawq: `pktgen -b BACKEND --rx` on a wire, counting what arrives for UDP port 9
/// (testpmd's txonly frames) in queue 0, until [`PktgenRx::stop_when`] ends it. Dropped while it
/// runs (a failed test), it is stopped.
pub struct PktgenRx {
    child: Option<Child>,
    /// pktgen's own process (under `ip netns exec`, `timeout` and the launcher).
    pid: u32,
    backend: String,
    out: PathBuf,
    err: PathBuf,
    /// Its device's counters.
    pub stats: PathBuf,
}

/// What [`PktgenRx::stop_when`] found: pktgen's JSON summary and its device's last counters.
pub struct Received {
    pub json: String,
    /// Frames the device delivered into pktgen's receive queue.
    pub delivered: u64,
    /// Frames it had no receive buffer for.
    pub no_buffer: u64,
}

impl PktgenRx {
    /// Starts pktgen on `wire` (netdev `tap`), its files in `dir` named after `tag`; returns
    /// once it has opened its port.
    pub fn start(wire: &Wire, tap: &str, backend: &str, dir: &Path, tag: &str) -> PktgenRx {
        let pktgen = super::example("pktgen");
        let stats = dir.join(format!("stats-pktgen-rx{tag}"));
        let out = dir.join(format!("pktgen-rx{tag}.out"));
        let err = dir.join(format!("pktgen-rx{tag}.err"));
        // -t: a bound only; the test stops it with SIGTERM once its device is done.
        let cmd = [
            pktgen.to_str().unwrap(),
            "-b",
            backend,
            "-d",
            "mlx5_0",
            "--rx",
            "--rule",
            "udp dst-port 9 -> queue 0",
            "--ring",
            "4096",
            "-t",
            "100",
            "--quiet",
            "--json",
        ];
        let mut child = wire
            .emu_sh(&["--netdev", tap], &cmd, &stats)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("start pktgen --rx");
        let ready = format!("pktgen: {backend} on");
        let end = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&err).is_ok_and(|t| t.contains(&ready)) {
            if Instant::now() > end || child.try_wait().ok().flatten().is_some() {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{backend}: pktgen --rx did not open its port:\n{}",
                    std::fs::read_to_string(&err).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let pid = super::procs::descendant(child.id(), "rawq-pktgen")
            .unwrap_or_else(|| panic!("{backend}: no pktgen process under {}", child.id()));
        PktgenRx {
            child: Some(child),
            pid,
            backend: backend.to_owned(),
            out,
            err,
            stats,
        }
    }

    /// Delivered, no-buffer and to-the-kernel frames of pktgen's device (its latest report,
    /// rewritten twice a second).
    fn device(&self) -> (u64, u64, u64) {
        let c = |k| last_counter(&self.stats, k).unwrap_or(0);
        (c("rx_frames"), c("rx_no_buffer"), c("rx_to_kernel"))
    }

    /// Waits until pktgen's device has delivered, dropped for want of a buffer, or passed to the
    /// kernel `want` frames (everything the sender put on the wire), then sends pktgen SIGTERM:
    /// it counts what its queue still holds and prints its summary. Fails the test, with what
    /// was seen, when the device has not seen them all past `limit`, or when pktgen does not end
    /// cleanly.
    pub fn stop_when(mut self, want: u64, limit: Duration) -> Received {
        let end = Instant::now() + limit;
        let mut seen = self.device();
        while seen.0 + seen.1 + seen.2 < want && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            seen = self.device();
        }
        let done = seen.0 + seen.1 + seen.2 >= want;
        self.signal();
        let mut child = self.child.take().unwrap();
        // 60 s: once (the final CI of the tenth landing, beside two busy loops and a campaign)
        // pktgen had printed its summary and its launcher had not ended 30 s later; what the
        // processes were waiting in is kept for the message.
        let end = Instant::now() + Duration::from_secs(60);
        let mut stuck = String::new();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > end {
                stuck = super::procs::hang_report(&[child.id()]);
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let backend = &self.backend;
        let json = std::fs::read_to_string(&self.out).unwrap_or_default();
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        assert!(
            done,
            "{backend}: pktgen's device saw {seen:?} (delivered, no buffer, to the kernel) of \
             the {want} frames sent in {limit:?}:\n{json}\n{err}"
        );
        assert!(
            status.is_some_and(|s| s.success()),
            "{backend}: pktgen --rx: {status:?}\n{json}\n{err}\nwhat it was doing 60 s after \
             SIGTERM (every process and thread below the launcher):\n{stuck}"
        );
        Received {
            json,
            delivered: last(&self.stats, "rx_frames"),
            no_buffer: last(&self.stats, "rx_no_buffer"),
        }
    }

    /// SIGTERM to pktgen itself (not to `timeout` or the launcher, which would pass on a
    /// second one: pktgen ends at once on a second signal).
    fn signal(&self) {
        // SAFETY: kill(2) on pktgen's pid, found under our own child, which has not been reaped
        // (pktgen's parent, the launcher, waits for it).
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
    }
}

impl Drop for PktgenRx {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            self.signal();
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end && c.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `/sys/class/net/IF/statistics/NAME` of an interface in namespace `ns`.
pub fn if_stat(ns: &NetnsPair, in_ns: &str, ifname: &str, name: &str) -> u64 {
    ns.if_stat(in_ns, ifname, name).unwrap_or_else(|| {
        panic!("/sys/class/net/{ifname}/statistics/{name} in {in_ns}: unreadable")
    })
}
