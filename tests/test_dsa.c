/*
 * test_dsa — the DeepSeek sparse attention configurations (deepseek_v32,
 * glm_moe_dsa) beyond exactness, which test_forward checks against the
 * reference: config fields that would run the indexer wrongly are refused
 * with the file and field named and nothing written; a layer that runs its
 * indexer must have its weights; GLM-5's three spellings of the layer
 * schedule agree; the RoPE pairing flags, which transformers v5.15.0 does
 * not read for these families, change nothing.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fixture_cache.h"
#include "tests/test_util.h"

static char ws[PATH_MAX];

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(dsa, .init = setup, .fini = teardown);

/* Copies fixture `name` to ws/name and applies a Python edit to its config
 * dict `c` (empty: none). */
static void fixture_with(char *hf, size_t n, const char *name, const char *edit)
{
	snprintf(hf, n, "%s/%s", ws, name);
	tu_rmrf(hf);
	cr_assert_eq(tu_sh("cp -r '%s/hf/%s' '%s'", tu_fixtures(), name, hf), 0);
	if (*edit)
		cr_assert_eq(tu_sh("/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]; c=json.load(open(p)); %s; "
				   "json.dump(c, open(p, 'w'))\" '%s/config.json'", edit, hf), 0, "edit %s", edit);
}

/* convert must fail naming config.json (or `where`) and `what`, with no
 * output left behind. */
static void expect_refused(const char *name, const char *edit, const char *where, const char *what)
{
	char hf[PATH_MAX], out[PATH_MAX + 8], err[PATH_MAX + 8];
	fixture_with(hf, sizeof hf, name, edit);
	snprintf(out, sizeof out, "%s/out", ws);
	snprintf(err, sizeof err, "%s/err", ws);
	int st = tu_sh("'%s' convert --quiet --quant bf16 '%s' '%s' 2>'%s'", tu_colibri(), hf, out, err);
	char *msg = tu_read(err, NULL);
	cr_assert_not_null(msg);
	cr_assert(st > 0 && st < 128, "%s: convert exited %d: %s", edit, st, msg);
	cr_assert(strstr(msg, where), "%s: message lacks \"%s\": %s", edit, where, msg);
	cr_assert(strstr(msg, what), "%s: message lacks \"%s\": %s", edit, what, msg);
	cr_assert_neq(tu_sh("test -e '%s'", out), 0, "%s: output left behind", edit);
	free(msg);
}

Test(dsa, bad_configs_refused)
{
	expect_refused("glm_moe_dsa", "c['q_lora_rank'] = None", "config.json", "q_lora_rank");
	expect_refused("deepseek_v32", "c['index_head_dim'] = 8", "config.json", "index_head_dim");
	expect_refused("deepseek_v32", "c['index_topk'] = 0", "config.json", "index_topk");
	expect_refused("deepseek_v32", "c['index_n_heads'] = 'many'", "config.json", "index_n_heads");
	expect_refused("glm_moe_dsa", "c['indexer_types'] = ['full', 'full']", "config.json", "indexer_types");
	expect_refused("glm_moe_dsa", "c['indexer_types'] = ['full', 'sparse', 'full']", "config.json",
		       "indexer_types[1]");
	expect_refused("glm_moe_dsa", "del c['indexer_types']; c['index_topk_pattern'] = 'FFX'", "config.json",
		       "index_topk_pattern");
	expect_refused("glm_moe_dsa", "c['mlp_layer_types'] = ['dense', 'moe', 'sparse']", "config.json",
		       "mlp_layer_types[1]");
	expect_refused("glm_moe_dsa",
		       "c['rope_parameters'] = {'rope_type': 'longrope', 'factor': 4, 'rope_theta': 10000.0}",
		       "config.json", "longrope");
}

/* The fixture's layer 2 is "shared" and carries no indexer; declared
 * "full", its missing weights are an error naming the tensor. */
Test(dsa, full_layer_needs_indexer_weights)
{
	expect_refused("glm_moe_dsa", "c['indexer_types'] = ['full', 'full', 'full']",
		       "model.layers.2.self_attn.indexer", "weight");
}

/* Logits of the reference prompt of fixture `name` itself, converted at
 * bf16: computed once per build from the shared container
 * (tests/fixture_cache.h), as the unedited side of every comparison. */
static float *plain_logits(const char *name, size_t *len)
{
	char src[256], tokens_path[PATH_MAX], out[PATH_MAX + 64];
	snprintf(src, sizeof src, "hf/%s", name);
	snprintf(tokens_path, sizeof tokens_path, "%s/ref/%s.tokens", tu_fixtures(), name);
	fc_logits(out, sizeof out, src, "--quant bf16", tokens_path, "");
	float *l = (float *)tu_read(out, len);
	cr_assert(l && *len > 0, "no logits in %s", out);
	return l;
}

