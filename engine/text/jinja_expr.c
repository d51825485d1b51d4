/*
 * jinja_expr — expressions: names, literals, Python's operators on the
 * value type, attribute and item access as Jinja's sandbox does them
 * (getattr first for attributes, getitem first for subscripts, an
 * Undefined rather than an error for what is missing), slices, calls of
 * macros and of the globals range, namespace, dict, raise_exception and
 * strftime_now.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/jinja_internal.h"


static bool is_intlike(struct jv v)
{
	return v.kind == JV_INT || v.kind == JV_BOOL;
}

static int64_t as_int(struct jv v)
{
	return v.kind == JV_BOOL ? v.u.b : v.u.i;
}

static double as_float(struct jv v)
{
	return v.kind == JV_FLOAT ? v.u.f : (double)as_int(v);
}

static bool is_number(struct jv v)
{
	return is_intlike(v) || v.kind == JV_FLOAT;
}

static int type_error(struct jrender *r, const char *op, struct jv a, struct jv b)
{
	if (a.kind == JV_UNDEF)
		return jv_undef_fail(r, a);
	if (b.kind == JV_UNDEF)
		return jv_undef_fail(r, b);
	if (!strcmp(op, "+") && (a.kind == JV_STR || a.kind == JV_LIST))
		return jr_fail(r, -EINVAL, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a), jv_type_name(b),
			       jv_type_name(a));
	return jr_fail(r, -EINVAL, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
		       jv_type_name(b));
}

static int overflow(struct jrender *r)
{
	return jr_fail(r, -EINVAL, "integer overflow (integers are 64-bit here)");
}

/* s * n or l * n, checked against the limits before anything is made. */
static int repeat(struct jrender *r, struct jv seq, int64_t times, struct jv *out)
{
	if (times < 0)
		times = 0;
	size_t unit = seq.kind == JV_STR ? seq.u.s->len : seq.u.l->n * sizeof(struct jv);
	if (unit && (uint64_t)times > r->lim->memory_bytes_max / unit)
		return jr_fail(r, -E2BIG, "the template uses more than %zu bytes of memory", r->lim->memory_bytes_max);
	if (seq.kind == JV_STR) {
		char *p = ja_alloc(&r->a, unit * (size_t)times + 1);
		if (!p)
			return jr_oom(r);
		for (int64_t i = 0; i < times; i++)
			memcpy(p + unit * (size_t)i, seq.u.s->p, unit);
		*out = jv_str(r, p, unit * (size_t)times);
		return r->rc ? -1 : 0;
	}
	struct jlist *l = jlist_new(r, seq.u.l->n * (size_t)times);
	if (!l)
		return -1;
	for (int64_t i = 0; i < times; i++)
		for (size_t k = 0; k < seq.u.l->n; k++)
			l->v[l->n++] = seq.u.l->v[k];
	*out = jv_list(l, seq.flags & JV_TUPLE);
	return 0;
}

