/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the lifetime, stress and fuzz tests: host-memory pattern
 * I/O, sysfs writes, the node of a GPU, fgds's fdinfo counters and the count
 * of kernel reports in the kernel log.
 */
#ifndef FGDS_TEST_H
#define FGDS_TEST_H

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mount.h>
#include <linux/types.h>

#include "kselftest.h"
#include "fgds_pattern.h"
#include "fgds_util.h"
#include "fgds_vfio.h"

#define SZ_4K 4096UL
#define SZ_64K (64 * 1024UL)
#define SZ_1M (1024 * 1024UL)
#ifndef SZ_2M
#define SZ_2M (2 * SZ_1M)
#endif

static inline void *fgds_aligned_buf(size_t len)
{
	void *p = NULL;

	return posix_memalign(&p, 4096, len) ? NULL : p;
}

/* Write @len bytes of stream @seed (from stream offset 0) at @off of @fd through host memory. */
static inline int fgds_put_pattern(int fd, off_t off, size_t len, __u64 seed)
{
	unsigned char *buf = fgds_aligned_buf(len);
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	fgds_pattern_fill(buf, len, seed, 0);
	n = pwrite(fd, buf, len, off);
	free(buf);
	return n == (ssize_t)len ? 0 : -EIO;
}

/* Create (or truncate) @path and write @len bytes of stream @seed to it with O_DIRECT. */
static inline int fgds_put_file(const char *path, size_t len, __u64 seed)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
	int ret;

	if (fd < 0)
		return -errno;
	ret = fgds_put_pattern(fd, 0, len, seed);
	close(fd);
	return ret;
}

/* Bytes of @buf that differ from stream @seed at stream offset @pos. */
static inline size_t fgds_pattern_diff(const void *buf, size_t len, __u64 seed, __u64 pos)
{
	const unsigned char *p = buf;
	unsigned char chunk[4096];
	size_t bad = 0, done, i;

	for (done = 0; done < len; done += sizeof(chunk)) {
		size_t n = len - done < sizeof(chunk) ? len - done : sizeof(chunk);

		fgds_pattern_fill(chunk, n, seed, pos + done);
		for (i = 0; i < n; i++)
			bad += p[done + i] != chunk[i];
	}
	return bad;
}

/* Write @val to the sysfs file @path: 0 or -errno. */
static inline int fgds_sysfs_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) != (ssize_t)strlen(val))
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * Mounts cgroup v2 at /sys/fs/cgroup unless it is there: 0, or -errno. A
 * test that uses a controller calls it itself, whatever ran before it.
 */
static inline int fgds_cgroup2_mount(void)
{
	if (!access("/sys/fs/cgroup/cgroup.controllers", F_OK))
		return 0;
	if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", 0, NULL))
		return -errno;
	return 0;
}

/* The fgds node serving PCI device @bdf, in @path: 0, or -ENODEV when there is none. */
static inline int fgds_node_of(const char *bdf, char *path, size_t len)
{
	char link[PATH_MAX], target[PATH_MAX];
	struct dirent *de;
	int ret = -ENODEV, n;
	DIR *d;

	d = opendir("/sys/class/misc");
	if (!d)
		return -ENODEV;
	while (ret && (de = readdir(d))) {
		/* fgdsN, N the id of the BAR's offer: no fixed range. */
		if (strncmp(de->d_name, "fgds", 4) || !isdigit(de->d_name[4]))
			continue;
		/*
		 * A node's device is the auxiliary device of its BAR's offer
		 * (pci_p2pdma.bar.<id>), a child of the PCI device.
		 */
		snprintf(link, sizeof(link), "/sys/class/misc/%s/device/..", de->d_name);
		if (!realpath(link, target) || strcmp(basename(target), bdf))
			continue;
		n = snprintf(path, len, "/dev/%s", de->d_name);
		ret = n < (int)len ? 0 : -ENAMETOOLONG;
	}
	closedir(d);
	return ret;
}

/* A number from fgds's fdinfo of @fd ("fgds-buffers", "fgds-gpu-chunks", ...), or -1. */
static inline long long fgds_fdinfo_num(int fd, const char *key)
{
	char val[64];

	fgds_fdinfo(fd, key, val, sizeof(val));
	return val[0] ? strtoll(val, NULL, 10) : -1;
}

/*
 * What is left on the GPU of fgds node @node: live registrations and struct
 * pages (from fdinfo); -1 each when they cannot be read.
 */
static inline void fgds_gpu_leftovers(const char *node, long long *bufs, long long *pages)
{
	int fd = open(node, O_RDWR | O_CLOEXEC);

	*bufs = *pages = -1;
	if (fd < 0)
		return;
	*bufs = fgds_fdinfo_num(fd, "fgds-gpu-buffers");
	*pages = fgds_fdinfo_num(fd, "fgds-gpu-pages");
	close(fd);
}

/*
 * Pages of struct page memory the memory hotplug code allocated
 * (nr_memmap_pages in /proc/vmstat: memremap_pages() adds the memmap of what
 * it maps, memunmap_pages() takes it away): a figure of the kernel's, not of
 * fgds. -1 when it cannot be read.
 */
