//! Device-model fidelity on the emulated ConnectX (issue 18, audit items 4 and 5): behaviours
//! the model and the emulator must take from the vendor sources, each checked through the
//! unmodified libibverbs + libmlx5 (a C probe under `scripts/emu.sh`) or through rawq.
//! Needs the examples built (`cargo build --all-features -p rawq-tools`) and the rdma-core
//! headers (libibverbs-dev) for the probe.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::collections::HashMap;
use std::path::Path;

use support::emu::{emu_sh, last_counter, serial, tempdir, text};

/// Runs `cmd` under `scripts/emu.sh OPTS`; its output and whether it succeeded.
fn on_emu(opts: &[&str], cmd: &[&str], dir: &Path) -> (bool, String) {
    let out = emu_sh(None, Some(120), opts, cmd, &dir.join("model.stats"))
        .output()
        .expect("run scripts/emu.sh");
    (out.status.success(), text(&out))
}

/// Builds tests/c/NAME.c (linked with libibverbs and libmlx5) into `dir`.
fn probe(name: &str, dir: &Path) -> std::path::PathBuf {
    let root = support::repo_root();
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&cc)
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(root.join(format!("crates/rawq/tests/c/{name}.c")))
        .args(["-libverbs", "-lmlx5"])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run the C compiler `{cc}` ({e}): install build-essential")
        });
    assert!(
        built.status.success(),
        "building the {name} probe (needs libibverbs-dev):\n{}",
        text(&built)
    );
    exe
}

