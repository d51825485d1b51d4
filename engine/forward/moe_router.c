/*
 * moe_router — the router kinds of FFN_MOE (block.h, struct route_kind):
 * each turns one token's router logits into its top_k experts and their
 * weights as the transformers router computes them, and says which
 * scores the next layer's prediction takes the top_k of.
 *
 *   softmax          softmax over all experts, top-k, optional
 *                    renormalisation (OLMoE, Qwen3, Mixtral, Qwen3.5);
 *   sigmoid_grouped  sigmoid scores, a correction bias for the choice,
 *                    grouped top-k (DeepSeek-V3, GLM);
 *   sqrtsoftplus     sqrt(softplus) scores with a correction bias
 *                    (DeepSeek-V4);
 *   hash             DeepSeek-V4's hash-routed layers: the experts the
 *                    token id names (tid2eid), weighted as sqrtsoftplus;
 *   topk_softmax     top-k of the (biased) logits, softmaxed (gpt-oss);
 *   sigmoid_shared   one sigmoid router over the routed and the shared
 *                    experts (Inkling).
 */
#include <math.h>
#include <string.h>

#include "compute/fmath.h"
#include "compute/kernels.h"
#include "engine/forward/moe_internal.h"

/* Softmax over all experts, top-k of the probabilities, optional
 * renormalisation: the order of operations of the HF routers. */
static void route_softmax(const struct model_config *c, const struct moe_weights *w, int32_t token, float *p,
			  int32_t *sel, float *wt, float *shared_w, float *choice)
{
	int E = c->n_experts, K = c->top_k;
	softmax(p, E);
	topk(sel, p, E, K);
	float sum = 0;
	for (int k = 0; k < K; k++) {
		wt[k] = p[sel[k]];
		sum += wt[k];
	}
	if (c->norm_topk_prob)
		for (int k = 0; k < K; k++)
			wt[k] /= sum;
}

/* Sigmoid scores, correction bias for the choice only, top topk_group
 * groups by the sum of their two best biased scores, top-k inside those
 * groups (masked scores are 0, as in DeepseekV3TopkRouter, or -inf as in
 * the DeepSeek-V3.2 and GLM-5 routers); the weights are the unbiased
 * scores, renormalised (+1e-20) and scaled. */
