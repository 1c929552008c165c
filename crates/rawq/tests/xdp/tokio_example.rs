//! examples/xdp_tokio: a steered UDP flow on a veth received through the tokio adapter
//! (`rawq::adapters::tokio::AsyncQueue`, the queue's notification fd in tokio's `AsyncFd`); the
//! example exits on its own once it has every frame, and spends no CPU while none comes.
#![cfg(all(feature = "xdp", feature = "tokio"))]

use rawq_testkit as support;

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::NetnsPair;

#[test]
fn tokio_receives_a_steered_flow_and_exits() {
    let Some(p) = NetnsPair::new("tokio") else {
        return;
    };
    let n = 200;
    let mut rx = Command::new("ip")
        .args(["netns", "exec", &p.b])
        .arg(support::example("xdp_tokio"))
        .args([
            "--dev",
            &p.veth_b,
            "--port",
            "9000",
            "--count",
            &n.to_string(),
        ])
        .args(["--timeout", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(rx.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the example did not open its port");
    let ip_b = p.ip_b.clone();
    p.run_in(&p.a.clone(), move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..n {
            s.send_to(format!("frame {i}").as_bytes(), (ip_b.as_str(), 9000))
                .unwrap();
            // A paced sender (200 datagrams over about 0.2 s): the task sleeps between them.
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let status = support::emu::wait_for(rx, Duration::from_secs(40));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(
        status.status.success(),
        "xdp_tokio: {rest} {}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(rest.trim(), format!("received {n}"));
}

/// CPU time (ns) the threads of process `pid` have run: the first field of each
/// `/proc/PID/task/TID/schedstat` (the scheduler's own account, in ns).
fn cpu_ns(pid: u32) -> u64 {
    let mut sum = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the example's threads") {
        let path = t.unwrap().path().join("schedstat");
        if let Ok(text) = std::fs::read_to_string(path) {
            sum += text
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
    }
    sum
}

/// This thread's CPU time (ns), by the same account.
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// `n` datagrams to b's UDP port 9000 from host a, 1 ms apart.
fn send_from_a(p: &NetnsPair, n: u32) {
    let ip_b = p.ip_b.clone();
    p.run_in(&p.a.clone(), move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..n {
            s.send_to(format!("frame {i}").as_bytes(), (ip_b.as_str(), 9000))
                .unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// The tokio adapter receives N of N frames, and while none is sent it sleeps: over a measured
/// second of silence the example's CPU time stays under 50 ms, and under a fifth of what a
/// thread of this test spinning through the same second gets (a receive loop that polls
/// instead, rawq's `RxMode::Poll` or the adapter without its sleep, gets as much as that
/// thread: the whole second on an idle machine, some hundreds of ms on a loaded one).
#[test]
fn the_tokio_adapter_receives_n_of_n_and_sleeps_while_idle() {
    let Some(p) = NetnsPair::new("tkidle") else {
        return;
    };
    let (first, second) = (100u32, 100u32);
    let n = first + second;
    let mut rx = Command::new("ip")
        .args(["netns", "exec", &p.b])
        .arg(support::example("xdp_tokio"))
        .args(["--dev", &p.veth_b, "--port", "9000"])
        .args([
            "--count",
            &n.to_string(),
            "--idle-after",
            &first.to_string(),
        ])
        .args(["--timeout", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `ip netns exec` execs the example: the child's pid is the example's.
    let pid = rx.id();
    let mut out = BufReader::new(rx.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the example did not open its port");
    send_from_a(&p, first);
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "idle",
        "the example did not get the first {first} frames"
    );
    // Nothing is sent now: the example waits in the adapter, while this thread spins (the
    // control: what a polling loop gets of the machine in the same second).
    let (c0, t0, w0) = (cpu_ns(pid), thread_cpu_ns(), std::time::Instant::now());
    while w0.elapsed() < Duration::from_secs(1) {
        std::hint::spin_loop();
    }
    let (idle_ns, spun_ns, wall) = (cpu_ns(pid) - c0, thread_cpu_ns() - t0, w0.elapsed());
    assert!(
        idle_ns < 50_000_000 && idle_ns * 5 < spun_ns,
        "the example ran {} ms of CPU in {} ms of silence, a spinning thread {} ms: it polls \
         instead of sleeping",
        idle_ns / 1_000_000,
        wall.as_millis(),
        spun_ns / 1_000_000
    );
    send_from_a(&p, second);
    let status = support::emu::wait_for(rx, Duration::from_secs(40));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(
        status.status.success(),
        "xdp_tokio: {rest} {}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(rest.trim(), format!("received {n}"));
    eprintln!(
        "idle: {} us of CPU over {} ms (a spinning thread: {} ms)",
        idle_ns / 1000,
        wall.as_millis(),
        spun_ns / 1_000_000
    );
}
