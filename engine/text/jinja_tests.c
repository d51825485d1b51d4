/*
 * jinja_tests — the "is" tests of the subset, with Jinja2 3.1's semantics
 * (jinja2/tests.py):
 *   boolean callable defined divisibleby eq equalto escaped even false
 *   filter float ge greaterthan gt in integer iterable le lessthan lower
 *   lt mapping ne none number odd sameas sequence string test true
 *   undefined upper
 * As in Jinja, an Undefined is iterable and a sequence, a namespace is not
 * a mapping, and bool counts as a number but not as an integer.
 */
#include <errno.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

enum jtest_id {
	T_BOOLEAN, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_ESCAPED, T_EVEN, T_FALSE, T_FILTER,
	T_FLOAT, T_GE, T_GREATERTHAN, T_GT, T_IN, T_INTEGER, T_ITERABLE, T_LE, T_LESSTHAN, T_LOWER, T_LT, T_MAPPING,
	T_NE, T_NONE, T_NUMBER, T_ODD, T_SAMEAS, T_SEQUENCE, T_STRING, T_TEST, T_TRUE, T_UNDEFINED, T_UPPER,
};

static const char *const test_names[] = {
	"boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
	"float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping",
	"ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper",
};

int jinja_test_id(const char *name)
{
	for (size_t i = 0; i < sizeof test_names / sizeof test_names[0]; i++)
		if (!strcmp(test_names[i], name))
			return (int)i;
	return -1;
}

static int cmp_test(struct jrender *r, int id, struct jv in, struct jv arg, bool *out)
{
	bool lt;
	switch (id) {
	case T_EQ:
	case T_EQUALTO:
	case T_NE: {
		int e = jv_equal(r, in, arg);
		if (e < 0)
			return -1;
		*out = id == T_NE ? !e : e;
		return 0;
	}
	case T_LT:
	case T_LESSTHAN: return jv_less(r, in, arg, "<", out);
	case T_GT:
	case T_GREATERTHAN: return jv_less(r, arg, in, ">", out);
	case T_LE:
		if (jv_less(r, arg, in, "<=", &lt))
			return -1;
		*out = !lt;
		return 0;
	case T_GE:
		if (jv_less(r, in, arg, ">=", &lt))
			return -1;
		*out = !lt;
		return 0;
	default:	/* in */
		return jr_contains(r, in, arg, out);
	}
}

/* str(v).islower() / isupper() on ASCII letters: some cased letter, none of the other case. */
static int case_test(struct jrender *r, bool lower, struct jv in, bool *out)
{
	struct jv s = jv_to_str(r, in);
	if (r->rc)
		return -1;
	bool cased = false, ok = true;
	for (size_t i = 0; i < s.u.s->len && ok; i++) {
		char c = s.u.s->p[i];
		ok = lower ? !(c >= 'A' && c <= 'Z') : !(c >= 'a' && c <= 'z');
		cased = cased || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
	}
	*out = ok && cased;
	return 0;
}

int jr_test(struct jrender *r, struct jscope *s, int id, struct jv in, const struct jv *args, size_t n_args,
	    bool *out)
{
	(void)s;
	static const uint8_t want_args[] = { [T_DIVISIBLEBY] = 1, [T_EQ] = 1, [T_EQUALTO] = 1,
					     [T_GE] = 1, [T_GREATERTHAN] = 1, [T_GT] = 1, [T_IN] = 1, [T_LE] = 1,
					     [T_LESSTHAN] = 1, [T_LT] = 1, [T_NE] = 1, [T_SAMEAS] = 1 };
	size_t want = (size_t)id < sizeof want_args ? want_args[id] : 0;
	if (n_args != want)
		return jr_fail(r, -EINVAL, "the test '%s' takes %zu argument(s), %zu given", test_names[id], want, n_args);
	if (jr_step(r))
		return -1;
	struct jv a = want ? args[0] : jv_none();
	switch (id) {
	case T_DEFINED: *out = in.kind != JV_UNDEF; return 0;
	case T_UNDEFINED: *out = in.kind == JV_UNDEF; return 0;
	case T_NONE: *out = in.kind == JV_NONE; return 0;
	case T_BOOLEAN: *out = in.kind == JV_BOOL; return 0;
	case T_TRUE: *out = in.kind == JV_BOOL && in.u.b; return 0;
	case T_FALSE: *out = in.kind == JV_BOOL && !in.u.b; return 0;
	case T_INTEGER: *out = in.kind == JV_INT; return 0;
	case T_FLOAT: *out = in.kind == JV_FLOAT; return 0;
	case T_NUMBER: *out = in.kind == JV_INT || in.kind == JV_BOOL || in.kind == JV_FLOAT; return 0;
	case T_STRING: *out = in.kind == JV_STR; return 0;
	case T_MAPPING: *out = in.kind == JV_DICT; return 0;
	case T_ITERABLE:
	case T_SEQUENCE:
		*out = in.kind == JV_STR || in.kind == JV_LIST || in.kind == JV_DICT || in.kind == JV_UNDEF;
		return 0;
	case T_CALLABLE: *out = in.kind == JV_MACRO || in.kind == JV_FUNC || in.kind == JV_METHOD; return 0;
	case T_ESCAPED: *out = false; return 0;
	case T_ODD:
	case T_EVEN:
	case T_DIVISIBLEBY: {	/* value % 2 == 1, value % n == 0, as Python computes them */
		struct jv n = id == T_DIVISIBLEBY ? a : jv_int(2), m;
		if (in.kind == JV_UNDEF)
			return jv_undef_fail(r, in);
		if (jr_binop(r, '%', in, n, &m))
			return -1;
		bool zero = m.kind == JV_FLOAT ? m.u.f == 0 : m.kind == JV_INT ? m.u.i == 0 : !jv_truthy(m);
		bool one = m.kind == JV_FLOAT ? m.u.f == 1 : m.kind == JV_INT && m.u.i == 1;
		*out = id == T_ODD ? one : zero;
		return 0;
	}
	case T_LOWER:
	case T_UPPER: return case_test(r, id == T_LOWER, in, out);
	case T_SAMEAS:
		if (in.kind != a.kind)
			*out = false;
		else if (in.kind == JV_NONE || in.kind == JV_UNDEF)
			*out = true;
		else if (in.kind == JV_BOOL)
			*out = in.u.b == a.u.b;
		else if (in.kind == JV_INT)	/* CPython caches -5..256 */
			*out = in.u.i == a.u.i && in.u.i >= -5 && in.u.i <= 256;
		else
			*out = in.kind != JV_FLOAT && in.u.l == a.u.l;
		return 0;
	case T_FILTER:
	case T_TEST:
		*out = in.kind == JV_STR && (id == T_FILTER ? jinja_filter_id(in.u.s->p) : jinja_test_id(in.u.s->p)) >= 0;
		return 0;
	default: return cmp_test(r, id, in, a, out);
	}
}
