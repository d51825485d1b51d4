/*
 * model — container loading (see model.h).
 */
#include "engine/model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/model/model_tensors.h"
#include "engine/model/verify.h"
#include "base/error.h"
#include "base/files.h"

bool model_embed_on_disk(bool tied)
{
	const char *e = getenv("COLIBRI_EMBED_IN_RAM");
	return !tied && !(e && strcmp(e, "1") == 0);
}

/* The scratch buffer the on-disk embedding table is verified through. */
#define EMBED_VERIFY_BYTES (4u << 20)

/* Reads resident.bin into one buffer and verifies every tensor. An untied
 * embedding table (model_embed_on_disk) is verified by reading it through
 * a scratch buffer but not kept: its pages of the resident buffer are never
 * touched, so it takes no RAM, and model_embed_row reads its rows from the
 * file, kept open in embed_fd. */
static int read_resident(struct model *m)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", m->dir, m->man.resident_file);
	uint64_t n = m->man.resident_bytes;
	m->resident = aligned_alloc(4096, n ? (n + 4095) / 4096 * 4096 : 4096);
	if (!m->resident)
		return error_set(ENOMEM, "cannot allocate %" PRIu64 " MiB for resident weights", n >> 20);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_set(errno, "%s: cannot open: %s", path, strerror(errno));
	const struct manifest_tensor *embed = manifest_find(&m->man, "model.embed_tokens.weight");
	bool on_disk = embed && model_embed_on_disk(!manifest_find(&m->man, "lm_head.weight")) &&
		       embed->offset % 4096 == 0 && (embed->type == QUANT_BF16 || embed->type == QUANT_F32);
	/* The bytes kept: all of them, or those before and after the table's pages. */
	uint64_t skip0 = on_disk ? embed->offset : n;
	uint64_t skip1 = on_disk ? (embed->offset + embed->bytes + 4095) / 4096 * 4096 : n;
	skip1 = skip1 < n ? skip1 : n;
	int rc = file_pread_full(fd, m->resident, skip0, 0);
	rc = rc ? rc : file_pread_full(fd, m->resident + skip1, n - skip1, skip1);
	if (rc)
		rc = error_set(-rc, "%s: read failed: %s", path, strerror(-rc));
	uint8_t *scratch = on_disk && !rc ? malloc(EMBED_VERIFY_BYTES) : NULL;
	if (on_disk && !rc && !scratch)
		rc = error_set(ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < m->man.n_tensors; i++) {
		const struct manifest_tensor *t = &m->man.tensors[i];
		uint64_t seed = manifest_tensor_seed(t->name, t->offset), sum = 0;
		if (on_disk && t == embed)
			rc = verify_hash_range(&(struct verify){ .buf = scratch, .buf_bytes = EMBED_VERIFY_BYTES }, path,
					       fd, t->offset, t->bytes, seed, &sum);
		else
			sum = XXH3_64bits_withSeed(m->resident + t->offset, t->bytes, seed);
		if (!rc && sum != t->checksum)
			rc = error_set(EIO, "%s: tensor %s: checksum mismatch (offset %" PRIu64
				       "); the container is corrupt, reconvert it", path, t->name, t->offset);
	}
	free(scratch);
	if (!rc && on_disk) {
		if (!(m->embed_row = malloc((size_t)quant_data_bytes(embed->type, 1, embed->shape[1])))) {
			close(fd);
			return error_set(ENOMEM, "out of memory");
		}
		m->embed_fd = fd;
		m->embed_offset = embed->offset;
		return 0;
	}
	close(fd);
	return rc;
}

int model_embed_row(const struct model *m, const struct qmatrix *embed, int32_t token, float *out)
{
	if (embed->data) {
		quant_row_dequantize(out, embed, token);
		return 0;
	}
	uint64_t len = quant_data_bytes(embed->type, 1, embed->cols);
	uint64_t off = m->embed_offset + (uint64_t)token * len;
	int rc = file_pread_full(m->embed_fd, m->embed_row, len, off);
	if (rc)
		return error_set(-rc, "%s/%s: cannot read the embedding of token %d at offset %" PRIu64 ": %s", m->dir,
				 m->man.resident_file, token, off, strerror(-rc));
	struct qmatrix row = *embed;
	row.rows = 1;
	row.data = m->embed_row;
	quant_row_dequantize(out, &row, 0);
	return 0;
}

