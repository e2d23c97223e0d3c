// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * A cuFile program: written against cuFile's API (cufile.h) and nothing
 * of fgds, run by tests/c_program.rs on fgds's libcufile.so.0 with host
 * memory (no GPU here), every byte checked.
 *
 *   cufile_test DIR main    reads, writes, batches, stream API, errors
 *   cufile_test DIR strict  FGDS_STRICT=1 without an fgds node: every call fails
 *   cufile_test DIR json    CUFILE_ENV_PATH_JSON with compat forced, batch size 4
 *   cufile_test DIR params  the parameter API: staged before open, applied, then refused
 *   cufile_test DIR stats   the statistics: levels, counters, start/stop/reset
 *
 * Prints "ok N checks" and exits 0, or names the failed check and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cufile.h"

static int checks;

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		checks++;                                                   \
		if (!(cond)) {                                              \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, \
				#cond);                                     \
			fprintf(stderr, __VA_ARGS__);                       \
			fprintf(stderr, "\n");                              \
			exit(1);                                            \
		}                                                           \
	} while (0)

#define MiB (1UL << 20)
#define FILE_SIZE (8 * MiB)

static unsigned char pattern(size_t off, unsigned seed)
{
	size_t x = off * 2654435761u + seed;

	return (unsigned char)(x ^ (x >> 13) ^ (x >> 24));
}

static void fill(unsigned char *p, size_t n, size_t file_off, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(file_off + i, seed);
}

/* Every byte of p equals the pattern of the file at file_off. */
static void expect(const unsigned char *p, size_t n, size_t file_off,
		   unsigned seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		CHECK(p[i] == pattern(file_off + i, seed),
		      "%s: byte %zu (file offset %zu) is %#x, want %#x", what,
		      i, file_off + i, p[i], pattern(file_off + i, seed));
}

static void *xalloc(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, n))
		exit(2);
	memset(p, 0, n);
	return p;
}

static CUfileHandle_t reg_fd(int fd)
{
	CUfileDescr_t d;
	CUfileHandle_t fh = NULL;
	CUfileError_t st;

	memset(&d, 0, sizeof(d));
	d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	d.handle.fd = fd;
	st = cuFileHandleRegister(&fh, &d);
	CHECK(st.err == CU_FILE_SUCCESS, "cuFileHandleRegister: %d", st.err);
	return fh;
}

static int no_fgds_node(void)
{
	return access("/sys/class/misc/fgds0", F_OK) != 0;
}

