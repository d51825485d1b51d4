/*
 * grammar_width — how many parse stacks one closure of a compiled grammar
 * can make, computed once at compile time, so that a grammar the matcher
 * cannot hold (GRAMMAR_STACKS_MAX) is refused before decoding starts rather
 * than at the output position where it fans out.
 *
 * For each element position p: L(p), the stacks emitted by the closure of
 * a stack topped by p before it pops out of p's alternative, and Z(p),
 * whether the rest of that alternative is nullable. An END gives 0 and
 * true; a class 1 (0 when empty) and false; a reference to rule r gives
 * A(r) + (N(r) ? L(p + 1) : 0) and N(r) && Z(p + 1), where A(r) sums L over
 * r's alternatives and N(r) says one of them is nullable. The width is the
 * largest L over every position and the start. Counting emissions rather
 * than distinct stacks over-counts alternatives that reach the same stack
 * twice; the bound is what one position fans out to, not what several
 * stacks alive at once (alternatives sharing a prefix) add up to: that
 * is found where the output reaches it, and constrain.c reports it as the
 * grammar's fault (serve: 400 grammar_too_wide).
 *
 * L(p) depends on p + 1 and on the rules p's alternative starts with, so
 * without left recursion (gbnf.c refuses it) the dependencies are acyclic;
 * they are walked with an explicit stack (chains may be a million elements
 * long), each position and rule once: O(elements + alternatives).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/grammar/grammar_internal.h"

enum { WIDTH_NEW, WIDTH_OPEN, WIDTH_DONE };

static uint32_t sat_add(uint32_t a, uint32_t b)
{
	return a > UINT32_MAX - b ? UINT32_MAX : a + b;
}

int grammar_width(const struct grammar *g, uint32_t *width)
{
	*width = 0;
	uint32_t n = g->n_elems + g->n_rules;	/* positions, then rules */
	uint32_t *L = calloc(n, sizeof *L), *next = calloc(n, sizeof *next), *stack = malloc((n + 1) * sizeof *stack);
	uint8_t *Z = calloc(n, 1), *st = calloc(n, 1);
	int rc = 0;
	if (!L || !next || !stack || !Z || !st) {
		rc = -ENOMEM;
		goto done;
	}
	for (uint32_t start = 0; start < n && !rc; start++) {
		if (st[start] == WIDTH_DONE)
			continue;
		uint32_t top = 0;
		stack[top++] = start;
		st[start] = WIDTH_OPEN;
		while (top && !rc) {
			uint32_t x = stack[top - 1], dep = UINT32_MAX;
			if (x >= g->n_elems) {
				const struct gram_rule *r = &g->rules[x - g->n_elems];
				for (; next[x] < r->n_alts; next[x]++) {
					uint32_t a = g->alts[r->alt_off + next[x]];
					if (st[a] != WIDTH_DONE) {
						dep = a;
						break;
					}
					L[x] = sat_add(L[x], L[a]);
					Z[x] |= Z[a];
				}
			} else {
				const struct gram_elem *e = &g->elems[x];
				if (e->type == GRAM_END) {
					Z[x] = 1;
				} else if (e->type == GRAM_CLASS) {
					L[x] = g->classes[e->arg].n > 0;
				} else {
					uint32_t r = g->n_elems + e->arg;
					if (st[r] != WIDTH_DONE)
						dep = r;
					else if (Z[r] && st[x + 1] != WIDTH_DONE)
						dep = x + 1;
					else {
						L[x] = sat_add(L[r], Z[r] ? L[x + 1] : 0);
						Z[x] = Z[r] && Z[x + 1];
					}
				}
			}
			if (dep == UINT32_MAX) {
				st[x] = WIDTH_DONE;
				top--;
				if (x < g->n_elems && L[x] > *width)
					*width = L[x];
			} else if (st[dep] == WIDTH_OPEN) {
				rc = -ELOOP;	/* left recursion, which gbnf.c refuses */
			} else {
				st[dep] = WIDTH_OPEN;
				stack[top++] = dep;
			}
		}
	}
	if (!rc) {
		uint32_t root = g->n_elems + g->root;
		uint32_t w = sat_add(L[root], Z[root]);	/* the empty stack of a nullable root */
		if (w > *width)
			*width = w;
	}
done:
	free(L);
	free(next);
	free(stack);
	free(Z);
	free(st);
	return rc;
}
