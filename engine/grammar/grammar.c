/*
 * grammar — the matcher: grammar states as sets of parse stacks, advanced
 * byte by byte.
 *
 * A stack lists element positions; its top is always a code-point class
 * (the closure expands references and pops finished alternatives eagerly),
 * or the stack is empty, which means the root rule is complete. Advancing
 * by a code point keeps the stacks whose top class holds it, steps past the
 * class and takes the closure again. Without left recursion (refused by
 * gbnf.c) the closure terminates; a budget of GRAM_CLOSURE_MAX steps and the
 * GRAMMAR_STACKS_MAX bound turn pathological grammars into -E2BIG instead
 * of a hang. Bytes of an incomplete code point are held in the state and
 * admitted when some stack's class holds a code point that starts with them.
 *
 * The state keeps its stacks flat (bottom to top) so it owns no workspace
 * memory: each operation interns them into the workspace, works on ids and
 * writes the result back only on success.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_internal.h"

#define GRAM_CLOSURE_MAX (1u << 16)	/* closure steps per code point */
#define WS_NODES_HIGH (1u << 20)	/* workspace high-water marks */
#define WS_STEPS_HIGH (1u << 21)
#define WS_SETS_HIGH (1u << 18)

struct grammar_state {
	const struct grammar *g;
	uint32_t *flat;		/* per stack: length, then positions bottom to top */
	size_t n_flat, cap_flat;
	uint32_t n_stacks;	/* not counting the empty stack */
	bool accept;		/* the set holds the empty stack */
	struct gram_part part;
	struct gram_ws *ws;	/* lazily created cache; not shared */
};

static uint32_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return (uint32_t)x;
}

static void ws_clear(struct gram_ws *w)
{
	w->n_nodes = 0;
	memset(w->node_ht, 0, (size_t)w->node_ht_cap * sizeof(*w->node_ht));
	w->n_set_data = 0;
	w->n_sets = 1;	/* set 0: the empty set */
	w->sets[0] = (struct gram_set){ 0, 0, 0 };
	memset(w->set_ht, 0, (size_t)w->set_ht_cap * sizeof(*w->set_ht));
	memset(w->step_key, 0, (size_t)w->step_cap * sizeof(*w->step_key));
	w->n_step = 0;
	if (w->fix_known)
		memset(w->fix_known, 0, w->cap_fix);
	if (w->ascii)
		for (int i = 0; i < 256; i++)
			w->ascii[i][0] = 0;
}

int gram_ws_begin(struct gram_ws *w, const struct grammar *g)
{
	w->err = 0;
	if (!w->node_ht) {
		w->g = g;
		w->node_ht_cap = w->set_ht_cap = w->step_cap = 1024;
		w->node_ht = calloc(w->node_ht_cap, sizeof(*w->node_ht));
		w->set_ht = calloc(w->set_ht_cap, sizeof(*w->set_ht));
		w->step_key = calloc(w->step_cap, sizeof(*w->step_key));
		w->step_val = calloc(w->step_cap, sizeof(*w->step_val));
		if (!w->node_ht || !w->set_ht || !w->step_key || !w->step_val ||
		    !gram_grow((void **)&w->sets, &w->cap_sets, 1, sizeof(*w->sets), 64))
			return -ENOMEM;
		ws_clear(w);
	} else if (w->n_nodes > WS_NODES_HIGH || w->n_step > WS_STEPS_HIGH ||
		   w->n_sets > WS_SETS_HIGH) {
		ws_clear(w);
	}
	return 0;
}

void gram_ws_free(struct gram_ws *w)
{
	if (!w)
		return;
	free(w->nodes);
	free(w->node_ht);
	free(w->set_data);
	free(w->sets);
	free(w->set_ht);
	free(w->step_key);
	free(w->step_val);
	free(w->tmp);
	free(w->fix);
	free(w->fix_known);
	free(w->ascii);
	free(w->walk_set);
	free(w->walk_part);
	free(w);
}

static void set_err(struct gram_ws *w, int e)
{
	if (!w->err)
		w->err = e;
}

/* Doubles an open-addressed table of 32-bit ids, rehashing with key(id). */
static bool rehash_ids(struct gram_ws *w, uint32_t **ht, uint32_t *cap, bool nodes)
{
	uint32_t nc = *cap * 2;
	uint32_t *n = calloc(nc, sizeof(*n));
	if (!n)
		return false;
	for (uint32_t i = 0; i < *cap; i++) {
		uint32_t v = (*ht)[i];
		if (!v)
			continue;
		uint32_t h = nodes ? mix((uint64_t)w->nodes[v - 1].pos << 32 | w->nodes[v - 1].parent)
				   : w->sets[v - 1].hash;
		for (uint32_t j = h & (nc - 1);; j = (j + 1) & (nc - 1))
			if (!n[j]) {
				n[j] = v;
				break;
			}
	}
	free(*ht);
	*ht = n;
	*cap = nc;
	return true;
}

