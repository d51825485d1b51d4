/*
 * store_fixture — expert files for the expert store tests
 * (test_expert_store, test_store_classes, test_mirror_store): four layers
 * of pseudo-random records, layer 1 without routed experts (record size
 * 0), written once per copy into its own folder. The fixture keeps the
 * bytes as the reference and their XXH3-64 checksums from the system
 * libxxhash (the store computes its own), each record seeded with
 * sf_seed(layer) + expert, and describes the layers as the store takes
 * them, copies after the first as mirror_paths.
 *
 * Also here: opening a store on the fixture, and one checked layer step.
 */
#ifndef COLIBRI_TESTS_STORE_FIXTURE_H
#define COLIBRI_TESTS_STORE_FIXTURE_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <xxhash.h>

#include "base/error.h"
#include "storage/expert_store.h"
#include "tests/test_util.h"

#define SF_LAYERS 4
#define SF_COPIES 3
#define SF_EXPERTS_MAX 64

struct store_fixture {
	char dirs[SF_COPIES][512];
	char paths[SF_COPIES][SF_LAYERS][600];  /* [copy][layer]; empty for layer 1 */
	uint8_t *content[SF_LAYERS];            /* the whole file, the reference bytes of every copy */
	uint64_t *checksums[SF_LAYERS];         /* [n_experts] */
	struct expert_layer_desc desc[SF_LAYERS];
	int n_experts;
	int n_copies;
};

/* The checksum seed of layer l's record 0: distinct per layer, never 0. */
static inline uint64_t sf_seed(int l)
{
	return (uint64_t)(l + 1) << 32;
}

static inline uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Writes n_copies identical sets of expert files, copy c into the existing
 * folder dirs[c], which the fixture then owns (store_fixture_free removes
 * it). Layer l holds n_experts records of records[l] bytes drawn from
 * splitmix seeded with seed * (l + 1); records[l] == 0: no file. */
static inline void store_fixture_make_in(struct store_fixture *fx, const char *const *dirs, int n_copies,
					 int n_experts, const uint64_t records[SF_LAYERS], uint64_t seed)
{
	cr_assert(n_copies >= 1 && n_copies <= SF_COPIES && n_experts <= SF_EXPERTS_MAX);
	memset(fx, 0, sizeof *fx);
	fx->n_experts = n_experts;
	fx->n_copies = n_copies;
	for (int c = 0; c < n_copies; c++)
		snprintf(fx->dirs[c], sizeof fx->dirs[c], "%s", dirs[c]);
	for (int l = 0; l < SF_LAYERS; l++) {
		uint64_t rb = records[l], n = rb * (uint64_t)n_experts;
		if (!rb)
			continue;
		fx->content[l] = malloc(n);
		fx->checksums[l] = malloc((size_t)n_experts * sizeof(uint64_t));
		cr_assert(fx->content[l] && fx->checksums[l]);
		uint64_t x = seed * (uint64_t)(l + 1);
		for (uint64_t i = 0; i < n; i += 8) {
			uint64_t v = splitmix(&x);
			memcpy(fx->content[l] + i, &v, 8);
		}
		for (int e = 0; e < n_experts; e++)
			fx->checksums[l][e] = XXH3_64bits_withSeed(fx->content[l] + (uint64_t)e * rb, rb,
								   sf_seed(l) + (uint64_t)e);
		for (int c = 0; c < n_copies; c++) {
			snprintf(fx->paths[c][l], sizeof fx->paths[c][l], "%s/layer-%03d.bin", dirs[c], l);
			cr_assert_eq(tu_write(fx->paths[c][l], fx->content[l], n), 0, "cannot write %s",
				     fx->paths[c][l]);
		}
		fx->desc[l] = (struct expert_layer_desc){
			.path = fx->paths[0][l], .record_bytes = rb, .n_experts = n_experts,
			.checksums = fx->checksums[l], .checksum_seed = sf_seed(l),
		};
		for (int c = 1; c < n_copies; c++)
			fx->desc[l].mirror_paths[c - 1] = fx->paths[c][l];
	}
}

/* The same, each copy in a fresh scratch folder under TMPDIR. */
static inline void store_fixture_make(struct store_fixture *fx, int n_copies, int n_experts,
				      const uint64_t records[SF_LAYERS], uint64_t seed)
{
	char dirs[SF_COPIES][512];
	const char *names[SF_COPIES];
	cr_assert(n_copies >= 1 && n_copies <= SF_COPIES);
	for (int c = 0; c < n_copies; c++) {
		tu_mkdtemp(dirs[c], sizeof dirs[c]);
		names[c] = dirs[c];
	}
	store_fixture_make_in(fx, names, n_copies, n_experts, records, seed);
}

static inline void store_fixture_free(struct store_fixture *fx)
{
	for (int l = 0; l < SF_LAYERS; l++) {
		free(fx->content[l]);
		free(fx->checksums[l]);
	}
	for (int c = 0; c < fx->n_copies; c++)
		tu_rmrf(fx->dirs[c]);
}

/* The reference bytes of expert e of layer. */
static inline const uint8_t *record_ref(const struct store_fixture *fx, int layer, int32_t e)
{
	return fx->content[layer] + (uint64_t)e * fx->desc[layer].record_bytes;
}

/* Opens a store over every layer of the fixture; the open must succeed.
 * The caller closes it. */
static inline struct expert_store *store_fixture_open(const struct store_fixture *fx, int per_step,
						      const struct expert_store_options *o)
{
	struct expert_store *s = NULL;
	error_clear();
	int rc = expert_store_open(&s, fx->desc, SF_LAYERS, per_step, o);
	cr_assert_eq(rc, 0, "open: %s", error_message());
	return s;
}

/* One layer step: requests ids (duplicates allowed) and takes every
 * delivery, checking that it was asked for, comes once and is byte-equal
 * to the file; stores its pointer in recs[id] when recs, and releases it
 * unless hold. Returns 0 once every distinct id came (checked), else the
 * error of the request or of next (error_message() has the text). */
static inline int store_fixture_step(struct expert_store *s, const struct store_fixture *fx, int layer,
				     const int32_t *ids, int n, bool hold, const void **recs)
{
	bool want[SF_EXPERTS_MAX] = {0}, got[SF_EXPERTS_MAX] = {0};
	int n_want = 0, n_got = 0, rc;
	for (int i = 0; i < n; i++)
		if (!want[ids[i]]) {
			want[ids[i]] = true;
			n_want++;
		}
	error_clear();
	if ((rc = expert_store_request(s, layer, ids, n)))
		return rc;
	int32_t e;
	const void *rec;
	while ((rc = expert_store_next(s, &e, &rec)) > 0) {
		cr_assert(e >= 0 && e < fx->n_experts && want[e] && !got[e], "unexpected delivery of %d", e);
		got[e] = true;
		n_got++;
		cr_assert(memcmp(rec, record_ref(fx, layer, e), fx->desc[layer].record_bytes) == 0,
			  "layer %d expert %d: delivered bytes differ from the file", layer, e);
		if (recs)
			recs[e] = rec;
		if (!hold)
			expert_store_release(s, layer, e);
	}
	if (rc == 0)
		cr_assert_eq(n_got, n_want);
	return rc;
}

/* XORs the byte at off of the file with mask (a second call undoes it). */
static inline void store_fixture_flip(const char *path, uint64_t off, uint8_t mask)
{
	int fd = open(path, O_RDWR);
	cr_assert(fd >= 0, "cannot open %s", path);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= mask;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

#endif
