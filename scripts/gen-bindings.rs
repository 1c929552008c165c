//! Generates rawq's committed rdma-core bindings (run through scripts/gen-bindings.sh, which
//! builds this file against the `bindgen` crate in a throw-away project).
//!
//! Usage: gen-bindings <include dir containing infiniband/> <output dir>
//! Writes <output dir>/verbs.rs and <output dir>/mlx5dv.rs.
//!
//! The allowlists name what rawq uses; bindgen adds what those refer to. Exported library
//! functions become one table per library (bindgen's dynamic loading: a struct of function
//! pointers filled from a `libloading::Library`), so nothing links libibverbs or libmlx5.
//! verbs.h's `static inline` functions are not exported; rawq writes them in Rust
//! (src/ibverbs/ffi/mod.rs).

use bindgen::{Builder, EnumVariation};
use std::path::PathBuf;

/// Exported libibverbs functions rawq calls (besides the `static inline` ones it writes itself).
const VERBS_FUNCTIONS: &[&str] = &[
    "ibv_get_device_list",
    "ibv_free_device_list",
    "ibv_get_device_name",
    "ibv_open_device",
    "ibv_close_device",
    "ibv_query_device",
    "ibv_query_port",
    "ibv_query_gid",
    "ibv_alloc_pd",
    "ibv_dealloc_pd",
    "ibv_reg_mr",
    "ibv_reg_mr_iova2",
    "ibv_dereg_mr",
    "ibv_create_comp_channel",
    "ibv_destroy_comp_channel",
    "ibv_create_cq",
    "ibv_destroy_cq",
    "ibv_get_cq_event",
    "ibv_ack_cq_events",
    "ibv_create_qp",
    "ibv_modify_qp",
    "ibv_destroy_qp",
    "ibv_get_async_event",
    "ibv_ack_async_event",
    "ibv_wc_status_str",
    "ibv_port_state_str",
];

/// verbs.h types rawq reads or fills (their members' types follow).
const VERBS_TYPES: &[&str] = &[
    "ibv_context",
    "verbs_context",
    "ibv_device",
    "ibv_device_attr_ex",
    "ibv_query_device_ex_input",
    "ibv_port_attr",
    "ibv_gid",
    "ibv_pd",
    "ibv_mr",
    "ibv_comp_channel",
    "ibv_cq",
    "ibv_cq_ex",
    "ibv_cq_init_attr_ex",
    "ibv_poll_cq_attr",
    "ibv_wc",
    "ibv_qp",
    "ibv_qp_init_attr",
    "ibv_qp_init_attr_ex",
    "ibv_qp_attr",
    "ibv_qp_cap",
    "ibv_send_wr",
    "ibv_recv_wr",
    "ibv_sge",
    "ibv_wq",
    "ibv_wq_init_attr",
    "ibv_wq_attr",
    "ibv_rwq_ind_table",
    "ibv_rwq_ind_table_init_attr",
    "ibv_rx_hash_conf",
    "ibv_flow",
    "ibv_flow_attr",
    "ibv_flow_eth_filter",
    "ibv_flow_spec_eth",
    "ibv_flow_spec_ipv4",
    "ibv_flow_spec_ipv4_ext",
    "ibv_flow_spec_ipv6",
    "ibv_flow_spec_tcp_udp",
    "ibv_flow_spec_action_tag",
    "ibv_flow_spec_action_drop",
    "ibv_flow_spec_counter_action",
    "ibv_counters",
    "ibv_counters_init_attr",
    "ibv_counter_attach_attr",
    "ibv_async_event",
    "ibv_values_ex",
];

/// Flag enums (bit masks): newtypes with `|` and `.0`.
const VERBS_BITFIELD_ENUMS: &[&str] = &[
    "ibv_access_flags",
    "ib_uverbs_access_flags",
    "ibv_create_cq_wc_flags",
    "ibv_device_cap_flags",
    "ibv_qp_attr_mask",
    "ibv_qp_create_flags",
    "ibv_qp_init_attr_mask",
    "ibv_raw_packet_caps",
    "ibv_rx_hash_fields",
    "ibv_rx_hash_function_flags",
    "ibv_send_flags",
    "ibv_values_mask",
    "ibv_wc_flags",
    "ibv_wq_attr_mask",
    "ibv_wq_flags",
    "ibv_wq_init_attr_mask",
    "ibv_cq_init_attr_mask",
];

