// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * A cuFile program: written against cuFile's API (cufile.h) and nothing
 * of fgds, run by tests/c_program.rs on fgds's libcufile.so.0 with host
 * memory (no GPU here), every byte checked.
 *
 *   cufile_test DIR main    reads, writes, batches, stream API, errors
 *   cufile_test DIR strict  FGDS_STRICT=1 without an fgds node: every call fails
 *   cufile_test DIR json    CUFILE_ENV_PATH_JSON with compat forced, batch size 4
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

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s DIR main|strict|json\n", argv[0]);
		return 2;
	}
	if (!strcmp(argv[2], "main"))
		test_main(argv[1]);
	else if (!strcmp(argv[2], "strict"))
		test_strict(argv[1]);
	else if (!strcmp(argv[2], "json"))
		test_json(argv[1]);
	else
		return 2;
	printf("ok %d checks\n", checks);
	return 0;
}
