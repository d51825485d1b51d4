/*
 * serve_sched — see serve_sched.h. Lock order: sched.mu before a job's mu;
 * the HTTP side takes sched.mu only in submit and stop, never while it
 * holds a job's mu. A job on a slot is touched by this thread alone (its
 * outbox through serve_job_*), so the token callback runs without sched.mu.
 * The step allocates nothing: the callback decodes into the job's stream
 * and text pipeline and writes into its rings, all sized at admission.
 */
#include "engine/serve/serve_sched.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/files.h"
#include "engine/decode/session.h"
#include "engine/serve/serve_live.h"

static void session_path(const struct serve_sched *sc, int i, char *out, size_t n)
{
	snprintf(out, n, "%s/%016" PRIx64 "-slot%d.session", sc->o.sessions_dir, sc->model_id, i);
}

static void on_token(void *ctx, int slot, const struct batch_token *t, enum batch_finish fin)
{
	struct serve_sched *sc = ctx;
	struct serve_job *j = sc->slot_job[slot];
	if (!j)
		return;
	if (t && !j->first_token_seen) {
		j->first_token_seen = true;
		serve_metrics_ttft(sc->metrics, clock_now_s() - j->t_admit);
	}
	if (t && !t->eos) {
		if (!j->stop_hit) {
			const char *text = NULL;
			size_t len = 0;
			if (tokenizer_stream_put(&j->ts, t->id, &text, &len) == 0 && len)
				j->stop_hit = serve_text_put(&j->tx, text, len);
		}
		serve_job_commit(j, t);
		sc->step_tokens++;
		if (j->overflow) {
			j->pending = SERVE_FINISH_ERROR;
		} else if (j->stop_hit) {
			j->pending = SERVE_FINISH_STOP;
		}
		if (j->pending && fin == BATCH_RUNNING) {
			batch_finish(&sc->b, slot);
			return;
		}
	}
	if (fin != BATCH_RUNNING && !j->pending)
		j->pending = fin == BATCH_EOS ? SERVE_FINISH_STOP
			   : fin == BATCH_LENGTH ? SERVE_FINISH_LENGTH : SERVE_FINISH_ERROR;
	if (fin == BATCH_STOPPED && !t)
		sc->step_failed = true;
	if (fin == BATCH_GRAMMAR && j->p.cs && j->p.cs->too_wide) {
		/* The request's grammar, found too wide only where the output
		 * reached it (constrain.h): its fault, as a refusal at
		 * admission would have been. */
		serve_error_set(&j->failed, 400, NULL, "grammar_too_wide", "%s", error_message());
		error_clear();
		j->pending = SERVE_FINISH_ERROR;
	} else if (fin == BATCH_GRAMMAR) {
		serve_error_set(&j->failed, 500, NULL, "grammar_dead_end", "the output's grammar admits no token: %s",
				error_message()[0] ? error_message() : "no token continues it");
		error_clear();
		j->pending = SERVE_FINISH_ERROR;
	}
}

int serve_sched_init(struct serve_sched *sc, struct session *s, const struct tokenizer *tok,
		     struct serve_metrics *m, const struct serve_sched_options *o)
{
	memset(sc, 0, sizeof *sc);
	sc->s = s;
	sc->metrics = m;
	sc->o = *o;
	sc->model_id = manifest_model_id(&s->model.man);
	pthread_mutex_init(&sc->mu, NULL);
	pthread_cond_init(&sc->cv, NULL);
	int rc = batch_init(&sc->b, &s->fwd, tok, on_token, sc);
	if (rc)
		return rc;
	sc->batch_ready = true;
	sc->b.forced_batch = !o->no_forced_batch;
	sc->q_cap = sc->b.n_slots + o->queue_max;
	sc->queue = calloc((size_t)sc->q_cap, sizeof *sc->queue);
	sc->slot_job = calloc((size_t)sc->b.n_slots, sizeof *sc->slot_job);
	sc->slot_stuck = calloc((size_t)sc->b.n_slots, sizeof *sc->slot_stuck);
	if (!sc->queue || !sc->slot_job || !sc->slot_stuck)
		return error_set(ENOMEM, "out of memory");
	if (!o->sessions_dir)
		return 0;
	if (mkdir(o->sessions_dir, 0755) != 0 && errno != EEXIST)
		return error_set(errno, "%s: cannot create the sessions folder: %s", o->sessions_dir, strerror(errno));
	for (int i = 0; i < sc->b.n_slots; i++) {
		char path[PATH_MAX];
		session_path(sc, i, path, sizeof path);
		if (access(path, F_OK) != 0)
			continue;
		if (batch_load(&sc->b, i, sc->model_id, path) != 0) {
			/* As chat does: a refused file is kept aside for the user,
			 * never deleted by the empty slot's shutdown below. */
			char why[1024], aside[PATH_MAX + 16];
			snprintf(why, sizeof why, "%s", error_message());
			error_clear();
			if (file_put_aside(path, aside, sizeof aside) == 0) {
				fprintf(stderr, "colibri serve: warning: %s; the file is kept as %s; slot %d starts empty\n",
					why, aside, i);
			} else {
				fprintf(stderr, "colibri serve: warning: %s; %s, so it stays where it is and slot %d, which "
						"starts empty, is not saved over it\n", why, error_message(), i);
				sc->slot_stuck[i] = true;
			}
			error_clear();
		} else {
			fprintf(stderr, "colibri serve: slot %d: %d tokens from %s\n", i, sc->b.slots[i].n_tokens, path);
		}
	}
	return 0;
}

