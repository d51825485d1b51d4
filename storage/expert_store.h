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
 * never depend on which experts happened to be cached, nor on the order in
 * which they are delivered (resident ones first, then each read as it
 * completes).
 *
 * Underneath is a buffer manager (storage/buffer_pool.h): O_DIRECT reads
 * through io_uring into a registered, 4 KiB-aligned arena, a page table
 * (layer, expert) -> frame, pin counts, and a frequency-aware eviction
 * policy (storage/evictor.h). A store is driven by one thread.
 *
 * Frame classes. Frames are sized by record: the layers whose records have
 * one size form a class with frames of exactly that size, so a container
 * whose MTP layer keeps int8 experts beside int4 routed ones does not pay
 * an int8 frame for every int4 record. Each class has its own frames, free
 * list, evictor and pinned-set share: a miss, a prefetch or a pin of one
 * class only ever takes frames of that class, and every class must hold
 * one step (max_per_step frames). Records all of one size make one class.
 * How cache_bytes is split is expert_store_split's rule; a caller with a
 * plan names the frames of each class instead.
 *
 * Copies. A layer's expert file may exist in several copies with the same
 * bytes: the primary (copy 0) and mirrors on other disks (copies 1..7, the
 * same index for every layer; a mirror may lack some layers). Where a layer
 * has two or more copies in rotation, every read of a record is split into
 * stripe blocks that go to those copies in proportion to their bandwidth
 * weights (storage/stripe.h), so one record keeps every disk busy; with one
 * copy a record is one read, as without mirrors. A copy that fails (read
 * error, end of file, or a record whose checksum only it breaks) leaves the
 * rotation with one warning line and the others take its share; the bytes
 * delivered are the same whatever copies served them. A request fails only
 * when no copy yields a verified record (storage/copies.h).
 *
 * Pinned set. expert_store_pin_set / expert_store_repin load experts and pin
 * them for good (the learned hot set): they count against the frames, are
 * never evicted, and their requests are pinned hits.
 *
 * Partial files. A layer's file may hold some of its experts only (a slot
 * table, expert_layer_desc.slot: one MPI rank's shard). Expert e is then
 * read at record slot[e]; asking for or pinning an expert the file lacks is
 * -ENOENT naming layer, expert and file, never a read of another record's
 * bytes; a prefetch of one is skipped (a predictor may guess it).
 *
 * Environment, read at open (each forced fallback prints one line):
 *   COLIBRI_NO_IO_URING=1       read with a pread thread pool, not io_uring
 *   COLIBRI_NO_DIRECT=1         open expert files without O_DIRECT
 *   COLIBRI_NO_FIXED_BUFFERS=1  do not register the arena with io_uring
 *   COLIBRI_EVICT=lru|freq      eviction policy when options.evict is DEFAULT
 * The same fallbacks happen on their own, with one warning line each, when
 * io_uring_queue_init fails, when a file system refuses O_DIRECT (EINVAL,
 * e.g. tmpfs), or when buffer registration fails (RLIMIT_MEMLOCK).
 */
#ifndef COLIBRI_STORAGE_EXPERT_STORE_H
#define COLIBRI_STORAGE_EXPERT_STORE_H

#include <stdbool.h>
#include <stdint.h>

#define EXPERT_COPIES_MAX 8                       /* the primary and its mirrors */
#define EXPERT_MIRRORS_MAX (EXPERT_COPIES_MAX - 1)
#define EXPERT_CLASSES_MAX 8                      /* distinct record sizes (frame classes) */
#define EXPERT_STATS_LAYERS_MAX 256               /* layers with per-layer counters in the stats */

/* One MoE layer's expert file and its copies. A layer without experts has
 * path NULL. mirror_paths[i] is copy i + 1 of the same bytes, or NULL where
 * that mirror lacks the layer. A copy that cannot be opened or is too short
 * is left out for this layer (one warning per copy at open); the layer fails
 * to open only when no copy can be opened, with the primary's error.
 * Record e's checksum is XXH3-64 of its record_bytes bytes with seed
 * checksum_seed + e (XXH3_64bits_withSeed): the caller numbers the records
 * so that one read from another record's place (another expert, another
 * layer) fails its check; the store gives the numbers no other meaning. */
