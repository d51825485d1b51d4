/*
 * constrain — see constrain.h.
 */
#include "engine/decode/constrain.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/grammar/grammar.h"
#include "engine/text/tokenizer.h"

int constrain_vocab(struct grammar_vocab **out, const struct tokenizer *tok, const int32_t *eos, int n_eos)
{
	int rc = grammar_vocab_from_tokenizer(out, tok, eos, (size_t)(n_eos > 0 ? n_eos : 0));
	return rc ? error_set(-rc, "grammar: cannot index the vocabulary for masks") : 0;
}

int constrain_check(const struct grammar *g, char *why, size_t why_len)
{
	uint32_t width = 0;
	int rc = grammar_width(g, &width);
	if (rc)
		return rc;
	if (width <= GRAMMAR_STACKS_MAX)
		return 0;
	snprintf(why, why_len, "the grammar needs %u parse stacks at one point of the output, more than the %d the "
		 "matcher holds (an enum, anyOf or pattern with thousands of alternatives, or thousands of "
		 "optional properties)", width, GRAMMAR_STACKS_MAX);
	return -E2BIG;
}

int constrain_init(struct constrain *c, const struct grammar *g, const struct tokenizer *tok,
		   const struct grammar_vocab *vocab, const int32_t *eos, int n_eos, int32_t n_vocab)
{
	memset(c, 0, sizeof *c);
	c->tok = tok;
	c->n_vocab = n_vocab;
	c->n_allowed = -1;
	for (int i = 0; i < n_eos && c->n_eos < (int)(sizeof c->eos / sizeof c->eos[0]); i++)
		c->eos[c->n_eos++] = eos[i];
	int rc = 0;
	if (!vocab && (rc = constrain_vocab(&c->own_vocab, tok, eos, n_eos)))
		return rc;
	c->vocab = vocab ? vocab : c->own_vocab;
	size_t words = ((size_t)n_vocab + grammar_vocab_size(c->vocab) + 63) / 64;
	c->bits = calloc(words, sizeof *c->bits);
	if (!c->bits)
		return error_set(ENOMEM, "out of memory");
	if ((rc = grammar_state_new(&c->state, g)))
		return error_set(-rc, rc == -E2BIG ? "grammar: the root rule expands to too many parse stacks"
						   : "out of memory");
	return 0;
}

void constrain_free(struct constrain *c)
{
	grammar_state_free(c->state);
	grammar_vocab_free(c->own_vocab);
	free(c->bits);
	memset(c, 0, sizeof *c);
}

/* The matcher ran out of parse stacks on the token at byte c->n_bytes of the output. */
static int too_wide(struct constrain *c)
{
	c->too_wide = true;
	return error_set(E2BIG, "grammar: at byte %" PRIu64 " of the output the grammar needs more than the %d parse "
			 "stacks the matcher holds (alternatives sharing a prefix, each fanning out); simplify it, "
			 "e.g. factor the shared prefix out", c->n_bytes, GRAMMAR_STACKS_MAX);
}

static int64_t allowed(struct constrain *c)
{
	if (c->n_allowed >= 0)
		return c->n_allowed;
	int n = grammar_allowed(c->state, c->vocab, c->bits);
	if (n == -E2BIG)
		return too_wide(c), n;
	if (n < 0)
		return error_set(-n, "out of memory"), n;
	c->n_allowed = n;
	return n;
}

static bool bit(const struct constrain *c, int32_t id)
{
	return id >= 0 && (size_t)id < grammar_vocab_size(c->vocab) && (c->bits[id / 64] >> (id % 64) & 1);
}

int64_t constrain_mask(struct constrain *c, float *logits)
{
	int64_t n = allowed(c);
	if (n < 0)
		return n;
	if (n == 0)
		return error_set(EILSEQ, "grammar: no token can continue the output here"), 0;
	for (int32_t id = 0; id < c->n_vocab; id++)
		if (!bit(c, id))
			logits[id] = -INFINITY;
	return n;
}

int32_t constrain_forced(struct constrain *c)
{
	if (allowed(c) != 1)
		return -1;
	int32_t id = grammar_bits_first(c->bits, grammar_vocab_size(c->vocab));
	const char *b;
	size_t len = 0;
	/* An EOS has no bytes: forcing it would only end the run, which the
	 * sampler does as well. */
	if (id < 0 || tokenizer_token_bytes(c->tok, id, &b, &len) != 0 || len == 0 ||
	    tokenizer_token_is_special(c->tok, id))
		return -1;
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos[i] == id)
			return -1;
	return id;
}

bool constrain_allows(struct constrain *c, int32_t id)
{
	return allowed(c) > 0 && bit(c, id);
}

int constrain_accept(struct constrain *c, int32_t id)
{
	const char *b = NULL;
	size_t len = 0;
	bool ends = tokenizer_token_is_special(c->tok, id);
	for (int i = 0; i < c->n_eos; i++)
		ends = ends || c->eos[i] == id;
	if (ends)
		len = 0; /* EOS / end of turn: the grammar's output is complete */
	else if (tokenizer_token_bytes(c->tok, id, &b, &len) != 0)
		return error_set(EINVAL, "grammar: token %d is outside the tokenizer's vocabulary", id);
	int rc = len ? grammar_state_advance(c->state, b, len) : 0;
	if (rc == -E2BIG)
		return too_wide(c);
	if (rc)
		return error_set(-rc, "grammar: token %d does not continue the output", id);
	c->n_bytes += len;
	c->n_allowed = -1;
	return 0;
}

int constrain_save(const struct constrain *c, struct grammar_state **out)
{
	int rc = grammar_state_clone(out, c->state);
	return rc ? error_set(-rc, "out of memory") : 0;
}

void constrain_restore(struct constrain *c, struct grammar_state *saved)
{
	grammar_state_free(c->state);
	c->state = saved;
	c->n_allowed = -1;
}
