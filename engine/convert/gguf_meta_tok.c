/*
 * gguf_meta_tok — tokenizer.json and tokenizer_config.json from a GGUF's
 * tokenizer.ggml.* keys, in the shape the model's real Hugging Face files
 * have, so that engine/text/tokenizer*.c runs them unchanged.
 *
 * "gpt2" (byte-level BPE): the vocabulary is the token list less the
 * converter's "[PADn]" fillers at id n (token type UNUSED, USER_DEFINED in
 * files from older converters; no HF tokenizer has them) and the added tokens;
 * control tokens (type 3) become special added tokens, user-defined ones
 * (type 4) plain added tokens; merges as the file lists them (each "a b"
 * naming two tokens whose concatenation is a token); the pre-tokenizer the
 * one the model's tokenizer.json has for tokenizer.ggml.pre, written with
 * the original regexes (llama.cpp runs adapted copies of them). Unknown
 * pre names are refused: a wrong regex tokenizes silently differently.
 *
 * "llama" (SentencePiece, Mixtral's): BPE with byte fallback as HF's
 * LlamaConverter writes it: every piece in the vocabulary, merges generated
 * from the scores as transformers' generate_merges does (every split of a
 * piece into two pieces, ordered by the merged piece's score, then the
 * lengths of the parts, longest first, the file's order breaking ties),
 * the "▁" Prepend / Replace normalizer and the Replace, ByteFallback, Fuse,
 * Strip decoder.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/convert/gguf.h"
#include "engine/convert/gguf_meta.h"

/* llama_token_type as the converter writes it. */
enum {
	TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6,
};

struct tok {
	const struct gguf_set *set;
	const char *path;
	const struct gguf_kv *tokens;	/* tokenizer.ggml.tokens */
	uint32_t n;
	int32_t *type;			/* [n] */
	bool *skip;			/* [n]: a "[PADi]" filler, in no document */
	bool *in_vocab;			/* [n]: goes into model.vocab */
	/* Open-addressed map from token text to id: [n_slots], -1 empty. */
	int32_t *slots;
	size_t n_slots;
};

static uint64_t str_hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

static int32_t map_get(const struct tok *t, const char *s, size_t n)
{
	size_t mask = t->n_slots - 1;
	for (size_t i = str_hash(s, n) & mask;; i = (i + 1) & mask) {
		int32_t id = t->slots[i];
		if (id < 0)
			return -1;
		if (t->tokens->lens[id] == n && memcmp(t->tokens->strs[id], s, n) == 0)
			return id;
	}
}

/* Length of the valid UTF-8 prefix of s[n]. */
static size_t utf8_valid(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t i = 0;
	while (i < n) {
		uint8_t c = p[i];
		size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
		if (k == 0 || i + k > n || c == 0)
			return i;
		uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
		for (size_t j = 1; j < k; j++) {
			if ((p[i + j] & 0xC0) != 0x80)
				return i;
			cp = cp << 6 | (p[i + j] & 0x3F);
		}
		if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return i;
		i += k;
	}
	return i;
}

static bool is_pad_filler(const char *s, size_t n, uint32_t id)
{
	char want[32];
	int w = snprintf(want, sizeof want, "[PAD%u]", id);
	return (size_t)w == n && memcmp(s, want, n) == 0;
}

static void tok_free(struct tok *t)
{
	free(t->type);
	free(t->skip);
	free(t->in_vocab);
	free(t->slots);
}