struct expert_layer_desc {
	const char *path;            /* the primary copy (copy 0) */
	uint64_t record_bytes;       /* multiple of 4096 */
	int32_t n_experts;
	const uint64_t *checksums;   /* [n_experts], XXH3-64 of each record */
	uint64_t checksum_seed;      /* record e's checksum is seeded with checksum_seed + e */
	const char *mirror_paths[EXPERT_MIRRORS_MAX];
	/* A file holding some of the experts only (a shard, engine/cli's
	 * colibri shard): slot[e] is expert e's record index in the file, -1
	 * when the file lacks it; n_records records in the file. NULL: expert
	 * e is record e. Owned by the caller, like checksums. */
	const int32_t *slot;         /* [n_experts] or NULL */
	int32_t n_records;
};

/* One expert of the pinned set. */
struct expert_pin {
	int32_t layer;
	int32_t expert;
};

enum expert_evict {
	EXPERT_EVICT_DEFAULT = 0,    /* COLIBRI_EVICT if set, else FREQ */
	EXPERT_EVICT_FREQ,           /* LFU over decayed per-expert request counts, LRU among equals */
	EXPERT_EVICT_LRU,            /* plain LRU, the baseline */
};

/* The frames of one frame class: records of frame_bytes. */
struct expert_class_frames {
	uint64_t frame_bytes;        /* a record size; 0 ends a list */
	int32_t n_frames;
};

/* Zero fields take the defaults. */
struct expert_store_options {
	uint64_t cache_bytes;        /* frame arena size, split over the classes by
				      * expert_store_split; unused when class_frames is set */
	struct expert_class_frames class_frames[EXPERT_CLASSES_MAX]; /* the frames of each
				      * class, as a plan chose them; must name every class of
				      * the store (others are ignored); [0].frame_bytes 0: unset */
	int io_depth;                /* reads in flight at most (>= 1) */
	bool buffered;               /* do not use O_DIRECT */
	enum expert_evict evict;
	int prefetch_depth;          /* prefetch reads in flight at most; 0: io_depth / 2
				      * (at least 1); < 0: prefetch off */
	double copy_gbps[EXPERT_COPIES_MAX]; /* read bandwidth of each copy's disk, [0] the
				      * primary; the stripe weights. 0: unknown, counted
				      * as the mean of the known ones (all 0: equal) */
	uint64_t stripe_bytes;       /* block of a striped read; 0: 1 MiB; a multiple of 4096 */
	double readmit_s;            /* a copy taken out of rotation returns after this many
				      * seconds, doubled after each new failure; 0: 30 s */
	const char *absent_why;      /* what the partial files are, for the error on an expert
				      * they lack ("DIR is shard 1 of 3: ..."); copied at open;
				      * NULL: a generic note */
};

/* One frame class's counters since open; the same identities as the
 * store's (requests = pinned_hits + hits + joins + misses). */
struct expert_class_stats {
	uint64_t frame_bytes;        /* the record size of its layers */
	int32_t n_frames;
	int32_t n_layers;            /* layers whose records have this size */
	int32_t n_pinned;            /* now: its frames in the pinned set */
	uint64_t requests;
	uint64_t pinned_hits;
	uint64_t hits;
	uint64_t joins;
	uint64_t misses;
	uint64_t evictions;          /* resident frames given up for another expert */
	uint64_t bytes_read;
	uint64_t prefetch_issued;
	uint64_t prefetch_wasted;
};

/* Counters since open. requests = pinned_hits + hits + joins + misses; the
 * cache hit rate is hits / requests, whichever the policy, and
 * (pinned_hits + hits) / requests is the share served from RAM. */
