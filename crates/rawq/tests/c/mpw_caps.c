/* Multi-packet send capabilities probe for tests/emu/model_fidelity.rs, run on the emulated NIC:
 * prints what mlx5dv_query_device reports (MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED,
 * MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW) as "name 0|1" lines. */
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct mlx5dv_context dv;
	struct ibv_context *ctx;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	memset(&dv, 0, sizeof(dv));
	if (mlx5dv_query_device(ctx, &dv)) {
		perror("mlx5dv_query_device");
		return 1;
	}
	printf("mpw_allowed %d\n", !!(dv.flags & MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED));
	printf("enhanced_mpw %d\n", !!(dv.flags & MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW));
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
