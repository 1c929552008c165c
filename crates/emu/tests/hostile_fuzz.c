/*
 * A fuzzer of the emulated uverbs kernel (issue 23), run under scripts/emu.sh by
 * emu/tests/hostile.rs with a few seeds. Unmodified libibverbs + libmlx5 set up ordinary
 * objects while this program records every write() command they send on the command fd (it
 * defines write(), which libibverbs binds to before the emulator's). Then, per round:
 *
 *  - the recorded commands are replayed mutated: random header words (command, in/out words),
 *    sizes cut or grown, bytes flipped, words set to edge values or small handles, and every
 *    pointer replaced by one into a scratch area, a guard (PROT_NONE) page, a read-only page, an
 *    unmapped hole, or an address that wraps;
 *  - random bytes go into a victim QP's send and receive rings and its CQ, followed by
 *    doorbells, while pages of the victim's MR are unmapped or protected under the device;
 *  - random mmap offsets of the command fd are tried.
 *
 * Each round ends with a final ALLOC_PD, teardown of the objects it made (watchdog: a hang
 * is a failure) and the device closed. Across rounds the process's fds and resident memory
 * must not grow. Prints "name value" lines; exits non-zero on a failed check.
 *
 *   hostile_fuzz SEED ROUNDS COMMANDS RING_OPS
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <execinfo.h>
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include <rdma/ib_user_verbs.h>

#define P(name, v) printf("%s %ld\n", name, (long)(v))

/* ---- recording libibverbs' commands ---- */

#define MAX_REC 256
static struct { uint8_t b[1024]; size_t n; } rec[MAX_REC];
static int nrec, recording = -1; /* the fd recorded, -1: none */
static ssize_t (*real_write)(int, const void *, size_t);

ssize_t write(int fd, const void *buf, size_t n)
{
	if (!real_write)
		real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	if (fd == recording && nrec < MAX_REC && n <= sizeof rec[0].b) {
		memcpy(rec[nrec].b, buf, n);
		rec[nrec].n = n;
		nrec++;
	}
	return real_write(fd, buf, n);
}

/* ---- randomness ---- */

static uint64_t rs;
static uint64_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

/* ---- memory the mutated pointers point at ---- */

#define SCRATCH_PAGES 64
static uint8_t *scratch, *guard, *rdonly, *hole;

