/*
 * expert_store — the public API over the buffer manager: requests, delivery,
 * prefetch, retries and statistics (see expert_store.h).
 *
 * Modules underneath, each with its own invariants:
 *   buffer_pool  arena, frames, page table, FREE/LOADING/RESIDENT/EVICTING
 *   evictor      which unpinned resident frame gives way (FREQ or LRU)
 *   io_ring      bounded read loop over io_uring, or the pread pool
 *
 * A request goes in two passes so that a miss can never evict an expert the
 * same request also asked for: pass 1 pins every id already mapped (hits are
 * ready at once, reads in flight are joined), pass 2 gives each miss a frame
 * and queues its read; one io_ring_submit sends the batch. The request
 * checks up front that the misses fit in the frames left unpinned, so it
 * either succeeds or changes nothing.
 *
 * Every read completes in frame_read_done on the caller's thread: a failure
 * (error, end of file, checksum mismatch) is retried once through
 * frame_read_start, then fails the request that waits for it. A frame the
 * current request waits for is `awaited`; abandoning a request (failure, or
 * a new request before the last delivery) unpins what was not delivered.
 */
#include "storage/expert_store.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/buffer_pool.h"
#include "storage/checksum.h"
#include "storage/error.h"
#include "storage/evictor.h"
#include "storage/io_ring.h"

#define STORE_RECORD_MAX_BYTES (1ull << 30) /* io_uring: one read and one registered buffer <= 1 GiB */
#define STORE_DEPTH_MAX 4096
#define STORE_FIXED_BUFFERS_MAX 16384       /* the kernel's limit on registered buffers */

_Static_assert(IO_RING_ALIGN == 4096, "records are laid out in 4 KiB blocks");
_Static_assert(STORE_RECORD_MAX_BYTES % IO_RING_ALIGN == 0, "a registered buffer holds whole blocks");

struct store_layer {
	char *path;                  /* NULL: no routed experts */
	int fd;
	int file_index;              /* fixed-file slot, or -1 */
	bool direct;                 /* fd is O_DIRECT */
	uint64_t record_bytes;
	int32_t n_experts;
	const uint64_t *checksums;   /* [n_experts], owned by the caller */
	uint32_t *usage;             /* [n_experts] request counts */
	uint32_t *mark;              /* [n_experts] serial of the last request listing it */
};

struct expert_store {
	struct store_layer *layers;  /* [n_layers] */
	int n_layers;
	int32_t max_experts;         /* largest n_experts of any layer */
	struct buffer_pool pool;
	struct evictor ev;
	struct io_ring ring;
	bool has_experts;
	int32_t frames_per_buf;      /* frames per registered buffer, 0 when unregistered */
	int prefetch_depth;
	int n_prefetch_inflight;

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
};

static bool env_flag(const char *name)
{
	const char *v = getenv(name);
	return v && *v && strcmp(v, "0") != 0;
}

uint64_t expert_store_min_bytes(const struct expert_layer_desc *layers, int n_layers,
				int max_per_step)
{
	uint64_t rec = 0;
	for (int i = 0; i < n_layers; i++)
		if (layers[i].path && layers[i].record_bytes > rec)
			rec = layers[i].record_bytes;
	return rec * (uint64_t)max_per_step;
}

static void stats_sync(struct expert_store *s)
{
	s->stats.disk_wait_s = s->ring.wait_s;
	s->stats.disk_busy_s = s->ring.busy_s;
	s->stats.disk_gbps = s->ring.busy_s > 0 ? (double)s->stats.bytes_read / s->ring.busy_s / 1e9 : 0;
	s->stats.reads_queued = s->ring.n_queued + s->ring.n_sq;
	s->stats.reads_in_kernel = s->ring.n_kernel;
}

/* ---- open / close ---------------------------------------------------- */

