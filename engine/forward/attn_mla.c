/*
 * attn_mla — DeepSeek's multi-head latent attention in the absorbed form.
 *
 * The cache keeps, per layer and position, only the normed latent c_t
 * (kv_lora_rank floats) and the roped shared key k_rot_t (qk_rope_dim):
 * 576 floats for DeepSeek-V3 instead of 2 x 128 heads x 192. For head h,
 * q_nope . (W_kb_h c_t) = (W_kb_h^T q_nope) . c_t, so each query is absorbed
 * through kv_b once and attends directly over [c_t, k_rot_t]; the value
 * side sums p_t c_t in latent space and projects through W_vb_h after.
 * Prefill and decode use this same form, so they agree bit for bit.
 */
#include <string.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "engine/forward/forward_internal.h"

/* transformers builds q_a_layernorm and kv_a_layernorm with the default eps,
 * not rms_norm_eps. */
#define MLA_NORM_EPS 1e-6f

int64_t forward_head_scratch(const struct model_config *c, int batch)
{
	if (c->attn != ATTN_MLA)
		return 1;
	/* per token: absorbed query [kv_lora + rope], latent output [kv_lora],
	 * head output [v]; once: one row of kv_b [kv_lora] */
	int64_t L = c->kv_lora_rank, R = c->qk_rope_dim;
	return (int64_t)batch * (2 * L + R + c->v_head_dim) + L;
}

struct mla_job {
	struct forward *f;
	int layer, n;
};

/* Task = one head for all n tokens: each row of kv_b is dequantized once
 * and serves every token, and the value projection runs as one matmul
 * (row t bit-identical to matvec). Each token's sums keep their order. */
static void mla_task(void *ctx, int h, int thread)
{
	struct mla_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[j->layer];
	int n = j->n;
	int64_t L = c->kv_lora_rank, R = c->qk_rope_dim, NP = c->qk_nope_dim, V = c->v_head_dim;
	int64_t W = L + R, Q = forward_q_dim(c), A = forward_att_dim(c);
	float *qa = f->head_scratch + (size_t)thread * forward_head_scratch(c, f->batch); /* [n, W] */
	float *lat = qa + (size_t)n * W;                                                  /* [n, L] */
	float *out = lat + (size_t)n * L;                                                 /* [n, V] */
	float *row = out + (size_t)n * V;                                                 /* [L] */

	/* Absorb: qa_t[0..L) = W_kb_h^T q_nope_t, rows h*(NP+V) .. +NP of kv_b. */
	memset(qa, 0, (size_t)n * W * sizeof(float));
	int64_t r0 = (int64_t)h * (NP + V);
	for (int64_t i = 0; i < NP; i++) {
		quant_row_dequantize(row, &lw->kv_b, r0 + i);
		for (int t = 0; t < n; t++)
			axpy_f32(qa + (size_t)t * W, f->q[(size_t)t * Q + (size_t)h * (NP + R) + i], row, L);
	}
	const float *cache = f->k_cache + (size_t)j->layer * f->ctx * W;
	float *scratch = f->scores + (size_t)thread * f->ctx;
	for (int t = 0; t < n; t++) {
		float *qt = qa + (size_t)t * W, *lt = lat + (size_t)t * L;
		memcpy(qt + L, f->q + (size_t)t * Q + (size_t)h * (NP + R) + NP, (size_t)R * sizeof(float)); /* roped */
		if (c->dsa) {
			const int32_t *keys = f->ix_sel + (size_t)t * forward_dsa_keep(c, f->ctx);
			attention_head_keys(lt, qt, cache, W, cache, W, keys, f->ix_nsel[t], W, L, c->attn_scale, scratch);
		} else {
			attention_head(lt, qt, cache, W, cache, W, f->pos + t + 1, W, L, c->attn_scale, scratch);
		}
	}
	/* out_h = W_vb_h lat, rows h*(NP+V)+NP .. +V of kv_b. */
	struct qmatrix vb;
	quant_matrix_rows(&vb, &lw->kv_b, r0 + NP, V);
	matmul(NULL, out, &vb, lat, n);
	for (int t = 0; t < n; t++)
		memcpy(f->att + (size_t)t * A + (size_t)h * V, out + (size_t)t * V, (size_t)V * sizeof(float));
}

void attn_mla(struct forward *f, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[layer];
	int64_t L = c->kv_lora_rank, R = c->qk_rope_dim, NP = c->qk_nope_dim, W = L + R;
	int64_t Q = forward_q_dim(c), QL = c->q_lora_rank;
	float *kva = f->lat;                       /* [n, W] */
	float *qa = f->lat + (size_t)n * W;        /* [n, QL] */
	if (QL > 0) {
		matmul(f->pool, qa, &lw->q_a, f->xn, n);
		for (int t = 0; t < n; t++)
			rmsnorm(qa + t * QL, qa + t * QL, lw->q_a_norm, QL, MLA_NORM_EPS);
		matmul(f->pool, f->q, &lw->q_b, qa, n);
	} else {
		matmul(f->pool, f->q, &lw->wq, f->xn, n);
	}
	matmul(f->pool, kva, &lw->kv_a, f->xn, n);
	for (int t = 0; t < n; t++) {
		int64_t pos = f->pos + t;
		float *kv = kva + t * W;
		rmsnorm(kv, kv, lw->kv_a_norm, L, MLA_NORM_EPS);
		forward_rope(f, kv + L, pos);
		memcpy(f->k_cache + ((size_t)layer * f->ctx + (size_t)pos) * W, kv, (size_t)W * sizeof(float));
		for (int h = 0; h < c->n_heads; h++)
			forward_rope(f, f->q + t * Q + h * (NP + R) + NP, pos);
	}
	if (c->dsa)
		dsa_select(f, layer, n, qa);
	struct mla_job job = { f, layer, n };
	if (f->pool)
		threadpool_run(f->pool, mla_task, &job, c->n_heads);
	else
		for (int h = 0; h < c->n_heads; h++)
			mla_task(&job, h, 0);
}
