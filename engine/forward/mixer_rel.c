/*
 * mixer_rel — MIXER_REL: Inkling's attention (InklingAttention in
 * transformers v5.15.0), which has no RoPE. Per layer:
 *   q = q_proj(x), k = k_sconv(k_proj(x)), v = v_sconv(v_proj(x)),
 *   r = r_proj(x) (d_rel values per head): short convolutions with
 *   residual over the sequence (sconv.c);
 *   q and k RMS-normed per head; on global layers with log_n_floor set,
 *   q is scaled by tau = 1 + log_alpha * log(max((pos + 1) / floor, 1));
 *   score(t, j) = q_t.k_j / head_dim + tau * bias, bias = r_t,h .
 *   bank[:, t - j] for 0 <= t - j < extent, else 0 (the bank is the
 *   layer's rel_logits_proj.proj [d_rel, extent]);
 *   softmax over the keys the layer sees (all before t on global layers,
 *   the last sliding_window on sliding ones), times v, then o_proj.
 * Global layers have n_heads / n_kv_heads / head_dim and rel_extent;
 * sliding ones swa_* and sliding_window as both window and extent.
 *
 * State: per position the normed K then V of every KV head (2 x kv_dim
 * floats); fixed, the histories of the k and v convolutions. Shared
 * scratch: the projections, tau per row, the attention output and
 * o_proj's. Per thread: one row of biases, then scores, of ctx floats.
 */
#include <math.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "engine/forward/forward_internal.h"
#include "compute/fmath.h"

struct rel_weights {
	struct qmatrix wq;               /* [n_heads*head_dim, hidden] (the layer's heads) */
	struct qmatrix wk, wv;           /* [n_kv_heads*head_dim, hidden] */
	struct qmatrix wr;               /* [n_heads*d_rel, hidden] */
	struct qmatrix wo;               /* [hidden, n_heads*head_dim] */
	const float *q_norm, *k_norm;    /* [head_dim] */
	const float *k_conv, *v_conv;    /* [n_kv_heads*head_dim, sconv_kernel] */
	const float *bank;               /* [d_rel, extent] */
};

/* A layer's shape: its heads, its window (0: none) and its extent. */
struct rel_dims {
	int64_t heads, kv_heads, head_dim, extent, window;
	bool global;
};

static struct rel_dims rel_dims(const struct model_config *c, int layer)
{
	bool g = c->full_attention[layer];
	return (struct rel_dims){
		.heads = g ? c->n_heads : c->swa_n_heads,
		.kv_heads = g ? c->n_kv_heads : c->swa_n_kv_heads,
		.head_dim = g ? c->head_dim : c->swa_head_dim,
		.extent = g ? c->rel_extent : c->sliding_window,
		.window = g ? 0 : c->sliding_window,
		.global = g,
	};
}

struct rel_scratch {
	float *q;                        /* [batch, heads*head_dim] */
	float *k, *v;                    /* [batch, kv_heads*head_dim] */
	float *r;                        /* [batch, heads*d_rel] */
	float *tau;                      /* [batch] */
	float *att;                      /* [batch, heads*head_dim] */
	float *out;                      /* [batch, hidden] */
};

static void rel_layout(struct carve *cv, const struct model_config *c, const struct rel_dims *d, int batch,
		       struct rel_scratch *s)
{
	size_t B = (size_t)batch, F = sizeof(float);
	size_t Q = (size_t)(d->heads * d->head_dim), KV = (size_t)(d->kv_heads * d->head_dim);
	s->q = carve(cv, B * Q * F);
	s->k = carve(cv, B * KV * F);
	s->v = carve(cv, B * KV * F);
	s->r = carve(cv, B * (size_t)(d->heads * c->d_rel) * F);
	s->tau = carve(cv, B * F);
	s->att = carve(cv, B * Q * F);
	s->out = carve(cv, B * (size_t)c->hidden * F);
}

static void rel_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	struct rel_dims d = rel_dims(c, layer);
	struct carve cv = { 0 };
	struct rel_scratch s;
	rel_layout(&cv, c, &d, batch, &s);
	int64_t kv = d.kv_heads * d.head_dim;
	*out = (struct block_sizes){
		.shared_bytes = cv.used,
		.thread_bytes = (size_t)ctx * sizeof(float),
		.state_pos_bytes = 2 * (size_t)kv * sizeof(float),
		.state_fixed_bytes = 2 * sconv_state_bytes(c, kv),
	};
}

static int rel_bind(void *wp, const struct model *m, int i)
{
	struct rel_weights *w = wp;
	const struct model_config *c = &m->cfg;
	struct rel_dims d = rel_dims(c, i);
	int64_t h = c->hidden, q = d.heads * d.head_dim, kv = d.kv_heads * d.head_dim;
	struct qmatrix kc, vc, bank;
	int rc = 0;
	rc = rc ? rc : model_matrix(m, &w->wq, q, h, "model.layers.%d.self_attn.q_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wk, kv, h, "model.layers.%d.self_attn.k_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wv, kv, h, "model.layers.%d.self_attn.v_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wr, d.heads * c->d_rel, h, "model.layers.%d.self_attn.r_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->wo, h, q, "model.layers.%d.self_attn.o_proj.weight", i);
	rc = rc ? rc : model_vector(m, &w->q_norm, d.head_dim, "model.layers.%d.self_attn.q_norm.weight", i);
	rc = rc ? rc : model_vector(m, &w->k_norm, d.head_dim, "model.layers.%d.self_attn.k_norm.weight", i);
	rc = rc ? rc : model_f32_matrix(m, &kc, kv, c->sconv_kernel, "model.layers.%d.self_attn.k_sconv.conv1d.weight", i);
	rc = rc ? rc : model_f32_matrix(m, &vc, kv, c->sconv_kernel, "model.layers.%d.self_attn.v_sconv.conv1d.weight", i);
	rc = rc ? rc : model_f32_matrix(m, &bank, c->d_rel, d.extent, "model.layers.%d.self_attn.rel_logits_proj.proj", i);
	if (!rc) {
		w->k_conv = kc.data;
		w->v_conv = vc.data;
		w->bank = bank.data;
	}
	return rc;
}