int jr_binop(struct jrender *r, int op, struct jv a, struct jv b, struct jv *out)
{
	const char *name = op == JOP_FLOORDIV ? "//" : op == JOP_POW ? "** or pow()" : (const char[]){ (char)op, 0 };
	if (a.kind == JV_UNDEF || b.kind == JV_UNDEF)
		return type_error(r, name, a, b);
	if (op == '+' && a.kind == JV_STR && b.kind == JV_STR) {
		size_t n = a.u.s->len + b.u.s->len;
		char *p = ja_alloc(&r->a, n + 1);
		if (!p)
			return jr_oom(r);
		memcpy(p, a.u.s->p, a.u.s->len);
		memcpy(p + a.u.s->len, b.u.s->p, b.u.s->len);
		*out = jv_str(r, p, n);
		return r->rc ? -1 : 0;
	}
	if (op == '+' && a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JV_TUPLE) == (b.flags & JV_TUPLE)) {
		struct jlist *l = jlist_new(r, a.u.l->n + b.u.l->n);
		if (!l)
			return -1;
		for (size_t i = 0; i < a.u.l->n; i++)
			l->v[l->n++] = a.u.l->v[i];
		for (size_t i = 0; i < b.u.l->n; i++)
			l->v[l->n++] = b.u.l->v[i];
		*out = jv_list(l, a.flags & JV_TUPLE);
		return 0;
	}
	if (op == '*' && (a.kind == JV_STR || a.kind == JV_LIST) && is_intlike(b))
		return repeat(r, a, as_int(b), out);
	if (op == '*' && (b.kind == JV_STR || b.kind == JV_LIST) && is_intlike(a))
		return repeat(r, b, as_int(a), out);
	if (op == '%' && a.kind == JV_STR)
		return jr_fail(r, -EINVAL, "string formatting with %% is not supported");
	if (!is_number(a) || !is_number(b))
		return type_error(r, name, a, b);
	if (is_intlike(a) && is_intlike(b) && op != '/') {
		int64_t x = as_int(a), y = as_int(b), z;
		switch (op) {
		case '+':
			if (__builtin_add_overflow(x, y, &z))
				return overflow(r);
			break;
		case '-':
			if (__builtin_sub_overflow(x, y, &z))
				return overflow(r);
			break;
		case '*':
			if (__builtin_mul_overflow(x, y, &z))
				return overflow(r);
			break;
		case JOP_FLOORDIV:
		case '%':
			if (y == 0)
				return jr_fail(r, -EINVAL, op == '%' ? "integer modulo by zero" : "integer division or modulo by zero");
			if (x == INT64_MIN && y == -1)
				return overflow(r);
			z = op == '%' ? x % y : x / y;
			if (op == '%' && z != 0 && ((z < 0) != (y < 0)))
				z += y;
			else if (op == JOP_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0)))
				z -= 1;
			break;
		default:	/* ** */
			if (y < 0) {
				*out = jv_float(pow((double)x, (double)y));
				return 0;
			}
			if (x == 0 || x == 1) {
				z = y == 0 ? 1 : x;
			} else if (x == -1) {
				z = y % 2 ? -1 : 1;
			} else {	/* |x| >= 2 overflows within 63 steps */
				z = 1;
				for (int64_t i = 0; i < y; i++)
					if (__builtin_mul_overflow(z, x, &z))
						return overflow(r);
			}
			break;
		}
		*out = jv_int(z);
		return 0;
	}
	double x = as_float(a), y = as_float(b), z;
	switch (op) {
	case '+': z = x + y; break;
	case '-': z = x - y; break;
	case '*': z = x * y; break;
	case '/':
		if (y == 0)
			return jr_fail(r, -EINVAL, "division by zero");
		z = x / y;
		break;
	case JOP_FLOORDIV:
	case '%':
		if (y == 0)
			return jr_fail(r, -EINVAL, "float floor division by zero");
		z = fmod(x, y);
		if (op == '%') {
			if (z != 0 && ((z < 0) != (y < 0)))
				z += y;
		} else {
			z = floor(x / y);
		}
		break;
	default: z = pow(x, y); break;
	}
	*out = jv_float(z);
	return 0;
}