static void *map(size_t pages, int prot)
{
	void *p = mmap(NULL, pages * 4096, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

static uint64_t some_pointer(void)
{
	static const uint64_t edges[] = { 0, 1, 0xfff, 0x1000, 0x7ffffffff000ull,
		0xffff800000000000ull, 0xfffffffffffff000ull, 0xfffffffffffffff9ull,
		0xffffffffffffffffull };
	switch (below(8)) {
	case 0: return (uintptr_t)guard + below(4096);
	case 1: return (uintptr_t)rdonly + below(4096);
	case 2: return (uintptr_t)hole + below(8192);
	case 3: return edges[below(sizeof edges / sizeof edges[0])];
	case 4: return (uintptr_t)scratch + SCRATCH_PAGES * 4096 - below(64); /* runs off the end */
	default: return (uintptr_t)scratch + below(SCRATCH_PAGES) * 4096 + (below(4) ? 0 : below(4096));
	}
}

static uint32_t some_word(void)
{
	static const uint32_t edges[] = { 0, 1, 2, 3, 4, 7, 8, 63, 64, 255, 4096, 0x7fffffff,
		0x80000000u, 0xffffffffu, 0xfffffffeu, 1u << 24, (1u << 24) - 1 };
	return below(2) ? edges[below(sizeof edges / sizeof edges[0])] : (uint32_t)rnd();
}

static int is_pointer(uint64_t v) { return v >= 0x10000 && v < 0x800000000000ull; }

/* A user address in one of the areas above (or an unmapped edge): the device may write there. */
static int ours(uint64_t v)
{
	uint64_t s = (uintptr_t)scratch;
	return (v >= s - 4096 && v < s + (SCRATCH_PAGES + 1) * 4096) ||
	       (v >= (uintptr_t)guard && v < (uintptr_t)guard + 4096) ||
	       (v >= (uintptr_t)rdonly && v < (uintptr_t)rdonly + 4096) ||
	       (v >= (uintptr_t)hole && v < (uintptr_t)hole + 8192) || v == 0x7ffffffff000ull;
}

/* Every 8-byte word that could be a user address and is not one of ours moves into scratch:
 * libibverbs' originals point at its stack and at live rings, and a mutated one could point
 * anywhere in this process, where the device (as a kernel would) writes the response. */
static void sanitize(uint8_t *b, size_t n)
{
	for (size_t o = 8; o + 8 <= n; o += 8) {
		uint64_t v;
		memcpy(&v, b + o, 8);
		if (is_pointer(v) && !ours(v)) {
			v = (uintptr_t)scratch + below(SCRATCH_PAGES) * 4096 + (v & 0xfff);
			memcpy(b + o, &v, 8);
		}
	}
}

/* The recorded command `r`, sanitized, mutated, sanitized again. */
static size_t mutate(int r, uint8_t *out)
{
	size_t n = rec[r].n;
	memcpy(out, rec[r].b, n);
	sanitize(out, n);
	int k = below(4); /* none: the command as libibverbs sent it, into scratch memory */
	while (k--) {
		switch (below(9)) {
		case 0: { /* the command word */
			uint32_t c = below(3) ? (uint32_t)below(64) : (uint32_t)rnd();
			if (below(2))
				c |= IB_USER_VERBS_CMD_FLAG_EXTENDED;
			memcpy(out, &c, 4);
			break;
		}
		case 1: { /* in_words / out_words */
			uint16_t w = below(2) ? (uint16_t)below(64) : (uint16_t)rnd();
			memcpy(out + 4 + 2 * below(2), &w, 2);
			break;
		}
		case 2: { /* the size written; grown bytes are zero */
			size_t m = below(2) ? below(n + 1) : n + below(64);
			if (m > 1024)
				m = 1024;
			if (m > n)
				memset(out + n, 0, m - n);
			n = m;
			break;
		}
		case 3: /* a byte */
			if (n)
				out[below(n)] = rnd();
			break;
		case 4: case 5: { /* a word: an edge value or a small handle */
			if (n < 4)
				break;
			uint32_t w = below(2) ? some_word() : (uint32_t)below(16);
			memcpy(out + (below(n / 4) * 4), &w, 4);
			break;
		}
		default: { /* a pointer */
			if (n < 16)
				break;
			uint64_t p = some_pointer();
			memcpy(out + 8 + below((n - 8) / 8) * 8, &p, 8);
			break;
		}
		}
	}
	sanitize(out, n);
	/* A completion channel is an fd the application gets: it would count as growth. */
	uint32_t c;
	memcpy(&c, out, 4);
	if ((c & IB_USER_VERBS_CMD_COMMAND_MASK) == IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL &&
	    !(c & IB_USER_VERBS_CMD_FLAG_EXTENDED)) {
		c = IB_USER_VERBS_CMD_QUERY_PORT;
		memcpy(out, &c, 4);
	}
	return n;
}

/* ---- the ordinary objects, set up through libibverbs while recording ---- */

struct objs {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr, *vmr;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *vcq;
	struct ibv_qp *qp, *vqp, *rss;
	struct ibv_wq *wq;
	struct ibv_rwq_ind_table *tbl;
	struct ibv_flow *flow;
	uint8_t *mem, *vmem;
};

static struct ibv_qp *raw_qp(struct objs *o, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(o->pd, &a);
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

static int setup(struct ibv_device *dev, struct objs *o)
{
	memset(o, 0, sizeof *o);
	o->ctx = ibv_open_device(dev);
	if (!o->ctx)
		return -1;
	recording = o->ctx->cmd_fd;
	o->pd = ibv_alloc_pd(o->ctx);
	o->mem = map(16, PROT_READ | PROT_WRITE);
	o->vmem = map(8, PROT_READ | PROT_WRITE);
	memset(o->vmem, 0x5a, 8 * 4096);
	o->mr = ibv_reg_mr(o->pd, o->mem, 16 * 4096, IBV_ACCESS_LOCAL_WRITE);
	o->vmr = ibv_reg_mr(o->pd, o->vmem, 8 * 4096, IBV_ACCESS_LOCAL_WRITE);
	o->ch = ibv_create_comp_channel(o->ctx);
	o->cq = ibv_create_cq(o->ctx, 255, NULL, o->ch, 0);
	o->vcq = ibv_create_cq(o->ctx, 63, NULL, NULL, 0);
	if (!o->pd || !o->mr || !o->vmr || !o->cq || !o->vcq)
		return -1;
	ibv_req_notify_cq(o->cq, 0);
	o->qp = raw_qp(o, o->cq);
	o->vqp = raw_qp(o, o->vcq);
	if (!o->qp || !o->vqp)
		return -1;
	struct ibv_wq_init_attr wa = { .wq_type = IBV_WQT_RQ, .max_wr = 64, .max_sge = 1,
				       .pd = o->pd, .cq = o->cq };
	o->wq = ibv_create_wq(o->ctx, &wa);
	if (o->wq) {
		struct ibv_wq_attr m = { .attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_RDY };
		ibv_modify_wq(o->wq, &m);
		struct ibv_rwq_ind_table_init_attr ta = { .log_ind_tbl_size = 0, .ind_tbl = &o->wq };
		o->tbl = ibv_create_rwq_ind_table(o->ctx, &ta);
	}
	if (o->tbl) {
		static uint8_t key[40] = { 1, 2, 3 };
		struct ibv_qp_init_attr_ex qa = {
			.qp_type = IBV_QPT_RAW_PACKET,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE |
				     IBV_QP_INIT_ATTR_RX_HASH,
			.pd = o->pd, .rwq_ind_tbl = o->tbl,
			.rx_hash_conf = { .rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ,
					  .rx_hash_key_len = 40, .rx_hash_key = key,
					  .rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 },
		};
		o->rss = ibv_create_qp_ex(o->ctx, &qa);
	}
	struct {
		struct ibv_flow_attr a;
		struct ibv_flow_spec_eth e;
	} fa = {
		.a = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof fa, .num_of_specs = 1, .port = 1 },
		.e = { .type = IBV_FLOW_SPEC_ETH, .size = sizeof(struct ibv_flow_spec_eth),
		       .val = { .dst_mac = { 2, 0xfc, 0, 0, 0, 1 } },
		       .mask = { .dst_mac = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff } } },
	};
	o->flow = ibv_create_flow(o->qp, &fa.a);
	struct ibv_device_attr_ex dx;
	ibv_query_device_ex(o->ctx, NULL, &dx);
	struct ibv_port_attr pa;
	ibv_query_port(o->ctx, 1, &pa);
	/* Commands libibverbs sends only to destroy: record them on throw-away objects. */
	struct ibv_cq *c2 = ibv_create_cq(o->ctx, 3, NULL, NULL, 0);
	struct ibv_pd *p2 = ibv_alloc_pd(o->ctx);
	struct ibv_mr *m2 = p2 ? ibv_reg_mr(p2, o->mem, 4096, 0) : NULL;
	if (m2)
		ibv_dereg_mr(m2);
	if (p2)
		ibv_dealloc_pd(p2);
	if (c2)
		ibv_destroy_cq(c2);
	recording = -1;
	return 0;
}

static long channel_fds_closed;

static void teardown(struct objs *o)
{
	if (o->flow)
		ibv_destroy_flow(o->flow);
	if (o->rss)
		ibv_destroy_qp(o->rss);
	if (o->tbl)
		ibv_destroy_rwq_ind_table(o->tbl);
	if (o->wq)
		ibv_destroy_wq(o->wq);
	if (o->qp)
		ibv_destroy_qp(o->qp);
	if (o->vqp)
		ibv_destroy_qp(o->vqp);
	if (o->cq)
		ibv_destroy_cq(o->cq);
	if (o->vcq)
		ibv_destroy_cq(o->vcq);
	/* A fuzzed DESTROY_CQ may have taken the channel's CQ first; then libibverbs keeps the
	 * channel (EBUSY) and this program closes its fd itself, as its owner. */
	if (o->ch && ibv_destroy_comp_channel(o->ch)) {
		channel_fds_closed++;
		close(o->ch->fd);
	}
	if (o->mr)
		ibv_dereg_mr(o->mr);
	if (o->vmr)
		ibv_dereg_mr(o->vmr);
	if (o->pd)
		ibv_dealloc_pd(o->pd);
}

/* ---- garbage in the victim's rings ---- */

static uint32_t sq_pi;

static void ring_op(struct objs *o)
{
	struct mlx5dv_qp dq;
	struct mlx5dv_cq dc;
	struct mlx5dv_obj ob = { .qp = { .in = o->vqp, .out = &dq }, .cq = { .in = o->vcq, .out = &dc } };
	if (mlx5dv_init_obj(&ob, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ))
		return;
	switch (below(6)) {
	case 0: case 1: { /* send WQEs: half-plausible, half random, then the doorbells */
		int k = 1 + below(4);
		for (int i = 0; i < k; i++) {
			uint8_t *w = (uint8_t *)dq.sq.buf + ((sq_pi + i) % dq.sq.wqe_cnt) * 64;
			for (int j = 0; j < 64; j += 8) {
				uint64_t r = rnd();
				memcpy(w + j, &r, 8);
			}
			if (below(2)) {
				uint32_t ctrl0 = htobe32(((sq_pi + i) & 0xffff) << 8 | 0x0a);
				uint32_t ctrl1 = htobe32(dq.sq.wqe_cnt ? (o->vqp->qp_num << 8) | below(8) : 0);
				memcpy(w, &ctrl0, 4);
				memcpy(w + 4, &ctrl1, 4);
				uint32_t len = htobe32(below(2) ? below(9000) : (uint32_t)rnd());
				uint32_t key = htobe32(below(2) ? o->vmr->lkey : (uint32_t)rnd());
				uint64_t addr = htobe64(below(2) ? (uintptr_t)o->vmem + below(8 * 4096)
								 : some_pointer());
				memcpy(w + 48, &len, 4);
				memcpy(w + 52, &key, 4);
				memcpy(w + 56, &addr, 8);
			}
		}
		sq_pi += k;
		dq.dbrec[1] = htobe32(below(4) ? sq_pi : (uint32_t)rnd());
		if (dq.bf.reg) {
			uint64_t first;
			memcpy(&first, (uint8_t *)dq.sq.buf + (sq_pi % dq.sq.wqe_cnt) * 64, 8);
			*(volatile uint64_t *)dq.bf.reg = first;
		}
		break;
	}
	case 2: { /* receive WQEs and their doorbell */
		for (uint32_t i = 0; i < 4 && dq.rq.wqe_cnt; i++) {
			uint8_t *w = (uint8_t *)dq.rq.buf + below(dq.rq.wqe_cnt) * dq.rq.stride;
			uint32_t len = htobe32(below(9000)), key = htobe32(below(2) ? o->vmr->lkey : rnd());
			uint64_t addr = htobe64(below(2) ? (uintptr_t)o->vmem + below(8 * 4096) : some_pointer());
			memcpy(w, &len, 4);
			memcpy(w + 4, &key, 4);
			memcpy(w + 8, &addr, 8);
		}
		dq.dbrec[0] = htobe32((uint32_t)rnd());
		break;
	}
	case 3: /* the CQ's buffer and doorbell record (consumer index, arm) */
		for (int i = 0; i < 8; i++)
			((uint8_t *)dc.buf)[below(dc.cqe_cnt * dc.cqe_size)] = rnd();
		dc.dbrec[below(2)] = htobe32((uint32_t)rnd());
		break;
	case 4: { /* a page of the victim MR unmapped or protected under the device */
		uint8_t *pg = o->vmem + below(8) * 4096;
		if (below(2))
			munmap(pg, 4096);
		else
			mprotect(pg, 4096, below(2) ? PROT_NONE : PROT_READ);
		break;
	}
	default: { /* a random mmap offset of the command fd */
		long off = (long)(below(2) ? below(1 << 20) : rnd() & 0xffffffff) * 4096;
		size_t len = 4096 * (1 + below(4));
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, o->ctx->cmd_fd, off);
		if (p != MAP_FAILED)
			munmap(p, len);
		break;
	}
	}
}

