/*
 * matvec_avx512 — AVX-512 F/BW/VL/DQ kernels (16 floats per vector). This
 * file alone is compiled with AVX-512 flags; nothing in it runs unless
 * cpu_simd_level() chose CPU_SIMD_AVX512.
 *
 * Each kernel computes a block of NR rows x NT tokens (1 or 2 each, constants
 * after inlining): a decoded weight vector feeds every token and an
 * activation vector every row, which halves the traffic of both in matmul.
 * Every (row, token) pair owns four accumulators; accumulator j takes the
 * inputs 64k + 16j .. 64k + 16j + 15, they are combined as (a0 + a1) +
 * (a2 + a3), then summed horizontally in a fixed order. None of that depends
 * on NR, NT or the neighbours in the block, so matmul equals matvec bit for
 * bit. Ragged f32/bf16 tails use masked loads; grouped rows are multiples of
 * 32 inputs and need no tail.
 *
 * Grouped weights are dequantized exactly like the scalar reference,
 * w = fl(q * scale) (mxfp4: e2m1 * 2^(e - 127)), then multiplied-added in
 * f32.
 */
#include <immintrin.h>

#include "compute/kernels_internal.h"

#define NR_MAX 2
#define NT_MAX 2
#define AVX512_INLINE static inline __attribute__((always_inline))

AVX512_INLINE float avx512_hsum(__m512 v)
{
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

AVX512_INLINE void avx512_zero(__m512 acc[NR_MAX][NT_MAX][4], const int nr, const int nt)
{
#pragma GCC unroll 16
	for (int i = 0; i < nr; i++)
		for (int t = 0; t < nt; t++)
			for (int j = 0; j < 4; j++)
				acc[i][t][j] = _mm512_setzero_ps();
}

AVX512_INLINE void avx512_finish(float *out, int64_t os, __m512 acc[NR_MAX][NT_MAX][4],
				 const int nr, const int nt)
{
#pragma GCC unroll 4
	for (int i = 0; i < nr; i++)
		for (int t = 0; t < nt; t++)
			out[t * os + i] = avx512_hsum(_mm512_add_ps(
				_mm512_add_ps(acc[i][t][0], acc[i][t][1]),
				_mm512_add_ps(acc[i][t][2], acc[i][t][3])));
}

/* acc[i][t][j0 + j] += w[j] * x_t[c + 16 j] for j < nw. */
AVX512_INLINE void avx512_fma(__m512 acc[NR_MAX][NT_MAX][4], const int i, const __m512 *w,
			      const int j0, const int nw, const float *x, int64_t cols, int64_t c,
			      const int nt)
{
#pragma GCC unroll 2
	for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
		for (int j = 0; j < nw; j++)
			acc[i][t][j0 + j] = _mm512_fmadd_ps(
				w[j], _mm512_loadu_ps(x + t * cols + c + 16 * j), acc[i][t][j0 + j]);
}

AVX512_INLINE __m512 avx512_load_dense(const void *w, int64_t c, __mmask16 k, const int is_bf16)
{
	if (is_bf16) {
		__m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)w + c);
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	}
	return _mm512_maskz_loadu_ps(k, (const float *)w + c);
}

/* Rows r .. r+nr-1 of an f32 or bf16 matrix against nt tokens. */
AVX512_INLINE void avx512_block_dense(float *out, int64_t os, const struct qmatrix *m, int64_t r,
				      const float *x, const int nr, const int nt, const int is_bf16)
{
	int64_t cols = m->cols;
	const char *w = (const char *)m->data + r * cols * (is_bf16 ? 2 : 4);
	int64_t w_stride = cols * (is_bf16 ? 2 : 4);
	__m512 acc[NR_MAX][NT_MAX][4];
	avx512_zero(acc, nr, nt);
	int64_t c = 0;
	for (; c + 64 <= cols; c += 64) {
#pragma GCC unroll 2
		for (int i = 0; i < nr; i++) {
			__m512 wv[4];
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++)
				wv[j] = avx512_load_dense(w + i * w_stride, c + 16 * j, 0xffff, is_bf16);
			avx512_fma(acc, i, wv, 0, 4, x, cols, c, nt);
		}
	}
	for (; c < cols; c += 16) {
		__mmask16 k = cols - c >= 16 ? 0xffff : (__mmask16)((1u << (cols - c)) - 1);
#pragma GCC unroll 2
		for (int i = 0; i < nr; i++) {
			__m512 wv = avx512_load_dense(w + i * w_stride, c, k, is_bf16);
#pragma GCC unroll 2
			for (int t = 0; t < nt; t++)
				acc[i][t][0] = _mm512_fmadd_ps(
					wv, _mm512_maskz_loadu_ps(k, x + t * cols + c), acc[i][t][0]);
		}
	}
	avx512_finish(out, os, acc, nr, nt);
}

