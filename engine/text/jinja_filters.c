/*
 * jinja_filters — the filters of the subset, with Jinja2 3.1's
 * semantics (jinja2/filters.py) and Hugging Face's
 * tojson. Filters:
 *   abs attr capitalize count d default dictsort e escape first float
 *   indent int items join last length list lower map max min reject
 *   rejectattr replace reverse round safe select selectattr sort string
 *   sum title tojson trim unique upper
 * Anything else is refused when the template is parsed; the tests are in
 * jinja_tests.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

enum jfilter_id {
	F_ABS, F_ATTR, F_CAPITALIZE, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE, F_FIRST, F_FLOAT, F_INDENT,
	F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR,
	F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON,
	F_TRIM, F_UNIQUE, F_UPPER,
};

static const char *const filter_names[] = {
	"abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
	"int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
	"replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
	"trim", "unique", "upper",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

int jinja_filter_id(const char *name)
{
	for (size_t i = 0; i < COUNT(filter_names); i++)
		if (!strcmp(filter_names[i], name))
			return (int)i;
	return -1;
}

struct fargs {
	const struct jv *a;
	size_t n;
	const char *const *kn;
	const struct jv *kv;
	size_t nk;
};

/* Binds positional and keyword arguments to params; absent ones stay JV_UNDEF with given[i] false. */
static int bind(struct jrender *r, const char *fname, const struct fargs *fa, const char *const *params, size_t np,
		struct jv *vals, bool *given)
{
	if (fa->n > np)
		return jr_fail(r, -EINVAL, "%s() takes at most %zu argument(s) (%zu given)", fname, np, fa->n);
	for (size_t i = 0; i < np; i++) {
		given[i] = i < fa->n;
		vals[i] = i < fa->n ? fa->a[i] : jv_undef(params[i]);
	}
	for (size_t k = 0; k < fa->nk; k++) {
		size_t i = 0;
		while (i < np && strcmp(params[i], fa->kn[k]))
			i++;
		if (i == np)
			return jr_fail(r, -EINVAL, "%s() got an unexpected keyword argument '%s'", fname, fa->kn[k]);
		if (given[i])
			return jr_fail(r, -EINVAL, "%s() got multiple values for argument '%s'", fname, fa->kn[k]);
		given[i] = true;
		vals[i] = fa->kv[k];
	}
	return 0;
}

static int need_int(struct jrender *r, const char *what, struct jv v, int64_t *out)
{
	if (v.kind == JV_INT || v.kind == JV_BOOL) {
		*out = v.kind == JV_BOOL ? v.u.b : v.u.i;
		return 0;
	}
	return jr_fail(r, -EINVAL, "%s must be an integer, not %s", what, jv_type_name(v));
}

/* str(v) as a jstr (Undefined: ""). */
static const struct jstr *to_jstr(struct jrender *r, struct jv v)
{
	struct jv s = jv_to_str(r, v);
	return r->rc ? NULL : s.u.s;
}

/* Jinja's make_attrgetter: "a.b.0" looked up part by part with getitem, digits as ints. */
static int attr_path(struct jrender *r, struct jv item, const struct jstr *path, struct jv dflt, bool has_dflt,
		     struct jv *out)
{
	size_t b = 0;
	for (;;) {
		size_t e = b;
		while (e < path->len && path->p[e] != '.')
			e++;
		bool digits = e > b;
		for (size_t i = b; i < e; i++)
			digits = digits && path->p[i] >= '0' && path->p[i] <= '9';
		struct jv key = digits ? jv_int(strtoll(path->p + b, NULL, 10)) : jv_str(r, path->p + b, e - b);
		if (r->rc || jr_getitem(r, item, key, &item))
			return -1;
		if (has_dflt && item.kind == JV_UNDEF)
			item = dflt;
		if (e >= path->len)
			break;
		b = e + 1;
	}
	*out = item;
	return 0;
}

