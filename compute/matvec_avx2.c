/*
 * matvec_avx2 — AVX2 + FMA kernels (8 floats per vector), compiled with the
 * baseline x86-64-v3 flags.
 *
 * Each row kernel is written once for NT tokens at a time (NT = 1 or 2, a
 * compile-time constant after inlining) so that matmul decodes a weight
 * vector once and feeds it to every token. Token t's operations do not
 * depend on NT, which keeps matmul bit-identical to matvec.
 *
 * Fixed order per token, docs/ARITHMETIC.md's dot product: the 32 lanes in
 * four accumulators, accumulator j taking inputs 32k + 8j .. 32k + 8j + 7
 * (input i in lane i mod 32) by one fused multiply-add each, a ragged tail
 * only into the lanes it has; the lanes fold as (a0 + a2) + (a1 + a3)
 * (i + 16, then i + 8), then avx2_hsum (4, 2, 1). That is the scalar
 * reference's sequence, so every level writes the same bits. Grouped
 * weights are dequantized exactly like the scalar reference, w = fl(q *
 * scale), before the multiply-add.
 *
 * The GGML block types decode each run of 32 inputs into four vectors equal
 * to quant_row_dequantize's values (the same f32 operations, in ggml's
 * order: q8_0 / q4_0 (float)q * d, q4_k / q5_k d1 * (float)q - m1, q6_k
 * (d * sc) * (float)q) and feed them to the f32 kernel's accumulators, so a
 * block-type matvec is bit-identical to this file's f32 matvec on the
 * dequantized matrix; f16 widens with F16C (exact) inside the f32 kernel's
 * loop. F16C is part of this level (cpu.c checks it with AVX2 and FMA).
 *
 * Against int8 activations (avx2_q8_row_blocks) a block pair is decoded
 * into the activations' byte order and meets them through maddubs / madd:
 * the K types' sub-block scales multiply the int16 pair sums in madd, so
 * every lane's integer is exact, and the float steps are
 * kernels_internal.h's, one per lane, as the scalar version's.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "compute/kernels_internal.h"

#define AVX2_NT 2
#define PF_AHEAD 1024 /* inputs ahead the dense kernel prefetches its weights */
#define AVX2_INLINE static inline __attribute__((always_inline))

/* Lanes 0..7 folded: i + 4, i + 2, i + 1. */
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

enum { DENSE_F32 = 0, DENSE_BF16 = 1, DENSE_F16 = 2 };

AVX2_INLINE __m256 avx2_load_half(const uint16_t *p, const int kind)
{
	if (kind == DENSE_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	return avx2_load_bf16(p);
}

AVX2_INLINE float avx2_half_to_f32(uint16_t h, const int kind)
{
	return kind == DENSE_F16 ? _cvtsh_ss(h) : bf16_to_f32(h);
}

/* One row of f32, bf16 or f16 weights (kind) against nt tokens; out[t *
 * os] receives token t. */
AVX2_INLINE void avx2_row_dense(float *out, int64_t os, const void *wv, const float *x,
				int64_t cols, const int nt, const int kind)
{
	const int is_bf16 = kind != DENSE_F32;
	const float *wf = wv;
	const uint16_t *wh = wv;
	__m256 acc[AVX2_NT][4];
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		for (int j = 0; j < 4; j++)
			acc[t][j] = _mm256_setzero_ps();
	int64_t c = 0;
	for (; c + 32 <= cols; c += 32) {
		/* The hardware prefetcher alone left bf16 rows at 65-70% of the
		 * memory bandwidth (f32 rows, twice the bytes an input, reach it). */
		_mm_prefetch(is_bf16 ? (const char *)(wh + c + PF_AHEAD) : (const char *)(wf + c + PF_AHEAD), _MM_HINT_T0);
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			__m256 w = is_bf16 ? avx2_load_half(wh + c + 8 * j, kind) : _mm256_loadu_ps(wf + c + 8 * j);
#pragma GCC unroll 2
			for (int t = 0; t < nt; t++)
				acc[t][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * cols + c + 8 * j),
							    acc[t][j]);
		}
	}
	/* Fewer than 32 inputs left: chunk j of 8 goes to accumulator j, and
	 * a lane past the end keeps its value (no 0 * 0 added, which would turn
	 * a -0 into +0). */
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		int64_t cj = c + 8 * j, len = cols - cj;
		if (len <= 0)
			break;
		if (len > 8)
			len = 8;
		float wt[8] = { 0 }, xt[8] = { 0 };
		int32_t keep[8] = { 0 };
		for (int64_t k = 0; k < len; k++) {
			wt[k] = is_bf16 ? avx2_half_to_f32(wh[cj + k], kind) : wf[cj + k];
			keep[k] = -1;
		}
		__m256 w = _mm256_loadu_ps(wt);
		__m256 sel = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)keep));
#pragma GCC unroll 2
		for (int t = 0; t < nt; t++) {
			memcpy(xt, x + t * cols + cj, (size_t)len * sizeof(float));
			__m256 f = _mm256_fmadd_ps(w, _mm256_loadu_ps(xt), acc[t][j]);
			acc[t][j] = _mm256_blendv_ps(acc[t][j], f, sel);
		}
	}
#pragma GCC unroll 2
	for (int t = 0; t < nt; t++)
		out[t * os] = avx2_hsum(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][2]),
						      _mm256_add_ps(acc[t][1], acc[t][3])));
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
		out[t * os] = avx2_hsum(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][2]),
						      _mm256_add_ps(acc[t][1], acc[t][3])));
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

/* 2 * e2m1 of each code, the integers the weights are made of. */
AVX2_INLINE __m128i avx2_e2m1_lut(void)
{
	return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
}

/* One row of mxfp4 weights against nt tokens, a block of 32 inputs per
 * step, in the order of avx2_row_grouped. A weight is (float)(2 * e2m1) *
 * 2^(e - 128): the dequantized value exactly (a zero comes out +0 where the
 * code says -0, which no sum starting at +0 can tell apart). */
