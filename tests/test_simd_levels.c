/*
 * test_simd_levels — one arithmetic (docs/ARITHMETIC.md): the logits of
 * every model family and container type are the same bits at every SIMD
 * level this machine has (COLIBRI_SIMD=scalar | avx2 | avxvnni | avx512 |
 * avx512vnni), and so are the MTP head's logits and the output of
 * drafting. Compared with memcmp, NaN and signed zeros included.
 *
 * Containers per family: f32, bf16, int8 (int16 activations), int4 and
 * mxfp4 (int8 activations), bf16 and int4 for a second layout of a family;
 * runs on f32 activations only skip the VNNI levels, whose f32 functions
 * are their base levels' (checked); for one family per kind of attention also the
 * grouped weights against f32 activations and int8 weights against int8
 * ones; the GGML block types (q8_0, q4_0, q4_k, q5_k, q6_k, the q4_k_m
 * mix, f16, bf16, mxfp4 GGUFs) with either activations. A level the
 * machine lacks is left out, and levels::all_present says which.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "compute/cpu.h"
#include "compute/kernels_internal.h"
#include "tests/fixture_cache.h"
#include "tests/logits_util.h"
#include "tests/test_util.h"

static char scratch[4096];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(levels, .init = setup, .fini = teardown);

Test(levels, all_present)
{
	char missing[256] = "";
	for (int l = 0; l < CPU_SIMD_COUNT; l++)
		if (!cpu_simd_available((enum cpu_simd)l))
			snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
				 missing[0] ? ", " : "", cpu_simd_name((enum cpu_simd)l));
	if (missing[0])
		cr_skip_test("this CPU lacks %s: the level tests compare the others", missing);
}

/* The file at path (whole), or NULL. */
static char *slurp(const char *path, size_t *len)
{
	return tu_read(path, len);
}

/* The VNNI levels are their base level's table with the integer dot
 * products replaced (compute/kernels.c): every f32-activation entry is the
 * same function. A run that meets f32 activations only (f32 and bf16
 * containers, --activations f32) is therefore the base level's run, and the
 * tests below skip those levels for it; this test keeps that true. */
Test(levels, vnni_f32_entries_are_the_base_levels)
{
	static const enum cpu_simd pairs[][2] = { { CPU_SIMD_AVX2_VNNI, CPU_SIMD_AVX2 },
						  { CPU_SIMD_AVX512_VNNI, CPU_SIMD_AVX512 } };
	for (int i = 0; i < 2; i++) {
		const struct kernels_ops *v = kernels_ops_for(pairs[i][0]), *b = kernels_ops_for(pairs[i][1]);
		for (int t = 0; t < QUANT_TYPE_COUNT; t++)
			cr_expect(v->rows[t] == b->rows[t], "%s rows[%s] is not %s's", v->name,
				  quant_type_name((enum quant_type)t), b->name);
		cr_expect(v->dot_f32 == b->dot_f32 && v->axpy_f32 == b->axpy_f32, "%s dot/axpy differ from %s's",
			  v->name, b->name);
	}
}

/* `colibri ARGS` at every available level, each writing the files named by
 * the placeholders %1$s (main output) and %2$s (second output, may be
 * unused) under scratch; every level's files must equal the first level's
 * byte for byte. f32_only: the run meets f32 activations only, and the VNNI
 * levels (the same f32 functions as their base levels) are left out. */
