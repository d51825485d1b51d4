/*
 * model_config — config.json -> struct model_config for each supported
 * family. Field names and defaults follow the transformers config classes
 * (OlmoeConfig, Qwen3MoeConfig, MixtralConfig).
 */
#include "engine/model/model_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/files.h"
#include "base/json_get.h"
#include "base/error.h"
#include "engine/model/model_config_internal.h"
#include "compute/fmath.h"

/* eos_token_id may be an integer or a list of integers, each a token of
 * the vocabulary. */
static int cfg_eos(struct model_config *cfg, const cJSON *j, const char *src)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v) && !cJSON_IsArray(v))
		return error_set(EINVAL, "%s: eos_token_id must be an integer or a list", src);
	if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > MODEL_EOS_MAX)
		return error_set(EINVAL, "%s: eos_token_id lists %d ids; colibri keeps at most %d", src,
				 cJSON_GetArraySize(v), MODEL_EOS_MAX);
	cfg->n_eos = 0;
	const cJSON *e = cJSON_IsArray(v) ? v->child : v;
	for (int i = 0; e; e = cJSON_IsArray(v) ? e->next : NULL, i++) {
		char field[32];
		int64_t id;
		if (cJSON_IsArray(v))
			snprintf(field, sizeof field, "eos_token_id[%d]", i);
		else
			snprintf(field, sizeof field, "eos_token_id");
		int rc = json_item_int(e, src, field, 0, (int64_t)cfg->vocab - 1, &id);
		if (rc)
			return rc;
		cfg->eos_ids[cfg->n_eos++] = (int32_t)id;
	}
	return 0;
}

/* What transformers v5.15.0's config classes default to when config.json
 * leaves a field out (OlmoeConfig, Qwen3MoeConfig, MixtralConfig,
 * DeepseekV3Config, Glm4MoeConfig, DeepseekV32Config, GlmMoeDsaConfig,
 * MiniMaxM2Config, GptOssConfig). */
struct family_defaults {
	double rms_eps, rope_theta, routed_scaling;
	int32_t max_positions, bos_id, eos_id; /* -1: none */
	int32_t n_group, topk_group, first_dense;
	int32_t head_dim;                      /* 0: hidden_size / num_attention_heads */
};

static const struct family_defaults family_defaults[MODEL_ARCH_INKLING + 1] = {
	[MODEL_ARCH_OLMOE] = { 1e-5, 10000.0, 1.0, 4096, -1, 50279, 1, 1, 0, 0 },
	[MODEL_ARCH_QWEN3_MOE] = { 1e-6, 10000.0, 1.0, 32768, -1, -1, 1, 1, 0, 0 },
	[MODEL_ARCH_MIXTRAL] = { 1e-5, 1000000.0, 1.0, 4096 * 32, 1, 2, 1, 1, 0, 0 },
	[MODEL_ARCH_DEEPSEEK_V3] = { 1e-6, 10000.0, 2.5, 4096, 0, 1, 8, 4, 3, 0 },
	[MODEL_ARCH_GLM4_MOE] = { 1e-5, 10000.0, 1.0, 131072, -1, -1, 1, 1, 1, 0 },
	[MODEL_ARCH_DEEPSEEK_V32] = { 1e-6, 10000.0, 2.5, 163840, 0, 1, 8, 4, 3, 0 },
	[MODEL_ARCH_GLM_MOE_DSA] = { 1e-5, 10000.0, 2.5, 202752, 0, 1, 1, 1, 3, 0 },
	[MODEL_ARCH_QWEN3_5_MOE] = { 1e-6, 10000.0, 1.0, 32768, -1, -1, 1, 1, 0, 256 },
	[MODEL_ARCH_QWEN3_NEXT] = { 1e-6, 10000.0, 1.0, 32768, -1, -1, 1, 1, 0, 256 },
	[MODEL_ARCH_DEEPSEEK_V4] = { 1e-6, 10000.0, 1.5, 1048576, 0, 1, 1, 1, 0, 512 },
	[MODEL_ARCH_MINIMAX_M2] = { 1e-6, 5000000.0, 1.0, 196608, 200034, 200020, 1, 1, 0, 128 },
	[MODEL_ARCH_GPT_OSS] = { 1e-5, 150000.0, 1.0, 131072, -1, -1, 1, 1, 0, 64 },
	[MODEL_ARCH_INKLING] = { 1e-6, 10000.0, 8.0, 131072, 1, 2, 1, 1, 0, 128 },
};

/* DeepseekV4Config, GptOssConfig and InklingTextConfig give the sizes the
 * other classes require a default too (0 in the other families: the field
 * must be present). */
struct family_sizes {
	int32_t n_layers, hidden, n_heads, n_kv_heads, vocab; /* n_kv_heads 0: num_attention_heads */
};

static const struct family_sizes family_sizes[] = {
	[MODEL_ARCH_DEEPSEEK_V4] = { 43, 4096, 64, 1, 129280 },
	[MODEL_ARCH_GPT_OSS] = { 36, 2880, 64, 8, 201088 },
	[MODEL_ARCH_INKLING] = { 66, 6144, 64, 8, 201024 },
};

static int64_t size_default(int32_t v)
{
	return v ? v : CFG_REQUIRED;
}

/* Whether the family chooses each layer's mixer (layer_types), rather than
 * one mixer for every layer. */
static bool family_hybrid(enum model_arch a)
{
	return a == MODEL_ARCH_QWEN3_5_MOE || a == MODEL_ARCH_QWEN3_NEXT;
}


/* Each row's block kinds once the family is parsed: the family's mixer
 * (MLA for DeepSeek-V3, MLA + DSA for DeepSeek-V3.2 and GLM-5, MIXER_V4
 * for DeepSeek-V4, GQA for the others) and shared experts beside the
 * routed ones when the family has them. Norms are RMSNorm everywhere;
 * residuals are plain except DeepSeek-V4's hyper-connections. */
static void set_rows(struct model_config *cfg)
{
	enum mixer_kind mixer = MIXER_GQA;
	if (cfg->arch == MODEL_ARCH_DEEPSEEK_V3)
		mixer = MIXER_MLA;
	else if (cfg->arch == MODEL_ARCH_DEEPSEEK_V32 || cfg->arch == MODEL_ARCH_GLM_MOE_DSA)
		mixer = MIXER_MLA_DSA;
	else if (cfg->arch == MODEL_ARCH_DEEPSEEK_V4)
		mixer = MIXER_V4;
	else if (cfg->arch == MODEL_ARCH_INKLING)
		mixer = MIXER_REL;
	for (int l = 0; l < cfg->n_layers + cfg->n_mtp_layers; l++) {
		cfg->rows[l].norm = NORM_RMS;
		cfg->rows[l].residual = cfg->arch == MODEL_ARCH_DEEPSEEK_V4 ? RESIDUAL_HC
				      : cfg->arch == MODEL_ARCH_INKLING ? RESIDUAL_SCONV
									: RESIDUAL_PLAIN;
		if (!family_hybrid(cfg->arch)) /* the hybrids' parsers set each row's mixer */
			cfg->rows[l].mixer = mixer;
		if (cfg->rows[l].ffn == FFN_MOE && cfg->n_shared_experts > 0)
			cfg->rows[l].ffn = FFN_MOE_SHARED;
	}
}

/* rope_theta, or rope_parameters.rope_theta as the newest transformers
 * write it; YaRN scaling (DeepSeek-V3, gpt-oss) is read here, other scaled
 * RoPE variants are refused rather than run wrongly. gpt-oss without any
 * rope set gets GptOssConfig's YaRN (factor 32, beta 32 / 1, truncate
 * false, original 4096). */
