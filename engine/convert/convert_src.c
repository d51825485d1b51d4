/*
 * convert_src — where each matrix of the container comes from and how its
 * rows are read as f32 (see convert_internal.h).
 */
/*
 * convert — see convert.h. The steps, in order:
 *   1. plan: check that OUT_DIR can be created or replaced, load
 *      config.json, open every shard, resolve every tensor the
 *      family needs (per-expert or fused expert layout, FP8 block scales)
 *      and check shapes and dtypes; nothing is written before this passes.
 *   2. write resident.bin, tensor by tensor, in row chunks;
 *   3. write experts/layer-LLL.bin, one 4 KiB-aligned record per expert;
 *   4. copy config/tokenizer files, write manifest.json, fsync, rename.
 */
#include "engine/convert/convert_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/files.h"
#include "engine/model/manifest.h"
#include "engine/model/model_config.h"
#include "engine/model/model_tensors.h"
#include "engine/convert/ckpt_names.h"
#include "engine/convert/safetensors.h"
#include "engine/convert/gguf.h"
#include "engine/convert/gguf_meta.h"
#include "engine/convert/gguf_view.h"
#include <cjson/cJSON.h>
#include "engine/model/verify.h"
#include "base/error.h"
#include "base/clock.h"

/* f32 staging per chunk of rows: bounds conversion memory. */
static bool dtype_convertible(enum st_dtype d)
{
	return d == ST_DTYPE_F32 || d == ST_DTYPE_BF16 || d == ST_DTYPE_F16 || d == ST_DTYPE_F8_E4M3 ||
	       d == ST_DTYPE_GGML;
}

/* The container type that holds a GGUF tensor's rows as they are: its own
 * type (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, mxfp4); f32 for rows
 * the view computes (they have no stored form). -ENOTSUP naming the tensor
 * for a GGML type colibri has no kernels for. */
int cv_native_type(const struct converter *c, const struct st_tensor *t, enum quant_type *q)
{
	if (!t->rows || !t->rows->read_raw) {
		*q = QUANT_F32;
		return 0;
	}
	if (quant_from_ggml_type(t->ggml_type, q) == 0)
		return 0;
	return error_set(ENOTSUP, "%s: tensor %s (%s) is %s; colibri keeps f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, "
			 "q6_k and mxfp4 tensors as they are and reads no other GGML type", st_set_path(&c->set, t),
			 gguf_view_source(t), t->name, t->dtype_name);
}

/* Block scales may be F32, BF16, F16, or ue8m0 powers of two (F8_E8M0,
 * or U8 holding the exponent byte, as transformers' Fp8Dequantize reads it). */
static bool scale_dtype_ok(enum st_dtype d)
{
	return d == ST_DTYPE_F32 || d == ST_DTYPE_BF16 || d == ST_DTYPE_F16 || d == ST_DTYPE_F8_E8M0 || d == ST_DTYPE_U8;
}

/* The block scales of weight t, found as `name` (the container's name of
 * t): NAME_scale_inv (DeepSeek-V3; a DeepSeek-V4 release's X.scale is
 * found under it through ckpt_names), or beside t's own name, or X.scale
 * for a DeepSeek-V4 checkpoint in transformers' names. NULL if none. */
static const struct st_tensor *find_scale(const struct converter *c, const char *name, const struct st_tensor *t,
					  char *buf, size_t len)
{
	snprintf(buf, len, "%s_scale_inv", name);
	const struct st_tensor *sc = ckpt_names_find(&c->names, buf);
	char alt[TENSOR_NAME_MAX + 32];
	snprintf(alt, sizeof alt, "%s_scale_inv", t->name);
	if (!sc)
		sc = st_set_find(&c->set, alt);
	size_t n = strlen(t->name);
	if (!sc && c->cfg.arch == MODEL_ARCH_DEEPSEEK_V4 && n > 7 && !strcmp(t->name + n - 7, ".weight")) {
		snprintf(alt, sizeof alt, "%.*s.scale", (int)(n - 7), t->name);
		sc = st_set_find(&c->set, alt);
	}
	return sc;
}

/* Resolves the block scales of t, named `name` in the container, if t is
 * FP8 e4m3 (128 x 128 blocks, ceil at the edges) or FP4 (fp4: e2m1 packed
 * two per I8 byte along the inputs, one scale per row and 32 inputs, as
 * transformers' FP8Experts stores MXFP4 experts), and checks its shape. */
