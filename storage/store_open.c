/*
 * store_open — opening and closing an expert store: validating the layer
 * descriptors, opening every copy of every layer file (storage/copies.h),
 * sizing the frame classes and the arena, the evictors, the ring and the
 * block pool, and
 * registering files and buffers with io_uring (see expert_store.h for the
 * contract and the environment switches).
 *
 * Everything the store allocates is allocated here, once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "storage/store_internal.h"

#define STORE_RECORD_MAX_BYTES (1ull << 30) /* io_uring: one read and one registered buffer <= 1 GiB */
#define STORE_DEPTH_MAX 4096
#define STORE_FIXED_BUFFERS_MAX 16384       /* the kernel's limit on registered buffers */

_Static_assert(IO_RING_ALIGN == 4096, "records are laid out in 4 KiB blocks");
_Static_assert(STORE_RECORD_MAX_BYTES % IO_RING_ALIGN == 0, "a registered buffer holds whole blocks");

static bool env_flag(const char *name)
{
	const char *v = getenv(name);
	return v && *v && strcmp(v, "0") != 0;
}

/* The distinct record sizes of the layers with experts, ascending, with
 * each one's layers and records; layer_class[i] (when not NULL) the class
 * of layer i, -1 without experts. Returns the count, or -EINVAL past
 * EXPERT_CLASSES_MAX. */
struct class_shape {
	uint64_t frame_bytes;
	int32_t n_layers;
	uint64_t records;
};

static int classes_of(const struct expert_layer_desc *layers, int n_layers,
		      struct class_shape out[EXPERT_CLASSES_MAX], int8_t *layer_class)
{
	int n = 0;
	for (int i = 0; i < n_layers; i++) {
		if (!layers[i].path)
			continue;
		uint64_t rb = layers[i].record_bytes;
		int c = 0;
		while (c < n && out[c].frame_bytes < rb)
			c++;
		if (c == n || out[c].frame_bytes != rb) {
			if (n == EXPERT_CLASSES_MAX)
				return error_set(EINVAL, "expert records come in more than %d sizes",
						 EXPERT_CLASSES_MAX);
			memmove(&out[c + 1], &out[c], (size_t)(n - c) * sizeof *out);
			out[c] = (struct class_shape){ .frame_bytes = rb };
			n++;
		}
		out[c].n_layers++;
		int32_t held = layers[i].slot ? layers[i].n_records : layers[i].n_experts;
		out[c].records += held > 0 ? (uint64_t)held : 0;
	}
	for (int i = 0; layer_class && i < n_layers; i++) {
		layer_class[i] = -1;
		for (int c = 0; layers[i].path && c < n; c++)
			if (out[c].frame_bytes == layers[i].record_bytes)
				layer_class[i] = (int8_t)c;
	}
	return n;
}

/* Frames worth keeping in a class: one per record, and at least one step. */
static uint64_t class_frames_max(const struct class_shape *c, int max_per_step)
{
	return c->records > (uint64_t)max_per_step ? c->records : (uint64_t)max_per_step;
}

uint64_t expert_store_min_bytes(const struct expert_layer_desc *layers, int n_layers,
				int max_per_step)
{
	struct class_shape cs[EXPERT_CLASSES_MAX];
	int n = classes_of(layers, n_layers, cs, NULL);
	uint64_t min = 0;
	for (int c = 0; c < n; c++)
		min += cs[c].frame_bytes * (uint64_t)max_per_step;
	if (n < 0)
		error_clear();
	return min;
}

uint64_t expert_frames_split(int n, const uint64_t frame_bytes[], const int32_t layers[],
			     const uint64_t max_frames[], uint64_t per_step, uint64_t bytes, uint64_t frames[])
{
	int order[EXPERT_CLASSES_MAX];
	for (int c = 0; c < n; c++) {
		int k = c;
		while (k > 0 && layers[order[k - 1]] < layers[c])
			k--;
		memmove(&order[k + 1], &order[k], (size_t)(c - k) * sizeof *order);
		order[k] = c;
		frames[c] = 0;
	}
	for (int pass = 0; pass < 2; pass++)
		for (int k = 0; k < n; k++) {
			int c = order[k];
			uint64_t want = pass == 0 || max_frames[c] < per_step ? per_step : max_frames[c];
			uint64_t add = want - frames[c], afford = bytes / frame_bytes[c];
			add = add < afford ? add : afford;
			frames[c] += add;
			bytes -= add * frame_bytes[c];
		}
	return bytes;
}

