/*
 * gguf_meta — config.json from a GGUF's model metadata (general.architecture
 * and the ARCH.* keys), as llama.cpp 81ff7abe5 reads them back
 * (src/llama-model.cpp load_hparams, src/models/ARCH.cpp load_arch_hparams
 * and graphs), for the families both sides run:
 *
 *   olmoe -> olmoe, qwen3moe -> qwen3_moe, llama with experts -> mixtral,
 *   deepseek2 -> deepseek_v3, glm4moe -> glm4_moe, gpt-oss -> gpt_oss,
 *   minimax-m2 -> minimax_m2.
 *
 * Refused: qwen2moe (colibri has no Qwen2-MoE family), qwen3next and
 * qwen35moe (llama.cpp's converter rewrites their norms and DeltaNet
 * tensors; not mapped yet), deepseek32, glm-dsa, deepseek4 and every
 * other architecture.
 *
 * Where the GGUF is silent the value is llama.cpp's default (routing not
 * scaled, not renormalised, not grouped; no dense leading layers; RoPE base
 * 10000), written out so that transformers' different defaults do not
 * apply. Where llama.cpp hard-codes a behaviour in the graph (Qwen3-MoE and
 * Mixtral renormalise the top-k weights, OLMoE does not) that is what the
 * config says. The tokenizer documents are gguf_meta_tok.c's.
 */
#include "engine/convert/gguf_meta.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/convert/gguf.h"
#include "engine/model/model_config.h"

#define GGUF_SUPPORTED "olmoe, qwen3moe, llama (Mixtral, with experts), deepseek2, glm4moe, gpt-oss, minimax-m2"

struct meta {
	const struct gguf_set *set;
	const char *path;
	const char *arch;
	cJSON *cfg;
	int rc;			/* first error */
};

/* "ARCH.name" into buf. */
static const char *akey(const struct meta *m, const char *name, char *buf, size_t n)
{
	snprintf(buf, n, "%s.%s", m->arch, name);
	return buf;
}

/* An ARCH.name integer, or a per-layer array of them that must be uniform
 * (llama.cpp's get_key_or_arr). Returns 1 when found, 0 when absent (and
 * not required), -errno on error (recorded in m->rc). */
static int get_u32(struct meta *m, const char *name, bool required, uint32_t *out)
{
	char key[160];
	akey(m, name, key, sizeof key);
	if (m->rc)
		return m->rc;
	const struct gguf_kv *kv = gguf_find_kv(m->set, key);
	if (!kv) {
		if (required)
			m->rc = error_set(EINVAL, "%s: missing key %s (needed for %s)", m->path, key, m->arch);
		return m->rc;
	}
	if (kv->type == GGUF_VT_ARRAY) {
		const struct gguf_kv *arr;
		int rc = gguf_get_arr(m->set, key, GGUF_VT_U32, &arr);
		if (rc)
			return m->rc = rc;
		if (arr->n == 0)
			return m->rc = error_set(EINVAL, "%s: key %s is an empty array", m->path, key);
		int64_t v0 = gguf_arr_i64(arr, 0);
		for (uint64_t i = 1; i < arr->n; i++)
			if (gguf_arr_i64(arr, i) != v0)
				return m->rc = error_set(ENOTSUP, "%s: key %s differs between layers; colibri "
							 "needs one value for every layer", m->path, key);
		if (v0 < 0 || v0 > (int64_t)UINT32_MAX)
			return m->rc = error_set(EINVAL, "%s: key %s holds %lld, out of range", m->path, key,
						 (long long)v0);
		*out = (uint32_t)v0;
		return 1;
	}
	int rc = gguf_get_u32(m->set, key, out);
	if (rc)
		return m->rc = rc;
	return 1;
}

static int get_f32(struct meta *m, const char *name, bool required, float *out)
{
	char key[160];
	akey(m, name, key, sizeof key);
	if (m->rc)
		return m->rc;
	int rc = gguf_get_f32(m->set, key, out);
	if (rc == -ENOENT) {
		if (required)
			m->rc = error_set(EINVAL, "%s: missing key %s (needed for %s)", m->path, key, m->arch);
		return m->rc;
	}
	if (rc)
		return m->rc = rc;
	if (!isfinite(*out))
		return m->rc = error_set(EINVAL, "%s: key %s is not finite", m->path, key);
	return 1;
}

static int get_bool(struct meta *m, const char *name, bool *out)
{
	char key[160];
	akey(m, name, key, sizeof key);
	if (m->rc)
		return m->rc;
	int rc = gguf_get_bool(m->set, key, out);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return m->rc = rc;
	return 1;
}

static int get_str(struct meta *m, const char *name, const char **out)
{
	char key[160];
	akey(m, name, key, sizeof key);
	if (m->rc)
		return m->rc;
	int rc = gguf_get_str(m->set, key, out);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return m->rc = rc;
	return 1;
}

