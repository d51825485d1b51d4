/*
 * fuzz_jinja — the Jinja subset: jinja_template_parse (lexer and parser)
 * and jinja_template_render (evaluator, filters, tests, methods, tojson).
 *
 * Input: TEMPLATE [FUZZ_SEP VARIABLES], where VARIABLES is a JSON object
 * (absent or not JSON: no variables). The template is taken with its
 * length, NUL bytes included. Rendering runs under limits smaller than the
 * defaults (64 KiB output, 4 MiB memory, 50000 steps) so that each input
 * costs milliseconds, which also checks that every loop is bounded. With
 * 1 MiB / 16 MiB / 200000 a grown corpus spent most of its time upper-
 * casing and copying megabyte strings: 416 exec/s against 1250 now, on the
 * same 2,910-input corpus, for 6 edges of 6,175 (perf, 15,000 runs).
 * Beyond "no crash":
 *   - a failure is -EINVAL, -E2BIG or -ENOMEM with a message, and a parse
 *     error names a line and a column inside the template;
 *   - a success is a NUL-terminated buffer of the length it reports, within
 *     the output limit;
 *   - a template renders the same bytes (or the same error) twice.
 */
#include <stdbool.h>

#include "engine/text/jinja.h"
#include "tests/fuzz/fuzz_util.h"

static const struct jinja_limits limits = {
	.output_bytes_max = 64 << 10,
	.memory_bytes_max = 4 << 20,
	.depth_max = 32,
	.steps_max = 50000,
};

static int render(const struct jinja_template *t, const cJSON *vars, char **out, size_t *len, struct jinja_error *err)
{
	struct jinja_render_options o = { .limits = &limits, .now = 1700000000 };
	int rc = jinja_template_render(t, vars, &o, out, len, err);
	if (rc) {
		FUZZ_ASSERT(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM, "render failed with %d", rc);
		FUZZ_ASSERT(err->msg[0], "render failure %d without a message", rc);
		FUZZ_ASSERT(!*out, "a failed render left output");
	} else {
		FUZZ_ASSERT(*out && (*out)[*len] == 0 && *len <= limits.output_bytes_max, "output of %zu bytes", *len);
	}
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_part parts[2];
	fuzz_split(data, size, parts, 2);
	struct jinja_template *t;
	struct jinja_error err;
	int rc = jinja_template_parse(&t, parts[0].p, parts[0].n, &err);
	if (rc) {
		FUZZ_ASSERT(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM, "parse failed with %d", rc);
		FUZZ_ASSERT(err.msg[0], "parse failure %d without a message", rc);
		FUZZ_ASSERT(rc == -ENOMEM || (err.line >= 1 && err.col >= 1), "parse error without a place: %s", err.msg);
		return 0;
	}
	cJSON *vars = parts[1].n ? cJSON_ParseWithLength(parts[1].p, parts[1].n) : NULL;
	char *a = NULL, *b = NULL;
	size_t la = 0, lb = 0;
	struct jinja_error e2;
	int r1 = render(t, vars, &a, &la, &err), r2 = render(t, vars, &b, &lb, &e2);
	FUZZ_ASSERT(r1 == r2, "two renders returned %d and %d", r1, r2);
	if (r1 == 0)
		FUZZ_ASSERT(la == lb && memcmp(a, b, la) == 0, "two renders differ");
	else
		FUZZ_ASSERT(strcmp(err.msg, e2.msg) == 0 && err.line == e2.line, "two renders failed differently");
	free(a);
	free(b);
	cJSON_Delete(vars);
	jinja_template_free(t);
	return 0;
}
