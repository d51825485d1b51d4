/*
 * matvec_avx512vnni — the integer dot products with AVX512-VNNI (vpdpbusd /
 * vpdpwssd on 512-bit registers). Same sequences as kernels_internal.h, so
 * the same bits as every level.
 *
 * Two rows share a register: row r in the low 256 bits, row r + 1 in the
 * high 256, each half laid out as the 256-bit kernels lay one row out, and
 * a token's 256-bit activations broadcast to both halves (a broadcast load,
 * no shuffle). Every lane still belongs to one row, one token and one
 * pair, and takes that (row, token)'s own fmaf, so each row's sequence is
 * the scalar one; the two halves are summed apart at the end. A lone last
 * row fills both halves and keeps the low one.
 *
 * The integer lanes: vpdpbusd multiplies unsigned bytes by signed ones and
 * adds each group of four products into an int32 lane, the shape of a pair
 * of runs (lane l: four inputs of the low half, four of the high half).
 * Every weight enters as the unsigned u = q + o: int4 and q4_0 their stored
 * nibble (o = 8), int8 and q8_0 q ^ 0x80 (o = 128), mxfp4 2 * e2m1 + 16
 * through a lookup (o = 16); o times the lane's activation sum, o / 8 *
 * sum8, comes off. Every sum is an exact int32. int16 activations take
 * vpdpwssd on the weights widened to int16. q4_k and q5_k meet x with
 * their unsigned q as they are (the block's min is a term of its own), and
 * each lane's S times its sub-block's scale is taken as a product of floats,
 * exact below 2^24; q6_k's six stored bits are u = q + 32, each half of a
 * lane taken apart for its own sub-block scale.
 *
 * Each (row, token) is one chain of dependent multiply-adds, four cycles
 * apart, which alone would idle the units: a step handles up to Z_RP
 * registers of rows (four rows) against up to Z_NT tokens, so several
 * chains run side by side. A call's tokens go eight at a time, each group
 * over every row of the call: the group's activations (24 KiB at 2048
 * inputs) stay in L1 while the rows, which a task keeps in L2, stream
 * past, each weight decoded once for the eight; decode (one token) takes
 * four rows a step.
 */
#include <immintrin.h>
#include <string.h>

#include "compute/kernels_internal.h"

#define Z_INLINE static inline __attribute__((always_inline))
#define Z_NT 8 /* tokens of a step */
#define Z_RP 2 /* registers of two rows in a step */

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), the fixed tree. */
Z_INLINE float z_hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Four floats, each in four lanes: (row r run 2p, run 2p + 1, row r + 1
 * run 2p, run 2p + 1), a register's scales for one pair. */
Z_INLINE __m512 z_quarters(__m128 four)
{
	const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
	return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(four));
}

/* One float in the low eight lanes, another in the high eight. */
Z_INLINE __m512 z_halves(const float *a, const float *b)
{
	return _mm512_insertf32x8(_mm512_set1_ps(*a), _mm256_set1_ps(*b), 1);
}

/* Two rows' pair of weights as the unsigned bytes u that meet the
 * activations: lo inputs 0..15 of both runs, hi inputs 16..31
 * (kernels_internal.h's order), row r low, row r + 1 high. */
struct z_pair {
	__m512i lo, hi;
};

/* 32 bytes at p, or (half) 16 bytes and zeros. */
Z_INLINE __m256i z_load32(const uint8_t *p, int half)
{
	return half ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_si256((const __m256i *)p);
}

/* q8_0 / q4_0 pair p of one row: q8_0's inputs 0..15 of blocks 2p and
 * 2p + 1 in lo, 16..31 in hi; q4_0's two blocks' bytes in lo (hi unset).
 * The two-byte block headers sit between the payloads, so each 128-bit
 * half comes from its own load and a blend joins them; last: block 2p
 * alone. */
Z_INLINE void z_decode_32_row(__m256i *lo, __m256i *hi, const uint8_t *row, int64_t p, int last,
			      const enum quant_type type)
{
	const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
	const uint8_t *b0 = row + 2 * p * bs;
	if (type == QUANT_Q8_0) {
		if (last) {
			*lo = z_load32(b0 + 2, 1);
			*hi = z_load32(b0 + 18, 1);
			return;
		}
		/* b1 = b0 + 34: its bytes 0..15 are the high half of a load at
		 * b0 + 20, its bytes 16..31 that of one at b0 + 36. */
		*lo = _mm256_blend_epi32(_mm256_loadu_si256((const __m256i *)(b0 + 2)),
					 _mm256_loadu_si256((const __m256i *)(b0 + 20)), 0xf0);
		*hi = _mm256_blend_epi32(_mm256_loadu_si256((const __m256i *)(b0 + 18)),
					 _mm256_loadu_si256((const __m256i *)(b0 + 36)), 0xf0);
		return;
	}
	*lo = last ? z_load32(b0 + 2, 1)
		   : _mm256_blend_epi32(_mm256_loadu_si256((const __m256i *)(b0 + 2)),
					_mm256_loadu_si256((const __m256i *)(b0 + 4)), 0xf0);
}

/* Pair p of rows q0, q1 (q1 may be q0); last: the pair has one run only
 * (the other meets zero activations). int4 and mxfp4 store the two runs'
 * low nibbles then high nibbles, already the activations' order; int8
 * gathers its runs' halves; q4_0 holds nibbles like int4 once its blocks
 * are joined. */
Z_INLINE struct z_pair z_decode(const uint8_t *q0, const uint8_t *q1, int64_t p, int last,
				const enum quant_type type)
{
	const __m512i mask = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8((char)0x80);
	struct z_pair w;
	if (type == QUANT_INT8) {
		__mmask64 k = last ? 0xffffffffull : ~0ull;
		__m512i a = _mm512_maskz_loadu_epi8(k, q0 + 64 * p), b = _mm512_maskz_loadu_epi8(k, q1 + 64 * p);
		w.lo = _mm512_xor_si512(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0)), flip);
		w.hi = _mm512_xor_si512(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1)), flip);
		return w;
	}
	__m512i v;
	if (type == QUANT_Q8_0 || type == QUANT_Q4_0) {
		__m256i lo0, hi0, lo1, hi1;
		z_decode_32_row(&lo0, &hi0, q0, p, last, type);
		z_decode_32_row(&lo1, &hi1, q1, p, last, type);
		if (type == QUANT_Q8_0) {
			w.lo = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo0), lo1, 1), flip);
			w.hi = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(hi0), hi1, 1), flip);
			return w;
		}
		v = _mm512_inserti64x4(_mm512_castsi256_si512(lo0), lo1, 1);
	} else {
		v = _mm512_inserti64x4(_mm512_castsi256_si512(z_load32(q0 + 32 * p, last)), z_load32(q1 + 32 * p, last), 1);
	}
	w.lo = _mm512_and_si512(v, mask);
	w.hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
	if (type == QUANT_MXFP4) {
		/* 2 * e2m1 + 16 of each code: 16..28 for +0..+6, 16..4 for -0..-6. */
		const __m512i lut = _mm512_broadcast_i32x4(
			_mm_setr_epi8(16, 17, 18, 19, 20, 22, 24, 28, 16, 15, 14, 13, 12, 10, 8, 4));
		w.lo = _mm512_shuffle_epi8(lut, w.lo);
		w.hi = _mm512_shuffle_epi8(lut, w.hi);
	}
	return w;
}

