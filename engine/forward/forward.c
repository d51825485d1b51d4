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
#include "engine/forward/forward.h"
#include "engine/forward/forward_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/rope_freq.h"
#include "compute/threadpool.h"
#include "base/error.h"



/* Every buffer of a forward with its size: the one list that forward_init
 * allocates, forward_free frees and forward_bytes adds up. */
struct fbuf {
	void **ptr;
	size_t bytes;
};

#define FORWARD_BUFS 40 /* >= the entries forward_buffers lists */

static int forward_buffers(struct forward *f, const struct model_config *c, struct fbuf *b)
{
	size_t B = (size_t)f->batch, H = (size_t)c->hidden, Q = (size_t)forward_q_dim(c);
	size_t KV = (size_t)forward_kv_dim(c), A = (size_t)forward_att_dim(c), F = sizeof(float);
	size_t K = (size_t)(c->top_k > 0 ? c->top_k : 1), E = (size_t)(c->n_experts > 0 ? c->n_experts : 1);
	size_t I = (size_t)(c->moe_intermediate > c->intermediate ? c->moe_intermediate : c->intermediate);
	size_t Ish = (size_t)c->moe_intermediate * (size_t)c->n_shared_experts;
	size_t T = (size_t)f->n_threads, C = (size_t)f->ctx;
	size_t Lyr = (size_t)(c->n_layers + c->n_mtp_layers); /* MTP layers keep their own cache */
	I = I > Ish ? I : Ish;
	int n = 0;
#define FBUF(field, size) (b[n++] = (struct fbuf){ (void **)&f->field, (size) })
	FBUF(k_cache, Lyr * C * (size_t)forward_k_cache_dim(c) * F);
	FBUF(v_cache, Lyr * C * (size_t)forward_v_cache_dim(c) * F);
	FBUF(lat, B * (size_t)(c->q_lora_rank + c->kv_lora_rank + c->qk_rope_dim + 1) * F);
	FBUF(head_scratch, T * (size_t)forward_head_scratch(c, f->batch) * F);
	size_t IH = c->dsa ? (size_t)c->index_n_heads : 0, ID = c->dsa ? (size_t)c->index_head_dim : 0;
	FBUF(ix_k_cache, Lyr * C * ID * F);
	FBUF(ix_q, B * IH * ID * F);
	FBUF(ix_k, B * ID * F);
	FBUF(ix_w, B * IH * F);
	FBUF(ix_scores, (c->dsa ? B * C : 0) * F);
	FBUF(ix_sel, B * (size_t)forward_dsa_keep(c, f->ctx) * sizeof(int32_t));
	FBUF(ix_nsel, (c->dsa ? B : 0) * sizeof(int32_t));
	FBUF(x, B * H * F);
	FBUF(xn, B * H * F);
	FBUF(q, B * Q * F);
	FBUF(k, B * KV * F);
	FBUF(v, B * KV * F);
	FBUF(att, B * A * F);
	FBUF(tmp, B * H * F);
	FBUF(router_logits, B * E * F);
	FBUF(sel, B * K * sizeof(int32_t));
	FBUF(sel_w, B * K * F);
	FBUF(expert_out, B * K * H * F);
	FBUF(e_in, B * H * F);
	FBUF(e_gate, B * I * F);
	FBUF(e_up, B * I * F);
	FBUF(e_down, B * H * F);
	FBUF(e_tok, B * sizeof(int32_t));
	FBUF(e_slot, B * sizeof(int32_t));
	FBUF(wanted, E * sizeof(int32_t));
	FBUF(scores, T * C * F);
	FBUF(inv_freq, (size_t)(c->rot_dim / 2 + 1) * F);
	FBUF(pred_in, B * H * F);
	FBUF(route_scratch, E * F);
	FBUF(pred_logits, B * E * F);
	FBUF(pred_sel, B * K * sizeof(int32_t));
	FBUF(predicted, Lyr * E * sizeof(int32_t));
	FBUF(hidden, B * H * F);
	FBUF(mtp_in, B * 2 * H * F);
#undef FBUF
	assert(n <= FORWARD_BUFS);
	return n;
}