static void put_num(struct meta *m, const char *k, double v)
{
	if (!m->rc && !cJSON_AddNumberToObject(m->cfg, k, v))
		m->rc = -ENOMEM;
}

static void put_bool(struct meta *m, const char *k, bool v)
{
	if (!m->rc && !cJSON_AddBoolToObject(m->cfg, k, v))
		m->rc = -ENOMEM;
}

static void put_str(struct meta *m, cJSON *o, const char *k, const char *v)
{
	if (!m->rc && !cJSON_AddStringToObject(o, k, v))
		m->rc = -ENOMEM;
}

static void put_null(struct meta *m, const char *k)
{
	if (!m->rc && !cJSON_AddNullToObject(m->cfg, k))
		m->rc = -ENOMEM;
}

static bool has_tensor(const struct meta *m, const char *name)
{
	return gguf_set_find(m->set, name) != NULL;
}

/* The common fields every family has (llama_model_base::load_hparams):
 * sizes, heads, context, norm epsilon, RoPE base, vocabulary, tied
 * embeddings, bos / eos. n_layers is the decoder layers (block_count less
 * any MTP layers). Returns the layer count through *n_layers. */
static void common_fields(struct meta *m, uint32_t n_mtp, uint32_t *n_layers, uint32_t *n_heads,
			  uint32_t *hidden)
{
	uint32_t blocks = 0, heads = 0, kv_heads = 0, ctx = 0, embd = 0;
	float eps = 0, theta = 10000.0f;
	get_u32(m, "block_count", true, &blocks);
	get_u32(m, "context_length", true, &ctx);
	get_u32(m, "embedding_length", true, &embd);
	get_u32(m, "attention.head_count", true, &heads);
	if (get_u32(m, "attention.head_count_kv", false, &kv_heads) == 0)
		kv_heads = heads;
	get_f32(m, "attention.layer_norm_rms_epsilon", true, &eps);
	get_f32(m, "rope.freq_base", false, &theta);
	if (m->rc)
		return;
	if (heads == 0 || embd == 0 || blocks == 0)
		m->rc = error_set(EINVAL, "%s: %s.block_count, embedding_length and attention.head_count must be "
				  "positive", m->path, m->arch);
	else if (blocks > MODEL_LAYERS_MAX)
		m->rc = error_set(EINVAL, "%s: %s.block_count %u exceeds the %d layers colibri holds", m->path, m->arch,
				  blocks, MODEL_LAYERS_MAX);
	else if (n_mtp >= blocks)
		m->rc = error_set(EINVAL, "%s: %s.nextn_predict_layers %u leaves no decoder layer of %u blocks",
				  m->path, m->arch, n_mtp, blocks);
	if (m->rc)
		return;
	*n_layers = blocks - n_mtp;
	*n_heads = heads;
	*hidden = embd;
	put_num(m, "num_hidden_layers", *n_layers);
	put_num(m, "hidden_size", embd);
	put_num(m, "num_attention_heads", heads);
	put_num(m, "num_key_value_heads", kv_heads);
	put_num(m, "max_position_embeddings", ctx);
	put_num(m, "rms_norm_eps", eps);
	put_num(m, "rope_theta", theta);

	/* The vocabulary is the embedding's rows (llama.cpp sizes it from the
	 * token list, which the converter pads to vocab_size). */
	const struct gguf_tensor *emb = gguf_set_find(m->set, "token_embd.weight");
	if (!emb) {
		m->rc = error_set(EINVAL, "%s: no tensor token_embd.weight (the vocabulary size comes from it)", m->path);
		return;
	}
	if (emb->n_dims != 2 || emb->ne[0] != embd || emb->ne[1] < 1 || emb->ne[1] > INT32_MAX) {
		m->rc = error_set(EINVAL, "%s: token_embd.weight is [%lld, %lld], not [embedding_length %u, vocab]",
				  m->path, (long long)emb->ne[0], (long long)emb->ne[1], embd);
		return;
	}
	put_num(m, "vocab_size", (double)emb->ne[1]);
	put_bool(m, "tie_word_embeddings", !has_tensor(m, "output.weight"));

	/* bos / eos from the tokenizer's keys: eos and, when the file names
	 * them, end-of-turn and end-of-message, all of which end generation in
	 * llama.cpp. */
	uint32_t id;
	int rc = gguf_get_u32(m->set, "tokenizer.ggml.bos_token_id", &id);
	if (rc == 0 && id < emb->ne[1])
		put_num(m, "bos_token_id", id);
	else if (rc && rc != -ENOENT)
		m->rc = rc;
	static const char *const eos_keys[] = { "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
						"tokenizer.ggml.eom_token_id" };
	cJSON *eos = cJSON_CreateArray();
	if (!eos) {
		m->rc = -ENOMEM;
		return;
	}
	for (size_t k = 0; k < sizeof eos_keys / sizeof eos_keys[0] && !m->rc; k++) {
		rc = gguf_get_u32(m->set, eos_keys[k], &id);
		if (rc == -ENOENT)
			continue;
		if (rc) {
			m->rc = rc;
			break;
		}
		if (id >= emb->ne[1]) {
			m->rc = error_set(EINVAL, "%s: %s %u is outside the vocabulary of %lld", m->path, eos_keys[k],
					  id, (long long)emb->ne[1]);
			break;
		}
		bool dup = false;
		const cJSON *e;
		cJSON_ArrayForEach(e, eos)
			dup |= (uint32_t)e->valuedouble == id;
		if (!dup)
			cJSON_AddItemToArray(eos, cJSON_CreateNumber(id));
	}
	if (m->rc || cJSON_GetArraySize(eos) == 0) {
		cJSON_Delete(eos);
		return;
	}
	if (cJSON_GetArraySize(eos) == 1) {
		put_num(m, "eos_token_id", eos->child->valuedouble);
		cJSON_Delete(eos);
	} else {
		cJSON_AddItemToObject(m->cfg, "eos_token_id", eos);
	}
}

