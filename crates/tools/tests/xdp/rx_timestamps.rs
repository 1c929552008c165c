//! AF_XDP receive timestamps: the stamping steering program under the kernel's verifier and
//! `BPF_PROG_TEST_RUN`, and per-packet kernel receive times on a veth pair in namespaces.

use rawq_testkit as support;

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use rawq::config::RxTimestamps;
use rawq::flow::Rule;
use rawq::xdp::bpf::{self, action, meta, Program, Stamp, Variant, XskMap};
use rawq::{Backend, Port, Queue, RxMeta};
use rawq_gen::monotonic_ns;
use support::NetnsPair;

fn root_or_skip() -> Option<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return support::skip_or_fail("loading BPF programs needs root");
    }
    Some(())
}

/// An Ethernet + IPv4 + UDP frame to `dst_port`.
fn udp_frame(dst_port: u16) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&dst_port.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

/// The kernel's verifier accepts the stamping program; under `BPF_PROG_TEST_RUN` a steered frame
/// comes out with a metadata record whose kernel time lies between two CLOCK_MONOTONIC reads
/// around the run, and the frame itself unchanged; a frame no rule steers gets no record.
#[test]
fn kernel_stamp_program_writes_a_time_between_two_clock_reads() {
    let Some(()) = root_or_skip() else { return };
    let map = XskMap::create(1).expect("xskmap");
    let rules: Vec<Rule> = vec!["udp dst-port 9000 -> queue 0".parse().unwrap()];
    let insns = bpf::compile_stamped(
        &rules,
        Variant::Steer {
            xskmap_fd: map.as_raw_fd(),
        },
        Stamp::Kernel,
    )
    .unwrap();
    let prog = Program::load(&insns, "rawq_ts_test").expect("the verifier accepts it");

    let frame = udp_frame(9000);
    for _ in 0..20 {
        let before = monotonic_ns();
        let (ret, m, out) = prog.test_run_meta(&frame).expect("test run");
        let after = monotonic_ns();
        // No socket at key 0: bpf_redirect_map falls back to its flags (XDP_PASS).
        assert!(ret == action::PASS || ret == action::REDIRECT, "{ret}");
        assert_eq!(m.len(), meta::LEN, "metadata record of {} bytes", meta::LEN);
        assert_eq!(u32_at(&m, meta::MAGIC_AT), meta::MAGIC);
        let k = u64_at(&m, meta::KERNEL_NS_AT);
        assert!(before <= k && k <= after, "{before} <= {k} <= {after}");
        assert_eq!(u32_at(&m, meta::HW_STATUS_AT) as i32, meta::NOT_ASKED);
        assert_eq!(u64_at(&m, meta::HW_NS_AT), 0);
        assert_eq!(out, frame, "the frame is untouched");
    }

    let (ret, m, out) = prog.test_run_meta(&udp_frame(9001)).expect("test run");
    assert_eq!(ret, action::PASS);
    assert!(
        m.is_empty(),
        "a frame left to the kernel gets no record: {m:?}"
    );
    assert_eq!(out, udp_frame(9001));

    // The same rules without stamps: no metadata.
    let plain = bpf::compile(
        &rules,
        Variant::Steer {
            xskmap_fd: map.as_raw_fd(),
        },
    )
    .unwrap();
    let plain = Program::load(&plain, "rawq_plain").unwrap();
    let (_, m, _) = plain.test_run_meta(&frame).unwrap();
    assert!(m.is_empty(), "{m:?}");
}

/// Opens an AF_XDP port on `dev` in namespace `ns` steering UDP to port 9000 to queue 0, with
/// receive timestamps `ts`.
fn open_stamped(p: &NetnsPair, ns: &str, dev: &str, ts: RxTimestamps) -> rawq::Result<Port> {
    let dev = dev.to_string();
    p.run_in(ns, move || {
        Port::builder(Backend::Xdp { ifname: dev })
            .rx_ring(256)
            .tx_ring(256)
            .rule("udp dst-port 9000 -> queue 0".parse().unwrap())
            .rx_timestamps(ts)
            .open()
    })
}

