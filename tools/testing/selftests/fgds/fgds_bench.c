// SPDX-License-Identifier: GPL-2.0
/*
 * fgds_bench: the driver's figures, printed side by side with their
 * baselines in one run (not a test: nothing here passes or fails).
 *
 *  1. REG_BUFFER + mmap time, first touch of every page and UNREG time for
 *     4 KiB to 256 MiB, with the chunks and pages each registration made.
 *  2. struct-page memory per GiB registered and with nothing registered
 *     (nr_memmap_pages in /proc/vmstat: the kernel's count, not fgds's).
 *  3. O_DIRECT read throughput of one file into an fgds mapping against the
 *     same reads into host memory (the ceiling), and guest CPU time of each.
 *
 *	fgds_bench [FILE [JSON]]
 *
 * JSON gets 1 and 2 as tools/testing/fgds-bench/report.py reads them
 * (make bench writes build/bench/vm-driver.json).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "kselftest.h"
#include "fgds_test.h"
#include "fgds_util.h"

#define MiB (1024UL * 1024)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static long vmstat_value(const char *key)
{
	char line[128];
	long v = -1;
	FILE *f = fopen("/proc/vmstat", "r");
	size_t kl = strlen(key);

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ' ')
			v = atol(line + kl + 1);
	if (f)
		fclose(f);
	return v;
}

/* Reads @len bytes of @fd into @buf in @bs requests; returns MiB/s, adds CPU seconds. */
static double read_all(int fd, void *buf, size_t len, size_t bs, double *cpu_s)
{
	double t0 = now(), c0 = cpu();

	for (size_t off = 0; off < len; off += bs)
		if (pread(fd, (char *)buf + off, bs, off) != (ssize_t)bs) {
			perror("pread");
			return 0;
		}
	*cpu_s = cpu() - c0;
	return len / MiB / (now() - t0);
}

