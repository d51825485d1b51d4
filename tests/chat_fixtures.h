/*
 * chat_fixtures — the released chat templates of tests/chat_templates and
 * what Jinja2 renders from them (expected.json), for the tests that read
 * them. Failures to read fail the calling test.
 */
#ifndef COLIBRI_TESTS_CHAT_FIXTURES_H
#define COLIBRI_TESTS_CHAT_FIXTURES_H

#include "tests/cli_util.h"
#include "tests/test_util.h"

/* The text of tests/chat_templates/FILE, malloc'd. */
static inline char *chat_fixture_template(const char *file)
{
	char path[PATH_MAX];
	size_t n;
	snprintf(path, sizeof path, "%s/tests/chat_templates/%s", tu_repo(), file);
	char *t = tu_read(path, &n);
	cr_assert(t, "%s is missing", path);
	return t;
}

/* tests/chat_templates/expected.json, parsed (cJSON_Delete it). */
static inline cJSON *chat_fixture_expected(void)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/tests/chat_templates/expected.json", tu_repo());
	return cli_json_read(path);
}

#endif