static int layer_open(struct expert_store *s, int i, const struct expert_layer_desc *d, bool direct,
		      bool *warned_direct)
{
	struct store_layer *l = &s->layers[i];
	if (d->record_bytes == 0 || d->record_bytes % IO_RING_ALIGN ||
	    d->record_bytes > STORE_RECORD_MAX_BYTES)
		return error_set(EINVAL, "%s: record size %" PRIu64 " is not a multiple of %d up to 1 GiB",
				 d->path, d->record_bytes, IO_RING_ALIGN);
	if (d->n_experts <= 0 || !d->checksums)
		return error_set(EINVAL, "%s: %d experts%s", d->path, d->n_experts,
				 d->checksums ? "" : " without checksums");
	l->record_bytes = d->record_bytes;
	l->n_experts = d->n_experts;
	l->checksums = d->checksums;
	l->path = strdup(d->path);
	l->usage = calloc((size_t)d->n_experts, sizeof *l->usage);
	l->mark = calloc((size_t)d->n_experts, sizeof *l->mark);
	if (!l->path || !l->usage || !l->mark)
		return error_set(ENOMEM, "out of memory");
	if (direct) {
		l->fd = open(d->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
		l->direct = l->fd >= 0;
		if (l->fd < 0 && errno == EINVAL && !*warned_direct) {
			fprintf(stderr, "colibri: warning: %s: the file system refuses O_DIRECT; "
					"reading experts through the page cache\n", d->path);
			*warned_direct = true;
		}
	}
	if (l->fd < 0)
		l->fd = open(d->path, O_RDONLY | O_CLOEXEC);
	if (l->fd < 0)
		return error_set(errno, "%s: cannot open: %s", d->path, strerror(errno));
	struct stat st;
	if (fstat(l->fd, &st) != 0)
		return error_set(errno, "%s: cannot stat: %s", d->path, strerror(errno));
	uint64_t want = (uint64_t)d->n_experts * d->record_bytes;
	if ((uint64_t)st.st_size < want)
		return error_set(EINVAL, "%s: truncated expert file: %" PRIu64 " bytes, expected %" PRIu64
				 " (%d experts of %" PRIu64 " bytes)",
				 d->path, (uint64_t)st.st_size, want, d->n_experts, d->record_bytes);
	return 0;
}

static enum expert_evict evict_choice(enum expert_evict opt)
{
	if (opt == EXPERT_EVICT_FREQ || opt == EXPERT_EVICT_LRU)
		return opt;
	const char *v = getenv("COLIBRI_EVICT");
	if (v && strcmp(v, "lru") == 0)
		return EXPERT_EVICT_LRU;
	if (v && *v && strcmp(v, "freq") != 0)
		fprintf(stderr, "colibri: warning: COLIBRI_EVICT=%s is neither lru nor freq; using freq\n", v);
	return EXPERT_EVICT_FREQ;
}

/* Registers the arena as fixed buffers of whole frames, at most 1 GiB each
 * (the kernel's limit per buffer). Failure is not fatal. */
static void arena_register(struct expert_store *s)
{
	struct buffer_pool *bp = &s->pool;
	int32_t per = (int32_t)(STORE_RECORD_MAX_BYTES / bp->frame_bytes);
	int32_t n = (bp->n_frames + per - 1) / per;
	const char *why = NULL;
	int rc = 0;
	if (n > STORE_FIXED_BUFFERS_MAX) {
		why = "more than 16384 buffers";
	} else {
		struct iovec *iov = calloc((size_t)n, sizeof *iov);
		if (!iov)
			return;
		for (int32_t i = 0; i < n; i++) {
			int32_t first = i * per;
			int32_t count = bp->n_frames - first < per ? bp->n_frames - first : per;
			iov[i].iov_base = buffer_pool_frame_data(bp, first);
			iov[i].iov_len = (size_t)((uint64_t)count * bp->frame_bytes);
		}
		rc = io_ring_register_buffers(&s->ring, iov, n);
		free(iov);
		if (rc == 0) {
			s->frames_per_buf = per;
			return;
		}
		why = strerror(-rc);
	}
	fprintf(stderr, "colibri: warning: cannot register the %" PRIu64 " MiB expert arena with io_uring "
			"(%s%s); using unregistered reads\n",
		((uint64_t)bp->n_frames * bp->frame_bytes) >> 20, why,
		rc == -ENOMEM || rc == -EPERM ? ", raise RLIMIT_MEMLOCK" : "");
}

int expert_store_open(struct expert_store **out, const struct expert_layer_desc *layers,
		      int n_layers, int max_per_step, const struct expert_store_options *opt)
{
	struct expert_store *s = calloc(1, sizeof *s);
	int32_t *n_experts = NULL;
	int *fds = NULL;
	int rc = 0;
	*out = NULL;
	if (!s)
		return error_set(ENOMEM, "out of memory");
	s->n_layers = n_layers;
	s->layers = calloc((size_t)n_layers, sizeof *s->layers);
	n_experts = calloc((size_t)n_layers, sizeof *n_experts);
	fds = calloc((size_t)n_layers, sizeof *fds);
	if (!s->layers || !n_experts || !fds) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < n_layers; i++) {
		s->layers[i].fd = -1;
		s->layers[i].file_index = -1;
	}

	bool no_direct = env_flag("COLIBRI_NO_DIRECT");
	bool no_uring = env_flag("COLIBRI_NO_IO_URING");
	bool no_fixed = env_flag("COLIBRI_NO_FIXED_BUFFERS");
	bool direct = !opt->buffered && !no_direct;
	bool warned_direct = false;
	if (no_direct && !opt->buffered)
		fprintf(stderr, "colibri: warning: COLIBRI_NO_DIRECT is set; reading experts through the page cache\n");

	uint64_t frame_bytes = 0;
	bool all_direct = true;
	for (int i = 0; i < n_layers; i++) {
		if (!layers[i].path)
			continue;
		if ((rc = layer_open(s, i, &layers[i], direct, &warned_direct)))
			goto fail;
		n_experts[i] = layers[i].n_experts;
		all_direct &= s->layers[i].direct;
		if (layers[i].record_bytes > frame_bytes)
			frame_bytes = layers[i].record_bytes;
		if (layers[i].n_experts > s->max_experts)
			s->max_experts = layers[i].n_experts;
	}
	if (frame_bytes == 0) {
		free(n_experts);
		free(fds);
		*out = s; /* a model without routed experts */
		return 0;
	}
	s->has_experts = true;

	uint64_t min = frame_bytes * (uint64_t)max_per_step;
	if (opt->cache_bytes < min) {
		rc = error_set(ENOMEM, "expert cache of %" PRIu64 " MiB is below the minimum of %" PRIu64
			       " MiB (%d experts of %" PRIu64 " KiB in one step)",
			       opt->cache_bytes >> 20, (min + (1 << 20) - 1) >> 20, max_per_step,
			       frame_bytes >> 10);
		goto fail;
	}
	uint64_t n_frames = opt->cache_bytes / frame_bytes;
	if (n_frames > INT32_MAX / 2)
		n_frames = INT32_MAX / 2;
	if ((rc = buffer_pool_init(&s->pool, frame_bytes, (int32_t)n_frames, n_layers, n_experts)))
		goto fail;
	enum expert_evict evict = evict_choice(opt->evict);
	if ((rc = evictor_init(&s->ev, evict == EXPERT_EVICT_LRU ? EVICT_POLICY_LRU : EVICT_POLICY_FREQ,
			       (int32_t)n_frames, n_layers, n_experts)))
		goto fail;

	int depth = opt->io_depth < 1 ? 1 : opt->io_depth > STORE_DEPTH_MAX ? STORE_DEPTH_MAX : opt->io_depth;
	if (no_uring)
		fprintf(stderr, "colibri: warning: COLIBRI_NO_IO_URING is set; reading experts with pread threads\n");
	if ((rc = io_ring_init(&s->ring, depth, no_uring)))
		goto fail;
	if (s->ring.backend == IO_RING_URING) {
		int n_fds = 0;
		for (int i = 0; i < n_layers; i++)
			if (s->layers[i].path)
				fds[n_fds++] = s->layers[i].fd;
		if (io_ring_register_files(&s->ring, fds, n_fds) == 0)
			for (int i = 0, k = 0; i < n_layers; i++)
				if (s->layers[i].path)
					s->layers[i].file_index = k++;
		if (no_fixed)
			fprintf(stderr, "colibri: warning: COLIBRI_NO_FIXED_BUFFERS is set; using unregistered reads\n");
		else
			arena_register(s);
	}

	s->uniq = malloc((size_t)s->max_experts * sizeof *s->uniq);
	s->req_frames = malloc((size_t)s->max_experts * sizeof *s->req_frames);
	s->ready = malloc((size_t)s->max_experts * sizeof *s->ready);
	if (!s->uniq || !s->req_frames || !s->ready) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	s->prefetch_depth = opt->prefetch_depth < 0 ? 0
			    : opt->prefetch_depth == 0 ? (depth / 2 > 1 ? depth / 2 : 1)
			    : opt->prefetch_depth > depth ? depth : opt->prefetch_depth;

	struct expert_store_stats *st = &s->stats;
	st->io_uring = s->ring.backend == IO_RING_URING;
	st->o_direct = all_direct;
	st->fixed_buffers = s->ring.fixed_buffers;
	st->fixed_files = s->ring.fixed_files;
	st->evict = evict;
	st->numa_node = s->pool.numa_node;
	st->io_depth = depth;
	st->prefetch_depth = s->prefetch_depth;
	st->n_frames = s->pool.n_frames;
	st->frame_bytes = s->pool.frame_bytes;
	free(n_experts);
	free(fds);
	*out = s;
	return 0;
fail:
	free(n_experts);
	free(fds);
	expert_store_close(s);
	return rc;
}

