/*
 * test_json_schema — JSON Schema to GBNF (engine/grammar/json_schema.c), run
 * through the grammar engine (grammar.h):
 *   - the corpus every tests/schemas/NAME.json (tool parameters, nested objects,
 *     arrays of objects, enums, recursive $ref, formats, numeric ranges,
 *     patterns, anyOf, additionalProperties variants): each converts with
 *     exactly the warnings listed, the grammar compiles, every valid sample
 *     (compact and pretty-printed, fed whole and byte by byte) is accepted
 *     and every invalid one rejected. The samples' validity is checked
 *     against the jsonschema package by tests/schemas/check.py (offline);
 *   - integer and number ranges against arithmetic on every value of a grid;
 *   - string patterns against PCRE2 on a set of candidate strings;
 *   - warnings naming each unsupported keyword, refused regex features,
 *     and a pattern beyond the grammar engine's limits (any string, as serve
 *     then answers with a warning, not a 400);
 *   - errors for invalid, unsatisfiable, cyclic, deep and huge schemas, and
 *     schemas too wide for the matcher refused at compile time, quickly;
 *   - json_object mode and the whitespace bound.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <time.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tests/test_util.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#include "base/strbuf.h"
#include "engine/decode/constrain.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"

/* Converts and compiles schema text; NULL grammar when either fails (rc says which). */
struct conv {
	int rc;			/* of json_schema_to_gbnf */
	char *gbnf;
	struct grammar *g;
	struct json_schema_warnings w;
	char err[512];
};

static void conv_run(struct conv *c, const cJSON *schema, const struct json_schema_options *o)
{
	memset(c, 0, sizeof *c);
	c->rc = json_schema_to_gbnf(schema, o, &c->gbnf, &c->w, c->err, sizeof c->err);
	if (c->rc)
		return;
	char gerr[512];
	int grc = grammar_parse(&c->g, c->gbnf, strlen(c->gbnf), NULL, gerr, sizeof gerr);
	cr_assert_eq(grc, 0, "grammar does not compile: %s\n%s", gerr, c->gbnf);
}

static void conv_text(struct conv *c, const char *schema, const struct json_schema_options *o)
{
	cJSON *s = cJSON_Parse(schema);
	cr_assert(s, "bad test schema %s", schema);
	conv_run(c, s, o);
	cJSON_Delete(s);
}

static void conv_free(struct conv *c)
{
	grammar_free(c->g);
	free(c->gbnf);
	json_schema_warnings_free(&c->w);
}

/* Whether g accepts exactly text; fed whole, or byte by byte when bytewise. */
static bool accepts(const struct grammar *g, const char *text, size_t n, bool bytewise)
{
	struct grammar_state *s;
	cr_assert_eq(grammar_state_new(&s, g), 0);
	int rc = 0;
	if (bytewise) {
		for (size_t i = 0; i < n && !rc; i++)
			rc = grammar_state_advance(s, text + i, 1);
	} else {
		rc = grammar_state_advance(s, text, n);
	}
	cr_assert(rc == 0 || rc == -EILSEQ, "advance: %d", rc);
	bool ok = rc == 0 && grammar_state_accepting(s);
	grammar_state_free(s);
	return ok;
}

static bool accepts_str(const struct grammar *g, const char *text)
{
	bool whole = accepts(g, text, strlen(text), false);
	cr_expect_eq(whole, accepts(g, text, strlen(text), true), "bytewise differs on %s", text);
	return whole;
}

static bool has_warning(const struct json_schema_warnings *w, const char *text)
{
	for (size_t i = 0; i < w->count; i++)
		if (strstr(w->msg[i], text))
			return true;
	return false;
}

static void dump_warnings(const struct json_schema_warnings *w)
{
	for (size_t i = 0; i < w->count; i++)
		fprintf(stderr, "  warning: %s\n", w->msg[i]);
}

/* Checks each value of docs (compact and pretty) against want; returns the count. */
static size_t check_docs(const struct conv *c, const char *file, const cJSON *docs, bool want)
{
	size_t n = 0;
	const cJSON *d;
	cJSON_ArrayForEach(d, docs) {
		char *forms[2] = { cJSON_PrintUnformatted(d), cJSON_Print(d) };
		for (int f = 0; f < 2; f++) {
			cr_expect_eq(accepts_str(c->g, forms[f]), want, "%s: %s %s\n%s", file,
				     want ? "rejects valid" : "accepts invalid", forms[f], c->gbnf);
			free(forms[f]);
			n++;
		}
	}
	return n;
}

static size_t check_texts(const struct conv *c, const char *file, const cJSON *texts, bool want)
{
	size_t n = 0;
	const cJSON *t;
	cJSON_ArrayForEach(t, texts) {
		cr_assert(cJSON_IsString(t));
		cr_expect_eq(accepts_str(c->g, t->valuestring), want, "%s: %s text %s\n%s", file,
			     want ? "rejects valid" : "accepts", t->valuestring, c->gbnf);
		n++;
	}
	return n;
}

/* The next schema file of the corpus (tests/schemas/NAME.json) in dp,
 * parsed, its file name in name; NULL after the last. */
