/*
 * ckpt_names — see ckpt_names.h.
 */
#include "engine/convert/ckpt_names.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/model/model_tensors.h"

/* Where Qwen3.5 and Qwen3-Next checkpoints keep what colibri names as a
 * text model's tensors: a vision-language checkpoint's text model under
 * model.language_model., and the MTP block under mtp. (its decoder layer
 * mtp.layers.i, its input norms and fc, its final norm). Writes the alias
 * of name into buf; false when it has none. */
static bool qwen_alias(const struct model_config *cfg, const char *name, char *buf, size_t len)
{
	static const char *const heads[][2] = {
		{ "enorm.weight", "mtp.pre_fc_norm_embedding.weight" },
		{ "hnorm.weight", "mtp.pre_fc_norm_hidden.weight" },
		{ "eh_proj.weight", "mtp.fc.weight" },
		{ "shared_head.norm.weight", "mtp.norm.weight" },
	};
	if (cfg->arch != MODEL_ARCH_QWEN3_5_MOE && cfg->arch != MODEL_ARCH_QWEN3_NEXT)
		return false;
	int layer, at = 0;
	if (sscanf(name, "model.layers.%d.%n", &layer, &at) == 1 && at > 0 && layer >= cfg->n_layers) {
		for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
			if (strcmp(name + at, heads[i][0]) == 0) {
				snprintf(buf, len, "%s", heads[i][1]);
				return true;
			}
		snprintf(buf, len, "mtp.layers.%d.%s", layer - cfg->n_layers, name + at);
		return true;
	}
	if (strncmp(name, "model.", 6) != 0)
		return false;
	snprintf(buf, len, "model.language_model.%s", name + 6);
	return true;
}

/* A missing tensor's name for a message: name, and where a Qwen3.5 /
 * Qwen3-Next checkpoint may keep it instead, or for a DeepSeek-V4 MTP
 * layer the release's module it belongs to. */
const char *ckpt_names_missing(const struct ckpt_names *n, const char *name, char *buf, size_t len)
{
	char alias[TENSOR_NAME_MAX + 32];
	int layer, at = 0;
	const struct model_config *cfg = n->cfg;
	if (qwen_alias(cfg, name, alias, sizeof alias))
		snprintf(buf, len, "%s (or %s)", name, alias);
	else if (cfg->arch == MODEL_ARCH_DEEPSEEK_V4 && sscanf(name, "model.layers.%d.%n", &layer, &at) == 1 &&
		 at > 0 && layer >= cfg->n_layers)
		snprintf(buf, len, "%s (of the MTP block mtp.%d.*)", name, layer - cfg->n_layers);
	else
		snprintf(buf, len, "%s", name);
	return buf;
}

/* DeepSeek-V4's released checkpoints name tensors as its reference code
 * (layers.L.attn.wq_a.weight, ffn.experts.E.w1.weight, hc_head_fn, ...);
 * transformers v5.15.0 renames them on load with the "deepseek_v4" rules
 * of conversion_mapping.py, applied in order (each replaces its first
 * match), after the FP8 quantizer's rule X.scale -> X.weight_scale_inv,
 * and prefixes the base model's tensors with "model.". The one change
 * here is that routed experts keep one name per expert (gate_proj, up_proj,
 * down_proj for w1, w3, w2) instead of transformers' fused gate_up_proj.
 * The MTP modules mtp.M.* (which transformers does not load) become layers
 * n_layers + M: their block's tensors by the same rules, their own
 * e_proj, h_proj, enorm, hnorm as they are, norm as shared_head.norm and
 * hc_head_* as hc_head.* of the layer.
 * Writes the transformers name of a released name into buf; false for a
 * name that is not in the released layout (already "model.", or the mtp.*
 * of a module past n_mtp). */
