/*
 * matvec_avxvnni — the integer dot products with AVX-VNNI (VEX-encoded
 * vpdpbusd / vpdpwssd on 256-bit registers), for AVX2 hosts that have it
 * (Intel since Alder Lake and Sapphire Rapids, AMD since Zen 5).
 *
 * Same sequences as kernels_internal.h, so the same bits as every level:
 * only the exact integer lane sums are computed with other instructions,
 * and the float steps per lane and the final tree are the scalar ones.
 *
 * vpdpbusd multiplies unsigned bytes by signed ones and adds each group of
 * four products into an int32 lane, which is the shape of a pair of runs
 * (lane l: four inputs of the low half, four of the high half), so one
 * instruction per half gives a lane's sum. Every weight enters as the
 * unsigned u = q + o: int4 and q4_0 their stored nibble (o = 8), int8 and
 * q8_0 q ^ 0x80 (o = 128), mxfp4 2 * e2m1 + 16 through a lookup (o = 16);
 * o times the lane's activation sum, o / 8 * sum8, comes off. Every sum is
 * an exact int32 (at most 8 * 255 * 127), so the lanes are those of
 * maddubs / madd, without their int16 steps or int8's per-token sign work.
 * int16 activations (int8 weights) take vpdpwssd on the weights widened to
 * int16. q4_k and q5_k meet x with their unsigned q as they are (the
 * block's min is a term of its own), sc_j * S a product of exact floats;
 * q6_k's six stored bits are u = q + 32, each half of a lane taken apart
 * for its own sub-block scale.
 *
 * Each (row, token) is one chain of dependent multiply-adds, so a step
 * takes several rows and tokens side by side. Loop order: a call's tokens
 * go four at a time, and each group of four walks every row of the call,
 * two rows a step, each pair decoded once for the four tokens; the group's
 * activations (16 KiB at 2048 inputs) stay in L1 while the rows, which a
 * task keeps in L2, stream past them. Decode (one token) takes four rows a
 * step, prefetching the next four as it goes.
 */
#include <immintrin.h>
#include <string.h>

#include "compute/kernels_internal.h"

#define VNNI_INLINE static inline __attribute__((always_inline))
#define VNNI_NT 4
#define VNNI_RB 4

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), the fixed tree. */
VNNI_INLINE float vnni_hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* 2^(e - 128) (quant_e8m0_to_f32(e, 1)) of the n < 8 or more scale bytes
 * at e, eight runs of an mxfp4 row (past n: e = 0, a finite scale that
 * meets zero activations): e >= 2 is the exponent field e - 1, e = 1 and 0
 * the subnormals 2^-127 and 2^-128. */
VNNI_INLINE __m256 vnni_e8m0_8(const uint8_t *e, int64_t n)
{
	const __m256i one = _mm256_set1_epi32(1);
	uint64_t b = 0;
	if (n >= 8)
		memcpy(&b, e, 8);
	else
		memcpy(&b, e, (size_t)n);
	__m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)b));
	__m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, one), 23);
	__m256i tiny = _mm256_srlv_epi32(_mm256_set1_epi32(0x00400000), _mm256_sub_epi32(one, v));
	return _mm256_castsi256_ps(_mm256_blendv_epi8(tiny, normal, _mm256_cmpgt_epi32(v, one)));
}

/* A pair of weights as the unsigned bytes u that meet the activations: lo
 * inputs 0..15 of both runs, hi inputs 16..31 (kernels_internal.h's
 * order). */
struct vnni_pair {
	__m256i lo, hi;
};

/* Pair p of an int8, int4 or mxfp4 row q; last: it has one run only (the
 * other meets zero activations). int4 and mxfp4 store the two runs' low
 * nibbles then high nibbles, already the activations' order; int8 gathers
 * its runs' halves. */
VNNI_INLINE struct vnni_pair vnni_decode(const uint8_t *q, int64_t p, int last, const enum quant_type type)
{
	struct vnni_pair w;
	if (type == QUANT_INT8) {
		const __m256i flip = _mm256_set1_epi8((char)0x80);
		__m256i w0 = _mm256_loadu_si256((const __m256i *)(q + 64 * p));
		__m256i w1 = last ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(q + 64 * p + 32));
		w.lo = _mm256_xor_si256(_mm256_permute2x128_si256(w0, w1, 0x20), flip);
		w.hi = _mm256_xor_si256(_mm256_permute2x128_si256(w0, w1, 0x31), flip);
		return w;
	}
	const __m256i mask = _mm256_set1_epi8(0x0f);
	__m256i v = last ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(q + 32 * p)))
			 : _mm256_loadu_si256((const __m256i *)(q + 32 * p));
	w.lo = _mm256_and_si256(v, mask);
	w.hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
	if (type == QUANT_MXFP4) {
		/* 2 * e2m1 + 16 of each code: 16..28 for +0..+6, 16..4 for -0..-6. */
		const __m256i lut = _mm256_broadcastsi128_si256(
			_mm_setr_epi8(16, 17, 18, 19, 20, 22, 24, 28, 16, 15, 14, 13, 12, 10, 8, 4));
		w.lo = _mm256_shuffle_epi8(lut, w.lo);
		w.hi = _mm256_shuffle_epi8(lut, w.hi);
	}
	return w;
}

