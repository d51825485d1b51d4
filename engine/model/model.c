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
#include "base/error.h"

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
	uint64_t done = 0;
	while (done < n) {
		ssize_t r = pread(fd, m->resident + done, n - done, (off_t)done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			close(fd);
			return error_set(e, "%s: read failed at offset %" PRIu64 ": %s", path, done,
					 r < 0 ? strerror(e) : "end of file");
		}
		done += (uint64_t)r;
	}
	close(fd);
	for (size_t i = 0; i < m->man.n_tensors; i++) {
		const struct manifest_tensor *t = &m->man.tensors[i];
		uint64_t seed = manifest_tensor_seed(t->name, t->offset);
		if (XXH3_64bits_withSeed(m->resident + t->offset, t->bytes, seed) != t->checksum)
			return error_set(EIO, "%s: tensor %s: checksum mismatch (offset %" PRIu64
					 "); the container is corrupt, reconvert it", path, t->name, t->offset);
	}
	return 0;
}

/* Finds a resident tensor with the expected shape (cols 0 = a vector). */
static int find(struct model *m, const char *name, int64_t rows, int64_t cols,
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

static int get_matrix(struct model *m, struct qmatrix *q, int64_t rows, int64_t cols,
		      const char *fmt, int layer)
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

static int get_vector(struct model *m, const float **v, int64_t n, const char *fmt, int layer)
{
	char name[TENSOR_NAME_MAX];
	snprintf(name, sizeof name, fmt, layer);
	const struct manifest_tensor *t;
	int rc = find(m, name, n, 0, &t);
	if (!rc)
		*v = (const float *)(m->resident + t->offset);
	return rc;
}

static int load_indexer(struct model *m, int i, struct layer_weights *lw)
{
	const struct model_config *c = &m->cfg;
	int64_t ih = c->index_n_heads, id = c->index_head_dim;
	int rc = 0;
	rc = rc ? rc : get_matrix(m, &lw->ix_wq_b, ih * id, c->q_lora_rank, "model.layers.%d.self_attn.indexer.wq_b.weight", i);
	rc = rc ? rc : get_matrix(m, &lw->ix_wk, id, c->hidden, "model.layers.%d.self_attn.indexer.wk.weight", i);
	rc = rc ? rc : get_vector(m, &lw->ix_k_norm, id, "model.layers.%d.self_attn.indexer.k_norm.weight", i);
	rc = rc ? rc : get_vector(m, &lw->ix_k_bias, id, "model.layers.%d.self_attn.indexer.k_norm.bias", i);
	rc = rc ? rc : get_matrix(m, &lw->ix_weights, ih, c->hidden, "model.layers.%d.self_attn.indexer.weights_proj.weight", i);
	if (!rc && lw->ix_weights.type != QUANT_F32)
		rc = error_set(EINVAL, "%s: layer %d indexer weights_proj is not f32", m->dir, i);
	return rc;
}

static int load_attention(struct model *m, int i, struct layer_weights *lw)
{
	const struct model_config *c = &m->cfg;
	int64_t h = c->hidden, q = (int64_t)c->n_heads * c->head_dim;
	int64_t kv = (int64_t)c->n_kv_heads * c->head_dim;
	int rc = 0;
	if (c->attn == ATTN_MLA) {
		int64_t nh = c->n_heads, qk = c->qk_nope_dim + c->qk_rope_dim;
		if (c->q_lora_rank > 0) {
			rc = rc ? rc : get_matrix(m, &lw->q_a, c->q_lora_rank, h, "model.layers.%d.self_attn.q_a_proj.weight", i);
			rc = rc ? rc : get_vector(m, &lw->q_a_norm, c->q_lora_rank, "model.layers.%d.self_attn.q_a_layernorm.weight", i);
			rc = rc ? rc : get_matrix(m, &lw->q_b, nh * qk, c->q_lora_rank, "model.layers.%d.self_attn.q_b_proj.weight", i);
		} else {
			rc = rc ? rc : get_matrix(m, &lw->wq, nh * qk, h, "model.layers.%d.self_attn.q_proj.weight", i);
		}
		rc = rc ? rc : get_matrix(m, &lw->kv_a, c->kv_lora_rank + c->qk_rope_dim, h,
					  "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", i);
		rc = rc ? rc : get_vector(m, &lw->kv_a_norm, c->kv_lora_rank, "model.layers.%d.self_attn.kv_a_layernorm.weight", i);
		rc = rc ? rc : get_matrix(m, &lw->kv_b, nh * (c->qk_nope_dim + c->v_head_dim), c->kv_lora_rank,
					  "model.layers.%d.self_attn.kv_b_proj.weight", i);
		rc = rc ? rc : get_matrix(m, &lw->wo, h, nh * c->v_head_dim, "model.layers.%d.self_attn.o_proj.weight", i);
		if (!rc && c->dsa && !c->index_shared[i])
			rc = load_indexer(m, i, lw);
		return rc;
	}
	rc = rc ? rc : get_matrix(m, &lw->wq, q, h, "model.layers.%d.self_attn.q_proj.weight", i);
	rc = rc ? rc : get_matrix(m, &lw->wk, kv, h, "model.layers.%d.self_attn.k_proj.weight", i);
	rc = rc ? rc : get_matrix(m, &lw->wv, kv, h, "model.layers.%d.self_attn.v_proj.weight", i);
	rc = rc ? rc : get_matrix(m, &lw->wo, h, q, "model.layers.%d.self_attn.o_proj.weight", i);
	if (!rc && c->attn_bias) {
		rc = get_vector(m, &lw->bq, q, "model.layers.%d.self_attn.q_proj.bias", i);
		rc = rc ? rc : get_vector(m, &lw->bk, kv, "model.layers.%d.self_attn.k_proj.bias", i);
		rc = rc ? rc : get_vector(m, &lw->bv, kv, "model.layers.%d.self_attn.v_proj.bias", i);
	}
	if (!rc && c->qk_norm != QK_NORM_NONE) {
		bool full = c->qk_norm == QK_NORM_FULL;
		rc = get_vector(m, &lw->q_norm, full ? q : c->head_dim, "model.layers.%d.self_attn.q_norm.weight", i);
		rc = rc ? rc : get_vector(m, &lw->k_norm, full ? kv : c->head_dim,
					  "model.layers.%d.self_attn.k_norm.weight", i);
	}
	return rc;
}

static int load_moe(struct model *m, int i, struct layer_weights *lw)
{
	const struct model_config *c = &m->cfg;
	int64_t h = c->hidden;
	const char *fmt = c->expert_naming == EXPERT_NAMING_MIXTRAL ? "model.layers.%d.block_sparse_moe.gate.weight"
								      : "model.layers.%d.mlp.gate.weight";
	int rc = get_matrix(m, &lw->router, c->n_experts, h, fmt, i);
	if (!rc && lw->router.type != QUANT_F32)
		rc = error_set(EINVAL, "%s: layer %d router is not f32", m->dir, i);
	if (!rc && c->router_bias)
		rc = get_vector(m, &lw->router_bias, c->n_experts, "model.layers.%d.mlp.gate.e_score_correction_bias", i);
	if (!rc && c->n_shared_experts > 0) {
		int64_t f = (int64_t)c->moe_intermediate * c->n_shared_experts;
		lw->shared = true;
		rc = get_matrix(m, &lw->sh_gate, f, h, "model.layers.%d.mlp.shared_experts.gate_proj.weight", i);
		rc = rc ? rc : get_matrix(m, &lw->sh_up, f, h, "model.layers.%d.mlp.shared_experts.up_proj.weight", i);
		rc = rc ? rc : get_matrix(m, &lw->sh_down, h, f, "model.layers.%d.mlp.shared_experts.down_proj.weight", i);
	}
	lw->experts = manifest_expert_layer(&m->man, i);
	if (!rc && !lw->experts)
		rc = error_set(EINVAL, "%s/manifest.json: layer %d has no expert file", m->dir, i);
	for (int p = 0; !rc && p < EXPERT_PARTS; p++) {
		int64_t r, cc;
		model_expert_shape(c, (enum expert_part)p, &r, &cc);
		if (lw->experts->parts[p].shape[0] != r || lw->experts->parts[p].shape[1] != cc)
			rc = error_set(EINVAL, "%s/manifest.json: layer %d expert part %s has the wrong shape",
				       m->dir, i, expert_part_name((enum expert_part)p));
	}
	return rc;
}

static int load_layer(struct model *m, int i)
{
	const struct model_config *c = &m->cfg;
	struct layer_weights *lw = &m->layers[i];
	int64_t h = c->hidden;
	int rc = 0;
	rc = rc ? rc : get_vector(m, &lw->attn_norm, h, "model.layers.%d.input_layernorm.weight", i);
	rc = rc ? rc : get_vector(m, &lw->ffn_norm, h, "model.layers.%d.post_attention_layernorm.weight", i);
	rc = rc ? rc : load_attention(m, i, lw);
	if (rc)
		return rc;
	lw->moe = c->layer_is_moe[i];
	if (lw->moe)
		return load_moe(m, i, lw);
	int64_t f = c->intermediate;
	rc = get_matrix(m, &lw->ffn_gate, f, h, "model.layers.%d.mlp.gate_proj.weight", i);
	rc = rc ? rc : get_matrix(m, &lw->ffn_up, f, h, "model.layers.%d.mlp.up_proj.weight", i);
	rc = rc ? rc : get_matrix(m, &lw->ffn_down, h, f, "model.layers.%d.mlp.down_proj.weight", i);
	return rc;
}

static int load_mtp(struct model *m, int layer, struct mtp_weights *w)
{
	const struct model_config *c = &m->cfg;
	int64_t h = c->hidden;
	int rc = 0;
	char name[TENSOR_NAME_MAX];
	rc = rc ? rc : get_vector(m, &w->enorm, h, "model.layers.%d.enorm.weight", layer);
	rc = rc ? rc : get_vector(m, &w->hnorm, h, "model.layers.%d.hnorm.weight", layer);
	rc = rc ? rc : get_matrix(m, &w->eh_proj, h, 2 * h, "model.layers.%d.eh_proj.weight", layer);
	rc = rc ? rc : get_vector(m, &w->head_norm, h, "model.layers.%d.shared_head.norm.weight", layer);
	if (rc)
		return rc;
	snprintf(name, sizeof name, "model.layers.%d.shared_head.head.weight", layer);
	w->head = m->lm_head;
	if (manifest_find(&m->man, name))
		rc = get_matrix(m, &w->head, c->vocab, h, "model.layers.%d.shared_head.head.weight", layer);
	snprintf(name, sizeof name, "model.layers.%d.embed_tokens.weight", layer);
	w->embed = m->embed;
	if (!rc && manifest_find(&m->man, name))
		rc = get_matrix(m, &w->embed, c->vocab, h, "model.layers.%d.embed_tokens.weight", layer);
	return rc;
}

uint64_t model_expert_bytes(const struct model *m)
{
	uint64_t n = 0;
	for (size_t i = 0; i < m->man.n_expert_layers; i++)
		n += m->man.layers[i].record_bytes * (uint64_t)m->man.n_experts;
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
		const struct manifest_expert_layer *l = m->layers[i].moe ? m->layers[i].experts : NULL;
		if (!l)
			continue;
		d[i].record_bytes = l->record_bytes;
		d[i].n_experts = m->man.n_experts;
		d[i].checksums = l->checksums;
		d[i].checksum_seed = manifest_record_seed(l->layer, 0);
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

/* The container holds what config.json describes and nothing else: every
 * resident tensor is one of the family's tensors for this config, and every
 * expert file belongs to an MoE layer. A num_hidden_layers smaller than the
 * container's (which would run a silently truncated model) or a config of
 * another shape is refused here, naming the first tensor it does not
 * explain. O(tensors x specs) name compares, once at load. */
static int check_container_matches_config(struct model *m)
{
	const struct model_config *c = &m->cfg;
	struct tensor_spec *specs = NULL;
	size_t n_specs = 0;
	int rc = model_tensors_resident(c, &specs, &n_specs);
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
		if (l >= c->n_layers + c->n_mtp_layers || !c->layer_is_moe[l])
			rc = error_set(EINVAL, "%s: the container holds routed experts for layer %d, which config.json "
				       "(%d layers) does not describe as an MoE layer", m->dir, l, c->n_layers);
	}
	if (!rc && m->man.n_experts != c->n_experts && m->man.n_expert_layers)
		rc = error_set(EINVAL, "%s: the container holds %d experts per layer, config.json says %d", m->dir,
			       m->man.n_experts, c->n_experts);
	free(specs);
	return rc;
}

int model_load(struct model *m, const char *dir, const struct model_options *opt)
{
	memset(m, 0, sizeof *m);
	int rc;
	if (!(m->dir = strdup(dir)))
		return error_set(ENOMEM, "out of memory");
	if ((rc = manifest_load(&m->man, dir)) || (rc = model_config_load(&m->cfg, dir)))
		return rc;
	if (strcmp(m->man.model_type, m->cfg.model_type) != 0)
		return error_set(EINVAL, "%s: manifest model_type %s does not match config.json (%s)", dir,
				 m->man.model_type, m->cfg.model_type);
	if ((rc = check_container_matches_config(m)))
		return rc;
	if ((rc = read_resident(m)))
		return rc;
	const struct model_config *c = &m->cfg;
	/* MTP modules load when their tensors are in the container. */
	char probe[TENSOR_NAME_MAX];
	snprintf(probe, sizeof probe, "model.layers.%d.eh_proj.weight", c->n_layers);
	m->n_mtp = c->n_mtp_layers > 0 && manifest_find(&m->man, probe) ? c->n_mtp_layers : 0;
	m->layers = calloc((size_t)(c->n_layers + m->n_mtp), sizeof *m->layers);
	m->mtp = calloc((size_t)m->n_mtp + 1, sizeof *m->mtp);
	if (!m->layers || !m->mtp)
		return error_set(ENOMEM, "out of memory");
	if ((rc = get_matrix(m, &m->embed, c->vocab, c->hidden, "model.embed_tokens.weight", 0)) ||
	    (rc = get_vector(m, &m->final_norm, c->hidden, "model.norm.weight", 0)))
		return rc;
	if (manifest_find(&m->man, "lm_head.weight"))
		rc = get_matrix(m, &m->lm_head, c->vocab, c->hidden, "lm_head.weight", 0);
	else if (c->tie_embeddings)
		m->lm_head = m->embed;
	else
		rc = error_set(EINVAL, "%s/manifest.json: missing tensor lm_head.weight", dir);
	for (int i = 0; !rc && i < c->n_layers + m->n_mtp; i++)
		rc = load_layer(m, i);
	for (int i = 0; !rc && i < m->n_mtp; i++)
		rc = load_mtp(m, c->n_layers + i, &m->mtp[i]);
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
	free(m->layers);
	free(m->mtp);
	free(m->resident);
	manifest_free(&m->man);
	free(m->dir);
	memset(m, 0, sizeof *m);
}

void model_expert_part(struct qmatrix *out, const struct layer_weights *lw, const void *record,
		       enum expert_part part)
{
	const struct manifest_tensor *t = &lw->experts->parts[part];
	quant_matrix_view(out, (const uint8_t *)record + t->offset, t->type, t->shape[0], t->shape[1],
			  t->group);
}
