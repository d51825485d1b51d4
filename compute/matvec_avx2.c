/*
 * matvec_avx2 — AVX2 + FMA kernels (8 floats per vector), compiled with the
 * baseline x86-64-v3 flags.
 *
 * Each row kernel is written once for NT tokens at a time (NT = 1 or 2, a
 * compile-time constant after inlining) so that matmul decodes a weight
 * vector once and feeds it to every token. Token t's operations do not
 * depend on NT, which keeps matmul bit-identical to matvec.
 *
 * Fixed order per token: four accumulators, accumulator j taking inputs
 * 32k + 8j .. 32k + 8j + 7, combined as (a0 + a1) + (a2 + a3), then a fixed
 * horizontal sum, then any scalar tail in input order. Grouped weights are
 * dequantized exactly like the scalar reference, w = fl(q * scale), before
 * the multiply-add.
 */
#include <immintrin.h>

#include "compute/kernels_internal.h"

#define AVX2_NT 2
#define AVX2_INLINE static inline __attribute__((always_inline))

AVX2_INLINE float avx2_hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

AVX2_INLINE __m256 avx2_load_bf16(const uint16_t *p)
{
	__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* One row of f32 (is_bf16 = 0) or bf16 (is_bf16 = 1) weights against nt
 * tokens; out[t * os] receives token t. */
AVX2_INLINE void avx2_row_dense(float *out, int64_t os, const void *wv, const float *x,
				int64_t cols, const int nt, const int is_bf16)
{
	const float *wf = wv;
	const uint16_t *wh = wv;
	__m256 acc[AVX2_NT][4];
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		for (int j = 0; j < 4; j++)
			acc[t][j] = _mm256_setzero_ps();
	int64_t c = 0;
	for (; c + 32 <= cols; c += 32) {
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			__m256 w = is_bf16 ? avx2_load_bf16(wh + c + 8 * j) : _mm256_loadu_ps(wf + c + 8 * j);
#pragma GCC unroll 2
			for (int t = 0; t < nt; t++)
				acc[t][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * cols + c + 8 * j),
							    acc[t][j]);
		}
	}
	for (; c + 8 <= cols; c += 8) {
		__m256 w = is_bf16 ? avx2_load_bf16(wh + c) : _mm256_loadu_ps(wf + c);
#pragma GCC unroll 2
		for (int t = 0; t < nt; t++)
			acc[t][0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * cols + c), acc[t][0]);
	}
#pragma GCC unroll 2
	for (int t = 0; t < nt; t++) {
		__m256 v = _mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]),
					 _mm256_add_ps(acc[t][2], acc[t][3]));
		float s = avx2_hsum(v);
		for (int64_t k = c; k < cols; k++)
			s += (is_bf16 ? bf16_to_f32(wh[k]) : wf[k]) * x[t * cols + k];
		out[t * os] = s;
	}
}

/* acc[t][j] += w[j] * x_t[c + 8 j], then the row's result per token. */
AVX2_INLINE void avx2_fma4(__m256 acc[AVX2_NT][4], const __m256 *w, const float *x,
			   int64_t cols, int64_t c, const int nt)
{
#pragma GCC unroll 2
	for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++)
			acc[t][j] = _mm256_fmadd_ps(w[j], _mm256_loadu_ps(x + t * cols + c + 8 * j),
						    acc[t][j]);
}

AVX2_INLINE void avx2_finish(float *out, int64_t os, __m256 acc[AVX2_NT][4], const int nt)
{
#pragma GCC unroll 2
	for (int t = 0; t < nt; t++)
		out[t * os] = avx2_hsum(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]),
						      _mm256_add_ps(acc[t][2], acc[t][3])));
}

/* 8 signed bytes (the low half of b) as floats times the group scale. */
AVX2_INLINE __m256 avx2_deq8(__m128i b, __m256 sc)
{
	return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), sc);
}

/* One row of grouped weights (int8 or int4) against nt tokens, 32 inputs per
 * step; groups are multiples of 32 so a step never straddles two scales. An
 * int4 run holds inputs c..c+15 in its low nibbles and c+16..c+31 in its
 * high nibbles, stored as q + 8. */