/* q8_0 / q4_0 pair p: blocks 2p, 2p + 1 of a row (the second missing when
 * last), their d in *fd, four lanes each. The two-byte block headers sit
 * between the payloads, so each 128-bit half comes from its own load
 * and a blend puts them together (no shuffle). */
VNNI_INLINE struct vnni_pair vnni_decode_32(const uint8_t *row, int64_t p, int last, __m256 *fd,
					    const enum quant_type type)
{
	const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
	const uint8_t *b0 = row + 2 * p * bs, *b1 = b0 + bs;
	uint16_t h0, h1 = 0;
	memcpy(&h0, b0, 2);
	if (!last)
		memcpy(&h1, b1, 2);
	__m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | (uint32_t)h1 << 16)));
	*fd = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
	struct vnni_pair w;
	if (last) {
		/* Block 2p alone: its halves, zeros for the missing block. */
		__m256i l0 = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 2)));
		if (type == QUANT_Q8_0) {
			const __m256i flip = _mm256_set1_epi8((char)0x80);
			__m256i h0v = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 18)));
			w.lo = _mm256_xor_si256(l0, flip);
			w.hi = _mm256_xor_si256(h0v, flip);
			return w;
		}
		const __m256i mask = _mm256_set1_epi8(0x0f);
		w.lo = _mm256_and_si256(l0, mask);
		w.hi = _mm256_and_si256(_mm256_srli_epi16(l0, 4), mask);
		return w;
	}
	if (type == QUANT_Q8_0) {
		/* lo: b0's bytes 0..15, then b1's (b0 + 36, the high half of
		 * a load at b0 + 20); hi: bytes 16..31 of each. */
		const __m256i flip = _mm256_set1_epi8((char)0x80);
		__m256i lo = _mm256_blend_epi32(_mm256_loadu_si256((const __m256i *)(b0 + 2)),
						_mm256_loadu_si256((const __m256i *)(b0 + 20)), 0xf0);
		__m256i hi = _mm256_blend_epi32(_mm256_loadu_si256((const __m256i *)(b0 + 18)),
						_mm256_loadu_si256((const __m256i *)(b0 + 36)), 0xf0);
		w.lo = _mm256_xor_si256(lo, flip);
		w.hi = _mm256_xor_si256(hi, flip);
		return w;
	}
	const __m256i mask = _mm256_set1_epi8(0x0f);
	__m256i v = _mm256_blend_epi32(_mm256_loadu_si256((const __m256i *)(b0 + 2)),
				       _mm256_loadu_si256((const __m256i *)(b0 + 4)), 0xf0);
	w.lo = _mm256_and_si256(v, mask);
	w.hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
	return w;
}

/* What u = q + o adds to a lane beyond q * x: o times the lane's sum of
 * eight x, from sum8 = 8 * that sum (exact shifts). */
VNNI_INLINE __m256i vnni_offset(__m256i x8, const enum quant_type type)
{
	if (type == QUANT_INT8 || type == QUANT_Q8_0)
		return _mm256_slli_epi32(x8, 4);
	if (type == QUANT_MXFP4)
		return _mm256_slli_epi32(x8, 1);
	return x8;
}

/* Where a pair's scales come from: VNNI_SC_PAIR one per pair (int8 and
 * int4 at group 64, s[p]; mxfp4, q8_0 and q4_0 from the pair's own bytes),
 * VNNI_SC_GROUP one per group of several pairs (group a multiple of 64),
 * VNNI_SC_RUN each run its own group's (any other group, a lookup a pair). */
enum vnni_scale { VNNI_SC_PAIR, VNNI_SC_GROUP, VNNI_SC_RUN };

/* What a step keeps: rows r .. r + rb - 1 (row i at q + i * row_bytes, its
 * scales at s + i * n_groups), its tokens' activations, and acc[i][j] for
 * row i and token j. */
struct vnni_q8_step {
	const uint8_t *q;
	const float *s;
	const int8_t *xq;
	const float *xd;
	const int32_t *xs;
	const int32_t *neg; /* or NULL: -(o * sum8 / 8) of each token's pairs */
	int64_t pairs, cols, group, n_groups, row_bytes, step;
	__m256 acc[VNNI_RB][VNNI_NT], sw[VNNI_RB];
	__m256 e8[VNNI_RB]; /* mxfp4: 8 runs' scales of each row from run 8c */
};

/* Pair p of the step's rows against its tokens (token j's pair p at xq +
 * 64 * (j * pairs + p), its d and sum8 at 8 * (j * pairs + p)): each row's
 * weights decoded once, each token's activations loaded once, and for
 * every (row, token) the exact lanes and acc = fma(sw * d_x, (float)lanes,
 * acc). last: the pair has one run only. */
