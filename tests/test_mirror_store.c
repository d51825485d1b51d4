/*
 * test_mirror_store — the expert store reading a layer from several copies
 * (storage/copies.c, storage/stripe.c, storage/load.c): expert files plus
 * one or two mirrors with the same bytes, written here in separate scratch
 * folders (tests/store_fixture.h), whose bytes the test keeps as the
 * reference.
 *
 * Covers: every delivered record byte-equal with 2 and 3 copies, equal and
 * unequal weights, stripe blocks of 4 KiB, 64 KiB, 1 MiB and the record
 * size, with io_uring and with the pread pool; each block is its own read
 * and per-copy bytes follow the weights (within two blocks per layer, the
 * round robin's bound); one copy keeps one read per record; partial mirrors
 * (a missing or truncated file at open, or a NULL path) with one warning per
 * copy, and a primary file missing or truncated at open read from the mirror
 * alone; failover: a corrupt record in a mirror or in the primary, a mirror
 * or the primary truncated after open (short read, end of file), each
 * taking the copy out of rotation with one warning while the bytes stay
 * right; every copy bad
 * fails with a message naming layer, expert, offset and each file; a bad
 * stripe size is refused.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>

#include "base/error.h"
#include "storage/expert_store.h"
#include "tests/store_fixture.h"
#include "tests/stderr_capture.h"

#define MX_LAYERS SF_LAYERS
#define MX_EXPERTS 16
#define MX_PER_STEP 6
#define MX_SEED 0xabcdefull

/* Layer 1 has no routed experts; the others differ in record size, so the
 * store has three frame classes, each striped over the copies. */
static const uint64_t mx_records[MX_LAYERS] = {65536, 0, 12288, 262144};
#define MX_STEP_BYTES (65536 + 12288 + 262144) /* one frame of each class */
static const int mx_moe_layers[3] = {0, 2, 3};

/* n_copies copies of the default expert files. */
static void mfx_make(struct store_fixture *fx, int n_copies)
{
	store_fixture_make(fx, n_copies, MX_EXPERTS, mx_records, MX_SEED);
}

/* A store whose cache is `frames` frames of every record size: each class
 * gets one step, the rest goes by expert_store_split's order (all three
 * classes have one layer: the smaller records first). */
static struct expert_store *mstore_open(const struct store_fixture *fx, int frames, int depth,
					uint64_t stripe, const double *gbps)
{
	struct expert_store_options o = {
		.cache_bytes = (uint64_t)frames * MX_STEP_BYTES, .io_depth = depth, .stripe_bytes = stripe,
	};
	for (int c = 0; gbps && c < fx->n_copies; c++)
		o.copy_gbps[c] = gbps[c];
	return store_fixture_open(fx, MX_PER_STEP, &o);
}

/* One step: request, every delivery byte-equal and each id once, release.
 * Returns next's final result (0, or the error). */
static int step(struct expert_store *s, const struct store_fixture *fx, int layer, const int32_t *ids,
		int n)
{
	return store_fixture_step(s, fx, layer, ids, n, false, NULL);
}

static void step_ok(struct expert_store *s, const struct store_fixture *fx, int layer,
		    const int32_t *ids, int n)
{
	int rc = step(s, fx, layer, ids, n);
	cr_assert_eq(rc, 0, "layer %d: %s", layer, error_message());
}

/* Random steps over the MoE layers, duplicates included, with a prefetch
 * of the step's ids every third step. */
static void random_steps(struct expert_store *s, const struct store_fixture *fx, int n_steps,
			 uint64_t seed)
{
	for (int k = 0; k < n_steps; k++) {
		int layer = mx_moe_layers[splitmix(&seed) % 3];
		int32_t ids[MX_PER_STEP + 3];
		int n = 1 + (int)(splitmix(&seed) % MX_PER_STEP);
		for (int i = 0; i < n; i++)
			ids[i] = (int32_t)(splitmix(&seed) % MX_EXPERTS);
		ids[n] = ids[0];
		if (k % 3 == 0)
			cr_assert(expert_store_prefetch(s, layer, ids, n + 1) >= 0);
		step_ok(s, fx, layer, ids, n + 1);
	}
}

static void stats_check(const struct expert_store_stats *st, int n_copies)
{
	cr_assert_eq(st->requests, st->pinned_hits + st->hits + st->joins + st->misses);
	cr_assert_eq(st->n_copies, n_copies);
	uint64_t bytes = 0;
	for (int c = 0; c < n_copies; c++)
		bytes += st->copy_bytes_read[c];
	cr_assert_eq(bytes, st->bytes_read, "per-copy bytes add up to the total");
}