uint64_t forward_bytes(const struct model_config *c, int ctx, int batch, int n_threads)
{
	struct forward f = { .ctx = ctx, .batch = batch, .n_threads = n_threads };
	struct fbuf b[FORWARD_BUFS];
	int n = forward_buffers(&f, c, b);
	uint64_t sum = 0;
	for (int i = 0; i < n; i++)
		sum += b[i].bytes;
	return sum;
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
	f->prefetch = true;
	struct fbuf b[FORWARD_BUFS];
	int n = forward_buffers(f, c, b);
	for (int i = 0; i < n; i++) {
		*b[i].ptr = calloc(b[i].bytes ? b[i].bytes : 1, 1);
		if (!*b[i].ptr) {
			forward_free(f);
			return error_set(ENOMEM, "cannot allocate %" PRIu64 " MiB for the KV cache and scratch of %d positions",
					 forward_bytes(c, ctx, batch, f->n_threads) >> 20, ctx);
		}
	}
	if (c->yarn)
		rope_freq_yarn(f->inv_freq, c->rot_dim, c->rope_theta, c->yarn_factor, c->yarn_beta_fast,
			       c->yarn_beta_slow, c->yarn_original_max);
	else
		rope_freq_default(f->inv_freq, c->rot_dim, c->rope_theta);
	return 0;
}

void forward_free(struct forward *f)
{
	struct fbuf b[FORWARD_BUFS];
	int n = f->m ? forward_buffers(f, &f->m->cfg, b) : 0;
	for (int i = 0; i < n; i++)
		free(*b[i].ptr);
	memset(f, 0, sizeof *f);
}

void forward_reset(struct forward *f)
{
	f->pos = 0;
}

static void attention_block(struct forward *f, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[layer];
	int64_t H = c->hidden;
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, lw->attn_norm, H, c->rms_eps);
	if (c->attn == ATTN_MLA)
		attn_mla(f, layer, n);
	else
		attn_gqa(f, layer, n);
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

/* Sigmoid scores, correction bias for the choice only, top topk_group
 * groups by the sum of their two best biased scores, top-k inside those
 * groups (masked scores are 0, as in DeepseekV3TopkRouter, or -inf as in the
 * DeepSeek-V3.2 and GLM-5 routers); the weights are
 * the unbiased scores, renormalised (+1e-20) and scaled. */
static void route_grouped(const struct model_config *c, const float *bias, float *logits, int32_t *sel,
			  float *w, float *choice)
{
	int E = c->n_experts, K = c->top_k, G = c->n_group, per = E / G;
	for (int e = 0; e < E; e++) {
		logits[e] = 1.0f / (1.0f + expf(-logits[e]));
		choice[e] = logits[e] + (bias ? bias[e] : 0.0f);
	}
	float gscore[MODEL_GROUPS_MAX] = { 0 };
	int32_t gsel[MODEL_GROUPS_MAX];
	for (int g = 0; g < G; g++) {
		int32_t top2[2];
		topk(top2, choice + g * per, per, per >= 2 ? 2 : 1);
		gscore[g] = choice[g * per + top2[0]] + (per >= 2 ? choice[g * per + top2[1]] : 0.0f);
	}
	topk(gsel, gscore, G, c->topk_group);
	for (int g = 0; g < G; g++) {
		bool keep = false;
		for (int i = 0; i < c->topk_group; i++)
			keep |= gsel[i] == g;
		if (!keep)
			for (int e = g * per; e < (g + 1) * per; e++)
				choice[e] = c->router_mask_inf ? -INFINITY : 0.0f;
	}
	topk(sel, choice, E, K);
	float sum = 0;
	for (int k = 0; k < K; k++) {
		w[k] = logits[sel[k]];
		sum += w[k];
	}
	for (int k = 0; k < K; k++) {
		if (c->norm_topk_prob)
			w[k] /= sum + 1e-20f;
		w[k] *= c->routed_scaling;
	}
}

/* Softmax over all experts, top-k of the probabilities, optional
 * renormalisation: the order of operations of the HF routers. */