/* head_dim from attention.key_length (default hidden / heads); llama.cpp
 * keeps separate K and V head sizes, colibri's GQA one. */
static uint32_t head_dim(struct meta *m, uint32_t hidden, uint32_t heads)
{
	uint32_t k = hidden / heads, v;
	get_u32(m, "attention.key_length", false, &k);
	v = k;
	get_u32(m, "attention.value_length", false, &v);
	if (!m->rc && v != k)
		m->rc = error_set(ENOTSUP, "%s: %s.attention.key_length %u differs from value_length %u; colibri's "
				  "attention has one head size", m->path, m->arch, k, v);
	if (!m->rc && (k < 2 || k % 2))
		m->rc = error_set(EINVAL, "%s: %s head size %u must be even and at least 2", m->path, m->arch, k);
	put_num(m, "head_dim", k);
	return k;
}

/* The RoPE dims must be the whole head unless the family has partial
 * rotary (glm4moe, deepseek2 handle theirs). */
static void full_rotary(struct meta *m, uint32_t hd)
{
	uint32_t rot = hd;
	get_u32(m, "rope.dimension_count", false, &rot);
	if (!m->rc && rot != hd)
		m->rc = error_set(ENOTSUP, "%s: %s.rope.dimension_count %u is not the head size %u (partial rotary "
				  "is not supported for %s)", m->path, m->arch, rot, hd, m->arch);
}

/* rope.scaling.*: none for most families; YaRN for deepseek2 and gpt-oss,
 * written as an HF rope_scaling object. */
static void rope_scaling(struct meta *m, bool yarn_ok, bool *yarn)
{
	const char *type = NULL;
	*yarn = false;
	get_str(m, "rope.scaling.type", &type);
	float factor = 0;
	get_f32(m, "rope.scaling.factor", false, &factor);
	/* llama.cpp: no type means "linear", applied with rope.scaling.factor
	 * or the older rope.scale_linear. */
	if (!type) {
		float lin = factor;
		if (lin == 0)
			get_f32(m, "rope.scale_linear", false, &lin);
		if (!m->rc && lin != 0 && lin != 1)
			m->rc = error_set(ENOTSUP, "%s: %s RoPE scaling factor %g without a type (linear scaling) is not "
					  "supported", m->path, m->arch, (double)lin);
	}
	if (m->rc || !type || !strcmp(type, "none"))
		return;
	if (strcmp(type, "yarn") || !yarn_ok) {
		m->rc = error_set(ENOTSUP, "%s: %s.rope.scaling.type \"%s\" is not supported for %s", m->path, m->arch,
				  type, m->arch);
		return;
	}
	if (factor == 0 || factor == 1)	/* llama.cpp: a factor of 0 means no scaling */
		return;
	if (factor < 1) {
		m->rc = error_set(EINVAL, "%s: %s.rope.scaling.factor %g is below 1", m->path, m->arch, (double)factor);
		return;
	}
	float ext = 1, attn = 1;
	if (get_f32(m, "rope.scaling.yarn_ext_factor", false, &ext) == 1 && ext != 1)
		m->rc = error_set(ENOTSUP, "%s: %s.rope.scaling.yarn_ext_factor %g: only 1 is supported", m->path,
				  m->arch, (double)ext);
	if (get_f32(m, "rope.scaling.attn_factor", false, &attn) == 1 && attn != 1)
		m->rc = error_set(ENOTSUP, "%s: %s.rope.scaling.attn_factor %g: an explicit YaRN attention factor is "
				  "not supported", m->path, m->arch, (double)attn);
	float beta_fast = 32, beta_slow = 1;
	uint32_t orig = 0;
	get_f32(m, "rope.scaling.yarn_beta_fast", false, &beta_fast);
	get_f32(m, "rope.scaling.yarn_beta_slow", false, &beta_slow);
	if (get_u32(m, "rope.scaling.original_context_length", false, &orig) == 0)
		get_u32(m, "context_length", true, &orig);
	if (m->rc)
		return;
	cJSON *r = cJSON_AddObjectToObject(m->cfg, "rope_scaling");
	if (!r) {
		m->rc = -ENOMEM;
		return;
	}
	put_str(m, r, "rope_type", "yarn");
	cJSON_AddNumberToObject(r, "factor", factor);
	cJSON_AddNumberToObject(r, "beta_fast", beta_fast);
	cJSON_AddNumberToObject(r, "beta_slow", beta_slow);
	cJSON_AddNumberToObject(r, "original_max_position_embeddings", orig);
	*yarn = true;
}

