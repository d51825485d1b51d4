/*
 * jinja_methods — the Python methods templates call on values, as the
 * ImmutableSandboxedEnvironment exposes them:
 *   str:  strip lstrip rstrip split rsplit splitlines startswith endswith
 *         replace upper lower capitalize title find rfind count join
 *         isdigit isalpha isalnum isspace isupper islower
 *   dict: get items keys values copy
 *   list: index count
 *   loop: cycle, and the attributes index index0 revindex revindex0 first
 *         last length depth depth0 previtem nextitem
 * The methods that modify a list or dict (append, pop, update, ...) are
 * refused with the sandbox's "access to attribute ... is unsafe." error,
 * as in transformers. Case changes know ASCII, Latin-1, Latin Extended-A,
 * Greek and Cyrillic (one-to-one mappings only).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

enum jmethod_id {
	M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH, M_REPLACE, M_UPPER,
	M_LOWER, M_CAPITALIZE, M_TITLE, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_ISDIGIT, M_ISALPHA, M_ISALNUM,
	M_ISSPACE, M_ISUPPER, M_ISLOWER,
	M_GET, M_ITEMS, M_KEYS, M_VALUES, M_COPY,
	M_LINDEX, M_LCOUNT,
	M_CYCLE,
};

static const struct {
	const char *name;
	uint8_t kind;
	int id;
} methods[] = {
	{ "strip", JV_STR, M_STRIP }, { "lstrip", JV_STR, M_LSTRIP }, { "rstrip", JV_STR, M_RSTRIP },
	{ "split", JV_STR, M_SPLIT }, { "rsplit", JV_STR, M_RSPLIT }, { "splitlines", JV_STR, M_SPLITLINES },
	{ "startswith", JV_STR, M_STARTSWITH }, { "endswith", JV_STR, M_ENDSWITH },
	{ "replace", JV_STR, M_REPLACE }, { "upper", JV_STR, M_UPPER }, { "lower", JV_STR, M_LOWER },
	{ "capitalize", JV_STR, M_CAPITALIZE }, { "title", JV_STR, M_TITLE }, { "find", JV_STR, M_FIND },
	{ "rfind", JV_STR, M_RFIND }, { "count", JV_STR, M_COUNT }, { "join", JV_STR, M_JOIN },
	{ "isdigit", JV_STR, M_ISDIGIT }, { "isalpha", JV_STR, M_ISALPHA }, { "isalnum", JV_STR, M_ISALNUM },
	{ "isspace", JV_STR, M_ISSPACE }, { "isupper", JV_STR, M_ISUPPER }, { "islower", JV_STR, M_ISLOWER },
	{ "get", JV_DICT, M_GET }, { "items", JV_DICT, M_ITEMS }, { "keys", JV_DICT, M_KEYS },
	{ "values", JV_DICT, M_VALUES }, { "copy", JV_DICT, M_COPY },
	{ "index", JV_LIST, M_LINDEX }, { "count", JV_LIST, M_LCOUNT },
	{ "cycle", JV_LOOP, M_CYCLE },
};

/* Attributes that exist but that the immutable sandbox refuses. */
static const char *const unsafe_list[] = { "append", "extend", "insert", "pop", "remove", "reverse", "sort",
					   "clear", NULL };
static const char *const unsafe_dict[] = { "clear", "pop", "popitem", "setdefault", "update", NULL };

static bool in_list(const char *const *l, const char *name)
{
	for (; *l; l++)
		if (!strcmp(*l, name))
			return true;
	return false;
}

int jr_method_lookup(struct jrender *r, struct jv obj, const char *name, struct jv *out)
{
	if ((obj.kind == JV_LIST && in_list(unsafe_list, name)) || (obj.kind == JV_DICT && in_list(unsafe_dict, name))) {
		*out = (struct jv){ .kind = JV_UNDEF, .flags = JV_UNDEF_UNSAFE, .owner = obj.kind, .u.name = name };
		return 1;
	}
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		if (methods[i].kind == obj.kind && !strcmp(methods[i].name, name)) {
			struct jmethod *m = ja_alloc(&r->a, sizeof(*m));
			if (!m)
				return jr_oom(r);
			m->self = obj;
			m->id = methods[i].id;
			*out = (struct jv){ .kind = JV_METHOD, .u.me = m };
			return 1;
		}
	return 0;
}

