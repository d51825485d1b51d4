/*
 * test_kernels — compute/kernels.h and the per-level tables of
 * kernels_internal.h:
 *  - the scalar matvec of every weight type against a naive
 *    dequantize-then-dot in double precision written here;
 *  - every SIMD level the CPU has (skipped with a reason otherwise)
 *    bit-identical to scalar (docs/ARITHMETIC.md), on ragged shapes: row
 *    counts off the vector width, odd group counts, f32/bf16 column tails,
 *    1..7 tokens; dot and axpy too, with lanes holding -0;
 *  - matmul row t bit-identical to matvec on token t, per level;
 *  - matmul_pair's two outputs bit-identical to two matmuls;
 *  - public matvec/matmul bit-identical with no pool and pools of 1, 2, 3,
 *    with f32 and with int8 activations;
 *  - mxfp4: thread counts and batch sizes bit-identical with either
 *    activations, and against an f32 matvec of its dequantized matrix;
 *  - int16 activations for int8 weights: every level bit-identical to
 *    scalar and within the activations' rounding;
 *  - int8 activations: the quantizer's rounding bound, the scalar q8 dot
 *    products against this file's exact integer sums, every level bit-identical
 *    to scalar, the error of the whole path within what the activations'
 *    rounding allows, NaN and infinity propagated;
 *  - the GGML block types (q8_0, q4_0, q4_k, q5_k, q6_k) and f16, from random
 *    blocks with random finite halves: in all of the above, and at every
 *    level bit-identical to that level's f32 matvec / matmul on the matrix
 *    of their quant_row_dequantize values (1..7 tokens, ragged row counts)
 *    with f32 activations; with int8 ones (auto and int8) their q8 rows,
 *    scalar against a double sum of those values times the quantized
 *    activations, every level bit-identical to scalar, matmul rows equal
 *    to one-token calls, the public path routed to them and within the
 *    activations' rounding of the exact product;
 *  - dot/axpy, rmsnorm, softmax, swiglu, rope (NEOX and GPT-J), topk and
 *    attention_head against straightforward double-precision references.
 */
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
static double ref_weight(const struct qmatrix *m, int64_t r, int64_t c)
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
static double ref_wscale(const struct qmatrix *m, int64_t r, int64_t c)
{
	if (m->type == QUANT_MXFP4) {
		const uint8_t *row = (const uint8_t *)m->data + r * (m->cols / 2 + m->cols / 32);
		return ldexp(1.0, (int)row[m->cols / 2 + c / 32] - 128);
	}
	return m->scales[r * (m->cols / m->group) + c / m->group];
}

static int is_q8_type(enum quant_type t)
{
	return t == QUANT_INT8 || t == QUANT_INT4 || t == QUANT_MXFP4;
}

static int is_block_type(enum quant_type t)
{
	return t >= QUANT_Q8_0 && t <= QUANT_Q6_K;
}

/* A random finite half, |h| in [0.001, 0.1), positive unless `signed_`. */
static void rand_half(uint8_t *p, uint64_t *seed, int signed_)
{
	float v = 0.001f + 0.0495f * (tu_randf(seed) + 1.0f);
	if (signed_ && tu_randf(seed) < 0)
		v = -v;
	uint16_t h = f32_to_f16(v);
	memcpy(p, &h, 2);
}

/* Random blocks of a GGML block type: random bytes, then every d (and
 * dmin) overwritten with a random finite half, as llama.cpp's files hold. */
static void rand_blocks(uint8_t *blob, enum quant_type type, int64_t rows, int64_t cols, uint64_t seed)
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

