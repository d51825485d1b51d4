/*
 * serve_http — the HTTP side of `colibri serve`, on libmicrohttpd: a pool
 * of threads polling with epoll, one request at a time per connection.
 *
 * Routes: GET /health (no key needed), GET /metrics, GET /v1/models,
 * GET /v1/models/{id}, POST /v1/chat/completions, POST /v1/completions;
 * llama-server's POST /completion, /tokenize, /detokenize, GET /props,
 * GET /slots, POST /slots/{id}?action=... (serve_llama.h); Ollama's
 * POST /api/chat, /api/generate, /api/show, /api/embed, /api/embeddings,
 * GET /api/tags, /api/ps, /api/version (serve_ollama.h);
 * with the dashboard on (docs/DASHBOARD.md), GET / and /ui/NAME (its static
 * files, no key needed), GET /api/state and the event stream GET /api/live.
 * Errors answer in OpenAI's shape (the llama-server and Ollama routes in
 * theirs): 400 bad field, 401 bad key, 404 unknown
 * path or model, 405 wrong method, 413 body too large, 429 queue full (with
 * Retry-After), 500 engine failure, 503 shutting down, 504 timeout.
 *
 * A completion request is parsed, rendered and tokenized on the HTTP
 * thread, then handed to the scheduler as a job. The connection is then
 * suspended while the job has nothing new, and resumed by the scheduler
 * (through the job's wake) when it has: a non-streamed answer gathers the
 * output and responds once done; a stream is a chunked response whose
 * reader callback turns the output into server-sent events. No HTTP thread
 * ever blocks waiting for tokens.
 */
#ifndef COLIBRI_ENGINE_SERVE_HTTP_H
#define COLIBRI_ENGINE_SERVE_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/model/model_config.h"
#include "engine/serve/serve_metrics.h"
#include "engine/serve/serve_prompt.h"
#include "engine/serve/serve_request.h"
#include "engine/serve/serve_sched.h"

struct MHD_Daemon;
struct tokenizer;

struct serve_http_options {
	int listen_fd;               /* bound and listening; the daemon takes it over */
	const char *api_key;         /* NULL: no key asked */
	const char *model_id;
	long long created;           /* the model object's created time */
	size_t body_max;             /* bytes of a request body */
	int ctx;                     /* positions of a slot: prompt + max_tokens must fit */
	double timeout_s;            /* of one request, from admission */
	unsigned idle_timeout_s;     /* a connection that sends nothing is closed */
	int threads;                 /* HTTP threads */
	struct serve_limits lim;
	int32_t eos[MODEL_EOS_MAX + 1]; /* ids that end an output: a grammar admits them only when complete */
	int n_eos;
	struct serve_live *live;     /* the dashboard's state; NULL: no dashboard */
	const char *ui_dir;          /* its files from this folder instead of the binary; NULL: embedded */
	const char *model_path;      /* the model's folder (llama-server's /props) */
	const char *slot_save_dir;   /* where /slots saves and restores; NULL: refused */
};

struct grammar_vocab;

struct serve_http {
	struct MHD_Daemon *d;
	struct serve_http_options o;
	struct serve_sched *sched;
	struct serve_metrics *metrics;
	const struct serve_prompt *prompt;
	const struct tokenizer *tok;
	struct grammar_vocab *vocab; /* tok's tokens for the masks of constrained requests */
	atomic_bool stopping;
	atomic_int jobs_open;        /* requests holding a job (answers not yet sent) */
};

/* Starts the daemon on o->listen_fd. Everything passed must outlive it. */
int serve_http_start(struct serve_http *h, const struct serve_http_options *o, struct serve_sched *sched,
		     struct serve_metrics *metrics, const struct serve_prompt *prompt, const struct tokenizer *tok);

/* From now on every request gets 503. */
void serve_http_refuse(struct serve_http *h);

/* Waits up to wait_s for the answers of jobs still being sent, then stops
 * the daemon and closes its connections. Every job must have ended (the
 * scheduler joined), so that no connection is left suspended. */
void serve_http_stop(struct serve_http *h, double wait_s);

#endif