int jr_loop_attr(struct jrender *r, const struct jloop *lp, const char *name, struct jv *out)
{
	size_t i = lp->index0, n = lp->length;
	if (!strcmp(name, "index"))
		*out = jv_int((int64_t)i + 1);
	else if (!strcmp(name, "index0"))
		*out = jv_int((int64_t)i);
	else if (!strcmp(name, "revindex"))
		*out = jv_int((int64_t)(n - i));
	else if (!strcmp(name, "revindex0"))
		*out = jv_int((int64_t)(n - i - 1));
	else if (!strcmp(name, "first"))
		*out = jv_bool(i == 0);
	else if (!strcmp(name, "last"))
		*out = jv_bool(i + 1 == n);
	else if (!strcmp(name, "length"))
		*out = jv_int((int64_t)n);
	else if (!strcmp(name, "depth"))
		*out = jv_int(lp->depth);
	else if (!strcmp(name, "depth0"))
		*out = jv_int(lp->depth - 1);
	else if (!strcmp(name, "previtem"))
		*out = i > 0 ? lp->items->v[i - 1] : jv_undef("there is no previous item");
	else if (!strcmp(name, "nextitem"))
		*out = i + 1 < n ? lp->items->v[i + 1] : jv_undef("there is no next item");
	else
		return jr_method_lookup(r, (struct jv){ .kind = JV_LOOP, .u.lp = (struct jloop *)lp }, name, out);
	return 1;
}

/* ---- string helpers ---- */

static bool in_chars(const struct jstr *chars, const char *p, size_t k)
{
	for (size_t i = 0; i < chars->len;) {
		uint32_t cp;
		size_t m = utf8_next(chars->p + i, chars->len - i, &cp);
		if (m == k && memcmp(chars->p + i, p, k) == 0)
			return true;
		i += m;
	}
	return false;
}

/* Bytes of the strippable character at s[0..n) (whitespace, or one of chars), or 0. */
static size_t strippable(const struct jstr *chars, const char *s, size_t n)
{
	if (!chars)
		return jpy_space_len(s, n);
	uint32_t cp;
	size_t k = utf8_next(s, n, &cp);
	return in_chars(chars, s, k) ? k : 0;
}

/* Length of the last character of s[0..n): the lead byte found backwards. */
static size_t last_char_len(const char *s, size_t n)
{
	size_t k = 1;
	while (k < 4 && k < n && ((unsigned char)s[n - k] & 0xc0) == 0x80)
		k++;
	uint32_t cp;
	return utf8_next(s + n - k, k, &cp) == k ? k : 1;
}

struct jv jpy_strip(struct jrender *r, const struct jstr *s, const struct jstr *chars, bool left, bool right)
{
	size_t b = 0, e = s->len, k;
	while (left && b < e && (k = strippable(chars, s->p + b, e - b)) > 0)
		b += k;
	while (right && e > b) {
		size_t lk = last_char_len(s->p + b, e - b);
		if (strippable(chars, s->p + e - lk, lk) != lk)
			break;
		e -= lk;
	}
	if (b == 0 && e == s->len)
		return jv_str_from(s);
	return jv_str(r, s->p + b, e - b);
}

struct jv jpy_replace(struct jrender *r, const struct jstr *s, const struct jstr *old, const struct jstr *new_,
		      int64_t count)
{
	struct jbuf b = { 0 };
	size_t i = 0;
	int64_t done = 0;
	if (old->len == 0) {	/* Python inserts new between every character and at both ends */
		while ((count < 0 || done < count) && i <= s->len) {
			if (jbuf_put(r, &b, new_->p, new_->len))
				goto fail;
			done++;
			if (i == s->len)
				break;
			uint32_t cp;
			size_t k = utf8_next(s->p + i, s->len - i, &cp);
			if (jbuf_put(r, &b, s->p + i, k))
				goto fail;
			i += k;
		}
	} else {
		while (count < 0 || done < count) {
			const char *hit = memmem(s->p + i, s->len - i, old->p, old->len);
			if (!hit)
				break;
			size_t at = (size_t)(hit - s->p);
			if (jbuf_put(r, &b, s->p + i, at - i) || jbuf_put(r, &b, new_->p, new_->len))
				goto fail;
			i = at + old->len;
			done++;
		}
	}
	if (jbuf_put(r, &b, s->p + i, s->len - i))
		goto fail;
	return jbuf_take(r, &b);
fail:
	free(b.p);
	return jv_undef("");
}