static int cfg_rope(struct model_config *cfg, const cJSON *j, const char *src)
{
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
	const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
	const cJSON *sets[2] = { params, scaling };
	cfg->rope_attn_factor = 1.0f;
	cfg->yarn_truncate = true;
	bool none = (!params || cJSON_IsNull(params)) && (!scaling || cJSON_IsNull(scaling));
	if (cfg->arch == MODEL_ARCH_GPT_OSS && none) {
		cfg->yarn = true;
		cfg->yarn_factor = 32.0f;
		cfg->yarn_beta_fast = 32.0f;
		cfg->yarn_beta_slow = 1.0f;
		cfg->yarn_truncate = false;
		cfg->yarn_original_max = 4096;
	}
	for (int i = 0; i < 2; i++) {
		if (!sets[i] || cJSON_IsNull(sets[i]))
			continue;
		if (!cJSON_IsObject(sets[i]))
			return error_set(EINVAL, "%s: %s must be an object", src, i ? "rope_scaling" : "rope_parameters");
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(sets[i], "rope_type");
		if (!t)
			t = cJSON_GetObjectItemCaseSensitive(sets[i], "type");
		if (!cJSON_IsString(t) || strcmp(t->valuestring, "default") == 0)
			continue;
		/* The MLA families: YaRN frequencies and yarn_apply_mscale. */
		bool mla = cfg->arch == MODEL_ARCH_DEEPSEEK_V3 || cfg->arch == MODEL_ARCH_DEEPSEEK_V32 ||
			   cfg->arch == MODEL_ARCH_GLM_MOE_DSA;
		if (strcmp(t->valuestring, "yarn") != 0 || !(mla || cfg->arch == MODEL_ARCH_GPT_OSS))
			return error_set(ENOTSUP, "%s: rope type \"%s\" is not supported for %s", src,
					 t->valuestring, cfg->model_type);
		const cJSON *y = sets[i];
		int rc = 0;
		cfg->yarn = true;
		rc = rc ? rc : cfg_float(y, src, "factor", 1.0, 1.0, 1e6, false, &cfg->yarn_factor);
		rc = rc ? rc : cfg_float(y, src, "beta_fast", 32.0, 0.0, 1e6, true, &cfg->yarn_beta_fast);
		rc = rc ? rc : cfg_float(y, src, "beta_slow", 1.0, 0.0, 1e6, true, &cfg->yarn_beta_slow);
		rc = rc ? rc : cfg_float(y, src, "mscale", 0.0, 0.0, 1e3, false, &cfg->yarn_mscale);
		rc = rc ? rc : cfg_float(y, src, "mscale_all_dim", 0.0, 0.0, 1e3, false, &cfg->yarn_mscale_all_dim);
		rc = rc ? rc : cfg_int(y, src, "original_max_position_embeddings", cfg->max_positions, 1,
				       INT32_MAX, &cfg->yarn_original_max);
		rc = rc ? rc : cfg_bool(y, src, "truncate", true, &cfg->yarn_truncate);
		if (rc)
			return rc;
		if (cJSON_GetObjectItemCaseSensitive(y, "attention_factor"))
			return error_set(ENOTSUP, "%s: an explicit YaRN attention_factor is not supported", src);
	}
	/* The base must exceed 1 for the frequencies to fall with the dim. */
	const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "rope_theta") || !cJSON_IsObject(params) ? j : params;
	return cfg_float(in, src, "rope_theta", family_defaults[cfg->arch].rope_theta, 1.0, 1e15, true,
			 &cfg->rope_theta);
}

/* DeepSeek-V3: MLA, sigmoid grouped routing, shared experts, dense first
 * layers (DeepseekV3Config). */
static int parse_deepseek_v3(struct model_config *cfg, const cJSON *j, const char *src)
{
	int32_t first_dense = family_defaults[cfg->arch].first_dense, freq = 1;
	int rc = 0;
	cfg->qk_norm = QK_NORM_NONE;
	cfg->expert_naming = EXPERT_NAMING_MLP;
	cfg->router = ROUTER_SIGMOID_GROUPED;
	cfg->router_bias = true;
	rc = rc ? rc : cfg_int(j, src, "q_lora_rank", 0, 0, 1 << 20, &cfg->q_lora_rank);
	rc = rc ? rc : cfg_int(j, src, "kv_lora_rank", CFG_REQUIRED, 1, 1 << 20, &cfg->kv_lora_rank);
	rc = rc ? rc : cfg_int(j, src, "qk_nope_head_dim", CFG_REQUIRED, 1, 1 << 16, &cfg->qk_nope_dim);
	rc = rc ? rc : cfg_int(j, src, "qk_rope_head_dim", CFG_REQUIRED, 2, 1 << 16, &cfg->qk_rope_dim);
	rc = rc ? rc : cfg_int(j, src, "v_head_dim", CFG_REQUIRED, 1, 1 << 16, &cfg->v_head_dim);
	rc = rc ? rc : cfg_int(j, src, "first_k_dense_replace", first_dense, 0, cfg->n_layers, &first_dense);
	rc = rc ? rc : cfg_int(j, src, "moe_layer_freq", 1, 1, 1 << 20, &freq);
	rc = rc ? rc : cfg_int(j, src, "num_nextn_predict_layers", 0, 0, 16, &cfg->n_mtp_layers);
	if (rc)
		return rc;
	/* transformers v5.15.0: DeepseekV3Attention reads rope_interleave
	 * (default true); DeepseekV32Attention and GlmMoeDsaAttention always
	 * interleave and read no flag (GLM-5's release sets it true, which
	 * agrees; older versions of modeling_glm_moe_dsa.py rotated halves). */
	bool interleave = true;
	if (cfg->arch == MODEL_ARCH_DEEPSEEK_V3 && (rc = cfg_bool(j, src, "rope_interleave", true, &interleave)))
		return rc;
	cfg->rope_interleave = interleave;
	cfg->head_dim = cfg->qk_nope_dim + cfg->qk_rope_dim;
	cfg->rot_dim = cfg->qk_rope_dim;
	if (cfg->n_layers + cfg->n_mtp_layers > MODEL_LAYERS_MAX)
		return error_set(EINVAL, "%s: too many layers", src);
	for (int l = 0; l < cfg->n_layers + cfg->n_mtp_layers; l++)
		set_moe(cfg, l, l >= first_dense && (l >= cfg->n_layers || l % freq == 0));
	return 0;
}

/* mlp_layer_types (DeepSeek-V3.2, GLM-5): "dense" or "sparse" per decoder
 * layer, overriding first_k_dense_replace when present. */
static int parse_mlp_layer_types(struct model_config *cfg, const cJSON *j, const char *src)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "mlp_layer_types");
	if (!a || cJSON_IsNull(a))
		return 0;
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != cfg->n_layers)
		return error_set(EINVAL, "%s: mlp_layer_types must list num_hidden_layers (%d) entries", src,
				 cfg->n_layers);
	int l = 0;
	for (const cJSON *e = a->child; e; e = e->next, l++) {
		bool dense = cJSON_IsString(e) && strcmp(e->valuestring, "dense") == 0;
		bool sparse = cJSON_IsString(e) && strcmp(e->valuestring, "sparse") == 0;
		if (!dense && !sparse)
			return error_set(EINVAL, "%s: mlp_layer_types[%d] must be \"dense\" or \"sparse\"", src, l);
		set_moe(cfg, l, sparse);
	}
	return 0;
}

/* Which layers reuse the previous layer's selection (GlmMoeDsaConfig):
 * indexer_types ("full" / "shared"), else index_topk_pattern ("F"/"S"
 * characters or a list of words), else layer i is full when
 * max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0. */
static int parse_indexer_types(struct model_config *cfg, const cJSON *j, const char *src)
{
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(j, "indexer_types");
	const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(j, "index_topk_pattern");
	const char *field = "indexer_types";
	if (!types || cJSON_IsNull(types)) {
		types = pattern;
		field = "index_topk_pattern";
	}
	int N = cfg->n_layers;
	if (types && cJSON_IsString(types)) {
		if ((int)strlen(types->valuestring) != N)
			return error_set(EINVAL, "%s: %s must have num_hidden_layers (%d) characters", src, field, N);
		for (int l = 0; l < N; l++) {
			char ch = types->valuestring[l];
			if (ch != 'F' && ch != 'S')
				return error_set(EINVAL, "%s: %s may hold only F and S", src, field);
			cfg->index_shared[l] = ch == 'S';
		}
	} else if (types && !cJSON_IsNull(types)) {
		if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != N)
			return error_set(EINVAL, "%s: %s must list num_hidden_layers (%d) entries", src, field, N);
		int l = 0;
		for (const cJSON *e = types->child; e; e = e->next, l++) {
			bool full = cJSON_IsString(e) && strcmp(e->valuestring, "full") == 0;
			bool shared = cJSON_IsString(e) && strcmp(e->valuestring, "shared") == 0;
			if (!full && !shared)
				return error_set(EINVAL, "%s: %s[%d] must be \"full\" or \"shared\"", src, field, l);
			cfg->index_shared[l] = shared;
		}
	} else {
		int32_t freq = 1, offset = 2;
		int rc = cfg_int(j, src, "index_topk_freq", 1, INT32_MIN, INT32_MAX, &freq);
		rc = rc ? rc : cfg_int(j, src, "index_skip_topk_offset", 2, INT32_MIN, INT32_MAX, &offset);
		if (rc)
			return rc;
		if (freq < 1)
			freq = 1;
		for (int l = 0; l < N; l++) {
			int64_t d = (int64_t)l - offset + 1;
			cfg->index_shared[l] = (d > 0 ? d : 0) % freq != 0;
		}
	}
	/* A shared layer with no full layer before it runs its own indexer
	 * (transformers: prev_topk_indices is None). */
	cfg->index_shared[0] = false;
	return 0;
}

