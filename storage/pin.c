/*
 * pin — the permanently pinned set (see expert_store.h).
 *
 * A frame in the set has `perm` and holds one pin for it, so the evictor,
 * prefetch and requests never take it; release never drops that pin. It
 * also leaves the evictor's lists (it cannot be a victim, and a large set
 * would only lengthen the victim scan) while its heat keeps counting
 * (evictor_count), and re-enters them at its level when it leaves the set.
 * n_perm frames are in the set, cls[c].n_perm of them in class c;
 * expert_store_capacity of a layer is its class's frames less those.
 *
 * A change goes: check every entry; count the set it would leave in each
 * frame class and refuse it, changing nothing, when fewer than max_per_step
 * frames of some class would stay out of the set; drop; pin what is mapped
 * (pass 1, so no miss can evict it); give each miss a frame of its layer's
 * class and start its load (pass 2, one batch); wait for every load the
 * call started or joined. If one fails, the experts this call added leave
 * the set again. O(n_frames) per call for the drop scan,
 * fine between steps.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "base/error.h"
#include "storage/store_internal.h"

static int pins_check(const struct expert_store *s, const struct expert_pin *p, int n)
{
	if (n < 0 || (n > 0 && !p))
		return error_set(EINVAL, "%d experts to pin", n);
	for (int i = 0; i < n; i++) {
		int rc = store_layer_check(s, p[i].layer);
		if (rc || (rc = store_expert_check(s, p[i].layer, p[i].expert)))
			return rc;
	}
	return 0;
}

/* Frame f leaves the set, resident or still loading (its load then ends
 * as an ordinary unpinned one). */
static void perm_drop(struct expert_store *s, int32_t f)
{
	struct frame *fr = &s->pool.frames[f];
	assert(fr->perm && fr->pins > 0);
	if (fr->pin_wait) {
		fr->pin_wait = false;
		s->n_pin_loading--;
	}
	fr->perm = false;
	s->n_perm--;
	s->cls[fr->cls].n_perm--;
	evictor_insert(store_frame_ev(s, f), f);
	buffer_pool_frame_unpin(&s->pool, f);
}

/* Frame f (LOADING or RESIDENT) joins the set. */
static void perm_add(struct expert_store *s, int32_t f, int32_t *n_added)
{
	struct frame *fr = &s->pool.frames[f];
	assert(!fr->perm);
	fr->perm = true;
	s->n_perm++;
	s->cls[fr->cls].n_perm++;
	buffer_pool_frame_pin(&s->pool, f);
	evictor_remove(store_frame_ev(s, f), f);
	store_prefetch_used(s, f);
	if (fr->state == FRAME_LOADING) {
		fr->pin_wait = true;
		s->n_pin_loading++;
		load_promote(s, f);
	}
	s->pin_frames[(*n_added)++] = f;
}

/* Marks the frames that leave the set (pin_drop) and counts them per
 * class into n_out[]. */
static void drops_mark(struct expert_store *s, const struct expert_pin *drop, int n_drop, bool replace,
		       int32_t n_out[EXPERT_CLASSES_MAX])
{
	if (replace) {
		for (int32_t f = 0; f < s->pool.n_frames; f++) {
			struct frame *fr = &s->pool.frames[f];
			if (fr->perm && s->layers[fr->layer].mark[fr->expert] != s->serial) {
				fr->pin_drop = true;
				n_out[fr->cls]++;
			}
		}
		return;
	}
	for (int i = 0; i < n_drop; i++) {
		int32_t f = buffer_pool_lookup(&s->pool, drop[i].layer, drop[i].expert);
		if (f < 0)
			continue;
		struct frame *fr = &s->pool.frames[f];
		if (fr->perm && !fr->pin_drop && s->layers[fr->layer].mark[fr->expert] != s->serial) {
			fr->pin_drop = true;
			n_out[fr->cls]++;
		}
	}
}

static void drops_apply(struct expert_store *s, bool keep)
{
	for (int32_t f = 0; f < s->pool.n_frames; f++) {
		struct frame *fr = &s->pool.frames[f];
		if (!fr->pin_drop)
			continue;
		fr->pin_drop = false;
		if (!keep)
			perm_drop(s, f);
	}
}