static bool ascii_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*
 * Simple case mappings of the scripts chat text mostly uses: ASCII, Latin-1,
 * Latin Extended-A, Greek and Cyrillic (one code point to one; no ß -> SS,
 * no final sigma). Other characters are cased (for title and capitalize)
 * when they are letters of these scripts, and are left as they are.
 */
static uint32_t to_upper(uint32_t c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 0xe0 && c <= 0xfe && c != 0xf7) || (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) ||
	    (c >= 0x430 && c <= 0x44f))
		return c - 0x20;
	if (c == 0xff)
		return 0x178;
	if (c >= 0x450 && c <= 0x45f)
		return c - 0x50;
	if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17f)
		return ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) ? (c & 1 ? c : c - 1) : (c & 1 ? c - 1 : c);
	return c;
}

static uint32_t to_lower(uint32_t c)
{
	if ((c >= 'A' && c <= 'Z') || (c >= 0xc0 && c <= 0xde && c != 0xd7) || (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) ||
	    (c >= 0x410 && c <= 0x42f))
		return c + 0x20;
	if (c == 0x178)
		return 0xff;
	if (c >= 0x400 && c <= 0x40f)
		return c + 0x50;
	if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17f)
		return ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) ? (c & 1 ? c + 1 : c) : (c & 1 ? c : c + 1);
	return c;
}

static bool cased(uint32_t c)
{
	return to_upper(c) != c || to_lower(c) != c || c == 0xdf || c == 0x138 || c == 0x149 || c == 0x17f ||
	       c == 0x3c2;
}

struct jv jpy_case(struct jrender *r, const struct jstr *s, int how)
{
	struct jbuf b = { 0 };
	bool prev_cased = false, word_start = true;
	for (size_t i = 0; i < s->len;) {
		uint32_t c;
		size_t k = utf8_next(s->p + i, s->len - i, &c);
		bool up;
		switch (how) {
		case 'u': up = true; break;
		case 'l': up = false; break;
		case 'c': up = i == 0; break;
		case 't': up = !prev_cased; break;	/* str.title() */
		default: up = word_start; break;	/* Jinja's title filter: words start after - ( { [ < and spaces */
		}
		uint32_t m = k == 1 && c >= 0x80 ? c : up ? to_upper(c) : to_lower(c);
		char enc[4];
		size_t w;
		utf8_put(enc, m, &w);
		if (m == c ? jbuf_put(r, &b, s->p + i, k) : jbuf_put(r, &b, enc, w)) {
			free(b.p);
			return jv_undef("");
		}
		prev_cased = cased(c);
		word_start = how == 'j' && (c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
					    jpy_space_len(s->p + i, s->len - i) > 0);
		i += k;
	}
	return jbuf_take(r, &b);
}