int main(int argc, char **argv)
{
	static const __u64 sizes[] = {
		4096, 2 * MiB, 16 * MiB, 64 * MiB, 104 * MiB, 256 * MiB,
	};
	const char *path = argc > 1 ? argv[1] : "/mnt/ext4/bench.bin";
	const char *json = argc > 2 ? argv[2] : NULL;
	const size_t len = 256 * MiB;
	long idle0, idle1, per_gib = -1;
	struct utsname u;
	struct fgds_vfio v;
	struct fgds_buf b;
	const char *why;
	FILE *js = NULL;
	void *host;
	int fd, file;

	fd = open(FGDS_NODE, O_RDWR);
	if (fd < 0 || fgds_vfio_open(&v, &why)) {
		fprintf(stderr, "fgds_bench: needs " FGDS_NODE " and the vfio stand-in\n");
		return 1;
	}
	if (json) {
		js = fopen(json, "w");
		if (!js) {
			fprintf(stderr, "fgds_bench: %s: %s\n", json, strerror(errno));
			return 1;
		}
		uname(&u);
		fprintf(js, "{\"driver\": {\"kernel\": \"%s\", \"registrations\": [", u.release);
	}

	printf("REG_BUFFER + mmap, first touch of every page, UNREG (one at a time):\n");
	printf("  %-10s %12s %12s %12s %8s %8s %8s %12s\n", "size", "reg+mmap us", "fault us",
	       "unreg us", "chunks", "pagemaps", "pages", "memmap KiB");
	idle0 = vmstat_value("nr_memmap_pages");
	for (unsigned int i = 0; i < ARRAY_SIZE(sizes); i++) {
		long m0 = vmstat_value("nr_memmap_pages"), m1;
		long long chunks, pagemaps, pages;
		double t0 = now(), t1, t2, t3, t4;

		if (fgds_buf_get(fd, &v, 0, sizes[i], &b)) {
			fprintf(stderr, "fgds_bench: registration of %lu bytes failed\n",
				(unsigned long)sizes[i]);
			return 1;
		}
		t1 = now();
		for (__u64 o = 0; o < sizes[i]; o += 4096)
			fgds_load(b.p + o);
		t2 = now();
		m1 = vmstat_value("nr_memmap_pages");
		chunks = fgds_fdinfo_num(fd, "fgds-gpu-chunks");
		pagemaps = fgds_fdinfo_num(fd, "fgds-gpu-pagemaps");
		pages = fgds_fdinfo_num(fd, "fgds-gpu-pages");
		munmap(b.p, b.size);
		t3 = now();
		if (fgds_unreg(fd, b.cookie)) {
			fprintf(stderr, "fgds_bench: UNREG of %lu bytes failed\n",
				(unsigned long)sizes[i]);
			return 1;
		}
		t4 = now();
		close(b.dmabuf);
		printf("  %-10lu %12.0f %12.0f %12.0f %8lld %8lld %8lld %12ld\n",
		       (unsigned long)sizes[i], (t1 - t0) * 1e6, (t2 - t1) * 1e6, (t4 - t3) * 1e6,
		       chunks, pagemaps, pages, (m1 - m0) * 4);
		if (sizes[i] == 256 * MiB)
			per_gib = (m1 - m0) * 4 * 4;
		if (js) {
			fprintf(js, "%s{\"bytes\": %llu", i ? ", " : "",
				(unsigned long long)sizes[i]);
			fprintf(js, ", \"reg_mmap_us\": %.1f", (t1 - t0) * 1e6);
			fprintf(js, ", \"fault_us\": %.1f", (t2 - t1) * 1e6);
			fprintf(js, ", \"unreg_us\": %.1f", (t4 - t3) * 1e6);
			fprintf(js, ", \"chunks\": %lld, \"pagemaps\": %lld, \"pages\": %lld",
				chunks, pagemaps, pages);
			fprintf(js, ", \"memmap_kib\": %ld}", (m1 - m0) * 4);
		}
	}
	idle1 = vmstat_value("nr_memmap_pages");
	printf("struct-page memory: %ld KiB per GiB registered; %ld KiB with nothing\n"
	       "registered; remapping a whole BAR would cost the same per GiB of BAR,\n"
	       "registered or not (2 GiB for a 128 GiB BAR1)\n", per_gib, (idle1 - idle0) * 4);
	if (js) {
		fprintf(js, "], \"memmap_kib_per_gib\": %ld, \"memmap_kib_idle\": %ld}}\n",
			per_gib, (idle1 - idle0) * 4);
		if (fclose(js)) {
			fprintf(stderr, "fgds_bench: %s: %s\n", json, strerror(errno));
			return 1;
		}
	}

	/* the file, through host memory */
	if (posix_memalign(&host, 4096, len))
		return 1;
	memset(host, 0x5a, len);
	file = open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);
	if (file < 0 || pwrite(file, host, len, 0) != (ssize_t)len) {
		fprintf(stderr, "fgds_bench: %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (fgds_buf_get(fd, &v, 0, len, &b))
		return 1;
	printf("\nO_DIRECT read of %zu MiB from %s (same file, same requests):\n", len / MiB, path);
	printf("  %-8s %16s %16s %8s %18s %18s\n", "request", "host MiB/s", "fgds MiB/s", "ratio",
	       "host CPU s/GiB", "fgds CPU s/GiB");
	for (size_t bs = 64 * 1024; bs <= 16 * MiB; bs *= 4) {
		double ch, cf, h = read_all(file, host, len, bs, &ch);
		double f = read_all(file, b.p, len, bs, &cf);

		printf("  %-8zu %16.0f %16.0f %8.2f %18.3f %18.3f\n", bs, h, f, h > 0 ? f / h : 0,
		       ch * 1024 / (len / MiB), cf * 1024 / (len / MiB));
	}
	fgds_buf_put(fd, &b);
	close(file);
	unlink(path);
	return 0;
}
