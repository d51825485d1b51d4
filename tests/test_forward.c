/*
 * test_forward — the forward pass against the independent numpy reference
 * (tools/reference.py, written from the transformers model definitions):
 *  - f32 and bf16 containers of olmoe, qwen3_moe (with a dense layer, fused
 *    experts, fp8 weights), mixtral, deepseek_v3 (MLA in the absorbed form,
 *    YaRN, grouped sigmoid routing, shared experts; with and without
 *    q_lora; fp8 block-scaled), glm4_moe, deepseek_v32 and glm_moe_dsa (MLA
 *    with the DSA indexer keeping 4 of up to 16 positions; GLM-5's shared
 *    layer, interleaved RoPE with the pairing flags absent and as released,
 *    YaRN), qwen3_5_moe (the released vision-language layout: text_config,
 *    model.language_model.*, fused experts, a vision tower and an MTP block
 *    beside them), qwen3_5_moe_text (text-only config, per-expert experts)
 *    and qwen3_next (fused grouped DeltaNet projections, a dense layer):
 *    Gated DeltaNet and gated attention; deepseek_v4 (sliding-window
 *    shared-KV MQA with sinks, CSA with the Lightning indexer, HCA,
 *    hyper-connections, hash and sqrt-softplus routing, the SwiGLU clamp;
 *    the released FP8 + FP4 layout; the legacy config keys); minimax_m2
 *    (the released layout, bf16 and FP8: q/k norms over the whole
 *    projection, partial rotate-half RoPE, sigmoid routing with the
 *    correction bias for the choice only), gpt-oss, and inkling (the
 *    released multimodal layout: relative-position attention without RoPE
 *    over sliding and global layers with their own heads, a window and an
 *    extent shorter than the sequence, log-length scaling, short
 *    convolutions on k, v and every block's output, one sigmoid router
 *    over routed + shared experts): top-1 equal at every position, no NaN
 *    or infinity, and |logit - reference| at most 4e-6 of the position's
 *    largest logit (1e-5 with Gated DeltaNet; EXACT_REL), teacher-forced;
 *    the MTP heads likewise;
 *  - int8 and int4 containers: top-1 agreement and KL divergence against the
 *    f32 container, reported and bounded;
 *  - transformers v5 checkpoints: Mixtral with fused experts under mlp. and
 *    a sliding window, against a reference generated in the test;
 *  - bytes moved to another resident tensor's or expert record's place with
 *    their checksum fail it (the checksums are seeded with the place);
 *  - "slow but correct": logits bit-identical at the minimum RAM budget and
 *    unlimited, IO depth 1 and 64, with and without O_DIRECT, 1 and 2
 *    threads, prefill chunks of 1 and 64 tokens, prefetch on and off, the
 *    embedding table on disk (the default) and in RAM, and with the storage
 *    fallbacks forced; the table left on disk is still verified at load.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "tests/fixture_cache.h"
#include "tests/logits_util.h"
#include "tests/test_util.h"

/* The bound of the exact tests: |logit - reference| at most this much of
 * the largest |reference logit| of the position (lu_expect_close).
 * Every SIMD level computes the same bits (docs/ARITHMETIC.md,
 * test_simd_levels), so one measurement holds for all: before the levels
 * were made one arithmetic, each summed in its own order and the largest
 * difference over the levels was 1.6e-6 for every family but the two with
 * Gated DeltaNet, whose recurrent state carries rounding from token to
 * token (4.5e-6). The bounds are about two and a half times those: a 1e-4
 * relative error in any family fails. */
#define EXACT_REL 4e-6
#define EXACT_REL_GDN 1e-5

static char scratch[4096];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

/* Fixture `name` converted at `quant` (and any further convert options in
 * it), from the build's shared cache: read it, never change it. */
static void convert(const char *name, const char *quant, char *out, size_t n)
{
	char src[256], args[512];
	snprintf(src, sizeof src, "hf/%s", name);
	snprintf(args, sizeof args, "--quant %s", quant);
	fc_container(out, n, src, args);
}

/* The same, as a private copy in scratch/name-quant that the test may damage. */
static void convert_copy(const char *name, const char *quant, char *out, size_t n)
{
	char src[256], args[512];
	snprintf(out, n, "%s/%s-%s", scratch, name, quant);
	snprintf(src, sizeof src, "hf/%s", name);
	snprintf(args, sizeof args, "--quant %s", quant);
	fc_container_copy(out, src, args);
}

