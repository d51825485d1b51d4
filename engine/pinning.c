/*
 * pinning — see pinning.h.
 */
#include "engine/pinning.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/error.h"

/* Earlier runs plus this run's requests for (layer, expert). */
static double score(const struct pinning *p, const struct model *m, int layer, int expert)
{
	const uint32_t *now = expert_store_usage(m->store, layer);
	return p->usage.counts[(size_t)layer * p->usage.n_experts + expert] + (now ? now[expert] : 0);
}

int pinning_start(struct pinning *p, struct model *m, int frames)
{
	memset(p, 0, sizeof *p);
	int rc = usage_init(&p->usage, &m->man, m->cfg.n_layers);
	if (rc)
		return rc;
	if (usage_load(&p->usage, m->dir) != 0)
		error_clear();
	p->cap = frames > 0 ? frames : 0;
	p->pins = calloc((size_t)p->cap + 1, sizeof *p->pins);
	p->hot_layer = calloc((size_t)p->cap * 2 + 1, sizeof *p->hot_layer);
	p->hot_expert = calloc((size_t)p->cap * 2 + 1, sizeof *p->hot_expert);
	if (!p->pins || !p->hot_layer || !p->hot_expert)
		return error_set(ENOMEM, "out of memory");
	p->enabled = p->cap > 0;
	if (!p->enabled)
		return 0;
	int n = usage_hottest(&p->usage, p->cap, p->hot_layer, p->hot_expert);
	for (int i = 0; i < n; i++)
		p->pins[i] = (struct expert_pin){ p->hot_layer[i], p->hot_expert[i] };
	if (n > 0 && expert_store_pin_set(m->store, p->pins, n) != 0) {
		fprintf(stderr, "colibri: warning: not pinning the learned experts: %s\n", error_message());
		error_clear();
		n = 0;
	}
	p->n_pins = n;
	return 0;
}

static bool is_pinned(const struct pinning *p, int layer, int expert)
{
	for (int i = 0; i < p->n_pins; i++)
		if (p->pins[i].layer == layer && p->pins[i].expert == expert)
			return true;
	return false;
}

int pinning_repin(struct pinning *p, struct model *m, int max_swaps)
{
	if (!p->enabled || max_swaps <= 0)
		return 0;
	struct expert_pin add[64], drop[64];
	int n_add = 0, n_drop = 0;
	if (max_swaps > 64)
		max_swaps = 64;
	/* Hottest unpinned candidates, by repeated max: O(cells * swaps), fine
	 * at the few thousand experts of the largest models. */
	for (int s = 0; s < max_swaps; s++) {
		double best = 0;
		int bl = -1, be = -1;
		for (int l = 0; l < m->cfg.n_layers; l++) {
			if (!m->layers[l].moe)
				continue;
			for (int e = 0; e < m->cfg.n_experts; e++) {
				double v = score(p, m, l, e);
				bool taken = is_pinned(p, l, e);
				for (int k = 0; k < n_add && !taken; k++)
					taken = add[k].layer == l && add[k].expert == e;
				if (!taken && v > best) {
					best = v;
					bl = l;
					be = e;
				}
			}
		}
		if (bl < 0)
			break;
		/* Pinning more while there is room; otherwise swap for the coldest pinned. */
		if (p->n_pins - n_drop + n_add < p->cap) {
			add[n_add++] = (struct expert_pin){ bl, be };
			continue;
		}
		int cold = -1;
		double cv = best;
		for (int i = 0; i < p->n_pins; i++) {
			double v = score(p, m, p->pins[i].layer, p->pins[i].expert);
			bool dropped = false;
			for (int k = 0; k < n_drop && !dropped; k++)
				dropped = drop[k].layer == p->pins[i].layer && drop[k].expert == p->pins[i].expert;
			if (!dropped && v < cv) {
				cv = v;
				cold = i;
			}
		}
		if (cold < 0)
			break;
		drop[n_drop++] = p->pins[cold];
		add[n_add++] = (struct expert_pin){ bl, be };
	}
	if (n_add == 0)
		return 0;
	int rc = expert_store_repin(m->store, add, n_add, drop, n_drop);
	if (rc) {
		fprintf(stderr, "colibri: warning: repinning failed: %s\n", error_message());
		error_clear();
		return 0;
	}
	/* Mirror the store's set: remove the dropped, append the added. */
	int k = 0;
	for (int i = 0; i < p->n_pins; i++) {
		bool dropped = false;
		for (int d = 0; d < n_drop && !dropped; d++)
			dropped = drop[d].layer == p->pins[i].layer && drop[d].expert == p->pins[i].expert;
		if (!dropped)
			p->pins[k++] = p->pins[i];
	}
	for (int i = 0; i < n_add && k < p->cap; i++)
		p->pins[k++] = add[i];
	p->n_pins = k;
	p->repins += n_add;
	return 0;
}

void pinning_finish(struct pinning *p, struct model *m)
{
	if (p->usage.counts && m->store) {
		for (int l = 0; l < m->cfg.n_layers; l++)
			usage_add(&p->usage, l, expert_store_usage(m->store, l));
		if (usage_save(&p->usage, m->dir) != 0) {
			fprintf(stderr, "colibri: warning: cannot save expert usage: %s\n", error_message());
			error_clear();
		}
	}
	usage_free(&p->usage);
	free(p->pins);
	free(p->hot_layer);
	free(p->hot_expert);
	memset(p, 0, sizeof *p);
}
