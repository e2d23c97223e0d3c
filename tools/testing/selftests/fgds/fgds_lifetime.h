/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What fgds_lifetime_test.c's tests are made of: the areas of the fixture
 * they own, reads of the throttled NVMe submitted and reaped, the host's
 * checks, a loop of I/O on a thread, and the exporter's driver unbound or
 * its memory taken away (vfio-pci's request interrupt) while reads are in
 * flight. The tests and their fixture are in the .c. Include after
 * kselftest_harness.h, fgds_host.h, fgds_test.h and fgds_util.h.
 */
#ifndef FGDS_LIFETIME_H
#define FGDS_LIFETIME_H

/*
 * Areas of the fixture these tests own: BAR [256M, 320M); the slow NVMe
 * (FGDS_SLOW, whole namespace, reads throttled to SLOW_BPS by QEMU) from 0.
 */
#define BAR_BASE (256 * SZ_1M)
#define RAW_BASE 0
#define BUF_LEN (4 * SZ_1M)
#define NR_IOS 32
#define IO_LEN (BUF_LEN / NR_IOS)
/* Must match throttling.bps-read of fgdsslow in tools/testing/fgds-vm/run-vm.sh. */
#define SLOW_BPS (16 * SZ_1M)
/* Longest a read of the slow NVMe can take: every byte in flight, at SLOW_BPS, twice over. */
#define SLOW_DRAIN_US (2 * 1000000ULL * BUF_LEN / SLOW_BPS)
/*
 * Teardowns of each kind with reads in flight, revocations, SIGKILLs:
 * FGDS_LIFETIME_ROUNDS, or 30 (make stress: 100).
 */
#define DEFAULT_ROUNDS 30
static int nr_rounds = DEFAULT_ROUNDS;

static void __attribute__((constructor)) lifetime_rounds(void)
{
	const char *env = getenv("FGDS_LIFETIME_ROUNDS");

	if (env && atoi(env) > 0)
		nr_rounds = atoi(env);
}

static int open_raw(void)
{
	const char *raw = getenv("FGDS_SLOW");

	return raw ? open(raw, O_RDWR | O_DIRECT | O_CLOEXEC) : -ENOENT;
}

/* Submit NR_IOS reads of IO_LEN from @raw at RAW_BASE into @p. */
static int submit_reads(struct io_uring *ring, int raw, unsigned char *p)
{
	int i;

	for (i = 0; i < NR_IOS; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

		if (!sqe)
			return -EBUSY;
		io_uring_prep_read(sqe, raw, p + i * IO_LEN, IO_LEN, RAW_BASE + i * IO_LEN);
		sqe->user_data = i;
	}
	return io_uring_submit(ring);
}

/*
 * Reap @n completions into @res (by slot, unless NULL): counts of whole
 * reads, of -EFAULT and, when @eio is given, of -EIO (reads in flight across
 * a revocation by memory decoding off whose DMA came while the BAR did not
 * decode: QEMU's NVMe reports the failed transfer); -1 on a timeout or any
 * other result.
 */
static int reap_eio(struct io_uring *ring, int n, int *res, int *ok, int *efault, int *eio)
{
	struct __kernel_timespec ts = { .tv_sec = 120 };
	struct io_uring_cqe *cqe;

	*ok = *efault = 0;
	if (eio)
		*eio = 0;
	while (n--) {
		if (io_uring_wait_cqe_timeout(ring, &cqe, &ts))
			return -1;
		if (res)
			res[cqe->user_data % NR_IOS] = cqe->res;
		if (cqe->res == (int)IO_LEN)
			(*ok)++;
		else if (cqe->res == -EFAULT)
			(*efault)++;
		else if (cqe->res == -EIO && eio)
			(*eio)++;
		else
			return -1;
		io_uring_cqe_seen(ring, cqe);
	}
	return 0;
}

static int reap(struct io_uring *ring, int n, int *res, int *ok, int *efault)
{
	return reap_eio(ring, n, res, ok, efault, NULL);
}

static int host_at(const char *op, __u64 seed, __u64 bar_off, __u64 len, __u64 pos)
{
	char ans[200];
	int ret = fgds_host_req(op, seed, bar_off, len, pos, ans, sizeof(ans));

	if (ret)
		fprintf(stderr, "# host %s at %#llx+%#llx: %s\n", op, (unsigned long long)bar_off,
			(unsigned long long)len, ans);
	return ret;
}

static int host(const char *op, __u64 seed, __u64 bar_off, __u64 len)
{
	return host_at(op, seed, bar_off, len, 0);
}

/* The same on the second stand-in's BAR (FGDS_GPU2_BDF), or the one the checker in @dir serves. */
static int host_in(const char *dir, const char *op, __u64 seed, __u64 bar_off, __u64 len)
{
	char ans[200];
	int ret = fgds_host_req_at(dir, op, seed, bar_off, len, 0, ans, sizeof(ans));

	if (ret)
		fprintf(stderr, "# host %s %s at %#llx+%#llx: %s\n", dir, op,
			(unsigned long long)bar_off, (unsigned long long)len, ans);
	return ret;
}

struct io_loop {
	int raw;
	unsigned char *p;
	int ok;
	int cut_short;
	int err;
	/* reads begun and ended: begun - ended is 1 while a read is in flight */
	int begun;
	int ended;
};

static void *io_loop(void *arg)
{
	struct io_loop *l = arg;

	for (;;) {
		ssize_t n;

		__atomic_add_fetch(&l->begun, 1, __ATOMIC_SEQ_CST);
		n = pread(l->raw, l->p, BUF_LEN, RAW_BASE);
		__atomic_add_fetch(&l->ended, 1, __ATOMIC_SEQ_CST);
		if (n < 0) {
			l->err = errno;
			return NULL;
		}
		if (n != (ssize_t)BUF_LEN)
			l->cut_short++;
		else
			__atomic_add_fetch(&l->ok, 1, __ATOMIC_RELEASE);
	}
}

struct unbind {
	const char *bdf;
	int ret;
	/* reads in flight when the sysfs write began */
	struct io_loop *l;
	int in_flight;
};

static void note_in_flight(struct unbind *u)
{
	u->in_flight = __atomic_load_n(&u->l->begun, __ATOMIC_SEQ_CST) -
		       __atomic_load_n(&u->l->ended, __ATOMIC_SEQ_CST);
}

static void *unbind_vfio(void *arg)
{
	struct unbind *u = arg;

	note_in_flight(u);
	u->ret = fgds_sysfs_write("/sys/bus/pci/drivers/vfio-pci/unbind", u->bdf);
	return NULL;
}

/* VFIO_DEVICE_SET_IRQS of one eventfd: the eventfd is the set's data. */
struct vfio_request_irq_set {
	struct vfio_irq_set set;
	__s32 fd;
};

static_assert(offsetof(struct vfio_request_irq_set, fd) == offsetof(struct vfio_irq_set, data),
	      "fd is the set's data");

/* An eventfd that vfio-pci signals when it wants the device back (unbind). */
static int vfio_request_eventfd(struct fgds_vfio *v)
{
	struct vfio_request_irq_set req = {
		.set = {
			.argsz = sizeof(req),
			.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
			.index = VFIO_PCI_REQ_IRQ_INDEX,
			.count = 1,
		},
	};

	req.fd = eventfd(0, EFD_CLOEXEC);
	if (req.fd < 0)
		return -errno;
	if (ioctl(v->device, VFIO_DEVICE_SET_IRQS, &req)) {
		int err = -errno;

		close(req.fd);
		return err;
	}
	return req.fd;
}

/*
 * Takes the stand-in of @v away from vfio-pci under I/O: with O_DIRECT reads
 * running into @p (io_loop in a thread, from its second whole read on), runs
 * @take_away(@u) in a thread (a sysfs write that unbinds or removes the
 * device), gives the device back when vfio-pci asks for it (closing @v,
 * which revokes its dma-bufs), has the host (the checker in @host_dir) fill
 * the registration's range of the BAR (@bar_off, @len) with @fresh as soon
 * as that is done and the
 * reads may still run, and waits for both threads. Returns 0, or a negative
 * errno with the failed step in @why; @l has the reads' counts and the error
 * that stopped them, @u->in_flight the reads in flight when the take-away
 * began.
 */
static int take_away_under_io(struct io_loop *l, unsigned char *p, struct fgds_vfio *v,
			      void *(*take_away)(void *), struct unbind *u, const char *host_dir,
			      __u64 bar_off, __u64 len, __u64 fresh, const char **why)
{
	pthread_t io_thr, thr;
	struct pollfd pfd;
	int efd, ret = 0;
	bool started;

	*why = "VFIO_PCI_REQ_IRQ_INDEX";
	efd = vfio_request_eventfd(v);
	if (efd < 0)
		return efd;
	l->p = p;
	*why = "start the reads";
	if (pthread_create(&io_thr, NULL, io_loop, l)) {
		close(efd);
		return -EAGAIN;
	}
	while (__atomic_load_n(&l->ok, __ATOMIC_ACQUIRE) < 2 && !l->err)
		usleep(1000);
	if (l->err) {
		*why = "O_DIRECT read into the mapping";
		pthread_join(io_thr, NULL);
		close(efd);
		return -l->err;
	}
	*why = "start the sysfs write";
	u->l = l;
	started = !pthread_create(&thr, NULL, take_away, u);
	if (!started) {
		ret = -EAGAIN;
	} else {
		pfd = (struct pollfd){ .fd = efd, .events = POLLIN };
		if (poll(&pfd, 1, 60000) != 1) {
			*why = "vfio-pci never asked for the device";
			ret = -ETIMEDOUT;
		}
	}
	/* The owner gives the device back: vfio-pci revokes its dma-bufs. */
	fgds_vfio_close(v);
	close(efd);
	if (started)
		pthread_join(thr, NULL);
	/* Torn down: memory that is no longer the registration's, while reads may run. */
	if (!ret && host_in(host_dir, "fill", fresh, bar_off, len)) {
		*why = "host fill after the take-away";
		ret = -EIO;
	}
	pthread_join(io_thr, NULL);
	if (!ret && u->ret) {
		*why = "the sysfs write";
		ret = u->ret;
	}
	return ret;
}

#endif /* FGDS_LIFETIME_H */