/* Reads tokens and token_type, checks every token, builds the map. */
static int tok_init(struct tok *t)
{
	int rc = gguf_get_arr(t->set, "tokenizer.ggml.tokens", GGUF_VT_STRING, &t->tokens);
	if (rc == -ENOENT)
		return error_set(EINVAL, "%s: missing key tokenizer.ggml.tokens", t->path);
	if (rc)
		return rc;
	if (t->tokens->n == 0 || t->tokens->n > (1u << 24))
		return error_set(EINVAL, "%s: tokenizer.ggml.tokens holds %llu tokens (1 to 16M expected)", t->path,
				 (unsigned long long)t->tokens->n);
	t->n = (uint32_t)t->tokens->n;
	const struct gguf_kv *types = NULL;
	rc = gguf_get_arr(t->set, "tokenizer.ggml.token_type", GGUF_VT_I32, &types);
	if (rc && rc != -ENOENT)
		return rc;
	if (types && types->n != t->n)
		return error_set(EINVAL, "%s: tokenizer.ggml.token_type has %llu entries for %u tokens", t->path,
				 (unsigned long long)types->n, t->n);
	for (t->n_slots = 16; t->n_slots < 2 * (size_t)t->n; t->n_slots *= 2)
		;
	t->type = malloc(t->n * sizeof *t->type);
	t->skip = calloc(t->n, sizeof *t->skip);
	t->in_vocab = calloc(t->n, sizeof *t->in_vocab);
	t->slots = malloc(t->n_slots * sizeof *t->slots);
	if (!t->type || !t->skip || !t->in_vocab || !t->slots)
		return error_set(ENOMEM, "%s: out of memory reading the tokenizer", t->path);
	memset(t->slots, 0xff, t->n_slots * sizeof *t->slots);
	for (uint32_t i = 0; i < t->n; i++) {
		const char *s = t->tokens->strs[i];
		size_t len = t->tokens->lens[i];
		int64_t ty = types ? gguf_arr_i64(types, i) : TT_NORMAL;
		if (ty < TT_NORMAL || ty > TT_BYTE)
			return error_set(EINVAL, "%s: tokenizer.ggml.token_type[%u] is %lld, not a token type (1-6)",
					 t->path, i, (long long)ty);
		t->type[i] = (int32_t)ty;
		if (len == 0 || utf8_valid(s, len) != len)
			return error_set(EINVAL, "%s: tokenizer.ggml.tokens[%u] is %s", t->path, i,
					 len ? "not valid UTF-8 (or holds a NUL)" : "empty");
		if ((ty == TT_UNUSED || ty == TT_USER_DEFINED) && is_pad_filler(s, len, i)) {
			t->skip[i] = true;
			continue;
		}
		size_t mask = t->n_slots - 1, j = str_hash(s, len) & mask;
		for (; t->slots[j] >= 0; j = (j + 1) & mask) {
			int32_t o = t->slots[j];
			if (t->tokens->lens[o] == len && memcmp(t->tokens->strs[o], s, len) == 0)
				return error_set(EINVAL, "%s: tokenizer.ggml.tokens[%u] \"%s\" repeats token %d", t->path, i,
						 s, o);
		}
		t->slots[j] = (int32_t)i;
	}
	return 0;
}

/* An id key (bos, eos, ...): -1 when absent. */
static int token_id(const struct tok *t, const char *key, int32_t *id)
{
	uint32_t v;
	*id = -1;
	int rc = gguf_get_u32(t->set, key, &v);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	if (v >= t->n)
		return error_set(EINVAL, "%s: %s %u is outside the %u tokens", t->path, key, v, t->n);
	*id = (int32_t)v;
	return 0;
}

static cJSON *obj_type(const char *type)
{
	cJSON *o = cJSON_CreateObject();
	if (o)
		cJSON_AddStringToObject(o, "type", type);
	return o;
}

static cJSON *byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex)
{
	cJSON *o = obj_type("ByteLevel");
	if (o) {
		cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
		cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
		cJSON_AddBoolToObject(o, "use_regex", use_regex);
	}
	return o;
}

static cJSON *split_regex(const char *re)
{
	cJSON *o = obj_type("Split");
	if (o) {
		cJSON *p = cJSON_AddObjectToObject(o, "pattern");
		if (p)
			cJSON_AddStringToObject(p, "Regex", re);
		cJSON_AddStringToObject(o, "behavior", "Isolated");
		cJSON_AddBoolToObject(o, "invert", false);
	}
	return o;
}

/* The regexes of the models' tokenizer.json files (llama-vocab.cpp gives
 * adapted copies and the original in a comment). */
#define RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
		 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
		  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_O200K "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
		 "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+" \
		 "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" \
		 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_DSV3_MAIN "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|" \
		     " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

/* One tokenizer.ggml.pre: its names, the Split regexes before ByteLevel
 * (none: ByteLevel's own GPT-2 regex), and the flags the real files and
 * llama.cpp's loader give it. */