static cJSON *corpus_next(DIR *dp, const char *dir, char *name, size_t n)
{
	struct dirent *e;
	while ((e = readdir(dp))) {
		size_t len = strlen(e->d_name);
		if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
			continue;
		char path[PATH_MAX * 2];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		char *text = tu_read(path, NULL);
		cJSON *root = text ? cJSON_Parse(text) : NULL;
		free(text);
		cr_assert(root, "%s is not JSON", path);
		snprintf(name, n, "%s", e->d_name);
		return root;
	}
	return NULL;
}

Test(json_schema, corpus)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/tests/schemas", tu_repo());
	DIR *dp = opendir(dir);
	cr_assert(dp, "%s is missing", dir);
	size_t files = 0, good = 0, bad = 0;
	char name[256];
	cJSON *root;
	while ((root = corpus_next(dp, dir, name, sizeof name))) {
		struct json_schema_options o = {
			.strict = cJSON_IsTrue(cJSON_GetObjectItem(root, "strict")),
		};
		struct conv c;
		conv_run(&c, cJSON_GetObjectItem(root, "schema"), &o);
		cr_assert_eq(c.rc, 0, "%s: %s", name, c.err);
		const cJSON *want = cJSON_GetObjectItem(root, "warnings"), *w;
		cJSON_ArrayForEach(w, want)
			cr_expect(has_warning(&c.w, w->valuestring), "%s: no warning \"%s\"", name,
				  w->valuestring);
		if (c.w.count != (size_t)cJSON_GetArraySize(want)) {
			dump_warnings(&c.w);
			cr_expect_eq(c.w.count, (size_t)cJSON_GetArraySize(want), "%s: warnings", name);
		}
		good += check_docs(&c, name, cJSON_GetObjectItem(root, "valid"), true);
		good += check_docs(&c, name, cJSON_GetObjectItem(root, "grammar_accepts"), true);
		good += check_texts(&c, name, cJSON_GetObjectItem(root, "valid_text"), true);
		bad += check_docs(&c, name, cJSON_GetObjectItem(root, "invalid"), false);
		bad += check_docs(&c, name, cJSON_GetObjectItem(root, "grammar_rejects"), false);
		bad += check_texts(&c, name, cJSON_GetObjectItem(root, "rejects_text"), false);
		conv_free(&c);
		cJSON_Delete(root);
		files++;
	}
	closedir(dp);
	cr_expect_geq(files, 30, "only %zu schemas in the corpus", files);
	fprintf(stderr, "json_schema corpus: %zu schemas, %zu accepted and %zu rejected samples\n", files,
		good, bad);
}

/* Every integer of a window around [lo, hi] matches exactly when inside. */
static void check_int_range(const char *schema, double lo, double hi, bool lo_excl, bool hi_excl,
			    long from, long to, bool integer)
{
	struct conv c;
	conv_text(&c, schema, NULL);
	cr_assert_eq(c.rc, 0, "%s: %s", schema, c.err);
	for (long v = from; v <= to; v++) {
		char buf[32];
		snprintf(buf, sizeof buf, "%ld", v);
		bool in = (lo_excl ? v > lo : v >= lo) && (hi_excl ? v < hi : v <= hi);
		cr_expect_eq(accepts(c.g, buf, strlen(buf), false), in, "%s: %s\n%s", schema, buf, c.gbnf);
		if (!integer) {
			static const char *const fr[] = { ".0", ".5", ".05", ".999", ".000", ".25" };
			for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) {
				char d[48];
				snprintf(d, sizeof d, "%ld%s", v, fr[i]);
				double x = strtod(d, NULL);
				bool din = (lo_excl ? x > lo : x >= lo) && (hi_excl ? x < hi : x <= hi);
				if (v == 0 && d[0] != '-' && x == 0 && lo == 0 && lo_excl)
					din = false;
				cr_expect_eq(accepts(c.g, d, strlen(d), false), din, "%s: %s\n%s", schema, d,
					     c.gbnf);
			}
		}
	}
	conv_free(&c);
}