static void test_main(const char *dir)
{
	char path[4096], ro_path[4096];
	CUfileDrvProps_t props;
	CUfileError_t st;
	int version = 0, fd, rofd;
	CUfileHandle_t fh, rofh;
	unsigned char *a = xalloc(FILE_SIZE), *b = xalloc(FILE_SIZE);
	ssize_t n;

	st = cuFileGetVersion(&version);
	CHECK(st.err == CU_FILE_SUCCESS && version >= 1000, "version %d", version);
	CHECK(cuFileGetVersion(NULL).err == CU_FILE_INVALID_VALUE, "NULL version");
	st = cuFileDriverOpen();
	CHECK(st.err == CU_FILE_SUCCESS, "cuFileDriverOpen: %d", st.err);
	CHECK(cuFileUseCount() == 1, "use count %ld", cuFileUseCount());
	st = cuFileDriverGetProperties(&props);
	CHECK(st.err == CU_FILE_SUCCESS, "cuFileDriverGetProperties: %d", st.err);
	CHECK(props.fflags & (1U << CU_FILE_BATCH_IO_SUPPORTED), "fflags %#x", props.fflags);
	CHECK(props.nvfs.dcontrolflags & (1U << CU_FILE_ALLOW_COMPAT_MODE),
	      "compat mode allowed by default: %#x", props.nvfs.dcontrolflags);
	CHECK(props.max_batch_io_size == 128, "max batch %u", props.max_batch_io_size);
	CHECK(props.nvfs.max_direct_io_size == 1024, "max direct I/O %zu KiB",
	      props.nvfs.max_direct_io_size);
	if (no_fgds_node()) {
		CHECK(props.nvfs.dcontrolflags & (1U << CU_FILE_POSIX_IO_MODE),
		      "no fgds node: POSIX mode: %#x", props.nvfs.dcontrolflags);
		CHECK(!(props.fflags & (1U << CU_FILE_P2P_SUPPORTED)), "no P2P");
	}
	CHECK(!(props.nvfs.dcontrolflags & (1U << CU_FILE_FALLBACK_IO_MODE)),
	      "nothing bounced yet");

	snprintf(path, sizeof(path), "%s/data.bin", dir);
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	fh = reg_fd(fd);

	/* Registration errors. */
	CHECK(cuFileBufRegister(a, FILE_SIZE, 0).err == CU_FILE_SUCCESS, "register a");
	CHECK(cuFileBufRegister(a, FILE_SIZE, 0).err == CU_FILE_MEMORY_ALREADY_REGISTERED,
	      "register a twice");
	CHECK(cuFileBufRegister(a + MiB, 4096, 0).err == CU_FILE_MEMORY_ALREADY_REGISTERED,
	      "register inside a");
	CHECK(cuFileBufRegister(NULL, 4096, 0).err == CU_FILE_INVALID_VALUE, "register NULL");
	CHECK(cuFileBufRegister(b, 0, 0).err == CU_FILE_INVALID_VALUE, "register 0 bytes");
	CHECK(cuFileBufRegister(b, FILE_SIZE, 0).err == CU_FILE_SUCCESS, "register b");
	CHECK(cuFileBufDeregister(b + 4096).err == CU_FILE_INVALID_VALUE,
	      "deregister not a base");

	/* Whole file written from a, read back into b (aligned: O_DIRECT). */
	fill(a, FILE_SIZE, 0, 1);
	n = cuFileWrite(fh, a, FILE_SIZE, 0, 0);
	CHECK(n == (ssize_t)FILE_SIZE, "cuFileWrite: %zd", n);
	n = cuFileRead(fh, b, FILE_SIZE, 0, 0);
	CHECK(n == (ssize_t)FILE_SIZE, "cuFileRead: %zd", n);
	expect(b, FILE_SIZE, 0, 1, "aligned read");

	/* bufPtr_offset: 1 MiB at file offset 3 MiB into b + 64 KiB. */
	memset(b, 0, FILE_SIZE);
	n = cuFileRead(fh, b, MiB, 3 * MiB, 64 << 10);
	CHECK(n == (ssize_t)MiB, "read at buffer offset: %zd", n);
	expect(b + (64 << 10), MiB, 3 * MiB, 1, "buffer offset read");
	CHECK(b[(64 << 10) - 1] == 0 && b[(64 << 10) + MiB] == 0, "nothing outside");

	/* Unaligned everything, into unregistered malloc'd memory. */
	{
		unsigned char *u = malloc(100003);

		CHECK(u != NULL, "malloc");
		n = cuFileRead(fh, u, 99991, 12345, 7);
		CHECK(n == 99991, "unaligned read: %zd", n);
		expect(u + 7, 99991, 12345, 1, "unaligned read");
		/* Unaligned write of a new pattern, read back aligned. */
		fill(u + 3, 50001, 777777, 9);
		n = cuFileWrite(fh, u, 50001, 777777, 3);
		CHECK(n == 50001, "unaligned write: %zd", n);
		n = cuFileRead(fh, b, MiB, 0, 0);
		CHECK(n == (ssize_t)MiB, "read back: %zd", n);
		expect(b + 777777, 50001, 777777, 9, "unaligned write");
		expect(b, 777777, 0, 1, "before the unaligned write");
		expect(b + 777777 + 50001, MiB - 777777 - 50001, 777777 + 50001, 1,
		       "after the unaligned write");
		free(u);
		/* Put the first pattern back. */
		CHECK(cuFileWrite(fh, a, MiB, 0, 0) == (ssize_t)MiB, "restore");
	}
	st = cuFileDriverGetProperties(&props);
	CHECK(props.nvfs.dcontrolflags & (1U << CU_FILE_FALLBACK_IO_MODE),
	      "the unaligned edges bounced, the properties say so: %#x",
	      props.nvfs.dcontrolflags);

	/* Short read at the end of the file; read at the end: 0. */
	n = cuFileRead(fh, b, MiB, FILE_SIZE - 4096, 0);
	CHECK(n == 4096, "short read at EOF: %zd", n);
	expect(b, 4096, FILE_SIZE - 4096, 1, "short read");
	CHECK(cuFileRead(fh, b, MiB, FILE_SIZE, 0) == 0, "read at EOF");
	CHECK(cuFileRead(fh, b, 0, 0, 0) == 0, "0 bytes");

	/* I/O errors. */
	n = cuFileRead(fh, b, MiB, 0, FILE_SIZE);
	CHECK(n < 0 && IS_CUFILE_ERR((int)n), "past the registered buffer: %zd", n);
	n = cuFileRead(fh, b, MiB, -4096, 0);
	CHECK(n == -CU_FILE_INVALID_VALUE, "negative file offset: %zd", n);
	n = cuFileRead((CUfileHandle_t)(uintptr_t)0xdead0, b, MiB, 0, 0);
	CHECK(n == -CU_FILE_HANDLE_NOT_REGISTERED, "bad handle: %zd", n);
	snprintf(ro_path, sizeof(ro_path), "%s/data.bin", dir);
	rofd = open(ro_path, O_RDONLY);
	CHECK(rofd >= 0, "open read-only");
	rofh = reg_fd(rofd);
	errno = 0;
	n = cuFileWrite(rofh, a, MiB, 0, 0);
	CHECK(n == -1 && errno == EBADF, "write through O_RDONLY: %zd errno %d", n, errno);
	n = cuFileRead(rofh, b, MiB, 2 * MiB, 0);
	CHECK(n == (ssize_t)MiB, "read-only handle reads: %zd", n);
	expect(b, MiB, 2 * MiB, 1, "read-only handle");
	cuFileHandleDeregister(rofh);
	close(rofd);
	n = cuFileRead(rofh, b, MiB, 0, 0);
	CHECK(n == -CU_FILE_HANDLE_NOT_REGISTERED, "deregistered handle: %zd", n);

	/* Handle registration errors. */
	{
		CUfileDescr_t d;
		CUfileHandle_t h = NULL;

		memset(&d, 0, sizeof(d));
		CHECK(cuFileHandleRegister(&h, NULL).err == CU_FILE_INVALID_VALUE, "NULL descr");
		d.type = CU_FILE_HANDLE_TYPE_OPAQUE_WIN32;
		CHECK(cuFileHandleRegister(&h, &d).err == CU_FILE_INVALID_FILE_TYPE, "win32");
		d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
		d.handle.fd = 1 << 20;
		CHECK(cuFileHandleRegister(&h, &d).err == CU_FILE_INVALID_VALUE, "bad fd");
	}

	/* A batch of 16 reads of 256 KiB, scattered, into b. */
	{
		CUfileBatchHandle_t bh;
		CUfileIOParams_t io[16];
		CUfileIOEvents_t ev[16];
		unsigned done = 0, seen = 0;
		struct timespec ts = { 5, 0 };

		CHECK(cuFileBatchIOSetUp(&bh, 0).err == CU_FILE_INVALID_VALUE, "batch of 0");
		CHECK(cuFileBatchIOSetUp(&bh, 129).err == CU_FILE_INVALID_VALUE, "batch of 129");
		CHECK(cuFileBatchIOSetUp(&bh, 16).err == CU_FILE_SUCCESS, "batch set-up");
		memset(b, 0, FILE_SIZE);
		memset(io, 0, sizeof(io));
		for (int i = 0; i < 16; i++) {
			io[i].mode = CUFILE_BATCH;
			io[i].fh = fh;
			io[i].opcode = CUFILE_READ;
			io[i].u.batch.devPtr_base = b;
			io[i].u.batch.devPtr_offset = (off_t)i * (256 << 10);
			io[i].u.batch.file_offset = (off_t)((i * 7) % 16) * (512 << 10);
			io[i].u.batch.size = 256 << 10;
			io[i].cookie = (void *)(uintptr_t)(1000 + i);
		}
		st = cuFileBatchIOSubmit(bh, 16, io, 0);
		CHECK(st.err == CU_FILE_SUCCESS, "submit: %d", st.err);
		st = cuFileBatchIOSubmit(bh, 1, io, 0);
		CHECK(st.err == CU_FILE_BATCH_FULL, "17th in a batch of 16: %d", st.err);
		{
			unsigned nr = 1;

			st = cuFileBatchIOGetStatus(bh, 2, &nr, ev, &ts);
			CHECK(st.err == CU_FILE_INVALID_VALUE, "min_nr > nr: %d", st.err);
		}
		while (done < 16) {
			unsigned nr = 3;	/* fewer than are done: the rest stays */

			st = cuFileBatchIOGetStatus(bh, 1, &nr, ev, &ts);
			CHECK(st.err == CU_FILE_SUCCESS && nr >= 1 && nr <= 3,
			      "get status: %d nr %u", st.err, nr);
			for (unsigned k = 0; k < nr; k++) {
				int i = (int)((uintptr_t)ev[k].cookie - 1000);

				CHECK(i >= 0 && i < 16 && !(seen & (1U << i)), "cookie %d", i);
				seen |= 1U << i;
				CHECK(ev[k].status == CUFILE_COMPLETE && ev[k].ret == (256 << 10),
				      "event %d: status %#x ret %zd", i, ev[k].status,
				      (ssize_t)ev[k].ret);
			}
			done += nr;
		}
		for (int i = 0; i < 16; i++)
			expect(b + (size_t)i * (256 << 10), 256 << 10,
			       (size_t)((i * 7) % 16) * (512 << 10), 1, "batch read");

		/* A batch of writes (new pattern, 4 x 1 MiB from a), and a bad one. */
		fill(a, 4 * MiB, 4 * MiB, 5);
		for (int i = 0; i < 4; i++) {
			io[i].opcode = CUFILE_WRITE;
			io[i].u.batch.devPtr_base = a;
			io[i].u.batch.devPtr_offset = (off_t)i * MiB;
			io[i].u.batch.file_offset = (off_t)(4 + i) * MiB;
			io[i].u.batch.size = MiB;
		}
		io[4] = io[0];
		io[4].mode = 0;
		CHECK(cuFileBatchIOSubmit(bh, 5, io, 0).err == CU_FILE_INVALID_VALUE,
		      "bad mode: nothing submitted");
		io[4].mode = CUFILE_BATCH;
		io[4].opcode = 7;
		CHECK(cuFileBatchIOSubmit(bh, 5, io, 0).err == CU_FILE_INVALID_VALUE, "bad opcode");
		CHECK(cuFileBatchIOSubmit(bh, 4, io, 0).err == CU_FILE_SUCCESS, "submit writes");
		for (done = 0; done < 4;) {
			unsigned nr = 4;

			st = cuFileBatchIOGetStatus(bh, 4 - done, &nr, ev, NULL);
			CHECK(st.err == CU_FILE_SUCCESS, "get status: %d", st.err);
			for (unsigned k = 0; k < nr; k++)
				CHECK(ev[k].status == CUFILE_COMPLETE && ev[k].ret == MiB,
				      "write event: %#x %zd", ev[k].status, (ssize_t)ev[k].ret);
			done += nr;
		}
		CHECK(cuFileRead(fh, b, FILE_SIZE, 0, 0) == (ssize_t)FILE_SIZE, "read back");
		expect(b, 4 * MiB, 0, 1, "untouched by the batch writes");
		expect(b + 4 * MiB, 4 * MiB, 4 * MiB, 5, "batch writes");

		/* A failing request: a read into memory past a registered buffer. */
		io[0].opcode = CUFILE_READ;
		io[0].u.batch.devPtr_base = b;
		io[0].u.batch.devPtr_offset = FILE_SIZE - 4096;
		io[0].u.batch.file_offset = 0;
		io[0].u.batch.size = MiB;
		st = cuFileBatchIOSubmit(bh, 1, io, 0);
		if (st.err == CU_FILE_SUCCESS) {
			unsigned nr = 1;

			st = cuFileBatchIOGetStatus(bh, 1, &nr, ev, &ts);
			CHECK(st.err == CU_FILE_SUCCESS && nr == 1 && ev[0].status == CUFILE_FAILED,
			      "out of the buffer: %#x", ev[0].status);
		} else {
			CHECK(st.err == CU_FILE_INVALID_MAPPING_RANGE, "out of the buffer: %d", st.err);
		}
		CHECK(cuFileBatchIOCancel(bh).err == CU_FILE_SUCCESS, "cancel");
		cuFileBatchIODestroy(bh);
		CHECK(cuFileBatchIOCancel(bh).err == CU_FILE_INVALID_VALUE, "destroyed batch");
	}

	/* Stream API on the default stream (no CUDA here: runs in order at once). */
	{
		size_t size = 2 * MiB;
		off_t foff = 4 * MiB, boff = 4096;
		ssize_t got = -12345;

		CHECK(cuFileStreamRegister(NULL, 15).err == CU_FILE_SUCCESS, "stream register");
		memset(b, 0, FILE_SIZE);
		st = cuFileReadAsync(fh, b, &size, &foff, &boff, &got, NULL);
		CHECK(st.err == CU_FILE_SUCCESS || st.err == CU_FILE_ASYNC_NOT_SUPPORTED,
		      "cuFileReadAsync: %d", st.err);
		if (st.err == CU_FILE_SUCCESS) {
			CHECK(got == (ssize_t)size, "async read: %zd", got);
			expect(b + 4096, size, 4 * MiB, 5, "async read");
			fill(a, MiB, 0, 3);
			size = MiB;
			foff = 0;
			boff = 0;
			st = cuFileWriteAsync(fh, a, &size, &foff, &boff, &got, NULL);
			CHECK(st.err == CU_FILE_SUCCESS && got == (ssize_t)MiB, "async write");
			CHECK(cuFileRead(fh, b, MiB, 0, 0) == (ssize_t)MiB, "read back");
			expect(b, MiB, 0, 3, "async write");
		}
		st = cuFileReadAsync(fh, b, NULL, &foff, &boff, &got, NULL);
		CHECK(st.err == CU_FILE_INVALID_VALUE, "NULL size pointer: %d", st.err);
		CHECK(cuFileStreamDeregister(NULL).err == CU_FILE_SUCCESS, "stream deregister");
	}

	CHECK(cuFileBufDeregister(a).err == CU_FILE_SUCCESS, "deregister a");
	CHECK(cuFileBufDeregister(a).err == CU_FILE_INVALID_VALUE, "deregister a twice");
	CHECK(cuFileBufDeregister(b).err == CU_FILE_SUCCESS, "deregister b");

	/* The last close drops what the library keeps of its own (registration
	 * cache, staging pools, copy streams); a handle and a buffer registered
	 * stay valid through it, and opening again works as the first time. */
	CHECK(cuFileBufRegister(b, MiB, 0).err == CU_FILE_SUCCESS, "register b again");
	CHECK(cuFileDriverClose().err == CU_FILE_SUCCESS, "last close");
	CHECK(cuFileUseCount() == 0, "use count %ld", cuFileUseCount());
	CHECK(cuFileRead(fh, b, MiB, 0, 0) == (ssize_t)MiB, "read after the last close");
	CHECK(cuFileDriverOpen().err == CU_FILE_SUCCESS, "open again");
	CHECK(cuFileRead(fh, b, MiB, 0, 0) == (ssize_t)MiB, "read after opening again");
	CHECK(cuFileBufDeregister(b).err == CU_FILE_SUCCESS, "deregister b again");
	cuFileHandleDeregister(fh);
	close(fd);
	CHECK(cuFileDriverClose().err == CU_FILE_SUCCESS, "close");
	CHECK(cuFileDriverClose().err == CU_FILE_DRIVER_NOT_INITIALIZED, "close twice");
	free(a);
	free(b);
}

