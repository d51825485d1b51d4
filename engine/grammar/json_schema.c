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
 * schema (json_schema_merge.c) before the walk goes on; anyOf / oneOf siblings are merged into each
 * branch. Strings, expressions and merged schemas live until the end of the
 * conversion in lists the generator frees at once.
 *
 * Extra members' keys come from a trie of the listed names, so that a listed
 * name cannot be written a second time as an "extra" with any value.
 *
 * Limits: nesting depth (depth_max), grammar size (JSON_SCHEMA_GBNF_BYTES_MAX),
 * named rules (JSON_SCHEMA_RULES_MAX, checked as they are made),
 * repetition bounds (JSON_SCHEMA_REPEAT_MAX), MERGES_MAX allOf merges (json_schema_merge.c) and
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
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema_internal.h"

#define WS_MAX_DEFAULT 20
#define DEPTH_MAX_DEFAULT 64
#define MEMBERS_INLINE_MAX 8		/* beyond this, object tails become rules */
#define VISITS_MAX 200000	/* subschemas visited per conversion */


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


void js_fail(struct gen *g, int code, const char *fmt, ...)
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
const char *js_keep(struct gen *g, struct strbuf *b)
{
	if (b->rc || !b->p) {
		if (b->rc)
			js_fail(g, ENOMEM, "out of memory");
		strbuf_free(b);
		if (g->rc)
			return NULL;
		b->p = malloc(1);
		if (!b->p) {
			js_fail(g, ENOMEM, "out of memory");
			return NULL;
		}
		b->p[0] = 0;
	}
	if (array_grow((void **)&g->strs, &g->cap_strs, g->n_strs + 1, sizeof *g->strs)) {
		strbuf_free(b);
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	g->str_bytes += b->len;
	if (g->str_bytes > 4 * (size_t)JSON_SCHEMA_GBNF_BYTES_MAX) {
		strbuf_free(b);
		js_fail(g, E2BIG, "the grammar would exceed %u bytes", JSON_SCHEMA_GBNF_BYTES_MAX);
		return NULL;
	}
	g->strs[g->n_strs++] = b->p;
	return b->p;
}

const char *js_fmt(struct gen *g, const char *f, ...)
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
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	b.p = s;
	b.len = (size_t)n;
	b.cap = (size_t)n + 1;
	return js_keep(g, &b);
}

void js_warn(struct gen *g, const char *f, ...)
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
	return js_keep(g, &b);
}

static const char *path_index(struct gen *g, const char *path, const char *key, int i)
{
	return js_fmt(g, "%s/%s/%d", path, key, i);
}

/* How a path reads in a message: the pointer, or "/" for the root. */
const char *js_at(const char *path)
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

bool js_is_annotation(const char *key)
{
	return in_list(kw_annotation, key);
}

const char *js_prim(struct gen *g, enum prim p)
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
	const char *base = js_keep(g, &b);
	if (!base)
		return NULL;
	const char *n = base;
	if (name_taken(g, base)) {
		int i = name_slot(g, base)->next;
		do {
			n = js_fmt(g, "%s-%d", base, i++);
			if (!n)
				return NULL;
		} while (name_taken(g, n));
		name_slot(g, base)->next = i;
	}
	if (name_put(g, n)) {
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	return n;
}

