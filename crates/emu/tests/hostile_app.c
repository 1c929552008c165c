/*
 * Hostile input for the emulated uverbs kernel (issue 23), run under scripts/emu.sh by
 * emu/tests/hostile.rs on the debug and the release emulator. Each finding's input is sent,
 * with the raw write() commands on ctx->cmd_fd where libibverbs would never build them; after
 * each, the fd must still work (an ALLOC_PD). Prints "name value" lines (0 or an errno).
 *
 *   hostile_app findings [SECTION]   the five findings of the issue (SECTION: overflows, huge_mr,
 *                                    protections, unpinned, unread_events; default all)
 *   hostile_app panic      run with RAWQ_EMU_PANIC_IN=CREATE_CQ (debug build): the panicking
 *                          command fails with EIO, the next commands work
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

#define P(name, v) printf("%s %ld\n", name, (long)(v))
#define ERR(name, ok) P(name, (ok) ? 0 : errno)

static struct ibv_context *ctx;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One legacy command: header, then `body` (starting with the response pointer if it has one). */
static int legacy(uint32_t cmd, const void *body, size_t len, size_t out)
{
	uint8_t buf[512];
	struct ib_uverbs_cmd_hdr h = { .command = cmd, .in_words = (sizeof h + len) / 4,
				       .out_words = out / 4 };
	memcpy(buf, &h, sizeof h);
	memcpy(buf + sizeof h, body, len);
	ssize_t n = write(ctx->cmd_fd, buf, sizeof h + len);
	return n == (ssize_t)(sizeof h + len) ? 0 : errno;
}

/* The fd still answers: a PD is allocated and freed through libibverbs. */
static int fd_works(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		return 0;
	return ibv_dealloc_pd(pd) == 0;
}

struct raw_cq_req {
	struct ib_uverbs_create_cq core;
	struct mlx5_ib_create_cq drv;
};

/* CREATE_CQ with our own buffer and doorbell record; returns 0 or errno, the handle in *h. */
static int raw_create_cq(void *cqbuf, uint64_t db, uint32_t *h)
{
	struct { struct ib_uverbs_create_cq_resp r; struct mlx5_ib_create_cq_resp d; } resp;
	memset(&resp, 0, sizeof resp);
	struct raw_cq_req q;
	memset(&q, 0, sizeof q);
	q.core.response = (uintptr_t)&resp;
	q.core.cqe = 63;
	q.core.comp_channel = -1;
	q.drv.buf_addr = (uintptr_t)cqbuf;
	q.drv.db_addr = db;
	q.drv.cqe_size = 64;
	int e = legacy(IB_USER_VERBS_CMD_CREATE_CQ, &q, sizeof q, sizeof resp);
	*h = resp.r.cq_handle;
	return e;
}

static int raw_destroy_cq(uint32_t h)
{
	struct ib_uverbs_destroy_cq_resp resp;
	struct ib_uverbs_destroy_cq q = { .response = (uintptr_t)&resp, .cq_handle = h };
	return legacy(IB_USER_VERBS_CMD_DESTROY_CQ, &q, sizeof q, sizeof resp);
}