/* 16 int8 weights times the group scale. */
AVX512_INLINE __m512 avx512_int8_deq(const uint8_t *q, __m512 sc)
{
	__m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q));
	return _mm512_mul_ps(_mm512_cvtepi32_ps(v), sc);
}

/* One 16-byte int4 run (inputs c .. c+31) through a lookup: tab holds
 * fl((n - 8) * scale) for n = 0..15, and vpermps reads only the low four
 * bits of each index lane, so the widened byte indexes its low nibble as is
 * and its high nibble after a shift by four. */
AVX512_INLINE void avx512_int4_run(__m512 *w, const uint8_t *run, __m512 tab)
{
	__m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)run));
	w[0] = _mm512_permutexvar_ps(b, tab);
	w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tab);
}

/* Rows r .. r+nr-1 of an int8 or int4 matrix against nt tokens. Callers
 * pass group as a literal for the default size so the group loop unrolls. */
AVX512_INLINE void avx512_block_grouped(float *out, int64_t os, const struct qmatrix *m,
					int64_t r, const float *x, const int64_t group,
					const int nr, const int nt, const int is_int4)
{
	const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1,
					     0, 1, 2, 3, 4, 5, 6, 7);
	int64_t cols = m->cols, n_groups = cols / group;
	int64_t q_stride = is_int4 ? cols / 2 : cols;
	const uint8_t *q = (const uint8_t *)m->data + r * q_stride;
	const float *s = m->scales + r * n_groups;
	__m512 acc[NR_MAX][NT_MAX][4];
	avx512_zero(acc, nr, nt);
	for (int64_t g = 0; g < n_groups; g++) {
		int64_t c0 = g * group;
		__m512 k[NR_MAX];
#pragma GCC unroll 2
		for (int i = 0; i < nr; i++) {
			__m512 sc = _mm512_set1_ps(s[i * n_groups + g]);
			k[i] = is_int4 ? _mm512_mul_ps(levels, sc) : sc;
		}
		int64_t c = c0;
		for (; c + 64 <= c0 + group; c += 64) {
#pragma GCC unroll 2
			for (int i = 0; i < nr; i++) {
				const uint8_t *qi = q + i * q_stride;
				__m512 w[4];
				if (is_int4) {
					avx512_int4_run(w, qi + c / 2, k[i]);
					avx512_int4_run(w + 2, qi + c / 2 + 16, k[i]);
				} else {
#pragma GCC unroll 4
					for (int j = 0; j < 4; j++)
						w[j] = avx512_int8_deq(qi + c + 16 * j, k[i]);
				}
				avx512_fma(acc, i, w, 0, 4, x, cols, c, nt);
			}
		}
		if (c < c0 + group) {
#pragma GCC unroll 2
			for (int i = 0; i < nr; i++) {
				const uint8_t *qi = q + i * q_stride;
				__m512 w[2];
				if (is_int4) {
					avx512_int4_run(w, qi + c / 2, k[i]);
				} else {
					w[0] = avx512_int8_deq(qi + c, k[i]);
					w[1] = avx512_int8_deq(qi + c + 16, k[i]);
				}
				avx512_fma(acc, i, w, 0, 2, x, cols, c, nt);
			}
		}
	}
	avx512_finish(out, os, acc, nr, nt);
}

/* Rows r .. r+nr-1 of an mxfp4 matrix against nt tokens. Each block of 32
 * inputs goes through a lookup of its own, tab = e2m1 * 2^(e - 127) (exact,
 * the dequantized weights with their -0), as avx512_int4_run reads it;
 * block 2k feeds accumulators 0, 1 and block 2k + 1 accumulators 2, 3, so
 * inputs 64k + 16j .. + 15 go to accumulator j as for the other types, and
 * a lone last block feeds 0, 1. */
AVX512_INLINE void avx512_block_mxfp4(float *out, int64_t os, const struct qmatrix *m, int64_t r,
				      const float *x, const int nr, const int nt)
{
	const __m512 levels = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
					     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
	int64_t cols = m->cols, row_bytes = cols / 2 + cols / 32, blocks = cols / 32;
	const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
	__m512 acc[NR_MAX][NT_MAX][4];
	avx512_zero(acc, nr, nt);
	for (int64_t k = 0; k < blocks; k++) {
		const int j0 = (int)(k & 1) * 2;
#pragma GCC unroll 2
		for (int i = 0; i < nr; i++) {
			const uint8_t *qi = q + i * row_bytes;
			__m512 tab = _mm512_mul_ps(levels, _mm512_set1_ps(quant_e8m0_to_f32(qi[cols / 2 + k], 0)));
			__m512 w[2];
			avx512_int4_run(w, qi + 16 * k, tab);
			avx512_fma(acc, i, w, j0, 2, x, cols, 32 * k, nt);
		}
	}
	avx512_finish(out, os, acc, nr, nt);
}