static bool v4_rename(const char *name, int n_layers, int n_mtp, char *buf, size_t len)
{
	enum { SUB, SUFFIX, WHOLE };
	static const struct {
		int kind;
		const char *from, *to;
	} rules[] = {
		{ SUB, ".attn.", ".self_attn." },
		{ SUB, ".ffn.", ".mlp." },
		{ SUB, ".indexer.compressor.", ".compressor.indexer." },
		{ WHOLE, "embed.weight", "embed_tokens.weight" },
		{ WHOLE, "head.weight", "lm_head.weight" },
		{ WHOLE, "hc_head_fn", "hc_head.hc_fn" },
		{ WHOLE, "hc_head_base", "hc_head.hc_base" },
		{ WHOLE, "hc_head_scale", "hc_head.hc_scale" },
		{ SUB, ".attn_norm.", ".input_layernorm." },
		{ SUB, ".ffn_norm.", ".post_attention_layernorm." },
		{ SUFFIX, ".hc_attn_fn", ".attn_hc.fn" },
		{ SUFFIX, ".hc_attn_base", ".attn_hc.base" },
		{ SUFFIX, ".hc_attn_scale", ".attn_hc.scale" },
		{ SUFFIX, ".hc_ffn_fn", ".ffn_hc.fn" },
		{ SUFFIX, ".hc_ffn_base", ".ffn_hc.base" },
		{ SUFFIX, ".hc_ffn_scale", ".ffn_hc.scale" },
		{ SUFFIX, ".attn_sink", ".sinks" },
		{ SUB, ".indexer.weights_proj.", ".compressor.indexer.scorer.weights_proj." },
		{ SUB, ".indexer.wq_b.", ".compressor.indexer.q_b_proj." },
		{ SUB, ".norm.", ".kv_norm." },
		{ SUFFIX, ".ape", ".position_bias" },
		{ SUB, ".wq_a.", ".q_a_proj." },
		{ SUB, ".self_attn.wq_b.", ".self_attn.q_b_proj." },
		{ SUB, ".wkv.", ".kv_proj." },
		{ SUB, ".wgate.", ".gate_proj." },
		{ SUB, ".wo_a.", ".o_a_proj." },
		{ SUB, ".wo_b.", ".o_b_proj." },
		{ SUB, ".q_norm.", ".q_a_norm." },
		{ SUFFIX, ".gate.bias", ".gate.e_score_correction_bias" },
		{ SUB, ".shared_experts.w1.", ".shared_experts.gate_proj." },
		{ SUB, ".shared_experts.w2.", ".shared_experts.down_proj." },
		{ SUB, ".shared_experts.w3.", ".shared_experts.up_proj." },
	};
	if (!strncmp(name, "model.", 6) || !strncmp(name, "lm_head.", 8))
		return false;
	char a[TENSOR_NAME_MAX + 64], b[TENSOR_NAME_MAX + 64];
	size_t n = strlen(name);
	if (n >= TENSOR_NAME_MAX)
		return false;
	if (!strncmp(name, "mtp.", 4)) {
		char *end;
		long mod = strtol(name + 4, &end, 10);
		if (end == name + 4 || *end != '.' || mod < 0 || mod >= n_mtp)
			return false;
		static const char *const own[][2] = {
			{ "norm.weight", "shared_head.norm.weight" }, { "hc_head_fn", "hc_head.hc_fn" },
			{ "hc_head_base", "hc_head.hc_base" },       { "hc_head_scale", "hc_head.hc_scale" },
			{ "e_proj.weight", NULL }, { "e_proj.scale", "e_proj.weight_scale_inv" },
			{ "h_proj.weight", NULL }, { "h_proj.scale", "h_proj.weight_scale_inv" },
			{ "enorm.weight", NULL },  { "hnorm.weight", NULL },
		};
		const char *rest = end + 1;
		for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
			if (!strcmp(rest, own[i][0])) {
				int w = snprintf(buf, len, "model.layers.%ld.%s", n_layers + mod, own[i][1] ? own[i][1] : rest);
				return w > 0 && (size_t)w < len;
			}
		snprintf(b, sizeof b, "layers.%ld.%s", n_layers + mod, rest);
		name = b;
		n = strlen(name);
	}
	if (n > 6 && !strcmp(name + n - 6, ".scale"))
		snprintf(a, sizeof a, "%.*s.weight_scale_inv", (int)(n - 6), name);
	else
		snprintf(a, sizeof a, "%s", name);
	if (n >= TENSOR_NAME_MAX)
		return false;
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
		size_t la = strlen(a), lf = strlen(rules[i].from);
		const char *at = NULL;
		if (rules[i].kind == SUB)
			at = strstr(a, rules[i].from);
		else if (rules[i].kind == SUFFIX)
			at = la >= lf && !strcmp(a + la - lf, rules[i].from) ? a + la - lf : NULL;
		else
			at = !strcmp(a, rules[i].from) ? a : NULL;
		if (!at)
			continue;
		snprintf(b, sizeof b, "%.*s%s%s", (int)(at - a), a, rules[i].to, at + lf);
		snprintf(a, sizeof a, "%s", b);
	}
	/* Routed experts: .experts.E.w1. -> gate_proj, w3 -> up_proj, w2 -> down_proj. */
	const char *e = strstr(a, ".experts.");
	if (e) {
		const char *d = e + 9, *p = d;
		while (*p >= '0' && *p <= '9')
			p++;
		static const char *const w[3][2] = { { ".w1.", ".gate_proj." }, { ".w3.", ".up_proj." },
						     { ".w2.", ".down_proj." } };
		for (int k = 0; p > d && k < 3; k++)
			if (!strncmp(p, w[k][0], 4)) {
				snprintf(b, sizeof b, "%.*s%s%s", (int)(p - a), a, w[k][1], p + 4);
				snprintf(a, sizeof a, "%s", b);
				break;
			}
	}
	if (strlen(a) + 6 >= len)
		return false;
	snprintf(buf, len, "%s%s", strncmp(a, "lm_head.", 8) ? "model." : "", a);
	return true;
}

