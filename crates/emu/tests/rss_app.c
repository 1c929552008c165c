/*
 * RSS on the emulated ConnectX through libibverbs + libmlx5: four receive WQs (one CQ each) in
 * an indirection table, an RSS QP hashing IPv4 addresses and UDP ports with a Toeplitz key, a
 * flow rule steering UDP port 9002 to it; 16 flows x 8 frames sent on the loopback from a plain
 * RAW_PACKET QP. Prints how many frames each queue got and whether any flow was split.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define P(name, v) printf("%s %ld\n", name, (long)(v))
#define Q 4
#define FLOWS 16
#define PER 8
#define RING 64

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	uint8_t *mem = aligned_alloc(4096, 1 << 21);
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 1 << 21, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *txcq = ibv_create_cq(ctx, 255, NULL, NULL, 0);
	struct ibv_cq *cqs[Q];
	struct ibv_wq *wqs[Q];
	for (int q = 0; q < Q; q++) {
		cqs[q] = ibv_create_cq(ctx, 255, NULL, NULL, 0);
		struct ibv_wq_init_attr wa = { .wq_type = IBV_WQT_RQ, .max_wr = RING, .max_sge = 1,
					       .pd = pd, .cq = cqs[q] };
		wqs[q] = ibv_create_wq(ctx, &wa);
		struct ibv_wq_attr m = { .attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_RDY };
		if (!wqs[q] || ibv_modify_wq(wqs[q], &m)) {
			perror("wq");
			return 1;
		}
		for (int i = 0; i < RING; i++) {
			uint8_t *b = mem + (1 << 20) + (q * RING + i) * 2048;
			struct ibv_sge s = { .addr = (uintptr_t)b, .length = 2048, .lkey = mr->lkey };
			struct ibv_recv_wr w = { .wr_id = (uintptr_t)b, .sg_list = &s, .num_sge = 1 }, *bad;
			ibv_post_wq_recv(wqs[q], &w, &bad);
		}
	}
	struct ibv_rwq_ind_table_init_attr ta = { .log_ind_tbl_size = 2, .ind_tbl = wqs };
	struct ibv_rwq_ind_table *tbl = ibv_create_rwq_ind_table(ctx, &ta);
	static uint8_t key[40] = {
		0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
		0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
		0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
	};
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_RAW_PACKET,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
		.pd = pd, .rwq_ind_tbl = tbl,
		.rx_hash_conf = { .rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ, .rx_hash_key_len = 40,
				  .rx_hash_key = key,
				  .rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
							 IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP },
	};
	struct ibv_qp *rss = ibv_create_qp_ex(ctx, &qa);
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_tcp_udp udp;
	} __attribute__((packed, aligned(8))) fa = {
		.attr = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa), .num_of_specs = 1, .port = 1 },
		.udp = { .type = IBV_FLOW_SPEC_UDP, .size = sizeof(struct ibv_flow_spec_tcp_udp) },
	};
	fa.udp.val.dst_port = htobe16(9002);
	fa.udp.mask.dst_port = 0xffff;
	struct ibv_flow *flow = rss ? ibv_create_flow(rss, (struct ibv_flow_attr *)(void *)&fa) : NULL;
	P("rss_ready", rss && flow);
	if (!flow)
		return 1;

	struct ibv_qp_init_attr ta2 = {
		.send_cq = txcq, .recv_cq = txcq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 256, .max_send_sge = 1 },
	};
	struct ibv_qp *tx = ibv_create_qp(pd, &ta2);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	ibv_modify_qp(tx, &at, IBV_QP_STATE | IBV_QP_PORT);
	at.qp_state = IBV_QPS_RTR;
	ibv_modify_qp(tx, &at, IBV_QP_STATE);
	at.qp_state = IBV_QPS_RTS;
	ibv_modify_qp(tx, &at, IBV_QP_STATE);
	for (int k = 0; k < FLOWS * PER; k++) {
		uint8_t *f = mem + k * 64;
		int flow_id = k % FLOWS;
		memset(f, 0, 60);
		memcpy(f, "\x02\xfc\x00\x00\x00\x01\x02\x00\x00\x00\x00\x09\x08\x00", 14);
		f[14] = 0x45;
		f[17] = 46;
		f[22] = 64;
		f[23] = 17;
		memcpy(f + 26, "\x0a\x00\x00\x01\x0a\x00\x00\x02", 8);
		f[34] = 0x10;
		f[35] = flow_id;      /* source port 0x10xx: the flow */
		f[36] = 9002 >> 8;
		f[37] = 9002 & 0xff;
		f[39] = 26;
		struct ibv_sge s = { .addr = (uintptr_t)f, .length = 60, .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = k, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = (k % 16 == 15) ? IBV_SEND_SIGNALED : 0 }, *bad;
		if (ibv_post_send(tx, &w, &bad))
			P("post_send_failed", k);
		if (k % 64 == 63) {
			/* Reap the send completions so the SQ never fills. */
			struct ibv_wc wc[8];
			int got = 0;
			double end = now() + 2;
			while (got < 4 && now() < end)
				got += ibv_poll_cq(txcq, 8, wc);
		}
	}
	long per_q[Q] = {0}, total = 0, bad_status = 0;
	int queue_of_flow[FLOWS];
	int split = 0;
	memset(queue_of_flow, -1, sizeof(queue_of_flow));
	double end = now() + 3;
	while (total < FLOWS * PER && now() < end) {
		for (int q = 0; q < Q; q++) {
			struct ibv_wc wc[16];
			int k = ibv_poll_cq(cqs[q], 16, wc);
			for (int i = 0; i < k; i++) {
				if (wc[i].status != IBV_WC_SUCCESS) {
					bad_status++;
					continue;
				}
				uint8_t *b = (uint8_t *)(uintptr_t)wc[i].wr_id;
				int flow_id = b[35];
				if (flow_id < FLOWS) {
					if (queue_of_flow[flow_id] < 0)
						queue_of_flow[flow_id] = q;
					else if (queue_of_flow[flow_id] != q)
						split++;
				}
				per_q[q]++;
				total++;
			}
		}
	}
	int used = 0;
	for (int q = 0; q < Q; q++) {
		char name[16];
		snprintf(name, sizeof name, "queue%d", q);
		P(name, per_q[q]);
		used += per_q[q] > 0;
	}
	P("received", total);
	P("queues_used", used);
	P("split_flows", split);
	P("bad_status", bad_status);
	ibv_destroy_flow(flow);
	ibv_destroy_qp(rss);
	ibv_destroy_qp(tx);
	ibv_destroy_rwq_ind_table(tbl);
	for (int q = 0; q < Q; q++) {
		ibv_destroy_wq(wqs[q]);
		ibv_destroy_cq(cqs[q]);
	}
	ibv_destroy_cq(txcq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	P("done", 1);
	return 0;
}
