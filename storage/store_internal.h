/*
 * store_internal — the expert store's state, shared by the files that
 * implement expert_store.h. Internal to storage/.
 *
 *   store_open.c    open and close: copies, frame classes and their arena,
 *                   evictors, ring, blocks
 *   expert_store.c  requests, delivery, prefetch, statistics
 *   load.c          a frame's load: its reads, blocks over the copies, the
 *                   checksum, failover between copies
 *   pin.c           the permanently pinned set
 *   copies.c        the copies of each layer file, rotation, warnings
 *   stripe.c        block size, copy weights, which copy reads a block
 *
 * A load (LOADING frame) is a sequence of reads of the same record into its
 * frame; a read is one or more blocks (struct store_block), each one io_op.
 * Blocks come from a pool of 2 x io_depth sized at open, so memory does not
 * grow with the stripe count: a read waiting for blocks sits in a pump
 * queue (demand before prefetch), and load_pump hands out blocks as they
 * come back. Prefetch reads hold at most io_depth blocks, so demand reads
 * always find blocks.
 */
#ifndef COLIBRI_STORAGE_STORE_INTERNAL_H
#define COLIBRI_STORAGE_STORE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "storage/buffer_pool.h"
#include "storage/copies.h"
#include "storage/evictor.h"
#include "storage/expert_store.h"
#include "storage/io_ring.h"
#include "storage/stripe.h"

struct store_layer {
	struct copy_file copy[COPIES_MAX];
	uint8_t holders;             /* copies that hold the layer; 0: no routed experts */
	int8_t cls;                  /* its frame class, -1 without experts */
	uint64_t record_bytes;
	int32_t n_experts;
	const uint64_t *checksums;   /* [n_experts], owned by the caller */
	uint64_t checksum_seed;      /* record e is hashed with checksum_seed + e */
	const int32_t *slot;         /* [n_experts] record index in the file, -1 absent; NULL: e itself */
	uint32_t *usage;             /* [n_experts] request counts */
	uint32_t *ram_hits;          /* [n_experts] of those, served from a resident frame */
	uint32_t *mark;              /* [n_experts] serial of the last list naming it */
	struct stripe_credit credit; /* round robin over its copies */
};

/* Where expert e's record starts in layer l's file (64-bit before the
 * multiply). The caller has checked that the file holds it. */
static inline uint64_t store_record_offset(const struct store_layer *l, int32_t e)
{
	return (uint64_t)(l->slot ? l->slot[e] : e) * l->record_bytes;
}

/* Whether layer l's file holds expert e (a shard's holds only some). */
static inline bool store_layer_holds(const struct store_layer *l, int32_t e)
{
	return !l->slot || l->slot[e] >= 0;
}

/* The current load of a frame. Reset by load_begin; each read by load_start. */
struct store_load {
	uint32_t n_blocks;           /* blocks of the current read */
	uint32_t next_block;         /* next one to issue */
	uint32_t n_inflight;         /* issued, not finished */
	uint32_t bytes_done;         /* bytes the current read delivered */
	int32_t pump_prev, pump_next; /* links in a pump queue */
	int err;                     /* first block error of the current read */
	uint64_t err_offset;         /* file offset where it happened */
	uint8_t err_copy;            /* the copy that served that block */
	int8_t solo;                 /* the one copy the current read uses, or -1 */
	uint8_t prio;                /* enum io_op_prio of the current read */
	bool pumping;                /* in a pump queue: blocks left to issue */
	uint8_t used;                /* copies the current read drew from */
	uint8_t failed;              /* copies with a failed block in the current read */
	uint8_t bad;                 /* copies that failed this record during this load */
	uint8_t good;                /* copies whose read alone verified */
	uint8_t suspects;            /* contributors to a mixed mismatch, not yet read alone */
	int16_t copy_err[COPIES_MAX]; /* why each bad copy failed: -errno, -ENODATA, -EBADMSG */
};

struct store_block {
	struct io_op op;
	int32_t frame;               /* -1 while free */
	int32_t next_free;
	uint8_t copy;
	bool prefetch;               /* counted in n_blocks_prefetch */
};

/* A frame class (buffer_pool.h): its evictor, its share of the pinned set,
 * and where its frames lie among the registered buffers. Its counters are
 * stats.classes[c]. */
struct store_class {
	struct evictor ev;
	int32_t n_perm;              /* its frames in the pinned set */
	int32_t buf_first;           /* its first registered buffer */
	int32_t frames_per_buf;      /* frames per registered buffer, 0 when unregistered */
};

struct expert_store {
	struct store_layer *layers;  /* [n_layers] */
	int n_layers;
	int32_t max_experts;         /* largest n_experts of any layer */
	int max_per_step;
	struct buffer_pool pool;
	int n_classes;               /* 0: no layer has routed experts */
	struct store_class cls[EXPERT_CLASSES_MAX];
	struct io_ring ring;
	struct copy_set copies;
	struct stripe stripe;
	int prefetch_depth;
	int n_prefetch_inflight;     /* prefetch loads not finished */

	/* Loads and their blocks. */
	struct store_load *loads;    /* [n_frames] */
	struct store_block *blocks;  /* [n_blocks] */
	int32_t n_blocks;
	int32_t block_free;          /* free list head, -1 when none */
	int32_t n_blocks_prefetch;   /* blocks held by prefetch reads */
	int32_t blocks_prefetch_max;
	int32_t pump_head[IO_OP_PRIO_COUNT], pump_tail[IO_OP_PRIO_COUNT];
	int32_t n_pumping;