/// Sends `n` UDP datagrams from namespace B to A:9000, each carrying (CLOCK_MONOTONIC just
/// before `send`, sequence number), one at a time; after each, polls A's queue until it
/// arrives. Returns, per datagram: (send time, its metadata, clock read after the `rx_burst`
/// that returned it, the 24 bytes in front of its data: the metadata record as rx left it).
fn ping(p: &NetnsPair, q: &mut Queue, n: u64) -> Vec<(u64, RxMeta, u64, Vec<u8>)> {
    let dst = format!("{}:9000", p.ip_a);
    let sock = p.run_in(&p.b, move || {
        let u = UdpSocket::bind("0.0.0.0:0").unwrap();
        u.connect(dst).unwrap();
        u
    });
    let mut got = Vec::new();
    let mut pkts = Vec::with_capacity(32);
    // One datagram first, so that ARP is resolved before timing starts (not counted).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut warm = false;
    while !warm && Instant::now() < deadline {
        sock.send(&[0u8; 16]).unwrap();
        let t = Instant::now();
        while !warm && t.elapsed() < Duration::from_millis(100) {
            if q.rx_burst(&mut pkts, 32) > 0 {
                warm = true;
            }
            pkts.clear();
        }
    }
    assert!(warm, "nothing reached the AF_XDP socket");
    for seq in 0..n {
        let mut payload = [0u8; 16];
        let sent = monotonic_ns();
        payload[..8].copy_from_slice(&sent.to_ne_bytes());
        payload[8..].copy_from_slice(&seq.to_ne_bytes());
        sock.send(&payload).unwrap();
        let t = Instant::now();
        let mut found = false;
        while !found && t.elapsed() < Duration::from_secs(2) {
            let k = q.rx_burst(&mut pkts, 32);
            let after = monotonic_ns();
            for mut pk in pkts.drain(..k) {
                let d = pk.data();
                if d.len() >= 58 && d[42 + 8..58] == seq.to_ne_bytes() {
                    let s = u64::from_ne_bytes(d[42..50].try_into().unwrap());
                    let m = pk.meta;
                    let rec = pk.prepend(meta::LEN).unwrap().to_vec();
                    got.push((s, m, after, rec));
                    found = true;
                }
            }
        }
        assert!(found, "datagram {seq} never arrived");
    }
    got
}

/// Checks each datagram's kernel receive time lies between the sender's clock read before
/// `send` and the receiver's clock read after the `rx_burst` that returned it (CLOCK_MONOTONIC
/// is one clock for every namespace of the host), that the rx path cleared the record's magic,
/// and that the record's hardware status is `status(s)`.
fn check_kernel_times(got: &[(u64, RxMeta, u64, Vec<u8>)], status: impl Fn(i32) -> bool) {
    for (i, (sent, m, after, rec)) in got.iter().enumerate() {
        let k = m
            .kernel_rx_ns()
            .unwrap_or_else(|| panic!("datagram {i} has no kernel receive time"));
        assert!(
            *sent < k && k <= *after,
            "datagram {i}: sent {sent} < kernel {k} <= after rx_burst {after}"
        );
        assert_eq!(u64_at(rec, meta::KERNEL_NS_AT), k, "datagram {i}");
        assert_eq!(u32_at(rec, meta::MAGIC_AT), 0, "rx clears the magic");
        let st = u32_at(rec, meta::HW_STATUS_AT) as i32;
        assert!(status(st), "datagram {i}: hardware status {st}");
    }
}