static float *reference(const char *name, size_t *n_floats)
{
	char path[4096];
	size_t len;
	snprintf(path, sizeof path, "%s/ref/%s.f32", tu_fixtures(), name);
	float *r = (float *)tu_read(path, &len);
	cr_assert_not_null(r, "missing %s", path);
	*n_floats = len / sizeof(float);
	return r;
}

static void check_exact_tol(const char *name, const char *quant, double rel)
{
	char model[4200], what[512];
	convert(name, quant, model, sizeof model);
	char *tokens = lu_read_tokens(name);
	size_t nl, nr;
	float *l = lu_logits(scratch, model, tokens, "", &nl);
	float *r = reference(name, &nr);
	cr_assert_eq(nl, nr, "%s/%s: %zu logits, reference has %zu", name, quant, nl, nr);
	snprintf(what, sizeof what, "%s --quant %s", name, quant);
	lu_expect_close(what, l, r, nl, lu_count_tokens(tokens), rel);
	free(l);
	free(r);
	free(tokens);
}

static void check_exact(const char *name, const char *quant)
{
	check_exact_tol(name, quant, EXACT_REL);
}

/* Gated DeltaNet families: their own bound, see EXACT_REL_GDN. */
static void check_exact_gdn(const char *name, const char *quant)
{
	check_exact_tol(name, quant, EXACT_REL_GDN);
}

TestSuite(forward, .init = setup, .fini = teardown);

Test(forward, olmoe_exact) { check_exact("olmoe", "f32"); check_exact("olmoe", "bf16"); }
Test(forward, qwen3_moe_exact) { check_exact("qwen3_moe", "f32"); check_exact("qwen3_moe", "bf16"); }
Test(forward, mixtral_exact) { check_exact("mixtral", "f32"); check_exact("mixtral", "bf16"); }
Test(forward, qwen3_moe_fused_exact) { check_exact("qwen3_moe_fused", "bf16"); }
Test(forward, qwen3_moe_fp8_exact) { check_exact("qwen3_moe_fp8", "f32"); }
Test(forward, deepseek_v3_exact) { check_exact("deepseek_v3", "f32"); check_exact("deepseek_v3", "bf16"); }
Test(forward, deepseek_v3_noqlora_exact) { check_exact("deepseek_v3_noqlora", "bf16"); }
Test(forward, qwen3_5_moe_exact) { check_exact_gdn("qwen3_5_moe", "f32"); check_exact_gdn("qwen3_5_moe", "bf16"); }
Test(forward, qwen3_5_moe_text_exact) { check_exact_gdn("qwen3_5_moe_text", "f32"); check_exact_gdn("qwen3_5_moe_text", "bf16"); }
Test(forward, qwen3_next_exact) { check_exact_gdn("qwen3_next", "f32"); check_exact_gdn("qwen3_next", "bf16"); }
Test(forward, deepseek_v3_fp8_exact) { check_exact("deepseek_v3_fp8", "f32"); }
Test(forward, glm4_moe_exact) { check_exact("glm4_moe", "f32"); check_exact("glm4_moe", "bf16"); }
Test(forward, deepseek_v32_exact) { check_exact("deepseek_v32", "f32"); check_exact("deepseek_v32", "bf16"); }
Test(forward, deepseek_v32_fp8_exact) { check_exact("deepseek_v32_fp8", "f32"); }
Test(forward, glm_moe_dsa_exact) { check_exact("glm_moe_dsa", "f32"); check_exact("glm_moe_dsa", "bf16"); }
Test(forward, glm_moe_dsa_interleave_exact) { check_exact("glm_moe_dsa_interleave", "bf16"); }
Test(forward, glm_moe_dsa_yarn_exact) { check_exact("glm_moe_dsa_yarn", "bf16"); }
Test(forward, deepseek_v4_exact) { check_exact("deepseek_v4", "f32"); check_exact("deepseek_v4", "bf16"); }
Test(forward, deepseek_v4_fp8_exact) { check_exact("deepseek_v4_fp8", "f32"); }
/* The released FP4 experts (e2m1, a power-of-two scale per 32 inputs) are
 * MXFP4: stored as mxfp4 they keep their exact values. */