struct expert_store_stats {
	uint64_t requests;           /* experts asked for (each id once per request) */
	uint64_t hits;               /* already resident in a cache frame (not the pinned set) */
	uint64_t misses;             /* read from disk for a request */
	uint64_t bytes_read;         /* every byte read, retries and prefetch included */
	uint64_t read_retries;       /* reads of a record repeated after a failure (one per re-read) */
	double disk_wait_s;          /* time blocked waiting for a completion */
	uint64_t layer_hits[EXPERT_STATS_LAYERS_MAX]; /* cache hits per layer (later layers
				      * not counted) */
	uint64_t layer_requests[EXPERT_STATS_LAYERS_MAX];
	uint64_t joins;              /* asked for while its read was in flight: joined */
	uint64_t read_failures;      /* loads that failed for good (no copy delivered) */
	uint64_t steps;              /* successful expert_store_request calls */
	double step_s;               /* summed time from request to its last delivery */
	double disk_busy_s;          /* time with at least one of our reads in the kernel */
	double disk_gbps;            /* bytes_read / disk_busy_s, in GB/s (1e9) */
	uint64_t prefetch_issued_bytes;
	uint64_t prefetch_used_bytes; /* prefetched bytes a request then asked for */
	int reads_queued;            /* now: reads (and loads waiting for a block) not yet in the
				      * kernel, as of the last reap */
	int reads_in_kernel;         /* now: reads submitted, completion not yet reaped */
	/* What open settled on. */
	bool io_uring;               /* false: pread thread pool */
	bool o_direct;               /* every expert file is open with O_DIRECT */
	bool fixed_buffers;          /* arena registered with io_uring */
	bool fixed_files;
	enum expert_evict evict;     /* FREQ or LRU */
	int numa_node;               /* node the arena is bound to, or -1 */
	int io_depth;
	int prefetch_depth;
	int32_t n_frames;            /* of every class */
	uint64_t frame_bytes;        /* the largest frame (the only one with one class) */
	uint64_t cache_bytes;        /* the arena: frames x their sizes, summed */
	int n_classes;               /* record sizes, ascending in classes[] */
	struct expert_class_stats classes[EXPERT_CLASSES_MAX];

	/* Pinned set and prefetch. */
	uint64_t pinned_hits;        /* requests served by the permanently pinned set */
	uint64_t layer_pinned_hits[EXPERT_STATS_LAYERS_MAX];
	int32_t n_pinned;            /* now: permanently pinned experts */
	uint64_t prefetch_issued;    /* prefetch loads started */
	uint64_t prefetch_used;      /* of those, asked for by a request (hit or join) or pinned */
	uint64_t prefetch_hits;      /* hits (counted in hits) on an expert a prefetch had read */
	uint64_t prefetch_wasted;    /* of those, evicted, or failed, before any use */
	uint64_t prefetch_wasted_bytes;

	/* Copies, indexed like copy_gbps: [0] the primary, [c] mirror_paths[c - 1]. */
	int n_copies;                /* 1 + the highest mirror index any layer names */
	uint64_t stripe_bytes;
	double copy_weight[EXPERT_COPIES_MAX];        /* share of the blocks, summing to 1 */
	int32_t copy_layers[EXPERT_COPIES_MAX];       /* layers the copy holds (opened) */
	uint64_t copy_bytes_read[EXPERT_COPIES_MAX];
	uint64_t copy_blocks_read[EXPERT_COPIES_MAX]; /* reads handed to it, a whole record or a block */
	uint64_t copy_failures[EXPERT_COPIES_MAX];    /* failed blocks, and records only it got wrong */
	bool copy_in_rotation[EXPERT_COPIES_MAX];     /* false: failed, not read while others can
						       * until its wait has passed */
	uint32_t copy_readmissions[EXPERT_COPIES_MAX]; /* returns to rotation after a wait */
};

struct expert_store;