AVX2_INLINE void avx2_row_mxfp4(float *out, int64_t os, const uint8_t *q, const float *x,
				int64_t cols, const int nt)
{
	const __m128i mask = _mm_set1_epi8(0x0f);
	const __m128i lut = avx2_e2m1_lut();
	const uint8_t *e = q + cols / 2;
	__m256 acc[AVX2_NT][4];
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		for (int j = 0; j < 4; j++)
			acc[t][j] = _mm256_setzero_ps();
	for (int64_t k = 0; k < cols / 32; k++) {
		__m256 sc = _mm256_set1_ps(quant_e8m0_to_f32(e[k], 1));
		__m128i b = _mm_loadu_si128((const __m128i *)(q + 16 * k));
		__m128i b0 = _mm_shuffle_epi8(lut, _mm_and_si128(b, mask));
		__m128i b1 = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), mask));
		__m256 w[4];
		w[0] = avx2_deq8(b0, sc);
		w[1] = avx2_deq8(_mm_srli_si128(b0, 8), sc);
		w[2] = avx2_deq8(b1, sc);
		w[3] = avx2_deq8(_mm_srli_si128(b1, 8), sc);
		avx2_fma4(acc, w, x, cols, 32 * k, nt);
	}
	avx2_finish(out, os, acc, nt);
}

static void avx2_rows_mxfp4(float *out, int64_t os, const struct qmatrix *m, const float *x,
			    int64_t n, int64_t row_begin, int64_t row_end)
{
	int64_t cols = m->cols, row_bytes = cols / 2 + cols / 32;
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			avx2_row_mxfp4(out + t * os + r, os, q, x + t * cols, cols, 2);
		if (t < n)
			avx2_row_mxfp4(out + t * os + r, os, q, x + t * cols, cols, 1);
	}
}

static void avx2_rows_f32(float *out, int64_t os, const struct qmatrix *m, const float *x,
			  int64_t n, int64_t row_begin, int64_t row_end)
{
	const float *w = m->data;
	int64_t cols = m->cols;
	for (int64_t r = row_begin; r < row_end; r++) {
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 2, DENSE_F32);
		if (t < n)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 1, DENSE_F32);
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
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 2, DENSE_BF16);
		if (t < n)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 1, DENSE_BF16);
	}
}

static void avx2_rows_f16(float *out, int64_t os, const struct qmatrix *m, const float *x,
			  int64_t n, int64_t row_begin, int64_t row_end)
{
	const uint16_t *w = m->data;
	int64_t cols = m->cols;
	for (int64_t r = row_begin; r < row_end; r++) {
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 2, DENSE_F16);
		if (t < n)
			avx2_row_dense(out + t * os + r, os, w + r * cols, x + t * cols, cols, 1, DENSE_F16);
	}
}

/* The little-endian half at p, exactly (F16C). */
AVX2_INLINE float avx2_half(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

/* 8 unsigned bytes (the low half of b) as floats q, y = d1 * q - m1. One
 * fused multiply-subtract gives ggml's two roundings' bits: d1 = d * sc is
 * an 11-bit half times a 6-bit integer and d1 * q (q < 32) has at most 22
 * significant bits, exact in f32, so only the subtraction rounds. */
AVX2_INLINE __m256 avx2_deq_dm(__m128i b, __m256 d1, __m256 m1)
{
	__m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
	return _mm256_fmsub_ps(d1, q, m1);
}

/* The 32 inputs whose bytes in v (unsigned, 0..31) are q: y = d1 * q - m1. */
AVX2_INLINE void avx2_deq_dm32(__m256 w[4], __m256i v, __m256 d1, __m256 m1)
{
	__m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
	w[0] = avx2_deq_dm(lo, d1, m1);
	w[1] = avx2_deq_dm(_mm_srli_si128(lo, 8), d1, m1);
	w[2] = avx2_deq_dm(hi, d1, m1);
	w[3] = avx2_deq_dm(_mm_srli_si128(hi, 8), d1, m1);
}

/* A K-quant block's eight 6-bit scales and mins (quant.h's packing) as
 * bytes 0..7 of *sc and of *mn. */
AVX2_INLINE void avx2_k_scales(__m128i *sc, __m128i *mn, const uint8_t *s)
{
	uint64_t s8, m8;
	quant_k_scales8(&s8, &m8, s);
	*sc = _mm_cvtsi64_si128((long long)s8);
	*mn = _mm_cvtsi64_si128((long long)m8);
}

/* One row of a GGML block type against nt tokens: each run of 32 inputs
 * decoded into w[4] and fed to avx2_fma4, as avx2_row_dense feeds f32
 * weights (cols % 32 == 0: no tail). */
AVX2_INLINE void avx2_row_blocks(float *out, int64_t os, const uint8_t *q, const float *x,
				 int64_t cols, const int nt, const enum quant_type type)
{
	const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
	const __m256i mask32 = _mm256_set1_epi8(0x0f);
	__m256 acc[AVX2_NT][4];
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		for (int j = 0; j < 4; j++)
			acc[t][j] = _mm256_setzero_ps();
	__m256 w[4];
	if (type == QUANT_Q8_0 || type == QUANT_Q4_0) {
		const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
		for (int64_t k = 0; k < cols / 32; k++) {
			const uint8_t *b = q + k * bs;
			__m256 d = _mm256_set1_ps(avx2_half(b));
			__m128i b0, b1;
			if (type == QUANT_Q8_0) {
				b0 = _mm_loadu_si128((const __m128i *)(b + 2));
				b1 = _mm_loadu_si128((const __m128i *)(b + 18));
			} else {
				__m128i v = _mm_loadu_si128((const __m128i *)(b + 2));
				b0 = _mm_sub_epi8(_mm_and_si128(v, mask), eight);
				b1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), mask), eight);
			}
			w[0] = avx2_deq8(b0, d);
			w[1] = avx2_deq8(_mm_srli_si128(b0, 8), d);
			w[2] = avx2_deq8(b1, d);
			w[3] = avx2_deq8(_mm_srli_si128(b1, 8), d);
			avx2_fma4(acc, w, x, cols, 32 * k, nt);
		}
	} else if (type == QUANT_Q4_K || type == QUANT_Q5_K) {
		const int is_q5 = type == QUANT_Q5_K;
		const int64_t bs = is_q5 ? QUANT_Q5_K_BYTES : QUANT_Q4_K_BYTES;
		float d1s[8], m1s[8];
		for (int64_t k = 0; k < cols / QUANT_K_BLOCK; k++) {
			const uint8_t *b = q + k * bs;
			const uint8_t *qs = b + (is_q5 ? 48 : 16);
			__m128i sc, mn;
			avx2_k_scales(&sc, &mn, b + 4);
			_mm256_storeu_ps(d1s, _mm256_mul_ps(_mm256_set1_ps(avx2_half(b)),
							     _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc))));
			_mm256_storeu_ps(m1s, _mm256_mul_ps(_mm256_set1_ps(avx2_half(b + 2)),
							     _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn))));
			__m256i qh = is_q5 ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int i = 0; i < 4; i++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));
