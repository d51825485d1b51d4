/*
 * tokenizer — the encode pipeline (added tokens, then per segment:
 * normalize, pre-tokenize, BPE), whole-sequence decode, and the accessors.
 * Loading lives in tokenizer_load.c; see tokenizer_internal.h for the map.
 *
 * Added tokens are found with a byte trie, leftmost-longest, like the
 * reference's Aho-Corasick pass: the text between two matches is a segment
 * that goes through the rest of the pipeline on its own, so nothing is ever
 * merged across an added token.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer_internal.h"

int tok_buf_reserve(struct tok_buf *b, size_t cap)
{
	if (cap <= b->cap)
		return 0;
	size_t c = b->cap ? b->cap : 64;
	while (c < cap)
		c *= 2;
	char *p = realloc(b->data, c);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = c;
	return 0;
}

int tok_buf_append(struct tok_buf *b, const void *p, size_t n)
{
	if (tok_buf_reserve(b, b->len + n))
		return -ENOMEM;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

void tok_buf_free(struct tok_buf *b)
{
	free(b->data);
	*b = (struct tok_buf){ 0 };
}

int tok_emit(struct tok_encoder *e, int32_t id)
{
	return tok_buf_append(&e->ids, &id, sizeof(id));
}

/* Length of the Unicode White_Space character at p[0], or 0. */
static size_t space_at(const uint8_t *p, size_t avail)
{
	if (p[0] == ' ' || (p[0] >= '\t' && p[0] <= '\r'))
		return 1;
	if (p[0] < 0xC2)
		return 0;
	size_t n;
	if (tok_utf8_next(p, avail, &n) != TOK_UTF8_VALID)
		return 0;
	uint32_t cp;
	tok_utf8_decode(p, &cp);
	bool ws = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
		  cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
	return ws ? n : 0;
}

/*
 * Word characters for single_word tokens. Approximation: ASCII letters,
 * digits and '_', and every non-ASCII character that is not whitespace.
 */
static bool word_at(const uint8_t *p, size_t avail)
{
	if (p[0] < 0x80)
		return (p[0] >= '0' && p[0] <= '9') || ((p[0] | 0x20) >= 'a' && (p[0] | 0x20) <= 'z') ||
		       p[0] == '_';
	return space_at(p, avail) == 0;
}

static size_t char_start_before(const uint8_t *p, size_t i)
{
	do
		i--;
	while (i > 0 && (p[i] & 0xC0) == 0x80);
	return i;
}

/* Longest added token starting at i: index into t->added, or -1. */
static int32_t trie_match(const struct tokenizer *t, const uint8_t *p, size_t len, size_t i,
			  size_t *mlen)
{
	int32_t node = t->trie_root[p[i]], best = -1;
	for (size_t j = i; node >= 0;) {
		if (t->trie[node].added >= 0) {
			best = t->trie[node].added;
			*mlen = j - i + 1;
		}
		if (++j >= len)
			break;
		int32_t c = t->trie[node].child;
		while (c >= 0 && t->trie[c].byte != p[j])
			c = t->trie[c].sibling;
		node = c;
	}
	return best;
}

/*
 * Next added token at or after `from`; [*ms, *me) is what it consumes,
 * widened over whitespace by lstrip (never before seg) and rstrip.
 */
static int32_t next_added(const struct tokenizer *t, const uint8_t *p, size_t len, size_t from,
			  size_t seg, size_t *ms, size_t *me)
{
	for (size_t i = from; i < len;) {
		size_t m = 0;
		int32_t a = t->trie_root[p[i]] >= 0 ? trie_match(t, p, len, i, &m) : -1;
		if (a < 0) {
			i++;
			continue;
		}
		const struct tok_added *ad = &t->added[a];
		size_t s = i, e = i + m;
		if (ad->single_word && ((s > 0 && word_at(p + char_start_before(p, s), len)) ||
					(e < len && word_at(p + e, len - e)))) {
			i = e;	/* the reference skips the whole match */
			continue;
		}
		if (ad->lstrip)
			while (s > seg) {
				size_t b = char_start_before(p, s);
				if (!space_at(p + b, len - b))
					break;
				s = b;
			}
		if (ad->rstrip)
			for (size_t n; e < len && (n = space_at(p + e, len - e)) > 0;)
				e += n;
		*ms = s;
		*me = e;
		return a;
	}
	return -1;
}

static int encode_segment(struct tok_encoder *e, const char *s, size_t len, bool at_start)
{
	const char *ns, *base;
	size_t nl, np;
	const struct tok_piece *pcs;
	if (len == 0)
		return 0;
	int rc = tok_normalize(e, s, len, &ns, &nl);
	if (rc || nl == 0)
		return rc;
	rc = tok_pretokenize(e, ns, nl, at_start, &base, &pcs, &np);
	for (size_t i = 0; rc == 0 && i < np; i++)
		rc = tok_bpe_piece(e, (const uint8_t *)base + pcs[i].off, pcs[i].len);
	return rc;
}

static void encoder_free(struct tok_encoder *e)
{
	pcre2_match_data_free(e->md);
	for (int i = 0; i < 2; i++) {
		tok_buf_free(&e->norm[i]);
		tok_buf_free(&e->text[i]);
		free(e->pieces[i]);
	}
	free(e->spans);
	free(e->syms);
	free(e->heap);
	tok_buf_free(&e->tmp);
}