/* ---- growth ---- */

static int fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* With HOSTILE_FUZZ_FDS set: what each open fd is, on stderr. */
static void list_fds(void)
{
	if (!getenv("HOSTILE_FUZZ_FDS"))
		return;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char p[300], t[256] = "";
		snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
		ssize_t k = readlink(p, t, sizeof t - 1);
		if (k > 0)
			t[k] = 0;
		fprintf(stderr, "fd %s -> %s\n", e->d_name, t);
	}
	if (d)
		closedir(d);
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "hang 1\n";
	ssize_t r = real_write ? real_write(1, m, sizeof m - 1) : -1;
	(void)r;
	_exit(3);
}

/* A crash of this process (not a fault the emulator serves for the device, which it handles
 * before us) says where, then ends the run. */
static void on_crash(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char m[96];
	int k = snprintf(m, sizeof m, "crash signal %d addr %p\n", sig, si->si_addr);
	ssize_t r = real_write ? real_write(2, m, k) : -1;
	(void)r;
	void *bt[32];
	backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
	_exit(128 + sig);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGALRM, on_alarm);
	struct sigaction sa = { .sa_sigaction = on_crash, .sa_flags = SA_SIGINFO };
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	rs = argc > 1 ? strtoull(argv[1], NULL, 0) * 0x9e3779b97f4a7c15ull + 1 : 1;
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	long commands = argc > 3 ? atol(argv[3]) : 5000;
	long ring_ops = argc > 4 ? atol(argv[4]) : 500;
	/* Scratch between two guard pages: a ring or MR that runs past it is refused (EFAULT)
	 * rather than pinned over whatever this process has mapped next to it. */
	scratch = (uint8_t *)map(SCRATCH_PAGES + 2, PROT_NONE) + 4096;
	mprotect(scratch, SCRATCH_PAGES * 4096, PROT_READ | PROT_WRITE);
	guard = map(1, PROT_NONE);
	rdonly = map(1, PROT_READ);
	hole = map(2, PROT_READ);
	munmap(hole, 8192);

	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (n < 1)
		return 1;
	int fd0 = 0, fails = 0;
	long rss0 = 0, sent = 0, errors = 0, rops = 0;
	for (int round = 0; round < rounds; round++) {
		struct objs o;
		nrec = 0;
		alarm(60);
		if (setup(list[0], &o)) {
			P("setup_failed", round);
			return 1;
		}
		uint8_t buf[1024];
		for (long i = 0; i < commands; i++) {
			size_t len = mutate(below(nrec), buf);
			if (real_write(o.ctx->cmd_fd, buf, len) < 0)
				errors++;
			sent++;
			if (ring_ops && i % (commands / ring_ops + 1) == 0) {
				ring_op(&o);
				rops++;
			}
		}
		/* The device is still usable. */
		struct ibv_pd *pd = ibv_alloc_pd(o.ctx);
		if (!pd) {
			P("final_alloc_pd_failed", errno);
			fails++;
		} else {
			ibv_dealloc_pd(pd);
		}
		teardown(&o);
		if (ibv_close_device(o.ctx)) {
			P("close_failed", errno);
			fails++;
		}
		alarm(0);
		munmap(o.mem, 16 * 4096);
		munmap(o.vmem, 8 * 4096);
		if (round == 0) {
			fd0 = fds();
			rss0 = rss_kb();
		}
	}
	P("commands", sent);
	P("command_errors", errors);
	P("ring_ops", rops);
	P("recorded", nrec);
	list_fds();
	P("fd_growth", fds() - fd0);
	P("rss_growth_kb", rss_kb() - rss0);
	P("channel_fds_closed", channel_fds_closed);
	P("failures", fails);
	ibv_free_device_list(list);
	P("done", 1);
	return 0;
}
