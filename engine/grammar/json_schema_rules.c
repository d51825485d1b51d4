/*
 * json_schema_rules — the named rules of a conversion: unique rule names
 * (a hash set of those taken, so each new name costs O(1)), the rules
 * added with the JSON_SCHEMA_RULES_MAX limit checked as they are made, and
 * an expression turned into a rule when it is not a name already.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/strbuf.h"
#include "engine/grammar/json_schema_internal.h"

static uint64_t name_hash(const char *n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *n; n++)
		h = (h ^ (unsigned char)*n) * 0x100000001b3ull;
	return h;
}

/* The slot holding n, or the empty slot where it would go (cap_names > 0). */
static struct name_slot *name_slot(const struct gen *g, const char *n)
{
	size_t mask = g->cap_names - 1;
	for (size_t i = (size_t)name_hash(n) & mask;; i = (i + 1) & mask)
		if (!g->names[i].name || !strcmp(g->names[i].name, n))
			return &g->names[i];
}

static bool name_taken(const struct gen *g, const char *n)
{
	return g->cap_names && name_slot(g, n)->name;
}

/* Adds n (not taken) to the set, growing it to stay at most half full. */
int js_name_put(struct gen *g, const char *n)
{
	if ((g->n_names + 1) * 2 > g->cap_names) {
		struct gen t = *g;
		t.cap_names = g->cap_names ? g->cap_names * 2 : 64;
		t.names = calloc(t.cap_names, sizeof *t.names);
		if (!t.names)
			return -ENOMEM;
		for (size_t i = 0; i < g->cap_names; i++)
			if (g->names[i].name)
				*name_slot(&t, g->names[i].name) = g->names[i];
		free(g->names);
		g->names = t.names;
		g->cap_names = t.cap_names;
	}
	*name_slot(g, n) = (struct name_slot){ n, 2 };
	g->n_names++;
	return 0;
}

/* A fresh rule name made from hint: [A-Za-z0-9-] only, numbered when taken. */
const char *js_name_new(struct gen *g, const char *hint)
{
	if (g->rc || !hint)
		return NULL;
	struct strbuf b = { 0 };
	bool dash = true;
	for (const char *h = hint; *h && b.len < 48; h++) {
		char c = *h;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (ok) {
			strbuf_put(&b, &c, 1);
			dash = false;
		} else if (!dash) {
			strbuf_put(&b, "-", 1);
			dash = true;
		}
	}
	while (b.len && b.p[b.len - 1] == '-')
		b.p[--b.len] = 0;
	if (!b.len)
		strbuf_put(&b, "r", 1);
	const char *base = js_keep(g, &b);
	if (!base)
		return NULL;
	const char *n = base;
	if (name_taken(g, base)) {
		int i = name_slot(g, base)->next;
		do {
			n = js_fmt(g, "%s-%d", base, i++);
			if (!n)
				return NULL;
		} while (name_taken(g, n));
		name_slot(g, base)->next = i;
	}
	if (js_name_put(g, n)) {
		js_fail(g, ENOMEM, "out of memory");
		return NULL;
	}
	return n;
}

void js_rule_add(struct gen *g, const char *name, const char *body)
{
	if (g->rc)
		return;
	/* Checked as rules are made, so a schema of 20,000 properties is
	 * refused after a few thousand of them, in milliseconds. */
	if (g->n_rules >= JSON_SCHEMA_RULES_MAX) {
		js_fail(g, E2BIG, "the schema needs more than %d grammar rules (about %d object properties)",
			JSON_SCHEMA_RULES_MAX, JSON_SCHEMA_RULES_MAX / 2);
		return;
	}
	if (array_grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) {
		js_fail(g, ENOMEM, "out of memory");
		return;
	}
	g->rules[g->n_rules++] = (struct rule){ name, body };
}

static bool is_ident(const char *e)
{
	for (; *e; e++)
		if (!((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9') ||
		      *e == '-'))
			return false;
	return true;
}

/* e itself when it is a rule name, else a new rule named after hint. */
const char *js_as_rule(struct gen *g, const char *hint, const char *e)
{
	if (!e || is_ident(e))
		return e;
	const char *n = js_name_new(g, hint);
	js_rule_add(g, n, e);
	return g->rc ? NULL : n;
}