#pragma GCC unroll 2
				for (int h = 0; h < 2; h++) {
					__m256i u = _mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, mask32);
					if (is_q5) {
						const __m256i bit = _mm256_set1_epi8((char)(1 << (2 * i + h)));
						__m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
						u = _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(16)));
					}
					avx2_deq_dm32(w, u, _mm256_broadcast_ss(d1s + 2 * i + h),
						      _mm256_broadcast_ss(m1s + 2 * i + h));
					avx2_fma4(acc, w, x, cols, k * QUANT_K_BLOCK + 64 * i + 32 * h, nt);
				}
			}
		}
	} else { /* QUANT_Q6_K */
		const __m256i three = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
		float ds[16];
		for (int64_t k = 0; k < cols / QUANT_K_BLOCK; k++) {
			const uint8_t *b = q + k * QUANT_Q6_K_BYTES;
			__m256 d = _mm256_set1_ps(avx2_half(b + 208));
			__m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
			_mm256_storeu_ps(ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
			_mm256_storeu_ps(ds + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(
								   _mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				__m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
#pragma GCC unroll 4
				for (int i = 0; i < 4; i++) {
					/* Inputs 32i .. 32i + 31 of the half: a nibble of
					 * ql[32 (i & 1) + l] (the high one for i >= 2), bits
					 * 2i, 2i + 1 of qh[l]. */
					__m256i l = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * (i & 1)));
					l = _mm256_and_si256(i >> 1 ? _mm256_srli_epi16(l, 4) : l, mask32);
					__m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), three);
					__m256i v = _mm256_sub_epi8(_mm256_or_si256(l, _mm256_slli_epi16(hi, 4)), off);
					__m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
					__m256 s0 = _mm256_broadcast_ss(ds + 8 * h + 2 * i);
					__m256 s1 = _mm256_broadcast_ss(ds + 8 * h + 2 * i + 1);
					w[0] = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v0)));
					w[1] = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(
									 _mm256_cvtepi8_epi32(_mm_srli_si128(v0, 8))));
					w[2] = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v1)));
					w[3] = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(
									 _mm256_cvtepi8_epi32(_mm_srli_si128(v1, 8))));
					avx2_fma4(acc, w, x, cols, k * QUANT_K_BLOCK + 128 * h + 32 * i, nt);
				}
			}
		}
	}
	avx2_finish(out, os, acc, nt);
}

/* The rows of a block type, two tokens at a time: one decode serves both. */
AVX2_INLINE void avx2_rows_blocks(float *out, int64_t os, const struct qmatrix *m, const float *x,
				  int64_t n, int64_t row_begin, int64_t row_end, const enum quant_type type)
{
	int64_t cols = m->cols, row_bytes = (int64_t)quant_data_bytes(type, 1, cols);
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			avx2_row_blocks(out + t * os + r, os, q, x + t * cols, cols, 2, type);
		if (t < n)
			avx2_row_blocks(out + t * os + r, os, q, x + t * cols, cols, 1, type);
	}
}

#define AVX2_ROWS_BLOCKS(name, type)                                                     \
	static void name(float *out, int64_t os, const struct qmatrix *m, const float *x, \
			 int64_t n, int64_t row_begin, int64_t row_end)                   \
	{                                                                                 \
		avx2_rows_blocks(out, os, m, x, n, row_begin, row_end, type);            \
	}
AVX2_ROWS_BLOCKS(avx2_rows_q8_0, QUANT_Q8_0)
AVX2_ROWS_BLOCKS(avx2_rows_q4_0, QUANT_Q4_0)
AVX2_ROWS_BLOCKS(avx2_rows_q4_k, QUANT_Q4_K)
AVX2_ROWS_BLOCKS(avx2_rows_q5_k, QUANT_Q5_K)
AVX2_ROWS_BLOCKS(avx2_rows_q6_k, QUANT_Q6_K)

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

/* Pair p of an int8 (is_int4 = 0) or int4 row, decoded once for every token
 * it meets. int4's 32 bytes hold the two runs' low nibbles (inputs 0..15 of
 * each) and high nibbles (16..31), the very order of a pair's activations
 * (kernels_internal.h): lo, hi are the nibbles, stored q + 8. int8 gathers
 * its two runs' halves into the same order: lo, hi are |w|, slo, shi w (for
 * the sign). last: the pair has one run only. */
struct q8_pair {
	__m256i lo, hi, slo, shi;
};

AVX2_INLINE struct q8_pair avx2_q8_decode(const uint8_t *q, int64_t p, const int is_int4, int last)
{
	struct q8_pair w;
	if (is_int4) {
		__m256i v = last ? _mm256_inserti128_si256(_mm256_setzero_si256(),
							   _mm_loadu_si128((const __m128i *)(q + 32 * p)), 0)
				 : _mm256_loadu_si256((const __m256i *)(q + 32 * p));
		const __m256i mask = _mm256_set1_epi8(0x0f);
		w.lo = _mm256_and_si256(v, mask);
		w.hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
		w.slo = w.shi = _mm256_setzero_si256();
		return w;
	}
	__m256i w0 = _mm256_loadu_si256((const __m256i *)(q + 64 * p));
	__m256i w1 = last ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(q + 64 * p + 32));
	w.slo = _mm256_permute2x128_si256(w0, w1, 0x20);
	w.shi = _mm256_permute2x128_si256(w0, w1, 0x31);
	w.lo = _mm256_sign_epi8(w.slo, w.slo);
	w.hi = _mm256_sign_epi8(w.shi, w.shi);
	return w;
}

/* The pair's exact lane sums against one token's activations xlo, xhi:
 * int4 multiplies its stored nibbles and takes off 8 * the lane's
 * activation sum, x8; int8 multiplies |w| by x with w's sign. */
AVX2_INLINE __m256i avx2_q8_dot(const struct q8_pair *w, __m256i xlo, __m256i xhi, __m256i x8,
				const int is_int4)
{
	const __m256i ones = _mm256_set1_epi16(1);
	if (is_int4) {
		__m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w->lo, xlo), _mm256_maddubs_epi16(w->hi, xhi));
		return _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), x8);
	}
	__m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(w->lo, _mm256_sign_epi8(xlo, w->slo)), ones);
	__m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(w->hi, _mm256_sign_epi8(xhi, w->shi)), ones);
	return _mm256_add_epi32(plo, phi);
}