static void *pages(size_t n, int prot)
{
	void *p = mmap(NULL, n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memset(p, 0, n * 4096);
	mprotect(p, n * 4096, prot);
	return p;
}

/* 1. Overflowing user addresses: the kernel's errno, the fd alive. */
static void overflows(void)
{
	uint32_t h;
	void *cqbuf = pages(1, PROT_READ | PROT_WRITE);
	/* ib_umem_get of the doorbell page: the range wraps -> EINVAL. */
	P("cq_db_wraps", raw_create_cq(cqbuf, 0xfffffffffffffff9ull, &h));
	P("cq_db_wraps_fd_works", fd_works());

	/* A legacy response pointer that wraps with its size: EFAULT when written. */
	struct ib_uverbs_alloc_pd pdq = { .response = 0xfffffffffffffffcull };
	P("legacy_resp_wraps", legacy(IB_USER_VERBS_CMD_ALLOC_PD, &pdq, sizeof pdq, 8));
	P("legacy_resp_wraps_fd_works", fd_works());

	/* An extended response pointer that wraps with core_out. */
	uint8_t buf[64];
	struct ib_uverbs_cmd_hdr h1 = {
		.command = IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_QUERY_DEVICE,
		.in_words = sizeof(struct ib_uverbs_ex_query_device) / 8,
		.out_words = (sizeof(struct ib_uverbs_ex_query_device_resp) + 7) / 8 };
	struct ib_uverbs_ex_cmd_hdr ex = { .response = 0xfffffffffffffff0ull };
	struct ib_uverbs_ex_query_device qd = { 0 };
	memcpy(buf, &h1, sizeof h1);
	memcpy(buf + sizeof h1, &ex, sizeof ex);
	memcpy(buf + sizeof h1 + sizeof ex, &qd, sizeof qd);
	size_t len = sizeof h1 + sizeof ex + sizeof qd;
	P("ex_resp_wraps", write(ctx->cmd_fd, buf, len) == (ssize_t)len ? 0 : errno);
	P("ex_resp_wraps_fd_works", fd_works());
	munmap(cqbuf, 4096);
}

/* A second open of the device: GET_CONTEXT asking for 2^32 - 1 bfregs (calc_total_bfregs:
 * more than MLX5_MAX_BFREGS is ENOMEM; rounding it up would overflow). */
static void bfregs(void)
{
	int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		P("bfregs_open", errno);
		return;
	}
	struct {
		struct ib_uverbs_cmd_hdr h;
		struct ib_uverbs_get_context c;
		struct mlx5_ib_alloc_ucontext_req_v2 d;
	} q;
	uint8_t resp[512];
	memset(&q, 0, sizeof q);
	q.h.command = IB_USER_VERBS_CMD_GET_CONTEXT;
	q.h.in_words = sizeof q / 4;
	q.h.out_words = sizeof resp / 4;
	q.c.response = (uintptr_t)resp;
	q.d.total_num_bfregs = 0xffffffffu;
	q.d.max_cqe_version = 1;
	P("get_context_bfregs_huge", write(fd, &q, sizeof q) == (ssize_t)sizeof q ? 0 : errno);
	q.d.total_num_bfregs = 0;
	P("get_context_bfregs_zero", write(fd, &q, sizeof q) == (ssize_t)sizeof q ? 0 : errno);
	q.d.total_num_bfregs = 8;
	P("get_context_bfregs_8", write(fd, &q, sizeof q) == (ssize_t)sizeof q ? 0 : errno);
	struct ib_uverbs_get_context_resp *r = (void *)resp;
	close(r->async_fd);
	close(fd);
}

/* 2. REG_MR of huge lengths: EINVAL past UINT_MAX pages, EFAULT for unmapped memory. */
static void huge_mr(struct ibv_pd *pd)
{
	void *p = pages(1, PROT_READ | PROT_WRITE);
	ERR("reg_mr_2p52", ibv_reg_mr(pd, p, 1ull << 52, IBV_ACCESS_LOCAL_WRITE));
	ERR("reg_mr_1tib", ibv_reg_mr(pd, p, 1ull << 40, IBV_ACCESS_LOCAL_WRITE));
	P("huge_mr_fd_works", fd_works());
	munmap(p, 4096);
}

/* 3. Read-only and PROT_NONE memory. */
static void protections(struct ibv_pd *pd)
{
	uint32_t h;
	void *rw = pages(2, PROT_READ | PROT_WRITE);
	void *ro = pages(2, PROT_READ);
	void *none = pages(2, PROT_NONE);
	/* The device only reads doorbell records (mlx5_ib_db_map_user pins for reading). */
	int e = raw_create_cq(rw, (uintptr_t)ro, &h);
	P("cq_db_readonly", e);
	if (!e)
		P("cq_db_readonly_destroy", raw_destroy_cq(h));
	P("cq_db_none", raw_create_cq(rw, (uintptr_t)none, &h));
	/* The device writes CQEs: the buffer is pinned for writing. */
	P("cq_buf_readonly", raw_create_cq(ro, (uintptr_t)rw + 4096, &h));
	ERR("reg_mr_none", ibv_reg_mr(pd, none, 8192, 0));
	ERR("reg_mr_readonly_write", ibv_reg_mr(pd, ro, 8192, IBV_ACCESS_LOCAL_WRITE));
	struct ibv_mr *mr = ibv_reg_mr(pd, ro, 8192, 0);
	ERR("reg_mr_readonly_read", mr);
	if (mr)
		ibv_dereg_mr(mr);
	P("protections_fd_works", fd_works());
	munmap(rw, 8192);
	munmap(ro, 8192);
	munmap(none, 8192);
}