int jr_contains(struct jrender *r, struct jv item, struct jv seq, bool *out)
{
	switch (seq.kind) {
	case JV_STR:
		if (item.kind != JV_STR)
			return jr_fail(r, -EINVAL, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
		*out = item.u.s->len == 0 || memmem(seq.u.s->p, seq.u.s->len, item.u.s->p, item.u.s->len);
		return 0;
	case JV_LIST:
		for (size_t i = 0; i < seq.u.l->n; i++) {
			int e = jv_equal(r, item, seq.u.l->v[i]);
			if (e < 0)
				return -1;
			if (e) {
				*out = true;
				return 0;
			}
		}
		*out = false;
		return 0;
	case JV_DICT:
		if (item.kind == JV_LIST && !(item.flags & JV_TUPLE))
			return jr_fail(r, -EINVAL, "unhashable type: 'list'");
		if (item.kind == JV_DICT)
			return jr_fail(r, -EINVAL, "unhashable type: 'dict'");
		*out = jdict_find(seq.u.d, item) != NULL;
		return 0;
	case JV_UNDEF:	/* Undefined iterates as empty */
		*out = false;
		return 0;
	default:
		return jr_fail(r, -EINVAL, "argument of type '%s' is not iterable", jv_type_name(seq));
	}
}

static int compare(struct jrender *r, int op, struct jv a, struct jv b, bool *out)
{
	int e;
	bool lt;
	switch (op) {
	case JOP_EQ:
	case JOP_NE:
		if ((e = jv_equal(r, a, b)) < 0)
			return -1;
		*out = op == JOP_EQ ? e : !e;
		return 0;
	case '<': return jv_less(r, a, b, "<", out);
	case '>': return jv_less(r, b, a, ">", out);
	case JOP_LE:
		if (jv_less(r, b, a, "<=", &lt))
			return -1;
		*out = !lt;
		return 0;
	case JOP_GE:
		if (jv_less(r, a, b, ">=", &lt))
			return -1;
		*out = !lt;
		return 0;
	case 'i': return jr_contains(r, a, b, out);
	default:
		if (jr_contains(r, a, b, &lt))
			return -1;
		*out = !lt;
		return 0;
	}
}

static bool hashable(struct jv v)
{
	if (v.kind == JV_LIST && (v.flags & JV_TUPLE)) {
		for (size_t i = 0; i < v.u.l->n; i++)
			if (!hashable(v.u.l->v[i]))
				return false;
		return true;
	}
	return v.kind != JV_LIST && v.kind != JV_DICT && v.kind != JV_UNDEF;
}

static int eval_list(struct jrender *r, struct jscope *s, const struct jnode *n, struct jv *out)
{
	struct jlist *l = jlist_new(r, n->n);
	if (!l)
		return -1;
	for (size_t i = 0; i < n->n; i++)
		if (jr_eval(r, s, n->kids[i], &l->v[l->n++]))
			return -1;
	*out = jv_list(l, n->type == JN_TUPLE);
	return 0;
}

static int eval_dict(struct jrender *r, struct jscope *s, const struct jnode *n, struct jv *out)
{
	struct jdict *d = jdict_new(r);
	if (!d)
		return -1;
	for (size_t i = 0; i < n->n; i++) {
		struct jv k, v;
		if (jr_eval(r, s, n->kids[i], &k) || jr_eval(r, s, n->kids2[i], &v))
			return -1;
		if (!hashable(k))
			return k.kind == JV_UNDEF ? jv_undef_fail(r, k)
						  : jr_fail(r, -EINVAL, "unhashable type: '%s'", jv_type_name(k));
		if (jdict_set(r, d, k, v))
			return -1;
	}
	*out = jv_dict(d);
	return 0;
}

/* Arguments of a call, filter or test node, evaluated in order. */
static int eval_args(struct jrender *r, struct jscope *s, const struct jnode *n, struct jv **args, struct jv **kw)
{
	struct jv *v = ja_alloc(&r->a, (n->n + n->n2 + 1) * sizeof(*v));
	if (!v)
		return jr_oom(r);
	for (size_t i = 0; i < n->n; i++)
		if (jr_eval(r, s, n->kids[i], &v[i]))
			return -1;
	for (size_t i = 0; i < n->n2; i++)
		if (jr_eval(r, s, n->kids2[i], &v[n->n + i]))
			return -1;
	*args = v;
	*kw = v + n->n;
	return 0;
}

static int eval_name(struct jrender *r, struct jscope *s, const struct jnode *n, struct jv *out)
{
	struct jv *v = jscope_lookup(s, n->name);
	if (v) {
		*out = *v;
		return 0;
	}
	static const struct {
		const char *name;
		enum jfunc f;
	} globals[] = { { "range", JF_RANGE }, { "namespace", JF_NAMESPACE }, { "dict", JF_DICT },
			{ "raise_exception", JF_RAISE }, { "strftime_now", JF_STRFTIME } };
	for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
		if (!strcmp(n->name, globals[i].name)) {
			*out = (struct jv){ .kind = JV_FUNC, .u.i = globals[i].f };
			return 0;
		}
	*out = jv_undef(n->name);
	return 0;
}

static int eval_node(struct jrender *r, struct jscope *s, const struct jnode *n, struct jv *out)
{
	struct jv a, b, *args, *kw;
	bool t;
	switch (n->type) {
	case JN_CONST: *out = n->value; return 0;
	case JN_NAME: return eval_name(r, s, n, out);
	case JN_LIST:
	case JN_TUPLE: return eval_list(r, s, n, out);
	case JN_DICT: return eval_dict(r, s, n, out);
	case JN_GETATTR:
		if (jr_eval(r, s, n->a, &a))
			return -1;
		r->line = n->line;
		r->col = n->col;
		return jr_getattr(r, a, n->name, out);
	case JN_GETITEM:
		if (jr_eval(r, s, n->a, &a))
			return -1;
		if (n->b->type == JN_SLICE) {
			struct jv part[3] = { jv_none(), jv_none(), jv_none() };
			const struct jnode *sl[3] = { n->b->a, n->b->b, n->b->c };
			for (int i = 0; i < 3; i++)
				if (sl[i] && jr_eval(r, s, sl[i], &part[i]))
					return -1;
			r->line = n->line;
			r->col = n->col;
			return jr_slice(r, a, part[0], part[1], part[2], out);
		}
		if (jr_eval(r, s, n->b, &b))
			return -1;
		r->line = n->line;
		r->col = n->col;
		return jr_getitem(r, a, b, out);
	case JN_CALL:
		if (jr_eval(r, s, n->a, &a) || eval_args(r, s, n, &args, &kw))
			return -1;
		r->line = n->line;
		r->col = n->col;
		return jr_call(r, s, a, args, n->n, n->names, kw, n->n2, out);
	case JN_FILTER:
		if (jr_eval(r, s, n->a, &a) || eval_args(r, s, n, &args, &kw))
			return -1;
		r->line = n->line;
		r->col = n->col;
		return jr_filter(r, s, n->op, a, args, n->n, n->names, kw, n->n2, out);
	case JN_TEST:
		if (jr_eval(r, s, n->a, &a) || eval_args(r, s, n, &args, &kw))
			return -1;
		r->line = n->line;
		r->col = n->col;
		if (n->n2)
			return jr_fail(r, -EINVAL, "tests take no keyword arguments here");
		if (jr_test(r, s, n->op, a, args, n->n, &t))
			return -1;
		*out = jv_bool(t);
		return 0;
	case JN_NOT:
		if (jr_eval(r, s, n->a, &a))
			return -1;
		*out = jv_bool(!jv_truthy(a));
		return 0;
	case JN_NEG:
	case JN_POS:
		if (jr_eval(r, s, n->a, &a))
			return -1;
		if (a.kind == JV_UNDEF)
			return jv_undef_fail(r, a);
		if (!is_number(a))
			return jr_fail(r, -EINVAL, "bad operand type for unary %c: '%s'", n->type == JN_NEG ? '-' : '+',
				       jv_type_name(a));
		if (a.kind == JV_FLOAT)
			*out = jv_float(n->type == JN_NEG ? -a.u.f : a.u.f);
		else if (n->type == JN_NEG && as_int(a) == INT64_MIN)
			return overflow(r);
		else
			*out = jv_int(n->type == JN_NEG ? -as_int(a) : as_int(a));
		return 0;
	case JN_BINOP:
		if (jr_eval(r, s, n->a, &a) || jr_eval(r, s, n->b, &b))
			return -1;
		r->line = n->line;
		r->col = n->col;
		return jr_binop(r, n->op, a, b, out);
	case JN_AND:
	case JN_OR:
		if (jr_eval(r, s, n->a, &a))
			return -1;
		if (jv_truthy(a) == (n->type == JN_OR)) {
			*out = a;
			return 0;
		}
		return jr_eval(r, s, n->b, out);
	case JN_COMPARE:
		if (jr_eval(r, s, n->a, &a))
			return -1;
		for (size_t i = 0; i < n->n; i++) {
			if (jr_eval(r, s, n->kids[i], &b))
				return -1;
			r->line = n->line;
			r->col = n->col;
			if (compare(r, n->ops[i], a, b, &t))
				return -1;
			if (!t)
				break;
			a = b;
		}
		*out = jv_bool(t);
		return 0;
	case JN_CONCAT: {
		struct jbuf buf = { 0 };
		for (size_t i = 0; i < n->n; i++)
			if (jr_eval(r, s, n->kids[i], &a) || jv_write_str(r, &buf, a)) {
				free(buf.p);
				return -1;
			}
		*out = jbuf_take(r, &buf);
		return r->rc ? -1 : 0;
	}
	case JN_COND:
		if (jr_eval(r, s, n->a, &a))
			return -1;
		if (jv_truthy(a))
			return jr_eval(r, s, n->b, out);
		if (n->c)
			return jr_eval(r, s, n->c, out);
		*out = jv_undef("the inline if-expression's else");
		return 0;
	default:
		return jr_fail(r, -EINVAL, "internal error: node %d is not an expression", n->type);
	}
}

int jr_eval(struct jrender *r, struct jscope *s, const struct jnode *n, struct jv *out)
{
	if (++r->depth > JR_EVAL_DEPTH_MAX)
		return jr_fail(r, -E2BIG, "the template nests evaluation more than %d deep", JR_EVAL_DEPTH_MAX);
	r->line = n->line;
	r->col = n->col;
	int rc = jr_step(r) ? -1 : eval_node(r, s, n, out);
	r->depth--;
	return rc || r->rc ? -1 : 0;
}

static struct jv undef_attr(struct jv obj, const char *name, int why)
{
	return (struct jv){ .kind = JV_UNDEF, .flags = (uint8_t)why, .owner = obj.kind, .u.name = name };
}

int jr_getattr(struct jrender *r, struct jv obj, const char *name, struct jv *out)
{
	if (obj.kind == JV_UNDEF)
		return jv_undef_fail(r, obj);
	if (name[0] == '_') {
		*out = undef_attr(obj, name, JV_UNDEF_UNSAFE);
		return 0;
	}
	int m = jr_method_lookup(r, obj, name, out);
	if (m)
		return m < 0 ? -1 : 0;
	struct jv *v = NULL;
	if (obj.kind == JV_DICT || obj.kind == JV_NS)
		v = jdict_get(obj.u.d, name, strlen(name));
	else if (obj.kind == JV_LOOP && (m = jr_loop_attr(r, obj.u.lp, name, out)))
		return m < 0 ? -1 : 0;
	*out = v ? *v : undef_attr(obj, name, JV_UNDEF_ATTR);
	return 0;
}

int jr_getitem(struct jrender *r, struct jv obj, struct jv key, struct jv *out)
{
	if (obj.kind == JV_UNDEF)
		return jv_undef_fail(r, obj);
	if (obj.kind == JV_DICT || obj.kind == JV_NS) {
		struct jv *v = jdict_find(obj.u.d, key);
		if (v) {
			*out = *v;
			return 0;
		}
	} else if ((obj.kind == JV_LIST || obj.kind == JV_STR) && is_intlike(key)) {
		int64_t i = as_int(key);
		size_t len = obj.kind == JV_LIST ? obj.u.l->n : utf8_count(obj.u.s->p, obj.u.s->len);
		if (i < 0)
			i += (int64_t)len;
		if (i >= 0 && (uint64_t)i < len) {
			if (obj.kind == JV_LIST) {
				*out = obj.u.l->v[i];
				return 0;
			}
			size_t off = utf8_offset(obj.u.s->p, obj.u.s->len, (size_t)i);
			uint32_t cp;
			size_t k = utf8_next(obj.u.s->p + off, obj.u.s->len - off, &cp);
			*out = jv_str(r, obj.u.s->p + off, k);
			return r->rc ? -1 : 0;
		}
	}
	if (key.kind == JV_STR)
		return jr_getattr(r, obj, key.u.s->p, out);
	struct jv name = jv_to_str(r, key);
	if (r->rc)
		return -1;
	*out = undef_attr(obj, name.u.s->p, JV_UNDEF_ATTR);
	return 0;
}

int jr_iterate(struct jrender *r, struct jv v, struct jlist **out)
{
	struct jlist *l;
	switch (v.kind) {
	case JV_LIST:
		*out = v.u.l;
		return 0;
	case JV_UNDEF:
		return (*out = jlist_new(r, 0)) ? 0 : -1;
	case JV_DICT:
		if (!(l = jlist_new(r, v.u.d->n)))
			return -1;
		for (size_t i = 0; i < v.u.d->n; i++)
			l->v[l->n++] = v.u.d->k[i];
		*out = l;
		return 0;
	case JV_STR:
		if (!(l = jlist_new(r, v.u.s->len)))
			return -1;
		for (size_t i = 0; i < v.u.s->len;) {
			uint32_t cp;
			size_t k = utf8_next(v.u.s->p + i, v.u.s->len - i, &cp);
			if ((l->v[l->n++] = jv_str(r, v.u.s->p + i, k)), r->rc)
				return -1;
			i += k;
		}
		*out = l;
		return 0;
	default:
		return jr_fail(r, -EINVAL, "'%s' object is not iterable", jv_type_name(v));
	}
}

/* Python's slice.indices(): start, stop, step for a sequence of len items. */
int jr_slice(struct jrender *r, struct jv obj, struct jv start, struct jv stop, struct jv step, struct jv *out)
{
	if (obj.kind == JV_UNDEF)
		return jv_undef_fail(r, obj);
	if (obj.kind != JV_LIST && obj.kind != JV_STR) {
		*out = undef_attr(obj, "[slice]", JV_UNDEF_ATTR);
		return 0;
	}
	struct jv parts[3] = { start, stop, step };
	for (int i = 0; i < 3; i++)
		if (parts[i].kind != JV_NONE && !is_intlike(parts[i]))
			return jr_fail(r, -EINVAL, "slice indices must be integers or None");
	int64_t st = step.kind == JV_NONE ? 1 : as_int(step);
	if (st == 0)
		return jr_fail(r, -EINVAL, "slice step cannot be zero");
	int64_t len = (int64_t)(obj.kind == JV_LIST ? obj.u.l->n : utf8_count(obj.u.s->p, obj.u.s->len));
	int64_t lower = st < 0 ? -1 : 0, upper = st < 0 ? len - 1 : len, b, e;
	if (start.kind == JV_NONE) {
		b = st < 0 ? upper : lower;
	} else {
		b = as_int(start);
		if (b < 0)
			b = b + len < lower ? lower : b + len;
		else if (b > upper)
			b = upper;
	}
	if (stop.kind == JV_NONE) {
		e = st < 0 ? lower : upper;
	} else {
		e = as_int(stop);
		if (e < 0)
			e = e + len < lower ? lower : e + len;
		else if (e > upper)
			e = upper;
	}
	size_t *offs = NULL;
	if (obj.kind == JV_STR) {	/* byte offset of each code point, and the end */
		if (!(offs = ja_alloc(&r->a, ((size_t)len + 1) * sizeof(*offs))))
			return jr_oom(r);
		uint32_t cp;
		for (size_t i = 0, off = 0; i <= (size_t)len; i++) {
			offs[i] = off;
			if (off < obj.u.s->len)
				off += utf8_next(obj.u.s->p + off, obj.u.s->len - off, &cp);
		}
		if (st == 1) {
			size_t from = offs[b], to = e > b ? offs[e] : from;
			*out = jv_str(r, obj.u.s->p + from, to - from);
			return r->rc ? -1 : 0;
		}
	}
	struct jlist *l = jlist_new(r, 0);
	struct jbuf sb = { 0 };
	if (!l)
		return -1;
	for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
		int rc = obj.kind == JV_LIST ? jlist_push(r, l, obj.u.l->v[i])
					     : jbuf_put(r, &sb, obj.u.s->p + offs[i], offs[i + 1] - offs[i]);
		if (rc) {
			free(sb.p);
			return -1;
		}
	}
	if (obj.kind == JV_STR) {
		*out = jbuf_take(r, &sb);
		return r->rc ? -1 : 0;
	}
	*out = jv_list(l, obj.flags & JV_TUPLE);
	return 0;
}