VNNI_INLINE void vnni_q8_pair(struct vnni_q8_step *st, int64_t p, const int last, const int rb, const int nt,
			      const enum quant_type type, const enum vnni_scale sc, const int pre)
{
	struct vnni_pair w[VNNI_RB];
#pragma GCC unroll 4
	for (int i = 0; i < rb; i++) {
		const uint8_t *qi = st->q + i * st->row_bytes;
		_mm_prefetch((const char *)(qi + rb * st->row_bytes + st->step * p), _MM_HINT_T0);
		if (type == QUANT_Q8_0 || type == QUANT_Q4_0) {
			w[i] = vnni_decode_32(qi, p, last, &st->sw[i], type);
			continue;
		}
		if (type == QUANT_MXFP4) {
			/* runs 2p, 2p + 1: indices 2c, 2c + 1 of e8 (a lone last run's
			 * partner is the next byte's scale, finite, against zero
			 * activations) */
			__m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
						       _mm256_set1_epi32((int)(2 * (p & 3))));
			st->sw[i] = _mm256_permutevar8x32_ps(st->e8[i], idx);
		} else if (sc == VNNI_SC_PAIR) {
			st->sw[i] = _mm256_broadcast_ss(st->s + i * st->n_groups + p);
		} else if (sc == VNNI_SC_RUN) {
			const float *si = st->s + i * st->n_groups;
			float s0 = si[64 * p / st->group], s1 = last ? s0 : si[(64 * p + 32) / st->group];
			st->sw[i] = _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0));
		}
		w[i] = vnni_decode(qi, p, last, type);
	}
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++) {
		int64_t o = j * st->pairs + p;
		__m256i neg = pre ? _mm256_loadu_si256((const __m256i *)(st->neg + 8 * o))
				  : _mm256_sub_epi32(_mm256_setzero_si256(),
						     vnni_offset(_mm256_loadu_si256((const __m256i *)(st->xs + 8 * o)), type));
		__m256i xlo = _mm256_loadu_si256((const __m256i *)(st->xq + 64 * o));
		__m256i xhi = _mm256_loadu_si256((const __m256i *)(st->xq + 64 * o + 32));
		__m256 dx = _mm256_loadu_ps(st->xd + 8 * o);
#pragma GCC unroll 4
		for (int i = 0; i < rb; i++) {
			__m256i lanes = _mm256_dpbusd_avx_epi32(neg, w[i].lo, xlo);
			lanes = _mm256_dpbusd_avx_epi32(lanes, w[i].hi, xhi);
			st->acc[i][j] = _mm256_fmadd_ps(_mm256_mul_ps(st->sw[i], dx), _mm256_cvtepi32_ps(lanes),
							st->acc[i][j]);
		}
	}
}

/* Rows r .. r + rb - 1 of an int8, int4, mxfp4, q8_0 or q4_0 matrix
 * against tokens t .. t + nt - 1, pair after pair (a lone last run, cols %
 * 64 == 32, comes last on its own), then each (row, token)'s final sum.
 * Each (row, token) is one chain of dependent multiply-adds, four cycles
 * apart; rb * nt of them side by side keep the units busy (one chain alone
 * ran at 32 Gw/s, a third of what the instructions allow). */
VNNI_INLINE void vnni_q8_block(float *out, int64_t os, const struct qmatrix *m, int64_t r, const int rb,
			       const struct act_q8 *x, int64_t t, const int nt, const int32_t *neg,
			       const enum quant_type type, const enum vnni_scale sc)
{
	const int is_mxfp4 = type == QUANT_MXFP4, is_32 = type == QUANT_Q8_0 || type == QUANT_Q4_0;
	const int64_t bs = type == QUANT_Q8_0 ? QUANT_Q8_0_BYTES : QUANT_Q4_0_BYTES;
	int64_t cols = m->cols, runs = cols / 32;
	struct vnni_q8_step st;
	st.cols = cols;
	st.pairs = x->pairs;
	st.group = is_mxfp4 || is_32 ? 32 : m->group;
	st.n_groups = cols / st.group;
	st.row_bytes = type == QUANT_INT8 ? cols : is_mxfp4 ? cols / 2 + cols / 32 : is_32 ? runs * bs : cols / 2;
	st.step = type == QUANT_INT8 ? 64 : is_32 ? 2 * bs : 32;
	st.q = (const uint8_t *)m->data + r * st.row_bytes;
	st.s = is_mxfp4 || is_32 ? NULL : m->scales + r * st.n_groups;
	st.xq = x->q + t * st.pairs * 64;
	st.xd = x->d + t * st.pairs * 8;
	st.xs = x->sum8 + t * st.pairs * 8;
	st.neg = neg;
#pragma GCC unroll 4
	for (int i = 0; i < rb; i++)
#pragma GCC unroll 4
		for (int j = 0; j < nt; j++)
			st.acc[i][j] = _mm256_setzero_ps();
	int64_t full = runs / 2;
	if (sc == VNNI_SC_GROUP) {
		int64_t ppg = st.group / 64;
		for (int64_t p0 = 0, g = 0; p0 < full; p0 += ppg, g++) {
#pragma GCC unroll 4
			for (int i = 0; i < rb; i++)
				st.sw[i] = _mm256_broadcast_ss(st.s + i * st.n_groups + g);
			for (int64_t p = p0; p < p0 + ppg; p++)
				vnni_q8_pair(&st, p, 0, rb, nt, type, sc, neg != NULL);
		}
	} else if (is_mxfp4) {
		/* The scales of four pairs at a time, made in vectors; a lone last
		 * run finds its own among the last four's, or makes it. */
#pragma GCC unroll 4
		for (int i = 0; i < rb; i++)
			st.e8[i] = _mm256_setzero_ps();
		for (int64_t p0 = 0; p0 < full; p0 += 4) {
#pragma GCC unroll 4
			for (int i = 0; i < rb; i++)
				st.e8[i] = vnni_e8m0_8(st.q + i * st.row_bytes + cols / 2 + 2 * p0, runs - 2 * p0);
			int64_t p1 = p0 + 4 < full ? p0 + 4 : full;
			for (int64_t p = p0; p < p1; p++)
				vnni_q8_pair(&st, p, 0, rb, nt, type, sc, neg != NULL);
		}
		if (runs & 1) {
			if (full % 4 == 0)
#pragma GCC unroll 4
				for (int i = 0; i < rb; i++)
					st.e8[i] = vnni_e8m0_8(st.q + i * st.row_bytes + cols / 2 + 2 * full, 1);
			vnni_q8_pair(&st, full, 1, rb, nt, type, sc, neg != NULL);
		}
	} else {
		for (int64_t p = 0; p < full; p++)
			vnni_q8_pair(&st, p, 0, rb, nt, type, sc, neg != NULL);
		if (runs & 1)
			vnni_q8_pair(&st, full, 1, rb, nt, type, sc, neg != NULL);
	}
#pragma GCC unroll 4
	for (int i = 0; i < rb; i++)
#pragma GCC unroll 4
		for (int j = 0; j < nt; j++)
			out[j * os + i] = vnni_hsum(st.acc[i][j]);
}