/* Ends job j for good: releases what the text pipeline holds, marks it
 * done and drops the scheduler's reference. */
static void job_close(struct serve_sched *sc, struct serve_job *j, enum serve_finish fin, const struct serve_error *e)
{
	if (fin != SERVE_FINISH_ERROR) {
		const char *text = NULL;
		size_t len = 0;
		if (!j->stop_hit && tokenizer_stream_flush(&j->ts, &text, &len) == 0 && len)
			j->stop_hit = serve_text_put(&j->tx, text, len);
		serve_text_flush(&j->tx);
		serve_job_commit(j, NULL);
		if (j->overflow) {
			fin = SERVE_FINISH_ERROR;
			e = NULL;
		}
	}
	struct serve_error drop;
	if (fin == SERVE_FINISH_ERROR && !e) {
		serve_error_set(&drop, 500, NULL, "client_too_slow", "the client did not read the answer fast enough");
		e = &drop;
		serve_metrics_drop(sc->metrics);
	}
	serve_job_end(j, fin, e);
	serve_metrics_job_done(sc->metrics, clock_now_s() - j->t_admit);
	if (j->slot >= 0) {
		sc->slot_job[j->slot] = NULL;
		pthread_mutex_lock(&sc->mu);
		sc->n_busy--;
		pthread_mutex_unlock(&sc->mu);
	}
	serve_job_unref(j);
}

/* Forgets free slot i's history and state: the next request prefills all
 * of its prompt. Returns the tokens it held. */
static int slot_erase(struct serve_sched *sc, int i)
{
	int n = sc->b.slots[i].n_tokens;
	sc->b.slots[i].n_tokens = 0;
	seq_state_reset(&sc->b.f->seqs[i]);
	return n;
}

/* Marks op done with its results set, and wakes its HTTP side. */
static void slot_op_finish(struct serve_slot_op *op)
{
	pthread_mutex_lock(&op->mu);
	op->done = true;
	if (op->waiting && op->wake) {
		op->waiting = false;
		op->wake(op->wake_arg);
	}
	pthread_mutex_unlock(&op->mu);
}

static void slot_op_fail(struct serve_slot_op *op, int rc, int status, const char *what)
{
	op->rc = rc;
	op->status = status;
	snprintf(op->error, sizeof op->error, "%s", what);
}

