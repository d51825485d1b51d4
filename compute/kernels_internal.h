/*
 * kernels_internal — what the kernel files of compute/ share: the table of
 * SIMD-specific entry points and the per-level tables, so that kernels.c can
 * dispatch and the tests can call the scalar and SIMD versions side by side.
 *
 * Invariant shared by every kernel_rows_fn: the value written for (token t,
 * row r) depends only on row r of the matrix and on token t's activations,
 * through one fixed sequence of floating-point operations, the same at every
 * SIMD level (docs/ARITHMETIC.md).
 * It does not depend on n, on which other rows or tokens are in the same
 * call, nor on the thread that runs it. That is what makes matmul row t
 * bit-identical to matvec and results independent of the thread count.
 */
#ifndef COLIBRI_COMPUTE_KERNELS_INTERNAL_H
#define COLIBRI_COMPUTE_KERNELS_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "compute/cpu.h"
#include "compute/quant.h"

/* out[t * out_stride + r] = dot(row r of m, x + t * m->cols) for t in [0, n)
 * and r in [row_begin, row_end). Allocates nothing. */
typedef void (*kernel_rows_fn)(float *out, int64_t out_stride, const struct qmatrix *m,
			       const float *x, int64_t n, int64_t row_begin, int64_t row_end);

/* A token's activations quantized for the int8 dot products (see
 * kernels_set_activations in kernels.h). The inputs go in runs of 32, each
 * run quantized to int8 with its own scale d = max|x| / 127 (0 for an
 * all-zero run; NaN, with q = 0, when the run holds a NaN or an infinity),
 * q = round(x / d) in [-127, 127]. Runs k, k + 1 (k even) form pair k / 2;
 * a missing last run of the pair is all zeros. Per pair and token:
 *   q     64 bytes: x_k[0..15], x_k+1[0..15], x_k[16..31], x_k+1[16..31]
 *         (so 32 bytes of int4 weights, two runs' low nibbles then high
 *         nibbles, meet their inputs without a shuffle)
 *   d     8 floats, the scale of each lane: d_k four times, then d_k+1
 *   sum8  8 int32, 8 * the sum of each lane's eight q: what int4's stored
 *         offset of 8 contributes
 * Lane l < 4 of a pair holds run k's inputs 4l..4l+3 and 16+4l..16+4l+3,
 * lane 4 + l the same inputs of run k + 1. Token t of n starts at pair
 * t * pairs. */
struct act_q8 {
	const int8_t *q;
	const float *d;
	const int32_t *sum8;
	int64_t pairs;           /* per token: ceil(cols / 64) */
};

/* Where input c (of a token) sits in q, and which lane it belongs to. */
static inline int64_t act_q8_pos(int64_t c)
{
	int64_t i = c % 32, h = (c / 32) % 2;
	return (c / 64) * 64 + (i / 16) * 32 + h * 16 + i % 16;
}

static inline int64_t act_q8_lane(int64_t c)
{
	return (c / 64) * 8 + ((c / 32) % 2) * 4 + (c % 16) / 4;
}

/* As kernel_rows_fn, for int8 / int4 matrices against quantized
 * activations. One fixed sequence per (row, token), the same at every SIMD
 * level: for each pair, lane l's exact integer sum p[l] of w * q over its
 * eight inputs, d[l] = scale_w(group of the lane's run) * the lane's d, and
 * acc[l] = fmaf(d[l], (float)p[l], acc[l]) (acc starts at 0); then the result
 * is ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). Integer sums are
 * exact, so every level writes the same bits. An MXFP4 weight enters as
 * the integer 2 * e2m1 (in [-12, 12]) with scale_w = 2^(e - 128) of its
 * block (quant_e8m0_to_f32(e, 1)): the same weight exactly, and the same
 * sequence. */
typedef void (*kernel_rows_q8_fn)(float *out, int64_t out_stride, const struct qmatrix *m,
				  const struct act_q8 *x, int64_t n, int64_t row_begin,
				  int64_t row_end);