/* The routing keys deepseek2 and glm4moe share (build_moe_ffn): experts,
 * shared experts, weights scale and norm, gating function, groups,
 * leading dense layers. gating_default: llama.cpp's when the key is absent
 * (deepseek2 softmax, glm4moe sigmoid). */
static void grouped_moe(struct meta *m, uint32_t n_layers, int gating_default)
{
	uint32_t ff = 0, ff_exp = 0, n_exp = 0, used = 0, shared = 0, groups = 0, groups_used = 0, dense = 0;
	uint32_t gating = (uint32_t)gating_default;
	float scale = 0;
	bool norm = false;
	get_u32(m, "feed_forward_length", false, &ff);
	get_u32(m, "expert_feed_forward_length", true, &ff_exp);
	get_u32(m, "expert_count", true, &n_exp);
	get_u32(m, "expert_used_count", true, &used);
	get_u32(m, "expert_shared_count", false, &shared);
	get_u32(m, "expert_group_count", false, &groups);
	get_u32(m, "expert_group_used_count", false, &groups_used);
	get_u32(m, "leading_dense_block_count", false, &dense);
	get_u32(m, "expert_gating_func", false, &gating);
	get_f32(m, "expert_weights_scale", false, &scale);
	get_bool(m, "expert_weights_norm", &norm);
	if (m->rc)
		return;
	/* LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax, 2 sigmoid, 3 softmax of the
	 * top-k weights, 4 sqrt(softplus). 0 is "not set". */
	if (gating == 0)
		gating = (uint32_t)gating_default;
	if (gating != 2) {
		m->rc = error_set(ENOTSUP, "%s: %s.expert_gating_func %u (%s): colibri runs %s with sigmoid routing only",
				  m->path, m->arch, gating, gating == 1 ? "softmax" : "not sigmoid", m->arch);
		return;
	}
	if (dense > 0 && ff == 0) {
		m->rc = error_set(EINVAL, "%s: missing key %s.feed_forward_length (the %u leading dense layers' width)",
				  m->path, m->arch, dense);
		return;
	}
	if (dense > n_layers) {
		m->rc = error_set(EINVAL, "%s: %s.leading_dense_block_count %u exceeds the %u layers", m->path, m->arch,
				  dense, n_layers);
		return;
	}
	put_num(m, "intermediate_size", ff ? ff : ff_exp);
	put_num(m, "moe_intermediate_size", ff_exp);
	put_num(m, "n_routed_experts", n_exp);
	put_num(m, "num_experts_per_tok", used);
	put_num(m, "n_shared_experts", shared);
	/* No groups (0 or 1) is one group of every expert. */
	put_num(m, "n_group", groups > 1 ? groups : 1);
	put_num(m, "topk_group", groups > 1 ? groups_used : 1);
	/* llama.cpp scales by expert_weights_scale only when it is set. */
	put_num(m, "routed_scaling_factor", scale != 0 ? scale : 1.0);
	put_bool(m, "norm_topk_prob", norm);
	put_num(m, "first_k_dense_replace", dense);
	if (!m->rc && !cJSON_AddStringToObject(m->cfg, "scoring_func", "sigmoid"))
		m->rc = -ENOMEM;
}

static void family_olmoe(struct meta *m, uint32_t hidden, uint32_t heads)
{
	uint32_t ff = 0, n_exp = 0, used = 0;
	get_u32(m, "feed_forward_length", true, &ff);
	get_u32(m, "expert_count", true, &n_exp);
	get_u32(m, "expert_used_count", true, &used);
	uint32_t hd = head_dim(m, hidden, heads);
	full_rotary(m, hd);
	put_num(m, "intermediate_size", ff);
	put_num(m, "num_experts", n_exp);
	put_num(m, "num_experts_per_tok", used);
	/* llm_build_olmoe: build_moe_ffn(..., norm_w = false, ...) and no clamp. */
	put_bool(m, "norm_topk_prob", false);
	put_null(m, "clip_qkv");
	bool yarn;
	rope_scaling(m, false, &yarn);
}