/* 2^(e - 128) (quant_e8m0_to_f32(e, 1)) of the n < 16 or more scale bytes
 * at e, sixteen runs of an mxfp4 row (past n: e = 0, a finite scale that
 * meets zero activations): e >= 2 is the exponent field e - 1, e = 1 and 0
 * the subnormals 2^-127 and 2^-128. */
Z_INLINE __m512 z_e8m0_16(const uint8_t *e, int64_t n)
{
	const __m512i one = _mm512_set1_epi32(1);
	__mmask16 k = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
	__m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, e));
	__m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(v, one), 23);
	__m512i tiny = _mm512_srlv_epi32(_mm512_set1_epi32(0x00400000), _mm512_sub_epi32(one, v));
	return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(v, one), tiny, normal));
}

/* The scales of pair p for rows q0, q1 of a q8_0 / q4_0 matrix: each
 * block's d (a missing block's d is 0). */
Z_INLINE __m512 z_scales_pair(const uint8_t *q0, const uint8_t *q1, int64_t p, int last, const enum quant_type type)
{
	const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
	const uint8_t *b0 = q0 + 2 * p * bs, *b1 = q1 + 2 * p * bs;
	uint16_t h[4] = { 0, 0, 0, 0 };
	memcpy(&h[0], b0, 2);
	memcpy(&h[2], b1, 2);
	if (!last) {
		memcpy(&h[1], b0 + bs, 2);
		memcpy(&h[3], b1 + bs, 2);
	}
	uint64_t u;
	memcpy(&u, h, 8);
	return z_quarters(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)u)));
}

/* What u = q + o adds to a lane beyond q * x: o times the lane's sum of
 * eight x, from sum8 = 8 * that sum (exact shifts). */
Z_INLINE __m512i z_offset(__m512i x8, const enum quant_type type)
{
	if (type == QUANT_INT8 || type == QUANT_Q8_0)
		return _mm512_slli_epi32(x8, 4);
	if (type == QUANT_MXFP4)
		return _mm512_slli_epi32(x8, 1);
	return x8;
}

/* Row r_i of step row i: rows r .. r + 2 * rp - 1, the last one repeated
 * where the call's rows end first. */
Z_INLINE int64_t z_row(int64_t r, int i, int64_t row_end)
{
	return r + i < row_end ? r + i : row_end - 1;
}

/* Where a pair's scales come from: Z_SC_PAIR one per pair (int8 and int4
 * at group 64, s[p]; mxfp4, q8_0 and q4_0 from the pair's own bytes),
 * Z_SC_GROUP one per group of several pairs (group a multiple of 64),
 * Z_SC_RUN each run its own group's (any other group, a lookup a pair). */
enum z_scale { Z_SC_PAIR, Z_SC_GROUP, Z_SC_RUN };

/* What a step keeps: the weights and scales of its rows, its tokens'
 * activations and the accumulators, acc[i][j] for register i and token j. */
struct z_q8_step {
	const uint8_t *q[2 * Z_RP];
	const float *s[2 * Z_RP];
	const int8_t *xq;
	const float *xd;
	const int32_t *xs;
	const int32_t *neg; /* or NULL: -(o * sum8 / 8) of each token's pairs */
	int64_t pairs, cols, group, row_bytes, step;
	__m512 acc[Z_RP][Z_NT], sw[Z_RP];
	__m512 e0[Z_RP], e1[Z_RP]; /* mxfp4: 16 runs' scales of each row from run 16c */
};

/* Pair p of the step's rows against its tokens (token j's pair p at xq +
 * 64 * (j * pairs + p), its d and sum8 at 8 * (j * pairs + p)): each
 * register's weights decoded once, each token's activations loaded once,
 * and for every (row, token) the exact lanes and acc = fma(sw * d_x,
 * (float)lanes, acc). last: the pair has one run only; pre: the lanes
 * start from st->neg, else from sum8. */
Z_INLINE void z_q8_pair(struct z_q8_step *st, int64_t p, const int last, const int rp, const int nt,
			const enum quant_type type, const enum z_scale sc, const int pre)
{
	struct z_pair w[Z_RP];
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++) {
		const uint8_t *q0 = st->q[2 * i], *q1 = st->q[2 * i + 1];
		_mm_prefetch((const char *)(q0 + 2 * rp * st->row_bytes + st->step * p), _MM_HINT_T0);
		_mm_prefetch((const char *)(q1 + 2 * rp * st->row_bytes + st->step * p), _MM_HINT_T0);
		if (type == QUANT_MXFP4) {
			/* runs 2p, 2p + 1 of each row: indices 2c, 2c + 1 and 16 + 2c,
			 * 17 + 2c of e0, e1 (a lone last run's partner is the next
			 * byte's scale, finite, against zero activations) */
			const __m512i base = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 16, 16, 16, 16, 17, 17, 17, 17);
			__m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32((int)(2 * (p & 7))));
			st->sw[i] = _mm512_permutex2var_ps(st->e0[i], idx, st->e1[i]);
		} else if (type == QUANT_Q8_0 || type == QUANT_Q4_0) {
			st->sw[i] = z_scales_pair(q0, q1, p, last, type);
		} else if (sc == Z_SC_PAIR) {
			st->sw[i] = z_halves(st->s[2 * i] + p, st->s[2 * i + 1] + p);
		} else if (sc == Z_SC_RUN) {
			int64_t g0 = 64 * p / st->group, g1 = last ? g0 : (64 * p + 32) / st->group;
			const float *s0 = st->s[2 * i], *s1 = st->s[2 * i + 1];
			st->sw[i] = z_quarters(_mm_setr_ps(s0[g0], s0[g1], s1[g0], s1[g1]));
		}
		w[i] = z_decode(q0, q1, p, last, type);
	}
