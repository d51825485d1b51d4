/*
 * test_gguf_convert — `colibri convert MODEL.gguf OUT` end to end, on GGUF
 * files that tools/gguf_write.py makes from the tiny HF fixtures the way
 * llama.cpp's converter and quantizer lay them out (tools/make_fixtures.sh:
 * $COLIBRI_FIXTURES/gguf/).
 *
 *  - An F32 GGUF of each family gives logits bit-identical to the container
 *    converted from the HF checkpoint at f32, and within the forward tests'
 *    bound of transformers' reference logits (no NaN, top-1 equal,
 *    4e-6 of each position's largest logit).
 *  - A GGUF at each block type is kept as it is (the manifest's types are
 *    the file's), and its logits are bit-identical to the f32 container of
 *    the HF checkpoint tools/gguf_to_hf.py makes by dequantizing the same
 *    blocks with numpy (tools/ggml_blocks.py, written from ggml's format);
 *    they also meet transformers' logits on that checkpoint.
 *  - A split GGUF converts from any of its parts to the same container.
 *  - Results do not depend on memory: the Q4_K_M container at a small --ram,
 *    one thread, gives the same bits.
 *  - Bad files: truncated, a tensor type colibri has no kernel for, not a
 *    GGUF: a message naming the file, a non-zero exit, no container left.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "tests/fixture_cache.h"
#include "tests/logits_util.h"
#include "tests/test_util.h"

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static char scratch[4096];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(gguf_convert, .init = setup, .fini = teardown);

static void gguf_path(char *buf, size_t n, const char *stem)
{
	snprintf(buf, n, "%s/gguf/%s.gguf", tu_fixtures(), stem);
	cr_assert(exists(buf), "missing %s (run tools/make_fixtures.sh)", buf);
}

/* src (a .gguf or an HF folder) converted with extra options, into out:
 * from the build's shared cache when src is a fixture (read it, never
 * change it), else converted into scratch/out_name. */
static void convert(const char *src, const char *extra, const char *out_name, char *out, size_t n)
{
	size_t fl = strlen(tu_fixtures());
	if (!strncmp(src, tu_fixtures(), fl) && src[fl] == '/') {
		fc_container(out, n, src + fl + 1, extra);
		return;
	}
	snprintf(out, n, "%s/%s", scratch, out_name);
	int rc = tu_sh("'%s' convert --quiet %s '%s' '%s'", tu_colibri(), extra, src, out);
	cr_assert_eq(rc, 0, "convert %s %s failed", src, extra);
}

/* The bound of the comparisons with the numpy reference (lu_expect_close:
 * relative to each position's largest logit). The GGUF containers compute
 * what the HF fixtures' f32 containers do (the same bits, checked); measured
 * at most 1.9e-6 (gpt-oss's MXFP4 file) when the SIMD levels still summed
 * in orders of their own; they are one arithmetic now (test_forward's
 * EXACT_REL). */
#define EXACT_REL 4e-6

/* l against the numpy reference's logits in ref/<ref>.f32 (tools/reference.py). */
static void near_reference(const float *l, size_t nl, const char *ref, int T, const char *what)
{
	char path[4096];
	size_t len;
	snprintf(path, sizeof path, "%s/ref/%s.f32", tu_fixtures(), ref);
	float *r = (float *)tu_read(path, &len);
	cr_assert_not_null(r, "missing %s", path);
	cr_assert_eq(nl, len / sizeof(float), "%s: %zu logits, %s has %zu", what, nl, path, len / sizeof(float));
	char label[512];
	snprintf(label, sizeof label, "%s against the numpy reference (tools/reference.py)", what);
	lu_expect_close(label, l, r, nl, T, EXACT_REL);
	free(r);
}

static void same_bits(const float *a, size_t na, const float *b, size_t nb, const char *what)
{
	cr_assert_eq(na, nb, "%s: %zu vs %zu logits", what, na, nb);
	size_t i = 0;
	while (i < na && !memcmp(&a[i], &b[i], sizeof(float)))
		i++;
	cr_assert_eq(i, na, "%s: logit %zu differs: %.9g vs %.9g", what, i, i < na ? a[i] : 0.0, i < na ? b[i] : 0.0);
}

