/*
 * test_store_classes — the expert store (storage/) over records of more
 * than one size, one frame class per size, and the cooling of a layer; on
 * expert files generated here (tests/expert_store_fixture.h) whose bytes
 * the test keeps as the reference.
 *
 * Covers: records of three sizes byte-equal at several caches and with
 * every backend (io_uring direct and buffered, the pread pool), every
 * class's frames registered; the split of a budget (one step per class,
 * then the main class, then the rest), the minimum and its message, and
 * more record sizes than classes refused; frames named per class as a plan
 * passes them (never more than records, at least one step, every class
 * named); misses in one class never evict another's frames; capacity, the
 * pinned set, prefetch and the counters per class. A cooled layer's
 * experts are evicted before colder ones of other layers; uncooled, the
 * hotter layer stays.
 * (One record size: tests/test_expert_store.c.)
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>

#include "base/error.h"
#include "storage/expert_store.h"
#include "tests/expert_store_fixture.h"

/* ---- frame classes ---- */

/* The MTP shape: layers 0 and 2 hold the common small records (the int4
 * routed experts), layer 3 records twice their size (an MTP layer at int8). */
#define CX_SMALL 4096
#define CX_BIG 8192
static const uint64_t cx_records[FX_LAYERS] = {CX_SMALL, 0, CX_SMALL, CX_BIG};

static struct expert_store *store_open_bytes(const struct store_fixture *fx, uint64_t cache_bytes,
					     int depth, bool buffered, int prefetch_depth)
{
	struct expert_store_options o = {
		.cache_bytes = cache_bytes, .io_depth = depth, .buffered = buffered,
		.prefetch_depth = prefetch_depth,
	};
	return store_fixture_open(fx, FX_PER_STEP, &o);
}

/* Each class's counters add up, match its layers' and sum to the store's. */
static void class_stats_check(const struct expert_store *s, const struct store_fixture *fx)
{
	const struct expert_store_stats *st = expert_store_stats(s);
	uint64_t requests = 0, misses = 0, bytes = 0;
	int32_t frames = 0;
	for (int c = 0; c < st->n_classes; c++) {
		const struct expert_class_stats *k = &st->classes[c];
		cr_assert_eq(k->requests, k->pinned_hits + k->hits + k->joins + k->misses, "class %d", c);
		uint64_t layer_requests = 0;
		int layers = 0;
		for (int l = 0; l < FX_LAYERS; l++)
			if (fx->desc[l].path && fx->desc[l].record_bytes == k->frame_bytes) {
				cr_assert_eq(expert_store_layer_class(s, l), c);
				layer_requests += st->layer_requests[l];
				layers++;
			}
		cr_assert_eq(k->n_layers, layers);
		cr_assert_eq(k->requests, layer_requests, "class %d counts only its layers", c);
		requests += k->requests;
		misses += k->misses;
		bytes += k->bytes_read;
		frames += k->n_frames;
		if (c > 0)
			cr_assert_gt(k->frame_bytes, st->classes[c - 1].frame_bytes, "classes ascend by size");
	}
	cr_assert_eq(requests, st->requests);
	cr_assert_eq(misses, st->misses);
	cr_assert_eq(bytes, st->bytes_read);
	cr_assert_eq(frames, st->n_frames);
	cr_assert_eq(st->frame_bytes, st->classes[st->n_classes - 1].frame_bytes);
}

/* Three record sizes, one layer each: three classes, every record byte-equal
 * at the smallest, a medium and a whole-model cache, io_depth 1 and 64. */