static uint32_t node_get(struct gram_ws *w, uint32_t pos, uint32_t parent)
{
	if (w->n_nodes * 2 >= w->node_ht_cap &&
	    !rehash_ids(w, &w->node_ht, &w->node_ht_cap, true)) {
		set_err(w, -ENOMEM);
		return GRAM_NONE;
	}
	uint32_t mask = w->node_ht_cap - 1;
	for (uint32_t j = mix((uint64_t)pos << 32 | parent) & mask;; j = (j + 1) & mask) {
		uint32_t v = w->node_ht[j];
		if (!v) {
			if (!gram_grow((void **)&w->nodes, &w->cap_nodes, w->n_nodes + 1, sizeof(*w->nodes), 64)) {
				set_err(w, -ENOMEM);
				return GRAM_NONE;
			}
			w->nodes[w->n_nodes] = (struct gram_node){ pos, parent };
			w->node_ht[j] = ++w->n_nodes;
			return w->n_nodes - 1;
		}
		if (w->nodes[v - 1].pos == pos && w->nodes[v - 1].parent == parent)
			return v - 1;
	}
}

/* The stack "pos on top of parent", popping at once if pos ends an alternative. */
static uint32_t frame(struct gram_ws *w, uint32_t pos, uint32_t parent)
{
	if (w->g->elems[pos].type == GRAM_END)
		return parent;
	return node_get(w, pos, parent);
}

static void emit(struct gram_ws *w, uint32_t id)
{
	if (!gram_grow((void **)&w->tmp, &w->cap_tmp, w->n_tmp + 1, sizeof(*w->tmp), 64)) {
		set_err(w, -ENOMEM);
		return;
	}
	w->tmp[w->n_tmp++] = id;
}

