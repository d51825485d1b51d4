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
 *           the transformers routers compute them (moe_router.c: the
 *           router kinds);
 *   union, place, overlap, remote, sum: moe_experts.c;
 *   predict the next MoE layer's experts and read them ahead:
 *           moe_prefetch.c.
 *
 * This file binds the weights, lays out the step's scratch and runs the
 * two kinds.
 *
 * FFN_MOE_SHARED then adds the shared experts: DeepSeek's shared_experts,
 * or Qwen's one shared_expert scaled by sigmoid(shared_expert_gate . x)
 * (shared_gate: Qwen3.5, Qwen3-Next), or Inkling's shared experts, each
 * scaled by the weight its router row gave it (ROUTER_SIGMOID_SHARED).
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "base/error.h"
#include "compute/fmath.h"
#include "compute/kernels.h"
#include "engine/forward/moe_internal.h"

void moe_layout(struct carve *cv, const struct model_config *c, int batch, struct moe_scratch *s)
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
	w->route = block_route(c->router, w->tid2eid != NULL);
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

static int moe_run(struct forward *f, int layer, int n, float *acc)
{
	struct carve cv = forward_shared(f);
	struct moe_scratch s;
	moe_layout(&cv, &f->m->cfg, f->batch, &s);
	return moe_routed_run(f, f->layers[layer].ffn_w, &s, layer, n, acc);
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
	int rc = moe_routed_run(f, &w->moe, &s, layer, n, acc);
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