static void check_class_configs(bool buffered)
{
	const uint64_t rec[FX_LAYERS] = {4096, 0, 12288, 8192}, step = 4096 + 8192 + 12288;
	struct store_fixture fx;
	fixture_make_records(&fx, rec);
	const uint64_t caches[3] = {FX_PER_STEP * step, FX_PER_STEP * step + 20 * 4096, FX_EXPERTS * step};
	for (int c = 0; c < 3; c++)
		for (int d = 1; d <= 64; d *= 64) {
			struct expert_store *s = store_open_bytes(&fx, caches[c], d, buffered, 0);
			const struct expert_store_stats *st = expert_store_stats(s);
			cr_assert_eq(st->n_classes, 3);
			cr_assert_eq(st->classes[0].frame_bytes, 4096);
			cr_assert_eq(st->classes[1].frame_bytes, 8192);
			cr_assert_eq(st->classes[2].frame_bytes, 12288);
			for (int k = 0; k < 3; k++)
				cr_assert_geq(st->classes[k].n_frames, FX_PER_STEP);
			cr_assert_leq(st->cache_bytes, caches[c]);
			if (c == 1)
				cr_assert_eq(st->classes[0].n_frames, FX_PER_STEP + 20,
					     "a tie in layers goes to the smaller records");
			const char *no_fixed = getenv("COLIBRI_NO_FIXED_BUFFERS");
			if (st->io_uring && !(no_fixed && *no_fixed && strcmp(no_fixed, "0")))
				cr_assert(st->fixed_buffers, "every class's frames registered");
			random_steps(s, &fx, 200, 31 + (uint64_t)c * 10 + (uint64_t)d);
			class_stats_check(s, &fx);
			if (c == 2)
				cr_assert_leq(st->bytes_read, FX_EXPERTS * step, "a whole-model cache reads each once");
			expert_store_close(s);
		}
	store_fixture_free(&fx);
}

Test(store_classes, classes_bytes_match_direct)
{
	check_class_configs(false);
}

Test(store_classes, classes_bytes_match_buffered)
{
	check_class_configs(true);
}

Test(store_classes, classes_bytes_match_pread)
{
	setenv("COLIBRI_NO_IO_URING", "1", 1);
	check_class_configs(false);
}

/* The split: every class one step first, then the main class (most
 * layers) up to all its records, then the rest. The small class gets what
 * a store without the big layer would get from the budget less the big
 * class's reserve. */
Test(store_classes, split_main_class_first)
{
	struct store_fixture fx, plain;
	fixture_make_records(&fx, cx_records);
	const uint64_t no_big[FX_LAYERS] = {CX_SMALL, 0, CX_SMALL, 0};
	fixture_make_records(&plain, no_big);
	const uint64_t reserve = FX_PER_STEP * CX_BIG, min = FX_PER_STEP * (CX_SMALL + CX_BIG);
	cr_assert_eq(expert_store_min_bytes(fx.desc, FX_LAYERS, FX_PER_STEP), min);
	cr_assert_eq(expert_store_min_bytes(plain.desc, FX_LAYERS, FX_PER_STEP), FX_PER_STEP * CX_SMALL);
	struct {
		uint64_t cache;
		int32_t small, big;
	} cases[] = {
		{min, FX_PER_STEP, FX_PER_STEP},
		{min - 1, FX_PER_STEP + 1, FX_PER_STEP - 1}, /* the big one short, the rest to the main */
		{reserve + 40 * CX_SMALL + CX_SMALL - 1, 40, FX_PER_STEP},
		{reserve + 2 * FX_EXPERTS * CX_SMALL + 3 * CX_BIG, 2 * FX_EXPERTS, FX_PER_STEP + 3},
		{1ull << 30, 2 * FX_EXPERTS, FX_EXPERTS},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct expert_class_frames out[EXPERT_CLASSES_MAX], alone[EXPERT_CLASSES_MAX];
		cr_assert_eq(expert_store_split(fx.desc, FX_LAYERS, FX_PER_STEP, cases[i].cache, out), 2);
		cr_assert_eq(out[0].frame_bytes, CX_SMALL);
		cr_assert_eq(out[1].frame_bytes, CX_BIG);
		cr_assert_eq(out[0].n_frames, cases[i].small, "case %zu: %d small frames", i, out[0].n_frames);
		cr_assert_eq(out[1].n_frames, cases[i].big, "case %zu: %d big frames", i, out[1].n_frames);
		if (cases[i].cache < min) {
			struct expert_store_options o = {.cache_bytes = cases[i].cache, .io_depth = 4};
			struct expert_store *s = NULL;
			error_clear();
			cr_assert_eq(expert_store_open(&s, fx.desc, FX_LAYERS, FX_PER_STEP, &o), -ENOMEM);
			cr_assert(strstr(error_message(), "below the minimum of") && strstr(error_message(), "4 + 8 KiB"),
				  "%s", error_message());
			continue;
		}
		/* Until every small record fits, exactly what the store without the big layer gets. */
		cr_assert_eq(expert_store_split(plain.desc, FX_LAYERS, FX_PER_STEP, cases[i].cache - reserve, alone), 1);
		if (alone[0].n_frames < 2 * FX_EXPERTS)
			cr_assert_eq(out[0].n_frames, alone[0].n_frames);
		struct expert_store *s = store_open_bytes(&fx, cases[i].cache, 4, false, 0);
		const struct expert_store_stats *st = expert_store_stats(s);
		cr_assert_eq(st->classes[0].n_frames, out[0].n_frames, "the store opens what the split says");
		cr_assert_eq(st->classes[1].n_frames, out[1].n_frames);
		cr_assert_eq(st->cache_bytes, out[0].n_frames * CX_SMALL + (uint64_t)out[1].n_frames * CX_BIG);
		expert_store_close(s);
	}
	/* More record sizes than classes. */
	struct expert_layer_desc many[EXPERT_CLASSES_MAX + 1];
	struct expert_class_frames out[EXPERT_CLASSES_MAX];
	for (int i = 0; i <= EXPERT_CLASSES_MAX; i++)
		many[i] = (struct expert_layer_desc){ .path = "x", .record_bytes = 4096 * (uint64_t)(i + 1), .n_experts = 8 };
	error_clear();
	cr_assert_eq(expert_store_split(many, EXPERT_CLASSES_MAX + 1, FX_PER_STEP, 1 << 30, out), -EINVAL);
	cr_assert(strstr(error_message(), "sizes"), "%s", error_message());
	store_fixture_free(&fx);
	store_fixture_free(&plain);
}

