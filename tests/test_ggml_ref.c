/*
 * test_ggml_ref — colibri's reading of GGUF files against ggml and
 * llama.cpp themselves (upstream commit 81ff7abe5), through the references
 * committed in tests/ref/ggml/: tools/ggml_ref.c (dequantization) and
 * bench/llama_logits.c (logits) made them, offline, and
 * that folder's README.md gives the build, the commands and the reasons
 * for each bound. Nothing here needs llama.cpp.
 *
 *  - Each reference was made from fixtures that tools/make_fixtures.sh
 *    still writes: their sha256 (the block file, or the GGUF and the
 *    tokens) must be the one recorded in inputs.sha256, or the test fails
 *    and says how to remake the references.
 *  - Dequantization: ggml's to_float of each block type's blocks
 *    (ggml_blocks/<type>.bin, a 4 x 512 matrix) equals bit for bit
 *    tools/ggml_blocks.py's (ggml_blocks/<type>.f32, what the GGUF tests
 *    build on), colibri's quant_row_dequantize, and the column that
 *    colibri's matvec picks out with a unit vector under f32 activations
 *    (the kernels' own path).
 *  - Logits: llama.cpp's logits of each fixture GGUF it loads, and
 *    colibri's of the same file (`colibri convert --activations f32`, then
 *    `colibri logits`), within a bound measured per file. The F32 files
 *    agree to float rounding; wherever ggml rounds the activations (to
 *    f16 / bf16 against f16 / bf16 weights, to Q8_0 / Q8_K against the
 *    block types and MXFP4), the bound is that rounding's effect, 1 to 4%
 *    of the logits' scale on these tiny models, and top-1 is compared
 *    where ggml's lead is clear of it. The qwen3_moe GGUFs are not here:
 *    llama.cpp does not load them (README.md).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels.h"
#include "compute/quant.h"
#include "tests/fixture_cache.h"
#include "tests/logits_util.h"
#include "tests/test_util.h"

#define REFS "tests/ref/ggml"
#define REMAKE "rebuild tools/ggml_ref.c and bench/llama_logits.c against llama.cpp 81ff7abe5 and remake the " \
	       "references as " REFS "/README.md says"

/* The block files' matrix (tools/ggml_blocks.py). */
#define ROWS 4
#define COLS 512

static char scratch[4096];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(ggml_ref, .init = setup, .fini = teardown);

/* Fails the test unless the fixture file rel (relative to the fixtures
 * folder) exists and has the sha256 that REFS/inputs.sha256 records for
 * it: a reference says nothing about a fixture that has changed since. */
static void input_unchanged(const char *rel)
{
	char fix[PATH_MAX], sums[PATH_MAX], path[PATH_MAX + 300];
	cr_assert(realpath(tu_fixtures(), fix), "no fixtures in %s (run tools/make_fixtures.sh %s)", tu_fixtures(),
		  tu_fixtures());
	snprintf(sums, sizeof sums, "%s/" REFS "/inputs.sha256", tu_repo());
	snprintf(path, sizeof path, "%s/%s", fix, rel);
	cr_assert(access(path, R_OK) == 0, "missing %s (run tools/make_fixtures.sh)", path);
	cr_assert_eq(tu_sh("awk -v p='%s' '$2 == p' '%s' > '%s/want' && test -s '%s/want'", rel, sums, scratch,
			   scratch), 0, "%s records no sha256 for %s", sums, rel);
	cr_assert_eq(tu_sh("cd '%s' && sha256sum --check --status '%s/want'", fix, scratch), 0,
		     "the fixture %s changed since the ggml reference was made from it (its sha256 is not the one "
		     "in %s): %s", path, sums, REMAKE);
}

/* REFS/name, malloc'd, with its size in floats. */
static float *read_ref(const char *name, size_t *n_floats)
{
	char path[PATH_MAX];
	size_t len;
	snprintf(path, sizeof path, "%s/" REFS "/%s", tu_repo(), name);
	float *r = (float *)tu_read(path, &len);
	cr_assert_not_null(r, "missing %s", path);
	cr_assert_eq(len % sizeof(float), 0, "%s: %zu bytes is not whole floats", path, len);
	*n_floats = len / sizeof(float);
	return r;
}

