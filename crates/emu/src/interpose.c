/*
 * rawq-emu: the thin C half of the LD_PRELOAD interposer.
 *
 * Only what C does better than Rust lives here: the variadic libc entry points (open, openat,
 * ioctl), symbol aliases (stat64 ...), and the real functions found with dlsym(RTLD_NEXT).
 * Decisions and state live in Rust (interpose.rs); this file asks it through rawq_emu_* calls.
 *
 * Which calls libibverbs / libmlx5 (rdma-core 44) make through the PLT, and why each is taken:
 *   open/openat     util/open_cdev.c: open_cdev() opens /dev/infiniband/uverbsN
 *   stat/fstat      libibverbs/init.c: try_access_device(); util/open_cdev.c (S_ISCHR + st_rdev)
 *   write           libibverbs/cmd_write.h: _execute_cmd_write() (the legacy write() ABI)
 *   ioctl           libibverbs/cmd_ioctl.c: execute_ioctl(): UVERBS_OBJECT_COUNTERS
 *                   (cmd_counters.c, ioctl only) is served; every other method answers
 *                   EPROTONOSUPPORT, so that cmd_fallback.c: _execute_ioctl_fallback() picks
 *                   the write() ABI for that method
 *   mmap            providers/mlx5/mlx5.c: mlx5_mmap() (UAR pages, clock page): validated
 *   close           so a reused fd number is not taken for the device
 *   dup/dup2/dup3/fcntl(F_DUPFD*)   a duplicate of a command fd is the same open file
 *   socket          libibverbs/ibdev_nl.c: NETLINK_RDMA refused, sysfs discovery is used
 *   ioctl(SIOCETHTOOL) on any socket, for the interface the emulated port names as its netdev:
 *                   ETHTOOL_GDRVINFO, ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS and ETHTOOL_GSTATS
 *                   of ETH_SS_STATS are answered with the mlx5e-named counters (DPDK's mlx5
 *                   PMD, drivers/net/mlx5/linux/mlx5_ethdev_os.c; `ethtool -S`; rawq's
 *                   device counters), every other request goes to the kernel
 *   open of $SYSFS_PATH/class/infiniband/mlx5_N/ports/1/hw_counters/NAME (DPDK's mlx5 PMD,
 *                   drivers/net/mlx5/linux/mlx5_os.c: mlx5_os_read_dev_stat): a file
 *                   with the model's value at this moment, as sysfs reads the device at open
 * Everything else, and every other path or fd, goes to the real libc unchanged.
 *
 * Nothing starts here: the constructor only resolves the real functions. The Rust side starts
 * when a uverbs device node is opened.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <linux/netlink.h>
#include <linux/sockios.h>

/* Rust side (interpose.rs). */
extern int rawq_emu_open_dev(const char *path, int flags);
extern int rawq_emu_open_counter(const char *path, int flags);
extern int rawq_emu_stat_dev(const char *path, unsigned int *major, unsigned int *minor);
extern int rawq_emu_fstat_dev(int fd, unsigned int *major, unsigned int *minor);
extern long rawq_emu_write(int fd, const void *buf, size_t count);
extern int rawq_emu_mmap_check(int fd, size_t len, int prot, long long off);
extern long long rawq_emu_mmap_offset(long long off);
extern void rawq_emu_release(int fd);
extern int rawq_emu_dup(int oldfd, int newfd);
extern void rawq_emu_close_other(int fd);
extern int rawq_emu_ioctl(int fd, unsigned long req, void *arg);
extern int rawq_emu_ethtool(void *ifr);
extern int rawq_emu_munmap(void *addr, size_t len);
extern void rawq_emu_mapped_fixed(void *addr, size_t len);
extern int rawq_emu_pins_any(void);

