/*
 * gguf_view — the GGUF tensors under the container's names (see
 * gguf_view.h for what is undone and how).
 */
#include "engine/convert/gguf_view.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "compute/quant.h"

enum gv_kind {
	GV_PLAIN,    /* rows row0 .. of a, as stored */
	GV_ROPE,     /* rows of a in llama.cpp's RoPE order of `heads` heads of hd rows */
	GV_KV_B,     /* DeepSeek kv_b_proj from attn_k_b (a) and attn_v_b (b) */
	GV_PAIR,     /* row e: a's row e and b's row e interleaved element by element */
};

struct gv_src {
	enum gv_kind kind;
	const struct gguf_set *g;    /* the view's GGUF set */
	const struct gguf_tensor *a, *b;
	int64_t row0;
	int64_t heads, hd, vd;       /* GV_ROPE: heads, head_dim; GV_KV_B: heads, nope, v */
};

/* HF name after "model.layers.L." -> GGUF name after "blk.L.": the
 * alternatives in order (llama.cpp names a post-attention norm ffn_norm or
 * post_attention_norm by architecture). */
static const struct {
	const char *hf;
	const char *gguf[2];
} layer_names[] = {
	{ "input_layernorm.weight", { "attn_norm.weight" } },
	{ "post_attention_layernorm.weight", { "ffn_norm.weight", "post_attention_norm.weight" } },
	{ "self_attn.q_proj.weight", { "attn_q.weight" } },
	{ "self_attn.k_proj.weight", { "attn_k.weight" } },
	{ "self_attn.v_proj.weight", { "attn_v.weight" } },
	{ "self_attn.o_proj.weight", { "attn_output.weight" } },
	{ "self_attn.q_proj.bias", { "attn_q.bias" } },
	{ "self_attn.k_proj.bias", { "attn_k.bias" } },
	{ "self_attn.v_proj.bias", { "attn_v.bias" } },
	{ "self_attn.o_proj.bias", { "attn_output.bias" } },
	{ "self_attn.q_norm.weight", { "attn_q_norm.weight" } },
	{ "self_attn.k_norm.weight", { "attn_k_norm.weight" } },
	{ "self_attn.sinks", { "attn_sinks.weight" } },
	{ "self_attn.q_a_proj.weight", { "attn_q_a.weight" } },
	{ "self_attn.q_a_layernorm.weight", { "attn_q_a_norm.weight" } },
	{ "self_attn.q_b_proj.weight", { "attn_q_b.weight" } },
	{ "self_attn.kv_a_proj_with_mqa.weight", { "attn_kv_a_mqa.weight" } },
	{ "self_attn.kv_a_layernorm.weight", { "attn_kv_a_norm.weight" } },
	{ "mlp.gate.weight", { "ffn_gate_inp.weight" } },
	{ "block_sparse_moe.gate.weight", { "ffn_gate_inp.weight" } },
	{ "mlp.router.weight", { "ffn_gate_inp.weight" } },
	{ "mlp.router.bias", { "ffn_gate_inp.bias" } },
	{ "mlp.gate.e_score_correction_bias", { "exp_probs_b.bias" } },
	{ "mlp.gate_proj.weight", { "ffn_gate.weight" } },
	{ "mlp.up_proj.weight", { "ffn_up.weight" } },
	{ "mlp.down_proj.weight", { "ffn_down.weight" } },
	{ "mlp.shared_experts.gate_proj.weight", { "ffn_gate_shexp.weight" } },
	{ "mlp.shared_experts.up_proj.weight", { "ffn_up_shexp.weight" } },
	{ "mlp.shared_experts.down_proj.weight", { "ffn_down_shexp.weight" } },
	{ "mlp.shared_expert.gate_proj.weight", { "ffn_gate_shexp.weight" } },
	{ "mlp.shared_expert.up_proj.weight", { "ffn_up_shexp.weight" } },
	{ "mlp.shared_expert.down_proj.weight", { "ffn_down_shexp.weight" } },
	{ "mlp.shared_expert_gate.weight", { "ffn_gate_inp_shexp.weight" } },
	{ "mlp.experts.down_proj_bias", { "ffn_down_exps.bias" } },
	/* GLM-4.5's MTP layer (llama.cpp keeps it as blk.N.nextn.*). */
	{ "eh_proj.weight", { "nextn.eh_proj.weight" } },
	{ "enorm.weight", { "nextn.enorm.weight" } },
	{ "hnorm.weight", { "nextn.hnorm.weight" } },
	{ "shared_head.norm.weight", { "nextn.shared_head_norm.weight" } },
	{ "shared_head.head.weight", { "nextn.shared_head_head.weight" } },
	{ "embed_tokens.weight", { "nextn.embed_tokens.weight" } },
};

