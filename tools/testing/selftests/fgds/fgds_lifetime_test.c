// SPDX-License-Identifier: GPL-2.0
/*
 * Lifetime rules of fgds registrations, with I/O in flight:
 * - the stand-in unbound from vfio-pci (the exporter revokes) while a
 *   registration is mapped and O_DIRECT reads run into it;
 * - SIGKILL of a process with io_uring reads in flight into its mapping;
 * - UNREG, munmap, close of the node and close of the dma-buf with io_uring
 *   reads in flight; two UNREGs of one cookie at once, each returning only
 *   after the drain;
 * - threads registering, mapping, doing I/O and unregistering at once, on
 *   one open file, on several, and on two GPUs' nodes;
 * - the second GPU removed from the system (as on hot-unplug) under a mapped
 *   registration with O_DIRECT reads in flight, then found again by a rescan.
 * - the exporter revoking (memory decode turned off and on again through
 *   vfio-pci) with io_uring reads in flight, many times: the revocation
 *   returns with reads still in flight, and UNREG waits for them.
 * The reads come from "fgdsslow", an NVMe whose reads QEMU throttles to
 * SLOW_BPS, so a teardown that starts right after the reads were submitted
 * always has some in flight; every test asserts it, and prints how many.
 * Data is checked by content: the host compares the stand-in's BAR file with
 * what was written, and memory that no longer belongs to a registration is
 * refilled by the host right after the teardown returned (for a revocation:
 * the UNREG that follows it) and checked again after every read has ended,
 * so a late DMA would show.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "fgds_host.h"
#include "fgds_test.h"
#include "fgds_util.h"
#include "fgds_lifetime.h"

FIXTURE(lt) {
	struct fgds_vfio v;
	int node;
	int raw;
};

FIXTURE_SETUP(lt)
{
	const char *why;
	int ret;

	if (!getenv("FGDS_GPU_BDF"))
		SKIP(return, "not in the fgds VM (FGDS_GPU_BDF is not set)");
	self->node = open(FGDS_NODE, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->node) TH_LOG(FGDS_NODE ": %s", strerror(errno));
	ret = fgds_vfio_open(&self->v, &why);
	ASSERT_EQ(0, ret) TH_LOG("vfio: %s: %s", why, strerror(-ret));
	self->raw = open_raw();
	ASSERT_LE(0, self->raw) TH_LOG("raw partition: %s", strerror(errno));
	ASSERT_EQ(0, fgds_put_pattern(self->raw, RAW_BASE, BUF_LEN, 0x11fe));
}

FIXTURE_TEARDOWN(lt)
{
	fgds_vfio_close(&self->v);
	if (self->raw >= 0)
		close(self->raw);
	if (self->node >= 0)
		close(self->node);
}

/*
 * The exporter goes away under a mapped registration with O_DIRECT reads in
 * flight: vfio-pci asks for the device back, the owner closes it, vfio-pci
 * revokes, fgds zaps and drains, the unbind completes; the reads that were in
 * flight landed whole, nothing else was written, the node goes with
 * vfio-pci's offer and comes back when the stand-in is bound again.
 */
TEST_F_TIMEOUT(lt, unbind_exporter_with_io_in_flight, 600)
{
	const char *bdf = fgds_gpu_bdf(), *why;
	struct io_loop l = { .raw = self->raw };
	struct unbind u = { .bdf = bdf };
	struct fgds_buffer_info info;
	struct fgds_buf b;
	char path[128];
	int ret;

	ASSERT_EQ(0, host("fill", 0x6a4d, BAR_BASE - SZ_1M, SZ_1M));
	ASSERT_EQ(0, host("fill", 0x6a4e, BAR_BASE + BUF_LEN, SZ_1M));
	ASSERT_EQ(0, fgds_buf_get(self->node, &self->v, BAR_BASE, BUF_LEN, &b));
	ret = take_away_under_io(&l, b.p, &self->v, unbind_vfio, &u, FGDS_HOST_DIR, BAR_BASE,
				 BUF_LEN, 0x6a4f, &why);
	ASSERT_EQ(0, ret) TH_LOG("unbind under I/O: %s: %s", why, strerror(-ret));
	EXPECT_EQ(EFAULT, l.err);
	ASSERT_LE(1, u.in_flight) TH_LOG("no read in flight when the unbind began");
	ksft_print_msg("unbind with %d of 1 reads in flight: %d whole and %d short reads before\n",
		       u.in_flight, l.ok, l.cut_short);

	ASSERT_EQ(0, fgds_query(self->node, b.cookie, &info));
	EXPECT_EQ(FGDS_BUFFER_REVOKED, info.state);
	EXPECT_TRUE(fgds_load_faults(b.p + SZ_64K));
	/* Refilled once the revocation was done, while the read ran: no late DMA. */
	EXPECT_EQ(0, host("check", 0x6a4f, BAR_BASE, BUF_LEN));
	EXPECT_EQ(0, host("check", 0x6a4d, BAR_BASE - SZ_1M, SZ_1M));
	EXPECT_EQ(0, host("check", 0x6a4e, BAR_BASE + BUF_LEN, SZ_1M));
	fgds_buf_put(self->node, &b);

	snprintf(path, sizeof(path), "/sys/bus/pci/drivers/vfio-pci/%s", bdf);
	ASSERT_NE(0, access(path, F_OK)) TH_LOG("still bound to vfio-pci");
	/* The node went with vfio-pci's offer; binding again offers the BAR anew. */
	EXPECT_NE(0, access(FGDS_NODE, F_OK)) TH_LOG(FGDS_NODE " outlived the unbind");
	ASSERT_EQ(0, fgds_sysfs_write("/sys/bus/pci/drivers/vfio-pci/bind", bdf));
	close(self->node);
	self->node = open(FGDS_NODE, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->node) TH_LOG(FGDS_NODE " after rebind: %s", strerror(errno));
	ret = fgds_vfio_open(&self->v, &why);
	ASSERT_EQ(0, ret) TH_LOG("vfio after rebind: %s: %s", why, strerror(-ret));
	ASSERT_EQ(0, host("fill", 0, BAR_BASE, BUF_LEN));
	ASSERT_EQ(0, fgds_buf_get(self->node, &self->v, BAR_BASE, BUF_LEN, &b));
	EXPECT_EQ((ssize_t)BUF_LEN, pread(self->raw, b.p, BUF_LEN, RAW_BASE));
	EXPECT_EQ(0, host("check", 0x11fe, BAR_BASE, BUF_LEN));
	fgds_buf_put(self->node, &b);
}