/* DeepSeek-V3.2 and GLM-5: MLA as deepseek_v3 plus the DSA indexer. */
static int parse_dsa(struct model_config *cfg, const cJSON *j, const char *src)
{
	int32_t n_heads_default = cfg->arch == MODEL_ARCH_GLM_MOE_DSA ? 32 : 64;
	int rc = 0;
	cfg->router_mask_inf = true; /* DeepseekV32 / GlmMoeDsa routers mask with -inf */
	rc = rc ? rc : cfg_int(j, src, "index_n_heads", n_heads_default, 1, 4096, &cfg->index_n_heads);
	rc = rc ? rc : cfg_int(j, src, "index_head_dim", 128, 1, 1 << 16, &cfg->index_head_dim);
	rc = rc ? rc : cfg_int(j, src, "index_topk", 2048, 1, INT32_MAX, &cfg->index_topk);
	rc = rc ? rc : parse_mlp_layer_types(cfg, j, src);
	if (rc)
		return rc;
	if (cfg->q_lora_rank == 0)
		return error_set(EINVAL, "%s: the DSA indexer needs q_lora_rank (it reads the query latent)", src);
	if (cfg->index_head_dim < cfg->qk_rope_dim)
		return error_set(EINVAL, "%s: index_head_dim %d is smaller than qk_rope_head_dim %d", src,
				 cfg->index_head_dim, cfg->qk_rope_dim);
	/* transformers v5.15.0 reads no flag for the indexer's pairing:
	 * DeepseekV32Indexer rotates halves, GlmMoeDsaIndexer interleaves. */
	cfg->index_rope_interleave = cfg->arch == MODEL_ARCH_GLM_MOE_DSA;
	if (cfg->arch == MODEL_ARCH_GLM_MOE_DSA)
		return parse_indexer_types(cfg, j, src);
	return 0;
}

/* GLM-4.5/4.6/4.7 (Glm4MoeConfig): GQA with biases, per-head q/k norm,
 * partial rotary, DeepSeek-style routing and shared experts. */
static int parse_glm4_moe(struct model_config *cfg, const cJSON *j, const char *src)
{
	int32_t first_dense = family_defaults[cfg->arch].first_dense;
	float partial = 0.5f;
	bool qk_norm = false;
	int rc = 0;
	cfg->expert_naming = EXPERT_NAMING_MLP;
	cfg->router = ROUTER_SIGMOID_GROUPED;
	cfg->router_bias = true;
	rc = rc ? rc : cfg_bool(j, src, "attention_bias", false, &cfg->attn_bias);
	rc = rc ? rc : cfg_bool(j, src, "use_qk_norm", false, &qk_norm);
	rc = rc ? rc : cfg_float(j, src, "partial_rotary_factor", 0.5, 0.0, 1.0, true, &partial);
	rc = rc ? rc : cfg_int(j, src, "first_k_dense_replace", first_dense, 0, cfg->n_layers, &first_dense);
	rc = rc ? rc : cfg_int(j, src, "num_nextn_predict_layers", 0, 0, 16, &cfg->n_mtp_layers);
	if (rc)
		return rc;
	cfg->qk_norm = qk_norm ? QK_NORM_HEAD : QK_NORM_NONE;
	cfg->rot_dim = (int32_t)(cfg->head_dim * partial);
	cfg->rot_dim -= cfg->rot_dim % 2;
	cfg->rope_interleave = 0;
	if (cfg->n_layers + cfg->n_mtp_layers > MODEL_LAYERS_MAX)
		return error_set(EINVAL, "%s: too many layers", src);
	for (int l = 0; l < cfg->n_layers + cfg->n_mtp_layers; l++)
		set_moe(cfg, l, l >= first_dense);
	return 0;
}

/* Fields DeepSeek-V3 and GLM share: routed and shared experts, grouped
 * sigmoid routing. */
static int parse_grouped_moe(struct model_config *cfg, const cJSON *j, const char *src)
{
	int rc = 0;
	rc = rc ? rc : cfg_int(j, src, "intermediate_size", CFG_REQUIRED, 1, 1 << 24, &cfg->intermediate);
	rc = rc ? rc : cfg_int(j, src, "moe_intermediate_size", CFG_REQUIRED, 1, 1 << 24, &cfg->moe_intermediate);
	rc = rc ? rc : cfg_int(j, src, "n_routed_experts", CFG_REQUIRED, 1, 65536, &cfg->n_experts);
	rc = rc ? rc : cfg_int(j, src, "num_experts_per_tok", CFG_REQUIRED, 1, cfg->n_experts, &cfg->top_k);
	rc = rc ? rc : cfg_int(j, src, "n_shared_experts", 0, 0, 64, &cfg->n_shared_experts);
	const struct family_defaults *d = &family_defaults[cfg->arch];
	rc = rc ? rc : cfg_int(j, src, "n_group", d->n_group, 1,
			       cfg->n_experts < MODEL_GROUPS_MAX ? cfg->n_experts : MODEL_GROUPS_MAX, &cfg->n_group);
	rc = rc ? rc : cfg_int(j, src, "topk_group", d->topk_group < cfg->n_group ? d->topk_group : cfg->n_group, 1,
			       cfg->n_group, &cfg->topk_group);
	/* 1e308 would overflow every routing weight to inf (and the output to
	 * NaN or 0); real models use 1 to 2.5. */
	rc = rc ? rc : cfg_float(j, src, "routed_scaling_factor", d->routed_scaling, 0.0, 1e3, true,
				 &cfg->routed_scaling);
	rc = rc ? rc : cfg_bool(j, src, "norm_topk_prob", true, &cfg->norm_topk_prob);
	if (rc)
		return rc;
	const cJSON *sf = cJSON_GetObjectItemCaseSensitive(j, "scoring_func");
	if (sf && !(cJSON_IsString(sf) && strcmp(sf->valuestring, "sigmoid") == 0))
		return error_set(ENOTSUP, "%s: scoring_func other than sigmoid is not supported", src);
	if (cfg->n_experts % cfg->n_group)
		return error_set(EINVAL, "%s: n_routed_experts %d is not a multiple of n_group %d", src,
				 cfg->n_experts, cfg->n_group);
	if (cfg->top_k > cfg->topk_group * (cfg->n_experts / cfg->n_group))
		return error_set(EINVAL, "%s: num_experts_per_tok exceeds the experts of topk_group groups", src);
	return 0;
}

/* mlp_only_layers (Qwen3-MoE): decoder layers with a dense MLP. */
static int parse_mlp_only_layers(const struct model_config *cfg, const cJSON *j, const char *src, bool *dense)
{
	const cJSON *only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
	if (!only || cJSON_IsNull(only))
		return 0;
	if (!cJSON_IsArray(only))
		return error_set(EINVAL, "%s: mlp_only_layers must be a list", src);
	int i = 0;
	for (const cJSON *e = only->child; e; e = e->next, i++) {
		char field[32];
		int64_t l;
		snprintf(field, sizeof field, "mlp_only_layers[%d]", i);
		int rc = json_item_int(e, src, field, 0, cfg->n_layers - 1, &l);
		if (rc)
			return rc;
		dense[l] = true;
	}
	return 0;
}

/* layer_types (Qwen3_5MoeTextConfig, Qwen3NextConfig): "linear_attention"
 * or "full_attention" per decoder layer, with the legacy names transformers
 * remaps ("mamba" and "conv" are linear, "attention" full); without it
 * every full_attention_interval-th layer is full. */
static int parse_layer_types(struct model_config *cfg, const cJSON *j, const char *src)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
	if (!a || cJSON_IsNull(a)) {
		int32_t interval;
		int rc = cfg_int(j, src, "full_attention_interval", 4, 1, INT32_MAX, &interval);
		for (int l = 0; !rc && l < cfg->n_layers; l++)
			cfg->rows[l].mixer = (l + 1) % interval ? MIXER_GDN : MIXER_GQA;
		return rc;
	}
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != cfg->n_layers)
		return error_set(EINVAL, "%s: layer_types must list num_hidden_layers (%d) entries", src, cfg->n_layers);
	int l = 0;
	for (const cJSON *e = a->child; e; e = e->next, l++) {
		const char *t = cJSON_IsString(e) ? e->valuestring : "";
		if (!strcmp(t, "linear_attention") || !strcmp(t, "mamba") || !strcmp(t, "conv"))
			cfg->rows[l].mixer = MIXER_GDN;
		else if (!strcmp(t, "full_attention") || !strcmp(t, "attention"))
			cfg->rows[l].mixer = MIXER_GQA;
		else
			return error_set(EINVAL, "%s: layer_types[%d] must be \"linear_attention\" or \"full_attention\"",
					 src, l);
	}
	return 0;
}