int expert_store_split(const struct expert_layer_desc *layers, int n_layers, int max_per_step,
		       uint64_t cache_bytes, struct expert_class_frames out[EXPERT_CLASSES_MAX])
{
	struct class_shape cs[EXPERT_CLASSES_MAX];
	int n = classes_of(layers, n_layers, cs, NULL);
	if (n < 0)
		return n;
	uint64_t fb[EXPERT_CLASSES_MAX] = {0}, mx[EXPERT_CLASSES_MAX] = {0}, frames[EXPERT_CLASSES_MAX];
	int32_t nl[EXPERT_CLASSES_MAX] = {0};
	for (int c = 0; c < n; c++) {
		fb[c] = cs[c].frame_bytes;
		nl[c] = cs[c].n_layers;
		mx[c] = cs[c].records;
	}
	expert_frames_split(n, fb, nl, mx, (uint64_t)max_per_step, cache_bytes, frames);
	memset(out, 0, EXPERT_CLASSES_MAX * sizeof *out);
	for (int c = 0; c < n; c++) {
		out[c].frame_bytes = cs[c].frame_bytes;
		out[c].n_frames = frames[c] > INT32_MAX / (2 * EXPERT_CLASSES_MAX)
					  ? INT32_MAX / (2 * EXPERT_CLASSES_MAX) : (int32_t)frames[c];
	}
	return n;
}

/* Copies 0..n named by d: the primary and its mirrors. */
static int desc_n_copies(const struct expert_layer_desc *d)
{
	int n = 1;
	for (int m = 0; m < EXPERT_MIRRORS_MAX; m++)
		if (d->mirror_paths[m])
			n = m + 2;
	return n;
}

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
	l->checksum_seed = d->checksum_seed;
	l->slot = d->slot;
	if (d->slot && (d->n_records < 0 || d->n_records > d->n_experts))
		return error_set(EINVAL, "%s: %d records of %d experts", d->path, d->n_records, d->n_experts);
	l->usage = calloc((size_t)d->n_experts, sizeof *l->usage);
	l->ram_hits = calloc((size_t)d->n_experts, sizeof *l->ram_hits);
	l->mark = calloc((size_t)d->n_experts, sizeof *l->mark);
	if (!l->usage || !l->ram_hits || !l->mark)
		return error_set(ENOMEM, "out of memory");
	uint64_t want = (uint64_t)(d->slot ? d->n_records : d->n_experts) * d->record_bytes;
	char why[512], why_primary[512] = "";
	int rc_primary = 0;
	for (int c = 0; c < COPIES_MAX; c++) {
		const char *path = c == 0 ? d->path : d->mirror_paths[c - 1];
		if (!path)
			continue;
		int rc = copy_file_open(&l->copy[c], path, direct, want, warned_direct, why, sizeof why);
		if (rc == -ENOMEM)
			return error_set(ENOMEM, "out of memory");
		if (rc == 0) {
			l->holders |= (uint8_t)(1u << c);
			s->copies.layers_held[c]++;
			continue;
		}
		if (c == 0) {
			rc_primary = rc;
			snprintf(why_primary, sizeof why_primary, "%s", why);
		}
		copies_missing(&s->copies, c, why);
	}
	if (!l->holders) {
		if (rc_primary == -EINVAL)
			return error_set(EINVAL, "%s (%d experts of %" PRIu64 " bytes)", why_primary,
					 d->n_experts, d->record_bytes);
		return error_set(-rc_primary, "%s", why_primary);
	}
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

/* Registers the arena as fixed buffers of whole frames of one class, at
 * most 1 GiB each (the kernel's limit per buffer): class c's frames go to
 * buffers buf_first.. Failure is not fatal. */