/*
 * A child with NR_IOS io_uring reads in flight into its own registration of
 * @dmabuf, resubmitting each as it completes; *@in_flight (shared with the
 * parent) counts the reads submitted and not yet completed.
 */
static void __noreturn child_reader(int dmabuf, int ready, int *in_flight)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	unsigned char *p;
	__u64 cookie = 0;
	int node, raw;

	node = open(FGDS_NODE, O_RDWR | O_CLOEXEC);
	raw = open_raw();
	if (node < 0 || raw < 0 || fgds_reg(node, dmabuf, 0, BUF_LEN, &cookie))
		_exit(2);
	p = fgds_map(node, cookie, BUF_LEN);
	if (!p || io_uring_queue_init(2 * NR_IOS, &ring, 0))
		_exit(3);
	__atomic_store_n(in_flight, NR_IOS, __ATOMIC_SEQ_CST);
	if (submit_reads(&ring, raw, p) != NR_IOS)
		_exit(3);
	if (write(ready, "r", 1) != 1)
		_exit(4);
	for (;;) {
		struct io_uring_sqe *sqe;
		int i;

		if (io_uring_wait_cqe(&ring, &cqe) || cqe->res != (int)IO_LEN)
			_exit(5);
		i = cqe->user_data;
		io_uring_cqe_seen(&ring, cqe);
		sqe = io_uring_get_sqe(&ring);
		io_uring_prep_read(sqe, raw, p + i * IO_LEN, IO_LEN, RAW_BASE + i * IO_LEN);
		sqe->user_data = i;
		io_uring_submit(&ring);
	}
}

/*
 * SIGKILL with reads in flight, nr_rounds times: the registration ends with the
 * process, after its DMA; the memory, refilled by the host right after the
 * child is reaped, is not written again while any read the child had in
 * flight could still land; the range can be registered again at once.
 */
TEST_F_TIMEOUT(lt, sigkill_with_io_in_flight, 1200)
{
	int dmabuf, kills, chunks0, *in_flight, min_if = NR_IOS, max_if = 0;
	long long total_if = 0, memmap0 = fgds_memmap_pages();
	__u64 seed = 7;

	ASSERT_LE(0, memmap0) TH_LOG("no nr_memmap_pages in /proc/vmstat");
	chunks0 = fgds_fdinfo_num(self->node, "fgds-gpu-chunks");
	ASSERT_LE(0, chunks0) TH_LOG("no fgds-gpu-chunks in fdinfo");
	ASSERT_EQ(0, host("fill", 0x6a4d, BAR_BASE - SZ_1M, SZ_1M));
	ASSERT_EQ(0, host("fill", 0x6a4e, BAR_BASE + BUF_LEN, SZ_1M));
	dmabuf = fgds_vfio_dmabuf(&self->v, BAR_BASE, BUF_LEN);
	ASSERT_LE(0, dmabuf);
	in_flight = mmap(NULL, SZ_4K, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, in_flight);

	for (kills = 0; kills < nr_rounds; kills++) {
		int pipefd[2], status, n;
		__u64 cookie = 0;
		char c;
		pid_t pid;

		*in_flight = 0;
		ASSERT_EQ(0, pipe(pipefd));
		pid = fork();
		ASSERT_LE(0, pid);
		if (!pid) {
			close(pipefd[0]);
			child_reader(dmabuf, pipefd[1], in_flight);
		}
		close(pipefd[1]);
		ASSERT_EQ(1, read(pipefd[0], &c, 1)) TH_LOG("the child did not start its reads");
		close(pipefd[0]);
		usleep(fgds_rand(&seed) % 20000);
		n = __atomic_load_n(in_flight, __ATOMIC_SEQ_CST);
		ASSERT_EQ(0, kill(pid, SIGKILL));
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
			TH_LOG("the child ended by itself (status %#x) before the kill", status);
		ASSERT_LE(1, n)
			TH_LOG("kill %d: no read in flight when the child was killed", kills);
		total_if += n;
		min_if = n < min_if ? n : min_if;
		max_if = n > max_if ? n : max_if;

		/* The memory is someone else's now: no DMA may reach it any more. */
		ASSERT_EQ(0, host("fill", 0xdead0000 + kills, BAR_BASE, BUF_LEN));
		usleep(SLOW_DRAIN_US);
		EXPECT_EQ(0, host("check", 0xdead0000 + kills, BAR_BASE, BUF_LEN))
			TH_LOG("kill %d: DMA after the process was reaped", kills);
		EXPECT_EQ(chunks0, fgds_fdinfo_num(self->node, "fgds-gpu-chunks"));
		ASSERT_EQ(0, fgds_reg(self->node, dmabuf, 0, BUF_LEN, &cookie));
		ASSERT_EQ(0, fgds_unreg(self->node, cookie));
	}
	ksft_print_msg("SIGKILL with I/O in flight: %d kills\n", kills);
	ksft_print_msg("SIGKILL: %d to %d of %d reads in flight (%lld in all)\n", min_if, max_if,
		       NR_IOS, total_if);
	/* The memory hotplug code's own count: every kill's struct pages went. */
	EXPECT_EQ(memmap0, fgds_memmap_pages())
		TH_LOG("SIGKILL: %lld pages of struct pages, %lld before",
		       fgds_memmap_pages(), memmap0);
	EXPECT_EQ(0, host("check", 0x6a4d, BAR_BASE - SZ_1M, SZ_1M));
	EXPECT_EQ(0, host("check", 0x6a4e, BAR_BASE + BUF_LEN, SZ_1M));
	munmap(in_flight, SZ_4K);
	close(dmabuf);
}

