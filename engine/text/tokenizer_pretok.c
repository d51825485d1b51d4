/*
 * tokenizer_pretok — normalizers (NFC, Prepend, Replace) and pre-tokenizers
 * (Split, ByteLevel, Digits as a Split, Metaspace) of the encode pipeline.
 *
 * A pre-tokenizer step maps a list of pieces (byte ranges of one text) to a
 * finer list, as in the `tokenizers` library: each piece is split on its
 * own, so a regex lookahead never sees past the end of its piece. Steps
 * that insert text (ByteLevel add_prefix_space, Metaspace) rebuild the text
 * into a scratch buffer. Regexes run through PCRE2 with UTF + UCP, where
 * \s, \p{L}, \p{N} follow Unicode as in the reference's Oniguruma; the input
 * was validated as UTF-8 once, so matching skips PCRE2's per-call check
 * (which would otherwise make a long prompt quadratic).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer_internal.h"

const char tok_gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

pcre2_code *tok_regex_compile(const char *pattern, size_t len, bool literal,
			      char *msg, size_t msg_len)
{
	int code;
	PCRE2_SIZE off;
	/* PCRE2 rejects UCP (and NEVER_BACKSLASH_C) together with LITERAL, where
	 * they would mean nothing anyway. \C matches one byte even in UTF mode:
	 * a piece could then end inside a character, and the BPE and later
	 * regexes, which skip UTF-8 checks, would read past its end; such a
	 * pattern is refused. */
	uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C);
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &off, NULL);
	if (!re) {
		PCRE2_UCHAR text[160];
		pcre2_get_error_message(code, text, sizeof(text));
		snprintf(msg, msg_len, "%s at pattern offset %zu", (const char *)text, (size_t)off);
		return NULL;
	}
	/* Without JIT PCRE2 interprets the pattern: slower, same results. */
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	return re;
}

static int replace_all(struct tok_buf *b, const char *s, size_t len, const struct tok_norm *n)
{
	b->len = 0;
	for (size_t i = 0; i < len;) {
		if (n->a_len && i + n->a_len <= len && memcmp(s + i, n->a, n->a_len) == 0) {
			if (tok_buf_append(b, n->b, n->b_len))
				return -ENOMEM;
			i += n->a_len;
		} else {
			if (tok_buf_append(b, s + i, 1))
				return -ENOMEM;
			i++;
		}
	}
	return 0;
}

int tok_normalize(struct tok_encoder *e, const char *s, size_t len, const char **out, size_t *out_len)
{
	const struct tokenizer *t = e->tok;
	int which = 0;
	for (size_t k = 0; k < t->n_norm; k++) {
		const struct tok_norm *n = &t->norm[k];
		struct tok_buf *b = &e->norm[which];
		int rc = 0;
		if (n->kind == TOK_NORM_NFC) {
			const char *o;
			size_t ol;
			rc = tok_nfc(b, s, len, &o, &ol);
			if (rc)
				return rc;
			if (o == s)
				continue;
		} else if (n->kind == TOK_NORM_PREPEND) {
			if (len == 0)
				continue;
			b->len = 0;
			rc = tok_buf_append(b, n->a, n->a_len);
			if (!rc)
				rc = tok_buf_append(b, s, len);
		} else {
			rc = replace_all(b, s, len, n);
		}
		if (rc)
			return rc;
		s = b->data;
		len = b->len;
		which ^= 1;
	}
	*out = s;
	*out_len = len;
	return 0;
}

static int push_piece(struct tok_encoder *e, int to, size_t off, size_t len)
{
	if (len == 0)
		return 0;
	if (e->n_pieces[to] == e->cap_pieces[to]) {
		size_t c = e->cap_pieces[to] ? 2 * e->cap_pieces[to] : 64;
		struct tok_piece *p = realloc(e->pieces[to], c * sizeof(*p));
		if (!p)
			return -ENOMEM;
		e->pieces[to] = p;
		e->cap_pieces[to] = c;
	}
	e->pieces[to][e->n_pieces[to]++] = (struct tok_piece){ off, len };
	return 0;
}

static int push_span(struct tok_encoder *e, size_t off, size_t len, bool match)
{
	if (e->n_spans == e->cap_spans) {
		size_t c = e->cap_spans ? 2 * e->cap_spans : 64;
		struct tok_span *p = realloc(e->spans, c * sizeof(*p));
		if (!p)
			return -ENOMEM;
		e->spans = p;
		e->cap_spans = c;
	}
	e->spans[e->n_spans++] = (struct tok_span){ off, len, match };
	return 0;
}

/* Matches and the gaps between them, covering the piece, as find_matches does. */
static int find_spans(struct tok_encoder *e, const pcre2_code *re, bool invert,
		      const char *base, struct tok_piece pc)
{
	PCRE2_SPTR subj = (PCRE2_SPTR)(base + pc.off);
	size_t start = 0, prev = 0;
	e->n_spans = 0;
	while (start <= pc.len) {
		int rc = pcre2_match(re, subj, pc.len, start, PCRE2_NO_UTF_CHECK, e->md, NULL);
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT)	/* the interpreter keeps its stack on the heap */
			rc = pcre2_match(re, subj, pc.len, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return -EINVAL;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
		size_t ms = ov[0], me = ov[1];
		if ((ms > prev && push_span(e, pc.off + prev, ms - prev, invert)) ||
		    push_span(e, pc.off + ms, me - ms, !invert))
			return -ENOMEM;
		prev = me;
		start = me;
		if (me == ms) {	/* empty match: step over one character */
			if (me >= pc.len)
				break;
			uint32_t cp;
			start += tok_utf8_decode(subj + me, &cp);
		}
	}
	if (prev < pc.len && push_span(e, pc.off + prev, pc.len - prev, invert))
		return -ENOMEM;
	return 0;
}

