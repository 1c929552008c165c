//! `PortInfo::offloads` says where each offload is done, and the ports keep to it: the model
//! segments TSO in "hardware", the loopback backend fills checksums in software and refuses
//! TSO with an error (issue 22 items 1 and 5).

use rawq_testkit as support;

use std::time::{Duration, Instant};

use rawq::{Backend, Offload, Port};

/// Ethernet + IPv4 + TCP (no options) to port 9000 with `payload` bytes of `i as u8`.
fn tcp_frame(payload: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0];
    f.extend_from_slice(&((40 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[
        0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2,
    ]);
    f.extend_from_slice(&[0x04, 0x00, 0x23, 0x28, 0, 0, 0, 100, 0, 0, 0, 0, 0x50, 0x19]);
    f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    f.extend((0..payload).map(|i| i as u8));
    f
}

/// Ones' complement sum folded: 0xffff over a range holding its own correct checksum.
fn folded(b: &[u8], mut s: u32) -> u16 {
    for c in b.chunks(2) {
        s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn tcp_ok(f: &[u8]) -> bool {
    let l4len = (f.len() - 34) as u32;
    folded(&f[14..34], 0) == 0xffff
        && folded(&f[34..], folded(&f[26..34], 0) as u32 + 6 + l4len) == 0xffff
}

#[test]
fn loopback_fills_checksums_in_software_and_refuses_tso() {
    let mut port = Port::builder(Backend::Loopback).open().unwrap();
    let o = port.info().offloads;
    assert_eq!(
        (o.ipv4_csum, o.l4_csum, o.tso),
        (Offload::Software, Offload::Software, Offload::Absent)
    );
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);
    let mut p = pool.alloc().unwrap();
    p.copy_from_slice(&tcp_frame(100)).unwrap();
    p.offload.l3_csum = true;
    p.offload.l4_csum = true;
    let mut t = pool.alloc().unwrap();
    t.copy_from_slice(&tcp_frame(3000.min(pool.buf_size() as usize - 300)))
        .unwrap();
    t.offload.tso_mss = Some(1000);
    let mut v = vec![t, p];
    assert_eq!(
        q.tx_burst(&mut v),
        1,
        "the TSO packet is refused, the other sent"
    );
    assert!(v.is_empty());
    let e = q.take_error().expect("the refusal is said").to_string();
    assert!(e.contains("does not segment"), "{e}");
    let s = q.stats();
    assert_eq!((s.tx_packets, s.tx_drops), (1, 1), "{s:?}");
    let mut got = Vec::new();
    assert_eq!(q.rx_burst(&mut got, 8), 1);
    assert!(tcp_ok(&got[0].to_vec()), "checksums filled in software");
    drop(got);
    drop(q);
    drop(port);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity(), "every buffer home");
}

#[cfg(feature = "mlx5")]
#[test]
fn the_model_segments_a_tso_super_frame() {
    use rawq::dv::model::ModelOptions;
    let mut port = Port::builder(Backend::Model(ModelOptions::default()))
        .rx_ring(256)
        .tx_ring(256)
        .open()
        .expect("model port");
    let o = port.info().offloads;
    assert_eq!(
        (o.tso, o.l4_csum),
        (Offload::Hardware, Offload::Hardware),
        "{o:?}"
    );
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);
    // 1800 bytes of payload in one buffer, MSS 500: 4 segments (500, 500, 500, 300).
    let frame = tcp_frame(1800);
    let mut p = pool.alloc().unwrap();
    p.copy_from_slice(&frame).unwrap();
    p.offload.tso_mss = Some(500);
    let mut v = vec![p];
    assert_eq!(q.tx_burst(&mut v), 1);
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    while got.len() < 4 && Instant::now() < end {
        q.reclaim();
        let mut b = Vec::new();
        q.rx_burst(&mut b, 16);
        got.extend(b.iter().map(|p| p.to_vec()));
    }
    assert!(q.take_error().is_none());
    assert_eq!(got.len(), 4, "segments");
    let mut joined = Vec::new();
    for (i, f) in got.iter().enumerate() {
        let last = i == 3;
        assert!(tcp_ok(f), "segment {i} checksums");
        assert_eq!(f.len(), 54 + if last { 300 } else { 500 });
        assert_eq!(
            u16::from_be_bytes([f[18], f[19]]),
            0x1234 + i as u16,
            "IP id"
        );
        let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
        assert_eq!(seq, 100 + 500 * i as u32, "seq");
        assert_eq!(f[47], if last { 0x19 } else { 0x10 }, "flags");
        joined.extend_from_slice(&f[54..]);
    }
    assert_eq!(joined, frame[54..], "payload reassembles");
}

#[test]
fn vlan_stripping_is_refused_where_the_tag_cannot_reach_rx_meta() {
    let Err(e) = Port::builder(Backend::Loopback).vlan_strip(true).open() else {
        panic!("a loopback port with VLAN stripping opened");
    };
    assert!(matches!(e, rawq::Error::Unsupported(_)), "{e:?}");
    assert!(e.to_string().contains("dv, verbs and model"), "{e}");
}

