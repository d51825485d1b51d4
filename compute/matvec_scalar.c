/*
 * matvec_scalar — the reference kernels: plain C, one accumulator, inputs in
 * natural order. The SIMD versions are tested against these.
 *
 * Every type is "dequantize, then dot": the weight of a grouped format is
 * w = (float)q * scale[g], rounded to f32 exactly as quant_row_dequantize
 * does, and acc += w * x[c] runs over c in order. The SIMD versions compute
 * the same w and differ only in how the products are summed. The build uses
 * -ffp-contract=off, so no multiply-add is fused behind our back and the
 * order written here is the order executed.
 */
#include "compute/kernels_internal.h"

static float scalar_dot_f32(const float *a, const float *b, int64_t n)
{
	float acc = 0.0f;
	for (int64_t i = 0; i < n; i++)
		acc += a[i] * b[i];
	return acc;
}

static void scalar_axpy_f32(float *out, float a, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		out[i] += a * x[i];
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
			float acc = 0.0f;
			for (int64_t c = 0; c < cols; c++)
				acc += bf16_to_f32(w[c]) * xt[c];
			out[t * out_stride + r] = acc;
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
			float acc = 0.0f;
			for (int64_t c = 0; c < cols; c++)
				acc += ((float)q[c] * s[c / group]) * xt[c];
			out[t * out_stride + r] = acc;
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
			float acc = 0.0f;
			for (int64_t c = 0; c < cols; c++) {
				uint8_t b = q[(c / 32) * 16 + (c % 16)];
				int nib = (c % 32) < 16 ? (b & 0xf) : (b >> 4);
				acc += ((float)(nib - 8) * s[c / group]) * xt[c];
			}
			out[t * out_stride + r] = acc;
		}
	}
}

const struct kernels_ops kernels_ops_scalar = {
	.name = "scalar",
	.rows = {
		[QUANT_F32] = scalar_rows_f32,
		[QUANT_BF16] = scalar_rows_bf16,
		[QUANT_INT8] = scalar_rows_int8,
		[QUANT_INT4] = scalar_rows_int4,
	},
	.dot_f32 = scalar_dot_f32,
	.axpy_f32 = scalar_axpy_f32,
};
