/*
 * An ordinary verbs application (Debian's libibverbs + libmlx5, unmodified) run on the emulated
 * ConnectX by emu/tests/verbs_control.rs. It prints one "name value" line per check; the test
 * compares them with what the kernel and a real mlx5 port would give.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

#define P(name, v) printf("%s %ld\n", name, (long)(v))
#define ERR(name, ok) P(name, (ok) ? 0 : errno)

static const uint8_t port_mac[6] = {0x02, 0xfc, 0x00, 0x00, 0x00, 0x01};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* A UDP/IPv4 frame to port_mac, UDP port dport, 60 bytes. */
static void frame(uint8_t *f, uint16_t dport, uint8_t seq)
{
	memset(f, 0, 60);
	memcpy(f, port_mac, 6);
	memcpy(f + 6, "\x02\x00\x00\x00\x00\x09", 6);
	f[12] = 0x08;
	f[14] = 0x45;
	f[17] = 46;          /* IPv4 total length */
	f[22] = 64;
	f[23] = 17;          /* UDP */
	memcpy(f + 26, "\xc6\x12\x00\x01\xc6\x12\x00\x02", 8);
	f[34] = 0x04;
	f[35] = seq;         /* source port 0x04xx */
	f[36] = dport >> 8;
	f[37] = dport & 0xff;
	f[39] = 26;          /* UDP length */
	f[42] = seq;
}

static int poll_n(struct ibv_cq *cq, int want, int *sends, int *recvs, int *bad, uint32_t *len)
{
	struct ibv_wc wc[16];
	double end = now() + 5;
	int got = 0;
	while (got < want && now() < end) {
		int n = ibv_poll_cq(cq, 16, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				(*bad)++;
			else if (wc[i].opcode == IBV_WC_SEND)
				(*sends)++;
			else if (wc[i].opcode == IBV_WC_RECV) {
				(*recvs)++;
				*len = wc[i].byte_len;
			}
		}
		got += n > 0 ? n : 0;
	}
	return got;
}

