//! Rules at run time on AF_XDP (a veth pair in two namespaces the test creates): a rule added
//! while a sequenced UDP flow runs takes every datagram after the switch to its queue and none
//! before it, the kernel socket has the rest; removing it gives the flow back to the kernel;
//! per-rule hit counters equal what each rule took; 1000 add/remove cycles leak no BPF program,
//! link, map or descriptor; bad handles are errors.
#![cfg(feature = "xdp")]

use rawq_testkit as support;

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rawq::flow::Rule;
use rawq::{Error, Queue};

use support::xdp::open_in;
use support::NetnsPair;

/// One test at a time (the binary's lock, held by every test in it): the descriptor census
/// counts the whole process.
use crate::serial;

fn rule(text: &str) -> Rule {
    text.parse().expect("rule")
}

/// `(udp dst port, seq)` of a UDP/IPv4 frame whose payload starts with a BE u32.
fn udp_seq(f: &[u8]) -> Option<(u16, u32)> {
    (f.len() >= 46 && f[12..14] == [8, 0] && f[23] == 17).then(|| {
        (
            u16::from_be_bytes([f[36], f[37]]),
            u32::from_be_bytes([f[42], f[43], f[44], f[45]]),
        )
    })
}

/// Descriptors of this process: all of them, and those that are BPF programs, links and maps.
fn fd_census() -> (usize, usize, usize, usize) {
    let (mut all, mut progs, mut links, mut maps) = (0, 0, 0, 0);
    for e in std::fs::read_dir("/proc/self/fdinfo")
        .expect("fdinfo")
        .flatten()
    {
        all += 1;
        let info = std::fs::read_to_string(e.path()).unwrap_or_default();
        if info.contains("link_type:") {
            links += 1;
        } else if info.contains("prog_type:") {
            progs += 1;
        } else if info.contains("map_type:") {
            maps += 1;
        }
    }
    (all, progs, links, maps)
}

/// Receives on `q` until `stop` (and a quiet moment after it), returning (dst port, seq) of
/// every UDP frame.
fn rawq_receiver(
    mut q: Queue,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<(u16, u32)>, Queue)> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut burst = Vec::with_capacity(64);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut quiet: Option<Instant> = None;
        while Instant::now() < deadline {
            burst.clear();
            let n = q.rx_burst(&mut burst, 64);
            for p in burst.drain(..) {
                if let Some(s) = udp_seq(&p.to_vec()) {
                    got.push(s);
                }
            }
            if n == 0 {
                if stop.load(Ordering::Acquire) {
                    let t = *quiet.get_or_insert_with(Instant::now);
                    if t.elapsed() > Duration::from_millis(300) {
                        break;
                    }
                }
                std::thread::sleep(Duration::from_micros(100));
            } else {
                quiet = None;
            }
        }
        (got, q)
    })
}

/// A kernel UDP socket on `ip:port` in namespace `ns`, draining until `stop` (and a quiet
/// moment after it); returns the seqs received.
fn kernel_receiver(
    p: &NetnsPair,
    port: u16,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<u32>> {
    let ip_b = p.ip_b.clone();
    let s = p.run_in(&p.b, move || {
        let s = UdpSocket::bind((ip_b.as_str(), port)).expect("bind");
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        support::emu::set_rcvbuf(&s, 8 << 20);
        s
    });
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            match s.recv(&mut buf) {
                Ok(n) if n >= 4 => got.push(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]])),
                Ok(_) => {}
                Err(_) if stop.load(Ordering::Acquire) => break,
                Err(_) => {}
            }
        }
        got
    })
}

/// Sends datagrams `0..n` (payload: the BE seq) from A to B's `port`, paced, publishing how
/// many went out in `sent`; waits for `gate(k)` to let frame `k` go.
fn sender(
    p: &NetnsPair,
    port: u16,
    n: u32,
    sent: Arc<AtomicU32>,
    gate: Arc<AtomicU32>,
) -> std::thread::JoinHandle<()> {
    let (ip_a, ip_b, ns) = (p.ip_a.clone(), p.ip_b.clone(), p.a.clone());
    std::thread::spawn(move || {
        support::enter_netns(&format!("/var/run/netns/{ns}"));
        let s = UdpSocket::bind((ip_a.as_str(), 0)).expect("bind");
        let deadline = Instant::now() + Duration::from_secs(60);
        for k in 0..n {
            while gate.load(Ordering::Acquire) <= k && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(50));
            }
            s.send_to(&k.to_be_bytes(), (ip_b.as_str(), port))
                .expect("send");
            sent.store(k + 1, Ordering::Release);
            if k % 16 == 15 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    })
}

