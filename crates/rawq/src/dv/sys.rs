//! The `infiniband/mlx5dv.h` bindings rawq uses: the `mlx5dv_*` control functions (from
//! libmlx5, opened at run time) and the structures they fill. Generated once and committed
//! (`crate::ibverbs::ffi::mlx5dv`, `scripts/gen-bindings.sh`); the `ibv_*` types are the verbs
//! bindings'.
//!
//! The layout assertions bindgen emits check every structure against what libclang computed
//! from the header when the bindings were generated; `tests::sizes_match_the_c_compiler`
//! checks the ones rawq relies on against the system C compiler where the headers exist.

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    unused_imports,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

pub use crate::ibverbs::ffi::mlx5dv::*;
pub use crate::ibverbs::ffi::{
    mlx5dv_create_cq, mlx5dv_create_wq, mlx5dv_init_obj, mlx5dv_is_supported, mlx5dv_query_device,
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Compiles and runs a tiny C program printing `sizeof`/`offsetof` of what rawq uses, and
    /// compares with the Rust bindings.
    #[test]
    fn sizes_match_the_c_compiler() {
        if !crate::ibverbs::tests::layout::rdma_headers_present("sizes_match_the_c_compiler") {
            return;
        }
        let dir = std::env::temp_dir().join(format!("rawq-mlx5dv-sizes-{}", std::process::id()));
        let c = crate::cc_oracle::numbers(
            &dir,
            r#"#include <stdio.h>
#include <stddef.h>
#include <infiniband/mlx5dv.h>
#define S(t) printf(#t " %zu\n", sizeof(struct t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
int main(void) {
    S(mlx5dv_qp); S(mlx5dv_cq); S(mlx5dv_rwq); S(mlx5dv_obj); S(mlx5dv_context);
    S(mlx5dv_cq_init_attr); S(mlx5dv_wq_init_attr);
    O(mlx5dv_qp, sq); O(mlx5dv_qp, bf); O(mlx5dv_qp, sqn); O(mlx5dv_cq, cqn);
    O(mlx5dv_rwq, stride); O(mlx5dv_obj, rwq); O(mlx5dv_context, striding_rq_caps);
    O(mlx5dv_cq_init_attr, cqe_size); O(mlx5dv_wq_init_attr, striding_rq_attrs);
    return 0;
}
"#,
        );
        let rust = [
            ("mlx5dv_qp", size_of::<mlx5dv_qp>()),
            ("mlx5dv_cq", size_of::<mlx5dv_cq>()),
            ("mlx5dv_rwq", size_of::<mlx5dv_rwq>()),
            ("mlx5dv_obj", size_of::<mlx5dv_obj>()),
            ("mlx5dv_context", size_of::<mlx5dv_context>()),
            ("mlx5dv_cq_init_attr", size_of::<mlx5dv_cq_init_attr>()),
            ("mlx5dv_wq_init_attr", size_of::<mlx5dv_wq_init_attr>()),
            ("mlx5dv_qp.sq", offset_of!(mlx5dv_qp, sq)),
            ("mlx5dv_qp.bf", offset_of!(mlx5dv_qp, bf)),
            ("mlx5dv_qp.sqn", offset_of!(mlx5dv_qp, sqn)),
            ("mlx5dv_cq.cqn", offset_of!(mlx5dv_cq, cqn)),
            ("mlx5dv_rwq.stride", offset_of!(mlx5dv_rwq, stride)),
            ("mlx5dv_obj.rwq", offset_of!(mlx5dv_obj, rwq)),
            (
                "mlx5dv_context.striding_rq_caps",
                offset_of!(mlx5dv_context, striding_rq_caps),
            ),
            (
                "mlx5dv_cq_init_attr.cqe_size",
                offset_of!(mlx5dv_cq_init_attr, cqe_size),
            ),
            (
                "mlx5dv_wq_init_attr.striding_rq_attrs",
                offset_of!(mlx5dv_wq_init_attr, striding_rq_attrs),
            ),
        ];
        assert_eq!(c.len(), rust.len(), "C program printed: {c:?}");
        for (name, r) in rust {
            assert_eq!(
                c.get(name),
                Some(&r),
                "{name}: C says {:?}, Rust {r}",
                c.get(name)
            );
        }
        // Spot checks of constants against the header's documented values.
        assert_eq!(MLX5_RCV_DBR, 0);
        assert_eq!(MLX5_SND_DBR, 1);
        assert_eq!(MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_RWQ, 0b1011);
        assert_eq!(MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW, 1 << 3);
        assert_eq!(MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX, 1 << 2);
    }
}