int cv_resolve_scale(struct converter *c, struct matrix_src *s, const char *name, bool fp4)
{
	s->scale = NULL;
	s->fp4 = fp4;
	if (!fp4 && !dtype_convertible(s->t->dtype))
		return error_set(ENOTSUP, "%s: tensor %s: unsupported dtype %s",
				 st_set_path(&c->set, s->t), s->t->name, s->t->dtype_name);
	if (!fp4 && s->t->dtype != ST_DTYPE_F8_E4M3)
		return 0;
	const char *kind = fp4 ? "FP4" : "FP8";
	if (s->t->ndim != 2)
		return error_set(ENOTSUP, "%s: tensor %s: %s is supported for 2-D weights only",
				 st_set_path(&c->set, s->t), s->t->name, kind);
	char sname[TENSOR_NAME_MAX + 16];
	s->scale = find_scale(c, name, s->t, sname, sizeof sname);
	if (!s->scale)
		return error_set(EINVAL, "%s: tensor %s is %s but %s is missing",
				 st_set_path(&c->set, s->t), s->t->name, kind, sname);
	s->block_rows = fp4 ? 1 : FP8_BLOCK;
	s->block_cols = fp4 ? 32 : FP8_BLOCK;
	int64_t br = (s->rows + s->block_rows - 1) / s->block_rows;
	int64_t bc = (s->cols + s->block_cols - 1) / s->block_cols;
	if (s->scale->ndim != 2 || s->scale->shape[0] != br || s->scale->shape[1] != bc ||
	    !scale_dtype_ok(s->scale->dtype))
		return error_set(EINVAL, "%s: tensor %s: expected %" PRId64 "x%" PRId64
				 " f32/bf16/f16/e8m0 block scales for %" PRId64 "x%" PRId64 " blocks",
				 st_set_path(&c->set, s->scale), s->scale->name, br, bc, s->block_rows, s->block_cols);
	return 0;
}

/* An index table (TENSOR_ROLE_INDEX): integers of an integer dtype. */
int cv_resolve_index(struct converter *c, struct matrix_src *s, int32_t index_max)
{
	enum st_dtype d = s->t->dtype;
	s->scale = NULL;
	s->index_max = index_max;
	if (d != ST_DTYPE_I64 && d != ST_DTYPE_I32 && d != ST_DTYPE_I16 && d != ST_DTYPE_I8 && d != ST_DTYPE_U8)
		return error_set(ENOTSUP, "%s: tensor %s: dtype %s; an index table must be I64, I32, I16, I8 or U8",
				 st_set_path(&c->set, s->t), s->t->name, s->t->dtype_name);
	return 0;
}

/* t must have shape[ndim]; squeezed: or [shape[0], 1, shape[1]], as a
 * depthwise Conv1d stores its weight. */
int cv_check_shape(struct converter *c, const struct st_tensor *t, int ndim,
		       const int64_t *shape, bool squeezed)
{
	bool ok = t->ndim == ndim || (ndim == 1 && t->ndim == 1);
	for (int i = 0; ok && i < ndim; i++)
		ok = t->shape[i] == shape[i];
	if (squeezed && t->ndim == 3 && ndim == 2)
		ok = t->shape[0] == shape[0] && t->shape[1] == 1 && t->shape[2] == shape[1];
	if (ok)
		return 0;
	char got[96] = "", want[96] = "";
	for (int i = 0; i < t->ndim; i++)
		snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, i ? ", " : "", t->shape[i]);
	for (int i = 0; i < ndim; i++)
		snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, i ? ", " : "", shape[i]);
	return error_set(EINVAL, "%s: tensor %s has shape [%s], expected [%s]",
			 st_set_path(&c->set, t), t->name, got, want);
}

/* A gpt-oss expert matrix (EXPERT_NAMING_GPT_OSS): the rows of gate
 * (even) or up (odd) in mlp.experts.gate_up_proj, or down_proj, either as
 * released in MXFP4 (NAME_blocks U8 [E, out, in / 32, 16], NAME_scales U8
 * [E, out, in / 32], nn.Linear's row order) or dequantized in
 * transformers' transposed layout (NAME [E, in, out]). */
