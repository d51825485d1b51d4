/*
 * jinja_parse_expr — expressions, ported from Jinja2 3.1's parser
 * (jinja2/parser.py, parse_expression down to parse_primary) so that
 * precedence and associativity are Jinja's: condexpr < or < and < not <
 * comparisons < + - < ~ < * / // % < ** < unary - + < postfix (. [] ())
 * < filters and tests. Filter and test names are resolved here: an unknown
 * one is a parse error, as Jinja reports it when compiling.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

const struct jtoken *jp_cur(const struct jparser *p)
{
	return &p->t[p->i];
}

const struct jtoken *jp_peek(const struct jparser *p)
{
	return p->i + 1 < p->n ? &p->t[p->i + 1] : &p->t[p->n - 1];
}

void jp_next(struct jparser *p)
{
	if (p->i + 1 < p->n)
		p->i++;
}

bool jp_is_name(const struct jparser *p, const char *name)
{
	const struct jtoken *t = jp_cur(p);
	return t->type == JT_NAME && strcmp(t->s, name) == 0;
}

bool jp_is_op(const struct jparser *p, int op)
{
	const struct jtoken *t = jp_cur(p);
	return t->type == JT_OP && t->op == op;
}

bool jp_skip_name(struct jparser *p, const char *name)
{
	if (!jp_is_name(p, name))
		return false;
	jp_next(p);
	return true;
}

bool jp_skip_op(struct jparser *p, int op)
{
	if (!jp_is_op(p, op))
		return false;
	jp_next(p);
	return true;
}

static const char *describe(const struct jtoken *t, char *buf, size_t n)
{
	static const char *const names[] = { "end of template", "template data", "begin of print statement",
					     "end of print statement", "begin of statement block",
					     "end of statement block", "name", "string", "integer", "float", "operator" };
	if (t->type == JT_NAME)
		snprintf(buf, n, "%.40s", t->s);
	else if (t->type == JT_OP && t->op < 256)
		snprintf(buf, n, "%c", t->op);
	else if (t->type == JT_OP)
		snprintf(buf, n, "%s", (const char *[]){ "//", "**", "==", "!=", ">=", "<=" }[t->op - JOP_FLOORDIV]);
	else
		snprintf(buf, n, "%s", names[t->type]);
	return buf;
}

int jp_fail(struct jparser *p, int code, const char *fmt, ...)
{
	if (p->rc)
		return p->rc;
	const struct jtoken *t = jp_cur(p);
	p->rc = code;
	p->err->line = t->line;
	p->err->col = t->col;
	p->err->raised = false;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
	va_end(ap);
	return code;
}

static int fail_unexpected(struct jparser *p, const char *what)
{
	char buf[64];
	return jp_fail(p, -EINVAL, "expected %s, got '%s'", what, describe(jp_cur(p), buf, sizeof buf));
}

int jp_expect_op(struct jparser *p, int op)
{
	if (jp_skip_op(p, op))
		return 0;
	char what[16];
	snprintf(what, sizeof what, "'%c'", op);
	return fail_unexpected(p, what);
}

int jp_expect_type(struct jparser *p, int type)
{
	if (jp_cur(p)->type == type) {
		jp_next(p);
		return 0;
	}
	char buf[64];
	struct jtoken t = { .type = (uint8_t)type };
	char what[80];
	snprintf(what, sizeof what, "'%s'", describe(&t, buf, sizeof buf));
	return fail_unexpected(p, what);
}

struct jnode *jp_node(struct jparser *p, int type, const struct jtoken *at)
{
	struct jnode *n = ja_alloc(p->a, sizeof(*n));
	if (!n) {
		jp_fail(p, -ENOMEM, "out of memory");
		return NULL;
	}
	n->type = (uint8_t)type;
	n->line = at->line;
	n->col = at->col;
	return n;
}

int jvec_push(struct jparser *p, struct jvec *v, void *x)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 4;
		void **nv = ja_alloc(p->a, cap * sizeof(*nv));
		if (!nv)
			return jp_fail(p, -ENOMEM, "out of memory");
		if (v->n)
			memcpy(nv, v->v, v->n * sizeof(*nv));
		v->v = nv;
		v->cap = cap;
	}
	v->v[v->n++] = x;
	return 0;
}

int jp_enter(struct jparser *p)
{
	if (++p->depth > JINJA_PARSE_DEPTH_MAX)
		return jp_fail(p, -E2BIG, "the template nests blocks or expressions more than %d deep",
			       JINJA_PARSE_DEPTH_MAX);
	return 0;
}

void jp_leave(struct jparser *p)
{
	p->depth--;
}

static struct jnode *unary(struct jparser *p, bool with_filter);

static struct jnode *binary(struct jparser *p, int type, int op, struct jnode *a, struct jnode *b,
			    const struct jtoken *at)
{
	if (!a || !b)
		return NULL;
	struct jnode *n = jp_node(p, type, at);
	if (n) {
		n->op = op;
		n->a = a;
		n->b = b;
	}
	return n;
}

static struct jnode *pow_expr(struct jparser *p)
{
	struct jnode *left = unary(p, true);
	while (left && jp_is_op(p, JOP_POW)) {
		const struct jtoken *at = jp_cur(p);
		jp_next(p);
		left = binary(p, JN_BINOP, JOP_POW, left, unary(p, true), at);
	}
	return left;
}

static struct jnode *math2(struct jparser *p)
{
	struct jnode *left = pow_expr(p);
	while (left && (jp_is_op(p, '*') || jp_is_op(p, '/') || jp_is_op(p, JOP_FLOORDIV) || jp_is_op(p, '%'))) {
		const struct jtoken *at = jp_cur(p);
		jp_next(p);
		left = binary(p, JN_BINOP, at->op, left, pow_expr(p), at);
	}
	return left;
}

static struct jnode *concat(struct jparser *p)
{
	const struct jtoken *at = jp_cur(p);
	struct jnode *first = math2(p);
	if (!first || !jp_is_op(p, '~'))
		return first;
	struct jvec args = { 0 };
	if (jvec_push(p, &args, first))
		return NULL;
	while (jp_skip_op(p, '~')) {
		struct jnode *x = math2(p);
		if (!x || jvec_push(p, &args, x))
			return NULL;
	}
	struct jnode *n = jp_node(p, JN_CONCAT, at);
	if (n) {
		n->kids = (struct jnode **)args.v;
		n->n = args.n;
	}
	return n;
}

static struct jnode *math1(struct jparser *p)
{
	struct jnode *left = concat(p);
	while (left && (jp_is_op(p, '+') || jp_is_op(p, '-'))) {
		const struct jtoken *at = jp_cur(p);
		jp_next(p);
		left = binary(p, JN_BINOP, at->op, left, concat(p), at);
	}
	return left;
}

static struct jnode *compare(struct jparser *p)
{
	const struct jtoken *at = jp_cur(p);
	struct jnode *expr = math1(p);
	struct jvec ops = { 0 }, operands = { 0 };
	while (expr) {
		const struct jtoken *t = jp_cur(p);
		intptr_t op = 0;
		if (t->type == JT_OP && (t->op == JOP_EQ || t->op == JOP_NE || t->op == '<' || t->op == '>' ||
					 t->op == JOP_LE || t->op == JOP_GE)) {
			op = t->op;
			jp_next(p);
		} else if (jp_is_name(p, "in")) {
			op = 'i';
			jp_next(p);
		} else if (jp_is_name(p, "not") && jp_peek(p)->type == JT_NAME && strcmp(jp_peek(p)->s, "in") == 0) {
			op = 'n';
			jp_next(p);
			jp_next(p);
		} else {
			break;
		}
		struct jnode *x = math1(p);
		if (!x || jvec_push(p, &ops, (void *)op) || jvec_push(p, &operands, x))
			return NULL;
	}
	if (!expr || ops.n == 0)
		return expr;
	struct jnode *n = jp_node(p, JN_COMPARE, at);
	int *o = ja_alloc(p->a, ops.n * sizeof(int));
	if (!n || !o) {
		jp_fail(p, -ENOMEM, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < ops.n; i++)
		o[i] = (int)(intptr_t)ops.v[i];
	n->a = expr;
	n->ops = o;
	n->kids = (struct jnode **)operands.v;
	n->n = operands.n;
	return n;
}

static struct jnode *not_expr(struct jparser *p)
{
	if (jp_is_name(p, "not")) {
		const struct jtoken *at = jp_cur(p);
		jp_next(p);
		if (jp_enter(p))
			return NULL;
		struct jnode *x = not_expr(p);
		jp_leave(p);
		struct jnode *n = x ? jp_node(p, JN_NOT, at) : NULL;
		if (n)
			n->a = x;
		return n;
	}
	return compare(p);
}

static struct jnode *and_expr(struct jparser *p)
{
	struct jnode *left = not_expr(p);
	while (left && jp_is_name(p, "and")) {
		const struct jtoken *at = jp_cur(p);
		jp_next(p);
		left = binary(p, JN_AND, 0, left, not_expr(p), at);
	}
	return left;
}

static struct jnode *or_expr(struct jparser *p)
{
	struct jnode *left = and_expr(p);
	while (left && jp_is_name(p, "or")) {
		const struct jtoken *at = jp_cur(p);
		jp_next(p);
		left = binary(p, JN_OR, 0, left, and_expr(p), at);
	}
	return left;
}

static struct jnode *condexpr(struct jparser *p)
{
	const struct jtoken *at = jp_cur(p);
	struct jnode *expr1 = or_expr(p);
	while (expr1 && jp_skip_name(p, "if")) {
		struct jnode *expr2 = or_expr(p), *expr3 = NULL;
		if (!expr2)
			return NULL;
		if (jp_skip_name(p, "else")) {
			if (jp_enter(p))
				return NULL;
			expr3 = condexpr(p);
			jp_leave(p);
			if (!expr3)
				return NULL;
		}
		struct jnode *n = jp_node(p, JN_COND, at);
		if (!n)
			return NULL;
		n->a = expr2;
		n->b = expr1;
		n->c = expr3;
		expr1 = n;
		at = jp_cur(p);
	}
	return expr1;
}

struct jnode *jp_expression(struct jparser *p, bool with_condexpr)
{
	if (jp_enter(p))
		return NULL;
	struct jnode *n = with_condexpr ? condexpr(p) : or_expr(p);
	jp_leave(p);
	return n;
}

static bool tuple_end(const struct jparser *p, const char *extra_end)
{
	const struct jtoken *t = jp_cur(p);
	if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || (t->type == JT_OP && t->op == ')'))
		return true;
	return extra_end && jp_is_name(p, extra_end);
}

struct jnode *jp_tuple(struct jparser *p, bool simplified, bool with_condexpr, const char *extra_end,
		       bool explicit_parens, bool with_namespace)
{
	const struct jtoken *at = jp_cur(p);
	struct jvec args = { 0 };
	bool is_tuple = false;
	for (;;) {
		if (args.n && jp_expect_op(p, ','))
			return NULL;
		if (tuple_end(p, extra_end))
			break;
		struct jnode *x = simplified ? jp_primary(p, with_namespace) : jp_expression(p, with_condexpr);
		if (!x || jvec_push(p, &args, x))
			return NULL;
		if (jp_is_op(p, ','))
			is_tuple = true;
		else
			break;
	}
	if (!is_tuple) {
		if (args.n)
			return args.v[0];
		if (!explicit_parens) {
			char buf[64];
			jp_fail(p, -EINVAL, "Expected an expression, got '%s'", describe(jp_cur(p), buf, sizeof buf));
			return NULL;
		}
	}
	struct jnode *n = jp_node(p, JN_TUPLE, at);
	if (n) {
		n->kids = (struct jnode **)args.v;
		n->n = args.n;
	}
	return n;
}

static struct jnode *list_or_dict(struct jparser *p, bool dict)
{
	const struct jtoken *at = jp_cur(p);
	int close = dict ? '}' : ']';
	jp_next(p);
	struct jvec keys = { 0 }, vals = { 0 };
	while (!jp_is_op(p, close)) {
		if (keys.n && jp_expect_op(p, ','))
			return NULL;
		if (jp_is_op(p, close))
			break;
		struct jnode *k = jp_expression(p, true);
		if (!k || jvec_push(p, &keys, k))
			return NULL;
		if (dict) {
			struct jnode *v = jp_expect_op(p, ':') ? NULL : jp_expression(p, true);
			if (!v || jvec_push(p, &vals, v))
				return NULL;
		}
	}
	if (jp_expect_op(p, close))
		return NULL;
	struct jnode *n = jp_node(p, dict ? JN_DICT : JN_LIST, at);
	if (n) {
		n->kids = (struct jnode **)keys.v;
		n->n = keys.n;
		n->kids2 = (struct jnode **)vals.v;
		n->n2 = vals.n;
	}
	return n;
}

struct jnode *jp_primary(struct jparser *p, bool with_namespace)
{
	const struct jtoken *t = jp_cur(p);
	struct jnode *n;
	if (t->type == JT_NAME) {
		jp_next(p);
		if (!(n = jp_node(p, JN_CONST, t)))
			return NULL;
		if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") || !strcmp(t->s, "False")) {
			n->value = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
		} else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
			n->value = jv_none();
		} else if (with_namespace && jp_is_op(p, '.')) {
			jp_next(p);
			if (jp_cur(p)->type != JT_NAME) {
				fail_unexpected(p, "a name");
				return NULL;
			}
			n->type = JN_NSREF;
			n->name = t->s;
			n->attr = jp_cur(p)->s;
			jp_next(p);
		} else {
			n->type = JN_NAME;
			n->name = t->s;
			if (p->macro && !strcmp(t->s, "varargs"))
				p->macro->op |= JN_MACRO_VARARGS;
			if (p->macro && !strcmp(t->s, "kwargs"))
				p->macro->op |= JN_MACRO_KWARGS;
		}
		return n;
	}
	if (t->type == JT_STRING) {
		size_t len = 0, k = p->i;
		for (; p->t[k].type == JT_STRING; k++)
			len += p->t[k].len;
		char *buf = ja_alloc(p->a, sizeof(struct jstr) + len + 1);
		struct jstr *s = (struct jstr *)buf;
		if (!s || !(n = jp_node(p, JN_CONST, t))) {
			jp_fail(p, -ENOMEM, "out of memory");
			return NULL;
		}
		for (; jp_cur(p)->type == JT_STRING; jp_next(p)) {
			memcpy(s->p + s->len, jp_cur(p)->s, jp_cur(p)->len);
			s->len += jp_cur(p)->len;
		}
		n->value = jv_str_from(s);
		return n;
	}
	if (t->type == JT_INT || t->type == JT_FLOAT) {
		jp_next(p);
		if ((n = jp_node(p, JN_CONST, t)))
			n->value = t->type == JT_INT ? jv_int(t->i) : jv_float(t->f);
		return n;
	}
	if (jp_is_op(p, '(')) {
		jp_next(p);
		n = jp_tuple(p, false, true, NULL, true, false);
		return n && !jp_expect_op(p, ')') ? n : NULL;
	}
	if (jp_is_op(p, '[') || jp_is_op(p, '{'))
		return list_or_dict(p, jp_is_op(p, '{'));
	char buf[64];
	jp_fail(p, -EINVAL, "unexpected '%s'", describe(t, buf, sizeof buf));
	return NULL;
}

int jp_call_args(struct jparser *p, struct jnode *n)
{
	if (jp_expect_op(p, '('))
		return -1;
	struct jvec args = { 0 }, kwv = { 0 }, kwn = { 0 };
	while (!jp_is_op(p, ')')) {
		if ((args.n || kwv.n) && jp_expect_op(p, ','))
			return -1;
		if (jp_is_op(p, ')'))
			break;
		if (jp_is_op(p, '*') || jp_is_op(p, JOP_POW))
			return jp_fail(p, -EINVAL, "*args and **kwargs in calls are not supported");
		if (jp_cur(p)->type == JT_NAME && jp_peek(p)->type == JT_OP && jp_peek(p)->op == '=') {
			const char *key = jp_cur(p)->s;
			jp_next(p);
			jp_next(p);
			struct jnode *v = jp_expression(p, true);
			if (!v || jvec_push(p, &kwn, (void *)key) || jvec_push(p, &kwv, v))
				return -1;
		} else {
			if (kwv.n)
				return jp_fail(p, -EINVAL, "invalid syntax for function call expression");
			struct jnode *v = jp_expression(p, true);
			if (!v || jvec_push(p, &args, v))
				return -1;
		}
	}
	if (jp_expect_op(p, ')'))
		return -1;
	n->kids = (struct jnode **)args.v;
	n->n = args.n;
	n->kids2 = (struct jnode **)kwv.v;
	n->n2 = kwv.n;
	n->names = (const char **)kwn.v;
	n->n_names = kwn.n;
	return 0;
}

static struct jnode *call(struct jparser *p, struct jnode *callee)
{
	struct jnode *n = jp_node(p, JN_CALL, jp_cur(p));
	if (!n || jp_call_args(p, n))
		return NULL;
	n->a = callee;
	return n;
}

/* One item of a subscript: an expression or a slice a:b:c. */
static struct jnode *subscribed(struct jparser *p)
{
	const struct jtoken *at = jp_cur(p);
	struct jnode *start = NULL;
	if (!jp_is_op(p, ':')) {
		start = jp_expression(p, true);
		if (!start || !jp_is_op(p, ':'))
			return start;
	}
	jp_next(p);
	struct jnode *n = jp_node(p, JN_SLICE, at);
	if (!n)
		return NULL;
	n->a = start;
	if (!jp_is_op(p, ':') && !jp_is_op(p, ']') && !jp_is_op(p, ',') && !(n->b = jp_expression(p, true)))
		return NULL;
	if (jp_skip_op(p, ':') && !jp_is_op(p, ']') && !jp_is_op(p, ',') && !(n->c = jp_expression(p, true)))
		return NULL;
	return n;
}

