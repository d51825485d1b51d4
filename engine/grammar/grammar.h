/*
 * grammar — GBNF grammars (the format llama.cpp's users write), a matcher
 * that runs them over bytes, and per-step token masks for constrained
 * decoding.
 *
 * A grammar is compiled once (grammar_parse) into rules whose elements are
 * Unicode code-point classes and rule references; repetitions become
 * generated right-recursive rules, so the matcher is a pushdown automaton.
 * A grammar_state is a set of parse stacks (deduplicated, at most
 * GRAMMAR_STACKS_MAX) plus the bytes of a code point not yet complete, so
 * input may be fed byte by byte and a token may end inside a character.
 *
 * Invariants: a compiled grammar and a grammar_vocab are immutable and may be
 * shared by threads; a grammar_state is used by one thread at a time (it
 * keeps a private cache that grammar_allowed and advance fill).
 */
#ifndef COLIBRI_GRAMMAR_H
#define COLIBRI_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct grammar;
struct grammar_state;
struct grammar_vocab;
struct tokenizer;

/* Largest m or n accepted in a {m,n} repetition; larger bounds are refused. */
#define GRAMMAR_REPEAT_MAX 4096
/* Most elements (code-point classes and references) in a compiled grammar. */
#define GRAMMAR_ELEMS_MAX (1u << 20)
/* Most parse stacks one state may hold; beyond it advance fails with -E2BIG. */
#define GRAMMAR_STACKS_MAX 4096

/*
 * Compiles len bytes of GBNF text whose start rule is root (NULL: "root").
 * Returns 0 and sets *out (free with grammar_free); -EINVAL for a grammar
 * that does not parse, uses an undefined rule, lacks the root, is
 * left-recursive or too large, with "line L, column C: what" written to err
 * (when err_len > 0); -ENOMEM. The text need not outlive the grammar.
 */
int grammar_parse(struct grammar **out, const char *text, size_t len, const char *root,
		  char *err, size_t err_len);
void grammar_free(struct grammar *g);

/* Number of rules after compilation (user rules plus generated ones). */
size_t grammar_rule_count(const struct grammar *g);

/*
 * Sets *width to the most parse stacks one closure of g can make (at the
 * start, or from any one position: an alternation or a run of optional
 * items fans out to that many). Above GRAMMAR_STACKS_MAX the matcher
 * would fail with -E2BIG where the output reaches that point, so callers
 * refuse such a grammar at compile time. Stacks that alternatives sharing
 * a prefix keep alive together are not counted. O(size of g). Returns 0,
 * -ENOMEM, or -ELOOP for left recursion, which grammar_parse refuses
 * (grammar_width.c).
 */
int grammar_width(const struct grammar *g, uint32_t *width);

/*
 * A state at the start of the root rule. g must outlive the state; free
 * with grammar_state_free. Returns 0, -ENOMEM, or -E2BIG if the root
 * expands to more than GRAMMAR_STACKS_MAX stacks.
 */
int grammar_state_new(struct grammar_state **out, const struct grammar *g);
/* An independent copy of s (its cache is not copied). */
int grammar_state_clone(struct grammar_state **out, const struct grammar_state *s);
void grammar_state_free(struct grammar_state *s);

/*
 * Feeds n bytes. Returns 0 when the grammar admits them (a trailing partial
 * UTF-8 sequence is admitted when some code point it can start is allowed);
 * -EILSEQ when rejected (invalid UTF-8 or not in the language), -E2BIG when
 * the stack limit is hit, -ENOMEM; on any failure s is unchanged.
 */
int grammar_state_advance(struct grammar_state *s, const void *bytes, size_t n);

/* True when the bytes fed so far are a complete match of the root rule. */
bool grammar_state_accepting(const struct grammar_state *s);
/* True when no continuation is possible and the input is not complete. */
bool grammar_state_dead(const struct grammar_state *s);

/*
 * A vocabulary prepared for masks: a byte trie over every token's raw bytes
 * (tokens[i] of lens[i] bytes is id i). special[i] (may be NULL) marks ids
 * that are never allowed; eos[] (n_eos ids) are allowed only when the state
 * is accepting. Empty tokens are never allowed. The arrays are copied.
 * Free with grammar_vocab_free.
 */
int grammar_vocab_new(struct grammar_vocab **out, size_t n_ids, const char *const *tokens,
		      const size_t *lens, const bool *special, const int32_t *eos, size_t n_eos);
/*
 * The same from a loaded tokenizer (tokenizer_token_bytes, special added
 * tokens excluded). eos[] are typically the EOS and end-of-turn ids.
 */
int grammar_vocab_from_tokenizer(struct grammar_vocab **out, const struct tokenizer *tok,
				 const int32_t *eos, size_t n_eos);
void grammar_vocab_free(struct grammar_vocab *v);
size_t grammar_vocab_size(const struct grammar_vocab *v);

/*
 * Fills bits (at least (grammar_vocab_size(v) + 63) / 64 words; bit i of
 * word i / 64 is id i) with the ids whose bytes s admits, and returns their
 * count, or -E2BIG / -ENOMEM. s is not advanced (only its cache changes).
 */
int grammar_allowed(struct grammar_state *s, const struct grammar_vocab *v, uint64_t *bits);

/* The lowest id set in bits of n_ids, or -1: the forced token when the count is 1. */
int32_t grammar_bits_first(const uint64_t *bits, size_t n_ids);

#endif
