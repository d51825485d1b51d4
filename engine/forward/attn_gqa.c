/*
 * attn_gqa — grouped-query attention (OLMoE, Qwen3, Mixtral, GLM): q/k/v
 * projections with optional biases, q/k RMSNorm over heads or whole
 * vectors, optional clipping, (partial) RoPE, and causal attention of each
 * query head over its KV head's cache, optionally windowed (Mixtral).
 */
#include <math.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "engine/forward/forward_internal.h"

int64_t forward_q_dim(const struct model_config *c)
{
	if (c->attn == ATTN_MLA)
		return (int64_t)c->n_heads * (c->qk_nope_dim + c->qk_rope_dim);
	return (int64_t)c->n_heads * c->head_dim;
}

int64_t forward_kv_dim(const struct model_config *c)
{
	return c->attn == ATTN_MLA ? 1 : (int64_t)c->n_kv_heads * c->head_dim;
}

int64_t forward_att_dim(const struct model_config *c)
{
	if (c->attn == ATTN_MLA)
		return (int64_t)c->n_heads * c->v_head_dim;
	return (int64_t)c->n_heads * c->head_dim;
}

int64_t forward_k_cache_dim(const struct model_config *c)
{
	if (c->attn == ATTN_MLA)
		return (int64_t)c->kv_lora_rank + c->qk_rope_dim;
	return forward_kv_dim(c);
}

int64_t forward_v_cache_dim(const struct model_config *c)
{
	return c->attn == ATTN_MLA ? 0 : forward_kv_dim(c);
}

void forward_rope(const struct forward *f, float *x, int64_t pos)
{
	forward_rope_as(f, x, pos, f->m->cfg.rope_interleave);
}

void forward_rope_as(const struct forward *f, float *x, int64_t pos, int interleave)
{
	const struct model_config *c = &f->m->cfg;
	rope(x, c->rot_dim, pos, f->inv_freq, interleave ? ROPE_GPTJ : ROPE_NEOX);
	if (c->rope_attn_factor != 1.0f)
		for (int64_t i = 0; i < c->rot_dim; i++)
			x[i] *= c->rope_attn_factor;
}

struct gqa_job {
	struct forward *f;
	int layer;
};

/* Task = (token, head): causal attention over positions 0..pos+token. */
static void gqa_task(void *ctx, int task, int thread)
{
	struct gqa_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	int t = task / c->n_heads, h = task % c->n_heads;
	int kvh = h / (c->n_heads / c->n_kv_heads);
	int64_t KV = forward_kv_dim(c), hd = c->head_dim, Q = forward_q_dim(c);
	const float *kc = f->k_cache + (size_t)j->layer * f->ctx * KV + kvh * hd;
	const float *vc = f->v_cache + (size_t)j->layer * f->ctx * KV + kvh * hd;
	/* Keys 0..pos are visible, or the last sliding_window of them. */
	int64_t pos = f->pos + t, first = 0;
	if (c->sliding_window > 0 && pos + 1 > c->sliding_window)
		first = pos + 1 - c->sliding_window;
	attention_head(f->att + (size_t)t * Q + h * hd, f->q + (size_t)t * Q + h * hd, kc + first * KV, KV,
		       vc + first * KV, KV, pos + 1 - first, hd, hd, c->attn_scale,
		       f->scores + (size_t)thread * f->ctx);
}

static void clip(float *x, int64_t n, float c)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = x[i] < -c ? -c : (x[i] > c ? c : x[i]);
}

static void add_bias(float *x, const float *b, int64_t n)
{
	if (b)
		for (int64_t i = 0; i < n; i++)
			x[i] += b[i];
}

void attn_gqa(struct forward *f, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[layer];
	int64_t Q = forward_q_dim(c), KV = forward_kv_dim(c), hd = c->head_dim;
	matmul(f->pool, f->q, &lw->wq, f->xn, n);
	matmul(f->pool, f->k, &lw->wk, f->xn, n);
	matmul(f->pool, f->v, &lw->wv, f->xn, n);
	for (int t = 0; t < n; t++) {
		float *q = f->q + t * Q, *k = f->k + t * KV, *v = f->v + t * KV;
		add_bias(q, lw->bq, Q);
		add_bias(k, lw->bk, KV);
		add_bias(v, lw->bv, KV);
		if (c->qk_norm == QK_NORM_FULL) {
			rmsnorm(q, q, lw->q_norm, Q, c->rms_eps);
			rmsnorm(k, k, lw->k_norm, KV, c->rms_eps);
		} else if (c->qk_norm == QK_NORM_HEAD) {
			for (int h = 0; h < c->n_heads; h++)
				rmsnorm(q + h * hd, q + h * hd, lw->q_norm, hd, c->rms_eps);
			for (int h = 0; h < c->n_kv_heads; h++)
				rmsnorm(k + h * hd, k + h * hd, lw->k_norm, hd, c->rms_eps);
		}
		if (c->clip_qkv > 0) {
			clip(q, Q, c->clip_qkv);
			clip(k, KV, c->clip_qkv);
			clip(v, KV, c->clip_qkv);
		}
		int64_t pos = f->pos + t;
		for (int h = 0; h < c->n_heads; h++)
			forward_rope(f, q + h * hd, pos);
		for (int h = 0; h < c->n_kv_heads; h++)
			forward_rope(f, k + h * hd, pos);
		size_t at = ((size_t)layer * f->ctx + (size_t)pos) * KV;
		memcpy(f->k_cache + at, k, KV * sizeof(float));
		memcpy(f->v_cache + at, v, KV * sizeof(float));
	}
	struct gqa_job job = { f, layer };
	if (f->pool)
		threadpool_run(f->pool, gqa_task, &job, n * c->n_heads);
	else
		for (int i = 0; i < n * c->n_heads; i++)
			gqa_task(&job, i, 0);
}