static const struct {
	const char *hf, *gguf;
} model_names[] = {
	{ "model.embed_tokens.weight", "token_embd.weight" },
	{ "model.norm.weight", "output_norm.weight" },
	{ "lm_head.weight", "output.weight" },
};

/* Everything the view builds before it becomes a set. */
struct entry {
	char *name;
	int ndim;
	int64_t shape[2];
	struct gv_src src;
};

struct builder {
	struct gguf_view *v;
	struct entry *e;
	size_t n, cap;
};

static size_t tensor_index(const struct gguf_set *g, const struct gguf_tensor *t)
{
	size_t base = 0;
	for (int f = 0; f < t->file_index; f++)
		base += g->files[f].n_tensors;
	return base + (size_t)(t - g->files[t->file_index].tensors);
}

static const struct gguf_tensor *take(struct builder *b, const char *name)
{
	const struct gguf_tensor *t = gguf_set_find(&b->v->g, name);
	if (t)
		b->v->used[tensor_index(&b->v->g, t)] = true;
	return t;
}

static int64_t t_rows(const struct gguf_tensor *t)
{
	int64_t r = 1;
	for (int i = 1; i < t->n_dims; i++)
		r *= t->ne[i];
	return r;
}

static int add(struct builder *b, const char *name, int ndim, int64_t rows, int64_t cols, struct gv_src src)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 256;
		struct entry *e = realloc(b->e, cap * sizeof *e);
		if (!e)
			return error_set(ENOMEM, "out of memory");
		b->e = e;
		b->cap = cap;
	}
	struct entry *e = &b->e[b->n];
	*e = (struct entry){ .name = strdup(name), .ndim = ndim, .shape = { rows, cols }, .src = src };
	if (!e->name)
		return error_set(ENOMEM, "out of memory");
	b->n++;
	return 0;
}

/* The GGUF name of a resident tensor's HF name, or "" when it has none. */
static void gguf_name(const struct gguf_set *g, const char *hf, char *out, size_t len)
{
	out[0] = 0;
	for (size_t i = 0; i < sizeof model_names / sizeof model_names[0]; i++)
		if (!strcmp(hf, model_names[i].hf)) {
			snprintf(out, len, "%s", model_names[i].gguf);
			return;
		}
	int layer, at = 0;
	if (sscanf(hf, "model.layers.%d.%n", &layer, &at) != 1 || at == 0)
		return;
	const char *rest = hf + at;
	for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++) {
		if (strcmp(rest, layer_names[i].hf))
			continue;
		for (int k = 0; k < 2 && layer_names[i].gguf[k]; k++) {
			snprintf(out, len, "blk.%d.%s", layer, layer_names[i].gguf[k]);
			if (gguf_set_find(g, out))
				return;
		}
		snprintf(out, len, "blk.%d.%s", layer, layer_names[i].gguf[0]);
		return;
	}
}

/* A resident tensor of spec s from GGUF tensor t (shape checked by the
 * converter against the spec). */