static void tmat_make(struct tmat *t, enum quant_type type, int64_t rows, int64_t cols,
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

static void tmat_free(struct tmat *t)
{
	free(t->blob);
	free(t->deq);
}

static float *rand_vec(int64_t n, uint64_t seed)
{
	float *v = malloc(sizeof(float) * (n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++)
		v[i] = tu_randf(&seed);
	return v;
}

/* sum |w||x| of one row, the scale of the rounding error a dot may make. */
static double row_abs(const struct tmat *t, int64_t r, const float *x)
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

Test(kernels, scalar_matvec_matches_double_reference)
{
	const struct kernels_ops *ops = &kernels_ops_scalar;
	for (unsigned s = 0; s < N_SHAPES; s++) {
		const struct shape *sh = &shapes[s];
		struct tmat t;
		tmat_make(&t, sh->type, sh->rows, sh->cols, sh->group, 100 + s);
		float *x = rand_vec(sh->cols, 7 + s);
		float *out = malloc(sizeof(float) * sh->rows);
		ops->rows[sh->type](out, sh->rows, &t.m, x, 1, 0, sh->rows);
		for (int64_t r = 0; r < sh->rows; r++) {
			double want = 0;
			for (int64_t c = 0; c < sh->cols; c++)
				want += t.deq[r * sh->cols + c] * x[c];
			double tol = 1e-6 * row_abs(&t, r, x) + 1e-30;
			cr_assert_leq(fabs(out[r] - want), tol, "%s %ldx%ld row %ld: %.9g vs %.9g",
				      quant_type_name(sh->type), (long)sh->rows, (long)sh->cols,
				      (long)r, out[r], want);
		}
		free(x);
		free(out);
		tmat_free(&t);
	}
}

/* Level `level` against scalar on every shape and 1..7 tokens, and matmul
 * rows bit-identical to single-token calls of the same level. */
static void check_level(enum cpu_simd level)
{
	if (!cpu_simd_available(level))
		cr_skip_test("this CPU lacks %s (best level: %s)", cpu_simd_name(level),
			     cpu_simd_name(cpu_simd_supported()));
	const struct kernels_ops *ops = kernels_ops_for(level);
	const struct kernels_ops *ref = &kernels_ops_scalar;
	for (unsigned s = 0; s < N_SHAPES; s++) {
		const struct shape *sh = &shapes[s];
		struct tmat t;
		tmat_make(&t, sh->type, sh->rows, sh->cols, sh->group, 300 + s);
		int64_t n = 1 + s % 7;
		float *x = rand_vec(n * sh->cols, 11 + s);
		float *got = malloc(sizeof(float) * n * sh->rows);
		float *want = malloc(sizeof(float) * n * sh->rows);
		float *one = malloc(sizeof(float) * sh->rows);
		ops->rows[sh->type](got, sh->rows, &t.m, x, n, 0, sh->rows);
		ref->rows[sh->type](want, sh->rows, &t.m, x, n, 0, sh->rows);
		for (int64_t tok = 0; tok < n; tok++) {
			for (int64_t r = 0; r < sh->rows; r++) {
				float g = got[tok * sh->rows + r];
				cr_assert_eq(memcmp(&g, &want[tok * sh->rows + r], 4), 0,
					     "%s %s %ldx%ld tok %ld row %ld: %.9g vs scalar %.9g",
					     ops->name, quant_type_name(sh->type), (long)sh->rows,
					     (long)sh->cols, (long)tok, (long)r, g,
					     want[tok * sh->rows + r]);
				ops->rows[sh->type](one, sh->rows, &t.m, x + tok * sh->cols, 1, r, r + 1);
				cr_assert_eq(memcmp(&one[r], &got[tok * sh->rows + r], 4), 0,
					     "%s %s: matmul token %ld row %ld differs from matvec",
					     ops->name, quant_type_name(sh->type), (long)tok, (long)r);
			}
		}
		free(x);
		free(got);
		free(want);
		free(one);
		tmat_free(&t);
	}
	/* dot and axpy on ragged lengths. */
	for (int64_t len = 0; len < 70; len += 3) {
		float *a = rand_vec(len, 5 + len), *b = rand_vec(len, 9 + len);
		double want = 0, mag = 0;
		for (int64_t i = 0; i < len; i++) {
			want += (double)a[i] * b[i];
			mag += fabs((double)a[i] * b[i]);
		}
		float d = ops->dot_f32(a, b, len), d_ref = ref->dot_f32(a, b, len);
		cr_assert_leq(fabs(d - want), 1e-6 * mag + 1e-30);
		cr_assert_eq(memcmp(&d, &d_ref, 4), 0, "%s dot_f32 of %ld: %.9g vs scalar %.9g",
			     ops->name, (long)len, d, d_ref);
		float *o = rand_vec(len, 13 + len), *o_ref = rand_vec(len, 13 + len);
		double *ow = malloc(sizeof(double) * (len + 1));
		for (int64_t i = 0; i < len; i++)
			ow[i] = o[i] + 0.75 * (double)a[i];
		ops->axpy_f32(o, 0.75f, a, len);
		ref->axpy_f32(o_ref, 0.75f, a, len);
		for (int64_t i = 0; i < len; i++)
			cr_assert_float_eq(o[i], ow[i], 1e-6);
		cr_assert_eq(memcmp(o, o_ref, sizeof(float) * len), 0, "%s axpy_f32 of %ld differs from scalar",
			     ops->name, (long)len);
		free(o_ref);
		free(a);
		free(b);
		free(o);
		free(ow);
	}
	/* Signed zeros: a lane whose products are all -0 (underflowing or
	 * zero) stays -0 at every level, and the tails must not add a +0 to
	 * it. Lengths around the tail sizes, one lane holding -0 only. */
	for (int64_t len = 1; len <= 70; len++) {
		float *a = calloc((size_t)len, sizeof(float)), *b = calloc((size_t)len, sizeof(float));
		for (int64_t i = 0; i < len; i++) {
			a[i] = -1e-30f;
			b[i] = 1e-30f; /* the product underflows to -0 */
		}
		float d = ops->dot_f32(a, b, len), d_ref = ref->dot_f32(a, b, len);
		cr_assert_eq(memcmp(&d, &d_ref, 4), 0, "%s dot_f32 of %ld underflows: %g vs scalar %g",
			     ops->name, (long)len, d, d_ref);
		if (len >= 32) /* every lane -0; with fewer, a +0 lane joins the fold */
			cr_assert(signbit(d_ref), "the scalar dot of -0 products is -0");
		free(a);
		free(b);
	}
}

Test(kernels, scalar_self_consistent)
{
	check_level(CPU_SIMD_SCALAR);
}

Test(kernels, avx2_vs_scalar)
{
	check_level(CPU_SIMD_AVX2);
}

Test(kernels, avxvnni_vs_scalar)
{
	check_level(CPU_SIMD_AVX2_VNNI);
}

Test(kernels, avx512_vs_scalar)
{
	check_level(CPU_SIMD_AVX512);
}

Test(kernels, avx512vnni_vs_scalar)
{
	check_level(CPU_SIMD_AVX512_VNNI);
}

/* matmul_pair: each output the bits of its own matmul, at every pool size
 * and activation mode, and two matmuls where the types differ. */
Test(kernels, matmul_pair_is_two_matmuls)
{
	struct threadpool *pool;
	cr_assert_eq(threadpool_init(&pool, 2), 0);
	static const char *acts[] = { "f32", "auto" };
	static const enum quant_type types[][2] = { { QUANT_INT4, QUANT_INT4 }, { QUANT_INT8, QUANT_INT8 },
						    { QUANT_BF16, QUANT_BF16 }, { QUANT_INT4, QUANT_INT8 } };
	for (int a = 0; a < 2; a++)
		for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
			cr_assert_eq(kernels_set_activations(acts[a]), 0);
			int64_t cols = 320, n = 11, ra = 77, rb = 45;
			struct tmat ta, tb;
			tmat_make(&ta, types[k][0], ra, cols, 64, 500 + (int)k);
			tmat_make(&tb, types[k][1], rb, cols, 64, 600 + (int)k);
			float *x = rand_vec(n * cols, 31 + (int)k);
			float *wa = malloc(sizeof(float) * n * ra), *wb = malloc(sizeof(float) * n * rb);
			float *ga = malloc(sizeof(float) * n * ra), *gb = malloc(sizeof(float) * n * rb);
			for (int p = 0; p < 2; p++)
				for (int64_t m = 1; m <= n; m += 5) {
					matmul(NULL, wa, &ta.m, x, m);
					matmul(NULL, wb, &tb.m, x, m);
					memset(ga, 0xff, sizeof(float) * n * ra);
					memset(gb, 0xff, sizeof(float) * n * rb);
					matmul_pair(p ? pool : NULL, ga, &ta.m, gb, &tb.m, x, m);
					cr_assert(memcmp(ga, wa, sizeof(float) * m * ra) == 0 &&
						  memcmp(gb, wb, sizeof(float) * m * rb) == 0,
						  "matmul_pair %s/%s, %ld tokens, %s activations, pool %d differs",
						  quant_type_name(types[k][0]), quant_type_name(types[k][1]), (long)m, acts[a], p);
				}
			free(x);
			free(wa);
			free(wb);
			free(ga);
			free(gb);
			tmat_free(&ta);
			tmat_free(&tb);
		}
	threadpool_free(pool);
	kernels_set_activations("auto");
}

/* Public matvec/matmul: same bits whatever the pool, and matmul row t equal
 * to matvec on token t, with either kind of activations. */
Test(kernels, thread_count_and_matmul_bit_identical)
{
	struct threadpool *pools[4] = { NULL };
	for (int i = 1; i < 4; i++)
		cr_assert_eq(threadpool_init(&pools[i], i), 0);
	static const char *acts[] = { "f32", "int8", "auto" };
	for (int pass = 0; pass < 3 * QUANT_TYPE_COUNT; pass++) {
		int type = pass % QUANT_TYPE_COUNT;
		cr_assert_eq(kernels_set_activations(acts[pass / QUANT_TYPE_COUNT]), 0);
		int64_t rows = 301, cols = type == QUANT_F32 || type == QUANT_BF16 || type == QUANT_F16 ? 333
					   : type >= QUANT_Q4_K ? 768 : 320;
		/* Up to 19 tokens: past the VNNI kernels' groups of 8 and 4. */
		int64_t n = 19;
		static const int64_t ks[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 19 };
		struct tmat t;
		tmat_make(&t, (enum quant_type)type, rows, cols, 64, 77 + type);
		float *x = rand_vec(n * cols, 21 + type);
		float *base = malloc(sizeof(float) * n * rows);
		float *got = malloc(sizeof(float) * n * rows);
		for (int64_t tok = 0; tok < n; tok++)
			matvec(NULL, base + tok * rows, &t.m, x + tok * cols);
		for (int p = 0; p < 4; p++) {
			for (int64_t tok = 0; tok < n; tok++)
				matvec(pools[p], got + tok * rows, &t.m, x + tok * cols);
			cr_assert_eq(memcmp(got, base, sizeof(float) * n * rows), 0,
				     "matvec %s with %d threads", quant_type_name(t.m.type), p);
			for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
				int64_t k = ks[ki];
				memset(got, 0xff, sizeof(float) * n * rows);
				matmul(pools[p], got, &t.m, x, k);
				cr_assert_eq(memcmp(got, base, sizeof(float) * k * rows), 0,
					     "matmul %s n=%ld with %d threads, %s activations",
					     quant_type_name(t.m.type), (long)k, p, kernels_activations_name());
			}
		}
		free(x);
		free(base);
		free(got);
		tmat_free(&t);
	}
	for (int i = 1; i < 4; i++)
		threadpool_free(pools[i]);
	kernels_set_activations("int8");
}