#[test]
fn kernel_receive_times_lie_between_send_and_receive_on_a_veth() {
    let Some(p) = NetnsPair::new("rxts") else {
        return;
    };
    let mut port = open_stamped(&p, &p.a, &p.veth_a, RxTimestamps::Kernel).expect("open port");
    let mut q = port.take_queues().remove(0);
    let got = ping(&p, &mut q, 200);
    assert_eq!(got.len(), 200);
    check_kernel_times(&got, |s| s == meta::NOT_ASKED);
    assert!(got.iter().all(|(_, m, _, _)| m.hw_timestamp().is_none()));
    let mean_wait: f64 = got
        .iter()
        .map(|(_, m, a, _)| (a - m.kernel_rx_ns().unwrap()) as f64)
        .sum::<f64>()
        / got.len() as f64;
    eprintln!("mean hook-to-rx_burst time {mean_wait:.0} ns");
    drop(q);
    drop(port);

    // Without the option, no frame has one.
    let mut port = open_stamped(&p, &p.a, &p.veth_a, RxTimestamps::Off).expect("open port");
    let mut q = port.take_queues().remove(0);
    let got = ping(&p, &mut q, 20);
    assert!(
        got.iter().all(|(_, m, _, _)| m.kernel_rx_ns().is_none()),
        "{got:?}"
    );
}

/// RxTimestamps::Hardware on a veth: the device-bound program is attached (veth has native
/// XDP) and calls veth's `rx_timestamp` op for every frame: the record's status is the op's
/// return value, 0 for a frame that came as an skb (drivers/net/veth.c `veth_xdp_rx_timestamp`
/// returns the skb's hardware stamp, which no veth skb has: 0, so no hardware time), or
/// -ENODATA for one without; never "not asked". The kernel times are there as with `Kernel`.
#[test]
fn hardware_mode_on_a_veth_calls_the_driver_and_keeps_kernel_times() {
    let Some(p) = NetnsPair::new("rxhv") else {
        return;
    };
    let mut port = open_stamped(&p, &p.a, &p.veth_a, RxTimestamps::Hardware).expect("open port");
    let mut q = port.take_queues().remove(0);
    let got = ping(&p, &mut q, 100);
    check_kernel_times(&got, |s| s == 0 || s == -libc::ENODATA);
    assert!(
        got.iter().all(|(_, m, _, _)| m.hw_timestamp().is_none()),
        "a veth has no hardware clock: {got:?}"
    );
}

/// The hardware-stamping program (a call of the kfunc `bpf_xdp_metadata_rx_timestamp`, found
/// by name in the live vmlinux BTF) passes the verifier when loaded device-bound to a veth; the
/// verifier refuses it unbound, and refuses a BTF id that is not a function.
#[test]
fn hardware_stamp_program_passes_the_verifier_device_bound() {
    let Some(p) = NetnsPair::new("rxhw") else {
        return;
    };
    let id = bpf::btf::vmlinux_func("bpf_xdp_metadata_rx_timestamp", "this test", "").unwrap();
    let veth = p.veth_a.clone();
    p.run_in(&p.a, move || {
        let ifindex = rawq::xdp::iface::ifindex(&veth).unwrap();
        let map = XskMap::create(1).unwrap();
        let rules: Vec<Rule> = vec!["udp dst-port 9000 -> queue 0".parse().unwrap()];
        let hw = |kfunc: u32| {
            bpf::compile_stamped(
                &rules,
                Variant::Steer {
                    xskmap_fd: map.as_raw_fd(),
                },
                Stamp::Hardware {
                    rx_timestamp_kfunc: kfunc,
                },
            )
            .unwrap()
        };
        Program::load_for_device(&hw(id), "rawq_hwts", ifindex)
            .expect("the verifier accepts the device-bound program");
        match Program::load(&hw(id), "rawq_hwts") {
            Err(rawq::Error::Verifier { log, .. }) => {
                assert!(log.contains("device-bound"), "{log}")
            }
            other => panic!("unbound: {other:?}"),
        }
        // Type 1 of vmlinux's BTF is a base type (pahole emits them first), not a FUNC.
        match Program::load_for_device(&hw(1), "rawq_hwts", ifindex) {
            Err(rawq::Error::Verifier { log, .. }) => {
                assert!(log.contains("is not a function"), "{log}")
            }
            other => panic!("type 1: {other:?}"),
        }
    });
}

