//! Transmit offloads on the emulated ConnectX. TSO: one 64 KiB TCP super-frame with MSS 1448, sent through `-b dv`
//! (rawq's own TSO WQE) and `-b verbs` (libmlx5's `IBV_WR_TSO`), comes back on the loopback as
//! segments that tshark (an oracle nobody here wrote) decodes with every checksum verified good,
//! IP ids and TCP sequence numbers continuous, FIN/PSH on the last segment only, and the payload
//! reassembles byte-exact. Bad TSO requests are refused with a clear error and not counted as
//! sent. VLAN insertion: frames sent with a tag to insert come back tagged (tshark decodes the
//! tag, the UDP checksum good), alone and on every TSO segment; a frame that already has a tag
//! is refused.
//!
//! As in `tests/emu/dv.rs`, the `inner_*` test is the application run under `scripts/emu.sh`
//! by its outer test.
#![cfg(all(feature = "mlx5", feature = "verbs"))]

use rawq_testkit as support;

use std::process::Command;
use std::time::{Duration, Instant};

use rawq::{Backend, MempoolConfig, Packet, Port};
use rawq_gen::{CaptureLimits, PcapWriter};
use support::emu::serial;
use support::emu::{emu_sh, tempdir};
use support::emu_dv::{inner_only, run_inner, INNER};
use support::NetnsPair;

const BACKEND_ENV: &str = "RAWQ_EMU_TSO_BACKEND";
const MSS: u16 = 1448;
const PAYLOAD: usize = 65536;
const SEQ0: u32 = 0xffff_f000;
const ID0: u16 = 0xfff0;
/// TCP flags of the super-frame: ACK PSH FIN.
const FLAGS: u8 = 0x19;

