/*
 * model_config_inkling — Inkling's fields (transformers v5.15.0's
 * InklingTextConfig, configuration_inkling.py): the text model of an
 * inkling_mm_model (its text_config) or a flat inkling_text config.json.
 * The common fields (layers, width, heads, vocab, positions, eps, token
 * ids) are model_config.c's; this reads the rest, its aliases, and derives
 * the rows.
 *
 * Decisions where transformers is silent or lax:
 *  - attribute_map aliases (sliding_window, num_local_experts,
 *    sconv_kernel_size, embedding_multiplier, model_max_length) are read
 *    when the canonical key is absent; both present and different is
 *    refused rather than one silently chosen.
 *  - No RoPE: InklingTextConfig has no rope field and the model reads
 *    none, so rope_theta / rope_parameters / rope_scaling are ignored as
 *    transformers ignores them (rot_dim 0).
 *  - hidden_act must be "silu": the experts, the shared experts and the
 *    dense MLP all use it, and colibri's SwiGLU is silu's.
 *  - The MTP layers (num_mtp_layers, mtp_config) are not run: n_mtp_layers
 *    is 0 whatever they say, and their tensors are not converted.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "engine/model/model_config_internal.h"

/* The key config.json uses for a field: the canonical one, else its
 * attribute_map alias. Both given must agree (compared as numbers). */
static int ink_key(const cJSON *j, const char *src, const char *key, const char *alias, const char **out)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, alias);
	*out = a || !b ? key : alias;
	if (a && b && !cJSON_IsNull(a) && !cJSON_IsNull(b) &&
	    (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble != b->valuedouble))
		return error_set(EINVAL, "%s: %s and its alias %s disagree", src, key, alias);
	return 0;
}

static int ink_int(const cJSON *j, const char *src, const char *key, const char *alias, int64_t def, int64_t lo,
		   int64_t hi, int32_t *out)
{
	const char *k = key;
	int rc = alias ? ink_key(j, src, key, alias, &k) : 0;
	return rc ? rc : cfg_int(j, src, k, def, lo, hi, out);
}

/* layer_types: "hybrid" (global) or "hybrid_sliding"; absent, the layers
 * in local_layer_ids slide, absent too, every layer but each sixth. */
static int ink_layer_types(struct model_config *cfg, const cJSON *j, const char *src)
{
	int N = cfg->n_layers;
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
	const cJSON *local = cJSON_GetObjectItemCaseSensitive(j, "local_layer_ids");
	if (types && !cJSON_IsNull(types)) {
		if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != N)
			return error_set(EINVAL, "%s: layer_types must list num_hidden_layers (%d) entries", src, N);
		int l = 0;
		for (const cJSON *e = types->child; e; e = e->next, l++) {
			bool global = cJSON_IsString(e) && !strcmp(e->valuestring, "hybrid");
			bool sliding = cJSON_IsString(e) && !strcmp(e->valuestring, "hybrid_sliding");
			if (!global && !sliding)
				return error_set(EINVAL, "%s: layer_types[%d] must be \"hybrid\" or \"hybrid_sliding\"",
						 src, l);
			cfg->full_attention[l] = global;
		}
		return 0;
	}
	if (local && !cJSON_IsNull(local)) {
		if (!cJSON_IsArray(local))
			return error_set(EINVAL, "%s: local_layer_ids must be a list of layer indices", src);
		for (int l = 0; l < N; l++)
			cfg->full_attention[l] = true;
		int i = 0;
		for (const cJSON *e = local->child; e; e = e->next, i++) {
			char field[40];
			int64_t id;
			snprintf(field, sizeof field, "local_layer_ids[%d]", i);
			int rc = json_item_int(e, src, field, 0, N - 1, &id);
			if (rc)
				return rc;
			cfg->full_attention[id] = false;
		}
		return 0;
	}
	for (int l = 0; l < N; l++)
		cfg->full_attention[l] = (l + 1) % 6 == 0;
	return 0;
}

/* mlp_layer_types: "dense" or "sparse"; absent, the first dense_mlp_idx
 * layers are dense. */
static int ink_mlp_types(struct model_config *cfg, const cJSON *j, const char *src)
{
	int N = cfg->n_layers;
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "mlp_layer_types");
	if (a && !cJSON_IsNull(a)) {
		if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != N)
			return error_set(EINVAL, "%s: mlp_layer_types must list num_hidden_layers (%d) entries", src, N);
		int l = 0;
		for (const cJSON *e = a->child; e; e = e->next, l++) {
			bool dense = cJSON_IsString(e) && !strcmp(e->valuestring, "dense");
			bool sparse = cJSON_IsString(e) && !strcmp(e->valuestring, "sparse");
			if (!dense && !sparse)
				return error_set(EINVAL, "%s: mlp_layer_types[%d] must be \"dense\" or \"sparse\"", src, l);
			set_moe(cfg, l, sparse);
		}
		return 0;
	}
	int32_t first_dense = 0;
	int rc = cfg_int(j, src, "dense_mlp_idx", 0, 0, N, &first_dense);
	if (rc)
		return rc;
	for (int l = 0; l < N; l++)
		set_moe(cfg, l, l >= first_dense);
	return 0;
}