static struct ibv_qp *raw_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = depth, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (!qp)
		return NULL;
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PORT);
	at.qp_state = IBV_QPS_RTR;
	ibv_modify_qp(qp, &at, IBV_QP_STATE);
	at.qp_state = IBV_QPS_RTS;
	ibv_modify_qp(qp, &at, IBV_QP_STATE);
	return qp;
}

static int send_one(struct ibv_qp *qp, void *addr, uint32_t lkey, int id)
{
	uint8_t *f = addr;
	struct ibv_sge s = { .addr = (uintptr_t)f, .length = 60, .lkey = lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	return ibv_post_send(qp, &w, &bad);
}

/* Polls until `want` completions or 5 s; returns how many, successes in *ok. */
static int poll_n(struct ibv_cq *cq, int want, int *ok)
{
	struct ibv_wc wc[16];
	double end = now() + 5;
	int got = 0;
	*ok = 0;
	while (got < want && now() < end) {
		int n = ibv_poll_cq(cq, 16, wc);
		for (int i = 0; i < n; i++)
			*ok += wc[i].status == IBV_WC_SUCCESS;
		got += n > 0 ? n : 0;
	}
	return got;
}

/* 4. Registered memory unmapped, a CQ buffer made read-only: the device keeps going. */
static void unpinned(struct ibv_pd *pd)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 63, NULL, NULL, 0);
	struct ibv_qp *qp = cq ? raw_qp(pd, cq, 16) : NULL;
	ERR("unpinned_setup", qp);
	if (!qp)
		return;
	uint8_t *mem = pages(4, PROT_READ | PROT_WRITE);
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 4 * 4096, IBV_ACCESS_LOCAL_WRITE);
	ERR("unpinned_reg_mr", mr);
	if (!mr)
		return;
	/* The application unmaps what it registered, then sends from it. The pages stay the
	 * device's: their address is not handed out again while the MR lives. */
	munmap(mem, 4 * 4096);
	void *again = mmap(mem, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	P("unmapped_mr_address_reused", again == mem);
	munmap(again, 4 * 4096);
	int ok;
	send_one(qp, mem + 4096, mr->lkey, 1);
	P("unmapped_mr_send_completions", poll_n(cq, 1, &ok));
	P("unmapped_mr_send_ok", ok);
	/* Memory malloc took from mmap, registered, then freed: glibc unmaps it itself. */
	uint8_t *big = malloc(1 << 20);
	uint8_t *inside = (uint8_t *)(((uintptr_t)big + 4095) & ~4095ul);
	struct ibv_mr *bmr = ibv_reg_mr(pd, inside, 64 * 4096, IBV_ACCESS_LOCAL_WRITE);
	free(big);
	if (bmr) {
		send_one(qp, inside + 8192, bmr->lkey, 3);
		P("freed_mr_send_completions", poll_n(cq, 1, &ok));
		P("freed_mr_send_ok", ok);
		ibv_dereg_mr(bmr);
	}
	/* The CQ buffer becomes read-only to the application; the device writes CQEs anyway. */
	struct mlx5dv_cq dcq;
	struct mlx5dv_obj o = { .cq = { .in = cq, .out = &dcq } };
	if (mlx5dv_init_obj(&o, MLX5DV_OBJ_CQ) == 0) {
		uint8_t *keep = pages(1, PROT_READ | PROT_WRITE);
		struct ibv_mr *mr2 = ibv_reg_mr(pd, keep, 4096, IBV_ACCESS_LOCAL_WRITE);
		uintptr_t b = (uintptr_t)dcq.buf & ~4095ul;
		size_t len = ((uintptr_t)dcq.buf + dcq.cqe_cnt * dcq.cqe_size - b + 4095) & ~4095ul;
		P("cq_buf_mprotect", mprotect((void *)b, len, PROT_READ));
		send_one(qp, keep, mr2->lkey, 2);
		P("readonly_cq_send_completions", poll_n(cq, 1, &ok));
		P("readonly_cq_send_ok", ok);
		ibv_dereg_mr(mr2);
		munmap(keep, 4096);
	}
	ERR("unpinned_destroy_qp", ibv_destroy_qp(qp) == 0);
	ERR("unpinned_dereg_mr", ibv_dereg_mr(mr) == 0);
	ERR("unpinned_destroy_cq", ibv_destroy_cq(cq) == 0);
	P("unpinned_fd_works", fd_works());
}