struct pre_def {
	const char *names[4];
	const char *regex[4];
	bool nfc;		/* NFC normalizer (Qwen) */
	bool trim_offsets;	/* of the ByteLevel step (offsets only; as the real file) */
	bool ignore_merges;	/* a piece in the vocabulary is one token (Llama 3) */
	bool add_bos;		/* llama.cpp's add_bos default for it */
	bool clean_spaces;	/* llama.cpp's clean_spaces (clean_up_tokenization_spaces) */
};

static const struct pre_def pre_defs[] = {
	{ { "qwen2", "deepseek-r1-qwen", "megrez" }, { RE_QWEN2 }, true, false, false, false, false },
	{ { "deepseek-v3" }, { "\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", RE_DSV3_MAIN },
	  false, true, false, false, false },
	{ { "llama-bpe", "llama3", "llama-v3" }, { RE_LLAMA3 }, false, true, true, true, true },
	{ { "gpt-4o", "llama4" }, { RE_O200K }, false, true, false, false, false },
	{ { "glm4", "chatglm-bpe" }, { RE_LLAMA3 }, false, true, false, false, true },
	{ { "gpt-2", "olmo" }, { NULL }, false, true, false, false, true },
	/* llama.cpp's fallback set, four regexes applied in turn (as a
	 * Sequence of Isolated splits does). */
	{ { "default" },
	  { "[\\p{P}\\$\\+<=>\\^~\\|]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	    "\\p{N}+", "[0-9][0-9][0-9]" },
	  false, true, false, false, true },
};

static const struct pre_def *pre_find(const char *name)
{
	for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++)
		for (size_t j = 0; j < 4 && pre_defs[i].names[j]; j++)
			if (!strcmp(pre_defs[i].names[j], name))
				return &pre_defs[i];
	return NULL;
}

static cJSON *pre_tokenizer(const struct pre_def *p)
{
	if (!p->regex[0])
		return byte_level(false, true, true);
	cJSON *seq = obj_type("Sequence");
	cJSON *list = seq ? cJSON_AddArrayToObject(seq, "pretokenizers") : NULL;
	if (!list) {
		cJSON_Delete(seq);
		return NULL;
	}
	for (size_t i = 0; i < 4 && p->regex[i]; i++)
		cJSON_AddItemToArray(list, split_regex(p->regex[i]));
	cJSON_AddItemToArray(list, byte_level(false, p->trim_offsets, false));
	return seq;
}

/* Adds tokens[i] to an object under its text. */
static void vocab_put(const struct tok *t, cJSON *vocab, uint32_t i)
{
	cJSON_AddItemToObject(vocab, t->tokens->strs[i], cJSON_CreateNumber(i));
}

static cJSON *added_token(const struct tok *t, uint32_t i, bool special)
{
	cJSON *a = cJSON_CreateObject();
	if (!a)
		return NULL;
	cJSON_AddNumberToObject(a, "id", i);
	cJSON_AddStringToObject(a, "content", t->tokens->strs[i]);
	cJSON_AddBoolToObject(a, "single_word", false);
	cJSON_AddBoolToObject(a, "lstrip", false);
	cJSON_AddBoolToObject(a, "rstrip", false);
	cJSON_AddBoolToObject(a, "normalized", false);
	cJSON_AddBoolToObject(a, "special", special);
	return a;
}

/* The byte-level BPE model's merges: [a, b] pairs checked against the
 * tokens; a merge naming an added token puts that token in the vocabulary
 * too (the loader resolves merges there). */