/* partial_rotary_factor as transformers v5.15.0 finds it: in
 * rope_parameters, else at the top level, else the config class's 0.25. */
static int parse_partial_rotary(struct model_config *cfg, const cJSON *j, const char *src)
{
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
	const cJSON *in = j;
	if (cJSON_IsObject(params) && cJSON_GetObjectItemCaseSensitive(params, "partial_rotary_factor"))
		in = params;
	float partial;
	int rc = cfg_float(in, src, "partial_rotary_factor", 0.25, 0.0, 1.0, true, &partial);
	if (rc)
		return rc;
	cfg->rot_dim = (int32_t)(cfg->head_dim * partial);
	cfg->rot_dim -= cfg->rot_dim % 2;
	if (cfg->rot_dim < 2)
		return error_set(EINVAL, "%s: partial_rotary_factor %g of head_dim %d rotates no pair of dims", src,
				 (double)partial, cfg->head_dim);
	return 0;
}

/* Qwen3.5/3.6-MoE (Qwen3_5MoeTextConfig) and Qwen3-Next (Qwen3NextConfig)
 * as transformers v5.15.0 defines them: Gated DeltaNet layers and gated
 * full attention (layer_types), zero-centred RMSNorms, per-head q/k norms,
 * rotate-half RoPE over a part of each head, softmax top-k routing
 * (Qwen3.5 always renormalises) and one shared expert scaled by a sigmoid
 * gate. Qwen3-Next may make layers dense (mlp_only_layers,
 * decoder_sparse_step). The MTP block (mtp_num_hidden_layers) is one more
 * full-attention layer with the MoE. */
static int parse_qwen35(struct model_config *cfg, const cJSON *j, const char *src)
{
	bool next = cfg->arch == MODEL_ARCH_QWEN3_NEXT;
	int32_t step = 1;
	int rc = 0;
	cfg->qk_norm = QK_NORM_HEAD;
	cfg->expert_naming = EXPERT_NAMING_MLP;
	cfg->norm_zero_centred = true;
	cfg->attn_gate = true;
	cfg->shared_gate = true;
	cfg->n_shared_experts = 1;
	cfg->norm_topk_prob = true;
	cfg->rope_interleave = 0;
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
	if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
		return error_set(ENOTSUP, "%s: hidden_act other than \"silu\" is not supported for %s", src,
				 cfg->model_type);
	rc = rc ? rc : cfg_bool(j, src, "attention_bias", false, &cfg->attn_bias);
	rc = rc ? rc : cfg_int(j, src, "intermediate_size", next ? 5632 : 0, 0, 1 << 24, &cfg->intermediate);
	rc = rc ? rc : cfg_int(j, src, "moe_intermediate_size", 512, 1, 1 << 24, &cfg->moe_intermediate);
	rc = rc ? rc : cfg_int(j, src, "shared_expert_intermediate_size", 512, 1, 1 << 24, &cfg->shared_intermediate);
	rc = rc ? rc : cfg_int(j, src, "num_experts", next ? 512 : 256, next ? 0 : 1, 65536, &cfg->n_experts);
	rc = rc ? rc : cfg_int(j, src, "num_experts_per_tok", next ? 10 : 8, 1, 65536, &cfg->top_k);
	if (next) {
		rc = rc ? rc : cfg_bool(j, src, "norm_topk_prob", true, &cfg->norm_topk_prob);
		rc = rc ? rc : cfg_int(j, src, "decoder_sparse_step", 1, 1, 1 << 20, &step);
	}
	rc = rc ? rc : cfg_int(j, src, "linear_conv_kernel_dim", 4, 1, 64, &cfg->lin_conv);
	rc = rc ? rc : cfg_int(j, src, "linear_key_head_dim", 128, 1, 4096, &cfg->lin_k_dim);
	rc = rc ? rc : cfg_int(j, src, "linear_value_head_dim", 128, 1, 4096, &cfg->lin_v_dim);
	rc = rc ? rc : cfg_int(j, src, "linear_num_key_heads", 16, 1, 4096, &cfg->lin_k_heads);
	rc = rc ? rc : cfg_int(j, src, "linear_num_value_heads", 32, 1, 4096, &cfg->lin_v_heads);
	/* Qwen3.5 announces its MTP block as mtp_num_hidden_layers; for
	 * Qwen3-Next vLLM also reads num_nextn_predict_layers. */
	const char *mtp = next && !cJSON_GetObjectItemCaseSensitive(j, "mtp_num_hidden_layers") ? "num_nextn_predict_layers"
												   : "mtp_num_hidden_layers";
	rc = rc ? rc : cfg_int(j, src, mtp, 0, 0, 16, &cfg->n_mtp_layers);
	rc = rc ? rc : parse_partial_rotary(cfg, j, src);
	rc = rc ? rc : parse_layer_types(cfg, j, src);
	if (rc)
		return rc;
	cfg->lin_grouped = next;
	if (cfg->lin_v_heads % cfg->lin_k_heads)
		return error_set(EINVAL, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
				 src, cfg->lin_v_heads, cfg->lin_k_heads);
	if (cfg->n_experts > 0 && cfg->top_k > cfg->n_experts)
		return error_set(EINVAL, "%s: num_experts_per_tok %d exceeds num_experts %d", src, cfg->top_k,
				 cfg->n_experts);
	if (cfg->n_layers + cfg->n_mtp_layers > MODEL_LAYERS_MAX)
		return error_set(EINVAL, "%s: too many layers", src);
	bool dense_only[MODEL_LAYERS_MAX] = { false };
	if (next && (rc = parse_mlp_only_layers(cfg, j, src, dense_only)))
		return rc;
	for (int l = 0; l < cfg->n_layers + cfg->n_mtp_layers; l++) {
		bool decoder = l < cfg->n_layers;
		set_moe(cfg, l, cfg->n_experts > 0 && !(decoder && (dense_only[l] || (l + 1) % step != 0)));
		if (!decoder)
			cfg->rows[l].mixer = MIXER_GQA;
		if (!model_config_layer_moe(cfg, l) && cfg->intermediate <= 0)
			return error_set(EINVAL, "%s: layer %d is dense but intermediate_size is missing", src, l);
	}
	return 0;
}

/* A string-list field of DeepseekV4Config (layer_types, mlp_layer_types):
 * at least num_hidden_layers entries (transformers keeps the first that
 * many), each one of names[0..n_names), stored as its index in out. */
static int v4_type_list(const struct model_config *cfg, const cJSON *a, const char *src, const char *field,
			const char *const *names, int n_names, int *out)
{
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < cfg->n_layers)
		return error_set(EINVAL, "%s: %s must list num_hidden_layers (%d) entries", src, field, cfg->n_layers);
	int l = 0;
	for (const cJSON *e = a->child; e && l < cfg->n_layers; e = e->next, l++) {
		out[l] = -1;
		for (int i = 0; i < n_names && cJSON_IsString(e); i++)
			if (strcmp(e->valuestring, names[i]) == 0)
				out[l] = i;
		if (out[l] < 0)
			return error_set(EINVAL, "%s: %s[%d] must be \"%s\" or \"%s\"%s%s%s", src, field, l, names[0],
					 names[1], n_names > 2 ? " or \"" : "", n_names > 2 ? names[2] : "",
					 n_names > 2 ? "\"" : "");
	}
	return 0;
}

/* Each layer's attention (DeepseekV4Config.__post_init__): layer_types,
 * else the legacy per-layer compress_ratios (0 sliding, 4 CSA, 128 HCA),
 * else two HCA layers and then CSA and HCA in turn. */
