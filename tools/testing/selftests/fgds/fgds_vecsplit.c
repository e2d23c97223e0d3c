// SPDX-License-Identifier: GPL-2.0
/*
 * fgds_vecsplit: how many device requests one O_DIRECT read into fgds
 * mappings becomes (a diagnostic, not a test: nothing passes or fails).
 *
 * The block layer ends a bio where the pages change dev_pagemap, and the
 * driver makes one pagemap per run of 2 MiB units a registration makes, so a
 * READV whose segments lie in registrations of their own is one bio, and so
 * one NVMe command, per segment. For each request size it reads the file N
 * times and counts the reads the disk completed (first field of
 * /sys/dev/block/MAJ:MIN/stat of the file's device) per request, for:
 *
 *   plain      one pread of the size into one registration
 *   1-chunk    a preadv of 4 segments in one registration, all 4 inside one
 *              2 MiB unit (one pagemap: as many commands as plain)
 *   4-regs     a preadv of 4 segments in 4 registrations (4 pagemaps: 4
 *              bios, what fgds_vmbench's fgds-vec rows do)
 *   across     one pread of the size into one registration, from half the
 *              size before the boundary of its two 2 MiB units to half
 *              after (one pagemap: as many commands as plain)
 *
 *   fgds_vecsplit FILE     (FILE on the NVMe, e.g. $FGDS_EXT4/vecsplit.bin)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fgds_util.h"

#define MiB (1024UL * 1024)
#define FILE_LEN (64 * MiB)
#define REPS 256

/* Reads completed by the file's block device (the partition's own counter). */
static long reads_done(dev_t dev)
{
	char p[64];
	long v = -1;
	FILE *f;

	snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/stat", major(dev), minor(dev));
	f = fopen(p, "r");
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 64 * 1024, MiB };
	const char *path = argc > 1 ? argv[1] : "/mnt/ext4/vecsplit.bin";
	struct fgds_buf one, seg[4];
	struct fgds_vfio v;
	struct stat st;
	const char *why;
	void *host;
	int fd, file;

	fd = open(FGDS_NODE, O_RDWR | O_CLOEXEC);
	if (fd < 0 || fgds_vfio_open(&v, &why)) {
		fprintf(stderr, "fgds_vecsplit: needs " FGDS_NODE " and the vfio stand-in\n");
		return 1;
	}
	/* one registration of 4 MiB (two units, one pagemap), four of 2 MiB of their own */
	if (fgds_buf_get(fd, &v, 0, 4 * MiB, &one))
		return 1;
	for (int k = 0; k < 4; k++)
		if (fgds_buf_get(fd, &v, (8 + 4 * k) * MiB, 2 * MiB, &seg[k]))
			return 1;
	if (posix_memalign(&host, 4096, FILE_LEN))
		return 1;
	memset(host, 0x5a, FILE_LEN);
	file = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
	if (file < 0 || pwrite(file, host, FILE_LEN, 0) != (ssize_t)FILE_LEN || fsync(file) ||
	    fstat(file, &st)) {
		fprintf(stderr, "fgds_vecsplit: %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (reads_done(st.st_dev) < 0) {
		fprintf(stderr, "fgds_vecsplit: no /sys/dev/block/%u:%u/stat\n", major(st.st_dev),
			minor(st.st_dev));
		return 1;
	}
	printf("device reads per request, %d requests each (%s):\n", REPS, path);
	printf("  %-8s %8s %8s %8s %8s\n", "request", "plain", "1-chunk", "4-regs", "across");
	for (unsigned int i = 0; i < 2; i++) {
		size_t bs = sizes[i], q = bs / 4;
		struct iovec in1[4], in4[4];
		double per[4];

		for (int k = 0; k < 4; k++) {
			in1[k] = (struct iovec){ one.p + k * q, q };
			in4[k] = (struct iovec){ seg[k].p, q };
		}
		for (int mode = 0; mode < 4; mode++) {
			long r0 = reads_done(st.st_dev);

			for (int n = 0; n < REPS; n++) {
				off_t off = (off_t)((n * 7919UL * bs) % (FILE_LEN - bs)) & ~4095L;
				ssize_t got;

				if (mode == 0)
					got = pread(file, one.p, bs, off);
				else if (mode == 3)
					got = pread(file, one.p + 2 * MiB - bs / 2, bs, off);
				else
					got = preadv(file, mode == 1 ? in1 : in4, 4, off);

				if (got != (ssize_t)bs) {
					fprintf(stderr, "fgds_vecsplit: read %zd of %zu: %s\n",
						got, bs, strerror(errno));
					return 1;
				}
			}
			per[mode] = (double)(reads_done(st.st_dev) - r0) / REPS;
		}
		printf("  %-8zu %8.2f %8.2f %8.2f %8.2f\n", bs, per[0], per[1], per[2], per[3]);
	}
	for (int k = 0; k < 4; k++)
		fgds_buf_put(fd, &seg[k]);
	fgds_buf_put(fd, &one);
	close(file);
	unlink(path);
	return 0;
}
