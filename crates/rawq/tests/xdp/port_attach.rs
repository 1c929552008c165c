//! AF_XDP ports and their XDP program on a veth pair between two throwaway namespaces: the
//! program goes with the port (dropped or killed), a second port or another tool's program is
//! refused and left alone, and bad configurations are errors that say why and attach nothing.

use rawq_testkit as support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use rawq::{Backend, Error, Port};
use support::xdp::{link_show, open_in, udp_dst};
use support::NetnsPair;

#[test]
fn dropping_the_port_detaches_the_program() {
    let Some(p) = NetnsPair::new("xdrop") else {
        return;
    };
    let port = open_in(&p, &p.b, &p.veth_b, vec![udp_dst(9000)], 64).expect("open port");
    let shown = link_show(&p, &p.b, &p.veth_b);
    assert!(
        shown.contains("prog/xdp"),
        "attached while the port lives: {shown}"
    );
    let dev = p.veth_b.clone();
    let id = p.run_in(&p.b, move || {
        rawq::xdp::iface::attached_prog_id(&dev).unwrap()
    });
    assert!(id.is_some());
    drop(port);
    let shown = link_show(&p, &p.b, &p.veth_b);
    assert!(!shown.contains("prog/xdp"), "detached after drop: {shown}");
    let dev = p.veth_b.clone();
    let id = p.run_in(&p.b, move || {
        rawq::xdp::iface::attached_prog_id(&dev).unwrap()
    });
    assert_eq!(id, None);
}

#[test]
fn a_second_port_on_the_same_interface_is_refused_with_the_id() {
    let Some(p) = NetnsPair::new("xtwice") else {
        return;
    };
    let first = open_in(&p, &p.b, &p.veth_b, vec![udp_dst(9000)], 64).expect("open port");
    let dev = p.veth_b.clone();
    let id = p
        .run_in(&p.b, move || {
            rawq::xdp::iface::attached_prog_id(&dev).unwrap()
        })
        .expect("a program is attached");
    match open_in(&p, &p.b, &p.veth_b, vec![udp_dst(9001)], 64) {
        Err(e @ Error::XdpAlreadyAttached { .. }) => {
            let msg = e.to_string();
            let Error::XdpAlreadyAttached {
                ifname,
                prog_id,
                held_by,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(ifname, p.veth_b);
            assert_eq!(prog_id, id);
            assert!(msg.contains(&id.to_string()), "{msg}");
            // Issue 12 item 15: the program is rawq's own, attached through a BPF link this
            // process holds; `ip link set dev X xdp off` would fail, so it is not offered.
            let me = format!("{} (", std::process::id());
            assert!(held_by.is_some_and(|h| h.starts_with(&me)), "{msg}");
            assert!(!msg.contains("xdp off` if"), "{msg}");
        }
        other => panic!("expected XdpAlreadyAttached, got {other:?}"),
    }
    // The first port's program is untouched.
    let dev = p.veth_b.clone();
    assert_eq!(
        p.run_in(&p.b, move || rawq::xdp::iface::attached_prog_id(&dev)
            .unwrap()),
        Some(id)
    );
    drop(first);
}

/// When this env var names `<netns>/<ifname>`, the test below is the child: it opens a port
/// there, says so on stdout, and sleeps until it is killed.
const CHILD_ENV: &str = "RAWQ_XDP_TEST_CHILD";

#[test]
fn killed_process_leaves_no_program() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (ns, dev) = spec.split_once('/').unwrap();
        support::enter_netns(&format!("/var/run/netns/{ns}"));
        let _port = Port::builder(Backend::Xdp {
            ifname: dev.to_string(),
        })
        .rule(udp_dst(9000))
        .rx_ring(64)
        .tx_ring(64)
        .open()
        .expect("child opens the port");
        println!("RAWQ-CHILD-READY");
        std::io::stdout().flush().unwrap();
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let Some(p) = NetnsPair::new("xkill") else {
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            support::test_name(module_path!(), "killed_process_leaves_no_program").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{}/{}", p.b, p.veth_b))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 256];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.contains("RAWQ-CHILD-READY") && Instant::now() < deadline {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => break,
        }
    }
    assert!(
        seen.contains("RAWQ-CHILD-READY"),
        "child did not open the port: {seen}"
    );
    let shown = link_show(&p, &p.b, &p.veth_b);
    assert!(
        shown.contains("prog/xdp"),
        "the child's program is attached: {shown}"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The link fd closes with the process; detaching happens in its exit path.
    let t = Instant::now();
    let mut shown = link_show(&p, &p.b, &p.veth_b);
    while shown.contains("prog/xdp") && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        shown = link_show(&p, &p.b, &p.veth_b);
    }
    assert!(
        !shown.contains("prog/xdp"),
        "no program after kill -9: {shown}"
    );
}