/* Finds a resident tensor with the expected shape (cols 0 = a vector). */
static int find(const struct model *m, const char *name, int64_t rows, int64_t cols,
		const struct manifest_tensor **out)
{
	const struct manifest_tensor *t = manifest_find(&m->man, name);
	if (!t)
		return error_set(EINVAL, "%s/manifest.json: missing tensor %s", m->dir, name);
	bool vec = cols == 0;
	if (t->shape[0] != rows || t->shape[1] != (vec ? 1 : cols) || (vec && t->type != QUANT_F32))
		return error_set(EINVAL, "%s/manifest.json: tensor %s has the wrong shape or type", m->dir, name);
	*out = t;
	return 0;
}

int model_matrix(const struct model *m, struct qmatrix *q, int64_t rows, int64_t cols, const char *fmt, int layer)
{
	char name[TENSOR_NAME_MAX];
	snprintf(name, sizeof name, fmt, layer);
	const struct manifest_tensor *t;
	int rc = find(m, name, rows, cols, &t);
	if (rc)
		return rc;
	quant_matrix_view(q, m->resident + t->offset, t->type, rows, cols, t->group);
	return 0;
}

int model_f32_matrix(const struct model *m, struct qmatrix *q, int64_t rows, int64_t cols, const char *fmt, int layer)
{
	int rc = model_matrix(m, q, rows, cols, fmt, layer);
	if (!rc && q->type != QUANT_F32) {
		char name[TENSOR_NAME_MAX];
		snprintf(name, sizeof name, fmt, layer);
		rc = error_set(EINVAL, "%s/manifest.json: tensor %s is %s, not f32", m->dir, name, quant_type_name(q->type));
	}
	return rc;
}

int model_vector(const struct model *m, const float **v, int64_t n, const char *fmt, int layer)
{
	char name[TENSOR_NAME_MAX];
	snprintf(name, sizeof name, fmt, layer);
	const struct manifest_tensor *t;
	int rc = find(m, name, n, 0, &t);
	if (!rc)
		*v = (const float *)(m->resident + t->offset);
	return rc;
}

bool model_has(const struct model *m, const char *fmt, int layer)
{
	char name[TENSOR_NAME_MAX];
	snprintf(name, sizeof name, fmt, layer);
	return manifest_find(&m->man, name) != NULL;
}

uint64_t model_expert_bytes(const struct model *m)
{
	uint64_t n = 0;
	for (size_t i = 0; i < m->man.n_expert_layers; i++)
		n += m->man.layers[i].record_bytes * (uint64_t)m->man.layers[i].n_records;
	return n;
}

static int open_store(struct model *m, const struct model_options *opt)
{
	int n = m->cfg.n_layers + m->n_mtp;
	struct expert_layer_desc *d = calloc((size_t)n, sizeof *d);
	/* [layer][copy] paths: the primary, then mirror k at index k + 1; a
	 * mirror lacking a layer leaves NULL there, indexes never shift. The
	 * store keeps its own copies, so these live only until it is open. */
	char *(*paths)[EXPERT_COPIES_MAX] = calloc((size_t)n, sizeof *paths);
	char path[PATH_MAX];
	int rc = 0;
	if (!d || !paths)
		rc = error_set(ENOMEM, "out of memory");
	for (int i = 0; !rc && i < n; i++) {
		const struct manifest_expert_layer *l =
			model_config_layer_moe(&m->cfg, i) ? manifest_expert_layer(&m->man, i) : NULL;
		if (!l)
			continue;
		d[i].record_bytes = l->record_bytes;
		d[i].n_experts = m->man.n_experts;
		d[i].checksums = l->checksums;
		d[i].checksum_seed = manifest_record_seed(l->layer, 0);
		d[i].slot = l->slot;
		d[i].n_records = l->n_records;
		for (size_t k = 0; !rc && k <= m->man.n_mirrors && k < EXPERT_COPIES_MAX; k++) {
			if (!manifest_copy_path(&m->man, m->dir, k, (size_t)(l - m->man.layers), path, sizeof path))
				continue;
			if (!(paths[i][k] = strdup(path)))
				rc = error_set(ENOMEM, "out of memory");
			else if (k == 0)
				d[i].path = paths[i][0];
			else
				d[i].mirror_paths[k - 1] = paths[i][k];
		}
	}
	if (rc)
		goto out;
	struct expert_store_options so = {
		.cache_bytes = opt && opt->expert_cache_bytes ? opt->expert_cache_bytes : model_expert_bytes(m),
		.io_depth = opt && opt->io_depth > 0 ? opt->io_depth : 32,
		.buffered = opt && opt->buffered,
	};
	char absent_why[256];
	if (m->man.shard.present) {
		/* What a request for an expert this rank lacks says. */
		snprintf(absent_why, sizeof absent_why, "%s is shard %d of %d (colibri shard), holding only rank %d's "
			 "experts", m->dir, m->man.shard.rank, m->man.shard.ranks, m->man.shard.rank);
		so.absent_why = absent_why;
	}
	for (int k = 0; opt && k < EXPERT_COPIES_MAX; k++)
		so.copy_gbps[k] = opt->copy_gbps[k];
	if (opt)
		memcpy(so.class_frames, opt->class_frames, sizeof so.class_frames);
	/* The store keeps no more frames of a class than it has records, so
	 * the whole model's bytes are every expert whatever the classes. */
	uint64_t min = expert_store_min_bytes(d, n, m->max_experts_per_step);
	if (so.cache_bytes < min)
		so.cache_bytes = opt && opt->expert_cache_bytes ? so.cache_bytes : min;
	rc = expert_store_open(&m->store, d, n, m->max_experts_per_step, &so);
out:
	for (int i = 0; paths && i < n; i++)
		for (int k = 0; k < EXPERT_COPIES_MAX; k++)
			free(paths[i][k]);
	free(d);
	free(paths);
	return rc;
}