static void same_at_every_level(const char *what, const char *args_fmt, bool second, bool f32_only)
{
	char *first[2] = { NULL, NULL };
	size_t first_len[2] = { 0, 0 };
	const char *first_level = NULL;
	static int seq;
	for (int l = 0; l < CPU_SIMD_COUNT; l++) {
		if (!cpu_simd_available((enum cpu_simd)l) ||
		    (f32_only && (l == CPU_SIMD_AVX2_VNNI || l == CPU_SIMD_AVX512_VNNI)))
			continue;
		const char *level = cpu_simd_name((enum cpu_simd)l);
		char out[2][4300], args[8192];
		int id = seq++;
		snprintf(out[0], sizeof out[0], "%s/out-%d.bin", scratch, id);
		snprintf(out[1], sizeof out[1], "%s/out-%d.second", scratch, id);
		snprintf(args, sizeof args, args_fmt, out[0], out[1]);
		cr_assert_eq(tu_sh("COLIBRI_SIMD=%s '%s' %s", level, tu_colibri(), args), 0, "%s at %s failed: %s",
			     what, level, args);
		for (int k = 0; k < (second ? 2 : 1); k++) {
			size_t len;
			char *got = slurp(out[k], &len);
			cr_assert(got && len > 0, "%s at %s wrote no %s", what, level, out[k]);
			if (!first[k]) {
				first[k] = got;
				first_len[k] = len;
				first_level = level;
				continue;
			}
			cr_expect(len == first_len[k] && memcmp(got, first[k], len) == 0,
				  "%s%s: %s differs from %s", what, k ? " (MTP head)" : "", level, first_level);
			free(got);
		}
	}
	free(first[0]);
	free(first[1]);
}

/* The logits (and with mtp the MTP head's) of fixture `src`, converted with
 * `convert_args`, on the tokens of `tokens_name`, at every level. */
static void check(const char *src, const char *convert_args, const char *tokens_name, bool mtp)
{
	char model[4200], what[600], fmt[8192];
	fc_container(model, sizeof model, src, convert_args);
	char *tokens = lu_read_tokens(tokens_name);
	snprintf(what, sizeof what, "%s %s", src, convert_args);
	snprintf(fmt, sizeof fmt, "logits --model '%s' --tokens %s --out '%%1$s'%s", model, tokens,
		 mtp ? " --mtp-out '%2$s'" : "");
	bool f32_only = strstr(convert_args, "--activations f32") || strstr(convert_args, "--quant f32") ||
			strstr(convert_args, "--quant bf16");
	same_at_every_level(what, fmt, mtp, f32_only);
	free(tokens);
}

/* Every container type of a family (gpt-oss's 96-input down_proj takes
 * groups of 32); a second layout of a family already checked (fused
 * experts, no q_lora, another RoPE pairing, a legacy config) takes bf16
 * (the f32-activation kernels) and int4 (the int8 ones) only. */
static void check_layout(const char *name, bool mtp, bool all_types)
{
	static const char *const quants[] = { "--quant f32", "--quant bf16", "--quant int8", "--quant int4",
					      "--quant mxfp4" };
	char src[256], args[256];
	snprintf(src, sizeof src, "hf/%s", name);
	const char *group = strncmp(name, "gpt_oss", 7) == 0 ? " --group-size 32" : "";
	/* Under the sanitizers two types: the f32 kernels and the int8 ones. */
	static const size_t few[] = { 1, 3 };
	size_t n = TU_SANITIZED || !all_types ? 2 : sizeof quants / sizeof quants[0];
	for (size_t i = 0; i < n; i++) {
		snprintf(args, sizeof args, "%s%s", quants[TU_SANITIZED || !all_types ? few[i] : i], group);
		check(src, args, name, mtp);
	}
}

static void check_family(const char *name, bool mtp)
{
	check_layout(name, mtp, true);
}

/* The grouped kernels against f32 activations, int8 against int8. */
static void check_activations(const char *name)
{
	static const char *const args[] = { "--quant int8 --activations f32", "--quant int4 --activations f32",
					    "--quant mxfp4 --activations f32", "--quant int8 --activations int8" };
	char src[256], a[256];
	snprintf(src, sizeof src, "hf/%s", name);
	const char *group = strncmp(name, "gpt_oss", 7) == 0 ? " --group-size 32" : "";
	for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
		snprintf(a, sizeof a, "%s%s", args[i], group);
		check(src, a, name, false);
	}
}