#[test]
fn bad_configurations_are_errors_that_say_why() {
    let Some(p) = NetnsPair::new("xcfg") else {
        return;
    };
    // A veth has one rx queue by default.
    let dev = p.veth_b.clone();
    let r = p.run_in(&p.b, move || {
        Port::builder(Backend::Xdp { ifname: dev })
            .queues(2)
            .open()
            .map(|_| ())
    });
    match r {
        Err(Error::Config(msg)) => assert!(msg.contains("rx queue"), "{msg}"),
        other => panic!("expected a queue-count error, got {other:?}"),
    }
    // UMEM chunks must be 2048 or 4096 bytes.
    let dev = p.veth_b.clone();
    let r = p.run_in(&p.b, move || {
        Port::builder(Backend::Xdp { ifname: dev })
            .pool_config(rawq::MempoolConfig {
                buf_size: 1024,
                huge_pages: rawq::HugePages::Never,
                ..Default::default()
            })
            .open()
            .map(|_| ())
    });
    match r {
        Err(Error::Config(msg)) => assert!(msg.contains("2048"), "{msg}"),
        other => panic!("expected a buffer-size error, got {other:?}"),
    }
    // An interface of another namespace is not found, and the message lists what exists.
    let dev = p.veth_a.clone();
    let r = p.run_in(&p.b, move || {
        Port::builder(Backend::Xdp { ifname: dev })
            .open()
            .map(|_| ())
    });
    match r {
        Err(Error::NotFound { available, .. }) => assert!(available.contains("lo"), "{available}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    // Nothing was left attached by the failed opens.
    let dev = p.veth_b.clone();
    assert_eq!(
        p.run_in(&p.b, move || rawq::xdp::iface::attached_prog_id(&dev)
            .unwrap()),
        None
    );
}

/// Attaches `prog_fd` to interface `ifindex` the old way (rtnetlink `IFLA_XDP_FD`), in generic
/// (skb) mode, as another tool would; in the calling thread's namespace.
fn attach_with_netlink(ifindex: u32, prog_fd: i32) -> std::io::Result<()> {
    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
        v
    }
    const RTM_SETLINK: u16 = 19;
    const IFLA_XDP: u16 = 43;
    const NLA_F_NESTED: u16 = 0x8000;
    const IFLA_XDP_FD: u16 = 1;
    const IFLA_XDP_FLAGS: u16 = 3;
    const XDP_FLAGS_SKB_MODE: u32 = 2;
    let mut xdp = attr(IFLA_XDP_FD, &prog_fd.to_ne_bytes());
    xdp.extend(attr(IFLA_XDP_FLAGS, &XDP_FLAGS_SKB_MODE.to_ne_bytes()));
    let mut body = vec![0u8; 16]; // ifinfomsg
    body[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    body.extend(attr(IFLA_XDP | NLA_F_NESTED, &xdp));
    let mut msg = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
    msg.extend_from_slice(&RTM_SETLINK.to_ne_bytes());
    msg.extend_from_slice(&(1u16 | 4).to_ne_bytes()); // NLM_F_REQUEST | NLM_F_ACK
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend(body);
    // SAFETY: plain socket calls on buffers that live across each call.
    unsafe {
        let fd = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut sa: libc::sockaddr_nl = std::mem::zeroed();
        sa.nl_family = libc::AF_NETLINK as u16;
        let rc = libc::sendto(
            fd,
            msg.as_ptr() as *const libc::c_void,
            msg.len(),
            0,
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        );
        let mut buf = [0u8; 4096];
        let n = if rc < 0 {
            -1
        } else {
            libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0)
        };
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n < 20 {
            return Err(err);
        }
        let errno = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
        if errno != 0 {
            return Err(std::io::Error::from_raw_os_error(-errno));
        }
    }
    Ok(())
}

#[test]
fn a_program_attached_by_another_tool_is_never_replaced() {
    let Some(p) = NetnsPair::new("xother") else {
        return;
    };
    use rawq::xdp::bpf::{Insn, Program, Reg};
    let dev = p.veth_b.clone();
    let (prog, id) = p.run_in(&p.b, move || {
        let prog =
            Program::load(&[Insn::mov64_imm(Reg::R0, 2), Insn::exit()], "other_tool").unwrap();
        let ifindex = rawq::xdp::iface::ifindex(&dev).unwrap();
        attach_with_netlink(ifindex, prog.as_raw_fd()).expect("attach via rtnetlink");
        let id = prog.id().unwrap();
        (prog, id)
    });
    match open_in(&p, &p.b, &p.veth_b, vec![udp_dst(9000)], 64) {
        Err(Error::XdpAlreadyAttached { prog_id, .. }) => assert_eq!(prog_id, id),
        other => panic!("expected XdpAlreadyAttached, got {other:?}"),
    }
    // Underneath the up-front netlink check, the kernel refuses the link as well, which is what
    // `open` falls back on if a program appears between the check and the attach.
    let dev = p.veth_b.clone();
    let errno = p.run_in(&p.b, move || {
        let mine =
            Program::load(&[Insn::mov64_imm(Reg::R0, 2), Insn::exit()], "rawq_probe").unwrap();
        let ifindex = rawq::xdp::iface::ifindex(&dev).unwrap();
        rawq::xdp::bpf::XdpLink::attach(&mine, ifindex)
            .map(|_| ())
            .map_err(|e| e.raw_os_error())
    });
    assert!(
        matches!(errno, Err(Some(libc::EBUSY)) | Err(Some(libc::EEXIST))),
        "{errno:?}"
    );
    drop(prog); // the attachment holds its own reference
    let dev = p.veth_b.clone();
    assert_eq!(
        p.run_in(&p.b, move || rawq::xdp::iface::attached_prog_id(&dev)
            .unwrap()),
        Some(id),
        "the other tool's program is still there"
    );
}
