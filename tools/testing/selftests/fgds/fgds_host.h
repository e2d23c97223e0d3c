/* SPDX-License-Identifier: GPL-2.0 */
/*
 * In-guest side of the host checks: ask the host (tools/testing/fgds-vm/
 * barcheck.c, serving /fgds/out) to compare a range of the GPU stand-in's
 * BAR file with a pattern stream, or to fill it with one.
 */
#ifndef FGDS_HOST_H
#define FGDS_HOST_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>

#define FGDS_HOST_DIR "/fgds/out"
/* The second stand-in's BAR (FGDS_GPU2_BDF) */
#define FGDS_HOST2_DIR "/fgds/out/bar2"

/*
 * Asks the checker serving @dir. Returns 0 when the host answered "ok";
 * otherwise -1 with the host's answer (or the local error) in @ans.
 */
static inline int fgds_host_req_at(const char *dir, const char *op, __u64 seed,
				   __u64 bar_off, __u64 len, __u64 pos, char *ans,
				   size_t ans_len)
{
	static unsigned int seq;
	char name[64], tmp[160], req[160], resp[160];
	struct timespec start, now;
	FILE *f;

	snprintf(name, sizeof(name), "%d-%u", getpid(), seq++);
	snprintf(tmp, sizeof(tmp), "%s/req/%s~", dir, name);
	snprintf(req, sizeof(req), "%s/req/%s", dir, name);
	snprintf(resp, sizeof(resp), "%s/resp/%s", dir, name);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%s %llu %llu %llu %llu\n", op, (unsigned long long)seed,
			  (unsigned long long)bar_off, (unsigned long long)len,
			  (unsigned long long)pos) < 0 || fclose(f) || rename(tmp, req)) {
		snprintf(ans, ans_len, "cannot write request %s: %s", req, strerror(errno));
		return -1;
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		f = fopen(resp, "r");
		if (f) {
			if (!fgets(ans, ans_len, f))
				snprintf(ans, ans_len, "empty answer");
			fclose(f);
			unlink(resp);
			ans[strcspn(ans, "\n")] = 0;
			return strcmp(ans, "ok") ? -1 : 0;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 120) {
			snprintf(ans, ans_len, "no answer from the host checker in 120 s");
			return -1;
		}
		usleep(10000);
	}
}

/* fgds_host_req_at(), saying on stderr what the host answered when it was not "ok". */
static inline int fgds_host_at(const char *dir, const char *op, __u64 seed, __u64 bar_off,
			       __u64 len, __u64 pos)
{
	char ans[200];
	int ret = fgds_host_req_at(dir, op, seed, bar_off, len, pos, ans, sizeof(ans));

	if (ret)
		fprintf(stderr, "# host %s at %#llx+%#llx: %s\n", op, (unsigned long long)bar_off,
			(unsigned long long)len, ans);
	return ret;
}

/* The first stand-in's BAR (FGDS_GPU_BDF). */
static inline int fgds_host_req(const char *op, __u64 seed, __u64 bar_off, __u64 len,
				__u64 pos, char *ans, size_t ans_len)
{
	return fgds_host_req_at(FGDS_HOST_DIR, op, seed, bar_off, len, pos, ans, ans_len);
}

#endif /* FGDS_HOST_H */
