//! One binary for every machine (issue 31 item 3): the tools link neither libibverbs nor
//! libmlx5, which rawq opens at run time when a dv or verbs port needs them. With the libraries
//! hidden (a mount namespace where each of their files reads as empty), `-b dv` and `-b verbs`
//! fail saying what to install, and AF_XDP (and the model backend) still run.

use rawq_testkit as support;

use std::ffi::CString;
use std::path::PathBuf;
use std::process::Command;

use support::run::in_ns;
use support::NetnsPair;

/// Set in the copy of this test that runs inside the mount namespace.
const INNER: &str = "RAWQ_NO_RDMA_INNER";

/// The soname prefixes of the libraries hidden.
const LIBS: [&str; 2] = ["libibverbs.so", "libmlx5.so"];

#[test]
fn the_tools_link_no_rdma_library() {
    for tool in ["pktgen", "fwd"] {
        let exe = support::example(tool);
        let out = Command::new("ldd")
            .arg(&exe)
            .output()
            .expect("run ldd (part of libc-bin)");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ldd {}: {text}", exe.display());
        assert!(text.contains("libc.so"), "ldd said: {text}");
        for lib in ["libibverbs", "libmlx5"] {
            assert!(!text.contains(lib), "rawq-{tool} links {lib}:\n{text}");
        }
    }
}

/// Every file of the two libraries in the library directories (symlinks resolved to the files
/// they name), which the mount namespace covers.
fn library_files() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib"]
        .iter()
        .map(PathBuf::from)
        .collect();
    // Multiarch directories (/usr/lib/x86_64-linux-gnu) and libibverbs' provider directories.
    for d in dirs.clone() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p.join("libibverbs"));
                dirs.push(p);
            }
        }
    }
    let mut files = Vec::new();
    for d in dirs {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if LIBS.iter().any(|l| name.starts_with(l)) || name.starts_with("libmlx5-rdmav") {
                if let Ok(real) = std::fs::canonicalize(e.path()) {
                    files.push(real);
                }
            }
        }
    }
    files.sort();
    files.dedup();
    files
}

#[test]
fn without_rdma_libraries_dv_says_what_to_install_and_xdp_runs() {
    if std::env::var_os(INNER).is_some() {
        return inside();
    }
    let files = library_files();
    if files.is_empty() {
        // No rdma-core here: this machine is already the one the test wants.
        return inside();
    }
    let dir = support::emu::tempdir("nordma");
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let mut script = String::from("set -e\n");
    for f in &files {
        script.push_str(&format!(
            "mount --bind '{}' '{}'\n",
            empty.display(),
            f.display()
        ));
    }
    script.push_str("exec \"$@\"\n");
    let exe = std::env::current_exe().unwrap();
    let name = support::test_name(
        module_path!(),
        "without_rdma_libraries_dv_says_what_to_install_and_xdp_runs",
    );
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(&exe)
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return support::skip_or_fail(&format!("cannot run unshare ({e})")).unwrap_or(());
        }
    };
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if !out.status.success() && e.contains("unshare failed") {
        return support::skip_or_fail(&format!("no mount namespace here: {e}")).unwrap_or(());
    }
    assert!(out.status.success(), "inside the namespace:\n{o}\n{e}");
    // The copy inside really ran this test (libtest prints its name and "1 passed").
    assert!(o.contains("1 passed"), "inside the namespace:\n{o}\n{e}");
}

/// Inside the mount namespace: the libraries cannot be opened, the RDMA backends say so, the
/// model backend runs, and an AF_XDP pktgen sends over a veth pair.
fn inside() {
    for lib in ["libibverbs.so.1", "libmlx5.so.1"] {
        let c = CString::new(lib).unwrap();
        // SAFETY: dlopen with a valid name; a handle it returns is closed at once.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
        if !h.is_null() {
            // SAFETY: the handle just returned.
            unsafe { libc::dlclose(h) };
            panic!("{lib} still opens: the namespace hides nothing");
        }
    }
    for backend in ["dv", "verbs"] {
        let out = Command::new(support::example("pktgen"))
            .args(["-b", backend, "-d", "mlx5_0", "-n", "1", "--quiet"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "-b {backend} ran without libibverbs: {err}"
        );
        for hint in [
            "libibverbs.so.1",
            "libibverbs1 ibverbs-providers",
            "rdma-core",
            "scripts/emu.sh",
        ] {
            assert!(err.contains(hint), "-b {backend}: no `{hint}` in: {err}");
        }
    }
    // The model backend (the dv data path against the software device) never opens them.
    let out = Command::new(support::example("pktgen"))
        .args(["-b", "model", "--txrx", "-n", "100", "--quiet"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "-b model: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Some(p) = NetnsPair::new("xnordma") else {
        return;
    };
    let out = in_ns(&p.a, "pktgen")
        .args(["-b", "xdp", "-d", &p.veth_a, "-n", "200", "-t", "20"])
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "AF_XDP pktgen: {err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("pktgen's JSON ({e}): {err}"));
    assert_eq!(v["packets"].as_u64(), Some(200), "{v}");
}
