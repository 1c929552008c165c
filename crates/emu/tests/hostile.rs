//! The emulated kernel under hostile input (issue 23): the five findings of an outside fuzzer,
//! each sent by `hostile_app.c` (raw write() commands on the command fd, memory unmapped or
//! protected under the device), on the debug and on the release build of the emulator. Each
//! must get the kernel's errno or be served as the kernel would, with the process alive and
//! the fd answering after it.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

const EINVAL: i64 = libc::EINVAL as i64;
const EFAULT: i64 = libc::EFAULT as i64;
const EIO: i64 = libc::EIO as i64;

/// `librawq_emu.so` of `profile`, built first (as `scripts/emu.sh` would; `cargo test` does
/// not rebuild the cdylib of the crate under test).
fn emu_lib(profile: &str) -> PathBuf {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(["build", "--quiet", "-p", "rawq-emu"])
        .current_dir(common::root());
    if profile == "release" {
        c.arg("--release");
    }
    let o = c.output().expect("run cargo build");
    assert!(
        o.status.success(),
        "cargo build -p rawq-emu ({profile}): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::root().join("target"));
    target.join(profile).join("librawq_emu.so")
}

/// Runs `hostile_app ARGS` on the emulator of `profile`; its lines, and stderr.
fn run(profile: &str, args: &[&str], env: &[(&str, &str)]) -> (BTreeMap<String, i64>, String) {
    let exe = common::compile("hostile_app.c", "hostile_app");
    let lib = emu_lib(profile);
    let lib = lib.to_str().expect("utf-8 path");
    let mut cmd = vec!["timeout", "120", exe.to_str().expect("utf-8 path")];
    cmd.extend_from_slice(args);
    let mut e = vec![("RAWQ_EMU_LIB", lib)];
    e.extend_from_slice(env);
    let out = common::emu(&[], &cmd, &e);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "hostile_app {args:?} on the {profile} emulator died ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let r = common::lines(&stdout);
    assert_eq!(r.get("done"), Some(&1), "no clean end:\n{stdout}\n{stderr}");
    (r, stderr)
}

fn check(r: &BTreeMap<String, i64>, expect: &[(&str, i64)]) {
    for (k, v) in expect {
        assert_eq!(r.get(*k), Some(v), "{k}: whole output {r:#?}");
    }
}

/// Each finding in its own process, so that one crash cannot hide another.
fn findings(profile: &str) {
    let (r, _) = run(profile, &["findings", "overflows"], &[]);
    check(
        &r,
        &[
            // ib_umem_get (doorbell page via mlx5_ib_db_map_user): a wrapping range is EINVAL.
            ("cq_db_wraps", EINVAL),
            ("cq_db_wraps_fd_works", 1),
            // copy_to_user of a response that wraps: EFAULT.
            ("legacy_resp_wraps", EFAULT),
            ("legacy_resp_wraps_fd_works", 1),
            ("ex_resp_wraps", EFAULT),
            ("ex_resp_wraps_fd_works", 1),
            // calc_total_bfregs: above MLX5_MAX_BFREGS is ENOMEM, none EINVAL.
            ("get_context_bfregs_huge", libc::ENOMEM as i64),
            ("get_context_bfregs_zero", EINVAL),
            ("get_context_bfregs_8", 0),
            ("close", 0),
        ],
    );
    let (r, _) = run(profile, &["findings", "huge_mr"], &[]);
    check(
        &r,
        &[
            // ib_umem_get: more than UINT_MAX pages is EINVAL; 1 TiB unmapped is EFAULT.
            ("reg_mr_2p52", EINVAL),
            ("reg_mr_1tib", EFAULT),
            ("huge_mr_fd_works", 1),
        ],
    );
    let (r, _) = run(profile, &["findings", "protections"], &[]);
    check(
        &r,
        &[
            // mlx5_ib_db_map_user pins the doorbell page for reading only.
            ("cq_db_readonly", 0),
            ("cq_db_readonly_destroy", 0),
            ("cq_db_none", EFAULT),
            // create_cq_user pins the CQE buffer with IB_ACCESS_LOCAL_WRITE.
            ("cq_buf_readonly", EFAULT),
            ("reg_mr_none", EFAULT),
            ("reg_mr_readonly_write", EFAULT),
            ("reg_mr_readonly_read", 0),
            ("protections_fd_works", 1),
        ],
    );
    let (r, _) = run(profile, &["findings", "unpinned"], &[]);
    check(
        &r,
        &[
            ("unpinned_setup", 0),
            ("unmapped_mr_address_reused", 0),
            ("unmapped_mr_send_completions", 1),
            ("unmapped_mr_send_ok", 1),
            ("freed_mr_send_completions", 1),
            ("freed_mr_send_ok", 1),
            ("cq_buf_mprotect", 0),
            ("readonly_cq_send_completions", 1),
            ("readonly_cq_send_ok", 1),
            ("unpinned_destroy_qp", 0),
            ("unpinned_dereg_mr", 0),
            ("unpinned_destroy_cq", 0),
            ("unpinned_fd_works", 1),
        ],
    );
    let (r, _) = run(profile, &["findings", "unread_events"], &[]);
    check(
        &r,
        &[
            ("events_setup", 0),
            ("events_async_pending", 1),
            ("events_destroy_cq", 0),
            ("events_destroy_channel", 0),
            ("events_get", 0),
            ("events_read_destroy_cq", 0),
            ("events_fd_works", 1),
        ],
    );
}

#[test]
fn the_five_findings_on_the_debug_emulator() {
    findings("debug");
}

#[test]
fn the_five_findings_on_the_release_emulator() {
    findings("release");
}

/// A command that panics inside the emulator (injected: `RAWQ_EMU_PANIC_IN`, debug builds)
/// fails with EIO alone: the next commands work, and close destroys every object of the file,
/// including the one the panicking command had made.
#[test]
fn a_panicking_command_fails_alone_and_leaks_nothing() {
    let (r, stderr) = run(
        "debug",
        &["panic"],
        &[("RAWQ_EMU_PANIC_IN", "CREATE_CQ"), ("RAWQ_EMU_DEBUG", "1")],
    );
    check(
        &r,
        &[
            ("panic_create_cq", EIO),
            ("after_panic_create_cq", 0),
            ("after_panic_fd_works", 1),
            ("close", 0),
        ],
    );
    let release = stderr
        .lines()
        .find(|l| l.contains("] release fd"))
        .unwrap_or_else(|| panic!("no release line:\n{stderr}"));
    // The CQ of the panicking CREATE_CQ was still in the table, and was destroyed.
    assert!(
        release.contains(": 1 objects destroyed, 0 left"),
        "{release}\n{stderr}"
    );
}

/// The project's own fuzzer (`hostile_fuzz.c`): libibverbs' own commands replayed mutated,
/// garbage in a victim's rings with doorbells, its MR pages unmapped and protected under the
/// device, random mmap offsets. Several seeds, each in its own process on the release
/// emulator (which users measure with; the debug one adds overflow checks, and runs one
/// seed). Every seed ends with a final ALLOC_PD that succeeds, a teardown that does not hang
/// (the program's watchdog), no fd growth and bounded resident memory across rounds.
fn fuzz(profile: &str, seed: u32) {
    let exe = common::compile("hostile_fuzz.c", "hostile_fuzz");
    let lib = emu_lib(profile);
    let seed = seed.to_string();
    let cmd = [
        "timeout",
        "120",
        exe.to_str().expect("utf-8 path"),
        seed.as_str(),
        "4",
        "20000",
        "2000",
    ];
    let out = common::emu(&[], &cmd, &[("RAWQ_EMU_LIB", lib.to_str().expect("utf-8"))]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "hostile_fuzz seed {seed} on the {profile} emulator died ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let r = common::lines(&stdout);
    check(
        &r,
        &[
            ("commands", 80_000),
            ("failures", 0),
            ("fd_growth", 0),
            ("done", 1),
        ],
    );
    assert!(r["recorded"] >= 20, "libibverbs' commands recorded: {r:#?}");
    assert!(r["ring_ops"] >= 1000, "{r:#?}");
    // Rounds 2..4 made and destroyed what round 1 did: the allocator's warm-up only.
    assert!(r["rss_growth_kb"] < 16 * 1024, "{r:#?}");
}

#[test]
fn fuzzing_leaves_the_release_emulator_usable() {
    for seed in [1, 2, 3, 4] {
        fuzz("release", seed);
    }
}

#[test]
fn fuzzing_leaves_the_debug_emulator_usable() {
    fuzz("debug", 5);
}
