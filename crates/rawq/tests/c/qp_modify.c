/* Modify-QP attribute probe for tests/emu/model_fidelity.rs, run on the emulated NIC: a RAW_PACKET
 * QP is walked RESET -> INIT -> RTR -> RTS, each transition first tried with an attribute the
 * IB core's table does not allow a RAW_PACKET QP there (Linux drivers/infiniband/core/verbs.c
 * qp_state_table, ib_modify_qp_is_ok, called by mlx5_ib_modify_qp), then as it should be; a
 * second QP tries RESET -> ERR, which the table does not have. Prints "name errno" for each
 * try (0: accepted). Only the public libibverbs API. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

static void try(struct ibv_qp *qp, const char *name, enum ibv_qp_state st, int mask)
{
	struct ibv_qp_attr at;
	int r;

	memset(&at, 0, sizeof(at));
	at.qp_state = st;
	at.port_num = 1;
	at.cur_qp_state = IBV_QPS_RTR;
	at.timeout = 14;
	r = ibv_modify_qp(qp, &at, IBV_QP_STATE | mask);
	printf("%s %d\n", name, r ? (errno ? errno : r) : 0);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr qa;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *qp2;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq) {
		perror("pd/cq");
		return 1;
	}
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = cq;
	qa.recv_cq = cq;
	qa.qp_type = IBV_QPT_RAW_PACKET;
	qa.cap.max_send_wr = 8;
	qa.cap.max_recv_wr = 8;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &qa);
	qp2 = ibv_create_qp(pd, &qa);
	if (!qp || !qp2) {
		perror("qp");
		return 1;
	}
	try(qp, "rst2init_pkey_index", IBV_QPS_INIT, IBV_QP_PORT | IBV_QP_PKEY_INDEX);
	try(qp, "rst2init_no_port", IBV_QPS_INIT, 0);
	try(qp, "rst2init", IBV_QPS_INIT, IBV_QP_PORT);
	try(qp, "init2rtr_qkey", IBV_QPS_RTR, IBV_QP_QKEY);
	try(qp, "init2rtr", IBV_QPS_RTR, 0);
	try(qp, "rtr2rts_cur_state", IBV_QPS_RTS, IBV_QP_CUR_STATE);
	try(qp, "rtr2rts", IBV_QPS_RTS, 0);
	try(qp, "rts2rts_timeout", IBV_QPS_RTS, IBV_QP_TIMEOUT);
	try(qp, "rts2rts", IBV_QPS_RTS, 0);
	try(qp2, "rst2err", IBV_QPS_ERR, 0);
	try(qp2, "rst2rst", IBV_QPS_RESET, 0);
	ibv_destroy_qp(qp);
	ibv_destroy_qp(qp2);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
