/*
 * ffn_moe — FFN_MOE and FFN_MOE_SHARED: the token path through the routed
 * experts, and the shared experts every token runs.
 *
 *   route   softmax top-k (OLMoE, Qwen3, Mixtral), sigmoid scores with a
 *           correction bias and grouped top-k (DeepSeek-V3, GLM), or
 *           sqrt(softplus) scores with a correction bias, or on hash-routed
 *           layers the experts the token id names (DeepSeek-V4), or the
 *           top-k of biased logits softmaxed (gpt-oss), or one sigmoid
 *           router over the routed and the shared experts (Inkling), as
 *           the transformers routers compute them;
 *   union   the experts any token of the chunk chose, once each, ascending;
 *   place   requested from the expert store in rounds of its capacity; the
 *           store delivers resident ones first, the others as reads land;
 *   overlap each delivered expert runs over the tokens that chose it while
 *           the next MoE layer's predicted experts are prefetched;
 *   sum     each expert's output lands in its (token, slot) cell and is
 *           added in slot order, so delivery order changes nothing.
 *
 * Over MPI (engine/dist, through remote.h) rank 0 keeps its own share of the union, sends
 * the rest with the rows and the routing to the ranks that serve them,
 * runs its own meanwhile, and takes the answers into the same cells; the
 * serving ranks run ffn_moe_serve, the same expert code over the same rows.
 *
 * FFN_MOE_SHARED then adds the shared experts: DeepSeek's shared_experts,
 * or Qwen's one shared_expert scaled by sigmoid(shared_expert_gate . x)
 * (shared_gate: Qwen3.5, Qwen3-Next), or Inkling's shared experts, each
 * scaled by the weight its router row gave it (ROUTER_SIGMOID_SHARED).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "compute/kernels.h"
#include "engine/forward/forward_internal.h"
#include "compute/fmath.h"

struct moe_weights {
	struct qmatrix router;           /* [router_rows, hidden], f32 */
	float global_scale;              /* mlp.gate.global_scale (Inkling), else 1 */
	const float *router_bias;        /* [n_experts] e_score_correction_bias, or NULL */
	const float *logit_bias;         /* [n_experts] mlp.router.bias added to the logits (gpt-oss), or NULL */
	const float *gate_up_bias;       /* [n_experts, 2 * moe_intermediate] (expert_bias), or NULL */
	const float *down_bias;          /* [n_experts, hidden] */
	const float *tid2eid;            /* [vocab, top_k] experts of each token id (hash-routed layer), or NULL */
	const struct manifest_expert_layer *experts; /* record layout of the layer's expert file */
};

/* FFN_MOE_SHARED: the routed experts first (so a pointer to either kind's
 * weights is one to its moe_weights), then the shared experts. */
struct moe_shared_weights {
	struct moe_weights moe;
	struct qmatrix gate;             /* [shared_intermediate, hidden] */
	struct qmatrix up;
	struct qmatrix down;             /* [hidden, shared_intermediate] */
	struct qmatrix share;            /* [1, hidden] f32 shared_expert_gate (shared_gate), else unset */
};

/* The step's buffers in the shared arena. */
struct moe_scratch {
	float *logits;                   /* [batch, router_rows] router logits, then scores */
	float *shared_w;                 /* [batch, n_shared_experts] ROUTER_SIGMOID_SHARED: the shared
					  * experts' weights */
	int32_t *sel;                    /* [batch, top_k] chosen experts */
	float *sel_w;                    /* [batch, top_k] their weights */
	float *expert_out;               /* [batch, top_k, hidden] */
	float *e_in;                     /* [batch, hidden] tokens of one expert */
	float *gate, *up;                /* [batch, max(moe_intermediate, shared width)] */
	float *e_down;                   /* [batch, hidden] */
	int32_t *e_tok, *e_slot;         /* [batch] */
	int32_t *wanted;                 /* [n_experts] union of the chunk (over MPI: this rank's part) */
	int32_t *remote;                 /* [n_experts] over MPI: the union's experts other ranks serve */
	int32_t *pred_remote;            /* [n_experts] over MPI: the prediction's */
	float *choice;                   /* [n_experts] biased scores of the grouped router */
	float *pred_in;                  /* [batch, hidden] prediction input */
	float *pred_logits;              /* [batch, router_rows] */
	int32_t *pred_sel;               /* [batch, top_k] */
	float *out;                      /* [batch, hidden] the shared experts' output */
	float *share;                    /* [batch] the shared expert gate's logit */
};

