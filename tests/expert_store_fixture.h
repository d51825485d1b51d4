/*
 * expert_store_fixture — the one-copy fixture that test_expert_store and
 * test_store_classes share: 32 experts a layer, 8 a step, records of 8 KiB
 * in layers 0, 2 and 3 by default (one frame class; the class tests pass
 * their own sizes), and the checked steps both files drive a store with.
 */
#ifndef COLIBRI_TESTS_EXPERT_STORE_FIXTURE_H
#define COLIBRI_TESTS_EXPERT_STORE_FIXTURE_H

#include "tests/store_fixture.h"

#define FX_LAYERS SF_LAYERS
#define FX_EXPERTS 32
#define FX_PER_STEP 8
#define FX_REC 8192
#define FX_SEED 0x1234567ull

static const uint64_t fx_records[FX_LAYERS] = {FX_REC, 0, FX_REC, FX_REC};
static const int fx_moe_layers[3] = {0, 2, 3};

/* FX_EXPERTS records a layer of the sizes given, in a fresh scratch folder. */
static inline void fixture_make_records(struct store_fixture *fx, const uint64_t records[FX_LAYERS])
{
	store_fixture_make(fx, 1, FX_EXPERTS, records, FX_SEED);
}

static inline void fixture_make(struct store_fixture *fx)
{
	fixture_make_records(fx, fx_records);
}

/* A store of `frames` frames of the default records. */
static inline struct expert_store *store_open(const struct store_fixture *fx, uint64_t frames, int depth,
					      bool buffered, enum expert_evict evict, int prefetch_depth)
{
	struct expert_store_options o = {
		.cache_bytes = frames * FX_REC, .io_depth = depth, .buffered = buffered,
		.evict = evict, .prefetch_depth = prefetch_depth,
	};
	return store_fixture_open(fx, FX_PER_STEP, &o);
}

/* One layer step: request, check each delivery against the file bytes and
 * its frame's 4 KiB alignment, and that each distinct id comes exactly
 * once and nothing after; release (unless hold). */
static inline void step_check(struct expert_store *s, const struct store_fixture *fx, int layer,
			      const int32_t *ids, int n, bool hold)
{
	const void *recs[SF_EXPERTS_MAX] = {0};
	int rc = store_fixture_step(s, fx, layer, ids, n, hold, recs);
	cr_assert_eq(rc, 0, "layer %d: %s", layer, error_message());
	for (int i = 0; i < n; i++)
		cr_assert_eq((uintptr_t)recs[ids[i]] % 4096, 0);
	int32_t e;
	const void *rec;
	cr_assert_eq(expert_store_next(s, &e, &rec), 0);
}

/* Requests ids of layer; stores each delivered record pointer in recs[id]
 * (when recs), checks the bytes, releases. */
static inline void step_recs(struct expert_store *s, const struct store_fixture *fx, int layer,
			     const int32_t *ids, int n, const void **recs)
{
	int rc = store_fixture_step(s, fx, layer, ids, n, false, recs);
	cr_assert_eq(rc, 0, "layer %d: %s", layer, error_message());
}

/* Random steps over the MoE layers (duplicate ids included), with a
 * prefetch of the next step's ids before each step's deliveries. */
static inline void random_steps(struct expert_store *s, const struct store_fixture *fx, int n_steps,
				uint64_t seed)
{
	int32_t ids[2][16];
	int n[2], layer[2];
	for (int k = 0; k < 2; k++) {
		layer[k] = fx_moe_layers[splitmix(&seed) % 3];
		n[k] = 1 + (int)(splitmix(&seed) % 12);
		for (int i = 0; i < n[k]; i++)
			ids[k][i] = (int32_t)(splitmix(&seed) % (i < FX_PER_STEP ? FX_EXPERTS : 4));
		/* At most FX_PER_STEP distinct ids: the tail repeats the head. */
		for (int i = FX_PER_STEP; i < n[k]; i++)
			ids[k][i] = ids[k][i - FX_PER_STEP];
	}
	for (int step = 0; step < n_steps; step++) {
		int cur = step & 1, nxt = cur ^ 1;
		layer[nxt] = fx_moe_layers[splitmix(&seed) % 3];
		n[nxt] = 1 + (int)(splitmix(&seed) % 12);
		for (int i = 0; i < n[nxt]; i++)
			ids[nxt][i] = i < FX_PER_STEP ? (int32_t)(splitmix(&seed) % FX_EXPERTS)
						     : ids[nxt][i - FX_PER_STEP];
		if (step % 3 == 0)
			cr_assert(expert_store_prefetch(s, layer[cur], ids[cur], n[cur]) >= 0);
		step_check(s, fx, layer[cur], ids[cur], n[cur], false);
	}
}

#endif