/* Emits the stacks that stack n expands to, each topped by a class or empty. */
static void closure(struct gram_ws *w, uint32_t n)
{
	if (w->err)
		return;
	if (++w->work > GRAM_CLOSURE_MAX) {
		set_err(w, -E2BIG);
		return;
	}
	if (n == GRAM_NONE) {
		emit(w, GRAM_ACCEPT);
		return;
	}
	const struct grammar *g = w->g;
	struct gram_node nd = w->nodes[n];
	const struct gram_elem *e = &g->elems[nd.pos];
	if (e->type == GRAM_CLASS) {
		if (g->classes[e->arg].n > 0)	/* an empty class can never match: drop the stack */
			emit(w, n);
		return;
	}
	uint32_t cont = frame(w, nd.pos + 1, nd.parent);
	const struct gram_rule *r = &g->rules[e->arg];
	for (uint32_t k = 0; k < r->n_alts && !w->err; k++)
		closure(w, frame(w, g->alts[r->alt_off + k], cont));
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Interns w->tmp[0 .. n_tmp) as a set (sorted, duplicates dropped). */
static uint32_t set_intern(struct gram_ws *w)
{
	if (w->err)
		return 0;
	uint32_t n = w->n_tmp, m = 0;
	uint32_t *t = w->tmp;
	if (n > 1)
		qsort(t, n, sizeof(*t), cmp_u32);
	for (uint32_t i = 0; i < n; i++)
		if (m == 0 || t[i] != t[m - 1])
			t[m++] = t[i];
	if (m == 0)
		return 0;
	if (m > GRAMMAR_STACKS_MAX) {
		set_err(w, -E2BIG);
		return 0;
	}
	uint64_t h64 = m;
	for (uint32_t i = 0; i < m; i++)
		h64 = h64 * 0x9E3779B97F4A7C15ull + t[i];
	uint32_t h = mix(h64);
	if (w->n_sets * 2 >= w->set_ht_cap && !rehash_ids(w, &w->set_ht, &w->set_ht_cap, false)) {
		set_err(w, -ENOMEM);
		return 0;
	}
	uint32_t mask = w->set_ht_cap - 1;
	for (uint32_t j = h & mask;; j = (j + 1) & mask) {
		uint32_t v = w->set_ht[j];
		if (!v) {
			if (!gram_grow((void **)&w->sets, &w->cap_sets, w->n_sets + 1, sizeof(*w->sets), 64) ||
			    !gram_grow((void **)&w->set_data, &w->cap_set_data, w->n_set_data + m,
				  sizeof(*w->set_data), 64)) {
				set_err(w, -ENOMEM);
				return 0;
			}
			if (m)
				memcpy(w->set_data + w->n_set_data, t, m * sizeof(*t));
			w->sets[w->n_sets] = (struct gram_set){ w->n_set_data, m, h };
			w->n_set_data += m;
			w->set_ht[j] = ++w->n_sets;
			return w->n_sets - 1;
		}
		const struct gram_set *s = &w->sets[v - 1];
		if (s->hash == h && s->n == m && memcmp(w->set_data + s->off, t, m * sizeof(*t)) == 0)
			return v - 1;
	}
}

int gram_ws_accepts(const struct gram_ws *w, uint32_t set)
{
	const struct gram_set *s = &w->sets[set];
	return s->n > 0 && w->set_data[s->off + s->n - 1] == GRAM_ACCEPT;
}

static bool step_lookup(struct gram_ws *w, uint64_t key, uint32_t *val)
{
	uint32_t mask = w->step_cap - 1;
	for (uint32_t j = mix(key) & mask;; j = (j + 1) & mask) {
		if (w->step_key[j] == key) {
			*val = w->step_val[j];
			return true;
		}
		if (!w->step_key[j])
			return false;
	}
}

static void step_store(struct gram_ws *w, uint64_t key, uint32_t val)
{
	if (w->n_step * 2 >= w->step_cap) {
		uint32_t nc = w->step_cap * 2;
		uint64_t *nk = calloc(nc, sizeof(*nk));
		uint32_t *nv = malloc((size_t)nc * sizeof(*nv));
		if (!nk || !nv) {
			free(nk);
			free(nv);
			return;	/* the cache is only a cache */
		}
		for (uint32_t i = 0; i < w->step_cap; i++) {
			if (!w->step_key[i])
				continue;
			for (uint32_t j = mix(w->step_key[i]) & (nc - 1);; j = (j + 1) & (nc - 1))
				if (!nk[j]) {
					nk[j] = w->step_key[i];
					nv[j] = w->step_val[i];
					break;
				}
		}
		free(w->step_key);
		free(w->step_val);
		w->step_key = nk;
		w->step_val = nv;
		w->step_cap = nc;
	}
	uint32_t mask = w->step_cap - 1;
	for (uint32_t j = mix(key) & mask;; j = (j + 1) & mask)
		if (!w->step_key[j]) {
			w->step_key[j] = key;
			w->step_val[j] = val;
			w->n_step++;
			return;
		}
}

/* The set after code point cp. */
static uint32_t step_cp(struct gram_ws *w, uint32_t set, uint32_t cp)
{
	uint64_t key = (uint64_t)set << 32 | cp;
	uint32_t val;
	if (set == 0)
		return 0;
	if (step_lookup(w, key, &val))
		return val;
	const struct grammar *g = w->g;
	uint32_t off = w->sets[set].off, n = w->sets[set].n;
	w->n_tmp = 0;
	w->work = 0;
	for (uint32_t i = 0; i < n && !w->err; i++) {
		uint32_t id = w->set_data[off + i];
		if (id == GRAM_ACCEPT)
			continue;
		struct gram_node nd = w->nodes[id];
		if (gram_class_has(g, g->elems[nd.pos].arg, cp))
			closure(w, frame(w, nd.pos + 1, nd.parent));
		off = w->sets[set].off;	/* set_data does not move here, but stay safe */
	}
	val = set_intern(w);
	if (!w->err)
		step_store(w, key, val);
	return val;
}

/* True when some stack of set admits a code point in [lo, hi]. */
static bool set_meets(struct gram_ws *w, uint32_t set, uint32_t lo, uint32_t hi)
{
	const struct grammar *g = w->g;
	const struct gram_set *s = &w->sets[set];
	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t id = w->set_data[s->off + i];
		if (id != GRAM_ACCEPT && gram_class_meets(g, g->elems[w->nodes[id].pos].arg, lo, hi))
			return true;
	}
	return false;
}

/* Sequence length announced by a lead byte, 0 if it cannot start one. */
static unsigned utf8_need(uint8_t b)
{
	return b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 :
	       b >= 0xF0 && b <= 0xF4 ? 4 : 0;
}

