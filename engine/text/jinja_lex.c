/*
 * jinja_lex — template text to tokens, following Jinja2 3.1's lexer
 * (jinja2/lexer.py, tokeniter) under Hugging Face's settings:
 *   - newlines (\r\n, \r, \n) become \n and one trailing newline is dropped;
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag, "-%}",
 *     "-}}", "-#}" all whitespace after it (Unicode whitespace, as Python's
 *     str.rstrip and \s);
 *   - trim_blocks: the first newline after "%}" or "#}" goes;
 *   - lstrip_blocks: spaces and tabs from the start of a line up to "{%" or
 *     "{#" go, unless the tag is "{%+"; "{{" is never stripped;
 *   - inside a tag, "%}" and "}}" end it only outside brackets.
 * String literals are decoded as Python's unicode-escape does. Line and
 * column (1-based, in bytes) are those of the normalised text, which has the
 * same lines and columns as the original.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

struct lexer {
	struct ja_arena *a;
	const char *s;	/* normalised source */
	size_t n, pos;
	size_t lc_pos, lc_line_start;	/* cursor of the line/column computation */
	int lc_line;
	struct jtoken *t;
	size_t nt, cap;
	struct jinja_error *err;
	bool line_starting;
	char bal[64];	/* closing brackets expected, innermost last */
	size_t nbal;
};

static void locate(struct lexer *L, size_t pos, int *line, int *col)
{
	if (pos < L->lc_pos) {
		L->lc_pos = 0;
		L->lc_line = 1;
		L->lc_line_start = 0;
	}
	for (; L->lc_pos < pos; L->lc_pos++)
		if (L->s[L->lc_pos] == '\n') {
			L->lc_line++;
			L->lc_line_start = L->lc_pos + 1;
		}
	*line = L->lc_line;
	*col = (int)(pos - L->lc_line_start) + 1;
}

