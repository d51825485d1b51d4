/*
 * matvec_avx512 — AVX-512 F/BW/VL/DQ kernels (16 floats per vector). This
 * file alone is compiled with AVX-512 flags; nothing in it runs unless
 * cpu_simd_level() chose CPU_SIMD_AVX512.
 *
 * Each kernel computes a block of NR rows x NT tokens (1 or 2 each, constants
 * after inlining): a decoded weight vector feeds every token and an
 * activation vector every row, which halves the traffic of both in matmul.
 * Every (row, token) pair owns the 32 lanes of docs/ARITHMETIC.md's dot
 * product in two registers: accumulator j % 2 takes the inputs 64k + 16j ..
 * 64k + 16j + 15 (input i in lane i mod 32), one fused multiply-add each,
 * and the lanes fold as acc0 + acc1 (i + 16), then avx512_hsum (8, 4, 2,
 * 1). That is the scalar reference's sequence, so every level writes the
 * same bits; none of it depends on NR, NT or the neighbours in the block,
 * so matmul equals matvec bit for bit. Ragged f32/bf16 tails add only the
 * lanes they have (mask3 fmadd leaves the others untouched); grouped rows
 * are multiples of 32 inputs and need no tail.
 *
 * Grouped weights are dequantized exactly like the scalar reference,
 * w = fl(q * scale) (mxfp4: e2m1 * 2^(e - 127)), then multiplied-added in
 * f32.
 *
 * f16 goes through the dense kernel (vcvtph2ps, exact). The GGML block
 * types decode into vectors equal to quant_row_dequantize's values and
 * feed them to the dense kernel's accumulators in its order (lone tail
 * included), so their matvec is bit-identical to this file's f32 matvec on
 * the dequantized matrix (avx512_row_blocks).
 *
 * Against int8 / int16 activations (int8, int4, mxfp4 and the GGML block
 * types) the table takes matvec_avx2's kernels: AVX-512BW runs them on
 * 256-bit registers, and the sequence of kernels_internal.h is the same
 * at every level anyway.
 */
#include <immintrin.h>
#include <string.h>

#include "compute/kernels_internal.h"

#define NR_MAX 2
#define NT_MAX 2
#define BT_MAX 4 /* tokens per decode of a block-type row */
#define PF_AHEAD 1024 /* inputs ahead the dense kernel prefetches its weights */
#define AVX512_INLINE static inline __attribute__((always_inline))

AVX512_INLINE float avx512_hsum(__m512 v)
{
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

AVX512_INLINE void avx512_zero(__m512 acc[NR_MAX][NT_MAX][2], const int nr, const int nt)
{
#pragma GCC unroll 16
	for (int i = 0; i < nr; i++)
		for (int t = 0; t < nt; t++)
			for (int j = 0; j < 2; j++)
				acc[i][t][j] = _mm512_setzero_ps();
}

AVX512_INLINE void avx512_finish(float *out, int64_t os, __m512 acc[NR_MAX][NT_MAX][2],
				 const int nr, const int nt)
{
#pragma GCC unroll 4
	for (int i = 0; i < nr; i++)
		for (int t = 0; t < nt; t++)
			out[t * os + i] = avx512_hsum(_mm512_add_ps(acc[i][t][0], acc[i][t][1]));
}

/* acc[i][t][(j0 + j) % 2] += w[j] * x_t[c + 16 j] for j < nw, in order of j;
 * c + 16 * j0 is a multiple of 32 (input c + 16 j sits in lane (j0 + j) % 2 *
 * 16 onwards). */
AVX512_INLINE void avx512_fma(__m512 acc[NR_MAX][NT_MAX][2], const int i, const __m512 *w,
			      const int j0, const int nw, const float *x, int64_t cols, int64_t c,
			      const int nt)
{
#pragma GCC unroll 4
	for (int j = 0; j < nw; j++)
#pragma GCC unroll 2
		for (int t = 0; t < nt; t++)
			acc[i][t][(j0 + j) & 1] = _mm512_fmadd_ps(
				w[j], _mm512_loadu_ps(x + t * cols + c + 16 * j), acc[i][t][(j0 + j) & 1]);
}

enum { DENSE_F32 = 0, DENSE_BF16 = 1, DENSE_F16 = 2 };

AVX512_INLINE __m512 avx512_load_dense(const void *w, int64_t c, __mmask16 k, const int kind)
{
	if (kind == DENSE_F16)
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)w + c));
	if (kind == DENSE_BF16) {
		__m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)w + c);
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	}
	return _mm512_maskz_loadu_ps(k, (const float *)w + c);
}