#[test]
fn a_rule_added_and_removed_while_a_flow_runs_switches_it_cleanly() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("rrsw") else {
        return;
    };
    // A rule of another flow: the program is attached from the start, so the switches below
    // are program swaps on the link.
    let mut port = open_in(
        &p,
        &p.b,
        &p.veth_b,
        vec![rule("udp dst-port 7777 -> queue 0")],
        2048,
    )
    .expect("open port");
    let stop = Arc::new(AtomicBool::new(false));
    let rx = rawq_receiver(port.take_queues().remove(0), stop.clone());
    let kern = kernel_receiver(&p, 9000, stop.clone());
    const N: u32 = 3000;
    const ADD: u32 = 1000;
    const REMOVE: u32 = 2000;
    let (sent, gate) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(N)));
    let tx = sender(&p, 9000, N, sent.clone(), gate.clone());
    let wait_sent = |k: u32| {
        let end = Instant::now() + Duration::from_secs(30);
        while sent.load(Ordering::Acquire) < k && Instant::now() < end {
            std::thread::sleep(Duration::from_micros(100));
        }
        assert!(sent.load(Ordering::Acquire) >= k, "the sender stalled");
    };
    // Added and removed while the flow runs (datagrams in flight on either side of each).
    wait_sent(ADD);
    let at_add = sent.load(Ordering::Acquire);
    let h = port
        .add_rule(rule("udp dst-port 9000 -> queue 0"))
        .expect("add");
    let after_add = sent.load(Ordering::Acquire);
    wait_sent(REMOVE);
    let hits = port.rule_hits(h).expect("hits").expect("AF_XDP counts");
    let at_remove = sent.load(Ordering::Acquire);
    port.remove_rule(h).expect("remove");
    let after_remove = sent.load(Ordering::Acquire);
    tx.join().expect("sender");
    stop.store(true, Ordering::Release);
    let (got, _q) = rx.join().expect("rawq receiver");
    let kern = kern.join().expect("kernel receiver");

    let rawq: Vec<u32> = got
        .iter()
        .filter(|(d, _)| *d == 9000)
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(
        rawq.len() + kern.len(),
        N as usize,
        "every datagram arrives once: rawq {}, kernel {}",
        rawq.len(),
        kern.len()
    );
    let a = *rawq.first().expect("the added rule took datagrams");
    let b = a + rawq.len() as u32;
    assert_eq!(rawq, (a..b).collect::<Vec<_>>(), "rawq: one unbroken run");
    let mut k = kern.clone();
    k.sort_unstable();
    assert_eq!(
        k,
        (0..a).chain(b..N).collect::<Vec<_>>(),
        "the kernel: the rest"
    );
    // Every datagram sent after add_rule returned is the rule's, every one sent after
    // remove_rule returned the kernel's; the switches lie where the calls were.
    eprintln!("add between {at_add} and {after_add}: switch at {a}; remove between {at_remove} and {after_remove}: switch at {b}");
    assert!(a <= after_add, "switch at {a}, add returned at {after_add}");
    assert!(
        b <= after_remove && b >= a,
        "switch back at {b}, remove returned at {after_remove}"
    );
    assert!(
        hits <= rawq.len() as u64,
        "hits {hits} read before the removal; the rule took {}",
        rawq.len()
    );
}

#[test]
fn per_rule_counters_equal_what_each_rule_took() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("rrct") else {
        return;
    };
    let mut port = open_in(&p, &p.b, &p.veth_b, vec![], 2048).expect("open port");
    let stop = Arc::new(AtomicBool::new(false));
    let rx = rawq_receiver(port.take_queues().remove(0), stop.clone());
    let kern = kernel_receiver(&p, 9003, stop.clone());
    // The first rule attaches the program (the port had none).
    let r1 = port
        .add_rule(rule("udp dst-port 9001 -> queue 0"))
        .expect("add 1");
    let r2 = port
        .add_rule(rule("udp dst-port 9002 -> queue 0"))
        .expect("add 2");
    let r3 = port
        .add_rule(rule("udp dst-port 9003 -> drop"))
        .expect("add 3");
    let counts = [(9001u16, 300u32), (9002, 200), (9003, 100)];
    for (dport, n) in counts {
        let all = Arc::new(AtomicU32::new(n));
        sender(&p, dport, n, Arc::new(AtomicU32::new(0)), all)
            .join()
            .expect("sender");
    }
    stop.store(true, Ordering::Release);
    let (got, _q) = rx.join().expect("rawq receiver");
    let kern = kern.join().expect("kernel receiver");
    let took = |d: u16| got.iter().filter(|(p, _)| *p == d).count() as u64;
    assert_eq!((took(9001), took(9002)), (300, 200), "rawq received");
    assert!(kern.is_empty(), "the drop rule let {} through", kern.len());
    assert_eq!(port.rule_hits(r1).unwrap(), Some(took(9001)));
    assert_eq!(port.rule_hits(r2).unwrap(), Some(took(9002)));
    assert_eq!(
        port.rule_hits(r3).unwrap(),
        Some(100),
        "the drop rule's hits"
    );
    // A slot reused by a new rule starts from zero.
    port.remove_rule(r2).expect("remove");
    let r4 = port
        .add_rule(rule("udp dst-port 9004 -> queue 0"))
        .expect("add 4");
    assert_eq!(port.rule_hits(r4).unwrap(), Some(0));
    assert_eq!(port.rule_hits(r1).unwrap(), Some(300));
}

