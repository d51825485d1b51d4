/*
 * jinja_call — calling things: macros (positional and keyword arguments,
 * defaults evaluated at call time in the macro's frame, varargs and kwargs
 * when the body uses them, a frame whose parent is the one the macro was
 * defined in) and the globals Hugging Face's environment offers: range
 * (at most 100000 items, as the sandbox), namespace, dict,
 * raise_exception(message) and strftime_now(format) at the pinned time.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/jinja_internal.h"

/* Jinja's sandbox (MAX_RANGE) */
#define RANGE_MAX 100000

static bool is_intlike(struct jv v)
{
	return v.kind == JV_INT || v.kind == JV_BOOL;
}

static int64_t as_int(struct jv v)
{
	return v.kind == JV_BOOL ? v.u.b : v.u.i;
}

static int call_macro(struct jrender *r, const struct jmacro *m, const struct jv *args, size_t n_args,
		      const char *const *kw_names, const struct jv *kw_vals, size_t n_kw, struct jv *out)
{
	const struct jnode *n = m->node;
	if (r->calls >= r->lim->depth_max)
		return jr_fail(r, -E2BIG, "macro calls nest more than %u deep", r->lim->depth_max);
	if (n_args > n->n_names && !(n->op & JN_MACRO_VARARGS))
		return jr_fail(r, -EINVAL, "macro '%s' takes not more than %zu argument(s)", n->name, n->n_names);
	struct jscope *s = jscope_new(r, m->closure);
	struct jlist *varargs = jlist_new(r, 0);
	struct jdict *kwargs = jdict_new(r);
	if (!s || !varargs || !kwargs)
		return -1;
	for (size_t i = 0; i < n_args; i++)
		if (i < n->n_names ? jscope_set(r, s, n->names[i], args[i]) : jlist_push(r, varargs, args[i]))
			return -1;
	for (size_t k = 0; k < n_kw; k++) {
		size_t i = 0;
		while (i < n->n_names && strcmp(n->names[i], kw_names[k]))
			i++;
		if (i < n->n_names && i < n_args)
			return jr_fail(r, -EINVAL, "macro '%s' got multiple values for argument '%s'", n->name, kw_names[k]);
		if (i < n->n_names) {
			if (jscope_set(r, s, n->names[i], kw_vals[k]))
				return -1;
		} else if (!(n->op & JN_MACRO_KWARGS)) {
			return jr_fail(r, -EINVAL, "macro '%s' takes no keyword argument '%s'", n->name, kw_names[k]);
		} else if (jdict_set(r, kwargs, jv_str(r, kw_names[k], strlen(kw_names[k])), kw_vals[k])) {
			return -1;
		}
	}
	size_t first_default = n->n_names - n->n2;
	for (size_t i = n_args; i < n->n_names; i++) {
		bool given = false;
		for (size_t k = 0; k < n_kw && !given; k++)
			given = !strcmp(n->names[i], kw_names[k]);
		if (given)
			continue;
		struct jv v = { .kind = JV_UNDEF, .flags = JV_UNDEF_PARAM, .u.name = n->names[i] };
		if (i >= first_default && jr_eval(r, s, n->kids2[i - first_default], &v))
			return -1;
		if (jscope_set(r, s, n->names[i], v))
			return -1;
	}
	if (jscope_set(r, s, "varargs", jv_list(varargs, true)) || jscope_set(r, s, "kwargs", jv_dict(kwargs)))
		return -1;
	struct jbuf b = { 0 };
	r->calls++;
	int rc = jr_exec_body(r, s, n->kids, n->n, &b);
	r->calls--;
	r->loop_ctl = 0;
	if (rc) {
		free(b.p);
		return -1;
	}
	*out = jbuf_take(r, &b);
	return r->rc ? -1 : 0;
}

static int call_range(struct jrender *r, const struct jv *args, size_t n, struct jv *out)
{
	int64_t v[3] = { 0, 0, 1 };
	if (n < 1 || n > 3)
		return jr_fail(r, -EINVAL, "range expected 1 to 3 arguments, got %zu", n);
	for (size_t i = 0; i < n; i++) {
		if (!is_intlike(args[i]))
			return jr_fail(r, -EINVAL, "'%s' object cannot be interpreted as an integer", jv_type_name(args[i]));
		v[n == 1 ? 1 : i] = as_int(args[i]);
	}
	if (v[2] == 0)
		return jr_fail(r, -EINVAL, "range() arg 3 must not be zero");
	double count = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2])
				: ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
	if (count > RANGE_MAX)
		return jr_fail(r, -E2BIG, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", RANGE_MAX);
	struct jlist *l = jlist_new(r, count > 0 ? (size_t)count : 0);
	if (!l)
		return -1;
	for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2])
		l->v[l->n++] = jv_int(i);
	*out = jv_list(l, false);
	return 0;
}

