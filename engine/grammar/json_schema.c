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
 * Objects (their members, required and optional, and extra members' keys)
 * are json_schema_object.c.
 *
 * Limits: nesting depth (depth_max), grammar size (JSON_SCHEMA_GBNF_BYTES_MAX),
 * named rules (JSON_SCHEMA_RULES_MAX, checked as they are made),
 * repetition bounds (JSON_SCHEMA_REPEAT_MAX), MERGES_MAX allOf merges (json_schema_merge.c) and
 * VISITS_MAX subschema visits (allOf copies are not memoised, so a schema
 * recursing through allOf is cut off there). Objects with n properties cost
 * O(n) rules (json_schema_object.c), enums O(total size
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
#define VISITS_MAX 200000	/* subschemas visited per conversion */


const char *const js_prim_name[PRIM_COUNT] = {
	"ws", "value", "object", "array", "string", "char", "number", "integer", "boolean",
	"null", "date", "time", "date-time", "uuid", "ipv4", "ipv4-octet",
};

/* Bodies of the shared rules; ws is made from the options. */
const char *const js_prim_body[PRIM_COUNT] = {
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
const char *js_path_child(struct gen *g, const char *path, const char *key)
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

const char *js_path_index(struct gen *g, const char *path, const char *key, int i)
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
	return js_prim_name[p];
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
void js_put_json_string(struct strbuf *b, const char *s)
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
				js_put_json_string(b, c->string);
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
		return js_visit_object(g, s, name, path);
	if (!strcmp(type, "array"))
		return js_visit_array(g, s, name, path);
	if (!strcmp(type, "string"))
		return js_visit_string(g, s, path);
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
		return js_visit_ref(g, ref->valuestring, path);
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
			return js_visit(g, all->child, name, js_path_index(g, path, "allOf", 0));
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
			const char *bp = js_path_index(g, path, key, i);
			const cJSON *bs = sib ? js_merge(g, sib, br, bp, 0) : br;
			const char *e = bs ? js_visit(g, bs, name, bp) : NULL;
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

const char *js_visit(struct gen *g, const cJSON *s, const char *name, const char *path)
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
		if (js_name_put(&g, js_prim_name[p])) {
			gen_free(&g);
			return -ENOMEM;
		}
	}
	const char *root = js_name_new(&g, "root");
	const char *e = js_visit(&g, schema, root, "");
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
				strbuf_printf(&out, "%s ::= %s\n", js_prim_name[p], js_prim_body[p]);
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