static void test_strict(const char *dir)
{
	char path[4096];
	CUfileDescr_t d;
	CUfileHandle_t fh = NULL;
	int fd;

	if (!no_fgds_node()) {
		printf("skip: an fgds node exists\n");
		return;
	}
	CHECK(cuFileDriverOpen().err == CU_FILE_DRIVER_NOT_INITIALIZED, "strict open");
	snprintf(path, sizeof(path), "%s/strict.bin", dir);
	fd = open(path, O_CREAT | O_RDWR, 0644);
	CHECK(fd >= 0, "open");
	memset(&d, 0, sizeof(d));
	d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	d.handle.fd = fd;
	CHECK(cuFileHandleRegister(&fh, &d).err == CU_FILE_DRIVER_NOT_INITIALIZED,
	      "strict handle register");
	CHECK(cuFileRead(fh, &d, 1, 0, 0) == -CU_FILE_DRIVER_NOT_INITIALIZED, "strict read");
	close(fd);
}

static void test_json(const char *dir)
{
	char path[4096];
	CUfileDrvProps_t props;
	CUfileBatchHandle_t bh;
	int fd;
	CUfileHandle_t fh;
	unsigned char *a = xalloc(MiB), *b = xalloc(MiB);

	CHECK(cuFileDriverOpen().err == CU_FILE_SUCCESS, "open");
	CHECK(cuFileDriverGetProperties(&props).err == CU_FILE_SUCCESS, "properties");
	CHECK(props.max_batch_io_size == 4, "io_batchsize: %u", props.max_batch_io_size);
	CHECK(props.nvfs.max_direct_io_size == 256, "max_direct_io_size_kb: %zu",
	      props.nvfs.max_direct_io_size);
	CHECK(cuFileBatchIOSetUp(&bh, 5).err == CU_FILE_INVALID_VALUE, "5 > io_batchsize");
	CHECK(cuFileBatchIOSetUp(&bh, 4).err == CU_FILE_SUCCESS, "4");
	cuFileBatchIODestroy(bh);
	snprintf(path, sizeof(path), "%s/json.bin", dir);
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
	CHECK(fd >= 0, "open");
	fh = reg_fd(fd);
	fill(a, MiB, 0, 4);
	CHECK(cuFileBufRegister(a, MiB, 0).err == CU_FILE_SUCCESS, "register");
	CHECK(cuFileWrite(fh, a, MiB, 0, 0) == (ssize_t)MiB, "write");
	CHECK(cuFileRead(fh, b, MiB, 0, 0) == (ssize_t)MiB, "read");
	expect(b, MiB, 0, 4, "forced compat mode");
	CHECK(cuFileDriverGetProperties(&props).err == CU_FILE_SUCCESS, "properties");
	CHECK(props.nvfs.dcontrolflags & (1U << CU_FILE_FALLBACK_IO_MODE),
	      "force_compat_mode: everything bounced: %#x", props.nvfs.dcontrolflags);
	cuFileHandleDeregister(fh);
	close(fd);
	free(a);
	free(b);
}


