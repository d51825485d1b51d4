/*
 * tokenizer_components — reads the normalizer, pre_tokenizer and decoder of
 * tokenizer.json into the flat step lists of struct tokenizer, and
 * precomputes each token's decoded bytes.
 *
 * Supported: normalizers NFC, Prepend, Replace (String pattern) and their
 * Sequence; pre-tokenizers Split (Regex or String), ByteLevel, Digits,
 * Metaspace and their Sequence; decoders ByteLevel, Replace (String),
 * ByteFallback, Fuse, Strip (leading spaces after Fuse), Metaspace and their
 * Sequence. Anything else is rejected by name rather than approximated.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json_get.h"
#include "engine/text/tokenizer_internal.h"

struct comp {
	struct tokenizer *t;
	const char *path;
	char *err;
	size_t err_len;
};

#define FAIL(C, rc, ...)                                                              \
	do {                                                                          \
		tok_err((C)->err, (C)->err_len, "%s: " __VA_ARGS__);                  \
		return (rc);                                                          \
	} while (0)


static const char *type_of(struct comp *C, const cJSON *o, const char *what)
{
	const char *type = cJSON_IsObject(o) ? tj_str(o, "type") : NULL;
	if (!type)
		tok_err(C->err, C->err_len, "%s: %s has no \"type\"", C->path, what);
	return type;
}

static int add_norm(struct comp *C, const cJSON *n)
{
	struct tokenizer *t = C->t;
	if (!n || cJSON_IsNull(n))
		return 0;
	const char *type = type_of(C, n, "normalizer");
	if (!type)
		return -EINVAL;
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *it;
		cJSON_ArrayForEach(it, tj_get(n, "normalizers")) {
			int rc = add_norm(C, it);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (t->n_norm == TOK_NORM_MAX)
		FAIL(C, -EINVAL, "more than %d normalizers", C->path, TOK_NORM_MAX);
	struct tok_norm *s = &t->norm[t->n_norm];
	const char *a = NULL, *b = NULL;
	if (strcmp(type, "NFC") == 0) {
		s->kind = TOK_NORM_NFC;
	} else if (strcmp(type, "Prepend") == 0) {
		s->kind = TOK_NORM_PREPEND;
		if (!(a = tj_str(n, "prepend")))
			FAIL(C, -EINVAL, "normalizer Prepend has no \"prepend\" string", C->path);
	} else if (strcmp(type, "Replace") == 0) {
		s->kind = TOK_NORM_REPLACE;
		a = tj_str(tj_get(n, "pattern"), "String");
		b = tj_str(n, "content");
		if (!a || !b)
			FAIL(C, -EINVAL, "normalizer Replace needs a String pattern and a content (Regex patterns are not supported)", C->path);
	} else {
		FAIL(C, -EINVAL, "normalizer type \"%s\" is not supported", C->path, type);
	}
	/* Encoding skips UTF-8 checks after the first, so inserted text must be valid. */
	if ((a && tok_utf8_check(a, strlen(a)) != strlen(a)) || (b && tok_utf8_check(b, strlen(b)) != strlen(b)))
		FAIL(C, -EINVAL, "normalizer %s has text that is not valid UTF-8", C->path, type);
	s->a = a ? strdup(a) : NULL;
	s->b = b ? strdup(b) : NULL;
	s->a_len = a ? strlen(a) : 0;
	s->b_len = b ? strlen(b) : 0;
	t->n_norm++;
	if ((a && !s->a) || (b && !s->b))
		FAIL(C, -ENOMEM, "out of memory", C->path);
	return 0;
}

static int compile(struct comp *C, struct tok_pre *p, const char *pat, size_t len, bool literal,
		   const char *what)
{
	char msg[200];
	p->re = tok_regex_compile(pat, len, literal, msg, sizeof(msg));
	if (!p->re)
		FAIL(C, -EINVAL, "%s regex does not compile: %s", C->path, what, msg);
	return 0;
}

static int split_behavior(const char *s, enum tok_split_behavior *out)
{
	static const char *const names[] = { "Removed", "Isolated", "MergedWithPrevious",
					     "MergedWithNext", "Contiguous" };
	for (int i = 0; s && i < 5; i++)
		if (strcmp(s, names[i]) == 0) {
			*out = (enum tok_split_behavior)i;
			return 0;
		}
	return -1;
}

static int add_metaspace(struct comp *C, struct tok_pre *p, const cJSON *o)
{
	const char *rep = tj_str(o, "replacement");
	const char *scheme = tj_str(o, "prepend_scheme");
	rep = rep ? rep : "\xE2\x96\x81";	/* U+2581 */
	p->rep_len = strlen(rep);
	if (p->rep_len == 0 || p->rep_len >= sizeof(p->rep) || tok_utf8_check(rep, p->rep_len) != p->rep_len)
		FAIL(C, -EINVAL, "Metaspace replacement must be one character", C->path);
	memcpy(p->rep, rep, p->rep_len);
	if (scheme)
		p->prepend = strcmp(scheme, "first") == 0 ? TOK_PREPEND_FIRST
			   : strcmp(scheme, "never") == 0 ? TOK_PREPEND_NEVER : TOK_PREPEND_ALWAYS;
	else
		p->prepend = tj_bool(o, "add_prefix_space", true) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
	p->split = tj_bool(o, "split", true);
	p->behavior = TOK_SPLIT_MERGED_NEXT;
	return p->split ? compile(C, p, p->rep, p->rep_len, true, "Metaspace") : 0;
}

