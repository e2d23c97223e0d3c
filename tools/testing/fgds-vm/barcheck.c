// SPDX-License-Identifier: GPL-2.0
/*
 * Host side of the GPU stand-in: reads and writes the ivshmem BAR's backing
 * file while the guest runs, on the guest's request, so that data tests are
 * verified from outside the guest.
 *
 *   barcheck BARFILE check SEED BAROFF LEN POS   compare the BAR with the stream
 *   barcheck BARFILE fill  SEED BAROFF LEN POS   write the stream into the BAR
 *   barcheck BARFILE serve DIR                   answer DIR/req/N with DIR/resp/N
 *
 * A request file holds one line "check|fill SEED BAROFF LEN POS"; the answer
 * is "ok" or "mismatch at BAROFF+X: got 0xAA want 0xBB" or "error: ...".
 * serve returns when DIR/stop exists.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../selftests/fgds/fgds_pattern.h"

static unsigned char *bar;
static uint64_t bar_size;

static int do_op(const char *op, uint64_t seed, uint64_t off, uint64_t len, uint64_t pos,
		 char *ans, size_t ans_len)
{
	if (off > bar_size || len > bar_size - off) {
		snprintf(ans, ans_len, "error: range %#" PRIx64 "+%#" PRIx64 " outside the %#" PRIx64 "-byte BAR",
			 off, len, bar_size);
		return 1;
	}
	if (!strcmp(op, "fill")) {
		fgds_pattern_fill(bar + off, len, seed, pos);
		if (msync(bar + (off & ~4095ULL), len + (off & 4095), MS_SYNC)) {
			snprintf(ans, ans_len, "error: msync: %s", strerror(errno));
			return 1;
		}
		snprintf(ans, ans_len, "ok");
		return 0;
	}
	if (!strcmp(op, "check")) {
		long long bad = fgds_pattern_cmp(bar + off, len, seed, pos);
		unsigned char want;

		if (bad < 0) {
			snprintf(ans, ans_len, "ok");
			return 0;
		}
		fgds_pattern_fill(&want, 1, seed, pos + bad);
		snprintf(ans, ans_len, "mismatch at %#" PRIx64 "+%#llx: got %#x want %#x",
			 off, bad, bar[off + bad], want);
		return 1;
	}
	snprintf(ans, ans_len, "error: unknown operation '%s'", op);
	return 1;
}

static int serve(const char *dir)
{
	char path[4096], tmp[4096], line[200], ans[256], op[16];
	uint64_t seed, off, len, pos;

	for (;;) {
		DIR *d;
		struct dirent *e;

		snprintf(path, sizeof(path), "%s/stop", dir);
		if (!access(path, F_OK))
			return 0;
		snprintf(path, sizeof(path), "%s/req", dir);
		d = opendir(path);
		if (!d) {
			usleep(20000);
			continue;
		}
		while ((e = readdir(d))) {
			FILE *f;

			if (e->d_name[0] == '.' || strchr(e->d_name, '~'))
				continue;
			snprintf(path, sizeof(path), "%s/req/%s", dir, e->d_name);
			f = fopen(path, "r");
			if (!f)
				continue;
			if (!fgets(line, sizeof(line), f) ||
			    sscanf(line, "%15s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64,
				   op, &seed, &off, &len, &pos) != 5)
				snprintf(ans, sizeof(ans), "error: bad request '%s'", line);
			else
				do_op(op, seed, off, len, pos, ans, sizeof(ans));
			fclose(f);
			unlink(path);
			snprintf(tmp, sizeof(tmp), "%s/resp/%s~", dir, e->d_name);
			snprintf(path, sizeof(path), "%s/resp/%s", dir, e->d_name);
			f = fopen(tmp, "w");
			if (!f || fprintf(f, "%s\n", ans) < 0 || fclose(f) || rename(tmp, path)) {
				perror("barcheck: writing answer");
				return 1;
			}
		}
		closedir(d);
		usleep(20000);
	}
}

int main(int argc, char **argv)
{
	struct stat st;
	char ans[256];
	int fd, rc;

	if (argc < 3) {
		fprintf(stderr, "usage: %s BARFILE check|fill SEED BAROFF LEN POS | serve DIR\n",
			argv[0]);
		return 2;
	}
	fd = open(argv[1], O_RDWR);
	if (fd < 0 || fstat(fd, &st)) {
		fprintf(stderr, "barcheck: %s: %s\n", argv[1], strerror(errno));
		return 2;
	}
	bar_size = st.st_size;
	bar = mmap(NULL, bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (bar == MAP_FAILED) {
		fprintf(stderr, "barcheck: mmap %s: %s\n", argv[1], strerror(errno));
		return 2;
	}
	if (!strcmp(argv[2], "serve") && argc == 4)
		return serve(argv[3]);
	if (argc != 7) {
		fprintf(stderr, "barcheck: wrong number of arguments\n");
		return 2;
	}
	rc = do_op(argv[2], strtoull(argv[3], NULL, 0), strtoull(argv[4], NULL, 0),
		   strtoull(argv[5], NULL, 0), strtoull(argv[6], NULL, 0), ans, sizeof(ans));
	printf("%s\n", ans);
	return rc;
}
