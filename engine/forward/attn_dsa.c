/*
 * attn_dsa — DeepSeek sparse attention's "lightning indexer" (DeepSeek-V3.2,
 * GLM-5): for each query, the index_topk cached positions MLA may attend to.
 *
 * Per layer, from the normed input x and the query latent qr (the same
 * q_a_layernorm(q_a_proj(x)) the MLA query starts from):
 *   q[h] = wq_b(qr) split into index_n_heads heads of index_head_dim
 *   k    = LayerNorm(wk(x)) with weight and bias (eps 1e-6), cached per position
 *   RoPE on the first qk_rope_dim dims of every q head and of k (its own
 *   pairing, index_rope_interleave: rotate-half for DeepSeek-V3.2,
 *   interleaved pairs for GLM-5, as transformers v5.15.0 has them)
 *   w[h] = weights_proj(x)[h] / sqrt(index_n_heads)
 *   score(s) = sum_h w[h] * relu(q[h] . k_s / sqrt(index_head_dim)), s <= pos
 * and keeps the index_topk best positions; with fewer visible positions it
 * keeps them all, which is what selecting among causally masked scores
 * comes to. transformers' DeepseekV32Indexer and GlmMoeDsaIndexer compute
 * the same; DeepSeek's own kernel adds a Hadamard rotation (q.k unchanged)
 * and fp8 rounding, which exact arithmetic skips. GLM-5 layers marked
 * "shared" reuse the selection of the layer before.
 *
 * Ties at the cut: exact ties are common (with few indexer heads, every
 * head's relu can be 0.0 for several positions, so their scores are all
 * exactly 0). colibri keeps the earlier position of a tie (topk_set), at
 * every thread count and batch size. torch.topk's order among equal values
 * is implementation-defined on CPU, so a reference that must agree with
 * this choice cannot rest on a tie: the exactness fixtures redraw their
 * prompts until every selection has a margin at the cut (tools/reference.py
 * --min-margin), as the MoE routing fixtures do.
 */
#include <math.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "engine/forward/forward_internal.h"

#define DSA_NORM_EPS 1e-6f /* nn.LayerNorm(index_head_dim, eps=1e-6) */
#define DSA_KEY_BLOCK 64   /* positions scored per task */

int64_t forward_dsa_keep(const struct model_config *c, int ctx)
{
	if (!c->dsa)
		return 0;
	return c->index_topk < ctx ? c->index_topk : ctx;
}

static void layernorm(float *x, const float *w, const float *b, int64_t n)
{
	double mean = 0, var = 0;
	for (int64_t i = 0; i < n; i++)
		mean += x[i];
	mean /= (double)n;
	for (int64_t i = 0; i < n; i++)
		var += (x[i] - mean) * (x[i] - mean);
	var /= (double)n;
	float inv = (float)(1.0 / sqrt(var + DSA_NORM_EPS));
	for (int64_t i = 0; i < n; i++)
		x[i] = ((float)(x[i] - mean) * inv) * w[i] + b[i];
}

struct dsa_job {
	struct forward *f;
	int layer, n, blocks;
};

/* Task = (token, block of positions): index scores into f->ix_scores. */
static void score_task(void *ctx, int task, int thread)
{
	(void)thread;
	struct dsa_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	int t = task / j->blocks, b = task % j->blocks;
	int64_t IH = c->index_n_heads, ID = c->index_head_dim;
	int64_t visible = f->pos + t + 1, s0 = (int64_t)b * DSA_KEY_BLOCK;
	int64_t s1 = s0 + DSA_KEY_BLOCK < visible ? s0 + DSA_KEY_BLOCK : visible;
	if (visible <= forward_dsa_keep(c, f->ctx))
		return; /* keeps every position: select_task needs no scores */
	const float *q = f->ix_q + (size_t)t * IH * ID, *w = f->ix_w + (size_t)t * IH;
	const float *keys = f->ix_k_cache + (size_t)j->layer * f->ctx * ID;
	float *out = f->ix_scores + (size_t)t * f->ctx;
	float scale = 1.0f / sqrtf((float)ID);
	for (int64_t s = s0; s < s1; s++) {
		float sum = 0;
		for (int64_t h = 0; h < IH; h++) {
			float d = dot_f32(q + h * ID, keys + s * ID, ID) * scale;
			sum += w[h] * (d > 0 ? d : 0.0f);
		}
		out[s] = sum;
	}
}

/* Task = token: its kept positions. */
static void select_task(void *ctx, int t, int thread)
{
	struct dsa_job *j = ctx;
	struct forward *f = j->f;
	int64_t visible = f->pos + t + 1, keep = forward_dsa_keep(&f->m->cfg, f->ctx);
	int32_t *sel = f->ix_sel + (size_t)t * keep;
	if (visible <= keep) {
		for (int64_t s = 0; s < visible; s++)
			sel[s] = (int32_t)s;
		f->ix_nsel[t] = (int32_t)visible;
		return;
	}
	topk_set(sel, f->ix_scores + (size_t)t * f->ctx, visible, keep, f->scores + (size_t)thread * f->ctx);
	f->ix_nsel[t] = (int32_t)keep;
}

void dsa_select(struct forward *f, int layer, int n, const float *qr)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[layer];
	if (c->index_shared[layer] && layer < c->n_layers)
		return; /* the previous layer's selection for these tokens stands */
	int64_t IH = c->index_n_heads, ID = c->index_head_dim;
	float *k = f->ix_k; /* [n, ID] */
	matmul(f->pool, f->ix_q, &lw->ix_wq_b, qr, n);
	matmul(f->pool, k, &lw->ix_wk, f->xn, n);
	matmul(f->pool, f->ix_w, &lw->ix_weights, f->xn, n);
	float wscale = 1.0f / sqrtf((float)IH);
	for (int t = 0; t < n; t++) {
		int64_t pos = f->pos + t;
		float *kt = k + (size_t)t * ID;
		layernorm(kt, lw->ix_k_norm, lw->ix_k_bias, ID);
		forward_rope_as(f, kt, pos, c->index_rope_interleave);
		memcpy(f->ix_k_cache + ((size_t)layer * f->ctx + (size_t)pos) * ID, kt, (size_t)ID * sizeof(float));
		for (int64_t h = 0; h < IH; h++)
			forward_rope_as(f, f->ix_q + ((size_t)t * IH + h) * ID, pos, c->index_rope_interleave);
		for (int64_t h = 0; h < IH; h++)
			f->ix_w[t * IH + h] *= wscale;
	}
	/* Score only tokens that will drop some position. */
	int64_t keep = forward_dsa_keep(c, f->ctx);
	int blocks = (int)((f->pos + n + DSA_KEY_BLOCK - 1) / DSA_KEY_BLOCK);
	struct dsa_job job = { f, layer, n, blocks };
	if (f->pos + n > keep) {
		if (f->pool)
			threadpool_run(f->pool, score_task, &job, n * blocks);
		else
			for (int i = 0; i < n * blocks; i++)
				score_task(&job, i, 0);
	}
	if (f->pool)
		threadpool_run(f->pool, select_task, &job, n);
	else
		for (int t = 0; t < n; t++)
			select_task(&job, t, 0);
}
