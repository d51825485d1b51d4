/*
 * expert_store — the public API over the buffer manager: requests,
 * delivery, prefetch and statistics (see expert_store.h; opening is in
 * store_open.c, the other files behind it are listed in store_internal.h).
 *
 * Modules underneath, each with its own invariants:
 *   buffer_pool  arena, frame classes, frames, page table,
 *                FREE/LOADING/RESIDENT/EVICTING
 *   evictor      which unpinned resident frame of a class gives way (FREQ or LRU)
 *   io_ring      bounded read loop over io_uring, or the pread pool
 *   load         a frame's reads, striped over the copies, with failover
 *
 * A request goes in two passes so that a miss can never evict an expert the
 * same request also asked for: pass 1 pins every id already mapped (hits are
 * ready at once, reads in flight are joined), pass 2 gives each miss a frame
 * and starts its load; one io_ring_submit sends the batch. The request
 * checks up front that the misses fit in the frames of the layer's class
 * left unpinned, so it either succeeds or changes nothing. Every frame a
 * request, a prefetch or a pin takes is one of the layer's class.
 *
 * Every load ends on the caller's thread in store_frame_loaded or
 * store_frame_failed. A frame the current request waits for is `awaited`;
 * abandoning a request (failure, or a new request before the last delivery)
 * unpins what was not delivered. A delivery hands its pin to the caller:
 * the frame counts it in `held`, and a release unpins only while held > 0,
 * so a stray release cannot take a pin that a request, or the pinned set,
 * still relies on.
 */
#include "storage/expert_store.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "storage/store_internal.h"
#include "base/clock.h"

void store_stats_sync(struct expert_store *s)
{
	struct expert_store_stats *st = &s->stats;
	st->disk_wait_s = s->ring.wait_s;
	st->disk_busy_s = s->ring.busy_s;
	st->disk_gbps = s->ring.busy_s > 0 ? (double)st->bytes_read / s->ring.busy_s / 1e9 : 0;
	st->reads_queued = s->ring.n_queued + s->ring.n_sq + s->n_pumping;
	st->reads_in_kernel = s->ring.n_kernel;
	st->n_pinned = s->n_perm;
	for (int c = 0; c < s->n_classes; c++)
		st->classes[c].n_pinned = s->cls[c].n_perm;
	for (int c = 0; c < COPIES_MAX; c++) {
		st->copy_bytes_read[c] = s->copies.bytes_read[c];
		st->copy_blocks_read[c] = s->copies.blocks_read[c];
		st->copy_failures[c] = s->copies.failures[c];
		st->copy_in_rotation[c] = c < s->copies.n_copies && copies_in_rotation(&s->copies, c);
		st->copy_readmissions[c] = s->copies.readmissions[c];
	}
}

/* ---- frames ---------------------------------------------------------- */

static void ready_push(struct expert_store *s, int32_t f)
{
	assert(s->ready_count < s->max_experts);
	s->ready[s->ready_count++] = f;
}

static void prefetch_settled(struct expert_store *s, struct frame *fr)
{
	if (fr->prefetch_inflight) {
		fr->prefetch_inflight = false;
		s->n_prefetch_inflight--;
	}
}

void store_frame_loaded(struct expert_store *s, int32_t f)
{
	struct frame *fr = &s->pool.frames[f];
	prefetch_settled(s, fr);
	buffer_pool_frame_loaded(&s->pool, f);
	if (fr->awaited) {
		fr->awaited = false;
		s->n_awaiting--;
		ready_push(s, f);
	}
	if (fr->pin_wait) {
		fr->pin_wait = false;
		s->n_pin_loading--;
	}
}

void store_frame_failed(struct expert_store *s, int32_t f, int rc)
{
	struct frame *fr = &s->pool.frames[f];
	s->stats.read_failures++;
	prefetch_settled(s, fr);
	store_prefetch_wasted(s, f);
	if (fr->awaited) {
		if (!s->req_rc)
			s->req_rc = rc;
		fr->awaited = false;
		s->n_awaiting--;
		buffer_pool_frame_unpin(&s->pool, f);
	}
	if (fr->pin_wait) {
		if (!s->pin_rc)
			s->pin_rc = rc;
		fr->pin_wait = false;
		s->n_pin_loading--;
	}
	if (fr->perm) {
		fr->perm = false;
		s->n_perm--;
		s->cls[fr->cls].n_perm--;
		buffer_pool_frame_unpin(&s->pool, f);
	}
	assert(fr->pins == 0);
	evictor_remove(store_frame_ev(s, f), f);
	buffer_pool_frame_load_failed(&s->pool, f);
}