/* Python's str.split / rsplit; sep NULL splits at runs of whitespace. */
static int split(struct jrender *r, const struct jstr *s, const struct jstr *sep, int64_t maxsplit, bool from_right,
		 struct jv *out)
{
	struct jlist *l = jlist_new(r, 0);
	if (!l)
		return -1;
	if (sep && sep->len == 0)
		return jr_fail(r, -EINVAL, "empty separator");
	/* pieces as (begin, end) byte pairs, collected in order of discovery */
	size_t b = 0, e = s->len;
	int64_t splits = 0;
	struct jlist *pieces = l;
	if (!sep) {
		for (;;) {
			size_t k;
			if (!from_right) {
				while (b < e && (k = jpy_space_len(s->p + b, e - b)))
					b += k;
				if (b == e)
					break;
				if (maxsplit >= 0 && splits == maxsplit) {
					if (jlist_push(r, pieces, jv_str(r, s->p + b, e - b)))
						return -1;
					break;
				}
				size_t w = b;
				uint32_t cp;
				while (w < e && !jpy_space_len(s->p + w, e - w))
					w += utf8_next(s->p + w, e - w, &cp);
				if (jlist_push(r, pieces, jv_str(r, s->p + b, w - b)))
					return -1;
				b = w;
			} else {
				while (e > b) {
					size_t lk = last_char_len(s->p + b, e - b);
					if (jpy_space_len(s->p + e - lk, lk) != lk)
						break;
					e -= lk;
				}
				if (b == e)
					break;
				if (maxsplit >= 0 && splits == maxsplit) {
					if (jlist_push(r, pieces, jv_str(r, s->p + b, e - b)))
						return -1;
					break;
				}
				size_t w = e;
				while (w > b) {
					size_t lk = last_char_len(s->p + b, w - b);
					if (jpy_space_len(s->p + w - lk, lk) == lk)
						break;
					w -= lk;
				}
				if (jlist_push(r, pieces, jv_str(r, s->p + w, e - w)))
					return -1;
				e = w;
			}
			splits++;
		}
	} else {
		for (;;) {
			const char *hit = NULL;
			if (maxsplit < 0 || splits < maxsplit) {
				if (!from_right) {
					hit = memmem(s->p + b, e - b, sep->p, sep->len);
				} else {
					for (size_t q = e; q >= b + sep->len && !hit; q--)
						if (memcmp(s->p + q - sep->len, sep->p, sep->len) == 0)
							hit = s->p + q - sep->len;
				}
			}
			if (!hit) {
				if (jlist_push(r, pieces, jv_str(r, s->p + b, e - b)))
					return -1;
				break;
			}
			size_t at = (size_t)(hit - s->p);
			if (!from_right) {
				if (jlist_push(r, pieces, jv_str(r, s->p + b, at - b)))
					return -1;
				b = at + sep->len;
			} else {
				if (jlist_push(r, pieces, jv_str(r, s->p + at + sep->len, e - at - sep->len)))
					return -1;
				e = at;
			}
			splits++;
		}
	}
	if (r->rc)
		return -1;
	if (from_right)	/* found right to left */
		for (size_t i = 0; i < l->n / 2; i++) {
			struct jv t = l->v[i];
			l->v[i] = l->v[l->n - 1 - i];
			l->v[l->n - 1 - i] = t;
		}
	*out = jv_list(l, false);
	return 0;
}

size_t jpy_line_break(const char *s, size_t n)
{
	unsigned char c = (unsigned char)s[0];
	if (c == '\r')
		return n > 1 && s[1] == '\n' ? 2 : 1;
	if (c == '\n' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e))
		return 1;
	uint32_t cp;
	size_t k = utf8_next(s, n, &cp);
	return k > 1 && (cp == 0x85 || cp == 0x2028 || cp == 0x2029) ? k : 0;
}

static int splitlines(struct jrender *r, const struct jstr *s, struct jv *out)
{
	struct jlist *l = jlist_new(r, 0);
	if (!l)
		return -1;
	size_t b = 0;
	for (size_t i = 0; i < s->len;) {
		size_t k = jpy_line_break(s->p + i, s->len - i);
		if (!k) {
			i++;
			continue;
		}
		if (jlist_push(r, l, jv_str(r, s->p + b, i - b)))
			return -1;
		i += k;
		b = i;
	}
	if (b < s->len && jlist_push(r, l, jv_str(r, s->p + b, s->len - b)))
		return -1;
	*out = jv_list(l, false);
	return r->rc ? -1 : 0;
}

/* str.isdigit() and friends on ASCII; non-ASCII characters make them false. */
static bool str_is(const struct jstr *s, int id)
{
	bool any_cased = false;
	if (s->len == 0)
		return false;
	for (size_t i = 0; i < s->len; i++) {
		char c = s->p[i];
		bool d = c >= '0' && c <= '9', a = ascii_alpha(c);
		switch (id) {
		case M_ISDIGIT: if (!d) return false; break;
		case M_ISALPHA: if (!a) return false; break;
		case M_ISALNUM: if (!a && !d) return false; break;
		case M_ISSPACE: if (!jpy_space_len(s->p + i, s->len - i)) return false; break;
		case M_ISUPPER: if (c >= 'a' && c <= 'z') return false; any_cased = any_cased || a; break;
		default: if (c >= 'A' && c <= 'Z') return false; any_cased = any_cased || a; break;
		}
	}
	return id == M_ISUPPER || id == M_ISLOWER ? any_cased : true;
}