/// Ethernet + IPv4 + TCP (12 bytes of options: NOP NOP timestamp) to port 9000.
fn header(payload: usize, proto: u8) -> Vec<u8> {
    let mut h = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let tot = (20 + 32 + payload) as u16;
    h.extend_from_slice(&[0x45, 0]);
    h.extend_from_slice(&tot.to_be_bytes());
    h.extend_from_slice(&ID0.to_be_bytes());
    h.extend_from_slice(&[0x40, 0, 64, proto, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
    h.extend_from_slice(&[0x04, 0x00, 0x23, 0x28]); // 1024 -> 9000
    h.extend_from_slice(&SEQ0.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 1, 0x80, FLAGS, 0xff, 0xff, 0, 0, 0, 0]);
    h.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    h
}

fn payload() -> Vec<u8> {
    (0..PAYLOAD as u32)
        .map(|i| (i * 13 + i / 509) as u8)
        .collect()
}

/// `bytes` as a packet chained over buffers of `q`'s pool.
fn packet(port: &Port, bytes: &[u8]) -> Packet {
    let pool = port.pool();
    let room = (pool.buf_size() - pool.headroom() as u32) as usize;
    let mut chunks = bytes.chunks(room);
    let mut p = pool.alloc().expect("a buffer");
    p.copy_from_slice(chunks.next().unwrap()).unwrap();
    for c in chunks {
        let mut s = pool.alloc().expect("a buffer");
        s.copy_from_slice(c).unwrap();
        p.chain(s).unwrap();
    }
    p
}

fn open() -> Port {
    let backend = match std::env::var(BACKEND_ENV).as_deref() {
        Ok("verbs") => Backend::Verbs {
            device: "mlx5_0".into(),
            port: 1,
        },
        _ => Backend::Dv {
            device: "mlx5_0".into(),
            port: 1,
        },
    };
    // 32 KiB buffers: the super-frame in three (a verbs send WR points at 4 at most).
    Port::builder(backend)
        .rx_ring(256)
        .tx_ring(256)
        .rule("tcp dst-port 9000 -> queue 0".parse().expect("rule"))
        .pool_config(MempoolConfig {
            buffers: 1024,
            buf_size: 32768,
            ..Default::default()
        })
        .open()
        .expect("open the port on the emulated mlx5_0")
}

/// The fields tshark checks per segment.
const SEG_FIELDS: [&str; 7] = [
    "ip.id",
    "ip.checksum.status",
    "tcp.checksum.status",
    "tcp.seq_raw",
    "tcp.flags",
    "tcp.len",
    "ip.len",
];

/// tshark's fields of each frame of `frames` (with every checksum check on).
fn tshark(frames: &[Vec<u8>], fields: &[&str]) -> Vec<Vec<String>> {
    let path = std::env::temp_dir().join(format!(
        "rawq-emu-offl-{}-{}.pcap",
        std::process::id(),
        frames.len()
    ));
    let mut w = PcapWriter::create(&path, CaptureLimits::default()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        assert!(w.write(i as u64 * 1000, f).unwrap());
    }
    w.finish().unwrap();
    let rows = tshark_fields(&path, fields);
    let _ = std::fs::remove_file(&path);
    rows
}

fn tshark_rows(path: &std::path::Path) -> Vec<Vec<String>> {
    tshark_fields(path, &SEG_FIELDS)
}

/// tshark's fields of each frame of the capture at `path` (every checksum check on).
fn tshark_fields(path: &std::path::Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(path);
    for p in ["tcp", "ip"] {
        cmd.args(["-o", &format!("{p}.check_checksum:TRUE")]);
    }
    // Each frame on its own: no reassembly or analysis across frames.
    cmd.args([
        "-o",
        "tcp.analyze_sequence_numbers:FALSE",
        "-o",
        "tcp.desegment_tcp_streams:FALSE",
    ]);
    cmd.args(["-T", "fields", "-E", "separator=|"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('|').map(str::to_owned).collect())
        .collect()
}

/// Every segment valid: checksums good, IP id and sequence numbers continuous, FIN/PSH on the
/// last only, lengths.
fn check_segments(rows: &[Vec<String>], want: usize) {
    assert_eq!(rows.len(), want, "tshark frames");
    for (i, r) in rows.iter().enumerate() {
        let last = i == want - 1;
        let seg = if last {
            PAYLOAD - (want - 1) * MSS as usize
        } else {
            MSS as usize
        };
        let id = ID0.wrapping_add(i as u16);
        assert_eq!(r[0], format!("0x{id:04x}"), "IP id of segment {i}: {r:?}");
        assert_eq!(r[1], "1", "IPv4 header checksum good, segment {i}: {r:?}");
        assert_eq!(r[2], "1", "TCP checksum good, segment {i}: {r:?}");
        let seq = SEQ0.wrapping_add((i * MSS as usize) as u32);
        assert_eq!(r[3], seq.to_string(), "TCP seq of segment {i}: {r:?}");
        let flags = if last { FLAGS } else { FLAGS & !0x09 };
        assert_eq!(
            r[4],
            format!("0x{:04x}", flags as u16),
            "flags of {i}: {r:?}"
        );
        assert_eq!(r[5], seg.to_string(), "TCP payload of segment {i}: {r:?}");
        assert_eq!(
            r[6],
            (20 + 32 + seg).to_string(),
            "IP length of segment {i}: {r:?}"
        );
    }
}

#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_tso_64k_super_frame() {
    inner_only();
    let mut port = open();
    eprintln!("port: {:?}", port.info());
    assert_eq!(
        port.info().offloads.tso,
        rawq::Offload::Hardware,
        "{:?}",
        port.info()
    );
    let mut q = port.take_queues().pop().expect("one queue");
    let pay = payload();
    let mut frame = header(PAYLOAD, 6);
    let hdr_len = frame.len();
    frame.extend_from_slice(&pay);

    // Bad requests first: refused with a clear error, nothing sent.
    let bad: [(Vec<u8>, Option<u16>, &str); 3] = [
        (frame.clone(), Some(0), "MSS of 0"),
        (
            {
                let mut u = header(100, 17);
                u.extend_from_slice(&[0; 100]);
                u
            },
            Some(MSS),
            "only TCP",
        ),
        (frame[..40].to_vec(), Some(MSS), "first buffer"),
    ];
    for (bytes, mss, want) in bad {
        let mut p = packet(&port, &bytes);
        p.offload.tso_mss = mss;
        let mut v = vec![p];
        assert_eq!(q.tx_burst(&mut v), 0, "{want}: not sent");
        assert!(
            v.is_empty(),
            "{want}: the packet was taken (and freed), not left to retry"
        );
        let e = q.take_error().expect("an error").to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
    let s = q.stats();
    assert_eq!(
        (s.tx_packets, s.tx_bytes),
        (0, 0),
        "nothing counted as sent: {s:?}"
    );
    assert_eq!(s.tx_drops + s.tx_errors, 3, "each refusal counted: {s:?}");

    let mut p = packet(&port, &frame);
    assert_eq!(p.segment_count(), 3);
    p.offload.tso_mss = Some(MSS);
    let mut v = vec![p];
    let end = Instant::now() + Duration::from_secs(10);
    while !v.is_empty() && Instant::now() < end {
        q.tx_burst(&mut v);
    }
    assert!(v.is_empty(), "the super-frame was taken");
    if let Some(e) = q.take_error() {
        panic!("{e}");
    }
    let want = PAYLOAD.div_ceil(MSS as usize);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut burst = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while got.len() < want && Instant::now() < end {
        q.reclaim();
        if q.rx_burst(&mut burst, 64) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        got.extend(burst.drain(..).map(|p| p.to_vec()));
    }
    if let Some(e) = q.take_error() {
        panic!("{e}");
    }
    assert_eq!(got.len(), want, "segments received");

    // Payload reassembles byte-exact (segments arrive in order on one queue).
    let joined: Vec<u8> = got.iter().flat_map(|f| f[hdr_len..].to_vec()).collect();
    assert!(joined == pay, "payload reassembles byte-exact");

    check_segments(&tshark(&got, &SEG_FIELDS), want);
    let s = q.stats();
    assert_eq!(s.tx_packets, 1, "one super-frame sent: {s:?}");
    assert_eq!(s.rx_packets, want as u64, "{s:?}");
    eprintln!("TSO OK: {want} segments");
}

const TCI: u16 = 0x2064; // priority 1, VLAN 100

#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_vlan_insert() {
    inner_only();
    let port = open();
    let o = port.info().offloads;
    eprintln!("offloads: {o:?}");
    let mut port = port;
    let mut q = port.take_queues().pop().expect("one queue");
    // A TCP frame to port 9000 (what the port's rule steers to the queue).
    let mut tcp = header(100, 6);
    tcp.extend((0..100).map(|i| i as u8));

    // Already tagged: refused.
    let mut tagged = tcp[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    tagged.extend_from_slice(&tcp[12..]);
    let mut p = packet(&port, &tagged);
    p.offload.vlan_insert = Some(TCI);
    let mut v = vec![p];
    assert_eq!(q.tx_burst(&mut v), 0, "a tagged frame is not sent");
    assert!(v.is_empty());
    let e = q.take_error().expect("said").to_string();
    assert!(e.contains("already has a tag"), "{e}");
    assert_eq!(q.stats().tx_packets, 0);

    // One frame with a tag inserted (checksum asked too), and a small TSO super-frame with one.
    let mut p = packet(&port, &tcp);
    p.offload.vlan_insert = Some(TCI);
    p.offload.l3_csum = true;
    p.offload.l4_csum = true;
    let mut t = header(3000, 6);
    t.extend((0..3000).map(|i| (i * 3) as u8));
    let mut tp = packet(&port, &t);
    tp.offload.vlan_insert = Some(TCI);
    tp.offload.tso_mss = Some(1000);
    let mut v = vec![p, tp];
    let end = Instant::now() + Duration::from_secs(10);
    while !v.is_empty() && Instant::now() < end {
        q.tx_burst(&mut v);
    }
    if let Some(e) = q.take_error() {
        panic!("{e}");
    }
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut burst = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while got.len() < 4 && Instant::now() < end {
        q.reclaim();
        if q.rx_burst(&mut burst, 64) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        got.extend(burst.drain(..).map(|p| p.to_vec()));
    }
    assert_eq!(got.len(), 4, "the frame and 3 segments");
    for f in &got {
        assert_eq!(
            f[12..16],
            [0x81, 0x00, 0x20, 0x64],
            "tagged: {:02x?}",
            &f[..20]
        );
    }
    // Untagged and with the checksums (filled by the device) blanked, it is the frame sent.
    let mut g = [&got[0][..12], &got[0][16..]].concat();
    let mut want = tcp.clone();
    for f in [&mut g, &mut want] {
        f[24..26].fill(0);
        f[50..52].fill(0);
    }
    assert!(g == want, "the rest of the frame unchanged");
    let rows = tshark(
        &got,
        &[
            "vlan.id",
            "vlan.priority",
            "ip.checksum.status",
            "tcp.checksum.status",
            "tcp.len",
        ],
    );
    assert_eq!(
        [&rows[0][..2], &rows[0][3..4]].concat(),
        ["100", "1", "1"],
        "{rows:?}"
    );
    for (i, r) in rows[1..].iter().enumerate() {
        assert_eq!(r[..2], ["100", "1"], "segment {i}: {r:?}");
        assert_eq!(r[3..], ["1", "1000"], "segment {i}: {r:?}");
    }
    eprintln!("VLAN OK");
}

/// Which port `inner_vlan_strip` opens: "dv", "verbs" (receive on the QP's RQ, stripping
/// asked with `IBV_QP_CREATE_CVLAN_STRIPPING`) or "verbs-rss" (receive on a WQ behind an RSS
/// table, stripping asked with `IBV_WQ_FLAGS_CVLAN_STRIPPING`).
const STRIP_ENV: &str = "RAWQ_EMU_STRIP_BACKEND";

/// With VLAN stripping on: a frame sent with a tag (inserted by the device on dv, by rawq on
/// verbs) comes back untagged, the tag in `RxMeta`; an untagged frame comes back with none.
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_vlan_strip() {
    inner_only();
    let which = std::env::var(STRIP_ENV).unwrap_or_else(|_| "dv".into());
    let (backend, rule) = match which.as_str() {
        "verbs" => (
            Backend::Verbs {
                device: "mlx5_0".into(),
                port: 1,
            },
            "tcp dst-port 9000 -> queue 0",
        ),
        "verbs-rss" => (
            Backend::Verbs {
                device: "mlx5_0".into(),
                port: 1,
            },
            "tcp dst-port 9000 -> rss 0",
        ),
        _ => (
            Backend::Dv {
                device: "mlx5_0".into(),
                port: 1,
            },
            "tcp dst-port 9000 -> queue 0",
        ),
    };
    let mut port = Port::builder(backend)
        .vlan_strip(true)
        .rule(rule.parse().expect("rule"))
        .open()
        .unwrap_or_else(|e| panic!("open a {which} port with VLAN stripping: {e}"));
    assert_eq!(port.info().offloads.vlan_strip, rawq::Offload::Hardware);
    let mut q = port.take_queues().pop().expect("one queue");
    let mut tcp = header(100, 6);
    tcp.extend((0..100).map(|i| i as u8));
    let mut p = packet(&port, &tcp);
    p.offload.vlan_insert = Some(TCI);
    let mut v = vec![p, packet(&port, &tcp)];
    let end = Instant::now() + Duration::from_secs(10);
    while !v.is_empty() && Instant::now() < end {
        q.tx_burst(&mut v);
    }
    assert!(v.is_empty(), "both frames sent");
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while got.len() < 2 && Instant::now() < end {
        q.reclaim();
        q.rx_burst(&mut got, 8);
    }
    if let Some(e) = q.take_error() {
        panic!("{e}");
    }
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].meta.vlan_tci(), Some(TCI), "{:?}", got[0].meta);
    assert_eq!(got[1].meta.vlan_tci(), None, "untagged: {:?}", got[1].meta);
    for g in &got {
        assert!(
            g.to_vec() == tcp,
            "the frame arrives untagged, as it was before insertion"
        );
    }
    eprintln!("STRIP OK");
}

