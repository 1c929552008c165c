//! DPDK decodes what the device model writes: DPDK 22.11's own mlx5 PMD (`dpdk-testpmd`,
//! rxonly, `set verbose 1`) receives frames the kernel sends across a veth (the emulated port's
//! wire) and prints, per packet, the RSS hash, the receive queue, the hardware packet type, the
//! checksum flags and the stripped VLAN it read from the model's CQEs (and mini-CQEs). Each is
//! checked against the frame the test built:
//!
//! - RSS hash == Toeplitz, under the key the test set (an rte_flow RSS rule over queues 0..4),
//!   over the fields its RSS types select (addresses and ports; addresses only for a
//!   non-first fragment), computed by this file's own Toeplitz (checked first on Microsoft's
//!   published vectors);
//! - the receive queue == the RETA slot of the hash (the rule's table: queues 0, 1, 2, 3);
//! - the hardware ptype == the frame's L3 (IPv4/IPv6) and L4 (UDP/TCP/fragment);
//! - `RTE_MBUF_F_RX_IP_CKSUM_GOOD` / `RTE_MBUF_F_RX_L4_CKSUM_GOOD` exactly when the frame's
//!   checksums are good (the mlx5 PMD never reports BAD: drivers/net/mlx5/mlx5_rx.c
//!   `rxq_cq_to_ol_flags` transposes the CQE's L3/L4 ok bits into GOOD, leaving UNKNOWN);
//! - a tagged frame arrives without its tag, `RTE_MBUF_F_RX_VLAN_STRIPPED` and its TCI.
//!
//! In each receive configuration the PMD's devargs select: scalar and vector receive, CQE
//! compression with the hash mini-CQE (cyclic RQ) and with the checksum + stride index
//! mini-CQE (striding RQ, the only format DPDK asks for there on the Verbs path:
//! drivers/net/mlx5/mlx5_verbs.c `mlx5_rxq_ibv_cq_create`), and the mini-CQE formats DPDK
//! needs DevX for (flow tag, L3/L4 header: the PMD turns compression off, drivers/net/mlx5/
//! linux/mlx5_os.c `mlx5_dev_spawn`), where the model must then write no compressed session.
//!
//! What DPDK cannot judge here: the CQE's RSS hash *type* byte (the mlx5 PMD does not read it).
//!
//! Needs root and `dpdk-testpmd` (scripts/setup.sh); says `skipped:` without root unless
//! `RAWQ_REQUIRE_NETNS=1`.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::time::Duration;

use support::dpdk::{kernel_send, netns, Pmd};
use support::emu::{serial, tempdir};

include!("../data/microsoft_rss_vectors.rs");

/// Microsoft's RSS key (the verification tables' key), set on the port by the test: not the
/// mlx5 PMD's default key, so a hash under the default key fails.
const KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The port's MAC (scripts/emu.sh gives mlx5_0 02:fc:00:00:00:01).
const PORT_MAC: [u8; 6] = [0x02, 0xfc, 0, 0, 0, 1];

/// Receive queues (RSS spreads over them).
const QUEUES: u32 = 4;

/// Toeplitz hash of `input` under `key`: bit i of the input, when set, XORs in the 32 key bits
/// starting at key bit i (Microsoft, "RSS hashing functions").
fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let bit = |i: usize| {
        key.get(i / 8)
            .map_or(0, |b| u32::from(b >> (7 - i % 8) & 1))
    };
    let mut win = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    let mut h = 0;
    for (n, byte) in input.iter().enumerate() {
        for j in 0..8 {
            if byte >> (7 - j) & 1 == 1 {
                h ^= win;
            }
            win = win << 1 | bit(n * 8 + j + 32);
        }
    }
    h
}

/// This file's Toeplitz reproduces Microsoft's published table (addresses, and addresses
/// with ports), IPv4 and IPv6.
#[test]
fn the_tests_toeplitz_matches_microsofts_vectors() {
    for (dst, dport, src, sport, h_ip, h_l4) in V4.iter().map(|v| {
        let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().octets().to_vec();
        (ip(v.0), v.1, ip(v.2), v.3, v.4, v.5)
    }) {
        let mut input = [src.as_slice(), dst.as_slice()].concat();
        assert_eq!(toeplitz(&KEY, &input), h_ip);
        input.extend(sport.to_be_bytes());
        input.extend(dport.to_be_bytes());
        assert_eq!(toeplitz(&KEY, &input), h_l4);
    }
    for (dst, dport, src, sport, h_ip, h_l4) in V6.iter().map(|v| {
        let ip = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets().to_vec();
        (ip(v.0), v.1, ip(v.2), v.3, v.4, v.5)
    }) {
        let mut input = [src.as_slice(), dst.as_slice()].concat();
        assert_eq!(toeplitz(&KEY, &input), h_ip);
        input.extend(sport.to_be_bytes());
        input.extend(dport.to_be_bytes());
        assert_eq!(toeplitz(&KEY, &input), h_l4);
    }
}

