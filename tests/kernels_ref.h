/*
 * kernels_ref — what the kernel tests share (test_kernels.c,
 * test_kernels_q8.c): matrices of every weight type made from random
 * bytes with this file's own dequantization (the test's own reading of
 * the quant.h layouts, not the engine's), random vectors, and the ragged
 * shapes every level is checked on.
 */
#ifndef COLIBRI_TESTS_KERNELS_REF_H
#define COLIBRI_TESTS_KERNELS_REF_H

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>

#include "compute/cpu.h"
#include "compute/kernels.h"
#include "compute/kernels_internal.h"
#include "compute/threadpool.h"
#include "tests/test_util.h"

struct tmat {
	void *blob;
	struct qmatrix m;
	double *deq; /* [rows, cols], dequantized by this file's own decoder */
};

/* The test's own reading of the quant.h layouts. */
static inline double ref_weight(const struct qmatrix *m, int64_t r, int64_t c)
{
	switch (m->type) {
	case QUANT_F32:
		return ((const float *)m->data)[r * m->cols + c];
	case QUANT_BF16: {
		uint32_t u = (uint32_t)((const uint16_t *)m->data)[r * m->cols + c] << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	case QUANT_INT8: {
		int q = ((const int8_t *)m->data)[r * m->cols + c];
		return q * (double)m->scales[r * (m->cols / m->group) + c / m->group];
	}
	case QUANT_INT4: {
		const uint8_t *row = (const uint8_t *)m->data + r * m->cols / 2;
		int64_t run = c / 32, i = c % 32;
		uint8_t b = row[run * 16 + i % 16];
		int q = (i < 16 ? (b & 15) : (b >> 4)) - 8;
		return q * (double)m->scales[r * (m->cols / m->group) + c / m->group];
	}
	case QUANT_MXFP4: {
		static const double mag[8] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6 };
		const uint8_t *row = (const uint8_t *)m->data + r * (m->cols / 2 + m->cols / 32);
		int64_t run = c / 32, i = c % 32;
		uint8_t b = row[run * 16 + i % 16];
		int n = i < 16 ? (b & 15) : (b >> 4);
		double v = (n & 8) ? -mag[n & 7] : mag[n & 7];
		return ldexp(v, (int)row[m->cols / 2 + run] - 127);
	}
	case QUANT_F16: {
		uint16_t h = ((const uint16_t *)m->data)[r * m->cols + c];
		int e = (h >> 10) & 31, man = h & 1023;
		double v = e == 0 ? ldexp(man, -24) : e == 31 ? (man ? NAN : INFINITY) : ldexp(1024 + man, e - 25);
		return (h & 0x8000) ? -v : v;
	}
	case QUANT_Q8_0:
	case QUANT_Q4_0:
	case QUANT_Q4_K:
	case QUANT_Q5_K:
	case QUANT_Q6_K: {
		/* The block formats' decoder is quant.c's, checked bit for bit
		 * against tools/ggml_blocks.py in test_quant. */
		float blk[256];
		uint64_t bb = quant_data_bytes(m->type, 1, m->group);
		const uint8_t *row = (const uint8_t *)m->data + r * quant_data_bytes(m->type, 1, m->cols);
		quant_block_dequantize(blk, m->type, row + (c / m->group) * bb);
		return blk[c % m->group];
	}
	}
	return NAN;
}

/* The scale the int8 dot products take for weight (r, c): the group's
 * float, or 2^(e - 128) of an mxfp4 block (its weights then 2 * e2m1). */
static inline double ref_wscale(const struct qmatrix *m, int64_t r, int64_t c)
{
	if (m->type == QUANT_MXFP4) {
		const uint8_t *row = (const uint8_t *)m->data + r * (m->cols / 2 + m->cols / 32);
		return ldexp(1.0, (int)row[m->cols / 2 + c / 32] - 128);
	}
	return m->scales[r * (m->cols / m->group) + c / m->group];
}

static inline int is_q8_type(enum quant_type t)
{
	return t == QUANT_INT8 || t == QUANT_INT4 || t == QUANT_MXFP4;
}

static inline int is_block_type(enum quant_type t)
{
	return t >= QUANT_Q8_0 && t <= QUANT_Q6_K;
}

/* A random finite half, |h| in [0.001, 0.1), positive unless `signed_`. */
static inline void rand_half(uint8_t *p, uint64_t *seed, int signed_)
{
	float v = 0.001f + 0.0495f * (tu_randf(seed) + 1.0f);
	if (signed_ && tu_randf(seed) < 0)
		v = -v;
	uint16_t h = f32_to_f16(v);
	memcpy(p, &h, 2);
}

/* Random blocks of a GGML block type: random bytes, then every d (and
 * dmin) overwritten with a random finite half, as llama.cpp's files hold. */