#pragma GCC unroll 8
	for (int j = 0; j < nt; j++) {
		int64_t o = j * st->pairs + p;
		__m512i neg;
		if (pre) {
			neg = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->neg + 8 * o)));
		} else {
			__m512i x8 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->xs + 8 * o)));
			neg = _mm512_sub_epi32(_mm512_setzero_si512(), z_offset(x8, type));
		}
		__m512i xlo = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->xq + 64 * o)));
		__m512i xhi = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->xq + 64 * o + 32)));
		__m512 dx = _mm512_broadcast_f32x8(_mm256_loadu_ps(st->xd + 8 * o));
#pragma GCC unroll 4
		for (int i = 0; i < rp; i++) {
			__m512i lanes = _mm512_dpbusd_epi32(neg, w[i].lo, xlo);
			lanes = _mm512_dpbusd_epi32(lanes, w[i].hi, xhi);
			st->acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(st->sw[i], dx), _mm512_cvtepi32_ps(lanes),
							st->acc[i][j]);
		}
	}
}

/* Rows r .. min(r + 2 * rp, row_end) - 1 of an int8, int4, mxfp4, q8_0 or
 * q4_0 matrix against tokens t .. t + nt - 1, pair after pair (a lone last
 * run, cols % 64 == 32, comes last on its own), then each (row, token)'s
 * final sum. */
Z_INLINE void z_q8_block(float *out, int64_t os, const struct qmatrix *m, int64_t r, int64_t row_end,
			 const int rp, const struct act_q8 *x, int64_t t, const int nt, const int32_t *neg,
			 const enum quant_type type, const enum z_scale sc)
{
	const int is_mxfp4 = type == QUANT_MXFP4, is_32 = type == QUANT_Q8_0 || type == QUANT_Q4_0;
	const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
	int64_t cols = m->cols, runs = cols / 32;
	struct z_q8_step st;
	st.cols = cols;
	st.pairs = x->pairs;
	st.group = is_mxfp4 || is_32 ? 32 : m->group;
	st.row_bytes = type == QUANT_INT8 ? cols : is_mxfp4 ? cols / 2 + cols / 32 : is_32 ? runs * bs : cols / 2;
	st.step = type == QUANT_INT8 ? 64 : is_32 ? 2 * bs : 32;
	int64_t n_groups = cols / st.group;
#pragma GCC unroll 4
	for (int i = 0; i < 2 * rp; i++) {
		int64_t ri = z_row(r, i, row_end);
		st.q[i] = (const uint8_t *)m->data + ri * st.row_bytes;
		st.s[i] = is_mxfp4 || is_32 ? NULL : m->scales + ri * n_groups;
	}
	st.xq = x->q + t * st.pairs * 64;
	st.xd = x->d + t * st.pairs * 8;
	st.xs = x->sum8 + t * st.pairs * 8;
	st.neg = neg;
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
		for (int j = 0; j < nt; j++)
			st.acc[i][j] = _mm512_setzero_ps();
	int64_t full = runs / 2;
	if (sc == Z_SC_GROUP) {
		int64_t ppg = st.group / 64;
		for (int64_t p0 = 0, g = 0; p0 < full; p0 += ppg, g++) {
#pragma GCC unroll 4
			for (int i = 0; i < rp; i++)
				st.sw[i] = z_halves(st.s[2 * i] + g, st.s[2 * i + 1] + g);
			for (int64_t p = p0; p < p0 + ppg; p++)
				z_q8_pair(&st, p, 0, rp, nt, type, sc, neg != NULL);
		}
	} else if (is_mxfp4) {
		/* The scales of eight pairs at a time, made in vectors; a lone
		 * last run finds its own among the last eight's, or makes it. */
#pragma GCC unroll 4
		for (int i = 0; i < rp; i++)
			st.e0[i] = st.e1[i] = _mm512_setzero_ps();
		for (int64_t p0 = 0; p0 < full; p0 += 8) {
#pragma GCC unroll 4
			for (int i = 0; i < rp; i++) {
				st.e0[i] = z_e8m0_16(st.q[2 * i] + cols / 2 + 2 * p0, runs - 2 * p0);
				st.e1[i] = z_e8m0_16(st.q[2 * i + 1] + cols / 2 + 2 * p0, runs - 2 * p0);
			}
			int64_t p1 = p0 + 8 < full ? p0 + 8 : full;
			for (int64_t p = p0; p < p1; p++)
				z_q8_pair(&st, p, 0, rp, nt, type, sc, neg != NULL);
		}
		if (runs & 1) {
			if (full % 8 == 0)
#pragma GCC unroll 4
				for (int i = 0; i < rp; i++) {
					st.e0[i] = z_e8m0_16(st.q[2 * i] + cols / 2 + 2 * full, 1);
					st.e1[i] = z_e8m0_16(st.q[2 * i + 1] + cols / 2 + 2 * full, 1);
				}
			z_q8_pair(&st, full, 1, rp, nt, type, sc, neg != NULL);
		}
	} else {
		for (int64_t p = 0; p < full; p++)
			z_q8_pair(&st, p, 0, rp, nt, type, sc, neg != NULL);
		if (runs & 1)
			z_q8_pair(&st, full, 1, rp, nt, type, sc, neg != NULL);
	}
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
		for (int j = 0; j < nt; j++) {
			out[j * os + 2 * i] = z_hsum(_mm512_castps512_ps256(st.acc[i][j]));
			if (r + 2 * i + 1 < row_end)
				out[j * os + 2 * i + 1] = z_hsum(_mm512_extractf32x8_ps(st.acc[i][j], 1));
		}
}

/* -(o * sum8 / 8) of tokens t .. t + nt - 1, what every row's lanes of
 * those tokens start from: neg[8 * (j * pairs + p) + l]. */
Z_INLINE void z_neg_fill(int32_t *neg, const struct act_q8 *x, int64_t t, int64_t nt, const enum quant_type type)
{
	const int32_t *xs = x->sum8 + t * x->pairs * 8;
	for (int64_t i = 0; i < nt * x->pairs; i++) {
		__m512i x8 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(xs + 8 * i)));
		__m512i v = _mm512_sub_epi32(_mm512_setzero_si512(), z_offset(x8, type));
		_mm256_storeu_si256((__m256i *)(neg + 8 * i), _mm512_castsi512_si256(v));
	}
}