static struct jnode *subscript(struct jparser *p, struct jnode *obj)
{
	const struct jtoken *at = jp_cur(p);
	jp_next(p);
	if (at->op == '.') {
		const struct jtoken *t = jp_cur(p);
		struct jnode *n = jp_node(p, t->type == JT_NAME ? JN_GETATTR : JN_GETITEM, at);
		if (!n)
			return NULL;
		n->a = obj;
		if (t->type == JT_NAME) {
			n->name = t->s;
		} else if (t->type == JT_INT) {
			if (!(n->b = jp_node(p, JN_CONST, t)))
				return NULL;
			n->b->value = jv_int(t->i);
		} else {
			jp_fail(p, -EINVAL, "expected name or number");
			return NULL;
		}
		jp_next(p);
		return n;
	}
	struct jvec args = { 0 };
	while (!jp_is_op(p, ']')) {
		if (args.n && jp_expect_op(p, ','))
			return NULL;
		struct jnode *x = subscribed(p);
		if (!x || jvec_push(p, &args, x))
			return NULL;
	}
	jp_next(p);
	struct jnode *n = jp_node(p, JN_GETITEM, at);
	if (!n)
		return NULL;
	n->a = obj;
	if (args.n == 1) {
		n->b = args.v[0];
	} else {
		if (!(n->b = jp_node(p, JN_TUPLE, at)))
			return NULL;
		n->b->kids = (struct jnode **)args.v;
		n->b->n = args.n;
	}
	return n;
}

