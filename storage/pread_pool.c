/*
 * pread_pool — fallback reader threads for io_ring (see pread_pool.h).
 *
 * One mutex guards both queues; workers sleep on `work`, the reaping thread
 * on `done`. Both queues are rings of `cap` slots, which is enough because
 * io_ring keeps at most `cap` ops inside the pool.
 */
#include "storage/pread_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define PREAD_POOL_THREADS_MAX 8

struct pread_pool {
	pthread_mutex_t mu;
	pthread_cond_t work;
	pthread_cond_t done;
	int cap;
	struct io_op **jobs;         /* [cap] ring of ops waiting for a worker */
	int jobs_head, jobs_count;
	struct io_op **finished;     /* [cap] ring of ops with kres set */
	int fin_head, fin_count;
	bool stop;
	int n_threads;
	pthread_t threads[PREAD_POOL_THREADS_MAX];
};

static void *pread_pool_worker(void *arg)
{
	struct pread_pool *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->jobs_count == 0)
			pthread_cond_wait(&p->work, &p->mu);
		if (p->jobs_count == 0)
			break; /* stop, and nothing left to do */
		struct io_op *op = p->jobs[p->jobs_head];
		p->jobs_head = (p->jobs_head + 1) % p->cap;
		p->jobs_count--;
		pthread_mutex_unlock(&p->mu);

		uint64_t off = op->offset + op->done_bytes;
		ssize_t n = pread(op->fd, op->buf + op->done_bytes, op->len_bytes - op->done_bytes,
				  (off_t)off);
		op->kres = n < 0 ? -errno : (int)n;

		pthread_mutex_lock(&p->mu);
		p->finished[(p->fin_head + p->fin_count) % p->cap] = op;
		p->fin_count++;
		pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int pread_pool_init(struct pread_pool **out, int n_threads, int cap)
{
	*out = NULL;
	struct pread_pool *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	if (n_threads < 1)
		n_threads = 1;
	if (n_threads > PREAD_POOL_THREADS_MAX)
		n_threads = PREAD_POOL_THREADS_MAX;
	p->cap = cap;
	p->jobs = calloc((size_t)cap, sizeof *p->jobs);
	p->finished = calloc((size_t)cap, sizeof *p->finished);
	if (!p->jobs || !p->finished) {
		free(p->jobs);
		free(p->finished);
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 0; i < n_threads; i++) {
		int rc = pthread_create(&p->threads[i], NULL, pread_pool_worker, p);
		if (rc) {
			pread_pool_free(p);
			return -rc;
		}
		p->n_threads++;
	}
	*out = p;
	return 0;
}

void pread_pool_free(struct pread_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	free(p->jobs);
	free(p->finished);
	free(p);
}

void pread_pool_submit(struct pread_pool *p, struct io_op *op)
{
	pthread_mutex_lock(&p->mu);
	p->jobs[(p->jobs_head + p->jobs_count) % p->cap] = op;
	p->jobs_count++;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->mu);
}

int pread_pool_reap(struct pread_pool *p, struct io_op **out, int max, bool wait)
{
	int n = 0;
	pthread_mutex_lock(&p->mu);
	while (wait && p->fin_count == 0)
		pthread_cond_wait(&p->done, &p->mu);
	while (n < max && p->fin_count > 0) {
		out[n++] = p->finished[p->fin_head];
		p->fin_head = (p->fin_head + 1) % p->cap;
		p->fin_count--;
	}
	pthread_mutex_unlock(&p->mu);
	return n;
}