static int bpe_merges(struct tok *t, cJSON *out)
{
	const struct gguf_kv *mk;
	int rc = gguf_get_arr(t->set, "tokenizer.ggml.merges", GGUF_VT_STRING, &mk);
	if (rc == -ENOENT)
		return error_set(EINVAL, "%s: missing key tokenizer.ggml.merges (a gpt2 tokenizer needs its merges)",
				 t->path);
	if (rc)
		return rc;
	char *cat = NULL;
	size_t cat_cap = 0;
	for (uint64_t i = 0; i < mk->n; i++) {
		const char *s = mk->strs[i];
		size_t len = mk->lens[i];
		/* llama.cpp: the first space after the first byte splits it. */
		const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
		if (!sp || utf8_valid(s, len) != len) {
			free(cat);
			return error_set(EINVAL, "%s: tokenizer.ggml.merges[%llu] is not \"a b\" in UTF-8", t->path,
					 (unsigned long long)i);
		}
		size_t al = (size_t)(sp - s), bl = len - al - 1;
		if (al + bl > cat_cap) {
			free(cat);
			cat_cap = 2 * (al + bl);
			if (!(cat = malloc(cat_cap)))
				return error_set(ENOMEM, "%s: out of memory", t->path);
		}
		memcpy(cat, s, al);
		memcpy(cat + al, sp + 1, bl);
		int32_t a = map_get(t, s, al), b = map_get(t, sp + 1, bl), c = map_get(t, cat, al + bl);
		if (a < 0 || b < 0 || c < 0 || bl == 0) {
			free(cat);
			return error_set(EINVAL, "%s: tokenizer.ggml.merges[%llu] \"%.*s\" names a token not in "
					 "tokenizer.ggml.tokens", t->path, (unsigned long long)i, (int)len, s);
		}
		t->in_vocab[a] = t->in_vocab[b] = t->in_vocab[c] = true;
		cJSON *pair = cJSON_CreateArray();
		if (!pair) {
			free(cat);
			return -ENOMEM;
		}
		cJSON_AddItemToArray(pair, cJSON_CreateString(t->tokens->strs[a]));
		cJSON_AddItemToArray(pair, cJSON_CreateString(t->tokens->strs[b]));
		cJSON_AddItemToArray(out, pair);
	}
	free(cat);
	return 0;
}

struct spm_merge {
	int32_t l, r, piece;	/* ids */
	float score;		/* the merged piece's */
	uint32_t l_chars, r_chars;
	uint64_t seq;		/* order generated, which breaks ties (a stable sort) */
};

static int spm_merge_cmp(const void *pa, const void *pb)
{
	const struct spm_merge *a = pa, *b = pb;
	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	if (a->l_chars != b->l_chars)
		return a->l_chars > b->l_chars ? -1 : 1;
	if (a->r_chars != b->r_chars)
		return a->r_chars > b->r_chars ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int spm_local_cmp(const void *pa, const void *pb)
{
	const struct spm_merge *a = pa, *b = pb;
	if (a->l != b->l)
		return a->l < b->l ? -1 : 1;
	return (a->r > b->r) - (a->r < b->r);
}

static uint32_t utf8_chars(const char *s, size_t n)
{
	uint32_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((uint8_t)s[i] & 0xC0) != 0x80;
	return c;
}

/* transformers' generate_merges over the pieces and their scores. */
static int spm_merges(struct tok *t, const struct gguf_kv *scores, cJSON *out)
{
	struct spm_merge *m = NULL;
	size_t n = 0, cap = 0;
	for (uint32_t i = 0; i < t->n; i++) {
		if (t->skip[i])
			continue;
		const char *s = t->tokens->strs[i];
		size_t len = t->tokens->lens[i], first = n;
		for (size_t k = 1; k < len; k++) {
			if (((uint8_t)s[k] & 0xC0) == 0x80)
				continue;	/* split between characters only */
			int32_t l = map_get(t, s, k), r = map_get(t, s + k, len - k);
			if (l < 0 || r < 0)
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 1024;
				struct spm_merge *p = realloc(m, cap * sizeof *m);
				if (!p) {
					free(m);
					return error_set(ENOMEM, "%s: out of memory", t->path);
				}
				m = p;
			}
			m[n++] = (struct spm_merge){ l, r, (int32_t)i, (float)gguf_arr_f64(scores, i),
						     utf8_chars(s, k), utf8_chars(s + k, len - k), 0 };
		}
		if (n > first)
			qsort(m + first, n - first, sizeof *m, spm_local_cmp);
		for (size_t j = first; j < n; j++)
			m[j].seq = j;
	}
	if (n)
		qsort(m, n, sizeof *m, spm_merge_cmp);
	for (size_t j = 0; j < n; j++) {
		cJSON *pair = cJSON_CreateArray();
		if (!pair) {
			free(m);
			return -ENOMEM;
		}
		cJSON_AddItemToArray(pair, cJSON_CreateString(t->tokens->strs[m[j].l]));
		cJSON_AddItemToArray(pair, cJSON_CreateString(t->tokens->strs[m[j].r]));
		cJSON_AddItemToArray(out, pair);
	}
	free(m);
	return 0;
}

