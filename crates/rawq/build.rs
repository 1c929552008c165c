//! Build script. With feature `mlx5`: generates bindings for `infiniband/mlx5dv.h` (the
//! `mlx5dv_*` control functions and the structures they fill), reusing rdma-sys's `ibv_*`
//! types, and links libmlx5. Without it: does nothing, so rawq builds with no rdma-core.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "verbs")]
    verbs_inline();
    #[cfg(feature = "mlx5")]
    mlx5::generate();
}

/// With feature `verbs`: compiles the `verbs.h` inline wrappers rawq calls from the installed
/// header (src/ibverbs/c/inline.c says why rdma-sys's Rust versions are not used).
#[cfg(feature = "verbs")]
fn verbs_inline() {
    println!("cargo:rerun-if-changed=src/ibverbs/c/inline.c");
    cc::Build::new()
        .file("src/ibverbs/c/inline.c")
        .warnings(true)
        .compile("rawq_verbs_inline");
}

#[cfg(feature = "mlx5")]
mod mlx5 {
    use std::path::PathBuf;

    /// Where mlx5dv.h lives (override with RAWQ_MLX5DV_INCLUDE=<dir containing infiniband/>).
    fn include_dir() -> PathBuf {
        println!("cargo:rerun-if-env-changed=RAWQ_MLX5DV_INCLUDE");
        std::env::var_os("RAWQ_MLX5DV_INCLUDE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/include"))
    }

    pub fn generate() {
        let inc = include_dir();
        let header = inc.join("infiniband/mlx5dv.h");
        if !header.exists() {
            panic!(
                "feature `mlx5` needs {} (install rdma-core's libibverbs-dev / rdma-core-devel, \
                 or build with --no-default-features --features verbs,xdp)",
                header.display()
            );
        }
        println!("cargo:rerun-if-changed={}", header.display());
        println!("cargo:rustc-link-lib=mlx5");

        let bindings = bindgen::Builder::default()
            .header(header.to_string_lossy())
            .clang_arg(format!("-I{}", inc.display()))
            // The control path: query, create CQ/WQ with mlx5 attributes, expose ring memory.
            .allowlist_function("mlx5dv_is_supported")
            .allowlist_function("mlx5dv_query_device")
            .allowlist_function("mlx5dv_create_cq")
            .allowlist_function("mlx5dv_create_wq")
            .allowlist_function("mlx5dv_init_obj")
            .allowlist_type("mlx5dv_context")
            .allowlist_type("mlx5dv_cq_init_attr")
            .allowlist_type("mlx5dv_wq_init_attr")
            .allowlist_type("mlx5dv_obj")
            .allowlist_type("mlx5dv_qp")
            .allowlist_type("mlx5dv_cq")
            .allowlist_type("mlx5dv_rwq")
            // Enums whose constants rawq uses (generated as plain consts).
            .allowlist_type("mlx5dv_context_flags")
            .allowlist_type("mlx5dv_context_comp_mask")
            .allowlist_type("mlx5dv_cq_init_attr_mask")
            .allowlist_type("mlx5dv_cqe_comp_res_format")
            .allowlist_type("mlx5dv_wq_init_attr_mask")
            .allowlist_type("mlx5dv_obj_type")
            .allowlist_type("mlx5dv_qp_comp_mask")
            .allowlist_var("MLX5_RCV_DBR|MLX5_SND_DBR")
            // The ibv_* types come from rdma-sys so both crates agree on them.
            .blocklist_type("ibv_.*")
            .blocklist_function("ibv_.*")
            .blocklist_type("_ibv_.*|_compat_ibv_.*|__pthread.*|pthread_.*|__atomic_wide_counter.*")
            // bindgen gets this packed layout wrong (20 bytes, not 16); the data path defines
            // its ring formats itself as byte views.
            .blocklist_type("mlx5_wqe_ctrl_seg")
            .raw_line("use rdma_sys::*;")
            .default_enum_style(bindgen::EnumVariation::Consts)
            .prepend_enum_name(false)
            .derive_default(true)
            .generate_comments(false)
            .layout_tests(true)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .generate()
            .expect("bindgen failed on infiniband/mlx5dv.h (is libclang installed?)");
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("mlx5dv.rs");
        bindings
            .write_to_file(&out)
            .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    }
}
