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

static bool ink_released(const char *name, char *buf, size_t len);

/* A missing tensor's name for a message: name, and where a Qwen3.5 /
 * Qwen3-Next checkpoint may keep it instead, or for a DeepSeek-V4 MTP
 * layer the release's module it belongs to, or for Inkling the released
 * tensor it is made of. */
const char *ckpt_names_missing(const struct ckpt_names *n, const char *name, char *buf, size_t len)
{
	char alias[2 * TENSOR_NAME_MAX + 32];
	int layer, at = 0;
	const struct model_config *cfg = n->cfg;
	if (qwen_alias(cfg, name, alias, sizeof alias))
		snprintf(buf, len, "%s (or %s)", name, alias);
	else if (cfg->arch == MODEL_ARCH_INKLING && ink_released(name, alias, sizeof alias))
		snprintf(buf, len, "%s (released: %s)", name, alias);
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

/* Inkling's released layout (inkling_mm_model; transformers v5.15.0's
 * conversion_mapping.py rules "inkling_mm_model" and Interleave): the text
 * model under model.llm., other towers beside it. Each rule maps a
 * released tensor (under model.llm., or model.llm.layers.L. when layer) to
 * the container's name (under model., or model.layers.L.) by one of these
 * kinds:
 *   INK_SAME  a rename;
 *   INK_VOCAB the first `vocab` rows (the padded embedding and head);
 *   INK_EVEN / INK_ODD  the even / odd rows of a 2-D [2n, H] or a 3-D
 *             [S, 2n, H] (gate and up interleaved g0, u0, g1, u1, ...):
 *             [n, H] or [S * n, H] (row s * n + i is shared expert s's row i);
 *   INK_DEINT [E, 2I, H] with each expert's rows deinterleaved: gate rows
 *             (even) then up rows (odd), transformers' gate_up_proj;
 *   INK_CATCOL [S, H, I] -> [H, S * I]: column s * I + i of row h is
 *             source [s][h][i] (the shared experts' down_proj side by side).
 * Every rule but INK_SAME makes a tensor whose rows are computed (struct
 * st_rows): it has the released tensor's file and dtype, and its name
 * says which released tensor it is made of, for messages. */
enum ink_kind { INK_SAME = 0, INK_VOCAB, INK_EVEN, INK_ODD, INK_DEINT, INK_CATCOL };

static const struct ink_rule {
	bool layer;
	const char *released, *container;
	enum ink_kind kind;
	const char *what;        /* the part of the released tensor, for names and messages */
} ink_rules[] = {
	{ false, "embed.weight", "embed_tokens.weight", INK_VOCAB, "its first vocab rows" },
	{ false, "embed_norm.weight", "embed_norm.weight", INK_SAME, NULL },
	{ false, "norm.weight", "norm.weight", INK_SAME, NULL },
	{ false, "unembed.weight", "lm_head.weight", INK_VOCAB, "its first vocab rows" },
	{ true, "attn_norm.weight", "input_layernorm.weight", INK_SAME, NULL },
	{ true, "mlp_norm.weight", "post_attention_layernorm.weight", INK_SAME, NULL },
	{ true, "attn.wq_du.weight", "self_attn.q_proj.weight", INK_SAME, NULL },
	{ true, "attn.wk_dv.weight", "self_attn.k_proj.weight", INK_SAME, NULL },
	{ true, "attn.wv_dv.weight", "self_attn.v_proj.weight", INK_SAME, NULL },
	{ true, "attn.wr_du.weight", "self_attn.r_proj.weight", INK_SAME, NULL },
	{ true, "attn.wo_ud.weight", "self_attn.o_proj.weight", INK_SAME, NULL },
	{ true, "attn.q_norm.weight", "self_attn.q_norm.weight", INK_SAME, NULL },
	{ true, "attn.k_norm.weight", "self_attn.k_norm.weight", INK_SAME, NULL },
	{ true, "attn.k_sconv.weight", "self_attn.k_sconv.conv1d.weight", INK_SAME, NULL },
	{ true, "attn.v_sconv.weight", "self_attn.v_sconv.conv1d.weight", INK_SAME, NULL },
	{ true, "attn.rel_logits_proj.proj", "self_attn.rel_logits_proj.proj", INK_SAME, NULL },
	{ true, "attn_sconv.weight", "attn_sconv.conv1d.weight", INK_SAME, NULL },
	{ true, "mlp_sconv.weight", "mlp_sconv.conv1d.weight", INK_SAME, NULL },
	{ true, "mlp.w13_dn.weight", "mlp.gate_proj.weight", INK_EVEN, "its even rows, gate" },
	{ true, "mlp.w13_dn.weight", "mlp.up_proj.weight", INK_ODD, "its odd rows, up" },
	{ true, "mlp.w2_md.weight", "mlp.down_proj.weight", INK_SAME, NULL },
	{ true, "mlp.global_scale", "mlp.global_scale", INK_SAME, NULL },
	{ true, "mlp.gate.weight", "mlp.gate.weight", INK_SAME, NULL },
	{ true, "mlp.gate.bias", "mlp.gate.e_score_correction_bias", INK_SAME, NULL },
	{ true, "mlp.gate.global_scale", "mlp.gate.global_scale", INK_SAME, NULL },
	{ true, "mlp.experts.w13_weight", "mlp.experts.gate_up_proj", INK_DEINT, "deinterleaved: gate rows, then up" },
	{ true, "mlp.experts.w2_weight", "mlp.experts.down_proj", INK_SAME, NULL },
	{ true, "mlp.shared_experts.shared_w13_weight", "mlp.shared_experts.gate_proj.weight", INK_EVEN,
	  "its even rows, gate, experts stacked" },
	{ true, "mlp.shared_experts.shared_w13_weight", "mlp.shared_experts.up_proj.weight", INK_ODD,
	  "its odd rows, up, experts stacked" },
	{ true, "mlp.shared_experts.shared_w2_weight", "mlp.shared_experts.down_proj.weight", INK_CATCOL,
	  "experts side by side" },
};
#define INK_RULES (sizeof ink_rules / sizeof ink_rules[0])

/* The other towers of the release: not part of the text model. */
static const char *const ink_towers[INK_TOWERS] = { "model.visual.", "model.audio.", "model.mtp." };

/* A computed tensor's source: rows of src, with the rule's kind. */
struct ink_view {
	const struct st_tensor *src;
	enum ink_kind kind;
	int64_t half;            /* INK_DEINT: I; INK_CATCOL: H */
	int64_t parts, part_cols; /* INK_CATCOL: S, I */
};

/* The source row of row r of a computed tensor (not INK_CATCOL). */
static int64_t ink_src_row(const struct ink_view *v, int64_t r)
{
	switch (v->kind) {
	case INK_EVEN: return 2 * r;
	case INK_ODD: return 2 * r + 1;
	case INK_DEINT: {
		int64_t I = v->half, e = r / (2 * I), k = r % (2 * I);
		return e * 2 * I + (k < I ? 2 * k : 2 * (k - I) + 1);
	}
	default: return r;
	}
}

/* Reads rows [row, row + n) of a computed tensor, one source row (or, for
 * INK_CATCOL, one row of each part) at a time: raw bytes, or f32. */
static int ink_read(const struct st_set *set, const struct st_tensor *t, int64_t row, int64_t n, void *out, bool f32)
{
	const struct ink_view *v = t->rows_ctx;
	if (row < 0 || n < 0 || row + n > st_tensor_rows(t))
		return error_set(EINVAL, "%s: tensor %s: rows %lld..%lld out of range", st_set_path(set, t), t->name,
				 (long long)row, (long long)(row + n));
	size_t es = f32 ? sizeof(float) : st_dtype_size(v->src->dtype);
	int64_t cols = st_tensor_cols(v->src);
	char *p = out;
	for (int64_t r = row; r < row + n; r++) {
		int64_t parts = v->kind == INK_CATCOL ? v->parts : 1;
		for (int64_t s = 0; s < parts; s++) {
			int64_t sr = v->kind == INK_CATCOL ? s * v->half + r : ink_src_row(v, r);
			int rc = f32 ? st_tensor_read_f32(set, v->src, sr, 1, (float *)p)
				     : st_tensor_read_raw(set, v->src, sr, 1, p);
			if (rc)
				return rc;
			p += (size_t)cols * es;
		}
	}
	return 0;
}

static int ink_read_raw(const struct st_set *set, const struct st_tensor *t, int64_t row, int64_t n, void *out)
{
	return ink_read(set, t, row, n, out, false);
}

static int ink_read_f32(const struct st_set *set, const struct st_tensor *t, int64_t row, int64_t n, float *out)
{
	return ink_read(set, t, row, n, out, true);
}

static const struct st_rows ink_rows = { .read_raw = ink_read_raw, .read_f32 = ink_read_f32 };

/* The rule for released name (and its layer), from the index `from` on;
 * -1 when none. */
static int ink_match(const char *name, int from, int *layer)
{
	const char *rest;
	int at = 0;
	*layer = -1;
	if (sscanf(name, "model.llm.layers.%d.%n", layer, &at) == 1 && at > 0)
		rest = name + at;
	else if (!strncmp(name, "model.llm.", 10))
		rest = name + 10, *layer = -1;
	else
		return -1;
	for (int i = from; i < (int)INK_RULES; i++)
		if (ink_rules[i].layer == (*layer >= 0) && !strcmp(rest, ink_rules[i].released))
			return i;
	return -1;
}

/* The container name of a rule's tensor. */
static void ink_container(const struct ink_rule *r, int layer, char *buf, size_t len)
{
	if (layer >= 0)
		snprintf(buf, len, "model.layers.%d.%s", layer, r->container);
	else
		snprintf(buf, len, "%s%s", strcmp(r->container, "lm_head.weight") ? "model." : "", r->container);
}

/* The released tensor the container's name is made of (for a message
 * about a missing one); false if none. */
static bool ink_released(const char *name, char *buf, size_t len)
{
	int layer = -1, at = 0;
	const char *rest = name;
	if (sscanf(name, "model.layers.%d.%n", &layer, &at) == 1 && at > 0)
		rest = name + at;
	else if (!strncmp(name, "model.", 6))
		rest = name + 6;
	for (size_t i = 0; i < INK_RULES; i++) {
		const struct ink_rule *r = &ink_rules[i];
		if (r->layer != (layer >= 0) || strcmp(rest, r->container))
			continue;
		if (layer >= 0)
			snprintf(buf, len, "model.llm.layers.%d.%s%s%s%s", layer, r->released, r->what ? " (" : "",
				 r->what ? r->what : "", r->what ? ")" : "");
		else
			snprintf(buf, len, "model.llm.%s%s%s%s", r->released, r->what ? " (" : "", r->what ? r->what : "",
				 r->what ? ")" : "");
		return true;
	}
	return false;
}

/* Makes the computed (or cut) tensor of rule r over src in *v / *ctx;
 * -EINVAL naming the released tensor and its file for a shape the rule
 * cannot split. */
static int ink_view_make(const struct ckpt_names *c, const struct ink_rule *r, const struct st_tensor *src,
			 struct st_tensor *v, struct ink_view *ctx)
{
	const char *path = st_set_path(c->set, src);
	const struct model_config *cfg = c->cfg;
	if (src->dtype != ST_DTYPE_F32 && src->dtype != ST_DTYPE_BF16 && src->dtype != ST_DTYPE_F16)
		return error_set(ENOTSUP, "%s: tensor %s is %s; colibri reads Inkling's released tensors in bf16, f16 "
				 "or f32", path, src->name, src->dtype_name);
	*v = *src;
	v->name = NULL; /* its own, below */
	*ctx = (struct ink_view){ .src = src, .kind = r->kind };
	v->rows = &ink_rows;
	v->rows_ctx = ctx;
	int64_t es = (int64_t)st_dtype_size(src->dtype);
	switch (r->kind) {
	case INK_VOCAB:
		if (src->ndim != 2 || src->shape[0] < cfg->vocab)
			return error_set(EINVAL, "%s: tensor %s has %lld rows (of %d dims), fewer than the vocabulary's %d",
					 path, src->name, (long long)src->shape[0], src->ndim, cfg->vocab);
		v->shape[0] = cfg->vocab;
		v->rows = NULL; /* a prefix of the rows: read in place */
		v->rows_ctx = NULL;
		break;
	case INK_EVEN:
	case INK_ODD: {
		int d = src->ndim == 3 ? 1 : 0;
		if ((src->ndim != 2 && src->ndim != 3) || src->shape[d] % 2)
			return error_set(EINVAL, "%s: tensor %s has %s %lld rows%s; gate and up rows interleave, so "
					 "they must be even", path, src->name, d ? "experts of" : "", (long long)src->shape[d],
					 src->ndim == 2 || src->ndim == 3 ? "" : " (it must be 2-D or 3-D)");
		v->ndim = 2;
		v->shape[0] = (d ? src->shape[0] : 1) * src->shape[d] / 2;
		v->shape[1] = src->shape[d + 1];
		break;
	}
	case INK_DEINT:
		if (src->ndim != 3 || src->shape[1] % 2)
			return error_set(EINVAL, "%s: tensor %s must be [experts, 2 x moe_intermediate, hidden] with an "
					 "even second dim (gate and up interleaved)", path, src->name);
		ctx->half = src->shape[1] / 2;
		break;
	case INK_CATCOL:
		if (src->ndim != 3)
			return error_set(EINVAL, "%s: tensor %s must be [shared experts, hidden, moe_intermediate]", path,
					 src->name);
		ctx->parts = src->shape[0];
		ctx->half = src->shape[1];
		ctx->part_cols = src->shape[2];
		v->ndim = 2;
		v->shape[0] = src->shape[1];
		v->shape[1] = src->shape[0] * src->shape[2];
		break;
	case INK_SAME:
		break;
	}
	int64_t elems = 1;
	for (int i = 0; i < v->ndim; i++)
		elems *= v->shape[i];
	v->nbytes = (uint64_t)(elems * es);
	char name[2 * TENSOR_NAME_MAX];
	snprintf(name, sizeof name, "%s (%s)", src->name, r->what);
	if (!(v->name = strdup(name)))
		return error_set(ENOMEM, "out of memory");
	return 0;
}

static uint64_t v4_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* Enters t under the container's name in the table; -EINVAL when two
 * released tensors mean the same one. */
static int table_put(struct ckpt_names *c, const char *name, const struct st_tensor *t, const struct st_tensor *src)
{
	size_t s = v4_hash(name) & (c->n_slots - 1);
	while (c->slots[s]) {
		if (!strcmp(c->names[s], name))
			return error_set(EINVAL, "%s: tensors %s and %s both mean %s", st_set_path(c->set, src),
					 c->slots[s]->name, src->name, name);
		s = (s + 1) & (c->n_slots - 1);
	}
	if (!(c->names[s] = strdup(name)))
		return error_set(ENOMEM, "out of memory");
	c->slots[s] = t;
	return 0;
}

static int table_alloc(struct ckpt_names *c, size_t n)
{
	c->n_slots = 16;
	while (c->n_slots < 2 * n)
		c->n_slots *= 2;
	c->slots = calloc(c->n_slots, sizeof *c->slots);
	c->names = calloc(c->n_slots, sizeof *c->names);
	return c->slots && c->names ? 0 : error_set(ENOMEM, "out of memory");
}

/* Inkling: counts the other towers' tensors, refuses a model.llm. tensor
 * no rule knows (a part of the text model colibri would silently run
 * without), and enters every released tensor of the text model under its
 * container name, the computed ones in c->views. */
static int ink_init(struct ckpt_names *c)
{
	const struct st_set *set = c->set;
	size_t n_views = 0, n_names = 0;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			int rc = table_alloc(c, n_names);
			c->views = calloc(n_views ? n_views : 1, sizeof *c->views);
			c->view_src = calloc(n_views ? n_views : 1, sizeof *c->view_src);
			if (rc || !c->views || !c->view_src)
				return rc ? rc : error_set(ENOMEM, "out of memory");
		}
		for (size_t f = 0; f < set->n_files; f++) {
			for (size_t i = 0; i < set->files[f].n_tensors; i++) {
				const struct st_tensor *t = &set->files[f].tensors[i];
				int layer, k = ink_match(t->name, 0, &layer);
				if (pass == 0) {
					for (int w = 0; w < INK_TOWERS; w++)
						c->n_tower[w] += !strncmp(t->name, ink_towers[w], strlen(ink_towers[w]));
					if (k < 0 && !strncmp(t->name, "model.llm.", 10))
						return error_set(EINVAL, "%s: tensor %s is not one colibri knows in Inkling's "
								 "text model (transformers v5.15.0); refusing to convert "
								 "without it", st_set_path(set, t), t->name);
				}
				for (; k >= 0; k = ink_match(t->name, k + 1, &layer)) {
					const struct ink_rule *r = &ink_rules[k];
					bool view = r->kind != INK_SAME;
					if (pass == 0) {
						n_names++;
						n_views += view;
						continue;
					}
					char name[TENSOR_NAME_MAX + 32];
					ink_container(r, layer, name, sizeof name);
					const struct st_tensor *dst = t;
					if (view) {
						struct st_tensor *v = &c->views[c->n_views];
						int rc = ink_view_make(c, r, t, v, &c->view_src[c->n_views]);
						c->n_views += v->name != NULL; /* freed with the table */
						if (rc)
							return rc;
						dst = v;
					}
					int rc = table_put(c, name, dst, t);
					if (rc)
						return rc;
				}
			}
		}
	}
	return 0;
}

/* Builds the table of the released names' container names (DeepSeek-V4,
 * Inkling; nothing for the others); for DeepSeek-V4 counts the mtp.*
 * tensors of modules config.json does not announce, which are not
 * converted. Open addressing over twice the tensor count: O(1) per lookup. */
int ckpt_names_init(struct ckpt_names *c, const struct st_set *set, const struct model_config *cfg)
{
	memset(c, 0, sizeof *c);
	c->set = set;
	c->cfg = cfg;
	if (cfg->arch == MODEL_ARCH_INKLING)
		return ink_init(c);
	if (cfg->arch != MODEL_ARCH_DEEPSEEK_V4)
		return 0;
	int rc = table_alloc(c, set->n_tensors);
	if (rc)
		return rc;
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
			if ((rc = table_put(c, name, t, t)))
				return rc;
		}
	}
	return 0;
}

void ckpt_names_free(struct ckpt_names *c)
{
	for (size_t v = 0; v < c->n_views; v++)
		free(c->views[v].name);
	free(c->views);
	free(c->view_src);
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

