/*
 * matvec_scalar — the reference kernels: plain C that spells out
 * docs/ARITHMETIC.md's order. Every SIMD level reproduces these bits.
 *
 * Every type against f32 activations is "dequantize, then dot": the weight
 * of a grouped format is w = (float)q * scale[g], rounded to f32 exactly as
 * quant_row_dequantize does (for mxfp4 w = e2m1 * 2^(e - 127), exact), and
 * the dot product is ARITHMETIC.md's: input c goes into lane c % 32 by
 * acc = fmaf(w, x[c], acc), inputs in order, and the 32 lanes fold as
 * scalar_fold does. The SIMD versions compute the same w and the same
 * lanes, a register's worth at a time. The GGML block
 * types (q8_0, q4_0, q4_k, q5_k, q6_k) take their weights a block at a time
 * from quant_block_dequantize, f16 from f16_to_f32: the values of
 * quant_row_dequantize, so each is bit-identical to this f32 kernel on the
 * dequantized matrix (the f32 activations path); against int8 activations
 * they take scalar_rows_q8_blocks, kernels_internal.h's sequence written
 * out. The build uses
 * -ffp-contract=off, so no multiply-add is fused behind our back and the
 * order written here is the order executed.
 */
#include <math.h>
#include <string.h>

#include "compute/kernels_internal.h"

#define LANES 32

/* The lanes summed as halves folded onto halves: lane i + 16 onto lane i,
 * then i + 8, i + 4, i + 2, i + 1 (a warp's shuffle-down tree). */
static float scalar_fold(float acc[LANES])
{
	for (int h = LANES / 2; h >= 1; h /= 2)
		for (int i = 0; i < h; i++)
			acc[i] = acc[i] + acc[i + h];
	return acc[0];
}

static float scalar_dot_f32(const float *a, const float *b, int64_t n)
{
	float acc[LANES] = { 0 };
	for (int64_t i = 0; i < n; i++)
		acc[i % LANES] = fmaf(a[i], b[i], acc[i % LANES]);
	return scalar_fold(acc);
}

static void scalar_axpy_f32(float *out, float a, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = fmaf(a, x[i], out[i]);
}

static void scalar_rows_f32(float *out, int64_t out_stride, const struct qmatrix *m,
			    const float *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	const float *w = m->data;
	for (int64_t r = row_begin; r < row_end; r++)
		for (int64_t t = 0; t < n; t++)
			out[t * out_stride + r] = scalar_dot_f32(w + r * m->cols, x + t * m->cols, m->cols);
}

static void scalar_rows_bf16(float *out, int64_t out_stride, const struct qmatrix *m,
			     const float *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint16_t *w = (const uint16_t *)m->data + r * cols;
		for (int64_t t = 0; t < n; t++) {
			const float *xt = x + t * cols;
			float acc[LANES] = { 0 };
			for (int64_t c = 0; c < cols; c++)
				acc[c % LANES] = fmaf(bf16_to_f32(w[c]), xt[c], acc[c % LANES]);
			out[t * out_stride + r] = scalar_fold(acc);
		}
	}
}

static void scalar_rows_int8(float *out, int64_t out_stride, const struct qmatrix *m,
			     const float *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols, group = m->group, n_groups = cols / group;
	for (int64_t r = row_begin; r < row_end; r++) {
		const int8_t *q = (const int8_t *)m->data + r * cols;
		const float *s = m->scales + r * n_groups;
		for (int64_t t = 0; t < n; t++) {
			const float *xt = x + t * cols;
			float acc[LANES] = { 0 };
			for (int64_t c = 0; c < cols; c++)
				acc[c % LANES] = fmaf((float)q[c] * s[c / group], xt[c], acc[c % LANES]);
			out[t * out_stride + r] = scalar_fold(acc);
		}
	}
}

