/*
 * checksum — XXH3-64 compiled inline with the build's SIMD (see checksum.h).
 */
#include "storage/checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t checksum_xxh3(const void *p, size_t n, uint64_t seed)
{
	return XXH3_64bits_withSeed(p, n, seed);
}
