/*
 * test_config — config.json and generation_config.json as colibri reads
 * them (engine/model/model_config.c, engine/decode/generate.c) through the one checked
 * JSON number reader (base/json_get.c):
 *  - json_int refuses what an int cannot hold exactly: 1e30, 3e9 for an
 *    int32, fractions, infinities, non-numbers; accepts -0 and +-2^53;
 *  - json_find_duplicate_key names the path of a key given twice at any
 *    depth, in milliseconds for 100k keys, over 1000 levels;
 *  - integer fields out of range (eos_token_id 2147483648 or [1e30],
 *    mlp_only_layers [1e20], bos_token_id 1e30, a fractional expert count)
 *    and values that make a broken model (rms_norm_eps <= 0 or huge,
 *    rope_theta <= 1, routed_scaling_factor 1e308, a YaRN factor below 1)
 *    are refused with a message naming the file and the field; these were
 *    accepted (or converted with undefined behaviour) before;
 *  - fields left out take transformers v5.15.0's per-family defaults;
 *  - generation_config.json: top_k 3e9, a string temperature, top_p 0 are
 *    errors naming the file and the field; valid values are read;
 *  - a container whose config.json says fewer layers, or other experts,
 *    than the container holds is refused at load (it would run a silently
 *    truncated model);
 *  - the hybrids: Qwen3.5's vision-language config (text_config) and
 *    Qwen3-Next's give each layer its mixer from layer_types or
 *    full_attention_interval (Gated DeltaNet or gated attention), the MTP
 *    row full attention, zero-centred norms, a gated shared expert;
 *    inconsistent head counts, unknown layer types and a rotary fraction
 *    that rotates nothing are refused naming the field;
 *  - DeepSeek-V4 (DeepseekV4Config): legacy keys (compress_ratios,
 *    num_hash_layers, qk_rope_head_dim, rope_scaling) and modern ones
 *    (layer_types, mlp_layer_types, compress_rates, nested rope_parameters)
 *    give each layer its attention, routing and RoPE; the class's defaults
 *    and layer schedule; bad values refused naming the field;
 *  - Inkling (InklingTextConfig): nested (inkling_mm_model's text_config,
 *    token ids from the top when it lacks them) and flat (inkling_text);
 *    the class's defaults, its attribute_map aliases and kwargs
 *    (dense_mlp_idx, dense_intermediate_size), layer types derived from
 *    local_layer_ids or every sixth layer, rope fields ignored; bad values
 *    (heads not a multiple of their KV heads in either set, hidden_act,
 *    unpadded_vocab_size past vocab_size, zero extents, disagreeing
 *    aliases, unknown layer types) refused naming the field.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>

#include "engine/decode/generate.h"
#include "base/clock.h"
#include "base/json_get.h"
#include "engine/model/model_config.h"
#include "base/error.h"
#include "tests/cli_util.h"
#include "tests/fixture_cache.h"

static char ws[PATH_MAX];

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
	error_clear();
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(config, .init = setup, .fini = teardown);

Test(config, json_int_checks)
{
	static const struct {
		const char *json;
		int64_t lo, hi;
		bool ok;
		int64_t want;
	} cases[] = {
		{ "7", 0, 10, true, 7 },
		{ "-0", 0, 10, true, 0 },
		{ "9007199254740992", 0, INT64_MAX, true, JSON_INT_EXACT },
		{ "-9007199254740992", INT64_MIN, 0, true, -JSON_INT_EXACT },
		{ "9007199254740994", 0, INT64_MAX, false, 0 },  /* beyond 2^53: not exact */
		{ "1e30", 0, INT64_MAX, false, 0 },
		{ "3e9", 0, INT32_MAX, false, 0 },
		{ "2147483648", 0, INT32_MAX, false, 0 },
		{ "1.5", 0, 10, false, 0 },
		{ "1e999", 0, INT64_MAX, false, 0 },              /* cJSON reads it as inf */
		{ "-1e999", INT64_MIN, 0, false, 0 },
		{ "11", 0, 10, false, 0 },
		{ "-1", 0, 10, false, 0 },
		{ "\"3\"", 0, 10, false, 0 },
		{ "true", 0, 10, false, 0 },
		{ "null", 0, 10, false, 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cJSON *v = cJSON_Parse(cases[i].json);
		cr_assert_not_null(v, "%s", cases[i].json);
		int64_t out = -12345;
		int rc = json_int(v, cases[i].lo, cases[i].hi, &out);
		if (cases[i].ok) {
			cr_expect_eq(rc, 0, "%s refused", cases[i].json);
			cr_expect_eq(out, cases[i].want, "%s read as %lld", cases[i].json, (long long)out);
		} else {
			cr_expect_eq(rc, -EINVAL, "%s accepted in [%lld, %lld]", cases[i].json,
				     (long long)cases[i].lo, (long long)cases[i].hi);
			cr_expect_eq(out, -12345, "%s: out written on failure", cases[i].json);
		}
		cJSON_Delete(v);
	}
}

/* A key given twice in any object is found and named by its path; an
 * object of 100k keys (a 4 MB request body holds that many) is sorted, not
 * compared pairwise, and 1000 levels of nesting (cJSON's limit) are walked
 * without recursion. */
Test(config, duplicate_keys_found)
{
	static const struct {
		const char *json, *path;
	} cases[] = {
		{ "{\"a\":1,\"b\":2}", NULL },
		{ "[1,{\"a\":[]},{\"a\":{}}]", NULL },
		{ "{\"a\":1,\"b\":2,\"a\":3}", "a" },
		{ "{\"A\":1,\"a\":2}", NULL },
		{ "{\"m\":[{\"r\":1},{\"c\":\"x\",\"c\":\"y\"}]}", "m[1].c" },
		{ "[[0,{\"x\":{\"k\":1,\"k\":2}}]]", "[0][1].x.k" },
		{ "{\"a\":{\"b\":1},\"c\":[{\"d\":{\"e\":1,\"f\":2}},{\"g\":null,\"g\":0}]}", "c[1].g" },
	};
	char path[96];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cJSON *v = cJSON_Parse(cases[i].json);
		cr_assert_not_null(v, "%s", cases[i].json);
		int rc = json_find_duplicate_key(v, path, sizeof path);
		cr_expect_eq(rc, cases[i].path ? 1 : 0, "%s: %d", cases[i].json, rc);
		if (cases[i].path)
			cr_expect_str_eq(path, cases[i].path, "%s", cases[i].json);
		cJSON_Delete(v);
	}
	enum { KEYS = 100000 };
	cJSON *big = cJSON_CreateObject();
	char key[32];
	for (int i = 0; i < KEYS; i++) {
		snprintf(key, sizeof key, "k%d", (i * 7919) % KEYS);
		cJSON_AddItemToObject(big, key, cJSON_CreateNumber(i));
	}
	double t0 = clock_now_s();
	cr_expect_eq(json_find_duplicate_key(big, path, sizeof path), 0);
	cJSON_AddItemToObject(big, "k4242", cJSON_CreateTrue());
	cr_expect_eq(json_find_duplicate_key(big, path, sizeof path), 1);
	cr_expect_str_eq(path, "k4242");
	double dt = clock_now_s() - t0;
	cr_expect_lt(dt, 1.0, "two passes over %d keys took %.2f s", KEYS, dt);
	cJSON_Delete(big);
	char deep[2 * 1000 + 16];
	memset(deep, '[', 1000);
	memset(deep + 1000, ']', 1000);
	deep[2000] = 0;
	cJSON *d = cJSON_Parse(deep);
	cr_assert_not_null(d, "cJSON refused 1000 levels");
	cr_expect_eq(json_find_duplicate_key(d, path, sizeof path), 0);
	cJSON_Delete(d);
}

