//! rawq's verbs backend (`-b verbs`) end to end on the emulated ConnectX: unmodified
//! libibverbs + libmlx5 write the WQEs and parse the CQEs of rawq's queues, the device model is
//! the hardware (`scripts/emu.sh`). Loopback tests need nothing; wire tests run each side in a
//! namespace of a veth pair and let the kernel (sockets, ping, TCP) judge.
#![cfg(feature = "verbs")]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One test of this file at a time: each runs busy-polling programs and device models, and the
/// machine may have two cores; rates are chosen for one test running.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `[ip netns exec NS] bash scripts/emu.sh [--wire IF] [opts] -- cmd...`, the device model's
/// counters kept in `stats`.
fn emu(ns: Option<(&str, &str)>, opts: &[&str], cmd: &[&str], stats: &Path) -> Command {
    let mut c = match ns {
        Some((ns, _)) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "bash"]);
            c
        }
        None => Command::new("bash"),
    };
    c.arg(root().join("scripts/emu.sh"));
    if let Some((_, wire)) = ns {
        c.args(["--wire", wire]);
    }
    c.args(opts)
        .arg("--")
        .args(cmd)
        .current_dir(root())
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .env_remove("RAWQ_EMU_TX_ERROR")
        .env("RAWQ_EMU_STATS", stats);
    c
}

fn exe(name: &str) -> String {
    support::example(name).to_str().unwrap().to_owned()
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rawq-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits for `child` up to `limit`; kills it (by its pid) past that.
fn wait_for(mut child: Child, limit: Duration) -> Output {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if child.try_wait().ok().flatten().is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    child.wait_with_output().expect("output")
}

/// A counter of the device model (`RAWQ_EMU_STATS`).
fn counter(stats: &Path, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(stats).ok()?;
    let at = text.find(&format!(" {field}: "))? + field.len() + 3;
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
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
        "20000",
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
    const N: u64 = 20_000;
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
    const N: u64 = 16_000;
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
    // Spread: every queue received (pktgen's last per-queue rows, -v).
    let per_queue = per_queue_rx(&out);
    assert_eq!(per_queue.len(), 4, "{}", text(&out));
    assert!(per_queue.iter().all(|&n| n > 0), "{per_queue:?}");
    assert_eq!(per_queue.iter().sum::<u64>(), N, "{per_queue:?}");
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
    // The emulator fails the 3000th send WQE of the queue with a local protection error CQE
    // (as a bad lkey would); libmlx5 reports it, rawq moves the QP through RESET back to RTS
    // (ibv_modify_qp) and sends on.
    let (out, stats) = loopback_txrx("emuverr", N, &[], &[("RAWQ_EMU_TX_ERROR", "3000")]);
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
    // Counts add up: what pktgen posted = what the device sent + the error + what was flushed.
    assert_eq!(
        num(&s, "tx.packets"),
        model("tx_frames") + num(&s, "tx.errors") + num(&s, "tx.drops"),
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