static int need_str(struct jrender *r, const char *method, struct jv v, const struct jstr **out)
{
	if (v.kind == JV_UNDEF)
		return jv_undef_fail(r, v);
	if (v.kind != JV_STR)
		return jr_fail(r, -EINVAL, "%s() argument must be str, not %s", method, jv_type_name(v));
	*out = v.u.s;
	return 0;
}

static int affix(struct jrender *r, const struct jstr *s, struct jv arg, bool end, struct jv *out)
{
	struct jv one[1] = { arg };
	const struct jv *cand = one;
	size_t n = 1;
	if (arg.kind == JV_LIST && (arg.flags & JV_TUPLE)) {
		cand = arg.u.l->v;
		n = arg.u.l->n;
	}
	for (size_t i = 0; i < n; i++) {
		const struct jstr *x;
		if (cand[i].kind != JV_STR)
			return jr_fail(r, -EINVAL, "%s first arg must be str or a tuple of str, not %s",
				       end ? "endswith" : "startswith", jv_type_name(cand[i]));
		x = cand[i].u.s;
		if (x->len <= s->len && memcmp(end ? s->p + s->len - x->len : s->p, x->p, x->len) == 0) {
			*out = jv_bool(true);
			return 0;
		}
	}
	*out = jv_bool(false);
	return 0;
}

static int str_method(struct jrender *r, int id, const struct jstr *s, const struct jv *a, size_t n, struct jv *out)
{
	const struct jstr *x = NULL, *y = NULL;
	static const char *const names[] = { "strip", "lstrip", "rstrip", "split", "rsplit" };
	switch (id) {
	case M_STRIP:
	case M_LSTRIP:
	case M_RSTRIP:
		if (n > 1)
			return jr_fail(r, -EINVAL, "%s expected at most 1 argument", names[id]);
		if (n && a[0].kind != JV_NONE && need_str(r, names[id], a[0], &x))
			return -1;
		*out = jpy_strip(r, s, x, id != M_RSTRIP, id != M_LSTRIP);
		return r->rc ? -1 : 0;
	case M_SPLIT:
	case M_RSPLIT: {
		if (n > 2)
			return jr_fail(r, -EINVAL, "%s expected at most 2 arguments", names[id]);
		if (n && a[0].kind != JV_NONE && need_str(r, names[id], a[0], &x))
			return -1;
		if (n > 1 && a[1].kind != JV_INT && a[1].kind != JV_BOOL)
			return jr_fail(r, -EINVAL, "maxsplit must be an integer");
		int64_t max = n > 1 ? (a[1].kind == JV_BOOL ? a[1].u.b : a[1].u.i) : -1;
		return split(r, s, x, max, id == M_RSPLIT, out);
	}
	case M_SPLITLINES: return splitlines(r, s, out);
	case M_STARTSWITH:
	case M_ENDSWITH:
		if (n != 1)
			return jr_fail(r, -EINVAL, "%s takes one argument here", id == M_ENDSWITH ? "endswith" : "startswith");
		return affix(r, s, a[0], id == M_ENDSWITH, out);
	case M_REPLACE: {
		if (n < 2 || n > 3 || need_str(r, "replace", a[0], &x) || need_str(r, "replace", a[1], &y))
			return r->rc ? -1 : jr_fail(r, -EINVAL, "replace expected 2 or 3 arguments");
		if (n == 3 && a[2].kind != JV_INT)
			return jr_fail(r, -EINVAL, "replace count must be an integer");
		*out = jpy_replace(r, s, x, y, n == 3 ? a[2].u.i : -1);
		return r->rc ? -1 : 0;
	}
	case M_UPPER: *out = jpy_case(r, s, 'u'); return r->rc ? -1 : 0;
	case M_LOWER: *out = jpy_case(r, s, 'l'); return r->rc ? -1 : 0;
	case M_CAPITALIZE: *out = jpy_case(r, s, 'c'); return r->rc ? -1 : 0;
	case M_TITLE: *out = jpy_case(r, s, 't'); return r->rc ? -1 : 0;
	case M_FIND:
	case M_RFIND:
	case M_COUNT: {
		if (n != 1 || need_str(r, "find", a[0], &x))
			return r->rc ? -1 : jr_fail(r, -EINVAL, "find/count take one argument here");
		int64_t found = -1, count = 0;
		for (size_t i = 0; i + x->len <= s->len;) {
			if (memcmp(s->p + i, x->p, x->len) == 0) {
				if (found < 0 || id == M_RFIND)
					found = (int64_t)utf8_count(s->p, i);
				count++;
				if (id == M_FIND)
					break;
				i += id == M_COUNT && x->len ? x->len : 1;
			} else {
				i++;
			}
		}
		*out = jv_int(id == M_COUNT ? count : found);
		return 0;
	}
	case M_JOIN: {
		struct jlist *items;
		struct jbuf b = { 0 };
		if (n != 1 || jr_iterate(r, a[0], &items))
			return r->rc ? -1 : jr_fail(r, -EINVAL, "join takes one argument");
		for (size_t i = 0; i < items->n; i++) {
			if (items->v[i].kind != JV_STR) {
				free(b.p);
				return jr_fail(r, -EINVAL, "sequence item %zu: expected str instance, %s found", i,
					       jv_type_name(items->v[i]));
			}
			if ((i && jbuf_put(r, &b, s->p, s->len)) || jbuf_put(r, &b, items->v[i].u.s->p, items->v[i].u.s->len)) {
				free(b.p);
				return -1;
			}
		}
		*out = jbuf_take(r, &b);
		return r->rc ? -1 : 0;
	}
	default:
		*out = jv_bool(str_is(s, id));
		return 0;
	}
}