/* Answer "not a device of ours, use the real call". */
#define RAWQ_EMU_PASS INT_MIN

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_stat)(const char *, struct stat *);
static int (*real_lstat)(const char *, struct stat *);
static int (*real_fstat)(int, struct stat *);
static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_ioctl)(int, unsigned long, ...);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_close)(int);
static int (*real_socket)(int, int, int);
static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);
static int (*real_fcntl)(int, int, ...);
static int (*real_munmap)(void *, size_t);

static void resolve(void)
{
	/* Idempotent; racing threads store the same values. */
	if (real_close)
		return;
	real_open = dlsym(RTLD_NEXT, "open");
	real_open64 = dlsym(RTLD_NEXT, "open64");
	real_openat = dlsym(RTLD_NEXT, "openat");
	real_openat64 = dlsym(RTLD_NEXT, "openat64");
	real_stat = dlsym(RTLD_NEXT, "stat");
	real_lstat = dlsym(RTLD_NEXT, "lstat");
	real_fstat = dlsym(RTLD_NEXT, "fstat");
	real_write = dlsym(RTLD_NEXT, "write");
	real_ioctl = dlsym(RTLD_NEXT, "ioctl");
	real_mmap = dlsym(RTLD_NEXT, "mmap");
	real_socket = dlsym(RTLD_NEXT, "socket");
	real_dup = dlsym(RTLD_NEXT, "dup");
	real_dup2 = dlsym(RTLD_NEXT, "dup2");
	real_dup3 = dlsym(RTLD_NEXT, "dup3");
	real_fcntl = dlsym(RTLD_NEXT, "fcntl");
	real_munmap = dlsym(RTLD_NEXT, "munmap");
	real_close = dlsym(RTLD_NEXT, "close");
}

__attribute__((constructor)) static void rawq_emu_ctor(void)
{
	resolve();
}

/* The emulated command fds: a lock-free bitmap, so the check on every write/close of the
 * process costs one load and never takes a lock the Rust side may hold. */
#define FD_WORDS 1024 /* fds 0 .. 65535 */
static _Atomic uint64_t emu_fds[FD_WORDS];
static _Atomic int emu_any;

static int is_emu(int fd)
{
	if (fd < 0 || fd >= FD_WORDS * 64 || !atomic_load_explicit(&emu_any, memory_order_relaxed))
		return 0;
	return (atomic_load(&emu_fds[fd / 64]) >> (fd % 64)) & 1;
}

static void mark(int fd, int on)
{
	uint64_t bit = 1ULL << (fd % 64);
	if (on) {
		atomic_fetch_or(&emu_fds[fd / 64], bit);
		atomic_store(&emu_any, 1);
	} else {
		atomic_fetch_and(&emu_fds[fd / 64], ~bit);
	}
}

static int is_dev_path(const char *path)
{
	return path && !strncmp(path, "/dev/infiniband/uverbs", 22);
}

static int is_counter_path(const char *path)
{
	return path && strstr(path, "/hw_counters/");
}

/* Returns the new fd, -1 with errno, or RAWQ_EMU_PASS. */
static int open_counter(const char *path, int flags)
{
	int fd = rawq_emu_open_counter(path, flags);
	if (fd < 0 && fd != RAWQ_EMU_PASS) {
		errno = -fd;
		return -1;
	}
	return fd;
}

/* Returns the new fd, -1 with errno, or RAWQ_EMU_PASS. */
static int open_dev(const char *path, int flags)
{
	int fd = rawq_emu_open_dev(path, flags);
	if (fd == RAWQ_EMU_PASS)
		return fd;
	if (fd < 0) {
		errno = -fd;
		return -1;
	}
	if (fd >= FD_WORDS * 64) {
		rawq_emu_release(fd);
		real_close(fd);
		errno = EMFILE;
		return -1;
	}
	mark(fd, 1);
	return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;
	int fd;

	resolve();
	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	if (is_dev_path(path) && (fd = open_dev(path, flags)) != RAWQ_EMU_PASS)
		return fd;
	if (is_counter_path(path) && (fd = open_counter(path, flags)) != RAWQ_EMU_PASS)
		return fd;
	return real_open(path, flags, m);
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;
	int fd;

	resolve();
	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	if (is_dev_path(path) && (fd = open_dev(path, flags)) != RAWQ_EMU_PASS)
		return fd;
	if (is_counter_path(path) && (fd = open_counter(path, flags)) != RAWQ_EMU_PASS)
		return fd;
	return real_open64(path, flags, m);
}

