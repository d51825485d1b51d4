/*
 * fixture_cache — containers converted from the fixtures once per build and
 * shared by every test of a run, instead of each test converting its own
 * copy of the same checkpoint with the same options.
 *
 * A cached container is keyed by the fixture (its path under the fixtures
 * folder), the convert options, the fixtures' stamp (tools/make_fixtures.sh
 * writes a new one whenever the generator changes) and the colibri binary
 * under test (device, inode, size and modification time), so a rebuilt
 * binary or regenerated fixture never meets an old container. A source
 * that is no fixture (the checked-in models/kjv-moe-hf, named relative to
 * the repository, or an absolute path) has no stamp of its own: it is
 * keyed by its absolute path, the fixtures' stamp, and the name, size and
 * modification time of each file directly in it, so a checkout or an edit
 * that changes one of its files changes the key. The cache lives in
 * $COLIBRI_CONTAINERS (tools/run_tests.py sets BUILD/containers and
 * empties it at the start of a run), else beside the binary.
 *
 * Concurrency: Criterion runs tests as separate processes and the runner
 * runs two binaries at a time, so each entry is made under an exclusive
 * flock of its own lock file; `colibri convert` publishes by rename, so an
 * entry is either absent or whole.
 *
 * A cached container is shared: a test must not write into it (damage a
 * file, register a mirror, shard it in place). A test that changes its
 * container takes a private copy with fc_container_copy. colibri itself
 * writes one file there, usage.json (learned pinning; file_write_atomic,
 * so concurrent runs never mix it): it changes what is pinned and so the
 * speed and the hit counts, never a bit of the output. A test that counts
 * pins, hits or misses runs on a container of its own: fc_container_copy
 * leaves usage.json out, so the copy is what convert wrote.
 */
#ifndef COLIBRI_TESTS_FIXTURE_CACHE_H
#define COLIBRI_TESTS_FIXTURE_CACHE_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/test_util.h"

static inline uint64_t fc_fnv1a(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/* The folder of the cache: $COLIBRI_CONTAINERS, else containers/ beside
 * the colibri binary. */
static inline void fc_dir(char *buf, size_t n)
{
	const char *d = getenv("COLIBRI_CONTAINERS");
	if (d && *d) {
		snprintf(buf, n, "%s", d);
		return;
	}
	snprintf(buf, n, "%s", tu_colibri());
	char *slash = strrchr(buf, '/');
	if (slash)
		snprintf(slash + 1, n - (size_t)(slash + 1 - buf), "containers");
	else
		snprintf(buf, n, "containers");
}

/* The path of source src into path: absolute as it is; else under the
 * repository (tu_repo()) when it is there and no fixture of that name is,
 * as models/kjv-moe-hf; else under the fixtures folder (also when it is
 * missing, for fc_container's message). Returns whether it is a fixture. */
static inline bool fc_source(char *path, size_t n, const char *src)
{
	if (src[0] == '/') {
		snprintf(path, n, "%s", src);
		return false;
	}
	char repo[PATH_MAX], real[PATH_MAX];
	snprintf(path, n, "%s/%s", tu_fixtures(), src);
	snprintf(repo, sizeof repo, "%s/%s", tu_repo(), src);
	if (access(path, F_OK) == 0 || !realpath(repo, real))
		return true;
	snprintf(path, n, "%s", real);
	return false;
}

/* The files of a source that is no fixture, for its key: a sum over its
 * entries (readdir's order is not fixed) of the hash of each one's name,
 * size and modification time; one file's alone when it is a file. */
static inline uint64_t fc_files_hash(const char *path)
{
	struct stat st;
	char line[PATH_MAX + 128], p[PATH_MAX * 2];
	if (stat(path, &st) != 0)
		return 0;
	if (!S_ISDIR(st.st_mode)) {
		snprintf(line, sizeof line, "%lld:%lld.%09ld", (long long)st.st_size, (long long)st.st_mtim.tv_sec,
			 st.st_mtim.tv_nsec);
		return fc_fnv1a(0xcbf29ce484222325ull, line);
	}
	uint64_t sum = 0;
	DIR *d = opendir(path);
	for (struct dirent *e; d && (e = readdir(d));) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof p, "%s/%s", path, e->d_name);
		if (stat(p, &st) != 0)
			continue;
		snprintf(line, sizeof line, "%s:%lld:%lld.%09ld", e->d_name, (long long)st.st_size,
			 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
		sum += fc_fnv1a(0xcbf29ce484222325ull, line);
	}
	if (d)
		closedir(d);
	return sum;
}

/* Takes an exclusive lock on PATH.lock for making the cache entry path;
 * returns its descriptor, which the caller closes to let go. */
static inline int fc_lock(const char *path)
{
	char lock[PATH_MAX + 16];
	snprintf(lock, sizeof lock, "%s.lock", path);
	int fd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
	cr_assert_geq(fd, 0, "cannot open %s: %s", lock, strerror(errno));
	while (flock(fd, LOCK_EX) != 0)
		cr_assert_eq(errno, EINTR, "flock %s: %s", lock, strerror(errno));
	return fd;
}

/* Writes into out the container of `src` (a path under the fixtures
 * folder: "hf/qwen3_moe", "gguf/olmoe.f32.gguf"; or, for a checkpoint that
 * is no fixture, a path relative to the repository, "models/kjv-moe-hf",
 * or an absolute one) converted with `args` ("--quant int4"; "" for
 * convert's defaults) by the colibri under test, converting it first if no
 * test of this build has. Fails the test, with convert's messages, when the
 * conversion fails. The container is shared: read it, never change it. */