/* Parses the config.json text with key (NULL: none) set to the JSON text
 * value (NULL: removed). Returns the parse result; *cfg holds the config. */
static int parse_text_with(const char *text, const char *key, const char *value, struct model_config *cfg)
{
	cJSON *j = cJSON_Parse(text);
	cr_assert_not_null(j);
	if (key) {
		cJSON_DeleteItemFromObjectCaseSensitive(j, key);
		if (value) {
			cJSON *v = cJSON_Parse(value);
			cr_assert_not_null(v, "bad test value %s", value);
			cJSON_AddItemToObject(j, key, v);
		}
	}
	error_clear();
	int rc = model_config_parse(cfg, j, "config.json");
	cJSON_Delete(j);
	return rc;
}

/* parse_text_with on fixture `name`'s config.json. */
static int parse_with(const char *name, const char *key, const char *value, struct model_config *cfg)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/hf/%s/config.json", tu_fixtures(), name);
	char *text = tu_read(path, NULL);
	cr_assert_not_null(text, "%s missing", path);
	int rc = parse_text_with(text, key, value, cfg);
	free(text);
	return rc;
}

/* The edit must be refused with a message naming config.json and `what`. */
static void expect_refused(const char *name, const char *key, const char *value, const char *what)
{
	struct model_config cfg;
	int rc = parse_with(name, key, value, &cfg);
	cr_expect_neq(rc, 0, "%s: %s = %s accepted", name, key, value);
	const char *msg = error_message();
	cr_expect(strstr(msg, "config.json") && strstr(msg, what), "%s: %s = %s: message \"%s\" lacks \"%s\"", name,
		  key, value, msg, what);
}

Test(config, out_of_range_integers_refused)
{
	expect_refused("qwen3_moe", "eos_token_id", "2147483648", "eos_token_id");
	expect_refused("qwen3_moe", "eos_token_id", "[1e30]", "eos_token_id[0]");
	expect_refused("qwen3_moe", "eos_token_id", "[1, 2, 3.5]", "eos_token_id[2]");
	expect_refused("qwen3_moe", "eos_token_id", "512", "eos_token_id"); /* vocab_size 512: not a token */
	expect_refused("qwen3_moe", "eos_token_id", "[1,2,3,4,5,6,7,8,9]", "at most");
	expect_refused("qwen3_moe", "mlp_only_layers", "[1e20]", "mlp_only_layers[0]");
	expect_refused("qwen3_moe", "mlp_only_layers", "[0, 3]", "mlp_only_layers[1]"); /* 3 layers */
	expect_refused("qwen3_moe", "bos_token_id", "1e30", "bos_token_id");
	expect_refused("qwen3_moe", "num_experts", "7.5", "num_experts");
	expect_refused("qwen3_moe", "num_hidden_layers", "1e300", "num_hidden_layers");
	expect_refused("deepseek_v3", "first_k_dense_replace", "-1e30", "first_k_dense_replace");
	expect_refused("deepseek_v32", "index_topk", "1e30", "index_topk");
}

Test(config, broken_values_refused)
{
	expect_refused("qwen3_moe", "rms_norm_eps", "0", "rms_norm_eps");
	expect_refused("qwen3_moe", "rms_norm_eps", "-1e-6", "rms_norm_eps");
	expect_refused("qwen3_moe", "rms_norm_eps", "1e10", "rms_norm_eps");
	expect_refused("qwen3_moe", "rms_norm_eps", "1e-320", "float32"); /* positive, but 0 as a float */
	expect_refused("qwen3_moe", "rope_theta", "0", "rope_theta");
	expect_refused("qwen3_moe", "rope_theta", "-10000", "rope_theta");
	expect_refused("qwen3_moe", "rope_theta", "1", "rope_theta");
	expect_refused("qwen3_moe", "rope_theta", "\"big\"", "rope_theta");
	expect_refused("deepseek_v3", "routed_scaling_factor", "1e308", "routed_scaling_factor");
	expect_refused("deepseek_v3", "routed_scaling_factor", "0", "routed_scaling_factor");
	expect_refused("deepseek_v3", "rope_scaling",
		       "{\"type\": \"yarn\", \"factor\": 0.5, \"original_max_position_embeddings\": 64}", "factor");
	expect_refused("olmoe", "clip_qkv", "-1", "clip_qkv");
	expect_refused("glm4_moe", "partial_rotary_factor", "1.5", "partial_rotary_factor");
	/* No head_dim, and more heads than hidden dims: heads of 0 dims. */
	expect_refused("mixtral", "num_attention_heads", "456", "head_dim");
}