/// One kind of frame the test sends (several of each, with different ports).
#[derive(Clone, Copy, Debug)]
struct Kind {
    v6: bool,
    /// IP protocol: 17 UDP, 6 TCP.
    proto: u8,
    /// An IPv4 non-first fragment (offset 64 bytes).
    frag: bool,
    bad_ip: bool,
    bad_l4: bool,
    /// 802.1Q TCI of a tag.
    tci: Option<u16>,
}

const fn kind(v6: bool, proto: u8) -> Kind {
    Kind {
        v6,
        proto,
        frag: false,
        bad_ip: false,
        bad_l4: false,
        tci: None,
    }
}

/// The frames of the test: IPv4/IPv6 x UDP/TCP, good and bad checksums, tagged and not, a
/// fragment.
const KINDS: [Kind; 12] = [
    kind(false, 17),
    kind(false, 6),
    kind(true, 17),
    kind(true, 6),
    Kind {
        bad_ip: true,
        ..kind(false, 17)
    },
    Kind {
        bad_l4: true,
        ..kind(false, 17)
    },
    Kind {
        bad_l4: true,
        ..kind(false, 6)
    },
    Kind {
        bad_l4: true,
        ..kind(true, 17)
    },
    Kind {
        tci: Some(0x6064),
        ..kind(false, 17)
    },
    Kind {
        tci: Some(0x0ffe),
        ..kind(true, 6)
    },
    Kind {
        frag: true,
        ..kind(false, 17)
    },
    Kind {
        tci: Some(0x2005),
        bad_l4: true,
        ..kind(false, 6)
    },
];

/// Frames of each kind, back to back (runs a compressing CQ can merge).
const REPEAT: usize = 12;