static inline void rand_blocks(uint8_t *blob, enum quant_type type, int64_t rows, int64_t cols, uint64_t seed)
{
	uint64_t bytes = quant_data_bytes(type, rows, cols);
	for (uint64_t i = 0; i < bytes; i++)
		blob[i] = (uint8_t)(tu_randf(&seed) * 128.0f + 128.0f);
	int64_t qk = type == QUANT_Q8_0 || type == QUANT_Q4_0 ? 32 : 256;
	uint64_t bs = quant_data_bytes(type, 1, qk);
	for (uint64_t k = 0; k < bytes / bs; k++) {
		uint8_t *b = blob + k * bs;
		if (type == QUANT_Q6_K) {
			rand_half(b + 208, &seed, 1);
		} else if (type == QUANT_Q4_K || type == QUANT_Q5_K) {
			rand_half(b, &seed, 0);
			rand_half(b + 2, &seed, 0);
		} else {
			rand_half(b, &seed, 1);
		}
	}
}

static inline void tmat_make(struct tmat *t, enum quant_type type, int64_t rows, int64_t cols,
		      int32_t group, uint64_t seed)
{
	cr_assert_eq(quant_check_shape(type, rows, cols, group), 0);
	float *w = malloc(sizeof(float) * rows * cols);
	for (int64_t i = 0; i < rows * cols; i++)
		w[i] = tu_randf(&seed) * 0.5f;
	t->blob = malloc(quant_matrix_bytes(type, rows, cols, group));
	if (is_block_type(type))
		rand_blocks(t->blob, type, rows, cols, seed);
	else
		quant_matrix_quantize(t->blob, w, type, rows, cols, group);
	quant_matrix_view(&t->m, t->blob, type, rows, cols, group);
	t->deq = malloc(sizeof(double) * rows * cols);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			t->deq[r * cols + c] = ref_weight(&t->m, r, c);
	free(w);
}

static inline void tmat_free(struct tmat *t)
{
	free(t->blob);
	free(t->deq);
}

static inline float *rand_vec(int64_t n, uint64_t seed)
{
	float *v = malloc(sizeof(float) * (n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++)
		v[i] = tu_randf(&seed);
	return v;
}

/* sum |w||x| of one row, the scale of the rounding error a dot may make. */
static inline double row_abs(const struct tmat *t, int64_t r, const float *x)
{
	double s = 0;
	for (int64_t c = 0; c < t->m.cols; c++)
		s += fabs(t->deq[r * t->m.cols + c] * x[c]);
	return s;
}

struct shape {
	enum quant_type type;
	int64_t rows, cols;
	int32_t group;
};

static const struct shape shapes[] = {
	{ QUANT_F32, 1, 1, 0 },      { QUANT_F32, 7, 5, 0 },       { QUANT_F32, 13, 17, 0 },
	{ QUANT_F32, 33, 64, 0 },    { QUANT_F32, 9, 257, 0 },     { QUANT_F32, 21, 1000, 0 },
	{ QUANT_BF16, 1, 3, 0 },     { QUANT_BF16, 7, 15, 0 },     { QUANT_BF16, 17, 80, 0 },
	{ QUANT_BF16, 9, 129, 0 },   { QUANT_BF16, 33, 1031, 0 },  { QUANT_INT8, 1, 32, 32 },
	{ QUANT_INT8, 7, 96, 32 },   { QUANT_INT8, 17, 192, 64 },  { QUANT_INT8, 9, 320, 64 },
	{ QUANT_INT8, 5, 384, 128 }, { QUANT_INT4, 1, 32, 32 },    { QUANT_INT4, 7, 96, 32 },
	{ QUANT_INT4, 17, 192, 64 }, { QUANT_INT4, 33, 960, 64 },  { QUANT_INT4, 5, 384, 128 },
	{ QUANT_INT4, 3, 320, 160 },  { QUANT_MXFP4, 1, 32, 32 },   { QUANT_MXFP4, 7, 96, 32 },
	{ QUANT_MXFP4, 17, 192, 32 }, { QUANT_MXFP4, 33, 960, 32 }, { QUANT_MXFP4, 5, 352, 32 },
	{ QUANT_MXFP4, 3, 2880, 32 }, { QUANT_MXFP4, 19, 160, 32 },
	{ QUANT_F16, 1, 3, 0 },       { QUANT_F16, 7, 15, 0 },      { QUANT_F16, 17, 80, 0 },
	{ QUANT_F16, 9, 129, 0 },     { QUANT_F16, 33, 1031, 0 },   { QUANT_Q8_0, 1, 32, 0 },
	{ QUANT_Q8_0, 7, 96, 0 },     { QUANT_Q8_0, 17, 192, 0 },   { QUANT_Q8_0, 33, 2880, 0 },
	{ QUANT_Q4_0, 1, 32, 0 },     { QUANT_Q4_0, 7, 96, 0 },     { QUANT_Q4_0, 19, 160, 0 },
	{ QUANT_Q4_0, 5, 4096, 0 },   { QUANT_Q4_K, 1, 256, 0 },    { QUANT_Q4_K, 7, 512, 0 },
	{ QUANT_Q4_K, 19, 768, 0 },   { QUANT_Q4_K, 3, 2816, 0 },   { QUANT_Q5_K, 1, 256, 0 },
	{ QUANT_Q5_K, 9, 512, 0 },    { QUANT_Q5_K, 17, 1280, 0 },  { QUANT_Q6_K, 1, 256, 0 },
	{ QUANT_Q6_K, 13, 768, 0 },   { QUANT_Q6_K, 5, 2048, 0 },
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

#endif