static uint32_t bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* The same value: the same bits, or, where zero_sign says a format stores
 * zero's sign differently (MXFP4: ggml's code 8 reads +0, colibri's -0,
 * quant.h), both zero. */
static bool same_value(float a, float b, bool zero_sign)
{
	return bits(a) == bits(b) || (zero_sign && a == 0 && b == 0);
}

/* Expects got[n] to hold want's values (same_value); reports the first
 * difference and how many there are. */
static void expect_same(const char *what, const float *got, const float *want, size_t n, bool zero_sign)
{
	size_t diff = 0, first = 0;
	for (size_t i = 0; i < n; i++) {
		if (!same_value(got[i], want[i], zero_sign) && diff++ == 0)
			first = i;
	}
	cr_expect_eq(diff, 0, "%s: %zu of %zu values differ from ggml's, the first at row %zu col %zu: %.9g (0x%08x), "
		     "ggml %.9g (0x%08x)", what, diff, n, first / COLS, first % COLS, got[first], bits(got[first]),
		     want[first], bits(want[first]));
}

static void check_dequant(const char *type_name)
{
	char rel[64], name[64], path[PATH_MAX];
	snprintf(rel, sizeof rel, "ggml_blocks/%s.bin", type_name);
	input_unchanged(rel);
	size_t n;
	snprintf(name, sizeof name, "dequant_%s.f32", type_name);
	float *ggml = read_ref(name, &n);
	cr_assert_eq(n, (size_t)ROWS * COLS, "%s: %zu floats, not %d x %d", name, n, ROWS, COLS);

	/* tools/ggml_blocks.py, which tools/gguf_to_hf.py (the GGUF tests'
	 * reference checkpoints) dequantizes with. */
	size_t len;
	snprintf(path, sizeof path, "%s/ggml_blocks/%s.f32", tu_fixtures(), type_name);
	float *numpy = (float *)tu_read(path, &len);
	cr_assert(numpy && len == n * sizeof(float), "missing or short %s (run tools/make_fixtures.sh)", path);
	expect_same("tools/ggml_blocks.py", numpy, ggml, n, false);

	/* colibri's dequantizer, on the blocks as a GGUF holds them (MXFP4's
	 * rearranged first, as the converter does). */
	enum quant_type type;
	cr_assert_eq(quant_type_parse(type_name, &type), 0, "colibri has no type %s", type_name);
	snprintf(path, sizeof path, "%s/%s", tu_fixtures(), rel);
	uint8_t *blocks = (uint8_t *)tu_read(path, &len);
	cr_assert_not_null(blocks, "cannot read %s", path);
	const void *data = blocks;
	uint8_t *mx = NULL;
	bool zero_sign = type == QUANT_MXFP4;
	if (type == QUANT_MXFP4) {
		cr_assert_eq(len, (size_t)ROWS * COLS / 32 * 17, "%s: %zu bytes", path, len);
		mx = malloc(quant_matrix_bytes(QUANT_MXFP4, ROWS, COLS, QUANT_MXFP4_BLOCK));
		cr_assert_eq(quant_mxfp4_from_ggml(mx, blocks, ROWS, COLS), 0, "%s: refused", path);
		data = mx;
	} else {
		cr_assert_eq(len, quant_data_bytes(type, ROWS, COLS), "%s: %zu bytes, not %d x %d %s", path, len,
			     ROWS, COLS, type_name);
	}
	struct qmatrix m;
	quant_matrix_view(&m, data, type, ROWS, COLS, 0);
	float *got = malloc(n * sizeof(float));
	for (int r = 0; r < ROWS; r++)
		quant_row_dequantize(got + (size_t)r * COLS, &m, r);
	expect_same("quant_row_dequantize", got, ggml, n, zero_sign);

	/* The kernels: column c of m is m e_c; under f32 activations a block
	 * type's matvec multiplies its dequantized weights (kernels.h), and
	 * w * 1 plus zeros is w (zero's sign aside). */
	cr_assert_eq(kernels_set_activations("f32"), 0);
	float x[COLS] = { 0 }, out[ROWS];
	for (int c = 0; c < COLS; c++) {
		x[c] = 1;
		matvec(NULL, out, &m, x);
		x[c] = 0;
		for (int r = 0; r < ROWS; r++)
			got[(size_t)r * COLS + c] = out[r];
	}
	expect_same("matvec on unit vectors", got, ggml, n, true);
	cr_log_info("%s: ggml's to_float = ggml_blocks.py = quant_row_dequantize = matvec (%s), %zu values", type_name,
		    kernels_ops_name(), n);
	free(got);
	free(mx);
	free(blocks);
	free(numpy);
	free(ggml);
}