Test(forward, deepseek_v4_fp8_mxfp4_exact) { check_exact("deepseek_v4_fp8", "mxfp4 --dense-quant f32 --activations f32"); }
Test(forward, deepseek_v4_legacy_exact) { check_exact("deepseek_v4_legacy", "bf16"); }
Test(forward, minimax_m2_exact) { check_exact("minimax_m2", "f32"); check_exact("minimax_m2", "bf16"); }
Test(forward, minimax_m2_fp8_exact) { check_exact("minimax_m2_fp8", "f32"); }
/* gpt-oss from its released MXFP4 experts: dequantized to f32, or kept as
 * mxfp4 (codes and scales copied); and from the BF16 dequantized layout. */
Test(forward, gpt_oss_mxfp4_exact)
{
	check_exact("gpt_oss_mxfp4", "f32");
	check_exact("gpt_oss_mxfp4", "mxfp4 --dense-quant f32 --activations f32");
}
Test(forward, gpt_oss_bf16_exact) { check_exact("gpt_oss_bf16", "f32"); check_exact("gpt_oss_bf16", "bf16"); }

Test(forward, inkling_f32_exact) { check_exact("inkling_f32", "f32"); }
Test(forward, inkling_bf16_exact) { check_exact("inkling_bf16", "f32"); check_exact("inkling_bf16", "bf16"); }

Test(forward, mixtral_v5_fused_sliding_window)
{
	char hf[4200], model[4200], ref[4200], out[4200];
	snprintf(hf, sizeof hf, "%s/mixf", scratch);
	snprintf(model, sizeof model, "%s/mixf-c", scratch);
	snprintf(ref, sizeof ref, "%s/mixf.f32", scratch);
	snprintf(out, sizeof out, "%s/mixf-out.f32", scratch);
	char *tokens = lu_read_tokens("mixtral");
	cr_assert_eq(tu_sh("/usr/bin/python3 '%s/tools/gen_model.py' --arch mixtral --experts-layout fused --out '%s' >/dev/null && "
			   "sed -i 's/\"sliding_window\": null/\"sliding_window\": 5/' '%s/config.json' && "
			   "grep -q '\"sliding_window\": 5' '%s/config.json' && "
			   "/usr/bin/python3 '%s/tools/reference.py' --quiet --model '%s' --tokens %s --out '%s'",
			   tu_repo(), hf, hf, hf, tu_repo(), hf, tokens, ref), 0, "fixture generation failed");
	cr_assert_eq(tu_sh("'%s' convert --quiet --quant bf16 '%s' '%s' && '%s' logits --model '%s' --tokens %s --out '%s'",
			   tu_colibri(), hf, model, tu_colibri(), model, tokens, out), 0);
	size_t nl = 0, nr = 0;
	float *l = (float *)tu_read(out, &nl), *r = (float *)tu_read(ref, &nr);
	cr_assert(l && r && nl == nr && nl > 0);
	lu_expect_close("mixtral, v5 fused experts, sliding window 5", l, r, nl / sizeof(float),
			lu_count_tokens(tokens), EXACT_REL);
	free(l);
	free(r);
	free(tokens);
}

/* The MTP head, teacher-forced: row t from the hidden state of position t
 * and token t+1, against the reference's MTP logits. */
static void check_mtp(const char *name)
{
	char model[4200], out[4300], mtp[4300], ref[4300];
	convert(name, "bf16", model, sizeof model);
	char *tokens = lu_read_tokens(name);
	snprintf(out, sizeof out, "%s/%s-main.f32", scratch, name);
	snprintf(mtp, sizeof mtp, "%s/%s-mtp.f32", scratch, name);
	snprintf(ref, sizeof ref, "%s/ref/%s.mtp.f32", tu_fixtures(), name);
	cr_assert_eq(tu_sh("'%s' logits --model '%s' --tokens %s --out '%s' --mtp-out '%s'", tu_colibri(), model,
			   tokens, out, mtp), 0);
	size_t nl = 0, nr = 0;
	float *l = (float *)tu_read(mtp, &nl), *r = (float *)tu_read(ref, &nr);
	cr_assert(l && r && nl == nr && nl > 0, "MTP logits: %zu bytes, reference %zu", nl, nr);
	char what[256];
	snprintf(what, sizeof what, "%s MTP head", name);
	lu_expect_close(what, l, r, nl / sizeof(float), lu_count_tokens(tokens) - 1, EXACT_REL);
	/* Chunked 3 at a time, the MTP rows are the same bits. */
	cr_assert_eq(tu_sh("'%s' logits --model '%s' --tokens %s --out '%s' --mtp-out '%s.b3' --batch 3", tu_colibri(),
			   model, tokens, out, mtp), 0);
	char b3[4400];
	snprintf(b3, sizeof b3, "%s.b3", mtp);
	size_t n3 = 0;
	float *l3 = (float *)tu_read(b3, &n3);
	cr_expect(l3 && n3 == nl && memcmp(l3, l, nl) == 0, "%s MTP logits depend on --batch", name);
	free(l3);
	free(l);
	free(r);
	free(tokens);
}

