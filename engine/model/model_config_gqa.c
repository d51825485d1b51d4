/*
 * model_config_gqa — the families whose rows are GQA attention over an MoE
 * on every layer, read from their released layouts: MiniMax-M2 and gpt-oss
 * (written from transformers v5.15.0's MiniMaxM2Config / GptOssConfig and
 * modeling files). The common fields are model_config.c's.
 */
#include <errno.h>
#include <string.h>

#include "base/error.h"
#include "engine/model/model_config_internal.h"

/* MiniMax-M2 as transformers v5.15.0 defines it (MiniMaxM2Config,
 * modeling_minimax_m2.py): GQA with head_dim from the config and q_norm /
 * k_norm over the whole projected q / k (the model has them whatever
 * use_qk_norm / qk_norm_type say), rotate-half RoPE over part of each head,
 * an MoE on every layer in Mixtral's names: sigmoid scores, the top-k of
 * scores + e_score_correction_bias choose, the chosen scores renormalised
 * weight them (scoring_func is not read: sigmoid always), no scaling
 * factor, no shared expert. The rotary dims: transformers reads
 * partial_rotary_factor (rope_parameters, else the top level; default 1)
 * and ignores rotary_dim, the key MiniMax's released config.json gives
 * (64 of head_dim 128, without partial_rotary_factor); there rotary_dim
 * is what the model was trained with, so it is used when the factor is
 * absent, and a config giving both must agree. The release's MTP modules
 * (use_mtp) are not part of transformers' model: converted without them. */
int parse_minimax_m2(struct model_config *cfg, const cJSON *j, const char *src)
{
	int rc = 0;
	cfg->qk_norm = QK_NORM_FULL;
	cfg->expert_naming = EXPERT_NAMING_MIXTRAL;
	cfg->router = ROUTER_SIGMOID_GROUPED;
	cfg->router_bias = true;
	cfg->norm_topk_prob = true;
	cfg->n_group = 1;
	cfg->topk_group = 1;
	cfg->routed_scaling = 1.0f;
	rc = rc ? rc : cfg_int(j, src, "intermediate_size", CFG_REQUIRED, 1, 1 << 24, &cfg->moe_intermediate);
	rc = rc ? rc : cfg_int(j, src, "num_local_experts", CFG_REQUIRED, 1, 65536, &cfg->n_experts);
	rc = rc ? rc : cfg_int(j, src, "num_experts_per_tok", CFG_REQUIRED, 1, cfg->n_experts, &cfg->top_k);
	if (rc)
		return rc;
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
	const cJSON *in = cJSON_IsObject(params) && cJSON_GetObjectItemCaseSensitive(params, "partial_rotary_factor")
				  ? params
				  : j;
	bool have_factor = cJSON_GetObjectItemCaseSensitive(in, "partial_rotary_factor") != NULL;
	float partial;
	int32_t rotary_dim;
	rc = rc ? rc : cfg_float(in, src, "partial_rotary_factor", 1.0, 0.0, 1.0, true, &partial);
	rc = rc ? rc : cfg_int(j, src, "rotary_dim", 0, 0, cfg->head_dim, &rotary_dim);
	if (rc)
		return rc;
	int32_t from_factor = (int32_t)(cfg->head_dim * partial);
	if (have_factor && rotary_dim && rotary_dim != from_factor)
		return error_set(EINVAL, "%s: rotary_dim %d disagrees with partial_rotary_factor %g (%d of head_dim %d)",
				 src, rotary_dim, (double)partial, from_factor, cfg->head_dim);
	cfg->rot_dim = have_factor || !rotary_dim ? from_factor : rotary_dim;
	if (cfg->rot_dim < 2 || cfg->rot_dim % 2)
		return error_set(EINVAL, "%s: %d rotary dims of head_dim %d: must be even and at least 2", src,
				 cfg->rot_dim, cfg->head_dim);
	cfg->rope_interleave = 0;
	for (int l = 0; l < cfg->n_layers; l++)
		set_moe(cfg, l, true);
	return 0;
}