/* mxfp4 through the public matvec/matmul, both activation kinds: the same
 * bits with no pool and pools of 1..3 threads, for 1..5 tokens, on ragged
 * row counts and inputs with and without a lone last run; and with f32
 * activations within float rounding of an f32 matvec of the dequantized
 * matrix (quant_row_dequantize). */
Test(kernels, mxfp4_threads_batches_and_dequantized)
{
	struct threadpool *pools[4] = { NULL };
	for (int i = 1; i < 4; i++)
		cr_assert_eq(threadpool_init(&pools[i], i), 0);
	const int64_t rows_of[] = { 67, 13, 130 }, cols_of[] = { 96, 352, 2880 };
	const int64_t n = 5;
	for (int sc = 0; sc < 3; sc++) {
		int64_t rows = rows_of[sc], cols = cols_of[sc];
		struct tmat t;
		tmat_make(&t, QUANT_MXFP4, rows, cols, 32, 1200 + sc);
		float *deq = malloc(sizeof(float) * rows * cols);
		for (int64_t r = 0; r < rows; r++)
			quant_row_dequantize(deq + r * cols, &t.m, r);
		struct qmatrix f;
		quant_matrix_view(&f, deq, QUANT_F32, rows, cols, 0);
		float *x = rand_vec(n * cols, 1300 + sc);
		float *base = malloc(sizeof(float) * n * rows), *got = malloc(sizeof(float) * n * rows);
		for (int act = 0; act < 2; act++) {
			cr_assert_eq(kernels_set_activations(act ? "int8" : "f32"), 0);
			for (int64_t tok = 0; tok < n; tok++)
				matvec(NULL, base + tok * rows, &t.m, x + tok * cols);
			for (int p = 1; p < 4; p++)
				for (int64_t k = 1; k <= n; k++) {
					memset(got, 0xff, sizeof(float) * n * rows);
					if (k == 1)
						for (int64_t tok = 0; tok < n; tok++)
							matvec(pools[p], got + tok * rows, &t.m, x + tok * cols);
					else
						matmul(pools[p], got, &t.m, x, k);
					cr_assert_eq(memcmp(got, base, sizeof(float) * (k == 1 ? n : k) * rows), 0,
						     "mxfp4 %ldx%ld n=%ld, %d threads, %s activations", (long)rows,
						     (long)cols, (long)k, p, kernels_activations_name());
				}
			if (act)
				continue;
			matmul(NULL, got, &f, x, n);
			for (int64_t tok = 0; tok < n; tok++)
				for (int64_t r = 0; r < rows; r++) {
					double tol = 1e-5 * row_abs(&t, r, x + tok * cols) + 1e-30;
					cr_assert_leq(fabs(base[tok * rows + r] - got[tok * rows + r]), tol,
						      "mxfp4 %ldx%ld tok %ld row %ld: %.9g vs f32 %.9g", (long)rows,
						      (long)cols, (long)tok, (long)r, base[tok * rows + r],
						      got[tok * rows + r]);
					for (int64_t c = 0; c < cols; c++)
						cr_assert_eq(deq[r * cols + c], (float)t.deq[r * cols + c]);
				}
		}
		free(x);
		free(base);
		free(got);
		free(deq);
		tmat_free(&t);
	}
	for (int i = 1; i < 4; i++)
		threadpool_free(pools[i]);
	kernels_set_activations("int8");
}

/* The block types and f16 at every level: rows (several tokens, a slice of
 * rows, and one row one token at a time) bit-identical to the same level's
 * f32 rows on the dequantized matrix; then the public matvec / matmul with
 * pools and both activation settings against the public f32 matvec. */
Test(kernels, block_types_bit_identical_to_f32_of_dequantized)
{
	struct threadpool *pool = NULL;
	cr_assert_eq(threadpool_init(&pool, 3), 0);
	for (unsigned s = 0; s < N_SHAPES; s++) {
		const struct shape *sh = &shapes[s];
		if (!is_block_type(sh->type) && sh->type != QUANT_F16)
			continue;
		int64_t rows = sh->rows, cols = sh->cols, n = 1 + s % 7;
		struct tmat t;
		tmat_make(&t, sh->type, rows, cols, 0, 1500 + s);
		float *deq = malloc(sizeof(float) * rows * cols);
		for (int64_t r = 0; r < rows; r++)
			quant_row_dequantize(deq + r * cols, &t.m, r);
		struct qmatrix f;
		quant_matrix_view(&f, deq, QUANT_F32, rows, cols, 0);
		float *x = rand_vec(7 * cols, 1600 + s);
		float *got = malloc(sizeof(float) * 7 * rows), *want = malloc(sizeof(float) * 7 * rows);
		for (enum cpu_simd level = CPU_SIMD_SCALAR; level < CPU_SIMD_COUNT; level++) {
			if (!cpu_simd_available(level))
				continue;
			const struct kernels_ops *ops = kernels_ops_for(level);
			cr_assert_not_null(ops->rows[sh->type], "%s %s", ops->name, quant_type_name(sh->type));
			for (int64_t k = 1; k <= 7; k++) {
				memset(got, 0xff, sizeof(float) * 7 * rows);
				ops->rows[sh->type](got, rows, &t.m, x, k, 0, rows);
				ops->rows[QUANT_F32](want, rows, &f, x, k, 0, rows);
				cr_assert_eq(memcmp(got, want, sizeof(float) * k * rows), 0,
					     "%s %s %ldx%ld, %ld tokens: not the f32 bits of its dequantized matrix",
					     ops->name, quant_type_name(sh->type), (long)rows, (long)cols, (long)k);
			}
			/* Rows [1, rows - 1) only, and row by row. */
			if (rows > 2) {
				memset(got, 0xff, sizeof(float) * n * rows);
				ops->rows[sh->type](got, rows, &t.m, x, n, 1, rows - 1);
				ops->rows[QUANT_F32](want, rows, &f, x, n, 0, rows);
				for (int64_t tok = 0; tok < n; tok++)
					cr_assert_eq(memcmp(got + tok * rows + 1, want + tok * rows + 1,
							    sizeof(float) * (rows - 2)), 0, "%s %s: a slice of rows",
						     ops->name, quant_type_name(sh->type));
			}
			for (int64_t r = 0; r < rows; r++) {
				ops->rows[sh->type](got, rows, &t.m, x + (n - 1) * cols, 1, r, r + 1);
				ops->rows[QUANT_F32](want, rows, &f, x + (n - 1) * cols, 1, r, r + 1);
				cr_assert_eq(memcmp(&got[r], &want[r], 4), 0, "%s %s: row %ld alone", ops->name,
					     quant_type_name(sh->type), (long)r);
			}
		}
		/* int8 activations take the block types to their q8 rows
		 * (q8_blocks_*); f16 stays on f32 under every setting. */
		for (int act = 0; act < (sh->type == QUANT_F16 ? 2 : 1); act++) {
			cr_assert_eq(kernels_set_activations(act ? "int8" : "f32"), 0);
			matmul(NULL, want, &f, x, n);
			matmul(pool, got, &t.m, x, n);
			cr_assert_eq(memcmp(got, want, sizeof(float) * n * rows), 0, "public matmul %s, %s activations",
				     quant_type_name(sh->type), kernels_activations_name());
			for (int64_t tok = 0; tok < n; tok++) {
				matvec(pool, got, &t.m, x + tok * cols);
				cr_assert_eq(memcmp(got, want + tok * rows, sizeof(float) * rows), 0,
					     "public matvec %s token %ld, %s activations", quant_type_name(sh->type),
					     (long)tok, kernels_activations_name());
			}
		}
		free(x);
		free(got);
		free(want);
		free(deq);
		tmat_free(&t);
	}
	threadpool_free(pool);
	kernels_set_activations("int8");
}

