/*
 * jinja_parse — statements and the template entry points, ported from
 * Jinja2 3.1's parser (subparse, parse_statements and the parse_* of each
 * tag). Tags outside the subset (extends, block, include, import, from,
 * call, autoescape, recursive loops) are refused with a message, so the
 * caller can fall back before rendering anything.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

const struct jinja_limits jinja_limits_default = {
	.output_bytes_max = 16u << 20,
	.memory_bytes_max = 64u << 20,
	.depth_max = 64,
	.steps_max = 4000000,
};

static struct jnode *statement(struct jparser *p);

/* Statements until a tag named in ends (NULL-terminated), which stays current; or EOF. */
static int subparse(struct jparser *p, const char *const *ends, struct jvec *body)
{
	if (jp_enter(p))
		return -1;
	for (;;) {
		const struct jtoken *t = jp_cur(p);
		struct jnode *n = NULL;
		if (t->type == JT_EOF) {
			break;
		} else if (t->type == JT_DATA) {
			if ((n = jp_node(p, JN_DATA, t))) {
				const struct jstr *s = jstr_new(p->a, t->s, t->len);
				if (!s)
					return jp_fail(p, -ENOMEM, "out of memory");
				n->value = jv_str_from(s);
			}
			jp_next(p);
		} else if (t->type == JT_VAR_BEGIN) {
			jp_next(p);
			struct jnode *e = jp_tuple(p, false, true, NULL, false, false);
			if (!e || jp_expect_type(p, JT_VAR_END))
				return -1;
			if ((n = jp_node(p, JN_OUTPUT, t)))
				n->a = e;
		} else if (t->type == JT_BLOCK_BEGIN) {
			jp_next(p);
			bool end = false;
			for (size_t i = 0; ends && ends[i]; i++)
				end = end || jp_is_name(p, ends[i]);
			if (end)
				break;
			n = statement(p);
			if (!n || jp_expect_type(p, JT_BLOCK_END))
				return -1;
		} else {
			return jp_fail(p, -EINVAL, "unexpected token");
		}
		if (!n || jvec_push(p, body, n))
			return -1;
	}
	jp_leave(p);
	return 0;
}

static const char *looking_for(const char *const *ends, char *buf, size_t n)
{
	buf[0] = 0;
	for (size_t i = 0; ends[i]; i++) {
		size_t l = strlen(buf);
		snprintf(buf + l, n - l, "%s'%s'", i ? " or " : "", ends[i]);
	}
	return buf;
}

/* The body of a tag opened at open: block end, statements up to one of ends. */
static int body_until(struct jparser *p, const struct jtoken *open, const char *const *ends, bool drop,
		      struct jvec *body)
{
	jp_skip_op(p, ':');
	if (jp_expect_type(p, JT_BLOCK_END))
		return -1;
	if (p->n_open == JINJA_PARSE_DEPTH_MAX)
		return jp_fail(p, -E2BIG, "the template nests blocks more than %d deep", JINJA_PARSE_DEPTH_MAX);
	p->open[p->n_open] = open;
	p->open_ends[p->n_open++] = ends;
	int rc = subparse(p, ends, body);
	p->n_open--;
	if (rc)
		return -1;
	if (jp_cur(p)->type == JT_EOF) {
		char want[128];
		jp_fail(p, -EINVAL, "Unexpected end of template. Jinja was looking for the following tags: %s. "
			"The innermost block that needs to be closed is '%s'.", looking_for(ends, want, sizeof want), open->s);
		p->err->line = open->line;
		p->err->col = open->col;
		return -1;
	}
	if (drop)
		jp_next(p);
	return 0;
}

static bool assignable(const struct jnode *t, bool with_namespace)
{
	if (t->type == JN_NAME)
		return strcmp(t->name, "true") && strcmp(t->name, "false") && strcmp(t->name, "none");
	if (t->type == JN_NSREF)
		return with_namespace;
	if (t->type != JN_TUPLE)
		return false;
	for (size_t i = 0; i < t->n; i++)
		if (t->kids[i]->type != JN_NAME)
			return false;
	return true;
}

