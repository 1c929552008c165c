//! Drives `dpdk-testpmd` (interactive, commands on its stdin) on the emulated NIC through
//! `scripts/testpmd-emu.sh`, reads its port statistics, and the emulated devices' own counters
//! (`RAWQ_EMU_STATS`: `FILE` for mlx5_0, `FILE.mlx5_1` for a pair's second device); sends
//! frames from the kernel with an AF_PACKET socket.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::emu::last_counter;
use crate::support::NetnsPair;

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
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
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
                let _ = child.kill();
                break child.wait().unwrap();
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