Test(ggml_ref, dequant_f16) { check_dequant("f16"); }
Test(ggml_ref, dequant_bf16) { check_dequant("bf16"); }
Test(ggml_ref, dequant_q8_0) { check_dequant("q8_0"); }
Test(ggml_ref, dequant_q4_0) { check_dequant("q4_0"); }
Test(ggml_ref, dequant_q4_k) { check_dequant("q4_k"); }
Test(ggml_ref, dequant_q5_k) { check_dequant("q5_k"); }
Test(ggml_ref, dequant_q6_k) { check_dequant("q6_k"); }
Test(ggml_ref, dequant_mxfp4) { check_dequant("mxfp4"); }

/* Colibri's logits l against ggml's r, T rows, within bound of each row's
 * largest |r|. Top-1 is compared (lu_expect_close) on the rows where
 * ggml's top-1 leads its runner-up by more than twice the bound: there any
 * other top-1 would take a difference above the bound. On the other rows
 * two computations each within the bound may order the leaders either
 * way, so those are compared value by value only (finite, within the
 * bound). */
static void expect_close(const char *what, const float *l, const float *r, size_t n, int T, double bound)
{
	size_t V = n / (size_t)T;
	float *lc = malloc(n * sizeof(float)), *rc = malloc(n * sizeof(float));
	int clear = 0, near_tie_bad = 0;
	double near_tie_max = 0;
	char ties[512] = "";
	for (int t = 0; t < T; t++) {
		const float *x = l + (size_t)t * V, *y = r + (size_t)t * V;
		double scale = 0, top = -INFINITY, second = -INFINITY;
		for (size_t v = 0; v < V; v++) {
			if (isfinite(y[v]) && fabs(y[v]) > scale)
				scale = fabs(y[v]);
			if (y[v] > top) {
				second = top;
				top = y[v];
			} else if (y[v] > second) {
				second = y[v];
			}
		}
		if (top - second > 2 * bound * scale) {
			memcpy(lc + (size_t)clear * V, x, V * sizeof(float));
			memcpy(rc + (size_t)clear * V, y, V * sizeof(float));
			clear++;
			continue;
		}
		snprintf(ties + strlen(ties), sizeof ties - strlen(ties), " %d (%.2g)", t, (top - second) / scale);
		for (size_t v = 0; v < V; v++) {
			double rel = fabs((double)x[v] - (double)y[v]) / scale;
			if (!(rel <= bound) && near_tie_bad++ < 4)
				cr_expect(0, "%s: position %d id %zu: %.9g, ggml %.9g: %.3g of the row's scale > bound %.1g",
					  what, t, v, x[v], y[v], rel, bound);
			if (rel > near_tie_max)
				near_tie_max = rel;
		}
	}
	cr_expect_eq(near_tie_bad, 0, "%s: %d logits of near-tie positions are beyond the bound or not finite", what,
		     near_tie_bad);
	cr_expect_gt(clear, 0, "%s: no position has a clear top-1", what);
	if (clear > 0)
		lu_expect_close(what, lc, rc, (size_t)clear * V, clear, bound);
	if (clear < T)
		cr_log_info("%s: near-tie positions (ggml's lead over its runner-up, of the row's scale):%s; "
			    "top-1 not compared there, max |diff| %.3g of the row's scale", what, ties, near_tie_max);
	free(lc);
	free(rc);
}

/* gguf/<stem>.gguf converted with f32 activations (once per build and
 * shared, fixture_cache.h), so that colibri computes the file's dequantized
 * model exactly (test_gguf_convert) and only ggml's rounding is left in the
 * difference; its logits on ref/gguf_<stem>.tokens against
 * REFS/logits_<stem>.f32. */