/* Layer l's expert file is listed and its parts have the config's shapes. */
static int check_expert_layer(const struct model *m, int l)
{
	const struct manifest_expert_layer *el = manifest_expert_layer(&m->man, l);
	if (!el)
		return error_set(EINVAL, "%s/manifest.json: layer %d has no expert file", m->dir, l);
	for (int p = 0; p < EXPERT_PARTS; p++) {
		int64_t r, cc;
		model_expert_shape(&m->cfg, (enum expert_part)p, &r, &cc);
		if (el->parts[p].shape[0] != r || el->parts[p].shape[1] != cc)
			return error_set(EINVAL, "%s/manifest.json: layer %d expert part %s has the wrong shape", m->dir,
					 l, expert_part_name((enum expert_part)p));
	}
	return 0;
}

/* The container holds what config.json describes and nothing else: every
 * resident tensor is one of the family's tensors for this config, and every
 * expert file belongs to an MoE layer. A num_hidden_layers smaller than the
 * container's (which would run a silently truncated model) or a config of
 * another shape is refused here, naming the first tensor it does not
 * explain. O(tensors x specs) name compares, once at load. */
static int check_container_matches_config(struct model *m, const struct tensor_spec *specs, size_t n_specs)
{
	const struct model_config *c = &m->cfg;
	int rc = 0;
	for (size_t i = 0; !rc && i < m->man.n_tensors; i++) {
		const char *name = m->man.tensors[i].name;
		size_t k = 0;
		while (k < n_specs && strcmp(specs[k].name, name) != 0)
			k++;
		if (k == n_specs)
			rc = error_set(EINVAL, "%s: the container holds tensor %s, which config.json (%s, %d layers) does "
				       "not describe; config.json does not belong to this container", m->dir, name,
				       c->model_type, c->n_layers);
	}
	for (size_t i = 0; !rc && i < m->man.n_expert_layers; i++) {
		int l = m->man.layers[i].layer;
		if (l >= c->n_layers + c->n_mtp_layers || !model_config_layer_moe(c, l))
			rc = error_set(EINVAL, "%s: the container holds routed experts for layer %d, which config.json "
				       "(%d layers) does not describe as an MoE layer", m->dir, l, c->n_layers);
	}
	if (!rc && m->man.n_experts != c->n_experts && m->man.n_expert_layers)
		rc = error_set(EINVAL, "%s: the container holds %d experts per layer, config.json says %d", m->dir,
			       m->man.n_experts, c->n_experts);
	/* Each MoE decoder layer has its expert file, in the config's shapes
	 * (MTP layers are checked once model_load knows they are loaded). */
	for (int l = 0; !rc && l < c->n_layers; l++)
		rc = model_config_layer_moe(c, l) ? check_expert_layer(m, l) : 0;
	return rc;
}

/* Zero-centred norms (Qwen3.5, Qwen3-Next) multiply by 1 + w: the weights
 * become 1 + w here, once, in f32 as transformers computes
 * (1.0 + self.weight.float()), so every norm of the forward pass is the
 * plain RMSNorm. The checksums were verified on the stored bytes before. */