/* Quantized activations of n tokens (this file owns the buffers). */
struct tact {
	int8_t *q;
	float *d;
	int32_t *sum8;
	struct act_q8 a;
};

static void tact_make(struct tact *t, const float *x, int64_t n, int64_t cols)
{
	t->q = malloc((size_t)act_q8_bytes(n, cols));
	t->d = malloc(sizeof(float) * (size_t)act_q8_lanes(n, cols));
	t->sum8 = malloc(sizeof(int32_t) * (size_t)act_q8_lanes(n, cols));
	act_q8_quantize(&kernels_ops_scalar, &t->a, t->q, t->d, t->sum8, x, n, cols);
}

/* Token tok's quantized input c and the scale of its run. */
static int tact_q(const struct tact *t, int64_t tok, int64_t c)
{
	return t->q[tok * t->a.pairs * 64 + act_q8_pos(c)];
}

static double tact_d(const struct tact *t, int64_t tok, int64_t c)
{
	return t->d[tok * t->a.pairs * 8 + act_q8_lane(c)];
}

static void tact_free(struct tact *t)
{
	free(t->q);
	free(t->d);
	free(t->sum8);
}

/* The stored q of weight (r, c) of an int8 / int4 / mxfp4 matrix (this
 * file's decoder). */
static int ref_q(const struct qmatrix *m, int64_t r, int64_t c)
{
	return (int)lround(ref_weight(m, r, c) / ref_wscale(m, r, c));
}

Test(kernels, act_q8_rounding)
{
	int64_t cols = 224; /* seven runs: the last pair has one */
	float *x = rand_vec(cols, 3);
	for (int i = 32; i < 64; i++)
		x[i] = 0.0f;            /* an all-zero run */
	x[70] = 1000.0f;                /* a run dominated by one value */
	struct tact t;
	tact_make(&t, x, 1, cols);
	cr_assert_eq(t.a.pairs, 4);
	int lane_sum[32] = { 0 }, seen[256] = { 0 };
	for (int64_t k = 0; k < cols / 32; k++) {
		double amax = 0;
		for (int i = 0; i < 32; i++)
			amax = fmax(amax, fabs(x[32 * k + i]));
		for (int i = 0; i < 32; i++) {
			int64_t c = 32 * k + i;
			double d = tact_d(&t, 0, c);
			int q = tact_q(&t, 0, c);
			cr_assert_float_eq(d, amax / 127, 1e-7 * amax, "input %ld: scale", (long)c);
			cr_assert(q >= -127 && q <= 127);
			cr_assert_leq(fabs(x[c] - d * q), 0.5001 * d + 1e-30, "input %ld: %g vs %d * %g",
				      (long)c, x[c], q, d);
			cr_assert_lt(act_q8_pos(c), 256);
			seen[act_q8_pos(c)]++;
			lane_sum[act_q8_lane(c)] += q;
		}
	}
	for (int i = 0; i < 256; i++)
		cr_assert_eq(seen[i], i >= 208 && i < 224 ? 0 : i >= 240 ? 0 : 1, "byte %d holds %d inputs", i,
			     seen[i]);
	for (int l = 0; l < 32; l++) {
		cr_assert_eq(t.sum8[l], 8 * lane_sum[l], "lane %d", l);
		if (l >= 28)
			cr_assert(t.d[l] == 0 && t.sum8[l] == 0, "the missing run's lane %d", l);
	}
	cr_assert_eq(tact_d(&t, 0, 40), 0.0);
	tact_free(&t);
	free(x);
}

/* Scalar q8 rows against sum over runs of scale_w * d_x * (exact integer
 * dot of the run), in double. */
Test(kernels, q8_scalar_matches_integer_reference)
{
	for (unsigned s = 0; s < N_SHAPES; s++) {
		const struct shape *sh = &shapes[s];
		if (!is_q8_type(sh->type))
			continue;
		struct tmat t;
		tmat_make(&t, sh->type, sh->rows, sh->cols, sh->group, 500 + s);
		float *x = rand_vec(sh->cols, 41 + s);
		struct tact a;
		tact_make(&a, x, 1, sh->cols);
		float *out = malloc(sizeof(float) * sh->rows);
		kernels_ops_scalar.rows_q8[sh->type](out, sh->rows, &t.m, &a.a, 1, 0, sh->rows);
		for (int64_t r = 0; r < sh->rows; r++) {
			double want = 0, mag = 0;
			for (int64_t k = 0; k < sh->cols / 32; k++) {
				long isum = 0;
				for (int i = 0; i < 32; i++)
					isum += (long)ref_q(&t.m, r, 32 * k + i) * tact_q(&a, 0, 32 * k + i);
				double sc = ref_wscale(&t.m, r, 32 * k);
				want += sc * tact_d(&a, 0, 32 * k) * (double)isum;
				mag += fabs(sc * tact_d(&a, 0, 32 * k) * (double)isum);
			}
			cr_assert_leq(fabs(out[r] - want), 1e-6 * mag + 1e-30, "%s %ldx%ld row %ld: %.9g vs %.9g",
				      quant_type_name(sh->type), (long)sh->rows, (long)sh->cols, (long)r,
				      out[r], want);
		}
		free(out);
		tact_free(&a);
		free(x);
		tmat_free(&t);
	}
}

