// SPDX-License-Identifier: GPL-2.0
/*
 * Unregistered against registered GPU memory through libcufile.so.0 (issue
 * 28): the per-call time of cuFileRead of 64 KiB, 1 MiB and 16 MiB into
 * cuMemAlloc'd memory of the GPU stand-in's runtime, never registered
 * (KvikIO's, torch's and LMCache's way) and registered with
 * cuFileBufRegister, side by side in one run (the two alternate call by
 * call, same file, same offsets), with the REG_BUFFER calls the library
 * made during the timed calls (its own count, fgds_gpucache_counters) and
 * the route the unregistered ones took (staging pool or registration cache).
 *
 * Three runs, each in a process of its own (libcufile reads its settings
 * once): "default" (the library's defaults: staging below 1 MiB, the
 * registration cache from 1 MiB on), "staged" (FGDS_REG_CACHE_MIN=1T:
 * every request through the staging pool), which shows what the threshold
 * was chosen from, and "uncached" (no pool, no cache: a registration per
 * call, what the library did before, with a quarter of the calls).
 *
 *   cufile_unreg_bench [FILE [JSON]]
 *
 * FILE defaults to $FGDS_EXT4/unreg-bench.bin, JSON (one object per row,
 * one per line) to /fgds/out/unreg-bench.json. Prints TAP (one test: the
 * runs completed) with the table as comments.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cufile.h"
#include "fgds.h"
#include "gpurt.h"
#include "fgds_pattern.h"
#include "fgds_test.h"

#define SZ_1M (1024 * 1024UL)
#define FILE_SIZE (96 * SZ_1M)
#define MEM_SIZE (32 * SZ_1M)

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int run(const char *mode, const char *path, const char *json)
{
	static const struct { size_t size; int iters; } cases[] = {
		{ 64 * 1024, 300 }, { SZ_1M, 80 }, { 16 * SZ_1M, 12 },
	};
	CUdeviceptr reg, unreg;
	CUfileHandle_t fh;
	CUfileDescr_t d;
	CUcontext ctx;
	FILE *out;
	int fd;

	if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) ||
	    cuMemAlloc_v2(&reg, MEM_SIZE) || cuMemAlloc_v2(&unreg, MEM_SIZE)) {
		printf("# %s: no CUDA memory of the stand-in\n", mode);
		return 1;
	}
	if (cuFileDriverOpen().err ||
	    cuFileBufRegister((void *)(uintptr_t)reg, MEM_SIZE, 0).err) {
		printf("# %s: cuFileDriverOpen or cuFileBufRegister failed\n", mode);
		return 1;
	}
	fd = open(path, O_RDONLY | O_DIRECT);
	memset(&d, 0, sizeof(d));
	d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	d.handle.fd = fd;
	if (fd < 0 || cuFileHandleRegister(&fh, &d).err) {
		printf("# %s: cannot open %s\n", mode, path);
		return 1;
	}
	out = fopen(json, "a");
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t size = cases[c].size;
		/* a registration per call is slow (UNREG: tens of ms): fewer calls */
		int n = strcmp(mode, "uncached") ? cases[c].iters : (cases[c].iters + 3) / 4;
		int slots = (FILE_SIZE - size) / size;
		double *tr = calloc(n, sizeof(double)), *tu = calloc(n, sizeof(double));
		struct fgds_gpucache_counters c0, c1;
		double mr, mu;
		int bad = 0;

		/* the first unregistered call of a kind sets up: a staging buffer, a cached registration */
		bad |= cuFileRead(fh, (void *)(uintptr_t)reg, size, 0, 0) != (ssize_t)size;
		bad |= cuFileRead(fh, (void *)(uintptr_t)unreg, size, 0, 0) != (ssize_t)size;
		fgds_gpucache_counters(&c0);
		for (int i = 0; i < n; i++) {
			off_t fo = (off_t)((i * 7 + 1) % slots) * size;
			size_t mo = (i % 2) * (MEM_SIZE - size);
			double t0 = now_us();

			bad |= cuFileRead(fh, (void *)(uintptr_t)(reg + mo), size, fo, 0) !=
			       (ssize_t)size;
			tr[i] = now_us() - t0;
			t0 = now_us();
			bad |= cuFileRead(fh, (void *)(uintptr_t)(unreg + mo), size, fo, 0) !=
			       (ssize_t)size;
			tu[i] = now_us() - t0;
		}
		fgds_gpucache_counters(&c1);
		mr = median(tr, n);
		mu = median(tu, n);
		printf("# %-7s %6zu KiB  registered %9.1f us %7.1f MiB/s  unregistered %9.1f us %7.1f MiB/s  %.2fx  REG %llu in %d calls  (staged %llu, cached %llu)%s\n",
		       mode, size >> 10, mr, size / mr * 1e6 / SZ_1M, mu, size / mu * 1e6 / SZ_1M,
		       mr / mu, (unsigned long long)(c1.registrations - c0.registrations), 2 * n,
		       (unsigned long long)(c1.staged - c0.staged),
		       (unsigned long long)(c1.cached - c0.cached), bad ? "  FAILED READS" : "");
		if (out)
			fprintf(out, "{\"kconfig\": \"%s\", \"mode\": \"%s\", \"size\": %zu, \"calls\": %d, \"registered_us\": %.1f, \"unregistered_us\": %.1f, \"ratio\": %.3f, \"reg_buffer_calls\": %llu, \"staged\": %llu, \"cached\": %llu, \"ok\": %s}\n",
				getenv("FGDS_KCONFIG") ?: "?", mode, size, n, mr, mu, mr / mu,
				(unsigned long long)(c1.registrations - c0.registrations),
				(unsigned long long)(c1.staged - c0.staged),
				(unsigned long long)(c1.cached - c0.cached), bad ? "false" : "true");
		free(tr);
		free(tu);
		if (bad)
			return 1;
	}
	if (out)
		fclose(out);
	cuFileHandleDeregister(fh);
	close(fd);
	cuFileBufDeregister((void *)(uintptr_t)reg);
	return 0;
}

