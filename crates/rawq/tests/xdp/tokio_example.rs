//! examples/xdp_tokio: a steered UDP flow on a veth received through tokio's `AsyncFd` on the
//! queue's notification fd; the example exits on its own once it has every frame.
#![cfg(feature = "xdp")]

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