/* Rows r .. r+nr-1 of an f32, bf16 or f16 matrix (kind) against nt tokens. */
AVX512_INLINE void avx512_block_dense(float *out, int64_t os, const struct qmatrix *m, int64_t r,
				      const float *x, const int nr, const int nt, const int kind)
{
	const int is_bf16 = kind != DENSE_F32;
	int64_t cols = m->cols;
	const char *w = (const char *)m->data + r * cols * (is_bf16 ? 2 : 4);
	int64_t w_stride = cols * (is_bf16 ? 2 : 4);
	__m512 acc[NR_MAX][NT_MAX][2];
	avx512_zero(acc, nr, nt);
	int64_t c = 0;
	for (; c + 64 <= cols; c += 64) {
#pragma GCC unroll 2
		for (int i = 0; i < nr; i++) {
			__m512 wv[4];
			_mm_prefetch(w + i * w_stride + (c + PF_AHEAD) * (is_bf16 ? 2 : 4), _MM_HINT_T0);
			if (is_bf16)
				_mm_prefetch(w + i * w_stride + (c + PF_AHEAD) * 2 + 64, _MM_HINT_T0);
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++)
				wv[j] = avx512_load_dense(w + i * w_stride, c + 16 * j, 0xffff, kind);
			avx512_fma(acc, i, wv, 0, 4, x, cols, c, nt);
		}
	}
	/* At most four chunks of 16 are left; chunk j goes to accumulator j % 2
	 * (a constant index, so acc stays in registers). */
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		int64_t cj = c + 16 * j;
		if (cj >= cols)
			break;
		__mmask16 k = cols - cj >= 16 ? 0xffff : (__mmask16)((1u << (cols - cj)) - 1);
#pragma GCC unroll 2
		for (int i = 0; i < nr; i++) {
			__m512 wv = avx512_load_dense(w + i * w_stride, cj, k, kind);
#pragma GCC unroll 2
			for (int t = 0; t < nt; t++)
				acc[i][t][j & 1] = _mm512_mask3_fmadd_ps(
					wv, _mm512_maskz_loadu_ps(k, x + t * cols + cj), acc[i][t][j & 1], k);
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
	__m512 acc[NR_MAX][NT_MAX][2];
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
 * the dequantized weights with their -0), as avx512_int4_run reads it, and
 * feeds accumulators 0, 1 (inputs 32k .. 32k + 15, 32k + 16 .. 32k + 31),
 * so the result is the f32 kernel's on the dequantized weights. */
AVX512_INLINE void avx512_block_mxfp4(float *out, int64_t os, const struct qmatrix *m, int64_t r,
				      const float *x, const int nr, const int nt)
{
	const __m512 levels = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
					     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
	int64_t cols = m->cols, row_bytes = cols / 2 + cols / 32, blocks = cols / 32;
	const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
	__m512 acc[NR_MAX][NT_MAX][2];
	avx512_zero(acc, nr, nt);
	for (int64_t k = 0; k < blocks; k++) {
#pragma GCC unroll 2
		for (int i = 0; i < nr; i++) {
			const uint8_t *qi = q + i * row_bytes;
			__m512 tab = _mm512_mul_ps(levels, _mm512_set1_ps(quant_e8m0_to_f32(qi[cols / 2 + k], 0)));
			__m512 w[2];
			avx512_int4_run(w, qi + 16 * k, tab);
			avx512_fma(acc, i, w, 0, 2, x, cols, 32 * k, nt);
		}
	}
	avx512_finish(out, os, acc, nr, nt);
}

