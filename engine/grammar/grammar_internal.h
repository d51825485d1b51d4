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
#include <stdlib.h>

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

/*
 * The matcher's workspace (grammar.c). Parse stacks are hash-consed
 * persistent lists: node (pos, parent) is interned once, so equal stacks
 * are equal ids and stacks share their tails. A stack set is a sorted,
 * interned array of node ids (GRAM_ACCEPT stands for the empty stack, a
 * complete match); set 0 is the empty set. The step cache maps (set, code
 * point or UTF-8 prefix) to the next set, so a mask walk over the
 * vocabulary trie mostly does hash look-ups. Everything is dropped at once
 * (gram_ws_begin) when it grows past its high-water marks.
 */
#define GRAM_NONE 0xFFFFFFFFu	/* parent of a bottom frame */
#define GRAM_ACCEPT 0xFFFFFFFEu	/* the empty stack, inside a set */

struct gram_node {
	uint32_t pos, parent;	/* element index (never GRAM_END); parent node or GRAM_NONE */
};

struct gram_set {
	uint32_t off, n;	/* set_data[off .. off + n) */
	uint32_t hash;
};

struct gram_ws {
	const struct grammar *g;
	struct gram_node *nodes;
	uint32_t n_nodes, cap_nodes;
	uint32_t *node_ht;	/* [node_ht_cap]: node id + 1, 0 empty */
	uint32_t node_ht_cap;
	uint32_t *set_data;
	uint32_t n_set_data, cap_set_data;
	struct gram_set *sets;
	uint32_t n_sets, cap_sets;
	uint32_t *set_ht;	/* [set_ht_cap]: set id + 1, 0 empty */
	uint32_t set_ht_cap;
	uint64_t *step_key;	/* [step_cap]: set << 32 | unit, 0 empty (set 0 is never stepped) */
	uint32_t *step_val;
	uint32_t step_cap, n_step;
	uint32_t *tmp;		/* scratch list of node ids */
	uint32_t n_tmp, cap_tmp;
	uint64_t (*fix)[2];	/* [cap_fix] per set: ASCII bytes b with step(set, b) == set;
				   bit 0: every code point >= 0x80 maps set to itself */
	uint8_t *fix_known;	/* [cap_fix] whether fix[set] was computed */
	uint32_t cap_fix;
	uint32_t work;		/* closure steps in the current step */
	uint32_t *walk_set;	/* [cap_walk] mask walk: set per trie depth */
	struct gram_part *walk_part;	/* [cap_walk] and partial UTF-8 per depth */
	uint32_t cap_walk;
	uint32_t (*ascii)[129];	/* [256] direct-mapped: [0] the set (+1), [1 + b] next set (+1);
				   allocated by the first mask, NULL for states only advanced */
	int err;		/* first error of the current operation (-E2BIG, -ENOMEM) */
};

/* Partial UTF-8: the bytes of an incomplete code point, packed. */
struct gram_part {
	uint8_t b[3];
	uint8_t n;	/* bytes held, 0..3 */
};

int gram_ws_begin(struct gram_ws *w, const struct grammar *g);
void gram_ws_free(struct gram_ws *w);
/* Next (set, partial) after one byte; returns 0 (the dead set) when rejected. */
uint32_t gram_ws_byte(struct gram_ws *w, uint32_t set, struct gram_part *p, uint8_t byte);
/*
 * The ASCII bytes 1..127 that leave set unchanged (bit b of the 128-bit
 * mask); bit 0 when every code point >= 0x80 does (each stack's class holds
 * all of them or none, and one of them maps set to itself). Computed once
 * per set; NULL on error.
 */
const uint64_t *gram_ws_fix(struct gram_ws *w, uint32_t set);
/* True when set holds the empty stack. */
int gram_ws_accepts(const struct gram_ws *w, uint32_t set);

/* Grows the array *p of *cap elements of size bytes to hold need (doubling,
 * from first); false when out of memory (*p and *cap unchanged). */
static inline bool gram_grow(void **p, uint32_t *cap, uint32_t need, size_t size, uint32_t first)
{
	if (need <= *cap)
		return true;
	uint32_t c = *cap ? *cap : first;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, (size_t)c * size);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}

/* The state's stacks as a set id in its workspace (creating the workspace). */
int gram_state_set(struct grammar_state *s, uint32_t *set, struct gram_part *p,
		   struct gram_ws **w);

#endif