/* Row r against tokens t .. t + nt - 1 (nt <= 4), each in the sequence
 * kernels_internal.h fixes; a pair's weights are decoded once for all nt
 * tokens (prefill), which changes nothing per token. One row at a time keeps
 * the weights one sequential stream (four rows side by side measured 15-20%
 * slower from memory: rows of 1 KiB are too short for the hardware
 * prefetcher to follow four of them), and the next row is fetched
 * meanwhile. by_group: group % 64 == 0, so cols % 64 == 0 (no lone last run)
 * and both runs of a pair share a scale; otherwise each pair looks up its
 * runs' groups. */
AVX2_INLINE void avx2_q8_row(float *out, int64_t os, const struct qmatrix *m, int64_t r,
			     const struct act_q8 *x, int64_t t, const int nt, const int is_int4,
			     const int by_group)
{
	int64_t cols = m->cols, group = m->group, n_groups = cols / group, runs = cols / 32;
	int64_t pairs = x->pairs, row_bytes = is_int4 ? cols / 2 : cols;
	int64_t pairs_per_group = group / 64;
	const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
	const float *s = m->scales + r * n_groups;
	const int8_t *xq = x->q + t * pairs * 64;
	const float *xd = x->d + t * pairs * 8;
	const int32_t *xs = x->sum8 + t * pairs * 8;
	__m256 acc[4];
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++)
		acc[j] = _mm256_setzero_ps();
	int64_t g = 0, in_group = 0; /* by_group: pair p's group, counted */
	for (int64_t p = 0; p < pairs; p++) {
		int last = !by_group && 2 * p + 1 == runs;
		if (is_int4 ? !(p & 1) : 1)
			_mm_prefetch((const char *)(q + row_bytes + (is_int4 ? 32 : 64) * p), _MM_HINT_T0);
		int64_t g0 = by_group ? g : 64 * p / group;
		int64_t g1 = by_group || last ? g0 : (64 * p + 32) / group;
		__m256 sw = by_group ? _mm256_broadcast_ss(s + g0)
				     : _mm256_set_m128(_mm_set1_ps(s[g1]), _mm_set1_ps(s[g0]));
		struct q8_pair w = avx2_q8_decode(q, p, is_int4, last);
#pragma GCC unroll 4
		for (int j = 0; j < nt; j++) {
			int64_t o = j * pairs;
			__m256i xlo = _mm256_loadu_si256((const __m256i *)(xq + 64 * (o + p)));
			__m256i xhi = _mm256_loadu_si256((const __m256i *)(xq + 64 * (o + p) + 32));
			__m256i x8 = is_int4 ? _mm256_loadu_si256((const __m256i *)(xs + 8 * (o + p)))
					     : _mm256_setzero_si256();
			__m256 dx = _mm256_loadu_ps(xd + 8 * (o + p));
			__m256i lanes = avx2_q8_dot(&w, xlo, xhi, x8, is_int4);
			acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(sw, dx), _mm256_cvtepi32_ps(lanes), acc[j]);
		}
		if (by_group && ++in_group == pairs_per_group) {
			in_group = 0;
			g++;
		}
	}
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++)
		out[j * os] = avx2_hsum(acc[j]);
}

AVX2_INLINE void avx2_rows_q8(float *out, int64_t os, const struct qmatrix *m,
			      const struct act_q8 *x, int64_t n, int64_t row_begin, int64_t row_end,
			      const int is_int4)
{
	int by_group = m->group % 64 == 0;
	for (int64_t r = row_begin; r < row_end; r++) {
		int64_t t = 0;
		if (by_group) {
			for (; t + 4 <= n; t += 4)
				avx2_q8_row(out + t * os + r, os, m, r, x, t, 4, is_int4, 1);
			for (; t < n; t++)
				avx2_q8_row(out + t * os + r, os, m, r, x, t, 1, is_int4, 1);
		} else {
			for (; t < n; t++)
				avx2_q8_row(out + t * os + r, os, m, r, x, t, 1, is_int4, 0);
		}
	}
}

void avx2_rows_q8_int8(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end)
{
	avx2_rows_q8(out, os, m, x, n, row_begin, row_end, 0);
}

void avx2_rows_q8_int4(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end)
{
	avx2_rows_q8(out, os, m, x, n, row_begin, row_end, 1);
}

/* sc[i] = 2^(e[i] - 128) for i < n, exactly quant_e8m0_to_f32(e[i], 1):
 * eight at a time, e >= 2 as the exponent field e - 1, e = 1 and 0 as the
 * subnormals 2^-127 and 2^-128. */
AVX2_INLINE void avx2_e8m0_half(float *sc, const uint8_t *e, int64_t n)
{
	const __m256i one = _mm256_set1_epi32(1), sub1 = _mm256_set1_epi32(0x00400000);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(e + i)));
		__m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, one), 23);
		__m256i tiny = _mm256_srlv_epi32(sub1, _mm256_sub_epi32(one, v));
		__m256i bits = _mm256_blendv_epi8(tiny, normal, _mm256_cmpgt_epi32(v, one));
		_mm256_storeu_ps(sc + i, _mm256_castsi256_ps(bits));
	}
	for (; i < n; i++)
		sc[i] = quant_e8m0_to_f32(e[i], 1);
}

/* Row r of an mxfp4 matrix against tokens t .. t + nt - 1 (nt <= 4), in the
 * sequence kernels_internal.h fixes: a pair's 32 code bytes become the
 * unsigned integers u = 2 * e2m1 + 12 in [0, 24] through a lookup, already
 * in the activations' order; u times x (maddubs: a lane pair's products
 * stay below 2^15 in int16, 2 * 24 * 127, two of them summed too) less 12
 * times the lane's activation sum (sum8 * 3 / 2, exact: sum8 is 8 times
 * it) is w = 2 * e2m1 times x exactly, as int4's offset of 8 is taken off,
 * with no per-token sign work. Each run has its own scale 2^(e - 128),
 * made eight at a time (avx2_e8m0_half) for up to 64 pairs ahead; a lone
 * last run's missing half meets zero activations (q and sum8 0). */
