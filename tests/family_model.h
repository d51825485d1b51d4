/*
 * family_model — a container of each supported family's tiny fixture with
 * a tokenizer and the family's chat template, so that `colibri serve` and
 * `colibri chat` can be driven on every family, not only on qwen3_moe_tok.
 *
 * The fixtures have 512-token vocabularies, so the tokenizer is made to
 * fit: a byte-level BPE in Hugging Face's tokenizer.json format (the
 * pre-tokenizer, decoder and post-processor of Qwen3's) with the 256 bytes
 * as ids 0..255, merges of lower-case letter pairs as ids 256..479, and the
 * special tokens of every family's chat format from id 480. The chat
 * template is the family's released one from tests/chat_templates, or
 * none for DeepSeek-V3.2, DeepSeek-V4 and GLM-5, whose checkpoints ship none (colibri's
 * built-in template for them is used, as on a real checkpoint).
 *
 * family_model(ws, family, out) converts fixtures/hf/<family> with that
 * tokenizer, the real `colibri convert` path, once per build (the
 * container cache of tests/fixture_cache.h), and links it as ws/<family>.
 */
#ifndef COLIBRI_TESTS_FAMILY_MODEL_H
#define COLIBRI_TESTS_FAMILY_MODEL_H

#include <cjson/cJSON.h>
#include <dirent.h>

#include "tests/fixture_cache.h"
#include "tests/test_util.h"

struct family_chat {
	const char *family;	/* fixture and model_type */
	const char *tmpl;	/* tests/chat_templates file, or NULL */
	const char *bos, *eos;	/* token strings, NULL for none */
};

static const struct family_chat family_chats[] = {
	{ "olmoe", "olmoe.jinja", NULL, "<|endoftext|>" },
	{ "mixtral", "mixtral.jinja", "<s>", "</s>" },
	{ "deepseek_v3", "deepseek-v3.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>" },
	{ "deepseek_v32", NULL, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>" },
	{ "deepseek_v4", NULL, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>" },
	{ "glm4_moe", "glm-4.6.jinja", NULL, "<|endoftext|>" },
	{ "glm_moe_dsa", NULL, NULL, "<|endoftext|>" },
	{ "qwen3_5_moe", "qwen3.5.jinja", NULL, "<|im_end|>" },
	{ "qwen3_next", "qwen3.jinja", NULL, "<|im_end|>" },
	{ "gpt_oss_mxfp4", "gpt-oss.jinja", NULL, "<|return|>" },
};
#define FAMILY_CHATS (sizeof family_chats / sizeof family_chats[0])

static const char *const family_specials[] = {
	"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
	"<tool_response>", "</tool_response>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
	"<｜Assistant｜>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<s>",
	"</s>", "[INST]", "[/INST]", "｜DSML｜", "<｜latest_reminder｜>", "<|start|>", "<|channel|>", "<|message|>",
	"<|end|>", "<|return|>", "<|call|>", "<|constrain|>",
};

/* GPT-2's byte-level alphabet: the character byte b stands for, UTF-8. */
static inline void family_byte_char(int b, char out[3])
{
	int cp = b;
	if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))) {
		int n = 0;
		for (int i = 0; i < b; i++)
			n += !((i >= 0x21 && i <= 0x7e) || (i >= 0xa1 && i <= 0xac) || (i >= 0xae && i <= 0xff));
		cp = 256 + n;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = 0;
	} else {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		out[2] = 0;
	}
}

/* Writes the tokenizer.json described above into path. */
static inline void family_tokenizer_write(const char *path)
{
	cJSON *t = cJSON_CreateObject(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
	cJSON *merges = cJSON_CreateArray(), *added = cJSON_CreateArray();
	int id = 0;
	for (int b = 0; b < 256; b++, id++) {
		char c[3];
		family_byte_char(b, c);
		cJSON_AddNumberToObject(vocab, c, id);
	}
	for (char a = 'a'; a <= 'z' && id < 480; a++)
		for (char b = 'a'; b <= 'z' && id < 480; b++, id++) {
			char pair[3] = { a, b, 0 }, l[2] = { a, 0 }, r[2] = { b, 0 };
			cJSON_AddNumberToObject(vocab, pair, id);
			cJSON *m = cJSON_CreateArray();
			cJSON_AddItemToArray(m, cJSON_CreateString(l));
			cJSON_AddItemToArray(m, cJSON_CreateString(r));
			cJSON_AddItemToArray(merges, m);
		}
	id = 480;
	for (size_t i = 0; i < sizeof family_specials / sizeof family_specials[0]; i++, id++) {
		cJSON *a = cJSON_CreateObject();
		cJSON_AddNumberToObject(a, "id", id);
		cJSON_AddStringToObject(a, "content", family_specials[i]);
		cJSON_AddFalseToObject(a, "single_word");
		cJSON_AddFalseToObject(a, "lstrip");
		cJSON_AddFalseToObject(a, "rstrip");
		cJSON_AddFalseToObject(a, "normalized");
		cJSON_AddTrueToObject(a, "special");
		cJSON_AddItemToArray(added, a);
		cJSON_AddNumberToObject(vocab, family_specials[i], id);
	}
	cJSON_AddStringToObject(t, "version", "1.0");
	cJSON_AddItemToObject(t, "added_tokens", added);
	cJSON_AddNullToObject(t, "normalizer");
	cJSON *split = cJSON_Parse(
		"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
		"\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
		"[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
		"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}]}");
	cJSON_AddItemToObject(t, "pre_tokenizer", split);
	const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}";
	cJSON_AddItemToObject(t, "post_processor", cJSON_Parse(bl));
	cJSON_AddItemToObject(t, "decoder", cJSON_Parse(bl));
	cJSON_AddStringToObject(model, "type", "BPE");
	cJSON_AddNullToObject(model, "dropout");
	cJSON_AddNullToObject(model, "unk_token");
	cJSON_AddFalseToObject(model, "byte_fallback");
	cJSON_AddFalseToObject(model, "ignore_merges");
	cJSON_AddItemToObject(model, "vocab", vocab);
	cJSON_AddItemToObject(model, "merges", merges);
	cJSON_AddItemToObject(t, "model", model);
	char *text = cJSON_Print(t);
	cr_assert(text && tu_write(path, text, strlen(text)) == 0, "cannot write %s", path);
	free(text);
	cJSON_Delete(t);
}