/// Value enums: a module of constants and a `Type` alias each.
const VERBS_MODULE_ENUMS: &[&str] = &[
    "ibv_counter_description",
    "ibv_flow_attr_type",
    "ibv_flow_spec_type",
    "ibv_mtu",
    "ibv_port_state",
    "ibv_qp_state",
    "ibv_qp_type",
    "ibv_wc_opcode",
    "ibv_wc_status",
    "ibv_wq_state",
    "ibv_wq_type",
    "ibv_wr_opcode",
];

/// Exported libmlx5 functions rawq calls.
const MLX5_FUNCTIONS: &[&str] = &[
    "mlx5dv_is_supported",
    "mlx5dv_query_device",
    "mlx5dv_create_cq",
    "mlx5dv_create_wq",
    "mlx5dv_init_obj",
];

const MLX5_TYPES: &[&str] = &[
    "mlx5dv_context",
    "mlx5dv_cq_init_attr",
    "mlx5dv_wq_init_attr",
    "mlx5dv_obj",
    "mlx5dv_qp",
    "mlx5dv_cq",
    "mlx5dv_rwq",
    // Enums whose constants rawq uses (plain consts).
    "mlx5dv_context_flags",
    "mlx5dv_context_comp_mask",
    "mlx5dv_cq_init_attr_mask",
    "mlx5dv_cqe_comp_res_format",
    "mlx5dv_wq_init_attr_mask",
    "mlx5dv_obj_type",
    "mlx5dv_qp_comp_mask",
];

fn common(header: &std::path::Path, inc: &std::path::Path) -> Builder {
    Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{}", inc.display()))
        .generate_comments(false)
        .layout_tests(true)
        .derive_debug(false)
        .derive_copy(true)
        .derive_default(false)
        .prepend_enum_name(false)
        .size_t_is_usize(true)
        .opaque_type("pthread_.*")
        .allowlist_type("pthread_mutex_t|pthread_cond_t")
        .dynamic_link_require_all(true)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: gen-bindings <include dir> <output dir>");
        std::process::exit(2);
    }
    let inc = PathBuf::from(&args[1]);
    let out = PathBuf::from(&args[2]);

    let mut b = common(&inc.join("infiniband/verbs.h"), &inc)
        .dynamic_library_name("Verbs")
        .default_enum_style(EnumVariation::ModuleConsts);
    for f in VERBS_FUNCTIONS {
        b = b.allowlist_function(f);
    }
    for t in VERBS_TYPES {
        b = b.allowlist_type(t);
    }
    for e in VERBS_BITFIELD_ENUMS {
        b = b.allowlist_type(e).bitfield_enum(e);
    }
    for e in VERBS_MODULE_ENUMS {
        b = b.allowlist_type(e).constified_enum_module(e);
    }
    let b = b.rustified_enum("ibv_event_type").allowlist_type("ibv_event_type");
    b.generate()
        .expect("bindgen failed on infiniband/verbs.h (is libclang installed?)")
        .write_to_file(out.join("verbs.rs"))
        .expect("write verbs.rs");

    let mut b = common(&inc.join("infiniband/mlx5dv.h"), &inc)
        .dynamic_library_name("Mlx5dv")
        .default_enum_style(EnumVariation::Consts)
        .allowlist_var("MLX5_RCV_DBR|MLX5_SND_DBR")
        // The ibv_* types come from verbs.rs, so both agree.
        .blocklist_type("ibv_.*|_ibv_.*|_compat_ibv_.*|verbs_.*|pthread_.*|__pthread.*")
        .blocklist_function("ibv_.*")
        // bindgen gets this packed layout wrong (20 bytes, not 16); the data path defines its
        // ring formats itself as byte views.
        .blocklist_type("mlx5_wqe_ctrl_seg")
        .derive_default(true)
        .raw_line("use super::verbs::*;");
    for f in MLX5_FUNCTIONS {
        b = b.allowlist_function(f);
    }
    for t in MLX5_TYPES {
        b = b.allowlist_type(t);
    }
    b.generate()
        .expect("bindgen failed on infiniband/mlx5dv.h")
        .write_to_file(out.join("mlx5dv.rs"))
        .expect("write mlx5dv.rs");
}
