/*
 * test_jinja — the Jinja subset (engine/text/jinja*.c) on its own:
 *   - every case of tests/jinja/cases.json (written by tools/jinja_fixtures.py
 *     from tools/jinja_cases.py): each construct, filter, test and method,
 *     whitespace control, scoping, Python's arithmetic and printing, and the
 *     errors, rendered with Jinja2 3.1 under Hugging Face's settings; our
 *     render must be byte for byte the same, and where Jinja2 fails we must
 *     fail too, with the same text when the template raised it;
 *   - hostile templates (deep nesting, huge loops, recursion through macros,
 *     growing strings and values, unterminated blocks) are refused with a
 *     message and a line and column, quickly, under the default limits;
 *   - the limits and the render options (pinned strftime_now).
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <time.h>

#include "tests/test_util.h"
#include "engine/text/jinja.h"

/* Parses and renders src with vars (JSON text or NULL); returns the rc, the output in *out. */
static int render(const char *src, const char *vars, const struct jinja_limits *lim, char **out,
		  struct jinja_error *err)
{
	struct jinja_template *t;
	*out = NULL;
	int rc = jinja_template_parse(&t, src, strlen(src), err);
	if (rc)
		return rc;
	cJSON *v = vars ? cJSON_Parse(vars) : NULL;
	struct jinja_render_options o = { .limits = lim, .now = 1700000000 };
	size_t len;
	rc = jinja_template_render(t, v, &o, out, &len, err);
	if (rc == 0)
		cr_expect_eq(strlen(*out), len);
	cJSON_Delete(v);
	jinja_template_free(t);
	return rc;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

Test(jinja, cases_match_jinja2)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/tests/jinja/cases.json", tu_repo());
	size_t n;
	char *text = tu_read(path, &n);
	cr_assert(text, "%s is missing", path);
	cJSON *root = cJSON_Parse(text);
	cr_assert(root, "%s is not JSON", path);
	time_t now = (time_t)cJSON_GetObjectItem(root, "now")->valuedouble;
	size_t same = 0, failed_too = 0, total = 0;
	const cJSON *c;
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
		const char *src = cJSON_GetStringValue(cJSON_GetObjectItem(c, "template"));
		const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "expected"));
		const char *want_err = cJSON_GetStringValue(cJSON_GetObjectItem(c, "error"));
		bool raised = cJSON_IsTrue(cJSON_GetObjectItem(c, "raised"));
		struct jinja_template *t = NULL;
		struct jinja_error err;
		char *out = NULL;
		size_t len = 0;
		total++;
		int rc = jinja_template_parse(&t, src, strlen(src), &err);
		if (rc == 0) {
			struct jinja_render_options o = { .now = now };
			rc = jinja_template_render(t, cJSON_GetObjectItem(c, "vars"), &o, &out, &len, &err);
		}
		if (want) {
			cr_expect_eq(rc, 0, "%s: fails (line %d, column %d: %s) where Jinja2 renders", name, err.line, err.col,
				     err.msg);
			if (rc == 0) {
				cr_expect(len == strlen(want) && memcmp(out, want, len) == 0,
					  "%s:\n  ours:   [%s]\n  Jinja2: [%s]", name, out, want);
				same += len == strlen(want) && memcmp(out, want, len) == 0;
			}
		} else {
			cr_expect_neq(rc, 0, "%s: renders [%s] where Jinja2 fails (%s)", name, out ? out : "", want_err);
			if (rc != 0) {
				cr_expect(err.msg[0], "%s: failure without a message", name);
				if (raised) {
					cr_expect(err.raised, "%s: not reported as raised by the template", name);
					cr_expect_str_eq(err.msg, want_err, "%s: the raised message differs", name);
				}
				failed_too++;
			}
		}
		free(out);
		jinja_template_free(t);
	}
	fprintf(stderr, "jinja: %zu of %zu cases render as Jinja2 does, %zu fail as it does\n", same, total, failed_too);
	cr_expect_eq(same + failed_too, total);
	cJSON_Delete(root);
	free(text);
}

/* A refused hostile template: the expected rc, a message naming the problem, a place, and soon. */
static void expect_refused(const char *what, const char *src, int code, const char *msg_part, int line)
{
	struct jinja_error err;
	char *out;
	double t0 = now_s();
	int rc = render(src, NULL, NULL, &out, &err);
	double took = now_s() - t0;
	cr_expect_eq(rc, code, "%s: rc %d (%s), expected %d", what, rc, err.msg, code);
	cr_expect(strstr(err.msg, msg_part), "%s: message \"%s\" lacks \"%s\"", what, err.msg, msg_part);
	if (line)
		cr_expect(err.line == line && err.col > 0, "%s: at line %d column %d, expected line %d", what, err.line,
			  err.col, line);
	cr_expect(took < 10, "%s: took %.1f s", what, took);
	free(out);
}