/* F32 GGUF of fixture `name` vs the HF fixture converted at f32. */
static void check_f32(const char *name)
{
	char gguf[4096], stem[256], a[4200], b[4200], hf[4096];
	snprintf(stem, sizeof stem, "%s.f32", name);
	gguf_path(gguf, sizeof gguf, stem);
	snprintf(hf, sizeof hf, "%s/hf/%s", tu_fixtures(), name);
	convert(gguf, "", "from-gguf", a, sizeof a);
	convert(hf, "--quant f32", "from-hf", b, sizeof b);
	char *tokens = lu_read_tokens(name);
	size_t na, nb;
	float *la = lu_logits(scratch, a, tokens, "", &na), *lb = lu_logits(scratch, b, tokens, "", &nb);
	same_bits(la, na, lb, nb, name);
	near_reference(la, na, name, lu_count_tokens(tokens), name);
	free(la);
	free(lb);
	free(tokens);
}

Test(gguf_convert, olmoe_f32) { check_f32("olmoe"); }
Test(gguf_convert, qwen3_moe_f32) { check_f32("qwen3_moe"); }
/* llama.cpp permutes Mixtral's q / k rows for its RoPE: undone exactly. */
Test(gguf_convert, mixtral_f32) { check_f32("mixtral"); }
/* kv_b_proj rebuilt from attn_k_b / attn_v_b. */
Test(gguf_convert, deepseek_v3_f32) { check_f32("deepseek_v3"); }
Test(gguf_convert, glm4_moe_f32) { check_f32("glm4_moe"); }

/* The manifest type of tensor `name` ("" when absent), from manifest.json. */
static void manifest_types(const char *model, char *out, size_t n)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/manifest.json", model);
	char *m = tu_read(path, NULL);
	cr_assert_not_null(m);
	out[0] = 0;
	/* Every "type": "X" in order, comma-separated. */
	for (const char *p = strstr(m, "\"type\""); p; p = strstr(p + 6, "\"type\"")) {
		const char *q = strchr(p + 6, '"');
		const char *e = q ? strchr(q + 1, '"') : NULL;
		if (!e)
			break;
		snprintf(out + strlen(out), n - strlen(out), "%.*s,", (int)(e - q - 1), q + 1);
	}
	free(m);
}

/* A block-type GGUF `stem` (fixture `name`): kept as it is, and bit-identical
 * to the f32 container of its numpy dequantization. */
static void check_blocks(const char *name, const char *stem, const char *must_have, const char *extra)
{
	char gguf[4096], a[4200], b[4200], hf[4096], types[8192], ref[300];
	gguf_path(gguf, sizeof gguf, stem);
	snprintf(hf, sizeof hf, "%s/gguf_hf/%s", tu_fixtures(), stem);
	char an[300], bn[300];
	snprintf(an, sizeof an, "%s-gguf", stem);
	snprintf(bn, sizeof bn, "%s-dequantized", stem);
	convert(gguf, extra, an, a, sizeof a);
	convert(hf, "--quant f32", bn, b, sizeof b);
	manifest_types(a, types, sizeof types);
	cr_expect(strstr(types, must_have), "%s: the container's types (%s) lack %s", stem, types, must_have);
	char *tokens = lu_read_tokens(name);
	size_t na, nb;
	float *la = lu_logits(scratch, a, tokens, "", &na), *lb = lu_logits(scratch, b, tokens, "", &nb);
	same_bits(la, na, lb, nb, stem);
	snprintf(ref, sizeof ref, "gguf_%s", stem);
	near_reference(la, na, ref, lu_count_tokens(tokens), stem);
	free(la);
	free(lb);
	free(tokens);
}

#define BLOCKS "qwen3_moe_blocks"
Test(gguf_convert, q8_0) { check_blocks(BLOCKS, BLOCKS ".q8_0", "q8_0,", "--activations f32"); }
Test(gguf_convert, q4_0) { check_blocks(BLOCKS, BLOCKS ".q4_0", "q4_0,", "--activations f32"); }
Test(gguf_convert, q4_k) { check_blocks(BLOCKS, BLOCKS ".q4_k", "q4_k,", "--activations f32"); }
Test(gguf_convert, q5_k) { check_blocks(BLOCKS, BLOCKS ".q5_k", "q5_k,", "--activations f32"); }
Test(gguf_convert, q6_k) { check_blocks(BLOCKS, BLOCKS ".q6_k", "q6_k,", "--activations f32"); }
Test(gguf_convert, f16) { check_blocks(BLOCKS, BLOCKS ".f16", "f16,", ""); }
Test(gguf_convert, bf16) { check_blocks(BLOCKS, BLOCKS ".bf16", "bf16,", ""); }
/* Q4_K_M mixes types within a layer's experts (down Q6_K, gate / up Q4_K). */
Test(gguf_convert, q4_k_m) { check_blocks(BLOCKS, BLOCKS ".q4_k_m", "q6_k,", "--activations f32"); }
/* By default the block types meet int8-quantized activations (as
 * llama.cpp's x Q8_K / Q8_0 kernels do): Q4_K_M's logits stay within a
 * small KL of the same file with --activations f32. */
