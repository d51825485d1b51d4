/*
 * model_cache — the cache folder, and GGUF files converted into it once
 * (the layout and the reuse rule are in model_cache.h).
 */
#include "engine/cli/model_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/files.h"
#include "engine/convert/convert.h"
#include "engine/convert/gguf.h"

/* Checks an snprintf of n characters into a buffer of len bytes. */
static int fits(int n, size_t len, const char *what)
{
	return n < 0 || (size_t)n >= len ? error_set(ENAMETOOLONG, "path too long: %s", what) : 0;
}

int model_cache_root(char *out, size_t len)
{
	const char *d = getenv("COLIBRI_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
	if (d && *d)
		return fits(snprintf(out, len, "%s/models", d), len, d);
	if (x && *x)
		return fits(snprintf(out, len, "%s/colibri/models", x), len, x);
	if (h && *h)
		return fits(snprintf(out, len, "%s/.cache/colibri/models", h), len, h);
	return error_set(ENOENT, "no cache folder to convert a model into: set $COLIBRI_CACHE_DIR or $HOME");
}

bool model_cache_is_gguf(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && gguf_is_gguf(path);
}

/* A split's part ends in -NNNNN-of-MMMMM.gguf (llama.cpp's
 * llama_split_path): the count M, and in *stem the length of what comes
 * before; 0 for a file that is no part. */
static int split_count(const char *path, size_t *stem)
{
	static const char shape[] = "-#####-of-#####.gguf";
	size_t n = strlen(path), k = sizeof shape - 1;
	if (n <= k)
		return 0;
	const char *t = path + n - k;
	for (size_t i = 0; i < k; i++)
		if (shape[i] == '#' ? t[i] < '0' || t[i] > '9' : t[i] != shape[i])
			return 0;
	*stem = n - k;
	return atoi(t + 10);
}

/* The source record of the files of gguf (every part of a split, in
 * order: real path, size, modification time), malloc'd into *rec; the first
 * part's real path into first. */
static int source_record(const char *gguf, char **rec, char *first, size_t first_len)
{
	size_t stem = 0, len = 0;
	int parts = split_count(gguf, &stem);
	FILE *f = open_memstream(rec, &len);
	if (!f)
		return error_set(ENOMEM, "out of memory");
	int rc = 0;
	for (int p = 1; !rc && p <= (parts ? parts : 1); p++) {
		char path[PATH_MAX], real[PATH_MAX];
		struct stat sb;
		if (parts)
			snprintf(path, sizeof path, "%.*s-%05d-of-%05d.gguf", (int)stem, gguf, p, parts);
		else
			snprintf(path, sizeof path, "%s", gguf);
		if (!realpath(path, real) || stat(real, &sb) != 0)
			rc = error_set(errno, "%s: %s", path, strerror(errno));
		else
			fprintf(f, "%s\t%" PRIu64 "\t%lld.%09ld\n", real, (uint64_t)sb.st_size, (long long)sb.st_mtim.tv_sec,
				sb.st_mtim.tv_nsec);
		if (!rc && p == 1)
			rc = fits(snprintf(first, first_len, "%s", real), first_len, real);
	}
	if (fclose(f) != 0 && !rc)
		rc = error_set(ENOMEM, "out of memory");
	if (rc) {
		free(*rec);
		*rec = NULL;
	}
	return rc;
}

/* The bytes of the files a record lists (the second column). */
static uint64_t record_bytes(const char *rec)
{
	uint64_t sum = 0;
	for (const char *p = rec; (p = strchr(p, '\t')); p = strchr(p, '\n'))
		sum += strtoull(++p, NULL, 10);
	return sum;
}

/* Whether dir holds a container made from the files rec describes. */
static bool cached(const char *dir, const char *source, const char *rec)
{
	char man[PATH_MAX + 16], *had = NULL;
	size_t len;
	snprintf(man, sizeof man, "%s/manifest.json", dir);
	if (access(man, F_OK) != 0 || file_read_all(source, &had, &len) != 0) {
		error_clear();
		return false;
	}
	bool same = !strcmp(had, rec);
	free(had);
	return same;
}

/* Converts gguf into dir (what was there is stale: removed first, so the
 * disk need not hold both), then writes the record. */
static int convert_into(const char *gguf, const char *dir, const char *source, const char *rec)
{
	uint64_t need = record_bytes(rec);
	char parent[PATH_MAX];
	snprintf(parent, sizeof parent, "%s", dir);
	*strrchr(parent, '/') = 0;
	unlink(source);
	int rc = dir_remove_tree(dir);
	if (rc)
		return rc;
	/* The container keeps the file's tensor types: about its size again. */
	struct statvfs vfs;
	if (statvfs(parent, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need)
		return error_set(ENOSPC, "%s: converting it needs about %.1f GB in %s, which has %.1f GB free; "
				 "convert it elsewhere (colibri convert %s DIR) and pass --model DIR, or set "
				 "$COLIBRI_CACHE_DIR", gguf, need / 1e9, parent, (double)vfs.f_bavail * vfs.f_frsize / 1e9,
				 gguf);
	fprintf(stderr, "colibri: converting %s (%.1f %s) into %s, once: later runs use that container\n", gguf,
		need >= 1e9 ? need / 1e9 : need / 1e6, need >= 1e9 ? "GB" : "MB", dir);
	double t0 = clock_now_s();
	struct convert_options o;
	convert_options_default(&o);
	o.hf_dir = gguf;
	o.out_dir = dir;
	if ((rc = convert_run(&o)))
		return rc;
	if ((rc = file_write_atomic(source, rec, strlen(rec))))
		return rc;
	fprintf(stderr, "colibri: converted %s in %.1f s\n", gguf, clock_now_s() - t0);
	return 0;
}

int model_cache_gguf(const char *gguf, char *out, size_t len)
{
	char root[PATH_MAX], first[PATH_MAX], *rec = NULL;
	int rc = model_cache_root(root, sizeof root);
	if (rc || (rc = source_record(gguf, &rec, first, sizeof first)))
		return rc;
	/* NAME: the file's name without the split suffix and ".gguf". */
	const char *base = strrchr(first, '/') ? strrchr(first, '/') + 1 : first;
	size_t stem = strlen(base);
	if (!split_count(base, &stem) && stem > 5 && !strcmp(base + stem - 5, ".gguf"))
		stem -= 5;
	uint64_t key = 0xcbf29ce484222325ull; /* FNV-1a of the real path */
	for (const char *p = first; *p; p++)
		key = (key ^ (uint8_t)*p) * 0x100000001b3ull;
	char source[PATH_MAX + 32], lock[PATH_MAX + 32];
	rc = fits(snprintf(out, len, "%s/gguf/%016" PRIx64 "/%.*s", root, key, stem ? (int)stem : 5,
			   stem ? base : "model"), len, root);
	if (!rc)
		rc = fits(snprintf(source, sizeof source, "%s/gguf/%016" PRIx64 "/source", root, key), sizeof source, root);
	snprintf(lock, sizeof lock, "%s/gguf/%016" PRIx64 "/lock", root, key);
	if (!rc && cached(out, source, rec)) {
		fprintf(stderr, "colibri: %s: using its container %s, converted before\n", gguf, out);
		free(rec);
		return 0;
	}
	int fd = -1;
	if (!rc && (rc = dir_make_parent(source)))
		rc = error_set(-rc, "%s: cannot make the cache folder: %s", source, strerror(-rc));
	if (!rc && (fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
		rc = error_set(errno, "%s: %s", lock, strerror(errno));
	if (!rc && flock(fd, LOCK_EX | LOCK_NB) != 0) {
		fprintf(stderr, "colibri: %s: another colibri is converting it; waiting\n", gguf);
		while (flock(fd, LOCK_EX) != 0 && errno == EINTR)
			;
	}
	/* Another colibri may have converted it while this one waited. */
	if (!rc && !cached(out, source, rec))
		rc = convert_into(gguf, out, source, rec);
	if (fd >= 0)
		close(fd);
	free(rec);
	return rc;
}

int model_cache_use(const char **model_dir)
{
	static char dir[PATH_MAX];
	if (!*model_dir || !model_cache_is_gguf(*model_dir))
		return 0;
	int rc = model_cache_gguf(*model_dir, dir, sizeof dir);
	if (!rc)
		*model_dir = dir;
	return rc;
}