static inline long long fgds_memmap_pages(void)
{
	char line[256];
	long long v = -1;
	FILE *f = fopen("/proc/vmstat", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "nr_memmap_pages %lld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* A mark in the kernel log: /dev/kmsg opened at its end (an fd), or -errno. */
static inline int fgds_klog_mark(void)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (lseek(fd, 0, SEEK_END) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

/*
 * Lines the kernel itself (facility 0; not user space writing to /dev/kmsg)
 * logged since @mark (from fgds_klog_mark(), which this closes); the first
 * one goes to @first. Returns their number, or -1 when the log cannot be read.
 */
static inline int fgds_kernel_lines_since(int mark, char *first, size_t first_len)
{
	char rec[8192];
	int count = 0;
	ssize_t n;

	if (first_len)
		first[0] = 0;
	if (mark < 0)
		return -1;
	for (;;) {
		n = read(mark, rec, sizeof(rec) - 1);
		if (n < 0 && (errno == EPIPE || errno == EINTR))
			continue;
		if (n <= 0)
			break;
		rec[n] = 0;
		/* "prio,seq,usec,flags;text": prio = facility * 8 + level */
		if (atoi(rec) < 8) {
			if (!count++ && first_len) {
				char *text = strchr(rec, ';');

				snprintf(first, first_len, "%.*s", (int)first_len - 1,
					 text ? text + 1 : rec);
				first[strcspn(first, "\n")] = 0;
			}
		}
	}
	if (n < 0 && errno != EAGAIN)
		count = -1;
	close(mark);
	return count;
}

/*
 * Kernel reports logged since @mark (from fgds_klog_mark(), which this
 * closes): the lines tools/testing/fgds-vm/scan-log.sh fails a run on.
 * Returns their number, or -1 when the log cannot be read. Records the ring
 * buffer dropped before they were read are not seen here (the host's scan of
 * the console sees them).
 */
static inline int fgds_kernel_reports_since(int mark)
{
	static const char *const pat[] = {
		"Oops", "BUG:", "WARNING:", "KASAN:", "UBSAN:", "general protection fault",
		"Kernel panic", "possible circular locking", "possible recursive locking",
		"inconsistent lock state", "suspicious RCU usage", "blocked for more than",
		"soft lockup", "hard LOCKUP", "detected stalls", "kernel BUG at",
		"Unable to handle", "DEBUG_LOCKS_WARN_ON", "ODEBUG:",
		/* a DMA the IOMMU blocked (Intel, AMD) */
		"DMAR: [DMA", "IO_PAGE_FAULT",
	};
	char rec[8192];
	int count = 0;
	ssize_t n;
	size_t i;

	if (mark < 0)
		return -1;
	for (;;) {
		n = read(mark, rec, sizeof(rec) - 1);
		if (n < 0 && errno == EPIPE)
			continue;	/* records overwritten before we read them */
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		rec[n] = 0;
		for (i = 0; i < ARRAY_SIZE(pat); i++)
			if (strstr(rec, pat[i])) {
				count++;
				break;
			}
	}
	if (n < 0 && errno != EAGAIN)
		count = -1;
	close(mark);
	return count;
}

static inline sigjmp_buf *fgds_jump(void)
{
	static sigjmp_buf jump;

	return &jump;
}

static inline void fgds_on_sigbus(int sig)
{
	siglongjmp(*fgds_jump(), sig);
}

/*
 * A load from @p, or with @store a store of @val to it, with SIGBUS caught:
 * returns SIGBUS when the access raised it, else 0. sig is set by
 * sigsetjmp()'s returns only, so it needs no volatile across siglongjmp().
 */
static inline int fgds_access_signal(unsigned char *p, int store, unsigned char val)
{
	struct sigaction sa = { .sa_handler = fgds_on_sigbus }, old;
	int sig;

	sigaction(SIGBUS, &sa, &old);
	sig = sigsetjmp(*fgds_jump(), 1);
	if (!sig) {
		if (store)
			fgds_store(p, val);
		else
			fgds_load(p);
	}
	sigaction(SIGBUS, &old, NULL);
	return sig;
}

/* Whether a load from @p raises SIGBUS. */
static inline int fgds_load_faults(unsigned char *p)
{
	return fgds_access_signal(p, 0, 0) == SIGBUS;
}

/* A small seeded generator (xorshift64*), so that runs are reproducible. */
static inline __u64 fgds_rand(__u64 *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dULL;
}

static inline double fgds_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/*
 * The line of the kernel's dump of the current process's page tables that
 * covers @addr, or -ENOENT; -errno when the dump cannot be read.
 */
static inline int fgds_ptdump_line_of(unsigned long addr, char *out, size_t len)
{
	unsigned long long start, end;
	char line[256];
	FILE *f;
	int ret = -ENOENT;

	if (access("/sys/kernel/debug/page_tables", F_OK))
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	/*
	 * current_user exists with page table isolation; without it
	 * current_kernel walks the whole of the current process's tables.
	 */
	f = fopen("/sys/kernel/debug/page_tables/current_user", "r");
	if (!f)
		f = fopen("/sys/kernel/debug/page_tables/current_kernel", "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "0x%llx-0x%llx", &start, &end) == 2 && addr >= start &&
		    addr < end) {
			snprintf(out, len, "%s", line);
			ret = 0;
			break;
		}
	fclose(f);
	return ret;
}

#endif /* FGDS_TEST_H */
