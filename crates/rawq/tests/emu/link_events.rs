//! Link state and link events (`Port::link`, `Port::link_events`): a veth end set down and up,
//! and deleted, on AF_XDP; the emulated NIC's wire (a veth end) set down and up under dv and
//! verbs, where rawq reads IBV_EVENT_PORT_ERR then IBV_EVENT_PORT_ACTIVE.

use rawq_testkit as support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rawq::{Backend, Error, LinkEvent, LinkEvents, Port};

use support::NetnsPair;

/// The next event, waiting up to 20 s for it.
fn next(ev: &mut LinkEvents) -> LinkEvent {
    ev.next_event(Some(Duration::from_secs(20)))
        .expect("reading link events")
        .expect("no link event within 20 s")
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(feature = "xdp")]
#[test]
fn xdp_link_down_up_then_gone_and_waiting_after_returns_the_link_error() {
    let Some(ns) = NetnsPair::new("lnkx") else {
        return;
    };
    let (b, va, vb) = (ns.b.clone(), ns.veth_a.clone(), ns.veth_b.clone());
    let a = ns.a.clone();
    let mac = ns.mac(&ns.a, &ns.veth_a);
    ns.run_in(&ns.a, move || {
        let port = Port::builder(Backend::Xdp { ifname: va.clone() })
            .open()
            .expect("open the xdp port");
        let l = port.link().expect("link state");
        assert!(l.carrier, "{l:?}");
        assert_eq!(l.ifname.as_deref(), Some(va.as_str()));
        assert_eq!(l.mtu, Some(1500));
        assert_eq!(l.mac, Some(mac));
        let mut ev = port.link_events().expect("link events");
        assert_eq!(
            ev.next_event(Some(Duration::from_millis(50))).unwrap(),
            None,
            "nothing happened yet"
        );

        // The peer down: this end loses its carrier (IF_OPER_LOWERLAYERDOWN).
        ip(&["-n", &b, "link", "set", &vb, "down"]);
        assert_eq!(next(&mut ev), LinkEvent::LinkDown);
        let l = port.link().expect("link state");
        assert!(!l.carrier && l.admin_up == Some(true), "{l:?}");
        ip(&["-n", &b, "link", "set", &vb, "up"]);
        assert_eq!(next(&mut ev), LinkEvent::LinkUp);
        assert!(port.link().expect("link state").carrier);

        // This end set down administratively: down again, then up.
        ip(&["-n", &a, "link", "set", &va, "down"]);
        assert_eq!(next(&mut ev), LinkEvent::LinkDown);
        assert_eq!(port.link().unwrap().admin_up, Some(false));
        ip(&["-n", &a, "link", "set", &va, "up"]);
        assert_eq!(next(&mut ev), LinkEvent::LinkUp);

        // Deleted: gone, and from then on waiting returns the link error (never hangs).
        // (The kernel closes an interface before it unregisters it: RTM_NEWLINK down, then
        // RTM_DELLINK.)
        ip(&["-n", &a, "link", "del", &va]);
        let mut e = next(&mut ev);
        if e == LinkEvent::LinkDown {
            e = next(&mut ev);
        }
        assert_eq!(e, LinkEvent::InterfaceGone);
        let t = Instant::now();
        match ev.next_event(None) {
            Err(Error::Link { ifname, detail }) => {
                assert_eq!(ifname, va);
                assert!(detail.contains("gone"), "{detail}");
            }
            other => panic!("waiting on a dead link: {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(matches!(port.link(), Err(Error::Link { .. })));
        assert!(matches!(port.link_events(), Err(Error::Link { .. })));
    });
}

#[test]
fn loopback_link_is_up_and_never_changes() {
    let port = Port::builder(Backend::Loopback).open().unwrap();
    let l = port.link().unwrap();
    assert!(l.carrier && l.ifname.is_none(), "{l:?}");
    let mut ev = port.link_events().unwrap();
    assert_eq!(
        ev.next_event(Some(Duration::from_millis(20))).unwrap(),
        None
    );
}

/// Set for the inner test by its outer test: the backend (dv or verbs).
#[cfg(feature = "mlx5")]
const INNER: &str = "RAWQ_LINK_INNER";
/// Where the inner test says how far it got.
#[cfg(feature = "mlx5")]
const STEP: &str = "RAWQ_LINK_STEP";

/// Waits (bounded) until the inner test wrote `what` to `file`; false if it ended first or
/// never got there.
#[cfg(feature = "mlx5")]
fn wait_step(file: &Path, what: &str, child: &mut std::process::Child) -> bool {
    let end = Instant::now() + Duration::from_secs(90);
    while Instant::now() < end {
        if std::fs::read_to_string(file).is_ok_and(|t| t.trim() == what) {
            return true;
        }
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The emulated NIC's wire (a veth end) set down then up: the inner test, running `backend`
/// on the emulated NIC, reads PORT_ERR then PORT_ACTIVE and sees `ibv_query_port` follow.
#[cfg(feature = "mlx5")]
fn emu_wire_down_then_up(backend: &str) {
    let _one = support::emu::serial();
    let Some(ns) = NetnsPair::new("lnke") else {
        return;
    };
    let dir = support::emu::tempdir(&format!("link-{backend}"));
    let step = dir.join("step");
    let stats = dir.join("model.stats");
    let exe = std::env::current_exe().unwrap();
    let mut c = support::emu::emu_sh(
        Some((&ns.a, &ns.veth_a)),
        Some(120),
        &[],
        &[
            exe.to_str().unwrap(),
            "--exact",
            support::test_name(module_path!(), "inner_link_events").as_str(),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ],
        &stats,
    );
    c.env(INNER, backend)
        .env(STEP, &step)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("run scripts/emu.sh");
    let mut reached = wait_step(&step, "ready", &mut child);
    if reached {
        ip(&["-n", &ns.b, "link", "set", &ns.veth_b, "down"]);
        reached = wait_step(&step, "down", &mut child);
        ip(&["-n", &ns.b, "link", "set", &ns.veth_b, "up"]);
    }
    let out = support::emu::wait_for(child, Duration::from_secs(60));
    let all = support::emu::text(&out);
    assert!(reached, "the inner test stopped early:\n{all}");
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("1 passed"),
        "the inner test did not run:\n{all}"
    );
    assert!(all.contains("PORT_ERR then PORT_ACTIVE"), "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_dv_wire_down_then_up_is_port_err_then_port_active() {
    emu_wire_down_then_up("dv");
}

#[cfg(feature = "mlx5")]
#[test]
fn emu_verbs_wire_down_then_up_is_port_err_then_port_active() {
    emu_wire_down_then_up("verbs");
}

#[cfg(feature = "mlx5")]
#[test]
#[ignore = "run by its outer test under scripts/emu.sh"]
fn inner_link_events() {
    let kind = std::env::var(INNER).expect("run by its outer test, not alone");
    let step = std::env::var(STEP).expect("step file");
    let port = Port::builder(Backend::named(&kind, "mlx5_0", 1).unwrap())
        .open()
        .expect("open the port on the emulated NIC");
    let l = port.link().expect("link state");
    assert!(l.carrier && l.oper_state == "active", "{l:?}");
    // The emulated port: EDR 4X (caps.rs), on the wire's veth (MTU 1500).
    assert_eq!(l.speed_mbps, Some(100_000), "{l:?}");
    assert_eq!(l.mtu, Some(1500), "{l:?}");
    let mut ev = port.link_events().expect("link events");
    std::fs::write(&step, "ready").unwrap();
    assert_eq!(next(&mut ev), LinkEvent::LinkDown);
    let l = port.link().expect("link state");
    assert!(!l.carrier && l.oper_state == "down", "{l:?}");
    std::fs::write(&step, "down").unwrap();
    assert_eq!(next(&mut ev), LinkEvent::LinkUp);
    assert!(port.link().expect("link state").carrier);
    println!("{kind}: PORT_ERR then PORT_ACTIVE");
}
