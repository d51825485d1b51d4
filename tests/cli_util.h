/*
 * cli_util — running colibri commands with their own cache folder and
 * reading the JSON they write, for the tests of the command-line front end.
 * Failures to read or parse fail the calling test.
 */
#ifndef COLIBRI_TESTS_CLI_UTIL_H
#define COLIBRI_TESTS_CLI_UTIL_H

#include <criterion/criterion.h>
#include <cjson/cJSON.h>

#include "tests/test_util.h"

/* Runs colibri with the arguments fmt builds and COLIBRI_CACHE_DIR=cache;
 * stdout goes into out, stderr into out.err. Returns the exit status (or -1). */
static inline int cli_run(const char *cache, const char *out, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline int cli_run(const char *cache, const char *out, const char *fmt, ...)
{
	char args[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	return tu_sh("COLIBRI_CACHE_DIR='%s' '%s' %s >'%s' 2>'%s.err'", cache, tu_colibri(), args, out, out);
}

/* The stderr that cli_run saved next to out (malloc'd), or NULL. */
static inline char *cli_read_err(const char *out)
{
	char path[8200];
	snprintf(path, sizeof path, "%s.err", out);
	return tu_read(path, NULL);
}

/* Parses the JSON file at path; the caller frees it with cJSON_Delete. */
static inline cJSON *cli_json_read(const char *path)
{
	char *text = tu_read(path, NULL);
	cr_assert_not_null(text, "%s missing", path);
	cJSON *j = cJSON_Parse(text);
	cr_assert_not_null(j, "%s is not JSON: %s", path, text);
	free(text);
	return j;
}

/* The number at a dotted path of keys ("budget.bytes") below o. */
static inline double cli_json_num(const cJSON *o, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	const cJSON *v = o;
	for (char *save, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
		v = cJSON_GetObjectItemCaseSensitive(v, k);
	cr_assert(cJSON_IsNumber(v), "%s is not a number", path);
	return v->valuedouble;
}

#endif