/*
 * A round whose reads all completed before its teardown could begin (the
 * guest stalled for longer than the slow NVMe needs: under TCG on a loaded
 * host) tests nothing: it is run again, at most nr_rounds times in a test, and
 * the count is printed.
 */
static int drain_unused_round(struct io_uring *ring)
{
	int res[NR_IOS], ok, efault;

	return reap(ring, NR_IOS, res, &ok, &efault);
}

enum { UNREG, MUNMAP, CLOSE_NODE, CLOSE_DMABUF };
static const char *const action_name[] = { "UNREG", "munmap", "close of the node",
					   "close of the dma-buf" };

/*
 * NR_IOS io_uring reads in flight, then one of UNREG, munmap, close of the
 * node or of the dma-buf, nr_rounds times each. Every read completes whole or
 * with EFAULT, and each slot of the buffer holds what its read brought or
 * what was there before; UNREG returns only once no DMA is in flight, so
 * memory the host refills right after it stays as the host left it while
 * every read that was in flight ends; closing the node or the dma-buf
 * changes nothing for a mapped registration.
 */
TEST_F_TIMEOUT(lt, teardown_with_io_in_flight, 1800)
{
	int action;

	for (action = UNREG; action <= CLOSE_DMABUF; action++) {
		int round, min_p = NR_IOS, max_p = 0, whole = 0, faulted = 0, again = 0;
		long long total_p = 0, memmap0 = fgds_memmap_pages(), memmap_reg = -1;

		ASSERT_LE(0, memmap0) TH_LOG("no nr_memmap_pages in /proc/vmstat");
		for (round = 0; round < nr_rounds; round++) {
			int node = open(FGDS_NODE, O_RDWR | O_CLOEXEC), ok, efault, pending, i;
			__u64 fresh = 0xabc0000 + action * nr_rounds + round;
			int res[NR_IOS] = { 0 };
			struct io_uring ring;
			struct fgds_buf b;

			ASSERT_LE(0, node);
			ASSERT_EQ(0, host("fill", 0, BAR_BASE, BUF_LEN));
			ASSERT_EQ(0, fgds_buf_get(node, &self->v, BAR_BASE, BUF_LEN, &b));
			ASSERT_EQ(0, io_uring_queue_init(2 * NR_IOS, &ring, 0));
			ASSERT_EQ(NR_IOS, submit_reads(&ring, self->raw, b.p));
			pending = NR_IOS - io_uring_cq_ready(&ring);
			if (memmap_reg < 0)
				memmap_reg = fgds_memmap_pages();
			if (!pending) {
				ASSERT_EQ(0, drain_unused_round(&ring));
				io_uring_queue_exit(&ring);
				fgds_buf_put(node, &b);
				close(node);
				ASSERT_GT(nr_rounds, ++again)
					TH_LOG("%s: too many rounds with nothing in flight",
					       action_name[action]);
				round--;
				continue;
			}

			switch (action) {
			case UNREG:
				ASSERT_EQ(0, fgds_unreg(node, b.cookie));
				b.cookie = 0;
				/* The memory is no longer the registration's. */
				ASSERT_EQ(0, host("fill", fresh, BAR_BASE, BUF_LEN));
				break;
			case MUNMAP:
				ASSERT_EQ(0, munmap(b.p, BUF_LEN));
				b.p = NULL;
				break;
			case CLOSE_NODE:
				ASSERT_EQ(0, close(node));
				node = -1;
				break;
			case CLOSE_DMABUF:
				ASSERT_EQ(0, close(b.dmabuf));
				b.dmabuf = 0;
				break;
			}
			ASSERT_LE(1, pending)
				TH_LOG("%s round %d: no read in flight when the teardown began",
				       action_name[action], round);
			ASSERT_EQ(0, reap(&ring, NR_IOS, res, &ok, &efault))
				TH_LOG("%s: a read ended other than whole or EFAULT",
				       action_name[action]);
			io_uring_queue_exit(&ring);
			total_p += pending;
			min_p = pending < min_p ? pending : min_p;
			max_p = pending > max_p ? pending : max_p;
			whole += ok;
			faulted += efault;

			if (action == UNREG) {
				/* Every read has ended: nothing may have landed after the UNREG. */
				EXPECT_EQ(0, host("check", fresh, BAR_BASE, BUF_LEN))
					TH_LOG("UNREG round %d: DMA after UNREG returned", round);
			} else {
				/* runs of slots with the same outcome, one host check each */
				for (i = 0; i < NR_IOS;) {
					int j = i;

					while (j < NR_IOS && (res[j] > 0) == (res[i] > 0))
						j++;
					EXPECT_EQ(0, host_at("check", res[i] > 0 ? 0x11fe : 0,
							     BAR_BASE + i * IO_LEN,
							     (j - i) * IO_LEN, i * IO_LEN));
					i = j;
				}
			}
			if (action == CLOSE_NODE || action == CLOSE_DMABUF)
				EXPECT_EQ(NR_IOS, ok);
			if (node >= 0) {
				fgds_buf_put(node, &b);
				close(node);
			} else {
				munmap(b.p, BUF_LEN);
				close(b.dmabuf);
			}
		}
		ksft_print_msg("%s with I/O in flight: %d rounds\n", action_name[action], round);
		ksft_print_msg("%s: %d to %d of %d reads in flight (%lld in all)\n",
			       action_name[action], min_p, max_p, NR_IOS, total_p);
		ksft_print_msg("%s: %d whole, %d EFAULT; %d rounds run again (nothing in flight)\n",
			       action_name[action], whole, faulted, again);
		/* The memory hotplug code's own count: the struct pages came and went. */
		EXPECT_LT(memmap0, memmap_reg) TH_LOG("registering added no struct page memory");
		EXPECT_EQ(memmap0, fgds_memmap_pages())
			TH_LOG("%s: %lld pages of struct pages, %lld before", action_name[action],
			       fgds_memmap_pages(), memmap0);
		ksft_print_msg("%s: nr_memmap_pages %lld before, %lld registered, %lld after\n",
			       action_name[action], memmap0, memmap_reg, fgds_memmap_pages());
	}
}

