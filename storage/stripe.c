/*
 * stripe — block size, copy weights and the weighted round robin (see
 * stripe.h). O(copies) per block; copies <= 8.
 */
#include "storage/stripe.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>

#include "base/error.h"
#include "storage/io_ring.h"

_Static_assert(STRIPE_COPIES_MAX <= 8, "candidate sets are 8-bit masks");

int stripe_init(struct stripe *st, uint64_t block_bytes, const double *gbps, int n_copies)
{
	assert(n_copies >= 1 && n_copies <= STRIPE_COPIES_MAX);
	if (block_bytes == 0)
		block_bytes = STRIPE_DEFAULT_BYTES;
	if (block_bytes % IO_RING_ALIGN || block_bytes > (1ull << 30))
		return error_set(EINVAL, "stripe of %" PRIu64 " bytes is not a multiple of %d up to 1 GiB",
				 block_bytes, IO_RING_ALIGN);
	st->block_bytes = block_bytes;
	st->n_copies = n_copies;
	double known = 0, sum = 0;
	int n_known = 0;
	for (int c = 0; c < n_copies; c++)
		if (gbps[c] > 0 && isfinite(gbps[c])) {
			known += gbps[c];
			n_known++;
		}
	double mean = n_known ? known / n_known : 1;
	for (int c = 0; c < STRIPE_COPIES_MAX; c++) {
		st->weight[c] = c < n_copies ? (gbps[c] > 0 && isfinite(gbps[c]) ? gbps[c] : mean) : 0;
		sum += st->weight[c];
	}
	for (int c = 0; c < n_copies; c++)
		st->weight[c] /= sum;
	return 0;
}

uint32_t stripe_blocks(const struct stripe *st, uint64_t record_bytes, int n_candidates)
{
	if (n_candidates <= 1)
		return 1;
	return (uint32_t)((record_bytes + st->block_bytes - 1) / st->block_bytes);
}

void stripe_block_range(const struct stripe *st, uint64_t record_bytes, uint32_t n_blocks, uint32_t i,
			uint64_t *offset, uint32_t *len)
{
	assert(i < n_blocks);
	if (n_blocks == 1) {
		*offset = 0;
		*len = (uint32_t)record_bytes;
		return;
	}
	uint64_t off = (uint64_t)i * st->block_bytes; /* 64-bit before the multiply */
	uint64_t end = off + st->block_bytes < record_bytes ? off + st->block_bytes : record_bytes;
	*offset = off;
	*len = (uint32_t)(end - off);
}

int stripe_pick(const struct stripe *st, struct stripe_credit *cr, uint8_t candidates, uint64_t bytes)
{
	assert(candidates);
	int best = -1;
	double total = 0;
	for (int c = 0; c < STRIPE_COPIES_MAX; c++) {
		if (!(candidates & (1u << c)))
			continue;
		cr->credit[c] += st->weight[c] * (double)bytes;
		total += st->weight[c];
		if (best < 0 || cr->credit[c] > cr->credit[best])
			best = c;
	}
	cr->credit[best] -= total * (double)bytes;
	return best;
}
