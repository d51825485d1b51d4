/*
 * json_schema — JSON Schema to GBNF; see json_schema.h for the language the
 * grammar admits.
 *
 * One depth-first walk over the schema. Each subschema becomes a GBNF
 * expression; property values, array items and $ref targets become named
 * rules, so a recursive schema becomes recursive rules. A $ref is visited
 * once (memoised by its pointer text); a $ref reached again while its rule is
 * still being built, with no '{' or '[' consumed since, is a cycle that
 * consumes no input (left recursion) and is refused. allOf is merged into one
 * schema before the walk goes on; anyOf / oneOf siblings are merged into each
 * branch. Strings, expressions and merged schemas live until the end of the
 * conversion in lists the generator frees at once.
 *
 * Extra members' keys come from a trie of the listed names, so that a listed
 * name cannot be written a second time as an "extra" with any value.
 *
 * Limits: nesting depth (depth_max), grammar size (JSON_SCHEMA_GBNF_BYTES_MAX),
 * repetition bounds (JSON_SCHEMA_REPEAT_MAX), MERGES_MAX allOf merges and
 * VISITS_MAX subschema visits (allOf copies are not memoised, so a schema
 * recursing through allOf is cut off there). Objects with n properties cost
 * O(n) rules (tails become rules past MEMBERS_INLINE_MAX), enums O(total size
 * of the values), rule names O(1) each (a hash set).
 */
#include "engine/grammar/json_schema.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/strbuf.h"

#define WS_MAX_DEFAULT 20
#define DEPTH_MAX_DEFAULT 64
#define INT_DIGITS_MAX 16
#define INT_MAG_MAX 9999999999999999LL	/* the largest 16-digit integer */
#define MEMBERS_INLINE_MAX 8		/* beyond this, object tails become rules */
#define REF_CHAIN_MAX 64
#define MERGES_MAX 2048		/* allOf merges per conversion */
#define VISITS_MAX 200000	/* subschemas visited per conversion */

enum prim {
	PRIM_WS, PRIM_VALUE, PRIM_OBJECT, PRIM_ARRAY, PRIM_STRING, PRIM_CHAR, PRIM_NUMBER,
	PRIM_INTEGER, PRIM_BOOLEAN, PRIM_NULL, PRIM_DATE, PRIM_TIME, PRIM_DATE_TIME, PRIM_UUID,
	PRIM_IPV4, PRIM_IPV4_OCTET, PRIM_COUNT
};

static const char *const prim_name[PRIM_COUNT] = {
	"ws", "value", "object", "array", "string", "char", "number", "integer", "boolean",
	"null", "date", "time", "date-time", "uuid", "ipv4", "ipv4-octet",
};

/* Bodies of the shared rules; ws is made from the options. */
static const char *const prim_body[PRIM_COUNT] = {
	[PRIM_VALUE] = "object | array | string | number | boolean | null",
	[PRIM_OBJECT] = "\"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"",
	[PRIM_ARRAY] = "\"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"",
	[PRIM_STRING] = "\"\\\"\" char* \"\\\"\"",
	[PRIM_CHAR] = "[^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )",
	[PRIM_NUMBER] = "integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?",
	[PRIM_INTEGER] = "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )",
	[PRIM_BOOLEAN] = "\"true\" | \"false\"",
	[PRIM_NULL] = "\"null\"",
	[PRIM_DATE] = "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )",
	[PRIM_TIME] = "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) "
		      "( \".\" [0-9]{1,9} )? ( [zZ] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
	[PRIM_DATE_TIME] = "date [tT] time",
	[PRIM_UUID] = "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} "
		      "\"-\" [0-9a-fA-F]{12}",
	[PRIM_IPV4] = "ipv4-octet \".\" ipv4-octet \".\" ipv4-octet \".\" ipv4-octet",
	[PRIM_IPV4_OCTET] = "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]",
};

/* Rules each shared rule refers to, so that using one pulls them in. */
static const unsigned prim_deps[PRIM_COUNT] = {
	[PRIM_VALUE] = 1u << PRIM_OBJECT | 1u << PRIM_ARRAY | 1u << PRIM_STRING | 1u << PRIM_NUMBER |
		       1u << PRIM_BOOLEAN | 1u << PRIM_NULL,
	[PRIM_OBJECT] = 1u << PRIM_WS | 1u << PRIM_STRING | 1u << PRIM_VALUE,
	[PRIM_ARRAY] = 1u << PRIM_WS | 1u << PRIM_VALUE,
	[PRIM_STRING] = 1u << PRIM_CHAR,
	[PRIM_NUMBER] = 1u << PRIM_INTEGER,
	[PRIM_DATE_TIME] = 1u << PRIM_DATE | 1u << PRIM_TIME,
	[PRIM_IPV4] = 1u << PRIM_IPV4_OCTET,
};

/* Keywords that only annotate; they are dropped without a word. */
static const char *const kw_annotation[] = {
	"$schema", "$id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs",
	"definitions", "title", "description", "default", "examples", "readOnly", "writeOnly",
	"deprecated", "contentEncoding", "contentMediaType", "contentSchema", NULL,
};

static const char *const kw_supported[] = {
	"$ref", "type", "enum", "const", "properties", "required", "additionalProperties", "items",
	"prefixItems", "additionalItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf",
	"pattern", "minLength", "maxLength", "format", "minimum", "maximum", "exclusiveMinimum",
	"exclusiveMaximum", "nullable", NULL,
};

/* Known keywords the grammar cannot express; named in a warning. */
static const char *const kw_unsupported[] = {
	"not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
	"patternProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
	"contains", "minContains", "maxContains", "uniqueItems", "multipleOf", "minProperties",
	"maxProperties", "$dynamicRef", "$recursiveRef", "$recursiveAnchor", NULL,
};

struct rule {
	const char *name, *body;
};

struct ref {
	const char *ptr;	/* the $ref text */
	const char *name;	/* its rule */
	bool done;		/* the rule body is built */
	int consume;		/* g->consume when the rule was started */
};

struct gen {
	const cJSON *root;
	struct json_schema_options opt;
	struct json_schema_warnings *w;
	size_t warn_dropped;
	char **strs;			/* every string made, freed at the end */
	size_t n_strs, cap_strs, str_bytes;
	struct rule *rules;
	size_t n_rules, cap_rules;
	struct name_slot {
		const char *name;	/* NULL: empty */
		int next;		/* next number to try for this base name */
	} *names;			/* hash set of the rule names taken, shared ones included */
	size_t n_names, cap_names;	/* cap_names: 0 or a power of two */
	struct ref *refs;
	size_t n_refs, cap_refs;
	cJSON **owned;			/* merged schemas */
	size_t n_owned, cap_owned;
	unsigned prims;			/* bit per enum prim used */
	int depth;			/* subschema nesting */
	size_t merges, visits;		/* work done, against MERGES_MAX / VISITS_MAX */
	int consume;			/* '{' / '[' entered on the current path */
	int rc;
	char *err;
	size_t err_len;
};

