//! rawq's verbs backend (`-b verbs`) end to end on the emulated ConnectX: unmodified
//! libibverbs + libmlx5 write the WQEs and parse the CQEs of rawq's queues, the device model is
//! the hardware (`scripts/emu.sh`). Loopback tests need nothing; wire tests run each side in a
//! namespace of a veth pair and let the kernel (sockets, ping, TCP) judge.
#![cfg(feature = "verbs")]

use rawq_testkit as support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::emu::{
    counter, emu_sh, serial, tap_answers_ping_and_tcp, tap_rig, tempdir, text, wait_for,
};

/// `[ip netns exec NS] bash scripts/emu.sh [--wire IF] [opts] -- cmd...`, the device model's
/// counters kept in `stats`.
fn emu(ns: Option<(&str, &str)>, opts: &[&str], cmd: &[&str], stats: &Path) -> Command {
    emu_sh(ns, None, opts, cmd, stats)
}

fn exe(name: &str) -> String {
    support::example(name).to_str().unwrap().to_owned()
}

/// pktgen's `--json` summary (its last stdout line).
fn summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary:\n{}", text(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn num(v: &serde_json::Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

/// pktgen `-b verbs --txrx --seq` on the looped-back port with `extra` options.
fn loopback_txrx(tag: &str, n: u64, extra: &[&str], env: &[(&str, &str)]) -> (Output, PathBuf) {
    let dir = tempdir(tag);
    let stats = dir.join("model.stats");
    let n = n.to_string();
    let pktgen = exe("pktgen");
    let mut args = vec![
        pktgen.as_str(),
        "-b",
        "verbs",
        "-d",
        "mlx5_0",
        "--txrx",
        "--seq",
        "-n",
        &n,
        "-r",
        "2000",
        "--json",
    ];
    args.extend_from_slice(extra);
    let mut c = emu(None, &[], &args, &stats);
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/emu.sh");
    (wait_for(child, Duration::from_secs(60)), stats)
}

#[test]
fn verbs_txrx_seq_on_the_looped_back_port_loses_nothing() {
    let _one = serial();
    const N: u64 = 5_000;
    let (out, stats) = loopback_txrx("emuvlo", N, &[], &[]);
    assert!(out.status.success(), "pktgen:\n{}", text(&out));
    let s = summary(&out);
    assert_eq!(s["backend"], "verbs");
    assert_eq!(num(&s, "tx.packets"), N, "{s}");
    assert_eq!(num(&s, "rx.packets"), N, "{s}");
    assert_eq!(num(&s, "seq_lost"), 0, "{s}");
    assert_eq!(num(&s, "seq_out_of_order"), 0, "{s}");
    assert_eq!(num(&s, "flows.duplicates"), 0, "{s}");
    // The device model agrees: libmlx5 posted N sends, the RQ took N frames.
    assert_eq!(counter(&stats, "tx_frames"), Some(N));
    assert_eq!(counter(&stats, "rx_frames"), Some(N));
    assert_eq!(counter(&stats, "rx_no_buffer"), Some(0));
}

#[test]
fn verbs_rss_over_four_queues_spreads_sixteen_flows_every_frame_once() {
    let _one = serial();
    const N: u64 = 4_800;
    let (out, stats) = loopback_txrx("emuvrss", N, &["-q", "4", "-f", "16", "-v"], &[]);
    assert!(out.status.success(), "pktgen:\n{}", text(&out));
    let s = summary(&out);
    assert_eq!(s["mode"], "RAW_PACKET QPs, RSS over receive WQs", "{s}");
    assert_eq!(num(&s, "queues"), 4);
    assert_eq!(num(&s, "rx.packets"), N, "{s}");
    let flows = &s["flows"];
    assert_eq!(num(flows, "count"), 16, "{s}");
    assert_eq!(num(flows, "lost"), 0, "{s}");
    assert_eq!(num(flows, "duplicates"), 0, "{s}");
    for f in flows["all"].as_array().unwrap() {
        assert_eq!(num(f, "received"), N / 16, "{f}");
    }
    assert_eq!(counter(&stats, "rx_frames"), Some(N));
    assert_eq!(counter(&stats, "rx_no_buffer"), Some(0));
    // Spread: every queue received (the running totals of pktgen's last live per-queue rows,
    // -v, printed once a second, so up to the last second only).
    let per_queue = per_queue_rx(&out);
    assert_eq!(per_queue.len(), 4, "{}", text(&out));
    assert!(per_queue.iter().all(|&n| n > 0), "{per_queue:?}");
    assert!(per_queue.iter().sum::<u64>() <= N, "{per_queue:?}");
}