int jr_method_call(struct jrender *r, const struct jmethod *m, const struct jv *args, size_t n_args,
		   const char *const *kw_names, const struct jv *kw_vals, size_t n_kw, struct jv *out)
{
	(void)kw_vals;
	if (n_kw)
		return jr_fail(r, -EINVAL, "this method takes no keyword argument '%s' here", kw_names[0]);
	struct jv self = m->self;
	if (self.kind == JV_STR)
		return str_method(r, m->id, self.u.s, args, n_args, out);
	if (self.kind == JV_LOOP) {	/* loop.cycle(a, b, ...) */
		if (n_args == 0)
			return jr_fail(r, -EINVAL, "no items for cycling given");
		*out = args[self.u.lp->index0 % n_args];
		return 0;
	}
	if (self.kind == JV_LIST) {
		if (n_args != 1)
			return jr_fail(r, -EINVAL, "%s takes one argument here", m->id == M_LINDEX ? "index" : "count");
		int64_t count = 0;
		for (size_t i = 0; i < self.u.l->n; i++) {
			int e = jv_equal(r, self.u.l->v[i], args[0]);
			if (e < 0)
				return -1;
			if (e && m->id == M_LINDEX) {
				*out = jv_int((int64_t)i);
				return 0;
			}
			count += e;
		}
		if (m->id == M_LINDEX)
			return jr_fail(r, -EINVAL, "value is not in list");
		*out = jv_int(count);
		return 0;
	}
	const struct jdict *d = self.u.d;
	if (m->id == M_GET) {
		if (n_args < 1 || n_args > 2)
			return jr_fail(r, -EINVAL, "get expected 1 or 2 arguments, got %zu", n_args);
		struct jv *v = jdict_find(d, args[0]);
		*out = v ? *v : n_args == 2 ? args[1] : jv_none();
		return 0;
	}
	if (n_args)
		return jr_fail(r, -EINVAL, "this dict method takes no arguments");
	if (m->id == M_COPY) {
		struct jdict *c = jdict_new(r);
		for (size_t i = 0; c && i < d->n; i++)
			if (jdict_set(r, c, d->k[i], d->v[i]))
				return -1;
		if (!c)
			return -1;
		*out = jv_dict(c);
		return 0;
	}
	struct jlist *l = jlist_new(r, d->n);
	if (!l)
		return -1;
	for (size_t i = 0; i < d->n; i++) {
		if (m->id == M_ITEMS) {
			struct jlist *pair = jlist_new(r, 2);
			if (!pair)
				return -1;
			pair->v[0] = d->k[i];
			pair->v[1] = d->v[i];
			pair->n = 2;
			l->v[l->n++] = jv_list(pair, true);
		} else {
			l->v[l->n++] = m->id == M_KEYS ? d->k[i] : d->v[i];
		}
	}
	*out = jv_list(l, false);
	return 0;
}