#define OK(call) CHECK((call).err == CU_FILE_SUCCESS, "%s", #call)
#define ERR(call, code) CHECK((call).err == (code), "%s: %d, want %d", #call, (call).err, code)

static void test_params(const char *dir)
{
	char path[4096], s[16];
	CUfileDrvProps_t props;
	size_t v = 0, lo = 1, hi = 0, sz[2] = { 1024, 2048 }, cnt[2] = { 1, 1 };
	bool b = false;
	int fd;
	CUfileHandle_t fh;
	unsigned char *a = xalloc(MiB);

	/* Before open: defaults, then staged values. */
	OK(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &v));
	CHECK(v == 128, "default io_batchsize %zu", v);
	OK(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, &v));
	CHECK(v == 1024, "default max_direct_io_size_kb %zu", v);
	OK(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 8));
	OK(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &v));
	CHECK(v == 8, "staged io_batchsize %zu", v);
	OK(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 256));
	/* A cap, as in cufile.json: 16 MiB leaves fgds's 1 MiB... */
	OK(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH, 128));
	OK(cuFileGetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH, &v));
	CHECK(v == 16, "queue depth 128 is a cap over 16: %zu", v);
	/* ...and a lower value lowers it (the last set wins). */
	OK(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH, 4));
	OK(cuFileGetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH, &v));
	CHECK(v == 4, "queue depth %zu", v);
	ERR(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH, 0),
	    CU_FILE_INVALID_VALUE);
	ERR(cuFileSetParameterSizeT(CUFILE_PARAM_PROFILE_STATS, 4), CU_FILE_INVALID_VALUE);
	ERR(cuFileSetParameterSizeT((CUFileSizeTConfigParameter_t)99, 1), CU_FILE_INVALID_VALUE);
	/* NVIDIA's range, 0..128: a cap on the threads one call runs on */
	OK(cuFileGetParameterMinMaxValue(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, &lo, &hi));
	CHECK(lo == 0 && hi == 128, "max_io_threads range %zu..%zu", lo, hi);
	OK(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, 4));
	OK(cuFileGetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, &v));
	CHECK(v == 4, "max_io_threads 4 caps the threads of a call: %zu", v);
	ERR(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, 129),
	    CU_FILE_INVALID_VALUE);
	ERR(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB, 4),
	    CU_FILE_PLATFORM_NOT_SUPPORTED);
	ERR(cuFileGetParameterSizeT(CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB, &v),
	    CU_FILE_PLATFORM_NOT_SUPPORTED);
	ERR(cuFileGetParameterSizeT(CUFILE_PARAM_PROFILE_STATS, NULL), CU_FILE_INVALID_VALUE);
	OK(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROFILE_STATS, &lo, &hi));
	CHECK(lo == 0 && hi == 3, "stats level range %zu..%zu", lo, hi);
	ERR(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROFILE_STATS, NULL, &hi),
	    CU_FILE_INVALID_VALUE);
	OK(cuFileSetParameterSizeT(CUFILE_PARAM_PROFILE_STATS, 3));

	OK(cuFileGetParameterBool(CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, &b));
	CHECK(b, "compat mode allowed by default");
	OK(cuFileGetParameterBool(CUFILE_PARAM_FORCE_COMPAT_MODE, &b));
	CHECK(!b, "compat mode not forced by default");
	OK(cuFileSetParameterBool(CUFILE_PARAM_FORCE_COMPAT_MODE, true));
	OK(cuFileGetParameterBool(CUFILE_PARAM_FORCE_COMPAT_MODE, &b));
	CHECK(b, "staged force_compat_mode");
	OK(cuFileGetParameterBool(CUFILE_PARAM_USE_PCIP2PDMA, &b));
	CHECK(b, "fgds is PCI P2PDMA");
	OK(cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY, true));
	ERR(cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY, false),
	    CU_FILE_PLATFORM_NOT_SUPPORTED);
	ERR(cuFileGetParameterBool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, &b),
	    CU_FILE_PLATFORM_NOT_SUPPORTED);
