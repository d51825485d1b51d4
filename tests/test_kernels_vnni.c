/*
 * test_kernels_vnni — the integer dot products of every SIMD level
 * (kernel_rows_q8_fn for int8, int4, mxfp4 and the GGML block types,
 * kernel_rows_q16_fn for int8), the VNNI levels' above all, byte for byte
 * against the scalar reference where their blocking has edges that
 * test_kernels' shapes do not reach:
 *  - row slices [begin, end) with odd ends (two rows share a register, and
 *    a lone last row is computed twice but must be written once) into an
 *    output whose stride is wider than the rows, every other float left
 *    alone;
 *  - 1..9 tokens (groups of four, then one at a time);
 *  - groups 32, 64, 96, 128 and 160, a lone last run (cols % 64 == 32);
 *  - weights of every code (int8 -128 included, mxfp4 scale bytes from 0
 *    to 254), activations at +-127, all-zero runs, runs holding a NaN or an
 *    infinity (NaN out, the same NaN as scalar's);
 *  - the public matmul at every level (kernels_set_level) with no pool and
 *    pools of 1..3 threads, up to a prompt that spans several token
 *    blocks: every level writes the scalar level's bits, and row t of
 *    matmul equals matvec on token t.
 * Levels the CPU lacks are skipped with a reason.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "compute/cpu.h"
#include "compute/kernels.h"
#include "compute/kernels_internal.h"
#include "compute/threadpool.h"
#include "tests/test_util.h"

static int is_block_type(enum quant_type t)
{
	return t >= QUANT_Q8_0 && t <= QUANT_Q6_K;
}

/* A random finite half in [0.001, 0.1), either sign when signed_. */
static void half_put(uint8_t *p, uint64_t *seed, int signed_)
{
	float v = 0.001f + 0.0495f * (tu_randf(seed) + 1.0f);
	if (signed_ && tu_randf(seed) < 0)
		v = -v;
	uint16_t h = f32_to_f16(v);
	memcpy(p, &h, 2);
}

/* A matrix of `type`: quantized from random floats, then (raw) its code
 * bytes replaced by random bytes, so every code occurs (int8 -128, every
 * nibble, mxfp4 scale bytes 0..254); the block types are random blocks
 * with finite halves. Caller frees m->data. */
static void matrix_make(struct qmatrix *m, enum quant_type type, int64_t rows, int64_t cols, int32_t group,
			int raw, uint64_t seed)
{
	cr_assert_eq(quant_check_shape(type, rows, cols, group), 0, "%s %ldx%ld group %d", quant_type_name(type),
		     (long)rows, (long)cols, group);
	uint64_t bytes = quant_matrix_bytes(type, rows, cols, group);
	uint8_t *blob = malloc(bytes);
	if (is_block_type(type)) {
		uint64_t data = quant_data_bytes(type, rows, cols);
		for (uint64_t i = 0; i < data; i++)
			blob[i] = (uint8_t)(tu_randf(&seed) * 128.0f + 128.0f);
		uint64_t bs = quant_data_bytes(type, 1, type == QUANT_Q8_0 || type == QUANT_Q4_0 ? 32 : 256);
		for (uint64_t k = 0; k < data / bs; k++) {
			uint8_t *b = blob + k * bs;
			if (type == QUANT_Q6_K) {
				half_put(b + 208, &seed, 1);
			} else if (type == QUANT_Q4_K || type == QUANT_Q5_K) {
				half_put(b, &seed, 0);
				half_put(b + 2, &seed, 0);
			} else {
				half_put(b, &seed, 1);
			}
		}
	} else {
		float *w = malloc(sizeof(float) * rows * cols);
		for (int64_t i = 0; i < rows * cols; i++)
			w[i] = tu_randf(&seed) * 0.5f;
		quant_matrix_quantize(blob, w, type, rows, cols, group);
		free(w);
		if (raw) {
			int64_t codes = type == QUANT_INT8 ? cols : cols / 2;
			int64_t row_bytes = type == QUANT_MXFP4 ? cols / 2 + cols / 32 : codes;
			for (int64_t r = 0; r < rows; r++) {
				uint8_t *row = blob + r * row_bytes;
				for (int64_t i = 0; i < codes; i++)
					row[i] = (uint8_t)(tu_randf(&seed) * 128.0f + 128.0f);
				for (int64_t k = 0; type == QUANT_MXFP4 && k < cols / 32; k++)
					row[codes + k] = (uint8_t)(k % 5 == 0 ? (r + k) % 3 : 100 + (r * 7 + k) % 155);
			}
		}
	}
	quant_matrix_view(m, blob, type, rows, cols, group);
}