AVX2_INLINE void avx2_q8_row_mxfp4(float *out, int64_t os, const struct qmatrix *m, int64_t r,
				   const struct act_q8 *x, int64_t t, const int nt)
{
	int64_t cols = m->cols, runs = cols / 32, pairs = x->pairs, row_bytes = cols / 2 + cols / 32;
	const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
	const uint8_t *e = q + cols / 2;
	const int8_t *xq = x->q + t * pairs * 64;
	const float *xd = x->d + t * pairs * 8;
	const int32_t *xs = x->sum8 + t * pairs * 8;
	const __m256i mask = _mm256_set1_epi8(0x0f);
	const __m256i lut = _mm256_broadcastsi128_si256(
		_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
	const __m256i ones = _mm256_set1_epi16(1), halves = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
	float sc[128];
	__m256 acc[4];
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++)
		acc[j] = _mm256_setzero_ps();
	for (int64_t p = 0; p < pairs; p++) {
		int last = 2 * p + 1 == runs;
		if (!(p & 63)) {
			int64_t n = runs - 2 * p < 128 ? runs - 2 * p : 128;
			avx2_e8m0_half(sc, e + 2 * p, n);
			if (n & 1)
				sc[n] = sc[n - 1]; /* the lone last run's missing half */
		}
		if (!(p & 1))
			_mm_prefetch((const char *)(q + row_bytes + 32 * p), _MM_HINT_T0);
		__m256i v = last ? _mm256_inserti128_si256(_mm256_setzero_si256(),
							   _mm_loadu_si128((const __m128i *)(q + 32 * p)), 0)
				 : _mm256_loadu_si256((const __m256i *)(q + 32 * p));
		__m256i ulo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, mask));
		__m256i uhi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), mask));
		__m128 two = _mm_castpd_ps(_mm_load_sd((const double *)(sc + 2 * (p & 63))));
		__m256 sw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), halves);
#pragma GCC unroll 4
		for (int j = 0; j < nt; j++) {
			int64_t o = j * pairs;
			__m256i xlo = _mm256_loadu_si256((const __m256i *)(xq + 64 * (o + p)));
			__m256i xhi = _mm256_loadu_si256((const __m256i *)(xq + 64 * (o + p) + 32));
			__m256 dx = _mm256_loadu_ps(xd + 8 * (o + p));
			__m256i x8 = _mm256_loadu_si256((const __m256i *)(xs + 8 * (o + p)));
			__m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(ulo, xlo), _mm256_maddubs_epi16(uhi, xhi));
			__m256i lanes = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones),
							 _mm256_add_epi32(x8, _mm256_srai_epi32(x8, 1)));
			acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(sw, dx), _mm256_cvtepi32_ps(lanes), acc[j]);
		}
	}
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++)
		out[j * os] = avx2_hsum(acc[j]);
}

void avx2_rows_q8_mxfp4(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
			int64_t n, int64_t row_begin, int64_t row_end)
{
	for (int64_t r = row_begin; r < row_end; r++) {
		int64_t t = 0;
		for (; t + 4 <= n; t += 4)
			avx2_q8_row_mxfp4(out + t * os + r, os, m, r, x, t, 4);
		for (; t < n; t++)
			avx2_q8_row_mxfp4(out + t * os + r, os, m, r, x, t, 1);
	}
}

/* Pair p of a GGML block row (runs 2p, 2p + 1), decoded once for every
 * token it meets, in the activations' order (kernels_internal.h): lo the
 * weights of inputs 0..15 of both runs, hi of 16..31 (unsigned for q4_0,
 * q4_k, q5_k; |q| for q8_0, q6_k, with slo, shi q for the sign). sc16 are
 * the int16 multipliers of each lane's sums (q4_k / q5_k sc_j, q6_k the
 * lo and hi sub-blocks' scales in sc16 and sch16), mn16 the mins (low
 * int16 of each lane), fd and fm the lanes' d and dmin. */
struct q8_block_pair {
	__m256i lo, hi, slo, shi, sc16, sch16, mn16;
	__m256 fd, fm;
};

/* A q8_0 / q4_0 pair: blocks 2p, 2p + 1 (none for a lone last run). */
AVX2_INLINE struct q8_block_pair avx2_q8_decode_32(const uint8_t *row, int64_t p, int last,
						   const enum quant_type type)
{
	const __m256i mask = _mm256_set1_epi8(0x0f);
	const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
	const uint8_t *b0 = row + 2 * p * bs, *b1 = b0 + bs;
	struct q8_block_pair w = { 0 };
	float d0 = avx2_half(b0), d1 = last ? 0.0f : avx2_half(b1);
	w.fd = _mm256_set_m128(_mm_set1_ps(d1), _mm_set1_ps(d0));
	if (type == QUANT_Q8_0) {
		__m128i l1 = last ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)(b1 + 2));
		__m128i h1 = last ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)(b1 + 18));
		w.slo = _mm256_set_m128i(l1, _mm_loadu_si128((const __m128i *)(b0 + 2)));
		w.shi = _mm256_set_m128i(h1, _mm_loadu_si128((const __m128i *)(b0 + 18)));
		w.lo = _mm256_sign_epi8(w.slo, w.slo);
		w.hi = _mm256_sign_epi8(w.shi, w.shi);
	} else {
		__m128i v1 = last ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)(b1 + 2));
		__m256i v = _mm256_set_m128i(v1, _mm_loadu_si128((const __m128i *)(b0 + 2)));
		w.lo = _mm256_and_si256(v, mask);
		w.hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
	}
	return w;
}

/* The int16 words w0 (lanes 0..3) and w1 (lanes 4..7) of v's low 128
 * bits (high: hi), each in both halves of a 32-bit lane, or (zero_hi) in
 * its low half with 0 above. */
AVX2_INLINE __m256i avx2_words(__m256i v, const int hi, const int w0, const int w1, const int zero_hi)
{
	const char z = zero_hi ? (char)0x80 : 0;
	const char a0 = (char)(2 * w0), a1 = (char)(2 * w0 + 1), b0 = (char)(2 * w1), b1 = (char)(2 * w1 + 1);
	const char c0 = zero_hi ? z : a0, c1 = zero_hi ? z : a1, d0 = zero_hi ? z : b0, d1 = zero_hi ? z : b1;
	const __m256i idx = _mm256_setr_epi8(a0, a1, c0, c1, a0, a1, c0, c1, a0, a1, c0, c1, a0, a1, c0, c1,
					     b0, b1, d0, d1, b0, b1, d0, d1, b0, b1, d0, d1, b0, b1, d0, d1);
	/* Two literal immediates: an unoptimized build (asan) does not fold hi. */
	__m256i h = hi ? _mm256_permute2x128_si256(v, v, 0x11) : _mm256_permute2x128_si256(v, v, 0x00);
	return _mm256_shuffle_epi8(h, idx);
}

/* Pair pp (0..3) of a K block b; ks the block's scales as int16 (q4_k /
 * q5_k: sc_0..7 then m_0..7; q6_k: its sixteen), fd / fm its d / dmin. */
