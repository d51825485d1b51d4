/*
 * threadpool — n - 1 pthread workers plus the calling thread, running one
 * parallel-for at a time.
 *
 * Protocol for one run (generation g):
 *   caller: closes the work word to (g, CLOSED) so no late thread of run
 *           g - 1 can claim, writes fn/ctx/n_tasks, opens the word at
 *           (g, 0), then publishes generation g and wakes sleepers;
 *   every thread, caller included: claims task indices by compare-and-swap
 *           on the work word, which carries the generation, so a claim made
 *           with a stale generation fails; counts each finished task;
 *   caller: returns once every task of run g has finished.
 * The caller never waits for a worker that has not started (descheduled by
 * another process, or still waking): it takes the remaining tasks itself.
 * That matters on a busy machine, where waiting for every worker to check
 * in would cost a scheduler quantum per kernel. Workers spin for a short
 * while after a run (a decode step issues runs back to back) and then sleep
 * on a condvar.
 */
#include "compute/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define THREADPOOL_PAUSE() _mm_pause()
#else
#define THREADPOOL_PAUSE() ((void)0)
#endif

/* About a millisecond of pause instructions on current x86 cores. */
#define THREADPOOL_SPIN_ITERS 20000
/* The caller spins this long before yielding the core to a late worker. */
#define THREADPOOL_WAIT_SPIN_ITERS 2000

struct threadpool_worker {
	struct threadpool *pool;
	pthread_t thread;
	int index;
};

struct threadpool {
	int size;
	struct threadpool_worker *workers; /* [size - 1] */

	threadpool_task_fn fn;
	void *ctx;
	int n_tasks;

	_Atomic uint64_t work;       /* generation << 32 | next task index */
	atomic_int n_done;           /* tasks of the current run finished */
	atomic_uint generation;
	atomic_bool stop;

	pthread_mutex_t lock;
	pthread_cond_t wake;
};

#define THREADPOOL_CLOSED 0xffffffffu

/* Claims and runs tasks of run `gen` until none is left or the run is over. */
static void threadpool_work(struct threadpool *pool, int thread, unsigned gen)
{
	uint64_t w = atomic_load_explicit(&pool->work, memory_order_acquire);
	for (;;) {
		uint32_t task = (uint32_t)w;
		if ((unsigned)(w >> 32) != gen || task == THREADPOOL_CLOSED || task >= (uint32_t)pool->n_tasks)
			return;
		if (!atomic_compare_exchange_weak_explicit(&pool->work, &w, w + 1, memory_order_acq_rel,
							   memory_order_acquire))
			continue; /* w now holds the current word */
		pool->fn(pool->ctx, (int)task, thread);
		atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_release);
		w = atomic_load_explicit(&pool->work, memory_order_acquire);
	}
}

/* Waits until the generation differs from seen; returns the new one. */
static unsigned threadpool_wait_generation(struct threadpool *pool, unsigned seen)
{
	for (int i = 0; i < THREADPOOL_SPIN_ITERS; i++) {
		unsigned g = atomic_load_explicit(&pool->generation, memory_order_acquire);
		if (g != seen)
			return g;
		THREADPOOL_PAUSE();
	}
	pthread_mutex_lock(&pool->lock);
	unsigned g;
	while ((g = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen)
		pthread_cond_wait(&pool->wake, &pool->lock);
	pthread_mutex_unlock(&pool->lock);
	return g;
}

static void *threadpool_worker_main(void *arg)
{
	struct threadpool_worker *w = arg;
	struct threadpool *pool = w->pool;
	unsigned seen = 0;
	for (;;) {
		seen = threadpool_wait_generation(pool, seen);
		if (atomic_load_explicit(&pool->stop, memory_order_acquire))
			return NULL;
		threadpool_work(pool, w->index, seen);
	}
}

/* Publishes a new generation and wakes any sleeping worker. Taking the lock
 * orders the store against a worker that is between its last check and
 * pthread_cond_wait, so no wake-up is lost. */
static void threadpool_publish(struct threadpool *pool)
{
	pthread_mutex_lock(&pool->lock);
	atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
	pthread_cond_broadcast(&pool->wake);
	pthread_mutex_unlock(&pool->lock);
}

int threadpool_init(struct threadpool **out, int n_threads)
{
	int err = 0;
	*out = NULL;
	if (n_threads < 1)
		return -EINVAL;
	struct threadpool *pool = calloc(1, sizeof *pool);
	if (!pool)
		return -ENOMEM;
	pool->size = 1;
	atomic_init(&pool->work, (uint64_t)THREADPOOL_CLOSED);
	atomic_init(&pool->n_done, 0);
	atomic_init(&pool->generation, 0);
	atomic_init(&pool->stop, false);
	if ((err = -pthread_mutex_init(&pool->lock, NULL)) != 0) {
		free(pool);
		return err;
	}
	if ((err = -pthread_cond_init(&pool->wake, NULL)) != 0) {
		pthread_mutex_destroy(&pool->lock);
		free(pool);
		return err;
	}
	if (n_threads > 1) {
		pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
		if (!pool->workers) {
			err = -ENOMEM;
			goto fail;
		}
	}
	for (int i = 1; i < n_threads; i++) {
		struct threadpool_worker *w = &pool->workers[i - 1];
		w->pool = pool;
		w->index = i;
		if ((err = -pthread_create(&w->thread, NULL, threadpool_worker_main, w)) != 0)
			goto fail;
		pool->size = i + 1;
	}
	*out = pool;
	return 0;
fail:
	threadpool_free(pool);
	return err;
}

void threadpool_free(struct threadpool *pool)
{
	if (!pool)
		return;
	atomic_store_explicit(&pool->stop, true, memory_order_release);
	threadpool_publish(pool);
	for (int i = 1; i < pool->size; i++)
		pthread_join(pool->workers[i - 1].thread, NULL);
	pthread_cond_destroy(&pool->wake);
	pthread_mutex_destroy(&pool->lock);
	free(pool->workers);
	free(pool);
}

int threadpool_size(const struct threadpool *pool)
{
	return pool ? pool->size : 1;
}

void threadpool_run(struct threadpool *pool, threadpool_task_fn fn, void *ctx, int n_tasks)
{
	if (n_tasks <= 0)
		return;
	/* With one thread or one task there is nothing to share: skip the
	 * hand-off so small runs cost a plain loop. */
	if (!pool || pool->size == 1 || n_tasks == 1) {
		for (int i = 0; i < n_tasks; i++)
			fn(ctx, i, 0);
		return;
	}
	unsigned gen = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
	atomic_store_explicit(&pool->work, (uint64_t)gen << 32 | THREADPOOL_CLOSED, memory_order_release);
	pool->fn = fn;
	pool->ctx = ctx;
	pool->n_tasks = n_tasks;
	atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
	atomic_store_explicit(&pool->work, (uint64_t)gen << 32, memory_order_release);
	threadpool_publish(pool);
	threadpool_work(pool, 0, gen);
	for (int i = 0; atomic_load_explicit(&pool->n_done, memory_order_acquire) < n_tasks; i++) {
		if (i < THREADPOOL_WAIT_SPIN_ITERS)
			THREADPOOL_PAUSE();
		else
			sched_yield();
	}
}
