/*
 * mixer_gqa — MIXER_GQA: grouped-query attention (OLMoE, Qwen3, Mixtral,
 * GLM-4.5, and the gated full attention of Qwen3.5 / Qwen3-Next): q/k/v
 * projections with optional biases, q/k RMSNorm over heads or whole
 * vectors, optional clipping, (partial) RoPE, causal attention of each
 * query head over its KV head's cache in its row's sequence, optionally
 * windowed (Mixtral), optionally gated (attn_gate: q_proj also emits, per
 * head, head_dim gates and the attention output is multiplied by their
 * sigmoid, as Qwen3_5MoeAttention in transformers v5.15.0), then o_proj.
 *
 * State: per position, the roped K then V of every KV head (2 x kv_dim
 * floats). Shared scratch: q, k, v, the gates, the attention output and
 * o_proj's. Per thread: one score row of ctx floats.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "engine/forward/forward_internal.h"
#include "compute/fmath.h"

struct gqa_weights {
	struct qmatrix wq;               /* [n_heads*head_dim, hidden]; attn_gate: [n_heads*2*head_dim, hidden],
					  * each head's query rows then its gate rows */
	struct qmatrix wk;               /* [n_kv_heads*head_dim, hidden] */
	struct qmatrix wv;               /* [n_kv_heads*head_dim, hidden] */
	struct qmatrix wo;               /* [hidden, n_heads*head_dim] */
	const float *bq, *bk, *bv;       /* q/k/v biases (attn_bias), else NULL */
	const float *bo;                 /* o_proj bias (attn_o_bias), else NULL */
	const float *sinks;              /* [n_heads] (attn_sinks), else NULL */
	const float *q_norm;             /* [head_dim] or [n_heads*head_dim]; NULL if none */
	const float *k_norm;             /* [head_dim] or [n_kv_heads*head_dim] */
};

/* The step's buffers in the shared arena. */
struct gqa_scratch {
	float *qg;                       /* [batch, 2*q_dim] q_proj's output with attn_gate */
	float *gate;                     /* [batch, q_dim] the gates, with attn_gate */
	float *q;                        /* [batch, q_dim] */
	float *k, *v;                    /* [batch, kv_dim] */
	float *att;                      /* [batch, q_dim] */
	float *out;                      /* [batch, hidden] o_proj */
};

static int64_t q_dim(const struct model_config *c)
{
	return (int64_t)c->n_heads * c->head_dim;
}

static int64_t kv_dim(const struct model_config *c)
{
	return (int64_t)c->n_kv_heads * c->head_dim;
}

static void gqa_layout(struct carve *cv, const struct model_config *c, int batch, struct gqa_scratch *s)
{
	size_t B = (size_t)batch, F = sizeof(float), G = c->attn_gate ? 1 : 0;
	s->qg = carve(cv, G * B * 2 * (size_t)q_dim(c) * F);
	s->gate = carve(cv, G * B * (size_t)q_dim(c) * F);
	s->q = carve(cv, B * (size_t)q_dim(c) * F);
	s->k = carve(cv, B * (size_t)kv_dim(c) * F);
	s->v = carve(cv, B * (size_t)kv_dim(c) * F);
	s->att = carve(cv, B * (size_t)q_dim(c) * F);
	s->out = carve(cv, B * (size_t)c->hidden * F);
}

static void gqa_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	struct carve cv = { 0 };
	struct gqa_scratch s;
	gqa_layout(&cv, c, batch, &s);
	*out = (struct block_sizes){
		.shared_bytes = cv.used,
		.thread_bytes = (size_t)ctx * sizeof(float),
		.state_pos_bytes = 2 * (size_t)kv_dim(c) * sizeof(float),
	};
}