/* Frames named per class, as a plan passes them. */
Test(store_classes, class_frames_named)
{
	struct store_fixture fx;
	fixture_make_records(&fx, cx_records);
	struct expert_store_options o = {
		.cache_bytes = 1, /* ignored */
		.io_depth = 4,
		.class_frames = {{CX_BIG, 9}, {16384, 4}, {CX_SMALL, 30}}, /* any order; 16 KiB: no such class */
	};
	struct expert_store *s = NULL;
	error_clear();
	cr_assert_eq(expert_store_open(&s, fx.desc, FX_LAYERS, FX_PER_STEP, &o), 0, "%s", error_message());
	const struct expert_store_stats *st = expert_store_stats(s);
	cr_assert_eq(st->classes[0].n_frames, 30);
	cr_assert_eq(st->classes[1].n_frames, 9);
	random_steps(s, &fx, 100, 3);
	class_stats_check(s, &fx);
	expert_store_close(s);

	o.class_frames[0] = (struct expert_class_frames){CX_BIG, 1000};
	cr_assert_eq(expert_store_open(&s, fx.desc, FX_LAYERS, FX_PER_STEP, &o), 0, "%s", error_message());
	cr_assert_eq(expert_store_stats(s)->classes[1].n_frames, FX_EXPERTS, "never more frames than records");
	expert_store_close(s);

	o.class_frames[0] = (struct expert_class_frames){CX_BIG, FX_PER_STEP - 1};
	error_clear();
	cr_assert_eq(expert_store_open(&s, fx.desc, FX_LAYERS, FX_PER_STEP, &o), -ENOMEM);
	cr_assert(strstr(error_message(), "minimum"), "%s", error_message());
	cr_assert_null(s);

	memset(o.class_frames, 0, sizeof o.class_frames);
	o.class_frames[0] = (struct expert_class_frames){CX_SMALL, 30};
	error_clear();
	cr_assert_eq(expert_store_open(&s, fx.desc, FX_LAYERS, FX_PER_STEP, &o), -EINVAL);
	cr_assert(strstr(error_message(), "no frame count given for the expert records of 8 KiB"), "%s",
		  error_message());
	store_fixture_free(&fx);
}

/* Requests ids of layer, holding nothing; records the delivered pointers. */
static void step_ptrs(struct expert_store *s, const struct store_fixture *fx, int layer, int32_t first,
		      int n, const void **recs)
{
	int32_t ids[FX_PER_STEP];
	for (int i = 0; i < n; i++)
		ids[i] = first + i;
	step_recs(s, fx, layer, ids, n, recs);
}

/* Misses in one class evict only that class's frames: the other class's
 * experts stay resident in the same frames, and its counters do not move. */