uint32_t gram_ws_byte(struct gram_ws *w, uint32_t set, struct gram_part *p, uint8_t b)
{
	if (set == 0)
		return 0;
	if (p->n == 0) {
		if (b < 0x80 && w->ascii) {
			/* The hot path of a mask walk: a direct-mapped table per recent set. */
			uint32_t *a = w->ascii[set & 255];
			if (a[0] != set + 1) {
				memset(a, 0, sizeof(*w->ascii));
				a[0] = set + 1;
			}
			if (a[1 + b])
				return a[1 + b] - 1;
			uint32_t next = step_cp(w, set, b);
			if (!w->err)
				a[1 + b] = next + 1;
			return next;
		}
		if (b < 0x80)
			return step_cp(w, set, b);
		if (!utf8_need(b))
			return 0;
	} else {
		uint8_t lo = 0x80, hi = 0xBF;
		if (p->n == 1) {
			if (p->b[0] == 0xE0)
				lo = 0xA0;
			else if (p->b[0] == 0xED)
				hi = 0x9F;
			else if (p->b[0] == 0xF0)
				lo = 0x90;
			else if (p->b[0] == 0xF4)
				hi = 0x8F;
		}
		if (b < lo || b > hi)
			return 0;
	}
	unsigned need = utf8_need(p->n ? p->b[0] : b);
	if (p->n + 1u == need) {
		uint32_t cp = p->b[0] & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
		for (unsigned i = 1; i < p->n; i++)
			cp = cp << 6 | (p->b[i] & 0x3F);
		cp = cp << 6 | (b & 0x3F);
		p->n = 0;
		return step_cp(w, set, cp);
	}
	p->b[p->n++] = b;
	/* Code points that start with the held bytes: pad with 0x80 .. 0xBF. */
	static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	uint32_t lo = p->b[0] & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07), hi;
	for (unsigned i = 1; i < p->n; i++)
		lo = lo << 6 | (p->b[i] & 0x3F);
	hi = lo;
	for (unsigned i = p->n; i < need; i++) {
		lo = lo << 6;
		hi = hi << 6 | 0x3F;
	}
	if (lo < min_cp[need])
		lo = min_cp[need];
	if (hi > 0x10FFFF)
		hi = 0x10FFFF;
	uint64_t key = (uint64_t)set << 32 | 1u << 31 | (uint32_t)p->n << 24 |
		       (uint32_t)p->b[0] << 16 | (uint32_t)p->b[1] << 8 | p->b[2];
	if (p->n < 3)
		key &= ~(uint64_t)(p->n == 1 ? 0xFFFF : 0xFF);
	uint32_t val;
	if (step_lookup(w, key, &val))
		return val;
	val = set_meets(w, set, lo, hi) ? set : 0;
	step_store(w, key, val);
	return val;
}

const uint64_t *gram_ws_fix(struct gram_ws *w, uint32_t set)
{
	if (set >= w->cap_fix) {
		uint32_t old = w->cap_fix, c = old ? old : 64;
		while (c <= set)
			c *= 2;
		void *f = realloc(w->fix, (size_t)c * sizeof(*w->fix));
		if (!f)
			return NULL;
		w->fix = f;
		uint8_t *k = realloc(w->fix_known, c);
		if (!k)
			return NULL;
		memset(k + old, 0, c - old);
		w->fix_known = k;
		w->cap_fix = c;
	}
	if (!w->fix_known[set]) {
		uint64_t m[2] = { 0, 0 };
		for (uint32_t b = 1; b < 128 && !w->err; b++)
			if (step_cp(w, set, b) == set)
				m[b / 64] |= 1ull << (b % 64);
		if (w->err)
			return NULL;
		/* Uniform above ASCII: each class holds all of 0x80.. or none. */
		bool uniform = true;
		const struct gram_set *st = &w->sets[set];
		for (uint32_t i = 0; i < st->n && uniform; i++) {
			uint32_t id = w->set_data[st->off + i];
			if (id == GRAM_ACCEPT)
				continue;
			uint32_t c = w->g->elems[w->nodes[id].pos].arg;
			const struct gram_range *r = w->g->ranges + w->g->classes[c].off;
			uint32_t n = w->g->classes[c].n;
			bool all = n > 0 && r[n - 1].lo <= 0x80 && r[n - 1].hi >= 0x10FFFF;
			bool none = n == 0 || r[n - 1].hi < 0x80;
			uniform = all || none;
		}
		if (uniform && step_cp(w, set, 0x80) == set)
			m[0] |= 1;
		if (w->err)
			return NULL;
		st = &w->sets[set];
		w->fix[set][0] = m[0];
		w->fix[set][1] = m[1];
		w->fix_known[set] = 1;
	}
	return w->fix[set];
}

