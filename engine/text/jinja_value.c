/*
 * jinja_value — the arena, the value type and the Python semantics that
 * every other file of the Jinja subset leans on: truthiness, ==, <, str(),
 * repr(), the repr of floats, UTF-8 code points and JSON input.
 *
 * Invariant: a value never owns memory outside the render's arena, so a
 * render frees everything it made with one ja_free_all.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

/* ---- arena ---- */

struct ja_chunk {
	struct ja_chunk *next;
	size_t used, cap;
	_Alignas(16) unsigned char data[];
};

/* Chunks start small (most templates and renders need a few KB) and double up to 1 MiB. */
#define JA_CHUNK_MIN (4 * 1024)
#define JA_CHUNK_MAX (1024 * 1024)

void *ja_alloc(struct ja_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	if (a->bytes_max && (n > a->bytes_max || a->bytes > a->bytes_max - n)) {
		a->over = true;
		return NULL;
	}
	struct ja_chunk *c = a->head;
	if (!c || c->cap - c->used < n) {
		size_t cap = c ? (c->cap < JA_CHUNK_MAX ? c->cap * 2 : JA_CHUNK_MAX) : JA_CHUNK_MIN;
		if (cap < n)
			cap = n;
		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->used = 0;
		c->cap = cap;
		c->next = a->head;
		a->head = c;
	}
	void *p = c->data + c->used;
	c->used += n;
	a->bytes += n;
	memset(p, 0, n);
	return p;
}

bool ja_over(const struct ja_arena *a)
{
	return a->over;
}

void ja_free_all(struct ja_arena *a)
{
	for (struct ja_chunk *c = a->head, *next; c; c = next) {
		next = c->next;
		free(c);
	}
	a->head = NULL;
	a->bytes = 0;
}

/* ---- errors ---- */

int jr_fail(struct jrender *r, int code, const char *fmt, ...)
{
	if (r->rc)
		return -1;
	r->rc = code;
	r->err->line = r->line;
	r->err->col = r->col;
	r->err->raised = false;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err->msg, sizeof r->err->msg, fmt, ap);
	va_end(ap);
	return -1;
}

int jr_oom(struct jrender *r)
{
	if (ja_over(&r->a))
		return jr_fail(r, -E2BIG, "the template uses more than %zu bytes of memory", r->lim->memory_bytes_max);
	return jr_fail(r, -ENOMEM, "out of memory");
}

/* ---- constructors ---- */

struct jv jv_undef(const char *name)
{
	return (struct jv){ .kind = JV_UNDEF, .flags = JV_UNDEF_NAME, .u.name = name };
}

struct jv jv_none(void)
{
	return (struct jv){ .kind = JV_NONE };
}

struct jv jv_bool(bool b)
{
	return (struct jv){ .kind = JV_BOOL, .u.b = b };
}

struct jv jv_int(int64_t i)
{
	return (struct jv){ .kind = JV_INT, .u.i = i };
}

struct jv jv_float(double f)
{
	return (struct jv){ .kind = JV_FLOAT, .u.f = f };
}

const struct jstr *jstr_new(struct ja_arena *a, const char *s, size_t len)
{
	if (len > SIZE_MAX / 2)
		return NULL;
	struct jstr *js = ja_alloc(a, sizeof(*js) + len + 1);
	if (!js)
		return NULL;
	js->len = len;
	if (len)
		memcpy(js->p, s, len);
	js->p[len] = 0;
	return js;
}

struct jv jv_str_from(const struct jstr *s)
{
	return (struct jv){ .kind = JV_STR, .u.s = s };
}

struct jv jv_str(struct jrender *r, const char *s, size_t len)
{
	const struct jstr *js = jstr_new(&r->a, s, len);
	if (!js) {
		jr_oom(r);
		return jv_undef("");
	}
	return jv_str_from(js);
}

struct jlist *jlist_new(struct jrender *r, size_t cap)
{
	struct jlist *l = ja_alloc(&r->a, sizeof(*l));
	if (l && cap) {
		l->v = cap < SIZE_MAX / sizeof(struct jv) ? ja_alloc(&r->a, cap * sizeof(struct jv)) : NULL;
		l->cap = l->v ? cap : 0;
		if (!l->v)
			l = NULL;
	}
	if (!l)
		jr_oom(r);
	return l;
}

