/*
 * serve — `colibri serve` put together: the listening socket, the
 * scheduler, the HTTP daemon, and the orderly shutdown on SIGINT/SIGTERM
 * (stop admitting and answer 503, let running requests finish within the
 * grace period, cancel the rest, save the sessions, exit 0).
 */
#ifndef COLIBRI_ENGINE_SERVE_H
#define COLIBRI_ENGINE_SERVE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

struct session;
struct tokenizer;

struct serve_options {
	const char *host;            /* default 127.0.0.1 */
	int port;                    /* 0: a free port, printed */
	const char *api_key;         /* NULL: none (loopback only, unless insecure_no_key) */
	bool insecure_no_key;
	const char *model_id;        /* the name clients use */
	int queue;                   /* jobs waiting beyond the slots */
	size_t body_max;
	int max_tokens;              /* cap of a request's max_tokens */
	double timeout_s;            /* of one request */
	unsigned idle_timeout_s;     /* of a silent connection */
	double grace_s;              /* shutdown: running requests may finish within it */
	int http_threads;
	const char *sessions_dir;    /* NULL: none */
	const char *slot_save_dir;   /* llama-server's --slot-save-path for /slots; NULL: sessions_dir */
	bool no_forced_batch;        /* a grammar's forced tokens one step each (for comparison) */
	int ui;                      /* the dashboard: 1 on, 0 off, -1 (default) on for a loopback host */
	const char *ui_dir;          /* its files from this folder; NULL: those compiled in */
	bool open_browser;           /* once listening, open the dashboard (xdg-open) */
};

void serve_options_default(struct serve_options *o);

/* Opens the listening socket of host:port (port 0: any free one); *port
 * receives the port bound. Refuses a non-loopback host without a key
 * unless insecure_no_key. */
int serve_listen(const struct serve_options *o, int *fd, int *port);

/* Serves the session's model until a signal of `signals` (blocked in every
 * thread by the caller before any thread started) arrives, then shuts down.
 * Prints "colibri serve: listening on http://HOST:PORT" on stdout once
 * ready (and "colibri serve: dashboard on http://HOST:PORT/" with the
 * dashboard on). 0 after an orderly shutdown. */
int serve_run(struct session *s, const struct tokenizer *tok, const struct serve_options *o, int listen_fd,
	      int port, const sigset_t *signals);

#endif