/* gpt-oss as transformers v5.15.0 defines it (GptOssConfig,
 * modeling_gpt_oss.py): GQA with head_dim from the config (64 by default),
 * biases on q/k/v/o (attention_bias), a sink logit per head, layer_types
 * choosing per layer a sliding window (sliding_window keys) or full
 * attention (by default sliding on even layers), rotate-half YaRN RoPE over
 * the whole head; an MoE on every layer: router logits with a bias, their
 * top-k choose and a softmax over those k weights them; experts with
 * biases and the clamped GLU (gate <= 7, |up| <= 7, (up + 1) * gate *
 * sigmoid(1.702 gate)), which transformers hard-codes: a swiglu_limit
 * other than 7 is refused rather than silently ignored. */
int parse_gpt_oss(struct model_config *cfg, const cJSON *j, const char *src)
{
	int rc = 0;
	cfg->qk_norm = QK_NORM_NONE;
	cfg->expert_naming = EXPERT_NAMING_GPT_OSS;
	cfg->router = ROUTER_TOPK_SOFTMAX;
	cfg->attn_sinks = true;
	cfg->expert_bias = true;
	cfg->swiglu_limit = 7.0f;
	cfg->glu_alpha = 1.702f;
	cfg->rope_interleave = 0;
	float limit;
	int32_t per_token;
	rc = rc ? rc : cfg_int(j, src, "intermediate_size", 2880, 1, 1 << 24, &cfg->moe_intermediate);
	rc = rc ? rc : cfg_int(j, src, "num_local_experts", 128, 1, 65536, &cfg->n_experts);
	rc = rc ? rc : cfg_top_k(j, src, 4, cfg);
	rc = rc ? rc : cfg_int(j, src, "experts_per_token", cfg->top_k, 1, cfg->n_experts, &per_token);
	rc = rc ? rc : cfg_bool(j, src, "attention_bias", true, &cfg->attn_bias);
	rc = rc ? rc : cfg_float(j, src, "swiglu_limit", 7.0, 0.0, 1e6, false, &limit);
	if (rc)
		return rc;
	cfg->attn_o_bias = cfg->attn_bias;
	if (per_token != cfg->top_k)
		return error_set(EINVAL, "%s: experts_per_token %d disagrees with num_experts_per_tok %d (transformers "
				 "reads the latter)", src, per_token, cfg->top_k);
	if (limit != 7.0f)
		return error_set(ENOTSUP, "%s: swiglu_limit %g: transformers v5.15.0 hard-codes 7 for gpt_oss", src,
				 (double)limit);
	const cJSON *prf = cJSON_GetObjectItemCaseSensitive(j, "partial_rotary_factor");
	if (cJSON_IsNumber(prf) && prf->valuedouble != 1.0)
		return error_set(ENOTSUP, "%s: partial_rotary_factor %g is not supported for gpt_oss", src, prf->valuedouble);
	const cJSON *sw = cJSON_GetObjectItemCaseSensitive(j, "sliding_window");
	if (!sw || !cJSON_IsNull(sw))
		rc = cfg_int(j, src, "sliding_window", 128, 1, INT32_MAX, &cfg->sliding_window);
	if (rc)
		return rc;
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
	if (a && !cJSON_IsNull(a) && (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != cfg->n_layers))
		return error_set(EINVAL, "%s: layer_types must list num_hidden_layers (%d) entries", src, cfg->n_layers);
	const cJSON *e = cJSON_IsArray(a) ? a->child : NULL;
	for (int l = 0; l < cfg->n_layers; l++, e = e ? e->next : NULL) {
		bool sliding = (l + 1) % 2 != 0;
		if (e) {
			const char *t = cJSON_IsString(e) ? e->valuestring : "";
			if (strcmp(t, "sliding_attention") && strcmp(t, "full_attention"))
				return error_set(EINVAL, "%s: layer_types[%d] must be \"sliding_attention\" or "
						 "\"full_attention\"", src, l);
			sliding = !strcmp(t, "sliding_attention");
		}
		if (sliding && cfg->sliding_window <= 0)
			return error_set(EINVAL, "%s: layer %d is sliding_attention but sliding_window is null", src, l);
		cfg->full_attention[l] = !sliding;
		set_moe(cfg, l, true);
	}
	return 0;
}
