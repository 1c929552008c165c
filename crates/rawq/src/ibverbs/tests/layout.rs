//! Struct layouts of the committed bindings (src/ibverbs/ffi/verbs.rs) against the C compiler.

use crate::ibverbs::ffi::*;
use std::mem::{offset_of, size_of};

/// Where rdma-core's headers are looked for (the C compiler's default include path).
pub(crate) const RDMA_HEADERS: &str = "/usr/include/infiniband";

/// Whether the rdma-core headers are installed; prints why a layout test is skipped if not
/// (rawq itself builds without them; only these checks need them).
pub(crate) fn rdma_headers_present(what: &str) -> bool {
    let there = std::path::Path::new(RDMA_HEADERS).join("verbs.h").exists();
    if !there {
        eprintln!(
            "skipped {what}: {RDMA_HEADERS} is absent (install libibverbs-dev / rdma-core-devel \
             to check the committed bindings against the C compiler)"
        );
    }
    there
}

/// `layout!(t, t.f, ...)`: the C lines printing `sizeof(struct t)` / `offsetof(struct t, f)`,
/// and the Rust bindings' numbers under the same names.
macro_rules! layout {
    ($( $t:ident $(. $f:ident)? ),* $(,)?) => {{
        let mut c = String::new();
        let mut rust: Vec<(String, usize)> = Vec::new();
        $( layout!(@one c rust $t $(. $f)?); )*
        (c, rust)
    }};
    (@one $c:ident $r:ident $t:ident) => {
        $c.push_str(concat!("S(", stringify!($t), ");\n"));
        $r.push((stringify!($t).to_string(), size_of::<$t>()));
    };
    (@one $c:ident $r:ident $t:ident . $f:ident) => {
        $c.push_str(concat!("O(", stringify!($t), ", ", stringify!($f), ");\n"));
        $r.push((
            concat!(stringify!($t), ".", stringify!($f)).to_string(),
            offset_of!($t, $f),
        ));
    };
}

/// Compiles a C program printing the header's numbers for `c` and compares them with `rust`.
pub(crate) fn check(header: &str, tag: &str, c: &str, rust: &[(String, usize)]) {
    let dir = std::env::temp_dir().join(format!("rawq-{tag}-sizes-{}", std::process::id()));
    let text = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <{header}>\n\
         #define S(t) printf(#t \" %zu\\n\", sizeof(struct t))\n\
         #define O(t, f) printf(#t \".\" #f \" %zu\\n\", offsetof(struct t, f))\n\
         int main(void) {{\n{c}return 0;\n}}\n"
    );
    let got = crate::cc_oracle::numbers(&dir, &text);
    assert_eq!(got.len(), rust.len(), "C program printed: {got:?}");
    let wrong: Vec<String> = rust
        .iter()
        .filter(|(name, r)| got.get(name) != Some(r))
        .map(|(name, r)| format!("{name}: C says {:?}, Rust {r}", got.get(name)))
        .collect();
    assert!(
        wrong.is_empty(),
        "layouts differ from {header}:\n{}",
        wrong.join("\n")
    );
}

/// Every struct rawq fills, reads or reaches through (the data path's work requests and
/// completions, the ops tables the inline functions call through, the extended context's ops
/// and `sz`, the fields `ibv_create_wq` initialises) against the C compiler's view of verbs.h.
#[test]
fn verbs_struct_layouts_match_the_c_compiler() {
    if !rdma_headers_present("verbs_struct_layouts_match_the_c_compiler") {
        return;
    }
    let (c, rust) = layout!(
        ibv_send_wr,
        ibv_recv_wr,
        ibv_wc,
        ibv_sge,
        ibv_flow_attr,
        ibv_qp_init_attr,
        ibv_qp_init_attr_ex,
        ibv_wq_init_attr,
        ibv_qp_attr,
        ibv_rwq_ind_table_init_attr,
        ibv_rx_hash_conf,
        ibv_port_attr,
        ibv_device_attr,
        ibv_device_attr_ex,
        ibv_async_event,
        ibv_values_ex,
        ibv_cq_init_attr_ex,
        ibv_poll_cq_attr,
        ibv_wq_attr,
        ibv_counters_init_attr,
        ibv_counter_attach_attr,
        ibv_flow_spec_counter_action,
        ibv_flow_spec_eth,
        ibv_flow_spec_ipv4,
        ibv_flow_spec_ipv4_ext,
        ibv_flow_spec_ipv6,
        ibv_flow_spec_tcp_udp,
        ibv_flow_spec_action_tag,
        ibv_flow_spec_action_drop,
        ibv_context_ops,
        ibv_context,
        verbs_context,
        ibv_cq_ex,
        ibv_wq,
        ibv_send_wr.send_flags,
        ibv_send_wr.wr,
        ibv_send_wr.next,
        ibv_send_wr.opcode,
        ibv_send_wr.sg_list,
        ibv_send_wr.num_sge,
        ibv_recv_wr.sg_list,
        ibv_recv_wr.num_sge,
        ibv_wc.status,
        ibv_wc.byte_len,
        ibv_wc.wc_flags,
        ibv_wc.vendor_err,
        ibv_qp_init_attr_ex.rx_hash_conf,
        ibv_qp_init_attr_ex.comp_mask,
        ibv_qp_init_attr_ex.pd,
        ibv_qp_attr.port_num,
        ibv_context.device,
        ibv_context.ops,
        ibv_context.abi_compat,
        ibv_context_ops.poll_cq,
        ibv_context_ops.req_notify_cq,
        ibv_context_ops.post_send,
        ibv_context_ops.post_recv,
        verbs_context.query_port,
        verbs_context.query_device_ex,
        verbs_context.create_cq_ex,
        verbs_context.create_qp_ex,
        verbs_context.create_wq,
        verbs_context.modify_wq,
        verbs_context.destroy_wq,
        verbs_context.create_rwq_ind_table,
        verbs_context.destroy_rwq_ind_table,
        verbs_context.ibv_create_flow,
        verbs_context.ibv_destroy_flow,
        verbs_context.create_counters,
        verbs_context.destroy_counters,
        verbs_context.attach_counters_point_flow,
        verbs_context.read_counters,
        verbs_context.query_rt_values,
        verbs_context.sz,
        verbs_context.context,
        ibv_cq_ex.context,
        ibv_cq_ex.wr_id,
        ibv_cq_ex.status,
        ibv_cq_ex.start_poll,
        ibv_cq_ex.next_poll,
        ibv_cq_ex.end_poll,
        ibv_cq_ex.read_vendor_err,
        ibv_cq_ex.read_byte_len,
        ibv_cq_ex.read_wc_flags,
        ibv_cq_ex.read_cvlan,
        ibv_wq.context,
        ibv_wq.wq_context,
        ibv_wq.post_recv,
        ibv_wq.mutex,
        ibv_wq.cond,
        ibv_wq.events_completed,
        ibv_qp.context,
        ibv_qp.qp_num,
        ibv_cq.context,
        ibv_mr.lkey,
        ibv_flow.context,
        ibv_counters.context,
        ibv_rwq_ind_table.context,
        ibv_device_attr_ex.orig_attr,
        ibv_device_attr_ex.raw_packet_caps,
        ibv_device_attr_ex.tso_caps,
        ibv_device_attr_ex.rss_caps,
        ibv_device_attr_ex.hca_core_clock,
        ibv_port_attr.state,
        ibv_port_attr.active_mtu,
        ibv_port_attr.link_layer,
        ibv_async_event.event_type,
        ibv_values_ex.raw_clock,
    );
    check("infiniband/verbs.h", "verbs", &c, &rust);
}

