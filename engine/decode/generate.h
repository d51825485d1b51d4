/*
 * generate — the generation loop: prefill the prompt in chunks, then decode
 * one token at a time, streaming text as soon as it forms complete UTF-8,
 * stopping at the model's EOS tokens or after n tokens. Times prefill and
 * decode separately for --stats.
 */
#ifndef COLIBRI_ENGINE_GENERATE_H
#define COLIBRI_ENGINE_GENERATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/decode/draft_policy.h"
#include "engine/decode/session.h"

struct tokenizer;

struct grammar;

struct generate_options {
	int n_predict;       /* tokens to generate at most */
	float temp;          /* 0 = greedy */
	int32_t top_k;
	float top_p;
	float min_p;         /* 0 = off */
	float repeat_penalty;   /* 1 = off: transformers' repetition penalty, greedy too */
	int32_t repeat_last_n;  /* over the last N tokens of prompt and output (default 64; -1 all, the
				 * default for generation_config.json's penalty) */
	float presence_penalty, frequency_penalty; /* OpenAI's, on the tokens generated (0 = off) */
	uint64_t seed;
	bool print_ids;      /* print ids instead of text (no tokenizer) */
	int draft;           /* MTP drafts per step: -1 auto (default), 0 off, N */
	/* Output constrained to a grammar (NULL: none; needs the tokenizer):
	 * each step samples among the tokens it admits, and the tokens it
	 * forces run together in one forward unless forced_batch is false. */
	const struct grammar *grammar;
	bool forced_batch;
};

struct generate_stats {
	int n_prompt, n_generated;
	double prefill_s, decode_s;
	double first_token_s;   /* from start to the first generated token */
	bool stopped_at_eos;
	uint64_t forwards;      /* decode forwards (a verification counts once) */
	uint64_t drafted, accepted;
	uint64_t draft_forwards;   /* forwards that verified drafts */
	int draft_tokens;          /* tokens those forwards emitted */
	uint64_t forced;           /* tokens the grammar forced (appended without sampling) */
	uint64_t forced_forwards;  /* forwards that ran forced tokens after a sampled one */
	/* --draft auto: what the policy did and its last judgement. */
	bool draft_auto;
	int draft_switches;        /* mode changes */
	bool draft_judged;         /* draft_last holds a judgement */
	struct draft_estimate draft_last;
};

/* Reads temperature/top_k/top_p/min_p/do_sample and repetition_penalty
 * from DIR/generation_config.json when present (model_dir NULL: the
 * built-in defaults only): greedy when the model does not ask for sampling,
 * the repetition penalty either way (a processor in transformers, not a
 * warper). A file
 * that is malformed or holds values out of range gives -EINVAL naming the
 * file and the field (o still holds the built-in defaults). */
int generate_options_default(struct generate_options *o, const char *model_dir);
/* The sampling fields a command line set itself, which
 * generate_options_model leaves alone. */
enum {
	GENERATE_SET_TEMP = 1, GENERATE_SET_TOP_K = 2, GENERATE_SET_TOP_P = 4, GENERATE_SET_MIN_P = 8,
	GENERATE_SET_REPEAT_PENALTY = 16, GENERATE_SET_REPEAT_LAST_N = 32,
};

/* The value of the sampling option --NAME (temp, top-p, top-k, seed, min-p,
 * repeat-penalty, repeat-last-n, presence-penalty, frequency-penalty) into o, marking in
 * *set what generate_options_model must leave: -EINVAL naming the option
 * for a value out of range, -ENOENT for another name. */
int generate_options_parse(struct generate_options *o, unsigned *set, const char *name, const char *arg);

/* Once the command's model folder is known (after its options are parsed
 * and the default model chosen, however --model was written): temp, top_k,
 * top_p, min_p and repeat_penalty from DIR/generation_config.json as
 * generate_options_default reads them, except the fields in `set`; the
 * other fields stay. Errors as
 * generate_options_default's (o unchanged). */
int generate_options_model(struct generate_options *o, const char *model_dir, unsigned set);

/* Vocabulary-wide rows generate_run holds at once for these options (the
 * verified logits, the draft distributions, the sampler's buffers): what
 * the RAM budget sets aside (session_options.logits_rows). */
int generate_logits_rows(const struct generate_options *o);

/* Runs the loop; text goes to out as it is produced. tok may be NULL (ids
 * are printed then); an empty prompt is refused. The context must hold the
 * prompt and n_predict tokens; drafting uses what room is left and steps
 * plainly where none is. */
int generate_run(struct session *s, const struct tokenizer *tok, const int32_t *prompt,
		 int n_prompt, const struct generate_options *o, FILE *out, struct generate_stats *st);

/* Prints prompt and decode speeds, the time to first token and, with
 * drafting, its acceptance and what --draft auto decided. */
void generate_stats_print(const struct generate_stats *st, FILE *f);

/* Adds the same numbers to the session's --stats-json report. */
void generate_stats_record(const struct generate_stats *st, struct session *s);

#endif
