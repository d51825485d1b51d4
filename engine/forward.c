/*
 * forward — see forward.h. One step over a chunk of n tokens:
 *   for each layer:
 *     attention block: norm -> q,k,v (matmul over the chunk) -> q/k norm ->
 *       RoPE -> append k,v to the cache -> causal attention per (token, head)
 *       -> o_proj -> residual
 *     FFN block: norm -> dense SwiGLU, or the MoE path:
 *       route (softmax top-k) -> union of the chunk's experts -> request from
 *       the store -> for each delivered expert, its tokens through SwiGLU ->
 *       release -> weighted sum per token in top-k order -> residual
 *   final norm -> lm_head for the requested rows.
 */
#include "engine/forward.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "storage/error.h"

static int64_t q_dim(const struct model_config *c)
{
	return (int64_t)c->n_heads * c->head_dim;
}

static int64_t kv_dim(const struct model_config *c)
{
	return (int64_t)c->n_kv_heads * c->head_dim;
}

static void *zalloc(size_t n)
{
	return calloc(n ? n : 1, 1);
}

int forward_init(struct forward *f, const struct model *m, struct threadpool *pool, int ctx,
		 int batch)
{
	memset(f, 0, sizeof *f);
	const struct model_config *c = &m->cfg;
	f->m = m;
	f->pool = pool;
	f->ctx = ctx;
	f->batch = batch;
	f->n_threads = pool ? threadpool_size(pool) : 1;
	size_t B = (size_t)batch, H = (size_t)c->hidden, Q = (size_t)q_dim(c), KV = (size_t)kv_dim(c);
	size_t K = (size_t)(c->top_k > 0 ? c->top_k : 1), E = (size_t)(c->n_experts > 0 ? c->n_experts : 1);
	size_t I = (size_t)(c->moe_intermediate > c->intermediate ? c->moe_intermediate : c->intermediate);
	size_t cache = (size_t)c->n_layers * (size_t)ctx * KV * sizeof(float);
	f->k_cache = zalloc(cache);
	f->v_cache = zalloc(cache);
	f->x = zalloc(B * H * sizeof(float));
	f->xn = zalloc(B * H * sizeof(float));
	f->q = zalloc(B * Q * sizeof(float));
	f->k = zalloc(B * KV * sizeof(float));
	f->v = zalloc(B * KV * sizeof(float));
	f->att = zalloc(B * Q * sizeof(float));
	f->tmp = zalloc(B * H * sizeof(float));
	f->router_logits = zalloc(B * E * sizeof(float));
	f->sel = zalloc(B * K * sizeof(int32_t));
	f->sel_w = zalloc(B * K * sizeof(float));
	f->expert_out = zalloc(B * K * H * sizeof(float));
	f->e_in = zalloc(B * H * sizeof(float));
	f->e_gate = zalloc(B * I * sizeof(float));
	f->e_up = zalloc(B * I * sizeof(float));
	f->e_down = zalloc(B * H * sizeof(float));
	f->e_tok = zalloc(B * sizeof(int32_t));
	f->e_slot = zalloc(B * sizeof(int32_t));
	f->wanted = zalloc(E * sizeof(int32_t));
	f->scores = zalloc((size_t)f->n_threads * (size_t)ctx * sizeof(float));
	f->inv_freq = zalloc((size_t)c->head_dim / 2 * sizeof(float));
	f->pred_in = zalloc(B * H * sizeof(float));
	f->pred_logits = zalloc(B * E * sizeof(float));
	f->pred_sel = zalloc(B * K * sizeof(int32_t));
	f->predicted = zalloc((size_t)c->n_layers * E * sizeof(int32_t));
	f->prefetch = true;
	if (!f->k_cache || !f->v_cache || !f->x || !f->xn || !f->q || !f->k || !f->v || !f->att ||
	    !f->tmp || !f->router_logits || !f->sel || !f->sel_w || !f->expert_out || !f->e_in ||
	    !f->e_gate || !f->e_up || !f->e_down || !f->e_tok || !f->e_slot || !f->wanted ||
	    !f->scores || !f->inv_freq || !f->pred_in || !f->pred_logits || !f->pred_sel ||
	    !f->predicted) {
		forward_free(f);
		return error_set(ENOMEM, "cannot allocate the KV cache (%zu MiB) and scratch for %d positions",
				 2 * cache >> 20, ctx);
	}
	/* HF default RoPE: inv_freq[i] = theta^(-2i / head_dim), computed in f32
	 * from an integer arange as transformers does. */
	for (int i = 0; i < c->head_dim / 2; i++)
		f->inv_freq[i] = (float)(1.0 / pow((double)c->rope_theta, (double)(2 * i) / c->head_dim));
	return 0;
}