static void family_qwen3moe(struct meta *m, uint32_t n_layers, uint32_t hidden, uint32_t heads)
{
	uint32_t ff = 0, ff_exp = 0, n_exp = 0, used = 0;
	get_u32(m, "feed_forward_length", false, &ff);
	int have_exp = get_u32(m, "expert_feed_forward_length", false, &ff_exp);
	get_u32(m, "expert_count", true, &n_exp);
	get_u32(m, "expert_used_count", true, &used);
	uint32_t hd = head_dim(m, hidden, heads);
	full_rotary(m, hd);
	/* llama_model_qwen3moe: without the key an expert is n_ff / n_expert_used wide. */
	if (!m->rc && have_exp == 0) {
		if (ff == 0 || used == 0 || ff / used == 0)
			m->rc = error_set(EINVAL, "%s: missing key qwen3moe.expert_feed_forward_length (and no "
					  "feed_forward_length to derive it from)", m->path);
		else
			ff_exp = ff / used;
	}
	if (ff)
		put_num(m, "intermediate_size", ff);
	put_num(m, "moe_intermediate_size", ff_exp);
	put_num(m, "num_experts", n_exp);
	put_num(m, "num_experts_per_tok", used);
	/* llm_build_qwen3moe renormalises (norm_w = true). */
	put_bool(m, "norm_topk_prob", true);
	put_num(m, "decoder_sparse_step", 1);
	/* llama.cpp makes every layer MoE; a file whose layer L has a dense
	 * MLP (blk.L.ffn_down, no router: an mlp_only_layers checkpoint) is
	 * converted as what it holds. */
	cJSON *dense = cJSON_AddArrayToObject(m->cfg, "mlp_only_layers");
	for (uint32_t l = 0; l < n_layers && dense && !m->rc; l++) {
		char name[64];
		snprintf(name, sizeof name, "blk.%u.ffn_gate_inp.weight", l);
		if (has_tensor(m, name))
			continue;
		snprintf(name, sizeof name, "blk.%u.ffn_down.weight", l);
		if (!has_tensor(m, name))
			m->rc = error_set(EINVAL, "%s: layer %u has neither a router (blk.%u.ffn_gate_inp.weight) nor a "
					  "dense MLP (blk.%u.ffn_down.weight)", m->path, l, l, l);
		else if (ff == 0)
			m->rc = error_set(EINVAL, "%s: layer %u is dense but qwen3moe.feed_forward_length is missing",
					  m->path, l);
		else
			cJSON_AddItemToArray(dense, cJSON_CreateNumber(l));
	}
	if (!dense && !m->rc)
		m->rc = -ENOMEM;
	bool yarn;
	rope_scaling(m, false, &yarn);
}

static void family_mixtral(struct meta *m, uint32_t hidden, uint32_t heads)
{
	uint32_t ff = 0, n_exp = 0, used = 0;
	get_u32(m, "feed_forward_length", true, &ff);
	get_u32(m, "expert_count", true, &n_exp);
	get_u32(m, "expert_used_count", true, &used);
	uint32_t hd = head_dim(m, hidden, heads);
	full_rotary(m, hd);
	if (!m->rc && has_tensor(m, "rope_freqs.weight"))
		m->rc = error_set(ENOTSUP, "%s: rope_freqs.weight (Llama-3 style RoPE scaling) is not supported for "
				  "mixtral", m->path);
	put_num(m, "intermediate_size", ff);
	put_num(m, "num_local_experts", n_exp);
	put_num(m, "num_experts_per_tok", used);
	/* llama.cpp's llama graph has no sliding window. */
	put_null(m, "sliding_window");
	bool yarn;
	rope_scaling(m, false, &yarn);
}

