/*
 * test_gguf_meta — config.json synthesized from GGUF metadata
 * (engine/convert/gguf_meta.c):
 *   - each family's tiny HF fixture (olmoe, qwen3_moe, mixtral, deepseek_v3,
 *     glm4_moe, gpt_oss) written as GGUF metadata the way llama.cpp
 *     81ff7abe5's convert_hf_to_gguf.py writes it (hf_to_gguf below, a
 *     transcription of its set_gguf_parameters), then model_config_parse of
 *     the synthesized config against model_config_parse of the HF
 *     config.json, field by field over struct model_config; the same for
 *     the fixture GGUF files of tools/gguf_write.py when they are there;
 *   - llama.cpp's defaults where a GGUF is silent (no groups, no scaling,
 *     no renormalisation, no dense lead) and the gpt-oss sliding pattern;
 *   - hostile metadata: missing keys, wrong types, unknown names: an error
 *     naming the file and the key, never a crash.
 * The tokenizer half is tests/test_gguf_meta_tok.c. Tests needing the
 * fixtures skip with the reason.
 */
#include "tests/gguf_meta_util.h"

TestSuite(gguf_meta, .init = setup, .fini = teardown);

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
