// SPDX-License-Identifier: GPL-2.0
/*
 * fgds-read: read a file into GPU memory with plain O_DIRECT pread(2).
 *
 *   fgds-read NODE DMABUF_FD FILE [SIZE]
 *
 * NODE is /dev/fgdsN of the GPU, DMABUF_FD an open dma-buf of GPU memory
 * (exported by the GPU's driver, e.g. cuMemGetHandleForAddressRange(), or by
 * vfio-pci), FILE a file on storage that can do P2P DMA. Reads SIZE bytes
 * (default: the dma-buf's size, rounded down to pages) from the start of FILE
 * into the start of the buffer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/fgds.h>

int main(int argc, char **argv)
{
	struct fgds_reg_buffer reg = { 0 };
	struct fgds_unreg_buffer unreg = { 0 };
	ssize_t n, done = 0;
	int node, file;
	void *gpu;
	off_t size;

	if (argc < 4) {
		fprintf(stderr, "usage: %s NODE DMABUF_FD FILE [SIZE]\n", argv[0]);
		return 2;
	}
	reg.dmabuf_fd = atoi(argv[2]);
	size = argc > 4 ? strtoll(argv[4], NULL, 0) : lseek(reg.dmabuf_fd, 0, SEEK_END);
	if (size <= 0) {
		fprintf(stderr, "fgds-read: cannot tell the size of dma-buf fd %d\n",
			reg.dmabuf_fd);
		return 1;
	}
	reg.size = size & ~4095LL;

	node = open(argv[1], O_RDWR | O_CLOEXEC);
	if (node < 0) {
		fprintf(stderr, "fgds-read: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	/* 1. register the GPU buffer: its BAR pages become P2PDMA pages */
	if (ioctl(node, FGDS_IOCTL_REG_BUFFER, &reg)) {
		fprintf(stderr, "fgds-read: FGDS_IOCTL_REG_BUFFER: %s\n", strerror(errno));
		return 1;
	}
	/* 2. map them */
	gpu = mmap(NULL, reg.size, PROT_READ | PROT_WRITE, MAP_SHARED, node, reg.cookie);
	if (gpu == MAP_FAILED) {
		fprintf(stderr, "fgds-read: mmap: %s\n", strerror(errno));
		return 1;
	}
	/* 3. plain O_DIRECT reads: the NVMe writes straight into GPU memory */
	file = open(argv[3], O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (file < 0) {
		fprintf(stderr, "fgds-read: %s: %s\n", argv[3], strerror(errno));
		return 1;
	}
	while (done < (ssize_t)reg.size) {
		n = pread(file, (char *)gpu + done, reg.size - done, done);
		if (n < 0) {
			fprintf(stderr, "fgds-read: pread: %s%s\n", strerror(errno),
				errno == EREMOTEIO ?
				" (the storage cannot do P2P DMA to this GPU)" : "");
			return 1;
		}
		if (n == 0)
			break;
		done += n;
	}
	printf("fgds-read: %zd bytes of %s into GPU memory through %s\n", done, argv[3], argv[1]);

	/* 4. release: UNREG waits until no DMA into the buffer is in flight */
	munmap(gpu, reg.size);
	unreg.cookie = reg.cookie;
	if (ioctl(node, FGDS_IOCTL_UNREG_BUFFER, &unreg)) {
		fprintf(stderr, "fgds-read: FGDS_IOCTL_UNREG_BUFFER: %s\n", strerror(errno));
		return 1;
	}
	close(file);
	close(node);
	return 0;
}
