/*
 * checksum — the XXH3-64 of an expert record, as written by the converter:
 * seeded with a number the caller gives per record, so a record read in the
 * place of another fails its check. Internal to storage/.
 *
 * xxHash is compiled inline here so that it uses the build's baseline SIMD
 * (AVX2 on x86-64-v3), about twice the speed of the distribution's SSE2
 * libxxhash; the value is the same XXH3_64bits_withSeed, which the tests
 * check against the library.
 */
#ifndef COLIBRI_STORAGE_CHECKSUM_H
#define COLIBRI_STORAGE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of p[0..n) with seed (XXH3_64bits_withSeed). */
uint64_t checksum_xxh3(const void *p, size_t n, uint64_t seed);

#endif
