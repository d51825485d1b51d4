/*
 * fuzz_util — what the libFuzzer harnesses of tests/fuzz/ share: splitting
 * one input into the parts of a multi-file format, a scratch folder for
 * parsers that read files by path, a checked assertion that names what
 * broke, and a list of known, not yet fixed findings that a harness skips
 * instead of stopping on.
 *
 * Input scheme of the harnesses that need several files: the parts are
 * separated by the line FUZZ_SEP ("\n--8<--\n"); a missing part is empty.
 * A harness's opening comment says which part is which.
 */
#ifndef COLIBRI_FUZZ_UTIL_H
#define COLIBRI_FUZZ_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/files.h"

#define FUZZ_SEP "\n--8<--\n"
#define FUZZ_PARTS_MAX 16

/* Part i of an input: a pointer into it and a length. */
struct fuzz_part {
	const char *p;
	size_t n;
};

/* Splits data at each FUZZ_SEP into at most max parts (the last one keeps
 * any further separators); returns the number found, >= 1. */
static inline size_t fuzz_split(const uint8_t *data, size_t size, struct fuzz_part *parts, size_t max)
{
	const char *p = (const char *)data, *end = p + size;
	size_t n = 0, sl = strlen(FUZZ_SEP);
	while (n + 1 < max) {
		const char *s = memmem(p, (size_t)(end - p), FUZZ_SEP, sl);
		if (!s)
			break;
		parts[n++] = (struct fuzz_part){ p, (size_t)(s - p) };
		p = s + sl;
	}
	parts[n++] = (struct fuzz_part){ p, (size_t)(end - p) };
	for (size_t i = n; i < max; i++)
		parts[i] = (struct fuzz_part){ end, 0 };
	return n;
}

/* A malloc'd NUL-terminated copy of a part (content after a NUL is cut,
 * as a C string API would see it). Aborts on out of memory. */
static inline char *fuzz_strdup(struct fuzz_part part)
{
	char *s = malloc(part.n + 1);
	if (!s)
		abort();
	memcpy(s, part.p, part.n);
	s[part.n] = 0;
	return s;
}

/* Stops the run with a message that names the broken promise: libFuzzer
 * then saves the input as a crash artifact. */
__attribute__((noreturn, format(printf, 4, 5)))
static inline void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "FUZZ ASSERTION FAILED: %s:%d: %s: ", file, line, cond);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

/* FUZZ_ASSERT(cond, fmt, ...): the message says what the input broke. */
#define FUZZ_ASSERT(cond, ...)                                           \
	do {                                                             \
		if (!(cond))                                             \
			fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
	} while (0)

/*
 * A known finding that others are fixing (tests/fuzz/findings/ID.md): the
 * harness calls fuzz_known(ID) where it would otherwise fail, which counts
 * the hit, says so once, and lets the run go on. Remove the call site when
 * the fix lands, so that a regression fails again.
 */
static inline void fuzz_known(const char *id)
{
	static const char *seen[32];
	for (size_t i = 0; i < sizeof seen / sizeof seen[0]; i++) {
		if (seen[i] == id)
			return;
		if (!seen[i]) {
			seen[i] = id;
			fprintf(stderr, "fuzz: known finding %s hit (tests/fuzz/findings/%s.md), skipped\n", id, id);
			return;
		}
	}
}

/*
 * The scratch folder, made once and removed at exit. Under
 * COLIBRI_FUZZ_SCRATCH (tools/fuzz.sh sets it and removes it afterwards,
 * also after a crash, which skips atexit) it is SCRATCH/HARNESS, a name
 * that is the same on every run: the paths a harness writes reach the
 * parsers' error messages and the strcmp/strstr hooks that libFuzzer
 * turns into mutations, so a random name would make two runs from the
 * same -seed differ. Should SCRATCH/HARNESS exist already (another process
 * using the same folder), a fresh SCRATCH/HARNESS-XXXXXX is made instead.
 * Without COLIBRI_FUZZ_SCRATCH it is a fresh folder under /dev/shm, else
 * TMPDIR, else /tmp.
 */
static char fuzz_dir_path[PATH_MAX];

static inline void fuzz_dir_remove(void)
{
	if (fuzz_dir_path[0])
		dir_remove_tree(fuzz_dir_path);
}

static inline const char *fuzz_dir(void)
{
	if (fuzz_dir_path[0])
		return fuzz_dir_path;
	const char *base = getenv("COLIBRI_FUZZ_SCRATCH");
	if (base && *base) {
		snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/%s", base, program_invocation_short_name);
		if (mkdir(fuzz_dir_path, 0700) == 0) {
			atexit(fuzz_dir_remove);
			return fuzz_dir_path;
		}
		snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/%s-XXXXXX", base, program_invocation_short_name);
	} else {
		base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
		snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/colibri-fuzz-XXXXXX", base ? base : "/tmp");
	}
	if (!mkdtemp(fuzz_dir_path)) {
		perror("fuzz: mkdtemp");
		abort();
	}
	atexit(fuzz_dir_remove);
	return fuzz_dir_path;
}

/* Writes (or, for a NULL part pointer, removes) dir/name. Aborts on failure:
 * the scratch folder is the harness's own. */
static inline void fuzz_write(const char *dir, const char *name, const void *data, size_t n)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (!data) {
		unlink(path);
		return;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(path);
		abort();
	}
	const char *p = data;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w <= 0) {
			perror(path);
			abort();
		}
		p += w;
		n -= (size_t)w;
	}
	close(fd);
}

/* Root of the repository, absolute (symlinks into the scratch folder are
 * made from it): COLIBRI_REPO, else the working directory (tools/fuzz.sh
 * runs from there). */
static inline const char *fuzz_repo(void)
{
	static char root[PATH_MAX];
	const char *r = getenv("COLIBRI_REPO");
	if (!root[0] && !realpath(r && *r ? r : ".", root))
		snprintf(root, sizeof root, "%s", r && *r ? r : ".");
	return root;
}

/* Where tools/make_fixtures.sh put its output: COLIBRI_FIXTURES, else
 * build/fixtures under the repository. */
static inline const char *fuzz_fixtures(void)
{
	static char path[PATH_MAX];
	const char *f = getenv("COLIBRI_FIXTURES");
	if (f && *f)
		return f;
	snprintf(path, sizeof path, "%s/build/fixtures", fuzz_repo());
	return path;
}

#endif
