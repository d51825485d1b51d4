/*
 * model_tensors — the tensor inventory of a config, block kind by block
 * kind of each layer's row, with the names of the transformers modeling
 * files (checkpoint layout). The order is the order of resident.bin.
 */
#include "engine/model/model_tensors.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"

struct spec_list {
	struct tensor_spec *v;
	size_t n, cap;
};

static void spec_add(struct spec_list *l, enum tensor_role role, int layer, int64_t rows,
		     int64_t cols, bool optional, const char *fmt, ...)
{
	assert(l->n < l->cap); /* capacity is computed up front from the layer count */
	struct tensor_spec *s = &l->v[l->n++];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->name, sizeof s->name, fmt, ap);
	va_end(ap);
	s->role = role;
	s->layer = layer;
	s->ndim = cols > 0 ? 2 : 1;
	s->shape[0] = rows;
	s->shape[1] = cols > 0 ? cols : 1;
	s->optional = optional;
	s->squeezed = false;
	s->plus_one = false;
}

/* A norm weight of n: zero-centred (1 + w) in the families that say so. */
static void spec_norm(struct spec_list *l, const struct model_config *c, int layer, int64_t n, const char *fmt, ...)
{
	char name[TENSOR_NAME_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	spec_add(l, TENSOR_ROLE_VECTOR, layer, n, 0, false, "%s", name);
	l->v[l->n - 1].plus_one = c->norm_zero_centred;
}

/* MIXER_MLA and MIXER_MLA_DSA (DeepseekV3Attention, plus the indexer). */
static void specs_mla(struct spec_list *l, const struct model_config *c, int i, bool dsa)
{
	int64_t h = c->hidden, nh = c->n_heads, qk = c->qk_nope_dim + c->qk_rope_dim;
	if (c->q_lora_rank > 0) {
		spec_add(l, TENSOR_ROLE_DENSE, i, c->q_lora_rank, h, false, "model.layers.%d.self_attn.q_a_proj.weight", i);
		spec_add(l, TENSOR_ROLE_VECTOR, i, c->q_lora_rank, 0, false, "model.layers.%d.self_attn.q_a_layernorm.weight", i);
		spec_add(l, TENSOR_ROLE_DENSE, i, nh * qk, c->q_lora_rank, false, "model.layers.%d.self_attn.q_b_proj.weight", i);
	} else {
		spec_add(l, TENSOR_ROLE_DENSE, i, nh * qk, h, false, "model.layers.%d.self_attn.q_proj.weight", i);
	}
	spec_add(l, TENSOR_ROLE_DENSE, i, c->kv_lora_rank + c->qk_rope_dim, h, false,
		 "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, c->kv_lora_rank, 0, false, "model.layers.%d.self_attn.kv_a_layernorm.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, nh * (c->qk_nope_dim + c->v_head_dim), c->kv_lora_rank, false,
		 "model.layers.%d.self_attn.kv_b_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, h, nh * c->v_head_dim, false, "model.layers.%d.self_attn.o_proj.weight", i);
	if (!dsa)
		return;
	/* The indexer; a layer that reuses the previous selection never runs
	 * its own. weights_proj stays f32 (transformers keeps it out of fp8:
	 * _keep_in_fp32_modules). */
	bool opt = c->index_shared[i];
	int64_t ih = c->index_n_heads, id = c->index_head_dim;
	spec_add(l, TENSOR_ROLE_DENSE, i, ih * id, c->q_lora_rank, opt, "model.layers.%d.self_attn.indexer.wq_b.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, id, h, opt, "model.layers.%d.self_attn.indexer.wk.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, id, 0, opt, "model.layers.%d.self_attn.indexer.k_norm.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, id, 0, opt, "model.layers.%d.self_attn.indexer.k_norm.bias", i);
	spec_add(l, TENSOR_ROLE_ROUTER, i, ih, h, opt, "model.layers.%d.self_attn.indexer.weights_proj.weight", i);
}

/* MIXER_GQA: q/k/v/o, optional biases (o_proj's too: gpt-oss), q/k norms
 * and per-head sinks (gpt-oss, f32 as transformers keeps them). */
static void specs_gqa(struct spec_list *l, const struct model_config *c, int i)
{
	int64_t h = c->hidden, q = (int64_t)c->n_heads * c->head_dim;
	int64_t kv = (int64_t)c->n_kv_heads * c->head_dim;
	/* With attn_gate each head's head_dim query rows are followed by its
	 * head_dim gate rows. */
	spec_add(l, TENSOR_ROLE_DENSE, i, c->attn_gate ? 2 * q : q, h, false, "model.layers.%d.self_attn.q_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, kv, h, false, "model.layers.%d.self_attn.k_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, kv, h, false, "model.layers.%d.self_attn.v_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, h, q, false, "model.layers.%d.self_attn.o_proj.weight", i);
	if (c->attn_bias) {
		spec_add(l, TENSOR_ROLE_VECTOR, i, q, 0, false, "model.layers.%d.self_attn.q_proj.bias", i);
		spec_add(l, TENSOR_ROLE_VECTOR, i, kv, 0, false, "model.layers.%d.self_attn.k_proj.bias", i);
		spec_add(l, TENSOR_ROLE_VECTOR, i, kv, 0, false, "model.layers.%d.self_attn.v_proj.bias", i);
	}
	if (c->attn_o_bias)
		spec_add(l, TENSOR_ROLE_VECTOR, i, h, 0, false, "model.layers.%d.self_attn.o_proj.bias", i);
	if (c->attn_sinks)
		spec_add(l, TENSOR_ROLE_VECTOR, i, c->n_heads, 0, false, "model.layers.%d.self_attn.sinks", i);
	if (c->qk_norm != QK_NORM_NONE) {
		int64_t qn = c->qk_norm == QK_NORM_FULL ? q : c->head_dim;
		int64_t kn = c->qk_norm == QK_NORM_FULL ? kv : c->head_dim;
		spec_norm(l, c, i, qn, "model.layers.%d.self_attn.q_norm.weight", i);
		spec_norm(l, c, i, kn, "model.layers.%d.self_attn.k_norm.weight", i);
	}
}

/* FFN_MOE and FFN_MOE_SHARED: the router (and its correction bias, or on
 * a hash-routed layer its token -> experts table), the shared experts; the
 * routed experts live in the expert files. gpt-oss: mlp.router with its
 * bias, and the experts' biases (small: kept resident, f32). */
static void specs_moe(struct spec_list *l, const struct model_config *c, int i, bool shared)
{
	int64_t h = c->hidden;
	if (c->expert_naming == EXPERT_NAMING_GPT_OSS) {
		int64_t E = c->n_experts, I = c->moe_intermediate;
		spec_add(l, TENSOR_ROLE_ROUTER, i, E, h, false, "model.layers.%d.mlp.router.weight", i);
		spec_add(l, TENSOR_ROLE_VECTOR, i, E, 0, false, "model.layers.%d.mlp.router.bias", i);
		spec_add(l, TENSOR_ROLE_VECTOR, i, E, 2 * I, false, "model.layers.%d.mlp.experts.gate_up_proj_bias", i);
		spec_add(l, TENSOR_ROLE_VECTOR, i, E, h, false, "model.layers.%d.mlp.experts.down_proj_bias", i);
		return;
	}
	const char *moe = c->expert_naming == EXPERT_NAMING_MIXTRAL ? "block_sparse_moe" : "mlp";
	/* Inkling's one router scores the routed experts, then the shared. */
	int64_t scored = c->n_experts + (c->router == ROUTER_SIGMOID_SHARED ? c->n_shared_experts : 0);
	spec_add(l, TENSOR_ROLE_ROUTER, i, scored, h, false, "model.layers.%d.%s.gate.weight", i, moe);
	if (c->hash_routed[i])
		spec_add(l, TENSOR_ROLE_INDEX, i, c->vocab, c->top_k, false, "model.layers.%d.mlp.gate.tid2eid", i);
	else if (c->router_bias)
		spec_add(l, TENSOR_ROLE_VECTOR, i, c->n_experts, 0, false, "model.layers.%d.mlp.gate.e_score_correction_bias",
			 i);
	if (c->global_scale)
		spec_add(l, TENSOR_ROLE_VECTOR, i, 1, 0, false, "model.layers.%d.mlp.gate.global_scale", i);
	if (!shared)
		return;
	/* DeepSeek's shared_experts, or Qwen's one shared_expert and its gate. */
	int64_t f = c->shared_intermediate;
	const char *se = c->shared_gate ? "shared_expert" : "shared_experts";
	spec_add(l, TENSOR_ROLE_DENSE, i, f, h, false, "model.layers.%d.mlp.%s.gate_proj.weight", i, se);
	spec_add(l, TENSOR_ROLE_DENSE, i, f, h, false, "model.layers.%d.mlp.%s.up_proj.weight", i, se);
	spec_add(l, TENSOR_ROLE_DENSE, i, h, f, false, "model.layers.%d.mlp.%s.down_proj.weight", i, se);
	if (c->shared_gate)
		spec_add(l, TENSOR_ROLE_ROUTER, i, 1, h, false, "model.layers.%d.mlp.shared_expert_gate.weight", i);
}

/* MIXER_GDN (Qwen3_5MoeGatedDeltaNet, Qwen3NextGatedDeltaNet): the input
 * projections (Qwen3-Next fuses them, grouped per key head), the
 * depthwise convolution, the decay and step parameters, the gated norm,
 * out_proj. The small b/a projections stay f32: they set every step's
 * decay and write strength. */
static void specs_gdn(struct spec_list *l, const struct model_config *c, int i)
{
	int64_t h = c->hidden, kd = (int64_t)c->lin_k_heads * c->lin_k_dim;
	int64_t vd = (int64_t)c->lin_v_heads * c->lin_v_dim, nv = c->lin_v_heads;
	if (c->lin_grouped) {
		spec_add(l, TENSOR_ROLE_DENSE, i, 2 * kd + 2 * vd, h, false, "model.layers.%d.linear_attn.in_proj_qkvz.weight", i);
		spec_add(l, TENSOR_ROLE_ROUTER, i, 2 * nv, h, false, "model.layers.%d.linear_attn.in_proj_ba.weight", i);
	} else {
		spec_add(l, TENSOR_ROLE_DENSE, i, 2 * kd + vd, h, false, "model.layers.%d.linear_attn.in_proj_qkv.weight", i);
		spec_add(l, TENSOR_ROLE_DENSE, i, vd, h, false, "model.layers.%d.linear_attn.in_proj_z.weight", i);
		spec_add(l, TENSOR_ROLE_ROUTER, i, nv, h, false, "model.layers.%d.linear_attn.in_proj_b.weight", i);
		spec_add(l, TENSOR_ROLE_ROUTER, i, nv, h, false, "model.layers.%d.linear_attn.in_proj_a.weight", i);
	}
	spec_add(l, TENSOR_ROLE_VECTOR, i, 2 * kd + vd, c->lin_conv, false, "model.layers.%d.linear_attn.conv1d.weight", i);
	l->v[l->n - 1].squeezed = true;
	spec_add(l, TENSOR_ROLE_VECTOR, i, nv, 0, false, "model.layers.%d.linear_attn.dt_bias", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, nv, 0, false, "model.layers.%d.linear_attn.A_log", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, c->lin_v_dim, 0, false, "model.layers.%d.linear_attn.norm.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, h, vd, false, "model.layers.%d.linear_attn.out_proj.weight", i);
}

/* MIXER_V4 (DeepseekV4Attention): the query LoRA, the one shared K = V
 * head, the grouped output projection, the sinks; a CSA or HCA layer's
 * compressor (two series of head_dim for CSA, one for HCA) and a CSA
 * layer's Lightning Indexer with its own compressor. What transformers
 * keeps in fp32 stays f32 (_keep_in_fp32_modules_strict: sinks,
 * position_bias, the norms; _keep_in_fp32_modules: the compressors' and
 * the indexer's kv_proj and gate_proj, the scorer's weights_proj). */
static void specs_v4_attn(struct spec_list *l, const struct model_config *c, int i)
{
	int64_t h = c->hidden, nh = c->n_heads, hd = c->head_dim, ql = c->q_lora_rank;
	int64_t og = c->o_groups, ol = c->o_lora_rank;
	spec_add(l, TENSOR_ROLE_DENSE, i, ql, h, false, "model.layers.%d.self_attn.q_a_proj.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, ql, 0, false, "model.layers.%d.self_attn.q_a_norm.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, nh * hd, ql, false, "model.layers.%d.self_attn.q_b_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, hd, h, false, "model.layers.%d.self_attn.kv_proj.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, hd, 0, false, "model.layers.%d.self_attn.kv_norm.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, og * ol, nh * hd / og, false, "model.layers.%d.self_attn.o_a_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, h, og * ol, false, "model.layers.%d.self_attn.o_b_proj.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, nh, 0, false, "model.layers.%d.self_attn.sinks", i);
	if (c->v4_attn[i] == V4_ATTN_SLIDING)
		return;
	bool csa = c->v4_attn[i] == V4_ATTN_CSA;
	int64_t cs = csa ? 2 : 1, rate = csa ? c->compress_rate_csa : c->compress_rate_hca;
	spec_add(l, TENSOR_ROLE_ROUTER, i, cs * hd, h, false, "model.layers.%d.self_attn.compressor.kv_proj.weight", i);
	spec_add(l, TENSOR_ROLE_ROUTER, i, cs * hd, h, false, "model.layers.%d.self_attn.compressor.gate_proj.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, rate, cs * hd, false, "model.layers.%d.self_attn.compressor.position_bias", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, hd, 0, false, "model.layers.%d.self_attn.compressor.kv_norm.weight", i);
	if (!csa)
		return;
	int64_t ih = c->index_n_heads, id = c->index_head_dim;
	spec_add(l, TENSOR_ROLE_ROUTER, i, 2 * id, h, false, "model.layers.%d.self_attn.compressor.indexer.kv_proj.weight",
		 i);
	spec_add(l, TENSOR_ROLE_ROUTER, i, 2 * id, h, false,
		 "model.layers.%d.self_attn.compressor.indexer.gate_proj.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, rate, 2 * id, false, "model.layers.%d.self_attn.compressor.indexer.position_bias",
		 i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, id, 0, false, "model.layers.%d.self_attn.compressor.indexer.kv_norm.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, ih * id, ql, false, "model.layers.%d.self_attn.compressor.indexer.q_b_proj.weight",
		 i);
	spec_add(l, TENSOR_ROLE_ROUTER, i, ih, h, false,
		 "model.layers.%d.self_attn.compressor.indexer.scorer.weights_proj.weight", i);
}

/* RESIDUAL_HC (DeepseekV4HyperConnection), before the mixer and before the
 * FFN: fn [(2 + hc) * hc, hc * H], base [(2 + hc) * hc], scale [3], f32 as
 * transformers keeps them. */
static void specs_hc(struct spec_list *l, const struct model_config *c, int i)
{
	static const char *const site[2] = { "attn_hc", "ffn_hc" };
	int64_t hc = c->hc_mult, mix = (2 + hc) * hc;
	for (int s = 0; s < 2; s++) {
		spec_add(l, TENSOR_ROLE_ROUTER, i, mix, hc * c->hidden, false, "model.layers.%d.%s.fn", i, site[s]);
		spec_add(l, TENSOR_ROLE_VECTOR, i, mix, 0, false, "model.layers.%d.%s.base", i, site[s]);
		spec_add(l, TENSOR_ROLE_VECTOR, i, 3, 0, false, "model.layers.%d.%s.scale", i, site[s]);
	}
}

/* MIXER_REL (InklingAttention): q/k/v/o and the relative-logit query
 * r_proj with the layer's own heads (swa_* on sliding layers), per-head
 * q/k norms, the k/v short convolutions ([C, 1, K] stored, [C, K] bound,
 * f32 as transformers keeps them) and the bank rel_logits_proj.proj
 * [d_rel, extent] (f32: it is added to every score). */
static void specs_rel(struct spec_list *l, const struct model_config *c, int i)
{
	bool g = c->full_attention[i];
	int64_t h = c->hidden, nh = g ? c->n_heads : c->swa_n_heads, nkv = g ? c->n_kv_heads : c->swa_n_kv_heads;
	int64_t hd = g ? c->head_dim : c->swa_head_dim, ext = g ? c->rel_extent : c->sliding_window;
	spec_add(l, TENSOR_ROLE_DENSE, i, nh * hd, h, false, "model.layers.%d.self_attn.q_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, nkv * hd, h, false, "model.layers.%d.self_attn.k_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, nkv * hd, h, false, "model.layers.%d.self_attn.v_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, nh * c->d_rel, h, false, "model.layers.%d.self_attn.r_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, h, nh * hd, false, "model.layers.%d.self_attn.o_proj.weight", i);
	spec_norm(l, c, i, hd, "model.layers.%d.self_attn.q_norm.weight", i);
	spec_norm(l, c, i, hd, "model.layers.%d.self_attn.k_norm.weight", i);
	spec_add(l, TENSOR_ROLE_VECTOR, i, nkv * hd, c->sconv_kernel, false, "model.layers.%d.self_attn.k_sconv.conv1d.weight",
		 i);
	l->v[l->n - 1].squeezed = true;
	spec_add(l, TENSOR_ROLE_VECTOR, i, nkv * hd, c->sconv_kernel, false, "model.layers.%d.self_attn.v_sconv.conv1d.weight",
		 i);
	l->v[l->n - 1].squeezed = true;
	spec_add(l, TENSOR_ROLE_VECTOR, i, c->d_rel, ext, false, "model.layers.%d.self_attn.rel_logits_proj.proj", i);
}

/* RESIDUAL_SCONV: the short convolutions after the mixer and the FFN. */
static void specs_sconv(struct spec_list *l, const struct model_config *c, int i)
{
	spec_add(l, TENSOR_ROLE_VECTOR, i, c->hidden, c->sconv_kernel, false, "model.layers.%d.attn_sconv.conv1d.weight", i);
	l->v[l->n - 1].squeezed = true;
	spec_add(l, TENSOR_ROLE_VECTOR, i, c->hidden, c->sconv_kernel, false, "model.layers.%d.mlp_sconv.conv1d.weight", i);
	l->v[l->n - 1].squeezed = true;
}

/* FFN_DENSE: the SwiGLU MLP (and Inkling's output scale). */
static void specs_dense(struct spec_list *l, const struct model_config *c, int i)
{
	int64_t h = c->hidden, f = c->intermediate;
	spec_add(l, TENSOR_ROLE_DENSE, i, f, h, false, "model.layers.%d.mlp.gate_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, f, h, false, "model.layers.%d.mlp.up_proj.weight", i);
	spec_add(l, TENSOR_ROLE_DENSE, i, h, f, false, "model.layers.%d.mlp.down_proj.weight", i);
	if (c->global_scale)
		spec_add(l, TENSOR_ROLE_VECTOR, i, 1, 0, false, "model.layers.%d.mlp.global_scale", i);
}

/* One layer's row: the two norms, its mixer, its FFN's resident part. */
static void specs_layer(struct spec_list *l, const struct model_config *c, int i)
{
	const struct layer_row *r = &c->rows[i];
	int64_t h = c->hidden;
	spec_norm(l, c, i, h, "model.layers.%d.input_layernorm.weight", i);
	spec_norm(l, c, i, h, "model.layers.%d.post_attention_layernorm.weight", i);
	switch (r->mixer) {
	case MIXER_GQA: specs_gqa(l, c, i); break;
	case MIXER_MLA: specs_mla(l, c, i, false); break;
	case MIXER_MLA_DSA: specs_mla(l, c, i, true); break;
	case MIXER_GDN: specs_gdn(l, c, i); break;
	case MIXER_V4: specs_v4_attn(l, c, i); break;
	case MIXER_REL: specs_rel(l, c, i); break;
	}
	if (r->residual == RESIDUAL_HC)
		specs_hc(l, c, i);
	if (r->residual == RESIDUAL_SCONV)
		specs_sconv(l, c, i);
	switch (r->ffn) {
	case FFN_DENSE: specs_dense(l, c, i); break;
	case FFN_MOE: specs_moe(l, c, i, false); break;
	case FFN_MOE_SHARED: specs_moe(l, c, i, true); break;
	}
}

int model_tensors_resident(const struct model_config *c, struct tensor_spec **out, size_t *n)
{
	int stored = c->n_layers + c->n_mtp_layers;
	struct spec_list l = { .cap = 8 + (size_t)stored * 48 };
	l.v = calloc(l.cap, sizeof *l.v);
	if (!l.v)
		return error_set(ENOMEM, "out of memory");
	int64_t h = c->hidden;
	spec_add(&l, TENSOR_ROLE_EMBED, -1, c->vocab, h, false, "model.embed_tokens.weight");
	if (c->embed_norm)
		spec_norm(&l, c, -1, h, "model.embed_norm.weight");
	for (int i = 0; i < c->n_layers; i++)
		specs_layer(&l, c, i);
	if (c->rows[0].residual == RESIDUAL_HC) {
		/* DeepseekV4HyperHead: collapses the streams before the final norm. */
		int64_t hc = c->hc_mult;
		spec_add(&l, TENSOR_ROLE_ROUTER, -1, hc, hc * h, false, "model.hc_head.hc_fn");
		spec_add(&l, TENSOR_ROLE_VECTOR, -1, hc, 0, false, "model.hc_head.hc_base");
		spec_add(&l, TENSOR_ROLE_VECTOR, -1, 1, 0, false, "model.hc_head.hc_scale");
	}
	spec_norm(&l, c, -1, h, "model.norm.weight");
	spec_add(&l, TENSOR_ROLE_DENSE, -1, c->vocab, h, c->tie_embeddings, "lm_head.weight");
	/* DeepSeek MTP modules: a decoder layer plus its input and output
	 * heads, stored as layers n_layers.. (MTP weights stay >= int8). */
	for (int i = c->n_layers; i < stored; i++) {
		specs_layer(&l, c, i);
		if (c->rows[i].residual == RESIDUAL_HC) {
			/* DeepSeek-V4's MTPBlock: e_proj and h_proj (the embedding and
			 * each stream apart), its own final norm and hc_head; it
			 * shares the model's embedding and head. */
			int64_t hc = c->hc_mult;
			spec_norm(&l, c, i, h, "model.layers.%d.enorm.weight", i);
			spec_norm(&l, c, i, h, "model.layers.%d.hnorm.weight", i);
			spec_add(&l, TENSOR_ROLE_DENSE, i, h, h, false, "model.layers.%d.e_proj.weight", i);
			spec_add(&l, TENSOR_ROLE_DENSE, i, h, h, false, "model.layers.%d.h_proj.weight", i);
			spec_norm(&l, c, i, h, "model.layers.%d.shared_head.norm.weight", i);
			spec_add(&l, TENSOR_ROLE_ROUTER, i, hc, hc * h, false, "model.layers.%d.hc_head.hc_fn", i);
			spec_add(&l, TENSOR_ROLE_VECTOR, i, hc, 0, false, "model.layers.%d.hc_head.hc_base", i);
			spec_add(&l, TENSOR_ROLE_VECTOR, i, 1, 0, false, "model.layers.%d.hc_head.hc_scale", i);
			continue;
		}
		spec_norm(&l, c, i, h, "model.layers.%d.enorm.weight", i);
		spec_norm(&l, c, i, h, "model.layers.%d.hnorm.weight", i);
		spec_add(&l, TENSOR_ROLE_DENSE, i, h, 2 * h, false, "model.layers.%d.eh_proj.weight", i);
		spec_norm(&l, c, i, h, "model.layers.%d.shared_head.norm.weight", i);
		spec_add(&l, TENSOR_ROLE_DENSE, i, c->vocab, h, true, "model.layers.%d.shared_head.head.weight", i);
		spec_add(&l, TENSOR_ROLE_EMBED, i, c->vocab, h, true, "model.layers.%d.embed_tokens.weight", i);
	}
	*out = l.v;
	*n = l.n;
	return 0;
}

const char *expert_part_name(enum expert_part part)
{
	static const char *const names[EXPERT_PARTS] = { "gate", "up", "down" };
	return names[part];
}

void model_expert_name(const struct model_config *c, int layer, int expert,
		       enum expert_part part, char *buf, size_t len)
{
	if (c->expert_naming == EXPERT_NAMING_MIXTRAL) {
		static const char *const w[EXPERT_PARTS] = { "w1", "w3", "w2" };
		snprintf(buf, len, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", layer,
			 expert, w[part]);
	} else {
		snprintf(buf, len, "model.layers.%d.mlp.experts.%d.%s_proj.weight", layer, expert,
			 expert_part_name(part));
	}
}

void model_expert_fused_name(const struct model_config *c, int layer, bool gate_up,
			     char *buf, size_t len)
{
	const char *moe = c->expert_naming == EXPERT_NAMING_MIXTRAL ? "block_sparse_moe" : "mlp";
	snprintf(buf, len, "model.layers.%d.%s.experts.%s", layer, moe,
		 gate_up ? "gate_up_proj" : "down_proj");
}

void model_expert_shape(const struct model_config *c, enum expert_part part,
			int64_t *rows, int64_t *cols)
{
	*rows = part == EXPERT_PART_DOWN ? c->hidden : c->moe_intermediate;
	*cols = part == EXPERT_PART_DOWN ? c->moe_intermediate : c->hidden;
}