/// The enum constants rawq's code names, against the header's values.
#[test]
fn verbs_constants_match_the_c_compiler() {
    if !rdma_headers_present("verbs_constants_match_the_c_compiler") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rawq-verbs-consts-{}", std::process::id()));
    let c = crate::cc_oracle::numbers(
        &dir,
        r#"#include <stdio.h>
#include <infiniband/verbs.h>
#define V(n) printf(#n " %lu\n", (unsigned long)(n))
int main(void) {
    V(IBV_QPT_RAW_PACKET); V(IBV_WC_SUCCESS); V(IBV_WC_WR_FLUSH_ERR); V(IBV_WR_SEND);
    V(IBV_WR_TSO); V(IBV_SEND_SIGNALED); V(IBV_SEND_IP_CSUM); V(IBV_SEND_INLINE);
    V(IBV_ACCESS_OPTIONAL_RANGE); V(IBV_QP_INIT_ATTR_PD); V(IBV_FLOW_SPEC_ACTION_COUNT);
    V(IBV_VALUES_MASK_RAW_CLOCK); V(IBV_EVENT_PORT_ACTIVE); V(IBV_EVENT_DEVICE_FATAL);
    return 0;
}
"#,
    );
    let rust: [(&str, u64); 14] = [
        ("IBV_QPT_RAW_PACKET", ibv_qp_type::IBV_QPT_RAW_PACKET.into()),
        ("IBV_WC_SUCCESS", ibv_wc_status::IBV_WC_SUCCESS.into()),
        (
            "IBV_WC_WR_FLUSH_ERR",
            ibv_wc_status::IBV_WC_WR_FLUSH_ERR.into(),
        ),
        ("IBV_WR_SEND", ibv_wr_opcode::IBV_WR_SEND.into()),
        ("IBV_WR_TSO", ibv_wr_opcode::IBV_WR_TSO.into()),
        (
            "IBV_SEND_SIGNALED",
            ibv_send_flags::IBV_SEND_SIGNALED.0.into(),
        ),
        (
            "IBV_SEND_IP_CSUM",
            ibv_send_flags::IBV_SEND_IP_CSUM.0.into(),
        ),
        ("IBV_SEND_INLINE", ibv_send_flags::IBV_SEND_INLINE.0.into()),
        (
            "IBV_ACCESS_OPTIONAL_RANGE",
            ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE
                .0
                .into(),
        ),
        (
            "IBV_QP_INIT_ATTR_PD",
            ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0.into(),
        ),
        (
            "IBV_FLOW_SPEC_ACTION_COUNT",
            ibv_flow_spec_type::IBV_FLOW_SPEC_ACTION_COUNT.into(),
        ),
        (
            "IBV_VALUES_MASK_RAW_CLOCK",
            ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0.into(),
        ),
        (
            "IBV_EVENT_PORT_ACTIVE",
            ibv_event_type::IBV_EVENT_PORT_ACTIVE as u64,
        ),
        (
            "IBV_EVENT_DEVICE_FATAL",
            ibv_event_type::IBV_EVENT_DEVICE_FATAL as u64,
        ),
    ];
    assert_eq!(c.len(), rust.len(), "C program printed: {c:?}");
    for (name, r) in rust {
        assert_eq!(c.get(name).map(|&v| v as u64), Some(r), "{name}");
    }
}
