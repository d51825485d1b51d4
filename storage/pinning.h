/*
 * pinning — learned pinning: the experts this user's workload routes to
 * most (counted across runs in the usage sidecar) are loaded at start-up
 * and kept in RAM for the whole run; --repin N lets a run swap up to N cold
 * pinned experts for hotter streamed ones at safe points between tokens.
 * Pinning changes which experts are resident, never the results.
 */
#ifndef COLIBRI_STORAGE_PINNING_H
#define COLIBRI_STORAGE_PINNING_H

#include <stdbool.h>

#include "storage/expert_store.h"
#include "storage/usage.h"

/* What pinning works on: the store, the folder of the usage sidecar, the
 * shape and identity of the routed experts. The store and dir must outlive
 * the pinning. */
struct pinning_target {
	struct expert_store *store;
	const char *dir;             /* where usage.json lives (the model folder) */
	int n_layers;                /* decoder layers whose usage is learned */
	int n_experts;
	int max_per_step;            /* frames of each class one step needs */
	uint64_t model_id;
	/* Under MPI (engine/dist) each rank pins only experts it serves, and
	 * no rank writes the sidecar back: each sees only its share. */
	const uint8_t *owner;        /* [n_layers, n_experts] the rank serving each expert, or NULL */
	int rank;
	bool no_save;
};

struct pinning {
	struct pinning_target t;
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
 * none); a class with a frame for every expert of its layers (the model in
 * RAM) pins all its frames but one step's need, since nothing would evict
 * them anyway: a run then starts warm, missing at most the few coldest. A
 * pin set the store refuses is a warning, not a failure. */
int pinning_start(struct pinning *p, const struct pinning_target *t, bool enabled);

/* Between steps: swaps at most max_swaps of the coldest pinned experts for
 * hotter unpinned ones of the same frame class, ranked by earlier runs plus
 * this run's counts. */
int pinning_repin(struct pinning *p, int max_swaps);

/* Adds this run's counts and writes the sidecar (a failure is a warning);
 * nothing is saved while an error is pending (the run failed). */
void pinning_finish(struct pinning *p);

#endif