/* Tokens eight at a time (then four), each group over every row of the
 * call, four rows a step (two for four tokens); the rest one token at a
 * time, four rows a step. Each group's offsets are negated once, into a buffer of Z_NEG
 * int32s (32 KiB) on the stack, rather than once per row (int8 and mxfp4
 * prefill measured 15% and 11% faster); eight tokens fit up to 8192 inputs,
 * four up to 16384, one up to 65536, and beyond that each row negates its
 * own. */
#define Z_NEG (8 * 8 * 128)
Z_INLINE void z_rows_q8(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			int64_t row_begin, int64_t row_end, const enum quant_type type, const enum z_scale sc)
{
	int32_t neg[Z_NEG];
	int64_t t = 0, lanes = 8 * x->pairs;
	for (; t + 8 <= n && 8 * lanes <= Z_NEG; t += 8) {
		z_neg_fill(neg, x, t, 8, type);
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			z_q8_block(out + t * os + r, os, m, r, row_end, 2, x, t, 8, neg, type, sc);
		for (; r < row_end; r += 2)
			z_q8_block(out + t * os + r, os, m, r, row_end, 1, x, t, 8, neg, type, sc);
	}
	for (; t + 4 <= n && 4 * lanes <= Z_NEG; t += 4) {
		z_neg_fill(neg, x, t, 4, type);
		for (int64_t r = row_begin; r < row_end; r += 2)
			z_q8_block(out + t * os + r, os, m, r, row_end, 1, x, t, 4, neg, type, sc);
	}
	for (; t < n && lanes <= Z_NEG; t++) {
		z_neg_fill(neg, x, t, 1, type);
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			z_q8_block(out + t * os + r, os, m, r, row_end, 2, x, t, 1, neg, type, sc);
		for (; r < row_end; r += 2)
			z_q8_block(out + t * os + r, os, m, r, row_end, 1, x, t, 1, neg, type, sc);
	}
	for (; t < n; t++)
		for (int64_t r = row_begin; r < row_end; r += 2)
			z_q8_block(out + t * os + r, os, m, r, row_end, 1, x, t, 1, NULL, type, sc);
}

/* int8 and int4: the scale mode their group allows. */
Z_INLINE void z_rows_q8_grouped(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
				int64_t n, int64_t row_begin, int64_t row_end, const enum quant_type type)
{
	if (m->group == 64)
		z_rows_q8(out, os, m, x, n, row_begin, row_end, type, Z_SC_PAIR);
	else if (m->group % 64 == 0)
		z_rows_q8(out, os, m, x, n, row_begin, row_end, type, Z_SC_GROUP);
	else
		z_rows_q8(out, os, m, x, n, row_begin, row_end, type, Z_SC_RUN);
}

static void z_rows_q8_int8(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			   int64_t row_begin, int64_t row_end)
{
	z_rows_q8_grouped(out, os, m, x, n, row_begin, row_end, QUANT_INT8);
}

static void z_rows_q8_int4(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			   int64_t row_begin, int64_t row_end)
{
	z_rows_q8_grouped(out, os, m, x, n, row_begin, row_end, QUANT_INT4);
}

static void z_rows_q8_mxfp4(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			    int64_t row_begin, int64_t row_end)
{
	z_rows_q8(out, os, m, x, n, row_begin, row_end, QUANT_MXFP4, Z_SC_PAIR);
}

static void z_rows_q8_q8_0(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			   int64_t row_begin, int64_t row_end)
{
	z_rows_q8(out, os, m, x, n, row_begin, row_end, QUANT_Q8_0, Z_SC_PAIR);
}

static void z_rows_q8_q4_0(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			   int64_t row_begin, int64_t row_end)
{
	z_rows_q8(out, os, m, x, n, row_begin, row_end, QUANT_Q4_0, Z_SC_PAIR);
}

/* What a q16 step keeps, as struct z_q8_step. */
struct z_q16_step {
	const int8_t *q[2 * Z_RP];
	const float *s[2 * Z_RP];
	const int16_t *xq;
	const float *xd;
	int64_t cols, runs;
	__m512 acc[Z_RP][Z_NT][2], sw[Z_RP];
};

/* Run k of the step's rows (weights widened to int16: lo inputs 0..15 of
 * both rows, hi 16..31) against its tokens (the token's halves broadcast),
 * into accumulator k % 2 = h. */
Z_INLINE void z_q16_run(struct z_q16_step *st, int64_t k, const int h, const int rp, const int nt)
{
	__m512i wlo[Z_RP], whi[Z_RP];
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++) {
		const int8_t *q0 = st->q[2 * i] + 32 * k, *q1 = st->q[2 * i + 1] + 32 * k;
		if (!h) {
			_mm_prefetch((const char *)(q0 + 2 * rp * st->cols), _MM_HINT_T0);
			_mm_prefetch((const char *)(q1 + 2 * rp * st->cols), _MM_HINT_T0);
		}
		__m512i a = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)q0));
		__m512i b = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)q1));
		wlo[i] = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0));
		whi[i] = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 2, 3, 2));
	}
#pragma GCC unroll 8
	for (int j = 0; j < nt; j++) {
		const int16_t *xj = st->xq + j * st->cols + 32 * k;
		__m512i xlo = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)xj));
		__m512i xhi = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xj + 16)));
		__m512 dx = _mm512_set1_ps(st->xd[j * st->runs + k]);
#pragma GCC unroll 4
		for (int i = 0; i < rp; i++) {
			__m512i lanes = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wlo[i], xlo);
			lanes = _mm512_dpwssd_epi32(lanes, whi[i], xhi);
			st->acc[i][j][h] = _mm512_fmadd_ps(_mm512_mul_ps(st->sw[i], dx), _mm512_cvtepi32_ps(lanes),
							   st->acc[i][j][h]);
		}
	}
}

/* Rows r .. min(r + 2 * rp, row_end) - 1 of an int8 matrix against tokens
 * t .. t + nt - 1's int16 activations, in kernels_internal.h's sequence for
 * kernel_rows_q16_fn: run k's lanes into accumulator k % 2, two runs a
 * step. rpg: runs a scale lasts (group / 32), 2 at the default group. */