#[test]
fn a_thousand_add_remove_cycles_leak_nothing_and_the_last_removal_detaches() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("rrlk") else {
        return;
    };
    let dev = p.veth_b.clone();
    let port = open_in(
        &p,
        &p.b,
        &p.veth_b,
        vec![rule("udp dst-port 7777 -> queue 0")],
        256,
    )
    .expect("open port");
    // In B's namespace: attaching a program (the no-rules port below) names the interface
    // by its index there.
    let leaked = p.run_in(&p.b, move || {
        let mut port = port;
        let before = fd_census();
        for i in 0..1000u32 {
            let h = port
                .add_rule(rule(&format!("udp dst-port {} -> queue 0", 9000 + i % 50)))
                .expect("add");
            port.remove_rule(h).expect("remove");
        }
        let after_swaps = fd_census();
        drop(port);
        // A port without rules: its first rule attaches, its last removal detaches.
        let mut bare = rawq::Port::builder(rawq::Backend::Xdp {
            ifname: dev.clone(),
        })
        .rx_ring(256)
        .tx_ring(256)
        .open()
        .expect("open");
        let before_bare = fd_census();
        for i in 0..200u32 {
            let h = bare
                .add_rule(rule(&format!("udp dst-port {} -> queue 0", 9000 + i % 50)))
                .expect("add");
            assert!(rawq::xdp::iface::attached_prog_id(&dev).unwrap().is_some());
            bare.remove_rule(h).expect("remove");
            assert_eq!(
                rawq::xdp::iface::attached_prog_id(&dev).unwrap(),
                None,
                "detached"
            );
        }
        (before, after_swaps, before_bare, fd_census())
    });
    let (before, after_swaps, before_bare, after_bare) = leaked;
    assert_eq!(
        before, after_swaps,
        "(fds, programs, links, maps) over 1000 swaps"
    );
    assert_eq!(
        before_bare, after_bare,
        "(fds, programs, links, maps) over 200 attaches"
    );
    assert!(
        before.1 >= 1 && before.2 == 1,
        "the census sees the port's program and link: {before:?}"
    );
}

#[test]
fn bad_handles_and_bad_rules_are_errors() {
    let _serial = serial();
    let Some(p) = NetnsPair::new("rrbd") else {
        return;
    };
    let mut a = open_in(
        &p,
        &p.b,
        &p.veth_b,
        vec![rule("udp dst-port 7777 -> queue 0")],
        256,
    )
    .expect("open a");
    let mut b = rawq::Port::builder(rawq::Backend::Loopback)
        .open()
        .expect("loopback");
    let h = a
        .add_rule(rule("udp dst-port 9000 -> queue 0"))
        .expect("add");
    match b.remove_rule(h) {
        Err(Error::RuleHandle(m)) => assert!(m.contains("another port"), "{m}"),
        other => panic!("foreign handle: {other:?}"),
    }
    a.remove_rule(h).expect("remove");
    match a.remove_rule(h) {
        Err(Error::RuleHandle(m)) => assert!(m.contains("already removed"), "{m}"),
        other => panic!("second removal: {other:?}"),
    }
    let e = a
        .add_rule(rule("udp dst-port 9000 -> queue 1"))
        .expect_err("queue 1 of 1");
    assert!(matches!(e, Error::Rule(_)), "{e:?}");
    let e = b
        .add_rule(rule("udp dst-port 9000 -> queue 0"))
        .expect_err("loopback has no steering");
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
}
