/*
 * tokenizer — the byte-level BPE tokenizer of a Hugging Face `tokenizer.json`
 * (Qwen3, DeepSeek-V3, OLMoE, GPT-2 style; SentencePiece-style BPE with byte
 * fallback such as Mixtral's), plus the few fields of `tokenizer_config.json`
 * that the engine needs (bos/eos, chat template).
 *
 * Encoding follows the reference pipeline of the `tokenizers` library:
 * added tokens are matched first (leftmost-longest) and never split; the text
 * between them is normalized (NFC, Prepend, Replace), pre-tokenized (Split
 * regexes through PCRE2 with UTF + UCP, ByteLevel, Digits, Metaspace) and each
 * piece is merged by BPE rank. No special tokens are added around the text:
 * whether to prepend BOS is the caller's decision (tokenizer_add_bos()).
 *
 * Invariants: a loaded tokenizer is immutable, so every function taking a
 * `const struct tokenizer *` may run concurrently from several threads.
 * Encoding allocates its scratch per call and caches nothing; decoding a
 * stream allocates only in tokenizer_stream_init().
 */
#ifndef COLIBRI_TOKENIZER_H
#define COLIBRI_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;

/*
 * Loads MODEL_DIR/tokenizer.json and, when present, MODEL_DIR/tokenizer_config.json
 * and MODEL_DIR/chat_template.jinja, which when present is the chat template
 * (it takes priority over the config's, as in transformers v5).
 * Returns 0 and sets *out (free with tokenizer_free); -ENOENT when
 * tokenizer.json is absent; -EINVAL for malformed JSON or an unsupported
 * model, normalizer, pre-tokenizer or decoder; -ENOMEM. On failure a message
 * naming the file and the problem is written to err (when err_len > 0).
 */
int tokenizer_load(struct tokenizer **out, const char *model_dir, char *err, size_t err_len);
void tokenizer_free(struct tokenizer *tok);

/*
 * Encodes len bytes of UTF-8 text. Added and special tokens written in the
 * text (e.g. "<|im_start|>") become their ids. On success *ids is a malloc'd
 * array of *n ids that the caller frees. Returns -EILSEQ when text is not
 * valid UTF-8, -ENOMEM, or -EINVAL if a regex fails at match time.
 */
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
		     int32_t **ids, size_t *n);

/*
 * Decodes n ids into a malloc'd, NUL-terminated UTF-8 string of *len bytes
 * (the caller frees *text). Special tokens are written as their text. Bytes
 * that do not form valid UTF-8 become U+FFFD, as in the reference; ids that
 * the tokenizer does not know (e.g. embedding padding rows) decode to nothing.
 */
int tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n,
		     char **text, size_t *len);

/* Id of a token given as its vocabulary string or added-token content; -1 if absent. */
int32_t tokenizer_token_id(const struct tokenizer *tok, const char *token_text);

/*
 * The raw bytes id stands for, as the decoder produces them (byte-level
 * symbols mapped back to bytes, "<0xHH>" byte tokens and the Metaspace
 * marker resolved, added tokens as their content), before UTF-8 repair and
 * before the decoder strips a leading space at the start of a text. *bytes
 * is owned by tok and not NUL-terminated. Returns 0, or -EINVAL for an id
 * the tokenizer does not know.
 */
int tokenizer_token_bytes(const struct tokenizer *tok, int32_t id, const char **bytes,
			  size_t *len);

/* One past the largest id the tokenizer knows (vocab and added tokens). */
int tokenizer_vocab_size(const struct tokenizer *tok);

/* bos/eos ids from tokenizer_config.json; -1 when not given or not in the vocab. */
int32_t tokenizer_bos_id(const struct tokenizer *tok);
int32_t tokenizer_eos_id(const struct tokenizer *tok);

/* bos/eos token text from tokenizer_config.json, or NULL. Owned by tok. */
const char *tokenizer_bos_token(const struct tokenizer *tok);
const char *tokenizer_eos_token(const struct tokenizer *tok);

/* tokenizer_config.json's add_bos_token (false when absent). */
bool tokenizer_add_bos(const struct tokenizer *tok);

/* True when id is an added token marked "special" (e.g. <|im_end|>). */
bool tokenizer_token_is_special(const struct tokenizer *tok, int32_t id);

/* The chat_template text (the "default" one of a named list), or NULL. Owned by tok. */
const char *tokenizer_chat_template(const struct tokenizer *tok);

/* Replaces the chat template tokenizer_chat_template returns with a copy of
 * text (NULL: none, so the model type's built-in renderer is used), as
 * --chat-template does; a pointer from an earlier tokenizer_chat_template
 * is then invalid. 0, or -ENOMEM with the template unchanged. */
int tokenizer_set_chat_template(struct tokenizer *tok, const char *text);

/*
 * Streaming decoder for generation: tokens go in one at a time and only
 * complete UTF-8 sequences come out; the bytes of a character split across
 * tokens are held until the token that completes it. The concatenation of
 * all outputs, flush included, equals tokenizer_decode() of the same ids.
 * The fields are private; the struct is public so callers can embed it.
 */
struct tokenizer_stream {
	const struct tokenizer *tok;
	char *out;		/* [out_cap] output of the last put/flush */
	size_t out_cap;
	uint8_t pending[4];	/* incomplete UTF-8 prefix carried to the next token */
	size_t pending_len;
	size_t strip_left;	/* leading spaces the decoder still has to strip */
	bool emitted;		/* whether any byte was output yet */
};

/* Allocates the stream's output buffer once; tok must outlive the stream. */
int tokenizer_stream_init(struct tokenizer_stream *s, const struct tokenizer *tok);
void tokenizer_stream_free(struct tokenizer_stream *s);

/*
 * Feeds one token. *text and *len receive the bytes now ready (possibly none);
 * they stay valid until the next put/flush. Does not allocate.
 */
int tokenizer_stream_put(struct tokenizer_stream *s, int32_t id, const char **text, size_t *len);

/* Ends the stream: a held incomplete sequence comes out as U+FFFD. Resets the stream. */
int tokenizer_stream_flush(struct tokenizer_stream *s, const char **text, size_t *len);

#endif