static uint64_t v4_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* Builds the table of the released names' transformers names (DeepSeek-V4
 * only), so that find_tensor finds a released tensor by the name the
 * container gives it; counts the mtp.* tensors of modules config.json does
 * not announce, which are not converted.
 * Open addressing over twice the tensor count: O(1) per lookup. */
int ckpt_names_init(struct ckpt_names *c, const struct st_set *set, const struct model_config *cfg)
{
	memset(c, 0, sizeof *c);
	c->set = set;
	c->cfg = cfg;
	if (cfg->arch != MODEL_ARCH_DEEPSEEK_V4)
		return 0;
	size_t n = set->n_tensors;
	c->n_slots = 16;
	while (c->n_slots < 2 * n)
		c->n_slots *= 2;
	c->slots = calloc(c->n_slots, sizeof *c->slots);
	c->names = calloc(c->n_slots, sizeof *c->names);
	if (!c->slots || !c->names)
		return error_set(ENOMEM, "out of memory");
	for (size_t f = 0; f < set->n_files; f++) {
		for (size_t i = 0; i < set->files[f].n_tensors; i++) {
			const struct st_tensor *t = &set->files[f].tensors[i];
			char name[TENSOR_NAME_MAX + 8];
			bool mtp = !strncmp(t->name, "mtp.", 4);
			if (!v4_rename(t->name, cfg->n_layers, cfg->n_mtp_layers, name, sizeof name)) {
				c->n_mtp_skipped += mtp;
				continue;
			}
			c->n_mtp_named += mtp;
			size_t s = v4_hash(name) & (c->n_slots - 1);
			while (c->slots[s]) {
				if (!strcmp(c->names[s], name))
					return error_set(EINVAL, "%s: tensors %s and %s both mean %s", st_set_path(set, t),
							 c->slots[s]->name, t->name, name);
				s = (s + 1) & (c->n_slots - 1);
			}
			if (!(c->names[s] = strdup(name)))
				return error_set(ENOMEM, "out of memory");
			c->slots[s] = t;
		}
	}
	return 0;
}

void ckpt_names_free(struct ckpt_names *c)
{
	for (size_t s = 0; c->names && s < c->n_slots; s++)
		free(c->names[s]);
	free(c->names);
	free(c->slots);
}

/* The released tensor whose transformers name is name, or NULL. */
static const struct st_tensor *v4_find(const struct ckpt_names *c, const char *name)
{
	if (!c->slots)
		return NULL;
	for (size_t s = v4_hash(name) & (c->n_slots - 1); c->slots[s]; s = (s + 1) & (c->n_slots - 1))
		if (!strcmp(c->names[s], name))
			return c->slots[s];
	return NULL;
}

/* Looks a tensor up by its name, or by the name transformers v5 gives it
 * (Mixtral's block_sparse_moe became mlp; DeepSeek-V4's released names),
 * or where a Qwen3.5/Qwen3-Next or MiniMax-M2 checkpoint keeps it. */
const struct st_tensor *ckpt_names_find(const struct ckpt_names *c, const char *name)
{
	const struct st_tensor *t = st_set_find(c->set, name);
	if (t)
		return t;
	if ((t = v4_find(c, name)))
		return t;
	char alias[TENSOR_NAME_MAX + 32];
	if (qwen_alias(c->cfg, name, alias, sizeof alias))
		return st_set_find(c->set, alias);
	/* MiniMax-M2 keeps the correction bias beside the router, not in it
	 * (released: block_sparse_moe.e_score_correction_bias; transformers v5
	 * saves it as mlp.e_score_correction_bias). */
	const char *bias = strstr(name, ".mlp.gate.e_score_correction_bias");
	if (bias && !bias[strlen(".mlp.gate.e_score_correction_bias")]) {
		const char *const homes[] = { "block_sparse_moe", "mlp" };
		for (int k = 0; k < 2; k++) {
			snprintf(alias, sizeof alias, "%.*s.%s.e_score_correction_bias", (int)(bias - name), name, homes[k]);
			if ((t = st_set_find(c->set, alias)))
				return t;
		}
	}
	const char *old = strstr(name, ".block_sparse_moe.");
	if (!old)
		return NULL;
	snprintf(alias, sizeof alias, "%.*s.mlp.%s", (int)(old - name), name,
		 old + strlen(".block_sparse_moe."));
	return st_set_find(c->set, alias);
}