/* Walks rows [row_begin, row_end) and tokens [0, n); BLOCK(nr, nt) computes
 * the block at (r, t). A single token goes row by row, which streams one
 * weight row at a time and measured faster from DRAM; several tokens go in
 * blocks of two rows by two tokens. */
#define AVX512_BLOCKS(BLOCK)                                                       \
	if (n == 1) {                                                              \
		const int64_t t = 0;                                               \
		for (int64_t r = row_begin; r < row_end; r++)                      \
			BLOCK(1, 1);                                               \
	} else {                                                                   \
		for (int64_t r = row_begin; r < row_end; r += 2) {                 \
			for (int64_t t = 0; t < n; t += 2) {                       \
				if (row_end - r >= 2)                              \
					n - t >= 2 ? BLOCK(2, 2) : BLOCK(2, 1);    \
				else                                               \
					n - t >= 2 ? BLOCK(1, 2) : BLOCK(1, 1);    \
			}                                                          \
		}                                                                  \
	}

#define DENSE(nr, nt) avx512_block_dense(out + t * os + r, os, m, r, x + t * m->cols, nr, nt, IS_BF16)
#define MXFP4(nr, nt) avx512_block_mxfp4(out + t * os + r, os, m, r, x + t * m->cols, nr, nt)
#define GROUPED(nr, nt) avx512_block_grouped(out + t * os + r, os, m, r, x + t * m->cols, GROUP, \
					    nr, nt, IS_INT4)

static void avx512_rows_f32(float *out, int64_t os, const struct qmatrix *m, const float *x,
			    int64_t n, int64_t row_begin, int64_t row_end)
{
#define IS_BF16 0
	AVX512_BLOCKS(DENSE)
#undef IS_BF16
}

static void avx512_rows_bf16(float *out, int64_t os, const struct qmatrix *m, const float *x,
			     int64_t n, int64_t row_begin, int64_t row_end)
{
#define IS_BF16 1
	AVX512_BLOCKS(DENSE)
#undef IS_BF16
}

/* The default group of 64 gets its own fully unrolled copy of the kernel;
 * it computes exactly what the generic copy would. */
static void avx512_rows_int8(float *out, int64_t os, const struct qmatrix *m, const float *x,
			     int64_t n, int64_t row_begin, int64_t row_end)
{
#define IS_INT4 0
	if (m->group == 64) {
#define GROUP 64
		AVX512_BLOCKS(GROUPED)
#undef GROUP
	} else {
#define GROUP m->group
		AVX512_BLOCKS(GROUPED)
#undef GROUP
	}
#undef IS_INT4
}

static void avx512_rows_int4(float *out, int64_t os, const struct qmatrix *m, const float *x,
			     int64_t n, int64_t row_begin, int64_t row_end)
{
#define IS_INT4 1
	if (m->group == 64) {
#define GROUP 64
		AVX512_BLOCKS(GROUPED)
#undef GROUP
	} else {
#define GROUP m->group
		AVX512_BLOCKS(GROUPED)
#undef GROUP
	}
#undef IS_INT4
}

static void avx512_rows_mxfp4(float *out, int64_t os, const struct qmatrix *m, const float *x,
			      int64_t n, int64_t row_begin, int64_t row_end)
{
	AVX512_BLOCKS(MXFP4)
}

static float avx512_dot_f32(const float *a, const float *b, int64_t n)
{
	struct qmatrix m = { .type = QUANT_F32, .rows = 1, .cols = n, .data = a };
	float out;
	avx512_block_dense(&out, 1, &m, 0, b, 1, 1, 0);
	return out;
}

static void avx512_axpy_f32(float *out, float a, const float *x, int64_t n)
{
	__m512 av = _mm512_set1_ps(a);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 o = _mm512_maskz_loadu_ps(k, out + i);
		_mm512_mask_storeu_ps(out + i, k, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(k, x + i), o));
	}
}

const struct kernels_ops kernels_ops_avx512 = {
	.name = "avx512",
	.rows = {
		[QUANT_F32] = avx512_rows_f32,
		[QUANT_BF16] = avx512_rows_bf16,
		[QUANT_INT8] = avx512_rows_int8,
		[QUANT_INT4] = avx512_rows_int4,
		[QUANT_MXFP4] = avx512_rows_mxfp4,
	},
	.rows_q8 = {
		[QUANT_INT8] = avx2_rows_q8_int8,
		[QUANT_INT4] = avx2_rows_q8_int4,
		[QUANT_MXFP4] = avx2_rows_q8_mxfp4,
	},
	.act_q8_run = avx2_act_q8_run,
	.rows_q16 = avx2_rows_q16_int8,
	.act_q16_run = avx2_act_q16_run,
	.dot_f32 = avx512_dot_f32,
	.axpy_f32 = avx512_axpy_f32,
};