/// Builds tests/c/stride_caps.c and runs it on the emulated NIC with `opts`: its `name value`
/// lines.
fn stride_probe(opts: &[&str]) -> HashMap<String, i64> {
    let dir = tempdir("fidelity-strides");
    let exe = probe("stride_caps", &dir);
    let (ok, out) = on_emu(opts, &[exe.to_str().unwrap()], &dir);
    assert!(ok, "stride probe with {opts:?} failed:\n{out}");
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// The kernel advertises 2^3 strides per WQE as the minimum only when the device has
/// `ext_stride_num_range`, 2^9 otherwise (Linux drivers/infiniband/hw/mlx5/main.c,
/// `mlx5_ib_query_device`, striding_rq_caps), and refuses a WQ below the minimum with EINVAL
/// (qp.c, `prepare_user_rq`). The emulator models both devices (`--ext-stride-range on|off`).
#[test]
fn striding_caps_follow_ext_stride_num_range() {
    let _one = serial();
    let ext = stride_probe(&[]);
    assert_eq!(ext.get("min_log_strides"), Some(&3), "{ext:?}");
    assert_eq!(ext.get("max_log_strides"), Some(&16), "{ext:?}");
    assert_eq!(ext.get("create_3"), Some(&0), "{ext:?}");
    assert_eq!(ext.get("create_9"), Some(&0), "{ext:?}");
    let base = stride_probe(&["--ext-stride-range", "off"]);
    assert_eq!(base.get("min_log_strides"), Some(&9), "{base:?}");
    assert_eq!(base.get("max_log_strides"), Some(&16), "{base:?}");
    assert_eq!(
        base.get("create_3"),
        Some(&(libc::EINVAL as i64)),
        "{base:?}"
    );
    assert_eq!(base.get("create_9"), Some(&0), "{base:?}");
}

/// rawq's striding RQ (one pool buffer per stride, at most 16 strides) is valid on a device
/// with `ext_stride_num_range`; on one without it (at least 512 strides per WQE) rawq refuses
/// it before creating anything, saying why and what to use instead.
#[test]
fn rawq_striding_rq_on_a_device_without_ext_stride_range_is_refused_clearly() {
    let _one = serial();
    let dir = tempdir("fidelity-rawq-strides");
    let pktgen = support::example("pktgen");
    let args = [
        pktgen.to_str().unwrap(),
        "-b",
        "dv",
        "-d",
        "mlx5_0",
        "--txrx",
        "-n",
        "100",
        "--rq",
        "striding",
    ];
    let (ok, out) = on_emu(&[], &args, &dir);
    assert!(ok, "striding RQ with ext_stride_num_range:\n{out}");
    let (ok, out) = on_emu(&["--ext-stride-range", "off"], &args, &dir);
    assert!(
        !ok,
        "a 2^3-stride RQ was created on a 2^9-minimum device:\n{out}"
    );
    assert!(
        out.contains("2^9") && out.contains("ext_stride_num_range") && out.contains("--rq cyclic"),
        "{out}"
    );
}

/// The minimum inline mode is the device's, independent of the part it claims
/// (`--min-inline l2 --part cx5`: a ConnectX-5 id in a mode demanding the L2 header, as some VF
/// / e-switch setups do; the kernel reports it in `eth_min_inline`, mlx5_ib main.c
/// `mlx5_ib_alloc_ucontext`, which mlx5dv does not expose). rawq guesses "none" from the
/// ConnectX-5 id; the device refuses those sends (`MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`), and
/// rawq says so, naming RAWQ_DV_MIN_INLINE=18; with it set, the same run passes.
#[test]
fn wrong_min_inline_guess_is_reported_and_the_override_fixes_it() {
    let _one = serial();
    let dir = tempdir("fidelity-inline");
    let pktgen = support::example("pktgen");
    let args = [
        pktgen.to_str().unwrap(),
        "-b",
        "dv",
        "-d",
        "mlx5_0",
        "--txrx",
        "-n",
        "100",
    ];
    let opts = ["--min-inline", "l2", "--part", "cx5"];
    let (_, out) = on_emu(&opts, &args, &dir);
    assert!(
        out.contains("0 packets"),
        "sends without the inline header went out:\n{out}"
    );
    assert!(
        out.contains("RAWQ_DV_MIN_INLINE=18") && out.contains("inline L2 header"),
        "{out}"
    );
    let out = emu_sh(None, Some(120), &opts, &args, &dir.join("model.stats"))
        .env("RAWQ_DV_MIN_INLINE", "18")
        .output()
        .expect("run scripts/emu.sh");
    let all = text(&out);
    assert!(out.status.success(), "with the override:\n{all}");
    assert!(
        all.contains("min inline 18 (set by RAWQ_DV_MIN_INLINE)")
            && all.contains("tx: 100 packets"),
        "{all}"
    );
}

/// A CQ created with `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` does not overrun (the kernel sets the
/// CQ context's `oi` bit: Linux drivers/infiniband/hw/mlx5/cq.c `mlx5_ib_create_cq`): four
/// send completions into a 2-entry CQ nobody polls are all written and no CQ error is raised;
/// without the flag the same CQ overruns at the third.
#[test]
fn ignore_overrun_cq_takes_every_completion() {
    let _one = serial();
    let dir = tempdir("fidelity-overrun");
    let exe = probe("cq_overrun", &dir);
    for (flag, overruns, cqes) in [("0", 1, 2), ("1", 0, 4)] {
        let stats = dir.join(format!("model-{flag}.stats"));
        let out = emu_sh(None, Some(120), &[], &[exe.to_str().unwrap(), flag], &stats)
            .output()
            .expect("run scripts/emu.sh");
        let all = text(&out);
        assert!(out.status.success(), "flag {flag}:\n{all}");
        assert_eq!(
            (
                last_counter(&stats, "cq_overruns"),
                last_counter(&stats, "tx_cqes")
            ),
            (Some(overruns), Some(cqes)),
            "IGNORE_OVERRUN {flag}:\n{all}\n{}",
            std::fs::read_to_string(&stats).unwrap_or_default()
        );
    }
}

/// Runs tests/c/mr_access.c in `mode` on the emulated NIC: its `name value` lines.
fn mr_probe(exe: &Path, dir: &Path, mode: &str) -> HashMap<String, i64> {
    let (ok, out) = on_emu(&[], &[exe.to_str().unwrap(), mode], dir);
    assert!(ok, "mr probe {mode} failed:\n{out}");
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// Memory registrations are the mkeys the kernel makes (Linux drivers/infiniband/hw/mlx5/mr.c
/// `set_mkc_access_pd_addr_fields`: the PD and the `lw` bit from IBV_ACCESS_LOCAL_WRITE;
/// `assign_mkey_variant`: a new 8-bit variant in every key), checked by the device on each
/// use: a receive into memory registered without LOCAL_WRITE, a send through a key of another
/// PD and a send through a key deregistered before the range was registered again each
/// complete with IBV_WC_LOC_PROT_ERR (the CQE syndrome MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
/// rdma-core providers/mlx5/cq.c `mlx5_handle_error_cqe`), through the unmodified libmlx5.
#[test]
fn mr_access_pd_and_stale_keys_are_protection_errors() {
    let _one = serial();
    let dir = tempdir("fidelity-mr");
    let exe = probe("mr_access", &dir);
    let prot = 4; // IBV_WC_LOC_PROT_ERR
    let good = mr_probe(&exe, &dir, "good");
    assert_eq!(
        (good.get("send"), good.get("recv"), good.get("bytes_ok")),
        (Some(&0), Some(&0), Some(&1)),
        "{good:?}"
    );
    let ro = mr_probe(&exe, &dir, "recv_ro");
    assert_eq!(
        (ro.get("send"), ro.get("recv")),
        (Some(&0), Some(&prot)),
        "receive into a region without LOCAL_WRITE: {ro:?}"
    );
    let pd = mr_probe(&exe, &dir, "send_pd");
    assert_eq!(pd.get("send"), Some(&prot), "a key of another PD: {pd:?}");
    let stale = mr_probe(&exe, &dir, "stale");
    assert_eq!(stale.get("keys_differ"), Some(&1), "{stale:?}");
    assert_eq!(stale.get("send"), Some(&prot), "a stale key: {stale:?}");
}

/// ibv_modify_qp on a RAW_PACKET QP takes only the attributes the IB core's transition table
/// gives that type (Linux drivers/infiniband/core/verbs.c `qp_state_table`,
/// `ib_modify_qp_is_ok`, which mlx5_ib_modify_qp in drivers/infiniband/hw/mlx5/qp.c calls and
/// answers EINVAL when it fails): RESET -> INIT needs the port and nothing else, the later
/// steps take nothing but the state (and a rate limit from RTR/RTS), IB_QP_CUR_STATE is no
/// RAW_PACKET attribute, and RESET -> ERR is no transition.
#[test]
fn modify_qp_takes_only_the_raw_packet_attributes_of_each_transition() {
    let _one = serial();
    let dir = tempdir("fidelity-modify-qp");
    let exe = probe("qp_modify", &dir);
    let (ok, out) = on_emu(&[], &[exe.to_str().unwrap()], &dir);
    assert!(ok, "qp_modify probe failed:\n{out}");
    let got: HashMap<String, i64> = out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect();
    let einval = libc::EINVAL as i64;
    for (name, want) in [
        ("rst2init_pkey_index", einval),
        ("rst2init_no_port", einval),
        ("rst2init", 0),
        ("init2rtr_qkey", einval),
        ("init2rtr", 0),
        ("rtr2rts_cur_state", einval),
        ("rtr2rts", 0),
        ("rts2rts_timeout", einval),
        ("rts2rts", 0),
        ("rst2err", einval),
        ("rst2rst", 0),
    ] {
        assert_eq!(got.get(name), Some(&want), "{name}:\n{out}");
    }
}

/// Multi-packet send is advertised only where the model honours it: enhanced MPW WQEs without
/// a minimum inline header (the model refuses them when the device asks for the L2 header
/// inline, and has no legacy MPW). The kernel reports `MLX5_IB_ALLOW_MPW` and
/// `MLX5_IB_SUPPORT_EMPW` from the device's capabilities (Linux drivers/infiniband/hw/mlx5/
/// main.c `mlx5_ib_query_device`), libmlx5 turns them into MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED and
/// _ENHANCED_MPW, and DPDK's PMD sends eMPW WQEs when both are set
/// (drivers/net/mlx5/linux/mlx5_os.c).
#[test]
fn multi_packet_send_is_advertised_only_where_the_model_takes_it() {
    let _one = serial();
    let dir = tempdir("fidelity-mpw");
    let exe = probe("mpw_caps", &dir);
    for (opts, want) in [(&[][..], 1), (&["--min-inline", "l2"][..], 0)] {
        let (ok, out) = on_emu(opts, &[exe.to_str().unwrap()], &dir);
        assert!(ok, "mpw probe with {opts:?} failed:\n{out}");
        for name in ["mpw_allowed", "enhanced_mpw"] {
            let line = format!("{name} {want}");
            assert!(
                out.lines().any(|l| l.trim() == line),
                "{opts:?}: want `{line}`:\n{out}"
            );
        }
    }
}
