// SPDX-License-Identifier: GPL-2.0
/*
 * A seeded, bounded fuzzer of fgds's ioctls and mappings: random sequences of
 * open/close of both GPUs' nodes, dma-buf exports (of either GPU, and a
 * udmabuf of system memory), REG/UNREG/QUERY with random descriptors,
 * offsets, sizes, flags, reserved fields and cookies, random ioctl numbers
 * and argument pointers, mmap with random offsets, lengths, protections and
 * flags, partial munmap, mremap, mprotect, CPU access, O_DIRECT I/O into
 * random parts of mappings, fork, and revocations by the exporter.
 *
 * Every result must be success or an errno that Documentation/misc-devices/
 * fgds.rst documents for that call; a CPU access may only fault with SIGBUS
 * on a torn-down registration. At the end: iterations, errnos seen, kernel
 * reports (must be 0), registrations and struct pages left (must be 0).
 *
 * FGDS_FUZZ_SEED (default 1), FGDS_FUZZ_ITERS (default 100,000, which a
 * default run must reach) and FGDS_FUZZ_SECONDS (default 300, a bound) set
 * the run; the seed and the number of iterations done are printed, and
 * reproduce the same sequence.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/udmabuf.h>

#include "kselftest_harness.h"
#include "fgds_test.h"
#include "fgds_util.h"

/* The area of the first GPU's BAR this run owns; the raw partition's last 128 MiB. */
#define AREA (448 * SZ_1M)
#define AREA_LEN (64 * SZ_1M)
#define RAW_OFF (896 * SZ_1M)
#define RAW_LEN (128 * SZ_1M)

#define NR_NODES 4
#define NR_BUFS 8
#define NR_REGS 16
#define NR_MAPS 16

enum op {
	OP_OPEN, OP_CLOSE, OP_EXPORT, OP_CLOSE_DMABUF, OP_REG, OP_REG_BADPTR, OP_UNREG,
	OP_QUERY, OP_IOCTL, OP_MMAP, OP_MUNMAP, OP_MREMAP, OP_MPROTECT, OP_TOUCH, OP_IO,
	OP_FORK, OP_REVOKE, NR_OPS
};

static const char *const op_name[NR_OPS] = {
	"open", "close", "export", "close-dmabuf", "reg", "reg-badptr", "unreg", "query",
	"ioctl", "mmap", "munmap", "mremap", "mprotect", "touch", "io", "fork", "revoke",
};

#define E(x) ((__uint128_t)1 << (x))
#define NR_ERRNOS 128
/* What each call may return (0: success), per the documentation. */
static const __uint128_t allowed[NR_OPS] = {
	[OP_OPEN] = E(0),
	[OP_CLOSE] = E(0),
	[OP_EXPORT] = E(0) | E(ENODEV) | E(EINVAL),
	[OP_CLOSE_DMABUF] = E(0),
	[OP_REG] = E(0) | E(EBADF) | E(EINVAL) | E(ERANGE) | E(EXDEV) | E(EBUSY) |
		   E(EOPNOTSUPP) | E(ENODEV),
	[OP_REG_BADPTR] = E(EFAULT),
	[OP_UNREG] = E(0) | E(ENOENT) | E(EINVAL),
	[OP_QUERY] = E(0) | E(ENOENT) | E(EINVAL),
	[OP_IOCTL] = E(0) | E(ENOTTY) | E(EFAULT) | E(EBADF) | E(EINVAL) | E(ERANGE) |
		     E(EXDEV) | E(EBUSY) | E(EOPNOTSUPP) | E(ENODEV) | E(ENOENT),
	[OP_MMAP] = E(0) | E(EINVAL) | E(ENXIO) | E(EPERM) | E(ENODEV),
	[OP_MUNMAP] = E(0),
	[OP_MREMAP] = E(0) | E(EFAULT),
	[OP_MPROTECT] = E(0) | E(EACCES),
	[OP_TOUCH] = E(0) | E(EFAULT),	/* EFAULT here stands for SIGBUS */
	[OP_IO] = E(0) | E(EFAULT),
	[OP_FORK] = E(0),
	[OP_REVOKE] = E(0),
};

