/*
 * model_config_internal — what the family parsers of engine/model/ share:
 * the checked readers of config.json fields (base/json_get.h) and a row's
 * MoE flag. model_config.c holds the common fields and most families;
 * model_config_gqa.c the GQA families read from their released layouts
 * (MiniMax-M2, gpt-oss).
 */
#ifndef COLIBRI_ENGINE_MODEL_CONFIG_INTERNAL_H
#define COLIBRI_ENGINE_MODEL_CONFIG_INTERNAL_H

#include <errno.h>

#include <cjson/cJSON.h>

#include "base/error.h"
#include "base/json_get.h"
#include "engine/model/model_config.h"

#define CFG_REQUIRED JSON_REQUIRED

/* An integer field through the checked reader (base/json_get.h);
 * def == CFG_REQUIRED means it must be present. */
static inline int cfg_int(const cJSON *j, const char *src, const char *key, int64_t def, int64_t lo, int64_t hi,
		   int32_t *out)
{
	return json_get_int32(j, key, def, lo, hi, src, out);
}

/* A number field in [lo, hi], lo excluded when lo_open. */
static inline int cfg_float(const cJSON *j, const char *src, const char *key, double def, double lo, double hi,
		     bool lo_open, float *out)
{
	return json_get_float(j, key, def, lo, hi, lo_open, src, out);
}

static inline int cfg_bool(const cJSON *j, const char *src, const char *key, bool def, bool *out)
{
	return json_get_bool(j, key, def, src, out);
}

/* num_experts_per_tok in [1, n_experts], its default (def) included: the
 * reader checks only values that are given. */
static inline int cfg_top_k(const cJSON *j, const char *src, int64_t def, struct model_config *cfg)
{
	int rc = cfg_int(j, src, "num_experts_per_tok", def, 1, cfg->n_experts, &cfg->top_k);
	if (!rc && cfg->top_k > cfg->n_experts)
		rc = error_set(EINVAL, "%s: num_experts_per_tok %d (the default) exceeds the %d routed experts; set it",
			       src, cfg->top_k, cfg->n_experts);
	return rc;
}

/* Row l has routed experts (FFN_MOE; set_rows adds the shared experts). */
static inline void set_moe(struct model_config *cfg, int l, bool moe)
{
	cfg->rows[l].ffn = moe ? FFN_MOE : FFN_DENSE;
}

/* MiniMax-M2 and gpt-oss (model_config_gqa.c): the family's fields after
 * the common ones. */
int parse_minimax_m2(struct model_config *cfg, const cJSON *j, const char *src);
int parse_gpt_oss(struct model_config *cfg, const cJSON *j, const char *src);

/* Inkling (model_config_inkling.c): inkling_text, or the text_config of
 * an inkling_mm_model. */
int parse_inkling(struct model_config *cfg, const cJSON *j, const char *src);

#endif