int store_reap(struct expert_store *s, bool wait)
{
	int rc = io_ring_reap(&s->ring, wait);
	store_stats_sync(s);
	return rc;
}

int32_t store_frame_take(struct expert_store *s, int cls)
{
	int32_t f = buffer_pool_free_pop(&s->pool, cls);
	if (f >= 0)
		return f;
	struct evictor *ev = &s->cls[cls].ev;
	f = evictor_victim(ev);
	if (f < 0)
		return -1;
	struct frame *fr = &s->pool.frames[f];
	struct expert_class_stats *cst = &s->stats.classes[cls];
	assert(fr->cls == cls);
	store_prefetch_wasted(s, f);
	cst->evictions++;
	evictor_remove(ev, f);
	buffer_pool_frame_evict(&s->pool, f);
	buffer_pool_frame_evicted(&s->pool, f);
	return buffer_pool_free_pop(&s->pool, cls);
}

void store_frame_assign(struct expert_store *s, int32_t f, int layer, int32_t expert)
{
	struct frame *fr = &s->pool.frames[f];
	assert(fr->cls == s->layers[layer].cls && fr->held == 0);
	buffer_pool_frame_load(&s->pool, f, layer, expert);
	evictor_insert(store_frame_ev(s, f), f);
	fr->attempt = 0;
	fr->prefetched = false;
	fr->prefetch_inflight = false;
	fr->awaited = false;
	fr->perm = false;
	fr->pin_wait = false;
	load_begin(s, f);
}

/* ---- requests -------------------------------------------------------- */

/* No request is open: forgets the current one's frames. */
static void request_reset(struct expert_store *s)
{
	s->ready_head = s->ready_count = 0;
	s->n_req = s->n_delivered = 0;
	s->req_open = false;
}

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
	request_reset(s);
}

int store_layer_check(const struct expert_store *s, int layer)
{
	if (!store_layer_has_experts(s, layer))
		return error_set(EINVAL, "layer %d has no routed experts", layer);
	return 0;
}

int store_expert_check(const struct expert_store *s, int layer, int32_t expert)
{
	if (expert < 0 || expert >= s->layers[layer].n_experts)
		return error_set(EINVAL, "layer %d: expert %d out of range (0..%d)", layer, expert,
				 s->layers[layer].n_experts - 1);
	if (!store_layer_holds(&s->layers[layer], expert))
		return error_set(ENOENT, "layer %d: expert %d is not in %s: %s", layer, expert,
				 s->layers[layer].copy[0].path, s->absent_why);
	return 0;
}

static int layer_check(const struct expert_store *s, int layer, const int32_t *ids, int n)
{
	int rc = store_layer_check(s, layer);
	if (rc)
		return rc;
	if (n < 0 || (n > 0 && !ids))
		return error_set(EINVAL, "layer %d: %d expert ids", layer, n);
	for (int i = 0; i < n && !rc; i++)
		rc = store_expert_check(s, layer, ids[i]);
	return rc;
}

void store_serial_next(struct expert_store *s)
{
	if (++s->serial == 0) {
		for (int i = 0; i < s->n_layers; i++)
			if (s->layers[i].mark)
				memset(s->layers[i].mark, 0,
				       (size_t)s->layers[i].n_experts * sizeof *s->layers[i].mark);
		s->serial = 1;
	}
}

/* The distinct ids of ids[0..n) into s->uniq; returns how many. */
static int32_t request_dedup(struct expert_store *s, struct store_layer *l, const int32_t *ids, int n)
{
	store_serial_next(s);
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
	s->stats.classes[l->cls].requests++;
	if (layer < EXPERT_STATS_LAYERS_MAX)
		s->stats.layer_requests[layer]++;
	if (l->usage[e] < UINT32_MAX)
		l->usage[e]++;
}

static void ram_hit_count(struct store_layer *l, int32_t e)
{
	if (l->ram_hits[e] < UINT32_MAX)
		l->ram_hits[e]++;
}