/* Logits of the reference prompt of fixture `name`, run on the checkpoint
 * copy hf (tag names the scratch files). */
static float *logits_of(const char *name, const char *hf, const char *tag, size_t *len)
{
	char model[PATH_MAX + 32], out[PATH_MAX + 32], tokens_path[PATH_MAX];
	snprintf(model, sizeof model, "%s/c-%s", ws, tag);
	snprintf(out, sizeof out, "%s/%s.f32", ws, tag);
	snprintf(tokens_path, sizeof tokens_path, "%s/ref/%s.tokens", tu_fixtures(), name);
	char *tokens = tu_read(tokens_path, NULL);
	cr_assert_not_null(tokens);
	tokens[strcspn(tokens, "\r\n")] = 0;
	cr_assert_eq(tu_sh("'%s' convert --quiet --quant bf16 '%s' '%s' && '%s' logits --model '%s' --tokens %s --out '%s'",
			   tu_colibri(), hf, model, tu_colibri(), model, tokens, out), 0, "%s failed", tag);
	free(tokens);
	float *l = (float *)tu_read(out, len);
	cr_assert(l && *len > 0);
	return l;
}

/* indexer_types, index_topk_pattern and the freq/offset schedule
 * (max(i - offset + 1, 0) % freq == 0 is full: freq 2, offset 2 gives
 * full, full, shared) describe the same model: identical logits. A
 * schedule that makes layer 1 shared too changes them. */
Test(dsa, glm5_layer_schedules_agree)
{
	char b[PATH_MAX], c[PATH_MAX], d[PATH_MAX];
	size_t na, nb, nc, nd;
	float *la = plain_logits("glm_moe_dsa", &na);
	fixture_with(b, sizeof b, "glm_moe_dsa", "del c['indexer_types']; c['index_topk_pattern'] = 'FFS'");
	float *lb = logits_of("glm_moe_dsa", b, "pattern", &nb);
	fixture_with(c, sizeof c, "glm_moe_dsa",
		     "del c['indexer_types']; c['index_topk_freq'] = 2; c['index_skip_topk_offset'] = 2");
	float *lc = logits_of("glm_moe_dsa", c, "freq", &nc);
	cr_assert(na == nb && na == nc);
	cr_expect_eq(memcmp(la, lb, na), 0, "index_topk_pattern FFS differs from indexer_types");
	cr_expect_eq(memcmp(la, lc, na), 0, "index_topk_freq 2 / offset 2 differs from indexer_types");
	/* Layer 1 shared as well: its selection comes from layer 0's indexer. */
	fixture_with(d, sizeof d, "glm_moe_dsa", "c['indexer_types'] = ['full', 'shared', 'shared']");
	float *ld = logits_of("glm_moe_dsa", d, "more-shared", &nd);
	cr_assert_eq(na, nd);
	cr_expect_neq(memcmp(la, ld, na), 0, "sharing layer 1's selection changed nothing");
	free(la);
	free(lb);
	free(lc);
	free(ld);
}

/* transformers v5.15.0 pairs RoPE dims without reading a flag: GLM-5
 * interleaves in MLA and in the indexer, DeepSeek-V3.2 interleaves in MLA
 * and rotates halves in the indexer. Flags saying otherwise, or holding
 * non-booleans, leave the logits bit-identical; the `glm_moe_dsa` and
 * `glm_moe_dsa_interleave` fixtures (flags absent and as released) are
 * each checked against the reference in test_forward. */
static void expect_flags_ignored(const char *name, const char *edit)
{
	char b[PATH_MAX];
	size_t na, nb;
	tu_sh("rm -rf '%s'/c-flags", ws);
	float *la = plain_logits(name, &na);
	fixture_with(b, sizeof b, name, edit);
	float *lb = logits_of(name, b, "flags", &nb);
	cr_assert_eq(na, nb);
	cr_expect_eq(memcmp(la, lb, na), 0, "%s: \"%s\" changed the logits", name, edit);
	free(la);
	free(lb);
}

Test(dsa, rope_flags_not_read)
{
	expect_flags_ignored("glm_moe_dsa", "c['rope_interleave'] = False; c['indexer_rope_interleave'] = False");
	expect_flags_ignored("glm_moe_dsa", "c['rope_interleave'] = 1; c['indexer_rope_interleave'] = 'yes'");
	expect_flags_ignored("deepseek_v32", "c['rope_interleave'] = False; c['indexer_rope_interleave'] = True");
}
