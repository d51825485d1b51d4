/*
 * verify — re-reads container files and compares byte ranges with the
 * seeded XXH3-64 checksums of the manifest: the resident tensors, and the records
 * of each copy of an expert file. `doctor --deep` and `mirror --verify` (and
 * mirror's check of a fresh copy) share it; each reports in its own words
 * through the callback.
 */
#ifndef COLIBRI_ENGINE_VERIFY_H
#define COLIBRI_ENGINE_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct verify {
	uint8_t *buf;                 /* [buf_bytes]; 4096-aligned when direct */
	size_t buf_bytes;             /* read size, a multiple of 4096 when direct */
	bool direct;                  /* O_DIRECT where the file system allows it (aligned ranges only) */
	/* Called for range i at offset whose hash differs from its checksum
	 * (rc 0), or whose read failed (rc -errno, with error_message() saying
	 * "PATH: read failed at offset N: why"; the file's walk stops). A
	 * nonzero return stops the walk and is verify_file's result. */
	int (*bad)(void *ctx, size_t i, uint64_t offset, uint64_t hash, int rc);
	void (*progress)(void *ctx, uint64_t bytes); /* after each read; may be NULL */
	void *ctx;
};

/* XXH3-64 with seed of [off, off + len) of the open file fd (path names it
 * in messages), read through v->buf. 0, or -errno (-EIO at end of file)
 * with a message naming the offset of the read that failed. */
int verify_hash_range(const struct verify *v, const char *path, int fd, uint64_t off, uint64_t len, uint64_t seed,
		      uint64_t *out);

/* Checks n ranges of the file at path against sums[0..n): range i is
 * [offsets[i], offsets[i] + sizes[i]) hashed with seed seeds[i], or with
 * offsets NULL, record i of sizes[0] bytes hashed with seeds[0] + i (the
 * rule of manifest_record_seed). 0 when every range was read (bad returned
 * 0 for the rest), bad's nonzero return, or -errno with a message ("PATH:
 * cannot open: ...") when path cannot be opened. */
int verify_file(const struct verify *v, const char *path, size_t n, const uint64_t *offsets, const uint64_t *sizes,
		const uint64_t *sums, const uint64_t *seeds);

#endif
