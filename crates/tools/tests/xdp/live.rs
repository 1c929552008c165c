//! The live-frames send engine on a veth pair between two throwaway namespaces, judged by the
//! kernel (a UDP socket, which takes only frames with valid IP and UDP checksums), tshark, and
//! the veth's own refusal when its peer cannot receive.

use rawq_testkit as support;

use std::collections::BTreeMap;
use std::net::{IpAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rawq::xdp::live::{LiveConfig, LiveEngine, LiveReport};
use rawq::Error;
use rawq_gen::live_config;
use rawq_gen::{FlowVary, FrameSpec, SizeSpec, SEQ_MAGIC};
use support::{enter_netns, NetnsPair};

fn spec(p: &NetnsPair, src: IpAddr, dst: IpAddr, flows: u32, vary: FlowVary) -> FrameSpec {
    FrameSpec {
        dst_mac: p.mac(&p.b, &p.veth_b),
        src_mac: p.mac(&p.a, &p.veth_a),
        src_ip: src,
        dst_ip: dst,
        src_port: 40000,
        dst_port: 9000,
        flows,
        vary,
        sizes: SizeSpec::Fixed(if src.is_ipv4() { 100 } else { 120 }),
        stamp: true,
    }
}

/// Runs the engine from a thread inside namespace a.
fn send(p: &NetnsPair, cfg: LiveConfig) -> rawq::Result<LiveReport> {
    p.run_in(&p.a, move || LiveEngine::new(cfg)?.run())
}

fn ethtool(p: &NetnsPair, ns: &str, args: &[&str]) {
    let out = p.exec(ns, &[&["ethtool"], args].concat());
    assert!(
        out.status.success(),
        "ethtool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A received datagram: its source port and its sequence stamp, read by hand from the layout
/// of crates/gen/src/template/stamp.rs (magic 4, stream 2, flow index 2, flows - 1 2, 48-bit
/// seq 6, all big-endian).
#[derive(Clone, Copy, Debug)]
struct Dgram {
    port: u16,
    stream: u16,
    flow: u16,
    flows: u32,
    seq: u64,
}

/// The receiver's handle: set `done` once sending is over; the datagrams come on `rx`.
struct Receiver {
    done: Arc<AtomicBool>,
    rx: mpsc::Receiver<Vec<Dgram>>,
}

impl Receiver {
    /// Everything received, once 1 s has passed without a datagram after sending ended.
    fn finish(self) -> Vec<Dgram> {
        self.done.store(true, Ordering::Relaxed);
        self.rx
            .recv_timeout(Duration::from_secs(60))
            .expect("receiver")
    }
}

/// A UDP socket on port 9000 in namespace b, read on its own thread until sending is over and
/// 1 s passes without a datagram (60 s at most); gives the source port and stamp of every
/// datagram.
fn udp_receiver(p: &NetnsPair, bind: IpAddr) -> Receiver {
    let (tx, rx) = mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    let over = done.clone();
    let (ready_tx, ready_rx) = mpsc::channel();
    let path = format!("/var/run/netns/{}", p.b);
    std::thread::spawn(move || {
        enter_netns(&path);
        let s = UdpSocket::bind((bind, 9000)).expect("bind");
        let size: libc::c_int = 64 << 20;
        // SAFETY: setsockopt with a valid int option value and its size.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &size as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            let (n, from) = match s.recv_from(&mut buf) {
                Ok(r) => r,
                Err(_) if !over.load(Ordering::Relaxed) => continue,
                Err(_) => break,
            };
            let d = &buf[..n];
            assert!(n >= 16, "short datagram");
            assert_eq!(u32::from_be_bytes(d[0..4].try_into().unwrap()), SEQ_MAGIC);
            let mut seq = [0u8; 8];
            seq[2..].copy_from_slice(&d[10..16]);
            got.push(Dgram {
                port: from.port(),
                stream: u16::from_be_bytes([d[4], d[5]]),
                flow: u16::from_be_bytes([d[6], d[7]]),
                flows: u16::from_be_bytes([d[8], d[9]]) as u32 + 1,
                seq: u64::from_be_bytes(seq),
            });
        }
        let _ = tx.send(got);
    });
    ready_rx.recv().expect("receiver ready");
    Receiver { done, rx }
}

/// Per stream, the sequence numbers must be exactly 0..n: nothing lost, nothing twice; every
/// stamp carries the flow count and the flow index `seq % flows` (what the receive side's
/// per-flow tracking counts on).
fn assert_streams_complete(got: &[Dgram], flows: u32) {
    let mut streams: BTreeMap<u16, Vec<u64>> = BTreeMap::new();
    for g in got {
        assert_eq!(g.flows, flows, "{g:?}");
        assert_eq!(g.flow as u64, g.seq % flows as u64, "{g:?}");
        streams.entry(g.stream).or_default().push(g.seq);
    }
    for (stream, mut seqs) in streams {
        seqs.sort_unstable();
        let want: Vec<u64> = (0..seqs.len() as u64).collect();
        assert!(seqs == want, "stream {stream}: not 0..{}", seqs.len());
    }
}

/// With GRO on the peer, exactly --count frames arrive at a kernel UDP socket (which drops any
/// frame with a bad IPv4 or UDP checksum), over exactly the requested flows, each stream's
/// sequence numbers complete.
#[test]
fn exact_count_reaches_a_kernel_udp_socket_over_the_flows() {
    let Some(p) = NetnsPair::new("live") else {
        return;
    };
    ethtool(&p, &p.b, &["-K", &p.veth_b, "gro", "on"]);
    let ip_b: IpAddr = p.ip_b.parse().unwrap();
    let rx = udp_receiver(&p, ip_b);
    let mut cfg = live_config(
        &p.veth_a,
        &spec(&p, p.ip_a.parse().unwrap(), ip_b, 5, FlowVary::SrcPort),
    )
    .unwrap();
    let n = 5000;
    cfg.count = n;
    // Paced so that the receiving socket keeps up: 200 frames per call.
    cfg.pps = Some(20_000.0);
    let rep = send(&p, cfg).expect("live send");
    assert_eq!(rep.sent, n, "{rep:?}");
    assert_eq!(rep.redirected, n, "{rep:?}");
    let got = rx.finish();
    assert_eq!(got.len() as u64, n, "datagrams received");
    // Each stream (sending CPU) goes round the flows: frame `seq` is flow `seq % 5`.
    let mut ports: BTreeMap<u16, u64> = BTreeMap::new();
    for g in &got {
        assert_eq!(g.port as u64, 40000 + g.seq % 5, "{g:?}");
        *ports.entry(g.port).or_default() += 1;
    }
    assert_eq!(ports.len(), 5, "{ports:?}");
    assert!(ports.values().all(|&c| c.abs_diff(n / 5) <= 1), "{ports:?}");
    assert_streams_complete(&got, 5);
}

/// IPv6 with several threads: the count is split over them and still exact.
#[test]
fn ipv6_count_is_exact_over_two_threads() {
    let Some(p) = NetnsPair::new("live6") else {
        return;
    };
    let (a6, b6): (IpAddr, IpAddr) = (
        "fd00:203::1".parse().unwrap(),
        "fd00:203::2".parse().unwrap(),
    );
    for (ns, dev, addr) in [
        (&p.a, &p.veth_a, "fd00:203::1/64"),
        (&p.b, &p.veth_b, "fd00:203::2/64"),
    ] {
        let out = p.exec(ns, &["ip", "addr", "add", addr, "dev", dev, "nodad"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ethtool(&p, &p.b, &["-K", &p.veth_b, "gro", "on"]);
    let rx = udp_receiver(&p, b6);
    let mut cfg = live_config(&p.veth_a, &spec(&p, a6, b6, 3, FlowVary::SrcPort)).unwrap();
    let n = 3001;
    cfg.count = n;
    cfg.cores = vec![0, 1];
    // One batch (64) per call and thread: both threads' calls together fit the peer's ring.
    cfg.pps = Some(2_000.0);
    let rep = send(&p, cfg).expect("live send");
    assert_eq!(rep.redirected, n, "{rep:?}");
    let got = rx.finish();
    // What the engine counts as sent is what arrived, whatever the peer's ring refused.
    assert_eq!(got.len() as u64, rep.sent, "datagrams received; {rep:?}");
    assert_eq!(rep.sent, n, "{rep:?}");
    assert_streams_complete(&got, 3);
}

/// The source address varies (IPv4 header checksum rewritten per frame): tshark, capturing on
/// the peer, finds every IPv4 and UDP checksum good and the 4 source addresses equally used.
#[test]
fn tshark_finds_good_checksums_when_the_source_address_varies() {
    let Some(p) = NetnsPair::new("livts") else {
        return;
    };
    // An XDP program on the peer (rawq's own receiver, passing everything else to the stack)
    // would do too; GRO is simpler here.
    ethtool(&p, &p.b, &["-K", &p.veth_b, "gro", "on"]);
    let dir = std::env::temp_dir().join(format!("rawq-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("cap.pcap");
    let n = 400;
    let mut dump = Command::new("ip")
        .args([
            "netns", "exec", &p.b, "tcpdump", "-U", "-n", "-i", &p.veth_b,
        ])
        .args(["-c", &n.to_string(), "-w", cap.to_str().unwrap()])
        .args(["udp", "and", "dst", "port", "9000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    support::wait_capturing(&mut dump);
    let mut cfg = live_config(
        &p.veth_a,
        &spec(
            &p,
            p.ip_a.parse().unwrap(),
            p.ip_b.parse().unwrap(),
            4,
            FlowVary::SrcIp,
        ),
    )
    .unwrap();
    cfg.count = n;
    cfg.pps = Some(10_000.0);
    let rep = send(&p, cfg).expect("live send");
    assert_eq!(rep.sent, n);
    let t = Instant::now();
    while dump.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = dump.kill();
            panic!("tcpdump did not see {n} frames");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new("tshark")
        .args(["-n", "-r", cap.to_str().unwrap()])
        .args([
            "-o",
            "udp.check_checksum:TRUE",
            "-o",
            "ip.check_checksum:TRUE",
        ])
        .args(["-T", "fields", "-E", "separator=,"])
        .args([
            "-e",
            "ip.src",
            "-e",
            "ip.checksum.status",
            "-e",
            "udp.checksum.status",
        ])
        .args(["-e", "frame.len", "-e", "_ws.malformed"])
        .output()
        .expect("tshark");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut srcs: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f[1], "1", "IPv4 checksum not good: {line}");
        assert_eq!(f[2], "1", "UDP checksum not good: {line}");
        assert_eq!(f[3], "100", "frame length: {line}");
        assert!(f.get(4).is_none_or(|m| m.is_empty()), "malformed: {line}");
        *srcs.entry(f[0].to_string()).or_default() += 1;
    }
    assert_eq!(srcs.values().sum::<u64>(), n, "{text}");
    // The 4 addresses from the source's on, stepping over the destination's: nothing is sent
    // from the address it is sent to.
    let base: std::net::Ipv4Addr = p.ip_a.parse().unwrap();
    let dst: std::net::Ipv4Addr = p.ip_b.parse().unwrap();
    let want: BTreeMap<String, u64> = (u32::from(base)..)
        .filter(|&a| a != u32::from(dst))
        .take(4)
        .map(|a| (std::net::Ipv4Addr::from(a).to_string(), n / 4))
        .collect();
    assert_eq!(srcs, want);
}

/// A veth whose peer has neither an XDP program nor GRO drops every redirected frame: the
/// engine says so, with the fix, instead of counting frames that never left.
#[test]
fn veth_peer_without_xdp_or_gro_is_refused_with_the_fix() {
    let Some(p) = NetnsPair::new("livng") else {
        return;
    };
    ethtool(&p, &p.b, &["-K", &p.veth_b, "gro", "off"]);
    let mut cfg = live_config(
        &p.veth_a,
        &spec(
            &p,
            p.ip_a.parse().unwrap(),
            p.ip_b.parse().unwrap(),
            1,
            FlowVary::SrcPort,
        ),
    )
    .unwrap();
    cfg.count = 1000;
    match send(&p, cfg) {
        Err(e @ Error::Unsupported(_)) => {
            let text = e.to_string();
            assert!(
                text.contains("gro on") && text.contains("XDP program"),
                "{text}"
            );
        }
        other => panic!("expected the veth peer error, got {other:?}"),
    }
}

/// A duration stops unlimited sending promptly even with 2^20 runs per call; frames the veth
/// could not take (its peer's full ring) are not counted as sent.
#[test]
fn duration_stops_an_unlimited_run() {
    let Some(p) = NetnsPair::new("livdu") else {
        return;
    };
    ethtool(&p, &p.b, &["-K", &p.veth_b, "gro", "on"]);
    let mut cfg = live_config(
        &p.veth_a,
        &spec(
            &p,
            p.ip_a.parse().unwrap(),
            p.ip_b.parse().unwrap(),
            1,
            FlowVary::SrcPort,
        ),
    )
    .unwrap();
    cfg.duration = Some(Duration::from_millis(300));
    let t = Instant::now();
    let rep = send(&p, cfg).expect("live send");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert!(rep.redirected > 0 && rep.sent <= rep.redirected, "{rep:?}");
}

/// Bad configurations are refused before anything is sent.
#[test]
fn bad_configurations_are_refused() {
    let Some(p) = NetnsPair::new("livbc") else {
        return;
    };
    let s = spec(
        &p,
        p.ip_a.parse().unwrap(),
        p.ip_b.parse().unwrap(),
        1,
        FlowVary::SrcPort,
    );
    let mut cfg = live_config(&p.veth_a, &s.clone()).unwrap();
    cfg.batch = 300;
    let e = p.run_in(&p.a, move || LiveEngine::new(cfg).unwrap_err());
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("256"),
        "{e}"
    );
    let cfg = live_config("rawq-nope0", &s).unwrap();
    let e = p.run_in(&p.a, move || LiveEngine::new(cfg).unwrap_err());
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `pktgen -b xdp --engine live` end to end: its JSON reports exactly --count packets, and the
/// peer's kernel UDP socket receives exactly that many, over the 4 flows.
#[test]
fn pktgen_engine_live_sends_the_count() {
    let Some(p) = NetnsPair::new("livpg") else {
        return;
    };
    ethtool(&p, &p.b, &["-K", &p.veth_b, "gro", "on"]);
    let rx = udp_receiver(&p, p.ip_b.parse().unwrap());
    let pktgen = support::example("pktgen");
    let dst_mac = mac_str(p.mac(&p.b, &p.veth_b));
    let out = p.exec(
        &p.a,
        &[
            pktgen.to_str().unwrap(),
            "-b",
            "xdp",
            "--engine",
            "live",
            "-d",
            &p.veth_a,
            "--dst-mac",
            &dst_mac,
            "--src-ip",
            &p.ip_a,
            "--dst-ip",
            &p.ip_b,
            "--src-port",
            "40000",
            "-f",
            "4",
            "--seq",
            "-s",
            "80",
            "-n",
            "3000",
            "-r",
            "20kpps",
            "--cores",
            "0",
            "--json",
            "--quiet",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pktgen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON summary");
    assert_eq!(j["packets"], 3000, "{j}");
    assert_eq!(j["mode"], "live", "{j}");
    let got = rx.finish();
    assert_eq!(got.len(), 3000);
    let ports: std::collections::BTreeSet<u16> = got.iter().map(|g| g.port).collect();
    assert_eq!(ports, (40000..40004).collect());
    assert!(got.iter().all(|g| g.port - 40000 == g.flow), "{got:?}");
    assert_streams_complete(&got, 4);
}

/// Without privileges the engine's error names every capability it needs.
#[test]
fn unprivileged_run_names_the_capabilities() {
    let Some(p) = NetnsPair::new("livpm") else {
        return;
    };
    let pktgen = support::example("pktgen");
    let out = p.exec(
        &p.a,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            pktgen.to_str().unwrap(),
            "-b",
            "xdp",
            "--engine",
            "live",
            "-d",
            &p.veth_a,
            "-n",
            "10",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for cap in ["CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON", "root"] {
        assert!(err.contains(cap), "{cap} not named: {err}");
    }
}

/// Sets counter 0 of a per-CPU array map to `v` on CPU 0 (0 on the others), with
/// `BPF_MAP_UPDATE_ELEM` (rawq's counters have no setter: the engine never writes them).
fn set_counter0(map_fd: i32, v: u64) {
    #[repr(C)]
    struct Attr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let cpus = rawq::xdp::bpf::sys::possible_cpus().unwrap();
    let mut vals = vec![0u64; cpus];
    vals[0] = v;
    let key = 0u32;
    let attr = Attr {
        map_fd: map_fd as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: vals.as_ptr() as u64,
        flags: 0, // BPF_ANY
    };
    // SAFETY: BPF_MAP_UPDATE_ELEM (2) reads the attribute, the 4-byte key and one 8-byte value
    // per possible CPU, all alive for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            2,
            &attr as *const Attr,
            std::mem::size_of::<Attr>() as u32,
        )
    };
    assert_eq!(
        r,
        0,
        "BPF_MAP_UPDATE_ELEM: {}",
        std::io::Error::last_os_error()
    );
}

/// The program itself, run by the kernel (plain test runs, nothing sent) for every kind of frame
/// it can vary: each output frame equals the one rawq's Stamper writes for the same flow, stream
/// and sequence number (two independent ways to compute the fields and checksums), and the
/// per-CPU counter counts each run.
#[test]
fn kernel_runs_of_the_program_match_the_stamper() {
    use rawq::xdp::bpf::sys::{action, PerCpuCounters, Program};
    use rawq::xdp::live::program::live_program;
    use rawq_gen::live_plan;
    use rawq_gen::Stamper;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        support::skip_or_fail::<()>("needs root for BPF");
        return;
    }
    // On one CPU: the frame number is that CPU's counter, the stream its number.
    rawq_gen::pin_to_core(0).unwrap();
    let v4: (IpAddr, IpAddr) = ("10.1.2.3".parse().unwrap(), "10.1.255.250".parse().unwrap());
    let v6: (IpAddr, IpAddr) = ("fd00::fff0".parse().unwrap(), "fd00::2".parse().unwrap());
    for (src, dst) in [v4, v6] {
        for vary in [FlowVary::SrcPort, FlowVary::SrcIp] {
            for stamp in [false, true] {
                for flows in [1u32, 7, 16, 300] {
                    let spec = FrameSpec {
                        dst_mac: [2, 0, 0, 0, 0, 2],
                        src_mac: [2, 0, 0, 0, 0, 1],
                        src_ip: src,
                        dst_ip: dst,
                        src_port: 65500,
                        dst_port: 9000,
                        flows,
                        vary,
                        sizes: SizeSpec::Fixed(if src.is_ipv4() { 91 } else { 111 }),
                        stamp,
                    };
                    let what = format!("{src} {vary:?} stamp {stamp} flows {flows}");
                    let (frame, plan) = live_plan(&spec).unwrap();
                    let counters = PerCpuCounters::create(1, "rawq_test_cnt").unwrap();
                    let insns = live_program(&plan, counters.as_raw_fd(), 1).unwrap();
                    let prog = Program::load(&insns, "rawq_live_test")
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let st = Stamper::new(spec.clone()).unwrap();
                    for i in 0..(flows as u64 + 2) {
                        let (ret, out) = prog.test_run_frame(&frame).unwrap();
                        assert_eq!(ret, action::REDIRECT, "{what}");
                        assert_eq!(counters.per_cpu(0).unwrap()[0], i + 1, "{what}");
                        let mut want = vec![0u8; frame.len()];
                        let flow = (i % flows as u64) as u32;
                        if stamp {
                            st.write(&mut want, frame.len(), flow, 0, i);
                        } else {
                            st.write(&mut want, frame.len(), flow, 0, 0);
                        }
                        assert_eq!(out, want, "{what}: run {i}");
                    }
                    assert_eq!(counters.sum(0).unwrap(), flows as u64 + 2, "{what}");
                    // Across 2^48: the stamp's sequence number is the counter's low 48 bits
                    // (the Stamper masks it the same way), the flow index stays `counter %
                    // flows` and the flow count is intact.
                    let start = (1u64 << 48) - 2;
                    set_counter0(counters.as_raw_fd(), start);
                    for c in start..start + 4 {
                        let (ret, out) = prog.test_run_frame(&frame).unwrap();
                        assert_eq!(ret, action::REDIRECT, "{what}");
                        let mut want = vec![0u8; frame.len()];
                        let flow = (c % flows as u64) as u32;
                        st.write(&mut want, frame.len(), flow, 0, if stamp { c } else { 0 });
                        assert_eq!(out, want, "{what}: counter {c:#x}");
                        let got = Stamper::read_stamp_full(&out);
                        if stamp {
                            let got = got.unwrap_or_else(|| panic!("{what}: no stamp"));
                            assert_eq!(got.seq, c & 0xffff_ffff_ffff, "{what}");
                            assert_eq!(got.flow as u32, flow, "{what}");
                            assert_eq!(got.flows, flows, "{what}");
                        }
                    }
                    assert_eq!(counters.sum(0).unwrap(), start + 4, "{what}");
                }
            }
        }
    }
}
