/*
 * fuzz_config — config.json (model_config_parse, model_config_load in
 * engine/model/model_config.c) and generation_config.json (its EOS ids, read by
 * model_config_load, and the sampling defaults of generate_options_default
 * in engine/decode/generate.c).
 *
 * Input: config.json FUZZ_SEP generation_config.json; when the second part
 * is empty or missing there is no generation_config.json at all. The config text is parsed with
 * cJSON and given to model_config_parse; both files are then written into
 * a scratch folder for model_config_load and generate_options_default.
 *
 * Beyond "no crash", an accepted config must hold what the forward pass
 * trusts without checking again: 1 <= layers (+ MTP layers) <= 256; heads
 * divisible by KV heads; an even head_dim >= 2 (GQA) or nope + rope dims
 * (MLA); rotated dims within the head; each MoE layer with experts, a top-k
 * in [1, n_experts] and an expert width, each dense layer with an FFN
 * width; grouped routing with n_group dividing the experts; at most
 * MODEL_EOS_MAX EOS ids; no layer flag past the last layer; every float
 * field finite, rope_theta (with RoPE) and attn_scale positive, rms_eps
 * >= 0; Inkling's relative attention with heads dividing into KV heads on
 * both layer kinds, a relative extent, d_rel and kernel >= 1, a window on
 * sliding layers, a positive logit divisor, shared experts behind its
 * router, and stored vocabulary rows covering the vocabulary.
 * model_config_load must agree with model_config_parse on the same text,
 * and the sampling options must be usable: temperature finite and >= 0,
 * top_p in (0, 1], top_k >= 0. A rejected config leaves a message. Every
 * float field of an accepted config is finite, rope_theta, attn_scale and
 * rms_eps positive (the corpus keeps the inputs that once broke these:
 * regress_*).
 */
#include <math.h>
#include <stdbool.h>

#include <cjson/cJSON.h>

#include "engine/decode/generate.h"
#include "engine/model/model_config.h"
#include "base/error.h"
#include "tests/fuzz/fuzz_util.h"

static bool finite_pos(float x)
{
	return isfinite(x) && x > 0;
}

static void check_floats(const struct model_config *c)
{
	const struct {
		const char *name;
		float v;
	} f[] = {
		{ "rms_eps", c->rms_eps }, { "rope_theta", c->rope_theta }, { "clip_qkv", c->clip_qkv },
		{ "yarn_factor", c->yarn_factor }, { "yarn_beta_fast", c->yarn_beta_fast },
		{ "yarn_beta_slow", c->yarn_beta_slow }, { "yarn_mscale", c->yarn_mscale },
		{ "yarn_mscale_all_dim", c->yarn_mscale_all_dim }, { "rope_attn_factor", c->rope_attn_factor },
		{ "attn_scale", c->attn_scale }, { "routed_scaling", c->routed_scaling },
		{ "log_alpha", c->log_alpha }, { "logit_divisor", c->logit_divisor },
	};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		FUZZ_ASSERT(isfinite(f[i].v), "%s is not finite", f[i].name);
	FUZZ_ASSERT((c->rot_dim == 0 || finite_pos(c->rope_theta)) && finite_pos(c->attn_scale) && c->rms_eps > 0,
		    "rope_theta %g, attn_scale %g, rms_eps %g", c->rope_theta, c->attn_scale, c->rms_eps);
}