int __open_2(const char *path, int flags)
{
	return open(path, flags);
}

int __open64_2(const char *path, int flags)
{
	return open64(path, flags);
}

int openat(int dfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;
	int fd;

	resolve();
	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	if (is_dev_path(path) && (fd = open_dev(path, flags)) != RAWQ_EMU_PASS)
		return fd;
	if (is_counter_path(path) && (fd = open_counter(path, flags)) != RAWQ_EMU_PASS)
		return fd;
	return real_openat(dfd, path, flags, m);
}

int openat64(int dfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;
	int fd;

	resolve();
	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	if (is_dev_path(path) && (fd = open_dev(path, flags)) != RAWQ_EMU_PASS)
		return fd;
	if (is_counter_path(path) && (fd = open_counter(path, flags)) != RAWQ_EMU_PASS)
		return fd;
	return real_openat64(dfd, path, flags, m);
}

/* A character device node, as util/open_cdev.c: open_cdev() expects (S_ISCHR, st_rdev equal
 * to sysfs "dev"). */
static void cdev_stat(struct stat *st, unsigned int major, unsigned int minor)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = S_IFCHR | 0666;
	st->st_rdev = makedev(major, minor);
	st->st_dev = makedev(0, 5);
	st->st_nlink = 1;
	st->st_blksize = 4096;
}

static int stat_dev(const char *path, struct stat *st)
{
	unsigned int major, minor;

	if (!is_dev_path(path) || !rawq_emu_stat_dev(path, &major, &minor))
		return RAWQ_EMU_PASS;
	cdev_stat(st, major, minor);
	return 0;
}

/* glibc >= 2.33 exports stat/lstat/fstat as real symbols (stat@GLIBC_2.33); an unversioned
 * definition in a preloaded object satisfies those versioned references. The *64 variants
 * have the same layout on LP64. */
int stat(const char *path, struct stat *st)
{
	int r;

	resolve();
	if ((r = stat_dev(path, st)) != RAWQ_EMU_PASS)
		return r;
	return real_stat(path, st);
}

int lstat(const char *path, struct stat *st)
{
	int r;

	resolve();
	if ((r = stat_dev(path, st)) != RAWQ_EMU_PASS)
		return r;
	return real_lstat(path, st);
}

int fstat(int fd, struct stat *st)
{
	unsigned int major, minor;

	resolve();
	if (is_emu(fd) && rawq_emu_fstat_dev(fd, &major, &minor)) {
		cdev_stat(st, major, minor);
		return 0;
	}
	return real_fstat(fd, st);
}

int stat64(const char *path, struct stat64 *st) __attribute__((alias("stat")));
int lstat64(const char *path, struct stat64 *st) __attribute__((alias("lstat")));
int fstat64(int fd, struct stat64 *st) __attribute__((alias("fstat")));

