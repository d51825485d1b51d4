/*
 * jinja_eval — statements, scopes and the render entry point.
 *
 * Scoping follows Jinja2: the template's top level is one frame holding the
 * input variables and its own sets; each for-loop iteration, macro call,
 * set or filter block, with block and generation block runs in a child
 * frame, so a set inside it is gone when it ends (and each iteration starts
 * from the enclosing values again); if blocks share their frame. Lookups
 * walk the frames outwards at the moment of the lookup, which is also how a
 * macro sees the top-level sets made after its definition.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

int jr_step(struct jrender *r)
{
	if (++r->steps > r->lim->steps_max)
		return jr_fail(r, -E2BIG, "the template needs more than %llu evaluation steps",
			       (unsigned long long)r->lim->steps_max);
	return 0;
}

struct jscope *jscope_new(struct jrender *r, struct jscope *parent)
{
	struct jscope *s = ja_alloc(&r->a, sizeof(*s));
	if (!s) {
		jr_oom(r);
		return NULL;
	}
	s->parent = parent;
	return s;
}

struct jv *jscope_lookup(struct jscope *s, const char *name)
{
	for (; s; s = s->parent)
		for (size_t i = s->n; i-- > 0;)
			if (strcmp(s->names[i], name) == 0)
				return &s->vals[i];
	return NULL;
}

int jscope_set(struct jrender *r, struct jscope *s, const char *name, struct jv v)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->names[i], name) == 0) {
			s->vals[i] = v;
			return 0;
		}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		const char **nn = ja_alloc(&r->a, cap * sizeof(*nn));
		struct jv *nv = nn ? ja_alloc(&r->a, cap * sizeof(*nv)) : NULL;
		if (!nv)
			return jr_oom(r);
		if (s->n) {
			memcpy(nn, s->names, s->n * sizeof(*nn));
			memcpy(nv, s->vals, s->n * sizeof(*nv));
		}
		s->names = nn;
		s->vals = nv;
		s->cap = cap;
	}
	s->names[s->n] = name;
	s->vals[s->n] = v;
	s->n++;
	return 0;
}

/* Binds a for or set target (a name or a tuple of names) to v. */
static int bind(struct jrender *r, struct jscope *s, const struct jnode *target, struct jv v)
{
	if (target->type == JN_NAME)
		return jscope_set(r, s, target->name, v);
	struct jlist *items;
	if (v.kind == JV_UNDEF)
		return jv_undef_fail(r, v);
	if (v.kind == JV_DICT || v.kind == JV_NS || !(v.kind == JV_LIST || v.kind == JV_STR))
		return jr_fail(r, -EINVAL, "cannot unpack non-iterable %s object", jv_type_name(v));
	if (jr_iterate(r, v, &items))
		return -1;
	if (items->n != target->n)
		return jr_fail(r, -EINVAL, items->n > target->n ? "too many values to unpack (expected %zu)"
				: "not enough values to unpack (expected %zu, got %zu)", target->n, items->n);
	for (size_t i = 0; i < target->n; i++)
		if (jscope_set(r, s, target->kids[i]->name, items->v[i]))
			return -1;
	return 0;
}

static int assign(struct jrender *r, struct jscope *s, const struct jnode *target, struct jv v)
{
	if (target->type != JN_NSREF)
		return bind(r, s, target, v);
	struct jv *ns = jscope_lookup(s, target->name);
	if (!ns || ns->kind != JV_NS)
		return jr_fail(r, -EINVAL, "Cannot assign attribute on non-namespace object");
	struct jv key = jv_str(r, target->attr, strlen(target->attr));
	return r->rc ? -1 : jdict_set(r, ns->u.d, key, v);
}

/* Applies block filters (outermost first in the list) to a captured string. */
static int apply_filters(struct jrender *r, struct jscope *s, struct jnode *const *filters, size_t n, struct jv *v)
{
	for (size_t i = n; i-- > 0;) {
		const struct jnode *f = filters[i];
		struct jv *args = ja_alloc(&r->a, (f->n + f->n2 + 1) * sizeof(*args));
		if (!args)
			return jr_oom(r);
		for (size_t k = 0; k < f->n + f->n2; k++)
			if (jr_eval(r, s, k < f->n ? f->kids[k] : f->kids2[k - f->n], &args[k]))
				return -1;
		r->line = f->line;
		r->col = f->col;
		if (jr_filter(r, s, f->op, *v, args, f->n, f->names, args + f->n, f->n2, v))
			return -1;
	}
	return 0;
}

/* Renders body in a child frame of s into a new string. */
static int capture(struct jrender *r, struct jscope *s, struct jnode *const *body, size_t n, struct jv *out)
{
	struct jscope *c = jscope_new(r, s);
	struct jbuf b = { 0 };
	if (!c || jr_exec_body(r, c, body, n, &b)) {
		free(b.p);
		return -1;
	}
	*out = jbuf_take(r, &b);
	return r->rc ? -1 : 0;
}