#if FGDS_CUFILE_VERSION >= 1190
	/* cuFile 1.19's: known, no such quantity in fgds */
	ERR(cuFileSetParameterBool(CUFILE_PARAM_GDS_FALLBACK_IO, true),
	    CU_FILE_PLATFORM_NOT_SUPPORTED);
	ERR(cuFileSetParameterString(CUFILE_PARAM_RDMA_TRANSPORT, "tcp"),
	    CU_FILE_PLATFORM_NOT_SUPPORTED);
#endif
	ERR(cuFileSetParameterBool((CUFileBoolConfigParameter_t)14, true), CU_FILE_INVALID_VALUE);
	ERR(cuFileSetParameterString((CUFileStringConfigParameter_t)4, "x"), CU_FILE_INVALID_VALUE);

	ERR(cuFileSetParameterString(CUFILE_PARAM_LOGGING_LEVEL, "loud"), CU_FILE_INVALID_VALUE);
	ERR(cuFileSetParameterString(CUFILE_PARAM_LOGGING_LEVEL, NULL), CU_FILE_INVALID_VALUE);
	ERR(cuFileSetParameterString(CUFILE_PARAM_LOG_DIR, "/tmp"), CU_FILE_PLATFORM_NOT_SUPPORTED);
	OK(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, s, sizeof(s)));
	CHECK(!strcmp(s, "WARN"), "default log level %s", s);
	OK(cuFileSetParameterString(CUFILE_PARAM_LOGGING_LEVEL, "error"));
	ERR(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, s, 3), CU_FILE_INVALID_VALUE);
	OK(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, s, sizeof(s)));
	CHECK(!strcmp(s, "ERROR"), "log level %s", s);

	ERR(cuFileSetParameterPosixPoolSlabArray(sz, cnt, 2), CU_FILE_PLATFORM_NOT_SUPPORTED);
	ERR(cuFileGetParameterGpuBounceBufferSlabArray(sz, cnt, 2), CU_FILE_PLATFORM_NOT_SUPPORTED);
	ERR(cuFileSetParameterGpuBounceBufferSlabArray(NULL, cnt, 2), CU_FILE_INVALID_VALUE);
	ERR(cuFileGetParameterPosixPoolSlabArray(sz, cnt, 0), CU_FILE_INVALID_VALUE);

	/* Open: the staged values are in force, and can no longer change. */
	OK(cuFileDriverOpen());
	OK(cuFileDriverGetProperties(&props));
	CHECK(props.max_batch_io_size == 8, "io_batchsize %u", props.max_batch_io_size);
	CHECK(props.nvfs.max_direct_io_size == 256, "max_direct_io_size %zu",
	      props.nvfs.max_direct_io_size);
	ERR(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 16),
	    CU_FILE_DRIVER_ALREADY_OPEN);
	ERR(cuFileSetParameterBool(CUFILE_PARAM_FORCE_COMPAT_MODE, false),
	    CU_FILE_DRIVER_ALREADY_OPEN);
	ERR(cuFileSetParameterString(CUFILE_PARAM_LOGGING_LEVEL, "DEBUG"),
	    CU_FILE_DRIVER_ALREADY_OPEN);
	OK(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &v));
	CHECK(v == 8, "io_batchsize in force %zu", v);
	OK(cuFileGetParameterSizeT(CUFILE_PARAM_PROFILE_STATS, &v));
	CHECK(v == 3, "stats level in force %zu", v);
	{
		CUfileBatchHandle_t bh;

		ERR(cuFileBatchIOSetUp(&bh, 9), CU_FILE_INVALID_VALUE);
	}
	snprintf(path, sizeof(path), "%s/params.bin", dir);
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
	CHECK(fd >= 0, "open");
	fh = reg_fd(fd);
	fill(a, MiB, 0, 7);
	CHECK(cuFileWrite(fh, a, MiB, 0, 0) == (ssize_t)MiB, "write");
	memset(a, 0, MiB);
	CHECK(cuFileRead(fh, a, MiB, 0, 0) == (ssize_t)MiB, "read");
	expect(a, MiB, 0, 7, "forced compat mode by parameter");
	OK(cuFileDriverGetProperties(&props));
	CHECK(props.nvfs.dcontrolflags & (1U << CU_FILE_FALLBACK_IO_MODE),
	      "force_compat_mode: everything bounced: %#x", props.nvfs.dcontrolflags);
	cuFileHandleDeregister(fh);
	close(fd);
	free(a);
}

/* The library writes no more than this header's struct of level n (the
 * layout of FGDS_CUFILE_VERSION, which the library must present too). */