ssize_t write(int fd, const void *buf, size_t count)
{
	long r;

	resolve();
	if (!is_emu(fd))
		return real_write(fd, buf, count);
	r = rawq_emu_write(fd, buf, count);
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;

	resolve();
	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (is_emu(fd)) {
		/* The counters methods are served; any other method is EPROTONOSUPPORT, so that
		 * libibverbs uses write() for that one (emu/src/cmd/counters.rs). */
		int r = rawq_emu_ioctl(fd, req, arg);

		if (r < 0) {
			errno = -r;
			return -1;
		}
		return r;
	}
	if (req == SIOCETHTOOL) {
		/* The port netdev's statistics (emu/src/discovery/ethtool.rs); other requests and
		 * other interfaces: RAWQ_EMU_PASS, the kernel's answer. */
		int r = rawq_emu_ethtool(arg);

		if (r != RAWQ_EMU_PASS) {
			if (r < 0) {
				errno = -r;
				return -1;
			}
			return r;
		}
	}
	return real_ioctl(fd, req, arg);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	int r;

	resolve();
	if (is_emu(fd)) {
		if ((r = rawq_emu_mmap_check(fd, len, prot, (long long)off)) != 0) {
			errno = -r;
			return MAP_FAILED;
		}
		/* Every UAR command maps the one page the emulator watches (mmap.rs). */
		off = (off_t)rawq_emu_mmap_offset((long long)off);
	}
	/* A fixed mapping over pages the emulator kept for the device: the application owns that
	 * address again (the device keeps what it reaches there). */
	if ((flags & MAP_FIXED) && rawq_emu_pins_any())
		rawq_emu_mapped_fixed(addr, len);
	return real_mmap(addr, len, prot, flags, fd, off);
}

/* munmap of pages pinned for the device (pin.rs): they stay mapped, for the device only, until
 * the object is destroyed, as a kernel pin keeps the pages; the rest is unmapped. */
int munmap(void *addr, size_t len)
{
	resolve();
	if (rawq_emu_pins_any()) {
		int r = rawq_emu_munmap(addr, len);
		if (r != RAWQ_EMU_PASS) {
			if (r < 0) {
				errno = -r;
				return -1;
			}
			return 0;
		}
	}
	return real_munmap(addr, len);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
	__attribute__((alias("mmap")));

int close(int fd)
{
	resolve();
	if (is_emu(fd)) {
		mark(fd, 0);
		rawq_emu_release(fd);
	} else if (atomic_load_explicit(&emu_any, memory_order_relaxed)) {
		/* Perhaps a completion channel (ibv_destroy_comp_channel closes its fd). */
		rawq_emu_close_other(fd);
	}
	return real_close(fd);
}

/* After a successful duplication of `oldfd` into `newfd` (which the kernel closed first if it
 * was open): `newfd` is no longer what it was, and is a command fd if `oldfd` is one. */
static void dup_done(int oldfd, int newfd)
{
	if (newfd < 0 || newfd == oldfd)
		return;
	if (is_emu(newfd)) {
		mark(newfd, 0);
		rawq_emu_release(newfd);
	}
	if (is_emu(oldfd) && newfd < FD_WORDS * 64 && rawq_emu_dup(oldfd, newfd))
		mark(newfd, 1);
}

int dup(int oldfd)
{
	int r;

	resolve();
	r = real_dup(oldfd);
	dup_done(oldfd, r);
	return r;
}

int dup2(int oldfd, int newfd)
{
	int r;

	resolve();
	r = real_dup2(oldfd, newfd);
	dup_done(oldfd, r);
	return r;
}

int dup3(int oldfd, int newfd, int flags)
{
	int r;

	resolve();
	r = real_dup3(oldfd, newfd, flags);
	dup_done(oldfd, r);
	return r;
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;
	int r;

	resolve();
	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	r = real_fcntl(fd, cmd, arg);
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		dup_done(fd, r);
	return r;
}

int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

int socket(int domain, int type, int proto)
{
	resolve();
	/* ibdev_nl.c: find_sysfs_devs_nl() would list the host's real devices and never read
	 * $SYSFS_PATH. */
	if (domain == AF_NETLINK && proto == NETLINK_RDMA) {
		errno = EPROTONOSUPPORT;
		return -1;
	}
	return real_socket(domain, type, proto);
}

/* The real calls, for the Rust side (its own maps of the command memfd must not go through the
 * checks above, which may run while it holds its locks). */
void *rawq_emu_real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	resolve();
	return real_mmap(addr, len, prot, flags, fd, off);
}

int rawq_emu_real_close(int fd)
{
	resolve();
	return real_close(fd);
}