/* -m1 of each weight of row r of a q4_k / q5_k matrix (0 for the other
 * types), read through quant_block_dequantize with every q set to 0. */
static void ref_kmins(double *mins, const struct qmatrix *m, int64_t r)
{
	int64_t bb = (int64_t)quant_data_bytes(m->type, 1, m->group);
	const uint8_t *row = (const uint8_t *)m->data + r * quant_data_bytes(m->type, 1, m->cols);
	for (int64_t k = 0; k < m->cols / m->group; k++) {
		uint8_t blk[QUANT_Q5_K_BYTES];
		float w[256];
		if (m->type != QUANT_Q4_K && m->type != QUANT_Q5_K) {
			for (int64_t i = 0; i < m->group; i++)
				mins[k * m->group + i] = 0;
			continue;
		}
		memcpy(blk, row + k * bb, (size_t)bb);
		memset(blk + 16, 0, (size_t)bb - 16); /* qh and qs */
		quant_block_dequantize(w, m->type, blk);
		for (int i = 0; i < 256; i++)
			mins[k * 256 + i] = -w[i];
	}
}

/* The block types' scalar q8 rows against sum over inputs of the
 * quant_row_dequantize weight times the quantized activation q * d, in
 * double. The kernel sums the K types' d * sc * q and dmin * m parts
 * apart, so the float error is relative to sum (|w| + |m1|) |q d|. */
Test(kernels, q8_blocks_scalar_matches_double_reference)
{
	for (unsigned s = 0; s < N_SHAPES; s++) {
		const struct shape *sh = &shapes[s];
		if (!is_block_type(sh->type))
			continue;
		struct tmat t;
		tmat_make(&t, sh->type, sh->rows, sh->cols, sh->group, 900 + s);
		float *x = rand_vec(sh->cols, 43 + s);
		struct tact a;
		tact_make(&a, x, 1, sh->cols);
		float *out = malloc(sizeof(float) * sh->rows);
		double *mins = malloc(sizeof(double) * sh->cols);
		kernels_ops_scalar.rows_q8[sh->type](out, sh->rows, &t.m, &a.a, 1, 0, sh->rows);
		for (int64_t r = 0; r < sh->rows; r++) {
			ref_kmins(mins, &t.m, r);
			double want = 0, mag = 0;
			for (int64_t c = 0; c < sh->cols; c++) {
				double xv = tact_q(&a, 0, c) * tact_d(&a, 0, c);
				want += t.deq[r * sh->cols + c] * xv;
				mag += (fabs(t.deq[r * sh->cols + c]) + fabs(mins[c])) * fabs(xv);
			}
			cr_assert_leq(fabs(out[r] - want), 4e-6 * mag + 1e-30, "%s %ldx%ld row %ld: %.9g vs %.9g",
				      quant_type_name(sh->type), (long)sh->rows, (long)sh->cols, (long)r,
				      out[r], want);
		}
		free(mins);
		free(out);
		tact_free(&a);
		free(x);
		tmat_free(&t);
	}
}

/* got[n, rows] of t against x[n, cols] is within what rounding the
 * activations to multiples of their run's scale drun[n, cols / 32] allows:
 * sum over inputs of |w| * d / 2, plus float noise. */
static void check_rounding_bound(const char *level, const struct tmat *t, const float *x, int64_t n,
				 const float *got, const float *drun)
{
	int64_t rows = t->m.rows, cols = t->m.cols;
	for (int64_t tok = 0; tok < n; tok++)
		for (int64_t r = 0; r < rows; r++) {
			const float *xt = x + tok * cols;
			double exact = 0, bound = 0;
			for (int64_t c = 0; c < cols; c++) {
				double w = t->deq[r * cols + c];
				exact += w * xt[c];
				bound += fabs(w) * drun[tok * (cols / 32) + c / 32] * 0.5;
			}
			bound = bound * 1.001 + 1e-5 * row_abs(t, r, xt) + 1e-30;
			cr_assert_leq(fabs(got[tok * rows + r] - exact), bound, "%s %s %ldx%ld tok %ld row %ld: %.9g vs %.9g",
				      level, quant_type_name(t->m.type), (long)rows, (long)cols, (long)tok, (long)r,
				      got[tok * rows + r], exact);
		}
}

/* mxfp4 with every scale byte from 0 (2^-127, a subnormal) to 130: each
 * level's int8-activation rows write the scalar bits; rows
 * long enough (129 and 256 runs) for the scales to be made in more than
 * one batch, the first with a lone last run. */
Test(kernels, mxfp4_scale_bytes_bit_identical)
{
	static const int64_t col_counts[] = { 4128, 8192 };
	for (size_t c = 0; c < sizeof col_counts / sizeof col_counts[0]; c++) {
		int64_t rows = 3, cols = col_counts[c], runs = cols / 32, n = 2;
		size_t row_bytes = (size_t)(cols / 2 + runs);
		uint8_t *blob = malloc(row_bytes * (size_t)rows);
		uint64_t seed = 91 + c;
		for (int64_t r = 0; r < rows; r++) {
			uint8_t *row = blob + (size_t)r * row_bytes;
			for (int64_t i = 0; i < cols / 2; i++)
				row[i] = (uint8_t)(tu_randf(&seed) * 127.0f + 128.0f);
			for (int64_t k = 0; k < runs; k++)
				/* Row 0 all subnormal-scale or near (0 .. 3), so its sum is made of
				 * them alone; row 1 0 .. 130; row 2 ordinary (125 .. 130). */
				row[cols / 2 + k] = (uint8_t)(r == 0 ? k % 4 : r == 1 ? k % 131 : 125 + k % 6);
		}
		struct qmatrix m;
		quant_matrix_view(&m, blob, QUANT_MXFP4, rows, cols, 32);
		float *x = rand_vec(n * cols, 17 + c);
		struct tact a;
		tact_make(&a, x, n, cols);
		float *got = malloc(sizeof(float) * n * rows), *want = malloc(sizeof(float) * n * rows);
		for (enum cpu_simd level = CPU_SIMD_SCALAR; level < CPU_SIMD_COUNT; level++) {
			if (!cpu_simd_available(level))
				continue;
			const struct kernels_ops *ops = kernels_ops_for(level);
			ops->rows_q8[QUANT_MXFP4](got, rows, &m, &a.a, n, 0, rows);
			kernels_ops_scalar.rows_q8[QUANT_MXFP4](want, rows, &m, &a.a, n, 0, rows);
			cr_expect_eq(memcmp(got, want, sizeof(float) * n * rows), 0, "%s q8 mxfp4 x%ld differs from scalar",
				     ops->name, (long)cols);
			for (int64_t i = 0; i < n * rows; i++)
				cr_expect(isfinite(got[i]) && got[i] != 0.0f, "%s x%ld: output %ld is %g", ops->name,
					  (long)cols, (long)i, (double)got[i]);
		}
		free(got);
		free(want);
		tact_free(&a);
		free(x);
		free(blob);
	}
}

/* Every level's q8 rows write the scalar bits, for ragged row counts and 1..7
 * tokens, and the whole path stays within the activations' rounding. */