void forward_free(struct forward *f)
{
	void *bufs[] = { f->k_cache, f->v_cache, f->x, f->xn, f->q, f->k, f->v, f->att, f->tmp,
			 f->router_logits, f->sel, f->sel_w, f->expert_out, f->e_in, f->e_gate,
			 f->e_up, f->e_down, f->e_tok, f->e_slot, f->wanted, f->scores, f->inv_freq,
			 f->pred_in, f->pred_logits, f->pred_sel, f->predicted };
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		free(bufs[i]);
	memset(f, 0, sizeof *f);
}

void forward_reset(struct forward *f)
{
	f->pos = 0;
}

struct attn_job {
	struct forward *f;
	int layer;
	int n;
};

/* Task = (token, head): causal attention over positions 0..pos+token. */
static void attn_task(void *ctx, int task, int thread)
{
	struct attn_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	int t = task / c->n_heads, h = task % c->n_heads;
	int kvh = h / (c->n_heads / c->n_kv_heads);
	int64_t KV = kv_dim(c), hd = c->head_dim;
	const float *kc = f->k_cache + (size_t)j->layer * f->ctx * KV + kvh * hd;
	const float *vc = f->v_cache + (size_t)j->layer * f->ctx * KV + kvh * hd;
	/* Keys 0..pos are visible, or the last sliding_window of them. */
	int64_t pos = f->pos + t, first = 0;
	if (c->sliding_window > 0 && pos + 1 > c->sliding_window)
		first = pos + 1 - c->sliding_window;
	attention_head(f->att + (size_t)t * q_dim(c) + h * hd, f->q + (size_t)t * q_dim(c) + h * hd,
		       kc + first * KV, KV, vc + first * KV, KV, pos + 1 - first, hd, hd,
		       1.0f / sqrtf((float)hd), f->scores + (size_t)thread * f->ctx);
}

static void clip(float *x, int64_t n, float c)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = x[i] < -c ? -c : (x[i] > c ? c : x[i]);
}

static void attention_block(struct forward *f, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[layer];
	int64_t H = c->hidden, Q = q_dim(c), KV = kv_dim(c), hd = c->head_dim;
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, lw->attn_norm, H, c->rms_eps);
	matmul(f->pool, f->q, &lw->wq, f->xn, n);
	matmul(f->pool, f->k, &lw->wk, f->xn, n);
	matmul(f->pool, f->v, &lw->wv, f->xn, n);
	for (int t = 0; t < n; t++) {
		float *q = f->q + t * Q, *k = f->k + t * KV, *v = f->v + t * KV;
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
			rope(q + h * hd, hd, pos, f->inv_freq, ROPE_NEOX);
		for (int h = 0; h < c->n_kv_heads; h++)
			rope(k + h * hd, hd, pos, f->inv_freq, ROPE_NEOX);
		size_t at = ((size_t)layer * f->ctx + (size_t)pos) * KV;
		memcpy(f->k_cache + at, k, KV * sizeof(float));
		memcpy(f->v_cache + at, v, KV * sizeof(float));
	}
	struct attn_job job = { f, layer, n };
	if (f->pool)
		threadpool_run(f->pool, attn_task, &job, n * c->n_heads);
	else
		for (int i = 0; i < n * c->n_heads; i++)
			attn_task(&job, i, 0);
	matmul(f->pool, f->tmp, &lw->wo, f->att, n);
	for (int64_t i = 0; i < n * H; i++)
		f->x[i] += f->tmp[i];
}

/* gate/up/down SwiGLU over m rows of in[] into out[]. */
static void swiglu_ffn(struct forward *f, const struct qmatrix *g, const struct qmatrix *u,
		       const struct qmatrix *d, const float *in, int m, float *out)
{
	matmul(f->pool, f->e_gate, g, in, m);
	matmul(f->pool, f->e_up, u, in, m);
	swiglu(f->e_gate, f->e_gate, f->e_up, (int64_t)m * g->rows);
	matmul(f->pool, out, d, f->e_gate, m);
}

