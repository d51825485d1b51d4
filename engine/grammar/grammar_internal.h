/*
 * grammar_internal — the compiled grammar shared by gbnf.c (which builds
 * it), grammar.c (the matcher) and grammar_mask.c (token masks).
 *
 * Layout: every alternative of every rule is a run of elements in elems[]
 * ended by a GRAM_END element; rule r's alternatives start at
 * elems[alts[rules[r].alt_off + k]] for k < rules[r].n_alts. A class is a
 * sorted list of disjoint inclusive code-point ranges (negation is resolved
 * at compile time), so matching never needs to know how it was written.
 */
#ifndef COLIBRI_GRAMMAR_INTERNAL_H
#define COLIBRI_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "engine/grammar/grammar.h"

enum gram_elem_type { GRAM_END, GRAM_CLASS, GRAM_REF };

struct gram_elem {
	uint32_t type;	/* enum gram_elem_type */
	uint32_t arg;	/* class index for GRAM_CLASS, rule index for GRAM_REF */
};

struct gram_class {
	uint32_t off, n;	/* ranges[off .. off + n) */
};

struct gram_range {
	uint32_t lo, hi;	/* inclusive code points */
};

struct gram_rule {
	uint32_t alt_off, n_alts;	/* into alts[] */
};

struct grammar {
	struct gram_elem *elems;	/* [n_elems] */
	uint32_t n_elems;
	uint32_t *alts;			/* [n_alts]: start element of each alternative */
	uint32_t n_alts;
	struct gram_rule *rules;	/* [n_rules] */
	uint32_t n_rules;
	struct gram_class *classes;	/* [n_classes] */
	uint32_t n_classes;
	struct gram_range *ranges;	/* [n_ranges] */
	uint32_t n_ranges;
	uint32_t root;			/* rule index of the start rule */
};

/* True when code point cp is in class c. */
static inline int gram_class_has(const struct grammar *g, uint32_t c, uint32_t cp)
{
	const struct gram_range *r = g->ranges + g->classes[c].off;
	uint32_t lo = 0, hi = g->classes[c].n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (cp < r[mid].lo)
			hi = mid;
		else if (cp > r[mid].hi)
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

/* True when class c holds some code point in [lo, hi]. */
static inline int gram_class_meets(const struct grammar *g, uint32_t c, uint32_t lo, uint32_t hi)
{
	const struct gram_range *r = g->ranges + g->classes[c].off;
	for (uint32_t i = 0; i < g->classes[c].n; i++)
		if (r[i].lo <= hi && r[i].hi >= lo)
			return 1;
	return 0;
}

#endif