Test(kernels, q8_levels_bit_identical_and_bounded)
{
	cr_assert_eq(kernels_set_activations("auto"), 0);
	for (enum cpu_simd level = CPU_SIMD_SCALAR; level < CPU_SIMD_COUNT; level++) {
		if (!cpu_simd_available(level))
			continue;
		const struct kernels_ops *ops = kernels_ops_for(level);
		for (unsigned s = 0; s < N_SHAPES; s++) {
			const struct shape *sh = &shapes[s];
			if (!is_q8_type(sh->type) && !is_block_type(sh->type))
				continue;
			struct tmat t;
			tmat_make(&t, sh->type, sh->rows, sh->cols, sh->group, 700 + s);
			int64_t n = 1 + s % 7;
			float *x = rand_vec(n * sh->cols, 61 + s);
			struct tact a;
			tact_make(&a, x, n, sh->cols);
			float *got = malloc(sizeof(float) * n * sh->rows);
			float *want = malloc(sizeof(float) * n * sh->rows);
			ops->rows_q8[sh->type](got, sh->rows, &t.m, &a.a, n, 0, sh->rows);
			kernels_ops_scalar.rows_q8[sh->type](want, sh->rows, &t.m, &a.a, n, 0, sh->rows);
			cr_assert_eq(memcmp(got, want, sizeof(float) * n * sh->rows), 0,
				     "%s q8 %s %ldx%ld differs from scalar", ops->name,
				     quant_type_name(sh->type), (long)sh->rows, (long)sh->cols);
			float *drun = malloc(sizeof(float) * n * sh->cols / 32);
			for (int64_t tok = 0; tok < n; tok++)
				for (int64_t k = 0; k < sh->cols / 32; k++)
					drun[tok * (sh->cols / 32) + k] = (float)tact_d(&a, tok, 32 * k);
			check_rounding_bound(ops->name, &t, x, n, got, drun);
			free(drun);
			if (is_block_type(sh->type)) {
				/* Each (token, row) alone: the bits of the batch. */
				for (int64_t tok = 0; tok < n; tok++) {
					struct tact a1;
					tact_make(&a1, x + tok * sh->cols, 1, sh->cols);
					for (int64_t r = 0; r < sh->rows; r++) {
						float one[1];
						ops->rows_q8[sh->type](one - r, sh->rows, &t.m, &a1.a, 1, r, r + 1);
						cr_assert_eq(memcmp(one, &got[tok * sh->rows + r], 4), 0,
							     "%s q8 %s: token %ld row %ld alone differs", ops->name,
							     quant_type_name(sh->type), (long)tok, (long)r);
					}
					tact_free(&a1);
				}
				/* The public path under "auto" is these rows. */
				if (level == cpu_simd_supported()) {
					memset(want, 0xff, sizeof(float) * n * sh->rows);
					matmul(NULL, want, &t.m, x, n);
					cr_assert_eq(memcmp(got, want, sizeof(float) * n * sh->rows), 0,
						     "public matmul %s under auto is not its q8 rows",
						     quant_type_name(sh->type));
				}
			}
			free(got);
			free(want);
			tact_free(&a);
			free(x);
			tmat_free(&t);
		}
	}
}

/* Every level quantizes a run to the scalar bytes and scale, ties, zeros,
 * NaN and infinities included. */
Test(kernels, act_q8_run_levels_identical)
{
	for (enum cpu_simd level = CPU_SIMD_SCALAR; level < CPU_SIMD_COUNT; level++) {
		if (!cpu_simd_available(level))
			continue;
		const struct kernels_ops *ops = kernels_ops_for(level);
		for (int k = 0; k < 64; k++) {
			float *x = rand_vec(32, 900 + k);
			if (k % 8 == 1)
				for (int i = 0; i < 32; i++)
					x[i] = (float)(i - 16) * 0.5f; /* amax 8: x * 127 / 8 lands on ties */
			if (k % 8 == 2)
				memset(x, 0, 32 * sizeof(float));
			if (k % 8 == 3)
				x[k % 32] = NAN;
			if (k % 8 == 4)
				x[k % 32] = -INFINITY;
			if (k % 8 == 5)
				x[k % 32] = 1e30f;
			int8_t lo[2][16], hi[2][16];
			float d0 = kernels_ops_scalar.act_q8_run(lo[0], hi[0], x);
			float d1 = ops->act_q8_run(lo[1], hi[1], x);
			cr_assert(memcmp(&d0, &d1, 4) == 0 || (isnan(d0) && isnan(d1)), "%s run %d: d %g vs %g",
				  ops->name, k, d1, d0);
			cr_assert_eq(memcmp(lo[0], lo[1], 16), 0, "%s run %d: low half", ops->name, k);
			cr_assert_eq(memcmp(hi[0], hi[1], 16), 0, "%s run %d: high half", ops->name, k);
			int16_t w[2][32];
			d0 = kernels_ops_scalar.act_q16_run(w[0], x);
			d1 = ops->act_q16_run(w[1], x);
			cr_assert(memcmp(&d0, &d1, 4) == 0 || (isnan(d0) && isnan(d1)), "%s run %d: int16 d %g vs %g",
				  ops->name, k, d1, d0);
			cr_assert_eq(memcmp(w[0], w[1], sizeof w[0]), 0, "%s run %d: int16 q", ops->name, k);
			for (int i = 0; i < 32 && isfinite(d0) && d0 > 0; i++)
				cr_assert_leq(fabs(x[i] - (double)d0 * w[0][i]), 0.5001 * d0, "run %d input %d", k, i);
			free(x);
		}
	}
}

/* int8 weights against int16 activations: every level writes the scalar
 * bits, within the activations' rounding of the exact product. */
Test(kernels, q16_levels_bit_identical_and_bounded)
{
	for (enum cpu_simd level = CPU_SIMD_SCALAR; level < CPU_SIMD_COUNT; level++) {
		if (!cpu_simd_available(level))
			continue;
		const struct kernels_ops *ops = kernels_ops_for(level);
		for (unsigned s = 0; s < N_SHAPES; s++) {
			const struct shape *sh = &shapes[s];
			if (sh->type != QUANT_INT8)
				continue;
			struct tmat t;
			tmat_make(&t, sh->type, sh->rows, sh->cols, sh->group, 800 + s);
			int64_t n = 1 + s % 7;
			float *x = rand_vec(n * sh->cols, 71 + s);
			int16_t *q = malloc(sizeof(int16_t) * n * sh->cols);
			float *d = malloc(sizeof(float) * n * sh->cols / 32);
			struct act_q16 a;
			act_q16_quantize(&kernels_ops_scalar, &a, q, d, x, n, sh->cols);
			float *got = malloc(sizeof(float) * n * sh->rows);
			float *want = malloc(sizeof(float) * n * sh->rows);
			ops->rows_q16(got, sh->rows, &t.m, &a, n, 0, sh->rows);
			kernels_ops_scalar.rows_q16(want, sh->rows, &t.m, &a, n, 0, sh->rows);
			cr_assert_eq(memcmp(got, want, sizeof(float) * n * sh->rows), 0,
				     "%s q16 %ldx%ld differs from scalar", ops->name, (long)sh->rows, (long)sh->cols);
			check_rounding_bound(ops->name, &t, x, n, got, d);
			free(got);
			free(want);
			free(q);
			free(d);
			free(x);
			tmat_free(&t);
		}
	}
}