/*
 * A round of a test below: the host clears the range, a registration of it
 * is mapped and NR_IOS reads are submitted into it. Returns how many are
 * still in flight; with none, the round is undone (a round with nothing in
 * flight tests nothing) and 0 returned.
 */
static int start_round(struct __test_metadata *_metadata, struct _test_data_lt *self,
		       struct io_uring *ring, struct fgds_buf *b)
{
	int pending;

	ASSERT_EQ(0, host("fill", 0, BAR_BASE, BUF_LEN));
	ASSERT_EQ(0, fgds_buf_get(self->node, &self->v, BAR_BASE, BUF_LEN, b));
	ASSERT_EQ(0, io_uring_queue_init(2 * NR_IOS, ring, 0));
	ASSERT_EQ(NR_IOS, submit_reads(ring, self->raw, b->p));
	pending = NR_IOS - io_uring_cq_ready(ring);
	if (!pending) {
		ASSERT_EQ(0, drain_unused_round(ring));
		io_uring_queue_exit(ring);
		fgds_buf_put(self->node, b);
	}
	return pending;
}

/* Two UNREG_BUFFERs of one cookie, started together from two threads. */
struct unreg_race {
	pthread_barrier_t go;
	int node;
	__u64 cookie, fresh;
	int ret[2];
	int returned;	/* how many have returned */
	int first;	/* which returned first */
	int fill_ret;
};

static void unreg_racer(struct unreg_race *r, int me)
{
	pthread_barrier_wait(&r->go);
	r->ret[me] = fgds_unreg(r->node, r->cookie);
	if (__atomic_fetch_add(&r->returned, 1, __ATOMIC_ACQ_REL) == 0) {
		/* The first to return: the memory is no longer the registration's. */
		r->first = me;
		r->fill_ret = host("fill", r->fresh, BAR_BASE, BUF_LEN);
	}
}

static void *unreg_racer_thread(void *arg)
{
	unreg_racer(arg, 1);
	return NULL;
}

#define UNREG_RACE_ROUNDS 20

/*
 * Two UNREG_BUFFERs of one cookie at once, with reads in flight: one
 * unregisters, the other gets ENOENT, and each returns only after the DMA
 * drained: the host refills the memory as soon as the first of them
 * returns, whichever it is, and finds the refill intact after every read
 * ended. (The loser used to return ENOENT at once, while the winner was
 * still draining.)
 */
