/*
 * jinja_json — the tojson filter as Hugging Face defines it:
 * json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False), byte for byte what Python writes: ", " and ": " without
 * an indent, "," and ": " with one; control characters as \uXXXX except
 * the short escapes; non-ASCII raw unless ensure_ascii; floats as repr,
 * with NaN and Infinity. Values JSON has no form for are refused with
 * Python's "Object of type X is not JSON serializable".
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

static int put_str(struct jrender *r, struct jbuf *b, const char *s, size_t len, bool ascii)
{
	if (jbuf_putc(r, b, '"'))
		return -1;
	size_t run = 0;	/* bytes copied verbatim, flushed before each escape */
	for (size_t i = 0; i < len;) {
		uint32_t c;
		size_t k = utf8_next(s + i, len - i, &c);
		char esc[16];
		int w = 0;
		if (c == '"' || c == '\\')
			w = snprintf(esc, sizeof esc, "\\%c", (char)c);
		else if (c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f')
			w = snprintf(esc, sizeof esc, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't'
								: c == '\b' ? 'b' : 'f');
		else if (c < 0x20 || (ascii && c == 0x7f))
			w = snprintf(esc, sizeof esc, "\\u%04x", c);
		else if (ascii && c >= 0x80 && c < 0x10000)
			w = snprintf(esc, sizeof esc, "\\u%04x", c);
		else if (ascii && c >= 0x10000)
			w = snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + ((c - 0x10000) >> 10),
				     0xdc00 + ((c - 0x10000) & 0x3ff));
		if (w == 0) {
			run += k;
		} else {
			if (jbuf_put(r, b, s + i - run, run) || jbuf_put(r, b, esc, (size_t)w))
				return -1;
			run = 0;
		}
		i += k;
	}
	if (jbuf_put(r, b, s + len - run, run))
		return -1;
	return jbuf_putc(r, b, '"');
}

static int put_float(struct jrender *r, struct jbuf *b, double f)
{
	char num[48];
	if (isnan(f))
		snprintf(num, sizeof num, "NaN");
	else if (isinf(f))
		snprintf(num, sizeof num, f < 0 ? "-Infinity" : "Infinity");
	else
		jv_float_repr(num, sizeof num, f);
	return jbuf_put(r, b, num, strlen(num));
}

static int newline(struct jrender *r, struct jbuf *b, const struct jtojson *o, unsigned level)
{
	if (jbuf_putc(r, b, '\n'))
		return -1;
	for (unsigned i = 0; i < level; i++) {
		if (o->indent_str) {
			if (jbuf_put(r, b, o->indent_str->p, o->indent_str->len))
				return -1;
		} else {
			for (int k = 0; k < o->indent; k++)
				if (jbuf_putc(r, b, ' '))
					return -1;
		}
	}
	return 0;
}

static bool indented(const struct jtojson *o)
{
	return o->indent_str || o->indent >= 0;
}

static int put_sep(struct jrender *r, struct jbuf *b, const struct jtojson *o, bool item)
{
	const struct jstr *s = item ? o->item_sep : o->key_sep;
	if (s)
		return jbuf_put(r, b, s->p, s->len);
	if (item)
		return indented(o) ? jbuf_putc(r, b, ',') : jbuf_put(r, b, ", ", 2);
	return jbuf_put(r, b, ": ", 2);
}

