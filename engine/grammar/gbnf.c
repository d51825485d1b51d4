/*
 * gbnf — the GBNF parser and compiler: text to struct grammar.
 *
 * The accepted syntax is llama.cpp's: `name ::= alternatives` rules with
 * names of [a-zA-Z0-9-]; alternation `|`, grouping `( )`, repetition
 * `* + ? {m} {m,} {m,n}`, string literals with \n \t \r \\ \" \[ \] \xHH
 * \uHHHH \UHHHHHHHH escapes, classes `[a-z]` / `[^...]`, `.` for any code
 * point, `#` comments. A rule ends at a newline unless inside parentheses
 * or right after `::=` or `|`.
 *
 * A class's negation is resolved here: `[^]` (nothing negated) is any code
 * point, like `.` and like JavaScript's `[^]`, and `[]` matches nothing.
 * (llama.cpp's parser emits no element at all for either, so there they
 * match the empty string; nobody writes a class to mean that.)
 *
 * Compilation keeps every repeated item a single element (a multi-element
 * item becomes a generated rule first), so x{m,n} costs m + (n - m) elements
 * and n - m small rules: nested repetitions add, they do not multiply.
 * After parsing, undefined references, a missing root and left recursion
 * (direct, indirect, or behind nullable prefixes) are refused; the matcher
 * relies on the absence of left recursion to terminate. A star over an item
 * that can match the empty string (`("a"? "b"?)*`, the regex `([a-z]*\s*)*`)
 * would be such a recursion (R ::= x R | "" with x nullable), so its body is
 * first replaced by the item without the empty string (star_bodies_nonempty):
 * the same language, and each iteration consumes input.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_internal.h"

#define GBNF_DEPTH_MAX 256	/* nesting of parentheses */
#define CP_MAX 0x10FFFFu

struct evec {
	struct gram_elem *v;
	uint32_t n, cap;
};

struct brule {
	const char *name;	/* into the text for user rules; NULL when generated */
	size_t name_len;
	uint32_t origin;	/* user rule this one was generated for */
	bool defined;
	bool star;		/* generated x*: alts[0] is x R, alts[1] empty */
	char kind;		/* what made it: 0 a user rule, '(' a group, or the
				   repetition operator ('*', '+', '?', '{'); a rule
				   without the empty string copies its original's */
	size_t def_pos, ref_pos;	/* where defined (generated: the group or the
					   repeated item) / first referenced */
	struct evec *alts;
	uint32_t n_alts, cap_alts;
};

struct gbnf {
	const char *s;
	size_t len, pos;
	char *err;
	size_t err_len;
	bool failed;
	int ret;
	int depth;
	uint32_t cur;		/* user rule being defined */
	uint64_t n_elems;	/* elements so far, for GRAMMAR_ELEMS_MAX */

	struct brule *rules;
	uint32_t n_rules, cap_rules;
	struct gram_range *ranges;
	uint32_t n_ranges, cap_ranges;
	struct gram_class *classes;
	uint32_t n_classes, cap_classes;
};

