//! The `verbs.h` inline wrappers rawq calls, compiled from rdma-core's installed header by
//! `c/inline.c` (see there why rdma-sys's own Rust versions cannot be used: they reject every
//! context on a 64-bit host). Imported by name where used, so they shadow rdma-sys's.

use rdma_sys::{
    ibv_context, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_device_attr_ex, ibv_flow, ibv_flow_attr,
    ibv_qp, ibv_qp_init_attr_ex, ibv_query_device_ex_input, ibv_rwq_ind_table,
    ibv_rwq_ind_table_init_attr, ibv_wc, ibv_wq, ibv_wq_attr, ibv_wq_init_attr,
};

extern "C" {
    /// `ibv_query_device_ex`: 0 or an errno.
    #[link_name = "rawq_ibv_query_device_ex"]
    pub(crate) fn ibv_query_device_ex(
        ctx: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
    ) -> i32;
    /// `ibv_create_flow`: NULL with errno set on failure.
    #[link_name = "rawq_ibv_create_flow"]
    pub(crate) fn ibv_create_flow(qp: *mut ibv_qp, attr: *mut ibv_flow_attr) -> *mut ibv_flow;
    /// `ibv_destroy_flow`: 0 or an errno.
    #[link_name = "rawq_ibv_destroy_flow"]
    pub(crate) fn ibv_destroy_flow(flow: *mut ibv_flow) -> i32;
    /// `ibv_create_wq`: NULL with errno set on failure.
    #[link_name = "rawq_ibv_create_wq"]
    pub(crate) fn ibv_create_wq(ctx: *mut ibv_context, attr: *mut ibv_wq_init_attr) -> *mut ibv_wq;
    /// `ibv_modify_wq`: 0 or an errno.
    #[link_name = "rawq_ibv_modify_wq"]
    pub(crate) fn ibv_modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> i32;
    /// `ibv_destroy_wq`: 0 or an errno.
    #[link_name = "rawq_ibv_destroy_wq"]
    pub(crate) fn ibv_destroy_wq(wq: *mut ibv_wq) -> i32;
    /// `ibv_create_rwq_ind_table`: NULL with errno set on failure.
    #[link_name = "rawq_ibv_create_rwq_ind_table"]
    pub(crate) fn ibv_create_rwq_ind_table(
        ctx: *mut ibv_context,
        attr: *mut ibv_rwq_ind_table_init_attr,
    ) -> *mut ibv_rwq_ind_table;
    /// `ibv_destroy_rwq_ind_table`: 0 or an errno.
    #[link_name = "rawq_ibv_destroy_rwq_ind_table"]
    pub(crate) fn ibv_destroy_rwq_ind_table(tbl: *mut ibv_rwq_ind_table) -> i32;
    /// `ibv_create_qp_ex`: NULL with errno set on failure.
    #[link_name = "rawq_ibv_create_qp_ex"]
    pub(crate) fn ibv_create_qp_ex(
        ctx: *mut ibv_context,
        attr: *mut ibv_qp_init_attr_ex,
    ) -> *mut ibv_qp;
    /// `ibv_create_cq_ex`: NULL with errno set on failure.
    #[link_name = "rawq_ibv_create_cq_ex"]
    pub(crate) fn ibv_create_cq_ex(
        ctx: *mut ibv_context,
        attr: *mut ibv_cq_init_attr_ex,
    ) -> *mut ibv_cq_ex;
    /// Up to `n` completions of an extended CQ (`ibv_start_poll`, `ibv_next_poll`,
    /// `ibv_end_poll`) into `wc` (wr_id, status, vendor_err, byte_len, wc_flags) and, unless
    /// NULL, their CVLAN fields into `cvlan`: how many, or a negative errno.
    pub(crate) fn rawq_poll_cq_ex(
        cq: *mut ibv_cq_ex,
        n: i32,
        wc: *mut ibv_wc,
        cvlan: *mut u16,
    ) -> i32;
}