struct reg {
	int node;	/* index in nodes[], -1: free */
	__u64 cookie;
	__u64 size;
};

struct map {
	unsigned char *p;	/* NULL: free */
	size_t len;
};

static struct {
	int nodes[NR_NODES];
	int bufs[NR_BUFS];
	__u64 buf_len[NR_BUFS];
	struct reg regs[NR_REGS];
	struct map maps[NR_MAPS];
	struct fgds_vfio v[2];
	char node_path[2][64];
	int udmabuf, memfd, raw;
	__u64 seed;
	__u64 seen[NR_OPS][NR_ERRNOS];
	__u64 sigbus;
} S;

static __u64 rnd(__u64 n)
{
	return n ? fgds_rand(&S.seed) % n : 0;
}

static int pick(const int *fds, int n)
{
	int i = rnd(n);

	return fds[i];
}

/* Page-aligned sizes mostly; sometimes something odd. */
static __u64 fuzz_size(__u64 typical)
{
	switch (rnd(8)) {
	case 0:
		return 0;
	case 1:
		return 1 + rnd(8191);
	case 2:
		return 1ULL << (30 + rnd(20));
	case 3:
		return ~0ULL - rnd(4096);
	default:
		return typical ? typical : SZ_4K * (1 + rnd(256));
	}
}

static __u64 fuzz_off(__u64 typical_max)
{
	switch (rnd(6)) {
	case 0:
		return 1 + rnd(4095);
	case 1:
		return ~0ULL - SZ_4K * rnd(4);
	case 2:
		return SZ_4K * rnd(1 << 20);
	default:
		return typical_max ? SZ_4K * rnd(typical_max / SZ_4K) : 0;
	}
}

static int any_dmabuf_fd(void)
{
	switch (rnd(10)) {
	case 0:
		return S.udmabuf;
	case 1:
		return S.memfd;
	case 2:
		return S.nodes[rnd(NR_NODES)];
	case 3:
		return -1 - (int)rnd(3);
	case 4:
		return 900 + rnd(100);
	default:
		return pick(S.bufs, NR_BUFS);
	}
}

static int node_fd(void)
{
	return S.nodes[rnd(NR_NODES)];
}

/* A live registration, picked at random, or NULL when there is none. */
static struct reg *live_reg(void)
{
	int start = rnd(NR_REGS), i;

	for (i = 0; i < NR_REGS; i++) {
		struct reg *r = &S.regs[(start + i) % NR_REGS];

		if (r->node >= 0 && S.nodes[r->node] >= 0)
			return r;
	}
	return NULL;
}

static void forget_node(int i)
{
	int r;

	for (r = 0; r < NR_REGS; r++)
		if (S.regs[r].node == i)
			S.regs[r].node = -1;
}

/*
 * Run one random operation; returns its op and sets *err (0 on success),
 * NR_OPS when there was nothing to run it on, -1 when fork failed.
 */
