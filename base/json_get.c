/*
 * json_get — see json_get.h.
 */
#include "base/json_get.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* The offending value for a message: the number, or the start of its JSON. */
static void value_text(const cJSON *v, char *buf, size_t n)
{
	if (cJSON_IsNumber(v)) {
		snprintf(buf, n, "%.17g", v->valuedouble);
		return;
	}
	char *text = cJSON_PrintUnformatted(v);
	snprintf(buf, n, "%s", text ? text : "?");
	if (text && strlen(text) >= n && n > 4)
		memcpy(buf + n - 4, "...", 4);
	free(text);
}

int json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (lo < -JSON_INT_EXACT)
		lo = -JSON_INT_EXACT;
	if (hi > JSON_INT_EXACT)
		hi = JSON_INT_EXACT;
	if (!cJSON_IsNumber(v))
		return -EINVAL;
	double d = v->valuedouble;
	if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
		return -EINVAL;
	*out = (int64_t)d;
	return 0;
}

int json_item_int(const cJSON *v, const char *src, const char *field, int64_t lo, int64_t hi, int64_t *out)
{
	if (json_int(v, lo, hi, out) == 0)
		return 0;
	char got[48];
	value_text(v, got, sizeof got);
	return error_set(EINVAL, "%s: %s must be an integer in [%lld, %lld], not %s", src, field,
			 (long long)(lo < -JSON_INT_EXACT ? -JSON_INT_EXACT : lo),
			 (long long)(hi > JSON_INT_EXACT ? JSON_INT_EXACT : hi), got);
}

int json_get_int(const cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, const char *src,
		 int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		if (def == JSON_REQUIRED)
			return error_set(EINVAL, "%s: missing field %s", src, key);
		*out = def;
		return 0;
	}
	char field[96];
	snprintf(field, sizeof field, "field %s", key);
	return json_item_int(v, src, field, lo, hi, out);
}

int json_get_int32(const cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, const char *src,
		   int32_t *out)
{
	int64_t v = 0;
	int rc = json_get_int(o, key, def, lo < INT32_MIN ? INT32_MIN : lo, hi > INT32_MAX ? INT32_MAX : hi, src, &v);
	if (!rc)
		*out = (int32_t)v;
	return rc;
}

int json_get_num(const cJSON *o, const char *key, double def, double lo, double hi, bool lo_open,
		 const char *src, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		*out = def;
		return 0;
	}
	double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
	if (isfinite(d) && (lo_open ? d > lo : d >= lo) && d <= hi) {
		*out = d;
		return 0;
	}
	char got[48];
	value_text(v, got, sizeof got);
	return error_set(EINVAL, "%s: field %s must be a number in %s%g, %g], not %s", src, key, lo_open ? "(" : "[",
			 lo, hi, got);
}

int json_get_float(const cJSON *o, const char *key, double def, double lo, double hi, bool lo_open,
		   const char *src, float *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		*out = (float)def;
		return 0;
	}
	double d;
	int rc = json_get_num(o, key, def, lo, hi, lo_open, src, &d);
	if (rc)
		return rc;
	float f = (float)d;
	if (!isfinite(f) || (lo_open ? f <= lo : f < lo) || f > hi)
		return error_set(EINVAL, "%s: field %s must be a number in %s%g, %g] as a float32, not %.17g", src, key,
				 lo_open ? "(" : "[", lo, hi, d);
	*out = f;
	return 0;
}

int json_get_bool(const cJSON *o, const char *key, bool def, const char *src, bool *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsBool(v)) {
		char got[48];
		value_text(v, got, sizeof got);
		return error_set(EINVAL, "%s: field %s must be true or false, not %s", src, key, got);
	}
	*out = cJSON_IsTrue(v);
	return 0;
}

/* Objects this small are checked pairwise, with no sort and no memory. */
#define DUP_PAIRWISE_MAX 16

static int key_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key of o that appears twice, or NULL. *keys (of *cap pointers) is
 * scratch kept between calls; *oom set when it cannot grow. */
static const char *dup_key_of(const cJSON *o, const char ***keys, size_t *cap, bool *oom)
{
	size_t k = 0;
	for (const cJSON *c = o->child; c; c = c->next)
		k++;
	if (k <= DUP_PAIRWISE_MAX) {
		for (const cJSON *a = o->child; a; a = a->next)
			for (const cJSON *b = a->next; b; b = b->next)
				if (a->string && b->string && !strcmp(a->string, b->string))
					return b->string;
		return NULL;
	}
	if (k > *cap) {
		const char **grown = realloc(*keys, k * sizeof *grown);
		if (!grown) {
			*oom = true;
			return NULL;
		}
		*keys = grown;
		*cap = k;
	}
	size_t m = 0;
	for (const cJSON *c = o->child; c; c = c->next)
		if (c->string)
			(*keys)[m++] = c->string;
	qsort(*keys, m, sizeof **keys, key_cmp);
	for (size_t i = 1; i < m; i++)
		if (!strcmp((*keys)[i - 1], (*keys)[i]))
			return (*keys)[i];
	return NULL;
}

/* Appends one step of a path: ".key" (or "key" first) under an object,
 * "[i]" under an array. */
static void path_step(char *path, size_t n, size_t *len, const cJSON *parent, const char *key, int i)
{
	if (*len >= n)
		return;
	int w = cJSON_IsArray(parent) ? snprintf(path + *len, n - *len, "[%d]", i)
				      : snprintf(path + *len, n - *len, "%s%s", *len ? "." : "", key ? key : "");
	*len = w < 0 ? n : *len + (size_t)w;
}

int json_find_duplicate_key(const cJSON *root, char *path, size_t n)
{
	/* The walk's stack: each container being walked and the next child
	 * to visit, so a path can be named without recursion. */
	struct frame {
		const cJSON *node, *next;
		int i;
	};
	enum { DEPTH_MAX = CJSON_NESTING_LIMIT + 1 };
	if (n)
		path[0] = 0;
	if (!root || !(cJSON_IsObject(root) || cJSON_IsArray(root)))
		return 0;
	struct frame *st = malloc(DEPTH_MAX * sizeof *st);
	if (!st)
		return -ENOMEM;
	const char **keys = NULL, *dup = NULL;
	size_t cap = 0, depth = 0;
	bool oom = false;
	int rc = 0;
	const cJSON *at = root;
	if (cJSON_IsObject(root))
		dup = dup_key_of(root, &keys, &cap, &oom);
	if (!dup && !oom)
		st[depth++] = (struct frame){ root, root->child, 0 };
	while (depth && !dup && !oom) {
		struct frame *f = &st[depth - 1];
		const cJSON *c = f->next;
		if (!c) {
			depth--;
			continue;
		}
		f->next = c->next;
		f->i++;
		if (!(cJSON_IsObject(c) || cJSON_IsArray(c)) || !c->child)
			continue;
		if (depth == DEPTH_MAX) {
			rc = -E2BIG;
			break;
		}
		st[depth++] = (struct frame){ c, c->child, 0 };
		if (cJSON_IsObject(c) && (dup = dup_key_of(c, &keys, &cap, &oom)))
			at = c;
	}
	if (oom)
		rc = -ENOMEM;
	else if (dup && !rc) {
		/* Frame d's current child is frame d+1's node; its index is i - 1. */
		size_t len = 0;
		for (size_t d = 0; d + 1 < depth; d++)
			path_step(path, n, &len, st[d].node, st[d + 1].node->string, st[d].i - 1);
		path_step(path, n, &len, at, dup, 0);
		rc = 1;
	}
	free(keys);
	free(st);
	return rc;
}