Test(config, hybrid_layer_rows)
{
	struct model_config cfg;
	cr_assert_eq(parse_with("qwen3_5_moe", "unused_key", NULL, &cfg), 0, "%s", error_message());
	cr_expect_eq(cfg.arch, MODEL_ARCH_QWEN3_5_MOE);
	cr_expect_str_eq(cfg.model_type, "qwen3_5_moe");
	cr_expect_eq(cfg.n_layers, 4);
	for (int l = 0; l < 3; l++)
		cr_expect_eq(cfg.rows[l].mixer, MIXER_GDN, "layer %d", l);
	cr_expect_eq(cfg.rows[3].mixer, MIXER_GQA);
	cr_expect_eq(cfg.n_mtp_layers, 1);
	cr_expect_eq(cfg.rows[4].mixer, MIXER_GQA, "the MTP layer is full attention");
	cr_expect(cfg.rows[4].ffn == FFN_MOE_SHARED && cfg.shared_gate && cfg.shared_intermediate == 128);
	cr_expect(cfg.norm_zero_centred && cfg.attn_gate && cfg.norm_topk_prob);
	cr_expect_eq(cfg.rot_dim, 16, "a quarter of head_dim 64");
	cr_expect(cfg.lin_k_heads == 2 && cfg.lin_v_heads == 4 && cfg.lin_k_dim == 32 && cfg.lin_v_dim == 32 &&
		  cfg.lin_conv == 4 && !cfg.lin_grouped);
	expect_refused("qwen3_5_moe", "text_config", NULL, "text_config");

	cr_assert_eq(parse_with("qwen3_5_moe_text", "unused_key", NULL, &cfg), 0, "%s", error_message());
	cr_expect_eq(cfg.arch, MODEL_ARCH_QWEN3_5_MOE);
	for (int l = 0; l < 4; l++) /* full_attention_interval 2 */
		cr_expect_eq(cfg.rows[l].mixer, l % 2 ? MIXER_GQA : MIXER_GDN, "layer %d", l);

	cr_assert_eq(parse_with("qwen3_next", "unused_key", NULL, &cfg), 0, "%s", error_message());
	cr_expect(cfg.arch == MODEL_ARCH_QWEN3_NEXT && cfg.lin_grouped);
	cr_expect(cfg.rows[2].ffn == FFN_DENSE && cfg.rows[1].ffn == FFN_MOE_SHARED, "mlp_only_layers [2]");
	cr_assert_eq(parse_with("qwen3_next", "layer_types",
				"[\"linear_attention\", \"attention\", \"mamba\", \"full_attention\"]", &cfg), 0, "%s",
		     error_message());
	cr_expect(cfg.rows[0].mixer == MIXER_GDN && cfg.rows[1].mixer == MIXER_GQA && cfg.rows[2].mixer == MIXER_GDN &&
		  cfg.rows[3].mixer == MIXER_GQA, "legacy layer type names");
	cr_assert_eq(parse_with("qwen3_next", "full_attention_interval", "1", &cfg), 0, "%s", error_message());
	for (int l = 0; l < 4; l++)
		cr_expect_eq(cfg.rows[l].mixer, MIXER_GQA, "interval 1: layer %d is full attention", l);
	expect_refused("qwen3_next", "layer_types", "[\"linear_attention\"]", "layer_types");
	expect_refused("qwen3_next", "layer_types",
		       "[\"linear_attention\", \"sliding\", \"linear_attention\", \"full_attention\"]",
		       "layer_types[1]");
	expect_refused("qwen3_next", "linear_num_value_heads", "3", "linear_num_key_heads");
	expect_refused("qwen3_next", "full_attention_interval", "0", "full_attention_interval");
	expect_refused("qwen3_next", "partial_rotary_factor", "0.01", "partial_rotary_factor");
	expect_refused("qwen3_next", "hidden_act", "\"gelu\"", "hidden_act");
}

/* What transformers v5.15.0's config classes give a field config.json
 * leaves out (the fixtures spell every field, so each is removed here). */
Test(config, family_defaults)
{
	struct model_config cfg;
	cr_assert_eq(parse_with("qwen3_moe", "rms_norm_eps", NULL, &cfg), 0, "%s", error_message());
	cr_expect_float_eq(cfg.rms_eps, 1e-6f, 1e-12);
	cr_assert_eq(parse_with("olmoe", "rms_norm_eps", NULL, &cfg), 0, "%s", error_message());
	cr_expect_float_eq(cfg.rms_eps, 1e-5f, 1e-12);
	cr_assert_eq(parse_with("glm_moe_dsa", "rms_norm_eps", NULL, &cfg), 0, "%s", error_message());
	cr_expect_float_eq(cfg.rms_eps, 1e-5f, 1e-12);
	cr_assert_eq(parse_with("deepseek_v3", "routed_scaling_factor", NULL, &cfg), 0, "%s", error_message());
	cr_expect_float_eq(cfg.routed_scaling, 2.5f, 1e-6);
	cr_assert_eq(parse_with("glm4_moe", "routed_scaling_factor", NULL, &cfg), 0, "%s", error_message());
	cr_expect_float_eq(cfg.routed_scaling, 1.0f, 1e-6);
	cr_assert_eq(parse_with("mixtral", "rope_theta", NULL, &cfg), 0, "%s", error_message());
	cr_expect_float_eq(cfg.rope_theta, 1e6f, 1e-3);
	/* DeepseekV3Config: n_group 8, topk_group 4 (the fixture has 16 experts). */
	cr_assert_eq(parse_with("deepseek_v3", "n_group", NULL, &cfg), 0, "%s", error_message());
	cr_expect_eq(cfg.n_group, 8);
	/* Glm4MoeConfig: first_k_dense_replace 1. */
	cr_assert_eq(parse_with("glm4_moe", "first_k_dense_replace", NULL, &cfg), 0, "%s", error_message());
	cr_expect(!model_config_layer_moe(&cfg, 0) && model_config_layer_moe(&cfg, 1));
	/* MixtralConfig: eos 2 when config.json names none. */
	cr_assert_eq(parse_with("mixtral", "eos_token_id", NULL, &cfg), 0, "%s", error_message());
	cr_expect(cfg.n_eos == 1 && cfg.eos_ids[0] == 2, "n_eos %d, eos %d", cfg.n_eos, cfg.eos_ids[0]);
}

/* Writes ws/gen/generation_config.json and reads it. */
static int gen_options(const char *json, struct generate_options *o)
{
	char dir[PATH_MAX + 8], path[PATH_MAX + 40];
	snprintf(dir, sizeof dir, "%s/gen", ws);
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/generation_config.json", dir);
	cr_assert_eq(tu_write(path, json, strlen(json)), 0);
	error_clear();
	return generate_options_default(o, dir);
}