/* acc[t][j % 2] += w * x_t[c], one vector for nt tokens; c is 16 j modulo
 * 32. */
AVX512_INLINE void avx512_fma1(__m512 acc[BT_MAX][2], __m512 w, const int j, const float *x,
			       int64_t cols, int64_t c, const int nt)
{
#pragma GCC unroll 4
	for (int t = 0; t < nt; t++)
		acc[t][j & 1] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + t * cols + c), acc[t][j & 1]);
}

/* The little-endian half at p, exactly. */
AVX512_INLINE float avx512_half(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

/* The 32 weights of a q8_0 or q4_0 block b into w[2]: (float)q * d, for
 * q4_0 through the lookup tab[n] = (float)(n - 8) * d. */
AVX512_INLINE void avx512_block32(__m512 *w, const uint8_t *b, const enum quant_type type)
{
	__m512 d = _mm512_set1_ps(avx512_half(b));
	if (type == QUANT_Q8_0) {
		w[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)))),
				     d);
		w[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)))),
				     d);
	} else {
		const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
		avx512_int4_run(w, b + 2, _mm512_mul_ps(levels, d));
	}
}

/* A K-quant block's d * sc and dmin * m for its eight sub-blocks (quant.h's
 * packing of the 6-bit scales and mins), into d1[8] and m1[8]. */
AVX512_INLINE void avx512_k_scales(float *d1, float *m1, const uint8_t *b)
{
	uint64_t s8, m8;
	quant_k_scales8(&s8, &m8, b + 4);
	__m128i sc = _mm_cvtsi64_si128((long long)s8), mn = _mm_cvtsi64_si128((long long)m8);
	_mm256_storeu_ps(d1, _mm256_mul_ps(_mm256_set1_ps(avx512_half(b)),
					   _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc))));
	_mm256_storeu_ps(m1, _mm256_mul_ps(_mm256_set1_ps(avx512_half(b + 2)),
					   _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn))));
}

/* One row of a GGML block type against nt tokens (nt <= BT_MAX), in
 * avx512_block_dense's order: inputs 32k + 16j .. + 15 go to accumulator
 * j. Weights are the
 * values of quant_row_dequantize: q4_0 and the K-quants of 4 and 5 bits
 * through lookups made per block or sub-block with the same f32 operations
 * (tab[n] = (float)(n - 8) * d; d1 * (float)n - m1), read as
 * avx512_int4_run reads them (vpermt2ps takes five index bits for q5_k);
 * q8_0 and q6_k widen and multiply. */