/// The receive totals of pktgen's last per-queue rows ("   qN: ... | total tx T rx R").
fn per_queue_rx(o: &Output) -> Vec<u64> {
    let all = text(o);
    let mut last = std::collections::BTreeMap::new();
    for l in all.lines() {
        let t = l.trim_start();
        let Some((q, rest)) = t.strip_prefix('q').and_then(|r| r.split_once(':')) else {
            continue;
        };
        let (Ok(q), Some(rx)) = (
            q.parse::<u32>(),
            rest.rsplit_once(" rx ")
                .and_then(|(_, n)| n.trim().parse::<u64>().ok()),
        ) else {
            continue;
        };
        last.insert(q, rx);
    }
    last.into_values().collect()
}

#[test]
fn verbs_send_error_is_recovered_through_ibv_modify_qp_and_the_counts_add_up() {
    let _one = serial();
    const N: u64 = 10_000;
    // The emulator fails the 1500th send WQE of the queue with a local protection error CQE
    // (as a bad lkey would); libmlx5 reports it, rawq moves the QP through RESET back to RTS
    // (ibv_modify_qp) and sends on.
    let (out, stats) = loopback_txrx("emuverr", N, &[], &[("RAWQ_EMU_TX_ERROR", "1500")]);
    assert!(out.status.success(), "pktgen:\n{}", text(&out));
    let all = text(&out);
    assert!(
        all.contains("send completion error: local protection error"),
        "the error was not reported:\n{all}"
    );
    let s = summary(&out);
    let model = |f: &str| counter(&stats, f).unwrap_or_else(|| panic!("{f} missing"));
    assert_eq!(model("tx_error_cqes"), 1);
    assert_eq!(num(&s, "tx.errors"), 1, "{s}");
    // Counts add up: tx.packets is what the device sent (counted at post, a failed or flushed
    // send taken back out into errors / drops), and what pktgen posted (N) = sent + the error +
    // what was flushed.
    assert_eq!(num(&s, "tx.packets"), model("tx_frames"), "{s}");
    assert_eq!(
        num(&s, "tx.packets") + num(&s, "tx.errors") + num(&s, "tx.drops"),
        N,
        "{s}"
    );
    // Flushed by the device, or outstanding when the reset let go of them: dropped either way.
    assert!(num(&s, "tx.drops") >= model("tx_flushed"), "{s}");
    // Traffic resumed, and every frame the device sent came back once (a send error leaves
    // the receive side alone, as on mlx5, whose send and receive queues fail apart).
    assert!(model("tx_frames") > N / 2, "traffic did not resume: {s}");
    assert_eq!(num(&s, "rx.packets"), model("tx_frames"), "{s}");
    assert_eq!(num(&s, "seq_lost"), N - model("tx_frames"), "{s}");
    assert_eq!(num(&s, "flows.duplicates"), 0, "{s}");
}

/// Starts `cmd` and waits for a stderr line containing `ready` (then keeps reading stderr on a
/// thread, so that the pipe never fills); returns the child and the stderr collector.
fn start_until(mut c: Command, ready: &'static str) -> (Child, std::thread::JoinHandle<String>) {
    use std::io::BufRead;
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start under scripts/emu.sh");
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut all = String::new();
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if l.contains(ready) {
                let _ = tx.send(());
            }
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        let out = child.wait_with_output().expect("output");
        panic!("did not start:\n{}\n{}", text(&out), t.join().unwrap());
    }
    (child, t)
}

