/*
 * mixer_mla — MIXER_MLA and MIXER_MLA_DSA: DeepSeek's multi-head latent
 * attention in the absorbed form, alone (DeepSeek-V3) or over the positions
 * the DSA indexer selects (DeepSeek-V3.2, GLM-5; dsa_indexer.c).
 *
 * The state keeps, per layer and position, only the normed latent c_t
 * (kv_lora_rank floats) and the roped shared key k_rot_t (qk_rope_dim):
 * 576 floats for DeepSeek-V3 instead of 2 x 128 heads x 192, then, for a
 * layer that runs the indexer, its key (index_head_dim floats). For head h,
 * q_nope . (W_kb_h c_t) = (W_kb_h^T q_nope) . c_t, so each query is
 * absorbed through kv_b once and attends directly over [c_t, k_rot_t]; the
 * value side sums p_t c_t in latent space and projects through W_vb_h
 * after. Prefill and decode use this same form, so they agree bit for bit.
 */
#include <errno.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "engine/forward/dsa_indexer.h"

/* transformers builds q_a_layernorm and kv_a_layernorm with the default eps,
 * not rms_norm_eps. */
#define MLA_NORM_EPS 1e-6f

struct mla_weights {
	struct qmatrix q_a;              /* [q_lora_rank, hidden]; q_lora_rank 0: unused */
	const float *q_a_norm;           /* [q_lora_rank] */
	struct qmatrix q_b;              /* [n_heads*(nope+rope), q_lora_rank] */
	struct qmatrix wq;               /* [n_heads*(nope+rope), hidden] when q_lora_rank is 0 */
	struct qmatrix kv_a;             /* [kv_lora_rank + rope, hidden] */
	const float *kv_a_norm;          /* [kv_lora_rank] */
	struct qmatrix kv_b;             /* [n_heads*(nope+v), kv_lora_rank] */
	struct qmatrix wo;               /* [hidden, n_heads*v] */
};

struct mla_dsa_weights {
	struct mla_weights mla;
	struct dsa_weights ix;
};

/* The step's buffers in the shared arena. */
struct mla_scratch {
	float *q;                        /* [batch, n_heads * (nope + rope)] */
	float *lat;                      /* [batch, kv_lora + rope + q_lora + 1]: kv_a's output, then q_a's */
	float *att;                      /* [batch, n_heads * v] */
	float *out;                      /* [batch, hidden] o_proj */
	struct dsa_scratch ix;           /* MIXER_MLA_DSA only */
};

static int64_t q_dim(const struct model_config *c)
{
	return (int64_t)c->n_heads * (c->qk_nope_dim + c->qk_rope_dim);
}

static int64_t att_dim(const struct model_config *c)
{
	return (int64_t)c->n_heads * c->v_head_dim;
}

/* Floats of one position's state: latent and rope key, then the indexer's key. */
static int64_t row_floats(const struct model_config *c, bool indexer)
{
	return (int64_t)c->kv_lora_rank + c->qk_rope_dim + (indexer ? c->index_head_dim : 0);
}

/* Whether layer l of a MIXER_MLA_DSA row runs its own indexer. */
static bool runs_indexer(const struct model_config *c, int l)
{
	return l >= c->n_layers || !c->index_shared[l];
}

/* Per-thread floats of one head's task over up to batch tokens: absorbed
 * queries [kv_lora + rope], latent outputs [kv_lora], head outputs [v] of
 * each token, one row of kv_b [kv_lora]; then a score row of ctx. */
static size_t head_floats(const struct model_config *c, int batch)
{
	int64_t L = c->kv_lora_rank, R = c->qk_rope_dim;
	return (size_t)((int64_t)batch * (2 * L + R + c->v_head_dim) + L);
}

static void mla_layout(struct carve *cv, struct carve *own, const struct model_config *c, int batch, int ctx,
		       bool dsa, struct mla_scratch *s, struct dsa_selection *sel)
{
	size_t B = (size_t)batch, F = sizeof(float);
	s->q = carve(cv, B * (size_t)q_dim(c) * F);
	s->lat = carve(cv, B * (size_t)(c->q_lora_rank + c->kv_lora_rank + c->qk_rope_dim + 1) * F);
	s->att = carve(cv, B * (size_t)att_dim(c) * F);
	s->out = carve(cv, B * (size_t)c->hidden * F);
	if (dsa)
		dsa_layout(cv, own, c, batch, ctx, &s->ix, sel);
}