Test(json_schema, integer_ranges_exact)
{
	check_int_range("{\"type\":\"integer\",\"minimum\":0,\"maximum\":0}", 0, 0, 0, 0, -20, 20, true);
	check_int_range("{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", 7, 7, 0, 0, -20, 30, true);
	check_int_range("{\"type\":\"integer\",\"minimum\":1,\"maximum\":5}", 1, 5, 0, 0, -20, 30, true);
	check_int_range("{\"type\":\"integer\",\"minimum\":-273,\"maximum\":1000}", -273, 1000, 0, 0, -1200, 1200, true);
	check_int_range("{\"type\":\"integer\",\"minimum\":17,\"maximum\":4321}", 17, 4321, 0, 0, 0, 5000, true);
	check_int_range("{\"type\":\"integer\",\"minimum\":-999,\"maximum\":-100}", -999, -100, 0, 0, -1100, 100, true);
	check_int_range("{\"type\":\"integer\",\"minimum\":95}", 95, INFINITY, 0, 0, -10, 12000, true);
	check_int_range("{\"type\":\"integer\",\"maximum\":-37}", -INFINITY, -37, 0, 0, -12000, 50, true);
	check_int_range("{\"type\":\"integer\",\"maximum\":250}", -INFINITY, 250, 0, 0, -300, 1100, true);
	check_int_range("{\"type\":\"integer\",\"exclusiveMinimum\":-5,\"exclusiveMaximum\":99}", -5, 99, 1, 1, -300, 300, true);
	check_int_range("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":9.5}", 1.5, 9.5, 0, 0, -30, 30, true);
	check_int_range("{\"type\":\"integer\",\"minimum\":100,\"maximum\":9999}", 100, 9999, 0, 0, 0, 10100, true);
	check_int_range("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", 0, 1, 0, 0, -3, 3, false);
	check_int_range("{\"type\":\"number\",\"minimum\":-90,\"maximum\":90}", -90, 90, 0, 0, -120, 120, false);
	check_int_range("{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", 0, 10, 1, 1, -15, 15, false);
	check_int_range("{\"type\":\"number\",\"exclusiveMinimum\":-3,\"maximum\":12}", -3, 12, 1, 0, -15, 15, false);
	check_int_range("{\"type\":\"number\",\"minimum\":5}", 5, INFINITY, 0, 0, -15, 150, false);
	check_int_range("{\"type\":\"number\",\"exclusiveMaximum\":-2}", -INFINITY, -2, 0, 1, -150, 15, false);
	check_int_range("{\"type\":\"number\",\"exclusiveMinimum\":0}", 0, INFINITY, 1, 0, -15, 15, false);
}

/* Grammar acceptance of each candidate's JSON string equals PCRE2's search. */
static void check_pattern(const char *pattern, const char *const *cands, size_t n)
{
	cJSON *s = cJSON_CreateObject();
	cJSON_AddStringToObject(s, "type", "string");
	cJSON_AddStringToObject(s, "pattern", pattern);
	struct conv c;
	conv_run(&c, s, NULL);
	cJSON_Delete(s);
	cr_assert_eq(c.rc, 0, "%s: %s", pattern, c.err);
	cr_expect_eq(c.w.count, 0, "pattern %s warned: %s", pattern, c.w.count ? c.w.msg[0] : "");
	int ec;
	PCRE2_SIZE eo;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
				       PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
	cr_assert(re, "PCRE2 refuses %s", pattern);
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	for (size_t i = 0; i < n; i++) {
		bool want = pcre2_match(re, (PCRE2_SPTR)cands[i], strlen(cands[i]), 0, 0, md, NULL) >= 0;
		cJSON *str = cJSON_CreateString(cands[i]);
		char *j = cJSON_PrintUnformatted(str);
		cr_expect_eq(accepts_str(c.g, j), want, "pattern %s on %s: grammar %s, PCRE2 %s\n%s", pattern, j,
			     want ? "rejects" : "accepts", want ? "matches" : "does not", c.gbnf);
		free(j);
		cJSON_Delete(str);
	}
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	conv_free(&c);
}

Test(json_schema, patterns_match_pcre2)
{
	static const char *const cands[] = {
		"", "a", "ab", "abc", "abcabc", "A", "AB-123", "AB-12", "x@y", "@", "12345", "12345-6789",
		"1.0.0", "01.0.0", "10.20.30-rc.1", "#fff", "#A0b1C2", "#ffff", "say \"hi\"", "back\\slash",
		"tab\there", "line\nbreak", "naïve", "日本語", "+14155552671", "+0123", "2024-12-31",
		"2024-13-01", "09:30", "24:00", "a.b", "a b", "_", "--", "aaaa", "abab", "ba", "ü",
		"\x01", "\x7f", "[x]", "x]", "^", "$", "a|b", "(a)", "é1",
	};
	static const char *const patterns[] = {
		"^abc$", "abc", "^a", "c$", "^a|c$", "^(ab)+$", "^(a|b)*$", "^a{2,3}$", "^a{2}$", "^a{2,}$",
		"^[A-Z]{2}-\\d{3,}$", "^\\d{5}(-\\d{4})?$", "@", "^[^\"\\\\]*$", "^\\+?[1-9]\\d{1,14}$",
		"^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(-[0-9A-Za-z.-]+)?$",
		"^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$",
		"^([01]\\d|2[0-3]):[0-5]\\d$", "^.$", "^.*$", "^\\w+$", "^\\W$", "^\\s*\\S+$", "^[\\]x]+$",
		"^\\^", "\\$$", "^a\\|b$", "^\\(a\\)$", "^[^a-z]+$", "^[a-c-]+$", "^(?:ab|ba)$", "^[\\x01-\\x7f]$",
		"^\\u00e9\\d$", "^[é-ü]$", "^[日本]+語?$", "^\"", "\\\\", "^(?<word>[a-z]+) ", "^a*?b??$", "\\t",
		"^\\n?line",
		/* Stars over what can match the empty string (issue 40, defect 4). */
		"^([a-z]*\\s*)*$", "^(a?b?)*$", "^(a|)*b$", "^((a*)*|b)+$", "(x?)*",
	};
	for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++)
		check_pattern(patterns[i], cands, sizeof cands / sizeof *cands);
}