static int split_step(struct tok_encoder *e, const pcre2_code *re, enum tok_split_behavior bh,
		      bool invert, const char *base, int from)
{
	int to = from ^ 1;
	e->n_pieces[to] = 0;
	for (size_t k = 0; k < e->n_pieces[from]; k++) {
		int rc = find_spans(e, re, invert, base, e->pieces[from][k]);
		if (rc)
			return rc;
		struct tok_span *sp = e->spans;
		size_t n = e->n_spans, w = 0;
		bool prev_match = false;
		/* Fold the spans in place into the pieces the behaviour keeps. */
		if (bh == TOK_SPLIT_MERGED_NEXT) {
			for (size_t i = n; i-- > 0;) {
				struct tok_span s = sp[i];
				if (s.match && !prev_match && w > 0) {
					sp[n - w].len += sp[n - w].off - s.off;
					sp[n - w].off = s.off;
				} else {
					sp[n - ++w] = (struct tok_span){ s.off, s.len, false };
				}
				prev_match = s.match;
			}
			memmove(sp, sp + n - w, w * sizeof(*sp));
		} else {
			for (size_t i = 0; i < n; i++) {
				struct tok_span s = sp[i];
				bool extend = w > 0 &&
					((bh == TOK_SPLIT_MERGED_PREVIOUS && s.match && !prev_match) ||
					 (bh == TOK_SPLIT_CONTIGUOUS && s.match == prev_match));
				if (extend)
					sp[w - 1].len = s.off + s.len - sp[w - 1].off;
				else if (!(bh == TOK_SPLIT_REMOVED && s.match))
					sp[w++] = (struct tok_span){ s.off, s.len, false };
				prev_match = s.match;
			}
		}
		for (size_t i = 0; i < w; i++)
			if (push_piece(e, to, sp[i].off, sp[i].len))
				return -ENOMEM;
	}
	return 0;
}

/*
 * Rewrites each piece into a fresh text: ByteLevel's prefix space, or
 * Metaspace's replacement of ' ' and its prepended replacement.
 */
static int rebuild_step(struct tok_encoder *e, const struct tok_pre *p, const char **base,
			int from, int *tbuf, bool at_start)
{
	int to = from ^ 1;
	struct tok_buf *b = &e->text[*tbuf];
	const char *src = *base;
	b->len = 0;
	e->n_pieces[to] = 0;
	for (size_t k = 0; k < e->n_pieces[from]; k++) {
		struct tok_piece pc = e->pieces[from][k];
		size_t off = b->len;
		const char *s = src + pc.off;
		int rc = 0;
		if (p->kind == TOK_PRE_BYTE_LEVEL) {
			if (s[0] != ' ')
				rc = tok_buf_append(b, " ", 1);
			rc = rc ? rc : tok_buf_append(b, s, pc.len);
		} else {
			bool first = at_start && k == 0;
			bool starts = pc.len >= p->rep_len && memcmp(s, p->rep, p->rep_len) == 0;
			bool pre = !starts && (p->prepend == TOK_PREPEND_ALWAYS ||
					       (p->prepend == TOK_PREPEND_FIRST && first));
			/* A leading space becomes the replacement, so it counts as one. */
			if (s[0] == ' ')
				pre = false;
			if (pre)
				rc = tok_buf_append(b, p->rep, p->rep_len);
			for (size_t i = 0; !rc && i < pc.len; i++)
				rc = s[i] == ' ' ? tok_buf_append(b, p->rep, p->rep_len)
						 : tok_buf_append(b, s + i, 1);
		}
		if (rc || push_piece(e, to, off, b->len - off))
			return -ENOMEM;
	}
	*base = b->data;
	*tbuf ^= 1;
	return 0;
}

int tok_pretokenize(struct tok_encoder *e, const char *s, size_t len, bool at_start,
		    const char **base, const struct tok_piece **pieces, size_t *n)
{
	const struct tokenizer *t = e->tok;
	int cur = 0, tbuf = 0, rc = 0;
	e->n_pieces[0] = 0;
	if (push_piece(e, 0, 0, len))
		return -ENOMEM;
	*base = s;
	for (size_t k = 0; k < t->n_pre && rc == 0; k++) {
		const struct tok_pre *p = &t->pre[k];
		bool rebuild = p->kind == TOK_PRE_METASPACE ||
			       (p->kind == TOK_PRE_BYTE_LEVEL && p->add_prefix_space);
		if (rebuild) {
			rc = rebuild_step(e, p, base, cur, &tbuf, at_start);
			if (rc)
				break;
			cur ^= 1;
		}
		if (p->re && (p->kind != TOK_PRE_METASPACE || p->split)) {
			rc = split_step(e, p->re, p->behavior, p->invert, *base, cur);
			cur ^= 1;
		}
	}
	*pieces = e->pieces[cur];
	*n = e->n_pieces[cur];
	return rc;
}
