//! Event-driven receive (`Queue::rx_arm`, `rx_fd`, `rx_wait`): a wait with a timeout returns
//! on time with nothing received, a wait wakes for a frame that arrives while it sleeps, and a
//! backend that cannot notify refuses at once (never a hang).

use rawq_testkit as support;

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

/// A UDP/IPv4 frame to port 9000.
fn udp9000() -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[198, 18, 0, 1]);
    f[30..34].copy_from_slice(&[198, 18, 0, 2]);
    f[34..36].copy_from_slice(&1024u16.to_be_bytes());
    f[36..38].copy_from_slice(&9000u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

/// The device model (looped wire): queue 0 sleeps on the eventfd the device signals when its
/// armed receive CQ gets a CQE; queue 1 sends the frame from another thread once queue 0
/// sleeps.
#[test]
fn model_wait_times_out_empty_then_wakes_for_a_frame() {
    let mut port = Port::builder(Backend::Model(rawq::dv::model::ModelOptions::default()))
        .queues(2)
        .rule("udp dst-port 9000 -> queue 0".parse().unwrap())
        .open()
        .expect("model port");
    let mut qs = port.take_queues();
    let mut q1 = qs.pop().unwrap();
    let mut q0 = qs.pop().unwrap();
    let mut burst = Vec::with_capacity(32);

    let t = Instant::now();
    assert!(!q0.rx_wait(Some(Duration::from_millis(300))).unwrap());
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(q0.rx_burst(&mut burst, 32), 0);

    let tid = gettid();
    let sender = std::thread::spawn(move || {
        until_asleep(tid);
        let mut v = Vec::new();
        q1.alloc_burst(&mut v, 1).unwrap();
        v[0].copy_from_slice(&udp9000()).unwrap();
        while q1.tx_burst(&mut v) == 0 {
            std::thread::yield_now();
        }
        q1
    });
    let t = Instant::now();
    let mut got = 0;
    while got == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never woken");
        if q0.rx_wait(Some(Duration::from_secs(10))).unwrap() {
            got += q0.rx_burst(&mut burst, 32);
        }
    }
    let _q1 = sender.join().unwrap();
    assert_eq!(got, 1);
    assert_eq!(burst[0].data()[36..38], 9000u16.to_be_bytes());
}

/// A port opened with an MTU wraps its queues in the transmit check; the wrapper passes the
/// event-driven receive calls through (it once answered them with the trait's default, "this
/// backend cannot notify").
#[test]
fn a_port_with_an_mtu_still_notifies() {
    let mut port = Port::builder(Backend::Model(rawq::dv::model::ModelOptions::default()))
        .queues(1)
        .mtu(9000)
        .rule("udp dst-port 9000 -> queue 0".parse().unwrap())
        .open()
        .expect("model port with an MTU");
    let q = port.queue(0).unwrap();
    assert!(q.rx_fd().is_ok(), "no fd behind an MTU-checked queue");
    let t = Instant::now();
    assert!(!q.rx_wait(Some(Duration::from_millis(100))).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(100));
}