static cJSON *replace_step(const char *from, const char *to)
{
	cJSON *o = obj_type("Replace");
	if (o) {
		cJSON *p = cJSON_AddObjectToObject(o, "pattern");
		if (p)
			cJSON_AddStringToObject(p, "String", from);
		cJSON_AddStringToObject(o, "content", to);
	}
	return o;
}

#define SPM_SPACE "\xe2\x96\x81"	/* U+2581, SentencePiece's space */

/* The Llama/Mixtral tokenizer.json around the BPE model. */
static int spm_components(struct tok *t, cJSON *root, bool add_space_prefix)
{
	cJSON *norm = obj_type("Sequence");
	cJSON *nl = norm ? cJSON_AddArrayToObject(norm, "normalizers") : NULL;
	cJSON *dec = obj_type("Sequence");
	cJSON *dl = dec ? cJSON_AddArrayToObject(dec, "decoders") : NULL;
	if (!nl || !dl) {
		cJSON_Delete(norm);
		cJSON_Delete(dec);
		return error_set(ENOMEM, "%s: out of memory", t->path);
	}
	if (add_space_prefix) {
		cJSON *p = obj_type("Prepend");
		if (p)
			cJSON_AddStringToObject(p, "prepend", SPM_SPACE);
		cJSON_AddItemToArray(nl, p);
	}
	cJSON_AddItemToArray(nl, replace_step(" ", SPM_SPACE));
	cJSON_AddItemToArray(dl, replace_step(SPM_SPACE, " "));
	cJSON_AddItemToArray(dl, obj_type("ByteFallback"));
	cJSON_AddItemToArray(dl, obj_type("Fuse"));
	if (add_space_prefix) {
		cJSON *s = obj_type("Strip");
		if (s) {
			cJSON_AddStringToObject(s, "content", " ");
			cJSON_AddNumberToObject(s, "start", 1);
			cJSON_AddNumberToObject(s, "stop", 0);
		}
		cJSON_AddItemToArray(dl, s);
	}
	cJSON_AddItemToObject(root, "normalizer", norm);
	cJSON_AddNullToObject(root, "pre_tokenizer");
	cJSON_AddNullToObject(root, "post_processor");
	cJSON_AddItemToObject(root, "decoder", dec);
	return 0;
}

static void config_token(cJSON *c, const char *key, const struct tok *t, int32_t id)
{
	if (id >= 0)
		cJSON_AddStringToObject(c, key, t->tokens->strs[id]);
	else
		cJSON_AddNullToObject(c, key);
}

/* chat_template: the default one, or, when the file names more
 * (tokenizer.chat_templates lists NAME, each in tokenizer.chat_template.NAME),
 * the list of {name, template} objects transformers writes for several. */
static int chat_templates(const struct tok *t, cJSON *cfg, const char *tmpl)
{
	const struct gguf_kv *names = NULL;
	int rc = gguf_get_arr(t->set, "tokenizer.chat_templates", GGUF_VT_STRING, &names);
	if (rc == -ENOENT || (!rc && names->n == 0)) {
		cJSON_AddStringToObject(cfg, "chat_template", tmpl);
		return 0;
	}
	if (rc)
		return rc;
	cJSON *list = cJSON_AddArrayToObject(cfg, "chat_template");
	cJSON *d = cJSON_CreateObject();
	if (!list || !d) {
		cJSON_Delete(d);
		return error_set(ENOMEM, "%s: out of memory", t->path);
	}
	cJSON_AddStringToObject(d, "name", "default");
	cJSON_AddStringToObject(d, "template", tmpl);
	cJSON_AddItemToArray(list, d);
	for (uint64_t i = 0; i < names->n; i++) {
		char key[256];
		const char *text = NULL;
		if (names->lens[i] != strlen(names->strs[i]) || !strcmp(names->strs[i], "default"))
			continue;
		snprintf(key, sizeof key, "tokenizer.chat_template.%s", names->strs[i]);
		rc = gguf_get_str(t->set, key, &text);
		if (rc == -ENOENT)
			return error_set(EINVAL, "%s: tokenizer.chat_templates names \"%s\" but %s is missing", t->path,
					 names->strs[i], key);
		if (rc)
			return rc;
		if (utf8_valid(text, strlen(text)) != strlen(text))
			return error_set(EINVAL, "%s: %s is not valid UTF-8", t->path, key);
		cJSON *o = cJSON_CreateObject();
		if (!o)
			return error_set(ENOMEM, "%s: out of memory", t->path);
		cJSON_AddStringToObject(o, "name", names->strs[i]);
		cJSON_AddStringToObject(o, "template", text);
		cJSON_AddItemToArray(list, o);
	}
	return 0;
}

