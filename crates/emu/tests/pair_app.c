/*
 * Two emulated devices in one process, cabled to each other (RAWQ_EMU_PAIR=1): frames mlx5_0
 * sends arrive at mlx5_1 (and not back at mlx5_0), through libibverbs + libmlx5 on both ends.
 * Prints "name value" lines for emu/tests/verbs_control.rs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define P(name, v) printf("%s %ld\n", name, (long)(v))

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_flow *flow;
	uint8_t *mem;
};

static int open_end(struct ibv_device *d, struct end *e)
{
	e->ctx = ibv_open_device(d);
	if (!e->ctx)
		return -1;
	e->pd = ibv_alloc_pd(e->ctx);
	e->mem = aligned_alloc(4096, 1 << 20);
	e->mr = ibv_reg_mr(e->pd, e->mem, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
	e->cq = ibv_create_cq(e->ctx, 255, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = {
		.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	e->qp = ibv_create_qp(e->pd, &qa);
	if (!e->qp)
		return -1;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PORT);
	a.qp_state = IBV_QPS_RTR;
	ibv_modify_qp(e->qp, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_RTS;
	ibv_modify_qp(e->qp, &a, IBV_QP_STATE);
	for (int i = 0; i < 64; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)(e->mem + 65536 + i * 2048), .length = 2048, .lkey = e->mr->lkey };
		struct ibv_recv_wr w = { .wr_id = 1000 + i, .sg_list = &s, .num_sge = 1 }, *bad;
		ibv_post_recv(e->qp, &w, &bad);
	}
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_tcp_udp udp;
	} __attribute__((packed, aligned(8))) fa = {
		.attr = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa), .num_of_specs = 1, .port = 1 },
		.udp = { .type = IBV_FLOW_SPEC_UDP, .size = sizeof(struct ibv_flow_spec_tcp_udp) },
	};
	fa.udp.val.dst_port = htobe16(9000);
	fa.udp.mask.dst_port = 0xffff;
	e->flow = ibv_create_flow(e->qp, (struct ibv_flow_attr *)(void *)&fa);
	return e->flow ? 0 : -1;
}

static void count(struct end *e, int *sends, int *recvs, double secs)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct ibv_wc wc[16];
	do {
		int n = ibv_poll_cq(e->cq, 16, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				continue;
			if (wc[i].opcode == IBV_WC_RECV)
				(*recvs)++;
			else
				(*sends)++;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
}

int main(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	P("devices", n);
	struct end a = {0}, b = {0};
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(l[i]);
		if (!strcmp(name, "mlx5_0"))
			P("open_a", open_end(l[i], &a));
		else if (!strcmp(name, "mlx5_1"))
			P("open_b", open_end(l[i], &b));
	}
	if (!a.qp || !b.qp)
		return 1;
	for (int i = 0; i < 32; i++) {
		uint8_t *f = a.mem + i * 128;
		memset(f, 0, 60);
		memcpy(f, "\x02\xfc\x00\x00\x00\x02\x02\xfc\x00\x00\x00\x01\x08\x00", 14);
		f[14] = 0x45;
		f[17] = 46;
		f[22] = 64;
		f[23] = 17;
		f[36] = 9000 >> 8;
		f[37] = 9000 & 0xff;
		f[39] = 26;
		f[42] = i;
		struct ibv_sge s = { .addr = (uintptr_t)f, .length = 60, .lkey = a.mr->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		ibv_post_send(a.qp, &w, &bad);
	}
	int as = 0, ar = 0, bs = 0, br = 0;
	count(&a, &as, &ar, 1.0);
	count(&b, &bs, &br, 0.5);
	P("a_sent", as);
	P("a_received", ar);
	P("b_received", br);
	return 0;
}
