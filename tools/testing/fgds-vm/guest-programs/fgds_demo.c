// SPDX-License-Identifier: GPL-2.0
/*
 * The main job's guest program: write a 64 MiB file on ext4, export 64 MiB
 * of the GPU stand-in's VRAM as a dma-buf (vfio-pci), run the sample
 * samples/fgds/fgds-read on it, and have the host verify every byte of VRAM
 * against the file's content.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fgds_host.h"
#include "fgds_pattern.h"
#include "fgds_vfio.h"

#define LEN (64UL << 20)
#define BAR_OFF (64UL << 20)
#define SEED 0xdec0de

int main(void)
{
	const char *dir = getenv("FGDS_EXT4") ?: "/tmp";
	char path[256], fdstr[16], ans[256];
	struct fgds_vfio v;
	const char *why;
	void *buf;
	int fd, dmabuf, status;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/demo.bin", dir);
	if (posix_memalign(&buf, 4096, LEN))
		return 1;
	fgds_pattern_fill(buf, LEN, SEED, 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0 || write(fd, buf, LEN) != (ssize_t)LEN) {
		fprintf(stderr, "fgds-demo: writing %s: %s\n", path, strerror(errno));
		return 1;
	}
	close(fd);
	free(buf);
	printf("fgds-demo: wrote %lu MiB to %s\n", LEN >> 20, path);

	if (fgds_vfio_open(&v, &why)) {
		fprintf(stderr, "fgds-demo: vfio: %s\n", why);
		return 1;
	}
	dmabuf = fgds_vfio_dmabuf(&v, BAR_OFF, LEN);
	if (dmabuf < 0) {
		fprintf(stderr, "fgds-demo: dma-buf export: %s\n", strerror(-dmabuf));
		return 1;
	}
	fcntl(dmabuf, F_SETFD, 0);
	printf("fgds-demo: vfio-pci exported VRAM %#lx+%lu MiB as dma-buf fd %d\n", BAR_OFF,
	       LEN >> 20, dmabuf);
	fgds_host_req("fill", 0, BAR_OFF, LEN, 0, ans, sizeof(ans));	/* not the file's bytes */

	snprintf(fdstr, sizeof(fdstr), "%d", dmabuf);
	pid = fork();
	if (!pid) {
		execl("./fgds-read", "fgds-read", "/dev/fgds0", fdstr, path, (char *)NULL);
		perror("fgds-demo: exec fgds-read");
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "fgds-demo: fgds-read failed\n");
		return 1;
	}
	if (fgds_host_req("check", SEED, BAR_OFF, LEN, 0, ans, sizeof(ans))) {
		printf("fgds-demo: FAILED: host check of VRAM: %s\n", ans);
		return 1;
	}
	printf("fgds-demo: verified from the host: all %lu bytes in the BAR file match the file\n",
	       LEN);
	return 0;
}