static void sizes_of(const struct model_config *c, int layer, int batch, int ctx, bool dsa, struct block_sizes *out)
{
	struct carve cv = { 0 }, own = { 0 };
	struct mla_scratch s;
	struct dsa_selection sel;
	mla_layout(&cv, &own, c, batch, ctx, dsa, &s, &sel);
	*out = (struct block_sizes){
		.shared_bytes = cv.used,
		.private_bytes = own.used,
		.thread_bytes = (head_floats(c, batch) + (size_t)ctx) * sizeof(float),
		.state_pos_bytes = (size_t)row_floats(c, dsa && runs_indexer(c, layer)) * sizeof(float),
	};
}

static void mla_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	sizes_of(c, layer, batch, ctx, false, out);
}

static void mla_dsa_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	sizes_of(c, layer, batch, ctx, true, out);
}

static int mla_bind(void *wp, const struct model *m, int i)
{
	struct mla_weights *w = wp;
	const struct model_config *c = &m->cfg;
	int64_t h = c->hidden, nh = c->n_heads, qk = c->qk_nope_dim + c->qk_rope_dim;
	int rc = 0;
	if (c->q_lora_rank > 0) {
		rc = rc ? rc : model_matrix(m, &w->q_a, c->q_lora_rank, h, "model.layers.%d.self_attn.q_a_proj.weight", i);
		rc = rc ? rc : model_vector(m, &w->q_a_norm, c->q_lora_rank, "model.layers.%d.self_attn.q_a_layernorm.weight", i);
		rc = rc ? rc : model_matrix(m, &w->q_b, nh * qk, c->q_lora_rank, "model.layers.%d.self_attn.q_b_proj.weight", i);
	} else {
		rc = rc ? rc : model_matrix(m, &w->wq, nh * qk, h, "model.layers.%d.self_attn.q_proj.weight", i);
	}
	rc = rc ? rc : model_matrix(m, &w->kv_a, c->kv_lora_rank + c->qk_rope_dim, h,
				    "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", i);
	rc = rc ? rc : model_vector(m, &w->kv_a_norm, c->kv_lora_rank, "model.layers.%d.self_attn.kv_a_layernorm.weight", i);
	rc = rc ? rc : model_matrix(m, &w->kv_b, nh * (c->qk_nope_dim + c->v_head_dim), c->kv_lora_rank,
				    "model.layers.%d.self_attn.kv_b_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wo, h, nh * c->v_head_dim, "model.layers.%d.self_attn.o_proj.weight", i);
	return rc;
}

static int mla_dsa_bind(void *wp, const struct model *m, int i)
{
	struct mla_dsa_weights *w = wp;
	int rc = mla_bind(&w->mla, m, i);
	return rc ? rc : dsa_bind(&w->ix, m, i);
}

struct mla_job {
	struct forward *f;
	const struct mla_weights *w;
	const struct mla_scratch *s;
	const struct dsa_selection *sel;  /* NULL: dense causal attention */
	int layer;
	int64_t stride;                   /* floats from one position's row to the next */
	int n;
};

/* Task = one head for all n tokens: each row of kv_b is dequantized once
 * and serves every token, and the value projection runs as one matmul
 * (row t bit-identical to matvec). Each token's sums keep their order. */
static void mla_task(void *ctx, int h, int thread)
{
	struct mla_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	const struct mla_weights *w = j->w;
	int n = j->n;
	int64_t L = c->kv_lora_rank, R = c->qk_rope_dim, NP = c->qk_nope_dim, V = c->v_head_dim;
	int64_t W = L + R, Q = q_dim(c), A = att_dim(c);
	struct carve tc = forward_thread(f, thread);
	float *qa = carve(&tc, head_floats(c, f->batch) * sizeof(float)); /* [n, W] */
	float *scratch = carve(&tc, (size_t)f->ctx * sizeof(float));
	float *lat = qa + (size_t)n * W;                                  /* [n, L] */
	float *out = lat + (size_t)n * L;                                 /* [n, V] */
	float *row = out + (size_t)n * V;                                 /* [L] */

	/* Absorb: qa_t[0..L) = W_kb_h^T q_nope_t, rows h*(NP+V) .. +NP of kv_b. */
	memset(qa, 0, (size_t)n * W * sizeof(float));
	int64_t r0 = (int64_t)h * (NP + V);
	for (int64_t i = 0; i < NP; i++) {
		quant_row_dequantize(row, &w->kv_b, r0 + i);
		for (int t = 0; t < n; t++)
			axpy_f32(qa + (size_t)t * W, j->s->q[(size_t)t * Q + (size_t)h * (NP + R) + i], row, L);
	}
	for (int t = 0; t < n; t++) {
		const float *cache = (const float *)forward_state_rows(f, t, j->layer, 0); /* its sequence's */
		float *qt = qa + (size_t)t * W, *lt = lat + (size_t)t * L;
		memcpy(qt + L, j->s->q + (size_t)t * Q + (size_t)h * (NP + R) + NP, (size_t)R * sizeof(float)); /* roped */
		if (j->sel) {
			const int32_t *keys = j->sel->sel + (size_t)t * dsa_keep(c, f->ctx);
			attention_head_keys(lt, qt, cache, j->stride, cache, j->stride, keys, j->sel->nsel[t], W, L,
					    c->attn_scale, scratch);
		} else {
			attention_head(lt, qt, cache, j->stride, cache, j->stride, f->row_pos[t] + 1, W, L, c->attn_scale,
				       scratch);
		}
	}
	/* out_h = W_vb_h lat, rows h*(NP+V)+NP .. +V of kv_b. */
	struct qmatrix vb;
	quant_matrix_rows(&vb, &w->kv_b, r0 + NP, V);
	matmul(NULL, out, &vb, lat, n);
	for (int t = 0; t < n; t++)
		memcpy(j->s->att + (size_t)t * A + (size_t)h * V, out + (size_t)t * V, (size_t)V * sizeof(float));
}

static int run_of(struct forward *f, const struct block_kind *kind, int layer, int n, float *acc,
		  const struct mla_weights *w, const struct dsa_weights *ix)
{
	const struct model_config *c = &f->m->cfg;
	int64_t L = c->kv_lora_rank, R = c->qk_rope_dim, NP = c->qk_nope_dim, W = L + R;
	int64_t Q = q_dim(c), QL = c->q_lora_rank, H = c->hidden;
	struct carve cv = forward_shared(f), own = forward_own(f, kind);
	struct mla_scratch s;
	struct dsa_selection sel;
	mla_layout(&cv, &own, c, f->batch, f->ctx, ix != NULL, &s, &sel);
	int64_t stride = row_floats(c, ix && ix->indexer);
	float *kva = s.lat;                        /* [n, W] */
	float *qa = s.lat + (size_t)n * W;         /* [n, QL] */
	if (QL > 0) {
		matmul(f->pool, qa, &w->q_a, f->xn, n);
		for (int t = 0; t < n; t++)
			rmsnorm(qa + t * QL, qa + t * QL, w->q_a_norm, QL, MLA_NORM_EPS);
		matmul(f->pool, s.q, &w->q_b, qa, n);
	} else {
		matmul(f->pool, s.q, &w->wq, f->xn, n);
	}
	matmul(f->pool, kva, &w->kv_a, f->xn, n);
	for (int t = 0; t < n; t++) {
		int64_t pos = f->row_pos[t];
		float *kv = kva + t * W;
		rmsnorm(kv, kv, w->kv_a_norm, L, MLA_NORM_EPS);
		forward_rope(f, kv + L, pos);
		memcpy((float *)forward_state_rows(f, t, layer, 0) + (size_t)pos * stride, kv, (size_t)W * sizeof(float));
		for (int h = 0; h < c->n_heads; h++)
			forward_rope(f, s.q + t * Q + h * (NP + R) + NP, pos);
	}
	if (ix)
		dsa_select(f, ix, layer, n, qa, stride, W, &s.ix, &sel);
	struct mla_job job = { f, w, &s, ix ? &sel : NULL, layer, stride, n };
	if (f->pool)
		threadpool_run(f->pool, mla_task, &job, c->n_heads);
	else
		for (int h = 0; h < c->n_heads; h++)
			mla_task(&job, h, 0);
	matmul(f->pool, s.out, &w->wo, s.att, n);
	for (int64_t i = 0; i < n * H; i++)
		acc[i] += s.out[i];
	return 0;
}

static int mla_run(struct forward *f, int layer, int n, float *acc)
{
	return run_of(f, &block_mla, layer, n, acc, f->layers[layer].mixer_w, NULL);
}

static int mla_dsa_run(struct forward *f, int layer, int n, float *acc)
{
	const struct mla_dsa_weights *w = f->layers[layer].mixer_w;
	return run_of(f, &block_mla_dsa, layer, n, acc, &w->mla, &w->ix);
}

const struct block_kind block_mla = {
	.name = "mla",
	.id = 1,
	.weights_bytes = sizeof(struct mla_weights),
	.bind = mla_bind,
	.sizes = mla_sizes,
	.run = mla_run,
	.state_what = "MLA latent and rope key",
};

const struct block_kind block_mla_dsa = {
	.name = "mla_dsa",
	.id = 2,
	.weights_bytes = sizeof(struct mla_dsa_weights),
	.bind = mla_dsa_bind,
	.sizes = mla_dsa_sizes,
	.run = mla_dsa_run,
	.state_what = "MLA latent, rope key and DSA indexer key",
};