Test(gguf_convert, q4_k_m_int8_activations_close_to_f32)
{
	char gguf[4096], a[4200], b[4200];
	gguf_path(gguf, sizeof gguf, BLOCKS ".q4_k_m");
	convert(gguf, "", "auto", a, sizeof a);
	convert(gguf, "--activations f32", "f32", b, sizeof b);
	char *tokens = lu_read_tokens(BLOCKS);
	size_t na, nb;
	float *la = lu_logits(scratch, a, tokens, "", &na), *lb = lu_logits(scratch, b, tokens, "", &nb);
	cr_assert_eq(na, nb);
	cr_expect_neq(memcmp(la, lb, na * sizeof(float)), 0, "the default activations are f32's bits");
	double top1, kl = lu_mean_kl(lb, la, na, lu_count_tokens(tokens), &top1);
	cr_log_info("q4_k_m, default activations vs f32: top-1 agreement %.3f, mean KL %.6f", top1, kl);
	cr_expect_leq(kl, 0.002, "q4_k_m: mean KL %.6f of the default activations from f32's > 0.002", kl);
	cr_expect_geq(top1, 0.9, "q4_k_m: top-1 agreement %.3f < 0.9", top1);
	free(la);
	free(lb);
	free(tokens);
}

/* gpt-oss's MXFP4 experts: the GGUF's blocks rearranged, not recomputed.
 * By default MXFP4 weights meet int8-quantized activations (as llama.cpp's
 * MXFP4 kernels do); with --activations f32 the result is the dequantized
 * model's bit for bit. */
Test(gguf_convert, gpt_oss_mxfp4)
{
	check_blocks("gpt_oss_mxfp4", "gpt_oss_mxfp4.f32", "mxfp4,", "--activations f32");
	check_blocks("gpt_oss_mxfp4", "gpt_oss_mxfp4.mxfp4", "q8_0,", "--activations f32");
}
Test(gguf_convert, mxfp4) { check_blocks(BLOCKS, BLOCKS ".mxfp4", "mxfp4,", "--activations f32"); }

/* Logits of a container do not depend on memory, threads or batch. */
Test(gguf_convert, q4_k_m_independent_of_memory)
{
	char gguf[4096], a[4200];
	gguf_path(gguf, sizeof gguf, BLOCKS ".q4_k_m");
	convert(gguf, "", "c", a, sizeof a);
	char *tokens = lu_read_tokens(BLOCKS);
	size_t n0, n1, n2;
	float *l0 = lu_logits(scratch, a, tokens, "", &n0);
	float *l1 = lu_logits(scratch, a, tokens, "--ram min --threads 1 --batch 1", &n1);
	float *l2 = lu_logits(scratch, a, tokens, "--threads 2 --batch 3", &n2);
	same_bits(l0, n0, l1, n1, "--ram min --threads 1 --batch 1");
	same_bits(l0, n0, l2, n2, "--threads 2 --batch 3");
	free(l0);
	free(l1);
	free(l2);
	free(tokens);
}

/* A split GGUF, named by its first or its last part, makes the container
 * the whole file makes: the same manifest (types, offsets, checksums). */
Test(gguf_convert, split_any_part)
{
	char whole[4096], first[4096], last[4096], a[4200], b[4200], c[4200];
	gguf_path(whole, sizeof whole, "qwen3_moe.f32");
	gguf_path(first, sizeof first, "qwen3_moe.f32-00001-of-00003");
	gguf_path(last, sizeof last, "qwen3_moe.f32-00003-of-00003");
	convert(whole, "", "whole", a, sizeof a);
	convert(first, "", "first", b, sizeof b);
	convert(last, "", "last", c, sizeof c);
	cr_assert_eq(tu_sh("cmp -s '%s/manifest.json' '%s/manifest.json' && cmp -s '%s/manifest.json' '%s/manifest.json'"
			   " && cmp -s '%s/resident.bin' '%s/resident.bin'", a, b, a, c, a, b), 0,
		     "the split converts to another container");
}