Test(forward, deepseek_v3_mtp_exact) { check_mtp("deepseek_v3"); }
Test(forward, glm4_moe_mtp_exact) { check_mtp("glm4_moe"); }
Test(forward, deepseek_v32_mtp_exact) { check_mtp("deepseek_v32"); }
Test(forward, glm_moe_dsa_mtp_exact) { check_mtp("glm_moe_dsa"); }
/* DeepSeek-V4's MTPBlock: the hc streams in, its own hc_head out; in the
 * release's FP8 + FP4; and (legacy compress_ratios listing it) as a CSA
 * layer with its compressor and indexer. */
Test(forward, deepseek_v4_mtp_exact) { check_mtp("deepseek_v4"); }
Test(forward, deepseek_v4_fp8_mtp_exact) { check_mtp("deepseek_v4_fp8"); }
Test(forward, deepseek_v4_legacy_csa_mtp_exact) { check_mtp("deepseek_v4_legacy"); }

/* Drafting with the MTP head never changes greedy output. With `agree`,
 * the head is rewritten to agree with the model (bench/mtp_agree.py), so
 * drafts are accepted and the caches roll back partially; otherwise the
 * random head's drafts are rejected. */
static void check_drafting(const char *name, bool agree)
{
	char hf[4200], model[4200], out[4300];
	snprintf(hf, sizeof hf, "%s/hf/%s", tu_fixtures(), name);
	if (agree) {
		snprintf(hf, sizeof hf, "%s/%s-agree", scratch, name);
		cr_assert_eq(tu_sh("/usr/bin/python3 '%s/bench/mtp_agree.py' --src '%s/hf/%s' --out '%s' --alpha 0.05 "
				   ">/dev/null 2>&1", tu_repo(), tu_fixtures(), name, hf), 0, "mtp_agree.py failed");
	}
	snprintf(model, sizeof model, "%s/%s-draft-int4", scratch, name);
	cr_assert_eq(tu_sh("'%s' convert --quiet --quant int4 '%s' '%s'", tu_colibri(), hf, model), 0);
	const char *drafts[] = { "0", "1", "2", "4", "auto" };
	char *first = NULL;
	for (size_t i = 0; i < sizeof drafts / sizeof drafts[0]; i++) {
		snprintf(out, sizeof out, "%s/draft-%s.txt", scratch, drafts[i]);
		cr_assert_eq(tu_sh("'%s' run --model '%s' --tokens 5,6,7,8 -n 40 --temp 0 --draft %s --ram min "
				   "--stats-json '%s.json' >'%s'", tu_colibri(), model, drafts[i], out, out),
			     0, "--draft %s failed", drafts[i]);
		char *text = tu_read(out, NULL);
		cr_assert(text && strchr(text, ','), "no ids with --draft %s", drafts[i]);
		if (!first)
			first = text;
		else {
			cr_expect_str_eq(text, first, "%s: greedy output differs with --draft %s", name, drafts[i]);
			free(text);
		}
		if (agree && i >= 1 && i <= 3) {
			char path[4400];
			snprintf(path, sizeof path, "%s.json", out);
			char *js = tu_read(path, NULL);
			const char *k = js ? strstr(js, "\"draft_acceptance\":") : NULL;
			double acc = k ? strtod(k + strlen("\"draft_acceptance\":"), NULL) : -1;
			cr_expect_gt(acc, 0.3, "%s --draft %s: acceptance %.2f, the agreeing head is not accepted", name,
				     drafts[i], acc);
			free(js);
		}
	}
	free(first);
}

Test(forward, mtp_drafting_exact) { check_drafting("deepseek_v3", false); }
/* Verification rolls back the indexer's key cache with the latent cache. */
Test(forward, mtp_drafting_exact_dsa) { check_drafting("glm_moe_dsa", true); }
/* Qwen3.5's MTP block drafts; the DeltaNet state goes back by snapshot and
 * replay. */
Test(forward, mtp_drafting_exact_gdn) { check_drafting("qwen3_5_moe", true); }
/* DeepSeek-V4: the compressed state and the MTP block's go back by
 * snapshot and replay. */
Test(forward, mtp_drafting_exact_v4) { check_drafting("deepseek_v4", true); }

