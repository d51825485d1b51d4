/*
 * buffer_pool — the expert arena, its frames, the page table
 * (layer, expert) -> frame and the frame state machine. Internal to storage/.
 *
 * Frame states and the function that performs each transition:
 *
 *              buffer_pool_frame_load            buffer_pool_frame_loaded
 *     FREE ---------------------------> LOADING ------------------------> RESIDENT
 *      ^ ^                                 |                                |
 *      | +---------------------------------+                                |
 *      |    buffer_pool_frame_load_failed                                   |
 *      |                                          buffer_pool_frame_evict   |
 *      +------------------------------ EVICTING <---------------------------+
 *            buffer_pool_frame_evicted
 *
 * Pins are orthogonal to the state: buffer_pool_frame_pin/unpin count the
 * holders of a LOADING or RESIDENT frame. One unpin per successful pin. A
 * frame of the pinned set (perm) holds one pin for as long as it is in the
 * set, so nothing here treats it specially: it is simply never evictable.
 *
 * Invariants:
 *   - A key is in the page table exactly while its frame is LOADING or
 *     RESIDENT, so a second request for a key in flight joins that read.
 *   - Only a RESIDENT frame with no pins may be evicted (its class's
 *     n_evictable counts them); a LOADING frame is never evicted, its read
 *     owns the memory.
 *   - Every FREE frame is on its class's free list, except between
 *     buffer_pool_free_pop and buffer_pool_frame_load.
 *   - A frame holds only keys of layers of its class (the caller's
 *     mapping of layers to classes; buffer_pool_frame_load trusts it).
 *   - EVICTING is the window in which a victim has left the page table but
 *     is not yet free. Today nothing happens in it; it is where an
 *     asynchronous step (a device copy still reading the frame) would wait.
 *
 * Classes. Frames come in classes, one per record size: class c owns the
 * frames [first, first + n_frames), each frame_bytes long, and a layer's
 * experts only ever live in frames of its layer's class, so each class has
 * its own free list and counters, and nothing done in one class (a load, an
 * eviction, a pin) touches another's frames. Frame indexes are global: the
 * page table, the load state and the evictors index by them. A store whose
 * records are all one size has one class, laid out exactly as a pool
 * without classes.
 *
 * The arena is one mapping made at init, 2 MiB aligned (so transparent huge
 * pages can back it, MADV_HUGEPAGE is requested), bound to the local NUMA
 * node when libnuma says NUMA is available; neither is fatal when refused.
 * The classes lie back to back in it, in class order, with no padding
 * between them (a frame is a multiple of 4 KiB, so every class region and
 * every frame is O_DIRECT aligned, and the arena's resident size is the
 * sum of its frames). Nothing is allocated after init.
 */
#ifndef COLIBRI_STORAGE_BUFFER_POOL_H
#define COLIBRI_STORAGE_BUFFER_POOL_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#include "storage/io_ring.h"

#define BUFFER_POOL_CLASSES_MAX 8

enum frame_state {
	FRAME_FREE = 0,
	FRAME_LOADING,
	FRAME_RESIDENT,
	FRAME_EVICTING,
};

struct frame {
	int32_t layer;           /* key; -1 while FREE */
	int32_t expert;
	int32_t pins;            /* holders; > 0 means never evicted */
	int32_t next_free;       /* free-list link while FREE, else -1 */
	uint8_t state;           /* enum frame_state */
	uint8_t cls;             /* its class, for good */
	/* Owned by expert_store (its load state is in store_internal.h). */
	uint8_t attempt;         /* reads of the current load beyond the first */
	bool prefetched;         /* loaded by prefetch, not requested since */
	bool prefetch_inflight;  /* counted against the prefetch bound */
	bool awaited;            /* the current request waits for this load */
	bool perm;               /* in the pinned set: holds one pin for good */
	bool pin_wait;           /* a pin call waits for this load */
	bool pin_drop;           /* leaves the pinned set in the pin call in progress */
	int32_t held;            /* deliveries not yet released, each holding one pin */
};

