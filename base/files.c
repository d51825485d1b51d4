/*
 * files — see files.h.
 */
#include "base/files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

int file_read_all(const char *path, char **data, size_t *len)
{
	*data = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_set(errno, "%s: cannot open: %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return error_set(EINVAL, "%s: not a regular file", path);
	}
	size_t n = (size_t)sb.st_size, got = 0;
	char *buf = malloc(n + 1);
	if (!buf) {
		close(fd);
		return error_set(ENOMEM, "%s: out of memory", path);
	}
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			free(buf);
			close(fd);
			return error_set(e, "%s: read failed: %s", path, r < 0 ? strerror(e) : "the file shrank");
		}
		got += (size_t)r;
	}
	close(fd);
	buf[n] = 0;
	*data = buf;
	if (len)
		*len = n;
	return 0;
}

int file_read_input(const char *path, char **data, size_t *len)
{
	*data = NULL;
	bool std_in = strcmp(path, "-") == 0;
	const char *name = std_in ? "standard input" : path;
	int fd = std_in ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_set(errno, "%s: cannot open: %s", path, strerror(errno));
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	int rc = buf ? 0 : error_set(ENOMEM, "%s: out of memory", name);
	while (!rc) {
		if (n + 1 == cap) {
			char *p = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
			if (!p) {
				rc = error_set(ENOMEM, "%s: out of memory", name);
				break;
			}
			buf = p;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			rc = error_set(errno, "%s: read failed: %s", name, strerror(errno));
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	if (!std_in)
		close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[n] = 0;
	*data = buf;
	*len = n;
	return 0;
}

int json_load(const char *path, struct cJSON **out)
{
	*out = NULL;
	if (access(path, F_OK) != 0)
		return error_set(ENOENT, "%s: missing", path);
	char *buf;
	size_t len;
	int rc = file_read_all(path, &buf, &len);
	if (rc)
		return rc;
	const char *end = NULL;
	cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
	if (!j) {
		long at = end ? (long)(end - buf) : -1;
		free(buf);
		return error_set(EINVAL, "%s: malformed JSON near byte %ld", path, at);
	}
	free(buf);
	*out = j;
	return 0;
}

int file_write_atomic(const char *path, const void *data, size_t len)
{
	/* A temporary name of this process and call: two processes saving
	 * the same file (two runs of one model saving its usage.json) would
	 * otherwise truncate and interleave one PATH.tmp and rename the mix.
	 * O_EXCL makes a leftover of a killed process a retry, not a clash;
	 * the mode is 0644 less the umask, as a plain create's. */
	static _Atomic unsigned seq;
	char tmp[PATH_MAX];
	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 100; tries++) {
		if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%u", path, (long)getpid(), seq++) >= (int)sizeof tmp)
			return error_set(ENAMETOOLONG, "%s: path too long", path);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0)
		return error_set(errno, "%s: cannot create: %s", tmp, strerror(errno));
	const char *p = data;
	size_t left = len;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			close(fd);
			unlink(tmp);
			return error_set(e, "%s: write failed: %s", tmp, strerror(e));
		}
		p += w;
		left -= (size_t)w;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		int e = errno;
		unlink(tmp);
		return error_set(e, "%s: fsync failed: %s", tmp, strerror(e));
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return error_set(e, "%s: rename failed: %s", path, strerror(e));
	}
	return 0;
}