/* Mean KL(f32 || quantized) over all positions of `name`'s tokens, the
 * quantized container mq run with the options `extra`; *top1 gets the top-1
 * agreement. */
static double lossy_kl(const char *name, const char *m32, const char *mq, const char *extra, double *top1)
{
	char *tokens = lu_read_tokens(name);
	size_t na, nb;
	float *a = lu_logits(scratch, m32, tokens, "", &na);
	float *b = lu_logits(scratch, mq, tokens, extra, &nb);
	cr_assert_eq(na, nb);
	double kl = lu_mean_kl(a, b, na, lu_count_tokens(tokens), top1);
	free(a);
	free(b);
	free(tokens);
	return kl;
}

/* KL and top-1 agreement against the f32 container at the default settings,
 * reported and bounded. */
static void check_lossy(const char *name, const char *quant, double kl_max, double top1_min)
{
	char m32[4200], mq[4200];
	convert(name, "f32", m32, sizeof m32);
	convert(name, quant, mq, sizeof mq);
	double top1, kl = lossy_kl(name, m32, mq, "", &top1);
	cr_log_info("%s --quant %s vs f32: top-1 agreement %.3f, mean KL %.5f", name, quant, top1, kl);
	cr_expect_leq(kl, kl_max, "%s/%s: mean KL %.5f > %.5f", name, quant, kl, kl_max);
	cr_expect_geq(top1, top1_min, "%s/%s: top-1 agreement %.3f < %.3f", name, quant, top1, top1_min);
}

/* The default activations (int8 for int4 weights, int16 for int8 weights)
 * may cost at most a tenth more KL than f32 activations with the same
 * quantized weights (convert --activations f32). */
static void check_activations(const char *name, const char *quant)
{
	char m32[4200], mq[4200], mf[4200], qf[256];
	convert(name, "f32", m32, sizeof m32);
	convert(name, quant, mq, sizeof mq);
	snprintf(qf, sizeof qf, "%s --activations f32", quant);
	convert(name, qf, mf, sizeof mf);
	double t8, tf;
	double kl8 = lossy_kl(name, m32, mq, "", &t8);
	double klf = lossy_kl(name, m32, mf, "", &tf);
	cr_log_info("%s --quant %s vs f32: mean KL %.5f with the default activations, %.5f with f32 (x%.3f); "
		    "top-1 %.3f / %.3f", name, quant, kl8, klf, klf > 0 ? kl8 / klf : 0, t8, tf);
	cr_expect_leq(kl8, 1.1 * klf, "%s/%s: the default activations' KL %.5f > 1.1 x f32 activations' %.5f", name,
		      quant, kl8, klf);
}

Test(forward, int8_activations_within_a_tenth_of_f32)
{
	static const char *const names[] = { "olmoe", "qwen3_moe", "mixtral", "deepseek_v3", "qwen3_5_moe",
					     "qwen3_next" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		check_activations(names[i], "int8");
		check_activations(names[i], "int4");
		check_activations(names[i], "int4 --dense-quant int4");
	}
}

Test(forward, int8_close_to_f32)
{
	check_lossy("olmoe", "int8", 0.005, 0.75);
	check_lossy("qwen3_moe", "int8", 0.005, 0.75);
	check_lossy("mixtral", "int8", 0.005, 0.75);
	check_lossy("qwen3_5_moe", "int8", 0.005, 0.75);
	check_lossy("qwen3_next", "int8", 0.005, 0.75);
	check_lossy("deepseek_v4", "int8", 0.005, 0.75);
	check_lossy("minimax_m2", "int8", 0.005, 0.75);
	check_lossy("inkling_bf16", "int8", 0.005, 0.75);
}

Test(forward, int4_close_to_f32)
{
	check_lossy("olmoe", "int4", 0.05, 0.5);
	check_lossy("qwen3_moe", "int4", 0.05, 0.5);
	check_lossy("mixtral", "int4", 0.05, 0.5);
	check_lossy("qwen3_5_moe", "int4", 0.05, 0.5);
	check_lossy("qwen3_next", "int4", 0.05, 0.5);
	check_lossy("deepseek_v4", "int4", 0.05, 0.5);
	/* Inkling's fixture keeps router margins down to 1e-3 (so that the
	 * correction bias decides choices): int4 flips some of them, and a
	 * group of 32 does no better (0.063 against 0.060), so the flips, not
	 * the rounding, set its KL. */
	check_lossy("inkling_bf16", "int4", 0.1, 0.5);
}