/* The GGML block types take the same lanes and the same final sum; what
 * one lane of one run adds to acc[l] (S the exact integer sum of q * x_q
 * over the lane's eight inputs, d_x the lane's d, all halves f16 -> f32):
 *   q8_0  q = int8 of the block; acc = fmaf(d * d_x, (float)S, acc)
 *   q4_0  q = nibble - 8, the same (int8 / int4 at group 32, d per run)
 *   q4_k  the run is sub-block j, q = nibble in 0..15, q5_k the same
 *   q5_k  with the fifth bit, q in 0..31:
 *           acc = fmaf(d * d_x, (float)(sc_j * S), acc);
 *           acc = fmaf(-(dmin * d_x), (float)(m_j * (sum8 / 8)), acc)
 *         (w = d * sc_j * q - dmin * m_j, so the run gives d * d_x * sc_j *
 *         sum(q x_q) - dmin * d_x * m_j * sum(x_q); sc_j * S < 2^21 and
 *         m_j * sum8 / 8 < 2^16 are exact in f32)
 *   q6_k  the run is sub-blocks 2j', 2j' + 1 of 16 (scales s_a, s_b, int8),
 *         q in -32..31; a lane has four inputs in each:
 *           acc = fmaf(d * d_x, (float)(s_a * S_a + s_b * S_b), acc)
 *         (|s_a S_a + s_b S_b| <= 2 * 128 * 4 * 32 * 127 < 2^23, exact).
 * A lone last run of q8_0 / q4_0 (an odd number of runs) leaves lanes 4..7
 * of its pair to fmaf(0, 0, acc) with d = 0. Integers exact, one float
 * order: every level writes the same bits. */

/* Sub-block j's 6-bit scale and min of a q4_k / q5_k block (quant.h). */
static inline void quant_k_scale_min(const uint8_t *scales, int j, int *sc, int *mn)
{
	if (j < 4) {
		*sc = scales[j] & 63;
		*mn = scales[j + 4] & 63;
	} else {
		*sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4;
		*mn = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
	}
}

/* All eight sub-blocks' 6-bit scales and mins of a q4_k / q5_k block at
 * once (quant_k_scale_min four at a time): scale j in byte j of *sc, min j
 * in byte j of *mn (little-endian), for the SIMD kernels to widen. */
static inline void quant_k_scales8(uint64_t *sc, uint64_t *mn, const uint8_t *scales)
{
	uint32_t u0, u1, u2;
	memcpy(&u0, scales, 4);
	memcpy(&u1, scales + 4, 4);
	memcpy(&u2, scales + 8, 4);
	uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4;
	uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4;
	*sc = (u0 & 0x3f3f3f3fu) | (uint64_t)sc_hi << 32;
	*mn = (u1 & 0x3f3f3f3fu) | (uint64_t)mn_hi << 32;
}

/* Bytes of q, and floats of d (= int32s of sum8), for n tokens of cols. */
static inline int64_t act_q8_bytes(int64_t n, int64_t cols)
{
	return n * ((cols + 63) / 64) * 64;
}

static inline int64_t act_q8_lanes(int64_t n, int64_t cols)
{
	return n * ((cols + 63) / 64) * 8;
}

/* Quantizes n tokens of cols activations (cols % 32 == 0) into q, d and sum8
 * (act_q8_bytes / act_q8_lanes long) and points a at them, with ops's
 * act_q8_run. */
struct kernels_ops;
void act_q8_quantize(const struct kernels_ops *ops, struct act_q8 *a, int8_t *q, float *d,
		     int32_t *sum8, const float *x, int64_t n, int64_t cols);

/* One run of 32 inputs x: q of inputs 0..15 into lo[16], of 16..31 into
 * hi[16]; returns the run's d. Rounding to nearest even (rintf, what the
 * vector conversion does), so every level writes the same bytes. */
typedef float (*act_q8_run_fn)(int8_t *lo, int8_t *hi, const float *x);

/* A token's activations quantized to int16 for int8 weights: per run of 32
 * inputs, d = max|x| / 32767 (0 for an all-zero run; NaN, with q = 0, for a
 * run holding a NaN or an infinity) and q = round(x / d) in natural order.
 * Token t of n starts at q + t * cols, d + t * cols / 32. */
