//! `flow::verbs::compile` against rdma-core's own structs: tests/c/flow_oracle.c includes
//! <infiniband/verbs.h>, builds the same `ibv_flow_attr` + specs for each rule independently, and
//! prints them in hex; the bytes must be equal.
//!
//! Needs a C compiler (`cc`) and the rdma-core headers (libibverbs-dev); it fails with a clear
//! message if either is missing.

use rawq_testkit as support;

use std::fmt::Write as _;
use std::path::PathBuf;

use rawq::flow::verbs::{compile, compile_tagged};
use rawq::flow::{IpMatch, L4Proto, MacMatch, Rule};

/// The oracle's input line for `rule` (see the format in flow_oracle.c).
fn oracle_line(rule: &Rule, port: u8) -> String {
    oracle_line_tagged(rule, port, None)
}

/// As [`oracle_line`], with a flow tag.
fn oracle_line_tagged(rule: &Rule, port: u8, tag: Option<u32>) -> String {
    let p = &rule.pattern;
    let mut s = format!("prio={} port={}", rule.priority, port);
    if let Some(t) = tag {
        write!(s, " tag={t}").unwrap();
    }
    let mac = |m: &MacMatch| {
        let h = |a: &[u8; 6]| {
            a.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        format!("{}/{}", h(&m.addr), h(&m.mask))
    };
    if let Some(m) = &p.dst_mac {
        write!(s, " dmac={}", mac(m)).unwrap();
    }
    if let Some(m) = &p.src_mac {
        write!(s, " smac={}", mac(m)).unwrap();
    }
    if let Some(v) = p.vlan {
        write!(s, " vlan={v}").unwrap();
    }
    if let Some(et) = p.ethertype {
        write!(s, " ethertype={et}").unwrap();
    }
    match p.ip {
        Some(IpMatch::V4 { src, dst }) => {
            s.push_str(" ip=4");
            if let Some(n) = src {
                write!(s, " src={}/{}", n.addr, n.prefix).unwrap();
            }
            if let Some(n) = dst {
                write!(s, " dst={}/{}", n.addr, n.prefix).unwrap();
            }
        }
        Some(IpMatch::V6 { src, dst }) => {
            s.push_str(" ip=6");
            if let Some(n) = src {
                write!(s, " src={}/{}", n.addr, n.prefix).unwrap();
            }
            if let Some(n) = dst {
                write!(s, " dst={}/{}", n.addr, n.prefix).unwrap();
            }
        }
        None => {}
    }
    if let Some(proto) = p.ip_proto {
        write!(s, " proto={proto}").unwrap();
    }
    if let Some(l4) = p.l4 {
        let name = match l4.proto {
            L4Proto::Udp => "udp",
            L4Proto::Tcp => "tcp",
        };
        write!(s, " l4={name}").unwrap();
        if let Some(sp) = l4.src_port {
            write!(s, " sport={sp}").unwrap();
        }
        if let Some(dp) = l4.dst_port {
            write!(s, " dport={dp}").unwrap();
        }
    }
    let action = match rule.action {
        rawq::flow::Action::Drop => "drop",
        rawq::flow::Action::Queue(_) => "queue",
        rawq::flow::Action::Rss(_) => "rss",
    };
    write!(s, " action={action}").unwrap();
    s
}

/// Builds the oracle once per test run (the tests share it).
fn build_oracle() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(compile_oracle).clone()
}

fn compile_oracle() -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/flow_oracle.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("flow_oracle");
    support::cc::compile(&src, &out, &["-Wall", "-Wextra", "-Werror", "-std=gnu11"])
}