Test(config, generation_config_checked)
{
	struct generate_options o;
	static const struct {
		const char *json, *field;
	} bad[] = {
		{ "{\"do_sample\": true, \"top_k\": 3e9}", "top_k" },
		{ "{\"do_sample\": true, \"top_k\": -1}", "top_k" },
		{ "{\"do_sample\": true, \"temperature\": \"hot\"}", "temperature" },
		{ "{\"do_sample\": true, \"top_p\": 0}", "top_p" },
		{ "{\"do_sample\": true, \"top_p\": 1e-300}", "top_p" },
		{ "{\"do_sample\": \"yes\"}", "do_sample" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_expect_eq(gen_options(bad[i].json, &o), -EINVAL, "%s accepted", bad[i].json);
		cr_expect(strstr(error_message(), "generation_config.json") && strstr(error_message(), bad[i].field),
			  "%s: message \"%s\"", bad[i].json, error_message());
	}
	cr_assert_eq(gen_options("{\"do_sample\": true, \"temperature\": 0.6, \"top_k\": 20, \"top_p\": 0.95}", &o), 0,
		     "%s", error_message());
	cr_expect_float_eq(o.temp, 0.6f, 1e-7);
	cr_expect_eq(o.top_k, 20);
	cr_expect_float_eq(o.top_p, 0.95f, 1e-7);
	/* Sampling values without do_sample: greedy, as GenerationConfig. */
	cr_assert_eq(gen_options("{\"temperature\": 0.6, \"top_k\": 20}", &o), 0);
	cr_expect_eq(o.temp, 0.0f);
}

/* A private copy of fixture name converted at bf16, at ws/c-name, with
 * the container's config.json edited by Python statements on its dict c. */
static void container_with(const char *name, const char *edit, char *model, size_t n)
{
	char src[256];
	snprintf(model, n, "%s/c-%s", ws, name);
	snprintf(src, sizeof src, "hf/%s", name);
	tu_rmrf(model);
	fc_container_copy(model, src, "--quant bf16");
	cr_assert_eq(tu_sh("/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]; c=json.load(open(p)); %s; "
			   "json.dump(c, open(p, 'w'))\" '%s/config.json'", edit, model), 0);
}

static void expect_load_refused(const char *model, const char *needle)
{
	char out[PATH_MAX + 16], log[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/logits.f32", ws);
	snprintf(log, sizeof log, "%s/logits.log", ws);
	int st = cli_run(ws, log, "logits --model '%s' --tokens 1,2,3 --out '%s'", model, out);
	char *err = cli_read_err(log);
	cr_expect(st > 0 && st < 128, "logits exited %d: %s", st, err);
	cr_expect(err && strstr(err, needle), "message lacks \"%s\": %s", needle, err);
	cr_expect_neq(tu_sh("test -e '%s'", out), 0, "logits left output behind");
	free(err);
}

Test(config, container_must_match_config)
{
	char model[PATH_MAX + 16];
	container_with("qwen3_moe", "c['num_hidden_layers'] = 2", model, sizeof model);
	expect_load_refused(model, "model.layers.2.");
	container_with("deepseek_v32", "c['num_hidden_layers'] = 2", model, sizeof model);
	expect_load_refused(model, "does not describe");
	container_with("olmoe", "c['num_experts'] = 4; c['num_experts_per_tok'] = 2", model, sizeof model);
	expect_load_refused(model, "experts");
}

/* A small DeepSeek-V4 config.json (the released naming, legacy keys
 * included), with key set to the JSON text value (NULL: removed). */
static const char v4_config[] =
	"{\"model_type\": \"deepseek_v4\", \"vocab_size\": 512, \"hidden_size\": 64, \"num_hidden_layers\": 5,"
	" \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 32, \"q_lora_rank\": 48,"
	" \"moe_intermediate_size\": 32, \"n_routed_experts\": 8, \"num_experts_per_tok\": 2,"
	" \"n_shared_experts\": 1, \"scoring_func\": \"sqrtsoftplus\", \"routed_scaling_factor\": 1.5,"
	" \"o_groups\": 2, \"o_lora_rank\": 16, \"index_n_heads\": 2, \"index_head_dim\": 16, \"index_topk\": 4,"
	" \"sliding_window\": 8, \"hc_mult\": 2, \"hc_sinkhorn_iters\": 5, \"hc_eps\": 1e-6, \"swiglu_limit\": 7.0,"
	" \"rope_theta\": 10000, \"compress_rope_theta\": 40000, \"qk_rope_head_dim\": 8,"
	" \"compress_ratios\": [0, 4, 128, 4, 0, 4], \"num_hash_layers\": 2, \"num_nextn_predict_layers\": 1,"
	" \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 64,"
	" \"beta_fast\": 32, \"beta_slow\": 1}}";

static int v4_parse_with(const char *key, const char *value, struct model_config *cfg)
{
	return parse_text_with(v4_config, key, value, cfg);
}

static void v4_expect_refused(const char *key, const char *value, const char *what)
{
	struct model_config cfg;
	int rc = v4_parse_with(key, value, &cfg);
	cr_expect_neq(rc, 0, "deepseek_v4: %s = %s accepted", key, value);
	const char *msg = error_message();
	cr_expect(strstr(msg, "config.json") && strstr(msg, what), "deepseek_v4: %s = %s: message \"%s\" lacks \"%s\"",
		  key, value, msg, what);
}

/* DeepseekV4Config as transformers v5.15.0 reads it: the legacy keys
 * (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling) give
 * each layer its attention and routing, the rotated dims and the
 * compressed layers' YaRN (attention factor forced to 1); every row is
 * MIXER_V4 + MoE with the shared expert + hyper-connections. */
Test(config, deepseek_v4_rows)
{
	struct model_config c;
	cr_assert_eq(v4_parse_with(NULL, NULL, &c), 0, "%s", error_message());
	cr_expect_eq(c.arch, MODEL_ARCH_DEEPSEEK_V4);
	cr_expect_eq(c.n_layers, 5);
	const enum v4_attn want[5] = { V4_ATTN_SLIDING, V4_ATTN_CSA, V4_ATTN_HCA, V4_ATTN_CSA, V4_ATTN_SLIDING };
	for (int l = 0; l < 5; l++) {
		cr_expect(c.rows[l].norm == NORM_RMS && c.rows[l].mixer == MIXER_V4 && c.rows[l].ffn == FFN_MOE_SHARED &&
			  c.rows[l].residual == RESIDUAL_HC, "layer %d row", l);
		cr_expect_eq(c.v4_attn[l], want[l], "layer %d attention", l);
		cr_expect_eq(c.hash_routed[l], l < 2, "layer %d hash routing", l);
	}
	/* The MTP module is layer 5, as DeepSeek's MTPBlock(n_layers): its
	 * attention the sixth compress_ratios entry, routed by score. */
	cr_expect_eq(c.n_mtp_layers, 1, "num_nextn_predict_layers");
	cr_expect(c.rows[5].mixer == MIXER_V4 && c.rows[5].ffn == FFN_MOE_SHARED && c.rows[5].residual == RESIDUAL_HC,
		  "MTP layer row");
	cr_expect(c.v4_attn[5] == V4_ATTN_CSA && !c.hash_routed[5], "MTP layer: CSA, top-k");
	/* Where compress_ratios lists the decoder layers only, or layer_types
	 * names them, the MTP layer is a sliding one. */
	cr_assert_eq(v4_parse_with("compress_ratios", "[0, 4, 128, 4, 0]", &c), 0, "%s", error_message());
	cr_expect(c.n_mtp_layers == 1 && c.v4_attn[5] == V4_ATTN_SLIDING, "MTP layer without a ratio");
	cr_assert_eq(v4_parse_with("num_nextn_predict_layers", "0", &c), 0, "%s", error_message());
	cr_expect_eq(c.n_mtp_layers, 0);
	cr_assert_eq(v4_parse_with(NULL, NULL, &c), 0, "%s", error_message());
	cr_expect(c.router == ROUTER_SQRTSOFTPLUS && c.router_bias && c.n_kv_heads == 1);
	cr_expect(c.compress_rate_csa == 4 && c.compress_rate_hca == 128);
	cr_expect(c.rot_dim == 8 && c.qk_rope_dim == 8 && c.rope_interleave == 1);
	cr_expect(c.hc_mult == 2 && c.hc_sinkhorn_iters == 5 && c.o_groups == 2 && c.o_lora_rank == 16);
	cr_expect(c.n_experts == 8 && c.top_k == 2 && c.moe_intermediate == 32 && c.shared_intermediate == 32);
	cr_expect(c.q_lora_rank == 48 && c.sliding_window == 8 && c.index_topk == 4);
	cr_expect_float_eq(c.swiglu_limit, 7.0f, 1e-6);
	cr_expect_float_eq(c.routed_scaling, 1.5f, 1e-6);
	cr_expect_float_eq(c.rope_theta, 10000.0f, 1e-3);
	cr_expect_float_eq(c.compress_rope_theta, 40000.0f, 1e-3);
	cr_expect(c.yarn && c.yarn_factor == 4.0f && c.yarn_original_max == 64);
	cr_expect_float_eq(c.rope_attn_factor, 1.0f, 1e-7);
	cr_expect_float_eq(c.attn_scale, 1.0f / sqrtf(32.0f), 1e-7);
	cr_expect(c.bos_id == 0 && c.n_eos == 1 && c.eos_ids[0] == 1, "DeepseekV4Config's token ids");

	/* The modern keys. */
	cr_assert_eq(v4_parse_with("layer_types",
				   "[\"heavily_compressed_attention\", \"sliding_attention\", "
				   "\"compressed_sparse_attention\", \"sliding_attention\", \"sliding_attention\"]", &c),
		     0, "%s", error_message());
	cr_expect(c.v4_attn[0] == V4_ATTN_HCA && c.v4_attn[1] == V4_ATTN_SLIDING && c.v4_attn[2] == V4_ATTN_CSA);
	cr_assert_eq(v4_parse_with("mlp_layer_types", "[\"moe\", \"hash_moe\", \"moe\", \"moe\", \"moe\", \"moe\"]", &c),
		     0, "%s", error_message());
	cr_expect(!c.hash_routed[0] && c.hash_routed[1] && !c.hash_routed[2], "mlp_layer_types over num_hash_layers");
	cr_assert_eq(v4_parse_with("compress_rates",
				   "{\"compressed_sparse_attention\": 8, \"heavily_compressed_attention\": 64}", &c), 0,
		     "%s", error_message());
	cr_expect(c.compress_rate_csa == 8 && c.compress_rate_hca == 64);
	cr_assert_eq(v4_parse_with("partial_rotary_factor", "0.5", &c), 0, "%s", error_message());
	cr_expect_eq(c.rot_dim, 16, "partial_rotary_factor over qk_rope_head_dim");
	/* Nested rope parameters: no forced attention factor, so YaRN's
	 * 0.1 ln(factor) + 1; compress_rope_theta unused. */
	cr_assert_eq(v4_parse_with("rope_scaling",
				   "{\"main\": {\"rope_type\": \"default\", \"rope_theta\": 5000}, \"compress\": "
				   "{\"rope_type\": \"yarn\", \"rope_theta\": 80000, \"factor\": 4, "
				   "\"original_max_position_embeddings\": 64}}", &c), 0, "%s", error_message());
	cr_expect_float_eq(c.rope_theta, 5000.0f, 1e-3);
	cr_expect_float_eq(c.compress_rope_theta, 80000.0f, 1e-3);
	cr_expect_float_eq(c.rope_attn_factor, 0.1f * logf(4.0f) + 1.0f, 1e-6);
	cr_assert_eq(v4_parse_with("rope_scaling", NULL, &c), 0, "%s", error_message());
	cr_expect(!c.yarn && c.rope_attn_factor == 1.0f, "no rope_scaling: a default compress RoPE");
}

/* Without the optional fields: DeepseekV4Config's defaults, including its
 * layer schedule (two HCA layers, then CSA and HCA in turn) and the first
 * three layers hash-routed. */
Test(config, deepseek_v4_defaults)
{
	struct model_config c;
	cJSON *j = cJSON_Parse("{\"model_type\": \"deepseek_v4\", \"num_hidden_layers\": 6}");
	cr_assert_eq(model_config_parse(&c, j, "config.json"), 0, "%s", error_message());
	cJSON_Delete(j);
	cr_expect(c.vocab == 129280 && c.hidden == 4096 && c.n_heads == 64 && c.n_kv_heads == 1 && c.head_dim == 512);
	cr_expect(c.q_lora_rank == 1024 && c.moe_intermediate == 2048 && c.n_experts == 256 && c.top_k == 6);
	cr_expect(c.o_groups == 8 && c.o_lora_rank == 1024 && c.index_n_heads == 64 && c.index_head_dim == 128 &&
		  c.index_topk == 512 && c.sliding_window == 128 && c.hc_mult == 4 && c.hc_sinkhorn_iters == 20);
	cr_expect(c.rot_dim == 64 && c.compress_rate_csa == 4 && c.compress_rate_hca == 128);
	cr_expect(c.max_positions == 1048576);
	cr_expect_float_eq(c.rms_eps, 1e-6f, 1e-12);
	cr_expect_float_eq(c.routed_scaling, 1.5f, 1e-6);
	cr_expect_float_eq(c.swiglu_limit, 10.0f, 1e-6);
	cr_expect_float_eq(c.hc_eps, 1e-6f, 1e-12);
	cr_expect_float_eq(c.compress_rope_theta, 160000.0f, 1e-2);
	const enum v4_attn want[6] = { V4_ATTN_HCA, V4_ATTN_HCA, V4_ATTN_HCA, V4_ATTN_CSA, V4_ATTN_HCA, V4_ATTN_CSA };
	for (int l = 0; l < 6; l++) {
		cr_expect_eq(c.v4_attn[l], want[l], "layer %d attention", l);
		cr_expect_eq(c.hash_routed[l], l < 3, "layer %d hash routing", l);
	}
}

Test(config, deepseek_v4_bad_values_refused)
{
	v4_expect_refused("num_key_value_heads", "2", "num_key_value_heads");
	v4_expect_refused("scoring_func", "\"softmax\"", "scoring_func");
	v4_expect_refused("compress_ratios", "[0, 4, 64, 4, 0]", "compress_ratios[2]");
	v4_expect_refused("compress_ratios", "[0, 4]", "compress_ratios");
	v4_expect_refused("layer_types", "[\"sliding_attention\"]", "layer_types");
	v4_expect_refused("layer_types", "[\"sliding_attention\", \"full_attention\", \"sliding_attention\", "
			  "\"sliding_attention\", \"sliding_attention\"]", "layer_types[1]");
	v4_expect_refused("mlp_layer_types", "[\"moe\", \"dense\", \"moe\", \"moe\", \"moe\"]", "mlp_layer_types[1]");
	v4_expect_refused("compress_rates", "{\"compressed_sparse_attention\": 4}", "heavily_compressed_attention");
	v4_expect_refused("compress_rates", "{\"compressed_sparse_attention\": 0, \"heavily_compressed_attention\": 128}",
			  "compress_rates.compressed_sparse_attention");
	v4_expect_refused("compress_rate_hca", "-1", "compress_rate_hca");
	v4_expect_refused("swiglu_limit", "0", "swiglu_limit");
	v4_expect_refused("hc_mult", "0", "hc_mult");
	v4_expect_refused("hc_eps", "-1", "hc_eps");
	v4_expect_refused("hc_sinkhorn_iters", "1e9", "hc_sinkhorn_iters");
	v4_expect_refused("o_groups", "3", "o_groups");
	v4_expect_refused("o_lora_rank", "0", "o_lora_rank");
	v4_expect_refused("q_lora_rank", "0", "q_lora_rank");
	v4_expect_refused("sliding_window", "0", "sliding_window");
	v4_expect_refused("index_topk", "0", "index_topk");
	v4_expect_refused("index_head_dim", "4", "index_head_dim");
	v4_expect_refused("index_n_heads", "1e30", "index_n_heads");
	v4_expect_refused("qk_rope_head_dim", "3", "rotates 3 dims");
	v4_expect_refused("partial_rotary_factor", "0.01", "partial_rotary_factor");
	v4_expect_refused("num_experts_per_tok", "9", "num_experts_per_tok");
	v4_expect_refused("n_shared_experts", "2", "n_shared_experts");
	v4_expect_refused("routed_scaling_factor", "0", "routed_scaling_factor");
	v4_expect_refused("num_hash_layers", "-1", "num_hash_layers");
	v4_expect_refused("num_nextn_predict_layers", "99", "num_nextn_predict_layers");
	v4_expect_refused("hidden_act", "\"gelu\"", "hidden_act");
	v4_expect_refused("mlp_bias", "true", "mlp_bias");
	v4_expect_refused("rope_scaling", "{\"type\": \"linear\", \"factor\": 2}", "linear");
	v4_expect_refused("rope_scaling", "{\"type\": \"yarn\"}", "factor");
	v4_expect_refused("rope_scaling", "{\"type\": \"yarn\", \"factor\": 0.5}", "factor");
	v4_expect_refused("rope_scaling", "{\"main\": {\"rope_type\": \"default\"}}", "compress");
	v4_expect_refused("rope_scaling", "{\"main\": {\"rope_type\": \"yarn\", \"factor\": 2}, \"compress\": {}}", "main");
	v4_expect_refused("compress_rope_theta", "1", "compress_rope_theta");
}

/* MiniMaxM2Config as transformers v5.15.0 reads it, and the rotary dims of
 * the released config.json: whole-projection q/k norms, Mixtral's names, a
 * sigmoid router with the correction bias in one group, every layer MoE;
 * partial_rotary_factor wins, rotary_dim (what MiniMax releases, which
 * transformers ignores) stands in for it when it is absent, and the two
 * must agree when both are given. */
Test(config, minimax_m2_rows)
{
	struct model_config cfg;
	cr_assert_eq(parse_with("minimax_m2", NULL, NULL, &cfg), 0, "%s", error_message());
	cr_expect_eq(cfg.arch, MODEL_ARCH_MINIMAX_M2);
	cr_expect_eq(cfg.head_dim, 24, "head_dim is the config's, not hidden / heads (32)");
	cr_expect_eq(cfg.rot_dim, 12);
	cr_expect_eq(cfg.qk_norm, QK_NORM_FULL);
	cr_expect_eq(cfg.expert_naming, EXPERT_NAMING_MIXTRAL);
	cr_expect_eq(cfg.router, ROUTER_SIGMOID_GROUPED);
	cr_expect(cfg.router_bias && cfg.norm_topk_prob);
	cr_expect_eq(cfg.n_group, 1);
	cr_expect_eq(cfg.topk_group, 1);
	cr_expect_eq(cfg.routed_scaling, 1.0f);
	cr_expect_eq(cfg.n_shared_experts, 0);
	for (int l = 0; l < cfg.n_layers; l++)
		cr_expect(model_config_layer_moe(&cfg, l), "layer %d", l);
	cr_assert_eq(parse_with("minimax_m2", "partial_rotary_factor", NULL, &cfg), 0, "%s", error_message());
	cr_expect_eq(cfg.rot_dim, 12, "rotary_dim alone, as released");
	cr_assert_eq(parse_with("minimax_m2", "rotary_dim", NULL, &cfg), 0, "%s", error_message());
	cr_expect_eq(cfg.rot_dim, 12, "partial_rotary_factor alone, as transformers reads it");
	cr_assert_eq(parse_with("minimax_m2", "partial_rotary_factor", "1.0", &cfg), -EINVAL);
	expect_refused("minimax_m2", "partial_rotary_factor", "0.25", "rotary_dim 12 disagrees");
	expect_refused("minimax_m2", "intermediate_size", NULL, "intermediate_size");
	expect_refused("minimax_m2", "num_experts_per_tok", "9", "num_experts_per_tok");
	/* rotary_dim alone must name whole pairs. */
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/hf/minimax_m2/config.json", tu_fixtures());
	char *text = tu_read(path, NULL);
	cr_assert_not_null(text);
	cJSON *j = cJSON_Parse(text);
	cJSON_DeleteItemFromObjectCaseSensitive(j, "partial_rotary_factor");
	cJSON_ReplaceItemInObjectCaseSensitive(j, "rotary_dim", cJSON_CreateNumber(11));
	char *odd = cJSON_PrintUnformatted(j);
	cr_expect_eq(parse_text_with(odd, NULL, NULL, &cfg), -EINVAL, "rotary_dim 11 accepted");
	cr_expect(strstr(error_message(), "11 rotary dims"), "%s", error_message());
	free(odd);
	cJSON_Delete(j);
	free(text);
}

/* gpt-oss: sinks, biases on q/k/v/o, sliding / full layers, YaRN without
 * truncation, the biased top-k router and the clamped GLU, with
 * GptOssConfig's defaults where config.json is silent. */
Test(config, gpt_oss_rows)
{
	struct model_config cfg;
	cr_assert_eq(parse_with("gpt_oss_mxfp4", NULL, NULL, &cfg), 0, "%s", error_message());
	cr_expect_eq(cfg.arch, MODEL_ARCH_GPT_OSS);
	cr_expect_eq(cfg.head_dim, 64, "head_dim is the config's, not hidden / heads (32)");
	cr_expect_eq(cfg.rot_dim, 64);
	cr_expect_eq(cfg.rope_interleave, 0);
	cr_expect(cfg.attn_bias && cfg.attn_o_bias && cfg.attn_sinks && cfg.expert_bias);
	cr_expect_eq(cfg.router, ROUTER_TOPK_SOFTMAX);
	cr_expect_eq(cfg.expert_naming, EXPERT_NAMING_GPT_OSS);
	cr_expect_eq(cfg.swiglu_limit, 7.0f);
	cr_expect_eq(cfg.glu_alpha, 1.702f);
	cr_expect_eq(cfg.sliding_window, 8);
	for (int l = 0; l < cfg.n_layers; l++) {
		cr_expect_eq(cfg.full_attention[l], l % 2 == 1, "layer %d", l);
		cr_expect(model_config_layer_moe(&cfg, l), "layer %d", l);
	}
	cr_expect(cfg.yarn && !cfg.yarn_truncate);
	cr_expect_eq(cfg.yarn_factor, 32.0f);
	cr_expect_eq(cfg.yarn_original_max, 4096);
	cr_expect_float_eq(cfg.rope_attn_factor, 0.1f * logf(32.0f) + 1.0f, 1e-6f);
	cr_expect_float_eq(cfg.attn_scale, 0.125f, 1e-7f);
	cr_expect_eq(cfg.rope_theta, 150000.0f);
	/* GptOssConfig's defaults: the released YaRN, sliding on even layers. */
	struct model_config d;
	cr_assert_eq(parse_with("gpt_oss_mxfp4", "rope_scaling", NULL, &d), 0, "%s", error_message());
	cr_expect(d.yarn && !d.yarn_truncate && d.yarn_factor == 32.0f && d.yarn_original_max == 4096);
	cr_assert_eq(parse_with("gpt_oss_mxfp4", "layer_types", NULL, &d), 0, "%s", error_message());
	cr_expect(!d.full_attention[0] && d.full_attention[1] && !d.full_attention[2] && d.full_attention[3]);
	cr_assert_eq(parse_with("gpt_oss_mxfp4", "head_dim", "null", &d), 0, "%s", error_message());
	cr_expect_eq(d.head_dim, 32, "null head_dim: hidden / heads");
	cr_assert_eq(parse_with("gpt_oss_mxfp4", "layer_types",
				"[\"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\"]", &d), 0,
		     "%s", error_message());
	cr_expect(d.full_attention[0] && d.full_attention[2]);
	cr_assert_eq(parse_with("gpt_oss_mxfp4", "rope_scaling",
				"{\"rope_type\": \"yarn\", \"factor\": 32.0, \"original_max_position_embeddings\": 4096}",
				&d), 0, "%s", error_message());
	cr_expect(d.yarn_truncate, "truncate defaults to true when the set does not say");
	expect_refused("gpt_oss_mxfp4", "swiglu_limit", "8.0", "hard-codes 7");
	expect_refused("gpt_oss_mxfp4", "experts_per_token", "3", "disagrees");
	expect_refused("gpt_oss_mxfp4", "sliding_window", "null", "sliding_window is null");
	expect_refused("gpt_oss_mxfp4", "layer_types", "[\"sliding_attention\"]", "layer_types");
	expect_refused("gpt_oss_mxfp4", "layer_types",
		       "[\"sliding_attention\", \"linear_attention\", \"full_attention\", \"full_attention\"]",
		       "layer_types[1]");
	expect_refused("gpt_oss_mxfp4", "partial_rotary_factor", "0.5", "partial_rotary_factor");
}

/* An Inkling config: fields (a JSON object's members, or "") in
 * text_config of an inkling_mm_model, or flat in an inkling_text. */
static int ink_parse(bool nested, const char *fields, struct model_config *cfg)
{
	char text[4096];
	if (nested)
		snprintf(text, sizeof text, "{\"model_type\": \"inkling_mm_model\", \"text_config\": {%s}}", fields);
	else
		snprintf(text, sizeof text, "{\"model_type\": \"inkling_text\"%s%s}", *fields ? ", " : "", fields);
	return parse_text_with(text, NULL, NULL, cfg);
}

static void ink_expect_refused(const char *fields, const char *what)
{
	for (int nested = 0; nested < 2; nested++) {
		struct model_config cfg;
		int rc = ink_parse(nested, fields, &cfg);
		cr_expect_neq(rc, 0, "%s accepted", fields);
		const char *msg = error_message();
		cr_expect(strstr(msg, "config.json") && strstr(msg, what), "%s: message \"%s\" lacks \"%s\"", fields, msg,
			  what);
	}
}

Test(config, inkling_fixture_rows)
{
	struct model_config c;
	cr_assert_eq(parse_with("inkling_f32", NULL, NULL, &c), 0, "%s", error_message());
	cr_expect_eq(c.arch, MODEL_ARCH_INKLING);
	cr_expect_str_eq(c.model_type, "inkling_mm_model");
	cr_expect(c.n_layers == 4 && c.hidden == 128 && c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 32);
	cr_expect(c.swa_n_heads == 8 && c.swa_n_kv_heads == 4 && c.swa_head_dim == 16);
	cr_expect_eq(c.sliding_window, 5);
	cr_expect(c.d_rel == 4 && c.rel_extent == 7 && c.log_n_floor == 4);
	cr_expect_float_eq(c.log_alpha, 0.3f, 1e-7f);
	cr_expect_eq(c.sconv_kernel, 4, "sconv_kernel_size is conv_kernel_size's alias");
	cr_expect_eq(c.max_positions, 4096, "model_max_length is max_position_embeddings' alias");
	cr_expect(c.vocab == 512 && c.vocab_stored == 520, "vocab %d stored %d", c.vocab, c.vocab_stored);
	cr_expect_eq(c.intermediate, 128, "dense_intermediate_size replaces intermediate_size");
	cr_expect(c.moe_intermediate == 64 && c.n_experts == 8 && c.top_k == 2 && c.n_shared_experts == 2);
	cr_expect_eq(c.shared_intermediate, 128);
	cr_expect_float_eq(c.routed_scaling, 2.5f, 1e-7f);
	cr_expect_float_eq(c.logit_divisor, 4.0f, 1e-7f);
	cr_expect(c.embed_norm && c.global_scale && c.router_bias && !c.tie_embeddings);
	cr_expect(c.router == ROUTER_SIGMOID_SHARED && c.qk_norm == QK_NORM_HEAD && c.expert_naming == EXPERT_NAMING_MLP);
	cr_expect(c.rot_dim == 0 && c.n_mtp_layers == 0, "no RoPE, the MTP module not run");
	cr_expect(c.bos_id == 1 && c.n_eos == 1 && c.eos_ids[0] == 2);
	for (int l = 0; l < 4; l++) {
		cr_expect_eq(c.full_attention[l], l % 2 == 1, "layer %d", l);
		cr_expect_eq(c.rows[l].mixer, MIXER_REL, "layer %d", l);
		cr_expect_eq(c.rows[l].residual, RESIDUAL_SCONV, "layer %d", l);
		cr_expect_eq(c.rows[l].ffn, l == 0 ? FFN_DENSE : FFN_MOE_SHARED, "layer %d (dense_mlp_idx 1)", l);
	}
	cr_expect(model_config_has_mixer(&c, MIXER_REL) && !model_config_mla(&c));
}

Test(config, inkling_defaults)
{
	/* InklingTextConfig's defaults, nested (an empty text_config, or none)
	 * or flat. */
	for (int nested = 0; nested < 3; nested++) {
		struct model_config c;
		int rc = nested == 2 ? parse_text_with("{\"model_type\": \"inkling_mm_model\"}", NULL, NULL, &c)
				     : ink_parse(nested, "", &c);
		cr_assert_eq(rc, 0, "%s", error_message());
		cr_expect(c.n_layers == 66 && c.hidden == 6144 && c.n_heads == 64 && c.n_kv_heads == 8 &&
			  c.head_dim == 128 && c.vocab == 201024 && c.vocab_stored == 0, "case %d", nested);
		cr_expect(c.max_positions == 131072 && c.rms_eps == 1e-6f);
		cr_expect(c.swa_n_heads == 64 && c.swa_n_kv_heads == 16 && c.swa_head_dim == 128);
		cr_expect(c.sliding_window == 512 && c.d_rel == 16 && c.rel_extent == 1024 && c.log_n_floor == 0);
		cr_expect_float_eq(c.log_alpha, 0.1f, 1e-7f);
		cr_expect(c.sconv_kernel == 4 && c.intermediate == 24576 && c.moe_intermediate == 3072);
		cr_expect(c.n_experts == 256 && c.top_k == 6 && c.n_shared_experts == 2 && c.shared_intermediate == 6144);
		cr_expect(c.routed_scaling == 8.0f && c.logit_divisor == 24.0f);
		cr_expect(c.bos_id == 1 && c.n_eos == 1 && c.eos_ids[0] == 2);
		/* Every sixth layer global; every layer sparse (dense_mlp_idx 0). */
		for (int l = 0; l < 66; l++) {
			cr_expect_eq(c.full_attention[l], (l + 1) % 6 == 0, "layer %d", l);
			cr_expect_eq(c.rows[l].ffn, FFN_MOE_SHARED, "layer %d", l);
		}
	}
}

Test(config, inkling_aliases_and_layer_types)
{
	struct model_config c;
	cr_assert_eq(ink_parse(true, "\"num_hidden_layers\": 8, \"sliding_window\": 64, \"num_local_experts\": 16, "
			       "\"num_experts_per_tok\": 4, \"sconv_kernel_size\": 3, \"embedding_multiplier\": 2.0, "
			       "\"model_max_length\": 1000, \"local_layer_ids\": [0, 2, 5], \"dense_mlp_idx\": 3, "
			       "\"intermediate_size\": 40, \"rope_theta\": 10000.0, "
			       "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", &c), 0, "%s",
		     error_message());
	cr_expect(c.sliding_window == 64 && c.n_experts == 16 && c.sconv_kernel == 3 && c.logit_divisor == 2.0f &&
		  c.max_positions == 1000 && c.intermediate == 40);
	cr_expect(c.rot_dim == 0 && !c.yarn, "rope fields are ignored, as transformers ignores them");
	static const bool global[8] = { false, true, false, true, true, false, true, true };
	for (int l = 0; l < 8; l++) {
		cr_expect_eq(c.full_attention[l], global[l], "layer %d (local_layer_ids)", l);
		cr_expect_eq(c.rows[l].ffn, l < 3 ? FFN_DENSE : FFN_MOE_SHARED, "layer %d", l);
	}
	/* Explicit layer_types and mlp_layer_types win over the derived ones. */
	cr_assert_eq(ink_parse(false, "\"num_hidden_layers\": 3, \"local_layer_ids\": [0, 1, 2], \"dense_mlp_idx\": 3, "
			       "\"layer_types\": [\"hybrid\", \"hybrid_sliding\", \"hybrid\"], "
			       "\"mlp_layer_types\": [\"sparse\", \"dense\", \"sparse\"]", &c), 0, "%s", error_message());
	cr_expect(c.full_attention[0] && !c.full_attention[1] && c.full_attention[2]);
	cr_expect(c.rows[0].ffn == FFN_MOE_SHARED && c.rows[1].ffn == FFN_DENSE && c.rows[2].ffn == FFN_MOE_SHARED);
	/* The same value under both names is fine. */
	cr_expect_eq(ink_parse(true, "\"sliding_window\": 64, \"sliding_window_size\": 64", &c), 0, "%s",
		     error_message());
	/* Token ids from the top when text_config lacks them. */
	cr_assert_eq(parse_text_with("{\"model_type\": \"inkling_mm_model\", \"eos_token_id\": [7, 9], "
				     "\"text_config\": {\"vocab_size\": 100}}", NULL, NULL, &c), 0, "%s", error_message());
	cr_expect(c.n_eos == 2 && c.eos_ids[0] == 7 && c.eos_ids[1] == 9);
}

Test(config, inkling_bad_values_refused)
{
	ink_expect_refused("\"hidden_act\": \"gelu\"", "hidden_act");
	ink_expect_refused("\"num_attention_heads\": 6, \"num_key_value_heads\": 4", "num_key_value_heads");
	ink_expect_refused("\"swa_num_attention_heads\": 6, \"swa_num_key_value_heads\": 4", "swa_num_key_value_heads");
	ink_expect_refused("\"swa_num_attention_heads\": 4, \"swa_num_key_value_heads\": 8", "swa_num_key_value_heads");
	ink_expect_refused("\"vocab_size\": 100, \"unpadded_vocab_size\": 101", "unpadded_vocab_size");
	ink_expect_refused("\"vocab_size\": 100, \"unpadded_vocab_size\": 50, \"eos_token_id\": 60", "eos_token_id");
	ink_expect_refused("\"d_rel\": 0", "d_rel");
	ink_expect_refused("\"rel_extent\": 0", "rel_extent");
	ink_expect_refused("\"conv_kernel_size\": 0", "conv_kernel_size");
	ink_expect_refused("\"sconv_kernel_size\": 0", "sconv_kernel_size");
	ink_expect_refused("\"sliding_window_size\": 0", "sliding_window_size");
	ink_expect_refused("\"sliding_window\": 64, \"sliding_window_size\": 32", "disagree");
	ink_expect_refused("\"n_shared_experts\": 0", "n_shared_experts");
	ink_expect_refused("\"n_routed_experts\": 4, \"num_experts_per_tok\": 5", "num_experts_per_tok");
	ink_expect_refused("\"route_scale\": 0", "route_scale");
	ink_expect_refused("\"logits_mup_width_multiplier\": 0", "logits_mup_width_multiplier");
	ink_expect_refused("\"log_scaling_n_floor\": 0", "log_scaling_n_floor");
	ink_expect_refused("\"num_hidden_layers\": 2, \"layer_types\": [\"hybrid\"]", "layer_types");
	ink_expect_refused("\"num_hidden_layers\": 2, \"layer_types\": [\"hybrid\", \"full_attention\"]",
			   "layer_types[1]");
	ink_expect_refused("\"num_hidden_layers\": 2, \"mlp_layer_types\": [\"dense\", \"moe\"]", "mlp_layer_types[1]");
	ink_expect_refused("\"num_hidden_layers\": 2, \"local_layer_ids\": [0, 2]", "local_layer_ids[1]");
	ink_expect_refused("\"num_hidden_layers\": 2, \"dense_mlp_idx\": 3", "dense_mlp_idx");
	struct model_config c;
	cr_expect_neq(parse_text_with("{\"model_type\": \"inkling_mm_model\", \"text_config\": 3}", NULL, NULL, &c), 0);
	cr_expect(strstr(error_message(), "text_config"), "%s", error_message());
}