/* ---- bytes and weights ---- */

static void check_bytes(int n_copies, const double *gbps, bool pread)
{
	if (pread)
		setenv("COLIBRI_NO_IO_URING", "1", 1);
	struct store_fixture fx;
	mfx_make(&fx, n_copies);
	const uint64_t stripes[4] = {4096, 65536, 1 << 20, 262144};
	for (int i = 0; i < 4; i++) {
		struct expert_store *s = mstore_open(&fx, 12, 16, stripes[i], gbps);
		const struct expert_store_stats *st = expert_store_stats(s);
		cr_assert_eq(st->stripe_bytes, stripes[i]);
		cr_assert_eq(st->n_classes, 3);
		for (int k = 0; k < 3; k++)
			cr_assert_geq(st->classes[k].n_frames, MX_PER_STEP);
		if (pread)
			cr_assert(!st->io_uring);
		random_steps(s, &fx, 120, 100 + (uint64_t)i);
		stats_check(st, n_copies);
		uint64_t class_bytes = 0;
		for (int k = 0; k < 3; k++)
			class_bytes += st->classes[k].bytes_read;
		cr_assert_eq(class_bytes, st->bytes_read, "per-class bytes add up to the total");
		for (int c = 0; c < n_copies; c++) {
			cr_assert(st->copy_bytes_read[c] > 0, "stripe %" PRIu64 ": copy %d was never read",
				  stripes[i], c);
			cr_assert(st->copy_in_rotation[c]);
			cr_assert_eq(st->copy_failures[c], 0);
			cr_assert_eq(st->copy_layers[c], 3);
		}
		cr_assert_eq(st->read_retries, 0);
		expert_store_close(s);
	}
	store_fixture_free(&fx);
}

Test(mirror_store, bytes_two_copies_equal)
{
	check_bytes(2, NULL, false);
}

Test(mirror_store, bytes_three_copies_unequal)
{
	check_bytes(3, (double[]){1.0, 3.0, 0.5}, false);
}

Test(mirror_store, bytes_two_copies_pread)
{
	check_bytes(2, (double[]){2.0, 1.0}, true);
}

Test(mirror_store, bytes_three_copies_pread)
{
	check_bytes(3, NULL, true);
}

/* Every record read once, cold, with 4 KiB blocks: each block is one read,
 * and each copy's share of blocks follows its weight. */