static int resolve_expert_oss(struct converter *c, int layer, int e, enum expert_part p, struct matrix_src *s)
{
	bool gate_up = p != EXPERT_PART_DOWN;
	int64_t E = c->cfg.n_experts, out = gate_up ? 2 * s->rows : s->rows, in = s->cols;
	char base[TENSOR_NAME_MAX], name[TENSOR_NAME_MAX + 16];
	model_expert_fused_name(&c->cfg, layer, gate_up, base, sizeof base);
	s->step = gate_up ? 2 : 1;
	s->first = p == EXPERT_PART_UP ? 1 : 0;
	snprintf(name, sizeof name, "%s_blocks", base);
	s->t = st_set_find(&c->set, name);
	if (s->t) {
		snprintf(name, sizeof name, "%s_scales", base);
		s->mx_scales = st_set_find(&c->set, name);
		if (!s->mx_scales)
			return error_set(EINVAL, "%s: tensor %s_blocks is MXFP4 but %s is missing",
					 st_set_path(&c->set, s->t), base, name);
		if (in % 32)
			return error_set(EINVAL, "%s: tensor %s_blocks: MXFP4 needs a multiple of 32 inputs, not %" PRId64,
					 st_set_path(&c->set, s->t), base, in);
		int64_t bshape[4] = { E, out, in / 32, 16 }, sshape[3] = { E, out, in / 32 };
		int rc = cv_check_shape(c, s->t, 4, bshape, false);
		rc = rc ? rc : cv_check_shape(c, s->mx_scales, 3, sshape, false);
		if (!rc && (s->t->dtype != ST_DTYPE_U8 || s->mx_scales->dtype != ST_DTYPE_U8))
			rc = error_set(EINVAL, "%s: tensors %s_blocks / _scales must be U8 (MXFP4 codes and e8m0 "
				       "exponents), not %s / %s", st_set_path(&c->set, s->t), base, s->t->dtype_name,
				       s->mx_scales->dtype_name);
		s->row0 = e * out;
		c->mx_seen = true;
		return rc;
	}
	s->t = st_set_find(&c->set, base);
	if (!s->t)
		return error_set(EINVAL, "%s: missing tensor %s_blocks (MXFP4, with %s_scales) or %s (dequantized)",
				 c->opt->hf_dir, base, base, base);
	int64_t shape[3] = { E, in, out };
	int rc = cv_check_shape(c, s->t, 3, shape, false);
	if (!rc && (!dtype_convertible(s->t->dtype) || s->t->dtype == ST_DTYPE_F8_E4M3))
		rc = error_set(ENOTSUP, "%s: tensor %s: dtype %s is not supported for gpt-oss experts",
			       st_set_path(&c->set, s->t), base, s->t->dtype_name);
	s->transposed = true;
	s->row0 = e * in;
	return rc;
}