int main(int argc, char **argv)
{
	/* name, FGDS_REG_CACHE_MIN, FGDS_REG_CACHE_SIZE and FGDS_DEVICE_CACHE_SIZE */
	static const char *const modes[][3] = {
		{ "default", NULL, NULL }, { "staged", "1T", NULL }, { "uncached", NULL, "0" },
	};
	const char *ext4 = getenv("FGDS_EXT4"), *bdf = getenv("FGDS_GPU_BDF");
	char path[512], json[512];
	int failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "--run"))
		return run(argv[2], argv[3], argv[4]);
	printf("1..1\n");
	if (!bdf || (!ext4 && argc < 2)) {
		printf("ok 1 # SKIP FGDS_EXT4 or FGDS_GPU_BDF not set: run in the fgds VM\n");
		return 0;
	}
	snprintf(path, sizeof(path), "%s", argc > 1 ? argv[1] : "");
	if (argc < 2)
		snprintf(path, sizeof(path), "%s/unreg-bench.bin", ext4);
	snprintf(json, sizeof(json), "%s", argc > 2 ? argv[2] : "/fgds/out/unreg-bench.json");
	setenv("FGDS_GPURT_DEVICES", bdf, 1);
	if (fgds_put_file(path, FILE_SIZE, 0x5b)) {
		printf("not ok 1 cannot write %s\n", path);
		return 1;
	}
	unlink(json);
	printf("# cuFileRead per call (median), unregistered vs registered CUDA memory of the stand-in\n");
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		pid_t pid = fork();
		int st = 0;

		if (pid == 0) {
			if (modes[m][1])
				setenv("FGDS_REG_CACHE_MIN", modes[m][1], 1);
			if (modes[m][2]) {
				setenv("FGDS_REG_CACHE_SIZE", modes[m][2], 1);
				setenv("FGDS_DEVICE_CACHE_SIZE", modes[m][2], 1);
			}
			execl("/proc/self/exe", argv[0], "--run", modes[m][0], path, json,
			      (char *)NULL);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			failed = 1;
	}
	unlink(path);
	printf("%s 1 unregistered vs registered reads\n", failed ? "not ok" : "ok");
	return failed;
}