static int v4_layer_types(struct model_config *cfg, const cJSON *j, const char *src)
{
	static const char *const names[] = { "sliding_attention", "compressed_sparse_attention",
					     "heavily_compressed_attention" };
	int types[MODEL_LAYERS_MAX];
	const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
	const cJSON *ratios = cJSON_GetObjectItemCaseSensitive(j, "compress_ratios");
	int N = cfg->n_layers, rc = 0;
	if (lt && !cJSON_IsNull(lt)) {
		rc = v4_type_list(cfg, lt, src, "layer_types", names, 3, types);
	} else if (ratios && !cJSON_IsNull(ratios)) {
		if (!cJSON_IsArray(ratios) || cJSON_GetArraySize(ratios) < N)
			return error_set(EINVAL, "%s: compress_ratios must list num_hidden_layers (%d) entries", src, N);
		/* Every entry maps; a released config lists its MTP layers after
		 * the decoder layers (DeepSeek's Attention reads
		 * compress_ratios[layer_id] for them too). */
		int l = 0;
		for (const cJSON *e = ratios->child; e && !rc; e = e->next, l++) {
			char field[32];
			int64_t r;
			snprintf(field, sizeof field, "compress_ratios[%d]", l);
			rc = json_item_int(e, src, field, 0, 128, &r);
			if (!rc && r != 0 && r != 4 && r != 128)
				rc = error_set(EINVAL, "%s: %s must be 0, 4 or 128, not %lld", src, field, (long long)r);
			if (l < MODEL_LAYERS_MAX)
				types[l] = r == 0 ? V4_ATTN_SLIDING : r == 4 ? V4_ATTN_CSA : V4_ATTN_HCA;
		}
	} else {
		for (int l = 0; l < N; l++)
			types[l] = l < 2 || (l - 2) % 2 == 0 ? V4_ATTN_HCA : V4_ATTN_CSA;
	}
	for (int l = 0; !rc && l < N; l++)
		cfg->v4_attn[l] = (enum v4_attn)types[l];
	/* MTP layers: their compress_ratios entry when the list has one, else
	 * sliding (layer_types covers the decoder layers only). */
	int listed = ratios && cJSON_IsArray(ratios) && !(lt && !cJSON_IsNull(lt)) ? cJSON_GetArraySize(ratios) : N;
	for (int l = N; !rc && l < MODEL_LAYERS_MAX; l++)
		cfg->v4_attn[l] = l < listed ? (enum v4_attn)types[l] : V4_ATTN_SLIDING;
	return rc;
}

/* compress_rates {"compressed_sparse_attention": m, "heavily_compressed_attention": m'}
 * (default 4 and 128), with the legacy compress_rate_csa / compress_rate_hca
 * folded in over it. */
static int v4_compress_rates(struct model_config *cfg, const cJSON *j, const char *src)
{
	const cJSON *rates = cJSON_GetObjectItemCaseSensitive(j, "compress_rates");
	const char *keys[2] = { "compressed_sparse_attention", "heavily_compressed_attention" };
	const char *legacy[2] = { "compress_rate_csa", "compress_rate_hca" };
	int32_t *out[2] = { &cfg->compress_rate_csa, &cfg->compress_rate_hca };
	int32_t def[2] = { 4, 128 };
	bool given = rates && !cJSON_IsNull(rates);
	if (given && !cJSON_IsObject(rates))
		return error_set(EINVAL, "%s: compress_rates must be an object", src);
	for (int i = 0; i < 2; i++) {
		char field[64];
		snprintf(field, sizeof field, "compress_rates.%s", keys[i]);
		const cJSON *v = given ? cJSON_GetObjectItemCaseSensitive(rates, keys[i]) : NULL;
		const cJSON *old = cJSON_GetObjectItemCaseSensitive(j, legacy[i]);
		int64_t r = def[i];
		int rc = 0;
		if (old && !cJSON_IsNull(old))
			rc = json_item_int(old, src, legacy[i], 1, 1 << 16, &r);
		else if (v)
			rc = json_item_int(v, src, field, 1, 1 << 16, &r);
		else if (given) /* transformers indexes the dict with both keys */
			rc = error_set(EINVAL, "%s: compress_rates lacks \"%s\"", src, keys[i]);
		if (rc)
			return rc;
		*out[i] = (int32_t)r;
	}
	return 0;
}

/* A rope set's rope_type ("type" in older files), "default" when absent. */
static const char *v4_rope_type(const cJSON *set)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(set, "rope_type");
	if (!t || cJSON_IsNull(t))
		t = cJSON_GetObjectItemCaseSensitive(set, "type");
	return cJSON_IsString(t) ? t->valuestring : t && !cJSON_IsNull(t) ? "" : "default";
}

/* The compressed layers' RoPE when it is YaRN: its frequencies' fields and
 * the factor on cos and sin. transformers: an explicit attention_factor,
 * else 1.0 (flat rope parameters, forced by DeepseekV4Config), else (a
 * nested "compress" set) the factor _compute_yarn_parameters infers from
 * factor, mscale and mscale_all_dim. */
static int v4_yarn(struct model_config *cfg, const cJSON *y, const char *src, bool nested)
{
	int rc = 0;
	cfg->yarn = true;
	if (!cJSON_GetObjectItemCaseSensitive(y, "factor"))
		return error_set(EINVAL, "%s: the YaRN rope parameters lack factor", src);
	rc = rc ? rc : cfg_float(y, src, "factor", 1.0, 1.0, 1e6, false, &cfg->yarn_factor);
	rc = rc ? rc : cfg_float(y, src, "beta_fast", 32.0, 0.0, 1e6, true, &cfg->yarn_beta_fast);
	rc = rc ? rc : cfg_float(y, src, "beta_slow", 1.0, 0.0, 1e6, true, &cfg->yarn_beta_slow);
	rc = rc ? rc : cfg_float(y, src, "mscale", 0.0, 0.0, 1e3, false, &cfg->yarn_mscale);
	rc = rc ? rc : cfg_float(y, src, "mscale_all_dim", 0.0, 0.0, 1e3, false, &cfg->yarn_mscale_all_dim);
	rc = rc ? rc : cfg_int(y, src, "original_max_position_embeddings", cfg->max_positions, 1, INT32_MAX,
			       &cfg->yarn_original_max);
	rc = rc ? rc : cfg_bool(y, src, "truncate", true, &cfg->yarn_truncate);
	float af = 1.0f;
	if (!rc && cJSON_GetObjectItemCaseSensitive(y, "attention_factor"))
		rc = cfg_float(y, src, "attention_factor", 1.0, 0.0, 1e3, true, &af);
	else if (!rc && nested && cfg->yarn_factor > 1) {
		float a = 0.1f * fm_logf(cfg->yarn_factor);
		af = cfg->yarn_mscale > 0 && cfg->yarn_mscale_all_dim > 0
			     ? (a * cfg->yarn_mscale + 1.0f) / (a * cfg->yarn_mscale_all_dim + 1.0f)
			     : a + 1.0f;
	}
	cfg->rope_attn_factor = af;
	return rc;
}

/* DeepSeek-V4's two RoPEs (DeepseekV4Config.__post_init__): "main", the
 * default RoPE at rope_theta of the sliding layers, and "compress", that
 * of the compressed layers, their compressors and indexers. Either nested
 * as rope_parameters {"main": {...}, "compress": {...}} (each's rope_theta
 * defaulting to rope_theta), or one flat set (rope_scaling, which
 * transformers prefers, or rope_parameters) whose type and YaRN keys go to
 * compress, at compress_rope_theta. */
static int v4_rope(struct model_config *cfg, const cJSON *j, const char *src)
{
	int rc = cfg_float(j, src, "rope_theta", 10000.0, 1.0, 1e15, true, &cfg->rope_theta);
	rc = rc ? rc : cfg_float(j, src, "compress_rope_theta", 160000.0, 1.0, 1e15, true, &cfg->compress_rope_theta);
	if (rc)
		return rc;
	cfg->rope_attn_factor = 1.0f;
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
	const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
	const char *field = "rope_scaling";
	if (!rs || cJSON_IsNull(rs) || (cJSON_IsObject(rs) && !rs->child)) {
		rs = rp;
		field = "rope_parameters";
	}
	if (!rs || cJSON_IsNull(rs))
		return 0;
	if (!cJSON_IsObject(rs))
		return error_set(EINVAL, "%s: %s must be an object", src, field);
	const cJSON *main = cJSON_GetObjectItemCaseSensitive(rs, "main");
	const cJSON *comp = cJSON_GetObjectItemCaseSensitive(rs, "compress");
	if (cJSON_IsObject(main) && cJSON_IsObject(comp)) {
		if (strcmp(v4_rope_type(main), "default") != 0)
			return error_set(ENOTSUP, "%s: %s.main rope type \"%s\" is not supported (DeepSeek-V4's main RoPE "
					 "is the default one)", src, field, v4_rope_type(main));
		rc = cfg_float(main, src, "rope_theta", cfg->rope_theta, 1.0, 1e15, true, &cfg->rope_theta);
		rc = rc ? rc : cfg_float(comp, src, "rope_theta", cfg->rope_theta, 1.0, 1e15, true,
					 &cfg->compress_rope_theta);
		if (rc)
			return rc;
	} else if ((main && !cJSON_IsNull(main)) || (comp && !cJSON_IsNull(comp))) {
		return error_set(EINVAL, "%s: %s must hold both \"main\" and \"compress\" objects, or neither", src, field);
	} else {
		comp = rs;
	}
	const char *type = v4_rope_type(comp);
	if (strcmp(type, "default") == 0)
		return 0;
	if (strcmp(type, "yarn") != 0)
		return error_set(ENOTSUP, "%s: rope type \"%s\" is not supported for deepseek_v4", src, type);
	return v4_yarn(cfg, comp, src, comp != rs);
}