/* tokenizer_config.json of fc into path: its bos/eos and chat template. */
static inline void family_tokenizer_config_write(const char *path, const struct family_chat *fc)
{
	cJSON *c = cJSON_CreateObject();
	cJSON_AddFalseToObject(c, "add_bos_token");
	if (fc->bos)
		cJSON_AddStringToObject(c, "bos_token", fc->bos);
	else
		cJSON_AddNullToObject(c, "bos_token");
	cJSON_AddStringToObject(c, "eos_token", fc->eos);
	if (fc->tmpl) {
		char p[PATH_MAX];
		snprintf(p, sizeof p, "%s/tests/chat_templates/%s", tu_repo(), fc->tmpl);
		char *tmpl = tu_read(p, NULL);
		cr_assert(tmpl, "%s is missing", p);
		cJSON_AddStringToObject(c, "chat_template", tmpl);
		free(tmpl);
	}
	char *text = cJSON_Print(c);
	cr_assert(text && tu_write(path, text, strlen(text)) == 0, "cannot write %s", path);
	free(text);
	cJSON_Delete(c);
}

/* The checkpoint of fc's family: fixtures/hf/<family> linked file by file
 * with the tiny tokenizer and fc's template, made in ws/hf-<family>, and
 * published once per build into the container cache (tests/fixture_cache.h)
 * as family-<family>-<hash of the two files made here>, so that a changed
 * tokenizer or template is another checkpoint. Made under an exclusive
 * flock and published by rename: absent or whole. out gets its path. */
static inline void family_checkpoint(const char *ws, const struct family_chat *fc, char *out, size_t n)
{
	char src[PATH_MAX], hf[PATH_MAX + 64], p[PATH_MAX + 128];
	snprintf(src, sizeof src, "%s/hf/%s", tu_fixtures(), fc->family);
	snprintf(hf, sizeof hf, "%s/hf-%s", ws, fc->family);
	cr_assert_eq(mkdir(hf, 0755), 0, "%s: %s", hf, strerror(errno));
	DIR *d = opendir(src);
	cr_assert(d, "fixture %s is missing", src);
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.' || !strncmp(e->d_name, "tokenizer", 9))
			continue;
		char from[PATH_MAX + 256];
		snprintf(from, sizeof from, "%s/%s", src, e->d_name);
		snprintf(p, sizeof p, "%s/%s", hf, e->d_name);
		cr_assert_eq(symlink(from, p), 0, "%s: %s", p, strerror(errno));
	}
	closedir(d);
	snprintf(p, sizeof p, "%s/tokenizer.json", hf);
	family_tokenizer_write(p);
	char *tok = tu_read(p, NULL);
	snprintf(p, sizeof p, "%s/tokenizer_config.json", hf);
	family_tokenizer_config_write(p, fc);
	char *cfg = tu_read(p, NULL);
	cr_assert(tok && cfg, "cannot read back the tokenizer files in %s", hf);
	uint64_t h = fc_fnv1a(fc_fnv1a(fc_fnv1a(0xcbf29ce484222325ull, fc->family), tok), cfg);
	free(tok);
	free(cfg);

	char dir[PATH_MAX];
	fc_dir(dir, sizeof dir);
	cr_assert_eq(tu_sh("mkdir -p '%s'", dir), 0, "cannot make the container cache %s", dir);
	snprintf(out, n, "%s/family-%s-%016llx", dir, fc->family, (unsigned long long)h);
	snprintf(p, sizeof p, "%s/config.json", out);
	int fd = fc_lock(out);
	int rc = access(p, F_OK) == 0 ? 0
		 : tu_sh("rm -rf '%s' '%s.tmp' && cp -RP '%s' '%s.tmp' && mv '%s.tmp' '%s'", out, out, hf, out, out, out);
	close(fd);
	cr_assert_eq(rc, 0, "cannot publish %s as %s", hf, out);
}

/* ws/<family>: fc's family checkpoint (family_checkpoint) converted with
 * convert's defaults, the build's shared container, reached through the
 * link ws/<family>, whose name is the model id serve gives. The commands
 * run on it only read it (sessions go to their cache folders; usage.json
 * may change what they pin, never their output). out gets the link. */
static inline void family_model(const char *ws, const struct family_chat *fc, char *out, size_t n)
{
	char hf[PATH_MAX], cached[PATH_MAX];
	family_checkpoint(ws, fc, hf, sizeof hf);
	fc_container(cached, sizeof cached, hf, "");
	snprintf(out, n, "%s/%s", ws, fc->family);
	cr_assert_eq(symlink(cached, out), 0, "cannot link %s to %s: %s", out, cached, strerror(errno));
}

#endif
