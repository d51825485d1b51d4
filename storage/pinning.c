/*
 * pinning — see pinning.h.
 */
#include "storage/pinning.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* The bits of pinning.cell: in the pinned set, and chosen to join or leave
 * it by the repin call under way. */
enum { PIN_CELL_PINNED = 1, PIN_CELL_ADDED = 2, PIN_CELL_DROPPED = 4 };

static uint8_t *cell_of(struct pinning *p, int layer, int expert)
{
	return &p->cell[(size_t)layer * p->t.n_experts + expert];
}

/* Earlier runs plus this run's requests for (layer, expert). */
static double score(const struct pinning *p, int layer, int expert)
{
	const uint32_t *now = expert_store_usage(p->t.store, layer);
	return p->usage.counts[(size_t)layer * p->usage.n_experts + expert] + (now ? now[expert] : 0);
}

int pinning_start(struct pinning *p, const struct pinning_target *t, bool enabled)
{
	memset(p, 0, sizeof *p);
	p->t = *t;
	int rc = usage_init(&p->usage, t->n_layers, t->n_experts, t->model_id);
	if (rc)
		return rc;
	if (usage_load(&p->usage, p->t.dir) != 0)
		error_clear();
	for (size_t i = 0; t->owner && i < (size_t)t->n_layers * t->n_experts; i++)
		if (t->owner[i] != t->rank)
			p->usage.counts[i] = 0;
	const struct expert_store_stats *st = expert_store_stats(p->t.store);
	for (int c = 0; enabled && c < st->n_classes && c < EXPERT_CLASSES_MAX; c++) {
		int spare = st->classes[c].n_frames - p->t.max_per_step;
		int every = st->classes[c].n_layers * p->t.n_experts;
		p->class_cap[c] = st->classes[c].n_frames >= every ? spare : spare > 0 ? spare / 2 : 0;
		p->cap += p->class_cap[c];
	}
	p->pins = calloc((size_t)p->cap + 1, sizeof *p->pins);
	p->cell = calloc((size_t)p->t.n_layers * p->t.n_experts + 1, 1);
	p->hot_layer = calloc((size_t)p->cap * 2 + 1, sizeof *p->hot_layer);
	p->hot_expert = calloc((size_t)p->cap * 2 + 1, sizeof *p->hot_expert);
	if (!p->pins || !p->hot_layer || !p->hot_expert || !p->cell)
		return error_set(ENOMEM, "out of memory");
	p->enabled = p->cap > 0;
	if (!p->enabled)
		return 0;
	/* Twice the cap of candidates, so that a class already full leaves
	 * room for the next hottest of the others. */
	int n_hot = usage_hottest(&p->usage, p->cap * 2, p->hot_layer, p->hot_expert), n = 0;
	for (int i = 0; i < n_hot && n < p->cap; i++) {
		int c = expert_store_layer_class(p->t.store, p->hot_layer[i]);
		if (c < 0 || p->class_pins[c] >= p->class_cap[c])
			continue;
		p->class_pins[c]++;
		p->pins[n++] = (struct expert_pin){ p->hot_layer[i], p->hot_expert[i] };
	}
	rc = n > 0 ? expert_store_pin_set(p->t.store, p->pins, n) : 0;
	/* A record that cannot be read or verified is a broken container: the
	 * run stops with that error. Only a shortage of frames costs just the
	 * pinning. */
	if (rc && rc != -ENOMEM)
		return rc;
	if (rc) {
		fprintf(stderr, "colibri: warning: not pinning the learned experts: %s\n", error_message());
		error_clear();
		n = 0;
		memset(p->class_pins, 0, sizeof p->class_pins);
	}
	p->n_pins = n;
	for (int i = 0; i < n; i++)
		*cell_of(p, p->pins[i].layer, p->pins[i].expert) |= PIN_CELL_PINNED;
	return 0;
}

