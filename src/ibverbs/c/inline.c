/*
 * The verbs.h inline wrappers rawq calls, compiled from the installed rdma-core header, so that
 * the vendor's own code picks the provider's function from the extended verbs context.
 *
 * Why not rdma-sys's Rust versions: rdma-sys 0.3 reimplements `verbs_get_ctx` comparing
 * `abi_compat` with `u32::MAX`, where rdma-core's verbs.h compares it with
 * `__VERBS_ABI_IS_EXTENDED` (`(void *)UINTPTR_MAX`). On every 64-bit host each wrapper that goes
 * through it (ibv_query_device_ex, ibv_create_flow, the WQ and indirection-table verbs,
 * ibv_create_qp_ex, ...) fails with EOPNOTSUPP / NULL before the provider is reached.
 */
#include <infiniband/verbs.h>

int rawq_ibv_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
                             struct ibv_device_attr_ex *attr)
{
	return ibv_query_device_ex(ctx, in, attr);
}

struct ibv_flow *rawq_ibv_create_flow(struct ibv_qp *qp, struct ibv_flow_attr *attr)
{
	return ibv_create_flow(qp, attr);
}

int rawq_ibv_destroy_flow(struct ibv_flow *flow)
{
	return ibv_destroy_flow(flow);
}

struct ibv_wq *rawq_ibv_create_wq(struct ibv_context *ctx, struct ibv_wq_init_attr *attr)
{
	return ibv_create_wq(ctx, attr);
}

int rawq_ibv_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr)
{
	return ibv_modify_wq(wq, attr);
}

int rawq_ibv_destroy_wq(struct ibv_wq *wq)
{
	return ibv_destroy_wq(wq);
}

struct ibv_rwq_ind_table *rawq_ibv_create_rwq_ind_table(struct ibv_context *ctx,
                                                        struct ibv_rwq_ind_table_init_attr *attr)
{
	return ibv_create_rwq_ind_table(ctx, attr);
}

int rawq_ibv_destroy_rwq_ind_table(struct ibv_rwq_ind_table *tbl)
{
	return ibv_destroy_rwq_ind_table(tbl);
}

struct ibv_qp *rawq_ibv_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	return ibv_create_qp_ex(ctx, attr);
}

/* Flow counters (verbs.h inline wrappers, provider ops reached through verbs_get_ctx_op), used
 * by src/ibverbs/counters.rs. */
struct ibv_counters *rawq_ibv_create_counters(struct ibv_context *ctx)
{
	struct ibv_counters_init_attr attr = { 0 };

	return ibv_create_counters(ctx, &attr);
}

int rawq_ibv_attach_counter(struct ibv_counters *counters, int desc, uint32_t index)
{
	struct ibv_counter_attach_attr attr = { 0 };

	attr.counter_desc = desc;
	attr.index = index;
	return ibv_attach_counters_point_flow(counters, &attr, NULL);
}

int rawq_ibv_read_counters(struct ibv_counters *counters, uint64_t *values, uint32_t n,
			   uint32_t flags)
{
	return ibv_read_counters(counters, values, n, flags);
}

int rawq_ibv_destroy_counters(struct ibv_counters *counters)
{
	return ibv_destroy_counters(counters);
}