static void check_weights(int n_copies, const double *gbps, uint64_t stripe)
{
	struct store_fixture fx;
	mfx_make(&fx, n_copies);
	struct expert_store *s = mstore_open(&fx, 3 * MX_EXPERTS, 64, stripe, gbps);
	const struct expert_store_stats *st = expert_store_stats(s);
	uint64_t blocks = 0, records = 0;
	for (int k = 0; k < 3; k++) {
		int layer = mx_moe_layers[k];
		for (int32_t first = 0; first < MX_EXPERTS; first += MX_PER_STEP) {
			int32_t ids[MX_PER_STEP];
			int n = 0;
			for (int32_t e = first; e < MX_EXPERTS && n < MX_PER_STEP; e++)
				ids[n++] = e;
			step_ok(s, &fx, layer, ids, n);
		}
		blocks += MX_EXPERTS * ((mx_records[layer] + stripe - 1) / stripe);
		records += MX_EXPERTS;
	}
	stats_check(st, n_copies);
	double sum = 0;
	for (int c = 0; c < n_copies; c++)
		sum += gbps[c];
	uint64_t got_blocks = 0;
	for (int c = 0; c < n_copies; c++) {
		got_blocks += st->copy_blocks_read[c];
		double want = (double)st->bytes_read * gbps[c] / sum;
		double dev = fabs((double)st->copy_bytes_read[c] - want);
		fprintf(stderr, "%d copies, stripe %" PRIu64 ": copy %d weight %.3f read %" PRIu64
				" bytes in %" PRIu64 " blocks, %.0f expected\n",
			n_copies, stripe, c, st->copy_weight[c], st->copy_bytes_read[c],
			st->copy_blocks_read[c], want);
		cr_assert(fabs(st->copy_weight[c] - gbps[c] / sum) < 1e-9);
		cr_assert(dev <= (double)(records * stripe), "copy %d: off by more than a block per record", c);
		cr_assert(dev <= 2.0 * 3 * (double)stripe, "copy %d: off by %.0f bytes, more than two blocks "
			  "per layer", c, dev);
	}
	cr_assert_eq(got_blocks, blocks, "one read per block");
	cr_assert_eq(st->bytes_read, (uint64_t)MX_EXPERTS * (65536 + 12288 + 262144));
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(mirror_store, shares_follow_weights_two)
{
	check_weights(2, (double[]){1.0, 3.0}, 4096);
}

Test(mirror_store, shares_follow_weights_three)
{
	check_weights(3, (double[]){2.0, 1.0, 1.0}, 4096);
}

Test(mirror_store, shares_follow_weights_equal_64k)
{
	check_weights(2, (double[]){1.0, 1.0}, 65536);
}

/* One copy: a record is one read, whatever the stripe size. */
Test(mirror_store, one_copy_one_read_per_record)
{
	struct store_fixture fx;
	mfx_make(&fx, 1);
	struct expert_store *s = mstore_open(&fx, 12, 16, 4096, NULL);
	const struct expert_store_stats *st = expert_store_stats(s);
	cr_assert_eq(st->n_copies, 1);
	int32_t ids[4] = {1, 2, 3, 4};
	step_ok(s, &fx, 3, ids, 4);
	step_ok(s, &fx, 0, ids, 4);
	cr_assert_eq(st->misses, 8);
	cr_assert_eq(st->copy_blocks_read[0], 8, "%" PRIu64 " reads", st->copy_blocks_read[0]);
	cr_assert_eq(st->copy_weight[0], 1.0);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(mirror_store, bad_stripe_refused)
{
	struct store_fixture fx;
	mfx_make(&fx, 2);
	struct expert_store_options o = {.cache_bytes = 12 * 262144, .io_depth = 4, .stripe_bytes = 6000};
	struct expert_store *s = NULL;
	error_clear();
	cr_assert_eq(expert_store_open(&s, fx.desc, MX_LAYERS, MX_PER_STEP, &o), -EINVAL);
	cr_assert_null(s);
	cr_assert(strstr(error_message(), "stripe of 6000 bytes"), "%s", error_message());
	store_fixture_free(&fx);
}

/* ---- partial mirrors ---- */

Test(mirror_store, partial_mirror)
{
	struct store_fixture fx;
	mfx_make(&fx, 3);
	/* Copy 1 lacks layer 3's file; copy 2 has a truncated layer 0 and is
	 * not named for layers 2 and 3 (NULL: silent), so it holds nothing. */
	cr_assert_eq(unlink(fx.paths[1][3]), 0);
	cr_assert_eq(truncate(fx.paths[2][0], 65536 * 3), 0);
	fx.desc[2].mirror_paths[1] = NULL;
	fx.desc[3].mirror_paths[1] = NULL;
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	struct expert_store *s = mstore_open(&fx, 12, 16, 4096, NULL);
	char *err = stderr_capture_end(&cap);
	cr_assert_eq(stderr_count(err, "lacks"), 2, "one warning per copy");
	cr_assert(strstr(err, "mirror copy 1 lacks 1 of 3 expert files") && strstr(err, fx.paths[1][3]));
	cr_assert(strstr(err, "mirror copy 2 lacks 1 of 3 expert files") && strstr(err, "truncated"));
	free(err);
	const struct expert_store_stats *st = expert_store_stats(s);
	cr_assert_eq(st->copy_layers[0], 3);
	cr_assert_eq(st->copy_layers[1], 2);
	cr_assert_eq(st->copy_layers[2], 0);

	/* Layer 3 has one copy: one read per record, all from the primary. */
	int32_t ids[4] = {0, 5, 9, 15};
	step_ok(s, &fx, 3, ids, 4);
	cr_assert_eq(st->copy_blocks_read[0], 4);
	cr_assert_eq(st->copy_bytes_read[1] + st->copy_bytes_read[2], 0);
	/* Layers 0 and 2: copies 0 and 1. */
	step_ok(s, &fx, 2, ids, 4);
	step_ok(s, &fx, 0, ids, 4);
	cr_assert(st->copy_bytes_read[1] > 0);
	cr_assert_eq(st->copy_bytes_read[2], 0);
	random_steps(s, &fx, 100, 7);
	stats_check(st, 3);
	cr_assert_eq(st->copy_bytes_read[2], 0, "copy 2 holds no usable layer");
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* The primary's layer 2 file missing or short at open, the mirror's whole:
 * one warning naming the file and the mirror, and layer 2's reads, the
 * primary's stripe share included, go to the mirror (stripe 0: the
 * default). The caller frees fx. */
static void check_primary_lacks(struct store_fixture *fx, bool truncated, uint64_t stripe)
{
	mfx_make(fx, 2);
	if (truncated)
		cr_assert_eq(truncate(fx->paths[0][2], 12288 * 7), 0);
	else
		cr_assert_eq(unlink(fx->paths[0][2]), 0);
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	struct expert_store *s = mstore_open(fx, 12, 8, stripe, NULL);
	char *err = stderr_capture_end(&cap);
	cr_assert(strstr(err, "primary copy 0 lacks 1 of 3 expert files") && strstr(err, fx->paths[0][2]) &&
		  strstr(err, truncated ? "truncated" : "cannot open") && strstr(err, "their mirrors serve"), "%s", err);
	free(err);
	const struct expert_store_stats *st = expert_store_stats(s);
	cr_assert_eq(st->stripe_bytes, stripe ? stripe : 1 << 20);
	cr_assert_eq(st->copy_layers[0], 2);
	cr_assert_eq(st->copy_layers[1], 3);
	int32_t ids[3] = {2, 3, 4};
	step_ok(s, fx, 2, ids, 3);
	cr_assert_eq(st->copy_bytes_read[1], 3 * 12288);
	cr_assert_eq(st->copy_bytes_read[0], 0, "a stripe of layer 2 went to the primary");
	random_steps(s, fx, 60, 3);
	cr_assert(st->copy_in_rotation[0], "the primary's other layers stay in rotation");
	expert_store_close(s);
}

Test(mirror_store, primary_truncated_mirror_serves)
{
	struct store_fixture fx;
	check_primary_lacks(&fx, true, 4096);
	store_fixture_free(&fx);
}

Test(mirror_store, primary_missing_mirror_serves)
{
	struct store_fixture fx;
	check_primary_lacks(&fx, false, 0);
	struct expert_store *s;

	/* No copy of a layer opens: the primary's error. */
	cr_assert_eq(unlink(fx.paths[1][2]), 0);
	struct expert_store_options o = {.cache_bytes = 12 * 262144, .io_depth = 4};
	error_clear();
	cr_assert_eq(expert_store_open(&s, fx.desc, MX_LAYERS, MX_PER_STEP, &o), -ENOENT);
	cr_assert(strstr(error_message(), fx.paths[0][2]) && strstr(error_message(), "cannot open"), "%s",
		  error_message());
	store_fixture_free(&fx);
}

/* ---- failover ---- */

/* Flips one byte in every 4 KiB block of a record, so every read of it
 * that touches the copy breaks the checksum. */
static void corrupt_record(const char *path, uint64_t off, uint64_t bytes)
{
	for (uint64_t b = 0; b < bytes; b += 4096)
		store_fixture_flip(path, off + b + 77, 0xa5);
}

static void check_corrupt_copy(int n_copies, int bad, uint64_t stripe, bool pread)
{
	if (pread)
		setenv("COLIBRI_NO_IO_URING", "1", 1);
	struct store_fixture fx;
	mfx_make(&fx, n_copies);
	corrupt_record(fx.paths[bad][0], 5 * 65536, 65536);
	struct expert_store *s = mstore_open(&fx, 12, 16, stripe, NULL);
	const struct expert_store_stats *st = expert_store_stats(s);
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	int32_t five = 5;
	step_ok(s, &fx, 0, &five, 1);
	random_steps(s, &fx, 100, 11);
	/* Read it again, from the copies left. */
	int32_t ids[MX_PER_STEP] = {10, 11, 12, 13, 14, 15};
	step_ok(s, &fx, 0, ids, MX_PER_STEP);
	step_ok(s, &fx, 0, ids, 2);
	char *err = stderr_capture_end(&cap);
	cr_assert_eq(stderr_count(err, "out of rotation"), 1, "one warning:\n%s", err);
	char want[800];
	snprintf(want, sizeof want, "%s copy %d is out of rotation: %s: checksum mismatch in layer 0 expert 5 "
		 "at offset %d", bad ? "mirror" : "primary", bad, fx.paths[bad][0], 5 * 65536);
	cr_assert(strstr(err, want), "%s\nwanted: %s", err, want);
	free(err);
	stats_check(st, n_copies);
	for (int c = 0; c < n_copies; c++) {
		cr_assert_eq(st->copy_in_rotation[c], c != bad, "copy %d", c);
		cr_assert_eq(st->copy_failures[c], c == bad ? 1u : 0u, "copy %d: %" PRIu64, c,
			     st->copy_failures[c]);
	}
	cr_assert_eq(st->read_failures, 0);
	cr_assert(st->read_retries >= 1);
	/* Out of rotation: no more reads go to it. */
	uint64_t before = st->copy_bytes_read[bad];
	random_steps(s, &fx, 60, 12);
	cr_assert_eq(st->copy_bytes_read[bad], before);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(mirror_store, corrupt_mirror_record)
{
	check_corrupt_copy(2, 1, 4096, false);
}

Test(mirror_store, corrupt_mirror_record_pread)
{
	check_corrupt_copy(2, 1, 4096, true);
}

Test(mirror_store, corrupt_mirror_of_three)
{
	check_corrupt_copy(3, 2, 65536 / 4, false);
}

Test(mirror_store, corrupt_primary_record)
{
	check_corrupt_copy(2, 0, 4096, false);
}

Test(mirror_store, corrupt_whole_record_read)
{
	/* A stripe of the record size: each read of layer 0 is one block from
	 * one copy. With weights 1:3 the first block of a fresh layer goes to
	 * copy 1, which holds a bad record 5: blamed on its own read, without
	 * suspects, then read from copy 0. */
	struct store_fixture fx;
	mfx_make(&fx, 2);
	corrupt_record(fx.paths[1][0], 5 * 65536, 65536);
	struct expert_store *s = mstore_open(&fx, 6, 8, 65536, (double[]){1.0, 3.0});
	const struct expert_store_stats *st = expert_store_stats(s);
	int32_t five = 5;
	step_ok(s, &fx, 0, &five, 1);
	cr_assert(!st->copy_in_rotation[1]);
	cr_assert_eq(st->copy_failures[1], 1);
	cr_assert_eq(st->read_retries, 1, "one read from each copy");
	cr_assert_eq(st->copy_blocks_read[0], 1);
	cr_assert_eq(st->copy_blocks_read[1], 1);
	random_steps(s, &fx, 60, 41);
	cr_assert_eq(st->copy_blocks_read[1], 1);
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* Copy `bad` of layer 3 truncated after open: its short reads fail over
 * as a checksum mismatch does. */
static void check_truncated_after_open(int bad, bool pread)
{
	if (pread)
		setenv("COLIBRI_NO_IO_URING", "1", 1);
	struct store_fixture fx;
	mfx_make(&fx, 2);
	struct expert_store *s = mstore_open(&fx, 12, 16, 65536, NULL);
	const struct expert_store_stats *st = expert_store_stats(s);
	/* After open: records 8.. of layer 3 end early or vanish in that copy. */
	cr_assert_eq(truncate(fx.paths[bad][3], 262144 * 8 + 6000), 0);
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	int32_t ids[4] = {8, 9, 1, 2};
	step_ok(s, &fx, 3, ids, 4);
	random_steps(s, &fx, 80, 21);
	char *err = stderr_capture_end(&cap);
	char want[64];
	snprintf(want, sizeof want, "%s copy %d is out of rotation", bad ? "mirror" : "primary", bad);
	cr_assert_eq(stderr_count(err, "out of rotation"), 1, "%s", err);
	cr_assert(strstr(err, want) && strstr(err, fx.paths[bad][3]) &&
		  strstr(err, "unexpected end of file in layer 3 expert"), "%s", err);
	free(err);
	cr_assert(!st->copy_in_rotation[bad]);
	cr_assert(st->copy_in_rotation[!bad]);
	cr_assert_eq(st->read_failures, 0);
	stats_check(st, 2);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(mirror_store, truncated_mirror_after_open)
{
	check_truncated_after_open(1, false);
}

Test(mirror_store, truncated_mirror_after_open_pread)
{
	check_truncated_after_open(1, true);
}

Test(mirror_store, truncated_primary_after_open)
{
	check_truncated_after_open(0, false);
}

static void check_all_bad(bool pread)
{
	if (pread)
		setenv("COLIBRI_NO_IO_URING", "1", 1);
	struct store_fixture fx;
	mfx_make(&fx, 2);
	corrupt_record(fx.paths[0][2], 5 * 12288, 4096);
	corrupt_record(fx.paths[1][2], 5 * 12288 + 8192, 4096);
	struct expert_store *s = mstore_open(&fx, 12, 16, 4096, NULL);
	const struct expert_store_stats *st = expert_store_stats(s);
	int32_t ids[3] = {4, 5, 6};
	int rc = step(s, &fx, 2, ids, 3);
	cr_assert_eq(rc, -EIO, "rc %d", rc);
	char want[900];
	snprintf(want, sizeof want, "layer 2 expert 5: no copy holds a verified record at offset %d (%s: "
		 "checksum mismatch; %s: checksum mismatch)", 5 * 12288, fx.paths[0][2], fx.paths[1][2]);
	cr_assert(strstr(error_message(), want), "%s\nwanted: %s", error_message(), want);
	cr_assert_eq(st->read_failures, 1);
	int32_t e;
	const void *rec;
	cr_assert_eq(expert_store_next(s, &e, &rec), -EIO, "the failure sticks until the next request");
	/* Both copies are out of rotation now, and both are still read. */
	cr_assert(!st->copy_in_rotation[0] && !st->copy_in_rotation[1]);
	int32_t good[2] = {4, 6}, more[MX_PER_STEP] = {0, 1, 2, 3, 7, 8};
	step_ok(s, &fx, 2, good, 2);
	step_ok(s, &fx, 2, more, MX_PER_STEP);
	step_ok(s, &fx, 0, more, MX_PER_STEP);
	step_ok(s, &fx, 3, more, MX_PER_STEP);
	cr_assert_eq(step(s, &fx, 2, &ids[1], 1), -EIO);
	cr_assert_eq(st->read_failures, 2);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(mirror_store, all_copies_bad)
{
	check_all_bad(false);
}

Test(mirror_store, all_copies_bad_pread)
{
	check_all_bad(true);
}

/* A copy taken out of rotation comes back after its wait: repaired, it
 * serves its share again; broken again, it leaves for twice as long. */
Test(mirror_store, failed_copy_readmitted)
{
	struct store_fixture fx;
	mfx_make(&fx, 2);
	corrupt_record(fx.paths[1][0], 5 * 65536, 65536);
	struct expert_store_options o = {
		.cache_bytes = 6 * MX_STEP_BYTES, .io_depth = 8, .stripe_bytes = 65536, .readmit_s = 1.0,
		.copy_gbps = { 1.0, 3.0 }, /* the mirror's turn first */
	};
	struct expert_store *s = store_fixture_open(&fx, MX_PER_STEP, &o);
	const struct expert_store_stats *st = expert_store_stats(s);
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	int32_t five = 5;
	step_ok(s, &fx, 0, &five, 1);
	cr_assert(!st->copy_in_rotation[1]);
	cr_assert_eq(st->copy_failures[1], 1);
	uint64_t blocks = st->copy_blocks_read[1];
	/* Within the wait the copy stays out. */
	int32_t others[2] = {1, 2};
	step_ok(s, &fx, 0, others, 2);
	cr_assert(!st->copy_in_rotation[1]);
	cr_assert_eq(st->copy_blocks_read[1], blocks, "read from a copy out of rotation");
	/* Repaired (the corruption is an XOR) and past the wait: back, and read. */
	corrupt_record(fx.paths[1][0], 5 * 65536, 65536);
	usleep(1200 * 1000); /* a wait long against a step, even under sanitizers */
	random_steps(s, &fx, 40, 5);
	cr_assert(st->copy_in_rotation[1]);
	cr_assert_eq(st->copy_readmissions[1], 1);
	cr_assert_gt(st->copy_blocks_read[1], blocks, "the returned copy is not read");
	cr_assert_eq(st->copy_failures[1], 1);
	/* Broken again: out at the next bad read, for twice the first wait. */
	corrupt_record(fx.paths[1][3], 0, 262144 * MX_EXPERTS);
	for (int k = 0; k < 20 && st->copy_in_rotation[1]; k++) {
		int32_t ids[3] = { (int32_t)(3 * k % MX_EXPERTS), (int32_t)((3 * k + 1) % MX_EXPERTS),
				   (int32_t)((3 * k + 2) % MX_EXPERTS) };
		step_ok(s, &fx, 3, ids, 3);
	}
	cr_assert(!st->copy_in_rotation[1], "a failing returned copy stays in rotation");
	char *err = stderr_capture_end(&cap);
	cr_assert(strstr(err, "mirror copy 1 is back in rotation after 1 s"), "%s", err);
	cr_assert(strstr(err, "it is tried again in 2 s") && stderr_count(err, "out of rotation") == 2, "%s", err);
	free(err);
	stats_check(st, 2);
	expert_store_close(s);
	store_fixture_free(&fx);
}