/* Runs op on this thread; its slot is free (or op is LIST). */
static void slot_op_run(struct serve_sched *sc, struct serve_slot_op *op)
{
	double t0 = clock_now_s();
	struct stat st;
	int rc = 0;
	switch (op->action) {
	case SERVE_SLOT_LIST:
		for (int i = 0; i < sc->b.n_slots; i++) {
			const struct batch_slot *b = &sc->b.slots[i];
			op->info[i] = (struct serve_slot_info){
				.processing = sc->slot_job[i] != NULL, .n_history = b->n_tokens, .n_prompt = b->n_prompt,
				.n_cached = b->n_cached, .n_generated = b->n_generated, .p = b->p,
			};
			op->info[i].p.cs = NULL;
		}
		break;
	case SERVE_SLOT_SAVE:
		op->n_tokens = sc->b.slots[op->slot].n_tokens;
		rc = batch_save(&sc->b, op->slot, sc->model_id, op->path);
		if (!rc && stat(op->path, &st) == 0)
			op->bytes = (uint64_t)st.st_size;
		break;
	case SERVE_SLOT_RESTORE:
		if (stat(op->path, &st) != 0) {
			/* A name that names nothing is the client's mistake (400, as llama-server answers). */
			char why[sizeof op->error];
			rc = -errno;
			snprintf(why, sizeof why, "%.400s: %s", op->path, strerror(-rc));
			slot_op_fail(op, rc, rc == -ENOENT ? 400 : 500, why);
			break;
		}
		rc = batch_load(&sc->b, op->slot, sc->model_id, op->path);
		op->n_tokens = sc->b.slots[op->slot].n_tokens;
		op->bytes = (uint64_t)st.st_size;
		break;
	case SERVE_SLOT_ERASE:
		op->n_tokens = slot_erase(sc, op->slot);
		break;
	}
	if (rc && !op->rc) {
		/* A file that is not a session of this model and context is the
		 * client's mistake; a failed write is the server's. */
		slot_op_fail(op, rc, op->action == SERVE_SLOT_RESTORE && rc == -EINVAL ? 400 : 500,
			     error_message()[0] ? error_message() : strerror(-rc));
		error_clear();
	}
	op->seconds = clock_now_s() - t0;
}

/* Runs the slot actions whose slot is free; the others wait, first in the
 * queue, for the next turn. */
static void slot_ops(struct serve_sched *sc)
{
	pthread_mutex_lock(&sc->mu);
	struct serve_slot_op *todo = sc->ops, *later = NULL, **tail = &later;
	sc->ops = NULL;
	pthread_mutex_unlock(&sc->mu);
	while (todo) {
		struct serve_slot_op *op = todo;
		todo = op->next;
		op->next = NULL;
		if (op->action != SERVE_SLOT_LIST && sc->slot_job[op->slot]) {
			*tail = op;
			tail = &op->next;
			continue;
		}
		slot_op_run(sc, op);
		slot_op_finish(op);
	}
	if (!later)
		return;
	pthread_mutex_lock(&sc->mu);
	*tail = sc->ops;
	sc->ops = later;
	pthread_mutex_unlock(&sc->mu);
}

/* Starts queued jobs on free slots; with sc->mu held. */
static void admit(struct serve_sched *sc)
{
	while (sc->q_n > 0 && sc->n_busy < sc->b.n_slots) {
		struct serve_job *j = sc->queue[sc->q_head];
		/* A job that asked for a slot waits at the head until that slot is
		 * free, as llama-server defers it: the order of arrival holds. */
		if (j->slot_wanted >= 0 && sc->slot_job[j->slot_wanted] && !atomic_load(&j->cancel))
			break;
		sc->q_head = (sc->q_head + 1) % sc->q_cap;
		sc->q_n--;
		if (atomic_load(&j->cancel)) {
			struct serve_error e;
			serve_error_set(&e, 499, NULL, "client_closed", "the client closed the connection");
			serve_metrics_drop(sc->metrics);
			job_close(sc, j, SERVE_FINISH_ERROR, &e);
			continue;
		}
		int slot = j->slot_wanted >= 0 ? j->slot_wanted : batch_pick(&sc->b, j->prompt, j->n_prompt), cached = 0;
		if (slot >= 0 && j->no_cache)
			slot_erase(sc, slot);
		int rc = slot < 0 ? -EBUSY : batch_start(&sc->b, slot, j->prompt, j->n_prompt, &j->p, j, &cached);
		if (rc) {
			struct serve_error e;
			serve_error_set(&e, rc == -ENOSPC ? 400 : 500, NULL, rc == -ENOSPC ? "context_length_exceeded" : NULL,
					"%s", error_message()[0] ? error_message() : "the request could not start");
			error_clear();
			job_close(sc, j, SERVE_FINISH_ERROR, &e);
			continue;
		}
		sc->slot_job[slot] = j;
		sc->n_busy++;
		pthread_mutex_lock(&j->mu);
		j->slot = slot; /* under mu: serve_job_take reports it */
		j->n_cached = cached;
		j->t_slot = clock_now_s();
		pthread_mutex_unlock(&j->mu);
		serve_metrics_prompt(sc->metrics, j->n_prompt - cached, cached);
	}
}

/* Ends the queued jobs whose client left or whose time is up; with sc->mu
 * held. The ring is compacted in place, keeping the order. */