/* n tokens of cols inputs, random in [-1, 1), token tok's run k special
 * when (tok + k) % 7 says: all zero, +-1 (so q = +-127), a NaN, an
 * infinity; with_bad: the NaN and infinity runs are made at all. */
static float *acts_make(int64_t n, int64_t cols, int with_bad, uint64_t seed)
{
	float *x = malloc(sizeof(float) * n * cols);
	for (int64_t i = 0; i < n * cols; i++)
		x[i] = tu_randf(&seed);
	for (int64_t tok = 0; tok < n; tok++)
		for (int64_t k = 0; k < cols / 32; k++) {
			float *run = x + tok * cols + 32 * k;
			switch ((tok + 3 * k) % 7) {
			case 1:
				memset(run, 0, 32 * sizeof(float));
				break;
			case 2:
				for (int i = 0; i < 32; i++)
					run[i] = (i * 5) % 3 ? 1.0f : -1.0f;
				break;
			case 3:
				if (with_bad && tok % 3 == 2)
					run[k % 32] = NAN;
				break;
			case 4:
				if (with_bad && tok % 4 == 3)
					run[(k + 5) % 32] = -INFINITY;
				break;
			}
		}
	return x;
}

/* Same bits, or both NaN: a NaN run's d is the quantizer's NaN and the
 * products carry it, but which NaN an instruction keeps when two meet is
 * not what this test is about. */
static int same_float(float a, float b)
{
	return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b));
}

struct case_shape {
	enum quant_type type;
	int64_t rows, cols;
	int32_t group;
};

