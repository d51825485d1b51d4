/*
 * serve_llama — llama-server's native API (llama.cpp tools/server, as its
 * README documents it at 81ff7abe5) beside the OpenAI one, for the tools
 * llama.cpp users already point at a server: POST /completion (and
 * /completions), /tokenize, /detokenize, GET /props, GET /slots and
 * POST /slots/{id}?action=save|restore|erase.
 *
 * This file parses bodies and writes answers; serve_http routes them and
 * runs /completion through the same admission, scheduler and text
 * pipeline as /v1/completions, so the same prompt, sampling and seed give
 * the same tokens on both. A /completion body is read as llama-server
 * reads it and handed on as the OpenAI request it means (serve_request):
 * n_predict for max_tokens, seed -1 for none, n_probs for top logprobs,
 * a prompt of strings and token ids mixed, and the fields of its own:
 * grammar (GBNF), json_schema, id_slot, cache_prompt, return_tokens.
 * Sampling options colibri lacks (mirostat, DRY, XTC, typical_p, dynamic
 * temperature, ...) are accepted at their neutral values and refused
 * otherwise, as the OpenAI parser refuses what it cannot do.
 *
 * Answers are llama-server's shapes (serve_llama_dialect), errors too:
 * {"error": {"code": STATUS, "message", "type"}}.
 *
 * The parsers work on bytes in memory and touch nothing else (the mixed
 * prompt is tokenized later, by serve_llama_prompt), so they are safe on
 * any input.
 */
#ifndef COLIBRI_ENGINE_SERVE_LLAMA_H
#define COLIBRI_ENGINE_SERVE_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/serve/serve_answer.h"
#include "engine/serve/serve_constraint.h"
#include "engine/serve/serve_metrics.h"
#include "engine/serve/serve_request.h"
#include "engine/serve/serve_sched.h"

struct grammar_vocab;
struct tokenizer;

/* The route of url when it is one of llama-server's, and whether it takes
 * a POST; for /slots/{id}, *arg is the id's text (a pointer into url).
 * /v1/health is /health. SERVE_ROUTE_OTHER when it is none. */
enum serve_route serve_llama_route(const char *url, bool *post, const char **arg);

/* Whether route r is answered in llama-server's shapes (serve_llama_dialect). */
bool serve_llama_is_route(enum serve_route r);

/* What the server is, for /props, /slots and the answers. Borrowed. */
struct serve_llama_info {
	const char *model_id;        /* the name clients use */
	const char *model_path;      /* the model's folder */
	const struct tokenizer *tok;
	int n_ctx;                   /* positions of a slot */
	int n_slots;
	const struct serve_limits *lim; /* sampling defaults */
	const char *slot_save_dir;   /* --slot-save-path; NULL: save and restore are refused */
};

/* A /completion request beyond its struct serve_request. */
struct serve_llama_completion {
	int n_predict;               /* -1: to the end of the context */
	int n_probs;                 /* top tokens per generated token, 0..BATCH_LOGPROBS_MAX */
	int id_slot;                 /* -1: any */
	bool cache_prompt;           /* default true */
	bool return_tokens;
	char *grammar;               /* GBNF text, or NULL */
	char *json_schema;           /* compact JSON (an object or a boolean), or NULL */
	char *mixed;                 /* a prompt of strings and ids, compact JSON, or NULL */
};

/* Parses a /completion body into q (a SERVE_COMPLETION request) and x;
 * n_slots bounds id_slot. On failure -EINVAL, err says why (400 naming the
 * field; 500 out of memory), and q and x are empty; free both either way. */
int serve_llama_completion_parse(struct serve_request *q, struct serve_llama_completion *x, const char *body,
				 size_t len, const struct serve_limits *lim, int n_slots, struct serve_error *err);
void serve_llama_completion_free(struct serve_llama_completion *x);

/* A mixed prompt tokenized into q->prompt_ids: strings through the
 * tokenizer, ids as they are (checked against the vocabulary), BOS first
 * when the first element is a string and the tokenizer adds one. Nothing
 * to do for other prompts. */
int serve_llama_prompt(struct serve_request *q, const struct serve_llama_completion *x, const struct tokenizer *tok,
		       struct serve_error *err);

/* Tokens to generate: n_predict, or what the context has left (left),
 * within cap. */
int serve_llama_n_predict(const struct serve_llama_completion *x, int left, int cap);

/* Whether the output follows a grammar (grammar or json_schema). */
bool serve_llama_constrained(const struct serve_llama_completion *x);

/* Builds c from x's grammar or json_schema, as serve_constraint_build does
 * for response_format (its arguments the same); 400 naming the field for
 * one that does not compile. Free c with serve_constraint_free. */
int serve_llama_constraint(struct serve_constraint *c, const struct serve_llama_completion *x,
			   const struct tokenizer *tok, const struct grammar_vocab *vocab, const int32_t *eos, int n_eos,
			   int32_t n_vocab, struct serve_error *err);

/* Makes a (after serve_answer_init) write llama-server's /completion
 * answer for request q, x and its prompt ids: the whole object, or one
 * SSE event per token and a final one with stop true (no [DONE]). Call
 * before q is handed to the job. Returns 0 or -ENOMEM. */
int serve_llama_answer(struct serve_answer *a, const struct serve_request *q, const struct serve_llama_completion *x,
		       const int32_t *prompt, int n_prompt, const struct serve_llama_info *info);

/* The dialect of the llama routes: answers and errors in llama-server's shapes. */
extern const struct serve_dialect serve_llama_dialect;

/* POST /tokenize and /detokenize: the answer body (malloc'd), or NULL with
 * err set. */
char *serve_llama_tokenize(const char *body, size_t len, const struct tokenizer *tok, struct serve_error *err);
char *serve_llama_detokenize(const char *body, size_t len, const struct tokenizer *tok, struct serve_error *err);

/* GET /props (malloc'd; NULL when out of memory). */
char *serve_llama_props(const struct serve_llama_info *info);

/* GET /slots of the slots as the scheduler listed them (info->n_slots). */
char *serve_llama_slots(const struct serve_llama_info *info, const struct serve_slot_info *slots);

/*
 * POST /slots/{id}?action=A: id is the path's tail, action the query's;
 * the body holds {"filename": F} for save and restore. Sets op's action,
 * slot and path (F in info->slot_save_dir; F must be a plain file name:
 * no path separator, no "..", no control character). *filename gets F
 * (malloc'd; NULL for erase). Returns 0, or -EINVAL with err: 400 for a
 * bad slot, action, body or name, 501 when no folder was given.
 */
int serve_llama_slot_action(struct serve_slot_op *op, char **filename, const char *id, const char *action,
			    const char *body, size_t len, const struct serve_llama_info *info, struct serve_error *err);

/* The answer of a slot action done without error (malloc'd). */
char *serve_llama_slot_answer(const struct serve_slot_op *op, const char *filename);

/* Whether name may name a file in the slot folder. */
bool serve_llama_filename_ok(const char *name);

#endif
