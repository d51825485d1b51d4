/*
 * test_kernels_q8 — the kernels with quantized activations:
 *  - int16 activations for int8 weights: every level bit-identical to
 *    scalar and within the activations' rounding;
 *  - int8 activations: the quantizer's rounding bound, the scalar q8 dot
 *    products against this file's exact integer sums, every level bit-identical
 *    to scalar, the error of the whole path within what the activations'
 *    rounding allows, NaN and infinity propagated;
 *  - the GGML block types with int8 activations (auto and int8): their q8
 *    rows, scalar against a double sum of the dequantized values times the
 *    quantized activations, every level bit-identical to scalar, matmul
 *    rows equal to one-token calls, the public path routed to them and
 *    within the activations' rounding of the exact product.
 */
#include "tests/kernels_ref.h"

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
