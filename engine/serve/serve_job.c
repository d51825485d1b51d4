/*
 * serve_job — see serve_job.h. The rings: events ev[(ev_head + k) %
 * ev_cap] for k < ev_n, text bytes text[(text_head + k) % text_cap] for
 * k < text_n; the composed event's bytes are already in the text ring
 * (counted in text_n) before the event itself is pushed.
 */
#include "engine/serve/serve_job.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/clock.h"

static void job_free(struct serve_job *j)
{
	serve_request_free(&j->req);
	serve_constraint_free(&j->con);
	free(j->prompt);
	free(j->ev);
	free(j->top_id);
	free(j->top_lp);
	free(j->text);
	tokenizer_stream_free(&j->ts);
	pthread_mutex_destroy(&j->mu);
	free(j);
}

static void emit(void *ctx, enum serve_text_kind kind, const char *p, size_t n)
{
	serve_job_text(ctx, kind, p, n);
}

struct serve_job *serve_job_new(struct serve_request *req, int32_t *prompt, int n_prompt,
				const struct batch_params *p, bool split, bool reasoning_open, bool harmony,
				const struct tokenizer *tok, double timeout_s, int fd)
{
	struct serve_job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	pthread_mutex_init(&j->mu, NULL);
	j->refs = 2;
	j->slot = -1;
	j->slot_wanted = -1;
	j->stop_index = -1;
	j->fd = fd;
	j->p = *p;
	j->split = split;
	j->reasoning_open = reasoning_open;
	j->t_admit = clock_now_s();
	j->deadline = j->t_admit + timeout_s;
	atomic_init(&j->cancel, false);
	/* A non-streamed answer is read as it comes too, so the rings only
	 * need to cover the time between two reads of the HTTP thread. */
	j->ev_cap = SERVE_OUTBOX_EVENTS;
	j->text_cap = SERVE_OUTBOX_TEXT;
	j->n_top_max = p->top_logprobs;
	j->ev = malloc((size_t)j->ev_cap * sizeof *j->ev);
	j->text = malloc(j->text_cap);
	if (j->n_top_max) {
		j->top_id = malloc((size_t)j->ev_cap * (size_t)j->n_top_max * sizeof *j->top_id);
		j->top_lp = malloc((size_t)j->ev_cap * (size_t)j->n_top_max * sizeof *j->top_lp);
	}
	int rc = tokenizer_stream_init(&j->ts, tok);
	if (rc || !j->ev || !j->text || (j->n_top_max && (!j->top_id || !j->top_lp))) {
		if (rc)
			memset(&j->ts, 0, sizeof j->ts);
		j->prompt = NULL;
		job_free(j);
		return NULL;
	}
	j->req = *req;
	memset(req, 0, sizeof *req);
	j->prompt = prompt;
	j->n_prompt = n_prompt;
	serve_text_init(&j->tx, j->req.stop, j->req.n_stop, split, reasoning_open, harmony, emit, j);
	j->cur.id = -1;
	return j;
}

void serve_job_unref(struct serve_job *j)
{
	if (!j)
		return;
	pthread_mutex_lock(&j->mu);
	int left = --j->refs;
	pthread_mutex_unlock(&j->mu);
	if (left == 0)
		job_free(j);
}

void serve_job_constrain(struct serve_job *j, struct serve_constraint *c)
{
	j->con = *c;
	memset(c, 0, sizeof *c);
	j->p.cs = j->con.have_cs ? &j->con.cs : NULL;
}

void serve_job_set_wake(struct serve_job *j, void (*wake)(void *), void *arg)
{
	pthread_mutex_lock(&j->mu);
	j->wake = wake;
	j->wake_arg = arg;
	pthread_mutex_unlock(&j->mu);
}

void serve_job_http_gone(struct serve_job *j)
{
	pthread_mutex_lock(&j->mu);
	j->http_gone = true;
	j->wake = NULL;
	j->waiting = false;
	pthread_mutex_unlock(&j->mu);
	atomic_store(&j->cancel, true);
}