static void rule_add(struct gen *g, const char *name, const char *body)
{
	if (g->rc)
		return;
	/* Checked as rules are made, so a schema of 20,000 properties is
	 * refused after a few thousand of them, in milliseconds. */
	if (g->n_rules >= JSON_SCHEMA_RULES_MAX) {
		js_fail(g, E2BIG, "the schema needs more than %d grammar rules (about %d object properties)",
			JSON_SCHEMA_RULES_MAX, JSON_SCHEMA_RULES_MAX / 2);
		return;
	}
	if (array_grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) {
		js_fail(g, ENOMEM, "out of memory");
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
void js_put_literal(struct strbuf *b, const char *s, size_t n)
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
	js_put_literal(b, j, strlen(j));
	cJSON_free(j);
}

static const char *visit(struct gen *g, const cJSON *s, const char *name, const char *path);

/* GBNF of exactly the JSON value v (members and items with whitespace between). */
static void put_value(struct gen *g, struct strbuf *b, const cJSON *v, int depth)
{
	if (depth > g->opt.depth_max) {
		js_fail(g, EINVAL, "an enum or const value nests deeper than %d", g->opt.depth_max);
		return;
	}
	if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
		bool obj = cJSON_IsObject(v);
		const char *ws = js_prim(g, PRIM_WS);
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
	js_put_literal(b, j, strlen(j));
	cJSON_free(j);
}


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
		js_fail(g, EINVAL, "\"enum\" at %s is not a non-empty array", js_at(path));
		return NULL;
	}
	struct strbuf b = { 0 };
	size_t n = 0;
	for (const cJSON *v = is_const ? values : values->child; v; v = is_const ? NULL : v->next) {
		if (type && !js_type_has(type, value_type(v)))
			continue;
		if (n++)
			strbuf_put(&b, " | ", 3);
		put_value(g, &b, v, 0);
	}
	if (!n) {
		js_fail(g, EINVAL, "no %s value at %s is of the schema's type", is_const ? "const" : "enum",
		     js_at(path));
		strbuf_free(&b);
		return NULL;
	}
	if (n > 1) {
		struct strbuf p = { 0 };
		strbuf_printf(&p, "( %s )", b.p);
		strbuf_free(&b);
		return js_keep(g, &p);
	}
	return js_keep(g, &b);
}

/* Reads a non-negative integer keyword; -1 when absent or too large (then warned). */
static long count_get(struct gen *g, const cJSON *s, const char *key, const char *path)
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
static const char *repeat(struct gen *g, long m, long n)
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
	strbuf_printf(&b, "root ::= %s\n%s ::= %s\n", e, prim_name[PRIM_CHAR], prim_body[PRIM_CHAR]);
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