static void check(const struct model_config *c)
{
	FUZZ_ASSERT(c->model_type[0] && memchr(c->model_type, 0, sizeof c->model_type), "model_type");
	FUZZ_ASSERT(c->n_layers >= 1 && c->n_mtp_layers >= 0 && c->n_layers + c->n_mtp_layers <= MODEL_LAYERS_MAX,
		    "%d layers + %d MTP layers", c->n_layers, c->n_mtp_layers);
	FUZZ_ASSERT(c->hidden >= 1 && c->vocab >= 1 && c->max_positions >= 1, "hidden %d vocab %d positions %d",
		    c->hidden, c->vocab, c->max_positions);
	FUZZ_ASSERT(c->n_heads >= 1 && c->n_kv_heads >= 1 && c->n_kv_heads <= c->n_heads &&
		    c->n_heads % c->n_kv_heads == 0, "%d heads, %d KV heads", c->n_heads, c->n_kv_heads);
	if (model_config_mla(c)) {
		FUZZ_ASSERT(c->kv_lora_rank >= 1 && c->qk_nope_dim >= 1 && c->qk_rope_dim >= 2 && c->v_head_dim >= 1 &&
			    c->head_dim == c->qk_nope_dim + c->qk_rope_dim && c->rot_dim == c->qk_rope_dim,
			    "MLA dims: nope %d rope %d v %d head %d rot %d", c->qk_nope_dim, c->qk_rope_dim,
			    c->v_head_dim, c->head_dim, c->rot_dim);
	} else if (model_config_has_mixer(c, MIXER_REL)) {
		FUZZ_ASSERT(c->rot_dim == 0 && c->head_dim >= 1 && c->swa_head_dim >= 1 && c->swa_n_kv_heads >= 1 &&
			    c->swa_n_heads % c->swa_n_kv_heads == 0 && c->d_rel >= 1 && c->rel_extent >= 1 &&
			    c->sconv_kernel >= 1 && finite_pos(c->logit_divisor) && c->n_shared_experts >= 1 &&
			    c->router == ROUTER_SIGMOID_SHARED && (c->vocab_stored == 0 || c->vocab_stored >= c->vocab),
			    "Inkling fields: head_dim %d/%d, swa heads %d/%d, d_rel %d, extent %d, kernel %d, divisor %g, "
			    "shared %d, stored vocab %d of %d", c->head_dim, c->swa_head_dim, c->swa_n_heads, c->swa_n_kv_heads,
			    c->d_rel, c->rel_extent, c->sconv_kernel, c->logit_divisor, c->n_shared_experts,
			    c->vocab_stored, c->vocab);
		for (int l = 0; l < c->n_layers; l++)
			FUZZ_ASSERT(c->rows[l].mixer == MIXER_REL && c->rows[l].residual == RESIDUAL_SCONV &&
				    (c->full_attention[l] || c->sliding_window >= 1), "Inkling layer %d: its row, a window", l);
	} else {
		FUZZ_ASSERT(c->head_dim >= 2 && c->head_dim % 2 == 0, "head_dim %d", c->head_dim);
	}
	FUZZ_ASSERT(c->rot_dim >= 0 && c->rot_dim <= c->head_dim, "rot_dim %d of head_dim %d", c->rot_dim, c->head_dim);
	if (model_config_has_mixer(c, MIXER_MLA_DSA))
		FUZZ_ASSERT(c->index_n_heads >= 1 && c->index_head_dim >= c->qk_rope_dim && c->index_topk >= 1 &&
			    !c->index_shared[0], "DSA indexer fields");
	int total = c->n_layers + c->n_mtp_layers;
	for (int l = 0; l < MODEL_LAYERS_MAX; l++) {
		if (l >= total) {
			FUZZ_ASSERT(!model_config_layer_moe(c, l), "layer %d past the last is marked MoE", l);
			continue;
		}
		FUZZ_ASSERT(c->rows[l].ffn != FFN_MOE_SHARED || c->n_shared_experts > 0, "layer %d: shared experts of width 0", l);
		if (model_config_layer_moe(c, l))
			FUZZ_ASSERT(c->n_experts >= 1 && c->top_k >= 1 && c->top_k <= c->n_experts &&
				    c->moe_intermediate >= 1, "MoE layer %d: %d experts, top-%d, width %d", l,
				    c->n_experts, c->top_k, c->moe_intermediate);
		else
			FUZZ_ASSERT(c->intermediate >= 1, "dense layer %d without an FFN width", l);
	}
	if (c->router == ROUTER_SIGMOID_GROUPED)
		FUZZ_ASSERT(c->n_group >= 1 && c->n_group <= MODEL_GROUPS_MAX && c->n_experts % c->n_group == 0 &&
			    c->topk_group >= 1 && c->topk_group <= c->n_group, "%d experts in %d groups, top %d groups",
			    c->n_experts, c->n_group, c->topk_group);
	FUZZ_ASSERT(c->n_eos >= 0 && c->n_eos <= MODEL_EOS_MAX, "%d EOS ids", c->n_eos);
	FUZZ_ASSERT(c->sliding_window >= 0 && c->bos_id >= -1, "sliding_window %d bos %d", c->sliding_window, c->bos_id);
	if (c->yarn)
		FUZZ_ASSERT(c->yarn_factor >= 1 && c->yarn_original_max >= 1, "YaRN factor %g, original max %d",
			    c->yarn_factor, c->yarn_original_max);
	check_floats(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_part parts[2];
	fuzz_split(data, size, parts, 2);
	const char *dir = fuzz_dir();

	cJSON *j = cJSON_ParseWithLength(parts[0].p, parts[0].n);
	struct model_config cfg;
	error_clear();
	int rc = model_config_parse(&cfg, j, "fuzz/config.json");
	cJSON_Delete(j);
	if (rc)
		FUZZ_ASSERT(rc < 0 && strstr(error_message(), "fuzz/config.json"), "failure %d, message: %s", rc,
			    error_message());
	else
		check(&cfg);

	fuzz_write(dir, "config.json", parts[0].p, parts[0].n);
	fuzz_write(dir, "generation_config.json", parts[1].n ? parts[1].p : NULL, parts[1].n);
	struct model_config loaded;
	error_clear();
	int rl = model_config_load(&loaded, dir);
	if (rc) {
		FUZZ_ASSERT(rl < 0, "model_config_load accepts what model_config_parse refused");
	} else if (rl == 0) {
		check(&loaded);
		/* Only the EOS ids may come from generation_config.json. */
		memcpy(cfg.eos_ids, loaded.eos_ids, sizeof cfg.eos_ids);
		cfg.n_eos = loaded.n_eos;
		FUZZ_ASSERT(memcmp(&cfg, &loaded, sizeof cfg) == 0, "model_config_load and model_config_parse disagree");
	} else {
		FUZZ_ASSERT(parts[1].n && error_message()[0], "load failed (%d) on an accepted config: %s", rl,
			    error_message());
	}

	struct generate_options o;
	if (generate_options_default(&o, dir) != 0)
		FUZZ_ASSERT(error_message()[0], "generation_config.json refused without a message");
	FUZZ_ASSERT(isfinite(o.temp) && o.temp >= 0, "temperature %g", o.temp);
	FUZZ_ASSERT(o.top_p > 0 && o.top_p <= 1 && o.top_k >= 0, "top_p %g top_k %d", o.top_p, o.top_k);
	return 0;
}