/* Rows of a layer's router: one per routed expert, and with
 * ROUTER_SIGMOID_SHARED one per shared expert after them. */
static int router_rows(const struct model_config *c)
{
	return c->n_experts + (c->router == ROUTER_SIGMOID_SHARED ? c->n_shared_experts : 0);
}

static void moe_layout(struct carve *cv, const struct model_config *c, int batch, struct moe_scratch *s)
{
	size_t B = (size_t)batch, H = (size_t)c->hidden, F = sizeof(float), I32 = sizeof(int32_t);
	size_t K = (size_t)(c->top_k > 0 ? c->top_k : 1), E = (size_t)(c->n_experts > 0 ? c->n_experts : 1);
	size_t I = (size_t)c->moe_intermediate, Ish = (size_t)c->shared_intermediate;
	I = I > Ish ? I : Ish;
	size_t R = (size_t)(router_rows(c) > 0 ? router_rows(c) : 1), S = (size_t)c->n_shared_experts;
	s->logits = carve(cv, B * R * F);
	s->shared_w = carve(cv, B * S * F);
	s->sel = carve(cv, B * K * I32);
	s->sel_w = carve(cv, B * K * F);
	s->expert_out = carve(cv, B * K * H * F);
	s->e_in = carve(cv, B * H * F);
	s->gate = carve(cv, B * I * F);
	s->up = carve(cv, B * I * F);
	s->e_down = carve(cv, B * H * F);
	s->e_tok = carve(cv, B * I32);
	s->e_slot = carve(cv, B * I32);
	s->wanted = carve(cv, E * I32);
	s->remote = carve(cv, E * I32);
	s->pred_remote = carve(cv, E * I32);
	s->choice = carve(cv, E * F);
	s->pred_in = carve(cv, B * H * F);
	s->pred_logits = carve(cv, B * R * F);
	s->pred_sel = carve(cv, B * K * I32);
	s->out = carve(cv, B * H * F);
	s->share = carve(cv, B * F);
}

static void moe_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	struct carve cv = { 0 };
	struct moe_scratch s;
	moe_layout(&cv, c, batch, &s);
	*out = (struct block_sizes){ .shared_bytes = cv.used };
}