static void route_grouped(const struct model_config *c, const struct moe_weights *mw, int32_t token,
			  float *logits, int32_t *sel, float *w, float *shared_w, float *choice)
{
	const float *bias = mw->router_bias;
	int E = c->n_experts, K = c->top_k, G = c->n_group, per = E / G;
	for (int e = 0; e < E; e++) {
		logits[e] = fm_sigmoidf(logits[e]);
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

/* DeepSeek-V4: sqrt(softplus) scores; the experts are the top-k of the
 * scores plus the correction bias, or on a hash-routed layer tid2eid's row
 * of the token; their unbiased scores, renormalised (+1e-20) and scaled,
 * weight them (DeepseekV4TopKRouter, DeepseekV4HashRouter: always
 * renormalised, whatever norm_topk_prob says). */
static void v4_weights(const struct model_config *c, const float *logits, const int32_t *sel, float *wt)
{
	int K = c->top_k;
	float sum = 0;
	for (int k = 0; k < K; k++) {
		wt[k] = logits[sel[k]];
		sum += wt[k];
	}
	for (int k = 0; k < K; k++)
		wt[k] = wt[k] / (sum + 1e-20f) * c->routed_scaling;
}

static void route_sqrtsoftplus(const struct model_config *c, const struct moe_weights *w, int32_t token,
			       float *logits, int32_t *sel, float *wt, float *shared_w, float *choice)
{
	int E = c->n_experts, K = c->top_k;
	for (int e = 0; e < E; e++) {
		logits[e] = sqrtf(fm_softplusf(logits[e]));
		choice[e] = logits[e] + (w->router_bias ? w->router_bias[e] : 0.0f);
	}
	topk(sel, choice, E, K);
	v4_weights(c, logits, sel, wt);
}

static void route_hash(const struct model_config *c, const struct moe_weights *w, int32_t token, float *logits,
		       int32_t *sel, float *wt, float *shared_w, float *choice)
{
	int E = c->n_experts, K = c->top_k;
	for (int e = 0; e < E; e++)
		logits[e] = sqrtf(fm_softplusf(logits[e]));
	for (int k = 0; k < K; k++)
		sel[k] = (int32_t)w->tid2eid[(size_t)token * K + k];
	v4_weights(c, logits, sel, wt);
}

/* The prediction's scores: sqrt(softplus) plus the correction bias. */
static void predict_sqrtsoftplus(const struct moe_weights *w, int n_experts, float *pl)
{
	if (w->router_bias)
		for (int e = 0; e < n_experts; e++)
			pl[e] = sqrtf(fm_softplusf(pl[e])) + w->router_bias[e];
}

/* gpt-oss (GptOssTopKRouter): the top-k of the (biased) logits choose,
 * a softmax over those k weights them. */
static void route_topk_softmax(const struct model_config *c, const struct moe_weights *mw, int32_t token,
			       float *logits, int32_t *sel, float *w, float *shared_w, float *choice)
{
	int K = c->top_k;
	topk(sel, logits, c->n_experts, K);
	for (int k = 0; k < K; k++)
		w[k] = logits[sel[k]];
	softmax(w, K);
}

/* Inkling (InklingTopkRouter, transformers v5.15.0): logits[E + S] of the routed then the
 * shared experts; the top-k of sigmoid + correction bias among the routed
 * choose; each chosen and each shared expert weighs sigmoid(l) over the
 * sum of those k + S sigmoids (the reference's softmax of logsigmoids),
 * times route_scale and gate.global_scale. */
static void route_shared(const struct model_config *c, const struct moe_weights *w, int32_t token, float *logits,
			 int32_t *sel, float *wt, float *shared_w, float *choice)
{
	int E = c->n_experts, K = c->top_k, S = c->n_shared_experts;
	for (int e = 0; e < E; e++)
		choice[e] = fm_sigmoidf(logits[e]) + (w->router_bias ? w->router_bias[e] : 0.0f);
	topk(sel, choice, E, K);
	float sum = 0.0f;
	for (int k = 0; k < K; k++)
		sum += wt[k] = fm_sigmoidf(logits[sel[k]]);
	for (int i = 0; i < S; i++)
		sum += shared_w[i] = fm_sigmoidf(logits[E + i]);
	float scale = c->routed_scaling * w->global_scale / sum;
	for (int k = 0; k < K; k++)
		wt[k] *= scale;
	for (int i = 0; i < S; i++)
		shared_w[i] *= scale;
}

/* The prediction's scores: sigmoid plus the correction bias. */
static void predict_sigmoid_bias(const struct moe_weights *w, int n_experts, float *pl)
{
	if (w->router_bias)
		for (int e = 0; e < n_experts; e++)
			pl[e] = fm_sigmoidf(pl[e]) + w->router_bias[e];
}

/* predict NULL: the logits themselves (softmax and sigmoid are monotone;
 * the grouped router's prediction ignores its groups and bias). */
const struct route_kind router_softmax = { .name = "softmax", .id = 0, .route = route_softmax };
const struct route_kind router_sigmoid_grouped = { .name = "sigmoid_grouped", .id = 1, .route = route_grouped };
const struct route_kind router_sqrtsoftplus = {
	.name = "sqrtsoftplus", .id = 2, .route = route_sqrtsoftplus, .predict = predict_sqrtsoftplus,
};
const struct route_kind router_hash = { .name = "hash", .id = 3, .route = route_hash };
const struct route_kind router_topk_softmax = { .name = "topk_softmax", .id = 4, .route = route_topk_softmax };
const struct route_kind router_sigmoid_shared = {
	.name = "sigmoid_shared", .id = 5, .route = route_shared, .predict = predict_sigmoid_bias,
};

const struct route_kind *const route_kinds[ROUTE_KINDS] = {
	&router_softmax, &router_sigmoid_grouped, &router_sqrtsoftplus, &router_hash, &router_topk_softmax,
	&router_sigmoid_shared,
};

const struct route_kind *block_route(enum router_kind k, bool hashed)
{
	if (hashed)
		return &router_hash;
	switch (k) {
	case ROUTER_SOFTMAX: return &router_softmax;
	case ROUTER_SIGMOID_GROUPED: return &router_sigmoid_grouped;
	case ROUTER_SQRTSOFTPLUS: return &router_sqrtsoftplus;
	case ROUTER_TOPK_SOFTMAX: return &router_topk_softmax;
	case ROUTER_SIGMOID_SHARED: return &router_sigmoid_shared;
	}
	return NULL;
}

void moe_route(const struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int n)
{
	const struct model_config *c = &f->m->cfg;
	int K = c->top_k, R = router_rows(c);
	for (int t = 0; t < n; t++)
		w->route->route(c, w, f->row_tok[t], s->logits + (size_t)t * R, s->sel + (size_t)t * K,
				 s->sel_w + (size_t)t * K, s->shared_w + (size_t)t * c->n_shared_experts, s->choice);
}
