/*
 * test_util — small helpers shared by the Criterion tests: scratch folders,
 * whole-file reads and writes, running the colibri binary, and where the
 * fixtures made by tools/make_fixtures.sh live.
 */
#ifndef COLIBRI_TEST_UTIL_H
#define COLIBRI_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <stdarg.h>
#include <limits.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* Folder of generated fixtures (COLIBRI_FIXTURES, set by tools/run_tests.py). */
static inline const char *tu_fixtures(void)
{
	const char *d = getenv("COLIBRI_FIXTURES");
	return d ? d : "build/fixtures";
}

/* Root of the repository, for tools/ scripts: COLIBRI_REPO, else the
 * working directory if it holds tools/, else three levels above the test
 * binary (BUILD/tests/test_x). */
static inline const char *tu_repo(void)
{
	static char root[PATH_MAX];
	const char *r = getenv("COLIBRI_REPO");
	if (r && *r)
		return r;
	if (root[0])
		return root;
	if (access("tools", X_OK) == 0) {
		strcpy(root, ".");
		return root;
	}
	ssize_t n = readlink("/proc/self/exe", root, sizeof(root) - 1);
	root[n > 0 ? n : 0] = 0;
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(root, '/');
		if (slash)
			*slash = 0;
	}
	return root;
}

/* Path of the colibri binary under test (COLIBRI_BIN). */
static inline const char *tu_colibri(void)
{
	const char *b = getenv("COLIBRI_BIN");
	return b ? b : "./colibri";
}

/* Makes a fresh scratch folder under TMPDIR and writes its path into buf. */
static inline void tu_mkdtemp(char *buf, size_t n)
{
	const char *t = getenv("TMPDIR");
	snprintf(buf, n, "%s/colibri-test-XXXXXX", t ? t : "/tmp");
	if (!mkdtemp(buf)) {
		perror("mkdtemp");
		abort();
	}
}

static inline void tu_rmrf(const char *path)
{
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", path);
}

/* Runs a shell command built from fmt; returns its exit status (or -1). */
static inline int tu_sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	int st = system(cmd);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Reads a whole file; returns a malloc'd buffer (NUL-terminated) or NULL. */
static inline char *tu_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf) {
		buf[n] = 0;
		if (len)
			*len = (size_t)n;
	}
	return buf;
}

static inline int tu_write(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, len, f);
	return (fclose(f) == 0 && w == len) ? 0 : -1;
}

/* Whether this test binary is built with AddressSanitizer (make asan-bin,
 * GCC's macro; clang's __has_feature for the fuzz build). */
#if defined(__SANITIZE_ADDRESS__)
#define TU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_SANITIZED 1
#endif
#endif
#ifndef TU_SANITIZED
#define TU_SANITIZED 0
#endif

/* How many of n repetitions of one check (seeds, sampling settings, timing
 * rounds) a test runs: all n in the optimised build, a third of them
 * (rounded up) under the sanitizers, where every path still runs once or
 * more but each costs 4-5 times as much; the optimised pass draws them all
 * (tests/asan_subset.txt says the same of whole tests). */
static inline int tu_reps(int n)
{
	return TU_SANITIZED ? (n + 2) / 3 : n;
}

/* Deterministic pseudo-random floats in [-1, 1) for kernel tests. */
static inline float tu_randf(uint64_t *state)
{
	*state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((*state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

#endif