static struct jnode *postfix(struct jparser *p, struct jnode *node)
{
	while (node) {
		if (jp_is_op(p, '.') || jp_is_op(p, '['))
			node = subscript(p, node);
		else if (jp_is_op(p, '('))
			node = call(p, node);
		else
			break;
	}
	return node;
}

/* A filter or test name, dotted names included (which name nothing we know). */
static const char *dotted_name(struct jparser *p, char *buf, size_t n)
{
	if (jp_cur(p)->type != JT_NAME) {
		fail_unexpected(p, "a name");
		return NULL;
	}
	snprintf(buf, n, "%s", jp_cur(p)->s);
	jp_next(p);
	while (jp_skip_op(p, '.')) {
		if (jp_cur(p)->type != JT_NAME) {
			fail_unexpected(p, "a name");
			return NULL;
		}
		size_t l = strlen(buf);
		snprintf(buf + l, n - l, ".%s", jp_cur(p)->s);
		jp_next(p);
	}
	return buf;
}

struct jnode *jp_filter(struct jparser *p, struct jnode *node, bool start_inline)
{
	while (jp_is_op(p, '|') || start_inline) {
		if (!start_inline)
			jp_next(p);
		start_inline = false;
		const struct jtoken *at = jp_cur(p);
		char name[96];
		if (!dotted_name(p, name, sizeof name))
			return NULL;
		int id = jinja_filter_id(name);
		if (id < 0) {
			jp_fail(p, -EINVAL, "No filter named '%s'.", name);
			p->err->line = at->line;
			p->err->col = at->col;
			return NULL;
		}
		struct jnode *n = jp_node(p, JN_FILTER, at);
		if (!n)
			return NULL;
		n->op = id;
		n->a = node;
		n->name = at->s;
		if (jp_is_op(p, '(') && jp_call_args(p, n))
			return NULL;
		node = n;
	}
	return node;
}