static void fail(struct gen *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(struct gen *g, int code, const char *fmt, ...)
{
	if (g->rc)
		return;
	g->rc = -code;
	if (g->err && g->err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(g->err, g->err_len, fmt, ap);
		va_end(ap);
	}
}

/* Takes ownership of the strbuf's text; NULL (rc set) on failure. */
static const char *keep(struct gen *g, struct strbuf *b)
{
	if (b->rc || !b->p) {
		if (b->rc)
			fail(g, ENOMEM, "out of memory");
		strbuf_free(b);
		if (g->rc)
			return NULL;
		b->p = malloc(1);
		if (!b->p) {
			fail(g, ENOMEM, "out of memory");
			return NULL;
		}
		b->p[0] = 0;
	}
	if (array_grow((void **)&g->strs, &g->cap_strs, g->n_strs + 1, sizeof *g->strs)) {
		strbuf_free(b);
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	g->str_bytes += b->len;
	if (g->str_bytes > 4 * (size_t)JSON_SCHEMA_GBNF_BYTES_MAX) {
		strbuf_free(b);
		fail(g, E2BIG, "the grammar would exceed %u bytes", JSON_SCHEMA_GBNF_BYTES_MAX);
		return NULL;
	}
	g->strs[g->n_strs++] = b->p;
	return b->p;
}

static const char *fmt(struct gen *g, const char *f, ...) __attribute__((format(printf, 2, 3)));
static const char *fmt(struct gen *g, const char *f, ...)
{
	if (g->rc)
		return NULL;
	struct strbuf b = { 0 };
	va_list ap;
	va_start(ap, f);
	char *s = NULL;
	int n = vasprintf(&s, f, ap);
	va_end(ap);
	if (n < 0) {
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	b.p = s;
	b.len = (size_t)n;
	b.cap = (size_t)n + 1;
	return keep(g, &b);
}

static void warn(struct gen *g, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct gen *g, const char *f, ...)
{
	if (!g->w)
		return;
	char *s = NULL;
	va_list ap;
	va_start(ap, f);
	int n = vasprintf(&s, f, ap);
	va_end(ap);
	if (n < 0)
		return;
	for (size_t i = 0; i < g->w->count; i++) {
		if (!strcmp(g->w->msg[i], s)) {
			free(s);
			return;
		}
	}
	if (g->w->count >= JSON_SCHEMA_WARNINGS_MAX) {
		g->warn_dropped++;
		free(s);
		return;
	}
	char **m = realloc(g->w->msg, (g->w->count + 1) * sizeof *m);
	if (!m) {
		free(s);
		return;
	}
	g->w->msg = m;
	g->w->msg[g->w->count++] = s;
}

/* Path of schema key within path, as a JSON pointer ("" is the root). */
static const char *path_child(struct gen *g, const char *path, const char *key)
{
	struct strbuf b = { 0 };
	strbuf_printf(&b, "%s/", path);
	for (const char *k = key; *k; k++) {
		if (*k == '~')
			strbuf_put(&b, "~0", 2);
		else if (*k == '/')
			strbuf_put(&b, "~1", 2);
		else
			strbuf_put(&b, k, 1);
	}
	return keep(g, &b);
}

static const char *path_index(struct gen *g, const char *path, const char *key, int i)
{
	return fmt(g, "%s/%s/%d", path, key, i);
}

/* How a path reads in a message: the pointer, or "/" for the root. */
static const char *at(const char *path)
{
	return *path ? path : "/";
}

static bool in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (!strcmp(*list, s))
			return true;
	return false;
}

static const char *prim(struct gen *g, enum prim p)
{
	g->prims |= 1u << p;
	return prim_name[p];
}

static uint64_t name_hash(const char *n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *n; n++)
		h = (h ^ (unsigned char)*n) * 0x100000001b3ull;
	return h;
}

/* The slot holding n, or the empty slot where it would go (cap_names > 0). */
static struct name_slot *name_slot(const struct gen *g, const char *n)
{
	size_t mask = g->cap_names - 1;
	for (size_t i = (size_t)name_hash(n) & mask;; i = (i + 1) & mask)
		if (!g->names[i].name || !strcmp(g->names[i].name, n))
			return &g->names[i];
}

static bool name_taken(const struct gen *g, const char *n)
{
	return g->cap_names && name_slot(g, n)->name;
}

/* Adds n (not taken) to the set, growing it to stay at most half full. */
static int name_put(struct gen *g, const char *n)
{
	if ((g->n_names + 1) * 2 > g->cap_names) {
		struct gen t = *g;
		t.cap_names = g->cap_names ? g->cap_names * 2 : 64;
		t.names = calloc(t.cap_names, sizeof *t.names);
		if (!t.names)
			return -ENOMEM;
		for (size_t i = 0; i < g->cap_names; i++)
			if (g->names[i].name)
				*name_slot(&t, g->names[i].name) = g->names[i];
		free(g->names);
		g->names = t.names;
		g->cap_names = t.cap_names;
	}
	*name_slot(g, n) = (struct name_slot){ n, 2 };
	g->n_names++;
	return 0;
}

/* A fresh rule name made from hint: [A-Za-z0-9-] only, numbered when taken. */
static const char *name_new(struct gen *g, const char *hint)
{
	if (g->rc || !hint)
		return NULL;
	struct strbuf b = { 0 };
	bool dash = true;
	for (const char *h = hint; *h && b.len < 48; h++) {
		char c = *h;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (ok) {
			strbuf_put(&b, &c, 1);
			dash = false;
		} else if (!dash) {
			strbuf_put(&b, "-", 1);
			dash = true;
		}
	}
	while (b.len && b.p[b.len - 1] == '-')
		b.p[--b.len] = 0;
	if (!b.len)
		strbuf_put(&b, "r", 1);
	const char *base = keep(g, &b);
	if (!base)
		return NULL;
	const char *n = base;
	if (name_taken(g, base)) {
		int i = name_slot(g, base)->next;
		do {
			n = fmt(g, "%s-%d", base, i++);
			if (!n)
				return NULL;
		} while (name_taken(g, n));
		name_slot(g, base)->next = i;
	}
	if (name_put(g, n)) {
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	return n;
}

static void rule_add(struct gen *g, const char *name, const char *body)
{
	if (g->rc)
		return;
	if (array_grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) {
		fail(g, ENOMEM, "out of memory");
		return;
	}
	g->rules[g->n_rules++] = (struct rule){ name, body };
}

static bool is_ident(const char *e)
{
	for (; *e; e++)
		if (!((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9') ||
		      *e == '-'))
			return false;
	return true;
}

/* e itself when it is a rule name, else a new rule named after hint. */
static const char *as_rule(struct gen *g, const char *hint, const char *e)
{
	if (!e || is_ident(e))
		return e;
	const char *n = name_new(g, hint);
	rule_add(g, n, e);
	return g->rc ? NULL : n;
}

/* ---- literals and character sets ---- */

/* Appends bytes as one GBNF string literal. */
static void put_literal(struct strbuf *b, const char *s, size_t n)
{
	strbuf_put(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"')
			strbuf_put(b, "\\\"", 2);
		else if (c == '\\')
			strbuf_put(b, "\\\\", 2);
		else if (c == '\n')
			strbuf_put(b, "\\n", 2);
		else if (c == '\r')
			strbuf_put(b, "\\r", 2);
		else if (c == '\t')
			strbuf_put(b, "\\t", 2);
		else if (c < 0x20 || c == 0x7f)
			strbuf_printf(b, "\\x%02x", c);
		else
			strbuf_put(b, (const char *)&c, 1);
	}
	strbuf_put(b, "\"", 1);
}

/* Appends the JSON string literal of s (quotes included) as GBNF. */
static void put_json_string(struct strbuf *b, const char *s)
{
	char *j = NULL;
	cJSON *tmp = cJSON_CreateString(s);
	if (tmp)
		j = cJSON_PrintUnformatted(tmp);
	cJSON_Delete(tmp);
	if (!j) {
		b->rc = -ENOMEM;
		return;
	}
	put_literal(b, j, strlen(j));
	cJSON_free(j);
}

struct cset {
	uint32_t (*r)[2];	/* sorted, disjoint, inclusive code-point ranges after cset_norm */
	size_t n, cap;
	int rc;
};

#define CP_MAX 0x10FFFFu

static void cset_add(struct cset *s, uint32_t lo, uint32_t hi)
{
	if (s->rc)
		return;
	if (array_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) {
		s->rc = -ENOMEM;
		return;
	}
	s->r[s->n][0] = lo;
	s->r[s->n][1] = hi;
	s->n++;
}

static int range_cmp(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void cset_norm(struct cset *s)
{
	if (!s->n)
		return;
	qsort(s->r, s->n, sizeof *s->r, range_cmp);
	size_t k = 0;
	for (size_t i = 1; i < s->n; i++) {
		if (s->r[i][0] <= s->r[k][1] + 1) {
			if (s->r[i][1] > s->r[k][1])
				s->r[k][1] = s->r[i][1];
		} else {
			s->r[++k][0] = s->r[i][0];
			s->r[k][1] = s->r[i][1];
		}
	}
	s->n = k + 1;
}

/* Replaces s by its complement over [0, CP_MAX]. */
static void cset_negate(struct cset *s)
{
	cset_norm(s);
	struct cset t = { 0 };
	uint32_t next = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (s->r[i][0] > next)
			cset_add(&t, next, s->r[i][0] - 1);
		next = s->r[i][1] + 1;
	}
	if (next <= CP_MAX)
		cset_add(&t, next, CP_MAX);
	free(s->r);
	if (t.rc)
		t.n = 0;
	*s = t;
}

static void cset_union(struct cset *s, const struct cset *t)
{
	for (size_t i = 0; i < t->n; i++)
		cset_add(s, t->r[i][0], t->r[i][1]);
	if (t->rc)
		s->rc = t->rc;
}

static bool cset_has(const struct cset *s, uint32_t c)
{
	for (size_t i = 0; i < s->n; i++)
		if (c >= s->r[i][0] && c <= s->r[i][1])
			return true;
	return false;
}

static void put_class_char(struct strbuf *b, uint32_t c)
{
	if (c == ']' || c == '\\' || c == '^' || c == '-' || c == '[')
		strbuf_printf(b, "\\%c", (char)c);
	else if (c >= 0x20 && c < 0x7f)
		strbuf_printf(b, "%c", (char)c);
	else if (c < 0x80)
		strbuf_printf(b, "\\x%02x", c);
	else if (c <= 0xffff)
		strbuf_printf(b, "\\u%04x", c);
	else
		strbuf_printf(b, "\\U%08x", c);
}

static void put_utf8(struct strbuf *b, uint32_t c)
{
	char u[4];
	size_t n;
	if (c < 0x80) {
		u[0] = (char)c;
		n = 1;
	} else if (c < 0x800) {
		u[0] = (char)(0xc0 | c >> 6);
		u[1] = (char)(0x80 | (c & 0x3f));
		n = 2;
	} else if (c < 0x10000) {
		u[0] = (char)(0xe0 | c >> 12);
		u[1] = (char)(0x80 | (c >> 6 & 0x3f));
		u[2] = (char)(0x80 | (c & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | c >> 18);
		u[1] = (char)(0x80 | (c >> 12 & 0x3f));
		u[2] = (char)(0x80 | (c >> 6 & 0x3f));
		u[3] = (char)(0x80 | (c & 0x3f));
		n = 4;
	}
	strbuf_put(b, u, n);
}

/*
 * GBNF for one character of a JSON string's contents whose decoded value is
 * in s: the raw character where JSON allows it, the escape for '"', '\' and
 * control characters. NULL when s is empty.
 */
static const char *cset_gbnf(struct gen *g, struct cset *s)
{
	cset_norm(s);
	if (s->rc) {
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	struct cset raw = { 0 };
	cset_union(&raw, s);
	cset_norm(&raw);
	/* raw = s minus controls, '"' and '\'. */
	struct cset cut = { 0 };
	cset_add(&cut, 0, 0x1f);
	cset_add(&cut, '"', '"');
	cset_add(&cut, '\\', '\\');
	cset_negate(&cut);
	struct cset both = { 0 };
	for (size_t i = 0; i < raw.n; i++)
		for (size_t j = 0; j < cut.n; j++) {
			uint32_t lo = raw.r[i][0] > cut.r[j][0] ? raw.r[i][0] : cut.r[j][0];
			uint32_t hi = raw.r[i][1] < cut.r[j][1] ? raw.r[i][1] : cut.r[j][1];
			if (lo <= hi)
				cset_add(&both, lo, hi);
		}
	struct strbuf b = { 0 };
	int alts = 0;
	if (both.n == 1 && both.r[0][0] == both.r[0][1]) {
		struct strbuf one = { 0 };
		put_utf8(&one, both.r[0][0]);
		put_literal(&b, one.p, one.len);
		strbuf_free(&one);
		alts++;
	} else if (both.n) {
		strbuf_put(&b, "[", 1);
		for (size_t i = 0; i < both.n; i++) {
			put_class_char(&b, both.r[i][0]);
			if (both.r[i][1] != both.r[i][0]) {
				if (both.r[i][1] > both.r[i][0] + 1)
					strbuf_put(&b, "-", 1);
				put_class_char(&b, both.r[i][1]);
			}
		}
		strbuf_put(&b, "]", 1);
		alts++;
	}
	if (cset_has(s, '"')) {
		strbuf_printf(&b, "%s\"\\\\\\\"\"", alts++ ? " | " : "");
	}
	if (cset_has(s, '\\'))
		strbuf_printf(&b, "%s\"\\\\\\\\\"", alts++ ? " | " : "");
	bool all_ctl = true;
	for (uint32_t c = 0; c < 0x20; c++)
		all_ctl = all_ctl && cset_has(s, c);
	if (all_ctl) {
		strbuf_printf(&b, "%s\"\\\\\" [bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F]", alts++ ? " | " : "");
	} else {
		static const char short_esc[0x20] = { ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r' };
		for (uint32_t c = 0; c < 0x20; c++) {
			if (!cset_has(s, c))
				continue;
			if (short_esc[c])
				strbuf_printf(&b, "%s\"\\\\%c\"", alts++ ? " | " : "", short_esc[c]);
			else
				strbuf_printf(&b, "%s\"\\\\u%04x\"", alts++ ? " | " : "", c);
		}
	}
	free(raw.r);
	free(cut.r);
	free(both.r);
	if (!alts) {
		strbuf_free(&b);
		return NULL;
	}
	if (alts > 1) {
		struct strbuf p = { 0 };
		strbuf_printf(&p, "( %s )", b.p ? b.p : "");
		strbuf_free(&b);
		return keep(g, &p);
	}
	return keep(g, &b);
}

/* ---- regular expressions (string "pattern") ---- */

struct rx {
	struct gen *g;
	const char *p, *end;
	const char *why;	/* set when the pattern is refused */
	int depth;
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes one UTF-8 code point at x->p; false (why set) when invalid. */
static bool rx_utf8(struct rx *x, uint32_t *cp)
{
	const unsigned char *p = (const unsigned char *)x->p;
	size_t left = (size_t)(x->end - x->p);
	unsigned char c = p[0];
	size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
	if (!n || n > left) {
		x->why = "invalid UTF-8";
		return false;
	}
	uint32_t v = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80) {
			x->why = "invalid UTF-8";
			return false;
		}
		v = v << 6 | (p[i] & 0x3f);
	}
	x->p += n;
	*cp = v;
	return true;
}

static void set_digit(struct cset *s)
{
	cset_add(s, '0', '9');
}

static void set_word(struct cset *s)
{
	cset_add(s, '0', '9');
	cset_add(s, 'A', 'Z');
	cset_add(s, 'a', 'z');
	cset_add(s, '_', '_');
}

/* ECMAScript's \s: WhiteSpace and LineTerminator. */
static void set_space(struct cset *s)
{
	cset_add(s, 0x09, 0x0d);
	cset_add(s, 0x20, 0x20);
	cset_add(s, 0xa0, 0xa0);
	cset_add(s, 0x1680, 0x1680);
	cset_add(s, 0x2000, 0x200a);
	cset_add(s, 0x2028, 0x2029);
	cset_add(s, 0x202f, 0x202f);
	cset_add(s, 0x205f, 0x205f);
	cset_add(s, 0x3000, 0x3000);
	cset_add(s, 0xfeff, 0xfeff);
}

/*
 * Parses an escape at x->p (after the backslash) into s: a class escape
 * adds its set, any other adds one code point (*single set to it, else
 * UINT32_MAX). false (why set) for escapes the grammar cannot express.
 */
static bool rx_escape(struct rx *x, bool in_class, struct cset *s, uint32_t *single)
{
	*single = UINT32_MAX;
	if (x->p >= x->end) {
		x->why = "a trailing backslash";
		return false;
	}
	char c = *x->p++;
	struct cset t = { 0 };
	switch (c) {
	case 'd': case 'D': set_digit(&t); break;
	case 'w': case 'W': set_word(&t); break;
	case 's': case 'S': set_space(&t); break;
	default: break;
	}
	if (t.n) {
		if (c == 'D' || c == 'W' || c == 'S')
			cset_negate(&t);
		cset_union(s, &t);
		free(t.r);
		return true;
	}
	uint32_t cp;
	switch (c) {
	case 'n': cp = '\n'; break;
	case 't': cp = '\t'; break;
	case 'r': cp = '\r'; break;
	case 'f': cp = '\f'; break;
	case 'v': cp = '\v'; break;
	case '0': cp = 0; break;
	case 'b':
		if (!in_class) {
			x->why = "a word boundary \\b";
			return false;
		}
		cp = '\b';
		break;
	case 'B':
		x->why = "a word boundary \\B";
		return false;
	case 'k':
		x->why = "a backreference \\k";
		return false;
	case 'p': case 'P':
		x->why = "a Unicode property escape";
		return false;
	case 'c':
		x->why = "a control escape \\c";
		return false;
	case 'x':
		if (x->end - x->p < 2 || hexval(x->p[0]) < 0 || hexval(x->p[1]) < 0) {
			x->why = "a malformed \\x escape";
			return false;
		}
		cp = (uint32_t)(hexval(x->p[0]) << 4 | hexval(x->p[1]));
		x->p += 2;
		break;
	case 'u':
		cp = 0;
		if (x->p < x->end && *x->p == '{') {
			x->p++;
			int nd = 0;
			while (x->p < x->end && hexval(*x->p) >= 0 && nd < 7) {
				cp = cp << 4 | (uint32_t)hexval(*x->p++);
				nd++;
			}
			if (!nd || x->p >= x->end || *x->p != '}' || cp > CP_MAX) {
				x->why = "a malformed \\u{} escape";
				return false;
			}
			x->p++;
		} else {
			if (x->end - x->p < 4) {
				x->why = "a malformed \\u escape";
				return false;
			}
			for (int i = 0; i < 4; i++) {
				int h = hexval(x->p[i]);
				if (h < 0) {
					x->why = "a malformed \\u escape";
					return false;
				}
				cp = cp << 4 | (uint32_t)h;
			}
			x->p += 4;
		}
		break;
	default:
		if (c >= '1' && c <= '9') {
			x->why = "a backreference";
			return false;
		}
		x->p--;
		if (!rx_utf8(x, &cp))
			return false;
		break;
	}
	cset_add(s, cp, cp);
	*single = cp;
	return true;
}

/* A bracket class at x->p (just after '['). */
static const char *rx_class(struct rx *x)
{
	struct cset s = { 0 };
	bool neg = false;
	if (x->p < x->end && *x->p == '^') {
		neg = true;
		x->p++;
	}
	bool first = true;
	for (;;) {
		if (x->p >= x->end) {
			x->why = "an unterminated character class";
			goto fail;
		}
		if (*x->p == ']') {
			x->p++;
			break;
		}
		uint32_t lo, hi;
		if (*x->p == '\\') {
			x->p++;
			if (!rx_escape(x, true, &s, &lo))
				goto fail;
		} else if (!rx_utf8(x, &lo)) {
			goto fail;
		}
		first = false;
		if (lo == UINT32_MAX || x->end - x->p < 2 || *x->p != '-' || x->p[1] == ']') {
			if (lo != UINT32_MAX)
				cset_add(&s, lo, lo);
			continue;
		}
		x->p++;
		if (*x->p == '\\') {
			x->p++;
			struct cset t = { 0 };
			bool ok = rx_escape(x, true, &t, &hi);
			free(t.r);
			if (!ok)
				goto fail;
			if (hi == UINT32_MAX) {
				x->why = "a class escape as a range bound";
				goto fail;
			}
		} else if (!rx_utf8(x, &hi)) {
			goto fail;
		}
		if (hi < lo) {
			x->why = "a range out of order in a character class";
			goto fail;
		}
		cset_add(&s, lo, hi);
	}
	if (first && !neg) {
		x->why = "an empty character class";
		goto fail;
	}
	if (neg)
		cset_negate(&s);
	const char *e = cset_gbnf(x->g, &s);
	if (!e && !x->g->rc)
		x->why = "a character class that admits nothing";
	free(s.r);
	return e;
fail:
	free(s.r);
	return NULL;
}

static const char *rx_alt(struct rx *x, bool top);

static bool rx_number(struct rx *x, long *v)
{
	if (x->p >= x->end || *x->p < '0' || *x->p > '9')
		return false;
	*v = 0;
	while (x->p < x->end && *x->p >= '0' && *x->p <= '9') {
		*v = *v * 10 + (*x->p++ - '0');
		if (*v > 1000000)
			*v = 1000000;
	}
	return true;
}

static const char *rx_atom(struct rx *x)
{
	struct gen *g = x->g;
	char c = *x->p;
	if (c == '(') {
		x->p++;
		if (x->p < x->end && *x->p == '?') {
			x->p++;
			if (x->p < x->end && *x->p == ':') {
				x->p++;
			} else if (x->p < x->end && (*x->p == '<' || *x->p == 'P') && x->end - x->p > 1 &&
				   x->p[1] != '=' && x->p[1] != '!') {
				const char *close = memchr(x->p, '>', (size_t)(x->end - x->p));
				if (!close) {
					x->why = "an unterminated group name";
					return NULL;
				}
				x->p = close + 1;
			} else {
				x->why = "a lookaround or inline flag group";
				return NULL;
			}
		}
		if (++x->depth > 64) {
			x->why = "groups nested too deeply";
			return NULL;
		}
		const char *e = rx_alt(x, false);
		x->depth--;
		if (!e)
			return NULL;
		if (x->p >= x->end || *x->p != ')') {
			x->why = "an unbalanced parenthesis";
			return NULL;
		}
		x->p++;
		return fmt(g, "( %s )", e);
	}
	struct cset s = { 0 };
	const char *e = NULL;
	if (c == '[') {
		x->p++;
		return rx_class(x);
	} else if (c == '.') {
		x->p++;
		cset_add(&s, '\n', '\n');
		cset_add(&s, '\r', '\r');
		cset_add(&s, 0x2028, 0x2029);
		cset_negate(&s);
	} else if (c == '\\') {
		x->p++;
		uint32_t one;
		if (!rx_escape(x, false, &s, &one))
			goto out;
	} else if (c == '^' || c == '$') {
		x->why = "an anchor inside the pattern";
		goto out;
	} else if (c == '*' || c == '+' || c == '?' || c == '{') {
		x->why = "a quantifier with nothing to repeat";
		goto out;
	} else {
		uint32_t cp;
		if (!rx_utf8(x, &cp))
			goto out;
		cset_add(&s, cp, cp);
	}
	e = cset_gbnf(g, &s);
	if (!e && !g->rc)
		x->why = "a character set that admits nothing";
out:
	free(s.r);
	return e;
}

static const char *rx_quant(struct rx *x, const char *atom)
{
	if (x->p >= x->end)
		return atom;
	char c = *x->p;
	const char *e = atom;
	if (c == '*' || c == '+' || c == '?') {
		x->p++;
		e = fmt(x->g, "%s%c", atom, c);
	} else if (c == '{') {
		x->p++;
		long m, n = -1;
		if (!rx_number(x, &m)) {
			x->why = "a malformed {m,n} quantifier";
			return NULL;
		}
		bool comma = false;
		if (x->p < x->end && *x->p == ',') {
			comma = true;
			x->p++;
			if (x->p < x->end && *x->p != '}' && !rx_number(x, &n)) {
				x->why = "a malformed {m,n} quantifier";
				return NULL;
			}
		}
		if (x->p >= x->end || *x->p != '}') {
			x->why = "a malformed {m,n} quantifier";
			return NULL;
		}
		x->p++;
		if (m > JSON_SCHEMA_REPEAT_MAX || n > JSON_SCHEMA_REPEAT_MAX) {
			x->why = "a repetition bound above JSON_SCHEMA_REPEAT_MAX";
			return NULL;
		}
		if (comma && n >= 0 && n < m) {
			x->why = "a {m,n} quantifier with n < m";
			return NULL;
		}
		if (!comma)
			e = fmt(x->g, "%s{%ld}", atom, m);
		else if (n < 0)
			e = fmt(x->g, "%s{%ld,}", atom, m);
		else
			e = fmt(x->g, "%s{%ld,%ld}", atom, m, n);
	} else {
		return atom;
	}
	if (x->p < x->end && *x->p == '?')
		x->p++;		/* lazy: the same language */
	if (x->p < x->end && (*x->p == '*' || *x->p == '+' || *x->p == '?' || *x->p == '{')) {
		x->why = "a quantifier on a quantifier";
		return NULL;
	}
	return e;
}

/* One alternative; at the top level it may open with ^ and end with $. */
static const char *rx_seq(struct rx *x, bool top)
{
	struct gen *g = x->g;
	bool anchor_start = false, anchor_end = false;
	if (top && x->p < x->end && *x->p == '^') {
		anchor_start = true;
		x->p++;
	}
	struct strbuf b = { 0 };
	if (top && !anchor_start)
		strbuf_printf(&b, "%s* ", prim(g, PRIM_CHAR));
	size_t items = 0;
	while (x->p < x->end && *x->p != '|' && *x->p != ')') {
		if (top && *x->p == '$' && (x->p + 1 == x->end || x->p[1] == '|')) {
			anchor_end = true;
			x->p++;
			break;
		}
		const char *a = rx_atom(x);
		if (a)
			a = rx_quant(x, a);
		if (!a) {
			strbuf_free(&b);
			return NULL;
		}
		strbuf_printf(&b, "%s%s", items++ ? " " : "", a);
	}
	if (!items)
		strbuf_put(&b, "\"\"", 2);
	if (top && !anchor_end)
		strbuf_printf(&b, " %s*", prim(g, PRIM_CHAR));
	return keep(g, &b);
}

static const char *rx_alt(struct rx *x, bool top)
{
	struct strbuf b = { 0 };
	size_t n = 0;
	for (;;) {
		const char *s = rx_seq(x, top);
		if (!s) {
			strbuf_free(&b);
			return NULL;
		}
		strbuf_printf(&b, "%s%s", n++ ? " | " : "", s);
		if (x->p < x->end && *x->p == '|') {
			x->p++;
			continue;
		}
		break;
	}
	if (n == 1)
		return keep(x->g, &b);
	struct strbuf p = { 0 };
	strbuf_printf(&p, "( %s )", b.p);
	strbuf_free(&b);
	return keep(x->g, &p);
}

/* GBNF of the string contents pattern admits; NULL with *why when refused. */
static const char *pattern_gbnf(struct gen *g, const char *pattern, const char **why)
{
	struct rx x = { g, pattern, pattern + strlen(pattern), NULL, 0 };
	const char *e = rx_alt(&x, true);
	if (e && x.p != x.end) {
		x.why = "an unbalanced ')'";
		e = NULL;
	}
	*why = x.why;
	return e;
}

/* ---- numbers ---- */

static int ndigits(int64_t v)
{
	int n = 1;
	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

static int64_t pow10i(int k)
{
	int64_t p = 1;
	while (k-- > 0)
		p *= 10;
	return p;
}

static const char nines[] = "9999999999999999";
static const char zeros[] = "0000000000000000";

/* Digit strings a..z of n digits each (leading zeros allowed inside). */
static void digits_range(struct strbuf *b, const char *a, const char *z, int n)
{
	if (n == 0)
		return;
	if (a[0] == z[0]) {
		strbuf_printf(b, "\"%c\"", a[0]);
		if (n > 1) {
			strbuf_put(b, " ", 1);
			digits_range(b, a + 1, z + 1, n - 1);
		}
		return;
	}
	bool low_full = !strncmp(a + 1, zeros, (size_t)n - 1);
	bool high_full = !strncmp(z + 1, nines, (size_t)n - 1);
	if (low_full && high_full) {
		strbuf_printf(b, "[%c-%c]", a[0], z[0]);
		if (n > 1)
			strbuf_printf(b, " [0-9]{%d}", n - 1);
		return;
	}
	strbuf_put(b, "( ", 2);
	int lo = a[0], hi = z[0];
	int alts = 0;
	if (!low_full) {
		strbuf_printf(b, "\"%c\" ", a[0]);
		digits_range(b, a + 1, nines, n - 1);
		lo++;
		alts++;
	}
	if (!high_full)
		hi--;
	if (lo <= hi) {
		strbuf_printf(b, "%s[%c-%c]", alts++ ? " | " : "", lo, hi);
		if (n > 1)
			strbuf_printf(b, " [0-9]{%d}", n - 1);
	}
	if (!high_full) {
		strbuf_printf(b, "%s\"%c\" ", alts++ ? " | " : "", z[0]);
		digits_range(b, zeros, z + 1, n - 1);
	}
	strbuf_put(b, " )", 2);
}

/* The decimal forms (no leading zeros) of the integers in [lo, hi], 0 <= lo <= hi <= INT_MAG_MAX. */
static const char *int_range(struct gen *g, int64_t lo, int64_t hi)
{
	struct strbuf b = { 0 };
	int nlo = ndigits(lo), nhi = ndigits(hi), alts = 0;
	for (int k = nlo; k <= nhi; k++) {
		int64_t a = k == nlo ? lo : pow10i(k - 1);
		int64_t z = k == nhi ? hi : pow10i(k) - 1;
		if (alts++)
			strbuf_put(&b, " | ", 3);
		if (k > 1 && a == pow10i(k - 1) && z == pow10i(k) - 1) {
			int k2 = k;
			while (k2 + 1 <= nhi && (k2 + 1 < nhi || hi == pow10i(k2 + 1) - 1))
				k2++;
			if (k2 == k)
				strbuf_printf(&b, "[1-9] [0-9]{%d}", k - 1);
			else
				strbuf_printf(&b, "[1-9] [0-9]{%d,%d}", k - 1, k2 - 1);
			k = k2;
			continue;
		}
		char sa[24], sz[24];
		snprintf(sa, sizeof sa, "%lld", (long long)a);
		snprintf(sz, sizeof sz, "%lld", (long long)z);
		digits_range(&b, sa, sz, k);
	}
	if (alts > 1) {
		struct strbuf p = { 0 };
		strbuf_printf(&p, "( %s )", b.p);
		strbuf_free(&b);
		return keep(g, &p);
	}
	return keep(g, &b);
}

#define FRAC_ANY "( \".\" [0-9]{1,16} )?"
#define FRAC_ZERO "( \".\" \"0\"{1,16} )?"
#define FRAC_NONZERO "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}"

/*
 * Magnitudes m (no sign) in the range from a to b (both integers, 0 <= a <=
 * b <= INT_MAG_MAX; b_inf: no upper bound), each end open when *_excl.
 * Integers only when !frac. Appends alternatives to b; returns their count.
 */
static int mag_range(struct gen *g, struct strbuf *b, int alts, int64_t a, bool a_excl, int64_t z,
		     bool z_excl, bool z_inf, bool frac)
{
	const char *sep = " | ";
	int64_t start = a;
	if (a_excl) {
		if (frac) {
			if (z_inf || a < z)
				strbuf_printf(b, "%s\"%lld\" " FRAC_NONZERO, alts++ ? sep : "", (long long)a);
		}
		start = a + 1;
	}
	if (z_inf) {
		const char *r = int_range(g, start, INT_MAG_MAX);
		if (r)
			strbuf_printf(b, "%s%s%s", alts++ ? sep : "", r, frac ? " " FRAC_ANY : "");
		return alts;
	}
	int64_t last = frac || z_excl ? z - 1 : z;
	if (start <= last) {
		const char *r = int_range(g, start, last);
		if (r)
			strbuf_printf(b, "%s%s%s", alts++ ? sep : "", r, frac ? " " FRAC_ANY : "");
	}
	if (frac && !z_excl && start <= z)
		strbuf_printf(b, "%s\"%lld\" " FRAC_ZERO, alts++ ? sep : "", (long long)z);
	return alts;
}

/* Reads a numeric bound; false when absent. Draft-04 boolean exclusive flags are folded in. */
static bool bound_get(const cJSON *s, const char *key, const char *excl_key, double *v, bool *excl)
{
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, key);
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, excl_key);
	bool have = false;
	*excl = false;
	if (cJSON_IsNumber(n)) {
		*v = n->valuedouble;
		have = true;
		if (cJSON_IsTrue(e))
			*excl = true;
	}
	if (cJSON_IsNumber(e) && (!have || e->valuedouble >= *v) && strcmp(key, "minimum") == 0) {
		*v = e->valuedouble;
		*excl = true;
		have = true;
	} else if (cJSON_IsNumber(e) && (!have || e->valuedouble <= *v) && strcmp(key, "maximum") == 0) {
		*v = e->valuedouble;
		*excl = true;
		have = true;
	}
	return have;
}

/* A number or integer schema with bounds. */
static const char *visit_number(struct gen *g, const cJSON *s, bool integer, const char *path)
{
	double lo = 0, hi = 0;
	bool lo_excl, hi_excl;
	bool has_lo = bound_get(s, "minimum", "exclusiveMinimum", &lo, &lo_excl);
	bool has_hi = bound_get(s, "maximum", "exclusiveMaximum", &hi, &hi_excl);
	if ((has_lo && !isfinite(lo)) || (has_hi && !isfinite(hi))) {
		fail(g, EINVAL, "a bound at %s is not a finite number", at(path));
		return NULL;
	}
	if (!has_lo && !has_hi)
		return prim(g, integer ? PRIM_INTEGER : PRIM_NUMBER);
	if (integer) {
		/* Fold the bounds into a closed integer range. */
		if (has_lo) {
			double c = ceil(lo);
			lo = lo_excl && c == lo ? c + 1 : c;
			lo_excl = false;
		}
		if (has_hi) {
			double f = floor(hi);
			hi = hi_excl && f == hi ? f - 1 : f;
			hi_excl = false;
		}
	} else {
		/* Fractional bounds are widened to the integers around them (looser, never stricter). */
		if (has_lo && lo != floor(lo)) {
			warn(g, "minimum %g at %s is enforced as %g", lo, at(path), floor(lo));
			lo = floor(lo);
			lo_excl = false;
		}
		if (has_hi && hi != floor(hi)) {
			warn(g, "maximum %g at %s is enforced as %g", hi, at(path), ceil(hi));
			hi = ceil(hi);
			hi_excl = false;
		}
	}
	/* Beyond 16 digits the number grammar has no values: such bounds are no bounds. */
	const double beyond = 1e16;
	if ((has_lo && lo >= beyond) || (has_hi && hi <= -beyond)) {
		fail(g, EINVAL, "the bounds at %s are beyond 16 digits", at(path));
		return NULL;
	}
	if (has_lo && lo <= -beyond)
		has_lo = false;
	if (has_hi && hi >= beyond)
		has_hi = false;
	if (!has_lo && !has_hi)
		return prim(g, integer ? PRIM_INTEGER : PRIM_NUMBER);
	if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_excl || hi_excl)))) {
		fail(g, EINVAL, "no %s satisfies the bounds at %s", integer ? "integer" : "number", at(path));
		return NULL;
	}
	struct strbuf b = { 0 };
	int alts = 0;
	bool frac = !integer;
	/* Negative values: "-" then the magnitude range. */
	if (!has_lo || lo < 0) {
		int64_t a = has_hi && hi < 0 ? (int64_t)-hi : 0;
		bool a_excl = has_hi && hi < 0 ? hi_excl : true;
		if (integer && a_excl) {
			a++;
			a_excl = false;
		}
		int64_t z = has_lo ? (int64_t)-lo : INT_MAG_MAX;
		struct strbuf m = { 0 };
		int n = mag_range(g, &m, 0, a, a_excl, z, has_lo && lo_excl, !has_lo, frac);
		if (n)
			strbuf_printf(&b, "%s\"-\" %s%s%s", alts++ ? " | " : "", n > 1 ? "( " : "", m.p,
				      n > 1 ? " )" : "");
		strbuf_free(&m);
	}
	/* Zero and positive values. */
	if (!has_hi || hi >= 0) {
		int64_t a = has_lo && lo > 0 ? (int64_t)lo : 0;
		bool a_excl = has_lo && lo >= 0 ? lo_excl : false;
		int64_t z = has_hi ? (int64_t)hi : INT_MAG_MAX;
		alts = mag_range(g, &b, alts, a, a_excl, z, has_hi && hi_excl, !has_hi, frac);
	}
	if (!alts) {
		strbuf_free(&b);
		fail(g, EINVAL, "no %s satisfies the bounds at %s", integer ? "integer" : "number", at(path));
		return NULL;
	}
	if (alts > 1) {
		struct strbuf p = { 0 };
		strbuf_printf(&p, "( %s )", b.p);
		strbuf_free(&b);
		return keep(g, &p);
	}
	return keep(g, &b);
}