static void scalar_rows_int4(float *out, int64_t out_stride, const struct qmatrix *m,
			     const float *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols, group = m->group, n_groups = cols / group;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * cols / 2;
		const float *s = m->scales + r * n_groups;
		for (int64_t t = 0; t < n; t++) {
			const float *xt = x + t * cols;
			float acc[LANES] = { 0 };
			for (int64_t c = 0; c < cols; c++) {
				uint8_t b = q[(c / 32) * 16 + (c % 16)];
				int nib = (c % 32) < 16 ? (b & 0xf) : (b >> 4);
				acc[c % LANES] = fmaf((float)(nib - 8) * s[c / group], xt[c], acc[c % LANES]);
			}
			out[t * out_stride + r] = scalar_fold(acc);
		}
	}
}

static void scalar_rows_mxfp4(float *out, int64_t out_stride, const struct qmatrix *m,
			      const float *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * (cols / 2 + cols / 32);
		const uint8_t *e = q + cols / 2;
		for (int64_t t = 0; t < n; t++) {
			const float *xt = x + t * cols;
			float acc[LANES] = { 0 };
			for (int64_t c = 0; c < cols; c++) {
				uint8_t b = q[(c / 32) * 16 + (c % 16)];
				unsigned nib = (c % 32) < 16 ? (b & 0xfu) : (b >> 4);
				acc[c % LANES] = fmaf(quant_e2m1_to_f32(nib) * quant_e8m0_to_f32(e[c / 32], 0),
						      xt[c], acc[c % LANES]);
			}
			out[t * out_stride + r] = scalar_fold(acc);
		}
	}
}

static void scalar_rows_f16(float *out, int64_t out_stride, const struct qmatrix *m,
			    const float *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint16_t *w = (const uint16_t *)m->data + r * cols;
		for (int64_t t = 0; t < n; t++) {
			const float *xt = x + t * cols;
			float acc[LANES] = { 0 };
			for (int64_t c = 0; c < cols; c++)
				acc[c % LANES] = fmaf(f16_to_f32(w[c]), xt[c], acc[c % LANES]);
			out[t * out_stride + r] = scalar_fold(acc);
		}
	}
}

/* A GGML block type: each block dequantized into w[] (at most 256 weights,
 * on the stack), then into the lanes as scalar_dot_f32 (blocks hold a
 * multiple of 32 inputs, so input k * qk + i is in lane i % 32). */
static void scalar_rows_blocks(float *out, int64_t out_stride, const struct qmatrix *m,
			       const float *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols, qk = m->group;
	int64_t block_bytes = (int64_t)quant_data_bytes(m->type, 1, qk);
	int64_t row_bytes = cols / qk * block_bytes;
	float w[QUANT_K_BLOCK];
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
		for (int64_t t = 0; t < n; t++) {
			const float *xt = x + t * cols;
			float acc[LANES] = { 0 };
			for (int64_t k = 0; k < cols / qk; k++) {
				quant_block_dequantize(w, m->type, q + k * block_bytes);
				for (int64_t i = 0; i < qk; i++)
					acc[i % LANES] = fmaf(w[i], xt[k * qk + i], acc[i % LANES]);
			}
			out[t * out_stride + r] = scalar_fold(acc);
		}
	}
}

/* Weight of input c of an int8, int4 or mxfp4 row, as the integer q the
 * int8 dot products take: [-127, 127], [-8, 7], 2 * e2m1 in [-12, 12]. */
static int scalar_q(const uint8_t *q, int64_t c, enum quant_type type)
{
	if (type == QUANT_INT8)
		return (int8_t)q[c];
	uint8_t b = q[(c / 32) * 16 + (c % 16)];
	unsigned nib = (c % 32) < 16 ? (b & 0xfu) : (b >> 4);
	if (type == QUANT_INT4)
		return (int)nib - 8;
	return (int)(2.0f * quant_e2m1_to_f32(nib));
}

