/*
 * serve_job — one admitted request, shared by the HTTP thread that answers
 * it and the scheduler thread that runs it.
 *
 * The HTTP thread makes the job (serve_job_new: everything the request will
 * need is allocated here, at admission), submits it and then reads its
 * output with serve_job_take. The scheduler writes the output through the
 * job's outbox: a bounded ring of token events and a bounded ring of text
 * bytes. The scheduler never waits on a client: when a ring is full the
 * client is not keeping up and the job ends with an error (the connection
 * is then dropped).
 *
 * Lifetime: two references, the HTTP side's and the scheduler's; each side
 * drops its own with serve_job_unref, the last one frees. mu guards the
 * outbox and the flags below it; the fields above it are written before
 * submission and only read afterwards.
 */
#ifndef COLIBRI_ENGINE_SERVE_JOB_H
#define COLIBRI_ENGINE_SERVE_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/decode/batch.h"
#include "engine/serve/serve_constraint.h"
#include "engine/serve/serve_request.h"
#include "engine/serve/serve_text.h"
#include "engine/text/tokenizer.h"

#define SERVE_OUTBOX_EVENTS 1024     /* token events not yet taken */
#define SERVE_OUTBOX_TEXT (1u << 20) /* text bytes not yet taken */

enum serve_finish {
	SERVE_FINISH_NONE = 0,
	SERVE_FINISH_STOP,           /* EOS or a stop string */
	SERVE_FINISH_LENGTH,         /* max_tokens, or the context is full */
	SERVE_FINISH_ERROR,          /* the job's error says what */
};

/* One generated token and the text released with it (reasoning bytes, then
 * content bytes, in the text ring). id -1: text released at the end. */
struct serve_event {
	int32_t id;
	float logprob;
	int n_top;
	uint32_t reasoning_len, content_len;
};

/* What serve_job_take copies out; the caller owns and reuses it
 * (serve_take_free). */
struct serve_take {
	struct serve_event *ev;
	int n_ev, cap_ev;
	int n_top;                   /* the stride of top_id / top_lp: the job's n_top_max */
	int32_t *top_id;             /* [n_ev, n_top] */
	float *top_lp;
	size_t cap_top;
	char *text;
	size_t n_text, cap_text;
	bool done;
	enum serve_finish finish;
	struct serve_error error;
	int n_prompt, n_cached, n_generated;
	int slot;                    /* the slot it runs on; -1 while queued */
	int stop_index;              /* done: the stop string (req.stop[i]) that ended it; -1 none */
	double queue_s;              /* admission to a slot (so far, while queued) */
	double ttft_s;               /* admission to the first token; 0 before it */
	double decode_s;             /* the first token to the last */
};

struct serve_job {
	struct serve_request req;    /* owns the stop strings the text pipeline borrows */
	int32_t *prompt;             /* [n_prompt] */
	int n_prompt;
	struct batch_params p;       /* n_predict set; p.cs points into con when constrained */
	struct serve_constraint con; /* the output's grammar (serve_job_constrain), freed with the job */
	bool split;                  /* reasoning apart from content */
	bool reasoning_open;
	double t_admit;              /* clock_now_s() at admission */
	double deadline;             /* t_admit + the request timeout */
	int fd;                      /* the client's socket, for disconnect checks; -1 none */
	int slot_wanted;             /* the slot it must run on (llama-server's id_slot); -1 any */
	bool no_cache;               /* prefill the whole prompt (llama-server's cache_prompt false) */
	/* Written by the HTTP side, read by the scheduler. */
	atomic_bool cancel;          /* the client is gone */

	pthread_mutex_t mu;
	int refs;
	bool http_gone;              /* the HTTP side has let go: fd is not to be used */
	struct serve_event *ev;      /* [ev_cap] ring */
	int ev_cap, ev_head, ev_n;
	int n_top_max;
	int32_t *top_id;             /* [ev_cap, n_top_max] */
	float *top_lp;
	char *text;                  /* [text_cap] ring */
	size_t text_cap, text_head, text_n;
	struct serve_event cur;      /* being composed by the scheduler */
	bool overflow;               /* a ring was full */
	bool done;
	enum serve_finish finish;
	struct serve_error error;
	int stop_index;
	int n_cached, n_generated;
	double t_slot;               /* when it got a slot; 0 while queued */
	double t_first, t_last;      /* its first and its latest token; 0 before */
	bool waiting;                /* the HTTP side sleeps until wake */
	void (*wake)(void *arg);     /* called with mu held */
	void *wake_arg;

	/* The scheduler's own. */
	int slot;                    /* -1 while queued (written under mu) */
	bool first_token_seen;
	bool stop_hit;
	enum serve_finish pending;   /* how the current step ended it */
	struct serve_error failed;   /* why, when the grammar admitted no token (status 0: it did not) */
	struct tokenizer_stream ts;
	struct serve_text tx;
};

/* Makes a job of refs 2 for a parsed request (moved into the job: *req is
 * emptied) and its prompt ids (moved too); split, reasoning_open and harmony
 * go to its serve_text. NULL when out of memory. */
struct serve_job *serve_job_new(struct serve_request *req, int32_t *prompt, int n_prompt,
				const struct batch_params *p, bool split, bool reasoning_open, bool harmony,
				const struct tokenizer *tok, double timeout_s, int fd);
void serve_job_unref(struct serve_job *j);

/* Before submission: the job takes over *c (emptied) and its sampling
 * follows c's grammar. */
void serve_job_constrain(struct serve_job *j, struct serve_constraint *c);

/* HTTP side: sets how the scheduler wakes the reader (called with mu held). */
void serve_job_set_wake(struct serve_job *j, void (*wake)(void *), void *arg);

/* HTTP side: copies out everything produced since the last take. When
 * nothing is there and the job is not done, calls sleep(arg) with mu held
 * (so no wake can be missed) and marks the job waiting; wake is then called
 * once more output arrives. Returns the number of events copied; -ENOMEM. */
int serve_job_take(struct serve_job *j, struct serve_take *t, void (*sleep)(void *), void *arg);
void serve_take_free(struct serve_take *t);

/* HTTP side: the client is gone or its connection closed; the fd is not
 * to be used any more. */
void serve_job_http_gone(struct serve_job *j);

/* Scheduler side: text for the event being composed. */
void serve_job_text(struct serve_job *j, enum serve_text_kind kind, const char *p, size_t n);

/* Scheduler side: ends the event being composed with token t (NULL: text
 * released at the end, sent only when there is some). */
void serve_job_commit(struct serve_job *j, const struct batch_token *t);

/* Scheduler side: the job is done (an error: status and message in e). */
void serve_job_end(struct serve_job *j, enum serve_finish finish, const struct serve_error *e);

/* Scheduler side: whether the client has gone (cancelled, or its socket
 * closed: checked with a non-blocking poll). */
bool serve_job_client_gone(struct serve_job *j);

#endif