/* A dict key as json.dumps writes it: strings as they are, scalars converted. */
static int put_key(struct jrender *r, struct jbuf *b, struct jv k, const struct jtojson *o)
{
	char num[48];
	switch (k.kind) {
	case JV_STR: return put_str(r, b, k.u.s->p, k.u.s->len, o->ensure_ascii);
	case JV_BOOL: return put_str(r, b, k.u.b ? "true" : "false", k.u.b ? 4 : 5, false);
	case JV_NONE: return put_str(r, b, "null", 4, false);
	case JV_INT:
		snprintf(num, sizeof num, "%" PRId64, k.u.i);
		return put_str(r, b, num, strlen(num), false);
	case JV_FLOAT:
		if (isnan(k.u.f) || isinf(k.u.f))
			snprintf(num, sizeof num, isnan(k.u.f) ? "NaN" : k.u.f < 0 ? "-Infinity" : "Infinity");
		else
			jv_float_repr(num, sizeof num, k.u.f);
		return put_str(r, b, num, strlen(num), false);
	default:
		return jr_fail(r, -EINVAL, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
	}
}

static int put_value(struct jrender *r, struct jbuf *b, struct jv v, const struct jtojson *o, unsigned level);

/* The member order: insertion order, or sorted by key when sort_keys (string keys only). */
static int dict_order(struct jrender *r, const struct jdict *d, bool sort, size_t **order)
{
	size_t *ix = ja_alloc(&r->a, (d->n ? d->n : 1) * sizeof(*ix));
	if (!ix)
		return jr_oom(r);
	for (size_t i = 0; i < d->n; i++)
		ix[i] = i;
	for (size_t i = 1; sort && i < d->n; i++) {	/* insertion sort: stable, fine for schema-sized dicts */
		for (size_t j = i; j > 0; j--) {
			bool lt;
			if (jv_less(r, d->k[ix[j]], d->k[ix[j - 1]], "<", &lt))
				return -1;
			if (!lt)
				break;
			size_t t = ix[j];
			ix[j] = ix[j - 1];
			ix[j - 1] = t;
		}
	}
	*order = ix;
	return 0;
}

static int put_value(struct jrender *r, struct jbuf *b, struct jv v, const struct jtojson *o, unsigned level)
{
	if (level > JV_NEST_MAX)
		return jr_fail(r, -E2BIG, "values nested more than %d deep", JV_NEST_MAX);
	if (jr_step(r))
		return -1;
	char num[32];
	switch (v.kind) {
	case JV_NONE: return jbuf_put(r, b, "null", 4);
	case JV_BOOL: return v.u.b ? jbuf_put(r, b, "true", 4) : jbuf_put(r, b, "false", 5);
	case JV_INT:
		snprintf(num, sizeof num, "%" PRId64, v.u.i);
		return jbuf_put(r, b, num, strlen(num));
	case JV_FLOAT: return put_float(r, b, v.u.f);
	case JV_STR: return put_str(r, b, v.u.s->p, v.u.s->len, o->ensure_ascii);
	case JV_LIST:
		if (v.u.l->n == 0)
			return jbuf_put(r, b, "[]", 2);
		if (jbuf_putc(r, b, '['))
			return -1;
		for (size_t i = 0; i < v.u.l->n; i++) {
			if (i && put_sep(r, b, o, true))
				return -1;
			if (indented(o) && newline(r, b, o, level + 1))
				return -1;
			if (put_value(r, b, v.u.l->v[i], o, level + 1))
				return -1;
		}
		if (indented(o) && newline(r, b, o, level))
			return -1;
		return jbuf_putc(r, b, ']');
	case JV_DICT: {
		const struct jdict *d = v.u.d;
		if (d->n == 0)
			return jbuf_put(r, b, "{}", 2);
		size_t *ix = NULL;
		if (dict_order(r, d, o->sort_keys, &ix) || jbuf_putc(r, b, '{'))
			return -1;
		for (size_t i = 0; i < d->n; i++) {
			if (i && put_sep(r, b, o, true))
				return -1;
			if (indented(o) && newline(r, b, o, level + 1))
				return -1;
			if (put_key(r, b, d->k[ix[i]], o) || put_sep(r, b, o, false) ||
			    put_value(r, b, d->v[ix[i]], o, level + 1))
				return -1;
		}
		if (indented(o) && newline(r, b, o, level))
			return -1;
		return jbuf_putc(r, b, '}');
	}
	default:
		return jr_fail(r, -EINVAL, "Object of type %s is not JSON serializable", jv_type_name(v));
	}
}

int jv_tojson(struct jrender *r, struct jbuf *b, struct jv v, const struct jtojson *o)
{
	return put_value(r, b, v, o, 0);
}