TEST_F_TIMEOUT(lt, concurrent_unregs_return_after_the_drain, 600)
{
	int round, again = 0, loser_first = 0, min_p = NR_IOS, max_p = 0;

	for (round = 0; round < UNREG_RACE_ROUNDS; round++) {
		struct unreg_race r = { .node = self->node };
		int res[NR_IOS], ok, efault, pending;
		struct io_uring ring;
		struct fgds_buf b;
		pthread_t thr;

		r.fresh = 0xace0000 + round;
		pending = start_round(_metadata, self, &ring, &b);
		if (!pending) {
			ASSERT_GT(UNREG_RACE_ROUNDS, ++again)
				TH_LOG("too many rounds with nothing in flight");
			round--;
			continue;
		}
		r.cookie = b.cookie;
		ASSERT_EQ(0, pthread_barrier_init(&r.go, NULL, 2));
		ASSERT_EQ(0, pthread_create(&thr, NULL, unreg_racer_thread, &r));
		unreg_racer(&r, 0);
		pthread_join(thr, NULL);
		pthread_barrier_destroy(&r.go);
		b.cookie = 0;
		/* One unregistered, the other found nothing. */
		EXPECT_EQ(-ENOENT, r.ret[0] + r.ret[1])
			TH_LOG("round %d: UNREGs returned %d and %d", round, r.ret[0], r.ret[1]);
		ASSERT_EQ(0, r.fill_ret);
		loser_first += r.ret[r.first] == -ENOENT;
		ASSERT_EQ(0, reap(&ring, NR_IOS, res, &ok, &efault));
		io_uring_queue_exit(&ring);
		EXPECT_EQ(0, host("check", r.fresh, BAR_BASE, BUF_LEN))
			TH_LOG("round %d: DMA after the first UNREG (%s) returned", round,
			       r.ret[r.first] ? "ENOENT" : "0");
		fgds_buf_put(self->node, &b);
		min_p = pending < min_p ? pending : min_p;
		max_p = pending > max_p ? pending : max_p;
	}
	ksft_print_msg("concurrent UNREGs: %d rounds, %d to %d of %d reads in flight (%d reruns)\n",
		       UNREG_RACE_ROUNDS, min_p, max_p, NR_IOS, again);
	ksft_print_msg("concurrent UNREGs: the ENOENT one returned first %d times\n", loser_first);
}

/*
 * The exporter revokes with reads in flight, nr_rounds times: memory decode off
 * (vfio-pci revokes its dma-bufs) and on again. The revocation waits for no
 * I/O: fgds's callback cuts the registration and returns, and the reads still
 * in flight afterwards prove it. Those reads pinned their pages before the
 * cut and complete against the BAR as it then is: whole (decoding on again),
 * or -EIO (their DMA came while it was off). Later ones fail with EFAULT.
 * UNREG returns once all of them ended: the host refills the range right after
 * it and, after every read has been reaped, finds it unchanged. The
 * registration reports the revocation, its mapping faults, and memory around
 * it is never touched.
 */
TEST_F_TIMEOUT(lt, revoke_with_io_in_flight, 1800)
{
	int round, min_p = NR_IOS, max_p = 0, min_a = NR_IOS, max_a = 0;
	int whole = 0, faulted = 0, eio = 0, again = 0;
	long long total_p = 0, memmap0 = fgds_memmap_pages();
	double rev_max = 0;

	ASSERT_LE(0, memmap0) TH_LOG("no nr_memmap_pages in /proc/vmstat");
	ASSERT_EQ(0, host("fill", 0x6a4d, BAR_BASE - SZ_1M, SZ_1M));
	ASSERT_EQ(0, host("fill", 0x6a4e, BAR_BASE + BUF_LEN, SZ_1M));
	for (round = 0; round < nr_rounds; round++) {
		__u64 fresh = 0xfeed0000 + round;
		struct fgds_buffer_info info;
		int ok, efault, io_err, pending, after, ret;
		struct io_uring ring;
		struct fgds_buf b;
		double t0, dt;

		pending = start_round(_metadata, self, &ring, &b);
		if (!pending) {
			ASSERT_GT(nr_rounds, ++again)
				TH_LOG("too many rounds with nothing in flight");
			round--;
			continue;
		}
		t0 = fgds_now();
		ret = fgds_vfio_set_memory(&self->v, 0);
		dt = fgds_now() - t0;
		ASSERT_EQ(0, ret) TH_LOG("memory decode off: %s", strerror(-ret));
		after = NR_IOS - io_uring_cq_ready(&ring);
		ret = fgds_vfio_set_memory(&self->v, 1);
		ASSERT_EQ(0, ret) TH_LOG("memory decode on: %s", strerror(-ret));
		ASSERT_EQ(0, fgds_query(self->node, b.cookie, &info));
		EXPECT_EQ(FGDS_BUFFER_REVOKED, info.state);
		EXPECT_TRUE(fgds_load_faults(b.p + SZ_64K));
		/* The revocation returned with reads still in flight: it waited for none. */
		EXPECT_LT(0, after)
			TH_LOG("round %d: no read in flight after the revocation", round);
		/* UNREG waits for every read that pinned a page; nothing lands after it. */
		ASSERT_EQ(0, fgds_unreg(self->node, b.cookie));
		b.cookie = 0;
		ASSERT_EQ(0, host("fill", fresh, BAR_BASE, BUF_LEN));
		ASSERT_EQ(0, reap_eio(&ring, NR_IOS, NULL, &ok, &efault, &io_err))
			TH_LOG("round %d: a read ended other than whole, EFAULT or EIO", round);
		io_uring_queue_exit(&ring);
		EXPECT_EQ(0, host("check", fresh, BAR_BASE, BUF_LEN))
			TH_LOG("round %d: DMA after UNREG of the revoked registration returned",
			       round);
		ksft_print_msg("revocation round %d: %d reads, %d in flight, %d after it\n",
			       round, NR_IOS, pending, after);
		ksft_print_msg("revocation round %d: %d whole, %d EFAULT, %d EIO; revoke %.3f ms\n",
			       round, ok, efault, io_err, dt * 1000);
		total_p += pending;
		min_p = pending < min_p ? pending : min_p;
		max_p = pending > max_p ? pending : max_p;
		min_a = after < min_a ? after : min_a;
		max_a = after > max_a ? after : max_a;
		rev_max = dt > rev_max ? dt : rev_max;
		whole += ok;
		faulted += efault;
		eio += io_err;
		fgds_buf_put(self->node, &b);
	}
	ksft_print_msg("revocation with I/O in flight: %d rounds\n", round);
	ksft_print_msg("revocation: %d to %d of %d reads in flight (%lld in all)\n",
		       min_p, max_p, NR_IOS, total_p);
	ksft_print_msg("revocation: %d to %d reads still in flight after it returned\n",
		       min_a, max_a);
	ksft_print_msg("revocation: %d whole, %d EFAULT, %d EIO; %d rounds run again\n",
		       whole, faulted, eio, again);
	ksft_print_msg("revocation: memory decode off (vfio-pci's revoke) took <= %.3f ms\n",
		       rev_max * 1000);
	EXPECT_EQ(memmap0, fgds_memmap_pages())
		TH_LOG("revocation: %lld pages of struct pages, %lld before",
		       fgds_memmap_pages(), memmap0);
	EXPECT_EQ(0, host("check", 0x6a4d, BAR_BASE - SZ_1M, SZ_1M));
	EXPECT_EQ(0, host("check", 0x6a4e, BAR_BASE + BUF_LEN, SZ_1M));
}

