/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the C guest programs share beyond the selftests' headers: the host
 * checker's verdict on a range of the first stand-in's BAR, as a harness
 * expectation. Include after kselftest_harness.h and fgds_host.h.
 */
#ifndef GUEST_TEST_H
#define GUEST_TEST_H

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

#endif /* GUEST_TEST_H */
