// SPDX-License-Identifier: GPL-2.0
/*
 * fgds_vmbench: the in-VM benchmark suite (not a test: nothing passes or
 * fails). Same NVMe, same file, same request sizes and queue depths for every
 * path, in one run:
 *
 *   host      O_DIRECT between the file and host memory: the ceiling
 *   fgds      O_DIRECT between the file and an fgds mapping of the stand-in's
 *             BAR, io_uring at the queue depth
 *   fgds-vec  the same with READV/WRITEV of 4 segments in 4 registrations
 *   fgds-lib  libfgds's engine (fgds_read/fgds_write: chunks in parallel
 *             through io_uring, queue depth = the row's)
 *   fgds-batch libfgds's Batch API: the row's queue depth of requests in
 *             flight (fgds_batch_submit/fgds_batch_wait), library defaults
 *   bounce    O_DIRECT through host memory plus a CPU copy to/from the BAR
 *   p2pmem    O_DIRECT between the file and the second NVMe's CMB, the
 *             upstream p2pmem path (sysfs p2pmem/allocate)
 *
 * For each it prints MiB/s, the ratio to the host row and the guest's CPU
 * seconds per GiB moved (all CPUs, from /proc/stat: user, system, irq and
 * softirq), and writes the rows as JSON.
 *
 *   fgds_vmbench FILE JSON_OUT [CMB_BDF]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fgds.h"
#include "fgds_test.h"
#include "fgds_util.h"

#define MiB SZ_1M
#define FILE_LEN (256 * MiB)
#define BUF_LEN (256 * MiB)
#define CMB_LEN (32 * MiB)
#define LIB_LEN (128 * MiB)
#define MAX_QD 64

enum engine { HOST, FGDS, FGDS_VEC, FGDS_LIB, FGDS_BATCH, BOUNCE, P2PMEM, NR_ENGINES };
static const char *const engine_name[NR_ENGINES] = {
	"host", "fgds", "fgds-vec", "fgds-lib", "fgds-batch", "bounce", "p2pmem",
};

struct ctx {
	int file;
	int lib;			/* libfgds handle of the file */
	unsigned char *host;		/* BUF_LEN of host memory */
	unsigned char *staging;		/* bounce staging, BUF_LEN */
	struct fgds_buf gpu;		/* BUF_LEN of the stand-in, registered and mapped */
	struct fgds_buf seg[4];		/* 4 registrations for the vectored path */
	unsigned char *cmb;		/* p2pmem, CMB_LEN, or NULL */
	unsigned char *lib_buf;		/* LIB_LEN of the stand-in, registered by libfgds */
	struct io_uring ring;
};

/* Busy jiffies of all CPUs (user, nice, system, irq, softirq). */
static double busy_seconds(void)
{
	unsigned long long u, n, s, idle, iow, irq, sirq;
	FILE *f = fopen("/proc/stat", "r");
	int ok;

	if (!f)
		return 0;
	ok = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &u, &n, &s, &idle, &iow, &irq,
		    &sirq) == 7;
	fclose(f);
	return ok ? (u + n + s + irq + sirq) / (double)sysconf(_SC_CLK_TCK) : 0;
}

static void prefault(unsigned char *p, size_t len)
{
	for (size_t off = 0; off < len; off += 4096)
		(void)*(volatile unsigned char *)(p + off);
}

static unsigned char *target(struct ctx *c, enum engine e)
{
	switch (e) {
	case HOST:
		return c->host;
	case BOUNCE:
		return c->staging;
	case P2PMEM:
		return c->cmb;
	default:
		return c->gpu.p;
	}
}

/* Buffer window of request @i (bs <= len): requests in flight get distinct windows where they fit. */
static size_t win(size_t i, size_t bs, size_t len)
{
	return (i * bs) % (len - len % bs);
}

/*
 * Move @total bytes in @bs requests with @qd in flight; returns bytes moved
 * (0 on an error, reported).
 */