Test(kernels, q8_nan_and_inf_propagate)
{
	struct tmat t;
	tmat_make(&t, QUANT_INT4, 5, 128, 64, 9);
	float *x = rand_vec(128, 2), out[5];
	cr_assert_eq(kernels_set_activations("int8"), 0);
	x[40] = NAN;
	matvec(NULL, out, &t.m, x);
	for (int r = 0; r < 5; r++)
		cr_assert(isnan(out[r]), "row %d: %g from a NaN input", r, out[r]);
	x[40] = INFINITY;
	matvec(NULL, out, &t.m, x);
	for (int r = 0; r < 5; r++)
		cr_assert(!isfinite(out[r]), "row %d: %g from an infinite input", r, out[r]);
	cr_assert_eq(kernels_set_activations("bf16"), -EINVAL);
	free(x);
	tmat_free(&t);
}

Test(kernels, simd_level_named)
{
	enum cpu_simd lvl = cpu_simd_level(), parsed;
	cr_assert_leq(lvl, cpu_simd_supported());
	cr_assert_eq(cpu_simd_parse(cpu_simd_name(lvl), &parsed), 0);
	cr_assert_eq(parsed, lvl);
	cr_assert_str_eq(kernels_ops_get()->name, cpu_simd_name(lvl));
	cr_assert_neq(cpu_simd_parse("sse9", &parsed), 0);
}