static struct jnode *assign_target(struct jparser *p, const char *extra_end, bool with_namespace)
{
	struct jnode *t = jp_tuple(p, true, true, extra_end, false, with_namespace);
	if (t && !assignable(t, with_namespace)) {
		jp_fail(p, -EINVAL, "can't assign to '%s'", t->type == JN_CONST ? "const" : "expression");
		return NULL;
	}
	return t;
}

static struct jnode *parse_for(struct jparser *p, const struct jtoken *open)
{
	static const char *const ends[] = { "endfor", "else", NULL }, *const endfor[] = { "endfor", NULL };
	struct jnode *n = jp_node(p, JN_FOR, open);
	if (!n || !(n->a = assign_target(p, "in", false)))
		return NULL;
	if (!jp_skip_name(p, "in")) {
		jp_fail(p, -EINVAL, "expected 'in' in the for statement");
		return NULL;
	}
	if (!(n->b = jp_tuple(p, false, false, "recursive", false, false)))
		return NULL;
	if (jp_skip_name(p, "if") && !(n->c = jp_expression(p, true)))
		return NULL;
	if (jp_is_name(p, "recursive")) {
		jp_fail(p, -EINVAL, "recursive for loops are not supported");
		return NULL;
	}
	struct jvec body = { 0 }, els = { 0 };
	p->loops++;
	int rc = body_until(p, open, ends, false, &body);
	p->loops--;
	if (rc)
		return NULL;
	bool has_else = jp_is_name(p, "else");
	jp_next(p);
	if (has_else && body_until(p, open, endfor, true, &els))
		return NULL;
	n->kids = (struct jnode **)body.v;
	n->n = body.n;
	n->kids2 = (struct jnode **)els.v;
	n->n2 = els.n;
	return n;
}

static struct jnode *parse_if(struct jparser *p, const struct jtoken *open)
{
	static const char *const ends[] = { "elif", "else", "endif", NULL }, *const endif[] = { "endif", NULL };
	struct jnode *result = jp_node(p, JN_IF, open), *node = result;
	while (node) {
		struct jvec body = { 0 };
		if (!(node->a = jp_tuple(p, false, false, NULL, false, false)) || body_until(p, open, ends, false, &body))
			return NULL;
		node->kids = (struct jnode **)body.v;
		node->n = body.n;
		if (jp_is_name(p, "elif")) {
			const struct jtoken *at = jp_cur(p);
			jp_next(p);
			struct jnode *elif = jp_node(p, JN_IF, at);
			struct jnode **one = ja_alloc(p->a, sizeof(*one));
			if (!elif || !one) {
				jp_fail(p, -ENOMEM, "out of memory");
				return NULL;
			}
			one[0] = elif;
			node->kids2 = one;
			node->n2 = 1;
			node = elif;
			continue;
		}
		bool has_else = jp_is_name(p, "else");
		jp_next(p);
		if (has_else) {
			struct jvec els = { 0 };
			if (body_until(p, open, endif, true, &els))
				return NULL;
			node->kids2 = (struct jnode **)els.v;
			node->n2 = els.n;
		}
		break;
	}
	return result;
}

static struct jnode *parse_set(struct jparser *p, const struct jtoken *open)
{
	static const char *const ends[] = { "endset", NULL };
	struct jnode *n = jp_node(p, JN_SET, open);
	if (!n || !(n->a = assign_target(p, NULL, true)))
		return NULL;
	if (jp_skip_op(p, '=')) {
		n->b = jp_tuple(p, false, true, NULL, false, false);
		return n->b ? n : NULL;
	}
	n->type = JN_SET_BLOCK;
	struct jnode *f = jp_filter(p, NULL, false);
	if (p->rc)
		return NULL;
	struct jvec filters = { 0 }, body = { 0 };
	for (; f; f = f->a)	/* the chain is innermost-first when applied: collect outermost-first */
		if (jvec_push(p, &filters, f))
			return NULL;
	if (body_until(p, open, ends, true, &body))
		return NULL;
	n->kids = (struct jnode **)body.v;
	n->n = body.n;
	n->kids2 = (struct jnode **)filters.v;
	n->n2 = filters.n;
	return n;
}

