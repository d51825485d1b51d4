/*
 * dsa_indexer — DeepSeek sparse attention's "lightning indexer" (DeepSeek-V3.2,
 * GLM-5): for each query, the index_topk cached positions MLA may attend to
 * (the MIXER_MLA_DSA kind of mixer_mla.c).
 *
 * Per layer, from the normed input x and the query latent qr (the same
 * q_a_layernorm(q_a_proj(x)) the MLA query starts from):
 *   q[h] = wq_b(qr) split into index_n_heads heads of index_head_dim
 *   k    = LayerNorm(wk(x)) with weight and bias (eps 1e-6), kept per position
 *          in the layer's state row beside the MLA latent
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
#include "engine/forward/dsa_indexer.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "base/error.h"

#define DSA_NORM_EPS 1e-6f /* nn.LayerNorm(index_head_dim, eps=1e-6) */
#define DSA_KEY_BLOCK 64   /* positions scored per task */

int64_t dsa_keep(const struct model_config *c, int ctx)
{
	return c->index_topk < ctx ? c->index_topk : ctx;
}

int dsa_bind(struct dsa_weights *w, const struct model *m, int i)
{
	const struct model_config *c = &m->cfg;
	int64_t ih = c->index_n_heads, id = c->index_head_dim;
	int rc = 0;
	w->indexer = i >= c->n_layers || !c->index_shared[i];
	if (!w->indexer)
		return 0;
	rc = rc ? rc : model_matrix(m, &w->wq_b, ih * id, c->q_lora_rank, "model.layers.%d.self_attn.indexer.wq_b.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wk, id, c->hidden, "model.layers.%d.self_attn.indexer.wk.weight", i);
	rc = rc ? rc : model_vector(m, &w->k_norm, id, "model.layers.%d.self_attn.indexer.k_norm.weight", i);
	rc = rc ? rc : model_vector(m, &w->k_bias, id, "model.layers.%d.self_attn.indexer.k_norm.bias", i);
	rc = rc ? rc : model_matrix(m, &w->weights, ih, c->hidden, "model.layers.%d.self_attn.indexer.weights_proj.weight", i);
	if (!rc && w->weights.type != QUANT_F32)
		rc = error_set(EINVAL, "%s: layer %d indexer weights_proj is not f32", m->dir, i);
	return rc;
}

void dsa_layout(struct carve *shared, struct carve *own, const struct model_config *c, int batch, int ctx,
		struct dsa_scratch *s, struct dsa_selection *sel)
{
	size_t B = (size_t)batch, IH = (size_t)c->index_n_heads, ID = (size_t)c->index_head_dim, F = sizeof(float);
	s->q = carve(shared, B * IH * ID * F);
	s->k = carve(shared, B * ID * F);
	s->w = carve(shared, B * IH * F);
	s->scores = carve(shared, B * (size_t)ctx * F);
	sel->sel = carve(own, B * (size_t)dsa_keep(c, ctx) * sizeof(int32_t));
	sel->nsel = carve(own, B * sizeof(int32_t));
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
	const struct dsa_scratch *s;
	const struct dsa_selection *sel;
	int layer;
	int64_t row_floats;              /* from one position's key to the next */
	int64_t key_col;                 /* where a state row holds the key */
	int n, blocks;
};

/* Task = (token, block of positions): index scores into s->scores. */
static void score_task(void *ctx, int task, int thread)
{
	(void)thread;
	struct dsa_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	int t = task / j->blocks, b = task % j->blocks;
	int64_t IH = c->index_n_heads, ID = c->index_head_dim;
	int64_t visible = f->row_pos[t] + 1, s0 = (int64_t)b * DSA_KEY_BLOCK;
	int64_t s1 = s0 + DSA_KEY_BLOCK < visible ? s0 + DSA_KEY_BLOCK : visible;
	if (visible <= dsa_keep(c, f->ctx))
		return; /* keeps every position: select_task needs no scores */
	const float *q = j->s->q + (size_t)t * IH * ID, *w = j->s->w + (size_t)t * IH;
	const float *keys = (const float *)forward_state_rows(f, t, j->layer, 0) + j->key_col; /* its sequence's */
	float *out = j->s->scores + (size_t)t * f->ctx;
	float scale = 1.0f / sqrtf((float)ID);
	for (int64_t s = s0; s < s1; s++) {
		float sum = 0;
		for (int64_t h = 0; h < IH; h++) {
			float d = dot_f32(q + h * ID, keys + s * j->row_floats, ID) * scale;
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
	int64_t visible = f->row_pos[t] + 1, keep = dsa_keep(&f->m->cfg, f->ctx);
	int32_t *sel = j->sel->sel + (size_t)t * keep;
	if (visible <= keep) {
		for (int64_t s = 0; s < visible; s++)
			sel[s] = (int32_t)s;
		j->sel->nsel[t] = (int32_t)visible;
		return;
	}
	struct carve tc = forward_thread(f, thread);
	float *scratch = carve(&tc, (size_t)f->ctx * sizeof(float));
	topk_set(sel, j->s->scores + (size_t)t * f->ctx, visible, keep, scratch);
	j->sel->nsel[t] = (int32_t)keep;
}

static void run_tasks(struct forward *f, void (*task)(void *, int, int), struct dsa_job *job, int n)
{
	if (f->pool)
		threadpool_run(f->pool, task, job, n);
	else
		for (int i = 0; i < n; i++)
			task(job, i, 0);
}

void dsa_select(struct forward *f, const struct dsa_weights *w, int layer, int n, const float *qr,
		int64_t row_floats, int64_t key_col, const struct dsa_scratch *s, const struct dsa_selection *sel)
{
	const struct model_config *c = &f->m->cfg;
	if (!w->indexer)
		return; /* the previous layer's selection for these tokens stands */
	int64_t IH = c->index_n_heads, ID = c->index_head_dim;
	matmul(f->pool, s->q, &w->wq_b, qr, n);
	matmul(f->pool, s->k, &w->wk, f->xn, n);
	matmul(f->pool, s->w, &w->weights, f->xn, n);
	float wscale = 1.0f / sqrtf((float)IH);
	for (int t = 0; t < n; t++) {
		int64_t pos = f->row_pos[t];
		float *kt = s->k + (size_t)t * ID;
		layernorm(kt, w->k_norm, w->k_bias, ID);
		forward_rope_as(f, kt, pos, c->index_rope_interleave);
		float *rows = (float *)forward_state_rows(f, t, layer, 0);
		memcpy(rows + (size_t)pos * row_floats + key_col, kt, (size_t)ID * sizeof(float));
		for (int64_t h = 0; h < IH; h++)
			forward_rope_as(f, s->q + ((size_t)t * IH + h) * ID, pos, c->index_rope_interleave);
		for (int64_t h = 0; h < IH; h++)
			s->w[t * IH + h] *= wscale;
	}
	/* Score only rows that will drop some position; blocks cover the
	 * longest visible context among the rows. */
	int64_t keep = dsa_keep(c, f->ctx), visible = 0;
	for (int t = 0; t < n; t++)
		visible = f->row_pos[t] + 1 > visible ? f->row_pos[t] + 1 : visible;
	int blocks = (int)((visible + DSA_KEY_BLOCK - 1) / DSA_KEY_BLOCK);
	struct dsa_job job = { f, s, sel, layer, row_floats, key_col, n, blocks };
	if (visible > keep)
		run_tasks(f, score_task, &job, n * blocks);
	run_tasks(f, select_task, &job, n);
}
