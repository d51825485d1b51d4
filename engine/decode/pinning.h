/*
 * pinning — learned pinning: the experts this user's workload routes to
 * most (counted across runs in the usage sidecar) are loaded at start-up
 * and kept in RAM for the whole run; --repin N lets a run swap up to N cold
 * pinned experts for hotter streamed ones at safe points between tokens.
 * Pinning changes which experts are resident, never the results.
 */
#ifndef COLIBRI_ENGINE_PINNING_H
#define COLIBRI_ENGINE_PINNING_H

#include <stdbool.h>

#include "engine/model/model.h"
#include "engine/decode/usage.h"
#include "storage/expert_store.h"

struct pinning {
	struct usage usage;          /* counts from earlier runs */
	struct expert_pin *pins;     /* [cap] the current pinned set */
	int n_pins, cap;             /* cap: the sum of class_cap */
	int class_cap[EXPERT_CLASSES_MAX];  /* pins each frame class of the store takes at most */
	int class_pins[EXPERT_CLASSES_MAX]; /* pins in each class now */
	int32_t *hot_layer, *hot_expert; /* [cap * 2] scratch for selection */
	uint8_t *cell;               /* [n_layers * n_experts] PIN_CELL_* bits of each expert */
	bool enabled;
	int repins;                  /* swaps made during this run */
};

/* Loads the sidecar and, when enabled (not --no-pin), pins the hottest
 * experts into at most half of each frame class's frames beyond one step's
 * need (so a class of max_per_step frames, such as an MTP layer's, gets
 * none). A pin set the store refuses is a warning, not a failure. */
int pinning_start(struct pinning *p, struct model *m, bool enabled);

/* Between steps: swaps at most max_swaps of the coldest pinned experts for
 * hotter unpinned ones of the same frame class, ranked by earlier runs plus
 * this run's counts. */
int pinning_repin(struct pinning *p, struct model *m, int max_swaps);

/* Adds this run's counts and writes the sidecar (a failure is a warning);
 * nothing is saved while an error is pending (the run failed). */
void pinning_finish(struct pinning *p, struct model *m);

#endif
