/*
 * expert_store — synchronous implementation: every miss is read with pread
 * (O_DIRECT when the file system allows it) before the request returns, and
 * delivery order is request order. Eviction is CLOCK over unpinned frames.
 *
 * Frame states and the function that moves each:
 *
 *     FREE --request/load--> RESIDENT --request--> RESIDENT (pinned)
 *       ^                       |                      |
 *       +----- evict (clock) ---+<------ release ------+
 *
 * A frame is evictable only when its pin count is 0. One release per
 * delivered expert.
 */
#include "storage/expert_store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "storage/error.h"

#define STORE_ALIGN 4096

struct frame {
	int32_t layer;           /* -1 when free */
	int32_t expert;
	int32_t pins;
	uint8_t referenced;      /* CLOCK bit */
};

struct store_layer {
	int fd;
	char *path;
	uint64_t record_bytes;
	int32_t n_experts;
	const uint64_t *checksums;
	int32_t *frame_of;       /* [n_experts], -1 if not resident */
};

struct expert_store {
	struct store_layer *layers;
	int n_layers;
	uint8_t *arena;
	uint64_t frame_bytes;
	int32_t n_frames;
	struct frame *frames;
	int32_t clock_hand;
	int32_t *ready;          /* frames of the current request, delivery order */
	int32_t n_ready, next_ready, ready_cap;
	struct expert_store_stats stats;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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

int expert_store_open(struct expert_store **out, const struct expert_layer_desc *layers,
		      int n_layers, int max_per_step, const struct expert_store_options *opt)
{
	struct expert_store *s = calloc(1, sizeof *s);
	int rc = 0;
	*out = NULL;
	if (!s)
		return error_set(ENOMEM, "out of memory");
	s->n_layers = n_layers;
	s->layers = calloc((size_t)n_layers, sizeof *s->layers);
	if (!s->layers) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < n_layers; i++)
		s->layers[i].fd = -1;
	for (int i = 0; i < n_layers; i++) {
		const struct expert_layer_desc *d = &layers[i];
		struct store_layer *l = &s->layers[i];
		if (!d->path)
			continue;
		if (d->record_bytes == 0 || d->record_bytes % STORE_ALIGN) {
			rc = error_set(EINVAL, "%s: record size %" PRIu64 " is not a multiple of %d",
				       d->path, d->record_bytes, STORE_ALIGN);
			goto fail;
		}
		l->path = strdup(d->path);
		l->record_bytes = d->record_bytes;
		l->n_experts = d->n_experts;
		l->checksums = d->checksums;
		l->frame_of = malloc((size_t)d->n_experts * sizeof *l->frame_of);
		if (!l->path || !l->frame_of) {
			rc = error_set(ENOMEM, "out of memory");
			goto fail;
		}
		for (int e = 0; e < d->n_experts; e++)
			l->frame_of[e] = -1;
		l->fd = -1;
		if (!opt->buffered)
			l->fd = open(d->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
		if (l->fd < 0)
			l->fd = open(d->path, O_RDONLY | O_CLOEXEC);
		if (l->fd < 0) {
			rc = error_set(errno, "%s: cannot open: %s", d->path, strerror(errno));
			goto fail;
		}
		if (d->record_bytes > s->frame_bytes)
			s->frame_bytes = d->record_bytes;
		if (d->n_experts > s->ready_cap)
			s->ready_cap = d->n_experts;
	}
	if (s->frame_bytes == 0) {
		*out = s; /* a model without routed experts */
		return 0;
	}
	uint64_t min = s->frame_bytes * (uint64_t)max_per_step;
	if (opt->cache_bytes < min) {
		rc = error_set(ENOMEM, "expert cache of %" PRIu64 " MiB is below the minimum of %" PRIu64
			       " MiB (%d experts of %" PRIu64 " KiB in one step)",
			       opt->cache_bytes >> 20, (min + (1 << 20) - 1) >> 20, max_per_step,
			       s->frame_bytes >> 10);
		goto fail;
	}
	uint64_t n_frames = opt->cache_bytes / s->frame_bytes;
	if (n_frames > INT32_MAX / 2)
		n_frames = INT32_MAX / 2;
	s->n_frames = (int32_t)n_frames;
	s->arena = aligned_alloc(STORE_ALIGN, (size_t)(s->frame_bytes * n_frames));
	s->frames = calloc((size_t)n_frames, sizeof *s->frames);
	s->ready = malloc((size_t)s->ready_cap * sizeof *s->ready);
	if (!s->arena || !s->frames || !s->ready) {
		rc = error_set(ENOMEM, "cannot allocate %" PRIu64 " MiB of expert frames",
			       (s->frame_bytes * n_frames) >> 20);
		goto fail;
	}
	for (int32_t f = 0; f < s->n_frames; f++)
		s->frames[f].layer = -1;
	*out = s;
	return 0;
fail:
	expert_store_close(s);
	return rc;
}

void expert_store_close(struct expert_store *s)
{
	if (!s)
		return;
	for (int i = 0; s->layers && i < s->n_layers; i++) {
		if (s->layers[i].fd >= 0)
			close(s->layers[i].fd);
		free(s->layers[i].path);
		free(s->layers[i].frame_of);
	}
	free(s->layers);
	free(s->arena);
	free(s->frames);
	free(s->ready);
	free(s);
}

/* CLOCK: the first unpinned frame whose reference bit is clear. */
static int32_t frame_evict(struct expert_store *s)
{
	for (int32_t scanned = 0; scanned < 2 * s->n_frames + 1; scanned++) {
		int32_t f = s->clock_hand;
		s->clock_hand = (s->clock_hand + 1) % s->n_frames;
		struct frame *fr = &s->frames[f];
		if (fr->pins > 0)
			continue;
		if (fr->layer >= 0 && fr->referenced) {
			fr->referenced = 0;
			continue;
		}
		if (fr->layer >= 0)
			s->layers[fr->layer].frame_of[fr->expert] = -1;
		fr->layer = -1;
		return f;
	}
	return -1;
}

static int record_read(struct expert_store *s, struct store_layer *l, int layer, int32_t e,
		       uint8_t *dst)
{
	uint64_t off = (uint64_t)e * l->record_bytes;
	for (int attempt = 0; attempt < 2; attempt++) {
		uint64_t done = 0;
		int err = 0;
		while (done < l->record_bytes) {
			ssize_t r = pread(l->fd, dst + done, l->record_bytes - done, (off_t)(off + done));
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (r <= 0) {
				err = r < 0 ? errno : EIO;
				break;
			}
			done += (uint64_t)r;
		}
		s->stats.bytes_read += done;
		if (!err && XXH3_64bits(dst, l->record_bytes) == l->checksums[e])
			return 0;
		s->stats.read_retries += attempt == 0;
		if (attempt == 1)
			return error_set(err ? err : EIO,
					 "layer %d expert %d: %s at offset %" PRIu64 " in %s",
					 layer, e, err ? strerror(err) : "checksum mismatch", off, l->path);
	}
	return -EIO;
}

int expert_store_request(struct expert_store *s, int layer, const int32_t *ids, int n)
{
	struct store_layer *l = &s->layers[layer];
	s->n_ready = s->next_ready = 0;
	if (layer < 0 || layer >= s->n_layers || !l->path)
		return error_set(EINVAL, "layer %d has no routed experts", layer);
	for (int i = 0; i < n; i++) {
		int32_t e = ids[i];
		if (e < 0 || e >= l->n_experts)
			return error_set(EINVAL, "layer %d: expert %d out of range", layer, e);
		bool dup = false;
		for (int j = 0; j < s->n_ready && !dup; j++)
			dup = s->frames[s->ready[j]].expert == e;
		if (dup)
			continue;
		s->stats.requests++;
		if (layer < 256)
			s->stats.layer_requests[layer]++;
		int32_t f = l->frame_of[e];
		if (f >= 0) {
			s->stats.hits++;
			if (layer < 256)
				s->stats.layer_hits[layer]++;
		} else {
			f = frame_evict(s);
			if (f < 0)
				return error_set(ENOMEM, "layer %d: every expert frame is pinned", layer);
			double t0 = now_s();
			int rc = record_read(s, l, layer, e, s->arena + (uint64_t)f * s->frame_bytes);
			s->stats.disk_wait_s += now_s() - t0;
			s->stats.misses++;
			if (rc)
				return rc;
			s->frames[f].layer = layer;
			s->frames[f].expert = e;
			l->frame_of[e] = f;
		}
		s->frames[f].pins++;
		s->frames[f].referenced = 1;
		s->ready[s->n_ready++] = f;
	}
	return 0;
}

int expert_store_next(struct expert_store *s, int32_t *id, const void **record)
{
	if (s->next_ready >= s->n_ready)
		return 0;
	int32_t f = s->ready[s->next_ready++];
	*id = s->frames[f].expert;
	*record = s->arena + (uint64_t)f * s->frame_bytes;
	return 1;
}

void expert_store_release(struct expert_store *s, int layer, int32_t id)
{
	int32_t f = s->layers[layer].frame_of[id];
	if (f >= 0 && s->frames[f].pins > 0)
		s->frames[f].pins--;
}

const struct expert_store_stats *expert_store_stats(const struct expert_store *s)
{
	return &s->stats;
}
