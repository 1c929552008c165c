/* Memory-registration probe for tests/emu/model_fidelity.rs, run on the emulated NIC (looped-back
 * port): one RAW_PACKET QP in PD 1 with a flow for the frame's destination MAC sends one frame
 * (from registered memory) to itself and receives it. argv[1] picks what is wrong:
 *   good     nothing (send buffer and receive buffer registered in PD 1 with LOCAL_WRITE)
 *   recv_ro  the receive buffer is registered without IBV_ACCESS_LOCAL_WRITE
 *   send_pd  the send buffer is registered in another PD
 *   stale    the send uses the lkey of a registration deregistered before the same range was
 *            registered again
 * Prints "send STATUS", "recv STATUS" (ibv_wc_status numbers; -1: no completion within the
 * bound) and, for stale, "keys_differ 0|1". Only the public libibverbs API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static const unsigned char DMAC[6] = { 0x02, 0x00, 0x00, 0x00, 0x4d, 0x52 };

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "good";
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr qa;
	struct ibv_qp_attr at;
	struct ibv_context *ctx;
	struct ibv_pd *pd, *pd2;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *smr, *rmr, *old = NULL;
	struct ibv_flow *flow;
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_eth eth;
	} __attribute__((packed)) fa;
	static unsigned char sbuf[4096] __attribute__((aligned(4096)));
	static unsigned char rbuf[4096] __attribute__((aligned(4096)));
	struct ibv_sge ss, rs;
	struct ibv_send_wr swr, *sbad;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_wc wc;
	uint32_t send_lkey;
	int send_status = -1, recv_status = -1;
	long i;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	pd2 = ibv_alloc_pd(ctx);
	scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !pd2 || !scq || !rcq) {
		perror("pd/cq");
		return 1;
	}
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = scq;
	qa.recv_cq = rcq;
	qa.qp_type = IBV_QPT_RAW_PACKET;
	qa.cap.max_send_wr = 8;
	qa.cap.max_recv_wr = 8;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
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
	memset(&fa, 0, sizeof(fa));
	fa.attr.type = IBV_FLOW_ATTR_NORMAL;
	fa.attr.size = sizeof(fa);
	fa.attr.num_of_specs = 1;
	fa.attr.port = 1;
	fa.eth.type = IBV_FLOW_SPEC_ETH;
	fa.eth.size = sizeof(fa.eth);
	memcpy(fa.eth.val.dst_mac, DMAC, 6);
	memset(fa.eth.mask.dst_mac, 0xff, 6);
	flow = ibv_create_flow(qp, &fa.attr);
	if (!flow) {
		perror("flow");
		return 1;
	}

	/* The receive buffer: writable unless recv_ro. */
	rmr = ibv_reg_mr(pd, rbuf, sizeof(rbuf),
			 strcmp(mode, "recv_ro") ? IBV_ACCESS_LOCAL_WRITE : 0);
	if (!strcmp(mode, "stale")) {
		old = ibv_reg_mr(pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
		if (!old) {
			perror("mr");
			return 1;
		}
		send_lkey = old->lkey;
		if (ibv_dereg_mr(old)) {
			perror("dereg");
			return 1;
		}
	}
	smr = ibv_reg_mr(strcmp(mode, "send_pd") ? pd : pd2, sbuf, sizeof(sbuf),
			 IBV_ACCESS_LOCAL_WRITE);
	if (!rmr || !smr) {
		perror("mr");
		return 1;
	}
	if (strcmp(mode, "stale"))
		send_lkey = smr->lkey;
	else
		printf("keys_differ %d\n", send_lkey != smr->lkey);

	rs.addr = (uintptr_t)rbuf;
	rs.length = sizeof(rbuf);
	rs.lkey = rmr->lkey;
	memset(&rwr, 0, sizeof(rwr));
	rwr.sg_list = &rs;
	rwr.num_sge = 1;
	if (ibv_post_recv(qp, &rwr, &rbad)) {
		perror("post_recv");
		return 1;
	}

	memset(sbuf, 0, 128);
	memcpy(sbuf, DMAC, 6);
	sbuf[6] = 0x02;
	sbuf[11] = 0x01;
	sbuf[12] = 0x88;
	sbuf[13] = 0xb5;
	for (i = 14; i < 128; i++)
		sbuf[i] = (unsigned char)i;
	ss.addr = (uintptr_t)sbuf;
	ss.length = 128;
	ss.lkey = send_lkey;
	memset(&swr, 0, sizeof(swr));
	swr.sg_list = &ss;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(qp, &swr, &sbad)) {
		perror("post_send");
		return 1;
	}
	/* The device works asynchronously: poll a bounded number of times for the send
	 * completion, then (if the frame went out) for the receive one. */
	for (i = 0; i < 20000000 && send_status < 0; i++)
		if (ibv_poll_cq(scq, 1, &wc) > 0)
			send_status = wc.status;
	for (i = 0; send_status == IBV_WC_SUCCESS && i < 20000000 && recv_status < 0; i++)
		if (ibv_poll_cq(rcq, 1, &wc) > 0)
			recv_status = wc.status;
	printf("send %d\nrecv %d\n", send_status, recv_status);
	if (recv_status == IBV_WC_SUCCESS)
		printf("bytes_ok %d\n", !memcmp(rbuf, sbuf, 128));
	ibv_destroy_flow(flow);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_dealloc_pd(pd2);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