int pinning_repin(struct pinning *p, int max_swaps)
{
	if (!p->enabled || max_swaps <= 0)
		return 0;
	struct expert_pin add[64], drop[64];
	int n_add = 0, n_drop = 0;
	if (max_swaps > 64)
		max_swaps = 64;
	/* Hottest unpinned candidates, by repeated max: O(cells * swaps), with
	 * each cell's state one lookup in p->cell. */
	int in_class[EXPERT_CLASSES_MAX]; /* pins of each class once this call's swaps are done */
	memcpy(in_class, p->class_pins, sizeof in_class);
	for (int s = 0; s < max_swaps; s++) {
		double best = 0;
		int bl = -1, be = -1;
		for (int l = 0; l < p->t.n_layers; l++) {
			int lc = expert_store_layer_class(p->t.store, l);
			if (lc < 0 || p->class_cap[lc] == 0) /* a dense layer has no class */
				continue;
			for (int e = 0; e < p->t.n_experts; e++) {
				if (*cell_of(p, l, e) & (PIN_CELL_PINNED | PIN_CELL_ADDED))
					continue;
				double v = score(p, l, e);
				if (v > best) {
					best = v;
					bl = l;
					be = e;
				}
			}
		}
		if (bl < 0)
			break;
		/* Pinning more while its class has room; otherwise swap for the
		 * coldest pinned of the same class. */
		int bc = expert_store_layer_class(p->t.store, bl);
		*cell_of(p, bl, be) |= PIN_CELL_ADDED;
		if (in_class[bc] < p->class_cap[bc]) {
			add[n_add++] = (struct expert_pin){ bl, be };
			in_class[bc]++;
			continue;
		}
		int cold = -1;
		double cv = best;
		for (int i = 0; i < p->n_pins; i++) {
			if (expert_store_layer_class(p->t.store, p->pins[i].layer) != bc)
				continue;
			if (*cell_of(p, p->pins[i].layer, p->pins[i].expert) & PIN_CELL_DROPPED)
				continue;
			double v = score(p, p->pins[i].layer, p->pins[i].expert);
			if (v < cv) {
				cv = v;
				cold = i;
			}
		}
		if (cold < 0) {
			*cell_of(p, bl, be) &= (uint8_t)~PIN_CELL_ADDED;
			break;
		}
		*cell_of(p, p->pins[cold].layer, p->pins[cold].expert) |= PIN_CELL_DROPPED;
		drop[n_drop++] = p->pins[cold];
		add[n_add++] = (struct expert_pin){ bl, be };
	}
	int rc = n_add ? expert_store_repin(p->t.store, add, n_add, drop, n_drop) : 0;
	if (rc) {
		fprintf(stderr, "colibri: warning: repinning failed: %s\n", error_message());
		error_clear();
	} else if (n_add) {
		memcpy(p->class_pins, in_class, sizeof p->class_pins);
		/* Mirror the store's set: remove the dropped, append the added. */
		int k = 0;
		for (int i = 0; i < p->n_pins; i++)
			if (!(*cell_of(p, p->pins[i].layer, p->pins[i].expert) & PIN_CELL_DROPPED))
				p->pins[k++] = p->pins[i];
		for (int i = 0; i < n_add && k < p->cap; i++)
			p->pins[k++] = add[i];
		p->n_pins = k;
		p->repins += n_add;
	}
	/* The set's bits follow what the store now holds. */
	for (int i = 0; i < n_drop; i++) {
		uint8_t *c = cell_of(p, drop[i].layer, drop[i].expert);
		*c = rc ? (uint8_t)(*c & PIN_CELL_PINNED) : 0;
	}
	for (int i = 0; i < n_add; i++)
		*cell_of(p, add[i].layer, add[i].expert) = rc ? 0 : PIN_CELL_PINNED;
	return 0;
}

void pinning_finish(struct pinning *p)
{
	/* A run that failed leaves its error pending: save nothing then, so
	 * that the error the user sees is the run's, first and alone (a
	 * save's own failure would otherwise stand in for it, or clear it). */
	if (p->usage.counts && p->t.store && !p->t.no_save && !error_message()[0]) {
		for (int l = 0; l < p->t.n_layers; l++)
			usage_add(&p->usage, l, expert_store_usage(p->t.store, l));
		if (usage_save(&p->usage, p->t.dir) != 0) {
			fprintf(stderr, "colibri: warning: cannot save expert usage (learned pinning starts cold "
					"next time): %s\n", error_message());
			error_clear();
		}
	}
	usage_free(&p->usage);
	free(p->pins);
	free(p->hot_layer);
	free(p->hot_expert);
	free(p->cell);
	memset(p, 0, sizeof *p);
}
