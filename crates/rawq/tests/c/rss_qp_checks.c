/* RSS QP attribute probe for tests/emu/rss.rs, run on the emulated NIC: creates a 2-entry
 * indirection table of receive WQs, then one RSS (hashing) QP per case through libmlx5, and
 * prints "case errno" (0: created). Only the public libibverbs and mlx5dv API. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_rwq_ind_table *tbl;
static unsigned char key[40] = { 0x6d, 0x5a };

static void try_qp(const char *name, unsigned long long fields, int key_len, int send_wr,
		   int recv_wr, int cvlan, unsigned long long dv_flags)
{
	struct mlx5dv_qp_init_attr dv;
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp *qp;

	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RAW_PACKET;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
	a.pd = pd;
	a.rwq_ind_tbl = tbl;
	a.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
	a.rx_hash_conf.rx_hash_key_len = key_len;
	a.rx_hash_conf.rx_hash_key = key;
	a.rx_hash_conf.rx_hash_fields_mask = fields;
	if (send_wr) {
		a.send_cq = cq;
		a.cap.max_send_wr = send_wr;
		a.cap.max_send_sge = 1;
	}
	a.cap.max_recv_wr = recv_wr;
	if (cvlan) {
		a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		a.create_flags = IBV_QP_CREATE_CVLAN_STRIPPING;
	}
	errno = 0;
	if (dv_flags) {
		memset(&dv, 0, sizeof(dv));
		dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
		dv.create_flags = dv_flags;
		qp = mlx5dv_create_qp(ctx, &a, &dv);
	} else {
		qp = ibv_create_qp_ex(ctx, &a);
	}
	if (qp) {
		printf("%s 0\n", name);
		ibv_destroy_qp(qp);
	} else {
		printf("%s %d\n", name, errno ? errno : -1);
	}
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_wq_init_attr wa;
	struct ibv_rwq_ind_table_init_attr ta;
	struct ibv_wq *wqs[2];
	int i;
	const unsigned long long v4 = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
	const unsigned long long v6 = IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6;
	const unsigned long long udp = IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
	const unsigned long long tcp = IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq) {
		perror("pd/cq");
		return 1;
	}
	for (i = 0; i < 2; i++) {
		memset(&wa, 0, sizeof(wa));
		wa.wq_type = IBV_WQT_RQ;
		wa.max_wr = 16;
		wa.max_sge = 1;
		wa.pd = pd;
		wa.cq = cq;
		wqs[i] = ibv_create_wq(ctx, &wa);
		if (!wqs[i]) {
			perror("wq");
			return 1;
		}
	}
	memset(&ta, 0, sizeof(ta));
	ta.log_ind_tbl_size = 1;
	ta.ind_tbl = wqs;
	tbl = ibv_create_rwq_ind_table(ctx, &ta);
	if (!tbl) {
		perror("ind table");
		return 1;
	}
	try_qp("ok_v4_udp", v4 | udp, 40, 0, 0, 0, 0);
	try_qp("ok_v6_tcp", v6 | tcp, 40, 0, 0, 0, 0);
	try_qp("v4_and_v6", v4 | v6, 40, 0, 0, 0, 0);
	try_qp("tcp_and_udp", v4 | tcp | udp, 40, 0, 0, 0, 0);
	try_qp("no_fields_two_entries", 0, 40, 0, 0, 0, 0);
	try_qp("key_of_39_bytes", v4, 39, 0, 0, 0, 0);
	try_qp("recv_wr", v4, 40, 0, 1, 0, 0);
	try_qp("send_wr", v4, 40, 1, 0, 0, 0);
	try_qp("cvlan_stripping", v4, 40, 0, 0, 1, 0);
	try_qp("dv_tunnel_offloads", v4 | udp, 40, 0, 0, 0, MLX5DV_QP_CREATE_TUNNEL_OFFLOADS);
	try_qp("dv_self_loopback_uc", v4 | udp, 40, 0, 0, 0,
	       MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC);
	ibv_destroy_rwq_ind_table(tbl);
	for (i = 0; i < 2; i++)
		ibv_destroy_wq(wqs[i]);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