static size_t run_uring(struct ctx *c, enum engine e, int write, size_t bs, int qd, size_t total)
{
	size_t len = e == P2PMEM ? CMB_LEN : BUF_LEN, next = 0, done = 0, nreq = total / bs;
	unsigned char *base = target(c, e);
	struct iovec iov[MAX_QD][4];
	int inflight = 0;

	while (done < nreq) {
		struct io_uring_cqe *cqe;

		while (inflight < qd && next < nreq) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
			size_t w = win(next, bs, len), slot = next % MAX_QD;
			off_t off = (next * bs) % FILE_LEN;

			if (e == FGDS_VEC) {
				for (int k = 0; k < 4; k++) {
					iov[slot][k].iov_base = c->seg[k].p + win(next, bs / 4, c->seg[k].size);
					iov[slot][k].iov_len = bs / 4;
				}
				if (write)
					io_uring_prep_writev(sqe, c->file, iov[slot], 4, off);
				else
					io_uring_prep_readv(sqe, c->file, iov[slot], 4, off);
			} else {
				if (write && e == BOUNCE)
					memcpy(base + w, c->gpu.p + w, bs);
				if (write)
					io_uring_prep_write(sqe, c->file, base + w, bs, off);
				else
					io_uring_prep_read(sqe, c->file, base + w, bs, off);
			}
			sqe->user_data = next++;
			inflight++;
		}
		if (io_uring_submit_and_wait(&c->ring, 1) < 0 || io_uring_wait_cqe(&c->ring, &cqe)) {
			fprintf(stderr, "fgds_vmbench: io_uring: %s\n", strerror(errno));
			return 0;
		}
		if (cqe->res != (int)bs) {
			fprintf(stderr, "fgds_vmbench: %s %s bs %zu: %s\n", engine_name[e],
				write ? "write" : "read", bs,
				cqe->res < 0 ? strerror(-cqe->res) : "short");
			return 0;
		}
		if (!write && e == BOUNCE) {
			size_t w = win(cqe->user_data, bs, len);

			memcpy(c->gpu.p + w, base + w, bs);
		}
		io_uring_cqe_seen(&c->ring, cqe);
		inflight--;
		done++;
	}
	return done * bs;
}

static size_t run_lib(struct ctx *c, int write, size_t bs, size_t total)
{
	size_t moved = 0, i;

	for (i = 0; moved < total; i++) {
		size_t w = win(i, bs, LIB_LEN);
		off_t off = (i * bs) % FILE_LEN;
		ssize_t n = write ? fgds_write(c->lib, c->lib_buf, bs, off, w) :
				    fgds_read(c->lib, c->lib_buf, bs, off, w);

		if (n != (ssize_t)bs) {
			fprintf(stderr, "fgds_vmbench: fgds-lib: %s\n", fgds_last_error());
			return 0;
		}
		moved += bs;
	}
	return moved;
}