/* Softmax over all experts, top-k of the probabilities, optional
 * renormalisation: the order of operations of the HF routers. */
static void route(struct forward *f, int n)
{
	const struct model_config *c = &f->m->cfg;
	int E = c->n_experts, K = c->top_k;
	for (int t = 0; t < n; t++) {
		float *p = f->router_logits + (size_t)t * E;
		softmax(p, E);
		int32_t *sel = f->sel + (size_t)t * K;
		float *w = f->sel_w + (size_t)t * K;
		topk(sel, p, E, K);
		float sum = 0;
		for (int k = 0; k < K; k++) {
			w[k] = p[sel[k]];
			sum += w[k];
		}
		if (c->norm_topk_prob)
			for (int k = 0; k < K; k++)
				w[k] /= sum;
	}
}

/* The next MoE layer after `layer`, or -1. */
static int next_moe_layer(const struct model *m, int layer)
{
	for (int l = layer + 1; l < m->cfg.n_layers; l++)
		if (m->layers[l].moe)
			return l;
	return -1;
}

/* Predicts the experts of the next MoE layer by running its router on this
 * layer's residual stream (normed with its own FFN norm) and starts their
 * reads at low priority. The prediction never touches the computation:
 * prefetch on or off, the logits are the same bits. */
static void prefetch_next(struct forward *f, int layer, int n)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	int next = next_moe_layer(m, layer);
	if (!f->prefetch || next < 0)
		return;
	const struct layer_weights *lw = &m->layers[next];
	int64_t H = c->hidden;
	int E = c->n_experts, K = c->top_k;
	for (int t = 0; t < n; t++)
		rmsnorm(f->pred_in + t * H, f->x + t * H, lw->ffn_norm, H, c->rms_eps);
	matmul(f->pool, f->pred_logits, &lw->router, f->pred_in, n);
	int32_t *mark = f->predicted + (size_t)next * E;
	memset(mark, 0, (size_t)E * sizeof *mark);
	for (int t = 0; t < n; t++) {
		/* Softmax is monotone: top-k of the logits is top-k of the probabilities. */
		topk(f->pred_sel + t * K, f->pred_logits + (size_t)t * E, E, K);
		for (int k = 0; k < K; k++)
			mark[f->pred_sel[t * K + k]] = 1;
	}
	int np = 0;
	for (int e = 0; e < E; e++)
		if (mark[e])
			f->pred_sel[np++] = e; /* pred_sel reused as the id list */
	f->pf.predicted += (uint64_t)np;
	expert_store_prefetch(m->store, next, f->pred_sel, np);
}

/* Scores the prediction made for this layer against what it needed. */
static void prefetch_score(struct forward *f, int layer, int n_wanted)
{
	const int32_t *mark = f->predicted + (size_t)layer * f->m->cfg.n_experts;
	bool any = false;
	for (int e = 0; e < f->m->cfg.n_experts && !any; e++)
		any = mark[e];
	if (!f->prefetch || !any)
		return;
	f->pf.actual += (uint64_t)n_wanted;
	for (int i = 0; i < n_wanted; i++)
		f->pf.correct += mark[f->wanted[i]] != 0;
}

/* Consumes the store's deliveries of the current request, in delivery
 * order: each expert runs over the tokens that chose it. */
static int moe_experts_run(struct forward *f, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[layer];
	struct expert_store *store = f->m->store;
	int64_t H = c->hidden;
	int K = c->top_k, rc;
	int32_t e;
	const void *rec;
	while ((rc = expert_store_next(store, &e, &rec)) > 0) {
		int m = 0;
		for (int t = 0; t < n; t++)
			for (int k = 0; k < K; k++)
				if (f->sel[t * K + k] == e) {
					f->e_tok[m] = t;
					f->e_slot[m] = k;
					memcpy(f->e_in + m * H, f->xn + t * H, H * sizeof(float));
					m++;
				}
		struct qmatrix g, u, d;
		model_expert_part(&g, lw, rec, EXPERT_PART_GATE);
		model_expert_part(&u, lw, rec, EXPERT_PART_UP);
		model_expert_part(&d, lw, rec, EXPERT_PART_DOWN);
		swiglu_ffn(f, &g, &u, &d, f->e_in, m, f->e_down);
		expert_store_release(store, layer, e);
		for (int j = 0; j < m; j++)
			memcpy(f->expert_out + ((size_t)f->e_tok[j] * K + f->e_slot[j]) * H,
			       f->e_down + j * H, H * sizeof(float));
	}
	return rc < 0 ? rc : 0;
}

