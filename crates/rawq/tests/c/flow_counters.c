/* Flow counters probe for tests/emu/rule_hits.rs, run on the emulated NIC: the emulator judged by
 * rdma-core's own libibverbs + libmlx5, not by rawq. Only the public verbs API:
 * ibv_create_counters, ibv_attach_counters_point_flow, ibv_create_flow with an
 * IBV_FLOW_SPEC_ACTION_COUNT spec, ibv_read_counters, ibv_destroy_counters.
 *
 * One RAW_PACKET QP (send and receive) on the looped-back wire; rule A (UDP to 9001 -> the QP)
 * counts into counters object A, described PACKETS at index 1; rule D (UDP to 9002 -> drop)
 * counts into D, PACKETS at index 0. 12 frames go to 9002, 5 to 9004 (no rule), then 20 to
 * 9001; then a second flow shares D. Prints "name value" lines: errnos of the calls the kernel
 * refuses (0: accepted) and the counts read. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#define NBUF 128
#define BUFSZ 2048

struct rule {
	struct ibv_flow_attr attr;
	struct ibv_flow_spec_eth eth;
	struct ibv_flow_spec_tcp_udp udp;
	struct ibv_flow_spec_counter_action count;
	struct ibv_flow_spec_action_drop drop;
} __attribute__((packed, aligned(8)));

static struct ibv_flow *flow(struct ibv_qp *qp, uint16_t port, struct ibv_counters *c, int drop)
{
	struct rule r;

	memset(&r, 0, sizeof(r));
	r.attr.type = IBV_FLOW_ATTR_NORMAL;
	r.attr.size = sizeof(r) - (drop ? 0 : sizeof(r.drop));
	r.attr.num_of_specs = drop ? 4 : 3;
	r.attr.port = 1;
	r.eth.type = IBV_FLOW_SPEC_ETH;
	r.eth.size = sizeof(r.eth);
	r.udp.type = IBV_FLOW_SPEC_UDP;
	r.udp.size = sizeof(r.udp);
	r.udp.val.dst_port = htons(port);
	r.udp.mask.dst_port = 0xffff;
	r.count.type = IBV_FLOW_SPEC_ACTION_COUNT;
	r.count.size = sizeof(r.count);
	r.count.counters = c;
	r.drop.type = IBV_FLOW_SPEC_ACTION_DROP;
	r.drop.size = sizeof(r.drop);
	return ibv_create_flow(qp, (struct ibv_flow_attr *)(void *)&r);
}

static int attach(struct ibv_counters *c, enum ibv_counter_description d, uint32_t index)
{
	struct ibv_counter_attach_attr a;

	memset(&a, 0, sizeof(a));
	a.counter_desc = d;
	a.index = index;
	return ibv_attach_counters_point_flow(c, &a, NULL);
}

static uint8_t *bufs;
static struct ibv_mr *mr;

static void frame(uint8_t *f, uint16_t port, uint32_t seq)
{
	static const uint8_t macs[12] = { 2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1 };

	memset(f, 0, 64);
	memcpy(f, macs, 12);
	f[12] = 0x08;
	f[14] = 0x45;
	f[17] = 50;
	f[22] = 64;
	f[23] = 17;
	memcpy(f + 26, (uint8_t[]){ 198, 18, 0, 1, 198, 18, 0, 2 }, 8);
	f[34] = 1024 >> 8;
	f[36] = port >> 8;
	f[37] = port & 0xff;
	f[39] = 30;
	memcpy(f + 42, &seq, 4);
}

static int post_recv(struct ibv_qp *qp, int i)
{
	struct ibv_sge sge = { (uintptr_t)(bufs + (size_t)i * BUFSZ), BUFSZ, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

/* Sends `n` frames to `port` from the send half of the buffers; waits for their completions. */
static int send_frames(struct ibv_qp *qp, struct ibv_cq *cq, uint16_t port, int n)
{
	struct ibv_wc wc[16];
	int sent = 0, done = 0;
	time_t end = time(NULL) + 10;

	while (done < n && time(NULL) < end) {
		if (sent < n && sent - done < 32) {
			int slot = NBUF / 2 + sent % (NBUF / 2);
			uint8_t *f = bufs + (size_t)slot * BUFSZ;
			struct ibv_sge sge = { (uintptr_t)f, 64, mr->lkey };
			struct ibv_send_wr wr = { .wr_id = sent, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED }, *bad;

			frame(f, port, sent);
			if (ibv_post_send(qp, &wr, &bad))
				return -1;
			sent++;
		}
		int k = ibv_poll_cq(cq, 16, wc);
		for (int i = 0; i < k; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				return -1;
		done += k > 0 ? k : 0;
	}
	return done == n ? 0 : -1;
}

/* Receives until `want` frames came (re-posting each buffer) or 10 s passed; the count. */
static int receive(struct ibv_qp *qp, struct ibv_cq *cq, int want)
{
	struct ibv_wc wc[16];
	int got = 0;
	time_t end = time(NULL) + 10;

	while (got < want && time(NULL) < end) {
		int k = ibv_poll_cq(cq, 16, wc);
		for (int i = 0; i < k; i++) {
			if (wc[i].status == IBV_WC_SUCCESS)
				got++;
			post_recv(qp, (int)wc[i].wr_id);
		}
	}
	return got;
}

static void read_print(const char *name, struct ibv_counters *c, uint32_t n)
{
	uint64_t v[2] = { 0, 0 };
	int r = ibv_read_counters(c, v, n, 0);

	printf("%s_rc %d\n", name, r);
	for (uint32_t i = 0; i < n && !r; i++)
		printf("%s_%u %llu\n", name, i, (unsigned long long)v[i]);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_qp_init_attr qa;
	struct ibv_qp_attr at;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_counters *a, *d, *u, *b;
	struct ibv_flow *fa, *fd, *fb;
	uint64_t v[2];

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 128, NULL, NULL, 0);
	bufs = aligned_alloc(4096, (size_t)NBUF * BUFSZ);
	if (!pd || !scq || !rcq || !bufs) {
		fprintf(stderr, "setup: %s\n", strerror(errno));
		return 1;
	}
	mr = ibv_reg_mr(pd, bufs, (size_t)NBUF * BUFSZ, IBV_ACCESS_LOCAL_WRITE);
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = scq;
	qa.recv_cq = rcq;
	qa.qp_type = IBV_QPT_RAW_PACKET;
	qa.cap.max_send_wr = 64;
	qa.cap.max_recv_wr = NBUF / 2;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &qa);
	if (!mr || !qp) {
		fprintf(stderr, "mr/qp: %s\n", strerror(errno));
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
	for (int i = 0; i < NBUF / 2; i++)
		if (post_recv(qp, i))
			return 1;

	struct ibv_counters_init_attr ia = { 0 };
	a = ibv_create_counters(ctx, &ia);
	d = ibv_create_counters(ctx, &ia);
	u = ibv_create_counters(ctx, &ia);
	b = ibv_create_counters(ctx, &ia);
	printf("create %d\n", a && d && u && b ? 0 : errno);
	if (!a || !d || !u || !b)
		return 0;
	printf("attach_a %d\n", attach(a, IBV_COUNTER_PACKETS, 1));
	printf("attach_d %d\n", attach(d, IBV_COUNTER_PACKETS, 0));
	printf("attach_b %d\n", attach(b, IBV_COUNTER_BYTES, 0));
	/* Never bound to a flow: the core's READ refuses (uverbs_std_types_counters.c). */
	printf("read_unbound %d\n", ibv_read_counters(u, v, 1, 0));
	/* A flow with no description attached at all: libmlx5 refuses before the kernel. */
	errno = 0;
	fb = flow(qp, 9005, u, 0);
	printf("flow_undescribed %d\n", fb ? 0 : errno);
	/* Bytes: the emulated device counts frames only and refuses the description. */
	errno = 0;
	fb = flow(qp, 9003, b, 0);
	printf("flow_bytes %d\n", fb ? 0 : errno);
	if (fb)
		ibv_destroy_flow(fb);
	fa = flow(qp, 9001, a, 0);
	printf("flow_a %d\n", fa ? 0 : errno);
	fd = flow(qp, 9002, d, 1);
	printf("flow_d %d\n", fd ? 0 : errno);
	if (!fa || !fd)
		return 0;
	read_print("zero_a", a, 2);
	/* The highest index is 1: a one-value buffer is too short (mlx5_ib_read_counters). */
	printf("read_short %d\n", ibv_read_counters(a, v, 1, 0));
	/* Bound: attaching more is refused (libmlx5), destroying is EBUSY (ib_destroy_usecnt). */
	printf("attach_bound %d\n", attach(a, IBV_COUNTER_PACKETS, 0));
	printf("destroy_bound %d\n", ibv_destroy_counters(a));

	if (send_frames(qp, scq, 9002, 12) || send_frames(qp, scq, 9004, 5) ||
	    send_frames(qp, scq, 9001, 20)) {
		fprintf(stderr, "send failed\n");
		return 1;
	}
	printf("received %d\n", receive(qp, rcq, 20));
	read_print("a", a, 2);
	read_print("d", d, 1);

	/* A second flow on the bound object D (libmlx5 passes no description this time; the kernel
	 * takes the object as bound): both flows count into it. */
	struct ibv_flow *fd2 = flow(qp, 9006, d, 1);
	printf("flow_d2 %d\n", fd2 ? 0 : errno);
	if (!fd2 || send_frames(qp, scq, 9006, 4) || send_frames(qp, scq, 9001, 1))
		return 1;
	printf("received_d2 %d\n", receive(qp, rcq, 1));
	read_print("d2", d, 1);
	printf("destroy_flow_d2 %d\n", ibv_destroy_flow(fd2));
	read_print("d3", d, 1);

	/* The flow goes; the object is unbound (READ refused), then bound again by a new flow:
	 * mlx5 keeps the object's one hardware counter, so it goes on from 21. */
	printf("destroy_flow_a %d\n", ibv_destroy_flow(fa));
	printf("read_after_flow %d\n", ibv_read_counters(a, v, 2, 0));
	fa = flow(qp, 9001, a, 0);
	printf("flow_a_again %d\n", fa ? 0 : errno);
	if (!fa)
		return 0;
	if (send_frames(qp, scq, 9001, 3))
		return 1;
	printf("received_again %d\n", receive(qp, rcq, 3));
	read_print("again_a", a, 2);

	printf("destroy_flow_a2 %d\n", ibv_destroy_flow(fa));
	printf("destroy_flow_d %d\n", ibv_destroy_flow(fd));
	printf("destroy_a %d\n", ibv_destroy_counters(a));
	printf("destroy_d %d\n", ibv_destroy_counters(d));
	printf("destroy_u %d\n", ibv_destroy_counters(u));
	printf("destroy_b %d\n", ibv_destroy_counters(b));
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
