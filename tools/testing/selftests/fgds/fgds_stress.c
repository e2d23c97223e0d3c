// SPDX-License-Identifier: GPL-2.0
/*
 * A bounded stress run of fgds's lifetime rules, everything at once:
 * - workers on /dev/fgds0 and on the second GPU's node register, map, write
 *   from and read back into their buffers on ext4 and xfs with O_DIRECT, and
 *   tear down in a random order (UNREG, munmap, close of the dma-buf first);
 * - a revoker turns the stand-ins' memory decoding off and on through vfio:
 *   vfio-pci revokes every dma-buf, fgds zaps and returns with I/O in flight
 *   (the buffers stay pinned; UNREG drains). DMA that reaches a BAR while it
 *   does not decode is dropped, so a transfer that overlapped a revocation
 *   may complete without its data: bytes that differ in a registration that
 *   was revoked are counted apart ("lost to a revocation"), and only those of
 *   registrations never revoked must all be right;
 * - a killer forks readers with io_uring reads in flight into their own
 *   registration and SIGKILLs them at random times; the memory is refilled
 *   right after and checked later, so a DMA after the kill would show.
 * Data is checked by content through vfio's own CPU mapping of the BAR (it
 * works whatever fgds does). At the end the figures are printed: cycles,
 * revocations and kills survived, corrupted bytes, registrations and struct
 * pages left, kernel reports. Then the module is unloaded and loaded again.
 *
 * Progress is printed every 30 s; a run in which cycles, revocations or
 * kills stop for 120 s prints where each thread waits and fails.
 *
 * FGDS_STRESS_SECONDS (default 40) bounds the run; FGDS_STRESS_SEED seeds it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "fgds_test.h"
#include "fgds_util.h"

/* Areas this run owns: BAR [320M, 448M) of the first GPU, the second GPU's first 32M. */
#define GPU0_BASE (320 * SZ_1M)
#define GPU1_BASE 0
#define SLOT (2 * SZ_1M)
#define NR_WORKERS 4
#define KILL_SLOT_OFF (GPU0_BASE + 8 * SLOT)
#define KILL_LEN (4 * SZ_1M)
#define KILL_IOS 32

struct gpu {
	struct fgds_vfio v;
	unsigned char *bar;	/* vfio's CPU mapping */
	char node[64];
};

static struct gpu gpus[2];
/* Writers (the revoker) turn memory decoding off; readers touch the BAR through vfio. */
static pthread_rwlock_t decode_lock = PTHREAD_RWLOCK_INITIALIZER;
/* Why the run stops: 1 time is up or a worker failed, 2 the revoker, 3 the killer failed. */
static int stop;

static int stopped(void)
{
	return __atomic_load_n(&stop, __ATOMIC_RELAXED);
}

static void set_stop(int why)
{
	__atomic_store_n(&stop, why, __ATOMIC_RELAXED);
}

static struct {
	__u64 cycles, revocations, kills, refused, corrupt, lost, late_writes, kill_failures;
} fig;
/* The killer's child of the moment (0: none), for the stall report. */
static pid_t reader_pid;

static void count(__u64 *c, __u64 n)
{
	__atomic_add_fetch(c, n, __ATOMIC_RELAXED);
}

struct worker {
	int id;
	struct gpu *g;
	__u64 bar_off;
	__u64 seed;
	char file[256];
	int err;
	char what[128];
};

static void fail(struct worker *w, const char *what, int err)
{
	w->err = err;
	snprintf(w->what, sizeof(w->what), "%s", what);
	set_stop(1);
}

/*
 * An I/O that failed (EFAULT) or was cut short is expected only when a
 * revocation ended the registration meanwhile.
 */
static int revoked(int node, __u64 cookie)
{
	struct fgds_buffer_info info;

	return !fgds_query(node, cookie, &info) && info.state == FGDS_BUFFER_REVOKED;
}

/*
 * The outcome of an O_DIRECT call that returned @n of @len bytes: 1 when
 * whole, 0 when a revocation cut it (counted), -1 on a real failure (recorded).
 */