static int add_resident(struct builder *b, const struct model_config *cfg, const struct tensor_spec *s)
{
	const struct gguf_set *g = &b->v->g;
	int layer = -1, at = 0;
	sscanf(s->name, "model.layers.%d.%n", &layer, &at);
	const char *rest = at ? s->name + at : "";
	char name[160];
	if (!strcmp(rest, "self_attn.kv_b_proj.weight")) {
		char kn[64], vn[64];
		snprintf(kn, sizeof kn, "blk.%d.attn_k_b.weight", layer);
		snprintf(vn, sizeof vn, "blk.%d.attn_v_b.weight", layer);
		const struct gguf_tensor *k = take(b, kn), *v = take(b, vn);
		if (!k || !v)
			return 0;
		int64_t H = cfg->n_heads, nope = cfg->qk_nope_dim, vd = cfg->v_head_dim, lora = cfg->kv_lora_rank;
		if (k->n_dims != 3 || k->ne[0] != nope || k->ne[1] != lora || k->ne[2] != H || v->n_dims != 3 ||
		    v->ne[0] != lora || v->ne[1] != vd || v->ne[2] != H)
			return error_set(EINVAL, "%s: %s [%" PRId64 ", %" PRId64 ", %" PRId64 "] and %s [%" PRId64 ", %" PRId64
					 ", %" PRId64 "] are not kv_b_proj of %" PRId64 " heads split as llama.cpp does "
					 "(k_b [nope %" PRId64 ", kv_lora %" PRId64 ", heads], v_b [kv_lora, v %" PRId64 ", heads])",
					 gguf_set_path(g, k), kn, k->ne[0], k->ne[1], k->ne[2], vn, v->ne[0], v->ne[1],
					 v->ne[2], H, nope, lora, vd);
		return add(b, s->name, 2, H * (nope + vd), lora,
			   (struct gv_src){ .kind = GV_KV_B, .a = k, .b = v, .heads = H, .hd = nope, .vd = vd });
	}
	if (!strcmp(rest, "mlp.experts.gate_up_proj_bias")) {
		char gn[64], un[64];
		snprintf(gn, sizeof gn, "blk.%d.ffn_gate_exps.bias", layer);
		snprintf(un, sizeof un, "blk.%d.ffn_up_exps.bias", layer);
		const struct gguf_tensor *gt = take(b, gn), *ut = take(b, un);
		if (!gt || !ut)
			return 0;
		if (gt->n_dims != 2 || ut->n_dims != 2 || gt->ne[0] != ut->ne[0] || gt->ne[1] != ut->ne[1])
			return error_set(EINVAL, "%s: %s and %s differ in shape", gguf_set_path(g, gt), gn, un);
		return add(b, s->name, 2, gt->ne[1], 2 * gt->ne[0], (struct gv_src){ .kind = GV_PAIR, .a = gt, .b = ut });
	}
	gguf_name(g, s->name, name, sizeof name);
	const struct gguf_tensor *t = name[0] ? take(b, name) : NULL;
	if (!t && !strcmp(s->name, "lm_head.weight"))
		return 0; /* tied: the converter's spec says whether that is allowed */
	if (!t)
		return 0;
	struct gv_src src = { .kind = GV_PLAIN, .a = t };
	/* llama.cpp's LlamaModel.permute: q over the attention heads, k over
	 * the kv heads (Mixtral; the other families are converted unpermuted). */
	if (cfg->arch == MODEL_ARCH_MIXTRAL &&
	    (!strcmp(rest, "self_attn.q_proj.weight") || !strcmp(rest, "self_attn.k_proj.weight"))) {
		src.kind = GV_ROPE;
		src.heads = rest[10] == 'q' ? cfg->n_heads : cfg->n_kv_heads;
		src.hd = cfg->head_dim;
		if (src.heads * src.hd != t_rows(t) || src.hd % 2)
			return error_set(EINVAL, "%s: %s has %" PRId64 " rows, not %" PRId64 " heads of %" PRId64,
					 gguf_set_path(g, t), name, t_rows(t), src.heads, src.hd);
	}
	int64_t rows = t->n_dims == 1 ? t->ne[0] : t_rows(t), cols = t->n_dims == 1 ? 1 : t->ne[0];
	if (t->n_dims > 2)
		return error_set(EINVAL, "%s: %s has %d dimensions; %s is a matrix", gguf_set_path(g, t), name,
				 t->n_dims, s->name);
	/* 1-D: a vector [n] (the converter's specs say [n, 1] or [n]). */
	return add(b, s->name, t->n_dims == 1 ? 1 : 2, rows, cols, src);
}