fn outer_strip(which: &str) {
    let _one = serial();
    let (out, _) = run_inner(
        &support::test_name(module_path!(), "inner_vlan_strip"),
        &[],
        &[(STRIP_ENV, which)],
    );
    let t = support::emu::text(&out);
    assert!(t.contains("STRIP OK"), "{t}");
}

#[test]
fn vlan_stripping_on_dv_gives_the_tag_in_rx_meta() {
    outer_strip("dv");
}

#[test]
fn vlan_stripping_on_verbs_gives_the_tag_in_rx_meta() {
    outer_strip("verbs");
}

#[test]
fn vlan_stripping_on_verbs_rss_wqs_gives_the_tag_in_rx_meta() {
    outer_strip("verbs-rss");
}

fn outer_vlan(backend: &str) {
    let _one = serial();
    if Command::new("tshark").arg("-v").output().is_err() {
        let _: Option<()> = support::skip_or_fail("tshark is not installed");
        return;
    }
    let (out, _) = run_inner(
        &support::test_name(module_path!(), "inner_vlan_insert"),
        &[],
        &[(BACKEND_ENV, backend)],
    );
    let t = support::emu::text(&out);
    assert!(t.contains("VLAN OK"), "{t}");
}

#[test]
fn vlan_insertion_on_dv_arrives_tagged() {
    outer_vlan("dv");
}