/* The key a sort, unique, min or max compares: the attribute, lower-cased unless case_sensitive. */
static int sort_key(struct jrender *r, struct jv item, const struct jstr *attr, bool case_sensitive, struct jv *out)
{
	if (attr && attr_path(r, item, attr, jv_none(), false, &item))
		return -1;
	if (!case_sensitive && item.kind == JV_STR)
		item = jpy_case(r, item.u.s, 'l');
	*out = item;
	return r->rc ? -1 : 0;
}

/* Stable insertion sort of items by keys (both arrays permuted together). */
static int sort_by(struct jrender *r, struct jv *items, struct jv *keys, size_t n, bool reverse)
{
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0; j--) {
			bool lt;
			if (jv_less(r, reverse ? keys[j - 1] : keys[j], reverse ? keys[j] : keys[j - 1], "<", &lt))
				return -1;
			if (!lt)
				break;
			struct jv t = items[j], tk = keys[j];
			items[j] = items[j - 1];
			keys[j] = keys[j - 1];
			items[j - 1] = t;
			keys[j - 1] = tk;
			if (jr_step(r))
				return -1;
		}
	return 0;
}

static int copy_items(struct jrender *r, struct jv v, struct jlist **out)
{
	struct jlist *src;
	if (jr_iterate(r, v, &src))
		return -1;
	struct jlist *l = jlist_new(r, src->n);
	if (!l)
		return -1;
	if (src->n)
		memcpy(l->v, src->v, src->n * sizeof(*l->v));
	l->n = src->n;
	*out = l;
	return 0;
}

static int f_sort(struct jrender *r, struct jv in, const struct fargs *fa, struct jv *out, int id)
{
	static const char *const p_sort[] = { "reverse", "case_sensitive", "attribute" };
	static const char *const p_uniq[] = { "case_sensitive", "attribute" };
	struct jv v[3];
	bool g[3];
	bool uniq = id == F_UNIQUE;
	if (bind(r, uniq ? "unique" : "sort", fa, uniq ? p_uniq : p_sort, uniq ? 2 : 3, v, g))
		return -1;
	/* sort(reverse, case_sensitive, attribute), unique(case_sensitive, attribute) */
	bool rev = !uniq && jv_truthy(v[0]), cs = jv_truthy(v[uniq ? 0 : 1]);
	size_t ai = uniq ? 1 : 2;
	const struct jstr *attr = NULL;
	if (g[ai] && v[ai].kind != JV_NONE && !(attr = to_jstr(r, v[ai])))
		return -1;
	struct jlist *l;
	if (copy_items(r, in, &l))
		return -1;
	struct jv *keys = ja_alloc(&r->a, (l->n + 1) * sizeof(*keys));
	if (!keys)
		return jr_oom(r);
	for (size_t i = 0; i < l->n; i++)
		if (sort_key(r, l->v[i], attr, cs, &keys[i]))
			return -1;
	if (!uniq) {
		if (sort_by(r, l->v, keys, l->n, rev))
			return -1;
	} else {
		size_t w = 0;
		for (size_t i = 0; i < l->n; i++) {
			bool seen = false;
			for (size_t k = 0; k < w && !seen; k++) {
				int e = jv_equal(r, keys[k], keys[i]);
				if (e < 0)
					return -1;
				seen = e;
			}
			if (!seen) {
				keys[w] = keys[i];
				l->v[w++] = l->v[i];
			}
		}
		l->n = w;
	}
	*out = jv_list(l, false);
	return 0;
}

static int f_minmax(struct jrender *r, struct jv in, const struct fargs *fa, struct jv *out, bool max)
{
	static const char *const p[] = { "case_sensitive", "attribute" };
	struct jv v[2];
	bool g[2];
	const struct jstr *attr = NULL;
	struct jlist *l;
	if (bind(r, max ? "max" : "min", fa, p, 2, v, g) || (g[1] && v[1].kind != JV_NONE && !(attr = to_jstr(r, v[1]))) ||
	    jr_iterate(r, in, &l))
		return -1;
	if (l->n == 0) {
		*out = jv_undef("No aggregated item, sequence was empty.");
		return 0;
	}
	struct jv best = l->v[0], bk;
	if (sort_key(r, best, attr, jv_truthy(v[0]), &bk))
		return -1;
	for (size_t i = 1; i < l->n; i++) {
		struct jv k;
		bool lt;
		if (sort_key(r, l->v[i], attr, jv_truthy(v[0]), &k) || jv_less(r, max ? bk : k, max ? k : bk, "<", &lt))
			return -1;
		if (lt) {
			best = l->v[i];
			bk = k;
		}
	}
	*out = best;
	return 0;
}