static void arena_register(struct expert_store *s)
{
	struct buffer_pool *bp = &s->pool;
	int32_t n = 0, per[EXPERT_CLASSES_MAX];
	for (int c = 0; c < s->n_classes; c++) {
		const struct frame_class *fc = &bp->classes[c];
		per[c] = (int32_t)(STORE_RECORD_MAX_BYTES / fc->frame_bytes);
		s->cls[c].buf_first = n;
		n += (fc->n_frames + per[c] - 1) / per[c];
	}
	const char *why = NULL;
	int rc = 0;
	if (n > STORE_FIXED_BUFFERS_MAX) {
		why = "more than 16384 buffers";
	} else {
		struct iovec *iov = calloc((size_t)n, sizeof *iov);
		if (!iov)
			return;
		for (int c = 0; c < s->n_classes; c++) {
			const struct frame_class *fc = &bp->classes[c];
			for (int32_t first = 0, i = s->cls[c].buf_first; first < fc->n_frames; first += per[c], i++) {
				int32_t count = fc->n_frames - first < per[c] ? fc->n_frames - first : per[c];
				iov[i].iov_base = buffer_pool_frame_data(bp, fc->first + first);
				iov[i].iov_len = (size_t)((uint64_t)count * fc->frame_bytes);
			}
		}
		rc = io_ring_register_buffers(&s->ring, iov, n);
		free(iov);
		if (rc == 0) {
			for (int c = 0; c < s->n_classes; c++)
				s->cls[c].frames_per_buf = per[c];
			return;
		}
		why = strerror(-rc);
	}
	fprintf(stderr, "colibri: warning: cannot register the %" PRIu64 " MiB expert arena with io_uring "
			"(%s%s); using unregistered reads\n",
		bp->arena_bytes >> 20, why, rc == -ENOMEM || rc == -EPERM ? ", raise RLIMIT_MEMLOCK" : "");
}

/* The frames of each class: as opt names them, else split from
 * cache_bytes; each at most class_frames_max. -ENOMEM (with the minimum)
 * when a class gets fewer than one step, -EINVAL when opt lacks a class. */
static int frames_choose(const struct expert_store *s, const struct expert_layer_desc *layers,
			 const struct class_shape *cs, const struct expert_store_options *opt,
			 int32_t frames[EXPERT_CLASSES_MAX])
{
	struct expert_class_frames split[EXPERT_CLASSES_MAX];
	const struct expert_class_frames *given = opt->class_frames;
	bool named = given[0].frame_bytes != 0;
	if (!named) {
		int rc = expert_store_split(layers, s->n_layers, s->max_per_step, opt->cache_bytes, split);
		if (rc < 0)
			return rc;
		given = split;
	}
	uint64_t min = 0, have = 0;
	bool short_class = false;
	char sizes[EXPERT_CLASSES_MAX * 24] = "";
	size_t len = 0;
	for (int c = 0; c < s->n_classes; c++) {
		int k = 0;
		while (k < EXPERT_CLASSES_MAX && given[k].frame_bytes && given[k].frame_bytes != cs[c].frame_bytes)
			k++;
		if (k == EXPERT_CLASSES_MAX || given[k].frame_bytes != cs[c].frame_bytes)
			return error_set(EINVAL, "no frame count given for the expert records of %" PRIu64 " KiB",
					 cs[c].frame_bytes >> 10);
		uint64_t f = given[k].n_frames > 0 ? (uint64_t)given[k].n_frames : 0;
		uint64_t cap = class_frames_max(&cs[c], s->max_per_step);
		frames[c] = (int32_t)(f < cap ? f : cap);
		short_class |= frames[c] < s->max_per_step;
		min += cs[c].frame_bytes * (uint64_t)s->max_per_step;
		have += cs[c].frame_bytes * (uint64_t)frames[c];
		len += (size_t)snprintf(sizes + len, sizeof sizes - len, "%s%" PRIu64, c ? " + " : "",
					cs[c].frame_bytes >> 10);
	}
	if (!short_class)
		return 0;
	if (named)
		return error_set(ENOMEM, "expert cache of %" PRIu64 " MiB in frames of %s KiB is below the "
			       "minimum of %d experts of each size in one step (%" PRIu64 " MiB)",
			       have >> 20, sizes, s->max_per_step, (min + (1 << 20) - 1) >> 20);
	return error_set(ENOMEM, "expert cache of %" PRIu64 " MiB is below the minimum of %" PRIu64
		       " MiB (%d experts of %s KiB in one step)", opt->cache_bytes >> 20,
		       (min + (1 << 20) - 1) >> 20, s->max_per_step, sizes);
}

