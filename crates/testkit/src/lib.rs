//! Test hosts in throwaway network namespaces.
//!
//! [`NetnsPair::new`] creates two namespaces joined by a veth pair with addresses of our own
//! (10.203.N.1 and 10.203.N.2, only inside those namespaces) and removes them on drop. Traffic in
//! tests goes only between these two hosts.
//!
//! Without root (or without `ip`), `new` returns `None` after printing why, unless
//! `RAWQ_REQUIRE_NETNS=1` is set, in which case it panics: CI must not skip these silently.

#![allow(dead_code)]

pub mod cc;
#[cfg(feature = "mlx5")]
pub mod dpdk;
pub mod emu;
#[cfg(feature = "mlx5")]
pub mod emu_dv;
pub mod procs;
pub mod run;
pub mod tcp_peer;
pub mod xdp;

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs example `bin` with `args`, its output captured, killing it after `secs` (a hang fails the
/// test).
pub fn run_example(bin: &str, args: &[&str], secs: u64) -> Output {
    run::Run::spawn(Command::new(example(bin)).args(args))
        .try_finish(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|out| {
            panic!(
                "{bin} {args:?} still running after {secs} s: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The name libtest gives test `name` declared in the module whose `module_path!()` is
/// `module`: that path without the test crate's own name (`emu::dv` and `inner_x` give
/// `dv::inner_x`; at a test crate's root, `inner_x`). A test that re-runs its own executable
/// with `--exact` passes this, so the filter still names the test after a move.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// The workspace root (where `scripts/`, `README.md` and `target/` are).
pub fn repo_root() -> &'static std::path::Path {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The tools of crates/tools (`pktgen`, `fwd`, `devinfo`), installed as `rawq-NAME`.
const TOOLS: [&str; 3] = ["pktgen", "fwd", "devinfo"];

/// A program a test runs: one of the tools (`pktgen`, `fwd`, `devinfo`: the binaries
/// `rawq-NAME` of crates/tools, which `cargo test` builds before running that crate's tests), or
/// an example of the rawq crate (built before rawq's tests).
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let p = if TOOLS.contains(&name) {
        profile_dir.join(format!("rawq-{name}"))
    } else {
        profile_dir.join("examples").join(name)
    };
    assert!(
        p.exists(),
        "{} not built (cargo test builds the tools and the examples)",
        p.display()
    );
    p
}

/// The RDMA device named by `RAWQ_TEST_DEVICE` and the port from `RAWQ_TEST_PORT` (default 1);
/// `None` after printing "skipped" when none is named.
pub fn test_device() -> Option<(String, u8)> {
    let Some(dev) = std::env::var("RAWQ_TEST_DEVICE")
        .ok()
        .filter(|s| !s.is_empty())
    else {
        eprintln!("skipped: RAWQ_TEST_DEVICE not set");
        return None;
    };
    let port = std::env::var("RAWQ_TEST_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(1);
    Some((dev, port))
}

/// True when `RAWQ_REQUIRE_NETNS=1`.
pub fn netns_required() -> bool {
    std::env::var("RAWQ_REQUIRE_NETNS").is_ok_and(|v| v == "1")
}

/// Skips (prints and returns `None`) or fails, depending on `RAWQ_REQUIRE_NETNS`.
pub fn skip_or_fail<T>(why: &str) -> Option<T> {
    if netns_required() {
        panic!("RAWQ_REQUIRE_NETNS=1 but this test cannot run: {why}");
    }
    eprintln!("skipped: {why}");
    None
}

/// Two namespaces `a` and `b`, joined by `veth_a` (in a) and `veth_b` (in b).
pub struct NetnsPair {
    /// Namespace of host A.
    pub a: String,
    /// Namespace of host B.
    pub b: String,
    /// Interface in A.
    pub veth_a: String,
    /// Interface in B.
    pub veth_b: String,
    /// Address of A (no prefix).
    pub ip_a: String,
    /// Address of B (no prefix).
    pub ip_b: String,
}

fn ip(args: &[&str]) -> Result<Output, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetnsPair {
    /// Creates the pair, or skips (see the module docs). `tag` goes into the names (≤ 6 chars).
    pub fn new(tag: &str) -> Option<NetnsPair> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return skip_or_fail("needs root for network namespaces");
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let id = (pid.wrapping_mul(31).wrapping_add(n)) % 250 + 1;
        let p = NetnsPair {
            a: format!("rawq-{tag}-{pid}-{n}-a"),
            b: format!("rawq-{tag}-{pid}-{n}-b"),
            veth_a: format!("rq{id}a{n}"),
            veth_b: format!("rq{id}b{n}"),
            ip_a: format!("10.203.{id}.1"),
            ip_b: format!("10.203.{id}.2"),
        };
        match p.setup() {
            Ok(()) => Some(p),
            Err(e) => skip_or_fail(&e), // `p` drops here and removes what was made
        }
    }

    fn setup(&self) -> Result<(), String> {
        ip(&["netns", "add", &self.a])?;
        ip(&["netns", "add", &self.b])?;
        ip(&[
            "link",
            "add",
            &self.veth_a,
            "netns",
            &self.a,
            "type",
            "veth",
            "peer",
            "name",
            &self.veth_b,
            "netns",
            &self.b,
        ])?;
        for (ns, dev, addr) in [
            (&self.a, &self.veth_a, &self.ip_a),
            (&self.b, &self.veth_b, &self.ip_b),
        ] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// Moves this pair's B interface into namespace `ns` (e.g. another pair's `b`, so that one
    /// host has two links) and brings it up there. The interface is then destroyed with `ns`.
    pub fn move_b_into(&self, ns: &str) -> Result<(), String> {
        ip(&["-n", &self.b, "link", "set", &self.veth_b, "netns", ns])?;
        ip(&["-n", ns, "link", "set", &self.veth_b, "up"])?;
        Ok(())
    }

    /// Runs `ip -n NS ARGS` (for link changes during a test).
    pub fn ip_in(&self, ns: &str, args: &[&str]) -> Result<(), String> {
        let mut a = vec!["-n", ns];
        a.extend_from_slice(args);
        ip(&a).map(|_| ())
    }

    /// MAC address of an interface in a namespace.
    pub fn mac(&self, ns: &str, dev: &str) -> [u8; 6] {
        let out = ip(&["-n", ns, "-br", "link", "show", dev]).expect("ip link show");
        let text = String::from_utf8_lossy(&out.stdout);
        let field = text.split_whitespace().nth(2).expect("mac field");
        let mut mac = [0u8; 6];
        for (i, b) in field.split(':').enumerate().take(6) {
            mac[i] = u8::from_str_radix(b, 16).expect("hex");
        }
        mac
    }

    /// [`NetnsPair::mac`] as text, `aa:bb:cc:dd:ee:ff` (what `--dst-mac` takes).
    pub fn mac_text(&self, ns: &str, dev: &str) -> String {
        mac_text(self.mac(ns, dev))
    }

    /// Runs a command inside namespace `ns` and returns its output.
    pub fn exec(&self, ns: &str, cmd: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .args(cmd)
            .output()
            .expect("ip netns exec")
    }

    /// Counter `name` of interface `dev` in namespace `ns` (`/sys/class/net/DEV/statistics/
    /// NAME`, read inside `ns`), or None where it cannot be read.
    pub fn if_stat(&self, ns: &str, dev: &str, name: &str) -> Option<u64> {
        let path = format!("/sys/class/net/{dev}/statistics/{name}");
        let out = self.exec(ns, &["cat", &path]);
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }

    /// The frames `dev` in namespace `ns` has received (its `rx_packets`: on a veth with an XDP
    /// program, every frame the hook saw), 0 where it cannot be read.
    pub fn rx_packets(&self, ns: &str, dev: &str) -> u64 {
        self.if_stat(ns, dev, "rx_packets").unwrap_or(0)
    }

    /// Waits until `dev` in `ns` has received at least `n` frames, up to `limit`; whether it
    /// did. A test that stops a receiver once the frames sent have arrived, instead of giving it
    /// a fixed run time that a loaded machine's slowed sender may outlast.
    pub fn wait_rx_packets(&self, ns: &str, dev: &str, n: u64, limit: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + limit;
        loop {
            if self.rx_packets(ns, dev) >= n {
                return true;
            }
            if std::time::Instant::now() >= end {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Runs `f` on a thread that has entered namespace `ns` (sockets it opens live there).
    pub fn run_in<T: Send + 'static>(&self, ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{ns}");
        std::thread::spawn(move || {
            enter_netns(&path);
            f()
        })
        .join()
        .expect("thread in netns panicked")
    }
}

/// Moves the calling thread into the network namespace at `path` (`/var/run/netns/NAME`).
pub fn enter_netns(path: &str) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).expect("open netns");
    // SAFETY: setns on a valid namespace fd affects only the calling thread's network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns({path}): {}", std::io::Error::last_os_error());
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth end inside it, and with it the peer.
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

/// xorshift64*: a deterministic, seedable generator for test inputs (no dependency). Seed with
/// any non-zero value.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)] // an endless generator, not an iterator
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// One of `xs`.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    /// True with probability `pct`%.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Waits for a capture tool started with its stderr piped (tcpdump, tshark) to say it is
/// capturing (`listening on` / `Capturing on`), instead of sleeping and hoping; its stderr is
/// drained by a thread from then on, so the tool never blocks on it. Panics, with what it said,
/// if it ends first.
pub fn wait_capturing(child: &mut std::process::Child) {
    use std::io::BufRead;
    let err = child.stderr.take().expect("the capture's stderr piped");
    let mut lines = std::io::BufReader::new(err);
    let mut said = String::new();
    loop {
        let mut line = String::new();
        match lines.read_line(&mut line) {
            Ok(1..) => {}
            _ => panic!("the capture ended before capturing: {said}"),
        }
        said += &line;
        if line.contains("listening on") || line.contains("Capturing on") {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_text(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}
