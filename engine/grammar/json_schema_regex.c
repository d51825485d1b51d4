/*
 * json_schema_regex — the code-point sets of json_schema's grammars and the
 * translator of a string "pattern" (ECMAScript syntax: anchors, literals,
 * classes and escapes, ".", groups, alternation, quantifiers) to GBNF.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "engine/grammar/json_schema_internal.h"



void js_cset_add(struct cset *s, uint32_t lo, uint32_t hi)
{
	if (s->rc)
		return;
	if (array_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) {
		s->rc = -ENOMEM;
		return;
	}
	s->r[s->n][0] = lo;
	s->r[s->n][1] = hi;
	s->n++;
}

static int range_cmp(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void cset_norm(struct cset *s)
{
	if (!s->n)
		return;
	qsort(s->r, s->n, sizeof *s->r, range_cmp);
	size_t k = 0;
	for (size_t i = 1; i < s->n; i++) {
		if (s->r[i][0] <= s->r[k][1] + 1) {
			if (s->r[i][1] > s->r[k][1])
				s->r[k][1] = s->r[i][1];
		} else {
			s->r[++k][0] = s->r[i][0];
			s->r[k][1] = s->r[i][1];
		}
	}
	s->n = k + 1;
}

/* Replaces s by its complement over [0, CP_MAX]. */
void js_cset_negate(struct cset *s)
{
	cset_norm(s);
	struct cset t = { 0 };
	uint32_t next = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (s->r[i][0] > next)
			js_cset_add(&t, next, s->r[i][0] - 1);
		next = s->r[i][1] + 1;
	}
	if (next <= CP_MAX)
		js_cset_add(&t, next, CP_MAX);
	free(s->r);
	if (t.rc)
		t.n = 0;
	*s = t;
}

static void cset_union(struct cset *s, const struct cset *t)
{
	for (size_t i = 0; i < t->n; i++)
		js_cset_add(s, t->r[i][0], t->r[i][1]);
	if (t->rc)
		s->rc = t->rc;
}

static bool cset_has(const struct cset *s, uint32_t c)
{
	for (size_t i = 0; i < s->n; i++)
		if (c >= s->r[i][0] && c <= s->r[i][1])
			return true;
	return false;
}

void js_put_class_char(struct strbuf *b, uint32_t c)
{
	if (c == ']' || c == '\\' || c == '^' || c == '-' || c == '[')
		strbuf_printf(b, "\\%c", (char)c);
	else if (c >= 0x20 && c < 0x7f)
		strbuf_printf(b, "%c", (char)c);
	else if (c < 0x80)
		strbuf_printf(b, "\\x%02x", c);
	else if (c <= 0xffff)
		strbuf_printf(b, "\\u%04x", c);
	else
		strbuf_printf(b, "\\U%08x", c);
}