/* Opens the expert files of layers[0..n_layers) (indexed by model layer)
 * and their copies, and allocates the frame arena: the frames of each
 * class, from opt->class_frames or else from opt->cache_bytes by
 * expert_store_split, never more than the class has records (or
 * max_per_step). Every class must hold the largest request a step will
 * make (max_per_step experts); otherwise -ENOMEM with a message naming the
 * minimum. More than EXPERT_CLASSES_MAX record sizes, or class_frames
 * lacking a class, is -EINVAL. A
 * file shorter than its records (n_experts, or n_records with a slot
 * table) is refused (-EINVAL naming the file and both sizes), unless
 * another copy of that layer opens. stripe_bytes
 * not a multiple of 4096 is -EINVAL. The caller owns *out and frees it with
 * expert_store_close, which waits for reads in flight; layers[] need not
 * outlive the call except the checksums and slot arrays, which must outlive the
 * store. */
int expert_store_open(struct expert_store **out, const struct expert_layer_desc *layers,
		      int n_layers, int max_per_step, const struct expert_store_options *opt);
void expert_store_close(struct expert_store *s);

/* Places experts ids[0..n) of layer (duplicates are placed once) and pins
 * them: resident ones are ready at once, one whose read is in flight (a
 * prefetch) is joined, the others get a frame from the evictor and their
 * reads are submitted in one batch (pinned-set experts are hits that need
 * no frame). Undelivered experts of the previous request are unpinned
 * first. Returns 0 or -errno: -EINVAL for a bad layer
 * or id, -ENOENT for an expert the layer's file lacks (slot -1), -ENOMEM
 * when the misses need more frames than are unpinned (nothing
 * is pinned then). A read or checksum failure is reported by
 * expert_store_next. */
int expert_store_request(struct expert_store *s, int layer, const int32_t *ids, int n);

/* Delivers the next placed expert of the current request: 1 with *id and
 * *record set (valid until its release), 0 when every requested expert has
 * been delivered, -errno on failure. Blocks only when nothing is ready.
 * A record that no copy delivers verified (with one copy: a read that fails
 * twice by error, end of file or checksum mismatch) fails the request with
 * a message naming layer, expert, offset and each file; the
 * undelivered experts are then unpinned and later calls return the same
 * error until the next request. */
int expert_store_next(struct expert_store *s, int32_t *id, const void **record);

/* Unpins one delivered expert, once per delivery. A release with no
 * unreleased delivery of that expert left (requested but not yet delivered,
 * never requested, already released) is ignored, so it never drops the pin
 * of a request still to deliver the expert, nor a pinned-set pin. */
void expert_store_release(struct expert_store *s, int layer, int32_t id);

/* Starts low-priority reads of those of ids[0..n) that are neither resident
 * nor in flight, without pinning them. Bounded: at most prefetch_depth
 * prefetch reads in flight, and only free or evictable (unpinned, resident)
 * frames are taken, so a prefetch never displaces a pinned (by a request
 * or the pinned set) or loading expert; ids beyond the bound are skipped.
 * A prefetched expert that a request then asks for counts as used; one
 * evicted first counts as wasted. An id the layer's file lacks (slot -1)
 * is skipped, no error. Returns the number of reads started, or -EINVAL
 * for a bad layer or id. */
int expert_store_prefetch(struct expert_store *s, int layer, const int32_t *ids, int n);

/* Makes layer's resident experts (outside the pinned set) the first to give
 * way to a miss or a prefetch, and forgets how often they were asked for:
 * for a layer the caller will not request for a while, such as an MTP layer
 * while drafting is off. Changes no result. -EINVAL for a bad layer. */
int expert_store_cool_layer(struct expert_store *s, int layer);

const struct expert_store_stats *expert_store_stats(const struct expert_store *s);

/* How often each expert of layer has been requested since open (each id
 * once per request), [n_experts]; NULL for a layer without experts. Owned
 * by the store, read-only, updated in place. */
const uint32_t *expert_store_usage(const struct expert_store *s, int layer);

/* Of those requests, how many found the expert resident (cached or
 * pinned, not joined to a read in flight), [n_experts]; NULL for a layer
 * without experts. Owned by the store, updated in place. */