AVX2_INLINE void avx2_row_grouped(float *out, int64_t os, const uint8_t *q, const float *s,
				  const float *x, int64_t cols, int64_t group, const int nt,
				  const int is_int4)
{
	const __m128i mask = _mm_set1_epi8(0x0f);
	const __m128i eight = _mm_set1_epi8(8);
	__m256 acc[AVX2_NT][4];
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		for (int j = 0; j < 4; j++)
			acc[t][j] = _mm256_setzero_ps();
	int64_t n_groups = cols / group;
	for (int64_t g = 0; g < n_groups; g++) {
		__m256 sc = _mm256_set1_ps(s[g]);
		for (int64_t c = g * group; c < (g + 1) * group; c += 32) {
			__m128i b0, b1;
			if (is_int4) {
				__m128i b = _mm_loadu_si128((const __m128i *)(q + c / 2));
				b0 = _mm_sub_epi8(_mm_and_si128(b, mask), eight);
				b1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), mask), eight);
			} else {
				b0 = _mm_loadu_si128((const __m128i *)(q + c));
				b1 = _mm_loadu_si128((const __m128i *)(q + c + 16));
			}
			__m256 w[4];
			w[0] = avx2_deq8(b0, sc);
			w[1] = avx2_deq8(_mm_srli_si128(b0, 8), sc);
			w[2] = avx2_deq8(b1, sc);
			w[3] = avx2_deq8(_mm_srli_si128(b1, 8), sc);
			avx2_fma4(acc, w, x, cols, c, nt);
		}
	}
	avx2_finish(out, os, acc, nt);
}

static void avx2_rows_f32(float *out, int64_t os, const struct qmatrix *m, const float *x,
			  int64_t n, int64_t row_begin, int64_t row_end)
{
	const float *w = m->data;
	int64_t cols = m->cols;
	for (int64_t r = row_begin; r < row_end; r++) {
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 2, 0);
		if (t < n)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 1, 0);
	}
}

static void avx2_rows_bf16(float *out, int64_t os, const struct qmatrix *m, const float *x,
			   int64_t n, int64_t row_begin, int64_t row_end)
{
	const uint16_t *w = m->data;
	int64_t cols = m->cols;
	for (int64_t r = row_begin; r < row_end; r++) {
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 2, 1);
		if (t < n)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 1, 1);
	}
}

static void avx2_rows_int8(float *out, int64_t os, const struct qmatrix *m, const float *x,
			   int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols, group = m->group;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * cols;
		const float *s = m->scales + r * (cols / group);
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			avx2_row_grouped(out + t * os + r, os, q, s, x + t * cols, cols, group, 2, 0);
		if (t < n)
			avx2_row_grouped(out + t * os + r, os, q, s, x + t * cols, cols, group, 1, 0);
	}
}

static void avx2_rows_int4(float *out, int64_t os, const struct qmatrix *m, const float *x,
			   int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols, group = m->group;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * cols / 2;
		const float *s = m->scales + r * (cols / group);
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			avx2_row_grouped(out + t * os + r, os, q, s, x + t * cols, cols, group, 2, 1);
		if (t < n)
			avx2_row_grouped(out + t * os + r, os, q, s, x + t * cols, cols, group, 1, 1);
	}
}

static float avx2_dot_f32(const float *a, const float *b, int64_t n)
{
	float out;
	avx2_row_dense(&out, 0, a, b, n, 1, 0);
	return out;
}

static void avx2_axpy_f32(float *out, float a, const float *x, int64_t n)
{
	__m256 av = _mm256_set1_ps(a);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
							  _mm256_loadu_ps(out + i)));
	for (; i < n; i++)
		out[i] += a * x[i];
}

const struct kernels_ops kernels_ops_avx2 = {
	.name = "avx2",
	.rows = {
		[QUANT_F32] = avx2_rows_f32,
		[QUANT_BF16] = avx2_rows_bf16,
		[QUANT_INT8] = avx2_rows_int8,
		[QUANT_INT4] = avx2_rows_int4,
	},
	.dot_f32 = avx2_dot_f32,
	.axpy_f32 = avx2_axpy_f32,
};