static void stats_fit(int n)
{
	size_t size = n == 1 ? sizeof(CUfileStatsLevel1_t) : sizeof(CUfileStatsLevel2_t);
	unsigned char *raw = xalloc(size + 256);
	CUfileError_t st;

	memset(raw, 0x5a, size + 256);
	st = n == 1 ? cuFileGetStatsL1((CUfileStatsLevel1_t *)raw)
		    : cuFileGetStatsL2((CUfileStatsLevel2_t *)raw);
	CHECK(st.err == CU_FILE_SUCCESS, "cuFileGetStatsL%d: %d", n, st.err);
	for (size_t i = size; i < size + 256; i++)
		CHECK(raw[i] == 0x5a, "cuFileGetStatsL%d wrote byte %zu, past the %zu of "
		      "FGDS_CUFILE_VERSION %d's struct", n, i, size, FGDS_CUFILE_VERSION);
	free(raw);
}

static void get_l1(CUfileStatsLevel1_t *l1)
{
	memset(l1, 0xa5, sizeof(*l1));
	OK(cuFileGetStatsL1(l1));
}

static void test_stats(const char *dir)
{
	char path[4096];
	CUfileStatsLevel1_t l1;
	CUfileStatsLevel2_t l2;
	CUfileStatsLevel3_t *l3 = xalloc(sizeof(*l3));
	CUfileBatchHandle_t bh;
	CUfileIOParams_t io[2];
	CUfileIOEvents_t ev[2];
	unsigned int nr, got = 0;
	int fd, level = -1;
	CUfileHandle_t fh;
	unsigned char *a = xalloc(2 * MiB);

	/* cufile.json's "profile": { "cufile_stats": 2 } (set by the runner). */
	OK(cuFileGetStatsLevel(&level));
	CHECK(level == 2, "level from cufile.json %d", level);
	ERR(cuFileGetStatsL3(l3), CU_FILE_INVALID_VALUE);
	ERR(cuFileSetStatsLevel(4), CU_FILE_INVALID_VALUE);
	ERR(cuFileGetStatsLevel(NULL), CU_FILE_INVALID_VALUE);
	ERR(cuFileGetStatsL1(NULL), CU_FILE_INVALID_VALUE);
	OK(cuFileSetStatsLevel(3));
	OK(cuFileStatsReset());
	get_l1(&l1);
	CHECK(l1.read_ops.ok == 0 && l1.read_bytes == 0, "reset: %lu reads", l1.read_ops.ok);

	snprintf(path, sizeof(path), "%s/stats.bin", dir);
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
	CHECK(fd >= 0, "open");
	fh = reg_fd(fd);
	OK(cuFileBufRegister(a, 2 * MiB, 0));
	fill(a, 2 * MiB, 0, 9);
	CHECK(cuFileWrite(fh, a, 2 * MiB, 0, 0) == (ssize_t)(2 * MiB), "write");
	memset(a, 0, 2 * MiB);
	CHECK(cuFileRead(fh, a, MiB, MiB, 0) == (ssize_t)MiB, "read");
	CHECK(cuFileRead(fh, a, 4096, 0, MiB) == 4096, "read 4 KiB");
	expect(a, MiB, MiB, 9, "read");
	expect(a + MiB, 4096, 0, 9, "read 4 KiB");
	CHECK(cuFileRead(fh, a, 4096, -4096, 0) == -CU_FILE_INVALID_VALUE, "negative offset");
	get_l1(&l1);
	CHECK(l1.hdl_register_ops.ok == 1, "handle registrations %lu", l1.hdl_register_ops.ok);
	CHECK(l1.buf_register_ops.ok == 1, "buffer registrations %lu", l1.buf_register_ops.ok);
	CHECK(l1.write_ops.ok == 1 && l1.write_ops.err == 0, "writes %lu/%lu", l1.write_ops.ok,
	      l1.write_ops.err);
	CHECK(l1.read_ops.ok == 2 && l1.read_ops.err == 1, "reads %lu/%lu", l1.read_ops.ok,
	      l1.read_ops.err);
	CHECK(l1.write_bytes == 2 * MiB, "write bytes %lu", l1.write_bytes);
	CHECK(l1.read_bytes == MiB + 4096, "read bytes %lu", l1.read_bytes);
	CHECK(l1.read_lat_sum_us >= l1.read_lat_avg_us, "latency sum %lu avg %lu",
	      l1.read_lat_sum_us, l1.read_lat_avg_us);
	CHECK(l1.read_bw_bytes_per_sec > 0 && l1.write_bw_bytes_per_sec > 0, "bandwidths");
	stats_fit(1);
	stats_fit(2);
	OK(cuFileGetStatsL2(&l2));
	CHECK(l2.read_size_kb_hist[10] == 1 && l2.read_size_kb_hist[2] == 2,
	      "1 MiB in bucket 10 (%lu), 4 KiB (and the failed one) in 2 (%lu)",
	      l2.read_size_kb_hist[10], l2.read_size_kb_hist[2]);
	CHECK(l2.write_size_kb_hist[11] == 1, "2 MiB in bucket 11: %lu", l2.write_size_kb_hist[11]);
	OK(cuFileGetStatsL3(l3));
	CHECK(l3->num_gpus == 0, "host memory is no GPU's: %u", l3->num_gpus);

	/* Batches. */
	OK(cuFileBatchIOSetUp(&bh, 2));
	memset(io, 0, sizeof(io));
	for (int i = 0; i < 2; i++) {
		io[i].mode = CUFILE_BATCH;
		io[i].fh = fh;
		io[i].opcode = CUFILE_READ;
		io[i].cookie = (void *)(long)(i + 1);
		io[i].u.batch.devPtr_base = a;
		io[i].u.batch.devPtr_offset = i * MiB;
		io[i].u.batch.file_offset = (1 - i) * MiB;
		io[i].u.batch.size = MiB;
	}
	OK(cuFileBatchIOSubmit(bh, 2, io, 0));
	while (got < 2) {
		nr = 2 - got;
		OK(cuFileBatchIOGetStatus(bh, 1, &nr, ev + got, NULL));
		got += nr;
	}
	cuFileBatchIODestroy(bh);
	expect(a, MiB, MiB, 9, "batch 0");
	expect(a + MiB, MiB, 0, 9, "batch 1");
	get_l1(&l1);
	CHECK(l1.batch_setup_ops.ok == 1 && l1.batch_submit_ops.ok == 1 &&
	      l1.batch_destroy_ops.ok == 1, "batch calls %lu %lu %lu", l1.batch_setup_ops.ok,
	      l1.batch_submit_ops.ok, l1.batch_destroy_ops.ok);
	CHECK(l1.batch_enqueued_ops.ok == 2 && l1.batch_complete_ops.ok == 2,
	      "requests %lu enqueued, %lu complete", l1.batch_enqueued_ops.ok,
	      l1.batch_complete_ops.ok);
	CHECK(l1.batch_posix_enqueued_ops.ok == 2, "host memory is not P2P: %lu",
	      l1.batch_posix_enqueued_ops.ok);
	CHECK(l1.batch_read_bytes == 2 * MiB && l1.last_batch_read_bytes == MiB,
	      "batch bytes %lu, last %lu", l1.batch_read_bytes, l1.last_batch_read_bytes);
	CHECK(l1.read_ops.ok == 2, "batches are not cuFileRead calls: %lu", l1.read_ops.ok);

	/* Stop pauses, start resumes, reset clears. */
	OK(cuFileStatsStop());
	CHECK(cuFileRead(fh, a, MiB, 0, 0) == (ssize_t)MiB, "read while stopped");
	get_l1(&l1);
	CHECK(l1.read_ops.ok == 2, "not counted while stopped: %lu", l1.read_ops.ok);
	OK(cuFileStatsStart());
	CHECK(cuFileRead(fh, a, MiB, 0, 0) == (ssize_t)MiB, "read after start");
	get_l1(&l1);
	CHECK(l1.read_ops.ok == 3, "counted again: %lu", l1.read_ops.ok);
	OK(cuFileStatsReset());
	get_l1(&l1);
	CHECK(l1.read_ops.ok == 0 && l1.batch_read_bytes == 0, "reset");
	OK(cuFileSetStatsLevel(1));
	ERR(cuFileGetStatsL2(&l2), CU_FILE_INVALID_VALUE);
	OK(cuFileSetStatsLevel(0));
	ERR(cuFileGetStatsL1(&l1), CU_FILE_INVALID_VALUE);
	ERR(cuFileStatsStart(), CU_FILE_INVALID_VALUE);
	OK(cuFileBufDeregister(a));
	{
		/* fgds's dma-buf extension: bad arguments; a file is no dma-buf any node takes. */
		void *p = NULL;

		ERR(cuFileBufRegisterDmabufFGDS(-1, 0, 4096, &p), CU_FILE_INVALID_VALUE);
		ERR(cuFileBufRegisterDmabufFGDS(fd, 0, 0, &p), CU_FILE_INVALID_VALUE);
		ERR(cuFileBufRegisterDmabufFGDS(fd, 0, 4096, NULL), CU_FILE_INVALID_VALUE);
		if (no_fgds_node())
			ERR(cuFileBufRegisterDmabufFGDS(fd, 0, 4096, &p), CU_FILE_DEVICE_NOT_FOUND);
		CHECK(p == NULL, "nothing registered");
	}
	cuFileHandleDeregister(fh);
	close(fd);
	free(a);
	free(l3);
}