#[test]
fn verbs_rx_counts_the_steered_flow_while_ping_and_tcp_reach_the_tap_netdev() {
    let _one = serial();
    use std::net::{Ipv4Addr, UdpSocket};

    let Some(ns) = support::NetnsPair::new("emuvrx") else {
        return;
    };
    // The port's kernel netdev (a TAP) in a namespace of its own.
    let (tap_ns, tap, ip_tap) = tap_rig(&ns, "rqvrx");
    let dir = tempdir("emuvrx");
    let stats = dir.join("rx.stats");
    let pktgen = exe("pktgen");
    let (app, err) = start_until(
        emu(
            Some((&ns.a, &ns.veth_a)),
            &["--netdev", &tap],
            &[
                &pktgen,
                "-b",
                "verbs",
                "-d",
                "mlx5_0",
                "--rx",
                "--rule",
                "udp dst-port 9000 -> queue 0",
                "-t",
                "12",
                "--json",
            ],
            &stats,
        ),
        "pktgen: verbs on mlx5_0",
    );
    // ping and TCP to the TAP's address reach its kernel.
    let data: Vec<u8> = (0..256 * 1024u32)
        .map(|i| (i * 13 + i / 241) as u8)
        .collect();
    let addr = tap_answers_ping_and_tcp(&ns, &tap, &tap_ns.0, &ip_tap, data);

    // UDP to port 9000: the rule takes it to rawq's queue 0; port 9001 goes to the TAP.
    const N: u64 = 2000;
    ns.run_in(&ns.b, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        for i in 0..N {
            s.send_to(&(i as u32).to_be_bytes(), (addr, 9000)).unwrap();
            if i % 10 == 0 {
                s.send_to(b"not steered", (addr, 9001)).unwrap();
            }
            // About 2000 frames/s: the emulator's AF_PACKET bridge has the socket's default
            // receive buffer (some hundreds of small frames) to ride out its device thread
            // being descheduled on a loaded 2-core machine.
            if i % 4 == 3 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    // pktgen ends once the port has delivered every steered frame to its queue (the model's
    // counters, rewritten twice a second): SIGTERM to pktgen itself (below emu.sh), on which
    // it counts what its queue still holds; not at its `-t`, which bounds a failed test.
    let end = Instant::now() + Duration::from_secs(20);
    while counter(&stats, "rx_frames").unwrap_or(0) < N && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    support::emu::term_command(app.id(), "rawq-pktgen");
    let out = wait_for(app, Duration::from_secs(40));
    let err = err.join().unwrap();
    assert!(out.status.success(), "pktgen:\n{}\n{err}", text(&out));
    let s = summary(&out);
    // pktgen counted exactly the steered frames, all the device model put on its RQ.
    let model = std::fs::read_to_string(&stats).unwrap_or_default();
    assert_eq!(num(&s, "packets"), N, "{s}\n{err}\n{model}");
    assert_eq!(counter(&stats, "rx_frames"), Some(N), "{model}");
    assert_eq!(num(&s, "errors"), 0, "{s}");
    assert!(
        counter(&stats, "rx_to_kernel").unwrap_or(0) >= 5 + N / 10,
        "ping, TCP and port 9001 went to the TAP"
    );
    assert!(
        counter(&stats, "netdev_tx").unwrap_or(0) >= 5,
        "replies from the TAP"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A non-blocking-with-timeout `AF_PACKET` socket on `ifname`, made in the calling thread's
/// namespace, with a large receive buffer.
fn packet_socket(ifname: &str) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(std::io::Error::last_os_error());
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as i32) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    use std::os::fd::AsRawFd;
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    let bytes: libc::c_int = 16 << 20;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    // SAFETY: valid socket, pointers to values of the sizes passed.
    unsafe {
        if libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            4,
        );
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    Ok(fd)
}

#[test]
fn verbs_fwd_macswap_reflects_every_frame_across_a_veth() {
    let _one = serial();
    use std::net::{Ipv4Addr, UdpSocket};
    use std::os::fd::AsRawFd;
    let Some(ns) = support::NetnsPair::new("emuvfw") else {
        return;
    };
    let dir = tempdir("emuvfw");
    let fwd_stats = dir.join("fwd.stats");
    let fwd = exe("fwd");
    let (reflector, fwd_err) = start_until(
        emu(
            Some((&ns.a, &ns.veth_a)),
            &[],
            &[
                &fwd,
                "-b",
                "verbs",
                "-d",
                "mlx5_0",
                "--mode",
                "macswap",
                "--rule",
                "udp dst-port 9000 -> queue 0",
            ],
            &fwd_stats,
        ),
        "fwd: mlx5_0",
    );
    std::thread::sleep(Duration::from_millis(300));
    // Host B's kernel sends N numbered datagrams to A's address; A's kernel (on the same veth
    // end as the emulated port's wire) answers ARP. What comes back swapped is addressed to
    // B's MAC from A's and still to A's IP: B's kernel does not take it, an AF_PACKET socket on
    // B's veth end counts it.
    const N: u32 = 3000;
    let mac_a = ns.mac(&ns.a, &ns.veth_a);
    let mac_b = ns.mac(&ns.b, &ns.veth_b);
    let veth_b = ns.veth_b.clone();
    let sock = ns
        .run_in(&ns.b, move || packet_socket(&veth_b))
        .expect("AF_PACKET socket in b");
    let watcher = std::thread::spawn(move || {
        let mut seen = vec![0u32; N as usize];
        let mut buf = [0u8; 2048];
        let mut quiet = 0;
        let end = Instant::now() + Duration::from_secs(60);
        while quiet < 25 && Instant::now() < end {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                if seen.iter().any(|&c| c > 0) {
                    quiet += 1;
                }
                continue;
            }
            quiet = 0;
            let f = &buf[..n as usize];
            // Ethernet + IPv4 (20) + UDP to 9000 + a 4-byte index, addressed B <- A.
            if f.len() >= 46
                && f[0..6] == mac_b
                && f[6..12] == mac_a
                && f[12..14] == [0x08, 0x00]
                && f[36..38] == 9000u16.to_be_bytes()
            {
                let i = u32::from_be_bytes(f[42..46].try_into().unwrap());
                if let Some(c) = seen.get_mut(i as usize) {
                    *c += 1;
                }
            }
        }
        seen
    });
    let ip_a: Ipv4Addr = ns.ip_a.parse().unwrap();
    ns.run_in(&ns.b, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        for i in 0..N {
            s.send_to(&i.to_be_bytes(), (ip_a, 9000)).unwrap();
            if i % 4 == 3 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let seen = watcher.join().unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &reflector.id().to_string()])
        .status();
    let fwd_out = wait_for(reflector, Duration::from_secs(30));
    let fwd_err = fwd_err.join().unwrap();
    let model = std::fs::read_to_string(&fwd_stats).unwrap_or_default();
    let missing = seen.iter().filter(|&&c| c == 0).count();
    let twice = seen.iter().filter(|&&c| c > 1).count();
    assert_eq!(
        (missing, twice),
        (0, 0),
        "frames missing / seen twice\nfwd: {}{fwd_err}\n{model}",
        text(&fwd_out)
    );
    // The reflector's device model sent back every frame it took, and fwd says so.
    assert_eq!(
        counter(&fwd_stats, "rx_frames"),
        Some(u64::from(N)),
        "{model}"
    );
    assert_eq!(
        counter(&fwd_stats, "tx_frames"),
        Some(u64::from(N)),
        "{model}"
    );
    let fwd_text = text(&fwd_out);
    assert!(
        fwd_text.contains(&format!("fwd: forwarded {N} frames")),
        "{fwd_text}\n{fwd_err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