/* DeepSeek-V4 (DeepseekV4Config, transformers v5.15.0): shared-KV MQA with
 * sliding, CSA and HCA layers, hyper-connections, sqrt-softplus routing
 * with hash-routed first layers, one shared expert, clamped SwiGLU. The
 * num_nextn_predict_layers MTP modules (which transformers does not
 * instantiate) are layers n_layers.. as DeepSeek's inference code builds
 * them (MTPBlock(n_layers + i)): a hyper-connected block with top-k
 * routing, attention as compress_ratios lists it, else sliding. */
static int parse_deepseek_v4(struct model_config *cfg, const cJSON *j, const char *src)
{
	int rc = 0;
	int32_t nextn = 0;
	bool mlp_bias = false;
	cfg->qk_norm = QK_NORM_NONE;
	cfg->expert_naming = EXPERT_NAMING_MLP;
	cfg->router_bias = true; /* on the layers that are not hash-routed */
	cfg->rope_interleave = 1;
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
	if (act && !cJSON_IsNull(act) && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
		return error_set(ENOTSUP, "%s: hidden_act other than \"silu\" is not supported for deepseek_v4", src);
	const cJSON *sf = cJSON_GetObjectItemCaseSensitive(j, "scoring_func");
	if (sf && !cJSON_IsNull(sf) && !(cJSON_IsString(sf) && strcmp(sf->valuestring, "sqrtsoftplus") == 0))
		return error_set(ENOTSUP, "%s: scoring_func other than \"sqrtsoftplus\" is not supported for deepseek_v4",
				 src);
	cfg->router = ROUTER_SQRTSOFTPLUS;
	if (cfg->n_kv_heads != 1)
		return error_set(EINVAL, "%s: num_key_value_heads must be 1 for deepseek_v4 (one shared K = V head), "
				 "not %d", src, cfg->n_kv_heads);
	/* attribute_map: intermediate_size and num_local_experts are other
	 * names of moe_intermediate_size and n_routed_experts. */
	const char *inter = cJSON_GetObjectItemCaseSensitive(j, "moe_intermediate_size") ? "moe_intermediate_size"
		: cJSON_GetObjectItemCaseSensitive(j, "intermediate_size") ? "intermediate_size" : "moe_intermediate_size";
	const char *experts = cJSON_GetObjectItemCaseSensitive(j, "n_routed_experts") ? "n_routed_experts"
		: cJSON_GetObjectItemCaseSensitive(j, "num_local_experts") ? "num_local_experts" : "n_routed_experts";
	rc = rc ? rc : cfg_int(j, src, inter, 2048, 1, 1 << 24, &cfg->moe_intermediate);
	rc = rc ? rc : cfg_int(j, src, experts, 256, 1, 65536, &cfg->n_experts);
	rc = rc ? rc : cfg_top_k(j, src, 6, cfg);
	rc = rc ? rc : cfg_int(j, src, "n_shared_experts", 1, 0, 64, &cfg->n_shared_experts);
	rc = rc ? rc : cfg_bool(j, src, "norm_topk_prob", true, &cfg->norm_topk_prob);
	rc = rc ? rc : cfg_float(j, src, "routed_scaling_factor", 1.5, 0.0, 1e3, true, &cfg->routed_scaling);
	rc = rc ? rc : cfg_float(j, src, "swiglu_limit", 10.0, 0.0, 3.0e38, true, &cfg->swiglu_limit);
	rc = rc ? rc : cfg_bool(j, src, "mlp_bias", false, &mlp_bias);
	rc = rc ? rc : cfg_int(j, src, "q_lora_rank", 1024, 1, 1 << 20, &cfg->q_lora_rank);
	rc = rc ? rc : cfg_int(j, src, "sliding_window", 128, 1, INT32_MAX, &cfg->sliding_window);
	rc = rc ? rc : cfg_int(j, src, "o_groups", 8, 1, 4096, &cfg->o_groups);
	rc = rc ? rc : cfg_int(j, src, "o_lora_rank", 1024, 1, 1 << 20, &cfg->o_lora_rank);
	rc = rc ? rc : cfg_int(j, src, "index_n_heads", 64, 1, 4096, &cfg->index_n_heads);
	rc = rc ? rc : cfg_int(j, src, "index_head_dim", 128, 2, 1 << 16, &cfg->index_head_dim);
	rc = rc ? rc : cfg_int(j, src, "index_topk", 512, 1, INT32_MAX, &cfg->index_topk);
	rc = rc ? rc : cfg_int(j, src, "hc_mult", 4, 1, 64, &cfg->hc_mult);
	rc = rc ? rc : cfg_int(j, src, "hc_sinkhorn_iters", 20, 0, 100000, &cfg->hc_sinkhorn_iters);
	rc = rc ? rc : cfg_float(j, src, "hc_eps", 1e-6, 0.0, 1.0, false, &cfg->hc_eps);
	rc = rc ? rc : cfg_int(j, src, "num_nextn_predict_layers", 1, 0, 16, &nextn);
	rc = rc ? rc : v4_compress_rates(cfg, j, src);
	rc = rc ? rc : v4_layer_types(cfg, j, src);
	rc = rc ? rc : v4_rope(cfg, j, src);
	if (rc)
		return rc;
	if (mlp_bias)
		return error_set(ENOTSUP, "%s: mlp_bias true is not supported for deepseek_v4", src);
	/* DeepseekV4SparseMoeBlock builds one DeepseekV4MLP of
	 * moe_intermediate_size whatever n_shared_experts says. */
	if (cfg->n_shared_experts != 1)
		return error_set(ENOTSUP, "%s: n_shared_experts %d: transformers' DeepSeek-V4 has exactly one shared "
				 "expert of moe_intermediate_size", src, cfg->n_shared_experts);
	cfg->shared_intermediate = cfg->moe_intermediate;
	if (((int64_t)cfg->n_heads * cfg->head_dim) % cfg->o_groups)
		return error_set(EINVAL, "%s: o_groups %d does not divide num_attention_heads * head_dim (%lld)", src,
				 cfg->o_groups, (long long)cfg->n_heads * cfg->head_dim);
	/* partial_rotary_factor, else the legacy qk_rope_head_dim / head_dim,
	 * else 64 / 512; the rotated dims are int(head_dim * factor) (in
	 * double, as Python computes them). */
	double partial = 64.0 / 512.0;
	const cJSON *prf = cJSON_GetObjectItemCaseSensitive(j, "partial_rotary_factor");
	if (prf && !cJSON_IsNull(prf)) {
		rc = json_get_num(j, "partial_rotary_factor", partial, 0.0, 1.0, true, src, &partial);
	} else if (cJSON_GetObjectItemCaseSensitive(j, "qk_rope_head_dim") &&
		   !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "qk_rope_head_dim"))) {
		int32_t qk_rope = 0;
		rc = cfg_int(j, src, "qk_rope_head_dim", 64, 2, cfg->head_dim, &qk_rope);
		partial = (double)qk_rope / cfg->head_dim;
	}
	if (rc)
		return rc;
	cfg->rot_dim = (int32_t)(cfg->head_dim * partial);
	cfg->qk_rope_dim = cfg->rot_dim;
	if (cfg->rot_dim < 2 || cfg->rot_dim % 2)
		return error_set(EINVAL, "%s: partial_rotary_factor %g of head_dim %d rotates %d dims; DeepSeek-V4's "
				 "interleaved RoPE needs an even number of at least 2", src, partial, cfg->head_dim,
				 cfg->rot_dim);
	if (cfg->index_head_dim < cfg->rot_dim)
		return error_set(EINVAL, "%s: index_head_dim %d is smaller than the %d rotated dims", src,
				 cfg->index_head_dim, cfg->rot_dim);
	/* mlp_layer_types, else the legacy num_hash_layers (default 3) first
	 * layers hash-routed. */
	static const char *const mlp_names[] = { "hash_moe", "moe" };
	int mlp[MODEL_LAYERS_MAX];
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "mlp_layer_types");
	if (mt && !cJSON_IsNull(mt)) {
		rc = v4_type_list(cfg, mt, src, "mlp_layer_types", mlp_names, 2, mlp);
	} else {
		int32_t n_hash = 3;
		rc = cfg_int(j, src, "num_hash_layers", 3, 0, MODEL_LAYERS_MAX, &n_hash);
		for (int l = 0; l < cfg->n_layers; l++)
			mlp[l] = l < n_hash ? 0 : 1;
	}
	if (rc)
		return rc;
	if (cfg->n_layers + nextn > MODEL_LAYERS_MAX)
		return error_set(EINVAL, "%s: %d layers and %d MTP layers exceed %d", src, cfg->n_layers, nextn,
				 MODEL_LAYERS_MAX);
	cfg->n_mtp_layers = nextn;
	for (int l = 0; l < cfg->n_layers + nextn; l++) {
		cfg->hash_routed[l] = l < cfg->n_layers && mlp[l] == 0;
		set_moe(cfg, l, true);
	}
	return 0;
}