static const char *visit_string(struct gen *g, const cJSON *s, const char *path)
{
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
	const cJSON *form = cJSON_GetObjectItemCaseSensitive(s, "format");
	long mn = count_get(g, s, "minLength", path), mx = count_get(g, s, "maxLength", path);
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
	return js_fmt(g, "\"\\\"\" %s%s \"\\\"\"", js_prim(g, PRIM_CHAR), repeat(g, mn, mx));
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
		js_fail(g, EINVAL, "\"prefixItems\" at %s is not an array", js_at(path));
		return NULL;
	}
	long mn = count_get(g, s, "minItems", path), mx = count_get(g, s, "maxItems", path);
	if (g->rc)
		return NULL;
	if (mn < 0)
		mn = 0;
	if (mx >= 0 && mn > mx) {
		js_fail(g, EINVAL, "minItems > maxItems at %s", js_at(path));
		return NULL;
	}
	int k = prefix ? cJSON_GetArraySize(prefix) : 0;
	bool rest_none = cJSON_IsFalse(rest);
	if (rest_none && mn > k) {
		js_fail(g, EINVAL, "minItems at %s needs more items than the tuple allows", js_at(path));
		return NULL;
	}
	if (rest_none || (mx >= 0 && mx <= k)) {
		if (mx < 0 || mx > k)
			mx = k;
	}
	const char *ws = js_prim(g, PRIM_WS);
	g->consume++;
	/* Item expressions: the prefix, then the rest. */
	const char **pe = k ? calloc((size_t)k, sizeof *pe) : NULL;
	if (k && !pe) {
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	int i = 0;
	for (const cJSON *it = prefix ? prefix->child : NULL; it && i < k; it = it->next, i++) {
		const char *p = path_index(g, path, prefix_key, i);
		const char *hint = js_fmt(g, "%s-%d", name, i);
		if (!p || !hint)
			break;
		pe[i] = as_rule(g, hint, visit(g, it, hint, p));
	}
	const char *re = NULL;
	bool more = !rest_none && (mx < 0 || mx > k);
	if (more && !g->rc) {
		const char *hint = js_fmt(g, "%s-item", name);
		const char *p = path_child(g, path, prefix == items && items ? "additionalItems" : "items");
		re = rest ? as_rule(g, hint, visit(g, rest, hint, p)) : js_prim(g, PRIM_VALUE);
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
	return js_keep(g, &b);
}

struct member {
	const char *kv;		/* rule: key ws ":" ws value ws */
	bool required;
};

bool js_required_has(const cJSON *req, const char *key)
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
	js_cset_add(&other, 0, 0x1f);
	js_cset_add(&other, '"', '"');
	js_cset_add(&other, '\\', '\\');
	for (int c = t->v[i].child; c >= 0; c = t->v[c].sibling) {
		js_cset_add(&other, t->v[c].cp, t->v[c].cp);
		const char *e = trie_gbnf(g, t, c, name, depth + 1);
		if (!e)
			break;
		struct strbuf one = { 0 };
		js_put_utf8(&one, t->v[c].cp);
		if (alts++)
			strbuf_put(&b, " | ", 3);
		js_put_literal(&b, one.p, one.len);
		strbuf_printf(&b, " %s", e);
		strbuf_free(&one);
	}
	js_cset_negate(&other);
	strbuf_printf(&b, "%s( ", alts++ ? " | " : "");
	if (other.n) {
		strbuf_put(&b, "[", 1);
		for (size_t k = 0; k < other.n; k++) {
			js_put_class_char(&b, other.r[k][0]);
			if (other.r[k][1] > other.r[k][0]) {
				strbuf_put(&b, "-", 1);
				js_put_class_char(&b, other.r[k][1]);
			}
		}
		strbuf_put(&b, "] | ", 4);
	}
	strbuf_printf(&b, KEY_CHAR_ESCAPE " ) %s* \"\\\"\"", js_prim(g, PRIM_CHAR));
	free(other.r);
	if (other.rc)
		b.rc = -ENOMEM;
	struct strbuf p = { 0 };
	strbuf_printf(&p, "( %s )", b.p ? b.p : "");
	strbuf_free(&b);
	const char *e = js_keep(g, &p);
	if (e && depth % 16 == 15)
		e = as_rule(g, js_fmt(g, "%s-%d", name, depth), e);
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
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	t.v[0] = (struct trie_node){ 0, -1, -1, false };
	t.n = 1;
	uint32_t cp[256];
	for (size_t i = 0; i < n; i++) {
		struct rx x = { g, names[i], names[i] + strlen(names[i]), NULL, 0 };
		size_t k = 0;
		while (x.p < x.end && k < sizeof cp / sizeof *cp && js_rx_utf8(&x, &cp[k]) && cp[k] >= 0x20 &&
		       cp[k] != '"' && cp[k] != '\\')
			k++;
		if (x.p < x.end) {
			js_warn(g, "extra members at %s may repeat the listed name \"%s\"", js_at(path), names[i]);
			free(t.v);
			return js_prim(g, PRIM_STRING);
		}
		if (trie_insert(&t, cp, k)) {
			js_fail(g, ENOMEM, "out of memory");
			free(t.v);
			return NULL;
		}
	}
	const char *body = trie_gbnf(g, &t, 0, name, 0);
	if (body)
		e = as_rule(g, name, js_fmt(g, "\"\\\"\" %s", body));
	free(t.v);
	return e;
}