AVX2_INLINE struct q8_block_pair avx2_q8_decode_k(const uint8_t *b, const int pp, __m256i ks,
						  __m256 fd, __m256 fm, const enum quant_type type)
{
	const __m256i mask = _mm256_set1_epi8(0x0f);
	struct q8_block_pair w = { 0 };
	w.fd = fd;
	w.fm = fm;
	if (type == QUANT_Q6_K) {
		const int hf = pp / 2, sh = 4 * (pp % 2); /* the half; nibble and qh shift */
		const uint8_t *ql = b + 64 * hf, *qh = b + 128 + 32 * hf;
		__m256i q0 = _mm256_loadu_si256((const __m256i *)ql);
		__m256i q1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
		__m256i h = _mm256_loadu_si256((const __m256i *)qh);
		__m256i lo = _mm256_permute2x128_si256(q0, q1, 0x20), hi = _mm256_permute2x128_si256(q0, q1, 0x31);
		lo = _mm256_and_si256(_mm256_srli_epi16(lo, sh), mask);
		hi = _mm256_and_si256(_mm256_srli_epi16(hi, sh), mask);
		const __m256i shv = _mm256_setr_epi32(sh, sh, sh, sh, sh + 2, sh + 2, sh + 2, sh + 2);
		const __m256i three = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
		__m256i hl = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permute2x128_si256(h, h, 0x00), shv), three);
		__m256i hh = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permute2x128_si256(h, h, 0x11), shv), three);
		w.slo = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hl, 4)), off);
		w.shi = _mm256_sub_epi8(_mm256_or_si256(hi, _mm256_slli_epi16(hh, 4)), off);
		w.lo = _mm256_sign_epi8(w.slo, w.slo);
		w.hi = _mm256_sign_epi8(w.shi, w.shi);
		const int i = 4 * (pp % 2);
		w.sc16 = avx2_words(ks, pp / 2, i, i + 2, 0);
		w.sch16 = avx2_words(ks, pp / 2, i + 1, i + 3, 0);
		return w;
	}
	const int is_q5 = type == QUANT_Q5_K;
	__m256i v = _mm256_loadu_si256((const __m256i *)(b + (is_q5 ? 48 : 16) + 32 * pp));
	__m256i nl = _mm256_and_si256(v, mask), nh = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
	w.lo = _mm256_permute2x128_si256(nl, nh, 0x20);
	w.hi = _mm256_permute2x128_si256(nl, nh, 0x31);
	if (is_q5) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(b + 16));
		const __m256i bit = _mm256_set_m128i(_mm_set1_epi8((char)(2 << (2 * pp))),
						     _mm_set1_epi8((char)(1 << (2 * pp))));
		const __m256i sixteen = _mm256_set1_epi8(16);
		__m256i hl = _mm256_permute2x128_si256(h, h, 0x00), hh = _mm256_permute2x128_si256(h, h, 0x11);
		w.lo = _mm256_or_si256(w.lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hl, bit), bit),
							      sixteen));
		w.hi = _mm256_or_si256(w.hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hh, bit), bit),
							      sixteen));
	}
	w.sc16 = avx2_words(ks, 0, 2 * pp, 2 * pp + 1, 0);
	w.mn16 = avx2_words(ks, 1, 2 * pp, 2 * pp + 1, 1);
	return w;
}

/* Pair p's contribution to nt tokens' accumulators (token j's activations
 * at pair j * pairs + p). */
AVX2_INLINE void avx2_q8_block_tokens(__m256 acc[4], const struct q8_block_pair *w, const int8_t *xq,
				      const float *xd, const int32_t *xs, int64_t pairs, int64_t p,
				      const int nt, const enum quant_type type)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const int has_min = type == QUANT_Q4_K || type == QUANT_Q5_K;
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++) {
		int64_t o = j * pairs;
		__m256i xlo = _mm256_loadu_si256((const __m256i *)(xq + 64 * (o + p)));
		__m256i xhi = _mm256_loadu_si256((const __m256i *)(xq + 64 * (o + p) + 32));
		__m256 dx = _mm256_loadu_ps(xd + 8 * (o + p));
		__m256i lanes;
		if (type == QUANT_Q8_0) {
			__m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(w->lo, _mm256_sign_epi8(xlo, w->slo)), ones);
			__m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(w->hi, _mm256_sign_epi8(xhi, w->shi)), ones);
			lanes = _mm256_add_epi32(plo, phi);
		} else if (type == QUANT_Q4_0) {
			__m256i x8 = _mm256_loadu_si256((const __m256i *)(xs + 8 * (o + p)));
			__m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w->lo, xlo), _mm256_maddubs_epi16(w->hi, xhi));
			lanes = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), x8);
		} else if (type == QUANT_Q6_K) {
			__m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(w->lo, _mm256_sign_epi8(xlo, w->slo)),
							w->sc16);
			__m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(w->hi, _mm256_sign_epi8(xhi, w->shi)),
							w->sch16);
			lanes = _mm256_add_epi32(plo, phi);
		} else {
			/* Four products of at most 31 * 127 per int16: no saturation. */
			__m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w->lo, xlo), _mm256_maddubs_epi16(w->hi, xhi));
			lanes = _mm256_madd_epi16(s16, w->sc16);
		}
		acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(w->fd, dx), _mm256_cvtepi32_ps(lanes), acc[j]);
		if (has_min) {
			__m256i x8 = _mm256_loadu_si256((const __m256i *)(xs + 8 * (o + p)));
			__m256i mins = _mm256_madd_epi16(_mm256_srai_epi32(x8, 3), w->mn16);
			acc[j] = _mm256_fnmadd_ps(_mm256_mul_ps(w->fm, dx), _mm256_cvtepi32_ps(mins), acc[j]);
		}
	}
}

/* Row r of a GGML block matrix against tokens t .. t + nt - 1 (nt <= 4),
 * in kernels_internal.h's sequence for its type. The K types take their
 * scales a block at a time and its four pairs unrolled. */