/* The object holding a text model's fields: a vision-language checkpoint
 * (Qwen3_5MoeConfig) nests them in text_config; fields it leaves out there
 * (tie_word_embeddings, the token ids) are looked up at the top. */
static const cJSON *text_fields(const cJSON *top, const cJSON *text, const char *key)
{
	return text != top && !cJSON_GetObjectItemCaseSensitive(text, key) ? top : text;
}

/* The model_type strings config.json may name and the family each one
 * selects: the one list model_config_parse accepts and model_config_type_at
 * hands out. Two spellings of a family are two layouts of one checkpoint
 * (Qwen3.5's vision-language and text-only configs, Inkling's multimodal
 * and text-only ones). */
static const struct {
	const char *name;
	enum model_arch arch;
} model_types[] = {
	{ "olmoe", MODEL_ARCH_OLMOE },
	{ "qwen3_moe", MODEL_ARCH_QWEN3_MOE },
	{ "mixtral", MODEL_ARCH_MIXTRAL },
	{ "deepseek_v3", MODEL_ARCH_DEEPSEEK_V3 },
	{ "deepseek_v32", MODEL_ARCH_DEEPSEEK_V32 },
	{ "glm4_moe", MODEL_ARCH_GLM4_MOE },
	{ "glm_moe_dsa", MODEL_ARCH_GLM_MOE_DSA },
	{ "qwen3_5_moe", MODEL_ARCH_QWEN3_5_MOE },
	{ "qwen3_5_moe_text", MODEL_ARCH_QWEN3_5_MOE },
	{ "qwen3_next", MODEL_ARCH_QWEN3_NEXT },
	{ "deepseek_v4", MODEL_ARCH_DEEPSEEK_V4 },
	{ "minimax_m2", MODEL_ARCH_MINIMAX_M2 },
	{ "gpt_oss", MODEL_ARCH_GPT_OSS },
	{ "inkling_text", MODEL_ARCH_INKLING },
	{ "inkling_mm_model", MODEL_ARCH_INKLING },
	{ NULL, 0 },
};

const char *model_config_type_at(int i, enum model_arch *arch)
{
	if (i < 0 || i >= (int)(sizeof model_types / sizeof model_types[0]) - 1)
		return NULL;
	if (arch)
		*arch = model_types[i].arch;
	return model_types[i].name;
}