static void family_deepseek2(struct meta *m, uint32_t n_layers, uint32_t n_mtp, uint32_t heads)
{
	uint32_t q_lora = 0, kv_lora = 0, k_len = 0, v_len = 0, k_mla = 0, v_mla = 0, rot = 0;
	float log_mul = 0, temp = 0;
	/* llama_model_deepseek2: the "lite" shapes (DeepSeek-V2-Lite and kin:
	 * 26 or 27 layers, or 48 with a 128256 vocabulary) have no q LoRA,
	 * whatever the key says; a vocabulary of 154880 at 47 or 48 layers is
	 * GLM-4.7-Lite, sigmoid-routed when the file does not say. */
	const struct gguf_tensor *emb = gguf_set_find(m->set, "token_embd.weight");
	int64_t n_vocab = emb ? emb->ne[1] : 0;
	bool lite = n_layers == 26 || n_layers == 27 || (n_layers == 48 && n_vocab == 128256);
	bool glm_lite = (n_layers == 47 || n_layers == 48) && n_vocab == 154880;
	if (!lite)
		get_u32(m, "attention.q_lora_rank", false, &q_lora);
	get_u32(m, "attention.kv_lora_rank", true, &kv_lora);
	get_u32(m, "attention.key_length", true, &k_len);
	get_u32(m, "attention.value_length", true, &v_len);
	/* Files from before the absorbed-MLA layout give the MLA head sizes
	 * as key_length / value_length (llama_hparams::n_embd_head_k_mla). */
	if (get_u32(m, "attention.key_length_mla", false, &k_mla) == 0)
		k_mla = k_len;
	if (get_u32(m, "attention.value_length_mla", false, &v_mla) == 0)
		v_mla = v_len;
	get_u32(m, "rope.dimension_count", true, &rot);
	int have_mul = get_f32(m, "rope.scaling.yarn_log_multiplier", false, &log_mul);
	if (get_f32(m, "attention.temperature_scale", false, &temp) == 1 && !m->rc)
		m->rc = error_set(ENOTSUP, "%s: deepseek2.attention.temperature_scale (attention temperature tuning) is "
				  "not supported", m->path);
	if (m->rc)
		return;
	if (rot < 2 || rot % 2 || rot >= k_mla) {
		m->rc = error_set(EINVAL, "%s: deepseek2.rope.dimension_count %u must be even and below the MLA key "
				  "length %u", m->path, rot, k_mla);
		return;
	}
	if (q_lora)
		put_num(m, "q_lora_rank", q_lora);
	else
		put_null(m, "q_lora_rank");
	put_num(m, "kv_lora_rank", kv_lora);
	put_num(m, "qk_nope_head_dim", k_mla - rot);
	put_num(m, "qk_rope_head_dim", rot);
	put_num(m, "v_head_dim", v_mla);
	/* The converter writes head_count_kv 1 (MLA as MQA); the model's
	 * heads are num_attention_heads. */
	cJSON_ReplaceItemInObject(m->cfg, "num_key_value_heads", cJSON_CreateNumber(heads));
	put_num(m, "moe_layer_freq", 1);
	put_num(m, "num_nextn_predict_layers", n_mtp);
	/* llama.cpp ropes DeepSeek-V2/V3 with interleaved pairs (NORM). */
	put_bool(m, "rope_interleave", true);
	grouped_moe(m, n_layers, glm_lite ? 2 : 1);
	bool yarn;
	rope_scaling(m, true, &yarn);
	if (m->rc || !yarn)
		return;
	/* YaRN in llm_build_deepseek2: RoPE's own magnitude correction is
	 * cancelled and q.k is scaled by (1 + 0.1 * mscale_all_dim * ln s)^2,
	 * mscale_all_dim being yarn_log_multiplier / 0.1 (the converter writes
	 * 0.1 * mscale_all_dim). HF with mscale == mscale_all_dim is the same
	 * (its cos/sin factor is their ratio, 1); without the key llama.cpp
	 * scales nothing, which no HF setting expresses. */
	if (have_mul != 1 || log_mul <= 0) {
		m->rc = error_set(ENOTSUP, "%s: deepseek2 YaRN without rope.scaling.yarn_log_multiplier is not supported",
				  m->path);
		return;
	}
	cJSON *r = cJSON_GetObjectItemCaseSensitive(m->cfg, "rope_scaling");
	double mscale_all = (double)(log_mul / 0.1f);
	cJSON_AddNumberToObject(r, "mscale", mscale_all);
	cJSON_AddNumberToObject(r, "mscale_all_dim", mscale_all);
}

static void family_glm4moe(struct meta *m, uint32_t n_layers, uint32_t n_mtp, uint32_t hidden, uint32_t heads)
{
	uint32_t hd = head_dim(m, hidden, heads), rot = hd;
	get_u32(m, "rope.dimension_count", false, &rot);
	if (m->rc)
		return;
	char key[160];
	if (gguf_find_kv(m->set, akey(m, "rope.dimension_sections", key, sizeof key))) {
		m->rc = error_set(ENOTSUP, "%s: %s (multimodal RoPE) is not supported", m->path, key);
		return;
	}
	if (rot < 2 || rot > hd || rot % 2) {
		m->rc = error_set(EINVAL, "%s: glm4moe.rope.dimension_count %u must be even and at most the head size %u",
				  m->path, rot, hd);
		return;
	}
	put_num(m, "partial_rotary_factor", (double)rot / (double)hd);
	/* Biases and q/k norms are not in the metadata; llama.cpp loads them
	 * when the tensors are there. */
	put_bool(m, "attention_bias", has_tensor(m, "blk.0.attn_q.bias"));
	put_bool(m, "use_qk_norm", has_tensor(m, "blk.0.attn_q_norm.weight"));
	put_num(m, "num_nextn_predict_layers", n_mtp);
	grouped_moe(m, n_layers, 2);
	bool yarn;
	rope_scaling(m, false, &yarn);
}

/* gpt-oss (llm_build_openai_moe): sliding window on the layers of
 * sliding_window_pattern (every other layer by default), sinks, biased
 * experts with the clamped GLU (limit 7, as llama.cpp and transformers
 * hard-code it), YaRN. */