static void sweep_queue(struct serve_sched *sc)
{
	double now = clock_now_s();
	int kept = 0;
	for (int k = 0; k < sc->q_n; k++) {
		struct serve_job *j = sc->queue[(sc->q_head + k) % sc->q_cap];
		bool gone = serve_job_client_gone(j), late = now > j->deadline;
		if (!gone && !late) {
			sc->queue[(sc->q_head + kept++) % sc->q_cap] = j;
			continue;
		}
		struct serve_error e;
		if (gone) {
			serve_error_set(&e, 499, NULL, "client_closed", "the client closed the connection");
			serve_metrics_drop(sc->metrics);
		} else {
			serve_error_set(&e, 504, NULL, "timeout", "the request waited past the server's time limit");
		}
		job_close(sc, j, SERVE_FINISH_ERROR, &e);
	}
	sc->q_n = kept;
}

/* Before a step: ends the jobs whose client left or whose time is up. */
static void check_jobs(struct serve_sched *sc, bool cancel_all)
{
	double now = clock_now_s();
	for (int i = 0; i < sc->b.n_slots; i++) {
		struct serve_job *j = sc->slot_job[i];
		if (!j)
			continue;
		struct serve_error e;
		bool gone = serve_job_client_gone(j);
		if (gone)
			serve_metrics_drop(sc->metrics);
		if (!gone && now > j->deadline)
			serve_error_set(&e, 504, NULL, "timeout", "the request ran past the server's time limit");
		else if (!gone && cancel_all)
			serve_error_set(&e, 503, NULL, "shutting_down", "the server is shutting down");
		else if (!gone)
			continue;
		else
			serve_error_set(&e, 499, NULL, "client_closed", "the client closed the connection");
		batch_finish(&sc->b, i);
		job_close(sc, j, SERVE_FINISH_ERROR, &e);
	}
}

/* After a step: closes the jobs it finished. */
static void finish_jobs(struct serve_sched *sc, int step_rc)
{
	for (int i = 0; i < sc->b.n_slots; i++) {
		struct serve_job *j = sc->slot_job[i];
		if (!j || !j->pending)
			continue;
		struct serve_error e, *ep = j->failed.status ? &j->failed : NULL;
		if (!ep && j->pending == SERVE_FINISH_ERROR && step_rc < 0) {
			serve_error_set(&e, 500, NULL, "engine_error", "the model failed: %s",
					error_message()[0] ? error_message() : strerror(-step_rc));
			ep = &e;
		}
		job_close(sc, j, j->pending, ep);
	}
}

static void *sched_main(void *arg)
{
	struct serve_sched *sc = arg;
	for (;;) {
		pthread_mutex_lock(&sc->mu);
		while (!sc->stopping && sc->q_n == 0 && sc->n_busy == 0 && !sc->ops)
			pthread_cond_wait(&sc->cv, &sc->mu);
		if (sc->ops && !sc->stopping) {
			pthread_mutex_unlock(&sc->mu);
			slot_ops(sc); /* before admission: a slot restored serves the requests after it */
			pthread_mutex_lock(&sc->mu);
		}
		bool cancel_all = false;
		if (sc->stopping) {
			struct serve_error e;
			serve_error_set(&e, 503, NULL, "shutting_down", "the server is shutting down");
			while (sc->ops) {
				struct serve_slot_op *op = sc->ops;
				sc->ops = op->next;
				slot_op_fail(op, -ESHUTDOWN, 503, "the server is shutting down");
				slot_op_finish(op);
			}
			while (sc->q_n > 0) {
				struct serve_job *j = sc->queue[sc->q_head];
				sc->q_head = (sc->q_head + 1) % sc->q_cap;
				sc->q_n--;
				job_close(sc, j, SERVE_FINISH_ERROR, &e);
			}
			cancel_all = clock_now_s() >= sc->grace_until;
		} else {
			sweep_queue(sc);
			admit(sc);
		}
		int busy = sc->n_busy, queued = sc->q_n;
		bool quit = sc->stopping && busy == 0;
		pthread_mutex_unlock(&sc->mu);
		if (quit)
			break;
		check_jobs(sc, cancel_all);
		sc->step_tokens = 0;
		sc->step_failed = false;
		double t0 = clock_now_s();
		bool stepped = batch_active(&sc->b);
		int rc = stepped ? batch_step(&sc->b) : 0;
		double t1 = clock_now_s();
		finish_jobs(sc, rc);
		if (rc < 0) {
			fprintf(stderr, "colibri serve: a step failed: %s\n", error_message()[0] ? error_message() : strerror(-rc));
			error_clear();
		}
		serve_metrics_step(sc->metrics, sc->step_tokens, batch_active(&sc->b), queued, rc < 0,
				   stepped ? t1 - t0 : 0, sc->s, t1);
		session_safe_point(sc->s);
		if (sc->o.live)
			serve_live_step(sc->o.live, sc->s, stepped);
	}
	return NULL;
}