static int step(int *err)
{
	int op = rnd(NR_OPS), i, ret = 0;

	/* fork and revocations are slow: make them rarer */
	if ((op == OP_FORK || op == OP_REVOKE) && rnd(8))
		op = OP_TOUCH;
	errno = 0;
	switch (op) {
	case OP_OPEN:
		i = rnd(NR_NODES);
		if (S.nodes[i] >= 0)
			goto skip;
		S.nodes[i] = open(S.node_path[rnd(4) == 0], O_RDWR | O_CLOEXEC);
		ret = S.nodes[i] < 0 ? -1 : 0;
		break;
	case OP_CLOSE:
		i = rnd(NR_NODES);
		if (S.nodes[i] < 0 || rnd(4))
			goto skip;
		ret = close(S.nodes[i]);
		S.nodes[i] = -1;
		forget_node(i);
		break;
	case OP_EXPORT: {
		int g = rnd(6) == 0;
		__u64 len = SZ_4K << rnd(10), off;

		i = rnd(NR_BUFS);
		if (S.bufs[i] >= 0)
			goto skip;
		off = g ? SZ_4K * rnd((32 * SZ_1M - len) / SZ_4K)
			: AREA + SZ_4K * rnd((AREA_LEN - len) / SZ_4K);
		ret = fgds_vfio_dmabuf(&S.v[g], off, len);
		if (ret >= 0) {
			S.bufs[i] = ret;
			S.buf_len[i] = len;
			ret = 0;
		} else {
			errno = -ret;
			ret = -1;
		}
		break;
	}
	case OP_CLOSE_DMABUF:
		i = rnd(NR_BUFS);
		if (S.bufs[i] < 0 || rnd(2))
			goto skip;
		ret = close(S.bufs[i]);
		S.bufs[i] = -1;
		break;
	case OP_REG: {
		int n = rnd(NR_NODES), b = rnd(NR_BUFS);
		struct fgds_reg_buffer r = {
			.dmabuf_fd = rnd(3) ? S.bufs[b] : any_dmabuf_fd(),
			.offset = rnd(3) ? 0 : fuzz_off(S.buf_len[b]),
			.size = rnd(3) ? S.buf_len[b] : fuzz_size(S.buf_len[b]),
		};

		if (S.nodes[n] < 0)
			goto skip;
		if (!rnd(10))
			r.flags = 1u << rnd(32);
		if (!rnd(10))
			r.reserved[rnd(2)] = fgds_rand(&S.seed);
		if (!rnd(10))
			r.cookie = fgds_rand(&S.seed);
		ret = ioctl(S.nodes[n], FGDS_IOCTL_REG_BUFFER, &r);
		if (!ret) {
			for (i = 0; i < NR_REGS && S.regs[i].node >= 0; i++)
				;
			if (i == NR_REGS) {	/* full: drop the registration again */
				struct fgds_unreg_buffer u = { .cookie = r.cookie };

				ioctl(S.nodes[n], FGDS_IOCTL_UNREG_BUFFER, &u);
			} else {
				S.regs[i] = (struct reg){
					.node = n, .cookie = r.cookie, .size = r.size,
				};
			}
		}
		break;
	}
	case OP_REG_BADPTR: {
		static const uintptr_t bad[] = { 0, 1, 4096, 0xffff888000000000ULL, ~0UL - 7 };
		int fd = node_fd();

		if (fd < 0)
			goto skip;
		ret = ioctl(fd, rnd(2) ? FGDS_IOCTL_REG_BUFFER : FGDS_IOCTL_QUERY_BUFFER,
			    (void *)bad[rnd(5)]);
		break;
	}
	case OP_UNREG:
	case OP_QUERY: {
		struct reg none = { .node = -1 }, *r = live_reg() ?: &none;
		int n = r->node >= 0 && rnd(4) ? r->node : (int)rnd(NR_NODES);
		__u64 cookie = r->node >= 0 && rnd(4) ? r->cookie : fgds_rand(&S.seed) & ~0xfffULL;

		/* UNREG ends what the other calls need: keep it rarer */
		if (op == OP_UNREG && r->node >= 0 && rnd(3))
			goto skip;
		if (S.nodes[n] < 0)
			goto skip;
		if (op == OP_UNREG) {
			struct fgds_unreg_buffer u = { .cookie = cookie };

			if (!rnd(10))
				u.reserved = 1;
			ret = ioctl(S.nodes[n], FGDS_IOCTL_UNREG_BUFFER, &u);
			if (!ret)
				for (i = 0; i < NR_REGS; i++)
					if (S.regs[i].node == n && S.regs[i].cookie == cookie)
						S.regs[i].node = -1;
		} else {
			struct fgds_buffer_info q = { .cookie = cookie };

			if (!rnd(10))
				q.reserved[rnd(2)] = 1;
			ret = ioctl(S.nodes[n], FGDS_IOCTL_QUERY_BUFFER, &q);
		}
		break;
	}
	case OP_IOCTL: {
		unsigned char arg[64];
		unsigned int cmd;
		int fd = node_fd();

		if (fd < 0)
			goto skip;
		for (i = 0; i < (int)sizeof(arg); i++)
			arg[i] = rnd(4) ? 0 : fgds_rand(&S.seed);
		cmd = _IOC(rnd(4), rnd(4) ? FGDS_IOCTL_BASE : rnd(256), rnd(8), rnd(65));
		ret = ioctl(fd, cmd, rnd(6) ? (void *)arg : NULL);
		/* a random REG that succeeded: its cookie is not tracked, the close cleans it up */
		break;
	}
	case OP_MMAP: {
		struct reg none = { .node = -1 }, *r = live_reg() ?: &none;
		int n = r->node >= 0 && rnd(4) ? r->node : (int)rnd(NR_NODES);
		__u64 off = r->node >= 0 && rnd(4) ? r->cookie : SZ_4K * rnd(1 << 16);
		size_t len = r->node >= 0 && rnd(4) ? r->size : SZ_4K * (1 + rnd(64));
		int prot = PROT_READ | (rnd(4) ? PROT_WRITE : 0) | (rnd(8) ? 0 : PROT_EXEC);
		int flags = rnd(6) ? MAP_SHARED : MAP_PRIVATE;
		void *p;

		for (i = 0; i < NR_MAPS && S.maps[i].p; i++)
			;
		if (i == NR_MAPS || S.nodes[n] < 0)
			goto skip;
		p = mmap(NULL, len, prot, flags, S.nodes[n], off);
		if (p == MAP_FAILED) {
			ret = -1;
		} else {
			S.maps[i] = (struct map){ .p = p, .len = len };
			if (!(prot & PROT_WRITE))
				mprotect(p, len, PROT_READ);
		}
		break;
	}
	case OP_MUNMAP: {
		struct map *m = &S.maps[rnd(NR_MAPS)];
		size_t keep;

		if (!m->p)
			goto skip;
		keep = rnd(2) ? 0 : SZ_4K * rnd(m->len / SZ_4K);
		ret = munmap(m->p + keep, m->len - keep);
		m->len = keep;
		if (!keep)
			m->p = NULL;
		break;
	}
	case OP_MREMAP: {
		struct map *m = &S.maps[rnd(NR_MAPS)];
		size_t len;
		void *p;

		if (!m->p)
			goto skip;
		len = rnd(2) ? m->len + SZ_4K * (1 + rnd(16)) : SZ_4K * (1 + rnd(m->len / SZ_4K));
		if (len > m->len && !rnd(2))
			len = m->len;	/* a move of the same size */
		p = mremap(m->p, m->len, len, MREMAP_MAYMOVE);
		if (p == MAP_FAILED) {
			ret = -1;
		} else {
			m->p = p;
			m->len = len;
		}
		break;
	}
	case OP_MPROTECT: {
		struct map *m = &S.maps[rnd(NR_MAPS)];

		if (!m->p)
			goto skip;
		ret = mprotect(m->p, m->len, rnd(2) ? PROT_READ | PROT_WRITE | PROT_EXEC :
						      PROT_READ | PROT_WRITE);
		break;
	}
	case OP_TOUCH: {
		struct map *m = &S.maps[rnd(NR_MAPS)];

		if (!m->p)
			goto skip;
		if (fgds_load_faults(m->p + rnd(m->len))) {
			S.sigbus++;
			errno = EFAULT;
			ret = -1;
		}
		break;
	}
	case OP_IO: {
		struct map *m = &S.maps[rnd(NR_MAPS)];
		size_t at, len;
		ssize_t n;

		if (!m->p || m->len < 512)
			goto skip;
		at = 512 * rnd(m->len / 512);
		len = 512 * (1 + rnd((m->len - at) / 512));
		if (rnd(2))
			n = pread(S.raw, m->p + at, len, RAW_OFF + 512 * rnd(RAW_LEN / 2 / 512));
		else
			n = pwrite(S.raw, m->p + at, len, RAW_OFF + 512 * rnd(RAW_LEN / 2 / 512));
		ret = n < 0 ? -1 : 0;
		break;
	}
	case OP_FORK: {
		struct map *m = &S.maps[rnd(NR_MAPS)];
		int status;
		pid_t pid;

		if (!m->p)
			goto skip;
		pid = fork();
		if (!pid) {
			signal(SIGSEGV, SIG_DFL);
			fgds_load(m->p);
			_exit(0);	/* the mapping was inherited: wrong */
		}
		if (pid < 0 || waitpid(pid, &status, 0) != pid)
			return -1;
		/* not inherited (VM_DONTCOPY): the child faults with SIGSEGV */
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV) {
			errno = ENOTRECOVERABLE;
			ret = -1;
		}
		break;
	}
	case OP_REVOKE:
		ret = fgds_vfio_set_memory(&S.v[rnd(2)], 0);
		if (!ret)
			ret = fgds_vfio_set_memory(&S.v[0], 1) | fgds_vfio_set_memory(&S.v[1], 1);
		if (ret) {
			errno = -ret;
			ret = -1;
		}
		break;
	}
	*err = ret ? errno : 0;
	return op;
