//! AF_XDP VLAN stripping through the XDP metadata kfunc `bpf_xdp_metadata_rx_vlan_tag`: what a
//! veth hands its XDP program when its peer sends through a VLAN device, with the tag in the
//! skb (TX VLAN offload on, the frame data untagged) and with the tag in the frame data
//! (offload off), and what rawq's `RxMeta` and `PortInfo` say in each case.

use rawq_testkit as support;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rawq::{Backend, Offload, Port, Queue, RxMeta};
use support::NetnsPair;

const VID: u16 = 100;
/// The priority bits of the tag.
const PCP: u16 = 5;
/// The TCI on the wire: PCP in bits 15..13, VID in 11..0.
const TCI: u16 = PCP << 13 | VID;
const PORT: u16 = 9000;

/// Opens an AF_XDP port on A's veth steering UDP to port 9000 to queue 0, VLAN stripping `strip`.
fn open(p: &NetnsPair, strip: bool) -> rawq::Result<Port> {
    open_rules(p, strip, &[&format!("udp dst-port {PORT} -> queue 0")])
}

/// Opens an AF_XDP port on A's veth with `rules`, VLAN stripping `strip`.
fn open_rules(p: &NetnsPair, strip: bool, rules: &[&str]) -> rawq::Result<Port> {
    let dev = p.veth_a.clone();
    let rules: Vec<rawq::flow::Rule> = rules.iter().map(|r| r.parse().unwrap()).collect();
    p.run_in(&p.a, move || {
        Port::builder(Backend::Xdp { ifname: dev })
            .rx_ring(256)
            .tx_ring(256)
            .rules(rules)
            .vlan_strip(strip)
            .open()
    })
}

/// `bpf(cmd, attr)`.
fn bpf(cmd: i32, attr: &mut [u8; 128]) -> i32 {
    // SAFETY: `attr` is a live 128-byte buffer, as large as every `union bpf_attr` member the
    // commands used here read (the kernel zero-checks the rest of the size given).
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) as i32 }
}