int model_config_parse(struct model_config *cfg, const cJSON *top, const char *src)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->bos_id = -1;
	if (!cJSON_IsObject(top))
		return error_set(EINVAL, "%s: not a JSON object", src);
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(top, "model_type");
	const cJSON *j = top;
	if (!cJSON_IsString(mt))
		return error_set(EINVAL, "%s: missing model_type", src);
	int t = 0;
	while (model_types[t].name && strcmp(mt->valuestring, model_types[t].name) != 0)
		t++;
	if (!model_types[t].name) {
		char known[512];
		size_t used = 0;
		for (int k = 0; model_types[k].name && used < sizeof known; k++)
			used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", k ? ", " : "",
						 model_types[k].name);
		return error_set(EINVAL, "%s: unknown model_type \"%s\" (supported: %s)", src, mt->valuestring, known);
	}
	cfg->arch = model_types[t].arch;
	/* Qwen3_5MoeConfig and InklingConfig: the text model's fields are in
	 * text_config (InklingConfig builds a default InklingTextConfig when it
	 * is absent or null). */
	bool nested = !strcmp(mt->valuestring, "qwen3_5_moe") || !strcmp(mt->valuestring, "inkling_mm_model");
	static const cJSON empty = { .type = cJSON_Object };
	if (nested) {
		j = cJSON_GetObjectItemCaseSensitive(top, "text_config");
		if (cfg->arch == MODEL_ARCH_INKLING && (!j || cJSON_IsNull(j)))
			j = &empty;
		if (!cJSON_IsObject(j))
			return error_set(EINVAL, "%s: model_type %s needs a text_config object", src, mt->valuestring);
	}
	snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt->valuestring);

	int rc = 0;
	bool sized = cfg->arch == MODEL_ARCH_DEEPSEEK_V4 || cfg->arch == MODEL_ARCH_GPT_OSS ||
		     cfg->arch == MODEL_ARCH_INKLING;
	const struct family_sizes *z = &family_sizes[sized ? cfg->arch : 0];
	rc = rc ? rc : cfg_int(j, src, "num_hidden_layers", size_default(z->n_layers), 1, MODEL_LAYERS_MAX,
			       &cfg->n_layers);
	rc = rc ? rc : cfg_int(j, src, "hidden_size", size_default(z->hidden), 1, 1 << 20, &cfg->hidden);
	rc = rc ? rc : cfg_int(j, src, "num_attention_heads", size_default(z->n_heads), 1, 4096, &cfg->n_heads);
	if (!rc) /* validated below: the heads must be a multiple of it */
		rc = cfg_int(j, src, "num_key_value_heads", z->n_kv_heads ? z->n_kv_heads : cfg->n_heads, 1, cfg->n_heads,
			     &cfg->n_kv_heads);
	rc = rc ? rc : cfg_int(j, src, "vocab_size", size_default(z->vocab), 1, INT32_MAX, &cfg->vocab);
	const struct family_defaults *d = &family_defaults[cfg->arch];
	rc = rc ? rc : cfg_int(j, src, "max_position_embeddings", d->max_positions, 1, INT32_MAX, &cfg->max_positions);
	/* An eps of 0 divides by zero on an all-zero row; one near 1 or above
	 * is not a model anyone trained. */
	rc = rc ? rc : cfg_float(j, src, "rms_norm_eps", d->rms_eps, 0.0, 1.0, true, &cfg->rms_eps);
	rc = rc ? rc : cfg_bool(text_fields(top, j, "tie_word_embeddings"), src, "tie_word_embeddings", false,
				&cfg->tie_embeddings);
	if (rc)
		return rc;
	rc = cfg_int(text_fields(top, j, "bos_token_id"), src, "bos_token_id", d->bos_id < cfg->vocab ? d->bos_id : -1,
		     0, (int64_t)cfg->vocab - 1, &cfg->bos_id);
	if (!rc && d->eos_id >= 0 && d->eos_id < cfg->vocab) {
		cfg->eos_ids[0] = d->eos_id;
		cfg->n_eos = 1;
	}
	rc = rc ? rc : cfg_eos(cfg, text_fields(top, j, "eos_token_id"), src);
	if (rc)
		return rc;
	if (cfg->n_heads % cfg->n_kv_heads != 0)
		return error_set(EINVAL, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
				 src, cfg->n_heads, cfg->n_kv_heads);
	/* DeepSeek-V4 reads its two RoPEs in parse_deepseek_v4; Inkling has
	 * none (parse_inkling). */
	if (cfg->arch == MODEL_ARCH_INKLING) {
		rc = parse_inkling(cfg, j, src);
		if (!rc)
			set_rows(cfg);
		return rc;
	}
	if (cfg->arch != MODEL_ARCH_DEEPSEEK_V4 && (rc = cfg_rope(cfg, j, src)))
		return rc;
	/* transformers: head_dim defaults to hidden_size // num_attention_heads,
	 * which must then make a head of at least 2 dims. */
	int32_t hd_default = d->head_dim ? d->head_dim : cfg->hidden / cfg->n_heads;
	/* GptOssConfig: an explicit null head_dim means hidden / heads. */
	if (cfg->arch == MODEL_ARCH_GPT_OSS && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "head_dim")))
		hd_default = cfg->hidden / cfg->n_heads;
	rc = cfg_int(j, src, "head_dim", hd_default, 2, 65536, &cfg->head_dim);
	if (rc)
		return rc;
	if (cfg->head_dim % 2)
		return error_set(EINVAL, "%s: head_dim %d must be even for RoPE", src, cfg->head_dim);

	cfg->rot_dim = cfg->head_dim;
	cfg->routed_scaling = 1.0f;
	switch (cfg->arch) {
	case MODEL_ARCH_QWEN3_5_MOE:
	case MODEL_ARCH_QWEN3_NEXT:
		rc = parse_qwen35(cfg, j, src);
		break;
	case MODEL_ARCH_DEEPSEEK_V4:
		rc = parse_deepseek_v4(cfg, j, src);
		break;
	case MODEL_ARCH_DEEPSEEK_V3:
		rc = parse_grouped_moe(cfg, j, src);
		rc = rc ? rc : parse_deepseek_v3(cfg, j, src);
		break;
	case MODEL_ARCH_DEEPSEEK_V32:
	case MODEL_ARCH_GLM_MOE_DSA:
		rc = parse_grouped_moe(cfg, j, src);
		rc = rc ? rc : parse_deepseek_v3(cfg, j, src);
		rc = rc ? rc : parse_dsa(cfg, j, src);
		break;
	case MODEL_ARCH_GLM4_MOE:
		rc = parse_grouped_moe(cfg, j, src);
		rc = rc ? rc : parse_glm4_moe(cfg, j, src);
		break;
	case MODEL_ARCH_MINIMAX_M2:
		rc = parse_minimax_m2(cfg, j, src);
		break;
	case MODEL_ARCH_GPT_OSS:
		rc = parse_gpt_oss(cfg, j, src);
		break;
	case MODEL_ARCH_INKLING: /* parsed above */
		break;
	case MODEL_ARCH_OLMOE:
		cfg->qk_norm = QK_NORM_FULL;
		cfg->expert_naming = EXPERT_NAMING_MLP;
		rc = rc ? rc : cfg_int(j, src, "intermediate_size", CFG_REQUIRED, 1, 1 << 24, &cfg->moe_intermediate);
		rc = rc ? rc : cfg_int(j, src, "num_experts", CFG_REQUIRED, 1, 65536, &cfg->n_experts);
		rc = rc ? rc : cfg_int(j, src, "num_experts_per_tok", CFG_REQUIRED, 1, cfg->n_experts, &cfg->top_k);
		rc = rc ? rc : cfg_bool(j, src, "norm_topk_prob", false, &cfg->norm_topk_prob);
		rc = rc ? rc : cfg_float(j, src, "clip_qkv", 0.0, 0.0, 1e30, true, &cfg->clip_qkv);
		for (int l = 0; l < cfg->n_layers; l++)
			set_moe(cfg, l, true);
		break;
	case MODEL_ARCH_QWEN3_MOE: {
		cfg->qk_norm = QK_NORM_HEAD;
		cfg->expert_naming = EXPERT_NAMING_MLP;
		int32_t step = 1;
		rc = rc ? rc : cfg_int(j, src, "intermediate_size", 0, 0, 1 << 24, &cfg->intermediate);
		rc = rc ? rc : cfg_int(j, src, "moe_intermediate_size", CFG_REQUIRED, 1, 1 << 24, &cfg->moe_intermediate);
		rc = rc ? rc : cfg_int(j, src, "num_experts", CFG_REQUIRED, 0, 65536, &cfg->n_experts);
		rc = rc ? rc : cfg_int(j, src, "num_experts_per_tok", CFG_REQUIRED, 1, 65536, &cfg->top_k);
		rc = rc ? rc : cfg_bool(j, src, "norm_topk_prob", false, &cfg->norm_topk_prob);
		rc = rc ? rc : cfg_int(j, src, "decoder_sparse_step", 1, 1, 1 << 20, &step);
		if (rc)
			return rc;
		if (cfg->top_k > cfg->n_experts && cfg->n_experts > 0)
			return error_set(EINVAL, "%s: num_experts_per_tok %d exceeds num_experts %d", src,
					 cfg->top_k, cfg->n_experts);
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window")))
			return error_set(ENOTSUP, "%s: use_sliding_window is not supported for qwen3_moe", src);
		bool dense_only[MODEL_LAYERS_MAX] = { false };
		if ((rc = parse_mlp_only_layers(cfg, j, src, dense_only)))
			return rc;
		for (int l = 0; l < cfg->n_layers; l++) {
			set_moe(cfg, l, !dense_only[l] && cfg->n_experts > 0 && (l + 1) % step == 0);
			if (!model_config_layer_moe(cfg, l) && cfg->intermediate <= 0)
				return error_set(EINVAL, "%s: layer %d is dense but intermediate_size is missing",
						 src, l);
		}
		break;
	}
	case MODEL_ARCH_MIXTRAL:
		cfg->qk_norm = QK_NORM_NONE;
		cfg->expert_naming = EXPERT_NAMING_MIXTRAL;
		cfg->norm_topk_prob = true;
		rc = rc ? rc : cfg_int(j, src, "intermediate_size", CFG_REQUIRED, 1, 1 << 24, &cfg->moe_intermediate);
		rc = rc ? rc : cfg_int(j, src, "num_local_experts", CFG_REQUIRED, 1, 65536, &cfg->n_experts);
		rc = rc ? rc : cfg_int(j, src, "sliding_window", 0, 0, INT32_MAX, &cfg->sliding_window);
		rc = rc ? rc : cfg_int(j, src, "num_experts_per_tok", CFG_REQUIRED, 1, cfg->n_experts, &cfg->top_k);
		for (int l = 0; l < cfg->n_layers; l++)
			set_moe(cfg, l, true);
		break;
	}
	if (rc)
		return rc;
	if (!cfg->shared_intermediate)
		cfg->shared_intermediate = cfg->moe_intermediate * cfg->n_shared_experts;
	set_rows(cfg);
	/* MLA sets its own head_dim; the others take this default. */
	if (!model_config_mla(cfg) && cfg->head_dim < 2)
		return error_set(EINVAL, "%s: hidden_size %d over num_attention_heads %d leaves heads of %d dims; "
				 "set head_dim", src, cfg->hidden, cfg->n_heads, cfg->head_dim);
	/* Softmax scale: 1/sqrt(q.k dims), times YaRN's mscale^2 (DeepSeek-V3;
	 * DeepSeek-V4 scales by head_dim alone and set rope_attn_factor itself). */
	cfg->attn_scale = 1.0f / sqrtf((float)cfg->head_dim);
	if (cfg->arch == MODEL_ARCH_DEEPSEEK_V4)
		return 0;
	if (cfg->yarn && cfg->yarn_mscale_all_dim > 0 && cfg->yarn_factor > 1) {
		float m = 0.1f * cfg->yarn_mscale_all_dim * fm_logf(cfg->yarn_factor) + 1.0f;
		cfg->attn_scale *= m * m;
	}
	if (cfg->yarn && cfg->yarn_factor > 1) {
		/* HF: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
		 * when both are set, else get_mscale(factor). */
		float a = 0.1f * fm_logf(cfg->yarn_factor);
		if (cfg->yarn_mscale > 0 && cfg->yarn_mscale_all_dim > 0)
			cfg->rope_attn_factor = (a * cfg->yarn_mscale + 1.0f) / (a * cfg->yarn_mscale_all_dim + 1.0f);
		else
			cfg->rope_attn_factor = a + 1.0f;
	}
	return 0;
}

int model_config_load(struct model_config *cfg, const char *dir)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/config.json", dir);
	cJSON *j = NULL;
	int rc = json_load(path, &j);
	if (rc)
		return rc;
	rc = model_config_parse(cfg, j, path);
	cJSON_Delete(j);
	if (rc)
		return rc;
	snprintf(path, sizeof path, "%s/generation_config.json", dir);
	if (access(path, F_OK) == 0) {
		rc = json_load(path, &j);
		if (rc)
			return rc;
		rc = cfg_eos(cfg, j, path);
		cJSON_Delete(j);
	}
	return rc;
}

int model_config_moe_layers(const struct model_config *cfg)
{
	int n = 0;
	for (int l = 0; l < cfg->n_layers; l++)
		n += model_config_layer_moe(cfg, l);
	return n;
}

bool model_config_layer_moe(const struct model_config *cfg, int l)
{
	return cfg->rows[l].ffn != FFN_DENSE;
}

bool model_config_has_mixer(const struct model_config *cfg, enum mixer_kind k)
{
	for (int l = 0; l < cfg->n_layers + cfg->n_mtp_layers; l++)
		if (cfg->rows[l].mixer == k)
			return true;
	return false;
}

bool model_config_mla(const struct model_config *cfg)
{
	return model_config_has_mixer(cfg, MIXER_MLA) || model_config_has_mixer(cfg, MIXER_MLA_DSA);
}