Test(kernels, rmsnorm_reference)
{
	int64_t n = 517;
	float *x = rand_vec(n, 1), *w = rand_vec(n, 2), *out = malloc(sizeof(float) * n);
	double ss = 0;
	for (int64_t i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	double inv = 1.0 / sqrt(ss / n + 1e-6);
	rmsnorm(out, x, w, n, 1e-6f);
	for (int64_t i = 0; i < n; i++)
		cr_assert_float_eq(out[i], x[i] * inv * w[i], 1e-5);
	/* In place. */
	rmsnorm(x, x, w, n, 1e-6f);
	cr_assert_eq(memcmp(x, out, sizeof(float) * n), 0);
	free(x);
	free(w);
	free(out);
}

Test(kernels, softmax_and_swiglu_reference)
{
	int64_t n = 203;
	float *x = rand_vec(n, 3), *up = rand_vec(n, 4), *out = malloc(sizeof(float) * n);
	double *e = malloc(sizeof(double) * n), sum = 0, max = -INFINITY;
	for (int64_t i = 0; i < n; i++) {
		x[i] *= 30.0f; /* large logits: exercises the max subtraction */
		max = fmax(max, x[i]);
	}
	for (int64_t i = 0; i < n; i++)
		sum += e[i] = exp(x[i] - max);
	float *gate = rand_vec(n, 5);
	double *gw = malloc(sizeof(double) * n);
	for (int64_t i = 0; i < n; i++) {
		gate[i] *= 8.0f; /* silu over [-8, 8): both tails and the bend */
		double g = gate[i];
		gw[i] = g / (1 + exp(-g)) * up[i];
	}
	swiglu(out, gate, up, n);
	for (int64_t i = 0; i < n; i++)
		cr_assert_float_eq(out[i], gw[i], 1e-5, "swiglu %ld", (long)i);
	swiglu(gate, gate, up, n);
	cr_assert_eq(memcmp(gate, out, sizeof(float) * n), 0, "swiglu in place");
	free(gate);
	free(gw);
	softmax(x, n);
	double total = 0;
	for (int64_t i = 0; i < n; i++) {
		cr_assert_float_eq(x[i], e[i] / sum, 1e-6);
		total += x[i];
	}
	cr_assert_float_eq(total, 1.0, 1e-5);
	free(x);
	free(up);
	free(out);
	free(e);
}

static void check_rope(enum rope_kind kind)
{
	int64_t dim = 128, rot = 64, half = rot / 2;
	float inv_freq[32];
	for (int i = 0; i < half; i++)
		inv_freq[i] = (float)pow(10000.0, -2.0 * i / rot);
	for (int64_t pos = 0; pos < 300; pos += 37) {
		float *x = rand_vec(dim, 40 + pos);
		double *want = malloc(sizeof(double) * dim);
		for (int64_t i = 0; i < dim; i++)
			want[i] = x[i];
		for (int64_t i = 0; i < half; i++) {
			/* The angle rounds to f32 first, as in the HF cos/sin tables. */
			double th = (float)pos * inv_freq[i];
			int64_t a = kind == ROPE_NEOX ? i : 2 * i;
			int64_t b = kind == ROPE_NEOX ? i + half : 2 * i + 1;
			want[a] = x[a] * cos(th) - x[b] * sin(th);
			want[b] = x[b] * cos(th) + x[a] * sin(th);
		}
		rope(x, rot, pos, inv_freq, kind);
		for (int64_t i = 0; i < dim; i++)
			cr_assert_float_eq(x[i], want[i], 1e-5, "kind %d pos %ld i %ld", kind,
					   (long)pos, (long)i);
		free(x);
		free(want);
	}
}

Test(kernels, rope_neox_reference)
{
	check_rope(ROPE_NEOX);
}

Test(kernels, rope_gptj_reference)
{
	check_rope(ROPE_GPTJ);
}

Test(kernels, topk_reference)
{
	float x[] = { 0.5f, 2.0f, NAN, 2.0f, -1.0f, 7.0f, 0.5f, -INFINITY, 2.0f };
	int32_t idx[9];
	topk(idx, x, 9, 5);
	int32_t want[] = { 5, 1, 3, 8, 0 };
	for (int i = 0; i < 5; i++)
		cr_assert_eq(idx[i], want[i], "position %d: %d vs %d", i, idx[i], want[i]);
	topk(idx, x, 9, 9);
	int32_t all[] = { 5, 1, 3, 8, 0, 6, 4, 7, 2 };
	for (int i = 0; i < 9; i++)
		cr_assert_eq(idx[i], all[i], "full sort position %d", i);
	/* Random scores with many ties, against selection by repeated argmax. */
	uint64_t st = 99;
	float y[300];
	for (int i = 0; i < 300; i++)
		y[i] = (float)(int)(tu_randf(&st) * 20);
	int32_t got[40];
	char used[300] = { 0 };
	topk(got, y, 300, 40);
	for (int j = 0; j < 40; j++) {
		int best = -1;
		for (int i = 0; i < 300; i++)
			if (!used[i] && (best < 0 || y[i] > y[best]))
				best = i;
		used[best] = 1;
		cr_assert_eq(got[j], best, "rank %d", j);
	}
}

/* The sink joins the softmax (its max too) and takes no value: with a sink
 * far above the scores the output shrinks toward 0, far below it equals
 * plain attention's. */
Test(kernels, attention_head_sink_reference)
{
	int64_t n_ctx = 13, k_dim = 32, v_dim = 24, ks = 40, vs = 30;
	float *q = rand_vec(k_dim, 4), *k = rand_vec(n_ctx * ks, 5), *v = rand_vec(n_ctx * vs, 6);
	float *out = malloc(sizeof(float) * v_dim), *plain = malloc(sizeof(float) * v_dim);
	float *scratch = malloc(sizeof(float) * n_ctx), scale = 0.7f;
	const float sinks[] = { -50.0f, -0.3f, 0.0f, 1.7f, 40.0f };
	for (size_t c = 0; c < sizeof sinks / sizeof sinks[0]; c++) {
		double p[13], max = sinks[c], sum = 0;
		for (int64_t t = 0; t < n_ctx; t++) {
			double d = 0;
			for (int64_t i = 0; i < k_dim; i++)
				d += (double)q[i] * k[t * ks + i];
			p[t] = scale * d;
			max = fmax(max, p[t]);
		}
		for (int64_t t = 0; t < n_ctx; t++)
			sum += p[t] = exp(p[t] - max);
		sum += exp(sinks[c] - max);
		attention_head_sink(out, q, k, ks, v, vs, n_ctx, k_dim, v_dim, scale, sinks[c], scratch);
		for (int64_t i = 0; i < v_dim; i++) {
			double want = 0;
			for (int64_t t = 0; t < n_ctx; t++)
				want += p[t] / sum * v[t * vs + i];
			cr_assert_float_eq(out[i], want, 1e-5, "sink %g, dim %ld", (double)sinks[c], (long)i);
		}
	}
	attention_head(plain, q, k, ks, v, vs, n_ctx, k_dim, v_dim, scale, scratch);
	attention_head_sink(out, q, k, ks, v, vs, n_ctx, k_dim, v_dim, scale, -INFINITY, scratch);
	for (int64_t i = 0; i < v_dim; i++)
		cr_expect_float_eq(out[i], plain[i], 1e-6, "a -inf sink is no sink: dim %ld", (long)i);
	free(q);
	free(k);
	free(v);
	free(out);
	free(plain);
	free(scratch);
}

Test(kernels, attention_head_reference)
{
	int64_t n_ctx = 19, k_dim = 48, v_dim = 40, ks = 64, vs = 56;
	float *q = rand_vec(k_dim, 1), *k = rand_vec(n_ctx * ks, 2), *v = rand_vec(n_ctx * vs, 3);
	float *out = malloc(sizeof(float) * v_dim), *scratch = malloc(sizeof(float) * n_ctx);
	float scale = 1.0f / sqrtf((float)k_dim);
	double p[19], max = -INFINITY, sum = 0;
	for (int64_t t = 0; t < n_ctx; t++) {
		double d = 0;
		for (int64_t i = 0; i < k_dim; i++)
			d += (double)q[i] * k[t * ks + i];
		p[t] = scale * d * 4; /* sharpen so one position dominates less trivially */
		max = fmax(max, p[t]);
	}
	for (int64_t i = 0; i < k_dim; i++)
		q[i] *= 4;
	for (int64_t t = 0; t < n_ctx; t++)
		sum += p[t] = exp(p[t] - max);
	attention_head(out, q, k, ks, v, vs, n_ctx, k_dim, v_dim, scale, scratch);
	for (int64_t i = 0; i < v_dim; i++) {
		double want = 0;
		for (int64_t t = 0; t < n_ctx; t++)
			want += p[t] / sum * v[t * vs + i];
		cr_assert_float_eq(out[i], want, 1e-5, "dim %ld", (long)i);
	}
	free(q);
	free(k);
	free(v);
	free(out);
	free(scratch);
}

/* topk_set keeps the same set as topk (ties: lower index), in index order. */
Test(kernels, topk_set_matches_topk)
{
	float x[] = { 0.5f, 2.0f, NAN, 2.0f, -1.0f, 7.0f, 0.5f, -INFINITY, 2.0f };
	int32_t got[9];
	float scratch[9];
	topk_set(got, x, 9, 3, scratch);
	int32_t want3[] = { 1, 3, 5 }; /* 7, then the first two of three 2.0s */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(got[i], want3[i], "k=3 position %d: %d", i, got[i]);
	topk_set(got, x, 9, 9, scratch);
	for (int i = 0; i < 9; i++)
		cr_assert_eq(got[i], i, "k=n keeps everything in order");
	uint64_t st = 7;
	for (int trial = 0; trial < 200; trial++) {
		int n = 1 + (int)(fabsf(tu_randf(&st)) * 299), k = 1 + (int)(fabsf(tu_randf(&st)) * (n - 1));
		float y[300], sc[300];
		/* Coarse values give many ties; some exact zeros as relu makes them. */
		for (int i = 0; i < n; i++)
			y[i] = trial % 2 ? (float)(int)(tu_randf(&st) * 4) : tu_randf(&st);
		int32_t a[300], b[300];
		topk(a, y, n, k);
		topk_set(b, y, n, k, sc);
		char in_a[300] = { 0 };
		for (int i = 0; i < k; i++)
			in_a[a[i]] = 1;
		for (int i = 0; i < k; i++) {
			cr_assert(in_a[b[i]], "trial %d: index %d kept by topk_set, not by topk", trial, b[i]);
			cr_assert(i == 0 || b[i] > b[i - 1], "trial %d: not increasing", trial);
		}
	}
}

/* attention_head_keys over a subset equals attention_head over those keys
 * gathered contiguously, bit for bit; over all keys it is attention_head. */
Test(kernels, attention_head_keys_subset)
{
	int64_t n_ctx = 23, k_dim = 40, v_dim = 24, ks = 48, vs = 32;
	float *q = rand_vec(k_dim, 11), *k = rand_vec(n_ctx * ks, 12), *v = rand_vec(n_ctx * vs, 13);
	float a[24], b[24], scratch[23];
	int32_t keys[] = { 0, 3, 4, 9, 15, 22 }, all[23];
	int64_t nk = 6;
	float kg[6 * 48], vg[6 * 32];
	for (int64_t i = 0; i < nk; i++) {
		memcpy(kg + i * ks, k + keys[i] * ks, sizeof(float) * (size_t)ks);
		memcpy(vg + i * vs, v + keys[i] * vs, sizeof(float) * (size_t)vs);
	}
	attention_head_keys(a, q, k, ks, v, vs, keys, nk, k_dim, v_dim, 0.3f, scratch);
	attention_head(b, q, kg, ks, vg, vs, nk, k_dim, v_dim, 0.3f, scratch);
	cr_assert_eq(memcmp(a, b, sizeof a), 0, "subset differs from the gathered keys");
	for (int i = 0; i < 23; i++)
		all[i] = i;
	attention_head_keys(a, q, k, ks, v, vs, all, n_ctx, k_dim, v_dim, 0.3f, scratch);
	attention_head(b, q, k, ks, v, vs, n_ctx, k_dim, v_dim, 0.3f, scratch);
	cr_assert_eq(memcmp(a, b, sizeof a), 0, "all keys differ from attention_head");
	free(q);
	free(k);
	free(v);
}