/* Pass 1 for an id whose frame f is mapped: pin it; ready, or joined. */
static void request_mapped(struct expert_store *s, struct store_layer *l, int layer, int32_t e, int32_t f)
{
	struct frame *fr = &s->pool.frames[f];
	struct evictor *ev = store_frame_ev(s, f);
	struct expert_class_stats *cst = store_frame_stats(s, f);
	request_count(s, l, layer, e);
	buffer_pool_frame_pin(&s->pool, f);
	s->req_frames[s->n_req++] = f;
	if (fr->perm && fr->state == FRAME_RESIDENT) {
		evictor_count(ev, layer, e);
		s->stats.pinned_hits++;
		cst->pinned_hits++;
		ram_hit_count(l, e);
		if (layer < EXPERT_STATS_LAYERS_MAX)
			s->stats.layer_pinned_hits[layer]++;
		ready_push(s, f);
		return;
	}
	if (fr->perm)
		evictor_count(ev, layer, e);
	else
		evictor_access(ev, f);
	bool prefetched = store_prefetch_used(s, f);
	if (fr->state == FRAME_RESIDENT) {
		s->stats.hits++;
		ram_hit_count(l, e);
		s->stats.prefetch_hits += prefetched;
		cst->hits++;
		if (layer < EXPERT_STATS_LAYERS_MAX)
			s->stats.layer_hits[layer]++;
		ready_push(s, f);
	} else {
		s->stats.joins++;
		cst->joins++;
		fr->awaited = true;
		s->n_awaiting++;
		load_promote(s, f);
	}
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
	const struct frame_class *fc = &bp->classes[l->cls];
	int32_t n_uniq = request_dedup(s, l, ids, n);

	/* Capacity: every miss needs a frame of the layer's class that no one
	 * has pinned. */
	int32_t n_miss = 0, n_newly_pinned = 0;
	for (int32_t i = 0; i < n_uniq; i++) {
		int32_t f = buffer_pool_lookup(bp, layer, s->uniq[i]);
		if (f < 0)
			n_miss++;
		else if (bp->frames[f].pins == 0)
			n_newly_pinned++;
	}
	int32_t unpinned = fc->n_frames - fc->n_pinned - n_newly_pinned;
	if (n_miss > unpinned) {
		char what[48] = "";
		if (s->n_classes > 1)
			snprintf(what, sizeof what, " of %" PRIu64 " KiB", fc->frame_bytes >> 10);
		return error_set(ENOMEM, "layer %d: %d experts to read but only %d of %d expert frames%s are "
				 "unpinned (release delivered experts, or raise the expert cache)",
				 layer, n_miss, unpinned, fc->n_frames, what);
	}

	s->req_open = true;
	s->t_request = clock_now_s();
	copies_readmit(&s->copies, s->t_request);

	/* Pass 1: hits are ready now, reads in flight are joined. */
	for (int32_t i = 0; i < n_uniq; i++) {
		int32_t f = buffer_pool_lookup(bp, layer, s->uniq[i]);
		if (f >= 0)
			request_mapped(s, l, layer, s->uniq[i], f);
	}

	/* Pass 2: each miss takes a frame and starts its load. Waiting for a
	 * frame reaps completions; once one of the loads pass 1 joined has
	 * failed (its frame freed), the request has failed and its ids are no
	 * longer told apart by the page table: place nothing more. */
	for (int32_t i = 0; i < n_uniq && !s->req_rc; i++) {
		int32_t e = s->uniq[i];
		if (buffer_pool_lookup(bp, layer, e) >= 0)
			continue;
		int32_t f;
		while ((f = store_frame_take(s, l->cls)) < 0) {
			/* Only unpinned loads (prefetches) are in the way: wait for one. */
			if (io_ring_pending(&s->ring) == 0) {
				rc = error_set(EAGAIN, "layer %d: no expert frame can be freed", layer);
				goto fail;
			}
			if ((rc = store_reap(s, true)) < 0)
				goto fail;
		}
		struct frame *fr = &bp->frames[f];
		store_frame_assign(s, f, layer, e);
		request_count(s, l, layer, e);
		buffer_pool_frame_pin(bp, f);
		evictor_access(store_frame_ev(s, f), f);
		s->req_frames[s->n_req++] = f;
		s->stats.misses++;
		s->stats.classes[l->cls].misses++;
		fr->awaited = true;
		s->n_awaiting++;
		load_start(s, f, IO_OP_PRIO_DEMAND);
	}
	load_pump(s);
	if ((rc = io_ring_submit(&s->ring)))
		goto fail;
	s->stats.steps++;
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
			s->pool.frames[f].held++;
			*id = s->pool.frames[f].expert;
			*record = buffer_pool_frame_data(&s->pool, f);
			if (++s->n_delivered == s->n_req) {
				s->stats.step_s += clock_now_s() - s->t_request;
				request_reset(s);
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
	if (!store_layer_has_experts(s, layer) || id < 0 || id >= s->layers[layer].n_experts)
		return;
	int32_t f = buffer_pool_lookup(&s->pool, layer, id);
	if (f < 0 || s->pool.frames[f].held == 0)
		return;
	s->pool.frames[f].held--;
	buffer_pool_frame_unpin(&s->pool, f);
}

int expert_store_prefetch(struct expert_store *s, int layer, const int32_t *ids, int n)
{
	int rc = store_layer_check(s, layer);
	if (rc)
		return rc;
	const struct store_layer *l = &s->layers[layer];
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= l->n_experts)
			return error_set(EINVAL, "layer %d: expert %d out of range (0..%d)", layer, ids[i],
					 l->n_experts - 1);
	int issued = 0;
	for (int i = 0; i < n && s->n_prefetch_inflight < s->prefetch_depth; i++) {
		/* A guess at an expert this file lacks (a shard) is no read. */
		if (!store_layer_holds(l, ids[i]) || buffer_pool_lookup(&s->pool, layer, ids[i]) >= 0)
			continue;
		int32_t f = store_frame_take(s, l->cls);
		if (f < 0)
			break;
		struct frame *fr = &s->pool.frames[f];
		store_frame_assign(s, f, layer, ids[i]);
		fr->prefetched = true;
		fr->prefetch_inflight = true;
		s->n_prefetch_inflight++;
		s->stats.prefetch_issued++;
		s->stats.classes[l->cls].prefetch_issued++;
		s->stats.prefetch_issued_bytes += l->record_bytes;
		load_start(s, f, IO_OP_PRIO_PREFETCH);
		issued++;
	}
	if (issued) {
		load_pump(s);
		if ((rc = io_ring_submit(&s->ring)))
			return rc;
	}
	return issued;
}

