//! Runs the emulator crate's own tests (`cargo test -p rawq-emu`: its unit tests, the write()
//! decoder tests, and the libibverbs/libmlx5 programs in emu/tests) from the root's
//! `cargo test`, which builds only the root package.

use std::path::Path;
use std::process::Command;

#[test]
fn the_emulator_crate_tests_pass() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&cargo)
        .args(["test", "-p", "rawq-emu", "--quiet"])
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "cargo test -p rawq-emu failed:\n{text}"
    );
    // Every test binary ran something: unit tests, decoder, libibverbs programs.
    let passed: usize = text
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert!(passed >= 15, "only {passed} emulator tests ran:\n{text}");
}