/* -(o * sum8 / 8) of tokens t .. t + nt - 1, what every row's lanes of
 * those tokens start from: neg[8 * (j * pairs + p) + l]. */
VNNI_INLINE void vnni_neg_fill(int32_t *neg, const struct act_q8 *x, int64_t t, int64_t nt,
			       const enum quant_type type)
{
	const int32_t *xs = x->sum8 + t * x->pairs * 8;
	for (int64_t i = 0; i < nt * x->pairs; i++)
		_mm256_storeu_si256((__m256i *)(neg + 8 * i),
				    _mm256_sub_epi32(_mm256_setzero_si256(),
						     vnni_offset(_mm256_loadu_si256((const __m256i *)(xs + 8 * i)), type)));
}

/* Tokens four at a time, each group over every row, two rows a step; the
 * rest of the tokens one by one, four rows a step. Each group's offsets
 * are negated once, into VNNI_NEG int32s (16 KiB) on the stack, rather than
 * once per row; four tokens fit up to 8192 inputs, one up to 32768, and
 * beyond that each row negates its own. */
#define VNNI_NEG (4 * 8 * 128)
VNNI_INLINE void vnni_rows_q8(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			      int64_t row_begin, int64_t row_end, const enum quant_type type, const enum vnni_scale sc)
{
	int32_t neg[VNNI_NEG];
	int64_t t = 0, lanes = 8 * x->pairs;
	for (; t + 4 <= n && 4 * lanes <= VNNI_NEG; t += 4) {
		vnni_neg_fill(neg, x, t, 4, type);
		int64_t r = row_begin;
		for (; r + 2 <= row_end; r += 2)
			vnni_q8_block(out + t * os + r, os, m, r, 2, x, t, 4, neg, type, sc);
		for (; r < row_end; r++)
			vnni_q8_block(out + t * os + r, os, m, r, 1, x, t, 4, neg, type, sc);
	}
	for (; t < n && lanes <= VNNI_NEG; t++) {
		vnni_neg_fill(neg, x, t, 1, type);
		int64_t r = row_begin;
		for (; r + 4 <= row_end; r += 4)
			vnni_q8_block(out + t * os + r, os, m, r, 4, x, t, 1, neg, type, sc);
		for (; r < row_end; r++)
			vnni_q8_block(out + t * os + r, os, m, r, 1, x, t, 1, neg, type, sc);
	}
	for (; t < n; t++)
		for (int64_t r = row_begin; r < row_end; r++)
			vnni_q8_block(out + t * os + r, os, m, r, 1, x, t, 1, NULL, type, sc);
}

/* int8 and int4: the scale mode their group allows. */
VNNI_INLINE void vnni_rows_q8_grouped(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
				      int64_t n, int64_t row_begin, int64_t row_end, const enum quant_type type)
{
	if (m->group == 64)
		vnni_rows_q8(out, os, m, x, n, row_begin, row_end, type, VNNI_SC_PAIR);
	else if (m->group % 64 == 0)
		vnni_rows_q8(out, os, m, x, n, row_begin, row_end, type, VNNI_SC_GROUP);
	else
		vnni_rows_q8(out, os, m, x, n, row_begin, row_end, type, VNNI_SC_RUN);
}

static void vnni_rows_q8_int8(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			      int64_t row_begin, int64_t row_end)
{
	vnni_rows_q8_grouped(out, os, m, x, n, row_begin, row_end, QUANT_INT8);
}

static void vnni_rows_q8_int4(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			      int64_t row_begin, int64_t row_end)
{
	vnni_rows_q8_grouped(out, os, m, x, n, row_begin, row_end, QUANT_INT4);
}