static const char *visit_object(struct gen *g, const cJSON *s, const char *name, const char *path)
{
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
	const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
	if (props && !cJSON_IsObject(props)) {
		js_fail(g, EINVAL, "\"properties\" at %s is not an object", js_at(path));
		return NULL;
	}
	if (req) {
		const cJSON *r;
		bool ok = cJSON_IsArray(req);
		cJSON_ArrayForEach(r, req)
			ok = ok && cJSON_IsString(r);
		if (!ok) {
			js_fail(g, EINVAL, "\"required\" at %s is not an array of strings", js_at(path));
			return NULL;
		}
	}
	if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl)) {
		js_fail(g, EINVAL, "\"additionalProperties\" at %s is not a schema", js_at(path));
		return NULL;
	}
	bool extras = addl ? !cJSON_IsFalse(addl) : !g->opt.strict;
	const char *ws = js_prim(g, PRIM_WS);
	size_t n_props = (size_t)cJSON_GetArraySize(props) + (size_t)cJSON_GetArraySize(req);
	/* Each member is a rule of its own: refuse before the loops below,
	 * which look each name up in "required" (O(n^2) over a huge object). */
	if (n_props > JSON_SCHEMA_RULES_MAX) {
		js_fail(g, E2BIG, "the object at %s lists %zu properties and required names, more than the %d "
			"grammar rules a schema may need", js_at(path), n_props, JSON_SCHEMA_RULES_MAX);
		return NULL;
	}
	struct member *m = calloc(n_props + 1, sizeof *m);
	if (!m) {
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	size_t n = 0;
	g->consume++;
	const cJSON *p;
	cJSON_ArrayForEach(p, props) {
		if (g->rc)
			break;
		bool required = js_required_has(req, p->string);
		if (cJSON_IsFalse(p)) {
			if (required)
				js_fail(g, EINVAL, "property \"%s\" at %s is required but its schema is false",
				     p->string, js_at(path));
			continue;
		}
		const char *hint = js_fmt(g, "%s-%s", name, p->string);
		const char *pp = path_child(g, path_child(g, path, "properties"), p->string);
		if (!hint || !pp)
			break;
		const char *v = as_rule(g, hint, visit(g, p, hint, pp));
		struct strbuf kv = { 0 };
		put_json_string(&kv, p->string);
		strbuf_printf(&kv, " %s \":\" %s %s %s", ws, ws, v ? v : "", ws);
		const char *body = js_keep(g, &kv);
		const char *kvn = name_new(g, js_fmt(g, "%s-kv", hint));
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
			js_fail(g, EINVAL, "required property \"%s\" at %s is not in \"properties\" and "
			     "additionalProperties is false", r->valuestring, js_at(path));
			break;
		}
		const char *hint = js_fmt(g, "%s-%s", name, r->valuestring);
		const char *v = addl && cJSON_IsObject(addl) ?
			as_rule(g, hint, visit(g, addl, hint, path_child(g, path, "additionalProperties"))) :
			js_prim(g, PRIM_VALUE);
		struct strbuf kv = { 0 };
		put_json_string(&kv, r->valuestring);
		strbuf_printf(&kv, " %s \":\" %s %s %s", ws, ws, v ? v : "", ws);
		const char *body = js_keep(g, &kv);
		const char *kvn = name_new(g, js_fmt(g, "%s-kv", hint));
		rule_add(g, kvn, body);
		m[n++] = (struct member){ kvn, true };
	}
	const char *extra = NULL;
	if (extras && !g->rc) {
		const char *hint = js_fmt(g, "%s-extra", name);
		const char *v = addl && cJSON_IsObject(addl) ?
			as_rule(g, hint, visit(g, addl, hint, path_child(g, path, "additionalProperties"))) :
			js_prim(g, PRIM_VALUE);
		const char **names = calloc(n + 1, sizeof *names);
		if (!names) {
			js_fail(g, ENOMEM, "out of memory");
			free(m);
			return NULL;
		}
		size_t k = 0;
		cJSON_ArrayForEach(p, props)
			names[k++] = p->string;
		cJSON_ArrayForEach(r, req)
			if (!props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
				names[k++] = r->valuestring;
		const char *key = k ? key_other(g, names, k, js_fmt(g, "%s-extra-key", name), path) : js_prim(g, PRIM_STRING);
		free(names);
		const char *body = js_fmt(g, "%s %s \":\" %s %s %s", key ? key : "", ws, ws, v ? v : "", ws);
		extra = name_new(g, js_fmt(g, "%s-kv", hint));
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
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	tail[n] = extra ? js_fmt(g, "( \",\" %s %s )*", ws, extra) : "";
	for (size_t i = n; i-- > 0;) {
		const char *t = m[i].required ? js_fmt(g, "\",\" %s %s%s%s", ws, m[i].kv, *tail[i + 1] ? " " : "", tail[i + 1])
					      : js_fmt(g, "( \",\" %s %s )?%s%s", ws, m[i].kv, *tail[i + 1] ? " " : "", tail[i + 1]);
		if (t && n > MEMBERS_INLINE_MAX && i > 0)
			t = as_rule(g, js_fmt(g, "%s-tail-%zu", name, i), js_fmt(g, "( %s )", t));
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
	return js_keep(g, &b);
}

static const char *visit_ref(struct gen *g, const char *ref, const char *path)
{
	for (size_t i = 0; i < g->n_refs; i++) {
		if (strcmp(g->refs[i].ptr, ref))
			continue;
		if (!g->refs[i].done && g->refs[i].consume == g->consume) {
			js_fail(g, EINVAL, "$ref \"%s\" at %s is a cycle that consumes no input", ref, js_at(path));
			return NULL;
		}
		return g->refs[i].name;
	}
	if (ref[0] != '#') {
		js_warn(g, "$ref \"%s\" at %s is outside the schema; not enforced (any value)", ref, js_at(path));
		return js_prim(g, PRIM_VALUE);
	}
	const cJSON *t = js_ref_resolve(g->root, ref);
	if (!t) {
		js_fail(g, EINVAL, "$ref \"%s\" at %s does not resolve within the schema", ref, js_at(path));
		return NULL;
	}
	const char *slash = strrchr(ref, '/');
	const char *name = name_new(g, slash ? slash + 1 : "root-ref");
	const char *rp = js_fmt(g, "%s", ref + 1);
	if (!name || !rp)
		return NULL;
	if (array_grow((void **)&g->refs, &g->cap_refs, g->n_refs + 1, sizeof *g->refs)) {
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	size_t k = g->n_refs++;
	g->refs[k] = (struct ref){ js_fmt(g, "%s", ref), name, false, g->consume };
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
			js_warn(g, "unsupported keyword \"%s\" at %s", key, js_at(path));
		else
			js_warn(g, "unknown keyword \"%s\" at %s", key, js_at(path));
	}
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
		return js_visit_number(g, s, false, path);
	if (!strcmp(type, "integer"))
		return js_visit_number(g, s, true, path);
	if (!strcmp(type, "boolean"))
		return js_prim(g, PRIM_BOOLEAN);
	if (!strcmp(type, "null"))
		return js_prim(g, PRIM_NULL);
	js_fail(g, EINVAL, "unknown type \"%s\" at %s", type, js_at(path));
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
const char *js_alternatives(struct gen *g, struct strbuf *b, int n)
{
	if (n == 1)
		return js_keep(g, b);
	struct strbuf p = { 0 };
	strbuf_printf(&p, "( %s )", b->p);
	strbuf_free(b);
	return js_keep(g, &p);
}

static const char *visit_inner(struct gen *g, const cJSON *s, const char *name, const char *path)
{
	if (cJSON_IsTrue(s))
		return js_prim(g, PRIM_VALUE);
	if (cJSON_IsFalse(s)) {
		js_fail(g, EINVAL, "the schema at %s is false: no value satisfies it", js_at(path));
		return NULL;
	}
	if (!cJSON_IsObject(s)) {
		js_fail(g, EINVAL, "the schema at %s is not an object or a boolean", js_at(path));
		return NULL;
	}
	const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
	if (ref) {
		if (!cJSON_IsString(ref)) {
			js_fail(g, EINVAL, "\"$ref\" at %s is not a string", js_at(path));
			return NULL;
		}
		const cJSON *k;
		cJSON_ArrayForEach(k, s)
			if (strcmp(k->string, "$ref") && !in_list(kw_annotation, k->string))
				js_warn(g, "keyword \"%s\" beside $ref at %s is not enforced", k->string, js_at(path));
		return visit_ref(g, ref->valuestring, path);
	}
	keywords_check(g, s, path);
	const cJSON *nullable = cJSON_GetObjectItemCaseSensitive(s, "nullable");
	if (cJSON_IsTrue(nullable)) {
		cJSON *c = js_owned(g, cJSON_Duplicate(s, true));
		if (!c)
			return NULL;
		cJSON_DeleteItemFromObjectCaseSensitive(c, "nullable");
		const char *e = visit_inner(g, c, name, path);
		return e ? js_fmt(g, "( %s | %s )", e, js_prim(g, PRIM_NULL)) : NULL;
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
		cJSON *m = js_merge(g, s, NULL, path, 0);
		return m ? visit_inner(g, m, name, path) : NULL;
	}
	const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
	const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
	if (any || one) {
		const cJSON *branches = any ? any : one;
		const char *key = any ? "anyOf" : "oneOf";
		if (any && one)
			js_warn(g, "\"oneOf\" beside \"anyOf\" at %s is not enforced", js_at(path));
		if (!cJSON_IsArray(branches) || !branches->child) {
			js_fail(g, EINVAL, "\"%s\" at %s is not a non-empty array", key, js_at(path));
			return NULL;
		}
		/* Sibling keywords apply to every branch: merge them in. */
		cJSON *sib = NULL;
		if (has_assertions(s)) {
			sib = js_owned(g, cJSON_Duplicate(s, true));
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
			const cJSON *bs = sib ? js_merge(g, sib, br, bp, 0) : br;
			const char *e = bs ? visit(g, bs, name, bp) : NULL;
			if (!e) {
				strbuf_free(&b);
				return NULL;
			}
			strbuf_printf(&b, "%s%s", i++ ? " | " : "", e);
		}
		return js_alternatives(g, &b, i);
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
		return t ? visit_typed(g, s, t, name, path) : js_prim(g, PRIM_VALUE);
	}
	if (cJSON_IsString(type))
		return visit_typed(g, s, type->valuestring, name, path);
	if (!cJSON_IsArray(type) || !type->child) {
		js_fail(g, EINVAL, "\"type\" at %s is not a string or a non-empty array", js_at(path));
		return NULL;
	}
	struct strbuf b = { 0 };
	int i = 0;
	const cJSON *t;
	cJSON_ArrayForEach(t, type) {
		if (!cJSON_IsString(t)) {
			strbuf_free(&b);
			js_fail(g, EINVAL, "\"type\" at %s holds a non-string", js_at(path));
			return NULL;
		}
		const char *e = visit_typed(g, s, t->valuestring, name, path);
		if (!e) {
			strbuf_free(&b);
			return NULL;
		}
		strbuf_printf(&b, "%s%s", i++ ? " | " : "", e);
	}
	return js_alternatives(g, &b, i);
}

static const char *visit(struct gen *g, const cJSON *s, const char *name, const char *path)
{
	if (g->rc || !name || !path)
		return NULL;
	if (g->depth >= g->opt.depth_max) {
		js_fail(g, EINVAL, "the schema nests deeper than %d at %s", g->opt.depth_max, js_at(path));
		return NULL;
	}
	if (++g->visits > VISITS_MAX) {
		js_fail(g, E2BIG, "the schema expands to more than %d subschemas", VISITS_MAX);
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

/* Whether s is valid UTF-8 as grammar_parse reads it: shortest forms, no
 * surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		unsigned char c = *p;
		size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
		if (!n)
			return false;
		uint32_t v = n == 1 ? c : c & (0x7F >> n);
		for (size_t i = 1; i < n; i++) {
			if ((p[i] & 0xC0) != 0x80)
				return false;
			v = v << 6 | (p[i] & 0x3F);
		}
		if ((n == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (n == 4 && (v < 0x10000 || v > CP_MAX)))
			return false;
		p += n;
	}
	return true;
}

/* Refuses a schema with a key or string that is not UTF-8 (cJSON keeps
 * such bytes): they would reach the grammar's literals, which must be. */
static void schema_utf8_check(struct gen *g, const cJSON *s)
{
	if ((s->string && !utf8_valid(s->string)) ||
	    (cJSON_IsString(s) && s->valuestring && !utf8_valid(s->valuestring)))
		js_fail(g, EINVAL, "the schema holds a key or string that is not valid UTF-8");
	for (const cJSON *c = s->child; c && !g->rc; c = c->next)
		schema_utf8_check(g, c);
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
		js_fail(&g, EINVAL, "no schema");
		return g.rc;
	}
	schema_utf8_check(&g, schema);
	if (g.rc)
		return g.rc;
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
			js_fail(&g, ENOMEM, "out of memory");
		else if (out.len > JSON_SCHEMA_GBNF_BYTES_MAX)
			js_fail(&g, E2BIG, "the grammar would exceed %u bytes", JSON_SCHEMA_GBNF_BYTES_MAX);
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