void expert_store_close(struct expert_store *s)
{
	if (!s)
		return;
	io_ring_free(&s->ring); /* reads in flight finish before the arena goes */
	evictor_free(&s->ev);
	buffer_pool_free(&s->pool);
	for (int i = 0; s->layers && i < s->n_layers; i++) {
		struct store_layer *l = &s->layers[i];
		if (l->fd >= 0)
			close(l->fd);
		free(l->path);
		free(l->usage);
		free(l->mark);
	}
	free(s->layers);
	free(s->uniq);
	free(s->req_frames);
	free(s->ready);
	free(s);
}

/* ---- reads ----------------------------------------------------------- */

static void frame_read_done(struct io_op *op);

/* Where try number fr->attempt of a load reads from: the layer's own file,
 * for every try today. Mirrors (a later issue) slot in here: a retry
 * (attempt > 0) would pick another copy of the file on another disk, so a
 * bad sector or a failing disk costs one retry instead of the request. */
static void frame_read_source(const struct expert_store *s, const struct frame *fr, struct io_op *op)
{
	const struct store_layer *l = &s->layers[fr->layer];
	op->fd = l->fd;
	op->file_index = l->file_index;
	op->direct = l->direct;
	op->offset = (uint64_t)fr->expert * l->record_bytes; /* 64-bit before the multiply */
}