static void vnni_rows_q8_mxfp4(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
			       int64_t n, int64_t row_begin, int64_t row_end)
{
	vnni_rows_q8(out, os, m, x, n, row_begin, row_end, QUANT_MXFP4, VNNI_SC_PAIR);
}

static void vnni_rows_q8_q8_0(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
			      int64_t n, int64_t row_begin, int64_t row_end)
{
	vnni_rows_q8(out, os, m, x, n, row_begin, row_end, QUANT_Q8_0, VNNI_SC_PAIR);
}

static void vnni_rows_q8_q4_0(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
			      int64_t n, int64_t row_begin, int64_t row_end)
{
	vnni_rows_q8(out, os, m, x, n, row_begin, row_end, QUANT_Q4_0, VNNI_SC_PAIR);
}

/* Rows r .. r + rb - 1 of an int8 matrix against tokens t .. t + nt - 1's
 * int16 activations, in kernels_internal.h's sequence for
 * kernel_rows_q16_fn: run k's lanes (its weights widened once for every
 * token) into accumulator k % 2. rpg2: group 64, a scale per two runs;
 * otherwise the runs' groups are counted. */
VNNI_INLINE void vnni_q16_block(float *out, int64_t os, const struct qmatrix *m, int64_t r, const int rb,
				const struct act_q16 *x, int64_t t, const int nt, const int rpg2)
{
	int64_t cols = m->cols, group = m->group, runs = cols / 32, n_groups = cols / group, rpg = group / 32;
	const int8_t *q = (const int8_t *)m->data + r * cols;
	const float *s = m->scales + r * n_groups;
	const int16_t *xq = x->q + t * cols;
	const float *xd = x->d + t * runs;
	__m256 acc[VNNI_RB][VNNI_NT][2], sw[VNNI_RB];
#pragma GCC unroll 4
	for (int i = 0; i < rb; i++)
#pragma GCC unroll 4
		for (int j = 0; j < nt; j++)
			acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
	int64_t g = 0, in_group = 0;
	for (int64_t k = 0; k < runs; k += 2) {
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			if (h == 1 && k + 1 == runs)
				break;
			int64_t c = 32 * (k + h);
			if (rpg2 ? h == 0 : in_group == 0)
#pragma GCC unroll 4
				for (int i = 0; i < rb; i++)
					sw[i] = _mm256_broadcast_ss(s + i * n_groups + (rpg2 ? k / 2 : g));
			if (!rpg2 && ++in_group == rpg) {
				in_group = 0;
				g++;
			}
			__m256i wlo[VNNI_RB], whi[VNNI_RB];
#pragma GCC unroll 4
			for (int i = 0; i < rb; i++) {
				const int8_t *qi = q + i * cols + c;
				if (!h)
					_mm_prefetch((const char *)(qi + rb * cols), _MM_HINT_T0);
				wlo[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)qi));
				whi[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qi + 16)));
			}
#pragma GCC unroll 4
			for (int j = 0; j < nt; j++) {
				const int16_t *xj = xq + j * cols + c;
				__m256i xlo = _mm256_loadu_si256((const __m256i *)xj);
				__m256i xhi = _mm256_loadu_si256((const __m256i *)(xj + 16));
				__m256 dx = _mm256_broadcast_ss(xd + j * runs + k + h);
#pragma GCC unroll 4
				for (int i = 0; i < rb; i++) {
					__m256i p = _mm256_dpwssd_avx_epi32(_mm256_setzero_si256(), wlo[i], xlo);
					p = _mm256_dpwssd_avx_epi32(p, whi[i], xhi);
					acc[i][j][h] = _mm256_fmadd_ps(_mm256_mul_ps(sw[i], dx), _mm256_cvtepi32_ps(p),
								       acc[i][j][h]);
				}
			}
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < rb; i++)
#pragma GCC unroll 4
		for (int j = 0; j < nt; j++)
			out[j * os + i] = vnni_hsum(_mm256_add_ps(acc[i][j][0], acc[i][j][1]));
}

VNNI_INLINE void vnni_rows_q16(float *out, int64_t os, const struct qmatrix *m, const struct act_q16 *x, int64_t n,
			       int64_t row_begin, int64_t row_end, const int rpg2)
{
	int64_t t = 0;
	for (; t + 4 <= n; t += 4)
		for (int64_t r = row_begin; r < row_end; r++)
			vnni_q16_block(out + t * os + r, os, m, r, 1, x, t, 4, rpg2);
	for (; t < n; t++) {
		int64_t r = row_begin;
		for (; r + 2 <= row_end; r += 2)
			vnni_q16_block(out + t * os + r, os, m, r, 2, x, t, 1, rpg2);
		for (; r < row_end; r++)
			vnni_q16_block(out + t * os + r, os, m, r, 1, x, t, 1, rpg2);
	}
}

static void vnni_rows_q16_int8(float *out, int64_t os, const struct qmatrix *m, const struct act_q16 *x,
			       int64_t n, int64_t row_begin, int64_t row_end)
{
	if (m->group == 64)
		vnni_rows_q16(out, os, m, x, n, row_begin, row_end, 1);
	else
		vnni_rows_q16(out, os, m, x, n, row_begin, row_end, 0);
}

