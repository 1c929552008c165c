//! Runs the device model crate's own tests (`cargo test -p rawq-model`: the hardware objects
//! driven through hand-built rings, faults, checksums and the Toeplitz hash) from the root's
//! `cargo test`, which builds only the root package.

use std::path::Path;
use std::process::{Command, Output};

fn cargo_test(extra: &[&str]) -> (Output, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&cargo)
        .args(["test", "-p", "rawq-model", "--quiet", "--"])
        .args(extra)
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn the_model_crate_tests_pass() {
    let (out, list) = cargo_test(&["--list"]);
    assert!(
        out.status.success(),
        "cargo test -p rawq-model -- --list failed:\n{list}"
    );
    let listed = list.lines().filter(|l| l.ends_with(": test")).count();
    assert!(listed > 0, "the model crate lists no tests:\n{list}");
    let (out, text) = cargo_test(&[]);
    assert!(
        out.status.success(),
        "cargo test -p rawq-model failed:\n{text}"
    );
    // Every test the crate lists ran and passed.
    let passed: usize = text
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert_eq!(
        passed, listed,
        "{passed} of {listed} model tests passed:\n{text}"
    );
}
