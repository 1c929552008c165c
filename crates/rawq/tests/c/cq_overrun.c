/* IGNORE_OVERRUN probe for tests/emu/model_fidelity.rs, run on the emulated NIC: a RAW_PACKET QP
 * whose send CQ has 2 entries (created with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN when argv[1] is
 * "1") posts 4 signaled inline sends without polling; without the flag it then waits for the
 * CQ error event the overrun raises, with it it polls the completions. Only the public
 * libibverbs API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

int main(int argc, char **argv)
{
	int ignore = argc > 1 && !strcmp(argv[1], "1");
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_cq_init_attr_ex ca;
	struct ibv_qp_init_attr qa;
	struct ibv_qp_attr at;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_wc wc[8];
	unsigned char frame[64];
	int i, n;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	memset(&ca, 0, sizeof(ca));
	ca.cqe = 1;
	ca.wc_flags = IBV_WC_STANDARD_FLAGS;
	if (ignore) {
		ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
		ca.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	}
	cq = ibv_create_cq_ex(ctx, &ca);
	if (!pd || !cq) {
		perror("pd/cq");
		return 1;
	}
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = ibv_cq_ex_to_cq(cq);
	qa.recv_cq = ibv_cq_ex_to_cq(cq);
	qa.qp_type = IBV_QPT_RAW_PACKET;
	qa.cap.max_send_wr = 8;
	qa.cap.max_send_sge = 1;
	qa.cap.max_inline_data = 64;
	qp = ibv_create_qp(pd, &qa);
	if (!qp) {
		perror("qp");
		return 1;
	}
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PORT))
		return 1;
	at.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		return 1;
	at.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		return 1;
	memset(frame, 0, sizeof(frame));
	memset(frame, 0xff, 6);
	frame[6] = 2;
	frame[12] = 0x88;
	frame[13] = 0xb5;
	for (i = 0; i < 4; i++) {
		struct ibv_sge sge = { (uintptr_t)frame, sizeof(frame), 0 };
		struct ibv_send_wr wr, *bad;

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = i;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		if (ibv_post_send(qp, &wr, &bad)) {
			perror("post");
			return 1;
		}
	}
	if (!ignore) {
		/* Nothing is polled, so the device must overrun the 2-entry CQ at the third
		 * completion: wait for the CQ error it raises (libibverbs ibv_get_async_event
		 * blocks; the test bounds the run). Polling here instead would free slots while
		 * the device still works and make the count depend on timing. */
		struct ibv_async_event ev;

		if (ibv_get_async_event(ctx, &ev)) {
			perror("ibv_get_async_event");
			return 1;
		}
		printf("event %d\n", (int)ev.event_type);
		ibv_ack_async_event(&ev);
		n = 0;
	} else {
		/* The device works asynchronously: poll (a bounded number of times) until all
		 * four completions were read. */
		n = 0;
		for (i = 0; i < 10000000 && n < 4; i++) {
			int k = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 8, wc);

			if (k > 0)
				n += k;
		}
	}
	printf("polled %d\n", n);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