const uint32_t *expert_store_ram_hits(const struct expert_store *s, int layer);

/* The experts of layer; 0 for a layer without experts (or out of range). */
int32_t expert_store_n_experts(const struct expert_store *s, int layer);

/* Where an expert lives now. */
enum expert_where {
	EXPERT_ON_DISK = 0,          /* no frame (or its frame is being given up) */
	EXPERT_LOADING,              /* a read into its frame is in flight */
	EXPERT_CACHED,               /* resident in an ordinary frame */
	EXPERT_PINNED,               /* resident in the pinned set */
};

/* Writes each expert of layer's enum expert_where into out[0..n_experts)
 * and returns n_experts (0 for a layer without experts). Reads the page
 * table: call it from the store's thread, between requests. O(n_experts). */
int expert_store_where(const struct expert_store *s, int layer, uint8_t *out);

/* How many experts one request of layer may pin at once: the frames of the
 * layer's class less its pinned set; 0 for a layer without experts. A
 * caller with a larger union splits it into requests of at most this many. */
int expert_store_capacity(const struct expert_store *s, int layer);

/* The index in stats->classes of layer's frame class, or -1 for a layer
 * without experts. */
int expert_store_layer_class(const struct expert_store *s, int layer);

/* Makes pins[0..n) the pinned set: experts of the old set not listed become
 * ordinary cached frames, the listed ones are loaded (reads of those not
 * resident go to the ring in one batch; the call returns once they are
 * verified) and pinned for good. Duplicates count once. Call between steps.
 * Returns 0, -EINVAL for a bad layer or id, -ENOENT for an expert the
 * layer's file lacks, -ENOMEM (nothing changed, with
 * a message) when the set would leave fewer frames of some class outside
 * it than one step pins (max_per_step), or the load error of a record no copy delivers
 * (then the experts this call added are unpinned again; the old set's
 * drops stay done). */
int expert_store_pin_set(struct expert_store *s, const struct expert_pin *pins, int n);

/* Changes the pinned set at a safe point (between steps): drop[0..n_drop)
 * leave it and become ordinary cached frames, then add[0..n_add) are
 * loaded and pinned as by expert_store_pin_set. An expert in both lists
 * stays pinned; dropping one that is not pinned is ignored. Same results. */
int expert_store_repin(struct expert_store *s, const struct expert_pin *add, int n_add,
		       const struct expert_pin *drop, int n_drop);

/* Bytes of frame arena the store needs at minimum: max_per_step frames of
 * every class. */
uint64_t expert_store_min_bytes(const struct expert_layer_desc *layers, int n_layers,
				int max_per_step);

/* The split rule on plain numbers, shared by the store and the planner
 * (planner/plan.c), so a plan opens exactly what the store would: per_step
 * frames of each of the n classes first, then the classes by most layers
 * (ties: the lower index, i.e. the smaller records), each up to
 * max_frames[c] (at least per_step). Writes frames[c]; returns the bytes
 * left over. */
uint64_t expert_frames_split(int n, const uint64_t frame_bytes[], const int32_t layers[],
			     const uint64_t max_frames[], uint64_t per_step, uint64_t bytes, uint64_t frames[]);

/* The frame classes of layers[0..n_layers) (one per record size among the
 * layers with experts, ascending) and the frames cache_bytes buys each,
 * into out[]; returns how many classes, or -EINVAL (with a message) for
 * more than EXPERT_CLASSES_MAX sizes. The rule: every class first gets
 * max_per_step frames (the minimum, one step's experts, so a rare class
 * such as an MTP layer's works at all), then the rest goes whole to the
 * class of the most layers (ties: the smaller records), which serves the
 * most requests (one per layer per token), up to one frame per record;
 * what is left after that to the next class in the same order, and so on.
 * Below the minimum some class gets fewer than max_per_step. */
int expert_store_split(const struct expert_layer_desc *layers, int n_layers, int max_per_step,
		       uint64_t cache_bytes, struct expert_class_frames out[EXPERT_CLASSES_MAX]);

#endif