static int moe_block(struct forward *f, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[layer];
	struct expert_store *store = f->m->store;
	int64_t H = c->hidden;
	int E = c->n_experts, K = c->top_k;
	matmul(f->pool, f->router_logits, &lw->router, f->xn, n);
	route(f, n);

	/* Union: each expert any token of the chunk needs, once, ascending. */
	memset(f->wanted, 0, (size_t)E * sizeof(int32_t));
	for (int i = 0; i < n * K; i++)
		f->wanted[f->sel[i]] = 1;
	int n_wanted = 0;
	for (int e = 0; e < E; e++)
		if (f->wanted[e])
			f->wanted[n_wanted++] = e;
	prefetch_score(f, layer, n_wanted);
	/* Rounds of at most the store's capacity; each expert's output lands
	 * in its (token, slot) cell, so the rounds do not change the sum. */
	int cap = expert_store_capacity(store), rc = 0;
	if (cap < 1)
		return error_set(EINVAL, "layer %d: the expert store has no frames", layer);
	for (int first = 0; first < n_wanted && !rc; first += cap) {
		int cnt = n_wanted - first < cap ? n_wanted - first : cap;
		rc = expert_store_request(store, layer, f->wanted + first, cnt);
		if (!rc && first == 0)
			prefetch_next(f, layer, n); /* overlaps this layer's reads and compute */
		if (!rc)
			rc = moe_experts_run(f, layer, n);
	}
	if (rc)
		return rc;
	/* Fixed-order sum: slot 0..K-1, independent of delivery order. */
	for (int t = 0; t < n; t++) {
		float *x = f->x + t * H;
		for (int k = 0; k < K; k++)
			axpy_f32(x, f->sel_w[t * K + k], f->expert_out + ((size_t)t * K + k) * H, H);
	}
	return 0;
}

int forward_step(struct forward *f, const int32_t *tokens, int n, float *logits, bool all_logits)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	int64_t H = c->hidden;
	if (n <= 0 || n > f->batch)
		return error_set(EINVAL, "forward: %d tokens in one step (1..%d)", n, f->batch);
	if (f->pos + n > f->ctx)
		return error_set(ENOSPC, "context is full: %d positions (raise --ctx)", f->ctx);
	for (int t = 0; t < n; t++) {
		if (tokens[t] < 0 || tokens[t] >= c->vocab)
			return error_set(EINVAL, "token id %d is outside the vocabulary (0..%d)", tokens[t],
					 c->vocab - 1);
		quant_row_dequantize(f->x + t * H, &m->embed, tokens[t]);
	}
	for (int l = 0; l < c->n_layers; l++) {
		const struct layer_weights *lw = &m->layers[l];
		attention_block(f, l, n);
		for (int t = 0; t < n; t++)
			rmsnorm(f->xn + t * H, f->x + t * H, lw->ffn_norm, H, c->rms_eps);
		if (lw->moe) {
			int rc = moe_block(f, l, n);
			if (rc)
				return rc;
		} else {
			swiglu_ffn(f, &lw->ffn_gate, &lw->ffn_up, &lw->ffn_down, f->xn, n, f->tmp);
			for (int64_t i = 0; i < n * H; i++)
				f->x[i] += f->tmp[i];
		}
	}
	f->pos += n;
	if (!logits)
		return 0;
	int first = all_logits ? 0 : n - 1;
	for (int t = first; t < n; t++)
		rmsnorm(f->xn + (t - first) * H, f->x + t * H, m->final_norm, H, c->rms_eps);
	matmul(f->pool, logits, &m->lm_head, f->xn, n - first);
	return 0;
}

int forward_tokens(struct forward *f, const int32_t *tokens, int n, float *logits, bool all_logits)
{
	for (int i = 0; i < n; i += f->batch) {
		int len = n - i < f->batch ? n - i : f->batch;
		bool last = i + len == n;
		float *out = NULL;
		if (logits && all_logits)
			out = logits + (size_t)i * f->m->cfg.vocab;
		else if (logits && last)
			out = logits;
		int rc = forward_step(f, tokens + i, len, out, all_logits);
		if (rc)
			return rc;
	}
	return 0;
}