#[cfg(feature = "mlx5")]
#[test]
fn the_model_strips_a_vlan_tag_into_rx_meta() {
    use rawq::dv::model::ModelOptions;
    let mut port = Port::builder(Backend::Model(ModelOptions::default()))
        .vlan_strip(true)
        .rx_ring(256)
        .tx_ring(256)
        .open()
        .expect("model port");
    assert_eq!(port.info().offloads.vlan_strip, Offload::Hardware);
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);
    let frame = tcp_frame(100);
    let mut tagged = frame[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0xa0, 0x07]);
    tagged.extend_from_slice(&frame[12..]);
    let mut p = pool.alloc().unwrap();
    p.copy_from_slice(&tagged).unwrap();
    let mut v = vec![p];
    assert_eq!(q.tx_burst(&mut v), 1);
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    while got.is_empty() && Instant::now() < end {
        q.reclaim();
        q.rx_burst(&mut got, 8);
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].meta.vlan_tci(), Some(0xa007));
    assert_eq!(got[0].to_vec(), frame, "untagged");
}

/// pktgen --tso on the model's loopback: 100 super-frames of 4000 bytes (3946 bytes of TCP
/// payload) with MSS 1448 come back as 300 segments carrying every byte once plus their
/// replicated headers; with UDP --tso is refused.
#[cfg(feature = "mlx5")]
#[test]
fn pktgen_tso_sends_super_frames_that_come_back_as_segments() {
    let run = |l4: &str| {
        std::process::Command::new(support::example("pktgen"))
            .args([
                "-b", "model", "--txrx", "--l4", l4, "-s", "4000", "--tso", "1448",
            ])
            .args(["-n", "100", "-t", "20", "--json", "--quiet"])
            .output()
            .unwrap()
    };
    let out = run("tcp-ack");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pktgen failed: {err}");
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON summary");
    assert_eq!(v["tx"]["packets"], 100, "{v}");
    assert_eq!(v["rx"]["packets"], 300, "{v}");
    assert_eq!(v["rx"]["bytes"], 300 * 54 + 100 * 3946, "{v}");
    let out = run("udp");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tso segments TCP"), "{err}");
}

/// A device without checksum offload (the model with `tx_csum: false`): the dv driver fills
/// the checksums a packet asks for itself instead of dropping the request (issue 22 item 5).
#[cfg(feature = "mlx5")]
#[test]
fn dv_without_checksum_offload_fills_requested_checksums_in_software() {
    use rawq::dv::model::ModelOptions;
    let mut port = Port::builder(Backend::Model(ModelOptions {
        tx_csum: false,
        ..Default::default()
    }))
    .rx_ring(256)
    .tx_ring(256)
    .open()
    .expect("model port");
    let o = port.info().offloads;
    assert_eq!(
        (o.ipv4_csum, o.l4_csum),
        (Offload::Software, Offload::Software)
    );
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);
    let mut f = tcp_frame(300);
    f[24..26].copy_from_slice(&[0xde, 0xad]); // wrong IPv4 header checksum
    f[50..52].copy_from_slice(&[0xbe, 0xef]); // wrong TCP checksum
    let mut v = Vec::new();
    for single in [true, false] {
        let mut p = pool.alloc().unwrap();
        if single {
            p.copy_from_slice(&f).unwrap();
        } else {
            // Chained: the general WQE path.
            p.copy_from_slice(&f[..200]).unwrap();
            let mut s = pool.alloc().unwrap();
            s.copy_from_slice(&f[200..]).unwrap();
            p.chain(s).unwrap();
        }
        p.offload.l3_csum = true;
        p.offload.l4_csum = true;
        v.push(p);
    }
    assert_eq!(q.tx_burst(&mut v), 2);
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    while got.len() < 2 && Instant::now() < end {
        q.reclaim();
        let mut b = Vec::new();
        q.rx_burst(&mut b, 8);
        got.extend(b.iter().map(|p| p.to_vec()));
    }
    assert!(q.take_error().is_none());
    assert_eq!(got.len(), 2);
    for g in &got {
        assert!(tcp_ok(g), "checksums filled: {:02x?}", &g[14..54]);
    }
}

/// With a port MTU the transmit check measures what goes on the wire: a TSO super-frame's
/// segments (header + MSS), not the super-frame, which it once refused as "above the MTU".
#[cfg(feature = "mlx5")]
#[test]
fn a_port_mtu_bounds_tso_segments_not_the_super_frame() {
    use rawq::dv::model::ModelOptions;
    let mut port = Port::builder(Backend::Model(ModelOptions::default()))
        .mtu(600)
        .open()
        .expect("model port");
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);
    // 1854-byte super-frame, MSS 500: segments of 554 bytes, under 600 + 18.
    let mut p = pool.alloc().unwrap();
    p.copy_from_slice(&tcp_frame(1800)).unwrap();
    p.offload.tso_mss = Some(500);
    let mut v = vec![p];
    assert_eq!(q.tx_burst(&mut v), 1, "{:?}", q.take_error());
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(20);
    while got < 4 && Instant::now() < end {
        q.reclaim();
        let mut b = Vec::new();
        got += q.rx_burst(&mut b, 16);
    }
    assert_eq!(got, 4, "segments");
    // MSS 600: segments of 654 bytes, above 618: refused, not sent.
    let mut p = pool.alloc().unwrap();
    p.copy_from_slice(&tcp_frame(1800)).unwrap();
    p.offload.tso_mss = Some(600);
    let mut v = vec![p];
    assert_eq!(q.tx_burst(&mut v), 0);
    let e = q.take_error().expect("the refusal is said").to_string();
    assert!(e.contains("above the port's largest frame"), "{e}");
}