/* q4_k / q5_k: the block at b's eight 6-bit scales and mins as floats
 * (quant_k_scale_min, four at a time). */
VNNI_INLINE void vnni_k_scales(__m256 *sc, __m256 *mn, const uint8_t *b)
{
	uint64_t s, m;
	quant_k_scales8(&s, &m, b + 4);
	*sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s)));
	*mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
}

/* The little-endian half at p as a float (F16C, exact). */
VNNI_INLINE float vnni_half(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

/* What a K-type step keeps: rows r .. r + rb - 1, its tokens' activations
 * and, from token t, their per-pair extras (q4_k / q5_k: sum8 / 8 as
 * floats, 8 a pair; q6_k: -32 times each half-lane's sum of four x, 16 a
 * pair), the current block's d, dmin and scales per row, and the
 * accumulators. */
struct vnni_k_step {
	const uint8_t *q;
	const int8_t *xq;
	const float *xd;
	const void *extra;
	int64_t pairs, row_bytes;
	__m256 fd[VNNI_RB], fm[VNNI_RB], s0[VNNI_RB], s1[VNNI_RB];
	__m256i qh[VNNI_RB], ql0[VNNI_RB], ql1[VNNI_RB];
	__m256 acc[VNNI_RB][VNNI_NT];
};

/* Pair pp of block k (pair p = 4k + pp) of a K-type step against its
 * tokens, in kernels_internal.h's sequence for the type (see
 * matvec_avx512vnni.c's z_k_pair and z_q6_pair, the same steps on two
 * rows a register): q4_k / q5_k's unsigned q meet x as they are, sc_j * S
 * and m_j * sum8 / 8 as exact float products; q6_k's six bits u = q + 32
 * meet each half of a lane apart, (float)(s_a S_a + s_b S_b) one fused
 * multiply-add of exact floats. */
VNNI_INLINE void vnni_k_pair(struct vnni_k_step *st, int64_t k, const int pp, const int rb, const int nt,
			     const enum quant_type type)
{
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	int64_t p = 4 * k + pp;
	struct vnni_pair w[VNNI_RB];
	__m256 sa[VNNI_RB], sb[VNNI_RB];
#pragma GCC unroll 4
	for (int i = 0; i < rb; i++) {
		__m256i u0, u1; /* run 2p's u (inputs 0..31), run 2p + 1's */
		if (type == QUANT_Q6_K) {
			const __m256i bits45 = _mm256_set1_epi8(0x30);
			const int s = 4 * pp;
			__m256i l0 = pp & 1 ? _mm256_srli_epi16(st->ql0[i], 4) : st->ql0[i];
			__m256i l1 = pp & 1 ? _mm256_srli_epi16(st->ql1[i], 4) : st->ql1[i];
			__m256i h0 = pp & 1 ? st->qh[i] : _mm256_slli_epi16(st->qh[i], 4);
			__m256i h1 = pp & 1 ? _mm256_srli_epi16(st->qh[i], 2) : _mm256_slli_epi16(st->qh[i], 2);
			u0 = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(h0, bits45));
			u1 = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(h1, bits45));
			/* scales s, s + 2 (runs' low halves), s + 1, s + 3 (high) */
			const __m256i ia = _mm256_setr_epi32(s % 8, s % 8, s % 8, s % 8, s % 8 + 2, s % 8 + 2, s % 8 + 2,
							     s % 8 + 2);
			__m256 tab = pp < 2 ? st->s0[i] : st->s1[i];
			sa[i] = _mm256_permutevar8x32_ps(tab, ia);
			sb[i] = _mm256_permutevar8x32_ps(tab, _mm256_add_epi32(ia, _mm256_set1_epi32(1)));
		} else {
			const int is_q5 = type == QUANT_Q5_K;
			const int64_t bs = is_q5 ? QUANT_Q5_K_BYTES : QUANT_Q4_K_BYTES;
			const uint8_t *b = st->q + i * st->row_bytes + k * bs;
			__m256i v = _mm256_loadu_si256((const __m256i *)(b + (is_q5 ? 48 : 16) + 32 * pp));
			u0 = _mm256_and_si256(v, low4);
			u1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
			if (is_q5) {
				/* bits 2pp, 2pp + 1 of qh to bit 4 (the and drops what
				 * crosses bytes) */
				const __m256i bit4 = _mm256_set1_epi8(0x10);
				__m256i h0 = pp == 3 ? _mm256_srli_epi16(st->qh[i], 2) : _mm256_slli_epi16(st->qh[i], 4 - 2 * pp);
				__m256i h1 = pp >= 2 ? _mm256_srli_epi16(st->qh[i], 2 * pp - 3)
						     : _mm256_slli_epi16(st->qh[i], 3 - 2 * pp);
				u0 = _mm256_or_si256(u0, _mm256_and_si256(h0, bit4));
				u1 = _mm256_or_si256(u1, _mm256_and_si256(h1, bit4));
			}
			const __m256i iq = _mm256_setr_epi32(2 * pp, 2 * pp, 2 * pp, 2 * pp, 2 * pp + 1, 2 * pp + 1,
							     2 * pp + 1, 2 * pp + 1);
			sa[i] = _mm256_permutevar8x32_ps(st->s0[i], iq); /* sc */
			sb[i] = _mm256_permutevar8x32_ps(st->s1[i], iq); /* m */
		}
		w[i].lo = _mm256_permute2x128_si256(u0, u1, 0x20);
		w[i].hi = _mm256_permute2x128_si256(u0, u1, 0x31);
	}