/* Queues the read of frame f's record into its frame. */
static void frame_read_start(struct expert_store *s, int32_t f, enum io_op_prio prio)
{
	struct frame *fr = &s->pool.frames[f];
	struct io_op *op = &fr->op;
	memset(op, 0, sizeof *op);
	op->kind = IO_OP_READ;
	op->prio = prio;
	frame_read_source(s, fr, op);
	op->buf_index = s->frames_per_buf ? f / s->frames_per_buf : -1;
	op->buf = buffer_pool_frame_data(&s->pool, f);
	op->len_bytes = (uint32_t)s->layers[fr->layer].record_bytes;
	op->done = frame_read_done;
	op->ctx = s;
	assert(op->offset % IO_RING_ALIGN == 0 && (uintptr_t)op->buf % IO_RING_ALIGN == 0);
	io_ring_queue(&s->ring, op);
}

static void ready_push(struct expert_store *s, int32_t f)
{
	assert(s->ready_count < s->max_experts);
	s->ready[s->ready_count++] = f;
}

/* A load failed twice: the frame goes back to FREE, and the request that
 * waits for it fails with the first such message. */
static void frame_load_fail(struct expert_store *s, int32_t f, int err)
{
	struct frame *fr = &s->pool.frames[f];
	const struct store_layer *l = &s->layers[fr->layer];
	uint64_t off = fr->op.offset;
	s->stats.read_failures++;
	if (fr->awaited) {
		int rc;
		if (err == -EBADMSG)
			rc = error_set(EIO, "layer %d expert %d: checksum mismatch at offset %" PRIu64 " in %s",
				       fr->layer, fr->expert, off, l->path);
		else if (err == -ENODATA)
			rc = error_set(EIO, "layer %d expert %d: unexpected end of file at offset %" PRIu64
				       " in %s (read %u of %u bytes)",
				       fr->layer, fr->expert, off, l->path, fr->op.done_bytes, fr->op.len_bytes);
		else
			rc = error_set(-err, "layer %d expert %d: read error at offset %" PRIu64 " in %s: %s",
				       fr->layer, fr->expert, off, l->path, strerror(-err));
		if (!s->req_rc)
			s->req_rc = rc;
		fr->awaited = false;
		s->n_awaiting--;
		assert(fr->pins == 1);
		buffer_pool_frame_unpin(&s->pool, f);
	}
	assert(fr->pins == 0);
	evictor_remove(&s->ev, f);
	buffer_pool_frame_load_failed(&s->pool, f);
}