static int exec_for(struct jrender *r, struct jscope *s, const struct jnode *n, struct jbuf *out)
{
	struct jv it;
	struct jlist *items;
	if (jr_eval(r, s, n->b, &it) || jr_iterate(r, it, &items))
		return -1;
	struct jscope *frame = jscope_new(r, s);
	if (!frame)
		return -1;
	if (n->c) {	/* for x in y if cond: filtered first, so loop.length counts what is kept */
		struct jlist *kept = jlist_new(r, 0);
		if (!kept)
			return -1;
		for (size_t i = 0; i < items->n; i++) {
			struct jv keep;
			frame->n = 0;
			if (jr_step(r) || bind(r, frame, n->a, items->v[i]) || jr_eval(r, frame, n->c, &keep))
				return -1;
			if (jv_truthy(keep) && jlist_push(r, kept, items->v[i]))
				return -1;
		}
		items = kept;
	}
	struct jloop *lp = ja_alloc(&r->a, sizeof(*lp));
	if (!lp)
		return jr_oom(r);
	lp->items = items;
	lp->length = items->n;
	lp->depth = 1;
	r->loop_depth++;
	for (size_t i = 0; i < items->n; i++) {
		frame->n = 0;
		lp->index0 = i;
		if (jr_step(r) || bind(r, frame, n->a, items->v[i]) ||
		    jscope_set(r, frame, "loop", (struct jv){ .kind = JV_LOOP, .u.lp = lp }) ||
		    jr_exec_body(r, frame, n->kids, n->n, out))
			return -1;
		int ctl = r->loop_ctl;
		r->loop_ctl = 0;
		if (ctl == JN_BREAK)
			break;
	}
	r->loop_depth--;
	if (items->n == 0 && n->n2) {
		frame->n = 0;
		return jr_exec_body(r, frame, n->kids2, n->n2, out);
	}
	return 0;
}

static int exec_one(struct jrender *r, struct jscope *s, const struct jnode *n, struct jbuf *out)
{
	struct jv v;
	switch (n->type) {
	case JN_DATA:
		return jbuf_put(r, out, n->value.u.s->p, n->value.u.s->len);
	case JN_OUTPUT:
		if (jr_eval(r, s, n->a, &v))
			return -1;
		r->line = n->line;
		r->col = n->col;
		return jv_write_str(r, out, v);
	case JN_IF:
		if (jr_eval(r, s, n->a, &v))
			return -1;
		return jv_truthy(v) ? jr_exec_body(r, s, n->kids, n->n, out) : jr_exec_body(r, s, n->kids2, n->n2, out);
	case JN_FOR:
		return exec_for(r, s, n, out);
	case JN_SET:
		return jr_eval(r, s, n->b, &v) || assign(r, s, n->a, v) ? -1 : 0;
	case JN_SET_BLOCK:
		if (capture(r, s, n->kids, n->n, &v) || apply_filters(r, s, n->kids2, n->n2, &v))
			return -1;
		return assign(r, s, n->a, v);
	case JN_MACRO: {
		struct jmacro *m = ja_alloc(&r->a, sizeof(*m));
		if (!m)
			return jr_oom(r);
		m->node = n;
		m->closure = s;
		return jscope_set(r, s, n->name, (struct jv){ .kind = JV_MACRO, .u.m = m });
	}
	case JN_BREAK:
	case JN_CONTINUE:
		r->loop_ctl = n->type;
		return 0;
	case JN_WITH: {
		struct jscope *c = jscope_new(r, s);
		if (!c)
			return -1;
		for (size_t i = 0; i < n->n2; i++)
			if (jr_eval(r, s, n->kids2[i], &v) || jscope_set(r, c, n->names[i], v))
				return -1;
		return jr_exec_body(r, c, n->kids, n->n, out);
	}
	case JN_SCOPE: {
		struct jscope *c = n->op ? jscope_new(r, s) : s;
		return c ? jr_exec_body(r, c, n->kids, n->n, out) : -1;
	}
	case JN_FILTER_BLOCK:
		if (capture(r, s, n->kids, n->n, &v) || apply_filters(r, s, n->kids2, n->n2, &v))
			return -1;
		return jv_write_str(r, out, v);
	default:
		return jr_fail(r, -EINVAL, "internal error: node %d is not a statement", n->type);
	}
}

int jr_exec_body(struct jrender *r, struct jscope *s, struct jnode *const *body, size_t n, struct jbuf *out)
{
	if (++r->depth > JR_EVAL_DEPTH_MAX)
		return jr_fail(r, -E2BIG, "the template nests evaluation more than %d deep", JR_EVAL_DEPTH_MAX);
	for (size_t i = 0; i < n && !r->loop_ctl; i++) {
		r->line = body[i]->line;
		r->col = body[i]->col;
		if (jr_step(r) || exec_one(r, s, body[i], out))
			return -1;
	}
	r->depth--;
	return 0;
}

int jinja_template_render(const struct jinja_template *t, const cJSON *vars, const struct jinja_render_options *opt,
			  char **out, size_t *out_len, struct jinja_error *err)
{
	memset(err, 0, sizeof(*err));
	*out = NULL;
	*out_len = 0;
	const struct jinja_limits *lim = opt && opt->limits ? opt->limits : &jinja_limits_default;
	struct jrender r = { .err = err, .lim = lim, .now = opt && opt->now ? opt->now : time(NULL) };
	r.a.bytes_max = lim->memory_bytes_max;
	struct jbuf b = { 0 };
	struct jscope *root = jscope_new(&r, NULL);
	for (const cJSON *c = vars && cJSON_IsObject(vars) ? vars->child : NULL; root && c && !r.rc; c = c->next) {
		struct jv v = jv_from_json(&r, c, 0);
		if (!r.rc && c->string)
			jscope_set(&r, root, c->string, v);
	}
	if (root && !r.rc)
		jr_exec_body(&r, root, t->root->kids, t->root->n, &b);
	if (!r.rc && !b.p && jbuf_put(&r, &b, "", 0) == 0 && !(b.p = calloc(1, 1)))
		jr_fail(&r, -ENOMEM, "out of memory");
	ja_free_all(&r.a);
	if (r.rc) {
		free(b.p);
		return r.rc;
	}
	*out = b.p;
	*out_len = b.len;
	return 0;
}