int serve_sched_start(struct serve_sched *sc)
{
	int rc = pthread_create(&sc->thread, NULL, sched_main, sc);
	if (rc)
		return error_set(rc, "cannot start the scheduler thread");
	sc->started = true;
	return 0;
}

int serve_sched_submit(struct serve_sched *sc, struct serve_job *j)
{
	int rc = 0;
	pthread_mutex_lock(&sc->mu);
	if (sc->stopping)
		rc = -ESHUTDOWN;
	else if (sc->q_n + sc->n_busy >= sc->q_cap || sc->q_n == sc->q_cap)
		rc = -EAGAIN;
	if (!rc) {
		sc->queue[(sc->q_head + sc->q_n++) % sc->q_cap] = j;
		pthread_cond_signal(&sc->cv);
	}
	int queued = sc->q_n;
	pthread_mutex_unlock(&sc->mu);
	pthread_mutex_lock(&sc->metrics->mu);
	sc->metrics->queue_len = queued;
	pthread_mutex_unlock(&sc->metrics->mu);
	return rc;
}

void serve_slot_op_init(struct serve_slot_op *op, enum serve_slot_action action, int slot, void (*wake)(void *),
			void *arg)
{
	memset(op, 0, sizeof *op);
	op->action = action;
	op->slot = slot;
	op->wake = wake;
	op->wake_arg = arg;
	pthread_mutex_init(&op->mu, NULL);
}

void serve_slot_op_destroy(struct serve_slot_op *op)
{
	pthread_mutex_destroy(&op->mu);
}

int serve_sched_slot_op(struct serve_sched *sc, struct serve_slot_op *op)
{
	pthread_mutex_lock(&sc->mu);
	int rc = sc->stopping ? -ESHUTDOWN : 0;
	if (!rc) {
		struct serve_slot_op **tail = &sc->ops;
		while (*tail)
			tail = &(*tail)->next;
		op->next = NULL;
		*tail = op;
		pthread_cond_signal(&sc->cv);
	}
	pthread_mutex_unlock(&sc->mu);
	return rc;
}

bool serve_slot_op_done(struct serve_slot_op *op, void (*sleep)(void *), void *arg)
{
	pthread_mutex_lock(&op->mu);
	bool done = op->done;
	if (!done) {
		op->waiting = true;
		sleep(arg);
	}
	pthread_mutex_unlock(&op->mu);
	return done;
}

void serve_sched_stop(struct serve_sched *sc, double grace_s)
{
	pthread_mutex_lock(&sc->mu);
	double until = clock_now_s() + grace_s;
	if (!sc->stopping || until < sc->grace_until)
		sc->grace_until = until;
	sc->stopping = true;
	pthread_cond_signal(&sc->cv);
	pthread_mutex_unlock(&sc->mu);
}

bool serve_sched_stopping(struct serve_sched *sc)
{
	pthread_mutex_lock(&sc->mu);
	bool s = sc->stopping;
	pthread_mutex_unlock(&sc->mu);
	return s;
}

int serve_sched_join(struct serve_sched *sc)
{
	if (sc->started)
		pthread_join(sc->thread, NULL);
	sc->started = false;
	if (!sc->o.sessions_dir || !sc->batch_ready)
		return 0;
	int first = 0;
	for (int i = 0; i < sc->b.n_slots; i++) {
		char path[PATH_MAX];
		session_path(sc, i, path, sizeof path);
		if (sc->slot_stuck[i])
			continue;
		if (sc->b.slots[i].n_tokens == 0) {
			unlink(path);
			continue;
		}
		int rc = batch_save(&sc->b, i, sc->model_id, path);
		if (rc) {
			fprintf(stderr, "colibri serve: %s\n", error_message());
			error_clear();
			first = first ? first : rc;
		}
	}
	return first;
}

void serve_sched_free(struct serve_sched *sc)
{
	if (sc->batch_ready)
		batch_free(&sc->b);
	free(sc->queue);
	free(sc->slot_job);
	free(sc->slot_stuck);
	pthread_mutex_destroy(&sc->mu);
	pthread_cond_destroy(&sc->cv);
	memset(sc, 0, sizeof *sc);
}