int parse_inkling(struct model_config *cfg, const cJSON *j, const char *src)
{
	int rc = 0;
	int32_t unpadded = 0;
	const char *k;
	cfg->qk_norm = QK_NORM_HEAD;
	cfg->expert_naming = EXPERT_NAMING_MLP;
	cfg->router = ROUTER_SIGMOID_SHARED;
	cfg->router_bias = true;
	cfg->norm_topk_prob = false;
	cfg->embed_norm = true;
	cfg->global_scale = true;
	cfg->rot_dim = 0;
	cfg->n_mtp_layers = 0;
	cfg->tie_embeddings = false; /* InklingForCausalLM ties nothing (_tied_weights_keys = {}) */

	const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
	if (act && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
		return error_set(EINVAL, "%s: hidden_act must be \"silu\" (the only activation colibri's Inkling runs)",
				 src);
	/* model_config.c read max_position_embeddings; model_max_length is
	 * its alias. */
	rc = rc ? rc : ink_int(j, src, "max_position_embeddings", "model_max_length", 131072, 1, INT32_MAX,
			       &cfg->max_positions);
	rc = rc ? rc : cfg_int(j, src, "head_dim", 128, 1, 65536, &cfg->head_dim);
	rc = rc ? rc : cfg_int(j, src, "swa_num_attention_heads", 64, 1, 4096, &cfg->swa_n_heads);
	rc = rc ? rc : cfg_int(j, src, "swa_num_key_value_heads", 16, 1, cfg->swa_n_heads, &cfg->swa_n_kv_heads);
	rc = rc ? rc : cfg_int(j, src, "swa_head_dim", 128, 1, 65536, &cfg->swa_head_dim);
	rc = rc ? rc : ink_int(j, src, "sliding_window_size", "sliding_window", 512, 1, INT32_MAX, &cfg->sliding_window);
	rc = rc ? rc : cfg_int(j, src, "d_rel", 16, 1, 65536, &cfg->d_rel);
	rc = rc ? rc : cfg_int(j, src, "rel_extent", 1024, 1, INT32_MAX, &cfg->rel_extent);
	rc = rc ? rc : ink_int(j, src, "conv_kernel_size", "sconv_kernel_size", 4, 1, 1024, &cfg->sconv_kernel);
	if (rc)
		return rc;
	const cJSON *fl = cJSON_GetObjectItemCaseSensitive(j, "log_scaling_n_floor");
	if (fl && !cJSON_IsNull(fl))
		rc = cfg_int(j, src, "log_scaling_n_floor", 0, 1, INT32_MAX, &cfg->log_n_floor);
	rc = rc ? rc : cfg_float(j, src, "log_scaling_alpha", 0.1, -1e6, 1e6, false, &cfg->log_alpha);
	const cJSON *uv = cJSON_GetObjectItemCaseSensitive(j, "unpadded_vocab_size");
	if (!rc && uv && !cJSON_IsNull(uv))
		rc = cfg_int(j, src, "unpadded_vocab_size", 0, 1, cfg->vocab, &unpadded);
	/* dense_intermediate_size, when given, replaces intermediate_size. */
	const cJSON *di = cJSON_GetObjectItemCaseSensitive(j, "dense_intermediate_size");
	bool have_di = di && !cJSON_IsNull(di);
	rc = rc ? rc : cfg_int(j, src, have_di ? "dense_intermediate_size" : "intermediate_size", 24576, 1, 1 << 24,
			       &cfg->intermediate);
	rc = rc ? rc : cfg_int(j, src, "moe_intermediate_size", 3072, 1, 1 << 24, &cfg->moe_intermediate);
	rc = rc ? rc : ink_int(j, src, "n_routed_experts", "num_local_experts", 256, 1, 65536, &cfg->n_experts);
	rc = rc ? rc : cfg_top_k(j, src, 6, cfg);
	/* The router slices its logits at -n_shared_experts: it needs one. */
	rc = rc ? rc : cfg_int(j, src, "n_shared_experts", 2, 1, 4096, &cfg->n_shared_experts);
	rc = rc ? rc : cfg_float(j, src, "route_scale", 8.0, 0.0, 1e6, true, &cfg->routed_scaling);
	rc = rc ? rc : ink_key(j, src, "logits_mup_width_multiplier", "embedding_multiplier", &k);
	rc = rc ? rc : cfg_float(j, src, k, 24.0, 0.0, 1e12, true, &cfg->logit_divisor);
	rc = rc ? rc : ink_layer_types(cfg, j, src);
	rc = rc ? rc : ink_mlp_types(cfg, j, src);
	if (rc)
		return rc;
	if (cfg->swa_n_heads % cfg->swa_n_kv_heads)
		return error_set(EINVAL, "%s: swa_num_attention_heads %d is not a multiple of swa_num_key_value_heads %d",
				 src, cfg->swa_n_heads, cfg->swa_n_kv_heads);
	if (unpadded && unpadded < cfg->vocab) {
		cfg->vocab_stored = cfg->vocab;
		cfg->vocab = unpadded;
		/* The token ids were checked against the padded vocabulary. */
		if (cfg->bos_id >= cfg->vocab)
			return error_set(EINVAL, "%s: bos_token_id %d is past unpadded_vocab_size %d", src, cfg->bos_id,
					 cfg->vocab);
		for (int i = 0; i < cfg->n_eos; i++)
			if (cfg->eos_ids[i] >= cfg->vocab)
				return error_set(EINVAL, "%s: eos_token_id %d is past unpadded_vocab_size %d", src,
						 cfg->eos_ids[i], cfg->vocab);
	}
	cfg->shared_intermediate = cfg->n_shared_experts * cfg->moe_intermediate;
	/* q and k are RMS-normed per head; the score is q.k / head_dim (the
	 * forward pass takes each layer's own head_dim). */
	cfg->attn_scale = 1.0f / (float)cfg->head_dim;
	for (int l = 0; l < cfg->n_layers; l++) {
		cfg->rows[l].norm = NORM_RMS;
		cfg->rows[l].mixer = MIXER_REL;
		cfg->rows[l].residual = RESIDUAL_SCONV;
		if (cfg->rows[l].ffn == FFN_MOE)
			cfg->rows[l].ffn = FFN_MOE_SHARED;
	}
	return 0;
}