/* The converter fails with a message naming the file, and leaves nothing. */
static void refused(const char *src, const char *want)
{
	char out[4200], log[4200];
	snprintf(out, sizeof out, "%s/bad-out", scratch);
	snprintf(log, sizeof log, "%s/bad.log", scratch);
	int rc = tu_sh("'%s' convert --quiet '%s' '%s' 2>'%s'", tu_colibri(), src, out, log);
	char *msg = tu_read(log, NULL);
	cr_assert_neq(rc, 0, "%s was accepted", src);
	cr_assert(msg && strstr(msg, src), "the message does not name %s: %s", src, msg ? msg : "");
	cr_assert(strstr(msg, want), "the message lacks \"%s\": %s", want, msg);
	cr_assert(!exists(out), "a failed conversion left %s", out);
	cr_assert_eq(tu_sh("ls '%s' | grep -q tmp", scratch), 1, "a failed conversion left a temporary folder");
	free(msg);
}

Test(gguf_convert, truncated_refused)
{
	char gguf[4096], cut[4200];
	gguf_path(gguf, sizeof gguf, "olmoe.f32");
	snprintf(cut, sizeof cut, "%s/cut.gguf", scratch);
	/* Header whole, data short; then the header itself cut. */
	cr_assert_eq(tu_sh("head -c $(( $(stat -c %%s '%s') - 4096 )) '%s' > '%s'", gguf, gguf, cut), 0);
	refused(cut, "");
	cr_assert_eq(tu_sh("head -c 200 '%s' > '%s'", gguf, cut), 0);
	refused(cut, "");
}

Test(gguf_convert, not_gguf_refused)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/x.gguf", scratch);
	cr_assert_eq(tu_sh("printf 'GGML not really' > '%s'", path), 0);
	refused(path, "not a GGUF file");
}

/* A tensor of a GGML type colibri has no kernel for (IQ4_NL, as some
 * releases use: the same 18 bytes per 32 values as the Q4_0 it replaces
 * here): refused by name, not approximated. */
Test(gguf_convert, unsupported_type_refused)
{
	char gguf[4096], bad[4200];
	gguf_path(gguf, sizeof gguf, BLOCKS ".q4_0");
	snprintf(bad, sizeof bad, "%s/iq4_nl.gguf", scratch);
	cr_assert_eq(tu_sh("/usr/bin/python3 '%s/tools/gguf_retype.py' '%s' blk.0.attn_q.weight 20 '%s'", tu_repo(),
			   gguf, bad), 0, "gguf_retype.py failed");
	refused(bad, "iq4_nl");
}

/* The tokenizer and chat template a container gets from tokenizer.ggml.*
 * (the real Qwen3 tokenizer, written as llama.cpp's converter writes it):
 * the same ids as the HF conversion's tokenizer.json, plain and through
 * the chat template. */
Test(gguf_convert, tokenizer_and_template_from_metadata)
{
	char gguf[4096], hf[4096], a[4200], b[4200];
	snprintf(gguf, sizeof gguf, "%s/gguf/qwen3_moe_tok.f32.gguf", tu_fixtures());
	if (!exists(gguf))
		cr_skip_test("%s is missing (tools/node_modules lacks the Qwen3 tokenizer)", gguf);
	snprintf(hf, sizeof hf, "%s/hf/qwen3_moe_tok", tu_fixtures());
	convert(gguf, "", "from-gguf", a, sizeof a);
	convert(hf, "--quant bf16", "from-hf", b, sizeof b);
	static const char *const texts[] = {
		"Hello, world! The quick brown fox jumps over 13 lazy dogs.",
		"  leading spaces,\ttabs\nand newlines\n\n",
		"数字 12345 和中文混合 — émigré naïve café",
		"def f(x):\n    return x**2  # 🦊🦊 emoji",
	};
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		for (int chat = 0; chat < 2; chat++) {
			const char *opt = chat ? "--chat --system 'Be brief.'" : "";
			cr_assert_eq(tu_sh("'%s' tokenize --model '%s' %s --text \"$(printf '%%s' '%s')\" > '%s/ta' && "
					   "'%s' tokenize --model '%s' %s --text \"$(printf '%%s' '%s')\" > '%s/tb' && "
					   "cmp -s '%s/ta' '%s/tb'", tu_colibri(), a, opt, texts[i], scratch, tu_colibri(), b,
					   opt, texts[i], scratch, scratch, scratch), 0,
				     "text %zu%s tokenizes differently from the GGUF's metadata", i, chat ? " (chat)" : "");
		}
	}
}