static void family_gpt_oss(struct meta *m, uint32_t n_layers, uint32_t hidden, uint32_t heads)
{
	uint32_t ff_exp = 0, n_exp = 0, used = 0, swa = 0, period = 2;
	float theta_swa = 0, theta = 10000.0f;
	get_u32(m, "expert_feed_forward_length", true, &ff_exp);
	get_u32(m, "expert_count", true, &n_exp);
	get_u32(m, "expert_used_count", true, &used);
	get_u32(m, "attention.sliding_window", true, &swa);
	get_f32(m, "rope.freq_base", false, &theta);
	if (get_f32(m, "rope.freq_base_swa", false, &theta_swa) == 1 && !m->rc && theta_swa != theta)
		m->rc = error_set(ENOTSUP, "%s: gpt-oss.rope.freq_base_swa %g differs from rope.freq_base %g", m->path,
				  (double)theta_swa, (double)theta);
	uint32_t hd = head_dim(m, hidden, heads);
	full_rotary(m, hd);
	if (m->rc)
		return;
	/* sliding_window_pattern: a period (layer il slides when il % period
	 * < period - 1; 0: every layer) or a per-layer bool array. */
	char key[160];
	const struct gguf_kv *pat = gguf_find_kv(m->set, akey(m, "attention.sliding_window_pattern", key, sizeof key));
	cJSON *types = cJSON_AddArrayToObject(m->cfg, "layer_types");
	if (!types) {
		m->rc = -ENOMEM;
		return;
	}
	if (pat && pat->type == GGUF_VT_ARRAY) {
		if (pat->arr_type != GGUF_VT_BOOL || pat->n != n_layers) {
			m->rc = error_set(EINVAL, "%s: %s must be %u bools (one per layer) or one period", m->path, key,
					  n_layers);
			return;
		}
	} else if (pat && (m->rc = gguf_get_u32(m->set, key, &period))) {
		return;
	}
	for (uint32_t l = 0; l < n_layers; l++) {
		bool sliding = pat && pat->type == GGUF_VT_ARRAY ? ((const uint8_t *)pat->data)[l] != 0
								  : period == 0 || l % period < period - 1;
		cJSON_AddItemToArray(types, cJSON_CreateString(sliding ? "sliding_attention" : "full_attention"));
	}
	put_num(m, "intermediate_size", ff_exp);
	put_num(m, "num_local_experts", n_exp);
	put_num(m, "num_experts_per_tok", used);
	put_num(m, "experts_per_token", used);
	put_num(m, "sliding_window", swa);
	put_bool(m, "attention_bias", has_tensor(m, "blk.0.attn_q.bias"));
	put_num(m, "swiglu_limit", 7.0);
	bool yarn;
	rope_scaling(m, true, &yarn);
	if (m->rc)
		return;
	cJSON *r = cJSON_GetObjectItemCaseSensitive(m->cfg, "rope_scaling");
	if (yarn) {
		/* gpt-oss was trained with YaRN's correction range unrounded
		 * (transformers: truncate false); llama.cpp's ggml rounds it. */
		cJSON_AddBoolToObject(r, "truncate", false);
	} else {
		/* Without it GptOssConfig would assume YaRN factor 32. */
		r = cJSON_AddObjectToObject(m->cfg, "rope_scaling");
		put_str(m, r, "rope_type", "default");
	}
}

/* MiniMax-M2 (llm_build_minimax_m2): whole-projection q/k norms, partial
 * rotate-half RoPE over rope.dimension_count dims, sigmoid routing whose
 * chosen weights are renormalised (norm_w = true), no scaling. */
static void family_minimax_m2(struct meta *m, uint32_t hidden, uint32_t heads)
{
	uint32_t ff_exp = 0, n_exp = 0, used = 0, gating = 0, rot = 0;
	float scale = 0;
	get_u32(m, "expert_feed_forward_length", true, &ff_exp);
	get_u32(m, "expert_count", true, &n_exp);
	get_u32(m, "expert_used_count", true, &used);
	get_u32(m, "expert_gating_func", false, &gating);
	get_f32(m, "expert_weights_scale", false, &scale);
	uint32_t hd = head_dim(m, hidden, heads);
	rot = hd;
	get_u32(m, "rope.dimension_count", false, &rot);
	if (m->rc)
		return;
	if (gating != 2) {
		m->rc = error_set(ENOTSUP, "%s: minimax-m2.expert_gating_func %u: colibri runs MiniMax-M2 with sigmoid "
				  "routing (2) only", m->path, gating);
		return;
	}
	if (scale != 0 && scale != 1) {
		m->rc = error_set(ENOTSUP, "%s: minimax-m2.expert_weights_scale %g: MiniMax-M2 does not scale its routing "
				  "weights in colibri", m->path, (double)scale);
		return;
	}
	if (rot < 2 || rot > hd || rot % 2) {
		m->rc = error_set(EINVAL, "%s: minimax-m2.rope.dimension_count %u must be even and at most the head size "
				  "%u", m->path, rot, hd);
		return;
	}
	put_num(m, "intermediate_size", ff_exp);
	put_num(m, "num_local_experts", n_exp);
	put_num(m, "num_experts_per_tok", used);
	put_num(m, "rotary_dim", rot);
	bool yarn;
	rope_scaling(m, false, &yarn);
}