static int apply_zero_centred_norms(struct model *m, const struct tensor_spec *specs, size_t n_specs)
{
	int rc = 0;
	for (size_t i = 0; !rc && m->cfg.norm_zero_centred && i < n_specs; i++) {
		if (!specs[i].plus_one)
			continue;
		const struct manifest_tensor *t = manifest_find(&m->man, specs[i].name);
		if (!t)
			continue; /* an absent MTP module's; a missing one is refused where it is bound */
		if (t->type != QUANT_F32)
			rc = error_set(EINVAL, "%s/manifest.json: norm %s is not f32", m->dir, specs[i].name);
		float *w = (float *)(m->resident + t->offset);
		for (int64_t k = 0; !rc && k < t->shape[0] * t->shape[1]; k++)
			w[k] = 1.0f + w[k];
	}
	return rc;
}

int model_load(struct model *m, const char *dir, const struct model_options *opt)
{
	memset(m, 0, sizeof *m);
	m->embed_fd = -1;
	int rc;
	if (!(m->dir = strdup(dir)))
		return error_set(ENOMEM, "out of memory");
	if ((rc = manifest_load(&m->man, dir)) || (rc = model_config_load(&m->cfg, dir)))
		return rc;
	if (strcmp(m->man.model_type, m->cfg.model_type) != 0)
		return error_set(EINVAL, "%s: manifest model_type %s does not match config.json (%s)", dir,
				 m->man.model_type, m->cfg.model_type);
	/* The family's tensor list, for the container check and the norms. */
	struct tensor_spec *specs = NULL;
	size_t n_specs = 0;
	rc = model_tensors_resident(&m->cfg, &specs, &n_specs);
	rc = rc ? rc : check_container_matches_config(m, specs, n_specs);
	if (rc) {
		free(specs);
		return rc;
	}
	rc = read_resident(m);
	rc = rc ? rc : apply_zero_centred_norms(m, specs, n_specs);
	free(specs);
	if (rc)
		return rc;
	const struct model_config *c = &m->cfg;
	/* MTP modules load when their tensors are in the container. */
	char probe[TENSOR_NAME_MAX];
	snprintf(probe, sizeof probe, "model.layers.%d.%s", c->n_layers,
		 c->arch == MODEL_ARCH_DEEPSEEK_V4 ? "e_proj.weight" : "eh_proj.weight");
	m->n_mtp = c->n_mtp_layers > 0 && manifest_find(&m->man, probe) ? c->n_mtp_layers : 0;
	for (int l = c->n_layers; !rc && l < c->n_layers + m->n_mtp; l++)
		rc = model_config_layer_moe(c, l) ? check_expert_layer(m, l) : 0;
	rc = rc ? rc : model_matrix(m, &m->embed, c->vocab, c->hidden, "model.embed_tokens.weight", 0);
	if (!rc && m->embed_row)
		m->embed.data = NULL; /* its rows come from the file: model_embed_row */
	rc = rc ? rc : model_vector(m, &m->final_norm, c->hidden, "model.norm.weight", 0);
	if (!rc && c->embed_norm)
		rc = model_vector(m, &m->embed_norm, c->hidden, "model.embed_norm.weight", 0);
	if (rc)
		return rc;
	if (manifest_find(&m->man, "lm_head.weight"))
		rc = model_matrix(m, &m->lm_head, c->vocab, c->hidden, "lm_head.weight", 0);
	else if (c->tie_embeddings)
		m->lm_head = m->embed;
	else
		rc = error_set(EINVAL, "%s/manifest.json: missing tensor lm_head.weight", dir);
	if (rc)
		return rc;
	/* A step needs one token's top-k pinned at once; larger unions (prefill
	 * chunks) are requested in rounds that fit the frames. */
	m->max_experts_per_step = c->top_k;
	return open_store(m, opt);
}

void model_free(struct model *m)
{
	expert_store_close(m->store);
	if (m->embed_row) /* the table is on disk: embed_fd is open */
		close(m->embed_fd);
	free(m->embed_row);
	free(m->resident);
	manifest_free(&m->man);
	free(m->dir);
	memset(m, 0, sizeof *m);
}

void model_expert_part(struct qmatrix *out, const struct manifest_expert_layer *l, const void *record,
		       enum expert_part part)
{
	const struct manifest_tensor *t = &l->parts[part];
	quant_matrix_view(out, (const uint8_t *)record + t->offset, t->type, t->shape[0], t->shape[1],
			  t->group);
}