static void check_logits(const char *stem, double bound)
{
	char gguf[300], tok[300], out[PATH_MAX + 64], name[300];
	snprintf(gguf, sizeof gguf, "gguf/%s.gguf", stem);
	snprintf(tok, sizeof tok, "ref/gguf_%s.tokens", stem);
	input_unchanged(gguf);
	input_unchanged(tok);
	fc_container(out, sizeof out, gguf, "--activations f32");
	snprintf(name, sizeof name, "gguf_%s", stem);
	char *tokens = lu_read_tokens(name);
	size_t nl, nr;
	float *l = lu_logits(scratch, out, tokens, "", &nl);
	snprintf(name, sizeof name, "logits_%s.f32", stem);
	float *r = read_ref(name, &nr);
	int T = lu_count_tokens(tokens);
	cr_assert_eq(nl, nr, "%s: colibri gives %zu logits, ggml's reference has %zu", stem, nl, nr);
	expect_close(stem, l, r, nl, T, bound);
	free(r);
	free(l);
	free(tokens);
}

/*
 * The bounds, relative to each row's largest |logit|, each about twice
 * the difference measured when the references were made (README.md;
 * measured in brackets).
 *
 * F32 files: both compute in f32, in different orders [3.2e-7 to 6.4e-7].
 */
Test(ggml_ref, logits_olmoe_f32) { check_logits("olmoe.f32", 2e-6); }
/* llama.cpp's permuted q / k rows, undone by colibri [3.2e-7]. */
Test(ggml_ref, logits_mixtral_f32) { check_logits("mixtral.f32", 2e-6); }
/* MLA from attn_k_b / attn_v_b [6.4e-7]. */
Test(ggml_ref, logits_deepseek_v3_f32) { check_logits("deepseek_v3.f32", 2e-6); }
/* The MTP layer kept as blk.3 (nextn.*), which llama.cpp loads and leaves
 * out of the graph, as colibri does [4.5e-7]. */
Test(ggml_ref, logits_glm4_moe_f32) { check_logits("glm4_moe.f32", 2e-6); }

/* gpt-oss keeps its experts MXFP4 even in the F32 file, and ggml rounds
 * their activations to Q8_0 [1.8e-2]; the MXFP4_MOE file has the other
 * matrices Q8_0 too [3.7e-2]. */
Test(ggml_ref, logits_gpt_oss_mxfp4_f32) { check_logits("gpt_oss_mxfp4.f32", 3e-2); }
Test(ggml_ref, logits_gpt_oss_mxfp4_mxfp4) { check_logits("gpt_oss_mxfp4.mxfp4", 6e-2); }

/* OLMoE at every block type, 8 tokens with a router margin of 1e-2 (so
 * that ggml's rounding picks the same experts). ggml rounds activations
 * to f16 against F16 [4.8e-4], to bf16 against BF16 [3.2e-3], to Q8_0
 * against Q8_0, Q4_0 and MXFP4, to Q8_K against the k-quants [1.1e-2 to
 * 1.6e-2]. */
#define BLOCKS_BOUND 3e-2
Test(ggml_ref, logits_olmoe_blocks_f16) { check_logits("olmoe_blocks.f16", 1e-3); }
Test(ggml_ref, logits_olmoe_blocks_bf16) { check_logits("olmoe_blocks.bf16", 6e-3); }
Test(ggml_ref, logits_olmoe_blocks_q8_0) { check_logits("olmoe_blocks.q8_0", BLOCKS_BOUND); }
Test(ggml_ref, logits_olmoe_blocks_q4_0) { check_logits("olmoe_blocks.q4_0", BLOCKS_BOUND); }
Test(ggml_ref, logits_olmoe_blocks_q4_k) { check_logits("olmoe_blocks.q4_k", BLOCKS_BOUND); }
Test(ggml_ref, logits_olmoe_blocks_q5_k) { check_logits("olmoe_blocks.q5_k", BLOCKS_BOUND); }
Test(ggml_ref, logits_olmoe_blocks_q6_k) { check_logits("olmoe_blocks.q6_k", BLOCKS_BOUND); }
/* Q4_K_M: Q4_K, Q6_K, Q8_0 and Q5_K in one file. */
Test(ggml_ref, logits_olmoe_blocks_q4_k_m) { check_logits("olmoe_blocks.q4_k_m", BLOCKS_BOUND); }
/* MXFP4_MOE: MXFP4 experts, Q8_0 elsewhere. */
Test(ggml_ref, logits_olmoe_blocks_mxfp4) { check_logits("olmoe_blocks.mxfp4", BLOCKS_BOUND); }
