/*
 * buffer_pool — arena, frame classes, frames, page table and frame state
 * machine (see buffer_pool.h for the diagram and invariants). Every
 * transition asserts the state it starts from: a wrong transition is a
 * programmer error.
 */
#include "storage/buffer_pool.h"

#include <errno.h>
#include <inttypes.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/error.h"

#define BUFFER_POOL_HUGE_BYTES (2u << 20)

_Static_assert(IO_RING_ALIGN == 4096, "frames are laid out for 4 KiB O_DIRECT blocks");
_Static_assert(BUFFER_POOL_HUGE_BYTES % IO_RING_ALIGN == 0, "huge page alignment implies block alignment");
_Static_assert(BUFFER_POOL_CLASSES_MAX <= 255, "a frame's class is a uint8_t");

/* Binds [p, p + bytes) to the NUMA node of the calling CPU: strictly when the
 * node has room for it, else as a preference, so a full node spills over
 * instead of failing. Returns the node, or -1 when NUMA is unavailable or
 * the kernel refused (not fatal: the arena then follows the default policy). */
static int arena_bind_local_node(void *p, uint64_t bytes)
{
	if (numa_available() < 0)
		return -1;
	int cpu = sched_getcpu();
	int node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
	if (node < 0)
		return -1;
	long long free_bytes = 0;
	long long size = numa_node_size64(node, &free_bytes);
	int mode = size > 0 && (uint64_t)free_bytes > bytes ? MPOL_BIND : MPOL_PREFERRED;
	struct bitmask *mask = numa_allocate_nodemask();
	if (!mask)
		return -1;
	numa_bitmask_setbit(mask, (unsigned)node);
	long rc = mbind(p, bytes, mode, mask->maskp, mask->size + 1, 0);
	numa_free_nodemask(mask);
	return rc == 0 ? node : -1;
}