/* s repeated n times, malloc'd. */
static char *repeat(const char *s, size_t n)
{
	size_t k = strlen(s);
	char *p = malloc(k * n + 1);
	for (size_t i = 0; i < n; i++)
		memcpy(p + i * k, s, k);
	p[k * n] = 0;
	return p;
}

Test(jinja, hostile_templates_are_refused)
{
	char *parens = repeat("(", 100000), *src = malloc(strlen(parens) + 16);
	sprintf(src, "{{ %s1 }}", parens);
	expect_refused("100000 nested parentheses", src, -E2BIG, "nested", 1);
	free(src);
	free(parens);

	char *ifs = repeat("{% if true %}", 5000);
	expect_refused("5000 nested ifs", ifs, -E2BIG, "nest", 1);
	free(ifs);

	char *nots = repeat("not ", 50000), *src2 = malloc(strlen(nots) + 16);
	sprintf(src2, "{{ %s1 }}", nots);
	expect_refused("50000 nots", src2, -E2BIG, "nest", 1);
	free(src2);
	free(nots);

	char *lists = repeat("[", 100), *src3 = malloc(200);
	snprintf(src3, 200, "{{ %s }}", lists);
	expect_refused("brackets deeper than the lexer's stack", src3, -E2BIG, "brackets", 1);
	free(src3);
	free(lists);

	expect_refused("nested loops of 10^10 iterations",
		       "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}", -E2BIG,
		       "steps", 0);
	expect_refused("infinite macro recursion", "{% macro f() %}{{ f() }}{% endmacro %}\n{{ f() }}", -E2BIG,
		       "macro calls nest", 1);
	expect_refused("mutual macro recursion",
		       "{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n + 1) }}{% endmacro %}{{ a(0) }}", -E2BIG,
		       "macro calls nest", 1);
	expect_refused("a string doubled in a loop",
		       "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", -E2BIG,
		       "bytes", 0);
	expect_refused("string repetition beyond memory", "{{ 'abc' * 100000000000 }}", -E2BIG, "memory", 1);
	expect_refused("output beyond 16 MiB", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", -E2BIG,
		       "output", 1);
	expect_refused("a value nested 100000 deep",
		       "{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}"
		       "{{ ns.v|tojson }}", -E2BIG, "nested", 1);
	expect_refused("the same value compared", "{% set ns = namespace(v=[]) %}{% for i in range(2000) %}"
		       "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v == ns.v }}", -E2BIG, "nested", 1);
	expect_refused("range beyond the sandbox", "{{ range(10**9)|list }}", -E2BIG, "Range too big", 1);
	expect_refused("integer overflow", "{{ 2 ** 64 }}", -EINVAL, "overflow", 1);
	expect_refused("unterminated for", "line one\n{% for x in y %}\nbody", -EINVAL, "endfor", 2);
	expect_refused("unterminated if in a macro", "{% macro m() %}\n  {% if x %}\n{% endmacro %}", -EINVAL, "endif", 3);
	expect_refused("unterminated tag", "a\nb {{ x", -EINVAL, "not closed", 2);
	expect_refused("unterminated raw", "{% raw %}abc", -EINVAL, "raw", 1);
	expect_refused("unterminated comment", "x\n{# ...", -EINVAL, "comment", 2);
	expect_refused("a call block", "{% call m() %}x{% endcall %}", -EINVAL, "not supported", 1);
	expect_refused("a recursive loop", "{% for x in y recursive %}{% endfor %}", -EINVAL, "recursive", 1);
	expect_refused("a non-ASCII name", "{{ café }}", -EINVAL, "unexpected character", 1);
}

Test(jinja, error_positions)
{
	struct jinja_error err;
	char *out;
	cr_expect_eq(render("a\nb\n  {{ 1 + x }}", NULL, NULL, &out, &err), -EINVAL);
	cr_expect(err.line == 3 && err.col == 8 && strstr(err.msg, "'x' is undefined"), "%d:%d %s", err.line, err.col,
		  err.msg);
	cr_expect_eq(render("{% for m in messages %}\n{{ m.content.strip() }}{% endfor %}",
			    "{\"messages\": [{\"content\": null}]}", NULL, &out, &err), -EINVAL);
	cr_expect(err.line == 2 && strstr(err.msg, "'None' has no attribute 'strip'"), "%d:%d %s", err.line, err.col,
		  err.msg);
	cr_expect_eq(render("ok\n{{ x | nope }}", NULL, NULL, &out, &err), -EINVAL);
	cr_expect(err.line == 2 && err.col == 8 && strstr(err.msg, "No filter named 'nope'"), "%d:%d %s", err.line,
		  err.col, err.msg);
	cr_expect_eq(render("{{ raise_exception('stop here') }}", NULL, NULL, &out, &err), -EINVAL);
	cr_expect(err.raised && strcmp(err.msg, "stop here") == 0, "%s", err.msg);
}