Z_INLINE void z_q16_block(float *out, int64_t os, const struct qmatrix *m, int64_t r, int64_t row_end,
			  const int rp, const struct act_q16 *x, int64_t t, const int nt, const int rpg2)
{
	int64_t cols = m->cols, group = m->group, runs = cols / 32, n_groups = cols / group;
	int64_t rpg = group / 32;
	struct z_q16_step st;
	st.cols = cols;
	st.runs = runs;
#pragma GCC unroll 4
	for (int i = 0; i < 2 * rp; i++) {
		int64_t ri = z_row(r, i, row_end);
		st.q[i] = (const int8_t *)m->data + ri * cols;
		st.s[i] = m->scales + ri * n_groups;
	}
	st.xq = x->q + t * cols;
	st.xd = x->d + t * runs;
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
		for (int j = 0; j < nt; j++)
			st.acc[i][j][0] = st.acc[i][j][1] = _mm512_setzero_ps();
	int64_t g = 0, in_group = 0; /* run k's group, counted (but for rpg2) */
	for (int64_t k = 0; k < runs; k += 2) {
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			if (h == 1 && k + 1 == runs)
				break;
			if (rpg2 ? h == 0 : in_group == 0)
#pragma GCC unroll 4
				for (int i = 0; i < rp; i++)
					st.sw[i] = z_halves(st.s[2 * i] + (rpg2 ? k / 2 : g), st.s[2 * i + 1] + (rpg2 ? k / 2 : g));
			if (!rpg2 && ++in_group == rpg) {
				in_group = 0;
				g++;
			}
			z_q16_run(&st, k + h, h, rp, nt);
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
		for (int j = 0; j < nt; j++) {
			__m512 a = _mm512_add_ps(st.acc[i][j][0], st.acc[i][j][1]);
			out[j * os + 2 * i] = z_hsum(_mm512_castps512_ps256(a));
			if (r + 2 * i + 1 < row_end)
				out[j * os + 2 * i + 1] = z_hsum(_mm512_extractf32x8_ps(a, 1));
		}
}

/* As z_rows_q8: eight tokens (then four) against four rows a step (eight
 * tokens' int16 activations of a long row miss L1, and two registers of
 * rows halve what each load feeds: 49 -> 57 Gw/s at 32 tokens), one token
 * against four rows. */
Z_INLINE void z_rows_q16(float *out, int64_t os, const struct qmatrix *m, const struct act_q16 *x, int64_t n,
			 int64_t row_begin, int64_t row_end, const int rpg2)
{
	int64_t t = 0;
	for (; t + 8 <= n; t += 8) {
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			z_q16_block(out + t * os + r, os, m, r, row_end, 2, x, t, 8, rpg2);
		for (; r < row_end; r += 2)
			z_q16_block(out + t * os + r, os, m, r, row_end, 1, x, t, 8, rpg2);
	}
	for (; t + 4 <= n; t += 4)
		for (int64_t r = row_begin; r < row_end; r += 2)
			z_q16_block(out + t * os + r, os, m, r, row_end, 1, x, t, 4, rpg2);
	for (; t < n; t++) {
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			z_q16_block(out + t * os + r, os, m, r, row_end, 2, x, t, 1, rpg2);
		for (; r < row_end; r += 2)
			z_q16_block(out + t * os + r, os, m, r, row_end, 1, x, t, 1, rpg2);
	}
}

static void z_rows_q16_int8(float *out, int64_t os, const struct qmatrix *m, const struct act_q16 *x, int64_t n,
			    int64_t row_begin, int64_t row_end)
{
	if (m->group == 64)
		z_rows_q16(out, os, m, x, n, row_begin, row_end, 1);
	else
		z_rows_q16(out, os, m, x, n, row_begin, row_end, 0);
}

/* Sixteen bytes (row r's eight, then row r + 1's) as floats. */
Z_INLINE __m512 z_bytes_ps(uint64_t a, uint64_t b)
{
	__m128i v = _mm_unpacklo_epi64(_mm_cvtsi64_si128((long long)a), _mm_cvtsi64_si128((long long)b));
	return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
}

/* The halves at p and q as floats, p's in the low eight lanes. */
Z_INLINE __m512 z_halves_f16(const uint8_t *p, const uint8_t *q)
{
	uint16_t a, b;
	memcpy(&a, p, 2);
	memcpy(&b, q, 2);
	__m512 v = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)a | (uint32_t)b << 16))));
	return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), v);
}

/* What a q4_k / q5_k step keeps: its rows, its tokens' activations and
 * their sums as floats (sumf[8 * (j * pairs + p) + l] = sum8 / 8), the
 * current block's d, dmin, scales and mins (row r low, r + 1 high), and
 * the accumulators. */
struct z_k_step {
	const uint8_t *q[2 * Z_RP];
	const int8_t *xq;
	const float *xd;
	const float *sumf;
	int64_t pairs, row_bytes;
	__m512 fd[Z_RP], fm[Z_RP], sc[Z_RP], mn[Z_RP];
	__m512i qh[Z_RP];
	__m512 acc[Z_RP][Z_NT];
};

/* Pair pp of block k (pair p = 4k + pp) of the step's rows against its
 * tokens, in kernels_internal.h's sequence for the K types: the run's
 * unsigned q (0..15, 0..31 with q5_k's fifth bit) against x, S exact, then
 * acc = fma(d * d_x, (float)(sc_j * S), acc) and acc = fma(-(dmin * d_x),
 * (float)(m_j * sum8 / 8), acc). sc_j * S and m_j * sum8 / 8 are integers
 * below 2^24, so the products of their factors as floats are those
 * integers exactly. */
Z_INLINE void z_k_pair(struct z_k_step *st, int64_t k, const int pp, const int rp, const int nt,
		       const enum quant_type type)
{
	const int is_q5 = type == QUANT_Q5_K;
	const int64_t bs = is_q5 ? QUANT_Q5_K_BYTES : QUANT_Q4_K_BYTES;
	const __m512i mask = _mm512_set1_epi8(0x0f);
	const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
	const __m512i hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
	const __m512i q_idx = _mm512_setr_epi32(2 * pp, 2 * pp, 2 * pp, 2 * pp, 2 * pp + 1, 2 * pp + 1, 2 * pp + 1,
						2 * pp + 1, 8 + 2 * pp, 8 + 2 * pp, 8 + 2 * pp, 8 + 2 * pp, 9 + 2 * pp,
						9 + 2 * pp, 9 + 2 * pp, 9 + 2 * pp);
	int64_t p = 4 * k + pp;
	struct z_pair w[Z_RP];
	__m512 scf[Z_RP], mnf[Z_RP];
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++) {
		const uint8_t *b0 = st->q[2 * i] + k * bs, *b1 = st->q[2 * i + 1] + k * bs;
		const int64_t off = (is_q5 ? 48 : 16) + 32 * pp;
		__m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + off))),
					       _mm256_loadu_si256((const __m256i *)(b1 + off)), 1);
		/* nl: run 2p's q (row r: 0..31, then row r + 1's), nh run 2p + 1's */
		__m512i nl = _mm512_and_si512(v, mask), nh = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
		if (is_q5) {
			const __m512i sixteen = _mm512_set1_epi8(16);
			nl = _mm512_mask_add_epi8(nl, _mm512_test_epi8_mask(st->qh[i], _mm512_set1_epi8((char)(1 << (2 * pp)))),
						  nl, sixteen);
			nh = _mm512_mask_add_epi8(nh, _mm512_test_epi8_mask(st->qh[i], _mm512_set1_epi8((char)(2 << (2 * pp)))),
						  nh, sixteen);
		}
		w[i].lo = _mm512_permutex2var_epi64(nl, lo_idx, nh);
		w[i].hi = _mm512_permutex2var_epi64(nl, hi_idx, nh);
		scf[i] = _mm512_permutexvar_ps(q_idx, st->sc[i]);
		mnf[i] = _mm512_permutexvar_ps(q_idx, st->mn[i]);
	}
