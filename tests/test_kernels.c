/*
 * test_kernels — compute/kernels.h and the per-level tables of
 * kernels_internal.h, weights in f32 activations (test_kernels_q8.c: int8
 * and int16 activations; test_kernels_ops.c: the other kernels):
 *  - the scalar matvec of every weight type against a naive
 *    dequantize-then-dot in double precision (tests/kernels_ref.h);
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
 *  - the GGML block types (q8_0, q4_0, q4_k, q5_k, q6_k) and f16, from random
 *    blocks with random finite halves: in all of the above, and at every
 *    level bit-identical to that level's f32 matvec / matmul on the matrix
 *    of their quant_row_dequantize values (1..7 tokens, ragged row counts).
 */
#include "tests/kernels_ref.h"

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