static int add_pre(struct comp *C, const cJSON *o)
{
	struct tokenizer *t = C->t;
	if (!o || cJSON_IsNull(o))
		return 0;
	const char *type = type_of(C, o, "pre_tokenizer");
	if (!type)
		return -EINVAL;
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *it;
		cJSON_ArrayForEach(it, tj_get(o, "pretokenizers")) {
			int rc = add_pre(C, it);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (t->n_pre == TOK_PRE_MAX)
		FAIL(C, -EINVAL, "more than %d pre-tokenizers", C->path, TOK_PRE_MAX);
	struct tok_pre *p = &t->pre[t->n_pre++];
	p->behavior = TOK_SPLIT_ISOLATED;
	if (strcmp(type, "Split") == 0) {
		const cJSON *pat = tj_get(o, "pattern");
		const char *re = tj_str(pat, "Regex"), *lit = tj_str(pat, "String");
		p->kind = TOK_PRE_SPLIT;
		p->invert = tj_bool(o, "invert", false);
		if (split_behavior(tj_str(o, "behavior"), &p->behavior))
			FAIL(C, -EINVAL, "Split pre-tokenizer has an unknown \"behavior\"", C->path);
		if (!re && !lit)
			FAIL(C, -EINVAL, "Split pre-tokenizer needs a Regex or String pattern", C->path);
		return compile(C, p, re ? re : lit, strlen(re ? re : lit), !re, "Split");
	}
	if (strcmp(type, "ByteLevel") == 0) {
		p->kind = TOK_PRE_BYTE_LEVEL;
		p->add_prefix_space = tj_bool(o, "add_prefix_space", true);
		t->byte_level = true;
		if (!tj_bool(o, "use_regex", true))
			return 0;
		return compile(C, p, tok_gpt2_pattern, strlen(tok_gpt2_pattern), false, "ByteLevel");
	}
	if (strcmp(type, "Digits") == 0) {
		/* Contiguous over single digits equals Isolated over runs of digits. */
		const char *re = tj_bool(o, "individual_digits", false) ? "\\p{N}" : "\\p{N}+";
		p->kind = TOK_PRE_SPLIT;
		return compile(C, p, re, strlen(re), false, "Digits");
	}
	if (strcmp(type, "Metaspace") == 0) {
		p->kind = TOK_PRE_METASPACE;
		return add_metaspace(C, p, o);
	}
	FAIL(C, -EINVAL, "pre_tokenizer type \"%s\" is not supported", C->path, type);
}

/* The per-token decoder steps, in order. */
enum dec_kind { DEC_BYTE_LEVEL, DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_METASPACE };

struct dec_plan {
	struct dec_step {
		enum dec_kind kind;
		const char *a, *b;	/* REPLACE a -> b; METASPACE a -> " " */
	} steps[8];
	size_t n;
	bool fused;
};

static int add_dec(struct comp *C, struct dec_plan *d, const cJSON *o)
{
	if (!o || cJSON_IsNull(o))
		return 0;
	const char *type = type_of(C, o, "decoder");
	if (!type)
		return -EINVAL;
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *it;
		cJSON_ArrayForEach(it, tj_get(o, "decoders")) {
			int rc = add_dec(C, d, it);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (strcmp(type, "Fuse") == 0) {
		d->fused = true;	/* decoding concatenates anyway */
		return 0;
	}
	if (strcmp(type, "Strip") == 0) {
		const char *c = tj_str(o, "content");
		const cJSON *stop = tj_get(o, "stop");
		int64_t start = 0, stop_n = 0;
		if (!d->fused || !c || strcmp(c, " ") != 0 || json_int(tj_get(o, "start"), 0, 1024, &start) ||
		    (stop && json_int(stop, 0, 0, &stop_n)))
			FAIL(C, -EINVAL, "decoder Strip is only supported after Fuse, stripping leading spaces", C->path);
		C->t->strip_leading = (size_t)start;
		return 0;
	}
	if (d->n == 8)
		FAIL(C, -EINVAL, "too many decoders", C->path);
	struct dec_step *s = &d->steps[d->n++];
	if (strcmp(type, "ByteLevel") == 0) {
		s->kind = DEC_BYTE_LEVEL;
	} else if (strcmp(type, "ByteFallback") == 0) {
		s->kind = DEC_BYTE_FALLBACK;
	} else if (strcmp(type, "Replace") == 0) {
		s->kind = DEC_REPLACE;
		s->a = tj_str(tj_get(o, "pattern"), "String");
		s->b = tj_str(o, "content");
		if (!s->a || !s->a[0] || !s->b)
			FAIL(C, -EINVAL, "decoder Replace needs a String pattern and a content", C->path);
	} else if (strcmp(type, "Metaspace") == 0) {
		const char *scheme = tj_str(o, "prepend_scheme");
		s->kind = DEC_METASPACE;
		s->a = tj_str(o, "replacement");
		s->a = s->a ? s->a : "\xE2\x96\x81";
		/* An empty pattern would match everywhere without advancing. */
		if (!s->a[0])
			FAIL(C, -EINVAL, "decoder Metaspace replacement must be one character", C->path);
		if (scheme ? strcmp(scheme, "never") != 0 : tj_bool(o, "add_prefix_space", true))
			C->t->strip_leading = 1;
	} else {
		FAIL(C, -EINVAL, "decoder type \"%s\" is not supported", C->path, type);
	}
	return 0;
}

static int replace_into(struct tok_buf *out, const char *s, size_t n, const char *a, const char *b)
{
	size_t al = strlen(a), bl = strlen(b);
	out->len = 0;
	for (size_t i = 0; i < n;) {
		bool hit = i + al <= n && memcmp(s + i, a, al) == 0;
		if (tok_buf_append(out, hit ? b : s + i, hit ? bl : 1))
			return -ENOMEM;
		i += hit ? al : 1;
	}
	return 0;
}

/* As the reference ByteLevel decoder: map every char back to its byte, or keep the token raw. */
static int byte_level_into(struct tok_buf *out, const char *s, size_t n)
{
	out->len = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += tok_utf8_decode((const uint8_t *)s + i, &cp);
		int b = tok_cp_to_byte(cp);
		if (b < 0) {
			out->len = 0;
			return tok_buf_append(out, s, n);
		}
		char c = (char)b;
		if (tok_buf_append(out, &c, 1))
			return -ENOMEM;
	}
	return 0;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int decode_token(const struct dec_plan *d, struct tok_buf w[2], const char *s, size_t n,
			const char **out, size_t *out_len)
{
	int which = 0;
	for (size_t k = 0; k < d->n; k++) {
		const struct dec_step *st = &d->steps[k];
		struct tok_buf *b = &w[which];
		int rc = 0;
		if (st->kind == DEC_BYTE_LEVEL) {
			rc = byte_level_into(b, s, n);
		} else if (st->kind == DEC_REPLACE || st->kind == DEC_METASPACE) {
			rc = replace_into(b, s, n, st->a, st->kind == DEC_REPLACE ? st->b : " ");
		} else {
			if (!(n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
			      hexval(s[3]) >= 0 && hexval(s[4]) >= 0))
				continue;
			char c = (char)(hexval(s[3]) << 4 | hexval(s[4]));
			b->len = 0;
			rc = tok_buf_append(b, &c, 1);
		}
		if (rc)
			return rc;
		s = b->data;
		n = b->len;
		which ^= 1;
	}
	*out = s;
	*out_len = n;
	return 0;
}

static int build_decoded(struct comp *C, const struct dec_plan *d)
{
	struct tokenizer *t = C->t;
	struct tok_buf arena = { 0 }, w[2] = { { 0 }, { 0 } };
	int rc = 0;
	for (int32_t id = 0; rc == 0 && id < t->n_ids; id++) {
		struct tok_token *tk = &t->tokens[id];
		const char *out = NULL;
		size_t n = 0;
		if (!(tk->flags & TOK_FLAG_PRESENT))
			continue;
		rc = decode_token(d, w, t->strs + tk->str_off, tk->str_len, &out, &n);
		tk->dec_off = (uint32_t)arena.len;
		tk->dec_len = (uint32_t)n;
		t->dec_max = n > t->dec_max ? n : t->dec_max;
		if (rc == 0)
			rc = tok_buf_append(&arena, out, n);
	}
	tok_buf_free(&w[0]);
	tok_buf_free(&w[1]);
	t->dec = arena.data ? arena.data : malloc(1);
	if (rc || !t->dec)
		FAIL(C, -ENOMEM, "out of memory", C->path);
	return 0;
}

int tok_load_components(struct tokenizer *t, const struct cJSON *root, const char *path,
			char *err, size_t err_len)
{
	struct comp C = { t, path, err, err_len };
	struct dec_plan d = { .n = 0 };
	int rc = add_norm(&C, tj_get(root, "normalizer"));
	if (!rc)
		rc = add_pre(&C, tj_get(root, "pre_tokenizer"));
	if (!rc)
		rc = add_dec(&C, &d, tj_get(root, "decoder"));
	if (!rc)
		rc = build_decoded(&C, &d);
	if (rc)
		return rc;
	char s[8];
	for (int b = 0; b < 256; b++) {
		if (t->byte_level)
			t->byte_id[b] = tok_strmap_get(&t->vocab, s, tok_utf8_encode(tok_byte_to_cp((uint8_t)b), s));
		if (t->byte_fallback) {
			snprintf(s, sizeof(s), "<0x%02X>", b);
			t->fallback_id[b] = tok_strmap_get(&t->vocab, s, 6);
		}
	}
	return 0;
}