/// Tags every frame B's veth sends with [`TCI`], the way the kernel's VLAN devices do (this
/// kernel has no 802.1Q module): a tcx egress program (`BPF_PROG_TYPE_SCHED_CLS` attached with
/// `BPF_LINK_CREATE`, `BPF_TCX_EGRESS`, Linux 6.6) calls `bpf_skb_vlan_push` (helper 18,
/// net/core/filter.c), which puts the tag in the skb (`skb_vlan_push`:
/// `__vlan_hwaccel_put_tag`). The transmit path then keeps it there when the device has TX
/// VLAN offload and writes it into the frame data when it has not (net/core/dev.c
/// `validate_xmit_vlan`). Returns the link's fd (the program goes when it is closed).
fn tag_egress(p: &NetnsPair) -> std::os::fd::OwnedFd {
    use rawq::xdp::bpf::{insn::to_bytes, Insn, Reg};
    use std::os::fd::FromRawFd;
    let prog = [
        Insn::mov64_imm(Reg::R2, 0x8100u16.to_be() as i32),
        Insn::mov64_imm(Reg::R3, TCI as i32),
        Insn::call(18), // bpf_skb_vlan_push(skb, proto, tci), skb still in R1
        Insn::mov64_imm(Reg::R0, 0), // TCX_PASS
        Insn::exit(),
    ];
    let code = to_bytes(&prog);
    let license = b"GPL\0";
    let veth = p.veth_b.clone();
    let fd = p.run_in(&p.b, move || {
        let ifindex = rawq::xdp::iface::ifindex(&veth).unwrap();
        let mut a = [0u8; 128];
        a[0..4].copy_from_slice(&3u32.to_ne_bytes()); // BPF_PROG_TYPE_SCHED_CLS
        a[4..8].copy_from_slice(&(prog.len() as u32).to_ne_bytes());
        a[8..16].copy_from_slice(&(code.as_ptr() as u64).to_ne_bytes());
        a[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
        let prog_fd = bpf(5, &mut a); // BPF_PROG_LOAD
        assert!(
            prog_fd >= 0,
            "BPF_PROG_LOAD: {}",
            std::io::Error::last_os_error()
        );
        let mut l = [0u8; 128];
        l[0..4].copy_from_slice(&(prog_fd as u32).to_ne_bytes());
        l[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        l[8..12].copy_from_slice(&47u32.to_ne_bytes()); // BPF_TCX_EGRESS
        let link = bpf(28, &mut l); // BPF_LINK_CREATE
        let err = std::io::Error::last_os_error();
        // SAFETY: closing the program fd this function opened; the link holds the program.
        unsafe { libc::close(prog_fd) };
        assert!(link >= 0, "BPF_LINK_CREATE(tcx egress): {err}");
        link
    });
    // SAFETY: a fresh descriptor, owned from here on.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// A UDP socket in B sending to A's port 9000, every frame tagged ([`tag_egress`]), A's MAC a
/// static neighbour (A's kernel does not answer a tagged ARP request). With `tx_offload` false,
/// B's veth loses TX VLAN offload first, so the tag is written into the frame data before the
/// veth takes it; with it (a veth's default), the tag stays in the skb.
fn vlan_sender(p: &NetnsPair, tx_offload: bool) -> (UdpSocket, std::os::fd::OwnedFd) {
    if !tx_offload {
        let out = p.exec(&p.b, &["ethtool", "-K", &p.veth_b, "txvlan", "off"]);
        assert!(
            out.status.success(),
            "ethtool -K txvlan off: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mac_a = p.mac_text(&p.a, &p.veth_a);
    p.ip_in(
        &p.b,
        &[
            "neigh",
            "replace",
            &p.ip_a,
            "lladdr",
            &mac_a,
            "dev",
            &p.veth_b,
            "nud",
            "permanent",
        ],
    )
    .unwrap();
    let link = tag_egress(p);
    let dst = format!("{}:{PORT}", p.ip_a);
    let sock = p.run_in(&p.b, move || {
        let u = UdpSocket::bind("0.0.0.0:0").unwrap();
        u.connect(dst).unwrap();
        u
    });
    (sock, link)
}

/// Sends `n` datagrams (payload: the sequence number) one at a time and receives each on `q`
/// (bounded: 2 s per datagram). Returns each frame's bytes and metadata, in order.
fn exchange(sock: &UdpSocket, q: &mut Queue, n: u64) -> Vec<(Vec<u8>, RxMeta)> {
    let mut got = Vec::new();
    let mut pkts = Vec::with_capacity(32);
    for seq in 0..n {
        let tag = (0xfeed_0000_0000_0000u64 | seq).to_be_bytes();
        sock.send(&tag).unwrap();
        let t = Instant::now();
        let mut found = false;
        while !found && t.elapsed() < Duration::from_secs(2) {
            let k = q.rx_burst(&mut pkts, 32);
            for pk in pkts.drain(..k) {
                let d = pk.data();
                if d.len() >= 8 && d[d.len() - 8..] == tag {
                    got.push((d.to_vec(), pk.meta));
                    found = true;
                }
            }
        }
        assert!(found, "datagram {seq} never reached the AF_XDP socket");
    }
    got
}

fn ethertype(f: &[u8]) -> u16 {
    u16::from_be_bytes([f[12], f[13]])
}

/// B's VLAN device with TX VLAN offload (a veth has it): the tag travels in the skb, not in the
/// frame data, so the XDP program sees an untagged frame and only the driver's kfunc knows the
/// tag. With `vlan_strip`, rawq asks it and every frame arrives untagged with the tag (PCP and
/// VID) in `RxMeta::vlan_tci`; `PortInfo` says stripping is in hardware (the driver's).
#[test]
fn offloaded_tag_reaches_rx_meta_through_the_kfunc() {
    let Some(p) = NetnsPair::new("vlhw") else {
        return;
    };
    let mut port = open(&p, true).expect("open an AF_XDP port with VLAN stripping");
    assert_eq!(port.info().offloads.vlan_strip, Offload::Hardware);
    let mut q = port.take_queues().remove(0);
    let (sock, _link) = vlan_sender(&p, true);
    let got = exchange(&sock, &mut q, 50);
    for (i, (f, m)) in got.iter().enumerate() {
        assert_eq!(ethertype(f), 0x0800, "frame {i}: untagged IPv4 in the data");
        assert_eq!(m.vlan_tci(), Some(TCI), "frame {i}: the tag in RxMeta");
    }
}

/// A rule on the VLAN id matches the tag the driver took off the frame (as an mlx5 flow table
/// matches the tag before the RQ strips it): with the tag only in the skb, `vlan 100` takes
/// the frames and `vlan 101` none.
#[test]
fn a_vlan_rule_matches_the_tag_the_driver_took_off() {
    let Some(p) = NetnsPair::new("vlrul") else {
        return;
    };
    let other = format!("vlan {} udp dst-port {PORT} -> drop", VID + 1);
    let ours = format!("vlan {VID} udp dst-port {PORT} -> queue 0");
    let mut port = open_rules(&p, true, &[&other, &ours]).expect("open");
    let mut q = port.take_queues().remove(0);
    let (sock, _link) = vlan_sender(&p, true);
    let got = exchange(&sock, &mut q, 20);
    assert!(
        got.iter().all(|(_, m)| m.vlan_tci() == Some(TCI)),
        "{got:?}"
    );
    let hits: Vec<u64> = port
        .rules()
        .into_iter()
        .map(|(h, _)| port.rule_hits(h).unwrap().unwrap())
        .collect();
    assert_eq!(hits, [0, 20], "hits of `{other}` and `{ours}`");
}

/// B's veth without TX VLAN offload: the tag is in the frame data, the skb carries none, the
/// kfunc answers that it has no tag: the frame keeps its tag and `RxMeta` has none.
#[test]
fn tag_in_the_frame_data_stays_there() {
    let Some(p) = NetnsPair::new("vlsw") else {
        return;
    };
    let mut port = open(&p, true).expect("open");
    let mut q = port.take_queues().remove(0);
    let (sock, _link) = vlan_sender(&p, false);
    let got = exchange(&sock, &mut q, 50);
    for (i, (f, m)) in got.iter().enumerate() {
        assert_eq!(
            ethertype(f),
            0x8100,
            "frame {i}: the tag is still in the data"
        );
        assert_eq!(u16::from_be_bytes([f[14], f[15]]), TCI, "frame {i}");
        assert_eq!(ethertype(&f[4..]), 0x0800, "frame {i}");
        assert_eq!(m.vlan_tci(), None, "frame {i}: nothing was stripped");
    }
}

/// Without `vlan_strip` the port says stripping is absent and no frame has a tag in `RxMeta`.
#[test]
fn without_vlan_strip_rx_meta_has_no_tag() {
    let Some(p) = NetnsPair::new("vloff") else {
        return;
    };
    let mut port = open(&p, false).expect("open");
    assert_eq!(port.info().offloads.vlan_strip, Offload::Absent);
    let mut q = port.take_queues().remove(0);
    let (sock, _link) = vlan_sender(&p, true);
    let got = exchange(&sock, &mut q, 10);
    assert!(got.iter().all(|(_, m)| m.vlan_tci().is_none()), "{got:?}");
}

fn root_or_skip() -> Option<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return support::skip_or_fail("loading BPF programs needs root");
    }
    Some(())
}

/// An Ethernet + IPv4 + UDP frame to port 9000.
fn udp_frame() -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[36..38].copy_from_slice(&PORT.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

/// The program calling `bpf_xdp_metadata_rx_vlan_tag` (its id found by name in the live vmlinux
/// BTF), alone and with the hardware-timestamp kfunc, passes the verifier loaded device-bound
/// to a veth; unbound, the verifier refuses it. `BPF_PROG_TEST_RUN` refuses a device-bound
/// program (EINVAL), so only live traffic (the tests above) runs the kfunc.
#[test]
fn vlan_program_passes_the_verifier_device_bound_only() {
    use rawq::xdp::bpf::{self, Program, Stamp, Variant, XskMap};
    let Some(p) = NetnsPair::new("vlver") else {
        return;
    };
    let vlan = bpf::btf::vmlinux_func(rawq::xdp::genl::RX_VLAN_TAG_KFUNC, "this test", "").unwrap();
    let ts = bpf::btf::vmlinux_func("bpf_xdp_metadata_rx_timestamp", "this test", "").unwrap();
    let veth = p.veth_a.clone();
    p.run_in(&p.a, move || {
        let ifindex = rawq::xdp::iface::ifindex(&veth).unwrap();
        let map = XskMap::create(1).unwrap();
        let rules = vec![format!("udp dst-port {PORT} -> queue 0").parse().unwrap()];
        for stamp in [
            Stamp::None,
            Stamp::Kernel,
            Stamp::Hardware {
                rx_timestamp_kfunc: ts,
            },
        ] {
            let insns = bpf::compile_meta(
                &rules,
                Variant::Steer {
                    xskmap_fd: map.as_raw_fd(),
                },
                stamp,
                Some(vlan),
                None,
            )
            .unwrap();
            let prog = Program::load_for_device(&insns, "rawq_vlan", ifindex)
                .unwrap_or_else(|e| panic!("{stamp:?}: the verifier refuses it: {e}"));
            let e = prog.test_run(&udp_frame()).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
            match Program::load(&insns, "rawq_vlan") {
                Err(rawq::Error::Verifier { log, .. }) => {
                    assert!(log.contains("device-bound"), "{log}")
                }
                other => panic!("unbound {stamp:?}: {other:?}"),
            }
        }
    });
}

/// A program that does not call the VLAN kfunc (kernel stamps only) runs under
/// `BPF_PROG_TEST_RUN`: its 32-byte record says "not asked" for the VLAN, with no tag.
#[test]
fn records_without_the_vlan_kfunc_say_not_asked() {
    use rawq::xdp::bpf::{self, meta, Program, Stamp, Variant, XskMap};
    let Some(()) = root_or_skip() else { return };
    let map = XskMap::create(1).unwrap();
    let rules = vec![format!("udp dst-port {PORT} -> queue 0").parse().unwrap()];
    let insns = bpf::compile_meta(
        &rules,
        Variant::Steer {
            xskmap_fd: map.as_raw_fd(),
        },
        Stamp::Kernel,
        None,
        None,
    )
    .unwrap();
    let prog = Program::load(&insns, "rawq_novlan").unwrap();
    let (_, m, out) = prog.test_run_meta(&udp_frame()).unwrap();
    assert_eq!(m.len(), meta::LEN);
    assert_eq!(m.len(), 32);
    let st = i32::from_ne_bytes(m[meta::VLAN_STATUS_AT..][..4].try_into().unwrap());
    assert_eq!(st, meta::NOT_ASKED);
    assert_eq!(m[meta::VLAN_TCI_AT..meta::VLAN_TCI_AT + 4], [0; 4]);
    assert_eq!(out, udp_frame());
}

/// The kernel's `netdev` family says a veth's driver answers the VLAN metadata kfunc (veth has
/// all three ops: timestamp, hash, VLAN tag; drivers/net/veth.c `veth_xdp_metadata_ops`) and
/// `lo`'s answers none; on `lo` a port asked to strip opens, says stripping is absent, and the
/// frame keeps its tag.
#[test]
fn netdev_family_reports_the_vlan_op_per_driver() {
    use rawq::xdp::genl;
    let Some(p) = NetnsPair::new("vlgen") else {
        return;
    };
    let veth = p.veth_a.clone();
    let (v, lo) = p.run_in(&p.a, move || {
        let f =
            |n: &str| genl::rx_metadata_features(rawq::xdp::iface::ifindex(n).unwrap()).unwrap();
        (f(&veth), f("lo"))
    });
    assert_eq!(
        v,
        genl::RX_METADATA_TIMESTAMP | genl::RX_METADATA_HASH | genl::RX_METADATA_VLAN_TAG
    );
    assert_eq!(lo, 0);
    let info = p.run_in(&p.a, || {
        Port::builder(Backend::Xdp {
            ifname: "lo".into(),
        })
        .rx_ring(64)
        .tx_ring(64)
        .rule(format!("udp dst-port {PORT} -> queue 0").parse().unwrap())
        .vlan_strip(true)
        .open()
        .map(|port| port.info().clone())
    });
    let info = info.expect("lo opens with vlan_strip");
    assert_eq!(info.offloads.vlan_strip, Offload::Absent);
}