fn csum(data: &[u8], start: u32) -> u16 {
    let mut sum = start;
    for w in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A sent frame and what DPDK must report for it.
struct Sent {
    frame: Vec<u8>,
    kind: Kind,
    hash: u32,
}

/// Frame `idx` of kind `k`: source MAC 02:00:00:00:idx (the test's key to the frame in
/// testpmd's output), source port 1000 + idx.
fn build(k: Kind, idx: u16) -> Sent {
    let (src, dst): (Vec<u8>, Vec<u8>) = if k.v6 {
        let mut s = vec![0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut d = s.clone();
        s[14] = (idx >> 8) as u8;
        s[15] = idx as u8;
        d[15] = 2;
        (s, d)
    } else {
        (
            vec![198, 18, (idx >> 8) as u8, idx as u8],
            vec![198, 19, 0, 2],
        )
    };
    let (sport, dport) = (1000 + idx, 4789u16);
    let l4_len = if k.proto == 6 { 20 } else { 8 };
    let payload = [0xa5u8; 30];
    let mut l4 = vec![0u8; l4_len];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    if k.proto == 6 {
        l4[12] = 5 << 4;
        l4[13] = 0x18; // PSH, ACK
        l4[14..16].copy_from_slice(&1024u16.to_be_bytes());
    } else {
        l4[4..6].copy_from_slice(&((l4_len + payload.len()) as u16).to_be_bytes());
    }
    l4.extend_from_slice(&payload);
    let mut pseudo = [src.as_slice(), dst.as_slice()].concat();
    pseudo.extend([0, k.proto]);
    pseudo.extend((l4.len() as u16).to_be_bytes());
    let mut sum_in = pseudo;
    sum_in.extend_from_slice(&l4);
    let mut c = csum(&sum_in, 0);
    if k.proto == 17 && c == 0 {
        c = 0xffff;
    }
    if k.bad_l4 {
        c ^= 0x5a5a;
    }
    let at = if k.proto == 6 { 16 } else { 6 };
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());

    let mut f = PORT_MAC.to_vec();
    f.extend([0x02, 0, 0, 0, (idx >> 8) as u8, idx as u8]);
    if let Some(tci) = k.tci {
        f.extend([0x81, 0x00]);
        f.extend(tci.to_be_bytes());
    }
    if k.v6 {
        f.extend([0x86, 0xdd]);
        f.extend([0x60, 0, 0, 0]);
        f.extend((l4.len() as u16).to_be_bytes());
        f.extend([k.proto, 64]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
    } else {
        f.extend([0x08, 0x00]);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&idx.to_be_bytes());
        if k.frag {
            // Offset 64 bytes (8 units), no more fragments: the L4 header is elsewhere.
            ip[6..8].copy_from_slice(&8u16.to_be_bytes());
        }
        ip[8] = 64;
        ip[9] = k.proto;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        let mut c = csum(&ip, 0);
        if k.bad_ip {
            c ^= 0x1234;
        }
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
    }
    f.extend_from_slice(&l4);
    // The hash DPDK configured: addresses, and ports unless a non-first fragment.
    let mut input = [src.as_slice(), dst.as_slice()].concat();
    if !k.frag {
        input.extend(sport.to_be_bytes());
        input.extend(dport.to_be_bytes());
    }
    Sent {
        hash: toeplitz(&KEY, &input),
        frame: f,
        kind: k,
    }
}

/// One packet as testpmd's `set verbose 1` printed it (app/test-pmd/util.c `dump_pkt_burst`).
#[derive(Debug, Default)]
struct Seen {
    queue: u32,
    src: String,
    ethertype: String,
    length: usize,
    rss: Option<u32>,
    vlan_tci: Option<u16>,
    hw_ptype: String,
    ol_flags: String,
}

/// The packets in testpmd's output `text` whose source MAC starts with 02:00:00:00.
fn parse_verbose(text: &str) -> Vec<Seen> {
    let mut out: Vec<Seen> = Vec::new();
    let mut queue = u32::MAX;
    let field = |line: &str, key: &str| -> Option<String> {
        let at = line.find(key)? + key.len();
        Some(
            line[at..]
                .split(" - ")
                .next()
                .unwrap_or("")
                .trim()
                .to_owned(),
        )
    };
    let hex = |s: Option<String>| {
        s.and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    };
    let mut open = false;
    for line in text.lines() {
        // (The first line of a burst may follow testpmd's prompt.)
        if let Some(rest) = line.find("port 0/queue ").map(|at| &line[at + 13..]) {
            queue = rest
                .split(':')
                .next()
                .and_then(|q| q.trim().parse().ok())
                .unwrap_or(u32::MAX);
            open = false;
            continue;
        }
        let l = line.trim_start();
        if l.starts_with("src=") {
            let src = field(l, "src=").unwrap_or_default().to_ascii_lowercase();
            open = src.starts_with("02:00:00:00:");
            if open {
                out.push(Seen {
                    queue,
                    src,
                    ethertype: field(l, "type=").unwrap_or_default(),
                    length: field(l, "length=")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                    rss: hex(field(l, "RSS hash=")),
                    vlan_tci: hex(field(l, "VLAN tci=")).map(|v| v as u16),
                    hw_ptype: field(l, "hw ptype:").unwrap_or_default(),
                    ol_flags: String::new(),
                });
            }
        } else if open && l.starts_with("ol_flags:") {
            if let Some(s) = out.last_mut() {
                s.ol_flags = l.to_owned();
            }
            open = false;
        }
    }
    out
}

/// Every way `seen` differs from what DPDK must report for `sent`. `hash_may_lack`: the
/// configuration's mini-CQEs carry no hash, and DPDK's vector receive then reports none for
/// the entries of a compressed session (drivers/net/mlx5/mlx5_rxtx_vec_sse.h
/// `rxq_cq_decompress_v`: RSS_HASH masked out, `hash.rss = 0`, for any format but HASH).
fn judge(sent: &Sent, seen: &Seen, hash_may_lack: bool) -> Vec<String> {
    let k = sent.kind;
    let mut bad = Vec::new();
    let mut expect = |ok: bool, what: String| {
        if !ok {
            bad.push(what);
        }
    };
    expect(
        seen.rss == Some(sent.hash) || (hash_may_lack && seen.rss.is_none()),
        format!("RSS hash {:x?}, Toeplitz {:#x}", seen.rss, sent.hash),
    );
    expect(
        seen.queue == sent.hash % QUEUES,
        format!("queue {}, RETA slot {}", seen.queue, sent.hash % QUEUES),
    );
    let has = |flags: &str, f: &str| flags.split_whitespace().any(|w| w == f);
    let ptype = &seen.hw_ptype;
    let l3 = if k.v6 {
        "L3_IPV6_EXT_UNKNOWN"
    } else {
        "L3_IPV4_EXT_UNKNOWN"
    };
    let l4 = match (k.frag, k.proto) {
        (true, _) => "L4_FRAG",
        (false, 6) => "L4_TCP",
        _ => "L4_UDP",
    };
    expect(
        has(ptype, "L2_ETHER") && has(ptype, l3) && has(ptype, l4),
        format!("hw ptype {ptype:?}, want L2_ETHER {l3} {l4}"),
    );
    let fl = &seen.ol_flags;
    let ip_good = !k.bad_ip;
    expect(
        has(fl, "RTE_MBUF_F_RX_IP_CKSUM_GOOD") == ip_good,
        format!("IP checksum {} but ol_flags {fl:?}", good(ip_good)),
    );
    let l4_good = !k.bad_l4 && !k.frag;
    expect(
        has(fl, "RTE_MBUF_F_RX_L4_CKSUM_GOOD") == l4_good,
        format!("L4 checksum {} but ol_flags {fl:?}", good(l4_good)),
    );
    expect(
        !has(fl, "RTE_MBUF_F_RX_IP_CKSUM_BAD") && !has(fl, "RTE_MBUF_F_RX_L4_CKSUM_BAD"),
        format!("the mlx5 PMD reports no BAD checksum, yet {fl:?}"),
    );
    let stripped = has(fl, "RTE_MBUF_F_RX_VLAN_STRIPPED");
    expect(
        stripped == k.tci.is_some() && seen.vlan_tci == k.tci,
        format!(
            "VLAN {:x?}: stripped {stripped}, tci {:x?}",
            k.tci, seen.vlan_tci
        ),
    );
    let len = sent.frame.len() - if k.tci.is_some() { 4 } else { 0 };
    expect(
        seen.length == len,
        format!("length {}, want {len}", seen.length),
    );
    let et = if k.v6 { "0x86dd" } else { "0x0800" };
    expect(
        seen.ethertype == et,
        format!("type {}, want {et}", seen.ethertype),
    );
    bad
}

fn good(ok: bool) -> &'static str {
    if ok {
        "good"
    } else {
        "bad (or not checked)"
    }
}

