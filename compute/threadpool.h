/*
 * threadpool — a fixed set of worker threads that run one parallel-for at a
 * time. Created once at start-up; running work allocates nothing.
 */
#ifndef COLIBRI_COMPUTE_THREADPOOL_H
#define COLIBRI_COMPUTE_THREADPOOL_H

struct threadpool;

/* Task i of n runs fn(ctx, i, thread) exactly once; thread is in [0, size). */
typedef void (*threadpool_task_fn)(void *ctx, int task, int thread);

/* Starts n_threads - 1 workers (the caller is thread 0). n_threads >= 1.
 * The caller owns *out and frees it with threadpool_free. Returns 0 or -errno. */
int threadpool_init(struct threadpool **out, int n_threads);
void threadpool_free(struct threadpool *pool);
int threadpool_size(const struct threadpool *pool);

/* Runs n_tasks tasks across the pool and returns when all are done.
 * Not reentrant: fn must not call threadpool_run on the same pool. */
void threadpool_run(struct threadpool *pool, threadpool_task_fn fn, void *ctx, int n_tasks);

#endif