/* Writes set into s's flat stacks. */
static int state_store(struct grammar_state *s, const struct gram_ws *w, uint32_t set)
{
	const struct gram_set *st = &w->sets[set];
	size_t need = 0;
	for (uint32_t i = 0; i < st->n; i++) {
		uint32_t id = w->set_data[st->off + i];
		if (id == GRAM_ACCEPT)
			continue;
		for (uint32_t n = id; n != GRAM_NONE; n = w->nodes[n].parent)
			need++;
		need++;
	}
	if (need > s->cap_flat) {
		uint32_t *f = realloc(s->flat, need * sizeof(*f));
		if (!f)
			return -ENOMEM;
		s->flat = f;
		s->cap_flat = need;
	}
	size_t k = 0;
	s->n_stacks = 0;
	s->accept = false;
	for (uint32_t i = 0; i < st->n; i++) {
		uint32_t id = w->set_data[st->off + i];
		if (id == GRAM_ACCEPT) {
			s->accept = true;
			continue;
		}
		uint32_t len = 0;
		for (uint32_t n = id; n != GRAM_NONE; n = w->nodes[n].parent)
			len++;
		s->flat[k] = len;
		uint32_t j = len;
		for (uint32_t n = id; n != GRAM_NONE; n = w->nodes[n].parent)
			s->flat[k + j--] = w->nodes[n].pos;
		k += len + 1;
		s->n_stacks++;
	}
	s->n_flat = k;
	return 0;
}

int gram_state_set(struct grammar_state *s, uint32_t *set, struct gram_part *p,
		   struct gram_ws **wp)
{
	if (!s->ws) {
		s->ws = calloc(1, sizeof(*s->ws));
		if (!s->ws)
			return -ENOMEM;
	}
	struct gram_ws *w = s->ws;
	int rc = gram_ws_begin(w, s->g);
	if (rc)
		return rc;
	w->n_tmp = 0;
	for (size_t k = 0; k < s->n_flat;) {
		uint32_t len = s->flat[k], id = GRAM_NONE;
		for (uint32_t j = 1; j <= len; j++)
			id = node_get(w, s->flat[k + j], id);
		emit(w, id);
		k += len + 1;
	}
	if (s->accept)
		emit(w, GRAM_ACCEPT);
	*set = set_intern(w);
	*p = s->part;
	*wp = w;
	return w->err;
}

int grammar_state_new(struct grammar_state **out, const struct grammar *g)
{
	*out = NULL;
	struct grammar_state *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->g = g;
	s->ws = calloc(1, sizeof(*s->ws));
	int rc = s->ws ? gram_ws_begin(s->ws, g) : -ENOMEM;
	if (rc == 0) {
		struct gram_ws *w = s->ws;
		w->n_tmp = 0;
		w->work = 0;
		const struct gram_rule *r = &g->rules[g->root];
		for (uint32_t k = 0; k < r->n_alts && !w->err; k++)
			closure(w, frame(w, g->alts[r->alt_off + k], GRAM_NONE));
		uint32_t set = set_intern(w);
		rc = w->err ? w->err : state_store(s, w, set);
	}
	if (rc) {
		grammar_state_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int grammar_state_clone(struct grammar_state **out, const struct grammar_state *s)
{
	*out = NULL;
	struct grammar_state *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = *s;
	c->ws = NULL;
	c->flat = malloc((s->n_flat ? s->n_flat : 1) * sizeof(*c->flat));
	if (!c->flat) {
		free(c);
		return -ENOMEM;
	}
	if (s->n_flat)
		memcpy(c->flat, s->flat, s->n_flat * sizeof(*c->flat));
	c->cap_flat = s->n_flat ? s->n_flat : 1;
	*out = c;
	return 0;
}

void grammar_state_free(struct grammar_state *s)
{
	if (!s)
		return;
	gram_ws_free(s->ws);
	free(s->flat);
	free(s);
}

int grammar_state_advance(struct grammar_state *s, const void *bytes, size_t n)
{
	uint32_t set;
	struct gram_part p;
	struct gram_ws *w;
	int rc = gram_state_set(s, &set, &p, &w);
	if (rc)
		return rc;
	const uint8_t *b = bytes;
	for (size_t i = 0; i < n && set; i++)
		set = gram_ws_byte(w, set, &p, b[i]);
	if (w->err)
		return w->err;
	if (set == 0)
		return -EILSEQ;
	rc = state_store(s, w, set);
	if (rc)
		return rc;
	s->part = p;
	return 0;
}

bool grammar_state_accepting(const struct grammar_state *s)
{
	return s->accept && s->part.n == 0;
}

bool grammar_state_dead(const struct grammar_state *s)
{
	return !s->accept && s->n_stacks == 0;
}