static int gqa_bind(void *wp, const struct model *m, int i)
{
	struct gqa_weights *w = wp;
	const struct model_config *c = &m->cfg;
	int64_t h = c->hidden, q = q_dim(c), kv = kv_dim(c);
	int rc = 0;
	rc = rc ? rc : model_matrix(m, &w->wq, c->attn_gate ? 2 * q : q, h, "model.layers.%d.self_attn.q_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wk, kv, h, "model.layers.%d.self_attn.k_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wv, kv, h, "model.layers.%d.self_attn.v_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wo, h, q, "model.layers.%d.self_attn.o_proj.weight", i);
	if (!rc && c->attn_bias) {
		rc = model_vector(m, &w->bq, q, "model.layers.%d.self_attn.q_proj.bias", i);
		rc = rc ? rc : model_vector(m, &w->bk, kv, "model.layers.%d.self_attn.k_proj.bias", i);
		rc = rc ? rc : model_vector(m, &w->bv, kv, "model.layers.%d.self_attn.v_proj.bias", i);
	}
	if (!rc && c->attn_o_bias)
		rc = model_vector(m, &w->bo, h, "model.layers.%d.self_attn.o_proj.bias", i);
	if (!rc && c->attn_sinks)
		rc = model_vector(m, &w->sinks, c->n_heads, "model.layers.%d.self_attn.sinks", i);
	if (!rc && c->qk_norm != QK_NORM_NONE) {
		bool full = c->qk_norm == QK_NORM_FULL;
		rc = model_vector(m, &w->q_norm, full ? q : c->head_dim, "model.layers.%d.self_attn.q_norm.weight", i);
		rc = rc ? rc : model_vector(m, &w->k_norm, full ? kv : c->head_dim, "model.layers.%d.self_attn.k_norm.weight",
					    i);
	}
	return rc;
}

struct gqa_job {
	struct forward *f;
	struct gqa_scratch *s;
	int layer;
};

/* Task = (token, head): causal attention over positions 0..at+token. */
static void gqa_task(void *ctx, int task, int thread)
{
	struct gqa_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	int t = task / c->n_heads, h = task % c->n_heads;
	int kvh = h / (c->n_heads / c->n_kv_heads);
	int64_t KV = kv_dim(c), hd = c->head_dim, Q = q_dim(c), stride = 2 * KV;
	/* Its sequence's state: [ctx][K | V]. */
	const float *rows = (const float *)forward_state_rows(f, t, j->layer, 0);
	const float *kc = rows + kvh * hd, *vc = rows + KV + kvh * hd;
	/* Keys 0..pos are visible, or the last sliding_window of them. */
	int64_t pos = f->row_pos[t], first = 0;
	if (c->sliding_window > 0 && !c->full_attention[j->layer] && pos + 1 > c->sliding_window)
		first = pos + 1 - c->sliding_window;
	struct carve tc = forward_thread(f, thread);
	float *scores = carve(&tc, (size_t)f->ctx * sizeof(float));
	float *out = j->s->att + (size_t)t * Q + h * hd;
	const float *q = j->s->q + (size_t)t * Q + h * hd;
	const float *sinks = ((const struct gqa_weights *)f->layers[j->layer].mixer_w)->sinks;
	if (sinks)
		attention_head_sink(out, q, kc + first * stride, stride, vc + first * stride, stride, pos + 1 - first, hd,
				    hd, c->attn_scale, sinks[h], scores);
	else
		attention_head(out, q, kc + first * stride, stride, vc + first * stride, stride, pos + 1 - first, hd, hd,
			       c->attn_scale, scores);
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

static int gqa_run(struct forward *f, int layer, int n, float *acc)
{
	const struct model_config *c = &f->m->cfg;
	const struct gqa_weights *w = f->layers[layer].mixer_w;
	int64_t Q = q_dim(c), KV = kv_dim(c), hd = c->head_dim, H = c->hidden;
	struct carve cv = forward_shared(f);
	struct gqa_scratch s;
	gqa_layout(&cv, c, f->batch, &s);
	if (c->attn_gate) {
		/* Per head: head_dim queries, then head_dim gates. */
		matmul(f->pool, s.qg, &w->wq, f->xn, n);
		for (int64_t r = 0; r < (int64_t)n * c->n_heads; r++) {
			memcpy(s.q + r * hd, s.qg + r * 2 * hd, (size_t)hd * sizeof(float));
			memcpy(s.gate + r * hd, s.qg + r * 2 * hd + hd, (size_t)hd * sizeof(float));
		}
	} else {
		matmul(f->pool, s.q, &w->wq, f->xn, n);
	}
	matmul(f->pool, s.k, &w->wk, f->xn, n);
	matmul(f->pool, s.v, &w->wv, f->xn, n);
	for (int t = 0; t < n; t++) {
		float *q = s.q + t * Q, *k = s.k + t * KV, *v = s.v + t * KV;
		add_bias(q, w->bq, Q);
		add_bias(k, w->bk, KV);
		add_bias(v, w->bv, KV);
		if (c->qk_norm == QK_NORM_FULL) {
			rmsnorm(q, q, w->q_norm, Q, c->rms_eps);
			rmsnorm(k, k, w->k_norm, KV, c->rms_eps);
		} else if (c->qk_norm == QK_NORM_HEAD) {
			for (int h = 0; h < c->n_heads; h++)
				rmsnorm(q + h * hd, q + h * hd, w->q_norm, hd, c->rms_eps);
			for (int h = 0; h < c->n_kv_heads; h++)
				rmsnorm(k + h * hd, k + h * hd, w->k_norm, hd, c->rms_eps);
		}
		if (c->clip_qkv > 0) {
			clip(q, Q, c->clip_qkv);
			clip(k, KV, c->clip_qkv);
			clip(v, KV, c->clip_qkv);
		}
		int64_t pos = f->row_pos[t];
		for (int h = 0; h < c->n_heads; h++)
			forward_rope(f, q + h * hd, pos);
		for (int h = 0; h < c->n_kv_heads; h++)
			forward_rope(f, k + h * hd, pos);
		float *row = (float *)forward_state_rows(f, t, layer, 0) + (size_t)pos * 2 * KV;
		memcpy(row, k, KV * sizeof(float));
		memcpy(row + KV, v, KV * sizeof(float));
	}
	struct gqa_job job = { f, &s, layer };
	if (f->pool)
		threadpool_run(f->pool, gqa_task, &job, n * c->n_heads);
	else
		for (int i = 0; i < n * c->n_heads; i++)
			gqa_task(&job, i, 0);
	if (c->attn_gate)
		for (int64_t i = 0; i < n * Q; i++)
			s.att[i] *= fm_sigmoidf(s.gate[i]);
	matmul(f->pool, s.out, &w->wo, s.att, n);
	for (int t = 0; t < n; t++)
		add_bias(s.out + t * H, w->bo, H);
	for (int64_t i = 0; i < n * H; i++)
		acc[i] += s.out[i];
	return 0;
}

const struct block_kind block_gqa = {
	.name = "gqa",
	.id = 0,
	.weights_bytes = sizeof(struct gqa_weights),
	.bind = gqa_bind,
	.sizes = gqa_sizes,
	.run = gqa_run,
	.state_what = "K and V",
};
