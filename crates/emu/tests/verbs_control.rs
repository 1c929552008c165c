//! An ordinary verbs program (`verbs_app.c`, Debian's libibverbs + libmlx5, unmodified) on the
//! emulated ConnectX: every control verb a RAW_PACKET application uses, the errno the kernel
//! gives for bad requests, and a data path where libmlx5 writes the WQEs, the device model
//! loops the frames back, a flow rule steers them and libmlx5 parses the CQEs; a completion
//! event arrives on the channel in the kernel's format.

mod common;

use std::collections::BTreeMap;

fn run(opts: &[&str]) -> (BTreeMap<String, i64>, String) {
    let exe = common::compile("verbs_app.c", "verbs_app");
    let exe = exe.to_str().expect("utf-8 path");
    let out = common::emu(opts, &[exe], &[("RAWQ_EMU_STATS", "-")]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "verbs_app failed:\n{stdout}\n{stderr}"
    );
    (common::lines(&stdout), stderr)
}

fn check(r: &BTreeMap<String, i64>, expect: &[(&str, i64)]) {
    for (k, v) in expect {
        assert_eq!(r.get(*k), Some(v), "{k}: whole output {r:#?}");
    }
}

const EINVAL: i64 = libc::EINVAL as i64;
const EFAULT: i64 = libc::EFAULT as i64;
const EBUSY: i64 = libc::EBUSY as i64;

#[test]
fn control_verbs_errnos_data_path_and_events() {
    let (r, stats) = run(&[]);
    check(
        &r,
        &[
            ("devices", 1),
            ("open", 0),
            ("is_mlx5", 1),
            // mlx5dv_query_device parses the mlx5 part of EX_QUERY_DEVICE.
            ("dv_empw", 1),
            ("dv_cqe_comp_max", 64),
            ("dv_striding_max_strides_log", 16),
            ("alloc_pd", 0),
            ("reg_mr", 0),
            ("reg_mr_unmapped", EFAULT),
            ("reg_mr_bad_access", EINVAL),
            ("comp_channel", 0),
            ("create_cq", 0),
            ("cq_cqe", 255),
            ("create_cq_huge", EINVAL),
            ("create_cq_bad_vector", EINVAL),
            ("create_qp", 0),
            ("qp_init", 0),
            ("qp_rtr", 0),
            ("qp_rts", 0),
            ("qp_reset_to_rts", EINVAL),
            ("qp_bad_port", EINVAL),
            ("create_flow", 0),
            ("destroy_cq_busy", EBUSY),
            ("destroy_qp_busy", EBUSY),
            // 8 frames sent, the 6 to UDP port 9000 steered back to the QP.
            ("send_completions", 8),
            ("recv_completions", 6),
            ("bad_completions", 0),
            ("recv_byte_len", 60),
            ("recv_payload_ok", 1),
            ("event_ready", 1),
            ("get_cq_event", 0),
            ("event_cq_matches", 1),
            ("create_striding_wq", 0),
            ("create_wq_vlan_strip", 0),
            ("modify_wq_vlan_strip_off", 0),
            ("create_wq_scatter_fcs", libc::EOPNOTSUPP as i64),
            ("create_ind_tbl", 0),
            ("create_rss_qp", 0),
            ("create_rss_qp_short_key", EINVAL),
            ("create_rss_qp_tcp_and_udp", EINVAL),
            ("destroy_ind_tbl_busy", EBUSY),
            ("destroy_wq_busy", EBUSY),
            // CQ overrun: IBV_EVENT_CQ_ERR (0) for that CQ on the async fd.
            ("async_ready", 1),
            ("async_event_type", 0),
            ("async_event_cq_matches", 1),
            ("destroy_qp3", 0),
            ("destroy_small_cq", 0),
            ("dup_is_cdev", 1),
            ("pd_after_dup_close", 0),
            ("destroy_rss_qp", 0),
            ("destroy_flow", 0),
            ("destroy_qp", 0),
            ("destroy_cq", 0),
            ("create_cq_closed_channel", libc::EBADF as i64),
            ("dereg_mr", 0),
            ("dealloc_pd", 0),
            ("close", 0),
            ("done", 1),
        ],
    );
    assert!(!r.contains_key("post_send_failed") && !r.contains_key("post_recv_failed"));
    // ibv_query_rt_values_ex reads the clock page: 20 ms at 156.25 MHz is 3.1e6 ticks; the
    // bounds only say it ticks at a clock's pace (the sleep may run long on a busy machine).
    assert_eq!(r.get("rt_values"), Some(&0));
    let d = r["clock_delta_ticks"];
    assert!(
        (1_500_000..1_000_000_000).contains(&d),
        "clock advanced {d} ticks"
    );
    // The model saw what libmlx5 posted: 9 frames out on the first QP, 6 of them steered in;
    // then the overrun CQ's sends.
    assert_eq!(common::counter(&stats, "rx_frames"), Some(6), "{stats}");
    assert!(
        common::counter(&stats, "cq_overruns").unwrap_or(0) >= 1,
        "{stats}"
    );
}