static void route(struct forward *f, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	int E = c->n_experts, K = c->top_k;
	for (int t = 0; t < n; t++) {
		float *p = f->router_logits + (size_t)t * E;
		int32_t *sel = f->sel + (size_t)t * K;
		float *w = f->sel_w + (size_t)t * K;
		if (c->router == ROUTER_SIGMOID_GROUPED) {
			route_grouped(c, f->m->layers[layer].router_bias, p, sel, w, f->route_scratch);
			continue;
		}
		softmax(p, E);
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
	route(f, layer, n);

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
	int cap = expert_store_capacity(store, layer), rc = 0;
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
	/* Fixed-order sum: slot 0..K-1, independent of delivery order; then
	 * the shared experts, which every token uses. */
	for (int t = 0; t < n; t++) {
		float *x = f->x + t * H;
		for (int k = 0; k < K; k++)
			axpy_f32(x, f->sel_w[t * K + k], f->expert_out + ((size_t)t * K + k) * H, H);
	}
	if (lw->shared) {
		swiglu_ffn(f, &lw->sh_gate, &lw->sh_up, &lw->sh_down, f->xn, n, f->tmp);
		for (int64_t i = 0; i < n * H; i++)
			f->x[i] += f->tmp[i];
	}
	return 0;
}

/* One decoder layer over the chunk at positions f->pos..: attention, then
 * the dense or MoE FFN, each with its residual. */
static int layer_forward(struct forward *f, int l, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct layer_weights *lw = &f->m->layers[l];
	int64_t H = c->hidden;
	attention_block(f, l, n);
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, lw->ffn_norm, H, c->rms_eps);
	if (lw->moe)
		return moe_block(f, l, n);
	swiglu_ffn(f, &lw->ffn_gate, &lw->ffn_up, &lw->ffn_down, f->xn, n, f->tmp);
	for (int64_t i = 0; i < n * H; i++)
		f->x[i] += f->tmp[i];
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
		int rc = layer_forward(f, l, n);
		if (rc)
			return rc;
	}
	f->pos += n;
	/* Every row's final hidden state stays in f->hidden (the MTP input). */
	for (int t = 0; t < n; t++)
		rmsnorm(f->hidden + t * H, f->x + t * H, m->final_norm, H, c->rms_eps);
	if (!logits)
		return 0;
	int first = all_logits ? 0 : n - 1;
	matmul(f->pool, logits, &m->lm_head, f->hidden + (size_t)first * H, n - first);
	return 0;
}

int forward_mtp(struct forward *f, int module, const float *hidden, const int32_t *next, int n, int pos0,
		float *logits, float *hidden_out)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	int64_t H = c->hidden;
	if (module < 0 || module >= m->n_mtp)
		return error_set(EINVAL, "the model has no MTP module %d", module);
	if (n <= 0 || n > f->batch || pos0 < 0 || pos0 + n > f->ctx)
		return error_set(EINVAL, "MTP: %d rows at position %d do not fit", n, pos0);
	const struct mtp_weights *w = &m->mtp[module];
	/* u_t = eh_proj([enorm(E[next_t]); hnorm(h_t)]), embedding first. */
	for (int t = 0; t < n; t++) {
		float *in = f->mtp_in + (size_t)t * 2 * H;
		if (next[t] < 0 || next[t] >= c->vocab)
			return error_set(EINVAL, "token id %d is outside the vocabulary", next[t]);
		quant_row_dequantize(in, &w->embed, next[t]);
		rmsnorm(in, in, w->enorm, H, c->rms_eps);
		rmsnorm(in + H, hidden + (size_t)t * H, w->hnorm, H, c->rms_eps);
	}
	matmul(f->pool, f->x, &w->eh_proj, f->mtp_in, n);
	int32_t saved = f->pos;
	f->pos = pos0;
	int rc = layer_forward(f, c->n_layers + module, n);
	f->pos = saved;
	if (rc)
		return rc;
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, w->head_norm, H, c->rms_eps);
	if (hidden_out)
		memcpy(hidden_out, f->xn, (size_t)n * H * sizeof(float));
	if (logits)
		matmul(f->pool, logits, &w->head, f->xn, n);
	return 0;
}