/* Finds one expert matrix in either layout. */
int cv_resolve_expert(struct converter *c, int layer, int e, enum expert_part p,
			  struct matrix_src *s)
{
	char name[TENSOR_NAME_MAX];
	*s = (struct matrix_src){ 0 };
	model_expert_shape(&c->cfg, p, &s->rows, &s->cols);
	if (c->gguf) {
		/* The view names every expert in the per-expert layout. */
		model_expert_name(&c->cfg, layer, e, p, name, sizeof name);
		s->t = st_set_find(&c->set, name);
		if (!s->t) {
			static const char *const stacked[EXPERT_PARTS] = { "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps" };
			return error_set(EINVAL, "%s: missing tensor blk.%d.%s.weight (the routed experts of layer %d)",
					 c->opt->hf_dir, layer, stacked[p], layer);
		}
		enum quant_type q;
		return cv_native_type(c, s->t, &q);
	}
	if (c->cfg.expert_naming == EXPERT_NAMING_GPT_OSS)
		return resolve_expert_oss(c, layer, e, p, s);
	model_expert_name(&c->cfg, layer, e, p, name, sizeof name);
	s->t = ckpt_names_find(&c->names, name);
	s->row0 = 0;
	s->index_max = 0;
	if (s->t) {
		/* DeepSeek-V4's FP4 experts: I8 bytes of two e2m1 inputs each. */
		bool fp4 = c->cfg.arch == MODEL_ARCH_DEEPSEEK_V4 && s->t->dtype == ST_DTYPE_I8;
		c->fp4_seen |= fp4;
		if (fp4 && s->cols % 32)
			return error_set(EINVAL, "%s: tensor %s: FP4 needs a multiple of 32 inputs, not %" PRId64,
					 st_set_path(&c->set, s->t), s->t->name, s->cols);
		int64_t shape[2] = { s->rows, fp4 ? s->cols / 2 : s->cols };
		int rc = cv_check_shape(c, s->t, 2, shape, false);
		return rc ? rc : cv_resolve_scale(c, s, name, fp4);
	}
	char fused[TENSOR_NAME_MAX];
	bool gate_up = p != EXPERT_PART_DOWN;
	model_expert_fused_name(&c->cfg, layer, gate_up, fused, sizeof fused);
	s->t = ckpt_names_find(&c->names, fused);
	if (!s->t) {
		char a[2 * TENSOR_NAME_MAX + 48], b[2 * TENSOR_NAME_MAX + 48];
		return error_set(EINVAL, "%s: missing tensor %s (nor fused %s)", c->opt->hf_dir,
				 ckpt_names_missing(&c->names, name, a, sizeof a), ckpt_names_missing(&c->names, fused, b, sizeof b));
	}
	int64_t E = c->cfg.n_experts, I = c->cfg.moe_intermediate, H = c->cfg.hidden;
	int64_t shape[3] = { E, gate_up ? 2 * I : H, gate_up ? H : I };
	int rc = cv_check_shape(c, s->t, 3, shape, false);
	if (rc)
		return rc;
	if (!dtype_convertible(s->t->dtype) || s->t->dtype == ST_DTYPE_F8_E4M3)
		return error_set(ENOTSUP, "%s: tensor %s: dtype %s is not supported for fused experts",
				 st_set_path(&c->set, s->t), fused, s->t->dtype_name);
	s->scale = NULL;
	s->row0 = gate_up ? e * 2 * I + (p == EXPERT_PART_UP ? I : 0) : e * H;
	return 0;
}

/* -EINVAL naming tensor t of the checkpoint when p[0..rows * cols), its rows
 * from row0 on, holds a NaN or an infinity: a weight no quantizer can
 * store, and a model that could only produce NaN. */
static int check_finite(const struct converter *c, const struct st_tensor *t, const float *p, int64_t row0,
			int64_t rows, int64_t cols, const char *what)
{
	for (int64_t i = 0; i < rows * cols; i++)
		if (!isfinite(p[i]))
			return error_set(EINVAL, "%s: tensor %s: %s at row %" PRId64 ", column %" PRId64 " is %s",
					 st_set_path(&c->set, t), t->name, what, row0 + i / cols, i % cols,
					 isnan(p[i]) ? "NaN" : "infinite");
	return 0;
}

/* Reads the block scales of s into c->scale_buf, unless they are there. */
static int scales_read(struct converter *c, const struct matrix_src *s)
{
	if (c->scale_of == s->scale)
		return 0;
	int64_t rows = st_tensor_rows(s->scale), cols = st_tensor_cols(s->scale);
	size_t need = (size_t)(rows * cols);
	if (need > c->scale_cap) {
		float *p = realloc(c->scale_buf, need * sizeof *p);
		if (!p)
			return error_set(ENOMEM, "out of memory");
		c->scale_buf = p;
		c->scale_cap = need;
	}
	c->scale_of = NULL;
	int rc;
	if (s->scale->dtype == ST_DTYPE_U8) { /* ue8m0 exponent bytes */
		rc = st_tensor_read_raw(&c->set, s->scale, 0, rows, c->scale_buf);
		const uint8_t *raw = (const uint8_t *)c->scale_buf;
		for (size_t i = need; !rc && i-- > 0;)
			c->scale_buf[i] = st_e8m0_to_f32(raw[i]);
	} else {
		rc = st_tensor_read_f32(&c->set, s->scale, 0, rows, c->scale_buf);
	}
	if (!rc)
		rc = check_finite(c, s->scale, c->scale_buf, 0, rows, cols, "the scale");
	if (!rc)
		c->scale_of = s->scale;
	return rc;
}

/* FP4 e2m1 values (transformers' Fp8Dequantize._FP4_E2M1_LUT): sign bit 3,
 * then 0, 0.5, 1, 1.5, 2, 3, 4, 6. */
static const float fp4_e2m1[16] = { 0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
				    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f };

/* Rows [r, r + n) of an FP4 matrix as f32 (before its scales): input 2k of
 * a row is the low nibble of byte k, input 2k + 1 the high one. The bytes
 * are read to the front of out and widened from the last value down, so
 * that each write lands on bytes already consumed. */