#[test]
fn connectx4_lx_inline_l2_header_send_path() {
    // eth_min_inline = L2: libmlx5 copies the 18-byte L2 header into the WQE's Ethernet
    // segment; the model demands it and must parse it.
    let (r, stats) = run(&["--min-inline", "l2"]);
    check(
        &r,
        &[
            ("send_completions", 8),
            ("recv_completions", 6),
            ("bad_completions", 0),
            ("recv_payload_ok", 1),
            ("done", 1),
        ],
    );
    assert_eq!(common::counter(&stats, "tx_error_cqes"), Some(0), "{stats}");
}

#[test]
fn send_errors_and_a_receive_length_error_recovered_through_modify_qp() {
    let exe = common::compile("recover.c", "recover");
    let out = common::emu(
        &[],
        &[exe.to_str().unwrap()],
        &[("RAWQ_EMU_STATS", "-"), ("RAWQ_EMU_TX_ERROR", "3")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stats = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "recover failed:\n{stdout}\n{stats}");
    let r = common::lines(&stdout);
    check(
        &r,
        &[
            ("rts", 0),
            ("flow", 1),
            // The injected fault: sends 0..2 complete, 3 fails with a protection error
            // (IBV_WC_LOC_PROT_ERR), 4..7 are flushed; what was sent arrives.
            ("p1_send_ok", 3),
            ("p1_error", 1),
            ("p1_error_status", 4),
            ("p1_flushed", 4),
            ("p1_recv_ok", 3),
            // ibv_modify_qp RESET -> INIT -> RTR -> RTS brings the QP back.
            ("reset", 0),
            ("init2", 0),
            ("rtr2", 0),
            ("rts2", 0),
            // Traffic resumes; a 64-byte receive buffer for a 100-byte frame is a local
            // length error (IBV_WC_LOC_LEN_ERR), and the RQ keeps going.
            ("p2_send_ok", 8),
            ("p2_len_error", 1),
            ("p2_recv_ok", 7),
            ("p2_error", 0),
            // An unknown lkey, then an address outside the MR: protection errors, nothing
            // sent; after a reset traffic flows again.
            ("p3_recovered", 1),
            ("p3_error", 1),
            ("p3_error_status", 4),
            ("p3_recv_ok", 0),
            ("p4_recovered", 1),
            ("p4_error", 1),
            ("p4_error_status", 4),
            ("p4_recv_ok", 0),
            ("p5_recovered", 1),
            ("p5_send_ok", 2),
            ("p5_recv_ok", 2),
            ("done", 1),
        ],
    );
    assert_eq!(common::counter(&stats, "tx_error_cqes"), Some(3), "{stats}");
    assert_eq!(common::counter(&stats, "tx_flushed"), Some(4), "{stats}");
    assert_eq!(common::counter(&stats, "rx_error_cqes"), Some(1), "{stats}");
}

#[test]
fn two_devices_in_one_process_cabled_to_each_other() {
    let exe = common::compile("pair_app.c", "pair_app");
    let out = common::emu(&["--pair"], &[exe.to_str().unwrap()], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pair_app failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check(
        &common::lines(&stdout),
        &[
            ("devices", 2),
            ("open_a", 0),
            ("open_b", 0),
            ("a_sent", 32),
            // The cable: what mlx5_0 sends reaches mlx5_1's flow, and does not loop back.
            ("b_received", 32),
            ("a_received", 0),
        ],
    );
    let bad = common::emu(&["--pair", "--wire", "lo"], &["true"], &[]);
    assert!(!bad.status.success(), "--pair with --wire must be refused");
}

#[test]
fn rss_qp_spreads_sixteen_flows_over_four_wqs_every_frame_once() {
    let exe = common::compile("rss_app.c", "rss_app");
    let out = common::emu(&[], &[exe.to_str().unwrap()], &[("RAWQ_EMU_STATS", "-")]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stats = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "rss_app failed:\n{stdout}\n{stats}");
    let r = common::lines(&stdout);
    check(
        &r,
        &[
            ("rss_ready", 1),
            // 16 flows x 8 frames: each arrives once, each flow on one queue (Toeplitz over
            // the addresses and UDP ports, with the QP's key), and all four queues are used.
            ("received", 128),
            ("split_flows", 0),
            ("queues_used", 4),
            ("bad_status", 0),
            ("done", 1),
        ],
    );
    let sum: i64 = (0..4).map(|q| r[&format!("queue{q}")]).sum();
    assert_eq!(sum, 128);
    assert_eq!(common::counter(&stats, "rx_frames"), Some(128), "{stats}");
}
