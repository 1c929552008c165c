//! Struct layouts against the C compiler.

use rdma_sys::*;

/// rdma-sys writes the unions of `ibv_send_wr` and `ibv_wc` by hand; the hot path depends on
/// them, so check them (and the other structs rawq fills) against the C compiler's view of
/// verbs.h.
#[test]
fn verbs_struct_layouts_match_the_c_compiler() {
    use std::mem::{offset_of, size_of};
    let dir = std::env::temp_dir().join(format!("rawq-verbs-sizes-{}", std::process::id()));
    let c = crate::cc_oracle::numbers(
        &dir,
        r#"#include <stdio.h>
#include <stddef.h>
#include <infiniband/verbs.h>
#define S(t) printf(#t " %zu\n", sizeof(struct t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
int main(void) {
    S(ibv_send_wr); S(ibv_recv_wr); S(ibv_wc); S(ibv_sge); S(ibv_flow_attr);
    S(ibv_qp_init_attr); S(ibv_qp_init_attr_ex); S(ibv_wq_init_attr); S(ibv_qp_attr);
    S(ibv_rwq_ind_table_init_attr); S(ibv_rx_hash_conf);
    O(ibv_send_wr, send_flags); O(ibv_send_wr, wr); O(ibv_send_wr, next);
    O(ibv_wc, status); O(ibv_wc, byte_len); O(ibv_wc, wc_flags); O(ibv_wc, vendor_err);
    O(ibv_qp_init_attr_ex, rx_hash_conf); O(ibv_qp_attr, port_num);
    return 0;
}
"#,
    );
    let rust = [
        ("ibv_send_wr", size_of::<ibv_send_wr>()),
        ("ibv_recv_wr", size_of::<ibv_recv_wr>()),
        ("ibv_wc", size_of::<ibv_wc>()),
        ("ibv_sge", size_of::<ibv_sge>()),
        ("ibv_flow_attr", size_of::<ibv_flow_attr>()),
        ("ibv_qp_init_attr", size_of::<ibv_qp_init_attr>()),
        ("ibv_qp_init_attr_ex", size_of::<ibv_qp_init_attr_ex>()),
        ("ibv_wq_init_attr", size_of::<ibv_wq_init_attr>()),
        ("ibv_qp_attr", size_of::<ibv_qp_attr>()),
        (
            "ibv_rwq_ind_table_init_attr",
            size_of::<ibv_rwq_ind_table_init_attr>(),
        ),
        ("ibv_rx_hash_conf", size_of::<ibv_rx_hash_conf>()),
        (
            "ibv_send_wr.send_flags",
            offset_of!(ibv_send_wr, send_flags),
        ),
        ("ibv_send_wr.wr", offset_of!(ibv_send_wr, wr)),
        ("ibv_send_wr.next", offset_of!(ibv_send_wr, next)),
        ("ibv_wc.status", offset_of!(ibv_wc, status)),
        ("ibv_wc.byte_len", offset_of!(ibv_wc, byte_len)),
        ("ibv_wc.wc_flags", offset_of!(ibv_wc, wc_flags)),
        ("ibv_wc.vendor_err", offset_of!(ibv_wc, vendor_err)),
        (
            "ibv_qp_init_attr_ex.rx_hash_conf",
            offset_of!(ibv_qp_init_attr_ex, rx_hash_conf),
        ),
        ("ibv_qp_attr.port_num", offset_of!(ibv_qp_attr, port_num)),
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
}
