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

/* One MoE layer's expert file. A layer without experts has path NULL. */
struct expert_layer_desc {
	const char *path;
	uint64_t record_bytes;       /* multiple of 4096 */
	int32_t n_experts;
	const uint64_t *checksums;   /* [n_experts], XXH3-64 of each record */
};

enum expert_evict {
	EXPERT_EVICT_DEFAULT = 0,    /* COLIBRI_EVICT if set, else FREQ */
	EXPERT_EVICT_FREQ,           /* LFU over decayed per-expert request counts, LRU among equals */
	EXPERT_EVICT_LRU,            /* plain LRU, the baseline */
};

/* Zero fields take the defaults. */
struct expert_store_options {
	uint64_t cache_bytes;        /* frame arena size; rounded down to whole frames */
	int io_depth;                /* reads in flight at most (>= 1) */
	bool buffered;               /* do not use O_DIRECT */
	enum expert_evict evict;
	int prefetch_depth;          /* prefetch reads in flight at most; 0: io_depth / 2
				      * (at least 1); < 0: prefetch off */
};

/* Counters since open. requests = hits + joins + misses; the hit rate is
 * hits / requests, whichever the policy. */
struct expert_store_stats {
	uint64_t requests;           /* experts asked for (each id once per request) */
	uint64_t hits;               /* already resident */
	uint64_t misses;             /* read from disk for a request */
	uint64_t bytes_read;         /* every byte read, retries and prefetch included */
	uint64_t read_retries;       /* loads read a second time after a failure */
	double disk_wait_s;          /* time blocked waiting for a completion */
	uint64_t layer_hits[256];    /* hits per layer (layers >= 256 not counted) */
	uint64_t layer_requests[256];
	uint64_t joins;              /* asked for while its read was in flight: joined */
	uint64_t read_failures;      /* loads that failed after the retry */
	uint64_t steps;              /* successful expert_store_request calls */
	double step_s;               /* summed time from request to its last delivery */
	double disk_busy_s;          /* time with at least one of our reads in the kernel */
	double disk_gbps;            /* bytes_read / disk_busy_s, in GB/s (1e9) */
	uint64_t prefetch_issued_bytes;
	uint64_t prefetch_used_bytes; /* prefetched bytes a request then asked for */
	int reads_queued;            /* now: reads waiting for a slot (as of the last reap) */
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
	int32_t n_frames;
	uint64_t frame_bytes;
};

struct expert_store;

/* Opens the expert files of layers[0..n_layers) (indexed by model layer)
 * and allocates the frame arena. The arena must hold at least the largest
 * request a step will make (max_per_step experts of the largest record);
 * otherwise -ENOMEM with a message naming the minimum. A file shorter than
 * n_experts records is refused (-EINVAL naming the file and both sizes).
 * The caller owns *out and frees it with expert_store_close, which waits
 * for reads in flight; layers[] need not outlive the call except the
 * checksums arrays, which must outlive the store. */
int expert_store_open(struct expert_store **out, const struct expert_layer_desc *layers,
		      int n_layers, int max_per_step, const struct expert_store_options *opt);
void expert_store_close(struct expert_store *s);

/* Places experts ids[0..n) of layer (duplicates are placed once) and pins
 * them: resident ones are ready at once, one whose read is in flight (a
 * prefetch) is joined, the others get a frame from the evictor and their
 * reads are submitted in one batch. Undelivered experts of the previous
 * request are unpinned first. Returns 0 or -errno: -EINVAL for a bad layer
 * or id, -ENOMEM when the misses need more frames than are unpinned (nothing
 * is pinned then). A read or checksum failure is reported by
 * expert_store_next. */
int expert_store_request(struct expert_store *s, int layer, const int32_t *ids, int n);

/* Delivers the next placed expert of the current request: 1 with *id and
 * *record set (valid until its release), 0 when every requested expert has
 * been delivered, -errno on failure. Blocks only when nothing is ready.
 * A read that fails twice (error, end of file, checksum mismatch) fails the
 * request with a message naming layer, expert, file and offset; the
 * undelivered experts are then unpinned and later calls return the same
 * error until the next request. */
int expert_store_next(struct expert_store *s, int32_t *id, const void **record);

/* Unpins one delivered expert. */
void expert_store_release(struct expert_store *s, int layer, int32_t id);

/* Starts low-priority reads of those of ids[0..n) that are neither resident
 * nor in flight, without pinning them. Bounded: at most prefetch_depth
 * prefetch reads in flight, and only free or evictable (unpinned, resident)
 * frames are taken, so a prefetch never displaces a pinned or loading
 * expert; ids beyond the bound are skipped. Returns the number of reads
 * started, or -EINVAL for a bad layer or id. */
int expert_store_prefetch(struct expert_store *s, int layer, const int32_t *ids, int n);

const struct expert_store_stats *expert_store_stats(const struct expert_store *s);

/* How often each expert of layer has been requested since open (each id
 * once per request), [n_experts]; NULL for a layer without experts. Owned
 * by the store, read-only, updated in place. */
const uint32_t *expert_store_usage(const struct expert_store *s, int layer);

/* How many experts one request may pin at once (the frame count). A caller
 * with a larger union splits it into requests of at most this many. */
int expert_store_capacity(const struct expert_store *s);

/* Bytes of frame arena the store needs at minimum for max_per_step. */
uint64_t expert_store_min_bytes(const struct expert_layer_desc *layers, int n_layers,
				int max_per_step);

#endif