const CASES: &[&str] = &[
    "udp dst-port 9000 -> queue 1",
    "prio 10 eth dst 02:00:00:00:00:01 vlan 5 ipv4 src 10.0.0.0/24 dst 10.0.0.2 udp src-port 5 \
     dst-port 9000 -> queue 1",
    "udp dst-port 9000 ipv4 dst 10.0.0.0/24 -> queue 1",
    "tcp dst-port 80 -> rss 0,1,2,3",
    "tcp src-port 443 dst-port 50000 -> queue 2",
    "ethertype 0x88f7 -> drop",
    "promiscuous -> queue 0",
    "eth dst 01:00:5e:00:00:00/ff:ff:ff:80:00:00 -> queue 0",
    "eth dst 01:00:5e:01:02:03 udp dst-port 5000 -> drop",
    "eth dst 33:33:00:00:00:01 ipv6 -> queue 3",
    "eth src 02:aa:bb:cc:dd:ee/ff:ff:ff:00:00:00 -> queue 0",
    "eth dst ff:ff:ff:ff:ff:ff src 02:00:00:00:00:09 ethertype 0x0806 -> queue 1",
    "vlan 4095 -> queue 0",
    "vlan 0 ipv4 -> queue 0",
    "ipv4 src 192.168.77.1/20 -> queue 0",
    "ipv4 dst 198.51.100.7 proto 1 -> queue 0",
    "ipv4 src 0.0.0.0/0 dst 203.0.113.255/31 proto 17 -> queue 1",
    "ipv6 src 2001:db8::/32 -> queue 0",
    "ipv6 src 2001:db8:1:2:3:4:5:6/67 dst fe80::1 tcp dst-port 22 -> rss 1,0",
    "ipv6 dst ff02::1:ff00:1/104 proto 58 -> queue 0",
    "ethertype 0x86dd proto 47 -> queue 0",
    "ethertype 0x0800 proto 132 -> drop",
    "proto 6 -> queue 0",
    "proto 17 vlan 100 -> drop",
    "prio 15 ipv4 udp src-port 0 -> queue 0",
    "prio 3 eth dst 02:00:00:00:00:01 src 02:00:00:00:00:02 vlan 7 ipv6 src ::1 dst ::2 udp \
     src-port 1 dst-port 2 -> drop",
];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn compile_equals_rdma_core_structs() {
    let oracle = build_oracle();
    let mut input = String::new();
    let mut ours = Vec::new();
    for (i, text) in CASES.iter().enumerate() {
        let rule: Rule = text
            .parse()
            .unwrap_or_else(|e| panic!("case {text:?}: {e}"));
        // Vary the port too.
        let port = 1 + (i % 2) as u8;
        let c = compile(&rule, port).unwrap_or_else(|e| panic!("case {text:?}: {e}"));
        input.push_str(&oracle_line(&rule, port));
        input.push('\n');
        ours.push(hex(&c.bytes));
    }
    let text = support::cc::run(&oracle, &input);
    let theirs: Vec<&str> = text.lines().collect();
    assert_eq!(theirs.len(), CASES.len(), "one line per case:\n{text}");
    let mut bad = Vec::new();
    for ((case, line), (o, t)) in CASES
        .iter()
        .zip(input.lines())
        .zip(ours.iter().zip(&theirs))
    {
        if o != t {
            bad.push(format!(
                "{case}\n  oracle input: {line}\n  rawq:   {o}\n  oracle: {t}"
            ));
        }
    }
    assert!(bad.is_empty(), "mismatches:\n{}", bad.join("\n"));
}

/// Rules carrying a flow tag (`ibv_flow_spec_action_tag`, what the DV backend adds so that
/// each CQE reports the rule that steered it: rule index + 1): the same bytes as rdma-core's
/// struct, the tag spec after the filters; a drop rule carries none (its frames make no CQE).
#[test]
fn tagged_rules_equal_rdma_core_structs() {
    let oracle = build_oracle();
    let mut input = String::new();
    let mut ours = Vec::new();
    for (i, text) in CASES.iter().enumerate() {
        let rule: Rule = text.parse().unwrap();
        let port = 1 + (i % 2) as u8;
        let tag = [1u32, 7, 0x00ff_ffff][i % 3];
        let c = compile_tagged(&rule, port, Some(tag)).unwrap();
        let plain = compile(&rule, port).unwrap();
        if rule.action == rawq::flow::Action::Drop {
            assert_eq!(c, plain, "{text}: no tag on a drop rule");
        } else {
            assert_eq!(c.bytes.len(), plain.bytes.len() + 12, "{text}");
        }
        input.push_str(&oracle_line_tagged(&rule, port, Some(tag)));
        input.push('\n');
        ours.push(hex(&c.bytes));
    }
    let text = support::cc::run(&oracle, &input);
    let theirs: Vec<&str> = text.lines().collect();
    assert_eq!(theirs.len(), CASES.len(), "one line per case:\n{text}");
    for ((case, o), t) in CASES.iter().zip(&ours).zip(&theirs) {
        assert_eq!(o, t, "{case}");
    }
    // The device carries 24 bits of tag.
    let rule: Rule = CASES[0].parse().unwrap();
    assert!(compile_tagged(&rule, 1, Some(1 << 24)).is_err());
}

#[test]
fn protocol_without_ip_version_is_refused_by_both() {
    let oracle = build_oracle();
    let rule: Rule = "proto 47 -> queue 0".parse().unwrap();
    assert!(compile(&rule, 1).is_err());
    let out = support::cc::run(&oracle, &format!("{}\n", oracle_line(&rule, 1)));
    assert!(out.starts_with("error"), "{out}");
}