static int pin_change(struct expert_store *s, const struct expert_pin *add, int n_add,
		      const struct expert_pin *drop, int n_drop, bool replace)
{
	int rc;
	if ((rc = pins_check(s, add, n_add)) || (rc = pins_check(s, drop, n_drop)))
		return rc;
	if (!s->n_classes)
		return 0; /* no layer has experts, so both lists are empty */

	/* The set after the change, counted per class before anything changes. */
	store_serial_next(s);
	int32_t n_new[EXPERT_CLASSES_MAX] = {0}, n_out[EXPERT_CLASSES_MAX] = {0};
	for (int i = 0; i < n_add; i++) {
		struct store_layer *l = &s->layers[add[i].layer];
		if (l->mark[add[i].expert] == s->serial)
			continue;
		l->mark[add[i].expert] = s->serial;
		int32_t f = buffer_pool_lookup(&s->pool, add[i].layer, add[i].expert);
		n_new[l->cls] += f < 0 || !s->pool.frames[f].perm;
	}
	drops_mark(s, drop, n_drop, replace, n_out);
	for (int c = 0; c < s->n_classes; c++) {
		int32_t n_after = s->cls[c].n_perm - n_out[c] + n_new[c];
		int32_t frames = s->pool.classes[c].n_frames, left = frames - n_after;
		if (left < s->max_per_step) {
			drops_apply(s, true); /* unmarks them */
			char what[48] = "";
			if (s->n_classes > 1)
				snprintf(what, sizeof what, " of %" PRIu64 " KiB", s->pool.classes[c].frame_bytes >> 10);
			return error_set(ENOMEM, "a pinned set of %d experts leaves %d of %d expert frames%s, "
					 "fewer than the %d one step pins (pin fewer experts, or raise the "
					 "expert cache)", n_after, left, frames, what, s->max_per_step);
		}
	}
	drops_apply(s, false);

	/* Pass 1: mapped experts join the set; pass 2: misses load. */
	int32_t n_added = 0;
	s->pin_rc = 0;
	for (int i = 0; i < n_add; i++) {
		int32_t f = buffer_pool_lookup(&s->pool, add[i].layer, add[i].expert);
		if (f >= 0 && !s->pool.frames[f].perm)
			perm_add(s, f, &n_added);
	}
	for (int i = 0; i < n_add && !rc && !s->pin_rc; i++) {
		if (buffer_pool_lookup(&s->pool, add[i].layer, add[i].expert) >= 0)
			continue;
		int32_t f;
		while ((f = store_frame_take(s, s->layers[add[i].layer].cls)) < 0 && !rc) {
			if (io_ring_pending(&s->ring) == 0)
				rc = error_set(ENOMEM, "no expert frame is free for the pinned set "
						       "(release delivered experts first)");
			else if ((rc = store_reap(s, true)) > 0)
				rc = 0;
		}
		if (rc)
			break;
		store_frame_assign(s, f, add[i].layer, add[i].expert);
		perm_add(s, f, &n_added);
		load_start(s, f, IO_OP_PRIO_DEMAND);
	}
	load_pump(s);
	int rc2 = io_ring_submit(&s->ring);
	rc = rc ? rc : rc2;
	while (s->n_pin_loading > 0 && !rc2)
		if ((rc2 = store_reap(s, true)) > 0)
			rc2 = 0;
	rc = rc ? rc : rc2 ? rc2 : s->pin_rc;
	if (rc) {
		/* Loads still in flight when reaping failed leave too. */
		for (int32_t i = 0; i < n_added; i++)
			if (s->pool.frames[s->pin_frames[i]].perm)
				perm_drop(s, s->pin_frames[i]);
	}
	store_stats_sync(s);
	return rc;
}

int expert_store_pin_set(struct expert_store *s, const struct expert_pin *pins, int n)
{
	return pin_change(s, pins, n, NULL, 0, true);
}

int expert_store_repin(struct expert_store *s, const struct expert_pin *add, int n_add,
		       const struct expert_pin *drop, int n_drop)
{
	return pin_change(s, add, n_add, drop, n_drop, false);
}
