/*
 * stderr_capture — what a test's own process writes to stderr, captured
 * into a scratch file so that the test can count warning lines (the store
 * tests: one line per fallback, per failed copy), then echoed so the
 * test's log still shows it. Failures fail the calling test.
 */
#ifndef COLIBRI_TESTS_STDERR_CAPTURE_H
#define COLIBRI_TESTS_STDERR_CAPTURE_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test_util.h"

struct stderr_capture {
	int saved;       /* the real stderr, restored at the end */
	char path[64];
};

/* Sends stderr into a new scratch file until stderr_capture_end. */
static inline void stderr_capture_begin(struct stderr_capture *c)
{
	snprintf(c->path, sizeof c->path, "/tmp/colibri-stderr-XXXXXX");
	int fd = mkstemp(c->path);
	cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
	fflush(stderr);
	c->saved = dup(2);
	cr_assert(c->saved >= 0 && dup2(fd, 2) == 2);
	close(fd);
}

/* Restores stderr, echoes what was captured and returns it (the caller
 * frees); the scratch file is removed. */
static inline char *stderr_capture_end(struct stderr_capture *c)
{
	fflush(stderr);
	dup2(c->saved, 2);
	close(c->saved);
	char *text = tu_read(c->path, NULL);
	unlink(c->path);
	cr_assert_not_null(text);
	fputs(text, stderr);
	return text;
}

/* How many times needle occurs in text (not overlapping). */
static inline int stderr_count(const char *text, const char *needle)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

#endif