#pragma GCC unroll 8
	for (int j = 0; j < nt; j++) {
		int64_t o = j * st->pairs + p;
		__m512i xlo = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->xq + 64 * o)));
		__m512i xhi = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->xq + 64 * o + 32)));
		__m512 dx = _mm512_broadcast_f32x8(_mm256_loadu_ps(st->xd + 8 * o));
		__m512 sumx = _mm512_broadcast_f32x8(_mm256_loadu_ps(st->sumf + 8 * o));
#pragma GCC unroll 4
		for (int i = 0; i < rp; i++) {
			__m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[i].lo, xlo);
			lanes = _mm512_dpbusd_epi32(lanes, w[i].hi, xhi);
			__m512 a = _mm512_fmadd_ps(_mm512_mul_ps(st->fd[i], dx),
						   _mm512_mul_ps(_mm512_cvtepi32_ps(lanes), scf[i]), st->acc[i][j]);
			st->acc[i][j] = _mm512_fnmadd_ps(_mm512_mul_ps(st->fm[i], dx), _mm512_mul_ps(mnf[i], sumx), a);
		}
	}
}

/* Rows r .. min(r + 2 * rp, row_end) - 1 of a q4_k / q5_k matrix against
 * tokens t .. t + nt - 1 (sumf as struct z_k_step has it, from token t),
 * block after block. */
Z_INLINE void z_k_block(float *out, int64_t os, const struct qmatrix *m, int64_t r, int64_t row_end, const int rp,
			const struct act_q8 *x, int64_t t, const int nt, const float *sumf, const enum quant_type type)
{
	const int is_q5 = type == QUANT_Q5_K;
	const int64_t bs = is_q5 ? QUANT_Q5_K_BYTES : QUANT_Q4_K_BYTES;
	struct z_k_step st;
	st.pairs = x->pairs;
	st.row_bytes = m->cols / QUANT_K_BLOCK * bs;
#pragma GCC unroll 4
	for (int i = 0; i < 2 * rp; i++)
		st.q[i] = (const uint8_t *)m->data + z_row(r, i, row_end) * st.row_bytes;
	st.xq = x->q + t * st.pairs * 64;
	st.xd = x->d + t * st.pairs * 8;
	st.sumf = sumf;
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
		for (int j = 0; j < nt; j++)
			st.acc[i][j] = _mm512_setzero_ps();
	for (int64_t k = 0; k < m->cols / QUANT_K_BLOCK; k++) {
#pragma GCC unroll 4
		for (int i = 0; i < rp; i++) {
			const uint8_t *b0 = st.q[2 * i] + k * bs, *b1 = st.q[2 * i + 1] + k * bs;
			for (int64_t o = 0; o < bs; o += 64) {
				_mm_prefetch((const char *)(b0 + 2 * rp * st.row_bytes + o), _MM_HINT_T0);
				_mm_prefetch((const char *)(b1 + 2 * rp * st.row_bytes + o), _MM_HINT_T0);
			}
			uint64_t sc0, mn0, sc1, mn1;
			quant_k_scales8(&sc0, &mn0, b0 + 4);
			quant_k_scales8(&sc1, &mn1, b1 + 4);
			st.sc[i] = z_bytes_ps(sc0, sc1);
			st.mn[i] = z_bytes_ps(mn0, mn1);
			st.fd[i] = z_halves_f16(b0, b1);
			st.fm[i] = z_halves_f16(b0 + 2, b1 + 2);
			if (is_q5)
				st.qh[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 16))),
							      _mm256_loadu_si256((const __m256i *)(b1 + 16)), 1);
		}
		z_k_pair(&st, k, 0, rp, nt, type);
		z_k_pair(&st, k, 1, rp, nt, type);
		z_k_pair(&st, k, 2, rp, nt, type);
		z_k_pair(&st, k, 3, rp, nt, type);
	}
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
		for (int j = 0; j < nt; j++) {
			out[j * os + 2 * i] = z_hsum(_mm512_castps512_ps256(st.acc[i][j]));
			if (r + 2 * i + 1 < row_end)
				out[j * os + 2 * i + 1] = z_hsum(_mm512_extractf32x8_ps(st.acc[i][j], 1));
		}
}

/* sum8 / 8 of tokens t .. t + nt - 1 as floats (exact), once per group. */
Z_INLINE void z_sumf_fill(float *sumf, const struct act_q8 *x, int64_t t, int64_t nt)
{
	const int32_t *xs = x->sum8 + t * x->pairs * 8;
	for (int64_t i = 0; i < nt * x->pairs; i++)
		_mm256_storeu_ps(sumf + 8 * i, _mm256_cvtepi32_ps(_mm256_srai_epi32(
							_mm256_loadu_si256((const __m256i *)(xs + 8 * i)), 3)));
}

/* The K types' rows, blocked as z_rows_q8, with each token group's
 * activation sums made once as floats in place of the negated offsets;
 * rows of more than 65536 inputs, whose one token's sums do not fit, take
 * the AVX2 kernel. */
