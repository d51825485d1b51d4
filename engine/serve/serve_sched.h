/*
 * serve_sched — the scheduler: one thread that owns the forward and the
 * batch (engine/decode/batch.h). HTTP threads submit jobs; the thread
 * admits them to free slots in arrival order (the slot whose history
 * shares the longest prefix with the prompt: the prompt cache), runs one
 * batched forward step for every active slot, and hands each token to its
 * job's outbox. Between steps it ends the jobs whose client left, whose
 * timeout passed or that a stop string finished, so their slots are free
 * for the next step.
 *
 * Admission is bounded: at most slots + queue_max jobs are held; past that
 * submit says -EAGAIN (429). Shutdown: queued jobs end with 503 at once,
 * running ones may finish within the grace period and are then cancelled;
 * the slots' histories and states are saved when a sessions folder is set.
 *
 * Ownership: the scheduler borrows the session and tokenizer (which must
 * outlive it) and owns its batch; serve_sched_free after serve_sched_join.
 */
#ifndef COLIBRI_ENGINE_SERVE_SCHED_H
#define COLIBRI_ENGINE_SERVE_SCHED_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/decode/batch.h"
#include "engine/serve/serve_job.h"
#include "engine/serve/serve_metrics.h"

struct session;
struct tokenizer;

struct serve_sched_options {
	int queue_max;               /* jobs waiting beyond the slots */
	const char *sessions_dir;    /* NULL: no sessions kept */
	bool no_forced_batch;        /* a grammar's forced tokens one step each */
	struct serve_live *live;     /* the dashboard's state, updated after each step; may be NULL */
};

struct serve_live;

struct serve_sched {
	struct session *s;
	struct batch b;
	bool batch_ready;
	struct serve_metrics *metrics;
	struct serve_sched_options o;
	uint64_t model_id;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;          /* the queue and the flags below */
	pthread_cond_t cv;
	struct serve_job **queue;    /* [q_cap] ring */
	int q_head, q_n, q_cap;
	int n_busy;                  /* jobs on slots */
	bool stopping;
	double grace_until;          /* while stopping: running jobs end by then */
	/* The thread's own. */
	struct serve_job **slot_job; /* [n_slots] */
	int step_tokens;
	bool step_failed;
};

/* Prepares the batch over s's forward (s->opt.parallel slots) and loads
 * saved sessions. Free with serve_sched_free, also after a failure. */
int serve_sched_init(struct serve_sched *sc, struct session *s, const struct tokenizer *tok,
		     struct serve_metrics *m, const struct serve_sched_options *o);
int serve_sched_start(struct serve_sched *sc);

/* Hands a job (its scheduler reference) over: 0; -EAGAIN when the queue is
 * full, -ESHUTDOWN when shutting down (the job is then not taken). */
int serve_sched_submit(struct serve_sched *sc, struct serve_job *j);

/* Starts the shutdown: no more jobs; running ones end within grace_s. */
void serve_sched_stop(struct serve_sched *sc, double grace_s);

/* Waits for the thread, which exits once every job ended, and saves the
 * sessions. Returns the first error of saving. */
int serve_sched_join(struct serve_sched *sc);
void serve_sched_free(struct serve_sched *sc);

/* Whether shutting down. */
bool serve_sched_stopping(struct serve_sched *sc);

#endif