/// One receive configuration.
struct RxConf {
    name: &'static str,
    devargs: &'static str,
    /// The model must have written compressed sessions.
    compressed: bool,
    /// The sessions' mini-CQEs carry the checksum and stride index, not the hash.
    no_hash_minis: bool,
}

const CONFS: [RxConf; 7] = [
    RxConf {
        name: "scalar rx, no compression",
        devargs: "rx_vec_en=0,rxq_cqe_comp_en=0",
        compressed: false,
        no_hash_minis: false,
    },
    RxConf {
        name: "vector rx, no compression",
        devargs: "rx_vec_en=1,rxq_cqe_comp_en=0",
        compressed: false,
        no_hash_minis: false,
    },
    RxConf {
        name: "vector rx, hash mini-CQEs",
        devargs: "rx_vec_en=1,rxq_cqe_comp_en=1",
        compressed: true,
        no_hash_minis: false,
    },
    RxConf {
        name: "scalar rx, hash mini-CQEs",
        devargs: "rx_vec_en=0,rxq_cqe_comp_en=1",
        compressed: true,
        no_hash_minis: false,
    },
    RxConf {
        name: "striding RQ, checksum + stride index mini-CQEs",
        devargs: "mprq_en=1,rxqs_min_mprq=1,rxq_cqe_comp_en=1",
        compressed: true,
        no_hash_minis: true,
    },
    RxConf {
        name: "striding RQ, scalar, no compression",
        devargs: "mprq_en=1,rxqs_min_mprq=1,rx_vec_en=0,rxq_cqe_comp_en=0",
        compressed: false,
        no_hash_minis: false,
    },
    RxConf {
        // DPDK asks for the L3/L4 header mini-CQE only through DevX, which the emulator does
        // not serve: the PMD turns compression off (mlx5_os.c), the model compresses nothing.
        name: "L3/L4 header mini-CQEs (DevX only: compression off)",
        devargs: "rx_vec_en=1,rxq_cqe_comp_en=4",
        compressed: false,
        no_hash_minis: false,
    },
];

