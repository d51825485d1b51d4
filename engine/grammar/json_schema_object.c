/*
 * json_schema_object — JSON Schema arrays and objects to GBNF. Arrays:
 * prefixItems in order, then items, with minItems / maxItems as bounds.
 * Objects: the listed properties
 * in schema order, required ones in place and optional ones as nested
 * optional tails (past MEMBERS_INLINE_MAX members the tails become rules,
 * so n properties cost O(n) rules), and additionalProperties as extra
 * members whose keys come from a trie of the listed names, so that a
 * listed name cannot be written a second time as an "extra" with any
 * value. json_schema.c's walk calls js_visit_object for each object.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/strbuf.h"
#include "engine/grammar/json_schema_internal.h"

#define MEMBERS_INLINE_MAX 8		/* beyond this, object tails become rules */

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
		e = js_as_rule(g, js_fmt(g, "%s-%d", name, depth), e);
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
		e = js_as_rule(g, name, js_fmt(g, "\"\\\"\" %s", body));
	free(t.v);
	return e;
}

const char *js_visit_object(struct gen *g, const cJSON *s, const char *name, const char *path)
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
		const char *pp = js_path_child(g, js_path_child(g, path, "properties"), p->string);
		if (!hint || !pp)
			break;
		const char *v = js_as_rule(g, hint, js_visit(g, p, hint, pp));
		struct strbuf kv = { 0 };
		js_put_json_string(&kv, p->string);
		strbuf_printf(&kv, " %s \":\" %s %s %s", ws, ws, v ? v : "", ws);
		const char *body = js_keep(g, &kv);
		const char *kvn = js_name_new(g, js_fmt(g, "%s-kv", hint));
		js_rule_add(g, kvn, body);
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
			js_as_rule(g, hint, js_visit(g, addl, hint, js_path_child(g, path, "additionalProperties"))) :
			js_prim(g, PRIM_VALUE);
		struct strbuf kv = { 0 };
		js_put_json_string(&kv, r->valuestring);
		strbuf_printf(&kv, " %s \":\" %s %s %s", ws, ws, v ? v : "", ws);
		const char *body = js_keep(g, &kv);
		const char *kvn = js_name_new(g, js_fmt(g, "%s-kv", hint));
		js_rule_add(g, kvn, body);
		m[n++] = (struct member){ kvn, true };
	}
	const char *extra = NULL;
	if (extras && !g->rc) {
		const char *hint = js_fmt(g, "%s-extra", name);
		const char *v = addl && cJSON_IsObject(addl) ?
			js_as_rule(g, hint, js_visit(g, addl, hint, js_path_child(g, path, "additionalProperties"))) :
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
		extra = js_name_new(g, js_fmt(g, "%s-kv", hint));
		js_rule_add(g, extra, body);
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
			t = js_as_rule(g, js_fmt(g, "%s-tail-%zu", name, i), js_fmt(g, "( %s )", t));
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

const char *js_visit_array(struct gen *g, const cJSON *s, const char *name, const char *path)
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
	long mn = js_count_get(g, s, "minItems", path), mx = js_count_get(g, s, "maxItems", path);
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
		const char *p = js_path_index(g, path, prefix_key, i);
		const char *hint = js_fmt(g, "%s-%d", name, i);
		if (!p || !hint)
			break;
		pe[i] = js_as_rule(g, hint, js_visit(g, it, hint, p));
	}
	const char *re = NULL;
	bool more = !rest_none && (mx < 0 || mx > k);
	if (more && !g->rc) {
		const char *hint = js_fmt(g, "%s-item", name);
		const char *p = js_path_child(g, path, prefix == items && items ? "additionalItems" : "items");
		re = rest ? js_as_rule(g, hint, js_visit(g, rest, hint, p)) : js_prim(g, PRIM_VALUE);
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
			const char *tail = js_repeat(g, rmn > 1 ? rmn - 1 : 0, rmx < 0 ? -1 : rmx - 1);
			if (rmx == 1)
				strbuf_printf(&b, "%s%s %s %s", rmn ? "" : "( ", re, ws, rmn ? "" : ")? ");
			else
				strbuf_printf(&b, "%s%s %s ( \",\" %s %s %s )%s%s ", rmn ? "" : "( ", re, ws, ws,
					      re, ws, tail, rmn ? "" : " )?");
		} else {
			strbuf_printf(&b, "( \",\" %s %s %s )%s ", ws, re, ws, js_repeat(g, rmn, rmx));
		}
	}
	for (; open; open--)
		strbuf_put(&b, ")? ", 3);
	strbuf_put(&b, "\"]\"", 3);
	free(pe);
	return js_keep(g, &b);
}