/* select / reject / selectattr / rejectattr */
static int f_select(struct jrender *r, struct jscope *s, struct jv in, const struct fargs *fa, struct jv *out,
		    bool attr_first, bool keep_if)
{
	if (fa->nk)
		return jr_fail(r, -EINVAL, "select filters take no keyword arguments here");
	size_t off = 0;
	const struct jstr *attr = NULL;
	if (attr_first) {
		if (fa->n < 1)
			return jr_fail(r, -EINVAL, "Missing parameter for attribute name");
		if (!(attr = to_jstr(r, fa->a[0])))
			return -1;
		off = 1;
	}
	int test = -1;
	if (fa->n > off) {
		if (fa->a[off].kind != JV_STR)
			return jr_fail(r, -EINVAL, "the test name must be a string");
		if ((test = jinja_test_id(fa->a[off].u.s->p)) < 0)
			return jr_fail(r, -EINVAL, "No test named '%s'.", fa->a[off].u.s->p);
		off++;
	}
	struct jlist *src, *l = jlist_new(r, 0);
	if (!l || jr_iterate(r, in, &src))
		return -1;
	for (size_t i = 0; i < src->n; i++) {
		struct jv x = src->v[i];
		bool t;
		if (attr && attr_path(r, x, attr, jv_none(), false, &x))
			return -1;
		if (test >= 0) {
			if (jr_test(r, s, test, x, fa->a + off, fa->n - off, &t))
				return -1;
		} else {
			t = jv_truthy(x);
		}
		if (t == keep_if && jlist_push(r, l, src->v[i]))
			return -1;
	}
	*out = jv_list(l, false);
	return 0;
}

static int f_map(struct jrender *r, struct jscope *s, struct jv in, const struct fargs *fa, struct jv *out)
{
	const struct jstr *attr = NULL;
	struct jv dflt = jv_none();
	bool has_dflt = false;
	int filter = -1;
	if (fa->n == 0) {
		for (size_t k = 0; k < fa->nk; k++) {
			if (!strcmp(fa->kn[k], "attribute") && !(attr = to_jstr(r, fa->kv[k])))
				return -1;
			else if (!strcmp(fa->kn[k], "default"))
				dflt = fa->kv[k], has_dflt = true;
			else if (strcmp(fa->kn[k], "attribute"))
				return jr_fail(r, -EINVAL, "Unexpected keyword argument '%s'", fa->kn[k]);
		}
		if (!attr)
			return jr_fail(r, -EINVAL, "map requires a filter argument");
	} else {
		if (fa->a[0].kind != JV_STR || (filter = jinja_filter_id(fa->a[0].u.s->p)) < 0)
			return jr_fail(r, -EINVAL, "No filter named '%s'.", fa->a[0].kind == JV_STR ? fa->a[0].u.s->p : "?");
	}
	struct jlist *src, *l = jlist_new(r, 0);
	if (!l || jr_iterate(r, in, &src))
		return -1;
	for (size_t i = 0; i < src->n; i++) {
		struct jv x;
		if (attr ? attr_path(r, src->v[i], attr, dflt, has_dflt, &x)
			 : jr_filter(r, s, filter, src->v[i], fa->a + 1, fa->n - 1, fa->kn, fa->kv, fa->nk, &x))
			return -1;
		if (jlist_push(r, l, x))
			return -1;
	}
	*out = jv_list(l, false);
	return 0;
}