int jlist_push(struct jrender *r, struct jlist *l, struct jv v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4;
		struct jv *nv = cap < SIZE_MAX / sizeof(struct jv) ? ja_alloc(&r->a, cap * sizeof(*nv)) : NULL;
		if (!nv)
			return jr_oom(r);
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof(*nv));
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return 0;
}

struct jdict *jdict_new(struct jrender *r)
{
	struct jdict *d = ja_alloc(&r->a, sizeof(*d));
	if (!d)
		jr_oom(r);
	return d;
}

struct jv *jdict_get(const struct jdict *d, const char *key, size_t len)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].kind == JV_STR && d->k[i].u.s->len == len && memcmp(d->k[i].u.s->p, key, len) == 0)
			return &d->v[i];
	return NULL;
}

/* Keys are hashable scalars; == as Python's (1 and 1.0 and True are one key). */
static bool key_equal(struct jv a, struct jv b)
{
	if (a.kind == JV_STR || b.kind == JV_STR)
		return a.kind == b.kind && a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
	bool an = a.kind == JV_INT || a.kind == JV_BOOL || a.kind == JV_FLOAT;
	bool bn = b.kind == JV_INT || b.kind == JV_BOOL || b.kind == JV_FLOAT;
	if (an && bn) {
		double x = a.kind == JV_FLOAT ? a.u.f : a.kind == JV_BOOL ? a.u.b : (double)a.u.i;
		double y = b.kind == JV_FLOAT ? b.u.f : b.kind == JV_BOOL ? b.u.b : (double)b.u.i;
		if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
			return (a.kind == JV_BOOL ? a.u.b : a.u.i) == (b.kind == JV_BOOL ? b.u.b : b.u.i);
		return x == y;
	}
	return a.kind == b.kind && a.kind == JV_NONE;
}

struct jv *jdict_find(const struct jdict *d, struct jv key)
{
	for (size_t i = 0; i < d->n; i++)
		if (key_equal(d->k[i], key))
			return &d->v[i];
	return NULL;
}

int jdict_set(struct jrender *r, struct jdict *d, struct jv k, struct jv v)
{
	struct jv *slot = jdict_find(d, k);
	if (slot) {
		*slot = v;
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 8;
		struct jv *nk = ja_alloc(&r->a, cap * sizeof(*nk)), *nv = nk ? ja_alloc(&r->a, cap * sizeof(*nv)) : NULL;
		if (!nv)
			return jr_oom(r);
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof(*nk));
			memcpy(nv, d->v, d->n * sizeof(*nv));
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = k;
	d->v[d->n] = v;
	d->n++;
	return 0;
}

struct jv jv_list(struct jlist *l, bool tuple)
{
	return (struct jv){ .kind = JV_LIST, .flags = tuple ? JV_TUPLE : 0, .u.l = l };
}

struct jv jv_dict(struct jdict *d)
{
	return (struct jv){ .kind = JV_DICT, .u.d = d };
}

/* ---- UTF-8 ---- */

size_t utf8_next(const char *s, size_t len, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t k = u[0] < 0x80 ? 1 : u[0] >= 0xc2 && u[0] < 0xe0 ? 2 : u[0] >= 0xe0 && u[0] < 0xf0 ? 3
		 : u[0] >= 0xf0 && u[0] < 0xf5 ? 4 : 0;
	if (k == 0 || k > len) {
		*cp = u[0];
		return 1;
	}
	uint32_t c = k == 1 ? u[0] : u[0] & (0x7f >> k);
	for (size_t i = 1; i < k; i++) {
		if ((u[i] & 0xc0) != 0x80) {
			*cp = u[0];
			return 1;
		}
		c = (c << 6) | (u[i] & 0x3f);
	}
	if ((k == 3 && c < 0x800) || (k == 4 && (c < 0x10000 || c > 0x10ffff))) {
		*cp = u[0];
		return 1;
	}
	*cp = c;
	return k;
}