int buffer_pool_init(struct buffer_pool *bp, int n_classes, const uint64_t *frame_bytes,
		     const int32_t *n_frames, int n_layers, const int32_t *n_experts)
{
	memset(bp, 0, sizeof *bp);
	bp->numa_node = -1;
	bp->n_layers = n_layers;
	bp->n_classes = n_classes;
	assert(n_classes >= 1 && n_classes <= BUFFER_POOL_CLASSES_MAX);
	uint64_t arena_bytes = 0;
	int32_t total = 0;
	for (int c = 0; c < n_classes; c++) {
		struct frame_class *fc = &bp->classes[c];
		assert(frame_bytes[c] > 0 && frame_bytes[c] % IO_RING_ALIGN == 0 && n_frames[c] > 0);
		assert(n_frames[c] <= INT32_MAX - total);
		fc->frame_bytes = frame_bytes[c];
		fc->n_frames = n_frames[c];
		fc->first = total;
		fc->free_head = -1;
		total += n_frames[c];
		arena_bytes += frame_bytes[c] * (uint64_t)n_frames[c];
	}
	bp->n_frames = total;
	bp->arena_bytes = arena_bytes;

	bp->frame_of = calloc((size_t)n_layers, sizeof *bp->frame_of);
	bp->frames = calloc((size_t)total, sizeof *bp->frames);
	if (!bp->frame_of || !bp->frames)
		goto nomem;
	for (int l = 0; l < n_layers; l++) {
		if (n_experts[l] <= 0)
			continue;
		bp->frame_of[l] = malloc((size_t)n_experts[l] * sizeof **bp->frame_of);
		if (!bp->frame_of[l])
			goto nomem;
		for (int32_t e = 0; e < n_experts[l]; e++)
			bp->frame_of[l][e] = -1;
	}

	bp->map_bytes = arena_bytes + BUFFER_POOL_HUGE_BYTES;
	bp->map = mmap(NULL, (size_t)bp->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (bp->map == MAP_FAILED) {
		bp->map = NULL;
		int rc = error_set(ENOMEM, "cannot map %" PRIu64 " MiB of expert frames",
				   arena_bytes >> 20);
		buffer_pool_free(bp);
		return rc;
	}
	uintptr_t base = ((uintptr_t)bp->map + BUFFER_POOL_HUGE_BYTES - 1) &
			 ~(uintptr_t)(BUFFER_POOL_HUGE_BYTES - 1);
	bp->arena = (uint8_t *)base;
	assert((uintptr_t)bp->arena % IO_RING_ALIGN == 0);
	(void)madvise(bp->arena, (size_t)arena_bytes, MADV_HUGEPAGE); /* a refusal costs TLB misses only */
	bp->numa_node = arena_bind_local_node(bp->arena, arena_bytes);

	uint64_t off = 0;
	for (int c = 0; c < n_classes; c++) {
		struct frame_class *fc = &bp->classes[c];
		fc->data = bp->arena + off;
		off += fc->frame_bytes * (uint64_t)fc->n_frames;
		for (int32_t f = fc->first + fc->n_frames - 1; f >= fc->first; f--) {
			struct frame *fr = &bp->frames[f];
			fr->layer = fr->expert = -1;
			fr->state = FRAME_FREE;
			fr->cls = (uint8_t)c;
			fr->next_free = fc->free_head;
			fc->free_head = f;
		}
	}
	return 0;
nomem:
	buffer_pool_free(bp);
	return error_set(ENOMEM, "out of memory");
}

void buffer_pool_free(struct buffer_pool *bp)
{
	if (bp->map)
		munmap(bp->map, (size_t)bp->map_bytes);
	for (int l = 0; bp->frame_of && l < bp->n_layers; l++)
		free(bp->frame_of[l]);
	free(bp->frame_of);
	free(bp->frames);
	memset(bp, 0, sizeof *bp);
}

int32_t buffer_pool_free_pop(struct buffer_pool *bp, int cls)
{
	struct frame_class *fc = &bp->classes[cls];
	int32_t f = fc->free_head;
	if (f < 0)
		return -1;
	struct frame *fr = &bp->frames[f];
	assert(fr->state == FRAME_FREE && fr->cls == cls);
	fc->free_head = fr->next_free;
	fr->next_free = -1;
	return f;
}

void buffer_pool_frame_load(struct buffer_pool *bp, int32_t f, int layer, int32_t expert)
{
	struct frame *fr = &bp->frames[f];
	assert(fr->state == FRAME_FREE && fr->pins == 0 && fr->next_free == -1);
	assert(bp->frame_of[layer] && bp->frame_of[layer][expert] < 0);
	fr->state = FRAME_LOADING;
	fr->layer = layer;
	fr->expert = expert;
	bp->frame_of[layer][expert] = f;
}

void buffer_pool_frame_loaded(struct buffer_pool *bp, int32_t f)
{
	struct frame *fr = &bp->frames[f];
	struct frame_class *fc = &bp->classes[fr->cls];
	assert(fr->state == FRAME_LOADING);
	fr->state = FRAME_RESIDENT;
	if (fr->pins == 0)
		fc->n_evictable++;
}

static void buffer_pool_frame_free_push(struct buffer_pool *bp, int32_t f)
{
	struct frame *fr = &bp->frames[f];
	struct frame_class *fc = &bp->classes[fr->cls];
	fr->state = FRAME_FREE;
	fr->layer = fr->expert = -1;
	fr->next_free = fc->free_head;
	fc->free_head = f;
}

void buffer_pool_frame_load_failed(struct buffer_pool *bp, int32_t f)
{
	struct frame *fr = &bp->frames[f];
	assert(fr->state == FRAME_LOADING && fr->pins == 0);
	bp->frame_of[fr->layer][fr->expert] = -1;
	buffer_pool_frame_free_push(bp, f);
}

void buffer_pool_frame_evict(struct buffer_pool *bp, int32_t f)
{
	struct frame *fr = &bp->frames[f];
	assert(fr->state == FRAME_RESIDENT && fr->pins == 0);
	bp->frame_of[fr->layer][fr->expert] = -1;
	fr->state = FRAME_EVICTING;
	bp->classes[fr->cls].n_evictable--;
}

void buffer_pool_frame_evicted(struct buffer_pool *bp, int32_t f)
{
	assert(bp->frames[f].state == FRAME_EVICTING);
	buffer_pool_frame_free_push(bp, f);
}

void buffer_pool_frame_pin(struct buffer_pool *bp, int32_t f)
{
	struct frame *fr = &bp->frames[f];
	struct frame_class *fc = &bp->classes[fr->cls];
	assert(fr->state == FRAME_LOADING || fr->state == FRAME_RESIDENT);
	if (fr->pins++ == 0) {
		fc->n_pinned++;
		if (fr->state == FRAME_RESIDENT)
			fc->n_evictable--;
	}
}

void buffer_pool_frame_unpin(struct buffer_pool *bp, int32_t f)
{
	struct frame *fr = &bp->frames[f];
	struct frame_class *fc = &bp->classes[fr->cls];
	assert(fr->pins > 0);
	if (--fr->pins == 0) {
		fc->n_pinned--;
		if (fr->state == FRAME_RESIDENT)
			fc->n_evictable++;
	}
}