struct rel_job {
	struct forward *f;
	struct rel_scratch *s;
	struct rel_dims d;
	int layer;
};

/* Task = (token, head): the biased softmax over the keys the layer lets
 * position `pos` see. */
static void rel_task(void *ctx, int task, int thread)
{
	struct rel_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	const struct rel_weights *w = f->layers[j->layer].mixer_w;
	const struct rel_dims *d = &j->d;
	int t = (int)(task / d->heads), h = (int)(task % d->heads);
	int64_t kvh = h / (d->heads / d->kv_heads), hd = d->head_dim, KV = d->kv_heads * hd, Q = d->heads * hd;
	int64_t stride = 2 * KV, R = c->d_rel;
	const float *rows = (const float *)forward_state_rows(f, t, j->layer, 0);
	const float *kc = rows + kvh * hd, *vc = rows + KV + kvh * hd;
	int64_t pos = f->row_pos[t], first = 0;
	if (d->window > 0 && pos + 1 > d->window)
		first = pos + 1 - d->window;
	int64_t n_keys = pos + 1 - first;
	struct carve tc = forward_thread(f, thread);
	float *bias = carve(&tc, (size_t)f->ctx * sizeof(float));
	const float *r = j->s->r + (size_t)t * (size_t)(d->heads * R) + h * R;
	float tau = j->s->tau[t];
	for (int64_t i = 0; i < n_keys; i++) {
		int64_t dist = pos - (first + i);
		float b = 0.0f;
		if (dist < d->extent) {
			for (int64_t e = 0; e < R; e++)
				b += r[e] * w->bank[e * d->extent + dist];
			b *= tau;
		}
		bias[i] = b;
	}
	attention_head_bias(j->s->att + (size_t)t * Q + h * hd, j->s->q + (size_t)t * Q + h * hd, kc + first * stride,
			    stride, vc + first * stride, stride, n_keys, hd, hd, 1.0f / (float)hd, bias);
}

static int rel_run(struct forward *f, int layer, int n, float *acc)
{
	const struct model_config *c = &f->m->cfg;
	const struct rel_weights *w = f->layers[layer].mixer_w;
	struct rel_dims d = rel_dims(c, layer);
	int64_t hd = d.head_dim, Q = d.heads * hd, KV = d.kv_heads * hd, H = c->hidden;
	struct carve cv = forward_shared(f);
	struct rel_scratch s;
	rel_layout(&cv, c, &d, f->batch, &s);
	matmul(f->pool, s.q, &w->wq, f->xn, n);
	matmul(f->pool, s.k, &w->wk, f->xn, n);
	matmul(f->pool, s.v, &w->wv, f->xn, n);
	matmul(f->pool, s.r, &w->wr, f->xn, n);
	size_t conv_bytes = sconv_state_bytes(c, KV);
	for (int t = 0; t < n; t++) {
		float *q = s.q + t * Q, *k = s.k + t * KV, *v = s.v + t * KV;
		/* In row order: each row advances its sequence's histories. */
		uint8_t *fixed = seq_state_fixed(&f->seqs[f->row_seq[t]], 2 * layer);
		sconv_row(k, k, w->k_conv, (float *)fixed, KV, c->sconv_kernel);
		sconv_row(v, v, w->v_conv, (float *)(fixed + conv_bytes), KV, c->sconv_kernel);
		for (int64_t h = 0; h < d.heads; h++)
			rmsnorm(q + h * hd, q + h * hd, w->q_norm, hd, c->rms_eps);
		for (int64_t h = 0; h < d.kv_heads; h++)
			rmsnorm(k + h * hd, k + h * hd, w->k_norm, hd, c->rms_eps);
		int64_t pos = f->row_pos[t];
		float tau = 1.0f;
		if (d.global && c->log_n_floor > 0) {
			float ratio = (float)(pos + 1) / (float)c->log_n_floor;
			tau = 1.0f + c->log_alpha * fm_logf(ratio > 1.0f ? ratio : 1.0f);
			for (int64_t i = 0; i < Q; i++)
				q[i] *= tau;
		}
		s.tau[t] = tau;
		float *row = (float *)forward_state_rows(f, t, layer, 0) + (size_t)pos * 2 * (size_t)KV;
		memcpy(row, k, (size_t)KV * sizeof(float));
		memcpy(row + KV, v, (size_t)KV * sizeof(float));
	}
	struct rel_job job = { f, &s, d, layer };
	int tasks = n * (int)d.heads;
	if (f->pool)
		threadpool_run(f->pool, rel_task, &job, tasks);
	else
		for (int i = 0; i < tasks; i++)
			rel_task(&job, i, 0);
	matmul(f->pool, s.out, &w->wo, s.att, n);
	for (int64_t i = 0; i < n * H; i++)
		acc[i] += s.out[i];
	return 0;
}

const struct block_kind block_rel = {
	.name = "rel",
	.id = 8,
	.weights_bytes = sizeof(struct rel_weights),
	.bind = rel_bind,
	.sizes = rel_sizes,
	.run = rel_run,
	.state_what = "K and V",
};