void utf8_put(char out[4], uint32_t cp, size_t *n)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		*n = 1;
	} else if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		*n = 2;
	} else if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		*n = 3;
	} else {
		out[0] = (char)(0xf0 | (cp >> 18));
		out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[3] = (char)(0x80 | (cp & 0x3f));
		*n = 4;
	}
}

size_t utf8_count(const char *s, size_t len)
{
	size_t n = 0;
	uint32_t cp;
	for (size_t i = 0; i < len; n++)
		i += utf8_next(s + i, len - i, &cp);
	return n;
}

size_t utf8_offset(const char *s, size_t len, size_t i)
{
	size_t off = 0;
	uint32_t cp;
	while (i-- > 0 && off < len)
		off += utf8_next(s + off, len - off, &cp);
	return off;
}

/*
 * Python's str.isspace(): ASCII \t-\r, \x1c-\x1f and space, U+0085, U+00A0,
 * U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000.
 */
size_t jpy_space_len(const char *s, size_t n)
{
	uint32_t cp;
	if (n == 0)
		return 0;
	size_t k = utf8_next(s, n, &cp);
	if (k == 1 && (unsigned char)s[0] >= 0x80)
		return 0;
	bool sp = (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
		  cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
		  cp == 0x205f || cp == 0x3000;
	return sp ? k : 0;
}

/* ---- truth, ==, < ---- */

bool jv_truthy(struct jv v)
{
	switch (v.kind) {
	case JV_BOOL: return v.u.b;
	case JV_INT: return v.u.i != 0;
	case JV_FLOAT: return v.u.f != 0;
	case JV_STR: return v.u.s->len > 0;
	case JV_LIST: return v.u.l->n > 0;
	case JV_DICT: return v.u.d->n > 0;
	case JV_UNDEF:
	case JV_NONE: return false;
	default: return true;
	}
}

static bool is_num(struct jv v)
{
	return v.kind == JV_INT || v.kind == JV_BOOL || v.kind == JV_FLOAT;
}

static double num_d(struct jv v)
{
	return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_BOOL ? (double)v.u.b : (double)v.u.i;
}

static int64_t num_i(struct jv v)
{
	return v.kind == JV_BOOL ? v.u.b : v.u.i;
}

static int equal_rec(struct jrender *r, struct jv a, struct jv b, unsigned depth)
{
	if (depth > JV_NEST_MAX)
		return jr_fail(r, -E2BIG, "values nested more than %d deep", JV_NEST_MAX);
	if (is_num(a) && is_num(b)) {
		if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
			return num_i(a) == num_i(b);
		return num_d(a) == num_d(b);
	}
	if (a.kind != b.kind)
		return 0;
	switch (a.kind) {
	case JV_UNDEF:
	case JV_NONE: return 1;
	case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
	case JV_LIST:
		if ((a.flags & JV_TUPLE) != (b.flags & JV_TUPLE) || a.u.l->n != b.u.l->n)
			return 0;
		for (size_t i = 0; i < a.u.l->n; i++) {
			int e = equal_rec(r, a.u.l->v[i], b.u.l->v[i], depth + 1);
			if (e <= 0)
				return e;
		}
		return 1;
	case JV_DICT:
		if (a.u.d->n != b.u.d->n)
			return 0;
		for (size_t i = 0; i < a.u.d->n; i++) {
			struct jv *o = jdict_find(b.u.d, a.u.d->k[i]);
			if (!o)
				return 0;
			int e = equal_rec(r, a.u.d->v[i], *o, depth + 1);
			if (e <= 0)
				return e;
		}
		return 1;
	case JV_NS: return a.u.d == b.u.d;
	case JV_MACRO: return a.u.m == b.u.m;
	case JV_LOOP: return a.u.lp == b.u.lp;
	case JV_FUNC: return a.u.i == b.u.i;
	default: return 0;
	}
}

int jv_equal(struct jrender *r, struct jv a, struct jv b)
{
	return equal_rec(r, a, b, 0);
}

static int less_rec(struct jrender *r, struct jv a, struct jv b, const char *op, bool *lt, unsigned depth)
{
	if (depth > JV_NEST_MAX)
		return jr_fail(r, -E2BIG, "values nested more than %d deep", JV_NEST_MAX);
	if (a.kind == JV_UNDEF)
		return jv_undef_fail(r, a);
	if (b.kind == JV_UNDEF)
		return jv_undef_fail(r, b);
	if (is_num(a) && is_num(b)) {
		*lt = a.kind != JV_FLOAT && b.kind != JV_FLOAT ? num_i(a) < num_i(b) : num_d(a) < num_d(b);
		return 0;
	}
	if (a.kind == JV_STR && b.kind == JV_STR) {
		size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
		int c = memcmp(a.u.s->p, b.u.s->p, n);
		*lt = c < 0 || (c == 0 && a.u.s->len < b.u.s->len);
		return 0;
	}
	if (a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JV_TUPLE) == (b.flags & JV_TUPLE)) {
		for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
			int e = equal_rec(r, a.u.l->v[i], b.u.l->v[i], depth + 1);
			if (e < 0)
				return -1;
			if (!e)
				return less_rec(r, a.u.l->v[i], b.u.l->v[i], op, lt, depth + 1);
		}
		*lt = a.u.l->n < b.u.l->n;
		return 0;
	}
	return jr_fail(r, -EINVAL, "'%s' not supported between instances of '%s' and '%s'", op, jv_type_name(a),
		       jv_type_name(b));
}

