/*
 * kernels_internal — what the kernel files of compute/ share: the table of
 * SIMD-specific entry points and the per-level tables, so that kernels.c can
 * dispatch and the tests can call the scalar and SIMD versions side by side.
 *
 * Invariant shared by every kernel_rows_fn: the value written for (token t,
 * row r) depends only on row r of the matrix and on token t's activations,
 * through one fixed sequence of floating-point operations per SIMD level.
 * It does not depend on n, on which other rows or tokens are in the same
 * call, nor on the thread that runs it. That is what makes matmul row t
 * bit-identical to matvec and results independent of the thread count.
 */
#ifndef COLIBRI_COMPUTE_KERNELS_INTERNAL_H
#define COLIBRI_COMPUTE_KERNELS_INTERNAL_H

#include <stdint.h>

#include "compute/cpu.h"
#include "compute/quant.h"

/* out[t * out_stride + r] = dot(row r of m, x + t * m->cols) for t in [0, n)
 * and r in [row_begin, row_end). Allocates nothing. */
typedef void (*kernel_rows_fn)(float *out, int64_t out_stride, const struct qmatrix *m,
			       const float *x, int64_t n, int64_t row_begin, int64_t row_end);

struct kernels_ops {
	const char *name;
	kernel_rows_fn rows[4]; /* indexed by enum quant_type */
	float (*dot_f32)(const float *a, const float *b, int64_t n);
	void (*axpy_f32)(float *out, float a, const float *x, int64_t n);
};

extern const struct kernels_ops kernels_ops_scalar;
extern const struct kernels_ops kernels_ops_avx2;
extern const struct kernels_ops kernels_ops_avx512;

/* Table of a level; the caller must know the machine supports it. */
const struct kernels_ops *kernels_ops_for(enum cpu_simd level);

/* Table of cpu_simd_level(), chosen once per process. */
const struct kernels_ops *kernels_ops_get(void);

#endif
