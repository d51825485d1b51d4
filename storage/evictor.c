/*
 * evictor — per-level LRU lists over frames, levels from decayed request
 * counts (see evictor.h for the policies).
 *
 * Aging: every age_period requested experts, each expert's heat is halved
 * and every listed frame is moved to its new level, keeping the recency
 * order among frames that land on the same level. The period is 8 times the
 * larger of the class's frame count and the number of its layers' experts
 * (each class's evictor ages on its own requests): long enough for a
 * popular expert's heat to rise well above a one-off's, short enough to
 * follow routing that shifts over a few hundred tokens. A halving is
 * O(experts + frames), once per period, so O(1) per request amortised.
 */
#include "storage/evictor.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

_Static_assert(EVICTOR_LEVELS <= 128, "nonempty[] holds 128 levels");
_Static_assert(EVICTOR_LEVELS <= EVICTOR_UNLISTED, "no level is taken for the unlisted mark");

/* Exact below 32, then 8 steps per octave: level(65535) == 119. */
static uint8_t heat_level(uint16_t heat)
{
	if (heat < 32)
		return (uint8_t)heat;
	int octave = 31 - __builtin_clz(heat); /* 5..15 */
	return (uint8_t)(32 + 8 * (octave - 5) + ((heat >> (octave - 3)) & 7));
}

int evictor_init(struct evictor *ev, enum evict_policy policy, const struct buffer_pool *bp, int cls,
		 const int32_t *n_experts)
{
	const struct frame_class *fc = &bp->classes[cls];
	int32_t n_frames = fc->n_frames;
	int n_layers = bp->n_layers;
	memset(ev, 0, sizeof *ev);
	ev->policy = policy;
	ev->bp = bp;
	ev->cls = cls;
	ev->first = fc->first;
	ev->n_frames = n_frames;
	ev->n_layers = n_layers;
	for (int i = 0; i < EVICTOR_LEVELS; i++)
		ev->oldest[i] = ev->newest[i] = -1;
	ev->prev = malloc((size_t)n_frames * sizeof *ev->prev);
	ev->next = malloc((size_t)n_frames * sizeof *ev->next);
	ev->level = malloc((size_t)n_frames * sizeof *ev->level);
	ev->scratch = malloc((size_t)n_frames * sizeof *ev->scratch);
	ev->n_experts = calloc((size_t)(n_layers ? n_layers : 1), sizeof *ev->n_experts);
	ev->heat = calloc((size_t)(n_layers ? n_layers : 1), sizeof *ev->heat);
	if (!ev->prev || !ev->next || !ev->level || !ev->scratch || !ev->n_experts || !ev->heat)
		goto nomem;
	for (int32_t i = 0; i < n_frames; i++) {
		ev->prev[i] = ev->next[i] = -1;
		ev->level[i] = EVICTOR_UNLISTED;
	}
	uint64_t keys = 0;
	for (int l = 0; l < n_layers; l++) {
		ev->n_experts[l] = n_experts[l] > 0 ? n_experts[l] : 0;
		if (!ev->n_experts[l])
			continue;
		ev->heat[l] = calloc((size_t)ev->n_experts[l], sizeof **ev->heat);
		if (!ev->heat[l])
			goto nomem;
		keys += (uint64_t)ev->n_experts[l];
	}
	ev->age_period = 8 * ((uint64_t)n_frames > keys ? (uint64_t)n_frames : keys);
	return 0;
nomem:
	evictor_free(ev);
	return error_set(ENOMEM, "out of memory");
}

void evictor_free(struct evictor *ev)
{
	for (int l = 0; ev->heat && l < ev->n_layers; l++)
		free(ev->heat[l]);
	free(ev->heat);
	free(ev->n_experts);
	free(ev->prev);
	free(ev->next);
	free(ev->level);
	free(ev->scratch);
	memset(ev, 0, sizeof *ev);
}

/* Index of frame f in the per-frame arrays. */
static int32_t slot(const struct evictor *ev, int32_t f)
{
	assert(f >= ev->first && f - ev->first < ev->n_frames);
	return f - ev->first;
}

static void list_unlink(struct evictor *ev, int32_t f)
{
	int32_t i = slot(ev, f);
	int lv = ev->level[i];
	int32_t p = ev->prev[i], n = ev->next[i];
	if (p >= 0)
		ev->next[slot(ev, p)] = n;
	else
		ev->oldest[lv] = n;
	if (n >= 0)
		ev->prev[slot(ev, n)] = p;
	else
		ev->newest[lv] = p;
	ev->prev[i] = ev->next[i] = -1;
	ev->level[i] = EVICTOR_UNLISTED;
	if (ev->oldest[lv] < 0)
		ev->nonempty[lv >> 6] &= ~(1ull << (lv & 63));
}

