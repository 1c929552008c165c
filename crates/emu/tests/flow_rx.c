/*
 * Receives, through libibverbs + libmlx5, the UDP/IPv4 frames to port 9000 that a flow rule
 * steers to a RAW_PACKET QP, for a number of seconds; everything else stays with the kernel
 * (the emulated port's TAP netdev). Prints "ready" once the rule is in place and
 * "received N" at the end. Used by tests/emu/wire.rs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define RING 256
#define BUF 2048

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5;
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (n < 1) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	uint8_t *mem = aligned_alloc(4096, RING * BUF);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, mem, RING * BUF, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, RING, NULL, NULL, 0) : NULL;
	if (!mr || !cq) {
		perror("setup");
		return 1;
	}
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 1, .max_recv_wr = RING, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (!qp || ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PORT)) {
		perror("qp");
		return 1;
	}
	at.qp_state = IBV_QPS_RTR;
	ibv_modify_qp(qp, &at, IBV_QP_STATE);
	for (int i = 0; i < RING; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)(mem + i * BUF), .length = BUF, .lkey = mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		ibv_post_recv(qp, &w, &bad);
	}
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_ipv4 ip;
		struct ibv_flow_spec_tcp_udp udp;
	} __attribute__((packed, aligned(8))) fa = {
		.attr = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa), .num_of_specs = 2, .port = 1 },
		.ip = { .type = IBV_FLOW_SPEC_IPV4, .size = sizeof(struct ibv_flow_spec_ipv4) },
		.udp = { .type = IBV_FLOW_SPEC_UDP, .size = sizeof(struct ibv_flow_spec_tcp_udp) },
	};
	fa.udp.val.dst_port = htobe16(9000);
	fa.udp.mask.dst_port = 0xffff;
	struct ibv_flow *flow = ibv_create_flow(qp, (struct ibv_flow_attr *)(void *)&fa);
	if (!flow) {
		perror("ibv_create_flow");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	long got = 0;
	double end = now() + secs;
	struct ibv_wc wc[32];
	while (now() < end) {
		int k = ibv_poll_cq(cq, 32, wc);
		for (int i = 0; i < k; i++) {
			if (wc[i].status == IBV_WC_SUCCESS)
				got++;
			struct ibv_sge s = { .addr = (uintptr_t)(mem + wc[i].wr_id * BUF), .length = BUF,
					     .lkey = mr->lkey };
			struct ibv_recv_wr w = { .wr_id = wc[i].wr_id, .sg_list = &s, .num_sge = 1 }, *bad;
			ibv_post_recv(qp, &w, &bad);
		}
		if (k == 0) {
			struct timespec ts = { 0, 100000 };
			nanosleep(&ts, NULL);
		}
	}
	printf("received %ld\n", got);
	ibv_destroy_flow(flow);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	return 0;
}