/* Completion callback of every frame read. */
static void frame_read_done(struct io_op *op)
{
	struct expert_store *s = op->ctx;
	struct frame *fr = (struct frame *)((char *)op - offsetof(struct frame, op));
	int32_t f = (int32_t)(fr - s->pool.frames);
	const struct store_layer *l = &s->layers[fr->layer];
	int err = op->res;
	s->stats.bytes_read += op->done_bytes;
	if (!err && checksum_xxh3(op->buf, l->record_bytes) != l->checksums[fr->expert])
		err = -EBADMSG;
	if (err && fr->attempt == 0) {
		fr->attempt = 1;
		s->stats.read_retries++;
		frame_read_start(s, f, fr->awaited ? IO_OP_PRIO_DEMAND : op->prio);
		return;
	}
	if (fr->prefetch_inflight) {
		fr->prefetch_inflight = false;
		s->n_prefetch_inflight--;
	}
	if (err) {
		frame_load_fail(s, f, err);
		return;
	}
	buffer_pool_frame_loaded(&s->pool, f);
	if (fr->awaited) {
		fr->awaited = false;
		s->n_awaiting--;
		ready_push(s, f);
	}
}

static int store_reap(struct expert_store *s, bool wait)
{
	int rc = io_ring_reap(&s->ring, wait);
	stats_sync(s);
	return rc;
}

/* A FREE frame, evicting the policy's victim if none is free; -1 when every
 * frame is pinned or loading. */
static int32_t frame_take(struct expert_store *s)
{
	int32_t f = buffer_pool_free_pop(&s->pool);
	if (f >= 0)
		return f;
	f = evictor_victim(&s->ev, &s->pool);
	if (f < 0)
		return -1;
	evictor_remove(&s->ev, f);
	buffer_pool_frame_evict(&s->pool, f);
	buffer_pool_frame_evicted(&s->pool, f);
	return buffer_pool_free_pop(&s->pool);
}

/* Gives (layer, expert) a frame in state LOADING, read not yet queued. */
static void frame_assign(struct expert_store *s, int32_t f, int layer, int32_t expert)
{
	struct frame *fr = &s->pool.frames[f];
	buffer_pool_frame_load(&s->pool, f, layer, expert);
	evictor_insert(&s->ev, f, layer, expert);
	fr->attempt = 0;
	fr->prefetched = false;
	fr->prefetch_inflight = false;
	fr->awaited = false;
}

/* ---- requests -------------------------------------------------------- */

/* Unpins what the current request pinned but did not deliver. */
static void request_abandon(struct expert_store *s)
{
	for (int32_t i = s->ready_head; i < s->ready_count; i++)
		buffer_pool_frame_unpin(&s->pool, s->ready[i]);
	for (int32_t i = 0; i < s->n_req; i++) {
		struct frame *fr = &s->pool.frames[s->req_frames[i]];
		if (fr->awaited) {
			fr->awaited = false;
			s->n_awaiting--;
			buffer_pool_frame_unpin(&s->pool, s->req_frames[i]);
		}
	}
	assert(s->n_awaiting == 0);
	s->ready_head = s->ready_count = 0;
	s->n_req = s->n_delivered = 0;
	s->req_open = false;
}

