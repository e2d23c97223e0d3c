/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the C guest programs share beyond the selftests' headers: the host
 * checker's verdict on a range of the first stand-in's BAR, as a harness
 * expectation, and a range of a file compared with a stream. Include after
 * kselftest_harness.h, fgds_host.h and fgds_pattern.h.
 */
#ifndef GUEST_TEST_H
#define GUEST_TEST_H

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* The host finds stream @seed from @pos over [@bar_off, @bar_off + @len) of the BAR. */
static inline void guest_host_check(struct __test_metadata *_metadata, __u64 seed,
				    __u64 bar_off, __u64 len, __u64 pos)
{
	char ans[256];

	EXPECT_EQ(0, fgds_host_req("check", seed, bar_off, len, pos, ans, sizeof(ans)))
		TH_LOG("host: %s", ans);
}

/* The host writes stream @seed over [@bar_off, @bar_off + @len) of the BAR. */
static inline void guest_host_fill(struct __test_metadata *_metadata, __u64 seed,
				   __u64 bar_off, __u64 len)
{
	char ans[256];

	ASSERT_EQ(0, fgds_host_req("fill", seed, bar_off, len, 0, ans, sizeof(ans)))
		TH_LOG("host: %s", ans);
}

/*
 * Compares @len bytes of @path from @off, read back with O_DIRECT, with
 * stream @seed from @pos: -1 when every byte is right, else the first
 * wrong one's index; -2 when the file could not be read.
 */
static inline long long guest_file_cmp(const char *path, off_t off, size_t len, __u64 seed,
				       __u64 pos)
{
	long long ret = -2;
	void *buf;
	int fd;

	if (posix_memalign(&buf, 4096, len))
		return -2;
	fd = open(path, O_RDONLY | O_DIRECT);
	if (fd >= 0 && pread(fd, buf, len, off) == (ssize_t)len)
		ret = fgds_pattern_cmp(buf, len, seed, pos);
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

#endif /* GUEST_TEST_H */
