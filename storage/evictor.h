/*
 * evictor — which unpinned resident frame gives way to a miss. Internal to
 * storage/.
 *
 * Frames that hold a key sit in LRU lists, one list per frequency level;
 * the victim is the least recently requested evictable frame of the lowest
 * non-empty level. The two policies differ only in how a frame's level is
 * chosen:
 *
 *   EVICT_POLICY_FREQ (default): LFU with aging, LRU among equals. Each
 *   (layer, expert) keeps a decayed request count, its heat, which lives on
 *   when the expert is evicted and is halved for every expert each age
 *   period, so the history follows routing that drifts. A frame's level is
 *   its expert's heat, exact up to 31 and in eighths of an octave above
 *   (relative error under 12.5%). An expert that routing picks often comes
 *   back hot after an eviction, and a burst of one-off experts cannot flush
 *   it, which is what plain LRU gets wrong on skewed (Zipf-like) routing.
 *
 *   EVICT_POLICY_LRU: one level, so plain least-recently-requested; kept as
 *   the baseline that tests and benchmarks compare against.
 *
 * One evictor serves one frame class (buffer_pool.h): it lists only that
 * class's frames and keeps heat only for the experts of that class's
 * layers, so a miss in one class can never evict a frame of another, and
 * each class ages on its own accesses.
 *
 * The evictor never decides whether a frame may go: evictor_victim returns
 * only frames that buffer_pool_frame_evictable accepts (RESIDENT, no pins),
 * skipping pinned and loading ones, which were requested recently and so sit
 * at the recent ends. All arrays are sized at init.
 */
#ifndef COLIBRI_STORAGE_EVICTOR_H
#define COLIBRI_STORAGE_EVICTOR_H

#include <stdint.h>

#include "storage/buffer_pool.h"

enum evict_policy {
	EVICT_POLICY_FREQ = 1,
	EVICT_POLICY_LRU = 2,
};

#define EVICTOR_LEVELS 120 /* heat levels of a uint16_t heat: 32 exact + 11 octaves of 8 */

#define EVICTOR_UNLISTED 0xff   /* the level of a frame on no list */

/* Frames are global frame indexes; the arrays below hold the class's
 * frames [first, first + n_frames) at index f - first. A listed frame's
 * key is the pool's (frames[f].layer, .expert). */
struct evictor {
	enum evict_policy policy;
	const struct buffer_pool *bp; /* the frames it lists */
	int cls;                      /* the frame class it serves */
	int32_t first;                /* the class's first frame */
	int32_t n_frames;
	int32_t *prev, *next;         /* [n_frames] links within a level (frames), -1 at the ends */
	uint8_t *level;               /* [n_frames] the list the frame is on, or EVICTOR_UNLISTED */
	int32_t *scratch;             /* [n_frames] for re-levelling after aging */
	int32_t oldest[EVICTOR_LEVELS]; /* least recently requested frame of each level */
	int32_t newest[EVICTOR_LEVELS];
	uint64_t nonempty[2];         /* bit per level with a frame */
	int n_layers;
	int32_t *n_experts;           /* [n_layers] */
	uint16_t **heat;              /* [n_layers][n_experts] decayed request counts; NULL
				       * for layers of other classes */
	uint64_t accesses;            /* since the last halving */
	uint64_t age_period;          /* accesses between halvings */
};

/* Sizes the evictor for the frames of class cls of bp and the key space of
 * that class's layers: n_experts[l] experts for each layer l of bp in
 * class cls, 0 for every other layer. Returns 0 or -errno; free with
 * evictor_free. bp must outlive the evictor. */
int evictor_init(struct evictor *ev, enum evict_policy policy, const struct buffer_pool *bp, int cls,
		 const int32_t *n_experts);
void evictor_free(struct evictor *ev);

/* Frame f (of the evictor's class, not listed) has just received its key
 * (its read starts), or leaves the pinned set: it is listed. */
void evictor_insert(struct evictor *ev, int32_t f);

/* A request asked for the expert that frame f holds (f is listed). */
void evictor_access(struct evictor *ev, int32_t f);

/* A request asked for (layer, expert), whose frame is not listed (it is in
 * the pinned set): only its heat counts, so it comes back at the right
 * level when it leaves the set (evictor_insert). */
void evictor_count(struct evictor *ev, int layer, int32_t expert);

/* Frame f lost its key (evicted, or its load failed), or joins the pinned
 * set, which is not listed. No effect on a frame that is not listed. */
void evictor_remove(struct evictor *ev, int32_t f);

/* Forgets the heat of layer's experts and moves its listed frames to the
 * least recent end of the lowest level, so they are the first victims: for
 * a layer that will not be requested for a while. No effect for a layer of
 * another class. O(n_frames + experts). */
void evictor_cool_layer(struct evictor *ev, int layer);

/* An evictable frame of the evictor's class, or -1 when none is (every one
 * pinned, loading or free). Cost: the levels below the victim's plus the pinned and loading
 * frames passed on the way, O(EVICTOR_LEVELS + pinned + loading). */
int32_t evictor_victim(struct evictor *ev);

#endif
