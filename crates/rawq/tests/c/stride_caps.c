/* Striding RQ capability probe for tests/emu/model_fidelity.rs, run on the emulated NIC: prints the
 * striding caps mlx5dv_query_device reports, then tries mlx5dv_create_wq with 2^3 and 2^9
 * strides of 2^6 bytes and prints the errno of each (0: created). Uses only the public
 * libibverbs / mlx5dv API. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

static int try_wq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq, int log_n)
{
	struct ibv_wq_init_attr a;
	struct mlx5dv_wq_init_attr d;
	struct ibv_wq *wq;

	memset(&a, 0, sizeof(a));
	memset(&d, 0, sizeof(d));
	a.wq_type = IBV_WQT_RQ;
	a.max_wr = 4;
	a.max_sge = 1;
	a.pd = pd;
	a.cq = cq;
	d.comp_mask = MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ;
	d.striding_rq_attrs.single_stride_log_num_of_bytes = 6;
	d.striding_rq_attrs.single_wqe_log_num_of_strides = log_n;
	errno = 0;
	wq = mlx5dv_create_wq(ctx, &a, &d);
	if (!wq)
		return errno ? errno : -1;
	ibv_destroy_wq(wq);
	return 0;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct mlx5dv_context dv;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	if (!list || !list[0]) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx) {
		fprintf(stderr, "open failed\n");
		return 1;
	}
	memset(&dv, 0, sizeof(dv));
	dv.comp_mask = MLX5DV_CONTEXT_MASK_STRIDING_RQ;
	if (mlx5dv_query_device(ctx, &dv)) {
		fprintf(stderr, "mlx5dv_query_device failed\n");
		return 1;
	}
	printf("min_log_strides %u\n", dv.striding_rq_caps.min_single_wqe_log_num_of_strides);
	printf("max_log_strides %u\n", dv.striding_rq_caps.max_single_wqe_log_num_of_strides);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	if (!pd || !cq) {
		fprintf(stderr, "pd/cq failed\n");
		return 1;
	}
	printf("create_3 %d\n", try_wq(ctx, pd, cq, 3));
	printf("create_9 %d\n", try_wq(ctx, pd, cq, 9));
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