static int fp4_read(struct converter *c, const struct matrix_src *s, int64_t r, int64_t n, float *out)
{
	int rc = st_tensor_read_raw(&c->set, s->t, s->row0 + r, n, out);
	const uint8_t *raw = (const uint8_t *)out;
	for (int64_t i = rc ? 0 : n * s->cols; i-- > 0;)
		out[i] = fp4_e2m1[(raw[i / 2] >> (i % 2 ? 4 : 0)) & 0xf];
	return rc;
}

/* Element b of an integer dtype, little-endian. */
static int64_t int_value(enum st_dtype d, const uint8_t *b)
{
	int64_t v;
	int32_t x32;
	int16_t x16;
	switch (d) {
	case ST_DTYPE_I64: memcpy(&v, b, 8); return v;
	case ST_DTYPE_I32: memcpy(&x32, b, 4); return x32;
	case ST_DTYPE_I16: memcpy(&x16, b, 2); return x16;
	case ST_DTYPE_I8: return (int8_t)b[0];
	default: return b[0];
	}
}

/* Rows [r, r + n) of an index table as f32, each an integer in
 * [0, index_max) (exact in f32 below 2^24), read through buf of buf_bytes;
 * out may be NULL (the plan's check). */
int cv_index_read(struct converter *c, const struct matrix_src *s, int64_t r, int64_t n, float *out,
		      uint8_t *buf, size_t buf_bytes)
{
	size_t es = st_dtype_size(s->t->dtype);
	int64_t step = (int64_t)(buf_bytes / (es * (size_t)s->cols));
	if (step < 1)
		return error_set(E2BIG, "%s: tensor %s: a row of %" PRId64 " exceeds the staging buffer",
				 st_set_path(&c->set, s->t), s->t->name, s->cols);
	for (int64_t done = 0; done < n; done += step) {
		int64_t k = n - done < step ? n - done : step;
		int rc = st_tensor_read_raw(&c->set, s->t, s->row0 + r + done, k, buf);
		if (rc)
			return rc;
		for (int64_t i = 0; i < k * s->cols; i++) {
			int64_t v = int_value(s->t->dtype, buf + (size_t)i * es);
			int64_t at = (r + done) * s->cols + i;
			if (v < 0 || v >= s->index_max)
				return error_set(EINVAL, "%s: tensor %s: value %" PRId64 " at row %" PRId64 ", column %" PRId64
						 " is not an expert index in [0, %d)", st_set_path(&c->set, s->t), s->t->name,
						 v, s->row0 + at / s->cols, at % s->cols, s->index_max);
			if (out)
				out[done * s->cols + i] = (float)v;
		}
	}
	return 0;
}

/* c->packed holding at least bytes. */
static int packed_reserve(struct converter *c, size_t bytes)
{
	if (bytes <= c->packed_bytes)
		return 0;
	uint8_t *p = realloc(c->packed, bytes);
	if (!p)
		return error_set(ENOMEM, "out of memory");
	c->packed = p;
	c->packed_bytes = bytes;
	return 0;
}

/* The MXFP4 bytes of rows [r, r + n) of s (s->t its *_blocks) gathered
 * into *blocks [n, cols / 32, 16] and *scales [n, cols / 32], in c->packed.
 * The source rows of the step are read whole (gate and up alternate) and
 * kept: the up part of an expert finds the rows its gate part read. */
int cv_mx_gather(struct converter *c, const struct matrix_src *s, int64_t r, int64_t n, uint8_t **blocks,
		     uint8_t **scales)
{
	int64_t G = s->cols / 32, span = n * s->step, base = s->row0 + r * s->step;
	size_t bb = (size_t)G * 16, need = (size_t)span * (bb + (size_t)G) + (size_t)n * (bb + (size_t)G);
	bool kept = c->packed_of == s->t && c->packed_row == base && c->packed_span == span;
	int rc = kept ? 0 : packed_reserve(c, need);
	if (rc)
		return rc;
	uint8_t *raw_b = c->packed, *raw_s = raw_b + (size_t)span * bb;
	*blocks = raw_s + (size_t)span * G;
	*scales = *blocks + (size_t)n * bb;
	if (!kept) {
		c->packed_of = NULL;
		rc = st_tensor_read_raw(&c->set, s->t, base * G, span * G, raw_b);
		rc = rc ? rc : st_tensor_read_raw(&c->set, s->mx_scales, base, span, raw_s);
		if (rc)
			return rc;
		c->prog.bytes_read += (uint64_t)span * (bb + (uint64_t)G);
		c->packed_of = s->t;
		c->packed_row = base;
		c->packed_span = span;
	}
	for (int64_t i = 0; i < n; i++) {
		memcpy(*blocks + (size_t)i * bb, raw_b + (size_t)(i * s->step + s->first) * bb, bb);
		memcpy(*scales + (size_t)i * G, raw_s + (size_t)(i * s->step + s->first) * G, (size_t)G);
	}
	return 0;
}