static int fail(struct lexer *L, int code, size_t pos, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int fail(struct lexer *L, int code, size_t pos, const char *fmt, ...)
{
	locate(L, pos, &L->err->line, &L->err->col);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(L->err->msg, sizeof L->err->msg, fmt, ap);
	va_end(ap);
	return code;
}

static struct jtoken *emit(struct lexer *L, int type, size_t pos)
{
	if (L->nt == L->cap) {
		size_t cap = L->cap ? L->cap * 2 : 256;
		struct jtoken *t = realloc(L->t, cap * sizeof(*t));
		if (!t)
			return NULL;
		L->t = t;
		L->cap = cap;
	}
	struct jtoken *t = &L->t[L->nt++];
	memset(t, 0, sizeof(*t));
	t->type = (uint8_t)type;
	locate(L, pos, &t->line, &t->col);
	return t;
}

static int oom(struct lexer *L)
{
	return fail(L, -ENOMEM, L->pos, "out of memory");
}

/* A copy of s[0..len) in the arena, NUL-terminated. */
static const char *dup(struct lexer *L, const char *s, size_t len)
{
	char *p = ja_alloc(L->a, len + 1);
	if (p && len)
		memcpy(p, s, len);
	return p;
}

/* Length of s[0..len) without its trailing Unicode whitespace (str.rstrip()). */
static size_t rstrip_len(const char *s, size_t len)
{
	for (bool more = true; more;) {
		more = false;
		for (size_t k = 1; k <= 3 && !more; k++)
			if (len >= k && jpy_space_len(s + len - k, k) == k) {
				len -= k;
				more = true;
			}
	}
	return len;
}

/* Bytes of Unicode whitespace at s[pos..] (\s*). */
static size_t ws_len(const struct lexer *L, size_t pos)
{
	size_t p = pos, k;
	while (p < L->n && (k = jpy_space_len(L->s + p, L->n - p)) > 0)
		p += k;
	return p - pos;
}

/* Emits the text s[from..to) before a tag whose whitespace sign is sign
 * ('-', '+' or 0); lstrip is whether lstrip_blocks applies to the tag. */
static int emit_text(struct lexer *L, size_t from, size_t to, char sign, bool lstrip)
{
	size_t len = to - from;
	const char *text = L->s + from;
	if (sign == '-') {
		len = rstrip_len(text, len);
	} else if (sign != '+' && lstrip) {
		size_t l_pos = len;
		while (l_pos > 0 && text[l_pos - 1] != '\n')
			l_pos--;
		if ((l_pos > 0 || L->line_starting) && l_pos < len) {
			bool ws = true;
			for (size_t i = l_pos, k; i < len && ws; i += k) {
				k = jpy_space_len(text + i, len - i);
				ws = k > 0;
			}
			if (ws)
				len = l_pos;
		}
	}
	if (len == 0)
		return 0;
	struct jtoken *t = emit(L, JT_DATA, from);
	if (!t || !(t->s = dup(L, text, len)))
		return oom(L);
	t->len = len;
	return 0;
}

static bool at(const struct lexer *L, size_t pos, const char *lit)
{
	size_t k = strlen(lit);
	return pos <= L->n && L->n - pos >= k && memcmp(L->s + pos, lit, k) == 0;
}

/* The end of a block tag at pos ("+%}", "-%}\s*", "%}\n?"), or 0. */
static size_t block_end(const struct lexer *L, size_t pos, char close)
{
	char plus[4] = { '+', close, '}', 0 }, minus[4] = { '-', close, '}', 0 }, plain[3] = { close, '}', 0 };
	if (at(L, pos, plus))
		return 3;
	if (at(L, pos, minus))
		return 3 + ws_len(L, pos + 3);
	if (at(L, pos, plain))
		return 2 + (at(L, pos + 2, "\n") ? 1 : 0);
	return 0;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || is_digit(c);
}

/* Digits with single underscores between them ((\d+_)*\d+): their length. */
static size_t digits(const struct lexer *L, size_t p)
{
	size_t q = p;
	while (q < L->n && is_digit(L->s[q])) {
		q++;
		if (q + 1 < L->n && L->s[q] == '_' && is_digit(L->s[q + 1]))
			q++;
	}
	return q - p;
}

static int lex_number(struct lexer *L)
{
	size_t p = L->pos, d = digits(L, p), q = p + d;
	bool is_float = false;
	if (p == 0 || L->s[p - 1] != '.') {
		size_t f = q;
		if (f + 1 < L->n && L->s[f] == '.' && is_digit(L->s[f + 1])) {
			f += 1 + digits(L, f + 1);
			is_float = true;
		}
		if (f < L->n && (L->s[f] == 'e' || L->s[f] == 'E')) {
			size_t e = f + 1 + (f + 1 < L->n && (L->s[f + 1] == '+' || L->s[f + 1] == '-'));
			size_t ed = e < L->n ? digits(L, e) : 0;
			if (ed) {
				f = e + ed;
				is_float = true;
			}
		}
		if (is_float)
			q = f;
	}
	char buf[80];
	size_t w = 0;
	if (!is_float) {
		int base = 10;
		q = p;
		if (L->s[p] == '0' && p + 1 < L->n && strchr("bBoOxX", L->s[p + 1])) {
			char b = (char)(L->s[p + 1] | 0x20);
			base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
			q = p + 2;
			while (q < L->n && (isxdigit((unsigned char)L->s[q]) || L->s[q] == '_'))
				q++;
		} else if (L->s[p] == '0') {
			q = p + 1;
			while (q + 1 < L->n && (L->s[q] == '0' || (L->s[q] == '_' && L->s[q + 1] == '0')))
				q++;
		} else {
			q = p + d;
		}
		for (size_t i = base == 10 ? p : p + 2; i < q && w < sizeof buf - 1; i++)
			if (L->s[i] != '_')
				buf[w++] = L->s[i];
		buf[w] = 0;
		errno = 0;
		char *end;
		unsigned long long v = strtoull(buf, &end, base);
		if (w == 0 || *end || errno || v > INT64_MAX)
			return fail(L, -EINVAL, p, "integer literal out of range or malformed");
		struct jtoken *t = emit(L, JT_INT, p);
		if (!t)
			return oom(L);
		t->i = (int64_t)v;
	} else {
		for (size_t i = p; i < q && w < sizeof buf - 1; i++)
			if (L->s[i] != '_')
				buf[w++] = L->s[i];
		buf[w] = 0;
		struct jtoken *t = emit(L, JT_FLOAT, p);
		if (!t)
			return oom(L);
		t->f = strtod(buf, NULL);
	}
	L->pos = q;
	return 0;
}

static int hexval(char c)
{
	return is_digit(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* Decodes the string literal body s[from..to) as Python's unicode-escape. */
static int decode_string(struct lexer *L, size_t from, size_t to, struct jtoken *t)
{
	char *out = ja_alloc(L->a, (to - from) * 2 + 1), *w = out;
	if (!out)
		return oom(L);
	for (size_t i = from; i < to;) {
		unsigned char c = (unsigned char)L->s[i];
		if (c != '\\') {
			*w++ = (char)c;
			i++;
			continue;
		}
		char e = L->s[i + 1];	/* the string regex guarantees a character after a backslash */
		size_t take = 2;
		uint32_t cp = 0;
		int want = 0;
		switch (e) {
		case '\\': case '\'': case '"': *w++ = e; break;
		case 'a': *w++ = 7; break;
		case 'b': *w++ = 8; break;
		case 'f': *w++ = 12; break;
		case 'n': *w++ = '\n'; break;
		case 'r': *w++ = '\r'; break;
		case 't': *w++ = '\t'; break;
		case 'v': *w++ = 11; break;
		case '\n': break;
		case 'x': want = 2; break;
		case 'u': want = 4; break;
		case 'U': want = 8; break;
		case 'N': return fail(L, -EINVAL, i, "\\N{...} escapes are not supported");
		default:
			if (e >= '0' && e <= '7') {
				take = 1;
				while (take <= 3 && i + take < to && L->s[i + take] >= '0' && L->s[i + take] <= '7')
					cp = cp * 8 + (uint32_t)(L->s[i + take++] - '0');
				want = -1;
			} else if ((unsigned char)e >= 0x80) {
				/* Python re-escapes the character first: "\" then its own \x/\u escape text */
				uint32_t u;
				size_t k = utf8_next(L->s + i + 1, to - i - 1, &u);
				*w++ = '\\';
				w += sprintf(w, u <= 0xff ? "x%02x" : u <= 0xffff ? "u%04x" : "U%08x", u);
				take = 1 + k;
			} else {
				*w++ = '\\';
				*w++ = e;
			}
		}
		if (want > 0) {
			for (int k = 0; k < want; k++) {
				int h = i + 2 + (size_t)k < to ? hexval(L->s[i + 2 + k]) : -1;
				if (h < 0)
					return fail(L, -EINVAL, i, "truncated \\%c escape", e);
				cp = cp * 16 + (uint32_t)h;
			}
			take = 2 + (size_t)want;
		}
		if (want) {
			if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
				return fail(L, -EINVAL, i, "escape \\%c names no encodable character", e);
			size_t k;
			utf8_put(w, cp, &k);
			w += k;
		}
		i += take;
	}
	*w = 0;
	t->s = out;
	t->len = (size_t)(w - out);
	return 0;
}

static int lex_string(struct lexer *L)
{
	char q = L->s[L->pos];
	size_t i = L->pos + 1;
	while (i < L->n && L->s[i] != q)
		i += L->s[i] == '\\' && i + 1 < L->n ? 2 : 1;
	if (i >= L->n)
		return fail(L, -EINVAL, L->pos, "unterminated string literal");
	struct jtoken *t = emit(L, JT_STRING, L->pos);
	if (!t)
		return oom(L);
	int rc = decode_string(L, L->pos + 1, i, t);
	L->pos = i + 1;
	return rc;
}

static int lex_operator(struct lexer *L)
{
	static const struct {
		const char *s;
		int op;
	} two[] = { { "//", JOP_FLOORDIV }, { "**", JOP_POW }, { "==", JOP_EQ },
		    { "!=", JOP_NE }, { ">=", JOP_GE }, { "<=", JOP_LE } };
	size_t p = L->pos;
	int op = 0, k = 1;
	for (size_t i = 0; i < sizeof two / sizeof two[0]; i++)
		if (at(L, p, two[i].s)) {
			op = two[i].op;
			k = 2;
		}
	char c = L->s[p];
	if (!op && strchr("+-/*%~[](){}=.:|,;<>", c) && c)
		op = c;
	if (!op)
		return fail(L, -EINVAL, p, "unexpected character '%c'", c);
	if (op == '(' || op == '[' || op == '{') {
		if (L->nbal == sizeof L->bal)
			return fail(L, -E2BIG, p, "brackets nested more than %zu deep", sizeof L->bal);
		L->bal[L->nbal++] = op == '(' ? ')' : op == '[' ? ']' : '}';
	} else if (op == ')' || op == ']' || op == '}') {
		if (L->nbal == 0)
			return fail(L, -EINVAL, p, "unexpected '%c'", c);
		if (L->bal[L->nbal - 1] != c)
			return fail(L, -EINVAL, p, "unexpected '%c', expected '%c'", c, L->bal[L->nbal - 1]);
		L->nbal--;
	}
	struct jtoken *t = emit(L, JT_OP, p);
	if (!t)
		return oom(L);
	t->op = op;
	L->pos = p + (size_t)k;
	return 0;
}

/* The tokens of a {{ }} or {% %} tag up to its end. */
static int lex_tag(struct lexer *L, bool block, size_t start)
{
	L->nbal = 0;
	for (;;) {
		if (L->pos >= L->n)
			return fail(L, -EINVAL, start, "unexpected end of template: the tag opened here is not closed");
		size_t k = L->nbal ? 0 : block ? block_end(L, L->pos, '%') :
			   at(L, L->pos, "-}}") ? 3 + ws_len(L, L->pos + 3) : at(L, L->pos, "}}") ? 2 : 0;
		if (k) {
			if (!emit(L, block ? JT_BLOCK_END : JT_VAR_END, L->pos))
				return oom(L);
			L->pos += k;
			L->line_starting = L->s[L->pos - 1] == '\n';
			return 0;
		}
		char c = L->s[L->pos];
		size_t ws = jpy_space_len(L->s + L->pos, L->n - L->pos);
		int rc = 0;
		if (ws) {
			L->pos += ws;
		} else if (is_digit(c)) {
			rc = lex_number(L);
		} else if (is_name_char(c)) {
			size_t p = L->pos;
			while (L->pos < L->n && is_name_char(L->s[L->pos]))
				L->pos++;
			struct jtoken *t = emit(L, JT_NAME, p);
			if (!t || !(t->s = dup(L, L->s + p, L->pos - p)))
				return oom(L);
			t->len = L->pos - p;
		} else if (c == '\'' || c == '"') {
			rc = lex_string(L);
		} else {
			rc = lex_operator(L);
		}
		if (rc)
			return rc;
	}
}

/* {% raw %}...{% endraw %}: the body is text. pos is past the raw tag. */
static int lex_raw(struct lexer *L, size_t start)
{
	for (size_t q = L->pos; q + 1 < L->n; q++) {
		if (!at(L, q, "{%"))
			continue;
		size_t p = q + 2;
		char sign = p < L->n && (L->s[p] == '-' || L->s[p] == '+') ? L->s[p++] : 0;
		p += ws_len(L, p);
		if (!at(L, p, "endraw"))
			continue;
		p += 6;
		p += ws_len(L, p);
		size_t k = block_end(L, p, '%');
		if (!k)
			continue;
		if (emit_text(L, L->pos, q, sign, true))
			return -ENOMEM;
		L->pos = p + k;
		L->line_starting = L->s[L->pos - 1] == '\n';
		return 0;
	}
	return fail(L, -EINVAL, start, "Missing end of raw directive");
}

/* The raw tag at pos ("{%" sign \s* "raw" \s* ("-%}" \s* | "%}")): its length, or 0. */
static size_t raw_begin(const struct lexer *L, size_t pos)
{
	size_t p = pos + 2;
	if (p < L->n && (L->s[p] == '-' || L->s[p] == '+'))
		p++;
	p += ws_len(L, p);
	if (!at(L, p, "raw"))
		return 0;
	p += 3;
	p += ws_len(L, p);
	if (at(L, p, "-%}"))
		return p + 3 + ws_len(L, p + 3) - pos;
	return at(L, p, "%}") ? p + 2 - pos : 0;
}

static int lex_root(struct lexer *L)
{
	L->line_starting = true;
	while (L->pos < L->n) {
		size_t p = L->pos;
		while (p + 1 < L->n && !(L->s[p] == '{' && (L->s[p + 1] == '{' || L->s[p + 1] == '%' || L->s[p + 1] == '#')))
			p++;
		if (p + 1 >= L->n)
			return emit_text(L, L->pos, L->n, 0, false) ? -ENOMEM : 0;
		char kind = L->s[p + 1];
		char sign = p + 2 < L->n && (L->s[p + 2] == '-' || L->s[p + 2] == '+') ? L->s[p + 2] : 0;
		size_t raw = kind == '%' ? raw_begin(L, p) : 0;
		int rc = emit_text(L, L->pos, p, sign, kind != '{');
		if (rc)
			return rc;
		if (raw) {
			L->pos = p + raw;
			L->line_starting = L->s[L->pos - 1] == '\n';
			if ((rc = lex_raw(L, p)))
				return rc;
			continue;
		}
		L->pos = p + 2 + (sign ? 1 : 0);
		if (kind == '#') {
			size_t q = L->pos, k = 0;
			for (; q < L->n && !k; q += k ? 0 : 1)
				k = at(L, q, "+#}") ? 3 : at(L, q, "-#}") ? 3 + ws_len(L, q + 3) : block_end(L, q, '#');
			if (!k)
				return fail(L, -EINVAL, p, "Missing end of comment tag");
			L->pos = q + k;
			L->line_starting = L->s[L->pos - 1] == '\n';
			continue;
		}
		if (!emit(L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, p))
			return oom(L);
		if ((rc = lex_tag(L, kind == '%', p)))
			return rc;
	}
	return 0;
}

int jinja_lex(struct ja_arena *a, const char *src, size_t len, struct jtoken **toks, size_t *n,
	      struct jinja_error *err)
{
	/* newlines normalised to \n, one trailing newline dropped (keep_trailing_newline=False) */
	char *s = ja_alloc(a, len + 1);
	if (!s) {
		snprintf(err->msg, sizeof err->msg, "out of memory");
		return -ENOMEM;
	}
	size_t w = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[w++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			s[w++] = src[i];
		}
	}
	if (w > 0 && s[w - 1] == '\n')
		w--;
	s[w] = 0;
	struct lexer L = { .a = a, .s = s, .n = w, .lc_line = 1, .err = err };
	int rc = lex_root(&L);
	if (!rc && !emit(&L, JT_EOF, L.n))
		rc = oom(&L);
	if (rc) {
		free(L.t);
		return rc;
	}
	*toks = L.t;
	*n = L.nt;
	return 0;
}
