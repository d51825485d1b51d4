/*
 * test_threadpool — compute/threadpool.h: every task of a run executes
 * exactly once and on a valid thread index, over many back-to-back runs
 * (which exercises the hand-off between generations), with pools of one to
 * several threads, with more threads than tasks, and after workers have had
 * time to fall asleep.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "compute/threadpool.h"
#include "tests/test_util.h"

#define MAX_TASKS 1000

struct count_ctx {
	atomic_int hits[MAX_TASKS];
	atomic_int bad_thread;
	int size;
};

static void count_task(void *ctx, int task, int thread)
{
	struct count_ctx *c = ctx;
	atomic_fetch_add(&c->hits[task], 1);
	if (thread < 0 || thread >= c->size)
		atomic_fetch_add(&c->bad_thread, 1);
}

static void run_and_check(struct threadpool *pool, struct count_ctx *c, int n_tasks)
{
	for (int i = 0; i < MAX_TASKS; i++)
		atomic_store(&c->hits[i], 0);
	atomic_store(&c->bad_thread, 0);
	c->size = threadpool_size(pool);
	threadpool_run(pool, count_task, c, n_tasks);
	for (int i = 0; i < MAX_TASKS; i++)
		cr_assert_eq(atomic_load(&c->hits[i]), i < n_tasks ? 1 : 0,
			     "task %d of %d ran %d times", i, n_tasks, atomic_load(&c->hits[i]));
	cr_assert_eq(atomic_load(&c->bad_thread), 0);
}

static void check_pool(int n_threads, int n_runs)
{
	struct threadpool *pool;
	static struct count_ctx c;
	cr_assert_eq(threadpool_init(&pool, n_threads), 0);
	cr_assert_eq(threadpool_size(pool), n_threads);
	for (int r = 0; r < n_runs; r++)
		run_and_check(pool, &c, (r * 37) % MAX_TASKS + 1);
	threadpool_free(pool);
}

Test(threadpool, pool_of_one)
{
	check_pool(1, 50);
}

Test(threadpool, repeated_runs)
{
	check_pool(2, 2000);
	check_pool(3, 500);
}

Test(threadpool, more_threads_than_tasks)
{
	struct threadpool *pool;
	static struct count_ctx c;
	cr_assert_eq(threadpool_init(&pool, 6), 0);
	for (int r = 0; r < 200; r++)
		run_and_check(pool, &c, 1 + r % 3);
	run_and_check(pool, &c, 0);
	threadpool_free(pool);
}

Test(threadpool, runs_after_workers_sleep)
{
	struct threadpool *pool;
	static struct count_ctx c;
	cr_assert_eq(threadpool_init(&pool, 3), 0);
	for (int r = 0; r < 4; r++) {
		struct timespec ts = { .tv_sec = 0, .tv_nsec = 30 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		run_and_check(pool, &c, 100);
	}
	threadpool_free(pool);
}

Test(threadpool, rejects_zero_threads)
{
	struct threadpool *pool = (struct threadpool *)1;
	cr_assert_eq(threadpool_init(&pool, 0), -EINVAL);
	cr_assert_null(pool);
	threadpool_free(NULL);
	cr_assert_eq(threadpool_size(NULL), 1);
}