int jv_less(struct jrender *r, struct jv a, struct jv b, const char *op, bool *lt)
{
	return less_rec(r, a, b, op, lt, 0);
}

const char *jv_type_name(struct jv v)
{
	switch (v.kind) {
	case JV_UNDEF: return "Undefined";
	case JV_NONE: return "NoneType";
	case JV_BOOL: return "bool";
	case JV_INT: return "int";
	case JV_FLOAT: return "float";
	case JV_STR: return "str";
	case JV_LIST: return v.flags & JV_TUPLE ? "tuple" : "list";
	case JV_DICT: return "dict";
	case JV_NS: return "Namespace";
	case JV_MACRO: return "Macro";
	case JV_LOOP: return "LoopContext";
	default: return "builtin_function_or_method";
	}
}

int jv_undef_fail(struct jrender *r, struct jv v)
{
	if (v.flags == JV_UNDEF_UNSAFE) {
		struct jv o = { .kind = v.owner };
		return jr_fail(r, -EINVAL, "access to attribute '%s' of '%s' object is unsafe.", v.u.name, jv_type_name(o));
	}
	if (v.flags == JV_UNDEF_PARAM)
		return jr_fail(r, -EINVAL, "parameter '%s' was not provided", v.u.name);
	if (v.flags == JV_UNDEF_ATTR) {
		if (v.owner == JV_NONE)
			return jr_fail(r, -EINVAL, "'None' has no attribute '%s'", v.u.name);
		struct jv o = { .kind = v.owner };
		return jr_fail(r, -EINVAL, "'%s object' has no attribute '%s'", jv_type_name(o), v.u.name);
	}
	return jr_fail(r, -EINVAL, "'%s' is undefined", v.u.name ? v.u.name : "value");
}

/* ---- output buffers ---- */