static const struct case_shape cases[] = {
	{ QUANT_INT4, 1, 64, 64 },     { QUANT_INT4, 2, 96, 32 },    { QUANT_INT4, 3, 2048, 64 },
	{ QUANT_INT4, 5, 288, 96 },    { QUANT_INT4, 7, 384, 128 },  { QUANT_INT4, 9, 320, 160 },
	{ QUANT_INT4, 13, 160, 32 },   { QUANT_INT8, 1, 32, 32 },    { QUANT_INT8, 2, 128, 64 },
	{ QUANT_INT8, 3, 96, 32 },     { QUANT_INT8, 5, 288, 96 },   { QUANT_INT8, 7, 384, 128 },
	{ QUANT_INT8, 9, 320, 160 },   { QUANT_INT8, 11, 1024, 64 }, { QUANT_MXFP4, 1, 32, 32 },
	{ QUANT_MXFP4, 3, 96, 32 },    { QUANT_MXFP4, 6, 2880, 32 }, { QUANT_MXFP4, 9, 352, 32 },
	{ QUANT_Q8_0, 1, 32, 0 },      { QUANT_Q8_0, 4, 96, 0 },     { QUANT_Q8_0, 7, 640, 0 },
	{ QUANT_Q4_0, 2, 32, 0 },      { QUANT_Q4_0, 5, 160, 0 },    { QUANT_Q4_0, 9, 512, 0 },
	{ QUANT_Q4_K, 3, 256, 0 },     { QUANT_Q4_K, 5, 768, 0 },    { QUANT_Q5_K, 3, 512, 0 },
	{ QUANT_Q5_K, 1, 256, 0 },     { QUANT_Q6_K, 1, 256, 0 },    { QUANT_Q6_K, 5, 512, 0 },
	{ QUANT_Q6_K, 13, 768, 0 },
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* Rows [b, e) of each case for every n in 1..9, int8 activations (and
 * int16 for int8 weights), at `level` against scalar. */
static void check_rows(enum cpu_simd level)
{
	if (!cpu_simd_available(level))
		cr_skip_test("this CPU lacks %s (best level: %s)", cpu_simd_name(level),
			     cpu_simd_name(cpu_simd_supported()));
	const struct kernels_ops *ops = kernels_ops_for(level);
	for (unsigned c = 0; c < N_CASES; c++) {
		const struct case_shape *cs = &cases[c];
		int64_t rows = cs->rows, cols = cs->cols, os = rows + 3;
		for (int raw = 0; raw < 2; raw++) {
			if (raw && is_block_type(cs->type))
				continue;
			struct qmatrix m;
			matrix_make(&m, cs->type, rows, cols, cs->group, raw, 100 + 2 * c + (uint64_t)raw);
			int64_t nmax = 9;
			float *x = acts_make(nmax, cols, 1, 300 + c);
			int8_t *q8 = malloc((size_t)act_q8_bytes(nmax, cols));
			float *d8 = malloc(sizeof(float) * (size_t)act_q8_lanes(nmax, cols));
			int32_t *s8 = malloc(sizeof(int32_t) * (size_t)act_q8_lanes(nmax, cols));
			int16_t *q16 = malloc(sizeof(int16_t) * (size_t)(nmax * cols));
			float *d16 = malloc(sizeof(float) * (size_t)(nmax * cols / 32));
			struct act_q8 a8;
			struct act_q16 a16;
			act_q8_quantize(&kernels_ops_scalar, &a8, q8, d8, s8, x, nmax, cols);
			act_q16_quantize(&kernels_ops_scalar, &a16, q16, d16, x, nmax, cols);
			float *got = malloc(sizeof(float) * (size_t)(nmax * os));
			float *want = malloc(sizeof(float) * (size_t)(nmax * os));
			const int64_t slices[4][2] = { { 0, rows }, { 1, rows }, { 0, rows - 1 }, { rows / 2, rows / 2 + 1 } };
			int paths = cs->type == QUANT_INT8 ? 2 : 1;
			for (int path = 0; path < paths; path++)
				for (int64_t n = 1; n <= nmax; n++)
					for (int sl = 0; sl < 4; sl++) {
						int64_t b = slices[sl][0], e = slices[sl][1];
						if (b >= e)
							continue;
						memset(got, 0x5a, sizeof(float) * (size_t)(nmax * os));
						memset(want, 0x5a, sizeof(float) * (size_t)(nmax * os));
						if (path == 0) {
							ops->rows_q8[cs->type](got, os, &m, &a8, n, b, e);
							kernels_ops_scalar.rows_q8[cs->type](want, os, &m, &a8, n, b, e);
						} else {
							ops->rows_q16(got, os, &m, &a16, n, b, e);
							kernels_ops_scalar.rows_q16(want, os, &m, &a16, n, b, e);
						}
						for (int64_t i = 0; i < nmax * os; i++)
							cr_assert(same_float(got[i], want[i]),
								  "%s %s%s %ldx%ld group %d raw %d, n=%ld rows [%ld, %ld): "
								  "token %ld row %ld: %a, scalar %a",
								  ops->name, path ? "q16 " : "", quant_type_name(cs->type),
								  (long)rows, (long)cols, cs->group, raw, (long)n, (long)b,
								  (long)e, (long)(i / os), (long)(i % os), (double)got[i],
								  (double)want[i]);
					}
			free(got);
			free(want);
			free(q8);
			free(d8);
			free(s8);
			free(q16);
			free(d16);
			free(x);
			free((void *)m.data);
		}
	}
}

Test(kernels_vnni, avxvnni_rows_edges)
{
	check_rows(CPU_SIMD_AVX2_VNNI);
}

Test(kernels_vnni, avx512vnni_rows_edges)
{
	check_rows(CPU_SIMD_AVX512_VNNI);
}

Test(kernels_vnni, avx2_rows_edges)
{
	check_rows(CPU_SIMD_AVX2);
}

Test(kernels_vnni, avx512_rows_edges)
{
	check_rows(CPU_SIMD_AVX512);
}

/* The public path: for each level, matmul over n tokens with pools of
 * 0..3 threads writes the scalar level's bits, and row t is matvec of
 * token t. */
static void check_public(enum cpu_simd level)
{
	if (!cpu_simd_available(level))
		cr_skip_test("this CPU lacks %s (best level: %s)", cpu_simd_name(level),
			     cpu_simd_name(cpu_simd_supported()));
	struct threadpool *pools[4] = { NULL };
	for (int i = 1; i < 4; i++)
		cr_assert_eq(threadpool_init(&pools[i], i), 0);
	static const struct {
		enum quant_type type;
		const char *act;
		int64_t rows, cols, n;
		int32_t group;
	} runs[] = {
		{ QUANT_INT4, "auto", 77, 320, 70, 64 },   { QUANT_INT4, "auto", 33, 96, 300, 32 },
		{ QUANT_INT8, "auto", 77, 320, 70, 64 },   { QUANT_INT8, "int8", 77, 320, 70, 64 },
		{ QUANT_INT8, "int8", 19, 160, 300, 160 }, { QUANT_MXFP4, "auto", 45, 352, 70, 32 },
		{ QUANT_Q4_0, "auto", 29, 160, 70, 0 },    { QUANT_Q8_0, "auto", 31, 224, 70, 0 },
		{ QUANT_Q4_K, "auto", 21, 512, 13, 0 },
	};
	for (unsigned k = 0; k < sizeof runs / sizeof runs[0]; k++) {
		int64_t rows = runs[k].rows, cols = runs[k].cols, n = runs[k].n;
		cr_assert_eq(kernels_set_activations(runs[k].act), 0);
		struct qmatrix m;
		matrix_make(&m, runs[k].type, rows, cols, runs[k].group, 0, 900 + k);
		float *x = acts_make(n, cols, 0, 950 + k);
		float *want = malloc(sizeof(float) * (size_t)(n * rows)), *got = malloc(sizeof(float) * (size_t)(n * rows));
		cr_assert_eq(kernels_set_level(CPU_SIMD_SCALAR), 0);
		matmul(pools[2], want, &m, x, n);
		cr_assert_eq(kernels_set_level(level), 0);
		for (int p = 0; p < 4; p++) {
			memset(got, 0xff, sizeof(float) * (size_t)(n * rows));
			matmul(pools[p], got, &m, x, n);
			cr_assert_eq(memcmp(got, want, sizeof(float) * (size_t)(n * rows)), 0,
				     "%s matmul %s %ldx%ld n=%ld, %s activations, %d threads: not scalar's bits",
				     cpu_simd_name(level), quant_type_name(m.type), (long)rows, (long)cols, (long)n,
				     runs[k].act, p);
		}
		for (int64_t tok = 0; tok < n; tok += 7) {
			matvec(pools[tok % 4], got, &m, x + tok * cols);
			cr_assert_eq(memcmp(got, want + tok * rows, sizeof(float) * (size_t)rows), 0,
				     "%s matvec %s token %ld is not matmul's row", cpu_simd_name(level),
				     quant_type_name(m.type), (long)tok);
		}
		free(x);
		free(want);
		free(got);
		free((void *)m.data);
	}
	for (int i = 1; i < 4; i++)
		threadpool_free(pools[i]);
	kernels_set_level(cpu_simd_level());
	kernels_set_activations("auto");
}

Test(kernels_vnni, avxvnni_public_matmul)
{
	check_public(CPU_SIMD_AVX2_VNNI);
}

Test(kernels_vnni, avx512vnni_public_matmul)
{
	check_public(CPU_SIMD_AVX512_VNNI);
}
