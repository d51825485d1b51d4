/*
 * threadpool — n - 1 pthread workers plus the calling thread, running one
 * parallel-for at a time.
 *
 * Protocol for one run (generation g):
 *   caller: writes fn/ctx/n_tasks, resets next_task and n_finished, then
 *           publishes generation g (release) and wakes sleepers;
 *   every thread, caller included: claims task indices from next_task with
 *           fetch_add until they run out, then increments n_finished;
 *   caller: returns once n_finished == size.
 * Because the caller waits for every worker to check out, no worker can
 * still be claiming from run g when run g + 1 resets the counters, so each
 * task runs exactly once. Workers spin for a short while after a run (a
 * decode step issues runs back to back) and then sleep on a condvar.
 */
#include "compute/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
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

	atomic_int next_task;
	atomic_int n_finished;
	atomic_uint generation;
	atomic_bool stop;

	pthread_mutex_t lock;
	pthread_cond_t wake;
};

static void threadpool_work(struct threadpool *pool, int thread)
{
	for (;;) {
		int task = atomic_fetch_add_explicit(&pool->next_task, 1, memory_order_relaxed);
		if (task >= pool->n_tasks)
			break;
		pool->fn(pool->ctx, task, thread);
	}
	atomic_fetch_add_explicit(&pool->n_finished, 1, memory_order_release);
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
		threadpool_work(pool, w->index);
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
	atomic_init(&pool->next_task, 0);
	atomic_init(&pool->n_finished, 0);
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
	pool->fn = fn;
	pool->ctx = ctx;
	pool->n_tasks = n_tasks;
	atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
	atomic_store_explicit(&pool->n_finished, 0, memory_order_relaxed);
	threadpool_publish(pool);
	threadpool_work(pool, 0);
	for (int i = 0;
	     atomic_load_explicit(&pool->n_finished, memory_order_acquire) < pool->size; i++) {
		if (i < THREADPOOL_WAIT_SPIN_ITERS)
			THREADPOOL_PAUSE();
		else
			sched_yield();
	}
}
