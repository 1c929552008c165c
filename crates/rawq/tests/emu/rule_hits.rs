//! Flow counters on the emulated ConnectX, judged by rdma-core itself: tests/c/flow_counters.c
//! calls `ibv_create_counters`, `ibv_attach_counters_point_flow`, `ibv_create_flow` with an
//! `IBV_FLOW_SPEC_ACTION_COUNT` spec, `ibv_read_counters` and `ibv_destroy_counters` through the
//! unmodified libibverbs + libmlx5 under `scripts/emu.sh`, so the emulator's ioctl uAPI
//! (emu/src/cmd/counters.rs) and its flow binding (emu/src/cmd/flow.rs) answer a vendor
//! library, not rawq. (rawq's own use: tests/emu/rules_runtime.rs.)
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::collections::HashMap;

use support::emu::{emu_sh, serial, tempdir, text};

#[test]
fn flow_counters_through_libibverbs_count_each_flows_frames() {
    let _one = serial();
    let dir = tempdir("rule-hits-oracle");
    let root = support::repo_root();
    let exe = dir.join("flow_counters");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&cc)
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(root.join("crates/rawq/tests/c/flow_counters.c"))
        .args(["-libverbs", "-lmlx5"])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run the C compiler `{cc}` ({e}): install build-essential")
        });
    assert!(
        built.status.success(),
        "building tests/c/flow_counters.c (needs libibverbs-dev):\n{}",
        text(&built)
    );
    let out = emu_sh(
        None,
        Some(120),
        &[],
        &[exe.to_str().unwrap()],
        &dir.join("model.stats"),
    )
    .output()
    .expect("run scripts/emu.sh");
    let all = text(&out);
    assert!(out.status.success(), "flow_counters probe failed:\n{all}");
    let got: HashMap<String, i64> = all
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect();
    let (einval, ebusy) = (libc::EINVAL as i64, libc::EBUSY as i64);
    for (name, want) in [
        ("create", 0),
        ("attach_a", 0),
        ("attach_d", 0),
        ("attach_b", 0),
        // uverbs_std_types_counters.c: READ of an object no flow uses.
        ("read_unbound", einval),
        // libmlx5 verbs.c allocate_flow_counters_descriptions: nothing attached.
        ("flow_undescribed", einval),
        // The model counts frames, not bytes: a BYTES description is refused.
        ("flow_bytes", libc::EOPNOTSUPP as i64),
        ("flow_a", 0),
        ("flow_d", 0),
        ("zero_a_rc", 0),
        ("zero_a_0", 0),
        ("zero_a_1", 0),
        // mlx5 counters.c mlx5_ib_read_counters: index 1 needs two values.
        ("read_short", einval),
        // libmlx5 mlx5_attach_counters_point_flow: bound already.
        ("attach_bound", ebusy),
        // ib_destroy_usecnt: a flow uses it.
        ("destroy_bound", ebusy),
        ("received", 20),
        ("a_rc", 0),
        // PACKETS was described at index 1: index 0 stays 0.
        ("a_0", 0),
        ("a_1", 20),
        ("d_rc", 0),
        // The drop rule counts what it dropped; frames to 9004 count for no rule.
        ("d_0", 12),
        // A second flow on the bound object: both count into it (16); the one left after the
        // second goes keeps the object bound and its count.
        ("flow_d2", 0),
        ("received_d2", 1),
        ("d2_rc", 0),
        ("d2_0", 16),
        ("destroy_flow_d2", 0),
        ("d3_rc", 0),
        ("d3_0", 16),
        ("destroy_flow_a", 0),
        ("read_after_flow", einval),
        ("flow_a_again", 0),
        ("received_again", 3),
        ("again_a_rc", 0),
        ("again_a_0", 0),
        // One hardware counter per object (mlx5_ib_flow_counters_set_data creates it once):
        // 21 before the flow went, 3 after.
        ("again_a_1", 24),
        ("destroy_flow_a2", 0),
        ("destroy_flow_d", 0),
        ("destroy_a", 0),
        ("destroy_d", 0),
        ("destroy_u", 0),
        ("destroy_b", 0),
    ] {
        assert_eq!(got.get(name), Some(&want), "{name}:\n{all}");
    }
    // Every object destroyed by the program itself, none left to the close of its file.
    assert_eq!(
        support::emu::last_counter(&dir.join("model.stats"), "counters_left_at_close"),
        Some(0)
    );
}