/* mxfp4 quantized from bf16 weights (gpt-oss and DeepSeek-V4 ship it;
 * here it is made from floats) keeps about int4's quality. */
Test(forward, mxfp4_close_to_f32)
{
	check_lossy("qwen3_moe", "mxfp4", 0.05, 0.5);
	check_lossy("mixtral", "mxfp4", 0.05, 0.5);
	check_lossy("minimax_m2", "mxfp4", 0.05, 0.5);
}

/* Every setting that may change speed must leave the bits alone. The
 * settings pick storage, threading and batching paths that no block kind
 * changes: under the sanitizers one family runs them all
 * (bit_identical_int4) and the others two of them and the first forced
 * fallback, which still take each family's blocks through eviction,
 * another batch size and another thread count. */
static void check_identical_n(const char *name, const char *quant, bool all);

static void check_identical(const char *name, const char *quant)
{
	check_identical_n(name, quant, !TU_SANITIZED);
}

static void check_identical_n(const char *name, const char *quant, bool all)
{
	static const char *const variants[] = {
		"--ram min",
		"--ram min --io-depth 1",
		"--io-depth 64",
		"--no-direct",
		"--threads 1",
		"--threads 2 --batch 1",
		"--ram min --batch 3 --threads 2 --no-direct",
		"--no-prefetch",
		"--no-prefetch --ram min --batch 1",
	};
	/* Forced storage fallbacks, set in the environment of the run. */
	static const char *const envs[] = {
		"COLIBRI_NO_IO_URING=1",
		"COLIBRI_EVICT=lru COLIBRI_NO_FIXED_BUFFERS=1",
		"COLIBRI_EMBED_IN_RAM=1", /* the embedding table in RAM, not read a row per token */
	};
	char model[4200];
	convert(name, quant, model, sizeof model);
	char *tokens = lu_read_tokens(name);
	size_t n0;
	float *base = lu_logits(scratch, model, tokens, "", &n0);
	/* Without all: the smallest budget, and it with 3-token batches,
	 * two threads and buffered reads. */
	static const size_t few[] = { 0, 6 };
	size_t n_variants = all ? sizeof variants / sizeof variants[0] : sizeof few / sizeof few[0];
	size_t n_envs = all ? sizeof envs / sizeof envs[0] : 1;
	for (size_t k = 0; k < n_variants; k++) {
		size_t i = all ? k : few[k];
		size_t n;
		float *l = lu_logits(scratch, model, tokens, variants[i], &n);
		cr_assert_eq(n, n0);
		cr_expect_eq(memcmp(base, l, n * sizeof(float)), 0,
			     "%s/%s: logits with %s differ from the default run", name, quant, variants[i]);
		free(l);
	}
	for (size_t i = 0; i < n_envs; i++) {
		char out[4200];
		snprintf(out, sizeof out, "%s/env-%zu.f32", scratch, i);
		cr_assert_eq(tu_sh("env %s '%s' logits --model '%s' --tokens %s --out '%s' --ram min 2>/dev/null",
				   envs[i], tu_colibri(), model, tokens, out), 0, "logits with %s failed", envs[i]);
		size_t len;
		float *l = (float *)tu_read(out, &len);
		cr_assert(l && len == n0 * sizeof(float));
		cr_expect_eq(memcmp(base, l, len), 0, "%s/%s: logits with %s differ", name, quant, envs[i]);
		free(l);
	}
	free(base);
	free(tokens);
}

Test(forward, bit_identical_int4) { check_identical_n("qwen3_moe", "int4", true); }
Test(forward, bit_identical_bf16) { check_identical("mixtral", "bf16"); }
Test(forward, bit_identical_mla) { check_identical("deepseek_v3", "int4"); }
Test(forward, bit_identical_dsa) { check_identical("deepseek_v32", "int4"); }
/* The recurrent state is advanced token by token at any batch size. */
Test(forward, bit_identical_gdn) { check_identical("qwen3_5_moe", "int4"); }
Test(forward, bit_identical_gdn_grouped) { check_identical("qwen3_next", "bf16"); }
Test(forward, bit_identical_v4) { check_identical("deepseek_v4", "int4"); }
Test(forward, bit_identical_minimax_m2) { check_identical("minimax_m2", "int4"); }
Test(forward, bit_identical_mxfp4) { check_identical("mixtral", "mxfp4"); }
/* Sinks, the per-layer window, biased experts: at the released precision. */
Test(forward, bit_identical_gpt_oss) { check_identical("gpt_oss_mxfp4", "mxfp4"); }
/* Inkling: fixed state (the short convolutions' histories) beside K/V. */
Test(forward, bit_identical_inkling) { check_identical("inkling_bf16", "int4"); }