struct act_q16 {
	const int16_t *q;
	const float *d;
	int64_t cols;
};

/* As kernel_rows_fn, for int8 matrices against int16 activations. The fixed
 * sequence, the same at every level: run k's eight lanes, lane l the exact
 * integer sum over inputs 2l, 2l + 1, 16 + 2l, 17 + 2l of w * q (below 2^24,
 * so exact in f32 too), go into accumulator k % 2 as fmaf(scale_w * d_k,
 * (float)lane, acc); then a[l] = acc0[l] + acc1[l] and the result is
 * ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
typedef void (*kernel_rows_q16_fn)(float *out, int64_t out_stride, const struct qmatrix *m,
				   const struct act_q16 *x, int64_t n, int64_t row_begin,
				   int64_t row_end);

/* One run of 32 inputs x to int16 q[32]; returns its d (rounding to
 * nearest even, as for act_q8_run_fn). */
typedef float (*act_q16_run_fn)(int16_t *q, const float *x);

/* Quantizes n tokens of cols activations (cols % 32 == 0) into q[n * cols]
 * and d[n * cols / 32] with ops's act_q16_run and points a at them. */
void act_q16_quantize(const struct kernels_ops *ops, struct act_q16 *a, int16_t *q, float *d,
		      const float *x, int64_t n, int64_t cols);

struct kernels_ops {
	const char *name;
	kernel_rows_fn rows[QUANT_TYPE_COUNT]; /* indexed by enum quant_type */
	kernel_rows_q8_fn rows_q8[QUANT_TYPE_COUNT]; /* INT8, INT4, MXFP4, the GGML blocks */
	act_q8_run_fn act_q8_run;
	kernel_rows_q16_fn rows_q16;   /* QUANT_INT8 */
	act_q16_run_fn act_q16_run;
	float (*dot_f32)(const float *a, const float *b, int64_t n);
	void (*axpy_f32)(float *out, float a, const float *x, int64_t n);
};

extern const struct kernels_ops kernels_ops_scalar;
extern const struct kernels_ops kernels_ops_avx2;
extern const struct kernels_ops kernels_ops_avx512;

/* The AVX2 int8 dot products, which the AVX-512 table shares (AVX-512BW
 * runs them on 256-bit registers). */
void avx2_rows_q8_int8(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end);
void avx2_rows_q8_int4(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end);
void avx2_rows_q8_mxfp4(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
			int64_t n, int64_t row_begin, int64_t row_end);
void avx2_rows_q8_q8_0(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end);
void avx2_rows_q8_q4_0(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end);
void avx2_rows_q8_q4_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end);
void avx2_rows_q8_q5_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end);
void avx2_rows_q8_q6_k(float *out, int64_t os, const struct qmatrix *m, const struct act_q8 *x,
		       int64_t n, int64_t row_begin, int64_t row_end);
float avx2_act_q8_run(int8_t *lo, int8_t *hi, const float *x);
void avx2_rows_q16_int8(float *out, int64_t os, const struct qmatrix *m, const struct act_q16 *x,
			int64_t n, int64_t row_begin, int64_t row_end);
float avx2_act_q16_run(int16_t *q, const float *x);

/* Replace a copy of the AVX2 / AVX-512 table's integer dot products (rows_q8,
 * rows_q16) with their AVX-VNNI / AVX512-VNNI versions
 * (matvec_avxvnni.c, matvec_avx512vnni.c): the same bits, fewer
 * instructions. */
void kernels_vnni_avx2(struct kernels_ops *ops);
void kernels_vnni_avx512(struct kernels_ops *ops);

/* Table of a level; the caller must know the machine supports it. */
const struct kernels_ops *kernels_ops_for(enum cpu_simd level);

/* Table of cpu_simd_level(), chosen once per process, or of the level
 * kernels_set_level chose. */
const struct kernels_ops *kernels_ops_get(void);

/* From now on every kernel of the process runs at `level` (tests compare the
 * levels' bits in one process; set it while no kernel runs). -ENOTSUP if the
 * machine lacks it. */
int kernels_set_level(enum cpu_simd level);

#endif