Test(json_schema, unsupported_keywords_warned)
{
	static const char *const kws[][2] = {
		{ "not", "{\"type\":\"null\"}" }, { "if", "{}" }, { "then", "{}" }, { "else", "{}" },
		{ "dependentRequired", "{}" }, { "dependentSchemas", "{}" }, { "dependencies", "{}" },
		{ "patternProperties", "{}" }, { "propertyNames", "{}" }, { "unevaluatedProperties", "false" },
		{ "unevaluatedItems", "false" }, { "contains", "{}" }, { "minContains", "2" },
		{ "maxContains", "1" }, { "uniqueItems", "true" }, { "multipleOf", "3" },
		{ "minProperties", "1" }, { "maxProperties", "2" }, { "$dynamicRef", "\"#x\"" },
		{ "frobnicate", "1" },
	};
	for (size_t i = 0; i < sizeof kws / sizeof *kws; i++) {
		char schema[256], want[128];
		snprintf(schema, sizeof schema, "{\"type\":\"object\",\"properties\":{\"x\":{\"%s\":%s}}}",
			 kws[i][0], kws[i][1]);
		snprintf(want, sizeof want, "keyword \"%s\" at /properties/x", kws[i][0]);
		struct conv c;
		conv_text(&c, schema, NULL);
		cr_expect_eq(c.rc, 0, "%s: %s", schema, c.err);
		cr_expect(has_warning(&c.w, want), "%s: no warning %s", schema, want);
		cr_expect_eq(c.w.count, 1, "%s", schema);
		conv_free(&c);
	}
	/* Regex features the grammar cannot express: a warning, then any string. */
	static const char *const refused[][2] = {
		{ "^(a)\\1$", "backreference" }, { "^(?=a)a$", "lookaround" }, { "^(?!a).$", "lookaround" },
		{ "(?<=a)b", "lookaround" }, { "\\bword\\b", "word boundary" }, { "^\\p{L}+$", "Unicode property" },
		{ "(?i)abc", "lookaround or inline flag" }, { "^a^b$", "anchor" }, { "^[b-a]$", "out of order" },
		{ "^(ab", "unbalanced" }, { "^ab)$", "unbalanced" }, { "^a**$", "quantifier on a quantifier" },
		{ "^a{5000}$", "above" }, { "^[]$", "empty" },
	};
	for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
		cJSON *s = cJSON_CreateObject();
		cJSON_AddStringToObject(s, "type", "string");
		cJSON_AddStringToObject(s, "pattern", refused[i][0]);
		struct conv c;
		conv_run(&c, s, NULL);
		cJSON_Delete(s);
		cr_assert_eq(c.rc, 0, "%s: %s", refused[i][0], c.err);
		cr_expect(c.w.count == 1 && strstr(c.w.msg[0], refused[i][1]) && strstr(c.w.msg[0], "\"pattern\" at /"),
			  "pattern %s: %s", refused[i][0], c.w.count ? c.w.msg[0] : "no warning");
		cr_expect(accepts_str(c.g, "\"anything at all\""), "pattern %s: not any string", refused[i][0]);
		conv_free(&c);
	}
	/* Other looseness is named too. */
	static const char *const loose[][2] = {
		{ "{\"type\":\"string\",\"format\":\"email\"}", "format \"email\" at / is not enforced" },
		{ "{\"type\":\"number\",\"minimum\":0.5}", "minimum 0.5 at / is enforced as 0" },
		{ "{\"type\":\"array\",\"maxItems\":100000}", "\"maxItems\" 100000 at / is above 4096" },
		{ "{\"$defs\":{\"a\":{\"type\":\"string\"}},\"type\":\"object\",\"properties\":{\"p\":{\"$ref\":\"#/$defs/a\",\"minLength\":3}}}",
		  "keyword \"minLength\" beside $ref at /properties/p is not enforced" },
		{ "{\"$ref\":\"https://example.com/s.json\"}", "outside the schema" },
		{ "{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":3}", "beside \"pattern\"" },
		{ "{\"allOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"format\":\"time\"}]}", "\"format\" differs" },
	};
	for (size_t i = 0; i < sizeof loose / sizeof *loose; i++) {
		struct conv c;
		conv_text(&c, loose[i][0], NULL);
		cr_expect_eq(c.rc, 0, "%s: %s", loose[i][0], c.err);
		cr_expect(has_warning(&c.w, loose[i][1]), "%s: no warning %s", loose[i][0], loose[i][1]);
		if (!has_warning(&c.w, loose[i][1]))
			dump_warnings(&c.w);
		conv_free(&c);
	}
}

/*
 * A pattern the translator can write but the grammar engine refuses (here
 * 257 x 4096 elements, past GRAMMAR_ELEMS_MAX) is warned and not enforced,
 * like the regex features above, so that serve answers a schema without
 * "strict" with that warning instead of a 400 for the whole grammar.
 */