static int f_tojson(struct jrender *r, struct jv in, const struct fargs *fa, struct jv *out)
{
	static const char *const p[] = { "ensure_ascii", "indent", "separators", "sort_keys" };
	struct jv v[4];
	bool g[4];
	if (bind(r, "tojson", fa, p, 4, v, g))
		return -1;
	struct jtojson o = { .indent = -1, .ensure_ascii = g[0] && jv_truthy(v[0]), .sort_keys = g[3] && jv_truthy(v[3]) };
	if (g[1] && v[1].kind == JV_STR) {
		o.indent_str = v[1].u.s;
	} else if (g[1] && v[1].kind != JV_NONE) {
		int64_t n = 0;
		if (need_int(r, "indent", v[1], &n))
			return -1;
		o.indent = n < 0 ? 0 : n > 64 ? 64 : (int)n;
	}
	if (g[2] && v[2].kind != JV_NONE) {
		struct jv sp = v[2];
		if (sp.kind != JV_LIST || sp.u.l->n != 2 || sp.u.l->v[0].kind != JV_STR || sp.u.l->v[1].kind != JV_STR)
			return jr_fail(r, -EINVAL, "separators must be a pair of strings");
		o.item_sep = sp.u.l->v[0].u.s;
		o.key_sep = sp.u.l->v[1].u.s;
	}
	struct jbuf b = { 0 };
	if (jv_tojson(r, &b, in, &o)) {
		free(b.p);
		return -1;
	}
	*out = jbuf_take(r, &b);
	return r->rc ? -1 : 0;
}