/* The sequence kernels_internal.h fixes for kernel_rows_q8_fn, spelled out. */
static void scalar_rows_q8(float *out, int64_t out_stride, const struct qmatrix *m,
			   const struct act_q8 *x, int64_t n, int64_t row_begin, int64_t row_end,
			   enum quant_type type)
{
	int64_t cols = m->cols, group = m->group, n_groups = cols / group;
	int is_mxfp4 = type == QUANT_MXFP4;
	int64_t row_bytes = type == QUANT_INT8 ? cols : is_mxfp4 ? cols / 2 + cols / 32 : cols / 2;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
		const float *s = is_mxfp4 ? NULL : m->scales + r * n_groups;
		const uint8_t *e = q + cols / 2;
		for (int64_t t = 0; t < n; t++) {
			const int8_t *xq = x->q + t * x->pairs * 64;
			const float *xd = x->d + t * x->pairs * 8;
			float acc[8] = { 0 };
			for (int64_t p = 0; p < x->pairs; p++) {
				int32_t lane[8] = { 0 };
				for (int64_t c = 64 * p; c < 64 * p + 64 && c < cols; c++)
					lane[act_q8_lane(c) % 8] += scalar_q(q, c, type) * xq[act_q8_pos(c)];
				for (int l = 0; l < 8; l++) {
					int64_t c = 64 * p + 32 * (l / 4);
					float sw = c >= cols ? 0.0f
						   : is_mxfp4 ? quant_e8m0_to_f32(e[c / 32], 1) : s[c / group];
					acc[l] = fmaf(sw * xd[8 * p + l], (float)lane[l], acc[l]);
				}
			}
			out[t * out_stride + r] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) +
						  ((acc[1] + acc[5]) + (acc[3] + acc[7]));
		}
	}
}

static void scalar_rows_q8_int8(float *out, int64_t out_stride, const struct qmatrix *m,
				const struct act_q8 *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	scalar_rows_q8(out, out_stride, m, x, n, row_begin, row_end, QUANT_INT8);
}

static void scalar_rows_q8_int4(float *out, int64_t out_stride, const struct qmatrix *m,
				const struct act_q8 *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	scalar_rows_q8(out, out_stride, m, x, n, row_begin, row_end, QUANT_INT4);
}

static void scalar_rows_q8_mxfp4(float *out, int64_t out_stride, const struct qmatrix *m,
				 const struct act_q8 *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	scalar_rows_q8(out, out_stride, m, x, n, row_begin, row_end, QUANT_MXFP4);
}

/* Run k of a GGML block row as kernels_internal.h's integers: q[32] the
 * weights that meet x_q, ia / ib the integer scales of inputs 0..15 /
 * 16..31 (q6_k's two sub-blocks, sc_j twice for the K types, 1 otherwise),
 * *d the float scale, *mn and *dmin the K types' min (0 otherwise). */
static void scalar_block_run(int q[32], int *ia, int *ib, int *mn, float *d, float *dmin,
			     const uint8_t *row, int64_t k, enum quant_type type)
{
	uint16_t h;
	*ia = *ib = 1;
	*mn = 0;
	*dmin = 0.0f;
	if (type == QUANT_Q8_0 || type == QUANT_Q4_0) {
		const uint8_t *b = row + k * (type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES);
		memcpy(&h, b, 2);
		*d = f16_to_f32(h);
		for (int i = 0; i < 32; i++)
			q[i] = type == QUANT_Q8_0 ? (int8_t)b[2 + i]
				: (int)(i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4) - 8;
		return;
	}
	int j = (int)(k % 8);
	if (type == QUANT_Q6_K) {
		const uint8_t *b = row + k / 8 * QUANT_Q6_K_BYTES;
		int hf = j / 4, kk = j % 4;
		const uint8_t *ql = b + 64 * hf, *qh = b + 128 + 32 * hf;
		memcpy(&h, b + 208, 2);
		*d = f16_to_f32(h);
		*ia = (int8_t)b[192 + 2 * j];
		*ib = (int8_t)b[192 + 2 * j + 1];
		for (int l = 0; l < 32; l++) {
			int lo = (ql[l + 32 * (kk & 1)] >> (4 * (kk >> 1))) & 15;
			int hi = (qh[l] >> (2 * kk)) & 3;
			q[l] = (lo | hi << 4) - 32;
		}
		return;
	}
	int is_q5 = type == QUANT_Q5_K;
	const uint8_t *b = row + k / 8 * (is_q5 ? QUANT_Q5_K_BYTES : QUANT_Q4_K_BYTES);
	const uint8_t *qs = b + (is_q5 ? 48 : 16) + 32 * (j / 2);
	memcpy(&h, b, 2);
	*d = f16_to_f32(h);
	memcpy(&h, b + 2, 2);
	*dmin = f16_to_f32(h);
	quant_k_scale_min(b + 4, j, ia, mn);
	*ib = *ia;
	for (int l = 0; l < 32; l++) {
		q[l] = j % 2 ? qs[l] >> 4 : qs[l] & 15;
		if (is_q5)
			q[l] |= ((b[16 + l] >> j) & 1) << 4;
	}
}