AVX2_INLINE void avx2_q8_row_blocks(float *out, int64_t os, const struct qmatrix *m, int64_t r,
				    const struct act_q8 *x, int64_t t, const int nt,
				    const enum quant_type type)
{
	int64_t cols = m->cols, runs = cols / 32, pairs = x->pairs;
	int64_t row_bytes = (int64_t)quant_data_bytes(type, 1, cols);
	const uint8_t *row = (const uint8_t *)m->data + r * row_bytes;
	const int8_t *xq = x->q + t * pairs * 64;
	const float *xd = x->d + t * pairs * 8;
	const int32_t *xs = x->sum8 + t * pairs * 8;
	__m256 acc[4];
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++)
		acc[j] = _mm256_setzero_ps();
	if (type == QUANT_Q8_0 || type == QUANT_Q4_0) {
		const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
		for (int64_t p = 0; p < pairs; p++) {
			_mm_prefetch((const char *)(row + row_bytes + 2 * p * bs), _MM_HINT_T0);
			struct q8_block_pair w = avx2_q8_decode_32(row, p, 2 * p + 1 == runs, type);
			avx2_q8_block_tokens(acc, &w, xq, xd, xs, pairs, p, nt, type);
		}
	} else {
		const int64_t bs = type == QUANT_Q6_K ? QUANT_Q6_K_BYTES
				   : type == QUANT_Q5_K ? QUANT_Q5_K_BYTES : QUANT_Q4_K_BYTES;
		__m256i ks;
		for (int64_t k = 0; k < cols / QUANT_K_BLOCK; k++) {
			const uint8_t *b = row + k * bs;
			for (int64_t o = 0; o < bs; o += 64)
				_mm_prefetch((const char *)(b + row_bytes + o), _MM_HINT_T0);
			__m256 fd, fm = _mm256_setzero_ps();
			if (type == QUANT_Q6_K) {
				ks = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
				fd = _mm256_set1_ps(avx2_half(b + 208));
			} else {
				__m128i sc, mn;
				avx2_k_scales(&sc, &mn, b + 4);
				ks = _mm256_cvtepu8_epi16(_mm_unpacklo_epi64(sc, mn));
				fd = _mm256_set1_ps(avx2_half(b));
				fm = _mm256_set1_ps(avx2_half(b + 2));
			}
#pragma GCC unroll 4
			for (int pp = 0; pp < 4; pp++) {
				struct q8_block_pair w = avx2_q8_decode_k(b, pp, ks, fd, fm, type);
				avx2_q8_block_tokens(acc, &w, xq, xd, xs, pairs, 4 * k + pp, nt, type);
			}
		}
	}
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++)
		out[j * os] = avx2_hsum(acc[j]);
}

AVX2_INLINE void avx2_rows_q8_blocks(float *out, int64_t os, const struct qmatrix *m,
				     const struct act_q8 *x, int64_t n, int64_t row_begin, int64_t row_end,
				     const enum quant_type type)
{
	for (int64_t r = row_begin; r < row_end; r++) {
		int64_t t = 0;
		for (; t + 4 <= n; t += 4)
			avx2_q8_row_blocks(out + t * os + r, os, m, r, x, t, 4, type);
		for (; t < n; t++)
			avx2_q8_row_blocks(out + t * os + r, os, m, r, x, t, 1, type);
	}
}

#define AVX2_ROWS_Q8_BLOCKS(name, type)                                                           \
	void name(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n, \
		  int64_t row_begin, int64_t row_end)                                              \
	{                                                                                          \
		avx2_rows_q8_blocks(out, os, m, x, n, row_begin, row_end, type);                  \
	}
AVX2_ROWS_Q8_BLOCKS(avx2_rows_q8_q8_0, QUANT_Q8_0)
AVX2_ROWS_Q8_BLOCKS(avx2_rows_q8_q4_0, QUANT_Q4_0)
AVX2_ROWS_Q8_BLOCKS(avx2_rows_q8_q4_k, QUANT_Q4_K)
AVX2_ROWS_Q8_BLOCKS(avx2_rows_q8_q5_k, QUANT_Q5_K)
AVX2_ROWS_Q8_BLOCKS(avx2_rows_q8_q6_k, QUANT_Q6_K)

/* Loads a run of 32 inputs into v and returns the bits of max|x| (as
 * integers, the order of non-negative floats; 0x7f800000 and above: an
 * infinity or a NaN). */
AVX2_INLINE uint32_t avx2_run_amax_bits(__m256 v[4], const float *x)
{
	const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
	__m256i m = _mm256_setzero_si256();
	for (int j = 0; j < 4; j++) {
		v[j] = _mm256_loadu_ps(x + 8 * j);
		m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(v[j]), abs_mask));
	}
	__m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
	h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4e));
	h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xb1));
	return (uint32_t)_mm_cvtsi128_si32(h);
}

/* Row r of an int8 matrix against token t's int16 activations, in the
 * sequence kernels_internal.h fixes for kernel_rows_q16_fn. */
AVX2_INLINE void avx2_q16_row1(float *out, const struct qmatrix *m, int64_t r, const struct act_q16 *x,
			       int64_t t)
{
	int64_t cols = m->cols, group = m->group, n_groups = cols / group, runs = cols / 32;
	int64_t runs_per_group = group / 32;
	const int8_t *q = (const int8_t *)m->data + r * cols;
	const float *s = m->scales + r * n_groups;
	const int16_t *xq = x->q + t * cols;
	const float *xd = x->d + t * runs;
	__m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
	int64_t g = 0, in_group = 0;
	for (int64_t k = 0; k < runs; k += 2) {
		_mm_prefetch((const char *)(q + cols + 32 * k), _MM_HINT_T0);
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			if (h == 1 && k + 1 == runs)
				break;
			int64_t c = 32 * (k + h);
			__m256i wlo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + c)));
			__m256i whi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + c + 16)));
			__m256i p = _mm256_add_epi32(
				_mm256_madd_epi16(wlo, _mm256_loadu_si256((const __m256i *)(xq + c))),
				_mm256_madd_epi16(whi, _mm256_loadu_si256((const __m256i *)(xq + c + 16))));
			__m256 d = _mm256_mul_ps(_mm256_broadcast_ss(s + g), _mm256_broadcast_ss(xd + k + h));
			acc[h] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[h]);
			if (++in_group == runs_per_group) {
				in_group = 0;
				g++;
			}
		}
	}
	*out = avx2_hsum(_mm256_add_ps(acc[0], acc[1]));
}

/* The same against tokens t .. t + nt - 1 (nt <= 4), a run's weights widened
 * once for all of them (prefill); the same sequence per token. (One token
 * takes avx2_q16_row1: this loop measured 40% slower at nt = 1.) */