Z_INLINE void z_rows_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
		       int64_t row_begin, int64_t row_end, const enum quant_type type)
{
	float sumf[Z_NEG];
	int64_t t = 0, lanes = 8 * x->pairs;
	for (; t + 8 <= n && 8 * lanes <= Z_NEG; t += 8) {
		z_sumf_fill(sumf, x, t, 8);
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			z_k_block(out + t * os + r, os, m, r, row_end, 2, x, t, 8, sumf, type);
		for (; r < row_end; r += 2)
			z_k_block(out + t * os + r, os, m, r, row_end, 1, x, t, 8, sumf, type);
	}
	for (; t + 4 <= n && 4 * lanes <= Z_NEG; t += 4) {
		z_sumf_fill(sumf, x, t, 4);
		for (int64_t r = row_begin; r < row_end; r += 2)
			z_k_block(out + t * os + r, os, m, r, row_end, 1, x, t, 4, sumf, type);
	}
	for (; t < n && lanes <= Z_NEG; t++) {
		z_sumf_fill(sumf, x, t, 1);
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			z_k_block(out + t * os + r, os, m, r, row_end, 2, x, t, 1, sumf, type);
		for (; r < row_end; r += 2)
			z_k_block(out + t * os + r, os, m, r, row_end, 1, x, t, 1, sumf, type);
	}
	if (t < n) {
		struct act_q8 rest = { .q = x->q + t * x->pairs * 64, .d = x->d + t * x->pairs * 8,
				       .sum8 = x->sum8 + t * x->pairs * 8, .pairs = x->pairs };
		if (type == QUANT_Q4_K)
			avx2_rows_q8_q4_k(out + t * os, os, m, &rest, n - t, row_begin, row_end);
		else
			avx2_rows_q8_q5_k(out + t * os, os, m, &rest, n - t, row_begin, row_end);
	}
}

static void z_rows_q8_q4_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			   int64_t row_begin, int64_t row_end)
{
	z_rows_k(out, os, m, x, n, row_begin, row_end, QUANT_Q4_K);
}

static void z_rows_q8_q5_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			   int64_t row_begin, int64_t row_end)
{
	z_rows_k(out, os, m, x, n, row_begin, row_end, QUANT_Q5_K);
}

/* What a q6_k step keeps: its rows, its tokens' activations and negated
 * half-lane offsets (neg[16 * (j * pairs + p) + l]: -32 times the sum of
 * lane l's four low-half inputs, then of its four high-half ones), the
 * current block's d and sixteen scales as floats (row r, row r + 1), the
 * current half's ql and qh bytes, and the accumulators. */
struct z_q6_step {
	const uint8_t *q[2 * Z_RP];
	const int8_t *xq;
	const float *xd;
	const int32_t *neg;
	int64_t pairs, row_bytes;
	__m512 fd[Z_RP], s0[Z_RP], s1[Z_RP];
	__m512i ql0[Z_RP], ql1[Z_RP], qh[Z_RP];
	__m512 acc[Z_RP][Z_NT];
};

/* Two rows' 32 bytes at offset o of blocks b0, b1. */
Z_INLINE __m512i z_rows32(const uint8_t *b0, const uint8_t *b1, int64_t o)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + o))),
				  _mm256_loadu_si256((const __m256i *)(b1 + o)), 1);
}

/* Pair pp of block k (pair p = 4k + pp) of a q6_k step against its tokens,
 * in kernels_internal.h's sequence: u = q + 32 in 0..63 (the six stored
 * bits as they are) against each half of a lane apart, S_a = u . x_a -
 * 32 sum(x_a) and S_b likewise, exact; then (float)(s_a S_a + s_b S_b) as
 * a fused multiply-add of exact floats (every partial below 2^23) and acc
 * = fma(d * d_x, that, acc). */
Z_INLINE void z_q6_pair(struct z_q6_step *st, int64_t k, const int pp, const int rp, const int nt)
{
	const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
	const __m512i hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
	const int s = 4 * pp; /* scales of runs 2pp, 2pp + 1: s, s + 1 and s + 2, s + 3 */
	const __m512i a_idx = _mm512_setr_epi32(s, s, s, s, s + 2, s + 2, s + 2, s + 2, 16 + s, 16 + s, 16 + s, 16 + s,
						18 + s, 18 + s, 18 + s, 18 + s);
	const __m512i b_idx = _mm512_add_epi32(a_idx, _mm512_set1_epi32(1));
	const __m512i low4 = _mm512_set1_epi8(0x0f), six = _mm512_set1_epi8(0x3f);
	int64_t p = 4 * k + pp;
	struct z_pair w[Z_RP];
	__m512 sa[Z_RP], sb[Z_RP];
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++) {
		/* Run 2pp: nibble (pp odd: high) of ql[0..31], qh bits 4 (pp % 2)
		 * .. +1; run 2pp + 1: of ql[32..63], qh bits 2 higher. Bits land
		 * at 4..5 by one shift each (the and drops what crosses bytes). */
		__m512i l0 = pp & 1 ? _mm512_srli_epi16(st->ql0[i], 4) : st->ql0[i];
		__m512i l1 = pp & 1 ? _mm512_srli_epi16(st->ql1[i], 4) : st->ql1[i];
		__m512i h0 = pp & 1 ? st->qh[i] : _mm512_slli_epi16(st->qh[i], 4);
		__m512i h1 = pp & 1 ? _mm512_srli_epi16(st->qh[i], 2) : _mm512_slli_epi16(st->qh[i], 2);
		/* (l & 0x0f) | (h & ~0x0f), then the six bits */
		__m512i u0 = _mm512_and_si512(_mm512_ternarylogic_epi32(l0, h0, low4, 0xe4), six);
		__m512i u1 = _mm512_and_si512(_mm512_ternarylogic_epi32(l1, h1, low4, 0xe4), six);
		w[i].lo = _mm512_permutex2var_epi64(u0, lo_idx, u1);
		w[i].hi = _mm512_permutex2var_epi64(u0, hi_idx, u1);
		sa[i] = _mm512_permutex2var_ps(st->s0[i], a_idx, st->s1[i]);
		sb[i] = _mm512_permutex2var_ps(st->s0[i], b_idx, st->s1[i]);
	}
#pragma GCC unroll 8
	for (int j = 0; j < nt; j++) {
		int64_t o = j * st->pairs + p;
		__m512i xlo = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->xq + 64 * o)));
		__m512i xhi = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->xq + 64 * o + 32)));
		__m512i na = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->neg + 16 * o)));
		__m512i nb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(st->neg + 16 * o + 8)));
		__m512 dx = _mm512_broadcast_f32x8(_mm256_loadu_ps(st->xd + 8 * o));
#pragma GCC unroll 4
		for (int i = 0; i < rp; i++) {
			__m512 fa = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(na, w[i].lo, xlo));
			__m512 fb = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nb, w[i].hi, xhi));
			__m512 lanes = _mm512_fmadd_ps(fa, sa[i], _mm512_mul_ps(fb, sb[i]));
			st->acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(st->fd[i], dx), lanes, st->acc[i][j]);
		}
	}
}

