//! Shared by the emulator's integration tests: run a command under `scripts/emu.sh`, build a
//! C program against Debian's libibverbs + libmlx5.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .expect("the workspace root (crates/emu/../..)")
}

/// Runs `scripts/emu.sh OPTS -- CMD...` with extra environment. The launcher builds the
/// library first (`cargo test` does not rebuild the cdylib of the crate under test).
pub fn emu(opts: &[&str], cmd: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new("bash");
    c.arg(root().join("scripts/emu.sh"))
        .args(opts)
        .arg("--")
        .args(cmd)
        .current_dir(root())
        .env_remove("LD_PRELOAD");
    c.env_remove("RAWQ_EMU_LIB");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output()
        .unwrap_or_else(|e| panic!("cannot run scripts/emu.sh: {e}"))
}

/// Compiles `src` (in emu/tests) against libibverbs + libmlx5 into the test's temp dir.
pub fn compile(src: &str, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let out = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(src);
    let o = Command::new(&cc)
        .args(["-O1", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .args(["-libverbs", "-lmlx5"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} ({e}): install build-essential"));
    assert!(
        o.status.success(),
        "{cc} failed on {} (install libibverbs-dev):\n{}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `name value` lines as a map (later lines with the same name win).
pub fn lines(out: &str) -> BTreeMap<String, i64> {
    out.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The model counters line `RAWQ_EMU_STATS` wrote: `field` from it.
pub fn counter(stats: &str, field: &str) -> Option<u64> {
    let line = stats
        .lines()
        .rev()
        .find(|l| l.contains("rawq-emu counters"))?;
    let at = line.find(&format!(" {field}: "))? + field.len() + 3;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}