Test(json_schema, pattern_beyond_the_engine_warned)
{
	struct strbuf p = { 0 };
	strbuf_put(&p, "^", 1);
	for (int i = 0; i < 257; i++)
		strbuf_put(&p, "a{4096}", 7);
	strbuf_put(&p, "$", 1);
	cr_assert_eq(p.rc, 0);
	cJSON *s = cJSON_CreateObject();
	cJSON_AddStringToObject(s, "type", "string");
	cJSON_AddStringToObject(s, "pattern", p.p);
	strbuf_free(&p);
	struct conv c;
	conv_run(&c, s, NULL);
	cJSON_Delete(s);
	cr_assert_eq(c.rc, 0, "%s", c.err);
	cr_expect(c.w.count == 1 && strstr(c.w.msg[0], "\"pattern\" at / has what the grammar engine refuses") &&
			  strstr(c.w.msg[0], "too large") && strstr(c.w.msg[0], "not enforced"),
		  "%s", c.w.count ? c.w.msg[0] : "no warning");
	cr_expect(accepts_str(c.g, "\"anything at all\""));
	conv_free(&c);
}

Test(json_schema, errors)
{
	static const char *const bad[][2] = {
		{ "{\"type\":\"strin\"}", "unknown type \"strin\" at /" },
		/* cJSON keeps bytes that are not UTF-8; the grammar's literals cannot (fuzz_grammar). */
		{ "{\"properties\":{\"a\xff\":{}},\"required\":[\"a\xff\"]}", "not valid UTF-8" },
		{ "{\"enum\":[\"\xed\xa0\x80\"]}", "not valid UTF-8" },
		{ "{\"type\":3}", "\"type\" at / is not a string" },
		{ "[1,2]", "not an object or a boolean" },
		{ "false", "no value satisfies" },
		{ "{\"$ref\":\"#/$defs/missing\"}", "does not resolve" },
		{ "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
		  "cycle that consumes no input" },
		{ "{\"$defs\":{\"a\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/a\"}]}},\"$ref\":\"#/$defs/a\"}",
		  "cycle that consumes no input" },
		{ "{\"$ref\":\"#\"}", "cycle that consumes no input" },
		{ "{\"allOf\":[{\"$ref\":\"#\"}]}", "allOf" },
		{ "{\"type\":\"integer\",\"minimum\":10,\"maximum\":9}", "no integer satisfies" },
		{ "{\"type\":\"integer\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":2}", "no integer satisfies" },
		{ "{\"type\":\"number\",\"minimum\":3,\"exclusiveMaximum\":3}", "no number satisfies" },
		{ "{\"type\":\"integer\",\"minimum\":1e300}", "beyond 16 digits" },
		{ "{\"enum\":[]}", "\"enum\" at / is not a non-empty array" },
		{ "{\"anyOf\":[]}", "\"anyOf\" at / is not a non-empty array" },
		{ "{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}", "required property \"x\"" },
		{ "{\"type\":\"object\",\"properties\":{\"x\":false},\"required\":[\"x\"]}", "schema is false" },
		{ "{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems > maxItems" },
		{ "{\"type\":\"array\",\"minItems\":-1}", "not a non-negative integer" },
		{ "{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "minLength > maxLength" },
		{ "{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", "tuple" },
		{ "{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "types do not intersect" },
		{ "{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},{\"required\":[\"b\"]}]}",
		  "property \"b\" is required but a part forbids it" },
		{ "{\"required\":\"x\"}", "not an array of strings" },
		{ "{\"properties\":{\"a\":3}}", "not an object or a boolean" },
		{ "{\"type\":\"string\",\"const\":1}", "no const value at / is of the schema's type" },
		{ "{\"type\":\"integer\",\"enum\":[1.5,\"a\"]}", "no enum value" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct conv c;
		conv_text(&c, bad[i][0], NULL);
		cr_expect_eq(c.rc, -EINVAL, "%s: rc %d", bad[i][0], c.rc);
		cr_expect(strstr(c.err, bad[i][1]), "%s: error \"%s\", want \"%s\"", bad[i][0], c.err, bad[i][1]);
		cr_expect_null(c.gbnf);
		conv_free(&c);
	}
	/* NULL schema. */
	char *g = (char *)1, err[64];
	cr_expect_eq(json_schema_to_gbnf(NULL, NULL, &g, NULL, err, sizeof err), -EINVAL);
	cr_expect_null(g);
}

Test(json_schema, hostile)
{
	/* 900 nested "items": refused at the depth limit, no stack overflow. */
	struct strbuf_like {
		char *p;
		size_t len;
	} b = { malloc(2000000), 0 };
	int depth = 900;	/* under cJSON's own nesting limit of 1000 */
	for (int i = 0; i < depth; i++)
		b.len += (size_t)sprintf(b.p + b.len, "{\"items\":");
	b.len += (size_t)sprintf(b.p + b.len, "{}");
	for (int i = 0; i < depth; i++)
		b.p[b.len++] = '}';
	b.p[b.len] = 0;
	cJSON *s = cJSON_Parse(b.p);
	cr_assert(s);
	struct conv c;
	conv_run(&c, s, NULL);
	cr_expect_eq(c.rc, -EINVAL);
	cr_expect(strstr(c.err, "deeper than 64"), "%s", c.err);
	conv_free(&c);
	cJSON_Delete(s);
	/* A shallower nesting within the limit converts. */
	conv_text(&c, "{\"items\":{\"items\":{\"items\":{\"items\":{\"type\":\"integer\"}}}}}", NULL);
	cr_expect_eq(c.rc, 0, "%s", c.err);
	cr_expect(accepts_str(c.g, "[[[[1]]],[[[2, 3]]]]"));
	cr_expect(!accepts_str(c.g, "[[[1]]]"));
	conv_free(&c);
	/* Deep const value. */
	b.len = 0;
	for (int i = 0; i < 200; i++)
		b.len += (size_t)sprintf(b.p + b.len, "[");
	for (int i = 0; i < 200; i++)
		b.p[b.len++] = ']';
	b.p[b.len] = 0;
	char *schema = malloc(b.len + 32);
	sprintf(schema, "{\"const\":%s}", b.p);
	conv_text(&c, schema, NULL);
	cr_expect_eq(c.rc, -EINVAL, "%s", c.err);
	conv_free(&c);
	free(schema);
	/* Recursion through allOf merging (not memoised) stops at the depth limit, quickly. */
	double t0 = now_s();
	conv_text(&c, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"integer\"}},"
		      "\"additionalProperties\":{\"allOf\":[{\"$ref\":\"#\"},{\"minProperties\":0}]}}", NULL);
	cr_expect_eq(c.rc, -EINVAL, "%s", c.err);
	conv_free(&c);
	cr_expect_lt(now_s() - t0, 2.0);
	/* A huge enum: refused for size, quickly. */
	cJSON *e = cJSON_CreateObject(), *vals = cJSON_AddArrayToObject(e, "enum");
	char item[80];
	for (int i = 0; i < 200000; i++) {
		snprintf(item, sizeof item, "value-%08d-padding-padding-padding-padding", i);
		cJSON_AddItemToArray(vals, cJSON_CreateString(item));
	}
	char *gb = NULL, err[256];
	cr_expect_eq(json_schema_to_gbnf(e, NULL, &gb, NULL, err, sizeof err), -E2BIG, "%s", err);
	cr_expect_null(gb);
	cJSON_Delete(e);
	/* Many warnings are capped. */
	cJSON *w = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(w, "properties");
	for (int i = 0; i < 200; i++) {
		snprintf(item, sizeof item, "p%d", i);
		cJSON *p = cJSON_AddObjectToObject(props, item);
		cJSON_AddNumberToObject(p, "multipleOf", 2);
	}
	cJSON_AddFalseToObject(w, "additionalProperties");
	struct conv cw;
	conv_run(&cw, w, NULL);
	cr_expect_eq(cw.rc, 0, "%s", cw.err);
	cr_expect_eq(cw.w.count, JSON_SCHEMA_WARNINGS_MAX + 1);
	cr_expect(strstr(cw.w.msg[JSON_SCHEMA_WARNINGS_MAX], "136 more"), "%s", cw.w.msg[JSON_SCHEMA_WARNINGS_MAX]);
	/* 200 optional properties: linear-size rules, still exact. */
	cr_expect(accepts_str(cw.g, "{\"p3\": 4, \"p150\": 6}"));
	cr_expect(!accepts_str(cw.g, "{\"p150\": 6, \"p3\": 4}"));
	conv_free(&cw);
	cJSON_Delete(w);
	free(b.p);
}

/* Schema text of an object with n optional integer properties. */
static char *wide_object(int n)
{
	struct strbuf b = { 0 };
	strbuf_printf(&b, "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i < n; i++)
		strbuf_printf(&b, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
	strbuf_printf(&b, "}}");
	return b.p;
}

/* Converts, compiles and checks schema as serve and run do; the sentence of
 * the first step that refuses it in err, its rc returned. */
static int admit(const char *schema, char *err, size_t err_len)
{
	cJSON *s = cJSON_Parse(schema);
	cr_assert(s);
	char *gbnf = NULL;
	struct grammar *g = NULL;
	int rc = json_schema_to_gbnf(s, NULL, &gbnf, NULL, err, err_len);
	cJSON_Delete(s);
	if (!rc)
		rc = grammar_parse(&g, gbnf, strlen(gbnf), NULL, err, err_len);
	if (!rc)
		rc = constrain_check(g, err, err_len);
	grammar_free(g);
	free(gbnf);
	return rc;
}

/* Issue 40, defect 1: schemas whose grammar fans out past the matcher's
 * GRAMMAR_STACKS_MAX stacks, or whose size would cost a minute to compile,
 * are refused at conversion / compile time with the limit named, in
 * milliseconds; they used to convert and fail where the output fanned out. */
Test(json_schema, too_wide_refused_at_compile_time)
{
	char err[512];
	struct wide {
		const char *what, *limit;
		char *schema;
	} c[4] = {
		{ "4,100 optional properties", "2048", wide_object(4100) },
		{ "20,000 properties", "2048", wide_object(20000) },
	};
	struct strbuf b = { 0 };
	strbuf_printf(&b, "{\"type\":\"string\",\"pattern\":\"^(");
	for (int i = 0; i < 5000; i++)
		strbuf_printf(&b, "%sa%d", i ? "|" : "", i);
	strbuf_printf(&b, ")$\"}");
	c[2] = (struct wide){ "a pattern of 5,000 alternatives", "4096", b.p };
	b = (struct strbuf){ 0 };
	strbuf_printf(&b, "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[");
	for (int i = 0; i < 5000; i++)
		strbuf_printf(&b, "%s\"v%d\"", i ? "," : "", i);
	strbuf_printf(&b, "]}},\"required\":[\"k\"]}");
	c[3] = (struct wide){ "an enum of 5,000 values in a property", "4096", b.p };
	for (int i = 0; i < 4; i++) {
		double t0 = now_s();
		int rc = admit(c[i].schema, err, sizeof err);
		double dt = now_s() - t0;
		cr_expect_eq(rc, -E2BIG, "%s: rc %d (%s)", c[i].what, rc, err);
		cr_expect(strstr(err, c[i].limit), "%s: the limit %s is not named: %s", c[i].what, c[i].limit, err);
		cr_expect_lt(dt, 0.5, "%s: refused after %.3f s", c[i].what, dt);
		free(c[i].schema);
	}
	/* Just inside the limits, the same shapes still run. */
	char *ok = wide_object(200);
	cr_expect_eq(admit(ok, err, sizeof err), 0, "%s", err);
	free(ok);
	b = (struct strbuf){ 0 };
	strbuf_printf(&b, "{\"enum\":[");
	for (int i = 0; i < 4000; i++)
		strbuf_printf(&b, "%s%d", i ? "," : "", i);
	strbuf_printf(&b, "]}");
	cr_expect_eq(admit(b.p, err, sizeof err), 0, "%s", err);
	strbuf_free(&b);
}

Test(json_schema, json_object_mode)
{
	char *text;
	cr_assert_eq(json_schema_object_gbnf(NULL, &text), 0);
	struct grammar *g;
	char err[256];
	cr_assert_eq(grammar_parse(&g, text, strlen(text), NULL, err, sizeof err), 0, "%s", err);
	static const char *const yes[] = { "{}", "{\"a\":1}", "{\"a\": [1, {\"b\": null}], \"c\": \"d\"}",
					   "{\n  \"x\": true\n}" };
	static const char *const no[] = { "[]", "\"x\"", "1", "null", "{", "{\"a\"}", "{a:1}", "{\"a\":1,}" };
	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
		cr_expect(accepts_str(g, yes[i]), "%s", yes[i]);
	for (size_t i = 0; i < sizeof no / sizeof *no; i++)
		cr_expect(!accepts_str(g, no[i]), "%s", no[i]);
	grammar_free(g);
	free(text);
}

Test(json_schema, whitespace_bound)
{
	const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}";
	struct conv c;
	conv_text(&c, schema, NULL);
	char doc[128];
	snprintf(doc, sizeof doc, "{\"a\":%*s1}", 20, "");
	cr_expect(accepts_str(c.g, doc), "%s", doc);
	snprintf(doc, sizeof doc, "{\"a\":\n%*s1}", 20, "");
	cr_expect(accepts_str(c.g, doc), "%s", doc);
	snprintf(doc, sizeof doc, "{\"a\":%*s1}", 21, "");
	cr_expect(!accepts_str(c.g, doc), "%s", doc);
	cr_expect(!accepts_str(c.g, "{\"a\":\n\n1}"));
	conv_free(&c);
	struct json_schema_options compact = { .ws_max = -1 };
	conv_text(&c, schema, &compact);
	cr_expect(accepts_str(c.g, "{\"a\":1}"));
	cr_expect(!accepts_str(c.g, "{\"a\": 1}"));
	conv_free(&c);
	struct json_schema_options four = { .ws_max = 4 };
	conv_text(&c, schema, &four);
	cr_expect(accepts_str(c.g, "{\"a\":\n    1}"));
	cr_expect(!accepts_str(c.g, "{\"a\":\n     1}"));
	conv_free(&c);
}

Test(json_schema, gbnf_text)
{
	/* The shape of the output: root first, named rules, only the shared rules in use. */
	struct conv c;
	conv_text(&c, "{\"type\":\"object\",\"properties\":{\"unit\":{\"enum\":[\"c\",\"f\"]}},"
		      "\"required\":[\"unit\"],\"additionalProperties\":false}", NULL);
	cr_assert_eq(c.rc, 0);
	const char *head = "root ::= \"{\" ws root-unit-kv \"}\"\n";
	cr_expect(!strncmp(c.gbnf, head, strlen(head)), "%s", c.gbnf);
	cr_expect(strstr(c.gbnf, "\nroot-unit ::= ( \"\\\"c\\\"\" | \"\\\"f\\\"\" )\n"), "%s", c.gbnf);
	cr_expect(!strstr(c.gbnf, "\nvalue ::="), "%s", c.gbnf);
	cr_expect(!strstr(c.gbnf, "\nnumber ::="), "%s", c.gbnf);
	conv_free(&c);
	/* Recursive $ref becomes a recursive rule named after its definition. */
	conv_text(&c, "{\"$defs\":{\"list\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/list\"}}},"
		      "\"$ref\":\"#/$defs/list\"}", NULL);
	cr_assert_eq(c.rc, 0, "%s", c.err);
	cr_expect(!strncmp(c.gbnf, "root ::= list\n", strlen("root ::= list\n")), "%s", c.gbnf);
	cr_expect(accepts_str(c.g, "[[], [[]], [[[]]]]"));
	cr_expect(!accepts_str(c.g, "[1]"));
	conv_free(&c);
	/* pydantic's {"allOf": [{"$ref"}], "description"} stays a recursive rule. */
	conv_text(&c, "{\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":["
		      "{\"allOf\":[{\"$ref\":\"#/$defs/Node\"}],\"description\":\"d\"},{\"type\":\"null\"}]}},"
		      "\"required\":[\"next\"],\"additionalProperties\":false}},\"allOf\":[{\"$ref\":\"#/$defs/Node\"}]}", NULL);
	cr_assert_eq(c.rc, 0, "%s", c.err);
	cr_expect_eq(c.w.count, 0);
	cr_expect(accepts_str(c.g, "{\"next\": {\"next\": {\"next\": null}}}"));
	cr_expect(!accepts_str(c.g, "{\"next\": {}}"));
	conv_free(&c);
}

/* Small deterministic generator for the mutation test. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static cJSON *random_value(uint64_t *r)
{
	static const char *const pool[] = {
		"{}", "[]", "true", "false", "null", "0", "-1", "3.5", "1e300", "\"\"", "\"string\"",
		"\"object\"", "\"#\"", "\"#/$defs/x\"", "\"^a(b|c)*$\"", "\"(?=x)\"", "[\"string\",\"null\"]",
		"{\"$ref\":\"#\"}", "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}", "{\"allOf\":[{\"$ref\":\"#\"}]}",
		"{\"anyOf\":[{\"$ref\":\"#\"},{}]}", "{\"enum\":[1,\"a\",null]}", "{\"minimum\":5,\"maximum\":2}",
		"[{}]", "[1,2]", "{\"properties\":{\"a\":false},\"required\":[\"a\"]}", "\"date-time\"", "4096", "5000",
	};
	return cJSON_Parse(pool[rng_next(r) % (sizeof pool / sizeof *pool)]);
}

/* Replaces or adds one random node of v (an object or array tree). */
static void mutate(cJSON *v, uint64_t *r)
{
	static const char *const keys[] = {
		"type", "properties", "required", "additionalProperties", "items", "prefixItems", "anyOf",
		"oneOf", "allOf", "$ref", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
		"minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "nullable", "not",
	};
	for (int depth = 0; depth < 12; depth++) {
		int n = cJSON_GetArraySize(v);
		bool descend = n && rng_next(r) % 3 != 0;
		if (descend) {
			cJSON *c = cJSON_GetArrayItem(v, (int)(rng_next(r) % (uint64_t)n));
			if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
				v = c;
				continue;
			}
			cJSON *nv = random_value(r);
			if (cJSON_IsObject(v))
				cJSON_ReplaceItemInObjectCaseSensitive(v, c->string, nv);
			else
				cJSON_ReplaceItemViaPointer(v, c, nv);
			return;
		}
		cJSON *nv = random_value(r);
		if (cJSON_IsObject(v)) {
			const char *k = keys[rng_next(r) % (sizeof keys / sizeof *keys)];
			cJSON_DeleteItemFromObjectCaseSensitive(v, k);
			cJSON_AddItemToObject(v, k, nv);
		} else {
			cJSON_AddItemToArray(v, nv);
		}
		return;
	}
}

Test(json_schema, mutations_never_crash)
{
	/* Random edits of corpus schemas: each converts or fails with a message; what converts compiles. */
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/tests/schemas", tu_repo());
	DIR *dp = opendir(dir);
	cr_assert(dp);
	uint64_t r = 0x9e3779b97f4a7c15ull;
	size_t ok = 0, refused = 0;
	char name[256];
	cJSON *root;
	while ((root = corpus_next(dp, dir, name, sizeof name))) {
		for (int round = 0; round < 40; round++) {
			cJSON *s = cJSON_Duplicate(cJSON_GetObjectItem(root, "schema"), true);
			int edits = 1 + (int)(rng_next(&r) % 4);
			for (int i = 0; i < edits; i++)
				mutate(s, &r);
			struct conv c;
			conv_run(&c, s, NULL);
			if (c.rc == 0) {
				ok++;
			} else {
				cr_expect(c.rc == -EINVAL || c.rc == -E2BIG, "rc %d", c.rc);
				cr_expect(c.err[0], "no message for a refused schema");
				refused++;
			}
			conv_free(&c);
			cJSON_Delete(s);
		}
		cJSON_Delete(root);
	}
	closedir(dp);
	fprintf(stderr, "json_schema mutations: %zu converted and compiled, %zu refused\n", ok, refused);
}