static int add_experts(struct builder *b, const struct model_config *cfg, int layer)
{
	static const char *const stacked[EXPERT_PARTS] = { "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps" };
	const struct gguf_set *g = &b->v->g;
	int64_t E = cfg->n_experts;
	for (int p = 0; p < EXPERT_PARTS; p++) {
		char gn[64];
		snprintf(gn, sizeof gn, "blk.%d.%s.weight", layer, stacked[p]);
		const struct gguf_tensor *t = take(b, gn);
		if (!t)
			continue;
		int64_t rows, cols;
		model_expert_shape(cfg, (enum expert_part)p, &rows, &cols);
		if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != E)
			return error_set(EINVAL, "%s: %s is [%" PRId64 ", %" PRId64 ", %" PRId64 "] (ggml order), expected "
					 "[%" PRId64 ", %" PRId64 ", %" PRId64 "]: %" PRId64 " experts of %" PRId64 " x %" PRId64,
					 gguf_set_path(g, t), gn, t->ne[0], t->ne[1], t->n_dims > 2 ? t->ne[2] : 1, cols,
					 rows, E, E, rows, cols);
		for (int e = 0; e < E; e++) {
			char name[TENSOR_NAME_MAX];
			model_expert_name(cfg, layer, e, (enum expert_part)p, name, sizeof name);
			int rc = add(b, name, 2, rows, cols, (struct gv_src){ .kind = GV_PLAIN, .a = t, .row0 = e * rows });
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* ---- reads ---- */

static const struct gv_src *src_of(const struct st_tensor *t)
{
	return t->rows_ctx;
}

static int raw_rows(const struct gguf_set *g, const struct st_tensor *t, int64_t row, int64_t n, void *out)
{
	const struct gv_src *s = src_of(t);
	if (row < 0 || n < 0 || row + n > st_tensor_rows(t))
		return error_set(EINVAL, "%s: tensor %s: rows %" PRId64 "..%" PRId64 " out of range",
				 gguf_set_path(g, s->a), s->a->name, row, row + n);
	if (s->kind == GV_PLAIN)
		return gguf_tensor_read_rows(g, s->a, s->row0 + row, n, out);
	/* GV_ROPE: HF row h*d + s*d/2 + j is file row h*d + 2j + s. */
	int64_t d = s->hd;
	for (int64_t i = 0; i < n; i++) {
		int64_t r = row + i, h = r / d, w = r % d, half = w / (d / 2), j = w % (d / 2);
		int rc = gguf_tensor_read_rows(g, s->a, h * d + 2 * j + half, 1, (uint8_t *)out + i * s->a->row_bytes);
		if (rc)
			return rc;
	}
	return 0;
}

/* n rows of GGUF type `type`, cols elements each, raw -> f32. */
static int dequantize(const struct gguf_set *g, const struct gguf_tensor *t, const void *raw, int64_t n,
		      int64_t cols, float *out)
{
	enum quant_type q;
	if (t->type == GGML_F32) {
		memcpy(out, raw, (size_t)(n * cols) * sizeof(float));
		return 0;
	}
	if (t->type == GGML_BF16) {
		const uint8_t *p = raw;
		for (int64_t i = 0; i < n * cols; i++) {
			uint16_t h;
			memcpy(&h, p + 2 * i, 2);
			out[i] = bf16_to_f32(h);
		}
		return 0;
	}
	if (quant_from_ggml_type(t->type, &q) != 0)
		return error_set(ENOTSUP, "%s: tensor %s is %s, a type colibri does not read (it keeps f32, f16, bf16, "
				 "q8_0, q4_0, q4_k, q5_k, q6_k and mxfp4)", gguf_set_path(g, t), t->name,
				 ggml_type_name(t->type));
	const void *data = raw;
	void *repacked = NULL;
	if (q == QUANT_MXFP4) {
		repacked = malloc(quant_matrix_bytes(QUANT_MXFP4, n, cols, 32));
		if (!repacked)
			return error_set(ENOMEM, "out of memory");
		if (quant_mxfp4_from_ggml(repacked, raw, n, cols) != 0) {
			free(repacked);
			return error_set(EINVAL, "%s: tensor %s: an MXFP4 scale is 255 (NaN in e8m0)", gguf_set_path(g, t),
					 t->name);
		}
		data = repacked;
	}
	struct qmatrix m;
	quant_matrix_view(&m, data, q, n, cols, 0);
	for (int64_t r = 0; r < n; r++)
		quant_row_dequantize(out + r * cols, &m, r);
	free(repacked);
	return 0;
}

static int view_read_raw(const struct st_set *set, const struct st_tensor *t, int64_t row, int64_t n, void *out)
{
	(void)set;
	return raw_rows(src_of(t)->g, t, row, n, out);
}

/* Rows of a stored-form tensor as f32: read raw into a scratch, then
 * dequantize. */
static int stored_f32(const struct gguf_set *g, const struct st_tensor *t, int64_t row, int64_t n, float *out)
{
	const struct gv_src *s = src_of(t);
	uint64_t bytes = (uint64_t)n * (uint64_t)s->a->row_bytes;
	void *raw = malloc(bytes ? bytes : 1);
	if (!raw)
		return error_set(ENOMEM, "out of memory");
	int rc = raw_rows(g, t, row, n, raw);
	if (!rc)
		rc = dequantize(g, s->a, raw, n, s->a->ne[0], out);
	free(raw);
	return rc;
}

/* All rows [r0, r0 + n) of GGUF tensor a as f32 (a fresh buffer). */
static int gguf_rows_f32(const struct gguf_set *g, const struct gguf_tensor *a, int64_t r0, int64_t n, float **out)
{
	void *raw = malloc((size_t)(n * a->row_bytes));
	*out = malloc((size_t)(n * a->ne[0]) * sizeof(float));
	int rc = raw && *out ? gguf_tensor_read_rows(g, a, r0, n, raw) : error_set(ENOMEM, "out of memory");
	if (!rc)
		rc = dequantize(g, a, raw, n, a->ne[0], *out);
	free(raw);
	if (rc) {
		free(*out);
		*out = NULL;
	}
	return rc;
}

static int view_read_f32(const struct st_set *set, const struct st_tensor *t, int64_t row, int64_t n, float *out)
{
	(void)set;
	const struct gv_src *s = src_of(t);
	const struct gguf_set *g = s->g;
	int64_t cols = st_tensor_cols(t);
	if (row < 0 || n < 0 || row + n > st_tensor_rows(t))
		return error_set(EINVAL, "%s: tensor %s: rows %" PRId64 "..%" PRId64 " out of range",
				 gguf_set_path(g, s->a), t->name, row, row + n);
	if (s->kind == GV_PLAIN || s->kind == GV_ROPE)
		return stored_f32(g, t, row, n, out);
	int rc = 0;
	if (s->kind == GV_PAIR) {
		float *a = NULL, *b = NULL;
		rc = gguf_rows_f32(g, s->a, row, n, &a);
		rc = rc ? rc : gguf_rows_f32(g, s->b, row, n, &b);
		for (int64_t i = 0; !rc && i < n * (cols / 2); i++) {
			out[2 * i] = a[i];
			out[2 * i + 1] = b[i];
		}
		free(a);
		free(b);
		return rc;
	}
	/* GV_KV_B: head h's rows are its nope k rows (column i of k_b[h],
	 * [kv_lora, nope]), then its v rows (v_b[h], [v, kv_lora]). */
	int64_t per = s->hd + s->vd, lora = cols;
	float *blk = NULL;
	int64_t blk_head = -1;
	for (int64_t i = 0; !rc && i < n; i++) {
		int64_t r = row + i, h = r / per, w = r % per;
		if (w < s->hd) {
			if (blk_head != h) {
				free(blk);
				blk = NULL;
				rc = gguf_rows_f32(g, s->a, h * lora, lora, &blk);
				blk_head = rc ? -1 : h;
			}
			for (int64_t c = 0; !rc && c < lora; c++)
				out[i * lora + c] = blk[c * s->hd + w];
		} else {
			float *v = NULL;
			rc = gguf_rows_f32(g, s->b, h * s->vd + (w - s->hd), 1, &v);
			if (!rc)
				memcpy(out + i * lora, v, (size_t)lora * sizeof(float));
			free(v);
		}
	}
	free(blk);
	return rc;
}


static const struct st_rows stored_rows = { .read_raw = view_read_raw, .read_f32 = view_read_f32 };
static const struct st_rows computed_rows = { .read_raw = NULL, .read_f32 = view_read_f32 };

/* ---- the set ---- */

int gguf_view_open(struct gguf_view *v, const char *path)
{
	memset(v, 0, sizeof *v);
	int rc = gguf_set_open(&v->g, path);
	if (rc)
		return rc;
	v->used = calloc(v->g.n_tensors ? v->g.n_tensors : 1, sizeof *v->used);
	if (!v->used) {
		gguf_set_close(&v->g);
		return error_set(ENOMEM, "out of memory");
	}
	return 0;
}

void gguf_view_close(struct gguf_view *v)
{
	free(v->srcs);
	free(v->used);
	gguf_set_close(&v->g);
	memset(v, 0, sizeof *v);
}

const char *gguf_view_source(const struct st_tensor *t)
{
	const struct gv_src *s = t->rows == &stored_rows || t->rows == &computed_rows ? t->rows_ctx : NULL;
	return s ? s->a->name : t->name;
}

/* The st_set of the entries: one st_file per GGUF file (the entry's first
 * source decides), fds duplicated so that st_set_close may close them. */
static int build_set(struct gguf_view *v, struct builder *b, struct st_set *set)
{
	memset(set, 0, sizeof *set);
	size_t nf = v->g.n_files;
	set->files = calloc(nf, sizeof *set->files);
	v->srcs = calloc(b->n ? b->n : 1, sizeof *v->srcs);
	if (!set->files || !v->srcs)
		return error_set(ENOMEM, "out of memory");
	set->n_files = nf;
	for (size_t f = 0; f < nf; f++) {
		set->files[f].fd = -1;
		set->files[f].path = strdup(v->g.files[f].path);
		set->files[f].file_bytes = v->g.files[f].file_bytes;
		if (!set->files[f].path)
			return error_set(ENOMEM, "out of memory");
		if (v->g.files[f].fd >= 0 && (set->files[f].fd = dup(v->g.files[f].fd)) < 0)
			return error_set(errno, "%s: %s", v->g.files[f].path, strerror(errno));
	}
	for (size_t i = 0; i < b->n; i++)
		set->files[b->e[i].src.a->file_index].n_tensors++;
	for (size_t f = 0; f < nf; f++) {
		set->files[f].tensors = calloc(set->files[f].n_tensors ? set->files[f].n_tensors : 1,
					       sizeof *set->files[f].tensors);
		if (!set->files[f].tensors)
			return error_set(ENOMEM, "out of memory");
		set->files[f].n_tensors = 0;
	}
	for (size_t i = 0; i < b->n; i++) {
		struct entry *e = &b->e[i];
		struct gv_src *s = &v->srcs[i];
		*s = e->src;
		s->g = &v->g;
		struct st_file *f = &set->files[s->a->file_index];
		struct st_tensor *t = &f->tensors[f->n_tensors++];
		bool stored = s->kind == GV_PLAIN || s->kind == GV_ROPE;
		t->name = e->name;
		e->name = NULL;
		t->ndim = e->ndim;
		t->shape[0] = e->shape[0];
		t->shape[1] = e->shape[1];
		t->rows = stored ? &stored_rows : &computed_rows;
		t->rows_ctx = s;
		t->offset = s->a->offset;
		uint32_t type = stored ? s->a->type : GGML_F32;
		switch (type) {
		case GGML_F32: t->dtype = ST_DTYPE_F32; snprintf(t->dtype_name, sizeof t->dtype_name, "F32"); break;
		case GGML_F16: t->dtype = ST_DTYPE_F16; snprintf(t->dtype_name, sizeof t->dtype_name, "F16"); break;
		case GGML_BF16: t->dtype = ST_DTYPE_BF16; snprintf(t->dtype_name, sizeof t->dtype_name, "BF16"); break;
		default:
			t->dtype = ST_DTYPE_GGML;
			snprintf(t->dtype_name, sizeof t->dtype_name, "%s", ggml_type_name(type));
		}
		t->ggml_type = type;
		t->row_bytes = stored ? s->a->row_bytes : (int64_t)(e->shape[e->ndim - 1] * 4);
		t->nbytes = (uint64_t)st_tensor_rows(t) * (uint64_t)t->row_bytes;
		v->n_srcs++;
	}
	return st_set_index(set);
}

int gguf_view_map(struct gguf_view *v, struct st_set *set, const struct model_config *cfg,
		  const struct tensor_spec *specs, size_t n_specs)
{
	struct builder b = { .v = v };
	int rc = 0;
	memset(v->used, 0, v->g.n_tensors * sizeof *v->used);
	for (size_t i = 0; !rc && i < n_specs; i++)
		rc = add_resident(&b, cfg, &specs[i]);
	for (int l = 0; !rc && l < cfg->n_layers + cfg->n_mtp_layers; l++)
		if (model_config_layer_moe(cfg, l))
			rc = add_experts(&b, cfg, l);
	if (!rc)
		rc = build_set(v, &b, set);
	for (size_t i = 0; i < b.n; i++)
		free(b.e[i].name);
	free(b.e);
	if (rc) {
		st_set_close(set);
		return rc;
	}
	v->n_unused = 0;
	size_t k = 0;
	for (size_t f = 0; f < v->g.n_files; f++)
		for (size_t j = 0; j < v->g.files[f].n_tensors; j++, k++)
			if (!v->used[k] && v->n_unused++ == 0)
				snprintf(v->unused_example, sizeof v->unused_example, "%s", v->g.files[f].tensors[j].name);
	return 0;
}