struct worker {
	int id;
	int node;
	struct fgds_vfio *v;
	__u64 bar_off;
	int cycles;
	char file[256];
	size_t corrupt;
	int err;
	const char *what;
};

#define W_LEN SZ_1M

static void *worker(void *arg)
{
	struct worker *w = arg;
	int c, fd;

	fd = open(w->file, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		w->err = errno;
		w->what = "open the file";
		return NULL;
	}
	for (c = 0; c < w->cycles; c++) {
		__u64 seed = ((__u64)w->id << 32) | c;
		struct fgds_buf b;
		int ret;

		ret = fgds_buf_get(w->node, w->v, w->bar_off, W_LEN, &b);
		if (ret) {
			w->err = -ret;
			w->what = "register and map";
			break;
		}
		fgds_pattern_fill(b.p, W_LEN, seed, 0);
		if (pwrite(fd, b.p, W_LEN, 0) != (ssize_t)W_LEN) {
			w->err = errno;
			w->what = "O_DIRECT write from the mapping";
			fgds_buf_put(w->node, &b);
			break;
		}
		memset(b.p, 0, W_LEN);
		if (pread(fd, b.p, W_LEN, 0) != (ssize_t)W_LEN) {
			w->err = errno;
			w->what = "O_DIRECT read into the mapping";
			fgds_buf_put(w->node, &b);
			break;
		}
		w->corrupt += fgds_pattern_diff(b.p, W_LEN, seed, 0);
		fgds_buf_put(w->node, &b);
	}
	close(fd);
	return NULL;
}

/*
 * Threads register, map, write, read back and unregister at once: two share
 * one open file of /dev/fgds0, two have their own, two use the second GPU's
 * node. Buffers are 1 MiB so that pairs share a struct-page chunk.
 */
TEST_F_TIMEOUT(lt, threads_across_files_and_nodes, 600)
{
	const char *bdf2 = getenv("FGDS_GPU2_BDF"), *ext4 = getenv("FGDS_EXT4"),
		   *xfs = getenv("FGDS_XFS"), *why;
	struct worker w[6] = {};
	pthread_t thr[6];
	struct fgds_vfio v2;
	char node2[64];
	int own[2], n2, ret, i;

	ASSERT_TRUE(bdf2 && ext4 && xfs) TH_LOG("FGDS_GPU2_BDF, FGDS_EXT4 or FGDS_XFS not set");
	ASSERT_EQ(0, fgds_node_of(bdf2, node2, sizeof(node2))) TH_LOG("no fgds node for %s", bdf2);
	ret = fgds_vfio_open_bdf(&v2, bdf2, &why);
	ASSERT_EQ(0, ret) TH_LOG("vfio %s: %s: %s", bdf2, why, strerror(-ret));
	n2 = open(node2, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, n2);
	for (i = 0; i < 2; i++) {
		own[i] = open(FGDS_NODE, O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, own[i]);
	}
	for (i = 0; i < 6; i++) {
		w[i].id = i;
		w[i].cycles = 6;
		w[i].node = i < 2 ? self->node : i < 4 ? own[i - 2] : n2;
		w[i].v = i < 4 ? &self->v : &v2;
		w[i].bar_off = i < 4 ? BAR_BASE + i * W_LEN : (i - 4) * W_LEN;
		snprintf(w[i].file, sizeof(w[i].file), "%s/lifetime-%d.bin", i & 1 ? xfs : ext4, i);
		ASSERT_EQ(0, pthread_create(&thr[i], NULL, worker, &w[i]));
	}
	for (i = 0; i < 6; i++) {
		pthread_join(thr[i], NULL);
		EXPECT_EQ(0, w[i].err)
			TH_LOG("thread %d: %s: %s", i, w[i].what, strerror(w[i].err));
		EXPECT_EQ(0, w[i].corrupt) TH_LOG("thread %d: %zu bytes differ", i, w[i].corrupt);
		unlink(w[i].file);
	}
	EXPECT_EQ(0, fgds_fdinfo_num(n2, "fgds-gpu-chunks"));
	for (i = 0; i < 2; i++)
		close(own[i]);
	close(n2);
	fgds_vfio_close(&v2);
}