/* The frames of one record size and their counters. */
struct frame_class {
	uint64_t frame_bytes;    /* multiple of 4096 */
	uint8_t *data;           /* [n_frames * frame_bytes] inside the arena */
	int32_t first;           /* its frames are [first, first + n_frames) */
	int32_t n_frames;
	int32_t free_head;
	int32_t n_pinned;        /* frames with pins > 0 */
	int32_t n_evictable;     /* RESIDENT frames with pins == 0 */
};

struct buffer_pool {
	uint8_t *arena;          /* [sum of the classes' bytes], 2 MiB aligned */
	void *map;               /* the mapping arena lies in */
	uint64_t map_bytes;
	uint64_t arena_bytes;
	int n_classes;
	struct frame_class classes[BUFFER_POOL_CLASSES_MAX];
	int32_t n_frames;        /* all classes */
	struct frame *frames;    /* [n_frames] */
	int n_layers;
	int32_t **frame_of;      /* page table [n_layers][n_experts] -> frame or -1; NULL
				  * for a layer without experts */
	int numa_node;           /* node the arena is bound to, or -1 */
};

/* Maps the arena: n_classes classes (at most BUFFER_POOL_CLASSES_MAX) of
 * n_frames[c] >= 1 frames of frame_bytes[c]; and the page table for
 * n_layers layers of n_experts[l] experts (0 for a layer without any).
 * All frames start FREE. Returns 0 or -errno with error_set; free with
 * buffer_pool_free, which the caller must call only after every read into
 * the arena has finished. */
int buffer_pool_init(struct buffer_pool *bp, int n_classes, const uint64_t *frame_bytes,
		     const int32_t *n_frames, int n_layers, const int32_t *n_experts);
void buffer_pool_free(struct buffer_pool *bp);

/* The frame holding (layer, expert), LOADING or RESIDENT, or -1. */
static inline int32_t buffer_pool_lookup(const struct buffer_pool *bp, int layer, int32_t expert)
{
	return bp->frame_of[layer][expert];
}

static inline const struct frame_class *buffer_pool_frame_class(const struct buffer_pool *bp, int32_t f)
{
	return &bp->classes[bp->frames[f].cls];
}

static inline uint8_t *buffer_pool_frame_data(const struct buffer_pool *bp, int32_t f)
{
	const struct frame_class *c = buffer_pool_frame_class(bp, f);
	return c->data + (uint64_t)(f - c->first) * c->frame_bytes;
}

static inline bool buffer_pool_frame_evictable(const struct buffer_pool *bp, int32_t f)
{
	const struct frame *fr = &bp->frames[f];
	return fr->state == FRAME_RESIDENT && fr->pins == 0;
}

/* Takes a FREE frame of class cls off its free list, or -1 when there is none. */
int32_t buffer_pool_free_pop(struct buffer_pool *bp, int cls);

/* FREE (off the free list) -> LOADING: maps (layer, expert) to f, a frame
 * of the layer's class. */
void buffer_pool_frame_load(struct buffer_pool *bp, int32_t f, int layer, int32_t expert);

/* LOADING -> RESIDENT: the frame's bytes are verified. */
void buffer_pool_frame_loaded(struct buffer_pool *bp, int32_t f);

/* LOADING -> FREE: the read failed for good; unmaps the key. The frame must
 * have no pins left. */
void buffer_pool_frame_load_failed(struct buffer_pool *bp, int32_t f);

/* RESIDENT (unpinned) -> EVICTING: unmaps the key. */
void buffer_pool_frame_evict(struct buffer_pool *bp, int32_t f);

/* EVICTING -> FREE: back on the free list. */
void buffer_pool_frame_evicted(struct buffer_pool *bp, int32_t f);

/* Adds a holder to a LOADING or RESIDENT frame. */
void buffer_pool_frame_pin(struct buffer_pool *bp, int32_t f);

/* Removes one holder; the frame must be pinned. */
void buffer_pool_frame_unpin(struct buffer_pool *bp, int32_t f);

#endif
