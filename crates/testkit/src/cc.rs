//! Small C programs as oracles: the vendor's own headers (rdma-core's `verbs.h`, `mlx5dv.h`)
//! judge rawq's layouts and byte writers. Used by integration tests (through `support`) and by
//! rawq's unit tests (rawq-testkit is its dev-dependency), so there is one copy of this code.
//!
//! No C compiler or headers is a test failure that says what to install, never a silent skip.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Compiles the C file `src` into the executable `out` with `flags`.
pub fn compile(src: &Path, out: &Path, flags: &[&str]) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).args(flags).arg("-o").arg(out).arg(src).output() {
        Err(e) => panic!(
            "cannot run the C compiler `{cc}` ({e}): install build-essential (or set CC); the \
             oracle tests also need the rdma-core headers (libibverbs-dev)"
        ),
        Ok(o) if !o.status.success() => panic!(
            "`{cc}` failed to build {} (are the rdma-core headers, libibverbs-dev, installed?):\n{}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => out.to_path_buf(),
    }
}

/// Compiles C source text into `dir/name` (the directory is created).
pub fn compile_text(dir: &Path, name: &str, text: &str, flags: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create the oracle directory");
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, text).expect("write the C source");
    compile(&src, &dir.join(name), flags)
}

/// Runs `exe` with `input` on its standard input and returns its standard output.
pub fn run(exe: &Path, input: &str) -> String {
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("oracle output");
    writer
        .join()
        .expect("writer thread")
        .expect("write the cases");
    assert!(out.status.success(), "{} failed", exe.display());
    String::from_utf8(out.stdout).expect("oracle output is UTF-8")
}

/// Builds and runs a C program that prints `name number` lines (sizes, offsets) and returns
/// them. `dir` is removed afterwards.
pub fn numbers(dir: &Path, text: &str) -> HashMap<String, usize> {
    let exe = compile_text(dir, "numbers", text, &["-Wall"]);
    let out = run(&exe, "");
    let _ = std::fs::remove_dir_all(dir);
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().parse().expect("a number")))
        .collect()
}