AVX512_INLINE void avx512_row_blocks(float *out, int64_t os, const uint8_t *q, const float *x,
				     int64_t cols, const int nt, const enum quant_type type)
{
	const __m512 levels = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const __m512 sixteen = _mm512_set1_ps(16.0f);
	const __m256i mask32 = _mm256_set1_epi8(0x0f);
	__m512 acc[BT_MAX][2];
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		for (int j = 0; j < 2; j++)
			acc[t][j] = _mm512_setzero_ps();
	if (type == QUANT_Q8_0 || type == QUANT_Q4_0) {
		/* Blocks in pairs, so that every accumulator index is a constant
		 * (a variable one would keep acc in memory). */
		const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
		const int64_t blocks = cols / 32;
		int64_t k = 0;
		__m512 w[4];
		for (; k + 2 <= blocks; k += 2) {
			avx512_block32(w, q + k * bs, type);
			avx512_block32(w + 2, q + (k + 1) * bs, type);
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++)
				avx512_fma1(acc, w[j], j, x, cols, 32 * k + 16 * j, nt);
		}
		if (k < blocks) {
			avx512_block32(w, q + k * bs, type);
			avx512_fma1(acc, w[0], 0, x, cols, 32 * k, nt);
			avx512_fma1(acc, w[1], 1, x, cols, 32 * k + 16, nt);
		}
	} else if (type == QUANT_Q4_K || type == QUANT_Q5_K) {
		const int is_q5 = type == QUANT_Q5_K;
		const int64_t bs = is_q5 ? QUANT_Q5_K_BYTES : QUANT_Q4_K_BYTES;
		float d1[8], m1[8];
		for (int64_t k = 0; k < cols / QUANT_K_BLOCK; k++) {
			const uint8_t *b = q + k * bs;
			const uint8_t *qs = b + (is_q5 ? 48 : 16);
			avx512_k_scales(d1, m1, b);
			__m256i qh = is_q5 ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int i = 0; i < 4; i++) {
				int64_t c = k * QUANT_K_BLOCK + 64 * i;
				__m512 w[4];
				if (is_q5) {
					__m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));
#pragma GCC unroll 2
					for (int h = 0; h < 2; h++) {
						__m512 sd = _mm512_set1_ps(d1[2 * i + h]), sm = _mm512_set1_ps(m1[2 * i + h]);
						__m512 lo = _mm512_sub_ps(_mm512_mul_ps(sd, levels), sm);
						__m512 hi = _mm512_sub_ps(_mm512_mul_ps(sd, _mm512_add_ps(levels, sixteen)), sm);
						const __m256i bit = _mm256_set1_epi8((char)(1 << (2 * i + h)));
						__m256i u = _mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, mask32);
						__m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
						u = _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(16)));
						__m512i i0 = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(u));
						__m512i i1 = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(u, 1));
						w[2 * h] = _mm512_permutex2var_ps(lo, i0, hi);
						w[2 * h + 1] = _mm512_permutex2var_ps(lo, i1, hi);
					}
				} else {
					__m512 ta = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d1[2 * i]), levels),
								  _mm512_set1_ps(m1[2 * i]));
					__m512 tb = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d1[2 * i + 1]), levels),
								  _mm512_set1_ps(m1[2 * i + 1]));
					__m512i b0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 32 * i)));
					__m512i b1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 32 * i + 16)));
					w[0] = _mm512_permutexvar_ps(b0, ta);
					w[1] = _mm512_permutexvar_ps(b1, ta);
					w[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(b0, 4), tb);
					w[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(b1, 4), tb);
				}
#pragma GCC unroll 4
				for (int j = 0; j < 4; j++)
					avx512_fma1(acc, w[j], j, x, cols, c + 16 * j, nt);
			}
		}
	} else { /* QUANT_Q6_K */
		const __m256i three = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
		float ds[16];
		for (int64_t k = 0; k < cols / QUANT_K_BLOCK; k++) {
			const uint8_t *b = q + k * QUANT_Q6_K_BYTES;
			__m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192))));
			_mm512_storeu_ps(ds, _mm512_mul_ps(_mm512_set1_ps(avx512_half(b + 208)), sc));
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				__m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
#pragma GCC unroll 4
				for (int i = 0; i < 4; i++) {
					/* As the AVX2 kernel: inputs 32i .. 32i + 31 of the half. */
					__m256i l = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * (i & 1)));
					l = _mm256_and_si256(i >> 1 ? _mm256_srli_epi16(l, 4) : l, mask32);
					__m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), three);
					__m256i v = _mm256_sub_epi8(_mm256_or_si256(l, _mm256_slli_epi16(hb, 4)), off);
					__m512 w0 = _mm512_mul_ps(_mm512_set1_ps(ds[8 * h + 2 * i]),
								  _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v))));
					__m512 w1 = _mm512_mul_ps(_mm512_set1_ps(ds[8 * h + 2 * i + 1]),
								  _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
									  _mm256_extracti128_si256(v, 1))));
					int64_t c = k * QUANT_K_BLOCK + 128 * h + 32 * i;
					const int j0 = (i & 1) * 2;
					avx512_fma1(acc, w0, j0, x, cols, c, nt);
					avx512_fma1(acc, w1, j0 + 1, x, cols, c + 16, nt);
				}
			}
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < nt; t++)
		out[t * os] = avx512_hsum(_mm512_add_ps(acc[t][0], acc[t][1]));
}

/* The rows of a block type, one at a time (one weight stream), up to four
 * tokens per decode. */