/// testpmd (rxonly, RSS over 4 queues under [`KEY`], VLAN strip on, Rx checksum on) on the
/// emulated port whose wire is a veth end; the kernel sends every [`KINDS`] frame from the
/// other end; every frame testpmd prints is judged. Each receive configuration in turn.
#[test]
fn dpdk_decodes_the_models_cqes_in_each_receive_mode() {
    let _one = serial();
    let Some(ns) = netns("dpdkdc") else { return };
    let dir = tempdir("dpdk-decode");
    let mut sent = Vec::new();
    for (k, kind) in KINDS.iter().enumerate() {
        for r in 0..REPEAT {
            sent.push(build(*kind, (k * REPEAT + r) as u16));
        }
    }
    let key_hex: String = KEY.iter().map(|b| format!("{b:02x}")).collect();
    let mut failures = Vec::new();
    for (c, conf) in CONFS.iter().enumerate() {
        let stats = dir.join(format!("stats{c}"));
        let tap = format!("dc{}", std::process::id() % 100_000);
        let mut p = Pmd::start(
            &ns.a,
            &[
                "--wire",
                &ns.veth_a,
                "--netdev",
                &tap,
                "--devargs",
                conf.devargs,
            ],
            &[
                "--forward-mode=rxonly",
                "--rxq=4",
                "--txq=4",
                "--enable-rx-cksum",
            ],
            &stats,
        );
        p.cmd("port stop 0");
        p.cmd("vlan set strip on 0");
        p.cmd("port start 0");
        // RSS under the test's key over addresses and ports, by one rule (the mlx5 PMD expands
        // it into a hash per L3/L4 type: drivers/net/mlx5/mlx5_flow.c `mlx5_flow_expand_rss`).
        // (Not `port config all rss all`: it asks for ESP hashing too, IBV_RX_HASH_IPSEC_SPI,
        // which the emulated device does not hash and refuses.)
        let made = p.cmd(&format!(
            "flow create 0 ingress pattern eth / end actions rss types ipv4 ipv4-tcp ipv4-udp \
             ipv4-frag ipv6 ipv6-tcp ipv6-udp end queues 0 1 2 3 end key {key_hex} / end"
        ));
        assert!(
            made.contains("Flow rule #0 created"),
            "{}: the RSS rule:\n{made}",
            conf.name
        );
        p.cmd("set verbose 1");
        p.cmd("start");
        let frames: Vec<Vec<u8>> = sent.iter().map(|s| s.frame.clone()).collect();
        let veth_b = ns.veth_b.clone();
        let n = ns.run_in(&ns.b, move || kernel_send(&veth_b, &frames));
        assert_eq!(n, sent.len(), "{}", conf.name);
        let s = p.stats_until(0, Duration::from_secs(60), |s, _| {
            s.rx + s.missed >= sent.len() as u64
        });
        assert_eq!(
            (s.rx, s.missed),
            (sent.len() as u64, 0),
            "{}: testpmd must take every frame",
            conf.name
        );
        p.cmd("stop");
        let text = p.quit();
        let log = dir.join(format!("testpmd{c}.log"));
        std::fs::write(&log, &text).expect("write testpmd's output");
        let seen = parse_verbose(&text);
        assert_eq!(
            seen.len(),
            sent.len(),
            "{}: testpmd printed {} of our frames:\n{text}",
            conf.name,
            seen.len()
        );
        for s in &seen {
            let idx = s
                .src
                .rsplit(':')
                .take(2)
                .collect::<Vec<_>>()
                .iter()
                .rev()
                .fold(0usize, |a, b| {
                    a << 8 | usize::from_str_radix(b, 16).unwrap()
                });
            let want = &sent[idx];
            for why in judge(want, s, conf.no_hash_minis) {
                failures.push(format!(
                    "{} ({}): frame {idx} {:?}: {why}",
                    conf.name,
                    log.display(),
                    want.kind
                ));
            }
        }
        let sessions = support::emu::last_counter(&stats, "compressed_sessions")
            .unwrap_or_else(|| panic!("no compressed_sessions in {}", stats.display()));
        if conf.compressed {
            assert!(
                sessions > 0,
                "{}: the model wrote no compressed session, so no mini-CQE was judged",
                conf.name
            );
        } else {
            assert_eq!(sessions, 0, "{}: compression was off", conf.name);
        }
        if conf.devargs.contains("rxq_cqe_comp_en=4") {
            assert!(
                text.contains("L3/L4 Header CQE compression format isn't supported"),
                "{}: the PMD did not say it turned compression off:\n{text}",
                conf.name
            );
        }
        eprintln!(
            "{}: {} frames judged, {sessions} compressed sessions",
            conf.name,
            seen.len()
        );
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