static inline void fc_container(char *out, size_t n, const char *src, const char *args)
{
	char dir[PATH_MAX], path[PATH_MAX + 64], key[PATH_MAX * 2];
	fc_dir(dir, sizeof dir);
	bool fixture = fc_source(path, sizeof path, src);
	struct stat fst, bst;
	cr_assert_eq(stat(path, &fst), 0, "%s %s is missing%s", fixture ? "fixture" : "checkpoint", path,
		     fixture ? ": run tools/make_fixtures.sh (tools/run_tests.py sets COLIBRI_FIXTURES)" : "");
	cr_assert_eq(stat(tu_colibri(), &bst), 0, "no colibri binary at %s (COLIBRI_BIN)", tu_colibri());
	char stamp_path[PATH_MAX + 16];
	snprintf(stamp_path, sizeof stamp_path, "%s/.stamp", tu_fixtures());
	char *stamp = tu_read(stamp_path, NULL);
	snprintf(key, sizeof key, "%s|%s|%s|%llu:%llu:%lld:%lld.%09ld|%016llx", stamp ? stamp : "",
		 fixture ? src : path, args, (unsigned long long)bst.st_dev, (unsigned long long)bst.st_ino,
		 (long long)bst.st_size, (long long)bst.st_mtim.tv_sec, bst.st_mtim.tv_nsec,
		 fixture ? 0ull : (unsigned long long)fc_files_hash(path));
	free(stamp);
	/* The name says what it holds: the fixture's path, else the source's
	 * own name. */
	const char *base = strrchr(path, '/');
	char name[256];
	snprintf(name, sizeof name, "%s", fixture ? src : base ? base + 1 : path);
	for (char *p = name; *p; p++)
		if (*p == '/' || *p == '.')
			*p = '_';
	snprintf(out, n, "%s/%s-%016llx", dir, name,
		 (unsigned long long)fc_fnv1a(0xcbf29ce484222325ull, key));
	cr_assert_eq(tu_sh("mkdir -p '%s'", dir), 0, "cannot make the container cache %s", dir);

	char manifest[PATH_MAX + 32];
	snprintf(manifest, sizeof manifest, "%s/manifest.json", out);
	int fd = fc_lock(out);
	if (access(manifest, F_OK) != 0) {
		tu_rmrf(out);
		int rc = tu_sh("'%s' convert --quiet %s '%s' '%s' >'%s.log' 2>&1", tu_colibri(), args, path, out, out);
		if (rc != 0) {
			char log[PATH_MAX + 16];
			snprintf(log, sizeof log, "%s.log", out);
			char *msg = tu_read(log, NULL);
			close(fd);
			cr_assert_fail("convert %s %s failed (exit %d): %s", path, args, rc, msg ? msg : "");
		}
	}
	close(fd);
}

/* Writes into out the logits file (float32, [tokens, vocab]) that `colibri
 * logits` writes for the cached container of fixture src converted with
 * args, over the comma-separated ids in the file tokens_path, with the
 * further options opts; computed once per build like the container (the
 * key adds the ids and opts). Read it, never change it. */
static inline void fc_logits(char *out, size_t n, const char *src, const char *args, const char *tokens_path,
			     const char *opts)
{
	char model[PATH_MAX], key[PATH_MAX];
	fc_container(model, sizeof model, src, args);
	char *ids = tu_read(tokens_path, NULL);
	cr_assert_not_null(ids, "cannot read %s", tokens_path);
	snprintf(key, sizeof key, "%s|%s", model, opts);
	uint64_t h = fc_fnv1a(fc_fnv1a(0xcbf29ce484222325ull, key), ids);
	free(ids);
	snprintf(out, n, "%s-logits-%016llx.f32", model, (unsigned long long)h);
	int fd = fc_lock(out);
	if (access(out, F_OK) != 0) {
		/* logits publishes its --out by rename: absent or whole. */
		int rc = tu_sh("'%s' logits --model '%s' --tokens \"$(cat '%s')\" --out '%s' %s >'%s.log' 2>&1",
			       tu_colibri(), model, tokens_path, out, opts, out);
		if (rc != 0) {
			char log[PATH_MAX + 16];
			snprintf(log, sizeof log, "%s.log", out);
			char *msg = tu_read(log, NULL);
			close(fd);
			cr_assert_fail("logits of %s %s over %s failed (exit %d): %s", model, opts, tokens_path, rc,
				       msg ? msg : "");
		}
	}
	close(fd);
}

/* A private copy of src (as fc_container takes it) converted with args, at
 * dest (which must not exist), for a test that changes its container or
 * counts pins, hits or misses. It holds what convert wrote: the usage.json
 * that runs on the shared container left is not copied (nor a temporary
 * of one, which a run may rename away while the copy is made). */
static inline void fc_container_copy(const char *dest, const char *src, const char *args)
{
	char c[PATH_MAX + 64];
	fc_container(c, sizeof c, src, args);
	cr_assert_eq(tu_sh("mkdir '%s' && for f in '%s'/*; do case \"${f##*/}\" in usage.json*) continue;; esac; "
			   "cp -r \"$f\" '%s'/ || exit 1; done", dest, c, dest), 0, "cannot copy %s to %s", c, dest);
}

#endif
