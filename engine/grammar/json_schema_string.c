/*
 * json_schema_string — string schemas (minLength / maxLength, format,
 * pattern through the regex translator of json_schema_regex.c, a pattern
 * the grammar engine cannot hold warned and not enforced), and the count
 * keywords and repetition bounds strings and arrays share.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema_internal.h"

/* Reads a non-negative integer keyword; -1 when absent or too large (then warned). */
long js_count_get(struct gen *g, const cJSON *s, const char *key, const char *path)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
	if (!v)
		return -1;
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
		js_fail(g, EINVAL, "\"%s\" at %s is not a non-negative integer", key, js_at(path));
		return -1;
	}
	if (v->valuedouble > JSON_SCHEMA_REPEAT_MAX) {
		js_warn(g, "\"%s\" %.0f at %s is above %d; not enforced", key, v->valuedouble, js_at(path),
		     JSON_SCHEMA_REPEAT_MAX);
		return -1;
	}
	return (long)v->valuedouble;
}

/* "{m,n}" / "{m,}" / "*" for a count range; n < 0 is unbounded. */
const char *js_repeat(struct gen *g, long m, long n)
{
	if (m <= 0 && n < 0)
		return "*";
	if (m == 1 && n < 0)
		return "+";
	if (m <= 0 && n == 1)
		return "?";
	if (n < 0)
		return js_fmt(g, "{%ld,}", m);
	if (m == n)
		return js_fmt(g, "{%ld}", m);
	return js_fmt(g, "{%ld,%ld}", m < 0 ? 0 : m, n);
}

/*
 * Whether a pattern's grammar e compiles on its own. The translator writes
 * only what GBNF can say, but the grammar engine has limits of its own (its
 * element count, left recursion), and a pattern beyond them is warned and
 * left unenforced like any other refused pattern instead of failing the
 * whole schema. why gets the engine's message without its position, which
 * is in this trial text and not in the schema.
 */
static bool pattern_compiles(struct gen *g, const char *e, char *why, size_t why_len)
{
	struct strbuf b = { 0 };
	strbuf_printf(&b, "root ::= %s\n%s ::= %s\n", e, js_prim_name[PRIM_CHAR], js_prim_body[PRIM_CHAR]);
	struct grammar *gr = NULL;
	char err[160] = "";
	int rc = b.rc ? -ENOMEM : grammar_parse(&gr, b.p, b.len, "root", err, sizeof err);
	strbuf_free(&b);
	grammar_free(gr);
	if (rc == -ENOMEM)
		js_fail(g, ENOMEM, "out of memory");
	if (rc == 0 || rc == -ENOMEM)
		return true;
	const char *msg = strstr(err, ": ");
	snprintf(why, why_len, "what the grammar engine refuses (%s)", msg ? msg + 2 : err);
	return false;
}

const char *js_visit_string(struct gen *g, const cJSON *s, const char *path)
{
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
	const cJSON *form = cJSON_GetObjectItemCaseSensitive(s, "format");
	long mn = js_count_get(g, s, "minLength", path), mx = js_count_get(g, s, "maxLength", path);
	if (g->rc)
		return NULL;
	if (mn >= 0 && mx >= 0 && mn > mx) {
		js_fail(g, EINVAL, "minLength > maxLength at %s", js_at(path));
		return NULL;
	}
	bool lengths = mn > 0 || mx >= 0;
	if (pat) {
		if (!cJSON_IsString(pat)) {
			js_fail(g, EINVAL, "\"pattern\" at %s is not a string", js_at(path));
			return NULL;
		}
		const char *why = NULL;
		char refused[200];
		const char *e = js_pattern_gbnf(g, pat->valuestring, &why);
		if (e && !pattern_compiles(g, e, refused, sizeof refused)) {
			why = refused;
			e = NULL;
		}
		if (g->rc)
			return NULL;
		if (e) {
			if (form)
				js_warn(g, "\"format\" beside \"pattern\" at %s is not enforced", js_at(path));
			if (lengths)
				js_warn(g, "\"minLength\" / \"maxLength\" beside \"pattern\" at %s are not enforced",
				     js_at(path));
			return js_fmt(g, "\"\\\"\" %s \"\\\"\"", e);
		}
		js_warn(g, "\"pattern\" at %s has %s; not enforced (any string)", js_at(path), why);
	}
	if (form) {
		if (!cJSON_IsString(form)) {
			js_fail(g, EINVAL, "\"format\" at %s is not a string", js_at(path));
			return NULL;
		}
		static const struct {
			const char *name;
			enum prim p;
		} formats[] = {
			{ "date", PRIM_DATE }, { "time", PRIM_TIME }, { "date-time", PRIM_DATE_TIME },
			{ "uuid", PRIM_UUID }, { "ipv4", PRIM_IPV4 },
		};
		for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
			if (!strcmp(form->valuestring, formats[i].name)) {
				if (lengths)
					js_warn(g, "\"minLength\" / \"maxLength\" beside \"format\" at %s are not enforced",
					     js_at(path));
				return js_fmt(g, "\"\\\"\" %s \"\\\"\"", js_prim(g, formats[i].p));
			}
		}
		js_warn(g, "format \"%s\" at %s is not enforced", form->valuestring, js_at(path));
	}
	if (!lengths)
		return js_prim(g, PRIM_STRING);
	return js_fmt(g, "\"\\\"\" %s%s \"\\\"\"", js_prim(g, PRIM_CHAR), js_repeat(g, mn, mx));
}