Test(levels, olmoe) { check_family("olmoe", false); }
Test(levels, qwen3_moe) { check_family("qwen3_moe", false); check_activations("qwen3_moe"); }
Test(levels, qwen3_moe_fused) { check_layout("qwen3_moe_fused", false, false); }
Test(levels, qwen3_moe_fp8) { check_family("qwen3_moe_fp8", false); }
Test(levels, mixtral) { check_family("mixtral", false); }
Test(levels, deepseek_v3) { check_family("deepseek_v3", true); check_activations("deepseek_v3"); }
Test(levels, deepseek_v3_noqlora) { check_layout("deepseek_v3_noqlora", false, false); }
Test(levels, deepseek_v3_fp8) { check_family("deepseek_v3_fp8", false); }
Test(levels, glm4_moe) { check_family("glm4_moe", true); }
Test(levels, deepseek_v32) { check_family("deepseek_v32", true); }
Test(levels, deepseek_v32_fp8) { check_family("deepseek_v32_fp8", false); }
Test(levels, glm_moe_dsa) { check_family("glm_moe_dsa", true); }
Test(levels, glm_moe_dsa_interleave) { check_layout("glm_moe_dsa_interleave", false, false); }
Test(levels, glm_moe_dsa_yarn) { check_layout("glm_moe_dsa_yarn", false, false); }
Test(levels, qwen3_5_moe) { check_family("qwen3_5_moe", false); check_activations("qwen3_5_moe"); }
Test(levels, qwen3_5_moe_text) { check_layout("qwen3_5_moe_text", false, false); }
Test(levels, qwen3_next) { check_family("qwen3_next", false); }
Test(levels, deepseek_v4) { check_family("deepseek_v4", true); check_activations("deepseek_v4"); }
Test(levels, deepseek_v4_fp8) { check_family("deepseek_v4_fp8", true); }
Test(levels, deepseek_v4_legacy) { check_layout("deepseek_v4_legacy", true, false); }
Test(levels, minimax_m2) { check_family("minimax_m2", false); }
Test(levels, minimax_m2_fp8) { check_family("minimax_m2_fp8", false); }
Test(levels, gpt_oss_mxfp4) { check_family("gpt_oss_mxfp4", false); check_activations("gpt_oss_mxfp4"); }
Test(levels, gpt_oss_bf16) { check_family("gpt_oss_bf16", false); }
Test(levels, inkling_f32) { check_family("inkling_f32", false); }
Test(levels, inkling_bf16) { check_family("inkling_bf16", false); check_activations("inkling_bf16"); }

/* The GGML block types, kept as they are in the container, with int8 and
 * with f32 activations. */
Test(levels, gguf_blocks)
{
	static const char *const types[] = { "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "f16", "bf16", "mxfp4" };
	size_t n = TU_SANITIZED ? 3 : sizeof types / sizeof types[0];
	for (size_t i = 0; i < n; i++) {
		char src[256];
		snprintf(src, sizeof src, "gguf/qwen3_moe_blocks.%s.gguf", types[i]);
		check(src, "", "qwen3_moe_blocks", false);
		check(src, "--activations f32", "qwen3_moe_blocks", false);
	}
}

/* Drafting with the MTP head (batched verification, rollback) writes the
 * same ids at every level. */
static void check_drafting(const char *name)
{
	char model[4200], what[300], fmt[8192], src[256];
	snprintf(src, sizeof src, "hf/%s", name);
	fc_container(model, sizeof model, src, "--quant int4");
	snprintf(what, sizeof what, "%s drafting", name);
	snprintf(fmt, sizeof fmt, "run --model '%s' --tokens 5,6,7,8 -n 24 --temp 0 --draft 2 >'%%1$s'", model);
	same_at_every_level(what, fmt, false, false);
	/* Sampled: the sampler's softmax is ours too. */
	snprintf(what, sizeof what, "%s sampled", name);
	snprintf(fmt, sizeof fmt, "run --model '%s' --tokens 5,6,7,8 -n 24 --temp 0.9 --seed 3 >'%%1$s'", model);
	same_at_every_level(what, fmt, false, false);
}

Test(levels, drafting_mla) { check_drafting("deepseek_v3"); }
Test(levels, drafting_gdn) { check_drafting("qwen3_5_moe"); }
Test(levels, drafting_v4) { check_drafting("deepseek_v4"); }