#[test]
fn vlan_insertion_on_verbs_in_software_arrives_tagged() {
    outer_vlan("verbs");
}

fn outer(backend: &str) {
    let _one = serial();
    if Command::new("tshark").arg("-v").output().is_err() {
        let _: Option<()> = support::skip_or_fail("tshark is not installed");
        return;
    }
    let (out, _) = run_inner(
        &support::test_name(module_path!(), "inner_tso_64k_super_frame"),
        &[],
        &[(BACKEND_ENV, backend)],
    );
    let t = support::emu::text(&out);
    assert!(t.contains("TSO OK: 46 segments"), "{t}");
}

#[test]
fn tso_64k_mss_1448_through_dv_on_the_emulated_nic() {
    outer("dv");
}

#[test]
fn tso_64k_mss_1448_through_verbs_ibv_wr_tso_on_the_emulated_nic() {
    outer("verbs");
}

/// Sends the 64 KiB super-frame once, on the wire (the outer test captures the far end).
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh --wire"]
fn inner_tso_on_the_wire() {
    inner_only();
    let mut port = open();
    let mut q = port.take_queues().pop().expect("one queue");
    let mut frame = header(PAYLOAD, 6);
    frame.extend_from_slice(&payload());
    let mut p = packet(&port, &frame);
    p.offload.tso_mss = Some(MSS);
    let mut v = vec![p];
    let end = Instant::now() + Duration::from_secs(10);
    while !v.is_empty() && Instant::now() < end {
        q.tx_burst(&mut v);
    }
    assert!(v.is_empty(), "the super-frame was taken");
    // Until the device completed it (the buffers came back).
    let end = Instant::now() + Duration::from_secs(10);
    while q.stats().tx_packets < 1 && Instant::now() < end {
        q.reclaim();
    }
    while q.reclaim() == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(e) = q.take_error() {
        panic!("{e}");
    }
    eprintln!("SENT");
}