/* Appends f as the most recent frame of level lv. */
static void list_append(struct evictor *ev, int32_t f, int lv)
{
	int32_t i = slot(ev, f);
	ev->level[i] = (uint8_t)lv;
	ev->next[i] = -1;
	ev->prev[i] = ev->newest[lv];
	if (ev->newest[lv] >= 0)
		ev->next[slot(ev, ev->newest[lv])] = f;
	else
		ev->oldest[lv] = f;
	ev->newest[lv] = f;
	ev->nonempty[lv >> 6] |= 1ull << (lv & 63);
}

/* Inserts f as the least recent frame of level lv. */
static void list_prepend(struct evictor *ev, int32_t f, int lv)
{
	int32_t i = slot(ev, f);
	ev->level[i] = (uint8_t)lv;
	ev->prev[i] = -1;
	ev->next[i] = ev->oldest[lv];
	if (ev->oldest[lv] >= 0)
		ev->prev[slot(ev, ev->oldest[lv])] = f;
	else
		ev->newest[lv] = f;
	ev->oldest[lv] = f;
	ev->nonempty[lv >> 6] |= 1ull << (lv & 63);
}

static int frame_level(const struct evictor *ev, int32_t f)
{
	if (ev->policy == EVICT_POLICY_LRU)
		return 0;
	const struct frame *fr = &ev->bp->frames[f];
	return heat_level(ev->heat[fr->layer][fr->expert]);
}

/* Halves every heat and re-levels every listed frame, oldest first within
 * each old level, so recency order survives among frames that merge. */
static void heat_age(struct evictor *ev)
{
	for (int l = 0; l < ev->n_layers; l++)
		for (int32_t e = 0; e < ev->n_experts[l]; e++)
			ev->heat[l][e] >>= 1;
	int32_t n = 0;
	for (int lv = 0; lv < EVICTOR_LEVELS; lv++) {
		for (int32_t f = ev->oldest[lv]; f >= 0; f = ev->next[slot(ev, f)])
			ev->scratch[n++] = f;
		ev->oldest[lv] = ev->newest[lv] = -1;
	}
	ev->nonempty[0] = ev->nonempty[1] = 0;
	for (int32_t i = 0; i < n; i++)
		list_append(ev, ev->scratch[i], frame_level(ev, ev->scratch[i]));
	ev->accesses = 0;
}

void evictor_insert(struct evictor *ev, int32_t f)
{
	assert(ev->level[slot(ev, f)] == EVICTOR_UNLISTED);
	assert(ev->heat[ev->bp->frames[f].layer]);
	list_append(ev, f, frame_level(ev, f));
}

static void heat_bump(struct evictor *ev, int layer, int32_t expert)
{
	assert(ev->heat[layer]);
	uint16_t *h = &ev->heat[layer][expert];
	if (*h < UINT16_MAX)
		(*h)++;
}

void evictor_access(struct evictor *ev, int32_t f)
{
	const struct frame *fr = &ev->bp->frames[f];
	assert(ev->level[slot(ev, f)] != EVICTOR_UNLISTED);
	heat_bump(ev, fr->layer, fr->expert);
	list_unlink(ev, f);
	list_append(ev, f, frame_level(ev, f));
	if (ev->policy == EVICT_POLICY_FREQ && ++ev->accesses >= ev->age_period)
		heat_age(ev);
}

void evictor_count(struct evictor *ev, int layer, int32_t expert)
{
	heat_bump(ev, layer, expert);
	if (ev->policy == EVICT_POLICY_FREQ && ++ev->accesses >= ev->age_period)
		heat_age(ev);
}

void evictor_remove(struct evictor *ev, int32_t f)
{
	if (ev->level[slot(ev, f)] == EVICTOR_UNLISTED)
		return; /* a frame of the pinned set */
	list_unlink(ev, f);
}

void evictor_cool_layer(struct evictor *ev, int layer)
{
	if (layer < 0 || layer >= ev->n_layers)
		return;
	for (int32_t e = 0; e < ev->n_experts[layer]; e++)
		ev->heat[layer][e] = 0;
	for (int32_t i = 0; i < ev->n_frames; i++)
		if (ev->level[i] != EVICTOR_UNLISTED && ev->bp->frames[ev->first + i].layer == layer) {
			list_unlink(ev, ev->first + i);
			list_prepend(ev, ev->first + i, 0);
		}
}

int32_t evictor_victim(struct evictor *ev)
{
	const struct buffer_pool *bp = ev->bp;
	if (bp->classes[ev->cls].n_evictable == 0)
		return -1;
	for (int word = 0; word < 2; word++) {
		uint64_t bits = ev->nonempty[word];
		while (bits) {
			int lv = word * 64 + __builtin_ctzll(bits);
			bits &= bits - 1;
			for (int32_t f = ev->oldest[lv]; f >= 0; f = ev->next[slot(ev, f)])
				if (buffer_pool_frame_evictable(bp, f))
					return f;
		}
	}
	return -1;
}
