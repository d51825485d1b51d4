/*
 * json_schema_merge — the schema algebra json_schema.c's walk leans on:
 * local $ref resolution, and allOf merged into one schema (types met,
 * properties and items merged recursively, required lists united, numeric
 * and length bounds tightened, differing annotations warned about and the
 * first kept). Merged schemas are new cJSON trees owned by the generator
 * (js_owned) until the conversion ends.
 *
 * Limits: REF_CHAIN_MAX links of a $ref chain, MERGES_MAX merges per
 * conversion, merges nested at most depth_max deep.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "engine/grammar/json_schema_internal.h"

#define REF_CHAIN_MAX 64
#define MERGES_MAX 2048		/* allOf merges per conversion */

/* Resolves a local $ref ("#", "#/a/b", ~0 ~1 and %XX decoded); NULL when absent. */
const cJSON *js_ref_resolve(const cJSON *root, const char *ref)
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
			else if (c == '%' && js_hexval(p[0]) >= 0 && js_hexval(p[1]) >= 0) {
				c = (char)(js_hexval(p[0]) << 4 | js_hexval(p[1]));
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

cJSON *js_owned(struct gen *g, cJSON *s)
{
	if (!s) {
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	if (array_grow((void **)&g->owned, &g->cap_owned, g->n_owned + 1, sizeof *g->owned)) {
		cJSON_Delete(s);
		js_fail(g, ENOMEM, "out of memory");
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
		const cJSON *t = js_ref_resolve(g->root, r->valuestring);
		if (!t) {
			js_fail(g, EINVAL, "$ref \"%s\" at %s does not resolve within the schema", r->valuestring,
			     js_at(path));
			return NULL;
		}
		s = t;
	}
	js_fail(g, EINVAL, "$ref chain at %s is longer than %d (a cycle?)", js_at(path), REF_CHAIN_MAX);
	return NULL;
}

cJSON *js_merge(struct gen *g, const cJSON *a, const cJSON *b, const char *path, int depth);

/* Whether the "type" value t admits instances of type name (integer is a number). */
bool js_type_has(const cJSON *t, const char *name)
{
	if (cJSON_IsString(t))
		return !strcmp(t->valuestring, name) ||
		       (!strcmp(name, "integer") && !strcmp(t->valuestring, "number"));
	const cJSON *e;
	cJSON_ArrayForEach(e, t)
		if (js_type_has(e, name))
			return true;
	return false;
}

/* Intersection of two "type" values (an empty array when none). */
static cJSON *types_meet(const cJSON *a, const cJSON *b)
{
	cJSON *out = cJSON_CreateArray();
	const char *all[] = { "object", "array", "string", "number", "integer", "boolean", "null" };
	for (size_t i = 0; out && i < sizeof all / sizeof *all; i++)
		if (js_type_has(a, all[i]) && js_type_has(b, all[i]))
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
		if (js_is_annotation(key) || cJSON_Compare(old, k, true))
			continue;
		cJSON *nv = NULL;
		if (!strcmp(key, "type")) {
			nv = types_meet(old, k);
			if (nv && !cJSON_GetArraySize(nv)) {
				cJSON_Delete(nv);
				js_fail(g, EINVAL, "allOf at %s: the types do not intersect", js_at(path));
				return;
			}
		} else if (!strcmp(key, "properties") && cJSON_IsObject(old) && cJSON_IsObject(k)) {
			const cJSON *p;
			cJSON_ArrayForEach(p, k) {
				cJSON *op = cJSON_GetObjectItemCaseSensitive(old, p->string);
				if (!op) {
					cJSON_AddItemToObject(old, p->string, cJSON_Duplicate(p, true));
				} else {
					cJSON *mp = js_merge(g, op, p, path, depth + 1);
					if (!mp)
						return;
					cJSON_ReplaceItemInObjectCaseSensitive(old, p->string, cJSON_Duplicate(mp, true));
				}
			}
			continue;
		} else if (!strcmp(key, "required") && cJSON_IsArray(old) && cJSON_IsArray(k)) {
			const cJSON *r;
			cJSON_ArrayForEach(r, k)
				if (cJSON_IsString(r) && !js_required_has(old, r->valuestring))
					cJSON_AddItemToArray(old, cJSON_CreateString(r->valuestring));
			continue;
		} else if (!strcmp(key, "additionalProperties") || !strcmp(key, "items")) {
			if (cJSON_IsFalse(old) || cJSON_IsTrue(k))
				continue;
			if (cJSON_IsFalse(k) || cJSON_IsTrue(old)) {
				nv = cJSON_Duplicate(k, true);
			} else if (cJSON_IsObject(old) && cJSON_IsObject(k)) {
				cJSON *mv = js_merge(g, old, k, path, depth + 1);
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
				js_fail(g, EINVAL, "allOf at %s: the enums have no value in common", js_at(path));
				return;
			}
		} else if (!strcmp(key, "const")) {
			js_fail(g, EINVAL, "allOf at %s: the consts differ", js_at(path));
			return;
		}
		if (nv) {
			cJSON_ReplaceItemInObjectCaseSensitive(a, key, nv);
		} else {
			js_warn(g, "allOf at %s: \"%s\" differs between the parts; the first is kept", js_at(path), key);
		}
	}
}

/* The merge of schemas a and b (objects or booleans, $refs followed, allOf flattened). */
cJSON *js_merge(struct gen *g, const cJSON *a, const cJSON *b, const char *path, int depth)
{
	if (depth > g->opt.depth_max) {
		js_fail(g, EINVAL, "allOf at %s nests deeper than %d", js_at(path), g->opt.depth_max);
		return NULL;
	}
	if (++g->merges > MERGES_MAX) {
		js_fail(g, E2BIG, "allOf at %s needs more than %d merges", js_at(path), MERGES_MAX);
		return NULL;
	}
	a = deref(g, a, path);
	b = b ? deref(g, b, path) : NULL;
	if (!a || (b == NULL && g->rc))
		return NULL;
	if (cJSON_IsFalse(a) || cJSON_IsFalse(b)) {
		js_fail(g, EINVAL, "allOf at %s includes the schema false", js_at(path));
		return NULL;
	}
	if ((!cJSON_IsObject(a) && !cJSON_IsTrue(a)) || (b && !cJSON_IsObject(b) && !cJSON_IsTrue(b))) {
		js_fail(g, EINVAL, "allOf at %s has a part that is not a schema", js_at(path));
		return NULL;
	}
	cJSON *out = js_owned(g, cJSON_CreateObject());
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
		cJSON *own = js_owned(g, cJSON_Duplicate(parts[i], true));
		if (!own)
			break;
		cJSON_DeleteItemFromObjectCaseSensitive(own, "allOf");
		cJSON_DeleteItemFromObjectCaseSensitive(own, "$ref");
		merge_into(g, out, own, path, depth);
		if (all && !cJSON_IsArray(all)) {
			js_fail(g, EINVAL, "\"allOf\" at %s is not an array", js_at(path));
			break;
		}
		size_t subs = (size_t)cJSON_GetArraySize(all);
		if (array_grow((void **)&closed, &cap_closed, n_closed + subs + 1, sizeof *closed)) {
			js_fail(g, ENOMEM, "out of memory");
			break;
		}
		closed[n_closed++] = own;
		const cJSON *sub;
		cJSON_ArrayForEach(sub, all) {
			cJSON *m = js_merge(g, sub, NULL, path, depth + 1);
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
			if (js_required_has(req, p->string)) {
				js_fail(g, EINVAL, "allOf at %s: property \"%s\" is required but a part forbids it",
				     js_at(path), p->string);
				break;
			}
			cJSON_DeleteItemFromObjectCaseSensitive(props, p->string);
		}
		const cJSON *r;
		cJSON_ArrayForEach(r, req) {
			if (!g->rc && cJSON_IsString(r) && !(own && cJSON_GetObjectItemCaseSensitive(own, r->valuestring)))
				js_fail(g, EINVAL, "allOf at %s: property \"%s\" is required but a part forbids it",
				     js_at(path), r->valuestring);
		}
	}
	free(closed);
	return g->rc ? NULL : out;
}

/* A $ref: its target visited once as a named rule (memoised by the
 * pointer text), a cycle that consumes no input refused, a reference
 * outside the schema warned and left as any value. */
const char *js_visit_ref(struct gen *g, const char *ref, const char *path)
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
	const char *name = js_name_new(g, slash ? slash + 1 : "root-ref");
	const char *rp = js_fmt(g, "%s", ref + 1);
	if (!name || !rp)
		return NULL;
	if (array_grow((void **)&g->refs, &g->cap_refs, g->n_refs + 1, sizeof *g->refs)) {
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	size_t k = g->n_refs++;
	g->refs[k] = (struct ref){ js_fmt(g, "%s", ref), name, false, g->consume };
	const char *e = js_visit(g, t, name, rp);
	if (!e)
		return NULL;
	js_rule_add(g, name, e);
	g->refs[k].done = true;
	return name;
}