int expert_store_cool_layer(struct expert_store *s, int layer)
{
	if (layer < 0 || layer >= s->n_layers)
		return error_set(EINVAL, "layer %d is out of range", layer);
	int c = expert_store_layer_class(s, layer);
	if (c >= 0)
		evictor_cool_layer(&s->cls[c].ev, layer);
	return 0;
}

const struct expert_store_stats *expert_store_stats(const struct expert_store *s)
{
	return &s->stats;
}

int expert_store_capacity(const struct expert_store *s, int layer)
{
	int c = expert_store_layer_class(s, layer);
	return c < 0 ? 0 : s->pool.classes[c].n_frames - s->cls[c].n_perm;
}

int expert_store_layer_class(const struct expert_store *s, int layer)
{
	return store_layer_has_experts(s, layer) ? s->layers[layer].cls : -1;
}

const uint32_t *expert_store_usage(const struct expert_store *s, int layer)
{
	return store_layer_has_experts(s, layer) ? s->layers[layer].usage : NULL;
}

const uint32_t *expert_store_ram_hits(const struct expert_store *s, int layer)
{
	return store_layer_has_experts(s, layer) ? s->layers[layer].ram_hits : NULL;
}

int32_t expert_store_n_experts(const struct expert_store *s, int layer)
{
	return store_layer_has_experts(s, layer) ? s->layers[layer].n_experts : 0;
}

int expert_store_where(const struct expert_store *s, int layer, uint8_t *out)
{
	if (!store_layer_has_experts(s, layer))
		return 0;
	const struct store_layer *l = &s->layers[layer];
	for (int32_t e = 0; e < l->n_experts; e++) {
		int32_t f = buffer_pool_lookup(&s->pool, layer, e);
		const struct frame *fr = f >= 0 ? &s->pool.frames[f] : NULL;
		if (!fr || fr->state == FRAME_EVICTING)
			out[e] = EXPERT_ON_DISK;
		else if (fr->state == FRAME_LOADING)
			out[e] = EXPERT_LOADING;
		else
			out[e] = fr->perm ? EXPERT_PINNED : EXPERT_CACHED;
	}
	return l->n_experts;
}
