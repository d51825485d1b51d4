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
 * A slot's file refused at start (truncated, corrupt, another model's) is
 * renamed aside as chat's are (FILE.refused, .refused.2, ...), never deleted.
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

/*
 * A slot action of llama-server's /slots API, run by the scheduler thread
 * between steps, since the batch is its own. SAVE, RESTORE and ERASE wait
 * while the slot runs a request (llama-server defers them the same way);
 * LIST does not wait. SAVE and RESTORE are batch_save / batch_load of the
 * slot (the session file format); a slot restored holds the saved history
 * and state, so a request whose prompt starts with that history prefills
 * only what follows it.
 */
enum serve_slot_action { SERVE_SLOT_LIST = 0, SERVE_SLOT_SAVE, SERVE_SLOT_RESTORE, SERVE_SLOT_ERASE };

/* One slot as LIST sees it: its current request, or the last one. */
struct serve_slot_info {
	bool processing;             /* a request runs on it */
	int n_history;               /* tokens its sequence state holds */
	int n_prompt, n_cached, n_generated;
	struct batch_params p;       /* p.cs is not to be read */
};

/*
 * The HTTP side owns the op (it must outlive the action: the scheduler
 * answers every op it took, also at shutdown, before its thread ends) and
 * inits it with serve_slot_op_init. mu guards done and waiting; the
 * results are written before done is set and read after.
 */
struct serve_slot_op {
	enum serve_slot_action action;
	int slot;
	char path[4096];             /* SAVE, RESTORE: the file */
	struct serve_slot_info *info; /* LIST: [the scheduler's slots], the caller's */
	int rc;                      /* 0, or -errno with status and error saying why */
	int status;                  /* the HTTP status of a failure */
	char error[512];
	int n_tokens;                /* saved, restored or erased */
	uint64_t bytes;              /* written or read */
	double seconds;
	pthread_mutex_t mu;
	bool done, waiting;
	void (*wake)(void *arg);     /* called with mu held once done, when the HTTP side sleeps */
	void *wake_arg;
	struct serve_slot_op *next;  /* the scheduler's queue */
};

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
	struct serve_slot_op *ops;   /* slot actions not yet done, in arrival order */
	/* The thread's own. */
	struct serve_job **slot_job; /* [n_slots] */
	bool *slot_stuck;            /* [n_slots] its file was refused and could not be renamed aside: left alone */
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

/* A slot action op for slot (ignored by LIST); wake(arg) resumes the
 * HTTP side. serve_slot_op_destroy once done (or never submitted). */
void serve_slot_op_init(struct serve_slot_op *op, enum serve_slot_action action, int slot, void (*wake)(void *),
			void *arg);
void serve_slot_op_destroy(struct serve_slot_op *op);

/* Hands op over: 0; -ESHUTDOWN when shutting down (op is then not taken). */
int serve_sched_slot_op(struct serve_sched *sc, struct serve_slot_op *op);

/* HTTP side: true once op is done; else calls sleep(arg) with op->mu held
 * (so no wake is missed) and op->wake follows once it is. */
bool serve_slot_op_done(struct serve_slot_op *op, void (*sleep)(void *), void *arg);

#endif