static int moe_bind(void *wp, const struct model *m, int i)
{
	struct moe_weights *w = wp;
	const struct model_config *c = &m->cfg;
	const char *fmt = c->expert_naming == EXPERT_NAMING_MIXTRAL ? "model.layers.%d.block_sparse_moe.gate.weight"
			  : c->expert_naming == EXPERT_NAMING_GPT_OSS ? "model.layers.%d.mlp.router.weight"
								      : "model.layers.%d.mlp.gate.weight";
	int rc = model_matrix(m, &w->router, router_rows(c), c->hidden, fmt, i);
	if (!rc && w->router.type != QUANT_F32)
		rc = error_set(EINVAL, "%s: layer %d router is not f32", m->dir, i);
	w->global_scale = 1.0f;
	if (!rc && c->global_scale) {
		const float *gs;
		rc = model_vector(m, &gs, 1, "model.layers.%d.mlp.gate.global_scale", i);
		w->global_scale = rc ? 1.0f : gs[0];
	}
	if (!rc && c->expert_naming == EXPERT_NAMING_GPT_OSS)
		rc = model_vector(m, &w->logit_bias, c->n_experts, "model.layers.%d.mlp.router.bias", i);
	if (!rc && c->expert_bias) {
		struct qmatrix gu, dn;
		rc = model_matrix(m, &gu, c->n_experts, 2 * (int64_t)c->moe_intermediate,
				  "model.layers.%d.mlp.experts.gate_up_proj_bias", i);
		rc = rc ? rc : model_matrix(m, &dn, c->n_experts, c->hidden, "model.layers.%d.mlp.experts.down_proj_bias", i);
		if (!rc && (gu.type != QUANT_F32 || dn.type != QUANT_F32))
			rc = error_set(EINVAL, "%s: layer %d expert biases are not f32", m->dir, i);
		w->gate_up_bias = rc ? NULL : gu.data;
		w->down_bias = rc ? NULL : dn.data;
	}
	if (!rc && c->hash_routed[i]) {
		struct qmatrix t;
		rc = model_matrix(m, &t, c->vocab, c->top_k, "model.layers.%d.mlp.gate.tid2eid", i);
		if (!rc && t.type != QUANT_F32)
			rc = error_set(EINVAL, "%s: layer %d tid2eid is not f32", m->dir, i);
		for (int64_t k = 0; !rc && k < (int64_t)c->vocab * c->top_k; k++) {
			float e = ((const float *)t.data)[k];
			if (!(e >= 0 && e < c->n_experts && e == (float)(int32_t)e))
				rc = error_set(EINVAL, "%s: layer %d tid2eid[%" PRId64 "][%" PRId64 "] = %g is not an expert",
					       m->dir, i, k / c->top_k, k % c->top_k, (double)e);
		}
		w->tid2eid = rc ? NULL : t.data;
	} else if (!rc && c->router_bias)
		rc = model_vector(m, &w->router_bias, c->n_experts, "model.layers.%d.mlp.gate.e_score_correction_bias", i);
	/* model_load checked the file and its part shapes. */
	w->experts = manifest_expert_layer(&m->man, i);
	if (!rc && !w->experts)
		rc = error_set(EINVAL, "%s/manifest.json: layer %d has no expert file", m->dir, i);
	return rc;
}

static int moe_shared_bind(void *wp, const struct model *m, int i)
{
	struct moe_shared_weights *w = wp;
	const struct model_config *c = &m->cfg;
	int64_t f = c->shared_intermediate, h = c->hidden;
	int rc = moe_bind(&w->moe, m, i);
	if (c->shared_gate) {
		rc = rc ? rc : model_matrix(m, &w->gate, f, h, "model.layers.%d.mlp.shared_expert.gate_proj.weight", i);
		rc = rc ? rc : model_matrix(m, &w->up, f, h, "model.layers.%d.mlp.shared_expert.up_proj.weight", i);
		rc = rc ? rc : model_matrix(m, &w->down, h, f, "model.layers.%d.mlp.shared_expert.down_proj.weight", i);
		rc = rc ? rc : model_matrix(m, &w->share, 1, h, "model.layers.%d.mlp.shared_expert_gate.weight", i);
		if (!rc && w->share.type != QUANT_F32)
			rc = error_set(EINVAL, "%s: layer %d shared_expert_gate is not f32", m->dir, i);
		return rc;
	}
	rc = rc ? rc : model_matrix(m, &w->gate, f, h, "model.layers.%d.mlp.shared_experts.gate_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->up, f, h, "model.layers.%d.mlp.shared_experts.up_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->down, h, f, "model.layers.%d.mlp.shared_experts.down_proj.weight", i);
	return rc;
}

/* Sigmoid scores, correction bias for the choice only, top topk_group
 * groups by the sum of their two best biased scores, top-k inside those
 * groups (masked scores are 0, as in DeepseekV3TopkRouter, or -inf as in
 * the DeepSeek-V3.2 and GLM-5 routers); the weights are the unbiased
 * scores, renormalised (+1e-20) and scaled. */