skip:
	*err = 0;
	return NR_OPS;	/* nothing to do it on: not counted */
}

FIXTURE(run) {
	int unused;
};

FIXTURE_SETUP(run)
{
}

FIXTURE_TEARDOWN(run)
{
}

/* Iterations of a default run (each one call: ioctl, mmap, I/O, fork, revocation...). */
#define FUZZ_MIN_ITERS 100000

/* Bounded by its own clock; the harness's limit only catches a hang. */
TEST_F_TIMEOUT(run, fuzz, 900)
{
	const char *seed_env = getenv("FGDS_FUZZ_SEED"), *secs_env = getenv("FGDS_FUZZ_SECONDS"),
		   *iters_env = getenv("FGDS_FUZZ_ITERS"), *raw = getenv("FGDS_RAW"), *why;
	const char *bdf[2] = { getenv("FGDS_GPU_BDF"), getenv("FGDS_GPU2_BDF") };
	__u64 seed = seed_env ? strtoull(seed_env, NULL, 0) : 1;
	double secs = secs_env ? atof(secs_env) : 300, t0;
	__u64 iters = iters_env ? strtoull(iters_env, NULL, 0) : FUZZ_MIN_ITERS, it, bad = 0;
	long long left_bufs = 0, left_pages = 0;
	int mark, reports, i, op, err, fd;
	struct udmabuf_create uc = { 0 };
	char line[1024];

	if (!bdf[0] || !bdf[1] || !raw)
		SKIP(return, "not in the fgds VM (FGDS_GPU_BDF, FGDS_GPU2_BDF, FGDS_RAW not set)");
	mark = fgds_klog_mark();
	ASSERT_LE(0, mark) TH_LOG("/dev/kmsg: %s", strerror(-mark));
	memset(&S, 0xff, offsetof(typeof(S), buf_len));
	S.seed = seed * 0x9e3779b97f4a7c15ULL + 1;
	for (i = 0; i < NR_REGS; i++)
		S.regs[i].node = -1;
	for (i = 0; i < 2; i++) {
		int ret = fgds_vfio_open_bdf(&S.v[i], bdf[i], &why);

		ASSERT_EQ(0, ret) TH_LOG("vfio %s: %s: %s", bdf[i], why, strerror(-ret));
		ASSERT_EQ(0, fgds_node_of(bdf[i], S.node_path[i], sizeof(S.node_path[i])));
	}
	S.raw = open(raw, O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, S.raw);
	S.memfd = memfd_create("fgds-fuzz", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	ASSERT_LE(0, S.memfd);
	ASSERT_EQ(0, ftruncate(S.memfd, SZ_1M));
	ASSERT_EQ(0, fcntl(S.memfd, F_ADD_SEALS, F_SEAL_SHRINK));
	fd = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd);
	uc.memfd = S.memfd;
	uc.size = SZ_1M;
	uc.flags = UDMABUF_FLAGS_CLOEXEC;
	S.udmabuf = ioctl(fd, UDMABUF_CREATE, &uc);
	ASSERT_LE(0, S.udmabuf);
	close(fd);

	t0 = fgds_now();
	for (it = 0; it < iters && fgds_now() - t0 < secs; it++) {
		op = step(&err);
		if (op < 0) {
			TH_LOG("iteration %llu: fork failed", (unsigned long long)it);
			bad++;
			break;
		}
		if (op == NR_OPS)
			continue;
		S.seen[op][err < NR_ERRNOS ? err : NR_ERRNOS - 1]++;
		if (err >= NR_ERRNOS || !(allowed[op] & E(err))) {
			if (bad++ < 10)
				TH_LOG("iteration %llu: %s: undocumented result %s (%d)",
				       (unsigned long long)it, op_name[op], strerror(err), err);
		}
	}

	/* Tear everything down; nothing may be left. */
	for (i = 0; i < NR_MAPS; i++)
		if (S.maps[i].p)
			munmap(S.maps[i].p, S.maps[i].len);
	for (i = 0; i < NR_NODES; i++)
		if (S.nodes[i] >= 0)
			close(S.nodes[i]);
	for (i = 0; i < NR_BUFS; i++)
		if (S.bufs[i] >= 0)
			close(S.bufs[i]);
	fgds_vfio_set_memory(&S.v[0], 1);
	fgds_vfio_set_memory(&S.v[1], 1);
	fgds_vfio_close(&S.v[0]);
	fgds_vfio_close(&S.v[1]);
	close(S.udmabuf);
	close(S.memfd);
	close(S.raw);
	for (i = 0; i < 2; i++) {
		long long b, pg;

		fgds_gpu_leftovers(S.node_path[i], &b, &pg);
		ASSERT_TRUE(b >= 0 && pg >= 0) TH_LOG("no fgds fdinfo counters");
		left_bufs += b;
		left_pages += pg;
	}
	reports = fgds_kernel_reports_since(mark);

	ksft_print_msg("fuzz: seed %llu, %llu iterations in %.0f s\n", (unsigned long long)seed,
		       (unsigned long long)it, fgds_now() - t0);
	ksft_print_msg("fuzz: reproduce with FGDS_FUZZ_SEED=%llu FGDS_FUZZ_ITERS=%llu\n",
		       (unsigned long long)seed, (unsigned long long)it);
	for (op = 0; op < NR_OPS; op++) {
		int len = snprintf(line, sizeof(line), "fuzz: %-12s", op_name[op]);

		for (i = 0; i < NR_ERRNOS; i++)
			if (S.seen[op][i] && len < (int)sizeof(line) - 40)
				len += snprintf(line + len, sizeof(line) - len, " %s %llu",
						i ? strerrorname_np(i) ?: "?" : "ok",
						(unsigned long long)S.seen[op][i]);
		ksft_print_msg("%s\n", line);
	}
	ksft_print_msg("fuzz: undocumented results %llu, SIGBUS on torn-down mappings %llu\n",
		       (unsigned long long)bad, (unsigned long long)S.sigbus);
	ksft_print_msg("fuzz: registrations left %lld, struct pages left %lld, kernel reports %d\n",
		       left_bufs, left_pages, reports);
	EXPECT_EQ(0, bad);
	EXPECT_EQ(0, left_bufs);
	EXPECT_EQ(0, left_pages);
	EXPECT_EQ(0, reports);
	/* Unless told otherwise, the run is FUZZ_MIN_ITERS calls; the clock only bounds it. */
	if (!iters_env && !secs_env)
		EXPECT_LE(FUZZ_MIN_ITERS, it) TH_LOG("the clock stopped the run early");
	EXPECT_LT(1000, it) TH_LOG("too few iterations to mean anything");
}

TEST_HARNESS_MAIN
