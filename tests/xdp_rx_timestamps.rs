//! AF_XDP receive timestamps: the stamping steering program under the kernel's verifier and
//! `BPF_PROG_TEST_RUN`, and per-packet kernel receive times on a veth pair in namespaces.

mod support;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rawq::config::RxTimestamps;
use rawq::flow::Rule;
use rawq::gen::monotonic_ns;
use rawq::xdp::bpf::{self, action, meta, Program, Stamp, Variant, XskMap};
use rawq::{Backend, Port, Queue};
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
        assert_eq!(u32_at(&m, meta::HW_STATUS_AT), 0);
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
/// arrives. Returns, per datagram: (send time, kernel receive time, clock read after the
/// `rx_burst` that returned it).
fn ping(p: &NetnsPair, q: &mut Queue, n: u64) -> Vec<(u64, Option<u64>, u64)> {
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
            for pk in pkts.drain(..k) {
                let d = pk.data();
                if d.len() >= 58 && d[42 + 8..58] == seq.to_ne_bytes() {
                    let s = u64::from_ne_bytes(d[42..50].try_into().unwrap());
                    got.push((s, pk.meta.kernel_rx_ns(), after));
                    found = true;
                }
            }
        }
        assert!(found, "datagram {seq} never arrived");
    }
    got
}

/// Each datagram's kernel receive time lies between the sender's clock read before `send` and
/// the receiver's clock read after the `rx_burst` that returned it (CLOCK_MONOTONIC is one
/// clock for every namespace of the host).
#[test]
fn kernel_receive_times_lie_between_send_and_receive_on_a_veth() {
    let Some(p) = NetnsPair::new("rxts") else {
        return;
    };
    let mut port = open_stamped(&p, &p.a, &p.veth_a, RxTimestamps::Kernel).expect("open port");
    let mut q = port.take_queues().remove(0);
    let got = ping(&p, &mut q, 200);
    assert_eq!(got.len(), 200);
    for (i, &(sent, k, after)) in got.iter().enumerate() {
        let k = k.unwrap_or_else(|| panic!("datagram {i} has no kernel receive time"));
        assert!(
            sent < k && k <= after,
            "datagram {i}: sent {sent} < kernel {k} <= after rx_burst {after}"
        );
    }
    // The stamp is when the frame reached the XDP hook, not when rx_burst ran: never later.
    let mean_wait: f64 = got
        .iter()
        .map(|&(_, k, a)| (a - k.unwrap()) as f64)
        .sum::<f64>()
        / got.len() as f64;
    eprintln!("mean hook-to-rx_burst time {mean_wait:.0} ns");
    drop(q);
    drop(port);

    // Without the option, no frame has one.
    let mut port = open_stamped(&p, &p.a, &p.veth_a, RxTimestamps::Off).expect("open port");
    let mut q = port.take_queues().remove(0);
    let got = ping(&p, &mut q, 20);
    assert!(got.iter().all(|&(_, k, _)| k.is_none()), "{got:?}");
}