/* The two gpt-oss fixtures are one model: the released MXFP4 experts
 * copied into an mxfp4 container and their BF16 dequantized values
 * quantized to mxfp4 hold the same values (a block's scale may differ by
 * a power of two, its codes making up for it), so the logits agree to the
 * bit, with int8 activations (the default) too. */
Test(forward, gpt_oss_mxfp4_copied_equals_quantized)
{
	char a[4200], b[4200];
	convert("gpt_oss_mxfp4", "mxfp4", a, sizeof a);
	convert("gpt_oss_bf16", "mxfp4", b, sizeof b);
	char *tokens = lu_read_tokens("gpt_oss_mxfp4");
	size_t na, nb;
	float *la = lu_logits(scratch, a, tokens, "", &na), *lb = lu_logits(scratch, b, tokens, "", &nb);
	cr_assert_eq(na, nb);
	cr_expect_eq(memcmp(la, lb, na * sizeof(float)), 0, "copied and requantized mxfp4 experts give other logits");
	free(la);
	free(lb);
	free(tokens);
}

/* The embedding table stays on disk (a row read per token) but is still
 * verified at load: a flipped byte in it refuses the container naming the
 * tensor, and leaves no logits behind. */
Test(forward, embedding_on_disk_is_verified)
{
	char model[4200], err[4300];
	convert_copy("qwen3_moe", "int4", model, sizeof model);
	cr_assert_eq(tu_sh("printf '\\377' | dd of='%s/resident.bin' bs=1 seek=100 conv=notrunc status=none", model), 0);
	snprintf(err, sizeof err, "%s/embed.err", scratch);
	cr_expect_neq(tu_sh("'%s' logits --model '%s' --tokens 1,2 --out %s/e.f32 2>'%s'", tu_colibri(), model, scratch,
			    err), 0, "a corrupt embedding table was accepted");
	char *msg = tu_read(err, NULL);
	cr_expect(msg && strstr(msg, "model.embed_tokens.weight") && strstr(msg, "checksum"), "%s", msg);
	cr_expect_neq(tu_sh("test -e %s/e.f32", scratch), 0, "partial logits left behind");
	free(msg);
}

/* A corrupted expert record stops decoding with a message naming layer,
 * expert, file and offset; a truncated expert file is refused at load. */
Test(forward, expert_faults)
{
	char model[4200], err[4300];
	convert_copy("qwen3_moe", "int4", model, sizeof model);
	char *tokens = lu_read_tokens("qwen3_moe");
	snprintf(err, sizeof err, "%s/fault.err", scratch);
	/* Flip one byte in the middle of expert 3's record of layer 0. */
	cr_assert_eq(tu_sh("cd '%s' && rb=$(/usr/bin/python3 -c \"import json;print(json.load(open('manifest.json'))['experts']['layers'][0]['record_bytes'])\") && "
			   "printf '\\377' | dd of=experts/layer-000.bin bs=1 seek=$((3 * rb + 100)) conv=notrunc status=none",
			   model), 0);
	/* Every expert is needed by some token of a 16-token prompt under
	 * routing this varied; run all positions through layer 0. */
	int rc = tu_sh("'%s' logits --model '%s' --tokens %s,%s,%s --out %s/f.f32 2>'%s'", tu_colibri(), model,
		       tokens, tokens, tokens, scratch, err);
	char *msg = tu_read(err, NULL);
	cr_assert_not_null(msg);
	if (rc != 0) {
		cr_expect(strstr(msg, "layer 0") && strstr(msg, "expert 3") && strstr(msg, "layer-000.bin") &&
			  strstr(msg, "offset"), "unclear fault message: %s", msg);
		cr_expect_neq(tu_sh("test -e %s/f.f32", scratch), 0, "partial logits left behind");
	} else {
		cr_skip_test("expert 3 of layer 0 was never routed to by the test prompt");
	}
	free(msg);
	cr_assert_eq(tu_sh("truncate -s -4096 '%s/experts/layer-002.bin'", model), 0);
	cr_expect_neq(tu_sh("'%s' logits --model '%s' --tokens 1,2 --out %s/g.f32 2>'%s'", tu_colibri(), model,
			    scratch, err), 0, "truncated expert file accepted");
	msg = tu_read(err, NULL);
	cr_expect(strstr(msg, "layer-002.bin"), "message does not name the file: %s", msg);
	free(msg);
	free(tokens);
}