	/* The pinned set. */
	int32_t n_perm;              /* frames pinned for good, all classes */
	int32_t *pin_frames;         /* [n_frames + 1] frames one pin call added */
	int32_t n_pin_loading;       /* its loads not finished */
	int pin_rc;                  /* its first load failure */

	/* The current request. */
	bool req_open;               /* some requested expert not delivered yet */
	int req_rc;                  /* its failure, or 0 */
	uint32_t serial;
	double t_request;
	int32_t *uniq;               /* [max_experts] its distinct ids */
	int32_t *req_frames;         /* [max_experts] frames it pinned */
	int32_t n_req;
	int32_t *ready;              /* [max_experts] frames to deliver, FIFO */
	int32_t ready_head, ready_count;
	int32_t n_delivered;
	int32_t n_awaiting;          /* awaited frames still loading */

	struct expert_store_stats stats;
	char absent_why[256];        /* options.absent_why, or a generic note */
};

/* ---- load.c ---- */

/* Sizes the block pool for io depth; 0 or -ENOMEM. Freed by load_free. */
int load_init(struct expert_store *s, int depth);
void load_free(struct expert_store *s);

/* A new load of frame f (just assigned, LOADING): forgets the last one. */
void load_begin(struct expert_store *s, int32_t f);

/* Queues the next read of frame f's load at prio; load_pump issues it. */
void load_start(struct expert_store *s, int32_t f, enum io_op_prio prio);

/* Hands free blocks to waiting reads and queues them on the ring; the
 * caller (or io_ring_reap after the callbacks) submits. */
void load_pump(struct expert_store *s);

/* A request now waits for f's prefetch load: its reads go to demand. */
void load_promote(struct expert_store *s, int32_t f);

/* ---- expert_store.c, called when a load ends ---- */

/* Frame f's record is verified: LOADING -> RESIDENT, waiters served. */
void store_frame_loaded(struct expert_store *s, int32_t f);

/* Frame f's load failed for good; rc is the error (message set) for its
 * waiters, or 0 when none waits. LOADING -> FREE. */
void store_frame_failed(struct expert_store *s, int32_t f, int rc);

/* A FREE frame of class cls, evicting the policy's victim of that class if
 * none is free; -1 when every frame of the class is pinned or loading.
 * Counts a wasted prefetch. */
int32_t store_frame_take(struct expert_store *s, int cls);

/* The evictor of frame f's class. */
static inline struct evictor *store_frame_ev(struct expert_store *s, int32_t f)
{
	return &s->cls[s->pool.frames[f].cls].ev;
}

/* The counters of frame f's class. */
static inline struct expert_class_stats *store_frame_stats(struct expert_store *s, int32_t f)
{
	return &s->stats.classes[s->pool.frames[f].cls];
}

/* A prefetched frame f is asked for (by a request or the pinned set): the
 * prefetch was used. Returns whether it was a prefetch's. */
static inline bool store_prefetch_used(struct expert_store *s, int32_t f)
{
	struct frame *fr = &s->pool.frames[f];
	if (!fr->prefetched)
		return false;
	fr->prefetched = false;
	s->stats.prefetch_used++;
	s->stats.prefetch_used_bytes += s->layers[fr->layer].record_bytes;
	return true;
}

/* A prefetched frame f goes (evicted or failed) before any use. */
static inline void store_prefetch_wasted(struct expert_store *s, int32_t f)
{
	struct frame *fr = &s->pool.frames[f];
	if (!fr->prefetched)
		return;
	fr->prefetched = false;
	s->stats.prefetch_wasted++;
	s->stats.prefetch_wasted_bytes += s->layers[fr->layer].record_bytes;
	store_frame_stats(s, f)->prefetch_wasted++;
}

/* The registered buffer holding frame f, or -1 when unregistered. */
static inline int store_frame_buf_index(const struct expert_store *s, int32_t f)
{
	const struct store_class *c = &s->cls[s->pool.frames[f].cls];
	if (!c->frames_per_buf)
		return -1;
	return c->buf_first + (f - s->pool.classes[s->pool.frames[f].cls].first) / c->frames_per_buf;
}

/* Gives (layer, expert) frame f, LOADING, with a fresh load. */
void store_frame_assign(struct expert_store *s, int32_t f, int layer, int32_t expert);

/* Copies the ring's, the copies' and the pinned set's numbers into stats. */
void store_stats_sync(struct expert_store *s);

/* Reaps completions (blocking for one with wait) and syncs the counters. */
int store_reap(struct expert_store *s, bool wait);

/* Whether layer is in range and has routed experts (some copy holds it). */
static inline bool store_layer_has_experts(const struct expert_store *s, int layer)
{
	return layer >= 0 && layer < s->n_layers && s->layers[layer].holders;
}

/* -EINVAL (with a message) unless layer has routed experts. */
int store_layer_check(const struct expert_store *s, int layer);

/* -EINVAL (with a message) unless expert is an expert of layer, which has
 * passed store_layer_check. */
int store_expert_check(const struct expert_store *s, int layer, int32_t expert);

/* Starts a new list serial for the per-layer mark arrays. */
void store_serial_next(struct expert_store *s);

#endif