/* The sequence kernels_internal.h fixes for the GGML block types. */
static void scalar_rows_q8_blocks(float *out, int64_t out_stride, const struct qmatrix *m,
				  const struct act_q8 *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols, runs = cols / 32;
	int64_t row_bytes = (int64_t)quant_data_bytes(m->type, 1, cols);
	int has_min = m->type == QUANT_Q4_K || m->type == QUANT_Q5_K;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *row = (const uint8_t *)m->data + r * row_bytes;
		for (int64_t t = 0; t < n; t++) {
			const int8_t *xq = x->q + t * x->pairs * 64;
			const float *xd = x->d + t * x->pairs * 8;
			const int32_t *xs = x->sum8 + t * x->pairs * 8;
			float acc[8] = { 0 };
			for (int64_t p = 0; p < x->pairs; p++) {
				for (int hr = 0; hr < 2; hr++) {
					int64_t k = 2 * p + hr;
					int q[32] = { 0 }, ia = 0, ib = 0, mn = 0;
					float d = 0.0f, dmin = 0.0f;
					if (k < runs)
						scalar_block_run(q, &ia, &ib, &mn, &d, &dmin, row, k, m->type);
					for (int ll = 0; ll < 4; ll++) {
						int l = 4 * hr + ll;
						int32_t sa = 0, sb = 0;
						for (int i = 0; i < 4; i++) {
							sa += q[4 * ll + i] * xq[act_q8_pos(32 * k + 4 * ll + i)];
							sb += q[16 + 4 * ll + i] * xq[act_q8_pos(32 * k + 16 + 4 * ll + i)];
						}
						acc[l] = fmaf(d * xd[8 * p + l], (float)(ia * sa + ib * sb), acc[l]);
						if (has_min)
							acc[l] = fmaf(-(dmin * xd[8 * p + l]),
								      (float)(mn * (xs[8 * p + l] / 8)), acc[l]);
					}
				}
			}
			out[t * out_stride + r] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) +
						  ((acc[1] + acc[5]) + (acc[3] + acc[7]));
		}
	}
}

/* The bits of max|x| over a run of 32 inputs, as integers (the order of
 * non-negative floats; 0x7f800000 and above: an infinity or a NaN). */
static uint32_t scalar_run_amax_bits(const float *x)
{
	uint32_t amax_bits = 0;
	for (int i = 0; i < 32; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		u &= 0x7fffffffu;
		amax_bits = u > amax_bits ? u : amax_bits;
	}
	return amax_bits;
}

static float scalar_act_q8_run(int8_t *lo, int8_t *hi, const float *x)
{
	uint32_t amax_bits = scalar_run_amax_bits(x);
	if (amax_bits >= 0x7f800000u || amax_bits == 0) { /* an infinity or a NaN; all zero */
		memset(lo, 0, 16);
		memset(hi, 0, 16);
		return amax_bits ? NAN : 0.0f;
	}
	float amax;
	memcpy(&amax, &amax_bits, 4);
	float inv = 127.0f / amax;
	for (int i = 0; i < 16; i++) {
		lo[i] = (int8_t)rintf(x[i] * inv);
		hi[i] = (int8_t)rintf(x[16 + i] * inv);
	}
	return amax / 127.0f;
}