static void *remove_device(void *arg)
{
	struct unbind *u = arg;
	char path[128];

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/remove", u->bdf);
	note_in_flight(u);
	u->ret = fgds_sysfs_write(path, "1");
	return NULL;
}

/* Wait up to 30 s for @bdf to have an fgds node again, in @path. */
static int wait_for_node(const char *bdf, char *path, size_t len)
{
	int i;

	for (i = 0; i < 300; i++) {
		if (!fgds_node_of(bdf, path, len))
			return 0;
		usleep(100000);
	}
	return -ENODEV;
}

/*
 * The second GPU leaves the system, as on hot-unplug, while a registration
 * on it is mapped and O_DIRECT reads run into it: the PCI core unbinds
 * vfio-pci (which asks for the device back, and revokes), then fgds removes
 * the node and ends what is left on the GPU. An open file of the old node
 * still answers QUERY (revoked) and UNREG, refuses new registrations with
 * ENODEV, and holds no struct page. A rescan brings the GPU back: it gets a
 * node again once vfio-pci binds, and I/O into it works, every byte checked.
 */
TEST_F_TIMEOUT(lt, gpu_removed_and_rescanned, 600)
{
	const char *bdf2 = getenv("FGDS_GPU2_BDF"), *why;
	struct io_loop l = { .raw = self->raw };
	struct unbind u = { .bdf = bdf2 };
	struct fgds_buffer_info info;
	char node2[64], path[128];
	struct fgds_vfio v2;
	struct fgds_buf b;
	__u64 cookie;
	int n2, ret;

	ASSERT_NE(NULL, bdf2) TH_LOG("FGDS_GPU2_BDF not set");
	ASSERT_EQ(0, fgds_node_of(bdf2, node2, sizeof(node2))) TH_LOG("no fgds node for %s", bdf2);
	n2 = open(node2, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, n2);
	ret = fgds_vfio_open_bdf(&v2, bdf2, &why);
	ASSERT_EQ(0, ret) TH_LOG("vfio %s: %s: %s", bdf2, why, strerror(-ret));
	ASSERT_EQ(0, fgds_buf_get(n2, &v2, 0, BUF_LEN, &b));
	ret = take_away_under_io(&l, b.p, &v2, remove_device, &u, FGDS_HOST2_DIR, 0, BUF_LEN,
				 0x6a50, &why);
	ASSERT_EQ(0, ret) TH_LOG("removal under I/O: %s: %s", why, strerror(-ret));
	EXPECT_EQ(EFAULT, l.err);
	ASSERT_LE(1, u.in_flight) TH_LOG("no read in flight when the removal began");
	ksft_print_msg("removal with %d of 1 reads in flight: %d whole and %d short reads before\n",
		       u.in_flight, l.ok, l.cut_short);
	/* The second stand-in's memory, refilled once the removal was done: no late DMA. */
	EXPECT_EQ(0, host_in(FGDS_HOST2_DIR, "check", 0x6a50, 0, BUF_LEN));

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", bdf2);
	EXPECT_NE(0, access(path, F_OK)) TH_LOG("%s is still there", path);
	EXPECT_NE(0, access(node2, F_OK)) TH_LOG("%s is still there", node2);
	EXPECT_EQ(-ENODEV, fgds_node_of(bdf2, path, sizeof(path)));
	ASSERT_EQ(0, fgds_query(n2, b.cookie, &info));
	EXPECT_EQ(FGDS_BUFFER_REVOKED, info.state);
	EXPECT_TRUE(fgds_load_faults(b.p + SZ_64K));
	EXPECT_EQ(-ENODEV, fgds_reg(n2, b.dmabuf, 0, BUF_LEN, &cookie));
	EXPECT_EQ(0, fgds_fdinfo_num(n2, "fgds-gpu-pages"));
	cookie = b.cookie;
	fgds_buf_put(n2, &b);
	EXPECT_EQ(0, fgds_fdinfo_num(n2, "fgds-gpu-buffers"));
	EXPECT_EQ(-ENOENT, fgds_unreg(n2, cookie));
	close(n2);

	ASSERT_EQ(0, fgds_sysfs_write("/sys/bus/pci/rescan", "1"));
	ASSERT_EQ(0, wait_for_node(bdf2, node2, sizeof(node2)))
		TH_LOG("%s has no fgds node after the rescan", bdf2);
	n2 = open(node2, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, n2);
	ret = fgds_vfio_open_bdf(&v2, bdf2, &why);
	ASSERT_EQ(0, ret) TH_LOG("vfio %s after the rescan: %s: %s", bdf2, why, strerror(-ret));
	ASSERT_EQ(0, fgds_buf_get(n2, &v2, 0, BUF_LEN, &b));
	memset(b.p, 0, BUF_LEN);
	EXPECT_EQ((ssize_t)BUF_LEN, pread(self->raw, b.p, BUF_LEN, RAW_BASE));
	EXPECT_EQ(0, fgds_pattern_diff(b.p, BUF_LEN, 0x11fe, 0));
	fgds_buf_put(n2, &b);
	close(n2);
	fgds_vfio_close(&v2);
}

