/*
 * tokenizer_stream — UTF-8 validation and the streaming decoder.
 *
 * A byte-level BPE token may end in the middle of a character (an emoji is
 * often two or three tokens), so a generation loop that prints token by
 * token must hold the bytes of an incomplete sequence until the token that
 * completes it. The stream keeps at most 3 such bytes; anything that can
 * never become valid UTF-8 is replaced by U+FFFD, one per maximal invalid
 * subpart (the Unicode "best practice" that the reference decoder follows),
 * so the concatenated output equals tokenizer_decode() of the same ids.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer_internal.h"

enum tok_utf8 tok_utf8_next(const uint8_t *p, size_t avail, size_t *n)
{
	uint8_t b = p[0];
	size_t need;
	uint8_t lo = 0x80, hi = 0xBF;	/* allowed range of the second byte */
	if (b < 0x80) {
		*n = 1;
		return TOK_UTF8_VALID;
	}
	if (b >= 0xC2 && b <= 0xDF) {
		need = 2;
	} else if (b >= 0xE0 && b <= 0xEF) {
		need = 3;
		if (b == 0xE0)
			lo = 0xA0;	/* no overlong forms */
		if (b == 0xED)
			hi = 0x9F;	/* no surrogates */
	} else if (b >= 0xF0 && b <= 0xF4) {
		need = 4;
		if (b == 0xF0)
			lo = 0x90;
		if (b == 0xF4)
			hi = 0x8F;	/* nothing above U+10FFFF */
	} else {
		*n = 1;
		return TOK_UTF8_INVALID;
	}
	for (size_t i = 1; i < need; i++) {
		if (i >= avail) {
			*n = i;
			return TOK_UTF8_INCOMPLETE;
		}
		uint8_t c = p[i];
		if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) {
			*n = i;
			return TOK_UTF8_INVALID;
		}
	}
	*n = need;
	return TOK_UTF8_VALID;
}

size_t tok_utf8_decode(const uint8_t *p, uint32_t *cp)
{
	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	if (p[0] < 0xE0) {
		*cp = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
		return 2;
	}
	if (p[0] < 0xF0) {
		*cp = (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
		return 3;
	}
	*cp = (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 |
	      (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
	return 4;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

size_t tok_utf8_check(const char *s, size_t len)
{
	const uint8_t *p = (const uint8_t *)s;
	for (size_t i = 0; i < len;) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		size_t n;
		if (tok_utf8_next(p + i, len - i, &n) != TOK_UTF8_VALID)
			return i;
		i += n;
	}
	return len;
}

size_t tok_utf8_lossy(char *dst, const uint8_t *src, size_t len, bool final, size_t *consumed)
{
	size_t w = 0, i = 0;
	while (i < len) {
		size_t n;
		enum tok_utf8 r = tok_utf8_next(src + i, len - i, &n);
		if (r == TOK_UTF8_INCOMPLETE && !final)
			break;
		if (r == TOK_UTF8_VALID) {
			memcpy(dst + w, src + i, n);
			w += n;
		} else {
			memcpy(dst + w, "\xEF\xBF\xBD", 3);
			w += 3;
		}
		i += n;
	}
	*consumed = i;
	return w;
}

int tokenizer_stream_init(struct tokenizer_stream *s, const struct tokenizer *tok)
{
	memset(s, 0, sizeof(*s));
	s->tok = tok;
	/* Worst case: 3 held bytes plus the longest token, every byte invalid. */
	s->out_cap = 3 * (tok->dec_max + 4) + 1;
	s->out = malloc(s->out_cap);
	if (!s->out)
		return -ENOMEM;
	s->strip_left = tok->strip_leading;
	return 0;
}

void tokenizer_stream_free(struct tokenizer_stream *s)
{
	free(s->out);
	s->out = NULL;
}

int tokenizer_stream_put(struct tokenizer_stream *s, int32_t id, const char **text, size_t *len)
{
	const struct tokenizer *t = s->tok;
	*text = s->out;
	*len = 0;
	if (id < 0 || id >= t->n_ids || !(t->tokens[id].flags & TOK_FLAG_PRESENT))
		return 0;
	const uint8_t *p = (const uint8_t *)t->dec + t->tokens[id].dec_off;
	size_t n = t->tokens[id].dec_len;
	while (!s->emitted && s->strip_left > 0 && n > 0 && p[0] == ' ') {
		p++;
		n--;
		s->strip_left--;
	}
	if (n == 0)
		return 0;
	s->emitted = true;

	/*
	 * Complete the held prefix first: take bytes from p until the held
	 * sequence resolves (valid or invalid), then convert the rest directly.
	 */
	size_t w = 0;
	while (s->pending_len > 0 && n > 0) {
		s->pending[s->pending_len++] = *p++;
		n--;
		size_t k, used;
		if (tok_utf8_next(s->pending, s->pending_len, &k) == TOK_UTF8_INCOMPLETE)
			continue;
		w += tok_utf8_lossy(s->out + w, s->pending, s->pending_len, false, &used);
		/* Bytes after an invalid subpart were not part of it: give them back. */
		size_t back = s->pending_len - used;
		p -= back;
		n += back;
		s->pending_len = 0;
	}
	size_t used;
	w += tok_utf8_lossy(s->out + w, p, n, false, &used);
	memcpy(s->pending + s->pending_len, p + used, n - used);
	s->pending_len += n - used;
	*len = w;
	return 0;
}

int tokenizer_stream_flush(struct tokenizer_stream *s, const char **text, size_t *len)
{
	size_t used;
	*text = s->out;
	*len = tok_utf8_lossy(s->out, s->pending, s->pending_len, true, &used);
	s->pending_len = 0;
	s->emitted = false;
	s->strip_left = s->tok->strip_leading;
	return 0;
}
