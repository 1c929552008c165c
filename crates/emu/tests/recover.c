/*
 * Data-path error recovery through libibverbs + libmlx5 on the emulated ConnectX (run with
 * RAWQ_EMU_TX_ERROR=3 by emu/tests/verbs_control.rs): a send error CQE and the flushes after it,
 * recovery through ibv_modify_qp (RESET, INIT, RTR, RTS), then a receive length error on a too
 * small buffer, and traffic resuming. Prints "name value" lines.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define P(name, v) printf("%s %ld\n", name, (long)(v))

static const uint8_t mac[6] = {0x02, 0xfc, 0x00, 0x00, 0x00, 0x01};
static uint8_t *mem;
static struct ibv_mr *mr;
static struct ibv_qp *qp;
static struct ibv_cq *cq;

static int to_state(enum ibv_qp_state s);

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void post_recv(int i, uint32_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)(mem + 65536 + i * 2048), .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr w = { .wr_id = 1000 + i, .sg_list = &s, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &w, &bad))
		P("post_recv_failed", i);
}

static void send_frames_with(int n, uint32_t lkey, uint64_t shift)
{
	for (int i = 0; i < n; i++) {
		uint8_t *f = mem + i * 128;
		memset(f, 0, 100);
		memcpy(f, mac, 6);
		memcpy(f + 6, "\x02\x00\x00\x00\x00\x09", 6);
		f[12] = 0x08;
		f[14] = 0x45;
		f[17] = 86;
		f[22] = 64;
		f[23] = 17;
		f[36] = 9000 >> 8;
		f[37] = 9000 & 0xff;
		f[39] = 66;
		struct ibv_sge s = { .addr = (uintptr_t)f + shift, .length = 100, .lkey = lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		if (ibv_post_send(qp, &w, &bad))
			P("post_send_failed", i);
	}
}

static void send_frames(int n)
{
	send_frames_with(n, mr->lkey, 0);
}

static void recover(const char *phase)
{
	char k[64];
	snprintf(k, sizeof k, "%s_recovered", phase);
	P(k, to_state(IBV_QPS_RESET) == 0 && to_state(IBV_QPS_INIT) == 0 &&
		     to_state(IBV_QPS_RTR) == 0 && to_state(IBV_QPS_RTS) == 0);
	for (int i = 0; i < 32; i++)
		post_recv(i, 2048);
}

/* Polls until `want` completions or 3 s; counts by (send/recv, status). */
static void drain(const char *phase, int want)
{
	int ok_s = 0, ok_r = 0, err = 0, flushed = 0, len_err = 0, other = 0, first = -1, got = 0;
	double end = now() + 3;
	struct ibv_wc wc[16];
	while (got < want && now() < end) {
		int n = ibv_poll_cq(cq, 16, wc);
		for (int i = 0; i < n; i++, got++) {
			int is_recv = wc[i].wr_id >= 1000;
			switch (wc[i].status) {
			case IBV_WC_SUCCESS:
				is_recv ? ok_r++ : ok_s++;
				break;
			case IBV_WC_WR_FLUSH_ERR:
				flushed++;
				break;
			case IBV_WC_LOC_LEN_ERR:
				len_err++;
				break;
			default:
				if (first < 0)
					first = wc[i].status;
				err++;
				other += is_recv;
			}
		}
	}
	char k[64];
#define Q(x, v) (snprintf(k, sizeof k, "%s_%s", phase, x), P(k, v))
	Q("send_ok", ok_s);
	Q("recv_ok", ok_r);
	Q("error", err);
	Q("error_status", first);
	Q("flushed", flushed);
	Q("len_error", len_err);
	Q("recv_error", other);
}

static int to_state(enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s, .port_num = 1 };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | (s == IBV_QPS_INIT ? IBV_QP_PORT : 0));
}

int main(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	mem = aligned_alloc(4096, 1 << 20);
	mr = ibv_reg_mr(pd, mem, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
	cq = ibv_create_cq(ctx, 255, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp = ibv_create_qp(pd, &qa);
	if (!qp) {
		perror("create_qp");
		return 1;
	}
	P("init", to_state(IBV_QPS_INIT));
	P("rtr", to_state(IBV_QPS_RTR));
	P("rts", to_state(IBV_QPS_RTS));
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_eth eth;
	} __attribute__((packed, aligned(8))) fa = {
		.attr = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa), .num_of_specs = 1, .port = 1 },
		.eth = { .type = IBV_FLOW_SPEC_ETH, .size = sizeof(struct ibv_flow_spec_eth) },
	};
	memcpy(fa.eth.val.dst_mac, mac, 6);
	memset(fa.eth.mask.dst_mac, 0xff, 6);
	struct ibv_flow *flow = ibv_create_flow(qp, (struct ibv_flow_attr *)(void *)&fa);
	P("flow", flow != NULL);
	for (int i = 0; i < 32; i++)
		post_recv(i, 2048);

	/* Phase 1: the 4th send (index 3) fails; the rest of the batch is flushed. */
	send_frames(8);
	drain("p1", 8 + 3);

	/* Recovery: the verbs way. */
	P("reset", to_state(IBV_QPS_RESET));
	P("init2", to_state(IBV_QPS_INIT));
	P("rtr2", to_state(IBV_QPS_RTR));
	P("rts2", to_state(IBV_QPS_RTS));
	/* The first receive buffer is too small for a 100-byte frame. */
	post_recv(0, 64);
	for (int i = 1; i < 32; i++)
		post_recv(i, 2048);
	send_frames(8);
	drain("p2", 16);

	/* A key the device does not know, then an address outside the registered region: both
	 * are protection errors on hardware (the WQE is not sent). */
	recover("p3");
	send_frames_with(1, mr->lkey ^ 0x100, 0);
	drain("p3", 1);
	recover("p4");
	send_frames_with(1, mr->lkey, 1 << 20);
	drain("p4", 1);
	recover("p5");
	send_frames(2);
	drain("p5", 4);

	ibv_destroy_flow(flow);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	P("done", 1);
	return 0;
}
