/*
 * constrain — a grammar over the tokens a generation emits (--grammar,
 * --json-schema, a server's response_format): masks each step's logits to
 * the tokens the grammar admits next, advances with each token chosen, and
 * says when the grammar admits exactly one token, which is then appended
 * without sampling (a forced token: generate.c runs a stretch of them in
 * one forward, as it verifies drafts).
 *
 * The state's mask is computed once per position and cached: masking the
 * logits and asking for the forced token at the same position cost one
 * grammar_allowed. Ids the model has past the tokenizer's vocabulary are
 * never allowed; EOS ids (the model's and the tokenizer's) only where the
 * grammar's root is complete.
 */
#ifndef COLIBRI_ENGINE_CONSTRAIN_H
#define COLIBRI_ENGINE_CONSTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct grammar;
struct grammar_state;
struct grammar_vocab;
struct tokenizer;

struct constrain {
	const struct tokenizer *tok;
	const struct grammar_vocab *vocab; /* the tokenizer's tokens as bytes */
	struct grammar_vocab *own_vocab;   /* vocab when built here, else NULL */
	struct grammar_state *state;  /* after the tokens accepted so far */
	int32_t n_vocab;              /* the model's logits per row */
	uint64_t *bits;               /* the allowed ids at the current position */
	int64_t n_allowed;            /* their count; -1: not computed yet */
	int32_t eos[16];              /* ids that end the output (no bytes of it) */
	int n_eos;
	uint64_t n_bytes;             /* output bytes accepted so far */
	bool too_wide;                /* failed: more stacks than the matcher holds */
};

/* The vocabulary a constrain masks over: tok's tokens as bytes, eos[n_eos]
 * (the ids that end a generation) admitted only where the grammar's
 * sentence is complete. Immutable: one serves every constrain of a server.
 * Free with grammar_vocab_free. */
int constrain_vocab(struct grammar_vocab **out, const struct tokenizer *tok, const int32_t *eos, int n_eos);

/* Whether the matcher can run g at every point of its output: -E2BIG with
 * a sentence in why (naming the stacks needed and GRAMMAR_STACKS_MAX) when
 * one position fans out wider (grammar_width), 0, or -ENOMEM. Milliseconds
 * on the largest grammars; callers check it right after grammar_parse, so
 * such a grammar is refused before a model loads or a request is queued. */
int constrain_check(const struct grammar *g, char *why, size_t why_len);

/* A state at the start of g (which must outlive c) over vocab (built with
 * constrain_vocab from the same tok and eos, and outliving c), or, with
 * vocab NULL, over one built here (about 0.2 s on a 151k vocabulary).
 * Returns 0, -ENOMEM, or an error set. */
int constrain_init(struct constrain *c, const struct grammar *g, const struct tokenizer *tok,
		   const struct grammar_vocab *vocab, const int32_t *eos, int n_eos, int32_t n_vocab);
void constrain_free(struct constrain *c);

/* Sets logits[id] to -inf for every id the grammar does not admit next.
 * Returns the number admitted; 0 (no token can continue the output) is an
 * error the caller reports, with the message set. */
int64_t constrain_mask(struct constrain *c, float *logits);

/* The one id the grammar admits next, or -1 when it admits several (or an
 * EOS only: the caller stops rather than forcing it). */
int32_t constrain_forced(struct constrain *c);

/* Whether id is admitted next. */
bool constrain_allows(struct constrain *c, int32_t id);

/* Advances over id's bytes (an EOS or other special token adds none). -EILSEQ with the message
 * set when the grammar does not admit it. -E2BIG, with too_wide set and a
 * message naming the output position and GRAMMAR_STACKS_MAX, where several
 * alternatives alive at once (sharing a prefix) need more parse stacks
 * than the matcher holds: constrain_check bounds what one position fans
 * out to, not that sum, so this is the grammar's fault found late; so is
 * the same from constrain_mask. */
int constrain_accept(struct constrain *c, int32_t id);

/* A copy of the state, and back to it: drafts are tried on a copy. */
int constrain_save(const struct constrain *c, struct grammar_state **out);
void constrain_restore(struct constrain *c, struct grammar_state *saved);

#endif