static int worker_io(struct worker *w, int node, __u64 cookie, ssize_t n, size_t len,
		     const char *what)
{
	int err = errno;

	if (n == (ssize_t)len)
		return 1;
	if (!revoked(node, cookie)) {
		fail(w, what, n < 0 ? err : EIO);
		return -1;
	}
	count(&fig.refused, 1);
	return 0;
}

static void *worker(void *arg)
{
	struct worker *w = arg;
	int node = open(w->g->node, O_RDWR | O_CLOEXEC);
	int fd = open(w->file, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	__u64 c;

	if (node < 0 || fd < 0) {
		fail(w, "open the node or the file", errno);
		return NULL;
	}
	for (c = 0; !stopped(); c++) {
		size_t len = SZ_64K << (fgds_rand(&w->seed) % 5);	/* 64K .. 1M */
		__u64 off = w->bar_off + (fgds_rand(&w->seed) % (SLOT / SZ_64K)) * SZ_64K;
		__u64 seed = ((__u64)w->id << 40) | c, cookie = 0;
		unsigned char *bar = w->g->bar + off, *p = NULL;
		int dmabuf, ret, ok = 1;

		if (off + len > w->bar_off + SLOT)
			off = w->bar_off + SLOT - len, bar = w->g->bar + off;
		dmabuf = fgds_vfio_dmabuf(&w->g->v, off, len);
		if (dmabuf < 0) {
			fail(w, "export a dma-buf", -dmabuf);
			break;
		}
		ret = fgds_reg(node, dmabuf, 0, len, &cookie);
		if (ret && ret != -ENODEV) {
			fail(w, "REG_BUFFER", -ret);
			close(dmabuf);
			break;
		}
		if (!ret)
			p = fgds_map(node, cookie, len);
		if (!ret && !p && (errno != ENODEV || !revoked(node, cookie))) {
			fail(w, "mmap", errno);
			break;
		}
		if (!p) {
			count(&fig.refused, 1);
			ok = 0;
		}

		if (ok) {
			pthread_rwlock_rdlock(&decode_lock);
			fgds_pattern_fill(bar, len, seed, 0);
			pthread_rwlock_unlock(&decode_lock);
			ok = worker_io(w, node, cookie, pwrite(fd, p, len, 0), len,
				       "O_DIRECT write from the mapping");
			if (ok < 0)
				break;
		}
		if (ok) {
			pthread_rwlock_rdlock(&decode_lock);
			memset(bar, 0, len);
			pthread_rwlock_unlock(&decode_lock);
			ok = worker_io(w, node, cookie, pread(fd, p, len, 0), len,
				       "O_DIRECT read into the mapping");
			if (ok < 0)
				break;
		}
		if (ok) {
			size_t bad;

			pthread_rwlock_rdlock(&decode_lock);
			bad = fgds_pattern_diff(bar, len, seed, 0);
			pthread_rwlock_unlock(&decode_lock);
			/*
			 * A revocation during the write or the read (memory decoding
			 * off) dropped what DMA reached the BAR meanwhile; revoked stays
			 * set, so a registration that was not revoked had none.
			 */
			if (bad && revoked(node, cookie))
				count(&fig.lost, bad);
			else
				count(&fig.corrupt, bad);
		}

		/* Tear down in a random order. */
		switch (fgds_rand(&w->seed) % 3) {
		case 0:
			if (cookie && fgds_unreg(node, cookie))
				fail(w, "UNREG_BUFFER", errno);
			if (p)
				munmap(p, len);
			close(dmabuf);
			break;
		case 1:
			if (p)
				munmap(p, len);
			close(dmabuf);
			if (cookie && fgds_unreg(node, cookie))
				fail(w, "UNREG_BUFFER", errno);
			break;
		default:
			close(dmabuf);
			if (cookie && fgds_unreg(node, cookie))
				fail(w, "UNREG_BUFFER", errno);
			if (p)
				munmap(p, len);
			break;
		}
		count(&fig.cycles, 1);
	}
	close(fd);
	unlink(w->file);
	close(node);
	return NULL;
}

static void *revoker(void *arg)
{
	__u64 seed = *(__u64 *)arg;

	while (!stopped()) {
		int g = fgds_rand(&seed) % 2;

		usleep(100000 + fgds_rand(&seed) % 300000);
		pthread_rwlock_wrlock(&decode_lock);
		if (!fgds_vfio_set_memory(&gpus[g].v, 0)) {
			usleep(fgds_rand(&seed) % 20000);
			if (fgds_vfio_set_memory(&gpus[g].v, 1))
				set_stop(2);
			count(&fig.revocations, 1);
		}
		pthread_rwlock_unlock(&decode_lock);
	}
	return NULL;
}

/* Child of the killer: reads in flight into its own registration until killed. */
static void __noreturn reader(int dmabuf, int ready)
{
	const char *raw_path = getenv("FGDS_RAW");
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	unsigned char *p;
	__u64 cookie = 0;
	int node, raw, i;

	node = open(gpus[0].node, O_RDWR | O_CLOEXEC);
	raw = raw_path ? open(raw_path, O_RDONLY | O_DIRECT | O_CLOEXEC) : -1;
	/* A revocation may come first: then there is nothing to kill in flight. */
	if (node < 0 || raw < 0 || fgds_reg(node, dmabuf, 0, KILL_LEN, &cookie))
		_exit(2);
	p = fgds_map(node, cookie, KILL_LEN);
	if (!p || io_uring_queue_init(2 * KILL_IOS, &ring, 0))
		_exit(3);
	for (i = 0; i < KILL_IOS; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		io_uring_prep_read(sqe, raw, p + i * (KILL_LEN / KILL_IOS), KILL_LEN / KILL_IOS,
				   (768 + 64) * SZ_1M + i * (KILL_LEN / KILL_IOS));
		sqe->user_data = i;
	}
	io_uring_submit(&ring);
	if (write(ready, "r", 1) != 1)
		_exit(4);
	for (;;) {
		struct io_uring_sqe *sqe;

		if (io_uring_wait_cqe(&ring, &cqe))
			_exit(5);
		i = cqe->user_data;
		io_uring_cqe_seen(&ring, cqe);
		sqe = io_uring_get_sqe(&ring);
		io_uring_prep_read(sqe, raw, p + i * (KILL_LEN / KILL_IOS), KILL_LEN / KILL_IOS,
				   (768 + 64) * SZ_1M + i * (KILL_LEN / KILL_IOS));
		sqe->user_data = i;
		io_uring_submit(&ring);
	}
}

static void *killer(void *arg)
{
	__u64 seed = *(__u64 *)arg ^ 0x55;
	unsigned char *bar = gpus[0].bar + KILL_SLOT_OFF;

	while (!stopped()) {
		int pipefd[2], status, dmabuf;
		__u64 fill = 0xdead00000000ULL | fig.kills;
		size_t bad;
		pid_t pid;
		char c;

		dmabuf = fgds_vfio_dmabuf(&gpus[0].v, KILL_SLOT_OFF, KILL_LEN);
		if (dmabuf < 0 || pipe2(pipefd, O_CLOEXEC)) {
			set_stop(3);
			break;
		}
		pid = fork();
		if (pid > 0)
			__atomic_store_n(&reader_pid, pid, __ATOMIC_RELAXED);
		if (!pid) {
			close(pipefd[0]);
			reader(dmabuf, pipefd[1]);
		}
		close(pipefd[1]);
		close(dmabuf);
		if (pid < 0) {
			close(pipefd[0]);
			set_stop(3);
			break;
		}
		if (read(pipefd[0], &c, 1) != 1)
			count(&fig.kill_failures, 1);	/* revoked before it started */
		close(pipefd[0]);
		usleep(fgds_rand(&seed) % 50000);
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		__atomic_store_n(&reader_pid, 0, __ATOMIC_RELAXED);
		if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
			count(&fig.kills, 1);

		/* The child is gone, and its registration with it: no DMA may land any more. */
		pthread_rwlock_rdlock(&decode_lock);
		fgds_pattern_fill(bar, KILL_LEN, fill, 0);
		pthread_rwlock_unlock(&decode_lock);
		usleep(100000);
		pthread_rwlock_rdlock(&decode_lock);
		bad = fgds_pattern_diff(bar, KILL_LEN, fill, 0);
		pthread_rwlock_unlock(&decode_lock);
		count(&fig.late_writes, bad);
	}
	return NULL;
}

/* Print where each thread of @pid (its kernel stack and wchan) waits. */
static void print_stacks(pid_t pid)
{
	char path[320], line[256];
	struct dirent *d;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return;
	while ((d = readdir(dir))) {
		FILE *f;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/wchan", pid, d->d_name);
		f = fopen(path, "r");
		if (f && fgets(line, sizeof(line), f))
			ksft_print_msg("stress: task %d/%s waits in %s\n", pid, d->d_name, line);
		if (f)
			fclose(f);
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stack", pid, d->d_name);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			ksft_print_msg("stress:   %s", line);
		if (f)
			fclose(f);
	}
	closedir(dir);
}

/*
 * The run's progress, every 30 s (the VM harness counts a guest silent for
 * 300 s as stalled). A figure (cycles, revocations, kills) that does not
 * move for STALL_S seconds is a hang of the threads that make it, even
 * while the others go on: where every thread waits is printed, the
 * kernel's blocked tasks too (sysrq w), and the run stops as failed (4).
 */
#define PROGRESS_S 30
#define STALL_S 120

struct progress {
	double last_t;		/* when progress was last printed */
	__u64 seen[3];		/* cycles, revocations, kills, when last looked at */
	double moved[3];	/* when each last moved */
};

static void report_progress(double t0, struct progress *p)
{
	static const char *const what[3] = { "cycle", "revocation", "kill" };
	const __u64 now_fig[3] = { fig.cycles, fig.revocations, fig.kills };
	double now = fgds_now();
	int stuck = 0;
	pid_t child;

	for (int i = 0; i < 3; i++) {
		if (now_fig[i] != p->seen[i]) {
			p->seen[i] = now_fig[i];
			p->moved[i] = now;
		}
		if (p->moved[i] < p->moved[stuck])
			stuck = i;
	}
	if (now - p->last_t < PROGRESS_S)
		return;
	p->last_t = now;
	ksft_print_msg("stress: %.0f s: %llu cycles, %llu revocations, %llu kills\n", now - t0,
		       (unsigned long long)fig.cycles, (unsigned long long)fig.revocations,
		       (unsigned long long)fig.kills);
	if (now - p->moved[stuck] < STALL_S)
		return;
	ksft_print_msg("stress: stalled: no %s for %.0f s: where each thread waits\n",
		       what[stuck], now - p->moved[stuck]);
	print_stacks(getpid());
	child = __atomic_load_n(&reader_pid, __ATOMIC_RELAXED);
	if (child)
		print_stacks(child);
	fgds_sysfs_write("/proc/sysrq-trigger", "w");
	set_stop(4);
}

/* A helper, so that the harness's EXPECT and its TH_LOG stay one loop body. */
static void expect_worker_ok(struct __test_metadata *_metadata, struct worker *w)
{
	EXPECT_EQ(0, w->err) TH_LOG("worker %d: %s: %s", w->id, w->what, strerror(w->err));
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

/* Bounded by its own clock; the harness's limit only catches a hang. */
TEST_F_TIMEOUT(run, stress, 900)
{
	const char *secs_env = getenv("FGDS_STRESS_SECONDS");
	const char *seed_env = getenv("FGDS_STRESS_SEED");
	const char *bdf[2] = { getenv("FGDS_GPU_BDF"), getenv("FGDS_GPU2_BDF") };
	const char *dirs[2] = { getenv("FGDS_EXT4"), getenv("FGDS_XFS") };
	__u64 seed = seed_env ? strtoull(seed_env, NULL, 0) : 1;
	double secs = secs_env ? atof(secs_env) : 40, t0;
	struct progress prog = { 0 };
	struct worker w[NR_WORKERS] = {};
	pthread_t thr[NR_WORKERS], rev, kil;
	int mark, reports, i;
	long long left_bufs = 0, left_pages = 0;
	const char *why;

	if (!bdf[0] || !bdf[1] || !dirs[0] || !dirs[1] || !getenv("FGDS_RAW"))
		SKIP(return, "not in the fgds VM (FGDS_GPU_BDF, FGDS_GPU2_BDF, ... not set)");
	mark = fgds_klog_mark();
	ASSERT_LE(0, mark) TH_LOG("/dev/kmsg: %s", strerror(-mark));
	for (i = 0; i < 2; i++) {
		int ret = fgds_vfio_open_bdf(&gpus[i].v, bdf[i], &why);

		ASSERT_EQ(0, ret) TH_LOG("vfio %s: %s: %s", bdf[i], why, strerror(-ret));
		gpus[i].bar = fgds_vfio_map_bar(&gpus[i].v);
		ASSERT_NE(NULL, gpus[i].bar);
		ASSERT_EQ(0, fgds_node_of(bdf[i], gpus[i].node, sizeof(gpus[i].node)));
	}

	for (i = 0; i < NR_WORKERS; i++) {
		w[i].id = i;
		w[i].g = &gpus[i < 3 ? 0 : 1];
		w[i].bar_off = i < 3 ? GPU0_BASE + i * SLOT : GPU1_BASE;
		w[i].seed = seed * 0x9e3779b97f4a7c15ULL + i + 1;
		snprintf(w[i].file, sizeof(w[i].file), "%s/stress-%d.bin", dirs[i & 1], i);
		ASSERT_EQ(0, pthread_create(&thr[i], NULL, worker, &w[i]));
	}
	ASSERT_EQ(0, pthread_create(&rev, NULL, revoker, &seed));
	ASSERT_EQ(0, pthread_create(&kil, NULL, killer, &seed));
	t0 = fgds_now();
	prog.last_t = t0;
	for (i = 0; i < 3; i++)
		prog.moved[i] = t0;
	while (!stopped() && fgds_now() - t0 < secs) {
		usleep(100000);
		report_progress(t0, &prog);
	}
	if (!stopped())
		set_stop(1);
	ASSERT_NE(4, stopped()) TH_LOG("the run hung: see where each thread waits above");
	for (i = 0; i < NR_WORKERS; i++)
		pthread_join(thr[i], NULL);
	pthread_join(rev, NULL);
	pthread_join(kil, NULL);
	for (i = 0; i < 2; i++) {
		munmap(gpus[i].bar, gpus[i].v.bar_size);
		fgds_vfio_close(&gpus[i].v);
	}

	for (i = 0; i < 2; i++) {
		long long b, pg;

		fgds_gpu_leftovers(gpus[i].node, &b, &pg);
		ASSERT_TRUE(b >= 0 && pg >= 0) TH_LOG("no fgds fdinfo counters");
		left_bufs += b;
		left_pages += pg;
	}
	reports = fgds_kernel_reports_since(mark);

	ksft_print_msg("stress: %.0f s (seed %llu): %llu cycles\n", fgds_now() - t0,
		       (unsigned long long)seed, (unsigned long long)fig.cycles);
	ksft_print_msg("stress: %llu revocations survived, %llu kills survived\n",
		       (unsigned long long)fig.revocations, (unsigned long long)fig.kills);
	ksft_print_msg("stress: %llu I/O or registrations refused after a revocation\n",
		       (unsigned long long)fig.refused);
	ksft_print_msg("stress: corrupted bytes %llu, bytes written after a kill %llu\n",
		       (unsigned long long)fig.corrupt, (unsigned long long)fig.late_writes);
	ksft_print_msg("stress: bytes lost to a revocation during their transfer %llu\n",
		       (unsigned long long)fig.lost);
	ksft_print_msg("stress: registrations left %lld, struct pages left %lld\n", left_bufs,
		       left_pages);
	ksft_print_msg("stress: kernel reports %d\n", reports);

	for (i = 0; i < NR_WORKERS; i++)
		expect_worker_ok(_metadata, &w[i]);
	EXPECT_EQ(1, stopped()) TH_LOG("the revoker (2) or the killer (3) failed");
	EXPECT_EQ(0, fig.corrupt);
	EXPECT_EQ(0, fig.late_writes);
	EXPECT_EQ(0, left_bufs);
	EXPECT_EQ(0, left_pages);
	EXPECT_EQ(0, reports);
	EXPECT_LT(0, fig.cycles);
	EXPECT_LT(0, fig.revocations);
	EXPECT_LT(0, fig.kills);

	/* Nothing is left behind: the module unloads, and loads again. */
	EXPECT_EQ(0, system("rmmod fgds"));
	EXPECT_EQ(0, system("modprobe fgds"));
}

TEST_HARNESS_MAIN
