//! Event-driven receive (`Queue::rx_arm`, `rx_fd`, `rx_wait`): a wait with a timeout returns
//! on time with nothing received, a wait wakes for a frame that arrives while it sleeps, and a
//! backend that cannot notify refuses at once (never a hang).

mod support;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rawq::{Backend, Error, Port};
use support::xdp::{open_in, udp_dst};
use support::NetnsPair;

/// The scheduler state of thread `tid` of this process (`S`: asleep in the kernel).
fn thread_state(tid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The state follows the command name's closing parenthesis.
    s[s.rfind(')')? + 1..].trim_start().chars().next()
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Waits until thread `tid` sleeps in the kernel (it is then inside poll).
fn until_asleep(tid: i32) {
    let end = Instant::now() + Duration::from_secs(10);
    while thread_state(tid) != Some('S') {
        assert!(
            Instant::now() < end,
            "the waiting thread never went to sleep"
        );
        std::thread::yield_now();
    }
}

#[test]
fn loopback_cannot_notify_and_says_so_at_arm_time() {
    let mut port = Port::builder(Backend::Loopback).open().expect("loopback");
    let mut q = port.take_queues().remove(0);
    let t = Instant::now();
    let e = q.rx_arm().unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("queue 0"), "{e}");
    let e = q.rx_wait(None).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(q.rx_fd().is_err());
    assert!(t.elapsed() < Duration::from_secs(1), "refused at once");
}

#[test]
fn xdp_wait_times_out_empty_then_wakes_for_a_frame() {
    let Some(p) = NetnsPair::new("rxwait") else {
        return;
    };
    let mut port = open_in(&p, &p.b, &p.veth_b, vec![udp_dst(9000)], 256).expect("open port");
    let mut q = port.take_queues().remove(0);
    let mut burst = Vec::with_capacity(32);

    // Nothing sent: the wait ends on its timeout, with nothing received.
    let t = Instant::now();
    assert!(!q.rx_wait(Some(Duration::from_millis(300))).unwrap());
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(q.rx_burst(&mut burst, 32), 0);

    // A frame sent while the queue sleeps wakes it.
    let tid = gettid();
    let (ns, ip_a, ip_b) = (p.a.clone(), p.ip_a.clone(), p.ip_b.clone());
    let sender = std::thread::spawn(move || {
        until_asleep(tid);
        support::enter_netns(&format!("/var/run/netns/{ns}"));
        let s = UdpSocket::bind((ip_a.as_str(), 0)).unwrap();
        s.send_to(b"wake up", (ip_b.as_str(), 9000)).unwrap();
    });
    let t = Instant::now();
    let mut got = 0;
    while got == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never woken");
        if q.rx_wait(Some(Duration::from_secs(10))).unwrap() {
            got += q.rx_burst(&mut burst, 32);
        }
    }
    sender.join().unwrap();
    assert_eq!(got, 1);
    assert!(burst[0].data().ends_with(b"wake up"));
    // The descriptor is the socket's own.
    assert!(q.rx_fd().is_ok());
}