int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
		     int32_t **ids, size_t *n)
{
	*ids = NULL;
	*n = 0;
	if (len == 0) {
		*ids = malloc(sizeof(int32_t));	/* non-NULL even when empty */
		return *ids ? 0 : -ENOMEM;
	}
	if (tok_utf8_check(text, len) != len)
		return -EILSEQ;
	struct tok_encoder e = { .tok = tok };
	e.md = pcre2_match_data_create(1, NULL);
	int rc = e.md ? tok_buf_reserve(&e.ids, sizeof(int32_t)) : -ENOMEM;
	const uint8_t *p = (const uint8_t *)text;
	size_t seg = 0;
	while (rc == 0) {
		size_t ms, me;
		int32_t a = next_added(tok, p, len, seg, seg, &ms, &me);
		if (a < 0)
			break;
		rc = encode_segment(&e, text + seg, ms - seg, seg == 0);
		if (rc == 0)
			rc = tok_emit(&e, tok->added[a].id);
		seg = me;
	}
	if (rc == 0)
		rc = encode_segment(&e, text + seg, len - seg, seg == 0);
	if (rc == 0) {
		*ids = (int32_t *)e.ids.data;
		*n = e.ids.len / sizeof(int32_t);
		e.ids.data = NULL;
	}
	tok_buf_free(&e.ids);
	encoder_free(&e);
	return rc;
}

static bool id_known(const struct tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_ids && (t->tokens[id].flags & TOK_FLAG_PRESENT);
}

int tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n,
		     char **text, size_t *len)
{
	size_t total = 0;
	*text = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++)
		if (id_known(tok, ids[i]))
			total += tok->tokens[ids[i]].dec_len;
	uint8_t *raw = malloc(total + 1);
	if (!raw)
		return -ENOMEM;
	size_t w = 0;
	for (size_t i = 0; i < n; i++)
		if (id_known(tok, ids[i])) {
			const struct tok_token *tk = &tok->tokens[ids[i]];
			memcpy(raw + w, tok->dec + tk->dec_off, tk->dec_len);
			w += tk->dec_len;
		}
	size_t skip = 0;
	while (skip < tok->strip_leading && skip < w && raw[skip] == ' ')
		skip++;
	char *out = malloc(3 * (w - skip) + 1);
	if (!out) {
		free(raw);
		return -ENOMEM;
	}
	size_t used;
	*len = tok_utf8_lossy(out, raw + skip, w - skip, true, &used);
	out[*len] = 0;
	*text = out;
	free(raw);
	return 0;
}

int tokenizer_token_bytes(const struct tokenizer *tok, int32_t id, const char **bytes,
			  size_t *len)
{
	*bytes = NULL;
	*len = 0;
	if (!id_known(tok, id))
		return -EINVAL;
	*bytes = tok->dec + tok->tokens[id].dec_off;
	*len = tok->tokens[id].dec_len;
	return 0;
}

int32_t tokenizer_token_id(const struct tokenizer *tok, const char *token_text)
{
	size_t n = strlen(token_text);
	int32_t id = tok_strmap_get(&tok->added_map, token_text, n);
	return id >= 0 ? id : tok_strmap_get(&tok->vocab, token_text, n);
}

int tokenizer_vocab_size(const struct tokenizer *tok)
{
	return tok->n_ids;
}

int32_t tokenizer_bos_id(const struct tokenizer *tok)
{
	return tok->bos_id;
}

int32_t tokenizer_eos_id(const struct tokenizer *tok)
{
	return tok->eos_id;
}

const char *tokenizer_bos_token(const struct tokenizer *tok)
{
	return tok->bos_str;
}

const char *tokenizer_eos_token(const struct tokenizer *tok)
{
	return tok->eos_str;
}

bool tokenizer_add_bos(const struct tokenizer *tok)
{
	return tok->add_bos;
}

bool tokenizer_token_is_special(const struct tokenizer *tok, int32_t id)
{
	return id_known(tok, id) && (tok->tokens[id].flags & TOK_FLAG_SPECIAL);
}

const char *tokenizer_chat_template(const struct tokenizer *tok)
{
	return tok->chat_template;
}

int tokenizer_set_chat_template(struct tokenizer *tok, const char *text)
{
	char *copy = NULL;
	if (text && !(copy = strdup(text)))
		return -ENOMEM;
	free(tok->chat_template);
	tok->chat_template = copy;
	return 0;
}

void tokenizer_free(struct tokenizer *tok)
{
	if (!tok)
		return;
	for (size_t i = 0; i < tok->n_pre; i++)
		pcre2_code_free(tok->pre[i].re);
	for (size_t i = 0; i < tok->n_norm; i++) {
		free(tok->norm[i].a);
		free(tok->norm[i].b);
	}
	tok_strmap_free(&tok->vocab);
	tok_strmap_free(&tok->added_map);
	tok_mergemap_free(&tok->merges);
	free(tok->strs);
	free(tok->dec);
	free(tok->tokens);
	free(tok->added);
	free(tok->trie);
	free(tok->bos_str);
	free(tok->eos_str);
	free(tok->chat_template);
	free(tok);
}