static struct jnode *parse_macro(struct jparser *p, const struct jtoken *open)
{
	static const char *const ends[] = { "endmacro", NULL };
	struct jnode *n = jp_node(p, JN_MACRO, open);
	if (!n)
		return NULL;
	if (jp_cur(p)->type != JT_NAME) {
		jp_fail(p, -EINVAL, "expected the macro's name");
		return NULL;
	}
	n->name = jp_cur(p)->s;
	jp_next(p);
	struct jvec params = { 0 }, defaults = { 0 };
	if (jp_expect_op(p, '('))
		return NULL;
	while (!jp_is_op(p, ')')) {
		if (params.n && jp_expect_op(p, ','))
			return NULL;
		if (jp_cur(p)->type != JT_NAME) {
			jp_fail(p, -EINVAL, "expected a parameter name");
			return NULL;
		}
		if (jvec_push(p, &params, (void *)jp_cur(p)->s))
			return NULL;
		jp_next(p);
		if (jp_skip_op(p, '=')) {
			struct jnode *d = jp_expression(p, true);
			if (!d || jvec_push(p, &defaults, d))
				return NULL;
		} else if (defaults.n) {
			jp_fail(p, -EINVAL, "non-default argument follows default argument");
			return NULL;
		}
	}
	jp_next(p);
	struct jnode *outer = p->macro;
	unsigned loops = p->loops;
	p->macro = n;
	p->loops = 0;
	struct jvec body = { 0 };
	int rc = body_until(p, open, ends, true, &body);
	p->macro = outer;
	p->loops = loops;
	if (rc)
		return NULL;
	n->names = (const char **)params.v;
	n->n_names = params.n;
	n->kids2 = (struct jnode **)defaults.v;
	n->n2 = defaults.n;
	n->kids = (struct jnode **)body.v;
	n->n = body.n;
	return n;
}

static struct jnode *parse_with(struct jparser *p, const struct jtoken *open)
{
	static const char *const ends[] = { "endwith", NULL };
	struct jnode *n = jp_node(p, JN_WITH, open);
	struct jvec names = { 0 }, vals = { 0 }, body = { 0 };
	while (n && jp_cur(p)->type != JT_BLOCK_END) {
		if (names.n && jp_expect_op(p, ','))
			return NULL;
		if (jp_cur(p)->type != JT_NAME) {
			jp_fail(p, -EINVAL, "expected a name in the with statement");
			return NULL;
		}
		if (jvec_push(p, &names, (void *)jp_cur(p)->s))
			return NULL;
		jp_next(p);
		struct jnode *v = jp_expect_op(p, '=') ? NULL : jp_expression(p, true);
		if (!v || jvec_push(p, &vals, v))
			return NULL;
	}
	if (!n || body_until(p, open, ends, true, &body))
		return NULL;
	n->names = (const char **)names.v;
	n->n_names = names.n;
	n->kids2 = (struct jnode **)vals.v;
	n->n2 = vals.n;
	n->kids = (struct jnode **)body.v;
	n->n = body.n;
	return n;
}

/* {% generation %}, {% filter %} and {% print %}. */
static struct jnode *parse_scope(struct jparser *p, const struct jtoken *open, const char *end, bool filter)
{
	const char *const ends[] = { end, NULL };
	struct jnode *n = jp_node(p, filter ? JN_FILTER_BLOCK : JN_SCOPE, open);
	struct jvec body = { 0 }, filters = { 0 };
	if (!n)
		return NULL;
	if (filter) {
		struct jnode *f = jp_filter(p, NULL, true);
		for (; f; f = f->a)
			if (jvec_push(p, &filters, f))
				return NULL;
		if (p->rc)
			return NULL;
	}
	if (body_until(p, open, ends, true, &body))
		return NULL;
	n->op = 1;	/* a scope of its own, as the caller block Jinja makes of it */
	n->kids = (struct jnode **)body.v;
	n->n = body.n;
	n->kids2 = (struct jnode **)filters.v;
	n->n2 = filters.n;
	return n;
}

