/*
 * json_schema_internal — what json_schema.c (the schema visitor) and
 * json_schema_regex.c (code-point sets and the pattern translator) share:
 * the generator's state and its helpers. Internal to engine/grammar/.
 */
#ifndef COLIBRI_JSON_SCHEMA_INTERNAL_H
#define COLIBRI_JSON_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/strbuf.h"
#include "engine/grammar/json_schema.h"

#define CP_MAX 0x10FFFFu
#define INT_DIGITS_MAX 16
#define INT_MAG_MAX 9999999999999999LL	/* the largest 16-digit integer */

enum prim {
	PRIM_WS, PRIM_VALUE, PRIM_OBJECT, PRIM_ARRAY, PRIM_STRING, PRIM_CHAR, PRIM_NUMBER,
	PRIM_INTEGER, PRIM_BOOLEAN, PRIM_NULL, PRIM_DATE, PRIM_TIME, PRIM_DATE_TIME, PRIM_UUID,
	PRIM_IPV4, PRIM_IPV4_OCTET, PRIM_COUNT
};

struct rule;
struct ref;

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

/* A set of code points. */
struct cset {
	uint32_t (*r)[2];	/* sorted, disjoint, inclusive code-point ranges after cset_norm */
	size_t n, cap;
	int rc;
};

/* The first error wins: g->rc and its message in g->err. */
void js_fail(struct gen *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* b's text kept for the generator's lifetime (b consumed); NULL after an error. */
const char *js_keep(struct gen *g, struct strbuf *b);
const char *js_fmt(struct gen *g, const char *f, ...) __attribute__((format(printf, 2, 3)));
/* A warning (at most JSON_SCHEMA_WARNINGS_MAX are kept). */
void js_warn(struct gen *g, const char *f, ...) __attribute__((format(printf, 2, 3)));
/* A JSON pointer for messages ("/" for the root). */
const char *js_at(const char *path);
/* The rule name of a shared primitive (ws, string, number, ...), marked used. */
const char *js_prim(struct gen *g, enum prim p);
/* The shared rules' names and bodies (json_schema.c). */
extern const char *const js_prim_name[PRIM_COUNT];
extern const char *const js_prim_body[PRIM_COUNT];
/* The n alternatives joined in b (" | " between them) as one element:
 * itself when n is 1, else in parentheses; b is consumed. */
const char *js_alternatives(struct gen *g, struct strbuf *b, int n);
/* n bytes of s as a GBNF string literal. */
void js_put_literal(struct strbuf *b, const char *s, size_t n);

void js_cset_add(struct cset *s, uint32_t lo, uint32_t hi);
void js_cset_negate(struct cset *s);
/* One code point inside a GBNF character class, escaped where needed. */
void js_put_class_char(struct strbuf *b, uint32_t c);
/* One code point as UTF-8. */
void js_put_utf8(struct strbuf *b, uint32_t c);
/* A hex digit's value, or -1. */
int js_hexval(char c);

/* A number or integer schema (json_schema_numbers.c), with its bounds. */
const char *js_visit_number(struct gen *g, const cJSON *s, bool integer, const char *path);

/* ECMAScript patterns (json_schema_regex.c). */
struct rx {
	struct gen *g;
	const char *p, *end;
	const char *why;	/* set when the pattern is refused */
	int depth;
};
/* The next code point of x->p (UTF-8), advancing; false at invalid UTF-8. */
bool js_rx_utf8(struct rx *x, uint32_t *cp);
/* GBNF of the string contents pattern admits; NULL with *why when refused. */
const char *js_pattern_gbnf(struct gen *g, const char *pattern, const char **why);

/* A keyword that annotates (title, description, $defs, ...) and constrains nothing. */
bool js_is_annotation(const char *key);
/* Whether the "required" array req lists key. */
bool js_required_has(const cJSON *req, const char *key);

/* ---- json_schema_merge.c ---- */

/* Resolves a local $ref ("#", "#/a/b", ~0 ~1 and %XX decoded) in root; NULL when absent. */
const cJSON *js_ref_resolve(const cJSON *root, const char *ref);
/* Keeps s until the conversion ends; NULL (error set, s freed) when out of memory or s is NULL. */
cJSON *js_owned(struct gen *g, cJSON *s);
/* Whether the "type" value t admits instances of type name (integer is a number). */
bool js_type_has(const cJSON *t, const char *name);
/* The merge of schemas a and b (b may be NULL: a with its allOf flattened);
 * $refs followed; owned by g. NULL with g's error set on failure. */
cJSON *js_merge(struct gen *g, const cJSON *a, const cJSON *b, const char *path, int depth);

/* json_schema.c's walk, shared with json_schema_object.c: the expression
 * of subschema s (js_visit; name: the rule it becomes, if any); the
 * expression e as a rule named after hint unless it is one already; a
 * new rule's name; a rule added; a child's JSON pointer; a JSON string
 * literal as GBNF. */
const char *js_visit(struct gen *g, const cJSON *s, const char *name, const char *path);
const char *js_as_rule(struct gen *g, const char *hint, const char *e);
const char *js_name_new(struct gen *g, const char *hint);
int js_name_put(struct gen *g, const char *n);   /* n, not taken, into the set of names */
void js_rule_add(struct gen *g, const char *name, const char *body);
const char *js_path_child(struct gen *g, const char *path, const char *key);
const char *js_path_index(struct gen *g, const char *path, const char *key, int i);
void js_put_json_string(struct strbuf *b, const char *s);

/* An object or array schema's expression (json_schema_object.c); a
 * string schema's (json_schema_string.c); a $ref's (json_schema_merge.c). */
const char *js_visit_object(struct gen *g, const cJSON *s, const char *name, const char *path);
const char *js_visit_array(struct gen *g, const cJSON *s, const char *name, const char *path);
const char *js_visit_string(struct gen *g, const cJSON *s, const char *path);
const char *js_visit_ref(struct gen *g, const char *ref, const char *path);

/* A non-negative integer keyword of s, -1 when absent or above
 * JSON_SCHEMA_REPEAT_MAX (warned); the GBNF repetition of m..n (n < 0:
 * unbounded) (json_schema_string.c). */
long js_count_get(struct gen *g, const cJSON *s, const char *key, const char *path);
const char *js_repeat(struct gen *g, long m, long n);

/* A named rule, in the order made. */
struct rule {
	const char *name, *body;
};

/* A $ref being visited or done, memoised by its pointer text. */
struct ref {
	const char *ptr;	/* the $ref text */
	const char *name;	/* its rule */
	bool done;		/* the rule body is built */
	int consume;		/* g->consume when the rule was started */
};

#endif