/* Reads the whole file with pread into a new buffer. */
static unsigned char *slurp(const char *path, size_t n)
{
	unsigned char *p = xalloc(n);
	int fd = open(path, O_RDONLY);

	CHECK(fd >= 0 && pread(fd, p, n, 0) == (ssize_t)n, "pread %s", path);
	close(fd);
	return p;
}

/* cuFile 1.16-1.20: cuFileReadv/Writev (every byte checked), P2P flags,
 * BAR size, topology export, CUFILE_ERRSTR, the version. */
static void test_v120(const char *dir)
{
	char path[4096], topo[4096];
	unsigned char *reg = xalloc(2 * MiB), *plain = xalloc(MiB + 4096), *back, *r2;
	unsigned char *other = malloc(200000);
	CUfileIOVec_t iov[5], many[1025];
	CUfileStatsLevel1_t l1;
	CUfileP2PFlags_t fl = (CUfileP2PFlags_t)99;
	size_t bar = 0, sizes[4] = { MiB, 100001, 8192, 0 }, total = 0, pos;
	int fd, v = 0;
	CUfileHandle_t fh;
	FILE *f;
	char text[256] = "";

	OK(cuFileGetVersion(&v));
	CHECK(v == FGDS_CUFILE_VERSION, "cuFileGetVersion: %d, want %d", v, FGDS_CUFILE_VERSION);
	OK(cuFileSetStatsLevel(1));
	snprintf(path, sizeof(path), "%s/v120.bin", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	fh = reg_fd(fd);
	OK(cuFileBufRegister(reg, 2 * MiB, 0));
	/* registered (aligned), host unregistered at an odd address, the middle
	 * of the registered buffer, an empty one; from an unaligned offset. */
	iov[0].base = reg;
	iov[1].base = other + 3;
	iov[2].base = reg + MiB + 512;
	iov[3].base = plain;
	for (int i = 0; i < 4; i++) {
		iov[i].len = sizes[i];
		total += sizes[i];
	}
	pos = 12345;
	for (int i = 0; i < 4; i++) {
		fill(iov[i].base, iov[i].len, pos, 7);
		pos += iov[i].len;
	}
	CHECK(cuFileWritev(fh, iov, 4, 12345, 0) == (ssize_t)total, "cuFileWritev");
	back = slurp(path, 12345 + total);
	expect(back + 12345, total, 12345, 7, "cuFileWritev's bytes in the file");
	free(back);
	/* Back into other segments (split differently), every byte checked. */
	memset(reg, 0, 2 * MiB);
	memset(plain, 0, MiB + 4096);
	iov[0].base = plain + 1;
	iov[0].len = 333333;
	iov[1].base = reg + 4096;
	iov[1].len = total - 333333 - 200000;
	iov[2].base = plain + 400000;
	iov[2].len = 200000;
	CHECK(cuFileReadv(fh, iov, 3, 12345, 0) == (ssize_t)total, "cuFileReadv");
	expect(iov[0].base, iov[0].len, 12345, 7, "cuFileReadv segment 0");
	expect(iov[1].base, iov[1].len, 12345 + 333333, 7, "cuFileReadv segment 1");
	expect(iov[2].base, iov[2].len, 12345 + total - 200000, 7, "cuFileReadv segment 2");
	/* Aligned and registered: the direct path. */
	fill(reg, MiB, 0, 9);
	iov[0].base = reg;
	iov[0].len = MiB / 2;
	iov[1].base = reg + MiB / 2;
	iov[1].len = MiB / 2;
	CHECK(cuFileWritev(fh, iov, 2, 0, 0) == (ssize_t)MiB, "aligned cuFileWritev");
	memset(reg, 0, MiB);
	CHECK(cuFileReadv(fh, iov, 2, 0, 0) == (ssize_t)MiB, "aligned cuFileReadv");
	expect(reg, MiB, 0, 9, "aligned cuFileReadv");
	/* Short at the end of the file. */
	r2 = xalloc(2 * MiB);
	iov[0].base = r2;
	iov[0].len = 2 * MiB;
	CHECK(cuFileReadv(fh, iov, 1, MiB, 0) == (ssize_t)(12345 + total - MiB),
	      "cuFileReadv at the end of the file is short");
	free(r2);
	/* Errors. */
	CHECK(cuFileReadv(fh, iov, 1, 0, 1) == -CU_FILE_INVALID_VALUE, "flags must be 0");
	CHECK(cuFileReadv(fh, NULL, 1, 0, 0) == -CU_FILE_INVALID_VALUE, "NULL iov");
	CHECK(cuFileWritev(fh, iov, 0, 0, 0) == 0, "no segments");
	for (int i = 0; i < 1025; i++) {
		many[i].base = reg;
		many[i].len = 1;
	}
	CHECK(cuFileReadv(fh, many, 1025, 0, 0) == -CU_FILE_INVALID_VALUE, "1025 segments");
	CHECK(cuFileReadv((CUfileHandle_t)12345, iov, 1, 0, 0) == -CU_FILE_HANDLE_NOT_REGISTERED,
	      "a bad handle");
	stats_fit(1);
	get_l1(&l1);
#if FGDS_CUFILE_VERSION >= 1190
	/* counted: calls that reached I/O (not those refused for their arguments) */
	CHECK(l1.readv_ops.ok == 3 && l1.writev_ops.ok == 2, "vectored ops %lu %lu",
	      (unsigned long)l1.readv_ops.ok, (unsigned long)l1.writev_ops.ok);
	CHECK(l1.writev_bytes == total + MiB, "writev_bytes %lu", (unsigned long)l1.writev_bytes);
	CHECK(l1.readv_ops.err == 0 && l1.read_ops.ok == 0, "readv errors %lu",
	      (unsigned long)l1.readv_ops.err);
#else
	CHECK(l1.read_ops.ok == 0 && l1.write_ops.ok == 0, "vectored calls counted as plain ones");
#endif
	OK(cuFileBufDeregister(reg));
	cuFileHandleDeregister(fh);
	close(fd);

	/* P2P flags: PCI P2PDMA for NVMe where an fgds node serves a GPU. */
	OK(cuFileDriverGetP2PFlags(CU_FILE_NVME_SUPPORTED, &fl));
	CHECK(fl == (no_fgds_node() ? 0 : CU_FILE_P2P_FLAG_PCI_P2PDMA), "NVMe P2P flags %d", fl);
	OK(cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, fl));
	/* asking for PCI P2PDMA succeeds with or without a node, as NVIDIA's does */
	OK(cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, CU_FILE_P2P_FLAG_PCI_P2PDMA));
	ERR(cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, CU_FILE_P2P_FLAG_NVFS),
	    CU_FILE_INVALID_VALUE);
	ERR(cuFileDriverSetP2PFlags(CU_FILE_LUSTRE_SUPPORTED, (CUfileP2PFlags_t)0),
	    CU_FILE_PLATFORM_NOT_SUPPORTED);
	ERR(cuFileDriverGetP2PFlags(CU_FILE_NVME_SUPPORTED, NULL), CU_FILE_INVALID_VALUE);
	ERR(cuFileDriverGetP2PFlags(CU_FILE_MAX_TARGET_TYPES, &fl), CU_FILE_INVALID_VALUE);
	/* BAR size and topology. */
	if (no_fgds_node())
		ERR(cuFileGetBARSizeInKB(0, &bar), CU_FILE_DEVICE_NOT_FOUND);
	else {
		OK(cuFileGetBARSizeInKB(0, &bar));
		CHECK(bar > 0, "BAR size");
	}
	ERR(cuFileGetBARSizeInKB(0, NULL), CU_FILE_INVALID_VALUE);
	snprintf(topo, sizeof(topo), "%s/topology.json", dir);
	OK(cuFileExportPCIeTopology(topo));
	f = fopen(topo, "r");
	CHECK(f && fgets(text, sizeof(text), f) && strstr(text, "{\"fgds_nodes\":["),
	      "topology: %s", text);
	if (f)
		fclose(f);
	ERR(cuFileExportPCIeTopology(NULL), CU_FILE_INVALID_VALUE);
	ERR(cuFileExportPCIeTopology("/nonexistent/dir/t.json"), CU_FILE_PERMISSION_DENIED);
	/* The error strings (torch's GdsFile.cpp and KvikIO use them). */
	CHECK(!strcmp(CUFILE_ERRSTR(-CU_FILE_HANDLE_NOT_REGISTERED),
		      "file descriptor is not registered"), "CUFILE_ERRSTR");
	CHECK(!strcmp(cufileop_status_error(CU_FILE_SUCCESS), "cufile success"),
	      "cufileop_status_error");
	CHECK(!strcmp(CUFILE_ERRSTR(123), "unknown cufile error"), "unknown code");
	free(reg);
	free(plain);
	free(other);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s DIR main|strict|json|params|stats|v120\n", argv[0]);
		return 2;
	}
	if (!strcmp(argv[2], "main"))
		test_main(argv[1]);
	else if (!strcmp(argv[2], "strict"))
		test_strict(argv[1]);
	else if (!strcmp(argv[2], "json"))
		test_json(argv[1]);
	else if (!strcmp(argv[2], "params"))
		test_params(argv[1]);
	else if (!strcmp(argv[2], "stats"))
		test_stats(argv[1]);
	else if (!strcmp(argv[2], "v120"))
		test_v120(argv[1]);
	else
		return 2;
	printf("ok %d checks\n", checks);
	return 0;
}