int file_copy(const char *src, const char *dst)
{
	char *data;
	size_t len;
	int rc = file_read_all(src, &data, &len);
	if (rc)
		return rc;
	FILE *f = fopen(dst, "wb");
	if (!f) {
		free(data);
		return error_set(errno, "%s: cannot create: %s", dst, strerror(errno));
	}
	size_t w = fwrite(data, 1, len, f);
	free(data);
	if (fclose(f) != 0 || w != len)
		return error_set(EIO, "%s: write failed", dst);
	return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

int file_put_aside(const char *path, char *aside, size_t n)
{
	for (int k = 1; k < 1000; k++) {
		if (k == 1)
			snprintf(aside, n, "%s.refused", path);
		else
			snprintf(aside, n, "%s.refused.%d", path, k);
		if (access(aside, F_OK) == 0)
			continue;
		if (rename(path, aside) != 0)
			return error_set(errno, "%s: cannot rename the refused file aside: %s", path, strerror(errno));
		return 0;
	}
	return error_set(EEXIST, "%s: too many refused copies beside it", path);
}

int dir_remove_tree(const char *path)
{
	if (access(path, F_OK) != 0)
		return 0;
	if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
		return error_set(errno, "%s: cannot remove: %s", path, strerror(errno));
	return 0;
}

int dir_make_parent(const char *path)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = 0;
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(dir, 0755) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int file_io_at(int fd, void *buf, size_t len, uint64_t off, bool write_it, const char *path)
{
	uint8_t *b = buf;
	while (len > 0) {
		ssize_t r = write_it ? pwrite(fd, b, len, (off_t)off) : pread(fd, b, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return error_set(r < 0 ? errno : EIO, "%s: %s failed at offset %" PRIu64 ": %s", path,
					 write_it ? "write" : "read", off, r < 0 ? strerror(errno) : "end of file");
		b += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int file_copy_through(const char *src, const char *dst, void *buf, size_t chunk, int (*step)(void *ctx, uint64_t bytes),
		      void *ctx)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return error_set(errno, "%s: cannot open: %s", src, strerror(errno));
	int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		int e = errno;
		close(in);
		return error_set(e, "%s: cannot create: %s", dst, strerror(e));
	}
	struct stat sb;
	int rc = fstat(in, &sb) == 0 ? 0 : error_set(errno, "%s: cannot stat: %s", src, strerror(errno));
	for (uint64_t off = 0; !rc && off < (uint64_t)sb.st_size; off += chunk) {
		uint64_t left = (uint64_t)sb.st_size - off;
		size_t n = left < chunk ? (size_t)left : chunk;
		rc = file_io_at(in, buf, n, off, false, src);
		if (!rc)
			rc = file_io_at(out, buf, n, off, true, dst);
		posix_fadvise(in, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED);
		if (!rc && step)
			rc = step(ctx, n);
	}
	if (!rc && fsync(out) != 0)
		rc = error_set(errno, "%s: cannot sync: %s", dst, strerror(errno));
	if (!rc)
		posix_fadvise(out, 0, 0, POSIX_FADV_DONTNEED);
	if (close(out) != 0 && !rc)
		rc = error_set(errno, "%s: write failed: %s", dst, strerror(errno));
	close(in);
	return rc;
}

int dir_publish(const char *tmp, const char *dest)
{
	char old[PATH_MAX];
	snprintf(old, sizeof old, "%s.old-%d", dest, (int)getpid());
	bool had_old = access(dest, F_OK) == 0;
	if (had_old && rename(dest, old) != 0)
		return error_set(errno, "%s: cannot move aside: %s", dest, strerror(errno));
	if (rename(tmp, dest) != 0) {
		int e = errno;
		if (had_old)
			rename(old, dest);
		return error_set(e, "%s: cannot rename into place: %s", dest, strerror(e));
	}
	if (had_old)
		dir_remove_tree(old);
	char parent[PATH_MAX];
	snprintf(parent, sizeof parent, "%s", dest);
	char *slash = strrchr(parent, '/');
	if (!slash)
		snprintf(parent, sizeof parent, ".");
	else
		slash[slash == parent] = 0;
	int dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
}

int file_pread_full(int fd, void *buf, uint64_t len, uint64_t off)
{
	uint8_t *p = buf;
	for (uint64_t done = 0; done < len;) {
		ssize_t r = pread(fd, p + done, (size_t)(len - done), (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += (uint64_t)r;
	}
	return 0;
}