void js_put_utf8(struct strbuf *b, uint32_t c)
{
	char u[4];
	size_t n;
	if (c < 0x80) {
		u[0] = (char)c;
		n = 1;
	} else if (c < 0x800) {
		u[0] = (char)(0xc0 | c >> 6);
		u[1] = (char)(0x80 | (c & 0x3f));
		n = 2;
	} else if (c < 0x10000) {
		u[0] = (char)(0xe0 | c >> 12);
		u[1] = (char)(0x80 | (c >> 6 & 0x3f));
		u[2] = (char)(0x80 | (c & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | c >> 18);
		u[1] = (char)(0x80 | (c >> 12 & 0x3f));
		u[2] = (char)(0x80 | (c >> 6 & 0x3f));
		u[3] = (char)(0x80 | (c & 0x3f));
		n = 4;
	}
	strbuf_put(b, u, n);
}

/*
 * GBNF for one character of a JSON string's contents whose decoded value is
 * in s: the raw character where JSON allows it, the escape for '"', '\' and
 * control characters. NULL when s is empty.
 */
static const char *cset_gbnf(struct gen *g, struct cset *s)
{
	cset_norm(s);
	if (s->rc) {
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	struct cset raw = { 0 };
	cset_union(&raw, s);
	cset_norm(&raw);
	/* raw = s minus controls, '"' and '\'. */
	struct cset cut = { 0 };
	js_cset_add(&cut, 0, 0x1f);
	js_cset_add(&cut, '"', '"');
	js_cset_add(&cut, '\\', '\\');
	js_cset_negate(&cut);
	struct cset both = { 0 };
	for (size_t i = 0; i < raw.n; i++)
		for (size_t j = 0; j < cut.n; j++) {
			uint32_t lo = raw.r[i][0] > cut.r[j][0] ? raw.r[i][0] : cut.r[j][0];
			uint32_t hi = raw.r[i][1] < cut.r[j][1] ? raw.r[i][1] : cut.r[j][1];
			if (lo <= hi)
				js_cset_add(&both, lo, hi);
		}
	struct strbuf b = { 0 };
	int alts = 0;
	if (both.n == 1 && both.r[0][0] == both.r[0][1]) {
		struct strbuf one = { 0 };
		js_put_utf8(&one, both.r[0][0]);
		js_put_literal(&b, one.p, one.len);
		strbuf_free(&one);
		alts++;
	} else if (both.n) {
		strbuf_put(&b, "[", 1);
		for (size_t i = 0; i < both.n; i++) {
			js_put_class_char(&b, both.r[i][0]);
			if (both.r[i][1] != both.r[i][0]) {
				if (both.r[i][1] > both.r[i][0] + 1)
					strbuf_put(&b, "-", 1);
				js_put_class_char(&b, both.r[i][1]);
			}
		}
		strbuf_put(&b, "]", 1);
		alts++;
	}
	if (cset_has(s, '"')) {
		strbuf_printf(&b, "%s\"\\\\\\\"\"", alts++ ? " | " : "");
	}
	if (cset_has(s, '\\'))
		strbuf_printf(&b, "%s\"\\\\\\\\\"", alts++ ? " | " : "");
	bool all_ctl = true;
	for (uint32_t c = 0; c < 0x20; c++)
		all_ctl = all_ctl && cset_has(s, c);
	if (all_ctl) {
		strbuf_printf(&b, "%s\"\\\\\" [bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F]", alts++ ? " | " : "");
	} else {
		static const char short_esc[0x20] = { ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r' };
		for (uint32_t c = 0; c < 0x20; c++) {
			if (!cset_has(s, c))
				continue;
			if (short_esc[c])
				strbuf_printf(&b, "%s\"\\\\%c\"", alts++ ? " | " : "", short_esc[c]);
			else
				strbuf_printf(&b, "%s\"\\\\u%04x\"", alts++ ? " | " : "", c);
		}
	}
	free(raw.r);
	free(cut.r);
	free(both.r);
	if (!alts) {
		strbuf_free(&b);
		return NULL;
	}
	return js_alternatives(g, &b, alts);
}

/* ---- regular expressions (string "pattern") ---- */


int js_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes one UTF-8 code point at x->p; false (why set) when invalid. */
bool js_rx_utf8(struct rx *x, uint32_t *cp)
{
	const unsigned char *p = (const unsigned char *)x->p;
	size_t left = (size_t)(x->end - x->p);
	unsigned char c = p[0];
	size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
	if (!n || n > left) {
		x->why = "invalid UTF-8";
		return false;
	}
	uint32_t v = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80) {
			x->why = "invalid UTF-8";
			return false;
		}
		v = v << 6 | (p[i] & 0x3f);
	}
	x->p += n;
	*cp = v;
	return true;
}

static void set_digit(struct cset *s)
{
	js_cset_add(s, '0', '9');
}

static void set_word(struct cset *s)
{
	js_cset_add(s, '0', '9');
	js_cset_add(s, 'A', 'Z');
	js_cset_add(s, 'a', 'z');
	js_cset_add(s, '_', '_');
}

/* ECMAScript's \s: WhiteSpace and LineTerminator. */
static void set_space(struct cset *s)
{
	js_cset_add(s, 0x09, 0x0d);
	js_cset_add(s, 0x20, 0x20);
	js_cset_add(s, 0xa0, 0xa0);
	js_cset_add(s, 0x1680, 0x1680);
	js_cset_add(s, 0x2000, 0x200a);
	js_cset_add(s, 0x2028, 0x2029);
	js_cset_add(s, 0x202f, 0x202f);
	js_cset_add(s, 0x205f, 0x205f);
	js_cset_add(s, 0x3000, 0x3000);
	js_cset_add(s, 0xfeff, 0xfeff);
}

/*
 * Parses an escape at x->p (after the backslash) into s: a class escape
 * adds its set, any other adds one code point (*single set to it, else
 * UINT32_MAX). false (why set) for escapes the grammar cannot express.
 */
static bool rx_escape(struct rx *x, bool in_class, struct cset *s, uint32_t *single)
{
	*single = UINT32_MAX;
	if (x->p >= x->end) {
		x->why = "a trailing backslash";
		return false;
	}
	char c = *x->p++;
	struct cset t = { 0 };
	switch (c) {
	case 'd': case 'D': set_digit(&t); break;
	case 'w': case 'W': set_word(&t); break;
	case 's': case 'S': set_space(&t); break;
	default: break;
	}
	if (t.n) {
		if (c == 'D' || c == 'W' || c == 'S')
			js_cset_negate(&t);
		cset_union(s, &t);
		free(t.r);
		return true;
	}
	uint32_t cp;
	switch (c) {
	case 'n': cp = '\n'; break;
	case 't': cp = '\t'; break;
	case 'r': cp = '\r'; break;
	case 'f': cp = '\f'; break;
	case 'v': cp = '\v'; break;
	case '0': cp = 0; break;
	case 'b':
		if (!in_class) {
			x->why = "a word boundary \\b";
			return false;
		}
		cp = '\b';
		break;
	case 'B':
		x->why = "a word boundary \\B";
		return false;
	case 'k':
		x->why = "a backreference \\k";
		return false;
	case 'p': case 'P':
		x->why = "a Unicode property escape";
		return false;
	case 'c':
		x->why = "a control escape \\c";
		return false;
	case 'x':
		if (x->end - x->p < 2 || js_hexval(x->p[0]) < 0 || js_hexval(x->p[1]) < 0) {
			x->why = "a malformed \\x escape";
			return false;
		}
		cp = (uint32_t)(js_hexval(x->p[0]) << 4 | js_hexval(x->p[1]));
		x->p += 2;
		break;
	case 'u':
		cp = 0;
		if (x->p < x->end && *x->p == '{') {
			x->p++;
			int nd = 0;
			while (x->p < x->end && js_hexval(*x->p) >= 0 && nd < 7) {
				cp = cp << 4 | (uint32_t)js_hexval(*x->p++);
				nd++;
			}
			if (!nd || x->p >= x->end || *x->p != '}' || cp > CP_MAX) {
				x->why = "a malformed \\u{} escape";
				return false;
			}
			x->p++;
		} else {
			if (x->end - x->p < 4) {
				x->why = "a malformed \\u escape";
				return false;
			}
			for (int i = 0; i < 4; i++) {
				int h = js_hexval(x->p[i]);
				if (h < 0) {
					x->why = "a malformed \\u escape";
					return false;
				}
				cp = cp << 4 | (uint32_t)h;
			}
			x->p += 4;
		}
		break;
	default:
		if (c >= '1' && c <= '9') {
			x->why = "a backreference";
			return false;
		}
		x->p--;
		if (!js_rx_utf8(x, &cp))
			return false;
		break;
	}
	js_cset_add(s, cp, cp);
	*single = cp;
	return true;
}

/* A bracket class at x->p (just after '['). */
static const char *rx_class(struct rx *x)
{
	struct cset s = { 0 };
	bool neg = false;
	if (x->p < x->end && *x->p == '^') {
		neg = true;
		x->p++;
	}
	bool first = true;
	for (;;) {
		if (x->p >= x->end) {
			x->why = "an unterminated character class";
			goto fail;
		}
		if (*x->p == ']') {
			x->p++;
			break;
		}
		uint32_t lo, hi;
		if (*x->p == '\\') {
			x->p++;
			if (!rx_escape(x, true, &s, &lo))
				goto fail;
		} else if (!js_rx_utf8(x, &lo)) {
			goto fail;
		}
		first = false;
		if (lo == UINT32_MAX || x->end - x->p < 2 || *x->p != '-' || x->p[1] == ']') {
			if (lo != UINT32_MAX)
				js_cset_add(&s, lo, lo);
			continue;
		}
		x->p++;
		if (*x->p == '\\') {
			x->p++;
			struct cset t = { 0 };
			bool ok = rx_escape(x, true, &t, &hi);
			free(t.r);
			if (!ok)
				goto fail;
			if (hi == UINT32_MAX) {
				x->why = "a class escape as a range bound";
				goto fail;
			}
		} else if (!js_rx_utf8(x, &hi)) {
			goto fail;
		}
		if (hi < lo) {
			x->why = "a range out of order in a character class";
			goto fail;
		}
		js_cset_add(&s, lo, hi);
	}
	if (first && !neg) {
		x->why = "an empty character class";
		goto fail;
	}
	if (neg)
		js_cset_negate(&s);
	const char *e = cset_gbnf(x->g, &s);
	if (!e && !x->g->rc)
		x->why = "a character class that admits nothing";
	free(s.r);
	return e;
fail:
	free(s.r);
	return NULL;
}

static const char *rx_alt(struct rx *x, bool top);

static bool rx_number(struct rx *x, long *v)
{
	if (x->p >= x->end || *x->p < '0' || *x->p > '9')
		return false;
	*v = 0;
	while (x->p < x->end && *x->p >= '0' && *x->p <= '9') {
		*v = *v * 10 + (*x->p++ - '0');
		if (*v > 1000000)
			*v = 1000000;
	}
	return true;
}

static const char *rx_atom(struct rx *x)
{
	struct gen *g = x->g;
	char c = *x->p;
	if (c == '(') {
		x->p++;
		if (x->p < x->end && *x->p == '?') {
			x->p++;
			if (x->p < x->end && *x->p == ':') {
				x->p++;
			} else if (x->p < x->end && (*x->p == '<' || *x->p == 'P') && x->end - x->p > 1 &&
				   x->p[1] != '=' && x->p[1] != '!') {
				const char *close = memchr(x->p, '>', (size_t)(x->end - x->p));
				if (!close) {
					x->why = "an unterminated group name";
					return NULL;
				}
				x->p = close + 1;
			} else {
				x->why = "a lookaround or inline flag group";
				return NULL;
			}
		}
		if (++x->depth > 64) {
			x->why = "groups nested too deeply";
			return NULL;
		}
		const char *e = rx_alt(x, false);
		x->depth--;
		if (!e)
			return NULL;
		if (x->p >= x->end || *x->p != ')') {
			x->why = "an unbalanced parenthesis";
			return NULL;
		}
		x->p++;
		return js_fmt(g, "( %s )", e);
	}
	struct cset s = { 0 };
	const char *e = NULL;
	if (c == '[') {
		x->p++;
		return rx_class(x);
	} else if (c == '.') {
		x->p++;
		js_cset_add(&s, '\n', '\n');
		js_cset_add(&s, '\r', '\r');
		js_cset_add(&s, 0x2028, 0x2029);
		js_cset_negate(&s);
	} else if (c == '\\') {
		x->p++;
		uint32_t one;
		if (!rx_escape(x, false, &s, &one))
			goto out;
	} else if (c == '^' || c == '$') {
		x->why = "an anchor inside the pattern";
		goto out;
	} else if (c == '*' || c == '+' || c == '?' || c == '{') {
		x->why = "a quantifier with nothing to repeat";
		goto out;
	} else {
		uint32_t cp;
		if (!js_rx_utf8(x, &cp))
			goto out;
		js_cset_add(&s, cp, cp);
	}
	e = cset_gbnf(g, &s);
	if (!e && !g->rc)
		x->why = "a character set that admits nothing";
out:
	free(s.r);
	return e;
}

static const char *rx_quant(struct rx *x, const char *atom)
{
	if (x->p >= x->end)
		return atom;
	char c = *x->p;
	const char *e = atom;
	if (c == '*' || c == '+' || c == '?') {
		x->p++;
		e = js_fmt(x->g, "%s%c", atom, c);
	} else if (c == '{') {
		x->p++;
		long m, n = -1;
		if (!rx_number(x, &m)) {
			x->why = "a malformed {m,n} quantifier";
			return NULL;
		}
		bool comma = false;
		if (x->p < x->end && *x->p == ',') {
			comma = true;
			x->p++;
			if (x->p < x->end && *x->p != '}' && !rx_number(x, &n)) {
				x->why = "a malformed {m,n} quantifier";
				return NULL;
			}
		}
		if (x->p >= x->end || *x->p != '}') {
			x->why = "a malformed {m,n} quantifier";
			return NULL;
		}
		x->p++;
		if (m > JSON_SCHEMA_REPEAT_MAX || n > JSON_SCHEMA_REPEAT_MAX) {
			x->why = "a repetition bound above JSON_SCHEMA_REPEAT_MAX";
			return NULL;
		}
		if (comma && n >= 0 && n < m) {
			x->why = "a {m,n} quantifier with n < m";
			return NULL;
		}
		if (!comma)
			e = js_fmt(x->g, "%s{%ld}", atom, m);
		else if (n < 0)
			e = js_fmt(x->g, "%s{%ld,}", atom, m);
		else
			e = js_fmt(x->g, "%s{%ld,%ld}", atom, m, n);
	} else {
		return atom;
	}
	if (x->p < x->end && *x->p == '?')
		x->p++;		/* lazy: the same language */
	if (x->p < x->end && (*x->p == '*' || *x->p == '+' || *x->p == '?' || *x->p == '{')) {
		x->why = "a quantifier on a quantifier";
		return NULL;
	}
	return e;
}

/* One alternative; at the top level it may open with ^ and end with $. */
static const char *rx_seq(struct rx *x, bool top)
{
	struct gen *g = x->g;
	bool anchor_start = false, anchor_end = false;
	if (top && x->p < x->end && *x->p == '^') {
		anchor_start = true;
		x->p++;
	}
	struct strbuf b = { 0 };
	if (top && !anchor_start)
		strbuf_printf(&b, "%s* ", js_prim(g, PRIM_CHAR));
	size_t items = 0;
	while (x->p < x->end && *x->p != '|' && *x->p != ')') {
		if (top && *x->p == '$' && (x->p + 1 == x->end || x->p[1] == '|')) {
			anchor_end = true;
			x->p++;
			break;
		}
		const char *a = rx_atom(x);
		if (a)
			a = rx_quant(x, a);
		if (!a) {
			strbuf_free(&b);
			return NULL;
		}
		strbuf_printf(&b, "%s%s", items++ ? " " : "", a);
	}
	if (!items)
		strbuf_put(&b, "\"\"", 2);
	if (top && !anchor_end)
		strbuf_printf(&b, " %s*", js_prim(g, PRIM_CHAR));
	return js_keep(g, &b);
}

static const char *rx_alt(struct rx *x, bool top)
{
	struct strbuf b = { 0 };
	size_t n = 0;
	for (;;) {
		const char *s = rx_seq(x, top);
		if (!s) {
			strbuf_free(&b);
			return NULL;
		}
		strbuf_printf(&b, "%s%s", n++ ? " | " : "", s);
		if (x->p < x->end && *x->p == '|') {
			x->p++;
			continue;
		}
		break;
	}
	if (n == 1)
		return js_keep(x->g, &b);
	struct strbuf p = { 0 };
	strbuf_printf(&p, "( %s )", b.p);
	strbuf_free(&b);
	return js_keep(x->g, &p);
}

/* GBNF of the string contents pattern admits; NULL with *why when refused. */
const char *js_pattern_gbnf(struct gen *g, const char *pattern, const char **why)
{
	struct rx x = { g, pattern, pattern + strlen(pattern), NULL, 0 };
	const char *e = rx_alt(&x, true);
	if (e && x.p != x.end) {
		x.why = "an unbalanced ')'";
		e = NULL;
	}
	*why = x.why;
	return e;
}