static void scalar_rows_q16_int8(float *out, int64_t out_stride, const struct qmatrix *m,
				 const struct act_q16 *x, int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols, group = m->group, n_groups = cols / group;
	for (int64_t r = row_begin; r < row_end; r++) {
		const int8_t *q = (const int8_t *)m->data + r * cols;
		const float *s = m->scales + r * n_groups;
		for (int64_t t = 0; t < n; t++) {
			const int16_t *xq = x->q + t * cols;
			const float *xd = x->d + t * (cols / 32);
			float acc[2][8] = { { 0 } };
			for (int64_t k = 0; k < cols / 32; k++) {
				const int8_t *w = q + 32 * k;
				const int16_t *v = xq + 32 * k;
				float d = s[32 * k / group] * xd[k];
				for (int l = 0; l < 8; l++) {
					int32_t lane = w[2 * l] * v[2 * l] + w[2 * l + 1] * v[2 * l + 1] +
						       w[16 + 2 * l] * v[16 + 2 * l] + w[17 + 2 * l] * v[17 + 2 * l];
					acc[k % 2][l] = fmaf(d, (float)lane, acc[k % 2][l]);
				}
			}
			float a[8];
			for (int l = 0; l < 8; l++)
				a[l] = acc[0][l] + acc[1][l];
			out[t * out_stride + r] = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
		}
	}
}

static float scalar_act_q16_run(int16_t *q, const float *x)
{
	uint32_t amax_bits = scalar_run_amax_bits(x);
	if (amax_bits >= 0x7f800000u || amax_bits == 0) {
		memset(q, 0, 32 * sizeof *q);
		return amax_bits ? NAN : 0.0f;
	}
	float amax;
	memcpy(&amax, &amax_bits, 4);
	float inv = 32767.0f / amax;
	for (int i = 0; i < 32; i++)
		q[i] = (int16_t)rintf(x[i] * inv);
	return amax / 32767.0f;
}

const struct kernels_ops kernels_ops_scalar = {
	.name = "scalar",
	.rows = {
		[QUANT_F32] = scalar_rows_f32,
		[QUANT_BF16] = scalar_rows_bf16,
		[QUANT_INT8] = scalar_rows_int8,
		[QUANT_INT4] = scalar_rows_int4,
		[QUANT_MXFP4] = scalar_rows_mxfp4,
		[QUANT_F16] = scalar_rows_f16,
		[QUANT_Q8_0] = scalar_rows_blocks,
		[QUANT_Q4_0] = scalar_rows_blocks,
		[QUANT_Q4_K] = scalar_rows_blocks,
		[QUANT_Q5_K] = scalar_rows_blocks,
		[QUANT_Q6_K] = scalar_rows_blocks,
	},
	.rows_q8 = {
		[QUANT_INT8] = scalar_rows_q8_int8,
		[QUANT_INT4] = scalar_rows_q8_int4,
		[QUANT_MXFP4] = scalar_rows_q8_mxfp4,
		[QUANT_Q8_0] = scalar_rows_q8_blocks,
		[QUANT_Q4_0] = scalar_rows_q8_blocks,
		[QUANT_Q4_K] = scalar_rows_q8_blocks,
		[QUANT_Q5_K] = scalar_rows_q8_blocks,
		[QUANT_Q6_K] = scalar_rows_q8_blocks,
	},
	.act_q8_run = scalar_act_q8_run,
	.rows_q16 = scalar_rows_q16_int8,
	.act_q16_run = scalar_act_q16_run,
	.dot_f32 = scalar_dot_f32,
	.axpy_f32 = scalar_axpy_f32,
};
