//! pktgen's and fwd's `--rq` / `--cqe-comp` (DPDK's mlx5 `mprq_en` / `rxq_cqe_comp_en`) on the
//! software device (`-b model`), and the combinations they refuse. The same options on the
//! emulated NIC (`-b dv`) are in `tests/emu/dv.rs`. Needs the examples built
//! (`cargo build --all-features -p rawq-tools`).
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::process::Command;

fn pktgen(args: &[&str]) -> (bool, String) {
    let o = Command::new(support::example("pktgen"))
        .args(args)
        .output()
        .expect("run pktgen");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn model_backend_every_rx_configuration_is_lossless() {
    for (rq, comp) in [
        ("cyclic", "off"),
        ("cyclic", "hash"),
        ("cyclic", "csum"),
        ("striding", "off"),
        ("striding", "csum"),
        ("striding:16", "off"),
        ("striding:16", "csum"),
    ] {
        let (ok, out) = pktgen(&[
            "-b",
            "model",
            "--txrx",
            "--seq",
            "-n",
            "20000",
            "--rq",
            rq,
            "--cqe-comp",
            comp,
        ]);
        assert!(ok, "{rq}/{comp}:\n{out}");
        assert!(
            out.contains("seq: 20000 sent, 20000 back, 0 lost"),
            "{rq}/{comp}:\n{out}"
        );
    }
}

#[test]
fn refused_combinations_say_why() {
    let (ok, out) = pktgen(&[
        "-b",
        "model",
        "--txrx",
        "-n",
        "10",
        "--rq",
        "striding",
        "--cqe-comp",
        "hash",
    ]);
    assert!(!ok && out.contains("stride index"), "{out}");
    let (ok, out) = pktgen(&["-b", "xdp", "-d", "lo", "-n", "1", "--rq", "striding"]);
    assert!(
        !ok && out.contains("options of -b dv and -b model"),
        "{out}"
    );
    let (ok, out) = pktgen(&["-b", "model", "-n", "1", "--rq", "striding:4"]);
    assert!(!ok && out.contains("striding:16"), "{out}");
    let (ok, out) = pktgen(&["-b", "model", "-n", "1", "--cqe-comp", "zip"]);
    assert!(!ok && out.contains("off, hash or csum"), "{out}");
    let o = Command::new(support::example("fwd"))
        .args([
            "-b",
            "model",
            "-d",
            "m0",
            "--rule",
            "udp dst-port 9000 -> queue 0",
            "--rq",
            "striding",
            "--cqe-comp",
            "hash",
            "-t",
            "0.1",
        ])
        .output()
        .expect("run fwd");
    let out = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && out.contains("stride index"), "{out}");
}