/* ---- the walk ---- */

static const char *visit(struct gen *g, const cJSON *s, const char *name, const char *path);

/* GBNF of exactly the JSON value v (members and items with whitespace between). */
static void put_value(struct gen *g, struct strbuf *b, const cJSON *v, int depth)
{
	if (depth > g->opt.depth_max) {
		fail(g, EINVAL, "an enum or const value nests deeper than %d", g->opt.depth_max);
		return;
	}
	if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
		bool obj = cJSON_IsObject(v);
		const char *ws = prim(g, PRIM_WS);
		strbuf_printf(b, "\"%c\" %s", obj ? '{' : '[', ws);
		int i = 0;
		for (const cJSON *c = v->child; c; c = c->next, i++) {
			if (i)
				strbuf_printf(b, " \",\" %s", ws);
			strbuf_put(b, " ", 1);
			if (obj) {
				put_json_string(b, c->string);
				strbuf_printf(b, " %s \":\" %s ", ws, ws);
			}
			put_value(g, b, c, depth + 1);
			strbuf_printf(b, " %s", ws);
		}
		strbuf_printf(b, " \"%c\"", obj ? '}' : ']');
		return;
	}
	char *j = cJSON_PrintUnformatted(v);
	if (!j) {
		b->rc = -ENOMEM;
		return;
	}
	put_literal(b, j, strlen(j));
	cJSON_free(j);
}