/* Rows r .. min(r + 2 * rp, row_end) - 1 of a q6_k matrix against tokens
 * t .. t + nt - 1 (neg as struct z_q6_step has it, from token t). */
Z_INLINE void z_q6_block(float *out, int64_t os, const struct qmatrix *m, int64_t r, int64_t row_end,
			 const int rp, const struct act_q8 *x, int64_t t, const int nt, const int32_t *neg)
{
	const int64_t bs = QUANT_Q6_K_BYTES;
	struct z_q6_step st;
	st.pairs = x->pairs;
	st.row_bytes = m->cols / QUANT_K_BLOCK * bs;
#pragma GCC unroll 4
	for (int i = 0; i < 2 * rp; i++)
		st.q[i] = (const uint8_t *)m->data + z_row(r, i, row_end) * st.row_bytes;
	st.xq = x->q + t * st.pairs * 64;
	st.xd = x->d + t * st.pairs * 8;
	st.neg = neg;
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
		for (int j = 0; j < nt; j++)
			st.acc[i][j] = _mm512_setzero_ps();
	for (int64_t k = 0; k < m->cols / QUANT_K_BLOCK; k++) {
#pragma GCC unroll 2
		for (int hf = 0; hf < 2; hf++) {
#pragma GCC unroll 4
			for (int i = 0; i < rp; i++) {
				const uint8_t *b0 = st.q[2 * i] + k * bs, *b1 = st.q[2 * i + 1] + k * bs;
				if (hf == 0) {
					for (int64_t o = 0; o < bs; o += 64) {
						_mm_prefetch((const char *)(b0 + 2 * rp * st.row_bytes + o), _MM_HINT_T0);
						_mm_prefetch((const char *)(b1 + 2 * rp * st.row_bytes + o), _MM_HINT_T0);
					}
					__m128i s0 = _mm_loadu_si128((const __m128i *)(b0 + 192));
					__m128i s1 = _mm_loadu_si128((const __m128i *)(b1 + 192));
					st.s0[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s0));
					st.s1[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s1));
					st.fd[i] = z_halves_f16(b0 + 208, b1 + 208);
				}
				st.ql0[i] = z_rows32(b0, b1, 64 * hf);
				st.ql1[i] = z_rows32(b0, b1, 64 * hf + 32);
				st.qh[i] = z_rows32(b0, b1, 128 + 32 * hf);
			}
			z_q6_pair(&st, k, 2 * hf, rp, nt);
			z_q6_pair(&st, k, 2 * hf + 1, rp, nt);
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < rp; i++)
#pragma GCC unroll 8
		for (int j = 0; j < nt; j++) {
			out[j * os + 2 * i] = z_hsum(_mm512_castps512_ps256(st.acc[i][j]));
			if (r + 2 * i + 1 < row_end)
				out[j * os + 2 * i + 1] = z_hsum(_mm512_extractf32x8_ps(st.acc[i][j], 1));
		}
}

/* -32 times each half-lane's sum of four x of tokens t .. t + nt - 1, once
 * per group: vpdpbusd of 32s against a pair's 64 bytes, whose groups of
 * four are the lanes' low halves (xlo) then their high halves (xhi). */
Z_INLINE void z_q6_neg_fill(int32_t *neg, const struct act_q8 *x, int64_t t, int64_t nt)
{
	const int8_t *xq = x->q + t * x->pairs * 64;
	const __m512i w32 = _mm512_set1_epi8(32);
	for (int64_t i = 0; i < nt * x->pairs; i++) {
		__m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w32,
						_mm512_loadu_si512((const void *)(xq + 64 * i)));
		_mm512_storeu_si512((void *)(neg + 16 * i), _mm512_sub_epi32(_mm512_setzero_si512(), s));
	}
}

/* q6_k's rows, blocked as z_rows_q8 with twice the offsets a token (a
 * lane's two halves have their own scales); eight tokens fit up to 4096
 * inputs, four up to 8192, one up to 32768, and longer rows take the AVX2
 * kernel. */
static void z_rows_q8_q6_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			   int64_t row_begin, int64_t row_end)
{
	int32_t neg[Z_NEG];
	int64_t t = 0, lanes = 16 * x->pairs;
	for (; t + 8 <= n && 8 * lanes <= Z_NEG; t += 8) {
		z_q6_neg_fill(neg, x, t, 8);
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			z_q6_block(out + t * os + r, os, m, r, row_end, 2, x, t, 8, neg);
		for (; r < row_end; r += 2)
			z_q6_block(out + t * os + r, os, m, r, row_end, 1, x, t, 8, neg);
	}
	for (; t + 4 <= n && 4 * lanes <= Z_NEG; t += 4) {
		z_q6_neg_fill(neg, x, t, 4);
		for (int64_t r = row_begin; r < row_end; r += 2)
			z_q6_block(out + t * os + r, os, m, r, row_end, 1, x, t, 4, neg);
	}
	for (; t < n && lanes <= Z_NEG; t++) {
		z_q6_neg_fill(neg, x, t, 1);
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			z_q6_block(out + t * os + r, os, m, r, row_end, 2, x, t, 1, neg);
		for (; r < row_end; r += 2)
			z_q6_block(out + t * os + r, os, m, r, row_end, 1, x, t, 1, neg);
	}
	if (t < n) {
		struct act_q8 rest = { .q = x->q + t * x->pairs * 64, .d = x->d + t * x->pairs * 8,
				       .sum8 = x->sum8 + t * x->pairs * 8, .pairs = x->pairs };
		avx2_rows_q8_q6_k(out + t * os, os, m, &rest, n - t, row_begin, row_end);
	}
}

void kernels_vnni_avx512(struct kernels_ops *ops)
{
	ops->rows_q8[QUANT_INT8] = z_rows_q8_int8;
	ops->rows_q8[QUANT_INT4] = z_rows_q8_int4;
	ops->rows_q8[QUANT_MXFP4] = z_rows_q8_mxfp4;
	ops->rows_q8[QUANT_Q8_0] = z_rows_q8_q8_0;
	ops->rows_q8[QUANT_Q4_0] = z_rows_q8_q4_0;
	ops->rows_q8[QUANT_Q4_K] = z_rows_q8_q4_k;
	ops->rows_q8[QUANT_Q5_K] = z_rows_q8_q5_k;
	ops->rows_q8[QUANT_Q6_K] = z_rows_q8_q6_k;
	ops->rows_q16 = z_rows_q16_int8;
}
