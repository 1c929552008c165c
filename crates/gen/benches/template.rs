//! Cost of `Stamper::write_at`, the per-frame writer behind pktgen's `FrameSource::fill`, and of
//! `FrameSource::fill_burst`, the burst writer pktgen's send loop calls.
//!
//! Not a timing bench: `scripts/callgrind-template.sh` runs it under callgrind and counts only
//! inside the `#[inline(never)]` `callgrind_*` functions, each writing `RAWQ_TMPL_FRAMES`
//! frames (default 1,000,000) of one plain shape (UDP, no VLAN, no ranges) into one buffer:
//! flow = seq = frame index, so the varying fields and checksums change every frame. Run
//! directly, it writes the frames once per case and prints a checksum of the last frame, so a
//! plain `cargo bench --bench template` stays short.
//!
//! Cases: `v4_port` (64-byte IPv4 frames, flows vary the source port), `v4_port_seq` (the
//! same with sequence stamps), `v4_ip` / `v4_ip_seq` (flows vary the source address),
//! `v6_port` / `v6_port_seq` / `v6_ip_seq` (78-byte IPv6 frames), and `v4_lat` (a latency
//! stamp with a send time, the general writer, 80-byte frames, for reference), `floor64`
//! (the loop copying a 64-byte template and nothing else: loop, `black_box` and `memcpy`), and
//! `burst60` / `burst60_f1024_seq`: `FrameSource::fill_burst` as pktgen's send loop calls it
//! (bursts of 32 pool packets, `-s 60` with pktgen's defaults: one flow, no stamps; then 1024
//! flows with sequence stamps). At 7279f81: 33.2 and 76.8 instructions a frame (87.9 and 108.1
//! before, at edfc065).
//!
//! Figures (callgrind instructions per frame, loop included; 2-vCPU VM; main (607b719) and
//! branch `tmplperf` built side by side, both binaries run back to back, 1,000,000 frames):
//!
//! | case | before (607b719) | after (`tmplperf`) |
//! |---|---|---|
//! | `v4_port` | 178.0 | 107.0 |
//! | `v4_port_seq` | 224.6 | 133.0 |
//! | `v4_ip` | 217.0 | 127.0 |
//! | `v4_ip_seq` | 263.6 | 156.0 |
//! | `v6_port` | 175.0 | 111.0 |
//! | `v6_port_seq` | 216.0 | 140.0 |
//! | `v6_ip_seq` | 255.0 | 150.0 |
//! | `v4_lat` (general writer) | 252.0 | 257.0 |
//! | `floor64` | 22.0 | 22.0 |
//!
//! Less the floor, the plain writer went from 156 to 85 instructions (v4, port) and from 202
//! to 111 (v4, port, stamps). What remains: a `memcpy` call and the registers saved around it
//! (~30), the bounds checks of the length and header slice (~12), the division for
//! `flow % flows`, and the sums and stores of the varying words.

use std::hint::black_box;

use rawq::{HugePages, Mempool, MempoolConfig, Packet};
use rawq_gen::{FlowVary, FrameSource, FrameSpec, Shape, SizeSpec, Stamper};

fn stamper(v6: bool, vary: FlowVary, stamp: bool, latency: bool) -> (Stamper, usize) {
    let (src, dst, len) = if v6 {
        ("fd00::1", "fd00::2", 78)
    } else {
        ("10.0.0.1", "10.0.0.2", 64)
    };
    // A latency stamp needs 24 bytes: 14 + 20 + 8 + 24 = 66.
    let len = if latency { 80 } else { len };
    let spec = FrameSpec {
        dst_mac: [0x02, 0, 0, 0, 0, 2],
        src_mac: [0x02, 0, 0, 0, 0, 1],
        src_ip: src.parse().unwrap(),
        dst_ip: dst.parse().unwrap(),
        src_port: 1000,
        dst_port: 9000,
        flows: 1024,
        vary,
        sizes: SizeSpec::Fixed(len as u16),
        stamp,
    };
    let shape = Shape {
        latency,
        ..Shape::default()
    };
    (Stamper::with_shape(spec, shape).expect("valid spec"), len)
}

macro_rules! case {
    ($name:ident, $v6:expr, $vary:expr, $stamp:expr, $lat:expr) => {
        #[inline(never)]
        fn $name(n: u64, out: &mut [u8]) {
            let (s, len) = stamper($v6, $vary, $stamp, $lat);
            let s = black_box(&s);
            let tx = if $lat { Some(123_456_789u64) } else { None };
            for i in 0..n {
                s.write_at(black_box(&mut *out), len, i as u32, 3, i, black_box(tx));
            }
        }
    };
}

