/*
 * batch — many sequences decoded together, one forward per step: the
 * scheduler core of `colibri serve`, and of `colibri chat` with one slot.
 *
 * A batch has n slots, slot i owning sequence i of the forward. A slot
 * holds the tokens its sequence state covers (its history), so a new
 * request on it reuses the longest common prefix instead of prefilling it
 * again (the prompt cache). Each step gives every decoding slot one row (its
 * next token) and shares the rest of the forward's rows among the slots
 * still prefilling, runs them in one forward_step_rows (an expert several
 * slots need is read once), then samples for each slot whose prompt is done
 * and reports the token through a callback. What a slot produces does not
 * depend on the other slots: logits are bit-identical whatever the batch
 * holds, and each slot samples with its own seeded sampler.
 *
 * A slot finishes at EOS, after n_predict tokens, or when its context is
 * full (the reason is reported), when its grammar admits nothing more, or
 * when the caller finishes it (a stop string, a client gone). Its state and history stay for the next request.
 *
 * Ownership: the batch borrows the forward, model and tokenizer (which
 * must outlive it) and owns the slots' buffers; batch_free frees them.
 */
#ifndef COLIBRI_ENGINE_DECODE_BATCH_H
#define COLIBRI_ENGINE_DECODE_BATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/decode/sampler.h"
#include "engine/forward/forward.h"

struct constrain;
struct tokenizer;

#define BATCH_LOGPROBS_MAX 20

/* Sampling and limits of one request (OpenAI semantics where it has them). */
struct batch_params {
	int n_predict;               /* tokens to generate at most */
	float temp;                  /* 0: greedy */
	int32_t top_k;               /* 0: off */
	float top_p;                 /* 1: off */
	float min_p;                 /* 0: off */
	uint64_t seed;
	float repeat_penalty;        /* transformers' repetition penalty; 1 or 0: off */
	int32_t repeat_last_n;       /* over the last N tokens of prompt and output: 0 none, -1 all */
	float presence_penalty;      /* subtracted from the logit of every token generated so far */
	float frequency_penalty;     /* ... times how often it was generated */
	bool logprobs;               /* report the chosen token's log probability */
	int top_logprobs;            /* and the n most likely ones (<= BATCH_LOGPROBS_MAX) */
	int32_t checkpoint_at;       /* prompt position to keep a checkpoint of the sequence state at: the end
				      * of the conversation's history, before the generation prompt, which
				      * the next turn's prompt shares (models with a recurrent state go back
				      * there rather than start over); 0: none */
	struct constrain *cs;        /* a grammar the output must follow, or NULL: borrowed, it must outlive the
				      * request and start at its first token; each step masks the slot's logits with
				      * it before sampling and advances it with the token chosen */
};

enum batch_finish {
	BATCH_RUNNING = 0,
	BATCH_EOS,                   /* the model ended (an EOS token, not reported as text) */
	BATCH_LENGTH,                /* n_predict tokens, or the context is full */
	BATCH_STOPPED,               /* the caller finished it */
	BATCH_GRAMMAR,               /* the grammar admitted no token (its message in error_message()) */
};

/* One generated token. Log probabilities are of the model's distribution
 * (log softmax of the raw logits, before penalties, temperature and the
 * grammar's mask). */
struct batch_token {
	int32_t id;
	bool eos;
	float logprob;
	int n_top;
	int32_t top_id[BATCH_LOGPROBS_MAX];
	float top_logprob[BATCH_LOGPROBS_MAX];
};

enum batch_slot_state { BATCH_SLOT_FREE = 0, BATCH_SLOT_PREFILL, BATCH_SLOT_DECODE };

struct batch_slot {
	enum batch_slot_state state;
	struct batch_params p;
	int32_t *tokens;             /* [cap] history: prompt, then generated tokens */
	int n_tokens, cap;
	int n_prompt;                /* of this request */
	int n_cached;                /* prompt tokens the state already held at the start */
	int n_generated;
	int32_t next;                /* sampled, reported, not yet in the state (DECODE) */
	enum batch_finish finish;    /* why it stopped (FREE after a request) */
	struct sampler smp;
	bool have_sampler;
	uint16_t *counts;            /* [vocab] generated-token counts, for the penalties */
	void *user;                  /* the caller's (a request) */
};

/* Called for every token a slot generates, in the order the step sampled
 * them; finish is not BATCH_RUNNING on the slot's last call. t is NULL when
 * a slot ends without a token (n_predict 0, or a failed step). */
typedef void (*batch_token_fn)(void *ctx, int slot, const struct batch_token *t, enum batch_finish finish);

struct batch {
	struct forward *f;
	const struct tokenizer *tok;
	int n_slots;
	struct batch_slot *slots;    /* [n_slots] */
	float *logits;               /* [n_slots, vocab] */
	float *work;                 /* [vocab] */
	struct forward_row *rows;    /* [f->batch] */
	int *out, *out_slot;         /* [n_slots] */
	batch_token_fn on_token;
	void *ctx;
	bool forced_batch;           /* run a grammar's forced tokens in the next step's rows (default true) */
	uint64_t steps, rows_run;    /* counters */
};

/* One slot per sequence of f (f->n_seqs). tok (may be NULL) adds its EOS
 * to the model's. */
int batch_init(struct batch *b, struct forward *f, const struct tokenizer *tok, batch_token_fn on_token, void *ctx);
void batch_free(struct batch *b);

/* The free slot whose history shares the longest prefix with prompt (ties:
 * the lowest index), or -1 when every slot is busy. */
int batch_pick(const struct batch *b, const int32_t *prompt, int n);

/* Starts a request on free slot i: its prompt, params and the caller's
 * pointer. The slot's sequence is cut back to the longest prefix it holds
 * of prompt (at most n - 1 tokens, so the last one yields logits); *cached
 * (may be NULL) says how many. -EINVAL for bad params or an empty prompt,
 * -ENOSPC when prompt and n_predict do not fit the context. */
int batch_start(struct batch *b, int i, const int32_t *prompt, int n, const struct batch_params *p, void *user,
		int *cached);

/* Finishes slot i now (reason BATCH_STOPPED), keeping its history. */
void batch_finish(struct batch *b, int i);

/* Active slots (prefilling or decoding). */
int batch_active(const struct batch *b);

/* One step: returns the active slots after it, 0 when idle, or -errno
 * (the forward failed: every active slot is finished with BATCH_STOPPED
 * and the error is left pending). */
int batch_step(struct batch *b);

/* Writes slot i's history and sequence state to path atomically (a
 * temporary file, fsync, rename), keyed to model_id; reads one back into a
 * free slot, refusing (with a message naming path) a file of another model,
 * layout or format, truncated, corrupted or with bytes after its end; on
 * refusal the slot is empty. */
int batch_save(const struct batch *b, int i, uint64_t model_id, const char *path);
int batch_load(struct batch *b, int i, uint64_t model_id, const char *path);

#endif
