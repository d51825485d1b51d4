/*
 * serve_ollama — Ollama's API on `colibri serve`, for the tools that already
 * point at an Ollama server (docs/api.md of ollama/ollama; the ollama npm
 * client is the test's reference): POST /api/chat and /api/generate run as
 * the OpenAI routes do, over the same parser, template, scheduler and
 * answer accumulation; only the request's JSON and the answer's shapes are
 * Ollama's. GET /api/tags, /api/ps, /api/version and POST /api/show answer
 * from what the server knows; POST /api/embed and /api/embeddings are
 * refused (no embedding is computed).
 *
 * A request is translated into the OpenAI request it means and parsed by
 * serve_request_parse, so every check of that parser holds here too:
 *   /api/chat      messages (role, content, thinking, tool_calls with
 *                  arguments as objects, tool_name), tools, format, think
 *   /api/generate  prompt (+ system) rendered as one user turn through the
 *                  model's chat template, or with raw: true the prompt as it
 *                  is (a /v1/completions request)
 *   options        temperature, top_k, top_p, min_p, seed, num_predict,
 *                  num_ctx, stop, repeat_penalty, repeat_last_n,
 *                  presence_penalty, frequency_penalty
 * Errors answer {"error": "message"} with the status (404 "model 'x' not
 * found" for another model name); a stream that fails after it began ends
 * with an {"error": ...} line, as Ollama's do.
 *
 * Streams are NDJSON (application/x-ndjson): one object a line, the last
 * one with done: true, done_reason and the durations in nanoseconds.
 * Runs on the HTTP thread that answers the request.
 */
#ifndef COLIBRI_ENGINE_SERVE_OLLAMA_H
#define COLIBRI_ENGINE_SERVE_OLLAMA_H

#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"
#include "engine/serve/serve_answer.h"
#include "engine/serve/serve_metrics.h"
#include "engine/serve/serve_request.h"

struct session;
struct serve_prompt;

/* The API level whose shapes these follow (think, tools, structured
 * outputs, done_reason): GET /api/version's answer. */
#define SERVE_OLLAMA_VERSION "0.9.0"

/* One /api/chat or /api/generate request: what the OpenAI-shaped
 * serve_request does not hold. Filled by serve_ollama_parse. */
struct serve_ollama {
	bool chat;                   /* /api/chat; else /api/generate */
	char model[256];             /* the name as the client gave it: every answer echoes it, as Ollama's do */
	double t_start;              /* clock_now_s() when the request was parsed: total_duration's start */
	int num_ctx;                 /* options.num_ctx, at most the server's context; 0: not given */
	const char *done_reason;     /* set: answer at once with this reason ("load", "unload"), nothing runs */
	char warning[512];           /* what the request asked that is ignored or clamped; "" none */
	/* A stream's progress. */
	size_t content_sent;         /* with tools: bytes of the parser's content already sent */
	size_t calls_sent;           /* with tools: parsed calls already sent */
	bool finished;               /* the last line went out */
};

/* The route of url when it is one of Ollama's (*post: it takes a body);
 * SERVE_ROUTE_OTHER otherwise. */
enum serve_route serve_ollama_route(const char *url, bool *post);

/* Whether route r is one of Ollama's: its errors take Ollama's shape. */
bool serve_ollama_is_route(enum serve_route r);

/* Whether route r answers from what the server knows (tags, ps, version,
 * show, embed), without a job: serve_ollama_info. */
bool serve_ollama_is_info(enum serve_route r);

/* What the info routes say about the served model. */
struct serve_ollama_model {
	const char *id;
	long long created;           /* modified_at */
	int ctx;                     /* the server's context */
	const struct session *s;     /* its model's config and manifest */
	const struct serve_prompt *prompt; /* capabilities: tools, thinking */
	const struct serve_limits *lim; /* sampling defaults: /api/show's parameters */
};

/*
 * Parses body[0..len) of /api/chat (chat) or /api/generate into r (as
 * serve_request_parse does; free with serve_request_free) and o, for the
 * model m serves (a name matches its id with or without ":latest").
 * Returns 0, with o->done_reason set when there is nothing to run (r is
 * then empty); or -EINVAL with err (Ollama's texts where Ollama has one:
 * 404 "model 'x' not found", 400 "model is required").
 */
int serve_ollama_parse(struct serve_ollama *o, struct serve_request *r, bool chat, const char *body, size_t len,
		       const struct serve_ollama_model *m, struct serve_error *err);

/* The whole answer of a request answered at once (o->done_reason). */
char *serve_ollama_done_json(const struct serve_ollama *o);

/* Ollama's answer shapes (serve_answer.h): the dialect context is a
 * malloc'd struct serve_ollama, freed with the answer. json: the one
 * object of a non-streamed answer; stream: NDJSON lines, content and
 * thinking as they come, each tool call once parsed, then the final object
 * (done, done_reason, the counts and durations in nanoseconds) or an
 * {"error": ...} line; error: {"error": message}. */
extern const struct serve_dialect serve_ollama_dialect;

/* The answer of info route r (GET: body NULL) as a malloc'd JSON text, or
 * NULL with err (404 for another model's name, 400 for a bad body or an
 * embedding, 500 out of memory). */
char *serve_ollama_info(enum serve_route r, const struct serve_ollama_model *m, const char *body, size_t len,
			struct serve_error *err);

#endif