AVX2_INLINE void avx2_q16_row(float *out, int64_t os, const struct qmatrix *m, int64_t r,
			      const struct act_q16 *x, int64_t t, const int nt)
{
	int64_t cols = m->cols, group = m->group, n_groups = cols / group, runs = cols / 32;
	int64_t runs_per_group = group / 32;
	const int8_t *q = (const int8_t *)m->data + r * cols;
	const float *s = m->scales + r * n_groups;
	const int16_t *xq = x->q + t * cols;
	const float *xd = x->d + t * runs;
	__m256 acc[4][2];
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++)
		acc[j][0] = acc[j][1] = _mm256_setzero_ps();
	int64_t g = 0, in_group = 0;
	for (int64_t k = 0; k < runs; k += 2) {
		_mm_prefetch((const char *)(q + cols + 32 * k), _MM_HINT_T0);
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			if (h == 1 && k + 1 == runs)
				break;
			int64_t c = 32 * (k + h);
			__m256i wlo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + c)));
			__m256i whi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + c + 16)));
			__m256 sw = _mm256_broadcast_ss(s + g);
#pragma GCC unroll 4
			for (int j = 0; j < nt; j++) {
				const int16_t *xj = xq + j * cols + c;
				__m256i p = _mm256_add_epi32(_mm256_madd_epi16(wlo, _mm256_loadu_si256((const __m256i *)xj)),
							     _mm256_madd_epi16(whi,
									       _mm256_loadu_si256((const __m256i *)(xj + 16))));
				__m256 d = _mm256_mul_ps(sw, _mm256_broadcast_ss(xd + j * runs + k + h));
				acc[j][h] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[j][h]);
			}
			if (++in_group == runs_per_group) {
				in_group = 0;
				g++;
			}
		}
	}
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++)
		out[j * os] = avx2_hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
}

void avx2_rows_q16_int8(float *out, int64_t os, const struct qmatrix *m, const struct act_q16 *x,
			int64_t n, int64_t row_begin, int64_t row_end)
{
	for (int64_t r = row_begin; r < row_end; r++) {
		int64_t t = 0;
		for (; t + 4 <= n; t += 4)
			avx2_q16_row(out + t * os + r, os, m, r, x, t, 4);
		for (; t < n; t++)
			avx2_q16_row1(out + t * os + r, m, r, x, t);
	}
}

float avx2_act_q16_run(int16_t *q, const float *x)
{
	__m256 v[4];
	uint32_t amax_bits = avx2_run_amax_bits(v, x);
	if (amax_bits >= 0x7f800000u || amax_bits == 0) {
		_mm256_storeu_si256((__m256i *)q, _mm256_setzero_si256());
		_mm256_storeu_si256((__m256i *)(q + 16), _mm256_setzero_si256());
		return amax_bits ? NAN : 0.0f;
	}
	float amax;
	memcpy(&amax, &amax_bits, 4);
	__m256 inv = _mm256_set1_ps(32767.0f / amax);
	for (int j = 0; j < 2; j++) {
		__m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(v[2 * j], inv));
		__m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(v[2 * j + 1], inv));
		/* packs works per 128-bit half: a0-3 b0-3 | a4-7 b4-7; restore order. */
		__m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
		_mm256_storeu_si256((__m256i *)(q + 16 * j), p);
	}
	return amax / 32767.0f;
}

float avx2_act_q8_run(int8_t *lo, int8_t *hi, const float *x)
{
	__m256 v[4];
	uint32_t amax_bits = avx2_run_amax_bits(v, x);
	if (amax_bits >= 0x7f800000u || amax_bits == 0) { /* an infinity or a NaN; all zero */
		_mm_storeu_si128((__m128i *)lo, _mm_setzero_si128());
		_mm_storeu_si128((__m128i *)hi, _mm_setzero_si128());
		return amax_bits ? NAN : 0.0f;
	}
	float amax;
	memcpy(&amax, &amax_bits, 4);
	__m256 inv = _mm256_set1_ps(127.0f / amax);
	__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], inv));
	__m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], inv));
	__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], inv));
	__m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], inv));
	/* The packs work per 128-bit half: bytes come out as 0-3 8-11 16-19
	 * 24-27 | 4-7 12-15 20-23 28-31 in dwords; one permute restores order. */
	__m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
	b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm_storeu_si128((__m128i *)lo, _mm256_castsi256_si128(b));
	_mm_storeu_si128((__m128i *)hi, _mm256_extracti128_si256(b, 1));
	return amax / 127.0f;
}

static float avx2_dot_f32(const float *a, const float *b, int64_t n)
{
	float out;
	avx2_row_dense(&out, 0, a, b, n, 1, DENSE_F32);
	return out;
}

/* out[i] = fma(a, x[i], out[i]), as every level. */
static void avx2_axpy_f32(float *out, float a, const float *x, int64_t n)
{
	__m256 av = _mm256_set1_ps(a);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
							  _mm256_loadu_ps(out + i)));
	for (; i < n; i++)
		out[i] = fmaf(a, x[i], out[i]);
}

const struct kernels_ops kernels_ops_avx2 = {
	.name = "avx2",
	.rows = {
		[QUANT_F32] = avx2_rows_f32,
		[QUANT_BF16] = avx2_rows_bf16,
		[QUANT_INT8] = avx2_rows_int8,
		[QUANT_INT4] = avx2_rows_int4,
		[QUANT_MXFP4] = avx2_rows_mxfp4,
		[QUANT_F16] = avx2_rows_f16,
		[QUANT_Q8_0] = avx2_rows_q8_0,
		[QUANT_Q4_0] = avx2_rows_q4_0,
		[QUANT_Q4_K] = avx2_rows_q4_k,
		[QUANT_Q5_K] = avx2_rows_q5_k,
		[QUANT_Q6_K] = avx2_rows_q6_k,
	},
	.rows_q8 = {
		[QUANT_INT8] = avx2_rows_q8_int8,
		[QUANT_INT4] = avx2_rows_q8_int4,
		[QUANT_MXFP4] = avx2_rows_q8_mxfp4,
		[QUANT_Q8_0] = avx2_rows_q8_q8_0,
		[QUANT_Q4_0] = avx2_rows_q8_q4_0,
		[QUANT_Q4_K] = avx2_rows_q8_q4_k,
		[QUANT_Q5_K] = avx2_rows_q8_q5_k,
		[QUANT_Q6_K] = avx2_rows_q8_q6_k,
	},
	.act_q8_run = avx2_act_q8_run,
	.rows_q16 = avx2_rows_q16_int8,
	.act_q16_run = avx2_act_q16_run,
	.dot_f32 = avx2_dot_f32,
	.axpy_f32 = avx2_axpy_f32,
};