/*
 * A raised message is the template's text, but the error carries it as a C
 * string: a NUL in it (the literal's '\0' escape) must not cut it short,
 * and one at the start must not leave the user an empty error (fuzz_jinja
 * found "render failure -22 without a message" this way). An empty message
 * is replaced by a sentence saying the template raised an error.
 */
Test(jinja, raised_messages_are_never_empty)
{
	struct jinja_error err;
	char *out = NULL;
	cr_expect_eq(render("{{ raise_exception('\\0boom') }}", NULL, NULL, &out, &err), -EINVAL);
	cr_expect_null(out);
	cr_expect(err.raised, "a NUL-led message was not reported as raised: %s", err.msg);
	cr_expect_str_eq(err.msg, "\\x00boom");
	cr_expect_eq(render("{{ raise_exception('a\\0b\\0') }}", NULL, NULL, &out, &err), -EINVAL);
	cr_expect(err.raised);
	cr_expect_str_eq(err.msg, "a\\x00b\\x00");
	cr_expect_eq(render("{{ raise_exception('') }}", NULL, NULL, &out, &err), -EINVAL);
	cr_expect(err.raised, "an empty message was not reported as raised: %s", err.msg);
	cr_expect(err.msg[0] && strstr(err.msg, "raised an error"), "%s", err.msg);

	/* A long message full of NULs stays a bounded, terminated string. */
	char src[2048];
	size_t n = (size_t)snprintf(src, sizeof src, "{{ raise_exception('");
	for (int i = 0; i < 300; i++)
		n += (size_t)snprintf(src + n, sizeof src - n, "\\0");
	snprintf(src + n, sizeof src - n, "') }}");
	cr_expect_eq(render(src, NULL, NULL, &out, &err), -EINVAL);
	cr_expect(err.raised);
	size_t len = strnlen(err.msg, sizeof err.msg);
	cr_expect(len > 0 && len < sizeof err.msg, "message of %zu bytes", len);
	cr_expect_eq(len % 4, 0, "a \\x00 escape was cut: %s", err.msg);
	cr_expect(strncmp(err.msg, "\\x00\\x00", 8) == 0, "%s", err.msg);
}

Test(jinja, limits_and_options)
{
	struct jinja_error err;
	char *out;
	struct jinja_limits small = jinja_limits_default;
	small.output_bytes_max = 10;
	cr_expect_eq(render("{{ 'x' * 11 }}", NULL, &small, &out, &err), -E2BIG);
	cr_expect_eq(render("{{ 'x' * 10 }}", NULL, &small, &out, &err), 0);
	free(out);
	small = jinja_limits_default;
	small.steps_max = 100;
	cr_expect_eq(render("{% for i in range(1000) %}{% endfor %}", NULL, &small, &out, &err), -E2BIG);
	small = jinja_limits_default;
	small.depth_max = 3;
	cr_expect_eq(render("{% macro f(n) %}{{ n }}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(2) }}", NULL,
			    &small, &out, &err), 0);
	cr_expect_str_eq(out, "210");
	free(out);
	cr_expect_eq(render("{% macro f(n) %}{{ n }}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", NULL,
			    &small, &out, &err), -E2BIG);
	small = jinja_limits_default;
	small.memory_bytes_max = 1 << 16;
	cr_expect_eq(render("{{ 'x' * 100000 }}", NULL, &small, &out, &err), -E2BIG);
	cr_expect(strstr(err.msg, "memory"), "%s", err.msg);

	/* strftime_now formats the pinned time in local time, as Python's datetime.now() */
	cr_expect_eq(render("{{ strftime_now('%Y-%m-%d %H:%M') }}", NULL, NULL, &out, &err), 0);
	time_t now = 1700000000;
	struct tm tm;
	char want[64];
	localtime_r(&now, &tm);
	strftime(want, sizeof want, "%Y-%m-%d %H:%M", &tm);
	cr_expect_str_eq(out, want);
	free(out);

	/* a template may be rendered many times and by several callers: the tree is not changed */
	struct jinja_template *t;
	cr_assert_eq(jinja_template_parse(&t, "{% set x = [1] %}{{ x + [2] }}", 30, &err), 0);
	for (int i = 0; i < 3; i++) {
		size_t len;
		cr_assert_eq(jinja_template_render(t, NULL, NULL, &out, &len, &err), 0);
		cr_expect_str_eq(out, "[1, 2]");
		free(out);
	}
	jinja_template_free(t);

	/* input JSON: integral numbers are ints, others floats, null is None */
	cr_expect_eq(render("{{ a }} {{ b }} {{ c }} {{ d is none }} {{ e|tojson }}",
			    "{\"a\": 3, \"b\": 2.5, \"c\": 1e300, \"d\": null, \"e\": {\"k\": [true, \"é\"]}}", NULL, &out,
			    &err), 0);
	cr_expect_str_eq(out, "3 2.5 1e+300 True {\"k\": [true, \"é\"]}");
	free(out);
}