static bool type_has(const cJSON *t, const char *name);

/* The JSON Schema type of a value; an integral number is an "integer". */
static const char *value_type(const cJSON *v)
{
	if (cJSON_IsObject(v))
		return "object";
	if (cJSON_IsArray(v))
		return "array";
	if (cJSON_IsString(v))
		return "string";
	if (cJSON_IsBool(v))
		return "boolean";
	if (cJSON_IsNumber(v))
		return v->valuedouble == floor(v->valuedouble) ? "integer" : "number";
	return "null";
}

/* const (is_const) or enum values; those of a type that type (may be NULL) leaves out are dropped. */
static const char *visit_enum(struct gen *g, const cJSON *values, bool is_const, const cJSON *type,
			      const char *path)
{
	if (!is_const && (!cJSON_IsArray(values) || !values->child)) {
		fail(g, EINVAL, "\"enum\" at %s is not a non-empty array", at(path));
		return NULL;
	}
	struct strbuf b = { 0 };
	size_t n = 0;
	for (const cJSON *v = is_const ? values : values->child; v; v = is_const ? NULL : v->next) {
		if (type && !type_has(type, value_type(v)))
			continue;
		if (n++)
			strbuf_put(&b, " | ", 3);
		put_value(g, &b, v, 0);
	}
	if (!n) {
		fail(g, EINVAL, "no %s value at %s is of the schema's type", is_const ? "const" : "enum",
		     at(path));
		strbuf_free(&b);
		return NULL;
	}
	if (n > 1) {
		struct strbuf p = { 0 };
		strbuf_printf(&p, "( %s )", b.p);
		strbuf_free(&b);
		return keep(g, &p);
	}
	return keep(g, &b);
}