/*
 * Struct pages come in one pagemap per run of 2 MiB units that a
 * registration needs and that have none yet; units in common are shared,
 * and a pagemap stays while a registration uses one of its units. Data read
 * into a registration made of a shared unit and a pagemap of its own lands
 * where it belongs (checked from the host), and once nothing is registered
 * the kernel's count of struct-page memory is back where it was.
 */
TEST_F(lt, pagemaps_follow_registrations)
{
	const __u64 tail_off = 15 * SZ_1M + SZ_64K, tail_len = 5 * SZ_1M - SZ_64K;
	long long c0 = fgds_fdinfo_num(self->node, "fgds-gpu-chunks");
	long long p0 = fgds_fdinfo_num(self->node, "fgds-gpu-pagemaps");
	long long memmap0 = fgds_memmap_pages();
	__u64 big = 0, small = 0, tail = 0;
	unsigned char *p;
	int dmabuf;

	ASSERT_LE(0, c0);
	ASSERT_LE(0, p0) TH_LOG("no fgds-gpu-pagemaps in fdinfo");
	ASSERT_LE(0, memmap0) TH_LOG("no nr_memmap_pages in /proc/vmstat");
	dmabuf = fgds_vfio_dmabuf(&self->v, BAR_BASE, 32 * SZ_1M);
	ASSERT_LE(0, dmabuf);

	/* [0, 15 MiB): units 0 to 7, in one pagemap. */
	ASSERT_EQ(0, fgds_reg(self->node, dmabuf, 0, 15 * SZ_1M, &big));
	EXPECT_EQ(p0 + 1, fgds_fdinfo_num(self->node, "fgds-gpu-pagemaps"));
	EXPECT_EQ(c0 + 8, fgds_fdinfo_num(self->node, "fgds-gpu-chunks"));
	EXPECT_LT(memmap0, fgds_memmap_pages());
	/* A page of unit 7: shared, nothing new. */
	ASSERT_EQ(0, fgds_reg(self->node, dmabuf, 15 * SZ_1M, SZ_4K, &small));
	EXPECT_EQ(p0 + 1, fgds_fdinfo_num(self->node, "fgds-gpu-pagemaps"));
	EXPECT_EQ(c0 + 8, fgds_fdinfo_num(self->node, "fgds-gpu-chunks"));
	/* Unit 7 again, then units 8 and 9 in a pagemap of their own. */
	ASSERT_EQ(0, fgds_reg(self->node, dmabuf, tail_off, tail_len, &tail));
	EXPECT_EQ(p0 + 2, fgds_fdinfo_num(self->node, "fgds-gpu-pagemaps"));
	EXPECT_EQ(c0 + 10, fgds_fdinfo_num(self->node, "fgds-gpu-chunks"));

	/* 4 MiB from the NVMe, across the two pagemaps. */
	p = fgds_map(self->node, tail, tail_len);
	ASSERT_NE(NULL, p);
	ASSERT_EQ(0, host("fill", 0x9a6e, BAR_BASE + tail_off, tail_len));
	ASSERT_EQ((ssize_t)BUF_LEN, pread(self->raw, p, BUF_LEN, RAW_BASE));
	EXPECT_EQ(0, host_at("check", 0x11fe, BAR_BASE + tail_off, BUF_LEN, 0));
	EXPECT_EQ(0, host_at("check", 0x9a6e, BAR_BASE + tail_off + BUF_LEN,
			     tail_len - BUF_LEN, BUF_LEN));
	ASSERT_EQ(0, munmap(p, tail_len));

	/* Unit 7 keeps the first pagemap until the last user of it goes. */
	ASSERT_EQ(0, fgds_unreg(self->node, big));
	EXPECT_EQ(p0 + 2, fgds_fdinfo_num(self->node, "fgds-gpu-pagemaps"));
	ASSERT_EQ(0, fgds_unreg(self->node, small));
	EXPECT_EQ(p0 + 2, fgds_fdinfo_num(self->node, "fgds-gpu-pagemaps"));
	EXPECT_EQ(c0 + 10, fgds_fdinfo_num(self->node, "fgds-gpu-chunks"));
	ASSERT_EQ(0, fgds_unreg(self->node, tail));
	EXPECT_EQ(p0, fgds_fdinfo_num(self->node, "fgds-gpu-pagemaps"));
	EXPECT_EQ(c0, fgds_fdinfo_num(self->node, "fgds-gpu-chunks"));
	EXPECT_EQ(memmap0, fgds_memmap_pages());
	close(dmabuf);
}

TEST_HARNESS_MAIN