/* @qd requests of @bs in flight through one libfgds batch. */
static size_t run_batch(struct ctx *c, int write, size_t bs, int qd, size_t total)
{
	struct fgds_io_event ev[MAX_QD];
	size_t next = 0, done = 0, nreq = total / bs;
	int batch = fgds_batch_create(qd), inflight = 0;
	const char *err = NULL;

	if (batch < 0) {
		fprintf(stderr, "fgds_vmbench: fgds-batch: %s\n", fgds_last_error());
		return 0;
	}
	while (done < nreq) {
		struct fgds_io_params p[MAX_QD];
		int n = 0, got;

		while (inflight + n < qd && next < nreq) {
			p[n] = (struct fgds_io_params){
				.handle = c->lib,
				.opcode = write ? FGDS_OP_WRITE : FGDS_OP_READ,
				.cookie = next,
				.file_offset = (next * bs) % FILE_LEN,
				.base = c->lib_buf,
				.buf_offset = win(next, bs, LIB_LEN),
				.size = bs,
			};
			next++;
			n++;
		}
		if (n && fgds_batch_submit(batch, p, n) < 0)
			err = fgds_last_error();
		inflight += n;
		got = err ? 0 : fgds_batch_wait(batch, 1, MAX_QD, ev, -1);
		if (got < 0)
			err = fgds_last_error();
		for (int i = 0; i < got && !err; i++) {
			int64_t res = ev[i].result;

			if (ev[i].status != FGDS_STATUS_COMPLETE || res != (int64_t)bs)
				err = res < 0 ? fgds_strerror((int)res) : "short transfer";
		}
		if (err) {
			fprintf(stderr, "fgds_vmbench: fgds-batch %s bs %zu: %s\n",
				write ? "write" : "read", bs, err);
			break;
		}
		inflight -= got;
		done += got;
	}
	fgds_batch_destroy(batch);
	return err ? 0 : done * bs;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 4096, 64 * 1024, MiB, 16 * MiB, 64 * MiB };
	static const int qds[] = { 1, 8, 32, 64 };
	const char *path = argc > 1 ? argv[1] : "/mnt/ext4/vmbench.bin";
	const char *json_path = argc > 2 ? argv[2] : "/fgds/out/vm-suite.json";
	const char *cmb_bdf = argc > 3 ? argv[3] : getenv("FGDS_CMB_BDF");
	struct fgds_config cfg = { 0 };
	struct ctx c = { 0 };
	struct fgds_vfio v;
	const char *why;
	int node, lib_dmabuf, first = 1;
	FILE *json;

	node = open(FGDS_NODE, O_RDWR | O_CLOEXEC);
	if (node < 0 || fgds_vfio_open(&v, &why)) {
		fprintf(stderr, "fgds_vmbench: needs " FGDS_NODE " and the vfio stand-in\n");
		return 1;
	}
	c.host = fgds_aligned_buf(BUF_LEN);
	c.staging = fgds_aligned_buf(BUF_LEN);
	if (!c.host || !c.staging || fgds_buf_get(node, &v, 0, BUF_LEN, &c.gpu))
		return 1;
	for (int k = 0; k < 4; k++)
		if (fgds_buf_get(node, &v, BUF_LEN + k * 32 * MiB, 32 * MiB, &c.seg[k]))
			return 1;
	/* the library registers and maps its own dma-buf: [384M, 512M) of the BAR */
	lib_dmabuf = fgds_vfio_dmabuf(&v, BUF_LEN + 128 * MiB, LIB_LEN);
	if (lib_dmabuf < 0 ||
	    fgds_buf_register_dmabuf(NULL, lib_dmabuf, 0, LIB_LEN, (void **)&c.lib_buf) < 0) {
		fprintf(stderr, "fgds_vmbench: libfgds registration: %s\n", fgds_last_error());
		return 1;
	}
	if (cmb_bdf) {
		char p2p[256];
		int fd;

		snprintf(p2p, sizeof(p2p), "/sys/bus/pci/devices/%s/p2pmem/allocate", cmb_bdf);
		fd = open(p2p, O_RDWR);
		c.cmb = fd < 0 ? MAP_FAILED : mmap(NULL, CMB_LEN, PROT_READ | PROT_WRITE, MAP_SHARED,
						   fd, 0);
		if (c.cmb == MAP_FAILED) {
			fprintf(stderr, "fgds_vmbench: no p2pmem from %s: %s\n", p2p, strerror(errno));
			c.cmb = NULL;
		}
	}

	/* every mapping faulted in before the clock starts, as host memory is by memset */
	prefault(c.gpu.p, BUF_LEN);
	prefault(c.lib_buf, LIB_LEN);
	for (int k = 0; k < 4; k++)
		prefault(c.seg[k].p, c.seg[k].size);
	if (c.cmb)
		prefault(c.cmb, CMB_LEN);

	/* the file, written once through host memory */
	memset(c.host, 0x5a, BUF_LEN);
	c.file = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
	if (c.file < 0 || pwrite(c.file, c.host, FILE_LEN, 0) != (ssize_t)FILE_LEN || fsync(c.file)) {
		fprintf(stderr, "fgds_vmbench: %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (io_uring_queue_init(2 * MAX_QD, &c.ring, 0))
		return 1;
	json = fopen(json_path, "w");
	if (!json) {
		fprintf(stderr, "fgds_vmbench: %s: %s\n", json_path, strerror(errno));
		return 1;
	}
	fprintf(json, "{\n \"suite\": \"vm\",\n \"file\": \"%s\",\n \"rows\": [\n", path);

	printf("%-5s %8s %3s  %-8s %10s %8s %12s\n", "rw", "request", "qd", "engine", "MiB/s",
	       "ratio", "CPU s/GiB");
	for (int write = 0; write < 2; write++) {
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			for (size_t qi = 0; qi < sizeof(qds) / sizeof(qds[0]); qi++) {
				size_t bs = sizes[si];
				int qd = qds[qi];
				/* enough requests to fill the queue a few times, bounded in bytes */
				size_t total = bs * qd * 16;
				double ceiling = 0;

				if (total < (bs >= MiB ? 64 : 16) * MiB)
					total = (bs >= MiB ? 64 : 16) * MiB;
				if (total > 512 * MiB)
					total = 512 * MiB;
				if (bs <= 64 * 1024 && total > 32 * MiB)
					total = 32 * MiB;
				total -= total % bs;
				for (int e = 0; e < NR_ENGINES; e++) {
					double t0, b0, secs, cpu;
					size_t moved;

					/*
					 * QEMU's CMB moves some 30 MiB/s: keep its requests
					 * in flight under 8 MiB and its runs short, or they
					 * outlive the NVMe driver's 30 s I/O timeout.
					 */
					if (e == P2PMEM && (!c.cmb || bs * qd > 8 * MiB))
						continue;
					if (e == FGDS_VEC && bs < 16 * 1024)
						continue;
					if (e == FGDS_LIB || e == FGDS_BATCH) {
						cfg.queue_depth = e == FGDS_LIB ? qd : 0;
						cfg.flags = FGDS_CONFIG_STRICT;
						c.lib = fgds_open_fd(c.file, &cfg);
						if (c.lib < 0)
							return 1;
					}
					b0 = busy_seconds();
					t0 = fgds_now();
					if (e == FGDS_LIB)
						moved = run_lib(&c, write, bs, total);
					else if (e == FGDS_BATCH)
						moved = run_batch(&c, write, bs, qd, total);
					else
						moved = run_uring(&c, e, write, bs, qd,
								  e == P2PMEM && total > 8 * MiB ?
								  8 * MiB : total);
					secs = fgds_now() - t0;
					cpu = busy_seconds() - b0;
					if (e == FGDS_LIB || e == FGDS_BATCH)
						fgds_close(c.lib);
					if (!moved)
						continue;
					if (e == HOST)
						ceiling = moved / MiB / secs;
					printf("%-5s %8zu %3d  %-8s %10.1f %8.2f %12.3f\n",
					       write ? "write" : "read", bs, qd, engine_name[e],
					       moved / MiB / secs,
					       ceiling > 0 ? moved / MiB / secs / ceiling : 0,
					       cpu / (moved / (double)(1UL << 30)));
					fprintf(json,
						"%s  {\"suite\": \"vm\", \"rw\": \"%s\", \"pattern\": \"seq\", "
						"\"block_size\": %zu, \"queue_depth\": %d, \"engine\": \"%s\", "
						"\"bytes\": %zu, \"seconds\": %.6f, \"mib_per_s\": %.3f, "
						"\"ratio_to_ceiling\": %.4f, \"cpu_seconds\": %.3f, "
						"\"cpu_s_per_gib\": %.4f}",
						first ? "" : ",\n", write ? "write" : "read", bs, qd,
						engine_name[e], moved, secs, moved / MiB / secs,
						ceiling > 0 ? moved / MiB / secs / ceiling : 0, cpu,
						cpu / (moved / (double)(1UL << 30)));
					first = 0;
				}
			}
		}
	}
	fprintf(json, "\n ]\n}\n");
	fclose(json);
	close(c.file);
	unlink(path);
	return 0;
}