#pragma GCC unroll 4
	for (int j = 0; j < nt; j++) {
		int64_t o = j * st->pairs + p;
		__m256i xlo = _mm256_loadu_si256((const __m256i *)(st->xq + 64 * o));
		__m256i xhi = _mm256_loadu_si256((const __m256i *)(st->xq + 64 * o + 32));
		__m256 dx = _mm256_loadu_ps(st->xd + 8 * o);
#pragma GCC unroll 4
		for (int i = 0; i < rb; i++) {
			if (type == QUANT_Q6_K) {
				const int32_t *neg = (const int32_t *)st->extra + 16 * o;
				__m256i ia = _mm256_dpbusd_avx_epi32(_mm256_loadu_si256((const __m256i *)neg), w[i].lo, xlo);
				__m256i ib = _mm256_dpbusd_avx_epi32(_mm256_loadu_si256((const __m256i *)(neg + 8)), w[i].hi, xhi);
				__m256 lanes = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), sa[i],
							       _mm256_mul_ps(_mm256_cvtepi32_ps(ib), sb[i]));
				st->acc[i][j] = _mm256_fmadd_ps(_mm256_mul_ps(st->fd[i], dx), lanes, st->acc[i][j]);
			} else {
				__m256 sumx = _mm256_loadu_ps((const float *)st->extra + 8 * o);
				__m256i lanes = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w[i].lo, xlo);
				lanes = _mm256_dpbusd_avx_epi32(lanes, w[i].hi, xhi);
				__m256 a = _mm256_fmadd_ps(_mm256_mul_ps(st->fd[i], dx),
							   _mm256_mul_ps(_mm256_cvtepi32_ps(lanes), sa[i]), st->acc[i][j]);
				st->acc[i][j] = _mm256_fnmadd_ps(_mm256_mul_ps(st->fm[i], dx), _mm256_mul_ps(sb[i], sumx), a);
			}
		}
	}
}

/* Rows r .. r + rb - 1 of a K-type matrix against tokens t .. t + nt - 1
 * (extra as struct vnni_k_step has it, from token t), block after block. */
VNNI_INLINE void vnni_k_block(float *out, int64_t os, const struct qmatrix *m, int64_t r, const int rb,
			      const struct act_q8 *x, int64_t t, const int nt, const void *extra,
			      const enum quant_type type)
{
	const int64_t bs = type == QUANT_Q6_K ? QUANT_Q6_K_BYTES : type == QUANT_Q5_K ? QUANT_Q5_K_BYTES
											: QUANT_Q4_K_BYTES;
	struct vnni_k_step st;
	st.pairs = x->pairs;
	st.row_bytes = m->cols / QUANT_K_BLOCK * bs;
	st.q = (const uint8_t *)m->data + r * st.row_bytes;
	st.xq = x->q + t * st.pairs * 64;
	st.xd = x->d + t * st.pairs * 8;
	st.extra = extra;
#pragma GCC unroll 4
	for (int i = 0; i < rb; i++)
#pragma GCC unroll 4
		for (int j = 0; j < nt; j++)
			st.acc[i][j] = _mm256_setzero_ps();
	for (int64_t k = 0; k < m->cols / QUANT_K_BLOCK; k++) {
#pragma GCC unroll 4
		for (int i = 0; i < rb; i++) {
			const uint8_t *b = st.q + i * st.row_bytes + k * bs;
			for (int64_t o = 0; o < bs; o += 64)
				_mm_prefetch((const char *)(b + rb * st.row_bytes + o), _MM_HINT_T0);
			if (type == QUANT_Q6_K) {
				__m128i sv = _mm_loadu_si128((const __m128i *)(b + 192));
				st.s0[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sv));
				st.s1[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sv, sv)));
				st.fd[i] = _mm256_set1_ps(vnni_half(b + 208));
			} else {
				vnni_k_scales(&st.s0[i], &st.s1[i], b);
				st.fd[i] = _mm256_set1_ps(vnni_half(b));
				st.fm[i] = _mm256_set1_ps(vnni_half(b + 2));
				if (type == QUANT_Q5_K)
					st.qh[i] = _mm256_loadu_si256((const __m256i *)(b + 16));
			}
		}
#pragma GCC unroll 2
		for (int hf = 0; hf < 2; hf++) {
			if (type == QUANT_Q6_K)
#pragma GCC unroll 4
				for (int i = 0; i < rb; i++) {
					const uint8_t *b = st.q + i * st.row_bytes + k * bs;
					st.ql0[i] = _mm256_loadu_si256((const __m256i *)(b + 64 * hf));
					st.ql1[i] = _mm256_loadu_si256((const __m256i *)(b + 64 * hf + 32));
					st.qh[i] = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * hf));
				}
			vnni_k_pair(&st, k, 2 * hf, rb, nt, type);
			vnni_k_pair(&st, k, 2 * hf + 1, rb, nt, type);
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < rb; i++)
#pragma GCC unroll 4
		for (int j = 0; j < nt; j++)
			out[j * os + i] = vnni_hsum(st.acc[i][j]);
}