AVX512_INLINE void avx512_rows_blocks(float *out, int64_t os, const struct qmatrix *m, const float *x,
				      int64_t n, int64_t row_begin, int64_t row_end,
				      const enum quant_type type)
{
	int64_t cols = m->cols, row_bytes = (int64_t)quant_data_bytes(type, 1, cols);
	for (int64_t r = row_begin; r < row_end; r++) {
		const uint8_t *q = (const uint8_t *)m->data + r * row_bytes;
		int64_t t = 0;
		for (; t + 4 <= n; t += 4)
			avx512_row_blocks(out + t * os + r, os, q, x + t * cols, cols, 4, type);
		switch (n - t) {
		case 3:
			avx512_row_blocks(out + t * os + r, os, q, x + t * cols, cols, 3, type);
			break;
		case 2:
			avx512_row_blocks(out + t * os + r, os, q, x + t * cols, cols, 2, type);
			break;
		case 1:
			avx512_row_blocks(out + t * os + r, os, q, x + t * cols, cols, 1, type);
			break;
		}
	}
}

#define AVX512_ROWS_BLOCKS(name, type)                                                   \
	static void name(float *out, int64_t os, const struct qmatrix *m, const float *x, \
			 int64_t n, int64_t row_begin, int64_t row_end)                   \
	{                                                                                 \
		avx512_rows_blocks(out, os, m, x, n, row_begin, row_end, type);          \
	}
AVX512_ROWS_BLOCKS(avx512_rows_q8_0, QUANT_Q8_0)
AVX512_ROWS_BLOCKS(avx512_rows_q4_0, QUANT_Q4_0)
AVX512_ROWS_BLOCKS(avx512_rows_q4_k, QUANT_Q4_K)
AVX512_ROWS_BLOCKS(avx512_rows_q5_k, QUANT_Q5_K)
AVX512_ROWS_BLOCKS(avx512_rows_q6_k, QUANT_Q6_K)

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

#define DENSE(nr, nt) avx512_block_dense(out + t * os + r, os, m, r, x + t * m->cols, nr, nt, DENSE_KIND)
#define MXFP4(nr, nt) avx512_block_mxfp4(out + t * os + r, os, m, r, x + t * m->cols, nr, nt)
#define GROUPED(nr, nt) avx512_block_grouped(out + t * os + r, os, m, r, x + t * m->cols, GROUP, \
					    nr, nt, IS_INT4)

static void avx512_rows_f32(float *out, int64_t os, const struct qmatrix *m, const float *x,
			    int64_t n, int64_t row_begin, int64_t row_end)
{
#define DENSE_KIND DENSE_F32
	AVX512_BLOCKS(DENSE)
#undef DENSE_KIND
}

static void avx512_rows_bf16(float *out, int64_t os, const struct qmatrix *m, const float *x,
			     int64_t n, int64_t row_begin, int64_t row_end)
{
#define DENSE_KIND DENSE_BF16
	AVX512_BLOCKS(DENSE)
#undef DENSE_KIND
}

static void avx512_rows_f16(float *out, int64_t os, const struct qmatrix *m, const float *x,
			    int64_t n, int64_t row_begin, int64_t row_end)
{
#define DENSE_KIND DENSE_F16
	AVX512_BLOCKS(DENSE)
#undef DENSE_KIND
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
	avx512_block_dense(&out, 1, &m, 0, b, 1, 1, DENSE_F32);
	return out;
}

/* out[i] = fma(a, x[i], out[i]), as every level. */
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
		[QUANT_F16] = avx512_rows_f16,
		[QUANT_Q8_0] = avx512_rows_q8_0,
		[QUANT_Q4_0] = avx512_rows_q4_0,
		[QUANT_Q4_K] = avx512_rows_q4_k,
		[QUANT_Q5_K] = avx512_rows_q5_k,
		[QUANT_Q6_K] = avx512_rows_q6_k,
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
	.dot_f32 = avx512_dot_f32,
	.axpy_f32 = avx512_axpy_f32,
};