/* Rows [r, r + n) of a gpt-oss expert matrix as f32: MXFP4 decoded
 * exactly (byte b of a block holds input 2b in its low nibble and 2b + 1
 * in its high one, times 2^(scale - 127)), or the columns of the
 * transposed source, read in chunks of its rows. */
static int expert_src_read(struct converter *c, const struct matrix_src *s, int64_t r, int64_t n, float *out)
{
	int64_t cols = s->cols;
	if (!s->transposed) {
		uint8_t *blocks, *scales;
		int rc = cv_mx_gather(c, s, r, n, &blocks, &scales);
		for (int64_t i = 0; !rc && i < n * cols; i++) {
			unsigned byte = blocks[i / 2];
			out[i] = quant_e2m1_to_f32(i % 2 ? byte >> 4 : byte) * quant_e8m0_to_f32(scales[i / 32], 0);
		}
		return rc;
	}
	int64_t width = st_tensor_cols(s->t);
	int64_t chunk = (int64_t)((16u << 20) / ((size_t)width * sizeof(float)));
	chunk = chunk < 1 ? 1 : chunk;
	c->packed_of = NULL; /* c->packed now holds these rows, not mx_gather's */
	int rc = packed_reserve(c, (size_t)chunk * (size_t)width * sizeof(float));
	for (int64_t k0 = 0; !rc && k0 < cols; k0 += chunk) {
		int64_t m = cols - k0 < chunk ? cols - k0 : chunk;
		float *src = (float *)c->packed;
		rc = st_tensor_read_f32(&c->set, s->t, s->row0 + k0, m, src);
		c->prog.bytes_read += (uint64_t)m * (uint64_t)width * st_dtype_size(s->t->dtype);
		for (int64_t k = 0; !rc && k < m; k++)
			for (int64_t i = 0; i < n; i++)
				out[i * cols + k0 + k] = src[k * width + s->first + (r + i) * s->step];
	}
	return rc;
}

/* Reads rows [r, r + n) of the matrix as f32, applying FP8 or FP4 block
 * scales; a value that is not finite (in the source, or after scaling)
 * fails. */
int cv_matrix_read(struct converter *c, const struct matrix_src *s, int64_t r, int64_t n,
		       float *out)
{
	if (s->step) {
		int rc = expert_src_read(c, s, r, n, out);
		return rc ? rc : check_finite(c, s->t, out, s->row0 + s->first + r * s->step, n, s->cols, "the value");
	}
	if (s->index_max > 0) {
		c->prog.bytes_read += (uint64_t)n * (uint64_t)s->cols * st_dtype_size(s->t->dtype);
		return cv_index_read(c, s, r, n, out, c->qbuf, c->qbuf_bytes);
	}
	int rc = s->fp4 ? fp4_read(c, s, r, n, out) : st_tensor_read_f32(&c->set, s->t, s->row0 + r, n, out);
	if (rc)
		return rc;
	c->prog.bytes_read += st_tensor_row_bytes(s->t, n);
	/* Block scales are small ([rows/128, cols/128], or [rows, cols/32]);
	 * keep the current matrix's whole table and reread only when the
	 * matrix changes. */
	if (s->scale && (rc = scales_read(c, s)))
		return rc;
	int64_t br = s->block_rows, bcol = s->block_cols;
	int64_t bc = s->scale ? (s->cols + bcol - 1) / bcol : 0;
	for (int64_t i = 0; s->scale && i < n; i++) {
		const float *srow = c->scale_buf + (r + i) / br * bc;
		float *row = out + i * s->cols;
		for (int64_t j = 0; j < s->cols; j++)
			row[j] *= srow[j / bcol];
	}
	return check_finite(c, s->t, out, s->row0 + r, n, s->cols, "the value");
}