static int layer_check(const struct expert_store *s, int layer, const int32_t *ids, int n)
{
	if (layer < 0 || layer >= s->n_layers || !s->layers[layer].path)
		return error_set(EINVAL, "layer %d has no routed experts", layer);
	if (n < 0 || (n > 0 && !ids))
		return error_set(EINVAL, "layer %d: %d expert ids", layer, n);
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= s->layers[layer].n_experts)
			return error_set(EINVAL, "layer %d: expert %d out of range (0..%d)", layer, ids[i],
					 s->layers[layer].n_experts - 1);
	return 0;
}

/* The distinct ids of ids[0..n) into s->uniq; returns how many. */
static int32_t request_dedup(struct expert_store *s, struct store_layer *l, const int32_t *ids, int n)
{
	if (++s->serial == 0) {
		for (int i = 0; i < s->n_layers; i++)
			if (s->layers[i].mark)
				memset(s->layers[i].mark, 0,
				       (size_t)s->layers[i].n_experts * sizeof *s->layers[i].mark);
		s->serial = 1;
	}
	int32_t n_uniq = 0;
	for (int i = 0; i < n; i++) {
		if (l->mark[ids[i]] == s->serial)
			continue;
		l->mark[ids[i]] = s->serial;
		s->uniq[n_uniq++] = ids[i];
	}
	return n_uniq;
}

static void request_count(struct expert_store *s, struct store_layer *l, int layer, int32_t e)
{
	s->stats.requests++;
	if (layer < 256)
		s->stats.layer_requests[layer]++;
	if (l->usage[e] < UINT32_MAX)
		l->usage[e]++;
}

int expert_store_request(struct expert_store *s, int layer, const int32_t *ids, int n)
{
	request_abandon(s);
	s->req_rc = 0;
	int rc = layer_check(s, layer, ids, n);
	if (rc)
		return rc;
	struct store_layer *l = &s->layers[layer];
	struct buffer_pool *bp = &s->pool;
	int32_t n_uniq = request_dedup(s, l, ids, n);

	/* Capacity: every miss needs a frame that no one has pinned. */
	int32_t n_miss = 0, n_newly_pinned = 0;
	for (int32_t i = 0; i < n_uniq; i++) {
		int32_t f = buffer_pool_lookup(bp, layer, s->uniq[i]);
		if (f < 0)
			n_miss++;
		else if (bp->frames[f].pins == 0)
			n_newly_pinned++;
	}
	int32_t unpinned = bp->n_frames - bp->n_pinned - n_newly_pinned;
	if (n_miss > unpinned)
		return error_set(ENOMEM, "layer %d: %d experts to read but only %d of %d expert frames are "
				 "unpinned (release delivered experts, or raise the expert cache)",
				 layer, n_miss, unpinned, bp->n_frames);

	s->req_open = true;
	s->t_request = io_ring_now_s();
	s->stats.steps++;

	/* Pass 1: hits are ready now, reads in flight are joined. */
	for (int32_t i = 0; i < n_uniq; i++) {
		int32_t e = s->uniq[i];
		int32_t f = buffer_pool_lookup(bp, layer, e);
		if (f < 0)
			continue;
		struct frame *fr = &bp->frames[f];
		request_count(s, l, layer, e);
		buffer_pool_frame_pin(bp, f);
		evictor_access(&s->ev, f);
		s->req_frames[s->n_req++] = f;
		if (fr->prefetched) {
			fr->prefetched = false;
			s->stats.prefetch_used_bytes += l->record_bytes;
		}
		if (fr->state == FRAME_RESIDENT) {
			s->stats.hits++;
			if (layer < 256)
				s->stats.layer_hits[layer]++;
			ready_push(s, f);
		} else {
			s->stats.joins++;
			fr->awaited = true;
			s->n_awaiting++;
			io_ring_promote(&s->ring, &fr->op);
		}
	}

	/* Pass 2: each miss takes a frame and queues its read. */
	for (int32_t i = 0; i < n_uniq; i++) {
		int32_t e = s->uniq[i];
		if (buffer_pool_lookup(bp, layer, e) >= 0)
			continue;
		int32_t f;
		while ((f = frame_take(s)) < 0) {
			/* Only unpinned loads (prefetches) are in the way: wait for one. */
			if (io_ring_pending(&s->ring) == 0) {
				rc = error_set(EAGAIN, "layer %d: no expert frame can be freed", layer);
				goto fail;
			}
			if ((rc = store_reap(s, true)) < 0)
				goto fail;
		}
		struct frame *fr = &bp->frames[f];
		frame_assign(s, f, layer, e);
		request_count(s, l, layer, e);
		buffer_pool_frame_pin(bp, f);
		evictor_access(&s->ev, f);
		s->req_frames[s->n_req++] = f;
		s->stats.misses++;
		fr->awaited = true;
		s->n_awaiting++;
		frame_read_start(s, f, IO_OP_PRIO_DEMAND);
	}
	if ((rc = io_ring_submit(&s->ring)))
		goto fail;
	return 0;
fail:
	request_abandon(s);
	return rc;
}