/* dict(...) and namespace(...): mappings or lists of pairs, then keywords. */
static int call_dict(struct jrender *r, bool ns, const struct jv *args, size_t n_args, const char *const *kw_names,
		     const struct jv *kw_vals, size_t n_kw, struct jv *out)
{
	struct jdict *d = jdict_new(r);
	if (!d)
		return -1;
	if (n_args > 1)
		return jr_fail(r, -EINVAL, "%s expected at most 1 argument, got %zu", ns ? "namespace" : "dict", n_args);
	if (n_args == 1) {
		struct jv a = args[0];
		if (a.kind == JV_DICT || a.kind == JV_NS) {
			for (size_t i = 0; i < a.u.d->n; i++)
				if (jdict_set(r, d, a.u.d->k[i], a.u.d->v[i]))
					return -1;
		} else if (a.kind == JV_LIST) {
			for (size_t i = 0; i < a.u.l->n; i++) {
				struct jv p = a.u.l->v[i];
				if (p.kind != JV_LIST || p.u.l->n != 2)
					return jr_fail(r, -EINVAL, "dictionary update sequence element #%zu has the wrong length", i);
				if (jdict_set(r, d, p.u.l->v[0], p.u.l->v[1]))
					return -1;
			}
		} else {
			return jr_fail(r, -EINVAL, "'%s' object is not iterable", jv_type_name(a));
		}
	}
	for (size_t k = 0; k < n_kw; k++)
		if (jdict_set(r, d, jv_str(r, kw_names[k], strlen(kw_names[k])), kw_vals[k]))
			return -1;
	*out = (struct jv){ .kind = ns ? JV_NS : JV_DICT, .u.d = d };
	return 0;
}

static int call_strftime(struct jrender *r, const struct jv *args, size_t n, struct jv *out)
{
	if (n != 1 || args[0].kind != JV_STR)
		return jr_fail(r, -EINVAL, "strftime_now() takes one format string");
	struct tm tm;
	if (!localtime_r(&r->now, &tm))
		return jr_fail(r, -EINVAL, "strftime_now(): the time cannot be converted");
	size_t cap = args[0].u.s->len * 8 + 64;
	char *buf = ja_alloc(&r->a, cap);
	if (!buf)
		return jr_oom(r);
	size_t len = args[0].u.s->len ? strftime(buf, cap, args[0].u.s->p, &tm) : 0;
	*out = jv_str(r, buf, len);
	return r->rc ? -1 : 0;
}

/*
 * raise_exception(message): fails the render with the template's text as
 * the error, marked raised. The error holds a C string, so each NUL byte of
 * the message (a '\0' escape in the literal) is written as \x00, as
 * Python's repr shows it: cut at its first NUL, a message starting with one
 * read as no message at all. An empty message becomes a sentence, so the
 * user always sees why the conversation was refused. A message longer than
 * the error's buffer is cut between characters of the escaped text, never
 * inside an escape.
 */
static int call_raise(struct jrender *r, const struct jstr *msg)
{
	char text[sizeof r->err->msg];
	size_t n = 0;
	for (size_t i = 0; i < msg->len; i++) {
		size_t w = msg->p[i] ? 1 : 4;
		if (n + w >= sizeof text)
			break;
		if (msg->p[i])
			text[n] = msg->p[i];
		else
			memcpy(text + n, "\\x00", 4);
		n += w;
	}
	text[n] = 0;
	jr_fail(r, -EINVAL, "%s", n ? text : "(the chat template raised an error without a message)");
	r->err->raised = true;
	return -1;
}

int jr_call(struct jrender *r, struct jscope *s, struct jv callee, const struct jv *args, size_t n_args,
	    const char *const *kw_names, const struct jv *kw_vals, size_t n_kw, struct jv *out)
{
	(void)s;
	switch (callee.kind) {
	case JV_MACRO: return call_macro(r, callee.u.m, args, n_args, kw_names, kw_vals, n_kw, out);
	case JV_METHOD: return jr_method_call(r, callee.u.me, args, n_args, kw_names, kw_vals, n_kw, out);
	case JV_UNDEF: return jv_undef_fail(r, callee);
	case JV_FUNC: break;
	default: return jr_fail(r, -EINVAL, "'%s' object is not callable", jv_type_name(callee));
	}
	if (n_kw && callee.u.i != JF_NAMESPACE && callee.u.i != JF_DICT)
		return jr_fail(r, -EINVAL, "this function takes no keyword arguments");
	switch (callee.u.i) {
	case JF_RANGE: return call_range(r, args, n_args, out);
	case JF_NAMESPACE:
	case JF_DICT: return call_dict(r, callee.u.i == JF_NAMESPACE, args, n_args, kw_names, kw_vals, n_kw, out);
	case JF_STRFTIME: return call_strftime(r, args, n_args, out);
	default: {	/* raise_exception(message), which raises TemplateError(message) */
		if (n_args != 1)
			return n_args ? jr_fail(r, -EINVAL, "raise_exception() takes 1 positional argument but %zu were given",
						n_args)
				      : jr_fail(r, -EINVAL, "raise_exception() missing 1 required positional argument: "
							    "'message'");
		struct jv msg = jv_to_str(r, args[0]);
		if (r->rc)
			return -1;
		return call_raise(r, msg.u.s);
	}
	}
}