/* Runs python3 -c script with the container as argv[1]. */
static void edit_container(const char *model, const char *script)
{
	cr_assert_eq(tu_sh("/usr/bin/python3 -c \"%s\" '%s'", script, model), 0, "cannot edit %s", model);
}

/* Bytes moved to another tensor's or record's place, their checksum moved
 * with them, so that each checksum still matches its bytes: each
 * checksum is seeded with the place, so loading refuses the swapped
 * resident tensors (two norms of one shape, names swapped: the layout stays
 * valid) and doctor --deep the swapped expert records (0 and 1 of layer 0,
 * their xxh3 entries swapped too). */
Test(forward, moved_bytes_fail_their_checksum)
{
	char model[4200], err[4300], out[4300];
	convert_copy("qwen3_moe", "int4", model, sizeof model);
	snprintf(err, sizeof err, "%s/moved.err", scratch);
	snprintf(out, sizeof out, "%s/moved.f32", scratch);
	edit_container(model, "import json,sys; p=sys.argv[1]+'/manifest.json'; m=json.load(open(p)); "
		       "t={x['name']: x for x in m['resident']['tensors']}; "
		       "a=t['model.layers.0.input_layernorm.weight']; b=t['model.layers.0.post_attention_layernorm.weight']; "
		       "a['name'], b['name'] = b['name'], a['name']; json.dump(m, open(p, 'w'))");
	cr_assert_neq(tu_sh("'%s' logits --model '%s' --tokens 1,2 --out '%s' 2>'%s'", tu_colibri(), model, out, err), 0,
		      "swapped resident tensors were loaded");
	char *msg = tu_read(err, NULL);
	cr_assert(msg && strstr(msg, "resident.bin") && strstr(msg, "layernorm.weight: checksum mismatch"),
		  "unclear message: %s", msg);
	free(msg);
	edit_container(model, "import json,sys; p=sys.argv[1]+'/manifest.json'; m=json.load(open(p)); "
		       "t={x['name']: x for x in m['resident']['tensors']}; "
		       "a=t['model.layers.0.input_layernorm.weight']; b=t['model.layers.0.post_attention_layernorm.weight']; "
		       "a['name'], b['name'] = b['name'], a['name']; "
		       "l=m['experts']['layers'][0]; rb=l['record_bytes']; f=open(sys.argv[1]+'/'+l['file'], 'r+b'); "
		       "r0=f.read(rb); r1=f.read(rb); f.seek(0); f.write(r1 + r0); f.close(); "
		       "l['xxh3'][0], l['xxh3'][1] = l['xxh3'][1], l['xxh3'][0]; json.dump(m, open(p, 'w'))");
	cr_assert_neq(tu_sh("'%s' doctor --model '%s' --deep >'%s' 2>&1", tu_colibri(), model, err), 0,
		      "doctor --deep passed swapped expert records");
	msg = tu_read(err, NULL);
	char want[4400];
	for (int e = 0; e < 2; e++) {
		snprintf(want, sizeof want, "FAIL  checksums: %s/experts/layer-000.bin: expert %d ", model, e);
		cr_expect(msg && strstr(msg, want), "no line \"%s\":\n%s", want, msg);
	}
	free(msg);
}

Test(forward, bad_input)
{
	char model[4200];
	convert("olmoe", "bf16", model, sizeof model);
	cr_expect_neq(tu_sh("'%s' logits --model '%s' --tokens 1,99999999 --out %s/x.f32 2>/dev/null",
			    tu_colibri(), model, scratch), 0, "out-of-vocabulary token accepted");
	cr_expect_neq(tu_sh("test -e %s/x.f32", scratch), 0, "partial output left behind");
	cr_expect_neq(tu_sh("'%s' logits --model '%s' --tokens 1,a,2 --out %s/x.f32 2>/dev/null",
			    tu_colibri(), model, scratch), 0, "malformed --tokens accepted");
	cr_expect_neq(tu_sh("'%s' logits --model %s/nope --tokens 1 --out %s/x.f32 2>/dev/null",
			    tu_colibri(), scratch, scratch), 0, "missing model accepted");
	cr_expect_neq(tu_sh("'%s' logits --model '%s' --tokens 1 --ram 1M --out %s/x.f32 2>/dev/null",
			    tu_colibri(), model, scratch), 0, "budget below the minimum accepted");
}