/// RxTimestamps::Hardware on an interface without native XDP (`lo`, generic XDP only): a clear
/// error that says what to use instead, and nothing left attached.
#[test]
fn hardware_mode_without_native_xdp_is_a_clear_error() {
    let Some(p) = NetnsPair::new("rxlo") else {
        return;
    };
    let r = p.run_in(&p.a, || {
        Port::builder(Backend::Xdp {
            ifname: "lo".into(),
        })
        .rx_ring(64)
        .tx_ring(64)
        .rule("udp dst-port 9000 -> queue 0".parse().unwrap())
        .rx_timestamps(RxTimestamps::Hardware)
        .open()
        .map(|_| ())
    });
    match r {
        Err(rawq::Error::Unsupported(m)) => {
            assert!(
                m.starts_with("lo cannot take") && m.contains("RxTimestamps::Kernel"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    let attached = p.run_in(&p.a, || rawq::xdp::iface::attached_prog_id("lo").unwrap());
    assert_eq!(attached, None);
}

/// One-way latency between two pktgen processes over a veth pair: `pktgen --latency` sends from
/// B, `pktgen --rx` on A times the stamped frames with the kernel's receive times (every
/// sample), all positive and ordered.
#[test]
fn pktgen_rx_times_one_way_latency_with_kernel_timestamps() {
    let Some(p) = NetnsPair::new("rx1w") else {
        return;
    };
    const N: u64 = 1000;
    // The receiver runs until the frames sent have reached its veth (then SIGTERM; `-t` bounds
    // a failed test), its banner awaited before anything is sent.
    let mut rx = support::run::Run::spawn(
        support::run::in_ns(&p.a, "pktgen")
            .args(["-b", "xdp", "-d", &p.veth_a, "--rx", "-t", "120"])
            .args([
                "--rule",
                "udp dst-port 9000 -> queue 0",
                "--json",
                "--quiet",
            ]),
    );
    assert!(
        rx.wait_for_stderr("pktgen:", Duration::from_secs(30)),
        "the receiver did not start: {}",
        rx.stderr()
    );
    let mac_a = p.mac_text(&p.a, &p.veth_a);
    let tx = Command::new("ip")
        .args(["netns", "exec", &p.b])
        .arg(support::example("pktgen"))
        .args(["-b", "xdp", "-d", &p.veth_b, "--dst-mac", &mac_a])
        .args(["--src-ip", &p.ip_b, "--dst-ip", &p.ip_a, "-s", "80"])
        .args(["-n", &N.to_string(), "-r", "5kpps", "--latency", "--quiet"])
        .output()
        .unwrap();
    p.wait_rx_packets(&p.a, &p.veth_a, N, Duration::from_secs(30));
    rx.signal(libc::SIGTERM).expect("SIGTERM to the receiver");
    let rx = rx.finish(Duration::from_secs(60));
    for (o, what) in [(&tx, "sender"), (&rx, "receiver")] {
        assert!(
            o.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let text = String::from_utf8_lossy(&rx.stdout);
    let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let l = &v["latency"];
    assert_eq!(l["path"], "one-way", "{l}");
    assert_eq!(l["timestamps"], "kernel", "{l}");
    assert_eq!(l["samples"].as_u64(), Some(N), "{l}");
    assert_eq!(l["kernel_timestamped"].as_u64(), Some(N), "{l}");
    assert_eq!(l["not_positive"].as_u64(), Some(0), "{l}");
    let g = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k}: {l}"));
    assert!(g("min_ns") > 0, "{l}");
    assert!(
        g("min_ns") <= g("p50_ns") && g("p50_ns") <= g("p99_ns") && g("p99_ns") <= g("max_ns"),
        "{l}"
    );
}