/* Reads a non-negative integer keyword; -1 when absent or too large (then warned). */
static long count_get(struct gen *g, const cJSON *s, const char *key, const char *path)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
	if (!v)
		return -1;
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
		fail(g, EINVAL, "\"%s\" at %s is not a non-negative integer", key, at(path));
		return -1;
	}
	if (v->valuedouble > JSON_SCHEMA_REPEAT_MAX) {
		warn(g, "\"%s\" %.0f at %s is above %d; not enforced", key, v->valuedouble, at(path),
		     JSON_SCHEMA_REPEAT_MAX);
		return -1;
	}
	return (long)v->valuedouble;
}

/* "{m,n}" / "{m,}" / "*" for a count range; n < 0 is unbounded. */
static const char *repeat(struct gen *g, long m, long n)
{
	if (m <= 0 && n < 0)
		return "*";
	if (m == 1 && n < 0)
		return "+";
	if (m <= 0 && n == 1)
		return "?";
	if (n < 0)
		return fmt(g, "{%ld,}", m);
	if (m == n)
		return fmt(g, "{%ld}", m);
	return fmt(g, "{%ld,%ld}", m < 0 ? 0 : m, n);
}

static const char *visit_string(struct gen *g, const cJSON *s, const char *path)
{
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
	const cJSON *form = cJSON_GetObjectItemCaseSensitive(s, "format");
	long mn = count_get(g, s, "minLength", path), mx = count_get(g, s, "maxLength", path);
	if (g->rc)
		return NULL;
	if (mn >= 0 && mx >= 0 && mn > mx) {
		fail(g, EINVAL, "minLength > maxLength at %s", at(path));
		return NULL;
	}
	bool lengths = mn > 0 || mx >= 0;
	if (pat) {
		if (!cJSON_IsString(pat)) {
			fail(g, EINVAL, "\"pattern\" at %s is not a string", at(path));
			return NULL;
		}
		const char *why = NULL;
		const char *e = pattern_gbnf(g, pat->valuestring, &why);
		if (g->rc)
			return NULL;
		if (e) {
			if (form)
				warn(g, "\"format\" beside \"pattern\" at %s is not enforced", at(path));
			if (lengths)
				warn(g, "\"minLength\" / \"maxLength\" beside \"pattern\" at %s are not enforced",
				     at(path));
			return fmt(g, "\"\\\"\" %s \"\\\"\"", e);
		}
		warn(g, "\"pattern\" at %s has %s; not enforced (any string)", at(path), why);
	}
	if (form) {
		if (!cJSON_IsString(form)) {
			fail(g, EINVAL, "\"format\" at %s is not a string", at(path));
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
					warn(g, "\"minLength\" / \"maxLength\" beside \"format\" at %s are not enforced",
					     at(path));
				return fmt(g, "\"\\\"\" %s \"\\\"\"", prim(g, formats[i].p));
			}
		}
		warn(g, "format \"%s\" at %s is not enforced", form->valuestring, at(path));
	}
	if (!lengths)
		return prim(g, PRIM_STRING);
	return fmt(g, "\"\\\"\" %s%s \"\\\"\"", prim(g, PRIM_CHAR), repeat(g, mn, mx));
}

static const char *visit_array(struct gen *g, const cJSON *s, const char *name, const char *path)
{
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
	const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
	const cJSON *rest = items;
	const char *prefix_key = "prefixItems";
	if (cJSON_IsArray(items)) {	/* draft 4-2019 tuple form */
		prefix = items;
		prefix_key = "items";
		rest = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
	}
	if (prefix && !cJSON_IsArray(prefix)) {
		fail(g, EINVAL, "\"prefixItems\" at %s is not an array", at(path));
		return NULL;
	}
	long mn = count_get(g, s, "minItems", path), mx = count_get(g, s, "maxItems", path);
	if (g->rc)
		return NULL;
	if (mn < 0)
		mn = 0;
	if (mx >= 0 && mn > mx) {
		fail(g, EINVAL, "minItems > maxItems at %s", at(path));
		return NULL;
	}
	int k = prefix ? cJSON_GetArraySize(prefix) : 0;
	bool rest_none = cJSON_IsFalse(rest);
	if (rest_none && mn > k) {
		fail(g, EINVAL, "minItems at %s needs more items than the tuple allows", at(path));
		return NULL;
	}
	if (rest_none || (mx >= 0 && mx <= k)) {
		if (mx < 0 || mx > k)
			mx = k;
	}
	const char *ws = prim(g, PRIM_WS);
	g->consume++;
	/* Item expressions: the prefix, then the rest. */
	const char **pe = k ? calloc((size_t)k, sizeof *pe) : NULL;
	if (k && !pe) {
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	int i = 0;
	for (const cJSON *it = prefix ? prefix->child : NULL; it && i < k; it = it->next, i++) {
		const char *p = path_index(g, path, prefix_key, i);
		const char *hint = fmt(g, "%s-%d", name, i);
		if (!p || !hint)
			break;
		pe[i] = as_rule(g, hint, visit(g, it, hint, p));
	}
	const char *re = NULL;
	bool more = !rest_none && (mx < 0 || mx > k);
	if (more && !g->rc) {
		const char *hint = fmt(g, "%s-item", name);
		const char *p = path_child(g, path, prefix == items && items ? "additionalItems" : "items");
		re = rest ? as_rule(g, hint, visit(g, rest, hint, p)) : prim(g, PRIM_VALUE);
	}
	g->consume--;
	if (g->rc) {
		free(pe);
		return NULL;
	}
	/* Position j is required when j < mn; each but the first is preceded by a comma. */
	struct strbuf b = { 0 };
	strbuf_printf(&b, "\"[\" %s ", ws);
	int open = 0;
	for (int j = 0; j < k && (mx < 0 || j < mx); j++) {
		bool opt = j >= mn;
		if (opt) {
			strbuf_put(&b, "( ", 2);
			open++;
		}
		if (j)
			strbuf_printf(&b, "\",\" %s ", ws);
		strbuf_printf(&b, "%s %s ", pe[j], ws);
	}
	if (re) {
		long rmn = mn > k ? mn - k : 0;
		long rmx = mx < 0 ? -1 : mx - k;
		if (k == 0) {
			/* First item without a comma, then rmn-1 .. rmx-1 more. */
			const char *tail = repeat(g, rmn > 1 ? rmn - 1 : 0, rmx < 0 ? -1 : rmx - 1);
			if (rmx == 1)
				strbuf_printf(&b, "%s%s %s %s", rmn ? "" : "( ", re, ws, rmn ? "" : ")? ");
			else
				strbuf_printf(&b, "%s%s %s ( \",\" %s %s %s )%s%s ", rmn ? "" : "( ", re, ws, ws,
					      re, ws, tail, rmn ? "" : " )?");
		} else {
			strbuf_printf(&b, "( \",\" %s %s %s )%s ", ws, re, ws, repeat(g, rmn, rmx));
		}
	}
	for (; open; open--)
		strbuf_put(&b, ")? ", 3);
	strbuf_put(&b, "\"]\"", 3);
	free(pe);
	return keep(g, &b);
}

struct member {
	const char *kv;		/* rule: key ws ":" ws value ws */
	bool required;
};

static bool required_has(const cJSON *req, const char *key)
{
	const cJSON *r;
	if (!key || !cJSON_IsArray(req))
		return false;
	cJSON_ArrayForEach(r, req)
		if (cJSON_IsString(r) && !strcmp(r->valuestring, key))
			return true;
	return false;
}

/* A trie of the listed member names, for extra-member keys that must differ from them. */
struct trie {
	struct trie_node {
		uint32_t cp;
		int child, sibling;	/* first child, next sibling; -1: none */
		bool terminal;		/* a name ends here */
	} *v;
	size_t n, cap;
};

static int trie_insert(struct trie *t, const uint32_t *cp, size_t n)
{
	int at = 0;
	for (size_t i = 0; i < n; i++) {
		int c = t->v[at].child;
		while (c >= 0 && t->v[c].cp != cp[i])
			c = t->v[c].sibling;
		if (c < 0) {
			if (array_grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v))
				return -ENOMEM;
			c = (int)t->n++;
			t->v[c] = (struct trie_node){ cp[i], -1, t->v[at].child, false };
			t->v[at].child = c;
		}
		at = c;
	}
	t->v[at].terminal = true;
	return 0;
}

#define KEY_CHAR_ESCAPE "\"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )"

/* String contents (and the closing quote) after the prefix of node i that are no listed name. */
static const char *trie_gbnf(struct gen *g, const struct trie *t, int i, const char *name, int depth)
{
	struct strbuf b = { 0 };
	int alts = 0;
	if (!t->v[i].terminal) {
		strbuf_put(&b, "\"\\\"\"", 4);
		alts++;
	}
	struct cset other = { 0 };
	cset_add(&other, 0, 0x1f);
	cset_add(&other, '"', '"');
	cset_add(&other, '\\', '\\');
	for (int c = t->v[i].child; c >= 0; c = t->v[c].sibling) {
		cset_add(&other, t->v[c].cp, t->v[c].cp);
		const char *e = trie_gbnf(g, t, c, name, depth + 1);
		if (!e)
			break;
		struct strbuf one = { 0 };
		put_utf8(&one, t->v[c].cp);
		if (alts++)
			strbuf_put(&b, " | ", 3);
		put_literal(&b, one.p, one.len);
		strbuf_printf(&b, " %s", e);
		strbuf_free(&one);
	}
	cset_negate(&other);
	strbuf_printf(&b, "%s( ", alts++ ? " | " : "");
	if (other.n) {
		strbuf_put(&b, "[", 1);
		for (size_t k = 0; k < other.n; k++) {
			put_class_char(&b, other.r[k][0]);
			if (other.r[k][1] > other.r[k][0]) {
				strbuf_put(&b, "-", 1);
				put_class_char(&b, other.r[k][1]);
			}
		}
		strbuf_put(&b, "] | ", 4);
	}
	strbuf_printf(&b, KEY_CHAR_ESCAPE " ) %s* \"\\\"\"", prim(g, PRIM_CHAR));
	free(other.r);
	if (other.rc)
		b.rc = -ENOMEM;
	struct strbuf p = { 0 };
	strbuf_printf(&p, "( %s )", b.p ? b.p : "");
	strbuf_free(&b);
	const char *e = keep(g, &p);
	if (e && depth % 16 == 15)
		e = as_rule(g, fmt(g, "%s-%d", name, depth), e);
	return e;
}

