/*
 * verify — see verify.h. Ranges are hashed a buffer at a time, so a
 * resident tensor of several GB needs no more memory than a record.
 */
#include "engine/model/verify.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"

/* XXH3-64 with seed of [off, off + len) of path's fd. 0, or -errno (-EIO at
 * end of file) with a message naming the offset of the read that failed. */
static int hash_range_with(const struct verify *v, const char *path, int fd, uint64_t off, uint64_t len,
			   uint64_t seed, XXH3_state_t *st, uint64_t *out)
{
	XXH3_64bits_reset_withSeed(st, seed);
	while (len) {
		size_t n = len < v->buf_bytes ? (size_t)len : v->buf_bytes;
		ssize_t r = pread(fd, v->buf, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return error_set(r < 0 ? errno : EIO, "%s: read failed at offset %" PRIu64 ": %s", path, off,
					 r < 0 ? strerror(errno) : "end of file");
		XXH3_64bits_update(st, v->buf, (size_t)r);
		/* Buffered reads: leave the page cache as it was. */
		posix_fadvise(fd, (off_t)off, r, POSIX_FADV_DONTNEED);
		off += (uint64_t)r;
		len -= (uint64_t)r;
		if (v->progress)
			v->progress(v->ctx, (uint64_t)r);
	}
	*out = XXH3_64bits_digest(st);
	return 0;
}

int verify_hash_range(const struct verify *v, const char *path, int fd, uint64_t off, uint64_t len, uint64_t seed,
		      uint64_t *out)
{
	XXH3_state_t *st = XXH3_createState();
	if (!st)
		return error_set(ENOMEM, "out of memory");
	int rc = hash_range_with(v, path, fd, off, len, seed, st, out);
	XXH3_freeState(st);
	return rc;
}

int verify_file(const struct verify *v, const char *path, size_t n, const uint64_t *offsets, const uint64_t *sizes,
		const uint64_t *sums, const uint64_t *seeds)
{
	int fd = v->direct ? open(path, O_RDONLY | O_DIRECT | O_CLOEXEC) : -1;
	if (fd < 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_set(errno, "%s: cannot open: %s", path, strerror(errno));
	XXH3_state_t *st = XXH3_createState();
	if (!st) {
		close(fd);
		return error_set(ENOMEM, "out of memory");
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		uint64_t off = offsets ? offsets[i] : i * sizes[0], hash = 0;
		uint64_t seed = offsets ? seeds[i] : seeds[0] + i;
		int read_rc = hash_range_with(v, path, fd, off, offsets ? sizes[i] : sizes[0], seed, st, &hash);
		if (read_rc || hash != sums[i])
			rc = v->bad(v->ctx, i, off, hash, read_rc);
		if (read_rc)
			break;
	}
	XXH3_freeState(st);
	close(fd);
	return rc;
}