int expert_store_next(struct expert_store *s, int32_t *id, const void **record)
{
	for (;;) {
		if (s->req_rc)
			return s->req_rc;
		if (!s->req_open)
			return 0;
		/* Reap first: completions waiting in the CQ become deliverable and
		 * their slots go to queued reads, keeping the disk busy. */
		int rc = io_ring_pending(&s->ring) ? store_reap(s, false) : 0;
		if (rc >= 0 && s->ready_head == s->ready_count && s->n_awaiting > 0)
			rc = store_reap(s, true);
		if (rc < 0 && !s->req_rc)
			s->req_rc = rc;
		if (s->req_rc) {
			request_abandon(s);
			return s->req_rc;
		}
		if (s->ready_head < s->ready_count) {
			int32_t f = s->ready[s->ready_head++];
			*id = s->pool.frames[f].expert;
			*record = buffer_pool_frame_data(&s->pool, f);
			if (++s->n_delivered == s->n_req) {
				s->stats.step_s += io_ring_now_s() - s->t_request;
				s->req_open = false;
				s->ready_head = s->ready_count = 0;
				s->n_req = s->n_delivered = 0;
			}
			return 1;
		}
		if (s->n_awaiting == 0) {
			assert(s->n_delivered == s->n_req);
			s->req_open = false; /* an empty request */
			return 0;
		}
	}
}

void expert_store_release(struct expert_store *s, int layer, int32_t id)
{
	if (!s->has_experts || layer < 0 || layer >= s->n_layers || !s->layers[layer].path ||
	    id < 0 || id >= s->layers[layer].n_experts)
		return;
	int32_t f = buffer_pool_lookup(&s->pool, layer, id);
	if (f >= 0 && s->pool.frames[f].pins > 0)
		buffer_pool_frame_unpin(&s->pool, f);
}

int expert_store_prefetch(struct expert_store *s, int layer, const int32_t *ids, int n)
{
	int rc = layer_check(s, layer, ids, n);
	if (rc)
		return rc;
	const struct store_layer *l = &s->layers[layer];
	int issued = 0;
	for (int i = 0; i < n && s->n_prefetch_inflight < s->prefetch_depth; i++) {
		if (buffer_pool_lookup(&s->pool, layer, ids[i]) >= 0)
			continue;
		int32_t f = frame_take(s);
		if (f < 0)
			break;
		struct frame *fr = &s->pool.frames[f];
		frame_assign(s, f, layer, ids[i]);
		fr->prefetched = true;
		fr->prefetch_inflight = true;
		s->n_prefetch_inflight++;
		s->stats.prefetch_issued_bytes += l->record_bytes;
		frame_read_start(s, f, IO_OP_PRIO_PREFETCH);
		issued++;
	}
	if (issued && (rc = io_ring_submit(&s->ring)))
		return rc;
	return issued;
}

const struct expert_store_stats *expert_store_stats(const struct expert_store *s)
{
	return &s->stats;
}

int expert_store_capacity(const struct expert_store *s)
{
	return s->has_experts ? s->pool.n_frames : 0;
}

const uint32_t *expert_store_usage(const struct expert_store *s, int layer)
{
	if (layer < 0 || layer >= s->n_layers || !s->layers[layer].path)
		return NULL;
	return s->layers[layer].usage;
}