case!(callgrind_v4_port, false, FlowVary::SrcPort, false, false);
case!(callgrind_v4_port_seq, false, FlowVary::SrcPort, true, false);
case!(callgrind_v4_ip, false, FlowVary::SrcIp, false, false);
case!(callgrind_v4_ip_seq, false, FlowVary::SrcIp, true, false);
case!(callgrind_v6_port, true, FlowVary::SrcPort, false, false);
case!(callgrind_v6_port_seq, true, FlowVary::SrcPort, true, false);
case!(callgrind_v6_ip_seq, true, FlowVary::SrcIp, true, false);
case!(callgrind_v4_lat, false, FlowVary::SrcPort, false, true);

/// `FrameSource::fill_burst` as pktgen's send loop calls it, bursts of 32 packets of a pool:
/// `-s 60` with pktgen's defaults (IPv4 198.18.0.1 → .2, ports 1024 → 9000), `flows` flows
/// varying the source port, with or without sequence stamps. The 32 packets stay allocated
/// (each burst rewrites them, as a fresh burst is written).
fn burst_case(n: u64, flows: u32, stamp: bool) {
    let spec = FrameSpec {
        dst_mac: [0x02, 0, 0, 0, 0, 2],
        src_mac: [0x02, 0, 0, 0, 0, 1],
        src_ip: "198.18.0.1".parse().unwrap(),
        dst_ip: "198.18.0.2".parse().unwrap(),
        src_port: 1024,
        dst_port: 9000,
        flows,
        vary: FlowVary::SrcPort,
        sizes: SizeSpec::Fixed(60),
        stamp,
    };
    let src = FrameSource::Template(Stamper::new(spec).expect("valid spec"));
    let pool = Mempool::new(&MempoolConfig {
        buffers: 64,
        huge_pages: HugePages::Never,
        ..Default::default()
    })
    .expect("pool");
    let mut pkts: Vec<Packet> = (0..32).map(|_| pool.alloc().expect("buffer")).collect();
    burst_loop(n, black_box(&src), &mut pkts);
    let sum: u32 = pkts[31].data().iter().map(|&b| b as u32).sum();
    black_box(sum);
}

/// The counted part of [`burst_case`]: `n / 32` bursts.
#[inline(never)]
fn burst_loop(n: u64, src: &FrameSource, pkts: &mut [Packet]) {
    let mut i = 0;
    while i + 32 <= n {
        src.fill_burst(black_box(&mut *pkts), i, 3).expect("fits");
        i += 32;
    }
}

#[inline(never)]
fn callgrind_burst60(n: u64, _out: &mut [u8]) {
    burst_case(n, 1, false)
}

#[inline(never)]
fn callgrind_burst60_f1024_seq(n: u64, _out: &mut [u8]) {
    burst_case(n, 1024, true)
}

/// The floor: the same loop copying a 64-byte template and nothing else (what any
/// template-copying writer pays).
#[inline(never)]
fn callgrind_floor64(n: u64, out: &mut [u8]) {
    let tmpl = [0x5au8; 64];
    let tmpl = black_box(&tmpl[..]);
    for _ in 0..n {
        let o = black_box(&mut *out);
        o[..64].copy_from_slice(&tmpl[..black_box(64)]);
    }
}

type Case = (&'static str, fn(u64, &mut [u8]));

const CASES: &[Case] = &[
    ("v4_port", callgrind_v4_port),
    ("v4_port_seq", callgrind_v4_port_seq),
    ("v4_ip", callgrind_v4_ip),
    ("v4_ip_seq", callgrind_v4_ip_seq),
    ("v6_port", callgrind_v6_port),
    ("v6_port_seq", callgrind_v6_port_seq),
    ("v6_ip_seq", callgrind_v6_ip_seq),
    ("v4_lat", callgrind_v4_lat),
    ("floor64", callgrind_floor64),
    ("burst60", callgrind_burst60),
    ("burst60_f1024_seq", callgrind_burst60_f1024_seq),
];

fn main() {
    let n: u64 = std::env::var("RAWQ_TMPL_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // `cargo bench` passes `--bench`; a case name selects one case.
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut out = vec![0u8; 256];
    for (name, f) in CASES {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        f(n, &mut out);
        let sum: u32 = out.iter().map(|&b| b as u32).sum();
        println!("{name}: {n} frames, last frame byte sum {sum}");
    }
}