Test(store_classes, eviction_stays_in_class)
{
	struct store_fixture fx;
	fixture_make_records(&fx, cx_records);
	struct expert_store *s = store_open_bytes(&fx, FX_PER_STEP * CX_BIG + 16 * CX_SMALL, 8, false, 0);
	const struct expert_store_stats *st = expert_store_stats(s);
	const struct expert_class_stats *small = &st->classes[0], *big = &st->classes[1];
	cr_assert_eq(small->n_frames, 16);
	cr_assert_eq(big->n_frames, FX_PER_STEP);

	const void *big_recs[FX_EXPERTS] = {0}, *again[FX_EXPERTS] = {0};
	step_ptrs(s, &fx, 3, 0, FX_PER_STEP, big_recs);
	uint64_t big_misses = big->misses, big_bytes = big->bytes_read;
	/* 96 small experts through 16 small frames. */
	for (int round = 0; round < 3; round++)
		for (int32_t first = 0; first < FX_EXPERTS; first += FX_PER_STEP) {
			step_ptrs(s, &fx, 0, first, FX_PER_STEP, NULL);
			step_ptrs(s, &fx, 2, first, FX_PER_STEP, NULL);
		}
	cr_assert_gt(small->evictions, 0);
	cr_assert_eq(big->evictions, 0, "the small class never takes a big frame");
	step_ptrs(s, &fx, 3, 0, FX_PER_STEP, again);
	for (int e = 0; e < FX_PER_STEP; e++)
		cr_assert_eq(again[e], big_recs[e], "big expert %d moved", e);
	cr_assert_eq(big->misses, big_misses);
	cr_assert_eq(big->hits, FX_PER_STEP);
	cr_assert_eq(big->bytes_read, big_bytes);

	/* The other way round: the big class churns, the small one keeps its experts. */
	const void *small_recs[FX_EXPERTS] = {0};
	step_ptrs(s, &fx, 0, 0, FX_PER_STEP, small_recs);
	uint64_t small_misses = small->misses, small_evictions = small->evictions;
	for (int32_t first = FX_PER_STEP; first < FX_EXPERTS; first += FX_PER_STEP)
		step_ptrs(s, &fx, 3, first, FX_PER_STEP, NULL);
	cr_assert_eq(big->evictions, (uint64_t)FX_EXPERTS - FX_PER_STEP);
	cr_assert_eq(small->evictions, small_evictions);
	step_ptrs(s, &fx, 0, 0, FX_PER_STEP, again);
	for (int e = 0; e < FX_PER_STEP; e++)
		cr_assert_eq(again[e], small_recs[e], "small expert %d moved", e);
	cr_assert_eq(small->misses, small_misses);
	/* The big class's 8 frames hold 8 distinct records: their lowest
	 * address starts its region, which no small record overlaps. */
	const uint8_t *big_lo = big_recs[0];
	for (int e = 1; e < FX_PER_STEP; e++)
		if ((const uint8_t *)big_recs[e] < big_lo)
			big_lo = big_recs[e];
	for (int e = 0; e < FX_PER_STEP; e++)
		cr_assert((const uint8_t *)small_recs[e] + CX_SMALL <= big_lo ||
			  (const uint8_t *)small_recs[e] >= big_lo + FX_PER_STEP * CX_BIG);
	class_stats_check(s, &fx);
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* Capacity, the pinned set and prefetch are per class. */
Test(store_classes, pins_and_prefetch_per_class)
{
	struct store_fixture fx;
	fixture_make_records(&fx, cx_records);
	struct expert_store *s = store_open_bytes(&fx, FX_PER_STEP * CX_BIG + 20 * CX_SMALL, 8, false, 8);
	const struct expert_store_stats *st = expert_store_stats(s);
	cr_assert_eq(expert_store_capacity(s, 0), 20);
	cr_assert_eq(expert_store_capacity(s, 2), 20);
	cr_assert_eq(expert_store_capacity(s, 3), FX_PER_STEP);
	cr_assert_eq(expert_store_layer_class(s, 1), -1);

	/* The big class has exactly one step: no pin fits there. */
	const struct expert_pin big_pin = {3, 0};
	error_clear();
	cr_assert_eq(expert_store_pin_set(s, &big_pin, 1), -ENOMEM);
	cr_assert(strstr(error_message(), "leaves 7 of 8 expert frames of 8 KiB"), "%s", error_message());
	/* Twelve small ones fit beside a small step. */
	struct expert_pin pins[13];
	for (int i = 0; i < 13; i++)
		pins[i] = (struct expert_pin){i % 2 ? 2 : 0, i};
	error_clear();
	cr_assert_eq(expert_store_pin_set(s, pins, 13), -ENOMEM);
	cr_assert_eq(expert_store_pin_set(s, pins, 12), 0, "%s", error_message());
	cr_assert_eq(st->classes[0].n_pinned, 12);
	cr_assert_eq(st->classes[1].n_pinned, 0);
	cr_assert_eq(expert_store_capacity(s, 0), 8);
	cr_assert_eq(expert_store_capacity(s, 3), FX_PER_STEP);
	step_ptrs(s, &fx, 3, 0, FX_PER_STEP, NULL);
	step_ptrs(s, &fx, 0, 16, FX_PER_STEP, NULL);
	int32_t hot[2] = {0, 2};
	step_recs(s, &fx, 0, hot, 2, NULL);
	cr_assert_eq(st->classes[0].pinned_hits, 2);

	/* Every big frame held by a request: a big prefetch finds no frame,
	 * a small one still does, and counts in its class. */
	int32_t big_ids[FX_PER_STEP] = {8, 9, 10, 11, 12, 13, 14, 15};
	step_check(s, &fx, 3, big_ids, FX_PER_STEP, true);
	int32_t more[4] = {20, 21, 22, 23};
	cr_assert_eq(expert_store_prefetch(s, 3, more, 4), 0);
	cr_assert_eq(expert_store_prefetch(s, 2, more, 4), 4);
	cr_assert_eq(st->classes[0].prefetch_issued, 4);
	cr_assert_eq(st->classes[1].prefetch_issued, 0);
	for (int i = 0; i < FX_PER_STEP; i++)
		expert_store_release(s, 3, big_ids[i]);
	cr_assert_eq(expert_store_prefetch(s, 3, more, 4), 4);
	step_check(s, &fx, 3, more, 4, false);
	step_check(s, &fx, 2, more, 4, false);
	cr_assert_eq(st->classes[1].prefetch_issued, 4);
	class_stats_check(s, &fx);
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* ---- layer cooling ---- */

/* Hits of one released step. */
static uint64_t step_hits(struct expert_store *s, const struct store_fixture *fx, int layer,
			  const int32_t *ids, int n)
{
	uint64_t h0 = expert_store_stats(s)->hits;
	step_check(s, fx, layer, ids, n, false);
	return expert_store_stats(s)->hits - h0;
}

/* A cooled layer gives way first: layer 3 asked for three times and layer
 * 2 once fill the frames; a step of new experts then evicts layer 2 (the
 * colder), unless layer 3 was cooled, which then goes instead. */
static void check_cool(bool cool)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 2 * FX_PER_STEP, 4, false, EXPERT_EVICT_DEFAULT, 0);
	int32_t ids[FX_PER_STEP];
	for (int i = 0; i < FX_PER_STEP; i++)
		ids[i] = i;
	for (int k = 0; k < 3; k++)
		step_check(s, &fx, 3, ids, FX_PER_STEP, false);
	step_check(s, &fx, 2, ids, FX_PER_STEP, false);
	if (cool)
		cr_assert_eq(expert_store_cool_layer(s, 3), 0);
	cr_assert_eq(step_hits(s, &fx, 0, ids, FX_PER_STEP), 0);
	cr_expect_eq(step_hits(s, &fx, 2, ids, FX_PER_STEP), cool ? FX_PER_STEP : 0);
	cr_expect_eq(step_hits(s, &fx, 3, ids, FX_PER_STEP), cool ? 0 : FX_PER_STEP);
	cr_expect_eq(expert_store_cool_layer(s, 1), 0, "a layer without experts");
	cr_expect_eq(expert_store_cool_layer(s, FX_LAYERS), -EINVAL);
	cr_expect_eq(expert_store_cool_layer(s, -1), -EINVAL);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(store_classes, cool_layer_gives_way_first) { check_cool(true); }
Test(store_classes, uncooled_hot_layer_stays) { check_cool(false); }