static struct jnode *test(struct jparser *p, struct jnode *node)
{
	const struct jtoken *at = jp_cur(p);
	jp_next(p);
	bool negated = jp_skip_name(p, "not");
	const struct jtoken *nt = jp_cur(p);
	char name[96];
	if (!dotted_name(p, name, sizeof name))
		return NULL;
	int id = jinja_test_id(name);
	if (id < 0) {
		jp_fail(p, -EINVAL, "No test named '%s'.", name);
		p->err->line = nt->line;
		p->err->col = nt->col;
		return NULL;
	}
	struct jnode *n = jp_node(p, JN_TEST, at);
	if (!n)
		return NULL;
	n->op = id;
	n->a = node;
	n->name = nt->s;
	const struct jtoken *t = jp_cur(p);
	if (jp_is_op(p, '(')) {
		if (jp_call_args(p, n))
			return NULL;
	} else if ((t->type == JT_NAME || t->type == JT_STRING || t->type == JT_INT || t->type == JT_FLOAT ||
		    jp_is_op(p, '[') || jp_is_op(p, '{')) &&
		   !jp_is_name(p, "else") && !jp_is_name(p, "or") && !jp_is_name(p, "and")) {
		if (jp_is_name(p, "is")) {
			jp_fail(p, -EINVAL, "You cannot chain multiple tests with is");
			return NULL;
		}
		struct jnode *arg = postfix(p, jp_primary(p, false));
		struct jnode **kids = arg ? ja_alloc(p->a, sizeof(*kids)) : NULL;
		if (!kids) {
			if (!p->rc)
				jp_fail(p, -ENOMEM, "out of memory");
			return NULL;
		}
		kids[0] = arg;
		n->kids = kids;
		n->n = 1;
	}
	if (!negated)
		return n;
	struct jnode *no = jp_node(p, JN_NOT, at);
	if (no)
		no->a = n;
	return no;
}

static struct jnode *unary(struct jparser *p, bool with_filter)
{
	if (jp_enter(p))
		return NULL;
	const struct jtoken *t = jp_cur(p);
	struct jnode *node;
	if (jp_is_op(p, '-') || jp_is_op(p, '+')) {
		jp_next(p);
		struct jnode *x = unary(p, false);
		node = x ? jp_node(p, t->op == '-' ? JN_NEG : JN_POS, t) : NULL;
		if (node)
			node->a = x;
	} else {
		node = jp_primary(p, false);
	}
	node = postfix(p, node);
	while (with_filter && node) {
		if (jp_is_op(p, '|'))
			node = jp_filter(p, node, false);
		else if (jp_is_name(p, "is"))
			node = test(p, node);
		else if (jp_is_op(p, '('))
			node = call(p, node);
		else
			break;
	}
	jp_leave(p);
	return node;
}
