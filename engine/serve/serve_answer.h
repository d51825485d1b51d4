/*
 * serve_answer — a job's output in OpenAI's response shapes: the whole
 * chat.completion / text_completion object, or the server-sent events of a
 * stream (chat.completion.chunk / text_completion chunks, the usage chunk,
 * an error event, data: [DONE]); plus the error, model and model-list
 * objects.
 *
 * Runs on the HTTP thread that answers the request: it allocates freely,
 * and reads the tokenizer (const, thread-safe) for the text of logprobs'
 * tokens.
 */
#ifndef COLIBRI_ENGINE_SERVE_ANSWER_H
#define COLIBRI_ENGINE_SERVE_ANSWER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"
#include "engine/serve/serve_job.h"
#include "engine/serve/serve_request.h"
#include "engine/text/tool_calls.h"

struct cJSON;
struct serve_answer;
struct tokenizer;

/*
 * A dialect writes the answer in another API's shapes (llama-server's
 * /completion: serve_llama; Ollama's /api routes). serve_answer_add still
 * gathers the output as for OpenAI (content, reasoning, tool calls through
 * the parser, logprobs when init asked for them), then calls add, if any,
 * for what the dialect keeps of its own (in a->dialect_ctx); json and
 * stream replace the OpenAI objects and chunks: stream writes everything
 * a stream sends, sets a->started with its first bytes and a->finished
 * with its last. error writes an error body in the dialect's shape; the
 * HTTP side uses it for every error of the dialect's routes.
 */
struct serve_dialect {
	const char *stream_type;     /* a stream's Content-Type ("text/event-stream", "application/x-ndjson") */
	int (*add)(struct serve_answer *a, const struct serve_take *t); /* may be NULL */
	char *(*json)(struct serve_answer *a, const struct serve_take *last);
	int (*stream)(struct serve_answer *a, const struct serve_take *t, struct strbuf *out);
	char *(*error)(const struct serve_error *e);
	void (*ctx_free)(void *ctx); /* may be NULL */
};

struct serve_answer {
	enum serve_endpoint endpoint;
	const struct tokenizer *tok;
	char id[48];
	long long created;
	const char *model;           /* borrowed */
	bool logprobs, include_usage, split;
	char *echo;                  /* completions: the prompt text to echo, or NULL */
	bool started;                /* stream: the opening chunk went out */
	bool finished;               /* stream: [DONE] went out */
	struct strbuf content, reasoning;
	struct cJSON *lp;            /* chat: [entries]; completions: {tokens, token_logprobs, ...} */
	size_t text_offset;          /* completions logprobs: bytes of text so far */
	/* Tool calls (serve_answer_tools): the content goes through the parser. */
	bool tools;
	struct cJSON *tools_json;    /* the request's tools, read for parameter types */
	struct tool_call_parser tp;
	struct strbuf tp_content;    /* stream: content the parser released in the current feed */
	struct strbuf *tp_out;       /* stream: where the current feed's chunks go */
	const struct serve_dialect *dialect; /* NULL: OpenAI's shapes */
	void *dialect_ctx;           /* the dialect's own, freed with the answer */
};

/* id is made unique from a counter and the clock. echo (may be NULL) is
 * copied. */
int serve_answer_init(struct serve_answer *a, enum serve_endpoint e, const struct tokenizer *tok, const char *model,
		      bool logprobs, bool include_usage, bool split, const char *echo);
void serve_answer_free(struct serve_answer *a);

/* Chat: tool calls written in format f are parsed out of the content into
 * message.tool_calls (stream: delta.tool_calls), finish_reason
 * "tool_calls" when there are some. tools_json is the request's tools
 * (copied). Returns 0 or -ENOMEM. */
int serve_answer_tools(struct serve_answer *a, enum tool_format f, const char *tools_json);

/* From now on the answer is written in dialect d, which owns ctx (freed by
 * serve_answer_free through d->ctx_free). */
void serve_answer_dialect(struct serve_answer *a, const struct serve_dialect *d, void *ctx);

/* An error body in d's shape (NULL: OpenAI's), malloc'd. */
char *serve_dialect_error(const struct serve_dialect *d, const struct serve_error *e);

/* Non-streamed: takes in one serve_job_take's output. */
int serve_answer_add(struct serve_answer *a, const struct serve_take *t);

/* Non-streamed, once done without error: the response body (malloc'd). */
char *serve_answer_json(struct serve_answer *a, const struct serve_take *last);

/* Streamed: appends the events of t as SSE chunks to out; when t is done,
 * the finish chunk, the usage chunk if asked, or the error event, then
 * data: [DONE]. */
int serve_answer_sse(struct serve_answer *a, const struct serve_take *t, struct strbuf *out);

/* {"error": {...}} (malloc'd). */
char *serve_json_error(const struct serve_error *e);

/* o printed unformatted (malloc'd; NULL when o is NULL or memory ran out),
 * and o deleted either way. */
char *serve_json_print(cJSON *o);
/* Appends pre, o printed, post to out (o deleted; out->rc = -ENOMEM when
 * it cannot be printed): an SSE event is ("data: ", o, "\n\n"), an NDJSON
 * line ("", o, "\n"). */
void serve_json_put(struct strbuf *out, const char *pre, cJSON *o, const char *post);

/* A model object, and the list of the one model served. */
char *serve_json_model(const char *id, long long created);
char *serve_json_models(const char *id, long long created);

#endif
