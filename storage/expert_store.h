/*
 * expert_store — routed experts on disk, served into a fixed pool of RAM
 * frames.
 *
 * The store knows files, records, offsets and checksums; it knows nothing
 * of transformers. A layer step is:
 *
 *     expert_store_request(s, layer, ids, n)    place every id (each once)
 *     while (expert_store_next(s, &id, &rec) > 0)
 *         ... compute with rec, in delivery order ...
 *         expert_store_release(s, layer, id)
 *
 * Requested experts are pinned: they stay in their frames until released,
 * one release per delivered expert. Frames are allocated once at open;
 * nothing is allocated per step. The contents of a delivered record are
 * exactly the bytes on disk (checksum verified on every read), so results
 * never depend on which experts happened to be cached.
 */
#ifndef COLIBRI_STORAGE_EXPERT_STORE_H
#define COLIBRI_STORAGE_EXPERT_STORE_H

#include <stdbool.h>
#include <stdint.h>

/* One MoE layer's expert file. A layer without experts has path NULL. */
struct expert_layer_desc {
	const char *path;
	uint64_t record_bytes;       /* multiple of 4096 */
	int32_t n_experts;
	const uint64_t *checksums;   /* [n_experts], XXH3-64 of each record */
};

struct expert_store_options {
	uint64_t cache_bytes;        /* frame arena size; rounded down to whole frames */
	int io_depth;                /* reads in flight at most (>= 1) */
	bool buffered;               /* do not use O_DIRECT */
};

struct expert_store_stats {
	uint64_t requests;           /* experts asked for */
	uint64_t hits;               /* already resident */
	uint64_t misses;             /* read from disk */
	uint64_t bytes_read;
	uint64_t read_retries;
	double disk_wait_s;          /* time spent waiting for reads */
	uint64_t layer_hits[256];
	uint64_t layer_requests[256];
};

struct expert_store;

/* Opens the expert files of layers[0..n_layers) (indexed by model layer)
 * and allocates the frame arena. The arena must hold at least the largest
 * request a step will make (max_per_step experts of the largest record);
 * otherwise -ENOMEM with a message naming the minimum. The caller owns *out
 * and frees it with expert_store_close; layers[] need not outlive the call
 * except the checksums arrays, which must outlive the store. */
int expert_store_open(struct expert_store **out, const struct expert_layer_desc *layers,
		      int n_layers, int max_per_step, const struct expert_store_options *opt);
void expert_store_close(struct expert_store *s);

/* Places experts ids[0..n) of layer (duplicates are placed once) and pins
 * them. Returns 0 or -errno (a read or checksum failure names layer, expert,
 * file and offset). */
int expert_store_request(struct expert_store *s, int layer, const int32_t *ids, int n);

/* Delivers the next placed expert of the current request: 1 with *id and
 * *record set, 0 when every requested expert has been delivered, -errno on
 * failure. */
int expert_store_next(struct expert_store *s, int32_t *id, const void **record);

/* Unpins one delivered expert. */
void expert_store_release(struct expert_store *s, int layer, int32_t id);

const struct expert_store_stats *expert_store_stats(const struct expert_store *s);

/* Bytes of frame arena the store needs at minimum for max_per_step. */
uint64_t expert_store_min_bytes(const struct expert_layer_desc *layers, int n_layers,
				int max_per_step);

#endif