int serve_job_take(struct serve_job *j, struct serve_take *t, void (*sleep)(void *), void *arg)
{
	t->n_ev = 0;
	t->n_text = 0;
	pthread_mutex_lock(&j->mu);
	size_t cap_ev = (size_t)t->cap_ev;
	int n = j->ev_n, k = j->n_top_max;
	size_t bytes = 0;
	for (int i = 0; i < n; i++) {
		const struct serve_event *e = &j->ev[(j->ev_head + i) % j->ev_cap];
		bytes += e->reasoning_len + e->content_len;
	}
	int rc = array_grow((void **)&t->ev, &cap_ev, (size_t)n, sizeof *t->ev);
	if (!rc && k) {
		size_t c = t->cap_top;
		rc = array_grow((void **)&t->top_id, &c, (size_t)n * (size_t)k, sizeof *t->top_id);
		c = t->cap_top;
		rc = rc ? rc : array_grow((void **)&t->top_lp, &c, (size_t)n * (size_t)k, sizeof *t->top_lp);
		if (!rc)
			t->cap_top = c;
	}
	rc = rc ? rc : array_grow((void **)&t->text, &t->cap_text, bytes + 1, 1);
	if (rc) {
		pthread_mutex_unlock(&j->mu);
		return rc;
	}
	t->cap_ev = (int)cap_ev;
	for (int i = 0; i < n; i++) {
		int at = (j->ev_head + i) % j->ev_cap;
		t->ev[i] = j->ev[at];
		if (k) {
			memcpy(t->top_id + (size_t)i * k, j->top_id + (size_t)at * k, (size_t)k * sizeof *t->top_id);
			memcpy(t->top_lp + (size_t)i * k, j->top_lp + (size_t)at * k, (size_t)k * sizeof *t->top_lp);
		}
	}
	for (size_t b = 0; b < bytes; b++)
		t->text[b] = j->text[(j->text_head + b) % j->text_cap];
	t->text[bytes] = 0;
	t->n_ev = n;
	t->n_top = k;
	t->n_text = bytes;
	j->ev_head = (j->ev_head + n) % j->ev_cap;
	j->ev_n = 0;
	j->text_head = (j->text_head + bytes) % j->text_cap;
	j->text_n -= bytes;
	t->done = j->done;
	t->finish = j->finish;
	t->error = j->error;
	t->n_prompt = j->n_prompt;
	t->n_cached = j->n_cached;
	t->n_generated = j->n_generated;
	t->slot = j->slot;
	t->stop_index = j->stop_index;
	t->queue_s = (j->t_slot ? j->t_slot : clock_now_s()) - j->t_admit;
	t->ttft_s = j->t_first ? j->t_first - j->t_admit : 0;
	t->decode_s = j->t_first ? j->t_last - j->t_first : 0;
	if (n == 0 && !j->done && sleep) {
		j->waiting = true;
		sleep(arg);
	}
	pthread_mutex_unlock(&j->mu);
	return n;
}

void serve_take_free(struct serve_take *t)
{
	free(t->ev);
	free(t->top_id);
	free(t->top_lp);
	free(t->text);
	memset(t, 0, sizeof *t);
}

static void wake_locked(struct serve_job *j)
{
	if (j->waiting && j->wake) {
		j->waiting = false;
		j->wake(j->wake_arg);
	}
}

void serve_job_text(struct serve_job *j, enum serve_text_kind kind, const char *p, size_t n)
{
	pthread_mutex_lock(&j->mu);
	if (j->text_n + n > j->text_cap) {
		j->overflow = true;
	} else {
		size_t at = (j->text_head + j->text_n) % j->text_cap;
		for (size_t i = 0; i < n; i++)
			j->text[(at + i) % j->text_cap] = p[i];
		j->text_n += n;
		if (kind == SERVE_TEXT_REASONING)
			j->cur.reasoning_len += (uint32_t)n;
		else
			j->cur.content_len += (uint32_t)n;
	}
	pthread_mutex_unlock(&j->mu);
}

void serve_job_commit(struct serve_job *j, const struct batch_token *t)
{
	pthread_mutex_lock(&j->mu);
	struct serve_event e = j->cur;
	if (t) {
		e.id = t->id;
		e.logprob = t->logprob;
		e.n_top = t->n_top < j->n_top_max ? t->n_top : j->n_top_max;
		j->n_generated++;
		j->t_last = clock_now_s();
		if (!j->t_first)
			j->t_first = j->t_last;
	}
	if (t || e.reasoning_len || e.content_len) {
		if (j->ev_n == j->ev_cap) {
			j->overflow = true;
		} else {
			int at = (j->ev_head + j->ev_n++) % j->ev_cap;
			j->ev[at] = e;
			for (int k = 0; t && k < e.n_top; k++) {
				j->top_id[(size_t)at * j->n_top_max + k] = t->top_id[k];
				j->top_lp[(size_t)at * j->n_top_max + k] = t->top_logprob[k];
			}
			wake_locked(j);
		}
	}
	j->cur = (struct serve_event){ .id = -1 };
	pthread_mutex_unlock(&j->mu);
}

void serve_job_end(struct serve_job *j, enum serve_finish finish, const struct serve_error *e)
{
	pthread_mutex_lock(&j->mu);
	j->done = true;
	j->finish = finish;
	j->stop_index = j->tx.stop_index;
	if (e)
		j->error = *e;
	wake_locked(j);
	pthread_mutex_unlock(&j->mu);
}

bool serve_job_client_gone(struct serve_job *j)
{
	if (atomic_load(&j->cancel))
		return true;
	bool gone = false;
	pthread_mutex_lock(&j->mu);
	if (!j->http_gone && j->fd >= 0) {
		struct pollfd pf = { .fd = j->fd, .events = POLLIN | POLLRDHUP };
		gone = poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
	}
	pthread_mutex_unlock(&j->mu);
	return gone;
}