int gguf_meta_tokenizer(const struct gguf_set *set, cJSON **tokenizer, cJSON **tokenizer_config)
{
	*tokenizer = *tokenizer_config = NULL;
	struct tok t = { .set = set, .path = set->n_files ? set->files[0].path : "(gguf)" };
	const char *model = NULL, *pre_name = NULL, *tmpl = NULL;
	int rc = gguf_get_str(set, "tokenizer.ggml.model", &model);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	bool spm = !strcmp(model, "llama");
	if (!spm && strcmp(model, "gpt2"))
		return error_set(ENOTSUP, "%s: tokenizer.ggml.model \"%s\" is not supported from GGUF (colibri reads gpt2 "
				 "byte-level BPE and llama SentencePiece vocabularies)", t.path, model);
	const struct pre_def *pre = NULL;
	if (!spm) {
		rc = gguf_get_str(set, "tokenizer.ggml.pre", &pre_name);
		if (rc == -ENOENT)
			pre_name = "default";	/* llama.cpp's choice for a missing name */
		else if (rc)
			return rc;
		if (!(pre = pre_find(pre_name)))
			return error_set(ENOTSUP, "%s: tokenizer.ggml.pre \"%s\" is not supported (colibri writes the "
					 "pre-tokenizers of qwen2, deepseek-v3, llama-bpe, gpt-4o, glm4, gpt-2, olmo and "
					 "default)", t.path, pre_name);
	}
	rc = gguf_get_str(set, "tokenizer.chat_template", &tmpl);
	if (rc && rc != -ENOENT)
		return rc;
	if (tmpl && utf8_valid(tmpl, strlen(tmpl)) != strlen(tmpl))
		return error_set(EINVAL, "%s: tokenizer.chat_template is not valid UTF-8", t.path);
	const struct gguf_kv *scores = NULL;
	bool add_bos = spm || pre->add_bos, add_eos = false, add_space_prefix = true;
	int32_t bos, eos, pad, unk;
	cJSON *root = NULL, *cfg = NULL;
	if ((rc = tok_init(&t)))
		goto fail;
	if ((rc = token_id(&t, "tokenizer.ggml.bos_token_id", &bos)) ||
	    (rc = token_id(&t, "tokenizer.ggml.eos_token_id", &eos)) ||
	    (rc = token_id(&t, "tokenizer.ggml.padding_token_id", &pad)) ||
	    (rc = token_id(&t, "tokenizer.ggml.unknown_token_id", &unk)))
		goto fail;
	static const char *const flag_keys[] = { "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
						 "tokenizer.ggml.add_space_prefix" };
	bool *flags[] = { &add_bos, &add_eos, &add_space_prefix };
	for (size_t k = 0; k < 3; k++) {
		bool v;
		rc = gguf_get_bool(set, flag_keys[k], &v);
		if (rc == -ENOENT)
			continue;
		if (rc)
			goto fail;
		*flags[k] = v;
	}
	rc = 0;
	if (spm) {
		rc = gguf_get_arr(set, "tokenizer.ggml.scores", GGUF_VT_F32, &scores);
		if (rc == -ENOENT)
			rc = error_set(EINVAL, "%s: missing key tokenizer.ggml.scores (a llama tokenizer's merges come "
				       "from them)", t.path);
		else if (!rc && scores->n != t.n)
			rc = error_set(EINVAL, "%s: tokenizer.ggml.scores has %llu entries for %u tokens", t.path,
				       (unsigned long long)scores->n, t.n);
		if (rc)
			goto fail;
		if (unk < 0)
			for (uint32_t i = 0; i < t.n && unk < 0; i++)
				if (t.type[i] == TT_UNKNOWN)
					unk = (int32_t)i;
	}

	root = cJSON_CreateObject();
	cfg = cJSON_CreateObject();
	if (!root || !cfg)
		goto nomem;
	cJSON_AddStringToObject(root, "version", "1.0");
	cJSON_AddNullToObject(root, "truncation");
	cJSON_AddNullToObject(root, "padding");
	cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
	cJSON *bpe = cJSON_CreateObject();
	if (!added || !bpe)
		goto nomem;
	cJSON_AddStringToObject(bpe, "type", "BPE");
	cJSON_AddNullToObject(bpe, "dropout");
	if (spm && unk >= 0)
		cJSON_AddStringToObject(bpe, "unk_token", t.tokens->strs[unk]);
	else
		cJSON_AddNullToObject(bpe, "unk_token");
	cJSON_AddNullToObject(bpe, "continuing_subword_prefix");
	cJSON_AddNullToObject(bpe, "end_of_word_suffix");
	cJSON_AddBoolToObject(bpe, "fuse_unk", spm);
	cJSON_AddBoolToObject(bpe, "byte_fallback", spm);
	cJSON_AddBoolToObject(bpe, "ignore_merges", !spm && pre->ignore_merges);
	cJSON *vocab = cJSON_CreateObject();
	cJSON *merges = cJSON_CreateArray();
	if (!vocab || !merges) {
		cJSON_Delete(vocab);
		cJSON_Delete(merges);
		cJSON_Delete(bpe);
		goto nomem;
	}
	/* Which tokens are vocabulary and which added: SentencePiece keeps
	 * every piece in the vocabulary (control ones too, as HF's converter
	 * does) and lists the control, unknown and user-defined ones again as
	 * added tokens; byte-level BPE keeps its added tokens apart unless a
	 * merge needs them. */
	for (uint32_t i = 0; i < t.n; i++) {
		if (t.skip[i])
			continue;
		bool is_added = t.type[i] == TT_CONTROL || t.type[i] == TT_USER_DEFINED || (spm && t.type[i] == TT_UNKNOWN);
		if (spm || !is_added)
			t.in_vocab[i] = true;
		if (is_added)
			cJSON_AddItemToArray(added, added_token(&t, i, t.type[i] != TT_USER_DEFINED));
	}
	rc = spm ? spm_merges(&t, scores, merges) : bpe_merges(&t, merges);
	for (uint32_t i = 0; i < t.n && !rc; i++)
		if (t.in_vocab[i])
			vocab_put(&t, vocab, i);
	cJSON_AddItemToObject(bpe, "vocab", vocab);
	cJSON_AddItemToObject(bpe, "merges", merges);
	if (rc) {
		cJSON_Delete(bpe);
		goto fail;
	}
	if (spm) {
		if ((rc = spm_components(&t, root, add_space_prefix))) {
			cJSON_Delete(bpe);
			goto fail;
		}
	} else {
		if (pre->nfc)
			cJSON_AddItemToObject(root, "normalizer", obj_type("NFC"));
		else
			cJSON_AddNullToObject(root, "normalizer");
		cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer(pre));
		cJSON_AddNullToObject(root, "post_processor");
		cJSON_AddItemToObject(root, "decoder", byte_level(true, true, true));
	}
	cJSON_AddItemToObject(root, "model", bpe);

	cJSON_AddBoolToObject(cfg, "add_bos_token", add_bos);
	cJSON_AddBoolToObject(cfg, "add_eos_token", add_eos);
	config_token(cfg, "bos_token", &t, bos);
	config_token(cfg, "eos_token", &t, eos);
	config_token(cfg, "pad_token", &t, pad);
	config_token(cfg, "unk_token", &t, unk);
	if (tmpl && (rc = chat_templates(&t, cfg, tmpl)))
		goto fail;
	cJSON_AddBoolToObject(cfg, "clean_up_tokenization_spaces", !spm && pre->clean_spaces);
	cJSON_AddStringToObject(cfg, "tokenizer_class", spm ? "LlamaTokenizerFast" : "PreTrainedTokenizerFast");
	tok_free(&t);
	*tokenizer = root;
	*tokenizer_config = cfg;
	return 0;
nomem:
	rc = error_set(ENOMEM, "%s: out of memory building tokenizer.json", t.path);
fail:
	tok_free(&t);
	cJSON_Delete(root);
	cJSON_Delete(cfg);
	return rc;
}