int jbuf_put(struct jrender *r, struct jbuf *b, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	if (n > r->lim->output_bytes_max || b->len > r->lim->output_bytes_max - n)
		return jr_fail(r, -E2BIG, "the output exceeds %zu bytes", r->lim->output_bytes_max);
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return jr_fail(r, -ENOMEM, "out of memory");
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

int jbuf_putc(struct jrender *r, struct jbuf *b, char c)
{
	return jbuf_put(r, b, &c, 1);
}

struct jv jbuf_take(struct jrender *r, struct jbuf *b)
{
	struct jv v = jv_str(r, b->p ? b->p : "", b->len);
	free(b->p);
	*b = (struct jbuf){ 0 };
	return v;
}

/* ---- str() and repr() ---- */

void jv_float_repr(char *buf, size_t n, double f)
{
	if (isnan(f)) {
		snprintf(buf, n, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(buf, n, f < 0 ? "-inf" : "inf");
		return;
	}
	char e[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, f);
		if (strtod(e, NULL) == f)
			break;
	}
	/* e is [-]d[.ddd]e[+-]xx: split into sign, digits and exponent */
	const char *p = e;
	bool neg = *p == '-';
	p += neg;
	char digits[24];
	size_t nd = 0;
	for (; *p && *p != 'e'; p++)
		if (*p != '.' && nd < sizeof digits - 1)
			digits[nd++] = *p;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = 0;
	int exp = atoi(p + 1);
	size_t w = 0;
	if (neg)
		w += (size_t)snprintf(buf + w, n - w, "-");
	if (exp >= -4 && exp < 16) {
		if (exp < 0) {
			w += (size_t)snprintf(buf + w, n - w, "0.");
			for (int i = -1; i > exp && w < n - 1; i--)
				buf[w++] = '0';
			snprintf(buf + w, n - w, "%s", digits);
		} else {
			for (int i = 0; i <= exp && w < n - 1; i++)
				buf[w++] = (size_t)i < nd ? digits[i] : '0';
			buf[w < n ? w : n - 1] = 0;
			if ((size_t)exp + 1 < nd)
				snprintf(buf + w, n - w, ".%s", digits + exp + 1);
			else
				snprintf(buf + w, n - w, ".0");
		}
	} else {
		w += (size_t)snprintf(buf + w, n - w, "%c", digits[0]);
		if (nd > 1)
			w += (size_t)snprintf(buf + w, n - w, ".%s", digits + 1);
		snprintf(buf + w, n - w, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	}
}

/* Python's str.isprintable() for a non-ASCII code point, approximated: the
 * controls, separators and format characters chat text meets. */
static bool printable(uint32_t c)
{
	return !((c >= 0x80 && c <= 0xa0) || c == 0xad || c == 0x61c || c == 0x1680 || c == 0x180e ||
		 (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x2064) ||
		 (c >= 0x2066 && c <= 0x206f) || c == 0x3000 || (c >= 0xd800 && c <= 0xf8ff) || c == 0xfeff ||
		 (c >= 0xfff9 && c <= 0xfffb) || c >= 0xf0000 || (c >= 0xe0000 && c <= 0xe0fff));
}

static int write_str_repr(struct jrender *r, struct jbuf *b, const struct jstr *s)
{
	char q = memchr(s->p, '\'', s->len) && !memchr(s->p, '"', s->len) ? '"' : '\'';
	if (jbuf_putc(r, b, q))
		return -1;
	for (size_t i = 0; i < s->len;) {
		uint32_t c;
		size_t k = utf8_next(s->p + i, s->len - i, &c);
		char esc[16];
		int rc;
		if (c == (uint32_t)q || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			rc = jbuf_put(r, b, esc, 2);
		} else if (c == '\n' || c == '\r' || c == '\t') {
			rc = jbuf_put(r, b, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t", 2);
		} else if (c < 0x20 || c == 0x7f || (k == 1 && c >= 0x80)) {
			snprintf(esc, sizeof esc, "\\x%02x", c);
			rc = jbuf_put(r, b, esc, 4);
		} else if (c >= 0x80 && !printable(c)) {
			int w = snprintf(esc, sizeof esc, c <= 0xff ? "\\x%02x" : c <= 0xffff ? "\\u%04x" : "\\U%08x", c);
			rc = jbuf_put(r, b, esc, (size_t)w);
		} else {
			rc = jbuf_put(r, b, s->p + i, k);
		}
		if (rc)
			return -1;
		i += k;
	}
	return jbuf_putc(r, b, q);
}

static int write_scalar(struct jrender *r, struct jbuf *b, struct jv v)
{
	char num[48];
	switch (v.kind) {
	case JV_UNDEF: return 0;
	case JV_NONE: return jbuf_put(r, b, "None", 4);
	case JV_BOOL: return v.u.b ? jbuf_put(r, b, "True", 4) : jbuf_put(r, b, "False", 5);
	case JV_INT:
		snprintf(num, sizeof num, "%" PRId64, v.u.i);
		return jbuf_put(r, b, num, strlen(num));
	case JV_FLOAT:
		jv_float_repr(num, sizeof num, v.u.f);
		return jbuf_put(r, b, num, strlen(num));
	case JV_STR: return jbuf_put(r, b, v.u.s->p, v.u.s->len);
	case JV_MACRO:
		snprintf(num, sizeof num, "<Macro '%.32s'>", v.u.m->node->name);
		return jbuf_put(r, b, num, strlen(num));
	case JV_LOOP:
		snprintf(num, sizeof num, "<LoopContext %zu/%zu>", v.u.lp->index0 + 1, v.u.lp->length);
		return jbuf_put(r, b, num, strlen(num));
	default: return jbuf_put(r, b, "<built-in function>", 19);
	}
}

int jv_write_repr(struct jrender *r, struct jbuf *b, struct jv v, unsigned depth)
{
	if (depth > JV_NEST_MAX)
		return jr_fail(r, -E2BIG, "values nested more than %d deep", JV_NEST_MAX);
	if (jr_step(r))
		return -1;
	switch (v.kind) {
	case JV_STR: return write_str_repr(r, b, v.u.s);
	case JV_LIST: {
		bool t = v.flags & JV_TUPLE;
		if (jbuf_putc(r, b, t ? '(' : '['))
			return -1;
		for (size_t i = 0; i < v.u.l->n; i++)
			if ((i && jbuf_put(r, b, ", ", 2)) || jv_write_repr(r, b, v.u.l->v[i], depth + 1))
				return -1;
		if (t && v.u.l->n == 1 && jbuf_putc(r, b, ','))
			return -1;
		return jbuf_putc(r, b, t ? ')' : ']');
	}
	case JV_NS:
		if (jbuf_put(r, b, "<Namespace ", 11))
			return -1;
		/* fall through */
	case JV_DICT:
		if (jbuf_putc(r, b, '{'))
			return -1;
		for (size_t i = 0; i < v.u.d->n; i++)
			if ((i && jbuf_put(r, b, ", ", 2)) || jv_write_repr(r, b, v.u.d->k[i], depth + 1) ||
			    jbuf_put(r, b, ": ", 2) || jv_write_repr(r, b, v.u.d->v[i], depth + 1))
				return -1;
		if (jbuf_putc(r, b, '}'))
			return -1;
		return v.kind == JV_NS ? jbuf_putc(r, b, '>') : 0;
	case JV_UNDEF: return 0;
	default: return write_scalar(r, b, v);
	}
}

int jv_write_str(struct jrender *r, struct jbuf *b, struct jv v)
{
	if (v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_NS)
		return jv_write_repr(r, b, v, 0);
	return write_scalar(r, b, v);
}

struct jv jv_to_str(struct jrender *r, struct jv v)
{
	if (v.kind == JV_STR)
		return v;
	struct jbuf b = { 0 };
	if (jv_write_str(r, &b, v)) {
		free(b.p);
		return jv_undef("");
	}
	return jbuf_take(r, &b);
}

/* ---- JSON input ---- */

struct jv jv_from_json(struct jrender *r, const cJSON *j, unsigned depth)
{
	if (!j || cJSON_IsNull(j))
		return jv_none();
	if (depth > JV_NEST_MAX) {
		jr_fail(r, -E2BIG, "values nested more than %d deep", JV_NEST_MAX);
		return jv_undef("");
	}
	if (cJSON_IsBool(j))
		return jv_bool(cJSON_IsTrue(j));
	if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)
			return jv_int((int64_t)d);
		return jv_float(d);
	}
	if (cJSON_IsString(j))
		return jv_str(r, j->valuestring, strlen(j->valuestring));
	if (cJSON_IsArray(j)) {
		struct jlist *l = jlist_new(r, 0);
		if (!l)
			return jv_undef("");
		for (const cJSON *c = j->child; c; c = c->next)
			if (jlist_push(r, l, jv_from_json(r, c, depth + 1)) || r->rc)
				return jv_undef("");
		return jv_list(l, false);
	}
	if (cJSON_IsObject(j)) {
		struct jdict *d = jdict_new(r);
		if (!d)
			return jv_undef("");
		for (const cJSON *c = j->child; c; c = c->next) {
			struct jv k = jv_str(r, c->string ? c->string : "", c->string ? strlen(c->string) : 0);
			if (r->rc || jdict_set(r, d, k, jv_from_json(r, c, depth + 1)) || r->rc)
				return jv_undef("");
		}
		return jv_dict(d);
	}
	return jv_none();
}