/* 5. Completion and CQ error events never read: ibv_destroy_cq must not wait for them. */
static void unread_events(struct ibv_pd *pd)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	/* Two CQE slots and eight signalled sends: an overrun, a CQ error event. */
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 1, NULL, ch, 0) : NULL;
	struct ibv_qp *qp = cq ? raw_qp(pd, cq, 16) : NULL;
	ERR("events_setup", qp);
	if (!qp)
		return;
	uint8_t *mem = pages(1, PROT_READ | PROT_WRITE);
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
	ERR("events_arm", ibv_req_notify_cq(cq, 0) == 0);
	for (int i = 0; i < 8; i++)
		send_one(qp, mem, mr->lkey, i);
	/* Wait (bounded) for the async CQ error, then leave it and the completion unread. */
	double end = now() + 5;
	int pending = 0;
	while (now() < end && !pending) {
		struct timespec t = { 0, 2000000 };
		nanosleep(&t, NULL);
		char c;
		pending = recv(ctx->async_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
	}
	P("events_async_pending", pending);
	ibv_destroy_qp(qp);
	alarm(20); /* a hang is a failure, not a stuck test */
	ERR("events_destroy_cq", ibv_destroy_cq(cq) == 0);
	ERR("events_destroy_channel", ibv_destroy_comp_channel(ch) == 0);
	alarm(0);

	/* An event read and acknowledged still counts: destroy after get + ack. */
	ch = ibv_create_comp_channel(ctx);
	cq = ibv_create_cq(ctx, 63, (void *)0x77, ch, 0);
	qp = raw_qp(pd, cq, 16);
	ibv_req_notify_cq(cq, 0);
	send_one(qp, mem, mr->lkey, 1);
	struct ibv_cq *ecq;
	void *ectx;
	alarm(20);
	ERR("events_get", ibv_get_cq_event(ch, &ecq, &ectx) == 0);
	ibv_ack_cq_events(cq, 1);
	ibv_destroy_qp(qp);
	ERR("events_read_destroy_cq", ibv_destroy_cq(cq) == 0);
	alarm(0);
	ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(mr);
	munmap(mem, 4096);
	P("events_fd_works", fd_works());
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "hang 1\n";
	write(1, m, sizeof m - 1);
	_exit(3);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGALRM, on_alarm);
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (n < 1)
		return 1;
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		return 1;
	const char *mode = argc > 1 ? argv[1] : "findings";
	if (!strcmp(mode, "panic")) {
		/* RAWQ_EMU_PANIC_IN=CREATE_CQ: this create panics inside the emulator. */
		ERR("panic_create_cq", ibv_create_cq(ctx, 15, NULL, NULL, 0));
		struct ibv_cq *cq = ibv_create_cq(ctx, 15, NULL, NULL, 0);
		ERR("after_panic_create_cq", cq);
		if (cq)
			ibv_destroy_cq(cq);
		P("after_panic_fd_works", fd_works());
	} else {
		const char *only = argc > 2 ? argv[2] : NULL;
#define SECTION(name, call) \
	if (!only || !strcmp(only, name)) \
		call
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		ERR("alloc_pd", pd);
		SECTION("overflows", overflows());
		SECTION("overflows", bfregs());
		SECTION("huge_mr", huge_mr(pd));
		SECTION("protections", protections(pd));
		SECTION("unpinned", unpinned(pd));
		SECTION("unread_events", unread_events(pd));
		ibv_dealloc_pd(pd);
	}
	alarm(20);
	ERR("close", ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	P("done", 1);
	return 0;
}