/* Writes "line L, column C: ..." for byte offset at; the first error wins. */
static void fail_at(struct gbnf *P, size_t at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail_at(struct gbnf *P, size_t at, const char *fmt, ...)
{
	if (P->failed)
		return;
	P->failed = true;
	P->ret = -EINVAL;
	if (!P->err || P->err_len == 0)
		return;
	size_t line = 1, col = 1;
	for (size_t i = 0; i < at && i < P->len; i++) {
		unsigned char c = (unsigned char)P->s[i];
		if (c == '\n') {
			line++;
			col = 1;
		} else if ((c & 0xC0) != 0x80) {
			col++;
		}
	}
	int k = snprintf(P->err, P->err_len, "line %zu, column %zu: ", line, col);
	if (k < 0 || (size_t)k >= P->err_len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(P->err + k, P->err_len - (size_t)k, fmt, ap);
	va_end(ap);
}

static void fail_nomem(struct gbnf *P)
{
	if (!P->failed) {
		P->failed = true;
		P->ret = -ENOMEM;
		if (P->err && P->err_len)
			snprintf(P->err, P->err_len, "out of memory");
	}
}

/* Length of the valid UTF-8 sequence at p (avail bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t avail, uint32_t *cp)
{
	unsigned char b = p[0];
	size_t need;
	uint32_t v, min;
	if (b < 0x80) {
		*cp = b;
		return 1;
	} else if (b >= 0xC2 && b <= 0xDF) {
		need = 2, v = b & 0x1F, min = 0x80;
	} else if (b >= 0xE0 && b <= 0xEF) {
		need = 3, v = b & 0x0F, min = 0x800;
	} else if (b >= 0xF0 && b <= 0xF4) {
		need = 4, v = b & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (avail < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (p[i] & 0x3F);
	}
	if (v < min || v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*cp = v;
	return need;
}

static int peek(const struct gbnf *P, size_t off)
{
	return P->pos + off < P->len ? (unsigned char)P->s[P->pos + off] : -1;
}

static void skip_space(struct gbnf *P, bool newline_ok)
{
	while (P->pos < P->len) {
		char c = P->s[P->pos];
		if (c == ' ' || c == '\t') {
			P->pos++;
		} else if (c == '#') {
			while (P->pos < P->len && P->s[P->pos] != '\n' && P->s[P->pos] != '\r')
				P->pos++;
		} else if ((c == '\n' || c == '\r') && newline_ok) {
			P->pos++;
		} else {
			break;
		}
	}
}

static bool is_name_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-';
}

/* A new rule: a user rule (name set) or one generated by construct kind at text offset at. */
static uint32_t rule_new(struct gbnf *P, const char *name, size_t name_len, char kind, size_t at)
{
	if (!gram_grow((void **)&P->rules, &P->cap_rules, P->n_rules + 1, sizeof(*P->rules), 8)) {
		fail_nomem(P);
		return 0;
	}
	struct brule *r = &P->rules[P->n_rules];
	memset(r, 0, sizeof(*r));
	r->name = name;
	r->name_len = name_len;
	r->origin = name ? P->n_rules : P->cur;
	r->kind = kind;
	r->def_pos = at;
	return P->n_rules++;
}

/* The rule called name, created undefined on first sight. */
static uint32_t rule_lookup(struct gbnf *P, const char *name, size_t name_len, size_t at)
{
	for (uint32_t i = 0; i < P->n_rules; i++)
		if (P->rules[i].name && P->rules[i].name_len == name_len &&
		    memcmp(P->rules[i].name, name, name_len) == 0)
			return i;
	uint32_t id = rule_new(P, name, name_len, 0, 0);
	if (!P->failed)
		P->rules[id].ref_pos = at;
	return id;
}

static struct evec *alt_new(struct gbnf *P, uint32_t rule)
{
	struct brule *r = &P->rules[rule];
	if (!gram_grow((void **)&r->alts, &r->cap_alts, r->n_alts + 1, sizeof(*r->alts), 8)) {
		fail_nomem(P);
		return NULL;
	}
	struct evec *a = &r->alts[r->n_alts++];
	memset(a, 0, sizeof(*a));
	return a;
}

static void push(struct gbnf *P, struct evec *a, uint32_t type, uint32_t arg)
{
	if (P->failed)
		return;
	if (++P->n_elems > GRAMMAR_ELEMS_MAX) {
		fail_at(P, P->pos, "grammar too large (more than %u elements)", GRAMMAR_ELEMS_MAX);
		return;
	}
	if (!gram_grow((void **)&a->v, &a->cap, a->n + 1, sizeof(*a->v), 8)) {
		fail_nomem(P);
		return;
	}
	a->v[a->n++] = (struct gram_elem){ type, arg };
}

static int range_cmp(const void *x, const void *y)
{
	const struct gram_range *a = x, *b = y;
	return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Makes ranges[first ..] one class: sorted, merged, complemented when negated.
 * P->ranges is never NULL (grammar_parse allocates it first), so an empty
 * list, as in `[^]` and `[]`, is still a valid pointer into it. */
static uint32_t class_finish(struct gbnf *P, uint32_t first, bool negated)
{
	struct gram_range *r = P->ranges + first;
	uint32_t n = P->n_ranges - first, m = 0;
	if (n > 1)
		qsort(r, n, sizeof(*r), range_cmp);
	for (uint32_t i = 0; i < n; i++) {
		if (m > 0 && r[i].lo <= r[m - 1].hi + 1) {
			if (r[i].hi > r[m - 1].hi)
				r[m - 1].hi = r[i].hi;
		} else {
			r[m++] = r[i];
		}
	}
	if (negated) {
		/* The complement of m sorted disjoint ranges has at most m + 1. */
		struct gram_range *tmp = malloc((m + 1) * sizeof(*tmp));
		if (!tmp) {
			fail_nomem(P);
			return 0;
		}
		uint32_t k = 0, next = 0;
		for (uint32_t i = 0; i < m; i++) {
			if (r[i].lo > next)
				tmp[k++] = (struct gram_range){ next, r[i].lo - 1 };
			next = r[i].hi + 1;
		}
		if (next <= CP_MAX)
			tmp[k++] = (struct gram_range){ next, CP_MAX };
		P->n_ranges = first;
		if (!gram_grow((void **)&P->ranges, &P->cap_ranges, first + k, sizeof(*P->ranges), 8)) {
			free(tmp);
			fail_nomem(P);
			return 0;
		}
		if (k) /* a class of every code point negated is empty */
			memcpy(P->ranges + first, tmp, k * sizeof(*tmp));
		free(tmp);
		m = k;
	}
	P->n_ranges = first + m;
	if (!gram_grow((void **)&P->classes, &P->cap_classes, P->n_classes + 1, sizeof(*P->classes), 8)) {
		fail_nomem(P);
		return 0;
	}
	P->classes[P->n_classes] = (struct gram_class){ first, m };
	return P->n_classes++;
}

static void range_add(struct gbnf *P, uint32_t lo, uint32_t hi)
{
	if (!gram_grow((void **)&P->ranges, &P->cap_ranges, P->n_ranges + 1, sizeof(*P->ranges), 8)) {
		fail_nomem(P);
		return;
	}
	P->ranges[P->n_ranges++] = (struct gram_range){ lo, hi };
}

static void push_class1(struct gbnf *P, struct evec *a, uint32_t lo, uint32_t hi)
{
	uint32_t first = P->n_ranges;
	range_add(P, lo, hi);
	if (P->failed)
		return;
	uint32_t c = class_finish(P, first, false);
	push(P, a, GRAM_CLASS, c);
}

static uint32_t hex_digits(struct gbnf *P, size_t n, size_t at)
{
	uint32_t v = 0;
	for (size_t i = 0; i < n; i++) {
		int c = peek(P, 0);
		int d = c >= '0' && c <= '9' ? c - '0' :
			c >= 'a' && c <= 'f' ? c - 'a' + 10 :
			c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0) {
			fail_at(P, at, "bad escape: expected %zu hex digits", n);
			return 0;
		}
		v = v << 4 | (uint32_t)d;
		P->pos++;
	}
	return v;
}

/* One character of a literal or class, escapes resolved. */
static uint32_t parse_char(struct gbnf *P)
{
	size_t at = P->pos;
	if (P->s[P->pos] == '\\') {
		P->pos++;
		int c = peek(P, 0);
		P->pos++;
		uint32_t v;
		switch (c) {
		case 'x': v = hex_digits(P, 2, at); break;
		case 'u': v = hex_digits(P, 4, at); break;
		case 'U': v = hex_digits(P, 8, at); break;
		case 'n': return '\n';
		case 't': return '\t';
		case 'r': return '\r';
		case '\\': case '"': case '[': case ']': case '-': case '^':
			return (uint32_t)c;
		case -1:
			fail_at(P, at, "unterminated escape");
			return 0;
		default:
			fail_at(P, at, "bad escape '\\%c'", c >= 0x20 && c < 0x7F ? c : '?');
			return 0;
		}
		if (!P->failed && (v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF)))
			fail_at(P, at, "bad escape: U+%X is not a Unicode scalar value", v);
		return v;
	}
	uint32_t cp = 0;
	size_t n = utf8_len((const unsigned char *)P->s + P->pos, P->len - P->pos, &cp);
	P->pos += n ? n : 1;	/* the text was validated up front */
	return cp;
}

static void parse_alternates(struct gbnf *P, uint32_t rule, bool nested);

/* A non-negative decimal bound of a {m,n} repetition. */
static long parse_bound(struct gbnf *P)
{
	size_t at = P->pos;
	long v = 0;
	if (peek(P, 0) < '0' || peek(P, 0) > '9') {
		fail_at(P, at, "expected a number in repetition bounds");
		return -1;
	}
	while (peek(P, 0) >= '0' && peek(P, 0) <= '9') {
		if (v <= GRAMMAR_REPEAT_MAX)
			v = v * 10 + (peek(P, 0) - '0');
		P->pos++;
	}
	if (v > GRAMMAR_REPEAT_MAX) {
		fail_at(P, at, "repetition bound above the limit of %d", GRAMMAR_REPEAT_MAX);
		return -1;
	}
	return v;
}

/* x* as a rule: R ::= x R | "" (op and item_at say what wrote it). */
static uint32_t star_rule(struct gbnf *P, struct gram_elem x, char op, size_t item_at)
{
	uint32_t r = rule_new(P, NULL, 0, op, item_at);
	struct evec *a = P->failed ? NULL : alt_new(P, r);
	if (a) {
		P->rules[r].star = true;
		push(P, a, x.type, x.arg);
		push(P, a, GRAM_REF, r);
	}
	if (!P->failed)
		alt_new(P, r);
	return r;
}

/* Applies the repetition operator at P->pos (op_at) to a->v[start ..], the
 * item that starts at text offset item_at. */
static void parse_repeat(struct gbnf *P, uint32_t rule, uint32_t ai, uint32_t start, size_t item_at,
			 size_t op_at)
{
	struct evec *a = &P->rules[rule].alts[ai];
	char op = P->s[P->pos++];
	long m = 0, n = -1;	/* n < 0: unbounded */
	if (op == '*') {
		m = 0;
	} else if (op == '+') {
		m = 1;
	} else if (op == '?') {
		m = 0, n = 1;
	} else {
		skip_space(P, true);
		m = parse_bound(P);
		skip_space(P, true);
		if (P->failed)
			return;
		if (peek(P, 0) == ',') {
			P->pos++;
			skip_space(P, true);
			if (peek(P, 0) != '}') {
				n = parse_bound(P);
				skip_space(P, true);
			}
		} else {
			n = m;
		}
		if (P->failed)
			return;
		if (peek(P, 0) != '}') {
			fail_at(P, P->pos, "expected '}' to close repetition bounds");
			return;
		}
		P->pos++;
		if (n >= 0 && n < m) {
			fail_at(P, op_at, "bad repetition bounds {%ld,%ld}: max below min", m, n);
			return;
		}
	}
	if (start == a->n) {
		fail_at(P, op_at, "'%c' with nothing to repeat", op);
		return;
	}
	/* Make the item one element. */
	if (a->n - start > 1) {
		uint32_t g = rule_new(P, NULL, 0, op, item_at);
		struct evec *ga = P->failed ? NULL : alt_new(P, g);
		if (!ga)
			return;
		a = &P->rules[rule].alts[ai];
		for (uint32_t i = start; i < a->n; i++)
			push(P, ga, a->v[i].type, a->v[i].arg);
		P->n_elems -= a->n - start;
		a->n = start;
		push(P, a, GRAM_REF, g);
	}
	if (P->failed)
		return;
	struct gram_elem x = a->v[start];
	a->n = start;
	P->n_elems--;
	for (long i = 0; i < m; i++)
		push(P, a, x.type, x.arg);
	if (n < 0) {
		uint32_t r = star_rule(P, x, op, item_at);
		a = &P->rules[rule].alts[ai];
		push(P, a, GRAM_REF, r);
		return;
	}
	/* n - m nested optionals, innermost first: R_k ::= x R_k+1 | "". */
	uint32_t inner = UINT32_MAX;
	for (long k = 0; k < n - m && !P->failed; k++) {
		uint32_t r = rule_new(P, NULL, 0, op, item_at);
		struct evec *ra = P->failed ? NULL : alt_new(P, r);
		if (!ra)
			return;
		push(P, ra, x.type, x.arg);
		if (inner != UINT32_MAX)
			push(P, ra, GRAM_REF, inner);
		alt_new(P, r);
		inner = r;
	}
	if (inner != UINT32_MAX && !P->failed) {
		a = &P->rules[rule].alts[ai];
		push(P, a, GRAM_REF, inner);
	}
}

/* Items of one alternative, up to '|', ')', or a newline at top level. */
static void parse_sequence(struct gbnf *P, uint32_t rule, uint32_t ai, bool nested)
{
	uint32_t last = UINT32_MAX;	/* start of the last item in the alternative */
	size_t last_at = 0;		/* and where it is in the text */
	while (!P->failed && P->pos < P->len) {
		int c = peek(P, 0);
		size_t at = P->pos;
		struct evec *a = &P->rules[rule].alts[ai];
		if (c != '*' && c != '+' && c != '?' && c != '{')
			last_at = at;
		if (c == '"') {
			P->pos++;
			last = a->n;
			while (!P->failed && P->pos < P->len && P->s[P->pos] != '"') {
				uint32_t cp = parse_char(P);
				if (!P->failed)
					push_class1(P, &P->rules[rule].alts[ai], cp, cp);
			}
			if (!P->failed && P->pos >= P->len) {
				fail_at(P, at, "unterminated string literal");
				return;
			}
			P->pos++;
		} else if (c == '[') {
			P->pos++;
			bool neg = peek(P, 0) == '^';
			if (neg)
				P->pos++;
			uint32_t first = P->n_ranges;
			while (!P->failed && P->pos < P->len && P->s[P->pos] != ']') {
				size_t cat = P->pos;
				uint32_t lo = parse_char(P), hi = lo;
				if (!P->failed && peek(P, 0) == '-' && peek(P, 1) != ']' && peek(P, 1) >= 0) {
					P->pos++;
					hi = parse_char(P);
					if (!P->failed && hi < lo) {
						fail_at(P, cat, "bad character range: end below start");
						return;
					}
				}
				if (!P->failed)
					range_add(P, lo, hi);
			}
			if (!P->failed && P->pos >= P->len) {
				fail_at(P, at, "unterminated character class");
				return;
			}
			P->pos++;
			if (P->failed)
				return;
			uint32_t cl = class_finish(P, first, neg);
			last = P->rules[rule].alts[ai].n;
			push(P, &P->rules[rule].alts[ai], GRAM_CLASS, cl);
		} else if (c == '.') {
			P->pos++;
			last = a->n;
			push_class1(P, a, 0, CP_MAX);
		} else if (is_name_char(c)) {
			size_t n = 0;
			while (is_name_char(peek(P, (size_t)n)))
				n++;
			uint32_t r = rule_lookup(P, P->s + at, n, at);
			P->pos += n;
			last = P->rules[rule].alts[ai].n;
			push(P, &P->rules[rule].alts[ai], GRAM_REF, r);
		} else if (c == '(') {
			if (++P->depth > GBNF_DEPTH_MAX) {
				fail_at(P, at, "parentheses nested deeper than %d", GBNF_DEPTH_MAX);
				return;
			}
			P->pos++;
			skip_space(P, true);
			uint32_t g = rule_new(P, NULL, 0, '(', at);
			if (P->failed)
				return;
			parse_alternates(P, g, true);
			if (P->failed)
				return;
			if (peek(P, 0) != ')') {
				fail_at(P, at, "unclosed '('");
				return;
			}
			P->pos++;
			P->depth--;
			last = P->rules[rule].alts[ai].n;
			push(P, &P->rules[rule].alts[ai], GRAM_REF, g);
		} else if (c == '*' || c == '+' || c == '?' || c == '{') {
			if (last == UINT32_MAX) {
				fail_at(P, at, "'%c' with nothing to repeat", c);
				return;
			}
			parse_repeat(P, rule, ai, last, last_at, at);
			last = UINT32_MAX;
		} else {
			break;
		}
		skip_space(P, nested);
	}
}

static void parse_alternates(struct gbnf *P, uint32_t rule, bool nested)
{
	for (;;) {
		if (!alt_new(P, rule))
			return;
		parse_sequence(P, rule, P->rules[rule].n_alts - 1, nested);
		if (P->failed || peek(P, 0) != '|')
			return;
		P->pos++;
		skip_space(P, true);
	}
}

static void parse_rule(struct gbnf *P)
{
	size_t at = P->pos, n = 0;
	while (is_name_char(peek(P, n)))
		n++;
	if (n == 0) {
		int c = peek(P, 0);
		if (c >= 0x20 && c < 0x7F)
			fail_at(P, at, "expected a rule name, found '%c'", c);
		else
			fail_at(P, at, "expected a rule name");
		return;
	}
	uint32_t r = rule_lookup(P, P->s + at, n, at);
	if (P->failed)
		return;
	if (P->rules[r].defined) {
		fail_at(P, at, "rule '%.*s' defined twice", (int)n, P->s + at);
		return;
	}
	P->rules[r].defined = true;
	P->rules[r].def_pos = at;
	P->cur = r;
	P->pos += n;
	skip_space(P, false);
	if (P->pos + 3 > P->len || memcmp(P->s + P->pos, "::=", 3) != 0) {
		fail_at(P, P->pos, "expected '::=' after rule name '%.*s'", (int)n, P->s + at);
		return;
	}
	P->pos += 3;
	skip_space(P, true);
	parse_alternates(P, r, false);
	if (P->failed)
		return;
	int c = peek(P, 0);
	if (c == -1 || c == '\n' || c == '\r')
		return;
	if (c == ')')
		fail_at(P, P->pos, "unmatched ')'");
	else if (c >= 0x20 && c < 0x7F)
		fail_at(P, P->pos, "unexpected '%c'", c);
	else
		fail_at(P, P->pos, "unexpected character");
}

static void rule_name(const struct gbnf *P, uint32_t r, const char **name, int *len)
{
	const struct brule *u = &P->rules[P->rules[r].origin];
	*name = u->name ? u->name : "?";
	*len = u->name ? (int)u->name_len : 1;
}

/* Which rules can match the empty string: a calloc'd array of P->n_rules
 * (NULL when out of memory). A fixed point; classes never match "". */
static bool *rules_nullable(struct gbnf *P)
{
	uint32_t nr = P->n_rules;
	bool *nullable = calloc(nr ? nr : 1, sizeof(bool));
	if (!nullable) {
		fail_nomem(P);
		return NULL;
	}
	for (bool changed = true; changed;) {
		changed = false;
		for (uint32_t r = 0; r < nr; r++) {
			if (nullable[r])
				continue;
			for (uint32_t k = 0; k < P->rules[r].n_alts && !nullable[r]; k++) {
				const struct evec *a = &P->rules[r].alts[k];
				uint32_t i = 0;
				while (i < a->n && a->v[i].type == GRAM_REF && nullable[a->v[i].arg])
					i++;
				if (i == a->n)
					nullable[r] = changed = true;
			}
		}
	}
	return nullable;
}

/* The work of star_bodies_nonempty: rules nullable before it (n of them),
 * the rule without the empty string made for each (UINT32_MAX: none yet),
 * and the rules whose one is made but not yet filled in. */
struct nonempty {
	const bool *nullable;
	uint32_t n;
	uint32_t *made;
	uint32_t *todo, n_todo;
};

static bool elem_nullable(const struct nonempty *N, struct gram_elem e)
{
	return e.type == GRAM_REF && e.arg < N->n && N->nullable[e.arg];
}

/* The rule that matches what nullable rule y matches but the empty string;
 * it inherits y's name and position for messages, and is filled in later. */
static uint32_t nonempty_rule(struct gbnf *P, struct nonempty *N, uint32_t y)
{
	if (N->made[y] != UINT32_MAX)
		return N->made[y];
	uint32_t r = rule_new(P, NULL, 0, P->rules[y].kind, P->rules[y].def_pos);
	if (P->failed)
		return 0;
	P->rules[r].origin = P->rules[y].origin;
	N->made[y] = r;
	N->todo[N->n_todo++] = y;
	return r;
}

/*
 * Fills in the rule made for y: for each alternative e1 .. en of y, and each
 * i such that e1 .. ei-1 can all be empty, the alternative ei' ei+1 .. en,
 * where ei' is ei without the empty string (ei itself when it cannot be
 * empty). Their union is y's language less "", and each starts with an item
 * that consumes input. An alternative of k nullable items costs k(k+1)/2
 * elements; GRAMMAR_ELEMS_MAX bounds the total.
 */
static void nonempty_fill(struct gbnf *P, struct nonempty *N, uint32_t y)
{
	uint32_t r = N->made[y];
	for (uint32_t k = 0; k < P->rules[y].n_alts && !P->failed; k++) {
		/* y's alternatives do not move: only r's grow here. */
		const struct evec *a = &P->rules[y].alts[k];
		for (uint32_t i = 0; i < a->n && !P->failed; i++) {
			struct gram_elem first = a->v[i];
			bool skippable = elem_nullable(N, first);
			if (skippable)
				first.arg = nonempty_rule(P, N, first.arg);
			struct evec *b = P->failed ? NULL : alt_new(P, r);
			if (!b)
				return;
			push(P, b, first.type, first.arg);
			for (uint32_t j = i + 1; j < a->n; j++)
				push(P, b, a->v[j].type, a->v[j].arg);
			if (!skippable)
				break;
		}
	}
}

/*
 * A star over a nullable item, R ::= x R | "" with x able to match "", is
 * left-recursive as written: R can start with R. Since (x)* matches what
 * (x')* does, x' being x without the empty string, each such star's item
 * becomes x'. Errors here (the element limit) point at the item's rule
 * or group.
 */
static void star_bodies_nonempty(struct gbnf *P)
{
	struct nonempty N = { .n = P->n_rules };
	bool *nullable = rules_nullable(P);
	N.nullable = nullable;
	N.made = malloc((size_t)(N.n ? N.n : 1) * sizeof(*N.made));
	N.todo = malloc((size_t)(N.n ? N.n : 1) * sizeof(*N.todo));
	if (!nullable || !N.made || !N.todo) {
		fail_nomem(P);
		goto out;
	}
	for (uint32_t y = 0; y < N.n; y++)
		N.made[y] = UINT32_MAX;
	/* Every star first, so that a star inside an item is read as x' R
	 * when the item's rule is filled in (as x R it would start with
	 * itself through x'). */
	for (uint32_t r = 0; r < N.n && !P->failed; r++) {
		if (!P->rules[r].star || !elem_nullable(&N, P->rules[r].alts[0].v[0]))
			continue;
		uint32_t x = nonempty_rule(P, &N, P->rules[r].alts[0].v[0].arg);
		if (!P->failed)
			P->rules[r].alts[0].v[0].arg = x;
	}
	while (N.n_todo > 0 && !P->failed) {
		uint32_t y = N.todo[--N.n_todo];
		P->pos = P->rules[y].def_pos;
		nonempty_fill(P, &N, y);
	}
out:
	free(nullable);
	free(N.made);
	free(N.todo);
}

/*
 * Says which rule is left-recursive and where, for the cycle stack[from ..
 * sp) of DFS frames (rule, alt, index). A cycle that passes from a user
 * rule into one of its groups or repetitions is reported at that construct;
 * one through user rules only, at the first rule's definition.
 */
static void left_recursion_fail(struct gbnf *P, const uint32_t *stack, size_t from, size_t sp)
{
	size_t n = (sp - from) / 3;
	uint32_t user = P->rules[stack[from]].kind ? UINT32_MAX : stack[from];
	uint32_t construct = UINT32_MAX;
	for (size_t i = 0; i < n && construct == UINT32_MAX; i++) {
		uint32_t a = stack[from + 3 * i], b = stack[from + 3 * ((i + 1) % n)];
		if (!P->rules[a].kind && P->rules[b].kind)
			user = a, construct = b;
	}
	if (user == UINT32_MAX)
		construct = stack[from];	/* generated rules only: name the first */
	const char *name;
	int len;
	if (construct == UINT32_MAX) {
		rule_name(P, user, &name, &len);
		fail_at(P, P->rules[P->rules[user].origin].def_pos, "rule '%.*s' is left-recursive", len, name);
		return;
	}
	rule_name(P, construct, &name, &len);
	fail_at(P, P->rules[construct].def_pos, "rule '%.*s' is left-recursive through this %s", len, name,
		P->rules[construct].kind == '(' ? "group" : "repetition");
}

/*
 * Refuses left recursion: rule r "starts with" s when some alternative of r
 * has a reference to s after only nullable elements; a cycle in that graph
 * would make the matcher expand forever. Iterative DFS, no recursion.
 */
static void check_left_recursion(struct gbnf *P)
{
	uint32_t nr = P->n_rules;
	bool *nullable = rules_nullable(P);
	uint8_t *color = calloc(nr, 1);
	uint32_t *stack = malloc((size_t)nr * 3 * sizeof(uint32_t));	/* (rule, alt, index) */
	if (!nullable || !color || !stack) {
		fail_nomem(P);
		goto out;
	}
	/* A frame (rule, alt, index) enumerates the rule's edges in order. */
	for (uint32_t root = 0; root < nr && !P->failed; root++) {
		if (color[root])
			continue;
		size_t sp = 0;
		stack[sp++] = root;
		stack[sp++] = 0;
		stack[sp++] = 0;
		color[root] = 1;
		while (sp > 0 && !P->failed) {
			uint32_t r = stack[sp - 3];
			uint32_t alt = stack[sp - 2], idx = stack[sp - 1];
			uint32_t next = UINT32_MAX;
			while (alt < P->rules[r].n_alts) {
				const struct evec *a = &P->rules[r].alts[alt];
				bool stop = idx >= a->n || a->v[idx].type != GRAM_REF ||
					    (idx > 0 && !nullable[a->v[idx - 1].arg]);
				if (stop) {
					alt++, idx = 0;
					continue;
				}
				next = a->v[idx].arg;
				idx++;
				break;
			}
			stack[sp - 2] = alt;
			stack[sp - 1] = idx;
			if (next == UINT32_MAX) {
				color[r] = 2;
				sp -= 3;
			} else if (color[next] == 1) {
				size_t from = sp - 3;
				while (stack[from] != next)
					from -= 3;
				left_recursion_fail(P, stack, from, sp);
			} else if (color[next] == 0) {
				color[next] = 1;
				stack[sp++] = next;
				stack[sp++] = 0;
				stack[sp++] = 0;
			}
		}
	}
out:
	free(nullable);
	free(color);
	free(stack);
}

static void flatten(struct gbnf *P, struct grammar *g)
{
	uint32_t n_alts = 0, n_elems = 0;
	for (uint32_t r = 0; r < P->n_rules; r++) {
		n_alts += P->rules[r].n_alts;
		for (uint32_t k = 0; k < P->rules[r].n_alts; k++)
			n_elems += P->rules[r].alts[k].n + 1;
	}
	g->elems = malloc((size_t)n_elems * sizeof(*g->elems));
	g->alts = malloc((size_t)(n_alts ? n_alts : 1) * sizeof(*g->alts));
	g->rules = malloc((size_t)P->n_rules * sizeof(*g->rules));
	if (!g->elems || !g->alts || !g->rules) {
		fail_nomem(P);
		return;
	}
	uint32_t e = 0, ai = 0;
	for (uint32_t r = 0; r < P->n_rules; r++) {
		g->rules[r] = (struct gram_rule){ ai, P->rules[r].n_alts };
		for (uint32_t k = 0; k < P->rules[r].n_alts; k++) {
			const struct evec *a = &P->rules[r].alts[k];
			g->alts[ai++] = e;
			if (a->n)
				memcpy(g->elems + e, a->v, a->n * sizeof(*a->v));
			e += a->n;
			g->elems[e++] = (struct gram_elem){ GRAM_END, 0 };
		}
	}
	g->n_elems = n_elems;
	g->n_alts = n_alts;
	g->n_rules = P->n_rules;
	g->classes = P->classes;
	g->n_classes = P->n_classes;
	g->ranges = P->ranges;
	g->n_ranges = P->n_ranges;
	P->classes = NULL;
	P->ranges = NULL;
}

int grammar_parse(struct grammar **out, const char *text, size_t len, const char *root,
		  char *err, size_t err_len)
{
	struct gbnf P = { .s = text, .len = len, .err = err, .err_len = err_len };
	struct grammar *g = NULL;
	*out = NULL;
	if (err && err_len)
		err[0] = 0;
	if (!root)
		root = "root";
	/* Never NULL, so that an empty class's ranges are a pointer into it. */
	if (!gram_grow((void **)&P.ranges, &P.cap_ranges, 1, sizeof(*P.ranges), 8)) {
		fail_nomem(&P);
		goto done;
	}
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t n = utf8_len((const unsigned char *)text + i, len - i, &cp);
		if (n == 0) {
			fail_at(&P, i, "invalid UTF-8 in grammar text");
			goto done;
		}
		if (cp == 0) {
			fail_at(&P, i, "NUL byte in grammar text");
			goto done;
		}
		i += n;
	}
	skip_space(&P, true);
	if (P.pos >= len) {
		fail_at(&P, P.pos, "empty grammar");
		goto done;
	}
	while (!P.failed && P.pos < len) {
		parse_rule(&P);
		skip_space(&P, true);
	}
	if (P.failed)
		goto done;
	for (uint32_t r = 0; r < P.n_rules; r++)
		if (P.rules[r].name && !P.rules[r].defined) {
			fail_at(&P, P.rules[r].ref_pos, "undefined rule '%.*s'",
				(int)P.rules[r].name_len, P.rules[r].name);
			goto done;
		}
	uint32_t root_id = UINT32_MAX;
	for (uint32_t r = 0; r < P.n_rules; r++)
		if (P.rules[r].name && P.rules[r].name_len == strlen(root) &&
		    memcmp(P.rules[r].name, root, P.rules[r].name_len) == 0)
			root_id = r;
	if (root_id == UINT32_MAX) {
		fail_at(&P, 0, "no rule named '%s'", root);
		goto done;
	}
	star_bodies_nonempty(&P);
	if (!P.failed)
		check_left_recursion(&P);
	if (P.failed)
		goto done;
	g = calloc(1, sizeof(*g));
	if (!g) {
		fail_nomem(&P);
		goto done;
	}
	flatten(&P, g);
	g->root = root_id;
	if (P.failed) {
		grammar_free(g);
		g = NULL;
	}
done:
	for (uint32_t r = 0; r < P.n_rules; r++) {
		for (uint32_t k = 0; k < P.rules[r].n_alts; k++)
			free(P.rules[r].alts[k].v);
		free(P.rules[r].alts);
	}
	free(P.rules);
	free(P.ranges);
	free(P.classes);
	if (P.failed)
		return P.ret;
	*out = g;
	return 0;
}

void grammar_free(struct grammar *g)
{
	if (!g)
		return;
	free(g->elems);
	free(g->alts);
	free(g->rules);
	free(g->classes);
	free(g->ranges);
	free(g);
}

size_t grammar_rule_count(const struct grammar *g)
{
	return g->n_rules;
}