/*
 * A JSON string that is none of the names of members m (as written in
 * canonical form), for the keys of extra members; any string, with a
 * warning, when a name needs escapes or is very long.
 */
static const char *key_other(struct gen *g, const char *const *names, size_t n, const char *name,
			     const char *path)
{
	struct trie t = { 0 };
	const char *e = NULL;
	if (array_grow((void **)&t.v, &t.cap, 1, sizeof *t.v)) {
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	t.v[0] = (struct trie_node){ 0, -1, -1, false };
	t.n = 1;
	uint32_t cp[256];
	for (size_t i = 0; i < n; i++) {
		struct rx x = { g, names[i], names[i] + strlen(names[i]), NULL, 0 };
		size_t k = 0;
		while (x.p < x.end && k < sizeof cp / sizeof *cp && rx_utf8(&x, &cp[k]) && cp[k] >= 0x20 &&
		       cp[k] != '"' && cp[k] != '\\')
			k++;
		if (x.p < x.end) {
			warn(g, "extra members at %s may repeat the listed name \"%s\"", at(path), names[i]);
			free(t.v);
			return prim(g, PRIM_STRING);
		}
		if (trie_insert(&t, cp, k)) {
			fail(g, ENOMEM, "out of memory");
			free(t.v);
			return NULL;
		}
	}
	const char *body = trie_gbnf(g, &t, 0, name, 0);
	if (body)
		e = as_rule(g, name, fmt(g, "\"\\\"\" %s", body));
	free(t.v);
	return e;
}

static const char *visit_object(struct gen *g, const cJSON *s, const char *name, const char *path)
{
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
	const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
	if (props && !cJSON_IsObject(props)) {
		fail(g, EINVAL, "\"properties\" at %s is not an object", at(path));
		return NULL;
	}
	if (req) {
		const cJSON *r;
		bool ok = cJSON_IsArray(req);
		cJSON_ArrayForEach(r, req)
			ok = ok && cJSON_IsString(r);
		if (!ok) {
			fail(g, EINVAL, "\"required\" at %s is not an array of strings", at(path));
			return NULL;
		}
	}
	if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl)) {
		fail(g, EINVAL, "\"additionalProperties\" at %s is not a schema", at(path));
		return NULL;
	}
	bool extras = addl ? !cJSON_IsFalse(addl) : !g->opt.strict;
	const char *ws = prim(g, PRIM_WS);
	size_t n_props = (size_t)cJSON_GetArraySize(props) + (size_t)cJSON_GetArraySize(req);
	struct member *m = calloc(n_props + 1, sizeof *m);
	if (!m) {
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	size_t n = 0;
	g->consume++;
	const cJSON *p;
	cJSON_ArrayForEach(p, props) {
		if (g->rc)
			break;
		bool required = required_has(req, p->string);
		if (cJSON_IsFalse(p)) {
			if (required)
				fail(g, EINVAL, "property \"%s\" at %s is required but its schema is false",
				     p->string, at(path));
			continue;
		}
		const char *hint = fmt(g, "%s-%s", name, p->string);
		const char *pp = path_child(g, path_child(g, path, "properties"), p->string);
		if (!hint || !pp)
			break;
		const char *v = as_rule(g, hint, visit(g, p, hint, pp));
		struct strbuf kv = { 0 };
		put_json_string(&kv, p->string);
		strbuf_printf(&kv, " %s \":\" %s %s %s", ws, ws, v ? v : "", ws);
		const char *body = keep(g, &kv);
		const char *kvn = name_new(g, fmt(g, "%s-kv", hint));
		rule_add(g, kvn, body);
		m[n++] = (struct member){ kvn, required };
	}
	/* Required names without a property schema take additionalProperties' schema. */
	const cJSON *r;
	cJSON_ArrayForEach(r, req) {
		if (g->rc)
			break;
		if (props && cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
			continue;
		if (!extras) {
			fail(g, EINVAL, "required property \"%s\" at %s is not in \"properties\" and "
			     "additionalProperties is false", r->valuestring, at(path));
			break;
		}
		const char *hint = fmt(g, "%s-%s", name, r->valuestring);
		const char *v = addl && cJSON_IsObject(addl) ?
			as_rule(g, hint, visit(g, addl, hint, path_child(g, path, "additionalProperties"))) :
			prim(g, PRIM_VALUE);
		struct strbuf kv = { 0 };
		put_json_string(&kv, r->valuestring);
		strbuf_printf(&kv, " %s \":\" %s %s %s", ws, ws, v ? v : "", ws);
		const char *body = keep(g, &kv);
		const char *kvn = name_new(g, fmt(g, "%s-kv", hint));
		rule_add(g, kvn, body);
		m[n++] = (struct member){ kvn, true };
	}
	const char *extra = NULL;
	if (extras && !g->rc) {
		const char *hint = fmt(g, "%s-extra", name);
		const char *v = addl && cJSON_IsObject(addl) ?
			as_rule(g, hint, visit(g, addl, hint, path_child(g, path, "additionalProperties"))) :
			prim(g, PRIM_VALUE);
		const char **names = calloc(n + 1, sizeof *names);
		if (!names) {
			fail(g, ENOMEM, "out of memory");
			free(m);
			return NULL;
		}
		size_t k = 0;
		cJSON_ArrayForEach(p, props)
			names[k++] = p->string;
		cJSON_ArrayForEach(r, req)
			if (!props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
				names[k++] = r->valuestring;
		const char *key = k ? key_other(g, names, k, fmt(g, "%s-extra-key", name), path) : prim(g, PRIM_STRING);
		free(names);
		const char *body = fmt(g, "%s %s \":\" %s %s %s", key ? key : "", ws, ws, v ? v : "", ws);
		extra = name_new(g, fmt(g, "%s-kv", hint));
		rule_add(g, extra, body);
	}
	g->consume--;
	if (g->rc) {
		free(m);
		return NULL;
	}
	/*
	 * tail[i]: members i.. after at least one member was written, each with
	 * its comma; the first member is chosen among the optional ones up to
	 * and including the first required one (or an extra member).
	 */
	const char **tail = calloc(n + 2, sizeof *tail);
	if (!tail) {
		free(m);
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	tail[n] = extra ? fmt(g, "( \",\" %s %s )*", ws, extra) : "";
	for (size_t i = n; i-- > 0;) {
		const char *t = m[i].required ? fmt(g, "\",\" %s %s%s%s", ws, m[i].kv, *tail[i + 1] ? " " : "", tail[i + 1])
					      : fmt(g, "( \",\" %s %s )?%s%s", ws, m[i].kv, *tail[i + 1] ? " " : "", tail[i + 1]);
		if (t && n > MEMBERS_INLINE_MAX && i > 0)
			t = as_rule(g, fmt(g, "%s-tail-%zu", name, i), fmt(g, "( %s )", t));
		tail[i] = t;
		if (!t)
			break;
	}
	struct strbuf b = { 0 };
	strbuf_printf(&b, "\"{\" %s ", ws);
	size_t alts = 0;
	bool any_required = false;
	struct strbuf body = { 0 };
	for (size_t i = 0; i < n && !g->rc; i++) {
		strbuf_printf(&body, "%s%s%s%s", alts++ ? " | " : "", m[i].kv, *tail[i + 1] ? " " : "",
			      tail[i + 1] ? tail[i + 1] : "");
		if (m[i].required) {
			any_required = true;
			break;
		}
	}
	if (!any_required && extra) {
		strbuf_printf(&body, "%s%s %s", alts++ ? " | " : "", extra, tail[n]);
	}
	if (alts) {
		if (!any_required)
			strbuf_printf(&b, "( %s )? ", body.p);
		else if (alts > 1)
			strbuf_printf(&b, "( %s ) ", body.p);
		else
			strbuf_printf(&b, "%s ", body.p);
	}
	strbuf_free(&body);
	strbuf_put(&b, "\"}\"", 3);
	free(tail);
	free(m);
	return keep(g, &b);
}

/* Resolves a local $ref ("#", "#/a/b", ~0 ~1 and %XX decoded); NULL when absent. */
static const cJSON *ref_resolve(const cJSON *root, const char *ref)
{
	if (ref[0] != '#')
		return NULL;
	const cJSON *cur = root;
	const char *p = ref + 1;
	if (*p && *p != '/')
		return NULL;
	while (*p == '/' && cur) {
		p++;
		char seg[256];
		size_t k = 0;
		while (*p && *p != '/' && k + 1 < sizeof seg) {
			char c = *p++;
			if (c == '~' && (*p == '0' || *p == '1'))
				c = *p++ == '0' ? '~' : '/';
			else if (c == '%' && hexval(p[0]) >= 0 && hexval(p[1]) >= 0) {
				c = (char)(hexval(p[0]) << 4 | hexval(p[1]));
				p += 2;
			}
			seg[k++] = c;
		}
		if (*p && *p != '/')
			return NULL;
		seg[k] = 0;
		if (cJSON_IsArray(cur)) {
			char *endp;
			long i = strtol(seg, &endp, 10);
			cur = *seg && !*endp && i >= 0 && i < INT32_MAX ? cJSON_GetArrayItem(cur, (int)i) : NULL;
		} else if (cJSON_IsObject(cur)) {
			cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
		} else {
			cur = NULL;
		}
	}
	return cur;
}

static const char *visit_ref(struct gen *g, const char *ref, const char *path)
{
	for (size_t i = 0; i < g->n_refs; i++) {
		if (strcmp(g->refs[i].ptr, ref))
			continue;
		if (!g->refs[i].done && g->refs[i].consume == g->consume) {
			fail(g, EINVAL, "$ref \"%s\" at %s is a cycle that consumes no input", ref, at(path));
			return NULL;
		}
		return g->refs[i].name;
	}
	if (ref[0] != '#') {
		warn(g, "$ref \"%s\" at %s is outside the schema; not enforced (any value)", ref, at(path));
		return prim(g, PRIM_VALUE);
	}
	const cJSON *t = ref_resolve(g->root, ref);
	if (!t) {
		fail(g, EINVAL, "$ref \"%s\" at %s does not resolve within the schema", ref, at(path));
		return NULL;
	}
	const char *slash = strrchr(ref, '/');
	const char *name = name_new(g, slash ? slash + 1 : "root-ref");
	const char *rp = fmt(g, "%s", ref + 1);
	if (!name || !rp)
		return NULL;
	if (array_grow((void **)&g->refs, &g->cap_refs, g->n_refs + 1, sizeof *g->refs)) {
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	size_t k = g->n_refs++;
	g->refs[k] = (struct ref){ fmt(g, "%s", ref), name, false, g->consume };
	const char *e = visit(g, t, name, rp);
	if (!e)
		return NULL;
	rule_add(g, name, e);
	g->refs[k].done = true;
	return name;
}

/* Warns about each keyword of s outside the supported set. */
static void keywords_check(struct gen *g, const cJSON *s, const char *path)
{
	const cJSON *k;
	cJSON_ArrayForEach(k, s) {
		const char *key = k->string;
		if (in_list(kw_annotation, key) || in_list(kw_supported, key))
			continue;
		if (!strcmp(key, "uniqueItems") && cJSON_IsFalse(k))
			continue;
		if ((!strcmp(key, "minProperties") || !strcmp(key, "minContains")) && cJSON_IsNumber(k) &&
		    k->valuedouble == 0)
			continue;
		if (in_list(kw_unsupported, key))
			warn(g, "unsupported keyword \"%s\" at %s", key, at(path));
		else
			warn(g, "unknown keyword \"%s\" at %s", key, at(path));
	}
}

static cJSON *owned(struct gen *g, cJSON *s)
{
	if (!s) {
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	if (array_grow((void **)&g->owned, &g->cap_owned, g->n_owned + 1, sizeof *g->owned)) {
		cJSON_Delete(s);
		fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	g->owned[g->n_owned++] = s;
	return s;
}

/* Follows $ref chains of s; NULL (error set) when one does not resolve or loops. */
static const cJSON *deref(struct gen *g, const cJSON *s, const char *path)
{
	for (int i = 0; i < REF_CHAIN_MAX; i++) {
		const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
		if (!cJSON_IsString(r))
			return s;
		const cJSON *t = ref_resolve(g->root, r->valuestring);
		if (!t) {
			fail(g, EINVAL, "$ref \"%s\" at %s does not resolve within the schema", r->valuestring,
			     at(path));
			return NULL;
		}
		s = t;
	}
	fail(g, EINVAL, "$ref chain at %s is longer than %d (a cycle?)", at(path), REF_CHAIN_MAX);
	return NULL;
}

static cJSON *merge(struct gen *g, const cJSON *a, const cJSON *b, const char *path, int depth);

/* Whether the "type" value t admits instances of type name (integer is a number). */
static bool type_has(const cJSON *t, const char *name)
{
	if (cJSON_IsString(t))
		return !strcmp(t->valuestring, name) ||
		       (!strcmp(name, "integer") && !strcmp(t->valuestring, "number"));
	const cJSON *e;
	cJSON_ArrayForEach(e, t)
		if (type_has(e, name))
			return true;
	return false;
}

/* Intersection of two "type" values (an empty array when none). */
static cJSON *types_meet(const cJSON *a, const cJSON *b)
{
	cJSON *out = cJSON_CreateArray();
	const char *all[] = { "object", "array", "string", "number", "integer", "boolean", "null" };
	for (size_t i = 0; out && i < sizeof all / sizeof *all; i++)
		if (type_has(a, all[i]) && type_has(b, all[i]))
			cJSON_AddItemToArray(out, cJSON_CreateString(all[i]));
	/* number and integer both in: number alone says it. */
	int i = 0, integer = -1;
	bool num = false;
	const cJSON *t;
	cJSON_ArrayForEach(t, out) {
		num = num || !strcmp(t->valuestring, "number");
		if (!strcmp(t->valuestring, "integer"))
			integer = i;
		i++;
	}
	if (num && integer >= 0)
		cJSON_DeleteItemFromArray(out, integer);
	return out;
}

/* Merges b into the copy a (both objects); keyword by keyword. */
static void merge_into(struct gen *g, cJSON *a, const cJSON *b, const char *path, int depth)
{
	const cJSON *k;
	cJSON_ArrayForEach(k, b) {
		if (g->rc)
			return;
		const char *key = k->string;
		cJSON *old = cJSON_GetObjectItemCaseSensitive(a, key);
		if (!strcmp(key, "$defs") || !strcmp(key, "definitions"))
			continue;
		if (!old) {
			cJSON_AddItemToObject(a, key, cJSON_Duplicate(k, true));
			continue;
		}
		if (in_list(kw_annotation, key) || cJSON_Compare(old, k, true))
			continue;
		cJSON *nv = NULL;
		if (!strcmp(key, "type")) {
			nv = types_meet(old, k);
			if (nv && !cJSON_GetArraySize(nv)) {
				cJSON_Delete(nv);
				fail(g, EINVAL, "allOf at %s: the types do not intersect", at(path));
				return;
			}
		} else if (!strcmp(key, "properties") && cJSON_IsObject(old) && cJSON_IsObject(k)) {
			const cJSON *p;
			cJSON_ArrayForEach(p, k) {
				cJSON *op = cJSON_GetObjectItemCaseSensitive(old, p->string);
				if (!op) {
					cJSON_AddItemToObject(old, p->string, cJSON_Duplicate(p, true));
				} else {
					cJSON *mp = merge(g, op, p, path, depth + 1);
					if (!mp)
						return;
					cJSON_ReplaceItemInObjectCaseSensitive(old, p->string, cJSON_Duplicate(mp, true));
				}
			}
			continue;
		} else if (!strcmp(key, "required") && cJSON_IsArray(old) && cJSON_IsArray(k)) {
			const cJSON *r;
			cJSON_ArrayForEach(r, k)
				if (cJSON_IsString(r) && !required_has(old, r->valuestring))
					cJSON_AddItemToArray(old, cJSON_CreateString(r->valuestring));
			continue;
		} else if (!strcmp(key, "additionalProperties") || !strcmp(key, "items")) {
			if (cJSON_IsFalse(old) || cJSON_IsTrue(k))
				continue;
			if (cJSON_IsFalse(k) || cJSON_IsTrue(old)) {
				nv = cJSON_Duplicate(k, true);
			} else if (cJSON_IsObject(old) && cJSON_IsObject(k)) {
				cJSON *mv = merge(g, old, k, path, depth + 1);
				if (!mv)
					return;
				nv = cJSON_Duplicate(mv, true);
			}
		} else if (cJSON_IsNumber(old) && cJSON_IsNumber(k) &&
			   (!strcmp(key, "minimum") || !strcmp(key, "exclusiveMinimum") ||
			    !strcmp(key, "minLength") || !strcmp(key, "minItems"))) {
			nv = cJSON_CreateNumber(fmax(old->valuedouble, k->valuedouble));
		} else if (cJSON_IsNumber(old) && cJSON_IsNumber(k) &&
			   (!strcmp(key, "maximum") || !strcmp(key, "exclusiveMaximum") ||
			    !strcmp(key, "maxLength") || !strcmp(key, "maxItems"))) {
			nv = cJSON_CreateNumber(fmin(old->valuedouble, k->valuedouble));
		} else if (!strcmp(key, "enum") && cJSON_IsArray(old) && cJSON_IsArray(k)) {
			nv = cJSON_CreateArray();
			const cJSON *v, *w;
			cJSON_ArrayForEach(v, old) {
				bool both = false;
				cJSON_ArrayForEach(w, k)
					both = both || cJSON_Compare(v, w, true);
				if (both)
					cJSON_AddItemToArray(nv, cJSON_Duplicate(v, true));
			}
			if (nv && !cJSON_GetArraySize(nv)) {
				cJSON_Delete(nv);
				fail(g, EINVAL, "allOf at %s: the enums have no value in common", at(path));
				return;
			}
		} else if (!strcmp(key, "const")) {
			fail(g, EINVAL, "allOf at %s: the consts differ", at(path));
			return;
		}
		if (nv) {
			cJSON_ReplaceItemInObjectCaseSensitive(a, key, nv);
		} else {
			warn(g, "allOf at %s: \"%s\" differs between the parts; the first is kept", at(path), key);
		}
	}
}

/* The merge of schemas a and b (objects or booleans, $refs followed, allOf flattened). */
static cJSON *merge(struct gen *g, const cJSON *a, const cJSON *b, const char *path, int depth)
{
	if (depth > g->opt.depth_max) {
		fail(g, EINVAL, "allOf at %s nests deeper than %d", at(path), g->opt.depth_max);
		return NULL;
	}
	if (++g->merges > MERGES_MAX) {
		fail(g, E2BIG, "allOf at %s needs more than %d merges", at(path), MERGES_MAX);
		return NULL;
	}
	a = deref(g, a, path);
	b = b ? deref(g, b, path) : NULL;
	if (!a || (b == NULL && g->rc))
		return NULL;
	if (cJSON_IsFalse(a) || cJSON_IsFalse(b)) {
		fail(g, EINVAL, "allOf at %s includes the schema false", at(path));
		return NULL;
	}
	if ((!cJSON_IsObject(a) && !cJSON_IsTrue(a)) || (b && !cJSON_IsObject(b) && !cJSON_IsTrue(b))) {
		fail(g, EINVAL, "allOf at %s has a part that is not a schema", at(path));
		return NULL;
	}
	cJSON *out = owned(g, cJSON_CreateObject());
	if (!out)
		return NULL;
	/* Parts with additionalProperties false admit only their own property names. */
	const cJSON **closed = NULL;
	size_t n_closed = 0, cap_closed = 0;
	const cJSON *parts[2] = { a, b };
	for (int i = 0; i < 2 && !g->rc; i++) {
		if (!parts[i] || cJSON_IsTrue(parts[i]))
			continue;
		const cJSON *all = cJSON_GetObjectItemCaseSensitive(parts[i], "allOf");
		cJSON *own = owned(g, cJSON_Duplicate(parts[i], true));
		if (!own)
			break;
		cJSON_DeleteItemFromObjectCaseSensitive(own, "allOf");
		cJSON_DeleteItemFromObjectCaseSensitive(own, "$ref");
		merge_into(g, out, own, path, depth);
		if (all && !cJSON_IsArray(all)) {
			fail(g, EINVAL, "\"allOf\" at %s is not an array", at(path));
			break;
		}
		size_t subs = (size_t)cJSON_GetArraySize(all);
		if (array_grow((void **)&closed, &cap_closed, n_closed + subs + 1, sizeof *closed)) {
			fail(g, ENOMEM, "out of memory");
			break;
		}
		closed[n_closed++] = own;
		const cJSON *sub;
		cJSON_ArrayForEach(sub, all) {
			cJSON *m = merge(g, sub, NULL, path, depth + 1);
			if (!m)
				break;
			merge_into(g, out, m, path, depth);
			closed[n_closed++] = m;
		}
	}
	cJSON *props = cJSON_GetObjectItemCaseSensitive(out, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(out, "required");
	if (!cJSON_IsObject(props))
		props = NULL;
	if (!cJSON_IsArray(req))
		req = NULL;
	for (size_t i = 0; i < n_closed && !g->rc; i++) {
		if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(closed[i], "additionalProperties")))
			continue;
		const cJSON *own = cJSON_GetObjectItemCaseSensitive(closed[i], "properties");
		for (cJSON *p = props ? props->child : NULL, *next; p; p = next) {
			next = p->next;
			if (own && cJSON_GetObjectItemCaseSensitive(own, p->string))
				continue;
			if (required_has(req, p->string)) {
				fail(g, EINVAL, "allOf at %s: property \"%s\" is required but a part forbids it",
				     at(path), p->string);
				break;
			}
			cJSON_DeleteItemFromObjectCaseSensitive(props, p->string);
		}
		const cJSON *r;
		cJSON_ArrayForEach(r, req) {
			if (!g->rc && cJSON_IsString(r) && !(own && cJSON_GetObjectItemCaseSensitive(own, r->valuestring)))
				fail(g, EINVAL, "allOf at %s: property \"%s\" is required but a part forbids it",
				     at(path), r->valuestring);
		}
	}
	free(closed);
	return g->rc ? NULL : out;
}

/* Keywords that constrain the instance (not annotations, not anyOf/oneOf themselves). */
static bool has_assertions(const cJSON *s)
{
	const cJSON *k;
	cJSON_ArrayForEach(k, s)
		if (!in_list(kw_annotation, k->string) && strcmp(k->string, "anyOf") && strcmp(k->string, "oneOf"))
			return true;
	return false;
}

static const char *visit_typed(struct gen *g, const cJSON *s, const char *type, const char *name,
			       const char *path)
{
	if (!strcmp(type, "object"))
		return visit_object(g, s, name, path);
	if (!strcmp(type, "array"))
		return visit_array(g, s, name, path);
	if (!strcmp(type, "string"))
		return visit_string(g, s, path);
	if (!strcmp(type, "number"))
		return visit_number(g, s, false, path);
	if (!strcmp(type, "integer"))
		return visit_number(g, s, true, path);
	if (!strcmp(type, "boolean"))
		return prim(g, PRIM_BOOLEAN);
	if (!strcmp(type, "null"))
		return prim(g, PRIM_NULL);
	fail(g, EINVAL, "unknown type \"%s\" at %s", type, at(path));
	return NULL;
}

/* The type a schema without "type" constrains, from its keywords; NULL: any value. */
static const char *type_infer(const cJSON *s)
{
	static const struct {
		const char *key, *type;
	} hints[] = {
		{ "properties", "object" }, { "required", "object" }, { "additionalProperties", "object" },
		{ "items", "array" }, { "prefixItems", "array" }, { "minItems", "array" },
		{ "maxItems", "array" }, { "pattern", "string" }, { "minLength", "string" },
		{ "maxLength", "string" }, { "format", "string" }, { "minimum", "number" },
		{ "maximum", "number" }, { "exclusiveMinimum", "number" }, { "exclusiveMaximum", "number" },
	};
	for (size_t i = 0; i < sizeof hints / sizeof *hints; i++)
		if (cJSON_GetObjectItemCaseSensitive(s, hints[i].key))
			return hints[i].type;
	return NULL;
}

/* The n alternatives joined in b (" | " between them) as one element:
 * itself when n is 1, else in parentheses; b is consumed. */
static const char *alternatives(struct gen *g, struct strbuf *b, int n)
{
	if (n == 1)
		return keep(g, b);
	struct strbuf p = { 0 };
	strbuf_printf(&p, "( %s )", b->p);
	strbuf_free(b);
	return keep(g, &p);
}

static const char *visit_inner(struct gen *g, const cJSON *s, const char *name, const char *path)
{
	if (cJSON_IsTrue(s))
		return prim(g, PRIM_VALUE);
	if (cJSON_IsFalse(s)) {
		fail(g, EINVAL, "the schema at %s is false: no value satisfies it", at(path));
		return NULL;
	}
	if (!cJSON_IsObject(s)) {
		fail(g, EINVAL, "the schema at %s is not an object or a boolean", at(path));
		return NULL;
	}
	const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
	if (ref) {
		if (!cJSON_IsString(ref)) {
			fail(g, EINVAL, "\"$ref\" at %s is not a string", at(path));
			return NULL;
		}
		const cJSON *k;
		cJSON_ArrayForEach(k, s)
			if (strcmp(k->string, "$ref") && !in_list(kw_annotation, k->string))
				warn(g, "keyword \"%s\" beside $ref at %s is not enforced", k->string, at(path));
		return visit_ref(g, ref->valuestring, path);
	}
	keywords_check(g, s, path);
	const cJSON *nullable = cJSON_GetObjectItemCaseSensitive(s, "nullable");
	if (cJSON_IsTrue(nullable)) {
		cJSON *c = owned(g, cJSON_Duplicate(s, true));
		if (!c)
			return NULL;
		cJSON_DeleteItemFromObjectCaseSensitive(c, "nullable");
		const char *e = visit_inner(g, c, name, path);
		return e ? fmt(g, "( %s | %s )", e, prim(g, PRIM_NULL)) : NULL;
	}
	const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
	if (all) {
		/* {"allOf": [X]} beside annotations only (pydantic's way to describe a $ref) is X itself,
		 * so a $ref in it stays a memoised, possibly recursive rule. */
		bool alone = cJSON_GetArraySize(all) == 1;
		const cJSON *k;
		cJSON_ArrayForEach(k, s)
			alone = alone && (!strcmp(k->string, "allOf") || in_list(kw_annotation, k->string));
		if (alone && cJSON_IsArray(all))
			return visit(g, all->child, name, path_index(g, path, "allOf", 0));
		cJSON *m = merge(g, s, NULL, path, 0);
		return m ? visit_inner(g, m, name, path) : NULL;
	}
	const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
	const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
	if (any || one) {
		const cJSON *branches = any ? any : one;
		const char *key = any ? "anyOf" : "oneOf";
		if (any && one)
			warn(g, "\"oneOf\" beside \"anyOf\" at %s is not enforced", at(path));
		if (!cJSON_IsArray(branches) || !branches->child) {
			fail(g, EINVAL, "\"%s\" at %s is not a non-empty array", key, at(path));
			return NULL;
		}
		/* Sibling keywords apply to every branch: merge them in. */
		cJSON *sib = NULL;
		if (has_assertions(s)) {
			sib = owned(g, cJSON_Duplicate(s, true));
			if (!sib)
				return NULL;
			cJSON_DeleteItemFromObjectCaseSensitive(sib, "anyOf");
			cJSON_DeleteItemFromObjectCaseSensitive(sib, "oneOf");
		}
		struct strbuf b = { 0 };
		int i = 0;
		const cJSON *br;
		cJSON_ArrayForEach(br, branches) {
			const char *bp = path_index(g, path, key, i);
			const cJSON *bs = sib ? merge(g, sib, br, bp, 0) : br;
			const char *e = bs ? visit(g, bs, name, bp) : NULL;
			if (!e) {
				strbuf_free(&b);
				return NULL;
			}
			strbuf_printf(&b, "%s%s", i++ ? " | " : "", e);
		}
		return alternatives(g, &b, i);
	}
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(s, "const");
	if (c)
		return visit_enum(g, c, true, type, path);
	const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
	if (en)
		return visit_enum(g, en, false, type, path);
	if (!type) {
		const char *t = type_infer(s);
		return t ? visit_typed(g, s, t, name, path) : prim(g, PRIM_VALUE);
	}
	if (cJSON_IsString(type))
		return visit_typed(g, s, type->valuestring, name, path);
	if (!cJSON_IsArray(type) || !type->child) {
		fail(g, EINVAL, "\"type\" at %s is not a string or a non-empty array", at(path));
		return NULL;
	}
	struct strbuf b = { 0 };
	int i = 0;
	const cJSON *t;
	cJSON_ArrayForEach(t, type) {
		if (!cJSON_IsString(t)) {
			strbuf_free(&b);
			fail(g, EINVAL, "\"type\" at %s holds a non-string", at(path));
			return NULL;
		}
		const char *e = visit_typed(g, s, t->valuestring, name, path);
		if (!e) {
			strbuf_free(&b);
			return NULL;
		}
		strbuf_printf(&b, "%s%s", i++ ? " | " : "", e);
	}
	return alternatives(g, &b, i);
}

static const char *visit(struct gen *g, const cJSON *s, const char *name, const char *path)
{
	if (g->rc || !name || !path)
		return NULL;
	if (g->depth >= g->opt.depth_max) {
		fail(g, EINVAL, "the schema nests deeper than %d at %s", g->opt.depth_max, at(path));
		return NULL;
	}
	if (++g->visits > VISITS_MAX) {
		fail(g, E2BIG, "the schema expands to more than %d subschemas", VISITS_MAX);
		return NULL;
	}
	g->depth++;
	const char *e = visit_inner(g, s, name, path);
	g->depth--;
	return g->rc ? NULL : e;
}

static void gen_free(struct gen *g)
{
	for (size_t i = 0; i < g->n_strs; i++)
		free(g->strs[i]);
	free(g->strs);
	for (size_t i = 0; i < g->n_owned; i++)
		cJSON_Delete(g->owned[i]);
	free(g->owned);
	free(g->rules);
	free(g->names);
	free(g->refs);
}

int json_schema_to_gbnf(const cJSON *schema, const struct json_schema_options *opt, char **gbnf_out,
			struct json_schema_warnings *warnings, char *err, size_t err_len)
{
	*gbnf_out = NULL;
	if (err && err_len)
		err[0] = 0;
	struct gen g = { .root = schema, .w = warnings, .err = err, .err_len = err_len };
	if (opt)
		g.opt = *opt;
	if (!g.opt.ws_max)
		g.opt.ws_max = WS_MAX_DEFAULT;
	if (g.opt.depth_max <= 0)
		g.opt.depth_max = DEPTH_MAX_DEFAULT;
	if (g.opt.ws_max > JSON_SCHEMA_REPEAT_MAX)
		g.opt.ws_max = JSON_SCHEMA_REPEAT_MAX;
	if (!schema) {
		fail(&g, EINVAL, "no schema");
		return g.rc;
	}
	for (int p = 0; p < PRIM_COUNT; p++) {
		if (name_put(&g, prim_name[p])) {
			gen_free(&g);
			return -ENOMEM;
		}
	}
	const char *root = name_new(&g, "root");
	const char *e = visit(&g, schema, root, "");
	/* Rules in the order made, the root first, then the shared rules in use. */
	struct strbuf out = { 0 };
	if (e) {
		strbuf_printf(&out, "root ::= %s\n", e);
		for (size_t i = 0; i < g.n_rules; i++)
			strbuf_printf(&out, "%s ::= %s\n", g.rules[i].name, g.rules[i].body);
		unsigned used = g.prims, prev = 0;
		while (used != prev) {
			prev = used;
			for (int p = 0; p < PRIM_COUNT; p++)
				if (used & 1u << p)
					used |= prim_deps[p];
		}
		for (int p = 0; p < PRIM_COUNT; p++) {
			if (!(used & 1u << p))
				continue;
			if (p == PRIM_WS) {
				if (g.opt.ws_max < 0)
					strbuf_put(&out, "ws ::= \"\"\n", 10);
				else
					strbuf_printf(&out, "ws ::= \"\\n\"? [ \\t]{0,%d}\n",
						      g.opt.ws_max);
			} else {
				strbuf_printf(&out, "%s ::= %s\n", prim_name[p], prim_body[p]);
			}
		}
		if (out.rc)
			fail(&g, ENOMEM, "out of memory");
		else if (out.len > JSON_SCHEMA_GBNF_BYTES_MAX)
			fail(&g, E2BIG, "the grammar would exceed %u bytes", JSON_SCHEMA_GBNF_BYTES_MAX);
	}
	if (g.warn_dropped && warnings) {
		char *m = NULL;
		char **v = realloc(warnings->msg, (warnings->count + 1) * sizeof *v);
		if (v) {
			warnings->msg = v;
			if (asprintf(&m, "... and %zu more warnings", g.warn_dropped) >= 0)
				warnings->msg[warnings->count++] = m;
		}
	}
	int rc = g.rc;
	gen_free(&g);
	if (rc) {
		strbuf_free(&out);
		return rc;
	}
	*gbnf_out = out.p;
	return 0;
}

int json_schema_object_gbnf(const struct json_schema_options *opt, char **gbnf_out)
{
	cJSON *s = cJSON_Parse("{\"type\":\"object\"}");
	if (!s)
		return -ENOMEM;
	int rc = json_schema_to_gbnf(s, opt, gbnf_out, NULL, NULL, 0);
	cJSON_Delete(s);
	return rc;
}

void json_schema_warnings_free(struct json_schema_warnings *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->count; i++)
		free(w->msg[i]);
	free(w->msg);
	w->msg = NULL;
	w->count = 0;
}