static const char *hf_architecture(const char *mt)
{
	static const char *const names[][2] = {
		{ "olmoe", "OlmoeForCausalLM" }, { "qwen3_moe", "Qwen3MoeForCausalLM" },
		{ "mixtral", "MixtralForCausalLM" }, { "deepseek_v3", "DeepseekV3ForCausalLM" },
		{ "glm4_moe", "Glm4MoeForCausalLM" }, { "gpt_oss", "GptOssForCausalLM" },
		{ "minimax_m2", "MiniMaxM2ForCausalLM" },
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(names[i][0], mt))
			return names[i][1];
	return "";
}

int gguf_meta_config(const struct gguf_set *set, cJSON **config)
{
	*config = NULL;
	struct meta m = { .set = set, .path = set->n_files ? set->files[0].path : "(gguf)" };
	int rc = gguf_get_str(set, "general.architecture", &m.arch);
	if (rc == -ENOENT)
		return error_set(EINVAL, "%s: missing key general.architecture", m.path);
	if (rc)
		return rc;
	const char *mt = NULL;
	uint32_t n_exp = 0;
	if (!strcmp(m.arch, "olmoe"))
		mt = "olmoe";
	else if (!strcmp(m.arch, "qwen3moe"))
		mt = "qwen3_moe";
	else if (!strcmp(m.arch, "deepseek2"))
		mt = "deepseek_v3";
	else if (!strcmp(m.arch, "glm4moe"))
		mt = "glm4_moe";
	else if (!strcmp(m.arch, "gpt-oss"))
		mt = "gpt_oss";
	else if (!strcmp(m.arch, "minimax-m2"))
		mt = "minimax_m2";
	else if (!strcmp(m.arch, "llama")) {
		rc = get_u32(&m, "expert_count", false, &n_exp);
		if (rc < 0)
			return rc;
		if (n_exp == 0)
			return error_set(ENOTSUP, "%s: architecture llama without experts (a dense Llama) is not supported "
					 "from GGUF (colibri runs MoE models: %s)", m.path, GGUF_SUPPORTED);
		mt = "mixtral";
	}
	if (!mt)
		return error_set(ENOTSUP, "%s: architecture %s is not supported from GGUF (colibri runs %s)", m.path,
				 m.arch, GGUF_SUPPORTED);

	m.cfg = cJSON_CreateObject();
	if (!m.cfg)
		return -ENOMEM;
	put_str(&m, m.cfg, "model_type", mt);
	cJSON *archs = cJSON_AddArrayToObject(m.cfg, "architectures");
	if (archs)
		cJSON_AddItemToArray(archs, cJSON_CreateString(hf_architecture(mt)));
	/* MTP layers: GLM's converter counts them in block_count. */
	uint32_t n_mtp = 0, n_layers = 0, heads = 0, hidden = 0;
	if (!strcmp(m.arch, "glm4moe") || !strcmp(m.arch, "deepseek2"))
		get_u32(&m, "nextn_predict_layers", false, &n_mtp);
	common_fields(&m, n_mtp, &n_layers, &heads, &hidden);
	if (!m.rc) {
		if (!strcmp(mt, "olmoe"))
			family_olmoe(&m, hidden, heads);
		else if (!strcmp(mt, "qwen3_moe"))
			family_qwen3moe(&m, n_layers, hidden, heads);
		else if (!strcmp(mt, "mixtral"))
			family_mixtral(&m, hidden, heads);
		else if (!strcmp(mt, "deepseek_v3"))
			family_deepseek2(&m, n_layers, n_mtp, heads);
		else if (!strcmp(mt, "glm4_moe"))
			family_glm4moe(&m, n_layers, n_mtp, hidden, heads);
		else if (!strcmp(mt, "minimax_m2"))
			family_minimax_m2(&m, hidden, heads);
		else
			family_gpt_oss(&m, n_layers, hidden, heads);
	}
	if (m.rc)
		goto fail;
	/* What colibri will make of it, checked now so that a GGUF with values
	 * colibri refuses fails here, naming the file, not at load time. */
	struct model_config *cfg = calloc(1, sizeof *cfg);
	if (!cfg) {
		m.rc = -ENOMEM;
		goto fail;
	}
	m.rc = model_config_parse(cfg, m.cfg, m.path);
	if (!m.rc && !strcmp(mt, "glm4_moe")) {
		uint32_t rot = 0;
		get_u32(&m, "rope.dimension_count", false, &rot);
		if (!m.rc && rot && (uint32_t)cfg->rot_dim != rot)
			m.rc = error_set(ENOTSUP, "%s: glm4moe.rope.dimension_count %u of head size %d is not a partial "
					 "rotary factor colibri reproduces (%d dims)", m.path, rot, cfg->head_dim,
					 cfg->rot_dim);
	}
	free(cfg);
	if (m.rc)
		goto fail;
	*config = m.cfg;
	return 0;
fail:
	if (m.rc == -ENOMEM)
		error_set(ENOMEM, "%s: out of memory building config.json", m.path);
	cJSON_Delete(m.cfg);
	return m.rc;
}