/* Registers every open copy file as a fixed file. Failure is not fatal. */
static void files_register(struct expert_store *s)
{
	int n = 0;
	for (int i = 0; i < s->n_layers; i++)
		n += __builtin_popcount(s->layers[i].holders);
	int *fds = malloc((size_t)(n ? n : 1) * sizeof *fds);
	if (!fds)
		return;
	n = 0;
	for (int i = 0; i < s->n_layers; i++)
		for (int c = 0; c < COPIES_MAX; c++)
			if (s->layers[i].holders & (1u << c))
				fds[n++] = s->layers[i].copy[c].fd;
	if (io_ring_register_files(&s->ring, fds, n) == 0) {
		n = 0;
		for (int i = 0; i < s->n_layers; i++)
			for (int c = 0; c < COPIES_MAX; c++)
				if (s->layers[i].holders & (1u << c))
					s->layers[i].copy[c].file_index = n++;
	}
	free(fds);
}

int expert_store_open(struct expert_store **out, const struct expert_layer_desc *layers,
		      int n_layers, int max_per_step, const struct expert_store_options *opt)
{
	struct expert_store *s = calloc(1, sizeof *s);
	int32_t *n_experts = NULL, *class_experts = NULL;
	int8_t *layer_class = NULL;
	int rc = 0;
	*out = NULL;
	if (!s)
		return error_set(ENOMEM, "out of memory");
	s->n_layers = n_layers;
	s->max_per_step = max_per_step;
	snprintf(s->absent_why, sizeof s->absent_why, "%s",
		 opt->absent_why ? opt->absent_why : "the file holds some of the layer's experts only");
	s->layers = calloc((size_t)n_layers, sizeof *s->layers);
	n_experts = calloc((size_t)(n_layers ? n_layers : 1), sizeof *n_experts);
	class_experts = calloc((size_t)(n_layers ? n_layers : 1), sizeof *class_experts);
	layer_class = calloc((size_t)(n_layers ? n_layers : 1), sizeof *layer_class);
	if (!s->layers || !n_experts || !class_experts || !layer_class) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < n_layers; i++) {
		s->layers[i].cls = -1;
		for (int c = 0; c < COPIES_MAX; c++)
			s->layers[i].copy[c].fd = s->layers[i].copy[c].file_index = -1;
	}

	int n_copies = 1, n_named = 0;
	for (int i = 0; i < n_layers; i++)
		if (layers[i].path) {
			int n = desc_n_copies(&layers[i]);
			n_copies = n > n_copies ? n : n_copies;
			n_named++;
		}
	copies_init(&s->copies, n_copies, opt->readmit_s);
	if ((rc = stripe_init(&s->stripe, opt->stripe_bytes, opt->copy_gbps, n_copies)))
		goto fail;

	bool no_direct = env_flag("COLIBRI_NO_DIRECT");
	bool no_uring = env_flag("COLIBRI_NO_IO_URING");
	bool no_fixed = env_flag("COLIBRI_NO_FIXED_BUFFERS");
	bool direct = !opt->buffered && !no_direct;
	bool warned_direct = false;
	if (no_direct && !opt->buffered)
		fprintf(stderr, "colibri: warning: COLIBRI_NO_DIRECT is set; reading experts through the page cache\n");

	bool all_direct = true;
	for (int i = 0; i < n_layers; i++) {
		if (!layers[i].path)
			continue;
		if ((rc = layer_open(s, i, &layers[i], direct, &warned_direct)))
			goto fail;
		n_experts[i] = layers[i].n_experts;
		for (int c = 0; c < COPIES_MAX; c++)
			if (s->layers[i].holders & (1u << c))
				all_direct &= s->layers[i].copy[c].direct;
		if (layers[i].n_experts > s->max_experts)
			s->max_experts = layers[i].n_experts;
	}
	copies_report_missing(&s->copies, n_named);
	struct expert_store_stats *st = &s->stats;
	st->n_copies = n_copies;
	st->stripe_bytes = s->stripe.block_bytes;
	for (int c = 0; c < n_copies; c++) {
		st->copy_weight[c] = s->stripe.weight[c];
		st->copy_layers[c] = s->copies.layers_held[c];
	}
	struct class_shape cs[EXPERT_CLASSES_MAX];
	if ((rc = classes_of(layers, n_layers, cs, layer_class)) < 0)
		goto fail;
	s->n_classes = rc;
	rc = 0;
	if (s->n_classes == 0) {
		store_stats_sync(s);
		free(n_experts);
		free(class_experts);
		free(layer_class);
		*out = s; /* a model without routed experts */
		return 0;
	}
	for (int i = 0; i < n_layers; i++)
		s->layers[i].cls = layer_class[i];

	int32_t frames[EXPERT_CLASSES_MAX];
	uint64_t frame_bytes[EXPERT_CLASSES_MAX];
	if ((rc = frames_choose(s, layers, cs, opt, frames)))
		goto fail;
	for (int c = 0; c < s->n_classes; c++)
		frame_bytes[c] = cs[c].frame_bytes;
	if ((rc = buffer_pool_init(&s->pool, s->n_classes, frame_bytes, frames, n_layers, n_experts)))
		goto fail;
	enum expert_evict evict = evict_choice(opt->evict);
	for (int c = 0; c < s->n_classes; c++) {
		for (int i = 0; i < n_layers; i++)
			class_experts[i] = layer_class[i] == c ? n_experts[i] : 0;
		if ((rc = evictor_init(&s->cls[c].ev, evict == EXPERT_EVICT_LRU ? EVICT_POLICY_LRU : EVICT_POLICY_FREQ,
				       &s->pool, c, class_experts)))
			goto fail;
	}

	int depth = opt->io_depth < 1 ? 1 : opt->io_depth > STORE_DEPTH_MAX ? STORE_DEPTH_MAX : opt->io_depth;
	if (no_uring)
		fprintf(stderr, "colibri: warning: COLIBRI_NO_IO_URING is set; reading experts with pread threads\n");
	if ((rc = io_ring_init(&s->ring, depth, no_uring)))
		goto fail;
	if (s->ring.backend == IO_RING_URING) {
		files_register(s);
		if (no_fixed)
			fprintf(stderr, "colibri: warning: COLIBRI_NO_FIXED_BUFFERS is set; using unregistered reads\n");
		else
			arena_register(s);
	}
	if ((rc = load_init(s, depth)))
		goto fail;

	s->uniq = malloc((size_t)s->max_experts * sizeof *s->uniq);
	s->req_frames = malloc((size_t)s->max_experts * sizeof *s->req_frames);
	s->ready = malloc((size_t)s->max_experts * sizeof *s->ready);
	s->pin_frames = malloc(((size_t)s->pool.n_frames + 1) * sizeof *s->pin_frames);
	if (!s->uniq || !s->req_frames || !s->ready || !s->pin_frames) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	s->prefetch_depth = opt->prefetch_depth < 0 ? 0
			    : opt->prefetch_depth == 0 ? (depth / 2 > 1 ? depth / 2 : 1)
			    : opt->prefetch_depth > depth ? depth : opt->prefetch_depth;

	st->io_uring = s->ring.backend == IO_RING_URING;
	st->o_direct = all_direct;
	st->fixed_buffers = s->ring.fixed_buffers;
	st->fixed_files = s->ring.fixed_files;
	st->evict = evict;
	st->numa_node = s->pool.numa_node;
	st->io_depth = depth;
	st->prefetch_depth = s->prefetch_depth;
	st->n_frames = s->pool.n_frames;
	st->cache_bytes = s->pool.arena_bytes;
	st->n_classes = s->n_classes;
	for (int c = 0; c < s->n_classes; c++) {
		st->classes[c].frame_bytes = s->pool.classes[c].frame_bytes;
		st->classes[c].n_frames = s->pool.classes[c].n_frames;
		st->classes[c].n_layers = cs[c].n_layers;
		st->frame_bytes = st->classes[c].frame_bytes; /* ascending: the largest */
	}
	store_stats_sync(s);
	free(n_experts);
	free(class_experts);
	free(layer_class);
	*out = s;
	return 0;
fail:
	free(n_experts);
	free(class_experts);
	free(layer_class);
	expert_store_close(s);
	return rc;
}

void expert_store_close(struct expert_store *s)
{
	if (!s)
		return;
	io_ring_free(&s->ring); /* reads in flight finish before the arena goes */
	load_free(s);
	for (int c = 0; c < s->n_classes; c++)
		evictor_free(&s->cls[c].ev);
	buffer_pool_free(&s->pool);
	for (int i = 0; s->layers && i < s->n_layers; i++) {
		struct store_layer *l = &s->layers[i];
		for (int c = 0; c < COPIES_MAX; c++)
			copy_file_close(&l->copy[c]);
		free(l->usage);
		free(l->ram_hits);
		free(l->mark);
	}
	free(s->layers);
	free(s->uniq);
	free(s->req_frames);
	free(s->ready);
	free(s->pin_frames);
	free(s);
}