static struct ibv_qp *raw_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	return ibv_create_qp(pd, &a);
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	P("devices", n);
	if (n < 1)
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ERR("open", ctx);
	if (!ctx)
		return 1;
	P("is_mlx5", mlx5dv_is_supported(list[0]));

	struct mlx5dv_context dv = { .comp_mask = MLX5DV_CONTEXT_MASK_CQE_COMPRESION |
				     MLX5DV_CONTEXT_MASK_STRIDING_RQ };
	ERR("dv_query", mlx5dv_query_device(ctx, &dv) == 0);
	P("dv_empw", !!(dv.flags & MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW));
	P("dv_cqe_comp_max", dv.cqe_comp_caps.max_num);
	P("dv_striding_max_strides_log", dv.striding_rq_caps.max_single_wqe_log_num_of_strides);

	/* The device clock page (MLX5_IB_MMAP_CORE_CLOCK) ticks. */
	struct ibv_values_ex v1 = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK }, v2 = v1;
	ERR("rt_values", ibv_query_rt_values_ex(ctx, &v1) == 0);
	usleep(20000);
	ibv_query_rt_values_ex(ctx, &v2);
	P("clock_delta_ticks", v2.raw_clock.tv_nsec - v1.raw_clock.tv_nsec);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	ERR("alloc_pd", pd);
	size_t len = 1 << 20;
	uint8_t *buf = aligned_alloc(4096, len);
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	ERR("reg_mr", mr);
	/* An unmapped range cannot be pinned: EFAULT. */
	uint8_t *hole = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, 8192);
	ERR("reg_mr_unmapped", ibv_reg_mr(pd, hole, 8192, IBV_ACCESS_LOCAL_WRITE));
	/* Remote write without local write: EINVAL (ib_check_mr_access). */
	ERR("reg_mr_bad_access", ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE));

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	ERR("comp_channel", ch);
	struct ibv_cq *cq = ibv_create_cq(ctx, 255, (void *)0x1234, ch, 0);
	ERR("create_cq", cq);
	P("cq_cqe", cq ? cq->cqe : -1);
	ERR("create_cq_huge", ibv_create_cq(ctx, 1 << 24, NULL, NULL, 0));
	ERR("create_cq_bad_vector", ibv_create_cq(ctx, 16, NULL, NULL, 5));

	struct ibv_qp *qp = raw_qp(pd, cq);
	ERR("create_qp", qp);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	ERR("qp_init", ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PORT) == 0);
	at.qp_state = IBV_QPS_RTR;
	ERR("qp_rtr", ibv_modify_qp(qp, &at, IBV_QP_STATE) == 0);
	at.qp_state = IBV_QPS_RTS;
	ERR("qp_rts", ibv_modify_qp(qp, &at, IBV_QP_STATE) == 0);
	struct ibv_qp *qp2 = raw_qp(pd, cq);
	at.qp_state = IBV_QPS_RTS;
	ERR("qp_reset_to_rts", ibv_modify_qp(qp2, &at, IBV_QP_STATE) == 0);
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 2;
	ERR("qp_bad_port", ibv_modify_qp(qp2, &at, IBV_QP_STATE | IBV_QP_PORT) == 0);
	ERR("destroy_qp2", ibv_destroy_qp(qp2) == 0);

	/* Steer UDP to port 9000 at our MAC to the QP. */
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_eth eth;
		struct ibv_flow_spec_ipv4 ip;
		struct ibv_flow_spec_tcp_udp udp;
	} __attribute__((packed, aligned(8))) fa = {
		.attr = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa), .num_of_specs = 3, .port = 1 },
		.eth = { .type = IBV_FLOW_SPEC_ETH, .size = sizeof(struct ibv_flow_spec_eth) },
		.ip = { .type = IBV_FLOW_SPEC_IPV4, .size = sizeof(struct ibv_flow_spec_ipv4) },
		.udp = { .type = IBV_FLOW_SPEC_UDP, .size = sizeof(struct ibv_flow_spec_tcp_udp) },
	};
	memcpy(fa.eth.val.dst_mac, port_mac, 6);
	memset(fa.eth.mask.dst_mac, 0xff, 6);
	fa.udp.val.dst_port = htobe16(9000);
	fa.udp.mask.dst_port = 0xffff;
	struct ibv_flow *flow = ibv_create_flow(qp, (struct ibv_flow_attr *)(void *)&fa);
	ERR("create_flow", flow);
	ERR("destroy_cq_busy", ibv_destroy_cq(cq) == 0);
	ERR("destroy_qp_busy", ibv_destroy_qp(qp) == 0);

	/* Data path: libmlx5 writes the WQEs, the model loops the frames back, the flow rule
	 * steers the port-9000 ones to the QP, libmlx5 parses the CQEs. */
	for (int i = 0; i < 16; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)(buf + 65536 + i * 2048), .length = 2048, .lkey = mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *badw;
		if (ibv_post_recv(qp, &w, &badw))
			P("post_recv_failed", i);
	}
	for (int i = 0; i < 8; i++) {
		uint8_t *f = buf + i * 64;
		frame(f, i < 6 ? 9000 : 9001, i);
		struct ibv_sge s = { .addr = (uintptr_t)f, .length = 60, .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *badw;
		if (ibv_post_send(qp, &w, &badw))
			P("post_send_failed", i);
	}
	int sends = 0, recvs = 0, bad = 0;
	uint32_t rlen = 0;
	poll_n(cq, 8 + 6, &sends, &recvs, &bad, &rlen);
	P("send_completions", sends);
	P("recv_completions", recvs);
	P("bad_completions", bad);
	P("recv_byte_len", rlen);
	P("recv_payload_ok", memcmp(buf + 65536, buf, 60) == 0);

	/* A completion event on the channel, in the kernel's format. */
	ERR("req_notify", ibv_req_notify_cq(cq, 0) == 0);
	{
		uint8_t *f = buf + 8 * 64;
		frame(f, 9001, 8);
		struct ibv_sge s = { .addr = (uintptr_t)f, .length = 60, .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = 200, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *badw;
		ibv_post_send(qp, &w, &badw);
	}
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	P("event_ready", poll(&pfd, 1, 5000));
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	if (pfd.revents & POLLIN) {
		ERR("get_cq_event", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
		P("event_cq_matches", ev_cq == cq && ev_ctx == (void *)0x1234);
		ibv_ack_cq_events(cq, 1);
	}
	sends = recvs = bad = 0;
	poll_n(cq, 1, &sends, &recvs, &bad, &rlen);

	/* RSS: four WQs (one a striding RQ made with mlx5dv_create_wq), a table, a hashing QP. */
	struct ibv_wq *wqs[4];
	for (int i = 0; i < 4; i++) {
		struct ibv_wq_init_attr wa = { .wq_type = IBV_WQT_RQ, .max_wr = 64, .max_sge = 1, .pd = pd, .cq = cq };
		if (i == 3) {
			struct mlx5dv_wq_init_attr dwa = {
				.comp_mask = MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ,
				.striding_rq_attrs = { .single_stride_log_num_of_bytes = 6,
						       .single_wqe_log_num_of_strides = 9 },
			};
			wqs[i] = mlx5dv_create_wq(ctx, &wa, &dwa);
			ERR("create_striding_wq", wqs[i]);
		} else {
			wqs[i] = ibv_create_wq(ctx, &wa);
			ERR("create_wq", wqs[i]);
		}
		struct ibv_wq_attr m = { .attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_RDY };
		ERR("modify_wq", ibv_modify_wq(wqs[i], &m) == 0);
	}
	/* VLAN stripping is a capability; FCS scattering is not. */
	{
		struct ibv_wq_init_attr wa = { .wq_type = IBV_WQT_RQ, .max_wr = 64, .max_sge = 1,
					       .pd = pd, .cq = cq, .comp_mask = IBV_WQ_INIT_ATTR_FLAGS,
					       .create_flags = IBV_WQ_FLAGS_CVLAN_STRIPPING };
		struct ibv_wq *v = ibv_create_wq(ctx, &wa);
		ERR("create_wq_vlan_strip", v);
		if (v) {
			struct ibv_wq_attr m = { .attr_mask = IBV_WQ_ATTR_FLAGS, .flags = 0,
						 .flags_mask = IBV_WQ_FLAGS_CVLAN_STRIPPING };
			ERR("modify_wq_vlan_strip_off", ibv_modify_wq(v, &m) == 0);
			ibv_destroy_wq(v);
		}
		wa.create_flags = IBV_WQ_FLAGS_SCATTER_FCS;
		ERR("create_wq_scatter_fcs", ibv_create_wq(ctx, &wa));
	}
	struct ibv_rwq_ind_table_init_attr ta = { .log_ind_tbl_size = 2, .ind_tbl = wqs };
	struct ibv_rwq_ind_table *tbl = ibv_create_rwq_ind_table(ctx, &ta);
	ERR("create_ind_tbl", tbl);
	uint8_t key[40];
	for (int i = 0; i < 40; i++)
		key[i] = 0x6d + i;
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
	ERR("create_rss_qp", rss);
	qa.rx_hash_conf.rx_hash_key_len = 20;
	ERR("create_rss_qp_short_key", ibv_create_qp_ex(ctx, &qa));
	qa.rx_hash_conf.rx_hash_key_len = 40;
	qa.rx_hash_conf.rx_hash_fields_mask |= IBV_RX_HASH_SRC_PORT_TCP;
	ERR("create_rss_qp_tcp_and_udp", ibv_create_qp_ex(ctx, &qa));
	ERR("destroy_ind_tbl_busy", ibv_destroy_rwq_ind_table(tbl) == 0);
	ERR("destroy_wq_busy", ibv_destroy_wq(wqs[0]) == 0);

	/* A CQ overrun is an asynchronous IBV_EVENT_CQ_ERR on the context's async fd. */
	{
		struct ibv_cq *small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
		struct ibv_qp *q3 = raw_qp(pd, small);
		struct ibv_qp_attr a3 = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
		ibv_modify_qp(q3, &a3, IBV_QP_STATE | IBV_QP_PORT);
		a3.qp_state = IBV_QPS_RTR;
		ibv_modify_qp(q3, &a3, IBV_QP_STATE);
		a3.qp_state = IBV_QPS_RTS;
		ibv_modify_qp(q3, &a3, IBV_QP_STATE);
		for (int i = 0; i < 8; i++) {
			uint8_t *f = buf + (16 + i) * 64;
			frame(f, 9001, i);
			struct ibv_sge s = { .addr = (uintptr_t)f, .length = 60, .lkey = mr->lkey };
			struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1,
						 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *badw;
			ibv_post_send(q3, &w, &badw);
		}
		struct pollfd apfd = { .fd = ctx->async_fd, .events = POLLIN };
		P("async_ready", poll(&apfd, 1, 5000));
		struct ibv_async_event ev;
		if (apfd.revents & POLLIN && ibv_get_async_event(ctx, &ev) == 0) {
			P("async_event_type", ev.event_type);
			P("async_event_cq_matches", ev.element.cq == small);
			ibv_ack_async_event(&ev);
		}
		ERR("destroy_qp3", ibv_destroy_qp(q3) == 0);
		ERR("destroy_small_cq", ibv_destroy_cq(small) == 0);
	}

	/* A dup of the command fd is the same device file; closing it keeps the context. */
	{
		int d = dup(ctx->cmd_fd);
		struct stat st;
		P("dup_is_cdev", d >= 0 && fstat(d, &st) == 0 && S_ISCHR(st.st_mode) &&
				 st.st_rdev == makedev(231, 192));
		close(d);
		struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
		ERR("pd_after_dup_close", pd2);
		if (pd2)
			ibv_dealloc_pd(pd2);
	}

	/* Teardown in order. */
	ERR("destroy_rss_qp", ibv_destroy_qp(rss) == 0);
	ERR("destroy_ind_tbl", ibv_destroy_rwq_ind_table(tbl) == 0);
	for (int i = 0; i < 4; i++)
		ERR("destroy_wq", ibv_destroy_wq(wqs[i]) == 0);
	ERR("destroy_flow", ibv_destroy_flow(flow) == 0);
	ERR("destroy_qp", ibv_destroy_qp(qp) == 0);
	ERR("destroy_cq", ibv_destroy_cq(cq) == 0);
	int old_channel_fd = ch->fd;
	ERR("destroy_channel", ibv_destroy_comp_channel(ch) == 0);
	/* Its fd number is no completion channel any more: EBADF (ib_uverbs_lookup_comp_file). */
	{
		struct ibv_comp_channel stale = { .context = ctx, .fd = old_channel_fd };
		ERR("create_cq_closed_channel", ibv_create_cq(ctx, 16, NULL, &stale, 0));
	}
	ERR("dereg_mr", ibv_dereg_mr(mr) == 0);
	ERR("dealloc_pd", ibv_dealloc_pd(pd) == 0);
	ERR("close", ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	P("done", 1);
	return 0;
}