/// The frames of a pcap file (classic format, as tshark -F pcap writes it).
fn pcap_frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).expect("the capture");
    let le = b[..4] == [0xd4, 0xc3, 0xb2, 0xa1];
    let u32at = |o: usize| {
        let w = [b[o], b[o + 1], b[o + 2], b[o + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let (mut at, mut out) = (24, Vec::new());
    while at + 16 <= b.len() {
        let n = u32at(at + 8) as usize;
        out.push(b[at + 16..at + 16 + n].to_vec());
        at += 16 + n;
    }
    out
}

/// The super-frame through the emulated NIC's wire (AF_PACKET on a veth): tshark on the far
/// end of the veth captures the 46 segments; they decode valid and reassemble byte-exact.
fn tso_across_a_veth(backend: &str) {
    let _one = serial();
    if Command::new("tshark").arg("-v").output().is_err() {
        let _: Option<()> = support::skip_or_fail("tshark is not installed");
        return;
    }
    let Some(ns) = NetnsPair::new(&format!("etso{}", &backend[..1])) else {
        return;
    };
    let dir = tempdir(&format!("emutso-{backend}"));
    let cap = dir.join("far.pcap");
    let log = dir.join("tshark.log");
    let want = PAYLOAD.div_ceil(MSS as usize);
    let mut tshark = Command::new("timeout")
        .args([
            "60", "ip", "netns", "exec", &ns.b, "tshark", "-i", &ns.veth_b,
        ])
        .args([
            "-f",
            "tcp dst port 9000",
            "-c",
            &want.to_string(),
            "-F",
            "pcap",
            "-w",
        ])
        .arg(&cap)
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("tshark");
    // Capturing once tshark says so.
    let end = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("Capturing on")
    {
        assert!(Instant::now() < end, "tshark did not start capturing");
        assert!(tshark.try_wait().unwrap().is_none(), "tshark ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    let exe = std::env::current_exe().unwrap();
    let stats = dir.join("model.stats");
    let out = emu_sh(
        Some((&ns.a, &ns.veth_a)),
        Some(120),
        &[],
        &[
            exe.to_str().unwrap(),
            "--exact",
            support::test_name(module_path!(), "inner_tso_on_the_wire").as_str(),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ],
        &stats,
    )
    .env(INNER, "1")
    .env(BACKEND_ENV, backend)
    .output()
    .expect("emu.sh");
    let t = support::emu::text(&out);
    assert!(out.status.success() && t.contains("SENT"), "{t}");
    let st = tshark.wait().expect("tshark");
    assert!(
        st.success(),
        "tshark: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let got = pcap_frames(&cap);
    assert_eq!(got.len(), want, "segments captured on the far veth");
    let hdr_len = header(PAYLOAD, 6).len();
    let joined: Vec<u8> = got.iter().flat_map(|f| f[hdr_len..].to_vec()).collect();
    assert!(joined == payload(), "the payload reassembles byte-exact");
    let rows = tshark_rows(&cap);
    check_segments(&rows, want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tso_64k_through_dv_across_a_veth_checked_by_tshark_on_the_far_end() {
    tso_across_a_veth("dv");
}

#[test]
fn tso_64k_through_verbs_across_a_veth_checked_by_tshark_on_the_far_end() {
    tso_across_a_veth("verbs");
}

/// A port MTU bounds what a TSO super-frame puts on the wire, its segments (header + MSS), on
/// dv and on verbs alike: with MTU 600 (frames up to 618 bytes) and a 66-byte header, MSS 500
/// (566-byte segments) is sent and comes back as 4 segments; MSS 560 (626) is refused, said,
/// freed, and not counted as sent.
#[test]
#[ignore = "the application side of an outer test: runs under scripts/emu.sh"]
fn inner_tso_segments_bounded_by_the_port_mtu() {
    inner_only();
    let device = "mlx5_0".to_string();
    let backend = if std::env::var(BACKEND_ENV).as_deref() == Ok("verbs") {
        Backend::Verbs { device, port: 1 }
    } else {
        Backend::Dv { device, port: 1 }
    };
    let mut port = Port::builder(backend)
        .mtu(600)
        .rule("tcp dst-port 9000 -> queue 0".parse().expect("rule"))
        .open()
        .expect("open the port on the emulated mlx5_0");
    let mut q = port.take_queues().pop().expect("one queue");
    let mut frame = header(1800, 6);
    frame.extend_from_slice(&[0x5a; 1800]);
    let mut p = packet(&port, &frame);
    p.offload.tso_mss = Some(500);
    let mut v = vec![p];
    assert_eq!(q.tx_burst(&mut v), 1, "{:?}", q.take_error());
    let (mut got, mut rx) = (0, Vec::new());
    let end = Instant::now() + Duration::from_secs(20);
    while got < 4 && Instant::now() < end {
        q.reclaim();
        got += q.rx_burst(&mut rx, 16);
        rx.clear();
    }
    assert_eq!(
        got,
        4,
        "segments of 566 bytes under MTU 600: {:?}",
        q.stats()
    );
    let mut p = packet(&port, &frame);
    p.offload.tso_mss = Some(560);
    let mut v = vec![p];
    assert_eq!(q.tx_burst(&mut v), 0, "626-byte segments: not sent");
    assert!(v.is_empty(), "the refused packet was taken and freed");
    let e = q.take_error().expect("the refusal is said").to_string();
    assert!(e.contains("above the port's largest frame"), "{e}");
    let s = q.stats();
    assert_eq!(s.tx_packets, 1, "only the first counted as sent: {s:?}");
    assert_eq!(s.tx_drops + s.tx_errors, 1, "the refusal counted: {s:?}");
    println!("MTU TSO OK");
}

fn tso_under_a_port_mtu(backend: &str) {
    let _one = serial();
    let (out, _) = run_inner(
        &support::test_name(module_path!(), "inner_tso_segments_bounded_by_the_port_mtu"),
        &[],
        &[(BACKEND_ENV, backend)],
    );
    let t = support::emu::text(&out);
    assert!(t.contains("MTU TSO OK"), "{t}");
}

#[test]
fn a_port_mtu_bounds_tso_segments_on_dv_on_the_emulated_nic() {
    tso_under_a_port_mtu("dv");
}

#[test]
fn a_port_mtu_bounds_tso_segments_on_verbs_on_the_emulated_nic() {
    tso_under_a_port_mtu("verbs");
}
