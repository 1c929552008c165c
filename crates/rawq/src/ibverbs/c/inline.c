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
#include <errno.h>
#include <stdint.h>
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

struct ibv_cq_ex *rawq_ibv_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	return ibv_create_cq_ex(ctx, attr);
}

/*
 * Polls up to `n` completions of an extended CQ (created with IBV_WC_EX_WITH_BYTE_LEN and
 * IBV_WC_EX_WITH_CVLAN) into `wc` (wr_id, status, vendor_err; byte_len, wc_flags of successful
 * ones) and, when `cvlan` is not NULL, each one's CVLAN field into `cvlan` (0 for an error
 * completion). Returns how many, or a negative errno when the first poll fails.
 *
 * The batch is one ibv_start_poll, ibv_next_poll per further completion and one ibv_end_poll,
 * as libibverbs/man/ibv_create_cq_ex.3 describes: start_poll returns ENOENT on an empty CQ
 * (and then end_poll must not be called), next_poll ENOENT when no more completions are ready.
 */
int rawq_poll_cq_ex(struct ibv_cq_ex *cq, int n, struct ibv_wc *wc, uint16_t *cvlan)
{
	struct ibv_poll_cq_attr attr = { 0 };
	int i = 0;
	int rc;

	if (n <= 0)
		return 0;
	rc = ibv_start_poll(cq, &attr);
	if (rc == ENOENT)
		return 0;
	if (rc)
		return -rc;
	for (;;) {
		struct ibv_wc *w = &wc[i];

		w->wr_id = cq->wr_id;
		w->status = cq->status;
		if (cq->status == IBV_WC_SUCCESS) {
			w->vendor_err = 0;
			w->byte_len = ibv_wc_read_byte_len(cq);
			w->wc_flags = ibv_wc_read_wc_flags(cq);
			if (cvlan)
				cvlan[i] = ibv_wc_read_cvlan(cq);
		} else {
			w->vendor_err = ibv_wc_read_vendor_err(cq);
			w->byte_len = 0;
			w->wc_flags = 0;
			if (cvlan)
				cvlan[i] = 0;
		}
		i++;
		if (i == n)
			break;
		rc = ibv_next_poll(cq);
		if (rc)
			/* ENOENT: no more ready; another error: report what was gathered, the
			 * next call's start_poll meets the error again. */
			break;
	}
	ibv_end_poll(cq);
	return i;
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
