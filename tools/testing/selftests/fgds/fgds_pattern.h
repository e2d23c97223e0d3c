/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Deterministic test data shared by the in-guest selftests and the host-side
 * BAR checker: byte p of stream @seed is byte (p % 8) (little endian) of
 * splitmix64(seed, p / 8). Both sides generate it independently, so the host
 * verifies what the guest moved without trusting anything the guest reports.
 */
#ifndef FGDS_PATTERN_H
#define FGDS_PATTERN_H

#include <stddef.h>
#include <string.h>
#include <linux/types.h>

static inline __u64 fgds_pattern_word(__u64 seed, __u64 idx)
{
	__u64 z = seed * 0xd1b54a32d192ed03ULL + (idx + 1) * 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Fill @len bytes of @buf with the stream @seed starting at stream offset @pos. */
static inline void fgds_pattern_fill(void *buf, size_t len, __u64 seed, __u64 pos)
{
	unsigned char *p = buf;

	while (len && (pos & 7)) {
		*p++ = fgds_pattern_word(seed, pos >> 3) >> (8 * (pos & 7));
		pos++;
		len--;
	}
	for (; len >= 8; len -= 8, pos += 8, p += 8) {
		__u64 w = fgds_pattern_word(seed, pos >> 3);

		memcpy(p, &w, 8);
	}
	while (len) {
		*p++ = fgds_pattern_word(seed, pos >> 3) >> (8 * (pos & 7));
		pos++;
		len--;
	}
}

/*
 * Compare @len bytes of @buf with the stream. Returns -1 when equal, else the
 * offset in @buf of the first differing byte.
 */
static inline long long fgds_pattern_cmp(const void *buf, size_t len, __u64 seed,
					 __u64 pos)
{
	unsigned char chunk[4096];
	const unsigned char *p = buf;
	size_t done = 0;

	while (done < len) {
		size_t n = len - done < sizeof(chunk) ? len - done : sizeof(chunk);

		fgds_pattern_fill(chunk, n, seed, pos + done);
		if (memcmp(p + done, chunk, n)) {
			for (size_t i = 0; i < n; i++)
				if (p[done + i] != chunk[i])
					return (long long)(done + i);
		}
		done += n;
	}
	return -1;
}

#endif /* FGDS_PATTERN_H */