/* The per-pair extras of tokens t .. t + nt - 1 (struct vnni_k_step),
 * once per token group. */
VNNI_INLINE void vnni_k_extra_fill(void *extra, const struct act_q8 *x, int64_t t, int64_t nt,
				   const enum quant_type type)
{
	const int64_t first = t * x->pairs;
	for (int64_t i = 0; i < nt * x->pairs; i++) {
		if (type == QUANT_Q6_K) {
			/* vpdpbusd of 32s against the lanes' low halves, then high */
			const __m256i w32 = _mm256_set1_epi8(32);
			const int8_t *xq = x->q + 64 * (first + i);
			int32_t *neg = (int32_t *)extra + 16 * i;
			__m256i a = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w32,
							    _mm256_loadu_si256((const __m256i *)xq));
			__m256i b = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w32,
							    _mm256_loadu_si256((const __m256i *)(xq + 32)));
			_mm256_storeu_si256((__m256i *)neg, _mm256_sub_epi32(_mm256_setzero_si256(), a));
			_mm256_storeu_si256((__m256i *)(neg + 8), _mm256_sub_epi32(_mm256_setzero_si256(), b));
		} else {
			__m256i x8 = _mm256_loadu_si256((const __m256i *)(x->sum8 + 8 * (first + i)));
			_mm256_storeu_ps((float *)extra + 8 * i, _mm256_cvtepi32_ps(_mm256_srai_epi32(x8, 3)));
		}
	}
}

/* The K types' rows, blocked as vnni_rows_q8 with each token group's
 * extras made once in VNNI_NEG 32-bit words (q6_k's two a pair, which
 * halve what fits); rows too long for one token's take the AVX2 kernel. */
VNNI_INLINE void vnni_rows_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x, int64_t n,
			     int64_t row_begin, int64_t row_end, const enum quant_type type)
{
	int32_t extra[VNNI_NEG];
	int64_t t = 0, words = (type == QUANT_Q6_K ? 16 : 8) * x->pairs;
	for (; t + 4 <= n && 4 * words <= VNNI_NEG; t += 4) {
		vnni_k_extra_fill(extra, x, t, 4, type);
		for (int64_t r = row_begin; r < row_end; r++)
			vnni_k_block(out + t * os + r, os, m, r, 1, x, t, 4, extra, type);
	}
	for (; t < n && words <= VNNI_NEG; t++) {
		vnni_k_extra_fill(extra, x, t, 1, type);
		int64_t r = row_begin;
		for (; r + 2 <= row_end; r += 2)
			vnni_k_block(out + t * os + r, os, m, r, 2, x, t, 1, extra, type);
		for (; r < row_end; r++)
			vnni_k_block(out + t * os + r, os, m, r, 1, x, t, 1, extra, type);
	}
	if (t < n) {
		struct act_q8 rest = { .q = x->q + t * x->pairs * 64, .d = x->d + t * x->pairs * 8,
				       .sum8 = x->sum8 + t * x->pairs * 8, .pairs = x->pairs };
		if (type == QUANT_Q4_K)
			avx2_rows_q8_q4_k(out + t * os, os, m, &rest, n - t, row_begin, row_end);
		else if (type == QUANT_Q5_K)
			avx2_rows_q8_q5_k(out + t * os, os, m, &rest, n - t, row_begin, row_end);
		else
			avx2_rows_q8_q6_k(out + t * os, os, m, &rest, n - t, row_begin, row_end);
	}
}

static void vnni_rows_q8_q4_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
			      int64_t n, int64_t row_begin, int64_t row_end)
{
	vnni_rows_k(out, os, m, x, n, row_begin, row_end, QUANT_Q4_K);
}

static void vnni_rows_q8_q5_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
			      int64_t n, int64_t row_begin, int64_t row_end)
{
	vnni_rows_k(out, os, m, x, n, row_begin, row_end, QUANT_Q5_K);
}

static void vnni_rows_q8_q6_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
			      int64_t n, int64_t row_begin, int64_t row_end)
{
	vnni_rows_k(out, os, m, x, n, row_begin, row_end, QUANT_Q6_K);
}

void kernels_vnni_avx2(struct kernels_ops *ops)
{
	ops->rows_q8[QUANT_INT8] = vnni_rows_q8_int8;
	ops->rows_q8[QUANT_INT4] = vnni_rows_q8_int4;
	ops->rows_q8[QUANT_MXFP4] = vnni_rows_q8_mxfp4;
	ops->rows_q8[QUANT_Q8_0] = vnni_rows_q8_q8_0;
	ops->rows_q8[QUANT_Q4_0] = vnni_rows_q8_q4_0;
	ops->rows_q8[QUANT_Q4_K] = vnni_rows_q8_q4_k;
	ops->rows_q8[QUANT_Q5_K] = vnni_rows_q8_q5_k;
	ops->rows_q8[QUANT_Q6_K] = vnni_rows_q8_q6_k;
	ops->rows_q16 = vnni_rows_q16_int8;
}