static struct jnode *parse_print(struct jparser *p, const struct jtoken *open)
{
	struct jnode *n = jp_node(p, JN_SCOPE, open);
	struct jvec outs = { 0 };
	while (n && jp_cur(p)->type != JT_BLOCK_END) {
		if (outs.n && jp_expect_op(p, ','))
			return NULL;
		struct jnode *e = jp_expression(p, true), *o = e ? jp_node(p, JN_OUTPUT, open) : NULL;
		if (!o || jvec_push(p, &outs, o))
			return NULL;
		o->a = e;
	}
	if (n) {
		n->kids = (struct jnode **)outs.v;
		n->n = outs.n;
	}
	return n;
}

static struct jnode *statement(struct jparser *p)
{
	const struct jtoken *open = jp_cur(p);
	if (open->type != JT_NAME) {
		jp_fail(p, -EINVAL, "tag name expected");
		return NULL;
	}
	const char *tag = open->s;
	jp_next(p);
	if (!strcmp(tag, "for"))
		return parse_for(p, open);
	if (!strcmp(tag, "if"))
		return parse_if(p, open);
	if (!strcmp(tag, "set"))
		return parse_set(p, open);
	if (!strcmp(tag, "macro"))
		return parse_macro(p, open);
	if (!strcmp(tag, "with"))
		return parse_with(p, open);
	if (!strcmp(tag, "generation"))
		return parse_scope(p, open, "endgeneration", false);
	if (!strcmp(tag, "filter"))
		return parse_scope(p, open, "endfilter", true);
	if (!strcmp(tag, "print"))
		return parse_print(p, open);
	if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
		p->i--;
		if (!p->loops) {
			jp_fail(p, -EINVAL, "'%s' outside of a loop", tag);
			return NULL;
		}
		jp_next(p);
		return jp_node(p, tag[0] == 'b' ? JN_BREAK : JN_CONTINUE, open);
	}
	static const char *const refused[] = { "extends", "block", "include", "import", "from", "call",
						"autoescape", NULL };
	p->i--;
	for (size_t i = 0; refused[i]; i++)
		if (!strcmp(tag, refused[i])) {
			jp_fail(p, -EINVAL, "the '%s' tag is not supported by colibri's Jinja subset", tag);
			return NULL;
		}
	if (p->n_open) {
		char want[128];
		const struct jtoken *in = p->open[p->n_open - 1];
		jp_fail(p, -EINVAL, "Encountered unknown tag '%.40s'. Jinja was looking for the following tags: %s. The "
			"innermost block that needs to be closed is '%s' (line %d).", tag,
			looking_for(p->open_ends[p->n_open - 1], want, sizeof want), in->s, in->line);
	} else {
		jp_fail(p, -EINVAL, "Encountered unknown tag '%.40s'.", tag);
	}
	return NULL;
}

int jinja_parse_tokens(struct ja_arena *a, const struct jtoken *toks, size_t n, struct jnode **root,
		       struct jinja_error *err)
{
	struct jparser p = { .a = a, .t = toks, .n = n, .err = err };
	struct jvec body = { 0 };
	if (subparse(&p, NULL, &body))
		return p.rc ? p.rc : -EINVAL;
	struct jnode *r = jp_node(&p, JN_SCOPE, &toks[0]);
	if (!r)
		return p.rc;
	r->kids = (struct jnode **)body.v;
	r->n = body.n;
	*root = r;
	return 0;
}

int jinja_template_parse(struct jinja_template **out, const char *src, size_t len, struct jinja_error *err)
{
	memset(err, 0, sizeof(*err));
	*out = NULL;
	struct jinja_template *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err->msg, sizeof err->msg, "out of memory");
		return -ENOMEM;
	}
	struct jtoken *toks;
	size_t n;
	int rc = jinja_lex(&t->arena, src, len, &toks, &n, err);
	if (!rc) {
		rc = jinja_parse_tokens(&t->arena, toks, n, &t->root, err);
		free(toks);	/* the tree keeps no pointer into the tokens */
	}
	if (rc) {
		jinja_template_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void jinja_template_free(struct jinja_template *t)
{
	if (!t)
		return;
	ja_free_all(&t->arena);
	free(t);
}