static void route_grouped(const struct model_config *c, const float *bias, float *logits, int32_t *sel, float *w,
			  float *choice)
{
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
static void route_v4(const struct model_config *c, const struct moe_weights *w, int32_t token, float *logits,
		     int32_t *sel, float *wt, float *choice)
{
	int E = c->n_experts, K = c->top_k;
	for (int e = 0; e < E; e++) {
		logits[e] = sqrtf(fm_softplusf(logits[e]));
		choice[e] = logits[e] + (w->router_bias ? w->router_bias[e] : 0.0f);
	}
	if (w->tid2eid)
		for (int k = 0; k < K; k++)
			sel[k] = (int32_t)w->tid2eid[(size_t)token * K + k];
	else
		topk(sel, choice, E, K);
	float sum = 0;
	for (int k = 0; k < K; k++) {
		wt[k] = logits[sel[k]];
		sum += wt[k];
	}
	for (int k = 0; k < K; k++)
		wt[k] = wt[k] / (sum + 1e-20f) * c->routed_scaling;
}

/* gpt-oss (GptOssTopKRouter): the top-k of the (biased) logits choose,
 * a softmax over those k weights them. */
static void route_topk_softmax(const struct model_config *c, const float *logits, int32_t *sel, float *w)
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
static void route_shared(const struct model_config *c, const struct moe_weights *w, const float *logits,
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

/* Softmax over all experts, top-k of the probabilities, optional
 * renormalisation: the order of operations of the HF routers. */
static void route(const struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int n)
{
	const struct model_config *c = &f->m->cfg;
	int E = c->n_experts, K = c->top_k, R = router_rows(c);
	for (int t = 0; t < n; t++) {
		float *p = s->logits + (size_t)t * R;
		int32_t *sel = s->sel + (size_t)t * K;
		float *wt = s->sel_w + (size_t)t * K;
		if (c->router == ROUTER_SIGMOID_SHARED) {
			route_shared(c, w, p, sel, wt, s->shared_w + (size_t)t * c->n_shared_experts, s->choice);
			continue;
		}
		if (c->router == ROUTER_SIGMOID_GROUPED) {
			route_grouped(c, w->router_bias, p, sel, wt, s->choice);
			continue;
		}
		if (c->router == ROUTER_SQRTSOFTPLUS) {
			route_v4(c, w, f->row_tok[t], p, sel, wt, s->choice);
			continue;
		}
		if (c->router == ROUTER_TOPK_SOFTMAX) {
			route_topk_softmax(c, p, sel, wt);
			continue;
		}
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
}

/* The next MoE layer after `layer`, or -1. */
static int next_moe_layer(const struct model_config *c, int layer)
{
	for (int l = layer + 1; l < c->n_layers; l++)
		if (model_config_layer_moe(c, l))
			return l;
	return -1;
}

/* Starts the reads of ids[0..n) of layer: over MPI only this rank's, the
 * others travel to their ranks with the next request. */
static void prefetch_ids(struct forward *f, const struct moe_scratch *s, int layer, int32_t *ids, int n)
{
	const struct remote_experts *r = &f->remote;
	if (r->ops) {
		int nr = r->ops->partition(r->ctx, layer, ids, &n, s->pred_remote);
		r->ops->hint(r->ctx, layer, s->pred_remote, nr);
	}
	expert_store_prefetch(f->m->store, layer, ids, n);
}

/* A hash-routed layer's experts follow from the token ids alone: marks
 * them as the layer's prediction and starts their reads, whatever the
 * recent precision (the prediction is exact, so no read is wasted). */
static void prefetch_hashed(struct forward *f, const struct moe_scratch *s, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct moe_weights *w = f->layers[layer].ffn_w;
	int E = c->n_experts, K = c->top_k;
	int32_t *mark = f->predicted + (size_t)layer * E;
	memset(mark, 0, (size_t)E * sizeof *mark);
	for (int t = 0; t < n; t++)
		for (int k = 0; k < K; k++)
			mark[(int32_t)w->tid2eid[(size_t)f->row_tok[t] * K + k]] = 1;
	int np = 0;
	for (int e = 0; e < E; e++)
		if (mark[e])
			s->pred_sel[np++] = e;
	f->pf.predicted += (uint64_t)np;
	f->pf.prefetch_steps++;
	f->pf.issued_steps++;
	prefetch_ids(f, s, layer, s->pred_sel, np);
}

void ffn_moe_prefetch_first(struct forward *f, int n)
{
	const struct model_config *c = &f->m->cfg;
	int first = next_moe_layer(c, -1);
	if (!f->prefetch || first < 0)
		return;
	const struct moe_weights *w = f->layers[first].ffn_w;
	if (!w->tid2eid)
		return;
	struct carve cv = forward_shared(f); /* no block runs yet: the arena is free */
	struct moe_scratch s;
	moe_layout(&cv, c, f->batch, &s);
	prefetch_hashed(f, &s, first, n);
}

/* Predicts the experts of the next MoE layer by running its router on this
 * layer's residual stream (normed with its own FFN norm) and, while recent
 * predictions were precise (FORWARD_PREFETCH_PRECISION), starts their reads
 * at low priority. The prediction never touches the computation: prefetch
 * on or off, the logits are the same bits. */
static void prefetch_next(struct forward *f, const struct moe_scratch *s, int layer, int n)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	int next = next_moe_layer(c, layer);
	if (!f->prefetch || next < 0)
		return;
	const struct layer *ly = &f->layers[next];
	const struct moe_weights *w = ly->ffn_w;
	if (w->tid2eid) {
		prefetch_hashed(f, s, next, n);
		return;
	}
	int64_t H = c->hidden;
	int E = c->n_experts, K = c->top_k, R = router_rows(c);
	for (int t = 0; t < n; t++)
		rmsnorm(s->pred_in + t * H, f->x + t * H, ly->ffn_norm, H, c->rms_eps);
	matmul(f->pool, s->pred_logits, &w->router, s->pred_in, n);
	int32_t *mark = f->predicted + (size_t)next * E;
	memset(mark, 0, (size_t)E * sizeof *mark);
	for (int t = 0; t < n; t++) {
		float *pl = s->pred_logits + (size_t)t * R;
		if (c->router == ROUTER_SQRTSOFTPLUS && w->router_bias)
			for (int e = 0; e < E; e++)
				pl[e] = sqrtf(fm_softplusf(pl[e])) + w->router_bias[e];
		if (c->router == ROUTER_SIGMOID_SHARED && w->router_bias)
			for (int e = 0; e < E; e++)
				pl[e] = fm_sigmoidf(pl[e]) + w->router_bias[e];
		if (w->logit_bias)
			for (int e = 0; e < E; e++)
				pl[e] += w->logit_bias[e];
		/* Softmax is monotone: top-k of the logits is top-k of the probabilities. */
		topk(s->pred_sel + t * K, pl, E, K);
		for (int k = 0; k < K; k++)
			mark[s->pred_sel[t * K + k]] = 1;
	}
	int np = 0;
	for (int e = 0; e < E; e++)
		if (mark[e])
			s->pred_sel[np++] = e; /* pred_sel reused as the id list */
	f->pf.predicted += (uint64_t)np;
	f->pf.prefetch_steps++;
	if (f->pf.precision_ema < f->prefetch_precision)
		return;
	f->pf.issued_steps++;
	prefetch_ids(f, s, next, s->pred_sel, np);
}

/* Scores the prediction made for this layer against what it needed, and
 * moves the recent precision that decides whether predictions are read
 * (over about the last 16 layer predictions). */
static void prefetch_score(struct forward *f, const struct moe_scratch *s, int layer, int n_wanted)
{
	const int32_t *mark = f->predicted + (size_t)layer * f->m->cfg.n_experts;
	int marked = 0, correct = 0;
	for (int e = 0; e < f->m->cfg.n_experts; e++)
		marked += mark[e] != 0;
	if (!f->prefetch || !marked)
		return;
	for (int i = 0; i < n_wanted; i++)
		correct += mark[s->wanted[i]] != 0;
	f->pf.actual += (uint64_t)n_wanted;
	f->pf.correct += (uint64_t)correct;
	/* A hash-routed layer's exact prediction says nothing about the routers'. */
	const struct moe_weights *w = f->layers[layer].ffn_w;
	if (!w->tid2eid)
		f->pf.precision_ema += ((double)correct / marked - f->pf.precision_ema) / 16.0;
}

/* Consumes the store's deliveries of the current request, in delivery
 * order: each expert runs over the tokens that chose it. */
static int experts_run(struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int layer,
		       int n)
{
	const struct model_config *c = &f->m->cfg;
	struct expert_store *store = f->m->store;
	int64_t H = c->hidden;
	int K = c->top_k, rc;
	int32_t e;
	const void *rec;
	while ((rc = expert_store_next(store, &e, &rec)) > 0) {
		int m = 0;
		for (int t = 0; t < n; t++)
			for (int k = 0; k < K; k++)
				if (s->sel[t * K + k] == e) {
					s->e_tok[m] = t;
					s->e_slot[m] = k;
					memcpy(s->e_in + m * H, f->xn + t * H, H * sizeof(float));
					m++;
				}
		struct qmatrix g, u, d;
		model_expert_part(&g, w->experts, rec, EXPERT_PART_GATE);
		model_expert_part(&u, w->experts, rec, EXPERT_PART_UP);
		model_expert_part(&d, w->experts, rec, EXPERT_PART_DOWN);
		struct glu_bias b = { 0 };
		if (w->gate_up_bias)
			b = (struct glu_bias){ w->gate_up_bias + (size_t)e * 2 * c->moe_intermediate,
					       w->down_bias + (size_t)e * H };
		ffn_swiglu(f, &g, &u, &d, w->gate_up_bias ? &b : NULL, s->e_in, m, s->gate, s->up, s->e_down);
		expert_store_release(store, layer, e);
		for (int j = 0; j < m; j++)
			memcpy(s->expert_out + ((size_t)s->e_tok[j] * K + s->e_slot[j]) * H, s->e_down + j * H,
			       H * sizeof(float));
	}
	return rc < 0 ? rc : 0;
}

/* Runs this rank's experts wanted[0..n_wanted) in rounds of at most the
 * store's capacity; over MPI sends remote[0..n_remote) to the ranks that
 * serve them once this rank's first reads (and, on the first pass, the
 * next layer's prediction) have started, and collects their rows. Each
 * expert's output lands in its (token, slot) cell, so neither the rounds
 * nor the ranks change the sum. */
static int routed_pass(struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int layer, int n,
		       int n_wanted, int n_remote, bool first_pass)
{
	struct expert_store *store = f->m->store;
	const struct remote_experts *r = &f->remote;
	int cap = expert_store_capacity(store, layer), rc = 0;
	bool sent = false;
	if (cap < 1)
		return error_set(EINVAL, "layer %d: the expert store has no frames", layer);
	for (int first = 0; !rc && (first < n_wanted || first == 0); first += cap) {
		int cnt = n_wanted - first < cap ? n_wanted - first : cap;
		if (cnt > 0)
			rc = expert_store_request(store, layer, s->wanted + first, cnt);
		if (!rc && first == 0) {
			if (first_pass)
				prefetch_next(f, s, layer, n); /* overlaps this layer's reads and compute */
			/* The first pass tells every rank of the layer; a later
			 * one only goes out for rows still owed elsewhere. */
			if (r->ops && (first_pass || n_remote > 0)) {
				rc = r->ops->send(r->ctx, layer, n, s->sel, f->xn, s->remote, n_remote);
				sent = !rc;
			}
		}
		if (!rc && cnt > 0)
			rc = experts_run(f, w, s, layer, n);
		if (cnt <= 0)
			break;
	}
	if (sent) {
		/* Even after a local failure: nothing may stay in flight. */
		int crc = r->ops->collect(r->ctx, layer, s->expert_out);
		rc = rc ? rc : crc;
	}
	return rc;
}

/* The routed experts of one layer, added to acc in slot order. */
static int routed_run(struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int layer, int n,
		      float *acc)
{
	const struct model_config *c = &f->m->cfg;
	int64_t H = c->hidden;
	int E = c->n_experts, K = c->top_k, R = router_rows(c);
	matmul(f->pool, s->logits, &w->router, f->xn, n);
	for (int t = 0; w->logit_bias && t < n; t++)
		for (int e = 0; e < E; e++)
			s->logits[(size_t)t * R + e] += w->logit_bias[e];
	route(f, w, s, n);

	/* Union: each expert any token of the chunk needs, once, ascending. */
	memset(s->wanted, 0, (size_t)E * sizeof(int32_t));
	for (int i = 0; i < n * K; i++)
		s->wanted[s->sel[i]] = 1;
	int n_wanted = 0;
	for (int e = 0; e < E; e++)
		if (s->wanted[e])
			s->wanted[n_wanted++] = e;
	prefetch_score(f, s, layer, n_wanted);
	/* Over MPI: this rank's experts stay in wanted, the others go out
	 * once this rank's reads and the prediction have started. */
	const struct remote_experts *r = &f->remote;
	int n_remote = 0;
	if (r->ops) {
		n_remote = r->ops->partition(r->ctx, layer, s->wanted, &n_wanted, s->remote);
		r->ops->count_local(r->ctx, n_wanted);
	}
	int rc = routed_pass(f, w, s, layer, n, n_wanted, n_remote, true);
	/* A rank lost mid-layer (--replicas): the rows it owed, again, from
	 * the ranks that serve its experts now (rank 0 among them). */
	while (!rc && r->ops && (n_wanted = r->ops->redo(r->ctx, s->wanted)) > 0) {
		n_remote = r->ops->partition(r->ctx, layer, s->wanted, &n_wanted, s->remote);
		r->ops->count_local(r->ctx, n_wanted);
		rc = routed_pass(f, w, s, layer, n, n_wanted, n_remote, false);
	}
	if (rc)
		return rc;
	/* Fixed-order sum: slot 0..K-1, independent of delivery order. */
	for (int t = 0; t < n; t++) {
		float *x = acc + t * H;
		for (int k = 0; k < K; k++)
			axpy_f32(x, s->sel_w[t * K + k], s->expert_out + ((size_t)t * K + k) * H, H);
	}
	return 0;
}

int ffn_moe_serve(struct forward *f, int layer, const int32_t *experts, int n_exp, const int32_t *sel,
		  const float *xn, int n, int hint_layer, const int32_t *hints, int n_hint, float *rows)
{
	const struct model_config *c = &f->m->cfg;
	struct expert_store *store = f->m->store;
	if (layer < 0 || layer >= f->n_layers ||
	    (f->layers[layer].ffn != &block_ffn_moe && f->layers[layer].ffn != &block_ffn_moe_shared))
		return error_set(EINVAL, "layer %d has no routed experts to serve", layer);
	if (n < 0 || n > f->batch)
		return error_set(EINVAL, "layer %d: %d rows, beyond this rank's batch of %d", layer, n, f->batch);
	const struct moe_weights *w = f->layers[layer].ffn_w;
	struct carve cv = forward_shared(f);
	struct moe_scratch s;
	moe_layout(&cv, c, f->batch, &s);
	int64_t H = c->hidden;
	int K = c->top_k, rc = 0;
	if (!f->prefetch)
		n_hint = 0; /* this rank's --no-prefetch */
	if (n_exp > 0) {
		memcpy(s.sel, sel, (size_t)n * K * sizeof *sel);
		memcpy(f->xn, xn, (size_t)n * H * sizeof *xn);
		memcpy(s.wanted, experts, (size_t)n_exp * sizeof *experts);
	}
	int cap = expert_store_capacity(store, layer);
	if (cap < 1)
		return error_set(EINVAL, "layer %d: the expert store has no frames", layer);
	bool hinted = false;
	for (int first = 0; !rc && first < n_exp; first += cap) {
		int cnt = n_exp - first < cap ? n_exp - first : cap;
		rc = expert_store_request(store, layer, s.wanted + first, cnt);
		if (!rc && !hinted && n_hint > 0 && hint_layer != layer) {
			expert_store_prefetch(store, hint_layer, hints, n_hint);
			hinted = true;
		}
		if (!rc)
			rc = experts_run(f, w, &s, layer, n);
	}
	if (rc)
		return rc;
	if (!hinted && n_hint > 0 && hint_layer != layer)
		expert_store_prefetch(store, hint_layer, hints, n_hint);
	int m = 0;
	for (int i = 0; i < n_exp; i++)
		for (int t = 0; t < n; t++)
			for (int k = 0; k < K; k++)
				if (s.sel[t * K + k] == experts[i])
					memcpy(rows + (size_t)m++ * H, s.expert_out + ((size_t)t * K + k) * H,
					       (size_t)H * sizeof(float));
	return m;
}

static int moe_run(struct forward *f, int layer, int n, float *acc)
{
	struct carve cv = forward_shared(f);
	struct moe_scratch s;
	moe_layout(&cv, &f->m->cfg, f->batch, &s);
	return routed_run(f, f->layers[layer].ffn_w, &s, layer, n, acc);
}

/* Inkling's shared experts (InklingSharedExperts), fused as one MLP of
 * S * moe_intermediate whose activations are scaled, expert by expert, by
 * their router weights before the down projection. */
static void shared_weighted(struct forward *f, const struct moe_shared_weights *w, const struct moe_scratch *s,
			    int n)
{
	const struct model_config *c = &f->m->cfg;
	int64_t I = c->moe_intermediate, S = c->n_shared_experts, W = S * I;
	matmul(f->pool, s->gate, &w->gate, f->xn, n);
	matmul(f->pool, s->up, &w->up, f->xn, n);
	swiglu(s->gate, s->gate, s->up, (int64_t)n * W);
	for (int t = 0; t < n; t++)
		for (int64_t i = 0; i < W; i++)
			s->gate[t * W + i] *= s->shared_w[t * S + i / I];
	matmul(f->pool, s->out, &w->down, s->gate, n);
}

/* Then the shared experts, which every token uses. */
static int moe_shared_run(struct forward *f, int layer, int n, float *acc)
{
	const struct moe_shared_weights *w = f->layers[layer].ffn_w;
	struct carve cv = forward_shared(f);
	struct moe_scratch s;
	moe_layout(&cv, &f->m->cfg, f->batch, &s);
	int rc = routed_run(f, &w->moe, &s, layer, n, acc);
	if (rc)
		return rc;
	const struct model_config *c = &f->m->cfg;
	int64_t H = c->hidden;
	if (c->router == ROUTER_SIGMOID_SHARED) {
		shared_weighted(f, w, &s, n);
	} else
		ffn_swiglu(f, &w->gate, &w->up, &w->down, NULL, f->xn, n, s.gate, s.up, s.out);
	if (c->shared_gate) {
		matmul(f->pool, s.share, &w->share, f->xn, n);
		for (int t = 0; t < n; t++) {
			float g = fm_sigmoidf(s.share[t]);
			for (int64_t i = 0; i < H; i++)
				s.out[t * H + i] *= g;
		}
	}
	for (int64_t i = 0; i < n * H; i++)
		acc[i] += s.out[i];
	return 0;
}

const struct block_kind block_ffn_moe = {
	.name = "moe",
	.id = 4,
	.weights_bytes = sizeof(struct moe_weights),
	.bind = moe_bind,
	.sizes = moe_sizes,
	.run = moe_run,
};

const struct block_kind block_ffn_moe_shared = {
	.name = "moe_shared",
	.id = 5,
	.weights_bytes = sizeof(struct moe_shared_weights),
	.bind = moe_shared_bind,
	.sizes = moe_sizes,
	.run = moe_shared_run,
};
