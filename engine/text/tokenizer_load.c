/*
 * tokenizer_load — builds a struct tokenizer from MODEL_DIR/tokenizer.json:
 * vocabulary, merges, added tokens, normalizer, pre-tokenizer and decoder.
 *
 * Everything is validated here, once: a vocabulary id out of range, a merge
 * whose parts or result are not in the vocabulary, a regex PCRE2 rejects, or
 * a component type we do not implement is an -EINVAL naming the file and
 * the field, never a crash or a silently different tokenization later.
 * Decoded bytes of every token are precomputed so that decoding is a copy.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json_get.h"
#include "engine/text/tokenizer_internal.h"

#define TOK_ID_MAX (1 << 24)	/* real vocabularies stay below 300k */
#define TOK_ID_SLACK 65536	/* holes allowed in the ids beyond twice the tokens */

void tok_err(char *err, size_t err_len, const char *fmt, ...)
{
	if (!err || err_len == 0 || err[0])
		return;	/* first error wins */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

struct load {
	struct tokenizer *t;
	const char *path;
	char *err;
	size_t err_len;
	size_t arena_len, arena_cap;
};

#define FAIL(L, rc, ...)                                                              \
	do {                                                                          \
		tok_err((L)->err, (L)->err_len, "%s: " __VA_ARGS__);                  \
		return (rc);                                                          \
	} while (0)


static bool get_id(const cJSON *v, int32_t *id)
{
	int64_t x;
	if (json_int(v, 0, TOK_ID_MAX - 1, &x) != 0)
		return false;
	*id = (int32_t)x;
	return true;
}

static uint32_t arena_add(struct load *L, const char *s, size_t n)
{
	uint32_t off = (uint32_t)L->arena_len;
	memcpy(L->t->strs + off, s, n);
	L->arena_len += n;
	return off;
}

/* Sizes the arena and the id table from the vocabulary and the added tokens. */
static int size_tables(struct load *L, const cJSON *vocab, const cJSON *added)
{
	size_t bytes = 0, n = 0;
	int32_t max_id = -1, id;
	const cJSON *it;
	cJSON_ArrayForEach(it, vocab) {
		if (!get_id(it, &id))
			FAIL(L, -EINVAL, "model.vocab[\"%s\"] is not an id in [0, %d)", L->path, it->string, TOK_ID_MAX);
		if (tok_utf8_check(it->string, strlen(it->string)) != strlen(it->string))
			FAIL(L, -EINVAL, "model.vocab has a key that is not valid UTF-8", L->path);
		bytes += strlen(it->string);
		max_id = id > max_id ? id : max_id;
		n++;
	}
	cJSON_ArrayForEach(it, added) {
		const char *c = tj_str(it, "content");
		if (!get_id(tj_get(it, "id"), &id) || !c || !c[0] || tok_utf8_check(c, strlen(c)) != strlen(c))
			FAIL(L, -EINVAL, "added_tokens entry lacks a valid \"id\" or UTF-8 \"content\"", L->path);
		bytes += strlen(c);
		max_id = id > max_id ? id : max_id;
	}
	if (n == 0)
		FAIL(L, -EINVAL, "model.vocab is empty", L->path);
	/* The id table is dense, sized by the largest id: a two-entry vocabulary
	 * with id 16777215 cost 335 MB and seconds to load. Real ids are dense
	 * (Qwen3: 151669 tokens, largest id 151668), so allow holes but no more
	 * table than twice the tokens plus TOK_ID_SLACK. */
	size_t tokens = n + (size_t)cJSON_GetArraySize(added);
	if ((size_t)max_id >= 2 * tokens + TOK_ID_SLACK)
		FAIL(L, -EINVAL, "ids are sparse: id %d among %zu tokens (model.vocab and added_tokens)", L->path,
		     max_id, tokens);
	struct tokenizer *t = L->t;
	t->n_ids = max_id + 1;
	t->strs = malloc(bytes + 1);
	t->tokens = calloc((size_t)t->n_ids, sizeof(*t->tokens));
	L->arena_cap = bytes;
	if (!t->strs || !t->tokens || tok_strmap_init(&t->vocab, t->strs, n) ||
	    tok_strmap_init(&t->added_map, t->strs, (size_t)cJSON_GetArraySize(added)))
		FAIL(L, -ENOMEM, "out of memory", L->path);
	return 0;
}

static int load_vocab(struct load *L, const cJSON *vocab)
{
	struct tokenizer *t = L->t;
	const cJSON *it;
	cJSON_ArrayForEach(it, vocab) {
		int32_t id = 0;
		if (!get_id(it, &id)) /* checked by the sizing pass; kept for the reader */
			FAIL(L, -EINVAL, "bad vocabulary id", L->path);
		size_t n = strlen(it->string);
		uint32_t off = arena_add(L, it->string, n);
		tok_strmap_put(&t->vocab, off, (uint32_t)n, id);
		t->tokens[id] = (struct tok_token){ .str_off = off, .str_len = (uint32_t)n,
						    .flags = TOK_FLAG_PRESENT };
	}
	return 0;
}

static int merge_parts(const cJSON *m, const char **a, size_t *al, const char **b, size_t *bl)
{
	if (cJSON_IsString(m)) {
		const char *sp = strchr(m->valuestring, ' ');
		if (!sp)
			return -1;
		*a = m->valuestring;
		*al = (size_t)(sp - m->valuestring);
		*b = sp + 1;
		*bl = strlen(sp + 1);
		return 0;
	}
	if (cJSON_GetArraySize(m) != 2 || !cJSON_IsString(m->child) || !cJSON_IsString(m->child->next))
		return -1;
	*a = m->child->valuestring;
	*al = strlen(*a);
	*b = m->child->next->valuestring;
	*bl = strlen(*b);
	return 0;
}

static int load_merges(struct load *L, const cJSON *merges)
{
	struct tokenizer *t = L->t;
	struct tok_buf cat = { 0 };
	const cJSON *m;
	uint32_t rank = 0;
	int rc = tok_mergemap_init(&t->merges, (size_t)cJSON_GetArraySize(merges));
	cJSON_ArrayForEach(m, merges) {
		const char *a, *b;
		size_t al, bl;
		if (rc)
			break;
		if (merge_parts(m, &a, &al, &b, &bl)) {
			tok_err(L->err, L->err_len, "%s: model.merges[%u] is neither \"a b\" nor [a, b]", L->path, rank);
			rc = -EINVAL;
			break;
		}
		cat.len = 0;
		if (tok_buf_append(&cat, a, al) || tok_buf_append(&cat, b, bl)) {
			rc = -ENOMEM;
			break;
		}
		int32_t ia = tok_strmap_get(&t->vocab, a, al), ib = tok_strmap_get(&t->vocab, b, bl);
		int32_t ic = tok_strmap_get(&t->vocab, cat.data, cat.len);
		if (ia < 0 || ib < 0 || ic < 0) {
			tok_err(L->err, L->err_len, "%s: model.merges[%u] (\"%.*s\" \"%.*s\") uses a token not in model.vocab",
				L->path, rank, (int)al, a, (int)bl, b);
			rc = -EINVAL;
			break;
		}
		tok_mergemap_put(&t->merges, ia, ib, rank++, ic);
	}
	tok_buf_free(&cat);
	if (rc == -ENOMEM)
		FAIL(L, rc, "out of memory", L->path);
	return rc;
}

static int trie_node(struct tokenizer *t, size_t *cap, uint8_t byte, int32_t *idx)
{
	if (t->n_trie == *cap) {
		size_t c = *cap ? 2 * *cap : 256;
		struct tok_trie_node *p = realloc(t->trie, c * sizeof(*p));
		if (!p)
			return -ENOMEM;
		t->trie = p;
		*cap = c;
	}
	*idx = (int32_t)t->n_trie;
	t->trie[t->n_trie++] = (struct tok_trie_node){ -1, -1, -1, byte };
	return 0;
}

static int trie_insert(struct tokenizer *t, size_t *cap, const uint8_t *s, size_t n, int32_t added)
{
	int32_t node = t->trie_root[s[0]];
	if (node < 0) {
		if (trie_node(t, cap, s[0], &node))
			return -ENOMEM;
		t->trie_root[s[0]] = node;
	}
	for (size_t j = 1; j < n; j++) {
		int32_t c = t->trie[node].child;
		while (c >= 0 && t->trie[c].byte != s[j])
			c = t->trie[c].sibling;
		if (c < 0) {
			if (trie_node(t, cap, s[j], &c))
				return -ENOMEM;
			t->trie[c].sibling = t->trie[node].child;
			t->trie[node].child = c;
		}
		node = c;
	}
	if (t->trie[node].added < 0)
		t->trie[node].added = added;
	return 0;
}

static int load_added(struct load *L, const cJSON *added)
{
	struct tokenizer *t = L->t;
	size_t cap = 0, n = (size_t)cJSON_GetArraySize(added);
	t->added = calloc(n ? n : 1, sizeof(*t->added));
	if (!t->added)
		FAIL(L, -ENOMEM, "out of memory", L->path);
	const cJSON *it;
	cJSON_ArrayForEach(it, added) {
		int32_t id = 0;
		if (!get_id(tj_get(it, "id"), &id))
			FAIL(L, -EINVAL, "bad added token id", L->path);
		const char *c = tj_str(it, "content");
		size_t len = strlen(c);
		uint32_t off = arena_add(L, c, len);
		bool special = tj_bool(it, "special", false);
		struct tok_added *a = &t->added[t->n_added];
		*a = (struct tok_added){ id, off, (uint32_t)len, special, tj_bool(it, "lstrip", false),
					 tj_bool(it, "rstrip", false), tj_bool(it, "single_word", false) };
		t->tokens[id] = (struct tok_token){
			.str_off = off, .str_len = (uint32_t)len,
			.flags = TOK_FLAG_PRESENT | TOK_FLAG_ADDED | (special ? TOK_FLAG_SPECIAL : 0) };
		tok_strmap_put(&t->added_map, off, (uint32_t)len, id);
		if (trie_insert(t, &cap, (const uint8_t *)c, len, (int32_t)t->n_added++))
			FAIL(L, -ENOMEM, "out of memory", L->path);
	}
	return 0;
}

static int load_model(struct load *L, const cJSON *root)
{
	struct tokenizer *t = L->t;
	const cJSON *model = tj_get(root, "model"), *added = tj_get(root, "added_tokens");
	if (!cJSON_IsObject(model))
		FAIL(L, -EINVAL, "missing \"model\" object", L->path);
	const char *type = tj_str(model, "type");
	if (type && strcmp(type, "BPE") != 0)
		FAIL(L, -EINVAL, "model.type \"%s\" is not supported (only BPE)", L->path, type);
	const cJSON *vocab = tj_get(model, "vocab"), *merges = tj_get(model, "merges");
	if (!cJSON_IsObject(vocab))
		FAIL(L, -EINVAL, "model.vocab is missing or not an object", L->path);
	if (!cJSON_IsArray(merges))
		FAIL(L, -EINVAL, "model.merges is missing or not an array (is this a BPE model?)", L->path);
	if (added && !cJSON_IsArray(added))
		FAIL(L, -EINVAL, "added_tokens is not an array", L->path);
	const char *pre = tj_str(model, "continuing_subword_prefix");
	const char *suf = tj_str(model, "end_of_word_suffix");
	if ((pre && pre[0]) || (suf && suf[0]))
		FAIL(L, -EINVAL, "model.continuing_subword_prefix / end_of_word_suffix are not supported", L->path);
	/* dropout only applies while training; inference merges deterministically. */
	t->byte_fallback = tj_bool(model, "byte_fallback", false);
	t->ignore_merges = tj_bool(model, "ignore_merges", false);
	t->fuse_unk = tj_bool(model, "fuse_unk", false);
	int rc = size_tables(L, vocab, added);
	if (!rc)
		rc = load_vocab(L, vocab);
	if (!rc)
		rc = load_merges(L, merges);
	if (!rc)
		rc = load_added(L, added);
	const char *unk = tj_str(model, "unk_token");
	t->unk_id = unk ? tok_strmap_get(&t->vocab, unk, strlen(unk)) : -1;
	return rc;
}

int tokenizer_load(struct tokenizer **out, const char *model_dir, char *err, size_t err_len)
{
	char path[4096];
	char *text = NULL;
	cJSON *root = NULL;
	int rc = 0;
	*out = NULL;
	if (err && err_len)
		err[0] = 0;
	struct tokenizer *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->bos_id = t->eos_id = t->unk_id = -1;
	for (int i = 0; i < 256; i++)
		t->trie_root[i] = t->byte_id[i] = t->fallback_id[i] = -1;
	struct load L = { .t = t, .path = path, .err = err, .err_len = err_len };

	if ((size_t)snprintf(path, sizeof(path), "%s/tokenizer.json", model_dir) >= sizeof(path)) {
		tok_err(err, err_len, "%s: model directory path too long", model_dir);
		rc = -ENAMETOOLONG;
		goto fail;
	}
	FILE *f = fopen(path, "rb");
	if (!f) {
		rc = -errno;
		tok_err(err, err_len, "%s: %s", path, strerror(errno));
		goto fail;
	}
	struct tok_buf b = { 0 };
	char chunk[65536];
	size_t got;
	while (rc == 0 && (got = fread(chunk, 1, sizeof(chunk), f)) > 0)
		rc = tok_buf_append(&b, chunk, got);
	if (rc == 0 && ferror(f))
		rc = -EIO;
	fclose(f);
	text = b.data;
	if (rc) {
		tok_err(err, err_len, "%s: read failed", path);
		goto fail;
	}
	root = cJSON_ParseWithLength(text ? text : "", b.len);
	if (!cJSON_IsObject(root)) {
		const char *at = cJSON_GetErrorPtr();
		size_t off = root ? 0 : (at && text && at >= text && at <= text + b.len ? (size_t)(at - text) : b.len);
		tok_err(err, err_len, root ? "%s: top level is not a JSON object"
					   : "%s: malformed or truncated JSON near byte %zu", path, off);
		rc = -EINVAL;
		goto fail;
	}
	rc = load_model(&L, root);
	if (!rc)
		rc = tok_load_components(t, root, path, err, err_len);
	if (!rc)
		rc = tok_load_config(t, model_dir, err, err_len);
	if (rc)
		goto fail;
	cJSON_Delete(root);
	free(text);
	*out = t;
	return 0;
fail:
	cJSON_Delete(root);
	free(text);
	tokenizer_free(t);
	return rc;
}
