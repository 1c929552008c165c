//! Build script: compiles the thin C interposer (the variadic libc entry points) and generates
//! the uverbs / mlx5 ABI structs from the installed kernel uapi headers
//! (`/usr/include/rdma/ib_user_verbs.h`, `/usr/include/rdma/mlx5-abi.h`), so every offset the
//! command decoder uses is the compiler's, not ours.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/interpose.c");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    // The interposer goes into the cdylib only: a test binary that links the rlib must keep
    // the real open/write/close. Hence no cargo metadata (no link into every dependent), a
    // whole-archive link of the cdylib, and a version script that exports the libc names
    // (rustc's own script would hide every C symbol).
    cc::Build::new()
        .file("src/interpose.c")
        .flag_if_supported("-fvisibility=default")
        .warnings(true)
        .cargo_metadata(false)
        .compile("rawq_emu_interpose");
    let archive = out_dir.join("librawq_emu_interpose.a");
    let exports = out_dir.join("exports.map");
    std::fs::write(
        &exports,
        "{ global: open; open64; __open_2; __open64_2; openat; openat64; stat; stat64; lstat; \
         lstat64; fstat; fstat64; write; ioctl; mmap; mmap64; munmap; close; socket; dup; dup2; \
         dup3; fcntl; fcntl64; };\n",
    )
    .expect("writing exports.map");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--whole-archive,{},--no-whole-archive",
        archive.display()
    );
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        exports.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-ldl");

    let header = "/usr/include/rdma/mlx5-abi.h";
    for h in [header, "/usr/include/rdma/ib_user_verbs.h"] {
        if !std::path::Path::new(h).exists() {
            panic!("rawq-emu needs {h} (install Debian's libibverbs-dev / rdma-core headers)");
        }
        println!("cargo:rerun-if-changed={h}");
    }
    let bindings = bindgen::Builder::default()
        .header_contents(
            "uapi.h",
            "#include <rdma/ib_user_verbs.h>\n#include <rdma/mlx5-abi.h>\n",
        )
        .allowlist_type("ib_uverbs_.*|mlx5_ib_.*|mlx5_packet_pacing_caps")
        .allowlist_var("IB_USER_VERBS_.*|IB_UVERBS_.*|MLX5_.*")
        .allowlist_type("ib_uverbs_flow_spec_type|mlx5_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .generate_comments(false)
        .layout_tests(true)
        .generate()
        .expect("bindgen failed on rdma/mlx5-abi.h (is libclang installed?)");
    let out = out_dir.join("uapi.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
