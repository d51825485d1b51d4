/*
 * stripe — how a record read is cut into blocks and which copy reads each
 * block. Internal to storage/.
 *
 * A record read from one copy is one read, whatever its size. A record read
 * from two or more copies is cut into blocks of block_bytes (the last one
 * shorter), each a separate read into its place in the frame; the record
 * is whole once every block is in. Blocks go to the candidate copies by
 * smooth weighted round robin (the nginx scheme): each pick adds every
 * candidate's weight to its credit, takes the copy with the most credit
 * and charges it the candidates' total. Consecutive blocks thus alternate
 * between disks, so one record keeps all of them busy, and over any run of
 * n picks from a fixed candidate set a copy's count stays within two of
 * n x weight / total (about one counted from the start; a random search
 * over 2..8 copies found 1.06 and 1.62). The credit is kept per layer
 * (struct stripe_credit), so the rounding of short records evens out
 * across records instead of always favouring the same copy.
 */
#ifndef COLIBRI_STORAGE_STRIPE_H
#define COLIBRI_STORAGE_STRIPE_H

#include <stdint.h>

#include "storage/expert_store.h"

#define STRIPE_COPIES_MAX EXPERT_COPIES_MAX
#define STRIPE_DEFAULT_BYTES (1ull << 20)

struct stripe {
	uint64_t block_bytes;                 /* multiple of 4096 */
	int n_copies;
	double weight[STRIPE_COPIES_MAX];     /* share of copy c, summing to 1 over n_copies */
};

/* A layer's round-robin state: the credit of each copy. Zero to start. */
struct stripe_credit {
	double credit[STRIPE_COPIES_MAX];
};

/* Sets block_bytes (0: STRIPE_DEFAULT_BYTES) and the weights of copies
 * 0..n_copies from gbps[] (<= 0 or NaN: unknown, taken as the mean of the
 * known ones, or all equal when none is known). Returns 0 or -EINVAL (with
 * error_set) for a block size that is not a multiple of 4096. */
int stripe_init(struct stripe *st, uint64_t block_bytes, const double *gbps, int n_copies);

/* Reads of one record of record_bytes over n_candidates copies: 1 with at
 * most one candidate, else the number of blocks. */
uint32_t stripe_blocks(const struct stripe *st, uint64_t record_bytes, int n_candidates);

/* Byte range [*offset, *offset + *len) of block i of n_blocks within a
 * record of record_bytes. */
void stripe_block_range(const struct stripe *st, uint64_t record_bytes, uint32_t n_blocks, uint32_t i,
			uint64_t *offset, uint32_t *len);

/* The copy that reads the next block of a layer, of `bytes` bytes: one of
 * candidates (bit c for copy c, at least one set), by smooth weighted round
 * robin over bytes, so a record's short last block does not skew the split. */
int stripe_pick(const struct stripe *st, struct stripe_credit *cr, uint8_t candidates, uint64_t bytes);

#endif