/* Python's int() on a string: optional sign, digits with single underscores, surrounding whitespace. */
static bool parse_int(const struct jstr *s, int base, int64_t *out)
{
	size_t b = 0, e = s->len, k;
	while (b < e && (k = jpy_space_len(s->p + b, e - b)))
		b += k;
	while (e > b && (s->p[e - 1] == ' ' || (s->p[e - 1] >= '\t' && s->p[e - 1] <= '\r')))
		e--;
	bool neg = b < e && s->p[b] == '-';
	b += b < e && (s->p[b] == '-' || s->p[b] == '+');
	if (e - b > 2 && s->p[b] == '0' && (((s->p[b + 1] | 0x20) == 'x' && base == 16) ||
					    ((s->p[b + 1] | 0x20) == 'o' && base == 8) || ((s->p[b + 1] | 0x20) == 'b' && base == 2)))
		b += 2 + (s->p[b + 2] == '_');
	if (b == e)
		return false;
	uint64_t v = 0;
	bool prev_digit = false;
	for (size_t i = b; i < e; i++) {
		char c = s->p[i];
		if (c == '_' && prev_digit && i + 1 < e) {
			prev_digit = false;
			continue;
		}
		int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
		if (d >= base || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
			return false;
		v = v * (uint64_t)base + (uint64_t)d;
		prev_digit = true;
	}
	if (!prev_digit || v > (uint64_t)INT64_MAX + neg)
		return false;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return true;
}

static bool parse_float(const struct jstr *s, double *out)
{
	char *end;
	const char *p = s->p;
	while (*p && jpy_space_len(p, s->len - (size_t)(p - s->p)))
		p += jpy_space_len(p, s->len - (size_t)(p - s->p));
	if (!*p || strchr(p, '_') || !strncmp(p, "0x", 2) || !strncmp(p, "0X", 2))
		return false;
	double d = strtod(p, &end);
	while (*end == ' ' || (*end >= '\t' && *end <= '\r'))
		end++;
	if (end == p || *end)
		return false;
	*out = d;
	return true;
}

static int f_number(struct jrender *r, struct jv in, const struct fargs *fa, struct jv *out, bool is_int)
{
	static const char *const p_int[] = { "default", "base" }, *const p_float[] = { "default" };
	struct jv v[2];
	bool g[2];
	if (bind(r, is_int ? "int" : "float", fa, is_int ? p_int : p_float, is_int ? 2 : 1, v, g))
		return -1;
	struct jv dflt = g[0] ? v[0] : is_int ? jv_int(0) : jv_float(0);
	int64_t base = 10;
	if (is_int && g[1] && need_int(r, "base", v[1], &base))
		return -1;
	if (base < 2 || base > 36)
		return jr_fail(r, -EINVAL, "int() base must be >= 2 and <= 36");
	double d;
	int64_t i;
	*out = dflt;
	if (in.kind == JV_INT || in.kind == JV_BOOL)
		*out = is_int ? jv_int(in.kind == JV_BOOL ? in.u.b : in.u.i) : jv_float(in.kind == JV_BOOL ? in.u.b : (double)in.u.i);
	else if (in.kind == JV_FLOAT)
		*out = !is_int ? in : isfinite(in.u.f) && fabs(in.u.f) < 9.2e18 ? jv_int((int64_t)in.u.f) : dflt;
	else if (in.kind == JV_STR && is_int && parse_int(in.u.s, (int)base, &i))
		*out = jv_int(i);
	else if (in.kind == JV_STR && parse_float(in.u.s, &d))
		*out = !is_int ? jv_float(d) : isfinite(d) && fabs(d) < 9.2e18 ? jv_int((int64_t)d) : dflt;
	return 0;
}

static int f_indent(struct jrender *r, struct jv in, const struct fargs *fa, struct jv *out)
{
	static const char *const p[] = { "width", "first", "blank" };
	struct jv v[3];
	bool g[3];
	const struct jstr *s = bind(r, "indent", fa, p, 3, v, g) ? NULL : to_jstr(r, in), *ind = NULL;
	if (!s)
		return -1;
	int64_t width = 4;
	if (g[0] && v[0].kind == JV_STR)
		ind = v[0].u.s;
	else if (g[0] && need_int(r, "width", v[0], &width))
		return -1;
	struct jv pad = ind ? jv_str_from(ind) : jv_str(r, "", 0);
	if (!ind && width > 0 && r->rc == 0) {
		struct jbuf pb = { 0 };
		for (int64_t i = 0; i < width && i < 4096; i++)
			if (jbuf_putc(r, &pb, ' '))
				return -1;
		pad = jbuf_take(r, &pb);
	}
	if (r->rc)
		return -1;
	/* Jinja: lines = (s + "\n").splitlines(); the first as it is, the others padded unless empty
	 * (blank: padded too), joined with "\n"; first: the pad in front of it all */
	struct jbuf b = { 0 };
	if (g[1] && jv_truthy(v[1]) && jbuf_put(r, &b, pad.u.s->p, pad.u.s->len))
		goto fail;
	for (size_t i = 0, line = 0; i <= s->len; line++) {
		size_t e = i, k = 0;
		while (e < s->len && !(k = jpy_line_break(s->p + e, s->len - e)))
			e++;
		if (line && (jbuf_putc(r, &b, '\n') ||
			     ((e > i || (g[2] && jv_truthy(v[2]))) && jbuf_put(r, &b, pad.u.s->p, pad.u.s->len))))
			goto fail;
		if (jbuf_put(r, &b, s->p + i, e - i))
			goto fail;
		if (e >= s->len)	/* the appended "\n" ends the last line */
			break;
		i = e + k;
	}
	*out = jbuf_take(r, &b);
	return r->rc ? -1 : 0;
fail:
	free(b.p);
	return -1;
}

static int f_escape(struct jrender *r, struct jv in, struct jv *out)
{
	const struct jstr *s = to_jstr(r, in);
	struct jbuf b = { 0 };
	if (!s)
		return -1;
	for (size_t i = 0; i < s->len; i++) {
		char c = s->p[i];
		const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;"
			      : c == '\'' ? "&#39;" : NULL;
		if (e ? jbuf_put(r, &b, e, strlen(e)) : jbuf_putc(r, &b, c)) {
			free(b.p);
			return -1;
		}
	}
	*out = jbuf_take(r, &b);
	return r->rc ? -1 : 0;
}

static int f_round(struct jrender *r, struct jv in, const struct fargs *fa, struct jv *out)
{
	static const char *const p[] = { "precision", "method" };
	struct jv v[2];
	bool g[2];
	int64_t prec = 0;
	if (bind(r, "round", fa, p, 2, v, g) || (g[0] && need_int(r, "precision", v[0], &prec)))
		return -1;
	const char *method = g[1] && v[1].kind == JV_STR ? v[1].u.s->p : "common";
	if (strcmp(method, "common") && strcmp(method, "floor") && strcmp(method, "ceil"))
		return jr_fail(r, -EINVAL, "method must be common, ceil or floor");
	if (in.kind != JV_INT && in.kind != JV_BOOL && in.kind != JV_FLOAT)
		return jr_fail(r, -EINVAL, "type %s doesn't define __round__ method", jv_type_name(in));
	double x = in.kind == JV_FLOAT ? in.u.f : (double)(in.kind == JV_BOOL ? in.u.b : in.u.i);
	if (!strcmp(method, "common")) {
		if (in.kind != JV_FLOAT && prec >= 0) {
			*out = jv_int(in.kind == JV_BOOL ? in.u.b : in.u.i);
			return 0;
		}
		char buf[400];
		snprintf(buf, sizeof buf, "%.*f", (int)(prec < 0 ? 0 : prec > 300 ? 300 : prec), x);
		*out = jv_float(strtod(buf, NULL));
		return 0;
	}
	double scale = pow(10, (double)prec);
	*out = jv_float((method[0] == 'f' ? floor(x * scale) : ceil(x * scale)) / scale);
	return 0;
}

static int f_dictsort(struct jrender *r, struct jv in, const struct fargs *fa, struct jv *out)
{
	static const char *const p[] = { "case_sensitive", "by", "reverse" };
	struct jv v[3];
	bool g[3];
	if (bind(r, "dictsort", fa, p, 3, v, g))
		return -1;
	if (in.kind != JV_DICT)
		return jr_fail(r, -EINVAL, "dictsort needs a mapping");
	bool by_value = g[1] && v[1].kind == JV_STR && !strcmp(v[1].u.s->p, "value");
	size_t n = in.u.d->n;
	struct jlist *l = jlist_new(r, n);
	struct jv *keys = l ? ja_alloc(&r->a, (n + 1) * sizeof(*keys)) : NULL;
	if (!keys)
		return jr_oom(r);
	for (size_t i = 0; i < n; i++) {
		struct jlist *pair = jlist_new(r, 2);
		if (!pair)
			return -1;
		pair->v[0] = in.u.d->k[i];
		pair->v[1] = in.u.d->v[i];
		pair->n = 2;
		l->v[l->n++] = jv_list(pair, true);
		if (sort_key(r, pair->v[by_value], NULL, jv_truthy(v[0]), &keys[i]))
			return -1;
	}
	if (sort_by(r, l->v, keys, n, jv_truthy(v[2])))
		return -1;
	*out = jv_list(l, false);
	return 0;
}

/* The filters whose input is used as a string. */
static int f_text(struct jrender *r, int id, struct jv in, const struct fargs *fa, struct jv *out)
{
	const struct jstr *s = to_jstr(r, in);
	if (!s)
		return -1;
	struct jv v[3];
	bool g[3];
	switch (id) {
	case F_LOWER: *out = jpy_case(r, s, 'l'); break;
	case F_UPPER: *out = jpy_case(r, s, 'u'); break;
	case F_CAPITALIZE: *out = jpy_case(r, s, 'c'); break;
	case F_TITLE: *out = jpy_case(r, s, 'j'); break;
	case F_TRIM: {
		static const char *const p[] = { "chars" };
		const struct jstr *chars = NULL;
		if (bind(r, "trim", fa, p, 1, v, g) || (g[0] && v[0].kind != JV_NONE && !(chars = to_jstr(r, v[0]))))
			return -1;
		*out = jpy_strip(r, s, chars, true, true);
		break;
	}
	case F_REPLACE: {
		static const char *const p[] = { "old", "new", "count" };
		int64_t count = -1;
		const struct jstr *a, *b;
		if (bind(r, "replace", fa, p, 3, v, g))
			return -1;
		if (!g[0] || !g[1])
			return jr_fail(r, -EINVAL, "replace() needs old and new");
		if ((g[2] && v[2].kind != JV_NONE && need_int(r, "count", v[2], &count)) || !(a = to_jstr(r, v[0])) ||
		    !(b = to_jstr(r, v[1])))
			return -1;
		*out = jpy_replace(r, s, a, b, count);
		break;
	}
	default: *out = jv_str_from(s); break;	/* string, safe */
	}
	return r->rc ? -1 : 0;
}

int jr_filter(struct jrender *r, struct jscope *s, int id, struct jv in, const struct jv *args, size_t n_args,
	      const char *const *kw_names, const struct jv *kw_vals, size_t n_kw, struct jv *out)
{
	struct fargs fa = { args, n_args, kw_names, kw_vals, n_kw };
	struct jv v[3];
	bool g[3];
	struct jlist *l;
	if (jr_step(r))
		return -1;
	switch (id) {
	case F_D:
	case F_DEFAULT: {
		static const char *const p[] = { "default_value", "boolean" };
		if (bind(r, "default", &fa, p, 2, v, g))
			return -1;
		bool use = in.kind == JV_UNDEF || (g[1] && jv_truthy(v[1]) && !jv_truthy(in));
		*out = use ? (g[0] ? v[0] : jv_str(r, "", 0)) : in;
		return r->rc ? -1 : 0;
	}
	case F_LENGTH:
	case F_COUNT:
		switch (in.kind) {
		case JV_UNDEF: *out = jv_int(0); return 0;
		case JV_STR: *out = jv_int((int64_t)utf8_count(in.u.s->p, in.u.s->len)); return 0;
		case JV_LIST: *out = jv_int((int64_t)in.u.l->n); return 0;
		case JV_DICT: *out = jv_int((int64_t)in.u.d->n); return 0;
		default: return jr_fail(r, -EINVAL, "object of type '%s' has no len()", jv_type_name(in));
		}
	case F_FIRST:
	case F_LAST:
		if (jr_iterate(r, in, &l))
			return -1;
		*out = l->n ? l->v[id == F_FIRST ? 0 : l->n - 1]
			    : jv_undef(id == F_FIRST ? "No first item, sequence was empty." : "No last item, sequence was empty.");
		return 0;
	case F_LIST:
		if (copy_items(r, in, &l))
			return -1;
		*out = jv_list(l, false);
		return 0;
	case F_REVERSE:
		if (in.kind == JV_STR)
			return jr_slice(r, in, jv_none(), jv_none(), jv_int(-1), out);
		if (copy_items(r, in, &l))
			return -1;
		for (size_t i = 0; i < l->n / 2; i++) {
			struct jv t = l->v[i];
			l->v[i] = l->v[l->n - 1 - i];
			l->v[l->n - 1 - i] = t;
		}
		*out = jv_list(l, false);
		return 0;
	case F_ITEMS: {
		if (in.kind == JV_UNDEF) {
			*out = jv_list(jlist_new(r, 0), false);
			return r->rc ? -1 : 0;
		}
		if (in.kind != JV_DICT)
			return jr_fail(r, -EINVAL, "Can only get item pairs from a mapping.");
		struct jv bound;
		if (jr_method_lookup(r, in, "items", &bound) < 0)
			return -1;
		return jr_method_call(r, bound.u.me, NULL, 0, NULL, NULL, 0, out);
	}
	case F_JOIN: {
		static const char *const p[] = { "d", "attribute" };
		const struct jstr *sep = NULL, *attr = NULL;
		if (bind(r, "join", &fa, p, 2, v, g) || (g[0] && !(sep = to_jstr(r, v[0]))) ||
		    (g[1] && v[1].kind != JV_NONE && !(attr = to_jstr(r, v[1]))) || jr_iterate(r, in, &l))
			return -1;
		struct jbuf b = { 0 };
		for (size_t i = 0; i < l->n; i++) {
			struct jv x = l->v[i];
			if ((attr && attr_path(r, x, attr, jv_none(), false, &x)) || (i && sep && jbuf_put(r, &b, sep->p, sep->len)) ||
			    jv_write_str(r, &b, x)) {
				free(b.p);
				return -1;
			}
		}
		*out = jbuf_take(r, &b);
		return r->rc ? -1 : 0;
	}
	case F_TOJSON: return f_tojson(r, in, &fa, out);
	case F_INT: return f_number(r, in, &fa, out, true);
	case F_FLOAT: return f_number(r, in, &fa, out, false);
	case F_ABS:
		if (in.kind == JV_FLOAT)
			*out = jv_float(fabs(in.u.f));
		else if (in.kind == JV_INT || in.kind == JV_BOOL)
			*out = jv_int(in.kind == JV_BOOL ? in.u.b : in.u.i < 0 ? (in.u.i == INT64_MIN ? in.u.i : -in.u.i) : in.u.i);
		else
			return jr_fail(r, -EINVAL, "bad operand type for abs(): '%s'", jv_type_name(in));
		return 0;
	case F_ROUND: return f_round(r, in, &fa, out);
	case F_ATTR: {
		static const char *const p[] = { "name" };
		if (bind(r, "attr", &fa, p, 1, v, g))
			return -1;
		if (!g[0] || v[0].kind != JV_STR)
			return jr_fail(r, -EINVAL, "attr() needs an attribute name");
		/* Jinja's attr() is getattr only: a dict's keys are not attributes */
		if (in.kind == JV_UNDEF)
			return jv_undef_fail(r, in);
		const char *name = v[0].u.s->p;
		int m = jr_method_lookup(r, in, name, out);
		if (!m && in.kind == JV_LOOP)
			m = jr_loop_attr(r, in.u.lp, name, out);
		if (m)
			return m < 0 ? -1 : 0;
		struct jv *nv = in.kind == JV_NS ? jdict_get(in.u.d, name, v[0].u.s->len) : NULL;
		*out = nv ? *nv : (struct jv){ .kind = JV_UNDEF, .flags = JV_UNDEF_ATTR, .owner = in.kind, .u.name = name };
		return 0;
	}
	case F_SORT:
	case F_UNIQUE: return f_sort(r, in, &fa, out, id);
	case F_MIN:
	case F_MAX: return f_minmax(r, in, &fa, out, id == F_MAX);
	case F_SUM: {
		static const char *const p[] = { "attribute", "start" };
		const struct jstr *attr = NULL;
		if (bind(r, "sum", &fa, p, 2, v, g) || (g[0] && v[0].kind != JV_NONE && !(attr = to_jstr(r, v[0]))) ||
		    jr_iterate(r, in, &l))
			return -1;
		struct jv acc = g[1] ? v[1] : jv_int(0);
		for (size_t i = 0; i < l->n; i++) {
			struct jv x = l->v[i];
			if ((attr && attr_path(r, x, attr, jv_none(), false, &x)) || jr_binop(r, '+', acc, x, &acc))
				return -1;
		}
		*out = acc;
		return 0;
	}
	case F_SELECT: return f_select(r, s, in, &fa, out, false, true);
	case F_REJECT: return f_select(r, s, in, &fa, out, false, false);
	case F_SELECTATTR: return f_select(r, s, in, &fa, out, true, true);
	case F_REJECTATTR: return f_select(r, s, in, &fa, out, true, false);
	case F_MAP: return f_map(r, s, in, &fa, out);
	case F_DICTSORT: return f_dictsort(r, in, &fa, out);
	case F_INDENT: return f_indent(r, in, &fa, out);
	case F_E:
	case F_ESCAPE: return f_escape(r, in, out);
	default:
		if (id != F_TRIM && id != F_REPLACE && (n_args || n_kw))
			return jr_fail(r, -EINVAL, "%s() takes no arguments", filter_names[id]);
		return f_text(r, id, in, &fa, out);
	}
}
